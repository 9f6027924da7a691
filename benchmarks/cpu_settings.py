r"""Pre-training on a CPU with mixed_bfloat16 and with XLA against float32: the same run (size,
seed, data, schedule) under each setting, its whole-run examples/s and what it learned.

    .venv/bin/python benchmarks/cpu_settings.py          # about 20 minutes on 2 cores
    .venv/bin/python benchmarks/cpu_settings.py --variants=float32,mixed_bfloat16,xla
    .venv/bin/python benchmarks/cpu_settings.py --sizes=tiny --tiny_steps=100 \
        --results_name=cpu_settings_check   # a check

CPUs with a bfloat16 matrix unit (Intel's AMX, `amx_bf16` in /proc/cpuinfo) multiply
bfloat16 matrices several times faster than float32 ones, and XLA compiles the step for the
CPU it runs on (AVX-512 included: TensorFlow's prebuilt kernels outside oneDNN's are
compiled for AVX only, as its start-up line says) with its elementwise ops fused; what a
whole run gains from either depends on the step's mix of matmuls and elementwise work.
(XLA's step alone is slower than the graph executor's on the CPUs measured so far:
benchmarks/results/model_step_cpu_xla.md, model_step_intel_amx_xla.md.) Each run is
benchmarks/reference_curves.py's (scripts/run_pretraining.py on the Austen records, batch
32 x 128, LR 2e-4 with bias correction, warmup 100, seed 0, evaluated on the held-out
shard) with the variant's bindings (VARIANTS). examples/s is the median of the run's own
`throughput/examples_per_second` over its loops after the first (which traces and
compiles the step); it times the whole training loop, input pipeline included, not
evaluation or checkpoints. Results: benchmarks/results/cpu_settings.{json,md,png}
(or --results_name).
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import reference_curves  # noqa: E402  (its train() and flags: steps, batch, evaluations)

flags.DEFINE_list("sizes", ["tiny", "small"], "Model sizes (gin/<size>.gin).")
flags.DEFINE_list("variants", ["float32", "mixed_bfloat16"], "Settings to run (VARIANTS: "
                  "also xla, mixed_bfloat16_xla); the first is the reference of the ratios.")
flags.DEFINE_string("results_name", "cpu_settings",
                    "benchmarks/results/<name>.{json,md,png}: name it after the host kind.")
FLAGS = flags.FLAGS

BF16 = "pretraining.precision='mixed_bfloat16'"
XLA = "pretraining.jit_compile=True"
VARIANTS = {"float32": (), "mixed_bfloat16": (BF16,), "xla": (XLA,),
            "mixed_bfloat16_xla": (BF16, XLA)}
VARIANTS_TEXT = "; ".join(f"{name}: {', '.join(f'`{b}`' for b in bindings) or 'none'}"
                          for name, bindings in VARIANTS.items())

COMPARED = [("loss/total", "total loss"), ("loss/generator", "generator loss"),
            ("loss/discriminator", "discriminator loss"),
            ("generator/mlm_accuracy", "generator MLM accuracy"),
            ("discriminator/auc", "discriminator AUC")]


def loop_throughput(run: dict) -> float:
    """Median examples/s of a run's training loops (TensorBoard has none for the first,
    which traces)."""
    points = [value for _, value in run["train"].get("throughput/examples_per_second", [])]
    if not points:
        raise SystemExit("a run of one loop has no throughput (its loop traced): give it more")
    return statistics.median(points)


def largest_gap(reference: list, other: list) -> float:
    """The largest |difference| between two [(step, value)] curves at the steps both have."""
    other = dict(other)
    return max((abs(value - other[step]) for step, value in reference if step in other),
               default=float("nan"))


def plot(runs: dict, path: str):
    colours = dict(zip(FLAGS.sizes, ["tab:blue", "tab:orange"]))
    styles = dict(zip(FLAGS.variants, ["-", "--", ":", "-."]))
    lines = [(f"{size} {variant}", styles[variant], colours[size], run["train"])
             for (size, variant), run in runs.items()]
    common.plot_panels(
        [(tag, f"{title} (training)") for tag, title in COMPARED[2:] + COMPARED[:1]], lines,
        path, "Pre-training on a CPU: bfloat16 and XLA against float32, same seed and data",
        "step (batch %d, seq 128)" % FLAGS.batch_size)


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.variants) - set(VARIANTS)) + sorted(
        set(FLAGS.sizes) - {"tiny", "small"})
    if unknown:
        print(f"error: unknown --variants/--sizes entries {unknown}; variants are "
              f"{', '.join(VARIANTS)} and sizes tiny, small", file=sys.stderr)
        return 1
    data_dir = os.path.join(FLAGS.work_dir, "data")
    common.build_austen_data(data_dir)
    steps = {"tiny": FLAGS.tiny_steps, "small": FLAGS.small_steps}
    runs = {}
    for size in FLAGS.sizes:
        for variant in FLAGS.variants:
            runs[size, variant] = reference_curves.train(
                f"{size}_{variant}", f"{size}.gin", steps[size], data_dir,
                extra=VARIANTS[variant])
    reference = FLAGS.variants[0]
    rows = []
    for (size, variant), run in runs.items():
        base = runs[size, reference]
        speed = loop_throughput(run)
        final = {tag: run["eval"][tag][-1][1] for tag, _ in COMPARED}
        gap = largest_gap(base["train"]["discriminator/auc"], run["train"]["discriminator/auc"])
        run.update(examples_per_second=speed, final_eval=final)
        rows.append([size, variant, run["steps"], f"{speed:.1f}",
                     f"{speed / loop_throughput(base):.2f}x",
                     *[f"{final[tag]:.3f}" for tag, _ in COMPARED],
                     "" if variant == reference else f"{gap:.3f}"])
    record = {"title": "Pre-training on a CPU: bfloat16 and XLA against float32",
              "run": common.run_info(), "variants": {v: VARIANTS[v] for v in FLAGS.variants},
              "runs": {f"{size}_{variant}": run for (size, variant), run in runs.items()}}
    body = common.markdown_table(
        ["size", "variant", "steps", "examples/s", f"vs {reference}",
         *[f"eval {title}" for _, title in COMPARED], "largest training-AUC gap"], rows)
    body += (f"\n\n![curves]({FLAGS.results_name}.png)\n\n"
             f"- Each run: reference_curves.py's settings (batch {FLAGS.batch_size} x 128, "
             "LR 2e-4, Adam with bias correction, warmup 100, seed 0, Austen records), "
             f"plus the variant's bindings ({VARIANTS_TEXT}); eval: the held-out sixth "
             "shard, 20 batches, at the end. examples/s: the median over the run's "
             "training loops after the first, input pipeline included, evaluation and "
             "checkpoints not.\n"
             "- The largest training-AUC gap is over the logged loops, against the same "
             f"size's {reference} run: the same initial weights, data, masks and random "
             "keys, so the runs part only through rounding (which can flip a generator "
             "sample, and then grows).\n")
    common.write_results(FLAGS.results_name, record, body)
    plot(runs, os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}.png"))
    print(body)


if __name__ == "__main__":
    FLAGS.set_default("tiny_steps", 600)
    FLAGS.set_default("small_steps", 200)
    FLAGS.set_default("evaluations", 4)
    FLAGS.set_default("work_dir", os.path.join(common.CACHE_DIR, "cpu_settings"))
    common.run(main)
