"""The HTML section of `judge audit`: each effect as a point with its CI beside the humans' and zero, and the tables.

Imported only when a report is asked for (matplotlib comes with the figures of calibration.html_kit).
"""

from __future__ import annotations

import html

import pandas as pd

from ..html_kit import image as _img
from ..html_kit import interval_rows as _interval_rows
from ..html_kit import png as _png
from ..html_kit import rows_grid as _rows_grid
from ..html_kit import table as _table


def _series(frame: pd.DataFrame, *series) -> list:
    """(name, colour, centre, low, high columns) -> interval_rows' series, each a point with its interval."""
    return [(name, colour, "o", *(frame[c] for c in columns)) for name, colour, *columns in series]


def length_figure(length: pd.DataFrame) -> str:
    numeric = length[length["judge_slope"].notna()]
    figure, axes = _rows_grid(1, len(numeric))
    series = [("judge", "tab:orange", "judge_slope", "judge_slope_ci_low", "judge_slope_ci_high")]
    if numeric["human_slope"].notna().any():
        series += [("humans", "tab:blue", "human_slope", "human_slope_ci_low", "human_slope_ci_high"),
                   ("excess beyond quality (2SLS)", "tab:red", "excess_slope", "excess_ci_low", "excess_ci_high")]
    _interval_rows(axes[0], list(numeric["criterion"]), _series(numeric, *series), reference=0.0)
    axes[0].set(title="Length slope (95% CI)", xlabel="points per within-dialogue SD of length")
    return _png(figure)


def pairwise_figure(length: pd.DataFrame, position: pd.DataFrame) -> str:
    figure, axes = _rows_grid(2, len(length))
    series = [("judge", "tab:orange", "prefers_longer", "prefers_longer_ci_low", "prefers_longer_ci_high")]
    if length["human_prefers_longer"].notna().any():
        series.append(("humans", "tab:blue", "human_prefers_longer", "human_prefers_longer_ci_low",
                       "human_prefers_longer_ci_high"))
    _interval_rows(axes[0], list(length["criterion"]), _series(length, *series), reference=0.5)
    axes[0].set(title="Prefers the longer candidate", xlabel="share of decided pairs (95% CI)")
    overall = position[position["stratum"] == "all"]
    _interval_rows(axes[1], list(overall["criterion"]), _series(
        overall, ("order flips", "tab:purple", "flip_rate", "ci_low", "ci_high"),
        ("first shown wins", "tab:green", "first_shown_wins", "first_shown_ci_low", "first_shown_ci_high")),
        reference=0.5)
    axes[1].set(title="Position", xlabel="share (95% CI); dashed: 50%")
    return _png(figure)


def effects_figure(frame: pd.DataFrame, centre: str, low: str, high: str, title: str, xlabel: str) -> str:
    figure, axes = _rows_grid(1, len(frame))
    _interval_rows(axes[0], list(frame["criterion"]), _series(frame, ("effect", "tab:red", centre, low, high)),
                   reference=0.0)
    axes[0].set(title=title, xlabel=xlabel)
    return _png(figure)


def controlled_figure(controlled: pd.DataFrame) -> str:
    criteria = list(dict.fromkeys(controlled["criterion"]))
    figure, axes = _rows_grid(len(criteria), controlled.groupby("criterion").size().max())
    for axis, criterion in zip(axes, criteria):
        part = controlled[controlled["criterion"] == criterion].sort_values("raw_mean")
        _interval_rows(axis, list(part["system"]), _series(
            part, ("raw", "tab:gray", "raw_mean", "raw_ci_low", "raw_ci_high"),
            ("at equal length", "tab:orange", "length_controlled", "lc_ci_low", "lc_ci_high")))
        axis.set(title=criterion, xlabel="mean judge score (95% CI)")
    return _png(figure)


def audit_section(result) -> str:
    parts = ["<h2>Audit: findings</h2>", "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in result.sentences)
             + "</ul>", f"<p class=note>Every interval: 95% percentile bootstrap over dialogues "
             f"({result.n_resamples} resamples, seed {result.seed}).</p>",
             "<h2>Audit: re-run noise</h2>", _table(result.noise)]
    length = result.length
    if result.mode == "pairwise":
        parts += ["<h2>Audit: length and position (pairwise)</h2>",
                  _img("pairwise length and position", pairwise_figure(length, result.position)),
                  _table(length.dropna(axis=1, how="all")), _table(result.position.dropna(axis=1, how="all"))]
    else:
        parts += ["<h2>Audit: length</h2>",
                  "<p class=note>Length: words, centred within the dialogue, per pooled within-dialogue SD. "
                  "Excess: the judge's own length effect beyond quality (2SLS within dialogues, one annotator's "
                  "reading instrumented by the others'), whatever its scale.</p>"]
        if length["judge_slope"].notna().any():
            parts.append(_img("length slopes", length_figure(length)))
        parts.append(_table(length.dropna(axis=1, how="all")))
        if not result.length_controlled.empty:
            parts += ["<h2>Audit: length-controlled system means</h2>",
                      _img("length-controlled means", controlled_figure(result.length_controlled)),
                      _table(result.length_controlled)]
        block = result.position[result.position["mode"] == "block"]
        if not block.empty:
            parts += ["<h2>Audit: position in the block</h2>",
                      _img("position slope", effects_figure(block, "position_slope", "position_slope_ci_low",
                                                            "position_slope_ci_high", "Score per later letter",
                                                            "points (95% CI)")),
                      _table(block.dropna(axis=1, how="all"))]
    own = result.self_preference
    if not own.empty:
        centre = ("self_preference", "ci_low", "ci_high") if own["self_preference"].notna().any() else (
            "judge_gap", "judge_gap_ci_low", "judge_gap_ci_high")
        parts += ["<h2>Audit: self-preference</h2>"]
        if own[centre[0]].notna().any():
            unit = "win share" if result.mode == "pairwise" else "points"
            parts.append(_img("self-preference", effects_figure(own, *centre, "Self-preference", unit + " (95% CI)")))
        parts.append(_table(own))
    if result.probes is not None:
        parts.append("<h2>Audit: probes</h2>")
        shifts = result.probes[result.probes["mean_shift"].notna()]
        if not shifts.empty:
            labelled = shifts.assign(criterion=shifts["probe"] + ": " + shifts["criterion"])
            parts.append(_img("probe shifts", effects_figure(labelled, "mean_shift", "ci_low", "ci_high",
                                                             "Mean shift under each probe", "points (95% CI)")))
        parts.append(_table(result.probes))
    return "".join(parts)


def footnoted(lines: list[str], notes: list[str], width: int = 120) -> list[str]:
    """Printed lines wrapped to `width` columns (continuations indented), then each note as a numbered footnote
    ("[1] ..."), wrapped the same way: a table's rows stay short, its long notes read below it."""
    import textwrap

    out = []
    for line in (part for row in lines for part in row.split("\n")):
        out += textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) or [""]
    for number, note in enumerate(notes, start=1):
        out += textwrap.wrap(f"[{number}] {note}", width, subsequent_indent="    ", break_on_hyphens=False)
    return out
