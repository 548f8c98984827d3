"""The results file: judgments JSONL, one line per (id, system, criterion), that a run appends to and resumes from.

Two promises keep a user's numbers safe:
- The file is only ever appended to, or atomically replaced, and only when every line in it is a judgment: a file
  that holds anything else (the input, notes, another tool's output) is refused untouched. The one exception is a
  last line cut by a crash (no final newline, after at least one judgment), which is dropped and redone.
- A finished judgment is reused only when its fingerprint matches the one this run would produce (same item content,
  rubric, template, model, decoding, mode, samples). Otherwise the run is refused with what changed, unless the user
  asks to redo those judgments, whose lines are then replaced.

The resume index holds, per finished judgment, where its line starts, a digest of its fingerprint and two flags,
never the judgment or its line: a million finished judgments cost tens of MB, and a line is read again only to say
what changed in a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from judge.errors import OutputError
from judge.judgment import Judgment, changes, parse_line

LINE_START = '{"id":"'  # how every line Judgment.to_line writes begins
SEPARATOR = "\x1f"  # joins a key's three parts into one string: the index's key
EXPLAINED = 10_000  # stale judgments whose changes are read back and counted for the message


def index_key(key: tuple[str, str, str]) -> str:
    return SEPARATOR.join(key)


def print_digest(fingerprint: dict | None) -> int:
    """A fingerprint as 8 bytes: two runs asking the same question have the same digest. Kept in this process's
    memory only (never written), so Python's own hash serves: equal dicts hash alike (1 and 1.0 are the same
    setting, as dict equality says), in a microsecond, where canonical JSON took several (a million of them on a
    rerun with nothing to do)."""
    if fingerprint is None:
        return 0
    try:
        return hash(frozenset(fingerprint.items())) & _DIGEST
    except TypeError:  # a list or an object inside (this version digests them; a file may hold anything)
        flat = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in fingerprint.items()}
        text = json.dumps(flat, sort_keys=True, ensure_ascii=False, default=str)
        return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


_DIGEST = (1 << 64) - 1  # a fingerprint's digest: 64 bits
_FLAGS = (1 << 32) - 1  # judge number << 2 | failed << 1 | from the answer cache


def _entry(offset: int, digest: int, flags: int) -> int:
    """A resume-index entry as one int (offset, digest, flags): a tuple of three ints cost 90 bytes more a judgment,
    the index's largest part at a million judgments."""
    return (offset << 96) | (digest << 32) | flags


def _fields(entry: int) -> tuple[int, int, int]:
    return entry >> 96, (entry >> 32) & _DIGEST, entry & _FLAGS


@dataclass
class Check:
    """What a planned run finds in the results file, in one pass over the plan."""

    planned: int = 0
    done: int = 0  # finished with the same fingerprint
    stale: dict = field(default_factory=dict)  # key -> what changed (the first EXPLAINED read back; [] beyond)
    cached: set = field(default_factory=set)  # finished keys whose answers came from the answer cache
    keys: list = field(default_factory=list)  # every planned key in plan order, when asked for

    @property
    def nothing_to_do(self) -> bool:
        return self.done == self.planned and not self.stale


class ResultsFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        # finished judgments (and those this run failed): index key -> _entry(offset of its line, fingerprint digest,
        # flags)
        self._index: dict[str, int] = {}
        # (rubric, model) of the indexed judgments -> its number; flags >> 2 is that number
        self._judges: dict[tuple[str, str], int] = {}
        self._lines = 0  # judgment lines read, failed ones included
        self._rewrite = False  # failed or repeated lines, or a torn last line, to drop
        self._handle = None
        self._check_writable()
        if self.path.exists():
            self._load()

    @property
    def done(self) -> set[tuple[str, str, str]]:
        """The keys of the finished judgments (a new set: for tests and small files)."""
        return {tuple(k.split(SEPARATOR)) for k in self._index}

    def finished(self, key: tuple[str, str, str]) -> bool:
        return index_key(key) in self._index

    def matches(self, key: tuple[str, str, str], fingerprint) -> bool | None:
        """None when `key` is not finished here; else whether its line was made with this fingerprint (`fingerprint`
        makes it, called only then)."""
        entry = self._index.get(index_key(key))
        return None if entry is None else _fields(entry)[1] == print_digest(fingerprint())

    def __len__(self) -> int:
        return len(self._index)

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
        with self.path.open("rb") as handle:
            offset, number = 0, 0
            for raw in handle:
                number += 1
                start, offset = offset, offset + len(raw)
                if number == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise OutputError(f"{self.path}: not UTF-8 text, so not a judgments file; refusing to touch it; "
                                      "choose another --output") from None
                if not line.strip():
                    continue
                try:
                    judgment = parse_line(line, f"{self.path}:{number}")
                except OutputError as exc:
                    # A line cut by a crash: the last one, without its newline, after judgments or starting as
                    # every line we write does. Drop it and redo that judgment.
                    last = not raw.endswith(b"\n")  # only the last line of a file can lack its newline
                    torn = last and ((self._lines and line.startswith("{")) or line.startswith(LINE_START))
                    if torn:
                        self._rewrite = True
                        continue
                    raise OutputError(f"{exc}; this is not a judgments file written by judge, so it is left "
                                      "untouched; choose another --output") from None
                self._lines += 1
                key = index_key(judgment.key)
                if judgment.failed or key in self._index:
                    self._rewrite = True  # failed judgments are retried and their lines replaced; repeats dropped
                if not judgment.failed:
                    self._add(key, start, judgment)

    def _add(self, key: str, offset: int, judgment: Judgment) -> None:
        """Index a judgment's line; a failed one (written by this run) only so that a later pass of this run does
        not ask it again: the next run retries it."""
        judge = self._judges.setdefault((judgment.rubric, judgment.model), len(self._judges))
        flags = (judge << 2) | (judgment.failed << 1) | bool(judgment.from_cache)
        self._index[key] = _entry(offset, print_digest(judgment.fingerprint), flags)

    def _read(self, offset: int) -> Judgment:
        with self.path.open("rb") as handle:
            handle.seek(offset)
            return parse_line(handle.readline().decode("utf-8-sig"), str(self.path))

    def check(self, units: Iterable, keys: bool = False) -> Check:
        """One pass over the planned units (judge.engine.Unit: `keys()` and `fingerprints`, the latter made only for
        a judgment found here): how many are done, which finished ones this run would make differently (stale: key
        -> what changed) and which came from the answer cache. `keys`: list every planned key (Check.keys)."""
        out, index = Check(), self._index
        if not index and not keys:  # a new results file: only count (the walk still reads and checks every item)
            out.planned = sum(len(unit.items) for unit in units)
            return out
        for unit in units:
            for n, key in enumerate(unit.keys()):
                out.planned += 1
                if keys:
                    out.keys.append(key)
                entry = index.get(index_key(key)) if index else None
                if entry is None:
                    continue
                fingerprint = unit.fingerprints[n]
                offset, found, flags = _fields(entry)
                if found != print_digest(fingerprint):
                    explained = len(out.stale) < EXPLAINED
                    out.stale[key] = changes(self._read(offset).fingerprint, fingerprint) if explained else []
                    continue
                out.done += 1
                if flags & 1:
                    out.cached.add(key)
        return out

    def other_judge(self, rubric: str, model: str, replaced=frozenset()) -> str | None:
        """What the file would keep from another judge (rubric or model) besides the `replaced` keys, if anything:
        one results file is one judge, as calibrate, screen and estimate read it (they refuse a mixed file rather
        than rank across judges)."""
        if all(judge == (rubric, model) for judge in self._judges):
            return None
        replaced, judges = {index_key(k) for k in replaced}, list(self._judges)
        for key, entry in self._index.items():
            offset, _, flags = _fields(entry)
            if key not in replaced and judges[flags >> 2] != (rubric, model):
                judgment = self._read(offset)
                return (f"{self.path}: holds judgments of rubric {judgment.rubric or '?'} with model "
                        f"{judgment.model or '?'} (item {judgment.id!r}, criterion {judgment.criterion!r}), and this "
                        f"run is rubric {rubric} with model {model}: a results file holds one judge; it is left "
                        "untouched, choose another --output")
        return None

    def start(self, redo: Iterable[tuple[str, str, str]] = ()) -> None:
        """Drop the judgments in `redo`, failed ones and a torn line (one atomic rewrite, streamed), then open for
        appending."""
        self.close()  # started already (by --batch-dir's key file, before the full path)
        redo = {index_key(k) for k in redo}
        for key in redo:
            self._index.pop(key, None)
        if self._rewrite or redo:
            self._keep_only_indexed()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("ab")
            self._end = self._handle.seek(0, os.SEEK_END)  # then counted here: no seek (a system call) per judgment
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot be written: {exc.strerror}") from None

    def _keep_only_indexed(self) -> None:
        """Rewrite the file with the indexed lines only (one per finished key, the latest), streaming."""
        kept = {_fields(entry)[0] for entry in self._index.values()}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, self.path.open("rb") as src:
                offset, index = 0, {}
                for raw in src:
                    if offset in kept:
                        index[offset] = out.tell()
                        out.write(raw.removeprefix(b"\xef\xbb\xbf") if offset == 0 else raw)
                        if not raw.endswith(b"\n"):
                            out.write(b"\n")
                    offset += len(raw)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        for key, entry in self._index.items():
            offset, digest, flags = _fields(entry)
            self._index[key] = _entry(index[offset], digest, flags)
        self._rewrite = False

    def write(self, judgment: Judgment) -> None:
        """Append a judgment and index it (a later pass of the run sees it done)."""
        data = (judgment.to_line() + "\n").encode("utf-8")
        self._handle.write(data)
        self._handle.flush()
        self._add(index_key(judgment.key), self._end, judgment)
        self._end += len(data)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
