"""The multi-judge reader: several judges' scores (any file `calibrate` reads) and the human labels checked against
the scale of the rubric a judge names. Used by select, escalate and the study's predictor."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .cells import spelled_as_judged
from .options import scale_option


def _read_judge(name: str, source, failure_value: float | None = None) -> pd.DataFrame:
    """A judge's scores: any file `calibrate` reads; a wide CSV (metric_scores.csv) gives the column named NAME."""
    from .io import read_judge_scores

    if isinstance(source, pd.DataFrame):
        return read_judge_scores(source)[0]  # a frame: its failures are what its status column says
    path = Path(source)
    if path.suffix.lower() == ".csv" and path.is_file():
        with path.open(encoding="utf-8-sig") as handle:
            header = [c.strip() for c in handle.readline().split(",")]
        if "score" not in header and name in header:
            return read_judge_scores(path, score_column=name, failure_value=failure_value)[0]
    return read_judge_scores(path, failure_value=failure_value)[0]


def read_judges(listed, human, scale, failure_value) -> tuple[dict[str, pd.DataFrame], pd.DataFrame, list[str]]:
    """Each judge's scores (`_read_judge`; a CSV shared by several judges parsed once) and the human labels, checked
    against the scale of the rubric a judge names (or --scale), as calibrate, screen and estimate do; with the
    notes on what could not be checked. `human` None (screen without a pilot): the judges only."""
    from .io import each_csv_parsed_once, judge_scales, read_human_labels

    with each_csv_parsed_once():
        frames = {name: _read_judge(name, source, failure_value) for name, source in listed}
    if human is None:
        return frames, None, []
    named = next((f for f in frames.values() if f["rubric"].fillna("").astype(bool).any()), next(iter(frames.values())))
    source = next((s for (n, s) in listed if frames[n] is named), None)
    scales, notes = judge_scales(named, scale_option(scale), source)
    labels = read_human_labels(human, scales)
    spelled_as_judged(labels, pd.concat([f[["item_id", "criterion"]] for f in frames.values()], ignore_index=True))
    return frames, labels, notes
