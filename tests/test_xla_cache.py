"""The XLA compilation cache's bookkeeping: which entries are whole, loading them from the
model dir, saving new ones atomically, and where it stays off. A resumed run that loads its
compiled step is in test_pretraining.py."""

import os

import pytest

from electra_tf.training import xla_cache


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
    path = tmp_path / f"{xla_cache._SCRATCH_PREFIX}123-abc"  # pylint: disable=protected-access
    path.mkdir()
    monkeypatch.setenv("TF_XLA_FLAGS", f"--other_flag=1 {xla_cache.FLAG}={path}")
    return path


def test_attach_loads_whole_entries_and_publish_saves_new_ones_whole(tmp_path, scratch):
    model_dir = tmp_path / "model"
    host = model_dir / "xla_cache" / xla_cache.host_key()
    _write(host / "old.pb", _entry())
    _write(host / "killed.pb", _entry()[:-10])
    lines = []
    cache = xla_cache.attach(str(model_dir), "default", log=lines.append)
    assert cache.directory == str(host)
    assert sorted(os.listdir(scratch)) == ["old.pb"]
    assert (scratch / "old.pb").read_bytes() == _entry()
    assert sorted(os.listdir(host)) == ["old.pb"]  # the incomplete one is gone
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


def test_attach_stays_off_where_it_cannot_work(tmp_path, scratch, monkeypatch):
    lines = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert xla_cache.attach(str(tmp_path), "mirrored", log=lines.append) is None
    assert lines == ["XLA compilation cache off: under --strategy=mirrored the CPU's logical "
                     "devices compile the same programs at once, and TensorFlow does not "
                     "write them atomically"]
    assert xla_cache.attach(str(tmp_path), "tpu", log=lines.append) is None
    own = tmp_path / "my_cache"  # the user's: TensorFlow writes there in place
    _write(own / "whole.pb", _entry())
    _write(own / "killed.pb", _entry()[:50])
    monkeypatch.setenv("TF_XLA_FLAGS", f"{xla_cache.FLAG}={own}")
    assert xla_cache.attach(str(tmp_path), "default", log=lines.append) is None
    assert os.listdir(own) == ["whole.pb"]
    assert lines[1:] == ["XLA compilation cache: removed killed.pb, an incomplete entry",
                         f"XLA compilation cache: {own} (TF_XLA_FLAGS)"]
    monkeypatch.delenv("TF_XLA_FLAGS")
    assert xla_cache.attach(str(tmp_path), "default", log=lines.append) is None
    assert lines[3].startswith("XLA compilation cache off: TensorFlow started without it; ")
    assert not os.path.exists(tmp_path / "xla_cache")


def test_stage_keeps_the_users_directory_or_sets_a_scratch_one(monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", f"{xla_cache.FLAG}=/data/my_cache")
    assert xla_cache.stage() is None
    assert os.environ["TF_XLA_FLAGS"] == f"{xla_cache.FLAG}=/data/my_cache"
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    scratch = xla_cache.stage()
    try:
        assert os.path.isdir(scratch)
        assert os.path.basename(scratch).startswith(f"electra-xla-cache-{os.getpid()}-")
        assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 {xla_cache.FLAG}={scratch}"
    finally:
        os.rmdir(scratch)


def test_the_host_key_changes_with_xla_flags(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    plain = xla_cache.host_key()
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
    assert xla_cache.host_key() != plain
    assert plain.startswith("tf2.") and len(plain.split("-")[1]) == 12
