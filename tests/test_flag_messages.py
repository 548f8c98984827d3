"""A flag given a value it cannot take: one line that names the flag and says what it must be, in the wording the
Python functions use, exit 2, and no output written or changed.

Each row of FLAG_ROWS is what a user could type: the verb's arguments, and the last line expected on stderr (argparse
prints its usage above it). API_ROWS give the statistics functions the same wrong values in Python.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import calibration
from calibration.options import criteria_option, scale_option
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
J, J2, LABELS, ITEMS = (str(STUDY / name) for name in ("judgments.jsonl", "judgments_rerun.jsonl", "labels.csv",
                                                       "items.jsonl"))
CALIBRATE = ["calibrate", "--judgments", J, "--human", LABELS]
SCREEN = ["screen", "--judgments", J]
ESTIMATE = ["estimate", "--judgments", J, "--human", LABELS]
AUDIT = ["audit", "--judgments", J, "--items", ITEMS]
DRIFT = ["drift", "--reference", J, "--judgments", J2]
SELECT = ["select", "--human", LABELS, "--judge", f"a={J}", "--judge", f"b={J2}"]

FLAG_ROWS = [
    # the faults found in review: internal function names (`invalid _positive value`) instead of what is wanted
    (SCREEN + ["--budget", "2.5"], "judge screen: error: argument --budget: must be a positive whole number, "
                                   "got '2.5'"),
    (CALIBRATE + ["--bootstrap", "x"], "judge calibrate: error: argument --bootstrap: must be 0 (no bootstrap) or a "
                                       "whole number of at least 40, got 'x'"),
    (ESTIMATE + ["--confidence", "x"], "judge estimate: error: argument --confidence: must be between 0 and 1, "
                                       "got 'x'"),
    # the other flags with a type of their own, in each verb
    (SCREEN + ["--budget", "0"], "judge screen: error: argument --budget: must be a positive whole number, got '0'"),
    (SCREEN + ["--bootstrap", "-3"], "judge screen: error: argument --bootstrap: must be a positive whole number, "
                                     "got '-3'"),
    (SCREEN + ["--random-share", "1.5"], "judge screen: error: argument --random-share: must be between 0 and 1, "
                                         "got '1.5'"),
    (SCREEN + ["--random-share", "half"], "judge screen: error: argument --random-share: must be between 0 and 1, "
                                          "got 'half'"),
    (SCREEN + ["--power", "x"], "judge screen: error: argument --power: must be between 0 and 1, got 'x'"),
    (SCREEN + ["--power", "1.5"], "judge screen: error: --power must be between 0 and 1, got 1.5"),
    (SCREEN + ["--seed", "1.5"], "judge screen: error: argument --seed: must be a whole number of at least 0, "
                                 "got '1.5'"),
    (SCREEN + ["--criteria", ","], "judge screen: error: argument --criteria: must be a comma-separated list of "
                                   "criteria, e.g. coherence,fluency, got ','"),
    (SCREEN + ["--scale", "1"], "judge screen: error: argument --scale: must be MIN,MAX with MIN < MAX, e.g. 1,5, "
                                "got '1'"),
    (CALIBRATE + ["--bootstrap", "-1"], "judge calibrate: error: argument --bootstrap: must be 0 (no bootstrap) or a "
                                        "whole number of at least 40, got '-1'"),
    (CALIBRATE + ["--seed", "x"], "judge calibrate: error: argument --seed: must be a whole number of at least 0, "
                                  "got 'x'"),
    (CALIBRATE + ["--scale", "5,1"], "judge calibrate: error: argument --scale: must be MIN,MAX with MIN < MAX, "
                                     "e.g. 1,5, got '5,1'"),
    (CALIBRATE + ["--scale", "1,x"], "judge calibrate: error: argument --scale: must be MIN,MAX with MIN < MAX, "
                                     "e.g. 1,5, got '1,x'"),
    (CALIBRATE + ["--scale", "1,inf"], "judge calibrate: error: argument --scale: must be MIN,MAX with MIN < MAX, "
                                       "e.g. 1,5, got '1,inf'"),
    (CALIBRATE + ["--criteria", " , "], "judge calibrate: error: argument --criteria: must be a comma-separated list "
                                        "of criteria, e.g. coherence,fluency, got ' , '"),
    (ESTIMATE + ["--confidence", "1"], "judge estimate: error: --confidence must be between 0 and 1, got 1.0"),
    (ESTIMATE + ["--confidence", "nan"], "judge estimate: error: argument --confidence: must be between 0 and 1, "
                                         "got 'nan'"),
    (ESTIMATE + ["--scale", "a,b"], "judge estimate: error: argument --scale: must be MIN,MAX with MIN < MAX, "
                                    "e.g. 1,5, got 'a,b'"),
    (AUDIT + ["--bootstrap", "x"], "judge audit: error: argument --bootstrap: must be a positive whole number, "
                                   "got 'x'"),
    (AUDIT + ["--bootstrap", "0"], "judge audit: error: --bootstrap must be a whole number of at least 40, got 0"),
    (AUDIT + ["--bootstrap-seed", "x"], "judge audit: error: argument --bootstrap-seed: must be a whole number of "
                                        "at least 0, got 'x'"),
    (AUDIT + ["--length-threshold", "x"], "judge audit: error: argument --length-threshold: must be a share between "
                                          "0 and 1, e.g. 0.1, got 'x'"),
    (AUDIT + ["--probe-sample", "x"], "judge audit: error: argument --probe-sample: must be a positive whole number, "
                                      "got 'x'"),
    (AUDIT + ["--criteria", ","], "judge audit: error: argument --criteria: must be a comma-separated list of "
                                  "criteria, e.g. coherence,fluency, got ','"),
    (DRIFT + ["--bootstrap", "x"], "judge drift: error: argument --bootstrap: must be a whole number of at least 100, "
                                   "got 'x'"),
    (DRIFT + ["--bootstrap", "5"], "judge drift: error: --bootstrap must be a whole number of at least 100, got 5"),
    (DRIFT + ["--margin", "nan"], "judge drift: error: argument --margin: must be a positive number of score points, "
                                  "got 'nan'"),
    (DRIFT + ["--share-margin", "x"], "judge drift: error: argument --share-margin: must be between 0 and 1, "
                                      "got 'x'"),
    (DRIFT + ["--seed", "x"], "judge drift: error: argument --seed: must be a whole number of at least 0, got 'x'"),
    (SELECT + ["--bootstrap", "1e3"], "judge select: error: argument --bootstrap: must be a whole number of at least "
                                      "100, got '1e3'"),
    (SELECT + ["--seed", "1.5"], "judge select: error: argument --seed: must be a whole number of at least 0, "
                                 "got '1.5'"),
]


def _snapshot(*roots: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", FLAG_ROWS, ids=[" ".join(row[0][:1] + row[0][-2:]) for row in FLAG_ROWS])
def test_a_bad_flag_value_is_one_line_naming_the_flag(argv, expected, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("not the tool's\n", encoding="utf-8")  # a folder a user already has
    before = _snapshot(tmp_path, STUDY)
    code, err = run(argv + ["--output-dir", str(out), "--report", str(tmp_path / "report.html")], capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert lines[-1] == expected
    assert "Traceback" not in err and "invalid" not in lines[-1] and "_" not in lines[-1].split(":")[2]
    assert _snapshot(tmp_path, STUDY) == before  # nothing written, nothing changed, inputs untouched


@pytest.mark.parametrize("flag, cli, function, options", [
    ("--budget", SCREEN + ["--budget", "2.5"], calibration.screen, dict(budget=2.5)),
    ("--random-share", SCREEN + ["--random-share", "2"], calibration.screen, dict(random_share=2.0)),
    ("--bootstrap", CALIBRATE + ["--bootstrap", "-1"], calibration.calibrate, dict(bootstrap=-1)),
    ("--confidence", ESTIMATE + ["--confidence", "x"], calibration.estimate, dict(confidence=-1.0)),
])
def test_the_cli_and_the_function_say_the_same(flag, cli, function, options, capsys):
    code, err = run(cli, capsys)
    assert code == 2
    wanted = err.strip().splitlines()[-1].split(f"argument {flag}: ", 1)[1].split(", got ")[0]
    inputs = (J, LABELS) if function is not calibration.screen else (J,)
    with pytest.raises(calibration.CalibrationError) as caught:
        function(*inputs, **options)
    assert str(caught.value).startswith(f"{flag} {wanted}, got ")


# -- options given to the Python functions --------------------------------------------------------------------------

SCALE_MESSAGE = "--scale must be MIN,MAX with MIN < MAX, e.g. 1,5, got "
CRITERIA_MESSAGE = "--criteria must be a comma-separated list of criteria, e.g. coherence,fluency, got "


@pytest.mark.parametrize("given, expected", [
    (None, None), ((1, 5), (1.0, 5.0)), ([0.5, 7], (0.5, 7.0)), ("1,5", (1.0, 5.0)),
])
def test_scale_option_takes_two_numbers(given, expected):
    assert scale_option(given) == expected


@pytest.mark.parametrize("given", [5, (1, "5"), (5, 1), (1, 1), (1, 2, 3), (1,), "5,1", "1-5", (1, float("nan")),
                                   (True, 5), {"min": 1}])
def test_scale_option_refuses_anything_else(given):
    with pytest.raises(calibration.CalibrationError) as caught:
        scale_option(given)
    assert str(caught.value) == SCALE_MESSAGE + repr(given)


@pytest.mark.parametrize("given, expected", [
    (None, None), ("clarity", ["clarity"]), ("clarity, accuracy", ["clarity", "accuracy"]),
    (["clarity"], ["clarity"]), (("accuracy", "clarity"), ["accuracy", "clarity"]),
])
def test_criteria_option_splits_a_string_as_the_cli_does(given, expected):
    assert criteria_option(given) == expected


@pytest.mark.parametrize("given", ["", ",", [], [1, 2], 3, ["clarity", None]])
def test_criteria_option_refuses_anything_else(given):
    with pytest.raises(calibration.CalibrationError) as caught:
        criteria_option(given)
    assert str(caught.value) == CRITERIA_MESSAGE + repr(given)


CALLS = {
    "calibrate": lambda **o: calibration.calibrate(J, LABELS, bootstrap=0, **o),
    "screen": lambda **o: calibration.screen(J, LABELS, bootstrap=50, **o),
    "estimate": lambda **o: calibration.estimate(J, LABELS, **o),
}


@pytest.mark.parametrize("verb", sorted(CALLS))
@pytest.mark.parametrize("scale", [5, (1, "5"), (5, 1)])
def test_a_bad_scale_is_the_clis_error(verb, scale):
    with pytest.raises(calibration.CalibrationError) as caught:
        CALLS[verb](scale=scale)
    assert str(caught.value) == SCALE_MESSAGE + repr(scale)


@pytest.mark.parametrize("verb", sorted(CALLS))
def test_criteria_as_a_string_is_split_on_commas(verb):
    one = CALLS[verb](criteria="clarity")
    assert one.criteria == ["clarity"]
    assert CALLS[verb](criteria="clarity,accuracy").criteria == CALLS[verb](criteria=["clarity", "accuracy"]).criteria


def test_criteria_as_a_string_in_audit_and_drift():
    assert calibration.audit(J, ITEMS, LABELS, criteria="clarity", bootstrap=50).criteria == ["clarity"]
    assert set(calibration.drift(J, J2, criteria="clarity", bootstrap=100).drift["criterion"]) == {"clarity"}
