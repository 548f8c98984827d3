"""The real `judge score` CLI against a local OpenAI-compatible stub server that misbehaves on purpose.

Each test checks the run's contract: exit 0 only when complete, exactly one line per (id, system,
criterion), bounded retries, no request sent twice for an answer already obtained, and the API key never
written anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from stub_server import request_id

from judge.backends.local import free_port
from judge.cli import main
from judge.items import load_items
from judge.prompting import criterion_messages, gate_messages
from judge.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
RUBRIC = "call_centre_fr"  # 4 criteria, one gated: 16 judgments and 2 gate questions for the 4 examples
SECRET = "sk-test-secret-value"


def expected_keys(rubric: str, items_path: Path) -> set[tuple[str, str, str]]:
    r = load_rubric(rubric)
    return {(i.id, i.system, c.id) for c in r.criteria for i in load_items(items_path, r.inputs)}


def distinct_requests(rubric: str, items_path: Path) -> dict[str, tuple]:
    """request_id -> the judgment key (or gate) that asks it, for every first ask of a plan (seed 0)."""
    r = load_rubric(rubric)
    out = {}
    for c in r.criteria:
        for i in load_items(items_path, r.inputs):
            if c.gate is not None:
                out[request_id(gate_messages(r, c, i), 0)] = ("gate", i.id, c.id)
            out.setdefault(request_id(criterion_messages(r, c, i), 0), (i.id, i.system, c.id))
    return out


def read_lines(path: Path) -> list[dict]:
    """Every line of a results file as JSON. Only the last line, without its newline, may be cut (by a kill);
    any other line that is not UTF-8 JSON fails the test, so a corrupt extra line cannot go unseen."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: b"" when the file ends with a newline
    records = []
    for number, line in enumerate(complete, start=1):
        try:
            records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            pytest.fail(f"{path}:{number}: not a JSON line ({exc}): {line[:80]!r}")
    if tail:
        try:
            records.append(json.loads(tail.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass  # the last line, cut by a kill before its newline
    return records


def test_read_lines_fails_on_a_corrupt_line_and_keeps_only_a_cut_tail_apart(tmp_path):
    good = json.dumps({"id": "a"})
    path = tmp_path / "r.jsonl"
    path.write_bytes(f"{good}\n{good}\n".encode() + b'{"id": "b", "sc')
    assert read_lines(path) == [{"id": "a"}, {"id": "a"}]
    for corrupt in (b"\xff\xfe not utf-8\n", b'{"id": "half\n', b"\n"):
        path.write_bytes(f"{good}\n".encode() + corrupt + f"{good}\n".encode())
        with pytest.raises(pytest.fail.Exception):
            read_lines(path)


def score(base_url: str, tmp_path: Path, *extra: str, client: str = "aiohttp", items: Path = EXAMPLES,
          rubric: str = RUBRIC, output: str = "out.jsonl", cache: str = "cache") -> tuple[int, list[dict]]:
    out = tmp_path / output
    rc = main([
        "score", "--rubric", rubric, "--input", str(items), "--output", str(out),
        "--backend", "openai", "--base-url", base_url, "--model", "stub", "--client", client,
        "--cache", str(tmp_path / cache), "--no-progress", "--concurrency", "8", "--timeout", "2", *extra,
    ])
    return rc, read_lines(out) if out.exists() else []


def assert_complete(records: list[dict], keys: set) -> None:
    seen = [(r["id"], r["system"], r["criterion"]) for r in records]
    assert sorted(seen) == sorted(keys), "not exactly one line per (id, system, criterion)"
    for r in records:
        assert r["error"] is None, r
        assert r["score"] is not None and not r["na"], r


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# -- transient faults ------------------------------------------------------------------------------------
TRANSPORT = {  # kind -> per-request script: every distinct request sees the fault before its answer
    "429": [("429", 2)],
    "500": [("500", 2)],
    "garbage": [("garbage", 2)],
    "malformed": [("malformed", 1)],
    "hang": [("hang", 1)],
}


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("kind", sorted(TRANSPORT))
def test_transient_faults_are_retried_to_completion(stub_server, tmp_path, kind, client):
    stub_server.configure(faults=TRANSPORT[kind], per_key=True, hang_seconds=3.0)
    started = time.monotonic()
    rc, records = score(stub_server.base_url, tmp_path, "--timeout", "0.5", client=client)
    assert rc == 0
    assert_complete(records, expected_keys(RUBRIC, EXAMPLES))
    stats = stub_server.stats
    times = TRANSPORT[kind][0][1]
    # Every distinct question: `times` faults, then exactly one answer; never asked again once answered.
    assert set(stats.received.values()) == {times + 1}
    assert set(stats.answered.values()) == {1}
    assert len(stats.received) == len(distinct_requests(RUBRIC, EXAMPLES)) == 18
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("kind", ["truncated", "cut"])
def test_truncated_answers_are_asked_again(stub_server, tmp_path, kind):
    stub_server.configure(faults=[(kind, 6)])  # the first 6 answers are cut in half
    rc, records = score(stub_server.base_url, tmp_path)
    assert rc == 0
    assert_complete(records, expected_keys(RUBRIC, EXAMPLES))
    assert stub_server.stats.faults[kind] == 6
    assert stub_server.stats.total == 18 + 6  # each cut answer is re-asked once, with the complaint appended


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_a_server_that_always_fails_ends_with_errors_in_bounded_time(stub_server, tmp_path, client):
    stub_server.configure(faults=[("429", -1)], retry_after="0.01")
    started = time.monotonic()
    rc, records = score(stub_server.base_url, tmp_path, client=client)
    assert rc == 1
    keys = expected_keys(RUBRIC, EXAMPLES)
    assert sorted((r["id"], r["system"], r["criterion"]) for r in records) == sorted(keys)
    assert all(r["error"] and r["score"] is None for r in records)
    # Bounded: every distinct question tried exactly `attempts` (6) times; the gated criterion's 4 judgments
    # stop at their 2 gates.
    assert set(stub_server.stats.received.values()) == {6}
    assert len(stub_server.stats.received) == 18 - 4
    assert time.monotonic() - started < 10


def test_always_500_is_bounded_too(stub_server, tmp_path):
    stub_server.configure(faults=[("500", -1)])
    started = time.monotonic()
    rc, records = score(stub_server.base_url, tmp_path, "--criteria", "faithfulness")
    assert rc == 1 and len(records) == 4 and all("HTTP 500" in r["error"] for r in records)
    assert set(stub_server.stats.received.values()) == {6}
    assert time.monotonic() - started < 30  # exponential back-off with jitter, capped


def test_failed_judgments_are_retried_on_the_next_run(stub_server, tmp_path):
    stub_server.configure(faults=[("429", -1)], retry_after="0.01")
    assert score(stub_server.base_url, tmp_path, "--criteria", "faithfulness")[0] == 1
    stub_server.configure(faults=[])
    rc, records = score(stub_server.base_url, tmp_path, "--criteria", "faithfulness")
    assert rc == 0
    assert_complete(records, {k for k in expected_keys(RUBRIC, EXAMPLES) if k[2] == "faithfulness"})


# -- structured output fallback -----------------------------------------------------------------------------
@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_server_rejecting_json_schema_falls_back_to_json_object(stub_server, tmp_path, client):
    stub_server.configure(reject_json_schema=True)
    rc, records = score(stub_server.base_url, tmp_path, client=client)
    assert rc == 0
    assert_complete(records, expected_keys(RUBRIC, EXAMPLES))
    stats = stub_server.stats
    assert stats.rejected >= 1
    assert stats.formats["json_object"] >= 18
    # The step down is remembered: only requests built before the first refusal (at most the 2 x concurrency
    # workers' first asks) were sent with json_schema.
    assert stats.formats["json_schema"] <= 2 * 8 + 2
    # A rerun (fresh output, same cache) finds every answer in the cache, whatever format produced it.
    total = stats.total
    rc, again = score(stub_server.base_url, tmp_path, client=client, output="again.jsonl")
    assert rc == 0
    assert_complete(again, expected_keys(RUBRIC, EXAMPLES))
    assert stub_server.stats.total == total


def test_server_rejecting_both_json_modes_falls_back_to_text(stub_server, tmp_path):
    stub_server.configure(reject_json_schema=True, reject_json_object=True)
    rc, records = score(stub_server.base_url, tmp_path)
    assert rc == 0
    assert_complete(records, expected_keys(RUBRIC, EXAMPLES))
    assert stub_server.stats.formats["text"] >= 18


# -- deduplication and the cache ----------------------------------------------------------------------------
def test_identical_requests_in_one_plan_are_sent_once(stub_server, tmp_path):
    # Three systems with the same candidate for one dialogue: one question per criterion, one gate.
    base = json.loads(EXAMPLES.read_text(encoding="utf-8").splitlines()[0])
    items = tmp_path / "dupes.jsonl"
    items.write_text("".join(json.dumps({**base, "system": s}) + "\n" for s in ("a", "b", "c")), encoding="utf-8")
    stub_server.configure(latency_ms=50)  # keep the first ask in flight while the others arrive
    rc, records = score(stub_server.base_url, tmp_path, items=items)
    assert rc == 0
    assert_complete(records, expected_keys(RUBRIC, items))
    assert len(records) == 12
    assert stub_server.stats.total == 4 + 1
    assert set(stub_server.stats.received.values()) == {1}


def test_rerun_sends_no_request(stub_server, tmp_path):
    rc, first = score(stub_server.base_url, tmp_path)
    assert rc == 0 and stub_server.stats.total == 18
    # Same output: nothing left to do.
    assert score(stub_server.base_url, tmp_path)[0] == 0
    # Fresh output, same cache: every answer comes from the cache.
    rc, again = score(stub_server.base_url, tmp_path, output="again.jsonl")
    assert rc == 0
    assert_complete(again, expected_keys(RUBRIC, EXAMPLES))
    assert stub_server.stats.total == 18
    # Cached: no tokens spent, and each line says its answer came from the cache (drift refuses such a run).
    assert all(r["from_cache"] is True for r in again) and not any(r.get("from_cache") for r in first)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("usage", "from_cache")}  # noqa: E731
    assert sorted(map(json.dumps, map(strip, again))) == sorted(map(json.dumps, map(strip, first)))


# -- secrets ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_api_key_is_sent_but_never_written(stub_server, tmp_path, client):
    stub_server.configure(faults=[("cut", 2)])  # raw answers and re-asks go through the files too
    rc, _ = score(stub_server.base_url, tmp_path, client=client)
    assert rc == 0
    assert stub_server.stats.authorization == {f"Bearer {SECRET}"}
    written = [tmp_path / "out.jsonl", *(tmp_path / "cache").iterdir()]
    assert any(p.name == "answers.sqlite" for p in written)
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path


# -- a server that cannot serve the run: stop at once, say where and why, keep what is done ------------------------
@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_a_closed_port_stops_the_run_with_the_url(tmp_path, capsys, client):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nobody listens there
    started = time.monotonic()
    rc, records = score(url, tmp_path, client=client)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and records == []  # nothing half-done is written as a failure
    assert len(err) == 1 and err[0].startswith(f"judge score: error: the server at {url} cannot be used: ")
    assert "connection attempts in a row failed" in err[0]
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_a_refused_key_stops_the_run_and_the_echoed_key_is_never_written(stub_server, tmp_path, capsys, client):
    stub_server.configure(faults=[("401-echo", -1)])
    rc, records = score(stub_server.base_url, tmp_path, client=client)
    err = capsys.readouterr().err
    assert rc == 2 and "the API key was refused" in err and "HTTP 401" in err and stub_server.base_url in err
    assert SECRET not in err and records == []
    assert stub_server.stats.total <= 8 + 2  # the requests already in flight, not 6 tries x every judgment
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_an_unknown_model_stops_the_run_and_keeps_finished_judgments(stub_server, tmp_path, capsys):
    assert score(stub_server.base_url, tmp_path, "--criteria", "faithfulness")[0] == 0
    stub_server.configure(faults=[("404", -1)])
    rc, records = score(stub_server.base_url, tmp_path)  # more criteria: new requests meet the 404
    assert rc == 2 and "the model or URL is unknown" in capsys.readouterr().err
    assert {r["criterion"] for r in records} == {"faithfulness"} and len(records) == 4


# -- kill -9 and resume -------------------------------------------------------------------------------------
def synthetic_items(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for k in range(n):
            f.write(json.dumps({
                "id": f"call-{k}", "system": "sys", "lang": "en",
                "dialogue": f"A: hello, this is call {k}\nB: my bus pass number {k} does not work",
                "candidate": f"The caller's pass {k} does not work.",
            }) + "\n")
    return path


def stats_of(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.load(response)


@pytest.mark.slow
def test_kill_9_then_resume_sends_no_finished_request_again(stub_process, tmp_path):
    proc, base_url = stub_process("--latency-ms", "150")
    items = synthetic_items(tmp_path / "items.jsonl", 60)
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    concurrency = 4
    cmd = [sys.executable, "-m", "judge.cli", "score", "--rubric", "dialsummeval", "--input", str(items),
           "--output", str(out), "--criteria", "coherence,fluency", "--backend", "openai", "--base-url", base_url,
           "--model", "stub", "--cache", str(cache), "--no-progress", "--concurrency", str(concurrency)]
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    run = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 20):
        if run.poll() is not None:
            pytest.fail(f"the run ended before the kill (exit {run.returncode}): {run.stderr.read().decode()}")
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    run.wait()
    finished = {(r["id"], r["system"], r["criterion"]) for r in read_lines(out)}
    assert 20 <= len(finished) < 120, "the kill should land mid-run"

    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    records = read_lines(out)
    keys = expected_keys("dialsummeval", items)
    keys = {k for k in keys if k[2] in ("coherence", "fluency")}
    assert sorted((r["id"], r["system"], r["criterion"]) for r in records) == sorted(keys)
    assert all(r["error"] is None and r["score"] is not None for r in records)

    received = stats_of(base_url)["received"]
    by_key = {v: k for k, v in distinct_requests("dialsummeval", items).items()}
    assert all(received.get(by_key[k]) == 1 for k in finished), "a finished judgment was asked again"
    twice = [rid for rid, n in received.items() if n > 1]
    assert all(n <= 2 for n in received.values())
    assert len(twice) <= concurrency, "only the requests in flight at the kill may be sent again"
    assert sum(received.values()) == len(keys) + len(twice)


# -- which backend the environment selects ---------------------------------------------------------------------
def test_judge_base_urls_in_the_environment_selects_the_servers(stub_server, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_BASE_URLS", stub_server.base_url)
    rc = main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(tmp_path / "out.jsonl"),
               "--model", "stub", "--cache", str(tmp_path / "cache"), "--no-progress", "--criteria", "faithfulness"])
    assert rc == 0 and stub_server.stats.total == 4


def test_openai_base_url_alone_keeps_the_embedded_default_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    rc = main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(tmp_path / "out.jsonl"),
               "--model", str(tmp_path / "missing.gguf"), "--no-cache"])
    err = capsys.readouterr().err
    assert rc == 2 and "note: $OPENAI_BASE_URL is set, but without --backend openai" in err and "no such file" in err


def test_a_refused_key_never_reaches_the_terminal_of_a_real_process(stub_server, tmp_path):
    """The whole process's output, tracebacks and asyncio's own reports included, never shows the key."""
    stub_server.configure(faults=[("401-echo", -1)])
    done = subprocess.run(
        [sys.executable, "-m", "judge.cli", "score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output",
         str(tmp_path / "out.jsonl"), "--base-url", stub_server.base_url, "--model", "stub", "--no-cache"],
        env={**os.environ, "OPENAI_API_KEY": SECRET}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "the API key was refused" in done.stderr
    assert SECRET not in done.stderr + done.stdout
    # Progress, then the one error line: no traceback, no asyncio report of an unretrieved task.
    assert done.stderr.strip().splitlines()[-1].startswith("judge score: error: the server at ")
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
