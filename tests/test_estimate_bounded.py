"""Intervals that hold on the shapes faithfulness labels take (issue 20): most summaries fine and a few badly
wrong, or a bimodal scale. Where the labels sit at one end of the rubric's scale with little spread, `judge estimate`
replaces the t interval by the betting interval for bounded means (calibration.study.estimate.bounded_scale).

Plant-and-recover at the smallest n printed (3) up to 20, 400 studies a cell pooled over n (Monte-Carlo sd of a
pooled 0.95 about 0.005), beside the cost on ordinary Likert labels, where the check must hardly ever trip."""

import numpy as np
import pandas as pd
import pytest
from coverage_sim import draw_pair

from calibration.study.bounded import betting_interval, unseen_pull
from calibration.study.estimate_tables import estimate
from calibration.study.ppi import ppi_mean

SIZES = (3, 4, 6, 10, 20)


def rare_failures(rng, shape, share):
    """Annotators (3) around 4.5 on fine summaries and around 1.5 on the `share` badly wrong; the judge sees half of
    the failures."""
    bad = rng.random(shape) < share
    fine = np.clip(np.rint(4.5 + 0.5 * rng.standard_normal((3,) + shape)), 1, 5).mean(0)
    poor = np.clip(np.rint(1.5 + 0.5 * rng.standard_normal((3,) + shape)), 1, 5).mean(0)
    caught = bad & (rng.random(shape) < 0.5)
    judge = np.clip(np.rint(np.where(caught, 2.0, 4.4) + 0.6 * rng.standard_normal(shape)), 1, 5)
    return np.where(bad, poor, fine), judge


def bimodal(rng, shape):
    """One annotator: 54% ones, 26% fives, the rest 2-4 (a real sub-issues criterion's shape); a judge at 0.5."""
    u = rng.random(shape)
    human = np.where(u < 0.54, 1.0, np.where(u < 0.80, 5.0, rng.integers(2, 5, shape).astype(float)))
    judge = np.clip(np.rint(3 + 0.3 * (human - 2.4) + 0.95 * rng.standard_normal(shape)), 1, 5)
    return human, judge


def ordinary(rng, shape):
    (human, judge), _ = draw_pair(rng, shape, "likert", 0.3, 3)
    return human, judge


def run(population, n, reps=400, seed=0):
    """Coverage of the printed intervals with and without the scale, and their mean widths."""
    truth = population(np.random.default_rng(99), (1_000_000,))[0].mean()
    rng = np.random.default_rng(seed + n)
    human, judge = population(rng, (reps, 100))
    labelled = np.where(rng.random((reps, 100)).argsort(1) < n, human, np.nan)
    out = {}
    for name, bounds in (("t", None), ("bounded", (1, 5))):
        r = ppi_mean(labelled, judge, bounds=bounds)
        shown = np.isfinite(r.ci_low)
        out[name] = {"covered": int(((r.ci_low <= truth) & (truth <= r.ci_high) & shown).sum()),
                     "shown": int(shown.sum()), "width": float(np.nanmean(r.ci_high - r.ci_low)),
                     "tripped": float((r.no_interval == "bounded").mean())}
    return out


@pytest.mark.parametrize("population", [lambda r, s: rare_failures(r, s, 0.08), lambda r, s: rare_failures(r, s, 0.18),
                                        bimodal], ids=["rare-8%", "rare-18%", "bimodal"])
def test_coverage_where_the_t_interval_fails(population):
    cells = [run(population, n) for n in SIZES]
    pooled = lambda name: (sum(c[name]["covered"] for c in cells) / sum(c[name]["shown"] for c in cells))  # noqa
    for n, cell in zip(SIZES, cells):
        coverage = cell["bounded"]["covered"] / cell["bounded"]["shown"]
        assert coverage >= 0.92, f"n={n}: {coverage:.3f}"  # one cell of 400: 0.95 - 2.5 Monte-Carlo sd
    assert pooled("bounded") >= 0.94, pooled("bounded")
    # The plain t interval fails here, or the check would be testing nothing.
    assert pooled("t") < pooled("bounded") - 0.01, (pooled("t"), pooled("bounded"))


def test_ordinary_labels_keep_the_t_interval():
    """On ordinary Likert labels (3 annotators around 3.2) the check trips in few studies and costs little width."""
    for n in SIZES:
        cell = run(ordinary, n, seed=50)
        assert cell["bounded"]["tripped"] <= 0.08, (n, cell["bounded"]["tripped"])
        assert cell["bounded"]["width"] <= 1.04 * cell["t"]["width"], (n, cell)
        if n >= 10:
            assert cell["bounded"]["tripped"] <= 0.02, n


def test_betting_interval_covers_any_distribution_on_the_scale():
    """Two-point distributions, the hardest for a bounded mean: 2% or 30% at the low end, the rest at the top."""
    rng = np.random.default_rng(5)
    for share in (0.02, 0.3):
        for n in (3, 12):
            values = np.where(rng.random((300, n)) < share, 1.0, 5.0)
            low, high = betting_interval(values, np.ones_like(values, bool), (1, 5))
            truth = 5.0 - 4.0 * share
            assert np.mean((low <= truth) & (truth <= high)) >= 0.93, (share, n)
            assert np.all((1 <= low) & (low <= high) & (high <= 5))


def test_betting_interval_is_no_narrower_than_any_valid_interval_can_be():
    """Ten labels all at 5: a population with a share p at 1 shows ten fives with probability (1 - p)^10, which is
    at least 2.5% up to p = 1 - 0.025^(1/10); any valid 95% interval must reach down to that mean, 5 - 4 p."""
    low, high = betting_interval(np.full((1, 10), 5.0), np.ones((1, 10), bool), (1, 5))
    p = 1 - 0.025 ** (1 / 10)
    assert low[0] <= 5 - 4 * p and high[0] == 5.0
    assert low[0] >= 5 - 4 * 0.5  # and it is an interval, not the whole scale


def test_betting_interval_written_out():
    """One row recomputed by the formulas of Waudby-Smith & Ramdas (2023), in the given order only (orders=1):
    bets sqrt(2 log(2/alpha) / (n sigma_{i-1}^2)) capped at 3/4 of the positivity limit, hedged wealth."""
    values = np.array([4.0, 5.0, 3.0, 5.0, 4.5, 5.0])
    x = (values - 1) / 4
    alpha, n = 0.05, len(x)

    def wealth(m):
        var, up, down = 0.25, 1.0, 1.0
        total, squares = 0.0, 0.0
        for i, xi in enumerate(x):
            bet = np.sqrt(2 * np.log(2 / alpha) / (n * var))
            up *= 1 + min(bet, 0.75 / m) * (xi - m)
            down *= 1 - min(bet, 0.75 / (1 - m)) * (xi - m)
            total += xi
            mu_next = (0.5 + total) / (i + 2)
            squares += (xi - mu_next) ** 2
            var = (0.25 + squares) / (i + 2)
        return max(up, down) / 2

    grid = np.linspace(0, 1, 1001)
    kept = [m for m in grid[1:-1] if wealth(m) < 1 / alpha]
    low, high = betting_interval(values[None], np.ones((1, n), bool), (1, 5), orders=1)
    assert low[0] == pytest.approx(1 + 4 * (min(kept) - 0.001), abs=1e-9)
    assert high[0] == pytest.approx(1 + 4 * (max(kept) + 0.001), abs=1e-9)


@pytest.mark.parametrize("labels, pulled, note", [
    ([4.67, 4.33, 5.0, 4.67, 4.33, 4.67, 5.0, 4.33, 4.67, 5.0], True, "bounded"),  # tight at the top
    ([1.0, 1.33, 1.0, 1.67, 1.0, 1.33, 1.0, 1.0, 1.33, 1.0], True, "bounded"),     # the same at the bottom
    ([2.0, 3.0, 4.0, 3.33, 2.67, 4.33, 3.0, 1.67, 3.67, 4.0], False, ""),          # spread around the middle
    ([4.0, 5.0, 3.0, 5.0, 1.33, 4.67, 4.33, 5.0, 4.0, 4.67], False, ""),           # high, but a failure seen
    ([5.0, 5.0], False, "few"),                                                     # too few for any interval
    ([4.0, 4.0, 4.0, 4.0], True, "flat"),                                           # flat: still no interval
])
def test_which_labels_trip_the_check(labels, pulled, note):
    human = np.array(labels + [np.nan] * 20)
    judge = np.linspace(1, 5, len(human))
    assert bool(unseen_pull(human, judge, (1, 5))) is pulled
    result = ppi_mean(human, judge, bounds=(1, 5))
    assert str(result.no_interval) == note
    if note == "bounded":  # the row is the human labels' betting interval, and it holds the labels' mean
        assert result.lam == 0.0 and result.estimate == pytest.approx(np.mean(labels))
        assert result.ci_low < np.mean(labels) < result.ci_high


def test_estimate_tables_say_which_interval_is_printed():
    """Through calibration.study.estimate: the bounded row's note, the summary note, effective_labels = n."""
    rng = np.random.default_rng(8)
    items = [f"d{i}" for i in range(60)]
    judge = pd.DataFrame({"item_id": items * 2, "system": ["a"] * 60 + ["b"] * 60, "criterion": "faithful",
                          "score": np.r_[np.where(rng.random(60) < 0.1, 2.0, 4.0),
                                         rng.integers(1, 6, 60)].astype(float),
                          "status": "ok"})
    labels = pd.DataFrame({"item_id": items[:10] * 2, "system": ["a"] * 10 + ["b"] * 10, "criterion": "faithful",
                           "annotator": "x",
                           "score": np.r_[[5, 4, 5, 5, 4, 5, 5, 5, 4, 5],
                                          [1, 3, 5, 2, 4, 3, 2, 5, 1, 4]].astype(float)})
    tables = estimate(judge, labels, scales={"faithful": (1, 5)})
    rows = tables.estimates.set_index("system")
    assert "betting" in rows.loc["a", "interval_note"] and rows.loc["b", "interval_note"] == ""
    assert rows.loc["a", "effective_labels"] == pytest.approx(10) and rows.loc["a", "lambda"] == 0.0
    assert any("bounded-scale interval for a" in note for note in tables.notes)
    assert not any("no interval" in note for note in tables.notes)
    plain = estimate(judge, labels).estimates.set_index("system")
    assert plain.loc["a", "interval_note"] == ""  # without a scale, not checked
    assert rows.loc["a", "ci_low"] < plain.loc["a", "ci_low"]
