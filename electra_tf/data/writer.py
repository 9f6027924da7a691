"""Building pre-training TFRecords from raw text: parallel, sharded, atomic, resumable.

The corpus is cut into pieces (whole files, or byte ranges of large plain files; see
corpus.py) and the pieces are dealt round-robin to `num_shards` shards. A shard is built by
one worker from its pieces alone, with a random source seeded by (seed, shard index), so
its bytes depend on the seed and the text, not on the number of workers or the order in
which shards finish.

Each shard is written under a temporary name and renamed when complete; its statistics are
renamed into `.build/` just before. Rerunning the same command skips the shards that
exist and builds the rest. `metadata.json` is written last, so its presence means the
data set is complete. All paths go through tf.io.gfile, so gs:// works.
"""

import concurrent.futures
import contextlib
import dataclasses
import fnmatch
import gc
import itertools
import json
import multiprocessing
import multiprocessing.pool
import os
import queue
import random
import signal
import sys
import threading
import time
import unicodedata

import numpy as np
import tensorflow as tf

from electra_tf import atomic, tokenization
from electra_tf.choices import WORD_SEGMENTERS
from electra_tf.data import corpus
from electra_tf.data.examples import ExampleBuilder, ExampleSerializer
from electra_tf.errors import UserInputError

METADATA_FILE = "metadata.json"
CUT_NOTE_FRACTION = 0.25  # a build that cuts more of its text than this says so
UNKNOWN_NOTE_FRACTION = 0.05  # ... or whose tokens are [UNK] more often (BERT's English: 0.1%)
STATE_DIR = ".build"
FORMAT_VERSION = 1
COMPRESSIONS = {"": "", "none": "", "gzip": "GZIP"}
# Starting a worker process (spawn, import TensorFlow, build the tokenizer) takes 2-4 s,
# the time one worker builds 20-40 MB of text in (benchmarks/results/build_data.md), so
# by default there is at most one worker per this much input.
BYTES_PER_WORKER = 32 << 20
_TOKENIZE_LINES = 4096  # lines per tokenizer call: large enough to amortise op dispatch
_REPORT_SECONDS = 0.5
# A vocab is cased when at least this share of its tokens with letters have capitals,
# uncased below the second share (see check_case).
_CASED_SHARE = 0.01
_UNCASED_SHARE = 0.001
# A vocab was learned without accent stripping when at least this share of its tokens
# change when accents are stripped (see check_accents).
_ACCENTED_SHARE = 0.002


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything that determines the output bytes. A resumed build must match it."""
    inputs: tuple[str, ...]
    vocab_file: str
    vocab_sha256: str
    vocab_size: int
    lower_case: bool
    strip_accents: bool
    max_seq_length: int
    num_shards: int
    seed: int
    input_format: str
    text_field: str
    one_document_per_line: bool
    compression: str
    piece_bytes: int
    word_segmenter: str = "none"
    # Where pieces of a plain file without blank lines start (corpus._find_boundary): 2 cuts
    # at a line's end also within 4 MB of the file's end (before, its end: no record says 1).
    piece_rule: int = 2


def shard_name(index: int, num_shards: int, compression: str) -> str:
    suffix = ".tfrecord.gz" if compression == "GZIP" else ".tfrecord"
    return f"pretrain_data-{index:05d}-of-{num_shards:05d}{suffix}"


# ---------------------------------------------------------------- worker side

_worker = {}


def _init_worker(config: BuildConfig, progress_queue, parent: int | None = None):
    """A worker's tokenizer, segmenter and serializer (a serializer takes 7 ms to make: once
    per shard, it was most of the time of a build from thousands of small files). `parent`:
    the PID of the building process, in a worker process of its own."""
    if parent is not None:
        # Ctrl-C reaches every process of the terminal's group: the builder answers it, and
        # its pool ends the workers (each printed a KeyboardInterrupt traceback).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    tokenizer = tokenization.Tokenizer(config.vocab_file, config.lower_case,
                                       config.strip_accents)
    segment = None
    if config.word_segmenter == "jieba":
        segment = _jieba_segmenter()
    serialize = ExampleSerializer(config.max_seq_length, tokenizer.vocab_size,
                                  word_starts=segment is not None)
    _worker.update(config=config, tokenizer=tokenizer, progress=progress_queue, segment=segment,
                   serialize=serialize, parent=parent)


def _exit_with_parent(parent: int):
    """Ends this worker once the building process has gone (killed by SIGKILL, its pool
    could not end the workers, which went on building and renaming shards into a folder a
    rerun was writing); a shard is also not renamed into place once it has gone."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def _jieba_segmenter():
    import logging

    import jieba
    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba.lcut


def _encode_counted(tokenizer, texts, unknown: list[int] | None):
    """tokenizer.encode_flat, adding the [UNK]s among the ids to unknown[0] (if given)."""
    flat, splits = tokenizer.encode_flat(texts)
    if unknown is not None:
        unknown[0] += int(np.count_nonzero(flat == tokenizer.unk_id))
    return flat.tolist(), splits.tolist()


def _tokenize_plain(tokenizer, sentences, unknown: list[int] | None = None):
    flat, splits = _encode_counted(tokenizer, sentences, unknown)
    return [flat[splits[i]:splits[i + 1]] for i in range(len(sentences))]


def _splits_words(left: str, right: str) -> bool:
    """Whether BERT's basic tokenizer ends a word between two characters: whitespace,
    punctuation or a CJK character on either side."""
    return any(tokenization.is_whitespace(c) or tokenization.is_punctuation(c)
               or tokenization.is_cjk(ord(c)) for c in (left, right))


def _bert_words(pieces: list[str]) -> list[str]:
    """A segmenter's pieces, joined where BERT's tokenizer sees no word boundary between
    them (jieba cuts "café" into "caf" and "é", and Hangul or Cyrillic words into their
    letters), so that tokenizing the pieces one by one gives the sentence's own ids."""
    words = []
    for piece in pieces:
        if words and piece and words[-1] and not _splits_words(words[-1][-1], piece[0]):
            words[-1] += piece
        else:
            words.append(piece)
    return words


def _tokenize_segmented(tokenizer, segment, sentences, unknown: list[int] | None = None):
    """Token ids packed as id * 2 + (1 if the token starts a word), words from `segment`.

    Each word is tokenized on its own, after joining the pieces BERT's tokenizer would not
    split (`_bert_words`): the ids are the sentence's (every CJK character is a token
    either way).
    """
    words = [_bert_words(segment(s)) for s in sentences]
    flat, splits = _encode_counted(tokenizer, [w for ws in words for w in ws], unknown)
    out, k = [], 0
    for ws in words:
        packed = []
        for _ in ws:
            piece = flat[splits[k]:splits[k + 1]]
            k += 1
            if piece:
                packed.append(piece[0] * 2 + 1)
                packed.extend(t * 2 for t in piece[1:])
        out.append(packed)
    return out


def _batches(parts, max_lines):
    """(lines, last) document parts, grouped into lists of about `max_lines` lines."""
    batch, lines = [], 0
    for part in parts:
        batch.append(part)
        lines += len(part[0])
        if lines >= max_lines:
            yield batch
            batch, lines = [], 0
    if batch:
        yield batch


@contextlib.contextmanager
def _few_collections():
    """Python's cyclic garbage collector, tuned for building: objects alive now (TensorFlow,
    the tokenizer) are frozen out of its scans and it runs rarely. Building makes millions
    of short-lived lists and no cycles; with the default settings the collector's scans
    take about a quarter of the time."""
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if frozen:
            gc.unfreeze()


def _build_shard(task: tuple[int, list[corpus.Piece], str]) -> dict:
    """Writes one shard; returns its statistics."""
    with _few_collections():
        return _write_shard(*task)


def _write_shard(index: int, pieces: list[corpus.Piece], output_dir: str) -> dict:
    config: BuildConfig = _worker["config"]
    tokenizer: tokenization.Tokenizer = _worker["tokenizer"]
    progress = _worker["progress"]
    segment = _worker["segment"]
    # With word segmentation, ids travel packed with their word-start bit (see
    # ExampleSerializer); [CLS] and [SEP] are words of their own.
    special = (lambda i: i * 2 + 1) if segment else (lambda i: i)
    builder = ExampleBuilder(config.max_seq_length, special(tokenizer.cls_id),
                             special(tokenizer.sep_id), random.Random(f"{config.seed}:{index}"))
    serialize = _worker["serialize"]
    name = shard_name(index, config.num_shards, config.compression)
    path = os.path.join(output_dir, name)
    tmp = atomic.temporary_name(path)
    stats = corpus.ReadStats()
    num_examples = num_tokens = 0
    unknown = [0]  # [UNK]s among the text's tokens
    reported = (0, 0)
    last_report = time.monotonic()
    options = tf.io.TFRecordOptions(compression_type=config.compression)
    with tf.io.TFRecordWriter(tmp, options) as writer:
        for piece in pieces:
            piece_stats = corpus.ReadStats()
            parts = corpus.read_document_parts(piece, config.input_format, config.text_field,
                                               config.one_document_per_line, piece_stats,
                                               max_lines=_TOKENIZE_LINES)
            for batch in _batches(parts, _TOKENIZE_LINES):
                lines = [s for part, _ in batch for s in part]
                tokenized = (_tokenize_segmented(tokenizer, segment, lines, unknown) if segment
                             else _tokenize_plain(tokenizer, lines, unknown))
                k = 0
                for part, last in batch:
                    sentences = tokenized[k:k + len(part)]
                    k += len(part)
                    examples = builder.add_sentences(sentences)
                    if last:
                        examples = itertools.chain(examples, builder.end_document())
                    for token_ids, len_a in examples:
                        writer.write(serialize(token_ids, len_a))
                        num_examples += 1
                        num_tokens += len(token_ids)
                now = time.monotonic()
                if progress is not None and now - last_report > _REPORT_SECONDS:
                    done = (piece_stats.input_bytes, piece_stats.text_bytes)
                    progress.put((done[0] - reported[0], done[1] - reported[1]))
                    reported, last_report = done, now
            if progress is not None:
                progress.put((piece_stats.input_bytes - reported[0],
                              piece_stats.text_bytes - reported[1]))
            reported = (0, 0)
            stats.add(piece_stats)
    if _worker.get("parent") not in (None, os.getppid()):  # orphaned: see _exit_with_parent
        os._exit(1)
    shard_stats = {"file": name, "num_examples": num_examples, "num_tokens": num_tokens,
                   "cut_tokens": builder.cut_tokens, "unknown_tokens": unknown[0],
                   **dataclasses.asdict(stats)}
    atomic.write_text(os.path.join(output_dir, STATE_DIR, name + ".json"),
                      json.dumps(shard_stats))
    tf.io.gfile.rename(tmp, path, overwrite=True)
    return shard_stats


# ---------------------------------------------------------------- driver side


class _Progress:
    """A one-line progress bar on stderr: percent of input bytes, text MB/s, ETA."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.total = max(total_bytes, 1)
        self.enabled = enabled
        self.done = self.text = 0
        self.start = self._last = time.monotonic()
        self._tty = sys.stderr.isatty()

    def update(self, input_bytes: int, text_bytes: int, force: bool = False):
        self.done += input_bytes
        self.text += text_bytes
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < (0.2 if self._tty else 10)):
            return
        self._last = now
        elapsed = max(now - self.start, 1e-6)
        fraction = min(self.done / self.total, 1.0)
        rate = self.text / elapsed / 1e6
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("nan")
        bar = "#" * int(30 * fraction) + "." * (30 - int(30 * fraction))
        eta_text = time.strftime("%H:%M:%S", time.gmtime(eta)) if eta == eta else "--:--:--"
        line = (f"[{bar}] {100 * fraction:5.1f}%  {self.text / 1e6:8.1f} MB text  "
                f"{rate:6.2f} MB/s  ETA {eta_text}")
        print(("\r" + line) if self._tty else line, end="" if self._tty else "\n",
              file=sys.stderr, flush=True)

    def close(self, failed: bool = False):
        """Shows the final state, or after a failure only ends the bar's line (so that an
        error message starts its own)."""
        if not failed:
            self.update(0, 0, force=True)
        if self.enabled and self._tty:
            print(file=sys.stderr)


def _case_counts(vocab: list[str]) -> tuple[int, list[str]]:
    """A vocab's tokens with letters of a script that capitalises words (their count) and
    those with capitals (special tokens left out). Georgian's letters have capitals (its
    Mtavruli, upper-case since Unicode 11) that its text does not use to start a word: they
    have no title case, and a token of them alone is not counted, so a cased Georgian vocab
    is not taken for an uncased one."""
    words = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    with_letters = sum(any(c.title() != c.lower() for c in t) for t in words)
    return with_letters, [t for t in words if t.lower() != t]


def vocab_is_cased(vocab: list[str]) -> bool:
    """Whether a vocab has capitalised tokens as a cased one does (see check_case): data
    built with it kept its capitals."""
    with_letters, capitalised = _case_counts(vocab)
    return bool(with_letters) and len(capitalised) >= _CASED_SHARE * with_letters


def check_case(vocab: list[str], vocab_file: str, lower_case: bool):
    """Raises if --lower_case does not suit the vocab.

    Of a vocab's tokens with letters, a cased one (BERT cased, learn_vocab
    --lower_case=false) has about a tenth with capitals ("The", "##A"), an uncased one none
    or a stray few (BERT's Chinese vocab: "<S>", "<T>"). Lower-cased text never produces a
    capitalised token; text that keeps its capitals finds few in an uncased vocab, and a
    word that starts with one becomes [UNK]. Vocabs in between are left alone.
    """
    with_letters, capitalised = _case_counts(vocab)
    if not with_letters:
        return  # a script without case: lower-casing changes nothing
    share = (f"{len(capitalised):,} of its {with_letters:,} tokens with letters have "
             "capitals")
    if lower_case and len(capitalised) >= _CASED_SHARE * with_letters:
        examples = [t for t in capitalised if len(t.lstrip("#")) > 1] or capitalised
        raise UserInputError(
            f"vocab file {vocab_file} is cased ({share}, e.g. "
            f"{', '.join(examples[:3])}) but --lower_case=true lower-cases the text, so "
            "they would never occur; pass --lower_case=false (or use an uncased vocab)")
    if not lower_case and len(capitalised) < _UNCASED_SHARE * with_letters:
        raise UserInputError(
            f"vocab file {vocab_file} is uncased ({share}) but --lower_case=false keeps the "
            "text's capitals, so capitalised words would become [UNK]; drop "
            "--lower_case=false (or use a cased vocab)")


def _strip_accents(token: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", token)
                   if unicodedata.category(c) != "Mn")


def check_accents(vocab: list[str], vocab_file: str, strip_accents: bool):
    """Raises if --strip_accents is on but the vocab was learned without it.

    Stripped text (NFD, then no non-spacing marks) never produces a token that stripping
    would change ("é", "##ü", Hangul syllables, Devanagari vowel signs), so a vocab learned
    with stripping has none: BERT's uncased and Chinese vocabs have 0, a vocab learned with
    --strip_accents=false from text with accents a large share (French: 40%). Such tokens
    would all be dead. The reverse (stripping at learning, not here) leaves no trace in the
    vocab, so it is not checked.
    """
    if not strip_accents:
        return
    words = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    accented = [t for t in words if _strip_accents(t) != t]
    if accented and len(accented) >= _ACCENTED_SHARE * len(words):
        examples = [t for t in accented if len(t.lstrip("#")) > 1] or accented
        raise UserInputError(
            f"vocab file {vocab_file} was learned without stripping accents "
            f"({len(accented):,} of its {len(words):,} tokens change when accents are "
            f"stripped, e.g. {', '.join(examples[:3])}) but --strip_accents (default: "
            "--lower_case) strips them from the text, so they would never occur; pass "
            "--strip_accents=false (or use a vocab learned with stripping)")


def _validate_and_plan(input_patterns, vocab_file, max_seq_length, num_shards, seed,
                       lower_case, strip_accents, input_format, text_field,
                       one_document_per_line, compression, piece_bytes, word_segmenter):
    if word_segmenter not in WORD_SEGMENTERS:
        raise UserInputError(f"--word_segmenter={word_segmenter} is not one of "
                             f"{', '.join(WORD_SEGMENTERS)}")
    if word_segmenter == "jieba":
        try:
            import jieba  # noqa: F401
        except ImportError:
            raise UserInputError("--word_segmenter=jieba needs the jieba package; install "
                                 "it in the checkout: .venv/bin/pip install -e '.[zh]'") from None
    if input_format not in corpus.INPUT_FORMATS:
        raise UserInputError(f"--input_format={input_format} is not one of "
                             f"{', '.join(corpus.INPUT_FORMATS)}")
    if compression.lower() not in COMPRESSIONS:
        raise UserInputError(f"--compression={compression} is not one of none, gzip")
    if max_seq_length < 8:
        raise UserInputError(f"--max_seq_length={max_seq_length} is too small; use at least 8")
    if num_shards is not None and num_shards < 1:
        raise UserInputError(f"--num_shards={num_shards} must be at least 1")
    tokenizer = tokenization.Tokenizer(vocab_file, lower_case, strip_accents)
    check_case(tokenizer.vocab, vocab_file, lower_case)
    check_accents(tokenizer.vocab, vocab_file, tokenizer.strip_accents)
    files = corpus.expand_inputs(input_patterns)
    # Each file's first record, before anything is written: a wrong --text_field or
    # --input_format fails here, not in a worker.
    check = ((lambda path: corpus.check_jsonl(path, text_field))
             if input_format == corpus.JSONL else corpus.check_text)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(check, files))
    pieces = corpus.plan_pieces(files, piece_bytes)
    total = sum(corpus.input_bytes(p) for p in pieces)
    if total == 0:
        shown = input_patterns if isinstance(input_patterns, str) else ",".join(input_patterns)
        raise UserInputError(f"input {shown} is empty (0 bytes in {len(files)} files); "
                             "point --input at the corpus")
    shards = min(num_shards or len(pieces), len(pieces))
    config = BuildConfig(
        # Absolute: metadata.json names the vocab for runs started from other folders.
        inputs=tuple(files), vocab_file=atomic.absolute(vocab_file),
        vocab_sha256=tokenization.vocab_sha256(vocab_file), vocab_size=tokenizer.vocab_size,
        lower_case=lower_case, strip_accents=tokenizer.strip_accents,
        max_seq_length=max_seq_length, num_shards=shards, seed=seed, input_format=input_format,
        text_field=text_field, one_document_per_line=one_document_per_line,
        compression=COMPRESSIONS[compression.lower()], piece_bytes=piece_bytes,
        word_segmenter=word_segmenter)
    assignment = [pieces[i::shards] for i in range(shards)]
    return config, assignment, total


def _complete_shards(output_dir: str) -> list[str]:
    """Shard files (of any build) that were completed: renamed from their temporary name."""
    if not tf.io.gfile.isdir(output_dir):
        return []
    return [n for n in tf.io.gfile.listdir(output_dir)
            if n.startswith("pretrain_data-") and ".tmp-" not in n]


def _remove_temporaries(output_dir: str):
    for name in tf.io.gfile.listdir(output_dir):
        if ".tmp-" in name:
            tf.io.gfile.remove(os.path.join(output_dir, name))


def _check_resumable(output_dir: str, config: BuildConfig) -> bool:
    """True if output_dir already holds this exact build, complete. Raises on a mismatch."""
    path = output_dir.rstrip("/")
    while path:  # up to the nearest existing folder: a file there is one line, not a trace
        if tf.io.gfile.exists(path):
            if not tf.io.gfile.isdir(path):
                raise UserInputError(f"--output_dir={output_dir}: {path} is a file, not a "
                                     "folder; pass a folder's path (new or empty)")
            break
        path = os.path.dirname(path)
    saved = None
    built = _complete_shards(output_dir)
    metadata_path = os.path.join(output_dir, METADATA_FILE)
    state_path = os.path.join(output_dir, STATE_DIR, "config.json")
    # Build state without a complete shard holds nothing to resume (a build that stopped
    # before its first shard), so it does not bind this build's settings.
    for path in (metadata_path, state_path) if built else (metadata_path,):
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                saved = json.load(f)
            saved = saved.get("build_config", saved)
            break
    if saved is None:
        if built:
            raise UserInputError(
                f"--output_dir={output_dir} holds TFRecords from an unknown build; use a new "
                "--output_dir or empty it")
        return False
    current = json.loads(json.dumps(dataclasses.asdict(config)))
    changed = sorted(k for k in current if not _same_setting(k, saved.get(k), current[k]))
    finished = tf.io.gfile.exists(metadata_path)
    if "piece_rule" in changed and (
            finished or config.input_format != corpus.TEXT or config.one_document_per_line
            or not any(corpus.boundaries_moved(p, config.piece_bytes) for p in config.inputs)):
        # (its shards are whole, or its files' pieces start where they started then)
        changed.remove("piece_rule")
    if "piece_rule" in changed:
        raise UserInputError(
            f"--output_dir={output_dir} holds an unfinished build begun by an earlier "
            "electra-tf, which cut files without blank lines into pieces otherwise: resuming "
            "it would read some lines twice or not at all; delete the folder (or use a new "
            "--output_dir) to build afresh")
    if changed and set(changed) <= {"vocab_sha256", "vocab_size"} and isinstance(
            saved.get("vocab_file"), str) and atomic.absolute(saved["vocab_file"]) == (
            atomic.absolute(config.vocab_file)):
        # (the same flags, "rerun with the same flags" was no help: the file changed)
        raise UserInputError(
            f"--output_dir={output_dir} holds "
            + ("data built" if finished else "an unfinished build begun")
            + f" with {config.vocab_file} as it was then: the file has changed since (its "
            "SHA-256 differs); use a new --output_dir for this vocab, or put the old one back")
    if changed and not tf.io.gfile.exists(metadata_path):
        raise UserInputError(
            f"--output_dir={output_dir} holds an unfinished build with other settings "
            f"({', '.join(changed)} differ{'s' * (len(changed) == 1)}: it stopped, e.g. at a "
            "bad input file); rerun it "
            "with the same flags (a file mended in place) to resume, or delete the folder "
            "(its complete shards and .build/) or use a new --output_dir to start afresh")
    if changed:
        raise UserInputError(
            f"--output_dir={output_dir} holds data built with other settings ({', '.join(changed)} "
            f"differ{'s' * (len(changed) == 1)}); rerun with the same flags to resume, or use a "
            "new --output_dir")
    return tf.io.gfile.exists(os.path.join(output_dir, METADATA_FILE))


def _input_sizes(config: BuildConfig) -> dict:
    """Each input file's size: what tells a finished build's inputs edited since."""
    return {atomic.absolute(p): tf.io.gfile.stat(p).length for p in config.inputs}


def _check_inputs_unchanged(output_dir: str, metadata: dict, config: BuildConfig):
    """A complete build whose inputs have another size now (edited, or regenerated, in
    place) is refused: the same command answered 'nothing to do' and kept the old data. (A
    build from before the sizes were recorded is taken as it is.)"""
    before = metadata.get("input_bytes")
    if before is None:
        return
    now = _input_sizes(config)
    changed = [f"{path}: {before[path]:,} bytes then, {size:,} now"
               for path, size in now.items() if before.get(path, size) != size]
    if changed:
        raise UserInputError(
            f"--output_dir={output_dir} holds a complete build of inputs that have changed "
            f"since ({changed[0]}{'; ...' if len(changed) > 1 else ''}); build them into a new "
            "--output_dir (or delete this one)")


def _same_setting(key: str, saved, current) -> bool:
    """Paths name files, not settings: an input given relative once and absolute the next
    time is the same input, and the vocab is its contents (vocab_sha256 is compared)."""
    if key == "vocab_file":
        return True
    if key == "inputs" and isinstance(saved, list) and isinstance(current, list):
        return [atomic.absolute(p) for p in saved] == [atomic.absolute(p) for p in current]
    return saved == current


def _check_output_outside_inputs(input_patterns, output_dir: str):
    """An --output_dir that an --input glob or folder takes in (or that holds an input file)
    would have its shards read as text by the rerun that resumes or checks the build;
    refused before anything is read."""
    absolute = atomic.absolute
    output = absolute(output_dir)
    within = [output]  # the output and the folders above it
    while os.path.dirname(within[-1]) not in ("", within[-1]):
        within.append(os.path.dirname(within[-1]))
    patterns = (corpus.split_patterns(input_patterns) if isinstance(input_patterns, str)
                else input_patterns)
    for pattern in (p.strip() for p in patterns if p.strip()):
        taken = any(fnmatch.fnmatchcase(path, absolute(pattern)) for path in within)
        if not taken:
            taken = any(not tf.io.gfile.isdir(m) and os.path.dirname(absolute(m)) == output
                        for m in tf.io.gfile.glob(pattern))
        if taken:
            raise UserInputError(
                f"--output_dir={output_dir} lies in what --input={pattern} reads, so a rerun "
                "would read its shards as text; put the output outside the inputs")


def build_pretraining_data(input_patterns, vocab_file: str, output_dir: str,
                           max_seq_length: int = 128, lower_case: bool = True,
                           strip_accents: bool | None = None, num_workers: int | None = None,
                           num_shards: int | None = None, seed: int = 12345,
                           input_format: str = corpus.TEXT, text_field: str = "text",
                           one_document_per_line: bool = False, compression: str = "none",
                           piece_bytes: int = corpus.PIECE_BYTES,
                           word_segmenter: str = "none",
                           show_progress: bool = True, log=print) -> dict:
    """Builds (or finishes building) a pre-training data set; returns its metadata.

    Writes `output_dir/pretrain_data-XXXXX-of-NNNNN.tfrecord[.gz]` and `metadata.json`.
    `num_shards` defaults to the number of input pieces (and never exceeds it).
    `num_workers` defaults to one per core, at most one per BYTES_PER_WORKER of input; the
    output does not depend on it. `word_segmenter="jieba"` segments Chinese words and writes
    a `word_start` feature that whole-word masking uses. What it did (or that the data set
    was already complete) is reported through `log`.
    """
    _check_output_outside_inputs(input_patterns, output_dir)
    if num_workers is not None and num_workers < 1:  # (0 and -1 built with one, unsaid)
        raise UserInputError(f"--num_workers={num_workers} must be at least 1 (or leave it "
                             "out: one per core)")
    config, assignment, total_bytes = _validate_and_plan(
        input_patterns, vocab_file, max_seq_length, num_shards, seed, lower_case,
        strip_accents, input_format, text_field, one_document_per_line, compression,
        piece_bytes, word_segmenter)
    if _check_resumable(output_dir, config):
        with tf.io.gfile.GFile(os.path.join(output_dir, METADATA_FILE)) as f:
            metadata = json.load(f)
        _check_inputs_unchanged(output_dir, metadata, config)
        log(f"{output_dir} is already complete: {_summary(metadata)}; nothing to do")
        return metadata
    if num_shards is not None and num_shards > config.num_shards:
        plural = "s" if config.num_shards > 1 else ""
        log(f"note: --num_shards={num_shards} is more than the {config.num_shards} input "
            f"piece{plural} (a shard holds whole pieces: files, or --piece_mb parts of large "
            f"plain files); writing {config.num_shards} shard{plural}")

    created_output_dir = not tf.io.gfile.exists(output_dir)
    # One build at a time in a folder: a second one (the same command run again while the
    # first runs) removed the first's part-written shards, which then failed renaming them.
    with atomic.hold(output_dir, "build_pretraining_data.py", "--output_dir"):
        return _build(output_dir, config, assignment, total_bytes, created_output_dir,
                      num_workers, show_progress, log)


def _build(output_dir, config, assignment, total_bytes, created_output_dir, num_workers,
           show_progress, log) -> dict:
    state_dir = os.path.join(output_dir, STATE_DIR)
    tf.io.gfile.makedirs(state_dir)
    atomic.write_text(os.path.join(state_dir, "config.json"),
                      json.dumps(dataclasses.asdict(config), indent=1))
    _remove_temporaries(output_dir)  # left by an interrupted run

    names = [shard_name(i, config.num_shards, config.compression)
             for i in range(config.num_shards)]
    existing = set(tf.io.gfile.listdir(output_dir))
    todo = [(i, assignment[i], output_dir) for i, name in enumerate(names)
            if name not in existing]
    if len(todo) < len(names):
        log(f"resuming: {len(names) - len(todo)} of {len(names)} shards already built")
    done_bytes = sum(corpus.input_bytes(p) for i, pieces in enumerate(assignment)
                     if names[i] in existing for p in pieces)
    progress = _Progress(total_bytes, show_progress)
    progress.update(done_bytes, 0)
    todo_bytes = total_bytes - done_bytes
    if num_workers is None:
        num_workers = min(os.cpu_count() or 1, -(-todo_bytes // BYTES_PER_WORKER))
    workers = max(1, min(num_workers, len(todo)))
    size = f"{total_bytes / 1e6:.1f} MB"
    if len(todo) < len(names):  # resumed
        size += f", {todo_bytes / 1e6:.1f} MB of it left"
    log(f"building {len(todo)} shard{'s' * (len(todo) != 1)} from {len(config.inputs)} "
        f"file{'s' * (len(config.inputs) != 1)} ({size}) with {workers} worker(s)")
    try:
        _run(todo, config, workers, progress)
    except BaseException as e:
        # No part-written shard is left (it would only fill the disk until the rerun removes
        # it). Bad input is a clean failure, not a crash: no build state either unless
        # complete shards need it to resume; a crash (a full disk, Ctrl-C) keeps it all.
        progress.close(failed=True)
        _remove_temporaries(output_dir)
        if isinstance(e, UserInputError) and not _complete_shards(output_dir):
            tf.io.gfile.rmtree(state_dir)
            if created_output_dir:
                tf.io.gfile.rmtree(output_dir)
        raise
    progress.close()
    try:
        metadata, shards = _finish(output_dir, config, names)
    except UserInputError:
        if created_output_dir:
            tf.io.gfile.rmtree(output_dir)
        raise
    log(f"wrote {_summary(metadata)} to {output_dir}")
    empty = [shard["file"] for shard in metadata["shards"] if shard["num_examples"] == 0]
    if empty:
        log(f"note: {len(empty)} shard(s) hold no examples (their inputs hold no text: blank "
            f"files), e.g. {empty[0]}; training leaves them out (metadata.json says so)")
    cut = _share(shards, "cut_tokens")
    if cut > CUT_NOTE_FRACTION:
        share = f"{cut:.0%}" if cut < 0.995 or cut == 1 else "over 99%"  # not "100%"
        log(f"note: {share} of the text's tokens were cut off the "
            "ends of examples (a sentence or line that overflows an example loses its tail, as "
            "in the official builder; the Austen sample loses 17% at 128, 5% at 512): put "
            "one sentence per line, or raise --max_seq_length")
    unknown = _share(shards, "unknown_tokens")
    if unknown > UNKNOWN_NOTE_FRACTION:
        log(f"note: {unknown:.0%} of the text's tokens are [UNK]: {config.vocab_file} does not "
            "cover the text (its characters or script: a Chinese text needs a Chinese vocab); "
            "check --vocab_file, or learn one from the corpus with scripts/learn_vocab.py")
    long = sum(s.get("long_lines", 0) for s in shards)  # (the shards that counted them)
    if long:
        log(f"note: {long} line{'s were' if long != 1 else ' was'} longer than "
            f"{corpus.MAX_LINE_BYTES:,} bytes and {'were' if long != 1 else 'was'} read up to "
            "there (a line is one "
            "sentence, of which an example holds at most --max_seq_length tokens): put one "
            "sentence per line")
    cr = sum(s.get("cr_lines", 0) for s in shards)
    if cr:
        log(corpus.cr_lines_note(cr, "as in the official builder", "build again"))
    if metadata["invalid_utf8_lines"] or metadata["bad_json_lines"]:
        log(f"note: {metadata['invalid_utf8_lines']} lines had invalid UTF-8 (replaced), "
            f"{metadata['bad_json_lines']} JSONL records were malformed (skipped)")
    return metadata


def _summary(metadata: dict) -> str:
    shards = len(metadata["shards"])
    examples = metadata["num_examples"]
    return (f"{examples} example{'' if examples == 1 else 's'} ({metadata['num_tokens']} "
            f"tokens) in {shards} shard{'' if shards == 1 else 's'}")


def _run(todo, config: BuildConfig, workers: int, progress: _Progress):
    if workers == 1:
        updates = queue.SimpleQueue()
        _init_worker(config, updates)
        for task in todo:
            _build_shard(task)
            while not updates.empty():
                progress.update(*updates.get())
        return
    # spawn, not fork: TensorFlow's runtime does not survive a fork.
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    with context.Pool(workers, initializer=_init_worker,
                      initargs=(config, updates, os.getpid())) as pool:
        pending = pool.map_async(_build_shard, todo, chunksize=1)
        workers = set()
        while True:
            try:
                progress.update(*updates.get(timeout=0.2))
            except queue.Empty:
                if pending.ready():
                    break
            # A worker that died outright (kill -9, the out-of-memory killer) takes its shard
            # with it: the pool starts another and waits for that shard for ever. Workers
            # leave the pool only so. (pool._pool: its processes; it has no public view.)
            alive = {p.pid for p in pool._pool if p.exitcode is None}
            if workers - alive and not pending.ready():
                _abandon(pool)
                raise UserInputError(
                    "a worker process of the build died (killed: the out-of-memory killer "
                    "stops one when memory runs out, each worker taking about 1 GB) before "
                    "its shard was written; rerun the same command to resume (with fewer "
                    "--num_workers if memory is short)")
            workers |= alive
        pending.get()  # re-raises a worker's exception
        while True:
            try:
                progress.update(*updates.get_nowait())
            except queue.Empty:
                break


def _abandon(pool) -> None:
    """Ends a pool one of whose workers died outright, so that its terminate() (on leaving
    the `with`) does not wait for ever: a worker killed while it held the task queue's read
    lock (an idle one waits for a task holding it) or the result queue's write lock keeps
    it held. No new worker is started, the others are killed, and a lock still held (by a
    dead process: none is alive) is let go. (Pool has no public call for this.)"""
    pool._worker_handler._state = multiprocessing.pool.TERMINATE
    for process in pool._pool:
        process.kill()
    for process in pool._pool:
        process.join(10)
    for lock in (pool._inqueue._rlock, pool._outqueue._wlock):
        try:
            if lock is not None and lock._semlock._get_value() == 0:
                lock.release()
        except (NotImplementedError, ValueError):  # (no sem_getvalue: macOS)
            pass


def _total(shards: list[dict], key: str) -> int | None:
    """A count over the shards; None (not counted) where a shard kept from a build begun
    by an older release lacks it."""
    return sum(s[key] for s in shards) if all(key in s for s in shards) else None


def _share(shards: list[dict], key: str) -> float:
    """The share of the text's tokens (those read: [CLS] and [SEP]s are not) that `key`
    counts ("cut_tokens", "unknown_tokens"), over the shards that counted both (a build
    resumed from an older release's shards: its own; summing theirs as 0 understated it)."""
    counted = [s for s in shards if key in s and "cut_tokens" in s]
    read = sum(s["cut_tokens"] + s["num_tokens"] - 2 * s["num_examples"] for s in counted)
    return sum(s[key] for s in counted) / read if read else 0.0


def _finish(output_dir: str, config: BuildConfig, names: list[str]) -> tuple[dict, list]:
    """metadata.json, written, and the shards' build records it sums."""
    shards = []
    for name in names:
        with tf.io.gfile.GFile(os.path.join(output_dir, STATE_DIR, name + ".json")) as f:
            shards.append(json.load(f))
    num_examples = sum(s["num_examples"] for s in shards)
    if num_examples == 0:
        for name in names:
            tf.io.gfile.remove(os.path.join(output_dir, name))
        tf.io.gfile.rmtree(os.path.join(output_dir, STATE_DIR))
        raise UserInputError(
            f"input {','.join(config.inputs[:3])} holds no text (0 examples); point --input "
            "at a non-empty corpus")
    metadata = {
        "format": "electra-tf pretraining data",
        "format_version": FORMAT_VERSION,
        "max_seq_length": config.max_seq_length,
        "vocab_size": config.vocab_size,
        "vocab_sha256": config.vocab_sha256,
        "vocab_file": config.vocab_file,
        "lower_case": config.lower_case,
        "strip_accents": config.strip_accents,
        "compression": config.compression,
        "word_segmenter": config.word_segmenter,
        "num_examples": num_examples,
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "cut_tokens": _total(shards, "cut_tokens"),
        "unknown_tokens": _total(shards, "unknown_tokens"),
        "text_bytes": sum(s["text_bytes"] for s in shards),
        "invalid_utf8_lines": sum(s["invalid_utf8_lines"] for s in shards),
        "bad_json_lines": sum(s["bad_json_lines"] for s in shards),
        "long_lines": _total(shards, "long_lines"),
        "cr_lines": _total(shards, "cr_lines"),
        "shards": [{k: s[k] for k in ("file", "num_examples", "num_tokens")} for s in shards],
        "input_bytes": _input_sizes(config),
        "build_config": dataclasses.asdict(config),
    }
    atomic.write_text(os.path.join(output_dir, METADATA_FILE), json.dumps(metadata, indent=1))
    tf.io.gfile.rmtree(os.path.join(output_dir, STATE_DIR))
    return metadata, shards
