"""Examples to model inputs: `[CLS] A [SEP] (B [SEP])` token ids padded to max_seq_length.

Sentence pairs are truncated as BERT does (a token at a time from the longer segment).
For tagging, each word is tokenized on its own and its tag sits on its first word piece;
the other pieces get no label (weight 0). Words beyond the sequence length are cut off and
predicted as the most frequent training tag ("O" in NER); `encode_tagging` counts them.
"""

import numpy as np

from electra_tf.tokenization import Tokenizer


def _pack(pieces_a, pieces_b, max_seq_length, tokenizer):
    """input_ids, segment_ids of one example (truncated to fit)."""
    a, b = list(pieces_a), list(pieces_b) if pieces_b is not None else None
    if b is None:
        a = a[:max_seq_length - 2]
        ids = [tokenizer.cls_id] + a + [tokenizer.sep_id]
        return ids, [0] * len(ids)
    while len(a) + len(b) > max_seq_length - 3:
        (a if len(a) > len(b) else b).pop()
    ids = [tokenizer.cls_id] + a + [tokenizer.sep_id] + b + [tokenizer.sep_id]
    return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)


def _pad(rows, max_seq_length, dtype=np.int32, value=0):
    out = np.full((len(rows), max_seq_length), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def encode_sentences(tokenizer: Tokenizer, examples, max_seq_length: int,
                     labels: list[str] | None, regression: bool = False) -> dict:
    """Features [N, L] of sentence (pair) examples and their `label_ids` ([N] int32 class
    ids, or float32 values for regression; examples without labels get 0)."""
    pieces_a = tokenizer.encode([e.text_a for e in examples])
    has_b = any(e.text_b is not None for e in examples)
    pieces_b = (tokenizer.encode([e.text_b or "" for e in examples]) if has_b
                else [None] * len(examples))
    ids, segments = zip(*(_pack(a, b, max_seq_length, tokenizer)
                          for a, b in zip(pieces_a, pieces_b))) if examples else ((), ())
    index = {label: i for i, label in enumerate(labels or [])}
    if regression:
        label_ids = np.array([e.label if e.label is not None else 0.0 for e in examples],
                             np.float32)
    else:
        label_ids = np.array([index.get(e.label, 0) for e in examples], np.int32)
    input_ids = _pad(ids, max_seq_length)
    return {"input_ids": input_ids,
            "input_mask": _pad([[1] * len(r) for r in ids], max_seq_length),
            "segment_ids": _pad(segments, max_seq_length), "label_ids": label_ids}


def encode_tagging(tokenizer: Tokenizer, sentences, max_seq_length: int,
                   labels: list[str]) -> tuple[dict, np.ndarray]:
    """Features of tagged sentences: `label_ids` [N, L] (the tag id at each word's first
    piece), `label_weights` [N, L] (1 there), and `word_positions` [N, max words] (the
    position of each word's first piece, -1 for words cut off or beyond the sentence).
    A sentence keeps the whole words that fit, up to the first that does not (the exported
    tagger's truncation). Also returns the count of words that did not fit."""
    words = [w for s in sentences for w in s.words]
    pieces = tokenizer.encode(words) if words else []
    index = {label: i for i, label in enumerate(labels)}
    max_words = max((len(s.words) for s in sentences), default=0)
    ids_rows, label_rows, weight_rows = [], [], []
    positions = np.full((len(sentences), max(max_words, 1)), -1, np.int32)
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
