"""judge export / judge import: the round trip for every rubric, shuffling, qualification and consistency checks."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from annotation_sim import Annotator, fill_csv, fill_label_studio  # noqa: E402

from judge.cli import main  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "annotation"
RUBRICS = {
    "call_centre_fr": FIXTURES / "call_centre_items.jsonl",
    "dialsummeval": FIXTURES / "dialsummeval_items.jsonl",
    "response_quality": FIXTURES / "response_items.jsonl",
    "pairwise_summary": FIXTURES / "pairs.jsonl",
    "csds": FIXTURES / "csds_items.jsonl",
}


def export(tmp_path: Path, rubric: str, fmt: str, *extra: str, name: str = "pkg") -> Path:
    out = tmp_path / name
    assert main(["export", "--rubric", rubric, "--input", str(RUBRICS[rubric]), "--format", fmt,
                 "--output", str(out), *extra]) == 0
    return out


def read_labels(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def as_set(rows: list[dict]) -> set[tuple]:
    return {(r["item_id"], r["system"], r["annotator"], r["criterion"], r["score"], r["explanation"],
             r["segment_scores"]) for r in rows}


@pytest.mark.parametrize("fmt", ["csv", "label-studio"])
@pytest.mark.parametrize("rubric", list(RUBRICS))
def test_round_trip_gives_back_exactly_the_labels_filled_in(tmp_path, capsys, rubric, fmt):
    pkg = export(tmp_path, rubric, fmt, "--seed", "11")
    people = {"ann1": Annotator(rubric, RUBRICS[rubric], seed=1), "ann2": Annotator(rubric, RUBRICS[rubric], seed=2)}
    if fmt == "csv":
        filled = tmp_path / "filled.csv"
        fill_csv(pkg / "sheet.csv", filled, people)
    else:
        filled = tmp_path / "export.json"
        fill_label_studio(pkg / "tasks.json", filled, people)
    labels = tmp_path / "labels.csv"
    capsys.readouterr()
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    rows = read_labels(labels)
    expected = people["ann1"].expected_rows("ann1") | people["ann2"].expected_rows("ann2")
    assert as_set(rows) == expected
    assert len(rows) == len(expected)  # no duplicates, no qualification or repeated-pair rows
    assert not any(r["item_id"].startswith("qual-") for r in rows)
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith(f"imported {len(rows)} labels from 2 annotators")
    for name, _who in people.items():
        assert f"{name}: " in out


def test_shuffle_is_deterministic_by_seed_and_differs_across_dialogues(tmp_path):
    def orders(name, seed):
        key = json.loads((export(tmp_path, "dialsummeval", "csv", "--seed", str(seed), "--no-qualification",
                                 name=name) / "key.json").read_text())
        return {t["item_id"]: [s["letter"] for s in t["slots"]] for t in key["tasks"]}

    first, again, other = orders("a", 5), orders("b", 5), orders("c", 6)
    assert first == again
    assert first != other
    assert len({tuple(v) for v in first.values()}) == len(first) == 2  # each dialogue has its own order
    assert all(len(v) == 14 and sorted(v) == list("ABCDEFGHIJKLMN") for v in first.values())  # all 14 letters


def test_csv_sheet_hides_systems_and_shows_the_guideline(tmp_path):
    pkg = export(tmp_path, "call_centre_fr", "csv", "--no-qualification")
    sheet = (pkg / "sheet.csv").read_text(encoding="utf-8")
    header = sheet.splitlines()[0].split(",")
    assert [c for c in header if c.startswith("candidate_")] == [f"candidate_{x}" for x in "ABCDEF"]
    assert "faithfulness_A" in header and "sub_issues_F" in header
    for system in ("bart", "mistral", "llama", "gpt", "reference"):
        assert system not in sheet  # only key.json names systems
    guide = (pkg / "instructions.md").read_text(encoding="utf-8")
    assert "très peu fidèle" in guide and "N/A" in guide
    key = json.loads((pkg / "key.json").read_text())
    assert {s["system"] for t in key["tasks"] for s in t["slots"]} == {"reference", "bart", "t5", "mistral", "llama",
                                                                       "gpt"}


def test_label_studio_config_asks_every_cell_with_its_scale(tmp_path):
    from xml.etree import ElementTree as ET

    pkg = export(tmp_path, "response_quality", "label-studio")
    root = ET.parse(pkg / "labeling_config.xml").getroot()
    choices = {c.get("name"): [x.get("value") for x in c.iter("Choice")] for c in root.iter("Choices")}
    assert choices["appropriateness_B"] == ["appropriate", "not appropriate", "I don't know"]
    assert choices["correctness_C_why"][-1] == "other"
    assert {t.get("name") for t in root.iter("TextArea")} >= {"contextualization_A_other"}
    tasks = json.loads((pkg / "tasks.json").read_text())
    names = {el.get("value")[1:] for el in root.iter() if (el.get("value") or "").startswith("$")}
    assert all(names <= set(t["data"]) for t in tasks)  # every $field the config names is in every task
    project = json.loads((pkg / "project.json").read_text())
    assert project["label_config"] == (pkg / "labeling_config.xml").read_text()


def test_pairwise_package_starts_with_qualification_and_hides_repeated_pairs(tmp_path, capsys):
    pkg = export(tmp_path, "pairwise_summary", "csv", "--repeats", "2")
    key = json.loads((pkg / "key.json").read_text())
    kinds = [t["kind"] for t in key["tasks"]]
    assert kinds[:5] == ["qualification"] * 5 and kinds.count("check") == 2 and "qualification" not in kinds[5:]
    with (pkg / "sheet.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    checks = [r for r, t in zip(rows, key["tasks"]) if t["kind"] == "check"]
    assert all(r["candidate_1"] == r["candidate_2"] and r["section"] == "evaluation" for r in checks)

    careful = Annotator("pairwise_summary", RUBRICS["pairwise_summary"], seed=3)
    careless = Annotator("pairwise_summary", RUBRICS["pairwise_summary"], seed=4, careless=True,
                         wrong_qualification=True)
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"careful": careful, "careless": careless})
    capsys.readouterr()
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"),
                 "--output", str(tmp_path / "labels.csv")]) == 0
    out = capsys.readouterr().out
    assert "qualification careful: passed" in out and "qualification careless: FAILED" in out
    failed = [line for line in out.splitlines() if line.startswith("consistency check failed")]
    # both hidden repeats, and the qualification's own identical pair (qual-5), which the careless one got wrong
    assert all("careless" in line for line in failed)
    assert sum("repeated pair" in line for line in failed) == 2 and sum("qual-5" in line for line in failed) == 1
    assert "passed by 1/2" in out.splitlines()[-1] and "3 failed consistency checks" in out.splitlines()[-1]


def test_qualification_agreement_uses_the_rubric_tolerance(tmp_path, capsys):
    from judge.annotation.importing import import_labels

    pkg = export(tmp_path, "call_centre_fr", "csv")
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"a": Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=5)})
    rows = list(csv.DictReader(filled.open(newline="", encoding="utf-8")))
    rows[0]["faithfulness_A"] = "4"  # expected 5, tolerance 1: still agrees
    rows[1]["main_issues_A"] = "5"  # expected 2: disagrees
    with filled.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = import_labels([filled], pkg / "key.json")
    assert result.qualification["a"]["faithfulness"] == [3, 3]
    assert result.qualification["a"]["main_issues"] == [2, 3]
    assert result.qualification["a"]["sub_issues"] == [1, 1]
    assert not result.passed("a")  # 2/3 < 0.75


def test_plan_exports_only_planned_dialogues_and_records_the_part(tmp_path):
    pkg = export(tmp_path, "call_centre_fr", "csv", "--plan", str(FIXTURES / "plan"), "--no-qualification")
    key = json.loads((pkg / "key.json").read_text())
    assert [(t["item_id"], t.get("part")) for t in key["tasks"]] == [("call-bus-strike", "random")]


def test_na_and_abstentions_are_kept_as_tokens(tmp_path):
    pkg = export(tmp_path, "call_centre_fr", "csv", "--no-qualification")
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"a": Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=9)})
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    sub = [r for r in read_labels(labels) if r["criterion"] == "sub_issues" and r["item_id"] == "call-bus-strike"]
    assert len(sub) == 6 and {r["score"] for r in sub} == {"N/A"}

    pkg = export(tmp_path, "response_quality", "csv", name="rq")
    who = Annotator("response_quality", RUBRICS["response_quality"], seed=0)
    for key in who.truth:
        who.truth[key] = "I don't know"
    fill_csv(pkg / "sheet.csv", filled, {"b": who})
    labels.unlink()
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    rows = read_labels(labels)
    assert len(rows) == 18 and {r["score"] for r in rows} == {"I don't know"}


def test_import_replaces_its_own_output_atomically(tmp_path):
    pkg = export(tmp_path, "dialsummeval", "csv", "--no-qualification")
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"a": Annotator("dialsummeval", RUBRICS["dialsummeval"], seed=1)})
    labels = tmp_path / "labels.csv"
    for _ in range(2):  # the second run replaces the file the first one wrote
        assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    assert len(read_labels(labels)) == 2 * 14 * 4
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".labels")] == []
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    # shared like any file or directory the user makes, not private like a temporary file
    assert labels.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    (tmp_path / "plain").mkdir()
    assert pkg.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777


def test_a_real_label_studio_export_reads_back(tmp_path):
    """export.json was written by Label Studio 1.23.2 itself (the package imported into a server, annotated
    through its API by the simulated annotator, then exported as JSON): annotators are user ids there."""
    stored = FIXTURES / "label_studio_export"
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(stored / "export.json"), "--key", str(stored / "key.json"),
                 "--output", str(labels)]) == 0
    who = Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=7)
    assert as_set(read_labels(labels)) == who.expected_rows("user-1")


def test_rows_come_out_in_the_input_order(tmp_path):
    pkg = export(tmp_path, "dialsummeval", "csv", "--seed", "3", "--no-qualification")
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"x": Annotator("dialsummeval", RUBRICS["dialsummeval"], seed=1),
                                         "y": Annotator("dialsummeval", RUBRICS["dialsummeval"], seed=2)})
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    got = [(r["item_id"], r["system"], r["annotator"], r["criterion"]) for r in read_labels(labels)]
    items = [json.loads(line) for line in RUBRICS["dialsummeval"].read_text().splitlines()]
    want = [(i["id"], i["system"], a, c) for i in items for a in "xy"
            for c in ("coherence", "consistency", "fluency", "relevance")]
    assert got == want


def _run_example(line: str, cwd: Path, monkeypatch) -> int:
    import shlex

    monkeypatch.chdir(cwd)
    return main(shlex.split(line)[1:])


def test_help_examples_run(tmp_path, monkeypatch):
    """The export example runs on examples/items.jsonl; the import example on examples/annotation/ (a filled sheet
    and its key)."""
    from judge.annotation.cli import EXPORT_EXAMPLE, IMPORT_EXAMPLE

    repo = Path(__file__).resolve().parents[1]
    work = tmp_path / "work"
    shutil.copytree(repo / "examples", work / "examples")
    export_line = EXPORT_EXAMPLE.strip().splitlines()[0]
    import_line = IMPORT_EXAMPLE.strip().splitlines()[0]
    assert _run_example(export_line, work, monkeypatch) == 0
    assert (work / "study" / "key.json").is_file()
    assert _run_example(import_line, work, monkeypatch) == 0
    assert len(read_labels(work / "labels.csv")) == 32


def test_one_sheet_per_annotator_and_several_files_at_once(tmp_path, capsys):
    pkg = export(tmp_path, "response_quality", "csv", "--annotators", "2")
    assert sorted(p.name for p in pkg.glob("sheet*.csv")) == ["sheet_ann1.csv", "sheet_ann2.csv"]
    people = {}
    for n in (1, 2):
        with (pkg / f"sheet_ann{n}.csv").open(newline="", encoding="utf-8") as handle:
            assert {row["annotator"] for row in csv.DictReader(handle)} == {f"ann{n}"}
        people[f"ann{n}"] = Annotator("response_quality", RUBRICS["response_quality"], seed=n)
        fill_csv(pkg / f"sheet_ann{n}.csv", tmp_path / f"filled{n}.csv", {f"ann{n}": people[f"ann{n}"]})
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(tmp_path / "filled1.csv"), str(tmp_path / "filled2.csv"),
                 "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    assert as_set(read_labels(labels)) == people["ann1"].expected_rows("ann1") | people["ann2"].expected_rows("ann2")
    ls = export(tmp_path, "response_quality", "label-studio", "--annotators", "3", name="ls")
    assert json.loads((ls / "project.json").read_text())["maximum_annotations"] == 3


def test_verb_module_imports_nothing_heavy():
    import subprocess

    code = ("import sys, judge.annotation.cli; "
            "print(sorted(m for m in ('pandas', 'scipy', 'sklearn', 'matplotlib', 'pydantic', 'yaml') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_crowdsourcing_results_file_reads_back(tmp_path):
    """The sheet uploaded as a batch; results come back with Input./Answer. columns and a WorkerId."""
    pkg = export(tmp_path, "call_centre_fr", "csv", "--no-qualification")
    filled = tmp_path / "filled.csv"
    people = {"W1ABC": Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=4),
              "W2XYZ": Annotator("call_centre_fr", RUBRICS["call_centre_fr"], seed=5)}
    fill_csv(pkg / "sheet.csv", filled, people)
    with filled.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    from judge.annotation.package import parse_field
    from judge.rubric import load_rubric

    answer_cols = [c for c in rows[0] if parse_field(load_rubric("call_centre_fr"), c)]
    results = tmp_path / "batch_results.csv"
    header = ["HITId", "AssignmentId", "WorkerId", "WorkTimeInSeconds"]
    header += [f"Input.{c}" for c in rows[0] if c not in answer_cols and c != "annotator"]
    header += [f"Answer.{c}" for c in answer_cols]
    with results.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        for n, row in enumerate(rows):
            out = {"HITId": f"H{n // 2}", "AssignmentId": f"A{n}", "WorkerId": row["annotator"],
                   "WorkTimeInSeconds": 60}
            out.update({f"Input.{c}": v for c, v in row.items() if c not in answer_cols and c != "annotator"})
            out.update({f"Answer.{c}": row[c] for c in answer_cols})
            writer.writerow(out)
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(results), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    assert as_set(read_labels(labels)) == (people["W1ABC"].expected_rows("W1ABC")
                                           | people["W2XYZ"].expected_rows("W2XYZ"))
