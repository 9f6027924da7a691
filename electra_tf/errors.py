"""The one exception type for mistakes a user can make and fix, and the one line for a write
the disk refused (full, read-only), which the user can fix too."""

import errno
import os
import re


class UserInputError(ValueError):
    """Bad input from the user: a missing file, a config/data mismatch, a corrupt record.

    The message is one sentence that names the input and says how to fix it. Scripts print
    it without a traceback and exit non-zero.
    """


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (its type's name if it has none): the part of a
    library's error that a one-line message quotes."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


# ---------------------------------------------------------------- storage failures

# The OS's words in TensorFlow's file errors ("<path>; No space left on device"), and errno's.
_NO_SPACE = "no space"
_READ_ONLY = "read-only"
_NO_PERMISSION = "no permission"
_TF_REASONS = {"No space left on device": _NO_SPACE, "Disk quota exceeded": _NO_SPACE,
               "Read-only file system": _READ_ONLY, "Permission denied": _NO_PERMISSION,
               "Operation not permitted": _NO_PERMISSION}
_ERRNOS = {errno.ENOSPC: _NO_SPACE, errno.EDQUOT: _NO_SPACE, errno.EROFS: _READ_ONLY,
           errno.EACCES: _NO_PERMISSION, errno.EPERM: _NO_PERMISSION}
# TensorFlow's file errors: "<path>; <the OS's words>" (after a "{{function_node ...}}").
_TF_PATH = r"(?:\}\}\s*)?([^{};]+?); "
_TF_FILE_ERROR = re.compile(_TF_PATH + "(" + "|".join(_TF_REASONS) + ")")
# The names an output is staged under before it is renamed into place, and what each stands
# for: a save's ckpt-N_temp/ (variables_temp/ in a SavedModel) and its .tempstate files,
# TensorFlow's atomic writes' NAME.tmp<32 hex> (the `checkpoint` file, saved_model.pb),
# atomic.temporary_name's NAME.tmp-PID-HEX (staged_dir's with -OWNER after it), an export's
# .tmp-VERSION-OWNER-PID, a fine-tuning trial's trial_K.partial. A user's own "run_temp" is
# none of them.
_STAGED = re.compile(r"(ckpt(?:-\d+)?|variables)_temp|(.*)\.tempstate\d+"
                     r"|(.*)\.tmp[0-9a-f]{32}|(.*)\.tmp-\d+-[0-9a-f]{8}(?:-.+)?"
                     r"|\.tmp-(\d+)-.*|\.tmp-.*"
                     r"|(trial_\d+)\.partial")


def storage_failure(error: BaseException) -> tuple[str, str] | None:
    """(what went wrong, the path) when `error` is a write the disk refused (full, over
    quota, read-only) or a file the user may not read or write, from the OS (OSError) or from
    TensorFlow's file system (its OpErrors say "<path>; <the OS's words>"), else None. The
    path is the output being written, not the temporary name it was staged under."""
    if isinstance(error, OSError) and error.errno in _ERRNOS:
        reason, path = _ERRNOS[error.errno], error.filename
    elif any(c.__name__ == "OpError" for c in type(error).__mro__):
        found = _TF_FILE_ERROR.search((str(error).splitlines() or [""])[0])
        if not found:
            return None
        reason, path = _TF_REASONS[found.group(2)], found.group(1).strip()
    else:
        return None
    if path is None:
        return reason, None
    parts = os.fspath(path).split("/")
    for i, part in enumerate(parts):
        staged = _STAGED.fullmatch(part)
        if staged:
            stem = next((g for g in staged.groups() if g), "")  # what it stands for
            # (a hidden file's temporary, ".running.json.tmp-...": the folder it is in)
            parts = parts[:i] + ([stem] if stem and not stem.startswith(".") else [])
            break
    return reason, "/".join(parts) or "/"


def storage_message(reason: str, path: str | None, flag: str | None) -> str:
    """The one line for storage_failure's (reason, path); `flag` names the option that
    chose the path (`--model_dir`), if one did."""
    where = path or "the output"
    elsewhere = f"another {flag}" if flag else "another place to write to"
    if reason == _NO_SPACE:
        return (f"no space left on the device writing {where}; free some space (or choose "
                f"{elsewhere}) and rerun: what was complete is kept")
    if reason == _READ_ONLY:
        return f"{where} is on a read-only file system; choose {elsewhere}"
    return f"permission denied for {where}; choose {elsewhere} or change its permissions"


_TF_NOT_FOUND = re.compile(_TF_PATH + "No such file or directory")
_SCHEME = re.compile(r"File system scheme '([^']+)' not implemented(?: \(file: '([^']*)'\))?")


def path_failure(error: BaseException) -> str | None:
    """The one line for a path no file system here can reach, else None: one under a
    broken link (a folder link whose target was removed; TensorFlow's or the OS's "No such
    file or directory" named no link), or one of a scheme this TensorFlow has no file system
    for (s3://, hdfs://: its UnimplementedError)."""
    text = first_line(error)
    scheme = _SCHEME.search(text)
    if scheme and any(c.__name__ == "OpError" for c in type(error).__mro__):
        where = f" ({scheme.group(2)})" if scheme.group(2) else ""
        return (f"this TensorFlow cannot read or write {scheme.group(1)}:// paths{where}; use "
                "a local path or gs:// (copy the files, or mount the bucket)")
    if isinstance(error, OSError) and error.errno == errno.ENOENT:
        path = error.filename
    elif any(c.__name__ == "NotFoundError" for c in type(error).__mro__):
        found = _TF_NOT_FOUND.search(text)
        path = found and found.group(1).strip()
    else:
        return None
    path = os.fspath(path) if path else ""
    while path and "://" not in path and path not in ("/", "."):
        if os.path.islink(path) and not os.path.exists(path):
            return (f"{path} is a broken link (to {os.readlink(path)}); create what it "
                    "points to, or choose another path")
        path = os.path.dirname(path)
    return None


# ---------------------------------------------------------------- memory

_OOM = re.compile(r"OOM when allocating tensor with shape\[([^\]]*)\] and type (\w+) on "
                  r"\S*?device:(\w+:\d+)")
_XLA_OOM = re.compile(r"Out of memory while trying to allocate (\d+) bytes")
# A TPU's: "Ran out of memory in memory space hbm. Used 17.62G of 15.48G hbm." and
# "Attempting to reserve 12.29G at the bottom of memory. That was not possible."
_TPU_OOM = re.compile(r"Ran out of memory in memory space (\w+)\.(?: Used (\S+) of (\S+) )?")
_TPU_RESERVE = re.compile(r"Attempting to reserve (\S+) at the bottom of memory")


def out_of_memory(error: BaseException) -> str | None:
    """What could not be allocated ("a float tensor of shape [32,12,512,512] on GPU:0"), when
    `error` is TensorFlow's out-of-memory error (ResourceExhaustedError, also XLA's), else
    None. (A full disk is a ResourceExhaustedError too: storage_failure.)"""
    if not any(c.__name__ == "ResourceExhaustedError" for c in type(error).__mro__):
        return None
    found = _OOM.search(str(error))
    if found:
        return (f"a {found.group(2)} tensor of shape [{found.group(1).replace(',', ', ')}] "
                f"on {found.group(3)}")
    found = _XLA_OOM.search(str(error))
    if found:
        return f"{int(found.group(1)) / 2**30:,.1f} GiB for an XLA-compiled step"
    found = _TPU_OOM.search(str(error))
    if found:
        space = found.group(1).upper()
        if found.group(2):
            return (f"{found.group(2)} of the TPU's {found.group(3)} {space} for the compiled "
                    "step")
        return f"more than the TPU's {space} for the compiled step"
    found = _TPU_RESERVE.search(str(error))
    if found:
        return f"{found.group(1)} of TPU memory for the compiled step"
    return None


# Where a multi-worker collective says why it stopped: "Collective ops is aborted by: CAUSE".
_ABORTED_BY = re.compile(r"Collective ops is aborted by: ([^\n]*)(?:\n([^\n]*))?")


def lost_worker(error: BaseException) -> str | None:
    """Why the cluster's collectives stopped ("recvmsg:Connection reset by peer"), when
    `error` is TensorFlow's UnavailableError from a multi-worker run whose other worker died,
    restarted or cannot be reached, else None (an UnavailableError of a storage service is
    not one)."""
    if not any(c.__name__ == "UnavailableError" for c in type(error).__mro__):
        return None
    text = str(error)
    found = _ABORTED_BY.search(text)
    if found:
        cause = found.group(1).strip()
        if cause.endswith(":") and found.group(2):  # "... unhealthy (stopped ...):\nTASK"
            cause += " " + found.group(2).strip()
        cause = cause.split(". ")[0]
    elif "/job:" in text:  # a cluster's task (a storage service's errors name none)
        cause = text.strip().splitlines()[0]
    else:
        return None
    return cause if len(cause) <= 200 else cause[:197] + "..."
