"""What can go wrong while `judge score` runs, or in a sheet coming back from annotators, as a user meets it: a full
disk, two runs on one file, repeated lines, a failing server or replica, a server answering as another model, a
sheet cut mid-row, spreadsheet formulas in untrusted text. Each through the real CLI, against the local stub server
(tests/stub_server.py) with the real OpenAI SDK where a server is needed; each checks that nothing was lost.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from annotation_sim import Annotator, fill_csv

from judge.annotation.csvsheet import FORMULA_STARTS, neutralised, plain
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
RUBRIC = "dialsummeval"  # 4 criteria: 16 judgments for the 4 examples
SDK = ["--backend", "openai", "--model", "stub", "--client", "sdk", "--no-progress", "--no-cache"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lines(path: Path) -> list[dict]:
    """Every line of a results file, each a whole JSON judgment (a torn line fails the test)."""
    data = path.read_text(encoding="utf-8")
    assert data == "" or data.endswith("\n"), "the file ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


def keys(records: list[dict]) -> list[tuple]:
    return [(r["id"], r["system"], r["criterion"]) for r in records]


def cli(*argv: str, limit_bytes: int | None = None, **kwargs) -> subprocess.Popen:
    """`judge ARGV` in its own process; `limit_bytes`: a file size limit (RLIMIT_FSIZE), its write failing with EFBIG
    as a full disk fails with ENOSPC."""
    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.Popen([sys.executable, "-m", "judge.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=limited if limit_bytes else None, **kwargs)


def finished(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, int]:
    """The child's stderr once it has ended, and its own peak memory in kB. os.wait4 reads that child's usage;
    RUSAGE_CHILDREN would give the largest of every child this test session has had."""
    err: list[str] = []
    readers = [threading.Thread(target=proc.stdout.read),  # drained, so a full pipe never blocks the child
               threading.Thread(target=lambda: err.append(proc.stderr.read()))]
    for reader in readers:
        reader.start()
    killer = threading.Timer(timeout, proc.kill)  # a hung run fails the test instead of hanging it
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    return err[0], usage.ru_maxrss


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))
    for name in ("JUDGE_BASE_URLS", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# -- part 4: a write error ends the run at once, keeping what was written -----------------------------------------
def test_a_full_disk_ends_the_run_at_once_keeping_whole_lines_in_bounded_memory(stub_server, tmp_path):
    """A file size limit makes the results file's writes fail as a full disk does (a small tmpfs would need root
    to mount): the run stops at the first failed write, says where and why, keeps every whole line (the torn one
    is cut away), stays small, and the same command then finishes the run without a duplicate."""
    items = tmp_path / "items.jsonl"
    shutil.copy(EXAMPLES, items)
    before = sha(items)
    out = tmp_path / "out.jsonl"
    argv = ["score", "--rubric", RUBRIC, "--input", str(items), "--output", str(out), "--base-url",
            stub_server.base_url, *SDK]
    started = time.monotonic()
    proc = cli(*argv, limit_bytes=6000)  # room for a few judgments of about 800 bytes
    err, used = finished(proc)
    assert proc.returncode == 2, err
    written = lines(out)
    assert re.fullmatch(rf"judge score: error: {re.escape(str(out))}: cannot be written \(File too large\); the "
                        rf"{len(written)} judgments this run wrote before are kept: free space \(or choose another "
                        r"--output\) and run the same command to resume\n", err), err
    assert 0 < len(written) < 16 and out.stat().st_size <= 6000
    assert time.monotonic() - started < 60 and used < 600_000, "the run went on, or its memory grew"
    assert stub_server.stats.total <= len(written) + 2 * 16, "it went on asking after the write failed"
    assert main(argv) == 0
    again = lines(out)
    assert sorted(keys(again)) == sorted(set(keys(again))) and len(again) == 16
    assert again[:len(written)] == written and sha(items) == before


def test_ctrl_c_stops_a_run_at_once_and_keeps_what_is_written(stub_server, tmp_path):
    stub_server.configure(latency_ms=300)
    out = tmp_path / "out.jsonl"
    proc = cli("score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
               stub_server.base_url, *SDK, "--concurrency", "1")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and out.read_bytes().count(b"\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == 130 and "interrupted: finished judgments are saved in" in err, err
    assert 2 <= len(lines(out)) < 16


# -- part 3: two runs on one file ---------------------------------------------------------------------------
def test_a_second_run_on_the_same_output_is_refused_while_the_first_runs(stub_server, tmp_path, capsys):
    stub_server.configure(latency_ms=200)
    out = tmp_path / "out.jsonl"
    argv = ["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
            stub_server.base_url, *SDK, "--concurrency", "1"]
    first = cli(*argv)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and out.stat().st_size):
        time.sleep(0.05)
    size = out.stat().st_size
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"judge score: error: {out}: another judge run is writing to this file now; wait for it to end (or "
                   "stop it), then run the same command: it resumes from what that run wrote\n")
    assert out.stat().st_size >= size
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    records = lines(out)
    assert len(records) == 16 and len(set(keys(records))) == 16, "a judgment written twice"
    assert main(argv) == 0 and "nothing to do: all 16 judgments" in capsys.readouterr().err
    assert not [p.name for p in tmp_path.iterdir() if p.name != out.name], "a lock file or a temporary file left"


def test_a_rerun_repairs_lines_it_can_prove_are_copies_and_says_so(stub_server, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    argv = ["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
            stub_server.base_url, *SDK]
    assert main(argv) == 0
    good = out.read_text(encoding="utf-8")
    doubled = good + "".join(good.splitlines(keepends=True)[:5])  # what two runs at once used to leave
    out.write_text(doubled, encoding="utf-8")
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"note: {out}: dropped 5 repeated line(s), each a copy of a judgment already in the file" in err
    assert "nothing to do: all 16 judgments" in err
    assert out.read_text(encoding="utf-8") == good


def test_a_repeated_line_with_another_verdict_is_refused_with_both_lines(stub_server, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    argv = ["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
            stub_server.base_url, *SDK]
    assert main(argv) == 0
    first = lines(out)[2]
    other = json.dumps({**first, "score": 5.0 if first["score"] != 5.0 else 1.0}, ensure_ascii=False)
    out.write_text(out.read_text(encoding="utf-8") + other + "\n", encoding="utf-8")
    before = sha(out)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"judge score: error: {out}:17: a second judgment of item {first['id']!r}, system "
                          f"{first['system']!r}, criterion {first['criterion']!r} (first on line 3), which has "
                          "another verdict: two runs wrote to this file at once"), err
    assert sha(out) == before


# -- part 4: failures with their cause; replicas; another model ---------------------------------------------
def test_failures_are_summarised_by_their_cause(stub_server, tmp_path, capsys):
    stub_server.configure(faults=[("500", -1)])
    out = tmp_path / "out.jsonl"
    assert main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
                 stub_server.base_url, *SDK, "--criteria", "coherence", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert "4 judgments failed (4× HTTP 500); their lines carry the error" in err, err
    assert "RetryableError" not in err


def test_requests_per_server_counts_a_failing_replicas_attempts(stub_server, tmp_path, capsys):
    from stub_server import StubServer

    failing = StubServer().start()
    try:
        failing.configure(faults=[("500", -1)])
        out = tmp_path / "out.jsonl"
        main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
              stub_server.base_url, "--base-url", failing.base_url, *SDK, "--criteria", "coherence,fluency"])
        err = capsys.readouterr().err
        sent = failing.stats.total
        assert sent > 0
        assert (f"requests per server: {stub_server.base_url} {stub_server.stats.total}, {failing.base_url} {sent} "
                f"({sent} failed: HTTP 500)") in err, err
    finally:
        failing.stop()


def test_a_server_answering_as_another_model_is_warned_of(stub_server, tmp_path, capsys):
    stub_server.configure(served_model="llama-3.1-8b-instruct")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
                 stub_server.base_url, *SDK, "--criteria", "coherence"]) == 0
    err = capsys.readouterr().err
    assert ("warning: asked for model 'stub', the server answered as 'llama-3.1-8b-instruct' (4 judgments): check "
            "--model and what the server serves") in err, err
    # A dated version of the model asked for is that model: no warning.
    stub_server.configure(served_model="stub-2024-07-18")
    assert main(["score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(tmp_path / "dated.jsonl"),
                 "--base-url", stub_server.base_url, *SDK, "--criteria", "coherence"]) == 0
    assert "answered as" not in capsys.readouterr().err


# -- part 2 and 4: annotation sheets --------------------------------------------------------------------------
FORMULAS = ["=cmd|' /C calc'!A0", "+1+2", "-2+3", "@SUM(A1:A9)", "\t=1+1", "\r=1+1", "'=quoted", "plain text"]


def formula_items(tmp_path: Path) -> Path:
    base = [json.loads(line) for line in (ROOT / "tests" / "fixtures" / "annotation" /
                                         "dialsummeval_items.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [{**row, "candidate": f"{FORMULAS[n % len(FORMULAS)]} #{n}"} for n, row in enumerate(base)]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_untrusted_text_in_a_csv_sheet_is_never_a_formula_and_round_trips(tmp_path, capsys):
    items = formula_items(tmp_path)
    before = sha(items)
    pkg = tmp_path / "pkg"
    assert main(["export", "--rubric", RUBRIC, "--input", str(items), "--format", "csv", "--output", str(pkg),
                 "--seed", "3", "--no-qualification"]) == 0
    with (pkg / "sheet.csv").open(newline="", encoding="utf-8") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert not [c for c in cells if c.startswith(FORMULA_STARTS)], "a cell a spreadsheet would run"
    shown = {plain(c) for c in cells}
    candidates = {json.loads(line)["candidate"] for line in items.read_text(encoding="utf-8").splitlines()}
    assert candidates <= shown, "a candidate does not read back as it was"
    people = {"ann1": Annotator(RUBRIC, items, seed=1)}
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, people)
    labels = tmp_path / "labels.csv"
    assert main(["import", "--from", str(filled), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 0
    with labels.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    got = {(r["item_id"], r["system"], r["annotator"], r["criterion"], r["score"], r["explanation"],
            r["segment_scores"]) for r in rows}
    assert got == people["ann1"].expected_rows("ann1") and sha(items) == before


@pytest.mark.parametrize("text", [*FORMULAS, "", "''", "'", "'plain", "-", "N/A"])
def test_a_neutralised_cell_reads_back_as_the_text_given(text):
    assert plain(neutralised(text)) == text
    assert not neutralised(text).startswith(FORMULA_STARTS)


@pytest.mark.parametrize("cut", ["inside a quoted cell", "between cells"])
def test_a_sheet_cut_mid_row_is_an_error_not_zero_labels(tmp_path, capsys, cut):
    pkg = tmp_path / "pkg"
    assert main(["export", "--rubric", RUBRIC, "--input", str(ROOT / "tests" / "fixtures" / "annotation" /
                                                               "dialsummeval_items.jsonl"),
                 "--format", "csv", "--output", str(pkg), "--no-qualification"]) == 0
    filled = tmp_path / "filled.csv"
    fill_csv(pkg / "sheet.csv", filled, {"ann1": Annotator(RUBRIC, ROOT / "tests" / "fixtures" / "annotation" /
                                                           "dialsummeval_items.jsonl", seed=1)})
    text = filled.read_text(encoding="utf-8")
    rows = text.splitlines(keepends=True)
    second = len(rows[0])  # the first data row starts here: cut within it
    if cut == "inside a quoted cell":
        at = text.index('"', second) + 5  # the dialogue is quoted (it holds line breaks)
    else:
        at = text.index(",", text.index(",", second) + 1)  # after task_id and section
    sheet = tmp_path / "cut.csv"
    sheet.write_text(text[:at], encoding="utf-8")
    before = sha(sheet)
    labels = tmp_path / "labels.csv"
    capsys.readouterr()
    assert main(["import", "--from", str(sheet), "--key", str(pkg / "key.json"), "--output", str(labels)]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"judge import: error: {re.escape(str(sheet))}:2: (the sheet ends inside a quoted cell of "
                        r"this row: it is cut|\d+ cells for \d+ columns: the sheet is cut) in the middle of (the|this) "
                        r"row .*\n", err), err
    assert not labels.exists() and sha(sheet) == before


def test_a_full_disk_under_the_answer_cache_names_the_cache_and_keeps_whole_lines(stub_server, tmp_path):
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    proc = cli("score", "--rubric", RUBRIC, "--input", str(EXAMPLES), "--output", str(out), "--base-url",
               stub_server.base_url, "--backend", "openai", "--model", "stub", "--client", "sdk", "--no-progress",
               "--cache", str(cache), limit_bytes=40_000)  # the cache's write-ahead log outgrows it first
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    where = re.escape(str(cache / "answers.sqlite"))
    assert re.fullmatch(rf"judge score: error: {where}: the answer cache \(--cache\) "
                        r"cannot be written \(.+\); free space, give --cache another folder, or run with --no-cache\n",
                        err), err
    assert not out.exists() or len(set(keys(lines(out)))) == len(lines(out))


def test_a_report_path_through_a_missing_folder_never_replaces_an_input(tmp_path, monkeypatch):
    """The same check for every file a verb writes (judge/outputs.py): `sub/../labels.csv` is labels.csv."""
    from judge.errors import OutputError
    from judge.outputs import write_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "labels.csv").write_text("item_id,score\n", encoding="utf-8")
    before = sha(tmp_path / "labels.csv")
    with pytest.raises(OutputError, match=r"^labels.csv: the output would replace an input \(labels.csv\)"):
        write_files({"sub/../labels.csv": "x\n"}, verb="calibrate", inputs=["labels.csv"])
    assert sha(tmp_path / "labels.csv") == before and sorted(p.name for p in tmp_path.iterdir()) == ["labels.csv"]
