"""Snapshots of the exact messages each rubric renders: a prompt change is a visible, reviewed diff.

Prompts are part of every cache key and of what a judge's agreement with humans was measured on, so they
must not change by accident. Regenerate after an intended change with JUDGE_UPDATE_SNAPSHOTS=1.
"""

import json
import os
from pathlib import Path

import pytest

from judge.items import load_items
from judge.judging import block_letters
from judge.prompting import block_messages, criterion_messages, gate_messages, segment_messages
from judge.rubric import available_rubrics, load_rubric

HERE = Path(__file__).parent
FIXTURES = {
    "dialsummeval": HERE / "fixtures" / "chat_items.jsonl",
    "call_centre_fr": HERE.parent / "examples" / "items.jsonl",
    "response_quality": HERE / "fixtures" / "response_items.jsonl",
    "pairwise_summary": HERE / "fixtures" / "pairs.jsonl",
    "csds": HERE / "fixtures" / "csds_items.jsonl",
}


def rendered(name: str) -> dict:
    rubric = load_rubric(name)
    items = load_items(FIXTURES[name], rubric.inputs)
    item = items[0]
    out = {}
    for c in rubric.criteria:
        if c.gate:
            out[f"{c.id}/gate"] = gate_messages(rubric, c, item)
        if c.per_segment:
            segment = item.segments[0] if item.segments else "segment text"
            out[c.id] = criterion_messages(rubric, c, item, segment=segment, segment_number=1)
        else:
            out[c.id] = criterion_messages(rubric, c, item)
        if rubric.task == "summary" and not c.per_segment:
            group = [i for i in items if i.id == item.id]
            out[f"{c.id}/block"] = block_messages(rubric, c, group, block_letters(len(group)))
    if rubric.segment_instructions:
        out["split"] = segment_messages(rubric, item)
    return out


def test_every_rubric_has_a_fixture():
    assert set(available_rubrics()) == set(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_rendered_messages_match_snapshot(name):
    path = HERE / "snapshots" / f"{name}.json"
    current = rendered(name)
    if os.environ.get("JUDGE_UPDATE_SNAPSHOTS"):
        path.write_text(json.dumps(current, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    assert path.is_file(), f"no snapshot for {name}: run with JUDGE_UPDATE_SNAPSHOTS=1 and review the file"
    assert current == json.loads(path.read_text(encoding="utf-8"))
