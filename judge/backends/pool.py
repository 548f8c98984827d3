"""Several OpenAI-compatible servers (replicas of one model) behind one `ChatClient`.

Each server has its own bound on requests in flight. A request goes to the healthy server with the fewest in
flight. A server whose connection fails, or that stops answering (a request times out and the server has
answered nothing since it was sent), is taken out: the request that saw it, and every other request still in
flight there, is sent again to another server, so a judgment is neither lost nor asked of two servers at once by
this client. A timeout on a server that keeps answering others is that request's own (a long answer): it goes to
the asking layer, which retries it once, and the server stays in. After a cool-down the server is let back in on
probation, one request at a time: an answer brings it back, another failure doubles its cool-down. When every server is
out, `complete` raises a connection `RetryableError`, which the asking layer's circuit breaker counts.

HTTP errors (429, 5xx, 4xx) come from a server that is alive: they go to the asking layer unchanged, which
retries or records them as it does with one server.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from judge.backends import ChatClient, Completion
from judge.errors import BackendError, RetryableError, failure_cause

COOL_DOWN = 5.0  # seconds out after a first failure
MAX_COOL_DOWN = 120.0


def _server_gone(exc: RetryableError, server: _Server, sent_at: float) -> bool:
    """A dropped or refused connection, or a timeout with no answer from that server since the request left."""
    kind = getattr(exc, "kind", None)
    return kind == "connection" or (kind == "timeout" and server.last_answer < sent_at)


class _Server:
    def __init__(self, url: str, client: ChatClient, bound: int):
        self.url = url
        self.client = client
        self.bound = bound
        self.in_flight: set[asyncio.Task] = set()
        self.answered = 0
        self.sent = 0  # requests sent there, answered or not
        self.failed: Counter = Counter()  # cause -> requests it failed (judge.errors.failure_cause)
        self.last_answer = 0.0  # monotonic time of its latest answer
        self.out_until = 0.0  # monotonic time; 0: in service
        self.cool_down = COOL_DOWN
        self.last_failure = ""

    def usable(self, now: float) -> bool:
        if self.out_until == 0.0:
            return len(self.in_flight) < self.bound
        return now >= self.out_until and not self.in_flight  # on probation: one request at a time


class PoolClient:
    name = "pool"

    def __init__(self, urls: list[str], make_client: Callable[[str], ChatClient], concurrency: int,
                 cool_down: float = COOL_DOWN):
        self._servers = [_Server(url, make_client(url), concurrency) for url in urls]
        self._cool_down = cool_down
        for server in self._servers:
            server.cool_down = cool_down
        self._changed: asyncio.Condition | None = None  # created in the running loop

    def stats(self) -> dict[str, int]:
        """Requests answered per server URL."""
        return {s.url: s.answered for s in self._servers}

    def requests_per_server(self) -> dict[str, tuple[int, Counter]]:
        """Requests sent to each server URL and the causes of those that failed there (the run summary reports
        them: a replica that fails every request is seen taking its share, not as idle)."""
        return {s.url: (s.sent, Counter(s.failed)) for s in self._servers}

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def complete(self, body: dict, timeout: float) -> Completion:
        changed = self._condition()
        while True:
            server = await self._choose()
            sent_at = time.monotonic()
            task = asyncio.ensure_future(server.client.complete(body, timeout))
            server.in_flight.add(task)
            server.sent += 1
            try:
                completion = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # our caller is cancelled: stop
                continue  # the server was taken out under this request: send it elsewhere
            except (RetryableError, BackendError) as exc:
                server.failed[failure_cause(f"{exc}")] += 1
                if not isinstance(exc, RetryableError) or not _server_gone(exc, server, sent_at):
                    raise
                self._take_out(server, exc)
                continue
            finally:
                server.in_flight.discard(task)
                async with changed:
                    changed.notify_all()
            server.answered += 1
            server.last_answer = time.monotonic()
            if server.out_until:
                server.out_until, server.cool_down = 0.0, self._cool_down  # probation passed
            return completion

    async def _choose(self) -> _Server:
        changed = self._condition()
        async with changed:
            while True:
                now = time.monotonic()
                usable = [s for s in self._servers if s.usable(now)]
                if usable:
                    return min(usable, key=lambda s: (len(s.in_flight), s.answered))
                out = [s for s in self._servers if s.out_until]
                if len(out) == len(self._servers) and all(s.in_flight or s.out_until > now for s in out):
                    reasons = "; ".join(f"{s.url}: {s.last_failure}" for s in out)
                    error = RetryableError(f"connection failed: every server is out ({reasons})")
                    error.kind = "connection"
                    raise error
                # Wait for a slot, or for the next server to come back from its cool-down.
                wake = min((s.out_until - now for s in out if s.out_until > now), default=None)
                try:
                    await asyncio.wait_for(changed.wait(), wake)
                except TimeoutError:
                    pass

    def _take_out(self, server: _Server, exc: Exception) -> None:
        server.last_failure = str(exc)
        if server.out_until:  # failed on probation: stay out longer
            server.cool_down = min(server.cool_down * 2, MAX_COOL_DOWN)
        server.out_until = time.monotonic() + server.cool_down
        for task in list(server.in_flight):
            task.cancel()  # their callers send them elsewhere

    async def aclose(self) -> None:
        await asyncio.gather(*(s.client.aclose() for s in self._servers), return_exceptions=True)
