"""What the batch transport costs the client: `--batch` against a local Batch API server with instant completion,
beside the online engine against the same server's chat endpoint at 0 ms.

The server (tests/batch_server.py, the stub plus /v1/files and /v1/batches) runs in its own process, so only this
process's CPU is measured (time.process_time). Both runs judge the same 10,000 (item, criterion) pairs
(dialsummeval: 4 criteria, no gate, one request each) into fresh caches and results files:

  online   judge.engine.Engine with the aiohttp client, --concurrency 64 (the `judge score` path)
  batch    the same engine with the Batch API transport (SDK upload, create, poll, download), as `--batch` runs it
  dir      the same with `--batch-dir` (files written for a runner), for the disk side

Reported: client CPU per judgment side by side (target: batch within 1.5x of online), and what stays on disk
(the manifest; with --batch-dir the batch files too) beside the size of the requests (target: under 2x).

    python benchmarks/batch_overhead.py [--judgments 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JUDGE_BATCH_POLL_SECONDS", "0.01")

from judge.backends import batch as batching  # noqa: E402
from judge.backends.batch_api import BatchAPIClient, Manifest, manifest_path  # noqa: E402
from judge.backends.batch_dir import BatchDirClient  # noqa: E402
from judge.backends.openai_compat import HTTPClient  # noqa: E402
from judge.cache import AnswerCache  # noqa: E402
from judge.engine import Engine  # noqa: E402
from judge.items import load_items  # noqa: E402
from judge.results import ResultsFile  # noqa: E402
from judge.rubric import load_rubric  # noqa: E402
from judge.secrets import Redactor  # noqa: E402
from judge.settings import Settings  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from engine_throughput import start_server, write_items  # noqa: E402

RUBRIC = "dialsummeval"


def run(client, concurrency: int, items_path: Path, work: Path) -> tuple[float, float, object]:
    rubric = load_rubric(RUBRIC)
    items = load_items(items_path, rubric.inputs)
    cache = AnswerCache(work / "cache")
    results = ResultsFile(work / "out.jsonl")

    async def go():
        engine = Engine(client, Settings(model="stub", concurrency=concurrency, timeout=60), cache, rubric)
        plan = engine.plan(rubric.criteria, items)
        results.start()
        try:
            return await engine.run(plan, results, progress=False)
        finally:
            await client.aclose()

    wall, cpu = time.perf_counter(), time.process_time()
    try:
        tally = asyncio.run(go())
    except batching.BatchPending:
        tally = None
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    results.close()
    cache.close()
    if tally is not None and (tally.failed or tally.judged == 0):
        raise SystemExit(f"{tally.failed} judgments failed: {tally.errors}")
    return wall, cpu, tally


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judgments", type=int, default=10_000)
    args = p.parse_args()
    n_items = args.judgments // 4
    proc, base_url = start_server("batch_server.py", "--instant")
    try:
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            items = write_items(scratch / "items.jsonl", n_items, "c")
            online_dir, batch_dir, files_dir = (scratch / name for name in ("online", "batch", "dir"))
            for d in (online_dir, batch_dir, files_dir):
                d.mkdir()
            w_on, c_on, t_on = run(HTTPClient(base_url, "sk-bench", 64), 64, items, online_dir)
            manifest = Manifest(manifest_path(batch_dir / "out.jsonl"), "bench", "score", "stub", base_url)
            client = BatchAPIClient(base_url, "sk-bench", manifest, Redactor(), progress=False)
            w_b, c_b, t_b = run(client, batching.DIR_CONCURRENCY, items, batch_dir)
            assert t_b.judged == t_on.judged == 4 * n_items, (t_b.judged, t_on.judged)
            import openai

            sdk = openai.OpenAI(base_url=base_url, api_key="x")
            request_bytes = sum(sdk.files.retrieve(b["file_id"]).bytes for b in manifest.batches)
            manifest_bytes = manifest.path.stat().st_size + (batch_dir / ".judge-written.json").stat().st_size + \
                sum(f.stat().st_size for f in manifest.ids_dir.iterdir())  # the custom_ids, one file a batch
            dir_client = BatchDirClient(files_dir / "batches", 1, "stub", "bench", "score", progress=False)
            w_d, c_d, _ = run(dir_client, batching.DIR_CONCURRENCY, items, files_dir)
            dir_bytes = sum(f.stat().st_size for f in (files_dir / "batches").iterdir())
            judged = t_on.judged
            print(f"{judged} judgments ({n_items} items x 4 criteria), one request each; server in its own process")
            print(f"{'path':<10}{'wall s':>8}{'client CPU s':>14}{'CPU us/judgment':>17}")
            for name, wall, cpu in (("online", w_on, c_on), ("batch", w_b, c_b), ("batch-dir", w_d, c_d)):
                print(f"{name:<10}{wall:>8.2f}{cpu:>14.2f}{cpu / judged * 1e6:>17.0f}")
            ratio = c_b / c_on
            print(f"batch / online client CPU: {ratio:.2f}x (target <= 1.5x) {'OK' if ratio <= 1.5 else 'MISSED'}")
            print(f"requests uploaded: {request_bytes / 1e6:.1f} MB in {len(manifest.batches)} file(s)")
            disk = manifest_bytes / request_bytes
            print(f"--batch on disk: manifest {manifest_bytes / 1e6:.2f} MB = {disk:.2f}x the requests "
                  f"(target < 2x) {'OK' if disk < 2 else 'MISSED'}")
            disk_dir = dir_bytes / request_bytes
            print(f"--batch-dir on disk: batch files + manifest {dir_bytes / 1e6:.1f} MB = {disk_dir:.2f}x "
                  f"the requests (target < 2x) {'OK' if disk_dir < 2 else 'MISSED'}")
            return 0 if ratio <= 1.5 and disk < 2 and disk_dir < 2 else 1
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
