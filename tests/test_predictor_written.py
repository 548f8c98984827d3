"""The cross-fitted jury (calibration.study.predictor.cross_fitted_prediction) against a loop written out from its
docstring and comments, one fold and one penalty at a time with numpy's solver: folds are the labelled dialogues'
ranks modulo K = min(n, 10); each fold fits a ridge regression of the labels, centred on their system's training
mean, on the standardised predictors; the penalty (a multiple of the training Gram matrix's mean eigenvalue, or
infinity: no predictor) minimises generalised cross-validation with each degree of freedom counted twice; a
labelled summary gets its own fold's held-out prediction, an unlabelled one the folds' mean. Written after the
seed-19 mutation draw left predictor.py's weakest lines (the GCV weight, the penalty grid) without a test."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.study.predictor import cross_fitted_prediction, standardised

GRID = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0, np.inf]  # the module's penalties, written out


def written_out(features, human, chosen=None):
    """The jury's predictions; `chosen` (a list) gets each fold's penalty."""
    units = np.isfinite(features).any(-1)
    x = standardised(features, units)
    labelled = units & np.isfinite(human)
    dialogues = np.flatnonzero(labelled.any(-1))
    k_folds = max(min(len(dialogues), 10), 1)  # the docstring's K = min(n, 10)
    fold = {d: rank % k_folds for rank, d in enumerate(dialogues)}
    out = np.full(human.shape, np.nan)
    fold_predictions = []
    for j in range(k_folds):
        rows = [(d, s) for d, s in zip(*np.nonzero(labelled)) if fold[d] != j]
        systems = sorted({s for _, s in rows})
        means = {s: np.mean([human[d, t] for d, t in rows if t == s]) for s in systems}
        design = np.array([x[d, s] for d, s in rows])
        target = np.array([human[d, s] - means[s] for d, s in rows])
        gram = design.T @ design
        scale = max(np.linalg.eigvalsh(gram).clip(0).mean(), 1e-12)
        best, best_gcv, best_penalty = np.zeros(x.shape[-1]), np.inf, np.inf
        for g in GRID:
            if np.isinf(g):
                beta, dof = np.zeros(x.shape[-1]), 0.0
            else:
                inverse = np.linalg.inv(gram + g * scale * np.eye(len(gram)))
                beta, dof = inverse @ design.T @ target, float(np.trace(gram @ inverse))
            dof += len(systems)
            rss = float(np.sum((target - design @ beta) ** 2))
            gcv = rss / (1 - 2 * dof / len(rows)) ** 2 if 2 * dof < len(rows) - 1 else np.inf
            if gcv < best_gcv:
                best, best_gcv, best_penalty = beta, gcv, g
        if chosen is not None:
            chosen.append(best_penalty)
        if not (np.isfinite(best_gcv) and len(rows) > len(systems) + 1):
            best = np.zeros(x.shape[-1])
        prediction = x @ best
        fold_predictions.append(prediction)
        for d in dialogues:
            if fold[d] == j:
                out[d] = prediction[d]
    unlabelled = ~labelled.any(-1)
    out[unlabelled] = np.mean(fold_predictions, axis=0)[unlabelled]
    return np.where(units, out, np.nan)


def study(seed, dialogues, labelled, signal):
    """Three systems, three predictors (the first carries `signal` of the label, the others noise), a few
    predictor scores missing; the first `labelled` dialogues labelled, one label missing."""
    rng = np.random.default_rng(seed)
    human = rng.normal(3, 1, (dialogues, 3)) + np.array([0.0, 0.4, -0.3])
    features = np.stack([signal * human + rng.normal(0, 1, human.shape), rng.normal(0, 1, human.shape),
                         rng.normal(0, 1, human.shape) + 0.2 * human], axis=-1)
    features[rng.random(features.shape) < 0.05] = np.nan
    human[labelled:] = np.nan
    human[0, 1] = np.nan
    return features, human


# (6, ..., 0.27): a jury barely worth its noise, some fold's GCV settles on the largest finite penalty; (7, 70, 40,
# 3.0): many labels and a strong judge, the smallest penalties.
CASES = [(0, 30, 14, 1.0), (1, 30, 14, 0.3), (2, 25, 6, 1.0), (3, 40, 23, 0.0), (4, 30, 12, 0.6), (5, 20, 8, 0.15),
         (6, 30, 14, 0.27), (7, 70, 40, 3.0)]


@pytest.mark.parametrize("seed, dialogues, labelled, signal", CASES)
def test_the_cross_fitted_jury_is_the_written_out_ridge_with_gcv_counting_each_degree_twice(seed, dialogues,
                                                                                            labelled, signal):
    features, human = study(seed, dialogues, labelled, signal)
    got = cross_fitted_prediction(features, human)
    np.testing.assert_allclose(got, written_out(features, human), rtol=1e-7, atol=1e-9)


def test_the_studies_above_choose_every_penalty_of_the_grid():
    """So that the comparison above pins each penalty's value, not only some."""
    chosen = []
    for case in CASES:
        written_out(*study(*case), chosen)
    assert set(chosen) == set(GRID)


@pytest.mark.parametrize("size, used", [(1e-12, False), (1.05e-12, True), (1e-3, True), (1e6, True)])
def test_a_predictor_is_used_whatever_its_units_down_to_a_within_system_sd_of_1e_12(size, used):
    """Standardised, a predictor is the same in any units; a within-system sd of 1e-12 or less is a constant's
    rounding noise (a mean of equal scores need not be exactly the score) and counts as none: 0."""
    pattern = np.array([1.0, -1.0, 1.0, -1.0])[:, None, None] * np.ones((1, 2, 1))
    units = np.ones((4, 2), bool)
    got = standardised(size * pattern, units)
    np.testing.assert_array_equal(got, pattern if used else 0.0)
