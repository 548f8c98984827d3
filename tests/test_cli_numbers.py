"""`judge estimate`'s and `judge screen`'s output files, value by value.

estimates.csv / differences.csv are compared with the estimator called directly (calibration.study.estimate) and
with a hand computation from the raw files (pandas, the PPI++ formulas written out again, scipy's t quantile);
screen's systems.csv means with pandas and its intervals with a bootstrap of our own. Every interval must hold its
estimate (ci_low <= estimate <= ci_high); an interval may be missing only where `interval_note` says why. Extra
columns are ignored, so new ones can be added.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from judge.cli import main

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"


def run(verb: str, *args: str) -> None:
    assert main([verb, *args]) == 0


def raw_judgments(path: Path) -> pd.DataFrame:
    """The JSONL read by hand: one row per (dialogue, system, criterion); failures and N/A marked."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    frame = pd.DataFrame([{"item_id": r["id"], "system": r["system"], "criterion": r["criterion"],
                           "score": r["score"], "na": bool(r.get("na")), "failed": r.get("error") is not None}
                          for r in rows])
    return frame


def check_intervals(frame: pd.DataFrame, pairs=(("ci_low", "ci_high"), ("human_only_ci_low", "human_only_ci_high")),
                    what="estimate") -> None:
    """Every interval is ordered and holds the point estimate; NaN bounds only with a note saying why."""
    for low, high in pairs:
        missing = frame[low].isna() | frame[high].isna()
        if missing.any():
            assert "interval_note" in frame.columns, frame[missing]
            assert frame.loc[missing, "interval_note"].fillna("").str.len().gt(0).all(), frame[missing]
        ok = frame[~missing]
        assert (ok[low] <= ok[high]).all(), ok[ok[low] > ok[high]]
        point = what if low == "ci_low" else "human_only"
        assert ((ok[low] <= ok[point] + 1e-12) & (ok[point] <= ok[high] + 1e-12)).all(), ok


def ppi_by_hand(y: np.ndarray, f: np.ndarray, confidence=0.95) -> dict:
    """PPI++ for one mean, written out again: y NaN where unlabelled, f NaN where not a unit."""
    unit = ~np.isnan(f)
    labelled = unit & ~np.isnan(y)
    unlabelled = unit & ~labelled
    yl, fl, fu = y[labelled], f[labelled], f[unlabelled]
    n, m = len(yl), len(fu)
    var_f = np.var(f[unit], ddof=1)
    cov = np.cov(yl, fl, ddof=1)[0, 1]
    lam = cov / (np.var(fl, ddof=1) + n / m * var_f) if m >= 2 else 0.0
    estimate = yl.mean() + lam * (fu.mean() - fl.mean()) if m >= 2 else yl.mean()
    se = np.sqrt(lam ** 2 * var_f / m + np.var(yl - lam * fl, ddof=1) / n) if m >= 2 else np.std(yl, ddof=1) / np.sqrt(n)
    human_se = np.std(yl, ddof=1) / np.sqrt(n)
    q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    return {"estimate": estimate, "ci_low": estimate - q * se, "ci_high": estimate + q * se,
            "human_only": yl.mean(), "human_only_ci_low": yl.mean() - q * human_se,
            "human_only_ci_high": yl.mean() + q * human_se, "lambda": lam, "n_labelled": n,
            "width_ratio": se / human_se}


def hand_matrices(judge: pd.DataFrame, labels: pd.DataFrame, criterion: str, random_items: set[str]):
    """dialogues x systems judge scores (N/A out, failures at the system's mean) and human means (random part)."""
    part = judge[judge["criterion"] == criterion]
    scores = part.assign(score=part["score"].where(~part["failed"] & ~part["na"])).pivot(
        index="item_id", columns="system", values="score").sort_index().sort_index(axis=1)
    failed = part.pivot(index="item_id", columns="system", values="failed").reindex_like(scores).fillna(False)
    scores = scores.where(~failed.astype(bool), scores.mean(), axis=1)  # N/A stays out of the population
    human = labels[(labels["criterion"] == criterion) & labels["item_id"].isin(random_items)]
    human = human.groupby(["item_id", "system"])["score"].mean().unstack().reindex_like(scores)
    return scores, human


def example_estimate(tmp_path: Path, *extra: str, judgments: Path = STUDY / "judgments.jsonl"):
    out = tmp_path / "est"
    run("estimate", "--judgments", str(judgments), "--human", str(STUDY / "labels.csv"),
        "--plan", str(STUDY / "plan"), "--output-dir", str(out), *extra)
    return pd.read_csv(out / "estimates.csv"), pd.read_csv(out / "differences.csv")


def random_part() -> set[str]:
    plan = pd.read_csv(STUDY / "plan" / "plan.csv")
    return set(plan.loc[plan["part"] == "random", "item_id"])


VALUE_COLUMNS = ["estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low", "human_only_ci_high",
                 "lambda", "n_labelled", "width_ratio"]


def test_estimates_and_differences_equal_a_hand_computation_and_the_estimator(tmp_path):
    estimates, differences = example_estimate(tmp_path)
    judge, labels = raw_judgments(STUDY / "judgments.jsonl"), pd.read_csv(STUDY / "labels.csv")
    random_items = random_part()
    assert len(estimates) and len(differences)
    for criterion in sorted(estimates["criterion"].unique()):
        scores, human = hand_matrices(judge, labels, criterion, random_items)
        for system in scores.columns:
            row = estimates[(estimates["criterion"] == criterion) & (estimates["system"] == system)].iloc[0]
            want = ppi_by_hand(human[system].to_numpy(float), scores[system].to_numpy(float))
            for column in VALUE_COLUMNS:
                assert row[column] == pytest.approx(want[column], rel=1e-9, abs=1e-12), (criterion, system, column)
        for a, b in zip(*np.triu_indices(len(scores.columns), 1)):
            first, second = scores.columns[a], scores.columns[b]
            row = differences[(differences["criterion"] == criterion) & (differences["system_a"] == first)
                              & (differences["system_b"] == second)].iloc[0]
            want = ppi_by_hand((human[first] - human[second]).to_numpy(float),
                               (scores[first] - scores[second]).to_numpy(float))
            for column in VALUE_COLUMNS:
                assert row[column] == pytest.approx(want[column], rel=1e-9, abs=1e-12), (criterion, first, second)
            # The sign: a - b, as the human-only difference of the same labels says.
            labelled = human[[first, second]].dropna()
            assert row["human_only"] == pytest.approx((labelled[first] - labelled[second]).mean())
    check_intervals(estimates)
    check_intervals(differences)

    # The estimator called directly gives the very same tables.
    from calibration.io import load_human_labels, load_judge_scores
    from calibration.study.estimate import estimate

    direct = estimate(load_judge_scores(STUDY / "judgments.jsonl"), load_human_labels(STUDY / "labels.csv"),
                      random_items=random_items, targeted_items=set(pd.read_csv(STUDY / "plan" / "plan.csv")
                                                                   .query("part == 'targeted'")["item_id"]))
    for file_table, table in ((estimates, direct.estimates), (differences, direct.differences)):
        for column in VALUE_COLUMNS:
            assert file_table[column].to_numpy() == pytest.approx(table[column].to_numpy(), rel=1e-9, nan_ok=True)


def test_an_interval_with_low_above_high_fails_the_check():
    good = pd.DataFrame({"estimate": [1.0], "ci_low": [0.5], "ci_high": [1.5], "human_only": [1.0],
                         "human_only_ci_low": [0.0], "human_only_ci_high": [2.0]})
    check_intervals(good)
    for bad in (good.assign(ci_low=1.6), good.assign(ci_high=0.9), good.assign(ci_low=np.nan)):
        with pytest.raises(AssertionError):
            check_intervals(bad)


def test_apply_map_estimates_are_those_of_the_maps_predictions(tmp_path):
    """--apply-map: the same estimates as with the judge scores replaced by np.interp on the map's thresholds."""
    map_path = tmp_path / "map.json"
    run("calibrate", "--judgments", str(STUDY / "judgments.jsonl"), "--human", str(STUDY / "pilot_labels.csv"),
        "--bootstrap", "0", "--fit-map", str(map_path))
    maps = json.loads(map_path.read_text(encoding="utf-8"))["maps"]
    rows = [json.loads(line) for line in (STUDY / "judgments.jsonl").read_text(encoding="utf-8").splitlines()]
    changed = 0
    for row in rows:
        fitted = maps[row["criterion"]]
        if row["score"] is not None:
            mapped = float(np.interp(row["score"], fitted["X_thresholds"], fitted["y_thresholds"]))
            changed += mapped != row["score"]
            row["score"] = mapped
    assert changed > 0
    mapped_file = tmp_path / "mapped.jsonl"
    mapped_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with_map, with_map_diff = example_estimate(tmp_path / "a", "--apply-map", str(map_path))
    by_hand, by_hand_diff = example_estimate(tmp_path / "b", judgments=mapped_file)
    plain, _ = example_estimate(tmp_path / "c")
    for column in VALUE_COLUMNS:
        assert with_map[column].to_numpy() == pytest.approx(by_hand[column].to_numpy(), rel=1e-9)
        assert with_map_diff[column].to_numpy() == pytest.approx(by_hand_diff[column].to_numpy(), rel=1e-9)
    assert not np.allclose(with_map["estimate"], plain["estimate"])
    check_intervals(with_map)


def test_screen_system_means_and_intervals(tmp_path):
    out = tmp_path / "screen"
    run("screen", "--judgments", str(STUDY / "judgments.jsonl"), "--bootstrap", "4000", "--seed", "1",
        "--output-dir", str(out))
    systems = pd.read_csv(out / "systems.csv")
    judge = raw_judgments(STUDY / "judgments.jsonl")
    numeric = judge[~judge["na"] & ~judge["failed"] & judge["score"].notna()]
    table = numeric.pivot_table(index="item_id", columns=["criterion", "system"], values="score")
    rng = np.random.default_rng(77)
    draws = rng.integers(0, len(table), size=(4000, len(table)))
    values = table.to_numpy(float)
    replicates = np.nanmean(values[draws], axis=1)  # (B, columns): the mean over each resample's dialogues
    assert len(systems) == table.shape[1]
    for k, (criterion, system) in enumerate(table.columns):
        row = systems[(systems["criterion"] == criterion) & (systems["system"] == system)].iloc[0]
        column = values[:, k]
        assert row["mean"] == pytest.approx(np.nanmean(column)), (criterion, system)
        assert row["n"] == int((~np.isnan(column)).sum())
        low, high = np.percentile(replicates[:, k], [2.5, 97.5])
        width = high - low
        assert row["ci_low"] == pytest.approx(low, abs=0.05 * width), (criterion, system, row["ci_low"], low)
        assert row["ci_high"] == pytest.approx(high, abs=0.05 * width), (criterion, system, row["ci_high"], high)
    # Ranks follow the means within each criterion; the difference from the best is best minus own mean.
    for criterion, part in systems.groupby("criterion"):
        ordered = part.sort_values("rank")
        assert list(ordered["mean"]) == sorted(ordered["mean"], reverse=True)
        assert ordered["difference_from_best"].to_numpy() == pytest.approx(
            ordered["mean"].max() - ordered["mean"].to_numpy())
    check_intervals(systems.rename(columns={"mean": "estimate"}), pairs=(("ci_low", "ci_high"),))
