"""Several judges as one predictor: a cross-fitted ridge regression of the human score on every judge's scores.

`judge estimate --judge NAME=FILE ...` gives PPI++ more than one predictor (LLM judges, prompts, metrics, a
judge's probability expectation). They are combined into one score per summary by a ridge regression of the
human score on the standardised predictors, fitted on labelled dialogues and then handed to estimate.ppi_mean as
its judge. Fitting it on the labels it corrects would fit them (a 32-metric regression on 20 labels explains
noise), so the fit is cross-fitted (cross-prediction, Zrnic & Candes 2024): the labelled dialogues are split into
K folds, each fold's summaries are predicted by the regression fitted on the other folds, and an unlabelled
dialogue gets the mean of the K regressions. No prediction of a labelled summary has seen its own label, so the
rectifier y - f keeps its mean and the regression spends no degree of freedom of the interval.

What is fitted, and why:
- one regression per criterion, pooled over its systems (n labelled dialogues x S systems rows, where a
  per-system fit has only n), within systems: every predictor centred on its system's mean over all judged
  dialogues (no label used) and the labels on their system's mean in the training folds. Levels between systems
  are what the study estimates; only the within-system variation helps PPI (a constant shift of a system's
  predictor leaves its estimate unchanged). The regression is on the labels' scale, so ppi_mean weighs it by the
  design's own lambda, m / (n + m), with nothing more fitted (cross_prediction_lambda).
- folds over dialogues, never over summaries: a dialogue's summaries share its difficulty, so a fold that
  held one of them out while training on another would leak it.
- the ridge penalty chosen by generalised cross-validation on each training set, from a grid wide enough to
  reach "all predictors in proportion to their covariance with the labels" (a large penalty) and near least
  squares (a small one, when labels are plentiful); or, chosen the same way, the judge of --judgments (the first
  predictor) alone, or no predictor at all. The ridge shrinks a strong judge with the rest: at 10 labelled
  dialogues of 2 systems (rho 0.9) its interval was 1.30x the oracle's where the judge alone gave 1.09x; with the
  judge alone among the candidates, 1.14-1.16x (benchmarks/labels_coverage.py).
- a predictor's missing cells (failures, a metric absent for a summary) take its system's mean over the judged
  dialogues: a constant carries no information and costs no bias.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

# Folds of labelled dialogues (K); fewer labelled dialogues than this: leave one out.
FOLDS = 10
# Ridge penalties, relative to the mean eigenvalue of the training set's Gram matrix (candidate_inverses: with the
# judge alone and no predictor, chosen when nothing beats the systems' means, so a useless jury costs nothing).
# Generalised cross-validation counts each degree of freedom twice: plain GCV is optimistic on 10-20 labelled
# dialogues (eight useless predictors widened the interval by 2% at 8 labels; counted twice, by nothing, while a
# useful jury still saves 15% at 10 labels; benchmarks/labels_coverage.py). The judge alone's, never shrunk (its
# coefficient admitted whole or not at all), counts three times: admitted on 9-18 training rows by a chance fit, its
# coefficient is inflated (the winner's curse); counted twice, a weak judge (rho 0.3, 2 systems, 10 labels) widened
# the differences' interval to 1.007x human-only, three times 1.001x.
DOF_WEIGHT = 2.0
JUDGE_DOF_WEIGHT = 3.0
PENALTIES = np.array([0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0])


def standardised(features: np.ndarray, units: np.ndarray, contrasts: bool = False) -> np.ndarray:
    """(..., D, S, k) predictors centred on each system's mean over its units (judged dialogues) and scaled by each
    predictor's within-system sd; 0 outside the units and where a predictor is missing (its system's mean). No
    label is used. A predictor constant within every system is 0 everywhere (it cannot help). `contrasts`: centred
    on each dialogue's mean over its systems as well (what differences between systems see)."""
    x = np.where(units[..., None], features, np.nan)
    # Means of all-NaN slices (a predictor absent for a system) are NaN by design here: no warning.
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        x = np.where(np.isnan(x) & units[..., None], np.nanmean(x, axis=-3, keepdims=True), x)
        if contrasts:
            x = x - np.nanmean(x, axis=-2, keepdims=True)
        centred = x - np.nanmean(x, axis=-3, keepdims=True)
        sd = np.sqrt(np.nanmean(centred * centred, axis=(-3, -2), keepdims=True))
        scaled = np.where(sd > 1e-12, centred / sd, 0.0)
    return np.nan_to_num(scaled)


def cross_fitted_prediction(features, human, units=None, folds: int = FOLDS, contrasts: bool = False,
                            with_fit: bool = False):
    """One predictor per summary from several: (..., D, S) out of (..., D, S, k) `features` (dialogues x systems
    x predictors; NaN where a predictor has no score) and (..., D, S) `human` labels (NaN where unlabelled).

    `units`: (..., D, S) booleans, the summaries in the population (default: where any predictor has a score);
    NaN outside them. A labelled summary's prediction comes from the regression fitted on the other folds of
    labelled dialogues; an unlabelled one's is the mean of every fold's. Vectorised over leading axes
    (repetitions in the simulations). `contrasts`: the regression of each summary's departure from its dialogue's
    mean (labels and predictors alike): the predictor of the paired differences between systems, whose
    dialogue-level variation cancels (a level regression spends its fit on that variation).
    """
    features, human = np.asarray(features, dtype=float), np.asarray(human, dtype=float)
    if units is None:
        units = np.isfinite(features).any(-1)
    units = np.asarray(units, dtype=bool)
    x = standardised(features, units, contrasts)
    labelled = units & np.isfinite(human)
    if contrasts:  # each label minus its dialogue's mean label (a dialogue's own labels only: no leak across folds)
        with np.errstate(invalid="ignore", divide="ignore"):
            dialogue_mean = np.where(labelled, human, 0.0).sum(-1, keepdims=True) / labelled.sum(-1, keepdims=True)
        human = human - dialogue_mean
    y = np.nan_to_num(human)  # what an unlabelled cell holds is never read: it weighs 0 in every fold
    dialogue_labelled = labelled.any(-1)  # (..., D)
    n = dialogue_labelled.sum(-1, keepdims=True)  # (..., 1)
    k_folds = np.maximum(np.minimum(n, folds), 1)
    # Fold of each labelled dialogue: its rank among the labelled ones (1 to n), modulo K (the labelled dialogues
    # are a random sample already, so their order is as good as a shuffle); an unlabelled dialogue's is never read.
    fold = np.cumsum(dialogue_labelled, axis=-1) % k_folds
    fold_ids = np.arange(folds)
    # Training weights per fold: (..., K, D, S); folds from K on hold out nobody and are never read either.
    train = labelled[..., None, :, :] & (fold[..., None, :, None] != fold_ids[:, None, None])
    w = train.astype(float)
    # The labels centred on their system's training mean (within-system regression; a system without training
    # rows weighs 0, its 0 / 0 read as 0).
    count = w.sum(-2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y_mean = np.nan_to_num((w * y[..., None, :, :]).sum(-2, keepdims=True) / count)
    yc = (y[..., None, :, :] - y_mean) * w
    xs = x[..., None, :, :, :]  # (..., 1, D, S, k)
    k = x.shape[-1]
    gram = np.einsum("...dsi,...dsj->...ij", xs * w[..., None], np.broadcast_to(xs, w.shape + (k,)))
    cross = np.einsum("...dsi,...ds->...i", np.broadcast_to(xs, w.shape + (k,)), yc)
    yy = (yc * yc).sum((-2, -1))
    rows = w.sum((-2, -1))
    systems = (count[..., 0, :] > 0).sum(-1)  # intercepts spent on the systems' centring
    if contrasts:  # centring on its dialogue's mean leaves each training dialogue one row fewer of information,
        rows = rows - (w.sum(-1) > 0).sum(-1)  # and the systems' centred means one fewer free value
        systems = systems - 1
    inverses, judge_weight = candidate_inverses(gram)  # (..., K, C, k, k): C candidates, see candidate_inverses
    betas = np.einsum("...cij,...j->...ci", inverses, cross)
    hat = np.einsum("...cij,...jl->...cil", inverses, gram)
    # Residual sum of squares and effective degrees of freedom of each candidate.
    rss = (yy[..., None] - 2.0 * np.einsum("...ci,...i->...c", betas, cross)
           + np.einsum("...ci,...ij,...cj->...c", betas, gram, betas))
    # Generalised cross-validation on weighted degrees of freedom (DOF_WEIGHT, the judge alone's JUDGE_DOF_WEIGHT).
    judge_dof = hat[..., 0, 0]
    dof = judge_weight * judge_dof + DOF_WEIGHT * (np.trace(hat, axis1=-2, axis2=-1) - judge_dof + systems[..., None])
    with np.errstate(invalid="ignore", divide="ignore"):
        gcv = np.where(dof < rows[..., None] - 1.0, np.maximum(rss, 0.0) / (1.0 - dof / rows[..., None]) ** 2, np.inf)
    best = np.argmin(np.where(np.isfinite(gcv), gcv, np.inf), axis=-1)  # (..., K)
    # Too few training rows for any finite GCV (weighted dof < rows - 1, dof >= 2 x systems): no prediction (0).
    usable = np.asarray(np.isfinite(gcv).any(-1))
    chosen = np.take_along_axis(inverses, best[..., None, None, None], axis=-3)[..., 0, :, :] \
        * usable[..., None, None]  # (..., K, k, k)
    beta = np.einsum("...ij,...j->...i", chosen, cross)
    predictions = np.einsum("...dsi,...ki->...kds", x, beta)  # (..., K, D, S)
    mine = fold[..., None, :, None] == fold_ids[:, None, None]  # the fold a dialogue was held out of (if labelled)
    held_out = (predictions * mine).sum(-3)
    active = (fold_ids < k_folds)[..., None, None]  # (..., K, 1, 1)
    averaged = (predictions * active).sum(-3) / k_folds[..., None]
    combined = np.where(dialogue_labelled[..., None], held_out, averaged)
    combined = np.where(units, combined, np.nan)
    if not with_fit:
        return combined
    # What the coefficients' own error does to each system's estimate (fit_leverage): the folds' mean of A G A,
    # A the chosen candidate's map (G + P)^+ (the coefficients' covariance over the residual variance), and each
    # system's gap between the unlabelled and the labelled summaries' mean predictors.
    covariance = (np.einsum("...ij,...jl,...ml->...im", chosen, gram, chosen) * active).sum(-3) / k_folds[..., None]
    unlabelled = units & ~labelled
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = ((x * unlabelled[..., None]).sum(-3) / unlabelled.sum(-2)[..., None]
               - (x * labelled[..., None]).sum(-3) / labelled.sum(-2)[..., None])  # (..., S, k)
    return combined, (np.nan_to_num(gap), covariance)


def candidate_inverses(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(..., C, k, k) the coefficient map (G + P)^+ of each candidate fit, out of (..., k, k) Gram matrices of the
    standardised predictors, and (C,) the weight GCV gives each candidate's degree of freedom on the first predictor
    (the judge of --judgments). The candidates: a ridge penalty on every predictor alike for each of PENALTIES
    (times the mean eigenvalue of G), weight DOF_WEIGHT; the judge alone, by least squares, weight
    JUDGE_DOF_WEIGHT; no predictor (0). The pseudo-inverse leaves a predictor constant on the training rows at 0."""
    k = gram.shape[-1]
    scale = (np.trace(gram, axis1=-2, axis2=-1) / k)[..., None, None, None]
    ridge = np.linalg.pinv(gram[..., None, :, :] + scale * PENALTIES[:, None, None] * np.eye(k), hermitian=True)
    alone = np.zeros(gram.shape)
    alone[..., :1, :1] = np.linalg.pinv(gram[..., :1, :1], hermitian=True)
    inverses = np.concatenate([ridge, alone[..., None, :, :], np.zeros(gram.shape)[..., None, :, :]], axis=-3)
    return inverses, np.r_[np.full(len(PENALTIES), DOF_WEIGHT), JUDGE_DOF_WEIGHT, DOF_WEIGHT]


def fit_leverage(gap, covariance, a=None, b=None) -> np.ndarray:
    """Per system (or per pair a - b): gap' covariance gap, the variance the fitted coefficients add to the estimate
    in units of the residual variance (cross_fitted_prediction(with_fit=True))."""
    if a is not None:
        gap = gap[..., a, :] - gap[..., b, :]
    return np.einsum("...si,...ij,...sj->...s", gap, covariance, gap)


def judges_listed(judges) -> list[tuple[str, object]]:
    """--judge NAME=FILE pairs checked as `judge select` checks them."""
    from ..options import judges_option

    return judges_option(judges, "estimate --judge", 1)


def named_source(source) -> dict:
    """A judge's file for the provenance: its path and digest (a DataFrame has none)."""
    from pathlib import Path

    from judge.resources import file_sha256

    if isinstance(source, (str, Path)):
        return {"path": str(source), "sha256": file_sha256(Path(source))}
    return {"path": source.attrs.get("path", "(a DataFrame)"), "sha256": None}


def other_judges(judges, human, scale, failure_value, judge: pd.DataFrame) -> tuple[dict[str, pd.DataFrame],
                                                                                     list[str]]:
    """--judge NAME=FILE: each judge's scores, read and checked as `judge select` reads its judges; a judge that
    scores no judged dialogue is refused (its name is wrong, or it is of another study)."""
    if not judges:
        return {}, []
    from ..errors import CalibrationError
    from ..judges import read_judges

    frames, _, notes = read_judges(judges_listed(judges), human, scale, failure_value)
    for name, frame in frames.items():
        if len(frame) and frame["system_1"].notna().all():
            raise CalibrationError(f"--judge {name}: pairwise judgments (`judge compare`) cannot be a predictor of "
                                   "a system's score")
        cells = set(zip(judge["item_id"], judge["system"]))
        if not any(cell in cells for cell in zip(frame["item_id"], frame["system"])):
            raise CalibrationError(f"--judge {name}: scores no dialogue and system of --judgments: not the same "
                                   "study")
    return frames, [f"--judge: {note}" for note in notes]


def cross_prediction_lambda(human, judge) -> np.ndarray:
    """The weight of a cross-fitted predictor in ppi_mean, per row: m / (n + m) (n labelled, m judged but
    unlabelled dialogues). The predictor is a regression on the labels' own scale, so its slope on y is 1 and the
    PPI++ optimum cov(y, f) / (var(f) (1 + n/m)) is m / (n + m): fixed by the design, nothing fitted, no degree of
    freedom spent (a lambda tuned per system at 10-19 labels widened a useless jury's interval by 5%)."""
    human, judge = np.asarray(human, dtype=float), np.asarray(judge, dtype=float)
    units = np.isfinite(judge)
    n = (units & np.isfinite(human)).sum(-1)
    m = units.sum(-1) - n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n + m > 0, m / (n + m), 0.0)
