r"""Pre-trains an ELECTRA generator + discriminator (or one of the paper's variants).

    python scripts/run_pretraining.py --gin_file=small.gin --model_dir=out/small \
        --train_data='out/data/*.tfrecord' [--eval_data=...] [--strategy=mirrored]

Hyperparameters are gin (gin/*.gin; override with --gin_bindings='NUM_TRAIN_STEPS=1000');
paths and the run's switches are flags. Rerunning the same command resumes from the latest
checkpoint in --model_dir.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_multi_string("gin_file", None, "Gin files, in order (a bare name is looked up "
                          "in gin/, e.g. small.gin or ablations/mlm.gin).")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings applied after the files, e.g. "
                          "'NUM_TRAIN_STEPS=1000' or 'pretrainer.num_layers=6'.")
flags.DEFINE_string("model_dir", None, "Where checkpoints, TensorBoard runs and configs go.")
flags.DEFINE_string("train_data", None, "Comma-separated globs or folders of pre-training "
                    "TFRecords.")
flags.DEFINE_string("eval_data", None, "Held-out TFRecords, evaluated every "
                    "pretraining.eval_every steps (default: CHECKPOINT_EVERY).")
flags.DEFINE_string("vocab_file", None, "The vocab the data was built with (default: the "
                    "one named in the data's metadata.json).")
flags.DEFINE_enum("strategy", "default", list(choices.STRATEGIES), "tf.distribute strategy.")
flags.DEFINE_string("tpu", None, "TPU name or address for --strategy=tpu ('local' on a TPU VM).")
flags.DEFINE_integer("seed", 0, "Seed of initialisation, data order, masks, samples, dropout.",
                     **choices.SEED_BOUNDS)
flags.DEFINE_bool("deterministic", False, "Deterministic TensorFlow ops: a rerun (or an "
                  "interrupted run resumed) ends with bit-identical weights.")
flags.DEFINE_bool("dry_run", False, "Build the model and the input pipeline, write and print "
                  "model_info.json, and exit.")
flags.DEFINE_string("init_checkpoint", None, "Start from these weights (a model dir or "
                    "checkpoint, e.g. an imported one) when --model_dir has no checkpoint.")
cli.mark_required(["gin_file", "model_dir", "train_data"])


def main(argv):
    del argv
    from electra_tf import gin_files
    from electra_tf.training import pretraining
    gin_files.parse(FLAGS.gin_file, FLAGS.gin_bindings)
    gin_files.check_sets_a_run(FLAGS.gin_file)
    result = pretraining.run_pretraining(
        FLAGS.model_dir, FLAGS.train_data, eval_data=FLAGS.eval_data,
        vocab_file=FLAGS.vocab_file, strategy=FLAGS.strategy, tpu=FLAGS.tpu, seed=FLAGS.seed,
        deterministic=FLAGS.deterministic, dry_run=FLAGS.dry_run,
        init_checkpoint=FLAGS.init_checkpoint, exit_at_once=True)
    if not FLAGS.dry_run:
        print(f"done: step {result['step']}; checkpoints and TensorBoard runs in "
              f"{FLAGS.model_dir}; weights sha256 {result['weights_sha256'][:16]}")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    # handles_sigterm: until the run's loop takes SIGTERM (to save a checkpoint first), it
    # ends the start-up with one line and exit code 143.
    cli.run(main, trains=True, xla_cache=True, handles_sigterm=True, memory_hint=(
        "lower the memory a step takes (--gin_bindings=pretraining.gradient_accumulation_steps"
        "=2 or more: the same global batch, TRAIN_BATCH_SIZE, in micro-batches; or a smaller "
        "TRAIN_BATCH_SIZE) or the model's size"))
