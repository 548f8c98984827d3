"""The prefix-cache share a node sees with --batch-dir shards that keep (criterion, dialogue) groups whole, against
the round-robin filling they replaced.

A run's requests are written as 4 shards by `judge score --batch-dir` (grouped); the round-robin shards are the same
requests in plan order (the key file's), request i into shard i mod 4. Each shard stands for a node: its requests
are sent in order, one at a time, to a llama.cpp server with one slot (the embedded model, SmolLM2-135M), which
reports the prompt tokens it reused from the slot's cache (`timings.cache_n`, recorded as `cached_tokens`). The
share is cached / prompt tokens over all shards. Answers are cut at one token: only the prompt matters here.

    python benchmarks/shard_prefix_cache.py [--dialogues 12] [--criteria coherence]

writes benchmarks/shard_prefix_cache_table.txt.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = Path(__file__).with_name("shard_prefix_cache_table.txt")
SHARDS = 4


def write_items(path: Path, dialogues: int, seed: int = 7) -> None:
    """Dialogues of ~150 words with 6 candidates each (the DialSummEval shape)."""
    chance = random.Random(seed)
    words = "hello the bus bag lost office morning phone number open monday friday thanks please".split()
    with path.open("w", encoding="utf-8") as handle:
        for d in range(dialogues):
            turns = [{"speaker": "A" if t % 2 == 0 else "B", "text": " ".join(chance.choices(words, k=15))}
                     for t in range(10)]
            for s in range(6):
                handle.write(json.dumps({"id": f"d{d}", "system": f"s{s}", "dialogue": turns,
                                         "candidate": " ".join(chance.choices(words, k=20))}) + "\n")


def shard_sets(folder: Path) -> dict[str, list[list[dict]]]:
    """{"grouped": the shards as written, "round-robin": the plan's requests dealt i mod SHARDS}."""
    grouped = [[json.loads(x) for x in p.read_text().splitlines()]
               for p in sorted(folder.glob("round1-*.jsonl")) if not p.name.endswith(".out.jsonl")]
    by_id = {r["custom_id"]: r for shard in grouped for r in shard}
    order = [c for line in (folder / "keys-round1.jsonl").read_text().splitlines()[1:]
             for c in json.loads(line)[5]]
    robin = [[by_id[c] for c in order[i::SHARDS]] for i in range(SHARDS)]
    return {"grouped": grouped, "round-robin": robin}


def replay(url: str, shards: list[list[dict]]) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) of the shards sent one after the other, each request in order."""
    prompt = cached = 0
    for shard in shards:
        for record in shard:
            body = {**record["body"], "max_tokens": 1}
            request = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as response:
                data = json.loads(response.read())
            prompt += data["usage"]["prompt_tokens"]
            cached += (data.get("timings") or {}).get("cache_n") or 0
    return prompt, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialogues", type=int, default=12)
    parser.add_argument("--criteria", default="coherence")
    args = parser.parse_args()
    from judge.backends import local

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        write_items(work / "items.jsonl", args.dialogues)
        command = [sys.executable, "-m", "judge.cli", "score", "--rubric", "dialsummeval", "--criteria",
                   args.criteria, "--input", str(work / "items.jsonl"), "--output", str(work / "out.jsonl"),
                   "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--no-cache",
                   "--batch-dir", str(work / "b"), "--shards", str(SHARDS), "--no-progress"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 3, done.stderr
        sets = shard_sets(work / "b")
        rows = []
        for name, shards in sets.items():
            with local.local_server(local.bundled_model_path(), slots=1) as url:  # a fresh cache per layout
                prompt, cached = replay(url, shards)
            rows.append((name, sum(map(len, shards)), prompt, cached, cached / prompt))
    lines = [f"# {args.dialogues} dialogues x 6 candidates, criteria {args.criteria}, {SHARDS} shards, each replayed in "
             "order on a one-slot llama.cpp server (SmolLM2-135M, cache_n)",
             f"{'layout':<12} {'requests':>8} {'prompt_tokens':>13} {'cached_tokens':>13} {'cached_share':>12}"]
    lines += [f"{n:<12} {r:>8} {p:>13} {c:>13} {s:>12.3f}" for n, r, p, c, s in rows]
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
