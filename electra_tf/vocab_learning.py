"""Learning a WordPiece vocabulary from a corpus, in BERT's layout, with HuggingFace tokenizers.

The text is normalised and split into words exactly as our `Tokenizer` does at encode time
(BERT's BasicTokenizer: clean text, CJK characters apart, punctuation apart, optional
lower-casing and accent stripping), so the learned pieces are the ones encoding produces.
The pieces come from the Rust WordPiece trainer, which learns them bottom-up by merging
the most frequent adjacent pair (as BPE does); encoding then uses WordPiece's greedy
longest match.

The vocabulary has BERT's layout: [PAD] at id 0, [unused0].. next, then [UNK], [CLS],
[SEP], [MASK] (ids 100..103 with 99 unused tokens, as in BERT), then the single characters
seen in the corpus, their "##" forms, and the learned pieces, most frequent merge first.

Example:
    >>> tokens = learn_vocab(read_lines("data/corpus/*.txt.gz"), vocab_size=8000)
    >>> tokens[100:105], len(tokens)
    (['[UNK]', '[CLS]', '[SEP]', '[MASK]', '!'], 8000)
    >>> write_vocab(tokens, "out/vocab.txt")
"""

import collections
import dataclasses
import functools
import json
import os
import sys
import threading
import unicodedata
from collections.abc import Iterable, Iterator

import tensorflow as tf
from tokenizers import Regex
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers, trainers

from electra_tf import atomic, tokenization
from electra_tf.data import corpus
from electra_tf.errors import UserInputError
from electra_tf.tokenization import (CLS_TOKEN, MASK_TOKEN, PAD_TOKEN, SEP_TOKEN,
                                     SUFFIX_INDICATOR, UNK_TOKEN)

_BATCH = 1024


@dataclasses.dataclass
class CorpusStats(corpus.ReadStats):
    """ReadStats plus the number of non-empty lines read."""
    lines: int = 0


def reserved_tokens(num_unused: int = 99) -> list[str]:
    """BERT's leading tokens: [PAD], [unused0..num_unused-1], [UNK], [CLS], [SEP], [MASK]."""
    return ([PAD_TOKEN] + [f"[unused{i}]" for i in range(num_unused)]
            + [UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN])


def read_lines(inputs: str | list[str], input_format: str = corpus.TEXT,
               text_field: str = "text", max_lines: int | None = None,
               stats: CorpusStats | None = None) -> Iterator[str]:
    """Non-empty lines of the files matching `inputs` (globs, as for the data builder).

    Files are read in sorted order; at most `max_lines` lines are yielded. JSONL records
    contribute the lines of their `text_field`. A glob matching nothing raises at once.
    """
    if input_format not in corpus.INPUT_FORMATS:
        raise UserInputError(
            f"--input_format={input_format} is not one of {', '.join(corpus.INPUT_FORMATS)}")
    if max_lines is not None and max_lines < 1:
        raise UserInputError(f"--max_lines={max_lines} must be at least 1 (or unset: read every "
                             "line)")
    files = corpus.expand_inputs(inputs)
    # Each file's first line, before any is read in full: JSONL read as text, or a JSONL
    # file without `text_field`, fails here, not when the training reaches it.
    for path in files:
        if input_format == corpus.TEXT:
            corpus.check_text(path)
        else:
            corpus.check_jsonl(path, text_field)
    pieces = corpus.plan_pieces(files)
    stats = stats if stats is not None else CorpusStats()
    return _read_lines(pieces, input_format, text_field, max_lines, stats, inputs)


def _read_lines(pieces, input_format, text_field, max_lines, stats, inputs) -> Iterator[str]:
    yield from _lines_of(pieces, input_format, text_field, max_lines, stats)
    if not stats.lines:  # (blank lines alone, or JSONL records of empty texts)
        named = inputs if isinstance(inputs, str) else ",".join(inputs)
        raise UserInputError(f"input {named} holds no text (only blank lines); check --input "
                             "and --input_format")


def _lines_of(pieces, input_format, text_field, max_lines, stats) -> Iterator[str]:
    for piece in pieces:
        piece_stats = corpus.ReadStats()
        documents = corpus.read_documents(piece, input_format, text_field,
                                          one_document_per_line=input_format == corpus.TEXT,
                                          stats=piece_stats)
        try:
            for document in documents:
                for line in document:
                    stats.lines += 1
                    yield line
                    if max_lines is not None and stats.lines >= max_lines:
                        return
        finally:
            stats.add(piece_stats)


@functools.cache
def _continuation_chars() -> tuple[str, ...]:
    """Every character that can occur inside a word (so may need a "##" form), in code order.

    Punctuation, CJK ideographs, whitespace and control characters always stand alone or
    are removed, so they never continue a word. Both Python's Unicode tables (14.0 in 3.11)
    and RE2's, which our Tokenizer reads and which are newer (an emoji of Unicode 15 is a
    symbol there, unassigned in Python), are asked: a character either keeps in a word is
    kept.
    """
    codes = [cp for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
    in_words = tf.strings.regex_full_match([chr(cp) for cp in codes],
                                           r"[\p{L}\p{M}\p{N}\p{S}]").numpy()
    chars = []
    for cp, in_word in zip(codes, in_words):
        c = chr(cp)
        if ((in_word or (unicodedata.category(c)[0] != "C" and not c.isspace()))
                and not tokenization.is_cjk(cp) and not tokenization.is_punctuation(c)):
            chars.append(c)
    return tuple(chars)


def _batches(texts: Iterable[str], counter: list[int]) -> Iterator[list[str]]:
    batch = []
    for text in texts:
        batch.append(text)
        if len(batch) == _BATCH:
            counter[0] += len(batch)
            yield batch
            batch = []
    if batch:
        counter[0] += len(batch)
        yield batch


def learn_vocab(texts_iterable: Iterable[str], vocab_size: int, lower_case: bool = True,
                strip_accents: bool | None = None, num_unused: int = 99,
                min_frequency: int = 2, max_alphabet: int | None = None,
                log=None) -> list[str]:
    """Learns a WordPiece vocabulary of exactly `vocab_size` tokens, in BERT's layout.

    Args:
      texts_iterable: the corpus, as strings (lines or documents); iterated once.
      vocab_size: number of tokens returned, special and unused tokens included.
      lower_case: lower-case the text (an uncased vocab); must match the Tokenizer's.
      strip_accents: remove accents; defaults to `lower_case`, as in BERT and `Tokenizer`.
      num_unused: [unusedN] placeholders between [PAD] and [UNK] (99 puts [UNK] at 100).
      min_frequency: a pair of pieces must occur this often to be merged into a new piece.
      max_alphabet: keep at most this many distinct characters, the most frequent (ties
        broken arbitrarily); a word holding any other encodes as one [UNK]. Default:
        every character seen.
      log: called with a note when the characters alone do not fit.

    Returns:
      The tokens, id order. Every character seen comes with its "##" form (unless it never
      continues a word: punctuation, CJK), then the learned pieces, most frequent merge
      first. If more pieces are learned than fit, the latest merges (the rarest) are
      dropped; if the characters and their "##" forms alone do not fit, the rarest of those
      are dropped too. The result is deterministic for a given text (and `max_alphabet`
      unset).

    Raises:
      UserInputError: if the corpus supports fewer distinct tokens than `vocab_size`.
    """
    strip_accents = lower_case if strip_accents is None else strip_accents
    if num_unused < 0:
        raise UserInputError(f"--num_unused={num_unused} is negative; pass 0 or more")
    if min_frequency < 0:
        raise UserInputError(f"--min_frequency={min_frequency} is negative; pass 0 or more")
    if max_alphabet is not None and max_alphabet < 1:
        raise UserInputError(f"--max_alphabet={max_alphabet} must be at least 1 (or unset: "
                             "every character seen)")
    reserved = reserved_tokens(num_unused)
    budget = vocab_size - len(reserved)
    if budget <= 0:
        raise UserInputError(
            f"--vocab_size={vocab_size} leaves no room for learned tokens after the "
            f"{len(reserved)} special and unused tokens; pass a larger --vocab_size")

    tokenizer = HFTokenizer(models.WordPiece(unk_token=UNK_TOKEN,
                                             continuing_subword_prefix=SUFFIX_INDICATOR))
    # NFC between cleaning and case/accents, where BERT's reference (transformers) and our
    # Tokenizer put it, so that decomposed text ("e" + U+0301) learns the pieces of "é".
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                   strip_accents=False, lowercase=False),
        normalizers.NFC(),
        normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                   strip_accents=strip_accents, lowercase=lower_case)])
    # tokenizers' CJK blocks start CJK Extension E at U+2B920, BERT's (and our Tokenizer's)
    # at U+2B820: the 256 ideographs between are split off here.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(),
        pre_tokenizers.Split(Regex("[\U0002B820-\U0002B91F]"), "isolated")])
    # The trainer numbers "##c" pieces in hash-map order and breaks ties between equally
    # frequent merges by number, so its output varies from run to run. Declaring every
    # possible "##c" up front as a special token fixes their numbers, and the result. They
    # count toward the trainer's target size, hence the larger target.
    continuations = [SUFFIX_INDICATOR + c for c in _continuation_chars()]
    limit = {} if max_alphabet is None else {"limit_alphabet": max_alphabet}
    trainer = trainers.WordPieceTrainer(
        vocab_size=budget + len(continuations), min_frequency=min_frequency,
        show_progress=False, special_tokens=continuations,
        continuing_subword_prefix=SUFFIX_INDICATOR, **limit)
    num_texts = [0]
    _train(tokenizer, _batches(texts_iterable, num_texts), trainer)
    if not num_texts[0]:
        raise UserInputError("the input holds no text; check --input and --input_format")

    ids = tokenizer.get_vocab(with_added_tokens=False)
    in_order = sorted(ids, key=ids.get)
    declared = in_order[:len(continuations)]
    trained = in_order[len(continuations):]
    alphabet = [t for t in trained if len(t) == 1]
    chars = set(alphabet)
    char_pieces = (alphabet + [t for t in declared if t[len(SUFFIX_INDICATOR):] in chars]
                   + [t for t in trained if _is_continuation_char(t)])
    merges = [t for t in trained if len(t) > 1 and not _is_continuation_char(t)]
    if len(char_pieces) > budget:
        counts = _char_piece_counts(trainer)
        kept = set(sorted(char_pieces, key=lambda t: -counts.get(t, 0))[:budget])
        learned = [t for t in char_pieces if t in kept]
        whole = len(reserved) + len(char_pieces)
        if not any(len(t) == 1 for t in kept):  # every word would be one [UNK]
            raise UserInputError(
                f"--vocab_size={vocab_size} leaves room for {budget} of the corpus's "
                f"{len(char_pieces)} characters and their ## forms, none of them a word's "
                f"first: every word would encode as [UNK]; pass --vocab_size={whole} or more "
                "(or --max_alphabet to keep fewer characters)")
        if log is not None:
            log(f"note: --vocab_size={vocab_size} leaves room for {budget} of the corpus's "
                f"{len(char_pieces)} characters and their ## forms and none of its longer "
                f"pieces: a word holding one of the {len(char_pieces) - budget} left out (the "
                f"rarest) encodes as [UNK]; --vocab_size={whole} keeps them all")
    else:
        learned = char_pieces + merges
    # The trainer never repeats a token, and none of its tokens can be a reserved one ("["
    # is punctuation); checked anyway, since a duplicate would shift every later id.
    reserved_set = set(reserved)
    learned = list(dict.fromkeys(t for t in learned if t not in reserved_set))
    if len(learned) < budget:
        supported = len(reserved) + len(learned)
        raise UserInputError(
            f"the corpus ({num_texts[0]} lines) supports only {supported} distinct tokens at "
            f"--min_frequency={min_frequency}, fewer than --vocab_size={vocab_size}; pass "
            f"--vocab_size={supported} or less, or more text")
    return reserved + learned[:budget]


def _train(tokenizer: HFTokenizer, batches: Iterator[list[str]], trainer) -> None:
    """`tokenizer.train_from_iterator`, in a thread of its own while the main thread waits:
    a signal's handler runs only in the main thread, between Python instructions, so with
    the trainer's Rust code there Ctrl-C and SIGTERM waited until it returned (8 to 14 s of
    a 45 MB corpus's 25, over a minute on 350 MB). The thread is a daemon: a script that
    stops leaves it to the process's exit (it writes nothing). In a longer process (a
    notebook) an interrupted trainer stops reading the corpus, but its Rust part, once
    begun, runs to its end."""
    outcome, stop = {}, threading.Event()

    def until_stopped():
        for batch in batches:
            if stop.is_set():
                raise KeyboardInterrupt  # (the trainer's error, which no one reads)
            yield batch

    def train():
        try:
            tokenizer.train_from_iterator(until_stopped(), trainer)
        except BaseException as e:  # raised again in the main thread
            outcome["error"] = e

    thread = threading.Thread(target=train, name="electra-learn-vocab", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except BaseException:
        stop.set()
        raise
    if "error" in outcome:
        raise outcome["error"]


def _is_continuation_char(token: str) -> bool:
    return len(token) == len(SUFFIX_INDICATOR) + 1 and token.startswith(SUFFIX_INDICATOR)


def _char_piece_counts(trainer) -> collections.Counter:
    """How often each character starts ("c") or continues ("##c") a word in the corpus.

    Read from the trainer's word counts, which it keeps in its serialised state; only
    needed in the rare case that the characters alone overflow the vocabulary.
    """
    state = json.loads(trainer.__getstate__())
    words = state["WordPieceTrainer"]["bpe_trainer"]["words"]
    counts = collections.Counter()
    for word, count in words.items():
        counts[word[0]] += count
        for c in word[1:]:
            counts[SUFFIX_INDICATOR + c] += count
    return counts


def check_output(path: str, overwrite: bool = False, inputs: str | list[str] | None = None):
    """Raises UserInputError unless `path` can take the vocab file; reads no input.

    Refused: an empty path, a folder (or a path ending in "/"), a path under a file or in
    a local folder this process cannot write to, an existing file unless `overwrite`, and,
    whatever `overwrite` says, one of the `inputs` files.
    """
    if not path:
        raise UserInputError("--output is empty; pass a file path, e.g. --output=vocab.txt")
    if path.endswith("/") or tf.io.gfile.isdir(path):
        raise UserInputError(f"--output={path} is a folder; pass a file path, e.g. "
                             f"--output={os.path.join(path, 'vocab.txt')}")
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent) and not tf.io.gfile.exists(parent):
        parent = os.path.dirname(parent)
    if parent and tf.io.gfile.exists(parent) and not tf.io.gfile.isdir(parent):
        raise UserInputError(f"--output={path} lies under {parent}, which is a file, not a "
                             "folder; pass another --output")
    if "://" not in path:
        _check_writable(path, parent or ".")
    if not tf.io.gfile.exists(path):
        return
    if inputs is not None and _same_file(path, corpus.expand_inputs(inputs)):
        raise UserInputError(f"--output={path} is one of the --input files; pass another "
                             "--output")
    if not overwrite:
        raise _exists(path)


def _check_writable(path: str, folder: str) -> None:
    """Creates and removes a file in `folder` (the nearest existing folder above `path`), so
    that a folder the vocab cannot go to fails before the training, not after it."""
    probe = atomic.temporary_name(os.path.join(folder, os.path.basename(path)))
    try:
        open(probe, "w").close()
        os.remove(probe)
    except OSError as error:
        raise UserInputError(f"--output={path} cannot be written ({folder}: "
                             f"{error.strerror}); pass another --output") from None


def _exists(path: str) -> UserInputError:
    return UserInputError(f"--output={path} exists; pass --overwrite to replace it, or another "
                          "--output")


def _same_file(path: str, files: list[str]) -> bool:
    if "://" in path:
        return path in files
    return os.path.realpath(path) in {os.path.realpath(f) for f in files if "://" not in f}


def write_vocab(tokens: list[str], path: str, overwrite: bool = False):
    """Writes one token per line, atomically (a temporary file renamed); local or gs://.

    An existing file at `path` is replaced only if `overwrite` (see `check_output`). If the
    write fails, the temporary file is removed and UserInputError names `path`.
    """
    check_output(path, overwrite)
    try:
        atomic.write_text(path, "\n".join(tokens) + "\n", overwrite=overwrite)
    except tf.errors.AlreadyExistsError:  # created while the vocab was being learned
        raise _exists(path) from None
    except tf.errors.OpError as error:  # e.g. a bucket this account may not write to
        raise UserInputError(f"--output={path} could not be written ({error.message}); "
                             "pass another --output") from None
