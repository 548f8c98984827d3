"""The statistics core of `judge tune`: agreement of a judge with the mean human score on labelled cells, the gain
of a candidate over the current judge on the same cells, its paired bootstrap by dialogue, p-values and Holm.

numpy in, numbers out. Resampling is by dialogue: a replicate is a vector of counts, one per dialogue (how often
it was drawn), and every statistic is written as a function of those counts, so all judges of one criterion are
read on the very same replicates (the pairing) and no replicate copies data. Kendall's tau-b on a resample with
repeated dialogues is exactly a quadratic form in the counts (pairs of copies of one cell are tied on both sides,
as tau-b counts them); Spearman re-ranks within each replicate by weighted mid-ranks; agreement is a ratio of sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

METRICS = ("kendall", "spearman", "agreement")
BLOCK = 2048  # cells compared with all the others at once
INTERVALS = ("percentile", "bca")


class Statistic:
    """One judge's agreement with the humans on fixed cells, as a function of dialogue counts `v` (B, D)."""

    def __init__(self, metric: str, judge: np.ndarray, human: np.ndarray, dialogue: np.ndarray, n_dialogues: int):
        self.metric = metric
        self.n = n_dialogues
        self.dialogue = dialogue
        onehot = np.zeros((len(judge), n_dialogues))
        onehot[np.arange(len(judge)), dialogue] = 1.0
        self.onehot = onehot
        if metric == "kendall":
            # dialogue x dialogue sums of the pairs' concordance and of the pairs untied on each side
            self.concordance, self.untied_x, self.untied_y = self._kendall_sums(judge, human)
        elif metric == "spearman":
            # (cells, D): how many cells of each dialogue lie below, and level with, each cell
            self.less_x, self.equal_x = self._rank_counts(judge)
            self.less_y, self.equal_y = self._rank_counts(human)
        elif metric == "agreement":
            hits = (np.round(judge) == np.round(human)).astype(float)
            self.hits = onehot.T @ hits
            self.cells = onehot.sum(axis=0)
        else:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")

    def _blocks(self):
        """Row blocks of BLOCK cells: the (cells, cells) comparisons are never held whole (memory stays flat)."""
        return [slice(a, min(a + BLOCK, len(self.dialogue))) for a in range(0, len(self.dialogue), BLOCK)]

    def _kendall_sums(self, judge: np.ndarray, human: np.ndarray) -> tuple[np.ndarray, ...]:
        sums = [np.zeros((self.n, self.n)) for _ in range(3)]
        for rows in self._blocks():
            sx = np.sign(judge[rows, None] - judge[None, :])
            sy = np.sign(human[rows, None] - human[None, :])
            for total, pairs in zip(sums, (sx * sy, np.abs(sx), np.abs(sy))):
                total += self.onehot[rows].T @ (pairs @ self.onehot)
        return tuple(sums)

    def _rank_counts(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        less, equal = np.zeros((len(values), self.n)), np.zeros((len(values), self.n))
        for rows in self._blocks():
            less[rows] = (values[None, :] < values[rows, None]).astype(float) @ self.onehot
            equal[rows] = (values[None, :] == values[rows, None]).astype(float) @ self.onehot
        return less, equal

    def __call__(self, v: np.ndarray) -> np.ndarray:
        v = np.atleast_2d(np.asarray(v, dtype=float))
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.metric == "kendall":
                def form(matrix):
                    return ((v @ matrix) * v).sum(axis=1)

                return form(self.concordance) / np.sqrt(form(self.untied_x) * form(self.untied_y))
            if self.metric == "agreement":
                return (v @ self.hits) / (v @ self.cells)
            weights = v @ self.onehot.T  # (B, cells): how often each cell is in the replicate
            rank_x = v @ self.less_x.T + (v @ self.equal_x.T + 1.0) / 2.0
            rank_y = v @ self.less_y.T + (v @ self.equal_y.T + 1.0) / 2.0
            return _weighted_pearson(rank_x, rank_y, weights)


def _weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    total = w.sum(axis=1, keepdims=True)
    mx, my = (w * x).sum(axis=1, keepdims=True) / total, (w * y).sum(axis=1, keepdims=True) / total
    cov = (w * (x - mx) * (y - my)).sum(axis=1)
    return cov / np.sqrt((w * (x - mx) ** 2).sum(axis=1) * (w * (y - my) ** 2).sum(axis=1))


def dialogue_counts(n_dialogues: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, D) counts of each dialogue in B resamples of D dialogues with replacement."""
    return rng.multinomial(n_dialogues, np.full(n_dialogues, 1.0 / n_dialogues), size=n_resamples).astype(float)


_last: list = [None, None]  # the last current judge's statistic: every candidate of a study shares it


def _statistic(metric, judge, human, dialogue, n) -> Statistic:
    key = (metric, n, judge.tobytes(), human.tobytes(), dialogue.tobytes())
    if _last[0] != key:
        _last[:] = [key, Statistic(metric, judge, human, dialogue, n)]
    return _last[1]


@dataclass(frozen=True)
class Gain:
    current: float  # the current judge's agreement on the cells
    value: float  # the candidate's
    gain: float  # value - current
    replicates: np.ndarray  # (B,) bootstrap gains
    jackknife: np.ndarray  # (D,) leave-one-dialogue-out gains, for BCa


def paired_gain(metric: str, current: np.ndarray, candidate: np.ndarray, human: np.ndarray, dialogue: np.ndarray,
                counts: np.ndarray) -> Gain:
    """The candidate's gain over the current judge on the same cells, with its bootstrap and jackknife replicates.
    `dialogue`: each cell's dialogue index in 0..D-1; `counts`: the (B, D) replicates shared by every candidate."""
    n = counts.shape[1]
    ones, jack = np.ones((1, n)), 1.0 - np.eye(n)
    before = _statistic(metric, current, human, dialogue, n)
    after = Statistic(metric, candidate, human, dialogue, n)
    now, then = float(before(ones)[0]), float(after(ones)[0])
    return Gain(now, then, then - now, after(counts) - before(counts), after(jack) - before(jack))


def _bca_constants(gain: Gain) -> tuple[float, float]:
    reps = gain.replicates[np.isfinite(gain.replicates)]
    below = (np.sum(reps < gain.gain) + 0.5 * np.sum(reps == gain.gain)) / len(reps)
    z0 = float(ndtri(np.clip(below, 1.0 / (len(reps) + 1), 1.0 - 1.0 / (len(reps) + 1))))
    jack = gain.jackknife[np.isfinite(gain.jackknife)]
    spread = jack.mean() - jack
    denominator = 6.0 * np.sum(spread ** 2) ** 1.5
    acceleration = float(np.sum(spread ** 3) / denominator) if denominator > 0 else 0.0
    return z0, acceleration


def interval(gain: Gain, level: float, method: str = "percentile") -> tuple[float, float]:
    """The two-sided `level` interval of the gain: bootstrap percentile, or BCa (Efron 1987)."""
    reps = gain.replicates[np.isfinite(gain.replicates)]
    tail = (1.0 - level) / 2.0
    if not np.isfinite(gain.gain) or len(reps) == 0:
        return float("nan"), float("nan")  # a judge with one score for every cell has no rank correlation
    if method == "percentile":
        return float(np.quantile(reps, tail)), float(np.quantile(reps, 1.0 - tail))
    z0, acc = _bca_constants(gain)
    levels = []
    for z in (ndtri(tail), ndtri(1.0 - tail)):
        levels.append(float(ndtr(z0 + (z0 + z) / (1.0 - acc * (z0 + z)))))
    return float(np.quantile(reps, levels[0])), float(np.quantile(reps, levels[1]))


def p_value(gain: Gain, method: str = "percentile") -> float:
    """Two-sided p-value of "no gain": the smallest 1 - level at which `interval` leaves out zero (so a p below
    alpha and an interval at 1 - alpha that leaves out zero always say the same)."""
    reps = gain.replicates[np.isfinite(gain.replicates)]
    if not np.isfinite(gain.gain) or len(reps) == 0:
        return 1.0  # no gain can be shown where the statistic is undefined (a constant judge)
    # the share of replicates below zero (ties half), kept off 0 and 1: B resamples cannot show p < 2/(B+2)
    share = (np.sum(reps < 0) + 0.5 * np.sum(reps == 0) + 1.0) / (len(reps) + 2.0)
    if method == "percentile":
        tail = share
    else:
        # the tail level t whose BCa-adjusted quantile is zero: Efron's adjusted level solved for z_t
        z0, acc = _bca_constants(gain)
        w = float(ndtri(share)) - z0
        tail = float(ndtr(w / (1.0 + acc * w) - z0)) if 1.0 + acc * w > 0 else 1.0
    return float(min(1.0, 2.0 * min(tail, 1.0 - tail)))


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (as statsmodels' multipletests(method="holm") returns them)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted


def holm_levels(p_values, alpha: float) -> np.ndarray:
    """Each test's Holm step level alpha / (m - rank + 1): the level its printed interval is drawn at."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    levels = np.empty(len(p))
    levels[order] = alpha / (len(p) - np.arange(len(p)))
    return levels


@dataclass(frozen=True)
class Cells:
    """One candidate's labelled cells of one criterion: the current judge's and the candidate's scores, the mean
    human score, and each cell's dialogue index (shared by every candidate of the study)."""

    current: np.ndarray
    candidate: np.ndarray
    human: np.ndarray
    dialogue: np.ndarray


def assess(candidates: dict, n_dialogues: int, *, metric: str = "kendall", alpha: float = 0.05,
           n_resamples: int = 1000, method: str = "percentile", seed: int = 0) -> list[dict]:
    """Every candidate's gain, interval and p-values, Holm over all of them, and which are accepted (`decide`);
    the same resampled dialogues serve every candidate (paired). `candidates`: name -> Cells."""
    counts = dialogue_counts(n_dialogues, n_resamples, np.random.default_rng(seed))
    gains = {name: paired_gain(metric, c.current, c.candidate, c.human, c.dialogue, counts)
             for name, c in candidates.items()}
    rows = decide(gains, alpha, method)
    return [{"candidate": name, "n_labelled": len(candidates[name].human), **row} for name, row in rows.items()]


def decide(gains: dict, alpha: float, method: str = "percentile") -> dict:
    """key -> {current, value, gain, ci_low, ci_high, p, p_holm, accepted} for every candidate's Gain, one Holm
    family over all of them. A candidate's interval is two-sided at its Holm step level, 1 - alpha / (m - rank +
    1); it is accepted when its Holm-adjusted p is at most alpha and that interval lies above zero, i.e. when the
    Holm-adjusted lower bound is above zero."""
    keys = list(gains)
    p = np.array([p_value(gains[k], method) for k in keys])
    adjusted, levels = holm(p), holm_levels(p, alpha)
    rows = {}
    for key, p_one, p_adj, level in zip(keys, p, adjusted, levels):
        g = gains[key]
        low, high = interval(g, 1.0 - level, method)
        rows[key] = {"current": g.current, "value": g.value, "gain": g.gain, "ci_low": low, "ci_high": high,
                     "p": float(p_one), "p_holm": float(p_adj), "accepted": bool(p_adj <= alpha and low > 0)}
    return rows
