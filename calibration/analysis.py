"""The whole calibration run as one function: what the CLI prints and what the report draws."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .agreement import agreement, label_agreement, pairwise_agreement
from .alignment import align
from .ceiling import alpha_with_judge, human_ceiling
from .compare import compare_judges
from .correlation import LEVELS, STATISTIC_NAMES, PairedScores, correlations
from .errors import CalibrationError
from .humans import aggregate_humans
from .maps import IsotonicCalibrationMap, cross_validate_maps, fit_maps
from .stats import percentile_interval, resample_counts


@dataclass
class CalibrationResults:
    criteria: list[str]
    cleaned: bool
    n_resamples: int
    seed: int | None
    pairs: pd.DataFrame
    coverage: pd.DataFrame
    correlations: pd.DataFrame
    agreement: pd.DataFrame
    ceiling: pd.DataFrame
    alpha: pd.DataFrame
    system_means: pd.DataFrame
    map_evaluation: pd.DataFrame = field(default_factory=pd.DataFrame)
    maps: dict[str, IsotonicCalibrationMap] = field(default_factory=dict)
    labels: list[dict] = field(default_factory=list)
    pairwise: list[dict] = field(default_factory=list)
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)


def system_means_with_ci(pairs: pd.DataFrame, n_resamples: int = 1000, seed: int | None = 0,
                         confidence: float = 0.95) -> pd.DataFrame:
    """Per-system mean of judge and human scores with bootstrap CIs over items (dialogues)."""
    rows = []
    for criterion in sorted(pairs["criterion"].unique()):
        paired = PairedScores.from_pairs(pairs, criterion)
        mask = paired.mask.astype(float)
        counts = (resample_counts(np.random.default_rng(seed), len(paired.items), n_resamples)
                  if n_resamples else np.ones((1, len(paired.items))))
        with np.errstate(invalid="ignore", divide="ignore"):
            denominator = counts @ mask
            replicates = {name: (counts @ np.where(paired.mask, values, 0.0)) / denominator
                          for name, values in (("judge", paired.judge), ("human", paired.human))}
        for j, system in enumerate(paired.systems):
            used = paired.mask[:, j]
            if not used.any():
                continue
            row = {"criterion": criterion, "system": system, "n": int(used.sum())}
            for name, values in (("judge", paired.judge), ("human", paired.human)):
                low, high = percentile_interval(replicates[name][:, j], confidence) if n_resamples else (np.nan,) * 2
                row.update({f"{name}_mean": float(values[used, j].mean()), f"{name}_low": low,
                            f"{name}_high": high})
            rows.append(row)
    return pd.DataFrame(rows)


def _is_pairwise(judge: pd.DataFrame) -> pd.Series:
    return judge["system"].str.contains("|", regex=False)


def analyse(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None, clean: bool = False,
            n_resamples: int = 1000, seed: int | None = 0, fit_map: bool = False,
            other_judge: pd.DataFrame | None = None, levels=LEVELS, statistics=STATISTIC_NAMES) -> CalibrationResults:
    human_criteria = sorted(labels["criterion"].unique())
    judge_criteria = set(judge["criterion"]) - {"*"}
    if criteria is None:
        criteria = [c for c in human_criteria if c in judge_criteria or "*" in set(judge["criterion"])]
    else:
        unknown = [c for c in criteria if c not in human_criteria]
        if unknown:
            raise CalibrationError(f"--criteria: no human labels for {', '.join(unknown)}; "
                                   f"the human file has {', '.join(human_criteria)}")
    if not criteria:
        raise CalibrationError("the judge scores and the human labels have no criterion in common "
                               f"(judge: {', '.join(sorted(judge_criteria)) or '-'}; human: {', '.join(human_criteria)})")
    pairwise_rows = _is_pairwise(judge)
    label_criteria = sorted(set(judge.loc[(judge["status"] == "label") & ~pairwise_rows, "criterion"]) & set(criteria))
    pairwise_criteria = sorted(set(judge.loc[pairwise_rows, "criterion"]) & set(criteria))
    scored = judge[~pairwise_rows]
    human = aggregate_humans(labels, clean=clean)
    pairs, coverage = align(scored, human, criteria)
    numeric = [c for c in criteria if (pairs["criterion"] == c).any()]
    if not numeric and not label_criteria and not pairwise_criteria:
        raise CalibrationError("no (item, system, criterion) has both a judge score and a human score: "
                               "check that the item ids and system names match between the two files")
    # The ceiling is read against the raw mean (see human_ceiling), whatever --clean says.
    raw_pairs = pairs if not clean else align(scored, aggregate_humans(labels), criteria)[0]
    results = CalibrationResults(
        criteria=list(criteria), cleaned=clean, n_resamples=n_resamples, seed=seed, pairs=pairs,
        coverage=coverage,
        correlations=correlations(pairs, numeric, levels, statistics, n_resamples, seed) if numeric else pd.DataFrame(),
        agreement=agreement(pairs, numeric),
        ceiling=human_ceiling(labels, raw_pairs, numeric, levels, statistics) if numeric else pd.DataFrame(),
        alpha=alpha_with_judge(labels, raw_pairs, numeric) if numeric else pd.DataFrame(),
        system_means=system_means_with_ci(pairs, n_resamples, seed) if numeric else pd.DataFrame(),
        labels=[label_agreement(judge[~pairwise_rows], labels, c) for c in label_criteria],
        pairwise=[pairwise_agreement(judge, labels, c) for c in pairwise_criteria],
    )
    if fit_map and numeric:
        results.maps = fit_maps(pairs, numeric)
        results.map_evaluation = cross_validate_maps(pairs, numeric)
    if other_judge is not None and numeric:
        results.comparison = compare_judges(scored, other_judge, human, numeric, levels, statistics,
                                            n_resamples, seed)
    return results
