"""Length findings of `judge audit`: the judge's, the humans' and the excess slope on length, length-controlled
system means, and the pairwise preference for the longer candidate.

Length is measured in words of the candidate, centred within its dialogue (only how much longer a summary is than
the dialogue's other summaries counts: a long dialogue has long summaries of every quality) and divided by the
pooled within-dialogue standard deviation of length, so a slope reads "points per typical length difference
between summaries of one dialogue"; that SD is reported in words beside it. The judge's slope and the humans' slope
are fitted on the same summaries, and the excess is the slope of (judge - human): a paired difference of slopes.
It is NOT the length coefficient of judge ~ human + length: label noise attenuates the human coefficient and
pushes the humans' own taste for length into the length term (tests/test_audit.py shows both).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .dialogues import Dialogues, _centred, _excludes_zero
from .gain import Gain
from .position import _pairs, _with_human

LENGTH_COLUMNS = ["criterion", "mode", "n_summaries", "n_dialogues", "length_sd_words", "judge_slope",
                  "judge_slope_ci_low", "judge_slope_ci_high", "human_slope", "human_slope_ci_low",
                  "human_slope_ci_high", "excess_slope", "excess_ci_low", "excess_ci_high", "excess_dialogues",
                  "effect", "note",
                  "n_pairs", "prefers_longer", "prefers_longer_ci_low", "prefers_longer_ci_high",
                  "human_prefers_longer", "human_prefers_longer_ci_low", "human_prefers_longer_ci_high"]
CONTROLLED_COLUMNS = ["criterion", "system", "n", "raw_mean", "raw_ci_low", "raw_ci_high", "length_controlled",
                      "lc_ci_low", "lc_ci_high", "mean_length_z", "raw_rank", "lc_rank", "rank_changed",
                      "human_mean"]


def _length_units(judge, words, human, criterion) -> pd.DataFrame:
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")][["item_id", "system", "score"]]
    part = part.merge(words[["item_id", "system", "words"]], on=["item_id", "system"])
    if human is not None:
        columns = ["item_id", "system", "human", "human_a", "human_b"]
        part = part.merge(human[human["criterion"] == criterion].reindex(columns=columns), on=["item_id", "system"])
    return part


def _standard_length(boot: Dialogues, index: np.ndarray, words) -> tuple[np.ndarray, float]:
    """Length centred within its dialogue over the pooled within-dialogue SD (z), and that SD in words; z is all
    zeros when no dialogue has candidates of different lengths (SD 0)."""
    centred = _centred(index, np.asarray(words, float), len(boot.ids))
    sd = math.sqrt((centred ** 2).sum() / max(len(centred) - len(np.unique(index)), 1))
    return (centred / sd if sd > 0 else centred), sd


def length_slopes(judge, words, human, boot: Dialogues, criterion: str) -> dict:
    """The judge's, the humans' and the excess slope on within-dialogue standardised length, on the same summaries."""
    units = _length_units(judge, words, human, criterion)
    row = {"criterion": criterion, "n_summaries": len(units), "n_dialogues": units["item_id"].nunique()}
    if units.empty:
        return row
    index = boot.index(units["item_id"].to_numpy())
    z, row["length_sd_words"] = _standard_length(boot, index, units["words"])
    if row["length_sd_words"] == 0:
        return row
    # Slope within dialogues: sum z*y / sum z^2 (z is centred within each dialogue, so y need not be).
    row["judge_slope"], row["judge_slope_ci_low"], row["judge_slope_ci_high"] = boot.ratio(
        index, z * units["score"].to_numpy(float), z * z)
    tested = ("judge_slope_ci_low", "judge_slope_ci_high")
    if human is not None:
        h = units["human"].to_numpy(float)
        row["human_slope"], row["human_slope_ci_low"], row["human_slope_ci_high"] = boot.ratio(index, z * h, z * z)
        gain = Gain(boot, index, units["score"].to_numpy(float), units["human_a"].to_numpy(float),
                    units["human_b"].to_numpy(float), z)
        row["excess_slope"], row["excess_ci_low"], row["excess_ci_high"], row["note"] = gain.excess()
        row["excess_dialogues"] = gain.dialogues
        tested = ("excess_ci_low", "excess_ci_high")
    row["effect"] = _excludes_zero(row[tested[0]], row[tested[1]])
    return row


def length_controlled_means(judge, words, human, boot: Dialogues, criterion: str) -> pd.DataFrame:
    """Each system's mean judge score predicted at equal length, beside the raw mean (alpaca_eval's LC idea).

    score = dialogue effect + system effect + beta * z, fitted by least squares within dialogues (the system
    dummies keep a better system's extra length from being read as length); the length-controlled mean of a
    system is its raw mean minus beta times its mean z (how much longer it is than its dialogues' other
    summaries). Each resample refits beta from the per-dialogue normal equations: one batched solve.
    """
    units = _length_units(judge, words, None, criterion)
    if units.empty:
        return pd.DataFrame(columns=CONTROLLED_COLUMNS)
    n = len(boot.ids)
    index = boot.index(units["item_id"].to_numpy())
    z, _ = _standard_length(boot, index, units["words"])
    systems = sorted(units["system"].unique())
    code = units["system"].map({s: k for k, s in enumerate(systems)}).to_numpy()
    dummies = np.eye(len(systems))[code][:, 1:]
    design = np.column_stack([z, np.apply_along_axis(lambda col: _centred(index, col, n), 0, dummies)]
                             if len(systems) > 1 else [z])
    y = units["score"].to_numpy(float)
    p = design.shape[1]
    outer = np.einsum("ni,nj->nij", design, design).reshape(len(units), p * p)
    xx = np.stack([boot.sums(index, outer[:, k]) for k in range(p * p)], axis=1)  # (dialogues, p*p)
    xy = np.stack([boot.sums(index, design[:, k] * y) for k in range(p)], axis=1)
    beta_point = (np.linalg.pinv(xx.sum(0).reshape(p, p)) @ xy.sum(0))[0]
    gram = (boot.counts @ xx).reshape(-1, p, p)
    beta = np.einsum("bij,bj->bi", np.linalg.pinv(gram), boot.counts @ xy)[:, 0]
    if p > 1:  # a resample whose dialogues confound length with the systems cannot tell beta (pinv's answer would
        # depend on which system is the baseline, i.e. on the names): undefined, left out of the interval
        rank = np.linalg.matrix_rank
        beta[rank(gram) <= rank(gram[:, 1:, 1:])] = np.nan
    rows = []
    for k, system in enumerate(systems):
        mine = code == k
        top_y, top_z = boot.sums(index[mine], y[mine]), boot.sums(index[mine], z[mine])
        size = boot.sums(index[mine], np.ones(mine.sum()))
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = (boot.counts @ top_y) / (boot.counts @ size)
            mean_z = (boot.counts @ top_z) / (boot.counts @ size)
        raw_point, z_point = top_y.sum() / size.sum(), top_z.sum() / size.sum()
        rows.append({"criterion": criterion, "system": system, "n": int(mine.sum()), "raw_mean": raw_point,
                     **dict(zip(("raw_ci_low", "raw_ci_high"), boot.interval(raw))),
                     "length_controlled": raw_point - beta_point * z_point,
                     **dict(zip(("lc_ci_low", "lc_ci_high"), boot.interval(raw - beta * mean_z))),
                     "mean_length_z": z_point})
    frame = pd.DataFrame(rows)
    frame["raw_rank"] = frame["raw_mean"].rank(ascending=False, method="min").astype(int)
    frame["lc_rank"] = frame["length_controlled"].rank(ascending=False, method="min").astype(int)
    frame["rank_changed"] = frame["raw_rank"] != frame["lc_rank"]
    if human is not None:
        means = human[human["criterion"] == criterion].groupby("system")["human"].mean()
        frame["human_mean"] = frame["system"].map(means)
    frame.attrs["beta"] = beta_point
    return frame.reindex(columns=CONTROLLED_COLUMNS).sort_values("raw_rank", kind="stable")


def pairwise_length(judge, words, human, boot: Dialogues, criterion: str, threshold: float) -> dict:
    """P(the judge prefers the longer candidate | lengths differ by more than `threshold` of the longer one)."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    lengths = words.set_index(["item_id", "system"])["words"]
    w1 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy(float)
    w2 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        apart = np.abs(w1 - w2) / np.maximum(w1, w2) > threshold
    first_longer = w1 > w2
    label = pairs["label"].astype(str).to_numpy()
    decided = apart & np.isin(label, ["1", "2"])
    row = {"criterion": criterion, "mode": "pairwise", "n_pairs": int(decided.sum()),
           "n_dialogues": pairs.loc[decided, "item_id"].nunique()}
    index = boot.index(pairs["item_id"].to_numpy())
    longer = (label == "1") == first_longer
    row["prefers_longer"], row["prefers_longer_ci_low"], row["prefers_longer_ci_high"] = boot.ratio(
        index, (decided & longer).astype(float), decided.astype(float))
    h1, h2 = pairs["human_1"].to_numpy(float), pairs["human_2"].to_numpy(float)
    human_decided = apart & np.isfinite(h1) & np.isfinite(h2) & (h1 != h2)
    if human_decided.any():
        human_longer = (h1 > h2) == first_longer
        row["human_prefers_longer"], row["human_prefers_longer_ci_low"], row["human_prefers_longer_ci_high"] = \
            boot.ratio(index, (human_decided & human_longer).astype(float), human_decided.astype(float))
    return row
