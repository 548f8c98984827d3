"""Properties of `judge select` (calibration.trust.select) that whole families of bugs break: each interval from the
replicates recomputed here (the dialogue resample counts drawn again from the seed, per-dialogue correlations by
scipy, weighted means by numpy), the label worth from scipy's r per system, the cross-fitted jury and picked judge
where the choice cannot depend on the split, invariances (a judge's scores moved and stretched, rows reordered, a
judge listed twice, a judge turned upside down in the jury), and the MIN_DIALOGUES boundary.

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py, not against any one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from resampling import counts_from_seed, expanded
from scipy import stats
from test_select import toy

from calibration.trust.select import BEST_PICKED, JURY_ALL, JURY_BEST, MIN_DIALOGUES, select


def grids(human, frame):
    merged = frame.merge(human, on=["item_id", "system"], suffixes=("_j", "_h"))
    judge = merged.pivot(index="item_id", columns="system", values="score_j")
    people = merged.pivot(index="item_id", columns="system", values="score_h")
    return judge.to_numpy(float), people.to_numpy(float)


@pytest.fixture(scope="module")
def study():
    human, judges = toy(np.random.default_rng(31), n_items=24, n_systems=5)
    return human, judges


def test_summary_level_intervals_are_the_expanded_percentiles_of_the_resampled_mean_correlation(study):
    human, judges = study
    resamples, confidence = 300, 0.9
    result = select(human, judges, bootstrap=resamples, seed=4, confidence=confidence).selection.set_index("judge")
    n = 24
    counts = counts_from_seed(4, n, resamples)
    for name, frame in judges.items():
        judge, people = grids(human, frame)
        per_dialogue = np.array([stats.pearsonr(j, h)[0] for j, h in zip(judge, people)])
        replicates = counts @ per_dialogue / counts.sum(1)
        row = result.loc[name]
        assert row["estimate"] == pytest.approx(per_dialogue.mean())
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(expanded(replicates, confidence, n), abs=1e-10)
        assert row["n_dialogues"] == n and row["n_common"] == n * 5 and row["n_compared"] == n


def test_item_level_intervals_are_percentiles_of_the_frequency_weighted_correlation(study):
    human, judges = study
    result = select(human, judges, level="item", bootstrap=200, seed=6).selection.set_index("judge")
    counts = counts_from_seed(6, 24, 200)
    for name, frame in judges.items():
        judge, people = grids(human, frame)
        replicates = []
        for weights in counts:
            w = np.repeat(weights, 5).astype(int)
            replicates.append(np.corrcoef(np.repeat(judge.ravel(), w), np.repeat(people.ravel(), w))[0, 1])
        low, high = np.percentile(replicates, [2.5, 97.5])
        row = result.loc[name]
        assert row["estimate"] == pytest.approx(stats.pearsonr(judge.ravel(), people.ravel())[0])
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-10)


def test_label_worth_is_the_mean_adjusted_r_squared_per_system_over_dialogues(study):
    human, judges = study
    result = select(human, judges, bootstrap=200).selection.set_index("judge")
    for name, frame in judges.items():
        judge, people = grids(human, frame)
        n = judge.shape[0]
        r2 = np.array([stats.pearsonr(judge[:, s], people[:, s])[0] ** 2 for s in range(judge.shape[1])])
        adjusted = np.maximum(0.0, 1 - (1 - r2) * (n - 1) / (n - 2))
        assert result.loc[name, "label_worth"] == pytest.approx(100 * adjusted.mean())


def test_moving_and_stretching_a_judge_reordering_rows_or_listing_it_twice_changes_nothing(study):
    human, judges = study
    first = select(human, judges, bootstrap=200).selection
    moved = {name: frame.assign(score=3.0 * frame["score"] - 7.0).sample(frac=1.0, random_state=k)
             for k, (name, frame) in enumerate(judges.items())}
    again = select(human.sample(frac=1.0, random_state=9), moved, bootstrap=200).selection
    pd.testing.assert_frame_equal(first, again, rtol=1e-9, atol=1e-12)
    twice = dict(judges, copy=judges["judge0"])
    rows = select(human, twice, bootstrap=200).selection.set_index("judge")
    columns = ["estimate", "ci_low", "ci_high", "in_best_set", "label_worth", "compared_estimate"]
    assert rows.loc["copy", columns].tolist() == pytest.approx(rows.loc["judge0", columns].tolist())


def test_the_cross_fitted_rows_where_the_choice_cannot_depend_on_the_split():
    """judge0 (noise 0.2) beats the others (noise 1.5, and the same upside down) on any half: the picked judge and
    the best-set jury are judge0 itself
    (correlation does not see the standardising), and the all-judge jury is the mean of the standardised judges,
    a judge that disagrees with humans entering turned round."""
    human, judges = toy(np.random.default_rng(32), n_items=30, n_systems=5, noise=(0.2, 1.5))
    upside_down = dict(judges, judge2=judges["judge1"].assign(score=-judges["judge1"]["score"]))
    result = select(human, upside_down, bootstrap=200).selection.set_index("judge")
    assert result.loc[BEST_PICKED, "estimate"] == pytest.approx(result.loc["judge0", "estimate"])
    assert result.loc[JURY_BEST, "estimate"] == pytest.approx(result.loc["judge0", "estimate"])
    standardised = []
    for name, frame in upside_down.items():
        judge, people = grids(human, frame)
        z = (judge - judge.mean()) / judge.std()
        standardised.append(-z if name == "judge2" else z)
    jury = np.mean(standardised, axis=0)
    expected = np.mean([stats.pearsonr(j, h)[0] for j, h in zip(jury, people)])
    assert result.loc[JURY_ALL, "estimate"] == pytest.approx(expected)
    assert (result.loc[[JURY_ALL, JURY_BEST, BEST_PICKED], "kind"] == "cross-fitted").all()
    assert not result.loc[[JURY_ALL, JURY_BEST, BEST_PICKED], "in_best_set"].any()


@pytest.mark.parametrize("dialogues", [MIN_DIALOGUES - 1, MIN_DIALOGUES])
def test_intervals_best_set_and_label_worth_from_min_dialogues_on(dialogues):
    human, judges = toy(np.random.default_rng(5), n_items=dialogues, n_systems=4)
    table = select(human, judges, bootstrap=200).selection
    rows = table[table["kind"] == "judge"]
    if dialogues < MIN_DIALOGUES:
        assert rows["ci_low"].isna().all() and rows["label_worth"].isna().all() and rows["in_best_set"].all()
        assert rows["p_adjusted"].isna().all() and (table["kind"] == "judge").all()  # no jury either
        assert f"{dialogues} dialogues to compare" in rows["note"].iloc[0]
    else:
        assert rows["ci_low"].notna().all() and rows["label_worth"].notna().all()
        assert (table["kind"] == "cross-fitted").sum() == 3 and not rows["note"].iloc[0]


def test_dialogues_where_a_judge_does_not_vary_are_left_out_of_the_comparison_for_every_judge(study):
    human, judges = study
    flat = judges["judge1"].copy()
    flat.loc[flat["item_id"].isin(["d00", "d01", "d02"]), "score"] = 3.0  # one score for every summary there
    table = select(human, dict(judges, judge1=flat), bootstrap=200).selection.set_index("judge")
    assert (table.loc[list(judges), "n_compared"] == 21).all()
    judge, people = grids(human, judges["judge0"])
    kept = [stats.pearsonr(j, h)[0] for k, (j, h) in enumerate(zip(judge, people)) if k >= 3]
    assert table.loc["judge0", "compared_estimate"] == pytest.approx(np.mean(kept))
    assert table.loc["judge0", "estimate"] == pytest.approx(np.mean(
        [stats.pearsonr(j, h)[0] for j, h in zip(judge, people)]))


def test_the_csv_is_the_selection_table_and_the_best_set_is_listed_best_first(tmp_path):
    """selection.csv holds exactly the table's columns (no index column) and reads back as it; best_set lists the
    judges of the best set by estimate, highest first, whatever order they were given in."""
    human, judges = toy(np.random.default_rng(33), n_items=24, n_systems=5, noise=(1.0, 1.1, 1.2, 4.0))
    given = dict(reversed(list(judges.items())))  # the worst judge first
    result = select(human, given, bootstrap=200, seed=4)
    result.write(tmp_path)
    back = pd.read_csv(tmp_path / "selection.csv", keep_default_na=False, na_values=[""])
    assert list(back.columns) == list(result.selection.columns)
    assert back["estimate"].to_numpy() == pytest.approx(result.selection["estimate"].to_numpy())
    rows = result.selection[(result.selection["kind"] == "judge")].set_index("judge")
    in_set = rows[rows["in_best_set"].astype(bool)]
    assert result.best_set("quality") == list(in_set["estimate"].sort_values(ascending=False).index)
    assert len(result.best_set("quality")) >= 2 and result.best_set("quality")[0] == rows["estimate"].idxmax()


@pytest.mark.parametrize("level, statistic, method", [
    ("summary", "pearson", "95% percentile bootstrap CI"),
    ("item", "kendall", "95% percentile bootstrap CI"),
    ("system", "pearson", "95% CI for the population of systems these are drawn from (Fisher's z over the systems' "
                          "means, widened for the means' noise)"),
    ("system", "spearman", "95% CI for the population of systems these are drawn from (percentile bootstrap over "
                           "dialogues and systems, widened for the means' noise)")])
def test_the_header_names_how_the_intervals_were_made_at_each_level(level, statistic, method):
    """At the system level the interval is for the population of systems (Fisher's z for Pearson, the two-way
    bootstrap otherwise); at the other levels the dialogue bootstrap's percentiles."""
    human, judges = toy(np.random.default_rng(32), n_items=12, n_systems=6)
    result = select(human, judges, level=level, statistic=statistic, bootstrap=100)
    header = " ".join(result.text().split("\n\n")[0].split())  # the header, wrapped to 120 columns, unwrapped
    assert header.startswith(
        f"Agreement with humans: {statistic} at {level} level, {method} (100 resamples of dialogues")


def test_each_judges_line_shows_its_adjusted_p_value_and_the_best_none(study):
    """A judge's line prints p_adj (its simultaneous-bounds p-value of being below another) when it has one; the
    observed best has none and its line none."""
    human, judges = study
    result = select(human, judges, bootstrap=200, seed=4)
    lines = {line.split()[1] if line.startswith(" *") else line.split()[0]: line
             for line in result.text().splitlines() if line.startswith(("  ", " *")) and "judge" in line}
    rows = result.selection[result.selection["kind"] == "judge"].set_index("judge")
    assert set(rows.index) <= set(lines)
    assert (result.selection["note"] == "").all() and "note:" not in result.text()  # no note, no empty note line
    for name, row in rows.iterrows():
        if np.isfinite(row["p_adjusted"]):
            assert f"p_adj {row['p_adjusted']:.3f}" in lines[name]
        else:
            assert "p_adj" not in lines[name] and name == rows["estimate"].idxmax()
