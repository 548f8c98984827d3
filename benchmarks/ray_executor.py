"""`--executor ray` on one machine against the online engine, both judging the same items on the same local server.

The server is tests/stub_server.py in its own process (an OpenAI-compatible server that answers at once, so the
client's own cost shows: what the two executors add per judgment). For each size N (judgments: N items x one
criterion) each executor runs `judge score` as a fresh process; the table gives wall time, judgments per second, the
ratio ray / online, and the client's peak memory: the resident set of the whole process tree (the judge process and
everything it starts: for Ray the local cluster's GCS, raylet and workers), sampled every 0.2 s. Flat in N means the
100k row's memory is close to the 10k row's.

    python benchmarks/ray_executor.py [--sizes 10000,100000]

writes benchmarks/ray_executor_table.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
TABLE = Path(__file__).with_name("ray_executor_table.txt")


def write_items(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({"id": f"d{i // 6}", "system": f"s{i % 6}", "dialogue": f"dialogue {i // 6}: "
                                     "the customer lost a bag on the bus and asks where to find it",
                                     "candidate": f"summary {i}"}) + "\n")


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def timed(command: list[str], env: dict) -> tuple[float, int, str, int, float]:
    """(seconds, peak RSS of the process tree, stderr's last line, peak RSS of the judge process alone, its CPU
    seconds) of one run. The judge process's own figures are its last sample before it exits (0.2 s apart)."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=ROOT)
        watched, peak, own, cpu = psutil.Process(proc.pid), 0, 0, 0.0
        while proc.poll() is None:
            peak = max(peak, tree_rss(watched))
            try:
                own = max(own, watched.memory_info().rss)
                times = watched.cpu_times()
                cpu = times.user + times.system
            except psutil.Error:
                pass
            time.sleep(0.2)
        seconds = time.monotonic() - started
        err.seek(0)
        text = err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed ({proc.returncode}):\n{text[-3000:]}")
    summary = next((line for line in text.splitlines() if line.startswith("judged ")), "")
    return seconds, peak, summary, own, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "stub_server.py"), "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    url = server.stdout.readline().split()[-1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-bench"}
    rows = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            for n in map(int, args.sizes.split(",")):
                write_items(work / f"items-{n}.jsonl", n)
                for executor in ("online", "ray"):
                    command = [sys.executable, "-m", "judge.cli", "score", "--rubric", "dialsummeval", "--criteria",
                               "coherence", "--input", str(work / f"items-{n}.jsonl"), "--output",
                               str(work / f"{executor}-{n}.jsonl"), "--backend", "openai", "--base-url", url,
                               "--model", "stub", "--no-cache", "--no-progress", "--concurrency", "32",
                               "--executor", executor]
                    seconds, peak, summary, own, cpu = timed(command, env)
                    rows.append((n, executor, seconds, n / seconds, peak / 2**20, own / 2**20, 1000 * cpu / n))
                    print(rows[-1], summary, flush=True)
                    write_table(rows)  # after each run: a long benchmark stopped early keeps what it measured
    finally:
        server.kill()


def write_table(rows: list[tuple]) -> None:
    lines = ["# judge score, dialsummeval/coherence, one judgment a request, against tests/stub_server.py (answers at "
             "once) on the same 2-core machine; peak RSS = the client's whole process tree (Ray: its local cluster); "
             "driver = the judge process alone (its peak RSS, its CPU ms a judgment)",
             f"{'judgments':>9} {'executor':<8} {'seconds':>8} {'judgments/s':>11} {'ray/online':>10} "
             f"{'peak_rss_MiB':>12} {'driver_MiB':>10} {'driver_cpu_ms':>13}"]
    online = {r[0]: r[3] for r in rows if r[1] == "online"}
    for n, executor, seconds, rate, rss, own, cpu in rows:
        ratio = f"{rate / online[n]:.2f}" if executor == "ray" and n in online else ""
        lines.append(f"{n:>9} {executor:<8} {seconds:>8.1f} {rate:>11.1f} {ratio:>10} {rss:>12.0f} {own:>10.0f} "
                     f"{cpu:>13.3f}")
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
