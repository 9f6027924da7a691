"""Memory and time of ELECTRA's QA head at inference: the beam's end logits built one start
at a time (`electra_tf.finetune.models._EndLogits`) against all the beam's starts at once
(the official code's [B, K, L, 512] hidden layer), on the same weights and windows.

    .venv/bin/python benchmarks/qa_head_memory.py          # about 5 minutes on 2 cores

Each way runs in a process of its own: ELECTRA-Small's shape with random weights (memory
and time do not depend on them), beam 20, `--windows` windows of `--seq_length` tokens (a
serving request's windows of one long context, or a fine-tuning prediction batch), the
model called as `_predict` and the serving export call it (a tf.function, no XLA). Memory
is the process's peak resident size after the windows' call less its peak after a call on
one window (the weights, TensorFlow and the one-window call itself are in both); time is
common.seconds_per_call's median. The two ways' outputs are checked equal.
Results: benchmarks/results/qa_head_memory.{json,md}.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

WAYS = ("at_once", "one_start_at_a_time")

from electra_tf import choices  # noqa: E402
flags.DEFINE_enum("way", None, WAYS, "Internal: measure one way in this process.")
flags.DEFINE_string("output", None, "Internal: where the one-way process writes.")
flags.DEFINE_enum("size", "small", choices.MODEL_SIZES, "Model size.")
flags.DEFINE_integer("windows", 16, "Windows (examples) in the measured call.",
                     lower_bound=1)
flags.DEFINE_integer("seq_length", 512, "Tokens per window.")
flags.DEFINE_integer("beam_size", 20, "The head's beam.")
flags.DEFINE_float("seconds", 10.0, "Timed seconds per repeat.")
common.define_results_name("qa_head_memory")
FLAGS = flags.FLAGS


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _at_once(layer):
    """The official formula: every start's [B, L, 512] hidden layer at once."""
    import tensorflow as tf

    from electra_tf.modeling.layers import gelu

    def call(sequence, starts):
        kernel, h = layer.hidden.kernel, layer.hidden_size
        hidden = (tf.einsum("bkh,hd->bkd", starts, kernel[:h])[:, :, None]
                  + tf.einsum("blh,hd->bld", sequence, kernel[h:])[:, None]
                  + layer.hidden.bias)
        return layer.out(gelu(hidden))[..., 0]
    return call


def measure_one(way: str, output: str):
    import keras
    import numpy as np
    import tensorflow as tf

    from electra_tf.finetune.models import TaskModel
    from electra_tf.modeling.config import encoder_config

    keras.utils.set_random_seed(0)
    config = encoder_config(FLAGS.size, vocab_size=30522)
    model = TaskModel(config, "span", answerability=True, beam_size=FLAGS.beam_size)
    if way == "at_once":
        model.end_logits.call = _at_once(model.end_logits)
    rng = np.random.default_rng(0)
    n, length = FLAGS.windows, FLAGS.seq_length
    question = 24
    features = {"input_ids": rng.integers(1000, 30000, (n, length)).astype(np.int32),
                "input_mask": np.ones((n, length), np.int32),
                "segment_ids": (np.arange(length)[None] >= question).repeat(n, 0)
                .astype(np.int32)}

    @tf.function(reduce_retracing=True)
    def forward(batch):
        return model(batch, training=False)

    forward({k: v[:1] for k, v in features.items()})
    one_window = _peak_mb()
    outputs = forward(features)
    windows = _peak_mb()
    seconds = common.seconds_per_call(lambda: forward(features), FLAGS.seconds,
                                      label=way)
    np.savez(output + ".npz", **{k: v.numpy() for k, v in outputs.items()})
    with open(output, "w") as f:
        json.dump({"peak_mb_one_window": one_window, "peak_mb_windows": windows,
                   "extra_mb": windows - one_window, "seconds_per_call": seconds}, f)


def main(_):
    if FLAGS.way:
        measure_one(FLAGS.way, FLAGS.output)
        return
    import numpy as np

    results, outputs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for way in WAYS:
            path = os.path.join(tmp, way + ".json")
            subprocess.run([sys.executable, os.path.abspath(__file__), f"--way={way}",
                            f"--output={path}", f"--size={FLAGS.size}",
                            f"--windows={FLAGS.windows}", f"--seq_length={FLAGS.seq_length}",
                            f"--beam_size={FLAGS.beam_size}", f"--seconds={FLAGS.seconds}"],
                           check=True)
            with open(path) as f:
                results[way] = json.load(f)
            with np.load(path + ".npz") as saved:
                outputs[way] = dict(saved)
    differences = {k: float(np.abs(outputs["at_once"][k].astype(np.float64)
                                   - outputs["one_start_at_a_time"][k]).max())
                   for k in outputs["at_once"]}
    same_indices = all(np.array_equal(outputs["at_once"][k], outputs["one_start_at_a_time"][k])
                       for k in ("start_top_index", "end_top_index"))
    if not same_indices or max(differences.values()) > 1e-3:
        raise SystemExit(f"the two ways differ: {differences}")
    old, new = results["at_once"], results["one_start_at_a_time"]
    record = {"title": "ELECTRA's QA head at inference: the beam one start at a time",
              "run": common.run_info(), "size": FLAGS.size, "windows": FLAGS.windows,
              "seq_length": FLAGS.seq_length, "beam_size": FLAGS.beam_size,
              "ways": results, "max_abs_difference": differences,
              "memory_ratio": new["extra_mb"] / old["extra_mb"],
              "time_ratio": new["seconds_per_call"] / old["seconds_per_call"]}
    rows = [[way, f"{r['extra_mb']:,.0f}", f"{1e3 * r['seconds_per_call']:,.0f}"]
            for way, r in results.items()]
    body = (f"ELECTRA-{FLAGS.size.capitalize()}'s shape, {FLAGS.windows} windows of "
            f"{FLAGS.seq_length} tokens, beam {FLAGS.beam_size}, one call of the task model "
            "(`training=False`, a tf.function without XLA).\n\n"
            + common.markdown_table(["end logits", "peak memory over one window's (MB)",
                                     "ms per call"], rows)
            + f"\n\nOne start at a time: {record['memory_ratio']:.2f}x the memory and "
            f"{record['time_ratio']:.2f}x the time of all starts at once; outputs equal "
            f"(largest log-probability difference {max(differences.values()):.1e}, "
            "the same indices).\n")
    print(body)
    common.write_results(FLAGS.results_name, record, body)


if __name__ == "__main__":
    common.run(main)
