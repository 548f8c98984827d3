"""The two checks every verb that reads criteria and labels shares: which criteria it works on ("the criteria asked,
or all"), and that a label lands on a judged cell, with one rule for a label spelled as a judged name up to case."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .errors import CalibrationError

# What a label's column is called in messages.
WHAT = {"criterion": "criterion", "item_id": "item", "system": "system"}


def chosen_criteria(criteria, available, missing: str, **names) -> list[str]:
    """The criteria asked (a list, as `options.criteria_option` returns it), each of which must be `available`; or,
    when none were asked (None), every available one, in its order.

    `missing` words the error for the verb, formatted with `unknown` (the asked names not available, joined),
    `first` (the first of them), `available` (the available names joined, or "none") and `names`."""
    available = list(available)
    if criteria is None:
        return available
    unknown = [c for c in criteria if c not in available]
    if unknown:
        raise CalibrationError(missing.format(unknown=", ".join(unknown), first=unknown[0],
                                              available=", ".join(available) or "none", **names))
    return list(criteria)


# The column naming each label's own file when labels come from several (several_label_files; label_at).
LABELS_FILE = "labels_file"


def label_at(labels: pd.DataFrame, row, default: str = "the human labels") -> str:
    """'FILE:LINE' of one row of `labels` (a Series or an itertuples row), for messages: the row's own file where
    the labels were read from several (LABELS_FILE), else the frame's."""
    get = row.get if hasattr(row, "get") else lambda name, fallback=None: getattr(row, name, fallback)
    source = get(LABELS_FILE) if LABELS_FILE in labels.columns else None
    return f"{source if isinstance(source, str) else labels.attrs.get('path', default)}:{get('line')}"


def _where(labels: pd.DataFrame, row, path, default: str = "the human labels") -> str:
    return f"{path}:{row['line']}" if path else label_at(labels, row, default)


def spelled_otherwise(labels: pd.DataFrame, column: str, judged, path=None,
                      default: str = "the human labels") -> None:
    """The one rule for a label whose name differs from a judged one only by case (`Coherence` for the judged
    `coherence`, item `D1` for `d1`): an error naming the label's line, its spelling and the judged one. Matched
    as they are, such labels would be dropped or would pair with a part of the items only, without a word.

    `column`: "criterion" or "item_id"; `judged`: the names the judgments have; `path`: the labels' file when the
    frame's own lines do not say it."""
    judged = {str(v) for v in judged if isinstance(v, str) and v != "*"}
    values = labels[column].astype(str)
    off = ~values.isin(judged)
    if not off.any():
        return
    folded: dict[str, str] = {}
    for name in sorted(judged):
        folded.setdefault(name.casefold(), name)
    spelled = off & values.str.casefold().isin(folded)
    if not spelled.any():
        return
    row = labels[spelled].iloc[0]
    label = str(row[column])
    what = WHAT.get(column, column)
    at = _where(labels, row, path, default)
    raise CalibrationError(f"{at}: {what} {label!r} differs only by case from the judged "
                           f"{what} {folded[label.casefold()]!r}: names must match exactly; spell them alike in the "
                           f"labels and the judgments ({int(spelled.sum())} label(s) like it)")


def spelled_as_judged(labels: pd.DataFrame, judge: pd.DataFrame, path=None) -> None:
    """`spelled_otherwise` for the labels' criteria and item ids against the judgments `judge` (a frame of
    calibration.io.read_judge_scores; a wide metric column, criterion "*", stands for every criterion)."""
    if labels is None or labels.empty or judge is None or judge.empty:
        return
    spelled_otherwise(labels, "item_id", set(judge["item_id"].astype(str)), path)
    spelled_otherwise(labels, "criterion", set(judge["criterion"]), path)


def labels_on_judged(labels: pd.DataFrame, column: str, judged, message: Callable[[pd.Series], str],
                     path=None, default: str = "the human labels") -> None:
    """A label must land on a judged cell: every label's `column` value among `judged`, else a CalibrationError
    at the first such label's line, `message(row)` followed by how many labels are like it. A value judged under
    another case is the error of `spelled_otherwise`."""
    spelled_otherwise(labels, column, judged, path, default)
    off = ~labels[column].isin(set(judged))
    if off.any():
        row = labels[off].iloc[0]
        at = _where(labels, row, path, default)
        raise CalibrationError(f"{at}: {message(row)} ({int(off.sum())} label(s) like it)")
