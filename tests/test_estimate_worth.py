"""What an estimate is worth in labels (effective_labels) for the uniform estimator, ppi_mean, pinned in every
lambda regime against its definition written out one row at a time: n over the squared width ratio of the printed
intervals, divided by the plug-in ratio's bias E[X / Y] / (E X / E Y) (g from scipy's chi^2 expectation, not the
module's Gauss-Laguerre) at the residual share of se^2 and the adjusted squared correlation of the labels with
their rectified values (numpy), times 1 + lambda's own error over se^2 where lambda is shared by the rows or the
judge is a fitted predictor. Each regime: human-only (fewer than MIN_TUNED labels), one lambda fitted on the row's
labels (left uncorrected), shared by the criterion's rows, cross-fitted per row, fixed (a jury: fitted_judge, with
and without its coefficients' fit_leverage). The lambdas themselves are written out too (leave one out, np.cov,
scipy's pearsonr), so the intervals are checked on the way."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.study.ppi import MIN_CROSS_FITTED, MIN_TUNED, effective_labels, ppi_mean


def _bias(share, rho2, df):
    """1 + (g - 1)(1 - rho^2 / share), g = E[(c + 1) / (c + W)], W ~ chi^2_df / df, c = 1 / share - 1; at least 1."""
    if not df > 2 or not share > 0:
        return 1.0
    c = 1.0 / share - 1.0
    g = stats.chi2.expect(lambda x: (c + 1.0) / (c + x / df), args=(df,))
    return max(1.0 + (g - 1.0) * (1.0 - min(max(rho2, 0.0), 1.0) / share), 1.0)


def _shrink(y, f):
    """t^2 / (1 + t^2), t the correlation t statistic of (y, f) (scipy's pearsonr) on len - 2 df."""
    r = stats.pearsonr(y, f).statistic
    t2 = r * r * (len(y) - 2) / (1 - r * r)
    return t2 / (1 + t2)


def crossed_lambdas(y, f, lab, var_f, n, m):
    """Each labelled dialogue's lambda from the other labels: PPI++'s cov / (var f_L + n/m var f), shrunk."""
    lams = np.zeros(len(y))
    for i in np.flatnonzero(lab):
        others = lab.copy()
        others[i] = False
        (_, cov), (_, var_fl) = np.cov(y[others], f[others])
        lams[i] = cov / (var_fl + n / m * var_f) * _shrink(y[others], f[others])
    return lams


def shared_lambdas(human, f, lab, var_f, n, m, rows):
    """One lambda per labelled dialogue for the rows sharing it (`rows`): within-row sums of the other labels
    pooled over those rows; 0 elsewhere."""
    lams = np.zeros(lab.shape)
    for i in np.flatnonzero(lab[rows].any(0)):
        c_yf = c_ff = c_yy = c_u = dof = 0.0
        for s in rows:
            others = lab[s].copy()
            others[i] = False
            if others.sum() < 2:
                continue
            dy, df_ = human[s, others] - human[s, others].mean(), f[s, others] - f[s, others].mean()
            c_yf, c_ff, c_yy = c_yf + dy @ df_, c_ff + df_ @ df_, c_yy + dy @ dy
            c_u += (others.sum() - 1) * n[s] / m[s] * var_f[s]
            dof += others.sum() - 1
        r2 = c_yf ** 2 / (c_ff * c_yy)
        t2 = r2 * (dof - 1) / (1 - r2)
        lams[rows, i] = np.where(lab[rows, i], c_yf / (c_ff + c_u) * t2 / (1 + t2), 0.0)
    return lams


def reference(human, judge, regime, lam=None, fitted_judge=False, fit_leverage=None, confidence=0.95):
    """Per row: (estimate, ci_low, ci_high, lambda, effective_labels), written out."""
    judged = ~np.isnan(judge)
    lab = judged & ~np.isnan(human)
    n, m = lab.sum(-1), (judged & ~lab).sum(-1)
    f = judge - np.nanmean(judge, -1, keepdims=True)
    var_f = np.array([np.var(f[s, judged[s]], ddof=1) for s in range(len(f))])
    y = np.where(lab, human, 0.0)
    # The rows sharing one lambda: MIN_TUNED to MIN_CROSS_FITTED - 1 labels (the judge spread enough in these
    # fixtures); a row with fewer is human-only.
    together = [s for s in range(len(f)) if MIN_TUNED <= n[s] < MIN_CROSS_FITTED]
    if regime == "shared":
        lams = shared_lambdas(human, f, lab, var_f, n, m, together)
    elif regime == "crossed":
        lams = np.array([crossed_lambdas(y[s], f[s], lab[s], var_f[s], n[s], m[s]) for s in range(len(f))])
    elif regime == "fixed":
        lams = np.where(lab, np.asarray(lam, dtype=float)[:, None], 0.0)
    else:  # human only
        lams = np.zeros(lab.shape)
    rows = []
    for s in range(len(f)):
        ys, fl, fu = y[s, lab[s]], f[s, lab[s]], f[s, judged[s] & ~lab[s]]
        li = lams[s, lab[s]]
        rectified = ys - li * fl
        lam_bar = li.mean()
        estimate = rectified.mean() + lam_bar * fu.mean()
        var_unlabelled = lam_bar ** 2 * var_f[s] / m[s]
        s_r2 = np.var(rectified, ddof=1)
        se2 = var_unlabelled + s_r2 / n[s]
        q = stats.t.ppf(0.5 + confidence / 2, n[s] - 1)
        low, high = estimate - q * np.sqrt(se2), estimate + q * np.sqrt(se2)
        human_width = 2 * q * stats.sem(ys)
        r2 = np.corrcoef(ys, rectified)[0, 1] ** 2 if lam_bar != 0 else 1.0
        rho2 = 1 - (1 - r2) * (n[s] - 1) / (n[s] - 2)
        share = 1.0 if fitted_judge else (s_r2 / n[s]) / se2
        bias = _bias(share, rho2, n[s] - 1.0)
        # lambda's own error, (lambda_hat - lambda)(mean_U f - mean_L f): from the rows' pooled sums where shared,
        # lambda^2 s_r^2 fit_leverage for a fitted predictor's coefficients.
        error = 0.0
        if regime == "shared" and s in together and lam_bar != 0:
            c_ff = sum(np.sum((f[r, lab[r]] - f[r, lab[r]].mean()) ** 2) for r in together)
            c_u = sum((n[r] - 1) * n[r] / m[r] * var_f[r] for r in together)
            error = s_r2 * c_ff / (c_ff + c_u) ** 2 * (fu.mean() - fl.mean()) ** 2
        if fit_leverage is not None:
            error += lam_bar ** 2 * s_r2 * fit_leverage[s]
        worth = n[s] / ((high - low) / human_width) ** 2 / (bias * (1 + error / se2))
        rows.append((estimate, low, high, lam_bar, worth))
    return np.array(rows)


def _study(rng, rows, dialogues, n, rho=0.7, offset=0.0):
    """Likert labels of rows sharing a dialogue effect, a judge of correlation about rho on another scale; the same
    n dialogues labelled in every row (a criterion's systems), the labelled ones' judge scores shifted by `offset`
    (so lambda's own error, at mean_U f - mean_L f, matters)."""
    quality = rng.normal(0, 1, (1, dialogues)) + 0.6 * rng.normal(0, 1, (rows, dialogues))
    judge = 10 + 2 * (rho * quality + np.sqrt(1 - rho ** 2) * rng.normal(0, 1, (rows, dialogues)))
    human = np.clip(np.round(3 + quality), 1, 5) + 0.3 * np.arange(rows)[:, None]
    lab = np.broadcast_to(rng.permutation(dialogues) < n, human.shape)
    return np.where(lab, human, np.nan), np.where(lab, judge + offset, judge)


COLUMNS = ("estimate", "ci_low", "ci_high", "lam")


def _check(result, expected):
    for column, name in enumerate(COLUMNS):
        np.testing.assert_allclose(getattr(result, name), expected[:, column], rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(effective_labels(result), expected[:, 4], rtol=1e-4, err_msg="effective_labels")


@pytest.mark.parametrize("n, rows, regime, shared, rho", [
    (6, 3, "human", True, 0.9), (MIN_TUNED, 2, "shared", True, 0.9), (16, 4, "shared", True, 0.9),
    (14, 3, "fitted", False, 0.9), (MIN_CROSS_FITTED, 2, "crossed", True, 0.5), (30, 3, "crossed", False, 0.5)])
def test_the_worth_in_labels_of_each_lambda_regime_written_out(n, rows, regime, shared, rho):
    rng = np.random.default_rng(300 + n)
    human, judge = _study(rng, rows, 80, n, rho=rho, offset=0.6)
    result = ppi_mean(human, judge, shared=shared)
    if regime == "fitted":  # lambda fitted on the row's own labels: the interval is test_estimate's; worth uncorrected
        ratio = (result.ci_high - result.ci_low) / (result.human_only_ci_high - result.human_only_ci_low)
        np.testing.assert_allclose(effective_labels(result), n / ratio ** 2, rtol=1e-12)
        assert np.all(result.lam != 0.0)
        return
    _check(result, reference(human, judge, regime))
    if regime != "human":  # the cases hold what they check: lambda used and a correction larger than the tolerance
        plug_in = n / ((result.ci_high - result.ci_low) / (result.human_only_ci_high - result.human_only_ci_low)) ** 2
        assert np.all(result.lam != 0.0) and np.any(effective_labels(result) < plug_in * 0.998)


@pytest.mark.parametrize("with_leverage", [False, True])
def test_the_worth_in_labels_of_a_fitted_predictor_counts_all_of_se_squared_as_noisy_and_its_coefficients(
        with_leverage):
    rng = np.random.default_rng(41)
    human, judge = _study(rng, 3, 90, 12, rho=0.8, offset=0.4)
    lam = np.array([0.5, 0.8, 0.3])
    leverage = np.array([0.02, 0.05, 0.1]) if with_leverage else None
    result = ppi_mean(human, judge, lam=lam, fitted_judge=True, fit_leverage=leverage)
    _check(result, reference(human, judge, "fixed", lam=lam, fitted_judge=True, fit_leverage=leverage))
    plain = ppi_mean(human, judge, lam=lam)
    _check(plain, reference(human, judge, "fixed", lam=lam))
    assert np.all(effective_labels(result) < effective_labels(plain))


@pytest.mark.parametrize("lam", [None, 0.6])
def test_the_judge_is_used_from_two_unlabelled_dialogues(lam):
    """The judged-only part needs a variance: with one unlabelled dialogue the estimate is the labels' mean (lambda
    0), with two the judge is used, fixed or tuned (12 labels: fitted on them), the estimate mean_L(y) + lambda
    (mean_U f - mean_L f) written out."""
    rng = np.random.default_rng(17)
    f = rng.normal(3, 1, 14)
    y = np.round(f + rng.normal(0, 0.5, 14))
    for m in (1, 2):
        human = np.r_[y[:12], np.full(m, np.nan)]
        judge = f[:12 + m]
        result = ppi_mean(human, judge, lam=lam)
        if m == 1:
            assert result.lam[()] == 0.0 and result.estimate[()] == pytest.approx(y[:12].mean())
            continue
        used = lam if lam is not None else np.cov(y[:12], f[:12])[0, 1] / (
            np.var(f[:12], ddof=1) + 12 / 2 * np.var(judge, ddof=1))
        assert result.lam[()] == pytest.approx(used, rel=1e-9) and abs(used) > 0.05
        assert result.estimate[()] == pytest.approx(y[:12].mean() + used * (f[12:14].mean() - f[:12].mean()))


def test_no_correction_where_the_ratio_has_no_finite_mean_or_the_residuals_are_exactly_zero():
    """_jensen keeps 1 where its expectation does not exist or is not needed: at 2 residual degrees of freedom (3
    labels) E[1 / W] of chi^2_2 / 2 diverges at share 1, so no finite correction is made at any share; and with
    residuals exactly 0 (labels exactly linear in the judge at the fixed lambda: dyadic numbers, exact sums) nothing
    in se^2 is noisy. Both: effective_labels is the plug-in n / width_ratio^2."""
    from calibration.study.ppi import _jensen

    for share in (0.3, 0.7, 1.0):
        assert _jensen(np.array([share]), np.array([0.0]), np.array([3.0]))[0] == 1.0
        assert _jensen(np.array([share]), np.array([0.0]), np.array([4.0]))[0] > 1.0  # from 3 df on, corrected
    f = np.array([1.0, 3.0, 2.0, 5.0, 4.0, 2.0, 1.0, 3.0, 5.0, 4.0, 3.0, 1.0, 2.0, 2.0, 4.0, 5.0])
    human = np.r_[2.0 + 0.5 * f[:8], np.full(8, np.nan)]
    result = ppi_mean(human, f, lam=0.5)
    assert result.var_residual[()] == 0.0 and result.se[()] > 0.0
    ratio = (result.ci_high - result.ci_low) / (result.human_only_ci_high - result.human_only_ci_low)
    assert effective_labels(result)[()] == pytest.approx(8 / ratio ** 2, rel=1e-12)


def test_a_system_whose_judge_is_constant_does_not_move_the_other_systems_shared_lambda():
    """A judge that gives one system the same score everywhere cannot help it (lambda 0 there, the labels' mean)
    and must not enter the lambda the criterion's other systems share: their results are those computed without
    that system (before, its labels' spread entered the pooled correlation and moved the others' lambda by 2%)."""
    rng = np.random.default_rng(3)
    f = rng.normal(3, 1, (3, 60))
    y = np.round(f + rng.normal(0, 0.6, (3, 60)))
    human = np.where(rng.permutation(60) < 12, y, np.nan)
    f[2] = 5.0
    both, alone = ppi_mean(human, f, shared=True), ppi_mean(human[:2], f[:2], shared=True)
    for name in ("estimate", "ci_low", "ci_high", "lam"):
        np.testing.assert_allclose(getattr(both, name)[:2], getattr(alone, name), rtol=1e-12, err_msg=name)
    assert both.lam[2] == 0.0 and both.estimate[2] == pytest.approx(np.nanmean(human[2]))
    assert np.all(alone.lam != 0.0)


@pytest.mark.parametrize("constant", [0.0, 3.0])
def test_a_constant_judge_with_a_fixed_lambda_reports_lambda_zero_and_the_human_interval(constant):
    """A fixed lambda (a jury's) on a judge without variance: the judge cannot help, the printed lambda is 0 and
    the interval the labels' scipy t interval."""
    from scipy import stats as scipy_stats

    y = np.array([2.0, 4.0, 3.0, 5.0, 1.0, 3.0, 4.0, 2.0])
    human = np.r_[y, np.full(20, np.nan)]
    result = ppi_mean(human, np.full(28, constant), lam=0.7)
    low, high = scipy_stats.t.interval(0.95, 7, loc=y.mean(), scale=scipy_stats.sem(y))
    assert result.lam[()] == 0.0
    assert (result.ci_low[()], result.ci_high[()]) == pytest.approx((low, high), rel=1e-12)


@pytest.mark.parametrize("shared", [False, True])
def test_the_judge_is_used_when_its_labelled_spread_is_exactly_a_quarter_of_the_judged(shared):
    """MIN_SPREAD is inclusive: 10 labelled judge scores at the judged mean with squared deviations summing to 10,
    28 judged with 120 (integers: the variances 10/9 and 120/27 are exact ratios, a quarter apart to the last
    bit): lambda is tuned; with the labelled scores a little tighter it is not."""
    from calibration.study.ppi import MIN_SPREAD

    labelled_f = 3.0 + np.array([-1.0, 1.0] * 5)
    others = 3.0 + np.array([3.0, -3.0] * 5 + [2.0, -2.0] * 2 + [1.0, -1.0] * 2)
    judge = np.r_[labelled_f, others]
    y = np.array([2.0, 4.0, 3.0, 4.0, 2.0, 5.0, 1.0, 3.0, 2.0, 4.0])
    human = np.r_[y, np.full(18, np.nan)]
    assert np.var(labelled_f, ddof=1) == MIN_SPREAD * np.var(judge, ddof=1)
    result = ppi_mean(human, judge, shared=shared)
    assert result.lam[()] != 0.0
    tighter = np.r_[3.0 + 0.9 * (labelled_f - 3.0), others]
    assert ppi_mean(human, tighter, shared=shared).lam[()] == 0.0


def test_rows_outside_the_shared_lambda_do_not_enter_its_pooled_error():
    """A criterion whose systems differ in labels: two with 14 share one lambda, one with 7 is human-only (and
    enters neither the shared fit nor the pooled sums of lambda's own error). Every row written out."""
    rng = np.random.default_rng(77)
    human, judge = _study(rng, 3, 80, 14, rho=0.9, offset=0.6)
    human[2, np.flatnonzero(~np.isnan(human[2]))[:7]] = np.nan
    judge = 0.1 * judge  # a judge on a small scale: its sums of squares are of order 1
    result = ppi_mean(human, judge, shared=True)
    assert result.n_labelled.tolist() == [14, 14, 7] and result.lam[2] == 0.0 and result.lam[0] != 0.0
    _check(result, reference(human, judge, "shared"))
