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
`shared`, as `judge estimate` runs, a useless judge costs 0.4-1.4% at n = 10 over 2-6 systems, 3% for a lone row). Differences between systems gain less (the
judge's differences correlate less with the humans' than its levels do).

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
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from scipy.integrate import quad

from ..alignment import expand_all_criteria
from ..errors import CalibrationError
from ..humans import aggregate_humans
from .predictor import fit_leverage

ESTIMATE_COLUMNS = ["criterion", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
                    "human_only_ci_high", "n_labelled", "n_judged", "n_dialogues", "width_ratio",
                    "effective_labels", "labels_saved", "lambda", "n_missing_labels", "interval_note"]
DIFFERENCE_COLUMNS = ["criterion", "system_a", "system_b", "estimate", "ci_low", "ci_high", "human_only",
                      "human_only_ci_low", "human_only_ci_high", "n_labelled", "n_dialogues", "width_ratio",
                      "effective_labels", "labels_saved", "lambda", "interval_note"]


@dataclass
class PPIResult:
    """Arrays over the leading axes of the input (one value per system, pair, repetition...)."""

    estimate: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    human_only: np.ndarray
    human_only_se: np.ndarray
    human_only_ci_low: np.ndarray
    human_only_ci_high: np.ndarray
    lam: np.ndarray
    n_labelled: np.ndarray
    n_unlabelled: np.ndarray
    # The two variance terms (judged-only part, residual part), for checks against other implementations.
    var_unlabelled: np.ndarray | None = None
    var_residual: np.ndarray | None = None
    # Why no interval is given ("few": under MIN_LABELLED labels; "flat": the labels do not vary), or why it is the
    # bounded-scale one ("bounded": bounded_scale), "" otherwise.
    no_interval: np.ndarray | None = None
    # How far n / width_ratio^2 overstates on average (_jensen; for the weighted estimator also the Hajek interval's
    # design effect), which effective_labels divides out; None: not corrected.
    jensen: np.ndarray | None = None

    @property
    def width_ratio(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.se / self.human_only_se


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


def _ppi_mean(human, judge, confidence: float, lam, fitted_judge: bool = False, shared: bool = False,
              fit_leverage=None) -> PPIResult:
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
    return sum(quad(density, low, high, epsabs=0.0, epsrel=1e-10, limit=200)[0] for low, high in ((0.0, k), (k, math.inf)))


def unseen_pull(human, judge, bounds, confidence: float = 0.95) -> np.ndarray:
    """Rows whose labels cannot vouch for a t interval: they sit so far to one side of the scale, with so little
    spread, that a share of the dialogues n labels miss one time in ten, q = 1 - UNSEEN^(1/n), lying at the
    scale's far end rather than at its near end would pull the mean past the t interval's half-width:
    q |low + high - 2 mean| > t s / sqrt(n). This is the rare-failure shape (most summaries fine, a few badly
    wrong, none of those labelled): the labels look tight and the t interval is centred on the fine ones. Labels
    spread around the scale's middle, or paired differences, never trip it (their pull is small against their
    spread). Only the labels and the scale enter: the t interval is kept or replaced on what the labels show."""
    y, f = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float))
    labelled = ~np.isnan(f) & ~np.isnan(y)
    n = labelled.sum(-1)
    low, high = bounds
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        values = np.where(labelled, y, np.nan)
        mean, spread = np.nanmean(values, -1), np.nanstd(values, -1, ddof=1)
        half = t_quantile(confidence, n - 1) * spread / np.sqrt(n)
        share = 1.0 - UNSEEN ** (1.0 / n)
        return (n >= MIN_LABELLED) & (share * np.abs(low + high - 2.0 * mean) > half)


def bounded_scale(result: PPIResult, human, judge, bounds, confidence: float = 0.95) -> PPIResult:
    """`result` with the rows unseen_pull trips bounded, on the side toward the scale's far end, by the betting
    interval of the human labels alone (valid for any distribution on the scale; the judge's weight is not used
    either: its rectifier saw the same labels), and on the near side by the labels' t bound; the t interval
    elsewhere. Rows already without an interval (few or flat labels) keep none.

    Measured (tests/test_estimate_bounded.py; benchmarks/labels_coverage.py --rare): where 8-18% of summaries are
    badly wrong, coverage from 0.74-0.92 (t) to 0.94-1.00 at n = 3-20; on a bimodal scale (54% ones, 26% fives)
    from 0.92-0.93 to 0.95-0.99 at n = 4-6; on ordinary Likert labels it trips in 0-5% of studies (n = 3-6;
    none from 10), widening the average interval by 0-3%.

    Means only: paired differences keep the t interval. On real releases (SummEval, DialSummEval: 4 criteria
    each, n = 3-20 redrawn) the check tripped on 0-18% of differences, widening them by up to 37% where the t
    already covered 0.95-0.98, and did not mend the one criterion whose differences undercover (SummEval
    consistency, 0.90-0.93: the differences' failures sit on both sides of 0, which no pull toward one end sees)."""
    shown = np.isfinite(result.ci_low) & np.isfinite(result.ci_high)
    tripped = np.asarray(unseen_pull(human, judge, bounds, confidence) & shown)
    if not tripped.any():
        return result
    y, f = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float))
    labelled = ~np.isnan(f) & ~np.isnan(y)
    low, high = np.full(tripped.shape, np.nan), np.full(tripped.shape, np.nan)
    low[tripped], high[tripped] = betting_interval(y[tripped], labelled[tripped], bounds, confidence)
    # Only the far side is at risk (the unseen share would lie there): the near side keeps the labels' t bound,
    # clipped to the scale. Each side errs at most (1 - confidence) / 2, so the pair still holds.
    above = result.human_only > (bounds[0] + bounds[1]) / 2.0
    high = np.where(above, np.minimum(result.human_only_ci_high, bounds[1]), high)
    low = np.where(above, low, np.maximum(result.human_only_ci_low, bounds[0]))
    pick = lambda bounded, kept: np.where(tripped, bounded, kept)  # noqa: E731
    return replace(result, estimate=pick(result.human_only, result.estimate), se=pick(np.nan, result.se),
                   ci_low=pick(low, result.ci_low), ci_high=pick(high, result.ci_high),
                   human_only_se=pick(np.nan, result.human_only_se), human_only_ci_low=pick(low, result.human_only_ci_low),
                   human_only_ci_high=pick(high, result.human_only_ci_high), lam=pick(0.0, result.lam),
                   no_interval=pick("bounded", result.no_interval))


def betting_interval(values, labelled, bounds, confidence: float = 0.95, grid: int = 1001, orders: int = 8
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Confidence interval for the mean of labels known to lie in `bounds`, valid for any distribution there:
    the hedged betting interval of Waudby-Smith & Ramdas (JRSS-B 2023), fixed-n predictable plug-in bets.

    Rows (..., D) with `labelled` marking the labels. Each candidate mean m (a grid over the scale) is tested by two
    gamblers, one betting the labels lie above m and one below; m is rejected when the average of their wealth,
    each half-staked, reaches 1 / (1 - confidence): a nonnegative martingale under m, so by Ville's inequality a
    true m is rejected with probability at most 1 - confidence. The bets are lambda_i = sqrt(2 log(2/alpha) /
    (n sigma_{i-1}^2)) (the running variance, before label i), capped at 3/4 of what keeps the wealth positive. The
    wealth is averaged over `orders` fixed orders of the labels (an average of such wealths is one too), so the
    interval hardly depends on the order of the dialogues' ids. The interval is the grid's non-rejected span
    widened by one step."""
    low_bound, high_bound = bounds
    alpha = 1.0 - confidence
    values, labelled = np.asarray(values, dtype=float), np.asarray(labelled, dtype=bool)
    shape = values.shape[:-1]
    values, labelled = values.reshape(-1, values.shape[-1]), labelled.reshape(-1, values.shape[-1])
    x = np.clip((values - low_bound) / (high_bound - low_bound), 0.0, 1.0)
    n = labelled.sum(-1, keepdims=True)
    m = np.linspace(0.0, 1.0, grid)
    rng = np.random.default_rng(0)  # fixed orders: the same labels give the same interval
    wealth = np.zeros((len(x), grid))
    for order in range(orders):
        keys = np.where(labelled, rng.random(x.shape) if order else np.arange(x.shape[-1]), np.inf)
        index = np.argsort(keys, axis=-1)[:, :int(n.max())]
        xs, used = np.take_along_axis(x, index, -1), np.take_along_axis(labelled, index, -1)
        xs = np.where(used, xs, 0.5)
        count = np.cumsum(used, -1)
        mu = (0.5 + np.cumsum(xs * used, -1)) / (count + 1)
        sigma2 = (0.25 + np.cumsum((xs - mu) ** 2 * used, -1)) / (count + 1)
        sigma2_before = np.concatenate([np.full((len(x), 1), 0.25), sigma2[:, :-1]], -1)
        bet = np.sqrt(2.0 * np.log(2.0 / alpha) / (n * sigma2_before))[..., None]
        gap = (xs[..., None] - m) * used[..., None]
        up = np.prod(1.0 + np.minimum(bet, 0.75 / np.maximum(m, 1e-12)) * gap, axis=1)
        down = np.prod(1.0 - np.minimum(bet, 0.75 / np.maximum(1.0 - m, 1e-12)) * gap, axis=1)
        wealth += np.maximum(0.5 * up, 0.5 * down)
    kept = wealth / orders < 1.0 / alpha
    step = 1.0 / (grid - 1)
    first, last = np.argmax(kept, -1), grid - 1 - np.argmax(kept[:, ::-1], -1)
    low = np.where(kept.any(-1), np.clip(m[first] - step, 0.0, 1.0), np.nan)
    high = np.where(kept.any(-1), np.clip(m[last] + step, 0.0, 1.0), np.nan)
    scale = high_bound - low_bound
    return (low_bound + scale * low).reshape(shape), (low_bound + scale * high).reshape(shape)


def ppi_mean_weighted(human, judge, inclusion, confidence: float = 0.95, bounds=None, first=None) -> PPIResult:
    """PPI++ for labels drawn with known, unequal inclusion probabilities (an active design, `judge screen --design
    active`; Zrnic & Candes 2024, active inference), along the last axis and vectorised over leading ones.

    `inclusion`: each dialogue's inclusion probability pi (broadcast; read only where labelled). Every labelled
    dialogue weighs a_i = (1/pi_i) / sum_L 1/pi_j: the realised sum of 1/pi normalises (Hajek), so a fixed-size
    design estimates the population mean without bias to first order. The estimate is the mean over the N judged
    dialogues of phi_i = lambda f_i + [i labelled] N a_i (y_i - lambda f_i - c), c the a-weighted mean residual:

        estimate = lambda mean_all(f) + sum_L a_i (y_i - lambda f_i)
        se^2     = var(phi) / N = lambda^2 var_all(f) / N + (2 lambda / N) sum_L a_i (f_i - mean_all f) r_i
                   + sum_L a_i^2 r_i^2 n / (n - k) + lambda's own error

    (r centred; k parameters fitted on the labels). lambda minimises that variance, so under an active design it
    leans on the judge where the labels went (1/pi^2-weighted least squares, not the population slope). As in
    ppi_mean it is tuned only from MIN_TUNED labels on where the labelled judge scores spread (0 below); from
    MIN_CROSS_FITTED labels each label's lambda_i is tuned on the other labels (weighted_cross_fitted_lambdas), the
    estimate is lambda mean_all(f) + sum_L a_i (y_i - lambda_i f_i) with lambda = sum a_i lambda_i, and k = 1; from
    MIN_TUNED to MIN_CROSS_FITTED - 1 one lambda is fitted on all the labels, k = 2, and its own error is added as
    for a regression prediction. t quantile on weighted_df's degrees of freedom (with lambda tuned, Satterthwaite's
    on the terms a_i^2 r_i^2, between Kish's n_eff - k and n - k; n_eff = 1 / sum a^2, n when every pi is equal).
    With every pi equal this is ppi_mean's estimator up to lambda's objective (N for m) and f's mean over all N.
    human_only: the Hajek mean of the labels with its own se (n_eff - 1 df). `bounds`: the scale (low, high), for
    unseen_hidden; None: not checked. `first`: a two-stage plan's first, uniform stage (booleans per dialogue,
    broadcast), whose labels alone carry the bounded-scale interval there (unseen_hidden)."""
    result = _ppi_mean_weighted(human, judge, inclusion, confidence)
    return result if bounds is None else unseen_hidden(result, human, judge, bounds, confidence, first)


def two_stage_inclusion(first, probability, judged: int) -> np.ndarray:
    """What ppi_mean_weighted takes as `inclusion` for a two-stage plan (`judge screen --pilot-plan`): a first,
    uniform stage of m1 random dialogues (the pilot) and a second of m2 drawn from the N - m1 others with
    probabilities q_i chosen on the first stage's labels. Arrays over the random dialogues: `first` (bool),
    `probability` (m1 / N in the first stage; q_i, given the first stage, in the second); `judged`: N.

    The pilot's labels count: the estimate of the total is S1 + w (N - m1) mean(first stage) + (1 - w) sum(second
    stage / q), S1 the first stage's own sum. Given the first stage, the last term is unbiased for the rest's total
    whatever rule chose q, and so is the middle one over all draws of a simple random sample: the estimate is
    unbiased for any w fixed by the plan's sizes. That is the weighted mean with weights 1 + w (N - m1) / m1 in the
    first stage and (1 - w) / q_i in the second; only their ratios enter the Hajek estimator, so their inverses,
    scaled to at most 1, stand for inclusion probabilities. w = m1 (N - m1 - m2) / ((N - m1)(m1 + m2)) (m1 / (m1 +
    m2) when N is large) makes the weights equal when the second stage is uniform (q = m2 / (N - m1)): the two
    stages are then one simple random sample of m1 + m2, estimated as one. (w = m1 / (m1 + m2) weighed a first-stage
    label (N + m2) / (N - m1) times a second-stage one there, 1.5 at N = 100, m1 = m2 = 20: squared error 1-9%
    higher; benchmarks/active_design.py --two-stage.)"""
    first, probability = np.asarray(first, dtype=bool), np.asarray(probability, dtype=float)
    m1, m2 = int(first.sum()), int((~first).sum())
    if m2 == 0:
        return np.ones(len(first))  # the first stage alone: a simple random sample
    if m1 == 0:
        return probability / probability.max()
    share = m1 * (judged - m1 - m2) / ((judged - m1) * (m1 + m2))
    weight = np.where(first, 1.0 + share * (judged - m1) / m1, (1.0 - share) / probability)
    return weight.min() / weight


def unseen_hidden(result: PPIResult, human, judge, bounds, confidence: float = 0.95, first=None) -> PPIResult:
    """`result` (an active design's) without an interval on the rows unseen_pull trips: labels bunched at one end of
    the scale, where failures none of them drew could lie at the other. The betting bound that replaces the t there
    for a uniform draw (bounded_scale) assumes labels drawn uniformly, so an active design's rows get none, and
    interval_note says why. Measured (benchmarks/active_design.py --hard, rare failures: 10% of summaries badly
    wrong, the judge missing those on its hard dialogues; 2 and 6 systems, 1,000 studies): tripped on 35-37% of
    rows at n = 10, 15-17% at 20, 0-1% at 50; the t interval covered 0.85-0.90 on all rows at n = 10-20, 0.963-0.986
    on those left. At n = 50 it covers 0.944-0.954 with lambda cross-fitted (0.90-0.92 when lambda was fitted on
    the labels it corrects: skewed residuals fitted)."""
    tripped = np.asarray(unseen_pull(human, judge, bounds, confidence) & np.isfinite(result.ci_low))
    if not tripped.any():
        return result
    if first is not None:
        return first_stage_bounded(result, human, judge, first, bounds, confidence, tripped)
    hide = lambda value: np.where(tripped, np.nan, value)  # noqa: E731
    return replace(result, se=hide(result.se), ci_low=hide(result.ci_low), ci_high=hide(result.ci_high),
                   human_only_se=hide(result.human_only_se), human_only_ci_low=hide(result.human_only_ci_low),
                   human_only_ci_high=hide(result.human_only_ci_high),
                   no_interval=np.where(tripped, "unseen", result.no_interval))


def first_stage_bounded(result: PPIResult, human, judge, first, bounds, confidence: float, tripped) -> PPIResult:
    """unseen_hidden for a two-stage plan: its first stage is a uniform random draw, so the `tripped` rows take the
    betting interval (betting_interval, valid for any scores on the scale) of the first stage's labels alone, and
    their mean as the estimate; none where the first stage has fewer than MIN_LABELLED labels. effective_labels
    counts those labels only (`jensen`: n over their number)."""
    y, f, one = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float),
                                    np.asarray(first, dtype=bool))
    labelled = ~np.isnan(f) & ~np.isnan(y) & one
    count = labelled.sum(-1)
    shown = tripped & (count >= MIN_LABELLED)
    low, high = np.full(tripped.shape, np.nan), np.full(tripped.shape, np.nan)
    if shown.any():
        low[shown], high[shown] = betting_interval(y[shown], labelled[shown], bounds, confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(labelled, y, 0.0).sum(-1) / count
        worth = np.where(shown, result.n_labelled / np.maximum(count, 1), 1.0)
    pick = lambda new, kept: np.where(tripped, new, kept)  # noqa: E731
    return replace(result, estimate=pick(np.where(shown, mean, result.estimate), result.estimate),
                   se=pick(np.nan, result.se), ci_low=pick(low, result.ci_low), ci_high=pick(high, result.ci_high),
                   human_only=pick(np.where(shown, mean, result.human_only), result.human_only),
                   human_only_se=pick(np.nan, result.human_only_se), human_only_ci_low=pick(low, result.human_only_ci_low),
                   human_only_ci_high=pick(high, result.human_only_ci_high), lam=pick(0.0, result.lam),
                   no_interval=pick(np.where(shown, "first stage", "unseen"), result.no_interval),
                   jensen=worth * (1.0 if result.jensen is None else np.where(tripped, 1.0, result.jensen)))


def weighted_cross_fitted_lambdas(labelled, a, y0, fc, big_n, var_f) -> np.ndarray:
    """Each labelled dialogue's lambda for the weighted estimator (ppi_mean_weighted), tuned on the other labelled
    dialogues (leave one out), shrunk toward 0 as cross_fitted_lambdas shrinks ppi_mean's; 0 on unlabelled ones.
    Arrays (..., N), zero where unlabelled: a the Hajek weights, y0 the labels, fc the judge centred on its mean over
    all judged dialogues; big_n, var_f (..., 1).

    The others' weights a_j / (1 - a_i) give the lambda minimising the weighted variance (the quadratic of the
    docstring of ppi_mean_weighted) on them. Not cross_fitted_lambdas itself: its lambda is the unweighted slope,
    while an active design's labels weigh 1/p and the variance to minimise has 1/p^2 terms. Tuned in-sample on the
    same labels, lambda fitted a rare failure's skewed residuals: at n = 50 the interval covered 0.90-0.92
    (benchmarks/active_design.py --hard); tuned on the others, lambda_i is independent of label i."""
    terms = (a, a * y0, a * fc, a * fc * fc, a * fc * y0, a * y0 * y0)
    squares = tuple(a * term for term in terms)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Sums over the others, their weights renormalised to 1.
        scale = 1.0 / (a.sum(-1, keepdims=True) - a)
        b, by, bf, bff, bfy, byy = ((total - own) * scale for total, own in zip(_sums(*terms), terms))
        b2, b2y, b2f, b2ff, b2fy, _ = ((total - own) * scale * scale for total, own in zip(_sums(*squares), squares))
        mean_y, mean_fl = by / b, bf / b
        s_ff, s_fy, s_yy = bff - mean_fl * mean_fl, bfy - mean_fl * mean_y, byy - mean_y * mean_y
        a_ff = b2ff - 2.0 * mean_fl * b2f + mean_fl * mean_fl * b2
        a_fy = b2fy - mean_fl * b2y - mean_y * b2f + mean_fl * mean_y * b2
        lam = (a_fy - s_fy / big_n) / (a_ff + var_f / big_n - 2.0 * s_ff / big_n)
        # The shrinkage of cross_fitted_lambdas on the others' weighted correlation, with Kish's n of the others
        # (its df floored at 0: uneven weights can leave fewer than 2 effective labels).
        lam = _shrunk(lam, s_fy, s_ff, s_yy, np.clip(1.0 / b2 - 2.0, 0.0, None))
    return np.where(labelled & np.isfinite(lam), lam, 0.0)


def _ppi_mean_weighted(human, judge, inclusion, confidence: float) -> PPIResult:
    y, f, pi = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float),
                                   np.asarray(inclusion, dtype=float))
    y, f, offset = _centred(y, f)
    unit = ~np.isnan(f)
    labelled = unit & ~np.isnan(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        inverse = np.where(labelled, 1.0 / pi, 0.0)
        a = inverse / inverse.sum(-1, keepdims=True)
        n = labelled.sum(-1, keepdims=True).astype(float)
        big_n = unit.sum(-1, keepdims=True).astype(float)
        y0, fc = np.where(labelled, y, 0.0), np.where(unit, f, 0.0)  # f is centred over the judged (_centred)
        var_f = (fc * fc).sum(-1, keepdims=True) / (big_n - 1)
        y_a, f_a = (a * y0).sum(-1, keepdims=True), (a * fc).sum(-1, keepdims=True)
        dy, df_ = np.where(labelled, y0 - y_a, 0.0), np.where(labelled, fc - f_a, 0.0)
        var_fa = (a * df_ * df_).sum(-1, keepdims=True)
        estimable = (n >= MIN_TUNED) & (var_fa * n / (n - 1) >= MIN_SPREAD * var_f) & (var_f > 0)
        # As ppi_mean: from MIN_CROSS_FITTED labels each label's lambda is tuned on the others; from MIN_TUNED to
        # MIN_CROSS_FITTED - 1 one lambda is fitted on them all (the variance's quadratic in lambda, see the
        # docstring), k = 2 parameters, and its own error added as for a regression prediction (leverage).
        crossed = estimable & (n >= MIN_CROSS_FITTED)
        fitted = estimable & ~crossed
        a2 = a * a
        s_fy, a_fy, a_ff = (a * df_ * dy).sum(-1, keepdims=True), (a2 * df_ * dy).sum(-1, keepdims=True), \
            (a2 * df_ * df_).sum(-1, keepdims=True)
        in_sample = (a_fy - s_fy / big_n) / (a_ff + var_f / big_n - 2.0 * var_fa / big_n)
        lams = np.where(crossed, weighted_cross_fitted_lambdas(labelled, a, y0, np.where(labelled, fc, 0.0),
                                                               big_n, var_f),
                        np.where(fitted & labelled & np.isfinite(in_sample), in_sample, 0.0))
        lam = (a * lams).sum(-1, keepdims=True)
        tuned, fitted = lam != 0, fitted & (lam != 0)
        k = np.where(fitted, 2.0, 1.0)
        # estimate = lambda mean_all(f) + sum_L a_i (y_i - lambda_i f_i), f centred on mean_all(f).
        rectified = np.where(labelled, y0 - lams * fc, 0.0)
        estimate = (a * rectified).sum(-1, keepdims=True)
        r = np.where(labelled, rectified - estimate, 0.0)
        design = (a2 * r * r).sum(-1, keepdims=True) * n / (n - k)
        cross = 2.0 * lam / big_n * (a * fc * r).sum(-1, keepdims=True)
        leverage = np.where(fitted, f_a * f_a / var_fa, 0.0)  # (mean_all f - f_a)^2 / var_fa, f centred
        var_unlabelled = lam * lam * var_f / big_n + cross
        var_residual = design * (1.0 + leverage)
        se = np.sqrt(np.maximum(var_unlabelled + var_residual, 0.0))
        human_se = np.sqrt((a * a * dy * dy).sum(-1, keepdims=True) * n / (n - 1))
        var_y = (a * dy * dy).sum(-1, keepdims=True) * n / (n - 1)
        kish = a2.sum(-1, keepdims=True)
        components = a2 * r * r  # the residual variance's terms, one per label (weighted_df)
        # The labels' a-weighted correlation with their residuals (_jensen's rho), all three moments on the same
        # weights (var_y's n / (n - 1) would shrink it by (n - 1) / n, and a human-only row's rho^2 of 1 with it).
        s_yr, s_rr, s_yy = ((a * u * v).sum(-1, keepdims=True) for u, v in ((dy, r), (r, r), (dy, dy)))
    n, big_n, se, human_se, lam, k, tuned, var_unlabelled, var_residual, var_y = (
        v[..., 0] for v in (n, big_n, se, human_se, lam, k, tuned, var_unlabelled, var_residual, var_y))
    estimate, mean_y = estimate[..., 0] + offset, y_a[..., 0] + offset
    effective = np.floor(1.0 / np.maximum(kish[..., 0], 1e-12) + 1e-9)
    quantile = t_quantile(confidence, weighted_df(components, n, k, effective, tuned))
    human_quantile = t_quantile(confidence, effective - 1)
    result = _result(estimate, se, quantile, mean_y, human_se, human_quantile, var_y, n, big_n - n, lam,
                     var_unlabelled, var_residual)
    # effective_labels counts labels of a uniform draw, whose human-only interval is 2 t_{n-1} sqrt(var_y / n), not
    # the Hajek interval printed beside the estimate (wider by the weights' design effect): `jensen` converts.
    uniform_width = 2.0 * t_quantile(confidence, n - 1) * np.sqrt(np.maximum(var_y, 0.0) / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        design_effect = ((result.human_only_ci_high - result.human_only_ci_low) / uniform_width) ** 2
        design_effect = np.where(np.isfinite(design_effect) & (design_effect > 0), design_effect, 1.0)
        # ... and, as for ppi_mean (_jensen), the ratio's own upward bias, on the residual terms' Satterthwaite df
        # (unbounded: uneven terms, a heavy-tailed residual drawn or not, make se^2 noisy and the ratio high).
        share = np.clip(var_residual / (var_unlabelled + var_residual), 0.0, 1.0)
        r2 = np.clip(s_yr[..., 0] ** 2 / (s_yy[..., 0] * s_rr[..., 0]), 0.0, 1.0)
        rho2 = 1.0 - (1.0 - r2) * (n - 1.0) / (n - 2.0)
        df = np.round(2.0 * satterthwaite(components, n, k)) / 2.0
    bias = _jensen(np.where(np.isfinite(share), share, 0.0), np.nan_to_num(rho2), df + 1.0)
    return replace(result, jensen=design_effect * bias)


def weighted_df(components, n, k, kish, tuned) -> np.ndarray:
    """Degrees of freedom of the weighted PPI interval (ppi_mean_weighted). `components`: (..., N) the residual
    variance's terms a_i^2 r_i^2 (0 where unlabelled); n, k (parameters fitted on the labels: 2 with one lambda
    fitted on them all, 1 with lambda cross-fitted or not tuned), kish (1 / sum a^2), tuned (lambda nonzero): (...).

    With lambda tuned, Satterthwaite's df of a sum of independent variance components (Satterthwaite 1946), each
    a_i^2 r_i^2 a one-degree-of-freedom component whose squared variance is estimated without bias by
    (a_i^2 r_i^2)^2 / 3 (the fourth-moment correction of von Davier 2024, arXiv 2409.14606; Johnson & Rust 1992):
    3 (sum a^2 r^2)^2 / sum (a^2 r^2)^2, times (n - k) / n for the fitted parameters; kept between Kish's effective
    n minus k (what equal components give: von Davier shows Kish's formula is that special case) and n - k (equal
    weights). A cross-fitted lambda (from MIN_CROSS_FITTED labels) is tuned on other labels than the ones it
    corrects and fits none of them, so k = 1 there, as ppi_mean's n - 1. An informative active design draws the
    dialogues where the judge errs more often and weighs them less, which evens out the components, so the df rises
    from Kish's toward n - k; residuals with heavy tails (a useless signal, a rare failure drawn) give uneven
    components and keep Kish's.
    Without lambda (fewer than MIN_TUNED labels, or a judge that cannot be used): Kish's effective n - 1. The
    plug-in fourth moments of 5-9 components are too noisy: with the Satterthwaite df the Hajek mean of 5-7
    active labels covered 0.924-0.939 (Kish's: 0.940-0.965; 3,000 studies a cell)."""
    return np.where(tuned, np.clip(satterthwaite(components, n, k), kish - k, n - k), kish - 1)


def satterthwaite(components, n, k) -> np.ndarray:
    """3 (sum c)^2 / sum c^2 (n - k) / n over the last axis: weighted_df's estimate before it is bounded."""
    components = np.asarray(components, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        total, squares = components.sum(-1), (components * components).sum(-1)
        value = np.where(squares > 0, 3.0 * total * total / squares, n) * (n - k) / n
    return np.nan_to_num(value, nan=0.0)


def t_quantile(confidence: float, df) -> np.ndarray:
    """Two-sided t quantile per cell (NaN below 1 degree of freedom); computed once per distinct df (few)."""
    df = np.asarray(df, dtype=float)
    values, inverse = np.unique(df, return_inverse=True)
    quantiles = scipy_stats.t.ppf(0.5 + confidence / 2.0, np.where(values >= 1, values, np.nan))
    return quantiles[inverse].reshape(df.shape)


# An interval needs this many labelled dialogues: below, the t interval with n - 1 = 1 degree of freedom still
# undercovers on discrete labels (0.90 at n = 2 in the Likert simulations of tests/coverage_sim.py).
MIN_LABELLED = 3
# lambda is tuned on the labels only from this many on (see the module docstring).
MIN_TUNED = 10
# ... and cross-fitted per row from this many on; below, shared by the criterion's rows (ppi_mean's `shared`) or
# fitted on all the row's labels (n - 2 df and its own error).
MIN_CROSS_FITTED = 20
# ... and only when the labelled dialogues' judge scores vary at least this much relative to all judged ones.
MIN_SPREAD = 0.25
# A share of dialogues that n labels all miss with this probability, 1 - UNSEEN^(1/n), is what the labels cannot
# rule out (unseen_pull). 0.1 kept rare failures at 18% covered at n = 20 (0.941 against 0.935 with 0.2).
UNSEEN = 0.1


# -- from tidy frames to dialogue x system matrices ------------------------------------------------------------


@dataclass
class StudyMatrices:
    """One criterion as dialogues x systems: judge scores (NaN = not a unit) and human scores (NaN = unlabelled)."""

    criterion: str
    items: np.ndarray
    systems: np.ndarray
    judge: np.ndarray
    human: np.ndarray
    judged: np.ndarray  # bool: the judge gave a number (before imputation)
    # A combined predictor's (gap, covariance) for predictor.fit_leverage (combined_matrices); None otherwise.
    fit: tuple | None = None


def judge_matrices(judge: pd.DataFrame, criterion: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(items, systems, scores, judged) for one criterion of a load_judge_scores frame.

    A failed or abstaining judgment keeps its dialogue in the population with the system's mean judge score (a
    constant carries no information, so the estimator stays unbiased); a judgment that says N/A removes the
    dialogue from that system's population (the criterion does not apply).
    """
    part = judge[(judge["criterion"] == criterion) & (judge["status"] != "na")]
    table = part.pivot(index="item_id", columns="system", values="score").sort_index().sort_index(axis=1)
    scores = table.to_numpy(float)
    present = part.groupby(["item_id", "system"]).size().unstack().reindex_like(table).notna().to_numpy()
    judged = ~np.isnan(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a system with no number at all keeps NaN
        fill = np.nanmean(scores, axis=0)
    scores = np.where(judged, scores, np.where(present, fill[None, :], np.nan))
    return table.index.to_numpy(), table.columns.to_numpy(), scores, judged


def study_matrices(judge: pd.DataFrame, human: pd.DataFrame, criterion: str, random_items=None) -> StudyMatrices:
    """Judge and human matrices of one criterion; human scores only on `random_items` (None: all labelled)."""
    items, systems, scores, judged = judge_matrices(judge, criterion)
    part = human[human["criterion"] == criterion]
    if random_items is not None:
        part = part[part["item_id"].isin(random_items)]
    labels = part.pivot(index="item_id", columns="system", values="human").reindex(index=items, columns=systems)
    values = labels.to_numpy(float)
    values = np.where(np.isnan(scores), np.nan, values)  # a label on a dialogue the judge calls N/A is not used
    return StudyMatrices(criterion, items, systems, scores, values, judged)


def numeric_criteria(judge: pd.DataFrame, human: pd.DataFrame, criteria=None) -> list[str]:
    """The criteria to estimate: asked for, or shared by judge numbers and human numbers."""
    human_criteria = sorted(human["criterion"].unique())
    judge_criteria = sorted(set(judge.loc[judge["status"] == "ok", "criterion"]))
    if criteria is not None:
        unknown = [c for c in criteria if c not in human_criteria]
        if unknown:
            raise CalibrationError(f"--criteria: no human scores for {', '.join(unknown)}; "
                                   f"the labels have {', '.join(human_criteria) or 'none'}")
        missing = [c for c in criteria if c not in judge_criteria and "*" not in judge_criteria]
        if missing:
            raise CalibrationError(f"--criteria: no judge scores for {', '.join(missing)}; "
                                   f"the judgments have {', '.join(judge_criteria) or 'none'}")
        return list(criteria)
    shared = [c for c in human_criteria if c in judge_criteria or "*" in judge_criteria]
    if not shared:
        raise CalibrationError("the judge scores and the human labels have no numeric criterion in common "
                               f"(judge: {', '.join(judge_criteria) or '-'}; human: {', '.join(human_criteria)})")
    return shared


# -- the tables ---------------------------------------------------------------------------------------------------


@dataclass
class Estimates:
    estimates: pd.DataFrame
    differences: pd.DataFrame
    targeted: pd.DataFrame
    criteria: list[str]
    confidence: float
    random_source: str  # "plan" or "all labelled"
    n_random: int
    cleaned: bool
    notes: list[str] = field(default_factory=list)


def interval_note(code: str, n: int) -> str:
    """What the tables say where no interval is printed, and what would give one."""
    if code == "few":
        return (f"{n} labelled dialogue{'' if n == 1 else 's'}: an interval needs at least {MIN_LABELLED} "
                "labelled at random")
    if code == "flat":
        return (f"the {n} labels are all equal: no interval can be trusted; label more dialogues at random "
                f"(at least {MIN_LABELLED} that differ)")
    if code == "unseen":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "and an active design's weighted labels have no bounded-scale interval; label more dialogues")
    if code == "first stage":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "so the interval is the betting bound (valid for any scores on the scale) on the two-stage plan's "
                "first, uniform stage alone, and the estimate its mean")
    if code == "bounded":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "so that side's bound is the betting bound (valid for any scores on the scale; human labels only)")
    return ""


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


def with_labels_saved(frame: pd.DataFrame) -> pd.DataFrame:
    """`labels_saved`: the human labels a human-only estimate would need beyond those labelled for an interval this
    narrow (effective_labels - n_labelled; negative where the judge cost labels)."""
    return frame.assign(labels_saved=frame["effective_labels"].astype(float) - frame["n_labelled"].astype(float))


def twice_the_labels(frame: pd.DataFrame, *units: str) -> str:
    """The note on rows worth more than twice their labels, which a judge no better than the systems it rates cannot
    be (Dorner, Nastl & Hardt 2025: then no debiasing saves more than half the labels); blank when none is."""
    over = frame[frame["effective_labels"].astype(float) > 2.0 * frame["n_labelled"].astype(float)]
    if over.empty:
        return ""
    names = ", ".join("/".join(str(row[c]) for c in ("criterion", *units)) for _, row in over.iterrows())
    return (f"effective_labels above twice n_labelled for {len(over)} of {len(frame)} rows ({names}): a judge no "
            "better than the systems it rates is worth at most twice the labels (Dorner, Nastl & Hardt 2025), so "
            "read these as a judge stronger than these systems, or check them with more labels")


def _rows(result: PPIResult, index: int) -> dict:
    width = float(result.ci_high[index] - result.ci_low[index])
    human_width = float(result.human_only_ci_high[index] - result.human_only_ci_low[index])
    # Ratio of the printed intervals (t quantiles included), and what the estimate is worth (effective_labels).
    ratio = width / human_width if human_width > 0 else float("nan")
    n = int(result.n_labelled[index])
    return {"interval_note": interval_note(str(result.no_interval[index]), n),
            "estimate": float(result.estimate[index]), "ci_low": float(result.ci_low[index]),
            "ci_high": float(result.ci_high[index]), "human_only": float(result.human_only[index]),
            "human_only_ci_low": float(result.human_only_ci_low[index]),
            "human_only_ci_high": float(result.human_only_ci_high[index]),
            "n_labelled": n, "width_ratio": ratio, "effective_labels": float(effective_labels(result)[index]),
            "lambda": float(result.lam[index])}


def _ppi(human, judge, confidence: float, combined: bool, inclusion=None, bounds=None, leverage=None,
         first=None) -> PPIResult:
    """ppi_mean with the judge's lambda tuned, or for a combined (cross-fitted) predictor the design's own; with
    `inclusion` (each dialogue's probability of being drawn, an active design) the 1/p-weighted estimator.
    `bounds`: the scores' (low, high), for the bounded-scale check (bounded_scale; for an active design's weighted
    labels, unseen_hidden). `leverage`: the combined predictor's fit_leverage per row. `first`: a two-stage plan's
    first stage (ppi_mean_weighted)."""
    if inclusion is not None:
        return ppi_mean_weighted(human, judge, inclusion, confidence, bounds=bounds, first=first)
    if not combined:  # the criterion's systems (or pairs) share one cross-fitted lambda below MIN_CROSS_FITTED
        return ppi_mean(human, judge, confidence, bounds=bounds, shared=True)
    from .predictor import cross_prediction_lambda

    return ppi_mean(human, judge, confidence, lam=cross_prediction_lambda(human, judge), bounds=bounds,
                    fitted_judge=True, fit_leverage=leverage)


def system_estimates(matrices: StudyMatrices, confidence: float, combined: bool = False,
                     inclusion=None, bounds=None, first=None) -> pd.DataFrame:
    result = _ppi(matrices.human.T, matrices.judge.T, confidence, combined, inclusion, bounds,
                  None if matrices.fit is None else fit_leverage(*matrices.fit), first)
    rows = []
    for j, system in enumerate(matrices.systems):
        units = ~np.isnan(matrices.judge[:, j])
        rows.append({"criterion": matrices.criterion, "system": system, **_rows(result, j),
                     "n_judged": int(matrices.judged[:, j].sum()), "n_dialogues": int(units.sum())})
    return pd.DataFrame(rows)


def pair_indices(count: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array(list(combinations(range(count), 2)), dtype=int).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def difference_estimates(matrices: StudyMatrices, confidence: float, combined: bool = False,
                         inclusion=None) -> pd.DataFrame:
    """The paired differences of every pair of systems (t intervals: no bounded-scale check, see bounded_scale)."""
    a, b = pair_indices(len(matrices.systems))
    if len(a) == 0:
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    judge = (matrices.judge[:, a] - matrices.judge[:, b]).T
    human = (matrices.human[:, a] - matrices.human[:, b]).T
    result = _ppi(human, judge, confidence, combined, inclusion,
                  leverage=None if matrices.fit is None else fit_leverage(*matrices.fit, a, b))
    rows = [{"criterion": matrices.criterion, "system_a": matrices.systems[i], "system_b": matrices.systems[k],
             **_rows(result, p), "n_dialogues": int((~np.isnan(judge[p])).sum())}
            for p, (i, k) in enumerate(zip(a, b))]
    return pd.DataFrame(rows)


def estimate(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None, clean: bool = False,
             random_items=None, targeted_items=None, confidence: float = 0.95,
             judges: dict[str, pd.DataFrame] | None = None, inclusion: dict | None = None,
             scales: dict | None = None, first_stage: set | None = None) -> Estimates:
    """The whole `judge estimate` computation on loaded frames (load_judge_scores / load_human_labels).

    `random_items`: the dialogues of the plan's random part (None: every labelled dialogue). `targeted_items`:
    the plan's targeted dialogues, whose labels are summarised apart and never enter the estimates. `judges`:
    more judges' score frames (name -> frame); with them, `judge` and these are one predictor, a cross-fitted
    regression on the labels (calibration.study.predictor). `inclusion`: {dialogue: probability it was drawn}
    for the random part of an active design (ppi_mean_weighted); None for a uniform draw. `scales`: criterion (or
    "*") -> (low, high) of the human scale, for the bounded-scale check (bounded_scale); None: not checked.
    `first_stage`: a two-stage plan's first-stage dialogues (their labels carry the bounded-scale interval).
    """
    if not 0.0 < confidence < 1.0:
        raise CalibrationError(f"--confidence must be between 0 and 1, got {confidence}")
    human = aggregate_humans(labels, clean=clean)
    if "system_1" in judge.columns:
        judge = judge[judge["system_1"].isna()]  # pairwise verdicts are not scores of a system
    criteria = numeric_criteria(judge, human, criteria)
    judge = expand_all_criteria(judge, criteria)
    judges = {name: expand_all_criteria(frame, criteria) for name, frame in (judges or {}).items()}
    labelled_items = set(human["item_id"])
    source = "plan" if random_items is not None else "all labelled"
    random_items = set(labelled_items if random_items is None else random_items)
    random_labelled = labelled_items & random_items
    if not random_labelled:
        raise CalibrationError("no human label is on a dialogue of the plan's random sample: the estimates need "
                               "labels on the random part (the targeted part alone is not a random sample)")
    estimates, differences, targeted, notes = [], [], [], []
    for criterion in criteria:
        matrices = study_matrices(judge, human, criterion, random_items)
        paired = matrices
        if judges:
            matrices, paired = combined_matrices(matrices, judges), combined_matrices(matrices, judges, True)
        pi = None if inclusion is None else np.array([inclusion.get(i, np.nan) for i in matrices.items])
        bounds = (scales or {}).get(criterion, (scales or {}).get("*"))
        first = None if first_stage is None else np.isin(matrices.items, list(first_stage))
        table = system_estimates(matrices, confidence, combined=bool(judges), inclusion=pi, bounds=bounds,
                                 first=first)
        # Random-sample dialogues that have labels for other cells but not for this one: the estimate assumes
        # these labels are missing at random (or that the criterion did not apply, as the judge would say).
        in_sample = np.isin(matrices.items, list(random_labelled))
        table["n_missing_labels"] = [int((in_sample & ~np.isnan(matrices.judge[:, j])
                                          & np.isnan(matrices.human[:, j])).sum())
                                     for j in range(len(matrices.systems))]
        estimates.append(table)
        differences.append(difference_estimates(paired, confidence, combined=bool(judges), inclusion=pi))
        if targeted_items:
            targeted.append(targeted_summary(judge, human, criterion, targeted_items))
        if (table["n_labelled"] >= table["n_dialogues"]).all():
            notes.append(f"{criterion}: every judged dialogue is labelled, so the judge adds nothing: the estimates "
                         "are the human means")
        short = table[table["ci_low"].isna()]
        if len(short):
            notes.append(f"{criterion}: no interval for {', '.join(map(str, short['system']))} "
                         f"({short['interval_note'].iloc[0]})")
        bounded = table[table["ci_low"].notna() & (table["interval_note"] != "")]
        if len(bounded):
            notes.append(f"{criterion}: bounded-scale interval for {', '.join(map(str, bounded['system']))} "
                         f"({bounded['interval_note'].iloc[0]})")
    targeted_frame = pd.concat(targeted, ignore_index=True) if targeted else pd.DataFrame(
        columns=["criterion", "system", "n_labelled", "human_mean", "judge_mean"])
    estimates, differences = (with_labels_saved(pd.concat(t, ignore_index=True)) for t in (estimates, differences))
    if note := twice_the_labels(estimates, "system"):
        notes.append(note)
    return Estimates(estimates[ESTIMATE_COLUMNS], differences[DIFFERENCE_COLUMNS], targeted_frame,
                     list(criteria), confidence, source, len(random_labelled), clean, notes)


def predictor_features(matrices: StudyMatrices, judges: dict[str, pd.DataFrame]) -> np.ndarray:
    """(dialogues, systems, 1 + len(judges)) scores: the judge's, then each other judge's on the same cells
    (NaN where it has none: predictor.py gives such a cell its system's mean)."""
    layers = [matrices.judge]
    for frame in judges.values():
        part = frame[(frame["criterion"] == matrices.criterion) & (frame["status"] == "ok")]
        if "system_1" in part.columns:
            part = part[part["system_1"].isna()]
        table = part.pivot_table(index="item_id", columns="system", values="score", aggfunc="mean")
        layers.append(table.reindex(index=matrices.items, columns=matrices.systems).to_numpy(float))
    return np.stack(layers, axis=-1)


def combined_matrices(matrices: StudyMatrices, judges: dict[str, pd.DataFrame], contrasts: bool = False
                      ) -> StudyMatrices:
    """The matrices with the judge replaced by the cross-fitted combination of it and `judges`: fitted on the
    summaries' levels for the systems' means, on their departures from their dialogue's mean (`contrasts`) for
    the paired differences."""
    from dataclasses import replace

    from .predictor import cross_fitted_prediction

    units = ~np.isnan(matrices.judge)
    combined, fit = cross_fitted_prediction(predictor_features(matrices, judges), matrices.human, units,
                                            contrasts=contrasts, with_fit=True)
    return replace(matrices, judge=combined, fit=fit)


def targeted_summary(judge: pd.DataFrame, human: pd.DataFrame, criterion: str, targeted_items) -> pd.DataFrame:
    """Labels on the targeted dialogues: plain means beside the judge's, for reading only (not representative)."""
    matrices = study_matrices(judge, human, criterion, set(targeted_items))
    rows = []
    for j, system in enumerate(matrices.systems):
        labelled = ~np.isnan(matrices.human[:, j])
        if labelled.any():
            rows.append({"criterion": criterion, "system": system, "n_labelled": int(labelled.sum()),
                         "human_mean": float(matrices.human[labelled, j].mean()),
                         "judge_mean": float(matrices.judge[labelled, j].mean())})
    return pd.DataFrame(rows, columns=["criterion", "system", "n_labelled", "human_mean", "judge_mean"])


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
