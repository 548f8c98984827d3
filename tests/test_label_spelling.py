"""One rule for every verb that reads human labels (issue 41): a label whose criterion or item id differs from the
judgments' only by case (`Clarity` for the judged `clarity`, `D12` for `d12`) is an error naming the labels' file
and line, the label's spelling and the judged one; exit 2, nothing written, the inputs unchanged. Before, calibrate
dropped such a criterion with a note and exited 0, and an item id in another case matched part of the items only.

One row per verb and column: the example study's (or escalate example's) labels with one line respelled.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from calibration.cells import chosen_criteria, spelled_otherwise
from calibration.errors import CalibrationError
from judge.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STUDY, ESCALATE = EXAMPLES / "study", EXAMPLES / "escalate"


def _verbs(labels: Path, out: Path) -> dict[str, list[str]]:
    judgments, rerun = str(STUDY / "judgments.jsonl"), str(STUDY / "judgments_rerun.jsonl")
    return {
        "calibrate": ["calibrate", "--judgments", judgments, "--human", str(labels), "--bootstrap", "0",
                      "--output-dir", str(out)],
        "screen": ["screen", "--judgments", judgments, "--human", str(labels), "--output-dir", str(out)],
        "estimate": ["estimate", "--judgments", judgments, "--human", str(labels), "--output-dir", str(out)],
        "audit": ["audit", "--judgments", judgments, "--items", str(STUDY / "items.jsonl"), "--human", str(labels),
                  "--bootstrap", "100", "--output-dir", str(out)],
        "drift": ["drift", "--reference", judgments, "--judgments", rerun, "--human", str(labels), "--bootstrap", "100",
                  "--output-dir", str(out)],
        "select": ["select", "--human", str(labels), "--judge", f"llm={judgments}", "--judge", f"rerun={rerun}",
                   "--bootstrap", "100", "--output-dir", str(out)],
        "escalate": ["escalate", "--judge", f"small={ESCALATE / 'small.jsonl'}", "--judge",
                     f"large={ESCALATE / 'large.jsonl'}", "--human", str(labels), "--alpha", "0.2", "--delta", "0.1",
                     "--output", str(out / "decisions.csv"), "--output-dir", str(out)],
    }


# (verb, column, the respelling of line 2's value, the message expected)
ROWS = [(verb, column) for verb in ("calibrate", "screen", "estimate", "audit", "drift", "select", "escalate")
        for column in ("criterion", "item_id")]


def _respelled(source: Path, column: str, target: Path) -> tuple[str, str]:
    """`source` with line 2's `column` value upper-cased (the header names the columns); the old and new value."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].strip().split(",")
    cells = lines[1].rstrip("\n").split(",")
    at = header.index(column)
    old = cells[at]
    cells[at] = old.capitalize() if column == "criterion" else old.upper()
    assert cells[at] != old
    target.write_text("".join([lines[0], ",".join(cells) + "\n", *lines[2:]]), encoding="utf-8")
    return old, cells[at]


def _digests(*paths: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.mark.parametrize("verb, column", ROWS, ids=[f"{v}-{c}" for v, c in ROWS])
def test_a_label_spelled_as_a_judged_name_only_up_to_case_is_an_error(verb, column, tmp_path, capsys):
    source = (ESCALATE if verb == "escalate" else STUDY) / "labels.csv"
    labels, out = tmp_path / "labels.csv", tmp_path / "out"
    judged, spelled = _respelled(source, column, labels)
    argv = _verbs(labels, out)[verb]
    inputs = [labels] + [Path(a.split("=", 1)[-1]) for a in argv if a.endswith((".jsonl", ".csv")) and
                         Path(a.split("=", 1)[-1]).exists() and "decisions" not in a]
    before = _digests(*inputs)
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    what = "criterion" if column == "criterion" else "item"
    assert code == 2, err
    assert f"{labels}:2: {what} {spelled!r} differs only by case from the judged {what} {judged!r}" in err[-1], err
    assert not out.exists() or not any(out.iterdir())  # nothing written
    assert _digests(*inputs) == before  # the inputs unchanged


def test_the_rule_names_the_first_such_label_and_counts_them_and_leaves_exact_names_alone():
    import pandas as pd

    labels = pd.DataFrame({"criterion": ["clarity", "Clarity", "CLARITY", "fluency"], "line": [2, 3, 4, 5]})
    spelled_otherwise(labels[labels["criterion"] != "Clarity"].iloc[:1], "criterion", {"clarity"}, "l.csv")
    spelled_otherwise(labels, "criterion", {"clarity", "Clarity", "CLARITY"}, "l.csv")  # each judged as written
    spelled_otherwise(labels, "criterion", {"accuracy"}, "l.csv")  # unknown, not a respelling: the verb's own rule
    with pytest.raises(CalibrationError) as caught:
        spelled_otherwise(labels, "criterion", {"clarity", "fluency"}, "l.csv")
    assert str(caught.value) == ("l.csv:3: criterion 'Clarity' differs only by case from the judged criterion "
                                 "'clarity': names must match exactly; spell them alike in the labels and the "
                                 "judgments (2 label(s) like it)")


@pytest.mark.parametrize("criteria, available, expected", [
    (None, ["a", "b"], ["a", "b"]),
    (["b"], ["a", "b"], ["b"]),
    (["c", "a", "d"], ["a", "b"], "--criteria: no x for c, d (first 'c'); have a, b"),
    (["c"], [], "--criteria: no x for c (first 'c'); have none"),
])
def test_chosen_criteria_is_the_criteria_asked_or_all(criteria, available, expected):
    missing = "--criteria: no x for {unknown} (first {first!r}); have {available}"
    if isinstance(expected, str):
        with pytest.raises(CalibrationError, match=r"^" + pytest.importorskip("re").escape(expected) + "$"):
            chosen_criteria(criteria, available, missing)
    else:
        assert chosen_criteria(criteria, available, missing) == expected
