"""Writes examples/escalate/: an invented cascade of two judges under the toy rubric, for `judge escalate`.

120 chats x 3 systems, criterion clarity (1-5). `small.jsonl`: a cheap judge with 3 samples per verdict (its
confidence: the share of samples that agree), right mostly when its samples agree; `large.jsonl`: a stronger judge
with the probability of its verdict recorded (`probs`, as `--logprobs` writes it) and token usage. `labels.csv`: two
annotators on the first 60 chats (the calibration set). Deterministic: `python benchmarks/escalate_example.py`.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "escalate"
SYSTEMS = ("alpha", "beta", "gamma")


def _judgment(item, system, score, samples, probs, tokens, model):
    return {"id": item, "system": system, "criterion": "clarity", "score": float(score), "label": None, "na": False,
            "samples": samples, "spread": float(np.std(samples, ddof=1)) if len(samples) > 1 else None,
            "probs": probs, "rationale": "invented", "explanation": None, "rubric": "toy@1", "model": model,
            "backend": "openai", "prompt_sha": "00000000",
            "usage": {"prompt_tokens": tokens, "completion_tokens": 4 * len(samples)}, "error": None}


def main() -> None:
    rng = np.random.default_rng(23)
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "examples" / "study" / "toy.yaml", OUT / "toy.yaml")
    small, large, labels = [], [], []
    for d in range(120):
        item = f"c{d:03d}"
        for system in SYSTEMS:
            truth = int(rng.integers(1, 6))
            # the cheap judge: its 3 samples agree on the truth when the summary is easy, scatter when hard
            easy = rng.random() < 0.6
            if easy:
                samples = [truth] * 3 if rng.random() < 0.93 else [int(np.clip(truth + rng.choice([-2, 2]), 1, 5))] * 3
            else:
                samples = [int(np.clip(truth + rng.integers(-2, 3), 1, 5)) for _ in range(3)]
            small.append(_judgment(item, system, np.mean(samples), samples, None, 300, "small-model"))
            # the large judge: right 85% of the time, confident mostly when right
            right = rng.random() < 0.85
            verdict = truth if right else int(np.clip(truth + rng.choice([-2, -1, 1, 2]), 1, 5))
            top = float(np.clip(rng.beta(8, 2) if right else rng.beta(3, 3), 0.2, 0.99))
            probs = {str(p): (top if p == verdict else (1 - top) / 4) for p in range(1, 6)}
            large.append(_judgment(item, system, verdict, [verdict], probs, 900, "large-model"))
            if d < 60:
                for annotator in ("ann_a", "ann_b"):
                    noisy = truth if rng.random() < 0.85 else int(np.clip(truth + rng.choice([-1, 1]), 1, 5))
                    labels.append({"item_id": item, "system": system, "annotator": annotator,
                                   "criterion": "clarity", "score": noisy})
    for name, rows in (("small.jsonl", small), ("large.jsonl", large)):
        (OUT / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with (OUT / "labels.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["item_id", "system", "annotator", "criterion", "score"])
        writer.writeheader()
        writer.writerows(labels)
    print(f"wrote {OUT}: {len(small)} cells per judge, {len(labels)} labels")


if __name__ == "__main__":
    main()
