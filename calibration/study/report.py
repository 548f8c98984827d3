"""HTML sections for `judge screen` and `judge estimate`: systems with their CIs as plots, and the tables.

Imported only when --report is given (matplotlib comes with the figures of calibration.html_kit).
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from ..html_kit import STYLE, intervals_figure
from ..html_kit import image as _img
from ..html_kit import table as _table


def _first(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The table with the columns a study plan needs first, so they are on screen before any scrolling."""
    front = [c for c in columns if c in frame.columns]
    return frame[front + [c for c in frame.columns if c not in front]]


POWER_FIRST = ["criterion", "system_a", "system_b", "dialogues_human_only", "dialogues_with_judge", "n_judged",
               "n_pilot", "rho"]
ITEMS_FIRST = ["item_id", "part", "priority", "uncertainty", "discrimination"]
ESTIMATE_FIRST = ["criterion", "system", "system_a", "system_b", "estimate", "ci_low", "ci_high", "interval_note",
                  "n_labelled", "human_only", "human_only_ci_low", "human_only_ci_high"]


def sources_html(provenance: dict, extra: dict | None = None) -> str:
    """Where the numbers come from (files with their sha256, model, rubric, date, seed), as calibrate shows it."""
    rows = {}
    for name, key in (("Judgments", "judgments"), ("Human labels", "human"), ("Plan", "plan")):
        sources = provenance.get(key)
        sources = sources if isinstance(sources, list) else [sources] if sources else []  # several label files
        if sources:
            rows[name] = "; ".join(f"{source['path']}" + (f" (sha256 {source['sha256'][:12]}…)"
                                                         if source.get("sha256") else "") for source in sources)
    for name, key in (("Model", "model"), ("Rubric", "rubric"), ("Date", "date"), ("Seed", "seed")):
        if provenance.get(key) is not None:
            rows[name] = provenance[key]
    rows.update(extra or {})
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in rows.items())
    return f"<dl class=sources>{body}</dl>"


def screen_section(result) -> str:
    systems = result.systems
    parts = [sources_html(result.provenance, {"Bootstrap": f"{result.n_resamples} resamples"}),
             "<h2>Screen: systems by the judge</h2>",
             f"<p class=note>Mean judge score with a 95% percentile bootstrap CI ({result.n_resamples} resamples of "
             "dialogues, the same for every system). Tied: not separated from the best (paired bootstrap, Holm).</p>",
             _img("systems with CIs", intervals_figure(systems, "system", "mean", "ci_low", "ci_high")),
             _table(systems)]
    if result.dominated:
        parts.append("<p>Dominated on every criterion (listed, not dropped): " + html.escape(
            "; ".join(f"{loser} by {winner}" for loser, winner in sorted(result.dominated.items()))) + "</p>")
    parts += ["<h2>Screen: power</h2>", f"<p>{html.escape(result.sentence)}</p>",
              _table(_first(result.power, POWER_FIRST))]
    if result.plan is not None:
        info = result.plan_info
        parts += ["<h2>Screen: plan</h2>",
                  f"<p>Budget {info['budget']} {info['unit']}: {info['n_random']} dialogues drawn uniformly at random "
                  f"(share {info['random_share']}, seed {info['seed']}), {info['n_targeted']} targeted; plan sha256 "
                  f"{info['plan_sha256'][:12]}….</p>", _table(result.plan)]
    for warning in result.warnings:
        parts.append(f"<p class=note>Warning: {html.escape(warning)}</p>")
    parts += ["<h2>Screen: dialogues that most need humans</h2>",
              _table(_first(result.items.sort_values("priority", ascending=False).head(20), ITEMS_FIRST))]
    return "".join(parts)


def estimate_section(result) -> str:
    source = ("the plan's random part" if result.random_source == "plan"
              else "every labelled dialogue, taken as a random sample (no plan given)")
    bounds = getattr(result, "scales", None)
    level = f"{result.confidence:.0%}"
    parts = [sources_html(result.provenance, {"Random sample": f"{result.n_random} dialogues ({source})",
                                              "Method": result.summary()["method"]}),
             "<h2>Estimate: paired differences between systems</h2>",
             f"<p class=note>Each system minus each other, per dialogue (the question a study asks): PPI++ "
             f"{level} intervals beside the human-only ones from the same labels. An interval that excludes 0 "
             "separates the two systems; a hollow point has no interval (too few labels, or no variance). "
             "Intervals are clipped to the scale in the plot; the table keeps the numbers.</p>"]
    differences = result.differences.assign(pair=result.differences["system_a"].astype(str) + " − "
                                            + result.differences["system_b"].astype(str))
    if len(differences):
        parts.append(_img("paired differences with CIs", intervals_figure(
            differences, "pair", "estimate", "ci_low", "ci_high",
            ("human_only", "human_only_ci_low", "human_only_ci_high"), bounds, "difference (CI)", zero=True)))
    parts += [_table(_first(result.differences, ESTIMATE_FIRST)), "<h2>Estimate: each system's mean human score</h2>"]
    if len(result.estimates):
        parts.append(_img("estimates with CIs", intervals_figure(
            result.estimates, "system", "estimate", "ci_low", "ci_high",
            ("human_only", "human_only_ci_low", "human_only_ci_high"), bounds)))
    parts.append(_table(_first(result.estimates, ESTIMATE_FIRST)))
    if not result.targeted.empty:
        parts += ["<h2>Labels on targeted dialogues (not in the estimates)</h2>", _table(result.targeted)]
    for line in list(result.notes) + list(getattr(result, "warnings", [])):
        parts.append(f"<p class=note>{html.escape(line)}</p>")
    return "".join(parts)


def write_section(section: str, path: str | Path, title: str, inputs=()) -> list[Path]:
    """A self-contained page holding the section (plots embedded as data URIs); returns the files it replaced."""
    from judge.outputs import write_files

    document = (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
                f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{section}</body></html>")
    return write_files({Path(path): document}, verb=title.lower(), inputs=inputs)
