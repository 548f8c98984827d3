"""The cascade walk of `judge escalate`: the judges' files and the human labels read into one criterion at a time
(its cells, each judge's verdict and confidence, whether it agrees with the humans), the thresholds fitted by the
fixed-sequence test (`threshold_tests.fit_cascade`), every unlabelled cell decided by the first judge confident
enough, and the tables the verb writes (decisions, thresholds, path, risk-coverage, signals, cost, pending, plan).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..cells import chosen_criteria, labels_on_judged
from ..errors import CalibrationError
from ..options import must_be
from .threshold_tests import agreement_bound, decide, fit_cascade, min_labels, path_sample
from .verdicts import SIGNALS, _agrees, _confidence, _kind, _verdicts, available_signals, human_verdicts

HUMAN = "human"
DECISION_COLUMNS = ["item_id", "system", "criterion", "decided_by", "verdict", "confidence"]
THRESHOLD_COLUMNS = ["criterion", "judge", "signal", "threshold", "calibration_decided", "agreement",
                     "agreement_bound", "unlabelled_decided", "unlabelled_share"]
# cost.csv: cells_run = the unlabelled cells a judge must run on; judged = the cells (labelled too) it has judgments
# for; spared = the cells it never judged, against judging every cell
COST_COLUMNS = ["what", "cells_run", "tokens", "judged", "spared"]
PENDING_COLUMNS = ["item_id", "system", "criterion", "judge"]
AGREEMENT_TEXT = {"categorical": "the human majority label (on a tie, one of the tied labels)",
                  "pairwise": "the human majority verdict for the pair, tie (0) included, or the one the human means "
                              "give"}


def _signal_map(signal, names: list[str]) -> dict[str, str]:
    if signal is None or signal == "auto":
        return {}
    if isinstance(signal, str):
        pairs = [s.strip() for s in signal.split(",") if s.strip()]
        chosen = {}
        for part in pairs:
            name, sep, value = part.rpartition("=")
            if sep:
                chosen[name.strip()] = value.strip()
            else:
                chosen.update({n: value.strip() for n in names})
    else:
        chosen = dict(signal)
    for name, value in chosen.items():
        if name not in names:
            raise CalibrationError(f"--signal names judge {name!r}, which is not among --judge ({', '.join(names)})")
        if value not in SIGNALS:
            raise CalibrationError(must_be("--signal", "one of " + ", ".join(SIGNALS) + " (or NAME=SIGNAL)", value))
    return chosen


def _tokens(source) -> dict[tuple, float]:
    """Tokens per (item, system, criterion) when the judge is a judgments JSONL that records usage."""
    from pathlib import Path

    if isinstance(source, pd.DataFrame):  # a run judge's frame names its whole judgments file
        source = source.attrs.get("tokens_from", "")
    # Read as calibration.io reads a judge file: anything but a CSV is a judgments JSONL, whatever its name.
    if not str(source) or Path(str(source)).suffix.lower() == ".csv" or not Path(str(source)).is_file():
        return {}
    from judge.judgment import read_judgments

    try:
        return {j.key: float(j.usage.prompt_tokens + j.usage.completion_tokens) for _, j in read_judgments(Path(source))
                if j.usage.prompt_tokens or j.usage.completion_tokens}
    except Exception:  # noqa: BLE001 - the verdicts were read already; tokens are a bonus
        return {}



@dataclass
class _Tables:
    """What the walk gathers over the criteria, the rows of the verb's tables."""

    decisions: list = field(default_factory=list)
    thresholds: list = field(default_factory=list)
    paths: list = field(default_factory=list)
    curves: list = field(default_factory=list)
    signals: list = field(default_factory=list)
    cost: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    agreement: dict = field(default_factory=dict)  # criterion -> how agreement was defined there
    tests: dict = field(default_factory=dict)  # criterion -> the test used
    judged: dict = field(default_factory=dict)  # judge -> frames of the cells it has judged
    warnings: list = field(default_factory=list)


@dataclass
class _Criterion:
    """One criterion's cells (sorted by item and system) as the judges see them."""

    name: str
    kind: str
    cells: pd.DataFrame
    parts: dict  # judge -> its rows of this criterion
    rows: dict  # judge -> its rows reindexed on `cells`
    verdicts: dict  # judge -> its verdict per cell (None: no verdict)
    signal: dict  # judge -> the confidence signal used
    labelled: np.ndarray  # the humans labelled the cell (pairwise: both of its systems)
    is_cal: np.ndarray  # labelled, with a usable human verdict: the calibration cells
    # cells x judges: the confidence (NaN: no verdict), and whether the verdict agrees with the humans (calibration
    # cells only)
    conf: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    agree: np.ndarray = field(default_factory=lambda: np.empty((0, 0), bool))


def walk_cascade(human, listed, *, alpha: float, delta: float, criteria, tolerance: float, signal, units: str, scale,
                 failure_value, steps: int, path_cells, random_dialogues: int, seed: int, later: set) -> dict:
    """The cascade of the judges as they have judged so far (name -> path or frame); `later`: judges run on the
    cells the cascade needs only, whose other cells are not the cascade's (nor missing). Returns the fields of
    `EscalateResult`."""
    from ..alignment import expand_all_criteria
    from ..judges import read_judges

    names = [n for n, _ in listed]
    signals_asked = _signal_map(signal, names)
    frames, labels, notes = read_judges(listed, human, scale, failure_value)
    where = labels.attrs.get("path", "the human labels")
    label_criteria = sorted(set(labels["criterion"]))
    frames = {n: expand_all_criteria(f, label_criteria) for n, f in frames.items()}
    judged = sorted(set().union(*(set(f["criterion"]) for f in frames.values())))
    out = _Tables(warnings=[f"note: {n}" for n in notes])
    labelled_cells = _labels_on_judged_cells(frames, labels, judged, where, out.warnings)
    wanted = chosen_criteria(criteria, judged,
                             "--criteria {first!r} is not judged by any judge (they judge {available})")
    token_maps = {n: _tokens(s) for n, s in listed}
    for criterion in wanted:
        c = _read_criterion(criterion, frames, names, later, labels, where, labelled_cells, signals_asked, tolerance,
                            out.warnings)
        _decide_criterion(c, names, out, token_maps, alpha=alpha, delta=delta, tolerance=tolerance, units=units,
                          steps=steps, path_cells=path_cells, seed=seed)
    decisions = pd.DataFrame(out.decisions, columns=DECISION_COLUMNS)
    decisions = decisions.sort_values(["criterion", "item_id", "system"], kind="stable").reset_index(drop=True)
    return dict(decisions=decisions, thresholds=pd.DataFrame(out.thresholds, columns=THRESHOLD_COLUMNS),
                path=pd.concat(out.paths, ignore_index=True), risk_coverage=pd.concat(out.curves, ignore_index=True),
                signals=pd.DataFrame(out.signals), cost=_cost_table(out.cost), alpha=alpha, delta=delta,
                tolerance=float(tolerance), judges=names, agreement=out.agreement,
                plan=_plan(decisions, random_dialogues, seed), seed=seed, tests=out.tests,
                pending=pd.DataFrame(out.pending, columns=PENDING_COLUMNS), warnings=out.warnings,
                judged={n: pd.concat(f, ignore_index=True) for n, f in out.judged.items()})


def _labels_on_judged_cells(frames: dict, labels: pd.DataFrame, judged: list, where: str, warnings: list) -> set:
    """The labelled cells (item, system, criterion). Labels must land on judged cells: a label for an item, system or
    criterion no judge judged is a mistake."""
    from ..io import label_at

    every = set().union(*(set(zip(f["item_id"], f["system"], f["criterion"])) for f in frames.values()))
    usable = labels[labels["score"].notna() | labels["label"].notna()]
    for column, known, what in (("criterion", set(judged), "criterion"),
                                ("item_id", {c[0] for c in every}, "item"),):
        labels_on_judged(usable, column, known, lambda row: f"{what} {row[column]!r} is not judged by any judge "
                         f"(judged criteria: {', '.join(judged)}); labels from another rubric or study?",
                         default=where)
    pair_systems = {(c[0], s, c[2]) for n, f in frames.items() for c, s1, s2 in
                    zip(zip(f["item_id"], f["system"], f["criterion"]), f["system_1"], f["system_2"])
                    if isinstance(s1, str) for s in (s1, s2)}
    lab_cells = list(zip(usable["item_id"], usable["system"], usable["criterion"]))
    off = np.array([c not in every and c not in pair_systems for c in lab_cells], bool)
    if off.any():
        row = usable[off].iloc[0]
        raise CalibrationError(f"{label_at(usable, row, where)}: item {row.item_id!r}, system {row.system!r}, "
                               f"criterion {row.criterion!r} is not judged by any judge ({int(off.sum())} label(s) "
                               "like it)")
    annotators = usable.groupby(["item_id", "system", "criterion"])["annotator"].nunique()
    if len(annotators) and annotators.max() <= 1:
        warnings.append("every labelled cell has one annotator: agreement is with that one person, not a majority")
    return set(lab_cells)


def _read_criterion(criterion, frames, names, later, labels, where, labelled_cells, signals_asked, tolerance,
                    warnings) -> _Criterion:
    """One criterion's cells, each judge's verdict and confidence on them, and the humans' side."""
    parts = {n: f[f["criterion"] == criterion] for n, f in frames.items()}
    kinds = {n: _kind(parts[n]) for n in names if not parts[n].empty}
    if len(set(kinds.values())) > 1:
        raise CalibrationError(f"{criterion}: the judges give different kinds of verdict ("
                               + ", ".join(f"{n}: {k}" for n, k in kinds.items()) + "): another rubric?")
    kind = next(iter(kinds.values()))
    cells = _criterion_cells(criterion, parts, names, later, warnings)
    index = pd.MultiIndex.from_frame(cells[["item_id", "system"]])
    verdicts = {n: _verdicts(parts[n], kind).set_axis(pd.MultiIndex.from_frame(parts[n][["item_id", "system"]]))
                .reindex(index).to_numpy(object) for n in names}
    for n in names:
        verdicts[n] = np.array([None if (v is None or (isinstance(v, float) and math.isnan(v))) else v
                                for v in verdicts[n]], object)
    rows = {n: parts[n].set_index(["item_id", "system"]).reindex(index) for n in names}
    chosen_signal = _chosen_signals(criterion, parts, names, kind, signals_asked)
    human_side = human_verdicts(labels, criterion, kind, cells)
    _check_human_kind(criterion, kind, labels, where, warnings)
    # A cell is labelled when the humans labelled it, or (pairwise) labelled both of its systems on that item.
    labelled = np.array([(i, s, criterion) in labelled_cells or (
        isinstance(s1, str) and (i, s1, criterion) in labelled_cells and (i, s2, criterion) in labelled_cells)
        for i, s, s1, s2 in zip(cells["item_id"], cells["system"], cells["system_1"], cells["system_2"])])
    is_cal = labelled & human_side.map(lambda h: h is not None).to_numpy()
    c = _Criterion(criterion, kind, cells, parts, rows, verdicts, chosen_signal, labelled, is_cal)
    c.conf, c.agree = _confidences(c, names, human_side, tolerance)
    return c


def _criterion_cells(criterion, parts, names, later, warnings) -> pd.DataFrame:
    """The cells are those of the judges that judge everything given to them (a later run judge's other judgments,
    made for an earlier state of the files, are not the cascade's)."""
    cells = pd.concat([p[["item_id", "system", "system_1", "system_2"]] for n, p in parts.items()
                       if n not in later]) \
        .drop_duplicates(["item_id", "system"]).sort_values(["item_id", "system"]).reset_index(drop=True)
    missing = {n: len(cells) - len(parts[n]) for n in names if len(parts[n]) < len(cells) and n not in later}
    if missing:
        warnings.append(f"{criterion}: the judges' files cover different cells ("
                        + ", ".join(f"{n} lacks {m}" for n, m in missing.items())
                        + " of " + f"{len(cells)}): a judge decides only the cells it judged; the rest pass on")
    return cells


def _chosen_signals(criterion, parts, names, kind, signals_asked) -> dict[str, str]:
    """Each judge's confidence signal: the one asked, or the best its file records (never chosen by the labels)."""
    chosen = {}
    for n in names:
        found = available_signals(parts[n], kind, len(names)) if not parts[n].empty else ["none"]
        asked = signals_asked.get(n)
        if asked and asked not in found and not parts[n].empty:  # a run judge yet to judge: not yet
            raise CalibrationError(f"--signal {n}={asked}: judge {n} does not record it for {criterion} "
                                   f"(it records: {', '.join(found)})")
        chosen[n] = asked or found[0]
    return chosen


def _check_human_kind(criterion, kind, labels, where, warnings) -> None:
    """Human labels of another kind than the judges' verdicts: text labels for scores are refused, numbers for labels
    compared as text."""
    mine = labels["criterion"] == criterion
    if kind == "likert" and labels.loc[mine, "label"].notna().any():
        raise CalibrationError(f"{where}: criterion {criterion!r}: the judges give scores, the human labels are "
                               "text labels: labels from another rubric or scale?")
    if kind == "categorical" and labels.loc[mine, "label"].isna().all() and labels.loc[mine, "score"].notna().any():
        warnings.append(f"{criterion}: the judges give labels and the humans numbers: compared as text")


def _confidences(c: _Criterion, names, human_side: pd.Series, tolerance) -> tuple[np.ndarray, np.ndarray]:
    """Each judge's confidence on every cell, and whether its verdict agrees with the humans on the calibration
    cells."""
    conf = np.full((len(c.cells), len(names)), np.nan)
    agree = np.zeros((len(c.cells), len(names)), bool)
    for k, n in enumerate(names):
        others = [c.verdicts[o] for o in names if o != n]
        for i, row in enumerate(c.rows[n].itertuples(index=False)):
            v = c.verdicts[n][i]
            conf[i, k] = _confidence(row, v, c.kind, c.signal[n], tolerance, [o[i] for o in others])
            if c.is_cal[i]:
                agree[i, k] = _agrees(v, human_side.iloc[i], c.kind, tolerance)
    return conf, agree


def _choose_test(c: _Criterion, units: str, alpha: float, delta: float) -> tuple[np.ndarray | None, str]:
    """The dialogues of the calibration cells when each dialogue is one unit of the test (else None), and the test's
    description; refuses too few labels for the guarantee to be reachable at all."""
    n_cal = int(c.is_cal.sum())
    need = min_labels(alpha, delta)
    if n_cal < need:
        raise CalibrationError(
            f"{c.name}: {n_cal} labelled cells, too few for alpha {alpha:g} and delta {delta:g}: even with no "
            f"disagreement at all, fewer than {need} accepted labelled cells cannot show agreement >= "
            f"{1 - alpha:g} at confidence {1 - delta:g}; label at least {need} cells of {c.name} (several times "
            f"that for useful coverage), or ask a larger alpha or delta")
    if c.labelled.all():
        raise CalibrationError(f"{c.name}: every judged cell has a human label: nothing to decide")
    groups = c.cells["item_id"].to_numpy()[c.is_cal]
    several = pd.Series(groups).value_counts().max() > 1
    if not (units == "dialogues" or (units == "auto" and several)):
        return None, f"exact binomial over {n_cal} labelled cells"
    # the betting test's largest stake is 0.75 / (1 - alpha): with no disagreement and every cell accepted
    # its wealth grows by at most 1 + 0.75 alpha / (1 - alpha) per dialogue, and must reach 1 / delta
    need_units = max(need, math.ceil(math.log(1 / delta) / math.log1p(0.75 * alpha / (1 - alpha)) - 1e-9))
    if len(set(groups)) < need_units:
        raise CalibrationError(
            f"{c.name}: {len(set(groups))} labelled dialogues, too few for alpha {alpha:g} and delta "
            f"{delta:g}: with dialogues as units even no disagreement at all needs {need_units}; label at "
            f"least {need_units} dialogues (several times that for useful coverage), or --units cells if the "
            "labelled cells were drawn one by one")
    return groups, (f"testing by betting over {len(set(groups))} labelled dialogues (their cells are not "
                    "independent: each dialogue is one unit)")


def _decide_criterion(c: _Criterion, names, out: _Tables, token_maps, *, alpha, delta, tolerance, units, steps,
                      path_cells, seed) -> None:
    """Fit the cascade's thresholds on one criterion, decide its unlabelled cells, and add its rows to `out`."""
    groups, out.tests[c.name] = _choose_test(c, units, alpha, delta)
    pool = ~c.labelled
    path_pool = path_sample(pool, path_cells, seed)
    lacking = {n: int(np.isnan(c.conf[path_pool, k]).sum()) for k, n in enumerate(names)}
    lacking = {n: m for n, m in lacking.items() if m > 0.1 * len(path_pool)}
    if lacking:
        out.warnings.append(f"{c.name}: " + ", ".join(f"{n} has no verdict on {m} of the {len(path_pool)} cells "
                                                      "that fix the path" for n, m in lacking.items())
                            + ": its thresholds are set as if it would not accept them (judge them for coverage)")
    fit = fit_cascade(c.conf[c.is_cal], c.agree[c.is_cal], c.conf[path_pool], alpha, delta, steps, groups=groups)
    first = decide(c.conf, fit.thresholds)
    out.agreement[c.name] = AGREEMENT_TEXT.get(c.kind, f"the verdict within {tolerance:g} points of the human mean")
    judged = np.column_stack([c.rows[n]["status"].notna().to_numpy() for n in names])
    out.pending += _pending(c, names, judged, np.union1d(path_pool, np.flatnonzero(c.is_cal)), pool, first)
    for i in np.nonzero(pool)[0]:
        k = first[i]
        out.decisions.append({"item_id": c.cells["item_id"].iloc[i], "system": c.cells["system"].iloc[i],
                              "criterion": c.name, "decided_by": names[k] if k >= 0 else HUMAN,
                              "verdict": c.verdicts[names[k]][i] if k >= 0 else None,
                              "confidence": c.conf[i, k] if k >= 0 else np.nan})
    out.thresholds += _threshold_rows(c, names, fit.thresholds, first, delta, by_dialogue=groups is not None)
    if fit.chosen < 0:
        out.warnings.append(f"{c.name}: no confident verdict could be guaranteed (agreement >= {1 - alpha:g} at "
                            f"{1 - delta:g}): every unlabelled cell goes to humans")
    path = fit.path.rename(columns={f"threshold_{k}": f"threshold_{n}" for k, n in enumerate(names)})
    out.paths.append(path.assign(criterion=c.name)[["criterion", *path.columns]])
    _signal_tables(c, names, tolerance, out)
    in_path = np.zeros(len(c.cells), bool)
    in_path[path_pool] = True
    out.cost += _cost(token_maps, names, c.cells, c.name, pool, first, c.signal, in_path, judged)
    for j, n in enumerate(names):
        mine = c.cells[judged[:, j]]
        out.judged.setdefault(n, []).append(mine[["item_id", "system"]].assign(criterion=c.name))


def _pending(c: _Criterion, names, judged: np.ndarray, fixing: np.ndarray, pool: np.ndarray, first: np.ndarray
             ) -> list[dict]:
    """A cascade run in rounds: each judge must judge the labelled cells and the cells that fix the path (`fixing`)
    first, then the cells every judge before it escalated; what it has not judged yet is pending (run it on them,
    then escalate again: the thresholds depend on the labelled and the path's cells only, so they settle once those
    are judged)."""
    waiting = set()
    for j, n in enumerate(names):
        waiting |= {(i, n) for i in fixing if not judged[i, j]}
    if not waiting:  # the thresholds are final only once every judge has judged those cells
        for i in np.nonzero(pool)[0]:
            if first[i] < 0:
                unjudged = next((j for j in range(len(names)) if not judged[i, j]), None)
                if unjudged is not None:
                    waiting.add((i, names[unjudged]))
    return [{"item_id": c.cells["item_id"].iloc[i], "system": c.cells["system"].iloc[i], "criterion": c.name,
             "judge": n} for i, n in sorted(waiting, key=lambda w: (names.index(w[1]), w[0]))]


def _threshold_rows(c: _Criterion, names, thresholds: np.ndarray, first: np.ndarray, delta: float, by_dialogue: bool
                    ) -> list[dict]:
    """thresholds.csv's rows of one criterion: each judge, the cascade, and the humans. The Clopper-Pearson bound
    only where the cells are independent (not with dialogues as units)."""
    cal_first, pool_first = first[c.is_cal], first[~c.labelled]
    cal_agree = c.agree[c.is_cal]
    rows = []
    total_n = total_e = 0
    for k, n in enumerate(names):
        mine = cal_first == k
        n_k = int(mine.sum())
        e_k = int((~cal_agree[mine, k]).sum())
        total_n, total_e = total_n + n_k, total_e + e_k
        rows.append({"criterion": c.name, "judge": n, "signal": c.signal[n], "threshold": thresholds[k],
                     "calibration_decided": n_k, "agreement": (n_k - e_k) / n_k if n_k else np.nan,
                     "agreement_bound": float(agreement_bound(e_k, n_k, delta)) if n_k and not by_dialogue
                     else np.nan,
                     "unlabelled_decided": int((pool_first == k).sum()),
                     "unlabelled_share": float((pool_first == k).mean())})
    rows.append({"criterion": c.name, "judge": "cascade", "signal": "", "threshold": np.nan,
                 "calibration_decided": total_n, "agreement": (total_n - total_e) / total_n if total_n else np.nan,
                 "agreement_bound": float(agreement_bound(total_e, total_n, delta))
                 if total_n and not by_dialogue else np.nan,
                 "unlabelled_decided": int((pool_first >= 0).sum()),
                 "unlabelled_share": float((pool_first >= 0).mean())})
    rows.append({"criterion": c.name, "judge": HUMAN, "signal": "", "threshold": np.nan,
                 "calibration_decided": int((cal_first < 0).sum()), "agreement": np.nan,
                 "agreement_bound": np.nan, "unlabelled_decided": int((pool_first < 0).sum()),
                 "unlabelled_share": float((pool_first < 0).mean())})
    return rows


def _signal_tables(c: _Criterion, names, tolerance, out: _Tables) -> None:
    """Each judge's risk-coverage curve on the calibration cells, and every signal its file records, compared."""
    for k, n in enumerate(names):
        out.curves.append(_risk_coverage(c.conf[c.is_cal, k], c.agree[c.is_cal, k], c.name, n, c.signal[n]))
        for s in (available_signals(c.parts[n], c.kind, len(names)) if not c.parts[n].empty else []):
            values = np.array([_confidence(row, c.verdicts[n][i], c.kind, s, tolerance,
                                           [c.verdicts[o][i] for o in names if o != n])
                               for i, row in enumerate(c.rows[n].itertuples(index=False))])
            out.signals.append(_signal_row(values[c.is_cal], c.agree[c.is_cal, k], c.name, n, s, s == c.signal[n]))


def _risk_coverage(conf: np.ndarray, agree: np.ndarray, criterion: str, judge: str, signal: str,
                   points: int = 50) -> pd.DataFrame:
    """The judge alone on the calibration cells: at each threshold (its distinct confidences, at most `points`), the
    share of cells it would accept and their agreement with humans."""
    finite = np.isfinite(conf)
    values = np.unique(conf[finite])[::-1]
    if len(values) > points:
        values = np.unique(np.quantile(conf[finite], np.linspace(1, 0, points), method="lower"))[::-1]
    rows = []
    for v in values:
        accepted = finite & (conf >= v)
        rows.append({"criterion": criterion, "judge": judge, "signal": signal, "threshold": float(v),
                     "coverage": float(accepted.mean()), "n_accepted": int(accepted.sum()),
                     "agreement": float(agree[accepted].mean())})
    return pd.DataFrame(rows, columns=["criterion", "judge", "signal", "threshold", "coverage", "n_accepted",
                                       "agreement"])


def _signal_row(conf, agree, criterion, judge, signal, used) -> dict:
    """How well a signal ranks agreeing verdicts above disagreeing ones on the calibration cells (AUROC; 0.5 = no
    better than chance). Shown only: the signal used is chosen by what the file records, never by this number."""
    from scipy.stats import rankdata

    finite = np.isfinite(conf)
    c, a = conf[finite], agree[finite]
    pos, neg = int(a.sum()), int((~a).sum())
    auc = np.nan
    if pos and neg:
        ranks = rankdata(c)
        auc = (ranks[a].sum() - pos * (pos + 1) / 2) / (pos * neg)
    return {"criterion": criterion, "judge": judge, "signal": signal, "used": used, "n": int(finite.sum()),
            "agreement": float(a.mean()) if len(a) else np.nan, "auroc": float(auc),
            "distinct_values": len(np.unique(c))}


def _cost(token_maps, names, cells, criterion, pool, first, chosen_signal, in_path, judged) -> list[dict]:
    """Tokens on the unlabelled cells: each judge runs on the cells that fix the path (every unlabelled cell unless
    --path-cells) and on those that reach it (every cell if a jury signal is used), against the strongest (last)
    judge alone. `judged` (cells x judges): the cells (labelled ones too) each judge has judged; the rest it was
    spared, against judging every cell."""
    rows = []
    jury = any(s == "jury" for s in chosen_signal.values())
    keys = [(i, s, criterion) for i, s in zip(cells["item_id"], cells["system"])]
    for k, n in enumerate(names):
        tokens = token_maps[n]
        reach = pool & ((first < 0) | (first >= k) | in_path) if not jury else pool
        values = [tokens.get(keys[i]) for i in np.nonzero(reach)[0]]
        alone = [tokens.get(keys[i]) for i in np.nonzero(pool)[0]]
        rows.append({"judge": n, "cells_run": int(reach.sum()), "pool": int(pool.sum()),
                     "judged": int(judged[:, k].sum()), "cells": len(cells),
                     "tokens": float(np.nansum([v for v in values if v is not None])) if tokens else np.nan,
                     "tokens_alone": float(np.nansum([v for v in alone if v is not None])) if tokens else np.nan})
    return rows


def _cost_table(rows: list[dict]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame(columns=COST_COLUMNS)
    frame = pd.DataFrame(rows).groupby("judge", sort=False).sum(min_count=1).reset_index()
    out = [{"what": f"judge {r.judge}", "cells_run": int(r.cells_run), "tokens": r.tokens, "judged": int(r.judged),
            "spared": int(r.cells - r.judged)} for r in frame.itertuples()]
    out.append({"what": "cascade", "cells_run": int(frame["cells_run"].sum()),
                "tokens": frame["tokens"].sum(min_count=1), "judged": int(frame["judged"].sum()),
                "spared": int((frame["cells"] - frame["judged"]).sum())})
    last = frame.iloc[-1]
    out.append({"what": f"strongest ({last['judge']}) alone", "cells_run": int(last["pool"]),
                "tokens": last["tokens_alone"], "judged": int(last["cells"]), "spared": 0})
    return pd.DataFrame(out, columns=COST_COLUMNS)


def _plan(decisions: pd.DataFrame, random_dialogues: int, seed: int) -> pd.DataFrame:
    """plan.csv for `judge export --plan DIR` (item_id,part,reason): every dialogue with a cell escalated to humans
    (part targeted), and `random_dialogues` dialogues drawn uniformly from all decided ones (part random: the
    sample `judge estimate` needs; targeted dialogues never enter its estimates)."""
    dialogues = sorted(set(decisions["item_id"]))
    escalated = decisions[decisions["decided_by"] == HUMAN].groupby("item_id")["criterion"].agg(
        lambda c: sorted(set(c)))
    counts = decisions[decisions["decided_by"] == HUMAN].groupby("item_id").size()
    rng = np.random.default_rng(seed)
    drawn = set(rng.choice(dialogues, size=min(random_dialogues, len(dialogues)), replace=False)) \
        if random_dialogues and dialogues else set()
    rows = []
    for item in dialogues:
        if item in drawn:
            rows.append({"item_id": item, "part": "random", "reason": "uniform draw of the decided dialogues",
                         "inclusion_probability": min(random_dialogues, len(dialogues)) / len(dialogues)})
        elif item in escalated.index:
            rows.append({"item_id": item, "part": "targeted",
                         "reason": f"escalated: {counts[item]} cell(s) ({', '.join(escalated[item])})",
                         "inclusion_probability": 1.0})
    return pd.DataFrame(rows, columns=["item_id", "part", "reason", "inclusion_probability"])
