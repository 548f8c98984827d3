"""Human labels: DialSummEval noise cleaning and the per-summary aggregate (mean over annotators)."""

from __future__ import annotations

import pandas as pd

KEY = ["item_id", "system", "criterion"]


def clean_noise(labels: pd.DataFrame) -> pd.DataFrame:
    """DialSummEval's noise removal (Gao & Wan 2022, section 4.2).

    In a triple of scores for one (item, system, criterion) where exactly two annotators agree and the third
    differs, the third is dropped. Triples with three different scores or full agreement, and cells with a
    number of annotators other than three, are kept as they are. Non-numeric labels are left untouched.
    """
    numeric = labels[labels["score"].notna()]
    grouped = numeric.groupby(KEY, sort=False)["score"]
    size = grouped.transform("size")
    distinct = grouped.transform("nunique")
    same_score = numeric.groupby(KEY + ["score"], sort=False)["score"].transform("size")
    noise = (size == 3) & (distinct == 2) & (same_score == 1)
    cleaned = labels.drop(index=numeric.index[noise.to_numpy()])
    cleaned.attrs["cleaned"] = True
    cleaned.attrs["dropped"] = int(noise.sum())
    return cleaned


def aggregate_humans(labels: pd.DataFrame, clean: bool = False) -> pd.DataFrame:
    """Human score of each summary: the mean over annotators of the numeric scores.

    Returns item_id, system, criterion, human, n_annotators; `attrs["cleaned"]` records whether the
    noise cleaning was applied before averaging.
    """
    if clean:
        labels = clean_noise(labels)
    numeric = labels[labels["score"].notna()]
    aggregate = (
        numeric.groupby(KEY, sort=False)["score"]
        .agg(human="mean", n_annotators="size")
        .reset_index()
    )
    aggregate.attrs["cleaned"] = bool(clean)
    return aggregate


def annotator_matrix(labels: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """One criterion as a units x annotators table (units = (item_id, system)), NaN where not rated."""
    part = labels[(labels["criterion"] == criterion) & labels["score"].notna()]
    return part.pivot_table(index=["item_id", "system"], columns="annotator", values="score", aggfunc="first")
