"""Verdicts, agreement and confidence for `judge escalate`: what each judge's row says, how sure it is (the signal
its file records), and whether it agrees with the humans.

Agreement per scale: a Likert verdict agrees when it lies within `tolerance` points of the human mean; a categorical
verdict when it is the human majority label (on a tie among annotators, one of the tied labels); a pairwise verdict
(1 / 2 / 0 = tie) when it is the human majority verdict for the pair (or the one the human means give). Abstentions
and ties are verdicts, and can be wrong. A failed judgment is never accepted.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import CalibrationError

SIGNALS = ("probs", "samples", "order", "jury", "none")
SIGNAL_TEXT = {"probs": "probability of the verdict (probs)", "samples": "share of samples agreeing with the verdict",
               "order": "both orders give the same verdict (pairwise)", "jury": "share of the other judges agreeing",
               "none": "no confidence signal (all or nothing)"}


def _kind(frame: pd.DataFrame) -> str:
    if frame["system_1"].notna().any():
        return "pairwise"
    return "categorical" if frame["label"].notna().any() else "likert"


def _verdicts(frame: pd.DataFrame, kind: str) -> pd.Series:
    """The verdict of each judge row (None for a failure or N/A): a number (Likert) or a label."""
    usable = frame["status"].isin(["ok", "label", "abstain"])
    if kind == "likert":
        values = frame["score"].where(usable & frame["status"].eq("ok"))
        return values.astype(object).where(values.notna(), None)
    labels = frame["label"].where(frame["label"].notna(), frame["score"].map(
        lambda v: None if pd.isna(v) else f"{v:g}"))
    return labels.where(usable, None)


def _same(a, b, kind: str, tolerance: float) -> bool:
    if a is None or b is None:
        return False
    if kind == "likert":
        return abs(float(a) - float(b)) <= tolerance + 1e-9
    return str(a) == str(b)


def _confidence(row, verdict, kind: str, signal: str, tolerance: float, jury: list) -> float:
    if verdict is None:
        return np.nan
    if signal == "none":
        return 1.0
    if signal == "probs":
        probs = row.probs if isinstance(row.probs, dict) else None
        if not probs:
            return 0.0
        if kind == "likert":
            return float(sum(p for k, p in probs.items() if _number(k) is not None
                             and abs(_number(k) - float(verdict)) <= tolerance + 1e-9))
        return float(probs.get(str(verdict), 0.0))
    if signal == "samples":
        samples = row.samples if isinstance(row.samples, (list, tuple)) else []
        if len(samples) < 2:
            return 0.0
        return float(np.mean([_same(s if kind == "likert" else str(s), verdict, kind, tolerance) for s in samples]))
    if signal == "order":
        forward, swapped = getattr(row, "forward", None), getattr(row, "swapped", None)
        if forward is None or swapped is None or pd.isna(forward) or pd.isna(swapped):
            return 0.0
        return 1.0 if forward == swapped else 0.0
    if signal == "jury":
        others = [v for v in jury if v is not None]
        return float(np.mean([_same(v, verdict, kind, tolerance) for v in others])) if others else 0.0
    raise CalibrationError(f"--signal must be one of {', '.join(SIGNALS)}, got {signal!r}")


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def available_signals(frame: pd.DataFrame, kind: str, judges: int) -> list[str]:
    """The signals this judge's file records for most of its verdicts, best first (the choice never looks at labels)."""
    verdicts = frame[frame["status"].isin(["ok", "label", "abstain"])]
    if verdicts.empty:
        return ["none"]
    found = []
    if "probs" in verdicts and verdicts["probs"].map(lambda p: isinstance(p, dict) and bool(p)).mean() >= 0.5:
        found.append("probs")
    if "samples" in verdicts and verdicts["samples"].map(
            lambda s: isinstance(s, (list, tuple)) and len(s) >= 2).mean() >= 0.5 and kind != "pairwise":
        found.append("samples")
    if kind == "pairwise" and "forward" in verdicts and verdicts["forward"].notna().mean() >= 0.5 \
            and verdicts["swapped"].notna().mean() >= 0.5:
        found.append("order")
    if judges >= 2:
        found.append("jury")
    return found + ["none"]


# -- the human side ------------------------------------------------------------------------------------------------


def _modal(values: pd.Series) -> frozenset:
    counts = values.value_counts()
    return frozenset(counts.index[counts == counts.max()]) if len(counts) else frozenset()


def human_verdicts(labels: pd.DataFrame, criterion: str, kind: str, cells: pd.DataFrame) -> pd.Series:
    """The human side of each calibration cell of `cells` (item_id, system[, system_1, system_2]): the mean (Likert)
    or the set of modal labels (categorical, pairwise); None where the humans give nothing usable."""
    part = labels[labels["criterion"] == criterion]
    key = list(zip(cells["item_id"], cells["system"]))
    if kind == "likert":
        means = part[part["score"].notna()].groupby(["item_id", "system"])["score"].mean()
        return pd.Series([means.get(k) for k in key], index=cells.index, dtype=object)
    text = part["label"].where(part["label"].notna(), part["score"].map(lambda v: None if pd.isna(v) else f"{v:g}"))
    voting = part.assign(text=text)[text.notna()]  # an annotator's abstention is a label a verdict can match
    modal = voting.groupby(["item_id", "system"])["text"].agg(_modal)
    out = [modal.get(k) for k in key]
    if kind == "pairwise":
        means = part[part["score"].notna() & part["label"].isna()].groupby(["item_id", "system"])["score"].mean()
        for i, row in enumerate(cells.itertuples(index=False)):
            if out[i] is None and (row.item_id, row.system_1) in means.index \
                    and (row.item_id, row.system_2) in means.index:
                a, b = means[(row.item_id, row.system_1)], means[(row.item_id, row.system_2)]
                out[i] = frozenset({"1" if a > b else "2" if b > a else "0"})
    return pd.Series(out, index=cells.index, dtype=object)


def _agrees(verdict, human, kind: str, tolerance: float) -> bool:
    if verdict is None or human is None:
        return False
    if kind == "likert":
        return _same(verdict, human, kind, tolerance)
    return str(verdict) in human

