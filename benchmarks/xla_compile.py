"""What XLA has to compile: the pre-training train step's HLO size and compile time, ours
against TF Model Garden's ELECTRA, in the same run.

    .venv/bin/python benchmarks/xla_compile.py                    # small and base, ~20 min on CPU
    .venv/bin/python benchmarks/xla_compile.py --sizes=small --repeats=1   # ~3 minutes

Why: on an H100 the first loop of a run with `pretraining.jit_compile=True` took 2.5 minutes
(small) to 5 (base) before any training (benchmarks/results/gpu_h100.md). Part of a
compile's cost on any backend grows with the number of HLO instructions it is handed; that
count, and the compile time on the machine the script runs on, are what this measures. On
a GPU machine the same command gives the GPU's compile times.

The steps, each `tf.function(jit_compile=True)`, on model_step.py's random batch (its
--batch_size, --seq_length, --max_predictions, --precision and --seed apply):
- ours, model_garden: model_step.py's steps (the same shapes, dropout and Keras' AdamW);
- ours_trainer: the step a pre-training run compiles (`PretrainingTrainer`'s replica step
  under `pretraining.jit_compile`): our AdamWeightDecay as create_optimizer makes it,
  global-norm clipping, the metrics and the non-finite checks.
Each implementation is compiled in --repeats fresh processes of its own (compile times on a
shared machine vary by 10-20% from one process to the next); the medians are reported, and
every value recorded:
- HLO instructions: the unoptimised HLO module XLA receives
  (`experimental_get_compiler_ir(...)(stage="hlo")`), lines that define an instruction;
- conditionals: its `conditional` instructions (tf.cond), each of which makes XLA's GPU
  runtime wait for the device to copy the predicate back before running a branch;
- lowering (s): tracing the step and lowering it to that HLO;
- compile (s): the first call's time less the median of --steps calls after it (the first
  call compiles; the tracing it reuses is counted in lowering, as the recorded trace counts
  show).

Results: benchmarks/results/<--results_name>.{json,md} (default xla_compile).
"""

import json
import os
import re
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
import model_step  # noqa: E402  (the steps, the batch and their flags)
flags.adopt_module_key_flags(model_step)  # (--helpshort lists them)

flags.DEFINE_string("compile_worker", None, "Internal: the implementation a worker compiles.")
flags.DEFINE_enum("dropout", "library", ["library", "hashed"], "Our steps' dropout: the "
                  "library's, or dropout_cost.py's hashed-mask candidate swapped in.")
FLAGS = flags.FLAGS
FLAGS.set_default("frameworks", ["ours", "ours_trainer", "model_garden"])
FLAGS.set_default("steps", 3)
FLAGS.set_default("repeats", 2)
FLAGS.set_default("results_name", "xla_compile")
COMPARED = {"ours": "ours", "ours_trainer": "ours, the trainer's step",
            "model_garden": "TF Model Garden"}
INSTRUCTION = re.compile(r"\s*(ROOT )?%\S+ = ")


def count_instructions(hlo_text: str) -> int:
    """Instructions of an HLO module's text: the lines that define one."""
    return sum(1 for line in hlo_text.splitlines() if INSTRUCTION.match(line))


def build_trainer_step(batch: dict, size: str):
    """PretrainingTrainer's replica step, compiled as a run with pretraining.jit_compile
    compiles it, on one device; returns (step, facts) as model_step's builders do."""
    import keras
    import tensorflow as tf

    from electra_tf.modeling.pretrainer import ElectraPretrainer
    from electra_tf.training.optimization import create_optimizer
    from electra_tf.training.trainer import PretrainingTrainer, TrainState

    keras.utils.set_random_seed(FLAGS.seed)
    keras.mixed_precision.set_global_policy(FLAGS.precision)
    discriminator, generator = model_step.shapes(size)
    model = ElectraPretrainer(discriminator, generator, objective="electra",
                              sharing="embeddings", seed=FLAGS.seed)
    batch = {k: tf.constant(v) for k, v in batch.items()}
    model(batch, step=0, training=True)  # builds the variables
    optimizer = create_optimizer(aggregate_gradients=False)
    optimizer.build(model.trainable_variables)
    state = TrainState(max_skips=0)
    trainer = PretrainingTrainer(
        model, optimizer, tf.distribute.get_strategy(),
        iter(tf.data.Dataset.from_tensors(batch).repeat()), state,
        global_batch_size=FLAGS.batch_size, seq_length=FLAGS.seq_length, jit_compile=True)
    train_step = trainer._replica_step_fn()  # pylint: disable=protected-access

    def step(i):
        del i  # the trainer advances its own step
        train_step(batch)
        return float(trainer.metrics.result()["loss/total"])

    facts = {"parameters": sum(int(v.shape.num_elements()) for v in model.trainable_variables),
             "device": model_step._tf_device()}  # pylint: disable=protected-access
    return model_step.inspectable(step, train_step, batch), facts


def run_worker() -> int:
    import numpy as np
    with np.load(FLAGS.batch_file) as data:
        batch = {k: data[k] for k in data.files}
    name, size = FLAGS.compile_worker, FLAGS.worker_size
    if FLAGS.dropout == "hashed":
        import dropout_cost
        from electra_tf.modeling import layers
        layers.dropout = dropout_cost.hashed_dropout
    start = time.perf_counter()
    if name == "ours":
        step, facts = model_step.build_ours(batch, size, jit_compile=True)
    elif name == "ours_trainer":
        step, facts = build_trainer_step(batch, size)
    else:
        step, facts = model_step.build_model_garden(batch, size, jit_compile=True)
    build_s = time.perf_counter() - start

    start = time.perf_counter()
    hlo = step.compiler_ir("hlo")
    lowering_s = time.perf_counter() - start
    instructions = count_instructions(hlo)
    conditionals = len(re.findall(r" conditional\(", hlo))
    traces_lowered = step.tracing_count()

    start = time.perf_counter()
    first_loss = float(step(0))
    first_call_s = time.perf_counter() - start
    traces_after_first_call = step.tracing_count()
    step_s = []
    for i in range(1, FLAGS.steps + 1):
        start = time.perf_counter()
        float(step(i))
        step_s.append(time.perf_counter() - start)
    step_median = statistics.median(step_s)
    result = {"name": name, "label": COMPARED[name], "size": size,
              "hlo_instructions": instructions, "conditionals": conditionals,
              "lowering_s": lowering_s,
              "first_call_s": first_call_s, "step_s": step_median, "all_step_s": step_s,
              "compile_s": first_call_s - step_median, "build_s": build_s,
              "traces_when_lowered": traces_lowered,
              "traces_after_first_call": traces_after_first_call,
              "first_loss": first_loss, **facts}
    with open(FLAGS.result_file, "w") as f:
        json.dump(result, f, indent=1)
    return 0


def run_child(name: str, size: str, batch_file: str, workdir: str, repeat: int) -> dict | None:
    result_file = os.path.join(workdir, f"{name}_{size}_{repeat}.json")
    passed = ("steps", "seed", "max_predictions", "seq_length", "precision", "dropout")
    command = [sys.executable, os.path.abspath(__file__), f"--compile_worker={name}",
               f"--worker_size={size}", f"--batch_file={batch_file}",
               f"--result_file={result_file}"]
    command += [f"--{f}={FLAGS[f].value}" for f in passed]
    print(f"{COMPARED[name]}, {size}, process {repeat + 1}/{FLAGS.repeats}: lowering, "
          "compiling, stepping", flush=True)
    proc = common.run_child(command, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                            cwd=common.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    return model_step.child_result(proc, result_file, f"{COMPARED[name]}, {size}")


def median_of(runs: list[dict]) -> dict:
    """One implementation's result over its processes: the medians of the timings, every
    value under all_<key>; the HLO size must be the same in each."""
    sizes = {r["hlo_instructions"] for r in runs}
    if len(sizes) != 1:
        raise RuntimeError(f"the HLO instruction count differs between processes: {sizes}")
    result = dict(runs[0])
    for key in ("lowering_s", "compile_s", "first_call_s", "step_s", "build_s"):
        result[key] = statistics.median(r[key] for r in runs)
        result[f"all_{key}"] = [r[key] for r in runs]
    result["processes"] = runs
    return result


def main(argv):
    del argv
    if FLAGS.compile_worker:
        return run_worker()
    import numpy as np

    error = model_step.flag_error(COMPARED)
    if error:
        print(error, file=sys.stderr)
        return 1
    results, failed = [], []
    with tempfile.TemporaryDirectory(prefix="xla_compile_") as workdir:
        batch_file = os.path.join(workdir, "batch.npz")
        np.savez(batch_file, **model_step.make_batch(
            FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions, FLAGS.seed))
        for size in FLAGS.sizes:
            for name in FLAGS.frameworks:
                runs = []
                for repeat in range(FLAGS.repeats):
                    r = run_child(name, size, batch_file, workdir, repeat)
                    if r is None:
                        break
                    runs.append(r)
                    print(f"{COMPARED[name]}, {size}: {r['hlo_instructions']:,} HLO "
                          f"instructions, lowering {r['lowering_s']:.1f} s, compile "
                          f"{r['compile_s']:.1f} s, step {r['step_s']:.2f} s", flush=True)
                if len(runs) < FLAGS.repeats:
                    failed.append(f"{name} ({size})")
                    continue
                results.append(median_of(runs))

    rows = [[r["size"], r["label"], f"{r['hlo_instructions']:,}", r["conditionals"],
             f"{r['lowering_s']:.1f}",
             f"{r['compile_s']:.1f}", ", ".join(f"{x:.1f}" for x in r["all_compile_s"]),
             f"{r['step_s']:.2f}", r.get("device") or "cpu"] for r in results]
    table = common.markdown_table(
        ["size", "implementation", "HLO instructions", "conditionals", "lowering (s)",
         "compile (s)",
         "compile, each process (s)", "step (s)", "device"], rows)
    ratios = []
    for size in FLAGS.sizes:
        by_name = {r["name"]: r for r in results if r["size"] == size}
        theirs = by_name.get("model_garden")
        for name in ("ours", "ours_trainer"):
            if theirs and name in by_name:
                ratios.append({"size": size, "name": name, **{
                    key: by_name[name][key] / theirs[key]
                    for key in ("hlo_instructions", "lowering_s", "compile_s", "step_s")}})
    ratio_table = common.markdown_table(
        ["size", "implementation", "HLO instructions", "lowering", "compile", "step"],
        [[x["size"], COMPARED[x["name"]],
          *(f"{x[k]:.2f}x" for k in ("hlo_instructions", "lowering_s", "compile_s", "step_s"))]
         for x in ratios])
    notes = [
        f"Batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, {FLAGS.max_predictions} masked "
        f"slots, precision {FLAGS.precision}; model_step.py's steps (generator, sampling, "
        "discriminator, mlm + 50 * disc, backward, Keras' AdamW; dropout 0.1 on) and the "
        "trainer's step (the same model; our AdamWeightDecay, global-norm clipping, metrics, "
        "non-finite checks), each `tf.function(jit_compile=True)`, each implementation in "
        "its own process."
        + (" Our steps' dropout: `benchmarks/dropout_cost.py`'s hashed-mask candidate "
           "(`--dropout=hashed`) in place of the library's." if FLAGS.dropout == "hashed"
           else ""),
        "HLO instructions: of the unoptimised module XLA is handed. Lowering: tracing the "
        "step and lowering it to that HLO. Compile: the first call less the median of the "
        f"{FLAGS.steps} calls after it. Medians over {FLAGS.repeats} processes each. The "
        "second table is each of ours over Model Garden.",
        "Traces (lowered, after the first call): " + "; ".join(
            f"{r['label']} {r['size']} {r['traces_when_lowered']}, "
            f"{r['traces_after_first_call']}" for r in results) + ".",
    ]
    if failed:
        notes.append("Failed (see the command's output): " + ", ".join(failed) + ".")
    record = {"title": "XLA: the train step's HLO size and compile time (ours vs Model Garden)",
              "run": common.run_info(),
              "settings": {f: FLAGS[f].value for f in (
                  "sizes", "frameworks", "batch_size", "seq_length", "max_predictions",
                  "steps", "repeats", "seed", "precision", "dropout")},
              "results": results, "ratios": ratios, "failed": failed}
    body = table + "\n\n" + ratio_table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    paths = common.write_results(FLAGS.results_name, record, body)
    print(table)
    print(ratio_table)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 1 if failed else 0


if __name__ == "__main__":
    common.run(main)
