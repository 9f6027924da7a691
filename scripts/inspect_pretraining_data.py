r"""Shows what the model will see: random masked pre-training examples from TFRecords, decoded.

    python scripts/inspect_pretraining_data.py --data='out/data/*.tfrecord' --num_examples=2

max_seq_length and the vocab come from the data's metadata.json (or --max_seq_length,
--vocab_file).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf.errors import UserInputError  # noqa: E402

flags.DEFINE_string("data", None, "Glob of pre-training TFRecords.")
flags.DEFINE_string("vocab_file", None, "The vocab the data was built with (default: the "
                    "one named in the data's metadata.json).")
flags.DEFINE_integer("max_seq_length", None, "Default: from metadata.json.")
flags.DEFINE_integer("num_examples", 2, "How many examples to show.")
flags.DEFINE_float("mask_prob", 0.15, "Fraction of tokens to mask.")
flags.DEFINE_integer("max_predictions_per_seq", None,
                     "Masked positions per sequence (default: int((mask_prob + 0.005) x L)).")
flags.DEFINE_bool("whole_word_masking", False, "Mask whole words.")
flags.DEFINE_enum("premasked_records", "remask", ["remask", "as_written"],
                  "Pre-masked BERT records: their original tokens masked again (as training "
                  "does by default) or BERT's masks as written.")
flags.DEFINE_integer("seed", 0, "Seed for the shuffle and the masks.")
cli.mark_required(["data"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if FLAGS.num_examples < 1:
        raise UserInputError(f"--num_examples={FLAGS.num_examples} must be at least 1")
    from electra_tf.data import pipeline
    from electra_tf.tokenization import Tokenizer
    files = pipeline.list_files(FLAGS.data, "--data")
    metadata = pipeline.read_metadata(files)
    length = FLAGS.max_seq_length or (metadata or {}).get("max_seq_length")
    if length is None:
        raise UserInputError(f"{FLAGS.data} has no metadata.json; pass --max_seq_length"
                             + ("" if FLAGS.vocab_file else " and --vocab_file"))
    vocab_file = pipeline.vocab_file_of(FLAGS.vocab_file, files, FLAGS.data, "--data")
    tokenizer = Tokenizer(vocab_file)
    info = pipeline.validate_data(files, length, vocab_file,
                                  length_flag="--max_seq_length", data_flag="--data")
    dataset = pipeline.pretraining_dataset(
        FLAGS.data, FLAGS.num_examples, length, vocab_file, mask_prob=FLAGS.mask_prob,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        whole_word_masking=FLAGS.whole_word_masking, seed=FLAGS.seed, shuffle_buffer_size=1000,
        premasked=FLAGS.premasked_records, data_info=info,
        length_flag="--max_seq_length", data_flag="--data", mask_prob_flag="--mask_prob",
        predictions_flag="--max_predictions_per_seq")
    notes = [pipeline.premasked_note(info, FLAGS.premasked_records, "--data",
                                     "--premasked_records=as_written"),
             FLAGS.whole_word_masking and pipeline.whole_word_note(files, tokenizer.vocab, info,
                                                                   "--data")]
    for note in filter(None, notes):
        print(note)
    if metadata:  # after the checks, so that a mismatch is the only thing printed
        print(f"{metadata['_path']}: {_totals(metadata, files)}, max_seq_length {length}, "
              f"vocab {metadata['vocab_size']}")
        held = _selected_examples(metadata, files)
        if FLAGS.num_examples > held:
            print(f"note: --num_examples={FLAGS.num_examples} exceeds the {held} examples "
                  "--data selects: they repeat, as training reads them")
    batch = {k: v.numpy() for k, v in next(iter(dataset)).items()}
    for i in range(FLAGS.num_examples):
        real = batch["input_mask"][i].sum()
        ids = batch["input_ids"][i][:real]
        segments = batch["segment_ids"][i][:real]
        weights = batch["masked_lm_weights"][i] > 0
        positions = batch["masked_lm_positions"][i][weights]
        originals = tokenizer.convert_ids_to_tokens(batch["masked_lm_ids"][i][weights])
        print(f"\nexample {i}: {real} tokens, segment B starts at "
              f"{int(segments.argmax()) if segments.any() else 'none'}")
        print("  input:  " + " ".join(tokenizer.convert_ids_to_tokens(ids)))
        print("  masked: " + ", ".join(f"{p}:{t}" for p, t in zip(positions, originals)))
    return 0


def _selected_examples(metadata: dict, files: list[str]) -> int:
    """The examples of metadata.json's shards that --data selects."""
    directory, files = os.path.dirname(metadata["_path"]), set(files)
    return sum(s["num_examples"] for s in metadata["shards"]
               if os.path.join(directory, s["file"]) in files)


def _totals(metadata: dict, files: list[str]) -> str:
    """The examples, tokens and shards of metadata.json's data set, or of the shards selected
    when --data selects only some (list_files leaves out the empty ones, so they do not
    count as unselected)."""
    directory = os.path.dirname(metadata["_path"])
    shards = metadata["shards"]
    files = set(files)  # (thousands of shards: once, not per shard)
    selected = [s for s in shards if os.path.join(directory, s["file"]) in files]
    if len(selected) == sum(1 for s in shards if s["num_examples"]) and all(
            s["num_examples"] for s in selected):
        return (f"{metadata['num_examples']} examples, {metadata['num_tokens']} tokens, "
                f"{len(shards)} shard{'s' * (len(shards) != 1)}")
    return (f"{sum(s['num_examples'] for s in selected)} examples, "
            f"{sum(s['num_tokens'] for s in selected)} tokens in the {len(selected)} of its "
            f"{len(shards)} shards that --data selects")


if __name__ == "__main__":
    cli.run(main)
