"""`--batch-dir DIR`: the rounds of judge/backends/batch.py written as OpenAI batch files for any runner
(`vllm run-batch` on many nodes, Ray Data, other providers), and their answers read back.

A round is written as shard files `roundR-NNN.jsonl` and the run stops (`BatchPending`) saying what to run; the same
command rerun reads every `*.out.jsonl`, and its answers resolve the requests. With the shards a pointwise run writes
`keys-roundR.jsonl` (judge/backends/batchkeys.py): every planned judgment and the requests it asked, so that the
rerun records the answers without reading the items or rendering a prompt.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from judge.backends import batch
from judge.backends.batch import MANIFEST_KIND, _HEX_KEY, Batcher, _batch_lines, batch_line, result_of
from judge.backends.keyindex import KeyIndex
from judge.cache import request_key
from judge.errors import Deferred, InputError, OutputError
from judge.outputs import write_files
from judge.secrets import Redactor

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
        if not shard or self._parts[shard[-1]].lines >= int(batch.MAX_REQUESTS * batch.MARGIN) or \
                self._parts[shard[-1]].size + len(line) > int(batch.MAX_BYTES * batch.MARGIN):
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
