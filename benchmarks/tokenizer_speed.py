"""Tokenizer throughput: ours (tensorflow-text WordPiece + BERT's normalisation as TF ops)
against transformers' BertTokenizer (the slow, pure-Python reference whose ids ours equals)
and BertTokenizerFast (the Rust one), on the same lines, in the same process.

    .venv/bin/python benchmarks/tokenizer_speed.py              # about 3 minutes

English: the embedded Austen corpus (data/corpus, BERT uncased vocab); Chinese: the review
fixture (tests/fixtures/zh_reviews.tsv, BERT Chinese vocab). Ours encodes the lines in
batches (`Tokenizer.encode_flat`, one call per --batch_size lines up to 16,384), the
references one call per batch too (`tokenizer(lines, add_special_tokens=False)`); each
timed run makes whole passes over the lines until it has lasted --min_seconds. Every
implementation must give the same ids on every line (checked), so the figures compare equal
work. One thread each (TensorFlow intra/inter-op and RAYON_NUM_THREADS=1), median of
--repeats runs.
Results: benchmarks/results/tokenizer_speed.{json,md} (or --results_name).
"""

import csv
import glob
import gzip
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the fast tokenizer's batch parallelism
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402

flags.DEFINE_integer("english_lines", 20000, "Non-empty Austen lines to tokenize.",
                     lower_bound=1)
flags.DEFINE_integer("batch_size", 1000, "Lines per call.", lower_bound=1)
flags.DEFINE_integer("repeats", 3, "Timed runs per implementation (median reported).",
                     lower_bound=1)
flags.DEFINE_float("min_seconds", 3.0, "Each timed run lasts at least this long.",
                   lower_bound=0.0)
flags.DEFINE_string("results_name", "tokenizer_speed", "benchmarks/results/<name>.{json,md}.")
FLAGS = flags.FLAGS

ZH_REVIEWS = os.path.join(common.REPO, "tests", "fixtures", "zh_reviews.tsv")
ZH_VOCAB = os.path.join(common.REPO, "data", "vocab", "bert_chinese.txt")


def english_lines(limit: int) -> list[str]:
    lines = []
    for path in sorted(glob.glob(os.path.join(common.REPO, "data", "corpus", "*.txt.gz"))):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines += [line.strip() for line in f if line.strip()]
    return lines[:limit]


def chinese_lines() -> list[str]:
    with open(ZH_REVIEWS, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    text = rows[0].index("text") if "text" in rows[0] else -1
    return [row[text] for row in rows[1:] if row and row[text].strip()]


def time_it(encode, lines: list[str]) -> dict:
    """Median seconds per pass over every line (in batches; each run makes passes until it
    has lasted --min_seconds), and the ids of a pass."""
    batches = [lines[i:i + FLAGS.batch_size] for i in range(0, len(lines), FLAGS.batch_size)]
    encode(batches[0])  # warm up (graph building, caches)
    runs = []
    for _ in range(FLAGS.repeats):
        def measure():
            start, passes = time.perf_counter(), 0
            while passes == 0 or time.perf_counter() - start < FLAGS.min_seconds:
                ids = [row for batch in batches for row in encode(batch)]
                passes += 1
            return {"seconds": (time.perf_counter() - start) / passes, "ids": ids}
        runs.append(common.measure_quietly(measure))
    seconds = statistics.median(r["seconds"] for r in runs)
    return {"seconds": seconds, "runs_s": [r["seconds"] for r in runs],
            "ids": runs[-1]["ids"],
            "other_cores_during": max(r["other_cores_during"] for r in runs)}


def main(argv):
    del argv
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import transformers

    from electra_tf.tokenization import Tokenizer

    corpora = {"English (Austen, uncased)": (english_lines(FLAGS.english_lines),
                                             common.AUSTEN_VOCAB, True),
               "Chinese (reviews)": (chinese_lines(), ZH_VOCAB, True)}
    rows, record_rows = [], []
    for corpus, (lines, vocab, lower) in corpora.items():
        ours = Tokenizer(vocab, lower_case=lower)
        slow = transformers.BertTokenizer(vocab, do_lower_case=lower)
        fast = transformers.BertTokenizerFast(vocab, do_lower_case=lower)
        implementations = {
            "ours (TF ops)": ours.encode,
            "transformers BertTokenizer": lambda b, t=slow: t(
                b, add_special_tokens=False)["input_ids"],
            "transformers BertTokenizerFast": lambda b, t=fast: t(
                b, add_special_tokens=False)["input_ids"],
        }
        results = {}
        for name, encode in implementations.items():
            print(f"{corpus}: {name} ...", flush=True)
            results[name] = time_it(encode, lines)
        reference_ids = results["transformers BertTokenizer"]["ids"]
        tokens = sum(len(ids) for ids in reference_ids)
        for name, result in results.items():
            mismatched = sum(a != b for a, b in zip(result.pop("ids"), reference_ids))
            if mismatched:
                raise SystemExit(f"error: {name} gives different ids from BertTokenizer on "
                                 f"{mismatched} of {len(lines)} {corpus} lines")
            per_s = len(lines) / result["seconds"]
            ratio = results["ours (TF ops)"]["seconds"] / result["seconds"]
            record_rows.append({"corpus": corpus, "implementation": name, "lines": len(lines),
                                "tokens": tokens, "lines_per_s": per_s,
                                "tokens_per_s": tokens / result["seconds"],
                                "ours_speedup": 1 / ratio, **result})
            rows.append([corpus, name, f"{len(lines):,}", f"{tokens:,}", f"{per_s:,.0f}",
                         f"{tokens / result['seconds']:,.0f}",
                         ", ".join(f"{s:.3g}" for s in result["runs_s"]),
                         "-" if name.startswith("ours") else f"{1 / ratio:.1f}x",
                         f"{result['other_cores_during']:.2f}"])
    body = common.markdown_table(
        ["corpus", "implementation", "lines", "tokens", "lines/s", "tokens/s", "runs (s per pass)",
         "ours is faster by", "other processes (cores)"], rows)
    body += (f"\n\n- One thread each; batches of {FLAGS.batch_size} lines per call; median of "
             f"{FLAGS.repeats} runs of at least {FLAGS.min_seconds:g} s (whole passes over the "
             "lines) after a warm-up batch. Every implementation gave the same "
             "ids as BertTokenizer on every line (checked in the run). transformers "
             f"{transformers.__version__}.\n"
             "- 'other processes' is the CPU other programs on this shared machine used "
             "during the timed runs (max).\n")
    record = {"title": "Tokenizer throughput: ours vs transformers' BertTokenizer (slow and "
                       "fast)", "run": common.run_info(), "rows": record_rows}
    for path in common.write_results(FLAGS.results_name, record, body):
        print("wrote", path)
    print(body)


if __name__ == "__main__":
    common.run(main)
