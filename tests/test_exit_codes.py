"""The one place that maps what stopped a command to its exit code and its line on stderr (judge.errors.exit_with),
table-driven: each kind of stop, the code every verb gives for it and what it says."""

from __future__ import annotations

import pytest

from calibration.cascade.runs import RunStopped
from calibration.errors import CalibrationError
from calibration.trust.cli import ProbesPending
from calibration.tune.runs import TunePending
from judge.backends.batch import BatchPending
from judge.errors import (
    EXIT_BATCH_PENDING,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    InputError,
    JudgeError,
    OutputError,
    exit_with,
)

CASES = [
    (InputError("items.jsonl:3: no id"), EXIT_USAGE, "judge score: error: items.jsonl:3: no id\n"),
    (CalibrationError("no criterion in common"), EXIT_USAGE, "judge score: error: no criterion in common\n"),
    (OutputError("out.jsonl: not ours"), EXIT_USAGE, "judge score: error: out.jsonl: not ours\n"),
    (FileNotFoundError(2, "No such file or directory", "x.csv"), EXIT_USAGE,
     "judge score: error: x.csv: No such file or directory\n"),
    (OSError(28, "No space left on device"), EXIT_USAGE, "judge score: error: No space left on device\n"),
    (BatchPending("4 requests wait"), EXIT_BATCH_PENDING, "judge score: 4 requests wait\n"),
    (ProbesPending("the probes wait for batch answers"), EXIT_BATCH_PENDING,
     "judge score: the probes wait for batch answers\n"),
    (TunePending("fold 1 waits"), EXIT_BATCH_PENDING, "judge score: fold 1 waits\n"),
    (RunStopped("judge large: some judgments failed", EXIT_FAILED, "large"), EXIT_FAILED,
     "judge score: judge large: some judgments failed\n"),
    (KeyboardInterrupt(), EXIT_INTERRUPTED, ""),
    (BrokenPipeError(32, "Broken pipe"), EXIT_OK, ""),
]


@pytest.mark.parametrize(("stopped", "code", "said"), CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_each_stop_has_its_code_and_one_line(stopped, code, said, capsys):
    assert exit_with("score", stopped) == code
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", said)


def test_the_codes_are_those_the_verbs_document():
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BATCH_PENDING, EXIT_INTERRUPTED) == (0, 1, 2, 3, 130)
    assert issubclass(CalibrationError, JudgeError)


def test_anything_else_is_a_bug_and_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        exit_with("score", ZeroDivisionError("a bug"))


def test_the_cli_hub_and_the_statistics_verbs_map_through_it(tmp_path, capsys):
    """Bad input through `judge` (the hub) and through a statistics verb (run_verb): exit 2, one line."""
    from judge.cli import main

    missing = tmp_path / "missing.jsonl"
    assert main(["score", "--rubric", "dialsummeval", "--input", str(missing), "--output",
                 str(tmp_path / "o.jsonl")]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("judge score: error: ")
    assert main(["drift", "--reference", str(missing), "--judgments", str(missing)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("judge drift: error: ") and err.count("\n") == 1
