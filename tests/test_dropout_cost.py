"""benchmarks/dropout_cost.py's hashed candidate is a correct dropout (else its timings say
nothing): its mask is a NumPy hash of the key and each element's index, kept values are
scaled, the gradient is the same mask, XLA gives the same mask, and the rate and
independence hold on 4.2M elements."""

import os
import sys

import numpy as np
import tensorflow as tf

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dropout_cost  # noqa: E402


def _fmix32(h):
    h = np.asarray(h, np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _kept(seed, shape, rate):
    step = np.uint32(0x9E3779B9)
    key = _fmix32(np.uint32(seed[0]) * step ^ np.uint32(seed[1]))
    bits = _fmix32(_fmix32(np.arange(int(np.prod(shape)), dtype=np.uint32) ^ key) + key)
    return (bits >= np.uint32(round(rate * 2 ** 32))).reshape(shape)


def test_the_dropout_layer_calls_the_swapped_function(monkeypatch):
    """The benchmark swaps `layers.dropout`; the model's Dropout layers must call it."""
    from electra_tf.modeling import layers
    calls = []

    def spy(inputs, rate, seed, replica_id=None):
        calls.append(rate)
        return dropout_cost.hashed_dropout(inputs, rate, seed, replica_id)

    monkeypatch.setattr(layers, "dropout", spy)
    x = tf.ones((4, 64))
    y = layers.Dropout(0.25, seed=1)(x, training=True).numpy()
    assert calls == [0.25]
    assert 0 < np.mean(y == 0) < 0.6


def test_hashed_dropout_mask_scale_gradient_and_statistics():
    shape = (64, 4, 128, 128)
    x = tf.random.stateless_normal(shape, seed=[0, 1])

    def run(seed, jit=False):
        @tf.function(jit_compile=jit)
        def masked(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = dropout_cost.hashed_dropout(x, 0.1, tf.constant(seed))
            return y, tape.gradient(y, x)
        return [t.numpy() for t in masked(x)]

    y, grad = run([3, 4])
    kept = _kept([3, 4], shape, 0.1)
    scale = 2 ** 32 / (2 ** 32 - 429496730)
    np.testing.assert_array_equal(grad != 0, kept)
    np.testing.assert_allclose(grad[kept], scale, rtol=1e-6)
    np.testing.assert_allclose(y, x.numpy() * kept * scale, rtol=1e-6)
    for a, b in zip(run([3, 4], jit=True), (y, grad)):
        np.testing.assert_array_equal(a, b)
    following = run([3, 5])[1] != 0  # the layer's next call

    def close(frequency, p):  # within 4 standard deviations over 4.2M elements
        assert abs(frequency - p) < 4 * np.sqrt(p * (1 - p) / kept.size), (frequency, p)

    dropped, dropped_next = ~kept.reshape(-1), ~following.reshape(-1)
    close(dropped.mean(), 0.1)
    close(np.mean(dropped[:-1] & dropped[1:]), 0.01)
    close(np.mean(dropped[:-128] & dropped[128:]), 0.01)
    close(np.mean(dropped & dropped_next), 0.01)
    keys = {int(dropout_cost.hashed_key(tf.constant(s), r))
            for s, r in [([3, 4], None), ([3, 5], None), ([4, 4], None), ([3, 4], 1)]}
    assert len(keys) == 4


def test_unknown_variant_is_one_line_and_exit_1():
    import subprocess
    process = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "dropout_cost.py"),
         "--variants=ours,philox", "--results_name=never_written"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert process.returncode == 1
    assert process.stderr.strip().splitlines()[-1] == (
        "--variants=ours,philox: unknown philox; choose from ours, hashed, tf_stateless, "
        "none, ours included")
    assert not os.path.exists(os.path.join(ROOT, "benchmarks", "results", "never_written.md"))
