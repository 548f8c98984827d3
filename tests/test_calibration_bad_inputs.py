"""`judge calibrate` on files a user could give it by mistake: one row per file.

Each row: how to spoil the small valid pair of files below, the arguments, and the error expected. Every row must
exit 2 with a single line `judge calibrate: error: FILE:LINE: problem` (or FILE: problem when no line applies),
no traceback, and leave the output directory, the report and the map exactly as they were.
"""

import json
import re
from pathlib import Path

import pytest

from judge.cli import main

SYSTEMS = ("alpha", "beta", "gamma")
ITEMS = ("d1", "d2", "d3", "d4")
ANNOTATORS = ("ann1", "ann2")


def human_rows(criterion="coherence", score=lambda i, s, a: 1 + (i + s + a) % 5):
    return [[item, system, annotator, criterion, str(score(i, s, a))]
            for i, item in enumerate(ITEMS) for s, system in enumerate(SYSTEMS)
            for a, annotator in enumerate(ANNOTATORS)]


def write_labels(path: Path, rows, header="item_id,system,annotator,criterion,score", encoding="utf-8") -> Path:
    text = header + "\n" + "".join(",".join(row) + "\n" for row in rows)
    path.write_bytes(text.encode(encoding))
    return path


def judgment(item, system, criterion="coherence", score=3.0, rubric="dialsummeval@1", **extra):
    return {"id": item, "system": system, "criterion": criterion, "score": score, "rubric": rubric,
            "model": "toy-model", **extra}


def write_judgments(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def good_judgments():
    return [judgment(item, system, score=float(1 + (i * 2 + s) % 5))
            for i, item in enumerate(ITEMS) for s, system in enumerate(SYSTEMS)]


# A human file has a header on line 1, so the n-th row (0-based) is on line n + 2.
def human_line(n):
    return n + 2


def replace_score(n, value):
    def spoil(tmp):
        rows = human_rows()
        rows[n][4] = value
        write_labels(tmp / "labels.csv", rows)
    return spoil


def no_rubric(tmp):
    write_judgments(tmp / "judgments.jsonl", [{**r, "rubric": ""} for r in good_judgments()])


def both(*spoilers):
    def spoil(tmp):
        for spoiler in spoilers:
            spoiler(tmp)
    return spoil


def wide_csv(tmp, value="0.5"):
    lines = ["id,system,metric"] + [f"{item},{system},{value if (item, system) == ('d2', 'beta') else '0.4'}"
                                    for item in ITEMS for system in SYSTEMS]
    (tmp / "scores.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


CASES = [
    # -- scores that are not what they seem ---------------------------------------------------------------------
    ("a score written as a word", replace_score(4, "four"), [],
     rf"labels.csv:{human_line(4)}: score 'four' of criterion 'coherence' is not a number"),
    ("a score written as 4/5 among numbers", both(no_rubric, replace_score(7, "4/5")), [],
     rf"labels.csv:{human_line(7)}: score '4/5' of criterion 'coherence' is not a number \(its other scores"),
    ("every score written as 4/5", both(no_rubric, lambda tmp: write_labels(
        tmp / "labels.csv", human_rows(score=lambda i, s, a: f"{1 + (i + s) % 5}/5"))), [],
     r"labels.csv:2: criterion 'coherence' has text scores such as '1/5' where the judge gives numbers"),
    ("a literal nan", replace_score(5, "nan"), [],
     rf"labels.csv:{human_line(5)}: score 'nan' of criterion 'coherence' is not a number"),
    ("99 on the rubric's 1-5 scale", replace_score(9, "99"), [],
     rf"labels.csv:{human_line(9)}: score 99 of criterion 'coherence' is off the scale of rubric dialsummeval@1 "
     r"\(1, 2, 3, 4, 5\)"),
    ("3.5 between the rubric's points", replace_score(2, "3.5"), [],
     rf"labels.csv:{human_line(2)}: score 3.5 of criterion 'coherence' is off the scale of rubric dialsummeval@1"),
    ("99 with --scale 1,5 and a CSV judge", both(wide_csv, replace_score(3, "99")),
     ["--judgments", "{tmp}/scores.csv", "--score-column", "metric", "--scale", "1,5"],
     rf"labels.csv:{human_line(3)}: score 99 of criterion 'coherence' is off the scale of --scale 1,5 \(1 to 5\)"),
    ("a label off a categorical rubric", lambda tmp: (
        write_judgments(tmp / "judgments.jsonl", [
            judgment(i, s, "appropriateness", score=1.0, label="appropriate", rubric="response_quality@1")
            for i in ITEMS for s in SYSTEMS]),
        write_labels(tmp / "labels.csv", [[i, s, a, "appropriateness", "maybe" if (i, s, a) == ("d3", "beta", "ann2")
                                           else "appropriate"] for i in ITEMS for s in SYSTEMS for a in ANNOTATORS])),
     [], r"labels.csv:17: label 'maybe' of criterion 'appropriateness' is not on the scale of rubric "
         r"response_quality@1 \(appropriate, not appropriate, I don't know\)"),
    ("a non-number in a CSV of judge scores", lambda tmp: wide_csv(tmp, "high"),
     ["--judgments", "{tmp}/scores.csv", "--score-column", "metric"],
     r"scores.csv:6: column 'metric' holds 'high', not a number"),
    ("a NaN judge score", lambda tmp: (tmp / "judgments.jsonl").write_text(
        json.dumps(judgment("d1", "alpha")) + "\n" + '{"id": "d1", "system": "beta", "criterion": "coherence", '
        '"score": NaN, "rubric": "dialsummeval@1"}\n'), [],
     r"judgments.jsonl:2: field 'score' must be a finite number or null, got nan"),
    # -- files that do not fit together -------------------------------------------------------------------------
    ("labels that never overlap the judgments", lambda tmp: write_labels(
        tmp / "labels.csv", [[f"x{row[0]}", *row[1:]] for row in human_rows()]), [],
     r"judgments.jsonl and .*labels.csv have no item id in common: e.g. 'd1' \(4 in all\) in .*judgments.jsonl, "
     r"e.g. 'xd1' \(4 in all\) in .*labels.csv"),
    ("labels for other systems of the same items", lambda tmp: write_labels(
        tmp / "labels.csv", [[row[0], row[1].upper(), *row[2:]] for row in human_rows()]), [],
     r"share item ids but no \(item, system\): system 'alpha' \(3 in all\) in .*judgments.jsonl, "
     r"system 'ALPHA' \(3 in all\) in .*labels.csv"),
    ("--criteria naming a criterion the humans never rated", None, ["--criteria", "fluency"],
     r"--criteria: no human labels for fluency; the human file has coherence"),
    # -- files that are not text, not CSV, or not files ---------------------------------------------------------
    ("labels in Latin-1", lambda tmp: write_labels(
        tmp / "labels.csv", [["d1", "alpha", "Jos\u00e9", "coherence", "3"], *human_rows()], encoding="latin-1"), [],
     r"labels.csv:2: not UTF-8 text \(byte \d+ is 0xe9\)"),
    ("judgments in Latin-1", lambda tmp: (tmp / "judgments.jsonl").write_bytes(
        (json.dumps(judgment("d1", "alpha")) + "\n" + json.dumps(judgment("d1", "b\u00e9ta"), ensure_ascii=False)
         + "\n").encode("latin-1")), [],
     r"judgments.jsonl:2: not UTF-8 text"),
    ("a directory given as the labels", lambda tmp: (tmp / "labels_dir").mkdir(),
     ["--human", "{tmp}/labels_dir"], r"labels_dir: is a directory"),
    ("a directory given as the judgments", lambda tmp: (tmp / "judgments_dir").mkdir(),
     ["--judgments", "{tmp}/judgments_dir"], r"judgments_dir: is a directory"),
    ("an empty labels file", lambda tmp: (tmp / "labels.csv").write_text(""), [],
     r"labels.csv: the human labels file is empty"),
    ("a labels file without the annotator column", lambda tmp: write_labels(
        tmp / "labels.csv", [[r[0], r[1], r[3], r[4]] for r in human_rows()], header="item_id,system,criterion,score"),
     [], r"labels.csv:1: missing column\(s\) annotator; found item_id, system, criterion, score"),
    ("labels separated by semicolons (a European spreadsheet)", lambda tmp: write_labels(
        tmp / "labels.csv", [[";".join(row)] for row in human_rows()],
        header="item_id;system;annotator;criterion;score"),
     [], r"labels.csv:1: missing column\(s\) item_id, .*; found item_id;system;annotator;criterion;score \(the file "
         r"is separated by ';': save it as comma-separated CSV\)"),
    ("a row with a field too many", lambda tmp: write_labels(
        tmp / "labels.csv", [*human_rows()[:3], ["d2", "alpha", "ann1", "coherence", "3", "extra"]]), [],
     r"labels.csv:5: expected 5 fields as in the header, found 6"),
    ("the same annotator twice on one summary", lambda tmp: write_labels(
        tmp / "labels.csv", [*human_rows(), human_rows()[0]]), [],
     rf"labels.csv:{human_line(len(human_rows()))}: duplicate label for item 'd1', system 'alpha', annotator 'ann1'"),
    ("the judgments file given as labels", None, ["--human", "{tmp}/judgments.jsonl"],
     r"judgments.jsonl:1: missing column\(s\) item_id, system, annotator, criterion, score"),
    ("a broken calibration map", lambda tmp: (tmp / "map.json").write_text('{"format": '),
     ["--apply-map", "{tmp}/map.json"], r"map.json:1: invalid JSON"),
    ("a labels file with only its header", lambda tmp: write_labels(tmp / "labels.csv", []), [],
     r"labels.csv: no rows below the header"),
    ("a row without an item id", lambda tmp: write_labels(
        tmp / "labels.csv", [*human_rows()[:2], ["", "alpha", "ann1", "coherence", "3"]]), [],
     r"labels.csv:4: column 'item_id' is empty"),
    ("a NUL byte in the labels", lambda tmp: (tmp / "labels.csv").write_text(
        "item_id,system,annotator,criterion,score\nd1,alpha,ann1,coherence,3\nd1,al\0pha,ann2,coherence,3\n"), [],
     r"labels.csv:3: a NUL byte: not a text file, or UTF-16; save the human labels file as UTF-8"),
    ("labels saved as UTF-16 without a byte-order mark", lambda tmp: write_labels(
        tmp / "labels.csv", human_rows(), encoding="utf-16-le"), [], r"labels.csv:1: a NUL byte"),
    ("an empty judgments file", lambda tmp: (tmp / "judgments.jsonl").write_text("\n"), [],
     r"judgments.jsonl: no judgments in the file"),
    ("a judgments line that is a list", lambda tmp: (tmp / "judgments.jsonl").write_text(
        json.dumps(judgment("d1", "alpha")) + "\n[1, 2]\n"), [],
     r"judgments.jsonl:2: expected a judgment object, got list"),
    ("a --compare file for other dialogues", lambda tmp: (tmp / "other.csv").write_text(
        "id,system,criterion,score\nz1,alpha,coherence,3\n"), ["--compare", "{tmp}/other.csv"],
     r"other.csv and .*labels.csv have no item id in common: e.g. 'z1' \(1 in all\)"),
    ("a JSON file that is not a calibration map", lambda tmp: (tmp / "map.json").write_text('{"maps": {}}\n'),
     ["--apply-map", "{tmp}/map.json"], r"map.json: not a calibration map file"),
    # -- outputs that cannot be written --------------------------------------------------------------------------
    ("--report naming a directory", lambda tmp: (tmp / "report_dir").mkdir(),
     ["--report", "{tmp}/report_dir"], r"--report .*report_dir: is a directory, expected a file name"),
    ("--output-dir naming a file", lambda tmp: (tmp / "taken").write_text("mine\n"),
     ["--output-dir", "{tmp}/taken"], r"--output-dir .*taken: is a file, expected a directory"),
    ("--report overwriting the labels", None, ["--report", "{tmp}/labels.csv"],
     r"--report .*labels.csv: is one of the input files"),
    ("--fit-map with only categorical criteria", lambda tmp: (
        write_judgments(tmp / "judgments.jsonl", [
            judgment(i, s, "appropriateness", score=None, label="appropriate", rubric="") for i in ITEMS
            for s in SYSTEMS]),
        write_labels(tmp / "labels.csv", [[i, s, a, "appropriateness", "appropriate"] for i in ITEMS for s in SYSTEMS
                                          for a in ANNOTATORS])),
     ["--fit-map", "{tmp}/out/new_map.json"], r"--fit-map: no criterion has numeric \(judge, human\) pairs to fit"),
]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name, spoil, extra, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_and_nothing_is_half_written(tmp_path, capsys, name, spoil, extra,
                                                                       expected):
    write_judgments(tmp_path / "judgments.jsonl", good_judgments())
    write_labels(tmp_path / "labels.csv", human_rows())
    if spoil:
        spoil(tmp_path)
    # Outputs of an earlier run that a failed run must leave exactly as they were.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "correlations.csv").write_text("an earlier run\n")
    (tmp_path / "report.html").write_text("<p>an earlier report</p>\n")
    before = _snapshot(tmp_path)
    args = {"--judgments": "{tmp}/judgments.jsonl", "--human": "{tmp}/labels.csv", "--bootstrap": "50",
            "--output-dir": "{tmp}/out", "--report": "{tmp}/report.html"}
    args.update(zip(extra[::2], extra[1::2]))
    argv = [part.format(tmp=tmp_path) for pair in args.items() for part in pair]
    code = main(["calibrate", *argv])
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(errors) == 1 and errors[0] == stderr.strip().splitlines()[-1], stderr
    assert errors[0].startswith("judge calibrate: error: ")
    assert re.search(expected, errors[0]), errors[0]
    assert _snapshot(tmp_path) == before, "a failed run changed or added files"
