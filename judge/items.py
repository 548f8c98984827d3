"""Items to judge: JSONL (one object per line) or CSV with the same columns.

Every problem is reported as `file:line: what is wrong`, and loading stops at the first bad line before any
request is sent, so a typo never costs a half-finished run.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from judge.errors import InputError


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

    @model_validator(mode="before")
    @classmethod
    def _pair_system(cls, data: Any) -> Any:
        # A pair is keyed by both systems, in the input's order: "bart|pegasus".
        if isinstance(data, dict) and "system" not in data and data.get("system_1") and data.get("system_2"):
            data = {**data, "system": f"{data['system_1']}|{data['system_2']}"}
        return data

    @field_validator("id", "system", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _one_or_two_candidates(self) -> "Item":
        pair = (self.candidate_1, self.candidate_2)
        if self.candidate is None and None in pair:
            raise ValueError("needs 'candidate' (or 'candidate_1' and 'candidate_2' for pairwise rubrics)")
        for name in ("candidate", "candidate_1", "candidate_2"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ValueError(f"'{name}' is empty")
        return self

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


def _records(path: Path):
    """Yield (line number, raw dict) from a JSONL or CSV file."""
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                # Empty CSV cells mean "absent", not "empty string".
                yield reader.line_num, {k: v for k, v in row.items() if k is not None and v not in ("", None)}
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record


def load_items(path: str | Path, required: list[str] | None = None) -> list[Item]:
    """Load and validate items; `required` names fields the rubric needs (e.g. 'reference')."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    items: list[Item] = []
    seen: dict[tuple[str, str], int] = {}
    dialogues: dict[str, tuple[str, int]] = {}  # the id names the dialogue: gates and prefixes are shared by it
    for number, record in _records(path):
        try:
            item = Item.model_validate(record)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            what = f"field '{field}': {err['msg']}" if field else err["msg"].removeprefix("Value error, ")
            raise InputError(f"{path}:{number}: {what}") from None
        for name in required or []:
            if name in ("dialogue", "candidate"):
                continue
            if getattr(item, name, None) in (None, "") and name not in item.extra:
                raise InputError(f"{path}:{number}: the rubric needs field '{name}', which is missing or empty")
        key = (item.id, item.system)
        if key in seen:
            raise InputError(
                f"{path}:{number}: duplicate item (id={item.id!r}, system={item.system!r}), first on line {seen[key]}"
            )
        seen[key] = number
        first = dialogues.setdefault(item.id, (item.dialogue_text, number))
        if first[0] != item.dialogue_text:
            raise InputError(f"{path}:{number}: item id {item.id!r} has a different dialogue than on line {first[1]}")
        items.append(item)
    if not items:
        raise InputError(f"{path}: no items")
    return items
