"""Does joint training hold the generator back? The tiny config trained three ways on the
Austen corpus: the paper's joint training (embeddings shared, loss = MLM + 50 x RTD); the
same networks with the discriminator's weight at 0 (the generator learns alone, the
discriminator is carried along untrained); and joint training with nothing shared.

    .venv/bin/python benchmarks/generator_coupling.py        # about 20 minutes on 2 cores

Why: in every short run here (tiny on CPU, ELECTRA-Small on an H100) the discriminator's loss
settles at the entropy of the replaced share while the generator sits at a unigram-level
masked-LM loss. A generator that samples words by their frequency alone leaves the
discriminator no signal in the token itself: P(replaced | token) is the same for every
token, only the context tells. If the discriminator's 50x gradient through the shared
embeddings keeps the generator there, the generator alone (or with its own embeddings)
leaves that plateau sooner. Results: benchmarks/results/generator_coupling.{json,md,png}.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import flags  # noqa: E402

import common  # noqa: E402
import reference_curves  # noqa: E402  (the data and the runner)

flags.DEFINE_integer("steps", 1500, "Training steps of each run.")
common.define_results_name("generator_coupling")
FLAGS = flags.FLAGS

RUNS = [("joint (paper: embeddings shared, 1 : 50)", "joint", []),
        ("generator alone (discriminator weight 0)", "generator_alone",
         ["pretrainer.discriminator_weight = 0.0"]),
        ("joint, nothing shared", "sharing_none", ["pretrainer.sharing = 'none'"])]
COMPARED = [("loss/generator", "generator MLM loss"),
            ("generator/mlm_accuracy", "generator MLM accuracy"),
            ("loss/discriminator", "discriminator loss"),
            ("discriminator/auc", "discriminator AUC")]
DISCRIMINATOR_TAGS = ("loss/discriminator", "discriminator/auc")
# Runs whose discriminator is not trained: its columns and curves are left out.
UNTRAINED_DISCRIMINATOR = {label for label, name, _ in RUNS if name == "generator_alone"}


def main(argv):
    del argv
    if not FLAGS["work_dir"].present:
        FLAGS.work_dir = os.path.join(common.CACHE_DIR, "generator_coupling")
    data_dir = os.path.join(FLAGS.work_dir, "data")
    common.build_austen_data(data_dir)
    runs = {label: reference_curves.train(name, "tiny.gin", FLAGS.steps, data_dir, bindings)
            for label, name, bindings in RUNS}
    steps = [step for step, _ in runs[RUNS[0][0]]["eval"]["loss/generator"]]
    shown_steps = sorted({steps[0], steps[len(steps) // 3], steps[2 * len(steps) // 3],
                          steps[-1]})
    rows = []
    for label, run in runs.items():
        for step in shown_steps:
            cells = []
            for tag, _ in COMPARED:
                value = dict(run["eval"].get(tag, [])).get(step)
                untrained = label in UNTRAINED_DISCRIMINATOR and tag in DISCRIMINATOR_TAGS
                cells.append("-" if value is None or untrained else f"{value:.3f}")
            rows.append([label, step, *cells])
    body = (common.markdown_table(["run", "step", *[f"eval {t}" for _, t in COMPARED]], rows)
            + f"\n\n![generator coupling]({FLAGS.results_name}.png)\n\n- tiny.gin (2 layers, "
            "hidden 128; generator 1/4 wide), LR 2e-4, warmup 100, Adam with bias "
            f"correction, batch {FLAGS.batch_size} x seq 128, {FLAGS.steps} steps, seed 0; "
            "evaluation on the "
            "held-out sixth shard (20 batches). The discriminator columns of the generator-"
            "alone run are left out: its discriminator is not trained.\n")
    record = {"title": "Joint training and the generator (tiny, Austen corpus)",
              "run": common.run_info(), "runs": runs}
    common.write_results(FLAGS.results_name, record, body)
    plot(runs, os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}.png"))
    print(body)


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED), 3.8))
    colours = dict(zip(runs, ("tab:blue", "tab:orange", "tab:green")))
    for axis, (tag, title) in zip(axes, COMPARED):
        for label, run in runs.items():
            if tag in DISCRIMINATOR_TAGS and label in UNTRAINED_DISCRIMINATOR:
                continue
            steps, values = zip(*run["eval"][tag])
            axis.plot(steps, values, "o-", markersize=3, color=colours[label], label=label)
        axis.set_title(f"eval {title}")
        axis.set_xlabel(f"step (batch {FLAGS.batch_size}, seq 128)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    common.run(main)
