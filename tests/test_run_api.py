"""The judging half as a library: typed run options, `judge.run.run`, explicit API signatures, one judgments
table that every statistics verb takes unchanged, and the layering rules (no argparse below the CLI, no import
cycle)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

import calibration
import judge
from judge.errors import JudgeError
from judge.options import RunOptions
from judge.run import Outcome, run

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"
INTERNAL = {"command", "rubric", "input", "output", "urls_from_env"}  # not keyword arguments of score/compare


def _flags(verb: str) -> dict:
    """{run option: default} of `judge VERB`'s flags (--no-x as `x`, its default inverted)."""
    import argparse

    from judge.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {}
    for action in sub.choices[verb]._actions:
        if action.dest in ("help", "rubric", "input", "output"):
            continue
        if action.dest in ("no_progress", "no_swap"):
            flags[action.dest[3:]] = not action.default
        else:
            flags[action.dest] = action.default
    return flags


def test_a_run_option_is_declared_once_and_the_four_ways_in_agree():
    """RunOptions' fields, the API's keywords (ScoreKwargs/CompareKwargs unpacked into the signatures), the flags of
    `judge score`/`judge compare` and their defaults: the same names, the same defaults."""
    from judge.options import CompareKwargs, RunKwargs, ScoreKwargs

    options = set(RunOptions.model_fields) - INTERNAL
    assert set(ScoreKwargs.__annotations__) == options - {"swap"}
    assert set(CompareKwargs.__annotations__) == options - {"mode"}
    assert set(RunKwargs.__annotations__) == options - {"swap", "mode"}
    for verb, kwargs, function in (("score", ScoreKwargs, judge.score), ("compare", CompareKwargs, judge.compare)):
        parameters = inspect.signature(function).parameters
        assert list(parameters) == ["rubric", "items", "output", "options"], verb
        assert function.__annotations__["options"] == f"Unpack[{kwargs.__name__}]", verb
        flags = _flags(verb)
        assert set(flags) <= set(kwargs.__annotations__), (verb, set(flags) - set(kwargs.__annotations__))
        assert set(kwargs.__annotations__) <= set(flags), (verb, set(kwargs.__annotations__) - set(flags))
        for name, default in flags.items():
            assert default == RunOptions.model_fields[name].default, (verb, name, default)


@pytest.mark.parametrize(("verb", "given", "message"), [
    ("score", {"concurency": 4}, "judge.score() got an unknown option 'concurency'; did you mean concurrency?"),
    ("score", {"swap": False}, "judge.score() got an unknown option 'swap'"),
    ("compare", {"mode": "block"}, "judge.compare() got an unknown option 'mode'; did you mean model?"),
    ("compare", {"tempreature": 0.5}, "did you mean temperature?"),
])
def test_an_unknown_keyword_is_the_projects_error_naming_the_close_match(verb, given, message, tmp_path):
    with pytest.raises(JudgeError) as caught:
        getattr(judge, verb)("dialsummeval", [], tmp_path / "out.jsonl", **given)
    assert message in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


# (what a user gives, the message): checked once, whichever way the value comes in
OPTION_ROWS = [
    ({"samples": 0}, "--samples must be at least 1, got 0"),
    ({"concurrency": 2.5}, "--concurrency must be a whole number, got 2.5"),
    ({"backend": "gpu"}, "--backend must be one of local, openai, vllm, got 'gpu'"),
    ({"logprobs": "yes"}, "--logprobs is a switch: give True or False, got 'yes'"),
    ({"shards": 2}, "--shards splits the files of --batch-dir: add --batch-dir DIR, or drop --shards"),
    ({"batch": True, "batch_dir": "d"}, "--batch sends to a provider's Batch API and --batch-dir writes files"),
    ({"refresh": True, "no_cache": True}, "--refresh writes fresh answers to the cache that --no-cache turns off"),
    ({"mode": "block", "logprobs": True}, "--logprobs needs --mode pointwise"),
    ({"swap": False}, "--no-swap is for `judge compare`"),
    ({"base_url": "127.0.0.1:8000/v1"}, "--base-url 127.0.0.1:8000/v1: not a server URL"),
    ({"temperature": 3.0}, "--temperature must be between 0 and 2, got 3"),
    ({"concurency": 4}, "unknown option 'concurency'; did you mean concurrency?"),
]


@pytest.mark.parametrize("given, message", OPTION_ROWS, ids=[m[:40] for _, m in OPTION_ROWS])
def test_run_options_refuse_with_the_flag_name(given, message):
    with pytest.raises(JudgeError) as caught:
        RunOptions(rubric="dialsummeval", **given)
    assert message in str(caught.value)


@pytest.mark.parametrize("value", [" , ", ",", " ", ", ,"])
def test_judge_base_urls_of_separators_only_is_blank(monkeypatch, value):
    monkeypatch.setenv("JUDGE_BASE_URLS", value)
    with pytest.raises(JudgeError, match="is blank: set it to server URLs"):
        RunOptions(rubric="dialsummeval", model="M").resolved()


def test_resolved_options_fill_the_backend_defaults_and_are_never_changed(monkeypatch):
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    given = RunOptions(rubric="dialsummeval", base_url=["http://a:1/v1", "http://b:1/v1"], model="M")
    resolved = given.resolved()
    assert (resolved.backend, resolved.concurrency, resolved.timeout) == ("openai", 16, 120.0)
    assert given.backend is None and given.concurrency is None  # resolved() is a copy
    assert RunOptions(rubric="x", backend="vllm", model="m").resolved().concurrency == 256
    with pytest.raises(ValidationError, match="frozen"):  # a backend cannot write back into the options
        resolved.concurrency = 32  # type: ignore[misc]


def test_no_module_below_the_cli_imports_argparse():
    cli_modules = {"judge/cli.py", "judge/batch_cli.py", "judge/annotation/cli.py"}
    offenders = []
    for path in sorted((ROOT / "judge").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names and name not in cli_modules:
                offenders.append(name)
    assert offenders == []


def _module_imports(package_root: Path, top_level_only: bool) -> dict[str, set[str]]:
    """module -> the project modules it imports (module level only, or every import anywhere in it)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(block)}
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        found = set()
        for node in nodes:
            if isinstance(node, ast.If) or id(node) in typing_only:  # `if TYPE_CHECKING:` imports never run
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.add(base)
                found |= {f"{base}.{a.name}" for a in node.names}
        graph[module] = {m for m in found if m.split(".")[0] in ("judge", "calibration")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    known = set(graph)
    edges = {m: {d for d in deps if d in known and d != m} for m, deps in graph.items()}
    out, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                out.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    return out


@pytest.mark.parametrize("top_level_only", [True, False], ids=["module level", "deferred imports too"])
def test_no_import_cycle(top_level_only):
    graph = {**_module_imports(ROOT / "judge", top_level_only),
             **_module_imports(ROOT / "calibration", top_level_only)}
    # A package's __init__ importing its own modules is how a package is built, not a cycle.
    for module in graph:
        graph[module] = {d for d in graph[module] if not module.startswith(d + ".")}
    assert _cycles(graph) == []


# -- one judgments table, from the API into every statistics verb -------------------------------------------------
@pytest.fixture
def two_runs(stub_server, tmp_path):
    """The toy study judged twice by a stub judge whose scores vary (half the questions get the scale's top)."""
    stub_server.configure(changed_share=0.5)
    (tmp_path / "toy.yaml").write_text((STUDY / "toy.yaml").read_text())  # the study's rubric beside its judgments
    common = dict(base_url=stub_server.base_url, model="stub", no_cache=True, progress=False)
    first = judge.score(STUDY / "toy.yaml", STUDY / "items.jsonl", tmp_path / "a.jsonl", **common)
    second = judge.score(STUDY / "toy.yaml", STUDY / "items.jsonl", tmp_path / "b.jsonl", **common)
    return first, second


VERBS = {
    "calibrate": lambda a, b: calibration.calibrate(a, STUDY / "labels.csv", bootstrap=0),
    "screen": lambda a, b: calibration.screen(a, bootstrap=40, budget=6),
    "estimate": lambda a, b: calibration.estimate(a, STUDY / "labels.csv"),
    "audit": lambda a, b: calibration.audit(a, STUDY / "items.jsonl", STUDY / "labels.csv", bootstrap=100),
    "drift": lambda a, b: calibration.drift(a, b, bootstrap=100),
    "select": lambda a, b: calibration.select(STUDY / "labels.csv", {"stub": a, "again": b}, bootstrap=100),
}


@pytest.mark.parametrize("verb", VERBS)
def test_the_api_frame_goes_into_every_statistics_verb_unchanged(two_runs, verb):
    first, second = two_runs
    assert list(first.columns[:4]) == ["item_id", "system", "criterion", "score"]
    assert len(first) == 96 and set(first["status"]) == {"ok"} and first["score"].nunique() == 2
    outcome = first.attrs["outcome"]
    assert isinstance(outcome, Outcome) and outcome.status == "complete" and len(outcome.keys) == 96
    from_frames = VERBS[verb](first, second)
    from_files = VERBS[verb](outcome.output, second.attrs["outcome"].output)
    assert from_frames.text() == from_files.text() and len(from_frames.text()) > 100
    if verb == "drift":  # the same stub, the same answers: nothing changed
        assert (from_frames.drift["changed_share"] == 0).all()
        assert "drift" not in set(from_frames.drift["verdict"])


def test_judgments_frame_is_the_table_calibration_loads(tmp_path):
    table = judge.judgments_frame(STUDY / "judgments.jsonl")
    loaded = calibration.load_judge_scores(STUDY / "judgments.jsonl")
    pd.testing.assert_frame_equal(table, loaded)
    # the re-asks, which audit and drift read from the table
    assert table.loc[table.status == "ok", "samples"].map(len).eq(3).all()


def test_run_returns_a_typed_outcome_and_refuses_before_writing(stub_server, tmp_path):
    options = RunOptions(rubric=str(STUDY / "toy.yaml"), input=str(STUDY / "items.jsonl"),
                         output=str(tmp_path / "out.jsonl"), base_url=stub_server.base_url, model="stub",
                         no_cache=True, progress=False)
    outcome = run(options)
    assert outcome.status == "complete" and outcome.exit_code == 0 and outcome.tally.judged == 96
    again = run(options)
    assert again.status == "complete" and again.messages() == [
        f"nothing to do: all 96 judgments are in {options.output}"]
    with pytest.raises(JudgeError, match="compares pairs: use `judge compare`"):
        run(options.model_copy(update={"rubric": "pairwise_summary"}))
    assert stub_server.stats.total == 96


# -- money beside tokens --------------------------------------------------------------------------------------------
PRICE_ROWS = [
    ('{"stub": {"input": 1}}', "needs 'output'"),
    ('{"stub": {"input": 1, "output": -2}}', "output must be a number at least 0, got -2"),
    ('{"stub": {"input": 1, "output": 2, "batch_discount": 2}}', "batch_discount is the factor"),
    ('{"stub": {"input": 1, "output": 2, "cache": 1}}', "unknown field 'cache'"),
    ('{"other": {"input": 1, "output": 2}}', "no price for model 'stub'"),
    ("[1, 2]", "a price table maps model names"),
    ("{", "not a price table"),
]


@pytest.mark.parametrize("text, message", PRICE_ROWS, ids=[m for _, m in PRICE_ROWS])
def test_bad_price_tables_are_refused_before_anything_runs(stub_server, tmp_path, text, message):
    (tmp_path / "prices.json").write_text(text)
    with pytest.raises(JudgeError, match=re.escape(message)):
        judge.score(STUDY / "toy.yaml", STUDY / "items.jsonl", tmp_path / "out.jsonl", base_url=stub_server.base_url,
                    model="stub", no_cache=True, progress=False, prices=tmp_path / "prices.json")
    assert not (tmp_path / "out.jsonl").exists() and stub_server.stats.total == 0


def test_the_cost_is_the_billed_tokens_at_the_table_prices(stub_server, tmp_path):
    (tmp_path / "prices.yaml").write_text("stub: {input: 2.0, cached_input: 0.5, output: 8.0}\n")
    frame = judge.score(STUDY / "toy.yaml", STUDY / "items.jsonl", tmp_path / "out.jsonl",
                        base_url=stub_server.base_url, model="stub", no_cache=True, progress=False,
                        prices=tmp_path / "prices.yaml")
    tally = frame.attrs["outcome"].tally
    cached = tally.cached_tokens or 0
    expected = ((tally.prompt_tokens - cached) * 2.0 + cached * 0.5 + tally.completion_tokens * 8.0) / 1e6
    assert tally.prompt_tokens > 0 and tally.cost == pytest.approx(expected)
    assert f"cost {expected:.4g} at the --prices table" in frame.attrs["summary"]


@pytest.mark.parametrize("verb", ["score", "compare"])
def test_the_judging_verbs_help_shows_every_flag_in_a_named_group(verb):
    import argparse

    from judge.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    groups = {g.title: [a.option_strings[0] for a in g._group_actions] for g in sub.choices[verb]._action_groups}
    assert [t for t in groups if groups[t]] == ["options", "input", "model and server", "vLLM engine (--backend vllm)",
                                                "decoding", "run and cache", "batch and scale-out", "output"]
    assert groups["options"] == ["-h"]  # nothing left ungrouped but --help
    assert "--output" in groups["output"] and "--batch-dir" in groups["batch and scale-out"]


@pytest.mark.parametrize("verb", ["calibrate", "screen", "estimate", "audit", "drift", "select", "escalate", "tune"])
def test_a_calibration_verb_refuses_an_unknown_keyword_with_the_projects_error(verb):
    with pytest.raises(calibration.CalibrationError) as caught:
        getattr(calibration, verb)("judgments.jsonl", "labels.csv", bootstrapp=10)
    assert f"calibration.{verb}() got an unknown option 'bootstrapp'" in str(caught.value)
    if "bootstrap" in inspect.signature(getattr(calibration, verb)).parameters:
        assert str(caught.value).endswith("did you mean bootstrap?")
    assert isinstance(caught.value, JudgeError)
