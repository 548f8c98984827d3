"""Self-preference findings of `judge audit`: how much more the judge rates its own systems than the others, beyond
what their quality explains (Gain) or, pairwise, than humans do on the same pairs."""

from __future__ import annotations

from typing import Any

import numpy as np

from .dialogues import Dialogues, _excludes_zero
from .gain import Gain
from .position import _pairs, _with_human

SELF_COLUMNS = ["criterion", "self_systems", "n_dialogues", "judge_gap", "judge_gap_ci_low", "judge_gap_ci_high",
                "human_gap", "human_gap_ci_low", "human_gap_ci_high", "self_preference", "ci_low", "ci_high",
                "excess_dialogues", "effect", "note"]
NO_LABELS_NOTE = ("without human labels the gap cannot separate the judge's bias from the systems really being "
                  "better or worse")


def self_preference(judge, human, boot: Dialogues, criterion: str, self_systems: list[str]) -> dict:
    """How much more the judge rates its own systems than the others, beyond what humans do, paired by dialogue.

    Per dialogue: mean(own) - mean(others) of the judge's scores, of the humans', and of (judge - human); the
    estimate is the mean of that per-dialogue difference over dialogues having both kinds of system.
    """
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")][["item_id", "system", "score"]]
    if human is not None:
        columns = ["item_id", "system", "human", "human_a", "human_b"]
        part = part.merge(human[human["criterion"] == criterion].reindex(columns=columns), on=["item_id", "system"])
    row: dict[str, Any] = {"criterion": criterion, "self_systems": ",".join(self_systems)}
    mine = part["system"].isin(self_systems).to_numpy()
    index = boot.index(part["item_id"].to_numpy())
    n_self, n_other = boot.sums(index[mine], np.ones(mine.sum())), boot.sums(index[~mine], np.ones((~mine).sum()))
    valid = (n_self > 0) & (n_other > 0)
    row["n_dialogues"] = int(valid.sum())
    if not valid.any():
        row["note"] = "no dialogue has both an own and another system"
        return row

    def gap(values):
        own = boot.sums(index[mine], values[mine]) / np.maximum(n_self, 1)
        rest = boot.sums(index[~mine], values[~mine]) / np.maximum(n_other, 1)
        per_dialogue = np.where(valid, own - rest, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            replicates = (boot.counts @ per_dialogue) / (boot.counts @ valid.astype(float))
        return (float(per_dialogue.sum() / valid.sum()), *boot.interval(replicates))

    score = part["score"].to_numpy(float)
    row["judge_gap"], row["judge_gap_ci_low"], row["judge_gap_ci_high"] = gap(score)
    if human is None:
        row["note"] = NO_LABELS_NOTE
        return row
    h = part["human"].to_numpy(float)
    row["human_gap"], row["human_gap_ci_low"], row["human_gap_ci_high"] = gap(h)
    # The judge's own-system effect beyond quality, on the human scale (Gain): judge_gap - human_gap would call a
    # judge on a compressed scale biased whenever its own systems really are better or worse.
    gain = Gain(boot, index, score, part["human_a"].to_numpy(float), part["human_b"].to_numpy(float),
                mine.astype(float))
    row["self_preference"], row["ci_low"], row["ci_high"], row["note"] = gain.excess("being an own system")
    row["excess_dialogues"] = gain.dialogues
    row["effect"] = _excludes_zero(row["ci_low"], row["ci_high"])
    return row


def pairwise_self_preference(judge, human, boot: Dialogues, criterion: str, self_systems: list[str]) -> dict:
    """Pairs of an own system against another: the judge's win share of the own one (a tie counts half), minus a
    half; with labels, minus the humans' win share on the same pairs (paired), in shares of pairs."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    own_first = pairs["system_1"].isin(self_systems).to_numpy()
    own_second = pairs["system_2"].isin(self_systems).to_numpy()
    label = pairs["label"].astype(str).to_numpy()
    usable = (own_first != own_second) & np.isin(label, ["0", "1", "2"])
    first_wins = np.where(label == "1", 1.0, np.where(label == "2", 0.0, 0.5))
    judge_win = np.where(own_first, first_wins, 1.0 - first_wins)
    h1, h2 = pairs["human_1"].to_numpy(float), pairs["human_2"].to_numpy(float)
    human_first = np.where(h1 > h2, 1.0, np.where(h1 < h2, 0.0, 0.5))
    human_win = np.where(own_first, human_first, 1.0 - human_first)
    index = boot.index(pairs["item_id"].to_numpy())
    row = {"criterion": criterion, "self_systems": ",".join(self_systems),
           "n_dialogues": pairs.loc[usable, "item_id"].nunique()}
    if not usable.any():
        row["note"] = "no pair of an own system against another"
        return row
    row["judge_gap"], row["judge_gap_ci_low"], row["judge_gap_ci_high"] = boot.ratio(
        index, np.where(usable, judge_win - 0.5, 0.0), usable.astype(float))
    labelled = usable & np.isfinite(h1) & np.isfinite(h2)
    if human is None or not labelled.any():
        row["note"] = NO_LABELS_NOTE + " (gaps are win shares minus a half)"
        return row
    row["human_gap"], row["human_gap_ci_low"], row["human_gap_ci_high"] = boot.ratio(
        index, np.where(labelled, human_win - 0.5, 0.0), labelled.astype(float))
    row["self_preference"], row["ci_low"], row["ci_high"] = boot.ratio(
        index, np.where(labelled, judge_win - human_win, 0.0), labelled.astype(float))
    row["effect"] = _excludes_zero(row["ci_low"], row["ci_high"])
    row["note"] = "gaps are win shares of the own systems minus a half, on pairs against other systems"
    return row
