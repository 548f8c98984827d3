"""Engine logic: aggregation of samples and labels, abstention, the once-per-dialogue gate, deduplication.

The transport here is a scripted in-process client (the `ChatClient` protocol), standing in for HTTP so that
each answer can be chosen per test; the real HTTP clients are exercised against a real server in
test_faults.py and against llama.cpp in test_e2e_local.py.
"""

import asyncio
import json

import pytest

from judge.cache import AnswerCache
from judge.engine import Engine
from judge.items import Item
from judge.results import ResultsFile
from judge.rubric import Rubric, load_rubric
from judge.settings import Settings


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
    engine = Engine(client, Settings(model="m", **settings), AnswerCache(tmp_path / "cache"), rubric)
    results = ResultsFile(tmp_path / "out.jsonl")
    plan = engine.plan(criteria, item_list)
    results.start()
    tally = asyncio.run(engine.run(plan, results, progress=False))
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
                      {"value": "correct", "meaning": "m", "score": 1},
                      {"value": "not correct", "meaning": "m", "score": 0},
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
    assert by_system["a"]["abstained"] is True and by_system["b"]["abstained"] is False
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


def test_block_shows_every_candidate_in_a_seeded_shuffle_and_unshuffles_the_answers(tmp_path):
    rubric = load_rubric("dialsummeval")
    group = [Item(id="d0", system=f"sys{n}", dialogue="A: hi", candidate=f"candidate text number {n}")
             for n in range(6)]
    shown_orders = []

    def answer(body):
        # Score each letter by the number in the candidate text it labels: un-shuffling must map it back.
        text = body["messages"][-1]["content"]
        letters = list(body["response_format"]["json_schema"]["schema"]["properties"])
        numbers = [int(text.split(f"<<<CANDIDATE {k} ")[1].split("number ")[1][0]) for k in letters]
        shown_orders.append(numbers)
        return json.dumps({k: {"rationale": "r", "score": n % 5 + 1} for k, n in zip(letters, numbers)})

    client = ScriptedClient(answer)
    _, lines = run(client, rubric, [rubric.criterion("coherence")], group, tmp_path, mode="block", seed=7)
    assert len(client.bodies) == 1  # one request for the whole dialogue
    assert sorted(shown_orders[0]) == list(range(6)) and shown_orders[0] != list(range(6))  # shuffled
    assert [l["system"] for l in lines] == [f"sys{n}" for n in range(6)]  # output in the input's order
    assert all(l["score"] == n % 5 + 1 for n, l in enumerate(lines))
    letters = {l["system"]: l["position"] for l in lines}
    assert sorted(letters.values()) == list("ABCDEF")
    assert sum(l["usage"]["prompt_tokens"] for l in lines) == 10  # the block's tokens are counted once

    # The same seed gives the same order; another seed another order.
    client2 = ScriptedClient(answer)
    (tmp_path / "again").mkdir()
    run(client2, rubric, [rubric.criterion("coherence")], group, tmp_path / "again", mode="block", seed=7)
    assert shown_orders[1] == shown_orders[0]
    (tmp_path / "other").mkdir()
    run(ScriptedClient(answer), rubric, [rubric.criterion("coherence")], group, tmp_path / "other", mode="block",
        seed=8)
    assert shown_orders[2] != shown_orders[0]


def test_block_missing_candidate_is_reasked_then_fails_every_line(tmp_path):
    rubric = load_rubric("dialsummeval")
    group = [Item(id="d0", system=s, dialogue="A: hi", candidate=f"text {s}") for s in "xyz"]
    client = ScriptedClient(lambda body: json.dumps({"A": {"rationale": "r", "score": 3}}))
    tally, lines = run(client, rubric, [rubric.criterion("fluency")], group, tmp_path, mode="block", reasks=1)
    assert len(client.bodies) == 2 and tally.failed == 3
    assert all("no entry for candidates ['B', 'C']" in l["error"] for l in lines)


PAIRWISE = {
    "name": "pairs", "version": "1", "language": "en", "task": "pairwise", "title": "t", "instructions": "i",
    "inputs": ["dialogue", "candidate_1", "candidate_2"], "template": "pairwise.j2",
    "criteria": [{"id": "faithfulness", "name": "Faithfulness", "definition": "d", "scale": {"type": "preference"}}],
}


def pair(pid, one, two):
    return Item(id=pid, dialogue="source", candidate_1=one, candidate_2=two, system_1="x", system_2="y")


def test_pairwise_both_orders_identical_tie_and_position_bias(tmp_path):
    rubric = Rubric.model_validate(PAIRWISE)

    def answer(body):
        text = body["messages"][-1]["content"]
        first = text.split("Summary 1:")[1].split("Summary 2:")[0]
        if "GOOD" in text and "BIASED" not in text:
            return json.dumps({"rationale": "r", "label": "1" if "GOOD" in first else "2"})
        return json.dumps({"rationale": "r", "label": "1"})  # always prefers the first position

    client = ScriptedClient(answer)
    items = [pair("p-consistent", "bad one", "GOOD one"), pair("p-biased", "BIASED a", "BIASED b"),
             pair("p-same", "Same  text.", "Same text.")]
    tally, lines = run(client, rubric, rubric.criteria, items, tmp_path, mode="pairwise")
    by_id = {l["id"]: l for l in lines}
    assert by_id["p-consistent"]["label"] == "2" and not by_id["p-consistent"]["order_disagreement"]
    assert by_id["p-consistent"]["orders"] == {"forward": "2", "swapped": "2"}
    assert by_id["p-biased"]["label"] == "0" and by_id["p-biased"]["order_disagreement"]
    assert by_id["p-same"]["label"] == "0" and by_id["p-same"]["identical"]
    assert by_id["p-same"]["system"] == "x|y"
    assert len(client.bodies) == 4  # two orders for each of two pairs; the identical pair costs nothing
    assert tally.both_orders["faithfulness"] == 2 and tally.flipped["faithfulness"] == 1
    assert "faithfulness 1/2 (50%)" in tally.line()

    (tmp_path / "noswap").mkdir()
    client = ScriptedClient(answer)
    _, lines = run(client, rubric, rubric.criteria, items[:2], tmp_path / "noswap", mode="pairwise", swap=False)
    assert len(client.bodies) == 2 and all("order_disagreement" not in l for l in lines)


def test_pairwise_probs_from_samples_and_from_logprobs_in_the_inputs_order(tmp_path):
    """`probs` ("1", "2", "0" in the input's order, over both orders) is what `judge escalate` reads as the
    verdict's probability: the samples' shares with --samples > 1, the verdict token's probabilities with
    --logprobs; a swapped answer's "1" is the input's "2"."""
    import math

    rubric = Rubric.model_validate(PAIRWISE)
    by_seed = {0: "1", 1: "2", 2: "1"}  # the label shown first wins in seeds 0 and 2, whichever the order

    def sampled(body):
        return json.dumps({"rationale": "r", "label": by_seed[body["seed"]]})

    _, [line] = run(ScriptedClient(sampled), rubric, rubric.criteria, [pair("p", "one", "two")], tmp_path,
                    mode="pairwise", samples=3, temperature=1.0)
    # forward 1, 2, 1; swapped 1, 2, 1 read back as 2, 1, 2: three "1" and three "2" in six samples
    assert line["samples"] == ["1", "2", "1", "2", "1", "2"]
    assert line["probs"] == pytest.approx({"0": 0.0, "1": 0.5, "2": 0.5})

    class LogprobClient(ScriptedClient):
        async def complete(self, body, timeout):
            head, content = '{"rationale": "r", "label": "', '{"rationale": "r", "label": "1"}'
            verdict = {"token": "1", "logprob": math.log(0.7), "top_logprobs": [
                {"token": "1", "logprob": math.log(0.7)}, {"token": "2", "logprob": math.log(0.2)},
                {"token": "0", "logprob": math.log(0.1)}]}
            tokens = [{"token": head, "logprob": 0.0, "top_logprobs": []}, verdict,
                      {"token": '"}', "logprob": 0.0, "top_logprobs": []}]
            return {"content": content, "finish_reason": "stop", "logprobs": tokens,
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2}}

    (tmp_path / "lp").mkdir()
    _, [line] = run(LogprobClient(None), rubric, rubric.criteria, [pair("p", "one", "two")], tmp_path / "lp",
                    mode="pairwise", logprobs=True)
    # forward: 1 at 0.7, 2 at 0.2; swapped read back: 2 at 0.7, 1 at 0.2; the mean over the two orders
    assert line["label"] == "0" and line["order_disagreement"]
    assert line["probs"] == pytest.approx({"0": 0.1, "1": 0.45, "2": 0.45})

    (tmp_path / "plain").mkdir()
    _, [line] = run(ScriptedClient(sampled), rubric, rubric.criteria, [pair("p", "one", "two")], tmp_path / "plain",
                    mode="pairwise")
    assert line.get("probs") is None  # one sample per order and no log-probabilities: the order signal instead


SEGMENTED = {
    "name": "seg", "version": "1", "language": "en", "task": "summary", "title": "t", "instructions": "i",
    "inputs": ["dialogue", "candidate"], "segment_instructions": "one segment per topic",
    "criteria": [
        {"id": "fluency", "name": "Fluency", "definition": "d", "per_segment": True,
         "scale": {"type": "likert", "points": [{"value": v, "label": "l", "meaning": "m"} for v in (0, 1, 2)]}},
        {"id": "qa_matching", "name": "QA matching", "definition": "d", "per_segment": True,
         "only_when": {"summary_type": ["overall"]},
         "scale": {"type": "categorical", "labels": [{"value": "matched", "meaning": "m", "score": 1},
                                                     {"value": "mismatched", "meaning": "m", "score": 0}]}},
    ],
}


def test_segments_given_or_split_once_and_only_when(tmp_path):
    rubric = Rubric.model_validate(SEGMENTED)

    def answer(body):
        props = body["response_format"]["json_schema"]["schema"]["properties"]
        if "segments" in props:
            return json.dumps({"segments": ["topic one.", "topic two.", "topic three."]})
        segment = body["messages"][-1]["content"].split("<<<SEGMENT ")[1].split(">>>\n")[1].split("\n")[0]
        if "label" in props:
            return json.dumps({"rationale": "r", "label": "mismatched" if "two" in segment else "matched"})
        return json.dumps({"rationale": "r", "score": 2 if "one" in segment else 1})

    items = [Item(id="d0", system="given", dialogue="A: hi", candidate="topic one. topic two.", summary_type="overall",
                  segments=["topic one.", "topic two."]),
             Item(id="d0", system="split", dialogue="A: hi", candidate="topic one. topic two. topic three.",
                  summary_type="overall"),
             Item(id="d0", system="user-side", dialogue="A: hi", candidate="topic one.", summary_type="user",
                  segments=["topic one."])]
    client = ScriptedClient(answer)
    _, lines = run(client, rubric, rubric.criteria, items, tmp_path)
    got = {(l["system"], l["criterion"]): l for l in lines}
    splits = [b for b in client.bodies if "segments" in b["response_format"]["json_schema"]["schema"]["properties"]]
    assert len(splits) == 1  # only the candidate without segments, once for both criteria
    assert got[("given", "fluency")]["samples"] == [2.0, 1.0] and got[("given", "fluency")]["score"] == 1.5
    assert got[("split", "fluency")]["score"] == pytest.approx(4 / 3)
    assert got[("split", "qa_matching")]["score"] == pytest.approx(2 / 3)  # the matching rate
    assert [s["label"] for s in got[("split", "qa_matching")]["segments"]] == ["matched", "mismatched", "matched"]
    assert got[("user-side", "qa_matching")]["na"] and got[("user-side", "qa_matching")]["score"] is None
    assert got[("user-side", "fluency")]["score"] == 2.0


def test_a_criterion_whose_every_verdict_is_the_same_is_warned_about(tmp_path):
    rubric = load_rubric("dialsummeval")
    constant = ScriptedClient(lambda body: json.dumps({"rationale": "r", "score": 3}))
    tally, _ = run(constant, rubric, [rubric.criterion("coherence")], items("A: hi", "B: yo"), tmp_path)
    assert len(tally.warnings()) == 1 and "every coherence verdict is 3.0" in tally.warnings()[0]
    varied = ScriptedClient(lambda body: json.dumps(
        {"rationale": "r", "score": 2 + ("summary a of" in body["messages"][-1]["content"])}))
    tally, _ = run(varied, rubric, [rubric.criterion("coherence")], items("C: hi", "D: yo"), tmp_path / "v")
    assert tally.warnings() == []
