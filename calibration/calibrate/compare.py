"""Comparing two judges (or a judge and a metric) on the same items: paired bootstrap of the difference."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..alignment import align
from ..correlation import (
    LEVELS,
    STATISTIC_NAMES,
    PairedScores,
    bootstrap_replicates,
    bootstrap_weights,
    level_statistic,
)
from ..humans import KEY
from ..stats import percentile_interval


def compare_judges(judge_a: pd.DataFrame, judge_b: pd.DataFrame, human: pd.DataFrame, criteria=None,
                   levels=LEVELS, statistics=STATISTIC_NAMES, n_resamples: int = 1000, seed: int | None = 0,
                   confidence: float = 0.95) -> pd.DataFrame:
    """Difference corr(A, human) - corr(B, human) on the pairs both judges scored, with a paired bootstrap.

    Both correlations are computed on the same resampled items (and systems) in every replicate, so the
    interval and the two-sided p-value (twice the smaller tail of the replicates around 0) reflect the
    pairing; with n_resamples=0 they are NaN. `judge_a` / `judge_b` come from load_judge_scores, `human` from
    aggregate_humans.
    """
    pairs_a, _ = align(judge_a, human, criteria)
    pairs_b, _ = align(judge_b, human, criteria)
    both = pairs_a.merge(pairs_b[KEY + ["judge"]], on=KEY, suffixes=("_a", "_b"))
    criteria = sorted(both["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        if not (both["criterion"] == criterion).any():
            continue
        paired_a = PairedScores.from_pairs(both, criterion, judge_column="judge_a")
        paired_b = PairedScores.from_pairs(both, criterion, judge_column="judge_b")
        weights = bootstrap_weights(paired_a, n_resamples, seed) if n_resamples else None
        for statistic in statistics:
            for level in levels:
                value_a = float(level_statistic(paired_a, level, statistic))
                value_b = float(level_statistic(paired_b, level, statistic))
                difference = np.array([]) if weights is None else (
                    bootstrap_replicates(paired_a, level, statistic, *weights)
                    - bootstrap_replicates(paired_b, level, statistic, *weights))
                defined = difference[~np.isnan(difference)]
                low, high = percentile_interval(difference, confidence)
                p_value = (min(1.0, 2 * min(np.mean(defined <= 0), np.mean(defined >= 0)))
                           if defined.size else float("nan"))
                rows.append({"criterion": criterion, "level": level, "statistic": statistic, "judge_a": value_a,
                             "judge_b": value_b, "difference": value_a - value_b, "ci_low": low, "ci_high": high,
                             "p_value": p_value, "n_pairs": int(paired_a.mask.sum())})
    return pd.DataFrame(rows)
