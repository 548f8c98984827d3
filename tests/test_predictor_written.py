"""The cross-fitted jury (calibration.study.predictor.cross_fitted_prediction) against a loop written out from its
docstring and comments, one fold and one candidate at a time with numpy's solver: folds are the labelled
dialogues' ranks (from 1) modulo K = min(n, 10); each fold fits a ridge regression of the labels, centred on their
system's training mean, on the standardised predictors; the candidate (a penalty, a multiple of the training Gram
matrix's mean eigenvalue; the first predictor, the study's judge, alone; or no predictor) minimises generalised
cross-validation with each degree of freedom counted twice, the judge alone's three times; a labelled summary gets
its own fold's held-out prediction, an unlabelled one the folds' mean; the same for the predictor of differences
(`contrasts`) and the coefficients' covariance and gaps (`with_fit`). Written after the seed-19 mutation draw left
predictor.py's weakest lines (the GCV weight, the penalty grid) without a test; extended to the standardisation,
contrasts and with_fit after the full sweep of predictor.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from calibration.study.predictor import cross_fitted_prediction, standardised

GRID = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0]  # the module's penalties, written out


def standardised_by_hand(features, units, contrasts=False):
    """Each predictor, one at a time: NaN outside the units; a missing cell inside them its system's mean;
    (`contrasts`: minus its dialogue's mean over systems); minus its system's mean; over its sd pooled over every
    dialogue and system (0 when that is 1e-12 or less); 0 where still undefined."""
    out = np.zeros(features.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a predictor absent for a system: its mean is NaN
        for p in range(features.shape[-1]):
            x = np.where(units, features[..., p], np.nan)
            for s in range(x.shape[1]):
                x[:, s] = np.where(units[:, s] & np.isnan(x[:, s]), np.nanmean(x[:, s]), x[:, s])
            if contrasts:
                x = x - np.array([[np.nanmean(row)] for row in x])
            centred = x - np.array([np.nanmean(x[:, s]) for s in range(x.shape[1])])
            sd = np.sqrt(np.nanmean(centred ** 2))
            out[..., p] = np.nan_to_num(centred / sd) if sd > 1e-12 else 0.0
    return out


def written_out(features, human, chosen=None, contrasts=False):
    """(the jury's predictions, (gap, covariance) as with_fit returns them); `chosen` (a list) gets each fold's
    penalty. `contrasts`: labels and predictors centred on their dialogue's mean first, each training dialogue
    one row of information fewer and the systems' means one free value fewer."""
    units = np.isfinite(features).any(-1)
    x = standardised_by_hand(features, units, contrasts)
    labelled = units & np.isfinite(human)
    if contrasts:
        human = human - np.array([[np.mean(row[ok]) if ok.any() else np.nan] for row, ok in zip(human, labelled)])
    dialogues = np.flatnonzero(labelled.any(-1))
    k_folds = max(min(len(dialogues), 10), 1)  # the docstring's K = min(n, 10)
    fold = {d: rank % k_folds for rank, d in enumerate(dialogues, 1)}
    out = np.full(human.shape, np.nan)
    fold_predictions, covariances = [], []
    for j in range(k_folds):
        rows = [(d, s) for d, s in zip(*np.nonzero(labelled)) if fold[d] != j]
        systems = sorted({s for _, s in rows})
        n_rows = len(rows) - (len({d for d, _ in rows}) if contrasts else 0)
        n_systems = len(systems) - (1 if contrasts else 0)
        means = {s: np.mean([human[d, t] for d, t in rows if t == s]) for s in systems}
        design = np.array([x[d, s] for d, s in rows])
        target = np.array([human[d, s] - means[s] for d, s in rows])
        gram = design.T @ design
        scale = max(np.linalg.eigvalsh(gram).clip(0).mean(), 1e-12)
        best, best_gcv, best_penalty = np.zeros(x.shape[-1]), np.inf, None
        covariance = np.zeros(gram.shape)
        for candidate in GRID + ["alone", "none"]:
            inverse = np.zeros(gram.shape)
            if candidate == "alone":  # the first predictor's least squares, the others 0
                inverse[0, 0] = 1.0 / gram[0, 0] if gram[0, 0] > 0 else 0.0
            elif candidate != "none":
                inverse = np.linalg.inv(gram + candidate * scale * np.eye(len(gram)))
            hat = inverse @ gram
            # each degree of freedom counted twice, the judge alone's three times
            dof = (3 if candidate == "alone" else 2) * hat[0, 0] + 2 * (np.trace(hat) - hat[0, 0] + n_systems)
            beta = inverse @ design.T @ target
            rss = float(np.sum((target - design @ beta) ** 2))
            gcv = rss / (1 - dof / n_rows) ** 2 if dof < n_rows - 1 else np.inf
            if gcv < best_gcv:
                best, best_gcv, best_penalty, covariance = beta, gcv, candidate, inverse @ gram @ inverse
        if chosen is not None:
            chosen.append(best_penalty)
        if not (np.isfinite(best_gcv) and n_rows > n_systems + 1):
            best, covariance = np.zeros(x.shape[-1]), np.zeros(gram.shape)
        prediction = x @ best
        fold_predictions.append(prediction)
        covariances.append(covariance)
        for d in dialogues:
            if fold[d] == j:
                out[d] = prediction[d]
    unlabelled = ~labelled.any(-1)
    out[unlabelled] = np.mean(fold_predictions, axis=0)[unlabelled]
    gap = np.zeros((x.shape[1], x.shape[2]))
    for s in range(x.shape[1]):
        left, seen = units[:, s] & ~labelled[:, s], labelled[:, s]
        if left.any() and seen.any():
            gap[s] = x[left, s].mean(0) - x[seen, s].mean(0)
    return np.where(units, out, np.nan), (gap, np.mean(covariances, axis=0))


def study(seed, dialogues, labelled, signal, sparse=0, third=0.2):
    """Three systems, three predictors (the first carries `signal` of the label, the third `third`, the second
    noise), a few predictor scores missing; the first `labelled` dialogues labelled, one label missing. `sparse`
    (1 or 2): the third system labelled on that many dialogues only, and dialogue 4 on one system only."""
    rng = np.random.default_rng(seed)
    human = rng.normal(3, 1, (dialogues, 3)) + np.array([0.0, 0.4, -0.3])
    features = np.stack([signal * human + rng.normal(0, 1, human.shape), rng.normal(0, 1, human.shape),
                         rng.normal(0, 1, human.shape) + third * human], axis=-1)
    features[rng.random(features.shape) < 0.05] = np.nan
    features[1, 2] = np.nan  # a summary outside the population (no predictor scores it)
    human[labelled:] = np.nan
    human[0, 1] = np.nan
    if sparse:
        human[sparse:, 2] = np.nan
        human[4, 0] = np.nan
    return features, human


# Between them (levels and contrasts) some fold chooses each candidate (checked below): a jury barely worth its
# noise (1, ..., 0.3) the largest penalty, a strong judge the judge alone. A system labelled on one or two
# dialogues only (a fold without its training rows, or with one) and a dialogue labelled on one system: (8, ...)
# and (9, ...); few labels and a strong judge, fewer folds than 10: (10, ...) and (11, ...); 4 labelled dialogues
# (12, ...): a nearly exact fit whose weighted dof lie just above rows - 1 is refused. A third predictor as strong
# as the judge or stronger, with 20-40 labelled dialogues (20, ...): the smallest penalties. A strong judge on 6
# labelled dialogues (40, ...): a fold whose judge alone has weighted dof exactly rows - 1, refused.
CASES = [(0, 30, 14, 1.0), (1, 30, 14, 0.3), (2, 25, 6, 1.0), (3, 40, 23, 0.0), (4, 30, 12, 0.6), (5, 20, 8, 0.15),
         (6, 30, 14, 0.27), (7, 70, 40, 3.0), (8, 30, 14, 1.0, 1), (9, 30, 16, 1.0, 2), (10, 30, 8, 3.0),
         (11, 20, 5, 30.0), (12, 20, 4, 10.0),
         (20, 40, 20, 0.3, 0, 3.0), (20, 70, 40, 0.0, 0, 3.0), (20, 70, 40, 1.0, 0, 0.5), (40, 20, 6, 10.0)]


@pytest.mark.parametrize("case", CASES)
def test_the_cross_fitted_jury_is_the_written_out_ridge_with_gcv_counting_each_degree_twice(case):
    features, human = study(*case)
    for contrasts in (False, True):
        got, (gap, covariance) = cross_fitted_prediction(features, human, contrasts=contrasts, with_fit=True)
        expected, (expected_gap, expected_covariance) = written_out(features, human, contrasts=contrasts)
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(gap, expected_gap, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(covariance, expected_covariance, rtol=1e-7, atol=1e-12)
        assert np.array_equal(cross_fitted_prediction(features, human, contrasts=contrasts), got, equal_nan=True)


@pytest.mark.parametrize("seed, contrasts", [(0, False), (1, True), (2, False)])
def test_the_standardised_predictors_are_the_written_out_ones(seed, contrasts):
    features, _ = study(seed, 20, 10, 0.5)
    features[:, 1, 0] = np.nan  # a predictor absent for a system
    features[:, :, 1] = 5.0 + np.array([0.0, 1.0, 2.0])  # one constant within every system
    units = np.isfinite(features).any(-1)
    np.testing.assert_allclose(standardised(features, units, contrasts), standardised_by_hand(features, units,
                                                                                              contrasts),
                               rtol=1e-12, atol=1e-12)


def test_the_studies_above_choose_every_penalty_of_the_grid():
    """So that the comparison above pins each penalty's value, not only some."""
    chosen = []
    for case in CASES:
        for contrasts in (False, True):
            written_out(*study(*case), chosen, contrasts)
    every = set(GRID) | {"alone", "none"}
    assert set(chosen) - {None} == every, every - set(chosen)


@pytest.mark.parametrize("size, used", [(1e-12, False), (1.05e-12, True), (1e-3, True), (1e6, True)])
def test_a_predictor_is_used_whatever_its_units_down_to_a_within_system_sd_of_1e_12(size, used):
    """Standardised, a predictor is the same in any units; a within-system sd of 1e-12 or less is a constant's
    rounding noise (a mean of equal scores need not be exactly the score) and counts as none: 0."""
    pattern = np.array([1.0, -1.0, 1.0, -1.0])[:, None, None] * np.ones((1, 2, 1))
    units = np.ones((4, 2), bool)
    got = standardised(size * pattern, units)
    np.testing.assert_array_equal(got, pattern if used else 0.0)


def test_without_a_label_the_jury_learns_nothing_and_predicts_its_constant_0():
    features, human = study(0, 12, 0, 1.0)
    human[:] = np.nan
    got, (gap, covariance) = cross_fitted_prediction(features, human, with_fit=True)
    units = np.isfinite(features).any(-1)
    assert not units.all() and np.array_equal(np.isnan(got), ~units)
    assert (got[units] == 0.0).all() and (covariance == 0.0).all() and (gap == 0.0).all()


def test_the_estimates_judges_are_checked_as_selects_are():
    from calibration.errors import CalibrationError
    from calibration.study.predictor import judges_listed

    frame = object()
    assert judges_listed({" rouge ": frame, "bert": "b.csv"}) == [("rouge", frame), ("bert", "b.csv")]
    for judges, message in (([], "estimate --judge needs at least one --judge NAME=FILE"),
                            ([("a", "x.csv"), ("a ", "y.csv")], "--judge name 'a' is given twice"),
                            ([(" ", "x.csv")], "--judge needs NAME=FILE with a non-empty NAME")):
        with pytest.raises(CalibrationError, match=message):
            judges_listed(judges)
