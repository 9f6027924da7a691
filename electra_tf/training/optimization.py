"""ELECTRA's optimizers and learning-rate schedule (Keras 3 optimizers, TensorFlow backend).

The official semantics (google-research/electra `model/optimization.py`):

    lr(step) = base * (1 - min(step, T) / T) * min(1, step / warmup)
    m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
    update = m / (sqrt(v) + eps)              (no Adam bias correction)
    update += weight_decay_rate * param       (not for LayerNorm and bias variables)
    param -= lr * multiplier * update         (multiplier: layer-wise decay in fine-tuning)

`AdamWeightDecay` is exactly that (bias correction optional); `Lamb` scales each variable's
update by the trust ratio ||param|| / ||update||. The decay is part of the update, so Keras'
own `weight_decay` (decoupled, applied before the step) is not used. Gradients are clipped by
the trainer, not here.

Why `aggregate_gradients=False`: under a tf.distribute strategy Keras 3 clips each replica's
gradients *before* summing them over replicas, so a global-norm clip would see the wrong norm.
Our trainer all-reduces the gradients itself, clips them by their global norm across
replicas, and (optionally) accumulates them; then the optimizer must apply them as they are
instead of summing them over replicas a second time.
"""

import math
import re
import threading
from numbers import Real

import gin
import keras
import tensorflow as tf

from electra_tf import gin_files
from electra_tf.errors import UserInputError

try:  # whether a graph is compiled with XLA (jit_compile, TPUs); TensorFlow has no public API
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
except ImportError:  # pragma: no cover - then every update takes the written-out path
    GraphOrParentsInXlaContext = None

WARMUPS = ("multiply", "then_decay")
OPTIMIZERS = ("adamw", "lamb")
# Substrings of variable paths that get no weight decay: the official list, and the learned
# loss balance's log scales (ablations/learned_loss_weights.gin), whose decay would pull the
# two losses' weights towards 1 : 1.
NO_DECAY = ("LayerNorm", "layer_norm", "bias", "loss_log_scales")


def _path(variable) -> str:
    """A Keras variable's path; a plain tf.Variable's name without the ':0'."""
    path = getattr(variable, "path", None)
    return path if path else re.sub(r":\d+$", "", variable.name)


# ------------------------------------------------------------------------------ schedule


@keras.saving.register_keras_serializable(package="electra_tf")
class LinearWarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup and polynomial decay (linear by default) to 0 at `num_train_steps`;
    float32 output.

    Args:
      learning_rate: the peak (base) learning rate.
      num_train_steps: T, the step at which the learning rate reaches 0 (it stays 0 after).
      warmup_steps: length of the linear warmup; 0 for none.
      warmup: "multiply" (the official ELECTRA/BERT schedule: the decay from base to 0 over
        all T steps, multiplied by min(1, step / warmup_steps)), or "then_decay" (warm up
        to base, then decay from base to 0 over the remaining T - warmup_steps steps).
      decay_power: the decay's power p, base x (1 - done)^p (the official lr_decay_power,
        tf.train.polynomial_decay's power; 1, linear, in every official configuration).

    Example:
      >>> schedule = LinearWarmupLinearDecay(1e-3, num_train_steps=100, warmup_steps=10)
      >>> [round(float(schedule(s)), 7) for s in (0, 5, 10, 55, 100, 200)]
      [0.0, 0.000475, 0.0009, 0.00045, 0.0, 0.0]
    """

    def __init__(self, learning_rate: float, num_train_steps: int, warmup_steps: float,
                 warmup: str = "multiply", decay_power: float = 1.0):
        if warmup not in WARMUPS:
            raise UserInputError(f"warmup={warmup!r} is not a known schedule; use one of "
                                 f"{', '.join(WARMUPS)}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
            raise UserInputError(f"learning_rate={learning_rate!r} is not a number; bind it "
                                 "without quotes, e.g. LEARNING_RATE = 5e-4")
        if learning_rate < 0:
            raise UserInputError(f"learning_rate={learning_rate} is negative; pass the peak "
                                 "learning rate, a number >= 0")
        if num_train_steps <= 0:
            raise UserInputError(f"num_train_steps={num_train_steps} must be positive; set it to "
                                 "the number of optimizer steps of the run")
        if warmup_steps < 0:
            raise UserInputError(f"warmup_steps={warmup_steps} is negative; use 0 for no warmup")
        if (isinstance(decay_power, bool) or not isinstance(decay_power, (int, float))
                or not decay_power >= 0):
            raise UserInputError(f"decay_power={decay_power!r} must be a number >= 0 (1: "
                                 "linear decay, the official)")
        if warmup == "then_decay" and warmup_steps > num_train_steps:
            raise UserInputError(f"warmup_steps={warmup_steps} exceeds num_train_steps="
                                 f"{num_train_steps}; with warmup='then_decay' the warmup must fit "
                                 "in the run")
        self.learning_rate = float(learning_rate)
        self.num_train_steps = int(num_train_steps)
        # (a fraction where fine-tuning's warmup_proportion gives one: the official
        # min(1, step / (proportion x steps)); rounded, a run of 4 steps had no warmup)
        self.warmup_steps = (int(warmup_steps) if float(warmup_steps).is_integer()
                             else float(warmup_steps))
        self.warmup = warmup
        self.decay_power = float(decay_power)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = (tf.minimum(1.0, step / float(self.warmup_steps)) if self.warmup_steps
                else tf.constant(1.0))
        if self.warmup == "multiply":
            done = tf.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
        else:
            # Before the warmup ends `done` is 0, after it `warm` is 1: one product for both.
            decay_steps = float(max(self.num_train_steps - self.warmup_steps, 1))
            done = tf.clip_by_value((step - float(self.warmup_steps)) / decay_steps, 0.0, 1.0)
        decay = 1.0 - done if self.decay_power == 1.0 else tf.pow(1.0 - done, self.decay_power)
        return self.learning_rate * warm * decay

    def peak(self) -> tuple[int, float]:
        """(step, learning rate) of the schedule's highest point. With warmup="multiply" it
        is below the base: at the warmup's end, or where the warmup's rise meets the decay
        (x (1 - x/T)^p is highest at T / (1 + p)) if the warmup is longer than that."""
        if self.warmup == "then_decay" or not self.warmup_steps:
            return self.warmup_steps, self.learning_rate
        step = min(self.warmup_steps, round(self.num_train_steps / (1 + self.decay_power)))
        return step, float(self(step))

    def get_config(self):
        return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
                "warmup_steps": self.warmup_steps, "warmup": self.warmup,
                "decay_power": self.decay_power}


@keras.saving.register_keras_serializable(package="electra_tf")
class RestartedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`first` before step `boundary`, then `second` counted from the boundary (two-stage
    training: the discriminator stage warms up and decays afresh)."""

    def __init__(self, first, second, boundary: int):
        self.first = keras.optimizers.schedules.deserialize(first) if isinstance(
            first, dict) else first
        self.second = keras.optimizers.schedules.deserialize(second) if isinstance(
            second, dict) else second
        self.boundary = int(boundary)

    def __call__(self, step):
        step = tf.cast(step, tf.int64)
        return tf.where(step < self.boundary, self.first(step),
                        self.second(tf.maximum(step - self.boundary, 0)))

    def get_config(self):
        return {"first": keras.optimizers.schedules.serialize(self.first),
                "second": keras.optimizers.schedules.serialize(self.second),
                "boundary": self.boundary}


# ------------------------------------------------------------------------------ optimizers


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (under a tf.distribute
    strategy's update call, that of the local copy)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable(package="electra_tf")
class AdamWeightDecay(keras.optimizers.Optimizer):
    """The official ELECTRA optimizer: Adam with the weight decay inside the update.

    update = m / (sqrt(v) + eps) (m, v bias-corrected if `bias_correction`), plus
    `weight_decay_rate * param` unless the variable's path contains one of
    `exclude_from_weight_decay`; then param -= lr * multiplier * update. The moments are
    the optimizer variables `adam_m` and `adam_v` (the official checkpoints' names).

    Args:
      learning_rate: a float or a schedule (e.g. LinearWarmupLinearDecay); the schedule is
        evaluated at `iterations`, the number of steps applied so far.
      beta_1, beta_2, epsilon: Adam's constants (epsilon 1e-6 as in the official code).
      weight_decay_rate: the decoupled L2 coefficient (0 for none).
      exclude_from_weight_decay: substrings of `variable.path` that get no decay.
      bias_correction: use Adam's bias-corrected moments (the official code does not).
      learning_rate_multipliers: {variable.path: factor} (layer-wise LR decay, see
        `layerwise_lr_multipliers`); variables not in it get 1.0.
      aggregate_gradients: sum the gradients over replicas in a replica context (Keras'
        default). False when the caller has already all-reduced them (see the module
        docstring).
      **kwargs: Keras' base optimizer arguments (name, ...); `weight_decay` must stay None.

    `apply_gradients(grads_and_vars, where=flag)` applies the step only where the scalar
    bool tensor `flag` is True, without a conditional (see `apply_gradients`).

    Example:
      >>> optimizer = AdamWeightDecay(LinearWarmupLinearDecay(5e-4, 10_000, 1000))
      >>> optimizer.apply(grads, model.trainable_variables)
    """

    def __init__(self, learning_rate=1e-3, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, weight_decay_rate: float = 0.01,
                 exclude_from_weight_decay=NO_DECAY, bias_correction: bool = False,
                 learning_rate_multipliers: dict[str, float] | None = None,
                 aggregate_gradients: bool = True, **kwargs):
        if kwargs.pop("weight_decay", None) is not None:
            raise ValueError("weight_decay is Keras' decoupled decay, which this optimizer "
                             "does not use; pass weight_decay_rate instead")
        if isinstance(learning_rate, int):
            learning_rate = float(learning_rate)
        super().__init__(learning_rate, weight_decay=None, **kwargs)
        if weight_decay_rate < 0:
            raise UserInputError(f"weight_decay_rate={weight_decay_rate} is negative; use 0 for "
                                 "no weight decay")
        if isinstance(exclude_from_weight_decay, str):
            exclude_from_weight_decay = (exclude_from_weight_decay,)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.bias_correction = bias_correction
        self.learning_rate_multipliers = dict(learning_rate_multipliers or {})
        self.aggregate_gradients = aggregate_gradients
        # The overrides below rely on these internals of Keras' TensorFlow optimizer; fail
        # loudly if they moved.
        for internal in ("_all_reduce_sum_gradients", "_backend_update_step"):
            if not hasattr(keras.optimizers.Optimizer, internal):
                raise NotImplementedError(
                    f"AdamWeightDecay needs Keras' TensorFlow optimizer ({internal}); use "
                    "the TensorFlow backend of Keras 3.15")
        # `where` of the apply_gradients call running in this thread (tf.distribute runs
        # each replica in its own thread).
        self._where = threading.local()

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adam_m, self._adam_v = self.add_optimizer_variables(var_list, ["adam_m", "adam_v"])
        # update_step receives the backend tf.Variable, which has no `.path`: decide
        # everything that depends on the path here, by the variable's index.
        paths = [_path(v) for v in var_list]
        self._decays = [not any(s in p for s in self.exclude_from_weight_decay)
                        for p in paths]
        self._multipliers = [float(self.learning_rate_multipliers.get(p, 1.0)) for p in paths]
        if self.learning_rate_multipliers and not set(paths) & set(self.learning_rate_multipliers):
            example = next(iter(self.learning_rate_multipliers))
            raise UserInputError(
                f"no key of learning_rate_multipliers (e.g. {example!r}) is the path of a "
                f"variable this optimizer trains (e.g. {paths[0]!r}); build the dict from the "
                "same model's variables")

    def _adam_update(self, gradient, variable, index, where):
        """Updates the moments; returns Adam's update plus the weight decay term."""
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)  # the official update is dense
        gradient = tf.cast(gradient, variable.dtype)
        m = (self.beta_1 * tf.convert_to_tensor(self._adam_m[index])
             + (1.0 - self.beta_1) * gradient)
        v = (self.beta_2 * tf.convert_to_tensor(self._adam_v[index])
             + (1.0 - self.beta_2) * tf.square(gradient))
        self._assign(self._adam_m[index], m, where)
        self._assign(self._adam_v[index], v, where)
        if self.bias_correction:
            t = tf.cast(self.iterations + 1, variable.dtype)
            m = m / (1.0 - tf.pow(tf.cast(self.beta_1, variable.dtype), t))
            v = v / (1.0 - tf.pow(tf.cast(self.beta_2, variable.dtype), t))
        update = m / (tf.sqrt(v) + self.epsilon)
        if self.weight_decay_rate > 0 and self._decays[index]:
            update += self.weight_decay_rate * tf.convert_to_tensor(variable)
        return update

    def _scale_update(self, update, variable, index):
        """Hook for LAMB's trust ratio."""
        return update

    def _fused_on(self, variable) -> bool:
        """Whether `variable`'s update runs through TensorFlow's fused Adam kernel: on a CPU,
        outside XLA, and not for LAMB (whose trust ratio needs the whole update).

        The written-out update is about twenty elementwise passes over the variable, its
        moments and gradient; on a CPU each is a separate kernel over memory, where the
        fused one reads and writes each tensor once (ELECTRA-Base pre-training's 119M
        weights on 2 Xeon cores: 606 -> 247 ms per update, small's 98 -> 43 ms;
        benchmarks/optimizer_step.py). XLA fuses the written-out update by itself, and on
        accelerators it stays as it was.
        """
        if type(self)._scale_update is not AdamWeightDecay._scale_update:
            return False
        if GraphOrParentsInXlaContext is None or GraphOrParentsInXlaContext(
                tf.compat.v1.get_default_graph()):
            return False
        device = getattr(variable, "device", "") or ""
        return bool(device) and tf.DeviceSpec.from_string(device).device_type == "CPU"

    def _fused_update(self, gradient, variable, index, learning_rate, where):
        """The official update through ResourceApplyAdam, which computes
        m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), param -= alpha m / (sqrt(v) + eps')
        with alpha = lr sqrt(1 - b2^t) / (1 - b1^t) from the two powers it is given: 0 for
        none (the official update, alpha = lr), b1^t and b2^t for bias correction with
        eps' = eps sqrt(1 - b2^t), with which it is m_hat / (sqrt(v_hat) + eps). The
        weight decay goes first, param -= lr * wd * param (ResourceApplyGradientDescent),
        so that both terms see the same param, as in the official update.

        A skipped step (`where` False) runs the same kernels as a no-op, without a
        conditional: zero gradient, betas 1 (the moments' increments are multiplied by
        exactly 0) and learning rate 0; the gradient is selected away, so a NaN gradient
        leaves nothing behind.
        """
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        lr = tf.cast(learning_rate, dtype) * self._multipliers[index]
        beta_1, beta_2 = tf.constant(self.beta_1, dtype), tf.constant(self.beta_2, dtype)
        epsilon = tf.constant(self.epsilon, dtype)
        if self.bias_correction:
            t = tf.cast(self.iterations + 1, dtype)
            beta_1_power, beta_2_power = tf.pow(beta_1, t), tf.pow(beta_2, t)
            epsilon = epsilon * tf.sqrt(1.0 - beta_2_power)
        else:
            beta_1_power = beta_2_power = tf.constant(0.0, dtype)
        if where is not None:
            gradient = tf.where(where, gradient, tf.zeros([], dtype))
            lr = tf.where(where, lr, tf.zeros([], dtype))
            beta_1 = tf.where(where, beta_1, tf.ones([], dtype))
            beta_2 = tf.where(where, beta_2, tf.ones([], dtype))
        handle = _handle(variable)
        if self.weight_decay_rate > 0 and self._decays[index]:
            tf.raw_ops.ResourceApplyGradientDescent(
                var=handle, alpha=lr * self.weight_decay_rate,
                delta=tf.convert_to_tensor(variable))
        tf.raw_ops.ResourceApplyAdam(
            var=handle, m=_handle(self._adam_m[index]), v=_handle(self._adam_v[index]),
            beta1_power=beta_1_power, beta2_power=beta_2_power, lr=lr, beta1=beta_1,
            beta2=beta_2, epsilon=epsilon, grad=gradient)

    def update_step(self, gradient, variable, learning_rate):
        learning_rate, where = (learning_rate if isinstance(learning_rate, tuple)
                                else (learning_rate, None))
        index = self._get_variable_index(variable)
        if self._fused_on(variable):
            return self._fused_update(gradient, variable, index, learning_rate, where)
        update = self._scale_update(self._adam_update(gradient, variable, index, where),
                                    variable, index)
        lr = tf.cast(learning_rate, variable.dtype) * self._multipliers[index]
        if where is None:
            self.assign_sub(variable, lr * update)
        else:
            self._assign(variable, tf.convert_to_tensor(variable) - lr * update, where)

    def _assign(self, variable, value, where):
        """variable = value, or (where is False) variable as it was: a select, not a
        multiplication, so a NaN `value` leaves nothing behind."""
        if where is not None:
            value = tf.where(where, value, tf.convert_to_tensor(variable))
        self.assign(variable, value)

    def apply_gradients(self, grads_and_vars, where=None):
        """Keras' apply_gradients; with `where` (a scalar bool tensor) the step is applied
        only where it is True, and otherwise every variable, moment and `iterations` keeps
        its value, with no conditional: the update is computed and selected away.

        Under XLA on a GPU a conditional copies its predicate to the host and waits for
        the device before either branch runs; a select costs one read per element inside
        the update's own fused loop. A skipped step (a non-finite loss, an overflowed loss
        scale, a batch on the skip list) then costs as much as an applied one, which is
        what the step costs anyway.
        """
        if where is None:
            return super().apply_gradients(grads_and_vars)
        where = tf.convert_to_tensor(where, tf.bool)
        self._where.value = where
        try:
            super().apply_gradients(grads_and_vars)
        finally:
            self._where.value = None
        # Keras adds 1 to `iterations` after every apply; a skipped step takes it back.
        self._iterations.assign_sub(tf.cast(tf.logical_not(where), self._iterations.dtype))
        return self._iterations

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # `where` travels beside the learning rate, as an argument: under a strategy that
        # merge_calls, update_step runs in another thread (the strategy's) than this one.
        where = getattr(self._where, "value", None)
        if where is not None:
            learning_rate = (learning_rate, where)
        super()._backend_update_step(grads, trainable_variables, learning_rate)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Keras' TFOptimizer sums gradients over replicas here when called in a replica
        # context; skip that when the caller has already done it.
        if self.aggregate_gradients:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return list(grads_and_vars)

    def get_config(self):
        config = super().get_config()
        config.pop("weight_decay")
        config.update({
            "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
            "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
            "bias_correction": self.bias_correction,
            "learning_rate_multipliers": dict(self.learning_rate_multipliers),
            "aggregate_gradients": self.aggregate_gradients,
        })
        return config


@keras.saving.register_keras_serializable(package="electra_tf")
class Lamb(AdamWeightDecay):
    """LAMB (You et al., 2019) as ALBERT's TF1 `lamb_optimizer.py` (the official ELECTRA code
    has none).

    The update is AdamWeightDecay's; each variable's update is then scaled by the trust ratio
    r = ||param|| / ||update|| (1 when either norm is 0, and 1 for variables whose path
    contains one of `exclude_from_layer_adaptation`): param -= lr * multiplier * r * update.

    Args:
      exclude_from_layer_adaptation: substrings of `variable.path` that keep r = 1;
        None means the same as `exclude_from_weight_decay`.
      others: as AdamWeightDecay.
    """

    def __init__(self, learning_rate=1e-3, exclude_from_layer_adaptation=None, **kwargs):
        super().__init__(learning_rate, **kwargs)
        if exclude_from_layer_adaptation is None:
            exclude_from_layer_adaptation = self.exclude_from_weight_decay
        elif isinstance(exclude_from_layer_adaptation, str):
            exclude_from_layer_adaptation = (exclude_from_layer_adaptation,)
        self.exclude_from_layer_adaptation = tuple(exclude_from_layer_adaptation)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adapts = [not any(s in _path(v) for s in self.exclude_from_layer_adaptation)
                        for v in var_list]

    def _scale_update(self, update, variable, index):
        if not self._adapts[index]:
            return update
        param_norm = tf.norm(tf.convert_to_tensor(variable))
        update_norm = tf.norm(update)
        ratio = tf.where((param_norm > 0) & (update_norm > 0),
                         tf.math.divide_no_nan(param_norm, update_norm), 1.0)
        return ratio * update

    def get_config(self):
        config = super().get_config()
        config["exclude_from_layer_adaptation"] = list(self.exclude_from_layer_adaptation)
        return config


# ------------------------------------------------------------------------------ fine-tuning


def layerwise_lr_multipliers(encoder, decay: float, official: bool = False) -> dict[str, float]:
    """Layer-wise learning-rate decay for fine-tuning: {variable.path: multiplier}.

    With n transformer blocks (block 0 at the bottom), block i gets decay**(n - i) (the top
    block decay**1) and the embeddings (and their projection) decay**(n + 1); variables not
    in the dict (the task head) get 1.0. `official=True` reproduces the official code's
    `_get_layer_lrs`, which gives every layer one more decay step (the top block decay**2,
    the embeddings decay**(n + 2); an acknowledged upstream off-by-one).

    Args:
      encoder: an `electra_tf.modeling.encoder.Encoder` (its `embeddings`,
        `embeddings_project` and `blocks` are walked, not its variable names).
      decay: the per-layer factor, in (0, 1] (0.8 for Small and Base, 0.9 for Large).
      official: use the official exponents.
    """
    if not 0 < decay <= 1:
        raise UserInputError(f"layer-wise decay={decay} must be in (0, 1]; the paper uses 0.8 "
                             "(0.9 for Large), 1.0 turns it off")
    n = len(encoder.blocks)
    extra = 1 if official else 0
    groups = [(encoder.embeddings, n + 1 + extra)]
    if encoder.embeddings_project is not None:
        groups.append((encoder.embeddings_project, n + 1 + extra))
    groups += [(block, n - i + extra) for i, block in enumerate(encoder.blocks)]
    multipliers, owners = {}, {}
    for layer, exponent in groups:
        for variable in layer.weights:
            path = _path(variable)
            if path in owners and owners[path] is not variable:
                raise ValueError(f"two variables of the encoder share the path {path!r}; give "
                                 "its layers unique names so multipliers can be keyed by path")
            owners[path] = variable
            multipliers[path] = float(decay ** exponent)
    return multipliers


# ------------------------------------------------------------------------------ gin boundary


_MACROS = {"learning_rate": "LEARNING_RATE", "warmup_steps": "WARMUP_STEPS",
           "num_train_steps": "NUM_TRAIN_STEPS"}


def check_types(values: dict) -> None:
    """A UserInputError for an `optimizer.*` value of the wrong type or out of its range
    ({parameter: value}): create_optimizer's check, which fine-tuning makes on the bindings
    before it writes. (Adam's betas out of [0, 1) or a non-positive epsilon stopped at a
    non-finite loss whose line blamed the learning rate; a learning rate of 1e999 too.)"""
    gin_files.check_types(
        "optimizer", values, integers=("num_train_steps",),
        numbers=("learning_rate", "warmup_steps", "decay_power", "weight_decay_rate",
                 "beta_1", "beta_2", "epsilon"),
        flags=("bias_correction", "aggregate_gradients"), macros=_MACROS)
    for name, bad, wanted in (("beta_1", lambda v: not 0 <= v < 1, "from 0 to below 1"),
                              ("beta_2", lambda v: not 0 <= v < 1, "from 0 to below 1"),
                              ("epsilon", lambda v: not 0 < v < math.inf, "positive"),
                              ("learning_rate", lambda v: not 0 <= v < math.inf,
                               "at least 0 and finite"),
                              # (a number: fine-tuning's proportion x steps is unrounded; 1e999
                              # held the rate at 0 for the whole run, nan made it nan)
                              ("warmup_steps", lambda v: not 0 <= v < math.inf,
                               "at least 0 and finite")):
        if name in values and bad(values[name]):
            setting = (f"{_MACROS[name]}={values[name]!r} (optimizer.{name})" if name in _MACROS
                       else f"optimizer.{name}={values[name]!r}")
            raise UserInputError(f"{setting} must be {wanted}")
    multipliers = values.get("learning_rate_multipliers")
    if multipliers is not None and not (isinstance(multipliers, dict) and all(
            isinstance(k, str) and isinstance(v, Real) and not isinstance(v, bool)
            for k, v in multipliers.items())):
        raise UserInputError(f"optimizer.learning_rate_multipliers={multipliers!r} must be a "
                             "dict of {variable path: factor}, or None")
    excluded = values.get("exclude_from_weight_decay")
    if excluded is not None and not (isinstance(excluded, str) or isinstance(
            excluded, (list, tuple)) and all(isinstance(e, str) for e in excluded)):
        raise UserInputError(f"optimizer.exclude_from_weight_decay={excluded!r} must be a "
                             "list of strings (parts of the variables' paths), or None")


# The run sets these from its own settings: a binding would be overridden without a word.
@gin.configurable("optimizer", denylist=["num_train_steps", "aggregate_gradients",
                                         "restart_at", "log"])
def create_optimizer(learning_rate: float = 5e-4, num_train_steps: int = 1_000_000,
                     warmup_steps: float = 10_000, name: str = "adamw",
                     warmup: str = "multiply", decay_power: float = 1.0,
                     weight_decay_rate: float = 0.01,
                     beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                     bias_correction: bool = False, exclude_from_weight_decay=NO_DECAY,
                     learning_rate_multipliers: dict[str, float] | None = None,
                     aggregate_gradients: bool = True,
                     restart_at: int | None = None, log=None) -> AdamWeightDecay:
    """The schedule and the optimizer; the defaults are ELECTRA-Small pre-training's.

    `name` is "adamw" (AdamWeightDecay, the official) or "lamb" (Lamb). Gradient clipping
    is the trainer's job (it clips the all-reduced gradients by their global norm).
    `restart_at` (two-stage training, set by the trainer): the schedule runs to 0 at that
    step, then starts again (warmup, decay) over the remaining steps.
    `log`: where a note goes when the warmup keeps the learning rate under half its base
    (a warmup of over half the run, with linear decay: a short continued pre-training with a
    size preset's 10,000 warmup steps barely trained).
    """
    check_types({"learning_rate": learning_rate, "num_train_steps": num_train_steps,
                 "warmup_steps": warmup_steps, "decay_power": decay_power,
                 "weight_decay_rate": weight_decay_rate, "beta_1": beta_1, "beta_2": beta_2,
                 "epsilon": epsilon, "bias_correction": bias_correction,
                 "aggregate_gradients": aggregate_gradients,
                 "learning_rate_multipliers": learning_rate_multipliers,
                 "exclude_from_weight_decay": exclude_from_weight_decay})
    if name not in OPTIMIZERS:
        raise UserInputError(f"optimizer name={name!r} is unknown; use one of "
                             f"{', '.join(OPTIMIZERS)}")
    if restart_at is None:
        schedule = LinearWarmupLinearDecay(learning_rate, num_train_steps, warmup_steps, warmup,
                                           decay_power)
    else:
        if not 0 < restart_at < num_train_steps:
            raise UserInputError(f"restart_at={restart_at} must be inside the run (0, "
                                 f"num_train_steps={num_train_steps})")
        schedule = RestartedSchedule(
            LinearWarmupLinearDecay(learning_rate, restart_at, min(warmup_steps, restart_at),
                                    warmup, decay_power),
            LinearWarmupLinearDecay(learning_rate, num_train_steps - restart_at,
                                    min(warmup_steps, num_train_steps - restart_at), warmup,
                                    decay_power),
            restart_at)
    parts = [schedule] if restart_at is None else [schedule.first, schedule.second]
    for part in parts if log else []:
        step, peak = part.peak()
        if peak < 0.5 * learning_rate:
            log(f"note: the learning rate peaks at {peak:.3g}, {100 * peak / learning_rate:.2g}% "
                f"of LEARNING_RATE={learning_rate:g}, at step {step}: the schedule multiplies "
                f"the warmup (WARMUP_STEPS={warmup_steps}) by the decay over "
                f"{part.num_train_steps} steps; make the warmup a small share of the run (the "
                "paper's: 10,000 of 1,000,000 steps)")
            break
    cls = AdamWeightDecay if name == "adamw" else Lamb
    return cls(schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
               weight_decay_rate=weight_decay_rate,
               exclude_from_weight_decay=exclude_from_weight_decay,
               bias_correction=bias_correction,
               learning_rate_multipliers=learning_rate_multipliers,
               aggregate_gradients=aggregate_gradients)
