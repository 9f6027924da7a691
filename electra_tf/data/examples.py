"""Packing tokenized sentences into `[CLS] A [SEP] B [SEP]` examples, as the official builder.

The official ELECTRA builder (build_pretraining_dataset.py) accumulates the sentences of a
document until they reach a target length, then splits them into two segments:

- the target length is max_seq_length, except that 5% of the time (drawn after each
  example) it is a random length in [5, max_seq_length];
- 10% of examples are a single segment; otherwise sentences fill segment A up to
  (target - 3) // 2 tokens (a sentence that would overflow A still goes there half the
  time while B is empty) and the rest go to B;
- A is cut to max_seq_length - 2 tokens and B to what is left after [CLS] A [SEP] ... [SEP];
- a document's end (a blank line) closes the current example; examples never span documents.

`ExampleBuilder` reproduces that, draw for draw, with its own seeded `random.Random` in
place of the global one, so a shard's examples depend only on the seed and its text.

`serialize_example` writes the official TFRecord features (input_ids, input_mask,
segment_ids, int64 [max_seq_length]) as tf.train.Example bytes, encoded directly: building
proto objects in Python would cost more than the tokenization.
"""

import random
from collections.abc import Iterator

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")
WORD_START = "word_start"
SINGLE_SEGMENT_PROB = 0.1
RANDOM_LENGTH_PROB = 0.05
MIN_RANDOM_LENGTH = 5


class ExampleBuilder:
    """Packs the sentences of documents into examples with the official semantics.

    Args:
      max_seq_length: example length L including [CLS] and [SEP]s.
      cls_id, sep_id: special token ids.
      rng: the random source (seed it per shard for reproducible output).

    `add_document(sentences)` yields examples as `(token_ids, len_a)`: token_ids is
    `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` without padding, len_a the length of the
    `[CLS] A [SEP]` part (segment 0). A document too long to hold at once is given in parts:
    `add_sentences` for each, then `end_document`; the examples are the same.
    """

    def __init__(self, max_seq_length: int, cls_id: int, sep_id: int, rng: random.Random):
        if max_seq_length < MIN_RANDOM_LENGTH:
            raise ValueError(f"max_seq_length must be at least {MIN_RANDOM_LENGTH}")
        self.max_seq_length = max_seq_length
        self.cls_id, self.sep_id = cls_id, sep_id
        self._rng = rng
        self._sentences: list[list[int]] = []
        self._length = 0
        self._target_length = max_seq_length
        self.cut_tokens = 0  # tokens of sentences cut off at the end of an example

    def add_document(self, sentences: list[list[int]]) -> Iterator[tuple[list[int], int]]:
        yield from self.add_sentences(sentences)
        yield from self.end_document()

    def add_sentences(self, sentences: list[list[int]]) -> Iterator[tuple[list[int], int]]:
        """Sentences of the current document; yields the examples they complete."""
        for sentence in sentences:
            self._sentences.append(sentence)
            self._length += len(sentence)
            if self._length >= self._target_length:
                yield self._create_example()

    def end_document(self) -> Iterator[tuple[list[int], int]]:
        """The current document's last example, if it has one under way."""
        if self._length:
            yield self._create_example()
        # The official builder also keeps zero-length lines in the buffer; they add nothing.
        self._sentences = []

    def _create_example(self) -> tuple[list[int], int]:
        rng = self._rng
        if rng.random() < SINGLE_SEGMENT_PROB:
            first_target = 100000
        else:
            first_target = (self._target_length - 3) // 2
        first, second = [], []
        for sentence in self._sentences:
            if (not first or len(first) + len(sentence) < first_target
                    or (not second and len(first) < first_target and rng.random() < 0.5)):
                first += sentence
            else:
                second += sentence
        read = len(first) + len(second)
        first = first[:self.max_seq_length - 2]
        second = second[:max(0, self.max_seq_length - len(first) - 3)]
        self.cut_tokens += read - len(first) - len(second)

        self._sentences = []
        self._length = 0
        if rng.random() < RANDOM_LENGTH_PROB:
            self._target_length = rng.randint(MIN_RANDOM_LENGTH, self.max_seq_length)
        else:
            self._target_length = self.max_seq_length

        tokens = [self.cls_id] + first + [self.sep_id]
        len_a = len(tokens)
        if second:
            tokens += second + [self.sep_id]
        return tokens, len_a


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return bytes([(tag << 3) | 2]) + _varint(len(payload)) + payload


class ExampleSerializer:
    """Encodes packed examples as tf.train.Example bytes with the official int64 features.

    Equivalent to building a tf.train.Example with Int64List features input_ids,
    input_mask, segment_ids (padded to max_seq_length) and calling SerializeToString, about
    20x faster: every feature is a packed int64 list, and all protobuf headers are computed
    once (the 0/1 features always take max_seq_length bytes; the ids' header depends only
    on their encoded length, cached).

    With `word_starts=True` the tokens arrive as `id * 2 + starts_word` (so ExampleBuilder
    packs word boundaries along with the ids untouched) and a fourth feature, `word_start`
    (1 where a token begins a word), is written for whole-word masking of languages whose
    words the tokenizer cannot see, such as Chinese. Readers of the official format ignore it.
    """

    def __init__(self, max_seq_length: int, vocab_size: int, word_starts: bool = False):
        self.max_seq_length = max_seq_length
        self.word_starts = word_starts
        self._varints = [_varint(i) for i in range(max(vocab_size, 2))]
        self._ids_key = _field(1, FEATURE_NAMES[0].encode())
        names = FEATURE_NAMES[1:] + ((WORD_START,) if word_starts else ())
        # Map-entry headers of the features whose packed values are max_seq_length bytes.
        self._fixed_headers = [self._header(_field(1, name.encode()), max_seq_length)
                               for name in names]
        self._ids_headers: dict[int, bytes] = {}
        self._zeros = b"\x00" * max_seq_length  # sliced: linear, not quadratic, memory
        self._ones = b"\x01" * max_seq_length

    @staticmethod
    def _header(key: bytes, size: int) -> bytes:
        """Bytes before `size` bytes of packed values in a Features.feature map entry:
        entry { key, value: Feature { int64_list: Int64List { value: packed } } }."""
        entry = _field(1, key + _field(2, _field(3, _field(1, b"\x00" * size))))
        return entry[:-size] if size else entry

    def __call__(self, token_ids: list[int], len_a: int) -> bytes:
        length = len(token_ids)
        pad = self.max_seq_length - length
        if pad < 0:
            raise ValueError(f"example of {length} tokens exceeds max_seq_length")
        zeros, ones = self._zeros, self._ones
        if self.word_starts:
            starts = bytes([t & 1 for t in token_ids]) + zeros[:pad]
            token_ids = [t >> 1 for t in token_ids]
        ids = b"".join(map(self._varints.__getitem__, token_ids)) + zeros[:pad]
        ids_header = self._ids_headers.get(len(ids))
        if ids_header is None:
            ids_header = self._ids_headers[len(ids)] = self._header(self._ids_key, len(ids))
        mask_header, segments_header = self._fixed_headers[:2]
        parts = [ids_header, ids, mask_header, ones[:length], zeros[:pad],
                 segments_header, zeros[:len_a], ones[:length - len_a], zeros[:pad]]
        if self.word_starts:
            parts += [self._fixed_headers[2], starts]
        features = b"".join(parts)
        return b"\x0a" + self._varints_of(len(features)) + features

    def _varints_of(self, value: int) -> bytes:
        return self._varints[value] if value < len(self._varints) else _varint(value)


def padded_features(token_ids: list[int], len_a: int, max_seq_length: int) -> dict:
    """The three features as padded Python lists (for tests and small tools)."""
    length = len(token_ids)
    pad = [0] * (max_seq_length - length)
    return {
        "input_ids": list(token_ids) + pad,
        "input_mask": [1] * length + pad,
        "segment_ids": [0] * len_a + [1] * (length - len_a) + pad,
    }
