"""The judgments table: one row per judgment, the one frame every statistics verb takes.

`judgments_table` is the only place judgments become a DataFrame: `judge.score`/`judge.compare` return it,
`judge.judgments_frame` reads it from a file, and `calibration` loads a judgments JSONL through it, so a frame from
the API goes into `calibrate`, `screen`, `estimate`, `audit`, `drift` and `select` unchanged.

Columns (TABLE_COLUMNS): the key `item_id, system, criterion`; `score` (a number only when `status` is "ok": N/A,
abstentions and failures are never a number), `label`, `status` (ok, label, na, error, abstain), `line` (in the
file; the position in the list otherwise); `system_1, system_2` (a pair's systems); `rubric, model`; what some verbs
need beyond the verdict: `samples` (the re-asks' scores; empty for per-segment criteria, whose per-segment scores
are not re-asks), `spread`, `probs`, `position` (block mode's letter), `forward`/`swapped` (a pair's verdict in each
order), `order_disagreement`, `fingerprint`, `from_cache`, `served`, `demonstration` (a label of the dialogue is
a demonstration in the rubric: `judge tune`); and for people reading it, `explanation` and
`error`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from judge.judgment import Judgment

TABLE_COLUMNS = ["item_id", "system", "criterion", "score", "label", "status", "line", "system_1", "system_2",
                 "rubric", "model", "samples", "spread", "probs", "position", "forward", "swapped",
                 "order_disagreement", "fingerprint", "from_cache", "served", "explanation", "error", "demonstration"]


def row_of(judgment: Judgment, line: int) -> dict:
    status = judgment.status
    first, second = judgment.system_1, judgment.system_2
    if not judgment.is_pair and "|" in judgment.system:
        first, _, second = judgment.system.partition("|")  # files written before system_1 / system_2
    orders = judgment.orders or {}
    return {
        "item_id": judgment.id, "system": judgment.system, "criterion": judgment.criterion,
        "score": judgment.score if status == "ok" else float("nan"), "label": judgment.label, "status": status,
        "line": line, "system_1": first, "system_2": second, "rubric": judgment.rubric, "model": judgment.model,
        "samples": list(judgment.samples) if judgment.segments is None else [], "spread": judgment.spread,
        "probs": judgment.probs, "position": judgment.position, "forward": orders.get("forward"),
        "swapped": orders.get("swapped"), "order_disagreement": judgment.order_disagreement,
        "fingerprint": judgment.fingerprint, "from_cache": bool(judgment.from_cache), "served": judgment.served,
        "explanation": judgment.explanation, "error": judgment.error,
        "demonstration": bool(judgment.demonstration),
    }


def judgments_table(source: str | Path | Iterable[Judgment] | Iterable[tuple[int, Judgment]]) -> pd.DataFrame:
    """The table of a judgments JSONL file (rows numbered by line; `attrs["path"]` names it) or of judgments
    (typed, or (line, judgment) pairs as judge.judgment.read_judgments yields them)."""
    import pandas as pd

    from judge.judgment import read_judgments

    path: Path | None = None
    numbered: Iterable[tuple[int, Judgment]]
    if isinstance(source, (str, Path)):
        path = Path(source)
        numbered = read_judgments(path)
    else:
        numbered = (item if isinstance(item, tuple) else (index, item) for index, item in enumerate(source, start=1))
    frame = pd.DataFrame([row_of(judgment, line) for line, judgment in numbered], columns=TABLE_COLUMNS)
    if path is not None:
        frame.attrs["path"] = str(path)  # the statistics verbs find a study's own rubric beside it
    return frame
