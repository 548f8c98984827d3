"""Every rubric end to end on the real llama.cpp server with SmolLM2-135M, through the real CLI.

The small model's verdicts are meaningless: these tests assert structure (every line parsed and on the scale,
abstentions kept as labels, pairs judged in both orders, segments scored, qualification reported).
"""

import json
import re
from pathlib import Path

import pytest
from test_e2e_local import FIXTURES, judge, pytestmark, read  # noqa: F401  (same skips: the local extra and model)

from judge.rubric import load_rubric


def run_ok(*args):
    result = judge(*args, "--no-cache", "--concurrency", "2", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_response_quality_labels_abstentions_and_explanations(tmp_path):
    out = tmp_path / "r.jsonl"
    run_ok("score", "--rubric", "response_quality", "--input", str(FIXTURES / "response_items.jsonl"),
           "--output", str(out))
    rubric = load_rubric("response_quality")
    lines = read(out)
    assert len(lines) == 3 * len(rubric.criteria)
    for line in lines:
        scale = rubric.criterion(line["criterion"]).scale
        label = next(c for c in scale.labels if c.value == line["label"])
        assert line["score"] == label.score  # None exactly for "I don't know"
        assert line["explanation"] in rubric.criterion(line["criterion"]).explanations + ["other"]


def test_compare_both_orders_identical_pair_and_position_bias(tmp_path):
    out = tmp_path / "p.jsonl"
    result = run_ok("compare", "--rubric", "pairwise_summary", "--input", str(FIXTURES / "pairs.jsonl"),
                    "--output", str(out))
    pairs = [json.loads(l) for l in (FIXTURES / "pairs.jsonl").read_text().splitlines()]
    lines = read(out)
    assert len(lines) == len(pairs) * 4
    identical = {p["id"] for p in pairs if p["candidate_1"] == p["candidate_2"]}
    for line in lines:
        assert line["label"] in {"1", "2", "0"} and line["error"] is None
        if line["id"] in identical:
            assert line["identical"] and line["label"] == "0" and line["usage"]["prompt_tokens"] == 0
        else:
            assert set(line["orders"]) == {"forward", "swapped"}
            assert line["order_disagreement"] == (line["orders"]["forward"] != line["orders"]["swapped"])
            assert line["label"] == ("0" if line["order_disagreement"] else line["orders"]["forward"])
    assert re.search(r"position bias \(verdict flipped with the order\): faithfulness \d+/\d+", result.stderr)


def test_csds_segments_given_or_split_and_qa_matching_only_for_overall(tmp_path):
    out = tmp_path / "c.jsonl"
    run_ok("score", "--rubric", "csds", "--input", str(FIXTURES / "csds_items.jsonl"), "--output", str(out),
           "--criteria", "fluency,qa_matching")
    items = {(i["id"], i["system"]): i
             for i in map(json.loads, (FIXTURES / "csds_items.jsonl").read_text().splitlines())}
    for line in read(out):
        item = items[(line["id"], line["system"])]
        if line["criterion"] == "qa_matching" and item.get("summary_type") != "overall":
            assert line["na"] and line["score"] is None
            continue
        assert line["segments"], line
        if item.get("segments"):
            assert [s["text"] for s in line["segments"]] == item["segments"]
        scores = [s["score"] for s in line["segments"] if s["score"] is not None]
        assert line["score"] == pytest.approx(sum(scores) / len(scores))
        assert 0 <= line["score"] <= 2 if line["criterion"] != "qa_matching" else 0 <= line["score"] <= 1


def test_block_mode_scores_every_candidate_of_a_dialogue_in_one_request(tmp_path):
    out = tmp_path / "b.jsonl"
    result = run_ok("score", "--rubric", "call_centre_fr",
                    "--input", str(Path(__file__).parent.parent / "examples" / "items.jsonl"),
                    "--output", str(out), "--criteria", "faithfulness", "--mode", "block", "--seed", "3")
    lines = read(out)
    assert len(lines) == 4 and all(1 <= l["score"] <= 5 and l["position"] in {"A", "B"} for l in lines)
    # Two dialogues, one block request each: every request beyond the two is a transport retry (counted apart).
    # A re-ask (an unusable answer asked again) would also be a third request, and fails this on purpose.
    requests, retries = map(int, re.search(r"; (\d+) requests, (\d+) retries;", result.stderr).groups())
    assert requests - retries == 2, result.stderr
    # ... and that one answer scored both candidates of its dialogue.
    by_dialogue = {}
    for l in lines:
        by_dialogue.setdefault(l["id"], []).append(l)
    assert len(by_dialogue) == 2 and all(len(v) == 2 for v in by_dialogue.values())
    for dialogue in {l["id"] for l in lines}:
        assert sorted(l["position"] for l in lines if l["id"] == dialogue) == ["A", "B"]


def test_qualify_reports_per_criterion_agreement_and_a_verdict(tmp_path):
    result = judge("qualify", "--rubric", "dialsummeval", "--no-cache", "--concurrency", "2", "--no-progress",
                   "--output", str(tmp_path / "q.jsonl"))
    assert result.returncode in (0, 1), result.stderr[-3000:]
    for criterion in ("coherence", "consistency", "fluency", "relevance"):
        assert re.search(rf"^{criterion}\s+\d+/3\s+\d+%\s+(pass|FAIL)$", result.stdout, flags=re.M), result.stdout
    verdict = "PASSES" if result.returncode == 0 else "FAILS"
    assert f"judge {verdict} the dialsummeval qualification" in result.stdout
    assert len(read(tmp_path / "q.jsonl")) == 12
