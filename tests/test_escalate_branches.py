"""Every clause of escalate's option checks (calibration.cascade.escalate), one row each: a bool, a number of the
wrong kind, a value out of range, each refused in the CLI's words before any file is read. Written after a fresh
draw of benchmarks/mutation.py (seed 12) let an `or` of these checks become an `and`."""

from __future__ import annotations

import math

import pytest

import calibration
from calibration.errors import CalibrationError
from test_escalate import JUDGES, LABELS

ROWS = [
    ({"tolerance": True}, "--tolerance must be a number of score points >= 0, got True"),
    ({"tolerance": "0.5"}, "--tolerance must be a number of score points >= 0, got '0.5'"),
    ({"tolerance": math.nan}, "--tolerance must be a number of score points >= 0, got nan"),
    ({"tolerance": -0.5}, "--tolerance must be a number of score points >= 0, got -0.5"),
    ({"steps": True}, "--steps must be a positive whole number, got True"),
    ({"steps": 2.0}, "--steps must be a positive whole number, got 2.0"),
    ({"steps": 0}, "--steps must be a positive whole number, got 0"),
    ({"path_cells": True}, "--path-cells must be a positive whole number, got True"),
    ({"path_cells": 5.0}, "--path-cells must be a positive whole number, got 5.0"),
    ({"random_dialogues": True}, "--random-dialogues must be a whole number of at least 0, got True"),
    ({"random_dialogues": 2.0}, "--random-dialogues must be a whole number of at least 0, got 2.0"),
    ({"random_dialogues": -1}, "--random-dialogues must be a whole number of at least 0, got -1"),
]


@pytest.mark.parametrize("given, message", ROWS, ids=[m[:40] for _, m in ROWS])
def test_each_clause_of_each_option_check_refuses_on_its_own(given, message):
    with pytest.raises(CalibrationError) as caught:
        calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, **given)
    assert message in str(caught.value)


@pytest.mark.parametrize("given", [{"tolerance": 0}, {"steps": 1}, {"path_cells": None}, {"random_dialogues": 0}])
def test_the_edge_of_each_range_is_accepted(given):
    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, **given)
    assert len(result.decisions) > 0
