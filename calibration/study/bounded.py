"""Intervals for a mean whose labels bunch at one end of a bounded scale: the check that trips (unseen_pull), the
betting interval that replaces the t there (Waudby-Smith & Ramdas, JRSS-B 2023) for a uniform draw (bounded_scale),
for an active design (unseen_hidden: none) and for a two-stage plan's first, uniform stage (first_stage_bounded).
Arrays in, a PPIResult (calibration.study.ppi) out; the measurements are in each function's docstring."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from .ppi_result import MIN_LABELLED, PPIResult, t_quantile


def unseen_pull(human, judge, bounds, confidence: float = 0.95) -> np.ndarray:
    """Rows whose labels cannot vouch for a t interval: they sit so far to one side of the scale, with so little
    spread, that a share of the dialogues n labels miss one time in ten, q = 1 - UNSEEN^(1/n), lying at the
    scale's far end rather than at its near end would pull the mean past the t interval's half-width:
    q |low + high - 2 mean| > t s / sqrt(n). This is the rare-failure shape (most summaries fine, a few badly
    wrong, none of those labelled): the labels look tight and the t interval is centred on the fine ones. Labels
    spread around the scale's middle, or paired differences, never trip it (their pull is small against their
    spread). Only the labels and the scale enter: the t interval is kept or replaced on what the labels show."""
    y, f = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float))
    labelled = ~np.isnan(f) & ~np.isnan(y)
    n = labelled.sum(-1)
    low, high = bounds
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        values = np.where(labelled, y, np.nan)
        mean, spread = np.nanmean(values, -1), np.nanstd(values, -1, ddof=1)
        half = t_quantile(confidence, n - 1) * spread / np.sqrt(n)
        share = 1.0 - UNSEEN ** (1.0 / n)
        return (n >= MIN_LABELLED) & (share * np.abs(low + high - 2.0 * mean) > half)


def bounded_scale(result: PPIResult, human, judge, bounds, confidence: float = 0.95) -> PPIResult:
    """`result` with the rows unseen_pull trips bounded, on the side toward the scale's far end, by the betting
    interval of the human labels alone (valid for any distribution on the scale; the judge's weight is not used
    either: its rectifier saw the same labels), and on the near side by the labels' t bound; the t interval
    elsewhere. Rows already without an interval (few or flat labels) keep none.

    Measured (tests/test_estimate_bounded.py; benchmarks/labels_coverage.py --rare): where 8-18% of summaries are
    badly wrong, coverage from 0.74-0.92 (t) to 0.94-1.00 at n = 3-20; on a bimodal scale (54% ones, 26% fives)
    from 0.92-0.93 to 0.95-0.99 at n = 4-6; on ordinary Likert labels it trips in 0-5% of studies (n = 3-6;
    none from 10), widening the average interval by 0-3%.

    Means only: paired differences keep the t interval. On real releases (SummEval, DialSummEval: 4 criteria
    each, n = 3-20 redrawn) the check tripped on 0-18% of differences, widening them by up to 37% where the t
    already covered 0.95-0.98, and did not mend the one criterion whose differences undercover (SummEval
    consistency, 0.90-0.93: the differences' failures sit on both sides of 0, which no pull toward one end sees)."""
    shown = np.isfinite(result.ci_low) & np.isfinite(result.ci_high)
    tripped = np.asarray(unseen_pull(human, judge, bounds, confidence) & shown)
    if not tripped.any():
        return result
    y, f = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float))
    labelled = ~np.isnan(f) & ~np.isnan(y)
    low, high = np.full(tripped.shape, np.nan), np.full(tripped.shape, np.nan)
    low[tripped], high[tripped] = betting_interval(y[tripped], labelled[tripped], bounds, confidence)
    # Only the far side is at risk (the unseen share would lie there): the near side keeps the labels' t bound,
    # clipped to the scale. Each side errs at most (1 - confidence) / 2, so the pair still holds.
    above = result.human_only > (bounds[0] + bounds[1]) / 2.0
    high = np.where(above, np.minimum(result.human_only_ci_high, bounds[1]), high)
    low = np.where(above, low, np.maximum(result.human_only_ci_low, bounds[0]))

    def pick(bounded, kept) -> np.ndarray:
        return np.where(tripped, bounded, kept)

    return replace(result, estimate=pick(result.human_only, result.estimate), se=pick(np.nan, result.se),
                   ci_low=pick(low, result.ci_low), ci_high=pick(high, result.ci_high),
                   human_only_se=pick(np.nan, result.human_only_se),
                   human_only_ci_low=pick(low, result.human_only_ci_low),
                   human_only_ci_high=pick(high, result.human_only_ci_high), lam=pick(0.0, result.lam),
                   no_interval=pick("bounded", result.no_interval))


def betting_interval(values, labelled, bounds, confidence: float = 0.95, grid: int = 1001, orders: int = 8
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Confidence interval for the mean of labels known to lie in `bounds`, valid for any distribution there:
    the hedged betting interval of Waudby-Smith & Ramdas (JRSS-B 2023), fixed-n predictable plug-in bets.

    Rows (..., D) with `labelled` marking the labels. Each candidate mean m (a grid over the scale) is tested by two
    gamblers, one betting the labels lie above m and one below; m is rejected when the average of their wealth,
    each half-staked, reaches 1 / (1 - confidence): a nonnegative martingale under m, so by Ville's inequality a
    true m is rejected with probability at most 1 - confidence. The bets are lambda_i = sqrt(2 log(2/alpha) /
    (n sigma_{i-1}^2)) (the running variance, before label i), capped at 3/4 of what keeps the wealth positive. The
    wealth is averaged over `orders` fixed orders of the labels (an average of such wealths is one too), so the
    interval hardly depends on the order of the dialogues' ids. The interval is the grid's non-rejected span
    widened by one step."""
    low_bound, high_bound = bounds
    alpha = 1.0 - confidence
    values, labelled = np.asarray(values, dtype=float), np.asarray(labelled, dtype=bool)
    shape = values.shape[:-1]
    values, labelled = values.reshape(-1, values.shape[-1]), labelled.reshape(-1, values.shape[-1])
    x = np.clip((values - low_bound) / (high_bound - low_bound), 0.0, 1.0)
    n = labelled.sum(-1, keepdims=True)
    m = np.linspace(0.0, 1.0, grid)
    rng = np.random.default_rng(0)  # fixed orders: the same labels give the same interval
    wealth = np.zeros((len(x), grid))
    for order in range(orders):
        keys = np.where(labelled, rng.random(x.shape) if order else np.arange(x.shape[-1]), np.inf)
        index = np.argsort(keys, axis=-1)[:, :int(n.max())]
        xs, used = np.take_along_axis(x, index, -1), np.take_along_axis(labelled, index, -1)
        xs = np.where(used, xs, 0.5)
        count = np.cumsum(used, -1)
        mu = (0.5 + np.cumsum(xs * used, -1)) / (count + 1)
        sigma2 = (0.25 + np.cumsum((xs - mu) ** 2 * used, -1)) / (count + 1)
        sigma2_before = np.concatenate([np.full((len(x), 1), 0.25), sigma2[:, :-1]], -1)
        bet = np.sqrt(2.0 * np.log(2.0 / alpha) / (n * sigma2_before))[..., None]
        gap = (xs[..., None] - m) * used[..., None]
        up = np.prod(1.0 + np.minimum(bet, 0.75 / np.maximum(m, 1e-12)) * gap, axis=1)
        down = np.prod(1.0 - np.minimum(bet, 0.75 / np.maximum(1.0 - m, 1e-12)) * gap, axis=1)
        wealth += np.maximum(0.5 * up, 0.5 * down)
    kept = wealth / orders < 1.0 / alpha
    step = 1.0 / (grid - 1)
    first, last = np.argmax(kept, -1), grid - 1 - np.argmax(kept[:, ::-1], -1)
    low = np.where(kept.any(-1), np.clip(m[first] - step, 0.0, 1.0), np.nan)
    high = np.where(kept.any(-1), np.clip(m[last] + step, 0.0, 1.0), np.nan)
    scale = high_bound - low_bound
    return (low_bound + scale * low).reshape(shape), (low_bound + scale * high).reshape(shape)


def unseen_hidden(result: PPIResult, human, judge, bounds, confidence: float = 0.95, first=None) -> PPIResult:
    """`result` (an active design's) without an interval on the rows unseen_pull trips: labels bunched at one end of
    the scale, where failures none of them drew could lie at the other. The betting bound that replaces the t there
    for a uniform draw (bounded_scale) assumes labels drawn uniformly, so an active design's rows get none, and
    interval_note says why. Measured (benchmarks/active_design.py --hard, rare failures: 10% of summaries badly
    wrong, the judge missing those on its hard dialogues; 2 and 6 systems, 1,000 studies): tripped on 35-37% of
    rows at n = 10, 15-17% at 20, 0-1% at 50; the t interval covered 0.85-0.90 on all rows at n = 10-20, 0.963-0.986
    on those left. At n = 50 it covers 0.944-0.954 with lambda cross-fitted (0.90-0.92 when lambda was fitted on
    the labels it corrects: skewed residuals fitted)."""
    tripped = np.asarray(unseen_pull(human, judge, bounds, confidence) & np.isfinite(result.ci_low))
    if not tripped.any():
        return result
    if first is not None:
        return first_stage_bounded(result, human, judge, first, bounds, confidence, tripped)

    def hide(value) -> np.ndarray:
        return np.where(tripped, np.nan, value)

    return replace(result, se=hide(result.se), ci_low=hide(result.ci_low), ci_high=hide(result.ci_high),
                   human_only_se=hide(result.human_only_se), human_only_ci_low=hide(result.human_only_ci_low),
                   human_only_ci_high=hide(result.human_only_ci_high),
                   no_interval=np.where(tripped, "unseen", result.no_interval))


def first_stage_bounded(result: PPIResult, human, judge, first, bounds, confidence: float, tripped) -> PPIResult:
    """unseen_hidden for a two-stage plan: its first stage is a uniform random draw, so the `tripped` rows take the
    betting interval (betting_interval, valid for any scores on the scale) of the first stage's labels alone, and
    their mean as the estimate; none where the first stage has fewer than MIN_LABELLED labels. effective_labels
    counts those labels only (`jensen`: n over their number)."""
    y, f, one = np.broadcast_arrays(np.asarray(human, dtype=float), np.asarray(judge, dtype=float),
                                    np.asarray(first, dtype=bool))
    labelled = ~np.isnan(f) & ~np.isnan(y) & one
    count = labelled.sum(-1)
    shown = tripped & (count >= MIN_LABELLED)
    low, high = np.full(tripped.shape, np.nan), np.full(tripped.shape, np.nan)
    if shown.any():
        low[shown], high[shown] = betting_interval(y[shown], labelled[shown], bounds, confidence)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(labelled, y, 0.0).sum(-1) / count
        worth = np.where(shown, result.n_labelled / np.maximum(count, 1), 1.0)

    def pick(new, kept) -> np.ndarray:
        return np.where(tripped, new, kept)

    return replace(result, estimate=pick(np.where(shown, mean, result.estimate), result.estimate),
                   se=pick(np.nan, result.se), ci_low=pick(low, result.ci_low), ci_high=pick(high, result.ci_high),
                   human_only=pick(np.where(shown, mean, result.human_only), result.human_only),
                   human_only_se=pick(np.nan, result.human_only_se),
                   human_only_ci_low=pick(low, result.human_only_ci_low),
                   human_only_ci_high=pick(high, result.human_only_ci_high), lam=pick(0.0, result.lam),
                   no_interval=pick(np.where(shown, "first stage", "unseen"), result.no_interval),
                   jensen=worth * (1.0 if result.jensen is None else np.where(tripped, 1.0, result.jensen)))


# A share of dialogues that n labels all miss with this probability, 1 - UNSEEN^(1/n), is what the labels cannot
# rule out (unseen_pull). 0.1 kept rare failures at 18% covered at n = 20 (0.941 against 0.935 with 0.2).
UNSEEN = 0.1
