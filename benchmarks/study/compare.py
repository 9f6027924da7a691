"""How sure a difference between two configurations is, when both were pre-trained with
several seeds and each run fine-tuned with several seeds.

The scores are nested: trials within pre-training runs. Pooling the trials and comparing
medians hides the between-run spread (at the study's `cpu` scale the pre-training seed
alone moves a run's median by up to 3.9 points: benchmarks/results/study_five_seeds/), so
the interval here comes from a two-level bootstrap: resample the pre-training runs with
replacement, then each drawn run's trials with replacement, and take the difference of
the pooled medians. With one run per side only the trials are resampled and the
interval says nothing about pre-training seeds; with few runs it is coarse (2 runs give 3
distinct run draws), which is the point: it shows how much the runs can say.
"""

import numpy as np


def _pooled_medians(runs: list[list[float]], draws: int, rng) -> np.ndarray:
    """`draws` bootstrap replicates of the median of all trials of the resampled runs."""
    if not runs or len({len(r) for r in runs}) != 1 or not runs[0]:
        raise ValueError(f"every run needs the same, non-zero number of trials: {runs!r}")
    scores = np.asarray(runs, dtype=np.float64)  # (runs, trials)
    num_runs, num_trials = scores.shape
    picked = rng.integers(num_runs, size=(draws, num_runs, 1))
    trials = rng.integers(num_trials, size=(draws, num_runs, num_trials))
    return np.median(scores[picked, trials].reshape(draws, -1), axis=1)


def difference(a_runs: list[list[float]], b_runs: list[list[float]],
               draws: int = 10_000, seed: int = 0) -> dict:
    """The median of A's pooled trials minus B's, a 95% percentile interval from the
    two-level bootstrap, and the share of replicates in which A's median is above B's.
    `a_runs`, `b_runs`: one list of trial scores per pre-training run."""
    rng = np.random.default_rng(seed)
    replicates = _pooled_medians(a_runs, draws, rng) - _pooled_medians(b_runs, draws, rng)
    low, high = np.percentile(replicates, [2.5, 97.5])
    # Each side's runs have equal lengths (checked above): the median of the whole array
    # is that of the pooled trials.
    point = np.median(np.asarray(a_runs, np.float64)) - np.median(np.asarray(b_runs,
                                                                             np.float64))
    return {"difference": float(point), "low": float(low), "high": float(high),
            "share_above": float(np.mean(replicates > 0)),
            "runs": [len(a_runs), len(b_runs)], "draws": draws}
