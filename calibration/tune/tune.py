"""`judge tune`: is a candidate version of the judge better than the current one on the human labels, honestly?

Every candidate is measured on the labelled cells (item, system) of a criterion against the mean human score,
beside the current judge on the very same cells; the gain is the difference. One paired bootstrap of dialogues is
shared by every candidate (calibration.tune.gain): it gives each gain's two-sided interval, unadjusted, and the
one-sided step-down max-T of Romano & Wolf (2005) over every candidate tried, of every criterion, which gives each
a simultaneous lower bound. A candidate is accepted when that lower bound is above zero; of a criterion's accepted
ones the largest point gain is picked. Candidates built from the labels (few-shot
demonstrations, rubric edits) come in cross-fitted (calibration.tune.build): each fold's scores are from a version
built without that fold's dialogues, so no label shaped the score it is compared with.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..errors import CalibrationError
from ..result import Result
from .gain import INTERVALS, METRICS, Cells

CANDIDATE_COLUMNS = ["criterion", "candidate", "kind", "description", "n_labelled", "current", "value", "gain",
                     "ci_low", "ci_high", "lower_family", "p", "p_adjusted", "accepted"]
MIN_DIALOGUES = 10  # fewer labelled dialogues give no usable bootstrap of a correlation
KEY = ["item_id", "system"]
WIDTH = 120  # printed lines


@dataclass
class Candidate:
    """A candidate judge: its name, kind (judgments, few-shot, rubric-edit, decoding), what it is, and its scores
    on the labelled cells (a judgments file, or a frame in the judgments table's shape; cross-fitted when built
    from labels). `extra`: what the builder keeps to write the accepted version (calibration.tune.build)."""

    name: str
    kind: str
    description: str
    judgments: Any
    extra: dict = field(default_factory=dict)


@dataclass
class TuneResult(Result):
    verb: ClassVar[str] = "tune"

    candidates: pd.DataFrame  # CANDIDATE_COLUMNS
    judge_name: str
    metric: str
    interval: str
    alpha: float
    n_resamples: int
    seed: int
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rubric_files: dict[str, str] = field(default_factory=dict)  # "rubrics/NAME.yaml" -> text, the accepted version

    @property
    def accepted(self) -> pd.DataFrame:
        """One row per criterion: the accepted candidate with the largest point gain."""
        rows = self.candidates[self.candidates["accepted"]]
        return rows.sort_values("gain", ascending=False).drop_duplicates("criterion").sort_values("criterion")

    def files(self) -> dict[str, str]:
        table = self.candidates.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        return {"candidates.csv": table, **self.rubric_files}

    def text(self) -> str:
        level = f"{100 * (1 - self.alpha):g}%"
        lines = textwrap.wrap(
            f"judge tune: {self.candidates['candidate'].nunique()} candidate(s) on "
            f"{self.candidates['criterion'].nunique()} criteria against {self.judge_name}, item-level {self.metric} "
            f"with the mean human score, {self.n_resamples} dialogue resamples. interval: the gain's two-sided {level} "
            f"{self.interval} interval, unadjusted. family lower: the lower end of the gains' simultaneous {level} "
            f"bounds over every candidate tried (Romano-Wolf step-down max-T, {self.alpha / 2:g} below); a candidate "
            "is ACCEPTED when it is above zero.", WIDTH)
        for criterion, part in self.candidates.groupby("criterion", sort=True):
            lines.append(f"{criterion} (current {part['current'].iloc[0]:.3f}):")
            lines.append(f"  {'candidate':<22} {'kind':<11} {'value':>6} {'gain':>7}  {level + ' interval':<18}  "
                         f"{'family lower':>12}  {'p_adj':>6}  {'verdict':<8}  cells")
            for row in part.itertuples():
                mark = "ACCEPTED" if row.accepted else "rejected"
                lines.append(f"  {row.candidate:<22} {row.kind:<11} {row.value:>6.3f} {row.gain:>+7.3f}  "
                             f"[{row.ci_low:+.3f}, {row.ci_high:+.3f}]  {row.lower_family:>+12.3f}  "
                             f"{row.p_adjusted:>6.3g}  {mark:<8}  {row.n_labelled}")
        picked = self.accepted
        if picked.empty:
            lines.append("no candidate's gain is above zero at family level (every candidate tried accounted for)")
        for row in picked.itertuples():
            lines.append(f"picked for {row.criterion}: {row.candidate} ({row.description})")
        lines += [f"written: {name}" for name in self.rubric_files]
        lines += [line for note in self.notes for line in textwrap.wrap(f"note: {note}", WIDTH,
                                                                          subsequent_indent="  ")]
        return "\n".join(lines) + "\n"

    def report_html(self) -> str:
        import html

        notes = "".join(f"<p>{html.escape(note)}</p>" for note in self.notes)
        return (f"<h2>Candidates against {html.escape(self.judge_name)}</h2>"
                + self.candidates.to_html(index=False, float_format="%.3f") + notes)


def read_judge(name: str, source, failure_value: float | None = None) -> pd.DataFrame:
    """A judge's scores, as `select` reads judges: any file `calibrate` reads, a frame in the judgments table's
    shape, or a wide CSV (metric_scores.csv) whose column NAME holds the scores."""
    from ..io import read_judge_scores

    if isinstance(source, pd.DataFrame):
        return read_judge_scores(source)[0]
    path = Path(source)
    column = None
    if path.suffix.lower() == ".csv" and path.is_file():
        with path.open(encoding="utf-8-sig") as handle:
            header = [c.strip() for c in handle.readline().split(",")]
        if "score" not in header and name in header:
            column = name
    frame = read_judge_scores(path, score_column=column, failure_value=failure_value)[0]
    frame.attrs["path"] = str(path)
    return frame


def _check_options(metric: str, interval: str, alpha: float, n_resamples: int) -> None:
    if metric not in METRICS:
        raise CalibrationError(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if interval not in INTERVALS:
        raise CalibrationError(f"--interval must be one of {', '.join(INTERVALS)}, got {interval!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 0.5):
        raise CalibrationError(f"--alpha must be between 0 and 0.5, got {alpha!r}")
    if not (isinstance(n_resamples, int) and n_resamples >= 200):
        raise CalibrationError(f"--bootstrap must be a whole number of at least 200, got {n_resamples!r}")


def labelled_cells(judge: pd.DataFrame, source, human, scale=None, criteria=None, rubric=None
                   ) -> tuple[pd.DataFrame, list[str]]:
    """The mean human score of every labelled (item, system, criterion) of `criteria`, checked as every verb checks
    labels (on the judged items, on the rubric's scale: `rubric` names its file), and the notes (labels left out
    as demonstrations...)."""
    from ..humans import aggregate_humans
    from ..io import check_labels, judge_scales, read_human_labels

    if rubric is not None and not isinstance(source, pd.DataFrame):
        source = judge.assign()  # a frame whose attrs say where the judgments and their rubric are
        source.attrs.update(path=str(source_path(judge)), rubric_file=str(rubric))
    scales, notes = judge_scales(judge, scale, source)
    labels = read_human_labels(human, scales)
    check_labels(labels, judge, criteria=criteria)
    texts = labels[labels["label"].notna()]
    if criteria is not None:
        texts = texts[texts["criterion"].isin(criteria)]
    if not texts.empty:
        raise CalibrationError(f"criterion {texts['criterion'].iloc[0]!r} holds labels, not numbers: tune compares "
                               "numeric scores")
    cells = aggregate_humans(labels)
    if criteria is not None:
        missing = [c for c in criteria if c not in set(cells["criterion"])]
        if missing:
            raise CalibrationError(f"--criteria {','.join(criteria)}: no human label for {', '.join(missing)} "
                                   f"(the labels have {', '.join(sorted(set(cells['criterion'])))})")
        cells = cells[cells["criterion"].isin(criteria)]
    return cells, notes


def source_path(frame: pd.DataFrame):
    return frame.attrs.get("path", "")


def _scores(frame: pd.DataFrame, criterion: str) -> pd.Series:
    part = frame[(frame["criterion"] == criterion) | (frame["criterion"] == "*")]
    return part.set_index(KEY)["score"]


def _check_covers(name: str, source, frame: pd.DataFrame, criterion: str, cells: pd.DataFrame,
                  current: str) -> None:
    """A candidate must judge every labelled cell the current judge judged: a gain on other items is no gain."""
    judged = frame[(frame["criterion"] == criterion) | (frame["criterion"] == "*")]
    have = set(zip(judged["item_id"], judged["system"]))
    lacking = [(i, s) for i, s in zip(cells["item_id"], cells["system"]) if (i, s) not in have]
    if lacking:
        where = source if not isinstance(source, pd.DataFrame) else source.attrs.get("path", "(DataFrame)")
        raise CalibrationError(
            f"candidate {name} ({where}): no judgment of criterion {criterion!r} for {len(lacking)} of the "
            f"{len(cells)} labelled cells {current} judged (first: item {lacking[0][0]!r}, system {lacking[0][1]!r}); "
            "a candidate must judge the same items as the current judge")


def tune(judge, human, candidates: list[Candidate], *, judge_name: str = "current", criteria=None,
         metric: str = "kendall", alpha: float = 0.05, n_resamples: int = 1000, interval: str = "percentile",
         seed: int = 0, scale=None, failure_value: float | None = None, min_dialogues: int = MIN_DIALOGUES,
         rubric=None, notes=()) -> TuneResult:
    """Measure every candidate's gain over the current judge (`judge`: a judgments file or frame, or a wide CSV
    whose column `judge_name` holds it) on the labelled cells of `human`, and accept at most one per criterion.

    `candidates`: judgments already made (`--candidate NAME=FILE`) and versions built from the labels, cross-fitted
    (calibration.tune.build). Raises CalibrationError on bad input: a criterion absent, fewer than `min_dialogues`
    labelled dialogues, a candidate that does not judge the labelled cells, two candidates of one name.
    """
    from ..options import criteria_option, seed_option

    _check_options(metric, interval, alpha, n_resamples)
    seed = seed_option(seed)
    criteria = criteria_option(criteria)
    if not candidates:
        raise CalibrationError("no candidate to test: give --candidate NAME=FILE or --candidates few-shot,...")
    names = [c.name for c in candidates]
    for name in names:
        if names.count(name) > 1 or name == judge_name:
            raise CalibrationError(f"candidate name {name!r} is used twice (or is the current judge's): give each "
                                   "candidate a name of its own")
    current = read_judge(judge_name, judge, failure_value)
    cells, read_notes = labelled_cells(current, judge, human, scale, criteria, rubric)
    if criteria is None:  # every labelled criterion the current judge scores ("*": a metric scores them all)
        judged = set(current["criterion"])
        criteria = sorted(c for c in set(cells["criterion"]) if c in judged or "*" in judged)
    for criterion in criteria:
        if not ((current["criterion"] == criterion) | (current["criterion"] == "*")).any():
            raise CalibrationError(f"criterion {criterion!r}: the current judge {judge_name} has no judgment of it "
                                   f"(it has {', '.join(sorted(set(current['criterion'])))})")
    frames = {c.name: read_judge(c.name, c.judgments, failure_value) for c in candidates}
    studies: dict[tuple[str, str], Cells] = {}
    dialogues = {criterion: sorted(set(cells.loc[cells["criterion"] == criterion, "item_id"]))
                 for criterion in criteria}
    for criterion in criteria:
        part = cells[cells["criterion"] == criterion]
        if len(dialogues[criterion]) < min_dialogues:
            raise CalibrationError(f"criterion {criterion!r}: {len(dialogues[criterion])} labelled dialogue(s); tune "
                                   f"needs at least {min_dialogues} to resample dialogues")
        index = pd.MultiIndex.from_frame(part[KEY])
        now = _scores(current, criterion).reindex(index).to_numpy(float)
        code = {d: i for i, d in enumerate(dialogues[criterion])}
        for candidate in candidates:
            frame = frames[candidate.name]
            _check_covers(candidate.name, candidate.judgments, frame, criterion, part, judge_name)
            then = _scores(frame, criterion).reindex(index).to_numpy(float)
            usable = np.isfinite(now) & np.isfinite(then)
            studies[(criterion, candidate.name)] = Cells(
                now[usable], then[usable], part["human"].to_numpy(float)[usable],
                np.array([code[d] for d in part["item_id"].to_numpy()[usable]]))
    rows = _assess_all(studies, dialogues, metric, alpha, n_resamples, interval, seed)
    kinds = {c.name: (c.kind, c.description) for c in candidates}
    table = pd.DataFrame([{"criterion": criterion, "candidate": name, "kind": kinds[name][0],
                           "description": kinds[name][1], **{k: v for k, v in row.items() if k != "candidate"}}
                          for (criterion, name), row in rows.items()], columns=CANDIDATE_COLUMNS)
    out_notes = list(notes) + read_notes + [
        "the gain is measured on items drawn like the labelled ones and against the labelling policy of these "
        "annotators; labels used here must not be reused to estimate with the accepted judge (docs/verbs/tune.md)"]
    return TuneResult(table, judge_name, metric, interval, alpha, n_resamples, seed, notes=out_notes)


def _assess_all(studies: dict, dialogues: dict, metric, alpha, n_resamples, interval, seed) -> dict:
    """One family over every (criterion, candidate), read on one bootstrap of the dialogues of every criterion (a
    criterion takes its own dialogues' counts), so the family's max-T sees the criteria's dependence too."""
    from .gain import decide, dialogue_counts, paired_gain

    union = sorted(set().union(*dialogues.values()))
    position = {d: i for i, d in enumerate(union)}
    everything = dialogue_counts(len(union), n_resamples, np.random.default_rng(seed))
    gains = {}
    for criterion in dialogues:
        counts = everything[:, [position[d] for d in dialogues[criterion]]]
        for (crit, name), cells in studies.items():
            if crit == criterion:
                gains[(crit, name)] = paired_gain(metric, cells.current, cells.candidate, cells.human,
                                                  cells.dialogue, counts)
    rows = decide(gains, alpha, interval)
    return {key: {"n_labelled": len(studies[key].human), **row} for key, row in rows.items()}


__all__ = ["Candidate", "TuneResult", "tune", "CANDIDATE_COLUMNS"]
