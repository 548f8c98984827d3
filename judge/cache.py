"""A persistent answer cache in SQLite.

The key is a hash of everything that changes the answer: model, messages, decoding parameters, response
format and sample index. Never the API key or the base URL: credentials are not part of a question, and the
same model behind another address gives the same answer. Only answers that parsed are stored, so a bad
answer is asked again next time instead of being frozen.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from json.encoder import encode_basestring
from pathlib import Path

import platformdirs


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("llm-judge-rater"))


# The canonical JSON of a request: sorted keys, compact, UTF-8 as it is. The cache key hashes it, so it never changes.
_canonical = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode
SHARED_PARTS = 256  # encodings of repeated parts (system prompts, response formats) kept by one Encoder


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_key(request: dict) -> str:
    if isinstance(request, Request):
        return request.key
    return _key(_canonical(request))


class Request(dict):
    """A chat request body encoded once: `text` is its canonical JSON, which the cache key hashes, a batch line
    holds and the HTTP client sends; `key` is its request_key. Made by `Encoder.request` in the asking layer, which
    never changes a body once made (a changed body would keep the old text and key)."""

    __slots__ = ("text", "key")
    text: str
    key: str


class Encoder:
    """Canonical JSON of request bodies, equal to `json.dumps(body, sort_keys=True, ensure_ascii=False,
    separators=(",", ":"))`, with what every request of a run repeats (the system prompt, the response format)
    encoded once: a request then costs the encoding of its own text only."""

    def __init__(self):
        self._shared: dict[int, tuple[object, str]] = {}  # id -> (the object, kept alive so the id stays its, text)
        self._strings: dict[str, str] = {}  # names, roles, the model: the same few strings in every request

    def shared(self, value) -> str:
        """The encoding of a part that the next requests will repeat, the very same object."""
        hit = self._shared.get(id(value))
        if hit is None or hit[0] is not value:
            if len(self._shared) >= SHARED_PARTS:
                self._shared.clear()
            hit = self._shared[id(value)] = (value, _canonical(value))
        return hit[1]

    def scalar(self, value) -> str:
        """A key's name or a setting's value (model, temperature, seed, max_tokens), as json writes it, without
        the encoder's per-call setup: a few values repeated in every request."""
        kind = type(value)
        if kind is str:
            text = self._strings.get(value)
            if text is None:
                if len(self._strings) >= SHARED_PARTS:
                    self._strings.clear()
                text = self._strings[value] = _canonical(value)
            return text
        if kind is int or (kind is float and math.isfinite(value)):
            return repr(value)  # what json writes for an int (not a bool: its type is not int) or a finite float
        return _canonical(value)

    def _message(self, message, out: list) -> None:
        content, role = message.get("content"), message.get("role")
        if len(message) != 2 or type(content) is not str or type(role) is not str:
            out.append(_canonical(message))
            return
        # A system prompt repeats; a str is encoded by the very function _canonical uses (ensure_ascii=False).
        out += ('{"content":', self.shared(content) if role == "system" else encode_basestring(content),
                ',"role":', self.scalar(role), "}")

    def text(self, body: dict) -> str:
        out: list[str] = []  # every piece, joined once: a request's text is copied once, not at every level
        for name in sorted(body):
            value = body[name]
            out += (",", self.scalar(name), ":")
            if name == "messages" and type(value) is list:
                out.append("[")
                for number, message in enumerate(value):
                    if number:
                        out.append(",")
                    if type(message) is dict:
                        self._message(message, out)
                    else:
                        out.append(_canonical(message))
                out.append("]")
            elif name == "response_format" and isinstance(value, dict):
                out.append(self.shared(value))
            else:
                out.append(self.scalar(value))
        if not out:
            return "{}"
        out[0] = "{"
        out.append("}")
        return "".join(out)

    def request(self, body: dict) -> Request:
        request = Request(body)
        request.text = self.text(body)
        request.key = _key(request.text)
        return request


class AnswerCache:
    def __init__(self, directory: str | Path):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "answers.sqlite"
        # autocommit: each answer is durable at once. Opened in the caller's thread, used by the engine's, which is
        # another one inside a running event loop (judge.engine.run_coroutine); never by two at once.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def get(self, key: str) -> dict | None:
        row = self._db.execute("SELECT value FROM answers WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict) -> None:
        try:
            self._db.execute("INSERT OR REPLACE INTO answers (key, value) VALUES (?, ?)",
                             (key, json.dumps(value, ensure_ascii=False)))
        except sqlite3.Error as exc:  # a full disk: the run stops, judgments written so far are kept
            from judge.errors import OutputError

            raise OutputError(f"{self.path}: the answer cache (--cache) cannot be written ({exc}); free space, "
                              "give --cache another folder, or run with --no-cache") from None

    def close(self) -> None:
        self._db.close()


class RefreshCache(AnswerCache):
    """Used with --refresh: every question goes to the model now; its fresh answers replace the stored ones.

    A run meant to measure the model (drift's anchor set re-judged) must not be answered from an earlier run: the
    cache key names the model, not what serves it, so a server that now serves another model under the same name
    would otherwise look unchanged."""

    def get(self, key: str) -> dict | None:
        return None


class NoCache:
    """Used with --no-cache."""

    def get(self, key: str) -> dict | None:
        return None

    def put(self, key: str, value: dict) -> None:
        pass

    def close(self) -> None:
        pass
