"""The active design's estimator (ppi_mean_weighted) pinned whole against an independent computation: each row written
out from its docstring one dialogue at a time, with scipy's scalar minimiser for every lambda (no closed form),
numpy's weighted covariance for the shrinkage and scipy's t and chi^2 for the quantiles and effective_labels'
correction. Every printed number (estimate, interval, human-only interval, lambda, worth in labels) of each regime
(lambda not tuned below MIN_TUNED labels, fitted on all labels below MIN_CROSS_FITTED, cross-fitted from there) is
compared, so any change to the weighted variance's terms, the degrees of freedom or the guards fails here.

Written after fresh mutation draws left survivors in the weighted code (the residual terms of the Satterthwaite
df, the df's rounding, the cross term): each had been pinned one term at a time."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize_scalar
from test_estimate_worth import _bias  # _jensen's factor written out with scipy, shared with the unweighted tests

from calibration.study.ppi import MIN_CROSS_FITTED, MIN_SPREAD, MIN_TUNED, effective_labels
from calibration.study.ppi_weighted import ppi_mean_weighted


def _variance(lam, y, fc, b, var_f, big_n):
    """The docstring's se^2 of the weighted estimator at a fixed lambda on labels (y, fc) with Hajek weights b:
    lambda^2 var(f) / N + (2 lambda / N) sum b fc r + sum b^2 r^2, r the b-centred residual y - lambda fc."""
    r = y - lam * fc
    r = r - b @ r
    return lam * lam * var_f / big_n + 2.0 * lam / big_n * np.sum(b * fc * r) + np.sum(b * b * r * r)


def _best_lambda(y, fc, b, var_f, big_n):
    return minimize_scalar(_variance, bracket=(-3.0, 3.0), args=(y, fc, b, var_f, big_n), tol=1e-12).x


def _shrinkage(y, fc, b):
    """t^2 / (1 + t^2) of the b-weighted correlation (numpy's weighted covariance) on Kish's n - 2 (at least 0)."""
    c = np.cov(fc, y, aweights=b)
    r2 = min(c[0, 1] ** 2 / (c[0, 0] * c[1, 1]), 1.0 - 1e-12)
    t2 = r2 * max(1.0 / np.sum(b * b) - 2.0, 0.0) / (1.0 - r2)
    return t2 / (1.0 + t2)


def weighted_reference(human, judge, pi, confidence=0.95):
    """One row of ppi_mean_weighted, written out: a dict of what it prints."""
    judged = ~np.isnan(judge)
    lab = judged & ~np.isnan(human)
    y, f, w = human[lab], judge[judged], 1.0 / pi[lab]
    a = w / w.sum()
    n, big_n = len(y), len(f)
    fc = judge[lab] - f.mean()
    var_f = np.var(f, ddof=1)
    kish = int(np.floor(1.0 / np.sum(a * a) + 1e-9))
    quantile = lambda df: stats.t.ppf(0.5 + confidence / 2.0, df) if df >= 1 else np.nan  # noqa: E731
    # The judge is used from MIN_TUNED labels on, where their weighted judge variance (n / (n - 1) corrected) is at
    # least MIN_SPREAD of all judged dialogues'.
    spread = np.cov(fc, aweights=a, bias=True) * n / (n - 1)
    lams = np.zeros(n)
    fitted = False
    if n >= MIN_TUNED and spread >= MIN_SPREAD * var_f and var_f > 0:
        if n >= MIN_CROSS_FITTED:  # each label's lambda from the others', weights renormalised, shrunk
            for i in range(n):
                y_o, f_o, b_o = np.delete(y, i), np.delete(fc, i), np.delete(a, i) / (1.0 - a[i])
                lams[i] = _best_lambda(y_o, f_o, b_o, var_f, big_n) * _shrinkage(y_o, f_o, b_o)
        else:
            lams[:] = _best_lambda(y, fc, a, var_f, big_n)
            fitted = True
    lam = a @ lams
    tuned = lam != 0.0
    fitted = fitted and tuned
    k = 2 if fitted else 1
    estimate = a @ (y - lams * fc)
    r = (y - lams * fc) - estimate
    f_a = a @ fc
    leverage = f_a ** 2 / (a @ (fc - f_a) ** 2) if fitted else 0.0
    var_unlabelled = lam * lam * var_f / big_n + 2.0 * lam / big_n * np.sum(a * fc * r)
    var_residual = np.sum(a * a * r * r) * n / (n - k) * (1.0 + leverage)
    se = np.sqrt(var_unlabelled + var_residual)
    terms = a * a * r * r
    satterthwaite = 3.0 * terms.sum() ** 2 / np.sum(terms * terms) * (n - k) / n
    df = float(np.clip(satterthwaite, kish - k, n - k)) if tuned else kish - 1.0
    hajek = a @ y
    human_se = np.sqrt(np.sum(a * a * (y - hajek) ** 2) * n / (n - 1))
    low, high = estimate - quantile(df) * se, estimate + quantile(df) * se
    human_low, human_high = hajek - quantile(kish - 1) * human_se, hajek + quantile(kish - 1) * human_se
    # effective_labels: n over the squared width ratio, divided by the Hajek interval's design effect against a
    # uniform draw's (2 t_{n-1} sqrt(var_y / n), var_y the weighted variance) and by _jensen's bias on the residual
    # terms' Satterthwaite df, rounded to halves (the quadrature runs once per half), at the residual share of se^2.
    var_y = np.cov(y, aweights=a, bias=True) * n / (n - 1)
    design_effect = ((human_high - human_low) / (2.0 * quantile(n - 1) * np.sqrt(var_y / n))) ** 2
    c = np.cov(y, r, aweights=a, bias=True)
    rho2 = 1.0 - (1.0 - c[0, 1] ** 2 / (c[0, 0] * c[1, 1])) * (n - 1.0) / (n - 2.0)
    # The residual share of se^2, at most 1 (a negative cross term can make the judged-only part negative).
    bias = _bias(min(var_residual / se ** 2, 1.0), rho2, np.round(2.0 * satterthwaite) / 2.0)
    worth = n / (((high - low) / (human_high - human_low)) ** 2 * design_effect * bias)
    return {"estimate": estimate + 0.0, "ci_low": low, "ci_high": high, "human_only": hajek,
            "human_only_ci_low": human_low, "human_only_ci_high": human_high, "lam": lam, "df": df,
            "df_bound": n - k, "effective_labels": worth, "bias": bias}


def _active_study(rng, rows, big_n, n, rho, skew):
    """Likert labels, a judge of correlation about rho, inclusion probabilities rising with the judge's distance
    from its mean (an active design) or uniform-random (skew 0), n dialogues of each row drawn with them."""
    quality = rng.normal(0.0, 1.0, (rows, big_n))
    judge = 2.0 + rho * quality + np.sqrt(1.0 - rho ** 2) * rng.normal(0.0, 1.0, (rows, big_n))
    truth = np.clip(np.round(3.0 + quality), 1.0, 5.0)
    pi = np.clip(0.08 + skew * np.abs(judge - 2.0) / 3.0 + 0.2 * rng.random((rows, big_n)), 0.05, 0.95)
    human = np.full((rows, big_n), np.nan)
    for row in range(rows):
        chosen = rng.choice(big_n, n, replace=False, p=pi[row] / pi[row].sum())
        human[row, chosen] = truth[row, chosen]
    return human, judge, pi


PRINTED = ("estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low", "human_only_ci_high", "lam")


@pytest.mark.parametrize("n, rho, skew", [(6, 0.8, 0.6), (MIN_TUNED, 0.9, 0.4), (14, 0.7, 0.8), (19, 0.5, 0.3),
                                          (MIN_CROSS_FITTED, 0.8, 0.6), (28, 0.6, 0.9)])
def test_every_printed_number_of_the_weighted_estimator_is_its_docstring_written_out(n, rho, skew):
    rng = np.random.default_rng(1000 + n)
    human, judge, pi = _active_study(rng, 3, 90, n, rho, skew)
    result = ppi_mean_weighted(human, judge, pi)
    worth = effective_labels(result)
    wants = [weighted_reference(human[row], judge[row], pi[row]) for row in range(3)]
    for row, want in enumerate(wants):
        for name in PRINTED:
            assert getattr(result, name)[row] == pytest.approx(want[name], rel=1e-6, abs=1e-9), (row, name)
        assert worth[row] == pytest.approx(want["effective_labels"], rel=1e-4), row
    if n < MIN_TUNED:  # human-only rows: the estimate is the Hajek mean, worth n over the design effect alone
        assert all(want["lam"] == 0.0 and want["bias"] == pytest.approx(1.0, abs=1e-9) for want in wants)
    else:
        # The cases exercise what they are meant to: a judge used, uneven residual terms (Satterthwaite's df below
        # n - k, so the terms matter), and a worth-in-labels correction above 1.
        assert all(want["lam"] != 0.0 for want in wants)
        assert any(want["df"] < want["df_bound"] - 0.5 for want in wants)
        assert any(want["bias"] > 1.001 for want in wants)

def test_the_satterthwaite_df_moves_the_interval_of_a_row_with_one_heavy_residual():
    """One rarely drawn label (a large weight) whose label the judge misses where its score says nothing (at the
    judged mean, where no lambda can fit it): one residual term dominates, Satterthwaite's df falls far below n - k,
    and the interval's half-width over se is scipy's t quantile at that df."""
    rng = np.random.default_rng(8)
    human, judge, pi = _active_study(rng, 1, 100, 15, 0.8, 0.5)
    lab = np.flatnonzero(~np.isnan(human[0]))
    odd = lab[np.argmin(np.abs(judge[0, lab] - judge[0].mean()))]
    pi[0, odd] = 0.03
    human[0, odd] = 1.0 if human[0, odd] >= 3.0 else 5.0
    result = ppi_mean_weighted(human, judge, pi)
    want = weighted_reference(human[0], judge[0], pi[0])
    assert want["df"] < want["df_bound"] - 2
    half = (result.ci_high[0] - result.ci_low[0]) / 2.0
    se = np.sqrt(result.var_unlabelled[0] + result.var_residual[0])
    assert half / se == pytest.approx(stats.t.ppf(0.975, want["df"]), rel=1e-7)
    for name in PRINTED:
        assert getattr(result, name)[0] == pytest.approx(want[name], rel=1e-6, abs=1e-9), name


def test_an_active_designs_rows_whose_labels_bunch_at_one_end_get_no_interval_and_say_why():
    """unseen_hidden: with the scale given, the rows unseen_pull trips (labels tight at one end) lose every interval
    (the betting bound assumes a uniform draw), with the note "unseen"; a row without an interval keeps its own
    note; every other row and every estimate is the unbounded result. Through estimate(), the tables' note and the
    summary note say so, and the inclusion probabilities are read by dialogue id."""
    import pandas as pd

    from calibration.study.bounded import unseen_pull
    from calibration.study.estimate_tables import estimate, interval_note

    rng = np.random.default_rng(5)
    big_n = 60
    judge = rng.normal(3.0, 1.0, (3, big_n))
    pi = rng.uniform(0.1, 0.6, (3, big_n))
    human = np.full((3, big_n), np.nan)
    human[0, :12] = [5, 5, 4, 5, 5, 5, 5, 4, 5, 5, 5, 5]  # bunched at the top
    human[1, :12] = [1, 3, 5, 2, 4, 3, 2, 5, 1, 4, 3, 2]  # spread
    human[2, :2] = [5, 5]  # too few for any interval
    plain = ppi_mean_weighted(human, judge, pi)
    bounded = ppi_mean_weighted(human, judge, pi, bounds=(1.0, 5.0))
    assert unseen_pull(human, judge, (1.0, 5.0)).tolist() == [True, False, False]
    assert bounded.no_interval.tolist() == ["unseen", "", "few"]
    for name in ("se", "ci_low", "ci_high", "human_only_se", "human_only_ci_low", "human_only_ci_high"):
        assert np.isnan(getattr(bounded, name)[0]) and np.isfinite(getattr(plain, name)[0]), name
        np.testing.assert_array_equal(getattr(bounded, name)[1:], getattr(plain, name)[1:])
    np.testing.assert_array_equal(bounded.estimate, plain.estimate)
    np.testing.assert_array_equal(bounded.human_only, plain.human_only)
    assert np.isnan(effective_labels(bounded)[0])
    assert interval_note("unseen", 12).startswith("the 12 labels bunch at one end of the scale")
    # Through the tables: an active design's estimate with the rubric's scale.
    items = [f"d{i:02d}" for i in range(big_n)]
    frame = pd.DataFrame({"item_id": items * 2, "system": ["x"] * big_n + ["y"] * big_n, "criterion": "c",
                          "score": np.r_[judge[0], judge[1]], "status": "ok"})
    labels = pd.DataFrame({"item_id": items[:12] * 2, "system": ["x"] * 12 + ["y"] * 12, "criterion": "c",
                           "annotator": "a", "score": np.r_[human[0, :12], human[1, :12]]})
    inclusion = {item: p for item, p in zip(items, pi[0])}
    tables = estimate(frame, labels, inclusion=inclusion, scales={"c": (1.0, 5.0)})
    rows = tables.estimates.set_index("system")
    assert rows.loc["x", "interval_note"] == interval_note("unseen", 12) and np.isnan(rows.loc["x", "ci_low"])
    assert rows.loc["y", "interval_note"] == "" and np.isfinite(rows.loc["y", "ci_low"])
    assert f"c: no interval for x ({interval_note('unseen', 12)})" in tables.notes
    hajek = np.sum(human[1, :12] / pi[0, :12]) / np.sum(1 / pi[0, :12])  # the probabilities are the dialogues'
    assert rows.loc["y", "human_only"] == pytest.approx(hajek)


def test_three_labels_worth_two_get_the_t_interval_on_one_degree_of_freedom():
    """Kish's effective n of 2 (one of 3 labels drawn with a far larger probability): the Hajek interval is on
    1 degree of freedom, the smallest t_quantile gives (below 1, none); scipy's t(1) written out."""
    human = np.r_[[2.0, 4.0, 5.0], np.full(17, np.nan)]
    judge = np.linspace(1.0, 5.0, 20)
    pi = np.r_[[0.01, 0.01, 0.9], np.full(17, 0.2)]
    result = ppi_mean_weighted(human, judge, pi)
    want = weighted_reference(human, judge, pi)
    a = (1 / pi[:3]) / np.sum(1 / pi[:3])
    assert np.floor(1 / np.sum(a * a)) == 2 and want["df"] == 1.0
    for name in PRINTED:
        assert getattr(result, name)[()] == pytest.approx(want[name], rel=1e-9), name
    half = (result.human_only_ci_high - result.human_only_ci_low) / 2
    assert half == pytest.approx(stats.t.ppf(0.975, 1) * result.human_only_se, rel=1e-12)


@pytest.mark.parametrize("n", [14, 25])
def test_dialogues_the_judge_did_not_judge_are_outside_the_population(n):
    """A NaN judge score (an N/A cell) takes the dialogue out of the row: the weighted estimate is the one computed
    without those dialogues, and the written-out reference agrees."""
    rng = np.random.default_rng(n)
    human, judge, pi = _active_study(rng, 1, 90, n, 0.8, 0.6)
    out = np.flatnonzero(np.isnan(human[0]))[:15]
    judge[0, out] = np.nan
    human[0, out] = 3.0  # a label there is not read either
    keep = ~np.isin(np.arange(90), out)
    result = ppi_mean_weighted(human, judge, pi)
    alone = ppi_mean_weighted(human[:, keep], judge[:, keep], pi[:, keep])
    want = weighted_reference(np.where(keep, human[0], np.nan), judge[0], pi[0])
    for name in PRINTED:
        assert getattr(result, name)[0] == pytest.approx(getattr(alone, name)[0], rel=1e-9, abs=1e-12), name
        assert getattr(result, name)[0] == pytest.approx(want[name], rel=1e-6, abs=1e-9), name
    assert result.lam[0] != 0.0 and result.n_unlabelled[0] == 90 - n - 15


@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_the_weighted_lambda_waits_for_labelled_judge_scores_that_spread(scale):
    """The judge is used only where the labelled dialogues' judge scores vary at least MIN_SPREAD as much as all
    judged ones (a ratio: the judge's scale does not matter): labelled scores bunched in a tenth of the judge's
    spread get lambda 0 and the Hajek mean, the same labels on dialogues spread over the range a tuned lambda."""
    rng = np.random.default_rng(4)
    big_n, n = 100, 15
    judge = scale * np.linspace(-3.0, 3.0, big_n)
    pi = rng.uniform(0.1, 0.5, big_n)
    y = np.round(3.0 + rng.normal(0.0, 1.0, n))
    for cells, used in ((np.arange(45, 45 + n), False), (np.linspace(0, big_n - 1, n).astype(int), True)):
        human = np.full(big_n, np.nan)
        human[cells] = y + np.round(judge[cells] / scale)
        result = ppi_mean_weighted(human, judge, pi)
        assert (result.lam[()] != 0.0) == used
        if not used:
            a = 1 / pi[cells] / np.sum(1 / pi[cells])
            assert result.estimate[()] == pytest.approx(a @ human[cells])


def test_a_negative_judged_only_part_counts_all_of_se_squared_as_residual():
    """A weak judge on an active design (rho 0.3): the cross term can outweigh lambda^2 var(f) / N, leaving the
    judged-only part of se^2 negative; the residual share is then 1 (not above), and every printed number is still
    the written-out one."""
    rng = np.random.default_rng(2)
    human, judge, pi = _active_study(rng, 4, 60, 14, 0.3, 0.9)
    result = ppi_mean_weighted(human, judge, pi)
    assert result.var_unlabelled[1] < 0 < result.var_residual[1]
    want = weighted_reference(human[1], judge[1], pi[1])
    for name in PRINTED:
        assert getattr(result, name)[1] == pytest.approx(want[name], rel=1e-6, abs=1e-9), name
    assert effective_labels(result)[1] == pytest.approx(want["effective_labels"], rel=1e-4)
    assert want["bias"] > 1.001


def test_the_weighted_spread_check_is_inclusive_and_corrected_by_n_over_n_minus_1():
    """The weighted labelled spread, n / (n - 1) corrected, exactly a quarter of the judged variance: the judge is
    used (MIN_SPREAD is inclusive); a little tighter, it is not. 16 labels of weight 1/16 at the judged mean +- 1
    (corrected spread 16/15) among 31 judged with squared deviations summing to 128 (variance 128/30): a quarter
    apart to the last bit, since 1/4 and 1/16 are powers of two."""
    labelled_f = 3.0 + np.array([-1.0, 1.0] * 8)
    others = 3.0 + np.array([4.0, -4.0] * 3 + [2.0, -2.0] * 2 + [0.0] * 5)
    judge = np.r_[labelled_f, others]
    pi = np.full(len(judge), 0.5)
    y = np.array([2.0, 4.0, 3.0, 4.0, 2.0, 5.0, 1.0, 3.0, 2.0, 4.0, 3.0, 5.0, 2.0, 3.0, 1.0, 4.0])
    human = np.r_[y, np.full(len(others), np.nan)]
    assert 16 / 15 == MIN_SPREAD * np.var(judge, ddof=1) and MIN_TUNED <= 16 < MIN_CROSS_FITTED
    assert ppi_mean_weighted(human, judge, pi).lam[()] != 0.0
    tighter = np.r_[3.0 + 0.9 * (labelled_f - 3.0), others]
    assert ppi_mean_weighted(human, tighter, pi).lam[()] == 0.0
