"""bounded_scale written out row by row: where unseen_pull trips, the far side (toward the scale's other end) is the
betting bound of the labels alone and the near side the labels' t bound (scipy) clipped to the scale; the estimate is
the labels' mean, lambda 0, no se; the human-only interval is the same interval; every other row is untouched."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.study.estimate import betting_interval, effective_labels, ppi_mean, unseen_pull

LABELS = [[5, 5, 4, 5, 5, 5, 5, 4, 5, 5, 5, 4],   # tight at the top: far side below
          [1, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1, 1],   # tight at the bottom: far side above
          [1, 3, 5, 2, 4, 3, 2, 5, 1, 4, 3, 2],   # spread: the t interval stays
          [5, 5, 5, 5, 4, 5, 5, 5, 5, 5, 5, 5],   # one 4 among fives, the t interval's high side past 5
          [2.8, 2.9] * 6]                          # tight just below the middle: far side above


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_the_bounded_rows_written_out(confidence):
    rng = np.random.default_rng(2)
    labels = np.array(LABELS, dtype=float)
    human = np.c_[labels, np.full((5, 30), np.nan)]
    judge = np.c_[labels + rng.normal(0, 0.7, labels.shape), rng.normal(3, 1, (5, 30))]
    plain = ppi_mean(human, judge, confidence)
    result = ppi_mean(human, judge, confidence, bounds=(1.0, 5.0))
    tripped = unseen_pull(human, judge, (1.0, 5.0), confidence)
    assert tripped.tolist() == [True, True, False, True, True]
    for row, y in enumerate(labels):
        if not tripped[row]:
            for name in ("estimate", "ci_low", "ci_high", "lam", "se", "human_only_ci_low"):
                assert getattr(result, name)[row] == getattr(plain, name)[row], name
            assert result.no_interval[row] == ""
            continue
        t_low, t_high = stats.t.interval(confidence, len(y) - 1, loc=y.mean(), scale=stats.sem(y))
        b_low, b_high = betting_interval(y[None], np.ones((1, len(y)), bool), (1.0, 5.0), confidence)
        low, high = (b_low[0], min(t_high, 5.0)) if y.mean() > 3.0 else (max(t_low, 1.0), b_high[0])
        assert (result.ci_low[row], result.ci_high[row]) == pytest.approx((low, high), rel=1e-12)
        assert (result.human_only_ci_low[row], result.human_only_ci_high[row]) == pytest.approx((low, high))
        assert result.estimate[row] == pytest.approx(y.mean()) and result.human_only[row] == pytest.approx(y.mean())
        assert result.lam[row] == 0.0 and np.isnan(result.se[row]) and np.isnan(result.human_only_se[row])
        assert result.no_interval[row] == "bounded"
        assert effective_labels(result)[row] == pytest.approx(len(y))  # the human labels alone: worth n
    assert result.ci_high[3] == 5.0 and plain.ci_high[3] > 5.0  # the near side clipped to the scale


@pytest.mark.parametrize("confidence", [0.8, 0.95])
def test_unseen_pull_written_out_on_many_label_sets(confidence):
    """unseen_pull's rule per row with scipy's t: n >= 3 labels and q |low + high - 2 mean| > t s / sqrt(n), q =
    1 - 0.1^(1/n) the share of dialogues n labels all miss one time in ten; on 400 random label sets of 2-25
    labels from skewed scales (both outcomes common), labels on unjudged dialogues ignored."""
    rng = np.random.default_rng(int(confidence * 100))
    rows, width = 400, 30
    n = rng.integers(2, 26, rows)
    top = rng.random(rows) < 0.5
    values = np.where(rng.random((rows, width)) < rng.uniform(0.0, 0.6, (rows, 1)),
                      rng.integers(1, 5, (rows, width)).astype(float), 5.0)
    values = np.where(top[:, None], values, 6.0 - values) + rng.choice([0.0, -0.5, 0.5], (rows, width), p=[.8, .1, .1])
    values = np.clip(values, 1.0, 5.0)
    present = np.arange(width) < n[:, None]
    human = np.where(present, values, np.nan)
    judge = rng.normal(3, 1, (rows, width))
    judge[:, -1] = np.nan  # an unjudged dialogue ...
    human[:, -1] = 1.0  # ... whose label must not count
    got = unseen_pull(human, judge, (1.0, 5.0), confidence)
    want = []
    for row in range(rows):
        y = values[row, :n[row]]
        if len(y) < 3:
            want.append(False)
            continue
        half = stats.t.ppf(0.5 + confidence / 2, len(y) - 1) * np.std(y, ddof=1) / np.sqrt(len(y))
        want.append((1 - 0.1 ** (1 / len(y))) * abs(1.0 + 5.0 - 2 * y.mean()) > half)
    assert got.tolist() == want
    assert 0.2 < np.mean(want) < 0.8
