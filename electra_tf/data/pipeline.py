"""Streaming masked pre-training batches from TFRecords with tf.data.

    files -> shard (input context) -> shuffle files -> repeat -> parallel interleave
    -> shuffle examples -> enumerate (stream index) -> batch (drop remainder)
    -> parse -> dynamic masking (masking.py) -> prefetch

Everything is deterministic for a seed (parallel stages keep their order; the shuffles also
key on TensorFlow's global seed, as every tf.data shuffle does, which `run_pretraining` sets
to the same seed before it builds the pipeline), and the iterator is a trackable object: put
it in a tf.train.Checkpoint and a resumed run continues with the same examples *and* the
same masks, because the masks are keyed by each example's index in the stream, which the
iterator state carries.

Records may be ours or the official builder's (input_ids, input_mask, segment_ids), or
pre-masked BERT records (also masked_lm_positions/ids/weights). By default the original
tokens of pre-masked records are put back (masked_lm_ids at masked_lm_positions) and masked
again like any other record (`premasked="remask"`: ELECTRA's dynamic masking at the run's
mask_prob, whole words if asked); `premasked="as_written"` keeps BERT's static masks and its
80/10/10 replacement. `validate_data` checks records against the run's config before any
work starts.

For tf.distribute, `worker_dataset` builds this worker's pipeline (the trainer slices its
batches among the worker's replicas; its iterator can be checkpointed), and
`distributed_dataset` one pipeline per input worker with `distribute_datasets_from_function`.
Files are sharded by the input context (records, when there are fewer files than pipelines)
and each pipeline's examples get disjoint indices.
"""

import concurrent.futures
import fnmatch
import json
import os
import re

import numpy as np
import tensorflow as tf

from electra_tf import tokenization
from electra_tf.data import corpus, masking
from electra_tf.data.writer import METADATA_FILE, STATE_DIR
from electra_tf.errors import UserInputError

FEATURES = ("input_ids", "input_mask", "segment_ids")
WORD_START = "word_start"  # optional: written by the builder's word segmenter (Chinese)
PREMASKED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
PREMASKED_MODES = ("remask", "as_written")  # what pretraining_dataset does with them
_READERS = 16  # files whose first record validate_data reads at once


# Corpus files, by their names: the builder's input, not its output.
_TEXT_FILE = re.compile(r"\.(txt|text|jsonl|csv|tsv)(" + "|".join(
    re.escape(suffix) for suffix in corpus._COMPRESSED) + r")?$", re.IGNORECASE)


def list_files(file_pattern: str | list[str], data_flag: str | None = None) -> list[str]:
    """Comma-separated globs -> sorted files (metadata and temp files excluded). A file or
    folder that exists is read as named, though its name has a comma or a wildcard.
    `data_flag` names the flag the globs came from in errors ("--eval_data ... matches no
    file")."""
    patterns = (corpus.split_patterns(file_pattern) if isinstance(file_pattern, str)
                else file_pattern)
    files = set()
    for pattern in patterns:
        pattern = pattern.strip()
        if tf.io.gfile.isdir(pattern):
            matched = [os.path.join(pattern, name) for name in tf.io.gfile.listdir(pattern)
                       if fnmatch.fnmatch(name, "*.tfrecord*")]
            pattern = os.path.join(pattern, "*.tfrecord*")  # (for the message)
        else:
            matched = [pattern] if tf.io.gfile.exists(pattern) else tf.io.gfile.glob(pattern)
        if not matched:
            longer = pattern.endswith(".tfrecord") and tf.io.gfile.glob(pattern + ".gz")
            raise UserInputError(
                f"{data_flag or 'data'} {pattern} matches no file; "
                + (f"its compressed shards end .tfrecord.gz: pass '{pattern}*'" if longer else
                   corpus.BRACE_LIST_HINT if re.search(r"[{}]", pattern) else
                   "check the path, or build the data with scripts/build_pretraining_data.py"))
        shards = [m for m in matched
                  if not m.endswith(".json") and ".tmp-" not in os.path.basename(m)]
        if not shards and any(os.path.basename(m) == METADATA_FILE for m in matched):
            folder = os.path.dirname(next(m for m in matched
                                          if os.path.basename(m) == METADATA_FILE))
            raise UserInputError(
                f"{data_flag or 'data'} {pattern} names the build's {METADATA_FILE}, not its "
                f"TFRecord shards; pass the folder that holds them ({folder or '.'})")
        text = next((m for m in shards if _TEXT_FILE.search(m)), None)
        if text:  # (read as TFRecords: "corrupt ... rebuild it", after asking for flags)
            raise UserInputError(
                f"{data_flag or 'data'} {pattern} matches {text}, a text file, not "
                "pre-training data (TFRecords); build that from it with "
                "scripts/build_pretraining_data.py and pass its --output_dir")
        files.update(shards)
    for directory in sorted({os.path.dirname(f) for f in files}):
        if (tf.io.gfile.exists(os.path.join(directory, STATE_DIR))
                and not tf.io.gfile.exists(os.path.join(directory, METADATA_FILE))):
            raise UserInputError(
                f"{data_flag or 'data'} {directory or '.'} is an unfinished build (no "
                f"{METADATA_FILE} yet); "
                "rerun its scripts/build_pretraining_data.py command to finish it")
    kept = sorted(files - _empty_shards(files))
    if not kept:
        raise UserInputError(
            f"{data_flag or 'data'} {','.join(patterns)} matches only shards that "
            f"{METADATA_FILE} records as "
            "empty (built from blank input); select the shards with examples")
    return kept


def _empty_shards(files) -> set[str]:
    """The files that their folder's metadata.json records with no examples: shards of the
    builder whose inputs held no text (blank files), which the pipeline leaves out."""
    empty = set()
    for directory in {os.path.dirname(f) for f in files}:
        path = os.path.join(directory, METADATA_FILE)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                shards = json.load(f).get("shards", [])
            empty.update(os.path.join(directory, shard["file"]) for shard in shards
                         if shard.get("num_examples") == 0)
    return empty


def _compression_of(path: str) -> str:
    return "GZIP" if path.endswith(".gz") else ""


def vocab_file_of(vocab_file: str | None, files: list[str], data: str,
                  data_flag: str = "--train_data") -> str:
    """`vocab_file`, or where it is None the vocab the data's metadata.json names; one that
    is not there is refused in one line."""
    named = vocab_file is None
    if named:
        metadata = read_metadata(files)
        if metadata is None or not metadata.get("vocab_file"):
            raise UserInputError(
                f"{data_flag}={data} has no metadata.json naming its vocab; pass --vocab_file "
                "(the vocab the data was built with)")
        vocab_file = metadata["vocab_file"]
    if not tf.io.gfile.exists(vocab_file):
        raise UserInputError(
            f"vocab file {vocab_file}" + (f", which {data_flag}'s metadata.json names," if named
                                          else "")
            + " does not exist; pass --vocab_file with the vocab the data was built with"
            + (" (a model dir trained on it keeps a copy: MODEL_DIR/vocab.txt)" if named
               else ""))
    return vocab_file


def read_metadata(files: list[str]) -> dict | None:
    """The metadata.json beside the files, if there is one (data built by this project); of
    the first folder that has one where the files lie in several (see `read_all_metadata`)."""
    found = read_all_metadata(files)
    return found[0] if found else None


def read_all_metadata(files: list[str]) -> list[dict]:
    """The metadata.json of each folder the files lie in that has one, in folder order."""
    found = []
    for directory in sorted({os.path.dirname(f) for f in files}):
        path = os.path.join(directory, METADATA_FILE)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                metadata = json.load(f)
            metadata["_path"] = path
            found.append(metadata)
    return found


def uneven_shares_note(files: list[str], num_pipelines: int) -> str | None:
    """A note where the input pipelines' shares of the files (file i goes to pipeline
    i % num_pipelines, as `pretraining_dataset` shards them) hold unequal numbers of examples
    by their folders' metadata.json: each pipeline repeats its own files, so the examples
    of a smaller share are seen more often. None where the shares are within 10% of each
    other, records are sharded instead (fewer files than pipelines) or a count is unknown."""
    if num_pipelines < 2 or len(files) < num_pipelines:
        return None
    counts = {}
    for metadata in read_all_metadata(files):
        directory = os.path.dirname(metadata["_path"])
        counts.update({os.path.join(directory, s["file"]): s["num_examples"]
                       for s in metadata["shards"]})
    if not all(f in counts for f in files):
        return None
    shares = [sum(counts[f] for f in files[i::num_pipelines]) for i in range(num_pipelines)]
    if max(shares) <= 1.1 * min(shares):
        return None
    return (f"note: the {len(files)} data files split over {num_pipelines} workers into "
            f"shares of {', '.join(map(str, shares))} examples; each worker repeats its own, "
            f"so an example of the smallest share is seen {max(shares) / min(shares):.1f}x as "
            "often as one of the largest. More, smaller files even the shares out "
            "(build_pretraining_data.py splits plain-text input into --piece_mb pieces)")


# What one run's data must agree on, where --train_data names several builds' folders.
_BUILD_SETTINGS = ("max_seq_length", "vocab_sha256", "lower_case", "strip_accents",
                   "word_segmenter")


def _build_setting(metadata: dict, key: str):
    """A build setting of metadata.json; builds made before word_segmenter was recorded
    had none."""
    return metadata.get(key, "none") if key == "word_segmenter" else metadata.get(key)


def _tf_message(error: tf.errors.OpError) -> str:
    """An op error's first line without TensorFlow's "{{function_node ...}}" and
    "[Op:...] name: ..." wrapping."""
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", error.message.splitlines()[0])
    return re.sub(r"\s*\[Op:[^\]]*\]( name: \S*)?\s*$", "", line)


def _first_record(path: str, data_flag: str) -> tf.train.Example:
    dataset = tf.data.TFRecordDataset(path, compression_type=_compression_of(path))
    try:
        for record in dataset.take(1):
            return tf.train.Example.FromString(record.numpy())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise UserInputError(
            f"data file {path} is corrupt ({_tf_message(e)}); rebuild it or remove "
            f"it from {data_flag}") from None
    except Exception as e:  # a protobuf DecodeError: the record is not a tf.train.Example
        raise UserInputError(
            f"data file {path} holds records that are not tf.train.Example ({e}); point "
            f"{data_flag} at pre-training TFRecords") from None
    raise UserInputError(f"data file {path} holds no records; rebuild it or remove it")


def validate_data(files: list[str], max_seq_length: int, vocab_file: str | None = None,
                  full_scan: bool = False, *, length_flag: str = "MAX_SEQ_LENGTH",
                  data_flag: str = "--train_data", against: str | None = None) -> dict:
    """Checks data against the run's config; returns what it learned.

    Checks: the files exist and start with a readable tf.train.Example holding the
    features with length max_seq_length; metadata.json (if present) agrees on
    max_seq_length, vocab size and vocab hash; with a vocab, each file's first record holds
    no token id beyond it (what data without metadata.json can be checked by). With
    full_scan, every record's checksum is read too (a pass over all data). Raises
    UserInputError naming the file and the fix.

    The fixes the errors suggest name the caller's settings: `length_flag` for the sequence
    length (a gin macro in training, a flag in scripts/inspect_pretraining_data.py) and
    `data_flag` for the data. `against`: the data the run's length and vocab came from
    (held-out data's are "--train_data"'s): a mismatch is fixed by rebuilding this data.

    Returns {"premasked": bool, "max_predictions": int or None, "word_starts": bool,
    "metadata": dict or None}; word_starts says the records carry word boundaries.
    """
    found = read_all_metadata(files)
    for other in found[1:]:
        for key in _BUILD_SETTINGS:
            if _build_setting(other, key) != _build_setting(found[0], key):
                first, second = (
                    f"vocab {m.get('vocab_file')} (sha256 {m[key][:12]})" if key == "vocab_sha256"
                    else f"{key}={_build_setting(m, key)}" for m in (found[0], other))
                raise UserInputError(
                    f"{data_flag} mixes builds made differently: {found[0]['_path']} says "
                    f"{first}, {other['_path']} {second}; train on data built with one vocab "
                    "and the same build flags")
    metadata = found[0] if found else None
    vocab = tokenization.load_vocab(vocab_file) if vocab_file is not None else None
    # Held-out data (`against` names the data the run's length and vocab came from) that
    # differs is rebuilt as that was; changing the run's settings would not fit it.
    rebuild = (f"rebuild {data_flag} as {against} was built (--max_seq_length="
               f"{max_seq_length}, --vocab_file={vocab_file})" if against else None)
    if metadata is not None:
        where = metadata["_path"]
        if metadata["max_seq_length"] != max_seq_length:
            raise UserInputError(
                f"{where} says max_seq_length={metadata['max_seq_length']} but the run uses "
                f"{max_seq_length}" + (f" (as {against}); {rebuild}" if against else
                                      f"; set {length_flag}={metadata['max_seq_length']} or "
                                      "rebuild the data"))
        if vocab is not None:
            same_file = metadata.get("vocab_file") == vocab_file

            def changed(how):
                return (f"{vocab_file}, which {where} names, has changed since the build "
                        f"({how}); put back the vocab the data was built with (a model dir "
                        "trained on it keeps a copy: MODEL_DIR/vocab.txt) and pass it as "
                        "--vocab_file")
            if metadata["vocab_size"] != len(vocab):
                raise UserInputError(
                    changed(f"{metadata['vocab_size']} tokens then, {len(vocab)} now")
                    if same_file and not against else
                    f"{where} was built with a vocab of {metadata['vocab_size']} tokens but "
                    f"{vocab_file} has {len(vocab)}; "
                    + (rebuild if against else "use the vocab the data was built with"))
            if metadata["vocab_sha256"] != tokenization.vocab_sha256(vocab_file):
                raise UserInputError(
                    changed("its sha256 differs from the one recorded")
                    if same_file and not against else
                    f"{where} was built with a different vocab than {vocab_file} (sha256 "
                    "differs); " + (rebuild if against else
                                    "use the vocab the data was built with"))
    compressed = sorted({_compression_of(f) == "GZIP" for f in files})
    if len(compressed) > 1:
        plain = next(f for f in files if not f.endswith(".gz"))
        gzip = next(f for f in files if f.endswith(".gz"))
        raise UserInputError(f"{data_flag} mixes GZIP-compressed files ({gzip}) with plain ones "
                             f"({plain}); one run reads one kind: rebuild one set with the "
                             "other's --compression")
    premasked = None
    max_predictions = None
    word_starts = True

    def first_record(path):
        if tf.io.gfile.stat(path).length == 0:
            raise UserInputError(f"data file {path} is empty; rebuild it or remove it")
        return _first_record(path, data_flag)

    # The files' first records, read _READERS at a time (a round trip each on gs://; 25 ms
    # each here, where 600 shards took 15 s one by one); an error is the first file's.
    readers = concurrent.futures.ThreadPoolExecutor(max(1, min(_READERS, len(files))))
    try:
        for path, example in zip(files, readers.map(first_record, files)):
            names = set(example.features.feature)
            missing = [n for n in FEATURES if n not in names]
            if missing:
                raise UserInputError(
                    f"data file {path} lacks the features {', '.join(missing)}; it is not "
                    "ELECTRA/BERT pre-training data")
            length = len(example.features.feature["input_ids"].int64_list.value)
            if length != max_seq_length:
                raise UserInputError(
                    f"data file {path} has sequences of length {length} but the run uses "
                    f"max_seq_length={max_seq_length}; " + (
                        rebuild if against else f"set {length_flag}={length} or rebuild"))
            if vocab is not None:  # data without metadata.json: its first record's ids
                ids = [i for n in ("input_ids", "masked_lm_ids") if n in names
                       for i in example.features.feature[n].int64_list.value]
                if ids and max(ids) >= len(vocab):
                    raise UserInputError(
                        f"data file {path} holds token id {max(ids)}, beyond the "
                        f"{len(vocab):,} tokens of {vocab_file}; use the vocab the data was "
                        "built with")
            word_starts = word_starts and WORD_START in names
            this_premasked = all(n in names for n in PREMASKED_FEATURES)
            if premasked is not None and this_premasked != premasked:
                raise UserInputError(
                    f"data file {path} mixes pre-masked and unmasked records with the other "
                    "files; use one kind per run")
            premasked = this_premasked
            if premasked:
                max_predictions = len(
                    example.features.feature["masked_lm_positions"].int64_list.value)
    finally:  # (after an error, the reads not begun are not waited for)
        readers.shutdown(wait=False, cancel_futures=True)
    if full_scan:
        for path in files:
            try:
                for _ in tf.data.TFRecordDataset(path, compression_type=_compression_of(path)):
                    pass
            except tf.errors.DataLossError as e:
                raise UserInputError(
                    f"data file {path} is corrupt ({_tf_message(e)}); rebuild it "
                    "or remove it") from None
    return {"premasked": bool(premasked), "max_predictions": max_predictions,
            "word_starts": word_starts, "metadata": metadata}


def unmask(batch: dict) -> dict:
    """Pre-masked records' input_ids, input_mask and segment_ids with the original tokens
    (masked_lm_ids at the masked_lm_positions whose weight is not 0) back in place."""
    length = tf.shape(batch["input_ids"])[1]
    chosen = (tf.one_hot(batch["masked_lm_positions"], length, dtype=tf.int32)
              * tf.cast(batch["masked_lm_weights"] > 0, tf.int32)[..., None])  # [B, N, L]
    original = tf.reduce_max(chosen * batch["masked_lm_ids"][..., None], axis=1)
    masked = tf.reduce_max(chosen, axis=1) > 0
    return {"input_ids": tf.where(masked, original, batch["input_ids"]),
            "input_mask": batch["input_mask"], "segment_ids": batch["segment_ids"]}


def whole_word_note(files: list[str], vocab: list[str], info: dict,
                    data_flag: str = "--train_data") -> str | None:
    """A note where whole-word masking meets records without word boundaries (`info`:
    `validate_data`'s) whose first example is mostly CJK characters: its words are then
    "##" pieces, and each Chinese character is a word of its own."""
    if info["word_starts"]:
        return None
    example = _first_record(files[0], data_flag)
    tokens = [vocab[i] for i in example.features.feature["input_ids"].int64_list.value
              if 0 < i < len(vocab)]
    cjk = sum(len(t) == 1 and tokenization.is_cjk(ord(t)) for t in tokens)
    if not tokens or cjk < 0.3 * len(tokens):
        return None
    return (f"note: whole-word masking on {data_flag}, built without --word_segmenter: a word "
            "is a token and its '##' pieces, so Chinese characters are masked one by one; "
            "rebuild the data with --word_segmenter=jieba to mask Chinese words")


def premasked_note(info: dict, premasked: str, data_flag: str = "--train_data",
                   as_written: str = "pretraining.premasked_records='as_written'"
                   ) -> str | None:
    """The line a run prints about pre-masked records (`validate_data`'s info; `as_written`:
    the setting that keeps their masks), or None for other records."""
    if not info["premasked"]:
        return None
    if premasked == "as_written":
        return (f"note: {data_flag} holds pre-masked BERT records, used as written: BERT's "
                f"static masks and 80/10/10 replacement in their {info['max_predictions']} "
                "slots; mask_prob, max_predictions_per_seq and whole_word_masking do not apply")
    return (f"note: {data_flag} holds pre-masked BERT records: their original tokens are put "
            "back and masked again as other records are (dynamic masking at mask_prob); "
            f"{as_written} keeps BERT's masks")


def _records_of(path: tf.Tensor, compression: str) -> tf.data.Dataset:
    """The records of one file (a scalar string). tf.data.TFRecordDataset reads its file
    names through a flat_map, whose checkpointed state holds the name being read: a
    position saved so would reopen the file where it was, not where the data now is.
    Its reader proper (not in the public API) keeps only the file's offset."""
    from tensorflow.python.data.ops import readers
    return readers._TFRecordDataset(path, compression_type=compression,
                                    buffer_size=8 << 20)


def pretraining_dataset(file_pattern, batch_size: int, max_seq_length: int, vocab_file: str,
                        *, mask_prob: float = 0.15, max_predictions_per_seq: int | None = None,
                        replace_with_mask_prob: float = 0.85, whole_word_masking: bool = False,
                        seed: int = 0, is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        shuffle_buffer_size: int = 10000, cycle_length: int = 8,
                        data_info: dict | None = None, premasked: str = "remask",
                        files_by_index: bool = True, length_flag: str = "MAX_SEQ_LENGTH",
                        data_flag: str = "--train_data", mask_prob_flag: str = "MASK_PROB",
                        predictions_flag: str = "pretraining.max_predictions_per_seq"
                        ) -> tf.data.Dataset:
    """A dataset of masked pre-training batches.

    Args:
      file_pattern: comma-separated globs (or folders) of TFRecords.
      batch_size: examples per batch for this pipeline (per replica under a strategy).
      max_seq_length: L; must match the data.
      vocab_file: the vocab the data was built with (special ids, "##" pieces, checks).
      mask_prob: fraction of tokens masked (0.15; 0.25 for ELECTRA-Large).
      max_predictions_per_seq: N; default int((mask_prob + 0.005) * L).
      replace_with_mask_prob: selected positions that become [MASK] (official 0.85).
      whole_word_masking: select whole words: "##" pieces go with their word, or, when the
        records carry `word_start` (Chinese data built with --word_segmenter), the
        segmenter's words.
      seed: keys shuffling and masking. The shuffles' order also depends on TensorFlow's
        global seed (tf.data combines the two); `run_pretraining` sets it to `seed` first
        (`keras.utils.set_random_seed`), so do the same to reproduce a run's order.
      is_training: repeat and shuffle; otherwise one ordered pass.
      input_context: from distribute_datasets_from_function.
      shuffle_buffer_size, cycle_length: tf.data knobs.
      data_info: `validate_data`'s result for these files and settings, from a caller that
        has checked them (the check, a read of every file's first record, is not repeated);
        None: they are checked here first.
      premasked: for pre-masked BERT records, "remask" (put the original tokens back and
        mask them as unmasked records are: dynamic, at mask_prob, with
        max_predictions_per_seq slots) or "as_written" (BERT's static masks and 80/10/10
        replacement as the records hold them, with their number of slots; mask_prob and
        whole_word_masking do not apply).
      files_by_index: the files pass through the pipeline as their index in the sorted
        list, so that a checkpointed iterator's data position names them so, and a run
        resumes wherever its files now are (in the same order); False: as their paths, as
        releases before did (a position such a run saved names its files' paths). Either
        reads the same examples in the same order.
      length_flag, data_flag, mask_prob_flag, predictions_flag: the caller's names for
        max_seq_length, file_pattern, mask_prob and max_predictions_per_seq, for the fixes
        the errors suggest (gin bindings in training, flags in a script).

    Yields dicts: input_ids, input_mask, segment_ids int32 [B, L]; masked_lm_positions,
    masked_lm_ids int32 [B, N]; masked_lm_weights float32 [B, N]; example_index int64 [B],
    each example's index in the stream (unique across input pipelines; it keys the masks
    and the generator's samples).
    """
    files = list_files(file_pattern)
    info = data_info or validate_data(files, max_seq_length, vocab_file,
                                      length_flag=length_flag, data_flag=data_flag)
    tokenizer_vocab = tokenization.load_vocab(vocab_file)
    ids = {t: i for i, t in enumerate(tokenizer_vocab)}
    if premasked not in PREMASKED_MODES:
        raise UserInputError(f"premasked={premasked!r} is not one of "
                             f"{', '.join(PREMASKED_MODES)}")
    as_written = info["premasked"] and premasked == "as_written"
    if not 0 < mask_prob < 1:
        raise UserInputError(f"{mask_prob_flag}={mask_prob} must be above 0 and below 1 (the "
                             "paper: 0.15, 0.25 for large)")
    num_predictions = (info["max_predictions"] if as_written and info["max_predictions"]
                       else max_predictions_per_seq)
    if num_predictions is None:  # (0 is a choice, refused below)
        num_predictions = masking.default_max_predictions(max_seq_length, mask_prob)
        if num_predictions < 1:
            raise UserInputError(
                f"{mask_prob_flag}={mask_prob} gives no masked position in sequences of "
                f"{max_seq_length} (int((mask_prob + 0.005) x {max_seq_length}) = 0); raise "
                f"{mask_prob_flag} or set {predictions_flag} between 1 and {max_seq_length}")
    if num_predictions < 1:
        raise UserInputError(
            f"{predictions_flag}={num_predictions} masks nothing; use between 1 and "
            f"{max_seq_length} masked positions per sequence, or leave it unset for "
            f"int(({mask_prob_flag} + 0.005) x {max_seq_length})")
    if num_predictions > max_seq_length:
        raise UserInputError(
            f"{num_predictions} masked positions per sequence ({predictions_flag}) do not fit "
            f"sequences of {max_seq_length}; use between 1 and {max_seq_length}")

    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        num_pipelines, pipeline_id = (input_context.num_input_pipelines,
                                      input_context.input_pipeline_id)
    shard_records = num_pipelines > 1 and len(files) < num_pipelines

    paths = tf.constant(files)
    dataset = tf.data.Dataset.from_tensor_slices(
        tf.range(len(files), dtype=tf.int64) if files_by_index else paths)
    if num_pipelines > 1 and not shard_records:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.repeat()
    compression = _compression_of(files[0])
    dataset = dataset.interleave(
        lambda f: _records_of(tf.gather(paths, f), compression) if files_by_index else
        tf.data.TFRecordDataset(f, compression_type=compression, buffer_size=8 << 20),
        cycle_length=min(cycle_length, len(files)), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if shard_records:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed + 1,
                                  reshuffle_each_iteration=True)
    dataset = dataset.enumerate()
    dataset = dataset.batch(batch_size, drop_remainder=True)

    spec = {n: tf.io.FixedLenFeature([max_seq_length], tf.int64) for n in FEATURES}
    if info["premasked"]:
        spec.update({n: tf.io.FixedLenFeature([info["max_predictions"]],
                                              tf.float32 if n.endswith("weights") else tf.int64)
                     for n in PREMASKED_FEATURES})
    use_word_starts = whole_word_masking and info["word_starts"]
    if use_word_starts:
        spec[WORD_START] = tf.io.FixedLenFeature([max_seq_length], tf.int64)
    continuation_table = None
    if whole_word_masking and not use_word_starts:
        continuation_table = tf.constant(np.array(
            [t.startswith(tokenization.SUFFIX_INDICATOR) for t in tokenizer_vocab]))

    def parse_and_mask(index, serialized):
        parsed = tf.io.parse_example(serialized, spec)
        batch = {n: tf.cast(v, tf.float32 if n.endswith("weights") else tf.int32)
                 for n, v in parsed.items()}
        stream_index = index * num_pipelines + pipeline_id
        if as_written:
            return {**batch, "example_index": stream_index}
        if info["premasked"]:
            batch = unmask(batch)
        is_continuation = None
        if use_word_starts:
            is_continuation = tf.equal(batch.pop(WORD_START), 0)
        elif continuation_table is not None:
            is_continuation = tf.gather(continuation_table, batch["input_ids"])
        masked = masking.mask_batch(
            batch, stream_index, seed=seed, mask_prob=mask_prob,
            max_predictions=num_predictions, cls_id=ids[tokenization.CLS_TOKEN],
            sep_id=ids[tokenization.SEP_TOKEN], mask_id=ids[tokenization.MASK_TOKEN],
            replace_with_mask_prob=replace_with_mask_prob, is_continuation=is_continuation)
        return {**masked, "example_index": stream_index}

    dataset = dataset.map(parse_and_mask, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_optimization.map_parallelization = True
    # No autotuning thread: the parallel stages run at the parallelism TensorFlow starts
    # AUTOTUNE at, untuned, and the prefetch buffer still grows while the step waits for
    # it. An iterator that a tf.function has read from (the trainer's) waits for that
    # thread's next wake-up when it is freed, up to a minute later; a process that runs
    # several trainings (the study's workers, a notebook, the tests) stalls that long in
    # the garbage collection that frees it.
    options.autotune.enabled = False
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """The input pipelines (workers) a strategy's replicas are fed by."""
    local = (len(strategy.extended.worker_devices) if tf.distribute.has_strategy()
             or strategy is not tf.distribute.get_strategy() else 1)
    return max(1, strategy.num_replicas_in_sync // local)


def batches_per_worker(file_pattern, batch_size: int, workers: int, limit: int) -> int:
    """The full batches of `batch_size` examples (one worker's share of the global batch)
    that the poorest of `workers` evaluation pipelines gets from one pass over the files,
    counted up to `limit` (what an evaluation of `limit` steps would read anyway). Every
    worker must run the same number of steps: one that runs out first would leave the
    others waiting in their all-reduce."""
    files = list_files(file_pattern)
    compression = _compression_of(files[0])

    def count(paths, cap):
        records = tf.data.TFRecordDataset(paths, compression_type=compression).take(cap)
        return int(records.reduce(np.int64(0), lambda n, _: n + 1))

    needed = limit * batch_size
    if workers > 1 and len(files) < workers:  # the records are sharded, round robin
        return min(limit, count(files, needed * workers) // workers // batch_size)
    return min(limit, min(count(files[i::workers], needed) // batch_size
                          for i in range(workers)))


def worker_dataset(strategy: tf.distribute.Strategy, global_batch_size: int, file_pattern,
                   worker_index: int = 0, **kwargs) -> tuple[tf.data.Dataset, int]:
    """This worker's pipeline under a strategy, and its number of local replicas.

    The dataset yields this worker's share of the global batch (global / workers), the
    files sharded by worker; the trainer gives each local replica its slice. Unlike a
    distributed dataset's, this iterator can be checkpointed, so a resumed run continues
    with exactly the next examples under any strategy.
    """
    replicas = strategy.num_replicas_in_sync
    workers = num_workers(strategy)
    local = replicas // workers
    if global_batch_size % replicas:
        raise UserInputError(
            f"TRAIN_BATCH_SIZE={global_batch_size} does not divide over {replicas} replicas; "
            "use a multiple of the replica count")
    context = tf.distribute.InputContext(num_input_pipelines=workers,
                                         input_pipeline_id=worker_index,
                                         num_replicas_in_sync=replicas)
    dataset = pretraining_dataset(file_pattern, global_batch_size // workers,
                                  input_context=context, **kwargs)
    return dataset, local


def distributed_dataset(strategy: tf.distribute.Strategy, global_batch_size: int,
                        file_pattern, **kwargs) -> tf.distribute.DistributedDataset:
    """Per-worker pipelines for a strategy; each replica gets global_batch_size / replicas."""
    if global_batch_size % strategy.num_replicas_in_sync:
        raise UserInputError(
            f"TRAIN_BATCH_SIZE={global_batch_size} does not divide over "
            f"{strategy.num_replicas_in_sync} replicas; use a multiple of the replica count")

    def dataset_fn(context: tf.distribute.InputContext):
        return pretraining_dataset(
            file_pattern, context.get_per_replica_batch_size(global_batch_size),
            input_context=context, **kwargs)

    return strategy.distribute_datasets_from_function(dataset_fn)
