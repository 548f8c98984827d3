"""Batch transports' shared round machinery: the same requests, answered by a provider's Batch API (`--batch`,
judge/backends/batch_api.py) or by any runner of OpenAI batch files (`--batch-dir DIR`, judge/backends/batch_dir.py:
`vllm run-batch` on many nodes, Ray Data, other providers); judge.backends.open_batch opens either.

Both are `ChatClient`s (a `Batcher`), so the engine and the asking layer do not change: `complete` answers a
question whose answer is here, and otherwise records it for a batch and raises `Deferred`; at the end of a pass
over the plan the engine calls `end_pass`, and the deferred requests form a *round*: they are written as batch
lines (`batch_line`: `custom_id` = the request's cache key, so an answer maps back to exactly one request, and one
from another model or a changed request matches nothing), answered, and each answer (`result_of`) is what
`complete` returns, or the error the online path would have raised for it, to the asking layer: the same parsing,
cache entries and judgments. A question that depends on an answer (the gate before its criteria, the split before
per-segment questions, a re-ask after an unparseable answer, a retry after a retryable error) joins the next round.
`--batch-dir` stops after writing a round (`BatchPending`) and says what to run.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from judge.backends import Completion
from judge.backends.openai_compat import _completion, _status_error
from judge.cache import Request
from judge.errors import BackendError, InputError, RetryableError, Stopped
from judge.secrets import MASK, Redactor

ENDPOINT = "/v1/chat/completions"
# The OpenAI Batch API's limits per input file, with a margin (a provider counts bytes its own way).
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
MARGIN = 0.9
UNANSWERED = ("batch_expired", "batch_cancelled")  # error codes of requests the batch never ran: sent again
RETRYABLE_CODES = ("rate_limit_exceeded", "server_error", "internal_error", "timeout")
REPORT_EVERY = 180.0  # seconds between progress lines when stderr is not a terminal
MANIFEST_KIND = "llm-judge-rater batch manifest"
_HEX_KEY = re.compile(r"[0-9a-f]{64}")  # a custom_id this tool writes: the request's key


DIR_CONCURRENCY = 64  # batch transports answer from disk at once: a small window streams the plan


class BatchPending(Stopped):
    """--batch-dir: this round's batch files are written (or awaited); the message says what to run."""


def batch_line(key: str, body: dict) -> str:
    if isinstance(body, Request):  # encoded once already, for its key
        return f'{{"custom_id":"{key}","method":"POST","url":"{ENDPOINT}","body":{body.text}}}'
    return json.dumps({"custom_id": key, "method": "POST", "url": ENDPOINT, "body": body}, ensure_ascii=False,
                      separators=(",", ":"))


def result_of(record: dict | None, redact: Redactor) -> Completion | Exception | None:
    """One output- or error-file record as what `complete` returns or raises; None when the request never ran
    (expired, cancelled, or missing): it is sent again.

    Errors come in several shapes, all read: OpenAI's `error` object with `response: null`; `error: null` with a
    non-200 `response` whose body holds the error; and vLLM's `response: {status_code}` with the error (a string or
    an ErrorResponse) in `error`. An HTTP status is judged as online (429 and 5xx are retried, in the next round)."""
    if record is None:
        return None
    response, error = record.get("response"), record.get("error")
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if status == 200 and not error and isinstance(body, dict):
        try:
            return _completion(body)
        except RetryableError as exc:
            exc.retry_after = 0.0  # the next round, not after a back-off
            return exc
    if isinstance(error, dict) and (error.get("code") in UNANSWERED):
        return None
    failure: Exception
    if isinstance(status, int) and status != 200:
        detail = error or body
        failure = _status_error(status, detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False),
                                None, redact)
    elif isinstance(error, dict):
        code = error.get("code") or "error"
        message = redact(f"batch request failed: {code}: {error.get('message') or ''}".strip())
        failure = RetryableError(message) if code in RETRYABLE_CODES else BackendError(message)
    else:
        failure = RetryableError(f"malformed batch result line: {json.dumps(record)[:200]}")
    if isinstance(failure, RetryableError):
        failure.retry_after = 0.0
    return failure


def public_url(url: str | None, redact: Redactor | None = None) -> str:
    """A server's URL as it may be written down or shown: credentials (`user:token@`, any query value) masked."""
    if not url:
        return "the OpenAI API"
    try:
        parts = urlsplit(url)
    except ValueError:
        return (redact or Redactor())(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(f"{name}={MASK}" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    return (redact or Redactor())(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


class _Status:
    """Progress while waiting: one refreshing line on a terminal, a line every few minutes (and at each change of
    status) otherwise."""

    def __init__(self, enabled: bool):
        self.enabled, self.tty = enabled, sys.stderr.isatty()
        self.started = time.monotonic()
        self.last_line, self.last_time = "", 0.0

    def show(self, text: str, state: str) -> None:
        """`text` on the terminal's line; in a log, when `state` (the batches' statuses) changes or every few
        minutes, not at every count."""
        if not self.enabled:
            return
        now = time.monotonic()
        line = f"{text}; {now - self.started:.0f} s"
        if self.tty:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        elif state != self.last_line or now - self.last_time >= REPORT_EVERY:
            print(line, file=sys.stderr, flush=True)
            self.last_time = now
        self.last_line = state

    def done(self) -> None:
        if self.enabled and self.tty and self.last_line:
            print(file=sys.stderr, flush=True)
        self.last_line = ""


class Batcher:
    """A transport that answers in passes: `complete` answers a question whose answer is here, and otherwise
    records it for a batch and raises `Deferred`; at the end of a pass over the plan the engine calls `end_pass`,
    which gets the answers (a provider's Batch API) and returns None for another pass, or says what to run
    (batch files for a runner). Nothing of the run is held in memory but the keys."""

    name = "batch"
    price_note = ""

    def __init__(self, redact: Redactor | None = None, progress: bool = True):
        self.redact = redact or Redactor()
        self.status = _Status(progress)
        self.requests = self.batches = self.rounds = 0  # sent (or written) in batches
        self.answered = 0  # answers that came back from batches
        # Answers and tokens (prompt, cached, completion) from batches this run submitted, and from earlier ones.
        self.billed = {"this run": [0, 0, 0, 0], "earlier": [0, 0, 0, 0]}

    def settle(self, result, mine: bool = False) -> None:
        """Count an answer handed to the asking layer; `mine`: it came from a batch this run submitted (and pays
        for)."""
        self.answered += 1
        tally = self.billed["this run" if mine else "earlier"]
        tally[0] += 1
        if isinstance(result, dict):
            usage = result.get("usage") or {}
            tally[1] += usage.get("prompt_tokens") or 0
            tally[2] += usage.get("cached_tokens") or 0
            tally[3] += usage.get("completion_tokens") or 0

    async def end_pass(self) -> str | None:
        raise NotImplementedError

    def summary(self) -> str:
        if not self.requests and not self.answered:
            return ""
        return (f"by batch: {self.answered} answers; {self.requests} requests sent in {self.batches} batch file(s) "
                f"over {self.rounds} round(s); {self._billing()}{self.price_note}")

    @staticmethod
    def _tokens(tally: list[int]) -> str:
        return f"tokens {tally[1]} prompt ({tally[2]} cached) / {tally[3]} completion"

    def _billing(self) -> str:
        """--batch-dir: the runner's answers read by this run (whoever wrote the files)."""
        earlier, mine = self.billed["earlier"], self.billed["this run"]
        both = [a + b for a, b in zip(earlier, mine)]
        return f"answers read: {self._tokens(both)}"

    async def aclose(self) -> None:
        pass


def _batch_lines(path: Path, cut_ok: bool, where: str | None = None):
    """(line number, offset, record) of each line of a batch file, read one line at a time; the checks of `_jsonl`
    (a cut last line of a results file is a missing answer; any other unreadable line an InputError)."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    name = where or str(path)
    with handle:
        offset, previous = 0, None
        for number, line in enumerate(handle, start=1):
            start, offset = offset, offset + len(line)
            if previous is not None:  # a bad line is an error unless it is the last one of a results file
                raise previous
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                problem = f"not UTF-8 text (byte {exc.start + 1} of the line is 0x{line[exc.start]:02x})"
            except json.JSONDecodeError as exc:
                problem = f"not valid JSON ({exc.msg})"
            else:
                if not isinstance(record, dict) or not isinstance(record.get("custom_id"), str):
                    raise InputError(f"{name}:{number}: not a batch line (no custom_id)")
                yield number, start, record
                continue
            previous = InputError(f"{name}:{number}: {problem}; is it a batch file? (only a cut last line is read "
                                  "as a missing answer)")
            if not cut_ok:
                raise previous
        # the bad line was the last one with text: a cut answer, read as missing
