"""electra-tf: ELECTRA pre-training, fine-tuning and serving in TensorFlow 2 / Keras 3."""

from setuptools import find_packages, setup

# One pinned stack (see BUILD.md). TF 2.20 matches the newest Cloud TPU build
# (tensorflow-tpu 2.20.0); keras 3 is used everywhere (never tf.keras).
INSTALL_REQUIRES = [
    "tensorflow==2.20.0",
    "tensorflow-text==2.20.1",
    "keras==3.15.1",
    "tf-models-official==2.20.0",  # for orbit, the custom-training-loop driver
    "gin-config==0.5.0",
    "absl-py==1.4.0",
    "tensorboard==2.20.0",
    # TensorBoard 2.20 imports pkg_resources, which setuptools 82 removed (`tensorboard`
    # failed with ModuleNotFoundError once torch, a test dependency, pulled in setuptools
    # 84); 80.8 is the newest that has it without a warning at each start, and it meets
    # torch's setuptools>=77.0.3.
    "setuptools==80.8.0",
    "numpy>=1.26,<3",
    # Rust WordPiece trainer behind scripts/learn_vocab.py: minutes on GBs of text, where
    # tensorflow-text's pure-Python vocab learner takes hours.
    "tokenizers==0.22.2",
    # TF Serving's own protos: the SavedModel's warmup requests (PredictionLog records) and
    # models.config are written with them rather than by hand.
    "tensorflow-serving-api==2.20.0",
    # HuggingFace weights in and out (model.safetensors) without needing torch.
    "safetensors==0.8.0",
]

EXTRAS_REQUIRE = {
    # Chinese word segmentation for whole-word masking (build_pretraining_data.py
    # --word_segmenter=jieba): the de facto standard segmenter, pure Python, MIT.
    "zh": ["jieba==0.42.1"],
    "test": [
        "jieba==0.42.1",
        # Not 9.2: its nodeid change makes pytest-xdist's --dist loadgroup ignore the
        # xdist_group marks (pytest-dev/pytest-xdist#1386), so test_study's and test_export's
        # module fixtures (minutes) would be built on both workers.
        "pytest==9.1.1",
        # Two test processes on CI's two cores: the suite is mostly single-threaded work
        # (tracing, XLA compiles, subprocesses starting TensorFlow), 29 -> 20 minutes.
        "pytest-xdist==3.8.0",
        # Reference implementations for parity tests. transformers 4.x keeps the TF1
        # checkpoint loader that v5 removed; torch is the CPU build.
        "transformers==4.57.6",
        "torch==2.13.0",
        # Plots of benchmarks and studies (reference curves, the paper's claims).
        "matplotlib==3.11.2",
        # Reference metrics for the fine-tuning tests: accuracy/F1/MCC (scikit-learn),
        # Pearson/Spearman (SciPy), conlleval span F1 (seqeval).
        "scikit-learn==1.9.1",
        "scipy==1.17.1",
        "seqeval==1.2.2",
    ],
}

setup(
    name="electra-tf",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["electra_tf", "electra_tf.*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
