"""--batch-dir's key files: what each planned judgment asked, so that the run reading the answers back records them
without reading the items again, rendering a prompt or encoding a request.

`keys-roundR.jsonl` is written with round R's shard files, committed and discarded with them, by a pointwise run
whose items come from its --input file. Its first line names the run: the folder's fingerprint (the batch
manifest's: items' bytes, rubric, templates, model, decoding) and the judgments' identity (the tool's version and the
fingerprint parts of every criterion). Then one line per planned judgment of that run's pass, a JSON array:

    [id, system, criterion, item digest]                                  done, failed, or asked otherwise (a gate)
    [id, system, criterion, item digest, prompt_sha, [custom_id, ...]]    one plain question per sample, deferred

so it lists the whole plan, each judgment with its fingerprint (the run's parts and the item's digest): the reading
run knows every judgment it must find done or record. A key file is used only when it is proven ours (its digest in
the folder's registry) and names this very run; otherwise each answer is matched by rendering its request again, as
without one. A judgment whose answers are not all good completions here (missing, an error, unparseable, cut off)
is left to that full path, which waits, retries, re-asks or records the failure.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from pathlib import Path
from typing import TYPE_CHECKING

from judge.errors import InputError
from judge.judgment import digest

if TYPE_CHECKING:
    from judge.outputs import StreamedFile

KIND = "llm-judge-rater batch keys"
PREFIX = "keys-round"
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _line(fields: list, custom_ids: list | None) -> str:
    """A record as `_dumps` writes it, joined here when every value is text (as they always are: ids, criterion and
    hex digests): a judgment's line without the general encoder's setup. `encode_basestring` is the very function
    `_dumps` encodes a str with (ensure_ascii=False)."""
    texts = fields if custom_ids is None else fields + custom_ids
    if any(type(t) is not str for t in texts):
        return _dumps(fields if custom_ids is None else [*fields, custom_ids])
    line = ",".join(map(encode_basestring, fields))
    if custom_ids is None:
        return f"[{line}]"
    return f"[{line},[{','.join(map(encode_basestring, custom_ids))}]]"


def identity(judge, criteria) -> str:
    """What the judgments' fingerprints take from the run (everything but the item): equal for equal runs."""
    from judge import __version__

    return digest([__version__, judge.fingerprint_parts(criteria)])


def _round(path: Path) -> int:
    number = path.name[len(PREFIX):].removesuffix(".jsonl")
    return int(number) if number.isdigit() else -1


class KeyWriter:
    """This pass's key file, opened at its first record (judge.outputs.StreamedFile: a temporary file until the
    round's shard files are committed)."""

    def __init__(self, directory: Path, round_: int, fingerprint: str, identity: str):
        self.path = directory / f"{PREFIX}{round_}.jsonl"
        self.header = {"kind": KIND, "version": 1, "fingerprint": fingerprint, "identity": identity}
        self._part: StreamedFile | None = None

    def add(self, key: tuple[str, str, str], item_digest: str, asked: tuple[str, list[str]] | None = None) -> None:
        if self._part is None:
            from judge.outputs import StreamedFile

            self._part = StreamedFile(self.path, verb="batch")
            self._part.write(_dumps(self.header) + "\n")
        if asked is None:
            self._part.write(_line([*key, item_digest], None) + "\n")
        else:
            self._part.write(_line([*key, item_digest, asked[0]], list(asked[1])) + "\n")

    def commit(self) -> None:
        if self._part is not None:
            self._part.commit()
            self._part = None

    def discard(self) -> None:
        if self._part is not None:
            self._part.discard()
            self._part = None


class KeyFile:
    """The records of a key file, read anew at each iteration (a run walks them twice: against the results file,
    then to record), as lists (see the module's docstring)."""

    def __init__(self, path: Path):
        self.path = path

    def __len__(self) -> int:
        """The planned judgments (its lines but the header), counted without reading them."""
        with self.path.open("rb") as handle:
            return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b"")) - 1

    def __iter__(self):
        with self.path.open("rb") as handle:
            next(handle, None)  # the header
            for number, line in enumerate(handle, start=2):
                try:
                    record = json.loads(line)
                    if not (isinstance(record, list) and len(record) in (4, 6)):
                        raise ValueError
                except ValueError:
                    raise InputError(f"{self.path}:{number}: not a key record; move the file away (each answer is "
                                     "then matched by rendering its request again)") from None
                yield record


def newest(directory: Path, fingerprint: str, run_identity: str) -> tuple[KeyFile | None, str]:
    """The folder's newest key file when it belongs to this run, else None and why not ("" when there is none)."""
    from judge.outputs import is_ours

    paths = sorted(directory.glob(f"{PREFIX}*.jsonl"), key=_round) if directory.is_dir() else []
    if not paths:
        return None, ""
    path = paths[-1]
    fallback = "each answer is matched by rendering its request again (slower; the judgments are the same)"
    if not is_ours(path):
        return None, f"{path}: edited since judge wrote it (or the folder's registry is lost): not used; {fallback}"
    try:
        with path.open("rb") as handle:
            header = json.loads(handle.readline())
    except (OSError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("kind") != KIND or header.get("fingerprint") != fingerprint:
        return None, f"{path}: not the key file of this folder's run: not used; {fallback}"
    if header.get("identity") != run_identity:
        return None, (f"{path}: written by another run of this folder (another version of judge, other criteria, or "
                      f"items given in code): not used; {fallback}")
    return KeyFile(path), ""
