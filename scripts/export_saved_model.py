r"""Exports a trained model as a TF Serving SavedModel (raw-text and token-id signatures).

    python scripts/export_saved_model.py --model_dir=out/small --export_dir=out/serving \
        --model_name=electra --kind=discriminator [--version=1]
    python scripts/export_saved_model.py --model_dir=out/sst2 --export_dir=out/serving \
        --model_name=sst2 --kind=task [--trial=best]

--kind=discriminator, generator or encoder takes a pre-training model dir
(run_pretraining.py's or convert_checkpoint.py's); --kind=task a fine-tuned model:
run_finetuning.py's --model_dir (its trial with the best dev score unless --trial=K) or one
of its trial_K dirs. Writes EXPORT_DIR/MODEL_NAME/VERSION/ (with warmup requests) and
EXPORT_DIR/models.config; see BUILD.md for the signatures and for serving it with the
official TF Serving image.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_string("model_dir", None, "A pre-training model dir (run_pretraining.py or "
                    "convert_checkpoint.py wrote it; its latest checkpoint) or one of its "
                    "checkpoints (MODEL_DIR/ckpt-N) or, with --kind=task, a fine-tuning "
                    "output dir (run_finetuning.py's) or one of its trial_K dirs.")
flags.DEFINE_string("export_dir", None, "Where EXPORT_DIR/MODEL_NAME/VERSION goes.")
flags.DEFINE_string("model_name", "electra", "The model's name in TF Serving: ASCII letters, "
                    "digits, '_', '-' and '.', starting with a letter or digit.")
flags.DEFINE_enum("kind", "discriminator", list(choices.EXPORT_KINDS), "Which network to serve "
                  "(task: a fine-tuned model).")
flags.DEFINE_string("trial", None, "--kind=task with a fine-tuning output dir: the trial to "
                    "export, a number K (trial_K) or 'best' (default: the best dev score on "
                    "the task's primary metric).")
flags.DEFINE_integer("version", 1, "The version directory (TF Serving serves the highest).")
flags.DEFINE_bool("overwrite", False, "Replace an existing version.")
flags.DEFINE_string("vocab_file", None, "Where the model's vocab is now, if it moved from the "
                    "path model_info.json records (the same file: its SHA-256 is checked).")
flags.DEFINE_integer("top_k", 5, "Candidates per [MASK] (generator).")
cli.mark_required(["model_dir", "export_dir"])


def main(argv):
    del argv
    if FLAGS["top_k"].present and FLAGS.kind != "generator":
        from electra_tf.errors import UserInputError
        raise UserInputError(f"--top_k is for --kind=generator (its candidates per [MASK]), not "
                             f"--kind={FLAGS.kind}; drop it")
    from electra_tf.export import saved_model
    path = saved_model.export(FLAGS.model_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.kind,
                              FLAGS.version, FLAGS.vocab_file, FLAGS.top_k, FLAGS.overwrite,
                              FLAGS.trial, log=print)
    what = "fine-tuned model" if FLAGS.kind == "task" else FLAGS.kind
    print(f"exported the {what} to {path}; TF Serving config: "
          f"{os.path.join(FLAGS.export_dir, saved_model.MODELS_CONFIG)}")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    # (what it clears of a killed export's is done, but no version half-written)
    cli.run(main, handles_sigterm=True, terminated_line=(
        "terminated (SIGTERM); no version was written: rerun the command to export it"))
