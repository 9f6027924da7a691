"""Packing matches the official builder draw for draw; serialization matches tf.train.Example."""

import random

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data.examples import ExampleBuilder, ExampleSerializer, padded_features

L = 128


class OfficialExampleBuilder:
    """google-research/electra build_pretraining_dataset.ExampleBuilder, restated line by line
    (tokenization factored out, the global `random` replaced by an explicit rng)."""

    def __init__(self, max_length, cls_id, sep_id, rng):
        self._current_sentences, self._current_length = [], 0
        self._max_length = self._target_length = max_length
        self._cls, self._sep, self._rng = cls_id, sep_id, rng

    def add_line(self, bert_tokids):
        if not bert_tokids and self._current_length != 0:  # empty lines separate docs
            return self._create_example()
        self._current_sentences.append(bert_tokids)
        self._current_length += len(bert_tokids)
        if self._current_length >= self._target_length:
            return self._create_example()
        return None

    def _create_example(self):
        if self._rng.random() < 0.1:
            first_segment_target_length = 100000
        else:
            first_segment_target_length = (self._target_length - 3) // 2
        first_segment, second_segment = [], []
        for sentence in self._current_sentences:
            if (len(first_segment) == 0 or
                    len(first_segment) + len(sentence) < first_segment_target_length or
                    (len(second_segment) == 0 and
                     len(first_segment) < first_segment_target_length and
                     self._rng.random() < 0.5)):
                first_segment += sentence
            else:
                second_segment += sentence
        first_segment = first_segment[:self._max_length - 2]
        second_segment = second_segment[:max(0, self._max_length - len(first_segment) - 3)]
        self._current_sentences, self._current_length = [], 0
        if self._rng.random() < 0.05:
            self._target_length = self._rng.randint(5, self._max_length)
        else:
            self._target_length = self._max_length
        input_ids = [self._cls] + first_segment + [self._sep]
        segment_ids = [0] * len(input_ids)
        if second_segment:
            input_ids += second_segment + [self._sep]
            segment_ids += [1] * (len(second_segment) + 1)
        input_mask = [1] * len(input_ids)
        input_ids += [0] * (self._max_length - len(input_ids))
        input_mask += [0] * (self._max_length - len(input_mask))
        segment_ids += [0] * (self._max_length - len(segment_ids))
        return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


@pytest.fixture(scope="module")
def documents(uncased_tokenizer):
    """Real Austen documents (blank-line separated chapters) as token id lists."""
    import gzip
    from conftest import DATA
    with gzip.open(f"{DATA}/corpus/persuasion.txt.gz", "rt", encoding="utf-8") as f:
        chapters = [c.split("\n") for c in f.read().strip().split("\n\n")]
    ids = uncased_tokenizer.encode([s for c in chapters for s in c])
    out, k = [], 0
    for chapter in chapters:
        out.append(ids[k:k + len(chapter)])
        k += len(chapter)
    return out


def _ours(documents, seed, max_length=L):
    builder = ExampleBuilder(max_length, 101, 102, random.Random(seed))
    return [padded_features(t, a, max_length) for d in documents
            for t, a in builder.add_document(d)]


def _official(documents, seed, max_length=L):
    builder = OfficialExampleBuilder(max_length, 101, 102, random.Random(seed))
    examples = []
    for document in documents:
        for sentence in document + [[]]:  # a blank line after each document
            example = builder.add_line(sentence)
            if example:
                examples.append(example)
    return examples


@pytest.mark.parametrize("seed,max_length", [(0, 128), (7, 128), (3, 512), (5, 16)])
def test_packing_equals_official_builder(documents, seed, max_length):
    ours = _ours(documents, seed, max_length)
    assert ours == _official(documents, seed, max_length)
    assert len(ours) > 30


def test_packing_statistics_and_format(documents):
    examples = _ours(documents * 6, seed=1)
    ids = np.array([e["input_ids"] for e in examples])
    mask = np.array([e["input_mask"] for e in examples])
    seg = np.array([e["segment_ids"] for e in examples])
    lengths = mask.sum(1)
    assert ids.shape[1] == L and (lengths <= L).all() and (lengths >= 3).all()
    assert (ids[:, 0] == 101).all()
    assert (ids[np.arange(len(ids)), lengths - 1] == 102).all()
    assert ((ids == 0) == (mask == 0)).all() and (seg[mask == 0] == 0).all()
    # Masks are a prefix of ones; segment ids are 0s then 1s; [SEP] ends each segment.
    assert (np.diff(mask, axis=1) <= 0).all() and (np.diff(seg * mask, axis=1)[:, 1:] >= -1).all()
    two_segments = seg.max(1) == 1
    for row, n in zip(ids[two_segments], lengths[two_segments]):
        assert (row[:n] == 102).sum() == 2
    # About 10% single-segment draws, plus examples whose sentences all fit segment A.
    assert 0.10 <= 1 - two_segments.mean() <= 0.35
    # Most examples reach the target length; 5% of targets are random lengths.
    assert 0.6 <= (lengths >= L - 10).mean() <= 0.97
    assert np.median(lengths) == L


def test_no_text_is_reordered(documents):
    builder = ExampleBuilder(L, 101, 102, random.Random(0))
    document = documents[0]
    examples = list(builder.add_document(document))
    flat = [t for s in document for t in s]
    emitted = [t for ids, _ in examples for t in ids if t not in (101, 102)]
    # Emitted tokens are the document's tokens in order, minus truncated tails.
    it = iter(flat)
    assert all(any(t == u for u in it) for t in emitted)
    assert len(emitted) >= 0.8 * len(flat)


def test_serializer_matches_tf_train_example(uncased_tokenizer):
    serialize = ExampleSerializer(L, uncased_tokenizer.vocab_size)
    for token_ids, len_a in [([101, 7592, 102], 3), ([101, 30521, 5, 102, 16383, 200, 102], 4),
                             ([101] + [1000] * 126 + [102], 128)]:
        expected = padded_features(token_ids, len_a, L)
        reference = tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            for k, v in expected.items()}))
        ours = serialize(token_ids, len_a)
        assert tf.train.Example.FromString(ours) == reference
        parsed = tf.io.parse_single_example(ours, {
            k: tf.io.FixedLenFeature([L], tf.int64) for k in expected})
        for k, v in expected.items():
            assert parsed[k].numpy().tolist() == v
    with pytest.raises(ValueError, match="exceeds max_seq_length"):
        serialize([1] * (L + 1), 3)


@pytest.mark.parametrize("max_seq_length,vocab_size", [(512, 21128), (8, 200)])
def test_serializer_with_word_starts_matches_tf_train_example(max_seq_length, vocab_size):
    # Ids travel as id * 2 + starts_word; ids of 1, 2 and 3 varint bytes; a vocab smaller
    # than the example's encoded size (its length prefix is then computed, not looked up).
    rng = np.random.default_rng(0)
    serialize = ExampleSerializer(max_seq_length, vocab_size, word_starts=True)
    for length in (3, max_seq_length // 2, max_seq_length):
        ids = [101] + rng.integers(0, vocab_size, length - 2).tolist() + [102]
        starts = [1] + rng.integers(0, 2, length - 2).tolist() + [1]
        len_a = max(2, length // 3)
        features = padded_features(ids, len_a, max_seq_length)
        features["word_start"] = starts + [0] * (max_seq_length - length)
        reference = tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            for k, v in features.items()}))
        ours = serialize([i * 2 + s for i, s in zip(ids, starts)], len_a)
        assert tf.train.Example.FromString(ours) == reference
