"""Every file the tool writes besides the results file (reports, tables, plans, labels, keys) goes through here.

A file is replaced only when it is provably ours: it does not exist yet, or it is exactly what this tool wrote
there (same bytes). The proof is a registry in the file's folder, `.judge-written.json`, holding the SHA-256 of
each file the tool wrote and which command wrote it. An HTML page also carries the proof inside itself (its
first line is a comment with the digest of the rest), so a report written beside the user's own files needs no
registry. A file the user made, an input, or one of ours that was edited since is refused, untouched, with
what to do instead. Each file is written atomically (a temporary file, then a rename): a reader, or a crash,
never sees half a file; all of a verb's files are checked before the first is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from judge.errors import OutputError

REGISTRY = ".judge-written.json"
_HTML_PROOF = re.compile(r"<!-- written by llm-judge-rater \(([a-z -]+)\); sha256 ([0-9a-f]{64}) -->\n")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def html_with_proof(page: str, verb: str) -> str:
    """The page with its first line naming the tool and the digest of the rest: it proves itself ours."""
    return f"<!-- written by llm-judge-rater ({verb}); sha256 {_digest(page.encode('utf-8'))} -->\n{page}"


def _registry(folder: Path) -> dict:
    try:
        data = json.loads((folder / REGISTRY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_page(content: str | bytes) -> bool:
    """An HTML report page (every page the tool writes starts with its doctype or <html>)."""
    head = (content[:64] if isinstance(content, str) else content[:64].decode("utf-8", "replace")).lstrip().lower()
    return head.startswith(("<!doctype html", "<html"))


def ours_as(path: Path) -> str | None:
    """"page" for a report page this tool wrote there, "file" for any other file it wrote, None otherwise. Read as
    a stream: a batch shard of 180 MB is hashed, never held."""
    try:
        with path.open("rb") as handle:
            head = handle.read(200)
            match = _HTML_PROOF.match(head.decode("utf-8", "replace"))
            if match:
                handle.seek(match.end())  # the proof line is ASCII: characters are bytes
                if hashlib.file_digest(handle, "sha256").hexdigest() == match.group(2):
                    return "page"
            entry = _registry(path.parent).get(path.name)
            if not isinstance(entry, dict):
                return None
            handle.seek(0)
            whole = hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None
    return "file" if entry.get("sha256") == whole else None


def registered_sha256(path: Path) -> str | None:
    """The digest the folder's registry records for a file this tool wrote there (None: none recorded); a caller
    that reads the file anyway compares it in the same pass."""
    entry = _registry(path.parent).get(path.name)
    return entry.get("sha256") if isinstance(entry, dict) else None


def is_ours(path: Path) -> bool:
    """True when `path` holds exactly what this tool wrote there."""
    return ours_as(path) is not None


def page_verb(path: Path) -> str | None:
    """The verb whose report page this is (its proof line names it), None for anything else."""
    try:
        with path.open("rb") as handle:
            head = handle.read(200).decode("utf-8", "replace")
    except OSError:
        return None
    match = _HTML_PROOF.match(head)
    return match.group(1) if match else None


def landing(path: str | Path) -> Path:
    """Where writing `path` would land, found without creating anything: `sub/../x` with `sub/` absent cannot be
    opened as given, and creating `sub/` first would make it `x`; so such a path is taken as `x` (its resolved form,
    relative to the working directory when it lies under it). Any other path is kept as given."""
    path = Path(path)
    if ".." not in path.parts or path.parent.exists():
        return path
    resolved = Path(os.path.realpath(path))
    try:
        return resolved.relative_to(Path.cwd())
    except ValueError:
        return resolved


def same_file(path: str | Path, other: str | Path) -> bool:
    """Whether writing `path` would write `other`: the same resolved path (`./sub/../x` with `sub/` absent, a
    symbolic link), or, both existing, the same inode (a hard link)."""
    path, other = landing(path), landing(other)
    if os.path.realpath(path) == os.path.realpath(other):
        return True
    try:
        return os.path.samefile(path, other)
    except OSError:  # one does not exist: no inode to share
        return False


def check_writable(path: str | Path, *, inputs=(), what: str = "output", page: bool | None = None,
                   verb: str | None = None) -> Path:
    """Refuse, before anything is written, a path that is an input, a folder, or a file that is not ours; with
    `page` given, also one of ours of the other kind (a report never replaces a plan or a table, nor the reverse);
    with `verb` given, a report page of another verb (an audit's report never replaces calibrate's)."""
    path = landing(path)
    for given in inputs:
        if given is not None and same_file(path, given):
            raise OutputError(f"{path}: the {what} would replace an input ({given}); choose another path")
    if path.is_dir():
        raise OutputError(f"{path}: the {what} is a folder; give a file name")
    if not path.exists():
        return path
    kind = ours_as(path)
    if kind is None:
        raise OutputError(f"{path}: exists and was not written by this tool (or was edited since): it is left "
                          f"untouched; choose another {what} path, or move the file away")
    if page is not None and kind != ("page" if page else "file"):
        held = "a report page" if kind == "page" else "a table, plan or key"
        raise OutputError(f"{path}: holds {held} this tool wrote, which the {what} would replace with "
                          f"{'a report page' if page else 'another kind of file'}; it is left untouched: choose "
                          f"another {what} path")
    if verb is not None and kind == "page" and (other := page_verb(path)) not in (None, verb):
        raise OutputError(f"{path}: holds the report `judge {other}` wrote, which a `judge {verb}` report would "
                          f"replace; it is left untouched: choose another {what} path")
    return path


def _atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        umask = os.umask(0)  # mkstemp makes the file private (0600); give it the mode any new file would have
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_files(files: dict[str | Path, str | bytes], *, verb: str, inputs=()) -> list[Path]:
    """Write every file (path -> content) or none: all are checked first. Returns the files that were replaced
    (ours, from an earlier run), so the caller can say so. HTML pages are given their proof line; other files are
    recorded in their folder's registry."""
    paths = {landing(p): content for p, content in files.items()}
    replaced = [p for p, c in paths.items() if p.exists()]
    for p, c in paths.items():  # a new file too: `sub/../input.csv` must not replace the input
        check_writable(p, inputs=inputs, page=is_page(c), verb=verb if is_page(c) else None)
    for path, content in paths.items():
        if is_page(content) and isinstance(content, str):  # the page proves itself ours, whatever its name
            _atomic(path, html_with_proof(content, verb).encode("utf-8"))
            continue
        data = _bytes(content)
        _atomic(path, data)
        registry = _registry(path.parent)
        registry[path.name] = {"sha256": _digest(data), "by": f"judge {verb}"}
        _atomic(path.parent / REGISTRY, (json.dumps(registry, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return replaced


# A shard takes a million writes of a few kB: one system call every 256 kB, not every 8 kB (a third of writing a
# line), and little memory however many shards are open at once (--shards).
WRITE_BUFFER = 1 << 18


class StreamedFile:
    """A file written piece by piece (a batch shard of a million requests), under a temporary name; `commit` puts it
    in place and records it as ours, as write_files does for a whole content; `discard` leaves no trace."""

    def __init__(self, path: str | Path, *, verb: str):
        self.path, self.verb = Path(path), verb
        if self.path.exists():
            check_writable(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, self.temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self.handle = os.fdopen(handle, "wb", buffering=WRITE_BUFFER)
        self.hash = hashlib.sha256()
        self.size = self.lines = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self.hash.update(data)
        self.handle.write(data)
        self.size += len(data)
        self.lines += 1

    def commit(self) -> None:
        self.handle.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.temporary, 0o666 & ~umask)
        os.replace(self.temporary, self.path)
        registry = _registry(self.path.parent)
        registry[self.path.name] = {"sha256": self.hash.hexdigest(), "by": f"judge {self.verb}"}
        _atomic(self.path.parent / REGISTRY, (json.dumps(registry, indent=1, sort_keys=True) + "\n").encode("utf-8"))

    def discard(self) -> None:
        self.handle.close()
        Path(self.temporary).unlink(missing_ok=True)


def check_folder(directory: str | Path, names, *, inputs=()) -> None:
    """Refuse, before anything is written, an --output-dir that is a file or any of `names` in it not ours."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory}: --output-dir is a file; give a folder")
    for name in names:
        check_writable(directory / name, inputs=inputs, what="--output-dir file")


def write_folder(directory: str | Path | None, files: dict[str, str | bytes], *, verb: str, inputs=()) -> list[Path]:
    """`write_files` for the tables a verb writes into its --output-dir (None: nothing is written)."""
    if directory is None:
        return []
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory}: --output-dir is a file; give a folder")
    return write_files({directory / name: content for name, content in files.items()}, verb=verb, inputs=inputs)
