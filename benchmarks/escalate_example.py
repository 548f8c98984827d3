"""Writes examples/escalate/: an invented cascade of two judges under the toy rubric, for `judge escalate`.

120 chats x 3 systems, criterion clarity (1-5). `small.jsonl`: a cheap judge with 3 samples per verdict (its
confidence: the share of samples that agree), right mostly when its samples agree; `large.jsonl`: a stronger judge
with the probability of its verdict recorded (`probs`, as `--logprobs` writes it) and token usage. `labels.csv`: two
annotators on the first 60 chats (the calibration set). `items.jsonl`: the chats and summaries themselves (invented
text), and `large.toml`: the large judge as run options, for `judge escalate` to run it itself on the cells the
cascade needs from it. Deterministic: `python benchmarks/escalate_example.py`.
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


LARGE_TOML = """\
# The strong judge of the cascade as the options of a `judge score` run (the keys are its flags, underscored or
# not): `judge escalate --judge large=examples/escalate/large.toml` runs it itself, on the cells the cascade needs
# from it only, into OUTPUT_DIR/large.jsonl. Paths are read from this file's folder. No server is named: give it
# with escalate's --base-url (or $JUDGE_BASE_URLS); without model, the embedded model would judge.
rubric = "toy.yaml"
input = "items.jsonl"
model = "large-model"
logprobs = true
"""
ISSUES = ["a parcel that did not arrive", "a double charge on the last bill", "a password that no longer works",
          "a delivery date to move", "a broken phone screen under warranty", "a subscription to cancel"]
FIXES = ["the parcel will be resent tomorrow", "the second charge will be refunded", "a reset link was sent",
         "the delivery moves to Friday", "a repair is booked for Monday", "the subscription ends this month"]
NAMES = ["Ana", "Bilal", "Chen", "Dora", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun"]


def _items() -> list[dict]:
    """The chats c000-c119 and their three summaries: alpha faithful, beta with the wrong outcome, gamma sloppy."""
    import random

    rng = random.Random(7)
    rows = []
    for d in range(120):
        k, who, case = rng.randrange(len(ISSUES)), NAMES[d % len(NAMES)], f"case {1000 + 7 * d}"
        dialogue = [{"speaker": "customer", "text": f"hello, this is {who}, I am calling about {ISSUES[k]} ({case})."},
                    {"speaker": "agent", "text": f"let me check {case} for you."},
                    {"speaker": "agent", "text": f"done: {FIXES[k]}."},
                    {"speaker": "customer", "text": "thank you, goodbye."}]
        candidates = {"alpha": f"{who} called about {ISSUES[k]} ({case}); {FIXES[k]}.",
                      "beta": f"Customer call, {ISSUES[k]}, agent said {FIXES[(k + 1) % len(FIXES)]}.",
                      "gamma": f"{case}: about {ISSUES[k]} ... {FIXES[k]} maybe"}
        rows += [{"id": f"c{d:03d}", "system": s, "dialogue": dialogue, "candidate": c} for s, c in candidates.items()]
    return rows


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
    (OUT / "large.toml").write_text(LARGE_TOML, encoding="utf-8")
    for name, rows in (("small.jsonl", small), ("large.jsonl", large), ("items.jsonl", _items())):
        (OUT / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with (OUT / "labels.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["item_id", "system", "annotator", "criterion", "score"])
        writer.writeheader()
        writer.writerows(labels)
    print(f"wrote {OUT}: {len(small)} cells per judge, {len(labels)} labels")


if __name__ == "__main__":
    main()
