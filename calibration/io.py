"""Reading human labels and judge scores (judgments JSONL or any CSV of scores) into tidy DataFrames.

Every problem is reported as one line naming the file, the line and what is wrong: a user should never have to
read a traceback, nor find out from an empty report that two files did not fit together.
"""

from __future__ import annotations

import csv
import io
import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from judge.annotation import LABEL_COLUMNS
from judge.errors import JudgeError
from judge.resources import read_text as read_user_text

from .cells import LABELS_FILE, label_at  # noqa: F401  (label_at: every verb's messages import it from here)
from .errors import CalibrationError

# The labels CSV `judge import` writes (judge.annotation.LABEL_COLUMNS): its first five columns are required.
HUMAN_COLUMNS = LABEL_COLUMNS[:5]
JUDGE_COLUMNS = ["item_id", "system", "criterion", "score", "label", "status", "line", "system_1", "system_2",
                 "rubric", "model"]
# status of one judge row: a usable number, a categorical/pairwise label, or why it has neither.
STATUSES = ("ok", "label", "na", "error", "abstain")
NA_TOKEN = "N/A"  # a human's "does not apply", as `judge import` writes it


@dataclass(frozen=True)
class HumanScale:
    """What one criterion's human scores may be: numbers (on points or within a range) or labels."""

    kind: str  # "numeric" or "labels"
    source: str  # where the scale comes from, for messages: "rubric dialsummeval@1", "--scale 1,5"
    points: tuple[float, ...] = ()  # a Likert rubric's points
    low: float | None = None
    high: float | None = None
    labels: tuple[str, ...] = ()  # a categorical rubric's labels
    abstain: frozenset[str] = field(default_factory=frozenset)  # labels that abstain ("I don't know")


class Scales(dict):
    """criterion -> HumanScale, as judge_scales returns them, with the (item_id, criterion) cells whose labels the
    judgments mark as demonstrations (`judge tune` put a label of that dialogue into the rubric): read_human_labels
    leaves those labels out, so a label that shaped the judge never counts as a label too."""

    demonstrations: frozenset = frozenset()


def demonstration_cells(judge: pd.DataFrame) -> frozenset:
    """(item_id, criterion) of every judgment marked `demonstration`."""
    if "demonstration" not in judge.columns:
        return frozenset()
    marked = judge[judge["demonstration"].fillna(False).astype(bool)]
    return frozenset(zip(marked["item_id"].astype(str), marked["criterion"].astype(str)))


def _demonstration_note(cells: frozenset) -> list[str]:
    if not cells:
        return []
    criteria = sorted({c for _, c in cells})
    return [f"the judgments mark {len({i for i, _ in cells})} dialogue(s) as demonstrations in the judge's rubric "
            f"({', '.join(criteria)}): their labels of those criteria are left out of the labelled cells, so no "
            "label that shaped the judge counts as a label"]


def _with_demonstrations(scales: dict, cells: frozenset) -> Scales:
    out = Scales(scales)
    out.demonstrations = cells
    return out


def scale_bounds(scales: dict[str, HumanScale]) -> dict[str, tuple[float, float]]:
    """(low, high) of each numeric scale, by criterion ("*": every criterion, from --scale): the bounds the human
    scores cannot leave, for the estimators' bounded-scale checks."""
    return {c: (s.low, s.high) for c, s in scales.items()
            if s.kind == "numeric" and s.low is not None and s.high is not None}


def range_scale(low: float, high: float) -> HumanScale:
    """The scale of `--scale MIN,MAX`: any number between the two."""
    return HumanScale("numeric", f"--scale {low:g},{high:g}", low=low, high=high)


def rubric_scales(refs, beside: Path | None = None, files=()) -> tuple[dict[str, HumanScale], list[str]]:
    """Human scales per criterion from the rubrics the judgments name ("dialsummeval@1"), and notes for the user.

    A rubric is looked for in `files` (the rubric file judge.score was given, for its DataFrame), as NAME.yaml (or
    .yml) in `beside`, the judgments' folder (where a study keeps its own rubric, as examples/study/toy.yaml), then
    among the bundled ones. One found nowhere is an error: without its
    scale a 99 on a 1-5 rubric would pass unseen and move every estimate (--scale MIN,MAX says the scale instead).
    Preference (pairwise) criteria get no scale: humans may give a verdict or per-system scores.
    """
    from judge.rubric import load_rubric  # pydantic and yaml: only when judgments name a rubric

    scales: dict[str, HumanScale] = {}
    notes = []
    for ref in sorted({r for r in refs if r}):
        name, _, version = ref.partition("@")
        local = [Path(f) for f in files if Path(f).stem == name]
        local += [beside / f"{name}{suffix}" for suffix in (".yaml", ".yml")] if beside is not None else []
        found = next((str(path) for path in local if path.is_file()), name)
        try:
            rubric = load_rubric(found)
        except JudgeError as exc:
            where = f" nor in {beside}" if beside is not None else ""
            raise CalibrationError(
                f"the judgments name rubric {ref}, which is not bundled{where} ({exc}): its scale is unknown, so "
                f"human scores cannot be checked; give --scale MIN,MAX (e.g. --scale 1,5) or put {name}.yaml "
                "beside the judgments") from None
        if version and rubric.version != version:
            notes.append(f"the judgments name {ref}, the rubric found is {rubric.ref}: its scales are used")
        source = f"rubric {rubric.ref}"
        for criterion in rubric.criteria:
            scale = criterion.scale
            if scale.type == "likert":
                points = tuple(float(v) for v in scale.values)
                scales.setdefault(criterion.id, HumanScale("numeric", source, points, min(points), max(points)))
            elif scale.type == "categorical":
                scales.setdefault(criterion.id, HumanScale(
                    "labels", source, labels=tuple(scale.values),
                    abstain=frozenset(c.value for c in scale.labels if c.abstain)))
    return scales, notes


def read_text(path: Path, what: str) -> str:
    """The file's text (a BOM dropped); missing, a directory, not UTF-8 or empty is a one-line error."""
    text = read_user_text(path, CalibrationError)
    if not text.strip():
        raise CalibrationError(f"{path}: the {what} file is empty")
    if "\0" in text:
        # UTF-16 without a byte-order mark decodes as "UTF-8" with a NUL after every ASCII letter.
        line = text.count("\n", 0, text.index("\0")) + 1
        raise CalibrationError(f"{path}:{line}: a NUL byte: not a text file, or UTF-16; save the {what} file as "
                               "UTF-8")
    return text


_PARSED: ContextVar[dict | None] = ContextVar("calibration_parsed_csv", default=None)


@contextmanager
def each_csv_parsed_once():
    """Within this block a CSV is parsed once however often it is read (the metric columns of one wide file given
    as several judges); the parse is kept only for the block, so a file edited later is read afresh."""
    token = _PARSED.set({})
    try:
        yield
    finally:
        _PARSED.reset(token)


def _read_csv(path: Path, what: str) -> pd.DataFrame:
    parsed = _PARSED.get()
    if parsed is None:
        return _parse_csv(path, what)
    key = (str(Path(path).resolve()), what)
    if key not in parsed:
        parsed[key] = _parse_csv(path, what)
    return parsed[key].copy()


def _parse_csv(path: Path, what: str) -> pd.DataFrame:
    """All cells as stripped strings ("" when blank), plus `line`: the physical line each record starts on.

    Read with the csv module rather than pandas so that line numbers stay right when a quoted cell spans
    several lines (a model's raw answer, for instance).
    """
    reader = csv.reader(io.StringIO(read_text(path, what), newline=""))
    try:
        header = [name.strip() for name in next(reader)]
        rows, lines, last = [], [], reader.line_num
        for record in reader:
            start, last = last + 1, reader.line_num
            if not any(cell.strip() for cell in record):
                continue
            if len(record) != len(header):
                raise CalibrationError(f"{path}:{start}: expected {len(header)} fields as in the header, "
                                       f"found {len(record)}")
            rows.append([cell.strip() for cell in record])
            lines.append(start)
    except csv.Error as exc:
        raise CalibrationError(f"{path}:{reader.line_num}: not a readable CSV file ({exc})") from None
    if len(set(header)) != len(header):
        raise CalibrationError(f"{path}:1: duplicate column names in the header")
    if not rows:
        raise CalibrationError(f"{path}: no rows below the header")
    frame = pd.DataFrame(rows, columns=header)
    frame["line"] = lines
    return frame


def _require_columns(frame: pd.DataFrame, path: Path, required: list[str]) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        columns = [str(c) for c in frame.columns if c != "line"]
        found = ", ".join(columns)
        glued = columns[0] if len(columns) == 1 else ""
        separator = next((name for sep, name in ((";", "';'"), ("\t", "tabs")) if sep in glued), None)
        hint = f" (the file is separated by {separator}: save it as comma-separated CSV)" if separator else ""
        raise CalibrationError(f"{path}:1: missing column(s) {', '.join(missing)}; found {found}{hint}")


def _check_blank(frame: pd.DataFrame, path: Path, columns: list[str]) -> None:
    for column in columns:
        blank = frame[column] == ""
        if blank.any():
            raise CalibrationError(f"{path}:{frame.loc[blank, 'line'].iloc[0]}: column {column!r} is empty")


def _number(text: str) -> float:
    """A finite number, or NaN for anything else ("four", "4/5", "nan", "inf")."""
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def _split_scores(frame: pd.DataFrame, path: Path, scales: dict[str, HumanScale]) -> pd.DataFrame:
    """Decide, per criterion, whether the human scores are numbers or labels, and check them.

    A criterion is numeric when its rubric says so, or (without a rubric) when most of its scores are numbers;
    then any text in it is an error. Otherwise every score is a label. A Likert rubric's scale bounds every
    score, and with two or more annotators a score must be one of its points (a mean-only release has means
    between points). Blank scores are cells nobody rated and are left out.
    """
    frame = frame[frame["score"] != ""].copy()
    # `judge import` writes N/A where an annotator said a gated criterion does not apply: not a score, not a label.
    frame["na"] = frame["score"].str.upper() == NA_TOKEN
    numbers = frame["score"].map(_number)
    frame["label"] = None
    frame["abstained"] = False
    for criterion, rows in frame[~frame["na"]].groupby("criterion", sort=False).groups.items():
        scale = scales.get(criterion, scales.get("*"))
        values = numbers.loc[rows]
        numeric = scale.kind == "numeric" if scale else values.notna().sum() * 2 >= len(values)
        if not numeric:
            text = frame.loc[rows, "score"]
            if scale and scale.labels:
                off = ~text.isin(scale.labels)
                if off.any():
                    raise CalibrationError(
                        f"{path}:{frame.loc[off[off].index[0], 'line']}: label {text[off].iloc[0]!r} of criterion "
                        f"{criterion!r} is not on the scale of {scale.source} ({', '.join(scale.labels)})")
            frame.loc[rows, "label"] = text
            frame.loc[rows, "abstained"] = text.isin(scale.abstain) if scale else False
            numbers.loc[rows] = np.nan
            continue
        if values.isna().any():
            first = values.index[values.isna()][0]
            raise CalibrationError(
                f"{path}:{frame.loc[first, 'line']}: score {frame.loc[first, 'score']!r} of criterion {criterion!r} "
                f"is not a number" + (f" ({scale.source})" if scale else " (its other scores are numbers)"))
        if scale is None:
            continue
        off = (values < scale.low) | (values > scale.high) if scale.low is not None else values.isna()
        several = frame.loc[rows].groupby(["item_id", "system"])["annotator"].transform("size").max() > 1
        if scale.points and several:
            off |= ~values.isin(scale.points)
        if off.any():
            first = off.index[off][0]
            allowed = (", ".join(f"{p:g}" for p in scale.points) if scale.points and several
                       else f"{scale.low:g} to {scale.high:g}")
            raise CalibrationError(
                f"{path}:{frame.loc[first, 'line']}: score {frame.loc[first, 'score']} of criterion {criterion!r} "
                f"is off the scale of {scale.source} ({allowed})")
    numbers[frame["na"]] = np.nan
    frame["score"] = numbers.astype(float)
    return frame


def load_human_labels(path: str | Path, scales: dict[str, HumanScale] | None = None) -> pd.DataFrame:
    """Long CSV `item_id,system,annotator,criterion,score` (extra columns kept).

    Returns the file with `score` a float (NaN for labels and N/A), `label` (text labels, None for numbers),
    `abstained` (a label that is the rubric's abstaining one), `na` (the annotator said N/A: the criterion does not
    apply to that summary) and `line`. `scales` (criterion -> HumanScale, from the
    judgments' rubric; key "*" for every criterion, as --scale gives) decides numbers vs labels and bounds the
    scores; a criterion without one is numeric when most of its scores are numbers.
    """
    path = Path(path)
    return _checked_labels(_read_csv(path, "human labels"), path, scales)


def _checked_labels(frame: pd.DataFrame, path, scales) -> pd.DataFrame:
    """load_human_labels's checks on a frame of stripped strings with a `line` column; the labels of demonstration
    dialogues (Scales.demonstrations) left out after the checks, their count in attrs["demonstration_labels"]."""
    demonstrations: frozenset = getattr(scales, "demonstrations", frozenset())
    frame = _checked_rows(frame, path, scales)
    if demonstrations:
        shown = pd.Series([cell in demonstrations for cell in zip(frame["item_id"], frame["criterion"])],
                          index=frame.index)
        frame = frame[~shown].reset_index(drop=True)
        frame.attrs["path"] = str(path)
        frame.attrs["demonstration_labels"] = int(shown.sum())
        if frame.empty:
            raise CalibrationError(f"{path}: every label is on a demonstration dialogue of the judge's rubric; "
                                   "label other dialogues")
    return frame


def _checked_rows(frame: pd.DataFrame, path, scales) -> pd.DataFrame:
    _require_columns(frame, path, HUMAN_COLUMNS)
    _check_blank(frame, path, ["item_id", "system", "annotator", "criterion"])
    frame = _split_scores(frame, path, scales or {})
    duplicated = frame.duplicated(["item_id", "system", "annotator", "criterion"])
    if duplicated.any():
        row = frame.loc[duplicated].iloc[0]
        raise CalibrationError(
            f"{path}:{row.line}: duplicate label for item {row.item_id!r}, system {row.system!r}, "
            f"annotator {row.annotator!r}, criterion {row.criterion!r}"
        )
    if frame.empty:
        raise CalibrationError(f"{path}: column 'score' holds no value")
    frame = frame.reset_index(drop=True)
    frame.attrs["path"] = str(path)  # for messages that point at a line of this file
    return frame


def read_human_labels(human, scales: dict[str, HumanScale] | None = None) -> pd.DataFrame:
    """Labels from a path (load_human_labels) or a DataFrame in its shape (or the CSV's five columns), checked
    alike: a frame given by a script gets the same scale and duplicate checks as a file. A list of them (a
    two-stage study's two label files): read one by one, then joined (several_label_files)."""
    if isinstance(human, (list, tuple)):
        return several_label_files(human, scales)
    if not isinstance(human, pd.DataFrame):
        return load_human_labels(human, scales)
    where = human.attrs.get("path", "human labels (DataFrame)")
    missing = [c for c in HUMAN_COLUMNS if c not in human.columns]
    if missing:
        raise CalibrationError(f"{where}: missing column(s) {', '.join(missing)}")

    def text(row) -> str:
        if isinstance(row.get("na"), (bool, np.bool_)) and row["na"]:
            return NA_TOKEN
        if "label" in human.columns and isinstance(row.get("label"), str):
            return row["label"]
        value = row["score"]
        if isinstance(value, str):
            return value.strip()
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(float(value))

    frame = pd.DataFrame({c: human[c].astype(str).str.strip() for c in ("item_id", "system", "annotator",
                                                                          "criterion")})
    frame["score"] = [text(row) for row in human.to_dict("records")]
    extra = [c for c in human.columns if c not in HUMAN_COLUMNS + ["line", "label", "abstained", "na"]]
    for column in extra:
        frame[column] = human[column].to_numpy()
    frame["line"] = human["line"].to_numpy() if "line" in human.columns else np.arange(len(human)) + 2
    if frame.empty:
        raise CalibrationError(f"{where}: no labels")
    return _checked_labels(frame.reset_index(drop=True), where, scales if scales is not None else {})


def several_label_files(sources, scales: dict[str, HumanScale] | None = None) -> pd.DataFrame:
    """The labels of several files (or frames) as one frame, each checked as read_human_labels checks one, then
    together: one cell labelled twice by one annotator across the files (the same file given twice, or a dialogue
    labelled in both stages) is an error naming both lines. Each row keeps its file in LABELS_FILE, so that every
    message still points at the right file and line (label_at)."""
    if not sources:
        raise CalibrationError("no human labels given")
    frames = [read_human_labels(source, scales) for source in sources]
    if len(frames) == 1:
        return frames[0]
    for frame in frames:
        if LABELS_FILE not in frame.columns:
            frame[LABELS_FILE] = frame.attrs.get("path", "human labels (DataFrame)")
    joined = pd.concat(frames, ignore_index=True)
    key = ["item_id", "system", "annotator", "criterion"]
    again = joined.duplicated(key)
    if again.any():
        row = joined.loc[again].iloc[0]
        first = joined.loc[(joined[key] == row[key]).all(axis=1)].iloc[0]
        raise CalibrationError(
            f"{label_at(joined, row)}: duplicate label for item {row.item_id!r}, system {row.system!r}, annotator "
            f"{row.annotator!r}, criterion {row.criterion!r}: already at {label_at(joined, first)} (the same file "
            "given twice, or a dialogue labelled in two stages?)")
    joined.attrs["path"] = " + ".join(dict.fromkeys(str(f.attrs.get("path")) for f in frames))
    return joined


def read_judge_scores(judgments, score_column: str | None = None, failure_value: float | None = None
                      ) -> tuple[pd.DataFrame, Path | str]:
    """(judgments, where they came from) from a path (load_judge_scores) or a DataFrame in its shape."""
    if not isinstance(judgments, pd.DataFrame):
        return load_judge_scores(judgments, score_column, failure_value=failure_value), Path(judgments)
    where = judgments.attrs.get("path", "judgments (DataFrame)")
    missing = [c for c in ("item_id", "system", "criterion", "score") if c not in judgments.columns]
    if missing:
        raise CalibrationError(f"{where}: missing column(s) {', '.join(missing)} (the shape load_judge_scores "
                               "returns)")
    frame = judgments.copy()
    defaults = {"label": None, "status": None, "line": np.arange(len(frame)) + 1, "system_1": None,
                "system_2": None, "rubric": "", "model": ""}
    for column, value in defaults.items():
        if column not in frame.columns:
            frame[column] = value
    frame["status"] = frame["status"].fillna(pd.Series(np.where(frame["score"].notna(), "ok", "error"),
                                                       index=frame.index))
    duplicated = frame.duplicated(["item_id", "system", "criterion"])
    if duplicated.any():
        row = frame.loc[duplicated].iloc[0]
        raise CalibrationError(f"{where}: a second judgment for item {row.item_id!r}, system {row.system!r}, "
                               f"criterion {row.criterion!r}")
    check_one_judge(frame, where)
    return frame.reset_index(drop=True), where


def _load_jsonl(path: Path) -> pd.DataFrame:
    """The judgments table (judge/table.py) of a JSONL file, each line checked for what a statistic cannot use."""
    from judge.judgment import read_judgments  # pydantic: only when a judgments file is read
    from judge.table import TABLE_COLUMNS, row_of

    rows = []
    for number, judgment in read_judgments(path):
        if judgment.score is not None and not math.isfinite(judgment.score):
            raise CalibrationError(f"{path}:{number}: field 'score' must be a finite number or null, "
                                   f"got {judgment.score}")
        for name in ("id", "system", "criterion"):
            if not getattr(judgment, name).strip():
                raise CalibrationError(f"{path}:{number}: field {name!r} is empty")
        rows.append(row_of(judgment, number))
    if not rows:
        raise CalibrationError(f"{path}: no judgments in the file")
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _load_score_csv(path: Path, score_column: str | None, failure_value: float | None = None) -> pd.DataFrame:
    frame = _read_csv(path, "scores")
    if "item_id" not in frame.columns and "id" in frame.columns:
        frame = frame.rename(columns={"id": "item_id"})
    _require_columns(frame, path, ["item_id", "system"])
    if score_column is not None:
        _require_columns(frame, path, [score_column])
        values = frame[score_column]
        # Wide form: one metric column, applied to every criterion (filled in by align()).
        criterion = frame["criterion"] if "criterion" in frame.columns else pd.Series("*", index=frame.index)
    else:
        if "criterion" not in frame.columns or "score" not in frame.columns:
            raise CalibrationError(
                f"{path}:1: a score CSV needs columns criterion and score (long form), "
                "or --score-column NAME for a wide file such as metric_scores.csv"
            )
        values, criterion = frame["score"], frame["criterion"]
    _check_blank(frame.assign(criterion=criterion), path, ["item_id", "system", "criterion"])
    column = score_column or "score"
    numbers = values.map(_number)
    # A blank cell is a failed or missing score; any other text is a mistake in the file.
    text = numbers.isna() & (values != "")
    if text.any():
        first = text.index[text][0]
        raise CalibrationError(f"{path}:{frame.loc[first, 'line']}: column {column!r} holds "
                               f"{values[first]!r}, not a number")
    if failure_value is not None:
        # A release that stores its failed judgments as a number (-1 "unparsed"): failures, not scores.
        numbers = numbers.mask(np.isclose(numbers.astype(float), float(failure_value)))
    if numbers.isna().all():
        raise CalibrationError(f"{path}: column {column!r} holds no number"
                               + (f" other than the failure value {failure_value:g}" if failure_value is not None
                                  else ""))
    pairs = frame["system"].str.partition("|")
    is_pair = frame["system"].str.contains("|", regex=False)
    return pd.DataFrame({
        "item_id": frame["item_id"], "system": frame["system"], "criterion": criterion,
        "score": numbers.astype(float), "label": None,
        "status": np.where(numbers.notna(), "ok", "error"), "line": frame["line"],
        "system_1": pairs[0].where(is_pair), "system_2": pairs[2].where(is_pair), "rubric": "",
        "model": frame["judge"] if "judge" in frame.columns else (score_column or ""),
    }, columns=JUDGE_COLUMNS)


def load_judge_scores(path: str | Path, score_column: str | None = None, *, one_judge: bool = True,
                      failure_value: float | None = None) -> pd.DataFrame:
    """Judge scores from the engine's judgments JSONL or from a CSV of scores.

    Returns columns item_id, system, criterion, score (NaN unless status == "ok"), label, status, line,
    system_1 / system_2 (the two systems of a pairwise row, else None), rubric and model.
    Criterion "*" means "the same score for every criterion" (a wide CSV with --score-column).
    `one_judge`: refuse a file that mixes rubrics or models (check_one_judge); a verb that compares judges
    on purpose passes False. `failure_value` (`--failure-value`): in a CSV, the number that stands for a failed
    judgment (e.g. -1), read as a failure; a JSONL records its failures itself.
    """
    from .options import failure_value_option

    path = Path(path)
    failure_value = failure_value_option(failure_value)
    if path.suffix.lower() == ".csv":
        frame = _load_score_csv(path, score_column, failure_value)
    else:
        if score_column is not None:
            raise CalibrationError(f"{path}: --score-column applies only to a CSV file of scores")
        try:
            frame = _load_jsonl(path)
        except CalibrationError:
            raise
        except JudgeError as exc:
            if "not UTF-8" in str(exc):
                read_user_text(path, CalibrationError)  # says on which line the bad byte is
            raise CalibrationError(str(exc)) from None
    key = ["item_id", "system", "criterion"]
    duplicated = frame.duplicated(key)
    if duplicated.any():
        row = frame.loc[duplicated].iloc[0]
        raise CalibrationError(
            f"{path}:{row.line}: a second judgment for item {row.item_id!r}, system {row.system!r}, "
            f"criterion {row.criterion!r}"
        )
    if one_judge:
        check_one_judge(frame, path)
    return frame.reset_index(drop=True)


def check_one_judge(judge: pd.DataFrame, path: str | Path) -> None:
    """Refuse judgments of two rubrics or two models in one file: ranking or estimating across judges mixes
    scales and biases, and every number built on it would be wrong without a word."""
    who = judge[["rubric", "model"]].fillna("").astype(str)
    judges = judge.assign(rubric=who["rubric"], model=who["model"]).drop_duplicates(["rubric", "model"])
    if len(judges) < 2:
        return
    named = [f"{'rubric ' + r.rubric if r.rubric else 'no rubric'} / {'model ' + r.model if r.model else 'no model'}"
             f" (from line {r.line})" for r in judges.head(3).itertuples()]
    more = f" and {len(judges) - 3} more" if len(judges) > 3 else ""
    raise CalibrationError(f"{path}: judgments of {len(judges)} judges in one file: {'; '.join(named)}{more}; "
                           "numbers across judges are not comparable: split the file by rubric and model and run "
                           "each on its own")


def judge_scales(judge: pd.DataFrame, scale: tuple[float, float] | None = None, source=None, required: bool = False
                 ) -> tuple[dict[str, HumanScale], list[str]]:
    """The human scales to check labels against: `--scale MIN,MAX` when given, else the rubric's the judgments name
    (calibrate, screen and estimate alike), looked for beside `source`, the judgments as given (a path, or a frame
    whose attrs name its file and the rubric file it was judged with)."""
    shown = demonstration_cells(judge)
    from .options import scale_option

    bounds = scale_option(scale)
    if bounds is not None:
        low, high = bounds
        return _with_demonstrations({"*": range_scale(low, high)}, shown), _demonstration_note(shown)
    refs = judge["rubric"].dropna().unique()
    if required and not any(refs):
        # A CSV of metric scores names no rubric: a 99 among 1-5 labels would move every estimate unseen.
        raise CalibrationError("the judgments name no rubric, so the human scores' scale is unknown: give --scale "
                               "MIN,MAX (e.g. --scale 1,5) so that every label is checked")
    attrs = source.attrs if isinstance(source, pd.DataFrame) else {"path": source}
    path = attrs.get("path")
    beside = Path(path).parent if isinstance(path, (str, Path)) and Path(path).is_file() else None
    files = [attrs["rubric_file"]] if attrs.get("rubric_file") else []
    scales, notes = rubric_scales(refs, beside, files)
    return _with_demonstrations(scales, shown), notes + _demonstration_note(shown)


def check_labels(labels: pd.DataFrame, judge: pd.DataFrame, path: str | Path | None = None,
                 criteria=None) -> tuple[pd.DataFrame, int]:
    """Every label must land on something judged; returns the judgments with a failed judgment added for each
    labelled cell that has no judgment line, and how many were added.

    A label on a dialogue or a system the judgments never mention, or on a criterion no judgment has (a typo such as
    `Clarity`), is an error naming its line. A labelled (dialogue, system, criterion) that the judgments skip (a
    published score file that dropped unparseable outputs) is a judgment that failed: it stays in the population and
    is imputed as the engine's failures are. `criteria`: only these criteria are used (the others' labels are
    still checked).
    """
    from .cells import labels_on_judged

    labels_on_judged(labels, "item_id", set(judge["item_id"]),
                     lambda row: f"item {row.item_id!r} is not in the judgments", path)
    pairs = judge[judge["system_1"].notna()]
    systems = set(judge.loc[judge["system_1"].isna(), "system"]) | set(pairs["system_1"]) | set(pairs["system_2"])
    labels_on_judged(labels, "system", systems, lambda row: f"system {row.system!r} is not in the judgments (they "
                     f"have {', '.join(sorted(map(str, systems)))})", path)
    judged = set(judge["criterion"])
    if "*" not in judged:
        labels_on_judged(labels, "criterion", judged, lambda row: f"criterion {row.criterion!r} matches no judged "
                         f"criterion; the judgments have {', '.join(sorted(judged))}", path)
    pointwise = judge[judge["system_1"].isna()]
    wildcard = "*" in judged
    key = ["item_id", "system"] if wildcard else ["item_id", "system", "criterion"]
    cells = labels[labels["score"].notna() | labels.get("na", False)]
    if criteria is not None:
        cells = cells[cells["criterion"].isin(criteria)]
    # Only criteria the judge scores one system at a time can miss a cell (a pairwise criterion has no such cell).
    if not wildcard:
        cells = cells[cells["criterion"].isin(set(pointwise["criterion"]))]
    cells = cells[key].drop_duplicates()
    missing = cells.merge(pointwise[key].drop_duplicates(), on=key, how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"][key]
    if missing.empty:
        return judge, 0
    added = missing.assign(criterion="*" if wildcard else missing["criterion"], score=np.nan, label=None,
                           status="error", line=0, system_1=None, system_2=None,
                           rubric=judge["rubric"].iloc[0], model=judge["model"].iloc[0])[JUDGE_COLUMNS]
    extra = [c for c in judge.columns if c not in JUDGE_COLUMNS]
    return pd.concat([judge, added.assign(**{c: None for c in extra})], ignore_index=True), len(added)


def human_na_cells(judge: pd.DataFrame, labels: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The judgments with each cell the humans called N/A (and scored no number) marked N/A: the criterion does
    not apply there, so the cell leaves that criterion's population, as a judge's N/A does. Returns the count."""
    if "na" not in labels or not labels["na"].any():
        return judge, 0
    key = ["item_id", "system", "criterion"]
    scored = set(map(tuple, labels.loc[labels["score"].notna(), key].to_numpy()))
    cells = {c for c in map(tuple, labels.loc[labels["na"], key].to_numpy()) if c not in scored}
    hit = pd.Series([c in cells for c in zip(judge["item_id"], judge["system"], judge["criterion"])],
                    index=judge.index)
    judge = judge.copy()
    judge.loc[hit, "status"] = "na"
    judge.loc[hit, "score"] = np.nan
    return judge, len(cells)


def judge_differences(reference_prints, new_prints) -> list[str]:
    """What differs between how two runs' paired judgments were produced, from their fingerprints (model, rubric
    version, template, decoding, item content), most frequent first with counts; [] for one judge. Judgments
    without a fingerprint (CSVs, older files) are not compared."""
    from collections import Counter

    from judge.judgment import changes

    found: Counter = Counter()
    for old, new in zip(reference_prints, new_prints):
        if isinstance(old, dict) and isinstance(new, dict) and old != new:
            found.update(changes(old, new))
    return [f"{what} ({count} judgments)" for what, count in found.most_common()]
