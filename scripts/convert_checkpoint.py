r"""Imports the released ELECTRA checkpoints and HuggingFace models; exports to HuggingFace.

    # the official TF1 checkpoint (both networks in one file), e.g. electra_base:
    python scripts/convert_checkpoint.py --source=tf1 \
        --input=electra_base/electra_base --output_dir=out/electra_base
    # HuggingFace directories (ElectraForPreTraining [+ ElectraForMaskedLM], or the
    # encoder of an ElectraModel, a fine-tuned ElectraFor* or a BERT):
    python scripts/convert_checkpoint.py --source=hf --input=DISCRIMINATOR_DIR \
        [--generator_input=GENERATOR_DIR] --output_dir=out/imported
    # a model dir of ours to HuggingFace: OUT/discriminator and, if it has a masked-LM
    # generator, OUT/generator
    python scripts/convert_checkpoint.py --source=native --input=out/my_run --target=hf \
        --output_dir=out/hf

The imported model dir works with export_saved_model.py, run_finetuning.py and, for
continued pre-training, run_pretraining.py --init_checkpoint (with
--gin_file=OUTPUT_DIR/operative_config.gin after the size file). Parts the source does not
hold (a BERT's or ElectraModel's replaced-token head, the generator without
--generator_input) are freshly initialised, from --seed: a note names them, model_info.json records
them, and export and detect_replaced.py refuse to serve them until the model dir has been
pre-trained further.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_enum("source", None, ["tf1", "hf", "native"], "What --input is.")
flags.DEFINE_string("input", None, "TF1 checkpoint prefix, HuggingFace directory, or our "
                    "model dir (--source=native).")
flags.DEFINE_string("generator_input", None, "HuggingFace ElectraForMaskedLM directory.")
flags.DEFINE_enum("target", "native", ["native", "hf"], "What to write.")
flags.DEFINE_string("output_dir", None, "Where the model dir (or HuggingFace dirs) go.")
flags.DEFINE_string("vocab_file", None, "The model's vocab, copied into the model dir "
                    "(default: the vocab.txt beside the TF1 checkpoint or in the HuggingFace "
                    "dir, else the WordPiece vocab of its tokenizer.json, else "
                    "data/vocab/bert_uncased.txt, the released models' vocab, with a note; "
                    "--target=hf: the one the model dir records).")
flags.DEFINE_bool("lower_case", None, "Whether the model is uncased (default: the source's "
                  "tokenizer config, else as the vocab is: cased or not). One the vocab "
                  "contradicts is refused.")
flags.DEFINE_integer("num_heads", None, "TF1: attention heads (default hidden / 64, as in "
                     "every released ELECTRA).")
flags.DEFINE_integer("max_seq_length", None, "The longest input the model dir will accept "
                     "(default: the checkpoint's positions, 512 for the released models).")
flags.DEFINE_float("generator_hidden_fraction", 0.25, "A source without a generator gets a "
                   "fresh one this fraction of the discriminator's hidden size (the paper's "
                   "small and large 1/4, base 1/3; the released ELECTRA-Small, Small++, has "
                   "one as wide as its discriminator, 1.0); refused for one with a "
                   "generator.")
flags.DEFINE_integer("seed", 0, "Seeds the parts the source does not hold, freshly "
                     "initialised: one conversion run twice with one seed writes the same "
                     "weights.", **choices.SEED_BOUNDS)
cli.mark_required(["source", "input", "output_dir"])


# The conversions that read each flag, beyond --source, --input, --output_dir and
# --vocab_file, which all do: one given to another is refused, not ignored.
READ_BY = {"generator_input": ("--source=hf",), "num_heads": ("--source=tf1",),
           **{name: ("--source=tf1", "--source=hf") for name in
              ("lower_case", "max_seq_length", "generator_hidden_fraction", "seed")}}


def main(argv):
    del argv
    from electra_tf.errors import UserInputError
    if FLAGS.target == "hf" and FLAGS.source != "native":
        raise UserInputError("--target=hf converts one of our model dirs: pass "
                             "--source=native --input=MODEL_DIR")
    conversion = "--target=hf" if FLAGS.target == "hf" else f"--source={FLAGS.source}"
    for name, readers in READ_BY.items():
        if FLAGS[name].present and conversion not in readers:
            raise UserInputError(f"--{name} is for {' and '.join(readers)}, not {conversion}; "
                                 "drop it")
    from electra_tf.export import converters
    if FLAGS.target == "hf":
        written = converters.export_hf(FLAGS.input, FLAGS.output_dir, log=print,
                                       vocab_file=FLAGS.vocab_file)
        for directory in written:
            print(f"wrote {directory}")
        return 0
    if FLAGS.source == "native":
        raise UserInputError("--source=native is for --target=hf; a model dir is already native")
    # Given only for a source without a generator (the converters refuse it otherwise).
    fraction = (FLAGS.generator_hidden_fraction if FLAGS["generator_hidden_fraction"].present
                else None)
    if FLAGS.source == "tf1":
        result = converters.import_tf1(FLAGS.input, FLAGS.output_dir, FLAGS.vocab_file,
                                       FLAGS.lower_case, FLAGS.num_heads, FLAGS.max_seq_length,
                                       fraction, FLAGS.seed)
    else:
        result = converters.import_hf(FLAGS.input, FLAGS.output_dir, FLAGS.generator_input,
                                      FLAGS.vocab_file, FLAGS.lower_case, FLAGS.max_seq_length,
                                      fraction, FLAGS.seed)
    info = result["model_info"]
    print(f"wrote {FLAGS.output_dir}: discriminator {info['discriminator_params']:,} "
          f"parameters (hidden {info['discriminator']['hidden_size']}, "
          f"{info['discriminator']['num_layers']} layers), generator "
          f"{info['generator_params']:,}")
    if result["skipped"]:
        print(f"skipped {len(result['skipped'])} tensors that are not weights of the networks: "
              + ", ".join(result["skipped"][:8]) + (" ..." if len(result["skipped"]) > 8 else ""))
    if result["not_imported"]:
        print("note: not in the source, so freshly initialised (random until pre-trained "
              "further): " + " and ".join(converters.NOT_IMPORTED[part]
                                          for part in result["not_imported"])
              + "; export and detect_replaced.py refuse them until then (recorded in "
              "model_info.json: not_imported)")
    for note in result["notes"]:
        print(f"note: {note}")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    cli.run(main)
