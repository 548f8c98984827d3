"""The report figures draw what the tables say (calibration.trust.report, calibration.study.report): every point at
its estimate, every interval from its low to its high bound, each row at its tick with its label, series side by
side, reference lines at their null, the scale's edges and the clipping where one is given, a hollow point where no
interval holds. Read back from the matplotlib objects (html_kit.png captured), for tables built here.

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py (offsets, signs and
bounds in the drawing code), not against any one of them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from calibration import html_kit  # noqa: E402
from calibration.trust import report as trust_report  # noqa: E402


@pytest.fixture
def figures(monkeypatch):
    kept = []

    def keep(figure):
        kept.append(figure)
        return "data:image/png;base64,"

    monkeypatch.setattr(trust_report, "_png", keep)
    monkeypatch.setattr(html_kit, "png", keep)
    yield kept
    for figure in kept:
        plt.close(figure)


def drawn(axis):
    """{series label: [(x, y, low, high)]} of the error bars, and [(label, x, y)] of plain (hollow) points."""
    bars = {}
    for container in axis.containers:
        line, _, (segments,) = container.lines
        xs, ys = line.get_xdata(), line.get_ydata()
        spans = [(min(s[0][0], s[1][0]), max(s[0][0], s[1][0])) for s in segments.get_segments()]
        bars[container.get_label()] = [(float(x), float(y), lo, hi) for x, y, (lo, hi) in zip(xs, ys, spans)]
    hollow = [(line.get_label(), float(x), float(y)) for line in axis.lines if line.get_label().endswith("interval")
              for x, y in zip(line.get_xdata(), line.get_ydata())]
    return bars, hollow


def same(got, expected):
    np.testing.assert_allclose(np.array(got, float).reshape(-1, 4), np.array(expected, float).reshape(-1, 4),
                               atol=1e-9)
    return True


def dashed(axis):
    """Where the reference lines are (0, or 50%)."""
    return sorted(float(line.get_xdata()[0]) for line in axis.lines if line.get_linestyle() == "--")


def dotted(axis):
    """Where the scale's edges are."""
    return sorted(float(line.get_xdata()[0]) for line in axis.lines if line.get_linestyle() == ":")


def ticks(axis):
    return [t.get_text() for t in axis.get_yticklabels()], list(axis.get_yticks())


def test_the_length_figure_draws_each_series_at_its_numbers_side_by_side(figures):
    length = pd.DataFrame({"criterion": ["a", "b", "c"], "judge_slope": [0.3, -0.2, np.nan],
                           "judge_slope_ci_low": [0.1, -0.5, np.nan], "judge_slope_ci_high": [0.6, 0.1, np.nan],
                           "human_slope": [0.1, 0.0, np.nan], "human_slope_ci_low": [-0.1, -0.3, np.nan],
                           "human_slope_ci_high": [0.3, 0.2, np.nan], "excess_slope": [0.2, np.nan, np.nan],
                           "excess_ci_low": [0.05, np.nan, np.nan], "excess_ci_high": [0.4, np.nan, np.nan]})
    trust_report.length_figure(length)
    axis = figures[0].axes[0]
    bars, _ = drawn(axis)
    assert ticks(axis) == (["a", "b"], [0, 1])  # the criterion without a slope is left out
    offsets = {"judge": -0.15, "humans": 0.0, "excess beyond quality (2SLS)": 0.15}
    columns = {"judge": "judge_slope", "humans": "human_slope", "excess beyond quality (2SLS)": "excess_slope"}
    for name, points in bars.items():
        prefix = columns[name]
        low_name = "excess_ci_low" if prefix == "excess_slope" else prefix + "_ci_low"
        high_name = "excess_ci_high" if prefix == "excess_slope" else prefix + "_ci_high"
        expected = [(length.loc[k, prefix], k + offsets[name], length.loc[k, low_name], length.loc[k, high_name])
                    for k in range(2) if np.isfinite(length.loc[k, prefix])]
        assert same(points, expected), name
    assert dashed(axis) == [0.0]


def test_the_pairwise_and_effects_figures_draw_shares_against_a_half_and_effects_against_zero(figures):
    length = pd.DataFrame({"criterion": ["q"], "prefers_longer": [0.7], "prefers_longer_ci_low": [0.6],
                           "prefers_longer_ci_high": [0.8], "human_prefers_longer": [0.55],
                           "human_prefers_longer_ci_low": [0.4], "human_prefers_longer_ci_high": [0.7]})
    position = pd.DataFrame({"criterion": ["q", "q"], "stratum": ["all", "human gap < 0.5"], "flip_rate": [0.2, 0.3],
                             "ci_low": [0.1, 0.2], "ci_high": [0.3, 0.4], "first_shown_wins": [0.6, 0.9],
                             "first_shown_ci_low": [0.52, 0.8], "first_shown_ci_high": [0.68, 0.95]})
    trust_report.pairwise_figure(length, position)
    left, right = figures[0].axes[:2]
    left_bars, right_bars = drawn(left)[0], drawn(right)[0]
    assert sorted(left_bars) == ["humans", "judge"] and sorted(right_bars) == ["first shown wins", "order flips"]
    assert same(left_bars["judge"], [(0.7, -0.15, 0.6, 0.8)]) and same(left_bars["humans"], [(0.55, 0.15, 0.4, 0.7)])
    assert same(right_bars["order flips"], [(0.2, -0.15, 0.1, 0.3)])  # the stratum "all" only
    assert same(right_bars["first shown wins"], [(0.6, 0.15, 0.52, 0.68)])
    assert dashed(left) == [0.5] and dashed(right) == [0.5]
    frame = pd.DataFrame({"criterion": ["x", "y"], "e": [0.4, -0.1], "lo": [0.2, -0.3], "hi": [0.5, 0.2]})
    trust_report.effects_figure(frame, "e", "lo", "hi", "t", "points")
    axis = figures[1].axes[0]
    (only,) = drawn(axis)[0].values()
    assert same(only, [(0.4, 0, 0.2, 0.5), (-0.1, 1, -0.3, 0.2)])
    assert dashed(axis) == [0.0] and ticks(axis) == (["x", "y"], [0, 1])


def test_the_controlled_figure_sorts_systems_by_raw_mean_in_each_criterion(figures):
    controlled = pd.DataFrame({"criterion": ["c"] * 3 + ["d"] * 2, "system": ["s1", "s2", "s3", "s1", "s2"],
                               "raw_mean": [3.0, 2.0, 4.0, 1.0, 5.0], "raw_ci_low": [2.5, 1.5, 3.5, 0.5, 4.5],
                               "raw_ci_high": [3.5, 2.5, 4.5, 1.5, 5.5], "length_controlled": [3.1, 2.2, 3.8, 1.1, 4.9],
                               "lc_ci_low": [2.6, 1.7, 3.3, 0.6, 4.4], "lc_ci_high": [3.6, 2.7, 4.3, 1.6, 5.4]})
    trust_report.controlled_figure(controlled)
    for axis, criterion in zip(figures[0].axes, ["c", "d"]):
        part = controlled[controlled["criterion"] == criterion].sort_values("raw_mean").reset_index(drop=True)
        assert ticks(axis)[0] == part["system"].tolist()
        bars, _ = drawn(axis)
        assert same(bars["raw"], [(r.raw_mean, k - 0.15, r.raw_ci_low, r.raw_ci_high)
                                  for k, r in enumerate(part.itertuples())])
        assert same(bars["at equal length"], [(r.length_controlled, k + 0.15, r.lc_ci_low, r.lc_ci_high)
                                              for k, r in enumerate(part.itertuples())])


def test_the_study_figure_sorts_clips_to_the_scale_and_draws_a_hollow_point_without_an_interval(figures):
    frame = pd.DataFrame({"criterion": ["c"] * 3 + ["d"], "system": ["a", "b", "z", "a"],
                          "estimate": [3.0, 4.5, 2.0, 1.5], "ci_low": [2.0, 3.5, np.nan, 0.0],
                          "ci_high": [4.0, 5.6, np.nan, 2.5], "human_only": [3.2, 4.4, 2.1, 1.4],
                          "human_only_ci_low": [1.5, 3.0, 1.0, 0.5], "human_only_ci_high": [4.9, 5.9, 3.2, 2.4]})
    html_kit.intervals_figure(frame, "system", "estimate", "ci_low", "ci_high",
                                  ("human_only", "human_only_ci_low", "human_only_ci_high"), {"*": (1, 5)})
    first, second = figures[0].axes[:2]
    assert ticks(first) == (["z", "a", "b"], [0, 1, 2])  # lowest estimate at the bottom, best at the top
    bars, hollow = drawn(first)
    assert same(bars["with the judge (PPI++)"], [(3.0, 1.15, 2.0, 4.0), (4.5, 2.15, 3.5, 5.0)])
    assert same(bars["humans only"], [(2.1, -0.15, 1.0, 3.2), (3.2, 0.85, 1.5, 4.9), (4.4, 1.85, 3.0, 5.0)])
    assert hollow == [("with the judge (PPI++): no interval", 2.0, 0.15)]
    assert dotted(first) == [1.0, 5.0] and dashed(first) == [] and first.get_xlim() == pytest.approx((0.8, 5.2))
    assert same(drawn(second)[0]["with the judge (PPI++)"], [(1.5, 0.15, 1.0, 2.5)])  # 0 clipped to 1


def test_a_figure_of_differences_uses_the_scale_of_a_difference_and_a_line_at_zero(figures):
    frame = pd.DataFrame({"criterion": ["c", "c"], "pair": ["a - b", "b - c"], "estimate": [0.5, -3.95],
                          "ci_low": [-0.2, -5.0], "ci_high": [1.2, -3.5]})
    html_kit.intervals_figure(frame, "pair", "estimate", "ci_low", "ci_high", bounds={"c": (1, 5)}, zero=True)
    axis = figures[0].axes[0]
    assert dotted(axis) == [-4.0, 4.0] and axis.get_xlim() == pytest.approx((-4.4, 4.4))
    bars, _ = drawn(axis)
    assert same(bars["judge"], [(-3.95, 0, -4.0, -3.5), (0.5, 1, -0.2, 1.2)])
    assert dashed(axis) == [0.0]
    # without a scale nothing is clipped and no edge is drawn
    html_kit.intervals_figure(frame, "pair", "estimate", "ci_low", "ci_high", zero=True)
    axis = figures[1].axes[0]
    assert dotted(axis) == [] and dashed(axis) == [0.0] and same(drawn(axis)[0]["judge"],
                                                                 [(-3.95, 0, -5.0, -3.5), (0.5, 1, -0.2, 1.2)])


def test_an_estimate_beyond_the_scale_gets_no_bar_past_it(figures):
    """PPI can put an estimate outside the scale; its interval clipped to the scale then ends at the edge on the
    estimate's other side, and the bar goes from the estimate to the edge, not mirrored beyond it."""
    frame = pd.DataFrame({"criterion": ["c"], "system": ["a"], "estimate": [0.8], "ci_low": [0.2], "ci_high": [1.6]})
    html_kit.intervals_figure(frame, "system", "estimate", "ci_low", "ci_high", None, {"*": (1, 5)})
    bars, _ = drawn(figures[0].axes[0])
    (series,) = bars.values()
    (value, _, low, high), = series
    assert (value, low, high) == pytest.approx((0.8, 0.8, 1.6))


@pytest.mark.parametrize("rows", [1, 6, 40])
def test_a_panel_is_tall_enough_for_each_rows_tick_label(rows):
    """html_kit.rows_grid: at 7-point tick labels (0.1 in), each row gets at least three times its label's height,
    and a single row still gets a readable panel."""
    from calibration.html_kit import rows_grid

    figure, _ = rows_grid(1, rows)
    height = figure.get_size_inches()[1]
    plt.close(figure)
    assert height >= 2.4 and height / rows >= 0.3


def test_a_pairwise_audit_report_leaves_out_the_columns_no_pair_filled(figures):
    """Without human votes the length and position tables of a pairwise audit hold no human columns (all NaN),
    and every criterion's row stays. (Written after the report's mutation sweep let dropna's axis turn to rows.)"""
    from types import SimpleNamespace

    from calibration.trust.report import audit_section

    length = pd.DataFrame({"criterion": ["q", "r"], "prefers_longer": [0.7, 0.4], "prefers_longer_ci_low": [0.6, 0.3],
                           "prefers_longer_ci_high": [0.8, 0.5], "human_prefers_longer": [np.nan, np.nan],
                           "human_prefers_longer_ci_low": [np.nan, np.nan],
                           "human_prefers_longer_ci_high": [np.nan, np.nan]})
    position = pd.DataFrame({"criterion": ["q", "r"], "stratum": ["all", "all"], "flip_rate": [0.2, 0.1],
                             "ci_low": [0.1, 0.05], "ci_high": [0.3, 0.2], "first_shown_wins": [0.6, 0.5],
                             "first_shown_ci_low": [0.52, 0.4], "first_shown_ci_high": [0.68, 0.6],
                             "human_gap": [np.nan, np.nan]})
    result = SimpleNamespace(sentences=["s"], n_resamples=200, seed=0, noise=pd.DataFrame(), mode="pairwise",
                             length=length, position=position, self_preference=pd.DataFrame(), probes=None)
    page = audit_section(result)
    assert "human_prefers_longer" not in page and "human_gap" not in page
    assert page.count("<th>prefers_longer</th>") == 1 and page.count("<th>flip_rate</th>") == 1
    assert page.count("<td>q</td>") == 2 and page.count("<td>r</td>") == 2


def test_a_score_audit_report_draws_a_self_preference_without_an_interval_and_trims_the_block_table(figures):
    """A self-preference whose interval could not be had is still drawn (a hollow point), and the table of the
    position in the block leaves out its all-empty columns but no row. (Written after the report's mutation sweep
    let the figure's check read the interval's low end, and dropna's axis turn to rows.)"""
    from types import SimpleNamespace

    from calibration.trust.report import audit_section

    length = pd.DataFrame({"criterion": ["q"], "judge_slope": [np.nan]})
    position = pd.DataFrame({"criterion": ["q", "r"], "mode": ["block", "block"], "position_slope": [0.1, -0.2],
                             "position_slope_ci_low": [0.0, -0.4], "position_slope_ci_high": [0.2, 0.0],
                             "human_position_slope": [np.nan, np.nan]})
    own = pd.DataFrame({"criterion": ["q"], "self_preference": [0.3], "ci_low": [np.nan], "ci_high": [np.nan]})
    result = SimpleNamespace(sentences=["s"], n_resamples=200, seed=0, noise=pd.DataFrame(), mode="scores",
                             length=length, length_controlled=pd.DataFrame(), position=position,
                             self_preference=own, probes=None)
    page = audit_section(result)
    assert 'alt="self-preference"' in page
    (axis,) = figures[-1].axes
    assert [(label, x) for label, x, _ in drawn(axis)[1]] == [("effect: no interval", 0.3)]
    block = page[page.index("position in the block"):page.index("Audit: self-preference")]
    assert "human_position_slope" not in block and block.count("<td>q</td>") == 1 and block.count("<td>r</td>") == 1
