"""Judge-vs-human correlation at system, summary and item level (DialSummEval), with bootstrap CIs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from .stats import STATISTICS, kendall_tau_b, percentile_interval, resample_counts

LEVELS = ("system", "summary", "item")
STATISTIC_NAMES = tuple(STATISTICS)
# Resamples are processed in batches so that item-level arrays stay a few tens of MB.
_BATCH = 250


@dataclass
class PairedScores:
    """One criterion as items x systems matrices (NaN where a pair is missing)."""

    criterion: str
    items: np.ndarray
    systems: np.ndarray
    judge: np.ndarray
    human: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: pd.DataFrame, criterion: str, judge_column="judge", human_column="human"):
        part = pairs[pairs["criterion"] == criterion]
        judge = part.pivot(index="item_id", columns="system", values=judge_column)
        human = part.pivot(index="item_id", columns="system", values=human_column).reindex_like(judge)
        return cls(criterion, judge.index.to_numpy(), judge.columns.to_numpy(), judge.to_numpy(float),
                   human.to_numpy(float))

    @property
    def mask(self) -> np.ndarray:
        return ~(np.isnan(self.judge) | np.isnan(self.human))


def system_means(paired: PairedScores, item_weights=None):
    """Per-system means of judge and human over the (resampled) items, and the item count per system."""
    mask = paired.mask.astype(float)
    weights = np.ones(len(paired.items)) if item_weights is None else item_weights
    count = weights @ mask
    with np.errstate(invalid="ignore", divide="ignore"):
        judge = (weights @ np.where(paired.mask, paired.judge, 0.0)) / count
        human = (weights @ np.where(paired.mask, paired.human, 0.0)) / count
    # Equal means must tie in the rank statistics: summing thirds in another order gives 4.300000000000001 next
    # to 4.3, which Spearman and Kendall would otherwise rank apart (DECODA main_issues: 0.200 instead of 0.232).
    return np.round(judge, 12), np.round(human, 12), count


def per_item_correlations(paired: PairedScores, statistic: str) -> np.ndarray:
    """Correlation across systems within each item; NaN where either side is constant (skipped)."""
    return STATISTICS[statistic](paired.judge, paired.human, paired.mask.astype(float))


def level_statistic(paired: PairedScores, level: str, statistic: str, item_weights=None, system_weights=None,
                    per_item=None):
    """The statistic at one level; with (B, N) item / (B, J) system counts, B bootstrap replicates."""
    function = STATISTICS[statistic]
    if level == "system":
        judge, human, _ = system_means(paired, item_weights)
        return function(judge, human, system_weights)
    if level == "summary":
        per_item = per_item_correlations(paired, statistic) if per_item is None else per_item
        defined = ~np.isnan(per_item)
        if item_weights is None:
            return float(per_item[defined].mean()) if defined.any() else float("nan")
        with np.errstate(invalid="ignore", divide="ignore"):
            return (item_weights @ np.where(defined, per_item, 0.0)) / (item_weights @ defined)
    if level == "item":
        rows, _ = np.nonzero(paired.mask)
        judge, human = paired.judge[paired.mask], paired.human[paired.mask]
        if item_weights is not None and statistic == "kendall":
            # Whole dialogues are resampled: pairs of summaries are summed per pair of dialogues once.
            return kendall_tau_b(judge, human, item_weights, groups=rows)
        return function(judge, human, None if item_weights is None else item_weights[..., rows])
    raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")


def bootstrap_weights(paired: PairedScores, n_resamples: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Counts for resampling items (dialogues) and, for the system level, systems too."""
    rng = np.random.default_rng(seed)
    return (resample_counts(rng, len(paired.items), n_resamples),
            resample_counts(rng, len(paired.systems), n_resamples))


def bootstrap_replicates(paired: PairedScores, level: str, statistic: str, item_weights, system_weights,
                         per_item=None) -> np.ndarray:
    out = []
    # Batches bound the (B, summaries) arrays; grouped Kendall at item level holds only (B, dialogues): one batch,
    # so its pair sums are built once.
    size = item_weights.shape[0] if (level, statistic) == ("item", "kendall") else _BATCH
    for start in range(0, item_weights.shape[0], size):
        batch = slice(start, start + size)
        out.append(np.atleast_1d(level_statistic(
            paired, level, statistic, item_weights[batch],
            system_weights[batch] if level == "system" else None, per_item)))
    return np.concatenate(out)


def summary_units(level: str, per_item: np.ndarray) -> int | None:
    """The summary level is a mean over dialogues (those with a defined correlation): its percentile interval is
    expanded for their number, as screen's means are (0.88 -> 0.92 coverage at 20 dialogues x 6 systems)."""
    return int((~np.isnan(per_item)).sum()) if level == "summary" else None


def few_systems_note(n_systems: int, confidence: float = 0.95) -> str:
    """Why a system-level interval over `n_systems` resampled systems cannot hold ('' when it can).

    A resample of J systems drawn with replacement holds at most two distinct systems with probability
    (J + C(J, 2) (2^J - 2)) / J^J, and the correlation of two points is +-1 (or undefined): once that is more than
    the tail an interval cuts off, its bounds are -1 and 1 whatever the judge (4 systems: 34% of resamples; 5: 10%;
    6: 2.0%). Pearson's Fisher z interval (`system_interval`) is kept to the same floor: one rule for every
    statistic, and at 4-5 systems it spans most of [-1, 1] anyway. The bootstrap over dialogues alone (the
    study's fixed systems) is no way out: see `system_interval`."""
    if n_systems >= min_systems(confidence):
        return ""
    return (f"{n_systems} systems: no system-level interval (resamples of {n_systems} systems hold two distinct "
            f"ones or fewer in {_few_distinct(n_systems):.0%} of cases, whose correlation is +-1 whatever the judge, "
            f"so any interval would be [-1, 1]); it needs {min_systems(confidence)} systems or more")


def systems_needed(r: float, confidence: float = 0.95) -> float:
    """How many systems a system-level interval needs to say something at the observed correlation `r`: the fewest
    J whose Fisher z interval around r, atanh(r) +- z_{1-a/2} / sqrt(J - 3), excludes 0, i.e. J > 3 + (z / atanh|r|)^2,
    and never fewer than `min_systems` (below it resampled systems make any interval [-1, 1]). Infinite at r = 0
    (or NaN): no number of systems tells a correlation of 0 from 0."""
    from math import atanh, floor, isfinite

    from scipy.stats import norm

    if not isfinite(r) or r == 0:
        return float("inf")
    z = norm.ppf(1 - (1 - confidence) / 2)
    fisher = 3 + (z / atanh(min(abs(r), 1 - 1e-12))) ** 2
    return float(max(min_systems(confidence), floor(fisher) + 1))


def _few_distinct(n_systems: int) -> float:
    """P(a resample of n systems with replacement holds at most two distinct systems)."""
    from math import comb

    j = n_systems
    return min(1.0, (j + comb(j, 2) * (2 ** j - 2)) / j ** j) if j > 0 else 1.0


def min_systems(confidence: float = 0.95) -> int:
    """The fewest systems whose resamples hold two distinct systems or fewer less often than one tail's share."""
    j = 3
    while _few_distinct(j) >= (1 - confidence) / 2:
        j += 1
    return j


def system_interval(paired: PairedScores, statistic: str, item_weights: np.ndarray, replicates: np.ndarray,
                    confidence: float = 0.95) -> tuple[float, float]:
    """The system-level interval of `calibrate` and `select` (NaN bounds below `min_systems`: few_systems_note).

    What is estimated: the correlation between a system's judge mean and its human mean over the population of
    systems the study's are read as drawn from, each mean over the population of dialogues. The J observed means
    carry their dialogues' noise, which pulls r towards the correlation of that noise (attenuation); both intervals
    below are therefore stretched to cover an attenuation-corrected interval as well as their own.

    Pearson: Fisher's z interval atanh(r) +- z_{1-a/2} / sqrt(J - 3) (scipy.stats.pearsonr(...).confidence_interval),
    exact for systems drawn from a bivariate normal, stretched to cover the disattenuated one as well
    (`_disattenuated`): r_d plus Fisher's arms divided by the means' reliability (Hunter and Schmidt's correction of
    the bounds). Fisher's alone covered 0.32-0.87 at 6-16 systems x 30 dialogues with true means correlated 0.95
    and a judge whose signal is halved (0.82 with the judge's full signal at 16 systems); stretched to r_d with
    Fisher's arms unscaled 0.86-0.93; with the arms in z scaled by the delta method 0.96-0.99 but [-1, 1] wide at
    6-7 systems and correlation 0.95; as here 0.944-1.000 over the grid, 2-15% wider than Fisher's alone. The
    percentile bootstrap over systems and dialogues it replaces covered 0.920-0.938 at 6-10 systems and correlation
    0.5 (resamples of J systems under-spread r's skewed distribution). Where the means' spread is no larger than
    their noise there is nothing to correct to and Fisher's interval stands.

    Spearman and Kendall: the percentile bootstrap over dialogues and systems (`replicates`), stretched to cover
    itself shifted by the attenuation that resampling dialogues (`item_weights`) adds once more (r minus the mean
    of those resamples) and the Pearson interval above mapped to their scale as for normal systems (`NORMAL_LINK`).
    The percentile alone covered 0.905 for Spearman at 16 systems x 30 dialogues and correlation 0.95 (0.833 with
    Likert scores); with the shift 0.96 and 0.95, but 0.89-0.92 with a judge whose signal is halved, which the
    mapped Pearson interval covers. Fisher's z applied to ranks covered 0.77-0.96.

    Coverage and width for 6-16 systems, 30 and 100 dialogues, true means correlated 0.5-0.95, a judge scaled 0.5-1.5
    or scoring Likert with ties: tests/system_sim.py, benchmarks/trust_coverage_table.txt.

    The fixed-systems reading (these systems only, dialogues the one random unit) is not offered: noisy system
    means attenuate r by more than its spread, and no interval measured held (percentile 0.18-0.95 for Pearson
    and 0.51-0.98 for Spearman at 6-16 systems x 30-100 dialogues; basic, BC, BCa from the dialogue jackknife,
    a shifted percentile and a bootstrap of the disattenuated Pearson 0.58-0.97)."""
    if few_systems_note(int(paired.mask.any(axis=0).sum()), confidence):
        return float("nan"), float("nan")
    pearson = _pearson_interval(paired, item_weights, confidence)
    if statistic == "pearson":
        return pearson
    low, high = percentile_interval(replicates, confidence)
    shift = float(level_statistic(paired, "system", statistic)) - np.nanmean(
        level_statistic(paired, "system", statistic, item_weights))
    bounds = [low, high, low + shift, high + shift, *NORMAL_LINK[statistic](np.array(pearson))]
    return float(max(-1.0, np.nanmin(bounds))), float(min(1.0, np.nanmax(bounds)))


# Spearman's and Kendall's correlations of a bivariate normal with Pearson correlation r (Pearson 1907; Kendall 1948).
NORMAL_LINK = {"spearman": lambda r: 6 / np.pi * np.arcsin(r / 2), "kendall": lambda r: 2 / np.pi * np.arcsin(r)}


def _pearson_interval(paired: PairedScores, item_weights: np.ndarray, confidence: float) -> tuple[float, float]:
    """Fisher's z interval over the systems' means, stretched to the disattenuated r's (system_interval)."""
    judge, human, count = system_means(paired)
    judge, human = judge[count > 0], human[count > 0]
    if np.ptp(judge) == 0 or np.ptp(human) == 0:
        return float("nan"), float("nan")
    fisher = scipy_stats.pearsonr(judge, human).confidence_interval(confidence)
    corrected, reliability = _disattenuated(paired, item_weights)
    if np.isnan(corrected):
        return float(fisher.low), float(fisher.high)
    # Disattenuating divides r by the reliability: so are the arms of its interval (Hunter & Schmidt's correction of
    # the bounds), around the disattenuated r as the noise's own covariance moves it.
    arms = (np.array([fisher.low, fisher.high]) - np.corrcoef(judge, human)[0, 1]) / reliability
    stretched = np.clip(corrected + arms, -1.0, 1.0)
    return float(min(fisher.low, stretched[0])), float(max(fisher.high, stretched[1]))


def _disattenuated(paired: PairedScores, item_weights: np.ndarray) -> tuple[float, float]:
    """Pearson r of the systems' true means, and the reliability of the observed ones (the geometric mean of true
    over observed variance): the between-system covariance of the observed means less the covariance their dialogue
    noise adds, measured by resampling dialogues (a resample's means differ from the observed ones by that noise);
    both centred over systems, so a dialogue's shared difficulty cancels. NaN where a corrected variance is not
    positive (the means' spread is no larger than their noise)."""
    judge, human, count = system_means(paired)
    kept = count > 0
    observed = np.stack([judge[kept], human[kept]])  # (2, J)
    boot_judge, boot_human, _ = system_means(paired, item_weights)
    resampled = np.stack([boot_judge[:, kept], boot_human[:, kept]], axis=1)  # (B, 2, J)
    resampled = resampled[~np.isnan(resampled).any(axis=(1, 2))]  # a resample that missed a system
    if len(resampled) < 2:
        return float("nan"), float("nan")
    between = np.cov(observed)  # over systems
    noise = resampled - resampled.mean(axis=0)
    noise -= noise.mean(axis=2, keepdims=True)
    corrected = between - np.einsum("bkj,blj->kl", noise, noise) / (len(resampled) * (observed.shape[1] - 1))
    if corrected[0, 0] <= 0 or corrected[1, 1] <= 0:
        return float("nan"), float("nan")
    true_variances = corrected[0, 0] * corrected[1, 1]
    return (float(np.clip(corrected[0, 1] / np.sqrt(true_variances), -1.0, 1.0)),
            float(np.sqrt(true_variances / (between[0, 0] * between[1, 1]))))


def bootstrap_ci(paired: PairedScores, level: str, statistic: str, n_resamples: int = 1000,
                 seed: int | None = 0, confidence: float = 0.95) -> tuple[float, float]:
    """The interval `correlations` prints at one level: percentile bootstrap resampling items (expanded for the
    summary level's mean); at system level `system_interval`. Reproducible by seed."""
    item_weights, system_weights = bootstrap_weights(paired, n_resamples, seed)
    per_item = per_item_correlations(paired, statistic)
    replicates = bootstrap_replicates(paired, level, statistic, item_weights, system_weights, per_item)
    if level == "system":
        return system_interval(paired, statistic, item_weights, replicates, confidence)
    return percentile_interval(replicates, confidence, summary_units(level, per_item))


_SCIPY = {
    "pearson": lambda x, y: scipy_stats.pearsonr(x, y).pvalue,
    "spearman": lambda x, y: scipy_stats.spearmanr(x, y).pvalue,
    "kendall": lambda x, y: scipy_stats.kendalltau(x, y, variant="b").pvalue,
}


def _p_value(statistic, x, y):
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(_SCIPY[statistic](x, y))


def correlations(pairs: pd.DataFrame, criteria=None, levels=LEVELS, statistics=STATISTIC_NAMES,
                 n_resamples: int = 1000, seed: int | None = 0, confidence: float = 0.95) -> pd.DataFrame:
    """One row per (criterion, level, statistic): value, bootstrap CI, p-value and the counts behind it.

    n_used is systems (system level), items with a defined correlation (summary) or pairs (item);
    n_skipped is systems without data, items skipped as constant, or 0. The summary level has no p-value
    (it is an average of correlations).
    """
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        paired = PairedScores.from_pairs(pairs, criterion)
        if paired.mask.sum() == 0:
            continue
        weights = bootstrap_weights(paired, n_resamples, seed) if n_resamples else None
        for statistic in statistics:
            per_item = per_item_correlations(paired, statistic)
            for level in levels:
                value = float(level_statistic(paired, level, statistic, per_item=per_item))
                if level == "system":
                    judge, human, count = system_means(paired)
                    p_value = _p_value(statistic, judge, human)
                    n_used, n_skipped = int((count > 0).sum()), int((count == 0).sum())
                elif level == "summary":
                    p_value = float("nan")
                    n_used = int((~np.isnan(per_item)).sum())
                    n_skipped = int(paired.mask.any(axis=1).sum()) - n_used
                else:
                    p_value = _p_value(statistic, paired.judge[paired.mask], paired.human[paired.mask])
                    n_used, n_skipped = int(paired.mask.sum()), 0
                low = high = float("nan")
                if weights is not None:
                    replicates = bootstrap_replicates(paired, level, statistic, *weights, per_item=per_item)
                    low, high = (system_interval(paired, statistic, weights[0], replicates, confidence)
                                 if level == "system"
                                 else percentile_interval(replicates, confidence, summary_units(level, per_item)))
                rows.append({"criterion": criterion, "level": level, "statistic": statistic, "value": value,
                             "ci_low": low, "ci_high": high, "p_value": p_value, "n_used": n_used,
                             "n_skipped": n_skipped, "n_items": len(paired.items),
                             "n_systems": len(paired.systems)})
    return pd.DataFrame(rows)
