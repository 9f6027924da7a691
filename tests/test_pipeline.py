"""The masked tf.data stream: batches, determinism, exact resume, distribution, validation."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import CHINESE_VOCAB, DATA, UNCASED_VOCAB
from electra_tf.data import pipeline
from electra_tf.errors import UserInputError


def dataset(directory, batch_size=16, **kwargs):
    return pipeline.pretraining_dataset(f"{directory}/*.tfrecord*", batch_size, 128,
                                        UNCASED_VOCAB, **kwargs)


def take(iterator, n):
    return [{k: v.numpy() for k, v in next(iterator).items()} for _ in range(n)]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def test_batches_have_the_documented_structure(austen_data):
    directory, _ = austen_data
    tf.random.set_seed(1)  # the shuffles key on the global seed too (as the run sets it)
    batch = next(iter(dataset(directory, seed=1)))
    assert {k: (tuple(v.shape), v.dtype.name) for k, v in batch.items()} == {
        "input_ids": ((16, 128), "int32"), "input_mask": ((16, 128), "int32"),
        "segment_ids": ((16, 128), "int32"), "masked_lm_positions": ((16, 19), "int32"),
        "masked_lm_ids": ((16, 19), "int32"), "masked_lm_weights": ((16, 19), "float32"),
        "example_index": ((16,), "int64")}
    assert (batch["input_ids"].numpy() == 103).sum() > 0.8 * 0.85 * 16 * 19
    # The examples' indices in the stream (after shuffling), which key masks and samples.
    assert batch["example_index"].numpy().tolist() == list(range(16))


def test_eval_pass_is_ordered_finite_and_drops_the_remainder(austen_data):
    directory, metadata = austen_data
    batches = list(dataset(directory, batch_size=100, is_training=False))
    assert len(batches) == metadata["num_examples"] // 100
    again = list(dataset(directory, batch_size=100, is_training=False))
    assert_same([{k: v.numpy() for k, v in b.items()} for b in batches],
                [{k: v.numpy() for k, v in b.items()} for b in again])


def test_no_autotuning_thread_keeps_a_freed_iterator_waiting(austen_data):
    """tf.data's autotuning thread holds an iterator a tf.function read from (the trainer's)
    until its next wake-up when it is freed: up to a minute in the garbage collection of a
    process that trains again (the study's workers, the tests). The pipeline runs without it,
    training and evaluation alike, with its parallel stages and prefetch still on."""
    directory, _ = austen_data
    for is_training in (True, False):
        options = dataset(directory, is_training=is_training).options()
        assert options.autotune.enabled is False
        assert options.deterministic is True
        assert options.experimental_optimization.map_parallelization is True


def test_same_seed_same_stream_other_seed_other_stream(austen_data):
    directory, _ = austen_data
    a = take(iter(dataset(directory, seed=5)), 4)
    assert_same(a, take(iter(dataset(directory, seed=5)), 4))
    b = take(iter(dataset(directory, seed=6)), 4)
    assert (a[0]["input_ids"] != b[0]["input_ids"]).any()


def test_checkpointed_iterator_resumes_with_the_same_examples_and_masks(austen_data, tmp_path):
    directory, _ = austen_data
    iterator = iter(dataset(directory, seed=3))
    take(iterator, 5)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.write(str(tmp_path / "ckpt"))
    expected = take(iterator, 100)  # runs past the first epoch (~86 batches)

    fresh = iter(dataset(directory, seed=3))
    tf.train.Checkpoint(iterator=fresh).read(path).assert_consumed()
    assert_same(take(fresh, 100), expected)


def test_mirrored_strategy_splits_the_global_batch(austen_data, mirrored_strategy):
    directory, _ = austen_data
    strategy = mirrored_strategy
    assert strategy.num_replicas_in_sync == 2
    distributed = pipeline.distributed_dataset(strategy, 32, f"{directory}/*.tfrecord",
                                               max_seq_length=128, vocab_file=UNCASED_VOCAB,
                                               seed=3)
    batch = next(iter(distributed))
    parts = strategy.experimental_local_results(batch["input_ids"])
    assert [p.shape for p in parts] == [(16, 128), (16, 128)]
    assert not np.array_equal(parts[0].numpy(), parts[1].numpy())
    with pytest.raises(UserInputError, match="TRAIN_BATCH_SIZE=33 does not divide over 2"):
        pipeline.distributed_dataset(strategy, 33, f"{directory}/*.tfrecord",
                                     max_seq_length=128, vocab_file=UNCASED_VOCAB)


@pytest.mark.parametrize("num_files", [2, 1], ids=["shard_files", "shard_records"])
def test_input_pipelines_read_disjoint_examples(austen_data, tmp_path, num_files):
    directory, _ = austen_data
    names = sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord"))[:num_files]
    for name in names + ["metadata.json"]:
        shutil.copy(os.path.join(directory, name), tmp_path)
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(2, pipeline_id, 2)
        batches = list(pipeline.pretraining_dataset(
            f"{tmp_path}/*.tfrecord", 50, 128, UNCASED_VOCAB, is_training=False,
            input_context=context))
        # An example's identity: its tokens with [MASK]s blanked (masks differ per index).
        seen.append([tuple(row) for b in batches for row in
                     np.where(b["input_ids"].numpy() == 103, -1, b["input_ids"].numpy())])
    assert len(seen[0]) >= 250 and len(seen[1]) >= 250
    assert not set(seen[0]) & set(seen[1])


def _bert_premask(originals, rng, slots=20):
    """BERT's create_pretraining_data of real examples: min(slots, round(0.15 x tokens))
    positions (not [CLS], [SEP] or padding; the rest of the slots padding), 80% of them
    [MASK], 10% a random token, 10% kept; the originals in masked_lm_ids."""
    rows = []
    for ids, mask in zip(originals["input_ids"], originals["input_mask"]):
        candidates = [i for i in range(int(mask.sum())) if ids[i] not in (101, 102)]
        n = min(slots, max(1, round(0.15 * mask.sum())))
        positions = np.sort(rng.choice(candidates, n, replace=False))
        masked = ids.copy()
        for p, r in zip(positions, rng.random(n)):
            masked[p] = 103 if r < 0.8 else rng.integers(1000, 30522) if r < 0.9 else ids[p]
        pad = slots - n
        rows.append({"input_ids": masked, "input_mask": mask,
                     "segment_ids": originals["segment_ids"][len(rows)],
                     "masked_lm_positions": np.concatenate([positions, np.zeros(pad, int)]),
                     "masked_lm_ids": np.concatenate([ids[positions], np.zeros(pad, int)]),
                     "masked_lm_weights": np.concatenate([np.ones(n), np.zeros(pad)])})
    return rows


def _write_records(path, rows):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row in rows:
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v.astype(int)))
                       for k, v in row.items() if k != "masked_lm_weights"}
            if "masked_lm_weights" in row:
                feature["masked_lm_weights"] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=row["masked_lm_weights"]))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.fixture(scope="module")
def bert_records(austen_data, tmp_path_factory):
    """64 real examples twice: as they were built (plain/) and masked by BERT's builder
    (bert/, 20 slots), and BERT's records as numpy arrays."""
    directory, _ = austen_data
    spec = {n: tf.io.FixedLenFeature([128], tf.int64) for n in pipeline.FEATURES}
    records = tf.data.TFRecordDataset(pipeline.list_files(directory)[0]).take(64)
    originals = {k: v.numpy() for k, v in
                 tf.io.parse_example(next(iter(records.batch(64))), spec).items()}
    out = tmp_path_factory.mktemp("bert_records")
    os.makedirs(out / "plain")
    os.makedirs(out / "bert")
    _write_records(out / "plain" / "data.tfrecord",
                   [{k: v[i] for k, v in originals.items()} for i in range(64)])
    rows = _bert_premask(originals, np.random.default_rng(0))
    _write_records(out / "bert" / "data.tfrecord", rows)
    return out, originals, {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def test_unmask_puts_the_original_tokens_back(bert_records):
    _, originals, bert = bert_records
    assert (bert["input_ids"] != originals["input_ids"]).sum() > 0.8 * bert[
        "masked_lm_weights"].sum()
    restored = pipeline.unmask({k: tf.constant(v, tf.float32 if k.endswith("weights")
                                               else tf.int32) for k, v in bert.items()})
    for name in pipeline.FEATURES:
        np.testing.assert_array_equal(restored[name].numpy(), originals[name])


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_premasked_records_are_masked_again_as_the_same_records_unmasked(
        bert_records, whole_word_masking):
    """By default BERT's records are ELECTRA's data: the run's masks (19 slots at 0.15 x 128,
    not the records' 20; 85% [MASK], the rest kept, never a random token), batch for batch
    those of the same examples built without masks."""
    out, originals, _ = bert_records
    kwargs = dict(batch_size=16, is_training=False, seed=3, whole_word_masking=whole_word_masking)
    remasked = [{k: v.numpy() for k, v in b.items()} for b in dataset(out / "bert", **kwargs)]
    plain = [{k: v.numpy() for k, v in b.items()} for b in dataset(out / "plain", **kwargs)]
    assert_same(remasked, plain)
    ids = np.concatenate([b["input_ids"] for b in remasked])
    assert remasked[0]["masked_lm_positions"].shape == (16, 19)
    assert ((ids == originals["input_ids"]) | (ids == 103)).all()
    assert 0.8 * 0.85 * 64 * 19 < (ids == 103).sum() < 64 * 19


def test_premasked_records_as_written_pass_through(bert_records):
    out, _, bert = bert_records
    batch = next(iter(dataset(out / "bert", is_training=False, premasked="as_written",
                              mask_prob=0.3, whole_word_masking=True)))
    assert batch["masked_lm_positions"].shape == (16, 20)
    assert batch["masked_lm_weights"].dtype == tf.float32
    for name in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        np.testing.assert_array_equal(batch[name].numpy(), bert[name][:16])
    with pytest.raises(UserInputError, match=r"^premasked='bert' is not one of remask, "
                                             r"as_written$"):
        dataset(out / "bert", premasked="bert")


def _error(directory, **kwargs):
    with pytest.raises(UserInputError) as info:
        pipeline.pretraining_dataset(f"{directory}/*.tfrecord*", 4,
                                     kwargs.pop("max_seq_length", 128),
                                     kwargs.pop("vocab_file", UNCASED_VOCAB), **kwargs)
    return str(info.value)


def test_mismatches_and_bad_data_fail_before_work(austen_data, tmp_path):
    directory, _ = austen_data
    assert _error(directory, max_seq_length=512) == (
        f"{directory}/metadata.json says max_seq_length=128 but the run uses 512; set "
        "MAX_SEQ_LENGTH=128 or rebuild the data")
    assert _error(directory, vocab_file=CHINESE_VOCAB) == (
        f"{directory}/metadata.json was built with a vocab of 30522 tokens but "
        f"{CHINESE_VOCAB} has 21128; use the vocab the data was built with")
    swapped = tmp_path / "vocab.txt"
    vocab = open(UNCASED_VOCAB, encoding="utf-8").read().split("\n")
    vocab[2000], vocab[2001] = vocab[2001], vocab[2000]
    swapped.write_text("\n".join(vocab), encoding="utf-8")
    assert "was built with a different vocab than" in _error(directory, vocab_file=str(swapped))
    # The vocab metadata.json names, edited since the build: said so, with where a copy is.
    moved = tmp_path / "moved"
    shutil.copytree(directory, moved)
    (moved / "metadata.json").write_text(json.dumps(
        {**json.loads((moved / "metadata.json").read_text()), "vocab_file": str(swapped)}))
    assert _error(moved, vocab_file=str(swapped)) == (
        f"{swapped}, which {moved}/metadata.json names, has changed since the build (its "
        "sha256 differs from the one recorded); put back the vocab the data was built with (a "
        "model dir trained on it keeps a copy: MODEL_DIR/vocab.txt) and pass it as --vocab_file")
    # Held-out data built otherwise than the training data: rebuilt as that was.
    files = pipeline.list_files(directory)
    for length, vocab_file, said in (
            (512, UNCASED_VOCAB, f"{directory}/metadata.json says max_seq_length=128 but the "
                                 "run uses 512 (as --train_data)"),
            (128, CHINESE_VOCAB, f"{directory}/metadata.json was built with a vocab of 30522 "
                                 f"tokens but {CHINESE_VOCAB} has 21128")):
        with pytest.raises(UserInputError) as info:
            pipeline.validate_data(files, length, vocab_file, data_flag="--eval_data",
                                   against="--train_data")
        assert str(info.value) == (f"{said}; rebuild --eval_data as --train_data was built "
                                   f"(--max_seq_length={length}, --vocab_file={vocab_file})")
    assert _error(tmp_path / "nothing").startswith(f"data {tmp_path}/nothing/*.tfrecord* "
                                                   "matches no file")
    # Two builds' folders in one run: each metadata.json must agree with the first.
    metadata = json.loads(open(os.path.join(directory, "metadata.json")).read())
    name = sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord"))[0]
    for key, value, said in (("lower_case", False, "lower_case=True, {} lower_case=False"),
                             ("vocab_sha256", "0123456789abcdef", "vocab {v} (sha256 {h}), {} "
                              "vocab {v} (sha256 0123456789ab)")):
        other = tmp_path / f"other_{key}"
        other.mkdir()
        shutil.copy(os.path.join(directory, name), other)
        (other / "metadata.json").write_text(json.dumps({**metadata, key: value}))
        with pytest.raises(UserInputError) as info:
            pipeline.pretraining_dataset(f"{directory}/*.tfrecord,{other}/*.tfrecord", 4, 128,
                                         UNCASED_VOCAB)
        assert str(info.value) == (
            f"--train_data mixes builds made differently: {directory}/metadata.json says "
            + said.format(f"{other}/metadata.json", v=metadata["vocab_file"],
                          h=metadata["vocab_sha256"][:12])
            + "; train on data built with one vocab and the same build flags")
    # A build made before word_segmenter was recorded: none, as the other's.
    older = tmp_path / "older"
    older.mkdir()
    shutil.copy(os.path.join(directory, name), older)
    (older / "metadata.json").write_text(json.dumps(
        {k: v for k, v in metadata.items() if k != "word_segmenter"}))
    pipeline.pretraining_dataset(f"{directory}/*.tfrecord,{older}/*.tfrecord", 4, 128,
                                 UNCASED_VOCAB)

    # Without metadata.json (e.g. data from the official builder) the records are checked.
    bare = tmp_path / "bare"
    bare.mkdir()
    name = sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord"))[0]
    shutil.copy(os.path.join(directory, name), bare)
    assert _error(bare, max_seq_length=256) == (
        f"data file {bare}/{name} has sequences of length 128 but the run uses "
        "max_seq_length=256; set MAX_SEQ_LENGTH=128 or rebuild")
    # One run reads one kind of file: a GZIP one among plain ones would read as corrupt.
    with tf.io.TFRecordWriter(str(bare / "z.tfrecord.gz"), "GZIP") as writer:
        for record in tf.data.TFRecordDataset(os.path.join(directory, name)).take(2):
            writer.write(record.numpy())
    assert _error(bare) == (
        f"--train_data mixes GZIP-compressed files ({bare}/z.tfrecord.gz) with plain ones "
        f"({bare}/{name}); one run reads one kind: rebuild one set with the other's "
        "--compression")
    os.remove(bare / "z.tfrecord.gz")

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "a.tfrecord").write_bytes(b"this is not a tfrecord file at all" * 10)
    # TensorFlow's message without its wrapping ("{{function_node ...}}", "[Op:...]").
    assert _error(corrupt) == (
        f"data file {corrupt}/a.tfrecord is corrupt (corrupted record at 0 (Is this even a "
        "TFRecord file?)); rebuild it or remove it from --train_data")
    (corrupt / "a.tfrecord").write_bytes(b"")
    assert _error(corrupt) == f"data file {corrupt}/a.tfrecord is empty; rebuild it or remove it"
    with tf.io.TFRecordWriter(str(corrupt / "a.tfrecord")) as writer:
        writer.write(b"\x08\x96\x01 not an example")
    assert "holds records that are not tf.train.Example" in _error(corrupt)
    with tf.io.TFRecordWriter(str(corrupt / "a.tfrecord")) as writer:
        writer.write(tf.train.Example().SerializeToString())
    assert "lacks the features input_ids, input_mask, segment_ids" in _error(corrupt)
    # The files' first records are read side by side: the error is still the first bad
    # file's in order, among many good ones.
    for i in range(40):
        shutil.copy(os.path.join(directory, name), corrupt / f"b{i:02d}.tfrecord")
    (corrupt / "c.tfrecord").write_bytes(b"")
    (corrupt / "a.tfrecord").rename(corrupt / "b20x.tfrecord")
    assert "b20x.tfrecord lacks the features" in _error(corrupt)


def test_more_bad_settings_and_files_fail_with_one_line(austen_data, tmp_path):
    """Each of these raised a bare exception (or dropped a file silently) before."""
    import gzip as gz

    from electra_tf import tokenization
    from electra_tf.data import corpus, writer
    from electra_tf.training.optimization import LinearWarmupLinearDecay
    directory, _ = austen_data
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("[PAD]\n[UNK]\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(UserInputError, match=r"latin1.txt is not UTF-8 text \(byte 15\)"):
        tokenization.load_vocab(str(latin))
    twice = tmp_path / "twice.txt"
    twice.write_text("[PAD]\n[UNK]\nthe\n\nof\nthe\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"twice.txt line 6 repeats line 3 \('the'\); a vocab "
                                             r"holds each token once"):
        tokenization.load_vocab(str(twice))
    # A token with a space (a hand-added domain word 'the ' or 'hello world') was matched
    # across words by tensorflow-text: 'the page' became 'the ' + '##page', silently.
    spaced = tmp_path / "spaced.txt"
    spaced.write_bytes(open(UNCASED_VOCAB, "rb").read() + b"the \n")
    with pytest.raises(UserInputError, match=r"spaced.txt line 30523 \('the '\) holds a space, "
                                             r"which no WordPiece token does"):
        tokenization.load_vocab(str(spaced))
    marked = tmp_path / "marked.txt"
    marked.write_bytes(b"\xef\xbb\xbf" + open(UNCASED_VOCAB, "rb").read())
    with pytest.raises(UserInputError, match=r"marked.txt starts with a UTF-8 byte-order mark "
                                             r"\(U\+FEFF\), which would be part of its first"):
        tokenization.load_vocab(str(marked))
    # JSONL written with a byte-order mark reads as without one (it is not JSON).
    records = "".join(json.dumps({"text": f"Sentence {i} of the file.\n\nAnd more {i}."}) + "\n"
                      for i in range(40))
    (tmp_path / "plain.jsonl").write_text(records, encoding="utf-8")
    (tmp_path / "marked.jsonl").write_text("\ufeff" + records, encoding="utf-8")
    built = {}
    for name in ("plain", "marked"):
        writer.build_pretraining_data(str(tmp_path / f"{name}.jsonl"), UNCASED_VOCAB,
                                      str(tmp_path / f"jsonl_{name}"), input_format="jsonl",
                                      num_workers=1, show_progress=False, log=lambda *_: None)
        built[name] = [p.read_bytes() for p in sorted((tmp_path / f"jsonl_{name}").glob("*"))
                       if p.name != "metadata.json"]
    assert built["plain"] and built["plain"] == built["marked"]
    assert _error(directory, mask_prob=1.5) == (
        "MASK_PROB=1.5 must be above 0 and below 1 (the paper: 0.15, 0.25 for large)")
    assert _error(directory, max_predictions_per_seq=200) == (
        "200 masked positions per sequence (pretraining.max_predictions_per_seq) do not fit "
        "sequences of 128; use between 1 and 128")
    for n in (0, -1):  # (0 was taken as unset)
        assert _error(directory, max_predictions_per_seq=n) == (
            f"pretraining.max_predictions_per_seq={n} masks nothing; use between 1 and 128 "
            "masked positions per sequence, or leave it unset for int((MASK_PROB + 0.005) x "
            "128)")
    with pytest.raises(UserInputError, match=r"^learning_rate='5e-4' is not a number; bind it "
                                             r"without quotes"):
        LinearWarmupLinearDecay("5e-4", 100, 10)
    for piece_bytes in (0, -(1 << 20)):
        with pytest.raises(UserInputError, match=r"cannot split a file; pass --piece_mb > 0"):
            corpus.plan_pieces([os.path.join(DATA, "corpus", "emma.txt.gz")], piece_bytes)
    whole = gz.decompress(open(os.path.join(DATA, "corpus", "emma.txt.gz"), "rb").read())
    (tmp_path / "cut.txt.gz").write_bytes(gz.compress(whole)[:40000])
    with pytest.raises(UserInputError, match=r"cut.txt.gz is truncated or corrupt \("):
        writer.build_pretraining_data(str(tmp_path / "cut.txt.gz"), UNCASED_VOCAB,
                                      str(tmp_path / "out"), num_workers=1,
                                      show_progress=False, log=lambda *_: None)
    assert not os.path.exists(tmp_path / "out")
    quiet = dict(num_workers=1, show_progress=False, log=lambda *_: None)
    (tmp_path / "afile").write_text("not a folder")
    for output in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(UserInputError, match=(
                f"^--output_dir={output}: {tmp_path}/afile is a file, not a folder; pass")):
            writer.build_pretraining_data(os.path.join(DATA, "corpus", "emma.txt.gz"),
                                          UNCASED_VOCAB, str(output), **quiet)
    # Bad input met part way keeps the complete shards for a rerun once the file is mended;
    # a rerun without the file is told how to start afresh.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(os.path.join(DATA, "corpus", "persuasion.txt.gz"), mixed / "a.txt.gz")
    shutil.copy(tmp_path / "cut.txt.gz", mixed / "b.txt.gz")
    with pytest.raises(UserInputError, match=r"b.txt.gz is truncated or corrupt"):
        writer.build_pretraining_data(str(mixed), UNCASED_VOCAB, str(tmp_path / "m"), **quiet)
    assert len(list((tmp_path / "m").glob("*.tfrecord"))) == 1
    os.remove(mixed / "b.txt.gz")
    for output in (mixed, mixed / "out"):  # its shards would be inputs of the rerun
        with pytest.raises(UserInputError, match=(f"^--output_dir={output} lies in what "
                                                  f"--input={mixed} reads, so a rerun")):
            writer.build_pretraining_data(str(mixed), UNCASED_VOCAB, str(output), **quiet)
    assert sorted(os.listdir(mixed)) == ["a.txt.gz"]
    with pytest.raises(UserInputError, match=(
            f"^--output_dir={tmp_path}/m holds an unfinished build with other settings \\("
            r"inputs, num_shards differ: it stopped, e.g. at a bad input file\); rerun it with "
            r"the same flags \(a file mended in place\) to resume, or delete the folder")):
        writer.build_pretraining_data(str(mixed), UNCASED_VOCAB, str(tmp_path / "m"), **quiet)
    # A build stopped part way (its state folder, no metadata.json yet) is not read as data.
    unfinished = tmp_path / "unfinished"
    shutil.copytree(directory, unfinished)
    os.remove(unfinished / writer.METADATA_FILE)
    os.mkdir(unfinished / writer.STATE_DIR)
    for pattern in (str(unfinished), f"{unfinished}/*.tfrecord"):
        with pytest.raises(UserInputError, match=(
                f"^data {unfinished} is an unfinished build \\(no metadata.json yet\\); rerun "
                "its scripts/build_pretraining_data.py command to finish it$")):
            pipeline.list_files(pattern)
    with pytest.raises(UserInputError, match=f"^--train_data {unfinished} is an unfinished"):
        pipeline.list_files(str(unfinished), "--train_data")  # (named by its flag)
    # Only shards metadata.json records as empty: one line, not an empty pipeline's error.
    blank = tmp_path / "blank"
    shutil.copytree(directory, blank)
    metadata = json.loads((blank / writer.METADATA_FILE).read_text())
    first = metadata["shards"][0]["file"]
    metadata["shards"][0]["num_examples"] = 0
    (blank / writer.METADATA_FILE).write_text(json.dumps(metadata))
    with pytest.raises(UserInputError, match=(
            f"^data {blank}/{first} matches only shards that metadata.json records as empty")):
        pipeline.list_files(f"{blank}/{first}")
    # The build's metadata.json given as the data (it was read as one empty shard).
    with pytest.raises(UserInputError, match=(
            f"^--train_data {blank}/metadata.json names the build's metadata.json, not its "
            f"TFRecord shards; pass the folder that holds them \\({blank}\\)$")):
        pipeline.list_files(f"{blank}/metadata.json", "--train_data")


def test_full_scan_finds_corruption_past_the_first_record(austen_data, tmp_path):
    directory, _ = austen_data
    name = sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord"))[0]
    data = bytearray(open(os.path.join(directory, name), "rb").read())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / name).write_bytes(bytes(data))
    files = [str(tmp_path / name)]
    pipeline.validate_data(files, 128)  # the quick check reads the first record only
    with pytest.raises(UserInputError, match=f"data file {tmp_path}/{name} is corrupt"):
        pipeline.validate_data(files, 128, full_scan=True)


def test_data_without_metadata_is_checked_against_the_vocab(austen_data, tmp_path):
    """Official-format data has no metadata.json: a vocab smaller than the data's ids is
    caught from each file's first record, before a run starts (not as an embedding lookup
    error mid-run)."""
    directory, _ = austen_data
    name = sorted(n for n in os.listdir(directory) if n.endswith(".tfrecord"))[0]
    shutil.copy(os.path.join(directory, name), tmp_path / name)
    files = [str(tmp_path / name)]
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(files))).numpy())
    top = max(first.features.feature["input_ids"].int64_list.value)
    vocab = tmp_path / "vocab.txt"
    lines = open(UNCASED_VOCAB, encoding="utf-8").read().splitlines()
    vocab.write_text("\n".join(lines[:top + 1]) + "\n", encoding="utf-8")
    pipeline.validate_data(files, 128, str(vocab))  # every id of the first record fits
    vocab.write_text("\n".join(lines[:top]) + "\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=f"data file {tmp_path}/{name} holds token id "
                       f"{top}, beyond the {top:,} tokens of {vocab}; use the vocab"):
        pipeline.validate_data(files, 128, str(vocab))


@pytest.mark.parametrize("vocab", [CHINESE_VOCAB, UNCASED_VOCAB])
def test_segmenter_words_keep_the_sentence_ids(vocab):
    # jieba cuts accented Latin at the accent and yields Hangul, kana and Cyrillic letter by
    # letter; the pieces are joined where BERT sees no word boundary, so the ids are the
    # sentence's own.
    from electra_tf import tokenization
    from electra_tf.data import writer
    lines = ["我喜欢café和naïve的Pokémon游戏", "한국어 좋아요，日本語もいい", "Привет, мир! 你好",
             "e-mail: a.b@c.de 价格$9.99", "zero\u200dwidth 中文\u3000空格 x²",
             "北京欢迎你", "control\x1cjoins 字\x85母"]
    tokenizer = tokenization.Tokenizer(vocab, lower_case=True)
    packed = writer._tokenize_segmented(tokenizer, writer._jieba_segmenter(), lines)
    plain = writer._tokenize_plain(tokenizer, lines)
    assert [[t >> 1 for t in row] for row in packed] == plain
    words = []  # the first sentence's words, by the word starts
    for piece, packed_id in zip(tokenizer.convert_ids_to_tokens(plain[0]), packed[0]):
        if packed_id & 1:
            words.append(piece)
        else:
            words[-1] += piece.removeprefix("##")
    if vocab == CHINESE_VOCAB:
        assert words == ["我", "喜欢", "cafe", "和", "naive", "的", "pokemon", "游戏"]
    else:
        assert words == ["我", "[UNK][UNK]", "cafe", "和", "naive", "的", "pokemon", "[UNK][UNK]"]


def test_chinese_whole_word_masking_masks_segmenter_words(tmp_path, austen_data):
    from conftest import chinese_reviews
    from electra_tf import tokenization
    from electra_tf.data.writer import build_pretraining_data
    (tmp_path / "zh.txt").write_text("\n\n".join(chinese_reviews()) + "\n", encoding="utf-8")
    quiet = {"show_progress": False, "log": lambda *_: None, "max_seq_length": 64}
    build_pretraining_data(str(tmp_path / "zh.txt"), CHINESE_VOCAB, str(tmp_path / "words"),
                           word_segmenter="jieba", **quiet)
    build_pretraining_data(str(tmp_path / "zh.txt"), CHINESE_VOCAB, str(tmp_path / "chars"),
                           **quiet)
    spec = {"input_ids": tf.io.FixedLenFeature([64], tf.int64),
            "word_start": tf.io.FixedLenFeature([64], tf.int64, default_value=[0] * 64)}

    def records(name):
        files = sorted(str(p) for p in (tmp_path / name).glob("*.tfrecord"))
        return tf.io.parse_example(list(tf.data.TFRecordDataset(files)), spec)

    words, chars = records("words"), records("chars")
    # Same ids either way; only the segmented build marks word starts.
    np.testing.assert_array_equal(words["input_ids"], chars["input_ids"])
    starts = words["word_start"].numpy()
    real = words["input_ids"].numpy() > 0
    assert (starts[~real] == 0).all() and 0.5 < starts[real].mean() < 0.9
    assert chars["word_start"].numpy().sum() == 0

    batches = list(pipeline.pretraining_dataset(
        f"{tmp_path}/words/*.tfrecord", 64, 64, CHINESE_VOCAB, whole_word_masking=True,
        is_training=False))
    multi_char = 0
    for b, begin in zip(batches, range(0, 64 * len(batches), 64)):
        ids = b["input_ids"].numpy()
        for row in range(64):
            row_starts = starts[begin + row]
            row_real = real[begin + row]
            chosen = set(b["masked_lm_positions"].numpy()[row][
                b["masked_lm_weights"].numpy()[row] > 0].tolist())
            for p in chosen:
                start = p
                while not row_starts[start]:
                    start -= 1
                end = p + 1
                while end < 64 and row_real[end] and not row_starts[end]:
                    end += 1
                assert set(range(start, end)) <= chosen
                multi_char += end - start > 1
        assert ids.shape == (64, 64)
    assert multi_char > 50

    # Whole-word masking of the characters' build masks characters one by one: a note says
    # so (not for the words' build, nor for English, whose words are "##" pieces).
    vocab = tokenization.load_vocab(CHINESE_VOCAB)
    notes = {name: pipeline.whole_word_note(
        pipeline.list_files(str(tmp_path / name)), vocab,
        pipeline.validate_data(pipeline.list_files(str(tmp_path / name)), 64, CHINESE_VOCAB))
        for name in ("words", "chars")}
    assert notes == {"words": None, "chars": (
        "note: whole-word masking on --train_data, built without --word_segmenter: a word is "
        "a token and its '##' pieces, so Chinese characters are masked one by one; rebuild "
        "the data with --word_segmenter=jieba to mask Chinese words")}
    english = pipeline.list_files(austen_data[0])
    assert pipeline.whole_word_note(english, tokenization.load_vocab(UNCASED_VOCAB),
                                    pipeline.validate_data(english, 128)) is None


def test_uneven_worker_shares_are_noted(tmp_path):
    """Workers take every N-th file and repeat their own: unequal shares of examples mean
    unequal sampling, which a note says (by metadata.json's counts)."""
    names = [f"pretrain_data-{i:05d}-of-00003.tfrecord" for i in range(3)]
    (tmp_path / "metadata.json").write_text(json.dumps({"shards": [
        {"file": n, "num_examples": 100, "num_tokens": 0} for n in names]}))
    files = [str(tmp_path / n) for n in names]
    assert pipeline.uneven_shares_note(files, 2) == (
        "note: the 3 data files split over 2 workers into shares of 200, 100 examples; each "
        "worker repeats its own, so an example of the smallest share is seen 2.0x as often as "
        "one of the largest. More, smaller files even the shares out (build_pretraining_data.py "
        "splits plain-text input into --piece_mb pieces)")
    assert pipeline.uneven_shares_note(files, 3) is None  # even
    assert pipeline.uneven_shares_note(files, 4) is None  # records are sharded instead
    assert pipeline.uneven_shares_note(files[:2], 2) is None
    assert pipeline.uneven_shares_note(files + [str(tmp_path / "other.tfrecord")], 2) is None


def test_a_data_folder_is_read_as_named_though_its_name_holds_a_wildcard(tmp_path):
    """`--train_data=runs/a*b/data`, a folder: its shards, not those of runs/aZb/data too;
    `run[1]/data` matched nothing."""
    for folder in ("a*b", "aZb", "run[1]", "co,mma"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "pretrain_data-00000-of-00001.tfrecord").write_bytes(b"")
    for folder in ("a*b", "run[1]", "co,mma"):
        assert pipeline.list_files(f"{tmp_path}/{folder}") == [
            f"{tmp_path}/{folder}/pretrain_data-00000-of-00001.tfrecord"]
    assert len(pipeline.list_files(f"{tmp_path}/a?b")) == 2  # a glob is one still


def test_a_glob_missing_the_compressed_shards_says_how_to_match_them(tmp_path):
    """Shards built with --compression=gzip end .tfrecord.gz: the usual '*.tfrecord' glob
    matches none of them, and the error says which glob does."""
    (tmp_path / "pretrain_data-00000-of-00001.tfrecord.gz").write_bytes(b"")
    with pytest.raises(UserInputError) as error:
        pipeline.list_files(f"{tmp_path}/*.tfrecord", "--data")
    assert str(error.value) == (f"--data {tmp_path}/*.tfrecord matches no file; its compressed "
                                f"shards end .tfrecord.gz: pass '{tmp_path}/*.tfrecord*'")
    with pytest.raises(UserInputError) as error:  # a shell's brace list
        pipeline.list_files(f"{tmp_path}/{{a,b}}/*.tfrecord*", "--data")
    assert str(error.value) == (f"--data {tmp_path}/{{a matches no file; a brace list ({{a,b}}) "
                                "is not a glob here: write its paths out, comma-separated "
                                "(dir/a,dir/b), or use a wildcard (dir/*)")
