"""HTML sections for `judge screen` and `judge estimate`: systems with their CIs as plots, and the tables.

Imported only when --report is given (matplotlib comes with calibration.report).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from ..report import STYLE, _grid, _png, _table


def intervals_figure(frame: pd.DataFrame, label: str, centre: str, low: str, high: str,
                     human_only: tuple[str, str, str] | None = None) -> str:
    """One panel per criterion: each row of `frame` as a point with its interval, best at the top."""
    criteria = list(dict.fromkeys(frame["criterion"]))
    figure, axes = _grid(len(criteria), width=5.0, height=max(2.5, 0.32 * frame.groupby("criterion").size().max()))
    for axis, criterion in zip(axes, criteria):
        part = frame[frame["criterion"] == criterion].sort_values(centre)
        positions = np.arange(len(part))
        offset = 0.15 if human_only else 0.0
        error = np.vstack([part[centre] - part[low], part[high] - part[centre]])
        axis.errorbar(part[centre], positions + offset, xerr=np.nan_to_num(np.abs(error)), fmt="o", capsize=3,
                      color="tab:orange", label="with the judge (PPI++)" if human_only else "judge")
        if human_only:
            mean, h_low, h_high = human_only
            error = np.vstack([part[mean] - part[h_low], part[h_high] - part[mean]])
            axis.errorbar(part[mean], positions - offset, xerr=np.nan_to_num(np.abs(error)), fmt="s", capsize=3,
                          color="tab:blue", label="humans only")
            axis.legend(fontsize=7)
        axis.set_yticks(positions, part[label], fontsize=7)
        axis.set(title=criterion, xlabel="mean score (CI)")
    return _png(figure)


def screen_section(result) -> str:
    systems = result.systems
    parts = ["<h2>Screen: systems by the judge</h2>",
             f"<p class=note>Mean judge score with a 95% percentile bootstrap CI ({result.n_resamples} resamples of "
             "dialogues, the same for every system). Tied: not separated from the best (paired bootstrap, Holm).</p>",
             f'<img alt="systems with CIs" src="{intervals_figure(systems, "system", "mean", "ci_low", "ci_high")}">',
             _table(systems)]
    if result.dominated:
        parts.append("<p>Dominated on every criterion (listed, not dropped): " + html.escape(
            "; ".join(f"{loser} by {winner}" for loser, winner in sorted(result.dominated.items()))) + "</p>")
    parts += ["<h2>Screen: power</h2>", f"<p>{html.escape(result.sentence)}</p>", _table(result.power),
              "<h2>Screen: dialogues that most need humans</h2>",
              _table(result.items.sort_values("priority", ascending=False).head(20))]
    if result.plan is not None:
        parts += ["<h2>Screen: plan</h2>", _table(result.plan)]
    return "".join(parts)


def estimate_section(result) -> str:
    source = ("the plan's random part" if result.random_source == "plan"
              else "every labelled dialogue, taken as a random sample (no plan given)")
    estimates = result.estimates.dropna(subset=["ci_low"])
    figure = intervals_figure(estimates, "system", "estimate", "ci_low", "ci_high",
                              ("human_only", "human_only_ci_low", "human_only_ci_high")) if len(estimates) else ""
    parts = ["<h2>Estimate: each system's mean human score</h2>",
             f"<p class=note>Prediction-powered (PPI++) {result.confidence:.0%} t intervals from {result.n_random} "
             f"random-sample dialogues ({html.escape(source)}), beside the human-only intervals.</p>"]
    if figure:
        parts.append(f'<img alt="estimates with CIs" src="{figure}">')
    parts += [_table(result.estimates), "<h2>Estimate: paired differences</h2>", _table(result.differences)]
    if not result.targeted.empty:
        parts += ["<h2>Labels on targeted dialogues (not in the estimates)</h2>", _table(result.targeted)]
    return "".join(parts)


def write_section(section: str, path: str | Path, title: str, inputs=()) -> list[Path]:
    """A self-contained page holding the section (plots embedded as data URIs); returns the files it replaced."""
    from judge.outputs import write_files

    document = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
                f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{section}</body></html>")
    return write_files({Path(path): document}, verb=title.lower(), inputs=inputs)
