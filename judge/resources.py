"""Where the bundled rubrics and templates live, and how every user file (items, rubric, template) is read."""

from __future__ import annotations

import hashlib
from pathlib import Path

from judge.errors import JudgeError

_PACKAGE = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """`rubrics` or `prompts`: shipped inside the wheel as judge/<name>, kept at the repo top in a checkout."""
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


def open_user_file(path: Path, error: type[JudgeError] = JudgeError):
    """A user's file opened for reading bytes, or `error` with one line saying why not."""
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_text(path: str | Path, error: type[JudgeError] = JudgeError) -> str:
    """A user's text file as str, or `error` with one line saying why not (file, line, problem).

    A UTF-8 byte-order mark (Excel's "CSV UTF-8", Notepad) is dropped, so it cannot glue itself to the first
    column's name. Files in another encoding are refused rather than guessed: a wrong guess would change the
    very text the judge reads.
    """
    with open_user_file(Path(path), error) as handle:
        data = handle.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}:{line}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
            "save the file as UTF-8 (e.g. Excel: CSV UTF-8; iconv -f latin1 -t utf-8)"
        ) from None


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read in blocks (a model file is hundreds of MB)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
