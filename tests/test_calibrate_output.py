"""`judge calibrate`'s printed output as a person reads it (issue 43 part 7): a system-level interval that says
nothing (none computable, or all of [-1, 1]) printed as "too few systems to say" with how many systems would be
needed; every line within 120 columns, long notes as numbered footnotes; --help's options in named groups. The
files keep their columns and values (the CSVs are checked byte for byte by the examples' before/after run)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import norm

from calibration.calibrate.calibrate import WIDTH, _Footnotes, _system_interval_lines
from calibration.correlation import min_systems, systems_needed
from judge.cli import build_parser, main

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"


def _fisher_low(r: float, systems: int) -> float:
    """Fisher's z lower bound, computed apart from the code under test."""
    return math.tanh(math.atanh(r) - norm.ppf(0.975) / math.sqrt(systems - 3))


@pytest.mark.parametrize("r", [0.995, 0.9, 0.7, 0.6, 0.5, 0.3, 0.1, -0.4])
def test_systems_needed_is_the_fewest_whose_fisher_interval_excludes_0_and_never_fewer_than_the_floor(r):
    needed = int(systems_needed(r))
    assert needed >= min_systems() == 6
    assert _fisher_low(abs(r), needed) > 0
    if needed > min_systems():
        assert _fisher_low(abs(r), needed - 1) <= 0  # one system fewer would not do
    assert math.isinf(systems_needed(0.0)) and math.isinf(systems_needed(float("nan")))


def _part(n_used: int, low: float, high: float, value: float = 0.3) -> pd.DataFrame:
    return pd.DataFrame({"criterion": ["c"] * 2, "statistic": ["pearson", "spearman"], "value": [value, value],
                         "ci_low": [low, low], "ci_high": [high, high], "n_used": [n_used] * 2})


@pytest.mark.parametrize("part, expected", [
    (_part(3, math.nan, math.nan), "  c: too few systems to say (3 systems, Pearson r 0.300; 44 would be needed) [1]"),
    (_part(8, -1.0, 1.0), "  c: too few systems to say (8 systems, Pearson r 0.300; 44 would be needed) [1]"),
    (_part(8, -0.6, 0.9), None),  # an interval that says something is printed as it is
    (_part(3, math.nan, math.nan, 0.0), "  c: too few systems to say (3 systems, Pearson r 0.000; no number of "
                                        "systems would tell it from 0) [1]"),
])
def test_an_interval_that_says_nothing_is_printed_as_too_few_systems_with_how_many_are_needed(part, expected):
    notes = _Footnotes()
    lines = _system_interval_lines(part, notes)
    assert lines == ([] if expected is None else [expected])
    if expected:
        assert "Fisher z" in notes.text() and all(len(line) <= WIDTH for line in notes.text().splitlines())


def test_printed_lines_fit_120_columns_and_notes_are_numbered_footnotes(capsys):
    code = main(["calibrate", "--judgments", f"{STUDY}/judgments.jsonl", "--human", f"{STUDY}/labels.csv",
                 "--bootstrap", "0"])
    printed = capsys.readouterr().out
    assert code == 0
    assert max(len(line) for line in printed.splitlines()) <= WIDTH
    assert "too few systems to say (3 systems" in printed and "\nNotes\n[1] " in printed
    marks = {m for line in printed.split("\nNotes\n")[0].splitlines() for m in ("[1]", "[2]", "[3]") if m in line}
    assert marks == {"[1]", "[2]", "[3]"}  # each footnote is referred to


def test_calibrate_help_shows_its_options_in_named_groups():
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    calibrate = verbs["calibrate"]
    groups = {g.title: [a.option_strings[0] for a in g._group_actions] for g in calibrate._action_groups}
    options = [o for g, names in groups.items() if g not in ("options", "optional arguments") for o in names]
    assert len(options) > 12 and set(groups) >= {"inputs", "analysis", "outputs"}
    assert groups.get("options", groups.get("optional arguments")) == ["-h"]  # nothing left ungrouped
