"""`judge screen`'s power table: the dialogues humans must label to separate the top two systems of each criterion
(calibration.study.power), for a uniform draw and an active design, and the sentence that says it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .designs import active_design_factor
from .matrices import judge_matrices
from .power import dialogues_needed
from .ppi import ppi_mean


def power_table(judge: pd.DataFrame, systems: pd.DataFrame, criteria, power: float = 0.8, alpha: float = 0.05,
                pilot: pd.DataFrame | None = None, judges: dict | None = None,
                relative: pd.Series | None = None) -> pd.DataFrame:
    """Per criterion: dialogues humans must label to separate the judge's top two systems.

    Without a pilot the standardised effect is the judge's (mean / sd of its paired per-dialogue differences),
    assumed to carry over to humans. With pilot labels (aggregated human scores), the human-scale effect is the
    PPI++ estimate of the mean paired difference over its pilot sd, and rho, the judge-human correlation of the
    paired differences on the pilot, gives the prediction-powered count as well. With `judges` (more judges'
    frames, `--judge`), the judge is the one predictor `judge estimate --judge` would use: their cross-fitted
    combination on the pilot's labels (rho measured out of fold), priced with its fixed weight.

    `relative` (an active design: each dialogue's p~, relative_probabilities): the table gains what that design
    needs, `dialogues_active`. With a pilot, the design's own variance: the pilot's errors (the paired differences'
    residual on the judge's, or the differences themselves where the judge cannot be used) weighed by 1/p~ at
    their dialogues (active_design_factor, `design_factor`; `active_basis` "pilot"). Without one nothing says
    where the judge errs, so the count is the uniform one at the design's worst case, errors only where p~ is
    lowest: 1 / min p~, at most 1 / ACTIVE_FLOOR (`active_basis` "worst case"); a signal unrelated to the error
    costs mean(1 / p~) (benchmarks/active_design.py --floors).
    """
    rows = []
    for criterion in criteria:
        ranked = systems[systems["criterion"] == criterion].sort_values("rank")
        if len(ranked) < 2:
            continue
        first, second = ranked["system"].iloc[0], ranked["system"].iloc[1]
        items, names, scores, judged = judge_matrices(judge, criterion)
        a, b = list(names).index(first), list(names).index(second)
        both = judged[:, a] & judged[:, b]
        g = scores[both, a] - scores[both, b]
        row = {"criterion": criterion, "system_a": first, "system_b": second, "n_judged": int(both.sum()),
               "judge_difference": float(g.mean()) if len(g) else np.nan,
               "judge_effect": effect_size(g), "power": power, "alpha": alpha}
        effect = row["judge_effect"]
        rho, d, labelled = np.nan, None, None
        if pilot is not None:
            part = pilot[pilot["criterion"] == criterion].pivot(index="item_id", columns="system", values="human")
            if judges:
                g = jury_differences(judge, part, criterion, judges, first, second)[both]
            part = part.reindex(index=items[both], columns=[first, second])
            d = (part[first] - part[second]).to_numpy(float)
            labelled = ~np.isnan(d)
            row["n_pilot"] = int(labelled.sum())
            if labelled.sum() >= 3:
                if judges:
                    from .predictor import cross_prediction_lambda

                    result = ppi_mean(d, g, lam=cross_prediction_lambda(d, g))
                else:
                    result = ppi_mean(d, g)
                sd = float(np.std(d[labelled], ddof=1))
                effect = float(result.estimate) / sd if sd > 0 else np.nan
                row["human_difference"] = float(result.estimate)
                row["human_effect"] = effect
                if np.std(g[labelled]) > 0 and sd > 0:
                    rho = float(np.corrcoef(d[labelled], g[labelled])[0, 1])
            row["rho"] = rho
        row["dialogues_human_only"] = dialogues_needed(effect, power, alpha)
        row["dialogues_with_judge"] = (dialogues_needed(effect, power, alpha, rho, row["n_judged"],
                                                        combined=bool(judges)) if np.isfinite(rho) else None)
        if relative is not None:
            p = relative.reindex(items[both]).fillna(1.0).to_numpy(float)
            pilot_labelled = labelled if row.get("n_pilot", 0) >= 3 else None
            row.update(zip(("design_factor", "active_basis", "dialogues_active"),
                           active_count(row, effect, power, alpha, rho, d, g, p, pilot_labelled, bool(judges))))
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("dialogues_human_only", "dialogues_with_judge", "dialogues_active"):
        if column in table:
            table[column] = table[column].astype("Int64")  # a count, or <NA> when no study size reaches the power
    return table


def active_count(row: dict, effect: float, power: float, alpha: float, rho: float, d, g, p, labelled,
                 combined: bool) -> tuple[float, str, int | None]:
    """(design_factor, active_basis, dialogues_active) of power_table's row for an active design with p~ = `p` on
    the pair's judged dialogues; `labelled`: the pilot's dialogues among them (None: no pilot to measure on)."""
    if np.allclose(p, 1.0):  # the pilot check fell back, or no uncertainty is recorded: a uniform draw after all
        return 1.0, "uniform", row["dialogues_with_judge"] if np.isfinite(rho) else row["dialogues_human_only"]
    if labelled is None:
        factor = float(1.0 / p.min())
        return factor, "worst case", dialogues_needed(effect, power, alpha, design_factor=factor)
    on = p[labelled]
    human = active_design_factor(d[labelled], on)
    if not np.isfinite(rho):
        return human, "pilot", dialogues_needed(effect, power, alpha, design_factor=human)
    slope = np.polyfit(g[labelled], d[labelled], 1)[0]
    factor = active_design_factor(d[labelled] - slope * g[labelled], on)  # it centres: no intercept needed
    return factor, "pilot", dialogues_needed(effect, power, alpha, rho, row["n_judged"], combined=combined,
                                             design_factor=factor, human_factor=human)


def second_stage_count(row, first: int) -> int | None:
    """The dialogues a two-stage study's second stage needs for the power asked, its first stage's `first` labelled:
    the uniform count n (dialogues_with_judge, else dialogues_human_only) and the active design's variance factor
    d = dialogues_active / n give the two-stage estimate's variance as (m1 + m2 d) / (m1 + m2)^2 in units of one
    label's (estimate.two_stage_inclusion's weights), which must reach 1 / n: m1 + m2 = (n d + sqrt(n^2 d^2 +
    4 n m1 (1 - d))) / 2. None where no study size reaches the power."""
    uniform = row.dialogues_with_judge if not pd.isna(getattr(row, "dialogues_with_judge", np.nan)) \
        else row.dialogues_human_only
    if pd.isna(uniform) or pd.isna(row.dialogues_active):
        return None
    n, d = float(uniform), float(row.dialogues_active) / float(uniform)
    total = (n * d + np.sqrt(n * n * d * d + 4.0 * n * first * (1.0 - d))) / 2.0
    return max(int(np.ceil(total - 1e-9)) - first, 0)


def jury_differences(judge: pd.DataFrame, pilot_wide: pd.DataFrame, criterion: str, judges: dict, first: str,
                     second: str) -> np.ndarray:
    """Per judged dialogue, first minus second of the cross-fitted jury (matrices.py's combined_matrices) fitted on
    the pilot's labels of every system of the criterion."""
    from .matrices import StudyMatrices, combined_matrices

    items, names, scores, judged = judge_matrices(judge, criterion)
    human = pilot_wide.reindex(index=items, columns=names).to_numpy(float)
    human = np.where(np.isnan(scores), np.nan, human)
    combined = combined_matrices(StudyMatrices(criterion, items, names, scores, human, judged), judges, True).judge
    a, b = list(names).index(first), list(names).index(second)
    return combined[:, a] - combined[:, b]


def effect_size(differences: np.ndarray) -> float:
    if len(differences) < 2:
        return float("nan")
    sd = float(np.std(differences, ddof=1))
    return float(np.mean(differences)) / sd if sd > 0 else float("nan")


def active_clause(row) -> str:
    """What the active design needs, and on what basis, for power_sentence."""
    count = row.dialogues_active
    if row.active_basis == "uniform":
        return "; the active design draws uniformly here (the --design active warning says why), so the same"
    if pd.isna(count):
        return (f"; with this active design, more than the {row.n_judged} judged"
                if not pd.isna(getattr(row, "rho", np.nan))
                else "; with this active design, more than any study can label")
    if row.active_basis == "pilot":
        return (f"; with this active design {count} (its 1/p-weighted variance {row.design_factor:.2f} x a uniform "
                "draw's on the pilot's errors)")
    return (f"; with this active design at most {count} (no pilot says where the judge errs: the worst case the "
            f"design's floor allows, {row.design_factor:.2f} x a uniform draw's variance)")


def power_sentence(table: pd.DataFrame, power: float, alpha: float) -> str:
    """The answer as one sentence for a study plan."""
    if table.empty:
        return "No criterion has two systems with judge scores, so there is nothing to separate."
    pilot = "n_pilot" in table
    parts = []
    for row in table.itertuples():
        count = row.dialogues_human_only
        text = (f"{row.criterion}: {count} dialogues" if not pd.isna(count)
                else f"{row.criterion}: more dialogues than any study can label (the judge sees no difference)")
        if pilot and pd.isna(row.rho):
            text += " (the judge-human correlation cannot be measured on this pilot)"
        elif pilot and not pd.isna(row.dialogues_with_judge):
            text += f" ({row.dialogues_with_judge} with the judge's scores on all {row.n_judged}, rho {row.rho:.2f})"
        elif pilot:
            text += f" (more than the {row.n_judged} judged with the judge's help)"
        if "dialogues_active" in table:
            text += active_clause(row)
        parts.append(f"{text} for {row.system_a} vs {row.system_b}")
    basis = (f"the human-scale effect estimated from {int(table['n_pilot'].max())} pilot dialogues and the judge "
             "(prediction-powered)" if pilot else
             "the judge's paired per-dialogue differences, assuming humans see the same standardised effect")
    return (f"To separate the judge's top two systems with {power:.0%} power in a two-sided paired t test at the "
            f"{alpha:.0%} level, humans must label, per criterion, {'; '.join(parts)}; based on {basis}.")
