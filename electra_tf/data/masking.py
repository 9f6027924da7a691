"""Dynamic masking for ELECTRA / BERT pre-training: batched TF ops that run inside tf.data.

Official semantics (google-research/electra pretrain_helpers.mask):
- per sequence, n = max(1, min(N, round(num_tokens * mask_prob))) positions are selected,
  num_tokens counting every real token ([CLS] and [SEP] included), N the
  max_predictions_per_seq (default int((mask_prob + 0.005) * max_seq_length));
- candidates exclude [CLS], [SEP], [MASK] and padding;
- 85% of the selected positions become [MASK], the other 15% keep their token; none is
  replaced by a random token (the generator does that).
Positions are drawn *without* replacement (the official code draws with replacement, so it
can select fewer than n distinct positions); they are returned in ascending order, padded
with position 0 and weight 0.

Whole-word masking (optional) selects words instead of tokens: a word is a token plus the
continuation tokens that follow it: "##" pieces, or, for Chinese data built with a word
segmenter, the characters after a word's first (the records' `word_start` feature). Words
are taken in random order while the running token count stays within n (a word that would
overflow stops the selection; BERT's builder skips it and tries smaller words, which differs
in how close to n the count gets: an example whose first drawn word is longer than n gets
no masked position).

Randomness is a counter-based hash of (seed, example index, position)
(`electra_tf.stateless`): no RNG state, so the masks of a stream depend only on the seed and
each example's position in the stream. A resumed input pipeline (same seed, restored
iterator) produces exactly the same masks, and changing the batch size does not change them.
"""

import tensorflow as tf

from electra_tf.stateless import (STREAM_MASK_KEEP, STREAM_MASK_POSITIONS, STREAM_MASK_WORDS,
                                  hash_uniform)


def default_max_predictions(max_seq_length: int, mask_prob: float) -> int:
    """The official N: int((mask_prob + 0.005) * max_seq_length), e.g. 19 for 0.15 x 128."""
    return int((mask_prob + 0.005) * max_seq_length)


def _positions_from_selection(selected: tf.Tensor, max_predictions: int):
    """bool [B, L] with at most N True per row -> ascending positions int32 [B, N], valid."""
    length = tf.shape(selected)[1]
    positions = tf.range(length)[None, :]
    key = tf.where(selected, length - positions, 0)
    values, _ = tf.math.top_k(key, k=max_predictions, sorted=True)
    valid = values > 0
    return tf.where(valid, length - values, 0), valid


def _select_tokens(candidates, num_to_predict, example_index, seed, max_predictions):
    length = tf.shape(candidates)[1]
    positions = tf.range(length)[None, :]
    score = tf.where(candidates,
                     hash_uniform(seed, STREAM_MASK_POSITIONS, example_index, positions), -1.0)
    values, indices = tf.math.top_k(score, k=max_predictions, sorted=True)
    take = (tf.range(max_predictions)[None, :] < num_to_predict[:, None]) & (values >= 0.0)
    batch = tf.shape(candidates)[0]
    rows = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(indices))
    return tf.scatter_nd(tf.stack([rows, indices], -1), tf.cast(take, tf.int32),
                         tf.shape(candidates)) > 0


def _select_words(candidates, is_continuation, num_to_predict, example_index, seed):
    """Whole words, in random order, while the running token count stays <= n."""
    batch, length = tf.shape(candidates)[0], tf.shape(candidates)[1]
    previous = tf.pad(candidates[:, :-1], [[0, 0], [1, 0]])
    starts = candidates & ~(is_continuation & previous)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1)  # 1-based word number per row
    # One segment per (row, word); non-candidates go to a dump segment 0 of their row.
    segment = tf.range(batch)[:, None] * (length + 1) + tf.where(candidates, word, 0)
    num_segments = batch * (length + 1)
    sizes = tf.math.unsorted_segment_sum(tf.cast(candidates, tf.int32), segment, num_segments)
    start_size = tf.where(starts, tf.gather(sizes, segment), 0)
    score = tf.where(starts, hash_uniform(seed, STREAM_MASK_WORDS, example_index, word), -1.0)
    order = tf.argsort(score, axis=1, direction="DESCENDING", stable=True)
    running = tf.cumsum(tf.gather(start_size, order, batch_dims=1), axis=1)
    sorted_take = ((running <= num_to_predict[:, None])
                   & (tf.gather(score, order, batch_dims=1) >= 0.0))
    take_start = tf.gather(sorted_take, tf.argsort(order, axis=1), batch_dims=1)
    take_word = tf.math.unsorted_segment_max(tf.cast(take_start, tf.int32), segment,
                                             num_segments)
    return candidates & (tf.gather(take_word, segment) > 0)


def mask_batch(batch: dict, example_index: tf.Tensor, *, seed: int, mask_prob: float,
               max_predictions: int, cls_id: int, sep_id: int, mask_id: int,
               replace_with_mask_prob: float = 0.85,
               is_continuation: tf.Tensor | None = None) -> dict:
    """Masks a batch of packed examples.

    Args:
      batch: input_ids, input_mask, segment_ids: int32 [B, L].
      example_index: int64 [B], each example's position in the stream (keys the randomness).
      seed: the run's seed. mask_prob: fraction of real tokens to select.
      max_predictions: N, the number of masked_lm slots.
      cls_id, sep_id, mask_id: special ids (never selected).
      replace_with_mask_prob: fraction of selected positions that become [MASK].
      is_continuation: bool [B, L], True for tokens that continue the word before them;
        enables whole-word masking.
    Returns:
      input_ids (masked), input_mask, segment_ids: int32 [B, L];
      masked_lm_positions, masked_lm_ids: int32 [B, N]; masked_lm_weights: float32 [B, N].
    """
    input_ids, input_mask = batch["input_ids"], batch["input_mask"]
    candidates = ((input_mask > 0) & (input_ids != cls_id) & (input_ids != sep_id)
                  & (input_ids != mask_id))
    num_tokens = tf.reduce_sum(tf.cast(input_mask, tf.float32), axis=1)
    num_to_predict = tf.clip_by_value(tf.cast(tf.round(num_tokens * mask_prob), tf.int32), 1,
                                      max_predictions)
    if is_continuation is None:
        selected = _select_tokens(candidates, num_to_predict, example_index, seed,
                                  max_predictions)
    else:
        selected = _select_words(candidates, is_continuation, num_to_predict, example_index,
                                 seed)
    positions, valid = _positions_from_selection(selected, max_predictions)
    all_positions = tf.range(tf.shape(input_ids)[1])[None, :]
    keep = (hash_uniform(seed, STREAM_MASK_KEEP, example_index, all_positions)
            >= replace_with_mask_prob)
    to_mask = selected & ~keep
    return {
        "input_ids": tf.where(to_mask, mask_id, input_ids),
        "input_mask": input_mask,
        "segment_ids": batch["segment_ids"],
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(valid, tf.gather(input_ids, positions, batch_dims=1), 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
    }

