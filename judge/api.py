"""The judging verbs as Python functions: `score`, `compare`, `read_judgments`, `judgments_frame`.

`score` and `compare` are `judge.run.run` with explicit keyword arguments: each is the flag of the same name in
`judge score --help` (underscored; `progress=False` is --no-progress, `swap=False` is --no-swap), checked by the
same typed options (judge/options.py) with the same messages. Results file, cache, resume, refusal of stale or
foreign files and secrets redaction are the run's. It works inside a running event loop (Jupyter, IPython, an async
app) as outside one: see `judge.engine.run_coroutine`. Errors raise `judge.errors.JudgeError` (never SystemExit);
an interrupted call keeps every finished judgment in `output`, stops the embedded server, and raises
KeyboardInterrupt. The returned frame goes unchanged into every `calibration` verb.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from judge.errors import JudgeError

if TYPE_CHECKING:
    import pandas as pd

    from judge.judgment import Judgment
    from judge.options import CompareKwargs, ScoreKwargs


def score(rubric: str | Path, items: str | Path | list[dict] | pd.DataFrame, output: str | Path | None = None,
          **options: Unpack[ScoreKwargs]) -> pd.DataFrame:
    """Judge every (item, criterion) of `items` with `rubric`; one row per judgment, as `judge score` writes them.

    Args:
        rubric: a bundled rubric's name (see `judge rubrics`) or the path of a rubric YAML file.
        items: a path (JSONL or CSV), a list of dicts or a DataFrame with the columns of an items file (id,
            dialogue, candidate, system[, reference]).
        output: the judgments JSONL, appended to and resumed from (None: a temporary file, resumable within the
            call).
        **options: the run options (`judge.options.ScoreKwargs`), each the flag of the same name in `judge score
            --help`, underscored, with its default. What to judge: `criteria` (str "a,b" or list of str; None: all),
            `template` (str or Path, a Jinja2 file), `mode` ("pointwise" or "block"), `redo_changed` (bool). The
            model: `backend` ("local", "openai", "vllm" or None: openai with a `base_url`, else local), `model`
            (str), `base_url` (str or list of str, one per replica), `api_key_env` (str, the variable holding the
            key), `client` ("auto", "sdk", "aiohttp"), `concurrency` (int), `timeout` (float, seconds). Decoding:
            `temperature` (float, 0 to 2), `max_tokens` (int), `seed` (int), `samples` (int), `logprobs` (bool),
            `response_format` ("json_schema", "json_object", "text"). The cache: `cache` (str or Path, a folder),
            `no_cache` (bool), `refresh` (bool), `progress` (bool). The vLLM engine: `tensor_parallel_size` (int),
            `max_model_len` (int), `dtype` ("auto", "float32", "bfloat16", "float16"), `gpu_memory_utilization`
            (float, 0 to 1). Cost: `prices` (str or Path, a price table). Batch and scale-out: `batch` (bool),
            `batch_dir` (str or Path), `shards` (int), `executor` ("online" or "ray"), `ray_address` (str),
            `dry_run` (bool). An unknown one raises JudgeError naming the closest.

    Returns:
        One row per planned judgment (item_id, system, criterion, score, label, status, ...), the frame
        `judge.judgments_frame` reads from a file; `frame.attrs` holds "summary" (the CLI's tally line),
        "warnings", "failed" and "outcome" (judge.run.Outcome).

    Raises:
        JudgeError: what cannot run (a bad option, item or rubric), said as the CLI says it. A KeyboardInterrupt
            keeps every finished judgment in `output`.

    Example (`URL`: an OpenAI-compatible server; the tests give a local stub):

    >>> import judge
    >>> frame = judge.score("dialsummeval", "examples/items.jsonl", base_url=URL, model="M",
    ...                     criteria=["consistency"], cache=CACHE_DIR, progress=False)
    >>> frame[["item_id", "system", "criterion", "score"]].shape
    (4, 4)
    """
    return _judge("score", rubric, items, output, options)


def compare(rubric: str | Path, items: str | Path | list[dict] | pd.DataFrame, output: str | Path | None = None,
            **options: Unpack[CompareKwargs]) -> pd.DataFrame:
    """Judge pairs of candidates (1 / 2 / 0 for a tie), in both orders unless `swap=False`; as `judge compare`.

    Args:
        rubric: a pairwise rubric's name (e.g. pairwise_summary) or the path of its YAML file.
        items: as for `score`, with candidate_1, candidate_2 (and system_1, system_2) instead of candidate.
        output: the verdicts JSONL, appended to and resumed from (None: a temporary file).
        **options: the run options (`judge.options.CompareKwargs`), each the flag of the same name in `judge compare
            --help`, underscored, with its default. What to judge: `criteria` (str "a,b" or list of str; None: all),
            `template` (str or Path, a Jinja2 file), `swap` (bool; False: only the input's order), `redo_changed`
            (bool). The model: `backend` ("local", "openai", "vllm" or None: openai with a `base_url`, else local),
            `model` (str), `base_url` (str or list of str, one per replica), `api_key_env` (str, the variable holding
            the key), `client` ("auto", "sdk", "aiohttp"), `concurrency` (int), `timeout` (float, seconds). Decoding:
            `temperature` (float, 0 to 2), `max_tokens` (int), `seed` (int), `samples` (int), `logprobs` (bool),
            `response_format` ("json_schema", "json_object", "text"). The cache: `cache` (str or Path, a folder),
            `no_cache` (bool), `refresh` (bool), `progress` (bool). The vLLM engine: `tensor_parallel_size` (int),
            `max_model_len` (int), `dtype` ("auto", "float32", "bfloat16", "float16"), `gpu_memory_utilization` (float,
            0 to 1). Cost: `prices` (str or Path, a price table). Batch and scale-out: `batch` (bool), `batch_dir` (str
            or Path), `shards` (int), `executor` ("online" or "ray"), `ray_address` (str), `dry_run` (bool). An unknown
            one raises JudgeError naming the closest.

    Returns:
        One row per verdict, as `score` returns them; the verdict is the `label`: "1", "2", or "0" for a tie.

    Raises:
        JudgeError: what cannot run, as for `score`.

    >>> import judge
    >>> frame = judge.compare("pairwise_summary", "examples/pairs.jsonl", base_url=URL, model="M",
    ...                       cache=CACHE_DIR, progress=False)
    >>> set(frame["label"]) <= {"0", "1", "2"}
    True
    """
    return _judge("compare", rubric, items, output, options)


def read_judgments(path: str | Path) -> list[Judgment]:
    """Every judgment of a judgments JSONL file, typed (`judge.judgment.Judgment`); `judgments_frame` turns them
    into a DataFrame.

    Args:
        path: a judgments JSONL file (str or Path), as `judge score` writes it.

    Returns:
        The judgments, in the file's order.

    Raises:
        OutputError: naming the file and line of the first bad one.

    >>> import judge
    >>> judgments = judge.read_judgments("examples/study/judgments.jsonl")
    >>> judgments[0].status in {"ok", "na", "error", "abstain", "label"}
    True
    """
    from judge.judgment import read_judgments as lines

    return [judgment for _, judgment in lines(path)]


def judgments_frame(judgments) -> pd.DataFrame:
    """Judgments as the judgments table (judge/table.py), one row each: the frame every `calibration` verb takes.

    Args:
        judgments: a list of `judge.judgment.Judgment`, or the path (str or Path) of a judgments JSONL file.

    Returns:
        A DataFrame: item_id, system, criterion, score, label, status, ... (one row per judgment).

    >>> import judge
    >>> frame = judge.judgments_frame("examples/study/judgments.jsonl")
    >>> list(frame.columns[:4])
    ['item_id', 'system', 'criterion', 'score']
    """
    from judge.table import judgments_table

    return judgments_table(judgments)


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


def _judge(verb: str, rubric, items, output, options: ScoreKwargs | CompareKwargs) -> pd.DataFrame:
    from judge.options import CompareKwargs, RunOptions, ScoreKwargs, unknown_keywords
    from judge.run import run

    unknown_keywords(options, (ScoreKwargs if verb == "score" else CompareKwargs).__annotations__, f"judge.{verb}")

    given = output
    with tempfile.TemporaryDirectory(prefix="judge-") as scratch:
        folder = Path(scratch)
        written = None
        try:
            path, written = _items_file(items, folder)
            output = str(output) if output is not None else str(folder / "judgments.jsonl")
            outcome = run(RunOptions(command=verb, rubric=str(rubric), input=path, output=output, **options), keys=True)
        except JudgeError as exc:
            exc.args = (_as_given(str(exc), written), *exc.args[1:])
            raise
        if outcome.status == "interrupted":
            raise KeyboardInterrupt  # finished judgments are in the output
        frame = judgments_frame(_planned(output, outcome.keys))
    if given is not None:
        frame.attrs["path"] = str(given)  # named as its file, and a study's rubric is found beside it
    if Path(str(rubric)).suffix in (".yaml", ".yml"):
        frame.attrs["rubric_file"] = str(rubric)  # its scales check human labels in calibrate, screen, estimate
    messages = outcome.messages()
    frame.attrs.update(summary="\n".join(messages[:1]), warnings=messages[1:], outcome=outcome,
                       failed=outcome.tally.failed if outcome.tally is not None else 0,
                       pending=outcome.status == "pending")
    return frame


def _planned(output: str, keys: list) -> list[Judgment]:
    """The finished judgments of `output` that this run planned, in plan order (the file may hold others)."""
    from judge.judgment import read_judgments as lines

    if not Path(output).exists():
        return []
    wanted = set(keys)
    done = {j.key: j for _, j in lines(output) if j.key in wanted}
    return [done[key] for key in keys if key in done]
