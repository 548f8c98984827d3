"""Items to judge: JSONL (one object per line) or CSV with the same columns.

Every problem is reported as `file:line: what is wrong`, and loading stops at the first bad line before any
request is sent, so a typo never costs a half-finished run.

Types are strict where a wrong type is a sign of a broken file: `id` and `system` may be whole numbers (they are
labels), but texts (`dialogue`, `candidate`, `reference`) must be strings. A number where a summary should be is
far more often a shifted column or a score pasted into the wrong field than a summary reading "42", and judging
it silently would cost the run; such a line is refused with a hint to quote the value if it is meant as text.
"""

from __future__ import annotations

import csv
import difflib
import itertools
import json
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from judge.errors import InputError
from judge.resources import open_user_file


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    speaker: str
    text: str


class Item(BaseModel):
    """One thing to judge: a dialogue (the context) and one candidate, or two for pairwise rubrics."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1)
    dialogue: str | list[Turn]
    system: str = "default"
    candidate: str | None = None
    candidate_1: str | None = None
    candidate_2: str | None = None
    system_1: str | None = None
    system_2: str | None = None
    reference: str | None = None
    lang: str | None = None
    segments: list[str] | None = None  # the candidate's topic segments, when known (CSDS QA pairs)
    # Where the item was read (1-based line of its file); None for items built in code. Not part of the item's
    # content, so it never enters a dump, a cache key or a fingerprint.
    _line: int | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _pair_system(cls, data: Any) -> Any:
        # A pair is keyed by both systems, in the input's order: "bart|pegasus".
        if isinstance(data, dict) and "system" not in data and data.get("system_1") and data.get("system_2"):
            data = {**data, "system": f"{data['system_1']}|{data['system_2']}"}
        return data

    @field_validator("id", "system", "system_1", "system_2", mode="before")
    @classmethod
    def _label_as_text(cls, value: Any) -> Any:
        # Labels may be numbered (dialogue 17, system 3); bool is an int to Python but never a label.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _one_or_two_candidates(self) -> Item:
        pair = (self.candidate_1, self.candidate_2)
        if self.candidate is None and None in pair:
            raise ValueError("needs 'candidate' (or 'candidate_1' and 'candidate_2' for pairwise rubrics)")
        for name in ("candidate", "candidate_1", "candidate_2"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"'{name}' is empty")
        if not self.dialogue_text.strip():
            raise ValueError("'dialogue' is empty")
        return self

    @property
    def line(self) -> int | None:
        return self._line

    @property
    def is_pair(self) -> bool:
        return self.candidate is None

    @property
    def dialogue_text(self) -> str:
        if isinstance(self.dialogue, str):
            return self.dialogue
        return "\n".join(f"{t.speaker}: {t.text}" for t in self.dialogue)

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def fields(self) -> dict[str, Any]:
        """Every field, declared or extra: what a criterion's `only_when` looks at."""
        return {**self.model_dump(exclude_none=True), **self.extra}

    @property
    def text_chars(self) -> int:
        """Characters of untrusted text this item puts into a prompt (dialogue, candidates, reference)."""
        texts = (self.dialogue_text, self.candidate, self.candidate_1, self.candidate_2, self.reference)
        return sum(len(t) for t in texts if t)


# -- explaining a bad line in the user's terms ------------------------------------------------------------
_LABEL = "a string or a whole number"
_TEXT = "text (a JSON string)"
EXPECTED = {
    "id": _LABEL, "system": _LABEL, "system_1": _LABEL, "system_2": _LABEL,
    "dialogue": 'a string or a list of {"speaker": ..., "text": ...} turns',
    "candidate": _TEXT, "candidate_1": _TEXT, "candidate_2": _TEXT, "reference": _TEXT,
    "lang": "a string such as \"en\"",
    "segments": "a list of strings (the candidate's topic segments)",
}


_KINDS: dict[type, str] = {list: "a list", dict: "an object"}


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else "a string"
    return _KINDS.get(type(value), type(value).__name__)


def _typo_hint(record: dict) -> str:
    """' (is 'candiate' a misspelt 'candidate'?)' when an unknown key is one letter or two from a field name."""
    for key in record:
        if key not in EXPECTED and (close := difflib.get_close_matches(key, EXPECTED, n=1, cutoff=0.8)):
            return f" (is '{key}' a misspelt '{close[0]}'?)"
    return ""


def _turn_problem(turns: list, loc: tuple, kind: str) -> str:
    """`loc` is ('dialogue', 'list[Turn]', index[, key])."""
    number, turn = loc[2] + 1, turns[loc[2]]
    if len(loc) == 3:
        return f'dialogue turn {number} must be an object {{"speaker": ..., "text": ...}}, got {_describe(turn)}'
    key = loc[3]
    if kind == "missing":
        return f"dialogue turn {number} has no '{key}'"
    if kind == "extra_forbidden":
        return f"dialogue turn {number} has an unknown key '{key}' (a turn has 'speaker' and 'text')"
    return f"dialogue turn {number}: '{key}' must be a string, got {_describe(turn.get(key))}"


def _problem(record: dict, exc: ValidationError) -> str:
    """The first validation error, said in terms of the file rather than of pydantic's types."""
    errors = exc.errors()
    err = errors[0]
    loc, kind = err["loc"], err["type"]
    if not loc:  # a model-level check (candidates, empty dialogue)
        return err["msg"].removeprefix("Value error, ") + _typo_hint(record)
    name = str(loc[0])
    value = record.get(name)
    if kind == "missing" and len(loc) == 1:
        return f"field '{name}' is missing{_typo_hint(record)}"
    if name == "dialogue" and isinstance(value, list):
        inner = next((e for e in errors if len(e["loc"]) > 2), None)
        if inner is not None:
            return _turn_problem(value, inner["loc"], inner["type"])
    if kind == "string_too_short" or (isinstance(value, str) and not value.strip()):
        return f"field '{name}' is empty"
    if name == "segments" and isinstance(value, list) and len(loc) > 1 and isinstance(loc[1], int):
        return f"segment {loc[1] + 1} must be a string, got {_describe(value[loc[1]])}"
    if name in EXPECTED:
        numeric = EXPECTED[name] == _TEXT and isinstance(value, (int, float))
        hint = "; quote it if it is meant as text" if numeric else ""
        return f"field '{name}' must be {EXPECTED[name]}, got {_describe(value)}{hint}"
    return f"field '{'.'.join(str(p) for p in loc)}': {err['msg']}"


# -- reading records --------------------------------------------------------------------------------------
_SPREADSHEETS = (".xlsx", ".xls", ".ods", ".parquet", ".feather")


def _lines(path: Path):
    """(line number, text with its newline) of a user's UTF-8 file, read one line at a time; InputError naming the
    file, line and byte where it is not UTF-8 (the byte counted from the start of the file, a byte-order mark
    dropped)."""
    with open_user_file(path, InputError) as handle:
        offset = 0
        for number, raw in enumerate(handle, start=1):
            start, offset = offset, offset + len(raw)
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}:{number}: not UTF-8 text (byte {start + exc.start} is 0x{raw[exc.start]:02x}); "
                    "save the file as UTF-8 (e.g. Excel: CSV UTF-8; iconv -f latin1 -t utf-8)") from None


def _csv_records(path: Path, lines):
    """(line where the row starts, dict) per row; empty cells are absent fields, not empty strings."""
    lines = (text for _, text in lines)
    first = next(lines, "")
    delimiter = max(",;\t", key=first.count)  # French-locale Excel writes ';'; .tsv files use tabs
    csv.field_size_limit(2**31 - 1)  # a long candidate is not a broken file
    reader = csv.reader(itertools.chain([first], lines), delimiter=delimiter)
    try:
        header = [name.strip() for name in next(reader, [])]
        if duplicated := sorted({n for n in header if n and header.count(n) > 1}):
            raise InputError(f"{path}:1: column {duplicated[0]!r} appears more than once in the header")
        last = reader.line_num
        for row in reader:
            start, last = last + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > len(header):
                raise InputError(f"{path}:{start}: {len(row)} values for {len(header)} columns "
                                 f"(a {delimiter!r} inside a text that is not quoted?)")
            yield start, {k: v for k, v in zip(header, row) if k and v != ""}
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None


def _jsonl_lines(lines):
    """(line number, the line's text) of each line with text."""
    # Lines end at "\n" only: U+2028 and friends may stand unescaped inside a JSON string.
    for number, line in lines:
        line = line.removesuffix("\n")  # error columns count in the line as the user sees it
        if line.strip():
            yield number, line


def _jsonl_records(path: Path, lines):
    for number, line in _jsonl_lines(lines):
        yield number, _json_object(path, number, line)


# The fields whose value a line could give twice (JSON keeps the last, silently): looked for as `"name"`, which
# inside a JSON string can only stand as the whole value "name" (a quote in a string is escaped).
_FIELD_KEYS = tuple(f'"{name}"' for name in Item.model_fields)


def _one_of_each(path: Path, number: int, line: str) -> None:
    """Refuse a line that gives a field twice (`{"id": "a", "id": "b"}`): which one was meant is unknown."""
    if not any(line.count(key) > 1 for key in _FIELD_KEYS):
        return  # the usual line: a few microseconds of counting, no second parse

    def pairs(found: list) -> dict:
        seen = set()
        for key, _ in found:
            if key in seen:
                raise InputError(f"{path}:{number}: field {key!r} is given twice in this line (JSON would keep "
                                 "only the last); keep one")
            seen.add(key)
        return dict(found)

    try:
        json.loads(line, object_pairs_hook=pairs)
    except json.JSONDecodeError:
        pass  # said by the reading that follows


def _json_object(path: Path, number: int, line: str) -> dict:
    _one_of_each(path, number, line)
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        kind = "a list (a JSON array file must be rewritten one object per line)" if isinstance(record, list) \
            else _describe(record)
        raise InputError(f"{path}:{number}: expected one JSON object per line, got {kind}")
    return record


def _item(path: Path, number: int, record: dict | str) -> Item:
    """One record (a CSV row's dict, or a JSONL line's text) as an Item; InputError in the file's terms."""
    if isinstance(record, str):
        _one_of_each(path, number, record)
        try:  # pydantic-core parses and checks a line in one step; anything it refuses is read again below
            return Item.model_validate_json(record)
        except ValidationError:
            record = _json_object(path, number, record)  # json.loads's reading is the reference, and its messages
    try:
        return Item.model_validate(record)
    except ValidationError as exc:
        raise InputError(f"{path}:{number}: {_problem(record, exc)}") from None


def _records(path: Path, lines_as_text: bool = False):
    """Yield (line number, raw dict) from a JSONL or CSV file, streaming; `lines_as_text`: a JSONL line's text
    instead of its dict, for `_item` to parse and check in one step."""
    if path.suffix.lower() in _SPREADSHEETS:
        raise InputError(f"{path}: a spreadsheet or binary table; export it as CSV (UTF-8) or JSONL")
    lines = _lines(path)
    if path.suffix.lower() in (".csv", ".tsv"):
        yield from _csv_records(path, lines)
    elif lines_as_text:
        yield from _jsonl_lines(lines)
    else:
        yield from _jsonl_records(path, lines)


def iter_items(path: str | Path, required: list[str] | None = None):
    """Items of a file, validated one at a time as they are read: memory does not grow with the file beyond a few
    dozen bytes per item (the duplicate and same-dialogue checks keep 64-bit hashes, not text: Python's own, in a
    fraction of a digest's time; never written). A repeated hash is confirmed by reading the file again up to it,
    so a collision is never reported as a duplicate."""
    path = Path(path)
    seen: set[int] = set()  # hashes of (id, system)
    dialogues: dict[str, int] = {}  # id -> hash of its dialogue: the id names the dialogue (gates, prefixes share it)
    count = 0
    for number, record in _records(path, lines_as_text=True):
        item = _item(path, number, record)
        item._line = number
        for name in required or []:
            if name in ("dialogue", "candidate"):
                continue
            if getattr(item, name, None) in (None, "") and name not in item.extra:
                raise InputError(f"{path}:{number}: the rubric needs field '{name}', which is missing or empty"
                                 f"{_typo_hint(item.model_extra or {})}")
        key = hash((item.id, item.system))
        if key in seen and (first := _first_line(path, item, number)) is not None:
            raise InputError(
                f"{path}:{number}: duplicate item (id={item.id!r}, system={item.system!r}), first on line {first}"
            )
        seen.add(key)
        dialogue = hash(item.dialogue_text)
        if dialogues.setdefault(item.id, dialogue) != dialogue:
            first = _first_line(path, item, number, same=lambda other: other.id == item.id)
            raise InputError(f"{path}:{number}: item id {item.id!r} has a different dialogue than on line {first}")
        count += 1
        yield item
    if not count:
        raise InputError(f"{path}: no items")


def _first_line(path: Path, item: Item, before: int, same=None) -> int | None:
    """The first line before `before` holding an item with the same (id, system) as `item` (or that `same`
    accepts), or None."""
    same = same or (lambda other: (other.id, other.system) == (item.id, item.system))
    for number, record in _records(path, lines_as_text=True):
        if number >= before:
            return None
        if same(_item(path, number, record)):
            return number
    return None


class ItemFile:
    """The items of a file, read anew at each iteration: a run reads them once to plan and check, once to judge,
    without holding them. The first full iteration validates every line (InputError with file and line)."""

    def __init__(self, path: str | Path, required: list[str] | None = None):
        self.path, self.required = Path(path), required

    def __iter__(self):
        return iter_items(self.path, self.required)


def load_items(path: str | Path, required: list[str] | None = None) -> list[Item]:
    """Load and validate items; `required` names fields the rubric needs (e.g. 'reference')."""
    return list(iter_items(path, required))


class Oversized(NamedTuple):
    line: int | None
    id: str
    system: str
    chars: int


def oversized(items, max_chars: int) -> list[Oversized]:
    """Items whose untrusted text (dialogue, candidates, reference) exceeds `max_chars` characters.

    A 200 KB candidate is a 50k-token prompt: more than most context windows and a costly request on a paid
    API. The caller decides whether to warn or refuse; this only finds them, in file order.
    """
    return [Oversized(i.line, i.id, i.system, i.text_chars) for i in items if i.text_chars > max_chars]
