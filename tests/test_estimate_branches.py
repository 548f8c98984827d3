"""Properties of the study estimators (calibration.study.estimate) that hold whatever the internals: each row of a
batch is the row computed alone (the estimators are vectorised over leading axes); the human labels' units carry
through (a shift moves the estimate and the interval, a scale multiplies them, the worth in labels does not move);
reflecting the scale (low + high - y) reflects the bounded-scale and betting intervals; the inclusion
probabilities of an active design matter only up to a common factor (Hajek weights); and the intervals against
independent computations (scipy's t interval where the judge is not used).

Written after fresh draws of benchmarks/mutation.py showed survivors spread thin over estimate.py's less travelled
branches (the bounded scale, the weighted estimator, effective labels); each property pins a whole family of
changes rather than one planted bug. Deliberately about the public functions' contracts, not the estimator's
small-n internals, which may change."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.study.bounded import betting_interval, bounded_scale, unseen_pull
from calibration.study.estimate_tables import interval_note
from calibration.study.ppi import MIN_LABELLED, effective_labels, ppi_mean
from calibration.study.ppi_weighted import ppi_mean_weighted

FIELDS = ("estimate", "se", "ci_low", "ci_high", "human_only", "human_only_se", "human_only_ci_low",
          "human_only_ci_high", "lam", "n_labelled", "n_unlabelled")


def _study(rng, rows, dialogues, labelled, rho=0.8, scale=(1.0, 5.0)):
    """Likert-like labels on `scale` with a judge of correlation about rho; the first `labelled` dialogues of a
    random order labelled in each row."""
    quality = rng.normal(0, 1, (rows, dialogues))
    judge = 2.0 + rho * quality + np.sqrt(1 - rho ** 2) * rng.normal(0, 1, (rows, dialogues))
    middle, spread = (scale[0] + scale[1]) / 2, (scale[1] - scale[0]) / 4
    human = np.clip(np.round(middle + spread * quality), *scale)
    chosen = rng.random((rows, dialogues)).argsort(-1) < labelled
    return np.where(chosen, human, np.nan), judge


def _same(a, b, fields=FIELDS):
    for name in fields:
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-12, err_msg=name)


# -- a batch is its rows ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("labelled", [2, 4, 12, 25])
def test_each_row_of_a_batch_is_the_row_estimated_alone(labelled):
    rng = np.random.default_rng(labelled)
    human, judge = _study(rng, 5, 60, labelled)
    human[1, :] = np.where(np.isnan(human[1]), np.nan, 3.0)  # a flat row among the others
    judge[2, :] = 1.5  # a constant judge
    batch = ppi_mean(human, judge, bounds=(1.0, 5.0))
    pi = rng.uniform(0.1, 0.9, (5, 60))
    weighted = ppi_mean_weighted(human, judge, pi)
    for row in range(5):
        alone = ppi_mean(human[row], judge[row], bounds=(1.0, 5.0))
        for name in FIELDS + ("no_interval",):
            got, want = getattr(batch, name)[row], getattr(alone, name)
            assert got == want or (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, rel=1e-9), name
        _same_row(weighted, ppi_mean_weighted(human[row], judge[row], pi[row]), row)
    np.testing.assert_allclose(effective_labels(batch)[[0, 3]],
                               [effective_labels(ppi_mean(human[r], judge[r], bounds=(1.0, 5.0))) for r in (0, 3)])


def _same_row(batch, alone, row):
    for name in FIELDS:
        got, want = getattr(batch, name)[row], getattr(alone, name)
        assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, rel=1e-9, abs=1e-12), name


# -- the labels' units -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("labelled", [3, 8, 15, 30])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_shift_and_scale_of_the_labels_carry_through_and_the_worth_in_labels_does_not_move(labelled, weighted):
    rng = np.random.default_rng(100 + labelled)
    human, judge = _study(rng, 3, 70, labelled)
    pi = rng.uniform(0.2, 0.8, human.shape)

    def run(y, f):
        return ppi_mean_weighted(y, f, pi) if weighted else ppi_mean(y, f)

    base = run(human, judge)
    for a, b in ((2.0, 10.0), (-0.5, 1.0)):
        moved = run(a * human + b, judge)
        for name in ("estimate", "human_only"):
            np.testing.assert_allclose(getattr(moved, name), a * getattr(base, name) + b, rtol=1e-9, err_msg=name)
        for name in ("se", "human_only_se"):
            np.testing.assert_allclose(getattr(moved, name), abs(a) * getattr(base, name), rtol=1e-9, err_msg=name)
        low, high = a * base.ci_low + b, a * base.ci_high + b
        np.testing.assert_allclose(moved.ci_low, np.minimum(low, high), rtol=1e-9)
        np.testing.assert_allclose(moved.ci_high, np.maximum(low, high), rtol=1e-9)
        np.testing.assert_allclose(moved.lam, a * base.lam, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(effective_labels(moved), effective_labels(base), rtol=1e-9)
    # The judge's units: its scale and level change nothing but lambda (divided by the judge's scale).
    rescaled = run(human, 3.0 * judge - 7.0)
    _same(rescaled, base, ("estimate", "se", "ci_low", "ci_high", "human_only_ci_low", "human_only_ci_high"))
    np.testing.assert_allclose(rescaled.lam, base.lam / 3.0, rtol=1e-9, atol=1e-12)


def test_the_order_of_the_dialogues_changes_nothing():
    rng = np.random.default_rng(8)
    human, judge = _study(rng, 4, 50, 24)
    pi = rng.uniform(0.2, 0.8, human.shape)
    order = rng.permutation(50)
    _same(ppi_mean(human[:, order], judge[:, order]), ppi_mean(human, judge))
    _same(ppi_mean_weighted(human[:, order], judge[:, order], pi[:, order]), ppi_mean_weighted(human, judge, pi))


# -- the human-only interval is scipy's t interval -------------------------------------------------------------------

@pytest.mark.parametrize("labelled", [MIN_LABELLED, 5, 9, 40])
def test_the_human_only_interval_is_scipys_t_interval_of_the_labels(labelled):
    rng = np.random.default_rng(labelled)
    human, judge = _study(rng, 3, 60, labelled)
    for confidence in (0.9, 0.95):
        result = ppi_mean(human, judge, confidence)
        for row in range(3):
            y = human[row][~np.isnan(human[row])]
            low, high = stats.t.interval(confidence, len(y) - 1, loc=y.mean(), scale=stats.sem(y))
            assert (result.human_only_ci_low[row], result.human_only_ci_high[row]) == pytest.approx((low, high))
            assert result.n_labelled[row] == labelled and result.n_unlabelled[row] == 60 - labelled


# -- the bounded scale: reflecting the scale reflects the interval ---------------------------------------------------

BOUNDED = [[5, 5, 5, 4, 5, np.nan, np.nan, np.nan, np.nan, np.nan],
           [5, 5, 5, 5, 4, 5, 5, 5, np.nan, np.nan],
           [2, 4, 3, 3, 5, 1, np.nan, np.nan, np.nan, np.nan],
           [4, 4, 4, 5, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan]]


@pytest.mark.parametrize("bounds", [(1.0, 5.0), (0.0, 10.0)])
def test_reflecting_the_scale_reflects_the_bounded_interval(bounds):
    low_end, high_end = bounds
    human = np.array(BOUNDED, dtype=float) * (high_end - low_end) / 4 + low_end - (high_end - low_end) / 4
    judge = np.tile(np.linspace(0, 1, 10), (4, 1)) + np.random.default_rng(0).normal(0, 0.1, (4, 10))
    reflected = low_end + high_end - human
    tripped = unseen_pull(human, judge, bounds)
    assert (unseen_pull(reflected, judge, bounds) == tripped).all() and tripped.any() and not tripped.all()
    one, two = ppi_mean(human, judge, bounds=bounds), ppi_mean(reflected, judge, bounds=bounds)
    assert list(one.no_interval) == list(two.no_interval)
    assert set(one.no_interval[tripped]) == {"bounded"}
    np.testing.assert_allclose(two.estimate[tripped], low_end + high_end - one.estimate[tripped])
    np.testing.assert_allclose(two.ci_low[tripped], low_end + high_end - one.ci_high[tripped], atol=1e-9)
    np.testing.assert_allclose(two.ci_high[tripped], low_end + high_end - one.ci_low[tripped], atol=1e-9)
    # Bounded rows: the human labels alone, inside the scale, around the labels' mean, the judge unused.
    for row in np.flatnonzero(tripped):
        y = human[row][~np.isnan(human[row])]
        assert one.estimate[row] == pytest.approx(y.mean()) and one.lam[row] == 0.0 and np.isnan(one.se[row])
        assert low_end <= one.ci_low[row] < y.mean() < one.ci_high[row] <= high_end
    # bounded_scale is that step alone; a row that does not trip keeps the t interval it was given.
    plain = ppi_mean(human, judge)
    _same(bounded_scale(plain, human, judge, bounds), one)
    for name in ("estimate", "ci_low", "ci_high"):
        np.testing.assert_allclose(getattr(one, name)[~tripped], getattr(plain, name)[~tripped])


@pytest.mark.parametrize("labels", [[1, 2, 2, 3, 5, 4, 2], [5, 5, 4, 5, 5, 5], [1, 1, 1, 2], [3, 3, 4, 2, 3, 3, 3, 2]])
def test_the_betting_interval_reflects_with_the_scale_holds_the_mean_and_widens_with_confidence(labels):
    values = np.array([labels], dtype=float)
    used = np.ones_like(values, dtype=bool)
    low, high = betting_interval(values, used, (1.0, 5.0))
    r_low, r_high = betting_interval(6.0 - values, used, (1.0, 5.0))
    assert (r_low[0], r_high[0]) == pytest.approx((6.0 - high[0], 6.0 - low[0]), abs=1e-9)
    assert 1.0 <= low[0] <= np.mean(labels) <= high[0] <= 5.0
    wide_low, wide_high = betting_interval(values, used, (1.0, 5.0), confidence=0.99)
    assert wide_low[0] <= low[0] and high[0] <= wide_high[0]
    # The same labels on a scale moved and stretched: the same interval, moved and stretched.
    s_low, s_high = betting_interval(10.0 + 2.0 * values, used, (12.0, 20.0))
    assert (s_low[0], s_high[0]) == pytest.approx((10.0 + 2.0 * low[0], 10.0 + 2.0 * high[0]), abs=1e-9)
    # What an unlabelled cell holds is never read.
    padded = np.concatenate([values, [[1.0, 5.0, np.nan]]], -1)
    other = np.concatenate([values, [[5.0, 5.0, 1.0]]], -1)
    marks = np.concatenate([used, np.zeros((1, 3), bool)], -1)
    assert betting_interval(padded, marks, (1.0, 5.0)) == betting_interval(other, marks, (1.0, 5.0))


# -- active designs: only the ratios of the inclusion probabilities matter -------------------------------------------

@pytest.mark.parametrize("labelled", [6, 12, 30])
def test_the_weighted_estimator_depends_on_the_inclusion_probabilities_only_up_to_a_common_factor(labelled):
    rng = np.random.default_rng(labelled)
    human, judge = _study(rng, 3, 60, labelled)
    pi = rng.uniform(0.05, 0.5, human.shape)
    base = ppi_mean_weighted(human, judge, pi)
    _same(ppi_mean_weighted(human, judge, pi * 1.7), base)
    # Equal probabilities: the labels' plain mean and the unweighted t interval of the human-only side.
    equal = ppi_mean_weighted(human, judge, 0.3)
    for row in range(3):
        y = human[row][~np.isnan(human[row])]
        low, high = stats.t.interval(0.95, len(y) - 1, loc=y.mean(), scale=stats.sem(y))
        assert equal.human_only[row] == pytest.approx(y.mean())
        assert (equal.human_only_ci_low[row], equal.human_only_ci_high[row]) == pytest.approx((low, high))
    # Unequal ones: the human-only side is the Hajek mean (weights 1 / pi).
    y_cells = ~np.isnan(human)
    hajek = np.nansum(human / pi, -1) / np.sum(np.where(y_cells, 1 / pi, 0.0), -1)
    np.testing.assert_allclose(base.human_only, hajek)


# -- the notes where no interval is printed --------------------------------------------------------------------------

@pytest.mark.parametrize("labels, code", [([4.0, np.nan, np.nan], "few"), ([4.0, 2.0, np.nan], "few"),
                                          ([3.0, 3.0, 3.0], "flat"), ([3.0, 3.0, 4.0], "")])
def test_no_interval_below_the_minimum_or_on_flat_labels_and_the_note_says_which(labels, code):
    human = np.array(labels + [np.nan] * 7)
    judge = np.linspace(1, 5, 10)
    for result in (ppi_mean(human, judge), ppi_mean_weighted(human, judge, 0.4)):
        assert result.no_interval[()] == code
        assert np.isnan(result.ci_low[()]) == (code != "") and np.isnan(effective_labels(result)[()]) == (code != "")
    n = int(np.sum(~np.isnan(human)))
    note = interval_note(code, n)
    assert (note == "") == (code == "")
    if code:
        assert f"{n} label" in note and str(MIN_LABELLED) in note
    assert interval_note("few", 1).startswith("1 labelled dialogue:")
    assert interval_note("bounded", 5).startswith("the 5 labels bunch at one end")


@pytest.mark.parametrize("seed", range(4))
def test_the_weighted_lambda_minimises_the_variance_its_docstring_writes_out(seed):
    """lambda of ppi_mean_weighted is the minimiser over lambda of lambda^2 var(f) / N + (2 lambda / N) sum_L a_i
    (f_i - mean f) r_i + sum_L a_i^2 r_i^2 (r the a-centred residual y - lambda f), found here by scipy's scalar
    minimiser on that expression, from MIN_TUNED labels to below MIN_CROSS_FITTED (from there each label's lambda
    is tuned on the others: test_screen_active checks it by brute force); below MIN_TUNED labels it is 0."""
    from scipy.optimize import minimize_scalar

    from calibration.study.ppi import MIN_CROSS_FITTED, MIN_TUNED

    rng = np.random.default_rng(seed)
    human, judge = _study(rng, 1, 80, MIN_CROSS_FITTED - 1, rho=0.7)
    y, f = human[0], judge[0]
    pi = np.clip(0.1 + 0.3 * (f - f.min()) / np.ptp(f), 0.05, 1.0)  # an active design: more labels where f is high
    result = ppi_mean_weighted(y, f, pi)
    labelled = ~np.isnan(y)
    a = np.where(labelled, 1 / pi, 0.0) / np.sum(np.where(labelled, 1 / pi, 0.0))
    big_n, var_f = len(f), np.var(f, ddof=1)

    def variance(lam):
        r = np.where(labelled, np.nan_to_num(y) - lam * f, 0.0)
        r = np.where(labelled, r - np.sum(a * r), 0.0)
        return lam ** 2 * var_f / big_n + 2 * lam / big_n * np.sum(a * (f - f.mean()) * r) + np.sum(a ** 2 * r ** 2)

    best = minimize_scalar(variance, bounds=(-10, 10), method="bounded", options={"xatol": 1e-10}).x
    assert result.lam[()] == pytest.approx(best, abs=1e-6) and abs(best) > 0.05
    few = np.where(np.cumsum(labelled) <= MIN_TUNED - 1, y, np.nan)
    assert ppi_mean_weighted(few, f, pi).lam[()] == 0.0


@pytest.mark.parametrize("labelled", [12, 16])
def test_a_judge_exactly_uncorrelated_with_the_labels_leaves_exactly_the_human_only_interval(labelled):
    """Sample covariance exactly 0 (a symmetric pattern, integer sums): lambda 0 in the in-sample tuned regime
    (MIN_TUNED to MIN_CROSS_FITTED labels), so the estimate and its interval are the labels' t interval (n - 1
    degrees of freedom, no lambda's own error)."""
    f_labelled = np.tile([-2.0, -1.0, 1.0, 2.0], labelled // 4)
    y = np.tile([1.0, 2.0, 2.0, 1.0], labelled // 4) + np.repeat(np.arange(labelled // 4) % 3, 4)
    judge = np.concatenate([f_labelled, np.linspace(-2, 2, 40)])
    human = np.concatenate([y, np.full(40, np.nan)])
    assert np.cov(y, f_labelled)[0, 1] == 0.0
    result = ppi_mean(human, judge)
    low, high = stats.t.interval(0.95, labelled - 1, loc=y.mean(), scale=stats.sem(y))
    assert result.lam[()] == 0.0 and result.estimate[()] == pytest.approx(y.mean())
    assert (result.ci_low[()], result.ci_high[()]) == pytest.approx((low, high), rel=1e-12)


def test_a_judge_exactly_linear_in_the_labels_is_used_in_the_cross_fitted_regime():
    """A perfect judge (labels an exact linear function of its scores) with 25 labels: its correlation of exactly 1
    keeps the cross-fitted lambdas (no 0/0 shrinkage), the estimate is near the line at the judged mean, and the
    interval narrower than the labels' own (the unlabelled mean's own noise remains)."""
    rng = np.random.default_rng(2)
    judge = rng.normal(3, 1, 80)
    human = np.where(np.arange(80) < 25, 1.0 + 0.5 * judge, np.nan)
    result = ppi_mean(human, judge)
    assert 0.2 < result.lam[()] <= 0.5
    assert result.estimate[()] == pytest.approx(1.0 + 0.5 * judge.mean(), abs=0.1)
    assert result.ci_high[()] - result.ci_low[()] < 0.8 * (result.human_only_ci_high[()] - result.human_only_ci_low[()])


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5])
def test_the_estimate_refuses_a_confidence_outside_zero_and_one(confidence):
    import pandas as pd

    from calibration.errors import CalibrationError
    from calibration.study.estimate_tables import estimate

    judge = pd.DataFrame({"item_id": ["d1", "d2", "d3"], "system": "s", "criterion": "c", "score": [1.0, 2.0, 3.0],
                          "status": "ok"})
    labels = judge.drop(columns=["status"]).assign(annotator="a")
    with pytest.raises(CalibrationError, match="--confidence must be between 0 and 1"):
        estimate(judge, labels, confidence=confidence)


@pytest.mark.parametrize("share, rho2, n", [(1.0, 0.0, 10), (0.6, 0.3, 10), (0.3, 0.1, 25), (0.9, 0.8, 6),
                                            (0.5, 0.0, 4), (1.0, 0.0, 3.5), (0.99, 0.0, 4), (0.95, 0.1, 3.6),
                                            (0.999, 0.2, 1001), (1e-6, 0.0, 50)])
def test_the_jensen_factor_is_its_formula_with_g_from_scipys_chi2_expectation(share, rho2, n):
    """_jensen's g = E[(c + 1) / (c + W)], W ~ chi^2_df / df, c = 1 / share - 1, df = n - 1, by scipy's numerical
    expectation (not Gauss-Laguerre); the factor 1 + (g - 1)(1 - rho^2 / share), never below 1."""
    from calibration.study.ppi import _jensen

    df, c = n - 1.0, 1.0 / share - 1.0
    g = stats.chi2.expect(lambda x: (c + 1.0) / (c + x / df), args=(df,)) if df > 2 else 1.0
    expected = max(1.0 + (g - 1.0) * (1.0 - rho2 / share), 1.0)
    # Down to 2.5 df, where nearly all of se^2 is residual (a jury at 6 labels or less, very uneven weights): a fixed
    # 40-point Gauss-Laguerre rule was 14-36% low there.
    assert _jensen(np.array([share]), np.array([rho2]), np.array([float(n)]))[0] == pytest.approx(expected, rel=1e-8)


def test_the_weighted_lambda_is_tuned_from_exactly_min_tuned_labels():
    """Written after the seed-13 draw let `n >= MIN_TUNED` become `>` in the weighted estimator: at MIN_TUNED
    labels a good judge is used (lambda the variance's minimiser, not 0), one label fewer it is not."""
    from calibration.study.ppi import MIN_TUNED

    rng = np.random.default_rng(11)
    human, judge = _study(rng, 1, 80, MIN_TUNED, rho=0.9)
    y, f = human[0], judge[0]
    pi = np.full(80, MIN_TUNED / 80.0)
    at = ppi_mean_weighted(y, f, pi)
    assert at.n_labelled[()] == MIN_TUNED and at.lam[()] != 0.0
    fewer = np.where(np.cumsum(~np.isnan(y)) < MIN_TUNED, y, np.nan)
    assert ppi_mean_weighted(fewer, f, pi).lam[()] == 0.0


@pytest.mark.parametrize("labelled, rho", [(20, 0.8), (30, 0.5), (45, 0.2)])
def test_the_cross_fitted_lambda_is_each_labels_others_ppi_lambda_shrunk_by_their_correlation_t(labelled, rho):
    """From MIN_CROSS_FITTED labels each labelled dialogue's lambda is tuned on the k = n - 1 others: PPI++'s
    cov(y, f) / (var(f_labelled) + n/m var(f_all)), times t^2 / (1 + t^2) with t the others' correlation t statistic
    on k - 2 degrees of freedom (scipy's pearsonr for r); the printed lambda is their mean."""
    from calibration.study.ppi import MIN_CROSS_FITTED

    rng = np.random.default_rng(labelled)
    human, judge = _study(rng, 1, 120, labelled, rho=rho)
    human, judge = human[0], judge[0]
    result = ppi_mean(human, judge)
    lab = ~np.isnan(human)
    n, m = int(lab.sum()), int((~lab).sum())
    assert n >= MIN_CROSS_FITTED
    var_all = np.var(judge, ddof=1)
    lams = []
    for i in np.flatnonzero(lab):
        others = lab.copy()
        others[i] = False
        y, f = human[others], judge[others]
        k = len(y)
        r = stats.pearsonr(y, f).statistic
        t2 = r * r * (k - 2) / (1 - r * r)
        lams.append(np.cov(y, f)[0, 1] / (np.var(f, ddof=1) + n / m * var_all) * t2 / (1 + t2))
    assert float(np.asarray(result.lam).ravel()[0]) == pytest.approx(np.mean(lams), rel=1e-9)


@pytest.mark.parametrize("seed, sparse", [(0, False), (1, False), (2, True)])
def test_the_shared_lambda_is_the_pooled_within_row_slope_on_the_other_dialogues_written_out(seed, sparse):
    """shared_cross_fitted_lambdas against its definition, one dialogue at a time: leave dialogue i out of every
    row, sum each tuned row's within-row cross-products (its own means removed, rows with two or more others),
    add each row's (k - 1) n/m var(f), and shrink by the pooled correlation's t^2 / (1 + t^2) on
    sum(k - 1) - 1 degrees of freedom; a row outside `rows` neither gets a lambda nor enters the fit. The 2-d
    call (rows, dialogues) and the same call under a leading axis agree."""
    from calibration.study.ppi import shared_cross_fitted_lambdas

    rng = np.random.default_rng(seed)
    rows_n, dialogues = 4, 40
    labelled = rng.random((rows_n, dialogues)) < 0.35
    labelled[:, :3] = True  # a few dialogues labelled in every row
    if sparse:  # a row with 3 labels: 2 others where one of them is left out, the fewest that enter the fit
        labelled[1] = np.arange(dialogues) < 3
    f = rng.normal(0, 1, (rows_n, dialogues))
    y = 0.7 * f + rng.normal(0, 1, (rows_n, dialogues)) + rng.normal(0, 3, (rows_n, 1))  # rows at other levels
    y0, fl = np.where(labelled, y, 0.0), np.where(labelled, f, 0.0)
    n = labelled.sum(-1, keepdims=True).astype(float)
    m = dialogues - n
    var_f = f.var(-1, ddof=1, keepdims=True)
    tuned = np.array([[True], [True], [False], [True]])
    got = shared_cross_fitted_lambdas(labelled, y0, fl, n, m, var_f, tuned)
    assert np.array_equal(got, shared_cross_fitted_lambdas(labelled[None], y0[None], fl[None], n[None], m[None],
                                                           var_f[None], tuned[None])[0])
    for i in range(dialogues):
        c_yf = c_ff = c_yy = c_u = dof = 0.0
        for r in np.flatnonzero(tuned[:, 0]):
            others = labelled[r] & (np.arange(dialogues) != i)
            k = int(others.sum())
            if k < 2:
                continue
            dy, df_ = y[r, others] - y[r, others].mean(), f[r, others] - f[r, others].mean()
            c_yf, c_ff, c_yy = c_yf + dy @ df_, c_ff + df_ @ df_, c_yy + dy @ dy
            c_u += (k - 1) * n[r, 0] / m[r, 0] * var_f[r, 0]
            dof += k - 1
        r2 = min(c_yf * c_yf / (c_ff * c_yy), 1 - 1e-12)
        t2 = r2 * (dof - 1) / (1 - r2)
        expected = c_yf / (c_ff + c_u) * t2 / (1 + t2)
        for r in range(rows_n):
            want = expected if (tuned[r, 0] and labelled[r, i]) else 0.0
            assert got[r, i] == pytest.approx(want, rel=1e-9, abs=1e-12), (r, i)


def test_the_lambda_fitted_on_ten_to_nineteen_labels_is_ppi_plus_plus_even_when_the_labelled_judge_mean_is_exact():
    """Likert judge scores whose labelled mean equals the judged mean exactly (sums of centred scores exactly 0, as
    integer scores often give): the lambda fitted on the row's own 12 labels is still PPI++'s cov(y, f) /
    (var(f_labelled) + n/m var(f_all)) from numpy, not lost to a 0 / 0."""
    from calibration.study.ppi import MIN_CROSS_FITTED, MIN_TUNED

    judge = np.array([1.0, 5.0, 2.0, 4.0, 3.0, 3.0, 1.0, 5.0, 2.0, 4.0, 3.0, 3.0] + [1.0, 5.0, 2.0, 4.0, 3.0] * 4)
    human = np.full(judge.shape, np.nan)
    human[:12] = [1.0, 4.0, 3.0, 4.0, 2.0, 3.0, 2.0, 5.0, 2.0, 3.0, 4.0, 3.0]
    lab = ~np.isnan(human)
    n, m = int(lab.sum()), int((~lab).sum())
    assert MIN_TUNED <= n < MIN_CROSS_FITTED and judge[lab].mean() == judge.mean()  # the exact case
    result = ppi_mean(human, judge)
    expected = np.cov(human[lab], judge[lab])[0, 1] / (np.var(judge[lab], ddof=1) + n / m * np.var(judge, ddof=1))
    assert expected > 0.1
    assert float(np.asarray(result.lam).ravel()[0]) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("lam", [0.3, 0.9])
def test_the_worth_in_labels_correction_takes_the_residual_share_of_se_squared(lam):
    """With a fixed lambda, effective_labels' correction is _jensen at the residual part's share of se^2,
    var_residual / (var_unlabelled + var_residual), and the adjusted squared correlation of the labels with their
    rectified values y - lambda f (numpy), on n labels."""
    from calibration.study.ppi import _jensen

    rng = np.random.default_rng(5)
    human, judge = _study(rng, 1, 80, 25)
    human, judge = human[0], judge[0]
    result = ppi_mean(human, judge, lam=lam)
    lab = ~np.isnan(human)
    n = int(lab.sum())
    share = result.var_residual / (result.var_unlabelled + result.var_residual)
    assert 0 < float(share) < 1
    rectified = human[lab] - lam * (judge[lab] - judge.mean())
    r2 = np.corrcoef(human[lab], rectified)[0, 1] ** 2
    rho2 = 1 - (1 - r2) * (n - 1) / (n - 2)
    expected = _jensen(np.array([share]), np.array([rho2]), np.array([float(n)]))
    assert float(np.asarray(result.jensen).ravel()[0]) == pytest.approx(float(np.ravel(expected)[0]), rel=1e-9)


@pytest.mark.parametrize("weighted", [False, True])
def test_both_estimators_count_the_labelled_and_the_unlabelled_judged_dialogues(weighted):
    """n_labelled + n_unlabelled is every judged dialogue of the row (a NaN judge score is not judged), counted
    with numpy, for the uniform and the weighted (active) estimator alike."""
    rng = np.random.default_rng(12)
    human, judge = _study(rng, 3, 60, 18)
    judge[1, :7] = np.nan  # row 1: 7 dialogues not judged
    human[1, :7] = np.nan
    pi = rng.uniform(0.2, 0.8, human.shape)
    result = ppi_mean_weighted(human, judge, pi) if weighted else ppi_mean(human, judge)
    judged = ~np.isnan(judge)
    labelled = judged & ~np.isnan(human)
    assert result.n_labelled.tolist() == labelled.sum(-1).tolist()
    assert result.n_unlabelled.tolist() == (judged & ~labelled).sum(-1).tolist()


@pytest.mark.parametrize("n", [12, 30])
def test_the_weighted_design_effect_is_one_at_equal_probabilities_and_the_hajek_over_the_uniform_width(monkeypatch, n):
    """What effective_labels divides out of an active design's estimate is the Hajek human-only interval's width over
    a uniform draw's, 2 t_{n-1} sqrt(var_y / n) with var_y the weighted label variance (times _jensen's bias, set to
    1 here to read the design effect alone): 1 exactly when every probability is equal, and the two widths' squared
    ratio, written out with scipy's t, otherwise (either factor of the uniform width changed fails it)."""
    import calibration.study.ppi_weighted as estimate_module

    monkeypatch.setattr(estimate_module, "_jensen", lambda share, rho2, df: np.ones(np.shape(share)))
    rng = np.random.default_rng(n)
    big_n = 120
    truth = rng.normal(3.0, 1.0, (4, big_n))
    judge = truth + rng.normal(0.0, 0.6, (4, big_n))
    human = np.full_like(truth, np.nan)
    for row in range(4):
        chosen = rng.choice(big_n, n, replace=False)
        human[row, chosen] = np.round(truth[row, chosen])
    assert np.allclose(ppi_mean_weighted(human, judge, 0.3).jensen, 1.0)
    pi = rng.uniform(0.1, 0.9, (4, big_n))
    result = ppi_mean_weighted(human, judge, pi)
    for row in range(4):
        labelled = ~np.isnan(human[row])
        a = 1.0 / pi[row, labelled]
        a /= a.sum()
        y = human[row, labelled]
        var_y = (a * (y - a @ y) ** 2).sum() * n / (n - 1)
        uniform = 2.0 * stats.t.ppf(0.975, n - 1) * np.sqrt(var_y / n)
        hajek = result.human_only_ci_high[row] - result.human_only_ci_low[row]
        assert result.jensen[row] == pytest.approx((hajek / uniform) ** 2, rel=1e-9)
        assert result.jensen[row] != pytest.approx(1.0, abs=1e-3)  # uneven weights: a real design effect


def test_the_weighted_judged_only_variance_is_lambdas_share_of_var_f_plus_the_cross_term_written_out():
    """var_unlabelled of an active design's estimate at 10-19 labels (one lambda fitted on all of them) is
    lambda^2 var(f) / N + (2 lambda / N) sum_L a_i (f_i - mean f) r_i, r the a-centred rectified labels: the
    docstring's variance of phi, written out with numpy (kills the seed-18 survivor estimate.py:575, the cross
    term's 2 changed)."""
    rng = np.random.default_rng(18)
    big_n, n = 150, 14
    truth = rng.normal(3.0, 1.0, (5, big_n))
    judge = truth + rng.normal(0.0, 0.5, (5, big_n))
    human = np.full_like(truth, np.nan)
    for row in range(5):
        chosen = rng.choice(big_n, n, replace=False)
        human[row, chosen] = truth[row, chosen] + rng.normal(0.0, 0.3, n)
    pi = rng.uniform(0.1, 0.9, (5, big_n))
    result = ppi_mean_weighted(human, judge, pi)
    for row in range(5):
        lam = result.lam[row]
        assert lam != 0.0  # the cross term is there to check
        labelled = ~np.isnan(human[row])
        a = 1.0 / pi[row, labelled]
        a /= a.sum()
        fc = judge[row] - judge[row].mean()
        rectified = human[row, labelled] - lam * fc[labelled]
        r = rectified - a @ rectified
        expected = lam ** 2 * np.var(judge[row], ddof=1) / big_n + 2.0 * lam / big_n * (a * fc[labelled] * r).sum()
        assert result.var_unlabelled[row] == pytest.approx(expected, rel=1e-9)
