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


def test_the_screen_report_lists_the_dialogues_that_most_need_humans_first():
    """The HTML's items table: the 20 highest priorities, highest first. Written after the seed-14 draw let the
    sort turn ascending (the 20 least needed shown)."""
    import re

    from calibration.study.report import screen_section
    from calibration.study.screen import screen
    from test_study_mutants import judge_frame

    result = screen(judge_frame({"c": {"alpha": 3.5, "beta": 3.3, "gamma": 2.0}}, n_items=30, noise=0.9),
                    bootstrap=100)
    html = screen_section(result)
    table = html[html.index("dialogues that most need humans"):]
    top = result.items.sort_values("priority", ascending=False)["item_id"].head(20).tolist()
    shown = [i for i in re.findall(r"<td>([^<]+)</td>", table) if i in set(result.items["item_id"])]
    assert shown == top and len(result.items) > 20
