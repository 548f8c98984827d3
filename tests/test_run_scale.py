"""The streaming promise, measured: a 20k-judgment run's peak memory must not grow with the number of judgments
(benchmarks/run_scale.py --check: whole `judge score` processes against the stub servers, 2k then 20k judgments,
online with its no-op rerun, --batch, and --batch-dir writing then reading; more than 2 KB of extra peak memory per
extra judgment fails; a run that holds its judgments keeps 4-28 KB each). The full table (10k, 100k, 1M, every
transport) is the README's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_memory_per_judgment_does_not_grow_with_the_run():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_scale.py"), "--sizes", "20000", "--check",
                           "--transports", "online,no-op,batch,dir-write,dir-read"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("peak memory (MB)")[1]
    for transport in ("online", "no-op", "batch", "dir-write", "dir-read"):
        line = next(x for x in table.splitlines() if x.strip().startswith(transport))
        marginal = float(line.split("marginal")[1].split()[0])
        assert marginal < 2.0, line
