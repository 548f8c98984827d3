"""Properties of `judge drift` (calibration.trust.drift) that whole families of bugs break: the shift's interval and
TOST interval as dialogue-clustered t intervals written out, the change in agreement with humans from
frequency-weighted Pearson r per resample, the changed share's interval widened to statsmodels' Clopper-Pearson;
re-ask and cross-run disagreement counted over every pair of samples by brute force; Stuart-Maxwell on two
categories as McNemar's statistic by hand; and invariances (the runs swapped: the shift and its interval mirrored;
rows reordered: nothing moves).

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py, not against any one."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from resampling import counts_from_seed, expanded
from scipy import stats
from test_drift import simulated_runs

from calibration.trust.drift import _across, _stuart_maxwell, _within, drift


def weighted_r(x, y, w):
    c = np.cov(np.asarray(x, float), np.asarray(y, float), aweights=w)
    return c[0, 1] / np.sqrt(c[0, 0] * c[1, 1])


@pytest.fixture(scope="module")
def runs():
    return simulated_runs(np.random.default_rng(41), n_items=25, shift=0.3)


def test_the_shift_and_its_intervals_are_dialogue_clustered_t_intervals(runs):
    """The ratio of sums linearised per dialogue, its cluster-robust standard error and t over dialogues - 1, written
    out (tests/test_drift_guards.py checks the same against statsmodels)."""
    reference, new = runs
    confidence = 0.9
    row = drift(reference, new, bootstrap=400, seed=3, confidence=confidence).drift.iloc[0]
    shift = pd.DataFrame({"item_id": reference["item_id"], "shift": new["score"] - reference["score"]})
    per = shift.groupby("item_id")["shift"].agg(["sum", "size"])
    g, total, mean = len(per), per["size"].sum(), shift["shift"].mean()
    se = np.sqrt(g / (g - 1) * ((per["sum"] - mean * per["size"]) ** 2).sum()) / total
    assert row["mean_shift"] == pytest.approx(mean)
    for level, low, high in ((confidence, "ci_low", "ci_high"), (2 * confidence - 1, "tost_low", "tost_high")):
        half = stats.t.ppf(0.5 + level / 2, g - 1) * se
        assert (row[low], row[high]) == pytest.approx((mean - half, mean + half), abs=1e-12)
    assert row["n"] == len(reference) and row["n_dialogues"] == g


def test_the_change_in_agreement_with_humans_is_the_resampled_difference_of_weighted_r(runs):
    reference, new = runs
    rng = np.random.default_rng(42)
    labels = reference[["item_id", "system", "criterion"]].assign(
        annotator="a", score=np.clip(np.round(reference["score"] + rng.normal(0, 0.8, len(reference))), 1, 5))
    row = drift(reference, new, labels, bootstrap=300, seed=5, scale=(1, 5)).drift.iloc[0]
    human = labels["score"].to_numpy(float)
    r_ref = stats.pearsonr(reference["score"], human)[0]
    r_new = stats.pearsonr(new["score"], human)[0]
    assert row["human_r_reference"] == pytest.approx(r_ref) and row["human_r_new"] == pytest.approx(r_new)
    assert row["human_r_change"] == pytest.approx(r_new - r_ref)
    dialogues = sorted(reference["item_id"].unique())
    counts = counts_from_seed(5, len(dialogues), 300)
    position = reference["item_id"].map({d: k for k, d in enumerate(dialogues)}).to_numpy()
    change = np.array([weighted_r(new["score"], human, w[position]) - weighted_r(reference["score"], human,
                                                                                  w[position]) for w in counts])
    assert (row["human_ci_low"], row["human_ci_high"]) == pytest.approx(expanded(change, 0.95, len(dialogues)),
                                                                        abs=1e-10)


def test_the_changed_share_interval_holds_statsmodels_clopper_pearson_at_its_effective_count():
    """Verdicts without samples: the share of changed verdicts; its interval never narrower than Clopper-Pearson
    on the judgments (at most), nor than on one judgment per dialogue when nothing changed."""
    from statsmodels.stats.proportion import proportion_confint

    reference, new = simulated_runs(np.random.default_rng(43), n_items=30, k=1, noise=0.0)
    flip = np.random.default_rng(44).random(len(new)) < 0.05
    new = new.assign(score=np.where(flip, np.clip(new["score"] + 1, 1, 5), new["score"])).drop(columns="samples")
    reference = reference.drop(columns="samples")
    row = drift(reference, new, bootstrap=400).drift.iloc[0]
    changed = float((new["score"] != reference["score"]).mean())
    assert row["changed_share"] == pytest.approx(changed)
    n = len(new)
    events = round(changed * n)
    widest = proportion_confint(events, n, 0.05, "beta")
    assert row["changed_ci_low"] <= widest[0] + 1e-12 or row["changed_ci_high"] >= widest[1] - 1e-12
    assert row["changed_ci_low"] <= changed <= row["changed_ci_high"]
    same = drift(reference, reference, bootstrap=400).drift.iloc[0]
    # Nothing changed in 30 dialogues: the shift's bound (4 points x the exact bound on the share that changed)
    # is too wide to show equivalence within 0.25 (issue 41 part 5): inconclusive, not "no drift".
    assert same["changed_share"] == 0 and same["verdict"] == "inconclusive"
    one_per_dialogue = proportion_confint(0, reference["item_id"].nunique(), 0.05, "beta")
    assert same["changed_ci_high"] == pytest.approx(one_per_dialogue[1])  # 30 dialogues, not 120 judgments


def test_swapping_the_runs_mirrors_the_shift_and_reordering_rows_changes_nothing():
    reference, new = simulated_runs(np.random.default_rng(45), n_items=30, k=1, noise=0.0, shift=0.3)
    forward = drift(reference, new, bootstrap=300, seed=2).drift.iloc[0]
    backward = drift(new, reference, bootstrap=300, seed=2).drift.iloc[0]
    assert backward["mean_shift"] == pytest.approx(-forward["mean_shift"])
    assert (backward["ci_low"], backward["ci_high"]) == pytest.approx((-forward["ci_high"], -forward["ci_low"]))
    assert (backward["tost_low"], backward["tost_high"]) == pytest.approx((-forward["tost_high"],
                                                                           -forward["tost_low"]))
    assert backward["changed_share"] == pytest.approx(forward["changed_share"])
    assert backward["kappa"] == pytest.approx(forward["kappa"]) and backward["verdict"] == forward["verdict"]
    shuffled = drift(reference.sample(frac=1.0, random_state=1), new.sample(frac=1.0, random_state=2), bootstrap=300,
                     seed=2).drift
    pd.testing.assert_frame_equal(drift(reference, new, bootstrap=300, seed=2).drift, shuffled)


@pytest.mark.parametrize("samples", [["3", "3", "4"], ["1", "2", "3", "4"], ["2", "2"], ["5"], [],
                                     ["1", "1", "2", "2", "2"]])
def test_reask_disagreement_counts_every_pair_of_samples(samples):
    disagree, pairs = _within({"forward": samples})
    expected = [a != b for a, b in itertools.combinations(samples, 2)]
    assert pairs == len(expected) and disagree == sum(expected)
    two = _within({"forward": samples, "swapped": samples[::-1]})
    assert two == (2 * disagree, 2 * pairs)  # each order counted on its own


@pytest.mark.parametrize("reference, new", [(["3", "3"], ["3", "4", "4"]), (["1"], ["1"]), (["1", "2"], ["3"]),
                                            (["2", "2", "5"], ["2", "5"])])
def test_cross_run_disagreement_counts_every_pair_within_one_order(reference, new):
    disagree, pairs = _across({"forward": reference}, {"forward": new})
    expected = [a != b for a in reference for b in new]
    assert pairs == len(expected) and disagree == sum(expected)
    # samples of different orders are never paired
    assert _across({"forward": reference}, {"swapped": new}) == (0.0, 0.0)


def test_stuart_maxwell_on_two_categories_is_mcnemars_statistic():
    reference = ["a"] * 30 + ["b"] * 20 + ["a"] * 9 + ["b"] * 3
    new = ["a"] * 30 + ["b"] * 20 + ["b"] * 9 + ["a"] * 3
    b, c = 9, 3
    assert _stuart_maxwell(reference, new) == pytest.approx(stats.chi2.sf((b - c) ** 2 / (b + c), 1))
    assert np.isnan(_stuart_maxwell(["a"] * 5, ["a"] * 5))


def test_the_changed_share_interval_is_the_expanded_percentile_one_widened_to_clopper_pearson_written_out():
    """The whole interval recomputed: the resampled shares (dialogues drawn again from the seed), their expanded
    percentile interval, the design effect from the resamples' SD (ddof 1) giving the effective count, and
    statsmodels' Clopper-Pearson at it; the printed interval is the wider of the two on each side. At 100
    resamples from seed 1 the effective count is 27.3 with the SD's ddof 1 and 27.5 with ddof 0: whole counts of
    27 and 28, so even that shows."""
    from statsmodels.stats.proportion import proportion_confint

    reference, new = simulated_runs(np.random.default_rng(46), n_items=12, k=1, noise=0.0)
    odd = reference["item_id"].map(lambda d: sorted(reference["item_id"].unique()).index(d) % 2).to_numpy()
    flip = np.random.default_rng(47).random(len(new)) < np.where(odd, 0.7, 0.05)  # changes cluster in dialogues
    new = new.assign(score=np.where(flip, np.clip(new["score"] + 1, 1, 5), new["score"])).drop(columns="samples")
    row = drift(reference.drop(columns="samples"), new, bootstrap=100, seed=1).drift.iloc[0]
    changed = (new["score"] != reference["score"]).astype(float).to_numpy()
    ids = sorted(reference["item_id"].unique())
    position = reference["item_id"].map({d: k for k, d in enumerate(ids)}).to_numpy()
    counts = counts_from_seed(1, len(ids), 100)
    sizes = np.bincount(position, minlength=len(ids))
    shares = counts @ np.bincount(position, weights=changed, minlength=len(ids)) / (counts @ sizes)
    low, high = expanded(shares, 0.95, len(ids))
    p, n = changed.mean(), len(changed)
    effective = min(n, max(len(ids), p * (1 - p) / np.std(shares, ddof=1) ** 2))
    exact = proportion_confint(round(p * effective), round(effective), 0.05, "beta")
    assert 0 < p < 1 and len(ids) < effective < n  # the design effect is in play, not a bound
    assert (row["changed_ci_low"], row["changed_ci_high"]) == pytest.approx((min(low, exact[0]), max(high, exact[1])),
                                                                            abs=1e-12)


@pytest.mark.parametrize("p, verdict", [(0.02, "drift"), (0.03, "inconclusive"), (0.2, "inconclusive")])
def test_a_shift_is_drift_exactly_when_its_t_test_is_below_two_and_a_half_percent(p, verdict):
    """One judgment per dialogue, so the clustered interval is the one-sample t test's (scipy): the shift rule is
    tested at 2.5% (Bonferroni with the share rule). Shifts built to have two-sided p = `p`; the share rule kept
    out of it (every verdict changes, against a --share-margin of 0.99) and equivalence out of reach (margin
    0.01)."""
    n = 12
    spread = np.linspace(-1.0, 1.0, n)
    se = spread.std(ddof=1) / np.sqrt(n)
    shifts = stats.t.isf(p / 2, n - 1) * se + spread
    assert stats.ttest_1samp(shifts, 0.0).pvalue == pytest.approx(p)
    reference = pd.DataFrame({"item_id": [f"d{k:02d}" for k in range(n)], "system": "a", "criterion": "c",
                              "score": 3.0})
    row = drift(reference, reference.assign(score=3.0 + shifts), margin=0.01, share_margin=0.99,
                bootstrap=200).drift.iloc[0]
    assert row["changed_share"] == 1.0 and row["verdict"] == verdict
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        stats.ttest_1samp(shifts, 0.0).confidence_interval(0.95))


@pytest.mark.parametrize("table", [[[20, 6, 0], [1, 15, 4], [0, 0, 10]], [[20, 6, 0], [1, 15, 0], [0, 4, 0]]],
                         ids=["some changes never seen", "a category the new run never gives"])
def test_stuart_maxwell_on_three_categories_with_empty_cells_is_the_statistic_written_out(table):
    """Three categories, some changes never seen (empty cells, counted as 0, not smoothed), or every "c" of the
    reference moved (an empty column, kept): d the differences of the margins, V their covariance (n_i. + n_.i -
    2 n_ii on the diagonal, -(n_ij + n_ji) off it), d' V^-1 d on 2 degrees of freedom (Stuart 1955, Maxwell
    1970)."""
    table = np.array(table)
    reference = [r for r in "abc" for c in "abc" for _ in range(table["abc".index(r), "abc".index(c)])]
    new = [c for r in "abc" for c in "abc" for _ in range(table["abc".index(r), "abc".index(c)])]
    rows, columns = table.sum(axis=1), table.sum(axis=0)
    d = (rows - columns)[:2]
    cov = -(table + table.T).astype(float)
    np.fill_diagonal(cov, rows + columns - 2 * np.diag(table))
    statistic = d @ np.linalg.solve(cov[:2, :2], d)
    assert _stuart_maxwell(reference, new) == pytest.approx(stats.chi2.sf(statistic, 2))
