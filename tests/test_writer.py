"""The data builder end to end through its command line: output, determinism, resume, errors."""

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import CHINESE_VOCAB, DATA, ROOT, UNCASED_VOCAB
from electra_tf.errors import UserInputError
from in_process import run_script

SCRIPT = os.path.join(ROOT, "scripts", "build_pretraining_data.py")
TWO_NOVELS = ",".join(os.path.join(DATA, "corpus", n)
                      for n in ("persuasion.txt.gz", "northangerabbey.txt.gz"))


def build(*args, check=True, **kwargs):
    """The builder's command line, in this process (`in_process.run_script`)."""
    result = run_script("build_pretraining_data.py", f"--vocab_file={UNCASED_VOCAB}",
                        "--noprogress", *args, **kwargs)
    if check:
        assert result.returncode == 0, result.stderr[-2000:]
    return result


def read_records(directory):
    names = sorted(n for n in os.listdir(directory) if ".tfrecord" in n)
    out = []
    for name in names:
        path = os.path.join(directory, name)
        compression = "GZIP" if name.endswith(".gz") else ""
        out.extend(r.numpy() for r in tf.data.TFRecordDataset(path, compression))
    return names, out


def shard_bytes(directory):
    return {n: open(os.path.join(directory, n), "rb").read()
            for n in sorted(os.listdir(directory)) if ".tfrecord" in n}


def test_build_writes_official_records_and_true_metadata(austen_data):
    directory, metadata = austen_data
    names, records = read_records(directory)
    assert names == [s["file"] for s in metadata["shards"]] == [
        "pretrain_data-00000-of-00002.tfrecord", "pretrain_data-00001-of-00002.tfrecord"]
    assert len(records) == metadata["num_examples"] > 1000
    spec = {k: tf.io.FixedLenFeature([128], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    parsed = tf.io.parse_example(records, spec)
    mask = parsed["input_mask"].numpy()
    assert mask.sum() == metadata["num_tokens"]
    assert set(tf.train.Example.FromString(records[0]).features.feature) == set(spec)
    with open(os.path.join(directory, "metadata.json")) as f:
        on_disk = json.load(f)
    assert on_disk["max_seq_length"] == 128 and on_disk["vocab_size"] == 30522
    assert on_disk["vocab_sha256"] == (
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")
    assert on_disk["text_bytes"] == sum(
        len(gzip.open(p, "rb").read().replace(b"\n", b"")) for p in TWO_NOVELS.split(","))
    assert not os.path.exists(os.path.join(directory, ".build"))
    # The official packing cuts the tail of the sentence that overflows each example: 17%
    # of these novels' tokens at 128 (measured), recorded, and below the note's threshold.
    read = on_disk["num_tokens"] - 2 * on_disk["num_examples"] + on_disk["cut_tokens"]
    assert 0.1 < on_disk["cut_tokens"] / read < 0.25
    assert on_disk["unknown_tokens"] < 1e-3 * read  # [UNK]s (recorded, under the note's)


def test_same_bytes_for_any_worker_count_and_different_for_another_seed(tmp_path, austen_data):
    one, _ = austen_data
    build(f"--input={TWO_NOVELS}", f"--output_dir={tmp_path}/two", "--num_workers=2")
    assert shard_bytes(one) == shard_bytes(tmp_path / "two")
    build(f"--input={TWO_NOVELS}", f"--output_dir={tmp_path}/seed", "--num_workers=1",
          "--seed=99")
    assert shard_bytes(one) != shard_bytes(tmp_path / "seed")


def test_gzip_records_hold_the_same_examples(tmp_path, austen_data):
    plain, _ = austen_data
    build(f"--input={TWO_NOVELS}", f"--output_dir={tmp_path}", "--compression=gzip")
    names, records = read_records(tmp_path)
    assert all(n.endswith(".tfrecord.gz") for n in names)
    assert records == read_records(plain)[1]


def test_killed_build_resumes_and_finishes_only_missing_shards(tmp_path):
    text = b"".join(gzip.open(os.path.join(DATA, "corpus", n)).read()
                    for n in sorted(os.listdir(os.path.join(DATA, "corpus"))))
    corpus_file = tmp_path / "austen.txt"
    corpus_file.write_bytes(text * 2)  # 8 MB of plain text -> 8 pieces of 1 MB
    args = [f"--input={corpus_file}", "--num_workers=1", "--piece_mb=1"]
    build(*args, f"--output_dir={tmp_path}/reference")
    reference = shard_bytes(tmp_path / "reference")
    assert len(reference) == 8

    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, SCRIPT, f"--vocab_file={UNCASED_VOCAB}",
                                "--noprogress", *args, f"--output_dir={out}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (out.exists() and any(
            n.endswith(".tfrecord") for n in os.listdir(out))):
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    built = [n for n in os.listdir(out) if n.endswith(".tfrecord")]
    assert 1 <= len(built) < 8 and not (out / "metadata.json").exists()
    # Whatever was complete is intact; a partial shard exists only under a temp name.
    for name in built:
        assert shard_bytes(out)[name] == reference[name]

    result = build(*args, f"--output_dir={out}")
    assert f"resuming: {len(built)} of 8 shards already built" in result.stdout
    size = re.search(rf"building {8 - len(built)} shards? from 1 file \(([\d.]+) MB, "
                     r"([\d.]+) MB of it left\)", result.stdout)  # (a resumed build's)
    total, left = map(float, size.groups())  # (pieces of about 1 MiB, in order)
    assert left == pytest.approx(total - len(built) * 2**20 / 1e6, abs=0.1)
    assert shard_bytes(out) == reference
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
    assert result.stdout.splitlines()[-1].startswith(f"wrote {len(read_records(out)[1])} "
                                                     f"examples (")
    again = build(*args, f"--output_dir={out}")
    metadata = json.load(open(out / "metadata.json"))
    assert again.stdout.splitlines() == [
        f"{out} is already complete: {metadata['num_examples']} examples "
        f"({metadata['num_tokens']} tokens) in 8 shards; nothing to do"]
    # An input edited since is not answered 'nothing to do' (the old data was kept).
    size = len(text) * 2
    assert metadata["input_bytes"] == {str(corpus_file): size}
    with open(corpus_file, "ab") as f:
        f.write(b"One more line.\n")
    edited = build(*args, f"--output_dir={out}", check=False)
    assert (edited.returncode, edited.stderr.splitlines()) == (1, [
        f"error: --output_dir={out} holds a complete build of inputs that have changed since "
        f"({corpus_file}: {size:,} bytes then, {size + 15:,} now); build them into a new "
        "--output_dir (or delete this one)"])


def _shards_done(out) -> set:
    return {n for n in os.listdir(out) if n.endswith(".tfrecord")} if out.exists() else set()


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    children = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and fields[1] == str(pid) and fields[0] != "Z":
            children.append(int(entry))
    return children


def _gone(pids, timeout) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(os.path.exists(f"/proc/{p}") for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_build_ends_its_workers_in_one_line(tmp_path):
    """A 2-worker build (jieba segmentation: slow enough to stop mid-shard), stopped three
    ways once a shard is done: Ctrl-C to the terminal's process group is one line (each
    worker printed a KeyboardInterrupt traceback); SIGTERM to the builder is one line (it
    died without a word) and ends its workers; a worker killed is one line; SIGKILL leaves
    workers that end within seconds, writing no more shards (they built on, renaming shards
    into the folder)."""
    text = b"".join(gzip.open(os.path.join(DATA, "corpus", n)).read()
                    for n in sorted(os.listdir(os.path.join(DATA, "corpus"))))
    (tmp_path / "austen.txt").write_bytes(text * 2)  # 8 pieces of 1 MB
    out = tmp_path / "out"
    command = [sys.executable, SCRIPT, f"--vocab_file={UNCASED_VOCAB}", "--noprogress",
               f"--input={tmp_path}/austen.txt", "--num_workers=2", "--piece_mb=1",
               "--word_segmenter=jieba", f"--output_dir={out}"]

    def start_and_wait_for_a_shard():
        before = _shards_done(out)
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        deadline = time.time() + 240
        while _shards_done(out) == before and time.time() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.01)
        assert len(_shards_done(out)) < 8, "the build finished before it could be stopped"
        return process, _children(process.pid)

    process, workers = start_and_wait_for_a_shard()
    os.killpg(process.pid, signal.SIGINT)
    assert (process.wait(timeout=120), process.stderr.read()) == (130, "interrupted (Ctrl-C)\n")
    process, workers = start_and_wait_for_a_shard()
    process.send_signal(signal.SIGTERM)
    assert (process.wait(timeout=120), process.stderr.read()) == (
        143, "terminated (SIGTERM); what was complete is kept: rerun the same command to go "
        "on\n")
    assert _gone(workers, 30)
    # A worker killed outright (the out-of-memory killer): the pool replaced it and waited
    # for its shard for ever, the build hanging without a word.
    process, workers = start_and_wait_for_a_shard()
    pool = [p for p in workers if b"resource_tracker" not in open(f"/proc/{p}/cmdline",
                                                                   "rb").read()]
    os.kill(pool[0], signal.SIGKILL)  # (idle, it may hold the task queue's lock)
    assert (process.wait(timeout=60), process.stderr.read()) == (1, (
        "error: a worker process of the build died (killed: the out-of-memory "
        "killer stops one when memory runs out, each worker taking about 1 GB) before its "
        "shard was written; rerun the same command to resume (with fewer --num_workers if "
        "memory is short)\n"))
    assert _gone(workers, 30)
    process, workers = start_and_wait_for_a_shard()
    assert len(workers) >= 2  # the pool's workers (and multiprocessing's resource tracker)
    process.kill()
    process.wait()
    done = _shards_done(out)
    assert _gone(workers, 30)
    assert _shards_done(out) == done and not (out / "metadata.json").exists()


def test_a_second_build_into_a_folder_being_built_is_refused(tmp_path):
    """The same command run twice at once: the second removed the first's part-written
    shards, and the first then failed with a traceback. Now the second stops in one line,
    as a second training run on a model dir does (the first's mark names its PID)."""
    from electra_tf import atomic
    out = tmp_path / "out"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (out / atomic.RUNNING).write_text(json.dumps({
            "owner": atomic.owner(), "pid": other.pid,
            "started": atomic._started(other.pid),  # pylint: disable=protected-access
            "script": "build_pretraining_data.py"}))
        result = build(f"--input={TWO_NOVELS}", f"--output_dir={out}", check=False)
    finally:
        other.kill()
        other.wait()
    assert result.returncode == 1
    assert result.stderr == (
        f"error: --output_dir={out} is being written by another build_pretraining_data.py "
        f"(PID {other.pid}) on this machine; wait for it to end or stop it, or choose another "
        f"--output_dir (if no such run is going, delete {out / atomic.RUNNING})\n")
    assert os.listdir(out) == [atomic.RUNNING]
    build(f"--input={TWO_NOVELS}", f"--output_dir={out}")  # its process has ended: taken over
    assert (out / "metadata.json").exists() and not (out / atomic.RUNNING).exists()


def test_resume_with_other_settings_is_refused(tmp_path, austen_data):
    build(f"--input={TWO_NOVELS}", f"--output_dir={tmp_path}")
    result = build(f"--input={TWO_NOVELS}", f"--output_dir={tmp_path}", "--max_seq_length=256",
                   check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --output_dir={tmp_path} holds data built with other settings (max_seq_length "
        "differs); rerun with the same flags to resume, or use a new --output_dir"]
    # The same inputs by relative paths and the same vocab at another path are the same
    # build (they were 'other settings').
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(open(UNCASED_VOCAB, "rb").read())
    again = build("--input=persuasion.txt.gz,northangerabbey.txt.gz", f"--output_dir={tmp_path}",
                  f"--vocab_file={vocab}", cwd=os.path.join(DATA, "corpus"))
    assert again.stdout.endswith("; nothing to do\n"), again.stdout
    # The vocab file changed in place, the flags the same ("rerun with the same flags" was
    # no help); --num_workers below 1 (built with one, unsaid).
    out = tmp_path / "own_vocab"
    build(f"--input={TWO_NOVELS}", f"--output_dir={out}", f"--vocab_file={vocab}")
    with open(vocab, "a", encoding="utf-8") as f:
        f.write("newword\n")
    for flags, said in (([f"--vocab_file={vocab}"],
                         f"--output_dir={out} holds data built with {vocab} as it was then: "
                         "the file has changed since (its SHA-256 differs); use a new "
                         "--output_dir for this vocab, or put the old one back"),
                        (["--num_workers=0"], "--num_workers=0 must be at least 1 (or leave it "
                         "out: one per core)")):
        result = build(f"--input={TWO_NOVELS}", f"--output_dir={out}", *flags, check=False)
        assert (result.returncode, result.stderr.strip()) == (1, f"error: {said}")
    # ... and an unfinished build of it (its state and complete shards, no metadata.json)
    from electra_tf.data import writer
    metadata = json.loads((out / writer.METADATA_FILE).read_text())
    (out / writer.STATE_DIR).mkdir()
    (out / writer.STATE_DIR / "config.json").write_text(json.dumps(metadata["build_config"]))
    (out / writer.METADATA_FILE).unlink()
    result = build(f"--input={TWO_NOVELS}", f"--output_dir={out}", f"--vocab_file={vocab}",
                   check=False)
    assert (result.returncode, result.stderr.strip()) == (1, (
        f"error: --output_dir={out} holds an unfinished build begun with {vocab} as it was "
        "then: the file has changed since (its SHA-256 differs); use a new --output_dir for "
        "this vocab, or put the old one back"))


@pytest.mark.parametrize("case", ["no_match", "missing_vocab", "bad_vocab", "empty_file",
                                  "blank_text", "tiny_length", "plain_text_as_jsonl",
                                  "jsonl_as_text", "gbk_text"])
def test_bad_input_is_one_line_nonzero_exit_and_no_output(tmp_path, case):
    out = tmp_path / "out"
    args = [f"--input={TWO_NOVELS}", f"--output_dir={out}"]
    expected = ""
    if case == "no_match":
        args[0] = f"--input={tmp_path}/nothing*.txt"
        expected = f"error: input {tmp_path}/nothing*.txt matches no file; check the path"
    elif case == "missing_vocab":
        args.append(f"--vocab_file={tmp_path}/vocab.txt")
        expected = f"error: vocab file {tmp_path}/vocab.txt does not exist"
    elif case == "bad_vocab":
        (tmp_path / "vocab.txt").write_text("a\nb\n")
        args.append(f"--vocab_file={tmp_path}/vocab.txt")
        expected = f"error: vocab file {tmp_path}/vocab.txt lacks the special tokens"
    elif case == "empty_file":
        (tmp_path / "empty.txt").write_text("")
        args[0] = f"--input={tmp_path}/empty.txt"
        expected = f"error: input {tmp_path}/empty.txt is empty (0 bytes in 1 files)"
    elif case == "blank_text":
        (tmp_path / "blank.txt").write_text("\n\n   \n\n")
        args[0] = f"--input={tmp_path}/blank.txt"
        expected = f"error: input {tmp_path}/blank.txt holds no text (0 examples)"
    elif case == "plain_text_as_jsonl":
        (tmp_path / "plain.txt").write_text("A sentence.\nAnother one.\n")
        args[0] = f"--input={tmp_path}/plain.txt"
        args.append("--input_format=jsonl")
        expected = (f"error: {tmp_path}/plain.txt: line 1 is not a JSON object, as "
                    "--input_format=jsonl needs; for plain text pass --input_format=text")
    elif case == "jsonl_as_text":
        (tmp_path / "c.jsonl").write_text('{"text": "A sentence."}\n')
        args[0] = f"--input={tmp_path}/c.jsonl"
        expected = (f"error: {tmp_path}/c.jsonl is JSONL (its first line is a JSON object) but "
                    "is read as plain text; pass --input_format=jsonl")
    elif case == "gbk_text":  # a Chinese corpus saved by an editor in GBK
        from conftest import chinese_reviews
        (tmp_path / "zh.txt").write_bytes("\n".join(chinese_reviews()).encode("gbk", "replace"))
        args[0] = f"--input={TWO_NOVELS},{tmp_path}/zh.txt"
        expected = f"error: input {tmp_path}/zh.txt is not UTF-8 text ("
    elif case == "tiny_length":
        args.append("--max_seq_length=4")
        expected = "error: --max_seq_length=4 is too small; use at least 8"
    result = build(*args, check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert not out.exists()


def test_counts_a_resumed_build_kept_from_an_older_release_are_not_summed_as_zero():
    """A build begun before the builder counted [UNK]s and cut tokens and finished by this
    release: its old shards' records lack the counts, which were summed as 0 (a 63% [UNK]
    build said 21%, or nothing under 5%). metadata.json says None (not counted) and the
    notes take the share over the shards that counted."""
    from electra_tf.data import writer
    old = {"num_examples": 10, "num_tokens": 1000, "long_lines": 0}
    new = {"num_examples": 10, "num_tokens": 620, "cut_tokens": 100, "unknown_tokens": 441,
           "long_lines": 2, "cr_lines": 1}
    assert writer._share([old, new], "unknown_tokens") == pytest.approx(441 / 700)
    assert writer._share([old, new], "cut_tokens") == pytest.approx(100 / 700)
    assert writer._share([old], "unknown_tokens") == 0.0
    assert [writer._total([old, new], k) for k in ("unknown_tokens", "long_lines")] == [None, 2]
    assert writer._total([new, new], "unknown_tokens") == 882


def test_chinese_corpus_builds_with_chinese_vocab(tmp_path):
    from conftest import chinese_reviews
    (tmp_path / "zh.txt").write_text("\n\n".join(chinese_reviews()) + "\n", encoding="utf-8")
    build(f"--input={tmp_path}/zh.txt", f"--vocab_file={CHINESE_VOCAB}",
          f"--output_dir={tmp_path}/out", "--max_seq_length=64")
    _, records = read_records(tmp_path / "out")
    ids = np.array(tf.io.parse_example(records, {
        "input_ids": tf.io.FixedLenFeature([64], tf.int64)})["input_ids"])
    vocab = open(CHINESE_VOCAB, encoding="utf-8").read().split("\n")
    assert vocab[ids[0, 1]] == chinese_reviews()[0][0]  # first character of the first review
    assert (ids == 100).mean() < 0.01  # [UNK]
    own = json.loads((tmp_path / "out" / "metadata.json").read_text())
    # (curly quotes and dashes, which this vocab lacks: [UNK] in transformers' BertTokenizer)
    assert 0 < own["unknown_tokens"] < 0.02 * own["num_tokens"]
    # With an English vocab most of it is [UNK]: counted, and said (it built without a word).
    done = build(f"--input={tmp_path}/zh.txt", f"--output_dir={tmp_path}/en",
                 "--max_seq_length=64")
    from electra_tf.tokenization import Tokenizer
    english = Tokenizer(UNCASED_VOCAB)
    tokens = [t for line in chinese_reviews() for t in english.encode([line])[0]]
    unknown = tokens.count(english.unk_id)
    metadata = json.loads((tmp_path / "en" / "metadata.json").read_text())
    assert metadata["unknown_tokens"] == unknown > 0.5 * len(tokens)
    read = metadata["num_tokens"] - 2 * metadata["num_examples"] + metadata["cut_tokens"]
    assert (f"note: {unknown / read:.0%} of the text's tokens are [UNK]: {UNCASED_VOCAB} does "
            "not cover the text (its characters or script: a Chinese text needs a Chinese "
            "vocab); check --vocab_file, or learn one from the corpus with "
            "scripts/learn_vocab.py") in done.stdout.splitlines()


def test_remote_filesystem_paths_build_the_same_bytes(tmp_path):
    """gs:// goes through tf.io.gfile; TF's in-memory ram:// filesystem takes the same path."""
    from electra_tf.data.writer import build_pretraining_data
    plain = gzip.open(os.path.join(DATA, "corpus", "persuasion.txt.gz")).read()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "plain.txt").write_bytes(plain)
    tf.io.gfile.copy(os.path.join(DATA, "corpus", "northangerabbey.txt.gz"),
                     str(tmp_path / "in" / "na.txt.gz"))
    remote = f"ram://{tmp_path.name}"
    for name in ("plain.txt", "na.txt.gz"):
        tf.io.gfile.copy(str(tmp_path / "in" / name), f"{remote}/in/{name}", overwrite=True)
    quiet = {"show_progress": False, "log": lambda *_: None, "piece_bytes": 100_000}
    local = build_pretraining_data(f"{tmp_path}/in/*", UNCASED_VOCAB, str(tmp_path / "out"),
                                   **quiet)
    ram = build_pretraining_data(f"{remote}/in/*", UNCASED_VOCAB, f"{remote}/out", **quiet)
    assert len(local["shards"]) == len(ram["shards"]) == 6  # 5 pieces of plain.txt + 1
    for shard in local["shards"]:
        with tf.io.gfile.GFile(f"{remote}/out/{shard['file']}", "rb") as f:
            assert f.read() == (tmp_path / "out" / shard["file"]).read_bytes()


def _write_jsonl(path, field, records=40):
    from conftest import corpus_lines
    lines = corpus_lines(records * 10)
    path.write_text("".join(json.dumps({field: "\n".join(lines[i:i + 10])}) + "\n"
                            for i in range(0, len(lines), 10)))


def test_wrong_text_field_fails_first_and_the_suggested_fix_then_builds(tmp_path):
    corpus_file = tmp_path / "c.jsonl"
    _write_jsonl(corpus_file, "body")
    out = tmp_path / "out"
    args = [f"--input={corpus_file}", f"--output_dir={out}", "--input_format=jsonl"]
    result = build(*args, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {corpus_file}: record 1 has no field 'text' (fields: body); pass "
        "--text_field=NAME"]
    assert not out.exists()
    fixed = build(*args, "--text_field=body")
    assert fixed.stdout.splitlines()[-1].startswith("wrote ")
    assert json.load(open(out / "metadata.json"))["build_config"]["text_field"] == "body"

    # Every input's first record is checked before anything is written, not only the first
    # file's, and an existing --output_dir is left as it was.
    _write_jsonl(tmp_path / "d.jsonl", "content")
    result = build(f"--input={corpus_file},{tmp_path}/d.jsonl", f"--output_dir={tmp_path}/two",
                   "--input_format=jsonl", "--text_field=body", check=False)
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path}/d.jsonl: record 1 has no field 'body' (fields: content); pass "
        "--text_field=NAME"]
    assert not (tmp_path / "two").exists()


def test_bad_input_found_while_building_leaves_nothing(tmp_path, monkeypatch):
    """A UserInputError from a shard (past the up-front checks) removes what the build began;
    a complete shard from before keeps its build state, so a rerun still resumes."""
    from electra_tf.data import corpus, writer
    corpus_file = tmp_path / "c.jsonl"
    _write_jsonl(corpus_file, "body")
    monkeypatch.setattr(corpus, "check_jsonl", lambda *_: None)
    quiet = {"show_progress": False, "log": lambda *_: None, "input_format": "jsonl",
             "num_workers": 1}
    with pytest.raises(UserInputError, match="record 1 has no field 'text'"):
        writer.build_pretraining_data(str(corpus_file), UNCASED_VOCAB, str(tmp_path / "out"),
                                      **quiet)
    assert not (tmp_path / "out").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(UserInputError):
        writer.build_pretraining_data(str(corpus_file), UNCASED_VOCAB, str(existing), **quiet)
    assert os.listdir(existing) == []

    # The second file fails after the first file's shard is complete.
    _write_jsonl(tmp_path / "a.jsonl", "text")
    both = f"{tmp_path}/a.jsonl,{corpus_file}"
    with pytest.raises(UserInputError, match="c.jsonl: record 1"):
        writer.build_pretraining_data(both, UNCASED_VOCAB, str(existing), **quiet)
    assert sorted(os.listdir(existing)) == [".build", "pretrain_data-00000-of-00002.tfrecord"]


def test_state_of_a_build_stopped_before_its_first_shard_does_not_bind(tmp_path):
    """What an earlier version left on bad input (or a crash before any shard completed):
    build state with other settings and a partial shard, and nothing to resume."""
    out = tmp_path / "out"
    (out / ".build").mkdir(parents=True)
    (out / ".build" / "config.json").write_text(json.dumps({"text_field": "other"}))
    (out / "pretrain_data-00000-of-00002.tfrecord.tmp-0123").write_bytes(b"")
    result = build(f"--input={TWO_NOVELS}", f"--output_dir={out}")
    assert "resuming" not in result.stdout
    assert sorted(os.listdir(out)) == ["metadata.json", "pretrain_data-00000-of-00002.tfrecord",
                                       "pretrain_data-00001-of-00002.tfrecord"]


def test_lower_case_must_suit_the_vocab(tmp_path):
    from conftest import corpus_lines
    from electra_tf import vocab_learning
    lines = corpus_lines(3000)
    cased = tmp_path / "cased.txt"
    vocab_learning.write_vocab(vocab_learning.learn_vocab(lines, 600, lower_case=False),
                               str(cased))
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n")
    args = [f"--input={tmp_path}/c.txt", f"--output_dir={tmp_path}/out"]

    result = build(*args, f"--vocab_file={cased}", check=False)
    assert result.returncode == 1
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: vocab file {cased} is cased (")
    assert errors[0].endswith("but --lower_case=true lower-cases the text, so they would never "
                             "occur; pass --lower_case=false (or use an uncased vocab)")
    assert not (tmp_path / "out").exists()

    result = build(*args, "--lower_case=false", check=False)  # the uncased BERT vocab
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: vocab file {UNCASED_VOCAB} is uncased (0 of its 26,896 tokens with letters "
        "have capitals) but --lower_case=false keeps the text's capitals, so capitalised "
        "words would become [UNK]; drop --lower_case=false (or use a cased vocab)"]
    assert not (tmp_path / "out").exists()

    build(*args, f"--vocab_file={cased}", "--lower_case=false")
    _, records = read_records(tmp_path / "out")
    ids = tf.io.parse_example(records, {"input_ids": tf.io.FixedLenFeature([128], tf.int64)})
    vocab = open(cased, encoding="utf-8").read().split("\n")
    assert vocab.index("The") in ids["input_ids"].numpy()
    assert json.load(open(tmp_path / "out" / "metadata.json"))["lower_case"] is False


def test_a_cased_georgian_vocab_is_not_taken_for_an_uncased_one():
    """Georgian's letters have capitals (Mtavruli, upper-case since Unicode 11) that its text
    does not start words with: a vocab learnt with --lower_case=false from Georgian text has
    none, and was refused with --lower_case=false as uncased. Its letters are not counted as
    a capitalising script's, so lower-casing is the user's choice; a Latin vocab's case is
    still checked beside them."""
    from electra_tf.data import writer
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    georgian = specials + ["საქართველო", "არის", "ქვეყანა", "##ში", "ა", "##ბ"]
    for lower_case in (False, True):
        writer.check_case(georgian, "ka.txt", lower_case)
    assert not writer.vocab_is_cased(georgian)
    with pytest.raises(UserInputError, match=r"^vocab file ka.txt is uncased \(0 of its 2 "
                                             r"tokens with letters have capitals\)"):
        writer.check_case(georgian + ["the", "city"], "ka.txt", False)
    with pytest.raises(UserInputError, match=r"^vocab file ka.txt is cased \(1 of its 2 "):
        writer.check_case(georgian + ["The", "city"], "ka.txt", True)


def test_a_build_that_cuts_most_of_its_text_says_so(tmp_path):
    from conftest import corpus_lines
    from electra_tf import tokenization
    line = " ".join(corpus_lines(60))  # one long line: one example keeps 126 of its tokens
    (tmp_path / "long.txt").write_text(line + "\n")
    result = build(f"--input={tmp_path}/long.txt", f"--output_dir={tmp_path}/out")
    tokens = len(tokenization.Tokenizer(UNCASED_VOCAB).encode_flat([line])[0])
    metadata = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert metadata["num_examples"] == 1 and metadata["cut_tokens"] == tokens - 126 > 1000
    assert (f"note: {(tokens - 126) / tokens:.0%} of the text's tokens were cut off the ends "
            "of examples (a sentence or line that overflows an example loses its tail"
            ) in result.stdout
    assert "one sentence per line, or raise --max_seq_length" in result.stdout


def test_documents_tokenized_in_parts_give_the_same_examples(tmp_path, monkeypatch):
    """The builder tokenizes a document in parts of at most _TOKENIZE_LINES lines (a file
    without blank lines is one document: 30 MB of it took 6.7 GB held whole): parts of 3
    lines give the bytes of parts of 4,096, for a corpus of documents and for one without
    blank lines; and a line over MAX_LINE_BYTES is read up to there, with a note."""
    from conftest import corpus_lines
    from electra_tf.data import corpus, writer
    lines = corpus_lines(400)
    (tmp_path / "docs.txt").write_text(
        "\n\n".join("\n".join(lines[i:i + 7]) for i in range(0, 400, 7)) + "\n")
    (tmp_path / "flat.txt").write_text("\n".join(lines) + "\n")
    for name in ("docs", "flat"):
        build(f"--input={tmp_path}/{name}.txt", f"--output_dir={tmp_path}/{name}_whole")
        with monkeypatch.context() as patch:
            patch.setattr(writer, "_TOKENIZE_LINES", 3)
            build(f"--input={tmp_path}/{name}.txt", f"--output_dir={tmp_path}/{name}_parts")
        assert shard_bytes(tmp_path / f"{name}_parts") == shard_bytes(tmp_path / f"{name}_whole")
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 10_000)
    (tmp_path / "long.txt").write_text(" ".join(lines) + "\n" + lines[0] + "\n")
    result = build(f"--input={tmp_path}/long.txt", f"--output_dir={tmp_path}/long")
    assert ("note: 1 line was longer than 10,000 bytes and was read up to there (a line "
            "is one sentence") in result.stdout
    metadata = json.loads((tmp_path / "long" / "metadata.json").read_text())
    assert metadata["long_lines"] == 1 and metadata["num_examples"] == 2
    # Old Mac line ends (a lone \r): the text was one line; the note names the cause.
    (tmp_path / "mac.txt").write_text("\r".join(lines[:50]) + "\r", newline="")
    result = build(f"--input={tmp_path}/mac.txt", f"--output_dir={tmp_path}/mac")
    assert ("note: 1 line holds carriage returns (\\r) that end no line, as old Mac files "
            "end their lines") in result.stdout
    assert json.loads((tmp_path / "mac" / "metadata.json").read_text())["cr_lines"] == 1


def test_more_shards_than_input_pieces_is_a_note(tmp_path):
    from conftest import corpus_lines
    lines = corpus_lines(600)
    for i in range(3):
        (tmp_path / f"part{i}.txt").write_text("\n".join(lines[i::3]) + "\n")
    result = build(f"--input={tmp_path}/part*.txt", f"--output_dir={tmp_path}/out",
                   "--num_shards=5")
    assert result.stdout.splitlines()[0] == (
        "note: --num_shards=5 is more than the 3 input pieces (a shard holds whole pieces: "
        "files, or --piece_mb parts of large plain files); writing 3 shards")
    assert len(read_records(tmp_path / "out")[0]) == 3


def test_shards_of_blank_inputs_are_recorded_empty_and_left_out_of_training(tmp_path):
    """A folder with an empty and a blank-only file beside a novel: the shards those files
    fill hold no examples; metadata.json says so, the build says so, and the pipeline
    leaves them out (training refused them as empty data files before, rebuild or not)."""
    from electra_tf.data import pipeline, writer
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_bytes(gzip.open(os.path.join(DATA, "corpus",
                                                          "persuasion.txt.gz")).read())
    (inputs / "b.txt").write_bytes(b"")
    (inputs / "c.txt").write_bytes(b"\n\n  \n")
    lines = []
    metadata = writer.build_pretraining_data(str(inputs / "*.txt"), UNCASED_VOCAB,
                                             str(tmp_path / "out"), num_shards=3,
                                             num_workers=1, show_progress=False,
                                             log=lines.append)
    counts = {shard["file"]: shard["num_examples"] for shard in metadata["shards"]}
    empty = sorted(name for name, n in counts.items() if n == 0)
    assert len(counts) == 3 and len(empty) == 2 and sum(counts.values()) > 500
    assert lines[-1] == (f"note: 2 shard(s) hold no examples (their inputs hold no text: blank "
                         f"files), e.g. {empty[0]}; training leaves them out (metadata.json "
                         "says so)")
    files = pipeline.list_files(str(tmp_path / "out" / "*.tfrecord"))
    assert [os.path.basename(f) for f in files] == [n for n, c in sorted(counts.items()) if c]
    pipeline.validate_data(files, 128, UNCASED_VOCAB)
    batch = next(iter(pipeline.pretraining_dataset(str(tmp_path / "out"), 4, 128,
                                                   UNCASED_VOCAB)))
    assert batch["input_ids"].shape == (4, 128)


FRENCH_WORDS = ("été où déjà théâtre mère père frère élève hôpital fenêtre crème naïve noël "
                "garçon français voilà après très bientôt maison chat chien nuit jour pour avec "
                "dans les des une sur la un").split()


def test_strip_accents_must_suit_the_vocab(tmp_path):
    import random

    from electra_tf import vocab_learning
    rng = random.Random(0)
    lines = [" ".join(rng.choice(FRENCH_WORDS) for _ in range(12)).capitalize() + "."
             for _ in range(2000)]
    kept = tmp_path / "kept.txt"
    vocab_learning.write_vocab(vocab_learning.learn_vocab(lines, 250, strip_accents=False),
                               str(kept))
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = [f"--input={tmp_path}/c.txt", f"--output_dir={tmp_path}/out",
            f"--vocab_file={kept}"]

    result = build(*args, check=False)  # --strip_accents defaults to --lower_case=true
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: vocab file {kept} was learned without stripping accents (62 of its 146 tokens "
        "change when accents are stripped, e.g. ##rè, ##rès, ##ère) but --strip_accents "
        "(default: --lower_case) strips them from the text, so they would never occur; pass "
        "--strip_accents=false (or use a vocab learned with stripping)"]
    assert not (tmp_path / "out").exists()

    build(*args, "--strip_accents=false")
    _, records = read_records(tmp_path / "out")
    ids = tf.io.parse_example(records, {"input_ids": tf.io.FixedLenFeature([128], tf.int64)})
    vocab = open(kept, encoding="utf-8").read().split("\n")
    assert {vocab.index("été"), vocab.index("garçon")} <= set(ids["input_ids"].numpy().flat)
    assert json.load(open(tmp_path / "out" / "metadata.json"))["strip_accents"] is False


def test_official_vocabs_pass_the_accent_check_with_stripping():
    # Learned with stripping, they hold no token that stripping changes.
    from electra_tf import tokenization
    from electra_tf.data import writer
    for vocab_file in (UNCASED_VOCAB, CHINESE_VOCAB):
        vocab = tokenization.load_vocab(vocab_file)
        assert [t for t in vocab if writer._strip_accents(t) != t] == []
        writer.check_accents(vocab, vocab_file, strip_accents=True)


def test_metadata_names_the_vocab_by_its_absolute_path(tmp_path, monkeypatch):
    """run_pretraining.py reads the vocab metadata.json names (its default --vocab_file),
    maybe from another folder than the build's: a relative --vocab_file is made absolute."""
    from conftest import corpus_lines
    from electra_tf.data.writer import build_pretraining_data
    monkeypatch.chdir(tmp_path)
    shutil.copy(UNCASED_VOCAB, "vocab.txt")
    with open("corpus.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(corpus_lines(200)) + "\n")
    metadata = build_pretraining_data("corpus.txt", "vocab.txt", "out", show_progress=False,
                                      log=lambda *_: None)
    assert metadata["vocab_file"] == str(tmp_path / "vocab.txt")
    saved = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert saved["vocab_file"] == str(tmp_path / "vocab.txt")


def test_a_build_begun_before_the_piece_rule_changed_is_resumed_only_where_it_is_safe(
        tmp_path, monkeypatch):
    """Pieces of a plain file without blank lines start elsewhere since BuildConfig's
    piece_rule 2: an unfinished build begun before it (its config has no piece_rule) whose
    files are cut in pieces is refused (its done shards and the rest would read some lines
    twice or not at all); a finished one still says nothing to do, and one whose files are
    whole resumes."""
    from electra_tf.data import writer
    flat = tmp_path / "flat.txt"
    flat.write_text("".join(f"Sentence number {i} of a flat file.\n" for i in range(3000)))
    other = tmp_path / "other.txt"
    other.write_text("Another small file.\n\nOf two documents.\n")
    out = tmp_path / "out"

    def build_it(piece_bytes, inputs=f"{flat}"):
        return writer.build_pretraining_data(inputs, UNCASED_VOCAB, str(out), num_workers=1,
                                             piece_bytes=piece_bytes, show_progress=False,
                                             log=lambda *_: None)

    def stopped(piece_bytes, inputs=f"{flat}"):  # after its first shard, by an earlier version
        write, calls = writer._write_shard, []

        def first_only(*args):
            if calls:
                raise KeyboardInterrupt
            calls.append(args)
            return write(*args)
        monkeypatch.setattr(writer, "_write_shard", first_only)
        with pytest.raises(KeyboardInterrupt):
            build_it(piece_bytes, inputs)
        monkeypatch.setattr(writer, "_write_shard", write)
        config = json.loads((out / ".build" / "config.json").read_text())
        del config["piece_rule"]
        (out / ".build" / "config.json").write_text(json.dumps(config))

    built = build_it(20_000)
    assert built["build_config"]["piece_rule"] == 2 and built["build_config"]["num_shards"] > 1
    record = json.loads((out / "metadata.json").read_text())
    del record["build_config"]["piece_rule"]
    (out / "metadata.json").write_text(json.dumps(record))
    assert build_it(20_000)["num_examples"] == built["num_examples"]  # finished: kept
    shutil.rmtree(out)
    stopped(20_000)
    with pytest.raises(UserInputError, match=f"--output_dir={out} holds an unfinished build "
                                             "begun by an earlier electra-tf, which cut files "
                                             "without blank lines into pieces otherwise"):
        build_it(20_000)
    shutil.rmtree(out)
    both = f"{flat},{other}"  # two whole files: nothing differs
    stopped(1 << 20, both)
    assert build_it(1 << 20, both)["num_examples"] > 0
    # Nor where a file's cuts have blank lines near (documents): its pieces start as then.
    shutil.rmtree(out)
    flat.write_text("".join(f"Sentence {i} of a document.\n" + "\n" * (i % 5 == 4)
                            for i in range(3000)))
    stopped(20_000)
    assert build_it(20_000)["num_examples"] > 0
