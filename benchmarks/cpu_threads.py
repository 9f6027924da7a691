"""Small runs side by side on a CPU: the examples/s of one pre-training run that has every
core against several runs at once, each limited to one thread (TF_NUM_INTRAOP_THREADS=1,
TF_NUM_INTEROP_THREADS=1), on the embedded Austen corpus.

    .venv/bin/python benchmarks/cpu_threads.py        # about 8 minutes on 2 cores

A tiny model's matmuls are too small to keep several cores busy, so a grid of tiny runs (a
study, a learning-rate sweep) can finish sooner run --runs at a time with a thread each than
one after another with all of them. Each run is scripts/run_pretraining.py in its own process
with the same seed; a loop's examples/s is the console line's, the first loop (tracing) left
out, median over the rest. Results: benchmarks/results/cpu_threads.{json,md}.
"""

import os
import re
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

flags.DEFINE_list("gin_files", ["tiny.gin"], "Size files to measure, each on its own.")
flags.DEFINE_integer("runs", os.cpu_count() or 2, "Runs at once, one thread each.")
flags.DEFINE_integer("steps", 500, "Training steps of each run (loops of 50).")
flags.DEFINE_integer("batch_size", 32, "Batch of each run.")
flags.DEFINE_string("work_dir", os.path.join(common.CACHE_DIR, "cpu_threads"),
                    "Where the data and the (deleted afterwards) model dirs go.")
common.define_results_name("cpu_threads")
FLAGS = flags.FLAGS

LINE = re.compile(r"^step (\d+)/\d+ \| loss ([0-9.]+) .*\| ([0-9.]+) examples/s")
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def command(gin_file: str, model_dir: str, data_dir: str) -> list[str]:
    return [sys.executable, os.path.join(common.REPO, "scripts", "run_pretraining.py"),
            f"--gin_file={gin_file}", f"--model_dir={model_dir}",
            f"--train_data={os.path.join(data_dir, 'pretrain_data-0000[0-4]-of-*')}",
            f"--gin_bindings=NUM_TRAIN_STEPS={FLAGS.steps}",
            f"--gin_bindings=TRAIN_BATCH_SIZE={FLAGS.batch_size}",
            "--gin_bindings=STEPS_PER_LOOP=50", f"--gin_bindings=CHECKPOINT_EVERY={FLAGS.steps}",
            "--seed=0"]


def launch(gin_file: str, name: str, data_dir: str, env: dict) -> subprocess.Popen:
    model_dir = os.path.join(FLAGS.work_dir, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    return subprocess.Popen(command(gin_file, model_dir, data_dir), env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, name: str) -> dict:
    """Waits for a run; returns its loops' examples/s (the first left out) and last loss."""
    output, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"{name} failed (exit {process.returncode}):\n{output[-3000:]}")
    shutil.rmtree(os.path.join(FLAGS.work_dir, name), ignore_errors=True)
    loops = [m.groups() for line in output.splitlines() if (m := LINE.match(line))]
    rates = [float(rate) for _, _, rate in loops[1:]]
    return {"examples_per_second": statistics.median(rates), "loops": rates,
            "final_loss": float(loops[-1][1])}


def measure(gin_file: str, data_dir: str) -> dict:
    name = gin_file.removesuffix(".gin")
    common.wait_for_quiet()
    with common.LoadMonitor() as solo_load:
        solo = finish(launch(gin_file, f"{name}_solo", data_dir, {}), f"{name}_solo")
    common.wait_for_quiet()
    started = time.perf_counter()
    with common.LoadMonitor() as side_load:
        processes = [launch(gin_file, f"{name}_{i}", data_dir, ONE_THREAD)
                     for i in range(FLAGS.runs)]
        side = [finish(p, f"{name}_{i}") for i, p in enumerate(processes)]
    return {"gin_file": gin_file, "solo": solo, "side_by_side": side,
            "side_by_side_seconds": time.perf_counter() - started,
            "total_examples_per_second": sum(r["examples_per_second"] for r in side),
            "other_cores_during": [solo_load.other_cores, side_load.other_cores]}


def main(argv):
    del argv
    data_dir = os.path.join(FLAGS.work_dir, "data")
    common.build_austen_data(data_dir)
    results = [measure(gin_file, data_dir) for gin_file in FLAGS.gin_files]
    rows = []
    for r in results:
        solo = r["solo"]["examples_per_second"]
        same = all(s["final_loss"] == r["solo"]["final_loss"] for s in r["side_by_side"])
        rows.append([r["gin_file"], f"{solo:.1f}",
                     " + ".join(f"{s['examples_per_second']:.1f}" for s in r["side_by_side"]),
                     f"{r['total_examples_per_second'] / solo:.2f}x",
                     f"{r['solo']['final_loss']:.4f}",
                     ", ".join(f"{s['final_loss']:.4f}" for s in r["side_by_side"]),
                     "yes" if same else "no"])
    body = common.markdown_table(
        ["config", "one run, all cores (examples/s)",
         f"{FLAGS.runs} runs at once, 1 thread each (examples/s)", "together vs one",
         "final loss, one run", "final losses side by side", "same"], rows)
    body += (f"\n\n- Batch {FLAGS.batch_size} x seq 128 (the size file's), {FLAGS.steps} "
             "steps, seed 0, every run in its own process; a run's examples/s is the median "
             "of its console lines after the first loop (loops of 50 steps).\n"
             "- 'together vs one': the runs' summed examples/s against the one run's. Above "
             "1x, a grid of such runs finishes sooner side by side: set "
             "`TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1` for each.\n"
             "- 'same': whether the last loop's loss is equal to the 4 printed decimals (the "
             "thread count changes how TensorFlow splits the work, which may change float "
             "sums).\n")
    record = {"title": "One run with every core vs runs side by side with a thread each (CPU)",
              "run": common.run_info(), "results": results}
    common.write_results(FLAGS.results_name, record, body)
    print(body)


if __name__ == "__main__":
    common.run(main)
