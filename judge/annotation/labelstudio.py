"""Label Studio: a labeling config (XML tags, https://labelstud.io/tags/), a tasks file it imports, and a reader
for its JSON export (a list of tasks, each with `annotations[].result[]` holding `from_name` and a `value`).

The config is built from the whole package: one radio row per answer cell (`faithfulness_C`), laid out as the
guideline shows it — the dialogue, the lettered candidates, then one block per criterion with its scale points
and their meanings, and a row per candidate. A dialogue with fewer candidates than the widest one leaves the
extra rows empty; import refuses an answer for a letter the key does not know for that dialogue.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from judge.annotation import NA, OTHER
from judge.annotation.package import Submission, Task, all_fields, dialogue_text, shown_fields
from judge.errors import InputError
from judge.rubric import Criterion, Rubric

EMPTY = "—"
HEADINGS = {"summary": "Summaries", "response": "Responses", "pairwise": "Summaries"}


def _as_turns(tasks: list[Task]) -> bool:
    """Paragraphs show turns with their speakers; a package with any plain-text dialogue uses Text for all."""
    return all(isinstance(t.dialogue, list) for t in tasks)


def tasks_file(rubric: Rubric, tasks: list[Task]) -> list[dict]:
    """Label Studio's import format: [{"data": {...}}]; every task carries every field the config names."""
    as_turns = _as_turns(tasks)
    names = _union(shown_fields(t, rubric) for t in tasks)
    out = []
    for t in tasks:
        # The config is shared by all tasks: a letter or segment this dialogue lacks shows a dash, not a blank.
        data: dict[str, str | list] = {name: EMPTY if name.startswith("candidate_") else "" for name in names}
        data.update(shown_fields(t, rubric))
        data["dialogue"] = t.dialogue if as_turns else dialogue_text(t.dialogue)
        out.append({"data": data})
    return out


def _union(dicts) -> list[str]:
    seen: dict[str, None] = {}
    for d in dicts:
        seen.update(dict.fromkeys(d))
    return list(seen)


def label_config(rubric: Rubric, tasks: list[Task]) -> str:
    """The labeling config (XML) of the whole package: the source, the candidates, then one block per criterion."""
    root = ET.Element("View")
    ET.SubElement(root, "Header", value=rubric.title)
    ET.SubElement(root, "Text", name="section", value="$section")
    _source(root, rubric, tasks)
    _candidates(root, rubric, tasks)
    fields = {f.name: f for f in all_fields(rubric, tasks)}
    emitted: set[str] = set()  # explanation lists shown already
    for c in rubric.criteria:
        _criterion_block(root, c, fields, emitted, pairwise=rubric.task == "pairwise")
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"


def _source(root: ET.Element, rubric: Rubric, tasks: list[Task]) -> None:
    """The dialogue (turns with their speakers, or plain text) and the context fields every task shares."""
    ET.SubElement(root, "Header", value="Source" if rubric.task == "pairwise" else "Dialogue")
    if _as_turns(tasks):
        ET.SubElement(root, "Paragraphs", name="dialogue", value="$dialogue", layout="dialogue",
                      nameKey="speaker", textKey="text")
    else:
        ET.SubElement(root, "Text", name="dialogue", value="$dialogue")
    for name in _union(t.context for t in tasks):
        ET.SubElement(root, "Header", value=_title(name), size="5")
        ET.SubElement(root, "Text", name=f"context_{name}", value=f"${name}")


def _candidates(root: ET.Element, rubric: Rubric, tasks: list[Task]) -> None:
    """A row per candidate letter (the widest dialogue's), with its own context fields and its segments."""
    pairwise = rubric.task == "pairwise"
    ET.SubElement(root, "Header", value=HEADINGS[rubric.task])
    segmented = any(c.per_segment for c in rubric.criteria)
    letters = _union({s.letter: None for s in t.slots} for t in tasks)
    n_segments = {letter: max((len(s.segments) for t in tasks for s in t.slots if s.letter == letter), default=0)
                  for letter in letters}
    for letter in letters:
        row = ET.SubElement(root, "View", style="display: flex; gap: 1em; align-items: baseline")
        ET.SubElement(row, "Header", value=f"#{letter}" if pairwise else letter, size="4")
        ET.SubElement(row, "Text", name=f"candidate_{letter}", value=f"$candidate_{letter}")
        for name in _union(dict(s.context) for t in tasks for s in t.slots if s.letter == letter):
            own = ET.SubElement(root, "View", style="display: flex; gap: 1em; margin-left: 2em")
            ET.SubElement(own, "Header", value=f"{_title(name)} ({letter})", size="6")
            ET.SubElement(own, "Text", name=f"context_{name}_{letter}", value=f"${name}_{letter}")
        for n in range(1, n_segments[letter] + 1) if segmented else ():
            seg = ET.SubElement(root, "View", style="display: flex; gap: 1em; margin-left: 2em")
            ET.SubElement(seg, "Header", value=f"{letter}.{n}", size="6")
            ET.SubElement(seg, "Text", name=f"candidate_{letter}_{n}", value=f"$candidate_{letter}_{n}")


def _criterion_block(root: ET.Element, c: Criterion, fields: dict, emitted: set[str], pairwise: bool) -> None:
    """One criterion: its name, definition and scale, then a radio row per answer cell, each with its explanation
    list (shown once a verdict is picked) where the criterion asks why."""
    block = ET.SubElement(root, "View", style="margin-top: 1.5em; padding-top: 0.5em; border-top: 1px solid #ccc")
    ET.SubElement(block, "Header", value=c.name)
    ET.SubElement(block, "Header", value=" ".join(c.definition.split()), size="6")
    for value, meaning in _choices(c):
        ET.SubElement(block, "Header", value=f"{value} — {meaning}", size="6")
    for f in (f for f in fields.values() if f.criterion == c.id and f.role == "score"):
        target = f"candidate_{f.letter}_{f.segment}" if f.segment else f"candidate_{f.letter or '1'}"
        row = ET.SubElement(block, "View", style="display: flex; gap: 1em; align-items: center")
        if not pairwise:
            ET.SubElement(row, "Header", value=f"{f.letter}.{f.segment}" if f.segment else f.letter, size="5")
        choices = ET.SubElement(row, "Choices", name=f.name, toName=target, choice="single-radio",
                                showInline="true")
        for value, meaning in _choices(c):
            ET.SubElement(choices, "Choice", value=value, hint=meaning)
        why = next((g for g in fields.values() if g.role == "why" and g.criterion == c.id
                    and g.letter == f.letter and g.name not in emitted), None)
        if why:  # the explanation list, shown once a verdict is picked
            emitted.add(why.name)
            box = ET.SubElement(block, "View", style="margin-left: 2em")
            pick = ET.SubElement(box, "Choices", name=why.name, toName=target, choice="single-radio",
                                 showInline="true", visibleWhen="choice-selected", whenTagName=f.name)
            for text in [*c.explanations, OTHER]:
                ET.SubElement(pick, "Choice", value=text)
            ET.SubElement(box, "TextArea", name=why.name.removesuffix("_why") + "_other", toName=target,
                          maxSubmissions="1", placeholder=f"{OTHER}: your own explanation", editable="true")


def _title(field_name: str) -> str:
    return field_name.replace("_", " ").capitalize()


def _choices(c: Criterion) -> list[tuple[str, str]]:
    """(value, what it means) for each answer the criterion allows, N/A last where allowed."""
    if c.scale.type == "likert":
        out = [(str(p.value), f"{p.label}: {p.meaning}") for p in c.scale.points]
    else:
        out = [(lab.value, lab.meaning) for lab in c.scale.labels]
    if c.gate is not None:  # allows_na(c)
        out.append((NA, f"{c.gate.na_reason}"))
    return out


def project_file(rubric: Rubric, config: str, annotators: int, instructions: str) -> dict:
    """The body of Label Studio's project-creation API call (POST /api/projects)."""
    return {"title": f"{rubric.name} annotation", "label_config": config, "maximum_annotations": annotators,
            "show_instruction": True, "expert_instruction": f"<pre>{_html_escape(instructions)}</pre>"}


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- reading Label Studio's JSON export -------------------------------------------------------------------------
def _annotator(who, where: str) -> str:
    if isinstance(who, dict):
        who = who.get("email") or who.get("id")
    if isinstance(who, str):
        who = who.strip()  # " ann@x.org" and "ann@x.org" are one annotator
    if isinstance(who, bool) or who in (None, ""):
        raise InputError(f"{where}: the annotation has no annotator (completed_by)")
    return f"user-{who}" if isinstance(who, int) else str(who)


def _value(result: dict, where: str) -> str:
    value = result.get("value")
    if not isinstance(value, dict):
        raise InputError(f"{where}: result {result.get('from_name')!r} has no value")
    if "choices" in value:
        picked = value["choices"]
        if not isinstance(picked, list) or len(picked) != 1:
            raise InputError(f"{where}: {result.get('from_name')!r} must have exactly one choice, got {picked!r}")
        return str(picked[0])
    if "rating" in value:
        return str(value["rating"])
    if "text" in value:
        text = value["text"]
        return "\n".join(map(str, text)) if isinstance(text, list) else str(text)
    raise InputError(f"{where}: result {result.get('from_name')!r} of type {result.get('type')!r} is not an answer "
                     f"this sheet asks for")


def read_export(path: Path) -> tuple[list[Submission], int]:
    """Submissions from a Label Studio JSON export, and how many annotations were skipped (cancelled)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: not a Label Studio JSON export (expected a list of tasks)")
    if data and isinstance(data[0], dict) and "data" not in data[0] and "task_id" in data[0]:
        raise InputError(f"{path}: a Label Studio JSON-MIN export (flat rows, no annotations): export the project "
                         "as JSON (the full format), which records who answered each task")
    out, cancelled = [], 0
    for n, task in enumerate(data, start=1):
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise InputError(f"{path}: entry {n}: not a Label Studio task (no 'data')")
        task_id = str(task["data"].get("task_id") or "")
        if not task_id:
            raise InputError(f"{path}: entry {n}: the task has no task_id (was it exported by `judge export`?)")
        for m, annotation in enumerate(task.get("annotations") or [], start=1):
            where = f"{path}: entry {n} (task {task_id}), annotation {m}"
            if annotation.get("was_cancelled"):
                cancelled += 1
                continue
            values = {}
            for result in annotation.get("result") or []:
                name = result.get("from_name")
                if not name:
                    raise InputError(f"{where}: a result has no from_name")
                answer = _value(result, where).strip()
                if answer:
                    values[name] = answer
            out.append(Submission(where, task_id, _annotator(annotation.get("completed_by"), where), values))
    return out, cancelled
