"""Filled sheets back to the long labels CSV, through the key that undoes the shuffle.

Every answer is checked against the key and the rubric before anything is written: a task or a letter the key
does not know, an answer off the scale, a column no criterion has, or a missing annotator stops the import with
one line naming the file and the line (or the task's entry). Qualification answers are scored against the
rubric's expected answers and never written; repeated identical pairs (and pairs whose two sides are the same
text) must be ties, and each one that is not is reported.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from judge.annotation import LABEL_COLUMNS, NA, OTHER, default_mode
from judge.annotation.package import Submission, Task, allows_na, answer_fields, context_names, parse_field
from judge.annotation.plan import load_key
from judge.errors import InputError, OutputError
from judge.rubric import Criterion, Rubric

SWAP = {"1": "2", "2": "1", "0": "0"}


@dataclass
class AnnotatorTally:
    tasks: int = 0
    labels: int = 0
    na: int = 0
    abstained: int = 0
    blank: int = 0  # answer cells left empty


@dataclass
class ImportResult:
    rows: list[dict]
    annotators: dict[str, AnnotatorTally]
    qualification: dict[str, dict[str, list[int]]]  # annotator -> criterion -> [agree, asked]
    threshold: float | None
    failed_checks: list[str]  # one sentence each
    checks: int  # tie checks answered
    ignored: int = 0  # answers to criteria that do not apply to the candidate
    cancelled: int = 0  # skipped annotations in a Label Studio export
    notes: list[str] = field(default_factory=list)  # what was read but not used (an annotator's extra column)

    def passed(self, annotator: str) -> bool:
        threshold = self.threshold
        assert threshold is not None, "a qualification answered comes with the rubric's threshold"
        return all(agree / asked >= threshold for agree, asked in self.qualification[annotator].values())


def _canonical(c: Criterion, raw: str, where: str, name: str) -> str:
    """The answer as the labels CSV writes it, or a one-line error saying what the scale allows."""
    text = raw.strip()
    if allows_na(c) and text.upper() in ("N/A", "NA"):
        return NA
    allowed = [str(v) for v in c.scale.values]
    if c.scale.type == "likert":
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is not None and number.is_integer() and str(int(number)) in allowed:
            return str(int(number))
    else:
        folded = {a.casefold(): a for a in allowed}
        if text.casefold() in folded:
            return folded[text.casefold()]
    also = ", N/A" if allows_na(c) else ""
    raise InputError(f"{where}: {name} = {raw!r} is not on the scale of {c.id} ({', '.join(allowed)}{also})")


def _explanation(c: Criterion, raw: str, where: str, name: str) -> str:
    options = {e.casefold(): e for e in c.explanations}
    text = raw.strip()
    if text.casefold() in options:
        return options[text.casefold()]
    head, _, rest = text.partition(":")
    if head.strip().casefold() == OTHER:
        return f"{OTHER}: {rest.strip()}" if rest.strip() else OTHER
    raise InputError(f"{where}: {name} = {raw!r} is not in the explanation list of {c.id} (or '{OTHER}: ...')")


def _check_cells(rubric: Rubric, task: Task, sub: Submission) -> tuple[dict[str, str], int]:
    """The submission's answers to this task's cells; answers for criteria that do not apply are dropped."""
    fields = {f.name: f for f in answer_fields(rubric, task)}
    letters = [s.letter for s in task.slots]
    kept, ignored = {}, 0
    for name, raw in sub.values.items():
        if name in fields:
            kept[name] = raw
            continue
        parsed = parse_field(rubric, name)
        if parsed is None:
            raise InputError(f"{sub.where}: unknown answer {name!r}: rubric {rubric.name} has no such criterion "
                             f"({', '.join(c.id for c in rubric.criteria)})")
        criterion, letter, segment, _ = parsed
        if letter is not None and letter not in letters:
            raise InputError(f"{sub.where}: answer {name!r} is for letter {letter}, which the key does not know "
                             f"for task {task.task_id} (it shows {_span(letters)})")
        slot = next((s for s in task.slots if s.letter == letter), None)
        if slot is not None and criterion in slot.skip:
            ignored += raw.strip().upper() not in ("N/A", "NA")
            continue
        raise InputError(f"{sub.where}: task {task.task_id} has no answer cell {name!r}"
                         + (f" (candidate {letter} has {len(slot.segments)} segment(s))" if segment and slot else ""))
    return kept, ignored


def _span(letters: list[str]) -> str:
    ordered = sorted(letters)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}–{ordered[-1]}"


def _segment_score(c: Criterion, answers: list[str]) -> str:
    """A per-segment criterion's score: the mean over segments (label scores for categorical scales)."""
    numbers = []
    for answer in answers:
        if answer == NA:
            continue
        value = float(answer) if c.scale.type == "likert" else c.scale.score_of(answer)
        if value is not None:
            numbers.append(value)
    if numbers:
        return f"{sum(numbers) / len(numbers):.6g}"
    return NA if all(a == NA for a in answers) else answers[0]  # every segment abstained


def read_submissions(sources: list[Path], rubric: Rubric, tasks: dict[str, Task],
                     notes: list[str] | None = None) -> tuple[list[Submission], int]:
    from judge.annotation import csvsheet, labelstudio

    subs, cancelled = [], 0
    display = set(context_names(rubric))
    for t in tasks.values():
        display.update(f"candidate_{s.letter}" for s in t.slots)
        display.update(f"{name}_{s.letter}" for s in t.slots for name in context_names(rubric))
        display.update(f"candidate_{s.letter}_{n}" for s in t.slots for n in range(1, len(s.segments) + 1))
    for path in sources:
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        if path.suffix.lower() == ".json":
            found, skipped = labelstudio.read_export(path)
            cancelled += skipped
        elif path.suffix.lower() == ".csv":
            found = csvsheet.read_sheet(path, lambda name: parse_field(rubric, name) is not None, display, notes)
        else:
            raise InputError(f"{path}: expected a Label Studio JSON export (.json) or a filled CSV sheet (.csv)")
        subs += found
    return subs, cancelled


def import_labels(sources: list[str | Path], key_path: str | Path) -> ImportResult:
    """Read and check every filled sheet; nothing is written here."""
    rubric, tasks, _ = load_key(key_path)
    paths = [Path(s) for s in sources]
    notes: list[str] = []
    subs, cancelled = read_submissions(paths, rubric, tasks, notes)
    if not subs:
        raise InputError(f"{', '.join(map(str, paths))}: no answered task found")
    order = {task_id: n for n, task_id in enumerate(tasks)}
    criteria = {c.id: c for c in rubric.criteria}
    result = ImportResult([], {}, {}, rubric.qualification.threshold if rubric.qualification else None, [], 0,
                          cancelled=cancelled, notes=notes)
    seen: dict[tuple[str, str], str] = {}
    keyed: list[tuple[tuple, dict]] = []
    for sub in subs:
        task = tasks.get(sub.task_id)
        if task is None:
            raise InputError(f"{sub.where}: task {sub.task_id!r} is not in the key {key_path} "
                             f"(the sheet comes from another export)")
        if (sub.task_id, sub.annotator) in seen:
            raise InputError(f"{sub.where}: {sub.annotator} already answered task {sub.task_id} "
                             f"({seen[sub.task_id, sub.annotator]})")
        seen[sub.task_id, sub.annotator] = sub.where
        values, ignored = _check_cells(rubric, task, sub)
        result.ignored += ignored
        cells = {f.name: f for f in answer_fields(rubric, task)}
        answers = {}
        for name, raw in values.items():
            f = cells[name]
            c = criteria[f.criterion]
            answers[name] = (_canonical(c, raw, sub.where, name) if f.role == "score"
                             else _explanation(c, raw, sub.where, name) if f.role == "why" else raw.strip())
        tally = result.annotators.setdefault(sub.annotator, AnnotatorTally())
        tally.tasks += 1
        tally.blank += sum(1 for f in cells.values() if f.role == "score" and f.name not in answers)
        positioned = _labels(rubric, task, sub.annotator, answers)
        labels = [row for _, row in positioned]
        if task.kind == "qualification":
            _score_qualification(rubric, task, sub.annotator, labels, result)
        if task.must_tie:
            result.checks += 1
            untied = {row["criterion"]: row["score"] for row in labels if row["score"] != "0"}
            if untied:
                what = "repeated pair" if task.kind == "check" else "pair of identical summaries"
                result.failed_checks.append(
                    f"{sub.annotator}, task {task.task_id} ({what} of {task.item_id}): "
                    + ", ".join(f"{k} = {v}" for k, v in untied.items()) + " instead of a tie (0)")
        if task.kind != "item":
            continue
        annotator = list(result.annotators).index(sub.annotator)
        for position, row in positioned:
            tally.labels += 1
            tally.na += row["score"] == NA
            tally.abstained += any(lab.abstain and lab.value == row["score"]
                                   for lab in getattr(criteria[row["criterion"]].scale, "labels", []))
            # Unshuffled: in the input's order of dialogues and candidates, then annotator, then criterion.
            keyed.append(((order[task.task_id], position, annotator, list(criteria).index(row["criterion"])), row))
    result.rows = [row for _, row in sorted(keyed, key=lambda pair: pair[0])]
    return result


def _labels(rubric: Rubric, task: Task, annotator: str, answers: dict[str, str]) -> list[tuple[int, dict]]:
    """(input position of the candidate, label row) for one submission; cells left blank give no row."""
    rows = []
    fields = answer_fields(rubric, task)
    for c in rubric.criteria:
        if rubric.task == "pairwise":
            verdict = answers.get(c.id)
            if verdict is not None:
                rows.append((0, _row(task.item_id, task.system, annotator, c.id,
                                     SWAP[verdict] if task.swapped else verdict, _why(answers, c.id))))
            continue
        for slot in task.slots:
            if c.id in slot.skip:
                continue
            if c.per_segment:
                names = [f.name for f in fields
                         if f.criterion == c.id and f.letter == slot.letter and f.role == "score"]
                if not names or any(n not in answers for n in names):
                    continue  # a half-rated candidate gives no mean; its blanks are counted
                parts = [answers[n] for n in names]
                rows.append((slot.position, _row(task.item_id, slot.system, annotator, c.id, _segment_score(c, parts),
                                                 _why(answers, f"{c.id}_{slot.letter}"), ";".join(parts))))
            elif (answer := answers.get(f"{c.id}_{slot.letter}")) is not None:
                rows.append((slot.position, _row(task.item_id, slot.system, annotator, c.id, answer,
                                                 _why(answers, f"{c.id}_{slot.letter}"))))
    return rows


def _why(answers: dict[str, str], stem: str) -> str:
    why, other = answers.get(f"{stem}_why", ""), answers.get(f"{stem}_other", "")
    return f"{OTHER}: {other}" if why == OTHER and other else why


def _row(item_id, system, annotator, criterion, score, explanation, segments="") -> dict:
    return {"item_id": item_id, "system": system, "annotator": annotator, "criterion": criterion, "score": score,
            "explanation": explanation, "segment_scores": segments}


def _score_qualification(rubric: Rubric, task: Task, annotator: str, labels: list[dict], result: ImportResult):
    tolerance = rubric.qualification.tolerance if rubric.qualification else 0
    given = {row["criterion"]: row["score"] for row in labels}
    per = result.qualification.setdefault(annotator, {})
    for criterion, expected in (task.expected or {}).items():
        answer = given.get(criterion)
        if rubric.criterion(criterion).scale.type == "likert" and answer not in (None, NA):
            agrees = abs(float(answer) - float(expected)) <= tolerance
        else:
            agrees = answer == str(expected)
        cell = per.setdefault(criterion, [0, 0])
        cell[0] += agrees
        cell[1] += 1


# -- writing --------------------------------------------------------------------------------------------------
def _ours(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            return next(csv.reader(handle), None) == LABEL_COLUMNS
    except (UnicodeDecodeError, OSError, csv.Error):
        return False


def write_labels(rows: list[dict], output: str | Path) -> None:
    """Write the labels CSV atomically; an existing file is replaced only if `judge import` wrote it."""
    output = Path(output)
    if output.is_dir():
        raise OutputError(f"{output}: is a directory; --output names the labels CSV file")
    if output.exists() and not _ours(output):
        raise OutputError(f"{output}: exists and is not a labels CSV written by `judge import`; "
                          f"choose another --output (it is left untouched)")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=LABEL_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    directory = output.parent if str(output.parent) else Path(".")
    if not directory.is_dir():
        raise OutputError(f"{output}: the directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(buffer.getvalue())
        os.chmod(tmp, default_mode(0o666))
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def report_lines(result: ImportResult) -> list[str]:
    lines = []
    for name, t in result.annotators.items():
        lines.append(f"{name}: {t.tasks} tasks, {t.labels} labels ({t.na} N/A, {t.abstained} abstentions), "
                     f"{t.blank} cells left blank")
    if result.threshold is not None and result.qualification:
        lines += [f"qualification {name}: not taken" for name in result.annotators if name not in result.qualification]
    for name, per in result.qualification.items():
        detail = ", ".join(f"{c} {a}/{n}" for c, (a, n) in per.items())
        verdict = "passed" if result.passed(name) else "FAILED"
        lines.append(f"qualification {name}: {verdict} ({detail}; threshold {result.threshold:.0%} per criterion)")
    if result.checks:
        lines.append(f"consistency: {result.checks - len(result.failed_checks)}/{result.checks} "
                     f"identical pairs answered as ties")
    lines += [f"consistency check failed: {line}" for line in result.failed_checks]
    if result.ignored:
        lines.append(f"{result.ignored} answers for criteria that do not apply to their candidate were ignored")
    if result.cancelled:
        lines.append(f"{result.cancelled} skipped (cancelled) Label Studio annotations were left out")
    lines += [f"note: {note}" for note in result.notes]
    return lines

