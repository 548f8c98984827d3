"""End to end: the real `judge` CLI against the real llama.cpp server (xllamacpp) with SmolLM2-135M.

The small model's verdicts are meaningless; these tests assert structure: every judgment parsed, lies on the
scale, and a rerun is served without calling the model.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from judge.backends import local
from judge.rubric import load_rubric

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = Path(__file__).parent.parent / "examples"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None,
                       reason="xllamacpp (the 'local' extra) is not installed"),
    pytest.mark.usefixtures("default_model"),
]


def judge(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "judge.cli", *args], capture_output=True, text=True, timeout=timeout)


def read(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_score_with_the_embedded_model_then_rerun_from_results(tmp_path):
    out, cache = tmp_path / "j.jsonl", tmp_path / "cache"
    args = ["score", "--rubric", "dialsummeval", "--input", str(FIXTURES / "chat_items.jsonl"), "--output", str(out),
            "--criteria", "coherence,consistency", "--cache", str(cache), "--concurrency", "2", "--no-progress"]
    first = judge(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    lines = read(out)
    assert sorted((l["id"], l["system"], l["criterion"]) for l in lines) == sorted(
        (i, s, c) for i, s in (("picnic", "faithful"), ("picnic", "wrong"), ("keys", "faithful"))
        for c in ("coherence", "consistency"))
    for line in lines:
        assert line["error"] is None and line["score"] in {1.0, 2.0, 3.0, 4.0, 5.0}
        assert line["backend"] == "local" and line["model"].startswith("SmolLM2-135M-Instruct")
        assert line["usage"]["prompt_tokens"] > 0
        # What the server says about itself, and what the backend adds: engine version, the model file's digest.
        assert line["served"]["engine"].startswith("llama.cpp (xllamacpp ")
        assert line["served"]["model_digest"] == local.MODEL_SHA256
        assert line["usage"]["cached_tokens"] is not None  # llama.cpp reports its prefix-cache reuse
    assert "judged 6 (0 from cache)" in first.stderr and "prefix-cache hit rate" in first.stderr

    again = judge(*args)
    # Everything is already in the results file: decided before the model is even loaded.
    assert again.returncode == 0 and f"nothing to do: all 6 judgments are in {out}" in again.stderr
    assert "starting the embedded" not in again.stderr
    assert len(read(out)) == 6

    # Same questions into a new file: answered from the cache, no model request.
    fresh = judge(*[a if a != str(out) else str(tmp_path / "k.jsonl") for a in args])
    assert fresh.returncode == 0 and "judged 6 (6 from cache)" in fresh.stderr and "; 0 requests" in fresh.stderr


def test_gated_criterion_and_logprob_scores_on_french_calls(tmp_path):
    out = tmp_path / "j.jsonl"
    result = judge("score", "--rubric", "call_centre_fr", "--input", str(EXAMPLES / "items.jsonl"),
                   "--output", str(out), "--criteria", "sub_issues,resolution", "--logprobs", "--no-cache",
                   "--concurrency", "2", "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = read(out)
    assert len(lines) == 8
    for line in lines:
        assert line["error"] is None
        if line["na"]:
            assert line["criterion"] == "sub_issues" and line["score"] is None
            continue
        assert 1.0 <= line["score"] <= 5.0
        assert line["probs"] is not None and sum(line["probs"].values()) == pytest.approx(1.0)
        assert line["score"] == pytest.approx(sum(int(k) * p for k, p in line["probs"].items()))
    # The gate answer is per dialogue: all candidates of a dialogue agree on N/A.
    for dialogue in {l["id"] for l in lines}:
        assert len({l["na"] for l in lines if l["id"] == dialogue and l["criterion"] == "sub_issues"}) == 1


def test_render_and_rubrics_need_no_model():
    shown = judge("rubrics", "call_centre_fr")
    assert shown.returncode == 0 and "sub_issues" in shown.stdout and "gate" in shown.stdout
    rendered = judge("render", "--rubric", "dialsummeval", "--input", str(FIXTURES / "chat_items.jsonl"), "--json")
    blocks = json.loads(rendered.stdout)
    assert [b["criterion"] for b in blocks] == [c.id for c in load_rubric("dialsummeval").criteria]


def test_bad_input_is_a_clear_one_line_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "dialogue": "a", "candidate": "b"}\n{"id": "y", "dialogue": "a"\n')
    result = judge("score", "--rubric", "dialsummeval", "--input", str(bad), "--output", str(tmp_path / "o.jsonl"))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"judge score: error: {bad}:2: "
                                     "not valid JSON (Expecting ',' delimiter at column 28)")
    assert "Traceback" not in result.stderr
