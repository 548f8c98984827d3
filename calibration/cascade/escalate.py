"""`judge escalate`: which verdicts may stand without a human, with a guaranteed agreement rate (selective judging and
cascades, after Jung, Brahman & Choi, "Trust or Escalate", ICLR 2025).

Judges are given cheapest first. The (item, system, criterion) cells that carry human labels are the calibration set;
every other cell a judge judged is decided: the first judge whose confidence reaches its threshold keeps its verdict,
and a cell no judge is confident about goes to humans.

The guarantee is for the cascade as a whole, per criterion: with probability >= 1 - delta over the draw of the
calibration set, the verdicts the cascade accepts (whichever judge gave them) agree with humans at a rate >= 1 - alpha,
for cells drawn like the calibration cells. The modules of this family:
- `threshold_tests.py`: the statistics (the label-free path through the joint thresholds, the fixed-sequence exact
  binomial test along it, testing by betting over dialogues);
- `verdicts.py`: each judge's verdict, its confidence signal, and agreement with the humans;
- `walk.py`: the cascade walk over the criteria (read, fit, decide) and the tables it builds;
- this module: the verb (its options, the rounds of run judges) and its result (tables and printing).

A judge given as run options is judged by the cascade itself (`runs.py`, through `judge.run`), round by round as a
user would: the labelled cells and the cells that fix the path first, then the cells every judge before it
escalated. The thresholds depend on those first cells only (the path's sample is drawn from the cells and the seed,
never from a confidence or a label), so the statistics are those of the judge run on every cell; the cells it never
judged are what `cost.csv` counts as spared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..errors import CalibrationError
from ..options import criteria_option, judges_option, must_be, seed_option
from ..result import Result
from .threshold_tests import PATH_STEPS
from .walk import DECISION_COLUMNS, HUMAN, PENDING_COLUMNS, _signal_map, walk_cascade

UNITS = ("auto", "cells", "dialogues")
# what --output-dir receives (plan.* only with a plan): checked before any judge runs
TABLE_FILES = ("decisions.csv", "thresholds.csv", "path.csv", "risk_coverage.csv", "signals.csv", "cost.csv",
               "pending.csv", "plan.csv", "plan.json")
EXCHANGEABILITY = ("that the labelled cells are a random sample of the cells decided (exchangeable with them): the "
                   "guarantee is over the draw of the calibration set, for cells drawn like it, not a promise about "
                   "any one small batch")


# -- the result -----------------------------------------------------------------------------------------------------


@dataclass
class EscalateResult(Result):
    """What `judge escalate` decided: one row per unlabelled cell, the thresholds, the tested path, risk-coverage."""

    verb: ClassVar[str] = "escalate"

    decisions: pd.DataFrame
    thresholds: pd.DataFrame
    path: pd.DataFrame
    risk_coverage: pd.DataFrame
    signals: pd.DataFrame
    cost: pd.DataFrame
    alpha: float
    delta: float
    tolerance: float
    judges: list[str]
    agreement: dict[str, str]  # criterion -> how agreement was defined there
    plan: pd.DataFrame | None = None
    seed: int = 0
    tests: dict[str, str] = field(default_factory=dict)  # criterion -> the test used
    # cells every judge before `judge` escalated but `judge` has not judged: what to run it on next
    pending: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PENDING_COLUMNS))
    warnings: list[str] = field(default_factory=list)
    # judge -> the cells (item_id, system, criterion) it has judged: what escalate asks a run judge again
    judged: dict = field(default_factory=dict, repr=False)

    def decisions_csv(self) -> str:
        frame = self.decisions.copy()
        frame["confidence"] = frame["confidence"].map(lambda v: "" if pd.isna(v) else f"{v:.6g}")
        frame["verdict"] = frame["verdict"].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v))
                                                else (f"{v:g}" if isinstance(v, float) else str(v)))
        return frame[DECISION_COLUMNS].to_csv(index=False)

    def files(self) -> dict[str, str]:
        out = {"decisions.csv": self.decisions_csv(), "thresholds.csv": self.thresholds.to_csv(index=False),
               "path.csv": self.path.to_csv(index=False), "risk_coverage.csv": self.risk_coverage.to_csv(index=False),
               "signals.csv": self.signals.to_csv(index=False), "cost.csv": self.cost.to_csv(index=False),
               "pending.csv": self.pending.to_csv(index=False)}
        if self.plan is not None and len(self.plan):
            import hashlib
            import json

            text = self.plan.to_csv(index=False)
            out["plan.csv"] = text
            out["plan.json"] = json.dumps({
                "version": 1, "made_by": "judge escalate", "unit": "dialogue",
                "random_dialogues": int((self.plan["part"] == "random").sum()), "seed": self.seed,
                "plan_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "note": "targeted: dialogues with a cell escalated to humans; random: a uniform draw of the "
                        "dialogues with unlabelled cells (only this part may enter judge estimate)"}, indent=1) + "\n"
        return out

    def coverage(self, criterion: str | None = None) -> float:
        part = self.decisions if criterion is None else self.decisions[self.decisions["criterion"] == criterion]
        return float((part["decided_by"] != HUMAN).mean()) if len(part) else float("nan")

    def text(self) -> str:
        """What was decided, in lines of at most 120 columns (a judge name up to 14 characters keeps the table's)."""
        lines = _wrap(f"Guarantee, per criterion: with probability >= {1 - self.delta:g} over the draw of the "
                      f"calibration set, the verdicts the cascade accepts (whichever judge) agree with humans at >= "
                      f"{1 - self.alpha:g}; one fixed-sequence test along a label-free path through the joint "
                      f"thresholds. Assumes {EXCHANGEABILITY}.")
        lines += _wrap(f"Judges, cheapest first: {', '.join(self.judges)}")
        for criterion, part in self.thresholds.groupby("criterion", sort=False):
            decided = self.decisions[self.decisions["criterion"] == criterion]
            lines.append(f"\n{criterion}: {len(decided)} unlabelled cells, {self.coverage(criterion):.1%} decided "
                         "without humans")
            lines += _wrap(f"agreement = {self.agreement[criterion]}", indent="  ")
            lines += _wrap(f"test: {self.tests[criterion]}", indent="  ")
            for row in part.itertuples():
                threshold = ("accepts none" if not np.isfinite(row.threshold) else f">= {row.threshold:.4g}") \
                    if row.judge not in ("cascade", HUMAN) else ""
                agree = "" if not np.isfinite(row.agreement) else f"  agreement {row.agreement:.3f}"
                bound = "" if not np.isfinite(row.agreement_bound) else f" (>= {row.agreement_bound:.3f})"
                lines.append(f"  {row.judge:<14} {row.signal:<8} {threshold:<14} calibration "
                             f"{row.calibration_decided:>5}"
                             f"{agree}{bound}  unlabelled {row.unlabelled_decided:>6} ({row.unlabelled_share:.1%})")
        below = self.thresholds[~self.thresholds["judge"].isin(["cascade", HUMAN])
                                & (self.thresholds["agreement"] < 1 - self.alpha)]
        if len(below):
            lines += [""] + _wrap("Note: the guarantee is for every accepted verdict together; a judge's own share may "
                                  f"lie below {1 - self.alpha:g} when another's lies above (here: "
                                  + ", ".join(f"{r.criterion} {r.judge} {r.agreement:.3f}" for r in below.itertuples())
                                  + ")")
        if len(self.pending):
            lines.append("\nNot judged yet by the judge whose turn it is (pending.csv; run it on them, then again):")
            lines += [f"  {j}: {c} cell(s)" for j, c in self.pending.groupby("judge", sort=False).size().items()]
        spared = self.cost[self.cost["what"].str.startswith("judge ") & (self.cost["spared"] > 0)]
        if len(spared):
            lines.append("\nSpared (against judging every cell, labelled ones included):")
            lines += [f"  {r.what.removeprefix('judge ')} judged {r.judged:,} of {r.judged + r.spared:,} cells, "
                      f"{r.spared:,} judgments spared ({r.spared / (r.judged + r.spared):.0%})"
                      for r in spared.itertuples()]
        if not self.cost.empty and self.cost["tokens"].notna().any():
            lines.append("\nCost (tokens on the unlabelled cells):")
            lines += [f"  {r.what:<30} {r.tokens:>14,.0f}" for r in self.cost.itertuples() if pd.notna(r.tokens)]
        return "\n".join(lines) + "\n"

    def report_html(self) -> str:
        from .report import escalate_section

        return escalate_section(self)

    def __str__(self) -> str:
        return self.text()


def _wrap(text: str, indent: str = "") -> list[str]:
    """A sentence of the printed summary in lines of at most 120 columns (words never split)."""
    import textwrap

    return textwrap.wrap(text, 120, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False)


# -- the verb ---------------------------------------------------------------------------------------------------------


def _share_option(value, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < float(value) < 1.0):
        raise CalibrationError(must_be(flag, "between 0 and 1 (both excluded)", value))
    return float(value)


def escalate(human, judges, *, alpha: float, delta: float, criteria=None, tolerance: float = 0.5, signal=None,
             units: str = "auto", scale=None, failure_value: float | None = None, steps: int = PATH_STEPS,
             path_cells: int | None = None, random_dialogues: int = 0, seed: int = 0, judgments_dir=None,
             base_url=None) -> EscalateResult:
    """Decide every unlabelled cell of the judges' files (name -> path or DataFrame, cheapest first) by a cascade
    whose accepted verdicts agree with the human labels (`human`: the calibration set) at >= 1 - alpha with
    probability >= 1 - delta.

    A judge may also be given as run options (a `judge.options.RunOptions`, a dict of them, or a .json / .toml file of
    them: see calibration/cascade/runs.py): escalate then runs it itself, through `judge.run`, on the cells the
    cascade needs from it only (the labelled cells, the cells that fix the path, and those every judge before it
    escalated), into `judgments_dir`/NAME.jsonl, and carries on down the cascade once its run is complete.
    `base_url`: the servers of the run judges whose options name none. A failed or batch-pending run raises
    `RunStopped` (its exit_code), an interrupted one KeyboardInterrupt; no decision is made then.

    >>> import calibration
    >>> result = calibration.escalate("examples/escalate/labels.csv",
    ...     {"small": "examples/escalate/small.jsonl", "large": "examples/escalate/large.jsonl"}, alpha=0.2, delta=0.1)
    >>> sorted(set(result.decisions["decided_by"])) <= ["human", "large", "small"]
    True
    """
    from pathlib import Path

    from .runs import is_run_judge, judge_cells, load_run_judge

    options = _checked_options(alpha=alpha, delta=delta, criteria=criteria, tolerance=tolerance, signal=signal,
                               units=units, scale=scale, failure_value=failure_value, steps=steps,
                               path_cells=path_cells, random_dialogues=random_dialogues, seed=seed)
    listed = judges_option(judges, "escalate", 1, reserved=(HUMAN, "cascade"))
    _signal_map(signal, [n for n, _ in listed])  # refused before any judge runs
    if isinstance(base_url, (str, Path)):
        base_url = [str(base_url)]
    runs = {n: load_run_judge(n, s, base_url) for n, s in listed if is_run_judge(s)}
    if runs and judgments_dir is None:
        raise CalibrationError(f"judge {next(iter(runs))} is given as run options: its judgments need a folder "
                               "(--output-dir DIR; judgments_dir= in Python), where a rerun resumes them")
    files = _run_files(human, listed, runs, judgments_dir)
    first = listed[0][0]
    if first in runs:
        # every cell passes the cheapest judge first: it judges every item of its input, and its cells are the
        # cascade's cells (the later judges are asked for some of them only)
        judge_cells(first, runs[first], _every_cell(runs[first], options["criteria"], human, options["scale"]),
                    files[first])
    later = set(runs) - {first}
    asked_before = set()
    # Each later judge runs at least once per call, on what its file holds at least: the run checks those
    # judgments were asked as its options ask now (another model, template or decoding is refused, naming
    # --redo-changed) before any decision uses them; a run with nothing to do starts no server.
    unchecked = {n for n in later if files[n].is_file()}
    while True:
        sources = [(n, _run_source(n, files[n], runs[n]) if n in runs else s) for n, s in listed]
        result = EscalateResult(**walk_cascade(human, sources, later=later, **options))
        wanted = result.pending[result.pending["judge"].isin(later)]
        due = set(wanted["judge"]) | unchecked
        if not due:
            break
        # Round by round, as a user would run them: first the cells that fix the thresholds (labelled and path
        # cells, for every judge), then the cells every judge before it escalated; each run also plans what the
        # judge's file holds already, so the run checks them too (and skips them).
        for name in [n for n in runs if n in due]:
            unchecked.discard(name)
            cells = _asked_cells(wanted[wanted["judge"] == name], result.judged.get(name))
            request = frozenset((name, c, *cell) for c, part in cells.items() for cell in part)
            if request in asked_before:  # a run that completes judges what it was asked: never loop on it
                raise CalibrationError(f"judge {name} was asked for the same cells twice and {files[name]} still "
                                       "lacks some of them: is its input the items the other judges judged?")
            asked_before.add(request)
            judge_cells(name, runs[name], cells, files[name])
    if later and options["path_cells"] is None:
        result.warnings.append("without --path-cells every unlabelled cell fixes the path, so "
                               f"{', '.join(sorted(later))} judged every cell: --path-cells N (e.g. a few hundred) "
                               "spares a later judge the cells the judges before it keep")
    if base_url and not runs:  # said, not refused: a script may pass its server to every escalate it runs
        result.warnings.append("--base-url is the server of the judges given as run options, and no --judge is "
                               "(NAME=OPTIONS.toml or .json): it was not used")
    return result


def _run_files(human, listed, runs: dict, judgments_dir) -> dict:
    """Where each run judge's judgments go (`judgments_dir`/NAME.jsonl), never onto an input of this run."""
    from pathlib import Path

    from .runs import judgments_path

    files = {n: judgments_path(judgments_dir, n) for n in runs}
    given = [Path(str(s)) for n, s in listed if n not in runs and isinstance(s, (str, Path))] + \
        ([Path(str(human))] if isinstance(human, (str, Path)) else [])
    for name, path in files.items():
        if any(g.exists() and path.exists() and g.samefile(path) for g in given):
            raise CalibrationError(f"judge {name}'s judgments would go to {path}, which is an input of this run: "
                                   "choose another --output-dir or another NAME")
    return files


def _asked_cells(*parts) -> dict[str, set]:
    """criterion -> the (item, system) cells a run judge is asked for: its pending cells and those its file holds."""
    cells: dict[str, set] = {}
    for part in parts:
        if part is not None:
            for item, system, criterion in zip(part["item_id"], part["system"], part["criterion"]):
                cells.setdefault(criterion, set()).add((item, system))
    return cells


def _checked_options(*, alpha, delta, criteria, tolerance, signal, units, scale, failure_value, steps, path_cells,
                     random_dialogues, seed) -> dict:
    """The options of the cascade, checked with the CLI's words before any file is read or any judge runs."""
    alpha, delta = _share_option(alpha, "--alpha"), _share_option(delta, "--delta")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (tolerance >= 0):
        raise CalibrationError(must_be("--tolerance", "a number of score points >= 0", tolerance))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise CalibrationError(must_be("--steps", "a positive whole number", steps))
    if path_cells is not None and (isinstance(path_cells, bool) or not isinstance(path_cells, int) or path_cells < 1):
        raise CalibrationError(must_be("--path-cells", "a positive whole number", path_cells))
    if isinstance(random_dialogues, bool) or not isinstance(random_dialogues, int) or random_dialogues < 0:
        raise CalibrationError(must_be("--random-dialogues", "a whole number of at least 0", random_dialogues))
    if units not in UNITS:
        raise CalibrationError(must_be("--units", "one of " + ", ".join(UNITS), units))
    return dict(alpha=alpha, delta=delta, criteria=criteria_option(criteria), tolerance=tolerance, signal=signal,
                units=units, scale=scale, failure_value=failure_value, steps=steps, path_cells=path_cells,
                random_dialogues=random_dialogues, seed=seed_option(seed))


def _run_source(name: str, path, judge) -> pd.DataFrame:
    """What a run judge has judged so far (its judgments file, or no judgment yet), naming the file and the rubric
    it judges with (the scale the human labels are checked against)."""
    from judge.rubric import resolve_rubric_path
    from judge.table import TABLE_COLUMNS

    from ..io import load_judge_scores

    frame = pd.DataFrame(columns=TABLE_COLUMNS)
    if path.is_file() and path.stat().st_size > 0:
        try:
            frame = load_judge_scores(path)
        except CalibrationError as exc:
            raise CalibrationError(f"judge {name}'s judgments file is not one this tool wrote ({exc}): it is left "
                                   "untouched; move it away or choose another --output-dir") from None
    frame.attrs.update(path=str(path), rubric_file=str(resolve_rubric_path(judge.options.rubric)),
                       tokens_from=str(path))
    return frame


def _every_cell(judge, criteria, human, scale) -> dict[str, set]:
    """Every (item, system) of a run judge's input, for escalate's criteria (default: those of its rubric's that
    the human labels have: a criterion without labels cannot be decided, so it is not paid for). The labels are read
    and checked against the rubric's scales first: a bad label is refused before the judge runs, not after."""
    from judge.items import ItemFile
    from judge.rubric import load_rubric, resolve_rubric_path

    from ..io import judge_scales, read_human_labels
    from ..options import scale_option

    rubric = load_rubric(judge.options.rubric)
    named = pd.DataFrame({"rubric": [rubric.ref]})
    named.attrs["rubric_file"] = str(resolve_rubric_path(judge.options.rubric))
    labels = read_human_labels(human, judge_scales(named, scale_option(scale), named)[0])
    chosen = rubric.select(criteria)
    if criteria is None:
        labelled = set(labels["criterion"].astype(str))
        chosen = [c for c in chosen if c.id in labelled]
        if not chosen:
            raise CalibrationError(f"the human labels name no criterion of rubric {rubric.name!r} "
                                   f"({', '.join(c.id for c in rubric.criteria)}), which the first judge judges with")
    keys = {(item.id, item.system) for item in ItemFile(judge.options.input, rubric.inputs)}
    return {c.id: keys for c in chosen}

