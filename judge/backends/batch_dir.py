"""`--batch-dir DIR`: the rounds of judge/backends/batch.py written as OpenAI batch files for any runner
(`vllm run-batch` on many nodes, Ray Data, other providers), and their answers read back.

A round is written as shard files `roundR-NNN.jsonl` and the run stops (`BatchPending`) saying what to run; the same
command rerun reads every `*.out.jsonl`, and its answers resolve the requests. With the shards a pointwise run writes
`keys-roundR.jsonl` (judge/backends/batchkeys.py): every planned judgment and the requests it asked, so that the
rerun records the answers without reading the items or rendering a prompt.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from judge.backends import PREFIX_GROUP, Completion, batch
from judge.backends.batch import _HEX_KEY, MANIFEST_KIND, Batcher, _batch_lines, batch_line, result_of
from judge.backends.keyindex import KeyIndex
from judge.cache import request_key
from judge.errors import Deferred, InputError, OutputError
from judge.outputs import write_files
from judge.secrets import Redactor

if TYPE_CHECKING:
    from judge.backends.batchkeys import KeyWriter

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
    and read back one at a time. A pass's requests wait in a spool file (`_Spool`) until the pass ends; then whole
    prefix groups (every request about one (criterion, dialogue)) are dealt to the shards, largest first into the
    lightest, so a node prefills each dialogue once and the shards stay balanced; each shard is cut into files
    under the API's limits. When the pass ends with questions deferred, `end_pass` says what to run."""

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
        self._keys: KeyWriter | None = None  # this pass's key file (judge/backends/batchkeys.py), if the run keeps one
        self._files: list[Path] = []  # the folder's batch files (inputs and answers), numbered by position
        self._handles: dict[int, IO[bytes]] = {}  # answer files open for reading, by number
        # Indexed by custom_id in a few dozen bytes a request (judge/backends/keyindex.py), not in dicts of strings.
        self.answers = KeyIndex(3)  # custom_id -> (round, file, offset), oldest first
        self.waiting_on = KeyIndex(1)  # custom_id -> input files holding it whose answers are not back, newest last
        self._used = KeyIndex(1)  # custom_id -> round of the error answer handed out (0: written again since)
        self._read_answers()
        self._round = max((self._round_of(p) for p in self._files), default=0) + 1
        self._spool: _Spool | None = None  # this pass's request lines, dealt to the shards when it ends
        self._parts: list = []  # the shard files being written at the end of a pass (judge.outputs.StreamedFile)
        self._written = KeyIndex()  # custom_ids written in this pass
        self._deferred = 0  # questions this pass waits for
        self._waiting_files: set[int] = set()  # ... in files of earlier runs (and in this pass's)
        self._answered_files: set[int] = set()  # input files waited on whose answers came in during this run
        self.shard_groups: dict[str, int] = {}  # the newest round's files -> prefix groups each holds

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
                if isinstance(body, dict) and body.get("model") not in (None, wanted) and \
                        not str(body.get("model")).startswith(f"{wanted}-"):  # a hosted API's dated version
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

    def _answer(self, key: str, waiting: tuple | None, peek: bool = False) -> Completion | Exception | None:
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

    async def complete(self, body: dict, timeout: float) -> Completion:
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
            if waiting is None or (used and used[0]) or waiting[0] in self._answered_files:
                self._write(key, body)
            else:
                self._waiting_files.add(waiting[0])
        self._deferred += 1
        raise Deferred(key)

    def answer_to(self, key: str) -> Completion | None:
        """The completion `complete` would return for this request now, or None (no answer, or an error, which
        `complete` hands out); nothing is counted or marked."""
        answer = self._answer(key, self.waiting_on.last(key), peek=True)
        return answer if isinstance(answer, dict) else None

    def key_writer(self, identity: str) -> KeyWriter:
        """This pass's key file, committed with its shard files (judge/backends/batchkeys.py)."""
        from judge.backends.batchkeys import KeyWriter

        self._keys = KeyWriter(self.dir, self._round, self.fingerprint, identity)
        return self._keys

    def key_file(self, identity: str):
        """(the folder's newest key file when it is this run's, or None; why not, or "")."""
        from judge.backends.batchkeys import newest

        return newest(self.dir, self.fingerprint, identity)

    def _write(self, key: str, body: dict) -> None:
        """One request line into this pass's spool, under its prefix group (the engine's PREFIX_GROUP; a request
        without one is a group of its own)."""
        if self._spool is None:
            self._spool = _Spool(self.dir)
        self._spool.add(PREFIX_GROUP.get() or key, batch_line(key, body) + "\n")
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
                             f" --model {self.model}{self._groups_note(p)}" for p in waiting)
        return (f"{self._deferred} requests wait in {len(waiting)} batch file(s) in {self.dir}; run each (on any "
                f"node; `vllm run-batch` can be started as `python -m vllm.entrypoints.openai.run_batch`):\n"
                f"{commands}\nthen run this command again to record the answers")

    def _groups_note(self, path: Path) -> str:
        groups = self.shard_groups.get(path.name)
        return "" if groups is None else f"   # {groups} prefix group(s)"

    def _commit(self) -> set[int]:
        """This pass's requests dealt to the shards by prefix group and written as round{R}-{NNN}.jsonl (shard by
        shard, each cut under the API's limits), and the manifest's round; the numbers of the files written."""
        spool, self._spool = self._spool, None
        keys, self._keys = self._keys, None
        if spool is None:
            if keys is not None:
                keys.discard()  # nothing new to answer: the newest key file still lists the plan
            return set()
        try:
            files, groups = self._deal(spool)
        finally:
            spool.discard()
        written, requests, numbers = [], 0, set()
        self.shard_groups = {}
        for name, (part, held) in enumerate(zip(files, groups), start=1):
            part.path = self.dir / f"round{self._round}-{name:03d}.jsonl"
            part.commit()
            written.append(part.path)
            numbers.add(self._number(part.path))
            requests += part.lines
            self.shard_groups[part.path.name] = held
        self._parts = []
        if keys is not None:
            keys.commit()
        self._written = KeyIndex()
        self.manifest.setdefault("rounds", []).append({"round": self._round, "files": [p.name for p in written],
                                                       "requests": requests,
                                                       "prefix_groups": [self.shard_groups[p.name] for p in written]})
        write_files({self.dir / DIR_MANIFEST: json.dumps(self.manifest, indent=1) + "\n"}, verb="batch")
        self.rounds += 1
        self.batches += len(written)
        self.requests += requests
        self._round += 1
        return numbers

    def _deal(self, spool: _Spool) -> tuple[list, list[int]]:
        """The spool's lines written into shard files, whole groups per shard (`_Spool.deal`); (the files, shard by
        shard, and the prefix groups each holds, a group cut by a file limit counted in both files)."""
        from judge.outputs import StreamedFile

        shard_of = spool.deal(self.shards)
        per_shard: list[list] = [[] for _ in range(max(shard_of, default=-1) + 1)]
        held: list[list[set]] = [[] for _ in per_shard]
        limit_lines, limit_bytes = int(batch.MAX_REQUESTS * batch.MARGIN), int(batch.MAX_BYTES * batch.MARGIN)
        for group, line in spool.lines():
            shard = shard_of[group]
            files = per_shard[shard]
            size = len(line.encode("utf-8"))
            if not files or files[-1].lines >= limit_lines or files[-1].size + size > limit_bytes:
                files.append(StreamedFile(self.dir / f"round{self._round}", verb="batch"))  # named when committed
                self._parts.append(files[-1])
                held[shard].append(set())
            files[-1].write(line)
            held[shard][-1].add(group)
        order = [(part, len(groups)) for files, sets in zip(per_shard, held) for part, groups in zip(files, sets)]
        return [part for part, _ in order], [n for _, n in order]

    async def aclose(self) -> None:
        """An interrupted or failed pass: its unfinished shard files are dropped, the answers already read kept."""
        for handle in self._handles.values():
            handle.close()
        self._handles = {}
        for part in self._parts:
            part.discard()
        self._parts = []
        if self._spool is not None:
            self._spool.discard()
            self._spool = None
        if self._keys is not None:
            self._keys.discard()
            self._keys = None


class _Spool:
    """A pass's request lines in the order asked, each under its prefix group, kept in a hidden file of the batch
    folder until the pass ends: only then are the groups' sizes known, so that whole groups can be dealt to the
    shards. Memory holds one entry per group, not per request."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        handle, self.path = tempfile.mkstemp(prefix=".spool.", suffix=".tmp", dir=directory)
        self.handle = os.fdopen(handle, "w+", encoding="utf-8", newline="\n", buffering=1 << 20)
        self.index: dict[str, int] = {}  # group -> its number
        self.sizes: list[int] = []  # requests per group

    def add(self, group: str, line: str) -> None:
        number = self.index.get(group)
        if number is None:
            number = self.index[group] = len(self.sizes)
            self.sizes.append(0)
        self.sizes[number] += 1
        self.handle.write(f"{number}\t{line}")

    def deal(self, shards: int) -> list[int]:
        """Each group's shard: largest group first into the lightest shard (ties: the first shard), so the largest
        shard exceeds the smallest by at most one group. Fewer groups than shards make fewer shards."""
        count = min(shards, len(self.sizes))
        loads = [(0, shard) for shard in range(count)]
        shard_of = [0] * len(self.sizes)
        for group in sorted(range(len(self.sizes)), key=lambda g: -self.sizes[g]):  # stable: first asked first
            load, shard = heapq.heappop(loads)
            shard_of[group] = shard
            heapq.heappush(loads, (load + self.sizes[group], shard))
        return shard_of

    def lines(self):
        """(group number, line) in the order written."""
        self.handle.flush()
        self.handle.seek(0)
        for record in self.handle:
            number, _, line = record.partition("\t")
            yield int(number), line

    def discard(self) -> None:
        self.handle.close()
        Path(self.path).unlink(missing_ok=True)
