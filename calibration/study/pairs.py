"""The pairwise data: each judged pair's judge prediction (the mean of its verdicts coded 1 / 0 / 1/2) and human
vote, per dialogue, read from `judge compare`'s judgments and the imported labels (the coding is in
calibration.study.pairwise's docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import CalibrationError

VERDICT = {"1": 1.0, "2": 0.0, "0": 0.5}


# A strength this far from the baseline (in log odds) means the fit ran away: a system that won or lost every pair.
DIVERGED = 25.0


@dataclass
class Pairs:
    """One criterion's judged pairs: systems by index, the dialogue of each pair, judge prediction f and human vote
    h (NaN where unlabelled), both as P(first system wins)."""

    criterion: str
    systems: list[str]
    first: np.ndarray
    second: np.ndarray
    dialogue: np.ndarray  # index into `dialogues`
    dialogues: np.ndarray
    judge: np.ndarray
    human: np.ndarray
    n_failed: int = 0

    @property
    def labelled(self) -> np.ndarray:
        return ~np.isnan(self.human)


def _verdict(value) -> float:
    return VERDICT.get(str(value).strip(), math.nan) if value is not None else math.nan


def judge_predictions(frame: pd.DataFrame) -> tuple[np.ndarray, int]:
    """P(system_1 wins) per judged pair: the mean of the two orders' verdicts when recorded, else the verdict; 1/2
    for a failed or abstaining judgment (counted)."""
    forward = frame["forward"].map(_verdict) if "forward" in frame else pd.Series(np.nan, index=frame.index)
    swapped = frame["swapped"].map(_verdict) if "swapped" in frame else pd.Series(np.nan, index=frame.index)
    single = frame["label"].map(_verdict)
    if "score" in frame and frame["label"].isna().all():  # a CSV of pair scores: the score is P(system_1 wins)
        single = frame["score"].astype(float)
    both = (forward + swapped) / 2.0
    value = both.where(both.notna(), single).to_numpy(float)
    failed = np.isnan(value)
    return np.where(failed, 0.5, value), int(failed.sum())


def human_votes(labels: pd.DataFrame, pairs: pd.DataFrame, criterion: str, where: str) -> pd.Series:
    """Mean human vote per judged pair (index: position in `pairs`), as P(system_1 wins). Every label must be a
    verdict 1, 2 or 0 on a judged pair of this criterion; one given in the reverse order is turned round."""
    from ..io import label_at

    part = labels[(labels["criterion"] == criterion) & ~labels.get("na", pd.Series(False, index=labels.index))]
    if part.empty:
        return pd.Series(dtype=float)
    text = part["label"].where(part["label"].notna(), part["score"].map(
        lambda v: "" if pd.isna(v) else (f"{v:g}" if isinstance(v, float) else str(v)))).astype(str).str.strip()
    votes = text.map(VERDICT)
    bad = votes.isna()
    if bad.any():
        row = part[bad].iloc[0]
        raise CalibrationError(f"{label_at(part, row, where)}: {text[bad].iloc[0]!r} is not a pairwise verdict "
                               f"of criterion {criterion!r}: give 1 (the first system of the pair better), 2 (the "
                               f"second) or 0 (a tie), in the judgments' order ({int(bad.sum())} label(s) like it)")
    index = {(i, s): k for k, (i, s) in enumerate(zip(pairs["item_id"], pairs["system"]))}
    reverse = {(i, f"{b}|{a}"): k for k, (i, a, b) in enumerate(zip(pairs["item_id"], pairs["system_1"],
                                                                      pairs["system_2"]))}
    keys = list(zip(part["item_id"], part["system"]))
    position = [index.get(key, reverse.get(key, -1)) for key in keys]
    flipped = np.array([key not in index and key in reverse for key in keys])
    missing = np.array(position) < 0
    if missing.any():
        row = part[missing].iloc[0]
        if "|" not in str(row["system"]):
            message = (f"system {row['system']!r} is not a pair: pairwise judgments take labels on pairs, system "
                       "'A|B' as `judge import` writes them")
        else:
            message = f"pair {row['system']!r} of dialogue {row['item_id']!r} was not judged on {criterion!r}"
        raise CalibrationError(f"{label_at(part, row, where)}: {message} ({int(missing.sum())} label(s) like it)")
    values = np.where(flipped, 1.0 - votes.to_numpy(float), votes.to_numpy(float))
    return pd.Series(values).groupby(np.array(position)).mean()


def read_pairs(judge: pd.DataFrame, labels: pd.DataFrame, criterion: str, where: str) -> Pairs:
    """The Pairs of one criterion from the judgments table and the labels (rows with system_1 / system_2)."""
    pairs = judge[(judge["criterion"] == criterion) & judge["system_1"].notna() & (judge["status"] != "na")]
    pairs = pairs.reset_index(drop=True)
    f, failed = judge_predictions(pairs)
    off = (f < 0) | (f > 1)
    if off.any():
        row = pairs[off].iloc[0]
        raise CalibrationError(f"line {row['line']}: pair {row['system']!r} of dialogue {row['item_id']!r} has score "
                               f"{f[off][0]:g}: a pair's score is the probability that its first system wins, 0 to 1 "
                               f"(or give verdicts 1, 2, 0 as `judge compare` writes them)")
    votes = human_votes(labels, pairs, criterion, where)
    h = np.full(len(pairs), np.nan)
    h[votes.index.to_numpy(int)] = votes.to_numpy(float)
    systems = sorted(set(pairs["system_1"]) | set(pairs["system_2"]))
    number = {s: k for k, s in enumerate(systems)}
    dialogues, dialogue = np.unique(pairs["item_id"].astype(str).to_numpy(), return_inverse=True)
    first = pairs["system_1"].map(number).to_numpy(int)
    second = pairs["system_2"].map(number).to_numpy(int)
    same = first == second
    keep = ~same
    return Pairs(criterion, systems, first[keep], second[keep], dialogue[keep], dialogues, f[keep], h[keep], failed)


def _effective(n: int, ratio: float) -> float:
    """Human labels alone that would give the same width: n / width_ratio^2."""
    return float(n / ratio ** 2) if np.isfinite(ratio) and ratio > 0 else math.nan
