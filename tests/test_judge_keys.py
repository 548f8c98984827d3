"""What makes an answer or a batch another one: the model. A cache key or a batch run's identity without it would
serve one model's answers as another's (both bugs were once planted without a test failing)."""

from __future__ import annotations

import json
from pathlib import Path

from judge.cli import main

ITEMS = Path(__file__).resolve().parents[1] / "examples" / "study" / "items.jsonl"


def _score(*flags: str) -> int:
    return main(["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--criteria", "coherence",
                 "--backend", "openai", "--no-progress", *flags])


def test_the_cache_key_names_the_model(stub_server, tmp_path):
    cache = ["--cache", str(tmp_path / "cache"), "--base-url", stub_server.base_url]
    assert _score("--output", str(tmp_path / "a.jsonl"), "--model", "model-a", *cache) == 0
    asked = stub_server.stats.total
    assert _score("--output", str(tmp_path / "b.jsonl"), "--model", "model-b", *cache) == 0
    assert stub_server.stats.total - asked == 48  # another model: every question asked, none from the cache
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert not any(line.get("from_cache") for line in lines)
    assert _score("--output", str(tmp_path / "a2.jsonl"), "--model", "model-a", *cache) == 0
    assert stub_server.stats.total - asked == 48  # the first model again: all from the cache


def test_a_batch_folder_belongs_to_one_model(tmp_path, capsys):
    batch = ["--batch-dir", str(tmp_path / "batches"), "--output", str(tmp_path / "out.jsonl")]
    assert _score("--model", "model-a", *batch) == 3  # shards written: the run waits for their answers (exit 3)
    before = {p.name: p.read_bytes() for p in (tmp_path / "batches").iterdir()}
    capsys.readouterr()
    assert _score("--model", "model-b", *batch) == 2
    assert "holds the batch files of another command" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (tmp_path / "batches").iterdir()} == before
