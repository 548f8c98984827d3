"""`judge score --batch` against a real HTTP server implementing the OpenAI Batch API (tests/batch_server.py),
driven by the real `openai` SDK; and `--batch-dir` files answered by a runner.

The contract: the same judgment lines as the online path against the same answers; nothing paid twice (a killed
run resumes polling its batches, an expired batch's finished answers are kept and only the missing requests go
out again); per-request errors in both shapes recorded, retryable ones resent; bad input refused in one line with
exit 2 before anything is submitted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_server import BatchServer
from pydantic import TypeAdapter

from judge.backends import batch as batching
from judge.backends import batch_api, batch_dir
from judge.cache import request_key
from judge.cli import main
from judge.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
RUBRIC = "call_centre_fr"  # 4 criteria, one gated: 14 requests in the first round, 4 in the second
UNGATED = ",".join(c.id for c in load_rubric(RUBRIC).criteria if c.gate is None)
SECRET = "sk-batch-secret"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    monkeypatch.setattr(batch_api, "POLL_FIRST", 0.01)
    monkeypatch.setattr(batch_api, "POLL_MAX", 0.05)


@pytest.fixture
def server():
    s = BatchServer().start()
    yield s
    s.stop()


def args(base_url: str, tmp_path: Path, *extra: str, output: str = "out.jsonl", cache: str = "cache") -> list[str]:
    return ["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(tmp_path / output),
            "--backend", "openai", "--base-url", base_url, "--model", "stub", "--cache", str(tmp_path / cache),
            "--no-progress", *extra]


def lines(path: Path) -> list[dict]:
    return sorted((json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()),
                  key=lambda r: (r["id"], r["system"], r["criterion"]))


def uploaded(server: BatchServer) -> list[list[dict]]:
    """The request lines of every batch input file the server received, in order."""
    return [[json.loads(x) for x in f["data"].decode().splitlines()] for f in server.files.values()
            if f["meta"]["purpose"] == "batch"]


REQUEST = None


def valid_request(line: dict) -> None:
    """A batch line as the OpenAI API defines it, its body checked against the SDK's own request type."""
    global REQUEST
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    REQUEST = REQUEST or TypeAdapter(CompletionCreateParamsNonStreaming)
    assert set(line) == {"custom_id", "method", "url", "body"}
    assert line["method"] == "POST" and line["url"] == "/v1/chat/completions" and len(line["custom_id"]) == 64
    REQUEST.validate_python(line["body"], strict=False)
    assert set(line["body"]) <= set(CompletionCreateParamsNonStreaming.__annotations__) | {"stream"}


# -- the happy path ------------------------------------------------------------------------------------------------
def test_a_batch_run_writes_the_same_lines_as_the_online_path(server, tmp_path, capsys):
    assert main(args(server.base_url, tmp_path, "--batch")) == 0
    err = capsys.readouterr().err
    assert server.created == 2  # round 1: 12 ungated judgments and 2 gates; round 2: the 4 gated judgments
    assert [len(f) for f in uploaded(server)] == [14, 4]
    for file in uploaded(server):
        for line in file:
            valid_request(line)
    assert "by batch: 18 answers; 18 requests sent in 2 batch file(s) over 2 round(s)" in err and "batch price" in err
    assert "; 18 requests, 0 retries;" in err  # each counted once: when its answer is read, not when filed
    billed = err.split("this run's batches: ")[1].split(";")[0]
    assert billed.startswith("18 answers, tokens ") and " 0 prompt" not in billed and " (0 cached)" not in billed
    assert "0 answers collected from batches submitted earlier (tokens 0 prompt (0 cached) / 0 completion" in err
    assert "cached:" in err and "prefix-cache hit rate" in err  # the stub reports half the prompt as cached
    assert main(args(server.base_url, tmp_path, output="online.jsonl", cache="cache2")) == 0
    batch, online = lines(tmp_path / "out.jsonl"), lines(tmp_path / "online.jsonl")
    assert len(batch) == 16 and batch == online
    assert all(r["served"] == {"model": "stub", "system_fingerprint": "fp_stub", "engine": None,
                               "model_digest": None} for r in batch)
    assert all(r["usage"]["cached_tokens"] > 0 for r in batch if r["criterion"] != "x")
    manifest = json.loads((tmp_path / "out.jsonl.batches.json").read_text())
    assert [b["status"] for b in manifest["batches"]] == ["completed", "completed"]
    assert sum(b["requests"] for b in manifest["batches"]) == 18
    assert SECRET not in (tmp_path / "out.jsonl.batches.json").read_text()


def test_a_rerun_of_a_finished_run_submits_nothing(server, tmp_path, capsys):
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    (tmp_path / "out.jsonl").write_text("")  # lose every judgment; the finished batches still hold the answers
    capsys.readouterr()
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    assert server.created == 2 and server.uploads == 2
    assert len(lines(tmp_path / "out.jsonl")) == 16
    err = capsys.readouterr().err  # nothing billed to this run; the earlier run's answers counted apart
    assert "this run's batches: 0 answers, tokens 0 prompt (0 cached) / 0 completion; 18 answers collected " \
           "from batches submitted earlier (tokens " in err


def test_a_manifest_written_with_its_custom_ids_inline_is_still_read(server, tmp_path):
    """Manifests written before the ids had files of their own keep them in each entry: a rerun collects from them."""
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    path = tmp_path / "out.jsonl.batches.json"
    manifest = json.loads(path.read_text())
    ids = tmp_path / "out.jsonl.batches.ids"
    for entry in manifest["batches"]:
        entry["custom_ids"] = (ids / entry.pop("ids")).read_text().split()
    assert sum(len(e["custom_ids"]) for e in manifest["batches"]) == 18
    path.write_text(json.dumps(manifest))
    shutil.rmtree(ids)  # as an older version left the folder
    (tmp_path / ".judge-written.json").unlink()
    (tmp_path / "out.jsonl").write_text("")  # the answers are needed again
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    assert server.created == 2 and len(lines(tmp_path / "out.jsonl")) == 16


def cut_output(server: BatchServer, keep: int) -> list[dict]:
    """Cut the first batch's output file in the middle of the line after the first `keep` (a provider's file, or a
    download, cut short); return the records left whole."""
    batch = next(iter(server.batches.values()))
    file = server.files[batch["output_file_id"]]
    rows = file["data"].split(b"\n")
    file["data"] = b"\n".join([*rows[:keep], rows[keep][: len(rows[keep]) // 2]])
    return [json.loads(x) for x in rows[:keep]]


def test_a_provider_results_file_cut_short_resends_only_the_missing(server, tmp_path):
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache", "--criteria", UNGATED)) == 0
    whole = cut_output(server, 5)
    (tmp_path / "out.jsonl").write_text("")  # the answers are needed again
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache", "--criteria", UNGATED)) == 0
    assert server.created == 2
    assert {x["custom_id"] for x in uploaded(server)[1]} == \
        {x["custom_id"] for x in uploaded(server)[0]} - {r["custom_id"] for r in whole}
    assert len(lines(tmp_path / "out.jsonl")) == 12 and not any(r["error"] for r in lines(tmp_path / "out.jsonl"))


def test_an_unreadable_line_inside_a_provider_results_file_is_one_line_naming_it(server, tmp_path, capsys):
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache", "--criteria", UNGATED)) == 0
    batch = next(iter(server.batches.values()))
    file = server.files[batch["output_file_id"]]
    rows = file["data"].split(b"\n")
    rows[2] = rows[2][:40]
    file["data"] = b"\n".join(rows)
    (tmp_path / "out.jsonl").write_text("")
    capsys.readouterr()
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache", "--criteria", UNGATED)) != 0
    err = capsys.readouterr().err.strip()
    assert f"the output file {batch['output_file_id']} of batch {batch['id']}:3: not valid JSON" in err, err
    assert "Traceback" not in err and server.created == 1


# -- nothing paid twice when a create's answer is lost ---------------------------------------------------------
@pytest.mark.parametrize("fault", ["lose_create", "refuse_create"])
def test_a_failed_batch_create_is_looked_up_before_creating_again(server, tmp_path, fault):
    setattr(server.batch, fault, 1)  # a 502 after creating the batch, or before
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    manifest = json.loads((tmp_path / "out.jsonl.batches.json").read_text())
    assert server.created == 1 and server.uploads == 1
    assert [b["batch_id"] for b in manifest["batches"]] == list(server.batches)  # the one paid for is recorded
    assert set(server.stats.received.values()) == {1}
    assert len(lines(tmp_path / "out.jsonl")) == 12


# -- what reaches disk -----------------------------------------------------------------------------------------
def test_a_server_url_with_credentials_never_reaches_disk(server, tmp_path, monkeypatch, capsys):
    url = server.base_url.replace("://", "://judge-user:tok-url-secret@")
    assert main(args(url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    assert main(args(url, tmp_path, "--batch-dir", str(tmp_path / "d"), "--criteria", UNGATED,
                     output="dir.jsonl", cache="cache2")) == 3
    manifest = json.loads((tmp_path / "out.jsonl.batches.json").read_text())
    assert manifest["server"] == server.base_url.replace("://", "://[redacted]@")
    for path in tmp_path.rglob("*"):
        if path.is_file() and "cache" not in path.parts:
            assert b"tok-url-secret" not in path.read_bytes() and b"judge-user" not in path.read_bytes(), path
    assert "tok-url-secret" not in capsys.readouterr().err
    # `judge batch status` needs the URL in full: from --base-url or $OPENAI_BASE_URL, never from the manifest
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl")]) == 2
    assert "--base-url, or $OPENAI_BASE_URL" in capsys.readouterr().err
    other = url.replace("tok-url-secret", "x").replace("127.0.0.1", "localhost")
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl"), "--base-url", other]) == 2
    err = capsys.readouterr().err
    assert "--base-url is not the server the batches went to" in err and "tok-url-secret" not in err
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl"), "--base-url", url]) == 0
    assert ": completed, 12/12 completed" in capsys.readouterr().out
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert ": completed, 12/12 completed" in capsys.readouterr().out


def test_public_url_masks_credentials_in_any_place():
    from judge.secrets import Redactor

    assert batching.public_url("https://u:p@host:8/v1?api-key=k1&region=eu", Redactor()) == \
        "https://[redacted]@host:8/v1?api-key=[redacted]"
    assert batching.public_url("https://host/v1?token=abc&x=1", Redactor()) == \
        "https://host/v1?token=[redacted]&x=[redacted]"
    assert batching.public_url("https://tok@host/v1", Redactor()) == "https://[redacted]@host/v1"
    assert batching.public_url("http://host/v1", Redactor()) == "http://host/v1"
    assert batching.public_url(None) == "the OpenAI API"


def test_a_results_file_cut_in_the_middle_resumes_from_the_finished_batches(server, tmp_path):
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    out = tmp_path / "out.jsonl"
    text = out.read_text()
    out.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # the last line torn by a crash
    assert main(args(server.base_url, tmp_path, "--batch", "--no-cache")) == 0
    assert server.created == 2  # its answer came from the finished batch: nothing paid twice
    assert len(lines(out)) == 16


# -- nothing paid twice ----------------------------------------------------------------------------------------
def start_cli(base_url: str, tmp_path: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "JUDGE_BATCH_POLL_SECONDS": "0.05",
           "PYTHONFAULTHANDLER": "1"}
    argv = [a for a in args(base_url, tmp_path, "--batch", *extra) if a != "--no-progress"]
    # Ctrl-C as a user's terminal delivers it, even when these tests run from a background job (which ignores it).
    return subprocess.Popen([sys.executable, "-m", "judge.cli", *argv], env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def batch_submitted(manifest: Path) -> bool:
    """The manifest records a submitted batch: an entry with a batch id (the text "batch_" alone also matches the
    key `"batch_id": null` written before the submission, a race that could hang the suite)."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not written yet, or being replaced
        return False
    return any(isinstance(entry, dict) and entry.get("batch_id") for entry in data.get("batches", []))


def wait_for(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow  # a `judge` process of its own, killed
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_run_killed_while_polling_resumes_without_submitting_again(server, tmp_path, how):
    server.batch.hold = True
    proc = start_cli(server.base_url, tmp_path, "--criteria", UNGATED)
    manifest = tmp_path / "out.jsonl.batches.json"
    wait_for(lambda: server.created == 1 and manifest.exists() and '"batch_id": "batch_' in manifest.read_text())
    time.sleep(0.3)  # a few polls
    proc.send_signal(how)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a hang: its threads' stacks (faulthandler, on SIGABRT) say where
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"the run did not stop within 30 s of {how.name}; its stderr:\n{err[-6000:]}")
    assert "batch round 1: 1 of 1 batch(es) in_progress; 0/12 requests completed" in err  # progress while waiting
    server.batch.hold = False
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    assert server.created == 1 and server.uploads == 1  # polled the same batch
    assert len(lines(tmp_path / "out.jsonl")) == 12
    assert set(server.stats.received.values()) == {1}


def test_a_crash_between_creating_a_batch_and_recording_it_is_adopted_not_paid_twice(server, tmp_path, monkeypatch):
    saves, save = [], batch_api.Manifest.save

    def crash_on_recording_the_batch(self):
        saves.append(1)
        if len(saves) == 2:  # the batch exists on the server; its id never reaches the manifest
            raise OSError(28, "No space left on device")  # the process dies here, in effect
        save(self)

    monkeypatch.setattr(batch_api.Manifest, "save", crash_on_recording_the_batch)
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 2
    monkeypatch.setattr(batch_api.Manifest, "save", save)
    manifest = json.loads((tmp_path / "out.jsonl.batches.json").read_text())
    assert server.created == 1 and manifest["batches"][0]["batch_id"] is None
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    assert server.created == 1 and server.uploads == 1  # found by its input file and polled
    assert len(lines(tmp_path / "out.jsonl")) == 12


def test_the_same_run_started_twice_at_once_submits_once(server, tmp_path, capsys):
    import fcntl

    lock = tmp_path / "out.jsonl.batches.lock"  # what a first run, still polling, holds
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        capsys.readouterr()
        assert main(args(server.base_url, tmp_path, "--batch")) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "another judge run is submitting or polling these batches" in err, err
        assert (server.created, server.uploads) == (0, 0) and not (tmp_path / "out.jsonl").exists()
    assert main(args(server.base_url, tmp_path, "--batch")) == 0  # the first run gone, the same command runs
    assert server.created >= 1


def test_a_half_expired_batch_resends_only_the_missing(server, tmp_path):
    server.batch.expire_after = 5
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    first, second = uploaded(server)[:2]
    answered = {line["custom_id"] for line in first[:5]}
    assert {line["custom_id"] for line in second} == {line["custom_id"] for line in first} - answered
    assert [b["status"] for b in server.batches.values()][0] == "expired"
    assert set(server.stats.received.values()) == {1}  # no request ran twice
    assert len(lines(tmp_path / "out.jsonl")) == 12


@pytest.mark.slow  # a `judge` process of its own, killed
def test_status_and_cancel_then_a_rerun_sends_the_cancelled_requests_again(server, tmp_path, capsys):
    server.batch.hold = True
    proc = start_cli(server.base_url, tmp_path, "--criteria", UNGATED, "--no-progress")
    wait_for(lambda: server.created == 1 and batch_submitted(tmp_path / "out.jsonl.batches.json"))
    proc.kill()
    proc.wait()
    capsys.readouterr()
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert "in_progress, 0/12 completed" in capsys.readouterr().out
    assert main(["batch", "cancel", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert main(["batch", "status", "--output", str(tmp_path / "out.jsonl")]) == 0
    assert ": cancelled" in capsys.readouterr().out
    server.batch.hold = False
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    assert server.created == 2 and len(uploaded(server)[1]) == 12
    assert len(lines(tmp_path / "out.jsonl")) == 12


def test_answers_out_of_order_and_each_different_map_back_by_custom_id(server, tmp_path):
    """Half the questions answered with the scale's top, half with its bottom (by question), the output file
    shuffled: every verdict must be the one the online endpoint gives for that very question."""
    server.configure(changed_share=0.5)
    server.batch.shuffle = True
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    assert main(args(server.base_url, tmp_path, "--criteria", UNGATED, output="online.jsonl", cache="cache2")) == 0
    verdicts = lambda path: [(r["id"], r["system"], r["criterion"], r["score"]) for r in lines(path)]  # noqa: E731
    online = verdicts(tmp_path / "online.jsonl")
    assert verdicts(tmp_path / "out.jsonl") == online and len({v[3] for v in online}) == 2  # differ, and match


@pytest.mark.slow  # a `judge` process of its own, polling while another cancels
def test_a_cancel_sticks_while_a_run_polls(server, tmp_path, capsys):
    """`judge batch cancel` while the run that submitted the batch still polls it: the run records the cancelled
    requests as failed (exit 1) and submits nothing again (it resubmitted them, and paid, before)."""
    server.batch.hold = True
    proc = start_cli(server.base_url, tmp_path, "--criteria", UNGATED, "--no-progress")
    wait_for(lambda: server.created == 1 and batch_submitted(tmp_path / "out.jsonl.batches.json"))
    assert main(["batch", "cancel", "--output", str(tmp_path / "out.jsonl")]) == 0
    server.batch.hold = False
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert server.created == 1  # nothing submitted again
    records = lines(tmp_path / "out.jsonl")
    assert len(records) == 12 and all("was cancelled before this request ran" in r["error"] for r in records)
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0  # asked: sent again
    assert server.created == 2 and len(lines(tmp_path / "out.jsonl")) == 12


# -- per-request errors and validation --------------------------------------------------------------------------
def test_errors_in_both_shapes_are_recorded_and_retryable_ones_resent(server, tmp_path, capsys):
    server.batch.line_faults = [("400", 1), ("error", 1)]
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 1
    records = lines(tmp_path / "out.jsonl")
    failed = [r for r in records if r["error"]]
    assert len(records) == 12 and len(failed) == 1
    assert failed[0]["error"].startswith("BackendError: HTTP 400:") and "context_length_exceeded" in failed[0]["error"]
    assert server.created == 2 and len(uploaded(server)[1]) == 1  # the server_error line went out again
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0  # a rerun retries the 400
    assert server.created == 3 and not any(r["error"] for r in lines(tmp_path / "out.jsonl"))


def test_a_batch_failing_validation_names_the_line_and_the_reason(server, tmp_path):
    server.batch.models = {"another-model"}
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 1
    records = lines(tmp_path / "out.jsonl")
    assert len(records) == 12
    for r in records:
        assert "failed validation: line 1: The provided model 'stub' is not supported by the Batch API. " \
               "(model_not_found)" in r["error"]


def test_a_run_needing_re_asks_and_gates_takes_more_rounds_and_completes(server, tmp_path, capsys):
    server.batch.line_faults = [("cut", 3)]  # three answers cut in half: asked again with the complaint
    assert main(args(server.base_url, tmp_path, "--batch")) == 0
    err = capsys.readouterr().err
    records = lines(tmp_path / "out.jsonl")
    assert len(records) == 16 and not any(r["error"] for r in records)
    sizes = [len(f) for f in uploaded(server)]
    # Round 1: the 12 ungated questions and the 2 gates; the 4 gated questions and the 3 re-asks follow, in one
    # round, or in two when a gate's answer was among the cut ones (its criterion waits for the gate's re-ask).
    assert sizes[0] == 14 and sizes[1:] in ([7], [3, 4])
    reasks = [line for f in uploaded(server) for line in f if len(line["body"]["messages"]) > 2]
    assert len(reasks) == 3 and all("cannot be used" in r["body"]["messages"][-1]["content"] for r in reasks)
    assert f"over {len(sizes)} round(s)" in err


@pytest.mark.parametrize("limit", ["requests", "bytes"])
def test_files_above_the_limits_are_split(server, tmp_path, monkeypatch, limit):
    if limit == "requests":
        monkeypatch.setattr(batching, "MAX_REQUESTS", 5)  # 4 with the margin
    else:
        monkeypatch.setattr(batching, "MAX_BYTES", 12_000)  # each request is about 3 kB
    assert main(args(server.base_url, tmp_path, "--batch", "--criteria", UNGATED)) == 0
    files = uploaded(server)
    assert len(files) >= 3 and sum(len(f) for f in files) == 12
    for f in files:
        if limit == "requests":
            assert len(f) <= 4
        else:
            assert sum(len(json.dumps(x, ensure_ascii=False, separators=(",", ":")).encode()) + 1 for x in f) <= 10_800
        for line in f:
            valid_request(line)
    assert len(lines(tmp_path / "out.jsonl")) == 12


# -- --batch-dir: files for any runner -------------------------------------------------------------------------
def run_through(server: BatchServer, paths: list[Path]) -> None:
    """A runner for batch files: the Batch API server, driven by the SDK, writing each FILE.out.jsonl."""
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    for path in paths:
        file = client.files.create(file=path.open("rb"), purpose="batch")
        job = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
        while (job := client.batches.retrieve(job.id)).status not in ("completed", "failed"):
            pass
        out = path.with_name(path.name.removesuffix(".jsonl") + ".out.jsonl")
        out.write_bytes(client.files.content(job.output_file_id).content)


def test_batch_dir_rounds_until_done_give_the_online_lines(server, tmp_path, capsys):
    folder = tmp_path / "batches"
    run = args(server.base_url, tmp_path, "--batch-dir", str(folder), "--shards", "2")
    assert main(run) == 3
    err = capsys.readouterr().err
    first = sorted(folder.glob("round1-*.jsonl"))
    assert [p.name for p in first] == ["round1-001.jsonl", "round1-002.jsonl"]
    assert f"vllm run-batch -i {first[0]} -o {folder / 'round1-001.out.jsonl'} --model stub" in err
    assert not (tmp_path / "out.jsonl").read_text()  # nothing judged yet
    assert main(run) == 3 and server.created == 0  # rerun before the runner: the same files still wait
    assert sorted(folder.glob("round*.jsonl")) == first
    run_through(server, first)
    assert main(run) == 3  # round 1 recorded; round 2 (the gated criterion) written
    assert len(lines(tmp_path / "out.jsonl")) == 12
    second = sorted(folder.glob("round2-*.jsonl"))
    assert second and sum(len(p.read_text().splitlines()) for p in second) == 4
    run_through(server, second)
    assert main(run) == 0
    assert main(args(server.base_url, tmp_path, output="online.jsonl", cache="cache2")) == 0
    assert lines(tmp_path / "out.jsonl") == lines(tmp_path / "online.jsonl")


@pytest.mark.parametrize("newline", [False, True])
def test_batch_dir_an_answer_file_with_a_cut_last_line_resends_that_request(server, tmp_path, newline):
    folder = tmp_path / "batches"
    run = args(server.base_url, tmp_path, "--batch-dir", str(folder), "--criteria", UNGATED)
    assert main(run) == 3
    run_through(server, [folder / "round1-001.jsonl"])
    out = folder / "round1-001.out.jsonl"
    rows = [json.dumps(json.loads(x), ensure_ascii=False).encode() for x in out.read_bytes().split(b"\n")[:-1]]
    rows[-1] = rows[-1].replace(b'"id"', '"éid"'.encode(), 1)  # as vLLM writes: UTF-8, not \u escapes
    cut = rows[-1][: rows[-1].index("é".encode()) + 1]  # inside a two-byte character, as a killed writer leaves it
    out.write_bytes(b"\n".join([*rows[:-1], cut]) + (b"\n" if newline else b""))
    assert main(run) == 3  # 11 recorded; the cut one written again
    assert len(lines(tmp_path / "out.jsonl")) == 11
    again = [json.loads(x) for x in (folder / "round2-001.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in again] == [json.loads(rows[-1])["custom_id"]]
    run_through(server, [folder / "round2-001.jsonl"])
    assert main(run) == 0 and len(lines(tmp_path / "out.jsonl")) == 12


def test_batch_dir_request_files_not_proven_ours_are_checked_line_by_line_and_read_alike(server, tmp_path):
    """A request file whose digest is in the folder's registry is read for its ids only; without the registry
    (copied elsewhere, or the registry lost) every line is checked, and the answers are the same."""
    folders = {}
    for name in ("proven", "unproven"):
        work = tmp_path / name
        work.mkdir()
        folder = folders[name] = work / "batches"
        run = args(server.base_url, work, "--batch-dir", str(folder), "--criteria", UNGATED)
        assert main(run) == 3
        run_through(server, [folder / "round1-001.jsonl"])
        if name == "unproven":
            (folder / ".judge-written.json").unlink()
        assert main(run) == 0
    proven, unproven = (lines(tmp_path / n / "out.jsonl") for n in ("proven", "unproven"))
    assert len(proven) == 4 * len(UNGATED.split(",")) and \
        [(j["id"], j["system"], j["criterion"], j["score"]) for j in proven] == \
        [(j["id"], j["system"], j["criterion"], j["score"]) for j in unproven]


@pytest.mark.parametrize("tail", [3, 1000])  # rows merged into the sorted arrays, or all still in the dict
def test_the_key_index_gives_each_key_its_rows_oldest_first(monkeypatch, tail):
    import random

    from judge.backends import keyindex

    monkeypatch.setattr(keyindex, "TAIL", tail)
    keys = [request_key({"n": n}) for n in range(60)]
    keys.append(keys[0][:16] + "0" * 48)  # the same first 64 bits as another key
    index, expected, chance = keyindex.KeyIndex(2), {}, random.Random(7)
    for step in range(500):
        key = chance.choice(keys)
        row = (step, chance.randint(-3, 10**15))
        index.add(key, *row)
        expected.setdefault(key, []).append(row)
    assert len(index) == 500
    for key in keys + ["f" * 64]:
        assert index.rows(key) == expected.get(key, []) and (key in index) == (key in expected)
        assert index.last(key) == (expected[key][-1] if key in expected else None)
    with pytest.raises(ValueError):
        index.add(keys[0], 1)


# -- bad input: one line, exit 2, nothing submitted or written half ---------------------------------------------
def _other_run_out(tmp_path: Path, server) -> list[str]:
    folder = tmp_path / "batches"
    assert main(args(server.base_url, tmp_path, "--batch-dir", str(folder))) == 3
    (folder / "round1-001.out.jsonl").write_text(json.dumps({"id": "x", "custom_id": "f" * 64, "response": {
        "status_code": 200, "body": {}}, "error": None}) + "\n")
    return ["--batch-dir", str(folder)]


def _answered_first_round(tmp_path: Path, server) -> tuple[Path, Path]:
    """A --batch-dir run that wrote its requests, and the runner's answers to the first file: (folder, answers)."""
    folder = tmp_path / "batches"
    assert main(args(server.base_url, tmp_path, "--batch-dir", str(folder), "--criteria", UNGATED)) == 3
    run_through(server, [folder / "round1-001.jsonl"])
    return folder, folder / "round1-001.out.jsonl"


def _wrong_model_out(tmp_path: Path, server) -> list[str]:
    folder, out = _answered_first_round(tmp_path, server)
    out.write_text(out.read_text().replace('"model": "stub"', '"model": "another"'))
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _edited_request(tmp_path: Path, server) -> list[str]:
    folder = tmp_path / "batches"
    assert main(args(server.base_url, tmp_path, "--batch-dir", str(folder), "--criteria", UNGATED)) == 3
    path = folder / "round1-001.jsonl"
    path.write_text(path.read_text().replace('"model":"stub"', '"model":"another"'))  # custom_ids kept
    run_through(server, [path])
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _edited_request_rekeyed(tmp_path: Path, server) -> list[str]:
    from judge.cache import request_key

    folder = tmp_path / "batches"
    assert main(args(server.base_url, tmp_path, "--batch-dir", str(folder), "--criteria", UNGATED)) == 3
    path = folder / "round1-001.jsonl"
    edited = []
    for line in map(json.loads, path.read_text().splitlines()):
        line["body"]["model"] = "another"
        edited.append(batching.batch_line(request_key(line["body"]), line["body"]))  # custom_ids made to match
    path.write_text("\n".join(edited) + "\n")
    run_through(server, [path])
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _unreadable_answer_line(tmp_path: Path, server) -> list[str]:
    folder, out = _answered_first_round(tmp_path, server)
    rows = out.read_text().splitlines()
    rows[4] = rows[4][:30]
    out.write_text("\n".join(rows) + "\n")
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _rubric_edited_while_batches_run(tmp_path: Path, server) -> list[str]:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text((ROOT / "rubrics" / f"{RUBRIC}.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    server.batch.hold = True
    proc = start_cli(server.base_url, tmp_path, "--rubric", str(rubric), "--criteria", UNGATED, "--no-progress")
    wait_for(lambda: server.created == 1 and batch_submitted(tmp_path / "out.jsonl.batches.json"))
    proc.kill()
    proc.wait()
    server.batch.hold = False  # so that a rerun that submits again would finish, not hang
    text = rubric.read_text(encoding="utf-8")
    rubric.write_text(text.replace("n'ajoutez pas de", "n'ajoutez jamais de"), encoding="utf-8")
    assert rubric.read_text(encoding="utf-8") != text
    return ["--batch", "--rubric", str(rubric), "--criteria", UNGATED]


def _other_command_manifest(tmp_path: Path, server) -> list[str]:
    server.batch.hold = True
    proc = start_cli(server.base_url, tmp_path, "--criteria", UNGATED, "--no-progress")
    wait_for(lambda: server.created == 1 and batch_submitted(tmp_path / "out.jsonl.batches.json"))
    proc.kill()
    proc.wait()
    return ["--batch", "--criteria", "faithfulness"]


def _batch_gone(tmp_path: Path, server) -> list[str]:
    _other_command_manifest(tmp_path, server)
    server.batches.clear()  # the provider no longer knows the batch the manifest records
    return ["--batch", "--criteria", UNGATED]


def _not_a_key_out(tmp_path: Path, server) -> list[str]:
    folder, out = _answered_first_round(tmp_path, server)
    rows = out.read_text().splitlines()
    rows[2] = json.dumps({**json.loads(rows[2]), "custom_id": "request-3"})  # a runner that numbers its lines
    out.write_text("\n".join(rows) + "\n")
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _line_added_to_a_request_file(tmp_path: Path, server) -> list[str]:
    folder = tmp_path / "batches"
    assert main(args(server.base_url, tmp_path, "--batch-dir", str(folder), "--criteria", UNGATED)) == 3
    path = folder / "round1-001.jsonl"
    first = json.loads(path.read_text().splitlines()[0])
    first["body"]["seed"] += 1  # another request under the first one's custom_id: the file is no longer ours
    with path.open("a") as handle:
        handle.write(json.dumps(first) + "\n")
    return ["--batch-dir", str(folder), "--criteria", UNGATED]


def _ids_file_lost(tmp_path: Path, server) -> list[str]:
    _other_command_manifest(tmp_path, server)  # a batch submitted and still running
    (tmp_path / "out.jsonl.batches.ids" / "00000.txt").unlink()
    return ["--batch", "--criteria", UNGATED]


def _ids_file_cut(tmp_path: Path, server) -> list[str]:
    _other_command_manifest(tmp_path, server)
    ids = tmp_path / "out.jsonl.batches.ids" / "00000.txt"
    ids.write_text("".join(ids.read_text().splitlines(keepends=True)[:-2]))
    return ["--batch", "--criteria", UNGATED]


def _ids_file_edited(tmp_path: Path, server) -> list[str]:
    _other_command_manifest(tmp_path, server)
    ids = tmp_path / "out.jsonl.batches.ids" / "00000.txt"
    rows = ids.read_text().splitlines()
    ids.write_text("\n".join(["my note", *rows[1:]]) + "\n")
    return ["--batch", "--criteria", UNGATED]


def _garbage_manifest(tmp_path: Path, server) -> list[str]:
    (tmp_path / "out.jsonl.batches.json").write_text("my notes\n")
    return ["--batch"]


BAD = [  # (case, setup returning the extra flags, expected message)
    ("embedded backend", lambda t, s: ["--batch", "--backend", "local"],
     "the embedded llama.cpp server has no Batch API"),
    ("vLLM engine", lambda t, s: ["--batch", "--backend", "vllm"], "the in-process vLLM engine has no Batch API"),
    ("no batch endpoints", lambda t, s: setattr(s.batch, "disabled", True) or ["--batch"],
     "has no /v1/batches endpoint"),
    ("both", lambda t, s: ["--batch", "--batch-dir", str(t / "d")], "choose one"),
    ("shards alone", lambda t, s: ["--batch", "--shards", "2"], "--shards splits the files of --batch-dir"),
    ("zero shards", lambda t, s: ["--batch-dir", str(t / "d"), "--shards", "0"], "--shards must be at least 1"),
    ("out file from another run", _other_run_out, "is not a request of round1-001.jsonl"),
    ("out file from another model", _wrong_model_out, "answered by model 'another', but the request asked for 'stub'"),
    ("manifest of another command", _other_command_manifest, "belongs to another command"),
    ("rubric edited while its batches run", _rubric_edited_while_batches_run, "belongs to another command"),
    ("request edited in its batch file", _edited_request,
     "round1-001.jsonl:1: the request is not the one its custom_id names"),
    ("request edited with its custom_id", _edited_request_rekeyed,
     "round1-001.jsonl:1: asks model 'another', this run asks 'stub'"),
    ("unreadable line in an answer file", _unreadable_answer_line, "round1-001.out.jsonl:5: not valid JSON"),
    ("an answer whose custom_id is not a key", _not_a_key_out, "round1-001.out.jsonl:3: custom_id request-3... is not "
     "a request of round1-001.jsonl"),
    ("a line added to a request file", _line_added_to_a_request_file, "the request is not the one its custom_id names"),
    ("not a manifest", _garbage_manifest, "not a batch manifest"),
    ("a batch's custom_ids file lost", _ids_file_lost, "out.jsonl.batches.ids/00000.txt: the custom_ids of batch "),
    ("a batch's custom_ids file cut short", _ids_file_cut, "00000.txt: holds 10 custom_ids where the manifest "
     "records 12 requests in batch "),
    ("a batch's custom_ids file edited", _ids_file_edited, "00000.txt:1: not a custom_id of this tool ('my note')"),
    ("a batch the provider lost", _batch_gone, "failed (HTTP 404): Error code: 404"),
]


@pytest.mark.parametrize("case,setup,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_in_one_line_before_anything_is_submitted(server, tmp_path, capsys, case, setup, message):
    extra = setup(tmp_path, server)
    if "--backend" in extra:
        i = extra.index("--backend")
        backend = extra[i + 1]
        extra = extra[:i] + extra[i + 2:]
        run = [a for a in args(server.base_url, tmp_path, *extra)]
        j = run.index("--backend")
        run[j + 1] = backend
        if backend == "local":
            k = run.index("--base-url")
            del run[k:k + 2]
    else:
        run = args(server.base_url, tmp_path, *extra)
    created, uploads = server.created, server.uploads
    out = tmp_path / "out.jsonl"
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "cache" not in p.parts}
    capsys.readouterr()
    assert main(run) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert (server.created, server.uploads) == (created, uploads)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "cache" not in p.parts}
    assert after == before  # nothing written, nothing changed
    assert not out.exists() or out.read_bytes() == before.get(out)


# -- rounds per rubric (the README's table) ----------------------------------------------------------------------
ROUNDS = [  # (verb, rubric, items, extra flags, rounds)
    ("score", "dialsummeval", lambda t: EXAMPLES, [], 1),
    ("score", "dialsummeval", lambda t: EXAMPLES, ["--mode", "block"], 1),
    ("score", "call_centre_fr", lambda t: EXAMPLES, [], 2),
    ("score", "response_quality", lambda t: ROOT / "examples" / "responses.jsonl", [], 1),
    ("compare", "pairwise_summary", lambda t: ROOT / "examples" / "pairs.jsonl", [], 1),
    # csds without segments in the items (2: the split, then the segments) needs a model that can split: not the stub
]


@pytest.mark.parametrize("verb,rubric,items,extra,rounds", ROUNDS, ids=[f"{r[1]}{''.join(r[3])}" for r in ROUNDS])
def test_rounds_each_rubric_takes(server, tmp_path, capsys, verb, rubric, items, extra, rounds):
    run = ["--rubric", rubric, "--input", str(items(tmp_path)), "--output", str(tmp_path / "out.jsonl"),
           "--backend", "openai", "--base-url", server.base_url, "--model", "stub", "--no-cache", "--no-progress",
           "--batch", *extra]
    assert main([verb, *run]) == 0
    assert f"over {rounds} round(s)" in capsys.readouterr().err
    assert server.created == rounds


# -- every shape a result line comes in ----------------------------------------------------------------------------
OK_BODY = {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"},
                                      "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
SHAPES = [  # (what a runner or provider wrote, what the request gets)
    ({"response": {"status_code": 200, "body": OK_BODY}, "error": None}, "answer"),
    ({"response": None, "error": {"code": "batch_expired", "message": "expired"}}, "sent again"),
    ({"response": None, "error": {"code": "batch_cancelled", "message": "cancelled"}}, "sent again"),
    ({"response": None, "error": {"code": "server_error", "message": "boom"}}, "RetryableError"),
    ({"response": None, "error": {"code": "invalid_request", "message": "bad"}}, "BackendError"),
    ({"response": {"status_code": 400, "body": {"error": {"message": "too long"}}}, "error": None}, "BackendError"),
    ({"response": {"status_code": 429, "body": {"error": {"message": "slow down"}}}, "error": None}, "RetryableError"),
    # vLLM's run-batch: the status in `response`, the error (a string or an ErrorResponse) in `error`
    ({"response": {"status_code": 400, "request_id": "r", "body": None}, "error": "prompt too long"}, "BackendError"),
    ({"response": {"status_code": 400, "request_id": "r", "body": None},
      "error": {"error": {"message": "response_format json_schema is invalid", "code": 400}}},
     "ResponseFormatUnsupported"),
    ({"response": {"status_code": 200, "body": {"object": "error"}}, "error": None}, "RetryableError"),
    (None, "sent again"),
]


@pytest.mark.parametrize("record,expected", SHAPES)
def test_every_result_shape_becomes_an_answer_an_error_or_a_resend(record, expected):
    from judge.secrets import Redactor

    got = batching.result_of(record, Redactor())
    if expected == "answer":
        assert got["content"] == "{}" and got["served"]["model"] == "m"
    elif expected == "sent again":
        assert got is None
    else:
        assert type(got).__name__ == expected, got
        if expected == "RetryableError":
            assert got.retry_after == 0.0  # the next round, without a back-off


def _ids_by_lines(data: bytes, sha256: str) -> list[str] | None:
    """What batch_dir._ids_at_line_starts must give, read the plain way: each line's custom_id, or None when a line
    does not open as batch_line writes it or the digest differs."""
    import hashlib
    import re

    if hashlib.sha256(data).hexdigest() != sha256:
        return None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline ending the last line
    found = [re.match(rb'\{"custom_id":"([0-9a-f]{64})"', line) for line in lines]
    return None if not all(found) else [m.group(1).decode() for m in found]


@pytest.mark.parametrize("block", [1, 13, 81, 200, 1 << 20])  # a block boundary anywhere, even inside an id
def test_a_request_files_ids_are_read_off_its_lines_in_blocks_of_any_size(tmp_path, monkeypatch, block):
    import hashlib
    import random

    monkeypatch.setattr(batch_dir, "BLOCK", block)
    chance, path = random.Random(block), tmp_path / "round1-001.jsonl"
    for trial in range(300):
        lines = [batching.batch_line(request_key({"n": trial, "k": k}), {"n": "x" * chance.randint(0, 90)}).encode()
                 for k in range(chance.randint(0, 6))]
        data = b"\n".join(lines) + (b"\n" if chance.random() < 0.8 else b"")
        edit = chance.random()
        if edit < 0.25 and data:  # one byte changed: an id, a brace, a newline added or removed
            at = chance.randrange(len(data))
            data = data[:at] + bytes([chance.choice(b'\n{"aZ0')]) + data[at + 1:]
        elif edit < 0.35:
            data = chance.choice([b"\n", b"\n\n"]) + data if chance.random() < 0.5 else data + b"\n\n"
        path.write_bytes(data)
        for sha256 in (hashlib.sha256(data).hexdigest(), "0" * 64):
            assert batch_dir._ids_at_line_starts(path, sha256) == _ids_by_lines(data, sha256), data[:160]
