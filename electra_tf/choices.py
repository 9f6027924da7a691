"""The choices and defaults of the scripts' flags, in a module that imports no TensorFlow.

A script defines its flags from these and imports the library (and so TensorFlow, ~5 s) in
its main, after absl has parsed them: a mistyped flag, a missing one or --help answers in a
fraction of a second. The library modules that act on a choice import it from here.
"""

# tf.distribute strategies (electra_tf.training.strategies).
STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")

# Raw-text input formats (electra_tf.data.corpus).
TEXT = "text"
JSONL = "jsonl"
INPUT_FORMATS = (TEXT, JSONL)
# Uncompressed input files larger than this are split into pieces read in parallel.
PIECE_BYTES = 64 << 20

# Word segmenters for whole-word masking of Chinese (electra_tf.data.writer).
WORD_SEGMENTERS = ("none", "jieba")

# The networks a SavedModel serves (electra_tf.export.saved_model).
EXPORT_KINDS = ("discriminator", "generator", "encoder", "task")

# Model sizes (electra_tf.modeling.config.SIZES, whose keys a test checks against these).
MODEL_SIZES = ("tiny", "small", "base", "large")

# The seeds that seed a run (keras.utils.set_random_seed: numpy's legacy seeding takes 0 to
# 2**32 - 1); a script's --seed flag is bounded so.
SEED_BOUNDS = {"lower_bound": 0, "upper_bound": 2**32 - 1}
