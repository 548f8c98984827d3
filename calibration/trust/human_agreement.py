"""Does the judge agree with the humans at all? The judge's item-level Pearson r with the human mean, against the
humans' own ceiling (one annotator's reading against the mean of the others' on the same summaries), each with a
dialogue-bootstrap interval. A judge whose agreement is not shown to exceed chance is a finding of its own: a judge
of pure noise has no length, position or self-preference bias to find, and must not get a clean bill from the audit
(issue 43 part 6).

The test: one-sided, H0 "within each dialogue the judge's scores are exchangeable with respect to the humans'"
(what a judge of noise gives), by permutation within dialogues (the statistic: the covariance of the judge's and
the human mean's within-dialogue deviations; its p-value (1 + count of permutations at least as large) / (1 + B) is
exact under H0, whatever the scales and ties). Within dialogues: a judge that only tells easy dialogues from hard
ones does not rank the summaries of one dialogue. The criteria's p-values are one Holm family, apart from the
bias findings (calibration.trust.family)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import pearson
from .dialogues import Dialogues, _centred

AGREEMENT_COLUMNS = ["criterion", "n_summaries", "n_dialogues", "judge_r", "ci_low", "ci_high", "ceiling_r",
                     "ceiling_ci_low", "ceiling_ci_high", "ceiling_summaries", "p_value", "effect", "note"]
CHANCE_NOTE = ("not distinguishable from chance: the judge's scores do not agree with the humans' beyond what noise "
               "gives")


def _r_with_interval(boot: Dialogues, index: np.ndarray, x: np.ndarray, y: np.ndarray
                     ) -> tuple[float, float, float]:
    """Pearson r of x and y with its expanded percentile interval over resampled dialogues (each resample's r
    weighted by how often it draws each summary's dialogue)."""
    if len(x) < 3:
        return math.nan, math.nan, math.nan
    weights = boot.counts[:, index]
    with np.errstate(invalid="ignore", divide="ignore"):
        replicates = np.asarray(pearson(x, y, weights), float)
        value = float(pearson(x, y))
    return (value, *boot.interval(replicates))


PERMUTATIONS = 1999  # the smallest p-value is 1 / 2000: below Holm's 0.05 / k for any audit's k criteria


def permutation_p(index: np.ndarray, x: np.ndarray, y: np.ndarray, seed: int, permutations: int = PERMUTATIONS
                  ) -> float:
    """One-sided p-value of the within-dialogue association of x and y: x permuted within each dialogue."""
    n = int(index.max()) + 1 if len(index) else 0
    xc, yc = _centred(index, x, n), _centred(index, y, n)
    observed = float(xc @ yc)
    rng = np.random.default_rng(seed)
    order = np.argsort(index, kind="stable")
    keys = index[order] + rng.random((permutations, len(order)))  # sort within each dialogue by a random key
    shuffled = order[np.argsort(keys, axis=1)]
    draws = xc[shuffled] @ yc[order]
    return float((1 + np.count_nonzero(draws >= observed - 1e-12 * max(1.0, abs(observed)))) / (1 + permutations))


def human_agreement(judge: pd.DataFrame, human: pd.DataFrame, boot: Dialogues, criterion: str, seed: int = 0
                    ) -> dict:
    """The judge's item-level agreement with the human mean and the humans' ceiling, for one criterion."""
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")][["item_id", "system", "score"]]
    columns = ["item_id", "system", "human", "human_a", "human_b"]
    part = part.merge(human[human["criterion"] == criterion].reindex(columns=columns), on=["item_id", "system"])
    part = part[part["score"].notna() & part["human"].notna()]
    row = {"criterion": criterion, "n_summaries": len(part), "n_dialogues": part["item_id"].nunique(), "note": ""}
    index = boot.index(part["item_id"].to_numpy())
    row["judge_r"], row["ci_low"], row["ci_high"] = _r_with_interval(
        boot, index, part["score"].to_numpy(float), part["human"].to_numpy(float))
    twice = part["human_a"].notna() & part["human_b"].notna()
    row["ceiling_summaries"] = int(twice.sum())
    row["ceiling_r"], row["ceiling_ci_low"], row["ceiling_ci_high"] = _r_with_interval(
        boot, index[twice.to_numpy()], part.loc[twice, "human_a"].to_numpy(float),
        part.loc[twice, "human_b"].to_numpy(float))
    row["p_value"] = (permutation_p(index, part["score"].to_numpy(float), part["human"].to_numpy(float), seed)
                      if len(part) >= 3 else 1.0)
    if not np.isfinite(row["judge_r"]):
        row["note"] = "agreement not measurable (fewer than 3 labelled summaries, or constant scores)"
    return row


def agreement_table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=AGREEMENT_COLUMNS)
