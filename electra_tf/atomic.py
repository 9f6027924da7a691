"""Writing outputs so that a reader never sees a partial one and a failed write leaves
nothing behind: everything is written under a temporary name beside its target (marked
`.tmp-`, which the readers of build outputs skip) and renamed into place. Paths may be
local or any tf.io.gfile filesystem (gs://...)."""

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import sys
import uuid

import tensorflow as tf

from electra_tf.errors import UserInputError


def _exchange(a: str, b: str) -> bool:
    """Swaps two local folders in one step (Linux's renameat2 RENAME_EXCHANGE), so that a
    reader of `b` (TF Serving polling a model's versions) never finds it missing, as it
    would between renaming the old one aside and the new one in; False where the system,
    the C library or the file system cannot (the caller renames in two steps)."""
    if "://" in a or "://" in b or not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None), "renameat2", None)
    if renameat2 is None:  # (glibc before 2.28, musl)
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def temporary_name(path: str) -> str:
    """A name beside `path` no other process or thread is writing."""
    return f"{path.rstrip('/')}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def absolute(path: str) -> str:
    """A local path made absolute and normalised; a URL (gs://...) as it is, less a
    trailing slash."""
    return path.rstrip("/") if "://" in path else os.path.abspath(path)


def write_text(path: str, text: str, overwrite: bool = True) -> None:
    """Writes `text` (UTF-8) to `path`, creating its folder. Readers see the old file or the
    whole new one. With overwrite=False an existing `path` raises tf.errors.AlreadyExistsError
    (checked at the rename: a file created meanwhile is not replaced)."""
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    temporary = temporary_name(path)
    try:
        with tf.io.gfile.GFile(temporary, "w") as f:
            f.write(text)
        tf.io.gfile.rename(temporary, path, overwrite=overwrite)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.remove(temporary)


WILDCARDS = "*?["


def check_no_wildcards(path: str, what: str, fix: str = "choose a path without * ? [",
                       wildcards: str = WILDCARDS) -> None:
    """A folder that holds checkpoints may not have a glob wildcard in its path: TensorFlow
    finds a checkpoint's files, and CheckpointManager the checkpoints to delete, by patterns
    built from it (`run[1]/ckpt-40*` matches nothing, so a rerun starts again from step 0;
    `a*b/ckpt-*_temp` is another run's files too)."""
    found = next((c for c in path if c in wildcards), None)
    if found:
        raise UserInputError(f"{what} has '{found}' in its path, which TensorFlow reads as a "
                             f"wildcard where it looks for checkpoint files; {fix}")


def check_folder(folder: str, flag: str = "--model_dir") -> None:
    """A folder to write into that is a file, or inside one, or whose path has a wildcard
    (check_no_wildcards), fails at once, as one line naming `flag` (not at the first write,
    with a traceback)."""
    check_no_wildcards(folder, f"{flag}={folder}")
    path = folder.rstrip("/") or "/"
    while True:
        if tf.io.gfile.exists(path):
            if not tf.io.gfile.isdir(path):
                raise UserInputError(
                    f"{flag}={folder} is a file, not a folder; choose another {flag}"
                    if path == folder.rstrip("/") else
                    f"{flag}={folder} is inside {path}, a file; choose another {flag}")
            return
        parent = os.path.dirname(path)
        if "://" in folder or parent in (path, ""):  # an object store has no files above
            return
        path = parent


@contextlib.contextmanager
def staged_dir(path: str, temporary: str | None = None, replace: bool = True,
               aside: str | None = None):
    """Yields a temporary folder beside `path` to fill (`temporary`, default
    temporary_name(path)); when the block ends without an exception the folder becomes
    `path`, else it is removed. A folder already at `path` (the caller has checked that it
    may be replaced) is swapped with the new one in one step where the system can
    (`_exchange`: local Linux folders), then deleted; elsewhere it is renamed aside first
    (to `aside`, default a temporary_name) and deleted only once the new one is in place:
    if that fails, it is put back (a process killed between the renames leaves it at
    `aside`, for the caller's next run to find).
    The default temporary is named for this machine's process (PATH.tmp-PID-HEX-OWNER): one
    a killed process of this machine left for `path` is removed by the next staged_dir.
    With replace=False a folder found at `path` when the block ends (another process wrote
    it meanwhile) is left as it is and FileExistsError (filename `path`) is raised. (On
    object stores such as gs:// a folder's rename copies it object by object, so there a
    reader may see it partly written.)"""
    path = path.rstrip("/")
    if temporary is None and "://" not in path:
        # Named for this machine, so that a later run here can tell the one a killed
        # process left (hundreds of MB for a converted model) and remove it.
        _remove_abandoned_staging(path)
        temporary = f"{temporary_name(path)}-{owner()}"
    temporary = temporary or temporary_name(path)
    if tf.io.gfile.exists(temporary):  # a given name, left by a killed run
        tf.io.gfile.rmtree(temporary)
    # The folders above it that this makes: removed again, if still empty, when it fails
    # (an export that failed on a full disk left an empty EXPORT_DIR/MODEL_NAME/).
    created, parent = [], os.path.dirname(temporary)
    while "://" not in path and parent not in ("", "/") and not os.path.exists(parent):
        created.append(parent)
        parent = os.path.dirname(parent)
    moved = False
    try:
        tf.io.gfile.makedirs(temporary)
        yield temporary
        old = (aside or temporary_name(path)) if tf.io.gfile.exists(path) else None
        if old and not replace:
            raise FileExistsError(errno.EEXIST, "written while this one was staged", path)
        if old and _exchange(temporary, path):
            moved = True  # (the old folder, now at `temporary`, is removed below)
        else:
            if old:
                tf.io.gfile.rename(path, old)
            try:
                tf.io.gfile.rename(temporary, path)
            except BaseException:
                if old and not tf.io.gfile.exists(path):
                    tf.io.gfile.rename(old, path)
                if not replace and tf.io.gfile.exists(path):  # appeared since the check
                    raise FileExistsError(errno.EEXIST, "written while this one was staged",
                                          path) from None
                raise
            moved = True
            if old:
                tf.io.gfile.rmtree(old)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.rmtree(temporary)
        for folder in created if not moved else ():
            try:
                os.rmdir(folder)  # (local: only if still empty)
            except OSError:
                break


def _remove_abandoned_staging(path: str) -> None:
    """Removes the folders staged_dir staged for `path` (PATH.tmp-PID-HEX-OWNER) in
    processes of this machine that no longer run (killed: SIGKILL runs no clean-up). One of
    another machine or container, or whose PID runs (its own, or one reusing it), is left."""
    folder, name = os.path.split(path)
    pattern = re.compile(re.escape(name) + r"\.tmp-(\d+)-[0-9a-f]{8}-" + re.escape(owner()))
    from electra_tf.training import xla_scratch
    for other in os.listdir(folder or ".") if os.path.isdir(folder or ".") else ():
        found = pattern.fullmatch(other)
        if found and not xla_scratch.alive(int(found.group(1))):
            # (another run may be removing it too)
            shutil.rmtree(os.path.join(folder, other), ignore_errors=True)


RUNNING = ".running.json"  # in a model dir: the run writing it (`hold`)


def owner() -> str:
    """Who may tell whether a process of this machine runs: its host name and systemd's
    /etc/machine-id, where there is one (machines sharing a host name and an NFS folder
    differ there), and its PID namespace (containers sharing a host name, and often their
    image's machine id, number their processes apart)."""
    from electra_tf.training import xla_scratch
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    try:
        with open("/etc/machine-id", encoding="ascii") as f:
            machine = re.sub(r"[^0-9a-f]", "", f.read().lower())[:12]
    except (OSError, ValueError):
        machine = ""
    return f"{xla_scratch.host()}_{machine}{'_' if machine else ''}{namespace}"


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's 22nd field),
    which tells a process from a later one given its PID; None where /proc has no such."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextlib.contextmanager
def hold(folder: str, script: str, flag: str = "--model_dir"):
    """Marks `folder` as written by this process while the block runs (RUNNING in it), so
    that a second run started on it meanwhile (the same command twice, a scheduler's restart
    while the first still runs) stops in one line instead of interleaving its checkpoints
    and deleting the other's trials. A mark whose process has ended (killed, even by
    SIGKILL) or that another machine wrote (its processes cannot be seen from here: a
    resumed preempted run) is taken over."""
    path = os.path.join(folder, RUNNING)
    me = {"owner": owner(), "pid": os.getpid(), "started": _started(os.getpid()),
          "script": script, "token": uuid.uuid4().hex[:12], "folder": _real(folder)}
    other = _mark(path)
    if other and all(other.get(k) == me[k] for k in ("owner", "pid", "started")):
        yield  # this process holds it already (a run within a run): its holder removes it
        return
    _refuse_if_running(other, me, folder, flag, path)
    created = not tf.io.gfile.exists(folder)
    try:
        write_text(path, json.dumps(me), overwrite=other is not None)
    except tf.errors.AlreadyExistsError:  # another run's mark, written since the read above
        _refuse_if_running(_mark(path), me, folder, flag, path)
        write_text(path, json.dumps(me))
    try:
        yield
    finally:
        if _mark(path) == me:
            tf.io.gfile.remove(path)
            if created and not tf.io.gfile.listdir(folder):  # a run that wrote nothing
                tf.io.gfile.rmtree(folder)


def _real(folder: str) -> str:
    """The folder a mark is for: a local one's real path (a symlink, a relative path and
    the folder itself are one), a remote one without repeated or trailing slashes."""
    if "://" in folder:
        scheme, rest = folder.split("://", 1)
        return f"{scheme}://{re.sub('/+', '/', rest).rstrip('/')}"
    return os.path.realpath(folder)


def _copied(other: dict, me: dict) -> bool:
    """Whether the mark `other` came with a copy of its folder: it names another folder,
    which is still there and is not this one (a bind mount or a second mount of one NFS
    export names the same folder otherwise)."""
    theirs, mine = other.get("folder"), me["folder"]
    if not isinstance(theirs, str) or theirs == mine:  # (a mark from before: none)
        return False
    if "://" in mine:
        return "://" in theirs and tf.io.gfile.isdir(theirs)
    try:
        return not os.path.samefile(theirs, mine)
    except OSError:  # gone (moved: `mv` of the folder): not a copy
        return False


def _mark(path: str) -> dict | None:
    try:
        with tf.io.gfile.GFile(path) as f:
            mark = json.loads(f.read())
    except (tf.errors.OpError, ValueError):  # none, or not one of ours
        return None
    return mark if isinstance(mark, dict) else None


def _refuse_if_running(other, me, folder, flag, path):
    """UserInputError if the mark `other` is a running process of this machine's."""
    if (other and other.get("owner") == me["owner"] and isinstance(other.get("pid"), int)
            and other["pid"] != me["pid"]):
        from electra_tf.training import xla_scratch
        if xla_scratch.alive(other["pid"]) and other.get("started") in (
                None, _started(other["pid"])):
            if _copied(other, me):
                raise UserInputError(
                    f"{flag}={folder} holds the mark of a {other.get('script', 'run')} writing "
                    f"another folder, {other['folder']} (PID {other['pid']}): a copy made "
                    "while that run wrote it, which may hold part of a file; copy it again "
                    f"once the run has ended, or delete {path} to go on from this copy as it "
                    "is")
            raise UserInputError(
                f"{flag}={folder} is being written by another {other.get('script', 'run')} "
                f"(PID {other['pid']}) on this machine; wait for it to end or stop it, or "
                f"choose another {flag} (if no such run is going, delete {path})")
