"""Does pre-training help? A tiny ELECTRA pre-trained on the embedded Austen corpus, then
fine-tuned on real movie-review sentiment, against the same encoder randomly initialised
(and against BERT-style MLM pre-training, and ELECTRA pre-training with review text added);
the median (and mean, std) over 5 seeds each.

    .venv/bin/python benchmarks/finetune_study.py    # about an hour on 2 cores; reruns reuse
                                                     # the download and the pre-trained models

Labelled data: the movie-review snippets of Hutto & Gilbert's VADER study (ICWSM 2014;
Pang & Lee's Rotten Tomatoes sentences, each with the mean of 20 human ratings in
[-4, 4]), shipped in the `additional_resources` of PyPI's `vaderSentiment` 3.3.2 sdist
(MIT licence). It is fetched with `pip download` into benchmarks/.cache/ (not committed).
Sentences rated above 0 are positive, below 0 negative (the 37 rated exactly 0 are
dropped); a seeded shuffle gives 4,000 training and 2,000 dev sentences.

Steps (all by the project's own scripts, commands recorded in the results):
1. scripts/build_pretraining_data.py on data/corpus (seq 64, BERT uncased vocab).
2. scripts/run_pretraining.py --gin_file=tiny.gin for --pretrain_steps (3000) at seq 64 (the
   sentences fine-tuned on are short) with LEARNING_RATE=1e-4 and WARMUP_STEPS=300: with
   tiny.gin's own LR 2e-4 and 100-step warmup at seq 128, the discriminator's AUC peaked at
   0.89 (step 200) and sank to 0.56 by step 1300 (a near-collapse), and that encoder
   fine-tuned no better than a random one (3,000 training sentences, one seed: 72.4% vs
   73.9% dev accuracy).
   With --with_mlm (default), the same encoder is also pre-trained with BERT's masked-LM
   objective (gin/ablations/mlm.gin), same data, steps and optimizer. With --with_reviews
   (default), ELECTRA is also pre-trained on the Austen corpus plus the VADER study's other
   unlabelled snippets (Amazon reviews, NYT editorials, tweets; no movie sentence): the
   Austen text lacks much of the reviews' vocabulary (the share of dev word pieces never
   seen in pre-training is recorded).
3. scripts/run_finetuning.py --task=classification, 5 trials, finetune/tiny.gin (Table 7's
   small-size settings: LR 3e-4, layer-wise decay 0.8, batch 32, 3 epochs) with
   MAX_SEQ_LENGTH=64, from the pre-trained model dir and with --random_init (same shape,
   same vocab, same hyperparameters, no pre-trained weights).
Results: benchmarks/results/finetune_study.{json,md}.
"""

import glob
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import corpora  # noqa: E402

flags.DEFINE_integer("pretrain_steps", 3000, "Pre-training steps of the tiny model.")
flags.DEFINE_integer("pretrain_seq_length", 64, "Sequence length of the pre-training data.")
flags.DEFINE_multi_string("pretrain_bindings", ["LEARNING_RATE=1e-4", "WARMUP_STEPS=300"],
                          "Gin bindings of the pre-training run (after tiny.gin).")
flags.DEFINE_integer("num_trials", 5, "Fine-tuning seeds per condition.")
flags.DEFINE_integer("num_train", 4000, "Training sentences.")
flags.DEFINE_integer("num_dev", 2000, "Dev sentences.")
flags.DEFINE_bool("with_mlm", True, "Also pre-train the same encoder with the masked-LM "
                  "objective (gin/ablations/mlm.gin, BERT) and fine-tune it.")
flags.DEFINE_bool("with_reviews", True, "Also pre-train ELECTRA on the Austen corpus plus the "
                  "VADER study's other unlabelled snippets (Amazon reviews, NYT editorials, "
                  "tweets; none of the movie sentences) and fine-tune it.")
flags.DEFINE_multi_string("finetune_bindings", ["MAX_SEQ_LENGTH=64"],
                          "Gin bindings of both fine-tuning runs.")
flags.DEFINE_bool("refinetune", False, "Fine-tune again even where an earlier run of the study "
                  "left results.")
flags.DEFINE_string("work_dir", os.path.join(common.CACHE_DIR, "finetune_study"),
                    "Where downloads, data and model dirs go (reruns reuse them).")
common.define_results_name("finetune_study")
FLAGS = flags.FLAGS

OTHER_SNIPPETS = tuple(f"hutto_ICWSM_2014/{n}_GroundTruth.txt" for n in (
    "amazonReviewSnippets", "nytEditorialSnippets", "tweets"))
VOCAB = os.path.join(common.REPO, "data", "vocab", "bert_uncased.txt")


def build_once(command: list[str], output_dir: str, commands: list[str]):
    """Builds pre-training data unless an earlier run did (the command is recorded either way)."""
    if os.path.exists(os.path.join(output_dir, "metadata.json")):
        commands.append(common.shown(command))
    else:
        common.run_recorded(command, commands)


def write_review_corpus(work_dir: str) -> str:
    """The VADER study's non-movie snippets as a pre-training corpus: one snippet per
    document (a blank line after each)."""
    sdist = glob.glob(os.path.join(work_dir, "download", "vaderSentiment-*.tar.gz"))[0]
    path = os.path.join(work_dir, "reviews_corpus", "snippets.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = []
    for name in OTHER_SNIPPETS:
        for line in corpora.vader_file(sdist, name).splitlines():
            fields = line.split("\t")
            if len(fields) >= 3 and fields[2].strip():
                lines.append(fields[2].strip() + "\n\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def unseen_share(data_dir: str, texts: list[str]) -> float:
    """The share of the texts' word pieces that never occur in the pre-training data (their
    embeddings keep their random initial values through pre-training)."""
    import numpy as np
    import tensorflow as tf

    from electra_tf.tokenization import Tokenizer
    seen = np.zeros(30522, bool)
    for path in glob.glob(os.path.join(data_dir, "*.tfrecord")):
        for record in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(record.numpy())
            seen[list(example.features.feature["input_ids"].int64_list.value)] = True
    ids = [i for row in Tokenizer(VOCAB).encode(texts) for i in row]
    return float(1 - seen[ids].mean())


def pretrain(model_dir, data_dir, length, extra_files, commands):
    """scripts/run_pretraining.py with tiny.gin (a rerun finds the run done, or resumes it)."""
    common.run_recorded(
        [sys.executable, "scripts/run_pretraining.py", "--gin_file=tiny.gin", *extra_files,
         f"--model_dir={model_dir}", f"--train_data={data_dir}/*.tfrecord",
         f"--gin_bindings=NUM_TRAIN_STEPS={FLAGS.pretrain_steps}",
         f"--gin_bindings=MAX_SEQ_LENGTH={length}",
         *[f"--gin_bindings={b}" for b in FLAGS.pretrain_bindings],
         "--gin_bindings=CHECKPOINT_EVERY=500", "--gin_bindings=STEPS_PER_LOOP=100",
         "--seed=0"], commands)


def main(argv):
    del argv
    commands = []
    work = FLAGS.work_dir
    os.makedirs(work, exist_ok=True)

    train_csv, dev_csv, train_rows, dev_rows = corpora.labelled_split(
        work, FLAGS.num_train, FLAGS.num_dev, commands)
    positives = sum(label == "positive" for label, _ in dev_rows) / len(dev_rows)

    length = FLAGS.pretrain_seq_length
    data_dir = os.path.join(work, f"data{length}")
    build_once([sys.executable, "scripts/build_pretraining_data.py",
                "--input=data/corpus/*.txt.gz", f"--vocab_file={VOCAB}",
                f"--output_dir={data_dir}", f"--max_seq_length={length}"], data_dir, commands)
    pretrained = os.path.join(work, "pretrained")
    started = time.time()
    pretrain(pretrained, data_dir, length, [], commands)
    pretrain_seconds = time.time() - started
    curve = common.pretraining_curve(pretrained)
    models = [("pretrained", pretrained, []), ("random_init", pretrained, ["--random_init"])]
    if FLAGS.with_mlm:
        models.append(("pretrained_mlm", os.path.join(work, "pretrained_mlm"), []))
    if FLAGS.with_reviews:
        models.append(("pretrained_plus_reviews", os.path.join(work, "pretrained_reviews"), []))

    conditions = {}
    for name, init, extra in models:
        if name == "pretrained_mlm":
            pretrain(init, data_dir, length, ["--gin_file=ablations/mlm.gin"], commands)
        if name == "pretrained_plus_reviews":
            corpus = write_review_corpus(work)
            reviews_data = os.path.join(work, f"data{length}_reviews")
            build_once([sys.executable, "scripts/build_pretraining_data.py",
                        f"--input=data/corpus/*.txt.gz,{corpus}", f"--vocab_file={VOCAB}",
                        f"--output_dir={reviews_data}", f"--max_seq_length={length}"],
                       reviews_data, commands)
            pretrain(init, reviews_data, length, [], commands)
        out = os.path.join(work, f"finetune_{name}")
        started = time.time()
        command = [sys.executable, "scripts/run_finetuning.py", "--task=classification",
                   f"--init_checkpoint={init}", f"--train_file={train_csv}",
                   f"--dev_file={dev_csv}", f"--model_dir={out}",
                   f"--num_trials={FLAGS.num_trials}", "--gin_file=finetune/tiny.gin",
                   "--gin_bindings=finetuning.save_model=False", "--overwrite",
                   *[f"--gin_bindings={b}" for b in FLAGS.finetune_bindings], *extra]
        result = None if FLAGS.refinetune else common.earlier_finetuning(
            out, init, FLAGS.num_trials, len(train_rows), FLAGS.finetune_bindings, bool(extra),
            [train_csv, dev_csv])
        if result is None:
            common.run_recorded(command, commands)
            with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
                result = json.load(f)
            result["wall_seconds"] = round(time.time() - started, 1)
        else:  # done by an earlier run of this study with the same command
            commands.append(common.shown(command))
            print(f"reusing {out}/results.json (pass --refinetune to redo it)")
        conditions[name] = result

    r = conditions["random_init"]
    dev_texts = [text for _, text in dev_rows]
    unseen = {"austen": unseen_share(data_dir, dev_texts)}
    if FLAGS.with_reviews:
        unseen["austen_plus_reviews"] = unseen_share(f"{data_dir}_reviews", dev_texts)
    record = {"title": "Fine-tuning study: pre-trained tiny ELECTRA vs random initialisation",
              "run": common.run_info(), "commands": commands,
              "data": {"source": f"PyPI {corpora.VADER} sdist, additional_resources/"
                                f"{corpora.MOVIE_SNIPPETS}",
                       "num_train": len(train_rows), "num_dev": len(dev_rows),
                       "dev_positive_fraction": positives},
              "pretrain_steps": FLAGS.pretrain_steps,
              "pretrain_wall_seconds": round(pretrain_seconds, 1),
              "pretraining_curve": curve,
              "dev_pieces_unseen_in_pretraining": unseen,
              "conditions": conditions,
              "median_accuracy_gain": {
                  name: c["median"]["accuracy"] - r["median"]["accuracy"]
                  for name, c in conditions.items() if name != "random_init"}}
    metrics = ["accuracy", "f1", "mcc"]
    rows_md = common.finetuning_rows(conditions, metrics)
    body = (
        "A tiny ELECTRA (2 layers, hidden 128, BERT uncased vocab) pre-trained for "
        f"{FLAGS.pretrain_steps} steps on the embedded Austen corpus (tiny.gin: batch 32, "
        f"bias-corrected AdamW; seq {length}, {', '.join(FLAGS.pretrain_bindings)}), then "
        "fine-tuned on binary movie-review sentiment (Pang & Lee's Rotten "
        "Tomatoes sentences as rated in the VADER study, from PyPI `vaderSentiment` 3.3.2; "
        f"{len(train_rows)} training, {len(dev_rows)} dev sentences, "
        f"{100 * positives:.1f}% of dev positive) with finetune/tiny.gin "
        "(LR 3e-4, layer-wise decay 0.8, batch 32, 3 epochs, 10% warmup) and "
        f"{', '.join(FLAGS.finetune_bindings)}; {FLAGS.num_trials} seeds per condition. "
        "`random_init` is the same encoder shape and vocab with its random initial weights "
        "(`--random_init`), fine-tuned with the same settings"
        + ("; `pretrained_mlm` is the same encoder pre-trained the same way with BERT's "
           "masked-LM objective instead of ELECTRA's (`--gin_file=ablations/mlm.gin`)"
           if FLAGS.with_mlm else "")
        + ("; `pretrained_plus_reviews` is ELECTRA pre-trained the same way on the Austen "
           "corpus plus the VADER study's other unlabelled snippets (13,098 Amazon reviews, "
           "NYT editorials and tweets; no movie sentence), one snippet per document"
           if FLAGS.with_reviews else "") + ".\n\n"
        + f"{100 * unseen['austen']:.1f}% of the dev sentences' word pieces never occur in "
        "the Austen pre-training data (their embeddings stay as initialised)"
        + (f"; {100 * unseen['austen_plus_reviews']:.1f}% with the review snippets added"
           if FLAGS.with_reviews else "") + ".\n\n"
        "ELECTRA pre-training health (discriminator AUC on the training batches, step: AUC): "
        + ", ".join(f"{step}: {auc:.2f}" for step, auc in curve["discriminator/auc"][4::5])
        + f"; generator MLM accuracy at the end "
        f"{curve['generator/mlm_accuracy'][-1][1]:.3f}.\n\n"
        "Dev scores: median (mean ± sample std) over the seeds, and every seed's accuracy.\n\n"
        + common.markdown_table(["initialisation"] + metrics + ["accuracy per seed"], rows_md)
        + "\n\nMedian dev accuracy against random initialisation: " + "; ".join(
            f"{name} {100 * gain:+.1f} points ({100 * r['median']['accuracy']:.1f}% -> "
            f"{100 * conditions[name]['median']['accuracy']:.1f}%)"
            for name, gain in record["median_accuracy_gain"].items()) + ".\n\n"
        f"Commit `{common._git('rev-parse', 'HEAD')}`"
        + (" plus the fine-tuning code, not yet committed then" if common._git(
            "status", "--porcelain", "--", "electra_tf/finetune", "scripts/run_finetuning.py")
           else "") + ". Commands (from the repository root):\n\n```\n"
        + "\n".join(commands) + "\n```\n")
    json_path, md_path = common.write_results(FLAGS.results_name, record, body)
    print(body)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    common.run(main)
