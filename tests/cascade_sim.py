"""A synthetic study for `judge escalate` with a judge it runs itself: items, the toy rubric, a cheap judge's
judgments and human labels, written into a folder. Used by tests/test_escalate_runs.py (80 dialogues) and
benchmarks/escalate_saving.py (larger, fewer labels), with the stub server (tests/stub_server.py) as the strong judge.

The cheap judge (3 samples per verdict) is unanimous and right on a share `confident` of the cells and hesitant and
wrong (two samples 2 points off) on the rest; the humans (one annotator) label a share `labelled` of the cells,
drawn one by one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

SYSTEMS = ("alpha", "beta", "gamma")
TOY_RUBRIC = Path(__file__).resolve().parents[1] / "examples" / "escalate" / "toy.yaml"


def write_study(folder: Path, dialogues: int, labelled: float = 0.5, confident: float = 0.6, seed: int = 5) -> Path:
    """items.jsonl, toy.yaml, small.jsonl and labels.csv in `folder` (made if needed); returns `folder`."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOY_RUBRIC, folder / "toy.yaml")
    items, small, labels = [], [], []
    for d in range(dialogues):
        item = f"d{d:04d}"
        for system in SYSTEMS:
            items.append({"id": item, "system": system, "candidate": f"summary {system} of chat {d}",
                          "dialogue": [{"speaker": "customer", "text": f"question number {d}"},
                                       {"speaker": "agent", "text": f"answer to {d}"}]})
            truth = int(rng.integers(1, 6))
            wrong = truth + 2 if truth <= 3 else truth - 2
            samples = [truth] * 3 if rng.random() < confident else [wrong, wrong, truth]
            small.append({"id": item, "system": system, "criterion": "clarity", "score": float(np.mean(samples)),
                          "samples": samples, "rubric": "toy@1", "model": "small-model", "backend": "openai",
                          "usage": {"prompt_tokens": 100, "completion_tokens": 5}})
            if rng.random() < labelled:
                labels.append({"item_id": item, "system": system, "annotator": "a1", "criterion": "clarity",
                               "score": truth})
    (folder / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    (folder / "small.jsonl").write_text("".join(json.dumps(s) + "\n" for s in small), encoding="utf-8")
    pd.DataFrame(labels).to_csv(folder / "labels.csv", index=False)
    return folder


def strong_options(folder: Path, url: str, **more) -> dict:
    """The strong judge's run options: the stub server through the OpenAI SDK, with logprobs (its confidence)."""
    return {"rubric": str(folder / "toy.yaml"), "input": str(folder / "items.jsonl"), "backend": "openai",
            "base_url": url, "client": "sdk", "model": "stub-large", "logprobs": True, "cache": str(folder / "cache"),
            "progress": False, **more}


def judged_cells(path: Path) -> set:
    return {(r["id"], r["system"]) for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
