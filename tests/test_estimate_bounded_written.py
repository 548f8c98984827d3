"""bounded_scale written out row by row: where unseen_pull trips, the far side (toward the scale's other end) is the
betting bound of the labels alone and the near side the labels' t bound (scipy) clipped to the scale; the estimate is
the labels' mean, lambda 0, no se; the human-only interval is the same interval; every other row is untouched."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.study.bounded import betting_interval, unseen_pull
from calibration.study.ppi import effective_labels, ppi_mean

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


def _betting_reference(labels, bounds, confidence, grid=1001):
    """Waudby-Smith & Ramdas's hedged betting interval in the labels' order (one order), written out with loops."""
    x = (np.asarray(labels, float) - bounds[0]) / (bounds[1] - bounds[0])
    alpha, n = 1 - confidence, len(x)

    def wealth(m):
        var, up, down, total, squares = 0.25, 1.0, 1.0, 0.0, 0.0
        for i, xi in enumerate(x):
            bet = np.sqrt(2 * np.log(2 / alpha) / (n * var))
            up *= 1 + min(bet, 0.75 / max(m, 1e-12)) * (xi - m)
            down *= 1 - min(bet, 0.75 / max(1 - m, 1e-12)) * (xi - m)
            total += xi
            squares += (xi - (0.5 + total) / (i + 2)) ** 2
            var = (0.25 + squares) / (i + 2)
        return max(up, down) / 2

    points = np.linspace(0, 1, grid)
    kept = [m for m in points if wealth(m) < 1 / alpha]
    step = 1 / (grid - 1)
    low, high = max(min(kept) - step, 0.0), min(max(kept) + step, 1.0)
    return bounds[0] + (bounds[1] - bounds[0]) * low, bounds[0] + (bounds[1] - bounds[0]) * high


@pytest.mark.parametrize("confidence, bounds", [(0.95, (1.0, 5.0)), (0.9, (0.0, 10.0))])
def test_the_betting_interval_of_rows_with_gaps_and_other_counts_written_out(confidence, bounds):
    """Rows of a batch with different numbers of labels, unlabelled cells between them (never read), labels at the
    scale's ends (the grid's first and last points, the caps' 1e-12): each row is the written-out interval of its
    labels in their order (orders=1), the grid step and the clip to the scale included."""
    low_end, high_end = bounds
    span = high_end - low_end
    rows = [[5, 5, 4, 5, 5], [1, 2, 1, 1, 3, 1, 2, 1, 1], [1, 5, 3, 2, 4, 5, 1]]
    values = np.full((3, 12), np.nan)
    used = np.zeros((3, 12), bool)
    for r, labels in enumerate(rows):
        cells = np.sort(np.random.default_rng(r).choice(12, len(labels), replace=False))
        values[r, cells] = low_end + span * (np.array(labels) - 1) / 4
        used[r, cells] = True
    values[~used] = high_end  # what an unlabelled cell holds is never read
    low, high = betting_interval(values, used, bounds, confidence, orders=1)
    for r, labels in enumerate(rows):
        want = _betting_reference(low_end + span * (np.array(labels) - 1) / 4, bounds, confidence)
        assert (low[r], high[r]) == pytest.approx(want, abs=1e-9), r
