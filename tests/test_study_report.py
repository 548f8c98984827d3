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
