"""vLLM throughput on this machine: the in-process engine fed in batches, the same engine fed one request at a
time, and `vllm serve` through the project's HTTP client, on the same plan of judging requests.

The plan: --judgments pointwise DialSummEval requests (4 criteria over synthetic dialogues of a realistic length),
built exactly as the asking layer builds them (judge.asking.Asker.body: schema, token budget, seed). Each line
is one judgment answered by the real model (default: the bundled SmolLM2 converted for vLLM).

  engine, batched       VLLMClient with every request in flight at once (what `judge score --backend vllm` does)
  engine, one at a time the same engine, each request awaited before the next is sent (first --sequential only)
  vllm serve, HTTP      the OpenAI-compatible server, HTTPClient at --concurrency requests in flight

The prefix cache is reset between the engine runs, and the server starts empty, so no run reuses another's work.
Rates are per second of wall time; the ratio column is against the one-at-a-time engine.

    python benchmarks/vllm_throughput.py [--judgments 64] [--sequential 12] [--concurrency 256] [--no-serve]

Needs vLLM (see .ci/run for the CPU build). CPU-heavy for a few minutes: run it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from judge.answers import AnswerFormat  # noqa: E402
from judge.asking import Asker  # noqa: E402
from judge.backends.local import free_port, wait_healthy  # noqa: E402
from judge.cache import NoCache  # noqa: E402
from judge.items import load_items  # noqa: E402
from judge.prompting import criterion_messages  # noqa: E402
from judge.rubric import load_rubric  # noqa: E402
from judge.settings import Settings  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine_throughput import write_items  # noqa: E402

RUBRIC = "dialsummeval"


def plan(model: str, judgments: int, workdir: Path) -> list[dict]:
    rubric = load_rubric(RUBRIC)
    items = load_items(write_items(workdir / "items.jsonl", (judgments + 3) // 4, "call"), rubric.inputs)
    asker = Asker(None, Settings(model=model), NoCache(), rubric.language)
    bodies = [asker.body(criterion_messages(rubric, criterion, item), AnswerFormat.for_criterion(criterion), 0)
              for item in items for criterion in rubric.criteria]
    return bodies[:judgments]


def run(client, bodies: list[dict], concurrency: int) -> tuple[float, list[dict]]:
    """Wall seconds and completions; concurrency 1 sends each request after the previous answer."""
    async def go():
        semaphore = asyncio.Semaphore(concurrency)

        async def one(body):
            async with semaphore:
                return await client.complete(body, 600)

        try:
            return await asyncio.gather(*(one(b) for b in bodies))
        finally:
            await client.aclose()

    started = time.perf_counter()
    completions = asyncio.run(go())
    return time.perf_counter() - started, completions


def rates(label: str, seconds: float, completions: list[dict]) -> dict:
    formats = {"schema answers parsed": 0}
    for c in completions:
        try:
            json.loads(c["content"])
            formats["schema answers parsed"] += 1
        except json.JSONDecodeError:
            pass
    prompt = sum(c["usage"]["prompt_tokens"] for c in completions)
    completion = sum(c["usage"]["completion_tokens"] for c in completions)
    return {"label": label, "n": len(completions), "seconds": seconds, "judgments/s": len(completions) / seconds,
            "prompt tok/s": prompt / seconds, "completion tok/s": completion / seconds,
            "parsed": formats["schema answers parsed"]}



def start_server(model: str, max_model_len: int, dtype: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", dtype, "--enforce-eager"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    if wait_healthy(base, 300, alive=lambda: proc.poll() is None, interval=0.5):
        return proc, base + "/v1"
    if proc.poll() is not None:
        raise SystemExit(f"vllm serve exited: {log.read_text()[-2000:]}")
    proc.kill()
    raise SystemExit("vllm serve was not healthy within 300 s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a Hugging Face model folder (default: the bundled SmolLM2, converted)")
    p.add_argument("--judgments", type=int, default=64)
    p.add_argument("--sequential", type=int, default=12, help="how many of them to send one at a time")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--no-serve", action="store_true", help="skip the vllm serve run")
    args = p.parse_args(argv)

    from judge.backends.convert import converted_model
    from judge.backends.openai_compat import HTTPClient
    from judge.backends.vllm import open_engine

    model = args.model or str(converted_model())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bodies = plan(model, args.judgments, Path(tmp))
        print(f"{len(bodies)} judgments of {RUBRIC}, model {model}", file=sys.stderr)
        engine_args = SimpleNamespace(model=model, dtype=args.dtype, max_model_len=args.max_model_len,
                                      tensor_parallel_size=1, gpu_memory_utilization=None)
        with open_engine(engine_args) as opened:
            client = opened.client
            run(client, bodies[:2], 2)  # warm-up: first-call costs (grammar compilation, allocations) off the clock
            client.reset_prefix_cache()
            rows.append(rates("engine, one at a time", *run(client, bodies[:args.sequential], 1)))
            client.reset_prefix_cache()
            seconds, completions = run(client, bodies, args.concurrency)
            rows.append(rates(f"engine, batched (largest batch {client.largest_batch})", seconds, completions))
        if not args.no_serve:
            proc, base_url = start_server(model, args.max_model_len, args.dtype, Path(tmp) / "serve.log")
            try:
                run(HTTPClient(base_url, None, 2), bodies[:2], 2)  # the same warm-up
                seconds, completions = run(HTTPClient(base_url, None, args.concurrency), bodies, args.concurrency)
                rows.append(rates(f"vllm serve, HTTP (concurrency {args.concurrency})", seconds, completions))
            finally:
                proc.terminate()
                proc.wait(30)

    base = rows[0]
    print(f"{'':<48} {'n':>4} {'seconds':>8} {'judg/s':>7} {'prompt tok/s':>13} {'compl tok/s':>12} "
          f"{'parsed':>7} {'x one-at-a-time':>16}")
    for r in rows:
        print(f"{r['label']:<48} {r['n']:>4} {r['seconds']:>8.1f} {r['judgments/s']:>7.2f} {r['prompt tok/s']:>13.0f} "
              f"{r['completion tok/s']:>12.1f} {r['parsed']:>4}/{r['n']:<3}"
              f"{r['judgments/s'] / base['judgments/s']:>15.1f}x")
    return 0


if __name__ == "__main__":  # vLLM starts worker processes by spawning: the guard keeps them from rerunning this
    sys.exit(main())
