"""A persistent cache of the XLA programs a pre-training run compiles, so that a rerun (a
resume after a preemption, or the same run again) loads them instead of compiling for
minutes.

TensorFlow has the mechanism (`--tf_xla_persistent_cache_directory` in TF_XLA_FLAGS: every
program jit_compile builds is written there, keyed by its HLO, and a later process that
builds the same HLO loads it). This module covers what it leaves out:

- TensorFlow reads the flag once, when it first lists devices, and absl's `app.run` does
  that before a script's main can read --model_dir (`import tensorflow` registers a device
  listing to run as soon as absl has parsed the flags). So `stage()` (in `xla_scratch`,
  which imports no TensorFlow), called before `app.run` (`electra_tf.cli.run` with
  xla_cache=True), points TensorFlow at a scratch directory of this process; `attach()`,
  once the run knows its model dir, copies the programs cached there into it, and
  `publish()` (after each loop) copies newly compiled ones back.
- TensorFlow writes an entry in place, not atomically: a process killed while writing leaves
  a truncated file, and loading one fails the run. Entries reach the model dir only whole
  (checked, then copied under a temporary name and renamed), and any incomplete entry found
  there is removed. Programs compiled at once by several devices of one process
  (MirroredStrategy over several GPUs or CPU devices) would write the same scratch file
  together, so those runs go without (TensorFlow still writes the scratch copies, which
  nothing reads and the exit removes), as do two-stage runs (a resumed one traces its stages
  at other points, so their keys differ).
- The key holds the HLO and the device type ("XLA_GPU_JIT"), not the TensorFlow version, the
  GPU model, the CPU's instruction set, XLA_FLAGS (`--xla_gpu_autotune_level` changes the
  program, not the HLO) or op determinism (a build option of GPU programs). So the model
  dir's cache is split by a digest of those (`xla_cache/tf2.20.0-<digest>/`), and a model
  dir moved to another machine compiles afresh.

On loading an entry TensorFlow logs "Error parsing text-format
tensorflow.XlaSerializedCacheEntry": it tries the text format before the binary one the
entry is written in. The line is harmless.
"""

import glob
import hashlib
import json
import os
import platform
import re

import tensorflow as tf

from electra_tf.training.xla_scratch import FLAG, SCRATCH_PREFIX, alive, host, stage  # noqa: F401

SUBDIRECTORY = "xla_cache"
_ENTRY_FIELDS = {1, 2, 3}  # XlaSerializedCacheEntry: key, hlo_module, executable


class Cache:
    """The model dir's cache for this machine, attached to this process's scratch dir."""

    def __init__(self, scratch: str, directory: str, log):
        self.scratch, self.directory, self.log = scratch, directory, log
        self.published = set()

    def publish(self):
        """Copy the programs compiled since the last call into the model dir, whole."""
        for path in glob.glob(os.path.join(self.scratch, "*.pb")):
            name = os.path.basename(path)
            if name in self.published or not is_complete_entry(path):
                continue  # a partial file is still being written
            target = os.path.join(self.directory, name)
            if not tf.io.gfile.exists(target):
                tf.io.gfile.makedirs(self.directory)
                temporary = f"{target}.tmp-{os.getpid()}-{host()}"
                tf.io.gfile.copy(path, temporary, overwrite=True)
                tf.io.gfile.rename(temporary, target, overwrite=True)
                self.log(f"XLA compilation cache: saved {name} for reruns")
            self.published.add(name)


def attach(model_dir: str, strategy: tf.distribute.Strategy, log=print) -> Cache | None:
    """Load this machine's cached programs from `<model_dir>/xla_cache/` into the scratch
    directory `stage()` set up; returns the Cache to `publish()` to, or None where this
    module does not manage the cache: the user's own directory in TF_XLA_FLAGS, TPUs, and
    where it is off (the reason is logged). Call after op determinism is set (it changes
    the programs GPUs compile, not their HLO)."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    match = re.search(rf"{FLAG}=(\S+)", flags)
    scratch = match.group(1) if match else None
    if scratch is None or not os.path.basename(scratch).startswith(SCRATCH_PREFIX):
        if scratch:  # the user's own, where TensorFlow writes in place
            if not re.search(r"--tf_xla_persistent_cache_read_only=(1|true)\b", flags, re.I):
                _remove_incomplete(scratch, log)
            log(f"XLA compilation cache: {scratch} (TF_XLA_FLAGS)")
        else:
            log("XLA compilation cache off: TensorFlow started without it; "
                "electra_tf.training.xla_cache.stage() sets it up before TensorFlow starts "
                "(scripts/run_pretraining.py does)")
        return None
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return None  # the TPU system compiles and caches its programs
    devices = _local_devices(strategy)
    if devices > 1:
        log(f"XLA compilation cache off: {devices} devices of this process compile the same "
            "programs at once, and TensorFlow does not write them atomically")
        return None
    if "://" not in model_dir:
        model_dir = os.path.abspath(model_dir)
    directory = os.path.join(model_dir, SUBDIRECTORY, host_key())
    _remove_abandoned_temporaries(directory)
    # What this process compiled before the run (the scripts' start-up, electra_tf.cli) is
    # not the run's program: never saved in the model dir.
    earlier = {os.path.basename(p) for p in glob.glob(os.path.join(scratch, "*.pb"))}
    loaded = []
    for path in _remove_incomplete(directory, log):
        name = os.path.basename(path)
        tf.io.gfile.copy(path, os.path.join(scratch, name), overwrite=True)
        loaded.append(name)
    cache = Cache(scratch, directory, log)
    cache.published.update(loaded + sorted(earlier))
    log(f"XLA compilation cache: {directory} ({len(loaded)} compiled "
        f"program{'' if len(loaded) == 1 else 's'} from earlier runs"
        + ("; TensorFlow logs 'Error parsing text-format' as it loads one: harmless, it "
           "tries the text format first)" if loaded else ")"))
    return cache


def host_key() -> str:
    """`tf<version>-<digest>`: the digest of what a compiled program depends on beyond its
    HLO (TensorFlow's build, the CPU's model and instruction set, the GPUs and their
    driver, XLA_FLAGS, op determinism)."""
    build = tf.sysconfig.get_build_info()
    facts = {
        "tensorflow": tf.__version__,
        "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
        "machine": platform.machine(),
        "cpu": _cpuinfo_lines(("model name", "cpu family", "model", "flags")),
        "gpus": sorted(_read_lines(path, "Model:")
                       for path in glob.glob("/proc/driver/nvidia/gpus/*/information")),
        "driver": _read_lines("/proc/driver/nvidia/version", "NVRM version:"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "deterministic": _op_determinism(),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
    return f"tf{tf.__version__}-{digest[:12]}"


def is_complete_entry(path: str) -> bool:
    """Whether the file holds a whole XlaSerializedCacheEntry: its top-level protobuf fields
    (key, HLO, executable) run exactly to the end of the file and the executable is not
    empty. A truncated file fails this."""
    size = tf.io.gfile.stat(path).length
    seen = set()
    position = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while position < size:
            tag = _read_varint(f)
            if tag is None:
                return False
            field, wire_type = tag >> 3, tag & 7
            if wire_type == 0:
                if _read_varint(f) is None:
                    return False
                position = f.tell()
            elif wire_type in (1, 2, 5):
                length = {1: 8, 5: 4}.get(wire_type) or _read_varint(f)
                if length is None or (field == 3 and length == 0):
                    return False
                position = f.tell() + length
                if position > size:
                    return False
                f.seek(position)
            else:
                return False
            seen.add(field)
    return position == size and _ENTRY_FIELDS <= seen


def _remove_incomplete(directory: str, log) -> list[str]:
    """Removes the directory's incomplete entries; returns the whole ones."""
    whole = []
    for path in _entries(directory):
        if is_complete_entry(path):
            whole.append(path)
        else:
            tf.io.gfile.remove(path)
            log(f"XLA compilation cache: removed {os.path.basename(path)}, an incomplete "
                "entry")
    return whole


def _remove_abandoned_temporaries(directory: str):
    """Copies `publish` left half done when its process was killed."""
    if not tf.io.gfile.isdir(directory):
        return
    for path in tf.io.gfile.glob(os.path.join(directory, f"*.pb.tmp-*-{host()}")):
        pid = path.rsplit(".tmp-", 1)[1].split("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            tf.io.gfile.remove(path)


def _entries(directory: str) -> list[str]:
    if not tf.io.gfile.isdir(directory):
        return []
    return sorted(tf.io.gfile.glob(os.path.join(directory, "*.pb")))


def _read_varint(f) -> int | None:
    value = shift = 0
    while shift <= 63:
        byte = f.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        shift += 7
        if byte[0] < 0x80:
            return value
    return None


def _op_determinism() -> bool:
    from tensorflow.python.framework import config  # not in the public API
    return config.is_op_determinism_enabled()


def _local_devices(strategy: tf.distribute.Strategy) -> int:
    try:
        return len(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one device
        return 1


def _cpuinfo_lines(names) -> list[str]:
    lines = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                if line.split(":")[0].strip() in names:
                    lines.append(line.strip())
    except OSError:
        pass
    return lines


def _read_lines(path: str, start: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return " ".join(line.strip() for line in f if line.startswith(start))
    except OSError:
        return ""
