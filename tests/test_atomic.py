"""Atomic writes: a reader sees the old output or the whole new one, and a failed write
leaves neither a partial output nor its temporary."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf import atomic
from electra_tf.errors import UserInputError


def test_write_text_replaces_whole_and_refuses_to_overwrite_when_asked(tmp_path):
    path = str(tmp_path / "sub" / "info.json")
    atomic.write_text(path, "first ünïcode\n")  # creates the folder
    atomic.write_text(path, "second")
    assert open(path, encoding="utf-8").read() == "second"
    with pytest.raises(tf.errors.AlreadyExistsError):
        atomic.write_text(path, "third", overwrite=False)
    assert open(path).read() == "second"
    assert os.listdir(tmp_path / "sub") == ["info.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "info.json")
    atomic.write_text(path, "kept")
    with pytest.raises(UnicodeEncodeError):
        atomic.write_text(path, "x" * 100_000 + "\ud800")  # a lone surrogate: not UTF-8
    assert open(path).read() == "kept"
    assert os.listdir(tmp_path) == ["info.json"]


def test_temporary_names_differ_between_writers(tmp_path):
    names = {atomic.temporary_name(str(tmp_path / "a")) for _ in range(100)}
    assert len(names) == 100
    assert all(".tmp-" in os.path.basename(n) for n in names)


def test_staged_dir_appears_whole_or_not_at_all(tmp_path):
    target = str(tmp_path / "model")
    os.mkdir(target)  # an empty folder there is replaced
    with atomic.staged_dir(target + "/") as temporary:
        assert not os.path.exists(os.path.join(target, "a.txt"))
        open(os.path.join(temporary, "a.txt"), "w").write("a")
    assert os.listdir(target) == ["a.txt"]
    failed = str(tmp_path / "failed")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic.staged_dir(failed) as temporary:
            open(os.path.join(temporary, "half.txt"), "w").write("half")
            raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path)) == ["model"]
    # The folders it made above the target go with a failure, unless something is in them.
    with pytest.raises(RuntimeError):
        with atomic.staged_dir(str(tmp_path / "exports" / "electra" / "1")):
            raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path)) == ["model"]
    with pytest.raises(RuntimeError):
        with atomic.staged_dir(str(tmp_path / "exports" / "electra" / "1")):
            open(tmp_path / "exports" / "notes.txt", "w").write("mine")  # meanwhile
            raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path / "exports")) == ["notes.txt"]


def test_staged_dir_removes_what_a_killed_process_of_this_machine_staged(tmp_path):
    """SIGKILL runs no clean-up: the folder a killed conversion was filling stayed beside
    its output (85 MB for ELECTRA-Small). The next staging of that output removes it, not
    another output's, nor one of a process that runs, nor one another machine staged."""
    target = str(tmp_path / "model")
    code = ("import os, sys, time; from electra_tf import atomic\n"
            "with atomic.staged_dir(sys.argv[1]) as t:\n"
            "    open(os.path.join(t, 'half.bin'), 'w').write('x'); print(t, flush=True)\n"
            "    time.sleep(600)\n")
    running = subprocess.Popen([sys.executable, "-c", code, target], stdout=subprocess.PIPE,
                               text=True)
    try:
        in_use = running.stdout.readline().strip()
        killed = subprocess.Popen([sys.executable, "-c", code, target],
                                  stdout=subprocess.PIPE, text=True)
        left = killed.stdout.readline().strip()
        killed.kill()
        killed.wait()
        others = [target + ".tmp-1234-0123abcd-another_host_42",  # another machine's
                  str(tmp_path / "modelx") + left[len(target):]]  # another output's
        for folder in others:
            os.mkdir(folder)
        assert os.path.basename(left).startswith("model.tmp-") and os.path.isdir(left)
        with atomic.staged_dir(target) as temporary:
            open(os.path.join(temporary, "whole.bin"), "w").write("x")
        assert sorted(os.listdir(tmp_path)) == sorted(
            ["model", os.path.basename(in_use)] + [os.path.basename(f) for f in others])
        assert os.listdir(target) == ["whole.bin"]
    finally:
        running.kill()
        running.wait()


def test_staged_dir_without_replace_keeps_a_folder_written_meanwhile(tmp_path):
    target = tmp_path / "1"
    with pytest.raises(FileExistsError) as error:
        with atomic.staged_dir(str(target), replace=False) as temporary:
            open(os.path.join(temporary, "saved_model.pb"), "w").write("mine")
            target.mkdir()  # another writer's, finished first
            (target / "saved_model.pb").write_text("theirs")
    assert error.value.filename == str(target)
    assert os.listdir(tmp_path) == ["1"]
    assert (target / "saved_model.pb").read_text() == "theirs"
    with atomic.staged_dir(str(tmp_path / "2"), replace=False) as temporary:
        open(os.path.join(temporary, "saved_model.pb"), "w").write("new")
    assert (tmp_path / "2" / "saved_model.pb").read_text() == "new"


def test_staged_dir_without_replace_keeps_a_folder_renamed_in_at_the_same_moment(
        tmp_path, monkeypatch):
    """The other writer's rename lands between the check and this one's rename: the same
    error, the other's folder kept."""
    target, rename = tmp_path / "1", tf.io.gfile.rename

    def others_first(source, destination, overwrite=False):
        if destination == str(target) and not target.exists():
            target.mkdir()
            (target / "saved_model.pb").write_text("theirs")
        return rename(source, destination, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", others_first)
    with pytest.raises(FileExistsError) as error:
        with atomic.staged_dir(str(target), replace=False) as temporary:
            open(os.path.join(temporary, "saved_model.pb"), "w").write("mine")
    assert error.value.filename == str(target)
    assert os.listdir(tmp_path) == ["1"]
    assert (target / "saved_model.pb").read_text() == "theirs"


def test_staged_dir_keeps_the_folder_it_replaces_until_the_new_one_is_in(tmp_path,
                                                                          monkeypatch):
    """Where the two cannot swap in one step (gs://, not Linux), the folder being replaced
    is renamed aside, not deleted first: a failure while the new one moves in puts it back
    (a TF Serving version never lost to a failed overwrite)."""
    target = tmp_path / "1"
    target.mkdir()
    (target / "saved_model.pb").write_text("old")
    rename, staged = tf.io.gfile.rename, []
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)

    def failing(source, destination, overwrite=False):
        if source in staged:  # the new folder moving in
            raise tf.errors.UnavailableError(None, None, "the disk went away")
        return rename(source, destination, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", failing)
    with pytest.raises(tf.errors.UnavailableError):
        with atomic.staged_dir(str(target)) as temporary:
            staged.append(temporary)
            open(os.path.join(temporary, "saved_model.pb"), "w").write("new")
    assert os.listdir(tmp_path) == ["1"]
    assert (target / "saved_model.pb").read_text() == "old"
    monkeypatch.setattr(tf.io.gfile, "rename", rename)
    with atomic.staged_dir(str(target)) as temporary:
        open(os.path.join(temporary, "saved_model.pb"), "w").write("new")
    assert os.listdir(tmp_path) == ["1"]
    assert (target / "saved_model.pb").read_text() == "new"


def test_staged_dir_swaps_the_folder_it_replaces_in_one_step(tmp_path, monkeypatch):
    """On Linux the new folder and the one it replaces swap in one step (renameat2's
    RENAME_EXCHANGE): `path` is never missing, as it was between renaming the old one aside
    and the new one in (TF Serving, polling, would unload the version or fall back to an
    older one); no rename of `path` aside is made, and the old folder is removed after."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "which").write_text("a")
    if not atomic._exchange(str(tmp_path / "a"), str(tmp_path / "b")):
        pytest.skip("no renameat2 RENAME_EXCHANGE here")
    assert (tmp_path / "b" / "which").read_text() == "a" and not os.listdir(tmp_path / "a")
    target = tmp_path / "1"
    target.mkdir()
    (target / "saved_model.pb").write_text("old")
    rename = tf.io.gfile.rename

    def watched(source, destination, overwrite=False):
        assert source.rstrip("/") != str(target), "the folder was renamed aside"
        return rename(source, destination, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", watched)
    for text in ("new", "newer"):
        with atomic.staged_dir(str(target)) as temporary:
            open(os.path.join(temporary, "saved_model.pb"), "w").write(text)
        assert sorted(os.listdir(tmp_path)) == ["1", "a", "b"]
        assert (target / "saved_model.pb").read_text() == text


def _mark(where, pid, **changes):
    mark = {"owner": atomic.owner(), "pid": pid, "started": atomic._started(pid),
            "script": "run_pretraining.py", **changes}
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, atomic.RUNNING), "w") as f:
        json.dump(mark, f)


def test_a_folder_held_by_a_running_process_of_this_machine_is_refused(tmp_path, monkeypatch):
    """A second run on a model dir stops in one line while the first runs; the mark of a
    process that ended, of a later process given its PID, or of another machine is taken
    over, and the holder removes its mark at the end (and a folder it created, if empty)."""
    folder = str(tmp_path / "model")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _mark(folder, running.pid)
        with pytest.raises(UserInputError) as error:
            with atomic.hold(folder, "run_finetuning.py"):
                pass
        assert str(error.value) == (
            f"--model_dir={folder} is being written by another run_pretraining.py (PID "
            f"{running.pid}) on this machine; wait for it to end or stop it, or choose "
            f"another --model_dir (if no such run is going, delete {folder}/.running.json)")
        # The same mark copied with its folder (cp -r of a model dir a run is writing): said
        # (it told the user that PID, busy elsewhere, might be no run).
        shutil.copytree(folder, str(tmp_path / "copy"))
        with open(os.path.join(folder, atomic.RUNNING)) as f:
            assert "folder" not in json.load(f)  # (_mark's, as a run before this release)
        _mark(folder, running.pid, folder=os.path.realpath(folder))
        shutil.copy(os.path.join(folder, atomic.RUNNING), str(tmp_path / "copy"))
        with pytest.raises(UserInputError) as error:
            with atomic.hold(str(tmp_path / "copy"), "run_pretraining.py"):
                pass
        assert str(error.value) == (
            f"--model_dir={tmp_path / 'copy'} holds the mark of a run_pretraining.py writing "
            f"another folder, {os.path.realpath(folder)} (PID {running.pid}): a copy made while "
            "that run wrote it, which may hold part of a file; copy it again once the run has "
            f"ended, or delete {tmp_path / 'copy' / atomic.RUNNING} to go on from this copy as "
            "it is")
        # A mark naming a folder that is gone (moved with `mv`): the running process's.
        _mark(str(tmp_path / "copy"), running.pid, folder=str(tmp_path / "moved"))
        with pytest.raises(UserInputError, match="is being written by another"):
            with atomic.hold(str(tmp_path / "copy"), "run_pretraining.py"):
                pass
        assert atomic._real("gs://b//run/") == atomic._real("gs://b/run") == "gs://b/run"
        os.symlink(folder, str(tmp_path / "link"))  # the same folder by another path: held
        with pytest.raises(UserInputError, match="is being written by another"):
            with atomic.hold(str(tmp_path / "link"), "run_pretraining.py"):
                pass
        for changes in ({"started": "1"}, {"owner": "elsewhere_1"}):  # PID reused; remote
            _mark(folder, running.pid, **changes)
            with atomic.hold(folder, "run_pretraining.py"):
                with open(os.path.join(folder, atomic.RUNNING)) as f:
                    assert json.load(f)["pid"] == os.getpid()
                with atomic.hold(folder, "run_pretraining.py"):  # this process's own: allowed
                    pass
            assert os.listdir(folder) == []
        # The other run's mark written between this one's read and its write: refused too.
        _mark(folder, running.pid)
        read, reads = atomic._mark, []
        monkeypatch.setattr(atomic, "_mark", lambda path: reads.append(path) or (
            None if len(reads) == 1 else read(path)))
        with pytest.raises(UserInputError, match=f"another run_pretraining.py \\(PID "
                                                 f"{running.pid}\\)"):
            with atomic.hold(folder, "run_pretraining.py"):
                pass
        monkeypatch.setattr(atomic, "_mark", read)
        os.remove(os.path.join(folder, atomic.RUNNING))
    finally:
        running.kill()
        running.wait()
    _mark(folder, running.pid)  # ended (killed)
    with atomic.hold(folder, "run_pretraining.py"):
        open(os.path.join(folder, "ckpt-1.index"), "w").close()
    assert os.listdir(folder) == ["ckpt-1.index"]
    created = str(tmp_path / "new")
    with pytest.raises(RuntimeError):
        with atomic.hold(created, "run_pretraining.py"):
            raise RuntimeError("a bad binding, before anything was written")
    assert not os.path.exists(created)
