"""Optimizers and schedule: the official formulas by hand, AdamW and LAMB against numpy,
layer-wise LR decay on a real encoder, no double all-reduce under MirroredStrategy, gin."""

import re

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.modeling.config import encoder_config
from electra_tf.modeling.encoder import Encoder
from electra_tf.modeling.factory import build_pretrainer
from electra_tf.training.optimization import (AdamWeightDecay, Lamb, LinearWarmupLinearDecay,
                                              create_optimizer, layerwise_lr_multipliers)

# ------------------------------------------------------------------------------ schedule

BASE, T, W = 1e-3, 100, 10


@pytest.mark.parametrize("warmup, expected", [
    # official: base * (1 - min(step, T) / T) * min(1, step / W)
    ("multiply", {0: 0.0, 5: BASE * 0.95 * 0.5, 10: BASE * 0.9, 55: BASE * 0.45,
                  100: 0.0, 150: 0.0}),
    # warm up to base over W, then base -> 0 over the T - W = 90 remaining steps
    ("then_decay", {0: 0.0, 5: BASE * 0.5, 10: BASE, 55: BASE * (1 - 45 / 90),
                    100: 0.0, 150: 0.0}),
])
def test_schedule_matches_formula(warmup, expected):
    schedule = LinearWarmupLinearDecay(BASE, T, W, warmup=warmup)
    traced = tf.function(lambda step: schedule(step))
    for step, lr in expected.items():
        assert float(schedule(step)) == pytest.approx(lr, rel=1e-6, abs=1e-12)
        for dtype in (tf.int32, tf.int64):
            value = traced(tf.constant(step, dtype))
            assert value.dtype == tf.float32
            assert float(value) == pytest.approx(lr, rel=1e-6, abs=1e-12)


def test_schedule_decay_power_is_the_official_polynomial_decay():
    """lr_decay_power: base x (1 - min(step, T) / T)^p x min(1, step / W), as the official
    tf.train.polynomial_decay(..., power=p) times the warmup (then_decay: over T - W)."""
    schedule = LinearWarmupLinearDecay(BASE, T, W, decay_power=2.0)
    for step, lr in {0: 0.0, 5: BASE * 0.95 ** 2 * 0.5, 10: BASE * 0.9 ** 2,
                     55: BASE * 0.45 ** 2, 100: 0.0, 150: 0.0}.items():
        assert float(schedule(step)) == pytest.approx(lr, rel=1e-6, abs=1e-12)
    then = LinearWarmupLinearDecay(BASE, T, W, "then_decay", decay_power=0.5)
    assert float(then(55)) == pytest.approx(BASE * 0.5 ** 0.5, rel=1e-6)
    optimizer = create_optimizer(learning_rate=BASE, num_train_steps=T, warmup_steps=W,
                                 decay_power=3.0)
    assert float(optimizer.learning_rate) == 0.0  # step 0: the warmup's start
    assert optimizer._learning_rate.get_config()["decay_power"] == 3.0  # noqa: SLF001
    restarted = create_optimizer(learning_rate=BASE, num_train_steps=T, warmup_steps=W,
                                 decay_power=3.0, restart_at=40)._learning_rate  # noqa: SLF001
    assert float(restarted(20)) == pytest.approx(BASE * 0.5 ** 3, rel=1e-6)
    assert float(restarted(40 + 30)) == pytest.approx(BASE * 0.5 ** 3, rel=1e-6)


def test_schedule_without_warmup_and_config_round_trip():
    schedule = LinearWarmupLinearDecay(BASE, T, 0)
    assert [float(schedule(s)) for s in (0, 50, 100)] == pytest.approx([BASE, BASE / 2, 0])
    assert float(LinearWarmupLinearDecay(BASE, T, T, "then_decay")(T // 2)) == \
        pytest.approx(BASE / 2)
    for warmup in ("multiply", "then_decay"):
        original = LinearWarmupLinearDecay(BASE, T, W, warmup)
        copy = LinearWarmupLinearDecay.from_config(original.get_config())
        assert copy.get_config() == original.get_config() == {
            "learning_rate": BASE, "num_train_steps": T, "warmup_steps": W, "warmup": warmup,
            "decay_power": 1.0}
        restored = keras.optimizers.schedules.deserialize(
            keras.optimizers.schedules.serialize(original))
        assert float(restored(7)) == float(original(7))


@pytest.mark.parametrize("args, message", [
    ((BASE, 0, 0), "num_train_steps=0 must be positive"),
    ((BASE, -5, 0), "num_train_steps=-5 must be positive"),
    ((BASE, T, -1), "warmup_steps=-1 is negative"),
    ((BASE, T, T + 1, "then_decay"), "warmup_steps=101 exceeds num_train_steps=100"),
    ((BASE, T, W, "cosine"), "warmup='cosine' is not a known schedule; use one of multiply"),
    ((-1.0, T, W), "learning_rate=-1.0 is negative"),
    ((BASE, T, W, "multiply", -1), "decay_power=-1 must be a number >= 0"),
    ((BASE, T, W, "multiply", "2"), "decay_power='2' must be a number >= 0"),
])
def test_schedule_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        LinearWarmupLinearDecay(*args)


def test_two_stage_schedule_restarts_at_the_switch():
    """Two-stage training: the generator stage's schedule reaches 0 at the switch, then the
    discriminator stage warms up and decays again over the remaining steps."""
    optimizer = create_optimizer(learning_rate=1.0, num_train_steps=100, warmup_steps=10,
                                 restart_at=40)
    schedule = optimizer._learning_rate  # noqa: SLF001 (the schedule the optimizer uses)
    expected = {0: 0.0, 5: 0.5 * (1 - 5 / 40), 39: 1 - 39 / 40, 40: 0.0,
                45: 0.5 * (1 - 5 / 60), 70: 1 - 30 / 60, 100: 0.0}
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, abs=1e-6), step
    config = keras.optimizers.schedules.serialize(schedule)
    again = keras.optimizers.schedules.deserialize(config)
    assert [float(again(s)) for s in expected] == [float(schedule(s)) for s in expected]
    with pytest.raises(ValueError, match="restart_at=100 must be inside the run"):
        create_optimizer(num_train_steps=100, restart_at=100)


def test_multiply_allows_warmup_longer_than_training():
    # The official code does not forbid it: the warmup factor just never reaches 1.
    schedule = LinearWarmupLinearDecay(BASE, 10, 20)
    assert float(schedule(5)) == pytest.approx(BASE * 0.5 * 0.25)


def test_a_warmup_that_keeps_the_rate_under_half_its_peak_gets_a_note():
    """The peak of warmup x decay is at the warmup's end, or at T / (1 + p) where the rise
    meets the decay; under half the base (a warmup of over half the run: a size preset's
    10,000 warmup steps in a short continued pre-training) a note says so, once."""
    for steps, warmup, power, peak in ((100, 10, 1.0, (10, BASE * 0.9)),
                                      (100, 60, 1.0, (50, BASE * 50 / 60 * 0.5)),
                                      (90, 60, 2.0, (30, BASE * 0.5 * (2 / 3) ** 2))):
        step, value = LinearWarmupLinearDecay(BASE, steps, warmup, decay_power=power).peak()
        assert (step, value) == (peak[0], pytest.approx(peak[1]))
        values = [float(LinearWarmupLinearDecay(BASE, steps, warmup, decay_power=power)(s))
                  for s in range(steps + 1)]
        assert max(values) == pytest.approx(value)  # no step higher
    notes = []
    create_optimizer(learning_rate=5e-4, num_train_steps=20, warmup_steps=10_000,
                     log=notes.append)
    create_optimizer(learning_rate=5e-4, num_train_steps=1000, warmup_steps=500,
                     log=notes.append)  # 250 steps: 50%, no note
    create_optimizer(learning_rate=5e-4, num_train_steps=1000, warmup_steps=900, restart_at=500,
                     log=notes.append)  # each stage's warmup fills it
    assert notes == [
        "note: the learning rate peaks at 2.5e-07, 0.05% of LEARNING_RATE=0.0005, at step 10: "
        "the schedule multiplies the warmup (WARMUP_STEPS=10000) by the decay over 20 steps; "
        "make the warmup a small share of the run (the paper's: 10,000 of 1,000,000 steps)",
        "note: the learning rate peaks at 0.000125, 25% of LEARNING_RATE=0.0005, at step 250: "
        "the schedule multiplies the warmup (WARMUP_STEPS=900) by the decay over 500 steps; "
        "make the warmup a small share of the run (the paper's: 10,000 of 1,000,000 steps)"]


# ------------------------------------------------------------------------------ optimizers

# path, shape; whether the official rule decays it and whether LAMB adapts it, by hand.
VARIABLES = [
    ("encoder/dense/kernel", (3, 4), True),
    ("encoder/dense/bias", (4,), False),
    ("encoder/LayerNorm/gamma", (4,), False),
    ("head/zero_kernel", (2, 2), True),   # starts at 0: LAMB's ||param|| = 0
    ("head/dead_kernel", (2, 3), True),   # never gets a gradient: ||update|| = 0 without decay
]
STEPS = 5


def _variables():
    rng = np.random.default_rng(0)
    variables = []
    for path, shape, _ in VARIABLES:
        *scopes, name = path.split("/")
        value = np.zeros(shape) if "zero" in name else rng.normal(size=shape)
        with keras.name_scope(scopes[0]):
            if len(scopes) > 1:
                with keras.name_scope(scopes[1]):
                    v = keras.Variable(value.astype(np.float32), name=name)
            else:
                v = keras.Variable(value.astype(np.float32), name=name)
        assert v.path == path
        variables.append(v)
    return variables


def _gradients(step):
    rng = np.random.default_rng(100 + step)
    return [np.zeros(shape, np.float32) if "dead" in path
            else rng.normal(size=shape).astype(np.float32) for path, shape, _ in VARIABLES]


def _reference(lrs, grads=_gradients, lamb=False, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               weight_decay_rate=0.01, bias_correction=False, multipliers=None):
    """The official update in float64 numpy, written out independently of the module."""
    params = [v.numpy().astype(np.float64) for v in _variables()]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step, lr in enumerate(lrs):
        t = step + 1
        for i, (g, (path, _, decays)) in enumerate(zip(grads(step), VARIABLES)):
            g = g.astype(np.float64)
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            m_hat, v_hat = m[i], v[i]
            if bias_correction:
                m_hat, v_hat = m[i] / (1 - beta_1 ** t), v[i] / (1 - beta_2 ** t)
            update = m_hat / (np.sqrt(v_hat) + epsilon)
            if decays:
                update = update + weight_decay_rate * params[i]
            if lamb and decays:  # LAMB adapts exactly the decayed variables by default
                w_norm, u_norm = np.linalg.norm(params[i]), np.linalg.norm(update)
                update = update * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
            params[i] = params[i] - lr * (multipliers or {}).get(path, 1.0) * update
    return params


def _run(optimizer, grads=_gradients, steps=STEPS):
    variables = _variables()
    for step in range(steps):
        optimizer.apply([tf.constant(g) for g in grads(step)], variables)
    return [v.numpy() for v in variables]


def _schedule_lrs(base=1e-2, total=10, warmup=2):
    # the official formula at iterations 0..STEPS-1 (the schedule sees the step count so far)
    return [base * (1 - min(s, total) / total) * min(1.0, s / warmup) for s in range(STEPS)]


MULTIPLIERS = {"encoder/dense/kernel": 0.5, "head/zero_kernel": 2.0}


@pytest.mark.parametrize("cls", [AdamWeightDecay, Lamb])
@pytest.mark.parametrize("bias_correction", [False, True])
@pytest.mark.parametrize("use_schedule", [False, True])
@pytest.mark.parametrize("multipliers", [None, MULTIPLIERS])
def test_optimizers_match_numpy(cls, bias_correction, use_schedule, multipliers):
    lr = LinearWarmupLinearDecay(1e-2, 10, 2) if use_schedule else 1e-2
    lrs = _schedule_lrs() if use_schedule else [1e-2] * STEPS
    optimizer = cls(lr, bias_correction=bias_correction, learning_rate_multipliers=multipliers)
    got = _run(optimizer)
    expected = _reference(lrs, lamb=cls is Lamb, bias_correction=bias_correction,
                          multipliers=multipliers)
    for (path, _, _), g, e in zip(VARIABLES, got, expected):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-7, err_msg=path)
    assert int(optimizer.iterations) == STEPS
    # The moments carry the official checkpoint names.
    names = {v.path.split("/")[-1] for v in optimizer.variables}
    assert {"encoder_dense_kernel_adam_m", "encoder_dense_kernel_adam_v"} <= names


def _nan_gradients(step):
    return [np.full(shape, np.nan, np.float32) for _, shape, _ in VARIABLES]


@pytest.mark.parametrize("cls", [AdamWeightDecay, Lamb])
@pytest.mark.parametrize("compiled", [None, "graph", "xla"])
def test_apply_where_false_leaves_every_variable_moment_and_the_count(cls, compiled):
    """apply_gradients(where=) is the trainer's skip without a conditional: steps with
    where=False (here with NaN gradients) between the steps with where=True change nothing,
    so the variables, moments and `iterations` equal those of the applied steps alone."""
    schedule = LinearWarmupLinearDecay(1e-2, 10, 2)  # the learning rate follows `iterations`

    def applier(optimizer, variables):
        optimizer.build(variables)

        def apply(grads, where):
            optimizer.apply_gradients(zip(grads, variables), where=where)

        if compiled:  # XLA's update is the written-out one, the others the fused kernel
            apply = tf.function(apply, jit_compile=compiled == "xla")
        return apply

    plain, plain_variables = cls(schedule), _variables()
    plain_apply = applier(plain, plain_variables)
    for step in range(STEPS):
        plain_apply([tf.constant(g) for g in _gradients(step)], tf.constant(True))
    expected = [v.numpy() for v in plain_variables]

    variables = _variables()
    optimizer = cls(schedule)
    apply = applier(optimizer, variables)
    for step in range(STEPS):
        apply([tf.constant(g) for g in _nan_gradients(step)], tf.constant(False))
        apply([tf.constant(g) for g in _gradients(step)], tf.constant(True))
    apply([tf.constant(g) for g in _gradients(STEPS)], tf.constant(False))
    assert int(optimizer.iterations) == STEPS
    for (path, _, _), v, e in zip(VARIABLES, variables, expected):
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-6, atol=1e-9, err_msg=path)
    for got, want in zip(optimizer.variables[1:], plain.variables[1:]):  # the moments
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-9,
                                   err_msg=got.path)
    if compiled == "xla":
        hlo = apply.experimental_get_compiler_ir(
            [tf.constant(g) for g in _gradients(0)], tf.constant(True))(stage="hlo")
        assert " select(" in hlo and " conditional(" not in hlo


@pytest.mark.parametrize("bias_correction", [False, True])
def test_cpu_update_is_the_fused_kernel_and_equals_the_written_out_one(bias_correction):
    """On a CPU outside XLA, AdamWeightDecay updates through ResourceApplyAdam (and the
    decay through ResourceApplyGradientDescent); LAMB and XLA keep the written-out update.
    The two agree to float32 rounding."""
    grads = [tf.constant(g) for g in _gradients(0)]
    results = {}
    for jit_compile in (False, True):
        optimizer = AdamWeightDecay(1e-2, bias_correction=bias_correction)
        variables = _variables()
        optimizer.build(variables)
        apply = tf.function(lambda g: optimizer.apply_gradients(zip(g, variables)),
                            jit_compile=jit_compile)
        ops = {op.type for op in apply.get_concrete_function(grads).graph.get_operations()}
        assert ("ResourceApplyAdam" in ops) is not jit_compile, sorted(ops)
        assert ("ResourceApplyGradientDescent" in ops) is not jit_compile
        for step in range(STEPS):
            apply([tf.constant(g) for g in _gradients(step)])
        results[jit_compile] = [v.numpy() for v in variables]
    for (path, _, _), fused, written_out in zip(VARIABLES, results[False], results[True]):
        np.testing.assert_allclose(fused, written_out, rtol=1e-5, atol=1e-8, err_msg=path)
    lamb, variables = Lamb(1e-2), _variables()
    lamb.build(variables)
    apply = tf.function(lambda g: lamb.apply_gradients(zip(g, variables)))
    ops = {op.type for op in apply.get_concrete_function(grads).graph.get_operations()}
    assert "ResourceApplyAdam" not in ops


def test_decay_skips_excluded_variables_and_zero_update_stays_put():
    start = [v.numpy() for v in _variables()]
    got = _run(Lamb(1e-2, weight_decay_rate=0.0))
    # No gradient and no decay: the update is 0, LAMB's ratio is 1 (no NaN), nothing moves.
    np.testing.assert_array_equal(got[4], start[4])
    # With decay the dead kernel shrinks by exactly lr * wd * param each step (AdamW).
    got = _run(AdamWeightDecay(1e-2, weight_decay_rate=0.1))
    np.testing.assert_allclose(got[4], start[4] * (1 - 1e-2 * 0.1) ** STEPS, rtol=1e-6)
    # Excluding nothing decays the bias too.
    plain = _run(AdamWeightDecay(1e-2, weight_decay_rate=0.1))[1]
    decayed = _run(AdamWeightDecay(1e-2, weight_decay_rate=0.1, exclude_from_weight_decay=()))[1]
    assert not np.allclose(plain, decayed)


# With a zero gradient the update is wd * param: AdamW moves it by lr * wd * param, LAMB by
# lr * param (its trust ratio |param| / |update| is 1 / wd).
@pytest.mark.parametrize("cls, factor", [(AdamWeightDecay, 1 - 1e-2 * 0.1), (Lamb, 1 - 1e-2)])
def test_decay_leaves_layer_norms_biases_and_learned_loss_scales(cls, factor):
    """On a real pretrainer (learned loss balance): with zero gradients only the decayed
    variables move; the official exclusions and the loss balance's log scales stay put."""
    model = build_pretrainer(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2,
                             intermediate_size=32, embedding_size=8, max_position_embeddings=16,
                             learn_loss_weights=True)
    variables = model.trainable_variables
    start = {v.path: v.numpy() for v in variables}
    optimizer = cls(1e-2, weight_decay_rate=0.1)
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    kept = [v.path for v in variables if np.array_equal(v.numpy(), start[v.path])]
    for v in variables:
        if v.path not in kept:
            np.testing.assert_allclose(v.numpy(), start[v.path] * factor, rtol=1e-6)
    assert any(p.endswith("/loss_log_scales") for p in kept)
    assert kept == [p for p in start if re.search("LayerNorm|layer_norm|bias|loss_log_scales", p)]
    assert any("kernel" in p for p in start) and not any("kernel" in p for p in kept)


def test_lamb_layer_adaptation_exclusions_are_separate():
    # Adapting every variable (none excluded) changes the LayerNorm gamma's update only by r.
    adapted = _run(Lamb(1e-2, exclude_from_layer_adaptation=()))
    default = _run(Lamb(1e-2))
    np.testing.assert_allclose(adapted[0], default[0], rtol=1e-6)  # kernel: adapted in both
    assert not np.allclose(adapted[2], default[2])                  # gamma: only in one


@pytest.mark.parametrize("cls", [AdamWeightDecay, Lamb])
def test_sparse_and_low_precision_gradients_update_like_dense_float32(cls):
    # An embedding lookup's gradient is IndexedSlices (rows 0 and 2 here); the official
    # update is dense (untouched rows still decay and move with their moments).
    table = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    rows = np.array([[1.0, -2.0, 0.5], [0.25, 0.0, -1.0]], np.float32)
    dense = np.zeros((4, 3), np.float32)
    dense[[0, 2]] = rows
    sparse = tf.IndexedSlices(tf.constant(rows), tf.constant([0, 2]), tf.constant([4, 3]))
    results = []
    for gradient in (tf.constant(dense), tf.cast(dense, tf.bfloat16), sparse):
        variable = keras.Variable(table, name="word_embeddings")
        optimizer = cls(1e-2)
        for _ in range(2):
            optimizer.apply([gradient], [variable])
        results.append(variable.numpy())
    assert results[0].dtype == np.float32
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)  # bf16 holds these exactly
    np.testing.assert_allclose(results[2], results[0], rtol=1e-6)
    assert not np.allclose(results[0][1], table[1])  # decayed without a gradient


@pytest.mark.parametrize("cls", [AdamWeightDecay, Lamb])
def test_optimizer_config_round_trip(cls):
    optimizer = cls(LinearWarmupLinearDecay(2e-4, 1000, 100), beta_2=0.98, epsilon=1e-8,
                    weight_decay_rate=0.05, exclude_from_weight_decay=("bias",),
                    bias_correction=True, learning_rate_multipliers={"a/b": 0.5},
                    aggregate_gradients=False)
    config = optimizer.get_config()
    assert "weight_decay" not in config
    copy = cls.from_config(dict(config))  # Keras' from_config edits the dict it is given
    assert copy.get_config() == config
    assert isinstance(copy._learning_rate, LinearWarmupLinearDecay)
    assert copy.aggregate_gradients is False and copy.exclude_from_weight_decay == ("bias",)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is cls and restored.get_config() == config


def test_optimizer_rejects_keras_weight_decay_and_unmatched_multipliers():
    with pytest.raises(ValueError, match="pass weight_decay_rate instead"):
        AdamWeightDecay(1e-3, weight_decay=0.01)
    with pytest.raises(ValueError, match="weight_decay_rate=-1 is negative"):
        AdamWeightDecay(1e-3, weight_decay_rate=-1)
    optimizer = AdamWeightDecay(1e-3, learning_rate_multipliers={"electra/layer_0/x": 0.5})
    with pytest.raises(ValueError, match="no key of learning_rate_multipliers"):
        optimizer.build(_variables())


# ------------------------------------------------------------------------------ layer-wise decay


def _expected_exponent(path, n, official):
    match = re.search(r"layer_(\d+)/", path)
    exponent = n - int(match.group(1)) if match else n + 1  # blocks; embeddings (+ project)
    return exponent + (1 if official else 0)


@pytest.mark.parametrize("embedding_size", [None, 64])
@pytest.mark.parametrize("official", [False, True])
def test_layerwise_lr_multipliers_on_a_real_encoder(embedding_size, official):
    encoder = Encoder(encoder_config("tiny", vocab_size=100, num_layers=3,
                                     embedding_size=embedding_size))
    assert (encoder.embeddings_project is not None) == (embedding_size == 64)
    decay = 0.8
    multipliers = layerwise_lr_multipliers(encoder, decay, official=official)
    assert set(multipliers) == {v.path for v in encoder.weights}  # every variable, no other
    for path, value in multipliers.items():
        assert value == pytest.approx(decay ** _expected_exponent(path, 3, official)), path
    top = [v.path for v in encoder.blocks[2].weights]
    embeddings = [v.path for v in encoder.embeddings.weights]
    assert [multipliers[p] for p in top] == pytest.approx([0.64 if official else 0.8] * len(top))
    bottom = 0.8 ** 5 if official else 0.8 ** 4
    assert [multipliers[p] for p in embeddings] == pytest.approx([bottom] * len(embeddings))
    if embedding_size:
        assert [multipliers[v.path] for v in encoder.embeddings_project.weights] == \
            pytest.approx([bottom] * 2)


def test_layerwise_lr_multipliers_with_shared_embeddings_and_bad_decay():
    config = encoder_config("tiny", vocab_size=100, num_layers=2)
    first = Encoder(config)
    second = Encoder(config, embeddings=first.embeddings)
    a, b = layerwise_lr_multipliers(first, 0.5), layerwise_lr_multipliers(second, 0.5)
    for v in first.embeddings.weights:
        assert a[v.path] == b[v.path] == 0.5 ** 3
    with pytest.raises(ValueError, match=r"decay=0 must be in \(0, 1\]"):
        layerwise_lr_multipliers(first, 0)


# ------------------------------------------------------------------------------ distribution


@pytest.mark.parametrize("cls, aggregate", [(AdamWeightDecay, False), (AdamWeightDecay, True),
                                            (Lamb, False)])
def test_gradients_are_not_summed_again_under_mirrored_strategy(cls, aggregate,
                                                                mirrored_strategy):
    strategy = mirrored_strategy
    # A large epsilon makes Adam's update depend on the gradient's scale.
    kwargs = dict(epsilon=0.5, weight_decay_rate=0.01)
    steps = 3
    with strategy.scope():
        variables = _variables()
        optimizer = cls(1e-2, aggregate_gradients=aggregate, **kwargs)
        optimizer.build(variables)

    @tf.function
    def train_step(step_grads):
        def replica_step():
            # As if the caller had all-reduced: every replica holds the same gradients,
            # on its own device.
            optimizer.apply([tf.identity(g) for g in step_grads], variables)
        strategy.run(replica_step)

    for step in range(steps):
        train_step([tf.constant(g) for g in _gradients(step)])

    def doubled(step):
        return [2 * g for g in _gradients(step)]

    single = _run(cls(1e-2, **kwargs), steps=steps)
    summed = _run(cls(1e-2, **kwargs), grads=doubled, steps=steps)
    expected = summed if aggregate else single
    for (path, _, _), v, e in zip(VARIABLES, variables, expected):
        replicas = strategy.experimental_local_results(v.value)
        assert len(replicas) == 2
        for r in replicas:
            np.testing.assert_allclose(r.numpy(), e, rtol=1e-6, atol=1e-8, err_msg=path)
    assert not np.allclose(single[0], summed[0])
    assert optimizer.iterations.numpy() == steps  # once per step, not per replica


def test_apply_where_under_mirrored_strategy(mirrored_strategy):
    """The trainer's cross-replica path: `where` decided once, each replica applies with it
    (update_step then runs in the strategy's merge call, another thread)."""
    strategy = mirrored_strategy
    with strategy.scope():
        variables = _variables()
        optimizer = AdamWeightDecay(1e-2, aggregate_gradients=False)
        optimizer.build(variables)

    @tf.function
    def train_step(step_grads, where):
        strategy.extended.call_for_each_replica(
            lambda: optimizer.apply_gradients(
                zip([tf.identity(g) for g in step_grads], variables), where=where))

    for step in range(STEPS):
        train_step([tf.constant(g) for g in _gradients(step)], tf.constant(True))
        train_step([tf.constant(g) for g in _nan_gradients(step)], tf.constant(False))
    expected = _run(AdamWeightDecay(1e-2))
    for (path, _, _), v, e in zip(VARIABLES, variables, expected):
        for r in strategy.experimental_local_results(v.value):
            np.testing.assert_allclose(r.numpy(), e, rtol=1e-6, atol=1e-8, err_msg=path)
    assert optimizer.iterations.numpy() == STEPS


# ------------------------------------------------------------------------------ gin boundary


def test_create_optimizer_through_gin():
    try:
        gin.parse_config("""
            optimizer.name = 'lamb'
            optimizer.learning_rate = 2e-3
            optimizer.warmup_steps = 10
            optimizer.warmup = 'then_decay'
            optimizer.weight_decay_rate = 0.0
            optimizer.bias_correction = True
            optimizer.decay_power = 2.0
        """)
        # The run passes these (gin would have its value overridden without a word).
        optimizer = create_optimizer(num_train_steps=100, aggregate_gradients=False)
    finally:
        gin.clear_config()
    assert type(optimizer) is Lamb
    assert (optimizer.weight_decay_rate, optimizer.bias_correction,
            optimizer.aggregate_gradients) == (0.0, True, False)
    schedule = optimizer._learning_rate
    assert schedule.get_config() == {"learning_rate": 2e-3, "num_train_steps": 100,
                                     "warmup_steps": 10, "warmup": "then_decay",
                                     "decay_power": 2.0}
    assert float(schedule(55)) == pytest.approx(2e-3 * 0.5 ** 2)

    default = create_optimizer()  # ELECTRA-Small pre-training
    assert type(default) is AdamWeightDecay
    assert default._learning_rate.get_config() == {
        "learning_rate": 5e-4, "num_train_steps": 1_000_000, "warmup_steps": 10_000,
        "warmup": "multiply", "decay_power": 1.0}
    assert (default.epsilon, default.weight_decay_rate, default.bias_correction,
            default.exclude_from_weight_decay) == (1e-6, 0.01, False,
                                                   ("LayerNorm", "layer_norm", "bias",
                                                    "loss_log_scales"))


def test_create_optimizer_errors():
    with pytest.raises(ValueError, match=r"optimizer name='sgd' is unknown; use one of adamw, "
                                         r"lamb"):
        create_optimizer(name="sgd")
    with pytest.raises(ValueError, match="warmup_steps=200 exceeds num_train_steps=100"):
        create_optimizer(num_train_steps=100, warmup_steps=200, warmup="then_decay")
    # Out of range (they ran, to a non-finite loss blamed on the learning rate) or of the
    # wrong shape (a TypeError, or a ValueError with a traceback, at the first step).
    from electra_tf.errors import UserInputError
    for kwargs, message in (
            ({"beta_1": 1.5}, r"^optimizer.beta_1=1.5 must be from 0 to below 1\n"),
            ({"beta_2": -1.0}, r"^optimizer.beta_2=-1.0 must be from 0 to below 1\n"),
            ({"epsilon": 0.0}, r"^optimizer.epsilon=0.0 must be positive\n"),
            ({"learning_rate": float("inf")}, r"^LEARNING_RATE=inf \(optimizer.learning_rate\) "
                                              r"must be at least 0 and finite\n"),
            # (a number since fine-tuning's unrounded warmup: inf held the rate at 0)
            ({"warmup_steps": float("inf")}, r"^WARMUP_STEPS=inf \(optimizer.warmup_steps\) "
                                             r"must be at least 0 and finite\n"),
            ({"warmup_steps": float("nan")}, r"^WARMUP_STEPS=nan \(optimizer.warmup_steps\) "
                                             r"must be at least 0 and finite\n"),
            ({"learning_rate_multipliers": 2.0}, r"^optimizer.learning_rate_multipliers=2.0 "
                                                 r"must be a dict of \{variable path: factor\}"),
            ({"exclude_from_weight_decay": 5}, r"^optimizer.exclude_from_weight_decay=5 must "
                                               r"be a list of strings")):
        with pytest.raises(UserInputError, match=message):
            create_optimizer(num_train_steps=100, **kwargs)
    optimizer = create_optimizer(num_train_steps=100, learning_rate_multipliers={"foo": 2.0})
    with pytest.raises(UserInputError, match=r"^no key of learning_rate_multipliers \(e.g. "
                                             r"'foo'\) is the path of a variable"):
        optimizer.build([keras.Variable(1.0, name="w")])
