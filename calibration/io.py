"""Reading human labels and judge scores (judgments JSONL or any CSV of scores) into tidy DataFrames."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import CalibrationError

HUMAN_COLUMNS = ["item_id", "system", "annotator", "criterion", "score"]
JUDGE_COLUMNS = ["item_id", "system", "criterion", "score", "label", "status"]
# status of one judge row: a usable number, a categorical/pairwise label, or why it has neither.
STATUSES = ("ok", "label", "na", "error", "abstain")


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise CalibrationError(f"{path}: no such file")
    try:
        # Ids stay strings: "0012" and "12" are different dialogues.
        return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{path}: not a readable CSV file ({exc})") from None
    except pd.errors.EmptyDataError:
        raise CalibrationError(f"{path}: the file is empty") from None


def _require_columns(frame: pd.DataFrame, path: Path, required: list[str]) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise CalibrationError(
            f"{path}: line 1: missing column(s) {', '.join(missing)}; found {', '.join(map(str, frame.columns))}"
        )


def _numeric_or_labels(values: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Split a text column into numbers and, where a cell is not a number, a label."""
    numbers = pd.to_numeric(values, errors="coerce")
    labels = values.where(numbers.isna() & values.notna())
    return numbers.astype(float), labels


def _check_blank(frame: pd.DataFrame, path: Path, columns: list[str]) -> None:
    for column in columns:
        blank = frame[column].isna()
        if blank.any():
            line = int(blank.to_numpy().nonzero()[0][0]) + 2  # +1 header, +1 one-based
            raise CalibrationError(f"{path}: line {line}: column {column!r} is empty")


def load_human_labels(path: str | Path) -> pd.DataFrame:
    """Long CSV `item_id,system,annotator,criterion,score` (extra columns kept).

    Non-numeric scores are kept as categorical labels (column `label`, `score` NaN).
    """
    path = Path(path)
    frame = _read_csv(path)
    _require_columns(frame, path, HUMAN_COLUMNS)
    _check_blank(frame, path, ["item_id", "system", "annotator", "criterion"])
    frame = frame.copy()
    frame["score"], frame["label"] = _numeric_or_labels(frame["score"])
    duplicated = frame.duplicated(["item_id", "system", "annotator", "criterion"])
    if duplicated.any():
        line = int(duplicated.to_numpy().nonzero()[0][0]) + 2
        row = frame.loc[duplicated].iloc[0]
        raise CalibrationError(
            f"{path}: line {line}: duplicate label for item {row.item_id!r}, system {row.system!r}, "
            f"annotator {row.annotator!r}, criterion {row.criterion!r}"
        )
    if frame["score"].isna().all() and frame["label"].isna().all():
        raise CalibrationError(f"{path}: column 'score' holds no value")
    return frame


def _judgment_status(record: dict) -> str:
    if record.get("error") not in (None, ""):
        return "error"
    if record.get("na"):
        return "na"
    if record.get("score") is not None:
        return "ok"
    if record.get("label") is not None:
        return "label"
    return "abstain"


def _load_jsonl(path: Path) -> pd.DataFrame:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CalibrationError(f"{path}: line {number}, column {exc.colno}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise CalibrationError(f"{path}: line {number}: expected a JSON object, got {type(record).__name__}")
            for key in ("id", "system", "criterion"):
                if record.get(key) in (None, ""):
                    raise CalibrationError(f"{path}: line {number}: field {key!r} is missing or empty")
            score = record.get("score")
            if score is not None and (
                isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)
            ):
                raise CalibrationError(f"{path}: line {number}: field 'score' must be a number or null, got {score!r}")
            status = _judgment_status(record)
            label = record.get("label")
            rows.append(
                {
                    "item_id": str(record["id"]),
                    "system": str(record["system"]),
                    "criterion": str(record["criterion"]),
                    # A score is used only when the judgment is clean: N/A and failures are never a number.
                    "score": float(score) if status == "ok" else np.nan,
                    "label": None if label is None else str(label),
                    "status": status,
                    "line": number,
                }
            )
    if not rows:
        raise CalibrationError(f"{path}: no judgments in the file")
    return pd.DataFrame(rows)


def _load_score_csv(path: Path, score_column: str | None) -> pd.DataFrame:
    frame = _read_csv(path)
    if "item_id" not in frame.columns and "id" in frame.columns:
        frame = frame.rename(columns={"id": "item_id"})
    _require_columns(frame, path, ["item_id", "system"])
    if score_column is not None:
        _require_columns(frame, path, [score_column])
        values = frame[score_column]
        # Wide form: one metric column, applied to every criterion (filled in by align()).
        criterion = frame["criterion"] if "criterion" in frame.columns else pd.Series("*", index=frame.index)
    else:
        if "criterion" not in frame.columns or "score" not in frame.columns:
            raise CalibrationError(
                f"{path}: line 1: a score CSV needs columns criterion and score (long form), "
                "or --score-column NAME for a wide file such as metric_scores.csv"
            )
        values, criterion = frame["score"], frame["criterion"]
    _check_blank(frame.assign(criterion=criterion), path, ["item_id", "system", "criterion"])
    numbers, labels = _numeric_or_labels(values)
    column = score_column or "score"
    status = np.where(numbers.notna(), "ok", np.where(labels.notna(), "label", "error"))
    if (status == "label").all():
        raise CalibrationError(f"{path}: column {column!r} holds no number")
    out = pd.DataFrame(
        {
            "item_id": frame["item_id"].astype(str),
            "system": frame["system"].astype(str),
            "criterion": criterion.astype(str),
            "score": numbers,
            "label": labels,
            "status": status,
            "line": np.arange(len(frame)) + 2,
        }
    )
    return out


def load_judge_scores(path: str | Path, score_column: str | None = None) -> pd.DataFrame:
    """Judge scores from the engine's judgments JSONL or from a CSV of scores.

    Returns columns item_id, system, criterion, score (NaN unless status == "ok"), label, status, line.
    Criterion "*" means "the same score for every criterion" (a wide CSV with --score-column).
    """
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        frame = _load_score_csv(path, score_column)
    else:
        if score_column is not None:
            raise CalibrationError(f"{path}: --score-column applies only to a CSV file of scores")
        frame = _load_jsonl(path)
    key = ["item_id", "system", "criterion"]
    duplicated = frame.duplicated(key)
    if duplicated.any():
        row = frame.loc[duplicated].iloc[0]
        raise CalibrationError(
            f"{path}: line {row.line}: a second judgment for item {row.item_id!r}, system {row.system!r}, "
            f"criterion {row.criterion!r}"
        )
    return frame.reset_index(drop=True)
