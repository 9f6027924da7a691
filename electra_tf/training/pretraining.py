"""A pre-training run: what `scripts/run_pretraining.py` does, bound by gin.

    validate data and config -> strategy -> model, optimizer, input pipeline
    -> restore the latest checkpoint (or initialise) -> orbit Controller: loops of
    `steps_per_loop` steps, checkpoints at the multiples of `checkpoint_every` and
    evaluations at those of `eval_every` (a loop ends early to meet them, so an interrupted
    run keeps the same steps), TensorBoard scalars and a console line per loop

Everything the run writes is in the model dir: `ckpt-N` checkpoints (model, optimizer, the
input iterator and the loop state, so rerunning the same command resumes exactly where the
last checkpoint left off), `train/` and `eval/` TensorBoard runs, `operative_config.gin`
and `model_info.json`. SIGTERM (a preemption) saves a checkpoint at the end of the loop it
arrives in (with several workers, TensorFlow's PreemptionCheckpointHandler, told of the
signal, has them agree on a step: the end of the loop after) and exits with code 143; so
does Ctrl-C (SIGINT), exiting with 130, and a second Ctrl-C stops without saving (each
answered when it arrives, though a loop is one TensorFlow call: `signals`).

A loss that is not finite stops the run with a line naming the step (`on_nonfinite="stop"`,
the default), or restores the last checkpoint and skips the offending batch, at most
`max_restores` times (`on_nonfinite="restore"`).

Two-stage training (`pretrainer.algorithm = 'two_stage'`) trains the generator alone for
`two_stage_steps`, initialises the discriminator from it, then trains the discriminator
with the generator frozen; the learning-rate schedule starts again at the switch.
"""

import collections
import contextlib
import dataclasses
import fnmatch
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time

from absl import logging as absl_logging
import gin
import keras
import numpy as np
import orbit
import tensorflow as tf
# Not in the public API: rewriting a checkpoint state as CheckpointManager does, silence()
# and turning op determinism back off.
from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.framework import config as _determinism
from tensorflow.python.util import deprecation

from electra_tf import atomic, gin_files, tokenization
from electra_tf.data import masking, pipeline, writer
from electra_tf.errors import UserInputError, first_line
from electra_tf.modeling import factory, flops
from electra_tf.modeling.config import EncoderConfig
from electra_tf.training import optimization, strategies, summaries
from electra_tf.training import xla_cache as _xla_cache
from electra_tf.training.signals import INTERRUPTED_EXIT_CODE, INTERRUPTED_LINE, StopOnSignal
from electra_tf.training.trainer import (LossScale, PretrainingEvaluator, PretrainingTrainer,
                                         TrainState)

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
ON_NONFINITE = ("stop", "restore")
OPERATIVE_CONFIG = "operative_config.gin"
MODEL_INFO = "model_info.json"
SET_ASIDE = "set_aside"  # checkpoints not every worker saved (_common_checkpoint)
PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM
# A discriminator AUC within this of 0.5 for this many steps is reported as a collapse.
CHANCE_AUC_MARGIN = 0.03
COLLAPSE_STEPS = 500


@gin.configurable("pretraining", denylist=[
    "model_dir", "train_data", "eval_data", "vocab_file", "strategy", "tpu", "seed",
    "deterministic", "dry_run", "init_checkpoint", "log", "exit_at_once"])
def run_pretraining(model_dir: str, train_data: str, eval_data: str | None = None,
                    vocab_file: str | None = None, strategy: str = "default",
                    tpu: str | None = None, seed: int = 0, deterministic: bool = False,
                    dry_run: bool = False, init_checkpoint: str | None = None, *,
                    num_train_steps: int = 1_000_000, train_batch_size: int = 128,
                    max_seq_length: int = 128, steps_per_loop: int = 100,
                    checkpoint_every: int = 5000, keep_checkpoints: int | None = 5,
                    eval_every: int | None = None, eval_steps: int = 100,
                    mask_prob: float = 0.15, max_predictions_per_seq: int | None = None,
                    whole_word_masking: bool = False, premasked_records: str = "remask",
                    gradient_accumulation_steps: int = 1,
                    clip_norm: float | None = 1.0, precision: str = "float32",
                    jit_compile: bool = False, steps_per_call: int | None = None,
                    xla_cache: bool = True, on_nonfinite: str = "stop",
                    max_restores: int = 3, two_stage_steps: int | None = None,
                    device_name: str | None = None, log=print,
                    exit_at_once: bool = False) -> dict:
    """Pre-train an ELECTRA (or a variant); returns the last loop's and evaluation's figures.

    Paths and run switches are arguments (the script's flags); hyperparameters are gin
    bindings (`pretraining.*`, `pretrainer.*`, `optimizer.*`; gin/*.gin bind them from the
    macros NUM_TRAIN_STEPS, TRAIN_BATCH_SIZE, ...).

    Args:
      model_dir: where checkpoints, summaries and configs go (local or gs://).
      train_data, eval_data: comma-separated globs of pre-training TFRecords.
      vocab_file: the vocab the data was built with; default: the one named in the data's
        metadata.json.
      strategy, tpu: see `strategies.create_strategy`.
      seed: keys initialisation, data order, masks, samples and dropout.
      deterministic: also make TensorFlow's ops deterministic (a rerun gives the same
        weights, bit for bit).
      dry_run: build the model and the input pipeline, write and return model_info.json.
      init_checkpoint: start from these weights (a model dir or checkpoint prefix, e.g. an
        imported checkpoint) when the model dir has no checkpoint yet.
      num_train_steps, train_batch_size (global), max_seq_length, steps_per_loop (steps
        per tf.function call and per console line; a loop ends early at a multiple of
        checkpoint_every or eval_every), checkpoint_every, keep_checkpoints (None: every
        one), eval_every (default: checkpoint_every), eval_steps: the loop.
      mask_prob, max_predictions_per_seq, whole_word_masking: the input pipeline's masking.
      premasked_records: for pre-masked BERT records, "remask" (their original tokens
        masked again as any record's) or "as_written" (BERT's static masks as they are);
        see `pipeline.pretraining_dataset`'s `premasked`.
      gradient_accumulation_steps: micro-batches per replica batch.
      clip_norm: global-norm clipping (None: off).
      precision: "float32", "mixed_bfloat16" or "mixed_float16" (with loss scaling).
      jit_compile: compile the step with XLA: the whole step on one replica or a TPU,
        each replica's forward and backward pass with several elsewhere (the all-reduces
        and the update outside XLA).
      steps_per_call: with jit_compile, steps one compiled program runs (see
        `trainer.PretrainingTrainer`): on a GPU each call ends with the host waiting for
        the device, so fewer calls keep the device busy. Default: steps_per_loop with XLA
        on one replica; 1 with several replicas (their all-reduce stays one per call) or
        on TPUs (refused there: orbit's loop launches one TPU program a step; k steps in
        one program are untested on a TPU).
      xla_cache: with jit_compile, keep the compiled programs in `<model_dir>/xla_cache/`
        so that a rerun (a resume) loads them instead of compiling again; needs
        `xla_cache.stage()` before TensorFlow starts, as the script does (see
        `training/xla_cache.py`, also for where it stays off).
      on_nonfinite, max_restores: what a non-finite loss does (see the module docstring).
      two_stage_steps: the generator stage's length for algorithm 'two_stage' (default:
        half the run).
      device_name: the accelerator's name for MFU (default: detected; e.g. "TPU v4").
      log: where progress lines go.
      exit_at_once: a second Ctrl-C ends the process at once (a script's), rather than by
        KeyboardInterrupt once TensorFlow's call returns (a notebook's kernel lives on).
    """
    gin_files.check_read_by("pre-training")
    gin_files.check_types(
        "pretraining", {"mask_prob": mask_prob, "clip_norm": clip_norm,
                        "whole_word_masking": whole_word_masking, "jit_compile": jit_compile,
                        "xla_cache": xla_cache, "device_name": device_name,
                        "max_predictions_per_seq": max_predictions_per_seq,
                        "steps_per_call": steps_per_call, "two_stage_steps": two_stage_steps},
        integers=("max_predictions_per_seq", "steps_per_call", "two_stage_steps"),
        numbers=("mask_prob", "clip_norm"), flags=("whole_word_masking", "jit_compile",
                                                   "xla_cache"),
        strings=("device_name",), may_be_none=("clip_norm", "device_name",
                                               "max_predictions_per_seq", "steps_per_call",
                                               "two_stage_steps"),
        macros={"mask_prob": "MASK_PROB"})
    if clip_norm is not None and not clip_norm > 0:  # (a negative norm clipped nothing)
        raise UserInputError(f"pretraining.clip_norm={clip_norm!r} must be a positive number, "
                             "or None for no clipping")
    _check_settings(num_train_steps=num_train_steps, train_batch_size=train_batch_size,
                    max_seq_length=max_seq_length, steps_per_loop=steps_per_loop,
                    checkpoint_every=checkpoint_every,
                    **({} if keep_checkpoints is None else {"keep_checkpoints": keep_checkpoints}),
                    eval_steps=eval_steps, gradient_accumulation_steps=gradient_accumulation_steps,
                    max_restores=max_restores,
                    **({} if eval_every is None else {"eval_every": eval_every}))
    _check_choice("pretraining.precision", precision, PRECISIONS)
    _check_choice("pretraining.on_nonfinite", on_nonfinite, ON_NONFINITE)
    _check_choice("pretraining.premasked_records", premasked_records, pipeline.PREMASKED_MODES)
    # The run sets Keras' global precision policy, op determinism (--deterministic) and
    # the process's SIGTERM and SIGINT handlers (which only flag the signal for the run's
    # loop, and hold the run's model): put them back afterwards (tests and notebooks run
    # several things in one process; after the run a signal must end the process again, and
    # a later run without --deterministic must not pay for determinism). The global random
    # seed stays as the run set it.
    policy = keras.mixed_precision.dtype_policy()
    determinism = _determinism.is_op_determinism_enabled()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with contextlib.ExitStack() as held:
            return _run(**locals())
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
        if not determinism and _determinism.is_op_determinism_enabled():
            _determinism.disable_op_determinism()
        if threading.current_thread() is threading.main_thread():
            for number, handler in handlers.items():
                if handler is not None:
                    signal.signal(number, handler)


def _quiet_peer_watcher() -> None:
    """The PreemptionCheckpointHandler's watcher thread dies with a traceback of its own when
    another worker is lost; the run's own error (cli.run: one line) says that already."""
    hook = threading.excepthook
    if getattr(hook, "quiet_peer_watcher", False):
        return

    def quiet(args):
        if not (str(getattr(args.thread, "name", "")).startswith("PeerTerminationWatcher")
                and isinstance(args.exc_value, tf.errors.UnavailableError)):
            hook(args)

    quiet.quiet_peer_watcher = True
    threading.excepthook = quiet


def _run(model_dir, train_data, eval_data, vocab_file, strategy, tpu, seed, deterministic,
         dry_run, init_checkpoint, num_train_steps, train_batch_size, max_seq_length,
         steps_per_loop, checkpoint_every, keep_checkpoints, eval_every, eval_steps, mask_prob,
         max_predictions_per_seq, whole_word_masking, premasked_records,
         gradient_accumulation_steps, clip_norm,
         precision, jit_compile, steps_per_call, xla_cache, on_nonfinite, max_restores,
         two_stage_steps, device_name, log, held, exit_at_once, handlers, **_):

    # Multi-worker collectives must be configured before TensorFlow runs any op.
    strategies.check_tpu_node_paths(strategy, tpu, {  # (before connecting: no network)
        "--model_dir": model_dir, "--train_data": train_data, "--eval_data": eval_data,
        "--init_checkpoint": init_checkpoint})
    strategy = strategies.create_strategy(strategy, tpu, log)
    if threading.current_thread() is threading.main_thread() and callable(
            handlers[signal.SIGTERM]):
        # A multi-worker strategy's preemption watcher takes SIGTERM; until the loop's own
        # handler is installed, the caller's answers it (a script's: one line, exit 143).
        signal.signal(signal.SIGTERM, handlers[signal.SIGTERM])
    replicas = strategy.num_replicas_in_sync
    if isinstance(strategy, tf.distribute.TPUStrategy) and precision == "mixed_float16":
        raise UserInputError("pretraining.precision='mixed_float16' is for GPUs; TPUs compute "
                             "in bfloat16: set pretraining.precision='mixed_bfloat16'")

    # -- the inputs: checked before anything is built or written
    atomic.check_folder(model_dir)
    _check_not_another_output(model_dir)
    if init_checkpoint and not tf.train.latest_checkpoint(model_dir):  # read: it must exist
        from electra_tf.training.checkpoints import latest_checkpoint  # (it imports this)
        _check_not_fine_tuned(init_checkpoint)
        latest_checkpoint(init_checkpoint)  # a model dir or a checkpoint prefix
    train_files = pipeline.list_files(train_data, "--train_data")
    vocab_file = pipeline.vocab_file_of(vocab_file, train_files, train_data)
    info = pipeline.validate_data(train_files, max_seq_length, vocab_file)
    eval_info, eval_files = None, []
    evaluation = [f"pretraining.{k}" for k in ("eval_every", "eval_steps")
                  if k in gin.get_bindings("pretraining")]
    if evaluation and not eval_data:
        log(f"note: {' and '.join(evaluation)} {'set' if evaluation[1:] else 'sets'} how "
            "the run evaluates, but no --eval_data "
            "was given: nothing is evaluated (pass --eval_data to evaluate)")
    if eval_data:
        eval_files = pipeline.list_files(eval_data, "--eval_data")
        eval_info = pipeline.validate_data(eval_files, max_seq_length, vocab_file,
                                           data_flag="--eval_data", against="--train_data")
    vocab = tokenization.load_vocab(vocab_file)
    ids = {t: i for i, t in enumerate(vocab)}
    # Before any variable is made: each is the chief's value sent to the others, so workers
    # that make different ones fall out of step there. (The files by name: each worker may
    # see the data at its own path.)
    strategies.check_same_settings(strategy, {
        "gin configs": gin.config_str(), "--seed": seed, "--deterministic": deterministic,
        "--dry_run": dry_run,
        # (names with their examples: same-named shards of another build differ)
        "--train_data files": _train_files(train_files),
        "--eval_data files": _train_files(eval_files),
        "vocabs": tokenization.vocab_sha256(vocab_file),
        "--init_checkpoint": init_checkpoint and os.path.basename(init_checkpoint.rstrip("/"))})

    keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.mixed_precision.set_dtype_policy(precision)
    if train_batch_size % (replicas * gradient_accumulation_steps):
        raise UserInputError(
            f"TRAIN_BATCH_SIZE={train_batch_size} does not split into {replicas} replicas x "
            f"{gradient_accumulation_steps} micro-batches; use a multiple of "
            f"{replicas * gradient_accumulation_steps}")
    strategies.check_xla_off_tpu("pretraining.jit_compile", jit_compile, strategy)
    steps_per_call = _steps_per_call(steps_per_call, steps_per_loop, jit_compile, strategy)
    task_id, chief = strategies.worker_info(strategy)
    note = _shared_files_note(train_files, eval_files)
    if note and chief:
        log(note)
    if (init_checkpoint and chief and tf.train.latest_checkpoint(model_dir)
            and not _holds_an_import(model_dir)):  # (refused below)
        log(f"note: --init_checkpoint={init_checkpoint} is not used: --model_dir={model_dir} "
            "holds a run, which this one resumes (--init_checkpoint starts a new --model_dir)")
    if eval_data:
        eval_steps = _eval_steps(eval_data, train_batch_size, strategy, eval_steps, chief, log)
    workers = pipeline.num_workers(strategy)
    share = train_batch_size // workers
    if chief and pipeline.batches_per_worker(train_files, share, workers, 1) == 0:
        log(f"note: --train_data={train_data} holds fewer examples than one batch of {share}"
            + (" on a worker" if share != train_batch_size else "") + f" (TRAIN_BATCH_SIZE="
            f"{train_batch_size}): each batch repeats them; build more data, or lower "
            "TRAIN_BATCH_SIZE")

    with strategy.scope():
        model = factory.build_pretrainer(vocab_size=len(vocab), seed=seed,
                                         cls_id=ids[tokenization.CLS_TOKEN],
                                         sep_id=ids[tokenization.SEP_TOKEN])
        try:
            model.check_training_options(new_run=not tf.train.latest_checkpoint(model_dir))
        except UserInputError as e:
            raise factory.as_bound(e) from None
        if model.mask_prob != mask_prob:  # Electric's noise ratio reads the model's
            raise UserInputError(
                f"pretraining.mask_prob={mask_prob} (the data's masking) and "
                f"pretrainer.mask_prob={model.mask_prob} differ; bind MASK_PROB, which sets "
                "both")
        if model.discriminator_config.max_position_embeddings < max_seq_length:
            positions = model.discriminator_config.max_position_embeddings
            raise UserInputError(
                f"MAX_SEQ_LENGTH={max_seq_length} exceeds the model's max_position_embeddings="
                f"{positions}; " + (
                    f"--init_checkpoint's model has {positions} positions: build the data "
                    f"with --max_seq_length={positions} or less" if init_checkpoint else
                    "raise pretrainer.max_position_embeddings or use shorter sequences"))
        two_stage = model.algorithm == "two_stage"
        if two_stage_steps is not None and not two_stage:
            raise UserInputError(
                f"pretraining.two_stage_steps={two_stage_steps} applies to two-stage training "
                f"(ablations/two_stage.gin; this run's algorithm: '{model.algorithm}'); unbind "
                "it")
        if two_stage and two_stage_steps is None:
            two_stage_steps = num_train_steps // 2  # the paper's split
        if two_stage and not 0 < two_stage_steps < num_train_steps:
            raise UserInputError(
                f"algorithm 'two_stage' needs pretraining.two_stage_steps inside the run (0, "
                f"{num_train_steps}); got {two_stage_steps}")
        # (its note on the schedule said once the run is known to start: it came before
        # the refusal of an --init_checkpoint of another size)
        schedule_notes = []
        optimizer = optimization.create_optimizer(
            num_train_steps=num_train_steps, aggregate_gradients=False,
            restart_at=two_stage_steps if two_stage else None,
            log=schedule_notes.append if chief else None)
        optimizer.build(model.trainable_variables)
        state = TrainState(_skip_capacity(model_dir, max_restores))
        loss_scale = LossScale() if precision == "mixed_float16" else None

    # A checkpoint's data position names the input files by their index in train_files,
    # so that the data may move; one of a run begun before names them by path, and such a
    # run resumes so (pipeline.pretraining_dataset's files_by_index).
    data_position = "file_index"
    earlier = _model_info_of(model_dir) if tf.train.latest_checkpoint(model_dir) else {}
    if earlier.get("train_batch_size"):  # (a model dir whose model_info.json was not copied
        data_position = earlier.get("data_position", "file_path")  # is taken as this one's)
    data_options = dict(max_seq_length=max_seq_length, vocab_file=vocab_file,
                        mask_prob=mask_prob, max_predictions_per_seq=max_predictions_per_seq,
                        whole_word_masking=whole_word_masking, seed=seed,
                        premasked=premasked_records,
                        files_by_index=data_position == "file_index")
    dataset, local_replicas = pipeline.worker_dataset(strategy, train_batch_size, train_data,
                                                      worker_index=task_id, data_info=info,
                                                      **data_options)
    if workers > 1:
        log(f"worker {task_id} of {workers} reads input pipeline {task_id}")
        note = pipeline.uneven_shares_note(train_files, workers)
        if note and chief:
            log(note)
    for data_info, flag in ((info, "--train_data"), (eval_info, "--eval_data")):
        note = data_info and pipeline.premasked_note(data_info, premasked_records, flag)
        if note and chief:
            log(note)
    # Pre-masked records kept as written are not masked by the run: no whole words either.
    whole_word_masking = whole_word_masking and not (
        info["premasked"] and premasked_records == "as_written")
    note = whole_word_masking and pipeline.whole_word_note(train_files, vocab, info)
    if note and chief:
        log(note)
    num_predictions = ((info["max_predictions"] if premasked_records == "as_written" else None)
                       or max_predictions_per_seq
                       or masking.default_max_predictions(max_seq_length, mask_prob))

    device = device_name or strategies.device_description(strategy)
    model_info = describe(model, seq_length=max_seq_length, num_predictions=num_predictions,
                          mask_prob=mask_prob, train_batch_size=train_batch_size,
                          num_train_steps=num_train_steps, two_stage_steps=two_stage_steps)
    peak = flops.peak_flops_per_second(
        device, precision, tf.config.experimental.tensor_float_32_execution_enabled()
    ) if device else None
    if device_name and peak is None and chief:
        log(f"note: pretraining.device_name={device_name!r} has no known peak for {precision} "
            "(electra_tf.modeling.flops.PEAK_FLOPS): throughput/mfu is not written")
    metadata = info["metadata"] or {}
    cased = "lower_case" not in metadata and writer.vocab_is_cased(vocab)
    model_info.update(strategy=type(strategy).__name__, replicas=replicas, workers=workers,
                      precision=precision,
                      device=device, seed=seed, whole_word_masking=whole_word_masking,
                      **({"premasked_records": premasked_records} if info["premasked"] else {}),
                      **({"two_stage_steps": two_stage_steps} if two_stage else {}),
                      peak_flops_per_second=peak and peak * strategies.num_chips(strategy,
                                                                                 device),
                      vocab_file=(vocab_file if "://" in vocab_file
                                  else os.path.abspath(vocab_file)),
                      vocab_size=len(vocab), vocab_sha256=tokenization.vocab_sha256(vocab_file),
                      # How the data was tokenized (export tokenizes raw text the same way);
                      # data without metadata.json (the official builder's) is cased if
                      # its vocab is.
                      lower_case=metadata.get("lower_case", not cased),
                      strip_accents=metadata.get("strip_accents",
                                                 metadata.get("lower_case", not cased)),
                      train_files=_train_files(train_files), data_position=data_position,
                      **_repeated_names(train_files, data_position))
    _check_resume(model_dir, model_info, info["metadata"])
    # From the first write on: a second run on this model dir stops here.
    strategies.hold_model_dir(held, model_dir, "run_pretraining.py", strategy)
    if dry_run:
        next(iter(dataset))  # the pipeline runs
        if init_checkpoint and not tf.train.latest_checkpoint(model_dir):  # and it fits
            source = _model_info_of(init_checkpoint)
            read, fresh, note = _initialise(model, init_checkpoint, source, model_info,
                                            info["metadata"])
            model_info.update(_lineage(read, source, max_seq_length, fresh))
            for line in _init_notes(init_checkpoint, note, source, model_info):
                log(line)
        elif tf.train.latest_checkpoint(model_dir):  # what the resume keeps
            model_info.update(_kept_lineage(model_dir))
        for line in schedule_notes:
            log(line)
        if chief and not tf.train.latest_checkpoint(model_dir):  # keep a run's own record
            atomic.write_text(os.path.join(model_dir, MODEL_INFO), _info_json(model_info))
        log(_info_json(model_info))
        return model_info

    # -- the trainer. Under XLA its loop is traced before a checkpoint is restored: a compiled
    # step's key in the persistent compilation cache holds the name its trace got, numbered
    # by a process-wide counter that a restore advances, and a resumed run must give its
    # step the first run's name to load it.
    iterator = iter(dataset)
    trainer = PretrainingTrainer(
        model, optimizer, strategy, iterator, state, global_batch_size=train_batch_size,
        seq_length=max_seq_length, local_replicas=local_replicas,
        accumulation_steps=gradient_accumulation_steps, clip_norm=clip_norm,
        loss_scale=loss_scale, jit_compile=jit_compile, steps_per_call=steps_per_call,
        flops_per_example=(model_info["two_stage_flops_per_example"]["hardware"] if two_stage
                           else model_info["train_flops_per_example_hardware"]),
        peak_flops=model_info["peak_flops_per_second"],
        two_stage_steps=two_stage_steps if two_stage else None)
    cache = None
    if jit_compile and xla_cache and two_stage:
        log("XLA compilation cache off: a two-stage run traces its stages at other points "
            "when resumed, so it would compile them again anyway")
    elif jit_compile and xla_cache:
        cache = _xla_cache.attach(model_dir, strategy, log)
    # (several workers agree on it below, once the step they go on from is known)
    finished = _finished(model_dir, num_train_steps, eval_data)
    if jit_compile and not two_stage and not (finished and workers == 1):
        trainer.trace_loop()

    # -- checkpoints: restore the latest, or start (from init_checkpoint)
    # Keras 3's SeedGenerators (dropout) are not tracked by tf.train.Checkpoint; without
    # their state a resumed run would drop other units than the uninterrupted one.
    dropout_seeds = [v.value for v in model.variables if v.path.endswith("seed_generator_state")]
    objects = dict(model=model, optimizer=optimizer, state=state, iterator=iterator,
                   dropout_seeds=dropout_seeds)
    if loss_scale is not None:
        objects["loss_scale"] = loss_scale
    checkpoint = tf.train.Checkpoint(**objects)
    directory = strategies.checkpoint_directory(model_dir, strategy)
    # A save killed midway leaves its shards in ckpt-N_temp/ (TensorFlow merges them into
    # ckpt-N.data-* and deletes the folder only when the save completes): a checkpoint's
    # size on disk that nothing reads.
    for stale in tf.io.gfile.glob(os.path.join(directory, "ckpt-*_temp")):
        tf.io.gfile.rmtree(stale)
        log(f"removed {stale}: the part-written files of an interrupted save")
    latest = _common_checkpoint(model_dir, directory, workers, log)
    if workers > 1:
        # Every worker has chosen before any saves: the chief's first checkpoint (ckpt-0)
        # would look to a worker that looked after it like a run to resume. And a finished
        # run ends only where every worker found it finished: one that went on alone would
        # wait for the others' collectives.
        # (and at the step every worker saved: a worker killed during its last save sets
        # the chief's last checkpoint aside, and the run goes on from an earlier one)
        finished = finished and latest is not None and _step_of(latest) == num_train_steps
        agreed = strategies.summed_over_workers(strategy, tf.constant(float(finished)))
        finished = int(agreed.numpy()) == replicas
    manager = tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=keep_checkpoints, step_counter=state.step)
    if latest:
        _restore(checkpoint, latest, model_dir)
        model_info.update(_kept_lineage(model_dir))
        step = int(state.step.numpy())
        if finished:  # nothing to train, evaluate or write (TensorBoard's events included)
            log(f"{model_dir} holds a finished run (step {step} of NUM_TRAIN_STEPS="
                f"{num_train_steps}): nothing to do; a larger NUM_TRAIN_STEPS extends it")
            return {"train": {}, "eval": {}, "step": step,
                    "weights_sha256": weights_digest(model)}
        _check_worker_positions(model_dir, workers, step, num_train_steps)
        log(f"resuming from {latest} (step {step})")
        position = _data_position(model_dir, task_id, step)
        if not chief and not manager.latest_checkpoint and tf.io.gfile.exists(
                position + ".index"):  # a finished run's: this worker's own batches go on
            try:
                tf.train.Checkpoint(iterator=iterator).read(position).assert_consumed()
            except tf.errors.NotFoundError as e:
                raise _moved_input(e, position, model_dir) or e from None
            log(f"worker {task_id} resumes its data position from {position}")
    elif init_checkpoint:
        earlier = _model_info_of(init_checkpoint)
        read, fresh, note = _initialise(model, init_checkpoint, earlier, model_info,
                                        info["metadata"])
        model_info.update(_lineage(read, earlier, max_seq_length, fresh))
        log(f"initialised the model from {model_info['init_checkpoint']}")
        for line in _init_notes(init_checkpoint, note, earlier, model_info):
            log(line)
    for line in schedule_notes:
        log(line)
    if chief:
        own_vocab = os.path.join(model_dir, "vocab.txt")
        if not tf.io.gfile.exists(own_vocab):  # the dir stands alone when the data moves
            with tf.io.gfile.GFile(vocab_file) as f:
                atomic.write_text(own_vocab, f.read())
        atomic.write_text(os.path.join(model_dir, MODEL_INFO), _info_json(model_info))
        _keep_earlier_config(model_dir, int(state.step.numpy()), gin.operative_config_str(), log)
        atomic.write_text(os.path.join(model_dir, OPERATIVE_CONFIG), gin.operative_config_str())

    # -- the loop
    monitor = _Monitor(checkpoint, manager, state, num_train_steps,
                       model_dir if chief else None, on_nonfinite, max_restores, log)
    evaluator = None
    if eval_data:
        eval_dataset, _ = pipeline.worker_dataset(strategy, train_batch_size, eval_data,
                                                  worker_index=task_id, is_training=False,
                                                  data_info=eval_info, **data_options)
        evaluator = PretrainingEvaluator(model, strategy, eval_dataset, state, local_replicas,
                                         two_stage=two_stage)
    monitor.trainer, monitor.evaluator = trainer, evaluator
    # SIGTERM (and Ctrl-C) sets a flag; this process handles it itself, since TensorFlow's
    # PreemptionCheckpointHandler does nothing on Google Cloud's TPU and CPU VMs and watches
    # maintenance events, not SIGTERM, on its GPU VMs (a Spot VM's stop would have saved
    # nothing there).
    stop = StopOnSignal(log if chief else lambda _: None, exit_at_once=exit_at_once)
    terminated = stop.requested
    monitor.stop = stop
    if threading.current_thread() is threading.main_thread():
        stop.install()
        held.callback(stop.uninstall)
    if workers == 1:
        # One process (default, mirrored, TPU): the end of the loop the signal arrives in
        # saves and exits.
        def save_if_preempted(_):
            if terminated.is_set():
                save(int(state.step.numpy()))
                monitor.preempted()
    else:
        # The workers must agree on the step to save at: TensorFlow's handler does that,
        # watching the flag (on every platform it serves), then saves (with `save`: not
        # twice) and exits at once (its grace period is an hour on Google Cloud's GPU VMs).
        with strategy.scope():
            preemption = tf.distribute.experimental.PreemptionCheckpointHandler(
                _cluster_resolver(strategy), manager,
                termination_config=tf.distribute.experimental.TerminationConfig(
                    termination_watcher_fn=terminated.is_set, exit_fn=monitor.preempted,
                    grace_period=0,
                    save_fn=lambda *_, **__: save(int(state.step.numpy()))))
        _quiet_peer_watcher()

        def save_if_preempted(_):
            # Its save reads TensorFlow's own deprecated total_run_calls, whose 6-line
            # warning would be all a preempted run prints besides our line.
            with deprecation.silence():
                preemption.save_checkpoint_if_preempted(checkpoint_number=state.step,
                                                        check_interval=False)

    def save_on_grid(_):
        step = int(state.step.numpy())
        if two_stage and step == two_stage_steps and int(state.stage.numpy()) == 0:
            return  # the switch, at the next loop's start, saves this step, switched
        if step % checkpoint_every == 0 or step == num_train_steps:
            save(step)

    def save(step: int):
        # Not twice: a loop ended on the grid and then a SIGTERM; a restore after a
        # non-finite loss puts the step back to the checkpoint it read.
        latest_saved = manager.latest_checkpoint
        if latest_saved is None or _step_of(latest_saved) != step:
            try:
                path = manager.save(checkpoint_number=step, check_interval=False)
            except Exception:
                # (a full disk): what this save wrote goes, so that the space is free for the
                # rerun, which resumes from the last checkpoint; but not a checkpoint the
                # save completed and recorded as the latest before it failed later (deleting
                # the oldest one)
                state = tf.train.get_checkpoint_state(directory)
                recorded = state is not None and os.path.basename(
                    state.model_checkpoint_path) == f"ckpt-{step}"
                for partial in tf.io.gfile.glob(os.path.join(
                        directory, f"ckpt-{step}_temp" if recorded else f"ckpt-{step}[._]*")):
                    (tf.io.gfile.rmtree if tf.io.gfile.isdir(partial)
                     else tf.io.gfile.remove)(partial)
                raise
            monitor.skips_unsaved = False
            if chief:
                log(f"saved checkpoint to {path}.")

    def switch_stage(step: int):
        # Saved unless a SIGTERM at the generator stage's end saved this step already (not
        # switched: a resume switches again): a checkpoint is written once, as TensorFlow
        # would rewrite the existing one's index in place.
        save(step)
        monitor.stage_switched(step)

    trainer.on_stage_switch = switch_stage

    # Loops end on multiples of checkpoint_every and eval_every (and at the two-stage
    # switch), so checkpoints and evaluations fall on the same steps whether or not a run
    # was interrupted, resumed or saved off the grid (SIGTERM, the switch). The controller
    # gets no CheckpointManager: it would count its interval from the last save.
    eval_every = eval_every or checkpoint_every
    publish = [lambda _: cache.publish()] if cache else []
    orbit.controller._log = _orbit_log  # pylint: disable=protected-access
    controller = orbit.Controller(
        global_step=state.step, trainer=trainer, evaluator=evaluator, strategy=strategy,
        steps_per_loop=_loop_lengths(
            steps_per_loop, [checkpoint_every] + ([eval_every] if evaluator else []),
            two_stage_steps if two_stage else None),
        train_actions=[*publish, monitor.after_train_loop, save_on_grid, save_if_preempted],
        eval_actions=[monitor.after_eval], summary_dir=None)
    if not latest:
        save(0)  # for a non-finite loss

    def fresh_iterator():
        iterator = iter(pipeline.worker_dataset(strategy, train_batch_size, train_data,
                                                worker_index=task_id, data_info=info,
                                                **data_options)[0])
        checkpoint.iterator = iterator
        trainer.train_dataset = iterator
    monitor.fresh_iterator = fresh_iterator

    def train_to(target: int) -> bool:
        """The controller's loops up to `target`; False where a restore past a non-finite
        loss ended them early (the steps to the target are run again, and the
        evaluations on the way, by the caller's next call)."""
        try:
            controller.train(target, checkpoint_at_completion=False)
        except _Restored:
            return False
        return True

    step = int(state.step.numpy())
    if chief and (step == 0 or tf.io.gfile.exists(_kept_config(model_dir, step))):
        monitor.write_config(gin.operative_config_str())  # a new run's or a changed one's
    if evaluator is None:
        while not train_to(num_train_steps):
            pass  # (a restore: on from the step restored)
    elif (0 < step and (step % eval_every == 0 or step == num_train_steps)
          or step == 0 and init_checkpoint) and step not in _evaluated_steps(model_dir):
        # An evaluation killed (kill -9) after its step's checkpoint was saved runs again;
        # weights from --init_checkpoint are evaluated before they train (a baseline).
        controller.evaluate(eval_steps)
        save_if_preempted(None)
    while evaluator is not None and step < num_train_steps:
        if train_to(min(num_train_steps, (step // eval_every + 1) * eval_every)):
            controller.evaluate(eval_steps)
            save_if_preempted(None)  # a SIGTERM that came during the evaluation
        step = int(state.step.numpy())
    if not chief:  # its checkpoints copy the chief's but for the data position: keep that
        tf.io.gfile.rmtree(manager.directory)
        tf.train.Checkpoint(iterator=checkpoint.iterator).write(
            _data_position(model_dir, task_id, int(state.step.numpy())))
    return {"train": trainer.last_loop.get("values", {}),
            "eval": evaluator.last_eval if evaluator else {}, "step": int(state.step.numpy()),
            "weights_sha256": weights_digest(model)}


def weights_digest(model) -> str:
    """SHA-256 of the model's weights (their bytes, in order): equal digests mean
    bit-identical weights, e.g. across workers or between a resumed and a straight run."""
    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()


# ------------------------------------------------------------------------------ the loop's eyes


class _Restored(Exception):
    """A restore past a non-finite loss happened in a loop: the controller's call ends
    there (it would go on to its target, past the evaluations the restore went back
    before)."""


class _Monitor:
    """After every loop: TensorBoard scalars, the console line, the health check; after an
    evaluation, its scalars and line; the two-stage switch; the preemption exit."""

    def __init__(self, checkpoint, manager, state, num_train_steps, summary_root, on_nonfinite,
                 max_restores, log):
        self.trainer = self.evaluator = self.stop = None
        self.fresh_iterator = None  # puts a new input pipeline in (before a restore)
        self.checkpoint, self.manager, self.state = checkpoint, manager, state
        self.num_train_steps, self.on_nonfinite, self.max_restores = (
            num_train_steps, on_nonfinite, max_restores)
        self.log = log
        self.skipped: list[int] = [int(s) for s in state.skip_steps.numpy() if s >= 0]
        self.summary_root = summary_root  # TensorBoard runs go to its train/ and eval/
        self.writers = {}
        self.start_step = int(state.step.numpy())  # where this run (or its last restore) began
        self.config = None  # (step, text) of the config text summary this run wrote
        self.chance_since = None  # the step since which the discriminator's AUC is ~0.5
        self.clock = None  # (time, step) at the start of the first loop that did not trace
        # A restore's skipped batch, until a checkpoint holds it (the one restored cannot
        # be written again at its step: a kill during that write would corrupt it)
        self.skips_unsaved = False

    def _writer(self, run: str):
        if run not in self.writers:
            self.writers[run] = tf.summary.create_file_writer(
                os.path.join(self.summary_root, run))
            _mark_start(self.writers[run], self.start_step + 1)
        return self.writers[run]

    def write(self, run: str, values: dict):
        if self.summary_root:
            self._writer(run)
            with self.writers[run].as_default(step=int(self.state.step.numpy())):
                for tag, value in values.items():
                    tf.summary.scalar(tag, value)
            self.writers[run].flush()

    def write_config(self, config: str):
        """The operative gin config as a text summary at the first step this run trains,
        after its START mark: a rerun from the same checkpoint (one that trained nothing
        with it: a non-finite loss, a kill) replaces it, as a restore past it writes it again."""
        self.config = (self.start_step + 1, config)
        if self.summary_root:
            with self._writer("train").as_default(step=self.config[0]):
                tf.summary.text("config/operative_config", "```\n" + config + "\n```")
            self.writers["train"].flush()

    def after_train_loop(self, _):
        loop = self.trainer.last_loop
        if loop["bad_step"] >= 0:
            self._nonfinite(loop["bad_step"])
            return
        values = loop["values"]
        step = int(self.state.step.numpy())
        if loop["steps"] and not loop["recorded"]:  # (its figures would read 0)
            self.log(f"step {step}/{self.num_train_steps} | skipped the batch whose loss was "
                     "not finite: nothing to report")
            self.clock = None
            return
        speed = f"{values['throughput/examples_per_second']:.1f} examples/s"
        if loop["cold"]:
            # Its time includes tracing (and XLA's compiling): its throughput would be a
            # dip in the curves at every start and resume, and its ETA too long.
            self.write("train", {k: v for k, v in values.items()
                                 if not k.startswith("throughput/")})
            self.clock = None
            speed += " (first loop: tracing and compiling included)"
        else:
            self.write("train", values)
            if self.clock is None:
                self.clock = (loop["start_time"], loop["start_step"])
            # The wall clock since the first loop that did not trace: evaluations and
            # checkpoints included, as they will be in the steps left.
            since, since_step = self.clock
            per_step = (time.time() - since) / max(step - since_step, 1)
            mfu = values.get("throughput/mfu")
            speed += ((f" | MFU {100 * mfu:.1f}%" if mfu is not None else "")
                      + f" | ETA {_duration((self.num_train_steps - step) * per_step)}")
        # (the losses the objective and phase have: BERT's is its generator's alone, a
        # uniform generator's its discriminator's)
        parts = ", ".join(f"{name} {values[f'loss/{name}']:.4f}"
                          for name in ("generator", "discriminator") if f"loss/{name}" in values)
        if "optimizer/loss_scale" in values:  # (as fine-tuning's line says it)
            speed += (f" | loss scale {values['optimizer/loss_scale']:g}, "
                      f"{loop['overflowed']} skipped")
        self.log(f"step {step}/{self.num_train_steps} | loss {values['loss/total']:.4f} "
                 f"({parts}) | {speed}")
        self._check_discriminator(values.get("discriminator/auc"), step, loop["steps"])

    def _check_discriminator(self, auc, step: int, loop_steps: int):
        """Warn once when the discriminator's AUC stays at chance: its output no longer
        depends on its input (its representations collapsed); runs seldom recover."""
        if auc is None or self.chance_since == -1:
            return
        if abs(auc - 0.5) > CHANCE_AUC_MARGIN:
            self.chance_since = None
            return
        if self.chance_since is None:
            self.chance_since = step - loop_steps
        if step - self.chance_since >= COLLAPSE_STEPS:
            self.log(f"warning: the discriminator's AUC has been {auc:.3f} (chance) since step "
                     f"{self.chance_since}: its output no longer depends on its input. Runs "
                     "seldom recover: restart with a longer warmup (WARMUP_STEPS), a lower "
                     "LEARNING_RATE or a smaller generator (pretrainer."
                     "generator_hidden_fraction); see BUILD.md, 'Is my run healthy?'")
            self.chance_since = -1  # once

    def after_eval(self, _):
        values = self.evaluator.last_eval
        self.write("eval", values)
        shown = {k: v for k, v in values.items()
                 if k in ("loss/total", "generator/mlm_accuracy", "discriminator/auc")}
        self.log(f"eval at step {int(self.state.step.numpy())} | "
                 + " | ".join(f"{k} {v:.4f}" for k, v in shown.items()))

    def _nonfinite(self, bad_step: int):
        # bad_step counts steps before it; the console's step N is the one that made N.
        said, said_skipped = bad_step + 1, ", ".join(str(s + 1) for s in self.skipped)
        latest = self.manager.latest_checkpoint
        restored_step = _step_of(latest) if latest else 0
        if self.on_nonfinite == "stop":
            raise UserInputError(
                f"the loss was not finite at step {said}; the run stopped and its last "
                f"checkpoint (step {restored_step}) is intact: lower LEARNING_RATE or raise "
                "WARMUP_STEPS, or set pretraining.on_nonfinite='restore' to skip such batches")
        if len(self.skipped) >= self.max_restores:
            raise UserInputError(
                f"the loss was not finite at step {said}, after {len(self.skipped)} "
                f"restores (steps {said_skipped}); the run stopped: lower "
                "LEARNING_RATE or raise WARMUP_STEPS")
        self.skipped.append(bad_step)
        # Into a new input pipeline: the one that ran on restored step 0's checkpoint (its
        # iterator not yet started) to other batches (its file shuffle drew the next
        # epoch's seeds), so the skip missed the bad batch; a new one replays them.
        if self.fresh_iterator is not None:
            self.fresh_iterator()
        self.checkpoint.restore(latest).expect_partial()
        self.start_step = restored_step
        self.clock = None
        for summary_writer in self.writers.values():
            _mark_start(summary_writer, restored_step + 1)
        if self.config and self.config[0] > restored_step:  # (that mark dropped it)
            self.write_config(self.config[1])
        skips = self.skipped + [-1] * (self.state.skip_steps.shape[0] - len(self.skipped))
        self.state.skip_steps.assign(tf.constant(skips, tf.int64))
        self.skips_unsaved = True
        self.log(f"the loss was not finite at step {said}: restored step {restored_step} "
                 f"and will skip that batch ({len(self.skipped)}/{self.max_restores})")
        raise _Restored  # the controller's call ends: its target may lie past evaluations

    def stage_switched(self, step: int):
        self.log(f"step {step}: generator stage done; the discriminator starts from the "
                 "generator's weights, the generator is frozen")

    def preempted(self):
        # The checkpoint of this step is saved when this runs.
        received = self.stop.signal if self.stop is not None else signal.SIGTERM
        why = {signal.SIGINT: INTERRUPTED_LINE, signal.SIGTERM: "preempted (SIGTERM)",
               None: "stopped with the other workers (one was sent a signal)"}[received]
        step = int(self.state.step.numpy())
        if self.skips_unsaved:  # stopped before a step since the restore: nothing to save
            self.log(f"{why}: kept the checkpoint at step {step}, which does not hold the "
                     "batch skipped since (the rerun meets it and restores again); rerun the "
                     "same command to resume")
        else:
            self.log(f"{why}: saved a checkpoint at step {step}; rerun the same command to "
                     "resume")
        sys.stdout.flush()
        sys.exit(INTERRUPTED_EXIT_CODE if received == signal.SIGINT else PREEMPTED_EXIT_CODE)


def _mark_start(writer, first_step: int):
    """A SessionLog START event at the first step a run (or a restore) computes, as Estimator
    wrote on every (re)start: TensorBoard then drops what an earlier run of this model dir
    wrote at or after that step (a run killed after its last checkpoint, a restore past a
    non-finite loss), so each curve is the one the weights went through. (TensorBoard's fast
    loader also drops steps a later write goes back over; its Python loader,
    `--load_fast=false`, and other readers of the events need this.)"""
    start = tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START)
    event = tf.compat.v1.Event(wall_time=time.time(), step=first_step, session_log=start)
    # tf.summary has no public writer of a whole Event; this is the op
    # tf.compat.v1's import_event runs, on this writer's resource.
    tf.raw_ops.ImportEvent(writer=writer._resource, event=event.SerializeToString())
    writer.flush()


def _orbit_log(message: str):
    """orbit's Controller prints a line per loop and evaluation ("train | step: 40 |
    steps/sec: 0.7 | output: {}") besides logging it; the monitor prints a fuller one, so of
    orbit's only the checkpoint saves stay on the console, the rest go to the INFO log."""
    if message.startswith("saved checkpoint"):
        print(message, flush=True)
    else:
        absl_logging.info(message)


def _loop_lengths(steps_per_loop: int, intervals: list[int], boundary: int | None):
    """orbit's steps_per_loop: a loop stops at the next multiple of each of `intervals` (the
    checkpoint and evaluation grids) and at the two-stage boundary."""
    def length(step) -> int:
        step = int(step)
        ends = [(step // every + 1) * every for every in intervals]
        ends += [boundary] if boundary is not None and step < boundary else []
        return min([steps_per_loop] + [end - step for end in ends])
    return length


def _step_of(checkpoint: str) -> int:
    """The step a checkpoint prefix (`.../ckpt-N`) was saved at."""
    return int(checkpoint.rsplit("-", 1)[1])


def _finished(model_dir: str, num_train_steps: int, eval_data) -> bool:
    """Whether one process's model dir holds a run at its last step, and evaluated there
    if it evaluates (a run killed during its last evaluation runs that again)."""
    latest = tf.train.latest_checkpoint(model_dir)
    if not latest:
        return False
    step = _step_of(latest)
    return step == num_train_steps and (not eval_data or step in _evaluated_steps(model_dir))


def _evaluated_steps(model_dir: str) -> set[int]:
    """The steps of the evaluations in model_dir/eval's TensorBoard events."""
    losses = summaries.read_scalars(os.path.join(model_dir, "eval")).get("loss/total", [])
    return {step for step, _ in losses}


def _steps_per_call(value, steps_per_loop: int, jit_compile: bool, strategy) -> int:
    """pretraining.steps_per_call, resolved (None: the default) and checked."""
    several = strategy.num_replicas_in_sync > 1
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    if value is None:
        return steps_per_loop if jit_compile and not several and not tpu else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"pretraining.steps_per_call={value!r} must be a positive integer")
    if value > 1 and not jit_compile:
        raise UserInputError(f"pretraining.steps_per_call={value} needs "
                             "pretraining.jit_compile=True (without XLA each step is its own "
                             "call anyway); set it to 1 or turn XLA on")
    if value > 1 and (several or tpu):
        raise UserInputError(
            f"pretraining.steps_per_call={value} runs on one replica; this run has "
            f"{strategy.num_replicas_in_sync} ({type(strategy).__name__}): set it to 1")
    return value


def _cluster_resolver(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}))
    return resolver


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


# ------------------------------------------------------------------------------ model_info


def describe(model, *, seq_length: int, num_predictions: int, mask_prob: float,
             train_batch_size: int, num_train_steps: int,
             two_stage_steps: int | None = None) -> dict:
    """model_info.json: parameter counts and FLOPs of the pretrainer.

    discriminator_params: the network that is fine-tuned, with its replaced-token head (as
    transformers' ElectraForPreTraining counts it); generator_params: the generator with its
    (shared) embeddings and masked-LM head (as ElectraForMaskedLM counts it; Electric: both
    towers); trainable_params: every trainable weight once. train_flops_per_example: the
    official counting method behind the paper's figures (backward = forward);
    ..._hardware: what an accelerator executes (backward = 2 x forward), used for MFU.
    Two-stage training (switching at `two_stage_steps`, default half the run) runs less
    than those figures (the networks of both phases, trained jointly) in each phase:
    two_stage_flops_per_example gives each phase's, and total_train_flops sums them.
    """
    discriminator = list(model.discriminator.trainable_variables)
    generator = []
    if model.objective == "mlm":  # BERT: the MLM head is the network's own head
        discriminator += model.generator_predictions.trainable_variables
    else:
        for part in (model.generator, model.generator_ltr, model.generator_rtl,
                     model.generator_predictions):
            if part is not None:
                generator += part.trainable_variables
    if model.discriminator_predictions is not None:
        discriminator += model.discriminator_predictions.trainable_variables
    generator_config = model.generator_config if model.generator is not None or (
        model.generator_ltr is not None) else None
    if model.generator is model.discriminator and model.objective != "mlm":
        generator_config = model.discriminator_config  # sharing "all": the network runs twice
    shapes = (model.discriminator_config, generator_config, seq_length, model.objective,
              mask_prob)
    per_example = {  # the paper's counting, and what the device executes (for MFU)
        "official": flops.train_flops_per_example(*shapes, max_predictions=num_predictions),
        "hardware": flops.hardware_train_flops_per_example(
            *shapes, max_predictions=num_predictions)}
    total = per_example["official"] * train_batch_size * num_train_steps
    phases = None
    if model.algorithm == "two_stage":
        switch = num_train_steps // 2 if two_stage_steps is None else two_stage_steps
        phases = {kind: flops.two_stage_flops_per_example(
            model.discriminator_config, generator_config, seq_length, mask_prob,
            max_predictions=num_predictions, hardware=kind == "hardware")
            for kind in ("official", "hardware")}
        total = train_batch_size * (phases["official"]["generator"] * switch
                                    + phases["official"]["discriminator"]
                                    * (num_train_steps - switch))
    return {
        "objective": model.objective, "sharing": model.sharing, "algorithm": model.algorithm,
        # The pretrainer's options (pretrainer.*) that the weights do not show.
        "options": {"temperature": model.temperature,
                    "disallow_correct": model.disallow_correct,
                    "uniform_generator": model.uniform_generator,
                    "learn_loss_weights": model.loss_log_scales is not None,
                    "generator_weight": model.generator_weight,
                    "discriminator_weight": model.discriminator_weight,
                    "adversarial_mle_weight": model.adversarial_mle_weight},
        "discriminator_params": _count(discriminator),
        "generator_params": _count(generator),
        "trainable_params": _count(model.trainable_variables),
        "train_flops_per_example": per_example["official"],
        "train_flops_per_example_hardware": per_example["hardware"],
        "total_train_flops": total,
        **({"two_stage_flops_per_example": phases} if phases else {}),
        "max_seq_length": seq_length, "mask_prob": mask_prob,
        "masked_positions": num_predictions,
        "train_batch_size": train_batch_size, "num_train_steps": num_train_steps,
        "discriminator": _config_dict(model.discriminator_config),
        "generator": _config_dict(generator_config),
    }


def _count(variables) -> int:
    unique = {id(v): v for v in variables}.values()
    return int(sum(v.shape.num_elements() if hasattr(v.shape, "num_elements")
                   else int(tf.size(v)) for v in unique))


def _config_dict(config: EncoderConfig | None):
    return None if config is None else dataclasses.asdict(config)


# ------------------------------------------------------------------------------ helpers


# The macros of gin/pretraining.gin that set these: a refusal names what a user binds.
_MACROS = {"num_train_steps": "NUM_TRAIN_STEPS", "train_batch_size": "TRAIN_BATCH_SIZE",
           "max_seq_length": "MAX_SEQ_LENGTH", "steps_per_loop": "STEPS_PER_LOOP",
           "checkpoint_every": "CHECKPOINT_EVERY"}


def _check_settings(**values):
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            setting = (f"{_MACROS[name]}={value!r} (pretraining.{name})" if name in _MACROS
                       else f"pretraining.{name}={value!r}")
            raise UserInputError(f"{setting} must be a positive integer" + (
                ", or None to keep every checkpoint" if name == "keep_checkpoints" else ""))


SKIP_CAPACITY = 64  # batches a run's checkpoints can record as skipped (max_restores' bound)
_SKIP_STEPS = "state/skip_steps/.ATTRIBUTES/VARIABLE_VALUE"


def _skip_capacity(model_dir, max_restores) -> int:
    """The length of the run's skipped-batch list: SKIP_CAPACITY for a new run, so that
    pretraining.max_restores can change between reruns; a run begun before that has the
    length its checkpoints hold (its max_restores then)."""
    capacity = SKIP_CAPACITY
    latest = tf.train.latest_checkpoint(model_dir)
    if latest:
        shape = tf.train.load_checkpoint(latest).get_variable_to_shape_map().get(_SKIP_STEPS)
        capacity = shape[0] if shape else capacity
    if max_restores > capacity:
        raise UserInputError(
            f"pretraining.max_restores={max_restores} exceeds the {capacity} skipped batches "
            + ("this run's checkpoints can record; use at most that many, or start a new "
               "--model_dir" if latest else "a run can record; use at most that many"))
    return capacity


def _data_position(model_dir: str, worker: int, step: int) -> str:
    """Where a finished run leaves a non-chief worker's input position (its iterator)."""
    return os.path.join(strategies.scratch_directory(model_dir, worker), f"data-{step}")


def _common_checkpoint(model_dir: str, directory: str, workers: int, log) -> str | None:
    """The checkpoint to resume from: the latest in model_dir or, with several workers, the
    one of the newest step every worker saved a checkpoint (or, after a finished run, its
    data position) at. Each worker saves its own at the same steps; a machine that died
    during a save leaves one worker a step behind the others, and workers that went on from
    different steps would run different numbers of steps between their collectives. Each
    process sets aside its own newer checkpoints (into <its dir>/set_aside/, the checkpoint
    state rewritten without them); the resumed run saves those steps again. `directory`:
    where this process saves (`strategies.checkpoint_directory`); the checkpoint returned
    is its own when it has one of that step."""
    latest = tf.train.latest_checkpoint(model_dir)
    if workers == 1 or latest is None:
        return latest
    saved = {0: set(_steps_saved(model_dir))}
    for i in range(1, workers):
        scratch = strategies.scratch_directory(model_dir, i)
        saved[i] = set(_steps_saved(scratch)) | {
            s for s in saved[0] if tf.io.gfile.exists(_data_position(model_dir, i, s) + ".index")}
    if not all(saved.values()):
        return latest  # a worker with nothing to go on from: _check_worker_positions says so
    common = set.intersection(*saved.values())
    if not common:
        other = min(range(1, workers), key=lambda i: len(saved[i] & saved[0]))
        raise UserInputError(
            f"--model_dir={model_dir} holds checkpoints of steps "
            f"{', '.join(map(str, sorted(saved[0])))} and worker {other}'s of steps "
            f"{', '.join(map(str, sorted(saved[other])))}: no step in common, so {workers} "
            f"workers cannot go on from it exactly; start a new --model_dir with "
            f"--init_checkpoint={model_dir}")
    step = max(common)
    newest = max(max(steps) for steps in saved.values())
    if step < newest and directory == model_dir:  # the chief
        log(f"not every worker saved step {newest} (a save that did not finish): all go on "
            f"from step {step}, the newest that every worker saved")
    own = _steps_saved(directory)
    newer = [s for s in own if s > step]
    if newer:
        aside = os.path.join(directory, SET_ASIDE)
        tf.io.gfile.makedirs(aside)
        for s in newer:
            for path in tf.io.gfile.glob(os.path.join(directory, f"ckpt-{s}.*")):
                tf.io.gfile.rename(path, os.path.join(aside, os.path.basename(path)),
                                   overwrite=True)
        state = tf.train.get_checkpoint_state(directory)
        times = list(state.all_model_checkpoint_timestamps)
        kept = [i for i, path in enumerate(state.all_model_checkpoint_paths)
                if _step_of(path) <= step]
        checkpoint_management.update_checkpoint_state_internal(
            directory, os.path.join(directory, f"ckpt-{step}"),
            [state.all_model_checkpoint_paths[i] for i in kept], save_relative_paths=True,
            all_model_checkpoint_timestamps=[times[i] for i in kept] if times else None,
            last_preserved_timestamp=state.last_preserved_timestamp)
        log(f"set aside the checkpoints of step{'s' if len(newer) > 1 else ''} "
            f"{', '.join(map(str, newer))} in {aside}: not every worker saved them")
    # A worker's own copy holds its own data position; the chief's would have it read the
    # chief's share of the data (TensorFlow's PreemptionCheckpointHandler restores the own
    # copy afterwards, but not on every platform: it does nothing on Google Cloud's CPU VMs).
    return os.path.join(directory if step in own else model_dir, f"ckpt-{step}")


def _steps_saved(directory: str) -> list[int]:
    """The steps of the whole checkpoints (their index written) that `directory`'s
    checkpoint state lists."""
    state = tf.train.get_checkpoint_state(directory)
    paths = state.all_model_checkpoint_paths if state else []
    return sorted(_step_of(p) for p in paths if tf.io.gfile.exists(p + ".index"))


def _check_worker_positions(model_dir, workers: int, step: int, num_train_steps: int):
    """With several workers, each resumes its own input pipeline's position (the model
    dir's checkpoints hold the chief's): from its own checkpoints, or after a finished run
    from the position it left. Without it a worker would go on with the chief's batches.
    Every worker checks the same shared folders, so all of them stop with this line, not one
    of them alone."""
    if workers == 1 or step >= num_train_steps:
        return
    missing = [i for i in range(1, workers)
               if not tf.train.latest_checkpoint(strategies.scratch_directory(model_dir, i))
               and not tf.io.gfile.exists(_data_position(model_dir, i, step) + ".index")]
    if missing:
        raise UserInputError(
            f"--model_dir={model_dir} holds no data position at step {step} for worker "
            f"{', '.join(map(str, missing))} (a run of fewer workers, or its "
            f"{os.path.basename(strategies.scratch_directory(model_dir, missing[0]))} folder "
            f"is gone), so {workers} workers cannot go on from it exactly; start a new "
            f"--model_dir with --init_checkpoint={model_dir}")


def _keep_earlier_config(model_dir: str, step: int, config: str, log):
    """A run resumed with other settings (a longer NUM_TRAIN_STEPS, another learning rate):
    the config its first `step` steps ran with stays, as operative_config-<step>.gin."""
    path = os.path.join(model_dir, OPERATIVE_CONFIG)
    if step == 0 or not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as f:
        earlier = f.read()
    kept = _kept_config(model_dir, step)
    # One there already is the config that trained those steps (a resume that stopped
    # before its next checkpoint left its own in operative_config.gin).
    if earlier != config and not tf.io.gfile.exists(kept):
        atomic.write_text(kept, earlier)
        log(f"note: this run's gin config differs from the one its first {step} steps ran "
            f"with, kept as {kept}")


def _kept_config(model_dir: str, step: int) -> str:
    """Where the config of a run's first `step` steps is kept when it resumes with another
    (there only then)."""
    return os.path.join(model_dir, OPERATIVE_CONFIG.replace(".gin", f"-{step}.gin"))


def _info_json(model_info: dict) -> str:
    """model_info.json's text: indented, but `train_files` (a pair per file: a corpus of
    thousands of shards) on one line rather than four lines a file."""
    if "train_files" not in model_info:
        return json.dumps(model_info, indent=2)
    text = json.dumps({**model_info, "train_files": "\0"}, indent=2)
    return text.replace(json.dumps("\0"), json.dumps(model_info["train_files"]))


def _train_files(files: list[str]) -> list:
    """[[file name, its examples by its folder's metadata.json (None where unknown)], ...]
    in the order the pipeline reads them: what a resumed run's data position must be in
    (same-named shards of another corpus restored it without a word; the files' folder may
    move, and two folders may hold the same names: `_repeated_names`)."""
    counts = {}
    for metadata in pipeline.read_all_metadata(files):
        directory = os.path.dirname(metadata["_path"])
        counts.update({os.path.join(directory, s["file"]): s["num_examples"]
                       for s in metadata.get("shards", [])})
    return [[os.path.basename(f), counts.get(f)] for f in sorted(files)]


def _repeated_names(files: list[str], data_position: str) -> dict:
    """model_info.json's `train_paths` (the files' paths, in the pipeline's order) where a
    data position by index is over files of one name in several folders: moved, which of
    them is which is not known (A/ renamed C/ puts other files at the index's places, which
    the names alone let through), so such a run resumes only with its files where they
    were (`_check_resume`). {} otherwise."""
    names = [os.path.basename(f) for f in files]
    if data_position != "file_index" or len(set(names)) == len(names):
        return {}
    return {"train_paths": [f if "://" in f else os.path.abspath(f) for f in sorted(files)]}


def _other_files(before: list, now: list) -> list[str]:
    """How the files `_train_files` lists differ: by name and order, or by examples where
    both counts are known (data copied without its metadata.json counts none)."""
    names = [name for name, _ in before], [name for name, _ in now]
    if names[0] != names[1]:  # (two folders may hold files of one name)
        then, later = collections.Counter(names[0]), collections.Counter(names[1])
        return [f"{name} then, not now" if not later[name] else
                f"{name} now, not then" if not then[name] else
                f"{name}: {then[name]} files of that name then, {later[name]} now"
                for name in dict.fromkeys(names[0] + names[1])
                if then[name] != later[name]] or ["the same files in another order"]
    return [f"{name}: {a} examples then, {b} now" for (name, a), (_, b) in zip(before, now)
            if a is not None and b is not None and a != b]


def _check_not_another_output(model_dir: str) -> None:
    """A --model_dir that holds pre-training data, a fine-tuning run or exported models is
    refused: a run there wrote its checkpoints among the TFRecords, or its model_info.json
    into the fine-tuning run."""
    if not tf.io.gfile.isdir(model_dir) or tf.train.latest_checkpoint(model_dir):
        return  # (a run that earlier versions let start there resumes)
    names = [name.rstrip("/") for name in tf.io.gfile.listdir(model_dir)]
    held = {"pre-training data (metadata.json)": "metadata.json",
            "pre-training data (TFRecords)": "*.tfrecord*",
            "a fine-tuning run (results.json)": "results.json",
            "a fine-tuning run (trial_*/)": "trial_*",
            "a fine-tuning trial (task_info.json)": "task_info.json"}
    from electra_tf.export.saved_model import serving_files
    for what, pattern in held.items():
        if fnmatch.filter(names, pattern):
            break
    else:
        what = serving_files(model_dir, names)
    if what:
        raise UserInputError(f"--model_dir={model_dir} holds {what}, not a pre-training "
                             "run; choose another --model_dir")


def _init_notes(init_checkpoint, note, earlier, model_info) -> list[str]:
    """The notes on what --init_checkpoint gave: `_initialise`'s `note`, and another vocab
    of the same size (an edited vocab, [unused] entries made domain words, is allowed; it
    is said, as a wrong vocab would look the same)."""
    lines = [f"note: --init_checkpoint={init_checkpoint} {note}"] if note else []
    if earlier.get("vocab_sha256", model_info["vocab_sha256"]) != model_info["vocab_sha256"]:
        lines.append(f"note: --init_checkpoint={init_checkpoint} was trained with another "
                     "vocab of the same size (model_info.json's vocab_sha256 differs): each "
                     "token id keeps the embedding of the token it had there")
    return lines


def _check_not_fine_tuned(init_checkpoint: str):
    """--init_checkpoint naming a fine-tuning output dir, a trial dir or a trial's
    model/ckpt: a task's model, whose encoder alone the pre-trainer cannot start from; said
    so, with the model it was fine-tuned from (it was "holds no checkpoint", or "does not
    fit this model")."""
    from electra_tf.finetune import runner  # (loaded only here, not at every start)
    path = runner.fine_tuning_output(init_checkpoint)
    for name in (runner.TASK_INFO, runner.RESULTS) if path else ():
        if tf.io.gfile.exists(os.path.join(path, name)):
            with tf.io.gfile.GFile(os.path.join(path, name)) as f:
                try:
                    source = json.load(f).get("init_checkpoint")
                except (json.JSONDecodeError, AttributeError):
                    source = None
            raise UserInputError(
                f"--init_checkpoint={init_checkpoint} is a fine-tuning output (a task's "
                "model), not a pre-trained one; pass the pre-training model dir it was "
                "fine-tuned from" + (f" ({source})" if isinstance(source, str)
                                     and not source.startswith("random ") else ""))


def _holds_an_import(model_dir: str) -> bool:
    """Whether model_dir holds a checkpoint convert_checkpoint.py imported (not a run)."""
    earlier = _model_info_of(model_dir)
    return bool(earlier.get("imported_checkpoint") and not earlier.get("train_batch_size"))


def _shape(info: dict, part: str, key: str):
    """model_info.json's (`info`) value of `part`'s (discriminator, generator) size setting
    `key` (factory.SHAPE_KEYS), the embeddings' width as the network has it: its hidden
    size where unset, and a generator's that shares nothing (whose embedding_size records
    made before 2026-11-27 gave as the discriminator's)."""
    config = info[part]
    if key == "embedding_size" and (config.get(key) is None or (
            part == "generator" and info.get("sharing") == "none")):
        return config.get("hidden_size")
    return config.get(key)


def _check_resume(model_dir, model_info, metadata=None):
    """A run resumes in the batches its checkpoint's data position counts: a model dir with
    a checkpoint and another batch size, sequence length or number of masked positions, or
    other files, is refused before anything is written (its model_info.json would describe
    another run); so is data whose `metadata` (its metadata.json) gives another casing."""
    if not tf.train.latest_checkpoint(model_dir):
        return
    earlier = _model_info_of(model_dir)
    if _holds_an_import(model_dir):
        raise UserInputError(
            f"--model_dir={model_dir} holds a checkpoint imported by convert_checkpoint.py, "
            "not a run to resume; pre-train into a new --model_dir with "
            f"--init_checkpoint={model_dir}")
    if not earlier.get("train_batch_size"):  # none
        return
    # The vocab's size and casing before its hash: --init_checkpoint, which the hash's
    # refusal suggests, refuses another size or casing.
    if earlier.get("vocab_size", model_info["vocab_size"]) != model_info["vocab_size"]:
        raise UserInputError(
            f"--model_dir={model_dir} was trained with a vocab of {earlier['vocab_size']} "
            f"tokens (model_info.json), this data's has {model_info['vocab_size']}; resume "
            "with the data (and --vocab_file) it was trained with, or start a new --model_dir")
    casing = _other_casing(earlier, model_info, metadata)
    if casing:
        raise UserInputError(
            f"--model_dir={model_dir} was trained on data tokenized otherwise "
            f"({casing[0]}: model_info.json against this data's metadata.json); "
            f"resume with the data it was trained with, or rebuild this data with {casing[1]}")
    if earlier.get("vocab_sha256", model_info["vocab_sha256"]) != model_info["vocab_sha256"]:
        raise UserInputError(
            f"--model_dir={model_dir} was trained with another vocab ({earlier['vocab_file']} "
            "as it was then; model_info.json's vocab_sha256 differs from "
            f"{model_info['vocab_file']}'s); "
            "resume with the data (and --vocab_file) it was trained with, or start a new "
            f"--model_dir with --init_checkpoint={model_dir}")
    other = ("train_files" in earlier
             and _other_files(earlier["train_files"], model_info["train_files"]))
    if other:
        raise UserInputError(
            f"--model_dir={model_dir} was trained on other --train_data files than these "
            f"({other[0]}{', ...' if len(other) > 1 else ''}; model_info.json's "
            "train_files), whose data position its checkpoint holds; resume with the "
            "--train_data it was trained with, or start a new --model_dir with "
            f"--init_checkpoint={model_dir}")
    if "train_paths" in earlier and earlier["train_paths"] != model_info.get("train_paths"):
        moved = next((a for a, b in zip(earlier["train_paths"],
                                        model_info.get("train_paths") or [None]) if a != b),
                     earlier["train_paths"][0])
        raise UserInputError(
            f"--model_dir={model_dir} was trained on files of one name in several folders "
            f"({moved} among them; model_info.json's train_paths), which cannot be told apart "
            "once moved; resume with --train_data naming them as then (a link there to where "
            "they are now will do)")
    if "premasked_records" in model_info:
        # A run of pre-masked records from before premasked_records was recorded (before
        # whole_word_masking was too) used them as written.
        before = earlier.get("premasked_records",
                             None if "whole_word_masking" in earlier else "as_written")
        if before is not None and before != model_info["premasked_records"]:
            raise UserInputError(
                f"--model_dir={model_dir} holds a run that took its pre-masked records "
                f"'{before}' (model_info.json; runs from before the setting used them as "
                f"written), this one '{model_info['premasked_records']}': the masks would "
                "change mid-run; rerun with --gin_bindings=\"pretraining.premasked_records="
                f"'{before}'\", or start a new --model_dir")
    for key, setting in (("train_batch_size", "TRAIN_BATCH_SIZE"),
                         ("max_seq_length", "MAX_SEQ_LENGTH"),
                         ("masked_positions", "pretraining.max_predictions_per_seq")):
        if key == "masked_positions" and earlier.get("mask_prob", model_info["mask_prob"]) != (
                model_info["mask_prob"]):
            continue  # derived from MASK_PROB: the check below names what was changed
        if key in earlier and earlier[key] != model_info[key]:
            raise UserInputError(
                f"--model_dir={model_dir} holds a run with {setting}={earlier[key]} "
                f"(model_info.json), this one has {model_info[key]}; its checkpoint's data "
                f"position counts those batches: rerun with {setting}={earlier[key]}, or "
                "start a new --model_dir")
    before = earlier.get("precision", model_info["precision"])
    if model_info["precision"] == "mixed_float16" and before != "mixed_float16":
        raise UserInputError(
            f"--model_dir={model_dir} holds a run in {before} (model_info.json), whose "
            "checkpoint has no loss scale for mixed_float16 to go on from; resume with "
            f"pretraining.precision='{before}' (or 'mixed_bfloat16'), or start a new "
            f"--model_dir with --init_checkpoint={model_dir}")
    if earlier.get("seed", model_info["seed"]) != model_info["seed"]:
        raise UserInputError(
            f"--model_dir={model_dir} holds a run with --seed={earlier['seed']} "
            f"(model_info.json), this one has --seed={model_info['seed']}: its data order, "
            f"masks and samples would change mid-run; rerun with --seed={earlier['seed']}, or "
            "start a new --model_dir")
    changed = [f"{key} {earlier[key]!r} -> {model_info.get(key)!r}"
               for key in ("objective", "sharing", "algorithm", "mask_prob",
                           "whole_word_masking")
               if key in earlier and earlier[key] != model_info.get(key)]
    changed += [f"pretrainer.{key} {value!r} -> {model_info['options'][key]!r}"
                for key, value in earlier.get("options", {}).items()
                if model_info["options"].get(key) != value]
    changed += [f"{part} {key} {_shape(earlier, part, key)} -> "
                f"{_shape(model_info, part, key)}"
                for part in ("discriminator", "generator")
                if earlier.get(part) and model_info.get(part) for key in factory.SHAPE_KEYS
                if _shape(earlier, part, key) != _shape(model_info, part, key)]
    if changed:
        raise UserInputError(
            f"--model_dir={model_dir} holds a run trained otherwise ({'; '.join(changed)}; "
            "model_info.json): resume it with the gin files and bindings it ran with (its "
            "operative_config.gin), or start a new --model_dir with "
            f"--init_checkpoint={model_dir}")
    done = _step_of(tf.train.latest_checkpoint(model_dir))
    if done > model_info["num_train_steps"]:
        raise UserInputError(
            f"--model_dir={model_dir} holds a run at step {done}, past this one's "
            f"NUM_TRAIN_STEPS={model_info['num_train_steps']}; rerun with NUM_TRAIN_STEPS="
            f"{earlier.get('num_train_steps', done)} (more extends the run), or start a new "
            f"--model_dir with --init_checkpoint={model_dir}")
    if earlier.get("workers", model_info["workers"]) != model_info["workers"]:
        raise UserInputError(
            f"--model_dir={model_dir} was trained by {_workers(earlier['workers'])} "
            f"(model_info.json), this run has {_workers(model_info['workers'])}: each "
            "worker's data position is its own, so it cannot go on exactly; rerun it with "
            f"{_workers(earlier['workers'])}, or start a new --model_dir with "
            f"--init_checkpoint={model_dir}")
    if earlier.get("two_stage_steps", model_info.get("two_stage_steps")) != model_info.get(
            "two_stage_steps"):
        raise UserInputError(
            f"--model_dir={model_dir} holds a two-stage run whose generator stage is "
            f"{earlier['two_stage_steps']} steps (model_info.json), this one's "
            f"{model_info.get('two_stage_steps')} (the default is half of NUM_TRAIN_STEPS); "
            f"rerun with --gin_bindings=pretraining.two_stage_steps="
            f"{earlier['two_stage_steps']}, or start a new --model_dir")


def _eval_steps(eval_data, train_batch_size, strategy, eval_steps, chief, log) -> int:
    """The evaluation's steps: `eval_steps`, or the full batches one pass over the held-out
    records gives each worker if fewer (every worker runs as many steps: one that ran out
    first would leave the others waiting); none is an error."""
    workers = pipeline.num_workers(strategy)
    share = train_batch_size // workers
    batches = pipeline.batches_per_worker(eval_data, share, workers, eval_steps)
    if batches == 0:
        raise UserInputError(
            f"--eval_data={eval_data} holds fewer examples than one evaluation batch of "
            f"{share} (TRAIN_BATCH_SIZE={train_batch_size}"
            + (f" over {workers} workers" if workers > 1 else "") + "); hold out more records "
            "or leave --eval_data out")
    if batches < eval_steps and chief:
        log(f"eval: --eval_data gives {batches} full batches of {share}"
            + (" on each worker" if workers > 1 else "") + f", fewer than pretraining."
            f"eval_steps={eval_steps}; each evaluation runs {batches} steps")
    return batches


def _check_choice(name, value, choices):
    if value not in choices:
        raise UserInputError(f"{name}={value!r} is not one of {', '.join(choices)}")


def _shared_files_note(train_files, eval_files) -> str | None:
    """A note when --eval_data names files --train_data trains on: its metrics would be
    reported as if held out."""
    def real(path):
        return path if "://" in path else os.path.realpath(path)
    trained = {real(f) for f in train_files}
    shared = [f for f in eval_files if real(f) in trained]
    if not shared:
        return None
    return (f"note: {len(shared)} of --eval_data's {len(eval_files)} files ({shared[0]}"
            f"{', ...' if len(shared) > 1 else ''}) are --train_data files too: its "
            "evaluations are not of held-out data")


def _model_info_of(checkpoint: str) -> dict:
    """model_info.json of the model dir a checkpoint (or model dir) belongs to; {} if none."""
    folder = checkpoint if tf.io.gfile.isdir(checkpoint) else os.path.dirname(checkpoint)
    path = os.path.join(folder, MODEL_INFO)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def _moved_input(error, path: str, model_dir: str) -> UserInputError | None:
    """The refusal of a data position (checkpoint `path`) naming its input files by path,
    as runs begun before positions named them by index saved, where `error` (a restore's
    NotFoundError) says one is gone: resumed so, it opens the files where they were. None
    for another error."""
    missing = re.search(r"restore dataset iterator from checkpoint: (.*?); ", str(error))
    if not missing:
        return None
    return UserInputError(
        f"--model_dir={model_dir}'s checkpoint ({path}) holds a data position naming its "
        f"input files by path, as runs begun before this release did, and {missing.group(1)} "
        "is not there: resume with the files where they were (a link from there to where "
        "they are now will do)")


def _workers(n: int) -> str:
    return "one worker" if n == 1 else f"{n} workers"


def _restore(checkpoint, path: str, model_dir: str):
    try:
        # (partial: several workers' checkpoints hold the preemption handler's count, which
        # a finished run, making no handler, leaves unread, with two warning lines)
        checkpoint.restore(path).assert_existing_objects_matched().expect_partial()
    except tf.errors.NotFoundError as e:
        if "restore dataset iterator" not in str(e):
            raise
        # A position of another input pipeline: a run of another number of workers begun
        # before model_info.json kept it (their files are split among them).
        raise _moved_input(e, path, model_dir) or UserInputError(
            f"--model_dir={model_dir}'s checkpoint ({path}) holds a data position of another "
            "input pipeline (a run of another number of workers?); rerun it as it was run, "
            f"or start a new --model_dir with --init_checkpoint={model_dir}") from None
    except tf.errors.FailedPreconditionError as e:
        if "iterator" not in str(e).lower():
            raise
        raise UserInputError(
            f"--model_dir={model_dir}'s checkpoint ({path}) holds a data position in other "
            "input files than --train_data's (another number of files, or other files); "
            "resume with the --train_data it was trained with, or start a new --model_dir "
            f"with --init_checkpoint={model_dir}") from None
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
        first = first_line(e)[:200]
        raise UserInputError(
            f"--model_dir={model_dir} holds a checkpoint ({path}) of another model or "
            f"configuration ({first}); use a new --model_dir, or the gin files it was "
            "trained with") from None


# Parts of a pretrainer that only its training uses (the adversarial generator's reward
# baseline, the learned loss balance): a checkpoint of another variant, or an imported one,
# lacks them, and they start from their initial values.
TRAINING_ONLY_PARTS = ("reward_baseline", "loss_log_scales")


# What model_info.json keeps, through resumes, of the weights a run started from: the
# checkpoint (its step), an import's source, and the longest sequences they were trained on
# when longer than the run's (continued pre-training at 128 of a model trained at 512 keeps
# 512 positions trained: fine-tuning and exports take it at 512).
LINEAGE = ("init_checkpoint", "init_source", "trained_seq_length", "init_fresh")


def _lineage(path: str, source: dict, max_seq_length: int, fresh: list[str]) -> dict:
    """model_info.json's LINEAGE entries of a run from checkpoint `path` (`source`: its
    model dir's model_info.json; `fresh`: the model's parts not taken from it)."""
    lineage = {"init_checkpoint": path if "://" in path else os.path.abspath(path)}
    if fresh:
        lineage["init_fresh"] = fresh
    origin = source.get("init_source", source.get("source"))  # an import's "hf:DIR", say
    if origin:
        lineage["init_source"] = origin
    trained = source.get("trained_seq_length", source.get("max_seq_length")) or 0
    if trained > max_seq_length:
        lineage["trained_seq_length"] = trained
    return lineage


def _other_casing(earlier: dict, model_info: dict, metadata: dict | None):
    """(what differs, the builder's flags that match `earlier`) when the weights' casing
    (`earlier`: their model_info.json) is not the data's, where its `metadata` records it
    (data without metadata.json is cased as its vocab, which earlier versions did not do);
    else None."""
    keys = ("lower_case", "strip_accents")
    differ = [f"{key}={earlier[key]} there, {model_info[key]} here" for key in keys
              if key in earlier and earlier[key] != model_info[key] and key in (metadata or {})]
    if not differ:
        return None
    return ", ".join(differ), " ".join(f"--{key}={str(earlier[key]).lower()}"
                                       for key in keys if key in earlier)


def _kept_lineage(model_dir: str) -> dict:
    """The LINEAGE entries a resumed run's model_info.json keeps."""
    return {key: value for key, value in _model_info_of(model_dir).items() if key in LINEAGE}


def _initialise(model, path: str, earlier: dict, model_info: dict, metadata: dict | None):
    """The model's weights from a checkpoint (of a run, or imported; `earlier` its model
    dir's model_info.json); every weight of the model's networks must be in it
    (assert_existing_objects_matched fails for one that is not), its TRAINING_ONLY_PARTS
    are read where it has them. Its vocab and (where the data's `metadata` records it) its
    casing must be this run's: data tokenized otherwise feeds it other tokens. A checkpoint
    of another variant, whose networks differ (an mlm run's for an ELECTRA run), gives its
    encoder only (`_initialise_encoder`). Returns the
    checkpoint read (a model dir's newest: a run still training there may save another),
    the parts that start fresh and, for another variant, a note saying what was taken."""
    vocab_size = model_info["vocab_size"]
    if earlier.get("vocab_size", vocab_size) != vocab_size:
        raise UserInputError(
            f"--init_checkpoint={path} was trained with a vocab of {earlier['vocab_size']} "
            f"tokens (its model_info.json), this data's has {vocab_size}; build the data "
            f"with its vocab ({earlier.get('vocab_file')})")
    casing = _other_casing(earlier, model_info, metadata)
    if casing:
        raise UserInputError(
            f"--init_checkpoint={path} was trained on text tokenized otherwise than this "
            f"data ({casing[0]}: its model_info.json against the data's metadata.json); "
            f"rebuild the data with {casing[1]}")
    from electra_tf.training import checkpoints  # (it imports this)
    path = checkpoints.latest_checkpoint(path)  # a model dir's newest, or a file's prefix
    variant = _other_variant(earlier, model)
    untrained = checkpoints.generator_stage(path, earlier)
    if untrained and model.algorithm != "two_stage":
        # (its random discriminator was taken in without a word, as trained)
        raise UserInputError(
            f"--init_checkpoint={untrained}, or go on with its generator stage in a two-stage "
            "run (ablations/two_stage.gin)")
    algorithm = earlier.get("algorithm")  # (None: a model dir too old to say)
    if (model.algorithm == "two_stage"
            and (not variant or earlier.get("objective") == model.objective)
            # its discriminator trained (a two-stage run's from its switch on)
            and ((checkpoints.saved_stage(path) or (0,))[0] == 1 if algorithm == "two_stage"
                 else algorithm is not None)):
        how = (f"was trained with algorithm '{algorithm}' (its model_info.json)"
               if algorithm != "two_stage" else
               "was saved past its two-stage run's switch, its discriminator trained")
        raise UserInputError(
            f"--init_checkpoint={path} {how}: a two-stage "
            "run trains its generator, then starts its discriminator from it, so the "
            "checkpoint's discriminator would be overwritten; start a joint run from it "
            "(without ablations/two_stage.gin)")
    if variant and model.algorithm == "two_stage":
        raise UserInputError(
            f"--init_checkpoint={path} was trained with {variant[0]}: a two-stage run "
            "starts its discriminator from its generator at the switch, so the encoder it "
            "would take from there would not last; start a joint run from it")
    heads = _other_shape(earlier, model, ("num_heads",))
    if heads:  # (its weights have this model's shapes: they would load and attend otherwise)
        raise UserInputError(
            f"--init_checkpoint={path} does not fit this model (its discriminator has {heads}: "
            "the weights take this model's shapes, split into other attention heads); "
            f"describe its architecture: --gin_file={_config_of(path)} after the size's file, "
            "before any ablation file")
    try:
        if variant:  # (read alone: a failed read of the whole may have assigned some parts)
            return path, *_initialise_encoder(model, path, variant)
        # read(): the checkpoint may come from write() (no save counter) or save().
        _part_of(model, required=True).read(path).expect_partial(
        ).assert_existing_objects_matched()
        _part_of(model, required=False).read(path).expect_partial()
    except (AssertionError, ValueError, tf.errors.NotFoundError,
            tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
        first = first_line(e)[:200]
        if variant:
            raise UserInputError(
                f"--init_checkpoint={path}'s encoder does not fit this model's ({first}); it "
                f"was trained with {variant[0]}, in the shape its model dir's "
                "operative_config.gin gives: use the same size file and encoder bindings"
            ) from None
        shape = _other_shape(earlier, model)
        raise UserInputError(
            f"--init_checkpoint={path} does not fit this model ("
            + (f"its discriminator has {shape}" if shape else first) + "); describe its "
            f"architecture: --gin_file={_config_of(path)} after the size's file, before any "
            "ablation file") from None
    return path, [], None


def _config_of(checkpoint: str) -> str:
    """The operative_config.gin beside a checkpoint, as a --gin_file to give (gin reads a
    local file only)."""
    config = f"{os.path.dirname(checkpoint) or '.'}/{OPERATIVE_CONFIG}"
    return (("<its model dir>/" + OPERATIVE_CONFIG) if not tf.io.gfile.exists(config)
            else f"<a local copy of {config}>" if "://" in config else config)


# Objectives whose replaced-token head means one thing: the probability that a token was
# replaced by a generator's sample.
_REPLACED_TOKEN_HEADS = ("electra", "electra_15")


def _other_variant(earlier: dict, model) -> tuple[str, str, bool] | None:
    """(what the checkpoint's model dir trained, what this run trains, whether its
    replaced-token head means this run's) where their networks differ: objective (but
    'electra' and 'electra_15', whose networks are one), uniform replacements against a
    generator, or another generator (what it shares, `sharing`, or its size). None where
    they are one, or the discriminators differ in size (the generator's follows: another
    size, not another variant), or the checkpoint has no model_info.json to say."""
    if "objective" not in earlier:
        return None
    there = (earlier["objective"], earlier.get("options", {}).get("uniform_generator", False))
    here = (model.objective, model.uniform_generator)
    same_head = there[0] in _REPLACED_TOKEN_HEADS and here[0] in _REPLACED_TOKEN_HEADS
    if there[1] == here[1] and (there[0] == here[0] or same_head):
        # The same objective: another generator (its shape, or what it shares with the
        # discriminator) is another network too, but not one whose discriminator differs
        # as well (its generator's shape follows it: another size, not another variant).
        here_info = {"sharing": model.sharing, "generator": _config_dict(model.generator_config)}
        if not (earlier.get("generator") and here_info["generator"]) or _other_shape(
                earlier, model, _WEIGHT_SHAPE_KEYS):
            return None
        shape = [key for key in factory.SHAPE_KEYS
                 if _shape(earlier, "generator", key) != _shape(here_info, "generator", key)]
        if earlier.get("sharing", model.sharing) == model.sharing and not shape:
            return None

        def name(info):
            return (f"sharing '{info.get('sharing', model.sharing)}'" + (
                ", a generator of " + ", ".join(f"{key} {_shape(info, 'generator', key)}"
                                                for key in shape) if shape else ""))

        return name(earlier), name(here_info), same_head

    def name(objective, uniform):
        return f"objective '{objective}'" + (" with uniform replacements" if uniform else "")

    return name(*there), name(*here), same_head


# The size settings that shape a weight (the number of heads splits a kernel, shaped alike).
_WEIGHT_SHAPE_KEYS = tuple(key for key in factory.SHAPE_KEYS if key != "num_heads")


def _other_shape(earlier: dict, model, keys=factory.SHAPE_KEYS) -> str | None:
    """How the discriminator of a checkpoint's model dir (`earlier`, its model_info.json)
    differs from the model's in the size settings `keys` ("hidden_size 384, num_layers 6
    (its model_info.json), this model's 128, 2"), or None."""
    if not earlier.get("discriminator"):
        return None
    here = {"discriminator": _config_dict(model.discriminator_config)}
    keys = [key for key in keys
            if _shape(earlier, "discriminator", key) != _shape(here, "discriminator", key)]
    if not keys:
        return None
    return (", ".join(f"{key} {_shape(earlier, 'discriminator', key)}" for key in keys)
            + " (its model_info.json), this model's "
            + ", ".join(str(_shape(here, "discriminator", key)) for key in keys))


def _initialise_encoder(model, path: str, variant) -> tuple[list[str], str]:
    """A run of another variant than its checkpoint's (`variant`: _other_variant's; an
    ELECTRA run from a BERT-style `mlm` model, say) takes the discriminator's encoder from
    it and, where both heads mean one thing, the replaced-token head; the model's other
    parts start fresh, the checkpoint's other parts are not used. Returns the parts that
    start fresh, by name, and a note saying so."""
    parts = {"discriminator": model.discriminator}
    if variant[2] and model.discriminator_predictions is not None:
        parts["discriminator_predictions"] = model.discriminator_predictions
    holder = tf.Module()
    for part, layer in parts.items():
        setattr(holder, part, layer)
    tf.train.Checkpoint(model=holder).read(path).expect_partial(
    ).assert_existing_objects_matched()
    fresh = sorted(name for name, child in model._trackable_children().items()  # noqa
                   if name not in parts and name not in TRAINING_ONLY_PARTS
                   and child is not model.discriminator)
    taken = "its encoder" + (" and replaced-token head start" if len(parts) > 1 else " starts")
    shared = model.sharing == "embeddings" and any(name.startswith("generator")
                                                   and name != "generator_predictions"
                                                   for name in fresh)
    note = (f"was trained with {variant[0]}, this run with {variant[1]}: {taken} the "
            "discriminator, the rest of it is not used"
            + (f"; {', '.join(fresh)} start fresh (model_info.json: init_fresh)" if fresh else "")
            + (", but for the embeddings the generator shares" if shared else ""))
    return fresh, note


def _part_of(model, required: bool) -> tf.train.Checkpoint:
    """A checkpoint of the model's parts that are (`required`) or are not in
    TRAINING_ONLY_PARTS, under the names the model's own checkpoint gives them."""
    holder = tf.Module()
    for name, child in model._trackable_children().items():  # pylint: disable=protected-access
        if (name in TRAINING_ONLY_PARTS) != required:
            setattr(holder, name, child)
    return tf.train.Checkpoint(model=holder)
