"""The threshold tests of `judge escalate`: one fixed-sequence test along a label-free path through the judges'
joint thresholds (after Jung, Brahman & Choi, "Trust or Escalate", ICLR 2025), on arrays (the simulation calls these
directly).

The guarantee is for the cascade as a whole, per criterion: with probability >= 1 - delta over the draw of the
calibration set, the verdicts the cascade accepts (whichever judge gave them) agree with humans at a rate >= 1 - alpha,
for cells drawn like the calibration cells (exchangeability: the labelled cells are a random sample of the population
the decided cells come from). Testing each judge at delta, as the paper does, holds for a cascade of k judges only at
k * delta; here one fixed-sequence test runs along one path through the judges' joint thresholds:

- the path is fixed before any label is looked at: at step q (q = 1/steps, 2/steps, ..., 1) every judge accepts at most
  the share q of the unlabelled cells, its most confident ones (ties are never split: a coarse, two-valued confidence
  accepts its confident group only once q reaches that group's share, and everything only at q = 1, so a cheap judge
  cannot take every cell early); the thresholds come from the unlabelled cells' confidences only;
- the path starts where the expected number of accepted calibration cells is large enough for the exact binomial
  test to reject, with 80% power, a judge whose accepted verdicts disagree at half the allowed rate (alpha / 2: a
  strong judge's most confident verdicts still disagree with humans 5-10% of the time); see `start_size` and
  `start_step`: a count from alpha, delta, the number of labels and the unlabelled confidences, never from the
  labels. (A start sized for a judge with no error at all, about 23 cells at alpha 0.15, rejects only with at most
  one disagreement: the first step fails and nothing is accepted, where 80-100 cells would reject easily.);
- at each step, H0: P(disagree | accepted) > alpha is tested with the exact binomial p-value P(Bin(n, alpha) <= e)
  (n accepted calibration cells, e disagreements; given n, the accepted cells' outcomes are iid under
  exchangeability), at level delta; the first step not rejected stops the walk, and the last rejected step is used
  (fixed-sequence testing: the family-wise error along the whole path is <= delta). If the first step is not
  rejected, nothing is accepted: a useless confidence accepts nothing it cannot guarantee.
- labels usually come in whole dialogues (`judge export` shows annotators every candidate of a dialogue), and cells of
  one dialogue are not independent: drawing DialSummEval's dialogues whole, the binomial test failed in 13-20% of draws
  at delta 0.1. So when some dialogue has several labelled cells (units "auto"), each dialogue is one unit and H0 is
  tested by betting (Waudby-Smith & Ramdas) on y_d = (e_d + alpha (m - n_d)) / m over the independent dialogues
  (see `fit_cascade`); valid, and more conservative. `units="cells"` keeps the binomial test for labels drawn cell by
  cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

PATH_STEPS = 40


def min_labels(alpha: float, delta: float) -> int:
    """The fewest accepted calibration cells with which even zero disagreements reject risk > alpha at level delta:
    (1 - alpha)^n <= delta."""
    return int(math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12))


def binomial_p(errors, n, alpha: float):
    """Exact p-value of H0: P(disagree) >= alpha given `errors` disagreements in `n` cells (P(Bin(n, alpha) <= e));
    1 where n is 0."""
    from scipy.stats import binom

    errors, n = np.asarray(errors), np.asarray(n)
    return np.where(n > 0, binom.cdf(errors, np.maximum(n, 1), alpha), 1.0)


def agreement_bound(errors, n, delta: float):
    """Clopper-Pearson one-sided lower (1 - delta) bound of the agreement rate; NaN where n is 0."""
    from scipy.stats import beta

    errors, n = np.asarray(errors, float), np.asarray(n, float)
    with np.errstate(invalid="ignore"):
        upper = np.where(errors >= n, 1.0, beta.ppf(1 - delta, errors + 1, np.maximum(n - errors, 1)))
    return np.where(n > 0, 1.0 - upper, np.nan)


def path_thresholds(pool: np.ndarray, steps: int = PATH_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """The path through the judges' joint thresholds, strict to loose, from the unlabelled confidences only.

    `pool` (m cells x K judges; NaN where a judge gave no verdict). At step q = j/steps each judge's threshold is the
    lowest confidence value whose cells (confidence >= it) are at most the share q of the m cells; +inf (accept none)
    when even its top value covers more. Returns (thresholds: steps x K, q: steps), consecutive repeats dropped.
    """
    m, judges = pool.shape
    qs = np.arange(1, steps + 1) / steps
    out = np.full((steps, judges), np.inf)
    for k in range(judges):
        values = pool[:, k][np.isfinite(pool[:, k])]
        if not len(values):
            continue
        distinct, counts = np.unique(values, return_counts=True)
        distinct, share = distinct[::-1], np.cumsum(counts[::-1]) / m  # share accepted at threshold = distinct[i]
        for j, q in enumerate(qs):
            ok = np.nonzero(share <= q + 1e-12)[0]
            if len(ok):
                out[j, k] = distinct[ok[-1]]
    keep = np.ones(steps, bool)
    keep[1:] = np.any(out[1:] != out[:-1], axis=1)
    return out[keep], qs[keep]


def path_sample(pool: np.ndarray, path_cells: int | None, seed: int) -> np.ndarray:
    """The indices of the unlabelled cells (`pool`: a mask over the criterion's cells, sorted by item and system)
    that fix the path: all of them, or a seeded sample of `path_cells`. Drawn from the cells and the seed only (never
    a confidence or a label), so a later judge needs to judge only these, the labelled cells and what reaches it,
    and the thresholds stay the same once it has judged the rest."""
    indices = np.flatnonzero(pool)
    if path_cells is None or path_cells >= len(indices):
        return indices
    return np.sort(np.random.default_rng([seed, path_cells]).choice(indices, path_cells, replace=False))


def decide(conf: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Which judge keeps each cell's verdict: the first (cheapest) whose confidence reaches its threshold; -1 = humans.
    `thresholds` (K,) or (S, K) gives (n,) or (S, n)."""
    thresholds = np.asarray(thresholds, float)
    single = thresholds.ndim == 1
    thresholds = np.atleast_2d(thresholds)
    with np.errstate(invalid="ignore"):
        accept = conf[None, :, :] >= thresholds[:, None, :]  # NaN never reaches
    first = np.where(accept.any(axis=2), accept.argmax(axis=2), -1)
    return first[0] if single else first


START_POWER = 0.8  # the first tested step rejects a judge at alpha / 2 with at least this probability


@lru_cache(maxsize=256)
def start_size(alpha: float, delta: float, power: float = START_POWER) -> int:
    """The fewest accepted calibration cells from which on the exact binomial test at level delta rejects risk >= alpha,
    with probability >= `power`, for verdicts that disagree at the rate alpha / 2 (and keeps that power for the next
    30 counts: the binomial's power is not monotone in n). From alpha and delta only."""
    from scipy.stats import binom

    rate, window = alpha / 2, 30
    good = np.zeros(0, bool)
    for end in (250, 1_000, 4_000, 16_000, 64_000):  # small alphas need more cells: widen until found
        counts = np.arange(len(good) + 1, end + 1)
        # the most disagreements that still reject at each n, and their probability at the rate alpha / 2
        most = binom.ppf(delta, counts, alpha)
        most = np.where(binom.cdf(most, counts, alpha) <= delta, most, most - 1)
        good = np.concatenate([good, (most >= 0) & (binom.cdf(most, counts, rate) >= power)])
        steady = np.convolve(good, np.ones(window, int), "valid") == window
        if steady.any():
            return int(np.argmax(steady)) + 1
    return len(good)


def start_step(pool_coverage: np.ndarray, n_labelled: int, alpha: float, delta: float, units: int | None = None
               ) -> int:
    """The first step of the path the walk tests (a test that cannot reject would end the walk before it starts).
    Label-free: counts and unlabelled confidences only, never the labels.

    Cells: the expected accepted calibration count, n_labelled x the cascade's share c of the unlabelled cells, is at
    least `start_size(alpha, delta)`, capped at 0.4 n_labelled (few labels: the walk must keep room to accept), and at
    least min_labels + 2 sqrt(min_labels) (a step with fewer could reject only with no disagreement at all).
    Dialogues (`units` of them, m = n_labelled / units cells each): with disagreements at half the allowed rate, y's
    mean is alpha (1 - c/2) and its variance about mean (1 - mean) / m; the step starts the walk once
    N (alpha - mean)^2 / (2 variance) >= 1.5 log(1/delta) (a betting test's reach)."""
    if units is not None:
        mean = alpha * (1 - pool_coverage / 2)
        variance = mean * (1 - mean) / max(n_labelled / units, 1.0)
        reach = np.nonzero(units * (alpha - mean) ** 2 / (2 * variance) >= 1.5 * math.log(1 / delta))[0]
        return int(reach[0]) if len(reach) else len(pool_coverage)
    need: float = min_labels(alpha, delta)
    need = max(need + 2.0 * math.sqrt(need), min(start_size(alpha, delta), 0.4 * n_labelled))
    reach = np.nonzero(pool_coverage * n_labelled >= need)[0]
    return int(reach[0]) if len(reach) else len(pool_coverage)


def betting_p(y: np.ndarray, alpha: float, delta: float) -> np.ndarray:
    """p-value of H0: E[y] >= alpha from independent y in [0, 1] (one row per hypothesis: S x N), by testing by
    betting (Waudby-Smith & Ramdas, JRSS-B 2024): the wealth K_t = prod (1 + lambda_t (alpha - y_t)) is a non-negative
    supermartingale under H0 for any predictable lambda_t in [0, 0.75 / (1 - alpha)], so p = 1 / max_t K_t is valid
    (Ville's inequality). lambda_t: their predictable plug-in, sqrt(2 log(1/delta) / (N var_{t-1})), capped. The units
    are taken in one fixed order (a seeded shuffle of the order given): the same inputs give the same p-value."""
    y = np.atleast_2d(np.asarray(y, float))
    rows, count = y.shape
    y = y[:, np.random.default_rng(0).permutation(count)]
    mean, var = np.full(rows, 0.5), np.full(rows, 0.25)
    total, squares, wealth, best = np.zeros(rows), np.zeros(rows), np.zeros(rows), np.zeros(rows)
    cap = 0.75 / (1 - alpha)
    for t in range(count):
        bet = np.minimum(np.sqrt(2 * math.log(1 / delta) / (count * var)), cap)
        wealth += np.log1p(bet * (alpha - y[:, t]))
        best = np.maximum(best, wealth)
        total += y[:, t]
        squares += (y[:, t] - mean) ** 2
        mean, var = (0.5 + total) / (t + 2), (0.25 + squares) / (t + 2)
    return np.minimum(1.0, np.exp(-best))


@dataclass
class CascadeFit:
    thresholds: np.ndarray  # (K,) the chosen thresholds; +inf = the judge accepts nothing
    path: pd.DataFrame  # one row per step of the path that was tested (or skipped)
    chosen: int  # the index in `path` of the step used; -1 = none rejected (nothing accepted)


def fit_cascade(cal_conf: np.ndarray, cal_agree: np.ndarray, pool_conf: np.ndarray, alpha: float, delta: float,
                steps: int = PATH_STEPS, groups: np.ndarray | None = None) -> CascadeFit:
    """Thresholds for the cascade by one fixed-sequence test along the label-free path.

    `cal_conf`, `cal_agree` (n x K): each judge's confidence (NaN: no verdict) and whether its verdict agrees with the
    humans on the calibration cells; `pool_conf` (m x K): the unlabelled cells' confidences (they fix the path).

    `groups` (n,): the dialogue of each calibration cell, when labels come in whole dialogues (cells of one dialogue
    are not independent, and the binomial test assumes they are). Each dialogue d is then one unit:
    y_d = (e_d + alpha (m - n_d)) / m in [0, 1] (e_d disagreements among its n_d accepted cells, m the most cells a
    dialogue has), whose mean is >= alpha exactly when the accepted verdicts' disagreement rate is >= alpha; H0 is
    tested by betting over the independent dialogues (`betting_p`)."""
    thresholds, qs = path_thresholds(pool_conf, steps)
    judges = cal_conf.shape[1]
    pool_first = decide(pool_conf, thresholds)  # (S, m)
    pool_coverage = (pool_first >= 0).mean(axis=1) if pool_conf.shape[0] else np.zeros(len(qs))
    first = decide(cal_conf, thresholds)  # (S, n)
    accepted = first >= 0
    picked = np.take_along_axis(np.broadcast_to(cal_agree, (len(qs), *cal_agree.shape)),
                                np.maximum(first, 0)[:, :, None], axis=2)[:, :, 0]
    n = accepted.sum(axis=1)
    wrong = accepted & ~picked
    errors = wrong.sum(axis=1)
    if groups is None:
        p = binomial_p(errors, n, alpha)
        begin = start_step(pool_coverage, cal_conf.shape[0], alpha, delta)
    else:
        _, unit = np.unique(groups, return_inverse=True)
        units = int(unit.max()) + 1
        onehot = np.zeros((len(unit), units))
        onehot[np.arange(len(unit)), unit] = 1.0
        size = onehot.sum(axis=0).max()
        y = ((wrong @ onehot) + alpha * (size - accepted @ onehot)) / size  # (S, units)
        p = betting_p(y, alpha, delta)
        begin = start_step(pool_coverage, cal_conf.shape[0], alpha, delta, units=units)
    tested = np.arange(len(qs)) >= begin
    rejected = np.zeros(len(qs), bool)
    chosen = -1
    for s in range(begin, len(qs)):
        if p[s] > delta:
            break
        rejected[s] = True
        chosen = s
    tested &= np.arange(len(qs)) <= (chosen + 1 if chosen >= 0 else begin)
    path = pd.DataFrame({"step": np.arange(len(qs)), "q": qs, "pool_coverage": pool_coverage,
                         "n_accepted": n, "disagreements": errors, "p_value": p, "tested": tested,
                         "rejected": rejected, "chosen": np.arange(len(qs)) == chosen})
    for k in range(judges):
        path[f"threshold_{k}"] = thresholds[:, k]
    final = thresholds[chosen] if chosen >= 0 else np.full(judges, np.inf)
    return CascadeFit(final, path, chosen)

