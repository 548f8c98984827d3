"""A simulated annotator for the export/import round trip.

It decides its labels from the items file, per (dialogue, system, criterion[, segment]) — the truth — and fills a
sheet the way a person would: by reading the candidate text shown under each letter, never the key. Import must
then give back exactly the truth, unshuffled.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from judge.annotation.csvsheet import plain
from judge.items import load_items
from judge.rubric import load_rubric

NA = "N/A"


class Annotator:
    def __init__(self, rubric_name: str, items_path: Path, seed: int, careless: bool = False,
                 wrong_qualification: bool = False):
        self.rubric = load_rubric(rubric_name)
        self.items = load_items(items_path, self.rubric.inputs)
        self.rng = random.Random(seed)
        self.careless = careless  # answers repeated identical pairs with a preference instead of a tie
        self.wrong_qualification = wrong_qualification
        self.truth: dict[tuple, str] = {}  # (item_id, system, criterion) -> score token
        self.segment_truth: dict[tuple, list[str]] = {}
        self.why: dict[tuple, str] = {}
        self._decide()

    # -- the labels this annotator means to give ------------------------------------------------------------
    def _decide(self):
        no_sub_issue = {"call-bus-strike"}  # a call without sub-issue: sub_issues is N/A for all its summaries
        for item in self.items:
            for c in self.rubric.criteria:
                if not c.applies_to(item.fields):
                    continue
                key = (item.id, item.system, c.id)
                if c.scale.type == "preference":
                    identical = item.candidate_1.strip() == item.candidate_2.strip()
                    self.truth[key] = "0" if identical else self.rng.choice(["1", "2", "0"])
                elif c.per_segment:
                    segments = item.segments or [item.candidate]
                    answers = [self.rng.choice([str(v) for v in c.scale.values]) for _ in segments]
                    self.segment_truth[key] = answers
                    self.truth[key] = _mean(c, answers)
                elif c.gate and item.id in no_sub_issue:
                    self.truth[key] = NA
                else:
                    self.truth[key] = self.rng.choice([str(v) for v in c.scale.values])
                if c.explanations:
                    pick = self.rng.choice([*c.explanations, "other"])
                    self.why[key] = f"other: free words {self.rng.randint(1, 99)}" if pick == "other" else pick

    # -- reading a task as a person does --------------------------------------------------------------------
    def _qualification_answers(self, data: dict) -> dict[str, str]:
        q = next(q for q in self.rubric.qualification.items
                 if _same_candidates(q.model_extra, data, self.rubric.task == "pairwise"))
        answers = {}
        for criterion, expected in q.expected.items():
            answer = str(expected)
            if self.wrong_qualification:
                c = self.rubric.criterion(criterion)
                answer = next(str(v) for v in c.scale.values if abs(_num(v) - _num(expected)) > 1) \
                    if c.scale.type == "likert" else next(v for v in c.scale.values if v != str(expected))
            answers[criterion] = answer
        swapped = self.rubric.task == "pairwise" and data["candidate_1"] != q.model_extra["candidate_1"]
        if self.rubric.task == "pairwise":
            return {k: {"1": "2", "2": "1"}.get(v, v) if swapped else v for k, v in answers.items()}
        return {f"{k}_A": v for k, v in answers.items()}

    def answers(self, data: dict) -> dict[str, str]:
        """Answer cell -> answer, for one task's data as shown (candidate_A..., candidate_1/2)."""
        if data["section"] == "qualification":
            return self._qualification_answers(data)
        dialogue = data["dialogue"] if isinstance(data["dialogue"], str) else "\n".join(
            f"{t['speaker']}: {t['text']}" for t in data["dialogue"])
        if self.rubric.task == "pairwise":
            return self._pair_answers(data, dialogue)
        out = {}
        for name, text in data.items():
            if not name.startswith("candidate_") or name.count("_") != 1 or text in ("", "—"):
                continue
            letter = name.split("_")[1]
            item = next(i for i in self.items if i.dialogue_text == dialogue and i.candidate == text)
            for c in self.rubric.criteria:
                key = (item.id, item.system, c.id)
                if key not in self.truth:
                    continue
                if c.per_segment:
                    for n, answer in enumerate(self.segment_truth[key], start=1):
                        out[f"{c.id}_{letter}_{n}"] = answer
                else:
                    out[f"{c.id}_{letter}"] = self.truth[key]
                if key in self.why:
                    out[f"{c.id}_{letter}_why"] = self.why[key]
        return out

    def _pair_answers(self, data: dict, dialogue: str) -> dict[str, str]:
        first, second = data["candidate_1"], data["candidate_2"]
        if first == second and not any(i.candidate_1 == i.candidate_2 == first for i in self.items):
            # a repeated pair the export added: a careful annotator ties it
            return {c.id: ("1" if self.careless else "0") for c in self.rubric.criteria}
        for item in self.items:
            if item.dialogue_text != dialogue:
                continue
            if (item.candidate_1, item.candidate_2) == (first, second):
                flip = False
            elif (item.candidate_2, item.candidate_1) == (first, second):
                flip = True
            else:
                continue
            return {c.id: {"1": "2", "2": "1"}.get(v, v) if flip else v
                    for c in self.rubric.criteria for v in [self.truth[(item.id, item.system, c.id)]]}
        raise AssertionError(f"the simulated annotator cannot place task {data['task_id']}")

    # -- expected import output ------------------------------------------------------------------------------
    def expected_rows(self, annotator: str) -> set[tuple]:
        rows = set()
        for (item_id, system, criterion), score in self.truth.items():
            key = (item_id, system, criterion)
            segments = ";".join(self.segment_truth.get(key, []))
            rows.add((item_id, system, annotator, criterion, score, self.why.get(key, ""), segments))
        return rows


def _num(v) -> float:
    return float(v)


def _mean(c, answers: list[str]) -> str:
    numbers = [float(a) if c.scale.type == "likert" else c.scale.score_of(a) for a in answers]
    numbers = [n for n in numbers if n is not None]
    return f"{sum(numbers) / len(numbers):.6g}"


def _same_candidates(q: dict, data: dict, pairwise: bool) -> bool:
    if pairwise:
        return {q["candidate_1"], q["candidate_2"]} == {data["candidate_1"], data["candidate_2"]}
    return q["candidate"] == data.get("candidate_A")


# -- filling the two kinds of sheets ------------------------------------------------------------------------------
def fill_csv(sheet: Path, out: Path, annotators: dict[str, Annotator]) -> None:
    with sheet.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows, header = list(reader), reader.fieldnames
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        for name, who in annotators.items():
            for row in rows:
                filled = dict(row, annotator=name)
                data = {k: plain(v) for k, v in row.items()}  # as a spreadsheet shows it (no formula guard)
                for cell, answer in who.answers(data).items():
                    assert cell in header, f"{cell} is not a column of the sheet"
                    filled[cell] = answer
                writer.writerow(filled)


def fill_label_studio(tasks_json: Path, out: Path, annotators: dict[str, Annotator]) -> list[dict]:
    """A Label Studio JSON export: the imported tasks, each with one annotation per annotator."""
    tasks = json.loads(tasks_json.read_text(encoding="utf-8"))
    export = []
    for n, task in enumerate(tasks, start=1):
        annotations = []
        for m, (name, who) in enumerate(annotators.items(), start=1):
            result = []
            for cell, answer in who.answers(task["data"]).items():
                target = _target(cell, who.rubric)
                if cell.endswith("_why") and answer.startswith("other:"):
                    result.append(_choice(cell, target, "other"))
                    result.append({"from_name": cell.removesuffix("_why") + "_other", "to_name": target,
                                   "type": "textarea", "value": {"text": [answer.partition(":")[2].strip()]},
                                   "origin": "manual", "id": f"r{len(result)}"})
                else:
                    result.append(_choice(cell, target, answer))
            annotations.append({"id": n * 10 + m, "completed_by": {"id": m, "email": name}, "result": result,
                                "was_cancelled": False, "ground_truth": False, "task": n})
        export.append({"id": n, "data": task["data"], "annotations": annotations, "predictions": []})
    out.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    return export


def _choice(cell: str, target: str, answer: str) -> dict:
    return {"from_name": cell, "to_name": target, "type": "choices", "value": {"choices": [answer]},
            "origin": "manual", "id": f"{cell}-r"}


def _target(cell: str, rubric) -> str:
    if rubric.task == "pairwise":
        return "candidate_1"
    parts = cell.removesuffix("_why").split("_")
    if parts[-1].isdigit():
        return f"candidate_{parts[-2]}_{parts[-1]}"
    return f"candidate_{parts[-1]}"
