"""Dynamic masking: official counts, 85/15 split, candidates, whole words, determinism."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import masking

CLS, SEP, MASK = 101, 102, 103


@pytest.fixture(scope="module")
def real_batch(austen_data):
    """All ~1400 real packed examples (L=128) from the Austen TFRecords, unmasked."""
    import glob
    directory, _ = austen_data
    files = sorted(glob.glob(f"{directory}/*.tfrecord"))
    spec = {k: tf.io.FixedLenFeature([128], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    records = list(tf.data.TFRecordDataset(files).batch(100000))[0]
    return {k: tf.cast(v, tf.int32) for k, v in tf.io.parse_example(records, spec).items()}


def _mask(batch, seed=0, mask_prob=0.15, index=None, is_continuation=None, n_max=None):
    size = batch["input_ids"].shape[0]
    index = tf.range(size, dtype=tf.int64) if index is None else index
    return masking.mask_batch(
        batch, index, seed=seed, mask_prob=mask_prob,
        max_predictions=n_max or masking.default_max_predictions(128, mask_prob),
        cls_id=CLS, sep_id=SEP, mask_id=MASK, is_continuation=is_continuation)


def test_official_max_predictions():
    assert masking.default_max_predictions(128, 0.15) == 19
    assert masking.default_max_predictions(512, 0.15) == 79
    assert masking.default_max_predictions(512, 0.25) == 130


@pytest.mark.parametrize("mask_prob", [0.15, 0.25])
def test_counts_candidates_and_ids_follow_official_semantics(real_batch, mask_prob):
    out = _mask(real_batch, mask_prob=mask_prob)
    ids, mask = real_batch["input_ids"].numpy(), real_batch["input_mask"].numpy()
    positions = out["masked_lm_positions"].numpy()
    weights = out["masked_lm_weights"].numpy()
    n_max = masking.default_max_predictions(128, mask_prob)
    assert positions.shape == weights.shape == (len(ids), n_max) and len(ids) > 1000
    expected_n = np.clip(np.round(mask.sum(1) * mask_prob).astype(int), 1, n_max)
    np.testing.assert_array_equal(weights.sum(1), expected_n)  # every sequence has candidates
    rows = np.arange(len(ids))[:, None]
    chosen = ids[rows, positions]
    valid = weights > 0
    # Never [CLS], [SEP], [MASK] or padding; distinct, ascending; padding slots are 0/0.
    assert not np.isin(chosen[valid], [CLS, SEP, MASK, 0]).any()
    assert (mask[rows, positions][valid] == 1).all()
    assert (positions[~valid] == 0).all()
    for p, v in zip(positions, valid):
        assert (np.diff(p[v]) > 0).all()
    np.testing.assert_array_equal(out["masked_lm_ids"].numpy(), np.where(valid, chosen, 0))
    # 85% of the selected positions become [MASK], 15% keep their token, nothing else changes.
    new = out["input_ids"].numpy()
    masked_here = new[rows, positions][valid] == MASK
    assert abs(masked_here.mean() - 0.85) < 0.01, masked_here.mean()
    kept = ~masked_here
    assert (new[rows, positions][valid][kept] == chosen[valid][kept]).all()
    changed = new != ids
    assert changed.sum() == masked_here.sum()
    np.testing.assert_array_equal(out["segment_ids"], real_batch["segment_ids"])


def test_positions_are_uniform_over_candidates(real_batch):
    out = _mask(real_batch)
    positions = out["masked_lm_positions"].numpy()[out["masked_lm_weights"].numpy() > 0]
    counts = np.bincount(positions, minlength=128)[1:100]  # inside nearly every sequence
    # Each position's share of selections is close to the mean (binomial noise ~5%).
    assert counts.std() / counts.mean() < 0.15


def test_short_sequences_and_sequences_without_candidates():
    ids = np.zeros((3, 128), np.int32)
    ids[0, :3] = [CLS, 2023, SEP]          # 3 real tokens -> round(0.45) = 0 -> n = 1
    ids[1, :2] = [CLS, SEP]                # no candidate at all
    ids[2, :5] = [CLS, MASK, 2023, 2003, SEP]
    batch = {"input_ids": tf.constant(ids), "input_mask": tf.constant((ids > 0).astype(np.int32)),
             "segment_ids": tf.zeros_like(ids)}
    out = _mask(batch)
    np.testing.assert_array_equal(out["masked_lm_weights"].numpy().sum(1), [1, 0, 1])
    assert out["masked_lm_positions"].numpy()[0, 0] == 1
    assert out["masked_lm_positions"].numpy()[2, 0] in (2, 3)  # never the [MASK] at 1


def test_masks_depend_only_on_seed_and_example_index(real_batch):
    first = _mask(real_batch, seed=1)
    again = _mask(real_batch, seed=1)
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
    other_seed = _mask(real_batch, seed=2)
    assert (first["masked_lm_positions"].numpy() != other_seed["masked_lm_positions"].numpy()).any()
    # A slice masked on its own (another batch size) gets the same masks, given its indices.
    part = {k: v[100:132] for k, v in real_batch.items()}
    sliced = _mask(part, seed=1, index=tf.range(100, 132, dtype=tf.int64))
    for k in first:
        np.testing.assert_array_equal(first[k][100:132], sliced[k])
    # The same example at another stream index gets another mask (dynamic masking).
    shifted = _mask(part, seed=1, index=tf.range(5100, 5132, dtype=tf.int64))
    assert (shifted["masked_lm_positions"].numpy() != sliced["masked_lm_positions"].numpy()).any()


def test_hash_uniform_is_uniform_and_decorrelated():
    u = masking.hash_uniform(0, 1, tf.range(4096, dtype=tf.int64), tf.range(128)[None]).numpy()
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.std() - 12 ** -0.5) < 0.005
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 0.95 * u.size / 10
    assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.01
    v = masking.hash_uniform(0, 2, tf.range(4096, dtype=tf.int64), tf.range(128)[None]).numpy()
    assert abs(np.corrcoef(u.ravel(), v.ravel())[0, 1]) < 0.01
    big = masking.hash_uniform(0, 1, tf.constant([2 ** 40, 2 ** 40 + 1], tf.int64),
                               tf.range(8)[None]).numpy()
    assert (big[0] != big[1]).all()


def test_whole_word_masking_takes_whole_words(real_batch, uncased_tokenizer):
    ids, mask = real_batch["input_ids"].numpy(), real_batch["input_mask"].numpy()
    is_cont = uncased_tokenizer.continuation_mask()[ids]
    out = _mask(real_batch, is_continuation=tf.constant(is_cont))
    positions = out["masked_lm_positions"].numpy()
    weights = out["masked_lm_weights"].numpy()
    n = np.clip(np.round(mask.sum(1) * 0.15).astype(int), 1, 19)
    assert (weights.sum(1) <= n).all()
    assert weights.sum() >= 0.9 * n.sum()
    multi_piece_words = 0
    for row in range(len(ids)):
        selected = set(positions[row][weights[row] > 0].tolist())
        for p in selected:
            # The word around p: back to its start, forward over its "##" pieces.
            start = p
            while is_cont[row, start] and ids[row, start - 1] not in (CLS, SEP):
                start -= 1
            end = p + 1
            while end < 128 and is_cont[row, end] and mask[row, end]:
                end += 1
            assert set(range(start, end)) <= selected, (row, p)
            multi_piece_words += end - start > 1
    assert multi_piece_words > 100
