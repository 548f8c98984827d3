"""CSV sheets: one row per task, for spreadsheets and crowdsourcing sites.

Columns: task_id, section, annotator, dialogue, the context (reference, summary type), the candidates under
their letters (candidate_A, and candidate_A_1... for topic segments), then one column per answer cell,
criterion by criterion (faithfulness_A ... faithfulness_F, main_issues_A ...), with `<cell>_why` after it when
the criterion has an explanation list. Cells of a criterion that does not apply to a candidate are pre-filled
with N/A. Files are UTF-8; a byte-order mark added by a spreadsheet is accepted on reading.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from pathlib import Path

from judge.annotation import NA
from judge.annotation.package import Submission, Task, all_fields, dialogue_text, shown_fields
from judge.errors import InputError
from judge.rubric import Rubric

FIXED = ["task_id", "section", "annotator", "dialogue"]
# A cell starting with one of these is a formula to a spreadsheet (`=cmd|' /C calc'!A0`, `@SUM(...)`, `-2+3`), or
# can start one after a tab or carriage return: such untrusted text is written with a leading apostrophe, which
# makes it text to the spreadsheet, and read back without it (OWASP's CSV injection advice).
# A text that starts with the apostrophe itself is given one more, so that every text reads back as it was.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_MARKED = (*FORMULA_STARTS, "'")


def neutralised(value):
    """A cell's text as it may be written in a sheet: never read as a formula."""
    if isinstance(value, str) and value.startswith(_MARKED):
        return "'" + value
    return value


def plain(value: str) -> str:
    """A cell read back from a sheet: the text `neutralised` was given."""
    if value.startswith("'") and value[1:].startswith(_MARKED):
        return value[1:]
    return value


def sheet_text(rubric: Rubric, tasks: list[Task], annotator: str = "") -> str:
    shown: dict[str, None] = {}
    for t in tasks:
        shown.update(dict.fromkeys(k for k in shown_fields(t, rubric) if k not in FIXED))
    answers = [f for f in all_fields(rubric, tasks) if f.role != "other"]  # "other: ..." goes in the _why cell
    header = FIXED + list(shown) + [f.name for f in answers]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    # A lone carriage return ends a row for a reader, but Python's writer leaves such a cell unquoted (it quotes only
    # what the line terminator holds): a row holding one has every cell quoted.
    quoted = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writeheader()
    for t in tasks:
        row = {**shown_fields(t, rubric), "annotator": annotator, "dialogue": dialogue_text(t.dialogue)}
        for slot in t.slots:  # N/A where a criterion does not apply (e.g. QA matching of a user summary)
            row.update({f.name: NA for f in answers if f.letter == slot.letter and f.criterion in slot.skip
                        and f.role == "score" and (f.segment or 1) <= max(1, len(slot.segments))})
        row = {name: neutralised(value) for name, value in row.items()}
        (quoted if any("\r" in str(value) for value in row.values()) else writer).writerow(row)
    return buffer.getvalue()


# Columns a Label Studio CSV export adds around the task's data and the answers: bookkeeping, not answers.
LABEL_STUDIO_CSV = {"id", "annotation_id", "created_at", "updated_at", "lead_time"}
# An answer cell's shape (criterion_A, criterion_B_2, criterion_C_why): such a column is never ignored, so a
# misspelled criterion is an error rather than a silently lost answer.
ANSWER_SHAPE = re.compile(r".+_[A-Z](_\d+)?(_why|_other)?")


def read_sheet(path: Path, is_answer: Callable[[str], bool], display: set[str],
               notes: list[str] | None = None) -> list[Submission]:
    """Submissions from a filled sheet. `is_answer(column)` says whether a column is an answer cell.

    Two layouts: the sheet as exported, filled in a spreadsheet (the `annotator` column names who answered);
    or a crowdsourcing site's results file, where the sheet's columns come back as `Input.<column>`, the
    answers as `Answer.<cell>` and the worker as `WorkerId` (Mechanical Turk's batch results; the site's own
    bookkeeping columns are left alone).
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, strict=True)  # a file cut inside a quoted cell is an error
            header = reader.fieldnames or []
            crowd = "Input.task_id" in header
            task_col, who_col = ("Input.task_id", "WorkerId") if crowd else ("task_id", "annotator")
            for required in (task_col, who_col):
                if required not in header:
                    glued = len(header) == 1 and any(sep in header[0] for sep in ";\t")
                    hint = (f" (the sheet is separated by {';' if ';' in header[0] else 'tabs'}, as a spreadsheet "
                            "in some locales saves it: save it as comma-separated CSV, UTF-8)") if glued else ""
                    shown = ", ".join(header) if not glued else repr(header[0][:60])
                    raise InputError(f"{path}:1: no {required!r} column; found {shown or 'no header'}{hint}")
            answers = {}  # column -> answer cell name
            extra = []
            for column in header:
                name = column.removeprefix("Answer.").removeprefix("Input.") if crowd else column
                if crowd and name == column:
                    continue  # the site's bookkeeping (HITId, WorkTimeInSeconds, ...)
                if is_answer(name):
                    answers[column] = name
                elif name in display or name in FIXED or name in LABEL_STUDIO_CSV:
                    continue
                elif ANSWER_SHAPE.fullmatch(name.strip()):
                    raise InputError(f"{path}:1: unknown column {column!r}: not an answer cell of this sheet's rubric")
                else:
                    extra.append(column)  # an annotator's comments column, a spreadsheet's trailing empty one
            if extra and notes is not None:
                named = ", ".join(repr(c) if c.strip() else "an unnamed (empty) column" for c in extra)
                notes.append(f"{path}: column(s) {named} are not answer cells: ignored")
            return list(_submissions(path, reader, task_col, who_col, answers))
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 CSV file") from None


def _submissions(path: Path, reader: csv.DictReader, task_col: str, who_col: str, answers: dict[str, str]):
    end = reader.line_num  # a cell may hold several lines: a row starts after the previous one ends
    try:
        for row in reader:
            where, end = f"{path}:{end + 1}", reader.line_num
            if None in row:
                raise InputError(f"{where}: more cells than columns in the header")
            if None in row.values():  # DictReader's filler for cells the row lacks
                cells = sum(value is not None for value in row.values())
                raise InputError(f"{where}: {cells} cells for {len(row)} columns: the sheet is cut in the middle of "
                                 "this row (an interrupted copy or download?); save or download it again")
            task_id = (row.get(task_col) or "").strip()
            if not task_id and not any((v or "").strip() for v in row.values()):
                continue  # an empty line left by a spreadsheet
            if not task_id:
                raise InputError(f"{where}: empty {task_col}")
            annotator = (row.get(who_col) or "").strip()
            if not annotator:
                raise InputError(f"{where}: task {task_id}: no annotator name in the {who_col!r} column")
            values = {name: plain(row[c].strip()) for c, name in answers.items() if (row.get(c) or "").strip()}
            yield Submission(where, task_id, annotator, values)
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise InputError(f"{path}:{end + 1}: the sheet ends inside a quoted cell of this row: it is cut in the "
                             "middle of the row (an interrupted copy or download?); save or download it "
                             "again") from None
        raise InputError(f"{path}:{reader.line_num}: not a readable CSV row ({exc})") from None
