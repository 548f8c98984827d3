"""The system-level correlation interval's correction for the reliability of the system means (issue 41 part 6:
"may be applied the wrong way"). calibration.correlation._disattenuated estimates the correlation of the systems'
true means and the means' reliability (true over observed variance, <= 1); _pearson_interval widens Fisher's arms
by dividing them by that reliability (Hunter and Schmidt) around the disattenuated r.

Checked against what is planted: systems whose true judge and human means correlate RHO, read through 30 dialogues
of independent noise, so each mean's reliability is known from the draw (its true variance over that plus the
noise variance of a mean, sigma^2 / n). A correction applied the wrong way (r multiplied by the reliability, the
reliability inverted, the arms multiplied instead of divided) moves r away from the truth or narrows the interval.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from calibration.correlation import PairedScores, _disattenuated, _pearson_interval, bootstrap_weights

RHO, SPREAD, NOISE, DIALOGUES, SYSTEMS = 0.9, 0.5, 1.0, 30, 12


def _study(seed: int) -> tuple[PairedScores, float, float]:
    """A study, the correlation of its systems' true means and their reliability (the geometric mean of the judge's
    and the humans', from the true means drawn and the noise variance of a mean of DIALOGUES)."""
    rng = np.random.default_rng(seed)
    means = rng.multivariate_normal([0, 0], SPREAD ** 2 * np.array([[1, RHO], [RHO, 1]]), SYSTEMS)
    difficulty = rng.normal(0, 1, (DIALOGUES, 1))  # shared by every system: cancels between systems
    human = means[:, 0] + difficulty + rng.normal(0, NOISE, (DIALOGUES, SYSTEMS))
    judge = means[:, 1] + difficulty + rng.normal(0, NOISE, (DIALOGUES, SYSTEMS))
    paired = PairedScores("c", np.arange(DIALOGUES).astype(str), np.arange(SYSTEMS).astype(str), judge, human)
    true_var = means.var(axis=0, ddof=1)
    reliability = np.sqrt(np.prod(true_var / (true_var + NOISE ** 2 / DIALOGUES)))
    return paired, float(np.corrcoef(means.T)[0, 1]), float(reliability)


def _observed(paired: PairedScores) -> float:
    return float(np.corrcoef(paired.judge.mean(axis=0), paired.human.mean(axis=0))[0, 1])


def test_the_reliability_is_below_one_as_drawn_and_disattenuating_moves_r_towards_the_true_means():
    observed, corrected, truth, estimated, planted = [], [], [], [], []
    for seed in range(20):
        paired, true_r, reliability = _study(seed)
        r_d, rel = _disattenuated(paired, bootstrap_weights(paired, 400, seed)[0])
        observed.append(_observed(paired))
        corrected.append(r_d)
        truth.append(true_r)
        estimated.append(rel)
        planted.append(reliability)
    observed, corrected, truth, estimated, planted = map(np.array, (observed, corrected, truth, estimated, planted))
    assert np.all(estimated < 1) and np.all(estimated > 0)
    # the estimated reliability recovers the planted one (which is 0.86-0.93 here); an inverted one would be > 1
    assert abs(np.mean(estimated) - np.mean(planted)) < 0.05, (estimated.mean(), planted.mean())
    # noise pulls r towards 0; the correction pushes it back, towards the true means' correlation
    assert np.mean(corrected) > np.mean(observed)
    assert np.mean(np.abs(corrected - truth)) < np.mean(np.abs(observed - truth))


def test_fishers_arms_are_divided_by_the_reliability_around_the_disattenuated_r():
    """The interval is Fisher's (scipy) joined with r_d + (Fisher's bound - r) / reliability: an arm divided by a
    reliability below one is longer than Fisher's, so the printed interval is wider than Fisher's alone."""
    widened = 0
    for seed in range(10):
        paired, _, _ = _study(seed)
        weights = bootstrap_weights(paired, 400, seed)[0]
        r_d, rel = _disattenuated(paired, weights)
        judge, human = paired.judge.mean(axis=0), paired.human.mean(axis=0)
        fisher = stats.pearsonr(judge, human).confidence_interval(0.95)
        r = np.corrcoef(judge, human)[0, 1]
        stretched = np.clip(r_d + (np.array([fisher.low, fisher.high]) - r) / rel, -1, 1)
        expected = (min(fisher.low, stretched[0]), max(fisher.high, stretched[1]))
        low, high = _pearson_interval(paired, weights, 0.95)
        assert np.allclose((low, high), expected, atol=1e-9), (seed, (low, high), expected)
        assert stretched[1] - stretched[0] >= min(fisher.high - fisher.low, 2.0) - 1e-12 or 1 in np.abs(stretched)
        widened += (high - low) > (fisher.high - fisher.low) + 1e-6
    assert widened >= 5  # the correction shows in most studies, not only in the formula
