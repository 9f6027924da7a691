"""The XLA compilation cache's scratch directory (`xla_cache`), staged before TensorFlow
reads its flags; this module imports no TensorFlow, so a script stages it before absl
parses its flags without paying for TensorFlow's import."""

import atexit
import glob
import os
import shutil
import socket
import tempfile

FLAG = "--tf_xla_persistent_cache_directory"
SCRATCH_PREFIX = "electra-xla-cache-"


def stage() -> str | None:
    """Point TensorFlow's cache at a scratch directory of this process (removed at exit);
    returns it, or None where TF_XLA_FLAGS already names a cache directory (the user's).
    Call before absl's app.run (`electra_tf.cli.run` does, with xla_cache=True): importing
    TensorFlow registers a device listing, which reads the flag, for when absl has parsed
    the flags."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if FLAG in flags:
        return None
    _remove_abandoned_scratch()
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{host()}-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ["TF_XLA_FLAGS"] = f"{flags} {FLAG}={scratch}".strip()
    return scratch


def host() -> str:
    """This machine's name, as the scratch directories and temporary files name it."""
    return socket.gethostname().replace("-", "_")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _remove_abandoned_scratch():
    """Scratch directories of this machine's processes that no longer run (killed before
    their exit handler could remove them)."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}*")):
        pid, _, rest = os.path.basename(path)[len(SCRATCH_PREFIX):].partition("-")
        if pid.isdigit() and rest.startswith(f"{host()}-") and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
