"""`run(options)`: one judging run, as a library call. The CLI's `judge score`/`compare`/`qualify`, the Python API's
`judge.score`/`judge.compare` and the audit's probes all call it and read its typed `Outcome`.

A run plans the judgments, refuses what it must before any server starts or any file is created (a template that
does not render, a results file that is not ours, stale judgments), opens the backend, asks, records each judgment
in the results file as soon as it is complete, and returns what happened. It prints only progress and notes a user
must see while it runs; the summary is the caller's to print (`Outcome.tally.line()`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from judge.errors import EXIT_BATCH_PENDING, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, JudgeError  # noqa: F401 - the codes, as importers knew them here

if TYPE_CHECKING:  # pydantic is not imported by `judge --help`, which imports this module for its exit codes
    from judge.backends import ChatClient
    from judge.engine import Tally
    from judge.items import Item, Oversized
    from judge.options import RunOptions

LONG_ITEM_CHARS = 40_000  # about 10k tokens: more than many context windows, and costly on a paid API


@dataclass
class Outcome:
    """What a run did. `status`: "complete" (every planned judgment is in `output`, none failed), "failed" (some
    failed: their lines carry the error; the same run retries them), "interrupted" (Ctrl-C: finished judgments are
    kept), "pending" (batch files await a runner: `note` says what to run; the same run reads the answers)."""

    status: Literal["complete", "failed", "interrupted", "pending"]
    output: Path
    keys: list = field(default_factory=list)  # the (id, system, criterion) of every planned judgment, in plan order
    tally: Tally | None = None  # counts, tokens, time (None when interrupted or pending)
    note: str = ""

    @property
    def exit_code(self) -> int:
        return {"complete": 0, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED,
                "pending": EXIT_BATCH_PENDING}[self.status]

    def messages(self) -> list[str]:
        """The lines a user reads at the end: the summary, warnings, and what to do about failures."""
        if self.status == "interrupted":
            return [f"interrupted: finished judgments are saved in {self.output}; run the same command to resume"]
        if self.status == "pending":
            return [self.note]
        if self.note:  # nothing to do
            return [self.note]
        tally = _tally_of(self)
        out = [tally.line(), *tally.warnings()]
        if tally.failed:
            reasons = ", ".join(f"{n}× {why}" for why, n in tally.errors.most_common(3))
            out.append(f"{tally.failed} judgments failed ({reasons}); their lines carry the error and the raw "
                       "answer; run the same command again to retry them")
        return out


def run(options: RunOptions, *, items=None, criteria=None, keys: bool = False) -> Outcome:
    """Judge `options.input` (read as a stream) or the given `items` (judge.items.Item) on the rubric's criteria
    (or the given ones) into `options.output`. Raises JudgeError for what cannot run; a Ctrl-C returns an
    "interrupted" outcome. `keys`: list every planned judgment's key in `Outcome.keys` (the API's frame)."""
    from judge.items import ItemFile
    from judge.rubric import load_rubric

    if options.dry_run:
        raise JudgeError("dry_run plans a run without running it: call judge.dry_run.plan(options) for its numbers")
    if options.output is None:
        raise JudgeError("--output is required: the judgments file that the run appends to and resumes from")
    rubric = load_rubric(options.rubric)
    pairwise = options.command == "compare" or (options.command == "qualify" and rubric.task == "pairwise")
    if options.command != "qualify":
        if rubric.task == "pairwise" and not pairwise:
            raise JudgeError(f"rubric {rubric.name!r} compares pairs: use `judge compare`")
        if rubric.task != "pairwise" and pairwise:
            raise JudgeError(f"rubric {rubric.name!r} is not a pairwise rubric: use `judge score`")
    if criteria is None:
        criteria = rubric.select(options.criteria)
    if items is None:
        if options.input is None:
            raise JudgeError("--input is required: the items to judge")
        items = ItemFile(options.input, rubric.inputs)
    mode = "pairwise" if pairwise else options.mode
    options = options.resolved()
    run_id = run_identity(options) if options.batched else None  # the batch transports name their files by it
    return _run(options, rubric, criteria, items, mode, keys, run_id)


def run_identity(options: RunOptions) -> str:
    """The run's identity, handed to the batch transports (they name and check their files by it): what makes a
    run the same command: verb, rubric (its content), items (their bytes), criteria, templates (their
    text), model and decoding."""
    import hashlib
    import json

    from judge.judgment import digest
    from judge.prompting import template_sources
    from judge.rubric import load_rubric

    parts = {name: getattr(options, name) for name in (
        "command", "rubric", "criteria", "mode", "model", "temperature", "samples", "seed", "max_tokens",
        "logprobs", "response_format", "template", "swap")}
    items = options.input
    if items and Path(items).is_file():
        with Path(items).open("rb") as handle:
            parts["items"] = hashlib.file_digest(handle, "sha256").hexdigest()
    if parts["rubric"]:  # what the rubric says, not its name: an edit while batches run makes another command
        try:
            parts["rubric_content"] = digest(load_rubric(parts["rubric"]).model_dump(mode="json"))
        except JudgeError:
            pass  # loading it for the run says what is wrong
    parts["templates"] = digest(template_sources(parts["template"]))  # as the judgments' fingerprint reads them
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _settings(options: RunOptions, opened, mode: str):
    from judge.settings import Settings

    assert options.concurrency is not None and options.timeout is not None, "the options are resolved"
    return Settings(
        model=opened.model, backend=opened.backend, temperature=options.sampling_temperature,
        max_tokens=options.max_tokens, samples=options.samples, logprobs=options.logprobs, seed=options.seed,
        concurrency=opened.concurrency or options.concurrency, timeout=options.timeout,
        response_format=options.response_format, template=options.template, mode=mode,
        swap=options.swap, where=opened.where)


def _cache(options: RunOptions):
    from judge.cache import AnswerCache, NoCache, RefreshCache, default_cache_dir

    if options.no_cache:
        return NoCache()
    import sqlite3

    where = Path(options.cache) if options.cache else default_cache_dir()
    try:
        return (RefreshCache if options.refresh else AnswerCache)(where)
    except (OSError, sqlite3.Error) as exc:
        what = f"--cache {options.cache}" if options.cache else f"the answer cache's default folder {where}"
        why = ("it is a file; the answer cache is a folder" if where.exists() and not where.is_dir()
               else getattr(exc, "strerror", None) or str(exc))
        raise JudgeError(f"{what}: the answer cache cannot be opened there ({why}); give --cache a folder this "
                         "user can write, or run with --no-cache") from None


def _stale_message(output: str, stale: dict) -> str:
    from collections import Counter

    reasons = Counter(reason for found in stale.values() for reason in found)
    what = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common(4))
    first = next(iter(stale))
    return (f"{output}: {len(stale)} finished judgments were made differently from what this run would ask ({what}; "
            f"first: id {first[0]!r}, system {first[1]!r}, criterion {first[2]!r}); reusing them would mix results: "
            f"add --redo-changed to judge them again (their lines are replaced), or choose another --output")


class _Preflight:
    """What can be found wrong before a server starts or a file is created: a template that does not render, a pair
    missing from a pairwise run, and items so long that their prompts may not fit. It watches the items as the plan
    walks them to check the results file (one pass over the file does both; `pass_alone` when there is no such walk),
    then `finish` renders the first item's prompts and warns."""

    def __init__(self, options: RunOptions, rubric, criteria, items, mode: str):
        self.options, self.rubric, self.criteria, self.items, self.mode = options, rubric, criteria, items, mode
        self.first: Item | None = None
        self.group: list[Item] = []
        self.long: list[Oversized] = []
        self.watching, self.finished = True, False

    def __iter__(self):
        if not self.watching:  # the second criterion's walk, or the run's: seen already
            yield from self.items
            return
        from judge.items import Oversized

        pairwise, block = self.mode == "pairwise", self.mode == "block"
        for item in self.items:
            if self.first is None:
                self.first = item
            if block and item.id == self.first.id:
                self.group.append(item)
            if not pairwise and item.is_pair:
                raise JudgeError(pair_for_one(self.options.input, item, self.rubric))
            if pairwise and not item.is_pair:
                raise JudgeError(f"{self.options.input}:{item.line}: item {item.id!r} has no candidate_1/candidate_2 "
                                 "pair")
            if item.text_chars > LONG_ITEM_CHARS:
                self.long.append(Oversized(item.line, item.id, item.system, item.text_chars))
            yield item
        self.watching = False

    def pass_alone(self) -> None:
        if self.watching:
            for _ in self:
                pass

    def finish(self) -> None:
        """Walk the items if no walk did (`pass_alone`), render the first prompts and warn; once."""
        from judge.judging import block_letters
        from judge.prompting import block_messages, criterion_messages

        self.pass_alone()
        if self.finished:
            return
        self.finished = True
        if self.first is None:
            raise JudgeError("no items to judge")
        for criterion in self.criteria:
            if self.mode == "block" and not criterion.per_segment:
                block_messages(self.rubric, criterion, self.group, block_letters(len(self.group)))
            else:
                criterion_messages(self.rubric, criterion, self.first, self.options.template,
                                   segment="…" if criterion.per_segment else None,
                                   segment_number=1 if criterion.per_segment else None)
        if long := self.long:
            where = ", ".join(f"line {o.line} ({o.chars:,} characters)" for o in long[:3])
            print(f"warning: {len(long)} item(s) of {self.options.input or 'the items'} hold more than "
                  f"{LONG_ITEM_CHARS:,} characters of text ({where}{', ...' if len(long) > 3 else ''}): about a token "
                  "per 4 characters, their prompts may exceed the model's context (those judgments then fail with the "
                  "server's reason) and cost more", file=sys.stderr)


def pair_for_one(source, item, rubric) -> str:
    """What to say of a pair (candidate_1, candidate_2) given to a rubric that judges one candidate."""
    where = f"{source}:{item.line}" if source and item.line else f"item {item.id!r}"
    return (f"{where}: item {item.id!r} is a pair (candidate_1, candidate_2, no candidate), and rubric "
            f"{rubric.name!r} judges one candidate at a time: use a pairwise rubric (e.g. pairwise_summary, with "
            "`judge compare`), or give each candidate its own line as `candidate`")


HOSTED = ("api.openai.com",)  # servers that refuse every request without a key


def _check_key(options: RunOptions) -> None:
    """An API key variable that is unset or empty, said before anything starts: for the hosted API an error (every
    request would be refused, or fail as a connection error), for another server a note that no key is sent (a
    local server needs none; a misspelt --api-key-env would go unseen)."""
    from urllib.parse import urlsplit

    if options.backend != "openai" or options.batch_dir is not None:
        return  # the embedded and in-process engines take no key; --batch-dir only writes files
    name = options.api_key_env
    value = os.environ.get(name)
    if value is not None and value.strip():
        return
    state = "is not set" if value is None else "is empty"
    hosted = [url for url in options.servers if url is None or urlsplit(url).hostname in HOSTED]
    if hosted:
        raise JudgeError(f"${name} {state}: the OpenAI API needs a key: set it in the environment (export "
                         f"{name}=...), or name the variable that holds it with --api-key-env, or give --base-url "
                         "for a server that needs none")
    if value is not None or name != "OPENAI_API_KEY":  # the default variable unset: a local server, as usual
        from judge.options import shown_url

        where = ", ".join(shown_url(url) for url in options.servers if url is not None)  # none: refused above
        print(f"note: ${name} {state}: no API key is sent to {where}", file=sys.stderr)


def _planned_model(options: RunOptions) -> str | None:
    """The model id the judgments will carry, known before any server starts (None: known only once opened)."""
    if options.batched or options.backend != "local":
        return options.model
    from judge.backends import local

    return local.model_id(local.resolve_model(options.model))


def _keeps_keys(options: RunOptions, items, mode: str) -> bool:
    """Whether the run keeps --batch-dir's key file (judge/backends/batchkeys.py): a pointwise run of the items of
    its --input file (the folder's fingerprint covers that file's bytes, not items given in code)."""
    from judge.items import ItemFile

    return (options.batch_dir is not None and mode == "pointwise" and isinstance(items, ItemFile)
            and options.input is not None and Path(items.path) == Path(options.input))


def _from_keys(options: RunOptions, rubric, criteria, mode: str, results, open_cache, redact, opened):
    """--batch-dir, reading answers back: record the judgments of the folder's key file whose answers are here, with
    neither the items nor a prompt (Engine.run_keyed). Returns (tally, judgments left to the full path), or None
    when there is no key file of this run, or the results file holds a judgment this run would make differently or
    another judge's (the full path says so, before anything is written). `open_cache()`: the answer cache, opened
    only when there is a key file to read."""
    from judge.backends.batchkeys import identity
    from judge.engine import Engine, Tally

    settings = _settings(options, opened, mode)
    records, why = opened.client.key_file(identity(Engine(None, settings, None, rubric).judge, criteria))
    if records is None:
        if why:
            print(f"note: {why}", file=sys.stderr)
        return None
    engine = Engine(opened.client, settings, open_cache(), rubric, redact)
    planned = done = 0
    for record in records if len(results) else ():  # a new results file holds nothing done, nothing stale
        planned += 1
        found = results.matches((record[0], record[1], record[2]), lambda: engine.judge.item_fingerprint(
            record[2], record[3]))
        if found is False:
            return None
        done += bool(found)
    planned = planned or len(records)
    if results.other_judge(rubric.ref, opened.model):
        return None
    results.start()
    if done == planned:
        return Tally(planned=planned, already_done=planned), 0
    return engine.run_keyed(records, results, criteria, options.progress, todo=planned - done)


def _run(options: RunOptions, rubric, criteria, items, mode: str, keys: bool, run_id: str | None) -> Outcome:
    """Run the engine over items into the results file. Everything that can refuse the run (template, the results
    file, stale judgments) is checked and the work planned before a backend is opened: a rerun with nothing left
    to do starts no server. The plan is walked, never held: once to check the results file, once to judge.

    --batch-dir reading answers back goes first through its key file (`_from_keys`): what it records needs neither
    the items nor a prompt; only what it leaves (a missing or failed answer, a gate) takes the full path."""
    import contextlib
    from typing import cast

    from judge.backends import Opened, open_backend
    from judge.backends.batchkeys import identity
    from judge.engine import UNCOUNTED, Engine, run_coroutine
    from judge.errors import OutputError
    from judge.outputs import landing, same_file
    from judge.results import Check, ResultsFile
    from judge.secrets import Redactor

    given_output, backend_name = _output_and_backend(options)
    output = str(landing(given_output))  # `sub/../x` with sub/ absent is `x`: checked, and written, as such
    price = _planned_price(options)
    if options.input and same_file(output, options.input):
        raise OutputError(f"{options.output}: --output is the --input file; choose another --output")
    _check_key(options)
    preflight = _Preflight(options, rubric, criteria, items, mode)
    results = ResultsFile(output)  # refuses a file that is not ours before any server starts
    redact = Redactor(os.environ.get(options.api_key_env))
    cache = None  # opened with the backend: a run refused before (a bad item, a stale file) creates nothing
    keeps_keys = _keeps_keys(options, items, mode)

    def plan(opened):
        engine = Engine(opened.client, _settings(options, opened, mode), cache, rubric, redact)
        return engine, engine.plan(criteria, preflight)

    def open_cache():
        nonlocal cache
        if cache is None:
            cache = _cache(options)
        return cache

    outcome = Outcome("complete", Path(output))
    earlier = None  # what the key file recorded, when it left judgments to the full path
    try:
        with contextlib.ExitStack() as backend:
            opened = None
            if keeps_keys and not keys and not options.refresh:
                opened = backend.enter_context(open_backend(options, run_id))
                try:
                    keyed = _from_keys(options, rubric, criteria, mode, results, open_cache, redact, opened)
                except KeyboardInterrupt:
                    outcome.status = "interrupted"
                    return outcome
                if keyed is not None:
                    earlier, left = keyed
                    if not left:
                        run_coroutine(opened.client.aclose)
                        outcome.tally = earlier
                        if earlier.already_done == earlier.planned:
                            outcome.note = f"nothing to do: all {earlier.planned} judgments are in {output}"
                            return outcome
                        return _priced(outcome, options, price, opened)
            if not options.batched and options.backend == "local":
                preflight.finish()  # finding the embedded model may fetch it: first be sure the items can be judged
            model, check = _planned_model(options), None
            # A batched run into a new results file: nothing is done or stale there, so a check walk would only
            # count; the items are read and checked once, by the run's own walk (the preflight watches it), before
            # any batch file is committed or uploaded.
            once = options.batched and not keys and not len(results)
            if model is not None and not once:
                _, planned = plan(Opened(cast("ChatClient", None), model, backend_name, ""))  # planned, not asked
                check = results.check(planned, keys=keys)  # the preflight watches this walk over the items
            if not once:
                preflight.finish()
            # Only "nothing to do" is decided here; what is refused is refused once the backend has checked its
            # own flags (a bad --model is reported before a stale file).
            if check is not None and _nothing_to_do(options, results, check, outcome):
                return outcome
            open_cache()
            if opened is None:
                opened = backend.enter_context(open_backend(options, run_id))
            engine, planned = plan(opened)
            if once:
                check = Check()
            elif check is None or opened.model != model:  # the model id is known only now: check again
                check = results.check(planned, keys=keys)
                outcome.keys = check.keys
            served_from_cache = _start_results(options, results, check, rubric, opened, output)
            todo = UNCOUNTED if once else check.planned - check.done + len(served_from_cache)
            key_writer = opened.client.key_writer(identity(engine.judge, criteria)) if keeps_keys else None
            if not _judge_planned(engine, planned, results, opened, preflight, outcome, todo, key_writer):
                return outcome  # interrupted, or waiting for batch answers
            if earlier is not None:
                _tally_of(outcome).absorb(earlier)
    except JudgeError:
        results.abandon()
        raise
    finally:
        results.close()
        if cache is not None:
            cache.close()
    return _priced(outcome, options, price, opened)


def _output_and_backend(options: RunOptions) -> tuple[str, str]:
    """--output and the backend of the options `run` hands to `_run`: it refuses a run without --output, and
    resolves the options (the backend is chosen)."""
    assert options.output is not None and options.backend is not None, "run() checks --output and resolves"
    return options.output, options.backend


def _tally_of(outcome: Outcome) -> Tally:
    """The tally of a run that went to its end (only an interrupted or pending run has none)."""
    assert outcome.tally is not None, "a run that ended has its tally"
    return outcome.tally


def _nothing_to_do(options: RunOptions, results, check, outcome: Outcome) -> bool:
    """Whether the results file holds every planned judgment already (and --refresh asks none again): then the
    outcome says so, and no backend opens."""
    from judge.engine import Tally

    outcome.keys = check.keys
    if not check.nothing_to_do or (options.refresh and check.cached):
        return False
    results.start()
    outcome.tally = Tally(planned=check.planned, already_done=check.planned)
    outcome.note = f"nothing to do: all {check.planned} judgments are in {outcome.output}"
    return True


def _planned_price(options: RunOptions):
    """The --prices table's price of the model, read and checked before anything starts (None: no table, or the
    model id is known only once the backend is open)."""
    if options.prices is None:
        return None
    from judge.prices import load_prices, price_of

    table = load_prices(options.prices)
    return price_of(table, options.model or "", options.prices) if options.model else None


def _start_results(options: RunOptions, results, check, rubric, opened, output: str) -> set:
    """Refuse stale judgments (without --redo-changed) and another judge's file, then start the results file,
    replacing the lines to redo; returns the judgments --refresh asks again because the cache answered them."""
    from judge.errors import OutputError

    stale = check.stale
    if stale and not options.redo_changed:
        raise OutputError(_stale_message(output, stale))
    if other := results.other_judge(rubric.ref, opened.model, replaced=set(stale)):
        raise OutputError(other)
    served_from_cache = check.cached if options.refresh else set()
    results.start(redo=set(stale) | served_from_cache)
    if stale:
        print(f"redoing {len(stale)} judgments made differently (--redo-changed)", file=sys.stderr)
    if served_from_cache:
        print(f"redoing {len(served_from_cache)} judgments answered from the cache (--refresh)", file=sys.stderr)
    return served_from_cache


def _judge_planned(engine, planned, results, opened, preflight, outcome: Outcome, todo, key_writer) -> bool:
    """Ask the planned judgments (the backend closed after), the tally into `outcome`; False when the run stopped
    short (Ctrl-C: "interrupted"; batch files await a runner: "pending", with what to run)."""
    from judge.backends.batch import BatchPending
    from judge.engine import run_coroutine
    from judge.errors import ServerUnusable

    async def go():
        try:
            return await engine.run(planned, results, progress=preflight.options.progress, todo=todo, keys=key_writer)
        finally:
            await opened.client.aclose()

    try:
        outcome.tally = run_coroutine(go)
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        return False
    except BatchPending as exc:
        preflight.finish()  # its warnings, the walk done
        outcome.status, outcome.note = "pending", str(exc)
        return False
    except ServerUnusable as exc:
        raise ServerUnusable(f"{exc}; the judgments finished so far are kept in {outcome.output}: run the same "
                             "command to resume once the server is fixed") from None
    preflight.finish()
    return True


def _priced(outcome: Outcome, options: RunOptions, price, opened) -> Outcome:
    """The run's cost at the --prices table, and its status: failed when a judgment failed."""
    tally = _tally_of(outcome)
    if options.prices is not None:
        from judge.prices import load_prices, price_of

        if price is None:  # the model id is known only now (the embedded model)
            price = price_of(load_prices(options.prices), opened.model, options.prices)
        tally.cost = price.cost(tally.prompt_tokens, tally.cached_tokens or 0, tally.completion_tokens,
                                batch=options.batch or (options.batch_dir is not None and options.executor != "ray"))
    if tally.failed:
        outcome.status = "failed"
    return outcome
