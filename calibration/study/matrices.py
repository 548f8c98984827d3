"""From tidy judge and label frames to one criterion's dialogue x system matrices (what the estimators take), and
the criteria to estimate; with more judges, the matrices of their cross-fitted combination (predictor.py)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..cells import chosen_criteria
from ..errors import CalibrationError


@dataclass
class StudyMatrices:
    """One criterion as dialogues x systems: judge scores (NaN = not a unit) and human scores (NaN = unlabelled)."""

    criterion: str
    items: np.ndarray
    systems: np.ndarray
    judge: np.ndarray
    human: np.ndarray
    judged: np.ndarray  # bool: the judge gave a number (before imputation)
    # A combined predictor's (gap, covariance) for predictor.fit_leverage (combined_matrices); None otherwise.
    fit: tuple[np.ndarray, np.ndarray] | None = None


def judge_matrices(judge: pd.DataFrame, criterion: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(items, systems, scores, judged) for one criterion of a load_judge_scores frame.

    A failed or abstaining judgment keeps its dialogue in the population with the system's mean judge score (a
    constant carries no information, so the estimator stays unbiased); a judgment that says N/A removes the
    dialogue from that system's population (the criterion does not apply).
    """
    part = judge[(judge["criterion"] == criterion) & (judge["status"] != "na")]
    table = part.pivot(index="item_id", columns="system", values="score").sort_index().sort_index(axis=1)
    scores = table.to_numpy(float)
    present = part.groupby(["item_id", "system"]).size().unstack().reindex_like(table).notna().to_numpy()
    judged = ~np.isnan(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a system with no number at all keeps NaN
        fill = np.nanmean(scores, axis=0)
    scores = np.where(judged, scores, np.where(present, fill[None, :], np.nan))
    return table.index.to_numpy(), table.columns.to_numpy(), scores, judged


def study_matrices(judge: pd.DataFrame, human: pd.DataFrame, criterion: str, random_items=None) -> StudyMatrices:
    """Judge and human matrices of one criterion; human scores only on `random_items` (None: all labelled)."""
    items, systems, scores, judged = judge_matrices(judge, criterion)
    part = human[human["criterion"] == criterion]
    if random_items is not None:
        part = part[part["item_id"].isin(random_items)]
    labels = part.pivot(index="item_id", columns="system", values="human").reindex(index=items, columns=systems)
    values = labels.to_numpy(float)
    values = np.where(np.isnan(scores), np.nan, values)  # a label on a dialogue the judge calls N/A is not used
    return StudyMatrices(criterion, items, systems, scores, values, judged)


def numeric_criteria(judge: pd.DataFrame, human: pd.DataFrame, criteria=None) -> list[str]:
    """The criteria to estimate: asked for, or shared by judge numbers and human numbers."""
    human_criteria = sorted(human["criterion"].unique())
    judge_criteria = sorted(set(judge.loc[judge["status"] == "ok", "criterion"]))
    if criteria is not None:
        chosen_criteria(criteria, human_criteria,
                        "--criteria: no human scores for {unknown}; the labels have {available}")
        missing = [c for c in criteria if c not in judge_criteria and "*" not in judge_criteria]
        if missing:
            raise CalibrationError(f"--criteria: no judge scores for {', '.join(missing)}; "
                                   f"the judgments have {', '.join(judge_criteria) or 'none'}")
        return list(criteria)
    shared = [c for c in human_criteria if c in judge_criteria or "*" in judge_criteria]
    if not shared:
        raise CalibrationError("the judge scores and the human labels have no numeric criterion in common "
                               f"(judge: {', '.join(judge_criteria) or '-'}; human: {', '.join(human_criteria)})")
    return shared


def predictor_features(matrices: StudyMatrices, judges: dict[str, pd.DataFrame]) -> np.ndarray:
    """(dialogues, systems, 1 + len(judges)) scores: the judge's, then each other judge's on the same cells
    (NaN where it has none: predictor.py gives such a cell its system's mean)."""
    layers = [matrices.judge]
    for frame in judges.values():
        part = frame[(frame["criterion"] == matrices.criterion) & (frame["status"] == "ok")]
        if "system_1" in part.columns:
            part = part[part["system_1"].isna()]
        table = part.pivot_table(index="item_id", columns="system", values="score", aggfunc="mean")
        layers.append(table.reindex(index=matrices.items, columns=matrices.systems).to_numpy(float))
    return np.stack(layers, axis=-1)


def combined_matrices(matrices: StudyMatrices, judges: dict[str, pd.DataFrame], contrasts: bool = False
                      ) -> StudyMatrices:
    """The matrices with the judge replaced by the cross-fitted combination of it and `judges`: fitted on the
    summaries' levels for the systems' means, on their departures from their dialogue's mean (`contrasts`) for
    the paired differences."""
    from dataclasses import replace

    from .predictor import cross_fitted_prediction

    units = ~np.isnan(matrices.judge)
    combined, fit = cross_fitted_prediction(predictor_features(matrices, judges), matrices.human, units,
                                            contrasts=contrasts, with_fit=True)
    return replace(matrices, judge=combined, fit=fit)


def targeted_summary(judge: pd.DataFrame, human: pd.DataFrame, criterion: str, targeted_items) -> pd.DataFrame:
    """Labels on the targeted dialogues: plain means beside the judge's, for reading only (not representative)."""
    matrices = study_matrices(judge, human, criterion, set(targeted_items))
    rows = []
    for j, system in enumerate(matrices.systems):
        labelled = ~np.isnan(matrices.human[:, j])
        if labelled.any():
            rows.append({"criterion": criterion, "system": system, "n_labelled": int(labelled.sum()),
                         "human_mean": float(matrices.human[labelled, j].mean()),
                         "judge_mean": float(matrices.judge[labelled, j].mean())})
    return pd.DataFrame(rows, columns=["criterion", "system", "n_labelled", "human_mean", "judge_mean"])
