"""Joining judge scores and human aggregates on (item, system, criterion), with coverage counts."""

from __future__ import annotations

import pandas as pd

from .errors import CalibrationError
from .humans import KEY

COVERAGE_COLUMNS = ["criterion", "pairs_used", "judge_na", "judge_failed", "judge_abstained", "judge_label",
                    "human_missing", "judge_missing"]


def expand_all_criteria(judge: pd.DataFrame, criteria) -> pd.DataFrame:
    """A score given for criterion "*" (one metric column for every criterion) is copied to each criterion."""
    wildcard = judge["criterion"] == "*"
    if not wildcard.any():
        return judge
    copies = [judge[wildcard].assign(criterion=c) for c in criteria]
    return pd.concat([judge[~wildcard], *copies], ignore_index=True)


def align(judge: pd.DataFrame, human: pd.DataFrame, criteria=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pairs of (judge score, human aggregate) and the coverage of each criterion.

    `judge` comes from load_judge_scores, `human` from aggregate_humans. Returns
    (pairs: item_id, system, criterion, judge, human, n_annotators; coverage: one row per criterion with
    pairs_used, judge_na, judge_failed, judge_abstained ("I don't know"), judge_label (categorical/pairwise
    rows, analysed apart), human_missing (judge score without a human one), judge_missing (the reverse)).
    """
    if criteria is None:
        criteria = sorted(set(human["criterion"]) | (set(judge["criterion"]) - {"*"}))
    judge = expand_all_criteria(judge, criteria)
    judge = judge[judge["criterion"].isin(criteria)]
    human = human[human["criterion"].isin(criteria)]
    merged = judge.merge(human, on=KEY, how="outer", indicator=True)
    has_human = merged["_merge"] != "left_only"
    has_judge = merged["_merge"] != "right_only"
    status = merged["status"]
    used = has_human & (status == "ok")
    flags = pd.DataFrame(
        {
            "criterion": merged["criterion"],
            "pairs_used": used,
            "judge_na": status == "na",
            "judge_failed": status == "error",
            "judge_abstained": status == "abstain",
            "judge_label": status == "label",
            "human_missing": has_judge & (status == "ok") & ~has_human,
            "judge_missing": has_human & ~has_judge,
        }
    )
    coverage = flags.groupby("criterion").sum().reindex(criteria, fill_value=0).reset_index()
    coverage = coverage.rename(columns={"index": "criterion"})[COVERAGE_COLUMNS]
    pairs = merged.loc[used, KEY + ["score", "human", "n_annotators"]].rename(columns={"score": "judge"})
    return pairs.reset_index(drop=True), coverage


def _example(values: set, what: str) -> str:
    return f"{what} {sorted(values)[0]!r} ({len(values)} in all)"


def check_overlap(judge: pd.DataFrame, labels: pd.DataFrame, judge_name: str = "the judge scores",
                  human_name: str = "the human labels") -> None:
    """Refuse two files that never meet on an item, or on an (item, system): an empty report helps nobody."""
    judge_items, human_items = set(judge["item_id"]), set(labels["item_id"])
    if not judge_items & human_items:
        raise CalibrationError(
            f"{judge_name} and {human_name} have no item id in common: {_example(judge_items, 'e.g.')} in "
            f"{judge_name}, {_example(human_items, 'e.g.')} in {human_name}")
    pairs = judge[judge["system_1"].notna()]
    units = set(zip(judge["item_id"], judge["system"]))
    units |= set(zip(pairs["item_id"], pairs["system_1"])) | set(zip(pairs["item_id"], pairs["system_2"]))
    human_units = set(zip(labels["item_id"], labels["system"]))
    if not units & human_units:
        judge_systems = {s for _, s in units}
        human_systems = set(labels["system"])
        raise CalibrationError(
            f"{judge_name} and {human_name} share item ids but no (item, system): "
            f"{_example(judge_systems, 'system')} in {judge_name}, {_example(human_systems, 'system')} in "
            f"{human_name}")
