"""Writes examples/pairwise/: the invented pairwise study that the README's pairwise loop and `judge estimate
--help` run on (deterministic; rerun after changing the export or import format).

24 invented customer chats; four systems: `lead-3` (the baseline), `bart`, `pegasus`, `llama-7b`; on each chat every
system is compared with the baseline, plus one pair of the others (96 pairs). `judgments.jsonl`: the verdicts of an
invented judge on faithfulness and informativeness (both orders; it agrees with the annotator's latent preference
most of the time, and favours the summary shown first). `filled/sheet.csv`: `judge export --format csv
--no-qualification` of `pairs.jsonl`, filled by one annotator on 10 chats drawn at random; `labels.csv`: what
`judge import` makes of it.

    python benchmarks/pairwise_example.py
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "pairwise"
SYSTEMS = ["lead-3", "bart", "pegasus", "llama-7b"]
QUALITY = {"lead-3": 0.0, "bart": 0.5, "pegasus": -0.4, "llama-7b": 1.3}
CRITERIA = ["faithfulness", "informativeness"]
TOPICS = ["a late parcel", "a double charge", "a broken kettle", "a change of address", "a lost password",
          "a cancelled flight", "a wrong pizza", "a gym membership", "a phone upgrade", "a missing refund",
          "a noisy fridge", "a hotel booking", "a train delay", "a library fine", "a dentist appointment",
          "a water leak", "a car rental", "a concert ticket", "an insurance claim", "a bike repair",
          "a school trip", "a parking permit", "a laptop warranty", "a mobile data cap"]
STYLE = {"lead-3": "The customer calls about {t}. The agent answers. The call ends.",
         "bart": "The customer reports {t}; the agent checks the account and promises a fix within {d} days.",
         "pegasus": "Customer has {t}. Agent say fix in {d} day, maybe refund.",
         "llama-7b": "A customer calls about {t}. The agent finds the cause, offers a fix within {d} days and "
                     "confirms by e-mail."}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def main() -> int:
    from judge.cli import main as judge

    rng = np.random.default_rng(7)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "filled").mkdir(exist_ok=True)
    pairs = []
    for d, topic in enumerate(TOPICS):
        days = int(rng.integers(2, 9))
        dialogue = (f"Customer: Hello, I am calling about {topic}.\nAgent: I am sorry to hear that, let me check.\n"
                    f"Agent: I see the problem. It will be fixed within {days} days and I will confirm by e-mail.\n"
                    "Customer: Thank you.")
        matches = [(s, "lead-3") for s in SYSTEMS[1:]]
        i, j = rng.choice(3, 2, replace=False)
        matches.append((SYSTEMS[1:][i], SYSTEMS[1:][j]))
        for a, b in matches:
            if rng.random() < 0.5:
                a, b = b, a
            pairs.append({"id": f"chat-{d + 1:02d}", "system_1": a, "system_2": b, "dialogue": dialogue,
                          "candidate_1": STYLE[a].format(t=topic, d=days),
                          "candidate_2": STYLE[b].format(t=topic, d=days)})
    with (OUT / "pairs.jsonl").open("w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair) + "\n")
    # the latent preference of the annotator per pair and criterion; the judge sees it through noise
    latent = {}
    with (OUT / "judgments.jsonl").open("w", encoding="utf-8") as handle:
        for pair in pairs:
            for criterion in CRITERIA:
                gap = QUALITY[pair["system_1"]] - QUALITY[pair["system_2"]] + rng.normal(0, 0.8)
                latent[(pair["id"], pair["system_1"], pair["system_2"], criterion)] = gap

                def verdict(shown_first_gap):
                    x = shown_first_gap + rng.normal(0, 0.9) + 0.4  # the first shown is favoured
                    return "1" if x > 0.5 else ("2" if x < -0.5 else "0")

                forward = verdict(gap)
                swapped = {"1": "2", "2": "1", "0": "0"}[verdict(-gap)]
                handle.write(json.dumps({
                    "id": pair["id"], "system": f"{pair['system_1']}|{pair['system_2']}",
                    "system_1": pair["system_1"], "system_2": pair["system_2"], "criterion": criterion,
                    "score": None, "label": forward if forward == swapped else "0", "na": False,
                    "rubric": "pairwise_summary@1", "model": "invented-judge-70b",
                    "orders": {"forward": forward, "swapped": swapped},
                    "order_disagreement": forward != swapped}) + "\n")
    with tempfile.TemporaryDirectory() as scratch:
        sheets = Path(scratch) / "sheets"
        assert judge(["export", "--rubric", "pairwise_summary", "--input", str(OUT / "pairs.jsonl"), "--format", "csv",
                      "--no-qualification", "--output", str(sheets)]) == 0
        key = json.loads((sheets / "key.json").read_text())
        tasks = {t["task_id"]: t for t in key["tasks"]}
        chosen = {f"chat-{d + 1:02d}" for d in rng.choice(len(TOPICS), 10, replace=False)}
        with (sheets / "sheet.csv").open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        for row in rows:
            task = tasks[row["task_id"]]
            row["annotator"] = "ann1"  # the chats not drawn stay blank
            if task["kind"] == "check":
                for criterion in CRITERIA:
                    row[criterion] = "0"
                continue
            if task["item_id"] not in chosen:
                continue
            first, second = task["system"].split("|")
            for criterion in CRITERIA:
                gap = latent[(task["item_id"], first, second, criterion)]
                vote = "1" if gap > 0.4 else ("2" if gap < -0.4 else "0")  # in the judgments' order
                if task["swapped"]:
                    vote = {"1": "2", "2": "1", "0": "0"}[vote]  # as shown on the sheet
                row[criterion] = vote
        with (OUT / "filled" / "sheet.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        assert judge(["import", "--from", str(OUT / "filled" / "sheet.csv"), "--key", str(sheets / "key.json"),
                      "--output", str(Path(scratch) / "labels.csv")]) == 0
        (OUT / "labels.csv").write_bytes((Path(scratch) / "labels.csv").read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
