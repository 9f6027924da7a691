r"""Turns raw text into sharded pre-training TFRecords (official ELECTRA format).

    python scripts/build_pretraining_data.py --input='corpus/*.txt.gz' \
        --vocab_file=data/vocab/bert_uncased.txt --output_dir=out/data --num_workers=8

Rerunning the same command after an interruption builds only the missing shards.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_string("input", None, "Comma-separated globs or folders of "
                    ".txt/.gz/.bz2/.xz/.jsonl.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab file.")
flags.DEFINE_string("output_dir", None, "Where the TFRecords and metadata.json go.")
flags.DEFINE_integer("max_seq_length", 128, "Example length including [CLS] and [SEP]s.")
flags.DEFINE_bool("lower_case", True, "Lower-case the text (uncased vocab).")
flags.DEFINE_bool("strip_accents", None, "Strip accents; defaults to --lower_case.")
flags.DEFINE_integer("num_workers", None, "Worker processes (default: one per core, at most "
                     "one per 32 MB of input, since each takes seconds to start).")
flags.DEFINE_integer("num_shards", None, "Output shards (default: one per input piece).")
flags.DEFINE_integer("seed", 12345, "Seed for the packing randomness.")
flags.DEFINE_enum("input_format", choices.TEXT, list(choices.INPUT_FORMATS),
                  "text: one sentence per line, blank lines between documents; "
                  "jsonl: one JSON document per line.")
flags.DEFINE_string("text_field", "text", "JSONL field holding the document text.")
flags.DEFINE_bool("one_document_per_line", False,
                  "Text files hold one document per line instead of blank-line separated.")
flags.DEFINE_enum("compression", "none", ["none", "gzip"], "TFRecord compression.")
flags.DEFINE_integer("piece_mb", choices.PIECE_BYTES >> 20,
                     "Uncompressed files larger than this are split for parallel reading.")
flags.DEFINE_enum("word_segmenter", "none", list(choices.WORD_SEGMENTERS),
                  "jieba: segment Chinese words and write a word_start feature, so that "
                  "whole-word masking masks Chinese words (needs the zh extra).")
flags.DEFINE_bool("progress", True, "Show a progress bar on stderr.")
cli.mark_required(["input", "vocab_file", "output_dir"], lists=["input"])


def main(argv):
    del argv
    from electra_tf.data import writer
    writer.build_pretraining_data(
        FLAGS.input, FLAGS.vocab_file, FLAGS.output_dir,
        max_seq_length=FLAGS.max_seq_length, lower_case=FLAGS.lower_case,
        strip_accents=FLAGS.strip_accents, num_workers=FLAGS.num_workers,
        num_shards=FLAGS.num_shards, seed=FLAGS.seed, input_format=FLAGS.input_format,
        text_field=FLAGS.text_field, one_document_per_line=FLAGS.one_document_per_line,
        compression=FLAGS.compression, piece_bytes=FLAGS.piece_mb << 20,
        word_segmenter=FLAGS.word_segmenter, show_progress=FLAGS.progress)
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    cli.run(main, memory_hint="use fewer --num_workers (each holds TensorFlow and the "
            "tokenizer, about 1 GB)", handles_sigterm=True)
