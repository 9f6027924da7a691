"""The XLA compilation cache's bookkeeping: which entries are whole, loading them from the
model dir, saving new ones atomically, and where it stays off. A resumed run that loads its
compiled step is in test_pretraining.py."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from electra_tf.training import xla_cache, xla_scratch

DEFAULT = tf.distribute.get_strategy()
HOST = xla_scratch.host()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(key=b"\x08\x01\x1a\x0bXLA_CPU_JIT", hlo=b"\x0a\x05hello" * 40,
           executable=bytes(range(256)) * 3) -> bytes:
    """An XlaSerializedCacheEntry in protobuf's wire format: key, HLO, executable."""
    return _field(1, key) + _field(2, hlo) + _field(3, executable)


def _write(path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_whole_entries_pass_and_every_truncation_fails(tmp_path):
    data = _entry()
    assert xla_cache.is_complete_entry(_write(tmp_path / "whole.pb", data))
    for size in range(len(data)):
        assert not xla_cache.is_complete_entry(_write(tmp_path / "cut.pb", data[:size])), size
    # The fields must all be there, and the executable not empty.
    assert not xla_cache.is_complete_entry(_write(tmp_path / "a.pb", _field(1, b"k")
                                                  + _field(3, b"x")))
    assert not xla_cache.is_complete_entry(_write(tmp_path / "b.pb", _entry(executable=b"")))
    assert not xla_cache.is_complete_entry(_write(tmp_path / "c.pb", data + b"\x07"))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch directory as `stage()` names it, in TF_XLA_FLAGS."""
    path = tmp_path / f"{xla_scratch.SCRATCH_PREFIX}123-{HOST}-abc"
    path.mkdir()
    monkeypatch.setenv("TF_XLA_FLAGS", f"--other_flag=1 {xla_cache.FLAG}={path}")
    return path


def test_attach_loads_whole_entries_and_publish_saves_new_ones_whole(tmp_path, scratch):
    model_dir = tmp_path / "model"
    host = model_dir / "xla_cache" / xla_cache.host_key()
    _write(host / "old.pb", _entry())
    _write(host / "killed.pb", _entry()[:-10])
    lines = []
    _write(host / f"old.pb.tmp-{_dead_pid()}-{HOST}", b"half")  # a killed publish
    cache = xla_cache.attach(str(model_dir), DEFAULT, log=lines.append)
    assert cache.directory == str(host)
    assert sorted(os.listdir(scratch)) == ["old.pb"]
    assert (scratch / "old.pb").read_bytes() == _entry()
    assert sorted(os.listdir(host)) == ["old.pb"]  # the incomplete entry and the copy gone
    assert lines[0] == "XLA compilation cache: removed killed.pb, an incomplete entry"
    assert lines[1].startswith(f"XLA compilation cache: {host} (1 compiled program from "
                               "earlier runs; TensorFlow logs 'Error parsing text-format'")

    new = _entry(hlo=b"\x0a\x03new")
    _write(scratch / "new.pb", new)
    _write(scratch / "writing.pb", new[:30])  # TensorFlow still writing it
    cache.publish()
    assert sorted(os.listdir(host)) == ["new.pb", "old.pb"]  # no temporary file left
    assert (host / "new.pb").read_bytes() == new
    assert lines[2:] == ["XLA compilation cache: saved new.pb for reruns"]
    _write(scratch / "writing.pb", new)  # written now
    cache.publish()
    cache.publish()
    assert sorted(os.listdir(host)) == ["new.pb", "old.pb", "writing.pb"]
    assert lines[3:] == ["XLA compilation cache: saved writing.pb for reruns"]


def test_attach_stays_off_where_it_cannot_work(tmp_path, scratch, monkeypatch,
                                             mirrored_strategy):
    lines = []
    assert xla_cache.attach(str(tmp_path), mirrored_strategy, log=lines.append) is None
    assert lines == ["XLA compilation cache off: 2 devices of this process compile the same "
                     "programs at once, and TensorFlow does not write them atomically"]
    own = tmp_path / "my_cache"  # the user's: TensorFlow writes there in place
    _write(own / "whole.pb", _entry())
    _write(own / "killed.pb", _entry()[:50])
    monkeypatch.setenv("TF_XLA_FLAGS", f"{xla_cache.FLAG}={own} "
                       "--tf_xla_persistent_cache_read_only=true")
    assert xla_cache.attach(str(tmp_path), DEFAULT, log=lines.append) is None
    assert sorted(os.listdir(own)) == ["killed.pb", "whole.pb"]  # read-only: left alone
    monkeypatch.setenv("TF_XLA_FLAGS", f"{xla_cache.FLAG}={own}")
    assert xla_cache.attach(str(tmp_path), DEFAULT, log=lines.append) is None
    assert os.listdir(own) == ["whole.pb"]
    assert lines[1:] == [f"XLA compilation cache: {own} (TF_XLA_FLAGS)",
                         "XLA compilation cache: removed killed.pb, an incomplete entry",
                         f"XLA compilation cache: {own} (TF_XLA_FLAGS)"]
    monkeypatch.delenv("TF_XLA_FLAGS")
    assert xla_cache.attach(str(tmp_path), DEFAULT, log=lines.append) is None
    assert lines[4].startswith("XLA compilation cache off: TensorFlow started without it; ")
    assert not os.path.exists(tmp_path / "xla_cache")


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_stage_keeps_the_users_directory_or_sets_a_scratch_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", f"{xla_scratch.FLAG}=/data/my_cache")
    assert xla_scratch.stage() is None
    assert os.environ["TF_XLA_FLAGS"] == f"{xla_scratch.FLAG}=/data/my_cache"
    # Scratch dirs of this machine's dead processes go; live or other machines' stay.
    monkeypatch.setattr(xla_scratch.tempfile, "tempdir", str(tmp_path))
    prefix = xla_scratch.SCRATCH_PREFIX
    dead = f"{prefix}{_dead_pid()}-{HOST}-a"
    kept = [f"{prefix}{os.getppid()}-{HOST}-b", f"{prefix}{_dead_pid()}-another_host-c"]
    for name in [dead, *kept]:
        (tmp_path / name).mkdir()
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    scratch = xla_scratch.stage()
    assert os.path.dirname(scratch) == str(tmp_path)
    assert os.path.basename(scratch).startswith(f"{prefix}{os.getpid()}-{HOST}-")
    assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 {xla_scratch.FLAG}={scratch}"
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, os.path.basename(scratch)])


def test_the_host_key_changes_with_xla_flags_and_determinism(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    plain = xla_cache.host_key()
    assert plain.startswith("tf2.") and len(plain.split("-")[1]) == 12
    monkeypatch.setattr(xla_cache, "_op_determinism", lambda: True)
    deterministic = xla_cache.host_key()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    assert len({plain, deterministic, xla_cache.host_key()}) == 3
