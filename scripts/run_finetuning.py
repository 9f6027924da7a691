r"""Fine-tunes a pre-trained discriminator on a task, over several seeds.

    python scripts/run_finetuning.py --task=sst2 --init_checkpoint=out/small \
        --data_dir=glue/SST-2 --model_dir=out/sst2 --num_trials=5
    python scripts/run_finetuning.py --task=classification --init_checkpoint=out/small \
        --train_file=train.csv --dev_file=dev.csv --text_column=review --label_column=stars \
        --model_dir=out/reviews

Writes MODEL_DIR/results.json (every trial's dev scores, their median, mean and std) and
each trial's predictions and weights in MODEL_DIR/trial_K/. Run again after an interruption,
the same command keeps the trials that finished and trains the rest. Hyperparameters are gin
(gin/finetune/<size>.gin, paper Table 7, picked by the model's size unless --gin_file is
given); override with --gin_bindings='LEARNING_RATE=1e-4'.
"""

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import cli  # noqa: E402  (first: quiets TensorFlow's start-up)
from absl import flags  # noqa: E402

from electra_tf import choices  # noqa: E402

flags.DEFINE_string("task", None, "classification, regression, tagging, qa, or a named task: "
                    "cola sst2 mrpc stsb qqp mnli qnli rte wnli squad_v1 squad_v2 conll.")
flags.DEFINE_string("init_checkpoint", None, "A model dir (run_pretraining.py's or "
                    "convert_checkpoint.py's) or a ckpt-N prefix in one; a fine-tuned "
                    "model (a run_finetuning.py --model_dir or trial_K dir: its encoder); "
                    "'none' for a randomly initialised encoder of --model_size.")
flags.DEFINE_string("model_dir", None, "Where results.json, predictions and weights go.")
flags.DEFINE_bool("overwrite", False, "Replace the run --model_dir already holds (its "
                  "results.json and trial_K folders). Without it a finished run is refused "
                  "unless a larger --num_trials extends it, and an interrupted one resumed: "
                  "its complete trials are kept if they were run as this command would run "
                  "them.")
flags.DEFINE_string("data_dir", None, "A named task's folder (e.g. GLUE's SST-2), or a folder "
                    "with train/dev[/test] .csv/.tsv/.jsonl (.txt for tagging).")
flags.DEFINE_string("train_file", None, "Training file (instead of --data_dir).")
flags.DEFINE_string("dev_file", None, "Evaluation file (instead of --data_dir).")
flags.DEFINE_string("test_file", None, "Optional unlabelled file to predict.")
flags.DEFINE_string("text_column", None, "Column (or JSON key) of the text (default: text).")
flags.DEFINE_string("text_b_column", None, "Column of the second text, for sentence pairs.")
flags.DEFINE_string("label_column", None, "Column of the label (default: label); for tagging, "
                    "the index of the tag column in the CoNLL file (default: -1, the last).")
flags.DEFINE_integer("num_trials", 1, "Fine-tuning runs, with seeds seed, seed+1, ...")
flags.DEFINE_integer("seed", 0, "The first trial's seed (head initialisation, data order, "
                     "dropout).", **choices.SEED_BOUNDS)
flags.DEFINE_multi_string("gin_file", None, "Gin files, in order (a bare name is looked up in "
                          "gin/; default: finetune/<the model's size>.gin).")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings applied after the files, e.g. "
                          "'LEARNING_RATE=1e-4' or 'NUM_EPOCHS=3'.")
flags.DEFINE_string("vocab_file", None, "The model's vocab (default: the one its "
                    "model_info.json names); required with --init_checkpoint=none.")
flags.DEFINE_bool("random_init", False, "Build the encoder --init_checkpoint describes but keep "
                  "its random initial weights (the no-pre-training baseline).")
flags.DEFINE_enum("model_size", "small", ["tiny", "small", "base", "large"],
                  "The encoder's size with --init_checkpoint=none.")
flags.DEFINE_enum("strategy", "default", list(choices.STRATEGIES),
                  "default: CPU or one GPU; mirrored: all local GPUs; multi_worker_mirrored: "
                  "the workers in TF_CONFIG; tpu: the TPU --tpu names. The batch is split "
                  "over the replicas.")
flags.DEFINE_string("tpu", None, "TPU name or address for --strategy=tpu ('local' on a TPU VM).")
flags.DEFINE_bool("lower_case", True, "Lower-case text, with --init_checkpoint=none (a "
                  "checkpoint's model_info.json gives its own).")
flags.DEFINE_bool("strip_accents", None, "Strip accents, with --init_checkpoint=none "
                  "(default: --lower_case).")
cli.mark_required(["task", "init_checkpoint", "model_dir"])


def main(argv):
    del argv
    from electra_tf import gin_files
    from electra_tf.finetune import runner, tasks
    from electra_tf.training import optimization  # noqa: F401  (registers `optimizer`)
    from electra_tf.errors import UserInputError
    from electra_tf.training import strategies
    task = tasks.get_task(FLAGS.task)
    given = [f"--{name}" for name in ("model_size", "lower_case", "strip_accents")
             if FLAGS[name].present]
    if given and FLAGS.init_checkpoint.lower() not in runner.NO_INIT:
        raise UserInputError(f"{', '.join(given[:-1])}{' and ' if len(given) > 1 else ''}"
                             f"{given[-1]} {'are' if len(given) > 1 else 'is'} for "
                             "--init_checkpoint=none; a checkpoint is fine-tuned with the shape "
                             "and text processing it was trained with (its model_info.json): "
                             f"drop {'them' if len(given) > 1 else 'it'}")
    if strategies.is_tpu_node(FLAGS.strategy, FLAGS.tpu):
        # Once connected, a Node's host runs the eager ops: tokenization's tensorflow-text
        # kernels, which only this process has loaded, among them.
        raise UserInputError(f"{strategies.tpu_flag(FLAGS.tpu)}: fine-tuning runs on a Cloud "
                             "TPU VM's own TPU (--tpu=local), not on a TPU Node reached over "
                             "the network; run it on a TPU VM, or on GPUs")
    runner.check_model_dir(FLAGS.model_dir, FLAGS.overwrite, FLAGS.num_trials)
    # Files first: a bad file fails before a model is loaded or anything is written.
    data = tasks.load(task, data_dir=FLAGS.data_dir, train_file=FLAGS.train_file,
                      dev_file=FLAGS.dev_file, test_file=FLAGS.test_file,
                      text_column=FLAGS.text_column, text_b_column=FLAGS.text_b_column,
                      label_column=FLAGS.label_column)
    # The strategy before the checkpoint is read: multi_worker_mirrored (collective ops) and
    # tpu (connecting to the cluster) configure TensorFlow's runtime, which must not have run
    # an op yet.
    strategy = strategies.create_strategy(FLAGS.strategy, FLAGS.tpu, print)
    cli.reclaim_sigterm()  # (a multi-worker strategy's preemption watcher took SIGTERM)
    init = runner.load_initialization(FLAGS.init_checkpoint, FLAGS.vocab_file,
                                      random_init=FLAGS.random_init,
                                      model_size=FLAGS.model_size, lower_case=FLAGS.lower_case,
                                      strip_accents=FLAGS.strip_accents)
    files = FLAGS.gin_file or [runner.default_gin_file(init.config)]
    gin_files.check_finetuning_files(files)
    gin_files.parse(files, FLAGS.gin_bindings)
    print(f"hyperparameters: {', '.join(files)}"
          + (f" + {', '.join(FLAGS.gin_bindings)}" if FLAGS.gin_bindings else ""))
    with contextlib.ExitStack() as held:
        strategies.hold_model_dir(held, FLAGS.model_dir, "run_finetuning.py", strategy)
        results = runner.run_finetuning(data, init, FLAGS.model_dir,
                                        num_trials=FLAGS.num_trials, seed=FLAGS.seed,
                                        strategy=strategy, overwrite=FLAGS.overwrite)
    metric = results["metric"]
    if "median" in results:  # (not on a worker that kept every trial and saw none of them)
        median = runner.score_text(results["median"][metric])
        worker, chief = strategies.worker_info(strategy)
        where = (f"results in {os.path.join(FLAGS.model_dir, runner.RESULTS)}" if chief else
                 f"the chief writes the results (worker {worker} writes nothing)")
        print(f"done: {task.name} dev {metric} median {median} over "
              f"{FLAGS.num_trials} trial(s); {where}")
    return 0


FLAGS = flags.FLAGS

if __name__ == "__main__":
    # SIGTERM (a scheduler's stop) is one line: the main thread is back in Python between
    # steps and batches; the complete trials are kept and the rerun trains the rest.
    cli.run(main, trains=True, handles_sigterm=True, memory_hint=(
        "lower TRAIN_BATCH_SIZE (--gin_bindings=TRAIN_BATCH_SIZE=16), MAX_SEQ_LENGTH, or, "
        "when predicting, finetuning.eval_batch_size"))
