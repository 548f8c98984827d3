"""ppi_mean_weighted (an active design's PPI++, calibration.study.estimate) with a judge that carries nothing: a
constant prediction (a judge that failed everywhere, or one that gives every dialogue the same score): whatever the
constant, lambda is 0, not the ratio of the rounding residues the weighted means leave (about 1e-16 / 1e-32). Found
by the seed-7 draw of benchmarks/mutation.py (a tuning rule accepting a judge with no spread passed)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.study.ppi_weighted import ppi_mean_weighted


@pytest.mark.parametrize("constant", [3.0, 0.0, 0.1, 3.7, 2 / 3])
def test_a_constant_judge_gets_lambda_0_and_the_hajek_mean_of_the_labels(constant):
    rng = np.random.default_rng(1)
    dialogues = 200
    labelled = rng.choice(dialogues, 30, replace=False)
    human = np.full(dialogues, np.nan)
    human[labelled] = rng.integers(1, 6, 30).astype(float)
    inclusion = rng.uniform(0.05, 0.3, dialogues)
    result = ppi_mean_weighted(human, np.full(dialogues, constant), inclusion)
    weights = 1 / inclusion[labelled]
    hajek = (weights * human[labelled]).sum() / weights.sum()
    assert result.lam == 0.0
    assert result.estimate == pytest.approx(hajek) and result.human_only == pytest.approx(hajek)
    assert [float(result.ci_low), float(result.ci_high)] == pytest.approx(
        [float(result.human_only_ci_low), float(result.human_only_ci_high)])
    assert result.ci_low < hajek < result.ci_high


def test_each_judge_of_a_jury_gives_its_scores_on_the_criterion_estimated_and_nowhere_else():
    """predictor_features: the judge's matrix, then each other judge's ok scores on the same criterion, dialogues and
    systems (the mean of its repeated rows; NaN where it has none); its other criteria, failed rows and pairwise rows
    are never read. Found by the seed-7 draw (features read from the other criteria passed)."""
    import pandas as pd

    from calibration.study.matrices import StudyMatrices, predictor_features

    matrices = StudyMatrices("fluency", np.array(["d1", "d2"]), np.array(["a", "b"]),
                             np.array([[1.0, 2.0], [3.0, 4.0]]), np.full((2, 2), np.nan), np.ones((2, 2), bool))
    metric = pd.DataFrame({
        "item_id": ["d1", "d1", "d1", "d2", "d2", "d1", "d2", "d1"],
        "system": ["a", "a", "b", "a", "b", "a", "a", "a|b"],
        "criterion": ["fluency", "fluency", "fluency", "fluency", "fluency", "coherence", "fluency", "fluency"],
        "score": [10.0, 20.0, 30.0, 40.0, 99.0, 77.0, 88.0, 66.0],
        "status": ["ok", "ok", "ok", "ok", "error", "ok", "ok", "ok"],
        "system_1": [None] * 7 + ["a"]})
    features = predictor_features(matrices, {"metric": metric})
    assert features.shape == (2, 2, 2)
    np.testing.assert_array_equal(features[..., 0], matrices.judge)
    np.testing.assert_array_equal(features[..., 1], [[15.0, 30.0], [64.0, np.nan]])
    # a metric's CSV has no system_1 column at all
    plain = predictor_features(matrices, {"metric": metric[metric["system_1"].isna()].drop(columns="system_1")})
    np.testing.assert_array_equal(plain, features)
