"""The HTML sections of `judge screen` and `judge estimate`, loaded in a real headless browser: every plot decodes,
and the page carries the systems' intervals."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
CHROMIUM = Path("/usr/bin/chromium")
PROBE = ('<script>window.addEventListener("load",function(){var i=[].slice.call(document.images);'
         'document.body.setAttribute("data-images-rendered",'
         'i.filter(function(x){return x.complete&&x.naturalWidth>0}).length+"/"+i.length)});</script>')


def rendered_dom(page: Path, tmp_path: Path) -> tuple[str, int]:
    text = page.read_text(encoding="utf-8")
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tmp_path / "profile"
    result = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    return result.stdout, text.count("<img")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser check needs Debian's chromium at /usr/bin/chromium")
@pytest.mark.parametrize("verb, args, heading", [
    ("screen", ["--judgments", str(STUDY / "judgments.jsonl"), "--budget", "6"], "Judge screen"),
    ("estimate", ["--judgments", str(STUDY / "judgments.jsonl"), "--human", str(STUDY / "labels.csv"),
                  "--plan", str(STUDY / "plan")], "Judge estimate"),
])
def test_the_report_section_renders_every_plot_in_a_browser(tmp_path, capsys, verb, args, heading):
    report = tmp_path / f"{verb}.html"
    assert main([verb, *args, "--report", str(report)]) == 0
    dom, images = rendered_dom(report, tmp_path)
    assert images >= 1 and heading in dom
    assert f'data-images-rendered="{images}/{images}"' in dom
    assert "alpha" in dom and "gamma" in dom  # the example study's systems are named on the page
