"""Each system's mean human score from many judge scores and few human labels: prediction-powered inference.

The estimator (Angelopoulos et al., Science 2023; power-tuned as in PPI++, Angelopoulos, Duchi & Zrnic 2023)
uses the judge as a control variate. With n labelled dialogues L (human score y, judge score f) and m judged but
unlabelled dialogues U, both drawn at random from the same population of dialogues,

    estimate = mean_L(y) + lambda * (mean_U(f) - mean_L(f))

is unbiased for the population mean of y for any fixed lambda, whatever the judge's scale or bias: the judge
only has to correlate with the humans to help. Its variance is

    lambda^2 var(f) / m + var_L(y - lambda f) / n,

where var(f) is estimated on all n + m judged dialogues (the judge is seen everywhere; with few unlabelled
dialogues their own variance would be a poor estimate), and lambda is the value that minimises this estimated
variance: cov_L(y, f) / (var_L(f) + n/m var(f)).
lambda = 0 is the human-only estimate; lambda is not clipped to [0, 1] because a metric on another scale (ROUGE
in 0..1 against a 1..5 Likert scale) needs a slope far from 1.

The interval, and when none is printed. Tuning lambda on the same n labels that estimate the mean fits them:
with the plain PPI++ standard error and n - 1 degrees of freedom, nominal 95% intervals covered 73% at n = 2, 83%
at 3, 87% at 4, 90% at 6 and 92% at 10 in Likert simulations (with lambda fixed they cover 95-96%). Two remedies,
by n:
- From MIN_CROSS_FITTED = 20 labels on, lambda is cross-fitted (cross-prediction, Zrnic & Candes 2024): each
  labelled dialogue's lambda is tuned on the other labelled dialogues (leave one out) and shrunk toward 0 by the
  evidence they give for it (t^2 / (1 + t^2)); the estimate is mean_L(y_i - lambda_i f_i) + mean(lambda_i) mean_U(f),
  unbiased because no lambda_i has seen its own label; t interval on n - 1 degrees of freedom; tests check it
  against the authors' `ppi_py.crossppi_mean_*`. Measured (Gaussian and Likert, judge correlation 0-0.9, 100
  judged, 6,000 repetitions): coverage 0.944-0.955; width against the oracle (the best lambda known in advance)
  within 3% at n = 20 and 1% at 50; with a useless judge 1.010 x the human-only width at 20, 1.002 at 50 (the
  in-sample lambda below: 1.044 and 1.026).
- From MIN_TUNED = 10 to 19 labels, `judge estimate` (ppi_mean's `shared`) gives a criterion's systems (or its
  pairs) one lambda, cross-fitted over all their labels (shared_cross_fitted_lambdas: each dialogue's from the other
  dialogues' labels in every system; a lone row's from its own other labels); t on n - 1. A lambda estimated from n
  labels costs about 1/n of the variance (at n = 10, 9% of width fitted per system); shared over S systems about
  1/(nS): width within 0.4-4.3% of the oracle at n = 10 for means (benchmarks/width_decomposition.py). Where the
  systems' best lambdas differ a shared one is not their optimum (still unbiased: no lambda sees its own labels);
  on DialSummEval it was 2-3% wider than each system's own at 20-30 labels, hence per system from 20 on.
  Without `shared` (other callers), lambda is fitted on all the row's labels and the interval is that of a
  least-squares prediction of y at the unlabelled mean of f: residuals on n - 2 degrees of freedom, plus lambda's
  own error, s_e^2 (mean_U f - mean_L f)^2 / S_ff, with a t quantile on n - 2 (tests check it against statsmodels'
  OLS prediction interval).
lambda is tuned only when the labelled dialogues' judge scores vary at least MIN_SPREAD = 1/4 as much as all judged
ones; otherwise lambda = 0 (the human-only estimate). Both conditions look at judge scores only, never at the
labels, so choosing does not bias the interval. No interval at all (NaN bounds and an `interval_note`) below
MIN_LABELLED = 3 labels (the t interval with one degree of freedom covered 0.90 on discrete labels) or when the
labels do not vary (two differences of exactly 1.0 once printed 1.000 [1.000, 1.000], "separated").

Labels bunched at one end of the scale (bounded_scale). When most summaries are fine and a few badly wrong, a small
sample often holds no failure, and every interval built on the t then sits on the fine summaries (coverage 0.73-0.95
at n = 3-20 with 8-18% failures). Where the scale is known (`judge estimate` always knows the rubric's), a system's
row whose labels a share of dialogues they would miss one time in ten could pull, from the scale's far end, past the
t half-width takes on that side the betting bound for bounded means (valid for any scores on the scale) and keeps
the t bound on the other; paired differences keep the t interval (see bounded_scale for both measurements).

Measured (tests/coverage_sim.py, 4,000 repetitions, 100 judged dialogues; tests/test_small_n_coverage.py runs
the grid in CI): coverage 0.943-0.968 for the mean and the paired difference at every n in 3, 4, 6, 10, 20, 50,
on Likert and Gaussian data, judge correlations 0, 0.3, 0.7. The price of honesty, in width against the human-only
interval from the same labels: at n = 10 a judge uncorrelated with humans widens it by about 9% (1% at n = 20), one
at 0.3 by 5%, while a judge at 0.7 narrows a system's mean by 14-19% (those are one row fitted in-sample; with
`shared`, as `judge estimate` runs, a useless judge costs 0.4-1.4% at n = 10 over 2-6 systems, 3% for a lone
row). Differences between systems gain less (the judge's differences correlate less with the humans' than its
levels do).

A percentile bootstrap was not chosen: at n of about 20 it is narrower than the t interval (no n - 1, no heavier
tails), so it undercovers where the t interval does not, and it costs resamples for nothing.

Not the authors' `ppi_python`: the mean estimator is a few lines of numpy, while that package pulls numba, llvmlite,
statsmodels and gdown, works on one vector per call (the coverage checks need thousands at once), clips lambda to
[0, 1] and uses a normal interval. tests/test_estimate.py checks this module against it when it is installed.

The unit of sampling is the dialogue. For one system's mean there is one summary per dialogue; for the difference
between two systems the unit is the paired per-dialogue difference (same estimator on y_a - y_b with f_a - f_b), so
the correlation between the systems' summaries of one dialogue is accounted for.

The judged dialogues are taken as a random sample of a larger population, and the interval is for that
population's mean; for the mean over exactly the judged dialogues (what labelling all of them would give) it is
therefore conservative.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
from scipy.integrate import quad

from .bounded import bounded_scale
from .ppi_result import MIN_LABELLED, PPIResult, t_quantile  # noqa: F401  (re-exported: the estimators' names)


def _centred(y, f):
    """y and f minus a per-row constant (their mean where present), and the constant subtracted from y. Centring
    f at the mean of every judged dialogue also keeps the cross-fitted lambdas' differences from scaling f's level."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row (nothing labelled) is fine here
        y_offset = np.nan_to_num(np.nanmean(y, axis=-1, keepdims=True))
        f_offset = np.nan_to_num(np.nanmean(f, axis=-1, keepdims=True))
    return y - y_offset, f - f_offset, y_offset[..., 0]


def _sums(*arrays):
    return [a.sum(-1, keepdims=True) for a in arrays]


def _shrunk(lam, s_fy, s_ff, s_yy, df):
    """lambda times t^2 / (1 + t^2), t^2 = r^2 df / (1 - r^2) the squared t statistic of the correlation r^2 =
    s_fy^2 / (s_ff s_yy) on df degrees of freedom (0 where either variance is 0): see cross_fitted_lambdas."""
    product = s_ff * s_yy
    r2 = np.clip(np.where(product > 0, s_fy * s_fy / product, 0.0), 0.0, 1.0 - 1e-12)
    t2 = r2 * df / (1.0 - r2)
    return lam * t2 / (1.0 + t2)


def cross_fitted_lambdas(labelled, y0, fl, n, m, var_f) -> np.ndarray:
    """Each labelled dialogue's lambda, tuned on the other labelled dialogues (leave one out) and shrunk toward 0
    by the evidence those give for it; 0 on unlabelled dialogues. Arrays: (..., N) with zeros where unlabelled;
    n, m, var_f: (..., 1).

    Tuned on the others, lambda_i is independent of dialogue i's own label, so the rectified term
    y_i - lambda_i f_i is unbiased and costs no degree of freedom (cross-prediction, Zrnic & Candes 2024). The
    shrinkage t^2 / (1 + t^2), t being the others' correlation t statistic, approximates lambda^2 / (lambda^2 +
    var(lambda_hat)), the factor that minimises the variance a noisy lambda adds: it keeps a useless judge from
    widening the interval by the full 1/n that an untrusted lambda costs.
    """
    k = n - 1.0
    totals = _sums(y0, fl, y0 * y0, fl * fl, y0 * fl)
    sy, sf, syy, sff, syf = (total - own for total, own in zip(totals, (y0, fl, y0 * y0, fl * fl, y0 * fl)))
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = (syf - sy * sf / k) / (k - 1.0)
        var_fl = (sff - sf * sf / k) / (k - 1.0)
        var_y = (syy - sy * sy / k) / (k - 1.0)
        lam = _shrunk(cov / (var_fl + n / m * var_f), cov, var_fl, var_y, k - 2.0)
    return np.where(labelled & np.isfinite(lam), lam, 0.0)


def _over_rows(a: np.ndarray) -> np.ndarray:
    """Sums over the rows (axis -2) of (..., R, 1) or (..., R, D) arrays, kept as an axis; one row (1-d): as is."""
    return a.sum(-2, keepdims=True) if a.ndim >= 2 else a


def shared_cross_fitted_lambdas(labelled, y0, fl, n, m, var_f, rows) -> np.ndarray:
    """One lambda per labelled dialogue shared by every row of axis -2 (the systems, or the pairs, of a
    criterion), tuned on the other labelled dialogues of all those rows (leave one dialogue out: its labels in
    every row) and shrunk toward 0 as cross_fitted_lambdas does; 0 on unlabelled dialogues and on rows outside
    `rows` (those not tuned, which do not enter the fit either). Arrays: (..., R, D) with zeros where unlabelled;
    n, m, var_f, rows: (..., R, 1).

    Each row's within-row cross-products (its own means removed) are summed over rows: a common slope, estimated
    from about R times as many labels as one row's, so its error costs about 1/R of the 1/n a per-row lambda costs
    at n = 10-19. Valid whatever the rows' true slopes (any lambda independent of the dialogue's own labels keeps
    its rectified term unbiased); where the slopes differ it is not each row's optimum."""
    use = rows & labelled
    yr, fr = np.where(use, y0, 0.0), np.where(use, fl, 0.0)
    k = use.sum(-1, keepdims=True) - use  # each row's labelled count without dialogue i
    totals = _sums(yr, fr, yr * yr, fr * fr, yr * fr)
    sy, sf, syy, sff, syf = (total - own for total, own in zip(totals, (yr, fr, yr * yr, fr * fr, yr * fr)))
    with np.errstate(invalid="ignore", divide="ignore"):
        safe = np.maximum(k, 1)
        c_yf = _over_rows(np.where(k >= 2, syf - sy * sf / safe, 0.0))
        c_ff = _over_rows(np.where(k >= 2, sff - sf * sf / safe, 0.0))
        c_yy = _over_rows(np.where(k >= 2, syy - sy * sy / safe, 0.0))
        # The unlabelled dialogues' share of PPI++'s denominator, n/m var(f) per row, in the same units.
        c_u = _over_rows(np.where(rows & (k >= 2), (k - 1.0) * n / m * var_f, 0.0))
        dof = _over_rows(np.where(rows & (k >= 2), k - 1.0, 0.0))
        lam = _shrunk(c_yf / (c_ff + c_u), c_yf, c_ff, c_yy, dof - 1.0)
    return np.where(use & np.isfinite(lam), lam, 0.0)


def ppi_mean(human, judge, confidence: float = 0.95, lam=None, bounds=None, fitted_judge: bool = False,
             shared: bool = False, fit_leverage=None) -> PPIResult:
    """PPI++ estimate of the mean human score along the last axis (dialogues), vectorised over leading axes
    (systems, pairs, repetitions...).

    `judge`: the judge score of each dialogue, NaN where the dialogue is not in the population (not judged).
    `human`: the human score, NaN where the dialogue is not labelled. Labelled dialogues must be judged.
    `lam`: a fixed lambda (broadcast), or None for the cross-fitted, power-tuned one.
    `bounds`: (low, high) the human scores cannot leave (the rubric's scale; for differences, low - high and
    high - low), or None. With them, rows whose labels cannot vouch for a t interval get the bounded-scale one
    (bounded_scale).
    `fitted_judge`: `judge` is a predictor fitted on these labels (the jury's cross-fitted regression): its spread,
    and so the judged part of se^2, is as noisy as the residual part (for effective_labels' correction, _jensen).
    `fit_leverage`: per row, the variance a fitted predictor's coefficients add to the estimate over the residual
    variance (predictor.fit_leverage), counted by effective_labels only (the t quantile absorbs it in the interval).
    `shared`: with `lam` None, the rows of axis -2 (a criterion's systems, or its pairs) share one cross-fitted
    lambda below MIN_CROSS_FITTED labels (shared_cross_fitted_lambdas) instead of each fitting its own on its labels.
    """
    result = _ppi_mean(human, judge, confidence, lam, fitted_judge, shared, fit_leverage)
    return result if bounds is None else bounded_scale(result, human, judge, bounds, confidence)


def _ppi_mean(human, judge, confidence: float, lam, fitted_judge: bool, shared: bool, fit_leverage) -> PPIResult:
    y, f = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float))
    y, f, offset = _centred(y, f)
    unit = ~np.isnan(f)
    labelled = unit & ~np.isnan(y)
    unlabelled = unit & ~labelled
    y0, f0 = np.where(labelled, y, 0.0), np.where(unit, f, 0.0)
    fl, fu = np.where(labelled, f0, 0.0), np.where(unlabelled, f0, 0.0)
    n, m = labelled.sum(-1, keepdims=True).astype(float), unlabelled.sum(-1, keepdims=True).astype(float)
    sy, syy, sf, sff, sfu = _sums(y0, y0 * y0, fl, fl * fl, fu)
    with np.errstate(invalid="ignore", divide="ignore"):
        var_y = (syy - sy * sy / n) / (n - 1)
        var_fl = (sff - sf * sf / n) / (n - 1)
        # f is observed on every judged dialogue: its variance is best estimated on all of them together.
        var_f = np.sum(f0 * f0, -1, keepdims=True) / (n + m - 1)  # f0 is centred on the judged mean
        cov = (np.sum(y0 * fl, -1, keepdims=True) - sy * sf / n) / (n - 1)
        fitted = np.zeros(n.shape, dtype=bool)  # rows whose lambda is fitted on their own labels
        together = np.zeros(n.shape, dtype=bool)  # rows sharing one cross-fitted lambda
        if lam is None:
            # lambda is tuned only where it can be: enough labels, and labelled dialogues whose judge scores
            # spread over a fair part of the judge's range. Both conditions look at the judge's scores only,
            # never at the labels, so choosing between tuned and human-only does not bias the interval. A constant
            # judge (var_f 0) is never used, so its row does not enter a shared lambda's fit either.
            estimable = (n >= MIN_TUNED) & (var_fl >= MIN_SPREAD * var_f) & (m >= 2) & (var_f > 0)
            crossed = estimable & (n >= MIN_CROSS_FITTED)
            fitted = estimable & ~crossed
            # Shared: the criterion's rows below MIN_CROSS_FITTED labels tune one lambda together, cross-fitted
            # (a lone row: on its own other labels); otherwise each fits its own on all its labels.
            if shared:
                together, fitted = fitted, np.zeros(n.shape, dtype=bool)
                below = shared_cross_fitted_lambdas(labelled, y0, fl, n, m, var_f, together)
            else:
                below = np.where(fitted & labelled, cov / (var_fl + n / m * var_f), 0.0)
            lams = np.where(crossed, cross_fitted_lambdas(labelled, y0, fl, n, m, var_f), below)
        else:
            fixed = np.broadcast_to(np.asarray(lam, dtype=float)[..., None], labelled.shape)
            lams = np.where(labelled & (m >= 2) & np.isfinite(fixed), fixed, 0.0)
        # No usable unlabelled part (m < 2) or a constant judge: the judge cannot help; humans only.
        lams = np.where(np.isfinite(lams) & (var_f > 0), lams, 0.0)
        lam_bar = lams.sum(-1, keepdims=True) / n
        fitted &= lam_bar != 0
        rectified = np.where(labelled, y0 - lams * fl, 0.0)
        (sr, srr), mean_fu = _sums(rectified, rectified * rectified), sfu / m
        estimate = sr / n + np.where(lam_bar != 0, lam_bar * mean_fu, 0.0)
        var_unlabelled = np.where(lam_bar != 0, lam_bar * lam_bar * var_f / m, 0.0)
        # A lambda fitted on the row's own labels fits them: its residuals are judged with n - 2 degrees of
        # freedom, and its own error, (lambda_hat - lambda) (mean_U f - mean_L f), is added as for a regression
        # prediction at the unlabelled mean (variance s_e^2 (mean_U f - mean_L f)^2 / S_ff).
        df = np.where(fitted, n - 2, n - 1)
        leverage = np.where(fitted, (mean_fu - sf / n) ** 2 / (var_fl * (n - 1)), 0.0)
        leverage = np.where(np.isfinite(leverage), leverage, 0.0)
        var_residual = np.maximum(srr - sr * sr / n, 0.0) / df * (1.0 / n + leverage)
        se = np.sqrt(var_unlabelled + var_residual)
        human_only_se = np.sqrt(np.maximum(var_y, 0.0) / n)
        mean_y = sy / n
        s_yr = (np.sum(y0 * rectified, -1, keepdims=True) - sy * sr / n) / (n - 1)
        s_r2 = np.maximum(srr - sr * sr / n, 0.0) / (n - 1)
        share = np.where(var_residual > 0, var_residual / (var_unlabelled + var_residual), 0.0)
        # effective_labels' correction (_jensen). The sample rho^2 is biased upward (by about (1 - rho^2) /
        # (n - 2)): the adjusted one.
        rho2 = 1.0 - (1.0 - np.clip(s_yr * s_yr / (var_y * s_r2), 0.0, 1.0)) * (n - 1.0) / (n - 2.0)
        # A jury fitted on these labels: its spread var_f is as noisy as the residuals, so all of se^2 counts as
        # noisy (measured on the jury: the factor then tracks the plug-in's overstatement within 0.01-0.02).
        noisy = np.ones_like(share) if fitted_judge else share
        # Rows whose lambda is fitted on their own labels couple X and Y beyond _jensen's model (s_r^2 = s_y^2
        # (1 - r^2)); there the plug-in overstated by 1-5% (n = 10, rho 0.5-0.9) and the correction overshot to
        # 0.95: left uncorrected.
        jensen = np.where(fitted, 1.0, _jensen(noisy, rho2, n))
        # A shared lambda's own error, (lambda_hat - lambda) (mean_U f - mean_L f), is not in se^2 (the t quantile
        # absorbs it: coverage 0.95-0.96 at n = 10), but it is in what the estimate is worth: effective_labels
        # counts it, var(lambda_hat) = s_r^2 C_ff / (C_ff + C_u)^2 from the rows' pooled sums (without it the
        # printed value overstated a strong judge's worth by 6% at n = 10, 2 systems).
        c_ff = _over_rows(np.where(together, sff - sf * sf / n, 0.0))
        c_u = _over_rows(np.where(together, (n - 1.0) * n / m * var_f, 0.0))
        lambda_error = np.where(together & (lam_bar != 0),
                                s_r2 * c_ff / (c_ff + c_u) ** 2 * (mean_fu - sf / n) ** 2, 0.0)
        # Likewise a fitted predictor's coefficients (the jury): their error moves every held-out prediction of
        # a system together, lambda^2 s_r^2 fit_leverage (predictor.fit_leverage); se^2 treats the predictions as
        # independent (at n = 10, 2 systems, E se^2 / MSE 0.95-0.96, with this term 0.98-0.99).
        if fit_leverage is not None:
            lambda_error = lambda_error + lam_bar ** 2 * s_r2 * np.asarray(fit_leverage, dtype=float)[..., None]
        jensen = jensen * (1.0 + np.where(se > 0, lambda_error / se ** 2, 0.0))
    # The (..., 1) sums back to one value per row, the centring undone.
    n, m, var_y, se, human_only_se, lam_bar, var_unlabelled, var_residual, df, jensen = (
        a[..., 0] for a in (n, m, var_y, se, human_only_se, lam_bar, var_unlabelled, var_residual, df, jensen))
    estimate, mean_y = estimate[..., 0] + offset, mean_y[..., 0] + offset
    quantile, human_quantile = t_quantile(confidence, df), t_quantile(confidence, n - 1)
    return replace(_result(estimate, se, quantile, mean_y, human_only_se, human_quantile, var_y, n, m, lam_bar,
                           var_unlabelled, var_residual), jensen=jensen)


def _jensen(share, rho2, n):
    """How far the per-row ratio var(human-only) / se^2, which effective_labels prints, overstates on average:
    E[X / Y] / (E X / E Y) for X = s_y^2 and Y = n se^2 = n var_unlabelled + s_r^2, under normal labels. Only s_r^2
    is noisy (var_unlabelled comes from all N judged dialogues): s_r^2 = sigma_r^2 W, W ~ chi^2_df / df. Given the
    residuals, y = b r + e with e independent of them, so E[s_y^2 | r] = b^2 s_r^2 + sigma_e^2 and exactly

        E[X / Y] / (E X / E Y) = 1 + (g - 1) (1 - rho^2 / share),   g = E[(c + 1) / (c + W)], c = 1 / share - 1

    (share: the residual part's share of se^2; rho: the labels' correlation with their residuals). g is the F
    distribution's mean df / (df - 2) when share = 1 and X, Y independent; here they share the labels, which
    removes the rho^2 / share part of the bias (a good judge's residual tracks y's own spread). The second-order
    (delta-method) version, 1 + 2 share (share - rho^2) / df, drops the 1 / df^2 terms (about a quarter of the
    bias at n = 10). Rows where it is below 1 keep 1: never raised above the plug-in. Measured at n = 10, rho 0.9
    (tests/test_estimate_effective.py): a judge with lambda fixed overstated by 7%, corrected 1.2%; the jury
    (fitted_judge) by 14-18%, corrected 5-8% (the rest: its se^2 a little small on average at 10 labels, which
    fit_leverage counts in _ppi_mean: 1.00-1.01)."""
    share, rho2, n = np.broadcast_arrays(share, rho2, n)
    df = n - 1.0  # s_r^2's degrees of freedom: lambda is not fitted on these labels
    g = np.ones(share.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = 1.0 / share - 1.0
        at = np.isfinite(df) & (df > 2) & (share > 0) & np.isfinite(c)
        pairs = {(float(d), float(e)) for d, e in zip(df[at], c[at])}
        value = {(d, e): (e + 1.0) * _mean_inverse(e, d) for d, e in pairs}
        g[at] = [value[float(d), float(e)] for d, e in zip(df[at], c[at])]
        factor = 1.0 + (g - 1.0) * (1.0 - np.clip(rho2, 0.0, 1.0) / share)
    return np.where(np.isfinite(factor), np.maximum(factor, 1.0), 1.0)


def _mean_inverse(c: float, df: float) -> float:
    """E[1 / (c + W)], W ~ chi^2_df / df, df > 2: W = 2G / df with G ~ Gamma(k = df / 2), so the mean is
    E[k / (c k + G)], integrated by quad in G on both sides of its mean k (a fixed Gauss-Laguerre rule missed the
    x^(k-2) pole at c = 0 by 14-36% at 2.5-3 df; this matches scipy's chi2.expect to 1e-10 from 2.05 to 20,000 df).
    No absolute tolerance: the integrand is tiny when c is large and only relative accuracy means anything."""
    k, log_norm = df / 2.0, math.lgamma(df / 2.0)

    def density(x):  # quad's Gauss-Kronrod nodes are interior: never x = 0
        return math.exp((k - 1.0) * math.log(x) - x - log_norm) * k / (c * k + x)
    return sum(quad(density, low, high, epsabs=0.0, epsrel=1e-10, limit=200)[0]
               for low, high in ((0.0, k), (k, math.inf)))


# lambda is tuned on the labels only from this many on (see the module docstring).
MIN_TUNED = 10


# ... and cross-fitted per row from this many on; below, shared by the criterion's rows (ppi_mean's `shared`) or
# fitted on all the row's labels (n - 2 df and its own error).
MIN_CROSS_FITTED = 20


# ... and only when the labelled dialogues' judge scores vary at least this much relative to all judged ones.
MIN_SPREAD = 0.25


def effective_labels(result: PPIResult) -> np.ndarray:
    """What each row's estimate is worth in human-only labels: n / width_ratio^2 (the n that would give the
    human-only interval this width; t quantiles included, so a tuned lambda's lost degree of freedom counts),
    divided on t rows by the plug-in ratio's own upward bias (`jensen`, see _jensen): a ratio of two noisy
    variances overstates on average (E[1/X] > 1/E[X])."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = (result.ci_high - result.ci_low) / (result.human_only_ci_high - result.human_only_ci_low)
        # (a two-stage plan's "first stage" rows: jensen is n over the first stage's labels, all they are worth)
        jensen = 1.0 if result.jensen is None else np.where(np.isin(result.no_interval, ("", "first stage")),
                                                            result.jensen, 1.0)
        return np.where(ratio > 0, result.n_labelled / ratio ** 2 / jensen, np.nan)


def _result(estimate, se, quantile, mean_y, human_se, human_quantile, var_y, n, m, lam, var_unlabelled,
            var_residual) -> PPIResult:
    """The PPIResult of either estimator, with no interval where none can hold: too few labels, or labels without
    variance (discrete scores that happen to agree give a zero-width interval that claims certainty the labels do
    not have)."""
    spread = np.sqrt(np.maximum(var_y, 0.0))
    degenerate = ~(spread > 1e-9 * (1.0 + np.abs(mean_y)))
    hidden = (n < MIN_LABELLED) | degenerate
    note = np.where(n < MIN_LABELLED, "few", np.where(degenerate, "flat", ""))
    nan = np.full(np.shape(estimate), np.nan)
    return PPIResult(
        estimate=estimate, se=np.where(hidden, np.nan, se),
        ci_low=np.where(hidden, nan, estimate - quantile * se), ci_high=np.where(hidden, nan, estimate + quantile * se),
        human_only=mean_y, human_only_se=np.where(hidden, np.nan, human_se),
        human_only_ci_low=np.where(hidden, nan, mean_y - human_quantile * human_se),
        human_only_ci_high=np.where(hidden, nan, mean_y + human_quantile * human_se), lam=lam,
        n_labelled=np.asarray(n).astype(int), n_unlabelled=np.asarray(m).astype(int),
        var_unlabelled=var_unlabelled, var_residual=var_residual, no_interval=note)
