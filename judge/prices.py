"""What a run cost: the token bill priced by a table the user gives (never fetched: prices change, and a number
from last month's page would be stated as fact).

A price file (JSON or YAML) maps a model name, as the run sends it (`--model`), or "*" for any other, to prices per
million tokens in the user's currency:

    {"gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.60, "batch_discount": 0.5},
     "*": {"input": 0, "output": 0}}

`cached_input` (prompt tokens the server's prefix cache served) defaults to `input`; `batch_discount` (the factor a
Batch API bills at) to 1. `batch_cache_stack` says whether the provider applies both discounts to one request: when
false (the default) a batch bills cached prompt tokens at the batch price of `input`, without the cache discount; set
it true for a provider whose cached-prompt price is also halved in a batch. The tokens are those the run was billed
for: answers from the answer cache cost nothing and are not counted; retried and re-asked requests are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.errors import JudgeError

PRICE_FIELDS = ("input", "cached_input", "output", "batch_discount", "batch_cache_stack")


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float | None = None
    batch_discount: float = 1.0
    batch_cache_stack: bool = False  # whether the cache discount also applies within a batch

    def cost(self, prompt: int, cached: int, completion: int, batch: bool) -> float:
        cached_price = self.input if self.cached_input is None else self.cached_input
        if batch and not self.batch_cache_stack:  # the batch discount instead of the cache's, not on top of it
            cached_price = self.input
        total = ((prompt - cached) * self.input + cached * cached_price + completion * self.output) / 1e6
        return total * (self.batch_discount if batch else 1.0)


def load_prices(path: str | Path) -> dict[str, Price]:
    """The price table of `path`; JudgeError naming the file and the entry that is wrong."""
    from judge.resources import read_text

    path = Path(path)
    text = read_text(path, JudgeError)
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            import json

            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error: one line naming the file
        raise JudgeError(f"{path}: not a price table ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict) or not data:
        raise JudgeError(f"{path}: a price table maps model names (or \"*\") to prices per million tokens, e.g. "
                         '{"my-model": {"input": 0.15, "output": 0.6}}')
    table = {}
    for model, entry in data.items():
        where = f"{path}: {model!r}"
        if not isinstance(entry, dict):
            raise JudgeError(f"{where}: give its prices as an object with input and output per million tokens")
        unknown = sorted(set(entry) - set(PRICE_FIELDS))
        if unknown:
            raise JudgeError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(PRICE_FIELDS)})")
        for name in ("input", "output"):
            if name not in entry:
                raise JudgeError(f"{where}: needs {name!r} (price per million tokens)")
        if not isinstance(entry.get("batch_cache_stack", False), bool):
            raise JudgeError(f"{where}: batch_cache_stack must be true or false, got {entry['batch_cache_stack']!r}")
        for name, value in entry.items():
            if name == "batch_cache_stack":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise JudgeError(f"{where}: {name} must be a number at least 0, got {value!r}")
        if entry.get("batch_discount", 1.0) > 1:
            raise JudgeError(f"{where}: batch_discount is the factor a batch is billed at (0.5 = half), at most 1")
        fields: dict[str, Any] = {k: v if k == "batch_cache_stack" else float(v) for k, v in entry.items()}
        table[str(model)] = Price(**fields)
    return table


def price_of(table: dict[str, Price], model: str, path: str | Path) -> Price:
    if model in table:
        return table[model]
    if "*" in table:
        return table["*"]
    raise JudgeError(f"{path}: no price for model {model!r} (add it, or a \"*\" entry)")
