"""Batch transports: the same requests, answered by a provider's Batch API (`--batch`) or by any runner of OpenAI
batch files (`--batch-dir DIR`: `vllm run-batch` on many nodes, Ray Data, other providers).

Both are `ChatClient`s, so the engine and the asking layer do not change: `complete` parks each request instead
of sending it. When every request of the run waits here (the event loop has had nothing else to do for a few
turns), the parked requests form a *round*: they are written as batch lines (`custom_id` = the request's cache
key, so an answer maps back to exactly one request, and one from another model or a changed request matches
nothing), answered, and each answer goes back to its waiting `complete`, which returns it, or raises the error the
online path would have raised for it, to the asking layer: the same parsing, cache entries and judgments. A
question that depends on an answer (the gate before its criteria, the split before per-segment questions, a
re-ask after an unparseable answer, a retry after a retryable error) arrives after its round and joins the next.

`--batch`: before polling, a manifest next to --output (`OUT.batches.json`: file ids, batch ids, the custom_ids
of each batch, the run's fingerprint) records what was paid for. A rerun after a crash, Ctrl-C or reboot finds
its requests in the manifest and polls those batches instead of submitting them again; an answer from a finished
batch is used as it is. A batch that ends `expired` or `cancelled` keeps its answers; only the missing requests go
into the next round.

`--batch-dir`: a round is written as shard files `roundR-NNN.jsonl` and the run stops (`BatchPending`) saying what
to run; the same command rerun reads every `*.out.jsonl`, and its answers resolve the requests. With the shards a
pointwise run writes `keys-roundR.jsonl` (judge/backends/batchkeys.py): every planned judgment and the requests it
asked, so that the rerun records the answers without reading the items or rendering a prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from judge.backends.keyindex import KeyIndex
from judge.backends.openai_compat import _completion, _status_error
from judge.cache import Request, request_key
from judge.errors import BackendError, Deferred, InputError, JudgeError, OutputError, RetryableError, ServerUnusable
from judge.outputs import write_files
from judge.secrets import MASK, Redactor

ENDPOINT = "/v1/chat/completions"
# The OpenAI Batch API's limits per input file, with a margin (a provider counts bytes its own way).
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
MARGIN = 0.9
FINAL = ("completed", "expired", "cancelled", "failed")
UNANSWERED = ("batch_expired", "batch_cancelled")  # error codes of requests the batch never ran: sent again
RETRYABLE_CODES = ("rate_limit_exceeded", "server_error", "internal_error", "timeout")
CREATE_ATTEMPTS = 4  # tries at uploading a file or creating a batch (the SDK's own retries are off for these)
MAX_SENDS = 5  # batches a request may go out in before it is recorded as unanswered
POLL_FIRST = float(os.environ.get("JUDGE_BATCH_POLL_SECONDS", "5"))  # then doubling, up to POLL_MAX
POLL_MAX = max(POLL_FIRST, 60.0)
REPORT_EVERY = 180.0  # seconds between progress lines when stderr is not a terminal
MANIFEST_KIND = "llm-judge-rater batch manifest"
_HEX_KEY = re.compile(r"[0-9a-f]{64}")  # a custom_id this tool writes: the request's key


class BatchPending(Exception):
    """--batch-dir: this round's batch files are written (or awaited); the message says what to run."""


def manifest_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".batches.json")


def batch_line(key: str, body: dict) -> str:
    if isinstance(body, Request):  # encoded once already, for its key
        return f'{{"custom_id":"{key}","method":"POST","url":"{ENDPOINT}","body":{body.text}}}'
    return json.dumps({"custom_id": key, "method": "POST", "url": ENDPOINT, "body": body}, ensure_ascii=False,
                      separators=(",", ":"))


def result_of(record: dict | None, redact: Redactor) -> dict | Exception | None:
    """One output- or error-file record as what `complete` returns or raises; None when the request never ran
    (expired, cancelled, or missing): it is sent again.

    Errors come in several shapes, all read: OpenAI's `error` object with `response: null`; `error: null` with a
    non-200 `response` whose body holds the error; and vLLM's `response: {status_code}` with the error (a string or
    an ErrorResponse) in `error`. An HTTP status is judged as online (429 and 5xx are retried, in the next round)."""
    if record is None:
        return None
    response, error = record.get("response"), record.get("error")
    status = response.get("status_code") if isinstance(response, dict) else None
    if status == 200 and not error and isinstance(response.get("body"), dict):
        try:
            return _completion(response["body"])
        except RetryableError as exc:
            exc.retry_after = 0.0  # the next round, not after a back-off
            return exc
    if isinstance(error, dict) and (error.get("code") in UNANSWERED):
        return None
    if isinstance(status, int) and status != 200:
        detail = error or response.get("body")
        exc = _status_error(status, detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False),
                            None, redact)
    elif isinstance(error, dict):
        code = error.get("code") or "error"
        message = redact(f"batch request failed: {code}: {error.get('message') or ''}".strip())
        exc = RetryableError(message) if code in RETRYABLE_CODES else BackendError(message)
    else:
        exc = RetryableError(f"malformed batch result line: {json.dumps(record)[:200]}")
    if isinstance(exc, RetryableError):
        exc.retry_after = 0.0
    return exc


def run_fingerprint(options) -> str:
    """What makes a run the same command: verb, rubric (its content), items (their bytes), criteria, templates (their
    text), model and decoding."""
    from judge.prompting import template_sources
    from judge.judgment import digest
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


# -- a provider's Batch API -----------------------------------------------------------------------------------
class Manifest:
    """What was paid for: the batches of a run (file id, batch id, the file of their custom_ids), next to --output,
    written before any polling so that a rerun resumes instead of paying twice.

    A batch's custom_ids are kept one per line in `OUT.batches.ids/NNNNN.txt`, not in the manifest (a million of
    them made a 70 MB manifest rewritten at every change, and held in memory); `index` maps each to the batches
    holding it (judge/backends/keyindex.py). A manifest written before keeps them in the entry (`custom_ids`)."""

    def __init__(self, path: Path, fingerprint: str, command: str, model: str, where: str):
        self.path = path
        self.ids_dir = path.with_name(path.name.removesuffix(".json") + ".ids")
        self.data = {"kind": MANIFEST_KIND, "version": 1, "command": command, "fingerprint": fingerprint,
                     "model": model, "server": where, "batches": []}
        if path.exists():
            self._load(fingerprint, command)
        self.index = KeyIndex(1)  # custom_id -> the number of each batch holding it, oldest first
        for number, entry in enumerate(self.batches):
            self._index(number, entry)

    def _index(self, number: int, entry: dict) -> None:
        count = 0
        for key in self.custom_ids(entry):
            if _HEX_KEY.fullmatch(key):
                self.index.add(key, number)
                count += 1
            elif "ids" in entry:
                raise OutputError(f"{self.ids_dir / entry['ids']}:{count + 1}: not a custom_id of this tool "
                                  f"({key[:20]!r}); {self._mend}")
        if "ids" in entry and count != entry.get("requests"):
            batch = entry.get("batch_id") or entry.get("file_id")
            raise OutputError(f"{self.ids_dir / entry['ids']}: holds {count} custom_ids where the manifest records "
                              f"{entry.get('requests')} requests in batch {batch}; {self._mend}")

    @property
    def _mend(self) -> str:
        return (f"the manifest {self.path.name} needs them to match answers to requests (a request it cannot match "
                "would be paid for again): restore the file, or choose another --output; nothing was submitted")

    def custom_ids(self, entry: dict):
        """The custom_ids of a batch, read one at a time from its file."""
        if "custom_ids" in entry:  # a manifest written before the ids had files of their own
            yield from entry["custom_ids"]
            return
        if not entry.get("ids"):
            return
        path = self.ids_dir / entry["ids"]
        try:
            handle = path.open(encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"{path}: the custom_ids of batch {entry.get('batch_id') or entry.get('file_id')} "
                              f"cannot be read ({exc.strerror or exc}); {self._mend}") from None
        with handle:
            for line in handle:
                if line.strip():
                    yield line.strip()

    def latest(self, key: str) -> tuple[int, dict] | None:
        """(number, entry) of the latest batch holding a request, or None."""
        row = self.index.last(key)
        return None if row is None else (row[0], self.batches[row[0]])

    def _load(self, fingerprint: str, command: str) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise OutputError(f"{self.path}: not a batch manifest ({exc}); it is left untouched: move it away, or "
                              "choose another --output") from None
        if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND or not isinstance(data.get("batches"), list):
            raise OutputError(f"{self.path}: not a batch manifest written by judge; it is left untouched: move it "
                              "away, or choose another --output")
        live = [b for b in data["batches"] if b.get("status") not in FINAL]
        if data.get("fingerprint") != fingerprint and live:
            raise OutputError(
                f"{self.path}: belongs to another command (`judge {data.get('command')}` with other items, rubric, "
                f"criteria, model or decoding; run {data.get('fingerprint')}, this one {fingerprint}) whose "
                f"{len(live)} batch(es) are not finished: rerun that command to collect them, or `judge batch cancel "
                f"--output {self.path.name.removesuffix('.batches.json')}`; nothing was submitted")
        data.update(fingerprint=fingerprint, command=command)  # finished batches' answers still match by key
        if data.get("server"):  # one written before URLs were stored without their credentials
            data["server"] = public_url(data["server"])
        self.data = data

    @property
    def batches(self) -> list[dict]:
        return self.data["batches"]

    def add(self, entry: dict) -> int:
        """Record a batch whose ids file is written; its number."""
        self.batches.append(entry)
        self._index(len(self.batches) - 1, entry)
        return len(self.batches) - 1

    def save(self) -> None:
        write_files({self.path: json.dumps(self.data, ensure_ascii=False) + "\n"}, verb="batch")


def read_manifest(output: str | Path) -> dict:
    path = manifest_path(output)
    if not path.is_file():
        raise OutputError(f"{path}: no batch manifest (no `--batch` run wrote to --output {output})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise OutputError(f"{path}: not a batch manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        raise OutputError(f"{path}: not a batch manifest written by judge")
    return data


def sdk_client(base_url: str | None, api_key: str | None, sync: bool = False):
    import openai

    if base_url and MASK in base_url:  # a manifest's server, written down without its credentials
        full = os.environ.get("OPENAI_BASE_URL")
        if not full or public_url(full) != base_url:
            raise BackendError(f"the batches were sent to {base_url}, recorded without its credentials: give "
                               "that URL in full (--base-url, or $OPENAI_BASE_URL), then run this again")
        base_url = full
    cls = openai.OpenAI if sync else openai.AsyncOpenAI
    return cls(base_url=base_url, api_key=api_key or "not-needed", max_retries=4)


def check_batch_endpoints(base_url: str | None, api_key: str | None, where: str, redact: Redactor) -> None:
    """Refuse, before anything is uploaded, a server that has no Batch API (`vllm serve` and llama.cpp have none)."""
    import openai

    client = sdk_client(base_url, api_key, sync=True)
    try:
        client.batches.list(limit=1)
    except openai.NotFoundError:
        raise BackendError(f"--batch: the server at {where} has no /v1/batches endpoint (vllm serve and llama.cpp "
                           "have none): drop --batch, or write batch files with --batch-dir DIR and run them with "
                           "`vllm run-batch`") from None
    except openai.APIStatusError as exc:
        raise BackendError(redact(f"--batch: the server at {where} refused to list batches: HTTP {exc.status_code}: "
                                  f"{' '.join(exc.response.text.split())[:200]}")) from None
    except openai.APIConnectionError as exc:
        raise BackendError(f"--batch: cannot reach the server at {where} ({exc})") from None
    finally:
        client.close()


class BatchAPIClient(Batcher):
    """Passes answered by a provider's Batch API (`files` and `batches`, through the official SDK).

    A pass writes the questions without an answer to request files on disk as they come (each cut under the API's
    limits); `end_pass` uploads them, creates their batches (recorded in the manifest before any polling), polls
    every batch the pass waits on, downloads the finished ones' results to disk and indexes them by offset; the
    next pass finds its answers there. Memory holds keys, never the requests or the answers."""

    name = "batch-api"
    price_note = "; billed at the provider's batch price (half the online price on the OpenAI Batch API)"

    def __init__(self, base_url: str | None, api_key: str | None, manifest: Manifest, redact: Redactor,
                 progress: bool = True):
        super().__init__(redact, progress)
        self._client = sdk_client(base_url, api_key)
        # Uploading a file and creating a batch are not idempotent (the SDK sends no idempotency key): no retries
        # by the SDK; `_submit` looks a batch up by its input file after any failure before creating it again.
        self._once = self._client.with_options(max_retries=0)
        self.manifest = manifest
        self._scratch = tempfile.TemporaryDirectory(prefix="judge-batch-")
        # Nothing per request is held but in key indexes (judge/backends/keyindex.py): a few dozen bytes each.
        self._results = KeyIndex(3)  # custom_id -> (batch number, result file, offset), the last of a batch wins
        self._result_files: list[Path] = []  # the downloaded output and error files, numbered by position
        self._downloaded: set[str] = set()  # ids of the batches whose results are on disk
        self._waited: dict[int, tuple] = {}  # batch number -> (mine, failure, cancelled): this run waited on it
        self._handed = KeyIndex(1)  # custom_id -> the waited batches whose result for it was handed out
        self._ours: set[int] = set()  # numbers of the batches this run created: how often it sent a request
        self._adopting: asyncio.Future | None = None
        self._submitted: set[str] = set()  # ids of the batches this run created (and pays for)
        self._seen_live: set[str] = set()  # ids of the batches this run saw running
        self._parts: list[list] = []  # this pass's request files: [path, handle, size, count, ids (StreamedFile)]
        self._written = KeyIndex()  # custom_ids written in this pass
        self._deferred = 0  # questions this pass waits for
        self._live: set[str] = set()  # ids of the unfinished batches this pass waits on

    async def aclose(self) -> None:
        for part in self._parts:
            part[1].close()
            part[4].discard()
        self._parts = []
        await self._client.close()
        self._scratch.cleanup()

    def _sends(self, key: str) -> int:
        """How many batches of this run a request went out in."""
        return sum(row[0] in self._ours for row in self.manifest.index.rows(key))

    # -- a pass ------------------------------------------------------------------------------------------------
    async def complete(self, body: dict, timeout: float) -> dict:
        if self._adopting is None:
            self._adopting = asyncio.ensure_future(self._adopt_orphans())
        await asyncio.shield(self._adopting)
        key = request_key(body)
        latest = self.manifest.latest(key)
        number, entry = latest if latest is not None else (None, None)
        if number in self._waited and (number,) not in self._handed.rows(key):
            # a batch this run waited on: its result (or the batch's failure) is handed out once
            self._handed.add(key, number)
            mine, failure, cancelled = self._waited[number]
            result = failure or result_of(await self._record(number, key), self.redact)
            if result is None and cancelled is not None:
                result = cancelled
            elif result is None and self._sends(key) >= MAX_SENDS:
                result = BackendError(f"not answered in {MAX_SENDS} batches (each ended before running it)")
            if result is not None:
                self.settle(result, mine)
                if isinstance(result, Exception):
                    raise result
                return result
            # expired before it ran: sent again, below
        elif entry is not None and entry.get("batch_id"):
            if entry["status"] not in FINAL:  # paid for already: wait for it
                self._live.add(entry["batch_id"])
                self._deferred += 1
                raise Deferred
            answer = result_of(await self._record(number, key), self.redact)
            if isinstance(answer, dict):  # a finished batch's answer, not yet recorded
                self.settle(answer)
                return answer
            # an error or an unanswered request of an earlier run: sent again
        if key not in self._written:
            if self._sends(key) >= MAX_SENDS:
                raise BackendError(f"not answered in {MAX_SENDS} batches (each ended before running it)")
            self._write(key, body)
        self._deferred += 1
        raise Deferred

    def _write(self, key: str, body: dict) -> None:
        from judge.outputs import StreamedFile

        line = (batch_line(key, body) + "\n").encode("utf-8")
        part = self._parts[-1] if self._parts else None
        if part is None or part[3] >= int(MAX_REQUESTS * MARGIN) or part[2] + len(line) > int(MAX_BYTES * MARGIN):
            path = Path(self._scratch.name) / f"requests-{self.rounds + 1}-{len(self._parts) + 1}.jsonl"
            ids = StreamedFile(self.manifest.ids_dir / "next.txt", verb="batch")  # named when its batch is recorded
            part = [path, path.open("wb"), 0, 0, ids]
            self._parts.append(part)
        part[1].write(line)
        part[2] += len(line)
        part[3] += 1
        part[4].write(key + "\n")
        self._written.add(key)

    async def end_pass(self) -> str | None:
        import openai

        try:
            await self._end_pass()
        except openai.APIError as exc:  # the Batch API itself failed (after the SDK's own retries): stop, in a line
            status = getattr(exc, "status_code", None)
            raise ServerUnusable(self.redact(f"the Batch API at {self.manifest.data.get('server')} failed"
                                             f"{f' (HTTP {status})' if status else ''}: {' '.join(str(exc).split())[:300]}"
                                             f"; the batches submitted so far are in {self.manifest.path}")) from None
        return None  # the answers are in: another pass

    async def _end_pass(self) -> None:
        manifest = self.manifest
        entries = [(n, e) for n, e in enumerate(manifest.batches) if e.get("batch_id") in self._live]
        parts, self._parts = self._parts, []
        if parts or entries:
            self.rounds += 1  # a round that waits on batches (answers found in finished ones cost no round)
        for path, handle, _, count, ids in parts:
            handle.close()
            uploaded = await self._upload(f"judge-round{self.rounds}.jsonl", path)
            path.unlink()
            ids.path = manifest.ids_dir / f"{len(manifest.batches):05d}.txt"
            ids.commit()
            entry = {"file_id": uploaded.id, "batch_id": None, "status": "uploaded", "round": self.rounds,
                     "requests": count, "ids": ids.path.name}
            number = manifest.add(entry)
            self._ours.add(number)
            manifest.save()  # before the batch exists: a crash now is adopted on the rerun, not paid twice
            batch = await self._submit(uploaded.id)
            self._submitted.add(batch.id)
            entry.update(batch_id=batch.id, status=batch.status)
            manifest.save()
            entries.append((number, entry))
            self.batches += 1
            self.requests += count
        await self._poll(entries)
        self._written, self._deferred, self._live = KeyIndex(), 0, set()

    # -- the provider's side ------------------------------------------------------------------------------------
    async def _find(self, file_ids: Iterable[str]) -> dict:
        """input file id -> the batch made of it, for those of `file_ids` the provider has a batch of."""
        wanted, found = set(file_ids), {}
        async for batch in self._client.batches.list(limit=100):
            if batch.input_file_id in wanted and batch.input_file_id not in found:
                found[batch.input_file_id] = batch
                if len(found) == len(wanted):
                    break
        return found

    async def _adopt_orphans(self) -> None:
        """A crash between uploading a file and recording its batch: find that batch by its input file."""
        orphans = {b["file_id"]: b for b in self.manifest.batches if not b.get("batch_id")}
        if orphans:
            for file_id, batch in (await self._find(orphans)).items():
                orphans.pop(file_id).update(batch_id=batch.id, status=batch.status)
            for entry in orphans.values():  # uploaded, never submitted: its requests are new
                entry["status"] = "never submitted"
                if "custom_ids" in entry:
                    entry["custom_ids"] = []
            self.manifest.save()

    async def _record(self, number: int, key: str) -> dict | None:
        """The result line of `key` in a finished batch (output and error files, downloaded once, to disk)."""
        entry = self.manifest.batches[number]
        if entry["batch_id"] not in self._downloaded:
            await self._download(number, await self._client.batches.retrieve(entry["batch_id"]))
        mine = [row for row in self._results.rows(key) if row[0] == number]
        return None if not mine else self._read(self._result_files[mine[-1][1]], mine[-1][2])

    @staticmethod
    def _read(path: Path, offset: int) -> dict:
        with path.open("rb") as handle:
            handle.seek(offset)
            return json.loads(handle.readline().decode("utf-8"))

    async def _download(self, number: int, batch) -> None:
        entry = self.manifest.batches[number]
        for kind, file_id in (("error", batch.error_file_id), ("output", batch.output_file_id)):  # answers win
            if not file_id:
                continue
            content = await self._client.files.content(file_id)
            path = Path(self._scratch.name) / f"{entry['batch_id']}-{kind}.jsonl"
            data = content.content
            path.write_bytes(data if data.endswith(b"\n") or not data else data + b"\n")
            del content, data
            self._result_files.append(path)
            where = f"the {kind} file {file_id} of batch {entry['batch_id']}"
            for _, offset, record in _batch_lines(path, cut_ok=True, where=where):  # a cut last line: resent
                if _HEX_KEY.fullmatch(record["custom_id"]):  # any other is none of this run's requests
                    self._results.add(record["custom_id"], number, len(self._result_files) - 1, offset)
        self._downloaded.add(entry["batch_id"])

    async def _upload(self, name: str, path: Path):
        """Upload a batch input file; retried here on a connection error, 429 or 5xx (a file uploaded twice costs
        nothing: only the one a batch is made of is recorded)."""
        import openai

        wait = POLL_FIRST
        for attempt in range(CREATE_ATTEMPTS):
            try:
                with path.open("rb") as handle:
                    return await self._once.files.create(file=(name, handle), purpose="batch")
            except openai.APIError as exc:
                if attempt == CREATE_ATTEMPTS - 1 or not self._worth_retrying(exc):
                    raise
            await asyncio.sleep(wait)
            wait = min(wait * 2, POLL_MAX)

    @staticmethod
    def _worth_retrying(exc) -> bool:
        import openai

        status = getattr(exc, "status_code", None)
        return isinstance(exc, openai.APIConnectionError) or status in (408, 409, 429) or (status or 0) >= 500

    async def _submit(self, file_id: str):
        """Create the batch of an uploaded file, once. The SDK does not retry it: after any failure (the batch may
        exist, its answer lost: a 502, a timeout), the batch is looked up by its input file before it is created
        again. A failure that outlasts the attempts stops the run; the file id is in the manifest, so the rerun
        adopts the batch if it exists."""
        import openai

        wait = POLL_FIRST
        for attempt in range(CREATE_ATTEMPTS):
            try:
                return await self._once.batches.create(input_file_id=file_id, endpoint=ENDPOINT,
                                                       completion_window="24h",
                                                       metadata={"judge_run": self.manifest.data["fingerprint"]})
            except openai.APIError as exc:
                await asyncio.sleep(wait)
                wait = min(wait * 2, POLL_MAX)
                found = (await self._find([file_id])).get(file_id)
                if found is not None:
                    return found  # created after all: adopted, not paid twice
                if attempt == CREATE_ATTEMPTS - 1 or not self._worth_retrying(exc):
                    raise

    async def _poll(self, entries: list[tuple[int, dict]]) -> None:
        wait = POLL_FIRST
        pending = list(entries)
        while pending:
            for number, entry in list(pending):
                batch = await self._client.batches.retrieve(entry["batch_id"])
                counts = batch.request_counts
                entry.update(status=batch.status, completed=counts.completed if counts else None,
                             failed=counts.failed if counts else None)
                if batch.status not in FINAL:
                    self._seen_live.add(batch.id)
                    continue
                pending.remove((number, entry))
                await self._download(number, batch)
                self._finish(number, batch, mine=entry["batch_id"] in self._submitted)
                self.manifest.save()
            if pending:
                done = sum(e.get("completed") or 0 for _, e in entries)
                failed = sum(e.get("failed") or 0 for _, e in entries)
                total = sum(e["requests"] for _, e in entries)
                states = ", ".join(sorted({e["status"] for _, e in pending}))
                self.status.show(f"batch round {self.rounds}: {len(pending)} of {len(entries)} batch(es) {states}; "
                                 f"{done}/{total} requests completed, {failed} failed", f"{self.rounds} {states}")
                await asyncio.sleep(wait)
                wait = min(wait * 2, POLL_MAX)
        self.status.done()

    def _finish(self, number: int, batch, mine: bool) -> None:
        """What the next pass hands out for the requests of a batch this pass waited on: each result once (read
        from disk then), or the batch's failure."""
        failure = cancelled = None
        if batch.status == "failed":
            errors = (batch.errors.data if batch.errors else None) or []
            reasons = "; ".join(f"line {e.line}: {e.message} ({e.code})" if e.line is not None else
                                f"{e.message} ({e.code})" for e in errors[:3]) or "no reason given"
            failure = BackendError(self.redact(f"batch {batch.id} failed validation: {reasons}"))
        elif batch.status == "cancelled" and batch.id in self._seen_live:
            # A batch cancelled while this run polled it was cancelled by someone (`judge batch cancel`, the
            # provider's console): its unanswered requests are recorded as failed, not sent again behind their back;
            # the same command sends them again (a run that finds a batch already cancelled was asked to: it sends
            # them).
            cancelled = BackendError(f"batch {batch.id} was cancelled before this request ran: not sent again; run "
                                     "the same command to send it")
        self._waited[number] = (mine, failure, cancelled)

    def _billing(self) -> str:
        mine, earlier = self.billed["this run"], self.billed["earlier"]
        return (f"this run's batches: {mine[0]} answers, {self._tokens(mine)}; {earlier[0]} answers collected from "
                f"batches submitted earlier ({self._tokens(earlier)}, paid then)")


# -- batch files for any runner -------------------------------------------------------------------------------
DIR_MANIFEST = "batch-manifest.json"


# A line as `batch_line` begins it, with the newline before it: the regex engine then scans for that literal text,
# several times faster than trying `^` (MULTILINE) at every byte of a request file.
_ID_AT_LINE_START = re.compile(rb'\n\{"custom_id":"([0-9a-f]{64})"')
BLOCK = 1 << 20  # bytes read at a time from a request file


def _ids_at_line_starts(path: Path, sha256: str) -> list[str] | None:
    """The custom_id opening each line of a request file, read in blocks with the file's digest in the same pass;
    None unless the digest is `sha256` and every line opens as `batch_line` writes it (one of an older version is
    then read in full). Held for one file at a time, under the API's request limit per file."""
    digest, ids, tail = hashlib.sha256(), [], b"\n"  # the text not searched yet, from the newline before its line
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
            data = tail + block
            cut = data.rfind(b"\n")  # the newline ending the last whole line
            found = _ID_AT_LINE_START.findall(data, 0, cut)
            if len(found) != data.count(b"\n", 0, cut):  # one per whole line
                return None
            ids += found
            tail = data[cut:]
    if tail != b"\n":  # a last line without its newline
        found = _ID_AT_LINE_START.findall(tail)
        if len(found) != 1:
            return None
        ids += found
    if digest.hexdigest() != sha256:
        return None
    return [key.decode("ascii") for key in ids]


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


class BatchDirClient(Batcher):
    """Requests written as OpenAI batch files into a folder, for `vllm run-batch` (or any runner) to answer; the
    same command run again reads the answers.

    It streams: a question with an answer in the folder is answered at once; one without is written to this pass's
    shard files (unless it already waits in one) and `Deferred`, so the engine goes on with the rest of the plan
    and memory never holds the run. The answers are indexed by where they stand in their files (file and offset)
    and read back one at a time. Shards are filled round-robin, so they stay balanced without knowing the total,
    and each is cut into files under the API's limits. When the pass ends with questions deferred, `pending()`
    says what to run."""

    name = "batch-dir"
    answers_at_once = True  # `complete` never waits: it answers from the folder or defers

    def __init__(self, directory: str | Path, shards: int, model: str, fingerprint: str, command: str,
                 redact: Redactor | None = None, progress: bool = True):
        super().__init__(redact, progress)
        self.dir = Path(directory)
        self.shards = shards
        self.model = model
        if self.dir.exists() and not self.dir.is_dir():
            raise OutputError(f"{self.dir}: --batch-dir is a file; give a folder")
        self._check_manifest(fingerprint, command)
        self.fingerprint = fingerprint
        self._keys = None  # this pass's key file (judge/backends/batchkeys.py), when the run keeps one
        self._files: list[Path] = []  # the folder's batch files (inputs and answers), numbered by position
        self._handles: dict[int, object] = {}  # answer files open for reading, by number
        # Indexed by custom_id in a few dozen bytes a request (judge/backends/keyindex.py), not in dicts of strings.
        self.answers = KeyIndex(3)  # custom_id -> (round, file, offset), oldest first
        self.waiting_on = KeyIndex(1)  # custom_id -> input files holding it whose answers are not back, newest last
        self._used = KeyIndex(1)  # custom_id -> round of the error answer handed out (0: written again since)
        self._read_answers()
        self._round = max((self._round_of(p) for p in self._files), default=0) + 1
        self._parts: list = []  # this pass's open shard files (judge.outputs.StreamedFile), in the order opened
        self._writers: list[list[int]] = []  # per shard, the numbers of its files in self._parts
        self._written = KeyIndex()  # custom_ids written in this pass
        self._deferred = 0  # questions this pass waits for
        self._waiting_files: set[int] = set()  # ... in files of earlier runs (and in this pass's)
        self._next = 0  # round-robin over the shards

    def _check_manifest(self, fingerprint: str, command: str) -> None:
        path = self.dir / DIR_MANIFEST
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, ValueError):
                data = None
            if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
                raise OutputError(f"{path}: not a batch manifest written by judge; choose another --batch-dir")
            if data.get("fingerprint") != fingerprint:
                raise OutputError(f"{path}: this folder holds the batch files of another command (`judge "
                                  f"{data.get('command')}` with other items, rubric, criteria, model or decoding); "
                                  "choose another --batch-dir")
            self.manifest = data
            return
        self.manifest = {"kind": MANIFEST_KIND, "version": 1, "command": command, "fingerprint": fingerprint,
                         "model": self.model}

    @staticmethod
    def _round_of(path: Path) -> int:
        head = path.name.split("-", 1)[0]
        return int(head[5:]) if head.startswith("round") and head[5:].isdigit() else 0

    def _number(self, path: Path) -> int:
        self._files.append(path)
        return len(self._files) - 1

    def _read_answers(self) -> None:
        """Index every *.out.jsonl next to the input file it answers; refuse answers this run did not ask for."""
        if not self.dir.is_dir():
            return
        for inp in sorted(self.dir.glob("round*-*.jsonl"), key=lambda p: (self._round_of(p), p.name)):
            if inp.name.endswith(".out.jsonl"):
                continue
            number_in = self._number(inp)
            out = inp.with_name(inp.name.removesuffix(".jsonl") + ".out.jsonl")
            if not out.exists():
                for key in self._asked(inp):
                    self.waiting_on.add(key, number_in)
                continue
            asked = KeyIndex()  # this file's requests: an answer to anything else is refused
            for key in self._asked(inp):
                asked.add(key)
            number_out, round_ = self._number(out), self._round_of(inp)
            for number, offset, record in _batch_lines(out, cut_ok=True):
                key = record["custom_id"]
                if not _HEX_KEY.fullmatch(key) or key not in asked:
                    raise InputError(f"{out}:{number}: custom_id {key[:16]}... is not a request of {inp.name} (an "
                                     "answer file from another run, or renamed): refused; move it away")
                response = record.get("response")
                body = response.get("body") if isinstance(response, dict) else None
                wanted = self.model  # the model this run asks for, not the one written in the file
                if isinstance(body, dict) and body.get("model") not in (None, wanted):
                    raise InputError(f"{out}:{number}: answered by model {body.get('model')!r}, but the request asked "
                                     f"for {wanted!r}: refused; run the file with --model {wanted}")
                self.answers.add(key, round_, number_out, offset)
        for stray in sorted(self.dir.glob("*.out.jsonl")):
            if not stray.with_name(stray.name.removesuffix(".out.jsonl") + ".jsonl").exists():
                raise InputError(f"{stray}: answers a batch file that is not in {self.dir} (from another run?): "
                                 "refused; move it away")

    def _asked(self, inp: Path):
        """The custom_ids of an input file. One this tool wrote and nobody changed since (its digest in the
        folder's registry) holds this run's requests: their ids are read off the start of each line. Any other is
        read in full: each line's custom_id must be its body's key, and its model this run's."""
        from judge.outputs import registered_sha256

        expected = registered_sha256(inp)
        ids = _ids_at_line_starts(inp, expected) if expected else None
        if ids is not None:
            yield from ids
            return
        for number, _, record in _batch_lines(inp, cut_ok=False):
            body = record.get("body")
            if not isinstance(body, dict) or record["custom_id"] != request_key(body):
                raise InputError(f"{inp}:{number}: the request is not the one its custom_id names (the line was "
                                 "edited, or written by another tool): refused; its answer would be recorded "
                                 "for another request: restore the file, or choose another --batch-dir")
            if body.get("model") != self.model:
                raise InputError(f"{inp}:{number}: asks model {body.get('model')!r}, this run asks {self.model!r}: "
                                 "refused; choose another --batch-dir")
            yield record["custom_id"]

    def _record(self, file: int, offset: int) -> dict:
        handle = self._handles.get(file)
        if handle is None:  # kept open: an answer file is read line by line, a million times at most
            handle = self._handles[file] = self._files[file].open("rb")
        handle.seek(offset)
        return json.loads(handle.readline().decode("utf-8"))

    def _answer(self, key: str, waiting: tuple | None, peek: bool = False):
        """The newest answer not handed out already, as `result_of` reads it; None when there is none, or when the
        request was written again since (its answer is still to come). `waiting`: waiting_on's newest row. An
        error is handed out once (`peek`: nothing is marked)."""
        asked_again = self._round_of(self._files[waiting[0]]) if waiting else 0
        used = self._used.last(key)
        for round_, file, offset in reversed(self.answers.rows(key)):
            if round_ < asked_again:
                break
            if round_ > (used[0] if used else 0):
                result = result_of(self._record(file, offset), self.redact)
                if isinstance(result, Exception) and not peek:
                    self._used.add(key, round_)  # an error is given once; a retry writes the request again
                return result
            break
        return None

    async def complete(self, body: dict, timeout: float) -> dict:
        key = request_key(body)
        waiting = self.waiting_on.last(key)
        answer = self._answer(key, waiting)
        if answer is not None:
            self.settle(answer)
            if isinstance(answer, Exception):
                raise answer
            return answer
        if key not in self._written:
            used = self._used.last(key)
            if waiting is None or (used and used[0]):
                self._write(key, body)
            else:
                self._waiting_files.add(waiting[0])
        self._deferred += 1
        raise Deferred(key)

    def answer_to(self, key: str) -> dict | None:
        """The completion `complete` would return for this request now, or None (no answer, or an error, which
        `complete` hands out); nothing is counted or marked."""
        answer = self._answer(key, self.waiting_on.last(key), peek=True)
        return answer if isinstance(answer, dict) else None

    def key_writer(self, identity: str):
        """This pass's key file, committed with its shard files (judge/backends/batchkeys.py)."""
        from judge.backends.batchkeys import KeyWriter

        self._keys = KeyWriter(self.dir, self._round, self.fingerprint, identity)
        return self._keys

    def key_file(self, identity: str):
        """(the folder's newest key file when it is this run's, or None; why not, or "")."""
        from judge.backends.batchkeys import newest

        return newest(self.dir, self.fingerprint, identity)

    def _write(self, key: str, body: dict) -> None:
        """One request line into this pass's next shard (round-robin), a new file when a shard's is full."""
        from judge.outputs import StreamedFile

        line = batch_line(key, body) + "\n"
        if not self._writers:
            self._writers = [[] for _ in range(self.shards)]
        shard = self._writers[self._next % self.shards]  # the numbers of its files in self._parts
        self._next += 1
        if not shard or self._parts[shard[-1]].lines >= int(MAX_REQUESTS * MARGIN) or \
                self._parts[shard[-1]].size + len(line) > int(MAX_BYTES * MARGIN):
            shard.append(len(self._parts))
            self._parts.append(StreamedFile(self.dir / f"round{self._round}", verb="batch"))  # named when committed
        self._parts[shard[-1]].write(line)
        self._written.add(key)
        if key in self._used:
            self._used.add(key, 0)

    async def end_pass(self) -> str | None:
        """At the end of a pass: put this pass's files in place and say what to run (None when nothing waits). A
        pass that wrote requests waits for them: the run stops here, so the new files need no entry in waiting_on."""
        self._waiting_files |= self._commit()
        if not self._deferred:
            return None
        waiting = sorted({self._files[n] for n in self._waiting_files}, key=lambda p: (self._round_of(p), p.name))
        commands = "\n".join(f"  vllm run-batch -i {p} -o {p.with_name(p.name.removesuffix('.jsonl') + '.out.jsonl')}"
                             f" --model {self.model}" for p in waiting)
        return (f"{self._deferred} requests wait in {len(waiting)} batch file(s) in {self.dir}; run each (on any "
                f"node; `vllm run-batch` can be started as `python -m vllm.entrypoints.openai.run_batch`):\n"
                f"{commands}\nthen run this command again to record the answers")

    def _commit(self) -> set[int]:
        """This pass's shard files under their final names, round{R}-{NNN}.jsonl (shard by shard), and the
        manifest's round; the numbers of the files written."""
        from judge.outputs import write_files

        order = [n for shard in self._writers for n in shard]  # shard by shard
        self._writers = []
        keys, self._keys = self._keys, None
        if not order:
            if keys is not None:
                keys.discard()  # nothing new to answer: the newest key file still lists the plan
            return set()
        written, requests, numbers = [], 0, set()
        for name, n in enumerate(order, start=1):
            part = self._parts[n]
            part.path = self.dir / f"round{self._round}-{name:03d}.jsonl"
            part.commit()
            written.append(part.path)
            numbers.add(self._number(part.path))
            requests += part.lines
        if keys is not None:
            keys.commit()
        self._written, self._parts = KeyIndex(), []
        self.manifest.setdefault("rounds", []).append({"round": self._round, "files": [p.name for p in written],
                                                       "requests": requests})
        write_files({self.dir / DIR_MANIFEST: json.dumps(self.manifest, indent=1) + "\n"}, verb="batch")
        self.rounds += 1
        self.batches += len(written)
        self.requests += requests
        self._round += 1
        return numbers

    async def aclose(self) -> None:
        """An interrupted or failed pass: its unfinished shard files are dropped, the answers already read kept."""
        for handle in self._handles.values():
            handle.close()
        self._handles = {}
        for part in self._parts:
            part.discard()
        self._writers, self._parts = [], []
        if self._keys is not None:
            self._keys.discard()
            self._keys = None


# -- opening -----------------------------------------------------------------------------------------------------
DIR_CONCURRENCY = 64  # batch transports answer from disk at once: a small window streams the plan


@contextlib.contextmanager
def open_batch(options):
    """Yield an `Opened` batch transport for --batch or --batch-dir; refuse bad flags before anything is sent."""
    from judge.backends import Opened

    batch_dir, shards = options.batch_dir, options.shards  # their combinations are checked by RunOptions
    flag = "--batch" if options.batch else "--batch-dir"
    if options.backend == "local":
        raise JudgeError(f"{flag}: the embedded llama.cpp server has no Batch API and runs no batch files: use "
                         "--backend openai --base-url URL --model M (a provider's Batch API) or --batch-dir DIR "
                         "--backend vllm --model M (files for `vllm run-batch`)")
    if not options.model:
        raise JudgeError(f"{flag} needs --model (the model name the batches ask for)")
    api_key = os.environ.get(options.api_key_env)
    redact = Redactor(api_key)
    fingerprint = run_fingerprint(options)
    progress = options.progress
    if batch_dir:
        client = BatchDirClient(batch_dir, shards or 1, options.model, fingerprint, options.command, redact, progress)
        yield Opened(client, options.model, options.backend, f"batch files in {batch_dir}", DIR_CONCURRENCY)
        return
    if options.backend != "openai":
        raise JudgeError("--batch: the in-process vLLM engine has no Batch API: write batch files with --batch-dir "
                         "DIR and run them with `vllm run-batch`, or use --backend openai with a provider")
    urls = options.servers
    if len(urls) > 1:
        raise JudgeError("--batch sends to one provider: give one --base-url")
    where = public_url(urls[0], redact)  # what is written down and shown: no credentials
    if not options.output:
        raise JudgeError("--batch needs --output: the batch manifest is kept next to it")
    manifest = Manifest(manifest_path(options.output), fingerprint, options.command, options.model, where)
    check_batch_endpoints(urls[0], api_key, where, redact)
    with _one_run_at_a_time(manifest.path):
        yield Opened(BatchAPIClient(urls[0], api_key, manifest, redact, progress), options.model, "openai", where,
                     DIR_CONCURRENCY)


@contextlib.contextmanager
def _one_run_at_a_time(manifest: Path):
    """Hold OUT.batches.lock while the run submits and polls: the same command started twice at once (two
    terminals, a scheduler) would otherwise submit the same requests twice before either recorded them."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock to take
        yield
        return
    lock = manifest.with_suffix(".lock")
    with open(lock, "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JudgeError(f"{lock}: another judge run is submitting or polling these batches now; wait for it, "
                             "or stop it first (two runs would pay for the same requests twice)") from None
        yield
