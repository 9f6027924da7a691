"""What learning the generator/discriminator loss balance does, against the paper's fixed
1 : 50: the tiny config trained twice on the Austen corpus, once with the fixed weights and
once with `pretrainer.learn_loss_weights = True` (uncertainty weighting: total =
sum_i exp(-s_i) L_i + s_i, each s_i starting at -log(weight_i)).

    .venv/bin/python benchmarks/loss_balance.py        # about 20 minutes on 2 cores

Uncertainty weighting settles where d/ds (exp(-s) L + s) = 0, i.e. at weights 1 / L_i, so
the learned discriminator : generator ratio tends to L_generator / L_discriminator. Results:
benchmarks/results/loss_balance.{json,md,png}.
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
common.define_results_name("loss_balance")
FLAGS = flags.FLAGS
COMPARED = [("loss/discriminator", "discriminator loss"),
            ("discriminator/auc", "discriminator AUC"),
            ("generator/mlm_accuracy", "generator MLM accuracy")]


def main(argv):
    del argv
    if not FLAGS["work_dir"].present:
        FLAGS.work_dir = os.path.join(common.CACHE_DIR, "loss_balance")
    data_dir = os.path.join(FLAGS.work_dir, "data")
    common.build_austen_data(data_dir)
    runs = {"fixed 1 : 50": reference_curves.train("fixed", "tiny.gin", FLAGS.steps, data_dir),
            "learned": reference_curves.train("learned", "tiny.gin", FLAGS.steps, data_dir,
                                              ["pretrainer.learn_loss_weights = True"])}
    learned = runs["learned"]["train"]
    weights = {step: (g, d) for (step, g), (_, d) in zip(
        learned["loss/learned_generator_weight"], learned["loss/learned_discriminator_weight"])}
    losses = dict(learned["loss/generator"]), dict(learned["loss/discriminator"])
    trajectory = [[step, f"{g:.3f}", f"{d:.3f}", f"{d / g:.1f}",
                   f"{losses[0][step] / losses[1][step]:.1f}"]
                  for step, (g, d) in sorted(weights.items())[::max(len(weights) // 6, 1)]]
    rows = [[name, *[f"{run['eval'][tag][-1][1]:.3f}" for tag, _ in COMPARED]]
            for name, run in runs.items()]
    body = (common.markdown_table(["loss weights", *[f"eval {t}" for _, t in COMPARED]], rows)
            + "\n\nThe learned weights during training. Uncertainty weighting's optimum is "
            "weight = 1 / loss, i.e. a discriminator : generator ratio equal to L_gen / L_disc; "
            "the log-weights start at the paper's 1 : 50 and learn at the model's learning "
            "rate, so how far they get towards it in a run is the finding:\n\n"
            + common.markdown_table(["step", "generator weight", "discriminator weight",
                                     "discriminator : generator", "L_gen / L_disc"],
                                    trajectory)
            + f"\n\n![loss balance]({FLAGS.results_name}.png)\n\n- tiny.gin (LR 2e-4, Adam "
            f"with bias correction), batch 32, {FLAGS.steps} steps, warmup 100; evaluation on the "
            "held-out sixth shard.\n")
    record = {"title": "Learned loss balance vs the fixed 1 : 50 (tiny, Austen corpus)",
              "run": common.run_info(), "runs": runs}
    common.write_results(FLAGS.results_name, record, body)
    plot(runs, os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}.png"))
    print(body)


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    learned = runs["learned"]["train"]
    for tag, label in (("loss/learned_generator_weight", "generator"),
                       ("loss/learned_discriminator_weight", "discriminator")):
        steps, values = zip(*learned[tag])
        axes[0].plot(steps, values, label=label)
    axes[0].set_yscale("log")
    axes[0].set_title("learned weights exp(-s)")
    axes[0].legend()
    for axis, (tag, title) in zip(axes[1:], COMPARED[1:]):
        for name, run in runs.items():
            steps, values = zip(*run["eval"][tag])
            axis.plot(steps, values, "o-", markersize=3, label=name)
        axis.set_title(f"eval {title}")
        axis.legend()
    for axis in axes:
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    common.run(main)
