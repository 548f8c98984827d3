"""What annotators get: tasks in the order they meet them, candidates shuffled under letters, and the key.

A task is one dialogue with all its candidates (A, B, C... as the call-centre and DialSummEval annotators saw
them), or one pair (#1, #2) for pairwise rubrics. The rubric's qualification items come first; pairwise
packages also hide repeated identical pairs among the real ones, which a careful annotator must call a tie.
Every answer cell has a name (`faithfulness_C`, `fluency_B_2` for segment 2, `appropriateness_A_why`), the
same in the Label Studio config, the tasks file and the CSV header; the key turns names back into systems.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from dataclasses import dataclass
from typing import Any

from judge.annotation.plan import KEY_FORMAT, Slot, Task  # noqa: F401  (Slot, Task: the key's tasks, re-exported)
from judge.errors import InputError
from judge.items import Item
from judge.rubric import Criterion, Rubric

LETTERS = string.ascii_uppercase


@dataclass
class Submission:
    """One annotator's answers to one task, as read from a filled sheet."""

    where: str  # "file:line" or "file: entry N, annotation M", for error messages
    task_id: str
    annotator: str
    values: dict[str, str]  # answer cell name -> the raw answer (blank cells left out)


@dataclass(frozen=True)
class AnswerField:
    name: str
    criterion: str
    letter: str | None  # None for a pair: the verdict is about both
    segment: int | None  # 1-based
    role: str  # "score" | "why" (explanation picked from the list) | "other" (free text for "other")


def answer_fields(rubric: Rubric, task: Task) -> list[AnswerField]:
    """The answer cells of one task, in the order a sheet shows them (criterion by criterion)."""
    out = []
    for c in rubric.criteria:
        if rubric.task == "pairwise":
            out.append(AnswerField(c.id, c.id, None, None, "score"))
            if c.explanations:
                out += [AnswerField(f"{c.id}_why", c.id, None, None, "why"),
                        AnswerField(f"{c.id}_other", c.id, None, None, "other")]
            continue
        for slot in task.slots:
            if c.id in slot.skip:
                continue
            if c.per_segment:
                out += [AnswerField(f"{c.id}_{slot.letter}_{n}", c.id, slot.letter, n, "score")
                        for n in range(1, len(slot.segments) + 1)]
            else:
                out.append(AnswerField(f"{c.id}_{slot.letter}", c.id, slot.letter, None, "score"))
            if c.explanations:
                out += [AnswerField(f"{c.id}_{slot.letter}_why", c.id, slot.letter, None, "why"),
                        AnswerField(f"{c.id}_{slot.letter}_other", c.id, slot.letter, None, "other")]
    return out


def all_fields(rubric: Rubric, tasks: list[Task]) -> list[AnswerField]:
    """The answer cells of a whole package (one column each in a sheet), criterion by criterion, then by letter."""
    order = {c.id: n for n, c in enumerate(rubric.criteria)}
    union = {f.name: f for t in tasks for f in answer_fields(rubric, t)}
    roles = {"score": 0, "why": 1, "other": 2}
    return sorted(union.values(), key=lambda f: (order[f.criterion], f.letter or "", roles[f.role], f.segment or 0))


def parse_field(rubric: Rubric, name: str) -> tuple[str, str | None, int | None, str] | None:
    """(criterion, letter, segment, role) of an answer cell name, or None when no criterion of the rubric has it."""
    pattern = r"(?:_(why|other))?" if rubric.task == "pairwise" else r"_([A-Z])(?:_(\d+))?(?:_(why|other))?"
    for c in sorted(rubric.criteria, key=lambda c: -len(c.id)):  # main_issues before a criterion named main
        match = re.fullmatch(re.escape(c.id) + pattern, name)
        if match is None:
            continue
        if rubric.task == "pairwise":
            return c.id, None, None, match.group(1) or "score"
        letter, segment, role = match.groups()
        return c.id, letter, int(segment) if segment else None, role or "score"
    return None


def allows_na(c: Criterion) -> bool:
    """A gated criterion (e.g. sub-issues) may be answered N/A."""
    return c.gate is not None


def shown_fields(task: Task, rubric: Rubric) -> dict[str, str]:
    """The task's data as annotators see it: texts under their field names (never a system name)."""
    data = {"task_id": task.task_id, "section": task.section, **task.context}
    for slot in task.slots:
        name = f"candidate_{slot.letter}"
        data[name] = slot.text
        data.update({f"{key}_{slot.letter}": value for key, value in slot.context})
        if any(c.per_segment for c in rubric.criteria):
            for n, segment in enumerate(slot.segments, start=1):
                data[f"{name}_{n}"] = segment
    return data


# -- building -------------------------------------------------------------------------------------------------


def context_names(rubric: Rubric) -> list[str]:
    """Item fields annotators see beside the candidates: the reference when the rubric uses one, and the
    rubric's context fields (e.g. the CSDS summary type)."""
    return (["reference"] if "reference" in rubric.inputs else []) + list(rubric.context_fields)


def _context(rubric: Rubric, item: Item) -> dict[str, str]:
    fields = item.fields
    return {name: str(fields[name]) for name in context_names(rubric) if fields.get(name) not in (None, "")}


def _slot(rubric: Rubric, letter: str, item: Item, position: int, context: dict[str, str]) -> Slot:
    candidate = item.candidate
    assert candidate is not None, "build_tasks refuses a pair for a rubric of single candidates"
    segments: tuple[str, ...] = ()
    if any(c.per_segment for c in rubric.criteria):
        segments = tuple(item.segments) if item.segments else (candidate,)
    skip = tuple(c.id for c in rubric.criteria if not c.applies_to(item.fields))
    return Slot(letter, item.system, candidate, segments, skip, tuple(context.items()), position)


def _block_task(rubric: Rubric, kind: str, group: list[Item], rng: random.Random | None) -> Task:
    shown = list(group)
    if rng is not None:
        rng.shuffle(shown)
    if len(shown) > len(LETTERS):
        raise InputError(f"dialogue {group[0].id!r} has {len(shown)} candidates; a sheet shows at most {len(LETTERS)}")
    # The reference and context fields are shown once per dialogue when all its candidates share them (the
    # DialSummEval case), and under each letter when they differ (a CSDS user summary has its own reference).
    contexts = {item.system: _context(rubric, item) for item in group}
    first = contexts[group[0].system]
    shared = {k: v for k, v in first.items() if all(c.get(k) == v for c in contexts.values())}
    own = {system: {k: v for k, v in c.items() if k not in shared} for system, c in contexts.items()}
    slots = [_slot(rubric, LETTERS[i], item, group.index(item), own[item.system]) for i, item in enumerate(shown)]
    return Task("", kind, group[0].id, slots, dialogue=_dialogue(group[0]), context=shared)


def _pair_task(rubric: Rubric, kind: str, item: Item, swapped: bool) -> Task:
    assert item.candidate_1 is not None and item.candidate_2 is not None, "build_tasks refuses a single candidate"
    first, second = (item.candidate_2, item.candidate_1) if swapped else (item.candidate_1, item.candidate_2)
    slots = [Slot("1", "", first), Slot("2", "", second)]
    return Task("", kind, item.id, slots, system=item.system, swapped=swapped,
                must_tie=item.candidate_1.strip() == item.candidate_2.strip(),
                dialogue=_dialogue(item), context=_context(rubric, item))


def dialogue_text(dialogue: str | list) -> str:
    """A dialogue as one text, one "speaker: text" line per turn (for CSV cells and mixed packages)."""
    if isinstance(dialogue, str):
        return dialogue
    return "\n".join(f"{turn['speaker']}: {turn['text']}" for turn in dialogue)


def _dialogue(item: Item) -> str | list:
    if isinstance(item.dialogue, str):
        return item.dialogue
    return [{"speaker": t.speaker, "text": t.text} for t in item.dialogue]


def build_tasks(rubric: Rubric, items: list[Item], seed: int, plan: dict[str, str] | None = None,
                repeats: int | None = None, qualification: bool = True) -> list[Task]:
    """All tasks in the order annotators meet them, with ids `<export tag>-<n>`."""
    pairwise = rubric.task == "pairwise"
    if pairwise and (single := next((i for i in items if not i.is_pair), None)):
        raise InputError(f"item {single.id!r} has no candidate_1/candidate_2 pair, which rubric {rubric.name!r} "
                         "compares")
    if not pairwise and (pair := next((i for i in items if i.is_pair), None)):
        raise InputError(f"item {pair.id!r} is a pair; rubric {rubric.name!r} rates single candidates")
    if plan is not None:
        known = {i.id for i in items}
        if unknown := [d for d in plan if d not in known]:
            raise InputError(f"the plan names dialogue(s) not in the items: {', '.join(unknown[:5])}")
        items = [i for i in items if i.id in plan]

    tasks: list[Task] = []
    if qualification and rubric.qualification:
        for q in rubric.qualification.items:
            item = Item.model_validate(q.model_dump(exclude={"expected"}))
            expected = {k: str(v) for k, v in q.expected.items()}
            task = (_pair_task(rubric, "qualification", item, random.Random(f"{seed}:{item.id}:q").random() < 0.5)
                    if pairwise else _block_task(rubric, "qualification", [item], None))
            task.expected = expected
            tasks.append(task)

    evaluation: list[Task] = []
    if pairwise:
        for item in items:
            # One coin per pair, seeded by the pair: which candidate is shown as #1.
            swapped = random.Random(f"{seed}:{item.id}:{item.system}").random() < 0.5
            evaluation.append(_pair_task(rubric, "item", item, swapped))
        evaluation = _with_repeats(rubric, evaluation, items, seed, repeats)
    else:
        groups: dict[str, list[Item]] = {}
        for item in items:
            groups.setdefault(item.id, []).append(item)
        for dialogue_id, group in groups.items():
            # The same per-dialogue seeding as block judging (`judge score --mode block`).
            evaluation.append(_block_task(rubric, "item", group, random.Random(f"{seed}:{dialogue_id}")))
    for task in evaluation:
        task.part = plan.get(task.item_id) if plan else None
    tasks += evaluation

    tag = hashlib.sha256(json.dumps(
        [rubric.ref, seed, [(t.kind, t.item_id, t.system, [s.system for s in t.slots], t.swapped) for t in tasks]]
    ).encode()).hexdigest()[:6]
    for n, task in enumerate(tasks, start=1):
        task.task_id = f"{tag}-{n:03d}"
    return tasks


def _with_repeats(rubric: Rubric, evaluation: list[Task], items: list[Item], seed: int,
                  repeats: int | None) -> list[Task]:
    """Hide repeated identical pairs among the real ones (default: one per ten pairs, at least one)."""
    n = math.ceil(len(items) / 10) if repeats is None else repeats
    if n < 0:
        raise InputError("--repeats must be 0 or more")
    rng = random.Random(f"{seed}:repeats")
    out = list(evaluation)
    for _ in range(n):
        item = rng.choice(items)
        text = item.candidate_1 if rng.random() < 0.5 else item.candidate_2
        assert text is not None, "build_tasks refuses a single candidate for a pairwise rubric"
        check = Task("", "check", item.id, [Slot("1", "", text), Slot("2", "", text)], system=item.system,
                     must_tie=True, dialogue=_dialogue(item), context=_context(rubric, item))
        out.insert(rng.randint(0, len(out)), check)
    return out


# -- the key --------------------------------------------------------------------------------------------------
def key_dict(rubric: Rubric, tasks: list[Task], seed: int, fmt: str, annotators: int,
             plan: dict | None = None) -> dict:
    """Everything import needs, and nothing annotators should see: which system is behind each letter."""
    rows = []
    for t in tasks:
        row: dict[str, Any] = {"task_id": t.task_id, "kind": t.kind, "item_id": t.item_id}
        if rubric.task == "pairwise":
            row.update(system=t.system, swapped=t.swapped, must_tie=t.must_tie)
        else:
            row["slots"] = [{"letter": s.letter, "system": s.system, "segments": len(s.segments), "skip": list(s.skip)}
                            for s in sorted(t.slots, key=lambda s: s.position)]
        if t.part:
            row["part"] = t.part
        if t.expected:
            row["expected"] = t.expected
        rows.append(row)
    key = {"format": KEY_FORMAT, "version": 1, "rubric_ref": rubric.ref, "seed": seed, "sheet_format": fmt,
           "annotators": annotators, "rubric": rubric.model_dump(mode="json"), "tasks": rows}
    if plan is not None:
        key["plan"] = plan  # which plan (its digest): `judge estimate --plan --key` checks the labels came from it
    return key


