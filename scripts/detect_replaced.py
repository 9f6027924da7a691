r"""Shows which tokens a discriminator judges replaced, from a SavedModel or a model dir.

    python scripts/detect_replaced.py --saved_model=out/serving/electra/1 \
        "The quick brown fox jumps over the lazy dog" "The quick red fox runs over the lazy dog"

Prints each token with its replaced probability; tokens above --threshold are marked.
"""

import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

flags.DEFINE_string("saved_model", None, "An exported discriminator (EXPORT_DIR/NAME/VERSION).")
flags.DEFINE_string("model_dir", None, "Or a model dir (its latest checkpoint).")
flags.DEFINE_float("threshold", 0.5, "Replaced probability above which a token is marked.")
flags.DEFINE_string("vocab_file", None, "With --model_dir: the vocab the model was trained "
                    "with, if not where its model_info.json says.")

# (said where an export is not a discriminator: an MLM model's generator export is no way on)
_HAS_HEAD = ("of a model pre-trained with objective electra, electra_15 or electric (the "
             "others train no replaced-token head)")


def main(argv):
    sentences = argv[1:]
    from electra_tf.errors import UserInputError
    if not sentences:
        raise UserInputError('no sentence given; pass one or more after the flags, e.g. '
                             '"The quick red fox runs over the lazy dog"')
    if bool(FLAGS.saved_model) == bool(FLAGS.model_dir):
        raise UserInputError("pass exactly one of --saved_model or --model_dir")
    if FLAGS.vocab_file and FLAGS.saved_model:
        raise UserInputError("--vocab_file goes with --model_dir; a SavedModel holds its vocab")
    if not 0.0 <= FLAGS.threshold <= 1.0:  # (nan fails too)
        raise UserInputError(f"--threshold={FLAGS.threshold} is not a probability; pass a "
                             "number from 0 to 1 (default 0.5)")
    for i, sentence in enumerate(sentences, 1):
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8, as Python keeps them
            raise UserInputError(f"sentence {i} is not UTF-8 text; pass UTF-8 (e.g. a terminal "
                                 "set to UTF-8)") from None
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer's ops the SavedModel uses)
    if FLAGS.saved_model:
        from electra_tf import atomic
        atomic.check_no_wildcards(FLAGS.saved_model, f"--saved_model={FLAGS.saved_model}",
                                  "rename it, or pass a symlink to it, without [",
                                  wildcards="[")
        if not tf.io.gfile.exists(os.path.join(FLAGS.saved_model, "saved_model.pb")):
            raise UserInputError(f"--saved_model={FLAGS.saved_model} holds no saved_model.pb; "
                                 "pass EXPORT_DIR/MODEL_NAME/VERSION of an export")
        try:
            signatures = tf.saved_model.load(FLAGS.saved_model).signatures
        except (OSError, ValueError, IndexError, tf.errors.OpError) as e:  # a corrupt copy
            raise UserInputError(f"--saved_model={FLAGS.saved_model} could not be loaded "
                                 f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                                 "export it again or copy it whole") from None
        serve = signatures.get("serving_default")
        if serve is None or set(serve.structured_input_signature[1]) != {"text"}:
            raise UserInputError(f"--saved_model={FLAGS.saved_model} is not a discriminator; "
                                 "export one with export_saved_model.py --kind=discriminator "
                                 f"{_HAS_HEAD}")
    else:
        from electra_tf.export.saved_model import ServingModule, check_trained, weights_read
        from electra_tf.training.checkpoints import load_pretrainer
        loaded = load_pretrainer(FLAGS.model_dir, FLAGS.vocab_file)
        if loaded.model.discriminator_predictions is None:
            raise UserInputError(f"--model_dir={FLAGS.model_dir} was pre-trained with objective "
                                 f"{loaded.model.objective}, which trains no replaced-token "
                                 "head to detect with; pass a model dir pre-trained with "
                                 "electra, electra_15 or electric")
        check_trained(loaded, FLAGS.model_dir, "discriminator", script="detect")
        # (on stderr: stdout is the same from a model dir as from its export)
        for line in weights_read(loaded, "discriminator"):
            print(line, file=sys.stderr)
        serve = ServingModule(loaded.model, "discriminator", loaded.vocab_file,
                              loaded.max_seq_length, loaded.lower_case,
                              loaded.strip_accents).serving_default
    out = serve(text=tf.constant(sentences))
    if "replaced_probability" not in out:
        raise UserInputError(f"--saved_model={FLAGS.saved_model} is not a discriminator; "
                             "export one with export_saved_model.py --kind=discriminator "
                             f"{_HAS_HEAD}")
    # An export made before signatures said which texts were cut: a sentence as long as
    # the most tokens the model takes (the length of a text longer than any model's, asked
    # for only then) may have been.
    limit = None
    for i, sentence in enumerate(sentences):
        print(sentence)
        mask = out["input_mask"][i].numpy()
        shown = 0
        for token, probability, real in zip(out["tokens"][i].numpy(),
                                            out["replaced_probability"][i].numpy(), mask):
            token = token.decode()
            if not real or token in ("[CLS]", "[SEP]"):
                continue
            mark = "  <- replaced" if probability > FLAGS.threshold else ""
            # (padded by display width: a CJK character takes two columns)
            width = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in token)
            print(f"  {token}{' ' * max(16 - width, 0)} {probability:.3f}{mark}")
            shown += 1
        if not shown:
            print("  (no tokens: the sentence is empty or only spaces)")
        if "truncated" in out:
            if out["truncated"][i]:
                print(f"  note: the sentence is longer than the {len(mask)} positions the "
                      "model takes (its max_seq_length): the tokens beyond them were cut")
            continue
        if mask.all() and limit is None:
            limit = serve(text=tf.constant(["a " * 8192]))["input_mask"].shape[1]
        if mask.all() and len(mask) == limit:
            print(f"  note: the sentence fills all {len(mask)} positions the model takes "
                  "(its max_seq_length): tokens beyond them may have been cut")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    cli.run(main, positional=True)
