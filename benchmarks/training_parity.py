"""Training-dynamics parity with transformers' PyTorch ELECTRA: the same tiny ELECTRA trained
here and there on the same batches (the Austen corpus through our input pipeline), with the
same optimizer semantics, and their curves side by side. The forward passes are tested equal
(tests/test_parity.py); this checks that training ELECTRA end to end (sampling, labels,
losses, gradients, clipping, schedule) behaves the same.

    .venv/bin/python benchmarks/training_parity.py        # about 25 minutes on 2 cores
    .venv/bin/python benchmarks/training_parity.py --seeds=0   # one seed, about 10 minutes

Runs (tiny.gin's shapes: discriminator 2 x 128, generator 1/4, shared embeddings; batch 32,
seq 128, warmup 100 steps, linear decay, global-norm clip 1.0, weight decay 0.01 except
LayerNorm and biases):
- ours: scripts/run_pretraining.py with tiny.gin (Adam with bias correction, LR 2e-4);
- transformers: ElectraForPreTraining + ElectraForMaskedLM (tied embeddings), torch AdamW
  (which corrects the bias), the same schedule; MLM logits at the masked positions only;
- ours, official optimizer: the same run with the official Adam (no bias correction), first
  seed only.
Each framework runs once per --seeds value (its initialisation, data order, masks, samples and
dropout; both frameworks read the same batches for a seed), so the gap between them can be
read against the spread between seeds. Each curve point is the mean over a window of
--window steps (AUC over the window's tokens).
Results: benchmarks/results/training_parity.{json,md,png}.
"""

import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags  # noqa: E402

import common  # noqa: E402

flags.DEFINE_integer("steps", 600, "Training steps of each run.")
flags.DEFINE_integer("window", 50, "Steps per curve point.")
flags.DEFINE_float("learning_rate", 2e-4, "Peak learning rate of all runs.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds to run both frameworks with.")
flags.DEFINE_string("work_dir", os.path.join(common.CACHE_DIR, "training_parity"),
                    "Where data and model dirs go.")
common.define_results_name("training_parity")
FLAGS = flags.FLAGS
VOCAB = common.AUSTEN_VOCAB
WARMUP = 100
OURS, THEIRS = "ours", "transformers (PyTorch)"
OFFICIAL = "ours, official Adam (no bias correction)"
CURVES = [("discriminator/auc", "discriminator AUC (train)"),
          ("loss/generator", "generator MLM loss"),
          ("loss/discriminator", "discriminator loss")]


def train_ours(name: str, data: str, bias_correction: bool, seed: int) -> dict:
    from electra_tf.training.summaries import read_scalars
    model_dir = os.path.join(FLAGS.work_dir, f"{name}-seed{seed}")
    if os.path.exists(model_dir):
        subprocess.run(["rm", "-rf", model_dir], check=True)
    subprocess.run([
        sys.executable, os.path.join(common.REPO, "scripts", "run_pretraining.py"),
        "--gin_file=tiny.gin", f"--model_dir={model_dir}", f"--train_data={data}",
        f"--gin_bindings=NUM_TRAIN_STEPS={FLAGS.steps}",
        f"--gin_bindings=STEPS_PER_LOOP={FLAGS.window}",
        f"--gin_bindings=CHECKPOINT_EVERY={FLAGS.steps}",
        f"--gin_bindings=LEARNING_RATE={FLAGS.learning_rate}",
        f"--gin_bindings=WARMUP_STEPS={WARMUP}",
        f"--gin_bindings=optimizer.bias_correction={bias_correction}", f"--seed={seed}"],
        check=True, capture_output=True)
    scalars = read_scalars(os.path.join(model_dir, "train"))
    return {tag: [v for _, v in scalars[tag]] for tag, _ in CURVES}


def auc(labels, scores) -> float:
    import numpy as np
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positive = labels == 1
    n1, n0 = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n1 * (n1 + 1) / 2) / max(n1 * n0, 1))


def train_transformers(data: str, seed: int) -> dict:
    import numpy as np
    import tensorflow as tf
    import torch
    import torch.nn.functional as F
    import transformers

    from electra_tf.data.pipeline import pretraining_dataset

    tf.config.set_visible_devices([], "GPU")
    torch.manual_seed(seed)
    torch.set_num_threads(os.cpu_count())
    dataset = pretraining_dataset(data, 32, 128, VOCAB, seed=seed)

    def config(hidden, heads, ffn):
        return transformers.ElectraConfig(
            vocab_size=30522, embedding_size=128, hidden_size=hidden, num_hidden_layers=2,
            num_attention_heads=heads, intermediate_size=ffn, hidden_act="gelu")

    disc = transformers.ElectraForPreTraining(config(128, 2, 512))
    gen = transformers.ElectraForMaskedLM(config(32, 1, 128))
    # The official initialisation, as ours: Glorot uniform for the layers the official code
    # builds without an initializer, N(0, 0.02) truncated at two standard deviations for the
    # other weights (transformers draws them all from the untruncated normal, and zeroes the
    # [PAD] embedding), biases zero and LayerNorm one as transformers sets them.
    glorot = {id(getattr(layer, name).weight)
              for layer in (disc.electra, gen.electra, disc.discriminator_predictions)
              for name in ("embeddings_project", "dense_prediction") if hasattr(layer, name)}
    for module in (*disc.modules(), *gen.modules()):
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            if id(module.weight) in glorot:
                torch.nn.init.xavier_uniform_(module.weight)
            else:
                torch.nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    named = {id(p): (n, p) for m in (disc, gen) for n, p in m.named_parameters()}.values()
    decay = [p for n, p in named if "LayerNorm" not in n and "bias" not in n]
    no_decay = [p for n, p in named if "LayerNorm" in n or "bias" in n]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=FLAGS.learning_rate, eps=1e-6)
    steps = FLAGS.steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (1 - min(s, steps) / steps) * min(1.0, s / WARMUP))
    curves = {tag: [] for tag, _ in CURVES}
    window = []
    for step, batch in enumerate(dataset.take(steps)):
        b = {k: torch.from_numpy(v.numpy()) for k, v in batch.items()}
        ids, mask = b["input_ids"].long(), b["input_mask"].long()
        segments, positions = b["segment_ids"].long(), b["masked_lm_positions"].long()
        masked_ids, weights = b["masked_lm_ids"].long(), b["masked_lm_weights"]
        real = weights > 0
        original = ids.scatter(1, positions,
                               torch.where(real, masked_ids, ids.gather(1, positions)))
        hidden = gen.electra(ids, attention_mask=mask, token_type_ids=segments).last_hidden_state
        hidden = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = gen.generator_lm_head(gen.generator_predictions(hidden))
        mlm = (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), masked_ids.reshape(-1),
                               reduction="none").view_as(weights) * weights).sum() / weights.sum()
        with torch.no_grad():
            uniform = torch.rand_like(logits).clamp_(min=1e-9)
            sampled = torch.argmax(logits - torch.log(-torch.log(uniform)), -1)
            fake = original.scatter(1, positions,
                                    torch.where(real, sampled, original.gather(1, positions)))
            labels = (fake != original).float()
        disc_logits = disc(fake, attention_mask=mask, token_type_ids=segments).logits
        m = mask.float()
        disc_loss = (F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
                     * m).sum() / m.sum()
        optimizer.zero_grad()
        (mlm + 50 * disc_loss).backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        optimizer.step()
        schedule.step()
        selected = mask.numpy().astype(bool)
        window.append((labels.numpy()[selected], disc_logits.detach().numpy()[selected],
                       float(mlm), float(disc_loss)))
        if (step + 1) % FLAGS.window == 0:
            curves["discriminator/auc"].append(auc(np.concatenate([w[0] for w in window]),
                                                   np.concatenate([w[1] for w in window])))
            curves["loss/generator"].append(float(np.mean([w[2] for w in window])))
            curves["loss/discriminator"].append(float(np.mean([w[3] for w in window])))
            window = []
    return curves


def main(argv):
    del argv
    seeds = list(dict.fromkeys(int(s) for s in FLAGS.seeds))
    if not seeds:
        raise app.UsageError("--seeds is empty: give at least one seed, e.g. --seeds=0")
    data_dir = os.path.join(FLAGS.work_dir, "data")
    common.build_austen_data(data_dir)
    data = os.path.join(data_dir, "pretrain_data-0000[0-4]-of-*")
    by_seed = {OURS: {}, THEIRS: {}}
    for seed in seeds:
        by_seed[OURS][seed] = train_ours("ours", data, True, seed)
        by_seed[THEIRS][seed] = train_transformers(data, seed)
    runs = {OURS: by_seed[OURS][seeds[0]], THEIRS: by_seed[THEIRS][seeds[0]],
            OFFICIAL: train_ours("official", data, False, seeds[0])}
    steps = [FLAGS.window * (i + 1) for i in range(FLAGS.steps // FLAGS.window)]
    rows = []
    for i, step in enumerate(steps):
        rows.append([step] + [f"{runs[name][tag][i]:.3f}" for tag, _ in CURVES for name in runs])
    header = ["step"] + [f"{title}: {name}" for _, title in CURVES for name in runs]
    body = f"Seed {seeds[0]}:\n\n" + common.markdown_table(header, rows)
    if len(seeds) > 1:
        body += (f"\n\nOver seeds {', '.join(map(str, seeds))}: mean [min, max] of each "
                 "framework, and the gap between their means:\n\n" + spread_table(by_seed, steps))
    body += (f"\n\n![training parity]({FLAGS.results_name}.png)\n\n- tiny.gin shapes, batch 32 x "
             f"seq 128, the same batches (our pipeline, keyed by the seed) for both frameworks, "
             f"LR {FLAGS.learning_rate:g}, warmup {WARMUP}, linear decay to {FLAGS.steps}, "
             f"clip 1.0; each point is over {FLAGS.window} steps (AUC over the window's real "
             "tokens). Both start from the official initialisation's distributions (Glorot "
             "uniform for the generator's embedding projection and the discriminator's output "
             "layer, normal 0.02 truncated at two standard deviations elsewhere); the draws, "
             "dropout and sampling noise differ.\n")
    record = {"title": "Training dynamics: ours vs transformers' PyTorch ELECTRA (tiny, CPU)",
              "run": common.run_info(), "steps": steps, "seeds": seeds, "runs": runs,
              "runs_by_seed": {name: {str(k): v for k, v in curves.items()}
                               for name, curves in by_seed.items()}}
    common.write_results(FLAGS.results_name, record, body)
    plot(runs, by_seed if len(seeds) > 1 else None, steps,
         os.path.join(common.RESULTS_DIR, f"{FLAGS.results_name}.png"))
    print(body)


def spread_table(by_seed: dict, steps: list) -> str:
    """Per curve point: each framework's mean [min, max] over the seeds, and the gap between
    the means."""
    import numpy as np
    header, rows = ["step"], [[step] for step in steps]
    for tag, title in CURVES:
        header += [f"{title}: {OURS}", f"{title}: {THEIRS}", f"{title}: gap (ours - transformers)"]
        values = {name: np.array([curves[tag] for curves in by_seed[name].values()])
                  for name in (OURS, THEIRS)}
        for i, row in enumerate(rows):
            for name in (OURS, THEIRS):
                column = values[name][:, i]
                row.append(f"{column.mean():.3f} [{column.min():.3f}, {column.max():.3f}]")
            row.append(f"{values[OURS][:, i].mean() - values[THEIRS][:, i].mean():+.3f}")
    return common.markdown_table(header, rows)


def plot(runs, by_seed, steps, path):
    """The first seed's curves; with several seeds, each framework's min-max band too."""
    import matplotlib
    import numpy as np
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    styles = ["o-", "s--", "^:"]
    for axis, (tag, title) in zip(axes, CURVES):
        for style, (name, curves) in zip(styles, runs.items()):
            line, = axis.plot(steps, curves[tag], style, markersize=4, label=name)
            if by_seed and name in by_seed:
                values = np.array([c[tag] for c in by_seed[name].values()])
                axis.fill_between(steps, values.min(0), values.max(0), alpha=0.2,
                                  color=line.get_color())
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if by_seed:
        figure.suptitle(f"lines: seed {next(iter(by_seed[OURS]))}; bands: min to max over "
                        f"{len(by_seed[OURS])} seeds", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    common.run(main)
