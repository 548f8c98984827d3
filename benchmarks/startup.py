"""Start-up of whole `judge` processes, as a user meets it, against a local stub server at 0 ms latency.

    python benchmarks/startup.py [--repeat 5] [--judgments 400]

Measured side by side in one run (medians of --repeat; the machine is shared, so compare ratios, not seconds):
  python -c pass        the interpreter alone: the floor every command pays
  judge --help          building the parser of every verb (no pandas, scipy or HTTP stack may load)
  judge render          rubric + items + sandboxed templates, no model
  first request         from launching `judge score` to the stub receiving its first chat request
  first run             `judge score` of --judgments judgments into a fresh output and a fresh cache
  cache-only rerun      the same command into a fresh output, every answer in the cache: time / first run

Targets (issue: trustworthy runs): --help and render <= 0.3 s, first request <= 0.5 s, cache-only rerun <= 0.2x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine_throughput import start_stub, write_items  # noqa: E402

JUDGE = [sys.executable, "-m", "judge.cli"]


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr[-500:]}")
    return time.perf_counter() - started


def stats(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=5) as response:
        return json.load(response)


def reset(base_url: str) -> None:
    request = urllib.request.Request(base_url.removesuffix("/v1") + "/reset", data=b"{}", method="POST")
    urllib.request.urlopen(request, timeout=5).close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--judgments", type=int, default=400, help="judgments of the first run and its rerun (default 400)")
    args = p.parse_args(argv)
    proc, base_url = start_stub(0)
    rows: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="judge-startup-") as tmp:
            tmp = Path(tmp)
            one = write_items(tmp / "one.jsonl", 1, "one-")
            many = write_items(tmp / "many.jsonl", max(1, args.judgments // 4), "many-")
            score = [*JUDGE, "score", "--rubric", "dialsummeval", "--backend", "openai", "--base-url", base_url,
                     "--model", "stub", "--no-progress"]
            for k in range(args.repeat):
                rows.setdefault("python -c pass", []).append(wall([sys.executable, "-c", "pass"]))
                rows.setdefault("judge --help", []).append(wall([*JUDGE, "--help"]))
                rows.setdefault("judge render", []).append(
                    wall([*JUDGE, "render", "--rubric", "dialsummeval", "--input", str(one)]))
                reset(base_url)
                started = time.time()
                wall([*score, "--input", str(one), "--output", str(tmp / f"first-{k}.jsonl"), "--criteria", "coherence",
                      "--cache", str(tmp / f"cache-one-{k}")])
                rows.setdefault("first request", []).append(stats(base_url)["first_request_at"] - started)
                cache = str(tmp / f"cache-many-{k}")
                rows.setdefault("first run", []).append(
                    wall([*score, "--input", str(many), "--output", str(tmp / f"run-{k}.jsonl"), "--cache", cache]))
                before = stats(base_url)["total"]
                rows.setdefault("cache-only rerun", []).append(
                    wall([*score, "--input", str(many), "--output", str(tmp / f"rerun-{k}.jsonl"), "--cache", cache]))
                assert stats(base_url)["total"] == before, "the cache-only rerun sent requests"
    finally:
        proc.kill()
        proc.wait()
    median = {name: statistics.median(values) for name, values in rows.items()}
    print(f"medians of {args.repeat} runs; first run = {args.judgments} judgments at 0 ms")
    for name, value in median.items():
        print(f"  {name:<18} {value:6.3f} s   {value / median['python -c pass']:5.1f}x the bare interpreter")
    rerun = median["cache-only rerun"] / median["first run"]
    print(f"  cache-only rerun / first run: {rerun:.3f}x")
    verdicts = [("judge --help <= 0.3 s", median["judge --help"] <= 0.3),
                ("judge render <= 0.3 s", median["judge render"] <= 0.3),
                ("first request <= 0.5 s", median["first request"] <= 0.5),
                ("cache-only rerun <= 0.2x the first run", rerun <= 0.2)]
    print("\n".join(f"[{'ok' if ok else 'MISSED'}] {what}" for what, ok in verdicts))
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
