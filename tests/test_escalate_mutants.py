"""Each confidence signal of `judge escalate` (calibration.cascade.escalate._confidence) on exact small cases: what
the module docstring and --help say each one is, including the cases where a judge recorded nothing usable (then
the verdict is never accepted on that signal: confidence 0), and a missing verdict (no confidence at all)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from calibration.cascade.escalate import _confidence


def row(**fields):
    return SimpleNamespace(**{"probs": None, "samples": None, "forward": None, "swapped": None, **fields})


# (the judge's row, its verdict, kind, signal, tolerance, the other judges' verdicts, the confidence)
CASES = [
    (row(), None, "likert", "probs", 0.5, [], np.nan),  # no verdict: no confidence whatever the signal
    (row(), 3.0, "likert", "none", 0.5, [], 1.0),
    (row(probs={"2": 0.2, "3": 0.5, "4": 0.3}), 3.0, "likert", "probs", 0.5, [], 0.5),
    (row(probs={"2": 0.2, "3": 0.5, "4": 0.3}), 3.0, "likert", "probs", 1.0, [], 1.0),  # within 1 point: all three
    (row(probs={"2": 0.2, "3": 0.5, "x": 0.3}), 2.5, "likert", "probs", 0.5, [], 0.7),  # 2 and 3, not a non-number
    (row(probs={}), 3.0, "likert", "probs", 0.5, [], 0.0),
    (row(probs="not a dict"), 3.0, "likert", "probs", 0.5, [], 0.0),
    (row(probs={"yes": 0.8, "no": 0.2}), "yes", "categorical", "probs", 0.5, [], 0.8),
    (row(probs={"yes": 0.8, "no": 0.2}), "maybe", "categorical", "probs", 0.5, [], 0.0),
    (row(samples=[3, 3, 4, 2]), 3.0, "likert", "samples", 0.5, [], 0.5),
    (row(samples=[3, 3, 4, 2]), 3.0, "likert", "samples", 1.0, [], 1.0),
    (row(samples=["yes", "no", "yes"]), "yes", "categorical", "samples", 0.5, [], 2 / 3),
    (row(samples=[3]), 3.0, "likert", "samples", 0.5, [], 0.0),  # one sample is no agreement of re-asks
    (row(samples=[3, 3]), 3.0, "likert", "samples", 0.5, [], 1.0),  # two are
    (row(samples=[3, None, 3]), 3.0, "likert", "samples", 0.5, [], 2 / 3),  # an unparsed sample never agrees
    (row(samples=["yes", None, "no"]), "yes", "categorical", "samples", 0.5, [], 1 / 3),
    (row(samples=None), 3.0, "likert", "samples", 0.5, [], 0.0),
    (row(forward="1", swapped="1"), "1", "pairwise", "order", 0.5, [], 1.0),
    (row(forward="1", swapped="2"), "0", "pairwise", "order", 0.5, [], 0.0),
    (row(forward="1", swapped=None), "1", "pairwise", "order", 0.5, [], 0.0),
    (row(forward=np.nan, swapped="1"), "1", "pairwise", "order", 0.5, [], 0.0),
    (row(), 3.0, "likert", "jury", 0.5, [3.0, 3.5, 4.0, None], 2 / 3),  # an absent juror is not a vote
    (row(), 3.0, "likert", "jury", 1.0, [3.0, 3.5, 4.0], 1.0),
    (row(), "yes", "categorical", "jury", 0.5, ["yes", "no"], 0.5),
    (row(), "yes", "categorical", "jury", 0.5, [None, None], 0.0),
]


@pytest.mark.parametrize("judge_row, verdict, kind, signal, tolerance, jury, expected", CASES)
def test_each_signal_is_the_share_its_help_describes(judge_row, verdict, kind, signal, tolerance, jury, expected):
    assert _confidence(judge_row, verdict, kind, signal, tolerance, jury) == pytest.approx(expected, nan_ok=True)
