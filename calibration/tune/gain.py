"""The statistics core of `judge tune`: agreement of a judge with the mean human score on labelled cells, the gain
of a candidate over the current judge on the same cells, its paired bootstrap by dialogue, and the one-sided
step-down max-T over every candidate tried (Romano & Wolf 2005) that decides which gains are above zero.

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


@dataclass(frozen=True)
class StepDown:
    """Romano & Wolf's one-sided step-down max-T over a family of gains (`step_down`), each array (K,)."""

    se: np.ndarray  # each gain's bootstrap standard error
    critical: np.ndarray  # c at the step the gain was rejected; the last step's c for the others
    lower: np.ndarray  # the simultaneous lower bound gain - c * se
    rejected: np.ndarray  # lower > 0: the gain is shown above zero at the family level
    p: np.ndarray  # one-sided p of the gain alone (the same studentized replicates, K = 1)
    p_adjusted: np.ndarray  # the step-down adjusted p: at most alpha exactly when rejected (up to ties)
    steps: int


def step_down(estimates, replicates, alpha: float) -> StepDown:
    """One-sided step-down max-T (Romano & Wolf 2005, Econometrica 73(4), Algorithm 4.1 studentized) of "gain k
    is at most zero" for every k at once, from paired bootstrap replicates (B, K) read on the same resamples.

    Each gain is studentized by its bootstrap SE (the same SE for the estimate and the replicates). At each step
    c is the (1 - alpha) bootstrap quantile of the largest centred, studentized replicate (g*_k - g_k) / se_k over
    the gains not yet rejected; every remaining gain with g_k - c se_k > 0 is rejected; the step repeats on the
    rest until none is. The max over the candidates uses their dependence (they share the current judge and the
    humans), which Holm ignores. A gain whose statistic is undefined is never rejected and left out of the max;
    a replicate undefined for one gain leaves that gain out of that replicate's max."""
    g = np.asarray(estimates, dtype=float)
    reps = np.atleast_2d(np.asarray(replicates, dtype=float))
    n_reps, k = reps.shape
    finite = np.isfinite(reps)
    counted = finite.sum(axis=0)
    se = np.full(k, np.nan)
    for j in np.flatnonzero(counted > 1):
        se[j] = float(np.std(reps[finite[:, j], j], ddof=1))
    usable = np.isfinite(g) & np.isfinite(se)
    with np.errstate(invalid="ignore", divide="ignore"):
        # a gain that never moves under resampling (se 0) adds 0 to the max and is shown iff it is above zero
        centred = np.where(finite & usable & (se > 0), (reps - g) / se, np.where(finite & usable, 0.0, -np.inf))
        t = np.where(se > 0, g / se, np.where(g > 0, np.inf, -np.inf))
    t = np.where(usable, t, -np.inf)
    order = int(np.ceil((1.0 - alpha) * n_reps)) - 1  # c: the order statistic with t > c iff share(max >= t) <= a

    def largest(members):
        return np.max(np.where(members, centred, -np.inf), axis=1)

    remaining, rejected = usable.copy(), np.zeros(k, dtype=bool)
    critical = np.full(k, np.nan)
    steps = 0
    while remaining.any():
        steps += 1
        c = float(np.sort(largest(remaining))[order])
        critical[remaining] = c
        new = remaining & (g - c * np.nan_to_num(se) > 0)
        if not new.any():
            break
        rejected |= new
        remaining &= ~new
    lower = np.where(usable, g - critical * np.nan_to_num(se), np.nan)
    p = np.where(usable, (centred >= t).mean(axis=0), 1.0)
    adjusted = np.ones(k)
    running = 0.0
    for j in sorted(np.flatnonzero(usable), key=lambda j: -t[j]):
        running = max(running, float(np.mean(largest(usable & (t <= t[j])) >= t[j])))
        adjusted[j] = running
    return StepDown(se, critical, lower, rejected, p, adjusted, steps)


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
    """Every candidate's gain, interval and p-values, the step-down max-T over all of them, and which are accepted
    (`decide`); the same resampled dialogues serve every candidate (paired). `candidates`: name -> Cells."""
    counts = dialogue_counts(n_dialogues, n_resamples, np.random.default_rng(seed))
    gains = {name: paired_gain(metric, c.current, c.candidate, c.human, c.dialogue, counts)
             for name, c in candidates.items()}
    rows = decide(gains, alpha, method)
    return [{"candidate": name, "n_labelled": len(candidates[name].human), **row} for name, row in rows.items()]


def decide(gains: dict, alpha: float, method: str = "percentile") -> dict:
    """key -> {current, value, gain, ci_low, ci_high, lower_family, p, p_adjusted, accepted} for every candidate's
    Gain, one family over all of them (`step_down` on their paired replicates). `ci_low, ci_high`: the two-sided
    1 - alpha interval of the gain alone (`method`), unadjusted; `lower_family`: the simultaneous lower bound that
    decides, the lower end of two-sided 1 - alpha bounds over the family (the step-down at alpha / 2): a candidate
    is accepted exactly when it is above zero; `p` and `p_adjusted` (the step-down's) are two-sided, twice the
    one-sided ones: a candidate is accepted iff its p_adjusted is at most alpha (up to ties)."""
    keys = list(gains)
    # Equal tails: the lower ends of simultaneous two-sided 1 - alpha bounds, alpha / 2 below. At alpha one-sided the
    # bootstrap of a Kendall gain, a little narrow at 100 dialogues, accepted an equal candidate in 6-7% of studies
    # (benchmarks/tune_simulation.py); at alpha / 2 it is under alpha, with the step-down's power kept.
    family = step_down([gains[k].gain for k in keys], np.column_stack([gains[k].replicates for k in keys]),
                       alpha / 2)
    rows = {}
    for i, key in enumerate(keys):
        g = gains[key]
        low, high = interval(g, 1.0 - alpha, method)
        rows[key] = {"current": g.current, "value": g.value, "gain": g.gain, "ci_low": low, "ci_high": high,
                     "lower_family": float(family.lower[i]), "p": min(1.0, 2 * float(family.p[i])),
                     "p_adjusted": min(1.0, 2 * float(family.p_adjusted[i])), "accepted": bool(family.rejected[i])}
    return rows
