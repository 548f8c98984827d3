"""The statistics verbs' command lines (calibration/study/cli.py, calibration/trust/cli.py, calibration/cascade/cli.py):
a required flag left out is argparse's one line naming it, exit 2, nothing written, before any file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
J, J2, LABELS, ITEMS = (str(STUDY / name) for name in ("judgments.jsonl", "judgments_rerun.jsonl", "labels.csv",
                                                       "items.jsonl"))

# (verb and every required flag, the flag left out): each row drops one flag and its value.
FULL = {
    "calibrate": ["calibrate", "--judgments", J, "--human", LABELS],
    "screen": ["screen", "--judgments", J],
    "estimate": ["estimate", "--judgments", J, "--human", LABELS],
    "audit": ["audit", "--judgments", J, "--items", ITEMS],
    "drift": ["drift", "--reference", J, "--judgments", J2],
    "select": ["select", "--human", LABELS, "--judge", f"a={J}"],
    "escalate": ["escalate", "--judge", f"a={J}", "--human", LABELS, "--alpha", "0.1", "--delta", "0.1",
                 "--output", "decisions.csv"],
}
ROWS = [(verb, flag) for verb, argv in FULL.items() for flag in argv[1::2]
        if not (verb == "calibrate" and flag == "--human")]


def _without(argv: list[str], flag: str) -> list[str]:
    at = argv.index(flag)
    return argv[:at] + argv[at + 2:]


@pytest.mark.parametrize("verb, flag", ROWS)
def test_a_required_flag_left_out_is_named(verb, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(_without(FULL[verb], flag))
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"judge {verb}: error: the following arguments are required: ")
    assert flag in last.split(": ")[-1].split(", ")
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("argv, systems", [
    (["--judgments", J, "--human", LABELS], {"alpha", "beta", "gamma"}),
    (["--judgments", str(ROOT / "examples" / "pairwise" / "judgments.jsonl"), "--human",
      str(ROOT / "examples" / "pairwise" / "labels.csv"), "--baseline", "lead-3"], None)])
def test_the_estimate_footer_counts_every_system_the_baseline_included(argv, systems, tmp_path, monkeypatch, capsys):
    """The last line counts the systems of the study: a pairwise study's baseline has no row of its own in
    estimates.csv, but it is one of the systems (counted from the judged pairs here)."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    assert main(["estimate", *argv]) == 0
    if systems is None:
        pairs = pd.read_json(argv[1], lines=True)
        systems = set(pairs["system_1"]) | set(pairs["system_2"])
    captured = capsys.readouterr()
    last = (captured.out + captured.err).strip().splitlines()[-1]
    assert last.startswith(f"estimate: 2 criteria, {len(systems)} systems, from ")
