"""The report kit every verb's HTML section is made with: the page style, tables, notes, and matplotlib figures as
embedded PNG data URIs. Nothing here knows a verb; matplotlib is imported when a figure is drawn, not before."""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left} img{max-width:100%;display:block;margin:.5em 0 1.5em}
.note{color:#555;font-size:.9em} dl.sources{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}
dl.sources dt{font-weight:600} dl.sources dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
"""


def pyplot():
    """matplotlib's pyplot on the headless Agg backend (no display on servers or CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def image(alt: str, src: str) -> str:
    """An <img> of a figure's data URL (png) with its alternative text."""
    return f'<img alt="{html.escape(alt)}" src="{src}">'


def png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight", pad_inches=0.15)  # nothing cut off
    pyplot().close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def grid(count: int, width: float = 4.2, height: float = 3.6, columns: int = 3):
    """Small multiples; constrained layout keeps titles, tick labels and legends from overlapping."""
    columns = min(count, columns)
    rows = -(-count // columns)
    figure, axes = pyplot().subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False,
                                     layout="constrained")
    for axis in axes.ravel()[count:]:
        axis.set_visible(False)
    return figure, axes.ravel()


def rows_grid(count: int, rows: int, width: float = 5.0, columns: int = 3):
    """Small multiples of up to `rows` labelled rows each: tall enough for every row's tick label."""
    return grid(count, width=width, height=max(2.4, 0.35 * rows + 1.2), columns=columns)


def interval_rows(axis, labels, series, reference: float | None = None, scale: tuple[float, float] | None = None):
    """Points with horizontal intervals on one axis, a row per label and an offset per series, each series a
    (name, colour, marker, centre, low, high); a row without an interval (none could hold) is a hollow point.

    `scale`: the rubric's, drawn as two grey lines, the intervals clipped to it in the plot only (an interval past the
    scale says nothing the scale does not; the tables keep the numbers), its edges dotted. `reference`: a dashed line
    (0 for effects and differences, 50% for shares)."""
    positions = np.arange(len(labels))
    offsets = np.linspace(-0.15, 0.15, len(series)) if len(series) > 1 else [0.0]
    hollow = False
    for offset, (name, colour, marker, centre, low, high) in zip(offsets, series):
        centre, low, high = (np.asarray(v, dtype=float) for v in (centre, low, high))
        if scale is not None:
            low, high = np.clip(low, *scale), np.clip(high, *scale)
        has = np.isfinite(centre) & np.isfinite(low) & np.isfinite(high)
        # An estimate beyond its clipped bound has no bar that way (abs would mirror it).
        error = np.maximum(np.vstack([centre - low, high - centre])[:, has], 0.0)
        axis.errorbar(centre[has], positions[has] + offset, xerr=error, fmt=marker, capsize=3, color=colour,
                      label=name)
        bare = np.isfinite(centre) & ~has
        if bare.any():
            hollow = True
            axis.plot(centre[bare], positions[bare] + offset, marker, markerfacecolor="none", color=colour,
                      label=f"{name}: no interval")
    if scale is not None:
        for edge in scale:
            axis.axvline(edge, color="0.6", linewidth=1, linestyle=":")
        margin = 0.05 * (scale[1] - scale[0])
        axis.set_xlim(scale[0] - margin, scale[1] + margin)
    if reference is not None:
        axis.axvline(reference, color="0.3", linewidth=1, linestyle="--")
    axis.set_yticks(positions, labels, fontsize=7)
    if len(series) > 1 or hollow:
        axis.legend(fontsize=7)


def table(frame) -> str:
    if frame is None or frame.empty:
        return "<p class=note>(none)</p>"
    return ("<div class=scroll>" + frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="–", border=0)
            + "</div>")


def note(text: str) -> str:
    return f"<p class=note>{html.escape(text)}</p>"


def _bounds_of(bounds: dict | None, criterion: str) -> tuple[float, float] | None:
    if not bounds:
        return None
    found = bounds.get(criterion, bounds.get("*"))
    return None if found is None or None in found else (float(found[0]), float(found[1]))


def intervals_figure(frame: pd.DataFrame, label: str, centre: str, low: str, high: str,
                     human_only: tuple[str, str, str] | None = None, bounds: dict | None = None,
                     xlabel: str = "mean score (CI)", zero: bool = False) -> str:
    """One panel per criterion: each row of `frame` as a point with its interval, best at the top.

    `bounds` (criterion or "*" -> (low, high)): the scale, drawn as two grey lines; intervals are clipped to it in
    the plot only (an interval past the scale says nothing the scale does not; the tables keep the numbers). A row
    without an interval (NaN bounds: none could hold) is drawn as a hollow point. `zero`: a line at 0 (differences).
    """
    criteria = list(dict.fromkeys(frame["criterion"]))
    figure, axes = rows_grid(len(criteria), frame.groupby("criterion").size().max())
    for axis, criterion in zip(axes, criteria):
        part = frame[frame["criterion"] == criterion].sort_values(centre)
        scale = _bounds_of(bounds, criterion)
        if scale is not None and zero:  # a difference of two scores lies within +-(high - low)
            scale = (scale[0] - scale[1], scale[1] - scale[0])
        name = "with the judge (PPI++)" if human_only else "judge"
        series = [(name, "tab:orange", "o", *(part[c] for c in (centre, low, high)))]
        if human_only:  # drawn below the judge's point
            series.insert(0, ("humans only", "tab:blue", "s", *(part[c] for c in human_only)))
        interval_rows(axis, list(part[label]), series, reference=0.0 if zero else None, scale=scale)
        axis.set(title=criterion, xlabel=xlabel)
    return png(figure)
