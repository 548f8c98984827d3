"""`--batch`: a provider's Batch API (`files` and `batches`, through the official SDK) answering the rounds of
judge/backends/batch.py.

Before polling, a manifest next to --output (`OUT.batches.json`: file ids, batch ids, the custom_ids of each batch,
the run's fingerprint) records what was paid for. A rerun after a crash, Ctrl-C or reboot finds its requests in the
manifest and polls those batches instead of submitting them again; an answer from a finished batch is used as it
is. A batch that ends `expired` or `cancelled` keeps its answers; only the missing requests go into the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from judge.backends import Completion, batch
from judge.backends.batch import (
    _HEX_KEY,
    ENDPOINT,
    MANIFEST_KIND,
    Batcher,
    _batch_lines,
    batch_line,
    public_url,
    result_of,
)
from judge.backends.keyindex import KeyIndex
from judge.cache import request_key
from judge.errors import BackendError, Deferred, JudgeError, OutputError, ServerUnusable
from judge.outputs import write_files
from judge.secrets import MASK, Redactor

FINAL = ("completed", "expired", "cancelled", "failed")
CREATE_ATTEMPTS = 4  # tries at uploading a file or creating a batch (the SDK's own retries are off for these)
MAX_SENDS = 5  # batches a request may go out in before it is recorded as unanswered
POLL_FIRST = float(os.environ.get("JUDGE_BATCH_POLL_SECONDS", "5"))  # then doubling, up to POLL_MAX
POLL_MAX = max(POLL_FIRST, 60.0)


def manifest_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".batches.json")


class Manifest:
    """What was paid for: the batches of a run (file id, batch id, the file of their custom_ids), next to --output,
    written before any polling so that a rerun resumes instead of paying twice.

    A batch's custom_ids are kept one per line in `OUT.batches.ids/NNNNN.txt`, not in the manifest (a million of
    them made a 70 MB manifest rewritten at every change, and held in memory); `index` maps each to the batches
    holding it (judge/backends/keyindex.py). A manifest written before keeps them in the entry (`custom_ids`)."""

    def __init__(self, path: Path, fingerprint: str, command: str, model: str, where: str):
        self.path = path
        self.ids_dir = path.with_name(path.name.removesuffix(".json") + ".ids")
        self.data: dict[str, Any] = {"kind": MANIFEST_KIND, "version": 1, "command": command,
                                     "fingerprint": fingerprint, "model": model, "server": where, "batches": []}
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
    async def complete(self, body: dict, timeout: float) -> Completion:
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
        elif number is not None and entry is not None and entry.get("batch_id"):
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
        if (part is None or part[3] >= int(batch.MAX_REQUESTS * batch.MARGIN)
                or part[2] + len(line) > int(batch.MAX_BYTES * batch.MARGIN)):
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
                                             f"{f' (HTTP {status})' if status else ''}: "
                                             f"{' '.join(str(exc).split())[:300]}"
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
        async for made in self._client.batches.list(limit=100):
            if made.input_file_id in wanted and made.input_file_id not in found:
                found[made.input_file_id] = made
                if len(found) == len(wanted):
                    break
        return found

    async def _adopt_orphans(self) -> None:
        """A crash between uploading a file and recording its batch: find that batch by its input file."""
        orphans = {b["file_id"]: b for b in self.manifest.batches if not b.get("batch_id")}
        if orphans:
            for file_id, made in (await self._find(orphans)).items():
                orphans.pop(file_id).update(batch_id=made.id, status=made.status)
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


@contextlib.contextmanager
def one_run_at_a_time(manifest: Path):
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
