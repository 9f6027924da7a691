"""ELECTRA models and objectives: losses by hand, sampling, labels, gradient isolation,
every sharing mode / objective / algorithm learning on real data, gin files, mixed precision."""

import dataclasses
import math
import os

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, UNCASED_VOCAB
from electra_tf import gin_files
from electra_tf.data.pipeline import pretraining_dataset
from electra_tf.modeling import factory
from electra_tf.modeling.config import SIZES, encoder_config, generator_config
from electra_tf.modeling.metrics import PretrainingMetrics
from electra_tf.modeling.pretrainer import (ElectraPretrainer, call_counts, masked_lm_loss,
                                            replaced_token_loss)
from electra_tf.modeling import tensors
from electra_tf.modeling.tensors import (sample_from_logits, scatter_positions,
                                         sparse_cross_entropy)
from electra_tf.training import pretraining  # noqa: F401 (registers the gin configurables)

V = 1000
TINY = encoder_config("tiny", vocab_size=V, num_layers=1)


def _batch(seed=0, B=4, L=24, N=4):
    """A masked batch as the pipeline makes it: [CLS] ... [SEP], padding in row 0, a row
    with only 2 real masked slots, 85% of masked positions [MASK]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(104, V, (B, L)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones((B, L), np.int32)
    ids[0, 16:], mask[0, 16:] = 0, 0
    ids[0, 15] = 102
    positions = np.stack([np.sort(rng.choice(np.arange(1, 15), N, replace=False))
                          for _ in range(B)]).astype(np.int32)
    masked_ids = np.take_along_axis(ids, positions, 1)
    weights = np.ones((B, N), np.float32)
    weights[1, 2:] = 0
    positions[1, 2:], masked_ids[1, 2:] = 0, 0
    masked = ids.copy()
    for b in range(B):
        for k in range(N):
            if weights[b, k] and rng.random() < 0.85:
                masked[b, positions[b, k]] = 103
    segments = np.zeros((B, L), np.int32)
    segments[:, L // 2:] = 1
    segments *= mask
    return {"input_ids": tf.constant(masked), "input_mask": tf.constant(mask),
            "segment_ids": tf.constant(segments),
            "masked_lm_positions": tf.constant(positions),
            "masked_lm_ids": tf.constant(masked_ids),
            "masked_lm_weights": tf.constant(weights)}, ids


def _model(**kwargs):
    keras.utils.set_random_seed(1)
    generator = kwargs.pop("generator", generator_config(TINY, 0.5))
    return ElectraPretrainer(TINY, generator, **kwargs)


# ------------------------------------------------------------------------------ losses


def test_losses_match_hand_computation():
    logits = np.array([[[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]]], np.float32)  # [1, 2, 3]
    ids = np.array([[0, 2]], np.int32)
    weights = np.array([[1.0, 1.0]], np.float32)
    ce = [-math.log(math.exp(2) / (math.exp(2) + 1 + math.exp(-1))),
          -math.log(1 / (1 + math.e + 1))]
    assert float(masked_lm_loss(logits, ids, weights)) == pytest.approx(sum(ce) / 2, rel=1e-5)
    assert float(masked_lm_loss(logits, ids, np.array([[1.0, 0.0]], np.float32))) == \
        pytest.approx(ce[0], rel=1e-5)
    d_logits = np.array([[3.0, -1.0, 0.5]], np.float32)
    labels = np.array([[1, 0, 1]], np.int32)
    w = np.array([[1.0, 1.0, 0.0]], np.float32)
    expected = (math.log(1 + math.exp(-3.0)) + math.log(1 + math.exp(-1.0))) / 2
    assert float(replaced_token_loss(d_logits, labels, w)) == pytest.approx(expected, rel=1e-5)


def test_model_loss_is_mlm_plus_50_times_discriminator():
    batch, original = _batch()
    out = _model()(batch, step=5)
    logits = out["mlm_logits"].numpy().astype(np.float64)
    ids, weights = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    mlm = -(np.take_along_axis(log_softmax, ids[..., None], -1)[..., 0] * weights).sum() / (
        weights.sum())
    d = out["discriminator_logits"].numpy().astype(np.float64)
    y = out["discriminator_labels"].numpy()
    m = batch["input_mask"].numpy()
    disc = ((np.logaddexp(0, d) - y * d) * m).sum() / m.sum()
    assert float(out["generator_loss"]) == pytest.approx(mlm, rel=1e-4)
    assert float(out["discriminator_loss"]) == pytest.approx(disc, rel=1e-4)
    assert float(out["loss"]) == pytest.approx(mlm + 50 * disc, rel=1e-4)
    # The labels: 1 exactly where the sampled token differs from the original.
    fake = original.copy()
    sampled = out["sampled_ids"].numpy()
    positions = batch["masked_lm_positions"].numpy()
    for b, k in zip(*np.nonzero(weights)):
        fake[b, positions[b, k]] = sampled[b, k]
    np.testing.assert_array_equal(y, (fake != original).astype(np.int32))


def test_labels_are_zero_where_the_sample_equals_the_original():
    batch, original = _batch()
    model = _model()
    fake, labels, written, unmasked = model.corrupt(batch, batch["masked_lm_ids"])
    np.testing.assert_array_equal(unmasked.numpy(), original)
    np.testing.assert_array_equal(fake.numpy(), original)
    assert labels.numpy().sum() == 0
    assert written.numpy().sum() == batch["masked_lm_weights"].numpy().sum()
    # Half the slots get a different token: exactly those are labelled.
    sampled = batch["masked_lm_ids"].numpy().copy()
    sampled[:, ::2] = (sampled[:, ::2] + 1) % V
    _, labels, _, _ = model.corrupt(batch, tf.constant(sampled))
    weights = batch["masked_lm_weights"].numpy()
    assert labels.numpy().sum() == weights[:, ::2].sum()


def test_electric_labels_every_written_slot_noise_even_where_it_drew_the_original(
        monkeypatch):
    """Electric's noise-contrastive loss (official `electric_objective`): a slot the cloze
    model wrote is a noise sample whatever token it drew; the discriminator's logit is its
    energy plus log q(token) + log(p / (1 - p)), its loss averaged over real tokens."""
    batch, original = _batch()
    model = _model(objective="electric")
    monkeypatch.setattr(model, "sample", lambda logits, batch, step: batch["masked_lm_ids"])
    out = model(batch, step=0)
    _, _, written, _ = model.corrupt(batch, batch["masked_lm_ids"])
    y = out["discriminator_labels"].numpy()
    np.testing.assert_array_equal(y, written.numpy().astype(np.int32))
    assert y.sum() == batch["masked_lm_weights"].numpy().sum() > 0
    # The noise drew the original everywhere: the input is the original text.
    mask, segments = batch["input_mask"], batch["segment_ids"]
    energy = model.discriminator_predictions(model.discriminator(tf.constant(original), mask,
                                                                 segments)).numpy()
    cloze = model.cloze_logits(tf.constant(original), mask, segments).numpy().astype(np.float64)
    log_q = cloze - np.log(np.exp(cloze).sum(-1, keepdims=True))
    d = energy + np.take_along_axis(log_q, original[..., None], -1)[..., 0] + math.log(
        0.15 / 0.85)
    np.testing.assert_allclose(out["discriminator_logits"].numpy(), d, rtol=1e-4, atol=1e-5)
    m = mask.numpy()
    disc = ((np.logaddexp(0, d) - y * d) * m).sum() / m.sum()
    assert float(out["discriminator_loss"]) == pytest.approx(disc, rel=1e-4)


def test_electric_towers_share_the_discriminators_embeddings_or_have_their_own():
    """Untied (sharing 'none'), each tower has its own embedding block, as the official
    two-tower model builds them under generator_ltr/ and generator_rtl/."""
    tied, untied = _model(objective="electric"), _model(objective="electric", sharing="none")
    assert tied.generator_ltr.embeddings is tied.discriminator.embeddings
    assert tied.generator_rtl.embeddings is tied.discriminator.embeddings
    blocks = [untied.discriminator.embeddings, untied.generator_ltr.embeddings,
              untied.generator_rtl.embeddings]
    assert len({id(b) for b in blocks}) == 3
    tables = {v.path for v in untied.trainable_variables if v.path.endswith("word_embeddings")}
    assert tables == {"electra/embeddings/word_embeddings",
                      "generator_ltr/embeddings/word_embeddings",
                      "generator_rtl/embeddings/word_embeddings"}


def test_the_reported_generator_loss_is_the_one_that_trains_it():
    """loss = generator loss + 50 x discriminator loss, adversarial training too: its
    generator loss is REINFORCE's (it was the masked-LM loss, weight 0 there, flat at
    about ln V in the console while the total held another)."""
    batch, _ = _batch()
    for kwargs in ({}, dict(algorithm="adversarial")):
        model = _model(**kwargs)
        out = model(batch, step=0)
        assert float(out["loss"]) == pytest.approx(
            float(out["generator_loss"]) + 50.0 * float(out["discriminator_loss"]), rel=1e-5)
    mlm = masked_lm_loss(out["mlm_logits"], batch["masked_lm_ids"], batch["masked_lm_weights"])
    assert abs(float(out["generator_loss"]) - float(mlm)) > 0.1


def test_adversarial_reward_is_the_discriminators_loss_on_each_slot():
    """The paper's appendix F: R = -log P(replaced) where the sample differs from the
    original, -log P(original) where it equals it (not 0); baseline b = -log sigmoid(w.h)
    fitted by cross-entropy to exp(-R). The loss's value is -mean((R - b) log p(sample)) +
    mean(CE(exp(-R), w.h)); its gradient reaches only the generator's logits (through log p)
    and the baseline."""
    from electra_tf.modeling.pretrainer import _policy_gradient_loss
    model = _model(algorithm="adversarial")
    rng = np.random.default_rng(0)
    B, L, N, H = 2, 6, 3, model.generator_config.hidden_size
    logits = tf.constant(rng.normal(size=(B, N, 7)), tf.float32)
    sampled = tf.constant([[1, 2, 3], [4, 5, 6]], tf.int32)
    hidden = tf.constant(rng.normal(size=(B, N, H)), tf.float32)
    disc_logits = tf.constant(rng.normal(size=(B, L)) * 2, tf.float32)
    positions = np.array([[1, 2, 4], [3, 1, 0]], np.int32)
    weights = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    labels = np.zeros((B, L), np.int32)
    labels[0, 2] = labels[1, 3] = 1  # two slots replaced, the other three drew the original
    batch = {"masked_lm_positions": tf.constant(positions),
             "masked_lm_weights": tf.constant(weights)}
    loss = _policy_gradient_loss(model, logits, hidden, sampled, disc_logits,
                                 tf.constant(labels), batch, {"masked": weights.sum()})
    d = np.take_along_axis(disc_logits.numpy().astype(np.float64), positions, 1)
    y = np.take_along_axis(labels, positions, 1)
    reward = np.where(y == 1, np.logaddexp(0, -d), np.logaddexp(0, d))
    assert (reward[y == 0] > 0).all()
    z = model.reward_baseline(hidden).numpy()[..., 0].astype(np.float64)
    baseline = np.logaddexp(0, -z)
    lg = logits.numpy().astype(np.float64)
    log_p = np.take_along_axis(lg - np.log(np.exp(lg).sum(-1, keepdims=True)),
                               sampled.numpy()[..., None], -1)[..., 0]
    target = np.exp(-reward)
    baseline_ce = np.logaddexp(0, z) - target * z
    expected = (-((reward - baseline) * log_p * weights).sum()
                + (baseline_ce * weights).sum()) / weights.sum()
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    # Never sampling the original token, the policy is p renormalised without it: the score
    # function is that policy's (the full softmax's would bias the gradient).
    model = _model(algorithm="adversarial", disallow_correct=True)
    original = np.array([[0, 4, 5], [6, 0, 2]], np.int32)  # never the sampled ids
    batch["masked_lm_ids"] = tf.constant(original)
    loss = _policy_gradient_loss(model, logits, hidden, sampled, disc_logits,
                                 tf.constant(labels), batch, {"masked": weights.sum()})
    z = model.reward_baseline(hidden).numpy()[..., 0].astype(np.float64)
    baseline = np.logaddexp(0, -z)
    kept = np.where(np.arange(7) == original[..., None], -np.inf, lg)
    log_q = np.take_along_axis(kept - np.log(np.exp(kept).sum(-1, keepdims=True)),
                               sampled.numpy()[..., None], -1)[..., 0]
    expected = (-((reward - baseline) * log_q * weights).sum()
                + ((np.logaddexp(0, z) - target * z) * weights).sum()) / weights.sum()
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_scatter_leaves_padding_slots_alone():
    seq = tf.constant([[101, 5, 6, 102]])
    out, written = scatter_positions(seq, tf.constant([[2, 0]]), tf.constant([[9, 7]]),
                                     tf.constant([[1.0, 0.0]]))
    assert out.numpy().tolist() == [[101, 5, 9, 102]]
    assert written.numpy().tolist() == [[False, False, True, False]]


# ------------------------------------------------------------------------------ sampling


def test_sampling_follows_the_softmax():
    logits = tf.math.log(tf.constant([[0.5, 0.3, 0.15, 0.05]]))
    logits = tf.tile(logits, [20000, 1])
    samples = sample_from_logits(logits, 3, tf.range(20000, dtype=tf.int64)).numpy()
    freq = np.bincount(samples, minlength=4) / len(samples)
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.012)


def test_temperature_near_zero_is_argmax_and_high_temperature_flattens():
    logits = tf.random.stateless_normal([500, 50], [1, 2])
    index = tf.range(500, dtype=tf.int64)
    cold = sample_from_logits(logits, 7, index, temperature=1e-4)
    np.testing.assert_array_equal(cold.numpy(), tf.argmax(logits, -1).numpy())
    hot = sample_from_logits(logits, 7, index, temperature=100.0).numpy()
    assert np.mean(hot == tf.argmax(logits, -1).numpy()) < 0.1


def test_disallow_correct_never_samples_the_original():
    # The original token is by far the most likely, yet never drawn.
    ids = tf.constant(np.arange(300) % 40, tf.int32)
    logits = 8.0 * tf.one_hot(ids, 40)
    sampled = sample_from_logits(logits, 1, tf.range(300, dtype=tf.int64), disallow=ids).numpy()
    assert not np.any(sampled == ids.numpy())
    batch, _ = _batch()
    out = _model(disallow_correct=True)(batch, step=0)
    weights = batch["masked_lm_weights"].numpy() > 0
    assert not np.any((out["sampled_ids"].numpy() == batch["masked_lm_ids"].numpy())[weights])


def test_samples_are_the_exact_inverse_cdf_of_their_uniforms():
    # 400 rows of 1,000 logits (7 full blocks and a partial one): each sample is the token
    # whose interval of the float64 cumulative distribution holds the row's hashed uniform.
    from electra_tf.stateless import STREAM_GENERATOR_SAMPLES, hash_open_uniform
    logits = 2.0 * tf.random.stateless_normal([50, 8, 1000], [4, 5])
    index = tf.range(50, dtype=tf.int64) + 1000
    sampled = sample_from_logits(logits, 9, index).numpy().ravel()
    uniform = hash_open_uniform(9, STREAM_GENERATOR_SAMPLES, index, tf.range(8)[None, :])
    rows = logits.numpy().astype(np.float64).reshape(400, 1000)
    probs = np.exp(rows - rows.max(-1, keepdims=True))
    cdf = np.cumsum(probs / probs.sum(-1, keepdims=True), -1)
    expected = [np.searchsorted(c, u, side="right") for c, u in
                zip(cdf, uniform.numpy().astype(np.float64).ravel())]
    assert np.sum(sampled != expected) <= 1  # float32 rounding at an interval's edge
    assert np.all(np.abs(sampled - expected) <= 1)
    assert len(set(sampled)) > 300


def test_extreme_uniforms_draw_the_first_and_last_tokens_of_positive_probability(monkeypatch):
    # With u at its smallest and largest the search ends at the ends of the distribution:
    # never on a token of probability 0 (disallowed, underflowed, or the padding of the last
    # block), whatever float32 rounding does to the running sums.
    from electra_tf import stateless
    vocab = 3 * tensors.SAMPLE_BLOCK + 5
    logits = np.zeros([1, 2, vocab], np.float32)
    logits[..., :3] = logits[..., -4:] = -1e4  # probability 0 after the softmax
    disallow = tf.constant([[3, vocab - 5]])
    for value, expected in ((0, [4, 3]), (0xFFFFFFFF, [vocab - 5, vocab - 6])):
        def constant_bits(seed, stream, index, slot, v=value):
            shape = tf.broadcast_dynamic_shape(tf.shape(index[:, None]), tf.shape(slot))
            return tf.fill(shape, tf.constant(v, tf.uint32))
        monkeypatch.setattr(stateless, "hash_bits", constant_bits)
        uniform = stateless.hash_open_uniform(1, 4, tf.constant([0], tf.int64), tf.range(3)[None])
        assert 0.0 < float(tf.reduce_min(uniform)) and float(tf.reduce_max(uniform)) < 1.0
        sampled = sample_from_logits(logits, 1, tf.constant([0], tf.int64), disallow=disallow)
        assert sampled.numpy().tolist() == [expected], value
        one_block = sample_from_logits(logits[:, :, :6], 1, tf.constant([0], tf.int64),
                                       disallow=tf.constant([[3, 3]]))
        assert one_block.numpy().tolist() == [[4, 4] if value == 0 else [5, 5]], value


def test_sampling_compiles_with_xla_to_the_same_tokens():
    logits = tf.random.stateless_normal([6, 5, 300], [1, 2])
    index = tf.range(6, dtype=tf.int64)
    compiled = tf.function(lambda x: sample_from_logits(x, 3, index), jit_compile=True)
    np.testing.assert_array_equal(compiled(logits).numpy(),
                                  sample_from_logits(logits, 3, index).numpy())


def test_samples_are_keyed_by_seed_and_example_not_by_batch():
    logits = tf.random.stateless_normal([6, 5, 50], [1, 2])
    index = tf.constant([10, 11, 12, 13, 14, 15], tf.int64)
    a = sample_from_logits(logits, 3, index).numpy()
    np.testing.assert_array_equal(a, sample_from_logits(logits, 3, index).numpy())
    assert not np.array_equal(a, sample_from_logits(logits, 4, index).numpy())
    assert not np.array_equal(a, sample_from_logits(logits, 3, index + 6).numpy())
    # An example's sample is the same whatever batch (and position in it) it comes in.
    order = [4, 0, 5]
    part = sample_from_logits(tf.gather(logits, order), 3, tf.gather(index, order)).numpy()
    np.testing.assert_array_equal(part, a[order])
    # The model keys by the batch's example_index; without one, by the step.
    batch, _ = _batch()
    model = _model()
    by_step = [model(batch, step=s)["sampled_ids"].numpy() for s in (3, 3, 4)]
    np.testing.assert_array_equal(by_step[0], by_step[1])
    assert not np.array_equal(by_step[0], by_step[2])
    indexed = {**batch, "example_index": tf.range(4, dtype=tf.int64) + 12}
    np.testing.assert_array_equal(model(indexed, step=99)["sampled_ids"].numpy(), by_step[0])


def _split(batch, rows):
    return {k: tf.gather(v, rows) for k, v in batch.items()}


@pytest.mark.parametrize("options", [dict(), dict(objective="electric"),
                                     dict(objective="all_tokens_mlm"),
                                     dict(learn_loss_weights=True),
                                     dict(algorithm="adversarial")],
                         ids=["electra", "electric", "all_tokens_mlm", "learned_weights",
                              "adversarial"])
def test_pieces_with_global_normalizers_add_up_to_the_whole_batch(options):
    """What replicas and gradient accumulation rely on: split a batch, give each piece the
    whole batch's counts, and the pieces' losses and gradients sum to the whole batch's."""
    config = encoder_config("tiny", vocab_size=V, num_layers=1, dropout_rate=0.0,
                            attention_dropout_rate=0.0)
    keras.utils.set_random_seed(4)
    model = ElectraPretrainer(config, generator_config(config, 0.5), **options)
    batch, _ = _batch()
    batch["example_index"] = tf.range(4, dtype=tf.int64) + 100
    variables = model.trainable_variables

    def loss_and_grads(piece, normalizers):
        with tf.GradientTape() as tape:
            out = model(piece, step=0, training=True, normalizers=normalizers)
        return out, tape.gradient(out["loss"], variables)

    whole, whole_grads = loss_and_grads(batch, None)
    pieces = [_split(batch, rows) for rows in ([0, 3], [1, 2])]
    counts = [model.loss_normalizers(p) for p in pieces]
    total = call_counts({k: counts[0][k] + counts[1][k] for k in counts[0]})
    outs, grads = zip(*[loss_and_grads(p, total) for p in pieces])
    for key in ("loss", "generator_loss", "discriminator_loss"):
        assert float(outs[0][key] + outs[1][key]) == pytest.approx(float(whole[key]), rel=1e-5)
    dense = lambda g: tf.convert_to_tensor(g).numpy()  # noqa: E731 (embeddings: IndexedSlices)
    for g, a, b in zip(whole_grads, *grads):
        if g is not None:
            np.testing.assert_allclose(dense(a) + dense(b), dense(g), rtol=1e-4, atol=1e-6)


def test_dropout_masks_differ_across_replicas(mirrored_strategy):
    from electra_tf.modeling.layers import Dropout
    strategy = mirrored_strategy
    with strategy.scope():
        ours, theirs = Dropout(0.5, seed=1), keras.layers.Dropout(0.5, seed=1)

    @tf.function
    def masks():
        x = tf.ones((4, 64))
        return strategy.run(lambda: (ours(x, training=True), theirs(x, training=True)))

    ours_masks, theirs_masks = (
        [v.numpy() for v in strategy.experimental_local_results(m)] for m in masks())
    assert not np.array_equal(ours_masks[0], ours_masks[1])
    np.testing.assert_array_equal(theirs_masks[0], theirs_masks[1])  # Keras' own: the same
    assert abs(np.mean(ours_masks[0] > 0) - 0.5) < 0.1


@pytest.mark.parametrize("shape", [(64, 4, 128, 128), (3, 5, 7)])
def test_dropout_rate_scale_and_gradient(shape):
    """16-bit masks: the rate to within 1/65536, kept values scaled so the expectation is
    the input, the same mask for the same seed, and a gradient that is mask x scale."""
    from electra_tf.modeling.layers import dropout
    x = tf.random.stateless_normal(shape, seed=[0, 1])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout(x, 0.1, seed=tf.constant([3, 4]))
    grad = tape.gradient(y, x).numpy()
    y, x = y.numpy(), x.numpy()
    scale = 65536 / (65536 - 6554)
    kept = grad != 0
    np.testing.assert_allclose(grad[kept], scale, rtol=1e-6)
    np.testing.assert_allclose(y, x * kept * scale, rtol=1e-6)
    np.testing.assert_array_equal(y, dropout(x, 0.1, seed=tf.constant([3, 4])).numpy())
    assert not np.array_equal(y, dropout(x, 0.1, seed=tf.constant([3, 5])).numpy())
    if x.size > 1_000_000:  # 2.1M draws: the dropped fraction within 4 standard deviations
        dropped = 1 - kept.mean()
        assert abs(dropped - 6554 / 65536) < 4 * np.sqrt(0.09 / x.size)
        # both 16-bit halves of each draw are used: neighbours drop independently
        flat = kept.reshape(-1)
        both = np.mean(~flat[0::2] & ~flat[1::2])
        assert abs(both - 0.1 ** 2) < 0.002
    # The mask is the draws' 16-bit halves in the CPU's (little-endian) order against the
    # threshold: element 2i from draw i's low half, 2i + 1 from its high half.
    from electra_tf.modeling.layers import _AUTO_SELECT, dropout_key
    words = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[(x.size + 1) // 2], key=dropout_key(tf.constant([3, 4])),
        counter=tf.zeros([2], tf.uint64), alg=tf.constant(_AUTO_SELECT, tf.int32),
        dtype=tf.uint32).numpy()
    halves = np.stack([words & 0xFFFF, words >> 16], axis=1).reshape(-1)[:x.size]
    np.testing.assert_array_equal(kept.reshape(-1), halves >= 6554)
    np.testing.assert_array_equal(dropout(x, 1.0, seed=tf.constant([3, 4])).numpy(), 0 * x)


def test_dropout_keys_and_compiled_size():
    """The key is the seed's two halves side by side, moved by the replica id; the masks are
    the same compiled with XLA as not; and a compiled dropout is about 50 HLO instructions
    (tf.random.stateless_uniform's seed scrambling made it 303)."""
    import re

    from electra_tf.modeling.layers import dropout, dropout_key

    def key(seed, replica=None):
        return int(dropout_key(tf.constant(seed), replica).numpy().view(np.uint64)[0])

    assert key([3, 4]) == (3 << 32) | 4
    assert key([-1, 0]) == 0xFFFFFFFF << 32  # int32 seeds are taken as their 32 bits
    keys = {key([3, 4]), key([3, 5]), key([4, 4]), key([3, 4], 1), key([3, 4], 2),
            key([3, 5], 1)}
    assert len(keys) == 6
    assert key([3, 4], 0) == key([3, 4])

    x = tf.ones((8, 100))
    compiled = tf.function(lambda x, seed: dropout(x, 0.1, seed), jit_compile=True)
    np.testing.assert_array_equal(compiled(x, tf.constant([3, 4])).numpy(),
                                  dropout(x, 0.1, tf.constant([3, 4])).numpy())
    hlo = compiled.experimental_get_compiler_ir(x, tf.constant([3, 4]))(stage="hlo")
    instructions = [line for line in hlo.splitlines() if re.match(r"\s*(ROOT )?%\S+ = ", line)]
    assert len(instructions) < 80, len(instructions)


def test_gelu_is_exact_erf_gelu_with_its_derivative():
    """The written-out gradient: values and derivative against float64 formulas (scipy's
    erf; float32's 1 + erf(x) loses the far negative tail, as in Keras and transformers,
    hence the absolute tolerance), the same as Keras' exact GELU and its gradient; half
    precision dtypes are kept."""
    from scipy.special import erf

    from electra_tf.modeling.layers import gelu
    x64 = np.concatenate([np.linspace(-12, 12, 2001), [0.0, -1e-4, 1e-4, 40.0, -40.0]])
    x = tf.constant(x64, tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = gelu(x)
        reference = keras.activations.gelu(x, approximate=False)
    cdf = 0.5 * (1 + erf(x64 / np.sqrt(2)))
    pdf = np.exp(-0.5 * x64 ** 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(ours.numpy(), x64 * cdf, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(), cdf + x64 * pdf,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tape.gradient(ours, x).numpy(),
                               tape.gradient(reference, x).numpy(), rtol=1e-6, atol=1e-6)
    for dtype in (tf.bfloat16, tf.float16):
        low = tf.cast(x[900:1100], dtype)
        with tf.GradientTape() as tape:
            tape.watch(low)
            y = gelu(low)
        assert y.dtype == dtype and tape.gradient(y, low).dtype == dtype
        np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), (x64 * cdf)[900:1100],
                                   rtol=2e-2, atol=2e-3)


def test_sparse_cross_entropy_matches_tensorflows_op():
    """Value and gradient equal tf.nn.sparse_softmax_cross_entropy_with_logits', also where a
    label's probability underflows float32 (a gap of 200 nats) and for huge logits; a label
    outside the vocabulary is an error, as with the op on CPU."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (3, 5, 700)).astype(np.float32)
    labels = rng.integers(0, 700, (3, 5)).astype(np.int32)
    logits[0, 0, labels[0, 0]] = -200.0
    logits[1, 1] += 1e4
    logits, labels = tf.constant(logits), tf.constant(labels)
    upstream = tf.constant(rng.normal(size=(3, 5)).astype(np.float32))
    results = []
    for fn in (sparse_cross_entropy, lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=x)):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            losses = fn(logits, labels)
        results.append((losses.numpy(), tape.gradient(losses, logits,
                                                      output_gradients=upstream).numpy()))
    (ours, ours_grad), (reference, reference_grad) = results
    assert np.all(np.isfinite(ours)) and ours[0, 0] > 190
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(ours_grad, reference_grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in"):
        sparse_cross_entropy(logits, tf.fill([3, 5], 700))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_matches_keras_with_its_gradient(policy):
    """The written-out LayerNorm: output, dx, dgamma and dbeta equal Keras'
    LayerNormalization's (and, in float32, a float64 formula), the output in the policy's
    compute dtype; the function keeps its input's dtype."""
    from electra_tf.modeling.layers import LayerNormalization, layer_norm
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        layers = (LayerNormalization(epsilon=1e-12), keras.layers.LayerNormalization(
            epsilon=1e-12))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    dtype = policy.replace("mixed_", "")
    rng = np.random.default_rng(1)
    x = tf.cast(tf.constant(rng.normal(2.0, 3.0, (4, 6, 32)), tf.float32), dtype)
    upstream = tf.constant(rng.normal(size=(4, 6, 32)), tf.float32)
    gamma, beta = rng.normal(size=32).astype(np.float32), rng.normal(size=32).astype(np.float32)
    results = []
    for layer in layers:
        layer.build(x.shape)
        layer.set_weights([gamma, beta])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        assert y.dtype == dtype
        results.append([y] + tape.gradient(loss, [x, layer.gamma, layer.beta]))
    for ours, reference in zip(*results):
        np.testing.assert_allclose(tf.cast(ours, tf.float32).numpy(),
                                   tf.cast(reference, tf.float32).numpy(), rtol=1e-5, atol=1e-5)
    if policy == "float32":
        x64 = x.numpy().astype(np.float64)
        normalized = (x64 - x64.mean(-1, keepdims=True)) / x64.std(-1, keepdims=True)
        np.testing.assert_allclose(results[0][0].numpy(), normalized * gamma + beta,
                                   rtol=1e-5, atol=1e-5)
    assert layer_norm(tf.cast(x, tf.bfloat16), gamma, beta, 1e-12).dtype == tf.bfloat16


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_gelu_dense_is_dense_with_gelu(policy):
    """GeluDense equals Dense(activation=gelu) with the same weights, with its gradients;
    under mixed_bfloat16 to bfloat16's precision (its bias add and GELU run in float32)."""
    from electra_tf.modeling.layers import GeluDense, gelu
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        ours, reference = GeluDense(16), keras.layers.Dense(16, activation=gelu)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(3, 5, 8)), tf.float32)
    upstream = tf.constant(rng.normal(size=(3, 5, 16)), tf.float32)
    results = []
    for layer in (ours, reference):
        layer.build(x.shape)
        layer.set_weights([rng.normal(size=(8, 16)).astype(np.float32),
                           np.linspace(-1, 1, 16).astype(np.float32)] if layer is ours
                          else ours.get_weights())
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        assert y.dtype == policy.replace("mixed_", "")
        results.append([y] + tape.gradient(loss, [x, layer.kernel, layer.bias]))
    tolerance = 1e-6 if policy == "float32" else 3e-2
    for a, b in zip(*results):
        np.testing.assert_allclose(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy(),
                                   rtol=tolerance, atol=tolerance)


# ------------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("sharing", ["none", "embeddings"])
def test_no_gradient_from_discriminator_into_generator(sharing):
    batch, _ = _batch()
    model = _model(sharing=sharing)
    with tf.GradientTape() as tape:
        out = model(batch, step=1, training=True)
    generator_only = [v for v in model.generator.trainable_variables
                      if all(v is not w for w in model.discriminator.trainable_variables)]
    generator_only += model.generator_predictions.trainable_variables
    grads = tape.gradient(out["discriminator_loss"], generator_only)
    assert all(g is None for g in grads)
    # ... while the generator's own loss does reach them, and the discriminator's loss
    # reaches the discriminator.
    with tf.GradientTape(persistent=True) as tape:
        out = model(batch, step=1, training=True)
    assert all(g is not None for g in tape.gradient(out["generator_loss"], generator_only))
    head = model.discriminator_predictions.trainable_variables
    assert all(g is not None for g in tape.gradient(out["discriminator_loss"], head))
    shared = [v for v in model.discriminator.embeddings.trainable_variables]
    shared_grads = tape.gradient(out["generator_loss"], shared)
    assert all((g is not None) == (sharing == "embeddings") for g in shared_grads)


@pytest.mark.parametrize("options", [dict(), dict(sharing="none"), dict(objective="electric"),
                                     dict(objective="all_tokens_mlm")],
                         ids=["electra", "sharing_none", "electric", "all_tokens_mlm"])
def test_a_checkpoint_of_the_model_alone_holds_every_weight(tmp_path, options):
    model = _model(**options)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "model"))
    saved = [name for name in tf.train.load_checkpoint(path).get_variable_to_shape_map()
             if name.startswith("model/")]
    weights = {id(v) for v in model.weights if "seed_generator" not in v.path}
    assert len(saved) == len(weights)
    assert "model/discriminator/layer_0/attention/query/_kernel/.ATTRIBUTES/VARIABLE_VALUE" in saved
    # ... and restores into a fresh model of the same shape, every weight.
    other = _model(**options)
    for v in other.trainable_variables:
        v.assign(tf.zeros_like(v))
    tf.train.Checkpoint(model=other).read(path).assert_existing_objects_matched()
    for a, b in zip(model.trainable_variables, other.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_sharing_modes_share_what_they_say():
    none, emb = _model(sharing="none"), _model(sharing="embeddings")
    all_ = _model(sharing="all", generator=TINY)
    assert emb.generator.embeddings is emb.discriminator.embeddings
    assert none.generator.embeddings is not none.discriminator.embeddings
    # Untied, the generator's embeddings are as wide as its hidden size (official).
    assert none.generator.embeddings.word_embeddings.shape == (V, 64)
    assert all_.generator is all_.discriminator
    count = lambda m: sum(int(np.prod(v.shape)) for v in m.trainable_variables)  # noqa: E731
    head = count(all_.generator_predictions) + count(all_.discriminator_predictions)
    assert count(all_) == count(all_.discriminator) + head
    with pytest.raises(ValueError, match="sharing='all' makes generator and discriminator"):
        _model(sharing="all")


def test_initialisation_is_the_official_codes():
    """Kernels and embedding tables: truncated normal with stddev 0.02 (create_initializer),
    but for the layers the official code builds without an initializer, which get TF1's
    default Glorot uniform: embeddings_project (ELECTRA-Small's 128 -> 256 and the
    generator's 128 -> 64) and the discriminator's output layer."""
    keras.utils.set_random_seed(0)
    small = encoder_config("small", vocab_size=V)
    model = ElectraPretrainer(small, generator_config(small, 0.25))
    glorot = {v.path for v in model.weights if v.path.endswith("kernel")
              and ("embeddings_project" in v.path or "dense_prediction" in v.path)}
    assert sorted(glorot) == [
        "discriminator_predictions/dense_prediction/kernel", "electra/embeddings_project/kernel",
        "generator/embeddings_project/kernel"]
    for variable in model.weights:
        value = variable.numpy()
        if variable.path.endswith("bias") or "LayerNorm" in variable.path:
            continue
        if variable.path in glorot:
            limit = math.sqrt(6 / sum(value.shape))
            assert np.abs(value).max() <= limit, variable.path
            assert value.std() == pytest.approx(limit / math.sqrt(3), rel=0.15), variable.path
        else:  # truncated at 2 standard deviations: stddev 0.02 x 0.8796
            assert np.abs(value).max() <= 0.04, variable.path
            assert value.std() == pytest.approx(0.02 * 0.8796, rel=0.15), variable.path


def test_bad_options_fail_with_one_clear_line():
    with pytest.raises(ValueError, match=r"^objective='bert' is not one of electra, mlm"):
        _model(objective="bert")
    with pytest.raises(ValueError, match="two_stage.*fraction 1.0"):
        _model(algorithm="two_stage")
    with pytest.raises(ValueError, match="not a multiple of num_heads"):
        encoder_config("tiny", num_heads=3)
    with pytest.raises(ValueError, match=r"^temperature=0 must be positive"):
        _model(temperature=0)
    # A negative loss weight trained by gradient ascent on its loss.
    for name in ("generator_weight", "discriminator_weight", "adversarial_mle_weight"):
        with pytest.raises(ValueError, match=rf"^{name}=-1.0 must be at least 0 and finite \(a "
                                             r"loss weight; the paper's: generator 1, "
                                             r"discriminator 50\)$"):
            _model(**{name: -1.0})
    with pytest.raises(ValueError, match=r"generator_weight and discriminator_weight must be "
                                         r"positive"):
        _model(learn_loss_weights=True, generator_weight=0.0)
    with pytest.raises(ValueError, match=r"generator_weight and discriminator_weight must be "
                                         r"positive"):
        _model(learn_loss_weights=True, discriminator_weight=0.0)
    # Two-stage copies an untied generator's embeddings (as wide as its hidden size) into
    # the discriminator: with factorized embeddings (E != H) that fails at the switch.
    factorized = dataclasses.replace(TINY, embedding_size=TINY.hidden_size // 2)
    with pytest.raises(ValueError, match=r"two_stage' with sharing='none' copies the "
                                         r"generator's embeddings"):
        ElectraPretrainer(factorized, generator_config(factorized, 1.0), algorithm="two_stage",
                          sharing="none")


def test_an_untied_generator_is_described_as_built():
    """sharing='none': the generator embeds at its own hidden size (the official e = h_g),
    and its config (the FLOPs, model_info.json) says so."""
    small = encoder_config("small", vocab_size=V)
    model = ElectraPretrainer(small, generator_config(small, 0.25), sharing="none")
    assert model.generator_config.embedding_width == model.generator_config.hidden_size == 64
    assert model.generator.embeddings.word_embeddings.shape == (V, 64)
    tied = ElectraPretrainer(small, generator_config(small, 0.25))
    assert tied.generator_config.embedding_width == 128


# ------------------------------------------------------------------------------ learning


@pytest.fixture(scope="module")
def real_batches(austen_data):
    directory, _ = austen_data
    # The shuffles key on TensorFlow's global seed too: set it, or the batches depend on
    # which test last set it in this process.
    keras.utils.set_random_seed(3)
    dataset = pretraining_dataset(os.path.join(directory, "*.tfrecord"), 8, 128, UNCASED_VOCAB,
                                  seed=3)
    return [batch for batch in dataset.take(12)]


def _train(model, batches, steps, phase="joint", lr=2e-3):
    optimizer = keras.optimizers.Adam(lr)
    variables = model.phase_variables(phase)
    # Its slots now: made at the first call, they would have step_fn traced twice.
    optimizer.build(variables)

    @tf.function
    def step_fn(batch, step):
        with tf.GradientTape() as tape:
            out = model(batch, step=step, training=True, phase=phase)
        optimizer.apply_gradients(zip(tape.gradient(out["loss"], variables), variables))
        return {k: out[k] for k in ("loss", "generator_loss", "discriminator_loss")}

    # A tensor step: a Python int would retrace the function at every step.
    return [{k: float(v) for k, v in step_fn(batches[i % len(batches)],
                                             tf.constant(i)).items()}
            for i in range(steps)]


def _falls(history, key, factor=0.9):
    first = np.mean([h[key] for h in history[:3]])
    last = np.mean([h[key] for h in history[-3:]])
    return last < factor * first, (first, last)


REAL = encoder_config("tiny", num_layers=1)
VARIANTS = {
    "electra": dict(), "sharing_none": dict(sharing="none"),
    "sharing_all": dict(sharing="all", generator=REAL), "mlm": dict(objective="mlm"),
    "electra_15": dict(objective="electra_15"), "replace_mlm": dict(objective="replace_mlm"),
    "all_tokens_mlm": dict(objective="all_tokens_mlm"), "electric": dict(objective="electric"),
    "uniform_generator": dict(uniform_generator=True, generator=None),
    "adversarial": dict(algorithm="adversarial"),
    "learned_loss_weights": dict(learn_loss_weights=True),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_learns_on_real_text(name, real_batches):
    options = dict(VARIANTS[name])
    keras.utils.set_random_seed(2)
    generator = options.pop("generator", generator_config(REAL, 0.25))
    model = ElectraPretrainer(REAL, generator, **options)
    history = _train(model, real_batches, 16)
    key = {"adversarial": "discriminator_loss", "uniform_generator": "discriminator_loss",
           "mlm": "generator_loss"}.get(name, "loss")
    falls, values = _falls(history, key)
    assert falls, f"{name}: {key} went from {values[0]:.3f} to {values[1]:.3f}"
    assert all(np.isfinite(h["loss"]) for h in history)


@pytest.mark.parametrize("sharing", ["embeddings", "none"])
def test_two_stage_trains_generator_then_discriminator_from_it(real_batches, sharing):
    keras.utils.set_random_seed(2)
    model = ElectraPretrainer(REAL, generator_config(REAL, 1.0), algorithm="two_stage",
                              sharing=sharing)
    stage1 = _train(model, real_batches, 16, phase="generator")
    assert _falls(stage1, "generator_loss")[0]
    assert all(h["discriminator_loss"] == 0 for h in stage1)
    model.init_discriminator_from_generator()
    for d, g in zip(model.discriminator.weights, model.generator.weights):
        np.testing.assert_array_equal(np.asarray(d), np.asarray(g))
    generator = model.generator.weights + model.generator_predictions.weights
    frozen = [np.asarray(v).copy() for v in generator]
    stage2 = _train(model, real_batches, 16, phase="discriminator")
    assert _falls(stage2, "discriminator_loss")[0]
    shared = {id(v) for v in model.discriminator.weights}
    for before, v in zip(frozen, generator):
        if id(v) in shared:  # sharing 'embeddings': the discriminator's stage trains them
            assert not np.array_equal(before, np.asarray(v)), v.path
        else:  # everything else of the generator is frozen; with sharing 'none', all of it
            np.testing.assert_array_equal(before, np.asarray(v), err_msg=v.path)
    assert any(id(v) in shared for v in generator) == (sharing == "embeddings")


def test_metrics_report_every_tag(real_batches):
    model = _model()
    metrics = PretrainingMetrics()
    batch, _ = _batch()
    out = model(batch, step=0)
    metrics.update(out)
    result = metrics.result()
    assert set(result) == {"loss/total", "loss/generator", "loss/discriminator",
                           "generator/mlm_accuracy", "generator/sampled_accuracy",
                           "discriminator/accuracy", "discriminator/auc",
                           "discriminator/precision", "discriminator/recall",
                           "discriminator/replaced_fraction"}
    labels = out["discriminator_labels"].numpy()
    mask = batch["input_mask"].numpy()
    assert result["discriminator/replaced_fraction"] == pytest.approx(
        labels[mask > 0].mean(), rel=1e-5)
    accuracy = ((out["discriminator_logits"].numpy() > 0) == labels)[mask > 0].mean()
    assert result["discriminator/accuracy"] == pytest.approx(accuracy, rel=1e-5)
    assert result["loss/total"] == pytest.approx(float(out["loss"]), rel=1e-6)
    metrics.reset()
    # Only the losses and metrics a variant has (they were written as 0, or as the
    # constant ln V of a uniform generator's zero logits).
    mlm = _model(objective="mlm", generator=None)
    mlm_only = PretrainingMetrics()
    mlm_only.update(mlm(batch), parts=mlm.loss_parts())
    assert set(mlm_only.result()) == {"loss/total", "loss/generator", "generator/mlm_accuracy"}
    uniform = _model(uniform_generator=True, generator=None)
    assert uniform.loss_parts() == (False, True)
    alone = uniform(batch, step=0)  # the total is the discriminator's (it added ln V)
    assert float(alone["generator_loss"]) == 0.0
    assert float(alone["loss"]) == pytest.approx(50.0 * float(alone["discriminator_loss"]))
    no_generator = PretrainingMetrics()
    no_generator.update(uniform(batch, step=0), parts=uniform.loss_parts())
    assert set(no_generator.result()) == {"loss/total", "loss/discriminator",
                                          "discriminator/accuracy", "discriminator/auc",
                                          "discriminator/precision", "discriminator/recall",
                                          "discriminator/replaced_fraction"}
    assert model.loss_parts("generator") == (True, False)  # two-stage's generator stage
    # The AUC is left out until both replaced and original tokens are seen (ELECTRA 15%
    # early in a run: every masked slot replaced; Keras' AUC read 0).
    replaced = PretrainingMetrics()
    replaced.update_predictions({**out, "discriminator_labels": tf.ones_like(labels),
                                 "discriminator_weights": tf.ones_like(labels, tf.float32)})
    assert "discriminator/auc" not in replaced.result()
    assert replaced.result()["discriminator/replaced_fraction"] == 1.0
    replaced.update_predictions(out)
    assert 0.0 < replaced.result()["discriminator/auc"] < 1.0


@pytest.mark.parametrize("center", [0.0, -12.0], ids=["electra", "electric_nce"])
def test_discriminator_auc_matches_the_exact_area(center):
    """The AUC of ELECTRA's logits and of Electric's, whose noise term puts every
    probability far below Keras' first threshold (0.005): the area under the ROC curve as
    scikit-learn computes it exactly, where it read 0.5 for Electric at every step."""
    from sklearn.metrics import roc_auc_score
    rng = np.random.default_rng(0)
    labels = (rng.random((8, 64)) < 0.15).astype(np.float32)
    logits = (center + rng.normal(size=labels.shape) + 1.5 * labels).astype(np.float32)
    weights = (rng.random(labels.shape) < 0.9).astype(np.float32)
    metrics = PretrainingMetrics()
    metrics.update_predictions({
        "masked_lm_ids": tf.zeros([8, 2], tf.int32), "masked_lm_weights": tf.ones([8, 2]),
        "mlm_logits": tf.zeros([8, 2, 5]), "discriminator_logits": tf.constant(logits),
        "discriminator_labels": tf.constant(labels), "discriminator_weights": weights})
    exact = roc_auc_score(labels.ravel(), logits.ravel(), sample_weight=weights.ravel())
    assert exact > 0.8
    assert metrics.result()["discriminator/auc"] == pytest.approx(exact, abs=0.005)


def test_metrics_keep_adds_the_step_or_nothing():
    """keep=True gives exactly the unweighted update; keep=False adds nothing, even from a
    step whose losses, predictions and weights are not finite (a skipped step's)."""
    model = _model()
    batch, _ = _batch()
    out = model(batch, step=0)
    losses = (out["loss"], out["generator_loss"], out["discriminator_loss"])
    plain, kept = PretrainingMetrics(), PretrainingMetrics()
    plain.update_losses(*losses)
    plain.update_predictions(out)
    kept.update_losses(*losses, keep=tf.constant(True))
    kept.update_predictions(out, keep=tf.constant(True))
    poisoned = {k: (tf.fill(tf.shape(v), np.nan) if v.dtype.is_floating else v)
                for k, v in out.items()}
    nan = tf.constant(np.nan)
    kept.update_losses(nan, nan, nan, keep=tf.constant(False))
    kept.update_predictions(poisoned, keep=tf.constant(False))
    assert kept.result() == plain.result()
    assert all(np.isfinite(v) for v in kept.result().values())


# ------------------------------------------------------------------------------ gin, precision


@pytest.mark.parametrize("size", ["small", "base", "large"])
def test_size_gin_files_bind_the_paper_sizes(size):
    try:
        gin_files.parse([f"{size}.gin"], [])
        for key, value in SIZES[size].items():
            assert gin.query_parameter(f"pretrainer.{key}") == value, key
    finally:
        gin.clear_config()


@pytest.mark.parametrize("ablation", sorted(os.listdir(os.path.join(ROOT, "gin", "ablations"))))
def test_ablation_gin_files_build(ablation):
    try:
        gin_files.parse(["tiny.gin", f"ablations/{ablation}"], ["pretrainer.num_layers = 1"])
        model = factory.build_pretrainer(vocab_size=V)
        out = model(_batch()[0], step=0)
        assert np.isfinite(float(out["loss"]))
    finally:
        gin.clear_config()


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_matches_float32(policy):
    batch, _ = _batch()
    reference = _model(uniform_generator=True, generator=None)
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        mixed = _model(uniform_generator=True, generator=None)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    mixed.set_weights(reference.get_weights())
    out32, out16 = reference(batch, step=0), mixed(batch, step=0)
    assert mixed.discriminator.blocks[0].attention.query.kernel.dtype == "float32"
    assert mixed.discriminator.blocks[0].attention.query.compute_dtype == policy.split("_")[1]
    for key in ("loss", "discriminator_logits"):
        assert out16[key].dtype == tf.float32
    tolerance = 0.05 if policy == "mixed_bfloat16" else 0.01
    np.testing.assert_allclose(out16["discriminator_logits"].numpy(),
                               out32["discriminator_logits"].numpy(), atol=tolerance)
    assert float(out16["loss"]) == pytest.approx(float(out32["loss"]), rel=tolerance)


@pytest.mark.parametrize("options", [dict(), dict(learn_loss_weights=True)],
                         ids=["electra", "learned_weights"])
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_piece_of_a_large_global_batch_averages_exactly_under_mixed_precision(policy,
                                                                                 options):
    """A piece of a global batch of more than 65,504 real tokens (base.gin's 256 x 512 has
    about 131,000) divides its sums by the global counts as float32 does: float16 made the
    token count inf (the discriminator's loss 0, without a word), bfloat16 rounded it, and
    learned loss weights failed on the count's dtype."""
    batch, _ = _batch()
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        model = _model(**options)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    counts = model.loss_normalizers(batch)
    own = model(batch, step=0, normalizers=call_counts(counts))
    large = {k: v if k == "parts" else v * 1000 for k, v in counts.items()}
    assert float(large["tokens"]) > 65504
    share = model(batch, step=0, normalizers=call_counts(large))
    for key in ("generator_loss", "discriminator_loss"):
        assert 0 < float(own[key]) == pytest.approx(1000 * float(share[key]), rel=1e-6), key
    assert np.isfinite(float(share["loss"]))


def _function_names(concrete):
    return {f.signature.name for f in concrete.graph.as_graph_def().library.function}


def test_xla_gelu_equals_gelu_and_training_layers_use_it(monkeypatch):
    """The XLA-compiled GELU: values and gradient equal `gelu`'s; GeluDense takes it in
    training (its gradients equal inference's path) and not in inference, inside an
    XLA-compiled step or with ELECTRA_TF_XLA_ELEMENTWISE=0."""
    from electra_tf.modeling.layers import GeluDense, gelu, xla_gelu
    x = tf.constant(np.concatenate([np.linspace(-12, 12, 2001), [0.0, 40.0, -40.0]]),
                    tf.float32)
    upstream = tf.constant(np.random.default_rng(3).normal(size=x.shape), tf.float32)
    results = []
    for fn in (xla_gelu, gelu):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        results.append((y.numpy(), tape.gradient(y, x, output_gradients=upstream).numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6, atol=1e-6)

    layer = GeluDense(16)
    inputs = tf.constant(np.random.default_rng(4).normal(size=(3, 5, 8)), tf.float32)
    layer.build(inputs.shape)

    def step(training):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(layer(inputs, training=training) ** 2)
        return [loss] + tape.gradient(loss, [inputs, layer.kernel, layer.bias])

    graphs = {}
    for name, training, jit in [("train", True, False), ("infer", False, False),
                                ("train_xla", True, True)]:
        fn = tf.function(lambda training=training: step(training), jit_compile=jit)
        graphs[name] = (fn(), _function_names(fn.get_concrete_function()))
    for a, b in zip(graphs["train"][0], graphs["infer"][0]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
    assert any("_gelu_forward" in f for f in graphs["train"][1])
    assert any("_gelu_backward" in f for f in graphs["train"][1])
    assert not any("_gelu_" in f for f in graphs["infer"][1] | graphs["train_xla"][1])
    monkeypatch.setenv("ELECTRA_TF_XLA_ELEMENTWISE", "0")
    plain = tf.function(lambda: step(True)).get_concrete_function()
    assert not any("_gelu_" in f for f in _function_names(plain))
    from electra_tf.errors import UserInputError
    monkeypatch.setenv("ELECTRA_TF_XLA_ELEMENTWISE", "false")
    with pytest.raises(UserInputError, match=r"ELECTRA_TF_XLA_ELEMENTWISE='false' is neither "
                                             r"1 \(the default"):
        step(True)


def test_xla_dropout_mask_equals_tensorflows(monkeypatch):
    """Dropout's mask applied by the XLA-compiled loop gives the same outputs and gradients,
    bit for bit, as TensorFlow's separate kernels."""
    from electra_tf.modeling.layers import dropout
    x = tf.random.stateless_normal((6, 4, 33, 17), seed=[5, 6])
    upstream = tf.random.stateless_normal(x.shape, seed=[7, 8])

    @tf.function
    def masked():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = dropout(x, 0.1, seed=tf.constant([3, 4]))
        return y, tape.gradient(y, x, output_gradients=upstream)

    fused = [t.numpy() for t in masked()]
    assert any("_keep_scaled" in f for f in _function_names(masked.get_concrete_function()))
    monkeypatch.setenv("ELECTRA_TF_XLA_ELEMENTWISE", "0")
    masked = tf.function(masked.python_function)
    assert not any("_keep_scaled" in f for f in _function_names(masked.get_concrete_function()))
    for a, b in zip(fused, masked()):
        np.testing.assert_array_equal(a, b.numpy())
    assert 0.05 < np.mean(fused[0] == 0) < 0.15


# ------------------------------------------------------------------------------ options that
# cannot work together: one line naming them, before anything is built


def test_refusals_added_since_runs_recorded_them_let_those_runs_resume():
    """A run trained before with a setting of a part its model lacks (or adversarial with
    all weights shared) resumes: unbound, its resume was refused as another variant."""
    from electra_tf.errors import UserInputError
    shape = {"hidden_size": 128, "num_layers": 1, "num_heads": 2, "intermediate_size": 512,
             "generator_hidden_fraction": 1.0}
    for options in (dict(objective="mlm", discriminator_weight=10.0),
                    dict(uniform_generator=True, generator_weight=2.0),
                    dict(algorithm="adversarial", sharing="all")):
        model = factory.build_pretrainer(**shape, **options)
        with pytest.raises(UserInputError):
            model.check_training_options()
        model.check_training_options(new_run=False)


@pytest.mark.parametrize("options, message", [
    (dict(objective="mlm", uniform_generator=True), r"^objective='mlm' replaces no tokens: "
     r"uniform_generator applies .*; unbind it(\n|$)"),
    (dict(algorithm="adversarial", uniform_generator=True), r"^pretrainer.algorithm=adversarial "
     r"trains a generator; uniform_generator has none: use one or the other(\n|$)"),
    (dict(objective="electric", uniform_generator=True), r"^objective='electric' scores "
     r"tokens with its two-tower cloze generator; uniform_generator has none: use one or the "
     r"other(\n|$)"),
    # Sharing without a generator: trained as the default, recorded as another variant.
    (dict(objective="mlm", sharing="none"), r"^sharing='none' sets what a generator shares "
     r"with the discriminator; objective='mlm' trains one network: unbind it \(the default, "
     r"'embeddings', is the only one these take\)(\n|$)"),
    (dict(uniform_generator=True, sharing="all"), r"^sharing='all' sets what a generator "
     r"shares with the discriminator; uniform_generator has none: unbind it"),
    (dict(objective="mlm", algorithm="two_stage"),
     r"^pretrainer.algorithm=two_stage is defined for objective='electra' only \(the paper's "
     r"training algorithms\), not 'mlm': train one or the other \(ablations/two_stage.gin or "
     r"ablations/mlm.gin\)(\n|$)"),
    (dict(algorithm="adversarial", sharing="all"), r"^algorithm='adversarial' trains the "
     r"generator to fool the discriminator; sharing='all' makes them one network, .*: use "
     r"sharing 'embeddings' or 'none' \(drop ablations/sharing_all.gin\)(\n|$)"),
    # Settings of a part the model lacks: they changed nothing (and were recorded).
    (dict(objective="mlm", temperature=0.5, discriminator_weight=10.0),
     r"^pretrainer.temperature=0.5, pretrainer.discriminator_weight=10.0 change nothing: "
     r"objective='mlm' samples no replacements and trains no discriminator; unbind "
     r"them(\n|$)"),
    (dict(uniform_generator=True, generator_weight=2.0),
     r"^pretrainer.generator_weight=2.0 changes nothing: uniform_generator samples from no "
     r"softmax and has no generator loss; unbind it(\n|$)"),
    (dict(objective="electric", temperature=2.0), r"^Electric's noise distribution is the "
     r"generator's softmax.*temperature must be 1.0 and disallow_correct False(\n|$)"),
    (dict(objective="electric", disallow_correct=True), r"disallow_correct False(\n|$)"),
    (dict(objective="mlm", learn_loss_weights=True),
     r"^learn_loss_weights balances .*: objective='mlm' has one loss; unbind it(\n|$)"),
    (dict(algorithm="adversarial", learn_loss_weights=True),
     r"policy-gradient loss can be negative, .* without bound; unbind it(\n|$)"),
    (dict(uniform_generator=True, learn_loss_weights=True),  # a weight on no loss
     r"^learn_loss_weights balances .*: uniform_generator has no generator loss; unbind "
     r"it(\n|$)"),
    (dict(algorithm="two_stage", learn_loss_weights=True),  # it would never be trained
     r"^learn_loss_weights balances .*: algorithm='two_stage' trains one of them at a time; "
     r"unbind it(\n|$)"),
    (dict(adversarial_mle_weight=0.5), r"^adversarial_mle_weight=0.5 applies to "
     r"algorithm='adversarial' \(this run's: 'joint'\); unbind it(\n|$)"),
    (dict(algorithm="two_stage", num_heads=1),  # generator 1/1: heads hidden // 64 = 2
     r"^pretrainer.algorithm='two_stage' .* \(the generator's num_heads 2 against 1; its heads are "
     r"its hidden size / 64\); .* must be too \(intermediate_size=512, num_heads=2\)(\n|$)"),
    (dict(algorithm="two_stage", hidden_size=200, num_heads=2, generator_hidden_fraction=0.25),
     r"^pretrainer.algorithm='two_stage' .* must be too, which 200 wide cannot be: a multiple "
     r"of 64 \(or a width under 128\)(\n|$)"),
])
def test_options_that_cannot_work_together_are_refused(options, message):
    """Those the networks cannot be built with, when built; those that only train wrongly,
    before pre-training (check_training_options): a model trained so before the check
    still loads for export and fine-tuning."""
    from electra_tf.errors import UserInputError
    shape = {"hidden_size": 128, "num_layers": 1, "num_heads": 2, "intermediate_size": 512,
             "generator_hidden_fraction": 1.0}
    with pytest.raises(UserInputError, match=message):
        factory.build_pretrainer(**{**shape, **options}).check_training_options()
    if "uniform_generator" in options and options.get("objective") == "mlm":
        assert factory.build_pretrainer(**{**shape, **options}).generator is not None


@pytest.mark.parametrize("binding, message", [
    ("uniform_generator='False'", r"uniform_generator='False' must be True or False "
                                  r"\(no quotes\)(\n|$)"),
    ("num_layers=2.0", r"num_layers=2.0 must be an integer(\n|$)"),
    ("num_layers=True", r"num_layers=True must be an integer(\n|$)"),
    ("dropout_rate='0.1'", r"dropout_rate='0.1' must be a number \(no quotes\)(\n|$)"),
    ("embedding_size='64'", r"embedding_size='64' must be an integer or None \(no quotes\)(\n|$)"),
    ("num_heads=0", r"^pretrainer.num_heads=0 must be at least 1(\n|$)"),
    # (tracebacks from Keras, or a run stopped at step 1 blaming the learning rate)
    ("embedding_size=0", r"^pretrainer.embedding_size=0 must be at least 1 \(or None: the "
                         r"hidden size\)"),
    ("dropout_rate=1.0", r"^pretrainer.dropout_rate=1.0 must be at least 0 and below 1 \(the "
                         r"official 0.1\)(\n|$)"),
    ("attention_dropout_rate=-0.1", r"^pretrainer.attention_dropout_rate=-0.1 must be at least "
                                    r"0 and "),
    ("layer_norm_epsilon=-1.0", r"^pretrainer.layer_norm_epsilon=-1.0 must be above 0 \(the "
                                r"official 1e-12\)(\n|$)"),
    ("generator_hidden_fraction=0.003", r"^pretrainer.generator_hidden_fraction=0.003 gives a "
                                        r"generator 0 wide \(round\(128 x 0.003\)\); choose a "
                                        r"fraction of at least 1/128(\n|$)"),
])
def test_a_binding_of_the_wrong_type_is_refused_naming_it(binding, message):
    from electra_tf.errors import UserInputError
    gin_files.parse(["tiny.gin"], [f"pretrainer.{binding}"])
    try:
        with pytest.raises(UserInputError, match=message):
            factory.build_pretrainer()
    finally:
        gin.clear_config()


def test_a_config_with_values_no_model_takes_is_refused_naming_them():
    """(not through gin, which refuses None and strings itself: an imported config's)"""
    from electra_tf.errors import UserInputError
    for field, value, message in (
            ("dropout_rate", float("nan"), "dropout_rate=nan must be at least 0 and below 1"),
            ("attention_dropout_rate", None, "attention_dropout_rate=None must be a number"),
            ("initializer_range", 0.0, "initializer_range=0.0 must be above 0 (the official "
                                       "0.02)"),
            ("layer_norm_epsilon", 0.0, "layer_norm_epsilon=0.0 must be above 0")):
        with pytest.raises(UserInputError) as error:
            encoder_config("tiny", **{field: value})
        assert str(error.value).startswith(message), str(error.value)
    assert encoder_config("tiny", dropout_rate=np.float32(0.0)).dropout_rate == 0.0


def test_two_stage_names_the_discriminator_shape_a_generator_cannot_take():
    """Two-stage copies the generator into the discriminator, whose FFN and heads must then
    be a generator's (4x, width / 64): the refusal asked for fraction 1.0 where it was."""
    from electra_tf.errors import UserInputError
    custom = encoder_config("tiny", intermediate_size=500)
    with pytest.raises(UserInputError, match=r"\(the generator's intermediate_size 512 against "
                       r"500; .*; a generator's FFN is 4x its hidden size and its heads its "
                       r"hidden size // 64 \(at least 1\), so the discriminator's must be too "
                       r"\(intermediate_size=512, num_heads=2\)$"):
        ElectraPretrainer(custom, generator_config(custom, 1.0), algorithm="two_stage")


def test_a_generator_fraction_whose_heads_do_not_divide_it_says_so():
    from electra_tf.errors import UserInputError
    with pytest.raises(UserInputError, match=r"^generator_hidden_fraction=0.4 gives a generator "
                       r"307 wide \(round\(768 x 0.4\)\) with 4 heads \(its width // 64\)"):
        generator_config(encoder_config("base"), 0.4)
    assert generator_config(encoder_config("base"), 1 / 3).hidden_size == 256
