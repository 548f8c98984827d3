"""The report kit every verb's HTML section is made with: the page style, tables, notes, and matplotlib figures as
embedded PNG data URIs. Nothing here knows a verb; matplotlib is imported when a figure is drawn, not before."""

from __future__ import annotations

import base64
import html
import io

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


def table(frame) -> str:
    if frame is None or frame.empty:
        return "<p class=note>(none)</p>"
    return ("<div class=scroll>" + frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="–", border=0)
            + "</div>")


def note(text: str) -> str:
    return f"<p class=note>{html.escape(text)}</p>"
