"""The linters are part of the test command: ruff (pyflakes, pycodestyle within 120 columns, import order, bugbear,
pyupgrade) on the whole tree and the type checker on both packages, with the configuration in pyproject.toml.
They come with the dev extra; without them these tests skip, saying so."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install '.[dev]')")
def test_ruff_finds_nothing_in_the_tree():
    done = run(sys.executable, "-m", "ruff", "check", "--output-format", "concise", ".")  # the venv's, on PATH or not
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install '.[dev]')")
def test_the_types_of_both_packages_check():
    done = run(sys.executable, "-m", "mypy")  # packages and options: [tool.mypy] in pyproject.toml
    assert done.returncode == 0 and "Success" in done.stdout, done.stdout[-5000:] + done.stderr
