"""The study's plots (matplotlib, PNG): the downstream score against pre-training FLOPs for
ELECTRA and BERT (the paper's Figure 1 in miniature), and a bar chart per ablation."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"electra": "tab:blue", "mlm": "tab:orange"}
LABELS = {"electra": "ELECTRA", "mlm": "BERT (masked LM)"}


def _baseline(ax, baseline):
    if baseline:
        ax.axhline(baseline["median"], color="gray", linestyle="--", linewidth=1,
                   label=f"no pre-training ({baseline['median']:.3f})")


def _run_medians(config: dict, step: str) -> list[float]:
    """Each pre-training run's median at a checkpoint (run_study.py's `runs`; none for
    records without them)."""
    return [run["finetune"][step]["median"] for run in config.get("runs", {}).values()
            if step in run.get("finetune", {})]


def curve_plot(configs: dict, baseline: dict | None, curve_configs, path: str):
    """Median dev score at each fine-tuned checkpoint, against the checkpoint's pre-training
    FLOPs. Error bars: with one pre-training run, the min-max of its fine-tuning seeds; with
    several, the range of the runs' medians (each run's as a dot), the between-run spread
    that decides whether two curves differ."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    metric, several = "score", False
    for name in curve_configs:
        if name not in configs:
            continue
        finetune = configs[name]["finetune"]
        steps = sorted(finetune, key=lambda s: finetune[s]["flops"])
        points = [finetune[s] for s in steps]
        metric = points[0]["metric"]
        by_run = [_run_medians(configs[name], s) for s in steps]
        several = all(len(m) > 1 for m in by_run)
        spread = by_run if several else [p["per_seed"] for p in points]
        x = [p["flops"] for p in points]
        y = [p["median"] for p in points]
        low = [p["median"] - min(v) for p, v in zip(points, spread)]
        high = [max(v) - p["median"] for p, v in zip(points, spread)]
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3,
                    color=COLORS.get(name), label=LABELS.get(name, name))
        if several:
            for flops, medians in zip(x, by_run):
                ax.plot([flops] * len(medians), medians, ".", color=COLORS.get(name),
                        alpha=0.5, markersize=5)
    _baseline(ax, baseline)
    ax.set_xlabel("pre-training FLOPs")
    ax.set_ylabel(f"dev {metric}: median of all trials\n(bars, dots: the pre-training runs' "
                  "medians)" if several else
                  f"dev {metric} (median; bars: min-max over seeds)")
    ax.set_title("Downstream score vs pre-training compute")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bar_plot(configs: dict, baseline: dict | None, title: str, members, budget: float,
             path: str):
    """One bar per configuration of a study: its final checkpoint's median dev score, the
    seeds as dots."""
    present = [(name, label) for name, label in members if name in configs]
    finals = [configs[name]["finetune"][str(configs[name]["steps"])] for name, _ in present]
    fig, ax = plt.subplots(figsize=(1.3 * len(present) + 2.4, 4.2))
    xs = range(len(present))
    ax.bar(xs, [f["median"] for f in finals], color="tab:blue", alpha=0.75, width=0.6)
    for x, f in zip(xs, finals):
        ax.plot([x] * len(f["per_seed"]), f["per_seed"], "k.", markersize=4)
        ax.annotate(f"{f['median']:.3f}", (x, f["median"]), ha="center", va="bottom",
                    xytext=(0, 3), textcoords="offset points", fontsize=8)
    _baseline(ax, baseline)
    values = [v for f in finals for v in f["per_seed"]] + (
        [baseline["median"]] if baseline else [])
    low, high = min(values), max(values)
    margin = max(0.02, 0.15 * (high - low))
    # Bars start at the axis bottom, not at 0: the differences are what is compared.
    ax.set_ylim(max(0.0, low - margin), min(1.0, high + margin) if high <= 1 else high + margin)
    ax.set_xticks(list(xs), [label for _, label in present])
    metric = finals[0]["metric"] if finals else "score"
    ax.set_ylabel(f"dev {metric} (median; dots: seeds)")
    ax.set_title(f"{title}\n{budget:.2g} pre-training FLOPs each", fontsize=10)
    if baseline:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(configs: dict, baseline: dict | None, results_dir: str, stem: str,
                groups: dict, curve_configs, budget: float) -> list[str]:
    """Writes <stem>_curve.png (when a curve configuration ran) and <stem>_<study>.png for
    each study with a configuration that ran; returns the paths. A plot of these names
    that this grid does not make (left by another grid written to the same folder) is
    removed, so that the folder's plots are those of its study.{json,md}."""
    os.makedirs(results_dir, exist_ok=True)
    paths = []
    curve = os.path.join(results_dir, f"{stem}_curve.png")
    if any(name in configs for name in curve_configs):
        paths.append(curve)
        curve_plot(configs, baseline, curve_configs, paths[-1])
    for study, (title, members) in groups.items():
        if any(name in configs for name, _ in members):
            paths.append(os.path.join(results_dir, f"{stem}_{study}.png"))
            bar_plot(configs, baseline, title, members, budget, paths[-1])
    for stale in [curve] + [os.path.join(results_dir, f"{stem}_{s}.png") for s in groups]:
        if stale not in paths and os.path.exists(stale):
            os.remove(stale)
    return paths
