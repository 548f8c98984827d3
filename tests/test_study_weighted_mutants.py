"""ppi_mean_weighted (an active design's PPI++, calibration.study.estimate) with a judge that carries nothing: a
constant prediction (a judge that failed everywhere, or one that gives every dialogue the same score): whatever the
constant, lambda is 0, not the ratio of the rounding residues the weighted means leave (about 1e-16 / 1e-32). Found
by the seed-7 draw of benchmarks/mutation.py (a tuning rule accepting a judge with no spread passed)."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.study.estimate import ppi_mean_weighted


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
