"""Data-builder throughput: our `build_pretraining_data` vs the official pure-Python algorithm.

    .venv/bin/python benchmarks/build_data.py            # all defaults, about 4 minutes
    .venv/bin/python benchmarks/build_data.py --baseline_mb=4 --piece_mb=4 --repeats=3

Corpus: the GCIDE dictionary (Debian package `dict-gcide`), fetched with `apt-get download`
into benchmarks/.cache/ on first use and cleaned to plain text in benchmarks/.cache/gcide.txt:
one dictionary entry per document (blank line between entries), one definition paragraph
per line, dictd wrapping, pronunciations, source tags ([1913 Webster]) and {} markup removed
(benchmarks/corpora.py, shared with the study's corpus).

Reference (measured in the same run): the official builder's algorithm in one process -
transformers' slow (pure-Python) `BertTokenizer` tokenizing every line, our `ExampleBuilder`
packing (the official packing, draw for draw) and `tf.train.Example(...).SerializeToString()`
written with a TFRecordWriter - on a prefix of the corpus (`--baseline_mb`). Two tokenizer
entry points are timed: `BertTokenizer.tokenize` (the public API, with its added-token
splitting) and `basic_tokenizer` + `wordpiece_tokenizer` directly (the official
`FullTokenizer` algorithm); speedups are against the faster of the two.

Ours: `build_pretraining_data` on the same prefix (1 worker), then on the whole corpus with
1 and 2 workers (`--piece_mb` pieces so that 2 workers have work to share), timing the whole
call, worker process start-up included; and on the corpus repeated `--scaling_copies`
times, where start-up weighs less. Worker start-up (spawn, import TensorFlow, build the
tokenizer) is also timed alone with a pool of the same kind. Rates "excluding start-up"
come from the workers' progress reports in the same run (first report to last). The
parity check parses the baseline's and our prefix TFRecords and counts identical examples.
Every timing waits for the shared machine to be quiet and is
redone if other processes used CPU during it (their load is recorded).

Results: benchmarks/results/build_data.{json,md}.
"""

import os
import resource
import shutil
import sys
import time

# Workers are spawned and re-import this file as their main module: keep the top light
# (no TensorFlow or transformers here) so it does not add to their start-up.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
from corpora import prepare_gcide  # noqa: E402

flags.DEFINE_string("vocab_file", os.path.join(common.REPO, "data/vocab/bert_uncased.txt"),
                    "WordPiece vocab.")
flags.DEFINE_integer("max_seq_length", 128, "Example length.")
flags.DEFINE_float("baseline_mb", 4.0, "Prefix of the corpus (MB) the baseline and the "
                   "same-prefix comparison use.")
flags.DEFINE_integer("piece_mb", 4, "piece_bytes for the full-corpus builds, in MiB.")
flags.DEFINE_list("workers", ["1", "2"], "Worker counts for the full-corpus builds.")
flags.DEFINE_integer("scaling_copies", 4, "Also time 1 and 2 workers on the corpus repeated "
                     "this many times (0: skip), where worker start-up weighs less.")
flags.DEFINE_integer("repeats", 3, "Runs of each full-corpus build (the median is reported).",
                     lower_bound=1)
flags.DEFINE_integer("min_corpus_mb", 20, "Fail if the cleaned corpus is smaller than this.")
flags.DEFINE_float("max_wait_quiet_s", 300, "Before each timing, wait up to this long for "
                   "other processes to leave the CPUs idle (the machine is shared).")
common.define_results_name("build_data")
FLAGS = flags.FLAGS

PREFIX_TXT = os.path.join(common.CACHE_DIR, "gcide_prefix.txt")
WORK_DIR = os.path.join(common.CACHE_DIR, "build_data")
SEED = 12345

# ------------------------------------------------------------------ corpus preparation


def write_prefix(path: str, nbytes: int) -> str:
    """The corpus cut at the first document boundary after nbytes."""
    with open(path, "rb") as f:
        data = f.read(nbytes + (1 << 20))
    end = data.find(b"\n\n", nbytes)
    with open(PREFIX_TXT, "wb") as f:
        f.write(data[:end + 1] if end >= 0 else data)
    return PREFIX_TXT


# ------------------------------------------------------------------ baseline


def run_baseline(prefix: str, variant: str, output: str) -> dict:
    """The official builder's loop with transformers' slow tokenizer; one process."""
    import random

    import tensorflow as tf
    from transformers import BertTokenizer

    from electra_tf.data.examples import ExampleBuilder, padded_features

    start = time.perf_counter()
    tokenizer = BertTokenizer(FLAGS.vocab_file, do_lower_case=True)
    if variant == "tokenize":
        def tokenize(line):
            return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
    else:  # the official FullTokenizer: BasicTokenizer then WordPiece on each word
        basic, wordpiece = tokenizer.basic_tokenizer, tokenizer.wordpiece_tokenizer

        def tokenize(line):
            return tokenizer.convert_tokens_to_ids(
                [p for word in basic.tokenize(line) for p in wordpiece.tokenize(word)])
    vocab = tokenizer.vocab
    builder = None
    text_bytes = text_tokens = packed_tokens = examples = 0

    def emit(document, writer):
        nonlocal packed_tokens, examples
        for token_ids, len_a in builder.add_document(document):
            features = padded_features(token_ids, len_a, FLAGS.max_seq_length)
            example = tf.train.Example(features=tf.train.Features(feature={
                name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                for name, values in features.items()}))
            writer.write(example.SerializeToString())
            packed_tokens += len(token_ids)
            examples += 1

    setup = time.perf_counter() - start

    def measure():
        nonlocal builder, text_bytes, text_tokens, packed_tokens, examples
        builder = ExampleBuilder(FLAGS.max_seq_length, vocab["[CLS]"], vocab["[SEP]"],
                                 random.Random(f"{SEED}:0"))
        text_bytes = text_tokens = packed_tokens = examples = 0
        cpu0 = time.process_time()
        start = time.perf_counter()
        with tf.io.TFRecordWriter(output) as writer, open(prefix, "rb") as f:
            document = []
            for raw in f:
                text_bytes += len(raw.rstrip(b"\r\n"))
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    if document:
                        emit(document, writer)
                    document = []
                    continue
                ids = tokenize(line)
                text_tokens += len(ids)
                document.append(ids)
            if document:
                emit(document, writer)
        seconds = time.perf_counter() - start
        return {"variant": variant, "seconds": seconds,
                "cpu_seconds": time.process_time() - cpu0, "setup_seconds": setup,
                "text_bytes": text_bytes, "text_tokens": text_tokens,
                "packed_tokens": packed_tokens, "num_examples": examples,
                "mb_per_s": text_bytes / seconds / 1e6,
                "packed_tokens_per_s": packed_tokens / seconds,
                "text_tokens_per_s": text_tokens / seconds}

    return common.measure_quietly(measure, FLAGS.max_wait_quiet_s)


# ------------------------------------------------------------------ ours


def run_ours(path: str, workers: int, piece_bytes: int, output_dir: str) -> dict:
    """Times one build_pretraining_data call (on a quiet machine)."""
    from electra_tf.data import writer

    def measure():
        shutil.rmtree(output_dir, ignore_errors=True)  # else it would resume (nothing to do)
        events = []  # (time, cumulative text bytes) per progress report from the workers

        class RecordingProgress(writer._Progress):
            def update(self, input_bytes, text_bytes, force=False):
                super().update(input_bytes, text_bytes, force)
                if text_bytes:
                    events.append((time.perf_counter(), self.text))

        original = writer._Progress
        writer._Progress = RecordingProgress
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        try:
            metadata = writer.build_pretraining_data(
                path, FLAGS.vocab_file, output_dir, max_seq_length=FLAGS.max_seq_length,
                num_workers=workers, piece_bytes=piece_bytes, seed=SEED, show_progress=False,
                log=lambda *_: None)
        finally:
            writer._Progress = original
        seconds = time.perf_counter() - start
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        text_bytes = metadata["text_bytes"]
        result = {
            "workers": workers, "seconds": seconds, "text_bytes": text_bytes,
            "packed_tokens": metadata["num_tokens"], "num_examples": metadata["num_examples"],
            "num_shards": len(metadata["shards"]),
            "main_cpu_seconds": (self1.ru_utime + self1.ru_stime)
            - (self0.ru_utime + self0.ru_stime),
            "worker_process_cpu_seconds": (children1.ru_utime + children1.ru_stime)
            - (children0.ru_utime + children0.ru_stime),
            "mb_per_s": text_bytes / seconds / 1e6,
            "packed_tokens_per_s": metadata["num_tokens"] / seconds}
        # A second view of the rate without start-up, from the same run: first progress
        # report (every worker running by then, give or take) to the last one.
        if len(events) >= 3:
            (t_first, bytes_first), (t_last, bytes_last) = events[0], events[-1]
            result["progress_window_mb_per_s"] = (bytes_last - bytes_first) / (
                t_last - t_first) / 1e6
            result["first_progress_report_s"] = t_first - start
        return result

    return common.measure_quietly(measure, FLAGS.max_wait_quiet_s)


_READY_AT = None


def _probe_init(vocab_file):
    # What a builder worker does before its first shard: import the library (TensorFlow)
    # and build the tokenizer.
    from electra_tf import tokenization
    from electra_tf.data import writer  # noqa: F401
    tokenization.Tokenizer(vocab_file)
    global _READY_AT
    _READY_AT = time.time()


def _probe_task(_):
    time.sleep(0.2)  # long enough that every worker gets a task
    return os.getpid(), _READY_AT


def measure_worker_startup(workers: int) -> dict:
    """Seconds from creating a spawn pool until every worker is ready to build a shard."""
    import multiprocessing

    def measure():
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        context = multiprocessing.get_context("spawn")  # what the writer uses
        start = time.time()
        pool = context.Pool(workers, initializer=_probe_init, initargs=(FLAGS.vocab_file,))
        ready = {}
        while len(ready) < workers:
            ready.update(pool.map(_probe_task, range(2 * workers), chunksize=1))
        pool.close()
        pool.join()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"workers": workers, "seconds": max(ready.values()) - start,
                "cpu_seconds": (children1.ru_utime + children1.ru_stime)
                - (children0.ru_utime + children0.ru_stime)}

    return common.measure_quietly(measure, FLAGS.max_wait_quiet_s)


def _median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["seconds"])
    chosen = dict(ordered[len(ordered) // 2])
    chosen["all_seconds"] = [round(r["seconds"], 3) for r in runs]
    return chosen


def parity(baseline_file: str, ours_dir: str) -> dict:
    """Counts examples that parse identically in the baseline's and our prefix outputs."""
    import glob

    import tensorflow as tf

    def records(files):
        return [tf.train.Example.FromString(r.numpy())
                for r in tf.data.TFRecordDataset(files)]

    ours = records(sorted(glob.glob(os.path.join(ours_dir, "*.tfrecord"))))
    theirs = records([baseline_file])
    same = sum(a == b for a, b in zip(ours, theirs))
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    return {"baseline_examples": len(theirs), "our_examples": len(ours),
            "identical_examples": same, "first_difference": first}


# ------------------------------------------------------------------ report


def _fmt_rate(x: float) -> str:
    return f"{x:.3f}" if x < 1 else f"{x:.2f}"


def _full_runs(path: str, label: str) -> list[dict]:
    results = []
    for workers in map(int, FLAGS.workers):
        runs = [run_ours(path, workers, FLAGS.piece_mb << 20,
                         os.path.join(WORK_DIR, f"ours_{label}_w{workers}"))
                for _ in range(FLAGS.repeats)]
        r = _median_run(runs)
        r["corpus"] = label
        # Rate without start-up, from the same run: text built between the first and the
        # last progress report the workers sent. The rest of the call is overhead (spawn,
        # TensorFlow import, tokenizer build, first/last partial report intervals).
        r["mb_per_s_excluding_startup"] = r["progress_window_mb_per_s"]
        r["seconds_excluding_startup"] = r["text_bytes"] / r["progress_window_mb_per_s"] / 1e6
        r["overhead_seconds"] = r["seconds"] - r["seconds_excluding_startup"]
        results.append(r)
        print(f"ours, {label}, {workers} worker(s): {r['mb_per_s']:.2f} MB/s total "
              f"({r['mb_per_s_excluding_startup']:.2f} excluding start-up), runs "
              f"{r['all_seconds']} s, worker CPU {r['worker_process_cpu_seconds']:.1f} s, "
              f"main CPU {r['main_cpu_seconds']:.1f} s, other processes "
              f"{r['other_cores_during']:.2f} cores")
    return results


def main(argv):
    del argv
    common.positive_integers("workers", FLAGS.workers)
    os.makedirs(WORK_DIR, exist_ok=True)
    corpus_path = prepare_gcide()
    corpus_bytes = os.path.getsize(corpus_path)
    if corpus_bytes < FLAGS.min_corpus_mb * 1e6:
        print(f"error: {corpus_path} holds {corpus_bytes / 1e6:.1f} MB, less than "
              f"--min_corpus_mb={FLAGS.min_corpus_mb}", file=sys.stderr)
        return 1
    prefix = write_prefix(corpus_path, int(FLAGS.baseline_mb * 1e6))
    print(f"corpus {corpus_path}: {corpus_bytes / 1e6:.1f} MB; "
          f"prefix {os.path.getsize(prefix) / 1e6:.2f} MB")

    import tensorflow as tf  # noqa: F401 (import cost kept out of the timings below)

    baselines = []
    for variant in ("tokenize", "basic_wordpiece"):
        out = os.path.join(WORK_DIR, f"baseline_{variant}.tfrecord")
        baselines.append(run_baseline(prefix, variant, out))
        b = baselines[-1]
        print(f"baseline ({variant}): {b['mb_per_s']:.3f} MB/s, "
              f"{b['packed_tokens_per_s']:,.0f} packed tokens/s, "
              f"{b['text_tokens_per_s']:,.0f} text tokens/s ({b['seconds']:.1f} s)")
    reference = max(baselines, key=lambda b: b["mb_per_s"])
    ref_rate = reference["mb_per_s"]

    prefix_dir = os.path.join(WORK_DIR, "ours_prefix")
    ours_prefix = _median_run([run_ours(prefix, 1, 1 << 40, prefix_dir)
                               for _ in range(FLAGS.repeats)])
    print(f"ours, prefix, 1 worker: {ours_prefix['mb_per_s']:.2f} MB/s "
          f"({ours_prefix['seconds']:.2f} s)")
    check = parity(os.path.join(WORK_DIR, f"baseline_{reference['variant']}.tfrecord"),
                   prefix_dir)
    print(f"parity: {check['identical_examples']} of {check['baseline_examples']} baseline "
          f"examples identical (ours wrote {check['our_examples']})")

    startup = {}
    for workers in (w for w in map(int, FLAGS.workers) if w > 1):
        startup[workers] = _median_run([measure_worker_startup(workers)
                                        for _ in range(FLAGS.repeats)])
        print(f"start-up of {workers} spawned workers: {startup[workers]['seconds']:.2f} s "
              f"(runs {startup[workers]['all_seconds']})")
    full = _full_runs(corpus_path, "full")
    scaled = []
    if FLAGS.scaling_copies > 1:
        scaled_path = os.path.join(common.CACHE_DIR, f"gcide_x{FLAGS.scaling_copies}.txt")
        expected = FLAGS.scaling_copies * (corpus_bytes + 1)
        if not os.path.exists(scaled_path) or os.path.getsize(scaled_path) != expected:
            with open(corpus_path, "rb") as f:
                text = f.read()
            with open(scaled_path, "wb") as f:
                for _ in range(FLAGS.scaling_copies):
                    f.write(text + b"\n")
        scaled = _full_runs(scaled_path, f"x{FLAGS.scaling_copies}")

    rows = []
    for b in baselines:
        rows.append([f"baseline `{b['variant']}`", "prefix", 1, f"{b['seconds']:.1f}",
                     _fmt_rate(b["mb_per_s"]), _fmt_rate(b["mb_per_s"]),
                     f"{b['packed_tokens_per_s']:,.0f}", f"{b['mb_per_s'] / ref_rate:.2f}x",
                     "-", f"{b['other_cores_during']:.2f}"])
    rows.append(["ours", "prefix", 1, f"{ours_prefix['seconds']:.2f}",
                 _fmt_rate(ours_prefix["mb_per_s"]), _fmt_rate(ours_prefix["mb_per_s"]),
                 f"{ours_prefix['packed_tokens_per_s']:,.0f}",
                 f"{ours_prefix['mb_per_s'] / ref_rate:.1f}x", "-",
                 f"{ours_prefix['other_cores_during']:.2f}"])
    for group in (full, scaled):
        one = next((r for r in group if r["workers"] == 1), None)
        for r in group:
            w = r["workers"]
            tokens_per_byte = r["packed_tokens"] / r["text_bytes"]
            views = [("ours, whole call", "mb_per_s", "seconds"),
                     ("ours, excluding start-up", "mb_per_s_excluding_startup",
                      "seconds_excluding_startup")]
            for label, key, seconds_key in views:
                rate = r[key]
                scaling = "-"
                if one is not None and w > 1:
                    scaling = f"{rate / one[key]:.2f}x"
                rows.append([label, f"{r['corpus']} ({r['text_bytes'] / 1e6:.0f} MB)", w,
                             f"{r[seconds_key]:.2f}", _fmt_rate(rate), _fmt_rate(rate / w),
                             f"{tokens_per_byte * rate * 1e6 / w:,.0f}",
                             f"{rate / w / ref_rate:.1f}x", scaling,
                             f"{r['other_cores_during']:.2f}"])
    table = common.markdown_table(
        ["run", "text", "workers", "seconds", "MB/s total", "MB/s per worker",
         "packed tokens/s per worker", "speedup per worker vs reference",
         "scaling vs 1 worker", "other processes (cores)"], rows)

    notes = [
        f"Corpus: {corpus_bytes / 1e6:.1f} MB of cleaned GCIDE text "
        f"(`{os.path.relpath(corpus_path, common.REPO)}`, Debian dict-gcide); prefix: first "
        f"{os.path.getsize(prefix) / 1e6:.2f} MB (cut at an entry boundary)"
        + (f"; x{FLAGS.scaling_copies}: the corpus repeated {FLAGS.scaling_copies} times, "
           "to see scaling with start-up a smaller share" if scaled else "") + ".",
        f"Reference: baseline `{reference['variant']}` = {ref_rate:.3f} MB/s, "
        f"{reference['packed_tokens_per_s']:,.0f} packed tokens/s, "
        f"{reference['text_tokens_per_s']:,.0f} WordPiece tokens/s of text "
        "(REFERENCE.md: official builder about 0.65 MB/s, 190k tokens/s).",
        "Packed tokens: tokens in the written examples, [CLS]/[SEP] included, truncated "
        "tokens excluded (the builders' `num_tokens`).",
        f"Parity on the prefix: {check['identical_examples']} of "
        f"{check['baseline_examples']} baseline examples identical to ours "
        f"(ours wrote {check['our_examples']}).",
    ]
    notes.append(
        "'excluding start-up': text built between the workers' first and last progress "
        "report (they report every 0.5 s) over that time, in the same run; 'seconds' is "
        "then text / that rate, and the rest of the call is overhead: " + ", ".join(
            f"{r['corpus']} {r['workers']}w {r['overhead_seconds']:.2f} s" for r in full + scaled)
        + ".")
    for w, st in startup.items():
        note = (f"Start-up of a pool of {w} spawned workers alone (spawn, import TensorFlow, "
                f"build the tokenizer; timed separately): {st['seconds']:.2f} s wall, "
                f"{st['cpu_seconds']:.1f} CPU-s (runs {st['all_seconds']}).")
        group = scaled or full
        one = next((x for x in group if x["workers"] == 1), None)
        many = next((x for x in group if x["workers"] == w), None)
        if one and many and many["mb_per_s_excluding_startup"] > one[
                "mb_per_s_excluding_startup"]:
            # T(W) = overhead + W / rate for each; they cross at W*.
            breakeven = (many["overhead_seconds"] - one["overhead_seconds"]) / (
                1 / one["mb_per_s_excluding_startup"] - 1 / many["mb_per_s_excluding_startup"])
            note += (f" From the {many['corpus']} runs' rates and overheads, {w} workers "
                     f"beat 1 on corpora above about {max(breakeven, 0):.0f} MB.")
        notes.append(note)
    notes.append(
        f"The machine has {os.cpu_count()} cores; with 2 workers the main process also runs "
        "but only polls the progress queue (main CPU "
        + ", ".join(f"{r['main_cpu_seconds']:.1f} s" for r in full + scaled if r["workers"] > 1)
        + "). 'other processes': CPU that other programs on this shared machine used during "
        "the timing (a run with more than 0.25 cores is discarded and redone, up to 4 times).")
    for r in full + scaled:
        notes.append(f"{r['corpus']}, {r['workers']} worker(s): runs {r['all_seconds']} s "
                     f"(median shown), {r['num_shards']} shards from {FLAGS.piece_mb} MiB "
                     f"pieces, worker-process CPU {r['worker_process_cpu_seconds']:.1f} s, "
                     f"main-process CPU {r['main_cpu_seconds']:.1f} s.")

    record = {
        "title": "Data builder throughput (GCIDE)",
        "run": common.run_info(),
        "corpus": {"path": os.path.relpath(corpus_path, common.REPO), "bytes": corpus_bytes,
                   "source": "Debian dict-gcide 0.48.5 (usr/share/dictd/gcide.dict.dz), "
                             "markup stripped",
                   "prefix_bytes": os.path.getsize(prefix),
                   "scaling_copies": FLAGS.scaling_copies},
        "settings": {"max_seq_length": FLAGS.max_seq_length, "piece_mb": FLAGS.piece_mb,
                     "repeats": FLAGS.repeats, "seed": SEED},
        "reference": {"variant": reference["variant"], "mb_per_s": ref_rate,
                      "packed_tokens_per_s": reference["packed_tokens_per_s"]},
        "baselines": baselines,
        "ours_prefix": ours_prefix,
        "parity": check,
        "worker_startup": {str(w): s for w, s in startup.items()},
        "ours_full": full,
        "ours_scaling": scaled,
        "speedup_per_worker": {str(r["workers"]): r["mb_per_s"] / r["workers"] / ref_rate
                               for r in full},
        "speedup_per_worker_excluding_startup": {
            str(r["workers"]): r["mb_per_s_excluding_startup"] / r["workers"] / ref_rate
            for r in full},
    }
    body = table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    paths = common.write_results(FLAGS.results_name, record, body)
    print(table)
    print("\n".join(notes))
    print("wrote " + ", ".join(os.path.relpath(p, common.REPO) for p in paths))
    return 0


if __name__ == "__main__":
    common.run(main)
