r"""Learns a WordPiece vocab.txt of exactly --vocab_size tokens (BERT's layout) from a corpus.

    python scripts/learn_vocab.py --input='corpus/*.txt.gz' --output=out/vocab.txt \
        --vocab_size=30522

The text is split as our Tokenizer splits it (same --lower_case/--strip_accents), so pass
the same settings to scripts/build_pretraining_data.py. An existing --output is replaced
only with --overwrite, and never when it is one of the --input files.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_string("input", None, "Comma-separated globs or folders of "
                    ".txt/.gz/.bz2/.xz/.jsonl.")
flags.DEFINE_string("output", None, "Where vocab.txt goes (one token per line; local or gs://).")
flags.DEFINE_bool("overwrite", False, "Replace an existing --output (never an --input file).")
flags.DEFINE_integer("vocab_size", None, "Total tokens, special and [unusedN] ones included.")
flags.DEFINE_bool("lower_case", True, "Lower-case the text (uncased vocab).")
flags.DEFINE_bool("strip_accents", None, "Strip accents; defaults to --lower_case.")
flags.DEFINE_integer("num_unused", 99, "[unusedN] tokens after [PAD]; 99 puts [UNK] at id 100.")
flags.DEFINE_integer("min_frequency", 2, "Merge two pieces only if they occur this often.")
flags.DEFINE_integer("max_alphabet", None,
                     "Keep at most this many distinct characters, the most frequent; a word "
                     "holding any other encodes as one [UNK] (default: every character seen).")
flags.DEFINE_integer("max_lines", None, "Read at most this many lines.")
flags.DEFINE_enum("input_format", choices.TEXT, list(choices.INPUT_FORMATS),
                  "text: plain text lines; jsonl: one JSON document per line.")
flags.DEFINE_string("text_field", "text", "JSONL field holding the document text.")
cli.mark_required(["input", "output", "vocab_size"], lists=["input"])


def main(argv):
    del argv
    start = time.time()
    from electra_tf import vocab_learning
    from electra_tf.data import corpus
    from electra_tf.training import signals
    # Before any input is read: a bad --output fails now, not after the training.
    vocab_learning.check_output(FLAGS.output, FLAGS.overwrite, FLAGS.input)
    stats = vocab_learning.CorpusStats()
    lines = vocab_learning.read_lines(FLAGS.input, FLAGS.input_format, FLAGS.text_field,
                                      FLAGS.max_lines, stats)
    try:
        tokens = vocab_learning.learn_vocab(
            lines, FLAGS.vocab_size, lower_case=FLAGS.lower_case,
            strip_accents=FLAGS.strip_accents, num_unused=FLAGS.num_unused,
            min_frequency=FLAGS.min_frequency, max_alphabet=FLAGS.max_alphabet, log=print)
    except KeyboardInterrupt:
        # At once: the trainer's threads (Rust) go on, and the interpreter's exit, with
        # them calling into it, aborts with their panic's backtrace. Nothing is written yet.
        signals.exit_now(signals.INTERRUPTED_LINE, signals.INTERRUPTED_EXIT_CODE)
    except cli.Terminated:
        signals.exit_now(cli.TERMINATED_NOTHING_WRITTEN, cli.TERMINATED_EXIT_CODE)
    vocab_learning.write_vocab(tokens, FLAGS.output, FLAGS.overwrite)
    print(f"wrote {FLAGS.output}: {len(tokens)} tokens learned from {stats.lines} lines "
          f"in {time.time() - start:.1f}s")
    if stats.long_lines:
        print(f"note: {stats.long_lines} lines were longer than {corpus.MAX_LINE_BYTES:,} "
              "bytes and were read up to there")
    if stats.cr_lines:
        print(corpus.cr_lines_note(stats.cr_lines, "as the data builder reads it",
                                   "learn the vocab again"))
    if stats.invalid_utf8_lines or stats.bad_json_lines:
        print(f"note: {stats.invalid_utf8_lines} lines had invalid UTF-8 (replaced), "
              f"{stats.bad_json_lines} JSONL records were malformed (skipped)")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    cli.run(main, handles_sigterm=True, terminated_line=cli.TERMINATED_NOTHING_WRITTEN)
