"""The items the audit's probes send to the judge (calibration.trust.probes.probe_items) are the user's item lines
with only the candidate changed: no field the user left out appears (as null), none is lost, in both modes.
Written after the seed-12 draw of benchmarks/mutation.py let `model_dump(exclude_none=True)` lose its flag."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from calibration.trust.probes import perturb, probe_items
from judge.items import load_items

ITEMS = Path(__file__).resolve().parents[1] / "examples" / "items.jsonl"


@pytest.mark.parametrize("mode, probe", [("pointwise", "filler"), ("pointwise", "attribution"), ("block", "filler")])
def test_a_probes_items_are_the_users_lines_with_only_the_candidate_changed(mode, probe):
    lines = {(r["id"], r.get("system", "default")): r for r in
             (json.loads(line) for line in ITEMS.read_text(encoding="utf-8").splitlines() if line.strip())}
    items = load_items(ITEMS)
    judge = pd.DataFrame({"item_id": [i.id for i in items], "system": [i.system for i in items], "status": "ok"})
    records, keys = probe_items(items, judge, probe, 4, 0, mode)
    assert records and keys
    changed = 0
    for record in records:
        original = lines[(record["id"], record.get("system", "default"))]
        assert set(record) == set(original)
        assert {k: v for k, v in record.items() if k != "candidate"} == \
            {k: v for k, v in original.items() if k != "candidate"}
        assert record["candidate"] in (original["candidate"], perturb(original["candidate"], probe))
        changed += record["candidate"] != original["candidate"]
    assert changed == (len(records) if mode == "pointwise" else len({r["id"] for r in records}))


@pytest.mark.parametrize("mode", ["pointwise", "block"])
@pytest.mark.parametrize("sample", [3, 1000])
def test_a_probe_perturbs_distinct_candidates_and_at_most_all_of_them(mode, sample):
    """The sample is drawn without replacement: `sample` distinct candidates (block mode: dialogues), all of them
    when it asks for more than there are."""
    items = load_items(ITEMS)
    judge = pd.DataFrame({"item_id": [i.id for i in items], "system": [i.system for i in items], "status": "ok"})
    records, keys = probe_items(items, judge, "filler", sample, 0, mode)
    if mode == "pointwise":
        assert len(keys) == len(set(keys)) == min(sample, len(items)) == len(records)
    else:
        dialogues = [r["id"] for r in records]
        chosen = list(dict.fromkeys(dialogues))
        assert len(chosen) == min(sample, len({i.id for i in items}))
        assert sorted(dialogues) == sorted(i.id for i in items if i.id in chosen)  # each chosen block once, whole


@pytest.mark.parametrize("task, mode", [("pairwise", "score"), ("pairwise", "pairwise"), ("score", "pairwise")])
def test_probes_are_refused_for_pairs_whichever_side_says_so(task, mode):
    """A pairwise rubric, or judgments of pairs (a CSV of "A|B" systems judged with another rubric's name), is
    refused before any request."""
    from types import SimpleNamespace

    from calibration.errors import CalibrationError
    from calibration.trust.probes import check_probes

    with pytest.raises(CalibrationError, match="compares pairs"):
        check_probes(["filler"], SimpleNamespace(task=task, name="r"), mode)
    check_probes(["filler"], SimpleNamespace(task="score", name="r"), "score")  # what probes are for
