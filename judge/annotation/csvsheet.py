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
from collections.abc import Callable
from pathlib import Path

from judge.annotation import NA
from judge.annotation.package import Submission, Task, all_fields, dialogue_text, shown_fields
from judge.errors import InputError
from judge.rubric import Rubric

FIXED = ["task_id", "section", "annotator", "dialogue"]


def sheet_text(rubric: Rubric, tasks: list[Task], annotator: str = "") -> str:
    shown: dict[str, None] = {}
    for t in tasks:
        shown.update(dict.fromkeys(k for k in shown_fields(t, rubric) if k not in FIXED))
    answers = [f for f in all_fields(rubric, tasks) if f.role != "other"]  # "other: ..." goes in the _why cell
    header = FIXED + list(shown) + [f.name for f in answers]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for t in tasks:
        row = {**shown_fields(t, rubric), "annotator": annotator, "dialogue": dialogue_text(t.dialogue)}
        for slot in t.slots:  # N/A where a criterion does not apply (e.g. QA matching of a user summary)
            row.update({f.name: NA for f in answers if f.letter == slot.letter and f.criterion in slot.skip
                        and f.role == "score" and (f.segment or 1) <= max(1, len(slot.segments))})
        writer.writerow(row)
    return buffer.getvalue()


def read_sheet(path: Path, is_answer: Callable[[str], bool], display: set[str]) -> list[Submission]:
    """Submissions from a filled sheet. `is_answer(column)` says whether a column is an answer cell."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 CSV file") from None
    with handle:
        for required in ("task_id", "annotator"):
            if required not in header:
                raise InputError(f"{path}:1: no {required!r} column; found {', '.join(header) or 'no header'}")
        answers = []
        for column in header:
            if is_answer(column):
                answers.append(column)
            elif column not in display and column not in FIXED:
                raise InputError(f"{path}:1: unknown column {column!r}: not an answer cell of this sheet's rubric")
        out = []
        end = reader.line_num  # a cell may hold several lines: a row starts after the previous one ends
        try:
            for row in reader:
                where, end = f"{path}:{end + 1}", reader.line_num
                if None in row:
                    raise InputError(f"{where}: more cells than columns in the header")
                task_id = (row.get("task_id") or "").strip()
                if not task_id and not any((v or "").strip() for v in row.values()):
                    continue  # an empty line left by a spreadsheet
                if not task_id:
                    raise InputError(f"{where}: empty task_id")
                annotator = (row.get("annotator") or "").strip()
                if not annotator:
                    raise InputError(f"{where}: task {task_id}: no annotator name in the 'annotator' column")
                values = {c: row[c].strip() for c in answers if (row.get(c) or "").strip()}
                out.append(Submission(where, task_id, annotator, values))
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a UTF-8 CSV file") from None
        except csv.Error as exc:
            raise InputError(f"{path}:{reader.line_num}: not a readable CSV row ({exc})") from None
    return out
