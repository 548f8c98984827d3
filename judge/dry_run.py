"""`judge score|compare --dry-run`: the plan of a run without calling a model, and what it would cost.

The run's own engine walks the plan with a transport that answers nothing (`Planner`): every request a pass asks is
counted (its prompt tokens by judge/token_count.py, its answer bound by its max_tokens) and deferred, as
`--batch-dir` defers it; at the end of the pass the deferred requests make a *round*, and the next pass gets a
made-up answer for each (valid for its schema: the first allowed verdict, "yes" at every applicability gate, one
topic segment per split), so that the questions that depend on them are asked in the next round. So:
- `requests` and `rounds` are those of a batch run; a gate's dependent round is an upper bound (every gate saying
  yes), a per-segment criterion is estimated at one segment per candidate, and re-asks of unparseable answers and
  retries are not counted (they depend on the answers);
- judgments already finished in --output are not planned again (as a rerun would not ask them);
- cached prompt tokens are estimated as the prefix each request shares with the one before it in its (criterion,
  dialogue) group, the longest a prefix cache can serve (a hosted cache's minimum length may serve less).
Nothing is written: no cache, no output, no batch file, no server started. The last line printed is one JSON object:
requests, rounds, input_tokens, input_tokens_exact, output_tokens_max, cost (null without --prices), and what the
other numbers rest on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from judge.backends import PREFIX_GROUP, Completion
from judge.cache import request_key
from judge.errors import Deferred, JudgeError

_ZEROS: dict[Any, object] = {"integer": 0, "number": 0, "boolean": False}  # a made-up value by JSON type
ROUND_NOTES = {"gate": "a gated criterion's questions are counted as if every gate said yes (an upper bound)",
               "segments": "a per-segment criterion is counted at one segment per candidate (an estimate)"}


def made_up(schema: dict | None):
    """An answer valid for `schema`: the first allowed value, "yes" for a gate, one item of an array."""
    if not isinstance(schema, dict):
        return ""
    if "enum" in schema:
        return "yes" if "yes" in schema["enum"] else schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {name: made_up(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [made_up(schema.get("items")) or "segment"]
    return _ZEROS.get(kind, "")


class Planner:
    """A transport that asks nothing: it counts each request, defers it, and answers it with `made_up` in the next
    pass (judge/backends/batch.py's rounds, without files)."""

    name = "dry-run"
    answers_at_once = True

    def __init__(self, counter):
        self.counter = counter
        self.requests = self.rounds = self.input_tokens = self.cached_tokens = self.output_tokens_max = 0
        self.kinds: set[str] = set()  # what the dependent rounds rest on (ROUND_NOTES)
        self._asked: dict[str, str] = {}  # request key -> the made-up answer (its JSON text)
        self._new = 0  # requests asked in this pass
        self._previous: dict[str, list[dict]] = {}  # prefix group -> the last request's messages

    async def complete(self, body: dict, timeout: float) -> Completion:
        key = request_key(body)  # the asking layer's Request: its key, made once
        if key in self._asked:
            answer = self._asked[key]
            return {"content": answer, "finish_reason": "stop", "logprobs": None, "served": {},
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": None}}
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
        properties = (schema or {}).get("properties") or {}
        if "answer" in properties:
            self.kinds.add("gate")
        if "segments" in properties:
            self.kinds.add("segments")
        self._asked[key] = json.dumps(made_up(schema))
        self._count(body)
        raise Deferred(key)

    def _count(self, body: dict) -> None:
        self.requests += 1
        self._new += 1
        self.output_tokens_max += body.get("max_tokens") or 0
        tokens = self.counter.count(body["messages"])
        self.input_tokens += tokens
        group = PREFIX_GROUP.get()
        if group is not None:
            shared = self._shared_prefix(group, body["messages"])
            self.cached_tokens += min(shared, tokens)

    def _shared_prefix(self, group: str, messages: list[dict]) -> int:
        """Tokens of this request's prefix shared with the previous request of its group (counted on the system
        message and the user message's common start, in tokens of the same counter)."""
        previous = self._previous.get(group)
        self._previous[group] = messages
        if previous is None:
            return 0
        shared: list[dict] = []
        for old, new in zip(previous, messages):
            if old == new:
                shared.append(new)
                continue
            a, b = old.get("content") or "", new.get("content") or ""
            common = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            shared.append({**new, "content": new["content"][:common]})
            break
        return max(0, self.counter.count(shared) - 3)  # the reply's priming tokens are not part of the prefix

    async def end_pass(self) -> None:
        if self._new:
            self.rounds += 1
        self._new = 0
        return None

    def answer_to(self, key: str) -> Completion | None:
        return None

    def settle(self, result, mine: bool = False) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _Unwritten:
    """The results file as the engine sees it in a dry run: finished judgments are read, nothing is written."""

    def __init__(self, output: str | None):
        from judge.results import ResultsFile

        self.results = ResultsFile(output) if output and Path(output).exists() else None

    def finished(self, key) -> bool:
        return self.results is not None and self.results.finished(key)

    def write(self, judgment) -> None:
        pass


def plan(options) -> dict:
    """The dry run's numbers (the JSON object the CLI prints last)."""
    from judge.backends import Opened
    from judge.engine import UNCOUNTED, Engine, run_coroutine
    from judge.items import ItemFile
    from judge.rubric import load_rubric
    from judge.run import _settings
    from judge.token_count import for_model

    options = options.resolved()
    rubric = load_rubric(options.rubric)
    pairwise = options.command == "compare"
    if (rubric.task == "pairwise") != pairwise:
        use = "is not a pairwise rubric: use `judge score`" if pairwise else "compares pairs: use `judge compare`"
        raise JudgeError(f"rubric {rubric.name!r} {use}")
    if options.input is None:
        raise JudgeError("--input is required: the items to judge")
    model, tokenizer_model = options.model, options.model
    if options.backend == "local" and not options.batched:
        from judge.backends import local

        path = local.resolve_model(options.model)
        model, tokenizer_model = local.model_id(path), str(path)
    if not model:
        raise JudgeError(f"--backend {options.backend} needs --model (the model name the server serves)")
    counter = for_model(options.backend, tokenizer_model)
    planner = Planner(counter)
    # Planned with the schema always: its made-up answers need it, and the messages (the tokens) are the same.
    mode = "pairwise" if pairwise else options.mode
    settings = _settings(options.model_copy(update={"response_format": "json_schema"}),
                         Opened(planner, model, options.backend, "dry run", 64), mode)
    engine = Engine(planner, settings, None, rubric)
    planned = engine.plan(rubric.select(options.criteria), ItemFile(options.input, rubric.inputs))
    tally = run_coroutine(lambda: engine.run(planned, _Unwritten(options.output), progress=False, todo=UNCOUNTED))
    return {"requests": planner.requests, "rounds": planner.rounds, "input_tokens": planner.input_tokens,
            "input_tokens_exact": counter.exact, "cached_input_tokens": planner.cached_tokens,
            "output_tokens_max": planner.output_tokens_max, "cost": _cost(options, model, planner),
            "judgments": tally.planned - tally.already_done, "already_done": tally.already_done,
            "tokens": counter.how, "rounds_note": "; ".join(ROUND_NOTES[k] for k in sorted(planner.kinds)) or None}


def _cost(options, model: str, planner: Planner) -> float | None:
    if options.prices is None:
        return None
    from judge.prices import load_prices, price_of

    price = price_of(load_prices(options.prices), model, options.prices)
    batch = options.batch or (options.batch_dir is not None and options.executor != "ray")
    return price.cost(planner.input_tokens, planner.cached_tokens, planner.output_tokens_max, batch=batch)


def report(options) -> int:
    """Print the plan (what it rests on, then the JSON object as the last line) and return exit code 0."""
    numbers = plan(options)
    price = "" if numbers["cost"] is None else f"; at most {numbers['cost']:.6g} at the --prices table"
    print(f"dry run: {numbers['judgments']} judgments to make ({numbers['already_done']} already done), "
          f"{numbers['requests']} requests in {numbers['rounds']} round(s); {numbers['input_tokens']} input tokens "
          f"({numbers['tokens']}; {numbers['cached_input_tokens']} of them a cache could serve), at most "
          f"{numbers['output_tokens_max']} output tokens{price}; no model was called, nothing was written")
    if numbers["rounds_note"]:
        print(f"note: {numbers['rounds_note']}; re-asks of unparseable answers and retries are not counted")
    print(json.dumps(numbers, ensure_ascii=False))
    sys.stdout.flush()
    return 0
