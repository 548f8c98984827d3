"""`judge screen`'s systems table: each system's mean judge score per criterion with an expanded percentile
bootstrap interval over dialogues (paired across systems and criteria), simultaneous lower bounds on every
difference (Bonferroni-t over every pair of every criterion), who is tied with the best and who is dominated. The
method is in calibration.study.screen's docstring."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..stats import expanded_tail, resample_counts, simultaneous_differences

SYSTEM_COLUMNS = ["criterion", "system", "mean", "ci_low", "ci_high", "n", "rank", "difference_from_best",
                  "p_adjusted", "p_holm", "tied_with_best", "dominated_by"]  # p_holm: p_adjusted's old name


def win_shares(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairwise verdicts as scores: per dialogue, the share of its comparisons a system won (a tie counts half).

    A verdict "1" is a win for system_1, "2" for system_2, "0" a tie; other labels and failures are left out.
    """
    verdicts = pairs[pairs["status"].eq("label") & pairs["label"].isin(["0", "1", "2"])]
    if verdicts.empty:
        return pd.DataFrame(columns=["item_id", "system", "criterion", "score", "label", "status"])
    first, second = verdicts["system_1"], verdicts["system_2"]  # calibration.io fills them for every pair
    share = verdicts["label"].map({"1": 1.0, "2": 0.0, "0": 0.5})
    both = pd.concat([
        pd.DataFrame({"item_id": verdicts["item_id"], "system": first, "criterion": verdicts["criterion"],
                      "score": share}),
        pd.DataFrame({"item_id": verdicts["item_id"], "system": second, "criterion": verdicts["criterion"],
                      "score": 1.0 - share}),
    ])
    out = both.groupby(["item_id", "system", "criterion"], as_index=False)["score"].mean()
    return out.assign(label=None, status="ok")


def score_table(judge: pd.DataFrame, criteria) -> tuple[np.ndarray, list[tuple[str, str]], np.ndarray]:
    """(items, columns (criterion, system), dialogues x columns judge scores, NaN where there is no number)."""
    numeric = judge[(judge["status"] == "ok") & judge["criterion"].isin(criteria)]
    table = numeric.pivot(index="item_id", columns=["criterion", "system"], values="score").sort_index()
    table = table.reindex(columns=sorted(table.columns))
    return table.index.to_numpy(), list(table.columns), table.to_numpy(float)


def weighted_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Column means over the resampled dialogues: (B, N) counts x (N, K) values with NaN -> (B, K)."""
    present = ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ np.where(present, values, 0.0)) / (counts @ present)


def systems_table(judge: pd.DataFrame, criteria, n_resamples: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> tuple[pd.DataFrame, dict[str, str], np.ndarray, list]:
    """The systems table, the dominated systems ({system: by}), and the replicates (B, K) behind them."""
    items, columns, values = score_table(judge, criteria)
    counts = resample_counts(np.random.default_rng(seed), len(items), n_resamples)
    replicates = weighted_means(values, counts)
    point = weighted_means(values, np.ones((1, len(items))))[0]
    n = (~np.isnan(values)).sum(axis=0)
    low, high = np.full(len(columns), np.nan), np.full(len(columns), np.nan)
    for size in np.unique(n[n >= 2]):
        at = n == size
        tail = expanded_tail(confidence, size)
        with np.errstate(invalid="ignore"):
            low[at], high[at] = np.nanpercentile(replicates[:, at], [tail, 100.0 - tail], axis=0)
    order = {c: i for i, c in enumerate(criteria)}
    bounds = simultaneous_differences(point, replicates, groups=[order.get(c, -1) for c, _ in columns],
                                      confidence=confidence, units=max(int(n.min()), 2) if len(n) else None)
    shown_below = (bounds["lower"] > 0).any(axis=1)  # some other system of its criterion is shown better
    rows = []
    for criterion in criteria:
        index = [k for k, (c, _) in enumerate(columns) if c == criterion]
        if not index:
            continue
        ranked = sorted(index, key=lambda k: -point[k])
        best = ranked[0]
        for rank, k in enumerate(ranked, start=1):
            p = np.nan if k == best else float(bounds["p"][k])
            rows.append({"criterion": criterion, "system": columns[k][1], "mean": point[k], "ci_low": low[k],
                         "ci_high": high[k], "n": int((~np.isnan(values[:, k])).sum()), "rank": rank,
                         "difference_from_best": point[best] - point[k], "p_adjusted": p, "p_holm": p,
                         "tied_with_best": bool(k == best or not shown_below[k]), "dominated_by": ""})
    systems = pd.DataFrame(rows, columns=SYSTEM_COLUMNS)
    dominated = dominated_systems(bounds["lower"], columns, criteria)
    systems["dominated_by"] = systems["system"].map(lambda system: dominated.get(system, ""))
    return systems, dominated, replicates, columns


def dominated_systems(lower: np.ndarray, columns, criteria) -> dict[str, str]:
    """{system: a system shown better on every criterion}, from the simultaneous bounds `lower[i, j]` on
    theta_j - theta_i of the columns (criterion, system) (calibration.stats.simultaneous_differences)."""
    systems = sorted({s for _, s in columns})
    where = {column: k for k, column in enumerate(columns)}
    out = {}
    for loser in systems:
        for winner in systems:
            if winner == loser:
                continue
            pairs = [(where.get((c, loser)), where.get((c, winner))) for c in criteria]
            # A criterion either lacks: no domination (NaN compares False).
            if all(l is not None and w is not None and lower[l, w] > 0 for l, w in pairs):
                out[loser] = winner
                break
    return out
