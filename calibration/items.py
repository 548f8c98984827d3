"""The items reader for statistics: each candidate's length in the unit that fits its language, and its text.
Used by audit (length bias) and the pairwise estimator (style control)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from .errors import CalibrationError


def read_items(items) -> pd.DataFrame:
    """(item_id, system, words, text) for every candidate of the items: single candidates and both sides of pairs
    (the text for pairwise style control's markdown counts).

    `words` is the candidate's length in the unit that fits its language (`attrs["length_unit"]`: characters when
    most of the text is Chinese, Japanese or Korean, which put no spaces between words; words otherwise). An empty
    candidate the judge rated is length 0, counted in `attrs["empty"]`, not bad input: items are read for their
    lengths, not judged again. `attrs["judged_keys"]` holds every (item_id, judged system) the file defines, pairs'
    "A|B" keys included (one dialogue may carry every pair of its systems)."""
    from judge.errors import JudgeError
    from judge.items import Item, _records

    if isinstance(items, (str, Path)):
        try:
            records = [(f"{items}:{number}", record) for number, record in _records(Path(items))]
        except JudgeError as exc:
            raise CalibrationError(str(exc)) from None
    else:
        rows = items.to_dict("records") if isinstance(items, pd.DataFrame) else list(items)
        records = [(f"--items row {n}", r) for n, r in enumerate(rows, start=1)]
    loaded = []
    for where, record in records:
        record = {k: v for k, v in record.items() if not _missing(v)}
        # Lengths are all the audit needs: an empty candidate or dialogue is measured (0), not refused.
        texts = {k: record[k] for k in ("candidate", "candidate_1", "candidate_2") if isinstance(record.get(k), str)}
        placeholder = {k: v if v.strip() else "-" for k, v in texts.items()}
        if not str(record.get("dialogue", "")).strip():
            placeholder["dialogue"] = "-"
        try:
            item = Item.model_validate({**record, **placeholder})
        except Exception as exc:  # pydantic's message, first line
            raise CalibrationError(f"{where}: not an item: {str(exc).splitlines()[0]}") from None
        loaded.append((item, texts))
    unit = length_unit(t for _, texts in loaded for t in texts.values())
    rows = []
    for item, texts in loaded:
        if item.is_pair:
            rows.append((item.id, item.system_1, _length(texts.get("candidate_1"), unit), item.system,
                         texts.get("candidate_1", "")))
            rows.append((item.id, item.system_2, _length(texts.get("candidate_2"), unit), item.system,
                         texts.get("candidate_2", "")))
        else:
            rows.append((item.id, item.system, _length(texts.get("candidate"), unit), item.system,
                         texts.get("candidate", "")))
    frame = pd.DataFrame(rows, columns=["item_id", "system", "words", "item_system", "text"])
    judged_keys = set(zip(frame["item_id"], frame["item_system"]))
    empty = int(sum(not t.strip() for _, texts in loaded for t in texts.values()))
    frame = frame.drop_duplicates(["item_id", "system"])
    frame.attrs.update(length_unit=unit, empty=empty, judged_keys=judged_keys)
    return frame


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


# Han, kana and hangul: scripts written without spaces between words.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def length_unit(texts) -> str:
    """'characters' when most letters of the candidates are of a script written without spaces, else 'words'."""
    letters = unspaced = 0
    for text in texts:
        letters += sum(not c.isspace() for c in text)
        unspaced += len(_UNSPACED.findall(text))
    return "characters" if letters and unspaced > letters / 2 else "words"


def _length(text: str | None, unit: str) -> int:
    if not text:
        return 0
    return len(text.split()) if unit == "words" else sum(not c.isspace() for c in text)
