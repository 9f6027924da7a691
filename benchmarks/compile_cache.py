"""What XLA's persistent compilation cache saves a resumed run: the time from starting
`scripts/run_pretraining.py` to its first loop's console line, for a run resumed with the
cache (`pretraining.xla_cache`, on by default) and without it, and for the run's first start.

    .venv/bin/python benchmarks/compile_cache.py                      # small, ~5 min on CPU
    .venv/bin/python benchmarks/compile_cache.py --gin_files=small.gin,base.gin \
        --batch_size=128 --bindings="pretraining.precision='mixed_bfloat16'" \
        --data_dir=/tmp/data                  # on a GPU, with TFRecords built elsewhere

For each size: a run with `pretraining.jit_compile=True` on the embedded Austen corpus (or
--data_dir) is started and killed (SIGKILL) as soon as its first checkpoint after step 0 is
written (its first loop compiled the step, and the cache saved it); its model dir is copied
twice and each copy resumed, one with `pretraining.xla_cache=False`, one with the cache, one
after the other on a quiet machine. Each resumed run trains one more loop and ends.
Measured: seconds from the process start to the first loop's line (importing TensorFlow,
building the model and pipeline, restoring, tracing, compiling or loading the step, and one
loop of --steps_per_loop steps) and to the process's end, and the resumed runs' final
weights digests (equal: the loaded program computes what the compiled one does).

Results: benchmarks/results/<--results_name>.{json,md} (default compile_cache).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

flags.DEFINE_list("gin_files", ["small.gin"], "Size files to measure, each on its own.")
flags.DEFINE_integer("batch_size", 8, "TRAIN_BATCH_SIZE of every run.")
flags.DEFINE_integer("steps_per_loop", 2, "Steps per loop (and between checkpoints).")
flags.DEFINE_multi_string("bindings", [], "More gin bindings for every run (precision...).")
flags.DEFINE_string("work_dir", os.path.join(common.CACHE_DIR, "compile_cache"),
                    "Where the data and the (deleted afterwards) model dirs go.")
flags.DEFINE_string("data_dir", None, "Pre-training TFRecords (seq 128) to use, shards "
                    "pretrain_data-0000[0-4]-of-*; default: built from the Austen corpus.")
flags.DEFINE_string("results_name", "compile_cache", "Results file name.")
FLAGS = flags.FLAGS

STEP_LINE = re.compile(r"^step \d+/\d+ \|")
DONE_LINE = re.compile(r"^done: step (\d+);.* weights sha256 (\w+)")


def command(gin_file: str, model_dir: str, data_dir: str, *bindings) -> list[str]:
    loop = FLAGS.steps_per_loop
    return [sys.executable, os.path.join(common.REPO, "scripts", "run_pretraining.py"),
            f"--gin_file={gin_file}", f"--model_dir={model_dir}",
            f"--train_data={os.path.join(data_dir, 'pretrain_data-0000[0-4]-of-*')}",
            f"--gin_bindings=NUM_TRAIN_STEPS={2 * loop}",
            f"--gin_bindings=TRAIN_BATCH_SIZE={FLAGS.batch_size}",
            "--gin_bindings=MAX_SEQ_LENGTH=128",
            f"--gin_bindings=STEPS_PER_LOOP={loop}", f"--gin_bindings=CHECKPOINT_EVERY={loop}",
            "--gin_bindings=pretraining.jit_compile=True",
            *[f"--gin_bindings={b}" for b in FLAGS.bindings + list(bindings)], "--seed=0"]


def timed_run(args: list[str], kill_at: str | None = None) -> dict:
    """Runs a command, noting when its first loop line came; with `kill_at`, SIGKILLs it as
    soon as that file exists (after the first loop's line)."""
    started = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    first_loop, lines = None, []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if first_loop is None and STEP_LINE.match(line):
            first_loop = time.perf_counter() - started
        if kill_at and first_loop is not None and "saved checkpoint" in line:
            while not os.path.exists(kill_at):
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
    process.wait()
    ended = time.perf_counter() - started
    if first_loop is None or (process.returncode and not kill_at):
        raise SystemExit(f"the run failed (exit {process.returncode}):\n"
                         + "\n".join(lines[-40:]))
    done = next((m.groups() for line in lines if (m := DONE_LINE.match(line))), None)
    return {"first_loop_s": first_loop, "process_s": ended, "exit": process.returncode,
            "weights_sha256": done[1] if done else None,
            "cache_lines": [line for line in lines if line.startswith("XLA compilation cache")]}


def measure(gin_file: str, data_dir: str) -> dict:
    name = gin_file.removesuffix(".gin")
    first = os.path.join(FLAGS.work_dir, f"{name}_first")
    shutil.rmtree(first, ignore_errors=True)
    common.wait_for_quiet()
    start = timed_run(command(gin_file, first, data_dir),
                      kill_at=os.path.join(first, f"ckpt-{FLAGS.steps_per_loop}.index"))
    results = {"gin_file": gin_file, "first_start": start}
    for label, bindings in (("resumed, no cache", ["pretraining.xla_cache=False"]),
                            ("resumed, cache", [])):
        model_dir = os.path.join(FLAGS.work_dir, f"{name}_{label.replace(', ', '_')}")
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.copytree(first, model_dir)
        common.wait_for_quiet()
        results[label] = timed_run(command(gin_file, model_dir, data_dir, *bindings))
        shutil.rmtree(model_dir, ignore_errors=True)
    shutil.rmtree(first, ignore_errors=True)
    return results


def main(argv):
    del argv
    data_dir = FLAGS.data_dir or os.path.join(FLAGS.work_dir, "data")
    if not FLAGS.data_dir:
        common.build_austen_data(data_dir)
    results = [measure(gin_file, data_dir) for gin_file in FLAGS.gin_files]
    rows = []
    for r in results:
        cold, warm = r["resumed, no cache"], r["resumed, cache"]
        rows.append([r["gin_file"], f"{r['first_start']['first_loop_s']:.1f}",
                     f"{cold['first_loop_s']:.1f}", f"{warm['first_loop_s']:.1f}",
                     f"{warm['first_loop_s'] / cold['first_loop_s']:.2f}x",
                     f"{cold['process_s']:.1f} / {warm['process_s']:.1f}",
                     "yes" if cold["weights_sha256"] == warm["weights_sha256"] else "NO"])
    body = common.markdown_table(
        ["config", "first start: to the first loop (s)", "resumed without the cache (s)",
         "resumed with the cache (s)", "with / without", "whole resumed run, without / "
         "with (s)", "same weights"], rows)
    bindings = ", ".join(f"`{b}`" for b in FLAGS.bindings) or "none"
    body += (f"\n\n- Batch {FLAGS.batch_size} x seq 128, loops of {FLAGS.steps_per_loop} "
             "steps, `pretraining.jit_compile=True`, seed 0; more bindings: "
             f"{bindings}. Seconds from the process's start to its first loop's console "
             "line: importing TensorFlow, building, restoring, tracing, then compiling (or "
             "loading) the step and running one loop.\n"
             "- The first start is killed once it has checkpointed its first loop; both "
             "resumed runs start from copies of that model dir and run the second loop.\n"
             "- 'same weights': the two resumed runs' final weights digests are equal.\n")
    record = {"title": "Resuming a run with XLA's persistent compilation cache",
              "run": common.run_info(), "bindings": FLAGS.bindings,
              "batch_size": FLAGS.batch_size, "steps_per_loop": FLAGS.steps_per_loop,
              "results": results}
    common.write_results(FLAGS.results_name, record, body)
    print(body)


if __name__ == "__main__":
    common.run(main)
