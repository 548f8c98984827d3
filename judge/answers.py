"""What a judge must answer, as a JSON schema for servers that enforce it and a strict parser for all others.

The same `AnswerFormat` builds the `response_format` schema (the verdict is an enum of the scale's points,
the rationale has a maxLength) and parses the text that comes back, whatever the server enforced.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from judge.errors import AnswerError
from judge.rubric import Criterion

RATIONALE_MAX = 300  # characters: one or two short sentences; bounds a degenerate answer's length
# In a block, every candidate has its own rationale: shorter, so that 14 of them (DialSummEval) and the prompt fit
# a 4,096-token context.
BLOCK_RATIONALE_MAX = 80
JSON_OVERHEAD = 48  # characters of keys, quotes and braces around one answer object
# Tokens a character of free text may cost: byte-level tokenizers spend up to three on a CJK character.
TOKENS_PER_CHAR = {"zh": 3.0, "ja": 3.0, "ko": 3.0}


def token_budget(fmt, language: str = "en") -> int:
    """max_tokens that always fits a schema-bounded answer: its longest text, priced for the language, plus room."""
    text, fixed = fmt.max_chars()
    return int((text * TOKENS_PER_CHAR.get(language, 1.0) + fixed) * 1.25) + 64
_CODE_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


@dataclass(frozen=True)
class AnswerFormat:
    """The keys of an answer: a rationale, one verdict from `allowed`, optionally one explanation."""

    verdict_key: str  # "score" (integer points), "label" (strings) or "answer" (gate: yes/no)
    allowed: tuple
    explanations: tuple[str, ...] = ()

    @classmethod
    def for_criterion(cls, criterion: Criterion) -> AnswerFormat:
        scale = criterion.scale
        explanations = (*criterion.explanations, "other") if criterion.explanations else ()
        if scale.type == "likert":
            return cls("score", tuple(scale.values), explanations)
        return cls("label", tuple(scale.values), explanations)

    @classmethod
    def gate(cls) -> AnswerFormat:
        return cls("answer", ("yes", "no"))

    @property
    def numeric(self) -> bool:
        return self.verdict_key == "score"

    def max_chars(self, rationale_max: int = RATIONALE_MAX) -> tuple[int, int]:
        """(characters of free text, other characters) of the longest answer the schema allows."""
        labels = max(len(str(v)) for v in self.allowed) + max((len(e) for e in self.explanations), default=0)
        return rationale_max, labels + JSON_OVERHEAD

    def json_schema(self, rationale_max: int = RATIONALE_MAX) -> dict:
        verdict = {"type": "integer" if self.numeric else "string", "enum": list(self.allowed)}
        properties = {"rationale": {"type": "string", "maxLength": rationale_max}, self.verdict_key: verdict}
        if self.explanations:
            properties["explanation"] = {"type": "string", "enum": list(self.explanations)}
        return {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }

    def parse(self, text: str) -> dict:
        """A dict with `rationale`, the verdict and `explanation`; AnswerError (with the raw text) otherwise."""
        obj = _first_json_object(text)
        if obj is None:
            raise AnswerError("the answer holds no JSON object", text)
        return self.parse_object(obj, text)

    def parse_object(self, obj: dict, text: str, where: str = "") -> dict:
        if not isinstance(obj, dict):
            raise AnswerError(f"{where}is not a JSON object", text)
        if self.verdict_key not in obj:
            raise AnswerError(f"{where}the answer has no '{self.verdict_key}' key", text)
        verdict = self._verdict(obj[self.verdict_key])
        if verdict is None:
            raise AnswerError(
                f"{where}'{self.verdict_key}' is {obj[self.verdict_key]!r}, not one of {list(self.allowed)}", text
            )
        rationale = obj.get("rationale")
        if rationale is not None and not isinstance(rationale, str):
            raise AnswerError(f"{where}'rationale' is not a string", text)
        explanation = None
        if self.explanations:
            explanation = _match_label(obj.get("explanation"), self.explanations)
            if explanation is None:
                raise AnswerError(f"{where}'explanation' is {obj.get('explanation')!r}, not one of the listed ones",
                                  text)
        return {"rationale": rationale, self.verdict_key: verdict, "explanation": explanation}

    def _verdict(self, value):
        if self.numeric:
            if isinstance(value, bool):
                return None
            if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
                value = int(value)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            return value if isinstance(value, int) and value in self.allowed else None
        return _match_label(value, self.allowed)


@dataclass(frozen=True)
class BlockFormat:
    """Block judging: one answer object per candidate letter ("A", "B", ...), all in one reply."""

    inner: AnswerFormat
    letters: tuple[str, ...]
    numeric = False  # no log-probability scoring: a block holds many score tokens

    def max_chars(self) -> tuple[int, int]:
        text, fixed = self.inner.max_chars(BLOCK_RATIONALE_MAX)
        return text * len(self.letters), (fixed + 8) * len(self.letters)

    def json_schema(self) -> dict:
        one = self.inner.json_schema(BLOCK_RATIONALE_MAX)
        return {"type": "object", "properties": {k: one for k in self.letters}, "required": list(self.letters),
                "additionalProperties": False}

    def parse(self, text: str) -> dict[str, dict]:
        obj = _first_json_object(text)
        if obj is None:
            raise AnswerError("the answer holds no JSON object", text)
        if missing := [k for k in self.letters if k not in obj]:
            raise AnswerError(f"the answer has no entry for candidates {missing}", text)
        return {k: self.inner.parse_object(obj[k], text, where=f"candidate {k}: ") for k in self.letters}


@dataclass(frozen=True)
class SegmentsFormat:
    """The candidate split into topic segments, each kept in the candidate's own words."""

    numeric = False
    max_segments: int = 12
    max_length: int = 400
    source_chars: int | None = None  # the candidate's length: its segments, in its own words, are no longer

    def max_chars(self) -> tuple[int, int]:
        text = self.max_segments * self.max_length
        if self.source_chars is not None:
            text = min(text, self.source_chars + 2 * self.max_segments)
        return text, self.max_segments * 4 + 20

    def json_schema(self) -> dict:
        return {"type": "object", "properties": {"segments": {
            "type": "array", "items": {"type": "string", "minLength": 1, "maxLength": self.max_length},
            "minItems": 1, "maxItems": self.max_segments}},
            "required": ["segments"], "additionalProperties": False}

    def parse(self, text: str) -> list[str]:
        obj = _first_json_object(text)
        segments = obj.get("segments") if obj else None
        if not isinstance(segments, list) or not segments or len(segments) > self.max_segments:
            raise AnswerError(f"expected 'segments': a list of 1 to {self.max_segments} strings", text)
        if not all(isinstance(x, str) and x.strip() for x in segments):
            raise AnswerError("every segment must be a non-empty string", text)
        return [x.strip() for x in segments]


def _match_label(value, allowed) -> str | None:
    """Exact label, forgiving only case and surrounding blanks ("Appropriate " is "appropriate")."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    wanted = value.strip().casefold()
    return next((a for a in allowed if str(a).casefold() == wanted), None)


_DECODER = json.JSONDecoder()  # made once: every answer is read with it


def _first_json_object(text: str) -> dict | None:
    text = _CODE_FENCE.sub("", text.strip())
    start = text.find("{")
    while start != -1:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None


def _token_bytes(token: dict) -> bytes:
    raw = token.get("bytes")
    return bytes(raw) if raw is not None else token.get("token", "").encode("utf-8")


def verdict_probabilities(tokens: list[dict], fmt: AnswerFormat) -> dict[str, float] | None:
    """Probabilities of the scale's points at the verdict token, renormalised over the allowed points.

    Servers return raw log-probabilities even when a schema constrains decoding, so other tokens share the
    mass; only the allowed points count. The verdict token is found by its content: the first token after
    `"score":` in the text the tokens themselves spell (not `content`, which a server may have trimmed, e.g.
    llama.cpp drops a ```json wrapper), measured in bytes because tokens can split a UTF-8 character.
    """
    if not tokens:
        return None
    spelled = b"".join(_token_bytes(t) for t in tokens)
    match = re.search(rb'"' + fmt.verdict_key.encode() + rb'"\s*:\s*"?', spelled)
    if match is None:
        return None
    offset = 0
    for token in tokens:
        offset += len(_token_bytes(token))
        if offset > match.end():
            break
    else:
        return None
    allowed = {str(v) for v in fmt.allowed}
    mass: dict[str, float] = {}
    alternatives = list(token.get("top_logprobs") or [])
    if all(alt.get("token") != token.get("token") for alt in alternatives):
        alternatives.append(token)  # the sampled token itself, when the server's top list left it out
    for alt in alternatives:
        key = alt.get("token", "").strip(' \t\r\n":,')  # a token may carry the colon and newlines too
        if key in allowed and alt.get("logprob") is not None:
            mass[key] = mass.get(key, 0.0) + math.exp(alt["logprob"])
    total = sum(mass.values())
    if total <= 0:
        return None
    return {str(v): mass.get(str(v), 0.0) / total for v in fmt.allowed}


def expected_score(probs: dict[str, float]) -> float:
    return sum(float(k) * p for k, p in probs.items())
