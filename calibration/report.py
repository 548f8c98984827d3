"""A self-contained HTML report: tables and matplotlib plots embedded as base64 PNG data URIs."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .agreement import round_to_scale  # noqa: E402
from .analysis import CalibrationResults  # noqa: E402

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left} img{max-width:100%;display:block;margin:.5em 0 1.5em}
.note{color:#555;font-size:.9em}
"""


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _grid(count: int, width: float = 4.0, height: float = 3.4):
    columns = min(count, 3)
    rows = int(np.ceil(count / columns))
    figure, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    for axis in axes.ravel()[count:]:
        axis.set_visible(False)
    return figure, axes.ravel()


def scatter_figure(pairs: pd.DataFrame) -> str:
    criteria = sorted(pairs["criterion"].unique())
    figure, axes = _grid(len(criteria))
    rng = np.random.default_rng(0)
    for axis, criterion in zip(axes, criteria):
        part = pairs[pairs["criterion"] == criterion]
        # Jitter only so that identical Likert pairs do not hide each other.
        axis.scatter(part["judge"] + rng.uniform(-0.12, 0.12, len(part)),
                     part["human"] + rng.uniform(-0.12, 0.12, len(part)), s=8, alpha=0.4)
        axis.set(title=criterion, xlabel="judge score", ylabel="human score (mean)")
    return _png(figure)


def system_means_figure(means: pd.DataFrame) -> str:
    criteria = sorted(means["criterion"].unique())
    figure, axes = _grid(len(criteria), width=5.0)
    for axis, criterion in zip(axes, criteria):
        part = means[means["criterion"] == criterion].sort_values("human_mean")
        positions = np.arange(len(part))
        for offset, side, colour in ((-0.15, "judge", "tab:orange"), (0.15, "human", "tab:blue")):
            centre = part[f"{side}_mean"].to_numpy()
            error = np.vstack([centre - part[f"{side}_low"].to_numpy(), part[f"{side}_high"].to_numpy() - centre])
            axis.errorbar(positions + offset, centre, yerr=np.nan_to_num(np.abs(error)), fmt="o", color=colour,
                          label=side, capsize=3)
        axis.set_xticks(positions, part["system"], rotation=60, ha="right", fontsize=7)
        axis.set(title=criterion, ylabel="mean score (95% CI)")
        axis.legend(fontsize=7)
    return _png(figure)


def ceiling_figure(ceiling: pd.DataFrame, statistic: str = "pearson") -> str:
    part = ceiling[ceiling["statistic"] == statistic]
    levels = [level for level in ("system", "summary", "item") if (part["level"] == level).any()]
    figure, axes = _grid(len(levels))
    for axis, level in zip(axes, levels):
        rows = part[part["level"] == level]
        positions = np.arange(len(rows))
        spread = np.vstack([rows["ceiling"] - rows["ceiling_min"], rows["ceiling_max"] - rows["ceiling"]])
        axis.bar(positions - 0.2, rows["ceiling"], 0.4, yerr=np.nan_to_num(spread), capsize=3,
                 label="human ceiling (min-max over annotators)", color="tab:blue")
        axis.bar(positions + 0.2, rows["judge"], 0.4, label="judge vs human mean", color="tab:orange")
        axis.set_xticks(positions, rows["criterion"], rotation=30, ha="right", fontsize=8)
        axis.set(title=f"{level} level, {statistic}", ylim=(min(0, float(np.nanmin(rows[["judge", "ceiling"]]))), 1))
        axis.legend(fontsize=7)
    return _png(figure)


def confusion_figure(matrices: list[tuple[str, pd.DataFrame]]) -> str:
    figure, axes = _grid(len(matrices), width=3.6, height=3.4)
    for axis, (title, matrix) in zip(axes, matrices):
        axis.imshow(matrix.to_numpy(), cmap="Blues")
        for (row, column), value in np.ndenumerate(matrix.to_numpy()):
            axis.text(column, row, str(value), ha="center", va="center", fontsize=7)
        axis.set_xticks(range(matrix.shape[1]), matrix.columns, fontsize=7)
        axis.set_yticks(range(matrix.shape[0]), matrix.index, fontsize=7)
        axis.set(title=title, xlabel="judge", ylabel="human")
    return _png(figure)


def likert_confusions(pairs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Judge vs human mean, both rounded to whole scale points (as for kappa)."""
    out = []
    for criterion in sorted(pairs["criterion"].unique()):
        part = pairs[pairs["criterion"] == criterion]
        judge, human = round_to_scale(part["judge"]).astype(int), round_to_scale(part["human"]).astype(int)
        points = sorted(set(judge) | set(human))
        out.append((f"{criterion} (rounded)", pd.crosstab(pd.Categorical(human, points), pd.Categorical(judge, points),
                                                          dropna=False)))
    return out


def _table(frame: pd.DataFrame) -> str:
    if frame is None or frame.empty:
        return "<p class=note>(none)</p>"
    return frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="–", border=0)


def write_report(results: CalibrationResults, path: str | Path) -> Path:
    """Write the report; every plot is embedded, so the file can be mailed or opened offline."""
    path = Path(path)
    sections = [f"<h1>Judge calibration report</h1><p class=note>Criteria: {html.escape(', '.join(results.criteria))}."
                f" Human score: {'cleaned (DialSummEval noise removal) ' if results.cleaned else ''}mean over "
                f"annotators. Bootstrap: {results.n_resamples} resamples (seed {results.seed}).</p>",
                "<h2>Coverage</h2>", _table(results.coverage)]
    if not results.pairs.empty:
        sections += ["<h2>Judge vs human scores</h2>", f'<img alt="scatter" src="{scatter_figure(results.pairs)}">']
    if not results.system_means.empty:
        sections += ["<h2>Per-system means with 95% CIs</h2>",
                     f'<img alt="system means" src="{system_means_figure(results.system_means)}">']
    if not results.correlations.empty:
        sections += ["<h2>Correlations</h2>", _table(results.correlations)]
    if not results.ceiling.empty:
        sections += ["<h2>The judge against the human ceiling</h2>",
                     "<p class=note>Ceiling: each annotator against the mean of the others (raw labels), averaged "
                     "over annotators.</p>",
                     f'<img alt="ceiling" src="{ceiling_figure(results.ceiling)}">',
                     _table(results.ceiling[[c for c in results.ceiling.columns if not c.startswith("annotator:")]])]
    if not results.alpha.empty:
        sections += ["<h2>Krippendorff's alpha</h2>", _table(results.alpha)]
    if not results.agreement.empty:
        sections += ["<h2>Agreement</h2>", _table(results.agreement)]
    matrices = likert_confusions(results.pairs) if not results.pairs.empty else []
    matrices += [(f"{r['criterion']} (labels)", r["confusion"]) for r in results.labels if not r["confusion"].empty]
    if matrices:
        sections += ["<h2>Confusion matrices</h2>", f'<img alt="confusion matrices" src="{confusion_figure(matrices)}">']
    if results.labels:
        sections += ["<h2>Categorical criteria</h2>", _table(pd.DataFrame(
            [{k: v for k, v in r.items() if k not in ("confusion", "classes")} for r in results.labels]))]
    if results.pairwise:
        sections += ["<h2>Pairwise criteria</h2>", _table(pd.DataFrame(results.pairwise))]
    if not results.map_evaluation.empty:
        sections += ["<h2>Isotonic calibration map (cross-validated by dialogue)</h2>", _table(results.map_evaluation)]
    if not results.comparison.empty:
        sections += ["<h2>Comparison with a second judge</h2>", _table(results.comparison)]
    document = ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Judge calibration report</title>"
                f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document, encoding="utf-8")
    return path
