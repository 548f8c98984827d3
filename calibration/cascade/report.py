"""The HTML section of `judge escalate`: each judge's risk-coverage curve per criterion with its chosen threshold,
the thresholds, the tested path, the signals compared, and the cost against the strongest judge alone.

Imported only when a report is asked for (matplotlib comes with the figures of calibration.html_kit).
"""

from __future__ import annotations

import html

import numpy as np

from ..html_kit import grid as _grid
from ..html_kit import image as _img
from ..html_kit import note as _note
from ..html_kit import png as _png
from ..html_kit import table as _table


def risk_coverage_figure(result) -> str:
    curves = result.risk_coverage
    criteria = list(dict.fromkeys(curves["criterion"]))
    figure, axes = _grid(len(criteria), width=4.6, height=3.4, columns=2)
    for axis, criterion in zip(axes, criteria):
        part = curves[curves["criterion"] == criterion]
        for judge, rows in part.groupby("judge", sort=False):
            axis.plot(rows["coverage"], rows["agreement"], marker=".", label=f"{judge} ({rows['signal'].iloc[0]})")
        chosen = result.thresholds[(result.thresholds["criterion"] == criterion)
                                   & (result.thresholds["judge"] == "cascade")]
        if len(chosen) and chosen["calibration_decided"].iloc[0]:
            axis.plot([chosen["unlabelled_share"].iloc[0]], [chosen["agreement"].iloc[0]], "k*", markersize=11,
                      label="cascade (chosen)")
        axis.axhline(1 - result.alpha, color="#888", linewidth=0.8, linestyle="--")
        axis.set(title=criterion, xlabel="coverage (share accepted)", ylabel="agreement with humans",
                 xlim=(0, 1.02))
        axis.legend(fontsize=7)
    return _png(figure)


def escalate_section(result) -> str:
    parts = ["<h2>Escalate: what stands without a human</h2>",
             _note(f"Guarantee, per criterion: with probability >= {1 - result.delta:g} over the draw of the "
                   f"calibration set, the verdicts the cascade accepts agree with humans at >= {1 - result.alpha:g}. "
                   "One fixed-sequence exact binomial test along a path through the judges' joint thresholds, fixed "
                   "from the unlabelled cells' confidences before any label is read. The labelled cells must be a "
                   "random sample of the cells decided."),
             "<ul>" + "".join(f"<li>{html.escape(c)}: agreement = {html.escape(a)}; "
                              f"{result.coverage(c):.1%} of the unlabelled cells decided without humans</li>"
                              for c, a in result.agreement.items()) + "</ul>"]
    if len(result.risk_coverage):
        parts.append(_img("risk-coverage per judge", risk_coverage_figure(result)))
        parts.append(_note("Each judge alone on the calibration cells: the share it would accept at each threshold "
                           "of its confidence and their agreement with humans; dashed: 1 - alpha; star: the "
                           "cascade's chosen point (its coverage of the unlabelled cells, its calibration agreement)."))
    parts += ["<h3>Thresholds</h3>", _table(result.thresholds.replace([np.inf], np.nan)),
              "<h3>Signals (AUROC of agreement on the calibration cells; shown, never used to choose)</h3>",
              _table(result.signals), "<h3>Cost</h3>", _table(result.cost),
              "<h3>The tested path</h3>", _table(result.path[result.path["tested"]].replace([np.inf], np.nan))]
    parts += [f"<p class=note>Warning: {html.escape(w)}</p>" for w in result.warnings]
    return "".join(parts)
