"""`--batch-dir` shards hold whole prefix groups: every request about one (criterion, dialogue) lands in one shard
(so a node prefills each dialogue once), the shards stay balanced (largest at most 1.5 x the smallest), the pending
message says how many groups each shard holds, and reading the answers back is unchanged (the same judgments as the
online run against the same server)."""

from __future__ import annotations

import json
import random
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from judge.backends.batch_dir import _Spool
from judge.cli import main

RUBRIC = "dialsummeval"  # four criteria, none gated: one round


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)


def write_items(path: Path, dialogues: int, seed: int = 3) -> int:
    """Dialogues with 2 to 7 candidates each (uneven groups); returns the number of items."""
    chance, n = random.Random(seed), 0
    with path.open("w", encoding="utf-8") as handle:
        for d in range(dialogues):
            text = " ".join(chance.choice(["hello", "bus", "bag", "lost", "office"]) for _ in range(30))
            for s in range(chance.randint(2, 7)):
                handle.write(json.dumps({"id": f"d{d}", "system": f"s{s}", "dialogue": f"dialogue {d}: {text}",
                                         "candidate": f"summary {s} of {d}"}) + "\n")
                n += 1
    return n


def run_args(tmp_path: Path, base_url: str, *extra: str) -> list[str]:
    return ["score", "--rubric", RUBRIC, "--input", str(tmp_path / "items.jsonl"), "--output",
            str(tmp_path / "out.jsonl"), "--backend", "openai", "--base-url", base_url, "--model", "stub",
            "--cache", str(tmp_path / "cache"), "--no-progress", *extra]


def groups_by_shard(folder: Path) -> dict[str, set]:
    """Shard file -> the (criterion, dialogue) groups of its requests, read off the key file (custom_id -> key)."""
    group_of = {}
    for line in (folder / "keys-round1.jsonl").read_text(encoding="utf-8").splitlines()[1:]:
        record = json.loads(line)
        for custom_id in record[5]:
            group_of[custom_id] = (record[2], record[0])
    return {shard.name: {group_of[json.loads(x)["custom_id"]] for x in shard.read_text().splitlines()}
            for shard in sorted(folder.glob("round1-*.jsonl"))}


def answer_with(base_url: str, shard: Path) -> None:
    """A runner: each request of `shard` sent to the server, the answers written as `vllm run-batch` writes them."""
    out = shard.with_name(shard.name.removesuffix(".jsonl") + ".out.jsonl")
    with out.open("w", encoding="utf-8") as handle:
        for line in shard.read_text(encoding="utf-8").splitlines():
            request = json.loads(line)
            sent = urllib.request.Request(base_url + "/chat/completions", json.dumps(request["body"]).encode(),
                                          {"Content-Type": "application/json"})
            with urllib.request.urlopen(sent) as response:
                body = json.loads(response.read())
            handle.write(json.dumps({"id": f"vllm-{request['custom_id'][:8]}", "custom_id": request["custom_id"],
                                     "response": {"status_code": 200, "request_id": "r", "body": body},
                                     "error": None}) + "\n")


def test_shards_hold_whole_groups_balanced_and_say_so(stub_server, tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", dialogues=40)
    folder = tmp_path / "batches"
    assert main(run_args(tmp_path, stub_server.base_url, "--batch-dir", str(folder), "--shards", "4")) == 3
    err = capsys.readouterr().err
    shards = groups_by_shard(folder)
    assert len(shards) == 4
    owner = defaultdict(set)
    for name, groups in shards.items():
        for group in groups:
            owner[group].add(name)
    assert len(owner) == 40 * 4 and all(len(names) == 1 for names in owner.values())  # no group split
    sizes = [len((folder / name).read_text().splitlines()) for name in shards]
    assert sum(sizes) == items * 4
    assert max(sizes) <= 1.5 * min(sizes), sizes
    for name, groups in shards.items():  # the message says how many groups each shard holds
        assert f"{name} -o {folder / name.replace('.jsonl', '.out.jsonl')} --model stub   # {len(groups)} prefix " \
               "group(s)" in err, err
    manifest = json.loads((folder / "batch-manifest.json").read_text())
    assert manifest["rounds"][0]["prefix_groups"] == [len(shards[name]) for name in shards]
    assert not list(folder.glob(".spool.*"))  # the spool is gone once the shards are written


def test_answers_read_back_give_the_online_judgments(stub_server, tmp_path):
    write_items(tmp_path / "items.jsonl", dialogues=12)
    folder = tmp_path / "batches"
    batch = run_args(tmp_path, stub_server.base_url, "--batch-dir", str(folder), "--shards", "3")
    assert main(batch) == 3
    shards = sorted(p for p in folder.glob("round1-*.jsonl") if not p.name.endswith(".out.jsonl"))
    answer_with(stub_server.base_url, shards[0])
    assert main(batch) == 3  # two shards still wait: resume records the first and asks nothing again
    assert sorted(p.name for p in folder.glob("round*.jsonl") if not p.name.endswith(".out.jsonl")) == \
        [p.name for p in shards]
    for shard in shards[1:]:
        answer_with(stub_server.base_url, shard)
    assert main(batch) == 0
    batched = sorted((tmp_path / "out.jsonl").read_text().splitlines())
    (tmp_path / "out.jsonl").rename(tmp_path / "batched.jsonl")
    assert main(run_args(tmp_path, stub_server.base_url, "--no-cache")) == 0
    online = sorted((tmp_path / "out.jsonl").read_text().splitlines())

    def verdicts(lines):
        return sorted((r["id"], r["system"], r["criterion"], r["score"], r["label"], r["error"])
                      for r in map(json.loads, lines))

    assert verdicts(batched) == verdicts(online) and len(online) == len(batched)


@pytest.mark.parametrize(("sizes", "shards"), [
    ([6] * 40, 4),  # equal groups
    ([2, 7, 3, 5, 6, 4] * 10, 4),  # uneven groups
    ([1] * 7, 3),
    ([9, 1, 1, 1], 4),  # more shards than can be balanced: one per group
])
def test_deal_puts_the_largest_group_into_the_lightest_shard(tmp_path, sizes, shards):
    spool = _Spool(tmp_path)
    for group, size in enumerate(sizes):
        for n in range(size):
            spool.add(f"g{group}", f"line {group}.{n}\n")
    shard_of = spool.deal(shards)
    loads = defaultdict(int)
    for group, shard in enumerate(shard_of):
        loads[shard] += sizes[group]
    assert len(loads) == min(shards, len(sizes))
    assert max(loads.values()) - min(loads.values()) <= max(sizes)  # the greedy bound: one group at most
    if min(loads.values()) >= 2 * max(sizes):  # enough groups: within 1.5 x
        assert max(loads.values()) <= 1.5 * min(loads.values())
    assert [line for _, line in spool.lines()] == [f"line {g}.{n}\n" for g, size in enumerate(sizes)
                                                   for n in range(size)]
    spool.discard()
    assert not list(tmp_path.iterdir())
