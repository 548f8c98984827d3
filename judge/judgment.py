"""The judgment: one verdict of the judge on one (item, system, criterion), as a type.

Every module that writes or reads judgments goes through here: the engine builds `Judgment`s, the results file
writes and resumes them, qualification and calibration read them back. A line is a `Judgment` serialised as JSON.

A judgment is exactly one of: a number (`score`), a label (`label`, with `score` when the label has one), an
abstention (`abstained`: "I don't know" is a label, never a number), not applicable (`na`), or a failure
(`error`, with the `raw` answer when there was one). The `fingerprint` records everything that produced it, so a
resumed run reuses a line only when it would ask the very same question again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]  # internal, not in the stubs
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from judge.errors import OutputError


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Prompt tokens the server served from its prefix cache; None when it does not say.
    cached_tokens: int | None = None


class SegmentVerdict(BaseModel):
    """Per-segment criteria: the verdict on one topic segment of the candidate."""

    model_config = ConfigDict(extra="ignore")
    text: str
    score: float | None = None
    label: str | None = None
    rationale: str | None = None


class Judgment(BaseModel):
    # Unknown keys are ignored when reading, so a file written by a newer version still loads.
    model_config = ConfigDict(extra="ignore")

    id: str
    system: str
    criterion: str
    score: float | None = None
    label: str | None = None
    na: bool = False
    abstained: bool = False
    samples: list[Any] = Field(default_factory=list)
    spread: float | None = None
    probs: dict[str, float] | None = None
    rationale: str | None = None
    explanation: str | None = None
    rubric: str = ""
    model: str = ""
    backend: str = ""
    prompt_sha: str | None = None
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    raw: str | None = None
    # Everything that produced this judgment (see `fingerprint`); None in files written before it existed.
    fingerprint: dict[str, Any] | None = None
    # Mode-specific: block judging (the letter the candidate was shown under), per-segment criteria, pairs.
    position: str | None = None
    segments: list[SegmentVerdict] | None = None
    system_1: str | None = None
    system_2: str | None = None
    orders: dict[str, str] | None = None
    order_disagreement: bool | None = None
    identical: bool | None = None
    # What the server said about itself (model version it answered with, system_fingerprint, engine version, model
    # digest): an output for drift checks, never part of the fingerprint or the cache key. None in older files.
    served: dict[str, Any] | None = None
    # True when an answer behind this verdict came from the answer cache (asked in an earlier run, perhaps of another
    # model behind the same name): such a verdict says nothing about the model now, so `judge drift` refuses it.
    from_cache: bool | None = None
    # True when the rubric's criterion holds a demonstration from this dialogue (`judge tune` wrote it from a human
    # label): the statistics verbs leave this dialogue's labels of the criterion out, so no label counts twice.
    demonstration: bool | None = None

    @field_validator("id", "system", "criterion", mode="before")
    @classmethod
    def _whole_numbers_as_text(cls, value: Any) -> Any:
        # Ids are labels: a file written by another tool may give `"id": 12`.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("usage", mode="before")
    @classmethod
    def _no_usage(cls, value: Any) -> Any:
        return Usage() if value is None else value  # older files and other tools write null

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.id, self.system, self.criterion)

    @property
    def is_pair(self) -> bool:
        return self.system_1 is not None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def status(self) -> str:
        """ok (a number), label (a label without a number), abstain, na or error: how calibration reads it."""
        if self.error is not None:
            return "error"
        if self.na:
            return "na"
        if self.abstained:
            return "abstain"
        if self.score is not None:
            return "ok"
        return "label" if self.label is not None else "abstain"

    def to_line(self) -> str:
        # Mode-specific fields are left out when unused, so each line shows only what applies to it.
        return self.model_dump_json(exclude=self._unused())  # UTF-8 as it is, like json.dumps(ensure_ascii=False)

    def _unused(self) -> set[str]:
        optional = ("raw", "position", "segments", "system_1", "system_2", "orders", "order_disagreement", "identical",
                    "served", "from_cache", "demonstration")
        return {name for name in optional if getattr(self, name) is None}


def fingerprint_of(**parts: Any) -> dict[str, Any]:
    """The fingerprint, readable: short hashes for long content (item, rubric, template), values for settings."""
    return {k: (digest(v) if isinstance(v, (dict, list)) or (isinstance(v, str) and len(v) > 64) else v)
            for k, v in parts.items()}


def digest(value: Any) -> str:
    text = value if isinstance(value, str) else _canonical(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# json.dumps(value, sort_keys=True, ensure_ascii=False, default=str). An item's digest is taken for every judgment
# a --batch-dir run writes, so the C encoder json.dumps would build at each call is built once, the same but for its
# check for circular references (which JSON, YAML and pydantic's dumps never make; a cycle is a RecursionError).
# c_make_encoder is json's internal: used only where it is there and agrees with json.dumps on a probe.
_general = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode


def _c_canonical():
    try:
        encode = c_make_encoder(None, str, encode_basestring, None, ": ", ", ", True, False, True)

        def canonical(value: Any) -> str:
            return "".join(encode(value, 0))

        probe = {"b": [1, 2.5, None, True, "é\n\"x"], "a": {"z": float("inf"), "y": b"bytes"}}
        return canonical if canonical(probe) == _general(probe) else _general
    except Exception:  # another Python's internal signature, or no C accelerator
        return _general


_canonical = _c_canonical()


def changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, in words: ["temperature 0.0 -> 0.7", "item content"]."""
    if old is None:
        return ["no fingerprint (written by an older version)"]
    out = []
    for key in new.keys() | old.keys():
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key in HASHED_PARTS:  # digests: name the part, the hex says nothing
            out.append(HASHED_PARTS[key])
        else:
            out.append(f"{key} {before!r} -> {after!r}")
    return sorted(out)


HASHED_PARTS = {"item": "item content", "rubric": "rubric content", "template": "template", "context": "block"}


def parse_line(line: str, where: str) -> Judgment:
    """One JSON line as a judgment; OutputError naming `where` (file:line) otherwise."""
    try:
        return Judgment.model_validate_json(line)  # pydantic-core parses and checks in one pass: resumes are fast
    except ValidationError:
        pass  # find out what is wrong, in words
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise OutputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise OutputError(f"{where}: expected a judgment object, got {type(data).__name__}")
    try:
        return Judgment.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise OutputError(f"{where}: not a judgment: field '{field}': {err['msg']}") from None


def read_judgments(path: str | Path) -> Iterator[tuple[int, Judgment]]:
    """(line number, judgment) for every non-blank line; OutputError with file:line on the first bad one."""
    path = Path(path)
    if not path.is_file():
        raise OutputError(f"{path}: {'is a directory' if path.is_dir() else 'no such file'}")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark from an editor
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise OutputError(f"{path}:{number}: not UTF-8 text (byte {exc.start + 1} of the line is "
                                  f"0x{raw[exc.start]:02x}); judgments are UTF-8 JSON lines") from None
            if line.strip():
                yield number, parse_line(line, f"{path}:{number}")
