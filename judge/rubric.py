"""Rubric files: a guideline's criteria and scales as data, validated by pydantic.

A rubric is configuration, never code: YAML in `rubrics/NAME.yaml`. Validation errors name the file, the line
and the field, so that a guideline author can fix a rubric without reading Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

from judge.errors import RubricError
from judge.resources import bundled_dir, read_text

TASKS = ("summary", "response", "pairwise")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LikertPoint(_Strict):
    value: int
    label: str
    meaning: str


class LikertScale(_Strict):
    """Ordered integer points (1..5, 0..2, ...), each with a short label and what it means."""

    type: Literal["likert"]
    points: list[LikertPoint] = Field(min_length=2)

    @field_validator("points")
    @classmethod
    def _ascending_and_unique(cls, points: list[LikertPoint]) -> list[LikertPoint]:
        values = [p.value for p in points]
        if values != sorted(set(values)):
            raise ValueError(f"point values must be unique and ascending, got {values}")
        return points

    @property
    def values(self) -> list[int]:
        return [p.value for p in self.points]

    def score_of(self, answer: int | str) -> float | None:
        return float(answer)


class Category(_Strict):
    value: str
    meaning: str
    # A number for agreement statistics on ordered labels (correct=1, not correct=0); None for abstentions.
    score: float | None = None
    abstain: bool = False

    @model_validator(mode="after")
    def _abstention_has_no_score(self) -> Category:
        if self.abstain and self.score is not None:
            raise ValueError(f"abstaining label {self.value!r} must not carry a score")
        return self


class CategoricalScale(_Strict):
    """Named labels, possibly with an abstaining one ("I don't know") that is never turned into a number."""

    type: Literal["categorical"]
    labels: list[Category] = Field(min_length=2)

    @field_validator("labels")
    @classmethod
    def _unique(cls, labels: list[Category]) -> list[Category]:
        values = [c.value for c in labels]
        if len(values) != len(set(values)):
            raise ValueError(f"label values must be unique, got {values}")
        return labels

    @property
    def values(self) -> list[str]:
        return [c.value for c in self.labels]

    def score_of(self, answer: int | str) -> float | None:
        return next(c.score for c in self.labels if c.value == answer)


class PreferenceScale(_Strict):
    """Which of two candidates is better: "1", "2", or "0" for a tie."""

    type: Literal["preference"]
    first: str = "the first candidate is better"
    second: str = "the second candidate is better"
    tie: str = "both are equally good (or equally bad)"

    @property
    def values(self) -> list[str]:
        return ["1", "2", "0"]

    @property
    def labels(self) -> list[Category]:
        return [Category(value="1", meaning=self.first), Category(value="2", meaning=self.second),
                Category(value="0", meaning=self.tie)]

    def score_of(self, answer: int | str) -> float | None:
        return None


Scale = Annotated[LikertScale | CategoricalScale | PreferenceScale, Field(discriminator="type")]


class Example(_Strict):
    """A worked example written for the rubric (never copied from a dataset)."""

    candidate: str
    answer: int | str
    why: str
    dialogue: str | None = None
    candidate_2: str | None = None  # pairwise examples: `candidate` is the first summary, this the second
    reference: str | None = None
    # A demonstration `judge tune` took from a human label: the labelled cell it came from. Judgments of that
    # dialogue on this criterion are marked `demonstration`, and the statistics verbs leave its labels out.
    item_id: str | None = None
    system: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_origin(self, handler):
        # rubrics without demonstrations dump (and so fingerprint) exactly as before these fields existed
        data = handler(self)
        for name in ("item_id", "system"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class Gate(_Strict):
    """Asked once per dialogue; "no" makes the criterion N/A for every candidate of that dialogue."""

    question: str
    na_reason: str = "the gate question was answered no"


class Criterion(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    name: str
    definition: str
    scale: Scale
    examples: list[Example] = []
    explanations: list[str] = []
    needs_reference: bool = False
    gate: Gate | None = None
    # Judged once per topic segment of the candidate (given as the item's `segments`, or split by the judge in
    # one cached request); the candidate's score is the mean over its segments.
    per_segment: bool = False
    # Applies only to items whose field has one of these values, e.g. {summary_type: [overall]}; N/A otherwise.
    only_when: dict[str, list[str]] = {}

    def applies_to(self, fields: dict) -> bool:
        return all(str(fields.get(name)) in allowed for name, allowed in self.only_when.items())

    @model_validator(mode="after")
    def _examples_use_the_scale(self) -> Criterion:
        allowed = {str(v) for v in self.scale.values}
        for i, example in enumerate(self.examples):
            if str(example.answer) not in allowed:
                raise ValueError(f"examples[{i}].answer {example.answer!r} is not on the scale {sorted(allowed)}")
        return self


class QualificationItem(BaseModel):
    """An item of the rubric's own qualification test (any item fields) with the expected answers."""

    model_config = ConfigDict(extra="allow", frozen=True)
    expected: dict[str, int | str]


class Qualification(_Strict):
    """A small test a judge must pass before real work, as annotators did (per-criterion agreement)."""

    threshold: float = Field(gt=0, le=1)
    tolerance: int = Field(default=0, ge=0, description="a Likert answer this close to the expected one counts")
    items: list[QualificationItem] = Field(min_length=1)


class Rubric(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: str
    language: str
    task: Literal["summary", "response", "pairwise"]
    title: str
    instructions: str
    inputs: list[str] = Field(min_length=1)
    template: str = "pointwise.j2"
    block_template: str = "block.j2"
    segment_instructions: str | None = None  # how to split a candidate into topic segments (per_segment criteria)
    context_fields: list[str] = []  # extra item fields shown to the judge, e.g. summary_type
    criteria: list[Criterion] = Field(min_length=1)
    qualification: Qualification | None = None
    # NAME@VERSION of the rubric `judge tune` built this one from; None for a rubric written by hand.
    tuned_from: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset_origin(self, handler):
        data = handler(self)  # a rubric never tuned dumps (and fingerprints) exactly as before the field existed
        if data.get("tuned_from") is None:
            data.pop("tuned_from", None)
        return data

    @field_validator("criteria")
    @classmethod
    def _unique_ids(cls, criteria: list[Criterion]) -> list[Criterion]:
        ids = [c.id for c in criteria]
        if len(ids) != len(set(ids)):
            raise ValueError(f"criterion ids must be unique, got {ids}")
        return criteria

    @model_validator(mode="after")
    def _consistent(self) -> Rubric:
        for c in self.criteria:
            if (c.scale.type == "preference") != (self.task == "pairwise"):
                raise ValueError(f"criterion {c.id!r}: pairwise rubrics use preference scales, and only they do")
            if c.per_segment and not self.segment_instructions:
                raise ValueError(f"criterion {c.id!r} is per_segment, so the rubric needs segment_instructions")
        if self.qualification:
            from judge.items import Item  # items do not depend on rubrics; imported here to keep it that way

            ids = {c.id for c in self.criteria}
            for i, q in enumerate(self.qualification.items):
                try:
                    item = Item.model_validate(q.model_dump(exclude={"expected"}))
                except ValidationError as exc:
                    raise ValueError(f"qualification.items[{i}] is not a valid item: "
                                     f"{exc.errors()[0]['msg']}") from None
                if missing := [f for f in self.inputs if item.fields.get(f) in (None, "")]:
                    raise ValueError(f"qualification.items[{i}] lacks the rubric's inputs {missing}")
                if unknown := set(q.expected) - ids:
                    raise ValueError(f"qualification.items[{i}].expected names unknown criteria {sorted(unknown)}")
                for cid, answer in q.expected.items():
                    allowed = {str(v) for v in self.criterion(cid).scale.values}
                    if str(answer) not in allowed:
                        raise ValueError(f"qualification.items[{i}].expected.{cid} = {answer!r} is not on the scale")
        return self

    @property
    def ref(self) -> str:
        """How judgments name the rubric: name@version."""
        return f"{self.name}@{self.version}"

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise RubricError(
            f"rubric {self.name!r} has no criterion {criterion_id!r}; it has: {', '.join(c.id for c in self.criteria)}"
        )

    def demonstration_items(self) -> dict[str, set[str]]:
        """criterion id -> the dialogues (item ids) its demonstrations were taken from."""
        return {c.id: {e.item_id for e in c.examples if e.item_id is not None} for c in self.criteria}

    def select(self, ids: list[str] | None) -> list[Criterion]:
        return list(self.criteria) if not ids else [self.criterion(i) for i in dict.fromkeys(ids)]


def rubric_dir() -> Path:
    return bundled_dir("rubrics")


def available_rubrics() -> list[str]:
    return sorted(p.stem for p in rubric_dir().glob("*.yaml"))


def resolve_rubric_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        return path  # a file the user names: reading it says what is wrong with it
    bundled = rubric_dir() / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    raise RubricError(
        f"unknown rubric {name_or_path!r}: not a bundled rubric ({', '.join(available_rubrics())}) nor a YAML file"
    )


def load_rubric(name_or_path: str) -> Rubric:
    path = resolve_rubric_path(name_or_path)
    text = read_text(path, RubricError)
    try:
        try:  # libyaml's parser, a tenth of the time (a run loads its rubric twice); PyYAML's for its messages
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RubricError(f"{path}:{_yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise RubricError(f"{path}: a rubric must be a YAML mapping, got {type(data).__name__}")
    try:
        return Rubric.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        where = ".".join(str(p) for p in loc) or "(top level)"
        line = _yaml_line(text, loc)
        at = f"{path}:{line}" if line else str(path)
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise RubricError(f"{at}: field {where}: {first['msg'].removeprefix('Value error, ')}{more}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """'LINE: not valid YAML: problem (column C)' in one line; PyYAML's own message spans several."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    where = f"{mark.line + 1}: " if mark else " "
    column = f" at column {mark.column + 1}" if mark else ""
    return f"{where}not valid YAML: {problem}{column}{f' ({context})' if context else ''}"


def _yaml_line(text: str, loc: tuple) -> int | None:
    """The 1-based line of the deepest YAML node on `loc` that exists, so errors point into the file."""
    node = yaml.compose(text)
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == part), None)
            if pair is None:
                continue  # a pydantic-only step, such as the union tag "likert"
            line, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
