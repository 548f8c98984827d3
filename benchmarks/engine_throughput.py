"""Engine throughput against a local OpenAI-compatible stub, next to a bare AsyncOpenAI + Semaphore loop.

The stub (tests/stub_server.py) runs in its own process, so only the client's CPU is measured
(time.process_time of this process). For each latency, with the same requests at the same concurrency:

  engine/aiohttp   judge.engine.Engine with the aiohttp client and the SQLite cache (the `judge score` path)
  engine/sdk       the same with the AsyncOpenAI client
  bare SDK         AsyncOpenAI + asyncio.Semaphore + json.loads of the content, request bodies pre-built
                   (no rendering, no cache, no retries, no results file): the floor to beat
  bare aiohttp     the same loop on aiohttp: what this machine and stub allow with no engine work at all
  cached rerun     engine/aiohttp again on the same cache with a fresh output file: time / first run's time
  same command     the first run's command again, same output file (what `judge score` does on a rerun)

    python benchmarks/engine_throughput.py [--judgments 2000] [--concurrency 64] [--latencies 0,50]
                                           [--profile]   # cProfile of engine/aiohttp at the first latency

Then the client CPU of each step of a judgment, measured alone.

Targets: at 0 ms at least 1.9x the bare SDK loop's throughput and a cache-only rerun into a fresh output <= 0.2x the
first run; at 50 ms and C=64 at least 0.95 of the bare aiohttp loop (what this machine and stub allow).
Start-up times (a whole `judge` process) are in benchmarks/startup.py.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import io
import json
import pstats
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import openai  # noqa: E402

from judge.answers import AnswerFormat  # noqa: E402
from judge.backends.openai_compat import HTTPClient, SDKClient  # noqa: E402
from judge.cache import AnswerCache, request_key  # noqa: E402
from judge.engine import Engine  # noqa: E402
from judge.items import load_items  # noqa: E402
from judge.judgment import Judgment  # noqa: E402
from judge.prompting import criterion_messages  # noqa: E402
from judge.results import ResultsFile  # noqa: E402
from judge.rubric import load_rubric  # noqa: E402
from judge.settings import Settings  # noqa: E402

RUBRIC = "dialsummeval"  # 4 criteria, no gate: one request per judgment
MODEL = "stub"


def write_items(path: Path, n: int, prefix: str) -> Path:
    """n items with distinct dialogues of a realistic length (~1.2 kB) and short candidates."""
    with path.open("w", encoding="utf-8") as f:
        for k in range(n):
            turns = [{"speaker": "agent" if t % 2 else "customer",
                      "text": f"turn {t} of call {prefix}{k}: my monthly pass was charged twice and I need a refund"}
                     for t in range(14)]
            f.write(json.dumps({"id": f"{prefix}{k}", "system": "sys", "dialogue": turns,
                                "candidate": f"Customer {k} was charged twice for a monthly pass; "
                                             "the agent refunds it."})
                    + "\n")
    return path


def start_server(script: str, *flags: str) -> tuple[subprocess.Popen, str]:
    """A test server (tests/SCRIPT: the stub chat server or the Batch API one) in its own process, and its URL."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / script), "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"{script} did not start: {line!r}")
    return proc, line.split()[-1]


def start_stub(latency_ms: float) -> tuple[subprocess.Popen, str]:
    return start_server("stub_server.py", "--latency-ms", str(latency_ms))


def stub_total(base_url: str) -> int:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.load(response)["total"]


class Measure:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def run_engine(kind: str, base_url: str, items_path: Path, workdir: Path, concurrency: int, cache_dir: Path,
               output: Path, profile: cProfile.Profile | None = None) -> tuple[Measure, int]:
    rubric = load_rubric(RUBRIC)
    items = load_items(items_path, rubric.inputs)
    settings = Settings(model=MODEL, concurrency=concurrency, timeout=60)
    cache = AnswerCache(cache_dir)
    results = ResultsFile(output)
    client = HTTPClient(base_url, "sk-bench", concurrency) if kind == "aiohttp" else SDKClient(base_url, "sk-bench")

    async def go():
        engine = Engine(client, settings, cache, rubric)
        plan = engine.plan(rubric.criteria, items)
        results.start()
        try:
            return await engine.run(plan, results, progress=False)
        finally:
            await client.aclose()

    if profile:
        profile.enable()
    with Measure() as m:
        tally = asyncio.run(go())
    if profile:
        profile.disable()
    results.close()
    cache.close()
    if tally.failed:
        raise SystemExit(f"engine/{kind}: {tally.failed} judgments failed: {tally.errors}")
    return m, tally.judged


def run_same_command(base_url: str, items_path: Path, cache_dir: Path, output: Path, concurrency: int) -> Measure:
    """Re-running `judge score` with the same output: load items and the results file, find nothing to do."""
    with Measure() as m:
        rubric = load_rubric(RUBRIC)
        items = load_items(items_path, rubric.inputs)
        cache = AnswerCache(cache_dir)
        results = ResultsFile(output)
        client = HTTPClient(base_url, "sk-bench", concurrency)

        async def go():
            engine = Engine(client, Settings(model=MODEL, concurrency=concurrency, timeout=60), cache, rubric)
            plan = engine.plan(rubric.criteria, items)
            assert not results.check(plan).stale
            results.start()
            try:
                return await engine.run(plan, results, progress=False)
            finally:
                await client.aclose()

        tally = asyncio.run(go())
        results.close()
        cache.close()
    assert tally.already_done == tally.planned, "the rerun found work to do"
    return m


def bodies(items_path: Path) -> list[dict]:
    """The engine's exact request bodies (json_schema response_format, seed, temperature, max_tokens)."""
    rubric = load_rubric(RUBRIC)
    items = load_items(items_path, rubric.inputs)
    engine = Engine(None, Settings(model=MODEL), None, rubric)  # only for its request bodies
    out = []
    for c in rubric.criteria:
        fmt = AnswerFormat.for_criterion(c)
        for item in items:
            out.append(engine.asker.body(criterion_messages(rubric, c, item), fmt, 0))
    return out


def run_bare_sdk(base_url: str, requests: list[dict], concurrency: int) -> tuple[Measure, int]:
    async def go():
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
        semaphore = asyncio.Semaphore(concurrency)
        scores = []

        async def one(body):
            async with semaphore:
                response = await client.chat.completions.create(**body, timeout=60)
            scores.append(json.loads(response.choices[0].message.content))

        try:
            await asyncio.gather(*(one(b) for b in requests))
        finally:
            await client.close()
        return len(scores)

    with Measure() as m:
        done = asyncio.run(go())
    return m, done


def run_bare_aiohttp(base_url: str, requests: list[dict], concurrency: int) -> tuple[Measure, int]:
    """The same loop on aiohttp: the ceiling of this machine and stub, with no engine work at all."""
    async def go():
        semaphore = asyncio.Semaphore(concurrency)
        url = base_url + "/chat/completions"
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
            async def one(body):
                async with semaphore:
                    async with session.post(url, data=json.dumps(body), headers=headers) as response:
                        text = await response.text()
                return json.loads(json.loads(text)["choices"][0]["message"]["content"])

            return len(await asyncio.gather(*(one(b) for b in requests)))

    with Measure() as m:
        done = asyncio.run(go())
    return m, done


def breakdown(tmp: Path, n_items: int) -> None:
    """Client CPU of each step of one judgment, measured alone (µs per judgment)."""
    rubric = load_rubric(RUBRIC)
    items = load_items(write_items(tmp / "breakdown.jsonl", n_items, "b-"), rubric.inputs)
    pairs = [(c, i) for c in rubric.criteria for i in items]
    engine = Engine(None, Settings(model=MODEL), None, rubric)
    criterion_messages(rubric, pairs[0][0], pairs[0][1])  # compile the template
    cache = AnswerCache(tmp / "breakdown-cache")
    results = ResultsFile(tmp / "breakdown-out.jsonl")
    results.start()
    completion = {"content": '{"rationale": "ok", "score": 1}', "finish_reason": "stop", "logprobs": None,
                  "usage": {"prompt_tokens": 700, "completion_tokens": 9}}
    record = Judgment(id=pairs[0][1].id, system=pairs[0][1].system, criterion=pairs[0][0].id, score=1.0,
                      rubric=rubric.ref, model=MODEL, fingerprint=engine.judge.fingerprint(*pairs[0]))
    state: dict = {}
    steps = [
        ("render (criterion_messages, Jinja sandbox)",
         lambda: state.__setitem__("messages", [criterion_messages(rubric, c, i) for c, i in pairs])),
        ("request body (Asker.body)", lambda: state.__setitem__("bodies", [
            engine.asker.body(m, AnswerFormat.for_criterion(c), 0) for m, (c, _) in zip(state["messages"], pairs)])),
        ("fingerprint (Judge.fingerprint, item digest cached)",
         lambda: [engine.judge.fingerprint(c, i) for c, i in pairs]),
        ("request_key (sorted json.dumps + sha256)",
         lambda: state.__setitem__("keys", [request_key(b) for b in state["bodies"]])),
        ("json.dumps(body) in HTTPClient", lambda: [json.dumps(b) for b in state["bodies"]]),
        ("prompt_sha (json.dumps + sha256)", lambda: [
            hashlib.sha256(json.dumps(m, ensure_ascii=False).encode()).hexdigest() for m in state["messages"]]),
        ("cache.put (SQLite, one commit each)", lambda: [cache.put(k, completion) for k in state["keys"]]),
        ("cache.get (SQLite + json.loads)", lambda: [cache.get(k) for k in state["keys"]]),
        ("AnswerFormat.parse", lambda: [AnswerFormat.for_criterion(c).parse(completion["content"]) for c, _ in pairs]),
        ("ResultsFile.write (Judgment.to_line + flush)", lambda: [results.write(record) for _ in pairs]),
    ]
    print("\nclient CPU per judgment, each step alone:")
    for name, step in steps:
        started = time.process_time()
        step()
        print(f"  {name:<44} {1e6 * (time.process_time() - started) / len(pairs):7.1f} µs")
    cache.close()
    results.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judgments", type=int, default=2000, help="judgments per measurement (default 2000)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latencies", default="0,50", help="stub latencies in ms, comma-separated (default 0,50)")
    p.add_argument("--profile", action="store_true", help="cProfile engine/aiohttp at the first latency")
    args = p.parse_args(argv)
    n_items = max(1, args.judgments // len(load_rubric(RUBRIC).criteria))
    C = args.concurrency
    print(f"{n_items * 4} judgments per run, concurrency {C}, client CPU = time.process_time of this process; "
          f"stub in its own process")
    print(f"{'latency':>7}  {'configuration':<16} {'wall s':>7} {'judg/s':>8} {'CPU ms/judg':>11} "
          f"{'vs bare':>8} {'of C/L':>7}")
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="judge-bench-") as tmp:
        tmp = Path(tmp)
        for latency in (float(x) for x in args.latencies.split(",")):
            proc, base_url = start_stub(latency)
            try:
                tag = f"l{int(latency)}-"
                # One distinct item set per configuration: nothing is shared through the server or the cache.
                sets = {name: write_items(tmp / f"items-{tag}{name}.jsonl", n_items, f"{tag}{name}-")
                        for name in ("warmup", "aiohttp", "sdk", "bare")}
                run_engine("aiohttp", base_url, sets["warmup"], tmp, C, tmp / f"{tag}warm-cache",
                           tmp / f"{tag}warm.jsonl")  # imports, first connections, template compilation
                requests = bodies(sets["bare"])
                bare, n_bare = run_bare_sdk(base_url, requests, C)
                bare_aio, n_bare_aio = run_bare_aiohttp(base_url, requests, C)
                profile = (cProfile.Profile() if args.profile and latency == float(args.latencies.split(",")[0])
                           else None)
                aio, n_aio = run_engine("aiohttp", base_url, sets["aiohttp"], tmp, C, tmp / f"{tag}aio-cache",
                                        tmp / f"{tag}aio.jsonl", profile)
                sent = stub_total(base_url)
                cached, n_cached = run_engine("aiohttp", base_url, sets["aiohttp"], tmp, C, tmp / f"{tag}aio-cache",
                                              tmp / f"{tag}aio-rerun.jsonl")
                same = run_same_command(base_url, sets["aiohttp"], tmp / f"{tag}aio-cache", tmp / f"{tag}aio.jsonl", C)
                resent = stub_total(base_url) - sent
                sdk, n_sdk = run_engine("sdk", base_url, sets["sdk"], tmp, C, tmp / f"{tag}sdk-cache",
                                        tmp / f"{tag}sdk.jsonl")
            finally:
                proc.kill()
                proc.wait()
            ideal = C / (latency / 1000) if latency else None
            bare_rate = n_bare / bare.wall
            for name, m, n in (("engine/aiohttp", aio, n_aio), ("engine/sdk", sdk, n_sdk), ("bare SDK", bare, n_bare),
                            ("bare aiohttp", bare_aio, n_bare_aio)):
                rate = n / m.wall
                of_ideal = f"{rate / ideal:7.2f}" if ideal else f"{'-':>7}"
                print(f"{latency:5.0f}ms  {name:<16} {m.wall:7.2f} {rate:8.0f} {1000 * m.cpu / n:11.3f} "
                      f"{rate / bare_rate:8.2f} {of_ideal}")
            ratio = cached.wall / aio.wall
            print(f"{latency:5.0f}ms  {'cached rerun':<16} {cached.wall:7.2f} {n_cached / cached.wall:8.0f} "
                  f"{1000 * cached.cpu / n_cached:11.3f}   {ratio:.3f}x the first run; {resent} requests sent")
            same_ratio = same.wall / aio.wall
            print(f"{latency:5.0f}ms  {'same command':<16} {same.wall:7.2f} {'':>8} {'':>11}   {same_ratio:.3f}x the "
                  f"first run (rerun into the same output: every judgment already done)")
            verdicts.append((f"{latency:g} ms: same-command rerun sends nothing", resent == 0))
            if latency == 0:
                verdicts.append(("0 ms: engine/aiohttp >= 1.9x the bare SDK loop", n_aio / aio.wall >= 1.9 * bare_rate))
                verdicts.append(("0 ms: cache-only rerun (fresh output) <= 0.2x", ratio <= 0.2 and resent == 0))
            else:
                verdicts.append((f"{latency:g} ms: engine/aiohttp >= 0.95x the bare aiohttp loop",
                                 n_aio / aio.wall >= 0.95 * n_bare_aio / bare_aio.wall))
            if profile:
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
                print("\ncProfile of engine/aiohttp (tottime; the event loop's own time is in select/_run_once):")
                print("\n".join(out.getvalue().splitlines()[:45]))
        breakdown(tmp, n_items)
    print("\n" + "\n".join(f"[{'ok' if ok else 'MISSED'}] {what}" for what, ok in verdicts))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
