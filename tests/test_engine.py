"""Engine logic: aggregation of samples and labels, abstention, the once-per-dialogue gate, deduplication.

The transport here is a scripted in-process client (the `ChatClient` protocol), standing in for HTTP so that
each answer can be chosen per test; the real HTTP clients are exercised against a real server in
test_faults.py and against llama.cpp in test_e2e_local.py.
"""

import asyncio
import json

import pytest

from judge.cache import AnswerCache
from judge.engine import Engine, ResultsFile, Settings
from judge.items import Item
from judge.rubric import Rubric, load_rubric


class ScriptedClient:
    name = "scripted"

    def __init__(self, answer):
        self.answer = answer  # body -> content string
        self.bodies = []

    async def complete(self, body, timeout):
        self.bodies.append(body)
        await asyncio.sleep(0)
        return {"content": self.answer(body), "finish_reason": "stop", "logprobs": None,
                "usage": {"prompt_tokens": 10, "completion_tokens": 2}}

    async def aclose(self):
        pass


def verdict_key(body):
    return next(iter(k for k in body["response_format"]["json_schema"]["schema"]["properties"] if k != "rationale"))


def items(*dialogues, systems=("a", "b", "c")):
    return [Item(id=f"d{i}", system=s, dialogue=d, candidate=f"summary {s} of {d}")
            for i, d in enumerate(dialogues) for s in systems]


def run(client, rubric, criteria, item_list, tmp_path, **settings):
    engine = Engine(client, Settings(model="m", **settings), AnswerCache(tmp_path / "cache"))
    results = ResultsFile(tmp_path / "out.jsonl", rubric.ref, "m")
    tally = asyncio.run(engine.run(rubric, criteria, item_list, results, progress=False))
    results.close()
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    return tally, lines


def test_gate_is_asked_once_per_dialogue_and_no_makes_every_candidate_na(tmp_path):
    rubric = load_rubric("call_centre_fr")
    no_sub_issue = "A: when is the next bus?\nB: in five minutes"
    has_sub_issue = "A: when is the next bus? and is the line accessible?\nB: in five minutes, and yes"

    def answer(body):
        key = verdict_key(body)
        text = body["messages"][-1]["content"]
        if key == "answer":
            return json.dumps({"rationale": "r", "answer": "yes" if "accessible" in text else "no"})
        return json.dumps({"rationale": "r", "score": 4})

    client = ScriptedClient(answer)
    tally, lines = run(client, rubric, [rubric.criterion("sub_issues")], items(no_sub_issue, has_sub_issue), tmp_path)
    gates = [b for b in client.bodies if verdict_key(b) == "answer"]
    assert len(gates) == 2  # one per dialogue, not one per candidate
    by_dialogue = {}
    for line in lines:
        by_dialogue.setdefault(line["id"], []).append(line)
    assert all(l["na"] and l["score"] is None and l["error"] is None for l in by_dialogue["d0"])
    assert all(not l["na"] and l["score"] == 4.0 for l in by_dialogue["d1"])
    assert (tally.na, tally.judged, tally.failed) == (3, 3, 0)


def test_samples_are_averaged_with_spread(tmp_path):
    rubric = load_rubric("dialsummeval")
    scores = {0: 2, 1: 4, 2: 3}
    client = ScriptedClient(lambda body: json.dumps({"rationale": "r", "score": scores[body["seed"]]}))
    _, [line] = run(client, rubric, [rubric.criterion("fluency")], items("A: hi", systems=("a",)), tmp_path,
                    samples=3, temperature=1.0)
    assert line["samples"] == [2, 4, 3] and line["score"] == pytest.approx(3.0) and line["spread"] == pytest.approx(1.0)


ABSTAIN_RUBRIC = {
    "name": "toy", "version": "1", "language": "en", "task": "response", "title": "t", "instructions": "i",
    "inputs": ["dialogue", "candidate"],
    "criteria": [{"id": "correctness", "name": "Correctness", "definition": "d", "explanations": ["typo", "wrong fact"],
                  "scale": {"type": "categorical", "labels": [
                      {"value": "correct", "meaning": "m", "score": 1}, {"value": "not correct", "meaning": "m", "score": 0},
                      {"value": "I don't know", "meaning": "m", "abstain": True}]}}],
}


def test_abstention_is_a_label_never_a_number_and_majority_label_wins(tmp_path):
    rubric = Rubric.model_validate(ABSTAIN_RUBRIC)
    answers = {"a": ["I don't know"] * 3, "b": ["correct", "not correct", "not correct"]}

    def answer(body):
        system = "a" if "summary a of" in body["messages"][-1]["content"] else "b"
        return json.dumps({"rationale": "r", "label": answers[system][body["seed"]], "explanation": "typo"})

    _, lines = run(ScriptedClient(answer), rubric, rubric.criteria, items("A: hi", systems=("a", "b")), tmp_path,
                   samples=3, temperature=1.0)
    by_system = {l["system"]: l for l in lines}
    assert by_system["a"]["label"] == "I don't know" and by_system["a"]["score"] is None and not by_system["a"]["na"]
    assert by_system["b"]["label"] == "not correct" and by_system["b"]["score"] == 0.0
    assert by_system["b"]["explanation"] == "typo"


def test_identical_requests_in_one_plan_are_sent_once(tmp_path):
    rubric = load_rubric("dialsummeval")
    same = [Item(id="d0", system=s, dialogue="A: hi", candidate="identical text") for s in "abcd"]
    client = ScriptedClient(lambda body: json.dumps({"rationale": "r", "score": 5}))
    tally, lines = run(client, rubric, [rubric.criterion("coherence")], same, tmp_path, concurrency=4)
    assert len(client.bodies) == 1 and len(lines) == 4 and all(l["score"] == 5.0 for l in lines)


def test_unparseable_answers_are_reasked_then_recorded_with_raw_text(tmp_path):
    rubric = load_rubric("dialsummeval")
    client = ScriptedClient(lambda body: "I think it is quite good")
    tally, [line] = run(client, rubric, [rubric.criterion("coherence")], items("A: hi", systems=("a",)), tmp_path,
                        reasks=2)
    assert len(client.bodies) == 3  # first ask + 2 re-asks, each carrying the parser's complaint
    assert "cannot be used" in client.bodies[1]["messages"][-1]["content"]
    assert line["score"] is None and "no usable answer after 3 asks" in line["error"]
    assert line["raw"] == "I think it is quite good" and tally.failed == 1


def test_results_file_resume_rules(tmp_path):
    path = tmp_path / "out.jsonl"
    ok = {"id": "d0", "system": "a", "criterion": "coherence", "rubric": "dialsummeval@1", "model": "m", "error": None}
    failed = {**ok, "system": "b", "error": "boom"}
    path.write_text(json.dumps(ok) + "\n" + json.dumps(failed) + "\n" + json.dumps(ok) + "\n" + '{"id": "d0", "sys')
    results = ResultsFile(path, "dialsummeval@1", "m")
    results.close()
    assert set(results.done) == {("d0", "a", "coherence")}
    assert path.read_text().splitlines() == [json.dumps(ok)]  # failed, duplicate and torn lines removed
    from judge.errors import OutputError
    with pytest.raises(OutputError, match="not 'dialsummeval@1' with 'other-model'"):
        ResultsFile(path, "dialsummeval@1", "other-model")
