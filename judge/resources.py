"""Where the bundled rubrics and templates live: inside the installed package, or at the repository top."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """`rubrics` or `prompts`: shipped inside the wheel as judge/<name>, kept at the repo top in a checkout."""
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name
