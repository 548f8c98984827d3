"""`judge escalate` running its later judges itself: a judge given as run options is judged through `judge.run`
against the project's stub server (tests/stub_server.py, through the real OpenAI SDK: client sdk), on the cells the
cascade needs from it only; the decisions, thresholds and path are those of a run where it judged every cell; its
outcome is checked (failed: exit 1, interrupted: 130, batch pending: 3) and nothing is decided on a fragment.

The study (tests/cascade_sim.py) is synthetic and small: 80 dialogues x 3 systems, one criterion; a cheap judge (a
JSONL of 3 samples per verdict) right and unanimous on about 60% of the cells, hesitant and wrong on the rest; half
the cells labelled, drawn one by one; the strong judge is the stub (logprobs; it always answers the scale's first
value).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cascade_sim import SYSTEMS, judged_cells, strong_options, write_study

import calibration
from calibration.cascade.escalate import TABLE_FILES
from calibration.cascade.runs import RunStopped
from calibration.cascade.threshold_tests import path_sample
from judge.cli import main
from judge.errors import JudgeError
from judge.options import RunOptions
from judge.run import run

ROOT = Path(__file__).resolve().parents[1]

DIALOGUES, PATH_CELLS = 80, 40
OPTIONS = dict(alpha=0.2, delta=0.1, units="cells", path_cells=PATH_CELLS)


@pytest.fixture
def study(tmp_path):
    """items.jsonl, toy.yaml, small.jsonl (the cheap judge) and labels.csv in tmp_path; returns tmp_path."""
    return write_study(tmp_path, DIALOGUES)


def test_a_run_judge_decides_as_if_it_had_judged_every_cell_and_judges_only_what_the_cascade_needs(study,
                                                                                                     stub_server):
    """The guarantee's statistics are unchanged: the path is fixed from cells every judge sees (the labelled ones
    and the seeded path sample), so the thresholds, the tested path and every decision equal those of a cascade
    whose strong judge judged all 240 cells; it was asked for exactly the labelled cells, the path's cells and the
    cells the cheap judge escalated, and the saving is in cost.csv."""
    result = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl",
                                                         "large": strong_options(study, stub_server.base_url)},
                                  judgments_dir=study / "out", **OPTIONS)
    assert result.pending.empty
    full = run(RunOptions(**strong_options(study, stub_server.base_url), output=str(study / "full.jsonl"),
                           criteria=["clarity"]))
    assert full.status == "complete" and len(judged_cells(study / "full.jsonl")) == DIALOGUES * len(SYSTEMS)
    every = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl", "large": study / "full.jsonl"},
                                 **OPTIONS)
    assert result.decisions_csv() == every.decisions_csv()
    pd.testing.assert_frame_equal(result.thresholds, every.thresholds)
    pd.testing.assert_frame_equal(result.path, every.path)

    # exactly what the cascade needs from it, recomputed here from the files
    cells = sorted({(r["id"], r["system"]) for r in map(json.loads, (study / "small.jsonl").open())})
    labels = pd.read_csv(study / "labels.csv")
    labelled = set(zip(labels["item_id"], labels["system"]))
    pool = np.array([c not in labelled for c in cells])
    path = {cells[i] for i in path_sample(pool, PATH_CELLS, 0)}
    kept_by_small = set(zip(*[every.decisions.loc[every.decisions["decided_by"] == "small", c]
                              for c in ("item_id", "system")]))
    escalated = {c for c in cells if c not in labelled and c not in kept_by_small}
    judged = judged_cells(study / "out" / "large.jsonl")
    assert judged == labelled | path | escalated
    assert len(kept_by_small - path) > 20  # the cheap judge kept cells the strong one never saw

    cost = result.cost.set_index("what")
    assert cost.loc["judge large", "judged"] == len(judged)
    assert cost.loc["judge large", "spared"] == len(cells) - len(judged) == len(kept_by_small - path)
    assert cost.loc["judge small", "spared"] == 0
    assert every.cost.set_index("what").loc["judge large", "spared"] == 0
    assert f"{len(cells) - len(judged):,} judgments spared" in result.text()
    assert set(result.files()) <= set(TABLE_FILES)  # what the CLI checks before the judge runs


def test_the_tables_checked_before_a_judge_runs_are_every_table_escalate_writes():
    from test_escalate import JUDGES, LABELS

    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, random_dialogues=5)
    assert set(result.files()) == set(TABLE_FILES)


def test_a_rerun_asks_nothing_and_decides_the_same(study, stub_server):
    """Resumable: a second escalate finds every judgment in DIR/large.jsonl and sends no request; a run whose
    options changed (another model) is refused by the run (its file is another judge's), naming the judge."""
    judges = {"small": study / "small.jsonl", "large": strong_options(study, stub_server.base_url)}
    first = calibration.escalate(study / "labels.csv", judges, judgments_dir=study / "out", **OPTIONS)
    asked = stub_server.stats.total
    again = calibration.escalate(study / "labels.csv", judges, judgments_dir=study / "out", **OPTIONS)
    assert stub_server.stats.total == asked and again.decisions_csv() == first.decisions_csv()
    lines = (study / "out" / "large.jsonl").read_bytes()
    judges["large"] = strong_options(study, stub_server.base_url, model="another-model")
    with pytest.raises(JudgeError, match=r"judge large \(options\): .* made differently .* redo_changed = true"):
        calibration.escalate(study / "labels.csv", judges, judgments_dir=study / "out", **OPTIONS)
    assert (study / "out" / "large.jsonl").read_bytes() == lines and stub_server.stats.total == asked
    judges["large"] = strong_options(study, stub_server.base_url, model="another-model", redo_changed=True)
    redone = calibration.escalate(study / "labels.csv", judges, judgments_dir=study / "out", **OPTIONS)
    records = [json.loads(line) for line in (study / "out" / "large.jsonl").read_text().splitlines()]
    assert {r["model"] for r in records} == {"another-model"} and len(records) == len(judged_cells(
        study / "out" / "large.jsonl")) == redone.cost.set_index("what").loc["judge large", "judged"]


def test_the_cheapest_judge_given_as_run_options_judges_every_item(study, stub_server):
    """A first judge that is a run judges every cell of its input (each passes it first); the one after it the
    cells the cascade needs; both files are the run's own."""
    cheap = strong_options(study, stub_server.base_url, model="stub-cheap", logprobs=False, samples=3)
    result = calibration.escalate(study / "labels.csv", {"cheap": cheap,
                                                         "large": strong_options(study, stub_server.base_url)},
                                  judgments_dir=study / "out", **OPTIONS)
    # every item, on the criteria the labels have (the toy rubric's accuracy has none: not paid for)
    assert len(judged_cells(study / "out" / "cheap.jsonl")) == DIALOGUES * len(SYSTEMS)
    assert {json.loads(line)["criterion"] for line in (study / "out" / "cheap.jsonl").open()} == {"clarity"}
    assert result.pending.empty and set(result.judges) == {"cheap", "large"}
    assert judged_cells(study / "out" / "large.jsonl") <= judged_cells(study / "out" / "cheap.jsonl")


def test_the_cli_runs_the_judge_from_a_toml_file_and_prints_the_saving(study, stub_server, capsys):
    toml = "\n".join(f"{k} = {json.dumps(v)}" for k, v in strong_options(study, stub_server.base_url).items()
                     if k not in ("base_url", "rubric", "input", "cache"))
    (study / "large.toml").write_text(toml + '\nrubric = "toy.yaml"\ninput = "items.jsonl"\n', encoding="utf-8")
    code = main(["escalate", "--judge", f"small={study / 'small.jsonl'}", "--judge", f"large={study / 'large.toml'}",
                 "--base-url", stub_server.base_url, "--human", str(study / "labels.csv"), "--alpha", "0.2",
                 "--delta", "0.1", "--units", "cells", "--path-cells", str(PATH_CELLS),
                 "--output", str(study / "decisions.csv"), "--output-dir", str(study / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    cost = pd.read_csv(study / "out" / "cost.csv").set_index("what")
    spared = int(cost.loc["judge large", "spared"])
    assert spared > 20 and f"{spared:,} judgments spared" in captured.out
    assert cost.loc["judge large", "judged"] == len(judged_cells(study / "out" / "large.jsonl"))
    assert pd.read_csv(study / "out" / "pending.csv").empty


# -- bad input: (what the user gives, the message, the exit code); nothing is decided or written -----------------

def _toml(study, text: str, name: str = "large.toml") -> str:
    (study / name).write_text(text, encoding="utf-8")
    return f"large={study / name}"


GOOD = ('rubric = "toy.yaml"\ninput = "items.jsonl"\nmodel = "stub-large"\nlogprobs = true\nprogress = false\n'
        'client = "sdk"\n')
GOOD_JSON = '{"rubric": "toy.yaml", "input": "items.jsonl", "model": "stub-large", "progress": false'
# (case, the options file's name and text, what the message says, the exit code)
BAD_RUNS = [
    ("samples zero", "large.toml", GOOD + "samples = 0\n", "--samples must be at least 1, got 0", 2),
    ("misspelt option", "large.toml", GOOD + "samplez = 3\n", "unknown option 'samplez'; did you mean samples?", 2),
    ("not a number", "large.toml", GOOD + 'temperature = "hot"\n', "--temperature must be a number, got 'hot'", 2),
    ("unknown backend", "large.toml", GOOD + 'backend = "gpt"\n',
     "--backend must be one of local, openai, vllm, got 'gpt'", 2),
    ("not a server", "large.toml", GOOD + 'base_url = "ftp://host"\n', "--base-url ftp://host: not a server URL", 2),
    ("output chosen", "large.toml", GOOD + 'output = "mine.jsonl"\n', "'output' is escalate's to choose", 2),
    ("criteria chosen", "large.toml", GOOD + 'criteria = ["clarity"]\n', "'criteria' is escalate's to choose", 2),
    ("block mode", "large.toml", GOOD + 'mode = "block"\n', "a cascade asks for single cells", 2),
    ("no input", "large.toml", 'rubric = "toy.yaml"\nmodel = "m"\n', "'input' is required", 2),
    ("toml syntax", "large.toml", GOOD + "samples = \n", "large.toml: not valid TOML", 2),
    ("json syntax", "large.json", GOOD_JSON + ",\n}", "large.json:2: not valid JSON", 2),
    ("json list", "large.json", "[1, 2]", "run options must be a table of option = value", 2),
    ("no such file", "elsewhere.toml", GOOD, "missing.toml: no such file", 2),
    ("not the judged items", "large.toml", GOOD.replace("items.jsonl", "few.jsonl"), "has no item id 'd0000'", 2),
    ("no output dir", "large.toml", GOOD, "its judgments need a folder (--output-dir DIR", 2),
    ("onto an input", "large.toml", GOOD, "which is an input of this run", 2),
    ("judge fails", "large.toml", GOOD, "judge large: some judgments failed", 1),
    ("a file not ours", "large.toml", GOOD, "judge large's judgments file is not one this tool wrote", 2),
    ("a name with a folder", "large.toml", GOOD, "NAME names its judgments file, DIR/NAME.jsonl", 2),
]


@pytest.mark.parametrize("case, name, text, message, code", BAD_RUNS, ids=[r[0] for r in BAD_RUNS])
def test_bad_run_judges_are_refused_naming_the_judge_and_nothing_is_decided(study, stub_server, capsys, monkeypatch,
                                                                            case, name, text, message, code):
    monkeypatch.setenv("XDG_CACHE_HOME", str(study / "cache"))
    (study / "few.jsonl").write_text((study / "items.jsonl").read_text().splitlines()[-1] + "\n", encoding="utf-8")
    if case == "judge fails":
        stub_server.configure(faults=[("429", -1)], retry_after="0.01")
    small = study / "small.jsonl"
    if case == "onto an input":  # the cheap judge's file is where the strong judge's judgments would go
        (study / "out").mkdir()
        small = study / "out" / "large.jsonl"
        small.write_bytes((study / "small.jsonl").read_bytes())
    if case == "a file not ours":  # the user's own notes where the judge's judgments would go
        (study / "out").mkdir()
        (study / "out" / "large.jsonl").write_text("my notes\n", encoding="utf-8")
    out = [] if case == "no output dir" else ["--output-dir", str(study / "out")]
    judge = _toml(study, text, name) if case != "no such file" else f"large={study / 'missing.toml'}"
    if case == "a name with a folder":
        judge = "../large" + judge.removeprefix("large")
    argv = ["escalate", "--judge", f"small={small}", "--judge", judge,
            "--base-url", stub_server.base_url, "--human", str(study / "labels.csv"), "--alpha", "0.2",
            "--delta", "0.1", "--units", "cells", "--path-cells", str(PATH_CELLS),
            "--output", str(study / "decisions.csv"), *out]
    before = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and "large" in err and "Traceback" not in err
    assert not (study / "decisions.csv").exists() and not (study / "out" / "decisions.csv").exists()
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file() and p in before} == before
    if case == "judge fails":  # the failures are kept in the judge's own file, for the same command to retry
        assert all(json.loads(line)["error"] for line in (study / "out" / "large.jsonl").open())
    elif case in ("onto an input", "a file not ours"):
        assert (study / "out" / "large.jsonl").read_bytes() == before[study / "out" / "large.jsonl"]
    else:
        assert not (study / "out").exists() and not (study / "large.jsonl").exists()  # refused before any run


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt even when the tests run from a background job (which ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_judge_exits_130_and_decides_nothing(study, stub_server, monkeypatch, capsys, ctrl_c_raises):
    """A real Ctrl-C while the strong judge runs: exit 130, its finished judgments kept in its file, no table
    written; the same command resumes (asking only what is missing) and decides."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(study / "cache"))
    stub_server.configure(latency_ms=100)
    output = study / "out" / "large.jsonl"

    def ctrl_c_once_judging() -> None:
        deadline = time.monotonic() + 60  # not a fixed delay: a loaded machine's start-up alone can outlast one
        while time.monotonic() < deadline and not (output.exists() and output.read_text().count("\n") >= 3):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    judge = _toml(study, GOOD + "concurrency = 1\n")
    argv = ["escalate", "--judge", f"small={study / 'small.jsonl'}", "--judge", judge,
            "--base-url", stub_server.base_url, "--human", str(study / "labels.csv"), "--alpha", "0.2",
            "--delta", "0.1", "--units", "cells", "--path-cells", str(PATH_CELLS),
            "--output", str(study / "decisions.csv"), "--output-dir", str(study / "out")]
    threading.Thread(target=ctrl_c_once_judging, daemon=True).start()
    assert main(argv) == 130
    kept = judged_cells(output)
    assert 3 <= len(kept) < 100
    assert not (study / "decisions.csv").exists() and not (study / "out" / "decisions.csv").exists()
    time.sleep(0.3)  # the request in flight at Ctrl-C reaches the server's count first
    stub_server.configure(latency_ms=0)
    stub_server.reset()
    capsys.readouterr()
    assert main(argv) == 0 and (study / "decisions.csv").exists()
    assert 0 < stub_server.stats.total <= len(judged_cells(output)) - len(kept)  # the kept ones are not asked again


def test_the_python_api_raises_what_stopped_the_judge(study, stub_server):
    stub_server.configure(faults=[("429", -1)], retry_after="0.01")
    with pytest.raises(RunStopped, match="judge large: some judgments failed") as stopped:
        calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl",
                                                    "large": RunOptions(**strong_options(study, stub_server.base_url))},
                             judgments_dir=study / "out", **OPTIONS)
    assert stopped.value.exit_code == 1 and stopped.value.judge == "large"


def test_a_judge_on_batch_files_exits_3_until_its_answers_are_in_and_the_same_command_carries_on(study, capsys):
    """A strong judge whose options write batch files for a runner (batch_dir): escalate says what to run and exits
    3 like `judge score`, decides nothing meanwhile, and the same command reads the answers and goes on (a second
    request set, the escalated cells, gets folders of its own); the decisions are those of the judge asked online."""
    from batch_server import BatchServer
    from test_batch import run_through

    server = BatchServer().start()
    try:
        toml = GOOD + f'backend = "openai"\nbase_url = "{server.base_url}"\ncache = "cache"\nbatch_dir = "batches"\n'
        argv = ["escalate", "--judge", f"small={study / 'small.jsonl'}", "--judge", _toml(study, toml),
                "--human", str(study / "labels.csv"), "--alpha", "0.2", "--delta", "0.1", "--units", "cells",
                "--path-cells", str(PATH_CELLS), "--output", str(study / "decisions.csv"),
                "--output-dir", str(study / "out")]
        codes = []
        for _ in range(4):
            code = main(argv)
            codes.append(code)
            err = capsys.readouterr().err
            if code != 3:
                break
            assert "judge large waits for batch answers" in err and "run the same `judge escalate` command" in err
            assert not (study / "decisions.csv").exists() and not (study / "out" / "decisions.csv").exists()
            waiting = [p for p in (study / "batches").rglob("*.jsonl") if not p.name.endswith(".out.jsonl")
                       and not p.with_name(p.name.removesuffix(".jsonl") + ".out.jsonl").exists()]
            assert waiting and all(p.name in err or str(p) in err or p.parent.name in err for p in waiting)
            run_through(server, waiting)
        assert codes == [3, 3, 0]  # the path and labelled cells, then the escalated ones
        online = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl", "large": strong_options(
            study, server.base_url, cache=str(study / "cache-online"))}, judgments_dir=study / "online", **OPTIONS)
        assert (study / "decisions.csv").read_text() == online.decisions_csv()
        assert judged_cells(study / "out" / "large.jsonl") == judged_cells(study / "online" / "large.jsonl")
    finally:
        server.stop()


def test_a_pairwise_judge_is_run_with_judge_compare_on_the_pairs_the_cascade_needs(stub_server, tmp_path):
    """Pairs are cells too (item, "a|b"): a strong judge given as `judge compare` options judges the labelled pairs,
    the path's and the escalated ones only, and the decisions are those of it judging every pair."""
    pairs = ROOT / "examples" / "pairwise"
    strong = {"command": "compare", "rubric": "pairwise_summary", "input": str(pairs / "pairs.jsonl"),
              "backend": "openai", "base_url": stub_server.base_url, "client": "sdk", "model": "stub", "samples": 3,
              "cache": str(tmp_path / "cache"), "progress": False}
    options = dict(alpha=0.3, delta=0.2, units="cells", path_cells=15)
    result = calibration.escalate(pairs / "labels.csv", {"weak": pairs / "judgments.jsonl", "strong": strong},
                                  judgments_dir=tmp_path / "out", **options)
    assert run(RunOptions(**strong, output=str(tmp_path / "every.jsonl"),
                          criteria=["faithfulness", "informativeness"])).status == "complete"
    every = calibration.escalate(pairs / "labels.csv", {"weak": pairs / "judgments.jsonl",
                                                        "strong": tmp_path / "every.jsonl"}, **options)
    assert result.decisions_csv() == every.decisions_csv()
    pd.testing.assert_frame_equal(result.thresholds, every.thresholds)
    lines = (tmp_path / "out" / "strong.jsonl").read_text().splitlines()
    spared = result.cost.set_index("what").loc["judge strong", "spared"]
    assert spared > 0 and len(lines) == len((tmp_path / "every.jsonl").read_text().splitlines()) - spared


def test_a_base_url_without_a_judge_to_run_is_said_to_be_unused(study, capsys):
    argv = ["escalate", "--judge", f"small={study / 'small.jsonl'}", "--base-url", "http://127.0.0.1:9/v1",
            "--human", str(study / "labels.csv"), "--alpha", "0.2", "--delta", "0.1", "--units", "cells",
            "--output", str(study / "decisions.csv")]
    assert main(argv) == 0
    assert "warning: --base-url is the server of the judges given as run options, and no --judge is" in \
        capsys.readouterr().err


def test_a_jury_signal_needs_the_strong_judge_on_every_cell_and_decides_the_same(study, stub_server):
    """The cheap judge's confidence is the share of the other judges agreeing: on a cell the strong judge has not
    judged it is nothing, so the cascade asks the strong judge for every cell; the decisions are those of the full
    run, and nothing is spared."""
    options = dict(OPTIONS, signal="small=jury")
    result = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl",
                                                         "large": strong_options(study, stub_server.base_url)},
                                  judgments_dir=study / "out", **options)
    assert run(RunOptions(**strong_options(study, stub_server.base_url), output=str(study / "full.jsonl"),
                          criteria=["clarity"])).status == "complete"
    every = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl", "large": study / "full.jsonl"},
                                 **options)
    assert result.decisions_csv() == every.decisions_csv() and result.thresholds.equals(every.thresholds)
    assert result.cost.set_index("what").loc["judge large", "spared"] == 0
    assert judged_cells(study / "out" / "large.jsonl") == judged_cells(study / "full.jsonl")


def test_without_path_cells_the_later_judge_judges_every_cell_and_is_told_how_to_be_spared(study, stub_server):
    options = {k: v for k, v in OPTIONS.items() if k != "path_cells"}
    result = calibration.escalate(study / "labels.csv", {"small": study / "small.jsonl",
                                                         "large": strong_options(study, stub_server.base_url)},
                                  judgments_dir=study / "out", **options)
    assert len(judged_cells(study / "out" / "large.jsonl")) == DIALOGUES * len(SYSTEMS)
    assert result.cost.set_index("what").loc["judge large", "spared"] == 0
    assert any("without --path-cells every unlabelled cell fixes the path, so large judged every cell" in w
               for w in result.warnings)


def test_pending_lists_the_labelled_cells_a_later_judge_given_as_a_file_lacks():
    """The thresholds depend on the labelled cells too: a later judge's file without them has them pending (with
    the path's), so a cascade run by hand in rounds asks for what a run judge is asked for."""
    from test_escalate import JUDGES, LABELS

    import judge

    large = judge.judgments_frame(JUDGES["large"])
    labels = pd.read_csv(LABELS)
    labelled = set(zip(labels["item_id"], labels["system"]))
    some = large[[c not in labelled for c in zip(large["item_id"], large["system"])]]  # no labelled cell
    result = calibration.escalate(LABELS, {"small": JUDGES["small"], "large": some}, alpha=0.2, delta=0.1,
                                  path_cells=60)
    pending = set(zip(result.pending["item_id"], result.pending["system"]))
    assert set(result.pending["judge"]) == {"large"} and pending == labelled


def test_a_bad_label_is_refused_before_the_cheapest_run_judge_judges_anything(study, stub_server):
    labels = (study / "labels.csv").read_text().splitlines()
    first = labels[1].rsplit(",", 1)[0]
    (study / "labels.csv").write_text("\n".join([labels[0], f"{first},9", *labels[2:]]) + "\n", encoding="utf-8")
    cheap = strong_options(study, stub_server.base_url, model="stub-cheap")
    with pytest.raises(JudgeError, match="labels.csv:2"):  # the line of the bad label
        calibration.escalate(study / "labels.csv", {"cheap": cheap}, judgments_dir=study / "out", **OPTIONS)
    assert stub_server.stats.total == 0 and not (study / "out").exists()
