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
from test_estimate import reference_ppi  # PPI++ written out from the formulas, one place

from calibration.study.bounded import betting_interval  # tested against the formulas in test_estimate_bounded
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


def ppi_by_hand(y: np.ndarray, f: np.ndarray, confidence=0.95, bounds=None) -> dict:
    """PPI++ for one mean, written out again from estimate.py's docstring: y NaN where unlabelled, f NaN where not
    a unit. lambda is tuned from 10 labels on, on judge scores that spread (a quarter of the judged variance);
    then the residuals have n - 2 degrees of freedom and lambda's own error is added at the unlabelled mean; else
    the human mean with n - 1. No interval below 3 labels or on labels that do not vary. With the scale's
    `bounds`: labels whose mean a share 1 - 0.1^(1/n) at the far end of the scale would pull past the t half-width
    get the human mean, the betting bound on the far side and the t bound (clipped) on the near one."""
    row = _ppi_by_hand(y, f, confidence)
    yl = y[~np.isnan(f) & ~np.isnan(y)]
    n = len(yl)
    if bounds is None or not np.isfinite(row["ci_low"]):
        return row
    low, high = bounds
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(yl, ddof=1) / np.sqrt(n)
    if (1 - 0.1 ** (1 / n)) * abs(low + high - 2 * yl.mean()) <= half:
        return row
    far_low, far_high = betting_interval(yl[None], np.ones((1, n), bool), bounds, confidence)
    above = yl.mean() > (low + high) / 2
    ci = ((float(far_low[0]), min(row["human_only_ci_high"], high)) if above
          else (max(row["human_only_ci_low"], low), float(far_high[0])))
    return {**row, "estimate": yl.mean(), "ci_low": ci[0], "ci_high": ci[1], "human_only_ci_low": ci[0],
            "human_only_ci_high": ci[1], "lambda": 0.0, "width_ratio": 1.0, "effective_labels": float(n)}


def _ppi_by_hand(y: np.ndarray, f: np.ndarray, confidence=0.95) -> dict:
    unit = ~np.isnan(f)
    labelled = unit & ~np.isnan(y)
    unlabelled = unit & ~labelled
    yl, fl, fu = y[labelled], f[labelled], f[unlabelled]
    n, m = len(yl), len(fu)
    var_f = np.var(f[unit], ddof=1)
    human_se = np.std(yl, ddof=1) / np.sqrt(n)
    tuned = n >= 10 and m >= 2 and np.var(fl, ddof=1) >= 0.25 * var_f and np.var(fl, ddof=1) > 0
    if tuned:
        estimate, lam, se, _ = reference_ppi(y[unit], f[unit], labelled[unit], confidence)
        q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    else:
        lam, estimate, se = 0.0, yl.mean(), human_se
        q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    human_q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    shown = n >= 3 and np.std(yl) > 0
    nan = float("nan")
    return {"estimate": estimate, "ci_low": estimate - q * se if shown else nan,
            "ci_high": estimate + q * se if shown else nan, "human_only": yl.mean(),
            "human_only_ci_low": yl.mean() - human_q * human_se if shown else nan,
            "human_only_ci_high": yl.mean() + human_q * human_se if shown else nan, "lambda": lam, "n_labelled": n,
            "width_ratio": q * se / (human_q * human_se) if shown else nan,
            # what the estimate is worth in human-only labels: the n giving a human-only interval this wide
            "effective_labels": n * (human_q * human_se / (q * se)) ** 2 if shown else nan}


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


def example_estimate(tmp_path: Path, *extra: str, judgments: Path = STUDY / "judgments.jsonl", plan: bool = True):
    out = tmp_path / "est"
    run("estimate", "--judgments", str(judgments), "--human", str(STUDY / "labels.csv"),
        *(("--plan", str(STUDY / "plan")) if plan else ()), "--output-dir", str(out), *extra)
    return pd.read_csv(out / "estimates.csv"), pd.read_csv(out / "differences.csv")


def random_part() -> set[str]:
    plan = pd.read_csv(STUDY / "plan" / "plan.csv")
    return set(plan.loc[plan["part"] == "random", "item_id"])


VALUE_COLUMNS = ["estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low", "human_only_ci_high",
                 "lambda", "n_labelled", "width_ratio", "effective_labels"]


def test_estimates_and_differences_equal_a_hand_computation_and_the_estimator(tmp_path):
    estimates, differences = example_estimate(tmp_path)
    judge, labels = raw_judgments(STUDY / "judgments.jsonl"), pd.read_csv(STUDY / "labels.csv")
    random_items = random_part()
    assert len(estimates) and len(differences)
    for criterion in sorted(estimates["criterion"].unique()):
        scores, human = hand_matrices(judge, labels, criterion, random_items)
        for system in scores.columns:
            row = estimates[(estimates["criterion"] == criterion) & (estimates["system"] == system)].iloc[0]
            want = ppi_by_hand(human[system].to_numpy(float), scores[system].to_numpy(float), bounds=(1, 5))
            # a mean's interval stays on the 1..5 scale (estimate_tables.on_scale)
            want.update({c: min(max(want[c], 1.0), 5.0) for c in ("ci_low", "ci_high", "human_only_ci_low",
                                                                  "human_only_ci_high")})
            for column in VALUE_COLUMNS:
                assert row[column] == pytest.approx(want[column], rel=1e-9, abs=1e-12, nan_ok=True), \
                    (criterion, system, column)
        for a, b in zip(*np.triu_indices(len(scores.columns), 1)):
            first, second = scores.columns[a], scores.columns[b]
            row = differences[(differences["criterion"] == criterion) & (differences["system_a"] == first)
                              & (differences["system_b"] == second)].iloc[0]
            want = ppi_by_hand((human[first] - human[second]).to_numpy(float),
                               (scores[first] - scores[second]).to_numpy(float))
            for column in VALUE_COLUMNS:
                assert row[column] == pytest.approx(want[column], rel=1e-9, abs=1e-12, nan_ok=True), \
                    (criterion, first, second)
            # The sign: a - b, as the human-only difference of the same labels says.
            labelled = human[[first, second]].dropna()
            assert row["human_only"] == pytest.approx((labelled[first] - labelled[second]).mean())
    check_intervals(estimates)
    check_intervals(differences)

    # The estimator called directly gives the very same tables.
    from calibration.io import load_human_labels, load_judge_scores
    from calibration.study.estimate_tables import estimate

    direct = estimate(load_judge_scores(STUDY / "judgments.jsonl"), load_human_labels(STUDY / "labels.csv"),
                      random_items=random_items, targeted_items=set(pd.read_csv(STUDY / "plan" / "plan.csv")
                                                                   .query("part == 'targeted'")["item_id"]),
                      scales={"*": (1, 5)})
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
    (tmp_path / "toy.yaml").write_bytes((STUDY / "toy.yaml").read_bytes())  # the rubric the judgments name
    # Without --plan (every labelled dialogue taken as the random sample): a plan names the judgments it was drawn
    # from, and the mapped file is another file.
    with_map, with_map_diff = example_estimate(tmp_path / "a", "--apply-map", str(map_path), plan=False)
    by_hand, by_hand_diff = example_estimate(tmp_path / "b", judgments=mapped_file, plan=False)
    plain, _ = example_estimate(tmp_path / "c", plan=False)
    assert (with_map["lambda"] != 0).any(), "the example must reach the tuned estimator"
    for column in VALUE_COLUMNS:
        assert with_map[column].to_numpy() == pytest.approx(by_hand[column].to_numpy(), rel=1e-9, nan_ok=True)
        assert with_map_diff[column].to_numpy() == pytest.approx(by_hand_diff[column].to_numpy(), rel=1e-9,
                                                                 nan_ok=True)
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
        n = int((~np.isnan(column)).sum())
        tail = 100 * stats.norm.sf(np.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1))  # the expanded percentile
        low, high = np.percentile(replicates[:, k], [tail, 100 - tail])
        width = high - low
        assert row["ci_low"] == pytest.approx(low, abs=0.05 * width), (criterion, system, row["ci_low"], low)
        assert row["ci_high"] == pytest.approx(high, abs=0.05 * width), (criterion, system, row["ci_high"], high)
    # Ranks follow the means within each criterion; the difference from the best is best minus own mean.
    for _criterion, part in systems.groupby("criterion"):
        ordered = part.sort_values("rank")
        assert list(ordered["mean"]) == sorted(ordered["mean"], reverse=True)
        assert ordered["difference_from_best"].to_numpy() == pytest.approx(
            ordered["mean"].max() - ordered["mean"].to_numpy())
    check_intervals(systems.rename(columns={"mean": "estimate"}), pairs=(("ci_low", "ci_high"),))
