"""The judges `judge escalate` runs itself: a judge given as the options of a `judge score` (or `judge compare`) run
instead of a judgments file, judged through the typed run API (judge/run.py) on the cells the cascade needs only.

A run judge's options come from a JSON or TOML file (the flags of `judge score`, as keys: `rubric`, `input`, `model`,
`base_url`, `samples`, `logprobs`, `cache`, ...), a dict, or a `judge.options.RunOptions`; they are checked by
RunOptions, with its messages. Escalate chooses what a run judge writes and judges: its judgments go to DIR/NAME.jsonl
(a file the run refuses unless it wrote it; a rerun resumes it), and it is asked for cells of its `input` only, so
`output`, `criteria` and block mode are refused. Every run's outcome is checked before any decision is built on it: a
failed, interrupted or pending run stops the cascade (`RunStopped`, KeyboardInterrupt).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from judge.errors import JudgeError, Stopped

if TYPE_CHECKING:
    from judge.options import RunOptions

RUN_SUFFIXES = (".json", ".toml")
# options that name files: read relative to the folder of the file that gives them, as a user reads the file
PATH_OPTIONS = ("input", "template", "cache", "prices", "batch_dir")


class RunStopped(Stopped):
    """A judge escalate runs did not finish: no decision is built on a fragment. `exit_code` is the one `judge score`
    gives for the same outcome (1 failed, 3 batch files wait for a runner)."""

    def __init__(self, message: str, exit_code: int, judge: str):
        super().__init__(message)
        self.exit_code, self.judge = exit_code, judge


@dataclass(frozen=True)
class RunJudge:
    """A judge escalate runs: the run options (without `output`) and where they were given."""

    options: RunOptions
    where: str  # the options file, or "options" for a dict / RunOptions given in Python


def is_run_judge(source) -> bool:
    """A judge given as run options: a RunOptions, a dict, or a path ending in .json or .toml (judgments are
    .jsonl or .csv)."""
    from judge.options import RunOptions

    if isinstance(source, (RunOptions, dict)):
        return True
    return isinstance(source, (str, Path)) and Path(str(source)).suffix.lower() in RUN_SUFFIXES


def _read_file(path: Path) -> dict:
    if not path.is_file():
        raise JudgeError(f"{path}: no such file (a judge's run options, JSON or TOML)")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".toml":
        import tomllib

        try:
            values = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise JudgeError(f"{path}: not valid TOML: {exc}") from None
    else:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JudgeError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(values, dict):
        raise JudgeError(f"{path}: run options must be a table of option = value (as `judge score`'s flags), got "
                         f"{type(values).__name__}")
    folder = path.parent
    values = {str(k).replace("-", "_"): v for k, v in values.items()}  # `max-tokens` as the flag, or `max_tokens`
    for key in PATH_OPTIONS:
        if isinstance(values.get(key), str) and not Path(values[key]).is_absolute():
            values[key] = str(folder / values[key])
    rubric = values.get("rubric")
    if isinstance(rubric, str) and Path(rubric).suffix in (".yaml", ".yml") and not Path(rubric).is_absolute():
        values["rubric"] = str(folder / rubric)  # a bundled rubric is a name, not a path
    return values


def load_run_judge(name: str, source, base_url: list[str] | None = None) -> RunJudge:
    """The run options of judge `name`, checked: RunOptions' checks and messages, and what escalate decides for
    it. `base_url`: the servers for options that name neither a server nor a backend (escalate's --base-url)."""
    from judge.options import RunOptions

    where = str(source) if isinstance(source, (str, Path)) else "options"
    if Path(name).name != name or name.startswith("."):
        raise JudgeError(f"--judge {name}={where}: NAME names its judgments file, DIR/NAME.jsonl: give a plain name "
                         "(no folder, not starting with a dot)")
    try:
        if isinstance(source, RunOptions):
            values = source.model_dump(exclude_unset=True)
        else:
            values = dict(source) if isinstance(source, dict) else _read_file(Path(source))
        refused = [(values.get("output") is not None,
                    f"'output' is escalate's to choose: judge {name}'s judgments go to DIR/{name}.jsonl "
                    "(--output-dir DIR)"),
                   (values.get("criteria") is not None,
                    f"'criteria' is escalate's to choose (its --criteria): judge {name} is asked for the cells "
                    "the cascade needs"),
                   (values.get("mode") == "block",
                    "mode 'block' judges every candidate of a dialogue in one request; a cascade asks for single "
                    "cells: use mode 'pointwise'"),
                   (values.get("command") == "qualify", "command must be score or compare, got 'qualify'"),
                   (values.get("input") is None,
                    "'input' is required: the items file the cells escalate asks for are taken from")]
        for bad, message in refused:
            if bad:
                raise JudgeError(message)
        if base_url and not values.get("base_url") and values.get("backend") in (None, "openai"):
            values["base_url"] = list(base_url)
        options = RunOptions(**values)
    except JudgeError as exc:
        raise JudgeError(f"--judge {name}={where}: {exc}") from None
    return RunJudge(options, where)


def judgments_path(directory, name: str) -> Path:
    return Path(directory) / f"{name}.jsonl"


def judge_cells(name: str, judge: RunJudge, wanted: dict[str, set], output: Path) -> None:
    """Run judge `name` on the `wanted` cells (criterion -> {(item_id, system)}) into `output`, one run per set of
    criteria asking the same items. The caller includes the cells `output` holds already: the run checks they were
    made as these options would make them (else it refuses, naming --redo-changed) and skips them. Raises
    RunStopped (failed, pending) or KeyboardInterrupt (interrupted): nothing may use a run's file unless it
    completed."""
    from judge.items import ItemFile
    from judge.rubric import load_rubric
    from judge.run import EXIT_FAILED, run

    options = judge.options
    assert options.input is not None, "load_run_judge, the only maker of a RunJudge, refuses options without input"
    rubric = load_rubric(options.rubric)
    known = {c.id for c in rubric.criteria}
    for criterion in wanted:
        if criterion not in known:
            raise JudgeError(f"--judge {name}={judge.where}: the cascade needs criterion {criterion!r}, which rubric "
                             f"{rubric.name!r} does not have ({', '.join(sorted(known))})")
    items = {}
    needed = set().union(*wanted.values())
    for item in ItemFile(options.input, rubric.inputs):
        if (item.id, item.system) in needed:
            items[(item.id, item.system)] = item  # in the input's order: prompts of one dialogue stay together
    absent = sorted(needed - set(items))
    if absent:
        raise JudgeError(f"--judge {name}={judge.where}: its input {options.input} has no item id {absent[0][0]!r}, "
                         f"system {absent[0][1]!r}, which the cascade needs it to judge ({len(absent)} cell(s) like "
                         "it): give it the items the other judges judged")
    groups: dict[frozenset, list[str]] = {}
    for criterion, cells in wanted.items():
        groups.setdefault(frozenset(cells), []).append(criterion)
    output.parent.mkdir(parents=True, exist_ok=True)
    for group, criteria in groups.items():
        update = {"output": str(output)}
        if options.batch_dir is not None:  # each request set its own batch files: a rerun finds them again
            digest = hashlib.sha256(json.dumps([sorted(criteria), sorted(map(list, group))]).encode()).hexdigest()
            update["batch_dir"] = str(Path(options.batch_dir) / f"{name}-{digest[:12]}")
        print(f"judge {name}: {len(group)} cells x {len(criteria)} criteria ({', '.join(criteria)}) into {output}",
              file=sys.stderr)
        try:
            outcome = run(options.model_copy(update=update), items=[i for k, i in items.items() if k in group],
                          criteria=rubric.select(criteria))
        except JudgeError as exc:  # refused before asking anything (a stale file, a bad server...): say whose
            flag = " (in its run options: redo_changed = true)" if "--redo-changed" in str(exc) else ""
            raise JudgeError(f"judge {name} ({judge.where}): {exc}{flag}") from None
        for line in outcome.messages():
            print(f"judge {name}: {line}", file=sys.stderr)
        if outcome.status == "interrupted":
            raise KeyboardInterrupt
        if outcome.status == "pending":
            raise RunStopped(f"judge {name} waits for batch answers: {outcome.note}; then run the same "
                             "`judge escalate` command to read them and carry on down the cascade",
                             outcome.exit_code, name)
        if outcome.status != "complete":
            raise RunStopped(f"judge {name}: some judgments failed (see above); {output} keeps the finished ones: "
                             "run the same command to retry them; no decision was made", EXIT_FAILED, name)
