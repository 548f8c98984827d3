"""Request keys (the 64 hex digits of judge.cache.request_key, a batch line's custom_id) mapped to rows of integers,
in a few bytes each: the batch transports' bookkeeping for a million requests without holding a million strings.

A key is kept as its first 128 bits (two unsigned 64-bit ints: two keys that share them are as likely as two
random 128-bit numbers being equal). Rows live in sorted arrays (array.array: 16 bytes a row plus 8 a column) that
lookups bisect, and the rows added since the last merge in a small dict; the dict is merged into the arrays (a
stable numpy sort) when it holds TAIL rows, so memory stays a few dozen bytes a row. A key's rows come back in the
order they were added.
"""

from __future__ import annotations

import bisect
from array import array

TAIL = 65_536  # rows held in the dict before a merge into the sorted arrays


def split(key: str) -> tuple[int, int]:
    """A request key as (first 64 bits, next 64 bits)."""
    return int(key[:16], 16), int(key[16:32], 16)


class KeyIndex:
    """key -> rows of `columns` ints each (none: a set of keys)."""

    def __init__(self, columns: int = 0):
        self.columns = columns
        self._hi, self._lo = array("Q"), array("Q")
        self._values = [array("q") for _ in range(columns)]
        self._tail: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        self._tail_rows = 0

    def __len__(self) -> int:
        return len(self._hi) + self._tail_rows

    def add(self, key: str, *values: int) -> None:
        if len(values) != self.columns:
            raise ValueError(f"{self.columns} values per row, got {len(values)}")
        self._tail.setdefault(split(key), []).append(values)
        self._tail_rows += 1
        if self._tail_rows >= TAIL:
            self._merge()

    def rows(self, key: str) -> list[tuple[int, ...]]:
        # A fresh run's indexes are empty, and each request asks several: len(self) inline, without a method call.
        if not (self._tail_rows or self._hi):
            return []
        hi, lo = split(key)
        found = []
        start = bisect.bisect_left(self._hi, hi)
        end = bisect.bisect_right(self._hi, hi, lo=start)
        for n in range(start, end):
            if self._lo[n] == lo:
                found.append(tuple(column[n] for column in self._values))
        return found + self._tail.get((hi, lo), [])

    def __contains__(self, key: str) -> bool:
        if not (self._tail_rows or self._hi):
            return False
        hi, lo = split(key)
        if (hi, lo) in self._tail:
            return True
        start = bisect.bisect_left(self._hi, hi)
        end = bisect.bisect_right(self._hi, hi, lo=start)
        return end > start and any(self._lo[n] == lo for n in range(start, end))

    def last(self, key: str) -> tuple[int, ...] | None:
        """The row added last for `key`, or None."""
        rows = self.rows(key)
        return rows[-1] if rows else None

    def _merge(self) -> None:
        import numpy as np

        pairs = list(self._tail.items())
        counts = [len(rows) for _, rows in pairs]
        hi = np.fromiter((k[0] for k, rows in pairs for _ in rows), dtype=np.uint64, count=self._tail_rows)
        lo = np.fromiter((k[1] for k, rows in pairs for _ in rows), dtype=np.uint64, count=self._tail_rows)
        hi = np.concatenate([np.frombuffer(self._hi, dtype=np.uint64), hi])
        lo = np.concatenate([np.frombuffer(self._lo, dtype=np.uint64), lo])
        columns = []
        for c in range(self.columns):
            tail = np.fromiter((row[c] for _, rows in pairs for row in rows), dtype=np.int64, count=sum(counts))
            columns.append(np.concatenate([np.frombuffer(self._values[c], dtype=np.int64), tail]))
        order = np.lexsort((lo, hi))  # stable: a key's older rows (the arrays, then the dict's in order) first
        self._hi, self._lo = array("Q", hi[order].tobytes()), array("Q", lo[order].tobytes())
        self._values = [array("q", column[order].tobytes()) for column in columns]
        self._tail, self._tail_rows = {}, 0
