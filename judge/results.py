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
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO

from judge.errors import OutputError
from judge.judgment import Judgment, changes, parse_line

fcntl: ModuleType | None
try:
    import fcntl as _posix_locks

    fcntl = _posix_locks
except ImportError:  # not a POSIX system
    fcntl = None

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


def _verdict(judgment: Judgment) -> dict:
    """What a judgment concluded: two lines of one question that agree on it are copies of one judgment."""
    return judgment.model_dump(include={"score", "label", "na", "abstained", "samples", "segments", "orders",
                                        "position"})


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
        self._handle: IO[bytes] | None = None
        self._written = 0  # judgments this run appended
        self._failed: str | None = None  # why writing failed: the run stops
        self._repeats = 0  # lines that copy a finished judgment (same question, same verdict): dropped
        self._size = 0  # bytes read by _load: a file grown since was written by another run
        self._created = False  # this run made the file (an empty one is removed at the end)
        self._lock: IO[bytes] | None = None  # the file opened to hold its lock while this run may write (closed: freed)
        self._check_writable()
        if self.path.exists():
            self._acquire()
            try:
                self._load()
            except BaseException:
                self.close()
                raise

    @property
    def done(self) -> set[tuple[str, ...]]:
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
        if path.exists() and not path.is_file():  # /dev/full reads as endless zeros: never loaded, nor written
            raise OutputError(f"{path}: not a regular file (a device, a pipe or a socket); --output must be a file "
                              "that the run appends to and resumes from")
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
                if judgment.failed:
                    self._rewrite = True  # failed judgments are retried and their lines replaced
                elif key in self._index:
                    self._repeated(key, judgment, number)  # the first line is kept
                else:
                    self._add(key, start, judgment)
            self._size = offset

    def _repeated(self, key: str, judgment: Judgment, number: int) -> None:
        """A second line for a finished judgment (two runs wrote at once, two files were joined): dropped when it
        provably is a copy (the same question, the same verdict), else refused: which one to trust is the user's."""
        offset, digest, _ = _fields(self._index[key])
        first = self._read(offset)
        if digest == print_digest(judgment.fingerprint) and _verdict(first) == _verdict(judgment):
            self._repeats += 1
            self._rewrite = True
            return
        what = "was asked differently" if digest != print_digest(judgment.fingerprint) else "has another verdict"
        raise OutputError(f"{self.path}:{number}: a second judgment of item {judgment.id!r}, system "
                          f"{judgment.system!r}, criterion {judgment.criterion!r} (first on line "
                          f"{self._line_number(offset)}), which {what}: two runs wrote to this file at once, or two "
                          "files were joined; keep the line to trust and delete the other (or both, to judge it "
                          "again), then run the same command")

    def _line_number(self, offset: int) -> int:
        with self.path.open("rb") as handle:
            return handle.read(offset).count(b"\n") + 1

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

    def _acquire(self) -> None:
        """Lock the file (creating it empty if absent) for this run, or refuse: two runs appending to one file at
        once would each write every judgment. The lock is taken on the file itself (no lock file left behind);
        the file replaced by another run's rewrite between opening and locking is opened again."""
        if self._lock is not None:
            return
        while True:
            try:
                handle = self.path.open("ab")  # created empty if absent; nothing is written through it
            except OSError as exc:
                raise OutputError(f"{self.path}: cannot be written: {exc.strerror}") from None
            try:
                if fcntl is not None:  # not a POSIX system: no lock to take
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise OutputError(f"{self.path}: another judge run is writing to this file now; wait for it to "
                                  "end (or stop it), then run the same command: it resumes from what that run "
                                  "wrote") from None
            try:
                same = os.fstat(handle.fileno()).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock = handle
                return
            handle.close()  # replaced under us: lock the file now at that path

    def start(self, redo: Iterable[tuple[str, str, str]] = ()) -> None:
        """Drop the judgments in `redo`, failed ones, copies and a torn line (one atomic rewrite, streamed), then
        open for appending."""
        if self._handle is not None:  # started already (by --batch-dir's key file, before the full path)
            self._handle.close()
            self._handle = None
        if self._lock is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._created = not self.path.exists()
            self._acquire()
            if os.path.getsize(self.path) != self._size:  # written by a run that ended while this one planned
                self.close()
                raise OutputError(f"{self.path}: another judge run wrote to this file while this one was starting; "
                                  "run the same command again: it resumes from what that run wrote")
        if self._repeats:
            print(f"note: {self.path}: dropped {self._repeats} repeated line(s), each a copy of a judgment already "
                  "in the file (the same question and verdict: two runs wrote to it at once?)", file=sys.stderr)
            self._repeats = 0
        dropped = {index_key(k) for k in redo}
        for key in dropped:
            self._index.pop(key, None)
        if self._rewrite or dropped:
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
        lock = open(tmp, "rb")  # noqa: SIM115 - held as the lock, closed by close()
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # new, so free: the file taking the path is locked as it lands
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
            lock.close()
            Path(tmp).unlink(missing_ok=True)
            raise
        if self._lock is not None:
            self._lock.close()
        self._lock = lock
        for key, entry in self._index.items():
            offset, digest, flags = _fields(entry)
            self._index[key] = _entry(index[offset], digest, flags)
        self._rewrite = False

    def write(self, judgment: Judgment) -> None:
        """Append a judgment and index it (a later pass of the run sees it done)."""
        if self._failed is not None:  # another worker's answer, arrived as the run stops
            raise OutputError(self._failed)
        data = (judgment.to_line() + "\n").encode("utf-8")
        assert self._handle is not None, "write() follows start()"
        try:
            self._handle.write(data)
            self._handle.flush()
        except OSError as exc:  # a full disk, a file size limit: stop the run, keep every whole line
            self._stop_writing()
            self._failed = (f"{self.path}: cannot be written ({exc.strerror or exc}); the {self._written} "
                            "judgments this run wrote before are kept: free space (or choose another --output) and "
                            "run the same command to resume")
            raise OutputError(self._failed) from None
        self._written += 1
        self._add(index_key(judgment.key), self._end, judgment)
        self._end += len(data)

    def abandon(self) -> None:
        """The run failed: remove the file if this run made it and wrote nothing in it (no empty file left), then
        close."""
        if self._lock is not None and self._created and os.fstat(self._lock.fileno()).st_size == 0:
            self.path.unlink(missing_ok=True)
        self.close()

    def _stop_writing(self) -> None:
        """After a failed write: drop the unwritten bytes and cut the file back to its last whole line."""
        handle, self._handle = self._handle, None
        try:
            if handle is not None:
                handle.close()  # flushes again, fails again: the descriptor is closed all the same
        except OSError:
            pass
        try:
            os.truncate(self.path, self._end)
        except OSError:
            pass  # a torn last line is dropped by the next run

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
