"""The documented study loop, as written, runs from `judge score` to `judge estimate` in a working folder.

The commands are read from the "The study loop" block of docs/tutorials/study.md (so the page cannot drift from
what runs);
`judge score` runs against tests/stub_server.py instead of the embedded model. The loop's estimate must come from
the plan's random part, with intervals, and nothing may be written outside the working folder.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pandas as pd

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]


def loop_commands(heading: str = "## The study loop", page: str = "docs/tutorials/study.md") -> list[str]:
    """The first bash block after `heading` in `page`, as commands (continuation lines joined, comments out)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text[text.index(heading):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    commands, pending = [], ""
    for line in block.splitlines():
        code = line.split("  #")[0].strip() if not line.strip().startswith("#") else ""
        if not code:
            continue
        pending = f"{pending} {code.removesuffix(chr(92)).strip()}".strip()
        if not code.endswith("\\"):
            commands.append(pending)
            pending = ""
    return commands


def test_the_readme_study_loop_runs_end_to_end(tmp_path, stub_server, monkeypatch, capsys):
    commands = loop_commands()
    assert commands[0].startswith("mkdir -p ") and " && cd " in commands[0]
    verbs = [c.split()[1] for c in commands[1:]]
    assert verbs == ["score", "screen", "export", "import", "estimate"]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    before = {p: p.read_bytes() for p in (tmp_path / "examples").rglob("*") if p.is_file()}
    work = tmp_path / commands[0].split()[2]
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for command in commands[1:]:
        argv = shlex.split(command)[1:]
        if argv[0] == "score":
            argv += ["--base-url", stub_server.base_url, "--model", "stub-model"]
        capsys.readouterr()
        assert main(argv) == 0, (command, capsys.readouterr().err[-800:])
    printed = capsys.readouterr()
    estimates = printed.out
    assert "Random sample: the 6 labelled dialogues of the plan's random part." in estimates
    assert "warning" not in printed.err.lower(), printed.err
    assert (work / "judgments.jsonl").is_file() and (work / "estimate.html").is_file()
    labels = pd.read_csv(work / "labels.csv")
    assert len(labels) == 120 and set(labels.annotator) == {"ann1", "ann2"}
    # The imported labels are the example study's labels, annotator by annotator.
    original = pd.read_csv(tmp_path / "examples" / "study" / "labels.csv")
    original["annotator"] = original["annotator"].map({"ann_a": "ann1", "ann_b": "ann2"})
    key = ["item_id", "system", "annotator", "criterion"]
    merged = labels.merge(original, on=key, suffixes=("", "_original"))
    assert len(merged) == 120 and (merged["score"] == merged["score_original"]).all()
    assert {p: p.read_bytes() for p in (tmp_path / "examples").rglob("*") if p.is_file()} == before
