"""Helpers of `judge select` (calibration.trust.select) against independent computations, on tables of inputs
that reach each branch: which dialogues can give a summary-level correlation, the jury's mean of the judges
present, the standardised scores, and the labels a judge saves (adjusted r^2 from scipy's Pearson r). Written
after fresh draws of benchmarks/mutation.py left survivors on these edges."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.trust.select import MIN_DIALOGUES, _mean_of_present, _standardise, _varying, _worth

nan = np.nan


def test_a_dialogue_varies_when_two_or_more_present_scores_differ():
    matrix = np.array([[1.0, 2.0, nan], [1.0, nan, nan], [3.0, 3.0, 3.0], [1.0, 2.0, 3.0], [nan, nan, nan],
                       [2.0, nan, 2.0], [nan, 5.0, 4.0]])
    assert _varying(matrix).tolist() == [True, False, False, True, False, False, True]


def test_the_jury_is_the_mean_of_the_judges_that_scored_each_cell():
    stacked = np.array([[[1.0, nan], [nan, nan]], [[3.0, 2.0], [nan, 4.0]]])
    out = _mean_of_present(stacked)
    assert out[0, 0] == 2.0 and out[0, 1] == 2.0 and np.isnan(out[1, 0]) and out[1, 1] == 4.0


def test_standardised_scores_have_mean_0_and_sd_1_over_the_present_cells():
    matrix = np.array([[1.0, 4.0, nan], [2.0, 7.0, 3.0]])
    z = _standardise(matrix)
    values = matrix[~np.isnan(matrix)]
    np.testing.assert_allclose(z[~np.isnan(matrix)], (values - values.mean()) / values.std())
    assert np.isnan(z[0, 2])


@pytest.mark.parametrize("dialogues", [MIN_DIALOGUES - 1, MIN_DIALOGUES, 12, 40])
def test_labels_saved_are_100_times_the_mean_adjusted_r2_over_systems(dialogues):
    rng = np.random.default_rng(dialogues)
    human = rng.normal(size=(dialogues, 3))
    judge = human * np.array([1.0, 0.5, 0.0]) + rng.normal(size=(dialogues, 3))
    judge[0, 1] = nan  # one system judged on a dialogue fewer
    saved = _worth(judge, human)
    adjusted = []
    for s in range(3):
        ok = ~np.isnan(judge[:, s])
        n = ok.sum()
        if n < MIN_DIALOGUES:
            continue
        r = stats.pearsonr(judge[ok, s], human[ok, s])[0]
        adjusted.append(max(0.0, 1 - (1 - r ** 2) * (n - 1) / (n - 2)))
    if adjusted:
        assert saved == pytest.approx(100 * np.mean(adjusted))
    else:
        assert np.isnan(saved)


def test_a_judge_without_a_statistic_on_the_fitting_half_is_never_the_cross_fitted_pick():
    """A constant judge has no correlation on either half (NaN, counted as 0): the judge that agrees with humans
    is picked on both halves, so the cross-fitted best is its standardised scores everywhere. Written after the
    seed-11 draw let the stand-in for NaN become 1.0 (the constant judge picked)."""
    from calibration.trust.select import BEST_PICKED, _cross_fitted

    rng = np.random.default_rng(4)
    human = rng.normal(3, 1, (30, 3))
    scores = {"good": human + rng.normal(0, 0.5, human.shape), "flat": np.full(human.shape, 3.0)}
    items, systems = np.array([f"d{i}" for i in range(30)]), np.array(["a", "b", "c"])
    out = _cross_fitted(scores, human, items, systems, "summary", "pearson", 0, 200)
    np.testing.assert_allclose(out[BEST_PICKED], _standardise(scores["good"]))
