"""Does a pre-training run help downstream? Fine-tunes model dirs pre-trained elsewhere (on a
GPU or TPU, copied here, or on this machine) and the same encoder randomly initialised on
real labelled data (movie-review sentiment, or BBC News topics with --dataset=bbc_news), N
seeds each, and records the medians with each run's pre-training facts.

    .venv/bin/python benchmarks/finetune_pretrained.py --model=electra=DIR \\
        --model=mlm=DIR2 --finetune_gin=finetune/small.gin --results_name=NAME

Each DIR is a model dir as run_pretraining.py writes it (operative_config.gin,
model_info.json, a checkpoint; optimizer slots are not needed, so a weights-only copy as
benchmarks/gpu/export_weights.py writes it is enough to carry). `random_init` is the first
model's (or --random_init_from's) encoder shape and vocab with random initial weights
(`--random_init`).

Labelled data (benchmarks/corpora.py): `movie_reviews`, the VADER study's movie-review
sentences, the same seeded 4,000 / 2,000 split as benchmarks/finetune_study.py and the study
runner; `bbc_news`, the 2,225 BBC News articles in five topics (e.g. --num_train=1500
--num_dev=725; the articles are cut to the fine-tuning sequence length); `zh_pos`, Chinese
word segmentation and part-of-speech tagging of People's Daily sentences (a tag per
character, scored by span F1; benchmarks/zh_pos_study.py pre-trains on the paragraphs that
hold no dev sentence and runs this script). Repeat --num_train
(e.g. --num_train=250 --num_train=1000 --num_train=4000) for a learning curve: the smaller
sizes take the first N training examples and keep the same dev examples. Every
fine-tuning is scripts/run_finetuning.py, command recorded; a rerun reuses a condition's
results.json when it holds the same number of trials, examples and initialisation and the
values of the --finetune_bindings its hyperparameters record (sequence length, learning
rate, epochs, batch size, layer-wise decay; pass --refinetune to redo it). A work dir holds
one dataset's split (another --dataset needs another --work_dir). Pre-training facts
(steps, FLOPs in the estimator's counting, device, precision, and the health curves from
its TensorBoard run when the dir has one) are read from each dir. Results:
benchmarks/results/<results_name>.
"""

import functools
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "study"))

from absl import flags  # noqa: E402

import common  # noqa: E402
import corpora  # noqa: E402
import grid  # noqa: E402  (benchmarks/study/grid.py)
from electra_tf.finetune import metrics as metrics_lib  # noqa: E402

flags.DEFINE_enum("dataset", "movie_reviews", sorted(corpora.DATASETS),
                  "The labelled data (benchmarks/corpora.py).")
flags.DEFINE_multi_string("model", None, "NAME=MODEL_DIR of a pre-trained run (repeatable).")
flags.DEFINE_string("random_init_from", None, "The --model NAME whose encoder shape and vocab "
                    "`random_init` takes (default: the first).")
flags.DEFINE_integer("num_trials", 5, "Fine-tuning seeds per condition.")
flags.DEFINE_multi_integer("num_train", [4000], "Training sentences; repeat it for a learning "
                           "curve: each size takes the first N of the largest size's "
                           "sentences, and every size is scored on the same dev sentences.")
flags.DEFINE_integer("num_dev", 2000, "Dev sentences.")
flags.DEFINE_string("finetune_gin", "finetune/small.gin", "Fine-tuning gin file (the models' "
                    "size: Table 7's settings).")
flags.DEFINE_multi_string("finetune_bindings", ["MAX_SEQ_LENGTH=64"],
                          "Gin bindings of every fine-tuning run.")
flags.DEFINE_string("vocab_file", os.path.join(common.REPO, "data", "vocab", "bert_uncased.txt"),
                    "The models' vocab (their model_info.json may name another machine's path).")
flags.DEFINE_string("notes", "", "Markdown appended to the results (how the runs were made).")
flags.DEFINE_string("notes_file", None, "A Markdown file appended to the results after "
                    "--notes (long notes, e.g. the pre-training commands).")
flags.DEFINE_bool("along_runs", False, "Also fine-tune every other checkpoint a model dir keeps "
                  "(step 0 aside) at the largest --num_train: the dev score along each run "
                  "against its pre-training FLOPs, as a table and <results_name>_curve.png "
                  "(the paper's Figure 1 in miniature).")
flags.DEFINE_bool("refinetune", False, "Fine-tune again where an earlier run left results.")
flags.DEFINE_string("work_dir", os.path.join(common.CACHE_DIR, "finetune_pretrained"),
                    "Where the labelled data and the fine-tuning dirs go.")
flags.DEFINE_string("results_name", "finetune_pretrained", "benchmarks/results/<name>.{json,md}.")
flags.mark_flag_as_required("model")
FLAGS = flags.FLAGS


def pretraining_facts(model_dir: str) -> dict:
    """What a model dir says about its pre-training: objective, sizes, the checkpoint's step,
    FLOPs (estimator's counting) up to it, device and precision, and health curves."""
    import tensorflow as tf
    with open(os.path.join(model_dir, "model_info.json")) as f:
        info = json.load(f)
    checkpoint = tf.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        raise SystemExit(f"{model_dir} holds no checkpoint; pass a pre-training model dir")
    step = int(checkpoint.rsplit("-", 1)[1])
    facts = {key: info.get(key) for key in (
        "objective", "sharing", "algorithm", "discriminator_params", "train_batch_size",
        "num_train_steps", "max_seq_length", "device", "precision", "train_flops_per_example")}
    per_example = grid.charged_flops_per_example(info, model_dir)
    facts.update(checkpoint=os.path.basename(checkpoint), step=step,
                 flops_per_example=per_example, flops=grid.charged_flops(info, step, model_dir),
                 two_stage_switch=grid.two_stage_switch(info, model_dir),
                 generator_hidden_size=(info.get("generator") or {}).get("hidden_size"))
    if os.path.isdir(os.path.join(model_dir, "train")):
        facts["curve"] = common.pretraining_curve(model_dir)
    return facts


def kept_steps(model_dir: str) -> list[int]:
    """The steps of the checkpoints a model dir keeps, step 0 (the initialisation) aside."""
    import tensorflow as tf
    state = tf.train.get_checkpoint_state(model_dir)
    steps = {int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths} if state else set()
    return sorted(steps - {0})


def along_runs_table(along: dict, facts: dict, random_init: dict, metric: str,
                     metric_name: str) -> str:
    """Markdown: the dev score of each kept checkpoint of each run, against its FLOPs."""
    rows = []
    for name, run in along.items():
        for point in run["finetune"].values():
            rows.append([name, f"{point['step']:,} of {facts[name]['num_train_steps']:,}",
                         f"{point['flops']:.2e}",
                         common.spread_text(point),
                         common.points_text(point["median"], random_init["median"][metric]),
                         ", ".join(common.score_text(v) for v in point["per_seed"])])
    return ("Along the runs: every checkpoint each run kept, fine-tuned the same way (the "
            "learning-rate schedule spans the whole run, so an early checkpoint was taken at a "
            "higher learning rate than a run of that length would end on). Dev "
            f"{metric_name}, median (mean ± std), and the median's difference from "
            "`random_init` in points:\n\n"
            + common.markdown_table(["model", "checkpoint step", "pre-training FLOPs",
                                     f"dev {metric_name}", "vs random_init", "per seed"], rows)
            + "\n\n")


def learning_curve_table(curve: dict, metric: str, metric_name: str) -> str:
    """Markdown: the dev metric per training size and condition, and the gain over random
    initialisation at each size."""
    names = list(next(iter(curve.values())))
    rows = []
    for n, by in curve.items():
        random_median = by["random_init"]["median"][metric]
        rows.append([f"{n:,}"] + [
            common.spread_text(c, metric)
            + ("" if k == "random_init" else
               f", {common.points_text(c['median'][metric], random_median)}")
            for k, c in by.items()])
    return ("Learning curve: the first N training examples of the largest size, the same dev "
            f"examples for every N. Dev {metric_name}, median (mean ± std) over the seeds, and "
            "the median's difference from `random_init` in points:\n\n"
            + common.markdown_table(["training examples"] + names, rows) + "\n\n")


def main(argv):
    del argv
    commands = []
    work = FLAGS.work_dir
    os.makedirs(work, exist_ok=True)
    models = []
    for spec in FLAGS.model:
        name, sep, path = spec.partition("=")
        if not sep or not name or not os.path.isdir(os.path.join(common.REPO, path)):
            raise SystemExit(f"--model={spec}: expected NAME=MODEL_DIR, the dir existing "
                             "(relative paths from the repository root)")
        if name == "random_init" or name in dict(models):
            raise SystemExit(f"--model={spec}: name {name!r} is taken; pick another")
        models.append((name, path))

    sizes = sorted(set(FLAGS.num_train))
    if sizes[0] < 1:
        raise SystemExit(f"--num_train={sizes[0]}: the training sizes must be positive")
    marker = os.path.join(work, "dataset.txt")
    if os.path.exists(marker):
        with open(marker) as f:
            held = f.read().strip()
        if held != FLAGS.dataset:
            raise SystemExit(f"--work_dir={work} holds the {held} split; pass another "
                             f"--work_dir for --dataset={FLAGS.dataset}")
    else:
        with open(marker, "w") as f:
            f.write(FLAGS.dataset + "\n")
    train_csv, dev_csv, train_rows, dev_rows = corpora.labelled_split(
        work, sizes[-1], FLAGS.num_dev, commands, FLAGS.dataset, min_train=sizes[0])
    _, source, description = corpora.DATASETS[FLAGS.dataset]
    tagging = FLAGS.dataset in corpora.TAGGING
    # The headline score: span F1 for tagging, accuracy for classification.
    metric, metric_name = ("f1", "span F1") if tagging else ("accuracy", "accuracy")
    if tagging:
        task_flags = ["--task=tagging"]
        labels = sorted({tag for sentence in train_rows + dev_rows for _, tag in sentence})
        # Every dev character tagged with the commonest character tag.
        tags = corpora.character_tags(dev_rows)
        majority = max(tags.count(k) for k in set(tags)) / len(tags)
        # The no-context baseline at each size: every character's commonest training tag.
        lookup = {n: metrics_lib.span_scores([corpora.character_tags([s]) for s in dev_rows],
                                             corpora.lookup_tags(train_rows[:n], dev_rows))
                  for n in sizes}
    else:
        task_flags = ["--task=classification", "--label_column=label"]
        labels = sorted({label for label, _ in train_rows + dev_rows})
        majority = max(sum(row[0] == k for row in dev_rows) for k in labels) / len(dev_rows)
    # The largest size keeps the layout of a single-size run (train.csv, ft/NAME), so its
    # fine-tuning results are reused either way; smaller sizes get their own files and dirs.
    train_files = {sizes[-1]: (train_csv, os.path.join(work, "ft"))}
    for n in sizes[:-1]:
        extension = os.path.splitext(train_csv)[1]
        train_files[n] = (os.path.join(work, f"train_{n}{extension}"),
                          os.path.join(work, f"ft_{n}"))
        if tagging:
            corpora.write_conll_characters(train_files[n][0], train_rows[:n])
        else:
            corpora.write_labelled_csv(train_files[n][0], train_rows[:n])

    shapes = dict(models)
    if FLAGS.random_init_from and FLAGS.random_init_from not in shapes:
        raise SystemExit(f"--random_init_from={FLAGS.random_init_from}: not a --model name")
    random_shape = shapes[FLAGS.random_init_from or models[0][0]]
    facts = {name: pretraining_facts(path) for name, path in models}
    flops_at = {}  # name -> the FLOPs its run had spent at a step
    for name, path in models:
        with open(os.path.join(path, "model_info.json")) as f:
            flops_at[name] = functools.partial(grid.charged_flops, json.load(f),
                                               model_dir=path)

    def finetune(out: str, init: str, n: int, extra: list[str]) -> dict:
        """scripts/run_finetuning.py from `init` into `out` on the first n training examples,
        or the results.json an earlier run of the same left there."""
        command = [sys.executable, "scripts/run_finetuning.py", task_flags[0],
                   f"--init_checkpoint={init}", f"--vocab_file={FLAGS.vocab_file}",
                   f"--model_dir={out}", f"--train_file={train_files[n][0]}",
                   f"--dev_file={dev_csv}", *task_flags[1:], f"--num_trials={FLAGS.num_trials}",
                   "--seed=0", f"--gin_file={FLAGS.finetune_gin}",
                   *[f"--gin_bindings={b}" for b in FLAGS.finetune_bindings],
                   "--gin_bindings=finetuning.save_model=False", "--overwrite", *extra]
        result = None if FLAGS.refinetune else common.earlier_finetuning(
            out, init, FLAGS.num_trials, n, FLAGS.finetune_bindings, bool(extra),
            [train_files[n][0], dev_csv])
        if result is None:
            started = time.time()
            common.run_recorded(command, commands)
            with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
                result = json.load(f)
            result["wall_seconds"] = round(time.time() - started, 1)
        else:
            commands.append(common.shown(command))
            print(f"reusing {out}/results.json (pass --refinetune to redo it)")
        return result

    by_size = {}  # training size -> condition -> results.json
    for n in sizes:
        by_size[n] = {
            name: finetune(os.path.join(train_files[n][1], name), init, n, extra)
            for name, init, extra in ([(m, p, []) for m, p in models]
                                      + [("random_init", random_shape, ["--random_init"])])}

    def point(name: str, step: int, result: dict) -> dict:
        """A fine-tuned checkpoint as study/plots.py reads it."""
        return {"step": step, "metric": metric_name, "median": result["median"][metric],
                "mean": result["mean"][metric], "std": result["std"][metric],
                "per_seed": [t["dev"][metric] for t in result["trials"]],
                "flops": flops_at[name](step)}

    # Along the runs: each kept checkpoint, the last being the model's own condition.
    along = {}  # model name -> {"finetune": {step: point}} as study/plots.curve_plot reads
    for name, path in (models if FLAGS.along_runs else []):
        points = {}
        for step in kept_steps(path):
            switch = facts[name]["two_stage_switch"]
            if switch is not None and step <= switch:
                print(f"{name}: ckpt-{step} is in the generator stage (its discriminator not "
                      f"trained until step {switch}): left out of the curve")
                continue
            result = (by_size[sizes[-1]][name] if step == facts[name]["step"] else finetune(
                os.path.join(train_files[sizes[-1]][1], f"{name}@{step}"),
                os.path.join(path, f"ckpt-{step}"), sizes[-1], []))
            points[str(step)] = point(name, step, result)
        along[name] = {"finetune": points}
    conditions = by_size[sizes[-1]]
    notes = FLAGS.notes.strip()
    if FLAGS.notes_file:
        with open(FLAGS.notes_file, encoding="utf-8") as f:
            notes = (notes + "\n\n" + f.read().strip()).strip()

    r = conditions["random_init"]
    record = {"title": f"Fine-tuning pre-trained runs vs random initialisation ({description})",
              "run": common.run_info(), "commands": commands,
              "data": {"dataset": FLAGS.dataset, "source": source, "labels": labels,
                       "num_train": len(train_rows), "num_dev": len(dev_rows),
                       "dev_majority_fraction": majority,
                       **({"character_lookup": {str(n): v for n, v in lookup.items()}}
                          if tagging else {})},
              "notes": notes, "finetune_gin": FLAGS.finetune_gin,
              "finetune_bindings": FLAGS.finetune_bindings,
              "pretraining": facts, "conditions": conditions, "headline_metric": metric,
              f"median_{metric}_gain": {
                  name: c["median"][metric] - r["median"][metric]
                  for name, c in conditions.items() if name != "random_init"}}
    import plots  # benchmarks/study/plots.py
    record["plots"] = []
    baseline = {"median": r["median"][metric]}
    budgets = [facts[name]["flops"] for name, _ in models]
    if len(models) > 1 and max(budgets) <= 1.01 * min(budgets):
        # Runs of the same pre-training compute side by side, as the study's ablation charts.
        bars = os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}_bars.png")
        finals = {name: {"steps": facts[name]["step"], "finetune": {
            str(facts[name]["step"]): point(name, facts[name]["step"], conditions[name])}}
                  for name, _ in models}
        plots.bar_plot(finals, baseline, description.split(" (")[0],
                       [(name, name) for name, _ in models], max(budgets), bars)
        record["plots"].append(os.path.basename(bars))
    if along:
        plot = os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}_curve.png")
        plots.curve_plot(along, baseline, list(along), plot)
        record["along_runs"] = {name: run["finetune"] for name, run in along.items()}
        record["plots"].append(os.path.basename(plot))
    if len(sizes) > 1:
        record["learning_curve"] = {
            str(n): {f"median_{metric}": {k: c["median"][metric] for k, c in by.items()},
                     f"median_{metric}_gain": {
                         k: c["median"][metric] - by["random_init"]["median"][metric]
                         for k, c in by.items() if k != "random_init"},
                     "conditions": by if n != sizes[-1] else "see conditions"}
            for n, by in by_size.items()}

    pre_rows = []
    for name, f in facts.items():
        curve = f.get("curve", {})
        last = {tag: values[-1][1] for tag, values in curve.items() if values}
        objective = f["objective"] + (f" ({f['algorithm']})" if f.get("algorithm") not in (
            None, "joint") else "")
        pre_rows.append([name, objective, f"{f['step']:,} of {f['num_train_steps']:,}",
                         f["train_batch_size"], f"{f['flops']:.2e}",
                         f"{f['device'] or 'CPU'}, {f['precision']}",
                         last.get("generator/mlm_accuracy", "-"),
                         last.get("discriminator/auc", "-") if f["objective"] != "mlm" else "-"])
    metrics = [m for m in (("f1", "precision", "recall", "accuracy") if tagging else
                           ("accuracy", "f1", "macro_f1", "mcc")) if m in r["median"]]
    ft_rows = common.finetuning_rows(conditions, metrics, metric)
    body = (
        "Pre-training runs (read from each model dir; FLOPs in the estimator's counting, "
        "batch x steps x train FLOPs per example, two-stage runs charged their two stages "
        "(benchmarks/study/grid.py); the last point of the TensorBoard training curves):\n\n"
        + common.markdown_table(["model", "objective", "steps", "batch", "FLOPs", "trained on",
                                 "generator MLM acc (train)", "discriminator AUC (train)"],
                                pre_rows)
        + f"\n\nFine-tuning: {description} from {source} ({len(train_rows):,} training, "
        f"{len(dev_rows):,} dev {'sentences' if tagging else 'examples'}"
        + (f", the first held-out ones whose character tags all occur in the first "
           f"{sizes[0]:,} training sentences" if tagging else "") + "; "
        f"{'tags' if tagging else 'labels'} {', '.join(labels)}; the commonest "
        f"{'character tag' if tagging else 'label'} is {100 * majority:.1f}% of dev) with "
        f"{FLAGS.finetune_gin} and {', '.join(FLAGS.finetune_bindings)}, {FLAGS.num_trials} "
        f"seeds per condition; `random_init` is {FLAGS.random_init_from or models[0][0]}'s "
        "encoder shape and vocab with random initial weights. Dev scores: median (mean ± "
        f"sample std), and every seed's {metric_name}.\n\n"
        + common.markdown_table(["initialisation"] + metrics + [f"{metric_name} per seed"],
                                ft_rows)
        + f"\n\nMedian dev {metric_name} against random initialisation: " + "; ".join(
            f"{name} {100 * gain:+.1f} points" for name, gain
            in record[f"median_{metric}_gain"].items())
        + ".\n\n"
        + ("A lookup table that tags each dev character with its commonest tag in the training "
           "sentences (no context) scores span F1 " + "; ".join(
               f"{lookup[n]['f1']:.4f} from {n:,}" for n in sizes) + " sentences.\n\n"
           if tagging else "")
        + (learning_curve_table(by_size, metric, metric_name) if len(sizes) > 1 else "")
        + (along_runs_table(along, facts, r, metric, metric_name) if along else "")
        + ("Plots: " + ", ".join(f"`{p}`" for p in record["plots"]) + ".\n\n"
           if record["plots"] else "")
        + (notes + "\n\n" if notes else "")
        + "Commands (from the repository root):\n\n```\n" + "\n".join(commands) + "\n```\n")
    json_path, md_path = common.write_results(FLAGS.results_name, record, body)
    print(body)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    common.run(main)
