"""The HTML sections of `judge screen` and `judge estimate`, loaded in a real headless browser: every plot decodes,
and the page carries the systems' intervals."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import browser_dom, needs_chromium

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
@needs_chromium
@pytest.mark.parametrize("verb, args, heading", [
    ("screen", ["--judgments", str(STUDY / "judgments.jsonl"), "--budget", "6"], "Judge screen"),
    ("estimate", ["--judgments", str(STUDY / "judgments.jsonl"), "--human", str(STUDY / "labels.csv"),
                  "--plan", str(STUDY / "plan")], "Judge estimate"),
])
def test_the_report_section_renders_every_plot_in_a_browser(tmp_path, capsys, verb, args, heading):
    report = tmp_path / f"{verb}.html"
    assert main([verb, *args, "--report", str(report)]) == 0
    dom, images = browser_dom(report, tmp_path)
    assert images >= 1 and heading in dom
    assert f'data-images-rendered="{images}/{images}"' in dom
    assert "alpha" in dom and "gamma" in dom  # the example study's systems are named on the page


@needs_chromium
def test_estimate_report_plots_the_differences_on_the_scale_with_its_provenance(tmp_path, capsys):
    report = tmp_path / "estimate.html"
    assert main(["estimate", "--judgments", str(STUDY / "judgments.jsonl"), "--human", str(STUDY / "labels.csv"),
                 "--plan", str(STUDY / "plan"), "--scale", "1,5", "--report", str(report)]) == 0
    dom, images = browser_dom(report, tmp_path)
    assert images == 2 and 'data-images-rendered="2/2"' in dom  # paired differences, then the means
    assert dom.index("paired differences") < dom.index("each system's mean human score")
    for field in ("Judgments", "Human labels", "Plan", "Model", "Rubric", "Date", "toy-model", "toy@1"):
        assert f">{field}<" in dom or field in dom, field
    header = dom[dom.index("<thead>"):dom.index("</thead>")]  # the differences table: the numbers first
    assert header.index("ci_high") < header.index("lambda") and header.index("estimate") < header.index("n_dialogues")


def test_the_plan_numbers_come_first_in_the_screen_tables(tmp_path, capsys):
    report = tmp_path / "screen.html"
    assert main(["screen", "--judgments", str(STUDY / "judgments.jsonl"), "--human", str(STUDY / "pilot_labels.csv"),
                 "--budget", "10", "--bootstrap", "100", "--report", str(report)]) == 0
    page = report.read_text()
    power = page[page.index("Screen: power"):page.index("Screen: plan")]
    header = power[power.index("<thead>"):power.index("</thead>")]
    assert header.index("dialogues_human_only") < header.index("judge_difference")  # not past the right edge
    assert "sha256" in page and "Seed" in page and "pilot_labels.csv" in page


def test_calibrate_draws_a_judge_on_the_human_scale_on_the_human_axis():
    import pandas as pd

    from calibration.calibrate.report import off_the_human_scale

    def means(judge, human):
        return pd.DataFrame({"judge_low": [judge[0]], "judge_high": [judge[1]], "human_low": [human[0]],
                             "human_high": [human[1]]})

    assert not off_the_human_scale(means((1.0, 1.0), (4.1, 4.5)))  # a judge that says 1 everywhere: one axis
    assert not off_the_human_scale(means((2.0, 4.8), (1.5, 3.0)))
    assert off_the_human_scale(means((0.2, 0.4), (3.0, 4.0)))  # ROUGE in [0, 1]
    assert off_the_human_scale(means((-3.5, -2.0), (3.0, 4.0)))  # BARTScore


@needs_chromium
def test_a_row_without_an_interval_is_drawn_hollow_and_never_separated(tmp_path):
    """What estimate.py gives where no interval can hold (NaN bounds and an interval_note): the text prints the
    note and no "yes", the page still renders every plot."""
    import numpy as np

    from calibration.study.estimate import estimate

    result = estimate(STUDY / "judgments.jsonl", STUDY / "labels.csv", plan=STUDY / "plan", scale=(1, 5))
    differences = result.differences.copy()
    differences["interval_note"] = ""
    first = differences.index[0]
    differences.loc[first, ["ci_low", "ci_high"]] = np.nan
    differences.loc[first, "interval_note"] = "2 labelled dialogues: an interval needs at least 5"
    degenerate = differences.index[1]
    differences.loc[degenerate, ["ci_low", "ci_high"]] = 1.0  # zero width: labels without variance
    result.differences = differences
    text = result.text()
    lines = [line for line in text.splitlines() if "an interval needs at least 5" in line]
    assert len(lines) == 1 and " yes " not in lines[0]
    row = differences.loc[degenerate]
    assert not any(line.split()[:3] == [row.criterion, row.system_a, row.system_b] and "yes" in line.split()
                   for line in text.splitlines())
    page = tmp_path / "estimate.html"
    result.report(page)
    dom, images = browser_dom(page, tmp_path)
    assert images == 2 and 'data-images-rendered="2/2"' in dom
    assert "an interval needs at least 5" in dom
