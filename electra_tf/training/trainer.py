"""What one pre-training step does (orbit's StandardTrainer) and evaluation (StandardEvaluator).

One step, on every replica (b examples per replica, k micro-batches of b / k):

    counts = loss_normalizers(replica batch), summed over replicas        (all-reduce)
    grads  = sum over the k micro-batches of d loss / d weights, every micro-batch's loss
             divided by the global counts (its share of the global batch's mean)
    grads  = sum over replicas                                             (all-reduce)
    norm   = global norm of grads (unscaled first under float16 loss scaling)
    update = clip(grads, clip_norm), applied unless the loss or grads are not finite, the
             step is on the skip list, or an earlier step of this loop was not finite

So the update equals that of one device running the global batch at once, for any replica
count and accumulation (the examples' masks and samples are keyed by the examples, not by
how the batch is split). The compiled step has no conditional: a skipped step's update is
computed and selected away (`AdamWeightDecay.apply_gradients(where=)`), and its metric
updates weighted by 0, because under XLA on a GPU each conditional makes the host wait for
the device. The all-reduce, clipping and skipping happen here, not in the
optimizer: Keras 3 clips each replica's gradients before its own all-reduce.

A step that is not finite records its number in `bad_step`; the loop driver
(`electra_tf.training.pretraining`) stops the run or restores the last checkpoint and puts
the step on the skip list. Under `mixed_float16` a dynamic loss scale (`LossScale`)
multiplies the loss; gradients that overflow it halve the scale and skip the update, which
is not counted as a bad step unless the loss itself is not finite.

Under XLA one call of the compiled step can run several steps (`steps_per_call`, k): the
loop takes k batches from the iterator, one after the other, and one compiled program runs
the k steps in a while loop. On a GPU, TensorFlow lets a compiled program's successor start
only once the device has finished it, so each call leaves the device idle while the host
prepares the next (11-15 ms per call for base on an H200,
benchmarks/results/gpu_h200_profile.md); k steps per call pay that once. The steps, their
batches and their order are those of k single calls.

Timings for throughput are taken around each loop of `steps_per_loop` steps; a loop that
runs a loop function for the first time (the first loop of a process, the first of a
two-stage phase) also traced and compiled it, and says so (`last_loop["cold"]`).
"""

import time

import keras
import numpy as np
import orbit
import tensorflow as tf

from electra_tf.errors import UserInputError
from electra_tf.modeling.metrics import PretrainingMetrics
from electra_tf.modeling.pretrainer import ElectraPretrainer, call_counts
from electra_tf.training.strategies import sum_over_replicas

_FIRST_REPLICA = tf.VariableAggregation.ONLY_FIRST_REPLICA


def _state_variable(value, dtype, name, shape=None):
    return tf.Variable(value, dtype=dtype, trainable=False, name=name, shape=shape,
                       aggregation=_FIRST_REPLICA)


class LossScale(tf.Module):
    """Dynamic loss scaling for float16: the scale halves when gradients overflow and
    doubles after `growth_steps` finite steps in a row (Keras' LossScaleOptimizer's rule)."""

    def __init__(self, initial_scale: float = 2.0 ** 15, growth_steps: int = 2000):
        super().__init__(name="loss_scale")
        self.scale = _state_variable(initial_scale, tf.float32, "scale")
        self.good_steps = _state_variable(0, tf.int64, "good_steps")
        self.growth_steps = growth_steps

    def update(self, finite):
        """After a step: grow or shrink the scale (finite: whether the gradients were)."""
        grow = finite & (self.good_steps + 1 >= self.growth_steps)
        self.scale.assign(tf.where(finite, tf.where(grow, self.scale * 2.0, self.scale),
                                   tf.maximum(self.scale * 0.5, 1.0)))
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1,
                                        tf.zeros_like(self.good_steps)))


class TrainState(tf.Module):
    """The loop's own checkpointed state: the global step, the step numbers to skip, the
    two-stage algorithm's stage, and the first bad step of the current loop (-1: none)."""

    def __init__(self, max_skips: int):
        super().__init__(name="train_state")
        self.step = _state_variable(0, tf.int64, "global_step")
        self.skip_steps = _state_variable(tf.fill([max(max_skips, 1)], tf.constant(-1, tf.int64)),
                                          tf.int64, "skip_steps")
        self.stage = _state_variable(0, tf.int64, "stage")
        self.bad_step = _state_variable(-1, tf.int64, "bad_step")


class PretrainingTrainer(orbit.StandardTrainer):
    """orbit trainer of an ElectraPretrainer.

    Args:
      model: the ElectraPretrainer (built under `strategy.scope()`).
      optimizer: an `optimization.AdamWeightDecay` or `Lamb` that applies gradients as given
        (no aggregation across replicas: `optimization.create_optimizer(
        aggregate_gradients=False)`); its `apply_gradients(..., where=)` skips a step
        without a conditional.
      strategy: the tf.distribute strategy.
      train_iterator: an iterator of this worker's batches (`pipeline.worker_dataset`),
        checkpointed with the model so a resumed run continues where it stopped; each of the
        worker's `local_replicas` replicas takes its slice of every batch.
      state: the TrainState.
      global_batch_size, seq_length: for throughput.
      accumulation_steps: micro-batches per replica batch (k); the replica batch must divide.
      clip_norm: global-norm clipping of the summed gradients (None: no clipping).
      loss_scale: a LossScale under mixed_float16, else None.
      jit_compile: compile the step with XLA: the whole replica step on one replica or a
        TPU, each replica's forward and backward pass with several elsewhere.
      steps_per_call: with jit_compile, steps one compiled call runs (see the module
        docstring); a loop of n steps makes n // k such calls, then n % k single steps.
      phase: "joint", or a function step -> phase for two-stage training.
      flops_per_example: hardware FLOPs of one training example (for MFU), or None; for
        two-stage training {phase: FLOPs} ("generator", "discriminator").
      peak_flops: the devices' total peak FLOP/s, or None when unknown.
      two_stage_steps: with algorithm 'two_stage', the generator stage's length: loops
        before it train phase "generator"; at the first loop after it the discriminator
        takes the generator's weights (once: `state.stage` records it) and `on_stage_switch`
        (step) is called; later loops train phase "discriminator".
    """

    def __init__(self, model: ElectraPretrainer, optimizer, strategy, train_iterator,
                 state: TrainState, *, global_batch_size: int, seq_length: int,
                 local_replicas: int = 1,
                 accumulation_steps: int = 1, clip_norm: float | None = 1.0,
                 loss_scale: LossScale | None = None, jit_compile: bool = False,
                 flops_per_example: float | None = None, peak_flops: float | None = None,
                 two_stage_steps: int | None = None, on_stage_switch=None,
                 steps_per_call: int = 1):
        if steps_per_call > 1 and not jit_compile:
            raise UserInputError(f"pretraining.steps_per_call={steps_per_call} needs "
                                 "pretraining.jit_compile=True (the steps run as one XLA "
                                 "program); set steps_per_call=1 without XLA")
        super().__init__(train_iterator, orbit.StandardTrainerOptions(
            use_tf_function=True, use_tf_while_loop=True))
        self.model, self.optimizer, self.strategy, self.state = model, optimizer, strategy, state
        self.global_batch_size, self.seq_length = global_batch_size, seq_length
        self.local_replicas = local_replicas
        self.accumulation_steps = accumulation_steps
        self.clip_norm, self.loss_scale, self.jit_compile = clip_norm, loss_scale, jit_compile
        self.flops_per_example, self.peak_flops = flops_per_example, peak_flops
        self.two_stage_steps, self.on_stage_switch = two_stage_steps, on_stage_switch
        self.phase = "joint"
        with strategy.scope():
            self.metrics = PretrainingMetrics()
            self.grad_norm = keras.metrics.Mean(name="grad_norm")
            self.real_tokens = keras.metrics.Mean(name="real_tokens")  # per global batch
            # The share of the recorded steps whose float16 gradients overflowed (skipped):
            # a mean, which reads the same whatever the replicas add.
            self.overflowed = keras.metrics.Mean(name="overflowed")
        self.steps_per_call = steps_per_call
        self._replica_steps = {}
        self._block_loop_fn = None
        self._loop_start = None
        self._called = []  # the loop functions called so far (at most one per kind and phase)
        self._cold = True
        self.last_loop = {}

    # -- phases (two-stage training switches phase between loops)

    def _set_phase(self):
        phase = "joint"
        if self.two_stage_steps is not None:
            step = int(self.state.step.numpy())
            if step >= self.two_stage_steps and int(self.state.stage.numpy()) == 0:
                self.model.init_discriminator_from_generator()
                self.state.stage.assign(1)
                if self.on_stage_switch is not None:
                    self.on_stage_switch(step)
            phase = "discriminator" if step >= self.two_stage_steps else "generator"
        if phase != self.phase:
            self.phase = phase
            self._train_loop_fn = None  # orbit traces the loop again for the new phase
            self._block_loop_fn = None

    def trace_loop(self):
        """Trace the loop of `steps_per_loop` steps now, not at the first loop. Two processes
        that trace the same things in the same order give the step the same name, the key
        of XLA's persistent compilation cache; tracing before a checkpoint is restored
        makes a resumed run's step the first run's. With k steps per call, the one-step loop
        too, after the k-step one: it runs the steps left over (a loop that k does not
        divide, a resume from a step off the loops' grid), and traced when first needed its
        name, and so its cache entry, depended on what the process had traced before (each
        resume compiled it again and added an entry)."""
        self._set_phase()
        if self.steps_per_call > 1:
            self._block_loop().get_concrete_function(self.train_dataset,
                                                     tf.TensorSpec([], tf.int32))
        self._single_loop().get_concrete_function(self.train_dataset,
                                                  tf.TensorSpec([], tf.int32))

    # -- orbit hooks

    def train(self, num_steps):
        """orbit's entry point: `num_steps` steps, as num_steps // k calls of k steps each
        and num_steps % k single steps (k = steps_per_call)."""
        self._set_phase()  # first: a two-stage switch makes new loop functions
        calls, single = divmod(int(num_steps), self.steps_per_call)
        if self.steps_per_call == 1:
            functions = [self._single_loop()]
        else:  # (called only where it runs; under XLA trace_loop has traced it)
            functions = (([self._block_loop()] if calls else [])
                         + ([self._single_loop()] if single else []))
        new = [f for f in functions if not any(f is g for g in self._called)]
        self._cold, self._called = bool(new), self._called + new
        if self.steps_per_call == 1:
            return super().train(num_steps)
        self.train_loop_begin()
        if self._train_iter is None:
            self._train_iter = tf.nest.map_structure(iter, self.train_dataset)
        if calls:
            self._block_loop()(self._train_iter, tf.constant(calls, tf.int32))
        if single:
            self._single_loop()(self._train_iter, tf.constant(single, tf.int32))
        return self.train_loop_end()

    def _single_loop(self):
        """orbit's loop of one step per call (the attribute orbit's own `train` fills)."""
        if self._train_loop_fn is None:
            self._train_loop_fn = self.create_train_loop_fn()
        return self._train_loop_fn

    def _block_loop(self):
        if self._block_loop_fn is None:
            self._block_loop_fn = tf.function(
                orbit.utils.create_tf_while_loop_fn(self._train_block))
        return self._block_loop_fn

    def _train_block(self, iterator):
        batches = [next(iterator) for _ in range(self.steps_per_call)]  # in this order
        self.strategy.run(self._replica_block_fn(), args=(batches,))

    def train_loop_begin(self):
        self._set_phase()
        self.metrics.reset()
        self.grad_norm.reset_state()
        self.real_tokens.reset_state()
        self.overflowed.reset_state()
        self.state.bad_step.assign(-1)
        self._loop_start = (time.time(), int(self.state.step.numpy()))

    def train_step(self, iterator):
        batch = next(iterator)
        self.strategy.run(self._replica_step_fn(), args=(batch,))

    def train_loop_end(self):
        """Returns {} (orbit would print what it gets); the loop's figures are in
        `last_loop` for the driver to write and print."""
        start_time, start_step = self._loop_start
        steps = int(self.state.step.numpy()) - start_step
        seconds = max(time.time() - start_time, 1e-9)
        values = self.metrics.result()
        values["optimizer/learning_rate"] = float(self.optimizer.learning_rate)
        if float(self.grad_norm.count.numpy()):  # (a loop of overflowed float16 steps
            # alone has no finite norm: it read 0)
            values["optimizer/grad_norm"] = float(self.grad_norm.result())
        examples_per_second = steps * self.global_batch_size / seconds
        values["throughput/examples_per_second"] = examples_per_second
        # Real tokens (padding not counted): the global batch's, by the step's own count.
        values["throughput/tokens_per_second"] = (
            steps * float(self.real_tokens.result()) / seconds)
        per_example = self.flops_per_example
        if isinstance(per_example, dict):  # two-stage training: the phase's own
            per_example = per_example[self.phase]
        if per_example and self.peak_flops:
            values["throughput/mfu"] = examples_per_second * per_example / self.peak_flops
        if self.loss_scale is not None:
            values["optimizer/loss_scale"] = float(self.loss_scale.scale.numpy())
        if self.model.loss_log_scales is not None:  # learned balance: weights exp(-s)
            generator, discriminator = np.exp(-self.model.loss_log_scales.numpy())
            values["loss/learned_generator_weight"] = float(generator)
            values["loss/learned_discriminator_weight"] = float(discriminator)
        # Steps of the skip list (run, neither applied nor recorded) in this loop: one of
        # them alone records nothing, and its figures would read 0.
        skips = self.state.skip_steps.numpy()
        skipped = int(np.sum((skips >= start_step) & (skips < start_step + steps)))
        self.last_loop = {"values": values, "steps": steps, "seconds": seconds,
                          "start_time": start_time, "start_step": start_step,
                          "cold": self._cold, "bad_step": int(self.state.bad_step.numpy()),
                          "recorded": steps - skipped,
                          "overflowed": round(float(self.overflowed.result())
                                              * (steps - skipped))}
        return {}

    # -- the step

    def _compiles_whole_step(self) -> bool:
        """Whether XLA compiles the whole replica step, the all-reduces and the update
        included: on one replica (and on a TPU, which compiles whatever its replicas run).
        With several replicas elsewhere it compiles each replica's forward and backward
        pass alone: TensorFlow's all-reduce inside a program XLA compiles fails on CPUs
        ("destinations can not be empty") and across workers."""
        return self.jit_compile and (self.strategy.num_replicas_in_sync == 1 or isinstance(
            self.strategy, tf.distribute.TPUStrategy))

    def _replica_step_fn(self):
        key = (self.phase, self.jit_compile)
        if key not in self._replica_steps:
            fn = self._replica_step
            if self._compiles_whole_step():
                fn = tf.function(fn, jit_compile=True)
            self._replica_steps[key] = fn
        return self._replica_steps[key]

    def _gradients_fn(self):
        """self._gradients of this phase's variables, as a function of (batch, normalizers,
        record); compiled by itself when XLA does not compile the whole step."""
        key = (self.phase, "gradients")
        if key not in self._replica_steps:
            phase = self.phase

            def fn(batch, normalizers, record):
                return self._gradients(batch, normalizers, self.model.phase_variables(phase),
                                       record)

            if self.jit_compile and not self._compiles_whole_step():
                fn = tf.function(fn, jit_compile=True)
            self._replica_steps[key] = fn
        return self._replica_steps[key]

    def _replica_block_fn(self):
        key = (self.phase, "block")
        if key not in self._replica_steps:
            self._replica_steps[key] = tf.function(self._replica_block, jit_compile=True)
        return self._replica_steps[key]

    def _replica_block(self, batches):
        """The steps of `batches` (a list, one replica batch per step) in one program."""
        stacked = {name: tf.stack([batch[name] for batch in batches]) for name in batches[0]}
        for i in tf.range(len(batches)):
            self._replica_step({name: value[i] for name, value in stacked.items()})

    def _replica_step(self, batch):
        context = tf.distribute.get_replica_context()
        batch = _replica_slice(batch, context, self.local_replicas)
        variables = self.model.phase_variables(self.phase)
        normalizers = self.model.loss_normalizers(batch)
        normalizers["parts"] = tf.constant(float(self.accumulation_steps))
        normalizers = sum_over_replicas(context, normalizers)
        self.real_tokens.update_state(normalizers["tokens"])  # every replica the same total

        # A step on the skip list (a batch that gave a non-finite loss before) is run but
        # neither applied nor recorded in the metrics.
        skip = tf.reduce_any(tf.equal(self.state.skip_steps, self.state.step))
        record = ~skip
        grads, losses = self._gradients_fn()(batch, normalizers, record)
        grads = sum_over_replicas(context, grads)
        losses = sum_over_replicas(context, losses)
        self.metrics.update_losses(*losses, keep=record,
                                   parts=self.model.loss_parts(self.phase))

        scale = None if self.loss_scale is None else self.loss_scale.scale
        if scale is not None:
            grads = [g / scale for g in grads]
        norm = tf.linalg.global_norm(grads)
        loss_finite = tf.math.is_finite(losses[0])
        grads_finite = tf.math.is_finite(norm)
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm, use_norm=norm)
        counted = record & grads_finite
        self.grad_norm.update_state(tf.where(counted, norm, 0.0),
                                    sample_weight=tf.cast(counted, tf.float32))
        if self.loss_scale is not None:
            self.overflowed.update_state(tf.cast(~grads_finite, tf.float32),
                                         sample_weight=tf.cast(record, tf.float32))

        self._finish_step(grads, variables, loss_finite, grads_finite, skip)

    def _gradients(self, batch, normalizers, variables, record):
        """Summed gradients and summed losses (total, generator, discriminator) of this
        replica's micro-batches; their predictions go to the metrics if `record`."""
        k = self.accumulation_steps
        if k == 1:
            return self._piece(batch, normalizers, variables, record)
        # [b, ...] -> [k, b / k, ...]: micro-batch i is a gather with static shapes (XLA).
        pieces = {name: tf.reshape(value, [k, value.shape[0] // k] + value.shape[1:].as_list())
                  for name, value in batch.items()}
        grads = [tf.zeros_like(v) for v in variables]
        losses = [tf.constant(0.0)] * 3
        for i in tf.range(k):
            piece = {name: value[i] for name, value in pieces.items()}
            piece_grads, piece_losses = self._piece(piece, normalizers, variables, record)
            grads = [a + b for a, b in zip(grads, piece_grads)]
            losses = [a + b for a, b in zip(losses, piece_losses)]
        return grads, losses

    def _piece(self, batch, normalizers, variables, record):
        with tf.GradientTape() as tape:
            outputs = self.model(batch, step=self.state.step, training=True, phase=self.phase,
                                 normalizers=call_counts(normalizers))
            loss = outputs["loss"]
            if self.loss_scale is not None:
                loss = loss * self.loss_scale.scale
        grads = tape.gradient(loss, variables)
        # Dense gradients: embedding lookups give IndexedSlices, which accumulate and
        # all-reduce poorly. A variable the phase does not reach gets zeros.
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(grads, variables)]
        self.metrics.update_predictions(outputs, keep=record)
        losses = [outputs["loss"], outputs["generator_loss"], outputs["discriminator_loss"]]
        return grads, [tf.cast(x, tf.float32) for x in losses]

    def _finish_step(self, grads, variables, loss_finite, grads_finite, skip):
        """Apply (or skip) the update and advance the step, in replica context: with no
        tf.cond around it, apply_gradients and the state's assignments merge_call where the
        strategy needs it."""
        state = self.state
        healthy = loss_finite & (grads_finite | tf.constant(self.loss_scale is not None))
        apply = loss_finite & grads_finite & ~skip & (state.bad_step < 0)
        self.optimizer.apply_gradients(zip(grads, variables), where=apply)
        first_bad = ~healthy & ~skip & (state.bad_step < 0)
        state.bad_step.assign(tf.where(first_bad, state.step, state.bad_step))
        if self.loss_scale is not None:
            self.loss_scale.update(grads_finite)
        state.step.assign_add(1)


class PretrainingEvaluator(orbit.StandardEvaluator):
    """orbit evaluator: the pre-training losses and metrics on held-out records (dropout
    off; masks and samples keyed by the examples, so every evaluation sees the same). An
    evaluation's steps run in one tf.function (a while loop, as the trainer's loop): one
    call from the host per evaluation, not one per step."""

    def __init__(self, model: ElectraPretrainer, strategy, eval_dataset, state: TrainState,
                 local_replicas: int = 1, two_stage: bool = False):
        super().__init__(eval_dataset, orbit.StandardEvaluatorOptions(
            use_tf_function=True, use_tf_while_loop=True))
        self.model, self.strategy, self.state = model, strategy, state
        self.local_replicas, self.two_stage = local_replicas, two_stage
        self.phase = "joint"
        with strategy.scope():
            self.metrics = PretrainingMetrics()
        self.last_eval = {}

    def eval_begin(self):
        """Two-stage training evaluates the stage that made the weights (as it trains:
        joint, it added 50 x an untrained discriminator's loss to the generator stage's)."""
        self.metrics.reset()
        if self.two_stage:
            phase = "discriminator" if int(self.state.stage.numpy()) else "generator"
            if phase != self.phase:
                self.phase = phase
                self._eval_loop_fn = None  # orbit traces the loop again for the phase

    def eval_step(self, iterator):
        self.strategy.run(self._replica_step, args=(next(iterator),))

    def _replica_step(self, batch):
        context = tf.distribute.get_replica_context()
        batch = _replica_slice(batch, context, self.local_replicas)
        normalizers = sum_over_replicas(context, self.model.loss_normalizers(batch))
        outputs = self.model(batch, step=self.state.step, training=False, phase=self.phase,
                             normalizers=call_counts(normalizers))
        losses = sum_over_replicas(context, [outputs["loss"], outputs["generator_loss"],
                                             outputs["discriminator_loss"]])
        self.metrics.update_losses(*losses, parts=self.model.loss_parts(self.phase))
        self.metrics.update_predictions(outputs)

    def eval_end(self):
        self.last_eval = self.metrics.result()
        return {}


def _replica_slice(batch, context, local_replicas: int):
    """This replica's part of the worker's batch: slice i of `local_replicas` equal slices,
    i the replica's index on this worker (replica ids run worker by worker)."""
    if local_replicas == 1:
        return batch
    index = context.replica_id_in_sync_group % local_replicas
    return {name: tf.reshape(value, [local_replicas, value.shape[0] // local_replicas]
                             + value.shape[1:].as_list())[index]
            for name, value in batch.items()}
