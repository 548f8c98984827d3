"""Several servers behind one client (judge/backends/pool.py), against real local HTTP servers.

The servers are tests/stub_server.py instances (threads, or processes that are killed mid-run): real sockets,
real connection failures. Each test checks that no judgment is lost or written twice and where requests went.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from stub_server import StubConfig, StubServer

from judge.backends.local import free_port
from judge.backends.openai_compat import HTTPClient
from judge.backends.pool import PoolClient
from judge.cli import main
from judge.errors import RetryableError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"


def body(k: int) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": f"question {k}"}], "temperature": 0,
            "max_tokens": 50, "seed": 0, "response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "strict": True, "schema": {"type": "object", "properties": {
                    "score": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["score"]}}}}


def pool_of(urls: list[str], concurrency: int, cool_down: float = 5.0) -> PoolClient:
    return PoolClient(urls, lambda url: HTTPClient(url, None, concurrency), concurrency, cool_down=cool_down)


def stats_of(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.load(response)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def stubs():
    started = []

    def start(n: int, **config) -> list[StubServer]:
        for _ in range(n):
            started.append(StubServer(StubConfig(**config)).start())
        return started[-n:]

    yield start
    for server in started:
        server.stop()


def test_requests_spread_over_servers_within_each_bound(stubs):
    servers = stubs(3, latency_ms=30)
    pool = pool_of([s.base_url for s in servers], concurrency=4)

    async def go():
        try:
            return await asyncio.gather(*(pool.complete(body(k), 5) for k in range(60)))
        finally:
            await pool.aclose()

    answers = asyncio.run(go())
    assert all(json.loads(a["content"]) == {"score": 1} for a in answers)
    counts = pool.stats()
    assert counts == {s.base_url: s.stats.total for s in servers}
    assert sum(counts.values()) == 60
    for s in servers:
        assert s.stats.max_in_flight <= 4, "a server got more than its own bound"
        assert s.stats.total >= 10, f"least-loaded choice should spread the load: {counts}"


def test_a_server_that_stops_answering_is_taken_out_and_its_requests_resent(stubs):
    healthy, hanging = stubs(1, latency_ms=20)[0], stubs(1, faults=[("hang", -1)], hang_seconds=30)[0]
    pool = pool_of([healthy.base_url, hanging.base_url], concurrency=4, cool_down=60)

    async def go():
        try:
            return await asyncio.gather(*(pool.complete(body(k), 0.5) for k in range(20)))
        finally:
            await pool.aclose()

    started = time.monotonic()
    answers = asyncio.run(go())
    assert len(answers) == 20 and all(a["finish_reason"] == "stop" for a in answers)
    # The first timeout takes the server out and re-sends everything it held: one timeout's wait, not one each.
    assert time.monotonic() - started < 5
    assert pool.stats() == {healthy.base_url: 20, hanging.base_url: 0}
    assert 1 <= hanging.stats.total <= 4, "only its first bound's worth of requests may have reached it"


def test_one_slow_answer_on_a_server_that_answers_others_does_not_take_it_out(stubs):
    slow, other = stubs(1, faults=[("hang", 1)], hang_seconds=5)[0], stubs(1)[0]
    pool = pool_of([slow.base_url, other.base_url], concurrency=4)

    async def go():
        try:
            first = await asyncio.gather(*(pool.complete(body(k), 1.0) for k in range(8)), return_exceptions=True)
            second = await asyncio.gather(*(pool.complete(body(k), 1.0) for k in range(8, 16)))
            return first, second
        finally:
            await pool.aclose()

    first, second = asyncio.run(go())
    timeouts = [r for r in first if isinstance(r, Exception)]
    assert len(timeouts) == 1 and isinstance(timeouts[0], RetryableError) and timeouts[0].kind == "timeout"
    assert len(second) == 8
    assert pool.stats()[slow.base_url] >= 3 + 2, "the slow answer's server kept serving in both rounds"


def test_every_server_out_raises_a_connection_error_naming_them():
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    pool = pool_of(urls, concurrency=2)

    async def go():
        try:
            with pytest.raises(RetryableError) as caught:
                await pool.complete(body(0), 2)
            return caught.value
        finally:
            await pool.aclose()

    error = asyncio.run(go())
    assert str(error).startswith("connection failed: every server is out")
    assert all(url in str(error) for url in urls) and error.kind == "connection"


def test_a_server_back_after_its_cool_down_is_used_again(stubs):
    port = free_port()
    first, second = stubs(1)[0], StubServer(port=port).start()
    pool = pool_of([first.base_url, second.base_url], concurrency=2, cool_down=0.3)

    async def go():
        await asyncio.gather(*(pool.complete(body(k), 2) for k in range(6)))
        second.stop()
        await asyncio.gather(*(pool.complete(body(k), 2) for k in range(6, 12)))
        assert pool.stats()[second.base_url] < 12 - pool.stats()[first.base_url] + 1
        back = StubServer(port=port).start()
        await asyncio.sleep(0.8)  # past the cool-down, counted from the failure
        await asyncio.gather(*(pool.complete(body(k), 2) for k in range(12, 30)))
        await pool.aclose()
        return back

    back = asyncio.run(go())
    try:
        assert sum(pool.stats().values()) == 30
        assert back.stats.total >= 3, "the restarted server should take its share again"
    finally:
        back.stop()


def synthetic_items(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for k in range(n):
            f.write(json.dumps({"id": f"d{k}", "system": "s", "dialogue": f"A: call {k}\nB: fine, refund done.",
                                "candidate": f"Call {k}: a refund."}) + "\n")
    return path


def test_judge_score_survives_a_server_killed_mid_run(stub_process, tmp_path, monkeypatch):
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    procs = [stub_process("--latency-ms", "80") for _ in range(3)]
    urls = [url for _, url in procs]
    items = synthetic_items(tmp_path / "items.jsonl", 40)
    out = tmp_path / "out.jsonl"
    victim, victim_url = procs[1]
    answered_before_kill = []

    def kill_when_busy():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            total = stats_of(victim_url)["total"]
            if total >= 5:
                answered_before_kill.append(total)
                victim.kill()
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    args = ["score", "--rubric", "dialsummeval", "--input", str(items), "--output", str(out),
            "--criteria", "coherence,fluency", "--backend", "openai", "--model", "stub", "--client", "aiohttp",
            "--no-cache", "--no-progress", "--concurrency", "3", "--timeout", "5"]
    for url in urls:
        args += ["--base-url", url]
    rc = main(args)
    killer.join()
    assert answered_before_kill, "the kill should land mid-run"
    assert rc == 0
    records = read_lines(out)
    keys = [(r["id"], r["system"], r["criterion"]) for r in records]
    assert len(keys) == len(set(keys)) == 80, "one line per judgment, none lost, none twice"
    assert all(r["error"] is None and r["score"] is not None for r in records)
    survivors = [stats_of(url)["total"] for url in (urls[0], urls[2])]
    assert sum(survivors) >= 80 - answered_before_kill[0], "the survivors answered everything else"
    assert all(n > 10 for n in survivors)


def test_base_urls_from_the_environment(stubs, tmp_path, monkeypatch):
    servers = stubs(2, latency_ms=20)
    monkeypatch.setenv("JUDGE_BASE_URLS", ",".join(s.base_url for s in servers))
    out = tmp_path / "out.jsonl"
    rc = main(["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(out),
               "--criteria", "coherence,fluency", "--backend", "openai", "--model", "stub", "--no-cache",
               "--no-progress", "--concurrency", "2"])
    assert rc == 0
    assert len(read_lines(out)) == 8
    assert all(s.stats.total >= 1 for s in servers) and sum(s.stats.total for s in servers) == 8


@pytest.mark.parametrize("urls, message", [
    (["http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"], "the same URL is given twice"),
])
def test_bad_base_urls(tmp_path, capsys, monkeypatch, urls, message):
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    out = tmp_path / "out.jsonl"
    out.write_text("")
    args = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(out),
            "--backend", "openai", "--model", "stub", "--no-cache", "--no-progress"]
    for url in urls:
        args += ["--base-url", url]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("judge score: error: --base-url") and message in err[0]
    assert out.read_text() == ""
