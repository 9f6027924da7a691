r"""Pre-training step throughput on CPU or a GPU: examples/s (and MFU on a GPU) of one
ELECTRA train step (generator MLM, sampling, discriminator, both losses, backward, AdamW
update) at seq 128, ours against transformers' PyTorch ELECTRA and TF Model Garden's
ELECTRA, measured in the same run.

    .venv/bin/python benchmarks/model_step.py --sizes=small     # about 10 minutes
    .venv/bin/python benchmarks/model_step.py                   # small and base (base: far longer)
    .venv/bin/python benchmarks/model_step.py --sizes=small --steps=3 --repeats=1 \
        --results_name=model_step_check   # a check

Implementations (all with the paper's shapes: discriminator small H 256 / E 128 or base
H 768 / E 768, generator 1/4 (small) or 1/3 (base) of the hidden size, FFN and heads, with
the discriminator's embeddings; dropout 0.1 and training mode everywhere):
- ours: `electra_tf.modeling.pretrainer.ElectraPretrainer`, objective electra, sharing
  embeddings, sampling by inverse CDF (`tensors.sample_from_logits`: the distribution the
  official code's and the PyTorch step's Gumbel-max sampling draws from); a `tf.function` step (GradientTape, `keras.optimizers.AdamW`), and the same
  step with `jit_compile=True` (XLA), reported as `ours (XLA)`. `ours_plain` is `ours` with
  ELECTRA_TF_XLA_ELEMENTWISE=0: the GELU and dropout masks as TensorFlow's separate
  elementwise kernels (`electra_tf.modeling.layers.xla_elementwise`).
- pytorch: transformers' `ElectraForMaskedLM` generator and `ElectraForPreTraining`
  discriminator, the generator using the discriminator's embedding module and its LM head
  tied to the word embeddings; MLM logits at the masked positions only (as the official
  code and ours compute them; `--torch_full_mlm_logits` computes them at every position,
  as `ElectraForMaskedLM.forward` does), Gumbel-max sample without gradient, loss
  mlm + 50 * disc, `torch.optim.AdamW`; eager, torch threads = cores.
- model_garden: `official.nlp.modeling.models.ElectraPretrainer` over two
  `networks.BertEncoder`s (the generator reusing the discriminator's word-embedding layer, as
  the ElectraPretrainTask's tie_embeddings does; Model Garden's "gelu" is its tanh
  approximation), the loss as `ElectraPretrainTask.build_losses` computes it (mlm +
  50 * disc), a `tf.function` step with `tf_keras.optimizers.AdamW`.

All use one random batch (written once by the parent, .npz): ~15% of each sequence's tokens
[MASK]ed (id 103), at most `--max_predictions` masked slots, lengths 3/4 L .. L with padding.
Each implementation runs in its own subprocess (no shared thread pools or memory; tf_keras
and Keras 3 never in one process). After `--warmup_steps` (tracing and compiling included),
a timed run lasts at least `--steps` steps and `--min_seconds`; a run during which other
processes used more than 0.25 cores is discarded and redone (common.measure_quietly); the
figure is the median of `--repeats` runs.

Results: benchmarks/results/model_step.{json,md}.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

FRAMEWORKS = ("ours", "ours_plain", "ours_xla", "ours_run", "pytorch", "model_garden")
LABELS = {"ours": "ours (tf.function)",
          "ours_plain": "ours (tf.function, no XLA elementwise functions)",
          "ours_xla": "ours (tf.function, XLA)",
          "ours_run": "ours (full run: input pipeline + trainer)",
          "pytorch": "transformers PyTorch", "model_garden": "TF Model Garden"}
# electra_tf.modeling.layers.XLA_ELEMENTWISE_ENV (the parent process does not import TF).
XLA_ELEMENTWISE_ENV = "ELECTRA_TF_XLA_ELEMENTWISE"
# Goals of the comparison: ours / PyTorch and ours / Model Garden.
GOALS = {"pytorch": 1.5, "model_garden": 1.2}
MASK_ID, CLS_ID, SEP_ID = 103, 101, 102
VOCAB_SIZE = 30522
DISCRIMINATOR_WEIGHT = 50.0
LEARNING_RATE, WEIGHT_DECAY, ADAM_EPSILON = 1e-4, 0.01, 1e-6

flags.DEFINE_list("sizes", ["small", "base"], "Model sizes (electra_tf.modeling.config.SIZES).")
flags.DEFINE_list("frameworks", ["ours", "ours_xla", "pytorch", "model_garden"],
                  f"Implementations to time: {FRAMEWORKS}.")
flags.DEFINE_integer("batch_size", 32, "Examples per step.")
flags.DEFINE_integer("seq_length", 128, "Sequence length L.")
flags.DEFINE_integer("max_predictions", 20, "Masked slots per example N.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps first (tracing / compiling included).")
flags.DEFINE_integer("steps", 10, "Steps timed per run (at least).")
flags.DEFINE_float("min_seconds", 20.0, "Each timed run also lasts at least this long.")
flags.DEFINE_integer("repeats", 3, "Timed runs per implementation (median reported).")
flags.DEFINE_float("max_wait_quiet_s", 300, "Before each timed run, wait up to this long for "
                   "other processes to leave the CPUs idle (the machine is shared).")
flags.DEFINE_bool("torch_full_mlm_logits", False, "PyTorch: compute the generator's MLM logits "
                  "at all L positions (ElectraForMaskedLM.forward) instead of the N masked "
                  "ones.")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16", "mixed_float16"],
                  "Ours: the Keras dtype policy (mixed_float16 with loss scaling); PyTorch: "
                  "autocast to the same 16-bit type (float16 with a GradScaler). Model Garden "
                  "runs in float32 only.")
flags.DEFINE_bool("run_jit_compile", False, "ours_run: compile the step with XLA "
                  "(pretraining.jit_compile).")
flags.DEFINE_integer("run_loop_steps", 0, "ours_run: steps per loop (one timed run); 0: "
                     "about 20 s each on a 2-core CPU (RUN_LOOP_STEPS).")
flags.DEFINE_integer("seed", 0, "Seed of the random batch and of the models' initialisation.")
flags.DEFINE_string("results_name", "model_step", "benchmarks/results/<name>.{json,md}.")
# Internal: the parent runs each implementation as `--worker=NAME` in a subprocess.
flags.DEFINE_enum("worker", None, list(FRAMEWORKS) + ["gemm"],
                  "Internal: time one implementation (gemm: the CPU's matmul rate).")
flags.DEFINE_string("worker_size", None, "Internal: the size the worker times.")
flags.DEFINE_string("batch_file", None, "Internal: the .npz batch the worker uses.")
flags.DEFINE_string("result_file", None, "Internal: where the worker writes its JSON.")
FLAGS = flags.FLAGS


# ------------------------------------------------------------------------------ the batch


def make_batch(batch_size: int, seq_length: int, max_predictions: int, seed: int) -> dict:
    """A random masked pre-training batch in our pipeline's layout (numpy)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    input_ids = np.zeros((batch_size, seq_length), np.int32)
    input_mask = np.zeros_like(input_ids)
    segment_ids = np.zeros_like(input_ids)
    positions = np.zeros((batch_size, max_predictions), np.int32)
    ids = np.zeros_like(positions)
    weights = np.zeros((batch_size, max_predictions), np.float32)
    for b in range(batch_size):
        length = int(rng.integers(seq_length * 3 // 4, seq_length + 1))
        tokens = rng.integers(1000, VOCAB_SIZE, length).astype(np.int32)
        sep = int(rng.integers(length // 4, length - 2))
        tokens[[0, sep, length - 1]] = CLS_ID, SEP_ID, SEP_ID
        input_ids[b, :length] = tokens
        input_mask[b, :length] = 1
        segment_ids[b, sep + 1:length] = 1
        candidates = np.setdiff1d(np.arange(length), [0, sep, length - 1])
        n = min(max_predictions, max(1, round(0.15 * length)))
        chosen = np.sort(rng.choice(candidates, n, replace=False))
        positions[b, :n], ids[b, :n], weights[b, :n] = chosen, tokens[chosen], 1.0
        input_ids[b, chosen] = MASK_ID
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "masked_lm_positions": positions, "masked_lm_ids": ids,
            "masked_lm_weights": weights}


def shapes(size: str) -> tuple:
    """(discriminator, generator) EncoderConfigs of a size, as ours builds them."""
    from electra_tf.modeling.config import GENERATOR_FRACTIONS, encoder_config, generator_config
    discriminator = encoder_config(size, vocab_size=VOCAB_SIZE)
    return discriminator, generator_config(discriminator, GENERATOR_FRACTIONS[size])


# ------------------------------------------------------------------------------ workers
# Each returns (step function taking the step number and returning the loss as a float-able
# value, facts about the model); the first call's loss is recorded as a sanity check.


def build_ours(batch: dict, size: str, jit_compile: bool, variant: str = "full"):
    """Our step; `variant` leaves a part out: no_update skips apply_gradients (the gradients
    are still computed), forward runs only the forward pass in training mode, no_dropout sets
    every dropout rate to 0."""
    import dataclasses

    import keras
    import tensorflow as tf

    from electra_tf.modeling.pretrainer import ElectraPretrainer

    keras.utils.set_random_seed(FLAGS.seed)
    keras.mixed_precision.set_global_policy(FLAGS.precision)
    discriminator, generator = shapes(size)
    if variant == "no_dropout":
        off = {"dropout_rate": 0.0, "attention_dropout_rate": 0.0}
        discriminator = dataclasses.replace(discriminator, **off)
        generator = dataclasses.replace(generator, **off)
    model = ElectraPretrainer(discriminator, generator, objective="electra",
                              sharing="embeddings", seed=FLAGS.seed)
    variables = model.trainable_variables
    optimizer = keras.optimizers.AdamW(LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                       epsilon=ADAM_EPSILON)
    scaled = FLAGS.precision == "mixed_float16"
    if scaled:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    batch = {k: tf.constant(v) for k, v in batch.items()}

    @tf.function(jit_compile=jit_compile)
    def train_step(batch, step):
        if variant == "forward":
            return model(batch, step=step, training=True)["loss"]
        with tf.GradientTape() as tape:
            out = model(batch, step=step, training=True)
            loss = out["loss"]
            scaled_loss = optimizer.scale_loss(loss) if scaled else loss
        grads = tape.gradient(scaled_loss, variables)
        if variant == "no_update":  # keep every gradient alive without applying it
            return loss + 0.0 * tf.add_n([
                tf.reduce_sum(g.values if isinstance(g, tf.IndexedSlices) else g)
                for g in grads])
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    def step(i):
        return train_step(batch, tf.constant(i, tf.int32))

    facts = {"parameters": sum(int(v.shape.num_elements()) for v in variables),
             "device": _tf_device(),
             "versions": {"tensorflow": tf.__version__, "keras": keras.__version__}}
    return inspectable(step, train_step, batch, tf.constant(0, tf.int32)), facts


def inspectable(step, train_step, *args):
    """`step` with the compiler IR (`step.compiler_ir(stage)`) and trace count
    (`step.tracing_count()`) of the tf.function `train_step` it calls with `args`."""
    step.compiler_ir = lambda stage: train_step.experimental_get_compiler_ir(*args)(
        stage=stage)
    step.tracing_count = train_step.experimental_get_tracing_count
    return step


def _tf_device() -> str:
    """The accelerator TensorFlow runs on (a GPU's name), or "cpu"."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu"
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def build_model_garden(batch: dict, size: str, jit_compile: bool = False):
    """Model Garden's step; `jit_compile` compiles it with XLA (xla_compile.py)."""
    import tensorflow as tf
    import tf_keras
    from official.modeling import tf_utils
    from official.nlp.modeling import models, networks

    tf_keras.utils.set_random_seed(FLAGS.seed)
    discriminator, generator = shapes(size)

    def encoder(config, embedding_layer=None):
        # As official.nlp.configs.encoders.build_encoder builds type "bert".
        return networks.BertEncoder(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            num_layers=config.num_layers, num_attention_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            activation=tf_utils.get_activation("gelu"), dropout_rate=config.dropout_rate,
            attention_dropout_rate=config.attention_dropout_rate,
            max_sequence_length=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
            embedding_width=config.embedding_width, embedding_layer=embedding_layer,
            dict_outputs=True)

    discriminator_network = encoder(discriminator)
    generator_network = encoder(generator, discriminator_network.get_embedding_layer())
    model = models.ElectraPretrainer(
        generator_network=generator_network, discriminator_network=discriminator_network,
        vocab_size=generator.vocab_size, num_classes=2,
        num_token_predictions=FLAGS.max_predictions,
        mlm_activation=tf_utils.get_activation("gelu"),
        mlm_initializer=tf_keras.initializers.TruncatedNormal(
            stddev=generator.initializer_range))
    inputs = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
              "input_type_ids": batch["segment_ids"],
              **{k: batch[k] for k in ("masked_lm_positions", "masked_lm_ids",
                                       "masked_lm_weights")}}
    inputs = {k: tf.constant(v) for k, v in inputs.items()}
    model(inputs, training=True)  # builds the heads
    variables = model.trainable_variables
    optimizer = tf_keras.optimizers.AdamW(LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                          epsilon=ADAM_EPSILON)

    def build_losses(labels, outputs):
        # ElectraPretrainTask.build_losses without the metrics (no NSP labels here).
        lm_losses = tf_keras.losses.sparse_categorical_crossentropy(
            labels["masked_lm_ids"], tf.cast(outputs["lm_outputs"], tf.float32),
            from_logits=True)
        weights = labels["masked_lm_weights"]
        mlm = tf.math.divide_no_nan(tf.reduce_sum(lm_losses * weights), tf.reduce_sum(weights))
        rtd = tf.nn.sigmoid_cross_entropy_with_logits(
            logits=outputs["disc_logits"], labels=tf.cast(outputs["disc_label"], tf.float32))
        mask = tf.cast(labels["input_mask"], tf.float32)
        disc = tf.math.divide_no_nan(tf.reduce_sum(mask * rtd), tf.reduce_sum(mask))
        return mlm + DISCRIMINATOR_WEIGHT * disc

    @tf.function(jit_compile=jit_compile)
    def train_step(inputs):
        with tf.GradientTape() as tape:
            loss = build_losses(inputs, model(inputs, training=True))
        grads = tape.gradient(loss, variables)
        # The pooler and the generator's sentence head are not in the loss: no gradient.
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
        return loss

    import official

    def step(i):
        return train_step(inputs)

    return inspectable(step, train_step, inputs), {
        "parameters": sum(int(v.shape.num_elements()) for v in variables),
        "device": _tf_device(),
        "versions": {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
                     "tf-models-official": getattr(official, "__version__", None)
                     or _package_version("tf-models-official")}}


def build_pytorch(batch: dict, size: str):
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(FLAGS.seed)
    # The GPU when there is one (as TensorFlow picks it), with TF32 matmuls in float32 as
    # TensorFlow's default has them.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    half = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(
        FLAGS.precision)
    scaler = torch.amp.GradScaler(device, enabled=half is torch.float16)
    discriminator, generator = shapes(size)

    def hf_config(c):
        return ElectraConfig(
            vocab_size=c.vocab_size, embedding_size=c.embedding_width,
            hidden_size=c.hidden_size, num_hidden_layers=c.num_layers,
            num_attention_heads=c.num_heads, intermediate_size=c.intermediate_size,
            hidden_act="gelu", hidden_dropout_prob=c.dropout_rate,
            attention_probs_dropout_prob=c.attention_dropout_rate,
            max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=c.type_vocab_size, initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_epsilon)

    disc = ElectraForPreTraining(hf_config(discriminator))
    gen = ElectraForMaskedLM(hf_config(generator))
    # Tied embeddings (the paper, run_pretraining.py): the generator reads the
    # discriminator's embedding block, and its LM head projects onto the same table.
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    gen.to(device).train()
    disc.to(device).train()
    params = list({id(p): p for m in (gen, disc) for p in m.parameters()}.values())
    optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                  eps=ADAM_EPSILON)

    t = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
    input_ids, input_mask = t["input_ids"].long(), t["input_mask"].long()
    segment_ids, positions = t["segment_ids"].long(), t["masked_lm_positions"].long()
    ids, weights = t["masked_lm_ids"].long(), t["masked_lm_weights"]
    real = weights > 0
    # The unmasked input: the original ids written back at the masked positions.
    original = input_ids.scatter(1, positions,
                                 torch.where(real, ids, input_ids.gather(1, positions)))
    mask_f = input_mask.float()
    full_logits = FLAGS.torch_full_mlm_logits

    def train_step(i):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=half or torch.float32, enabled=half is not None):
            loss = forward()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    def forward():
        if full_logits:
            logits = gen(input_ids, attention_mask=input_mask,
                         token_type_ids=segment_ids).logits                     # [B, L, V]
            logits = logits.gather(1, positions[..., None].expand(-1, -1, logits.shape[-1]))
        else:
            hidden = gen.electra(input_ids, attention_mask=input_mask,
                                 token_type_ids=segment_ids).last_hidden_state  # [B, L, Hg]
            hidden = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
            logits = gen.generator_lm_head(gen.generator_predictions(hidden))    # [B, N, V]
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1),
                                 reduction="none").view_as(weights)
        mlm = (losses * weights).sum() / (weights.sum() + 1e-6)
        with torch.no_grad():
            uniform = torch.rand_like(logits, dtype=torch.float32).clamp_(min=1e-9)
            sampled = torch.argmax(logits - torch.log(-torch.log(uniform)), -1)  # [B, N]
            fake = original.scatter(1, positions,
                                    torch.where(real, sampled, original.gather(1, positions)))
            labels = (fake != original).float()
        disc_logits = disc(fake, attention_mask=input_mask,
                           token_type_ids=segment_ids).logits                   # [B, L]
        disc_losses = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
        disc_loss = (disc_losses * mask_f).sum() / (mask_f.sum() + 1e-6)
        return mlm + DISCRIMINATOR_WEIGHT * disc_loss

    return train_step, {"parameters": sum(p.numel() for p in params),
                        "torch_threads": torch.get_num_threads(),
                        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                        "versions": {"torch": torch.__version__,
                                     "transformers": transformers.__version__}}


# ours_run: steps per training loop (one tf.function call, one console line), about 20 s
# each on a 2-core CPU; every loop after the first (tracing) is one timed run.
RUN_LOOP_STEPS = {"tiny": 60, "small": 15, "base": 4, "large": 2}


def run_ours_full(size: str, batch_size: int) -> dict:
    """Times scripts/run_pretraining.py's whole loop in this process: the tf.data pipeline
    reading and masking real TFRecords (the Austen corpus), the trainer (all-reduce, clip,
    AdamW, metrics) and orbit, with the size's gin file. Returns the worker's result."""
    import re

    import gin

    from electra_tf import gin_files
    from electra_tf.data.writer import build_pretraining_data
    from electra_tf.training import pretraining

    vocab = os.path.join(common.REPO, "data", "vocab", "bert_uncased.txt")
    data_dir = os.path.join(common.CACHE_DIR, f"austen_{FLAGS.seq_length}")
    if not os.path.exists(os.path.join(data_dir, "metadata.json")):
        build_pretraining_data(os.path.join(common.REPO, "data", "corpus", "*.txt.gz"), vocab,
                               data_dir, max_seq_length=FLAGS.seq_length, show_progress=False,
                               log=lambda *_: None)
    loop_steps = FLAGS.run_loop_steps or RUN_LOOP_STEPS.get(size, FLAGS.steps)
    loops = 1 + 2 * FLAGS.repeats  # the first traces; spares replace noisy loops
    marks = [(time.perf_counter(), common.busy_cpu_seconds(), common.own_cpu_seconds(), None)]

    def log(line):
        if line.startswith("step "):
            rate = float(re.search(r"([\d.]+) examples/s", line).group(1))
            marks.append((time.perf_counter(), common.busy_cpu_seconds(),
                           common.own_cpu_seconds(), rate))

    gin_files.parse([f"{size}.gin"], [
        f"TRAIN_BATCH_SIZE = {batch_size}", f"MAX_SEQ_LENGTH = {FLAGS.seq_length}",
        f"NUM_TRAIN_STEPS = {loops * loop_steps}", f"STEPS_PER_LOOP = {loop_steps}",
        "CHECKPOINT_EVERY = 1000000000", "WARMUP_STEPS = 1",
        f"pretraining.max_predictions_per_seq = {FLAGS.max_predictions}",
        f"pretraining.precision = '{FLAGS.precision}'",
        f"pretraining.jit_compile = {FLAGS.run_jit_compile}"])
    with tempfile.TemporaryDirectory(prefix="ours_run_") as model_dir:
        start = time.perf_counter()
        result = pretraining.run_pretraining(model_dir, os.path.join(data_dir, "*.tfrecord"),
                                             seed=FLAGS.seed, log=log)
        total_s = time.perf_counter() - start
        with open(os.path.join(model_dir, "model_info.json")) as f:
            model_info = json.load(f)
        parameters = model_info["trainable_params"]
        # Each loop's rate as the trainer measured it (the console line rounds to 0.1).
        exact = [rate for _, rate in common.pretraining_curve(
            model_dir, ["throughput/examples_per_second"])["throughput/examples_per_second"]]
    gin.clear_config()
    if len(exact) == len(marks) - 2:  # none for the first loop, which traces
        marks = marks[:2] + [(*mark[:3], rate) for mark, rate in zip(marks[2:], exact)]
    runs, discarded = [], []
    for (t0, busy0, own0, _), (t1, busy1, own1, rate) in zip(marks[1:], marks[2:]):
        other = max(0.0, ((busy1 - busy0) - (own1 - own0)) / (t1 - t0))
        run = {"seconds": t1 - t0, "steps": loop_steps, "examples_per_s": rate,
               "other_cores_during": other}
        (discarded if other > 0.25 else runs).append(run)
    runs = runs[:FLAGS.repeats] or discarded[:FLAGS.repeats]
    return {"runs": runs, "discarded_attempts": len(discarded),
            "first_loop_s": marks[1][0] - marks[0][0], "total_s": total_s,
            "last_loss": result["train"]["loss/total"], "loop_steps": loop_steps,
            "parameters": parameters, "device": model_info.get("device") or "cpu",
            "run_mfu": result["train"].get("throughput/mfu")}


def _package_version(name: str):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


GEMM_SIZES = (1024, 2048, 3072)


def matmul_dtype() -> str:
    """The dtype --precision runs the matmuls in: float32, bfloat16 or float16."""
    from electra_tf.modeling import flops
    return flops.PRECISIONS[FLAGS.precision]


def measure_gemm(with_torch: bool = False) -> dict:
    """The FLOP/s of TensorFlow's plain matmul (n x n by n x n) on this machine in the
    --precision's matmul dtype (matmul_dtype), best over GEMM_SIZES of the median of 3
    timings each: the practical peak the CPU rows' utilisation is measured against, as no
    vendor figure exists for a (virtual) CPU; a CPU with a bfloat16 matrix unit (AMX) runs
    bfloat16 several times faster than float32. `with_torch`: PyTorch's matmul too (its
    threads = cores, as its train step runs), under "torch": how much of a ratio against
    PyTorch is the two libraries' matrix kernels on this CPU rather than the models around
    them."""
    import tensorflow as tf
    dtype = matmul_dtype()

    def rate_of(matmul, n, done):
        done(matmul())

        def measure():
            start, reps = time.perf_counter(), 0
            while reps < 3 or time.perf_counter() - start < 2.0:
                out = matmul()
                reps += 1
            done(out)
            return {"seconds": time.perf_counter() - start, "reps": reps}

        rates = []
        for _ in range(3):
            run = common.measure_quietly(measure, FLAGS.max_wait_quiet_s)
            rates.append(2 * n ** 3 * run["reps"] / run["seconds"])
        return statistics.median(rates)

    by_size = {}
    for n in GEMM_SIZES:
        a = tf.cast(tf.random.stateless_normal([n, n], [1, n]), dtype)
        b = tf.cast(tf.random.stateless_normal([n, n], [2, n]), dtype)
        by_size[n] = rate_of(tf.function(lambda: tf.matmul(a, b)), n, lambda out: out.numpy())
    result = {"flop_per_s": max(by_size.values()), "by_size": by_size, "dtype": dtype,
              "versions": {"tensorflow": tf.__version__}}
    if with_torch:
        import torch
        torch.set_num_threads(os.cpu_count())
        torch_by_size = {}
        with torch.inference_mode():
            for n in GEMM_SIZES:
                generator = torch.Generator().manual_seed(n)
                a = torch.randn(n, n, generator=generator).to(getattr(torch, dtype))
                b = torch.randn(n, n, generator=generator).to(getattr(torch, dtype))
                torch_by_size[n] = rate_of(lambda: torch.matmul(a, b), n, lambda out: None)
        result["torch"] = {"flop_per_s": max(torch_by_size.values()), "by_size": torch_by_size,
                           "version": torch.__version__}
    return result


def run_worker() -> int:
    if FLAGS.worker == "gemm":
        with open(FLAGS.result_file, "w") as f:
            json.dump(measure_gemm(with_torch="pytorch" in FLAGS.frameworks), f, indent=1)
        return 0
    import numpy as np
    with np.load(FLAGS.batch_file) as data:
        batch = {k: data[k] for k in data.files}
    batch_size = batch["input_ids"].shape[0]
    name, size = FLAGS.worker, FLAGS.worker_size
    if name == "ours_run":
        timed = run_ours_full(size, batch_size)
        median = statistics.median(r["examples_per_s"] for r in timed["runs"])
        import tensorflow as tf
        result = {"name": name, "label": LABELS[name], "size": size, "batch_size": batch_size,
                  "examples_per_s": median, "ms_per_step": batch_size / median * 1e3,
                  "all_examples_per_s": [round(r["examples_per_s"], 3) for r in timed["runs"]],
                  "other_cores_during": max(r["other_cores_during"] for r in timed["runs"]),
                  "first_loss": None,  # the run logs losses per loop, not per step
                  "first_step_s": timed["first_loop_s"],
                  "versions": {"tensorflow": tf.__version__}, **timed}
        with open(FLAGS.result_file, "w") as f:
            json.dump(result, f, indent=1)
        return 0
    start = time.perf_counter()
    if name in ("ours", "ours_plain", "ours_xla"):
        step, facts = build_ours(batch, size, jit_compile=name == "ours_xla")
    elif name == "model_garden":
        step, facts = build_model_garden(batch, size)
    else:
        step, facts = build_pytorch(batch, size)
    build_s = time.perf_counter() - start

    start = time.perf_counter()
    first_loss = float(step(0))
    first_step_s = time.perf_counter() - start
    for i in range(1, FLAGS.warmup_steps):
        float(step(i))
    warmup_s = time.perf_counter() - start
    counter = [FLAGS.warmup_steps]

    def measure():
        start = time.perf_counter()
        steps = 0
        while steps < FLAGS.steps or time.perf_counter() - start < FLAGS.min_seconds:
            loss = step(counter[0])
            counter[0] += 1
            steps += 1
        loss = float(loss)  # the last step has finished
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "steps": steps,
                "examples_per_s": steps * batch_size / seconds, "last_loss": loss}

    runs = []
    for r in range(FLAGS.repeats):
        run = common.measure_quietly(measure, FLAGS.max_wait_quiet_s)
        runs.append(run)
        print(f"  {LABELS[name]}, {size}, run {r + 1}/{FLAGS.repeats}: "
              f"{run['examples_per_s']:.2f} examples/s ({run['steps']} steps in "
              f"{run['seconds']:.1f} s; other processes {run['other_cores_during']:.2f} cores)",
              file=sys.stderr, flush=True)
    median = statistics.median(r["examples_per_s"] for r in runs)
    result = {"name": name, "label": LABELS[name], "size": size, "batch_size": batch_size,
              "examples_per_s": median, "ms_per_step": batch_size / median * 1e3,
              "all_examples_per_s": [round(r["examples_per_s"], 3) for r in runs],
              "other_cores_during": max(r["other_cores_during"] for r in runs),
              "discarded_attempts": sum(len(r["discarded_attempts"]) for r in runs),
              "first_loss": first_loss, "build_s": build_s, "first_step_s": first_step_s,
              "warmup_s": warmup_s, "runs": runs, **facts}
    with open(FLAGS.result_file, "w") as f:
        json.dump(result, f, indent=1)
    return 0


# ------------------------------------------------------------------------------ the parent


def run_child(name: str, size: str, batch_file: str, workdir: str) -> dict | None:
    result_file = os.path.join(workdir, f"{name}_{size}.json")
    passed = ("warmup_steps", "steps", "min_seconds", "repeats", "max_wait_quiet_s",
              "torch_full_mlm_logits", "seed", "max_predictions", "seq_length", "precision",
              "run_jit_compile", "run_loop_steps")
    command = [sys.executable, os.path.abspath(__file__), f"--worker={name}",
               f"--worker_size={size}", f"--batch_file={batch_file}",
               f"--result_file={result_file}"]
    command += [f"--{f}={FLAGS[f].value}" for f in passed]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "USE_TF": "0", "USE_TORCH": "1",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    if name == "ours_plain":
        env[XLA_ELEMENTWISE_ENV] = "0"
    print(f"{LABELS[name]}, {size}: building, warming up, timing", flush=True)
    proc = common.run_child(command, env=env, cwd=common.REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    progress = [line for line in proc.stdout.splitlines() if line.startswith("  ")]
    if progress:
        print("\n".join(progress), flush=True)
    return child_result(proc, result_file, f"{LABELS[name]}, {size}")


def child_result(proc, result_file: str, label: str) -> dict | None:
    """A worker's recorded result, or None after printing how it failed."""
    if proc.returncode or not os.path.exists(result_file):
        print(f"error: {label} failed (exit {proc.returncode}); its output ends:\n"
              + "\n".join(proc.stdout.splitlines()[-30:]), file=sys.stderr)
        return None
    with open(result_file) as f:
        return json.load(f)


def hardware_flops_per_example(size: str) -> float:
    """The FLOPs one example's train step executes (flops.hardware_train_flops_per_example)."""
    from electra_tf.modeling import flops
    discriminator, generator = shapes(size)
    return flops.hardware_train_flops_per_example(
        discriminator, generator, FLAGS.seq_length, max_predictions=FLAGS.max_predictions)


def _peak(result: dict, cpu_peak: float | None) -> float | None:
    """The FLOP/s a result's MFU is measured against: the accelerator's published peak at
    the precision it ran in, or on CPUs the matmul rate measured in this run in the
    --precision's dtype (Model Garden, float32 only, runs only when that is float32)."""
    from electra_tf.modeling import flops
    device = result.get("device") or "cpu"
    if device == "cpu":
        return cpu_peak
    precision = "float32" if result["name"] == "model_garden" else FLAGS.precision
    import tensorflow as tf
    return flops.peak_flops_per_second(
        device, precision, tf.config.experimental.tensor_float_32_execution_enabled())


def _mfu(result: dict, cpu_peak: float | None) -> float | None:
    """Model FLOPs utilisation of a result: achieved hardware FLOP/s over its _peak."""
    peak = _peak(result, cpu_peak)
    if not peak:
        return None
    return result["examples_per_s"] * hardware_flops_per_example(result["size"]) / peak


def measure_cpu_peak(workdir: str) -> dict | None:
    """measure_gemm in a child process of its own, like the implementations."""
    result_file = os.path.join(workdir, "gemm.json")
    print(f"{matmul_dtype()} matmul rate of this CPU: timing", flush=True)
    proc = common.run_child(
        [sys.executable, os.path.abspath(__file__), "--worker=gemm",
         f"--result_file={result_file}", f"--max_wait_quiet_s={FLAGS.max_wait_quiet_s}",
         f"--precision={FLAGS.precision}",
         f"--frameworks={','.join(FLAGS.frameworks)}"],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=common.REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return child_result(proc, result_file, "the matmul timing")


def _loss(value) -> str:
    """A recorded first loss for the tables; '-' where the implementation records none."""
    return "-" if value is None else f"{value:.2f}"


def _run_info() -> dict:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # the parent imports TF only for its version
    info = common.run_info()
    # The model under test may not be committed yet; say so next to the commit.
    status = subprocess.run(["git", "status", "--porcelain", "--", "electra_tf"],
                            cwd=common.REPO, capture_output=True, text=True)
    info["electra_tf_uncommitted"] = [line.strip() for line in status.stdout.splitlines()
                                      if line.strip()]
    return info


def flag_error(frameworks) -> str | None:
    """The error line for --sizes, --frameworks (of `frameworks`) or --precision values that
    cannot run, or None."""
    from electra_tf.modeling.config import SIZES
    unknown = ([s for s in FLAGS.sizes if s not in SIZES]
               + [f for f in FLAGS.frameworks if f not in frameworks])
    if unknown:
        return (f"error: unknown --sizes/--frameworks entries {unknown}; sizes are "
                f"{', '.join(SIZES)} and frameworks {', '.join(frameworks)}")
    if FLAGS.precision != "float32" and "model_garden" in FLAGS.frameworks:
        return (f"error: --precision={FLAGS.precision} is not implemented for model_garden; "
                "leave it out of --frameworks or use --precision=float32")
    return None


def main(argv):
    del argv
    if FLAGS.worker:
        return run_worker()
    import numpy as np

    error = flag_error(FRAMEWORKS)
    if error:
        print(error, file=sys.stderr)
        return 1
    results, failed = [], []
    with tempfile.TemporaryDirectory(prefix="model_step_") as workdir:
        batch = make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions,
                           FLAGS.seed)
        batch_file = os.path.join(workdir, "batch.npz")
        np.savez(batch_file, **batch)
        masked = batch["masked_lm_weights"].sum() / batch["input_mask"].sum()
        print(f"batch: {FLAGS.batch_size} x {FLAGS.seq_length}, {batch['input_mask'].mean():.0%}"
              f" real tokens, {masked:.1%} of them masked, {FLAGS.max_predictions} slots")
        for size in FLAGS.sizes:
            for name in FLAGS.frameworks:
                r = run_child(name, size, batch_file, workdir)
                if r is None:
                    failed.append(f"{name} ({size})")
                    continue
                results.append(r)
                print(f"{LABELS[name]}, {size}: {r['examples_per_s']:.2f} examples/s "
                      f"(runs {r['all_examples_per_s']}; first loss {_loss(r['first_loss'])}; "
                      f"{r['parameters']:,} parameters; other processes "
                      f"{r['other_cores_during']:.2f} cores)", flush=True)
        if not results:  # (nothing to record: the committed results are kept)
            print(f"error: none of --frameworks={','.join(FLAGS.frameworks)} ran (see the "
                  "errors above); nothing was written", file=sys.stderr)
            return 1
        on_cpu = any((r.get("device") or "cpu") == "cpu" for r in results)
        gemm = measure_cpu_peak(workdir) if on_cpu else None
    cpu_peak = gemm and gemm["flop_per_s"]
    dtype = matmul_dtype()
    if gemm:
        print(f"{dtype} matmul on this CPU: {cpu_peak / 1e9:.0f} GFLOP/s (n x n matmuls, "
              + ", ".join(f"n={n}: {v / 1e9:.0f}" for n, v in gemm["by_size"].items()) + ")")
        if "torch" in gemm:
            print(f"PyTorch's {dtype} matmul on this CPU: {gemm['torch']['flop_per_s'] / 1e9:.0f}"
                  " GFLOP/s (" + ", ".join(f"n={n}: {v / 1e9:.0f}"
                                           for n, v in gemm["torch"]["by_size"].items()) + ")")

    for r in results:
        r["mfu"] = _mfu(r, cpu_peak)
    ratios = []
    for size in FLAGS.sizes:
        by_name = {r["name"]: r for r in results if r["size"] == size}
        for ours in ("ours", "ours_plain", "ours_xla", "ours_run"):
            for base in ("pytorch", "model_garden"):
                if ours in by_name and base in by_name:
                    ratio = by_name[ours]["examples_per_s"] / by_name[base]["examples_per_s"]
                    # What the ratio would be if every FLOP of our step ran at the peak.
                    peak = _peak(by_name[ours], cpu_peak)
                    ceiling = peak and (peak / hardware_flops_per_example(size)
                                        / by_name[base]["examples_per_s"])
                    ratios.append({"size": size, "ours": ours, "baseline": base,
                                   "ratio": ratio, "goal": GOALS[base],
                                   "met": ratio >= GOALS[base], "ceiling": ceiling})

    rows = [[r["size"], r["label"], f"{r['examples_per_s']:.2f}", f"{r['ms_per_step']:,.1f}",
             ", ".join(f"{x:.2f}" for x in r["all_examples_per_s"]),
             "-" if r["mfu"] is None else f"{r['mfu']:.1%}",
             f"{r['parameters'] / 1e6:.2f}M", _loss(r["first_loss"]),
             f"{r['first_step_s']:.0f}", f"{r['other_cores_during']:.2f}"] for r in results]
    table = common.markdown_table(
        ["size", "implementation", "examples/s", "ms/step", "runs (examples/s)", "MFU",
         "parameters", "first loss", "first step (s)", "other processes (cores)"], rows)
    ratio_rows = [[x["size"], LABELS[x["ours"]], LABELS[x["baseline"]], f"{x['ratio']:.2f}x",
                   f">= {x['goal']}x", "met" if x["met"] else "not met",
                   "-" if x["ceiling"] is None else f"{x['ceiling']:.2f}x"] for x in ratios]
    ratio_table = common.markdown_table(
        ["size", "ours", "against", "ratio", "goal", "", "ceiling (ours at 100% MFU)"],
        ratio_rows)
    notes = [
        f"Batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, {FLAGS.max_predictions} masked "
        f"slots, one random batch for all ({masked:.1%} of real tokens [MASK]ed, "
        f"{batch['input_mask'].mean():.0%} of positions real). One train step = generator "
        "forward, sample, discriminator forward, mlm + 50 * disc, backward, AdamW update "
        f"(lr {LEARNING_RATE:g}, weight decay {WEIGHT_DECAY:g}); dropout 0.1 on.",
        f"After {FLAGS.warmup_steps} warm-up steps, each run times at least {FLAGS.steps} "
        f"steps and {FLAGS.min_seconds:g} s; median of {FLAGS.repeats} runs; examples/s = "
        "steps x batch / seconds. Each implementation runs in its own process.",
        *(["The headline is `ours (tf.function)`: the same kind of step as Model Garden's "
           "(tf.function, no XLA); `ours (tf.function, XLA)` is the same step with "
           "jit_compile=True."] if {"ours", "ours_xla"} & set(FLAGS.frameworks) else []),
        *(["`ours (tf.function, no XLA elementwise functions)` is `ours` with "
           f"{XLA_ELEMENTWISE_ENV}=0: the GELU and the dropout masks as TensorFlow's separate "
           "elementwise kernels instead of small XLA-compiled functions "
           "(electra_tf.modeling.layers.xla_elementwise)."]
          if "ours_plain" in FLAGS.frameworks else []),
        "PyTorch: transformers ElectraForMaskedLM + ElectraForPreTraining, embeddings "
        "shared, eager, torch threads = cores; MLM logits "
        + ("at all positions (ElectraForMaskedLM.forward)." if FLAGS.torch_full_mlm_logits
           else "at the masked positions only (like ours; ElectraForMaskedLM.forward would "
                "compute them at all L positions)."),
        "Model Garden: models.ElectraPretrainer over networks.BertEncoder (word embeddings "
        "shared, tanh-approximate GELU, its unused NSP-style generator head and poolers "
        "built but outside the loss), loss as ElectraPretrainTask.build_losses.",
        "'parameters' are the trainable ones (shared tensors once); 'first loss' is the loss "
        "of the first step (about ln V + 50 ln 2 = 45 at initialisation; '-' for the whole run, "
        "which logs losses per loop).",
        f"'other processes' is the CPU other programs on this shared {os.cpu_count()}-core "
        "machine used during the timed runs (max over the kept runs; a run during which they "
        "used more than 0.25 cores is discarded and redone, up to 4 times).",
    ]
    if "ours_run" in FLAGS.frameworks:
        notes.insert(2, "`ours (full run)` is the whole training run (run_pretraining with the "
                     "size's gin file): the tf.data pipeline reading and masking the Austen "
                     "corpus's TFRecords, the step with clipping and metrics, orbit's loop; "
                     "each timed run is one loop of "
                     + (f"{FLAGS.run_loop_steps}" if FLAGS.run_loop_steps else ", ".join(
                         f"{RUN_LOOP_STEPS.get(size, FLAGS.steps)} ({size})"
                         for size in FLAGS.sizes))
                     + " steps (the first loop, "
                     "which traces, is left out). The peers are timed on their bare step over "
                     "one batch in memory, without any input pipeline.")
    if failed:
        notes.append("Failed (see the command's output): " + ", ".join(failed) + ".")
    info = _run_info()
    if info["electra_tf_uncommitted"]:
        notes.append("electra_tf had uncommitted changes (" + ", ".join(
            f"`{x}`" for x in info["electra_tf_uncommitted"]) + "): the figures are of the "
            f"working tree, not of commit {info['git_commit']} alone.")
    devices = sorted({r.get("device") or "cpu" for r in results}) or ["cpu"]
    where = " and ".join("CPU" if d == "cpu" else d for d in devices)
    notes.insert(0, f"Precision {FLAGS.precision} (ours: Keras policy; PyTorch: autocast"
                 "; Model Garden: float32). MFU = examples/s x the step's hardware FLOPs per "
                 "example (electra_tf.modeling.flops, backward = 2 x forward, embedding "
                 "lookups as gathers: "
                 + ", ".join(f"{size} {hardware_flops_per_example(size) / 1e9:.2f} GFLOP"
                             for size in FLAGS.sizes)
                 + ") / the peak FLOP/s: on accelerators the published dense peak for that "
                 "precision (flops.PEAK_FLOPS; float32 counts TF32 tensor cores, TensorFlow's "
                 "default); on CPUs, which have no such figure, "
                 + (f"the {dtype} rate of TensorFlow's own n x n matmul measured in this run "
                    f"({cpu_peak / 1e9:.0f} GFLOP/s; best of n = "
                    + ", ".join(str(n) for n in GEMM_SIZES) + ")" if cpu_peak else
                    f"the {dtype} matmul rate measured in the same run (not measured here)")
                 + "; '-' where no peak applies. 'ceiling' is the ratio ours would reach if "
                 "every FLOP of its step ran at that peak: how far a goal is reachable at all.")
    if gemm and "torch" in gemm:
        torch_peak = gemm["torch"]["flop_per_s"]
        notes.insert(1, f"PyTorch's own {dtype} n x n matmul on this CPU, same sizes and "
                     f"threads: {torch_peak / 1e9:.0f} GFLOP/s, {torch_peak / cpu_peak:.2f}x "
                     "TensorFlow's: the part of the ratios against PyTorch that is the two "
                     "libraries' matrix kernels on this CPU rather than the models.")
    title = (f"End-to-end pre-training throughput on {where} (ours vs PyTorch vs Model Garden)"
             if "ours_run" in FLAGS.frameworks else
             f"Pre-training train-step throughput on {where} (ours vs PyTorch vs Model Garden)")
    record = {
        "title": title,
        "run": info,
        "settings": {f: FLAGS[f].value for f in (
            "sizes", "frameworks", "batch_size", "seq_length", "max_predictions",
            "warmup_steps", "steps", "min_seconds", "repeats", "torch_full_mlm_logits",
            "seed", "precision", "run_jit_compile", "run_loop_steps")},
        "results": results, "ratios": ratios, "failed": failed, "cpu_gemm": gemm,
    }
    body = (table + "\n\n" + ratio_table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    paths = common.write_results(FLAGS.results_name, record, body)
    print(table)
    print(ratio_table)
    print("\n".join(notes))
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 1 if failed else 0


if __name__ == "__main__":
    common.run(main)
