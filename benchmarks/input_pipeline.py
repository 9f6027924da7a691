"""Input-pipeline throughput: masked examples/s of `pretraining_dataset` at seq 128 and 512.

    .venv/bin/python benchmarks/input_pipeline.py                # about 4 minutes
    .venv/bin/python benchmarks/input_pipeline.py --num_batches=300 --repeats=3

Data: the Austen corpus (data/corpus/*.txt.gz) built with `build_pretraining_data` at
max_seq_length 128 and 512 into benchmarks/.cache/austen_{128,512}/ (reused when complete).

For each length the script times, after `--warmup_batches`, `--num_batches` batches of:
- reference, measured in the same run: a plain parse-only pipeline (TFRecordDataset ->
  repeat -> batch -> parse_example -> prefetch, no shuffling, no masking);
- `pretraining_dataset` with token masking and with whole-word masking (training mode:
  file shuffle, interleave, example shuffle, parse, dynamic masking, prefetch);
- masking alone: `masking.mask_batch` in a tf.function on one batch held in memory, to
  show how much of the pipeline's cost is the masking compute.
Each figure is the median of `--repeats` runs; ratios are against the parse-only pipeline.

Results: benchmarks/results/input_pipeline.{json,md}.
"""

import glob
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

flags.DEFINE_string("vocab_file", os.path.join(common.REPO, "data/vocab/bert_uncased.txt"),
                    "WordPiece vocab.")
flags.DEFINE_string("corpus", os.path.join(common.REPO, "data/corpus/*.txt.gz"),
                    "Text the TFRecords are built from.")
flags.DEFINE_list("seq_lengths", ["128", "512"], "Sequence lengths to measure.")
flags.DEFINE_list("batch_sizes", ["256", "64"], "Batch size for each sequence length.")
flags.DEFINE_integer("warmup_batches", 30, "Batches read before timing starts.")
flags.DEFINE_integer("num_batches", 200, "Batches timed per run (at least).")
flags.DEFINE_float("min_seconds", 3.0, "Each timed run also lasts at least this long, so that "
                   "draining the prefetch buffer does not inflate the rate.")
flags.DEFINE_integer("repeats", 3, "Runs per pipeline (median reported).", lower_bound=1)
flags.DEFINE_float("max_wait_quiet_s", 300, "Before each timing, wait up to this long for "
                   "other processes to leave the CPUs idle (the machine is shared).")
common.define_results_name("input_pipeline")
FLAGS = flags.FLAGS

FEATURES = ("input_ids", "input_mask", "segment_ids")


def build_data(max_seq_length: int) -> str:
    from electra_tf.data import writer
    from electra_tf.errors import UserInputError
    output_dir = os.path.join(common.CACHE_DIR, f"austen_{max_seq_length}")

    def build():
        return writer.build_pretraining_data(
            FLAGS.corpus, FLAGS.vocab_file, output_dir, max_seq_length=max_seq_length,
            num_workers=1, show_progress=False, log=lambda *_: None)

    try:
        metadata = build()
    except UserInputError:  # cached by an older version of the builder: start over
        shutil.rmtree(output_dir)
        metadata = build()
    print(f"data at {max_seq_length}: {metadata['num_examples']:,} examples in "
          f"{len(metadata['shards'])} shards ({output_dir})")
    return output_dir


def parse_only_dataset(files: list[str], batch_size: int, max_seq_length: int):
    import tensorflow as tf
    spec = {n: tf.io.FixedLenFeature([max_seq_length], tf.int64) for n in FEATURES}
    dataset = tf.data.TFRecordDataset(files).repeat().batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda s: tf.io.parse_example(s, spec),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def autotuned(dataset):
    """`dataset` with tf.data's autotuning (its model thread) on, as it is by default:
    pretraining_dataset turns it off (see its options)."""
    import tensorflow as tf
    from absl import logging
    options = tf.data.Options()
    options.autotune.enabled = True
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)  # "Changing the value of option enabled ..."
    try:
        return dataset.with_options(options)
    finally:
        logging.set_verbosity(verbosity)


def time_iterator(make_iterator, batch_size: int) -> dict:
    """Warms up, then times next() calls; returns the run with the median rate."""
    def measure():
        iterator = make_iterator()
        for _ in range(FLAGS.warmup_batches):
            next(iterator)
        start = time.perf_counter()
        batches = 0
        while batches < FLAGS.num_batches or time.perf_counter() - start < FLAGS.min_seconds:
            batch = next(iterator)
            batches += 1
        # Outputs are produced asynchronously; make sure the last one is complete.
        _ = batch["input_ids"].numpy()
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "batches": batches,
                "examples_per_s": batches * batch_size / seconds}

    runs = [common.measure_quietly(measure, FLAGS.max_wait_quiet_s)
            for _ in range(FLAGS.repeats)]
    median = sorted(runs, key=lambda r: r["examples_per_s"])[len(runs) // 2]
    seconds, batches = median["seconds"], median["batches"]
    examples = batches * batch_size
    return {"examples_per_s": examples / seconds, "us_per_example": seconds / examples * 1e6,
            "batches_per_s": batches / seconds, "seconds": seconds, "batches": batches,
            "all_examples_per_s": [round(r["examples_per_s"]) for r in runs],
            "other_cores_during": max(r["other_cores_during"] for r in runs),
            "runs": runs}


def time_masking_alone(files, batch_size: int, max_seq_length: int,
                       whole_word: bool) -> dict:
    """mask_batch on one in-memory batch, compiled with tf.function."""
    import numpy as np
    import tensorflow as tf

    from electra_tf import tokenization
    from electra_tf.data import masking

    batch = next(iter(parse_only_dataset(files, batch_size, max_seq_length)))
    batch = {n: tf.cast(v, tf.int32) for n, v in batch.items()}
    vocab = tokenization.load_vocab(FLAGS.vocab_file)
    ids = {t: i for i, t in enumerate(vocab)}
    table = (tf.constant(np.array([t.startswith("##") for t in vocab])) if whole_word
             else None)
    index = tf.range(batch_size, dtype=tf.int64)

    @tf.function
    def mask(offset):
        # As the pipeline does for a WordPiece vocab: "##" pieces continue a word.
        is_continuation = (tf.gather(table, batch["input_ids"]) if table is not None
                           else None)
        return masking.mask_batch(
            batch, index + offset, seed=0, mask_prob=0.15,
            max_predictions=masking.default_max_predictions(max_seq_length, 0.15),
            cls_id=ids["[CLS]"], sep_id=ids["[SEP]"], mask_id=ids["[MASK]"],
            is_continuation=is_continuation)

    def make_iterator():
        def generate():
            offset = 0
            while True:
                offset += batch_size
                yield mask(tf.constant(offset, tf.int64))
        return generate()

    return time_iterator(make_iterator, batch_size)


def main(argv):
    del argv
    from electra_tf.data.pipeline import pretraining_dataset

    if len(FLAGS.seq_lengths) != len(FLAGS.batch_sizes):
        print("error: --seq_lengths and --batch_sizes need one entry each", file=sys.stderr)
        return 1
    results = []
    for max_seq_length, batch_size in zip(map(int, FLAGS.seq_lengths),
                                          map(int, FLAGS.batch_sizes)):
        data_dir = build_data(max_seq_length)
        files = sorted(glob.glob(os.path.join(data_dir, "*.tfrecord")))
        pattern = os.path.join(data_dir, "*.tfrecord")

        def run(name, make_iterator, kind="pipeline"):
            r = (time_iterator(make_iterator, batch_size) if kind == "pipeline"
                 else make_iterator())
            r.update(name=name, max_seq_length=max_seq_length, batch_size=batch_size)
            results.append(r)
            print(f"L={max_seq_length} B={batch_size} {name}: {r['examples_per_s']:,.0f} "
                  f"examples/s ({r['us_per_example']:.1f} us/example; runs "
                  f"{r['all_examples_per_s']}; other processes "
                  f"{r['other_cores_during']:.2f} cores)")
            return r

        reference = run("parse-only (reference)", lambda: iter(
            parse_only_dataset(files, batch_size, max_seq_length)))
        for whole_word in (False, True):
            label = "whole-word masking" if whole_word else "token masking"
            r = run(f"pretraining_dataset, {label}", lambda: iter(pretraining_dataset(
                pattern, batch_size, max_seq_length, FLAGS.vocab_file, seed=0,
                whole_word_masking=whole_word)))
            r["vs_reference"] = r["examples_per_s"] / reference["examples_per_s"]
            if not whole_word:  # the same pipeline with tf.data's autotuning thread on
                r = run(f"pretraining_dataset, {label}, tf.data autotuning on", lambda: iter(
                    autotuned(pretraining_dataset(
                        pattern, batch_size, max_seq_length, FLAGS.vocab_file, seed=0))))
                r["vs_reference"] = r["examples_per_s"] / reference["examples_per_s"]
            r = run(f"masking alone, {label}", lambda: time_masking_alone(
                files, batch_size, max_seq_length, whole_word), kind="direct")
            r["vs_reference"] = r["examples_per_s"] / reference["examples_per_s"]
        reference["vs_reference"] = 1.0

    rows = [[r["max_seq_length"], r["batch_size"], r["name"], f"{r['examples_per_s']:,.0f}",
             f"{r['us_per_example']:.1f}", f"{r['batches_per_s']:.1f}",
             f"{r['vs_reference']:.2f}x", f"{r['other_cores_during']:.2f}"] for r in results]
    table = common.markdown_table(
        ["seq", "batch", "pipeline", "examples/s", "us/example", "batches/s",
         "vs parse-only", "other processes (cores)"], rows)
    masked_128 = [r for r in results if r["max_seq_length"] == 128
                  and r["name"].startswith("pretraining_dataset")]
    notes = [
        f"Timed at least {FLAGS.num_batches} batches and {FLAGS.min_seconds:g} s after "
        f"{FLAGS.warmup_batches} warm-up batches; median of {FLAGS.repeats} runs; "
        "examples/s = batches x batch size / seconds.",
        "Reference: parse-only pipeline (TFRecordDataset -> repeat -> batch -> "
        "parse_example -> prefetch) on the same files in the same run.",
        "pretraining_dataset runs without tf.data's autotuning thread (its parallel "
        "stages at the parallelism AUTOTUNE starts at, untuned; the prefetch buffer growing "
        "while the consumer waits); "
        "'autotuning on' is the same pipeline with it, as TensorFlow's default and this "
        "pipeline before (the thread keeps a freed iterator waiting for up to a minute).",
        "Masking alone: `masking.mask_batch` in a tf.function on one batch already in memory "
        "(no I/O, no parsing), one batch at a time: the pipeline "
        "runs several batches' masking in parallel (parallel map), so it can be faster than this.",
        f"Data: {os.path.relpath(FLAGS.corpus, common.REPO)} built at each length "
        "(benchmarks/.cache/austen_*).",
        f"'other processes' is the CPU other programs on this shared {os.cpu_count()}-core "
        "machine used during the timed runs (max over the kept runs; a run during which they "
        "used more than 0.25 cores is discarded and redone, up to 4 times).",
    ]
    if masked_128:
        notes.append("Goal >= 20,000 examples/s at seq 128: " + ", ".join(
            f"{r['name'].split(', ', 1)[1]} {r['examples_per_s']:,.0f} "
            f"({'met' if r['examples_per_s'] >= 20000 else 'not met'})" for r in masked_128)
            + ".")
    record = {
        "title": "Input pipeline throughput (masked pre-training batches)",
        "run": common.run_info(),
        "settings": {"warmup_batches": FLAGS.warmup_batches, "num_batches": FLAGS.num_batches,
                     "repeats": FLAGS.repeats, "corpus": FLAGS.corpus,
                     "tf_data_autotune": "off in pretraining_dataset; on in the parse-only "
                                         "reference and the 'autotuning on' rows"},
        "results": results,
    }
    body = table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    paths = common.write_results(FLAGS.results_name, record, body)
    print(table)
    print("\n".join(notes))
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    common.run(main)
