"""Which scale the study reports draw an interval against (calibration.study.report._bounds_of), one row per case:
no scales, the criterion's own, the "*" default, none for this criterion, and a scale with an open end. Written after
the seed-12 draw of benchmarks/mutation.py let its `or` become an `and` (a traceback for a criterion without a
scale)."""

from __future__ import annotations

import pytest

from calibration.study.report import _bounds_of


@pytest.mark.parametrize("bounds, criterion, expected", [
    (None, "c", None), ({}, "c", None), ({"c": (1, 5)}, "c", (1.0, 5.0)),
    ({"*": (0, 10), "c": (1, 5)}, "d", (0.0, 10.0)), ({"c": (1, 5)}, "d", None), ({"c": (None, 5)}, "c", None),
    ({"c": (1, None)}, "c", None)])
def test_the_scale_of_a_criterion(bounds, criterion, expected):
    assert _bounds_of(bounds, criterion) == expected
