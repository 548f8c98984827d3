"""`judge score|compare --dry-run`: the plan without calling a model. It counts the requests and rounds a run makes
(the gate's dependent round bounded by every gate saying yes), its input tokens (the embedded model's own tokenizer:
within 5% of what the real run records, a test below), the output-token bound and the cost at --prices; it writes
nothing and exits 0 with one JSON object as its last line."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from judge.cli import main
from judge.prices import Price, load_prices

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
PAIRS = ROOT / "examples" / "pairs.jsonl"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)


def hosted(tmp_path: Path, *extra: str, rubric: str = "call_centre_fr", verb: str = "score",
           items: Path = EXAMPLES) -> list[str]:
    return [verb, "--rubric", rubric, "--input", str(items), "--output", str(tmp_path / "out" / "j.jsonl"),
            "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "stub",
            "--cache", str(tmp_path / "cache"), "--no-progress", *extra]


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_gated_rubric_plans_two_rounds_and_writes_nothing(tmp_path, capsys):
    before = hashlib.sha256(EXAMPLES.read_bytes()).hexdigest()
    assert main(hosted(tmp_path, "--dry-run")) == 0
    out = capsys.readouterr().out
    plan = last_json(out)
    # 4 items x 3 ungated criteria + one gate per dialogue (2 dialogues) in round 1; the gated criterion's 4
    # questions in round 2 (every gate taken as yes): what tests/test_batch.py's batch run writes.
    assert (plan["requests"], plan["rounds"]) == (18, 2)
    assert plan["input_tokens_exact"] is False and "estimated" in plan["tokens"]  # no tokenizer for "stub" here
    assert plan["output_tokens_max"] > 0 and plan["cost"] is None
    assert "every gate said yes" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no cache, no output folder
    assert hashlib.sha256(EXAMPLES.read_bytes()).hexdigest() == before


def test_compare_plans_both_orders(tmp_path, capsys):
    assert main(hosted(tmp_path, "--dry-run", "--criteria", "faithfulness", rubric="pairwise_summary",
                       verb="compare", items=PAIRS)) == 0
    plan = last_json(capsys.readouterr().out)
    pairs = [json.loads(x) for x in PAIRS.read_text().splitlines()]
    distinct = sum(p["candidate_1"] != p["candidate_2"] for p in pairs)  # identical candidates tie unasked
    assert plan["requests"] == 2 * distinct and plan["rounds"] == 1


def test_finished_judgments_are_not_planned_again(stub_server, tmp_path, capsys):
    run = hosted(tmp_path, "--criteria", "faithfulness")
    run[run.index("--base-url") + 1] = stub_server.base_url
    assert main(run) == 0
    asked = stub_server.stats.total
    capsys.readouterr()
    assert main([*run, "--dry-run"]) == 0
    plan = last_json(capsys.readouterr().out)
    assert plan["requests"] == 0 and plan["already_done"] == 4
    assert stub_server.stats.total == asked == 4  # the dry run asked nothing


@pytest.mark.parametrize("stack", [False, True])
def test_cost_at_the_price_table_with_the_batch_and_cache_rule(tmp_path, capsys, stack):
    prices = tmp_path / "p" / "prices.json"
    prices.parent.mkdir()
    prices.write_text(json.dumps({"stub": {"input": 2.0, "cached_input": 0.5, "output": 8.0, "batch_discount": 0.5,
                                           "batch_cache_stack": stack}}))
    assert main(hosted(tmp_path, "--dry-run", "--prices", str(prices), "--batch-dir", str(tmp_path / "b"))) == 0
    plan = last_json(capsys.readouterr().out)
    assert not (tmp_path / "b").exists()
    prompt, cached, out = plan["input_tokens"], plan["cached_input_tokens"], plan["output_tokens_max"]
    assert 0 < cached < prompt
    cached_price = 0.5 if stack else 2.0  # without stacking, the batch bills cached tokens at its input price
    expected = ((prompt - cached) * 2.0 + cached * cached_price + out * 8.0) / 1e6 * 0.5
    assert plan["cost"] == pytest.approx(expected, rel=1e-6)


def test_prices_refuse_a_stack_rule_that_is_not_true_or_false(tmp_path):
    from judge.errors import JudgeError

    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"m": {"input": 1, "output": 1, "batch_cache_stack": "yes"}}))
    with pytest.raises(JudgeError, match="batch_cache_stack must be true or false, got 'yes'"):
        load_prices(path)
    assert Price(1.0, 1.0, 0.5, 0.5).cost(10, 10, 0, batch=True) == pytest.approx(10 / 1e6 * 0.5)


@pytest.mark.e2e
def test_embedded_model_tokens_within_5_percent_of_the_real_run(default_model, tmp_path, capsys):
    run = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--criteria", "coherence,fluency",
           "--output", str(tmp_path / "j.jsonl"), "--cache", str(tmp_path / "cache"), "--no-progress",
           "--concurrency", "2"]
    assert main([*run, "--dry-run"]) == 0
    plan = last_json(capsys.readouterr().out)
    assert not (tmp_path / "j.jsonl").exists()
    assert plan["input_tokens_exact"] is True
    assert main(run) == 0
    err = capsys.readouterr().err
    asked = int(re.search(r"(\d+) requests, (\d+) retries", err).group(1))
    recorded = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    prompt = sum(j["usage"]["prompt_tokens"] for j in recorded)
    print(f"dry run on the embedded model: {plan['requests']} requests, {plan['input_tokens']} input tokens; the run: "
          f"{asked} requests, {prompt} prompt tokens ({plan['input_tokens'] / prompt - 1:+.2%})")
    assert plan["requests"] == asked == len(recorded)
    assert abs(plan["input_tokens"] - prompt) <= 0.05 * prompt, (plan["input_tokens"], prompt)
