"""A self-contained HTML report: tables and matplotlib plots embedded as base64 PNG data URIs."""

from __future__ import annotations

import datetime
import html
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..agreement import round_to_scale
from ..html_kit import STYLE, pyplot
from ..html_kit import grid as _grid
from ..html_kit import image as _img
from ..html_kit import note as _note
from ..html_kit import png as _png
from ..html_kit import table as _table

if TYPE_CHECKING:
    from .calibrate import CalibrationResults

plt = pyplot()
JUDGE, HUMAN = "tab:orange", "tab:blue"


def _title(text: str, width: int = 32) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def scatter_figure(pairs: pd.DataFrame) -> str:
    criteria = sorted(pairs["criterion"].unique())
    figure, axes = _grid(len(criteria))
    rng = np.random.default_rng(0)
    for axis, criterion in zip(axes, criteria):
        part = pairs[pairs["criterion"] == criterion]
        # Jitter only so that identical Likert pairs do not hide each other.
        axis.scatter(part["judge"] + rng.uniform(-0.12, 0.12, len(part)),
                     part["human"] + rng.uniform(-0.12, 0.12, len(part)), s=8, alpha=0.4)
        axis.set(title=_title(criterion), xlabel="judge score", ylabel="human score (mean)")
    return _png(figure)


def off_the_human_scale(part: pd.DataFrame) -> bool:
    """Whether the judge's means lie off the humans' scale (a metric in [0, 1], a negative BARTScore), so that they
    need an axis of their own; otherwise both share one axis on the human scale.

    Decided on the scale, not on where the means happen to fall: a judge that gives every summary 1 on a 1-5 rubric
    shares the humans' axis and is drawn at 1, not at the height of a human 4.3. The human scale is taken as the
    span of the human intervals widened to the usual Likert bounds (1 to 5) when the humans look like Likert scores.
    """
    human = np.array([part["human_low"].min(), part["human_high"].max()], dtype=float)
    judge = np.array([part["judge_low"].min(), part["judge_high"].max()], dtype=float)
    if np.isnan(human).any() or np.isnan(judge).any():
        return False
    low, high = human
    if low >= 1.0:  # Likert-like labels: the scale reaches down to 1 and up to at least 5
        low, high = 1.0, max(5.0, float(np.ceil(high)))
    return bool(judge[0] < low - 1e-9 or judge[1] > high + 1e-9)


def system_means_figure(means: pd.DataFrame) -> str:
    criteria = sorted(means["criterion"].unique())
    longest = max(len(str(s)) for s in means["system"])
    # Room below each panel for the rotated system names.
    figure, axes = _grid(len(criteria), width=5.4, height=3.4 + 0.07 * min(longest, 28), columns=2)
    for axis, criterion in zip(axes, criteria):
        part = means[means["criterion"] == criterion].sort_values("human_mean")
        positions = np.arange(len(part))
        own_axis = off_the_human_scale(part)
        for offset, side, colour in ((-0.15, "judge", JUDGE), (0.15, "human", HUMAN)):
            target = axis.twinx() if side == "judge" and own_axis else axis
            centre = part[f"{side}_mean"].to_numpy()
            error = np.vstack([centre - part[f"{side}_low"].to_numpy(), part[f"{side}_high"].to_numpy() - centre])
            target.errorbar(positions + offset, centre, yerr=np.nan_to_num(np.abs(error)), fmt="o", color=colour,
                            label=side, capsize=3, markersize=4)
            if target is not axis:
                target.set_ylabel("judge mean (95% CI)", color=colour)
                target.tick_params(axis="y", colors=colour)
        names = [textwrap.shorten(str(s), 28, placeholder="…") for s in part["system"]]
        axis.set_xticks(positions, names, rotation=45, ha="right", rotation_mode="anchor",
                        fontsize=8 if len(part) <= 10 else 7)
        axis.set(title=_title(criterion), ylabel="human mean (95% CI)" if own_axis else "mean score (95% CI)")
        axis.grid(axis="y", alpha=0.3)
    # One legend for the figure, below the panels: inside a panel it would cover the points of some system.
    handles = [plt.Line2D([], [], color=c, marker="o", linestyle="", label=f"{side} mean, 95% CI over dialogues")
               for side, c in (("judge", JUDGE), ("human", HUMAN))]
    figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return _png(figure)


def ceiling_figure(ceiling: pd.DataFrame, statistic: str = "pearson") -> str:
    part = ceiling[ceiling["statistic"] == statistic]
    levels = [level for level in ("system", "summary", "item") if (part["level"] == level).any()]
    figure, axes = _grid(len(levels), width=4.4, height=3.8)
    for axis, level in zip(axes, levels):
        rows = part[part["level"] == level]
        positions = np.arange(len(rows))
        spread = np.vstack([rows["ceiling"] - rows["ceiling_min"], rows["ceiling_max"] - rows["ceiling"]])
        axis.bar(positions - 0.2, rows["ceiling"], 0.4, yerr=np.nan_to_num(np.abs(spread)), capsize=3,
                 label="human ceiling (min–max over annotators)", color=HUMAN)
        judge_ci = np.vstack([rows["judge"] - rows["judge_ci_low"], rows["judge_ci_high"] - rows["judge"]])
        axis.bar(positions + 0.2, rows["judge"], 0.4, yerr=np.nan_to_num(np.abs(judge_ci)), capsize=3,
                 label="judge vs human mean (95% CI)", color=JUDGE)
        axis.set_xticks(positions, [_title(c, 14) for c in rows["criterion"]], rotation=30, ha="right",
                        rotation_mode="anchor", fontsize=9)
        low = float(np.nanmin(rows[["judge", "ceiling", "judge_ci_low"]].to_numpy(dtype=float)))
        axis.set(title=f"{level} level, {statistic}", ylim=(min(0.0, low - 0.05), 1.05))
        axis.axhline(0, color="#444", linewidth=0.6)
    # One legend for the whole figure, below the panels, so that no bar is hidden behind it.
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return _png(figure)


def confusion_figure(matrices: list[tuple[str, pd.DataFrame]]) -> str:
    size = max(max(m.shape) for _, m in matrices)
    side = max(3.2, 0.55 * size + 1.6)
    figure, axes = _grid(len(matrices), width=side, height=side)
    for axis, (title, matrix) in zip(axes, matrices):
        values = matrix.to_numpy()
        axis.imshow(values, cmap="Blues", vmin=0, vmax=max(1, values.max()))
        for (row, column), value in np.ndenumerate(values):
            # Dark cells get white digits: the count must stay readable on every shade.
            colour = "white" if value > 0.55 * values.max() else "#111"
            axis.text(column, row, str(value), ha="center", va="center", fontsize=10 if size <= 6 else 8,
                      color=colour, fontweight="bold")
        axis.set_xticks(range(matrix.shape[1]), [_title(str(c), 12) for c in matrix.columns], fontsize=8)
        axis.set_yticks(range(matrix.shape[0]), [_title(str(c), 12) for c in matrix.index], fontsize=8)
        axis.set(title=_title(title, 28), xlabel="judge", ylabel="human")
    return _png(figure)


def likert_confusions(pairs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Judge vs human mean, both rounded to whole scale points (as for kappa)."""
    out = []
    for criterion in sorted(pairs["criterion"].unique()):
        part = pairs[pairs["criterion"] == criterion]
        judge, human = round_to_scale(part["judge"]).astype(int), round_to_scale(part["human"]).astype(int)
        points = sorted(set(judge) | set(human))
        if len(points) > 12:
            continue  # a continuous metric, not a scale: a confusion matrix would be unreadable
        out.append((f"{criterion} (rounded)", pd.crosstab(pd.Categorical(human, points), pd.Categorical(judge, points),
                                                          dropna=False)))
    return out


def _header(results: CalibrationResults, when: datetime.datetime) -> str:
    sources = {**results.sources, "Criteria": ", ".join(results.criteria),
               "Human score": ("cleaned (DialSummEval noise removal) " if results.cleaned else "") +
               "mean over annotators",
               "Bootstrap": f"{results.n_resamples} resamples (seed {results.seed})",
               "Date": when.strftime("%Y-%m-%d %H:%M UTC")}
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in sources.items())
    return f"<h1>Judge calibration report</h1><dl class=sources>{rows}</dl>"


def report_html(results: CalibrationResults, when: datetime.datetime | None = None) -> str:
    """The whole report as one HTML string; every plot is embedded, so it can be mailed or opened offline."""
    when = when or datetime.datetime.now(datetime.UTC)
    single = (_note(f"{', '.join(results.single_annotator)}: needs >= 2 annotators per summary (the labels have "
                    "one), so there is no human agreement nor ceiling for it.") if results.single_annotator else "")
    sections = [_header(results, when), "<h2>Coverage</h2>", _table(results.coverage)]
    if not results.pairs.empty:
        sections += ["<h2>Judge vs human scores</h2>", _img("scatter", scatter_figure(results.pairs))]
    if not results.system_means.empty:
        sections += ["<h2>Per-system means with 95% CIs</h2>",
                     _img("system means", system_means_figure(results.system_means))]
    if not results.correlations.empty:
        sections += ["<h2>Correlations</h2>", _table(results.correlations)]
    if not results.ceiling.empty or single:
        sections += ["<h2>The judge against the human ceiling</h2>",
                     _note("Ceiling: each annotator against the mean of the others, averaged over annotators; "
                           "the judge against the mean of all. Both on the raw labels, even with --clean "
                           "(cleaning drops the annotator who disagrees, which would inflate the ceiling)."), single]
        if not results.ceiling.empty:
            sections += [_img("ceiling", ceiling_figure(results.ceiling)),
                         _table(results.ceiling[[c for c in results.ceiling.columns
                                                 if not c.startswith("annotator:")]])]
    if not results.alpha.empty or single:
        after = "after noise removal (--clean)" if results.cleaned else "on the raw labels"
        sections += ["<h2>Krippendorff's alpha</h2>",
                     _note(f"Among the annotators, and with the judge as one more rater; {after}."), single,
                     _table(results.alpha)]
    if not results.agreement.empty:
        sections += ["<h2>Agreement</h2>", _table(results.agreement)]
    matrices = likert_confusions(results.pairs) if not results.pairs.empty else []
    matrices += [(f"{r['criterion']} (labels)", r["confusion"]) for r in results.labels if not r["confusion"].empty]
    if matrices:
        sections += ["<h2>Confusion matrices</h2>", _note("Rows: human (majority label, or the mean rounded to a "
                                                          "scale point); columns: judge."),
                     _img("confusion matrices", confusion_figure(matrices))]
    if results.labels:
        sections += ["<h2>Categorical criteria</h2>",
                     _note("Abstentions (\"I don't know\") are counted apart on both sides and left out of accuracy "
                           "and kappa."),
                     _table(pd.DataFrame([{k: v for k, v in r.items() if k not in ("confusion", "classes")}
                                          for r in results.labels]))]
    if results.pairwise:
        sections += ["<h2>Pairwise criteria</h2>", _table(pd.DataFrame(results.pairwise))]
    if not results.map_evaluation.empty:
        sections += ["<h2>Isotonic calibration map (cross-validated by dialogue)</h2>", _table(results.map_evaluation)]
    if not results.comparison.empty:
        sections += ["<h2>Comparison with a second judge</h2>", _table(results.comparison)]
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Judge calibration report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>")


def write_report(results: CalibrationResults, path: str | Path) -> Path:
    """Write the report in one step (a complete file or none)."""
    from judge.outputs import write_files

    path = Path(path)
    write_files({path: report_html(results)}, verb="calibrate")
    return path
