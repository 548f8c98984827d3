"""Running a plan: items x criteria -> units of work -> judgments appended to the results file, with a tally.

The layers below: judge/judging.py judges one unit (pointwise, per segment, block, pair), judge/asking.py asks one
question (cache, retries, concurrency), judge/backends transport it. This module only orders the work, skips what
is done, writes each judgment as soon as it is complete, and counts.

Order: criterion first, then dialogue, then candidate, so that neighbouring requests share the longest prefix.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from judge.asking import Asker
from judge.backends import PREFIX_GROUP
from judge.cache import NoCache
from judge.errors import Deferred, failure_cause
from judge.items import Item
from judge.judging import Judge, Judged
from judge.judgment import Judgment
from judge.results import ResultsFile
from judge.rubric import Criterion, Rubric
from judge.secrets import Redactor
from judge.settings import Settings


class JudgmentSink(Protocol):
    """What `Engine.run` needs of the results file (judge.results.ResultsFile; a dry run's reads only)."""

    def finished(self, key: tuple[str, str, str]) -> bool: ...

    def write(self, judgment: Judgment) -> None: ...


UNCOUNTED = -1  # `todo` of a run whose caller did not count its work (a new results file, batched): a full window


@dataclass(eq=False)  # not frozen: a frozen dataclass is built three times slower, and a run builds two per judgment
class Unit:
    """One unit of work: a criterion on one item, or on every candidate of a dialogue (block mode)."""

    criterion: Criterion
    items: tuple[Item, ...]
    judge: Judge = field(repr=False, compare=False)
    block: bool = False

    def keys(self) -> list[tuple[str, str, str]]:
        return [(i.id, i.system, self.criterion.id) for i in self.items]

    @cached_property
    def fingerprints(self) -> tuple[dict, ...]:
        """Each item's judgment fingerprint, made when first needed (a judgment is made, or a finished one is
        compared), once: a unit deferred to a batch, or new to the results file, costs none."""
        group = list(self.items) if self.block else None
        return tuple(self.judge.fingerprint(self.criterion, item, group) for item in self.items)


class Plan:
    """The units of a run in asking order (criterion first, then dialogue, then candidate, so that neighbouring
    requests share the longest prefix), made as they are iterated; each iteration reads the items again. Block
    mode groups a dialogue's candidates, wherever they stand in the file, so it holds the items of one criterion
    pass in memory; pointwise and pairwise runs stream."""

    def __init__(self, judge: Judge, mode: str, criteria: list[Criterion], items: Iterable[Item]):
        self.judge, self.mode, self.criteria, self.items = judge, mode, criteria, items

    def __iter__(self) -> Iterator[Unit]:
        for criterion in self.criteria:
            if self.mode == "block" and not criterion.per_segment:
                groups: dict[str, list[Item]] = {}
                for item in self.items:
                    groups.setdefault(item.id, []).append(item)
                for group in groups.values():
                    yield Unit(criterion, tuple(group), self.judge, block=True)
            else:
                for item in self.items:
                    yield Unit(criterion, (item,), self.judge)

    def judgments(self) -> Iterator[tuple[tuple[str, str, str], dict]]:
        """(key, fingerprint) of every planned judgment, in order."""
        for unit in self:
            yield from zip(unit.keys(), unit.fingerprints)


@dataclass
class Tally:
    planned: int = 0
    already_done: int = 0
    judged: int = 0
    from_cache: int = 0
    na: int = 0
    failed: int = 0
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None  # prompt tokens served from the server's prefix cache (None: never reported)
    batch: str = ""  # what went by batch (judge/backends/batch.py), for the summary
    deferred: int = 0  # judgments whose answers come in a later pass (--batch-dir)
    cost: float | None = None  # what the billed tokens cost at the user's --prices (None: no price table)
    seconds: float = 0.0
    errors: Counter = field(default_factory=Counter)
    both_orders: Counter = field(default_factory=Counter)  # pairs judged in both orders, per criterion
    flipped: Counter = field(default_factory=Counter)  # ... whose verdict changed with the order
    verdicts: dict = field(default_factory=lambda: defaultdict(Counter))  # criterion -> verdict -> judgments
    per_server: dict = field(default_factory=dict)
    other_model: Counter = field(default_factory=Counter)  # (asked, answered as) -> judgments, where they differ

    def count(self, judged: Judged) -> None:
        j = judged.judgment
        served = (j.served or {}).get("model")
        if served and j.backend == "openai" and not str(served).startswith(j.model):  # a dated version is the same
            self.other_model[j.model, str(served)] += 1
        if j.error is not None:  # a failed judgment
            self.failed += 1
            self.errors[failure_cause(j.error)] += 1
            return
        if j.order_disagreement is not None:
            self.both_orders[j.criterion] += 1
            self.flipped[j.criterion] += j.order_disagreement
        if j.na:
            self.na += 1
        else:
            self.judged += 1
            self.from_cache += judged.cached
            self.verdicts[j.criterion][j.score if j.score is not None else j.label] += 1
        self.prompt_tokens += j.usage.prompt_tokens
        self.completion_tokens += j.usage.completion_tokens
        if j.usage.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + j.usage.cached_tokens

    def absorb(self, earlier: Tally) -> None:
        """Add what an earlier stage of the same run recorded (--batch-dir's key file), which this tally found done."""
        self.already_done -= earlier.judged + earlier.na + earlier.failed
        for name in ("judged", "from_cache", "na", "failed", "requests", "retries", "prompt_tokens",
                     "completion_tokens", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(earlier, name))
        if earlier.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + earlier.cached_tokens
        self.errors.update(earlier.errors)
        self.other_model.update(earlier.other_model)
        for criterion, seen in earlier.verdicts.items():
            self.verdicts[criterion].update(seen)

    def line(self) -> str:
        line = (
            f"judged {self.judged} ({self.from_cache} from cache), N/A {self.na}, failed {self.failed}, "
            f"skipped {self.already_done} already done; {self.requests} requests, {self.retries} retries; "
            f"tokens {self.prompt_tokens} prompt{self._cached()} / {self.completion_tokens} completion; "
            f"{self.seconds:.1f} s"
        )
        if self.cost is not None:
            line += f"; cost {self.cost:.4g} at the --prices table{' (batch price)' if self.batch else ''}"
        if self.batch:
            line += f"\n{self.batch}"
        if len(self.per_server) > 1:  # url -> requests sent there, and the causes of those that failed
            line += "\nrequests per server: " + ", ".join(_server_share(url, sent, failed)
                                                          for url, (sent, failed) in self.per_server.items())
        if self.both_orders:
            bias = ", ".join(f"{c} {self.flipped[c]}/{n} ({self.flipped[c] / n:.0%})"
                             for c, n in self.both_orders.items())
            line += f"\nposition bias (verdict flipped with the order): {bias}"
        return line

    def _cached(self) -> str:
        """The prefix cache's share of the prompt tokens, where the server reports it."""
        if self.cached_tokens is None:
            return ""
        rate = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        return f" ({self.cached_tokens} cached: {rate:.0%} prefix-cache hit rate)"

    def warnings(self) -> list[str]:
        """What a researcher should not miss: a server answering as another model than asked, a criterion whose
        every verdict was the same."""
        out = [f"warning: asked for model {asked!r}, the server answered as {served!r} ({n} judgments): check "
               "--model and what the server serves (each judgment records it in served.model)"
               for (asked, served), n in self.other_model.most_common(3)]
        for criterion, seen in self.verdicts.items():
            if len(seen) == 1 and seen.total() >= 3:
                out.append(f"warning: every {criterion} verdict is {next(iter(seen))!r}: the judge does not "
                           "discriminate "
                           "here (a model too small, or a prompt it cannot follow); check with `judge qualify`")
        return out


def _server_share(url: str, sent: int, failed: Counter) -> str:
    url = Redactor()(url)  # a user:password@ in it is masked
    if not failed:
        return f"{url} {sent}"
    causes = next(iter(failed)) if len(failed) == 1 else ", ".join(f"{n}× {c}" for c, n in failed.most_common(3))
    return f"{url} {sent} ({failed.total()} failed: {causes})"


class Progress:
    """tqdm's auto mode where someone watches (a widget in Jupyter, a bar on a terminal); elsewhere (CI, a log file)
    a line every 10% or 30 s, so a long run shows it is alive.

    The estimate of the time left must hold from the first minute: answers from the cache arrive at once and would
    make a run look fast, and a batch of answers finishing together after a slow start would make it look slow. So
    cached answers are taken out of the total (shown apart, as `cached=N`) and the rate is the average since the
    start (`smoothing=0`), not tqdm's moving average of the last few bursts.
    """

    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.cached, self.enabled = total, 0, 0, enabled
        self.started = self.last = time.monotonic()
        self.bar = None
        if enabled and total and watched():
            options = {"total": total, "unit": "judgment", "dynamic_ncols": True, "smoothing": 0}
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(**options)
            except ImportError:  # a Jupyter kernel without ipywidgets: a text bar there
                from tqdm import tqdm

                self.bar = tqdm(**options)
        elif enabled and total:
            print(f"judging {total} (item, criterion) pairs", file=sys.stderr, flush=True)

    def update(self, cached: bool = False) -> None:
        self.done += 1
        if self.bar is not None:
            if cached:  # instant: out of the total, so it does not speed up the estimate of the time left
                self.cached += 1
                self.bar.total -= 1
                self.bar.set_postfix(cached=self.cached, refresh=False)
                self.bar.refresh()
            else:
                self.bar.update()
            return
        now = time.monotonic()
        step = max(1, self.total // 10)
        if self.enabled and (self.done % step == 0 or now - self.last >= 30) and self.done < self.total:
            self.last = now
            print(f"  {self.done}/{self.total} ({self.done / self.total:.0%}), {now - self.started:.0f} s",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def watched() -> bool:
    """A terminal, or a Jupyter kernel (whose stderr is not a terminal but shows tqdm's widget)."""
    if sys.stderr.isatty():
        return True
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def run_coroutine(make):
    """Run `make()` (a coroutine function) to the end and return its result, with or without an event loop running
    in this thread (Jupyter, IPython, an async web app run one). With one, the coroutine runs on its own loop in a
    worker thread, so the caller's loop is never re-entered (no nest_asyncio); Ctrl-C in this thread (an
    interrupted cell) cancels it, waits for it to stop (finished judgments are written, servers closed by the
    coroutine's own `finally`), then raises KeyboardInterrupt here, as `asyncio.run` does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    import threading

    loop = asyncio.new_event_loop()
    box: dict = {}

    def work() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["task"] = loop.create_task(make())
            box["result"] = loop.run_until_complete(box["task"])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    thread = threading.Thread(target=work, name="judge-engine", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        while "task" not in box and thread.is_alive():
            time.sleep(0.01)
        if "task" in box:
            loop.call_soon_threadsafe(box["task"].cancel)
        thread.join()
        raise KeyboardInterrupt from None
    if "error" in box:
        if isinstance(box["error"], asyncio.CancelledError):
            raise KeyboardInterrupt from None
        raise box["error"]
    return box["result"]


class Engine:
    """`plan` the units of a run, then `run` them into a results file. The public surface of the judging stack."""

    def __init__(self, client, settings: Settings, cache, rubric: Rubric, redact: Redactor | None = None):
        self.settings = settings
        self.rubric = rubric
        self.client = client
        self.asker = Asker(client, settings, cache if cache is not None else NoCache(), rubric.language, redact)
        self.judge = Judge(self.asker, settings, rubric)

    def plan(self, criteria: list[Criterion], items: Iterable[Item]) -> Plan:
        """The run's units of work, produced on demand from `items` (a list, or judge.items.ItemFile, read anew
        at each pass): the plan is walked once to check the results file and once to judge, and never held."""
        return Plan(self.judge, self.settings.mode, criteria, items)

    async def _do(self, unit: Unit, todo: set[str]) -> list[Judged]:
        if unit.block:
            return await self.judge.block(unit.criterion, list(unit.items), unit, todo)
        judge = self.judge.pair if self.settings.mode == "pairwise" else self.judge.pointwise
        return [await judge(unit.criterion, unit.items[0], unit)]

    async def run(self, plan: Plan, results: JudgmentSink, progress: bool = True, todo: int | None = None,
                  keys=None) -> Tally:
        """Judge every planned judgment not already done in `results` (opened with `start`); each is written as
        soon as it is complete. A bounded window of units is in flight (twice the concurrency), pulled from the
        plan as the previous ones finish, so memory does not grow with the run. `todo`: how many judgments are
        left, if the caller counted them (for the progress bar), else counted here in one pass (UNCOUNTED: not at
        all; no progress total). `keys`: a
        --batch-dir key file's writer (judge/backends/batchkeys.py), told every planned judgment of a pointwise
        run and what each deferred one asked. Raises ServerUnusable when the server cannot serve the run (finished
        work is kept)."""
        started = time.perf_counter()
        if todo is None:
            todo = sum(not results.finished(key) for unit in plan for key in unit.keys())
        tally = Tally()
        bar = Progress(max(todo, 0), progress)
        first_pass = True

        def pending():
            for unit in plan:
                left = {k[1] for k in unit.keys() if not results.finished(k)}
                if first_pass:
                    tally.planned += len(unit.items)
                    tally.already_done += len(unit.items) - len(left)
                if left:
                    yield unit, left
                elif keys is not None:
                    keys.add(unit.keys()[0], self.judge.item_digest(unit.items[0]))

        async def worker(queue) -> None:
            for unit, left in queue:
                PREFIX_GROUP.set(f"{unit.criterion.id}\x00{unit.items[0].id}")  # batch shards keep it together
                try:
                    done = await self._do(unit, left)
                except Deferred as deferred:  # its answer comes in a later pass (batch transports)
                    tally.deferred += len(left)
                    if keys is not None:
                        keys.add(unit.keys()[0], self.judge.item_digest(unit.items[0]), self.judge.asked(deferred))
                    continue
                for judged in done:
                    tally.count(judged)
                    results.write(judged.judgment)
                    bar.update(cached=judged.cached)
                    if keys is not None:
                        fingerprint = judged.judgment.fingerprint
                        assert fingerprint is not None, "a judgment of this run carries its fingerprint"
                        keys.add(judged.judgment.key, fingerprint["item"])

        try:
            while True:  # one pass; batch transports make more, until every answer is in or files await a runner
                tally.deferred, queue = 0, pending()
                window = self.settings.concurrency * 2
                workers = [asyncio.ensure_future(worker(queue))
                           for _ in range(window if todo == UNCOUNTED else max(1, min(todo, window)))]
                try:
                    await asyncio.gather(*workers)
                except BaseException:
                    for w in workers:  # the server is unusable, or a Ctrl-C: stop the others before they write more
                        w.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
                    raise
                first_pass = False
                if not tally.deferred:
                    break
                note = await self.client.end_pass()
                if note:
                    from judge.backends.batch import BatchPending

                    raise BatchPending(note)
        finally:
            bar.close()
            self._close_tally(tally, started)
        return tally

    def _close_tally(self, tally: Tally, started: float) -> None:
        """The asking layer's and the transport's counts into the tally, at the end of a run."""
        stats = self.asker.stats
        tally.requests, tally.retries = stats.requests, stats.retries
        tally.prompt_tokens += stats.wasted_prompt_tokens
        tally.completion_tokens += stats.wasted_completion_tokens
        if stats.wasted_cached_tokens:
            tally.cached_tokens = (tally.cached_tokens or 0) + stats.wasted_cached_tokens
        tally.seconds = time.perf_counter() - started
        if hasattr(self.client, "requests_per_server"):
            tally.per_server = dict(self.client.requests_per_server())
        if hasattr(self.client, "summary"):  # a batch transport
            tally.batch = self.client.summary()

    def run_keyed(self, records, results: ResultsFile, criteria: list[Criterion], progress: bool = True,
                  todo: int = 0) -> tuple[Tally, int]:
        """--batch-dir, reading the answers back: record each planned judgment of a key file (judge/backends/
        batchkeys.py) not done in `results` whose answers are all here and good, with neither its item nor its
        prompt (the key file names its request keys, prompt_sha and item digest). Returns the tally and how many
        judgments are left to the full path (`run`): a missing, failed, unparseable or cut-off answer, a gate."""
        started = time.perf_counter()
        tally, bar, left = Tally(), Progress(todo, progress), 0
        formats = {c.id: self.judge.format_of(c) for c in criteria}
        by_id = {c.id: c for c in criteria}
        try:
            for record in records:
                tally.planned += 1
                key = (record[0], record[1], record[2])
                if results.finished(key):
                    tally.already_done += 1
                    continue
                answers = self.asker.recorded(record[5], formats[record[2]]) if len(record) == 6 else None
                if answers is None:
                    left += 1
                    continue
                judged = self.judge.recorded(by_id[record[2]], record[0], record[1], record[3], record[4], answers)
                tally.count(judged)
                results.write(judged.judgment)
                bar.update(cached=judged.cached)
        finally:
            bar.close()
            self._close_tally(tally, started)
        return tally, left
