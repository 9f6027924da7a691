"""scripts/inspect_pretraining_data.py: what it shows, and errors that name its own flags."""

import glob
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import ROOT, UNCASED_VOCAB, corpus_lines
from electra_tf.data import pipeline
from electra_tf.errors import UserInputError
from in_process import run_script

SCRIPT = os.path.join(ROOT, "scripts", "inspect_pretraining_data.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from electra_tf.data.writer import build_pretraining_data
    directory = tmp_path_factory.mktemp("inspect")
    (directory / "c.txt").write_text("\n".join(corpus_lines(1500)) + "\n")
    metadata = build_pretraining_data(str(directory / "c.txt"), UNCASED_VOCAB,
                                      str(directory / "data"), max_seq_length=64,
                                      num_workers=1, show_progress=False, log=lambda *_: None)
    return directory / "data", metadata


def inspect(*args):
    return run_script("inspect_pretraining_data.py", f"--vocab_file={UNCASED_VOCAB}", *args)


def test_shows_masked_examples(data, tmp_path):
    """With the vocab metadata.json names (as pre-training takes it), or --vocab_file."""
    directory, metadata = data
    result = run_script("inspect_pretraining_data.py", f"--data={directory}/*.tfrecord",
                        "--num_examples=2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == inspect(f"--data={directory}/*.tfrecord",
                                    "--num_examples=2").stdout
    lines = result.stdout.splitlines()
    assert lines[0] == (f"{directory}/metadata.json: {metadata['num_examples']} examples, "
                        f"{metadata['num_tokens']} tokens, 1 shard, max_seq_length 64, "
                        "vocab 30522")
    inputs = [line for line in lines if line.startswith("  input:  ")]
    assert len(inputs) == 2
    assert all(line.split()[1] == "[CLS]" and line.split()[-1] == "[SEP]" for line in inputs)
    assert all("[MASK]" in line for line in inputs)
    shutil.copy(glob.glob(f"{directory}/*.tfrecord")[0], tmp_path / "bare.tfrecord")
    # Records without a metadata.json: the length and vocab must be named (both said).
    result = run_script("inspect_pretraining_data.py", f"--data={tmp_path}/bare.tfrecord")
    assert (result.returncode, result.stderr) == (
        1, f"error: {tmp_path}/bare.tfrecord has no metadata.json; pass --max_seq_length and "
        "--vocab_file\n")
    result = run_script("inspect_pretraining_data.py", f"--data={tmp_path}/bare.tfrecord",
                        "--max_seq_length=64")
    assert (result.returncode, result.stderr) == (
        1, f"error: --data={tmp_path}/bare.tfrecord has no metadata.json naming its vocab; "
        "pass --vocab_file (the vocab the data was built with)\n")


def test_pre_masked_records_are_shown_masked_again_or_as_written(data, tmp_path):
    directory, _ = data
    # The data's first examples, masked once and written in BERT's pre-masked format.
    batch = next(iter(pipeline.pretraining_dataset(f"{directory}/*.tfrecord", 2, 64,
                                                   UNCASED_VOCAB, is_training=False)))
    with tf.io.TFRecordWriter(str(tmp_path / "bert.tfrecord")) as writer:
        for i in range(2):
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=batch[k][i]))
                       for k in pipeline.FEATURES + pipeline.PREMASKED_FEATURES[:2]}
            feature["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(
                value=batch["masked_lm_weights"][i]))
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())
    args = (f"--data={tmp_path}/bert.tfrecord", "--max_seq_length=64", "--num_examples=2",
            "--seed=5")
    remasked, kept = inspect(*args), inspect(*args, "--premasked_records=as_written")
    assert remasked.returncode == kept.returncode == 0, remasked.stderr + kept.stderr
    assert remasked.stdout.splitlines()[0].startswith(
        "note: --data holds pre-masked BERT records: their original tokens are put back")
    assert kept.stdout.splitlines()[0].startswith(
        "note: --data holds pre-masked BERT records, used as written: BERT's static masks")
    shown = [line for line in kept.stdout.splitlines() if line.startswith("  masked: ")]
    again = [line for line in remasked.stdout.splitlines() if line.startswith("  masked: ")]
    assert len(shown) == len(again) == 2 and shown != again  # other masks, same 2 examples


def test_a_closed_stdout_ends_quietly_as_a_pipe_into_head(data):
    """`inspect_pretraining_data.py ... | head -1`: the reader is gone before the script
    writes, so its first line meets a closed pipe; exit 141 (SIGPIPE's), no traceback."""
    directory, _ = data
    process = subprocess.Popen([sys.executable, SCRIPT, f"--vocab_file={UNCASED_VOCAB}",
                                f"--data={directory}/*.tfrecord", "--num_examples=2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait() == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def _error(result):
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_errors_name_its_own_flags(data, tmp_path):
    directory, _ = data
    assert _error(inspect(f"--data={directory}/*.tfrecord", "--max_seq_length=128")) == (
        f"error: {directory}/metadata.json says max_seq_length=64 but the run uses 128; set "
        "--max_seq_length=64 or rebuild the data")

    # Without metadata.json the records themselves are checked.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(directory / "pretrain_data-00000-of-00001.tfrecord", bare / "a.tfrecord")
    # (In this process, with the flags the script passes: each run of it costs seconds.)
    flags = dict(length_flag="--max_seq_length", data_flag="--data")
    with pytest.raises(UserInputError) as info:
        pipeline.validate_data([str(bare / "a.tfrecord")], 128, **flags)
    assert str(info.value) == (
        f"data file {bare}/a.tfrecord has sequences of length 64 but the run uses "
        "max_seq_length=128; set --max_seq_length=64 or rebuild")

    (bare / "b.tfrecord").write_bytes(b"this is not a tfrecord file at all" * 10)
    error = _error(inspect(f"--data={bare}/*.tfrecord", "--max_seq_length=64"))
    assert error.startswith(f"error: data file {bare}/b.tfrecord is corrupt (")
    assert error.endswith("); rebuild it or remove it from --data")

    (bare / "b.tfrecord").unlink()
    with tf.io.TFRecordWriter(str(bare / "c.tfrecord")) as writer:
        writer.write(b"\x08\x96\x01 not an example")
    with pytest.raises(UserInputError) as info:
        pipeline.validate_data([str(bare / "a.tfrecord"), str(bare / "c.tfrecord")], 64, **flags)
    assert str(info.value).startswith(f"data file {bare}/c.tfrecord holds records that are not "
                                      "tf.train.Example (")
    assert str(info.value).endswith("); point --data at pre-training TFRecords")


def test_bad_numbers_are_one_line_naming_its_flags(data):
    directory, _ = data
    pattern = f"--data={directory}/*.tfrecord"
    for n in (0, -1):
        assert _error(inspect(pattern, f"--num_examples={n}")) == (
            f"error: --num_examples={n} must be at least 1")
    assert _error(inspect(pattern, "--mask_prob=1.5")) == (
        "error: --mask_prob=1.5 must be above 0 and below 1 (the paper: 0.15, 0.25 for large)")
    assert _error(inspect(pattern, "--max_predictions_per_seq=100")) == (
        "error: 100 masked positions per sequence (--max_predictions_per_seq) do not fit "
        "sequences of 64; use between 1 and 64")
    assert _error(inspect(pattern, "--max_predictions_per_seq=0")) == (  # (it was unset)
        "error: --max_predictions_per_seq=0 masks nothing; use between 1 and 64 masked "
        "positions per sequence, or leave it unset for int((--mask_prob + 0.005) x 64)")
    # (In this process, with the flags the script passes.)
    flags = dict(length_flag="--max_seq_length", data_flag="--data",
                 mask_prob_flag="--mask_prob", predictions_flag="--max_predictions_per_seq")
    with pytest.raises(UserInputError) as info:
        pipeline.pretraining_dataset(f"{directory}/*.tfrecord", 2, 64, UNCASED_VOCAB,
                                     mask_prob=0.01, **flags)
    assert str(info.value) == (
        "--mask_prob=0.01 gives no masked position in sequences of 64 (int((mask_prob + 0.005) "
        "x 64) = 0); raise --mask_prob or set --max_predictions_per_seq between 1 and 64")


def test_text_files_given_as_data_are_named_as_the_builders_input(data, tmp_path):
    """The corpus given as --data was asked for --max_seq_length and --vocab_file, then
    called corrupt ("rebuild it"): it is text, the builder's input."""
    directory, _ = data
    text = tmp_path / "corpus.TXT.gz"
    text.write_bytes(b"")
    for given in (str(text), f"{tmp_path}/*.gz"):
        assert _error(inspect(f"--data={given}")) == (
            f"error: --data {given} matches {text}, a text file, not pre-training data "
            "(TFRecords); build that from it with scripts/build_pretraining_data.py and pass "
            "its --output_dir")
    with pytest.raises(UserInputError, match=r"^--train_data .*c\.txt, a text file, not "):
        pipeline.list_files(f"{directory.parent}/c.txt", "--train_data")


def test_totals_are_those_of_the_selected_shards(tmp_path):
    from electra_tf.data.writer import build_pretraining_data
    lines = corpus_lines(1500)
    (tmp_path / "a.txt").write_text("\n".join(lines[:1000]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(lines[1000:]) + "\n")
    out = tmp_path / "data"
    metadata = build_pretraining_data(f"{tmp_path}/*.txt", UNCASED_VOCAB, str(out),
                                      max_seq_length=64, num_shards=2, num_workers=1,
                                      show_progress=False, log=lambda *_: None)
    first, second = metadata["shards"]
    assert first["num_examples"] and second["num_examples"]
    result = inspect(f"--data={out}/{first['file']}", "--num_examples=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"{out}/metadata.json: {first['num_examples']} examples, {first['num_tokens']} tokens "
        "in the 1 of its 2 shards that --data selects, max_seq_length 64, vocab 30522")
    result = inspect(f"--data={out}", "--num_examples=1")
    assert result.stdout.splitlines()[0] == (
        f"{out}/metadata.json: {metadata['num_examples']} examples, {metadata['num_tokens']} "
        "tokens, 2 shards, max_seq_length 64, vocab 30522")
    # More examples asked for than --data selects: they repeat (the data's pipeline), said.
    asked = first["num_examples"] + 3
    result = inspect(f"--data={out}/{first['file']}", f"--num_examples={asked}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        f"note: --num_examples={asked} exceeds the {first['num_examples']} examples --data "
        "selects: they repeat, as training reads them")
    assert f"example {asked - 1}:" in result.stdout
