"""`judge screen`'s items table: every judgment's uncertainty from what the run recorded (spread of --samples,
entropy of --logprobs, order disagreement, failures, abstentions, N/A), the judges' disagreement with --judge, and
each dialogue's power to discriminate the systems still in contention."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .matrices import judge_matrices

ITEM_COLUMNS = ["item_id", "n_judgments", "n_failed", "n_na", "n_abstained", "n_order_disagreement", "mean_spread",
                "mean_entropy", "mean_jury_disagreement", "uncertainty", "discrimination", "priority", "part"]


# Weight of each recorded sign of doubt in a judgment's uncertainty (0..1); N/A is a verdict, so it counts half.
FAILED, NOT_APPLICABLE = 1.0, 0.5


def judgment_uncertainty(judge: pd.DataFrame) -> pd.DataFrame:
    """One row per judgment: item_id, spread (0..1), entropy (0..1), order disagreement, jury disagreement (0..1),
    status, uncertainty (the largest of them, and of a failure's or N/A's doubt).

    From the judgments table's spread, probabilities and order disagreement (judge/table.py), and the jury's
    disagreement where screen was given other judges (jury_disagreement); a CSV of scores has only the scores, so
    its uncertainty is its failures.
    """
    ranges = judge[judge["status"] == "ok"].groupby("criterion")["score"].agg(["min", "max"])
    half_range = ((ranges["max"] - ranges["min"]) / 2.0).where(lambda r: r > 0, 1.0)

    def entropy(probs) -> float:
        if not isinstance(probs, dict) or len(probs) < 2:
            return np.nan
        p = np.array([v for v in probs.values() if v > 0], dtype=float)
        p = p / p.sum()
        return float(-(p * np.log(p)).sum() / np.log(len(probs)))

    column = lambda name: judge[name] if name in judge.columns else pd.Series(None, index=judge.index)  # noqa: E731
    spread = pd.to_numeric(column("spread"), errors="coerce") / judge["criterion"].map(half_range).fillna(1.0)
    frame = judge[[c for c in ("item_id", "system", "criterion", "status") if c in judge]].assign(
        spread=spread.clip(upper=1.0).to_numpy(), entropy=[entropy(p) for p in column("probs")],
        order_disagreement=[v is True or v == 1 for v in column("order_disagreement")],
        jury_disagreement=pd.to_numeric(column("jury_disagreement"), errors="coerce").to_numpy())
    doubt = np.select([frame["status"].isin(["error", "abstain"]), frame["status"] == "na"],
                      [FAILED, NOT_APPLICABLE], 0.0)
    frame["uncertainty"] = np.nanmax(np.column_stack([
        doubt, frame["spread"].fillna(0.0), frame["entropy"].fillna(0.0),
        frame["order_disagreement"].astype(float), frame["jury_disagreement"].fillna(0.0)]), axis=1)
    return frame


def jury_disagreement(judge: pd.DataFrame, judges: dict[str, pd.DataFrame] | None) -> pd.Series:
    """Per judgment of `judge` (its index): how far the judges (`judge` and each of `judges`, screen's --judge)
    disagree on the summary, the sd over them of their scores standardised within system and criterion (each
    judge's own mean and sd over its judged dialogues), capped at 1; NaN where fewer than two judges scored it (or a
    judge's scores of the system do not vary). Within system: a judge that rates a whole system higher disagrees
    about the system, not about the dialogue, and the active draw chooses dialogues."""
    keys = ["item_id", "system", "criterion"]
    standardised = []
    for frame in (judge, *(judges or {}).values()):
        ok = frame[(frame["status"] == "ok") & frame["system"].notna()]
        score = ok.groupby(keys)["score"].mean()
        by_system = score.groupby(level=["system", "criterion"])
        varies = by_system.transform("max") > by_system.transform("min")  # exact, where a tiny sd is rounding
        standardised.append((score - by_system.transform("mean")) / by_system.transform("std").where(varies))
    table = pd.concat(standardised, axis=1)
    spread = table.std(axis=1).where(table.notna().sum(axis=1) >= 2).clip(upper=1.0)
    cells = pd.MultiIndex.from_frame(judge[keys])
    return pd.Series(spread.reindex(cells).to_numpy(), index=judge.index)


def items_table(judge: pd.DataFrame, systems: pd.DataFrame, criteria, scored: pd.DataFrame | None = None,
                per_judgment: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per dialogue: counts of doubtful judgments, uncertainty, discrimination and priority.

    `judge`: every judgment (for the uncertainty); `scored`: the per-system scores the systems table used
    (pairwise verdicts as win shares), for the discrimination; default `judge`. `per_judgment`: judge's
    judgment_uncertainty when the caller has it already.
    """
    per_judgment = judgment_uncertainty(judge) if per_judgment is None else per_judgment
    grouped = per_judgment.groupby("item_id")
    table = pd.DataFrame({
        "n_judgments": grouped.size(),
        "n_failed": grouped["status"].apply(lambda s: int((s == "error").sum())),
        "n_na": grouped["status"].apply(lambda s: int((s == "na").sum())),
        "n_abstained": grouped["status"].apply(lambda s: int((s == "abstain").sum())),
        "n_order_disagreement": grouped["order_disagreement"].sum().astype(int),
        "mean_spread": grouped["spread"].mean(),
        "mean_entropy": grouped["entropy"].mean(),
        "mean_jury_disagreement": grouped["jury_disagreement"].mean(),
        "uncertainty": grouped["uncertainty"].mean(),
    })
    scored = judge if scored is None else scored
    table["discrimination"] = discrimination(scored, systems, criteria).reindex(table.index).fillna(0.0)
    table["priority"] = table["uncertainty"] + table["discrimination"]
    table["part"] = ""
    return table.rename_axis("item_id").reset_index()[ITEM_COLUMNS]


def discrimination(judge: pd.DataFrame, systems: pd.DataFrame, criteria) -> pd.Series:
    """Per dialogue: how far apart the judge puts the systems in contention (the top two at least), 0..1.

    The standard deviation across those systems of the dialogue's judge scores, over half the criterion's
    observed range, averaged over criteria.
    """
    parts = []
    for criterion in criteria:
        ranked = systems[systems["criterion"] == criterion]
        if ranked.empty:
            continue
        contenders = ranked.loc[ranked["tied_with_best"] | (ranked["rank"] <= 2), "system"].tolist()
        items, names, scores, judged = judge_matrices(judge, criterion)
        keep = np.isin(names, contenders)
        values = np.where(judged, scores, np.nan)[:, keep]
        half_range = (np.nanmax(values) - np.nanmin(values)) / 2.0 if np.isfinite(values).any() else 0.0
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a dialogue no contender has a score on: NaN, then 0
            spread = np.nanstd(values, axis=1) / (half_range if half_range > 0 else 1.0)
        parts.append(pd.Series(np.nan_to_num(np.minimum(spread, 1.0)), index=items))
    if not parts:
        return pd.Series(dtype=float)
    return pd.concat(parts, axis=1).mean(axis=1)
