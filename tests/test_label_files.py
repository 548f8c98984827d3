"""Human labels in several files (`--human A --human B`, `calibration.estimate(..., [A, B])`): a two-stage study's
labels come back as two files, one per `judge export --plan` package.

Checked: two files give the numbers one concatenated file gives, and the summary names both with their digests;
every refusal names the right file and line (table-driven: each row a mistake a user could make, its message, and
a check that no file was touched and no output written); the example study's two-stage plan end to end through the
CLI, as `judge estimate --help` shows it."""

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import calibration
from calibration.errors import CalibrationError
from calibration.io import LABELS_FILE, label_at, read_human_labels
from judge.cli import main

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"
PAIRWISE = Path(__file__).resolve().parents[1] / "examples" / "pairwise"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_labels(tmp_path: Path) -> tuple[Path, Path]:
    """examples/study/labels.csv cut in two files by dialogue (a first and a second batch)."""
    frame = pd.read_csv(STUDY / "labels.csv", dtype=str)
    first = frame["item_id"].isin(["d01", "d02", "d03", "d05", "d09"])
    paths = tmp_path / "first.csv", tmp_path / "second.csv"
    frame[first].to_csv(paths[0], index=False)
    frame[~first].to_csv(paths[1], index=False)
    return paths


def test_two_files_give_the_numbers_of_one_file_and_the_summary_names_both(tmp_path):
    first, second = split_labels(tmp_path)
    whole = calibration.estimate(STUDY / "judgments.jsonl", STUDY / "labels.csv", plan=STUDY / "plan")
    split = calibration.estimate(STUDY / "judgments.jsonl", [first, second], plan=STUDY / "plan")
    pd.testing.assert_frame_equal(split.estimates, whole.estimates)
    pd.testing.assert_frame_equal(split.differences, whole.differences)
    pd.testing.assert_frame_equal(split.targeted, whole.targeted)
    assert split.provenance["human"] == [{"path": str(first), "sha256": digest(first)},
                                         {"path": str(second), "sha256": digest(second)}]
    # One file, alone or in a list of one, keeps the summary's shape of one file.
    alone = calibration.estimate(STUDY / "judgments.jsonl", [STUDY / "labels.csv"], plan=STUDY / "plan")
    assert alone.provenance["human"] == whole.provenance["human"] == {"path": str(STUDY / "labels.csv"),
                                                                      "sha256": digest(STUDY / "labels.csv")}


def test_each_label_keeps_its_own_file_and_line(tmp_path):
    first, second = split_labels(tmp_path)
    labels = read_human_labels([first, second])
    rows = pd.read_csv(first).shape[0]
    assert list(labels.index) == list(range(len(labels)))  # one index over both files: .loc stays unambiguous
    assert list(labels[LABELS_FILE].unique()) == [str(first), str(second)]
    assert label_at(labels, labels.iloc[0]) == f"{first}:2"
    assert label_at(labels, labels.iloc[rows]) == f"{second}:2"  # the second file's first row, its own line 2
    assert label_at(labels, next(labels.iloc[rows:].itertuples())) == f"{second}:2"
    one = read_human_labels(first)
    assert LABELS_FILE not in one.columns and label_at(one, one.iloc[3]) == f"{first}:5"
    listed = read_human_labels([first])  # a list of one file is that file, no column added
    pd.testing.assert_frame_equal(listed, one)
    assert listed.attrs["path"] == str(first)
    frame = one.drop(columns="line").assign(line=[7] * len(one))
    frame.attrs = {}
    assert label_at(frame, frame.iloc[0], "a script's frame") == "a script's frame:7"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


HEADER = "item_id,system,annotator,criterion,score\n"

# (name, the second file's text, or a keyword; the message expected). The first file is always examples/study's
# labels.csv, untouched; the second stands for the second stage's.
BAD = [
    ("the same file twice", "same",
     "labels.csv:2: duplicate label for item 'd12', system 'alpha', annotator 'ann_a', criterion 'clarity': already "
     "at {labels}:2 (the same file given twice, or a dialogue labelled in two stages?)"),
    ("a cell labelled in both files", HEADER + "d06,alpha,ann_a,clarity,3\nd12,alpha,ann_a,clarity,4\n",
     "{second}:3: duplicate label for item 'd12', system 'alpha', annotator 'ann_a', criterion 'clarity': already at "
     "{labels}:2"),
    ("an unknown dialogue in the second file", HEADER + "d06,alpha,ann_a,clarity,3\nd99,alpha,ann_a,clarity,4\n",
     "{second}:3: item 'd99' is not in the judgments (1 label(s) like it)"),
    ("an unknown system in the second file", HEADER + "d06,alpha,ann_a,clarity,3\nd06,delta,ann_a,clarity,4\n",
     "{second}:3: system 'delta' is not in the judgments"),
    ("off the scale in the second file", HEADER + "d06,alpha,ann_a,clarity,3\nd06,beta,ann_a,clarity,9\n",
     "{second}:3: score 9 of criterion 'clarity' is off the scale"),
    ("a missing column in the second file", "item_id,system,annotator,score\nd06,alpha,ann_a,3\n",
     "{second}:1: missing column(s) criterion; found item_id, system, annotator, score"),
    ("a second file with no label", HEADER, "{second}"),
    ("no such second file", "missing", "{second}"),
    ("a dialogue outside the plan", HEADER + "d06,alpha,ann_a,clarity,3\n",
     "{second}:2: dialogue 'd06' is not in the plan"),
]


@pytest.mark.parametrize("name,second,message", BAD, ids=[row[0] for row in BAD])
def test_a_bad_second_label_file_is_refused_naming_its_own_file_and_line(tmp_path, name, second, message):
    labels = tmp_path / "labels.csv"
    shutil.copy(STUDY / "labels.csv", labels)
    path = tmp_path / "second.csv"
    if second == "same":
        path = labels
    elif second != "missing":
        write(path, second)
    before = {p.name: digest(p) for p in tmp_path.iterdir()}
    out = tmp_path / "out"
    code = main(["estimate", "--judgments", str(STUDY / "judgments.jsonl"), "--human", str(labels), "--human",
                 str(path), "--plan", str(STUDY / "plan"), "--output-dir", str(out)])
    assert code == 2
    with pytest.raises(CalibrationError) as caught:
        calibration.estimate(STUDY / "judgments.jsonl", [labels, path], plan=STUDY / "plan")
    assert message.format(labels=labels, second=path) in str(caught.value)
    assert {p.name: digest(p) for p in tmp_path.iterdir()} == before  # nothing touched, no output written
    assert not out.exists()


def test_no_label_file_at_all_is_refused():
    with pytest.raises(CalibrationError, match="no human labels given"):
        calibration.estimate(STUDY / "judgments.jsonl", [], plan=STUDY / "plan")


def test_a_bad_pairwise_vote_in_the_second_file_names_that_file(tmp_path):
    frame = pd.read_csv(PAIRWISE / "labels.csv", dtype=str)
    first, second = tmp_path / "votes1.csv", tmp_path / "votes2.csv"
    frame.iloc[:10].to_csv(first, index=False)
    bad = frame.iloc[10:].copy()
    bad.iloc[2, bad.columns.get_loc("score")] = "7"
    bad.to_csv(second, index=False)
    with pytest.raises(CalibrationError) as caught:
        calibration.estimate(PAIRWISE / "judgments.jsonl", [first, second], baseline="lead-3")
    assert f"{second}:4: '7' is not a pairwise verdict" in str(caught.value)
    frame.iloc[10:].to_csv(second, index=False)
    split = calibration.estimate(PAIRWISE / "judgments.jsonl", [first, second], baseline="lead-3")
    whole = calibration.estimate(PAIRWISE / "judgments.jsonl", PAIRWISE / "labels.csv", baseline="lead-3")
    pd.testing.assert_frame_equal(split.estimates, whole.estimates)


def test_the_two_stage_example_of_the_help_runs_with_one_file_per_stage(tmp_path, monkeypatch):
    """`judge screen --pilot-plan` then `judge estimate --human labels.csv --human second_stage_labels.csv`: the
    second file labels what the second stage drew that the first had not, and both count."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(STUDY, "study")
    assert main(["screen", "--judgments", "study/judgments.jsonl", "--human", "study/labels.csv", "--pilot-plan",
                 "study/plan", "--design", "active", "--budget", "4", "--output-dir", "second"]) == 0
    plan = pd.read_csv("second/plan.csv", dtype=str)
    second_random = set(plan.loc[(plan["stage"] == "2") & (plan["part"] == "random"), "item_id"])
    new = pd.read_csv("study/second_stage_labels.csv", dtype=str)
    old = pd.read_csv("study/labels.csv", dtype=str)
    assert set(new["item_id"]) & set(old["item_id"]) == set()  # the second file adds dialogues only
    assert main(["estimate", "--judgments", "study/judgments.jsonl", "--human", "study/labels.csv", "--human",
                 "study/second_stage_labels.csv", "--plan", "second", "--output-dir", "out",
                 "--report", "out/estimate.html"]) == 0
    summary = json.loads(Path("out/summary.json").read_text())
    assert [h["path"] for h in summary["provenance"]["human"]] == ["study/labels.csv",
                                                                  "study/second_stage_labels.csv"]
    first_random = set(plan.loc[(plan["stage"] == "1") & (plan["part"] == "random"), "item_id"])
    labelled = (first_random | second_random) & (set(old["item_id"]) | set(new["item_id"]))
    assert summary["n_random_dialogues"] == len(labelled) > len(first_random & set(old["item_id"]))
    report = Path("out/estimate.html").read_text()
    assert "study/labels.csv" in report and "study/second_stage_labels.csv" in report
