"""Which TensorFlow ops one pre-training train step spends its time in (ours, tf.function,
no XLA): model_step.py's step run under TensorFlow's profiler, the op events of its trace
summed by op type, by site (an op's name without layer and copy numbers) and by op.

    .venv/bin/python benchmarks/op_profile.py                              # small, ~1 minute
    .venv/bin/python benchmarks/op_profile.py --precision=mixed_bfloat16
    .venv/bin/python benchmarks/op_profile.py --size=base --profile_steps=2   # ~2 minutes

TensorFlow runs independent ops of a step side by side (its inter-op thread pool); here it
runs them one at a time (one inter-op thread, each op still using every core), so the ops'
times add up to the step and an op's share of the total is its share of the step. The
'Step' line gives the step's time so, unprofiled and profiled. Where step_profile.py times
parts of the step by leaving them out, this names the kernels: what to fuse or rewrite next.
CPU only: it reads the host's op events, and a GPU's kernels run elsewhere (there, use
step_profile.py or TensorBoard's profile plugin).

Results: benchmarks/results/op_profile_<size>_<precision>.{json,md} (or --op_results_name,
or --results_name).
"""

import collections
import glob
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import model_step  # noqa: E402  (its batch, shapes and step)

from electra_tf import choices  # noqa: E402
flags.DEFINE_enum("size", "small", choices.MODEL_SIZES, "Model size.")
flags.DEFINE_integer("profile_steps", 5, "Steps traced by the profiler (after 3 warm-up "
                     "steps); the figures are per step.")
flags.DEFINE_integer("top", 40, "Ops listed (the op types are all listed).")
flags.DEFINE_string("op_results_name", None, "benchmarks/results/<name>.{json,md}; "
                    "default op_profile_<size>_<precision>.")
flags.DEFINE_string("op_results_dir", None, "Where the results go (default "
                    "benchmarks/results).")
FLAGS = flags.FLAGS

WARMUP_STEPS = 3
_OP_EVENT = re.compile(r"[^:]+:_?[A-Z][A-Za-z0-9_]*")  # 'op_name:OpType'


def op_events(logdir: str) -> list[tuple[str, float]]:
    """(name, seconds) of every TensorFlow op event in the profile under `logdir`: the host
    plane's events named 'op_name:OpType'."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
    events = []
    for path in paths:
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:"):
                continue
            names = {k: m.name for k, m in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    name = names.get(event.metadata_id, "")
                    if _OP_EVENT.fullmatch(name):
                        events.append((name, event.duration_ps * 1e-12))
    return events


def main(argv):
    del argv
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    batch = model_step.make_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions,
                                  FLAGS.seed)
    if tf.config.list_physical_devices("GPU"):
        print("error: op_profile.py sums the host's op events and would miss a GPU's kernels; "
              "run it on a CPU (CUDA_VISIBLE_DEVICES=) or use step_profile.py on a GPU",
              file=sys.stderr)
        return 1
    step, facts = model_step.build_ours(batch, FLAGS.size, jit_compile=False)
    for i in range(WARMUP_STEPS):
        step(i).numpy()
    start = time.perf_counter()
    for i in range(FLAGS.profile_steps):
        step(WARMUP_STEPS + i).numpy()
    unprofiled = (time.perf_counter() - start) / FLAGS.profile_steps
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for i in range(FLAGS.profile_steps):
            step(WARMUP_STEPS + FLAGS.profile_steps + i).numpy()
        profiled = (time.perf_counter() - start) / FLAGS.profile_steps
        tf.profiler.experimental.stop()
        events = op_events(logdir)

    by_type, by_site, by_op, count = (collections.Counter(), collections.Counter(),
                                      collections.Counter(), collections.Counter())
    for name, seconds in events:
        op_type = name.rsplit(":", 1)[1]
        by_type[op_type] += seconds / FLAGS.profile_steps
        by_site[common.site(name)] += seconds / FLAGS.profile_steps
        by_op[name] += seconds / FLAGS.profile_steps
        count[op_type] += 1
    total = sum(by_type.values())

    def rows(counter, limit=None):
        return [[name, f"{s * 1e3:,.1f}", f"{s / total:.1%}"]
                for name, s in counter.most_common(limit)]

    type_rows = [row + [f"{count[row[0]] // FLAGS.profile_steps:,}"]
                 for row in rows(by_type)]
    body = (
        f"ELECTRA-{FLAGS.size.capitalize()} shapes, batch {FLAGS.batch_size} x seq "
        f"{FLAGS.seq_length}, {FLAGS.max_predictions} masked slots, {FLAGS.precision}, "
        f"tf.function without XLA, on {facts['device']}; one inter-op thread; "
        f"{FLAGS.profile_steps} profiled steps after {WARMUP_STEPS} warm-up steps.\n\n"
        f"Step: {unprofiled * 1e3:,.0f} ms unprofiled, {profiled * 1e3:,.0f} ms profiled; "
        f"its ops' events add up to {total * 1e3:,.0f} ms per step.\n\n"
        "By op type (ms per step, share of the ops' total, ops per step):\n\n"
        + common.markdown_table(["op type", "ms/step", "share", "ops/step"], type_rows)
        + f"\n\nThe {FLAGS.top} costliest sites (an op's name with its layer and copy numbers "
        "left out, so that one row sums, e.g., a dense layer's matmul over all layers):\n\n"
        + common.markdown_table(["site", "ms/step", "share"], rows(by_site, FLAGS.top))
        + f"\n\nThe {FLAGS.top} costliest ops:\n\n"
        + common.markdown_table(["op", "ms/step", "share"], rows(by_op, FLAGS.top)) + "\n")
    name = FLAGS.op_results_name or (  # (--results_name: model_step's flag, given)
        FLAGS.results_name if FLAGS["results_name"].present
        else f"op_profile_{FLAGS.size}_{FLAGS.precision}")
    record = {"title": f"The train step's time by TensorFlow op ({FLAGS.size}, "
                       f"{FLAGS.precision}, {facts['device']})",
              "run": common.run_info(),
              "settings": {"size": FLAGS.size, "batch_size": FLAGS.batch_size,
                           "seq_length": FLAGS.seq_length,
                           "max_predictions": FLAGS.max_predictions,
                           "precision": FLAGS.precision, "profile_steps": FLAGS.profile_steps,
                           "inter_op_threads": 1},
              "seconds_per_step": {"unprofiled": unprofiled, "profiled": profiled,
                                   "ops_total": total},
              "by_op_type": dict(by_type.most_common()),
              "top_sites": dict(by_site.most_common(FLAGS.top)),
              "top_ops": dict(by_op.most_common(FLAGS.top))}
    paths = common.write_results(name, record, body,
                                 FLAGS.op_results_dir or common.RESULTS_DIR)
    print(body)
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    common.run(main)
