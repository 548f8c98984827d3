"""PPI++ for labels drawn with known, unequal inclusion probabilities (an active or two-stage design; Zrnic &
Candes 2024, active inference): the Hajek-weighted estimator, its cross-fitted lambdas, its degrees of freedom
(Satterthwaite 1946 with von Davier's fourth-moment correction, between Kish's n and n) and a two-stage plan's
inclusion weights. Arrays in, a PPIResult (calibration.study.ppi) out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .bounded import unseen_hidden
from .ppi import (
    MIN_CROSS_FITTED,
    MIN_SPREAD,
    MIN_TUNED,
    PPIResult,
    _centred,
    _jensen,
    _result,
    _shrunk,
    _sums,
    t_quantile,
)


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
