"""The study's two-level bootstrap (benchmarks/study/compare.py): differences of pooled
medians with intervals that account for the pre-training runs, not only the trials."""

import os
import statistics
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks", "study"))
import compare  # noqa: E402


def test_point_difference_is_of_the_pooled_medians():
    a = [[0.71, 0.74, 0.73], [0.70, 0.76, 0.72]]
    b = [[0.69, 0.73, 0.70], [0.75, 0.68, 0.71]]
    result = compare.difference(a, b, draws=2000)
    assert result["difference"] == pytest.approx(
        statistics.median(a[0] + a[1]) - statistics.median(b[0] + b[1]))
    assert result["runs"] == [2, 2] and result["draws"] == 2000
    assert result["low"] <= result["difference"] <= result["high"]


def test_interval_spans_the_runs_not_only_the_trials():
    """Two ELECTRA-like runs that disagree (every trial 0.70 in one, 0.80 in the other)
    against two runs at 0.75: the pooled medians are equal, and a replicate that draws the
    low run twice (a quarter of them) is 0.05 below; resampling trials alone would give 0."""
    a = [[0.70] * 5, [0.80] * 5]
    b = [[0.75] * 5, [0.75] * 5]
    result = compare.difference(a, b)
    assert result["difference"] == pytest.approx(0.0)
    assert result["low"] == pytest.approx(-0.05)
    assert result["high"] == pytest.approx(0.05)
    assert 0.2 < result["share_above"] < 0.3  # both draws of the high run: 1 in 4


def test_separated_configurations():
    a = [[0.80, 0.81, 0.79, 0.80], [0.82, 0.80, 0.81, 0.80], [0.79, 0.80, 0.81, 0.82]]
    b = [[0.70, 0.71, 0.69, 0.70], [0.72, 0.70, 0.71, 0.70], [0.69, 0.70, 0.71, 0.72]]
    result = compare.difference(a, b)
    assert result["share_above"] == 1.0
    assert 0.07 <= result["low"] <= result["difference"] <= result["high"] <= 0.13
    reverse = compare.difference(b, a)
    assert reverse["difference"] == pytest.approx(-result["difference"])
    assert reverse["share_above"] == 0.0


def test_one_run_per_side_resamples_trials_only():
    result = compare.difference([[0.8] * 5], [[0.7] * 4])
    assert result["low"] == pytest.approx(0.1) and result["high"] == pytest.approx(0.1)
    assert result["runs"] == [1, 1]


def test_same_seed_same_interval():
    a = [[0.70, 0.74, 0.73], [0.71, 0.76, 0.72]]
    b = [[0.72, 0.73, 0.70], [0.75, 0.68, 0.71]]
    assert compare.difference(a, b, seed=3) == compare.difference(a, b, seed=3)
    assert compare.difference(a, b, seed=3) != compare.difference(a, b, seed=4)


def test_runs_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="every run needs the same, non-zero number of "
                                         "trials"):
        compare.difference([[0.7, 0.8], [0.7]], [[0.7, 0.8]])
