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
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential
from tqdm import tqdm

from judge.answers import AnswerFormat, expected_score, verdict_probabilities
from judge.backends import ChatClient
from judge.cache import AnswerCache, NoCache, request_key
from judge.errors import AnswerError, BackendError, OutputError, ResponseFormatUnsupported, RetryableError
from judge.items import Item
from judge.prompting import criterion_messages, gate_messages
from judge.rubric import Criterion, Rubric

# Strongest first: a server that rejects one is asked with the next, and the same strict parser reads all.
RESPONSE_FORMATS = ("json_schema", "json_object", "text")
MAX_RETRY_AFTER = 120.0


@dataclass
class Settings:
    model: str
    backend: str = "openai"
    temperature: float = 0.0
    max_tokens: int = 512
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

    def line(self) -> str:
        return (
            f"judged {self.judged} ({self.from_cache} from cache), N/A {self.na}, failed {self.failed}, "
            f"skipped {self.already_done} already done; {self.requests} requests, {self.retries} retries; "
            f"tokens {self.prompt_tokens} prompt / {self.completion_tokens} completion; {self.seconds:.1f} s"
        )


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
        self._gates: dict[tuple[str, str], asyncio.Task] = {}

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

    async def _send_with_fallback(self, messages: list[dict], fmt: AnswerFormat, sample: int) -> tuple[dict, dict]:
        """Send, stepping down json_schema -> json_object -> text when the server rejects a format."""
        while True:
            mode = self._format_mode
            body = self._body(messages, fmt, sample, mode)
            try:
                return body, await self._send(body)
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
            _, completion = await self._send_with_fallback(conversation, fmt, sample)
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
    async def _gate_answer(self, rubric: Rubric, criterion: Criterion, item: Item) -> dict:
        gate_key = (item.id, criterion.id)
        if gate_key not in self._gates:
            messages = gate_messages(rubric, criterion, item)
            self._gates[gate_key] = asyncio.ensure_future(self.ask(messages, AnswerFormat.gate(), 0))
        parsed, _, _ = await asyncio.shield(self._gates[gate_key])
        return parsed

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

    async def judge(self, rubric: Rubric, criterion: Criterion, item: Item) -> dict:
        try:
            if criterion.gate is not None:
                gate = await self._gate_answer(rubric, criterion, item)
                if gate["answer"] == "no":
                    return self._record(rubric, criterion, item, na=True, rationale=gate["rationale"])
            messages = criterion_messages(rubric, criterion, item, self.settings.template)
            fmt = AnswerFormat.for_criterion(criterion)
            answers = await asyncio.gather(*(self.ask(messages, fmt, k) for k in range(self.settings.samples)))
        except AnswerError as exc:
            return self._record(rubric, criterion, item, error=str(exc), raw=exc.raw)
        except (RetryableError, BackendError) as exc:
            return self._record(rubric, criterion, item, error=f"{type(exc).__name__}: {exc}")
        return self._aggregate(rubric, criterion, item, messages, fmt, answers)

    def _aggregate(self, rubric, criterion, item, messages, fmt: AnswerFormat, answers) -> dict:
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for _, completion, from_cache in answers:
            if not from_cache:
                for k in usage:
                    usage[k] += completion["usage"].get(k, 0) or 0
        verdicts = [parsed[fmt.verdict_key] for parsed, _, _ in answers]
        fields: dict = {
            "samples": verdicts,
            "prompt_sha": hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode()).hexdigest()[:16],
            "usage": usage,
            "cached": all(from_cache for _, _, from_cache in answers),
        }
        if fmt.numeric:
            points = [float(v) for v in verdicts]
            if self.settings.logprobs:
                per_sample = [verdict_probabilities(c.get("logprobs") or [], fmt) for _, c, _ in answers]
                usable = [p for p in per_sample if p is not None]
                if usable:
                    probs = {k: sum(p[k] for p in usable) / len(usable) for k in usable[0]}
                    fields["probs"] = probs
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
        parsed = answers[chosen][0]
        fields["rationale"] = parsed.get("rationale")
        fields["explanation"] = parsed.get("explanation")
        return self._record(rubric, criterion, item, **fields)

    # -- a whole run -------------------------------------------------------------------------------------
    async def run(self, rubric: Rubric, criteria: list[Criterion], items: list[Item], results: ResultsFile,
                  progress: bool = True) -> Tally:
        started = time.perf_counter()
        # Criterion, then dialogue, then candidate: neighbouring requests share the longest prefix.
        plan = [(c, item) for c in criteria for item in items]
        self.tally.planned = len(plan)
        todo = [(c, item) for c, item in plan if (item.id, item.system, c.id) not in results.done]
        self.tally.already_done = len(plan) - len(todo)
        bar = tqdm(total=len(todo), unit="judgment", disable=None if progress else True, dynamic_ncols=True)
        queue = iter(todo)

        async def worker() -> None:
            for criterion, item in queue:
                record = await self.judge(rubric, criterion, item)
                self._count(record)
                results.write(record)
                bar.update()

        try:
            workers = max(1, min(len(todo), self.settings.concurrency * 2))
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
        if record["na"]:
            self.tally.na += 1
        else:
            self.tally.judged += 1
            self.tally.from_cache += bool(cached)
        self.tally.prompt_tokens += record["usage"]["prompt_tokens"]
        self.tally.completion_tokens += record["usage"]["completion_tokens"]
