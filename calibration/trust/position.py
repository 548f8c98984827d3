"""Position findings of `judge audit`: the score's slope on the block letter a candidate was shown under, and in
pairwise mode the order flips and the first-shown candidate's wins, overall and by the humans' quality gap."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .dialogues import Dialogues, _centred, _excludes_zero

POSITION_COLUMNS = ["criterion", "mode", "stratum", "n", "flip_rate", "ci_low", "ci_high", "first_shown_wins",
                    "first_shown_ci_low", "first_shown_ci_high", "position_slope", "position_slope_ci_low",
                    "position_slope_ci_high", "effect"]
# Human quality gap strata for the pairwise position breakdown (absolute difference of mean human scores).
GAP_STRATA = ((0.0, 0.5, "human gap < 0.5"), (0.5, 1.5, "human gap 0.5-1.5"), (1.5, math.inf, "human gap >= 1.5"))


def _letter_index(letter) -> float:
    """Shown position of a block letter: A=0, B=1, ..., Z=25, AA=26 (judge.judging.block_letters)."""
    if not isinstance(letter, str) or not letter.isalpha() or not letter.isupper() or len(letter) > 2:
        return math.nan
    if len(letter) == 1:
        return float(ord(letter) - 65)
    return float((ord(letter[0]) - 64) * 26 + ord(letter[1]) - 65)


def _pairs(judge: pd.DataFrame, criterion: str) -> pd.DataFrame:
    part = judge[(judge["criterion"] == criterion) & judge["system_1"].notna()].copy()
    part["system_1"] = part["system_1"].astype(str)
    part["system_2"] = part["system_2"].astype(str)
    return part


def _with_human(pairs: pd.DataFrame, human, criterion) -> pd.DataFrame:
    if human is None:
        return pairs.assign(human_1=np.nan, human_2=np.nan)
    means = human[human["criterion"] == criterion].set_index(["item_id", "system"])["human"]
    pairs = pairs.copy()
    pairs["human_1"] = means.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
    pairs["human_2"] = means.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
    return pairs


def pairwise_position(judge, human, boot: Dialogues, criterion: str) -> list[dict]:
    """Order flips (both orders judged, mapped back to the input's order) and the first-shown candidate's wins."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    pairs = pairs[pairs["forward"].notna() & pairs["swapped"].notna()]
    if pairs.empty:
        return []
    forward, swapped = pairs["forward"].astype(str).to_numpy(), pairs["swapped"].astype(str).to_numpy()
    flip = (forward != swapped).astype(float)
    # In the swapped prompt the input's second candidate was shown first: "2" (read back) is a first-shown win.
    decided = (forward != "0").astype(float) + (swapped != "0").astype(float)
    first = (forward == "1").astype(float) + (swapped == "2").astype(float)
    gap = np.abs(pairs["human_1"].to_numpy(float) - pairs["human_2"].to_numpy(float))
    strata = [("all", np.ones(len(pairs), bool))]
    if np.isfinite(gap).any():
        strata += [(name, (gap >= low) & (gap < high)) for low, high, name in GAP_STRATA]
    index = boot.index(pairs["item_id"].to_numpy())
    rows = []
    for name, mask in strata:
        if not mask.any():
            continue
        row: dict[str, Any] = {"criterion": criterion, "mode": "pairwise", "stratum": name, "n": int(mask.sum())}
        row["flip_rate"], row["ci_low"], row["ci_high"] = boot.share(index, flip * mask, mask.astype(float))
        row["first_shown_wins"], row["first_shown_ci_low"], row["first_shown_ci_high"] = boot.share(
            index, first * mask, decided * mask)
        low, high = row["first_shown_ci_low"] - 0.5, row["first_shown_ci_high"] - 0.5
        row["effect"] = _excludes_zero(low, high)
        rows.append(row)
    return rows


def block_position(judge, boot: Dialogues, criterion: str) -> dict | None:
    """The score's slope on the letter a candidate was shown under (shuffled per dialogue, so identified)."""
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")]
    shown = part["position"].map(_letter_index)
    part, shown = part[shown.notna()], shown[shown.notna()].to_numpy(float)
    if part.empty:
        return None
    index = boot.index(part["item_id"].to_numpy())
    x = _centred(index, shown, len(boot.ids))
    row: dict[str, Any] = {"criterion": criterion, "mode": "block", "stratum": "all", "n": len(part)}
    row["position_slope"], row["position_slope_ci_low"], row["position_slope_ci_high"] = boot.ratio(
        index, x * part["score"].to_numpy(float), x * x)
    row["effect"] = _excludes_zero(row["position_slope_ci_low"], row["position_slope_ci_high"])
    return row
