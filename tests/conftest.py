"""Shared fixtures: the project's real vocabularies and corpus."""

import contextlib
import os
import re
import subprocess
import warnings

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data")
UNCASED_VOCAB = os.path.join(DATA, "vocab", "bert_uncased.txt")
CHINESE_VOCAB = os.path.join(DATA, "vocab", "bert_chinese.txt")
CORPUS_GLOB = os.path.join(DATA, "corpus", "*.txt.gz")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


@pytest.fixture(scope="session")
def uncased_tokenizer():
    from electra_tf.tokenization import Tokenizer
    return Tokenizer(UNCASED_VOCAB, lower_case=True)


def corpus_lines(limit=None):
    """Non-empty lines of the embedded Austen corpus, in file order."""
    import glob
    import gzip
    lines = []
    for path in sorted(glob.glob(CORPUS_GLOB)):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f if line.strip())
        if limit and len(lines) >= limit:
            return lines[:limit]
    return lines


def chinese_reviews():
    with open(os.path.join(FIXTURES, "zh_reviews.tsv"), encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1)[1] for line in f]


def pytest_configure(config):
    # XLA's CPU backend without LLVM's optimisations, in this process and the scripts the
    # tests start: the tests check XLA's programs (their HLO) and results, not how fast
    # the CPU code it emits runs, and the tests that compile take about 30% less CPU. XLA
    # reads XLA_FLAGS at its first compilation; a user's own XLA_FLAGS are kept.
    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
    # Two logical CPU devices, so tests can use a real MirroredStrategy with 2 replicas.
    # Must happen before TensorFlow initialises its devices.
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


@pytest.fixture(autouse=True)
def no_gin_config_left():
    """Each test leaves no gin bindings behind: a parse that failed half-way keeps the files
    it had read bound, and a later test in the same process would run with them."""
    yield
    import gin
    gin.clear_config()


@contextlib.contextmanager
def functions_run_eagerly():
    """tf.functions run eagerly inside: the step's ops without tracing a graph and
    optimising it. A 2-step run of SMALL took 5 s so against 9-10 s traced (in a process
    that had run one before), and a 6-step run's weights were within 1e-8 of the traced
    run's (rounding: Grappler rewrites some arithmetic). For tests whose subject is what
    a run writes, refuses or restores, and runs that only make a model dir; the tests of
    the step itself (a short run, kill -9 and SIGTERM, replicas, workers, XLA, non-finite
    losses, two-stage's switch) run it traced, as users do."""
    import tensorflow as tf
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        with warnings.catch_warnings():  # tf.data's functions are traced as always
            warnings.filterwarnings("ignore", message="Even though the `tf.config.experimental"
                                    "_run_functions_eagerly` option is set")
            yield
    finally:
        tf.config.run_functions_eagerly(before)


@pytest.fixture
def eager():
    """functions_run_eagerly() for the test."""
    with functions_run_eagerly():
        yield


@pytest.fixture(scope="session")
def mirrored_strategy():
    """The process's MirroredStrategy over the 2 logical CPUs (one for all tests: two over
    the same devices can collide in their collective ops)."""
    from electra_tf.training.strategies import create_strategy
    strategy = create_strategy("mirrored")
    assert strategy.num_replicas_in_sync == 2
    return strategy


@pytest.fixture(scope="session")
def austen_data(tmp_path_factory):
    """Real pre-training TFRecords (L=128) built from two Austen novels, and the metadata."""
    from electra_tf.data.writer import build_pretraining_data
    out = str(tmp_path_factory.mktemp("austen_data"))
    inputs = ",".join(os.path.join(DATA, "corpus", n)
                      for n in ("persuasion.txt.gz", "northangerabbey.txt.gz"))
    metadata = build_pretraining_data(inputs, UNCASED_VOCAB, out, max_seq_length=128,
                                      show_progress=False, log=lambda *_: None)
    return out, metadata


# A very small ELECTRA on the real vocab (30522): seconds per run on 2 cores.
SMALL = ["pretrainer.hidden_size = 32", "pretrainer.num_layers = 1",
         "pretrainer.num_heads = 1", "pretrainer.intermediate_size = 64",
         "pretrainer.embedding_size = 32", "pretrainer.generator_hidden_fraction = 0.5",
         "TRAIN_BATCH_SIZE = 8", "STEPS_PER_LOOP = 2", "CHECKPOINT_EVERY = 4",
         "NUM_TRAIN_STEPS = 6", "WARMUP_STEPS = 2"]


def cased_vocab(path, extra=()) -> str:
    """BERT's uncased vocab with every fifth whole word upper-cased: a vocab of the same
    size that reads as cased (a fifth of its tokens with letters have capitals); `extra`
    tokens take the places of the first [unusedK] (the uncased vocab has no accents)."""
    vocab = open(UNCASED_VOCAB, encoding="utf-8").read().split("\n")
    for k, token in enumerate(extra):
        vocab[vocab.index(f"[unused{k}]")] = token
    for i in range(1000, len(vocab), 5):
        if not vocab[i].startswith(("[", "##")):
            vocab[i] = vocab[i].upper()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab))
    return str(path)


def pretrain(model_dir, data, bindings=(), files=("tiny.gin",), eager=False, lines=None,
             **kwargs):
    """run_pretraining in this process with the gin files and SMALL + bindings; returns
    (its result, the lines it logged: to `lines` if given, for a run that raises). eager:
    inside functions_run_eagerly(), for a run that only makes a model dir for the test."""
    import gin

    from electra_tf import gin_files
    from electra_tf.training import pretraining
    lines = [] if lines is None else lines
    # (the generator's size bound for a model without a generator is refused)
    generator = not re.search(r"OBJECTIVE = 'mlm'|/mlm\.gin|uniform_generator(\.gin| = True)",
                              " ".join([*files, *bindings]))
    gin_files.parse(list(files), [b for b in SMALL if generator or "generator_" not in b]
                    + list(bindings))
    try:
        with functions_run_eagerly() if eager else contextlib.nullcontext():
            result = pretraining.run_pretraining(str(model_dir), data, log=lines.append,
                                                 **kwargs)
    finally:
        gin.clear_config()
    return result, lines


class SmallDisk:
    """A tmpfs mounted at `path` (the disk a write fails on when it is full or read-only):
    `resize(size)` and `read_only()` remount it; it is unmounted when the test ends."""

    def __init__(self, path, size: str):
        self.path = str(path)
        os.makedirs(self.path, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               self.path], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")

    def _remount(self, options: str):
        subprocess.run(["mount", "-o", f"remount,{options}", self.path], check=True)

    def resize(self, size: str):
        self._remount(f"size={size}")

    def read_only(self):
        self._remount("ro")

    def unmount(self):
        subprocess.run(["umount", "-l", self.path], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """A function (size) -> SmallDisk at tmp_path/disk: a real file system that fills up."""
    disks = []

    def mount(size: str) -> SmallDisk:
        disks.append(SmallDisk(tmp_path / f"disk{len(disks)}", size))
        return disks[-1]
    yield mount
    for disk in disks:
        disk.unmount()
