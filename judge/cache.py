"""A persistent answer cache in SQLite.

The key is a hash of everything that changes the answer: model, messages, decoding parameters, response
format and sample index. Never the API key or the base URL: credentials are not part of a question, and the
same model behind another address gives the same answer. Only answers that parsed are stored, so a bad
answer is asked again next time instead of being frozen.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import platformdirs


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("llm-judge-rater"))


def request_key(request: dict) -> str:
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
        self._db.execute(
            "INSERT OR REPLACE INTO answers (key, value) VALUES (?, ?)", (key, json.dumps(value, ensure_ascii=False))
        )

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
