"""The human ceiling: what one annotator achieves against the others, read next to the judge."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..agreement import ALPHA_LEVELS, krippendorff_alpha, score_agreement
from ..correlation import LEVELS, STATISTIC_NAMES, PairedScores, level_statistic
from ..humans import KEY

AGREEMENT_STATISTICS = ("kappa_quadratic", "exact", "within_1")


def _statistics(pairs: pd.DataFrame, criterion: str, levels, statistics) -> list[tuple[str, str, float]]:
    paired = PairedScores.from_pairs(pairs, criterion)
    out = [(level, statistic, float(level_statistic(paired, level, statistic)))
           for statistic in statistics for level in levels]
    agreement = score_agreement(pairs["judge"], pairs["human"])
    out += [("item", name, agreement[name]) for name in AGREEMENT_STATISTICS]
    return out


def leave_one_out_pairs(labels: pd.DataFrame, criterion: str, annotator: str) -> pd.DataFrame:
    """One annotator's scores (as "judge") against the mean of the other annotators (as "human")."""
    part = labels[(labels["criterion"] == criterion) & labels["score"].notna()]
    own = part[part["annotator"] == annotator].set_index(KEY)["score"].rename("judge")
    others = part[part["annotator"] != annotator].groupby(KEY)["score"].mean().rename("human")
    return pd.concat([own, others], axis=1, join="inner").reset_index()


def matched_judge_pairs(loo: pd.DataFrame, judge: pd.Series) -> pd.DataFrame:
    """The judge (`judge`: its scores indexed by KEY) against the same reference `leave_one_out_pairs` (`loo`) gives
    the annotator: the mean of the others, on the summaries that annotator labelled. Against the mean of all
    annotators the judge would face a less noisy reference than any annotator does, and its fraction of the ceiling
    would be flattered."""
    return loo.drop(columns="judge").join(judge, on=KEY, how="inner")


def human_ceiling(labels: pd.DataFrame, pairs: pd.DataFrame, criteria=None, levels=LEVELS,
                  statistics=STATISTIC_NAMES) -> pd.DataFrame:
    """Judge vs the mean of all annotators, next to each annotator vs the mean of the others.

    `labels` are the raw human labels (the ceiling is computed without noise cleaning: cleaning drops
    exactly the annotator who disagrees, which would inflate the ceiling); `pairs` come from align() and
    should use the raw mean too. Returns one row per (criterion, level, statistic) with judge (against the mean
    of all), ceiling (mean over annotators), min/max over annotators, judge_matched (the judge against each
    annotator's reference, the mean of the others on that annotator's summaries, averaged like the ceiling) and
    fraction_of_ceiling = judge_matched / ceiling: like with like.
    """
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        annotators = sorted(labels.loc[labels["criterion"] == criterion, "annotator"].unique())
        judge_scores = pairs.loc[pairs["criterion"] == criterion].set_index(KEY)["judge"]
        per_annotator, matched = {}, {}
        for annotator in annotators:
            loo = leave_one_out_pairs(labels, criterion, annotator)
            if len(loo) >= 2:
                per_annotator[annotator] = dict(((lv, st), v) for lv, st, v in
                                                _statistics(loo.assign(criterion=criterion), criterion,
                                                            levels, statistics))
                same = matched_judge_pairs(loo, judge_scores)
                matched[annotator] = (dict(((lv, st), v) for lv, st, v in
                                           _statistics(same.assign(criterion=criterion), criterion, levels,
                                                       statistics)) if len(same) >= 2 else {})
        judge_part = pairs[pairs["criterion"] == criterion]
        if judge_part.empty:
            continue
        for level, statistic, judge_value in _statistics(judge_part, criterion, levels, statistics):
            values = np.array([v[(level, statistic)] for v in per_annotator.values()], dtype=float)
            judged = np.array([matched[a].get((level, statistic), np.nan) for a in per_annotator], dtype=float)
            both = ~np.isnan(values) & ~np.isnan(judged)  # the same annotators on both sides of the fraction
            defined = values[~np.isnan(values)]
            ceiling = float(defined.mean()) if defined.size else float("nan")
            judge_matched = float(judged[both].mean()) if both.any() else float("nan")
            like = float(values[both].mean()) if both.any() else float("nan")
            rows.append({
                "criterion": criterion, "level": level, "statistic": statistic, "judge": judge_value,
                "ceiling": ceiling,
                "ceiling_min": float(defined.min()) if defined.size else float("nan"),
                "ceiling_max": float(defined.max()) if defined.size else float("nan"),
                "judge_matched": judge_matched,
                "fraction_of_ceiling": judge_matched / like if like and not np.isnan(like) else np.nan,
                "n_annotators": int(defined.size),
                **{f"annotator:{name}": v[(level, statistic)] for name, v in per_annotator.items()},
            })
    return pd.DataFrame(rows)


def alpha_with_judge(labels: pd.DataFrame, pairs: pd.DataFrame, criteria=None, levels=ALPHA_LEVELS,
                     scales: dict[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """Krippendorff's alpha of the humans, and of the humans with the judge added as one more rater.

    `scales` (criterion -> (low, high), e.g. the rubric's) says which judge scores are on the humans' scale;
    by default the range the humans used.
    """
    scales = scales or {}
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        judge = pairs.loc[pairs["criterion"] == criterion, ["item_id", "system", "judge"]].rename(
            columns={"judge": "score"})
        units = labels[(labels["criterion"] == criterion) & labels["score"].notna()]
        for level in levels:
            rows.append({
                "criterion": criterion, "level": level,
                "alpha_humans": krippendorff_alpha(units, criterion, level),
                "alpha_humans_plus_judge": krippendorff_alpha(units, criterion, level, extra_rater=judge,
                                                              scale=scales.get(criterion)),
                "n_units": int(units.groupby(["item_id", "system"]).ngroups),
                "n_annotators": int(units["annotator"].nunique()),
            })
    return pd.DataFrame(rows)
