"""A mean's interval stays on the scale (issue 43 part 7): `judge estimate` clips a system's PPI++ and human-only
bounds to the rubric's (or --scale's) range and says so in interval_note. The true mean lies on the scale, so
clipping can only move a bound toward it: planted and recovered at the smallest n printed (MIN_LABELLED labels),
every interval that held the truth before clipping holds it after, and the coverage is the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.study.estimate_tables import on_scale
from calibration.study.ppi import MIN_LABELLED, ppi_mean

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"


def _table(result) -> pd.DataFrame:
    return pd.DataFrame({"system": [f"s{k}" for k in range(len(result.estimate))], "interval_note": "",
                         "ci_low": result.ci_low, "ci_high": result.ci_high,
                         "human_only_ci_low": result.human_only_ci_low,
                         "human_only_ci_high": result.human_only_ci_high})


@pytest.mark.parametrize("n", [MIN_LABELLED, 6])
def test_clipping_to_the_scale_keeps_every_covering_interval_covering(n):
    """Likert labels bunched near the top (truth 4.4 on 1..5), a judge that tracks them: 4,000 studies of n labelled
    dialogues of 60 judged. Clipping moves out-of-scale bounds onto 1 or 5 (it happens here), never past the truth:
    covered before <=> covered after, study by study, and no bound leaves [1, 5]."""
    rng = np.random.default_rng(n)
    studies, judged = 4000, 60
    probabilities = np.array([0.02, 0.03, 0.05, 0.30, 0.60])
    truth = float(probabilities @ np.arange(1, 6))
    labels = rng.choice(np.arange(1.0, 6.0), size=(studies, judged), p=probabilities)
    judge = labels + rng.normal(0.0, 0.8, labels.shape)
    human = np.full_like(labels, np.nan)
    chosen = np.argsort(rng.random(labels.shape), axis=1)[:, :n]
    np.put_along_axis(human, chosen, np.take_along_axis(labels, chosen, axis=1), axis=1)
    result = ppi_mean(human, judge, 0.95, bounds=(1.0, 5.0))
    table = _table(result)
    before = table.copy()
    clipped = on_scale(table, (1.0, 5.0))
    shown = before["ci_low"].notna()
    assert shown.mean() > 0.5 and len(clipped) > 0.01 * studies  # the check is about something
    for low, high in (("ci_low", "ci_high"), ("human_only_ci_low", "human_only_ci_high")):
        covered_before = (before[low] <= truth) & (truth <= before[high])
        covered_after = (table[low] <= truth) & (truth <= table[high])
        assert (covered_before == covered_after).all()
        assert ((table[low] >= 1.0) & (table[high] <= 5.0))[table[low].notna()].all()
    assert (table.loc[table["system"].isin(clipped), "interval_note"].str.contains("clipped to the scale")).all()
    assert (table.loc[~table["system"].isin(clipped), "interval_note"] == "").all()
    unchanged = ~table["system"].isin(clipped)
    pd.testing.assert_frame_equal(table[unchanged], before[unchanged])


def test_no_scale_no_clipping():
    table = pd.DataFrame({"system": ["a"], "interval_note": [""], "ci_low": [-3.0], "ci_high": [9.0],
                          "human_only_ci_low": [-4.0], "human_only_ci_high": [10.0]})
    assert on_scale(table, None) == [] and table["ci_high"].item() == 9.0


def test_the_verb_clips_the_example_and_says_so(tmp_path):
    """examples/study with its plan: clarity/alpha's t interval reaches 5.198 on the 1..5 rubric; estimates.csv has
    5.0, the reason in interval_note, the same columns as before, and the printed table a footnote."""
    import io

    from calibration import estimate
    from calibration.study.estimate import print_estimate
    from calibration.study.estimate_tables import ESTIMATE_COLUMNS

    result = estimate(STUDY / "judgments.jsonl", STUDY / "labels.csv", plan=STUDY / "plan")
    table = result.estimates.set_index(["criterion", "system"])
    assert list(result.estimates.columns) == ESTIMATE_COLUMNS
    row = table.loc[("clarity", "alpha")]
    assert row["ci_high"] == 5.0 and row["human_only_ci_high"] == 5.0
    assert row["interval_note"].startswith("clipped to the scale [1, 5]")
    assert ((result.estimates[["ci_low", "ci_high"]] >= 1.0) & (result.estimates[["ci_low", "ci_high"]] <= 5.0)
            ).all().all()
    assert any("interval clipped to the scale for alpha" in note for note in result.notes)
    printed = io.StringIO()
    print_estimate(result, printed)
    text = printed.getvalue()
    assert "] clipped to the scale [1, 5]" in text
    tables = text.split("\nLabels on targeted")[0].split("Per system")[1]
    assert max(len(line) for line in tables.splitlines()) <= 120


def test_screen_means_stay_within_the_judged_scores_without_clipping():
    """screen's systems.csv intervals are percentiles of bootstrap means, each a mean of the judge's own scores, so
    they lie within the lowest and highest score the system got, on the scale by construction: nothing to clip,
    and no interval_note column to say so (systems.csv keeps its columns)."""
    from calibration import screen
    from calibration.io import load_judge_scores

    result = screen(STUDY / "judgments.jsonl")
    scores = load_judge_scores(STUDY / "judgments.jsonl")
    scores = scores[scores["status"] == "ok"].groupby(["criterion", "system"])["score"].agg(["min", "max"])
    table = result.systems.set_index(["criterion", "system"]).join(scores)
    assert ((table["ci_low"] >= table["min"]) & (table["ci_high"] <= table["max"])).all()
    assert "interval_note" not in result.systems.columns


@pytest.mark.parametrize("verb", ["screen", "estimate"])
def test_help_shows_the_options_in_named_groups(verb, capsys):
    """Both verbs have more than 12 options: --help lists them under named groups, every option in one."""
    from judge.cli import main

    with pytest.raises(SystemExit):
        main([verb, "--help"])
    text = capsys.readouterr().out
    sections = [line[:-1] for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert {"judgments", "human labels", "output"} <= set(sections) and len(sections) >= 5, sections
    options = text.split("\noptions:\n")[1].split("\n\n")[0]
    assert options.strip().startswith("-h, --help") and "--judgments" not in options
