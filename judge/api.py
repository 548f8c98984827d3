"""The judging verbs as Python functions: `score`, `compare` and `read_judgments`.

The command line is a thin layer over the same code (judge/cli.py `judge_items`): the flags of `judge score` are
the keyword arguments of `score`, underscored, read from the CLI's own parser, so a flag added there is a keyword
here at once. Results file, cache, resume, refusal of stale or foreign files and secrets redaction are the CLI's.
It works inside a running event loop (Jupyter, IPython, an async app) as outside one: see
`judge.engine.run_coroutine`. Errors raise `judge.errors.JudgeError` (never SystemExit); an interrupted call keeps
every finished judgment in `output`, stops the embedded server, and raises KeyboardInterrupt.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.errors import JudgeError

if TYPE_CHECKING:
    import pandas as pd

    from judge.judgment import Judgment

# The positional and file arguments of the functions themselves; everything else is a flag.
_OWN = {"rubric", "input", "output"}
# Keyword spellings that read better in Python than the negated flag.
_ALIASES = {"progress": ("no_progress", lambda on: not on), "swap": ("no_swap", lambda on: not on)}


def score(rubric: str, items, output: str | Path | None = None, **options: Any) -> pd.DataFrame:
    """Judge every (item, criterion) of `items` with `rubric`; one row per judgment, as `judge score` writes them.

    `items` is a path (JSONL or CSV), a list of dicts or a DataFrame with the columns of an items file (id,
    dialogue, candidate, system[, reference]). `output` is the judgments JSONL, appended to and resumed from (None:
    a temporary file, resumable within the call). Keyword arguments are the flags of `judge score --help`,
    underscored: criteria (a list or "a,b"), backend, model, base_url (a URL or a list), concurrency, samples,
    temperature, cache, no_cache, redo_changed, mode, template, progress (False = --no-progress), ...

    The returned frame has one row per planned judgment (id, system, criterion, score, label, status, ...);
    `frame.attrs` holds "summary" (the CLI's tally line), "warnings" and "failed".

    >>> import judge
    >>> frame = judge.score("dialsummeval", "examples/items.jsonl", base_url=URL, model="M",  # doctest: +SKIP
    ...                     criteria=["consistency"], cache=CACHE_DIR, progress=False)
    >>> frame[["id", "system", "criterion", "score"]].shape[1]  # doctest: +SKIP
    4
    """
    return _judge("score", rubric, items, output, options)


def compare(rubric: str, items, output: str | Path | None = None, **options: Any) -> pd.DataFrame:
    """Judge pairs of candidates (1 / 2 / 0 for a tie), in both orders unless `swap=False`; as `judge compare`.

    `items` holds candidate_1, candidate_2 (and system_1, system_2). Keyword arguments are the flags of
    `judge compare --help`, underscored. One row per verdict, as `score` returns them.

    >>> import judge
    >>> frame = judge.compare("pairwise_summary", "examples/pairs.jsonl", base_url=URL,  # doctest: +SKIP
    ...                       model="M", progress=False)
    >>> set(frame["score"].dropna()) <= {0.0, 1.0, 2.0}  # doctest: +SKIP
    True
    """
    return _judge("compare", rubric, items, output, options)


def read_judgments(path: str | Path) -> list[Judgment]:
    """Every judgment of a judgments JSONL file, typed (`judge.judgment.Judgment`); OutputError naming the file
    and line of the first bad one. `judgments_frame` turns them into a DataFrame.

    >>> import judge
    >>> judgments = judge.read_judgments("examples/study/judgments.jsonl")
    >>> judgments[0].status in {"ok", "na", "error", "abstain", "label"}
    True
    """
    from judge.judgment import read_judgments as lines

    return [judgment for _, judgment in lines(path)]


def judgments_frame(judgments) -> pd.DataFrame:
    """Judgments (typed, or a path to a judgments file) as a DataFrame, one row each, with a `status` column.

    >>> import judge
    >>> frame = judge.judgments_frame("examples/study/judgments.jsonl")
    >>> list(frame.columns[:4])
    ['id', 'system', 'criterion', 'score']
    """
    import pandas as pd

    from judge.judgment import Judgment

    path = judgments if isinstance(judgments, (str, Path)) else None
    if path is not None:
        judgments = read_judgments(path)
    rows = [{**j.model_dump(mode="json"), "status": j.status} for j in judgments]
    columns = list(Judgment.model_fields) + ["status"]
    frame = pd.DataFrame(rows, columns=columns)
    if path is not None:
        frame.attrs["path"] = str(path)  # the statistics verbs find a study's own rubric beside it
    return frame


# -- the keyword arguments are the CLI's flags ---------------------------------------------------------------------
def _verb_parser(verb: str) -> argparse.ArgumentParser:
    from judge.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[verb]


def flag_of(action: argparse.Action) -> str:
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def namespace(verb: str, given: dict[str, Any]) -> argparse.Namespace:
    """The argparse Namespace the CLI would build for `judge VERB` with these flags as keyword arguments: the
    parser's own dests and defaults, each value checked as the flag would be (JudgeError with the flag's name)."""
    parser = _verb_parser(verb)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    values = {dest: a.default for dest, a in actions.items()}
    values.update(parser._defaults)
    values["command"] = verb
    for key, value in given.items():
        if key in _ALIASES:
            key, value = _ALIASES[key][0], _ALIASES[key][1](value)
        if key not in actions or key in ("command", "run"):
            known = sorted([*actions, *_ALIASES] if key not in _OWN else [])
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; `judge {verb} --help` lists the flags"
            raise JudgeError(f"{verb}(): unknown keyword argument {key!r}{hint}")
        values[key] = _value(actions[key], value)
    return argparse.Namespace(**values)


def _value(action: argparse.Action, value: Any) -> Any:
    flag = flag_of(action)
    if value is None:
        return None
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise JudgeError(f"{flag} is a switch: give True or False, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        value = [value] if isinstance(value, (str, Path)) else list(value)
        return [_one(action, flag, v) for v in value]
    if action.dest == "criteria" and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return _one(action, flag, value)


def _one(action: argparse.Action, flag: str, value: Any) -> Any:
    kind = action.type
    if kind in (int, float) and not isinstance(value, bool) and isinstance(value, (int, float)):
        if kind is int and value != int(value):
            raise JudgeError(f"{flag} must be a whole number, got {value!r}")
        value = kind(value)
    elif isinstance(value, Path) and kind in (None, str):
        value = str(value)
    elif isinstance(value, str) and callable(kind) and kind is not str:
        try:
            value = kind(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise JudgeError(f"{flag}: {exc or 'invalid value'}: {value!r}") from None
    elif kind in (int, float) or (kind in (None, str) and not isinstance(value, str)):
        want = {int: "a whole number", float: "a number"}.get(kind, "text")
        raise JudgeError(f"{flag} must be {want}, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise JudgeError(f"{flag} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


# -- items in, judgments out -------------------------------------------------------------------------------------
def _items_file(items, folder: Path) -> tuple[str, str | None]:
    """A path to read the items from, and the file written for items given as data (None for a path)."""
    if isinstance(items, (str, Path)):
        return str(items), None
    path = folder / "items.jsonl"
    if hasattr(items, "to_json"):  # a DataFrame: numpy values and NaN as JSON
        text = items.to_json(orient="records", lines=True, force_ascii=False)
    elif isinstance(items, (list, tuple)) and all(isinstance(i, dict) for i in items):
        text = "".join(json.dumps(i, ensure_ascii=False, default=str) + "\n" for i in items)
    else:
        raise JudgeError(f"items: expected a path, a list of dicts or a DataFrame, got {type(items).__name__}")
    path.write_text(text, encoding="utf-8")
    return str(path), str(path)


def _as_given(message: str, written: str | None) -> str:
    """Name items given as data by their index (items[2]) rather than by the temporary file they went through."""
    if written is None:
        return message
    message = re.sub(re.escape(written) + r":(\d+)", lambda m: f"items[{int(m.group(1)) - 1}]", message)
    return message.replace(written, "items")


def _judge(verb: str, rubric, items, output, options: dict) -> pd.DataFrame:
    from judge.cli import judge_items

    with tempfile.TemporaryDirectory(prefix="judge-") as scratch:
        folder = Path(scratch)
        try:
            path, written = _items_file(items, folder)
            args = namespace(verb, options)
            args.rubric, args.input = str(rubric), path
            args.output = str(output) if output is not None else str(folder / "judgments.jsonl")
            tally = judge_items(args)
        except JudgeError as exc:
            exc.args = (_as_given(str(exc), written), *exc.args[1:])
            raise
        if tally is None:
            raise KeyboardInterrupt  # the CLI's note is printed; finished judgments are in the output
        done = {j.key: j for j in read_judgments(args.output)} if Path(args.output).exists() else {}
        frame = judgments_frame([done[key] for key in getattr(tally, "keys", []) if key in done])
    if Path(str(rubric)).suffix in (".yaml", ".yml"):
        frame.attrs["rubric_file"] = str(rubric)  # its scales check human labels in calibrate, screen, estimate
    if hasattr(tally, "failed"):
        frame.attrs.update(summary=tally.line(), warnings=tally.warnings(), failed=tally.failed)
    else:  # batch files await a runner: what is finished, and what to do
        frame.attrs.update(summary=str(tally), warnings=[str(tally)], failed=0, pending=True)
    return frame
