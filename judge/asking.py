"""Asking one question: messages and an answer format in, a parsed answer out.

This layer owns everything between a judging mode and a backend, so that neither has to know about it:
- the persistent answer cache, keyed by the request (judge/cache.py), and in-flight deduplication: identical
  concurrent requests are sent once;
- one semaphore bounding concurrency around the transport call only, so a request waiting out a back-off does not
  hold a slot;
- retries by tenacity with exponential back-off and jitter for transient failures (429 honouring Retry-After, 5xx,
  dropped connections); a timeout is retried once at most, since the same long answer would time out again;
- stepping down json_schema -> json_object -> text when the server refuses a structured-output mode;
- re-asking, a bounded number of times and with the parser's complaint, when an answer does not parse or is cut off;
- a circuit breaker: refused connections in a row, bad credentials or an unknown model stop the whole run with one
  message naming the server, instead of failing every judgment six times;
- scrubbing credentials from every text that leaves it (judge/secrets.py).

Backends only transport (judge/backends); a backend that takes whole batches gathers the requests this layer
keeps in flight, so nothing here changes for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol, cast

from judge.answers import token_budget
from judge.backends import ChatClient, Completion, Usage
from judge.cache import Encoder, Request
from judge.errors import (
    AnswerError,
    BackendError,
    Deferred,
    ResponseFormatUnsupported,
    RetryableError,
    ServerUnusable,
)
from judge.secrets import Redactor
from judge.settings import RESPONSE_FORMATS, Settings

if TYPE_CHECKING:
    from tenacity import RetryCallState

MAX_RETRY_AFTER = 120.0
CONNECTION_FAILURES_TO_STOP = 8  # refused or dropped connections in a row, with no answer in between
SERVER_ERRORS_TO_STOP = 64  # 5xx answers in a row, with no answer in between
FATAL_STATUSES = {401: "the API key was refused", 403: "access is forbidden", 404: "the model or URL is unknown"}


@dataclass(frozen=True)
class Answer:
    parsed: Any
    completion: Mapping[str, Any]  # content, finish_reason, logprobs, usage (summed over re-asks)
    cached: bool  # from the cache or from an identical request in flight: it cost nothing now
    stored: bool = False  # from the answer cache: answered in an earlier run, not by the model now


@dataclass
class AskStats:
    requests: int = 0
    retries: int = 0
    # Tokens spent on asks that never gave a usable answer (no judgment carries them).
    wasted_prompt_tokens: int = 0
    wasted_completion_tokens: int = 0
    wasted_cached_tokens: int = 0


class AnswerFiles(Protocol):
    """A transport that holds answers already written (--batch-dir's answer files): `Asker.recorded` reads them."""

    def answer_to(self, key: str) -> Completion | None: ...

    def settle(self, result: Mapping[str, Any], mine: bool = False) -> None: ...


def add_usage(total: Usage, usage: Mapping[str, Any]) -> None:
    """Add one answer's tokens to `total`; cached prompt tokens stay None until some answer reports them."""
    total["prompt_tokens"] += usage.get("prompt_tokens", 0) or 0
    total["completion_tokens"] += usage.get("completion_tokens", 0) or 0
    if usage.get("cached_tokens") is not None:
        total["cached_tokens"] = (total.get("cached_tokens") or 0) + usage["cached_tokens"]


class CircuitBreaker:
    """Stops the run when the server cannot serve it; any answer resets the count."""

    def __init__(self, where: str, redact: Redactor):
        self.where = where
        self.redact = redact
        self.tripped: ServerUnusable | None = None
        self._connection_failures = 0
        self._server_errors = 0

    def check(self) -> None:
        if self.tripped is not None:
            raise ServerUnusable(str(self.tripped)) from None  # a fresh one: a re-raised one grows its traceback

    def success(self) -> None:
        self._connection_failures = self._server_errors = 0

    def failure(self, exc: Exception) -> None:
        if isinstance(exc, BackendError) and exc.status in FATAL_STATUSES:
            self._trip(f"{FATAL_STATUSES[exc.status]} ({exc})")
        if isinstance(exc, RetryableError) and exc.kind == "connection":
            self._connection_failures += 1
            if self._connection_failures >= CONNECTION_FAILURES_TO_STOP:
                self._trip(f"{self._connection_failures} connection attempts in a row failed ({exc})")
        elif isinstance(exc, RetryableError) and exc.status is not None and exc.status >= 500:
            self._server_errors += 1
            if self._server_errors >= SERVER_ERRORS_TO_STOP:
                self._trip(f"{self._server_errors} answers in a row were server errors (last: {exc})")

    def _trip(self, why: str) -> None:
        if self.tripped is None:
            self.tripped = ServerUnusable(self.redact(f"the server at {self.where} cannot be used: {why}"))
        self.check()


class Asker:
    def __init__(self, client: ChatClient, settings: Settings, cache, language: str = "en",
                 redact: Redactor | None = None):
        self.client = client
        self.settings = settings
        self.cache = cache
        self.language = language
        self.redact = redact or Redactor()
        self.stats = AskStats()
        self.breaker = CircuitBreaker(settings.where or "the configured URL", self.redact)
        self._requested_mode = RESPONSE_FORMATS.index(settings.response_format)
        self._format_mode = self._requested_mode
        # None for a transport whose `complete` never waits (--batch-dir answers from disk, or defers): no request
        # can wait for a slot while another holds one, and taking one costs ~2 us a request.
        self._semaphore = None if getattr(client, "answers_at_once", False) else asyncio.Semaphore(settings.concurrency)
        self._inflight: dict[str, asyncio.Future] = {}
        self._encoder = Encoder()
        self._formats: dict[tuple, dict] = {}
        self._budgets: dict = {}  # answer format -> its max_tokens, asked for at every request

    def body(self, messages: list[dict], fmt, sample: int, mode: int | None = None) -> Request:
        """The chat-completions request for one sample, encoded once (judge.cache.Request); `mode` indexes
        RESPONSE_FORMATS (default: as asked)."""
        s = self.settings
        body = {
            "model": s.model,
            "messages": messages,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens or self._budget(fmt),
            "seed": s.seed + sample,
        }
        if s.logprobs and fmt.numeric:
            body["logprobs"] = True
            body["top_logprobs"] = s.top_logprobs
        kind = RESPONSE_FORMATS[self._requested_mode if mode is None else mode]
        if kind != "text":
            body["response_format"] = self._response_format(fmt, kind)
        return self._encoder.request(body)

    def _budget(self, fmt) -> int:
        budget = self._budgets.get(fmt)
        if budget is None:
            if len(self._budgets) >= 64:  # block formats differ by their letters: keep the recent ones
                self._budgets.clear()
            budget = self._budgets[fmt] = token_budget(fmt, self.language)
        return budget

    def _response_format(self, fmt, kind: str) -> dict:
        """One object per (format, kind) for the whole run, so its encoding is made once (judge.cache.Encoder)."""
        made = self._formats.get((fmt, kind))
        if made is None:
            made = {"type": "json_object"}
            if kind == "json_schema":
                made = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
                                                               "schema": fmt.json_schema()}}
            if len(self._formats) >= 64:
                self._formats.clear()
            self._formats[(fmt, kind)] = made
        return made

    async def ask(self, messages: list[dict], fmt, sample: int = 0) -> Answer:
        """One parsed answer. Raises AnswerError (no usable answer), RetryableError / BackendError (the server
        failed this request), or ServerUnusable (the run must stop)."""
        # Keyed by the format asked for, not the one a fallback ended up sending: the key must not depend on
        # when in the run the server refused json_schema, or a rerun would miss the answers stored after that.
        request = self.body(messages, fmt, sample)
        key = request.key
        cached = self.cache.get(key)
        if cached is not None:
            return Answer(fmt.parse(cached["content"]), cached, True, stored=True)
        if key in self._inflight:
            answer = await asyncio.shield(self._inflight[key])
            return Answer(answer.parsed, answer.completion, True, stored=answer.stored)
        future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            answer = await self._ask_uncached(messages, fmt, sample, request)
            future.set_result(answer)
            return answer
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it; no "never retrieved" warning
            # The error's traceback holds this frame: a frame still holding the future (which holds the error) is a
            # reference cycle, left to the garbage collector with everything the frames hold, once per deferred
            # request of a --batch-dir run (about a tenth of its CPU).
            del future
            raise
        finally:
            del self._inflight[key]

    def recorded(self, keys: list[str], fmt) -> list[Answer] | None:
        """The answers to requests already asked (one per sample, by key) from the cache or the transport's
        `answer_to` (--batch-dir's answer files), parsed, as `ask` would give them; None, with nothing counted or
        stored, unless every one is here and good (not missing, an error, unparseable or cut off): `ask`, with the
        question itself, then does what the online path does (wait, retry, re-ask, or record the failure)."""
        files = cast(AnswerFiles, self.client)  # called for a transport with answer files only (Engine.run_keyed)
        found = []
        for key in keys:
            stored = self.cache.get(key)
            completion = stored if stored is not None else files.answer_to(key)
            if completion is None or completion["finish_reason"] == "length":
                return None
            if stored is None:  # its usage as `ask` sums it over re-asks (one ask here)
                usage: Usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": None}
                add_usage(usage, completion["usage"])
                completion = {**completion, "usage": usage}
            try:
                found.append((key, Answer(fmt.parse(completion["content"]), completion, stored is not None,
                                          stored=stored is not None)))
            except AnswerError:
                return None
        for key, answer in found:
            if not answer.stored:
                self.stats.requests += 1
                files.settle(answer.completion)
                self.cache.put(key, answer.completion)
        return [answer for _, answer in found]

    async def _ask_uncached(self, messages: list[dict], fmt, sample: int, request: Request) -> Answer:
        conversation, key = messages, request.key
        usage: Usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": None}
        for _ in range(self.settings.reasks + 1):
            completion = await self._send_with_fallback(conversation, fmt, sample, request)
            add_usage(usage, completion["usage"])
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
                    return Answer(parsed, completion, False)
            conversation = messages + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": f"That answer cannot be used: {problem}. Reply with the JSON object only."},
            ]
        self.stats.wasted_prompt_tokens += usage["prompt_tokens"]
        self.stats.wasted_completion_tokens += usage["completion_tokens"]
        self.stats.wasted_cached_tokens += usage["cached_tokens"] or 0
        raise AnswerError(f"no usable answer after {self.settings.reasks + 1} asks: {problem}", content)

    async def _send_with_fallback(self, messages: list[dict], fmt, sample: int, asked: Request) -> Completion:
        """Send, stepping down json_schema -> json_object -> text when the server rejects a format. `asked`: the
        question as first asked (the cache's key), sent as it is while its format and messages are still wanted."""
        while True:
            mode = self._format_mode
            same = mode == self._requested_mode and messages is asked["messages"]
            try:
                return await self._send(asked if same else self.body(messages, fmt, sample, mode))
            except ResponseFormatUnsupported:
                if mode + 1 >= len(RESPONSE_FORMATS):
                    raise
                self._format_mode = max(self._format_mode, mode + 1)

    def _may_retry(self, exc: BaseException | None, tries: int) -> bool:
        """Whether a request that failed with `exc` after `tries` tries is tried again."""
        if not isinstance(exc, RetryableError) or tries >= self.settings.attempts:
            return False
        return not (exc.kind == "timeout" and tries >= 2)

    def _delay(self, exc: BaseException | None, tries: int) -> float:
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return min(exc.retry_after, MAX_RETRY_AFTER)
        from tenacity import wait_random_exponential  # imported at the first failure: most runs have none

        wait = wait_random_exponential(multiplier=0.25, max=self.settings.backoff_max)
        return wait(SimpleNamespace(attempt_number=tries))  # type: ignore[arg-type]  # reads attempt_number only

    async def _send(self, body: dict) -> Completion:
        # The first try runs without the retry machinery (about 23 us a request); failures go to tenacity.
        try:
            return await self._try(body)
        except RetryableError as exc:
            if not self._may_retry(exc, 1):
                raise
            await asyncio.sleep(self._delay(exc, 1))
        from tenacity import AsyncRetrying, retry_if_exception_type

        retrying = AsyncRetrying(  # counts from the second try
            stop=lambda state: not self._may_retry(_failure(state), state.attempt_number + 1),
            wait=lambda state: self._delay(_failure(state), state.attempt_number + 1),
            retry=retry_if_exception_type(RetryableError), reraise=True)
        async for attempt in retrying:
            with attempt:
                self.stats.retries += 1
                return await self._try(body)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _try(self, body: dict) -> Completion:
        self.breaker.check()
        slot = self._semaphore
        if slot is not None:
            await slot.acquire()
        try:
            self.breaker.check()  # it may have tripped while this request waited for a slot
            self.stats.requests += 1
            try:
                completion = await self.client.complete(body, self.settings.timeout)
            except Deferred:
                self.stats.requests -= 1  # written to a batch file: counted once, when its answer is read
                raise
            except (RetryableError, BackendError) as exc:
                self.breaker.failure(exc)
                raise
            self.breaker.success()
            return completion
        finally:
            if slot is not None:
                slot.release()


def _failure(state: RetryCallState) -> BaseException | None:
    """The error of the try just made: tenacity calls `stop` and `wait` after a try, when its outcome is set."""
    assert state.outcome is not None
    return state.outcome.exception()
