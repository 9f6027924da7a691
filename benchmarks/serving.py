"""Serving latency and throughput of an exported discriminator on CPU: the raw-string
signature (tokenization inside the graph) next to the token-id signature on the same
sentences, at batch 1 and 32, so the cost of in-graph tokenization can be read off.

    .venv/bin/python benchmarks/serving.py            # a few minutes on 2 cores

The model is ELECTRA-Small's shape (random weights: speed does not depend on them),
exported with scripts/export_saved_model.py's code and loaded back with
tf.saved_model.load, as a Python client or TF Serving would run it. The sentences are real
lines of the Austen corpus (about 30 words). Each figure: the median and 99th percentile of
per-call latency over the timed calls after a warm-up; throughput = examples / total time.
Results: benchmarks/results/serving.{json,md}.
"""

import glob
import gzip
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

from electra_tf import choices  # noqa: E402
flags.DEFINE_list("batch_sizes", ["1", "32"], "Batch sizes to time.")
flags.DEFINE_integer("calls", 300, "Timed calls at batch 1 (fewer for larger batches, at "
                     "least 20).", lower_bound=20)
flags.DEFINE_enum("size", "small", choices.MODEL_SIZES, "Model size.")
common.define_results_name("serving")
FLAGS = flags.FLAGS


def sentences(count: int) -> list[str]:
    lines = []
    for path in sorted(glob.glob(os.path.join(common.REPO, "data", "corpus", "*.txt.gz"))):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines += [line.strip() for line in f if 20 <= len(line.split()) <= 40]
    return lines[:count]


def time_calls(function, calls: int) -> dict:
    for _ in range(5):
        function()
    latencies = []
    start = time.perf_counter()
    for _ in range(calls):
        t = time.perf_counter()
        function()
        latencies.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    latencies.sort()
    return {"p50_ms": 1e3 * statistics.median(latencies),
            "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "calls": calls, "seconds": total}


def main(argv):
    del argv
    batch_sizes = common.positive_integers("batch_sizes", FLAGS.batch_sizes)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the SavedModel's tokenizer ops)

    from electra_tf.export import converters, saved_model
    from electra_tf.modeling.config import GENERATOR_FRACTIONS, encoder_config, generator_config
    from electra_tf.training.checkpoints import load_pretrainer

    vocab = os.path.join(common.REPO, "data", "vocab", "bert_uncased.txt")
    with tempfile.TemporaryDirectory(prefix="serving_") as work:
        disc = encoder_config(FLAGS.size, vocab_size=30522)
        model = converters.new_pretrainer(
            disc, generator_config(disc, GENERATOR_FRACTIONS[FLAGS.size]), "embeddings")
        converters.write_model_dir(model, os.path.join(work, "model"), vocab, True, 128,
                                   source="random")
        path = saved_model.export(os.path.join(work, "model"), os.path.join(work, "export"))
        loaded_model = tf.saved_model.load(path)
        text_fn = loaded_model.signatures["serving_default"]
        ids_fn = loaded_model.signatures["predict_ids"]
        tokenizer = load_pretrainer(os.path.join(work, "model")).tokenizer()

        rows = []
        results = []
        texts_all = sentences(max(batch_sizes))
        for batch_size in batch_sizes:
            texts = texts_all[:batch_size]
            ids = [[tokenizer.cls_id] + t[:126] + [tokenizer.sep_id]
                   for t in tokenizer.encode(texts)]
            length = max(map(len, ids))
            input_ids = tf.constant([r + [0] * (length - len(r)) for r in ids], tf.int32)
            input_mask = tf.constant([[1] * len(r) + [0] * (length - len(r)) for r in ids],
                                     tf.int32)
            segments = tf.zeros_like(input_mask)
            text = tf.constant(texts)
            calls = max(20, FLAGS.calls // batch_size)
            measured = {}
            for name, function in (
                    ("raw text", lambda: text_fn(text=text)["replaced_probability"].numpy()),
                    ("token ids", lambda: ids_fn(input_ids=input_ids, input_mask=input_mask,
                                                 segment_ids=segments)[
                        "replaced_logits"].numpy())):
                m = common.measure_quietly(lambda f=function: time_calls(f, calls))
                m.update(signature=name, batch_size=batch_size, tokens=int(length),
                         examples_per_s=batch_size * m["calls"] / m["seconds"])
                measured[name] = m
                results.append(m)
                # (every attempt was: the last kept)
                busy = m["other_cores_during"] >= common.QUIET_CORES
                rows.append([batch_size, name + (" (busy)" if busy else ""), length,
                             f"{m['p50_ms']:.2f}", f"{m['p99_ms']:.2f}",
                             f"{m['examples_per_s']:.1f}"])
            overhead = measured["raw text"]["p50_ms"] / measured["token ids"]["p50_ms"] - 1
            rows.append([batch_size, "in-graph tokenization adds", "", f"{100 * overhead:+.1f}%",
                         "", ""])
            print(rows[-3:], flush=True)
    body = common.markdown_table(["batch", "signature", "tokens (longest)", "p50 ms", "p99 ms",
                                  "examples/s"], rows)
    body += ("\n\n- ELECTRA-" + FLAGS.size + " shape, exported by electra_tf.export.saved_model "
             "and loaded with tf.saved_model.load in this process; real Austen sentences "
             "(20-40 words); the ids signature gets the same sentences tokenized beforehand "
             "(same lengths), so the difference is the tokenization inside the graph.\n"
             "- Latency per call after 5 warm-up calls; runs during which other processes "
             f"used more than {common.QUIET_CORES} cores are discarded and redone, 4 runs in "
             "all: a row marked (busy) is the last of 4 that all were, not comparable "
             "(serving.json has each row's other_cores_during). p99 is the slowest call "
             "where a row made 100 or fewer.\n")
    common.write_results(FLAGS.results_name, {"title": "Serving latency: raw-string vs token-id "
                                              "signature (CPU)",
                                     "run": common.run_info(), "results": results}, body)
    print(body)


if __name__ == "__main__":
    common.run(main)
