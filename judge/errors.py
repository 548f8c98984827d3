"""Precise exceptions: each says what went wrong and where, so the CLI can print it without a traceback; and the one
place that maps an exception to what `judge VERB` prints and its exit code (`exit_with`)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judge.answers import AnswerFormat

# The exit codes of every `judge` verb: 0 done; 1 done, but some judgments failed or the verb's verdict is negative
# (the verb's page says which); 2 bad input or a refused run (the message says what and where); 3 batch files
# await a runner (the same command resumes); 130 interrupted (finished work is kept).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BATCH_PENDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

_EXCEPTION_NAME = re.compile(r"[A-Z][A-Za-z]*: ")
_STATUS = re.compile(r"HTTP \d{3}")


class JudgeError(Exception):
    """Base class for every error the `judge` command reports to the user."""


class RubricError(JudgeError):
    """A rubric file is missing, unknown or invalid."""


class TemplateError(JudgeError):
    """A prompt template is missing, invalid, or refers to an undefined variable."""


class InputError(JudgeError):
    """An items file is malformed: the message names the file, the line and the problem."""


class OutputError(JudgeError):
    """The output file cannot be resumed (it belongs to another run, or is not a judgments file)."""


class BackendError(JudgeError):
    """The model server failed in a way that retrying will not fix (bad request, auth, unknown model)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RetryableError(JudgeError):
    """A transient failure: 429, 5xx, a timeout or a dropped connection. `retry_after` is in seconds.

    `kind` is "server" (an HTTP status or a malformed body), "timeout" or "connection": a timeout is retried
    at most once (the same long answer would time out again), and a run of connection failures stops the run.
    """

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 kind: str = "server"):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.kind = kind


class ServerUnusable(JudgeError):
    """The server cannot serve this run at all (refused connections, bad credentials, unknown model): the run
    stops at once instead of failing every judgment, and says where and why. Finished judgments are kept."""


class ResponseFormatUnsupported(BackendError):
    """The server rejected the structured-output request; the caller falls back to a weaker mode."""


class AnswerError(JudgeError):
    """A model answer does not follow the criterion's answer format. `raw` keeps the text."""

    def __init__(self, message: str, raw: str):
        super().__init__(message)
        self.raw = raw


class Stopped(Exception):
    """A command that stopped with neither a result nor an error: batch answers awaited (`exit_code` 3), or a run it
    depends on failed (the exit code that run gives). Not a JudgeError: what was written is kept, not abandoned.
    The message says what to run next."""

    exit_code = EXIT_BATCH_PENDING


def exit_with(verb: str, exc: BaseException) -> int:
    """Say `exc` as `judge VERB` says it (one line on stderr, never a traceback) and return the exit code: the one
    place that maps what stopped a command to its exit code. Exceptions none of these are re-raised."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):  # `judge rubrics | head`: the reader has gone; nothing to say
        return EXIT_OK
    if isinstance(exc, Stopped):
        print(f"judge {verb}: {exc}", file=sys.stderr)
        return exc.exit_code
    if isinstance(exc, JudgeError):
        print(f"judge {verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"judge {verb}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    raise exc


class Deferred(BaseException):
    """A question whose answer is not here yet: it was written to a batch file (or already waits in one). Raised by
    a transport that answers in later passes (`--batch-dir`) through every layer, which neither retries it nor
    records a failure; the engine leaves that judgment for the next pass. A BaseException, so that no layer's
    `except Exception` takes it for an error.

    `key`: the deferred request's key (set by the transport); `question`: (messages, answer format) of the plain
    question a judgment deferred, set by the judging mode (Judge.asked makes what --batch-dir's key file records of
    it); None for anything else (a gate, a segment split)."""

    def __init__(self, key: str | None = None):
        super().__init__(key)
        self.key = key
        self.question: tuple[list[dict], AnswerFormat] | None = None


def failure_cause(error: str) -> str:
    """A failure's cause in a few words, for counting alike failures in a summary: "HTTP 500" (not the exception's
    class, nor the body that varies), "no answer within 120 s", "connection failed", "no usable answer after 3
    asks"."""
    text = error[name.end():] if (name := _EXCEPTION_NAME.match(error)) else error
    if status := _STATUS.match(text):
        return status.group(0)
    return text.split(":")[0].split(" (")[0].strip()[:80] or "unknown"
