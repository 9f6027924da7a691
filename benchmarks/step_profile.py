"""Where one pre-training train step's time goes (ours, tf.function, without XLA unless
--profile_jit_compile): the step of benchmarks/model_step.py timed whole and with parts left
out, in the same run, so the differences say what each part costs.

    .venv/bin/python benchmarks/step_profile.py                  # small, about 6 minutes
    .venv/bin/python benchmarks/step_profile.py --size=base      # far longer
    # on a GPU, as pre-training runs there (bf16, XLA):
    python benchmarks/step_profile.py --size=base --batch_size=128 \
        --precision=mixed_bfloat16 --profile_jit_compile --seconds=5

Variants, each a fresh model on model_step's random batch (batch 32 x seq 128, 20 slots):
- full: generator forward, sampling, discriminator forward, losses, backward, AdamW;
- no optimizer update: the same without apply_gradients (the gradients are still computed);
- forward only: generator, sampling, discriminator and losses in training mode;
- full, dropout off: the full step with every dropout rate 0 (the cost of the dropout masks);
and, timed alone, the sampling (`sample_from_logits`) of one batch's generator logits [B, N, V], and an
n x n matmul in --precision's matmul dtype (a CPU's practical peak, as in model_step.py; on
an accelerator its published peak for --precision, flops.peak_flops_per_second, instead).
The FLOPs of the step (electra_tf.modeling.flops, backward = 2 x forward, lookups as
gathers) at that peak give the time the step could take if nothing but its matmuls ran, at
full speed.
Results: benchmarks/results/step_profile.{json,md} (or --profile_results_name, or
--results_name).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import model_step  # noqa: E402  (its batch, shapes, FLOPs and matmul timing)

from electra_tf import choices  # noqa: E402
flags.DEFINE_enum("size", "small", choices.MODEL_SIZES, "Model size.")
flags.DEFINE_float("seconds", 15.0, "Each timed run lasts at least this long.")
flags.DEFINE_integer("profile_repeats", 3, "Timed runs per variant (median reported).")
flags.DEFINE_string("profile_results_name", "step_profile",
                    "benchmarks/results/<name>.{json,md}.")
flags.DEFINE_bool("profile_jit_compile", False, "Compile every variant (and the sampling) "
                  "with XLA, as pretraining.jit_compile does on GPUs and TPUs.")
FLAGS = flags.FLAGS

VARIANTS = {"full": "full step", "no_update": "no optimizer update",
            "forward": "forward only", "no_dropout": "full step, dropout off"}


def timed(fn, label: str) -> float:
    """Median seconds per call of fn() over FLAGS.profile_repeats quiet runs."""
    return common.seconds_per_call(fn, FLAGS.seconds, FLAGS.profile_repeats,
                                   FLAGS.max_wait_quiet_s, label)


def step_function(variant: str, batch: dict):
    """model_step.build_ours' step (the variant's part left out) as a blocking call."""
    step, _ = model_step.build_ours(batch, FLAGS.size, jit_compile=FLAGS.profile_jit_compile,
                                    variant=variant)
    counter = [0]

    def call():
        counter[0] += 1
        return float(step(counter[0]))

    return call


def sampling_function(batch: dict):
    import tensorflow as tf

    from electra_tf.modeling.tensors import sample_from_logits
    discriminator, _ = model_step.shapes(FLAGS.size)
    shape = list(batch["masked_lm_ids"].shape) + [discriminator.vocab_size]
    logits = tf.random.stateless_normal(shape, [FLAGS.seed, 1])
    index = tf.range(shape[0], dtype=tf.int64)
    sample = tf.function(lambda: sample_from_logits(logits, FLAGS.seed, index),
                         jit_compile=FLAGS.profile_jit_compile)
    return lambda: sample().numpy()


def main(argv):
    del argv
    batch = model_step.make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions,
                                  FLAGS.seed)
    from electra_tf.modeling import flops
    device = model_step._tf_device()
    if device == "cpu":
        gemm = model_step.measure_gemm()
        peak = gemm["flop_per_s"]
        peak_text = (f"The {gemm['dtype']} matmul rate of this machine: {peak / 1e9:.0f} GFLOP/s "
                     "(TensorFlow n x n matmul, best of n = "
                     + ", ".join(str(n) for n in model_step.GEMM_SIZES) + ")")
    else:
        gemm = None
        peak = flops.peak_flops_per_second(device, FLAGS.precision)
        if peak is None:
            print(f"error: no published peak for {device} at {FLAGS.precision} "
                  "(electra_tf.modeling.flops.PEAK_FLOPS); add it there", file=sys.stderr)
            return 1
        peak_text = f"The published dense peak of the {device} at {FLAGS.precision}: " \
                    f"{peak / 1e12:.0f} TFLOP/s"
    seconds = {}
    for variant, label in VARIANTS.items():
        print(f"{label}: building, warming up, timing", flush=True)
        seconds[variant] = timed(step_function(variant, batch), label)
    print("sampling alone: timing", flush=True)
    seconds["sampling"] = timed(sampling_function(batch), "sampling alone")
    matmul_flops = FLAGS.batch_size * model_step.hardware_flops_per_example(FLAGS.size)
    seconds["matmuls_at_peak"] = matmul_flops / peak

    full = seconds["full"]
    parts = [
        ("forward (generator, sampling, discriminator, losses)", seconds["forward"]),
        ("backward", seconds["no_update"] - seconds["forward"]),
        ("AdamW update", full - seconds["no_update"]),
        ("dropout masks (full minus dropout off)", full - seconds["no_dropout"]),
        ("sampling (timed alone)", seconds["sampling"]),
        ("the step's FLOPs at the matmul peak (a floor)", seconds["matmuls_at_peak"]),
    ]
    rows = [[VARIANTS[v], f"{seconds[v] * 1e3:,.0f}",
             f"{FLAGS.batch_size / seconds[v]:.2f}"] for v in VARIANTS]
    part_rows = [[name, f"{s * 1e3:,.0f}", f"{s / full:.0%}"] for name, s in parts]
    body = (
        f"ELECTRA-{FLAGS.size.capitalize()} shapes, batch {FLAGS.batch_size} x seq "
        f"{FLAGS.seq_length}, {FLAGS.max_predictions} masked slots, {FLAGS.precision}, "
        f"tf.function {'with' if FLAGS.profile_jit_compile else 'without'} XLA, on "
        f"{'the CPU' if device == 'cpu' else device}; medians of "
        f"{FLAGS.profile_repeats} runs of at least {FLAGS.seconds:g} s each.\n\n"
        + common.markdown_table(["variant", "ms/step", "examples/s"], rows)
        + "\n\nWhat the parts cost (differences of the medians above; the overlaps mean "
        "they need not add up):\n\n"
        + common.markdown_table(["part", "ms/step", "share of the full step"], part_rows)
        + f"\n\n{peak_text}; the step's "
        f"{matmul_flops / 1e9:,.0f} GFLOP (electra_tf.modeling.flops, backward = 2 x "
        f"forward, lookups as gathers) run at {matmul_flops / full / 1e9:,.0f} GFLOP/s "
        f"({matmul_flops / full / peak:.0%} of it).\n")
    where = "CPU" if device == "cpu" else device
    xla = ", XLA" if FLAGS.profile_jit_compile else ""
    record = {"title": f"Where the train step's time goes ({FLAGS.size}, {where}{xla})",
              "run": common.run_info(),
              "settings": {"size": FLAGS.size, "batch_size": FLAGS.batch_size,
                           "seq_length": FLAGS.seq_length,
                           "max_predictions": FLAGS.max_predictions,
                           "seconds": FLAGS.seconds, "repeats": FLAGS.profile_repeats,
                           "precision": FLAGS.precision,
                           "jit_compile": FLAGS.profile_jit_compile},
              "seconds_per_step": seconds, "gemm": gemm, "peak_flop_per_s": peak,
              "parts": {name: s for name, s in parts}}
    # (--results_name is model_step's flag too; given, it names these results as well)
    name = (FLAGS.results_name if FLAGS["results_name"].present
            and not FLAGS["profile_results_name"].present else FLAGS.profile_results_name)
    paths = common.write_results(name, record, body)
    print(body)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    common.run(main)
