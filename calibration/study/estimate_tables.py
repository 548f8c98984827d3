"""The tables of `judge estimate` on loaded frames: per criterion, each system's mean and each pair's paired
difference by PPI++ (calibration.study.ppi; ppi_weighted for an active design; bounded for labels bunched at one
end of the scale), with the notes the printed tables carry. The verb itself (files in, a result out) is
calibration.study.estimate."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd

from ..alignment import expand_all_criteria
from ..errors import CalibrationError
from ..humans import aggregate_humans
from .matrices import StudyMatrices, combined_matrices, numeric_criteria, study_matrices, targeted_summary
from .ppi import MIN_LABELLED, PPIResult, effective_labels, ppi_mean
from .ppi_weighted import ppi_mean_weighted
from .predictor import fit_leverage

ESTIMATE_COLUMNS = ["criterion", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
                    "human_only_ci_high", "n_labelled", "n_judged", "n_dialogues", "width_ratio",
                    "effective_labels", "labels_saved", "lambda", "n_missing_labels", "interval_note"]


DIFFERENCE_COLUMNS = ["criterion", "system_a", "system_b", "estimate", "ci_low", "ci_high", "human_only",
                      "human_only_ci_low", "human_only_ci_high", "n_labelled", "n_dialogues", "width_ratio",
                      "effective_labels", "labels_saved", "lambda", "interval_note"]


@dataclass
class Estimates:
    estimates: pd.DataFrame
    differences: pd.DataFrame
    targeted: pd.DataFrame
    criteria: list[str]
    confidence: float
    random_source: str  # "plan" or "all labelled"
    n_random: int
    cleaned: bool
    notes: list[str] = field(default_factory=list)


def interval_note(code: str, n: int) -> str:
    """What the tables say where no interval is printed, and what would give one."""
    if code == "few":
        return (f"{n} labelled dialogue{'' if n == 1 else 's'}: an interval needs at least {MIN_LABELLED} "
                "labelled at random")
    if code == "flat":
        return (f"the {n} labels are all equal: no interval can be trusted; label more dialogues at random "
                f"(at least {MIN_LABELLED} that differ)")
    if code == "unseen":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "and an active design's weighted labels have no bounded-scale interval; label more dialogues")
    if code == "first stage":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "so the interval is the betting bound (valid for any scores on the scale) on the two-stage plan's "
                "first, uniform stage alone, and the estimate its mean")
    if code == "bounded":
        return (f"the {n} labels bunch at one end of the scale: failures none of them drew could lie at the other, "
                "so that side's bound is the betting bound (valid for any scores on the scale; human labels only)")
    return ""


def with_labels_saved(frame: pd.DataFrame) -> pd.DataFrame:
    """`labels_saved`: the human labels a human-only estimate would need beyond those labelled for an interval this
    narrow (effective_labels - n_labelled; negative where the judge cost labels)."""
    return frame.assign(labels_saved=frame["effective_labels"].astype(float) - frame["n_labelled"].astype(float))


def twice_the_labels(frame: pd.DataFrame, *units: str) -> str:
    """The note on rows worth more than twice their labels, which a judge no better than the systems it rates cannot
    be (Dorner, Nastl & Hardt 2025: then no debiasing saves more than half the labels); blank when none is."""
    over = frame[frame["effective_labels"].astype(float) > 2.0 * frame["n_labelled"].astype(float)]
    if over.empty:
        return ""
    names = ", ".join("/".join(str(row[c]) for c in ("criterion", *units)) for _, row in over.iterrows())
    return (f"effective_labels above twice n_labelled for {len(over)} of {len(frame)} rows ({names}): a judge no "
            "better than the systems it rates is worth at most twice the labels (Dorner, Nastl & Hardt 2025), so "
            "read these as a judge stronger than these systems, or check them with more labels")


def _rows(result: PPIResult, index: int) -> dict:
    width = float(result.ci_high[index] - result.ci_low[index])
    human_width = float(result.human_only_ci_high[index] - result.human_only_ci_low[index])
    # Ratio of the printed intervals (t quantiles included), and what the estimate is worth (effective_labels).
    ratio = width / human_width if human_width > 0 else float("nan")
    n = int(result.n_labelled[index])
    return {"interval_note": interval_note(str(result.no_interval[index]), n),
            "estimate": float(result.estimate[index]), "ci_low": float(result.ci_low[index]),
            "ci_high": float(result.ci_high[index]), "human_only": float(result.human_only[index]),
            "human_only_ci_low": float(result.human_only_ci_low[index]),
            "human_only_ci_high": float(result.human_only_ci_high[index]),
            "n_labelled": n, "width_ratio": ratio, "effective_labels": float(effective_labels(result)[index]),
            "lambda": float(result.lam[index])}


def _ppi(human, judge, confidence: float, combined: bool, inclusion=None, bounds=None, leverage=None,
         first=None) -> PPIResult:
    """ppi_mean with the judge's lambda tuned, or for a combined (cross-fitted) predictor the design's own; with
    `inclusion` (each dialogue's probability of being drawn, an active design) the 1/p-weighted estimator.
    `bounds`: the scores' (low, high), for the bounded-scale check (bounded_scale; for an active design's weighted
    labels, unseen_hidden). `leverage`: the combined predictor's fit_leverage per row. `first`: a two-stage plan's
    first stage (ppi_mean_weighted)."""
    if inclusion is not None:
        return ppi_mean_weighted(human, judge, inclusion, confidence, bounds=bounds, first=first)
    if not combined:  # the criterion's systems (or pairs) share one cross-fitted lambda below MIN_CROSS_FITTED
        return ppi_mean(human, judge, confidence, bounds=bounds, shared=True)
    from .predictor import cross_prediction_lambda

    return ppi_mean(human, judge, confidence, lam=cross_prediction_lambda(human, judge), bounds=bounds,
                    fitted_judge=True, fit_leverage=leverage)


def system_estimates(matrices: StudyMatrices, confidence: float, combined: bool = False,
                     inclusion=None, bounds=None, first=None) -> pd.DataFrame:
    result = _ppi(matrices.human.T, matrices.judge.T, confidence, combined, inclusion, bounds,
                  None if matrices.fit is None else fit_leverage(*matrices.fit), first)
    rows = []
    for j, system in enumerate(matrices.systems):
        units = ~np.isnan(matrices.judge[:, j])
        rows.append({"criterion": matrices.criterion, "system": system, **_rows(result, j),
                     "n_judged": int(matrices.judged[:, j].sum()), "n_dialogues": int(units.sum())})
    return pd.DataFrame(rows)


def on_scale(table: pd.DataFrame, bounds) -> list[str]:
    """Keep each system's mean intervals (PPI++ and human-only) on the scale `bounds` = (low, high), in place: a
    bound past the scale's end is moved onto it and interval_note says from where. The true mean lies on the scale,
    so an interval that held it still does: coverage cannot drop, the interval only shrinks toward the truth.
    width_ratio and effective_labels keep the estimator's own widths (what the labels are worth does not change
    because the scale cuts an interval). The systems whose intervals were clipped; none without bounds."""
    if bounds is None or table.empty:
        return []
    low, high = float(bounds[0]), float(bounds[1])
    columns = ["ci_low", "ci_high", "human_only_ci_low", "human_only_ci_high"]
    values = table[columns].astype(float)
    outside = ((values < low) | (values > high)).any(axis=1)
    for index in table.index[outside]:
        row = values.loc[index]
        reached = ", ".join(f"{name} {row[name]:.3g}" for name in columns if not low <= row[name] <= high)
        note = f"clipped to the scale [{low:g}, {high:g}] (the mean cannot leave it): {reached}"
        table.at[index, "interval_note"] = "; ".join(filter(None, [table.at[index, "interval_note"], note]))
    table[columns] = values.clip(lower=low, upper=high)
    return [str(system) for system in table.loc[outside, "system"]]


def pair_indices(count: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array(list(combinations(range(count), 2)), dtype=int).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def difference_estimates(matrices: StudyMatrices, confidence: float, combined: bool = False,
                         inclusion=None) -> pd.DataFrame:
    """The paired differences of every pair of systems (t intervals: no bounded-scale check, see bounded_scale)."""
    a, b = pair_indices(len(matrices.systems))
    if len(a) == 0:
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    judge = (matrices.judge[:, a] - matrices.judge[:, b]).T
    human = (matrices.human[:, a] - matrices.human[:, b]).T
    result = _ppi(human, judge, confidence, combined, inclusion,
                  leverage=None if matrices.fit is None else fit_leverage(*matrices.fit, a, b))
    rows = [{"criterion": matrices.criterion, "system_a": matrices.systems[i], "system_b": matrices.systems[k],
             **_rows(result, p), "n_dialogues": int((~np.isnan(judge[p])).sum())}
            for p, (i, k) in enumerate(zip(a, b))]
    return pd.DataFrame(rows)


def estimate(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None, clean: bool = False,
             random_items=None, targeted_items=None, confidence: float = 0.95,
             judges: dict[str, pd.DataFrame] | None = None, inclusion: dict | None = None,
             scales: dict | None = None, first_stage: set | None = None) -> Estimates:
    """The whole `judge estimate` computation on loaded frames (load_judge_scores / load_human_labels).

    `random_items`: the dialogues of the plan's random part (None: every labelled dialogue). `targeted_items`:
    the plan's targeted dialogues, whose labels are summarised apart and never enter the estimates. `judges`:
    more judges' score frames (name -> frame); with them, `judge` and these are one predictor, a cross-fitted
    regression on the labels (calibration.study.predictor). `inclusion`: {dialogue: probability it was drawn}
    for the random part of an active design (ppi_mean_weighted); None for a uniform draw. `scales`: criterion (or
    "*") -> (low, high) of the human scale, for the bounded-scale check (bounded_scale); None: not checked.
    `first_stage`: a two-stage plan's first-stage dialogues (their labels carry the bounded-scale interval).
    """
    if not 0.0 < confidence < 1.0:
        raise CalibrationError(f"--confidence must be between 0 and 1, got {confidence}")
    human = aggregate_humans(labels, clean=clean)
    if "system_1" in judge.columns:
        judge = judge[judge["system_1"].isna()]  # pairwise verdicts are not scores of a system
    criteria = numeric_criteria(judge, human, criteria)
    judge = expand_all_criteria(judge, criteria)
    judges = {name: expand_all_criteria(frame, criteria) for name, frame in (judges or {}).items()}
    labelled_items = set(human["item_id"])
    source = "plan" if random_items is not None else "all labelled"
    random_items = set(labelled_items if random_items is None else random_items)
    random_labelled = labelled_items & random_items
    if not random_labelled:
        raise CalibrationError("no human label is on a dialogue of the plan's random sample: the estimates need "
                               "labels on the random part (the targeted part alone is not a random sample)")
    estimates, differences, targeted, notes = [], [], [], []
    for criterion in criteria:
        matrices = study_matrices(judge, human, criterion, random_items)
        paired = matrices
        if judges:
            matrices, paired = combined_matrices(matrices, judges), combined_matrices(matrices, judges, True)
        pi = None if inclusion is None else np.array([inclusion.get(i, np.nan) for i in matrices.items])
        bounds = (scales or {}).get(criterion, (scales or {}).get("*"))
        first = None if first_stage is None else np.isin(matrices.items, list(first_stage))
        table = system_estimates(matrices, confidence, combined=bool(judges), inclusion=pi, bounds=bounds,
                                 first=first)
        # Random-sample dialogues that have labels for other cells but not for this one: the estimate assumes
        # these labels are missing at random (or that the criterion did not apply, as the judge would say).
        in_sample = np.isin(matrices.items, list(random_labelled))
        table["n_missing_labels"] = [int((in_sample & ~np.isnan(matrices.judge[:, j])
                                          & np.isnan(matrices.human[:, j])).sum())
                                     for j in range(len(matrices.systems))]
        estimates.append(table)
        differences.append(difference_estimates(paired, confidence, combined=bool(judges), inclusion=pi))
        if targeted_items:
            targeted.append(targeted_summary(judge, human, criterion, targeted_items))
        if (table["n_labelled"] >= table["n_dialogues"]).all():
            notes.append(f"{criterion}: every judged dialogue is labelled, so the judge adds nothing: the estimates "
                         "are the human means")
        short = table[table["ci_low"].isna()]
        if len(short):
            notes.append(f"{criterion}: no interval for {', '.join(map(str, short['system']))} "
                         f"({short['interval_note'].iloc[0]})")
        bounded = table[table["ci_low"].notna() & (table["interval_note"] != "")]
        if len(bounded):
            notes.append(f"{criterion}: bounded-scale interval for {', '.join(map(str, bounded['system']))} "
                         f"({bounded['interval_note'].iloc[0]})")
        if clipped := on_scale(table, bounds):
            notes.append(f"{criterion}: interval clipped to the scale for {', '.join(clipped)} (interval_note)")
    targeted_frame = pd.concat(targeted, ignore_index=True) if targeted else pd.DataFrame(
        columns=["criterion", "system", "n_labelled", "human_mean", "judge_mean"])
    estimates, differences = (with_labels_saved(pd.concat(t, ignore_index=True)) for t in (estimates, differences))
    if note := twice_the_labels(estimates, "system"):
        notes.append(note)
    return Estimates(estimates[ESTIMATE_COLUMNS], differences[DIFFERENCE_COLUMNS], targeted_frame,
                     list(criteria), confidence, source, len(random_labelled), clean, notes)
