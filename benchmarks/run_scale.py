"""Memory and client CPU of a judging run as it grows: 10k, 100k (and 1M with --sizes) judgments, each transport.

Each measured run is a whole `judge score` process (dialsummeval, one criterion, four systems per dialogue of
~0.5 kB), its peak resident memory and CPU read from the kernel when it exits (getrusage). The servers run in their
own processes, so only the client is measured:

  online      --backend openai against the stub chat server (tests/stub_server.py), --concurrency 64
  batch       --batch against the stub Batch API (tests/batch_server.py, completing at once)
  dir-write   --batch-dir: the requests written as shard files (the run stops: exit 3)
  dir-read    the same command after a runner answered every shard: the answers read and recorded
  no-op       the online command again once everything is done: nothing to ask

Beside the dir runs, a bare Python loop that reads the same items and writes request lines of the same size
(json + hashlib) gives the floor; the ratio to it is printed. The flatness check: peak memory at the largest size
minus the smallest, per extra judgment, must stay under 2 KB when the run streams (a run that holds its judgments
keeps ~20 KB each).

    python benchmarks/run_scale.py                       # 10k and 100k
    python benchmarks/run_scale.py --sizes 20000 --check # CI: fail when memory per judgment grows with N
    python benchmarks/run_scale.py --sizes 10000,100000,1000000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("alpha", "beta", "gamma", "delta")


def write_items(path: Path, n: int) -> Path:
    """n candidates, four systems per dialogue; dialogues of ~0.5 kB."""
    with path.open("w", encoding="utf-8") as f:
        for k in range(n):
            d = k // len(SYSTEMS)
            dialogue = " ".join(f"turn {t} of call {d}: my pass was charged twice, I need a refund." for t in range(8))
            f.write(json.dumps({"id": f"d{d}", "system": SYSTEMS[k % len(SYSTEMS)], "dialogue": dialogue,
                                "candidate": f"Customer {d} was charged twice; system {k % 4} says refunded."}) + "\n")
    return path


def start(script: str, *flags: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / script), "--port", "0", *flags],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT / "tests")
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"{script} did not start: {line!r}")
    return proc, line.split()[-1]


def measured(argv: list[str], env: dict) -> dict:
    """Run `judge ARGV` in a child process; its exit code, wall seconds, CPU seconds and peak RSS (MB)."""
    code = ("import json, resource, sys, time\nfrom judge.cli import main\nstarted = time.perf_counter()\n"
            "rc = main(sys.argv[1:])\nu = resource.getrusage(resource.RUSAGE_SELF)\n"
            "print(json.dumps({'rc': rc, 'wall': time.perf_counter() - started, 'cpu': u.ru_utime + u.ru_stime, "
            "'rss_mb': u.ru_maxrss / 1024}), file=sys.__stdout__)\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise SystemExit(f"judge {' '.join(argv)} failed:\n{done.stderr[-2000:]}") from None


def answer_shards(directory: Path) -> None:
    """A runner: every shard's requests answered as `vllm run-batch` writes them (content from the schema)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from stub_server import _answer_from_schema

    for shard in sorted(directory.glob("round*-*.jsonl")):
        if shard.name.endswith(".out.jsonl"):
            continue
        with shard.open(encoding="utf-8") as src, \
                shard.with_name(shard.name.removesuffix(".jsonl") + ".out.jsonl").open("w", encoding="utf-8") as out:
            for line in src:
                request = json.loads(line)
                schema = request["body"]["response_format"]["json_schema"]["schema"]
                content = json.dumps(_answer_from_schema(schema, "yes"))
                body = {"id": "x", "object": "chat.completion", "model": request["body"]["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
                out.write(json.dumps({"id": "r", "custom_id": request["custom_id"], "error": None,
                                      "response": {"status_code": 200, "request_id": "r", "body": body}}) + "\n")


def bare_loop(items: Path, output: Path, request_bytes: int) -> dict:
    """Read the items and write request lines of the same size with json + hashlib: the floor."""
    started, cpu = time.perf_counter(), time.process_time()
    pad = "x" * max(0, request_bytes - 200)
    with items.open(encoding="utf-8") as src, output.open("w", encoding="utf-8") as out:
        for line in src:
            item = json.loads(line)
            body = {"model": "stub", "messages": [{"role": "user", "content": item["dialogue"] + pad}]}
            key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            out.write(json.dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body})
                      + "\n")
    return {"wall": time.perf_counter() - started, "cpu": time.process_time() - cpu}


TRANSPORTS = ("online", "no-op", "batch", "dir-write", "dir-read")
MARGINAL_KB = 2.0  # --check: above this many KB per extra judgment, a run holds what it should stream (held: 4-28)


def one_size(n: int, workdir: Path, chat_url: str, batch_url: str, env: dict, transports=TRANSPORTS) -> list[dict]:
    items = write_items(workdir / f"items_{n}.jsonl", n)
    base = ["score", "--rubric", "dialsummeval", "--criteria", "consistency", "--input", str(items), "--no-cache",
            "--no-progress", "--backend", "openai", "--model", "stub"]
    rows = []

    def record(name: str, argv: list[str], expect: int = 0) -> dict:
        result = measured(argv, env)
        if result["rc"] != expect:
            raise SystemExit(f"{name} at {n}: exit {result['rc']}, expected {expect}")
        row = {"transport": name, "n": n, **result, "cpu_ms_per_judgment": 1000 * result["cpu"] / n,
               "kb_per_judgment": 1024 * result["rss_mb"] / n}
        rows.append(row)
        print(f"  {name:<10} {n:>9,}  rss {result['rss_mb']:8.0f} MB  cpu {result['cpu']:8.1f} s "
              f"({row['cpu_ms_per_judgment']:.3f} ms/judgment)  wall {result['wall']:8.1f} s", flush=True)
        return row

    online = workdir / f"online_{n}.jsonl"
    if "online" in transports:
        record("online", base + ["--output", str(online), "--base-url", chat_url, "--concurrency", "64"])
        if "no-op" in transports:
            record("no-op", base + ["--output", str(online), "--base-url", chat_url, "--concurrency", "64"])
    if "batch" in transports:
        record("batch", base + ["--output", str(workdir / f"batch_{n}.jsonl"), "--base-url", batch_url, "--batch"])
    if "dir-write" not in transports:
        return rows
    shards = workdir / f"shards_{n}"
    dir_argv = base + ["--output", str(workdir / f"dir_{n}.jsonl"), "--batch-dir", str(shards)]
    write = record("dir-write", dir_argv, expect=3)
    written = sum(p.stat().st_size for p in shards.glob("round*.jsonl"))
    answer_shards(shards)
    read = record("dir-read", dir_argv)
    floor = bare_loop(items, workdir / "bare.jsonl", written // n)
    for row in (write, read):  # wall, and CPU (which a busy machine inflates less: say which was measured when)
        row["x_bare_loop"] = row["wall"] / floor["wall"]
        row["x_bare_cpu"] = row["cpu"] / floor["cpu"]
    print(f"  bare loop  {n:>9,}  wall {floor['wall']:.1f} s, cpu {floor['cpu']:.1f} s; dir-write "
          f"{write['x_bare_loop']:.1f}x (cpu {write['x_bare_cpu']:.1f}x), dir-read {read['x_bare_loop']:.1f}x "
          f"(cpu {read['x_bare_cpu']:.1f}x) of it (target: 3x); load average {os.getloadavg()[0]:.1f}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="judgments per run, comma-separated")
    parser.add_argument("--transports", default=",".join(TRANSPORTS),
                        help=f"which runs, comma-separated (default all: {','.join(TRANSPORTS)}; dir-write includes "
                             "dir-read, online includes no-op)")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when a streaming transport's peak memory grows by more than {MARGINAL_KB} KB per "
                             "judgment between the smallest and the largest size, or passes 1 GB")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.check and len(sizes) == 1:
        sizes = [max(1000, sizes[0] // 10), sizes[0]]
    chat, chat_url = start("stub_server.py")
    batch, batch_url = start("batch_server.py", "--instant")
    env = {**os.environ, "JUDGE_BATCH_POLL_SECONDS": "0.01", "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-bench"}
    env.pop("JUDGE_BASE_URLS", None)
    print(f"client: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="judge-scale-") as scratch:
            for n in sizes:
                print(f"{n:,} judgments", flush=True)
                rows += one_size(n, Path(scratch), chat_url, batch_url, env, args.transports.split(","))
    finally:
        chat.kill()
        batch.kill()
    print("\npeak memory (MB) by transport and size; growth = largest / smallest; marginal = extra KB per extra "
          "judgment (the resume index and the duplicate checks keep ~0.1-0.5 KB per judgment; a run that holds its "
          "judgments keeps tens)")
    failed = False
    for transport in TRANSPORTS:
        mine = [r for r in rows if r["transport"] == transport]
        if len(mine) < 2:
            continue
        growth = mine[-1]["rss_mb"] / mine[0]["rss_mb"]
        marginal = 1024 * (mine[-1]["rss_mb"] - mine[0]["rss_mb"]) / (mine[-1]["n"] - mine[0]["n"])
        cells = "  ".join(f"{r['n']:>9,}: {r['rss_mb']:6.0f}" for r in mine)
        print(f"  {transport:<10} {cells}  growth {growth:.2f}x  marginal {marginal:.2f} KB/judgment")
        failed |= marginal > MARGINAL_KB or mine[-1]["rss_mb"] > 1024
    if args.check and failed:
        print("FAIL: peak memory grows with the number of judgments (or exceeds 1 GB)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
