"""One audit, one error rate: every finding's p-value read back from its printed interval, and Holm's step-down over
the findings of an audit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import holm


def _p_from_interval(estimate: float, low: float, high: float, dialogues: int, confidence: float = 0.95) -> float:
    """Two-sided p-value that the effect is 0, read from its printed interval: the interval is estimate +-
    t_{n-1} x the standard error with the unbiased variance (the sqrt(n / (n - 1)) expansion of the bootstrap's
    plug-in SD is part of that se), so the distance from the estimate to the bound on 0's side over t_{n-1} is the
    se, and the estimate over it a t_{n-1} statistic. Then p < 1 - confidence exactly when the printed interval
    excludes 0: a flag never contradicts its interval (reading the se as half-width / (sqrt(n/(n-1)) t) flagged
    estimates 0.71-1.0 half-widths from 0 at 2 dialogues, 0.975-1.0 at 20, while their interval held 0)."""
    from scipy import stats

    if not all(np.isfinite([estimate, low, high])):  # (one dialogue: t on 0 degrees of freedom gives NaN below)
        return math.nan
    toward_zero = estimate - low if estimate >= 0 else high - estimate
    se = toward_zero / stats.t.ppf(0.5 + confidence / 2, dialogues - 1)
    if se <= 0:
        return 0.0 if estimate != 0 else 1.0
    return float(2 * stats.t.sf(abs(estimate) / se, dialogues - 1))


def family_wise(length: pd.DataFrame, position: pd.DataFrame, self_preference: pd.DataFrame, dialogues: int,
                level: float = 0.05, agreement: pd.DataFrame | None = None) -> int:
    """Every finding an audit prints (criteria x length, position, self-preference) tested as one family: Holm's
    step-down over their p-values, so that with nothing planted any flag fires in at most `level` of audits (it
    was 54% at 20 dialogues with 12 findings, each tested at 5%). Sets each table's `p_adjusted` and `effect` (the
    flag as printed) in place; returns the number of findings tested.

    `agreement` (calibration.trust.human_agreement): each criterion's hypothesis "the judge does not agree with the
    humans" (its one-sided permutation p-value), Holm over the criteria as a second family; its flag is the other
    way round: raised unless agreement is shown (its adjusted p < `level`). A judge that does not agree with the
    humans is then called agreeing on some criterion in at most `level` of audits; one that does is flagged only for
    lack of power (its rate is measured in benchmarks/trust_coverage_table.txt). The two families are apart so that
    the agreement verdicts never change the bias findings' adjustment, nor the bias findings their power."""
    specs = [(length, "excess_slope", "excess_ci_low", "excess_ci_high", "judge_slope", "judge_slope_ci_low",
              "judge_slope_ci_high"),
             (position, "position_slope", "position_slope_ci_low", "position_slope_ci_high", "first_shown_wins",
              "first_shown_ci_low", "first_shown_ci_high"),
             (self_preference, "self_preference", "ci_low", "ci_high", None, None, None)]
    found = []
    for table, *columns in specs:
        table["p_adjusted"] = np.nan
        table["effect"] = pd.Series(False, index=table.index, dtype=object)
        for index, row in table.iterrows():
            est, low, high, alt, alt_low, alt_high = (row.get(c, np.nan) if c else np.nan for c in columns)
            unlabelled = columns[0] != "excess_slope" or not np.isfinite(row.get("human_slope", np.nan))
            # An excess's interval is on the dialogues read twice (Gain.excess), the others' on all of them.
            n = row.get("excess_dialogues", np.nan)
            n = int(n) if np.isfinite(n) else dialogues
            if not np.isfinite(est) and alt is not None and np.isfinite(alt) and unlabelled:
                # No labels (the judge's own slope) or a pairwise stratum (first-shown wins against a half).
                centre = 0.5 if columns[3] == "first_shown_wins" else 0.0
                est, low, high, n = alt - centre, alt_low - centre, alt_high - centre, dialogues
            p = _p_from_interval(est, low, high, n)
            if np.isfinite(p):
                found.append((table, index, p))
    if found:
        adjusted = holm([p for _, _, p in found])
        for (table, index, _), p in zip(found, adjusted):
            table.at[index, "p_adjusted"] = float(p)
            table.at[index, "effect"] = bool(p < level)
    if agreement is not None:
        # A family of its own: Holm over the criteria's "no agreement" hypotheses. Joined with the bias findings, a
        # good judge of a small audit was flagged for lack of power in 41% of criteria (0.05 / 13 to clear).
        agreement["p_adjusted"] = np.nan
        agreement["effect"] = pd.Series(True, index=agreement.index, dtype=object)  # not shown: flagged
        p_values = [p if np.isfinite(p) else 1.0 for p in agreement["p_value"]]
        for index, p in zip(agreement.index, holm(p_values)):
            agreement.at[index, "p_adjusted"] = float(p)
            agreement.at[index, "effect"] = not bool(p < level)
    return len(found) + (len(agreement) if agreement is not None else 0)
