"""The judge's re-run noise: the share of verdicts that change on a plain re-ask of the same prompt (samples of one
prompt, or a second run), a ratio of per-dialogue sums with its dialogue-bootstrap interval."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .dialogues import Dialogues

NOISE_COLUMNS = ["criterion", "source", "n", "changed_share", "ci_low", "ci_high", "mean_abs_change"]


def _sample_change(samples, both_orders: bool) -> float:
    """Share of pairs of plain re-asks (samples of one prompt) whose verdicts differ; NaN with fewer than two.

    A pair judged in both orders holds the forward samples, then the swapped ones: only samples of one order are
    re-asks of the same prompt."""
    if not isinstance(samples, (list, tuple)):
        return math.nan
    groups = [samples[:len(samples) // 2], samples[len(samples) // 2:]] if both_orders else [samples]
    differ = total = 0
    for group in groups:
        k = len(group)
        if k < 2:
            continue
        counts = pd.Series([str(v) for v in group]).value_counts().to_numpy()
        total += k * (k - 1)
        differ += k * (k - 1) - int((counts * (counts - 1)).sum())
    return differ / total if total else math.nan


def noise_floor(judge: pd.DataFrame, rerun: pd.DataFrame | None, boot: Dialogues, criteria) -> pd.DataFrame:
    """Per criterion, the share of verdicts that change on a plain re-ask of the same prompt."""
    rows = []
    for criterion in criteria:
        part = judge[(judge["criterion"] == criterion) & judge["status"].isin(["ok", "label"])]
        if rerun is not None:
            other = rerun[rerun["criterion"] == criterion]
            both = part.merge(other, on=["item_id", "system", "criterion"], suffixes=("", "_2"))
            both = both[both["status_2"].isin(["ok", "label"])]
            numeric = both["score"].notna() & both["score_2"].notna()
            changed = np.where(numeric, ~np.isclose(both["score"], both["score_2"]),
                               both["label"].astype(str) != both["label_2"].astype(str)).astype(float)
            source, frame = "rerun", both
            absolute = float((both["score"] - both["score_2"]).abs().mean()) if numeric.any() else math.nan
        else:
            both_orders = part["swapped"].notna().to_numpy()
            share = pd.Series([_sample_change(v, b) for v, b in zip(part["samples"], both_orders)], index=part.index)
            frame = part[share.notna()]
            changed, source = share[share.notna()].to_numpy(), "samples"
            absolute = math.nan
        if frame.empty:
            rows.append({"criterion": criterion, "source": "none", "n": 0})
            continue
        index = boot.index(frame["item_id"].to_numpy())
        value, low, high = boot.ratio(index, changed, np.ones(len(frame)))
        rows.append({"criterion": criterion, "source": source, "n": len(frame), "changed_share": value,
                     "ci_low": low, "ci_high": high, "mean_abs_change": absolute})
    return pd.DataFrame(rows, columns=NOISE_COLUMNS)
