"""Printing the study tables on a terminal: no line wider than WIDTH columns. A table too wide continues in further
blocks, each repeating the row's key columns (its leading text columns: criterion, system...); a `note` longer than
INLINE_NOTE characters becomes a numbered footnote below the table (the same note, the same number); the CSV files
keep every column and note as they are."""

from __future__ import annotations

import textwrap

WIDTH = 120
INLINE_NOTE = 24


def _render(frame, float_format: str) -> str:
    return frame.to_string(index=False, float_format=lambda v: float_format.format(v), na_rep="-")


def _widest(text: str) -> int:
    return max(map(len, text.splitlines()), default=0)


def _footnoted(frame, column: str) -> tuple:
    """(the frame with its long notes replaced by [1], [2]..., the footnotes in order)."""
    numbers: dict[str, int] = {}

    def marker(note) -> str:
        text = "" if note is None or note != note else str(note)
        if len(text) <= INLINE_NOTE:
            return text
        return f"[{numbers.setdefault(text, len(numbers) + 1)}]"
    marked = frame.assign(**{column: frame[column].map(marker)})
    return marked, list(numbers)


def wrap(text: str, width: int = WIDTH, indent: str = "") -> str:
    """A paragraph (a sentence, a note) folded at `width`, its continuation lines indented by `indent`."""
    return textwrap.fill(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _blocks(frame, float_format: str, width: int) -> str:
    """The table in blocks of columns no wider than `width`, each repeating the leading text columns."""
    from pandas.api.types import is_numeric_dtype

    keys: list[str] = []
    for name in frame.columns:
        if is_numeric_dtype(frame[name]) or len(keys) == 3:
            break
        keys.append(name)
    rest = [c for c in frame.columns if c not in keys]
    blocks: list[list[str]] = []
    chunk: list[str] = []
    for name in rest:
        if chunk and _widest(_render(frame[keys + chunk + [name]], float_format)) > width:
            blocks.append(chunk)
            chunk = []
        chunk.append(name)
    blocks.append(chunk)
    return "\n\n".join(_render(frame[keys + chunk], float_format) for chunk in blocks)


def format_table(frame, float_format="{:.3f}", width: int = WIDTH, note: str = "note") -> str:
    """`frame` as text within `width` columns: long notes (column `note`) as numbered footnotes, and the columns
    that do not fit in further blocks."""
    if frame.empty:
        return "  (none)"
    footnotes: list[str] = []
    if note in frame.columns:
        frame, footnotes = _footnoted(frame, note)
    text = _render(frame, float_format)
    if _widest(text) > width:
        text = _blocks(frame, float_format, width)
    for number, footnote in enumerate(footnotes, 1):
        text += "\n" + wrap(f"[{number}] {footnote}", width, indent=" " * (len(str(number)) + 3))
    return text


def say(text: str = "", file=None) -> None:
    """print() for prose beside the tables: each line of `text` longer than WIDTH folded, continued indented."""
    import sys

    lines = [wrap(line, WIDTH, indent="  ") if len(line) > WIDTH else line for line in text.split("\n")]
    print("\n".join(lines), file=sys.stdout if file is None else file)
