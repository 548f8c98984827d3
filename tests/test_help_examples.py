"""Every example in every verb's `--help` runs, on the files in examples/, in a working folder of its own.

The examples are read from each verb's epilog (every line starting with `judge `, continuation lines joined), so a
verb added later is covered without a line here. The verbs run in the order `judge --help` lists them, in one
working folder, so an example may read what an earlier one wrote (`judge import` reads the key `judge export`
wrote). An example that needs a model server runs against tests/stub_server.py (its --base-url replaced, or added
with a --model for the embedded default); one that names a hosted API (--backend openai without --base-url) is
skipped, saying so. Exit codes 0 and 1 both mean the example ran (1 is a verdict: a judge that fails its
qualification, a criterion with nothing to compare); 2 is a broken example.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from pathlib import Path

import pytest

from judge.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
# Verbs whose examples name files that examples/ does not hold yet, and whose CLI module belongs to another piece
# of work; strict, so the mark must go once they run.
NOT_YET: dict[str, str] = {}  # verb -> why its examples cannot run yet (a strict xfail: it must start failing)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def examples(epilog: str | None) -> list[str]:
    """The `judge ...` command lines of an epilog, backslash continuations joined."""
    commands, pending = [], None
    for line in (epilog or "").splitlines():
        text = line.strip()
        if pending is not None:
            pending += " " + text.removesuffix("\\").strip()
            if not text.endswith("\\"):
                commands.append(pending)
                pending = None
        elif text.startswith("judge "):
            if text.endswith("\\"):
                pending = text.removesuffix("\\").strip()
            else:
                commands.append(text)
    return commands


VERBS = _subparsers()
CASES = [pytest.param(verb, marks=pytest.mark.xfail(reason=NOT_YET[verb], strict=True)) if verb in NOT_YET
         else verb for verb in VERBS if examples(VERBS[verb].epilog)]


def test_every_verb_with_examples_is_seen():
    assert {"screen", "estimate", "export", "import"} <= {c if isinstance(c, str) else c.values[0] for c in CASES}
    assert examples("x\n  judge a --b c \\\n      --d e\n  judge f\nnot judge g") == ["judge a --b c --d e",
                                                                                   "judge f"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working folder with a copy of examples/ (nothing an example writes can land in the repository)."""
    root = tmp_path_factory.mktemp("work")
    shutil.copytree(ROOT / "examples", root / "examples")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("XDG_CACHE_HOME", str(root / "cache"))
        patch.delenv("JUDGE_BASE_URLS", raising=False)
        yield root


def _against_stub(argv: list[str], parser: argparse.ArgumentParser, url: str) -> list[str] | None:
    """The command with its model server replaced by the stub; None when it names a hosted API. An example may
    run another verb first (`judge batch`'s opens with the `judge score --batch` run it lists): its own flags count."""
    parser = VERBS.get(argv[0], parser) if argv else parser
    flags = {option for action in parser._actions for option in action.option_strings}
    if "--base-url" not in flags:
        return argv
    if "--base-url" in argv:  # a hosted URL too: the stub answers as the Batch API would
        argv = list(argv)
        argv[argv.index("--base-url") + 1] = url
        return argv
    if "--backend" in argv and argv[argv.index("--backend") + 1] == "openai":
        return None
    model = [] if "--model" in argv or "--model" not in flags else ["--model", "stub-model"]
    return argv + ["--base-url", url] + model


@pytest.fixture(scope="module")
def model_server():
    """The stub chat server with the Batch API (tests/batch_server.py), batches completing at once."""
    from batch_server import BatchServer

    server = BatchServer().start()
    server.batch.instant = True
    yield server
    server.stop()


@pytest.mark.parametrize("verb", CASES)
def test_help_examples_run(verb, workdir, model_server, capsys):
    stub_server = model_server
    before = {p: p.read_bytes() for p in (workdir / "examples").rglob("*") if p.is_file()}
    ran = []
    for command in examples(VERBS[verb].epilog):
        argv = _against_stub(shlex.split(command)[1:], VERBS[verb], stub_server.base_url)
        if argv is None:
            ran.append(f"skipped (names a hosted API): {command}")
            continue
        capsys.readouterr()
        code = main(argv)
        captured = capsys.readouterr()
        assert code in (0, 1), f"`{command}` exited {code}: {captured.err.strip().splitlines()[-1:]}"
        assert "Traceback" not in captured.err
        ran.append(command)
    assert any(not line.startswith("skipped") for line in ran), ran
    # Examples read examples/, they never write into it.
    assert {p: p.read_bytes() for p in (workdir / "examples").rglob("*") if p.is_file()} == before
    assert os.getcwd() == str(workdir)
