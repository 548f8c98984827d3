"""A local OpenAI-compatible chat server for tests and benchmarks, with scripted faults.

Real sockets on 127.0.0.1: run it in a thread (`StubServer().start()`, the `stub_server` fixture) or as its
own process:

    python tests/stub_server.py --port 0 --latency-ms 50 --fault 429:3 --fault 500:2 --reject-json-schema

The process prints `listening on http://127.0.0.1:PORT/v1` once ready, and exits when its parent does. Besides
POST /v1/chat/completions it serves GET /stats (request counts), POST /config (replace the settings, same keys as
`StubConfig`) and POST /reset (clear the counts).

Answers follow the request's `response_format` schema: the first enum value of the verdict key (`score`,
`label`), "yes" for the gate's `answer`, the first listed explanation. Without a schema (json_object / text
fallback) the verdict is read from the prompt's "Answer with one JSON object ..." instruction.

Faults are a script of `(kind, times)` steps consumed in order, by every request together or, with
`per_key`, by each distinct request separately; `times=-1` means forever. Kinds:
  429        HTTP 429 with `Retry-After: <retry_after>`
  500        HTTP 500
  garbage    HTTP 200 whose body is not JSON
  malformed  HTTP 200 JSON that is not a chat completion
  truncated  HTTP 200, the answer's JSON cut in half, finish_reason "length"
  cut        HTTP 200, the answer's JSON cut in half, finish_reason "stop"
  hang       sleep `hang_seconds` (longer than the client's timeout), then answer
A distinct request is identified by `request_id(messages, seed)`: the question, whatever response_format.

Drift: with `changed_share` X (--changed-share X) the server answers a fixed share X of distinct questions with the
last enum value instead of the first, and `system_fingerprint` (--system-fingerprint) is what it reports: the same
judge name, answering differently.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from aiohttp import web

KINDS = ("429", "500", "garbage", "malformed", "truncated", "cut", "hang", "401-echo", "404")


def request_id(messages: list[dict], seed: int | None = 0) -> str:
    """The identity of a question: its messages and seed (sample index), not its response_format."""
    canonical = json.dumps({"messages": messages, "seed": seed}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:20]


@dataclass
class StubConfig:
    latency_ms: float = 0.0
    faults: list = field(default_factory=list)  # [(kind, times)], times=-1: forever
    per_key: bool = False
    retry_after: str = "0.1"
    hang_seconds: float = 5.0
    reject_json_schema: bool = False
    reject_json_object: bool = False
    gate_answer: str = "yes"
    # A judge that changed under the same name: this share of distinct questions (by request_id) is answered with
    # the last enum value instead of the first; `system_fingerprint` is what the server says about itself.
    changed_share: float = 0.0
    system_fingerprint: str = "fp_stub"
    # A judge swayed by a phrase: a question whose messages contain this text is answered with the last enum value
    # (the audit's probes must see it move, and in which direction).
    swayed_by: str | None = None
    # A test double of a model that learns from demonstrations (`judge tune`'s end-to-end test): a candidate's true
    # score is how often the word "good" is in it (1-5); without demonstrations the double scores by length (a
    # weak cue); when the prompt's worked examples follow the "good" rule better than the length rule, it scores by
    # "good". A question asking for a rubric edit gets `proposal` (a JSON text) as its answer.
    learner: bool = False
    proposal: str | None = None
    # A server that answers as another model than the one asked for (a proxy routing elsewhere): its `model` field.
    served_model: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> StubConfig:
        data = dict(data)
        data["faults"] = [tuple(f) for f in data.get("faults", [])]
        for kind, _ in data["faults"]:
            if kind not in KINDS:
                raise ValueError(f"unknown fault {kind!r}: one of {', '.join(KINDS)}")
        return cls(**data)


class Stats:
    def __init__(self):
        self.total = 0
        self.received: Counter = Counter()  # request_id -> requests received (faulted or not)
        self.answered: Counter = Counter()  # request_id -> usable answers sent
        self.faults: Counter = Counter()  # kind -> times served
        self.rejected = 0  # 400s for an unsupported response_format
        self.formats: Counter = Counter()  # response_format type -> requests
        self.authorization: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_request_at: float | None = None  # time.time() of the first chat request (start-up benchmarks)

    def as_dict(self) -> dict:
        return {
            "total": self.total, "received": dict(self.received), "answered": dict(self.answered),
            "first_request_at": self.first_request_at,
            "faults": dict(self.faults), "rejected": self.rejected, "formats": dict(self.formats),
            "authorization": sorted(self.authorization), "max_in_flight": self.max_in_flight,
        }


# -- answers ------------------------------------------------------------------------------------------------
_VERDICT_IN_PROMPT = re.compile(r'"(score|label)" one of ([^\n]+)')


def changed_question(key: str, share: float) -> bool:
    """Whether the question `key` (a request_id) is among the `share` a changed judge now answers differently."""
    return share > 0 and int(key[:8], 16) % 10_000 < share * 10_000


def _answer_from_schema(schema: dict, gate_answer: str, last: bool = False) -> dict:
    props = schema.get("properties", {})
    answer: dict = {}
    for key, spec in props.items():
        if key == "rationale":
            answer[key] = "ok"
        elif key == "answer":
            answer[key] = gate_answer if gate_answer in spec.get("enum", [gate_answer]) else spec["enum"][0]
        elif "enum" in spec:
            answer[key] = spec["enum"][-1 if last else 0]
        elif spec.get("type") == "object":  # a block: one answer object per candidate letter
            answer[key] = _answer_from_schema(spec, gate_answer, last)
        elif spec.get("type") == "integer":
            answer[key] = 1
        else:
            answer[key] = "ok"
    return answer


def _answer_from_prompt(messages: list[dict], gate_answer: str, last: bool = False) -> dict:
    text = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    match = _VERDICT_IN_PROMPT.search(text)
    if match:
        first = match.group(2).split(",")[-1 if last else 0].strip().strip('."')
        value = int(first) if re.fullmatch(r"-?\d+", first) else first
        return {"rationale": "ok", match.group(1): value}
    if '"answer"' in text:
        return {"rationale": "ok", "answer": gate_answer}
    return {"rationale": "ok", "score": 1}


_FENCED = r"<<<{kind} [0-9a-f]{{12}}>>>\n(.*?)\n<<<END {kind} [0-9a-f]{{12}}>>>"


def _by_good(text: str) -> int:
    return max(1, min(5, text.lower().split().count("good")))


def _by_length(text: str) -> int:
    return max(1, min(5, len(text.split()) // 6))


def learned_score(messages: list[dict]) -> int:
    """The learner double's score (see StubConfig.learner): by "good" once the demonstrations teach that rule."""
    system = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
    user = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    found = re.search(_FENCED.format(kind="CANDIDATE"), user, re.S)
    candidate = found.group(1) if found else user
    shown = re.findall(_FENCED.format(kind="EXAMPLE CANDIDATE") + r"\nAnswer: (\d+)\.", system, re.S)
    if shown:
        good = sum(abs(_by_good(text) - int(answer)) for text, answer in shown)
        length = sum(abs(_by_length(text) - int(answer)) for text, answer in shown)
        if good < length:
            return _by_good(candidate)
    return _by_length(candidate)


def _logprobs(content: str, answer: dict) -> dict:
    """Tokens spelling `content`, the verdict as one token whose alternatives are the other points."""
    verdict_key = next((k for k in ("score", "label", "answer") if k in answer), None)
    if verdict_key is None:
        return {"content": [{"token": content, "logprob": 0.0, "bytes": list(content.encode()), "top_logprobs": []}]}
    value = json.dumps(answer[verdict_key], ensure_ascii=False)
    marker = f'"{verdict_key}": '
    head, tail = content.split(marker + value, 1)
    head += marker
    verdict = {"token": value, "logprob": -0.1, "bytes": list(value.encode()),
               "top_logprobs": [{"token": value, "logprob": -0.1, "bytes": list(value.encode())}]}
    if isinstance(answer[verdict_key], int):
        other = str(answer[verdict_key] + 1)
        verdict["top_logprobs"].append({"token": other, "logprob": -2.4, "bytes": list(other.encode())})
    pieces = [{"token": head, "logprob": 0.0, "bytes": list(head.encode()), "top_logprobs": []}, verdict]
    if tail:
        pieces.append({"token": tail, "logprob": 0.0, "bytes": list(tail.encode()), "top_logprobs": []})
    return {"content": pieces}


def _completion(body: dict, content: str, finish_reason: str, answer: dict | None,
                system_fingerprint: str = "fp_stub", served_model: str | None = None) -> dict:
    prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason,
              "logprobs": None}
    if body.get("logprobs") and answer is not None:
        choice["logprobs"] = _logprobs(content, answer)
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
        "model": served_model or body.get("model", "stub"),
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_chars // 4 + 1, "completion_tokens": len(content) // 4 + 1,
                  "total_tokens": prompt_chars // 4 + len(content) // 4 + 2,
                  # A made-up prefix-cache share (half the prompt), in OpenAI's shape, for the token bill's tests.
                  "prompt_tokens_details": {"cached_tokens": prompt_chars // 8}},
        "system_fingerprint": system_fingerprint,
    }


# -- the server ---------------------------------------------------------------------------------------------
class StubServer:
    def __init__(self, config: StubConfig | None = None, host: str = "127.0.0.1", port: int = 0):
        self.config = config or StubConfig()
        self.stats = Stats()
        self.host, self.port = host, port
        self._global_step = [0, 0]  # [index in script, uses of that step]
        self._key_steps: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def configure(self, **changes) -> None:
        with self._lock:
            self.config = StubConfig.from_dict({**asdict(self.config), **changes})
            self._global_step = [0, 0]
            self._key_steps = {}

    def reset(self) -> None:
        with self._lock:
            self.stats = Stats()
            self._global_step = [0, 0]
            self._key_steps = {}

    def _next_fault(self, key: str) -> str | None:
        with self._lock:
            script = self.config.faults
            step = self._key_steps.setdefault(key, [0, 0]) if self.config.per_key else self._global_step
            while step[0] < len(script):
                kind, times = script[step[0]]
                if times < 0 or step[1] < times:
                    step[1] += 1
                    return kind
                step[0], step[1] = step[0] + 1, 0
            return None

    # -- handlers
    async def chat(self, request: web.Request) -> web.Response:
        stats = self.stats
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await self._chat(request, stats)
        finally:
            stats.in_flight -= 1

    async def _chat(self, request: web.Request, stats: Stats) -> web.Response:
        body = json.loads(await request.read())
        config = self.config
        messages = body.get("messages", [])
        key = request_id(messages, body.get("seed"))
        stats.total += 1
        stats.received[key] += 1
        if stats.first_request_at is None:
            stats.first_request_at = time.time()
        if auth := request.headers.get("Authorization"):
            stats.authorization.add(auth)
        rf = (body.get("response_format") or {}).get("type", "text")
        stats.formats[rf] += 1
        if config.latency_ms:
            await asyncio.sleep(config.latency_ms / 1000)
        if (rf == "json_schema" and config.reject_json_schema) or (rf == "json_object" and config.reject_json_object):
            stats.rejected += 1
            error = {"error": {"message": f"response_format of type {rf} is not supported by this server",
                               "type": "invalid_request_error", "param": "response_format"}}
            return web.json_response(error, status=400)
        fault = self._next_fault(key)
        if fault is not None:
            stats.faults[fault] += 1
        if fault == "429":
            return web.json_response({"error": {"message": "rate limited"}}, status=429,
                                     headers={"Retry-After": config.retry_after})
        if fault == "500":
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        if fault == "401-echo":  # a careless proxy that quotes the credential it refused
            message = f"invalid credentials: Authorization: {request.headers.get('Authorization')}"
            return web.json_response({"error": {"message": message, "type": "invalid_api_key"}}, status=401)
        if fault == "404":
            return web.json_response({"error": {"message": f"The model `{body.get('model')}` does not exist."}},
                                     status=404)
        if fault == "garbage":
            return web.Response(text="<html><body>502 Bad Gateway, upstream gone</body></html>",
                                content_type="application/json")
        if fault == "malformed":
            return web.json_response({"object": "error", "detail": "no choices here"})
        if fault == "hang":
            await asyncio.sleep(config.hang_seconds)
        last = changed_question(key, config.changed_share) or bool(
            config.swayed_by and any(config.swayed_by in str(m.get("content", "")) for m in messages))
        if config.proposal is not None and "improve the wording of one criterion" in str(messages[0].get("content")):
            stats.answered[key] += 1
            return web.json_response(_completion(body, config.proposal, "stop", None, config.system_fingerprint))
        if rf == "json_schema":
            schema = body["response_format"]["json_schema"]["schema"]
            answer = _answer_from_schema(schema, config.gate_answer, last)
        else:
            answer = _answer_from_prompt(messages, config.gate_answer, last)
        if config.learner and "score" in answer:
            answer["score"] = learned_score(messages)
        content = json.dumps(answer, ensure_ascii=False)
        if fault in ("truncated", "cut"):
            cut = content[: len(content) // 2]
            return web.json_response(_completion(body, cut, "length" if fault == "truncated" else "stop", None))
        stats.answered[key] += 1
        return web.json_response(_completion(body, content, "stop", answer, config.system_fingerprint,
                                             config.served_model))

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.as_dict())

    async def post_config(self, request: web.Request) -> web.Response:
        try:
            self.configure(**await request.json())
        except (TypeError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(asdict(self.config))

    async def post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)  # a Batch API input file may hold up to 200 MB
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/stats", self.get_stats)
        app.router.add_post("/config", self.post_config)
        app.router.add_post("/reset", self.post_reset)
        return app

    async def serve(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- in a thread
    def start(self) -> StubServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self.serve())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.shutdown())
            pending = asyncio.all_tasks(self._loop)  # handlers still sleeping in a "hang"
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

        self._thread = threading.Thread(target=run, name="stub-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def _fault(spec: str) -> tuple[str, int]:
    kind, _, times = spec.partition(":")
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault {kind!r}: one of {', '.join(KINDS)}")
    return kind, int(times or 1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--fault", type=_fault, action="append", default=[], metavar="KIND[:TIMES]",
                   help=f"a fault script step, repeatable; KIND one of {', '.join(KINDS)}; TIMES -1 = forever")
    p.add_argument("--per-key", action="store_true", help="run the fault script for each distinct request")
    p.add_argument("--retry-after", default="0.1")
    p.add_argument("--hang-seconds", type=float, default=5.0)
    p.add_argument("--reject-json-schema", action="store_true")
    p.add_argument("--reject-json-object", action="store_true")
    p.add_argument("--gate-answer", choices=["yes", "no"], default="yes")
    p.add_argument("--changed-share", type=float, default=0.0, metavar="X",
                   help="answer this share of distinct questions with the last enum value (a judge that drifted)")
    p.add_argument("--system-fingerprint", default="fp_stub")
    args = p.parse_args(argv)
    config = StubConfig(
        latency_ms=args.latency_ms, faults=args.fault, per_key=args.per_key, retry_after=args.retry_after,
        hang_seconds=args.hang_seconds, reject_json_schema=args.reject_json_schema,
        reject_json_object=args.reject_json_object, gate_answer=args.gate_answer,
        changed_share=args.changed_share, system_fingerprint=args.system_fingerprint,
    )
    serve_until_parent_exits(StubServer(config, args.host, args.port))


def serve_until_parent_exits(server) -> None:
    """Run a server as its own process: say where it listens, and exit with the test or benchmark that started it,
    even on a crash."""
    parent = os.getppid()

    async def run() -> None:
        await server.serve()
        print(f"listening on {server.base_url}", flush=True)
        try:
            while os.getppid() == parent:
                await asyncio.sleep(0.5)
        finally:
            await server.shutdown()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
