"""WordPiece tokenization with BERT's exact semantics, run in-graph by tensorflow-text.

BERT's reference tokenizer (``BasicTokenizer`` + ``WordpieceTokenizer``, the algorithm the
official ELECTRA code and transformers' slow ``BertTokenizer`` use) is pure Python. Here the
same algorithm runs as TensorFlow ops: a normalisation written to match BERT's
character by character, then tensorflow-text's ``FastBertTokenizer`` (C++, linear-time
WordPiece) with its own normaliser switched off. tensorflow-text's built-in lower-casing is
NFKC case folding, which differs from BERT on ligatures, full-width forms, "…" and the like;
that is why the normalisation is ours.

Being graph ops, the tokenizer also runs inside exported SavedModels (raw-string serving)
and inside tf.data.

The reference it matches is transformers' ``BertTokenizer`` (the parity tests run it).
Known differences:

- A word longer than 100 characters is [UNK], as in transformers. Google's original
  ``tokenization.py`` (BERT's, which the official ELECTRA code copies) allows 200: a word
  of 101 to 200 characters is [UNK] here and in transformers, word pieces there (long runs
  of Thai, Lao or kana, which have no spaces).
- A special token written in the text ("[SEP]", "[MASK]") is split as any text is, into
  "[", "sep", "]", as Google's original does; transformers keeps its special tokens whole.
  Pass sentence pairs as two texts, not joined with "[SEP]".
- An all-capital Greek word ending in sigma: transformers and this tokenizer lower-case
  "Σ" to "σ"; Google's original lower-cases whole words with Python's ``str.lower``, which
  writes the final form "ς".

Example:
    >>> tok = Tokenizer("data/vocab/bert_uncased.txt")
    >>> tok.encode(["Héllo, world!"])
    [[7592, 1010, 2088, 999]]
    >>> tok.decode([7592, 1010, 2088, 999])
    'hello , world !'
"""

import hashlib
import os
import unicodedata

import numpy as np
import tensorflow as tf

from electra_tf.errors import UserInputError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)
SUFFIX_INDICATOR = "##"
MAX_CHARS_PER_WORD = 100  # transformers' limit: a longer word is [UNK]
# tensorflow-text limits a word in UTF-8 bytes: room for 100 characters of up to 4 bytes
# each. A word over 100 bytes may still be over 100 characters, which `tokenize` checks
# where a text holds a run of at least 26 characters (the fewest that make 101 bytes) that
# are not whitespace, punctuation or CJK ideographs (each a word, `is_cjk`), the only
# places such a word can be.
_MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD
# BERT's CJK ideographs (its basic tokenizer's list), each a token of its own.
_CJK_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_CJK_CLASS = "".join(rf"\x{{{a:X}}}-\x{{{b:X}}}" for a, b in _CJK_BLOCKS)
_MAYBE_LONG_WORD = rf"(?s).*[^\s\p{{P}}{_CJK_CLASS}]{{26,}}.*"
_ENCODE_TEXTS = 16384  # texts per tokenizer call in encode_flat

# BERT's _clean_text: \t \n \r become spaces; every other control or format character
# (Unicode category C*), NUL and U+FFFD are deleted, joining the text around them. RE2 has
# no class for unassigned code points (Cn), so C* is written as "none of the other
# categories" (code points Unicode assigned after Python's unicodedata, 14.0 in Python
# 3.11, are kept where BERT under that Python deletes them). Separators (Z*: no-break
# space, U+3000, the line and paragraph separators U+2028/9) become spaces too: BERT splits
# words with Python's str.split, which splits at every one of them.
_WHITESPACE_CONTROLS = r"[\t\n\r\p{Z}]"
_DELETED = r"[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}]|\x{FFFD}"
_NONSPACING_MARKS = r"\p{Mn}"
# BERT's basic tokens as a split: at its whitespace (\t \n \r and Z*), and around each
# punctuation mark (all non-alphanumeric ASCII, and P*) and CJK ideograph, which are tokens
# of their own. One pattern for fine-tuning's QA contexts (basic_token_spans) and the QA
# export's graph, so the two split alike whatever Unicode version Python has.
BASIC_KEPT = (r"[\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}\p{P}"
              + _CJK_CLASS + "]")
BASIC_SPLIT = r"[\t\n\r\p{Z}]|" + BASIC_KEPT
# tensorflow_text's regex_split_with_offsets reads a text only up to its first NUL (the
# rest of a QA context was lost without a word). BERT deletes NUL, as it does U+0001,
# which splits nothing and is one byte too: the split is made with one in NUL's place.
NUL, NUL_STAND_IN = "\x00", "\x01"


def load_vocab(vocab_file: str) -> list[str]:
    """Reads a vocabulary file, one token per line (line number = id)."""
    if not tf.io.gfile.exists(vocab_file):
        raise UserInputError(
            f"vocab file {vocab_file} does not exist; pass --vocab_file=PATH to a WordPiece "
            "vocab (data/vocab/bert_uncased.txt ships with the project)")
    if tf.io.gfile.isdir(vocab_file):
        raise UserInputError(f"vocab file {vocab_file} is a folder; pass the vocab file in it "
                             "(e.g. vocab.txt)")
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserInputError(f"vocab file {vocab_file} is not UTF-8 text (byte {e.start}); pass "
                             "a WordPiece vocab, one token per line") from None
    if text.startswith("\ufeff"):
        raise UserInputError(
            f"vocab file {vocab_file} starts with a UTF-8 byte-order mark (U+FEFF), which "
            "would be part of its first token; save it without one (sed -i '1s/^\\xEF\\xBB"
            "\\xBF//' FILE)")
    vocab = text.split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    vocab = [token.rstrip("\r") for token in vocab]
    if not vocab:
        raise UserInputError(f"vocab file {vocab_file} is empty; pass a WordPiece vocab file")
    if len(set(vocab)) < len(vocab):
        seen = {}
        for number, token in enumerate(vocab, 1):
            if token in seen:
                raise UserInputError(
                    f"vocab file {vocab_file} line {number} repeats line {seen[token]} "
                    f"({token!r}); a vocab holds each token once, one per line")
            seen[token] = number
    spaced = next((n for n, token in enumerate(vocab, 1) if " " in token), None)
    if spaced:
        # (BERT splits text at spaces before WordPiece, so no token holds one; tensorflow-text
        # matched 'the ' across two words: 'the page' became 'the ' + '##page', silently.)
        raise UserInputError(
            f"vocab file {vocab_file} line {spaced} ({vocab[spaced - 1]!r}) holds a space, "
            "which no WordPiece token does (text is split at spaces first) and which would "
            "join words; remove the space (or the line)")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise UserInputError(
            f"vocab file {vocab_file} lacks the special tokens {', '.join(missing)}; use a "
            "BERT-style WordPiece vocab (scripts/learn_vocab.py writes one)")
    return vocab


def vocab_sha256(vocab_file: str) -> str:
    """The hash recorded in metadata.json so data and model can be checked to match."""
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _tf_text():
    """tensorflow_text, imported on first use: reading and training on pre-built TFRecords
    never tokenizes, so the pre-training and fine-tuning loops run without it."""
    import tensorflow_text  # pylint: disable=import-outside-toplevel

    return tensorflow_text


def normalize(texts: tf.Tensor, lower_case: bool, strip_accents: bool) -> tf.Tensor:
    """BERT's text normalisation as string ops. texts: string [...] -> string [...]."""
    texts = tf.strings.regex_replace(texts, _WHITESPACE_CONTROLS, " ")
    texts = tf.strings.regex_replace(texts, _DELETED, "")
    # Composed, after cleaning and before case and accents, as in transformers' BertTokenizer:
    # decomposed input ("e" + U+0301, as macOS writes it) then finds the token "é".
    texts = _tf_text().normalize_utf8(texts, "NFC")
    if lower_case:
        # Lower-case character by character, as the reference does: ICU's context rule
        # would turn a word-final capital sigma into "ς", the reference gives "σ".
        texts = tf.strings.regex_replace(texts, "Σ", "σ")
        texts = tf.strings.lower(texts, encoding="utf-8")
    if strip_accents:
        texts = _tf_text().normalize_utf8(texts, "NFD")
        texts = tf.strings.regex_replace(texts, _NONSPACING_MARKS, "")
    return texts


class Tokenizer:
    """BERT WordPiece tokenizer (ids identical to BERT's reference tokenizer).

    Args:
      vocab_file: WordPiece vocabulary, one token per line; must hold [PAD], [UNK], [CLS],
        [SEP] and [MASK]. Local path or gs://.
      lower_case: lower-case the text (uncased models).
      strip_accents: remove accents (NFD, then drop non-spacing marks). Defaults to
        `lower_case`, as in BERT.

    CJK ideographs become single tokens, punctuation is split off, control characters are
    dropped. `encode` adds no special tokens.
    """

    def __init__(self, vocab_file: str, lower_case: bool = True,
                 strip_accents: bool | None = None):
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.lower_case = lower_case
        self.strip_accents = lower_case if strip_accents is None else strip_accents
        self._ids = {token: i for i, token in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self._ids[t] for t in SPECIAL_TOKENS)
        self._wordpiece = _tf_text().FastBertTokenizer(
            vocab=self.vocab,
            suffix_indicator=SUFFIX_INDICATOR,
            max_bytes_per_word=_MAX_BYTES_PER_WORD,
            token_out_type=tf.int32,
            unknown_token=UNK_TOKEN,
            lower_case_nfd_strip_accents=False)
        self._continues = tf.constant(self.continuation_mask())

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """In-graph tokenization. texts: string [B] -> int32 ragged [B, (tokens)]."""
        texts = normalize(texts, self.lower_case, self.strip_accents)
        maybe_long = tf.reduce_any(tf.strings.regex_full_match(texts, _MAYBE_LONG_WORD))
        return tf.cond(maybe_long, lambda: self._tokenize_long_words(texts),
                       lambda: self._wordpiece.tokenize(texts))

    def _tokenize_long_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """WordPiece with each word of over MAX_CHARS_PER_WORD characters one [UNK]."""
        ids, starts, ends = self._wordpiece.tokenize_with_offsets(texts)
        flat, rows = ids.flat_values, ids.value_rowids()
        first = ~tf.gather(self._continues, flat)  # a word's first piece
        word = tf.cumsum(tf.cast(first, tf.int32)) - 1
        words = tf.reduce_sum(tf.cast(first, tf.int32))
        begin = tf.math.unsorted_segment_min(starts.flat_values, word, words)
        size = tf.math.unsorted_segment_max(ends.flat_values, word, words) - begin
        # Characters are counted for the words of over 100 bytes only.
        long = tf.where(size > MAX_CHARS_PER_WORD)[:, 0]
        chars = tf.strings.length(tf.strings.substr(
            tf.gather(texts, tf.gather(rows, tf.gather(tf.where(first)[:, 0], long))),
            tf.gather(begin, long), tf.gather(size, long)), unit="UTF8_CHAR")
        too_long = tf.scatter_nd(long[:, None], chars > MAX_CHARS_PER_WORD,
                                 tf.shape(size, out_type=tf.int64))
        unknown = tf.gather(too_long, word)
        keep = first | ~unknown
        return tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(tf.where(unknown, self.unk_id, flat), keep),
            tf.boolean_mask(rows, keep), nrows=ids.nrows())

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of many texts as (flat int32 ids, row_splits int64 [len(texts)+1]),
        _ENCODE_TEXTS texts per call (TensorFlow's intermediate tensors of one call over
        300,000 texts took a gigabyte)."""
        if len(texts) <= _ENCODE_TEXTS:
            ids = self.tokenize(tf.constant(texts, dtype=tf.string))
            return ids.flat_values.numpy(), ids.row_splits.numpy()
        parts = [self.encode_flat(texts[i:i + _ENCODE_TEXTS])
                 for i in range(0, len(texts), _ENCODE_TEXTS)]
        offsets = np.cumsum([0] + [len(flat) for flat, _ in parts[:-1]])
        splits = np.concatenate([parts[0][1][:1]] + [split[1:] + offset for (_, split), offset
                                                     in zip(parts, offsets)])
        return np.concatenate([flat for flat, _ in parts]), splits

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        if not texts:
            return []
        flat, splits = self.encode_flat(texts)
        flat = flat.tolist()
        return [flat[splits[i]:splits[i + 1]] for i in range(len(texts))]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.vocab[i] for i in ids]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Joins word pieces back into space-separated words ("##" pieces attach)."""
        words = []
        for token in self.convert_ids_to_tokens(ids):
            if skip_special_tokens and token in SPECIAL_TOKENS:
                continue
            if token.startswith(SUFFIX_INDICATOR) and words:
                words[-1] += token[len(SUFFIX_INDICATOR):]
            else:
                words.append(token)
        return " ".join(words)

    def continuation_mask(self) -> np.ndarray:
        """bool [vocab_size]: True for "##" pieces that continue a word (whole-word masking)."""
        return np.array([t.startswith(SUFFIX_INDICATOR) for t in self.vocab], dtype=bool)

    def __repr__(self) -> str:
        return (f"Tokenizer({os.path.basename(self.vocab_file)!r}, vocab_size={self.vocab_size}, "
                f"lower_case={self.lower_case}, strip_accents={self.strip_accents})")


def basic_token_spans(texts: list[str]) -> list[list[tuple[int, int]]]:
    """Character spans [start, end) of BERT's basic tokens in each text: runs of characters
    between whitespace, with every punctuation mark and CJK ideograph a token of its own
    (BASIC_SPLIT, RE2's Unicode classes: a code point Unicode assigned after Python's
    unicodedata, 14.0 in Python 3.11, is what RE2 says it is). Whitespace as BERT's: \t \n
    \r and Z*; the other control characters Python calls space (\v, \f, \x1c-\x1f,
    \x85) BERT deletes, so they join the characters around them."""
    if not texts:
        return []
    _, begin, end = _tf_text().regex_split_with_offsets(
        tf.constant([t.replace(NUL, NUL_STAND_IN) for t in texts], tf.string), BASIC_SPLIT,
        BASIC_KEPT)
    out = []
    for text, b, e in zip(texts, begin.to_list(), end.to_list()):
        if text.isascii():  # bytes are characters
            out.append(list(zip(b, e)))
            continue
        # The byte offset where each character starts -> its index.
        starts = np.cumsum([0] + [len(c.encode()) for c in text])
        out.append(list(zip(np.searchsorted(starts, b).tolist(),
                            np.searchsorted(starts, e).tolist())))
    return out


def is_whitespace(c: str) -> bool:
    r"""BERT's whitespace (a word boundary): \t \n \r and Z* (space separators, U+2028,
    U+2029); the other control characters Python calls space (\v, \f, \x1c-\x1f, \x85)
    BERT deletes, so they join the characters around them."""
    return c in "\t\n\r" or unicodedata.category(c) in ("Zs", "Zl", "Zp")


def is_punctuation(c: str) -> bool:
    """BERT's basic tokenizer's punctuation (a word of its own)."""
    # BERT counts all non-alphanumeric ASCII as punctuation, "$" and "^" included.
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def is_cjk(cp: int) -> bool:
    """A CJK ideograph's code point, as BERT's basic tokenizer lists them (a token of its
    own)."""
    return cp >= 0x3400 and any(a <= cp <= b for a, b in _CJK_BLOCKS)  # most text: below
