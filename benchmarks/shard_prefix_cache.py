"""The prefix-cache share a node sees with --batch-dir shards that keep (criterion, dialogue) groups whole, against
the round-robin filling they replaced.

A run's requests are written as 4 shards by `judge score --batch-dir` (grouped); the round-robin shards are the same
requests in plan order (the key file's), request i into shard i mod 4. Each shard stands for a node: its requests
are sent in order, one at a time, to a llama.cpp server with one slot (the embedded model, SmolLM2-135M), which
reports the prompt tokens it reused from the slot's cache (`timings.cache_n`, recorded as `cached_tokens`). The
share is cached / prompt tokens over all shards. Answers are cut at one token: only the prompt matters here.
Beside the measurement, the same share computed: each request's tokens (the model's own tokenizer, as --dry-run
counts them) against the previous request of its shard, the longest common prefix being what one slot can reuse.

    python benchmarks/shard_prefix_cache.py [--dialogues 6] [--criteria coherence] [--no-measure]

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


def computed(counter, shards: list[list[dict]]) -> tuple[int, int]:
    """(prompt tokens, tokens shared with the previous request of the shard): the share a one-slot cache can reuse."""
    prompt = shared = 0
    for shard in shards:
        previous: list[int] = []
        for record in shard:
            text = counter.template.render(messages=record["body"]["messages"], add_generation_prompt=True,
                                           **counter.specials)
            ids = counter.tokenizer.encode(text, add_special_tokens=False).ids
            common = next((n for n, (a, b) in enumerate(zip(previous, ids)) if a != b), min(len(previous), len(ids)))
            prompt, shared, previous = prompt + len(ids), shared + common, ids
    return prompt, shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialogues", type=int, default=6)
    parser.add_argument("--criteria", default="coherence")
    parser.add_argument("--no-measure", action="store_true", help="only the computed share (no server)")
    args = parser.parse_args()
    from judge.backends import local
    from judge.token_count import from_gguf

    counter = from_gguf(local.bundled_model_path())

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
            prompt, shared = computed(counter, shards)
            rows.append((name, "computed", sum(map(len, shards)), prompt, shared, shared / prompt))
            print(rows[-1], flush=True)
            if args.no_measure:
                continue
            with local.local_server(local.bundled_model_path(), slots=1) as url:  # a fresh cache per layout
                prompt, cached = replay(url, shards)
            rows.append((name, "measured", sum(map(len, shards)), prompt, cached, cached / prompt))
            print(rows[-1], flush=True)
    lines = [f"# {args.dialogues} dialogues x 6 candidates, criteria {args.criteria}, {SHARDS} shards, each replayed "
             "in order on a one-slot llama.cpp server (SmolLM2-135M): measured = its cache_n; computed = the common "
             "token prefix with the shard's previous request",
             f"{'layout':<12} {'how':<9} {'requests':>8} {'prompt_tokens':>13} {'cached_tokens':>13} "
             f"{'cached_share':>12}"]
    lines += [f"{n:<12} {h:<9} {r:>8} {p:>13} {c:>13} {s:>12.3f}" for n, h, r, p, c, s in rows]
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
