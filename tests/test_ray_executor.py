"""`--executor ray` on a real local Ray cluster (2 CPUs) through the real Ray Data API, against a real OpenAI-compatible
server on 127.0.0.1 (tests/stub_server.py, which counts the requests it receives and answers a fixed share of the
questions differently, so that equal judgments are not equal by chance).

The contract: the same judgments as the online run on the same server (every (id, system, criterion)), each planned
request asked once (at most 1.02 x the plan, the plan counted by --dry-run), and a run stopped by Ctrl-C at about 30%
and rerun asks at most 1.25 x the plan in all and ends complete and identical.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from judge.cli import main

pytest.importorskip("ray.data", reason='Ray Data is not installed: pip install ".[ray]"')

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = "call_centre_fr"  # one gated criterion: two rounds


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray cluster for the module; the runs join it (in process, or by --ray-address)."""
    import ray

    from judge.backends.ray_data import Cluster

    cluster = Cluster(None)
    cluster.connect()
    yield ray.get_runtime_context().gcs_address
    cluster.stop()


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for name in ("OPENAI_BASE_URL", "JUDGE_BASE_URLS", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def write_items(path: Path, dialogues: int, systems: int = 4) -> None:
    chance = random.Random(5)
    with path.open("w", encoding="utf-8") as handle:
        for d in range(dialogues):
            text = " ".join(chance.choice(["bonjour", "bus", "sac", "perdu", "bureau", "merci"]) for _ in range(25))
            for s in range(systems):
                handle.write(json.dumps({"id": f"call-{d}", "system": f"sys{s}", "dialogue": text,
                                         "candidate": f"résumé {s} de l'appel {d}"}, ensure_ascii=False) + "\n")


def score(tmp_path: Path, url: str, output: str, *extra: str) -> list[str]:
    return ["score", "--rubric", RUBRIC, "--input", str(tmp_path / "items.jsonl"), "--output", str(tmp_path / output),
            "--backend", "openai", "--base-url", url, "--model", "stub", "--cache", str(tmp_path / f"cache-{output}"),
            "--no-progress", *extra]


def verdicts(path: Path) -> list[tuple]:
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    return sorted((r["id"], r["system"], r["criterion"], r["score"], r["label"], r["na"], r["error"]) for r in rows)


def planned_requests(tmp_path: Path, url: str, capsys) -> int:
    assert main(score(tmp_path, url, "plan.jsonl", "--dry-run")) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["requests"]


def test_ray_gives_the_online_judgments_asking_each_request_once(ray_address, stub_server, tmp_path, capsys):
    write_items(tmp_path / "items.jsonl", dialogues=6)
    stub_server.configure(changed_share=0.5)
    plan = planned_requests(tmp_path, stub_server.base_url, capsys)
    assert main(score(tmp_path, stub_server.base_url, "ray.jsonl", "--executor", "ray", "--shards", "3")) == 0
    asked = stub_server.stats.total
    print(f"ray: plan {plan} requests, {asked} asked at the server ({asked / plan:.3f} x the plan)")
    assert plan <= asked <= 1.02 * plan, (asked, plan)
    folder = tmp_path / "ray.jsonl.ray-batches"
    answers = sorted(folder.glob("round*.out.jsonl"))
    assert {p.name.split("-")[0] for p in answers} == {"round1", "round2"}  # the gate's criterion: a second round
    record = json.loads(answers[0].read_text().splitlines()[0])  # as `vllm run-batch` writes it
    assert record["response"]["status_code"] == 200 and record["error"] is None
    assert "choices" in record["response"]["body"]
    assert main(score(tmp_path, stub_server.base_url, "online.jsonl")) == 0
    ray_judgments = verdicts(tmp_path / "ray.jsonl")
    assert ray_judgments == verdicts(tmp_path / "online.jsonl")
    assert len(ray_judgments) == 6 * 4 * 4 and len({v[3] for v in ray_judgments if v[2] == "faithfulness"}) > 1


def _stats(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats") as response:
        return json.loads(response.read())


def _answered(folder: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in folder.glob("*.out.jsonl")) if folder.is_dir() else 0


def _start_and_wait_for_30_percent(tmp_path: Path, stub_process, ray_address: str, capsys):
    """A Ray run of 40 dialogues against a slow stub, started as its own process and left running once 30% of the
    plan's answers are written: (process, the command, its environment, the stub's URL, the plan, the batch folder)."""
    write_items(tmp_path / "items.jsonl", dialogues=40)
    _, url = stub_process("--latency-ms", "150", "--changed-share", "0.5")
    plan = planned_requests(tmp_path, url, capsys)
    run = [sys.executable, "-m", "judge.cli", *score(tmp_path, url, "ray.jsonl", "--executor", "ray",
                                                       "--ray-address", ray_address, "--concurrency", "4")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(run, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = tmp_path / "ray.jsonl.ray-batches"
    deadline = time.monotonic() + 600
    while _answered(folder) < 0.3 * plan and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before 30% could be reached: {proc.communicate()[1][-2000:]}"
    return proc, run, env, url, plan, folder


@pytest.mark.slow
def test_ctrl_c_at_30_percent_then_a_rerun_asks_at_most_1_25_x_the_plan(ray_address, stub_process, tmp_path,
                                                                         capsys):
    proc, run, env, url, plan, _ = _start_and_wait_for_30_percent(tmp_path, stub_process, ray_address, capsys)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    first = _stats(url)["total"]
    assert 0.3 * plan <= first < plan
    again = subprocess.run(run, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    total = _stats(url)["total"]
    print(f"ray Ctrl-C: plan {plan} requests, {first} asked before the interrupt, {total} in all "
          f"({total / plan:.3f} x the plan)")
    assert total <= 1.25 * plan, (total, plan, first)
    assert main(score(tmp_path, url, "online.jsonl")) == 0
    assert verdicts(tmp_path / "ray.jsonl") == verdicts(tmp_path / "online.jsonl")
    assert len(verdicts(tmp_path / "ray.jsonl")) == 40 * 4 * 4


def _senders() -> list:
    """The Ray Data actor processes that send requests (Ray names each process after its actor)."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any("MapBatches(Sender)" in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


@pytest.mark.slow
def test_workers_killed_mid_run_cost_at_most_their_shards_unwritten_answers(ray_address, stub_process, tmp_path,
                                                                               capsys):
    proc, _, _, url, plan, folder = _start_and_wait_for_30_percent(tmp_path, stub_process, ray_address, capsys)
    senders = _senders()
    assert senders, "no Sender worker was found while the run was going"
    asked_before = _stats(url)["total"]
    for sender in senders:
        sender.kill()  # SIGKILL: every worker is lost with what it holds
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    total = _stats(url)["total"]
    shard = max(len(p.read_bytes().splitlines()) for p in folder.glob("round1-*.jsonl")
                if not p.name.endswith(".out.jsonl"))
    print(f"ray workers killed: {len(senders)} with {asked_before} asked and {_answered(folder)} answers written; "
          f"plan {plan} requests, {total} asked in all ({total / plan:.3f} x the plan; a shard holds {shard})")
    # A lost worker costs at most the unwritten answers of the shard it was reading (Ray Data hands the driver a
    # block's answers when the block is done, and runs a lost block again on a new actor); the rest is asked once.
    assert total > asked_before and plan <= total <= plan + len(senders) * shard, (total, plan, shard)
    assert main(score(tmp_path, url, "online.jsonl")) == 0
    assert verdicts(tmp_path / "ray.jsonl") == verdicts(tmp_path / "online.jsonl")
    assert len(verdicts(tmp_path / "ray.jsonl")) == 40 * 4 * 4


def test_without_ray_the_flag_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    # A double for an environment without Ray: the import is made to fail (Ray is installed in this one).
    monkeypatch.setitem(sys.modules, "ray", None)
    write_items(tmp_path / "items.jsonl", dialogues=1)
    assert main(score(tmp_path, "http://127.0.0.1:9/v1", "o.jsonl", "--executor", "ray")) == 2
    assert 'needs Ray Data: pip install ".[ray]"' in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl.ray-batches").exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--ray-address", "127.0.0.1:6379"], "--ray-address names the Ray cluster of --executor ray"),
    (["--executor", "ray", "--batch"], "--executor ray runs the batch rounds on Ray, --batch sends them"),
    (["--executor", "ray", "--backend", "vllm", "--model", "./no-such-model"],
     "--model ./no-such-model: no such model folder"),  # checked by the driver before a worker loads it
])
def test_bad_flags_are_refused_before_anything_is_written(tmp_path, capsys, extra, message):
    write_items(tmp_path / "items.jsonl", dialogues=1)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(score(tmp_path, "http://127.0.0.1:9/v1", "o.jsonl", *extra)) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "o.jsonl") == before

