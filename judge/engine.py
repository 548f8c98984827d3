"""The batching engine: plan -> cache -> backend (async, bounded, retried) -> parse -> aggregate -> results.

- Concurrency is bounded by one semaphore around the HTTP call only, so a request waiting out a back-off
  does not hold a slot.
- Transient failures (429 with Retry-After, 5xx, timeouts, dropped connections) are retried by tenacity with
  exponential back-off and jitter; an answer that does not parse or was cut off is asked again, a bounded
  number of times, with the parser's complaint.
- Identical requests are sent once (in-flight futures), and every parsed answer is cached in SQLite.
- Each judgment is appended to the results file and flushed as soon as it is complete; on restart, finished
  keys are skipped and failed ones retried, so a run interrupted at any point resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import statistics
import string
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential
from tqdm import tqdm

from judge.answers import AnswerFormat, BlockFormat, SegmentsFormat, expected_score, verdict_probabilities
from judge.backends import ChatClient
from judge.cache import AnswerCache, NoCache, request_key
from judge.errors import AnswerError, BackendError, OutputError, ResponseFormatUnsupported, RetryableError
from judge.items import Item
from judge.prompting import block_messages, criterion_messages, gate_messages, segment_messages
from judge.rubric import Criterion, Rubric

# Strongest first: a server that rejects one is asked with the next, and the same strict parser reads all.
RESPONSE_FORMATS = ("json_schema", "json_object", "text")
MAX_RETRY_AFTER = 120.0
SWAP_BACK = {"1": "2", "2": "1", "0": "0"}
MODES = ("pointwise", "block", "pairwise")


def block_letters(n: int) -> list[str]:
    """A, B, ... Z, then AA, AB, ...: how candidates are named inside one block."""
    letters = list(string.ascii_uppercase)
    return [letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26] for i in range(n)]


async def _as_list(coro) -> list[dict]:
    return [await coro]


@dataclass
class Settings:
    model: str
    backend: str = "openai"
    temperature: float = 0.0
    max_tokens: int = 1024  # covers a schema-bounded answer even in scripts that cost ~3 tokens a character
    samples: int = 1
    logprobs: bool = False
    top_logprobs: int = 20
    seed: int = 0
    concurrency: int = 16
    timeout: float = 120.0
    attempts: int = 6  # transport attempts per request (first try included)
    reasks: int = 2  # extra asks when an answer does not parse or is truncated
    response_format: str = "json_schema"
    template: str | None = None
    backoff_max: float = 30.0
    mode: str = "pointwise"  # pointwise | block | pairwise
    swap: bool = True  # pairwise: ask both orders


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
    seconds: float = 0.0
    errors: Counter = field(default_factory=Counter)
    both_orders: Counter = field(default_factory=Counter)  # pairs judged in both orders, per criterion
    flipped: Counter = field(default_factory=Counter)  # ... whose verdict changed with the order

    def line(self) -> str:
        line = (
            f"judged {self.judged} ({self.from_cache} from cache), N/A {self.na}, failed {self.failed}, "
            f"skipped {self.already_done} already done; {self.requests} requests, {self.retries} retries; "
            f"tokens {self.prompt_tokens} prompt / {self.completion_tokens} completion; {self.seconds:.1f} s"
        )
        if self.both_orders:
            bias = ", ".join(f"{c} {self.flipped[c]}/{n} ({self.flipped[c] / n:.0%})" for c, n in self.both_orders.items())
            line += f"\nposition bias (verdict flipped with the order): {bias}"
        return line


def judgment_key(record: dict) -> tuple[str, str, str]:
    return (record["id"], record["system"], record["criterion"])


class ResultsFile:
    """Append-only JSONL of judgments, one line per (id, system, criterion), flushed line by line.

    Opening it keeps the finished judgments of an earlier run of the same rubric and model, drops failed ones
    (they are retried) and any half-written last line (a kill -9), and refuses a file from another run.
    """

    def __init__(self, path: str | Path, rubric: str, model: str):
        self.path = Path(path)
        self.done: dict[tuple, dict] = {}
        if self.path.exists():
            self._load(rubric, model)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self.path.open("a", encoding="utf-8")

    def _load(self, rubric: str, model: str) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = []
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
                key = judgment_key(record)
            except (json.JSONDecodeError, KeyError, TypeError):
                if number == len(lines):
                    continue  # a line cut by a crash: redo that judgment
                raise OutputError(f"{self.path}:{number}: not a judgment line; refusing to append to this file")
            if record.get("rubric") != rubric or record.get("model") != model:
                raise OutputError(
                    f"{self.path}:{number}: holds judgments of rubric {record.get('rubric')!r} with model "
                    f"{record.get('model')!r}, not {rubric!r} with {model!r}; choose another --output"
                )
            if record.get("error") is None and key not in self.done:
                self.done[key] = record
                kept.append(line)
        if len(kept) != len(lines):
            # Rewrite atomically so the file never holds fewer finished judgments than before.
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            tmp.replace(self.path)

    def write(self, record: dict) -> None:
        self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class Engine:
    def __init__(self, client: ChatClient, settings: Settings, cache: AnswerCache | NoCache):
        self.client = client
        self.settings = settings
        self.cache = cache
        self.tally = Tally()
        self._requested_mode = RESPONSE_FORMATS.index(settings.response_format)
        self._format_mode = self._requested_mode
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._inflight: dict[str, asyncio.Future] = {}
        self._shared: dict[tuple, asyncio.Task] = {}  # gate answers and segment splits, once per dialogue/candidate

    # -- one request -------------------------------------------------------------------------------------
    def _body(self, messages: list[dict], fmt: AnswerFormat, sample: int, mode: int) -> dict:
        s = self.settings
        body = {
            "model": s.model,
            "messages": messages,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            "seed": s.seed + sample,
        }
        if s.logprobs and fmt.numeric:
            body["logprobs"] = True
            body["top_logprobs"] = s.top_logprobs
        kind = RESPONSE_FORMATS[mode]
        if kind == "json_schema":
            schema = {"name": "answer", "strict": True, "schema": fmt.json_schema()}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif kind == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def _wait(self, state) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return min(exc.retry_after, MAX_RETRY_AFTER)
        return wait_random_exponential(multiplier=0.25, max=self.settings.backoff_max)(state)

    async def _send(self, body: dict) -> dict:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.attempts),
            wait=self._wait,
            retry=retry_if_exception_type(RetryableError),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.tally.retries += 1
                async with self._semaphore:
                    self.tally.requests += 1
                    return await self.client.complete(body, self.settings.timeout)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _send_with_fallback(self, messages: list[dict], fmt: AnswerFormat, sample: int) -> dict:
        """Send, stepping down json_schema -> json_object -> text when the server rejects a format."""
        while True:
            mode = self._format_mode
            try:
                return await self._send(self._body(messages, fmt, sample, mode))
            except ResponseFormatUnsupported:
                if mode + 1 >= len(RESPONSE_FORMATS):
                    raise
                self._format_mode = max(self._format_mode, mode + 1)

    async def ask(self, messages: list[dict], fmt: AnswerFormat, sample: int) -> tuple[dict, dict, bool]:
        """(parsed answer, completion, from_cache). Identical concurrent requests share one future."""
        # Keyed by the format asked for, not the one a fallback ended up sending: the key must not depend on
        # when in the run the server refused json_schema, or a rerun misses the answers stored after that.
        key = request_key(self._body(messages, fmt, sample, self._requested_mode))
        cached = self.cache.get(key)
        if cached is not None:
            return fmt.parse(cached["content"]), cached, True
        if key in self._inflight:
            parsed, completion, _ = await asyncio.shield(self._inflight[key])
            return parsed, completion, True
        future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await self._ask_uncached(messages, fmt, sample, key)
            future.set_result(result)
            return result
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it; no "never retrieved" warning
            raise
        finally:
            del self._inflight[key]

    async def _ask_uncached(self, messages, fmt: AnswerFormat, sample: int, key: str) -> tuple[dict, dict, bool]:
        conversation = messages
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for _ in range(self.settings.reasks + 1):
            completion = await self._send_with_fallback(conversation, fmt, sample)
            for k in usage:
                usage[k] += completion["usage"].get(k, 0) or 0
            content = completion["content"]
            if completion["finish_reason"] == "length":
                problem = "the answer was cut off (finish_reason=length): answer shorter"
            else:
                try:
                    parsed = fmt.parse(content)
                except AnswerError as exc:
                    problem = str(exc)
                else:
                    completion = {**completion, "usage": usage}
                    self.cache.put(key, completion)
                    return parsed, completion, False
            conversation = messages + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": f"That answer cannot be used: {problem}. Reply with the JSON object only."},
            ]
        self.tally.prompt_tokens += usage["prompt_tokens"]
        self.tally.completion_tokens += usage["completion_tokens"]
        raise AnswerError(f"no usable answer after {self.settings.reasks + 1} asks: {problem}", content)

    # -- one judgment ------------------------------------------------------------------------------------
    def _once(self, key: tuple, make) -> asyncio.Future:
        """A task started the first time `key` is asked for and shared by every later caller."""
        if key not in self._shared:
            self._shared[key] = asyncio.ensure_future(make())
        return asyncio.shield(self._shared[key])

    async def _not_applicable(self, rubric: Rubric, criterion: Criterion, item: Item) -> str | None:
        """Why the criterion is N/A for this item (a field condition, or the dialogue's gate said no), or None."""
        if criterion.only_when and not criterion.applies_to(item.fields):
            return f"applies only when {criterion.only_when}"
        if criterion.gate is None:
            return None
        # Rendered inside the shared task: only the dialogue's first candidate pays for it.
        parsed, _, _ = await self._once(("gate", item.id, criterion.id),
                                        lambda: self.ask(gate_messages(rubric, criterion, item), AnswerFormat.gate(), 0))
        return parsed["rationale"] or criterion.gate.na_reason if parsed["answer"] == "no" else None

    async def _segments(self, rubric: Rubric, item: Item) -> list[str]:
        if item.segments:
            return item.segments
        segments, _, _ = await self._once(("segments", item.id, item.system),
                                          lambda: self.ask(segment_messages(rubric, item), SegmentsFormat(), 0))
        return segments

    async def _samples(self, messages: list[dict], fmt) -> list[tuple[dict, dict, bool]]:
        if self.settings.samples == 1:  # the common case: no task per judgment (-12% CPU on a cached rerun)
            return [await self.ask(messages, fmt, 0)]
        return await asyncio.gather(*(self.ask(messages, fmt, k) for k in range(self.settings.samples)))

    def _record(self, rubric: Rubric, criterion: Criterion, item: Item, **fields) -> dict:
        record = {
            "id": item.id,
            "system": item.system,
            "criterion": criterion.id,
            "score": None,
            "label": None,
            "na": False,
            "samples": [],
            "spread": None,
            "probs": None,
            "rationale": None,
            "explanation": None,
            "rubric": rubric.ref,
            "model": self.settings.model,
            "backend": self.settings.backend,
            "prompt_sha": None,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
            "error": None,
        }
        record.update(fields)
        return record

    @staticmethod
    def _error_fields(exc: Exception) -> dict:
        if isinstance(exc, AnswerError):
            return {"error": str(exc), "raw": exc.raw}
        return {"error": f"{type(exc).__name__}: {exc}"}

    @staticmethod
    def _provenance(messages: list[dict], answers: list[tuple]) -> dict:
        """prompt_sha, the tokens this judgment cost now (cached answers cost nothing), and whether all were cached."""
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for _, completion, from_cache in answers:
            if not from_cache:
                for k in usage:
                    usage[k] += completion["usage"].get(k, 0) or 0
        return {
            "prompt_sha": hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode()).hexdigest()[:16],
            "usage": usage,
            "cached": all(from_cache for _, _, from_cache in answers),
        }

    def _verdict(self, criterion: Criterion, fmt: AnswerFormat, parsed: list[dict],
                 completions: list[dict] | None = None) -> dict:
        """Score or label from one answer per sample: the mean (and spread) of points, or the majority label."""
        verdicts = [p[fmt.verdict_key] for p in parsed]
        fields: dict = {"samples": verdicts}
        if fmt.numeric:
            points = [float(v) for v in verdicts]
            if self.settings.logprobs and completions:
                per_sample = [verdict_probabilities(c.get("logprobs") or [], fmt) for c in completions]
                usable = [p for p in per_sample if p is not None]
                if usable:
                    fields["probs"] = {k: sum(p[k] for p in usable) / len(usable) for k in usable[0]}
                    points = [expected_score(p) for p in usable]
            fields["score"] = statistics.fmean(points)
            fields["spread"] = statistics.stdev(points) if len(points) > 1 else None
            chosen = 0
        else:
            # Majority label; ties go to the label seen first, so the result does not depend on dict order.
            counts = Counter(verdicts)
            label = max(counts, key=lambda v: (counts[v], -verdicts.index(v)))
            chosen = verdicts.index(label)
            fields["label"] = label
            fields["score"] = criterion.scale.score_of(label)
        fields["rationale"] = parsed[chosen].get("rationale")
        fields["explanation"] = parsed[chosen].get("explanation")
        return fields

    async def judge(self, rubric: Rubric, criterion: Criterion, item: Item) -> dict:
        """One criterion, one candidate: pointwise, or per topic segment."""
        try:
            if (why := await self._not_applicable(rubric, criterion, item)) is not None:
                return self._record(rubric, criterion, item, na=True, rationale=why)
            if criterion.per_segment:
                return await self._judge_segments(rubric, criterion, item)
            messages = criterion_messages(rubric, criterion, item, self.settings.template)
            fmt = AnswerFormat.for_criterion(criterion)
            answers = await self._samples(messages, fmt)
        except (AnswerError, RetryableError, BackendError) as exc:
            return self._record(rubric, criterion, item, **self._error_fields(exc))
        fields = self._verdict(criterion, fmt, [a[0] for a in answers], [a[1] for a in answers])
        return self._record(rubric, criterion, item, **fields, **self._provenance(messages, answers))

    async def _judge_segments(self, rubric: Rubric, criterion: Criterion, item: Item) -> dict:
        """Each topic segment judged on its own; the candidate's score is the mean over segments with a score."""
        segments = await self._segments(rubric, item)
        fmt = AnswerFormat.for_criterion(criterion)
        asked = [criterion_messages(rubric, criterion, item, self.settings.template, segment=text, segment_number=n)
                 for n, text in enumerate(segments, start=1)]
        answered = await asyncio.gather(*(self._samples(m, fmt) for m in asked))
        per_segment, all_answers = [], []
        for text, answers in zip(segments, answered):
            verdict = self._verdict(criterion, fmt, [a[0] for a in answers], [a[1] for a in answers])
            per_segment.append({"text": text, "score": verdict["score"], "label": verdict.get("label"),
                                "rationale": verdict["rationale"]})
            all_answers += answers
        scores = [s["score"] for s in per_segment if s["score"] is not None]
        return self._record(
            rubric, criterion, item,
            score=statistics.fmean(scores) if scores else None,
            samples=[s["score"] for s in per_segment],
            segments=per_segment,
            **self._provenance(asked[0], all_answers),
        )

    async def judge_block(self, rubric: Rubric, criterion: Criterion, group: list[Item], todo: set[str]) -> list[dict]:
        """All candidates of one dialogue in one prompt, in an order shuffled per dialogue by the seed.

        The full block is always shown (so a resumed run asks the very same, cached, question); records are
        returned only for the systems in `todo`, in the input's order, each with the letter it was shown under.
        """
        records, shown = [], []
        try:
            for item in group:
                why = await self._not_applicable(rubric, criterion, item)
                if why is None:
                    shown.append(item)
                elif item.system in todo:
                    records.append(self._record(rubric, criterion, item, na=True, rationale=why))
            if not shown:
                return records
            random.Random(f"{self.settings.seed}:{group[0].id}").shuffle(shown)
            letters = block_letters(len(shown))
            messages = block_messages(rubric, criterion, shown, letters)
            fmt = BlockFormat(AnswerFormat.for_criterion(criterion), tuple(letters))
            answers = await self._samples(messages, fmt)
        except (AnswerError, RetryableError, BackendError) as exc:
            failed = [i for i in (shown or group) if i.system in todo]
            return records + [self._record(rubric, criterion, i, **self._error_fields(exc)) for i in failed]
        provenance = self._provenance(messages, answers)
        for letter, item in zip(letters, shown):
            if item.system not in todo:
                continue
            fields = self._verdict(criterion, fmt.inner, [a[0][letter] for a in answers])
            records.append(self._record(rubric, criterion, item, **fields, **provenance, position=letter))
            provenance = {**provenance, "usage": {"prompt_tokens": 0, "completion_tokens": 0}}  # counted once
        order = {i.system: n for n, i in enumerate(group)}
        return sorted(records, key=lambda r: order[r["system"]])

    async def judge_pair(self, rubric: Rubric, criterion: Criterion, item: Item) -> dict:
        """Which of two candidates is better, asked in both orders unless `swap` is off.

        Identical candidates tie without a model call. The verdict is reported in the input's order; when the two
        orders disagree it is a tie, and the record says so (position bias).
        """
        if " ".join(item.candidate_1.split()) == " ".join(item.candidate_2.split()):
            return self._record(rubric, criterion, item, label="0", samples=["0"], identical=True,
                                rationale="identical candidates tie")
        fmt = AnswerFormat.for_criterion(criterion)
        forward = criterion_messages(rubric, criterion, item, self.settings.template)
        swapped_item = item.model_copy(update={"candidate_1": item.candidate_2, "candidate_2": item.candidate_1})
        try:
            orders = [self._samples(forward, fmt)]
            if self.settings.swap:
                orders.append(self._samples(criterion_messages(rubric, criterion, swapped_item, self.settings.template), fmt))
            answered = await asyncio.gather(*orders)
        except (AnswerError, RetryableError, BackendError) as exc:
            return self._record(rubric, criterion, item, **self._error_fields(exc))
        first = self._verdict(criterion, fmt, [a[0] for a in answered[0]])
        fields = {**first, **self._provenance(forward, [a for answers in answered for a in answers])}
        if self.settings.swap:
            # Read the swapped answers back into the input's order: "1" there means the input's second candidate.
            back = [{**a[0], "label": SWAP_BACK[a[0]["label"]]} for a in answered[1]]
            second = self._verdict(criterion, fmt, back)
            disagree = first["label"] != second["label"]
            fields.update(label="0" if disagree else first["label"], samples=first["samples"] + second["samples"],
                          orders={"forward": first["label"], "swapped": second["label"]}, order_disagreement=disagree)
        return self._record(rubric, criterion, item, **fields)

    # -- a whole run -------------------------------------------------------------------------------------
    def _jobs(self, rubric: Rubric, criteria: list[Criterion], items: list[Item], done) -> list[tuple[int, object]]:
        """(records it yields, coroutine factory) per unit of work; criterion first, then dialogue, then candidate,
        so that neighbouring requests share the longest prefix."""
        jobs = []
        mode = self.settings.mode
        for criterion in criteria:
            if mode == "block" and not criterion.per_segment:
                groups: dict[str, list[Item]] = {}
                for item in items:
                    groups.setdefault(item.id, []).append(item)
                for group in groups.values():
                    todo = {i.system for i in group if (i.id, i.system, criterion.id) not in done}
                    if todo:
                        jobs.append((len(todo), lambda c=criterion, g=group, t=todo: self.judge_block(rubric, c, g, t)))
                continue
            for item in items:
                if (item.id, item.system, criterion.id) in done:
                    continue
                judge = self.judge_pair if mode == "pairwise" else self.judge
                jobs.append((1, lambda c=criterion, i=item, j=judge: _as_list(j(rubric, c, i))))
        return jobs

    async def run(self, rubric: Rubric, criteria: list[Criterion], items: list[Item], results: ResultsFile,
                  progress: bool = True) -> Tally:
        started = time.perf_counter()
        self.tally.planned = len(criteria) * len(items)
        jobs = self._jobs(rubric, criteria, items, results.done)
        todo = sum(n for n, _ in jobs)
        self.tally.already_done = self.tally.planned - todo
        bar = tqdm(total=todo, unit="judgment", disable=None if progress else True, dynamic_ncols=True)
        queue = iter(jobs)

        async def worker() -> None:
            for _, job in queue:
                for record in await job():
                    self._count(record)
                    results.write(record)
                    bar.update()

        try:
            workers = max(1, min(len(jobs), self.settings.concurrency * 2))
            await asyncio.gather(*(worker() for _ in range(workers)))
        finally:
            bar.close()
            self.tally.seconds = time.perf_counter() - started
        return self.tally

    def _count(self, record: dict) -> None:
        cached = record.pop("cached", False)
        if record["error"] is not None:
            self.tally.failed += 1
            self.tally.errors[record["error"].split(":")[0]] += 1
            return
        if "order_disagreement" in record:
            self.tally.both_orders[record["criterion"]] += 1
            self.tally.flipped[record["criterion"]] += record["order_disagreement"]
        if record["na"]:
            self.tally.na += 1
        else:
            self.tally.judged += 1
            self.tally.from_cache += bool(cached)
        self.tally.prompt_tokens += record["usage"]["prompt_tokens"]
        self.tally.completion_tokens += record["usage"]["completion_tokens"]
