"""Vectorised Pearson, Spearman and Kendall tau-b over the last axis, with integer weights.

Bootstrap resampling is expressed as weights: drawing N dialogues with replacement is the same as giving
each dialogue a count (how many times it was drawn). Every function here computes the statistic of the
*expanded* sample (each unit repeated `weight` times) without materialising it, so a (B, n) array of
counts gives B bootstrap replicates in one call. Weight 0 excludes a unit (missing values, masks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Kendall's pair matrix is built in row blocks of at most this many cells to bound memory.
_BLOCK_CELLS = 2_000_000


def _prepare(x, y, weights):
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    w = np.ones(np.broadcast_shapes(x.shape, y.shape)) if weights is None else np.asarray(weights, dtype=float)
    valid = ~(np.isnan(x) | np.isnan(y))
    if not valid.all():
        # A missing value carries no weight; its placeholder value then never matters.
        w = w * valid
        x = np.where(valid, x, 0.0)
        y = np.where(valid, y, 0.0)
    return x, y, w


def _constant(x, w):
    """True where the units with positive weight do not vary (or fewer than two are left)."""
    live = w > 0
    low = np.where(live, x, np.inf).min(axis=-1)
    high = np.where(live, x, -np.inf).max(axis=-1)
    return ~(high > low)


def _pearson(x, y, w):
    total = w.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dx = x - ((w * x).sum(axis=-1) / total)[..., None]
        dy = y - ((w * y).sum(axis=-1) / total)[..., None]
        r = (w * dx * dy).sum(axis=-1) / np.sqrt((w * dx * dx).sum(axis=-1) * (w * dy * dy).sum(axis=-1))
    r = np.where(_constant(x, w) | _constant(y, w), np.nan, r)
    return np.clip(r, -1.0, 1.0)


def pearson(x, y, weights=None):
    """Pearson r along the last axis; NaN where either side is constant."""
    return _pearson(*_prepare(x, y, weights))


def weighted_ranks(x, weights):
    """Average (mid) ranks of each unit in the expanded sample, and the total weight tied with it.

    Sorted once per row (argsort over the last axis of the broadcast array), then tie groups are found
    with running max/min of their boundaries, so there is no Python loop over rows or resamples.
    """
    x = np.asarray(x, dtype=float)
    w = np.asarray(weights, dtype=float)
    if x.ndim == 1 and w.ndim > 1:
        # Values shared by every resample (only the counts differ): sort once, broadcast the order.
        order = np.broadcast_to(np.argsort(x, kind="stable"), w.shape)
        xs = np.broadcast_to(x[order[(0,) * (w.ndim - 1)]], w.shape)
    else:
        x, w = np.broadcast_arrays(x, w)
        order = np.argsort(x, axis=-1, kind="stable")
        xs = np.take_along_axis(x, order, axis=-1)
    n = xs.shape[-1]
    ws = np.take_along_axis(w, order, axis=-1)
    cumulative = np.cumsum(ws, axis=-1)
    index = np.broadcast_to(np.arange(n), xs.shape)
    starts_group = np.ones(xs.shape, dtype=bool)
    starts_group[..., 1:] = xs[..., 1:] != xs[..., :-1]
    ends_group = np.ones(xs.shape, dtype=bool)
    ends_group[..., :-1] = starts_group[..., 1:]
    start = np.maximum.accumulate(np.where(starts_group, index, 0), axis=-1)
    end = np.flip(np.minimum.accumulate(np.flip(np.where(ends_group, index, n - 1), -1), axis=-1), -1)
    below = np.take_along_axis(cumulative, start, -1) - np.take_along_axis(ws, start, -1)
    tied = np.take_along_axis(cumulative, end, -1) - below
    ranks = np.empty_like(xs)
    ties = np.empty_like(xs)
    np.put_along_axis(ranks, order, below + (tied + 1.0) / 2.0, -1)
    np.put_along_axis(ties, order, tied, -1)
    return ranks, ties


def spearman(x, y, weights=None):
    """Spearman rho (Pearson of mid-ranks) along the last axis; NaN where either side is constant."""
    x, y, w = _prepare(x, y, weights)
    rx, _ = weighted_ranks(x, w)
    ry, _ = weighted_ranks(y, w)
    rho = _pearson(rx, ry, w)
    return np.where(_constant(x, w) | _constant(y, w), np.nan, rho)


def _concordance(x, y, w):
    """Sum over unordered pairs of w_a * w_b * sign(dx) * sign(dy) (= concordant - discordant)."""
    if x.ndim == 1 and y.ndim == 1 and w.ndim >= 2:
        # Values shared by all resamples, only the counts differ: w^T S w with S built in row blocks.
        n = x.shape[0]
        flat = w.reshape(-1, n)
        total = np.zeros(flat.shape[0])
        block = max(1, _BLOCK_CELLS // n)
        for start in range(0, n, block):
            stop = min(n, start + block)
            signs = np.sign(x[start:stop, None] - x[None, :]) * np.sign(y[start:stop, None] - y[None, :])
            # float32 is exact here: counts and signs are small integers and each dot product is at most
            # the total count; it halves the cost of the one O(B n^2) step.
            partial = flat.astype(np.float32) @ signs.T.astype(np.float32)
            total += np.einsum("ba,ba->b", flat[:, start:stop], partial.astype(float))
        return 0.5 * total.reshape(w.shape[:-1])
    x, y, w = np.broadcast_arrays(x, y, w)
    signs = np.sign(x[..., :, None] - x[..., None, :]) * np.sign(y[..., :, None] - y[..., None, :])
    return 0.5 * np.einsum("...a,...ab,...b->...", w, signs, w)


def _kendall_grouped(x, y, group_weights, groups):
    """kendall_tau_b when every unit carries its group's weight (bootstrap counts of dialogues, units = summaries).

    Each sum over pairs of units is a quadratic form in the group weights: the pair sums are collected once into
    (G, G) matrices by the pair's groups (sign products; pairs tied in x; tied in y), and each resample costs
    O(G^2): O(n^2 + B G^2) in all, where weights per unit would cost O(B n^2).
    """
    x, y, groups = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(groups)
    keep = ~(np.isnan(x) | np.isnan(y))
    order = np.argsort(groups[keep], kind="stable")
    x, y, groups = x[keep][order], y[keep][order], groups[keep][order]
    c = np.asarray(group_weights, dtype=float)
    size, n = c.shape[-1], x.shape[0]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if n else np.zeros(0, dtype=int)
    present = groups[starts]

    def by_group_pairs(values: Callable[[slice], np.ndarray]) -> np.ndarray:
        """(G, G): for groups g, h, the sum over units a in g, b in h of values(a, b), built in row blocks."""
        out = np.zeros((size, size))
        block = max(1, _BLOCK_CELLS // max(n, 1))
        for begin in range(0, n, block):
            rows = slice(begin, min(n, begin + block))
            columns = np.add.reduceat(values(rows), starts, axis=1, dtype=np.int64)  # (rows, present groups)
            np.add.at(out, (groups[rows, None], present[None, :]), columns)
        return out

    def sign(v, r):  # int8: a quarter of float64's memory traffic on the one O(n^2) step
        return (v[r, None] > v[None, :]).view(np.int8) - (v[r, None] < v[None, :]).view(np.int8)

    concordant = by_group_pairs(lambda r: sign(x, r) * sign(y, r))
    tied_x = by_group_pairs(lambda r: (x[r, None] == x[None, :]).view(np.int8))
    tied_y = by_group_pairs(lambda r: (y[r, None] == y[None, :]).view(np.int8))
    quadratic = lambda matrix: ((c @ matrix) * c).sum(axis=-1)  # noqa: E731  (a matmul: einsum's path is slow)
    total = c @ np.bincount(groups, minlength=size).astype(float) if n else np.zeros(c.shape[:-1])
    pairs = 0.5 * (total * total - total)
    # Ordered pairs tied in x, self-pairs included, are sum_g W_g^2 over tie groups; halve after removing selves.
    untied_x = pairs - 0.5 * (quadratic(tied_x) - total)
    untied_y = pairs - 0.5 * (quadratic(tied_y) - total)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = 0.5 * quadratic(concordant) / np.sqrt(untied_x * untied_y)
    # No pair untied on one side: that side is constant (or fewer than two units): undefined, as below.
    tau = np.where((untied_x > 0) & (untied_y > 0), tau, np.nan)
    return np.clip(tau, -1.0, 1.0)


def _kendall_unweighted(x, y) -> float:
    """One unweighted tau-b: scipy's O(n log n) algorithm (the pair matrix below is O(n^2))."""
    from scipy.stats import kendalltau

    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.clip(kendalltau(x, y, variant="b").statistic, -1.0, 1.0))


def kendall_tau_b(x, y, weights=None, groups=None):
    """Kendall tau-b along the last axis (scipy's variant="b"); NaN where either side is constant.

    With `groups` (1-D x and y; one group index per unit), `weights` are per group, (..., G): every unit of a group
    carries its group's weight, as when whole dialogues are resampled at the item level.
    """
    if groups is not None:
        return _kendall_grouped(x, y, np.ones(int(np.max(groups)) + 1) if weights is None else weights, groups)
    if weights is None and np.ndim(x) == 1 and np.ndim(y) == 1:
        return _kendall_unweighted(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    x, y, w = _prepare(x, y, weights)
    total = w.sum(axis=-1)
    _, tied_x = weighted_ranks(x, w)
    _, tied_y = weighted_ranks(y, w)
    pairs = 0.5 * (total * total - total)
    # sum over units of w * (weight tied with it) = sum over tie groups of W_g^2.
    ties_x = 0.5 * ((w * tied_x).sum(axis=-1) - total)
    ties_y = 0.5 * ((w * tied_y).sum(axis=-1) - total)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = _concordance(x, y, w) / np.sqrt((pairs - ties_x) * (pairs - ties_y))
    tau = np.where(_constant(x, w) | _constant(y, w), np.nan, tau)
    return np.clip(tau, -1.0, 1.0)


STATISTICS = {"pearson": pearson, "spearman": spearman, "kendall": kendall_tau_b}


def resample_counts(rng: np.random.Generator, n: int, n_resamples: int) -> np.ndarray:
    """(n_resamples, n) counts of how often each of n units is drawn in a bootstrap sample of size n."""
    draws = rng.integers(0, n, size=(n_resamples, n))
    offsets = (np.arange(n_resamples) * n)[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(float)


def expanded_tail(confidence: float, n: int) -> float:
    """The percent cut off each side of the bootstrap distribution of a mean over n resampled units: the expanded
    percentile interval (Hesterberg, "What teachers should know about the bootstrap", 2015), which replaces the
    normal quantile by sqrt(n / (n - 1)) t_{n-1}. The plain percentile interval is too narrow at small n, as a z
    interval with the biased variance would be: 0.908-0.928 coverage per system for screen's means at 16
    dialogues, 0.88 for the summary-level correlation at 20 dialogues (tests/test_bootstrap_coverage.py)."""
    from scipy import stats

    quantile = np.sqrt(n / (n - 1.0)) * stats.t.ppf(0.5 + confidence / 2.0, n - 1)
    return float(stats.norm.sf(quantile)) * 100.0


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95, units: int | None = None
                        ) -> tuple[float, float]:
    """Percentile bootstrap interval over the replicates that are defined (NaN ones are left out); expanded
    (`expanded_tail`) when the statistic is a mean over `units` resampled dialogues."""
    defined = replicates[~np.isnan(replicates)]
    if defined.size == 0:
        return float("nan"), float("nan")
    tail = expanded_tail(confidence, units) if units and units >= 2 else (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(defined, [tail, 100.0 - tail])
    return float(low), float(high)


def simultaneous_differences(estimates, replicates, groups=None, confidence: float = 0.95,
                             units: int | None = None) -> dict:
    """Simultaneous lower bounds on every paired difference theta_j - theta_i (i, j in one group), for selection.

    A "best" set chosen against the observed best (Holm over the comparisons with it) does not control leaving out
    a truly best candidate: the observed best is picked by the same noise (with 14 equal systems one was left out in
    18-27% of runs). Here every difference gets a lower bound D_ij - q se_ij: se_ij is the bootstrap standard error of
    the paired difference (the same resamples of dialogues for every candidate), widened by sqrt(n / (n - 1)) for
    the bootstrap's biased variance when the estimates are means over n = `units` dialogues, and q the t_{n-1}
    quantile Bonferroni-corrected over the m pairs (two-sided, 1 - (1 - confidence) / 2m). With probability at
    least `confidence` every bound holds at once, so:
    - "i is not among the best" (some j's bound on theta_j - theta_i is above 0) leaves out a truly best candidate,
      of however many tied ones, in at most 1 - confidence of studies;
    - any conjunction of bounds ("dominated": worse on every criterion) is wrong at most as often.
    The bootstrap's own max-t quantile (Tukey by resampling) was measured too narrow at 10-20 dialogues (10-14% left
    out with 8 equal candidates): each pair's standard error is estimated, and their maximum has heavier tails than
    the resampled one. Bonferroni-t measured 3.8-6.8% (400 studies per cell, 3-14 candidates, 10-60 dialogues).

    Returns {"lower": (K, K) bounds on theta_j - theta_i (NaN across groups and on the diagonal), "q": q, "p": (K,)
    adjusted p-value that candidate i is below another, "used": resamples used, "failed": resamples with an
    undefined estimate (left out, counted)}.
    """
    from scipy import stats

    theta = np.asarray(estimates, float)
    reps = np.asarray(replicates, float)
    groups = np.zeros(len(theta), int) if groups is None else np.asarray(groups)
    failed_rows = np.isnan(reps[:, np.isfinite(theta)]).any(axis=1)
    reps = reps[~failed_rows]
    k = len(theta)
    lower = np.full((k, k), np.nan)
    p = np.ones(k)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)
             if groups[i] == groups[j] and np.isfinite(theta[i]) and np.isfinite(theta[j])]
    result = {"lower": lower, "q": float("nan"), "p": p, "used": len(reps), "failed": int(failed_rows.sum())}
    if not pairs or len(reps) < 2:
        return result
    i_idx, j_idx = np.array(pairs).T
    observed = theta[j_idx] - theta[i_idx]
    se = (reps[:, j_idx] - reps[:, i_idx]).std(axis=0, ddof=1)
    df = np.inf
    if units and units >= 2:
        se, df = se * np.sqrt(units / (units - 1.0)), units - 1
    tail = (1.0 - confidence) / (2 * len(pairs))
    q = float(stats.t.isf(tail, df))
    known = se <= 1e-12 * (1 + np.abs(observed))  # identical candidates: the difference is known exactly
    lower[i_idx, j_idx] = np.where(known, observed, observed - q * se)  # on theta_j - theta_i
    lower[j_idx, i_idx] = np.where(known, -observed, -observed - q * se)  # on theta_i - theta_j
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(known, np.sign(observed) * np.inf, observed / np.where(known, 1.0, se))
    adjusted = np.minimum(1.0, 2 * len(pairs) * stats.t.sf(np.abs(z), df))
    for n, (i, j) in enumerate(pairs):
        lowered = i if z[n] > 0 else j if z[n] < 0 else None  # the one below the other
        if lowered is not None:
            p[lowered] = min(p[lowered], float(adjusted[n]))
    result.update(q=q, p=p)
    return result


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values: a family of tests whose any-false-flag rate is at most the level."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    out = np.empty_like(p)
    out[order] = adjusted
    return out


def widened_share(value: float, low: float, high: float, spread: float, trials: float, units: int,
                  confidence: float = 0.95, method: str = "wilson") -> tuple[float, float]:
    """A share's bootstrap interval (low, high), widened to the binomial `method` interval (statsmodels'
    proportion_confint: "wilson", or "beta" for Clopper-Pearson on whole counts) at the effective number of trials:
    `trials` over the design effect of the `units` resampled (dialogues), measured from the bootstrap `spread` (its
    SD of the share); where it cannot be measured (no event, or no non-event) one trial per unit. A rare event then
    never gets a zero-width [0%, 0%] interval."""
    from statsmodels.stats.proportion import proportion_confint

    if 0 < value < 1 and spread > 0:
        effective = min(trials, max(units, value * (1 - value) / spread ** 2))
    else:
        effective = max(units, 1)
    events = value * effective
    if method == "beta":
        events, effective = round(events), round(effective)
    exact_low, exact_high = proportion_confint(events, effective, 1 - confidence, method)
    return float(min(low, exact_low)), float(max(high, exact_high))
