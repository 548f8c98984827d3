"""The results file: judgments JSONL, one line per (id, system, criterion), that a run appends to and resumes from.

Two promises keep a user's numbers safe:
- The file is only ever appended to, or atomically replaced, and only when every line in it is a judgment: a file
  that holds anything else (the input, notes, another tool's output) is refused untouched. The one exception is a
  last line cut by a crash (no final newline, after at least one judgment), which is dropped and redone.
- A finished judgment is reused only when its fingerprint matches the one this run would produce (same item content,
  rubric, template, model, decoding, mode, samples). Otherwise the run is refused with what changed, unless the user
  asks to redo those judgments, whose lines are then replaced.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from judge.errors import OutputError
from judge.judgment import Judgment, changes, parse_line

LINE_START = '{"id":"'  # how every line Judgment.to_line writes begins


class ResultsFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.done: dict[tuple, Judgment] = {}  # finished (not failed) judgments, by key
        self._kept: dict[tuple, str] = {}  # the line of each finished judgment, to rewrite the file without others
        self._lines = 0  # judgment lines read, failed ones included
        self._rewrite = False  # failed or repeated lines, or a torn last line, to drop
        self._handle = None
        self._check_writable()
        if self.path.exists():
            self._load()

    def _check_writable(self) -> None:
        path = self.path
        if path.is_dir():
            raise OutputError(f"{path}: is a directory; --output must be a file")
        parent = path.parent
        for ancestor in (parent, *parent.parents):
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise OutputError(f"{path}: cannot be created: {ancestor} is a file, not a directory")
                if not os.access(ancestor, os.W_OK) and not path.exists():
                    raise OutputError(f"{path}: cannot be created: {ancestor} is not writable")
                break
        if path.exists() and not os.access(path, os.W_OK):
            raise OutputError(f"{path}: is read-only")

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise OutputError(f"{self.path}: not UTF-8 text, so not a judgments file; refusing to touch it; "
                              "choose another --output") from None
        lines = text.splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                judgment = parse_line(line, f"{self.path}:{number}")
            except OutputError as exc:
                # A line cut by a crash: the last one, without its newline, after judgments or starting as every
                # line we write does. Drop it and redo that judgment.
                torn = number == len(lines) and not text.endswith("\n") and (
                    (self._lines and line.startswith("{")) or line.startswith(LINE_START))
                if torn:
                    self._rewrite = True
                    continue
                raise OutputError(f"{exc}; this is not a judgments file written by judge, so it is left "
                                  "untouched; choose another --output") from None
            self._lines += 1
            if judgment.failed or judgment.key in self.done:
                self._rewrite = True  # failed judgments are retried and their lines replaced; repeats dropped
            if not judgment.failed:
                self.done[judgment.key] = judgment
                self._kept[judgment.key] = line

    def stale(self, expected: dict[tuple, dict]) -> dict[tuple, list[str]]:
        """Finished judgments this run would make differently: key -> what changed."""
        out = {}
        for key, fingerprint in expected.items():
            judgment = self.done.get(key)
            if judgment is not None and judgment.fingerprint != fingerprint:
                out[key] = changes(judgment.fingerprint, fingerprint)
        return out

    def from_cache(self, expected) -> set[tuple]:
        """Finished judgments among `expected` whose answers came from the answer cache, not from the model."""
        return {key for key in expected if (j := self.done.get(key)) is not None and j.from_cache}

    def other_judge(self, rubric: str, model: str, replaced=frozenset()) -> str | None:
        """What the file would keep from another judge (rubric or model) besides the `replaced` keys, if anything:
        one results file is one judge, as calibrate, screen and estimate read it (they refuse a mixed file rather
        than rank across judges)."""
        for key, judgment in self.done.items():
            if key not in replaced and (judgment.rubric, judgment.model) != (rubric, model):
                return (f"{self.path}: holds judgments of rubric {judgment.rubric or '?'} with model "
                        f"{judgment.model or '?'} (item {judgment.id!r}, criterion {judgment.criterion!r}), and this "
                        f"run is rubric {rubric} with model {model}: a results file holds one judge; it is left "
                        "untouched, choose another --output")
        return None

    def start(self, redo: set[tuple] = frozenset()) -> None:
        """Drop the judgments in `redo`, failed ones and a torn line (one atomic rewrite), then open for appending."""
        for key in redo:
            self.done.pop(key, None)
        if self._rewrite or redo:
            kept = [self._kept[key] for key in self.done]  # one line per finished key, the latest
            self._replace("".join(line + "\n" for line in kept))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot be written: {exc.strerror}") from None

    def _replace(self, text: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def write(self, judgment: Judgment) -> None:
        self._handle.write(judgment.to_line() + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
