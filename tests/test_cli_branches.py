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
