"""A judge or metric CSV that stores its failed judgments as a number (-1 "unparsed") declares it with
`--failure-value`: those cells are failures in every statistics verb, never scores (a -1 among 1-5 scores once
passed as a score even with --scale 1,5). Without the flag the number is a score, as the file says."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import calibration
from calibration.errors import CalibrationError
from calibration.io import load_judge_scores
from judge.cli import main

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"


def _csv_with_failures(tmp_path: Path) -> Path:
    """The example study's judge scores as a CSV, with every fifth one stored as -1 (a failed parse)."""
    judge = load_judge_scores(STUDY / "judgments.jsonl")
    judge = judge[judge["status"] == "ok"][["item_id", "system", "criterion", "score"]].reset_index(drop=True)
    judge.loc[judge.index % 5 == 0, "score"] = -1
    path = tmp_path / "scores.csv"
    judge.to_csv(path, index=False)
    return path


def test_the_failure_value_is_read_as_a_failure(tmp_path):
    path = _csv_with_failures(tmp_path)
    read = load_judge_scores(path, failure_value=-1)
    failed = pd.read_csv(path)["score"] == -1
    assert ((read.loc[failed.to_numpy(), "status"] == "error").all()
            and read.loc[failed.to_numpy(), "score"].isna().all())
    assert (read.loc[~failed.to_numpy(), "status"] == "ok").all()
    assert (load_judge_scores(path)["score"] == -1).sum() == failed.sum()  # without it: a score, as written


@pytest.mark.parametrize("verb", ["calibrate", "screen", "estimate", "drift", "select"])
def test_every_verb_leaves_failures_out_of_its_numbers(tmp_path, verb):
    path = _csv_with_failures(tmp_path)
    labels = STUDY / "labels.csv"
    run = {
        "calibrate": lambda **o: calibration.calibrate(path, labels, scale=(1, 5), bootstrap=0, **o).system_means,
        "screen": lambda **o: calibration.screen(path, bootstrap=50, **o).systems,
        "estimate": lambda **o: calibration.estimate(path, labels, scale=(1, 5), **o).estimates,
        "drift": lambda **o: calibration.drift(path, path, bootstrap=100, **o).drift,
        "select": lambda **o: calibration.select(labels, {"a": path, "b": STUDY / "judgments.jsonl"},
                                                 bootstrap=100, scale=(1, 5), **o).selection,
    }[verb]
    table = run(failure_value=-1)
    numbers = table.select_dtypes("number")
    if verb in ("calibrate", "screen", "estimate"):  # means of scores: a -1 would pull them below the scale
        column = {"calibrate": "judge_mean", "screen": "mean", "estimate": "estimate"}[verb]
        kept = numbers[column].dropna()
        assert len(kept) and (kept >= 1).all(), table
        assert (run()[column].dropna() < kept.max()).any()  # the -1s move them when read as scores
    else:
        assert np.isfinite(numbers.to_numpy(dtype=float)).any()


BAD = [
    (["--failure-value", "x"], "argument --failure-value: must be a number, got 'x'"),
    (["--failure-value", "nan"], "argument --failure-value: must be a number, got 'nan'"),
]


@pytest.mark.parametrize("extra, message", BAD, ids=["not a number", "nan"])
def test_a_bad_failure_value_is_refused_naming_the_flag(tmp_path, capsys, extra, message):
    path = _csv_with_failures(tmp_path)
    before = path.read_bytes()
    with pytest.raises(SystemExit) as caught:
        main(["calibrate", "--judgments", str(path), "--human", str(STUDY / "labels.csv"), *extra])
    assert caught.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]
    assert path.read_bytes() == before


def test_the_function_refuses_what_the_flag_refuses(tmp_path):
    with pytest.raises(CalibrationError, match="--failure-value must be a number, got 'x'"):
        load_judge_scores(_csv_with_failures(tmp_path), failure_value="x")
