"""Examples to model inputs: `[CLS] A [SEP] (B [SEP])` token ids padded to max_seq_length.

Sentence pairs are truncated as BERT does (a token at a time from the longer segment).
For tagging, each word is tokenized on its own and its tag sits on its first word piece;
the other pieces get no label (weight 0). Words beyond the sequence length are cut off and
predicted as the most frequent training tag ("O" in NER); `encode_tagging` counts them.
"""

import numpy as np

from electra_tf.tokenization import Tokenizer


_PACK_ROWS = 8192  # rows placed at a time (the index arrays of a chunk: 8 MB at L = 128)


def pair_lengths(length_a, length_b, budget: int):
    """BERT's pair truncation in closed form: how many pieces of each text stay when, while
    the two hold more than `budget`, a piece goes from the longer (from the second on a
    tie). Arrays of lengths in, arrays of kept lengths out."""
    keep_b = np.minimum(length_b, np.maximum(budget - length_a, budget // 2))
    return np.minimum(length_a, budget - keep_b), keep_b


def _pack(tokenizer, a, b,
          max_seq_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """input_ids, input_mask, segment_ids [N, L] int32 of `[CLS] A [SEP] (B [SEP])`, A and B
    as (flat ids, row_splits) of the tokenizer's `encode_flat` (B None: one text), cut to
    fit as `pair_lengths` says, and the number of rows cut. Placed from the flat ids a chunk
    of rows at a time: per-row Python lists took 8 times the arrays' memory (300,000 rows:
    3.5 GB for 0.46 GB)."""
    flat_a, splits_a = a
    length_a = np.diff(splits_a)
    n, L = len(length_a), max_seq_length
    if b is None:
        keep_a, keep_b = np.minimum(length_a, L - 2), None
        cut = int(np.count_nonzero(length_a > L - 2))
    else:
        length_b = np.diff(b[1])
        keep_a, keep_b = pair_lengths(length_a, length_b, L - 3)
        cut = int(np.count_nonzero(length_a + length_b > L - 3))
    ids, segments = np.zeros((n, L), np.int32), np.zeros((n, L), np.int32)
    ids[:, 0] = tokenizer.cls_id
    ids[np.arange(n), keep_a + 1] = tokenizer.sep_id
    end = keep_a + 2
    if b is not None:
        ids[np.arange(n), end + keep_b] = tokenizer.sep_id
        segments[np.arange(L)[None, :] >= end[:, None]] = 1
        end = end + keep_b + 1
    mask = (np.arange(L)[None, :] < end[:, None]).astype(np.int32)
    segments *= mask
    for start in range(0, n, _PACK_ROWS):
        rows = np.arange(start, min(n, start + _PACK_ROWS))
        _place(ids, rows, flat_a, splits_a[rows], keep_a[rows], 1)
        if b is not None:
            _place(ids, rows, b[0], b[1][rows], keep_b[rows], keep_a[rows] + 2)
    return ids, mask, segments, cut


def _place(ids, rows, flat, starts, keep, first_column):
    """ids[row, first_column + j] = flat[start + j] for j < keep, for each of `rows`."""
    row, j = np.nonzero(np.arange(max(int(keep.max(initial=0)), 1))[None, :] < keep[:, None])
    ids[rows[row], np.broadcast_to(first_column, rows.shape)[row] + j] = flat[starts[row] + j]


def _pad(rows, max_seq_length, dtype=np.int32, value=0):
    out = np.full((len(rows), max_seq_length), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def encode_sentences(tokenizer: Tokenizer, examples, max_seq_length: int,
                     labels: list[str] | None, regression: bool = False) -> tuple[dict, int]:
    """Features [N, L] of sentence (pair) examples and their `label_ids` ([N] int32 class
    ids, or float32 values for regression; examples without labels get 0), and how many
    examples were cut to fit."""
    has_b = any(e.text_b is not None for e in examples)
    cut = 0
    if examples:
        a = tokenizer.encode_flat([e.text_a for e in examples])
        b = tokenizer.encode_flat([e.text_b or "" for e in examples]) if has_b else None
        input_ids, input_mask, segment_ids, cut = _pack(tokenizer, a, b, max_seq_length)
    else:
        input_ids = input_mask = segment_ids = np.zeros((0, max_seq_length), np.int32)
    index = {label: i for i, label in enumerate(labels or [])}
    if regression:
        label_ids = np.array([e.label if e.label is not None else 0.0 for e in examples],
                             np.float32)
    else:
        label_ids = np.array([index.get(e.label, 0) for e in examples], np.int32)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "label_ids": label_ids}, cut


def encode_tagging(tokenizer: Tokenizer, sentences, max_seq_length: int,
                   labels: list[str]) -> tuple[dict, np.ndarray]:
    """Features of tagged sentences: `label_ids` [N, L] (the tag id at each word's first
    piece), `label_weights` [N, L] (1 there), and `word_positions` [N, W] (the position of
    each word's first piece, -1 for words cut off or beyond the sentence; W the most words
    a sentence has, at most L - 2, as many as can fit: one sentence of 6,400 words among
    100,000 made it 2.6 GB).
    A sentence keeps the whole words that fit, up to the first that does not (the exported
    tagger's truncation). Also returns the count of words that did not fit."""
    words = [w for s in sentences for w in s.words]
    pieces = tokenizer.encode(words) if words else []
    index = {label: i for i, label in enumerate(labels)}
    max_words = max((len(s.words) for s in sentences), default=0)
    ids_rows, label_rows, weight_rows = [], [], []
    positions = np.full((len(sentences), max(min(max_words, max_seq_length - 2), 1)), -1,
                        np.int32)
    cut, k = 0, 0
    for n, sentence in enumerate(sentences):
        ids, tags, weights = [tokenizer.cls_id], [0], [0]
        full = False  # from the first word that does not fit, every word is cut (a prefix)
        for w in range(len(sentence.words)):
            word_pieces = pieces[k] or [tokenizer.unk_id]  # a word that normalises away
            k += 1
            full = full or len(ids) + len(word_pieces) > max_seq_length - 1
            if full:
                cut += 1
                continue
            positions[n, w] = len(ids)
            tag = index.get(sentence.tags[w], 0) if sentence.tags else 0
            ids += word_pieces
            tags += [tag] + [0] * (len(word_pieces) - 1)
            weights += [1 if sentence.tags else 0] + [0] * (len(word_pieces) - 1)
        ids.append(tokenizer.sep_id)
        tags.append(0)
        weights.append(0)
        ids_rows.append(ids)
        label_rows.append(tags)
        weight_rows.append(weights)
    input_ids = _pad(ids_rows, max_seq_length)
    features = {"input_ids": input_ids,
                "input_mask": _pad([[1] * len(r) for r in ids_rows], max_seq_length),
                "segment_ids": np.zeros_like(input_ids),
                "label_ids": _pad(label_rows, max_seq_length),
                "label_weights": _pad(weight_rows, max_seq_length, np.float32, 0.0)}
    return features, positions, cut
