"""Bad input to judge export / judge import: one line naming the file and the place, exit 2, nothing half-written."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from annotation_sim import Annotator, fill_csv, fill_label_studio  # noqa: E402
from test_annotation import RUBRICS  # noqa: E402

from judge.cli import main  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "annotation"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two call-centre exports (seeds 1 and 2), a filled CSV and a filled Label Studio export of the first."""
    root = tmp_path_factory.mktemp("study")
    items = str(RUBRICS["call_centre_fr"])
    for fmt, name, seed in (("csv", "csv1", "1"), ("csv", "csv2", "2"), ("label-studio", "ls1", "1")):
        assert main(["export", "--rubric", "call_centre_fr", "--input", items, "--format", fmt,
                     "--output", str(root / name), "--seed", seed]) == 0
    who = {"ann1": Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=1)}
    fill_csv(root / "csv1" / "sheet.csv", root / "filled.csv", who)
    fill_label_studio(root / "ls1" / "tasks.json", root / "export.json", who)
    return root


def _rows(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames), list(reader)


def _write(path: Path, header: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def _edit_csv(study, tmp, change):
    header, rows = _rows(study / "filled.csv")
    header, rows = change(header, rows) or (header, rows)
    out = tmp / "bad.csv"
    _write(out, header, rows)
    return [str(out)], str(study / "csv1" / "key.json")


def _edit_json(study, tmp, change):
    data = json.loads((study / "export.json").read_text(encoding="utf-8"))
    change(data)
    out = tmp / "bad.json"
    out.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return [str(out)], str(study / "ls1" / "key.json")


def _set(row_index: int, column: str, value: str):
    def change(header, rows):
        rows[row_index][column] = value
    return change


def _add_column(name: str, value: str):
    def change(header, rows):
        rows[4][name] = value
        return header + [name], rows
    return change


def _add_result(from_name: str, answer: str):
    def change(data):
        data[4]["annotations"][0]["result"].append(
            {"from_name": from_name, "to_name": "candidate_A", "type": "choices", "value": {"choices": [answer]}})
    return change


def _drop_annotator(data):
    del data[3]["annotations"][0]["completed_by"]


def _duplicate_row(header, rows):
    return header, rows + [dict(rows[3])]


IMPORT_CASES = [
    # (case, how to make the input, expected words in the one-line message, where it points)
    ("key of another export", lambda s, t: ([str(s / "filled.csv")], str(s / "csv2" / "key.json")),
     "is not in the key", "filled.csv:2"),
    ("unknown letter (CSV)", lambda s, t: _edit_csv(s, t, _set(0, "faithfulness_B", "3")),
     "letter B, which the key does not know", "bad.csv:2"),
    ("unknown letter (Label Studio)", lambda s, t: _edit_json(s, t, _add_result("faithfulness_G", "3")),
     "letter G, which the key does not know", "bad.json: entry 5"),
    ("rating off the scale (CSV)", lambda s, t: _edit_csv(s, t, _set(4, "resolution_C", "7")),
     "resolution_C = '7' is not on the scale of resolution (1, 2, 3, 4, 5)", "bad.csv:"),
    ("rating off the scale (Label Studio)", lambda s, t: _edit_json(s, t, _add_result("faithfulness_A", "0")),
     "faithfulness_A = '0' is not on the scale", "bad.json: entry 5"),
    ("N/A for a criterion without a gate", lambda s, t: _edit_csv(s, t, _set(3, "faithfulness_A", "N/A")),
     "is not on the scale of faithfulness", "bad.csv:"),
    ("unknown criterion column", lambda s, t: _edit_csv(s, t, _add_column("politeness_A", "4")),
     "unknown column 'politeness_A'", "bad.csv:1"),
    ("unknown criterion (Label Studio)", lambda s, t: _edit_json(s, t, _add_result("politeness_A", "4")),
     "unknown answer 'politeness_A'", "bad.json: entry 5"),
    ("missing annotator (CSV)", lambda s, t: _edit_csv(s, t, _set(2, "annotator", "")),
     "no annotator name", "bad.csv:"),
    ("missing annotator (Label Studio)", lambda s, t: _edit_json(s, t, _drop_annotator),
     "has no annotator (completed_by)", "bad.json: entry 4"),
    ("same annotator twice on a task", lambda s, t: _edit_csv(s, t, _duplicate_row),
     "ann1 already answered task", "bad.csv:"),
    ("not a key", lambda s, t: ([str(s / "filled.csv")], str(s / "filled.csv")),
     "not a JSON key file", "filled.csv"),
    ("a sheet of another kind", lambda s, t: ([str(s / "csv1" / "instructions.md")], str(s / "csv1" / "key.json")),
     "expected a Label Studio JSON export (.json) or a filled CSV sheet (.csv)", "instructions.md"),
    ("a sheet saved with ';' separators", lambda s, t: _semicolons(s, t),
     "the sheet is separated by ;, as a spreadsheet in some locales saves it: save it as comma-separated", "bad.csv:1"),
    ("a Label Studio JSON-MIN export", lambda s, t: _json_min(s, t),
     "a Label Studio JSON-MIN export (flat rows, no annotations): export the project as JSON", "min.json"),
]


def _semicolons(study, tmp):
    text = (study / "filled.csv").read_text(encoding="utf-8")
    (tmp / "bad.csv").write_text(text.replace(",", ";"), encoding="utf-8")
    return [str(tmp / "bad.csv")], str(study / "csv1" / "key.json")


def _json_min(study, tmp):
    """JSON-MIN: one flat object per annotation, the task's data and the answers side by side."""
    data = json.loads((study / "export.json").read_text(encoding="utf-8"))
    flat = [{**task["data"], "annotator": 1, "id": n} for n, task in enumerate(data)]
    (tmp / "min.json").write_text(json.dumps(flat), encoding="utf-8")
    return [str(tmp / "min.json")], str(study / "ls1" / "key.json")


@pytest.mark.parametrize("case, make, message, where", IMPORT_CASES, ids=[c[0] for c in IMPORT_CASES])
def test_import_refuses_bad_input(study, tmp_path, capsys, case, make, message, where):
    sources, key = make(study, tmp_path)
    labels = tmp_path / "labels.csv"
    capsys.readouterr()
    assert main(["import", "--from", *sources, "--key", key, "--output", str(labels)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("judge import: error: ") and message in err and where in err, err
    assert not labels.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".labels")] == []


def test_import_keeps_an_annotators_extra_columns_out_with_a_note(study, tmp_path, capsys):
    """A comments column, and the empty column a spreadsheet leaves at the end, are read past with a note; the
    labels are the same as without them; annotator names are trimmed."""
    key = str(study / "csv1" / "key.json")
    plain, extra = tmp_path / "plain.csv", tmp_path / "extra.csv"
    assert main(["import", "--from", str(study / "filled.csv"), "--key", key, "--output", str(plain)]) == 0
    header, rows = _rows(study / "filled.csv")
    for row in rows:
        row["comments"], row[""], row["annotator"] = "hard one, re-read", "", f"  {row['annotator']} "
    _write(tmp_path / "sheet.csv", header + ["comments", ""], rows)
    capsys.readouterr()
    assert main(["import", "--from", str(tmp_path / "sheet.csv"), "--key", key, "--output", str(extra)]) == 0
    out = capsys.readouterr().out
    assert "note:" in out and "'comments'" in out and "an unnamed (empty) column" in out and "ignored" in out
    assert extra.read_bytes() == plain.read_bytes()


def test_import_never_overwrites_a_file_it_did_not_write(study, tmp_path, capsys):
    labels = tmp_path / "labels.csv"
    original = "dataset,item_id,system,annotator,criterion,score\nx,call-1,bart,ann1,faithfulness,4\n"
    labels.write_text(original, encoding="utf-8")
    capsys.readouterr()
    assert main(["import", "--from", str(study / "filled.csv"), "--key", str(study / "csv1" / "key.json"),
                 "--output", str(labels)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"judge import: error: {labels}: exists and is not a labels CSV written by `judge import`; "
                   "choose another --output (it is left untouched)")
    assert labels.read_text(encoding="utf-8") == original


def test_a_bad_row_late_in_the_file_leaves_the_previous_labels_intact(study, tmp_path):
    labels = tmp_path / "labels.csv"
    key = str(study / "csv1" / "key.json")
    assert main(["import", "--from", str(study / "filled.csv"), "--key", key, "--output", str(labels)]) == 0
    before = labels.read_bytes()
    (sources, _) = _edit_csv(study, tmp_path, _set(4, "resolution_F", "9"))
    assert main(["import", "--from", *sources, "--key", key, "--output", str(labels)]) == 2
    assert labels.read_bytes() == before


def _plan(tmp: Path, text: str, info: str | None = '{"version": 1}') -> str:
    (tmp / "plan").mkdir()
    (tmp / "plan" / "plan.csv").write_text(text, encoding="utf-8")
    if info is not None:
        (tmp / "plan" / "plan.json").write_text(info, encoding="utf-8")
    return str(tmp / "plan")


EXPORT_CASES = [
    ("output directory not empty", lambda t: (["--rubric", "call_centre_fr"], "full"),
     "exists and is not an empty directory"),
    ("plan names an unknown dialogue",
     lambda t: (["--rubric", "call_centre_fr", "--plan", _plan(t, "item_id,part,reason\nnope,random,x\n")], "out"),
     "the plan names dialogue(s) not in the items: nope"),
    ("plan with a bad part",
     lambda t: (["--rubric", "call_centre_fr", "--plan", _plan(t, "item_id,part,reason\ncall-bus-strike,maybe,x\n")],
                "out"),
     "plan.csv:2: part must be random or targeted, got 'maybe'"),
    # export reads plans as estimate does (judge.annotation.plan): plan.json is part of the plan, and checked
    ("plan without plan.json",
     lambda t: (["--rubric", "call_centre_fr", "--plan", _plan(t, "item_id,part\ncall-bus-strike,random\n", None)],
                "out"),
     "plan.json: no such file (--plan takes the --output-dir of `judge screen --budget`)"),
    ("plan.json of another version",
     lambda t: (["--rubric", "call_centre_fr", "--plan", _plan(t, "item_id,part\ncall-bus-strike,random\n",
                                                                 '{"version": 2}')], "out"),
     'plan.json: not a plan file (expected "version": 1)'),
    ("plan listing a dialogue twice",
     lambda t: (["--rubric", "call_centre_fr", "--plan",
                 _plan(t, "item_id,part\ncall-bus-strike,random\ncall-bus-strike,targeted\n")], "out"),
     "plan.csv:3: dialogue 'call-bus-strike' is listed twice"),
    ("edited plan",
     lambda t: (["--rubric", "call_centre_fr", "--plan", _plan(t, "item_id,part\ncall-bus-strike,random\n",
                                                                 '{"version": 1, "plan_sha256": "' + "0" * 64 + '"}')],
                "out"),
     "plan.csv: differs from the plan `judge screen` wrote"),
    ("plan directory without plan.csv", lambda t: (["--rubric", "call_centre_fr", "--plan", str(t)], "out"),
     "plan.csv: no such file"),
    ("single candidates for a pairwise rubric", lambda t: (["--rubric", "pairwise_summary"], "out"),
     "call_centre_items.jsonl:1: the rubric needs field 'candidate_1'"),
]


@pytest.mark.parametrize("case, make, message", EXPORT_CASES, ids=[c[0] for c in EXPORT_CASES])
def test_export_refuses_bad_input(tmp_path, capsys, case, make, message):
    args, out_name = make(tmp_path)
    out = tmp_path / out_name
    if out_name == "full":
        out.mkdir()
        (out / "keep.txt").write_text("mine", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    capsys.readouterr()
    code = main(["export", *args, "--input", str(RUBRICS["call_centre_fr"]), "--format", "csv",
                 "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("judge export: error: ") and message in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing created, nothing left behind


def test_export_writes_nothing_when_interrupted_while_writing(tmp_path, monkeypatch):
    from judge.annotation import export as export_module

    calls = {"n": 0}
    real = Path.write_text

    def failing(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(OSError):
        from judge.items import load_items
        from judge.rubric import load_rubric

        rubric = load_rubric("dialsummeval")
        export_module.export_package(rubric, load_items(RUBRICS["dialsummeval"]), "csv", tmp_path / "pkg")
    assert list(tmp_path.iterdir()) == []


def test_cells_for_criteria_that_do_not_apply_are_ignored_and_counted(tmp_path, capsys):
    pkg = tmp_path / "pkg"
    # seed 5 puts the overall summary under A in one dialogue and C in the other, so the sheet has QA-matching
    # columns under letters that hold a user or agent summary in the other dialogue
    assert main(["export", "--rubric", "csds", "--input", str(RUBRICS["csds"]), "--format", "csv",
                 "--output", str(pkg), "--seed", "5"]) == 0
    header, rows = _rows(pkg / "sheet.csv")
    skipped = [(n, c) for n, row in enumerate(rows) for c in header if c.startswith("qa_matching_") and row[c] == "N/A"]
    assert skipped  # the user and agent summaries: QA matching does not apply, pre-filled N/A
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"a": Annotator("csds", RUBRICS["csds"], seed=2)})
    header, rows = _rows(filled)
    rows[skipped[0][0]][skipped[0][1]] = "matched"
    _write(filled, header, rows)
    capsys.readouterr()
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"),
                 "--output", str(tmp_path / "labels.csv")]) == 0
    assert "1 answers for criteria that do not apply to their candidate were ignored" in capsys.readouterr().out
    shutil.rmtree(pkg)


def test_a_label_studio_csv_export_is_read(study, tmp_path, capsys):
    """Label Studio's CSV export: the task's data and the answers as columns, plus its own bookkeeping (id,
    annotation_id, created_at, updated_at, lead_time), which is read past without a note."""
    key = str(study / "csv1" / "key.json")
    plain, exported = tmp_path / "plain.csv", tmp_path / "ls.csv"
    assert main(["import", "--from", str(study / "filled.csv"), "--key", key, "--output", str(plain)]) == 0
    header, rows = _rows(study / "filled.csv")
    bookkeeping = ["annotation_id", "created_at", "id", "lead_time", "updated_at"]
    for n, row in enumerate(rows):
        row.update({"annotation_id": str(100 + n), "created_at": "2026-01-01T10:00:00Z", "id": str(n + 1),
                    "lead_time": "31.5", "updated_at": "2026-01-01T10:01:00Z"})
    _write(tmp_path / "export.csv", bookkeeping + header, rows)
    capsys.readouterr()
    assert main(["import", "--from", str(tmp_path / "export.csv"), "--key", key, "--output", str(exported)]) == 0
    assert "note:" not in capsys.readouterr().out
    assert exported.read_bytes() == plain.read_bytes()
