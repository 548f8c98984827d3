"""Each confidence signal of `judge escalate` (calibration.cascade.verdicts._confidence) on exact small cases: what
the module docstring and --help say each one is, including the cases where a judge recorded nothing usable (then
the verdict is never accepted on that signal: confidence 0), and a missing verdict (no confidence at all)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import calibration
from calibration.cascade.verdicts import _confidence


def row(**fields):
    return SimpleNamespace(**{"probs": None, "samples": None, "forward": None, "swapped": None, **fields})


# (the judge's row, its verdict, kind, signal, tolerance, the other judges' verdicts, the confidence)
CASES = [
    (row(), None, "likert", "probs", 0.5, [], np.nan),  # no verdict: no confidence whatever the signal
    (row(), 3.0, "likert", "none", 0.5, [], 1.0),
    (row(probs={"2": 0.2, "3": 0.5, "4": 0.3}), 3.0, "likert", "probs", 0.5, [], 0.5),
    (row(probs={"2": 0.2, "3": 0.5, "4": 0.3}), 3.0, "likert", "probs", 1.0, [], 1.0),  # within 1 point: all three
    (row(probs={"2": 0.2, "3": 0.5, "x": 0.3}), 2.5, "likert", "probs", 0.5, [], 0.7),  # 2 and 3, not a non-number
    (row(probs={}), 3.0, "likert", "probs", 0.5, [], 0.0),
    (row(probs="not a dict"), 3.0, "likert", "probs", 0.5, [], 0.0),
    (row(probs={"yes": 0.8, "no": 0.2}), "yes", "categorical", "probs", 0.5, [], 0.8),
    (row(probs={"yes": 0.8, "no": 0.2}), "maybe", "categorical", "probs", 0.5, [], 0.0),
    (row(samples=[3, 3, 4, 2]), 3.0, "likert", "samples", 0.5, [], 0.5),
    (row(samples=[3, 3, 4, 2]), 3.0, "likert", "samples", 1.0, [], 1.0),
    (row(samples=["yes", "no", "yes"]), "yes", "categorical", "samples", 0.5, [], 2 / 3),
    (row(samples=[3]), 3.0, "likert", "samples", 0.5, [], 0.0),  # one sample is no agreement of re-asks
    (row(samples=[3, 3]), 3.0, "likert", "samples", 0.5, [], 1.0),  # two are
    (row(samples=[3, None, 3]), 3.0, "likert", "samples", 0.5, [], 2 / 3),  # an unparsed sample never agrees
    (row(samples=["yes", None, "no"]), "yes", "categorical", "samples", 0.5, [], 1 / 3),
    (row(samples=None), 3.0, "likert", "samples", 0.5, [], 0.0),
    (row(forward="1", swapped="1"), "1", "pairwise", "order", 0.5, [], 1.0),
    (row(forward="1", swapped="2"), "0", "pairwise", "order", 0.5, [], 0.0),
    (row(forward="1", swapped=None), "1", "pairwise", "order", 0.5, [], 0.0),
    (row(forward=np.nan, swapped="1"), "1", "pairwise", "order", 0.5, [], 0.0),
    (row(), 3.0, "likert", "jury", 0.5, [3.0, 3.5, 4.0, None], 2 / 3),  # an absent juror is not a vote
    (row(), 3.0, "likert", "jury", 1.0, [3.0, 3.5, 4.0], 1.0),
    (row(), "yes", "categorical", "jury", 0.5, ["yes", "no"], 0.5),
    (row(), "yes", "categorical", "jury", 0.5, [None, None], 0.0),
]


@pytest.mark.parametrize("judge_row, verdict, kind, signal, tolerance, jury, expected", CASES)
def test_each_signal_is_the_share_its_help_describes(judge_row, verdict, kind, signal, tolerance, jury, expected):
    assert _confidence(judge_row, verdict, kind, signal, tolerance, jury) == pytest.approx(expected, nan_ok=True)


def test_the_risk_coverage_figure_draws_each_judges_curve_and_the_cascades_point(monkeypatch):
    """Read back from matplotlib: per criterion, each judge's (coverage, agreement) curve as the risk_coverage table
    has it, the cascade's chosen point at its unlabelled share and agreement, the 1 - alpha line. Found by the seed-7
    draw (a figure drawing the other criteria's curves passed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from test_escalate import JUDGES, LABELS

    import calibration
    from calibration.cascade import report

    figures = []
    monkeypatch.setattr(report, "_png", lambda figure: figures.append(figure) or "")
    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1)
    report.risk_coverage_figure(result)
    axis, = [a for a in figures[0].axes if a.get_title()]
    curves = result.risk_coverage[result.risk_coverage["criterion"] == axis.get_title()]
    lines = {line.get_label(): line for line in axis.lines}
    for judge, rows in curves.groupby("judge"):
        line = lines[f"{judge} ({rows['signal'].iloc[0]})"]
        assert line.get_xdata().tolist() == pytest.approx(rows["coverage"].tolist())
        assert line.get_ydata().tolist() == pytest.approx(rows["agreement"].tolist())
    cascade = result.thresholds.set_index(["criterion", "judge"]).loc[(axis.get_title(), "cascade")]
    star = lines["cascade (chosen)"]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == pytest.approx((cascade["unlabelled_share"],
                                                                        cascade["agreement"]))
    assert [line.get_ydata()[0] for line in axis.lines if line.get_linestyle() == "--"] == pytest.approx([0.8])
    assert axis.get_xlim()[0] == 0.0  # coverage from none accepted
    plt.close(figures[0])


def test_tokens_are_counted_when_a_backend_records_only_one_side_of_the_usage(tmp_path):
    """A judgment whose usage has prompt tokens and no completion tokens (or the reverse) still costs its tokens; one
    with neither records none. Found by the seed-7 draw (a rule needing both passed)."""
    import json

    from test_escalate import JUDGES

    from calibration.cascade.walk import _tokens

    lines = JUDGES["small"].read_text(encoding="utf-8").splitlines()[:3]
    rows = [json.loads(line) for line in lines]
    for row, usage in zip(rows, ({"prompt_tokens": 300, "completion_tokens": 0},
                                 {"prompt_tokens": 0, "completion_tokens": 12},
                                 {"prompt_tokens": 0, "completion_tokens": 0})):
        row["usage"] = usage
    path = tmp_path / "judge.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert sorted(_tokens(path).values()) == [12.0, 300.0]


@pytest.mark.parametrize("name", ["judge.jsonl", "judge.JSONL", "judge.out", "judge"])  # .json/.toml: run options
def test_tokens_are_counted_for_a_judgments_file_of_any_name_but_csv(tmp_path, name):
    """calibration.io reads any judge file but a CSV as judgments JSONL; its tokens are counted alike (they were
    counted only for a name ending .jsonl, so a cascade's cost table said 0 tokens for the same verdicts)."""
    import json

    from test_escalate import JUDGES

    from calibration.cascade.walk import _tokens
    from calibration.io import load_judge_scores

    rows = [json.loads(line) for line in JUDGES["small"].read_text(encoding="utf-8").splitlines()[:2]]
    for row in rows:
        row["usage"] = {"prompt_tokens": 100, "completion_tokens": 5}
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert len(load_judge_scores(path)) == 2  # read as judgments, so its tokens must count
    assert sorted(_tokens(path).values()) == [105.0, 105.0]
    csv = tmp_path / "scores.csv"
    csv.write_text("item_id,system,criterion,score\nd1,a,coherence,3\n", encoding="utf-8")
    assert _tokens(csv) == {}


def test_the_verdict_written_for_a_cell_is_that_of_the_judge_that_decided_it():
    """decisions.csv's verdict is the verdict of the judge named in decided_by (read back from that judge's own file),
    never another judge's: here the two judges disagree on 65 of the 172 cells they decide, on cells each of them
    decides, so writing the first judge's, the last judge's or any other judge's verdict is caught."""
    import io

    from test_escalate import JUDGES, LABELS

    from calibration.io import load_judge_scores

    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1)
    written = pd.read_csv(io.StringIO(result.decisions_csv()), keep_default_na=False)
    files = {n: load_judge_scores(p).set_index(["item_id", "system", "criterion"])["score"] for n, p in JUDGES.items()}
    kept = written[written["decided_by"] != "human"]
    own = [files[j][(i, s, c)] for i, s, c, j in zip(kept["item_id"], kept["system"], kept["criterion"],
                                                    kept["decided_by"])]
    assert np.allclose(kept["verdict"].astype(float), own, atol=5e-6)
    assert (written.loc[written["decided_by"] == "human", "verdict"] == "").all()  # humans decide: no verdict
    for judge, other in (("small", "large"), ("large", "small")):  # the check has teeth both ways
        mine = kept[kept["decided_by"] == judge]
        theirs = [files[other][(i, s, c)] for i, s, c in zip(mine["item_id"], mine["system"], mine["criterion"])]
        assert not np.allclose(mine["verdict"].astype(float), theirs, atol=5e-6)


def test_the_help_groups_its_options_and_the_help_and_summary_fit_120_columns(monkeypatch):
    """`judge escalate --help`: its 18 options in named groups, every line (usage, options, examples, epilog) within 120
    columns on a 120-column terminal; the printed summary's lines too."""
    import argparse

    from test_escalate import JUDGES, LABELS

    from judge.cli import build_parser

    monkeypatch.setenv("COLUMNS", "120")
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    parser = verbs["escalate"]
    groups = {g.title: [a.option_strings[0] for a in g._group_actions] for g in parser._action_groups}
    assert groups["judges and labels"] == ["--judge", "--base-url", "--human"]
    assert {"--alpha", "--delta", "--units", "--signal"} <= set(groups["the guarantee"])
    assert {"--output", "--output-dir", "--report"} <= set(groups["outputs"])
    assert sum(len(v) for k, v in groups.items() if k != "options") == 18  # every option in a named group
    text = parser.format_help()
    assert max(len(line) for line in text.splitlines()) <= 120, max(text.splitlines(), key=len)
    summary = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, random_dialogues=3).text()
    assert max(len(line) for line in summary.splitlines()) <= 120, max(summary.splitlines(), key=len)
    assert any(line.startswith("  test: testing by betting over 60 labelled dialogues")
               for line in summary.splitlines())


def test_the_signals_table_lists_every_signal_each_judges_file_records_and_marks_the_one_used():
    """signals.csv: for each judge, every signal its file records for most verdicts (read here from the JSONL
    itself), the jury (two judges) and none, each on the calibration cells, with exactly the one the cascade used
    marked. Found by a fresh draw (a table with no signal rows at all passed)."""
    import json

    from test_escalate import JUDGES, LABELS

    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1)
    used = result.thresholds.set_index("judge")["signal"]
    for name, path in JUDGES.items():
        records = [json.loads(line) for line in path.read_text().splitlines()]
        recorded = {"probs": np.mean([bool(r.get("probs")) for r in records]) >= 0.5,
                    "samples": np.mean([len(r.get("samples") or []) >= 2 for r in records]) >= 0.5}
        part = result.signals[result.signals["judge"] == name].set_index("signal")
        assert set(part.index) == {s for s, has in recorded.items() if has} | {"jury", "none"}, name
        assert part["used"].sum() == 1 and part.index[part["used"]].item() == used[name]
        assert part.loc["none", "auroc"] == 0.5 and part.loc["none", "distinct_values"] == 1
        assert (part["n"] == part["n"].iloc[0]).all() and part["n"].iloc[0] > 0
