"""A fine-tuning run: what `scripts/run_finetuning.py` does, bound by gin.

    read and check the task's files -> for each of N seeds: a task model (the encoder's
    pre-trained weights, or random ones), AdamW with layer-wise LR decay, linear warmup
    and decay, `num_epochs` of training, then the final model scored on the dev sets and
    its dev/test predictions written -> results.json (every trial, median, mean, std) and
    a printed table

Early stopping is not used: like the paper, the model after the last epoch is reported.
Hyperparameters are gin (`finetuning.*`, `optimizer.*`; gin/finetune/{tiny,small,base,
large}.gin hold paper Table 7's); paths are arguments.

Written in the model dir: `results.json`, and per trial `trial_K/` with the dev (and test)
predictions (GLUE test sets in the GLUE submission format under `trial_K/glue/`), the
fine-tuned weights (`model/ckpt`), `task_info.json` (what export needs, and what the trial
was run with: seed, inputs' SHA-256, the vocab's path and SHA-256, hyperparameters),
`vocab.txt` (a copy of the vocab, which export falls back to when the trial has moved
away from the vocab's path) and `trial.json` (its entry in results.json). Each file is
written under a temporary name and renamed, and a trial's folder appears only once it is
complete.

An interrupted run resumes: the same command on a model dir with trial folders but no
results.json keeps each complete trial whose task_info.json matches what this run would do,
trains the others, and writes results.json over them all. A trial that does not match is
refused, naming it. A finished run (results.json) is refused unless --overwrite replaces
it, or a larger --num_trials adds trials to it: the same command with more trials keeps the
finished ones, trains the new ones (their seeds follow) and rewrites results.json over all.
"""

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import time

import gin
import keras
import numpy as np
import tensorflow as tf

from electra_tf import atomic, choices, gin_files, tokenization
from electra_tf.data import writer
from electra_tf.errors import UserInputError
from electra_tf.finetune import features as feats
from electra_tf.finetune import metrics, readers, squad, tasks
from electra_tf.finetune.models import QA_HEADS, TaskModel
from electra_tf.modeling import flops
from electra_tf.modeling.config import SIZES, EncoderConfig, encoder_config
from electra_tf.modeling.layers import precision_policy
from electra_tf.training import optimization, strategies
from electra_tf.training.trainer import LossScale

RESULTS = "results.json"
TASK_INFO = "task_info.json"
VOCAB_COPY = "vocab.txt"  # a trial's copy of its vocab
TRIAL_RESULT = "trial.json"  # a trial's entry in results.json, for a resumed run
NO_INIT = ("none", "random")
# ELECTRA's QA head, the official defaults: the answerability loss's weight, and the
# no-answer threshold, qa_na_threshold = -2.75 on the impossibility logit, as a probability.
ANSWERABLE_WEIGHT = 0.5
ELECTRA_NO_ANSWER_THRESHOLD = float(1.0 / (1.0 + np.exp(2.75)))
# optimizer.* parameters a trial sets from its own settings (pre-training takes them from
# gin): a binding of one would be overridden without a word. What to bind instead.
SET_BY_FINETUNING = {
    "learning_rate": "LEARNING_RATE (finetuning.learning_rate)",
    "warmup_steps": "finetuning.warmup_proportion",
    "learning_rate_multipliers": "LAYERWISE_LR_DECAY (finetuning.layerwise_lr_decay)"}


# ------------------------------------------------------------------------------ the encoder


@dataclasses.dataclass
class Initialization:
    """The encoder a run starts from: its shape, its weights (None: random), its vocab and
    how text is tokenized."""
    config: EncoderConfig
    weights: list | None
    vocab_file: str
    lower_case: bool
    strip_accents: bool
    source: str
    # The sequence length the weights were trained at (a model dir's max_seq_length; None:
    # random or unknown): positions beyond it were never trained.
    trained_seq_length: int | None = None
    # What the run says of the weights read (a pre-training run's ckpt-0, untrained; a
    # two-stage run's checkpoint from before its discriminator trained).
    notes: tuple[str, ...] = ()

    def tokenizer(self) -> tokenization.Tokenizer:
        return tokenization.Tokenizer(self.vocab_file, self.lower_case, self.strip_accents)


def load_initialization(init_checkpoint: str, vocab_file: str | None = None,
                        random_init: bool = False, model_size: str = "small",
                        lower_case: bool = True,
                        strip_accents: bool | None = None) -> Initialization:
    """The discriminator of a model dir (run_pretraining.py's or convert_checkpoint.py's) or
    of a checkpoint prefix inside one; the encoder of a fine-tuned model (a
    run_finetuning.py --model_dir's best dev trial, a trial_K dir or its model/ckpt: an
    intermediate task's); or, with init_checkpoint "none", a randomly
    initialised encoder of `model_size` (paper Table 6, or tiny) on `vocab_file`.
    `random_init` keeps the model dir's shape and vocab but not its weights (the
    no-pre-training baseline). `lower_case` and `strip_accents` (default: lower_case) are
    the random encoder's text processing, checked against its vocab (a model dir's are its
    own). Clears gin's config (the model dir's is read)."""
    from electra_tf.training.checkpoints import (generator_stage, latest_checkpoint,
                                               load_pretrainer)
    if init_checkpoint.lower() in NO_INIT:
        if not vocab_file:
            raise UserInputError(f"--init_checkpoint={init_checkpoint} needs --vocab_file (e.g. "
                                 "data/vocab/bert_uncased.txt) to size the random encoder")
        if model_size not in SIZES:
            raise UserInputError(f"--model_size={model_size} is not one of {', '.join(SIZES)}")
        vocab = tokenization.load_vocab(vocab_file)
        strip_accents = lower_case if strip_accents is None else strip_accents
        writer.check_case(vocab, vocab_file, lower_case)
        writer.check_accents(vocab, vocab_file, strip_accents)
        return Initialization(encoder_config(model_size, vocab_size=len(vocab)), None,
                              vocab_file, lower_case, strip_accents, f"random {model_size}")
    tuned = _fine_tuned_dir(init_checkpoint)
    if tuned is not None:
        return _fine_tuned_initialization(tuned, vocab_file, random_init)
    latest_checkpoint(init_checkpoint)  # (its refusals name --init_checkpoint)
    # The model dir's latest checkpoint, or the one named, read once: a run writing the
    # model dir may delete a checkpoint read a moment before (load_pretrainer takes the next
    # one of a model dir, and names one that was named).
    loaded = load_pretrainer(init_checkpoint, vocab_file)
    checkpoint = loaded.checkpoint
    untrained = not random_init and generator_stage(checkpoint, loaded.info)
    if untrained:  # (its random discriminator was fine-tuned as if pre-trained)
        raise UserInputError(f"--init_checkpoint={untrained}")
    weights = None if random_init else loaded.model.discriminator.get_weights()
    from electra_tf.export.saved_model import weights_read
    return Initialization(loaded.model.discriminator_config, weights, loaded.vocab_file,
                          loaded.lower_case, loaded.strip_accents,
                          ("random, shaped as " if random_init else "") + checkpoint,
                          # (an import's cap is not what its source was trained on)
                          None if random_init or loaded.info.get("source")
                          else loaded.max_seq_length,
                          () if random_init else tuple(weights_read(loaded, "")[1:]))


def fine_tuning_output(path: str) -> str | None:
    """The fine-tuning output or trial dir `path` names (its model/ckpt prefix or model/
    folder too), or None for anything else."""
    from electra_tf.training.checkpoints import checkpoint_prefix
    path = checkpoint_prefix(path).rstrip("/")  # (its .index or .data file given)
    if path.endswith(os.path.join("model", "ckpt")):
        path = os.path.dirname(os.path.dirname(path))
    elif os.path.basename(path) == "model" and tf.io.gfile.exists(
            os.path.join(path, "ckpt.index")):
        path = os.path.dirname(path)
    if any(tf.io.gfile.exists(os.path.join(path, name)) for name in (TASK_INFO, RESULTS)):
        return path
    return None


def _fine_tuned_dir(path: str) -> str | None:
    """`fine_tuning_output`, and an interrupted run's dir refused naming a complete trial."""
    tuned = fine_tuning_output(path)
    if tuned is None:
        from electra_tf.export.saved_model import unfinished_run
        unfinished_run(path, "--init_checkpoint")
    return tuned


def _fine_tuned_initialization(path: str, vocab_file: str | None,
                               random_init: bool) -> Initialization:
    """The encoder of a fine-tuned model (of the best dev trial of an output dir): the
    intermediate task's weights, its head left out, for fine-tuning on another task."""
    from electra_tf.export.saved_model import load_finetuned
    tuned = load_finetuned(path, vocab_file=vocab_file)
    info = tuned.info
    weights = None if random_init else tuned.model.encoder.get_weights()
    lower_case = info.get("lower_case", True)
    return Initialization(EncoderConfig(**info["encoder"]), weights, tuned.vocab_file,
                          lower_case, info.get("strip_accents", lower_case),
                          ("random, shaped as " if random_init else "")
                          + os.path.join(tuned.trial_dir, "model", "ckpt"),
                          None if random_init else info.get("trained_seq_length"))


def default_gin_file(config: EncoderConfig) -> str:
    """gin/finetune/<size>.gin for the encoder's size (by its hidden size if it is none of
    the paper's)."""
    for size, shape in SIZES.items():
        if all(getattr(config, k) == v for k, v in shape.items() if k != "embedding_size"):
            return f"finetune/{size}.gin"
    hidden = config.hidden_size
    size = ("tiny" if hidden <= 128 else "small" if hidden <= 256 else
            "base" if hidden <= 768 else "large")
    return f"finetune/{size}.gin"


# ------------------------------------------------------------------------------ the run


# The gin parameters whose type run_finetuning checks, by kind (a string 'False' is true).
_INTEGERS = ("train_batch_size", "max_seq_length", "eval_batch_size", "max_train_steps",
             "doc_stride", "max_query_length", "max_answer_length", "n_best_size", "beam_size",
             "log_every")
_NUMBERS = ("learning_rate", "num_epochs", "layerwise_lr_decay", "warmup_proportion",
            "clip_norm", "head_dropout", "no_answer_threshold")
_FLAGS = ("official_layerwise_decay", "double_unordered", "save_model", "jit_compile",
          "static_shapes")


_MAY_BE_NONE = ("num_epochs", "max_seq_length", "clip_norm", "max_train_steps",
                "no_answer_threshold", "log_every", "static_shapes")
# What each number may be (checked before --overwrite deletes an earlier run; some were
# refused only when the first trial built its optimizer, by names the user never set):
# (lowest, lowest allowed, highest, highest allowed, what it is, the name to bind).
_RANGES = {
    "learning_rate": (0, True, math.inf, False, "the peak learning rate", "LEARNING_RATE"),
    "num_epochs": (0, False, math.inf, False, "passes over the training set; None: the "
                   "task's", "NUM_EPOCHS"),
    "layerwise_lr_decay": (0, False, 1, True, "each layer below learns this factor slower; "
                           "1: off; the paper 0.8, 0.9 for Large", "LAYERWISE_LR_DECAY"),
    "warmup_proportion": (0, True, 1, True, "the share of the steps that warm up", None),
    "head_dropout": (0, True, 1, False, "a dropout rate", None),
    **{name: (1, True, math.inf, False, "a count", None) for name in (
        "eval_batch_size", "max_train_steps", "log_every", "max_query_length",
        "max_answer_length", "n_best_size")},
}


def _check_ranges(values: dict) -> None:
    """Each of `values` (of type already checked) in its _RANGES range, None passing where
    the parameter may be None: else one line naming it, by its macro where it has one."""
    for name, value in values.items():
        low, low_in, high, high_in, what, macro = _RANGES[name]
        if value is None and name in _MAY_BE_NONE:
            continue
        if (value > low or low_in and value == low) and (value < high
                                                         or high_in and value == high):
            continue
        setting = f"{macro}={value!r} (finetuning.{name})" if macro else (
            f"finetuning.{name}={value!r}")
        bounds = f"{'at least' if low_in else 'above'} {low}"
        if low_in and high_in:
            bounds = f"from {low} to {high}"
        elif high != math.inf:
            bounds += f" and {'at most' if high_in else 'below'} {high}"
        elif what != "a count":
            bounds += " and finite"
        none = "None or " if name in _MAY_BE_NONE else ""
        raise UserInputError(f"{setting} must be {none}{bounds} ({what})")


@gin.configurable("finetuning", denylist=["task_data", "init", "model_dir", "num_trials",
                                          "seed", "log", "overwrite"])
def run_finetuning(task_data: tasks.TaskData, init: Initialization, model_dir: str,
                   num_trials: int = 1, seed: int = 0, log=print, *, overwrite: bool = False,
                   learning_rate: float = 1e-4, train_batch_size: int = 32,
                   num_epochs: float | None = None, max_seq_length: int | None = None,
                   layerwise_lr_decay: float = 0.8, official_layerwise_decay: bool = False,
                   warmup_proportion: float = 0.1, clip_norm: float | None = 1.0,
                   head_dropout: float = 0.1, eval_batch_size: int = 64,
                   max_train_steps: int | None = None, doc_stride: int = 128,
                   max_query_length: int = 64, max_answer_length: int = 30,
                   n_best_size: int = 20, no_answer_threshold: float | None = None,
                   qa_head: str = "electra", beam_size: int = 20,
                   tag_encoding: str = "BIOES",
                   double_unordered: bool = True, loss_reduction: str = "mean",
                   log_every: int | None = None, save_model: bool = True,
                   precision: str = "float32", jit_compile: bool = False,
                   static_shapes: bool | None = None,
                   strategy: tf.distribute.Strategy | None = None) -> dict:
    """Fine-tune `num_trials` times (seeds seed, seed+1, ...) and write results.json.

    Args:
      task_data: the task and its examples (`tasks.load`).
      init: the encoder to start from (`load_initialization`).
      model_dir: where results, predictions and weights go (with several workers, the
        chief alone writes it).
      overwrite: replace the run a model dir already holds (its results.json and trial_K
        folders, deleted first). Without it a finished run (results.json) is refused unless
        num_trials exceeds its trials (it is extended), and an interrupted one (trial
        folders only) resumed: in both, complete trials are kept if their task_info.json
        matches this run's (else refused), the others trained.
      learning_rate: peak learning rate: the head's; with layer-wise decay the top block
        learns at learning_rate x layerwise_lr_decay (x its square with
        official_layerwise_decay), each block below a factor slower.
      train_batch_size, max_seq_length: the batch and the sequence length; None: the
        official code's for the task (128; 512 for QA), at most the encoder's positions.
      num_epochs: passes over the training set; None: the paper's for the task (3; 10 for
        RTE and STS-B; 2 for SQuAD).
      layerwise_lr_decay: each layer below the top learns this factor slower (1: off).
      official_layerwise_decay: the official code's exponents (one decay step more).
      warmup_proportion: linear warmup over this fraction of the steps, then linear decay.
      clip_norm: global-norm gradient clipping (None: off).
      head_dropout: dropout before the head.
      max_train_steps: stop after this many steps (a quick check; the schedule spans the
        shorter run).
      doc_stride, max_query_length, max_answer_length, n_best_size: extractive QA (see
        `squad`).
      no_answer_threshold: SQuAD 2.0 answers "" when the no-answer probability exceeds it
        (results' exact and f1; best_exact and best_f1 search every threshold). None: the
        head's: sigmoid(-2.75) = 0.06 for ELECTRA's (the official qa_na_threshold, -2.75
        on its impossibility logit), 0.5 for BERT's.
      qa_head: "electra", the official ELECTRA QA head (joint start/end prediction with a
        beam; the answerability classifier on [CLS] and the start distribution, its loss
        weighted 0.5), or "bert", independent start and end logits (see
        `models.TaskModel`).
      beam_size: the ELECTRA head's beam: starts kept, and ends per start.
      tag_encoding: "BIOES": span tags (B-/I-/E-/S- prefixes, in any scheme) are learnt
        re-encoded as BIOES, as the official code does, and predictions go back to the
        file's scheme (BIO, IOB1 or BIOES) with the same chunks; "file": the file's own
        tags. Token-level tags (e.g. POS) are learnt as they are either way.
      double_unordered: train MRPC and STS-B on both orders of each pair (the official
        code's option of that name; it doubles their training sets).
      loss_reduction: "mean" (over the batch's examples, or tagged words) or "sum", as the
        official code minimises; with clip_norm 1 the summed loss's gradients are clipped to
        unit norm at nearly every step.
      log_every: steps between loss lines (default: 10 lines per trial).
      save_model: write each trial's fine-tuned weights.
      precision: Keras' policy for the trials: float32, mixed_bfloat16 (TPUs, Ampere and
        later GPUs) or mixed_float16 (dynamic loss scaling; a step whose gradients overflow
        is skipped). The weights stay float32; the process's own policy is put back after.
      jit_compile: compile each step's forward and backward pass with XLA (GPUs, where the
        uncompiled step is bound by kernel launches). Batches are then padded to a multiple
        of 32 tokens, so that XLA compiles one program per 32 tokens of length, not one per
        length.
      static_shapes: every batch has the same shape, as TPUs need (they compile one
        program per shape): training batches keep all MAX_SEQ_LENGTH positions, and
        prediction batches also all `eval_batch_size` rows (the last one padded with empty
        rows, whose outputs are dropped); on a TPU, or on several replicas of this process
        (not several workers), the predictions are split over the replicas. With
        `jit_compile` on one device XLA compiles the whole step, the update included, as a
        TPU does, and each prediction batch. None: on under TPUStrategy (which refuses
        mixed_float16), off elsewhere.
      strategy: a MirroredStrategy, MultiWorkerMirroredStrategy or TPUStrategy
        (`strategies.create_strategy`) to split each batch over its replicas; the update
        equals one device's on the whole batch. None: the default device.

    Returns the results dict written to results.json.
    """
    if num_trials < 1:
        raise UserInputError(f"--num_trials={num_trials} must be at least 1")
    highest = choices.SEED_BOUNDS["upper_bound"]
    if not 0 <= seed <= highest - (num_trials - 1):
        # (numpy's seeding refused it with a traceback, a later trial's once the trials
        # before it had trained)
        if num_trials == 1 or seed < 0:
            raise UserInputError(f"--seed={seed} must be from 0 to {highest}")
        raise UserInputError(f"--seed={seed} with --num_trials={num_trials} seeds trials up to "
                             f"{seed + num_trials - 1}, above {highest}: use a --seed from 0 "
                             f"to {highest - (num_trials - 1)}")
    gin_files.check_read_by("fine-tuning")
    bound = gin.get_bindings("optimizer", resolve_references=False)
    for name, instead in SET_BY_FINETUNING.items():
        if name in bound:
            raise UserInputError(f"optimizer.{name} is not read by fine-tuning, which sets it "
                                 f"from its own settings; bind {instead} instead")
    # (before --overwrite deletes the earlier run: create_optimizer checks them too late)
    optimization.check_types(gin.get_bindings("optimizer"))
    gin_files.check_types(
        "finetuning", {k: v for k, v in locals().items() if k in _INTEGERS + _NUMBERS + _FLAGS},
        integers=_INTEGERS, numbers=_NUMBERS, flags=_FLAGS, may_be_none=_MAY_BE_NONE,
        macros={"learning_rate": "LEARNING_RATE", "train_batch_size": "TRAIN_BATCH_SIZE",
                "num_epochs": "NUM_EPOCHS", "max_seq_length": "MAX_SEQ_LENGTH",
                "layerwise_lr_decay": "LAYERWISE_LR_DECAY"})
    if clip_norm is not None and not clip_norm > 0:
        raise UserInputError(f"finetuning.clip_norm={clip_norm!r} must be a positive number, "
                             "or None for no clipping")
    _check_ranges({k: v for k, v in locals().items() if k in _RANGES})
    earlier = check_model_dir(model_dir, overwrite, num_trials)
    if precision not in flops.PRECISIONS:
        raise UserInputError(f"finetuning.precision={precision!r} is not one of "
                             f"{', '.join(flops.PRECISIONS)}")
    if qa_head not in QA_HEADS:
        raise UserInputError(f"finetuning.qa_head={qa_head!r} is not one of "
                             f"{', '.join(QA_HEADS)}")
    if no_answer_threshold is None:
        no_answer_threshold = ELECTRA_NO_ANSWER_THRESHOLD if qa_head == "electra" else 0.5
    if not 0.0 <= no_answer_threshold <= 1.0:
        raise UserInputError(
            f"finetuning.no_answer_threshold={no_answer_threshold:g} is not a probability: it "
            "is the chance of no answer above which a question is left unanswered, 0 to 1 "
            f"(the official qa_na_threshold, -2.75, is a logit: "
            f"{ELECTRA_NO_ANSWER_THRESHOLD:.4f}, the default for qa_head='electra')")
    for name, value in (("beam_size", beam_size), ("doc_stride", doc_stride)):
        if value < 1:
            raise UserInputError(f"finetuning.{name}={value} must be at least 1")
    if tag_encoding not in ("BIOES", "file"):
        raise UserInputError(f"finetuning.tag_encoding={tag_encoding!r} is not 'BIOES' or "
                             "'file'")
    if loss_reduction not in ("mean", "sum"):
        raise UserInputError(f"finetuning.loss_reduction={loss_reduction!r} is not 'mean' or "
                             "'sum'")
    task = task_data.task
    if max_seq_length is None:
        max_seq_length = min(task.max_seq_length, init.config.max_position_embeddings)
    if max_seq_length > init.config.max_position_embeddings:
        raise UserInputError(f"MAX_SEQ_LENGTH={max_seq_length} exceeds the encoder's "
                             f"{init.config.max_position_embeddings} positions; lower it")
    if max_seq_length < 8:
        raise UserInputError(f"MAX_SEQ_LENGTH={max_seq_length} is too small; use at least 8")
    if init.trained_seq_length and max_seq_length > init.trained_seq_length:
        log(f"note: MAX_SEQ_LENGTH={max_seq_length}, but {init.source} was trained on "
            f"sequences of {init.trained_seq_length}: the position embeddings from "
            f"{init.trained_seq_length} to {max_seq_length - 1} start untrained")
    if train_batch_size < 1:
        raise UserInputError(f"TRAIN_BATCH_SIZE={train_batch_size} is too small; use at "
                             "least 1")
    strategy = strategy or tf.distribute.get_strategy()
    tpu = strategies.on_tpu(strategy)
    if tpu and static_shapes is not None and not static_shapes:
        raise UserInputError("finetuning.static_shapes=False cannot run on a TPU, which "
                             "compiles one program per shape; leave it unset")
    static = tpu if static_shapes is None else bool(static_shapes)
    if tpu and precision == "mixed_float16":
        raise UserInputError("finetuning.precision='mixed_float16' is for GPUs; TPUs compute "
                             "in bfloat16: use 'mixed_bfloat16'")
    strategies.check_xla_off_tpu("finetuning.jit_compile", jit_compile, strategy)
    replicas = strategy.num_replicas_in_sync
    if train_batch_size % replicas:
        raise UserInputError(f"TRAIN_BATCH_SIZE={train_batch_size} does not split over "
                             f"{replicas} replicas; use a multiple of {replicas}")
    if static and _predicts_on_replicas(strategy) and eval_batch_size % replicas:
        raise UserInputError(f"finetuning.eval_batch_size={eval_batch_size} does not split "
                             f"over {replicas} replicas; use a multiple of {replicas}")
    epochs = task.epochs if num_epochs is None else float(num_epochs)
    tokenizer = init.tokenizer()
    options = dict(max_seq_length=max_seq_length, doc_stride=doc_stride,
                   max_query_length=max_query_length, double_unordered=double_unordered,
                   qa_head=qa_head, tag_encoding=tag_encoding)
    adapter = _ADAPTERS[task.kind](task_data, tokenizer, options, log)
    train = adapter.train_features
    n_train = len(train["input_ids"])
    if n_train == 0:
        raise UserInputError(f"{task_data.train.path} gave no training examples; check it")
    unknown = _unknown_share(train, tokenizer)
    if unknown > writer.UNKNOWN_NOTE_FRACTION:
        log(f"note: {unknown:.0%} of {task_data.train.path}'s tokens are [UNK]: the model's "
            f"vocab ({init.vocab_file}) does not cover the text (its characters or script: a "
            "Chinese text needs a Chinese vocab); check --init_checkpoint or --vocab_file")
    steps = max(1, math.ceil(n_train * epochs / train_batch_size))
    span = f"{epochs:g} epoch{'s' * (epochs != 1)}"
    if max_train_steps and int(max_train_steps) < steps:
        span = f"max_train_steps={int(max_train_steps)} of the {steps} of {span}"
        steps = int(max_train_steps)
    examples = getattr(adapter, "train_examples", len(task_data.train.examples))
    log(f"{task.name}: {examples} training examples "
        f"({n_train} features of {max_seq_length} tokens), {steps} steps of "
        f"{train_batch_size} ({span}), from {init.source}")
    for note in init.notes:
        log(note)

    # Several workers train together and predict alike; the chief alone writes the model
    # dir (shared storage: two writers would delete each other's trial folders).
    worker, chief = strategies.worker_info(strategy)
    if not chief:
        log(f"worker {worker}: the chief writes {model_dir}; this worker writes nothing")
    digests = input_digests(task_data, init)
    decode_options = dict(n_best_size=n_best_size, max_answer_length=max_answer_length,
                          no_answer_threshold=no_answer_threshold)
    head_options = dict(qa_head=qa_head, beam_size=beam_size, doc_stride=doc_stride)
    settings = dict(
        inputs_sha256=digests, vocab_sha256=tokenization.vocab_sha256(init.vocab_file),
        # (the columns read: the same files read in other columns train another model)
        **({"columns": task_data.columns} if task_data.columns else {}),
        num_train_steps=steps, hyperparameters=dict(
        learning_rate=learning_rate, train_batch_size=train_batch_size, num_epochs=epochs,
        layerwise_lr_decay=layerwise_lr_decay, official_layerwise_decay=official_layerwise_decay,
        warmup_proportion=warmup_proportion, clip_norm=clip_norm, head_dropout=head_dropout,
        double_unordered=double_unordered, loss_reduction=loss_reduction,
        tag_encoding=tag_encoding, precision=precision, jit_compile=jit_compile,
        save_model=save_model,
        # (only when on: trials recorded before the option existed still resume)
        **({"static_shapes": True} if static else {})),
        # (as JSON has them: a binding to another configurable is spelt by its repr)
        optimizer=json.loads(json.dumps(gin.get_bindings("optimizer"), default=repr)))
    strategies.check_same_settings(strategy, {
        "input files": digests, "hyperparameters": dict(settings, inputs_sha256=None),
        "--seed": seed, "--num_trials": num_trials, "--task": task.name})

    def trial_info(trial):
        return _task_info(adapter, init, task_data, max_seq_length, max_query_length,
                          seed + trial, decode_options, head_options, settings)

    kept = [False] * num_trials
    if not overwrite and chief:
        kept = resumable_trials(model_dir, earlier, num_trials, trial_info)
        if RESULTS in earlier:
            log(f"note: {model_dir} holds a finished run of {_finished_trials(model_dir)} "
                f"trial(s); its trials are kept and the run is extended to {num_trials}")
        earlier = []
    kept = _chief_decides(strategy, kept, chief)
    for name in earlier if chief else ():  # results.json first: no stale scores if stopped
        path = os.path.join(model_dir, name)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
    if chief:
        tf.io.gfile.makedirs(model_dir)
    trials, rescore = [], []
    with precision_policy(precision):
        for trial in range(num_trials):
            trial_seed = seed + trial
            if kept[trial]:
                trial_dir = os.path.join(model_dir, f"trial_{trial}")
                record = read_trial_record(trial_dir) if tf.io.gfile.exists(trial_dir) else None
                if record is not None:  # (a worker that is not the chief may not see it)
                    trials.append(record)
                    if record.get("scores_version", 1) < metrics.SCORES_VERSIONS[task.kind]:
                        rescore.append(str(trial))
                log(f"trial {trial} (seed {trial_seed}): kept, complete in {trial_dir}" + (
                    ": " + ", ".join(f"{k} {score_text(v)}" for k, v in record["dev"].items())
                    if record else ""))
                continue
            started = time.time()
            with strategy.scope():
                model, optimizer = build_trial(
                    init, adapter.head, adapter.num_outputs, trial_seed, steps, learning_rate,
                    layerwise_lr_decay, official_layerwise_decay, warmup_proportion,
                    head_dropout, adapter.answerability, aggregate_gradients=False,
                    qa_head=qa_head, beam_size=beam_size)
                loss_scale = LossScale() if precision == "mixed_float16" else None
            if save_model:
                _check_room(model_dir, model, trial, strategy, chief, worker)
            loss, skipped = _train(model, optimizer, adapter, train, steps, train_batch_size,
                                   trial_seed, clip_norm, log_every or max(1, steps // 10), log,
                                   strategy, loss_scale, jit_compile, loss_reduction == "sum",
                                   static)
            dev, outputs, functions = {}, {}, {}
            reduce = getattr(adapter, "reduce_outputs", None)  # what the task reads
            for i, split in enumerate(adapter.dev_splits):
                predicted = _predict(model, split.features, eval_batch_size, strategy, static,
                                     jit_compile, reduce, _progress(split, log), functions)
                scores = adapter.score(split, predicted, n_best_size=n_best_size,
                                       max_answer_length=max_answer_length,
                                       no_answer_threshold=no_answer_threshold)
                suffix = "" if i == 0 else "_" + split.name.removeprefix("dev_")
                dev.update({k + suffix: v for k, v in scores.items()})
                outputs[split.name] = predicted
            test_outputs = {s.name: _predict(model, s.features, eval_batch_size, strategy,
                                             static, jit_compile, reduce, _progress(s, log),
                                             functions)
                            for s in adapter.test_splits}
            record = {"seed": trial_seed, "dev": dev, "final_train_loss": loss,
                      "seconds": round(time.time() - started, 1),
                      "scores_version": metrics.SCORES_VERSIONS[task.kind]}
            if loss_scale is not None:  # steps skipped for overflowing gradients
                record.update(skipped_steps=skipped,
                              final_loss_scale=float(loss_scale.scale.numpy()))
            if chief:
                _write_trial(os.path.join(model_dir, f"trial_{trial}"), model, adapter, outputs,
                             test_outputs, trial_info(trial), record, decode_options,
                             save_model)
            trials.append(record)
            log(f"trial {trial} (seed {trial_seed}): " + ", ".join(
                f"{k} {score_text(v)}" for k, v in dev.items()))
    if rescore:
        log(f"note: kept trial(s) {', '.join(rescore)} were scored by an older release, whose "
            f"scoring of {task.kind} has been corrected since: their scores may differ from "
            "what this release gives (BUILD.md, \"Interrupted runs\"); pass --overwrite to "
            "train and score every trial again")
    if not trials:  # a worker that is not the chief, and sees none of the kept trials
        log(f"worker {worker}: every trial was kept from the earlier run; the chief's "
            f"{os.path.join(model_dir, RESULTS)} holds their scores")
        return {"task": task.name, "metric": task.metric, "trials": []}
    results = summarize(task.name, task.metric, trials)
    results.update(
        init_checkpoint=init.source, inputs_sha256=digests,
        num_train_examples=len(task_data.train.examples),
        num_train_steps=steps, labels=task_data.labels,
        # (binary F1 is of the second label: named, as a reader cannot tell it otherwise)
        **({"f1_label": task_data.labels[1]} if task.kind == "classification"
           and len(task_data.labels or ()) == 2 else {}),
        **({"qa_style": adapter.qa_styles} if task.kind == "qa" else {}),
        hyperparameters=dict(learning_rate=learning_rate, train_batch_size=train_batch_size,
                             num_epochs=epochs, max_seq_length=max_seq_length,
                             layerwise_lr_decay=layerwise_lr_decay,
                             official_layerwise_decay=official_layerwise_decay,
                             warmup_proportion=warmup_proportion,
                             # (MRPC's and STS-B's: a task whose pairs have an order, or
                             # none, does not read it)
                             **(dict(double_unordered=double_unordered)
                                if task.unordered_pairs else {}),
                             loss_reduction=loss_reduction, precision=precision,
                             jit_compile=jit_compile, static_shapes=static,
                             **(dict(qa_head=qa_head, beam_size=beam_size,
                                     no_answer_threshold=no_answer_threshold)
                                if task.kind == "qa" else {}),
                             **(dict(tag_encoding=tag_encoding,
                                     tag_scheme=adapter.tag_scheme)
                                if task.kind == "tagging" else {})))
    results = write_results(model_dir if chief else None, results, log)
    log(table(results))
    return results


def _undefined_to_null(results: dict) -> tuple[dict, list[str]]:
    """`results` with each dev score that is not finite (a metric undefined for these
    predictions, e.g. Pearson's r of a constant series) as None, and where they were."""
    undefined = []

    def clean(scores, where):
        out = {}
        for k, v in scores.items():
            out[k] = v if v is None or math.isfinite(v) else None
            if out[k] is None:
                undefined.append(f"{k} ({where})")
        return out
    results = dict(results, trials=[dict(t, dev=clean(t["dev"], f"trial {i}"))
                                    for i, t in enumerate(results["trials"])])
    for name in ("median", "mean", "std"):
        if name in results:
            results[name] = clean(results[name], name)
    return results, undefined


def write_results(model_dir: str | None, results: dict, log=print) -> dict:
    """Writes `results` to model_dir/results.json (None: only checks them) as strict JSON,
    and returns what the file holds. A dev score that is undefined (NaN) is written null,
    and said so: a failed trial (a regressor that predicts one value) is a result to see,
    not a crash that loses the other trials. Any other value that is not finite raises
    ValueError before the file is written: JSON has no NaN, and readers (jq, JavaScript,
    strict parsers) refuse Python's."""
    results, undefined = _undefined_to_null(results)
    text = json.dumps(results, indent=2, allow_nan=False, ensure_ascii=False)
    if undefined:
        log(f"undefined, written as null: {', '.join(undefined)} (a constant prediction or "
            "label has no correlation; a median, mean or std with an undefined trial is "
            "undefined)")
    if model_dir is not None:
        atomic.write_text(os.path.join(model_dir, RESULTS), text)
    return results


_TRIAL_DIR = re.compile(r"trial_\d+(\.partial)?")


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def input_digests(task_data: tasks.TaskData, init: Initialization) -> dict:
    """What the run read, by split name (train, dev, test, ...; each file's SHA-256), and
    the pre-trained weights ("init_checkpoint": its .index file's, which holds a checksum of
    every tensor; none for random weights): a rerun can tell whether results.json still
    describes these inputs."""
    digests = {split.name: file_sha256(split.path)
               for split in [task_data.train, *task_data.dev, *task_data.test]
               if split.path and tf.io.gfile.exists(split.path)}
    if init.weights is not None and tf.io.gfile.exists(init.source + ".index"):
        digests["init_checkpoint"] = file_sha256(init.source + ".index")
    return digests


def _unknown_share(features: dict, tokenizer) -> float:
    """The share of [UNK] among the text's tokens in `features` ([CLS], [SEP] and padding
    left out)."""
    ids = np.asarray(features["input_ids"])[np.asarray(features["input_mask"]) > 0]
    text = ids[~np.isin(ids, [tokenizer.cls_id, tokenizer.sep_id])]
    return float(np.mean(text == tokenizer.unk_id)) if text.size else 0.0


def check_model_dir(model_dir: str, overwrite: bool = False,
                    num_trials: int | None = None) -> list[str]:
    """What an earlier run left in `model_dir` (results.json first, then its trial
    folders), for `overwrite` to delete, or for a rerun to resume (`resumable_trials`).
    Without `overwrite` a finished run (results.json) is an error unless `num_trials`
    exceeds its trials (the run is extended), as is a `model_dir` that is a file, holds a
    pre-trained model, or is a trial's folder."""
    atomic.check_folder(model_dir)
    if not tf.io.gfile.isdir(model_dir):
        return []
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(model_dir)]
    # Another command's output: the trials written beside it would change what it is to the
    # commands that read it (an --init_checkpoint of it would take the best trial).
    if "model_info.json" in names or any(n == "checkpoint" or n.startswith("ckpt-")
                                         for n in names):
        raise UserInputError(
            f"--model_dir={model_dir} holds a pre-trained model (checkpoints, "
            "model_info.json), not a fine-tuning run; fine-tuning writes its trials to a "
            "folder of their own: choose another --model_dir (--init_checkpoint="
            f"{model_dir} fine-tunes that model)")
    from electra_tf.export.saved_model import serving_files
    ours = RESULTS in names or any(_TRIAL_DIR.fullmatch(n) for n in names)
    exported = None if ours else serving_files(model_dir, names)
    if exported:  # (a run's folder exported into is this run's: extended or overwritten)
        raise UserInputError(f"--model_dir={model_dir} holds {exported}, not a fine-tuning "
                             "run; choose another --model_dir")
    if TASK_INFO in names or TRIAL_RESULT in names:
        raise UserInputError(
            f"--model_dir={model_dir} is a trial of a fine-tuning run ({TASK_INFO}), not a "
            "folder for a run: choose another --model_dir (--init_checkpoint="
            f"{model_dir} fine-tunes its encoder further)")
    earlier = ([RESULTS] if RESULTS in names else []) + sorted(
        (n for n in names if _TRIAL_DIR.fullmatch(n)),
        key=lambda n: (int(re.sub(r"\D", "", n)), n))
    if RESULTS in earlier and not overwrite:
        finished = _finished_trials(model_dir)
        if num_trials is not None and finished is not None and num_trials > finished:
            return earlier
        held = f"{', '.join(earlier[:3])}{', ...' if len(earlier) > 3 else ''}"
        more = (f"pass --num_trials above {finished} to add trials to it, --overwrite to "
                "replace it," if finished else "pass --overwrite to replace it,")
        raise UserInputError(f"--model_dir={model_dir} already holds a fine-tuning run "
                             f"({held}); {more} or choose another --model_dir")
    return earlier


def _finished_trials(model_dir: str) -> int | None:
    """How many trials the finished run in model_dir reported (its results.json), or None
    if results.json cannot be read as one."""
    try:
        with tf.io.gfile.GFile(os.path.join(model_dir, RESULTS)) as f:
            trials = json.load(f).get("trials")
    except (tf.errors.OpError, ValueError, AttributeError):  # (not UTF-8, not JSON)
        return None
    return len(trials) if isinstance(trials, list) and trials else None


# task_info.json keys that record what a trial did without changing it: a trial written
# before them still resumes.
_RECORDED_SINCE = ("trained_seq_length", "vocab_sha256", "columns", "character_words")


def resumable_trials(model_dir: str, earlier: list[str], num_trials: int,
                     trial_info) -> list[bool]:
    """Which of this run's `num_trials` trials an interrupted run in `model_dir` completed
    (`earlier`: its trial folders, `check_model_dir`'s) with the task_info.json this run
    would write (`trial_info(K)`): those are kept; an incomplete one (trial_K.partial) is
    trained again. A complete trial run otherwise, a trial beyond num_trials, or one
    without its trial.json raises UserInputError naming it and the fix."""
    fix = "pass --overwrite to replace the earlier run, or choose another --model_dir"
    kept = [False] * num_trials
    for name in (n for n in earlier if n != RESULTS):  # (a finished run being extended)
        trial_dir = os.path.join(model_dir, name)
        k = int(re.sub(r"\D", "", name))
        if k >= num_trials:
            raise UserInputError(f"{trial_dir} is not one of this run's {num_trials} trial(s); "
                                 "rerun with the earlier --num_trials to resume it, or " + fix)
        if name.endswith(".partial"):
            continue
        if not tf.io.gfile.exists(os.path.join(trial_dir, TRIAL_RESULT)):
            raise UserInputError(f"{trial_dir} has no {TRIAL_RESULT} (it was written before "
                                 "runs could resume); " + fix)
        try:
            with tf.io.gfile.GFile(os.path.join(trial_dir, TASK_INFO)) as f:
                recorded = json.load(f)
        except (tf.errors.NotFoundError, json.JSONDecodeError) as e:
            raise UserInputError(f"{trial_dir}/{TASK_INFO} is missing or not JSON "
                                 f"({type(e).__name__}); " + fix) from None
        expected = json.loads(json.dumps(trial_info(k)))
        for key in _RECORDED_SINCE:  # a trial written before the key was recorded
            if key not in recorded:
                expected.pop(key, None)
        if "tag_spelling" not in recorded and expected.get("tag_spelling") is None:
            expected.pop("tag_spelling", None)  # (recorded since; None: as it was written)
        # (the ckpt-N it read, and its digest)
        started_from = recorded.get("init_checkpoint"), (
            recorded.get("inputs_sha256") or {}).get("init_checkpoint")
        if (recorded.get("inputs_sha256") or {}).get("init_checkpoint"):
            # The weights are their contents too (their .index file's digest), however
            # --init_checkpoint spells them ("./run", an absolute path, after a move).
            recorded.pop("init_checkpoint", None)
            expected.pop("init_checkpoint", None)
        if "vocab_sha256" in recorded:  # the vocab is its contents, wherever it now lies
            recorded.pop("vocab_file", None)
            expected.pop("vocab_file", None)
        elif isinstance(recorded.get("vocab_file"), str):  # recorded as given, before
            recorded["vocab_file"] = _absolute(recorded["vocab_file"])
        difference = _first_difference(recorded, expected)
        if difference:
            key, was, now = difference
            again = ("rerun with its settings to extend the run" if RESULTS in earlier
                     else "rerun its command to resume it")
            if key == "inputs_sha256.init_checkpoint" and _holds(*started_from):
                # (a model dir given as --init_checkpoint that has trained on since)
                raise UserInputError(
                    f"{trial_dir} was fine-tuned from {started_from[0]}, whose weights are "
                    "not those --init_checkpoint gives now (a model dir that has trained on "
                    f"since, say); {again} with --init_checkpoint={started_from[0]}, or "
                    + fix)
            if "tag_scheme" in key or "tag_spelling" in key:  # no setting chooses it
                raise UserInputError(
                    f"{trial_dir} was fine-tuned with {key}={was}, not {now} as this run "
                    "would be: the scheme is now read from the training and dev files "
                    "together (a dev S-, M- or IOE1's E- widens training's) and IOE1 is told "
                    "from IOE2; " + fix)
            raise UserInputError(f"{trial_dir} was fine-tuned with {key}={was}, not {now} as "
                                 f"this run would be; {again}, or " + fix)
        kept[k] = True
    return kept


def _holds(checkpoint, digest) -> bool:
    """Whether `checkpoint` (a ckpt-N prefix) is still there with the weights of `digest`
    (its .index file's SHA-256): a model dir keeps its last few checkpoints only, and a
    rerun trial writes new weights at the same path."""
    index = f"{checkpoint}.index"
    return (isinstance(checkpoint, str) and isinstance(digest, str)
            and tf.io.gfile.exists(index) and file_sha256(index) == digest)


def _absolute(path: str) -> str:
    """A local path made absolute (not normalised: "link/.." is where the link leads); a
    URL (gs://...) as it is."""
    return path if "://" in path or os.path.isabs(path) else os.path.join(os.getcwd(), path)


def _first_difference(recorded, expected, prefix=""):
    """(key, recorded value, expected value) of the first leaf where two task_info dicts
    differ, as JSON spells them; None if they are equal."""
    def spelt(d, key):
        return json.dumps(d[key], ensure_ascii=False) if key in d else "(none)"
    for key in sorted(set(recorded) | set(expected), key=lambda k: (k not in expected, k)):
        was, now = recorded.get(key), expected.get(key)
        if isinstance(was, dict) and isinstance(now, dict):
            found = _first_difference(was, now, f"{prefix}{key}.")
            if found:
                return found
        elif key not in recorded or key not in expected or was != now:
            return prefix + key, spelt(recorded, key), spelt(expected, key)
    return None


def read_trial_record(trial_dir: str) -> dict:
    """A complete trial's entry in results.json (its trial.json; undefined scores NaN)."""
    with tf.io.gfile.GFile(os.path.join(trial_dir, TRIAL_RESULT)) as f:
        record = json.load(f)
    record["dev"] = {k: math.nan if v is None else v for k, v in record["dev"].items()}
    return record


def _chief_decides(strategy: tf.distribute.Strategy, keep: list[bool],
                   chief: bool) -> list[bool]:
    """The chief's `keep` on every worker: the workers must train the same trials, and only
    the chief reads the model dir (another may not see it)."""
    if strategy.num_replicas_in_sync == 1 or strategies.on_tpu(strategy):
        return keep  # one process: the chief (a TPU's replicas are driven by one client)
    mine = tf.constant([int(k and chief) for k in keep], tf.int32)
    # Every replica of the chief adds its keep, every other replica 0.
    summed = strategies.summed_over_workers(strategy, mine)
    return [bool(v) for v in summed.numpy()]


def build_trial(init: Initialization, head: str, num_outputs: int, seed: int, steps: int,
                learning_rate: float, layerwise_lr_decay: float,
                official_layerwise_decay: bool = False, warmup_proportion: float = 0.1,
                head_dropout: float = 0.1, answerability: bool = False,
                aggregate_gradients: bool = True, qa_head: str = "electra",
                beam_size: int = 20):
    """One trial's task model (the initial encoder weights, a head drawn from `seed`) and
    its optimizer: AdamW (`optimizer.*` gin bindings) over `steps` steps, linear warmup
    and decay, layer-wise learning-rate multipliers on the encoder (the head gets 1).
    `aggregate_gradients=False`: the caller sums the gradients over replicas itself."""
    keras.utils.set_random_seed(seed)
    model = TaskModel(init.config, head, num_outputs, head_dropout=head_dropout,
                      answerability=answerability, qa_head=qa_head, beam_size=beam_size)
    if init.weights is not None:
        model.encoder.set_weights(init.weights)
    multipliers = optimization.layerwise_lr_multipliers(
        model.encoder, layerwise_lr_decay, official=official_layerwise_decay)
    optimizer = optimization.create_optimizer(
        learning_rate=learning_rate, num_train_steps=steps,
        warmup_steps=warmup_proportion * steps,  # (the official's, unrounded)
        learning_rate_multipliers=multipliers, aggregate_gradients=aggregate_gradients)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def summarize(task: str, metric: str, trials: list[dict]) -> dict:
    """results.json's content: every trial, and the median, mean and standard deviation
    (sample, ddof=1; 0 for one trial) of each dev metric over the trials. A statistic of
    trials one of which is undefined (NaN or None) is NaN: leaving that trial out would
    report the trials that worked as if they were all."""
    # (Those every trial has: trials an earlier version ran, resumed, may lack a newer one.)
    keys = [k for k in trials[0]["dev"] if all(k in t["dev"] for t in trials)]
    values = {k: np.array([t["dev"][k] for t in trials], np.float64) for k in keys}
    return {"task": task, "metric": metric, "trials": trials,
            "median": {k: float(np.median(v)) for k, v in values.items()},
            "mean": {k: float(np.mean(v)) for k, v in values.items()},
            "std": {k: float(np.std(v, ddof=1)) if len(v) > 1 else
                    0.0 if np.isfinite(v[0]) else math.nan for k, v in values.items()}}


def score_text(value: float | None) -> str:
    """A score as tables and logs print it (None, an undefined one: "undefined")."""
    return "undefined" if value is None or not math.isfinite(value) else f"{value:.4f}"


def table(results: dict) -> str:
    """The trials and their median / mean / std as a text table."""
    keys = list(results["median"])
    width = max(11, *(len(k) + 2 for k in keys))
    lines = ["trial  seed  " + "".join(k.rjust(width) for k in keys)]
    for i, t in enumerate(results["trials"]):
        lines.append(f"{i:<5}  {t['seed']:<4}  " + "".join(
            score_text(t["dev"][k]).rjust(width) for k in keys))
    for name in ("median", "mean", "std"):
        lines.append(f"{name:<12}" + "".join(score_text(results[name][k]).rjust(width)
                                             for k in keys))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ loop


LENGTH_MULTIPLE = 32  # under XLA, training batches are cut to a multiple of this many tokens


def _batch(features: dict, index: np.ndarray, multiple: int = 1,
           rows: int | None = None) -> dict:
    """Rows `index` of the features, cut to the longest sequence among them rounded up to
    a multiple of `multiple` (at most the features' length); with `rows`, padded to that
    many rows with zeros (empty rows: their input_mask is 0)."""
    longest = int(features["input_mask"][index].sum(axis=1).max())
    length = min(features["input_mask"].shape[1], -(-longest // multiple) * multiple)
    batch = {k: (v[index][:, :length] if v.ndim == 2 else v[index])
             for k, v in features.items()}
    if rows is not None and rows > len(index):
        batch = {k: np.concatenate([v, np.zeros((rows - len(v),) + v.shape[1:], v.dtype)])
                 for k, v in batch.items()}
    return batch


def _split_rows(strategy, batch: dict, rows: int):
    """`batch` as per-replica values: replica i takes rows [i * rows, (i + 1) * rows)."""
    return strategy.experimental_distribute_values_from_function(
        lambda context: {k: v[context.replica_id_in_sync_group * rows:][:rows]
                         for k, v in batch.items()})


def _predicts_on_replicas(strategy) -> bool:
    """Whether static-shape predictions run through the strategy's replicas: on a TPU
    (which runs only what strategy.run puts on it), or on several replicas all driven by
    this process (not several workers, each of which would see only its own replicas'
    outputs)."""
    if strategies.on_tpu(strategy):
        return True
    return (strategy.num_replicas_in_sync > 1
            and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy))


def _signature(features: dict) -> dict:
    return {k: tf.TensorSpec([None] * v.ndim, tf.as_dtype(v.dtype)) for k, v in features.items()}


def _train(model, optimizer, adapter, features, steps, batch_size, seed, clip_norm,
           log_every, log, strategy, loss_scale=None, jit_compile=False,
           summed=False, static=False) -> tuple[float, int]:
    """`steps` AdamW steps over shuffled batches; returns the mean loss of the last
    `log_every` steps and the number of steps skipped. Each replica takes an equal slice of
    every batch; its loss is weighted by its share of the batch's loss denominator
    (examples, or tagged tokens), the gradients are summed over replicas, then clipped by
    their global norm and applied: the update of one device running the whole batch. With
    a `LossScale` (mixed_float16) the loss is scaled before the gradients and they are
    unscaled after; a step whose gradients overflow is skipped and the scale halves. With
    `jit_compile` XLA compiles the forward and backward pass (the replicas' all-reduce and
    the update stay outside it, so any strategy runs it). `summed`: minimise the sum over
    the batch instead of the mean (the reported loss stays the mean). `static`: every batch
    keeps all positions (one shape: a TPU compiles the step once); with `jit_compile` on
    one device, XLA compiles the whole step, the clipping and the update included, as a
    TPU compiles it (a TPU compiles whatever runs in its replicas anyway)."""
    variables = model.trainable_variables
    replicas = strategy.num_replicas_in_sync
    tpu = strategies.on_tpu(strategy)
    # One replica off a TPU steps without strategy.run (a TPU runs only what strategy.run
    # puts on it); there XLA may compile the whole step.
    direct = replicas == 1 and not tpu
    whole = static and jit_compile and direct

    def apply(grads, finite):
        if loss_scale is None:
            optimizer.apply(grads, variables)
        else:
            optimizer.apply_gradients(zip(grads, variables), where=finite)

    def gradients(batch, weight):
        """This replica's loss, times `weight` (its share of the batch), and gradients."""
        with tf.GradientTape() as tape:
            loss = adapter.loss(model(batch, training=True), batch) * weight
            scaled = loss if loss_scale is None else loss * loss_scale.scale
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(tape.gradient(scaled, variables), variables)]
        return loss, grads

    if jit_compile and not whole and not tpu:
        gradients = tf.function(gradients, jit_compile=True)

    def replica_step(batch):
        context = tf.distribute.get_replica_context()
        count = adapter.loss_count(batch)
        total = strategies.sum_over_replicas(context, count)
        loss, grads = gradients(batch, count if summed else count / total)
        if summed:
            loss = loss / total
        grads = strategies.sum_over_replicas(context, grads)
        loss = strategies.sum_over_replicas(context, loss)
        finite = tf.constant(True)
        if loss_scale is not None:
            grads = [g / loss_scale.scale for g in grads]
            finite = tf.math.is_finite(tf.linalg.global_norm(grads))
        if clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        apply(grads, finite)  # (Keras merge_calls where the strategy needs it)
        if loss_scale is not None:
            loss_scale.update(finite)
        return loss, finite

    if direct:
        step = tf.function(replica_step, input_signature=[_signature(features)],
                           jit_compile=True if whole else None)
    else:
        @tf.function(reduce_retracing=True)
        def step(batch):
            results = strategy.run(replica_step, args=(batch,))
            return tuple(strategy.experimental_local_results(r)[0] for r in results)

    def distribute(batch):
        return batch if direct else _split_rows(strategy, batch, batch_size // replicas)

    multiple = (features["input_mask"].shape[1] if static else
                LENGTH_MULTIPLE if jit_compile else 1)
    rng = np.random.default_rng(seed)
    n = len(features["input_ids"])
    order = np.empty(0, np.int64)  # the data order: one permutation per epoch, batches
    recent, last = [], float("nan")  # may span two epochs (as the official repeat+shuffle)
    skipped = 0
    for s in range(steps):
        while len(order) < batch_size:
            order = np.concatenate([order, rng.permutation(n)])
        index, order = order[:batch_size], order[batch_size:]
        loss, applied = step(distribute(_batch(features, index, multiple)))
        recent.append(float(loss))
        skipped += not bool(applied)
        if not np.isfinite(recent[-1]):
            raise UserInputError(f"the loss is {recent[-1]} at step {s + 1}; lower "
                                 "LEARNING_RATE (or check the labels)")
        if (s + 1) % log_every == 0 or s + 1 == steps:
            last, recent = float(np.mean(recent)), []
            log(f"  step {s + 1}/{steps} | loss {last:.4f}"
                + (f" | loss scale {float(loss_scale.scale.numpy()):g}, {skipped} skipped"
                   if loss_scale is not None else ""))
    return last, skipped


PROGRESS_SECONDS = 60  # a prediction that takes longer says how far it is this often


def _progress(split: "_Split", log):
    """A `_predict` progress callback for `split`: a line at most every PROGRESS_SECONDS
    (a large test file took minutes without a word after the last training step)."""
    last = time.monotonic()
    examples = len(split.examples)

    def report(done: int, total: int):
        nonlocal last
        if done < total and time.monotonic() - last >= PROGRESS_SECONDS:
            last = time.monotonic()
            # QA's windows and a pair task's both orders are more inputs than the file's rows
            unit = "rows" if total == examples else f"inputs (the file's {examples:,} rows)"
            log(f"  predicting {split.path}: {done:,} of {total:,} {unit}")
    return report


def _predict(model, features: dict, batch_size: int, strategy=None,
             static: bool = False, jit_compile: bool = False, reduce=None,
             progress=None, functions: dict | None = None) -> dict:
    """The model's outputs on every row, as numpy arrays padded back to the full length.
    `static`: every batch has all positions and `batch_size` rows (the last padded with
    empty rows, whose outputs are dropped), split over the strategy's replicas where this
    process drives them all (`_predicts_on_replicas`); else one device runs each batch cut
    to its longest sequence, with `static` and `jit_compile` as one XLA program. `reduce`
    keeps what the task reads of each batch's outputs (a tagger's argmax, not its [B, L, C]
    logits: 100,000 sentences of 66 tags held 8.7 GB). `progress(done, total)` is called
    after each batch. `functions`: where the model's traced forward passes are kept between
    calls (one per trial: the splits share them)."""
    inputs = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
    n, full = len(inputs["input_ids"]), inputs["input_ids"].shape[1]
    strategy = strategy or tf.distribute.get_strategy()
    if static and _predicts_on_replicas(strategy):
        rows = batch_size // strategy.num_replicas_in_sync

        def make():
            @tf.function
            def replicated(batch):
                return strategy.run(lambda b: model(b, training=False), args=(batch,))
            return replicated

        replicated = _traced_once(functions, "replicated", make)

        def forward(batch):
            out = replicated(_split_rows(strategy, batch, rows))
            return {k: np.concatenate([t.numpy() for t in
                                       strategy.experimental_local_results(v)])
                    for k, v in out.items()}
    else:
        signature = _signature(inputs)
        jit = True if static and jit_compile else None

        def make():
            @tf.function(input_signature=[signature], jit_compile=jit)
            def traced(batch):
                return model(batch, training=False)
            return traced

        traced = _traced_once(functions, ("one device", str(signature), jit), make)

        def forward(batch):
            return {k: v.numpy() for k, v in traced(batch).items()}

    chunks = []
    for start in range(0, n, batch_size):
        index = np.arange(start, min(n, start + batch_size))
        out = forward(_batch(inputs, index, full if static else 1,
                             rows=batch_size if static else None))
        out = {k: v[:len(index)] for k, v in out.items()}
        chunks.append({k: _pad_to(k, v, full)
                       for k, v in (reduce(out) if reduce else out).items()})
        if progress is not None:
            progress(int(index[-1]) + 1, n)
    if not chunks:
        return {}
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def _traced_once(functions: dict | None, key, make):
    """The prediction function for `key` in `functions` (a trial's, for its one model),
    made by `make` once: each split of a trial traced its own, and TensorFlow's warning
    that 5 calls in a row retraced landed among an MNLI run's lines (2 dev, 3 test sets)."""
    if functions is None:
        return make()
    if key not in functions:
        functions[key] = make()
    return functions[key]


def _tsv(rows: list[list[str]]) -> str:
    """Rows as tab-separated text; a field holding a tab, a line end (\\n or \\r) or a
    quote is quoted, its quotes doubled, as the csv module and pandas.read_csv(sep="\\t")
    read it: an id or label with a tab or newline split its row. (csv.writer leaves a lone
    \\r unquoted when rows end in \\n.)"""
    def field(value: str) -> str:
        if any(c in value for c in '\t\n\r"'):
            return '"' + value.replace('"', '""') + '"'
        return value
    return "".join("\t".join(map(field, row)) + "\n" for row in rows)


# [B, L]; tagging's logits are [B, L, C], its reduced outputs tag_ids [B, L]
_PER_POSITION = ("start_logits", "end_logits", "tag_ids")


def _pad_to(key, array, length):
    """Per-position outputs of a batch cut to its longest sequence, padded back to
    `length` (very negative logits where there was padding). The ELECTRA QA head's beam
    ([B, K], [B, K, K]) holds positions, not one value per position."""
    per_position = key in _PER_POSITION or (key == "logits" and array.ndim == 3)
    if per_position and array.shape[1] < length:
        pad = [(0, 0), (0, length - array.shape[1])] + [(0, 0)] * (array.ndim - 2)
        return np.pad(array, pad, constant_values=-1e9 if array.dtype.kind == "f" else 0)
    return array


# ------------------------------------------------------------------------------ tasks


@dataclasses.dataclass
class _Split:
    name: str
    path: str
    examples: list
    features: dict
    submission: str | None = None
    extra: dict | None = None


class _SentenceTask:
    """classification / regression on [CLS]."""
    head = "sentence"
    answerability = False
    tag_scheme = None

    def __init__(self, data: tasks.TaskData, tokenizer, options, log):
        self.data, self.regression = data, data.task.kind == "regression"
        self.labels = data.labels
        self.num_outputs = 1 if self.regression else len(self.labels)
        # The head learns label / scale (official STS-B: score / 5); predictions are scaled
        # back.
        self.target_scale = data.task.target_scale
        L = options["max_seq_length"]

        def encode(split, examples=None):
            features, cut = feats.encode_sentences(tokenizer, examples or split.examples, L,
                                                   self.labels, self.regression)
            if examples:  # MRPC's, STS-B's pairs twice, both ways round: cut alike
                cut = cut * len(split.examples) // len(examples)
            if cut:
                log(f"{split.path}: {cut} of {len(split.examples)} examples do not fit in "
                    f"{L} tokens; they are cut, a word piece at a time from the longer text "
                    "(raise MAX_SEQ_LENGTH to keep more)")
            return features

        train = data.train.examples
        if options["double_unordered"] and data.task.unordered_pairs:
            train = train + [dataclasses.replace(e, text_a=e.text_b, text_b=e.text_a)
                             for e in train if e.text_b is not None]
        self.train_features = encode(data.train, train)
        self.dev_splits = [_Split(s.name, s.path, s.examples, encode(s)) for s in data.dev]
        self.test_splits = [_Split(s.name, s.path, s.examples, encode(s), s.submission)
                            for s in data.test]

    def loss(self, outputs, batch):
        logits = outputs["logits"]
        if self.regression:
            target = batch["label_ids"] / self.target_scale
            return tf.reduce_mean(tf.square(logits[:, 0] - target))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(batch["label_ids"], tf.int32), logits))

    def loss_count(self, batch):
        """What `loss` averages over: the examples."""
        return tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)

    def predictions(self, outputs):
        if self.regression:
            return outputs["logits"][:, 0] * np.float32(self.target_scale)
        return np.argmax(outputs["logits"], axis=-1)

    def score(self, split, outputs, **_):
        predicted, gold = self.predictions(outputs), split.features["label_ids"]
        if self.regression:
            return {"pearson": metrics.pearson(gold, predicted),
                    "spearman": metrics.spearman(gold, predicted),
                    "mse": float(np.mean((gold - predicted) ** 2))}
        scores = {"accuracy": metrics.accuracy(gold, predicted),
                  "mcc": metrics.matthews_corrcoef(gold, predicted)}
        if self.num_outputs == 2:
            scores["f1"] = metrics.f1(gold, predicted, positive=1)
        else:
            scores["macro_f1"] = metrics.macro_f1(gold, predicted)
        return scores

    def _value(self, p):
        # 9 significant digits write a float32 score exactly, so the file reproduces the
        # reported correlations (a briefly trained model's scores can differ in the 6th digit)
        return f"{p:.9g}" if self.regression else self.labels[int(p)]

    def write(self, folder, split, outputs, test=False, **_):
        values = [self._value(p) for p in self.predictions(outputs)]
        if test and split.submission:  # the GLUE server's format
            if self.regression:  # STS-B scores are 0-5
                values = [f"{min(5.0, max(0.0, float(v))):.3f}" for v in values]
            rows = ["index\tprediction"] + [f"{e.guid}\t{v}" for e, v in zip(split.examples,
                                                                             values)]
            atomic.write_text(os.path.join(folder, "glue", split.submission),
                              "\n".join(rows) + "\n")
            return
        rows = [["id", "prediction"] + ([] if test else ["label"])]
        for example, value in zip(split.examples, values):
            gold = [] if test or example.label is None else [
                self._value(example.label) if self.regression else example.label]
            rows.append([example.guid, value] + gold)
        atomic.write_text(os.path.join(folder, f"{split.name}_predictions.tsv"), _tsv(rows))


def _note_unprefixed(path: str, sentences_tags, log) -> None:
    """Notes a tag file whose tags are mostly chunk tags (B-PER) but some not (PER): the
    file is then read as token-level tags, each tag its own one-token chunk."""
    tags = [t for tags in sentences_tags for t in tags if t != "O"]
    bare = [t for t in tags if not metrics._has_prefix(t)]
    if bare and len(bare) < len(tags) / 2:
        log(f"note: {path}: {len(bare)} of its {len(tags)} tags other than O have no chunk "
            f"prefix (B-, I-, E-, S-; e.g. {bare[0]!r}), so every tag is learnt and scored as "
            "a one-token chunk; give those tags a prefix to learn chunks")


class _TaggingTask:
    """Tagging. Span tags are learnt as BIOES (`tag_scheme`: the file's scheme, that
    predictions are written and scored in; None: the file's tags are learnt as they are)."""
    head = "token"
    answerability = False

    def __init__(self, data: tasks.TaskData, tokenizer, options, log):
        self.tag_scheme = self.tag_spelling = None
        # A file of one character per word (Chinese NER and POS: MSRA, People's Daily), for
        # export to say that its text signature wants the characters spaced.
        words = [w for s in data.train.examples for w in s.words]
        self.character_words = bool(words) and (
            sum(len(w) == 1 for w in words) >= 0.9 * len(words)
            and sum(not w.isascii() for w in words) >= 0.5 * len(words))
        train_tags = [s.tags for s in data.train.examples]
        dev_tags = [s.tags for split in data.dev for s in split.examples if s.tags]
        if options.get("tag_encoding", "BIOES") == "BIOES":
            # The scheme predictions are written in: training's, widened where dev's tags
            # show what it leaves open (a dev S- beside BIO training; M- beside B- E-).
            self.tag_scheme, self.tag_spelling = metrics.files_scheme(train_tags, dev_tags)
        else:  # the training file's tags, as written: a dev tag it lacks cannot be predicted
            for split in data.dev:
                for sentence in split.examples:
                    unknown = next((t for t in sentence.tags or () if t not in data.labels),
                                   None)
                    if unknown:
                        raise UserInputError(
                            f"{split.path} (sentence at line {sentence.guid}): tag {unknown!r} "
                            "does not occur in the training file, and "
                            "finetuning.tag_encoding='file' learns only its tags; use the "
                            "default 'BIOES', or fix the tag")
        learnt = lambda s: s if self.tag_scheme is None or not s.tags else (  # noqa: E731
            dataclasses.replace(s, tags=metrics.retag(s.tags, "BIOES")))
        if self.tag_scheme is None:
            self.labels = data.labels
            _note_unprefixed(data.train.path, train_tags, log)
        else:
            # Every chunk shape of every type the training file has, as the official code's
            # label set from all splits: a one-word name in dev is S-PER even where training
            # has only two-word names (B-PER E-PER).
            seen = {t for s in data.train.examples for t in learnt(s).tags}
            types = {t[2:] for t in seen if t != "O"}
            self.labels = readers.sorted_labels(seen | {f"{p}-{t}" for t in types
                                                        for p in "BIES"})
        if self.tag_scheme:
            log(f"{data.train.path}: {self.tag_scheme} chunks of {len(types)} types, learnt as "
                f"BIOES ({len(self.labels)} tags)")
        else:
            log(f"{data.train.path}: {len(self.labels)} tags, learnt as written ("
                + ("finetuning.tag_encoding='file')"
                   if options.get("tag_encoding", "BIOES") != "BIOES" else
                   "bare chunk prefixes, as word segmentation's B/M/E/S: scored as chunks)"
                   if metrics.typeless(train_tags) else
                   "token-level: no chunk prefixes)"))
        self.num_outputs = len(self.labels)
        # Words cut off by the sequence length are predicted as the commonest tag.
        counts = {}
        for sentence in data.train.examples:
            for t in sentence.tags:
                counts[t] = counts.get(t, 0) + 1
        self.fallback = max(counts, key=counts.get)
        L = options["max_seq_length"]

        def split(s, submission=None, training=False):
            features, positions, cut = feats.encode_tagging(
                tokenizer, [learnt(e) for e in s.examples], L, self.labels)
            if cut:
                log(f"{s.path}: {cut} words do not fit in {L} tokens; they are "
                    + ("not trained on" if training else f"predicted '{self.fallback}'")
                    + " (raise MAX_SEQ_LENGTH to avoid it)")
            return _Split(s.name, s.path, s.examples, features, submission,
                          {"positions": positions})

        train = split(data.train, training=True)
        self.train_features = train.features
        self.dev_splits = [split(s) for s in data.dev]
        self.test_splits = [split(s) for s in data.test]

    def loss(self, outputs, batch):
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.cast(batch["label_ids"], tf.int32), outputs["logits"])
        weights = batch["label_weights"]
        return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)

    def loss_count(self, batch):
        """What `loss` averages over: the tagged tokens."""
        return tf.maximum(tf.reduce_sum(tf.cast(batch["label_weights"], tf.float32)), 1e-9)

    @staticmethod
    def reduce_outputs(outputs):
        """What `tags` reads of a batch's outputs: the best tag at each position."""
        return {"tag_ids": np.argmax(outputs["logits"], axis=-1).astype(np.int32)}

    def tags(self, split, outputs) -> list[list[str]]:
        """Each sentence's predicted tags, in the file's scheme (words that did not fit: the
        commonest tag), from `reduce_outputs`' tag ids."""
        ids = outputs["tag_ids"]
        positions = split.extra["positions"]
        out = []
        for n, s in enumerate(split.examples):
            kept = [self.labels[ids[n, p]] for p in positions[n, :len(s.words)] if p >= 0]
            if self.tag_scheme is not None:
                kept = metrics.respell(metrics.retag(kept, self.tag_scheme), self.tag_spelling)
            out.append(kept + [self.fallback] * (len(s.words) - len(kept)))
        return out

    def score(self, split, outputs, **_):
        return metrics.span_scores([s.tags for s in split.examples], self.tags(split, outputs))

    def write(self, folder, split, outputs, test=False, **_):
        # Columns as CoNLL's, space-separated, or tab-separated where a word holds a space
        # (a tab-separated file's "New York"), which a reader would split at: ours splits
        # at ASCII whitespace only, others (Python's str.split) at a Chinese file's U+3000
        # word too.
        sep = " "
        if any(c.isspace() for s in split.examples for w in s.words for c in w):
            sep = "\t"
        lines = []
        for sentence, tags in zip(split.examples, self.tags(split, outputs)):
            for w, word in enumerate(sentence.words):
                gold = "" if test or not sentence.tags else f"{sep}{sentence.tags[w]}"
                lines.append(f"{word}{gold}{sep}{tags[w]}")
            lines.append("")
        atomic.write_text(os.path.join(folder, f"{split.name}_predictions.txt"), "\n".join(lines))


class _QATask:
    head = "span"
    num_outputs = 2
    labels = tag_scheme = None

    def __init__(self, data: tasks.TaskData, tokenizer, options, log):
        self.tokenizer = tokenizer
        self.qa_head = options.get("qa_head", "electra")
        self.answerability = data.task.name == "squad_v2" or any(
            e.is_impossible for e in data.train.examples)
        encode_options = dict(max_seq_length=options["max_seq_length"],
                              doc_stride=options["doc_stride"],
                              max_query_length=options["max_query_length"])
        train, _, dropped = squad.encode(tokenizer, data.train.examples, training=True,
                                         **encode_options)
        if dropped:
            note = squad.dropped_note(data.train.path, dropped, len(data.train.examples))
            if 2 * len(dropped) > len(data.train.examples):  # the offsets, not a few answers
                raise UserInputError(note.replace(" questions skipped: ", " questions would "
                                                  "be skipped: ", 1)
                                     + "; that is over half the file: fix those answers "
                                     "(their answer_start, or their text)")
            log(note)
        self.train_examples = len(data.train.examples) - len(dropped)  # those trained on
        self.train_features = train
        for s in (data.train, *data.dev, *data.test):  # questions cut, as tagging's words
            lengths = [len(q) for q in tokenizer.encode([e.question for e in s.examples])]
            cut = sum(n > options["max_query_length"] for n in lengths)
            if cut:
                log(f"{s.path}: {cut} of {len(lengths)} questions have more than "
                    f"{options['max_query_length']} word pieces; they are cut to their first "
                    f"{options['max_query_length']} (raise finetuning.max_query_length to keep "
                    "more)")

        def split(s):
            features, windows, _ = squad.encode(tokenizer, s.examples, training=False,
                                                **encode_options)
            return _Split(s.name, s.path, s.examples, features, None, {"windows": windows})

        self.dev_splits = [split(s) for s in data.dev]
        self.test_splits = [split(s) for s in data.test]
        # How each dev set is scored: SQuAD's script, or CMRC 2018's for Chinese answers.
        self.qa_styles = {s.name: metrics.qa_style(squad.gold_answers(s.examples))
                          for s in data.dev}
        for s in data.dev:
            if self.qa_styles[s.name] == "cmrc2018":
                log(f"{s.path}: Chinese answers, scored as the CMRC 2018 script does (each "
                    "CJK character a token)")

    def loss(self, outputs, batch):
        # The official answer_mask: the softmax runs over the context (segment 1, its [SEP]
        # included) and [CLS] (no answer), not the question or the padding.
        context = tf.cast(batch["input_mask"] * batch["segment_ids"], tf.float32)
        allowed = tf.maximum(context, tf.one_hot(0, tf.shape(context)[1]))
        outside = (1.0 - allowed) * -10000.0
        # (ELECTRA's head has masked its logits already.)
        start = tf.nn.sparse_softmax_cross_entropy_with_logits(
            batch["start_positions"], outputs["start_logits"] + outside)
        end = tf.nn.sparse_softmax_cross_entropy_with_logits(
            batch["end_positions"], outputs["end_logits"] + outside)
        loss = tf.reduce_mean(start + end) / 2.0
        if self.answerability:
            # ELECTRA's: whether the question has an answer, weighted 0.5 (the official
            # answerable_weight); BERT's: whether the window holds it.
            electra = self.qa_head == "electra"
            loss += (ANSWERABLE_WEIGHT if electra else 1.0) * tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(
                    batch["question_answerable" if electra else "answerable"],
                    outputs["answerable_logits"]))
        return loss

    def loss_count(self, batch):
        """What `loss` averages over: the windows."""
        return tf.cast(tf.shape(batch["input_ids"])[0], tf.float32)

    def answers(self, split, outputs, n_best_size, max_answer_length):
        return squad.decode(split.examples, split.extra["windows"], outputs, self.tokenizer,
                            n_best_size, max_answer_length)

    def score(self, split, outputs, no_answer_threshold, **options):
        answers, no_answer = self.answers(split, outputs, **options)
        return metrics.squad_scores(squad.gold_answers(split.examples), answers,
                                    no_answer if self.answerability else None,
                                    no_answer_threshold)

    def write(self, folder, split, outputs, no_answer_threshold, test=False, **options):
        """The official files: dev predictions as the official code writes them for its
        evaluation (every question's best span; with the null odds, evaluate-v2.0.py
        --na-prob-thresh=<no_answer_threshold> gives results.json's scores), test ones as
        it writes them for submission ("" above the threshold)."""
        answers, no_answer = self.answers(split, outputs, **options)
        if test and self.answerability:
            answers = {q: "" if no_answer[q] > no_answer_threshold else a
                       for q, a in answers.items()}
        atomic.write_text(os.path.join(folder, f"{split.name}_predictions.json"),
                          json.dumps(answers, indent=1, ensure_ascii=False))
        if self.answerability:
            atomic.write_text(os.path.join(folder, f"{split.name}_null_odds.json"),
                              json.dumps(no_answer, indent=1))


_ADAPTERS = {"classification": _SentenceTask, "regression": _SentenceTask,
             "tagging": _TaggingTask, "qa": _QATask}


# ------------------------------------------------------------------------------ output


def _check_room(model_dir: str, model, trial: int, strategy, chief: bool, worker: int):
    """Room on model_dir's disk for the trial's model, which the chief writes when it has
    trained: without it, one line now rather than a failed write after the training, on
    every worker (the chief's answer, as _chief_decides sends it)."""
    need = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.variables)
    # (an object store has no free space to ask for)
    free = shutil.disk_usage(model_dir).free if chief and "://" not in model_dir else None
    if _chief_decides(strategy, [free is None or free >= need], chief)[0]:
        return
    if chief:
        raise UserInputError(f"--model_dir={model_dir} has {free / 1e6:.1f} MB free, but trial "
                             f"{trial}'s model takes {need / 1e6:.1f} MB; free some space or "
                             "choose another --model_dir")
    raise UserInputError(f"worker {worker}: the chief's --model_dir has no room for trial "
                         f"{trial}'s model (its error line says how much it needs)")


def _write_trial(trial_dir, model, adapter, outputs, test_outputs, info, record,
                 decode_options, save_model):
    with atomic.staged_dir(trial_dir, trial_dir + ".partial") as partial:
        for split in adapter.dev_splits:
            adapter.write(partial, split, outputs[split.name], **decode_options)
        for split in adapter.test_splits:
            adapter.write(partial, split, test_outputs[split.name], test=True,
                          **decode_options)
        atomic.write_text(os.path.join(partial, TASK_INFO),
                          json.dumps(info, indent=2, allow_nan=False, ensure_ascii=False))
        tf.io.gfile.copy(info["vocab_file"], os.path.join(partial, VOCAB_COPY), overwrite=True)
        record = dict(record, dev={k: v if math.isfinite(v) else None
                                   for k, v in record["dev"].items()})
        atomic.write_text(os.path.join(partial, TRIAL_RESULT),
                          json.dumps(record, indent=2, allow_nan=False, ensure_ascii=False))
        if save_model:
            tf.train.Checkpoint(model=model).write(os.path.join(partial, "model", "ckpt"))


def _task_info(adapter, init, task_data, max_seq_length, max_query_length, seed,
               decode_options, head_options, settings) -> dict:
    """A trial's task_info.json: what export (--kind=task) needs besides the weights, and
    (`settings`: inputs_sha256, vocab_sha256, num_train_steps, hyperparameters, optimizer)
    what else the trial was run with, for a rerun to tell whether it may keep the trial."""
    return {"task": task_data.task.name, "kind": task_data.task.kind, "head": adapter.head,
            # The model's labels (tagging: BIOES for span tags; tag_scheme the file's).
            "labels": adapter.labels, "tag_scheme": adapter.tag_scheme,
            **({"tag_spelling": adapter.tag_spelling} if adapter.head == "token" else {}),
            **({"character_words": True} if getattr(adapter, "character_words", False)
               else {}),
            "num_outputs": adapter.num_outputs,
            "answerability": adapter.answerability, "seed": seed,
            "target_scale": task_data.task.target_scale,
            # (absolute: export finds it from any directory; the trial keeps a copy,
            # VOCAB_COPY, for a dir moved away from it)
            "max_seq_length": max_seq_length, "vocab_file": _absolute(init.vocab_file),
            # The positions the encoder has now been trained at, for a run that starts
            # from this one.
            "trained_seq_length": max(init.trained_seq_length or 0, max_seq_length),
            # What export (--kind=task) needs to feed raw text as training did.
            "text_pair": task_data.task.kind == "qa" or any(
                getattr(e, "text_b", None) is not None for e in task_data.train.examples),
            "max_query_length": max_query_length, **decode_options,
            **(head_options if adapter.head == "span" else {}),
            "lower_case": init.lower_case, "strip_accents": init.strip_accents,
            "encoder": dataclasses.asdict(init.config), "init_checkpoint": init.source,
            **settings}
