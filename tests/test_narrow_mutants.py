"""Narrow rules that fresh draws of benchmarks/mutation.py (seeds 7 and 8) let through, each checked as a property
against an independent computation: the jury's power (scipy's noncentral t), the cross-fitted predictor's
centring and degrees of freedom (its invariances, and the two-system case against the level fit), the active
design's leverage (the estimate's invariance to the judge's units), the audit's t interval on an infinite standard
error, drift's changed-share rule when the excess is exactly 0, the pairwise fit's fallback past separation, and
(from the seed-9 draw) a cascade that chooses its first step and the CSVs escalate writes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.power import dialogues_needed
from calibration.study.ppi import MIN_LABELLED
from calibration.study.ppi_weighted import ppi_mean_weighted
from calibration.study.predictor import cross_fitted_prediction
from calibration.trust import drift as drift_module
from calibration.trust.dialogues import Dialogues

# -- power: the jury's variance share --------------------------------------------------------------------------------

def _smallest_n(effect, power, alpha, rho, judged):
    """The smallest n from MIN_LABELLED whose paired t test, with variance share 1 - rho^2 (N - n) / N, reaches
    `power`: scipy's noncentral t, counted one n at a time."""
    for n in range(MIN_LABELLED, judged + 1):
        share = 1.0 - rho ** 2 * (judged - n) / judged
        critical = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = abs(effect) * math.sqrt(n / share)
        if stats.nct.sf(critical, n - 1, nc) + stats.nct.cdf(-critical, n - 1, nc) >= power:
            return n
    return None


@pytest.mark.parametrize("effect, rho, judged", [(0.4, 0.5, 300), (0.3, 0.8, 500), (0.6, 0.3, 200), (0.5, 0.0, 100)])
def test_a_jurys_dialogues_needed_is_the_noncentral_t_count_with_rho_squared_removed(effect, rho, judged):
    expected = _smallest_n(effect, 0.8, 0.05, rho, judged)
    assert dialogues_needed(effect, 0.8, 0.05, rho=rho, n_judged=judged, combined=True) == expected
    # A better jury needs no more labels (and a correlation's sign does not matter: rho enters squared).
    assert dialogues_needed(effect, 0.8, 0.05, rho=-rho, n_judged=judged, combined=True) == expected


# -- the cross-fitted predictor -------------------------------------------------------------------------------------

def _jury(dialogues=14, systems=3, predictors=2, seed=0):
    rng = np.random.default_rng(seed)
    quality = rng.normal(0, 1, (dialogues, systems))
    x = quality[..., None] + rng.normal(0, 0.5, (dialogues, systems, predictors))
    y = 3 + quality + rng.normal(0, 0.3, (dialogues, systems))
    return x, y


def test_a_systems_level_is_not_what_the_predictor_learns_even_from_one_training_row():
    """The regression is within systems: adding a constant to one system's labels changes no prediction. Here
    system 2 is labelled on two dialogues only, so the fold holding one of them out trains on a single row of it,
    whose own label is its system's mean (its centred label is 0, whatever the constant)."""
    x, y = _jury()
    y[2:, 2] = np.nan
    base = cross_fitted_prediction(x, y)
    for constant in (5.0, -2.5):
        shifted = y.copy()
        shifted[:, 2] += constant
        np.testing.assert_allclose(cross_fitted_prediction(x, shifted), base, rtol=1e-9, atol=1e-9)
    assert np.std(base[:, :2]) > 0.1  # the jury is used, so a leak of the constant would move it


@pytest.mark.parametrize("seed", range(6))
def test_with_two_systems_the_predictor_of_differences_is_the_level_fit_of_half_the_difference(seed):
    """Two systems, centred on each dialogue: each dialogue gives +d/2 and -d/2, one row of information and one
    system mean. So the contrasts fit of system 1 is the ordinary (level) fit of a single system whose label is
    (y1 - y2) / 2 and whose predictors are (x1 - x2) / 2, and system 2's is its negative."""
    x, y = _jury(dialogues=12, systems=2, predictors=4, seed=seed)
    y[9:] = np.nan  # 9 labelled dialogues: few enough that the degrees of freedom steer the ridge penalty
    contrasts = cross_fitted_prediction(x, y, contrasts=True)
    level = cross_fitted_prediction((x[:, :1] - x[:, 1:]) / 2, (y[:, :1] - y[:, 1:]) / 2)
    np.testing.assert_allclose(contrasts[:, 0], level[:, 0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(contrasts[:, 1], -level[:, 0], rtol=1e-9, atol=1e-12)


# -- the active design's PPI++: the judge's units do not matter -----------------------------------------------------

@pytest.mark.parametrize("scale, shift", [(10.0, 0.0), (0.1, 3.0), (-2.0, 1.0)])
def test_the_active_estimate_and_its_interval_do_not_depend_on_the_judges_units(scale, shift):
    """lambda rescales with the judge, so the estimate and every variance term (the leverage of the unlabelled mean
    among them: a squared distance over a variance) are the same for a x f + b."""
    rng = np.random.default_rng(5)
    dialogues = 300
    f = rng.normal(3, 1, dialogues)
    y = f + rng.normal(0, 0.6, dialogues)
    inclusion = np.clip(0.05 + 0.1 * np.abs(f - 3), 0.05, 0.5)
    labelled = rng.random(dialogues) < inclusion
    human = np.where(labelled, y, np.nan)
    base = ppi_mean_weighted(human, f, inclusion)
    moved = ppi_mean_weighted(human, scale * f + shift, inclusion)
    assert base.lam != 0  # the judge is used: the leverage term is in the interval
    assert moved.estimate == pytest.approx(base.estimate, rel=1e-9)
    assert moved.se == pytest.approx(base.se, rel=1e-9)
    assert moved.var_residual == pytest.approx(base.var_residual, rel=1e-9)


# -- the audit's t interval ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("estimate, se", [(0.2, math.inf), (math.inf, 0.1), (0.2, math.nan), (math.nan, 0.1)])
def test_no_t_interval_from_an_infinite_or_undefined_estimate_or_error(estimate, se):
    low, high = Dialogues([f"d{i}" for i in range(10)], 200, 0).t_interval(estimate, se, 10)
    assert math.isnan(low) and math.isnan(high)


def test_the_t_interval_is_the_expanded_t_over_dialogues():
    ids = [f"d{i}" for i in range(10)]
    low, high = Dialogues(ids, 200, 0).t_interval(0.2, 0.1, 10)
    half = math.sqrt(10 / 9) * stats.t.ppf(0.975, 9) * 0.1
    assert (low, high) == pytest.approx((0.2 - half, 0.2 + half))


# -- drift: the changed share at exactly its re-ask noise ----------------------------------------------------------

def test_a_change_exactly_at_the_reask_noise_is_not_drift():
    """Each verdict changes between runs exactly as often as its own re-asks disagree (0.5 and 0.5): the excess
    over the noise is 0 in every dialogue and every resample, so its lower bound is exactly 0 and the share rule
    does not fire. The scores move a lot both ways (mean shift near 0, interval too wide to call them equivalent):
    the shift rule decides nothing either, so the verdict is inconclusive, not DRIFT."""
    rng = np.random.default_rng(2)
    rows = [{"item_id": f"d{i:02d}", "system": s, "criterion": "c", "status_ref": "ok", "status_new": "ok",
             "score_ref": 3.0, "score_new": 3.0 + rng.normal(0, 2), "changed": 0.5, "noise": 0.5}
            for i in range(30) for s in ("a", "b")]
    row = drift_module._criterion_row(pd.DataFrame(rows), None, 0.5, 0.25, 0.1, 1000, 0, 0.95)
    assert row["ci_low"] < 0 < row["ci_high"]  # the shift rule alone does not call it drift
    assert not (-0.25 < row["tost_low"] and row["tost_high"] < 0.25)  # nor equivalent
    assert row["verdict"] == "inconclusive"


@pytest.mark.parametrize("judged", [None, 0, 1, 2])
def test_a_judge_without_enough_judged_dialogues_needs_no_count(judged):
    """PPI needs the judged set (and an interval needs MIN_LABELLED labels of it): no answer, not an error."""
    assert dialogues_needed(0.5, rho=0.7, n_judged=judged) is None
    assert dialogues_needed(0.5, rho=0.7, n_judged=judged, combined=True) is None


# -- pairwise: the fallback when the PPI fit cannot converge ----------------------------------------------------------

def test_a_ppi_fit_the_judge_pushes_past_separation_falls_back_to_the_humans_strength():
    """Two systems, one pair per dialogue. Humans say b loses 11 of 12 labelled pairs; the judge says b wins every
    labelled pair and loses every unlabelled one. The PPI mean vote, mean_L(h) + lambda (mean_U(f) - mean_L(f)), is
    then above 1 for every lambda from 1/12 on: no finite strength (Newton diverges). The fit must fall back along
    lambda / 2, lambda / 4, 0 to the human-only one, whose strength is the log-odds of the votes: -log(11)."""
    from calibration.study.bradley_terry import bradley_terry
    from calibration.study.pairs import Pairs

    dialogues, labelled = 30, 12
    human = np.full(dialogues, np.nan)
    human[:labelled] = 1.0  # P(first = a wins)
    human[0] = 0.0
    judge = np.where(np.arange(dialogues) < labelled, 0.0, 1.0)
    data = Pairs("q", ["a", "b"], np.zeros(dialogues, int), np.ones(dialogues, int), np.arange(dialogues),
                 np.array([f"d{i}" for i in range(dialogues)]), judge, human)
    fit = bradley_terry(data, 0, 0.95)
    assert fit.ok and fit.lam == 0.0
    assert fit.theta[1] == pytest.approx(-math.log(11.0), rel=1e-8)
    assert fit.theta == pytest.approx(bradley_terry(data, 0, 0.95, human_only=True).theta)


# -- the cascade: a path whose first step is the one chosen -----------------------------------------------------------

def test_a_cascade_that_rejects_only_its_first_step_uses_that_steps_threshold():
    """Two steps (q = 1/2, 1): the judge is right above confidence 0.5 and mostly wrong below, so only the first
    step's disagreement rate is shown below alpha. Its threshold is the pool's confidence that half the pool reaches
    (the m/2-th largest), and its p-value the binomial tail of its disagreements (scipy)."""
    from calibration.cascade.threshold_tests import fit_cascade

    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, (400, 1))
    agree = (conf[:, 0] > 0.5) | (rng.random(400) < 0.3)
    pool = rng.uniform(0, 1, (2000, 1))
    fit = fit_cascade(conf, agree[:, None], pool, 0.1, 0.1, steps=2)
    threshold = np.sort(pool[:, 0])[::-1][1000 - 1]
    assert fit.chosen == 0 and list(fit.path["rejected"]) == [True, False]
    assert fit.thresholds[0] == pytest.approx(threshold)
    accepted = conf[:, 0] >= threshold
    errors = int((accepted & ~agree).sum())
    assert fit.path["p_value"].iloc[0] == pytest.approx(stats.binom.cdf(errors, int(accepted.sum()), 0.1))


def test_every_csv_escalate_writes_is_its_table_without_an_index_column():
    """Each CSV read back is the table it was written from: its columns, no unnamed index column in front."""
    import io

    import calibration

    rng = np.random.default_rng(8)
    truth = rng.integers(1, 6, 200)
    judge = pd.DataFrame({"item_id": [f"i{i}" for i in range(200)], "system": "s", "criterion": "c",
                          "score": np.where(rng.random(200) < 0.8, truth, rng.integers(1, 6, 200)).astype(float)})
    labels = pd.DataFrame({"item_id": [f"i{i}" for i in range(100)], "system": "s", "annotator": "h",
                           "criterion": "c", "score": truth[:100]})
    result = calibration.escalate(labels, {"one": judge}, alpha=0.2, delta=0.1)
    tables = {"thresholds.csv": result.thresholds, "path.csv": result.path, "risk_coverage.csv": result.risk_coverage,
              "signals.csv": result.signals, "cost.csv": result.cost, "pending.csv": result.pending}
    files = result.files()
    for name, table in tables.items():
        read = pd.read_csv(io.StringIO(files[name])) if files[name].strip() else pd.DataFrame()
        assert list(read.columns) == [str(c) for c in table.columns], name
        assert len(read) == len(table), name


@pytest.mark.parametrize("confidence, accepted", [(0.5, True), (0.52, True), (0.99, True), (0.49, False),
                                                  (1.0, False)])
def test_drift_takes_every_confidence_its_message_promises(confidence, accepted):
    """Seed-9 survivor (drift.py, 0.5 -> 0.55): the refusal says "between 0.5 and 1", so 0.5 itself and 0.52 run."""
    from calibration.errors import CalibrationError

    if accepted:
        drift_module._check_options(0.25, 0.1, 1000, confidence)
    else:
        with pytest.raises(CalibrationError, match="--confidence must be between 0.5 and 1"):
            drift_module._check_options(0.25, 0.1, 1000, confidence)


@pytest.mark.parametrize("human, judge, expected", [
    ([np.nan], [3.0], 1.0),  # one judged dialogue, unlabelled: m / (n + m) = 1
    ([4.0], [3.0], 0.0),  # one judged dialogue, labelled: 0
    ([np.nan, 2.0, np.nan], [3.0, 1.0, 2.0], 2 / 3),
    ([np.nan, 2.0, 5.0], [np.nan, 1.0, np.nan], 0.0),  # a label without a judgment is no unit
    ([np.nan], [np.nan], 0.0)])  # nothing judged
def test_the_cross_fitted_predictors_lambda_is_the_unlabelled_share_of_the_judged_dialogues(human, judge, expected):
    """cross_prediction_lambda = m / (n + m) over the judged dialogues (its docstring), down to a single one
    (written after the seed-19 draw let n + m > 0 become n + m > 1)."""
    from calibration.study.predictor import cross_prediction_lambda

    got = cross_prediction_lambda(np.array([human]), np.array([judge]))
    assert got == pytest.approx([expected])


@pytest.mark.parametrize(("unconnected", "listed"), [(3, "c, d, e to the baseline"),
                                                     (4, "c, d, e ... to the baseline")])
def test_the_human_only_note_lists_three_unconnected_systems_and_marks_only_more(unconnected, listed):
    # Labelled pairs join a and b only; c, d, ... are met by the judge alone. Exactly three unconnected systems are
    # all named; a fourth is left to " ...".
    from calibration.study.bradley_terry import bradley_terry
    from calibration.study.pairs import Pairs

    systems = ["a", "b", "c", "d", "e", "f"][: 2 + unconnected]
    first, second = [], []
    for other in range(1, len(systems)):
        first += [0] * 4
        second += [other] * 4
    n = len(first)
    human = np.full(n, np.nan)
    human[:4] = [1.0, 0.0, 1.0, 1.0]  # only the a-b pairs are labelled
    data = Pairs("q", systems, np.array(first), np.array(second), np.arange(n),
                 np.array([f"d{i}" for i in range(n)]), np.full(n, 0.6), human)
    fit = bradley_terry(data, 0, 0.95, human_only=True)
    assert not fit.ok and fit.note == f"the labelled pairs do not connect {listed}: no human-only strength"
