"""Every number of `judge calibrate`'s agreement, alpha, ceiling, map and --compare tables, as a value.

Each figure is read from the CLI's --output-dir files and recomputed here independently: the human mean with
pandas from the raw CSV, kappa with scikit-learn and with the textbook formula in numpy, alpha with
`krippendorff` on a reliability matrix built by hand, correlations with scipy, the map with scikit-learn's
IsotonicRegression, the --compare interval with a bootstrap of our own (another random stream, so Monte Carlo
tolerances). Real data (DECODA, DialSummEval) where present, small hand-computed cases everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import cohen_kappa_score
from sklearn.model_selection import GroupKFold

from calibration.agreement import krippendorff_alpha, score_agreement
from judge.cli import main

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DECODA = SHARED / "decoda_llm_sum_guidelines"
DIALSUMMEVAL = SHARED / "dialsummeval"
KEY = ["item_id", "system", "criterion"]
needs_decoda = pytest.mark.skipif(not (DECODA / "annotations.csv").exists(),
                                  reason=f"DECODA data not found at {DECODA} (set JUDGE_SHARED_DATA)")
needs_dialsummeval = pytest.mark.skipif(not (DIALSUMMEVAL / "annotations.csv").exists(),
                                        reason=f"DialSummEval data not found at {DIALSUMMEVAL} (set JUDGE_SHARED_DATA)")


# -- independent computations ---------------------------------------------------------------------------------------


def half_up(values) -> np.ndarray:
    return np.floor(np.asarray(values, dtype=float) + 0.5)


def quadratic_kappa(a, b) -> float:
    """Cohen's quadratic-weighted kappa from its definition: 1 - sum(w O) / sum(w E), w = (i - j)^2."""
    a, b = np.asarray(a, int), np.asarray(b, int)
    categories = np.union1d(a, b)
    index = {c: k for k, c in enumerate(categories)}
    observed = np.zeros((len(categories),) * 2)
    for x, y in zip(a, b):
        observed[index[x], index[y]] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    weights = (categories[:, None] - categories[None, :]) ** 2.0
    return float(1.0 - (weights * observed).sum() / (weights * expected).sum())


def agreement_by_hand(judge, human) -> dict[str, float]:
    """The documented definition: judge vs the annotators' mean, both rounded half-up for the categorical ones."""
    judge, human = np.asarray(judge, float), np.asarray(human, float)
    jp, hp = half_up(judge), half_up(human)
    return {"kappa_quadratic": quadratic_kappa(jp, hp), "exact": float(np.mean(jp == hp)),
            "within_1": float(np.mean(np.abs(jp - hp) <= 1)), "mae": float(np.mean(np.abs(judge - human))),
            "rmse": float(np.sqrt(np.mean((judge - human) ** 2)))}


def human_means(labels: pd.DataFrame) -> pd.DataFrame:
    return labels.dropna(subset=["score"]).groupby(KEY)["score"].mean().rename("human").reset_index()


def judge_vs_mean(judge: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    judge = judge.dropna(subset=["score"])[KEY + ["score"]].rename(columns={"score": "judge"})
    return judge.merge(human_means(labels), on=KEY)


def correlation(statistic, x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    if statistic == "pearson":
        return float(stats.pearsonr(x, y).statistic)
    if statistic == "spearman":
        return float(stats.spearmanr(x, y).statistic)
    return float(stats.kendalltau(x, y, variant="b").statistic)


def level_value(pairs: pd.DataFrame, level: str, statistic: str) -> float:
    """DialSummEval's three levels, in pandas + scipy: system means, mean of per-item correlations, pooled."""
    if level == "system":
        means = pairs.groupby("system")[["judge", "human"]].mean()
        return correlation(statistic, means["judge"], means["human"])
    if level == "summary":
        values = [correlation(statistic, g["judge"], g["human"]) for _, g in pairs.groupby("item_id")]
        return float(np.nanmean(values))
    return correlation(statistic, pairs["judge"], pairs["human"])


def run_calibrate(tmp_path, judgments: Path, human: Path, *extra: str, name="out") -> Path:
    out = tmp_path / name
    assert main(["calibrate", "--judgments", str(judgments), "--human", str(human), "--scale", "1,5",
                 "--output-dir", str(out), *extra]) == 0
    return out


def agreement_table(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "agreement.csv").set_index(["criterion", "statistic"])["value"]


# -- hand-computed small cases -------------------------------------------------------------------------------------


def test_score_agreement_on_a_case_computed_by_hand():
    # judge 1,2,3,4,5 against human means 1, 2.5 (-> 3), 3, 3.4 (-> 3), 5.
    # Rounded pairs (1,1) (2,3) (3,3) (4,3) (5,5): exact 3/5, within 1 5/5.
    # Quadratic kappa: sum w O = 1 + 1 = 2; row margins 1,1,1,1,1 over 1..5, column margins 1 (1), 3 (3), 1 (5):
    # sum w E = (1/5) * sum_i [ (i-1)^2 + 3 (i-3)^2 + (i-5)^2 ] = (1/5) * (30 + 30 + 30) = 18 -> kappa = 1 - 2/18.
    got = score_agreement([1, 2, 3, 4, 5], [1, 2.5, 3, 3.4, 5])
    assert got["kappa_quadratic"] == pytest.approx(1 - 2 / 18)
    assert got["exact"] == pytest.approx(3 / 5)
    assert got["within_1"] == pytest.approx(1.0)
    assert got["mae"] == pytest.approx((0 + 0.5 + 0 + 0.6 + 0) / 5)
    assert got["rmse"] == pytest.approx(np.sqrt((0.25 + 0.36) / 5))


def test_score_agreement_off_by_two_and_missing_values():
    # (1,3) and (5,3) are two points off: not within 1; NaN pairs are dropped on either side.
    got = score_agreement([1, 5, 3, np.nan, 2], [3, 3, 3, 4, np.nan])
    assert got["exact"] == pytest.approx(1 / 3)
    assert got["within_1"] == pytest.approx(1 / 3)
    assert got["mae"] == pytest.approx(4 / 3)
    assert got["rmse"] == pytest.approx(np.sqrt(8 / 3))
    assert got["kappa_quadratic"] == pytest.approx(quadratic_kappa([1, 5, 3], [3, 3, 3]))
    # Within 1 is counted on whole points: 2 against 3.4 (-> 3) is within one point, although 1.4 apart.
    got = score_agreement([2, 4], [3.4, 1.6])
    assert got["within_1"] == pytest.approx(0.5) and got["exact"] == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_score_agreement_equals_sklearn_and_the_formula_on_random_scores(seed):
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, size=(60, 3)).mean(axis=1)  # means of three annotators: thirds
    judge = np.clip(np.round(human + rng.normal(0, 1, 60)), 1, 5)
    got = score_agreement(judge, human)
    want = agreement_by_hand(judge, human)
    assert got == pytest.approx(want)
    assert got["kappa_quadratic"] == pytest.approx(
        cohen_kappa_score(half_up(judge).astype(int), half_up(human).astype(int), weights="quadratic"))


def test_alpha_with_the_judge_as_an_extra_rater_and_the_ceiling_on_a_small_table(tmp_path):
    rng = np.random.default_rng(4)
    items, systems, annotators = [f"d{i}" for i in range(8)], ["s1", "s2", "s3"], ["a", "b", "c"]
    truth = rng.integers(1, 6, size=(len(items), len(systems)))
    rows = [{"item_id": i, "system": s, "annotator": a, "criterion": "quality",
             "score": int(np.clip(truth[k, j] + rng.integers(-1, 2), 1, 5))}
            for k, i in enumerate(items) for j, s in enumerate(systems) for a in annotators]
    labels = pd.DataFrame(rows).drop(index=[0, 10])  # two missing labels: units with two annotators
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "quality",
                           "score": float(np.clip(truth[k, j] + rng.integers(-2, 2), 1, 5))}
                          for k, i in enumerate(items) for j, s in enumerate(systems)])
    labels.to_csv(tmp_path / "labels.csv", index=False)
    judge.to_csv(tmp_path / "judge.csv", index=False)
    out = run_calibrate(tmp_path, tmp_path / "judge.csv", tmp_path / "labels.csv", "--bootstrap", "0")
    check_alpha(out, judge, labels)
    check_agreement(out, judge, labels)
    check_ceiling(out, judge, labels)
    # A judge between the points (an expected score): rounded to whole points as a rater for ordinal / nominal
    # alpha, to tenths for interval alpha (the documented definition).
    judge = judge.assign(score=np.clip(judge["score"] + rng.uniform(-0.45, 0.45, len(judge)), 1, 5).round(2))
    judge.to_csv(tmp_path / "expected.csv", index=False)
    out = run_calibrate(tmp_path, tmp_path / "expected.csv", tmp_path / "labels.csv", "--bootstrap", "0",
                        name="expected")
    check_alpha(out, judge, labels)
    check_agreement(out, judge, labels)


# -- the checks, shared by the small case and the real data --------------------------------------------------------


def check_agreement(out: Path, judge: pd.DataFrame, labels: pd.DataFrame) -> None:
    table = agreement_table(out)
    merged = judge_vs_mean(judge, labels)
    for criterion, part in merged.groupby("criterion"):
        want = agreement_by_hand(part["judge"], part["human"])
        sk = cohen_kappa_score(half_up(part["judge"]).astype(int), half_up(part["human"]).astype(int),
                               weights="quadratic")
        assert want["kappa_quadratic"] == pytest.approx(sk)
        for statistic, value in want.items():
            assert table[(criterion, statistic)] == pytest.approx(value, abs=1e-9), (criterion, statistic)


def reliability_matrix(labels: pd.DataFrame, judge: pd.DataFrame | None, criterion: str) -> np.ndarray:
    """Raters x units, NaN where a rater did not rate; the judge, when given, as one more row."""
    part = labels[(labels["criterion"] == criterion)].dropna(subset=["score"])
    table = part.pivot_table(index="annotator", columns=["item_id", "system"], values="score", aggfunc="first")
    if judge is not None:
        row = judge[judge["criterion"] == criterion].set_index(["item_id", "system"])["score"]
        table.loc["__judge__"] = row.reindex(table.columns).to_numpy()
    return table.to_numpy(float)


def judge_as_rater(judge: pd.DataFrame, level: str) -> pd.DataFrame:
    """The judge's scores on the humans' categories: tenths for interval alpha, whole points otherwise."""
    steps = 10.0 if level == "interval" else 1.0
    return judge.assign(score=half_up(judge["score"] * steps) / steps)


def check_alpha(out: Path, judge: pd.DataFrame, labels: pd.DataFrame, levels=("interval", "ordinal", "nominal")):
    table = agreement_table(out)
    for criterion in sorted(set(judge["criterion"]) & set(labels["criterion"])):
        for level in levels:
            humans = krippendorff.alpha(reliability_data=reliability_matrix(labels, None, criterion),
                                        level_of_measurement=level)
            both = krippendorff.alpha(reliability_data=reliability_matrix(labels, judge_as_rater(judge, level),
                                                                          criterion),
                                      level_of_measurement=level)
            assert table[(criterion, f"alpha_{level}_humans")] == pytest.approx(humans, abs=1e-9)
            assert table[(criterion, f"alpha_{level}_humans_plus_judge")] == pytest.approx(both, abs=1e-9)


def check_ceiling(out: Path, judge: pd.DataFrame, labels: pd.DataFrame) -> None:
    """Each annotator vs the mean of the others (pandas), averaged over annotators; the judge vs the mean of all;
    the judge vs each annotator's own reference (the mean of the others on that annotator's summaries), averaged
    the same way, as a fraction of the annotators' average."""
    ceiling = pd.read_csv(out / "ceiling.csv").set_index(["criterion", "level", "statistic"])
    assert not ceiling.empty
    labels = labels.dropna(subset=["score"])
    judge_pairs = judge_vs_mean(judge, labels)
    for (criterion, level, statistic), row in ceiling.iterrows():
        part = labels[labels["criterion"] == criterion]
        per_annotator, matched = [], []
        judge_part = judge_pairs[judge_pairs["criterion"] == criterion]
        judge_scores = judge_part.set_index(["item_id", "system"])["judge"]
        for annotator in sorted(part["annotator"].unique()):
            own = part[part["annotator"] == annotator].set_index(["item_id", "system"])["score"].rename("judge")
            others = part[part["annotator"] != annotator].groupby(["item_id", "system"])["score"].mean()
            loo = pd.concat([own, others.rename("human")], axis=1, join="inner").reset_index()
            if len(loo) < 2:
                continue
            per_annotator.append(value_of(loo, level, statistic))
            same = pd.concat([judge_scores, others.rename("human").reindex(own.index)], axis=1,
                             join="inner").dropna().reset_index()
            matched.append(value_of(same, level, statistic) if len(same) >= 2 else np.nan)
        want_judge = value_of(judge_part, level, statistic)
        defined = [v for v in per_annotator if not np.isnan(v)]
        want_ceiling = float(np.mean(defined))
        where = (criterion, level, statistic)
        assert row["judge"] == pytest.approx(want_judge, abs=1e-9), where
        assert row["ceiling"] == pytest.approx(want_ceiling, abs=1e-9), where
        assert row["ceiling_min"] == pytest.approx(min(defined), abs=1e-9), where
        assert row["ceiling_max"] == pytest.approx(max(defined), abs=1e-9), where
        assert row["n_annotators"] == len(defined), where
        both = [(m, v) for m, v in zip(matched, per_annotator) if not np.isnan(m) and not np.isnan(v)]
        want_matched = float(np.mean([m for m, _ in both])) if both else np.nan
        like = float(np.mean([v for _, v in both])) if both else np.nan
        assert row["judge_matched"] == pytest.approx(want_matched, abs=1e-9, nan_ok=True), where
        assert row["fraction_of_ceiling"] == pytest.approx(want_matched / like if like else np.nan, abs=1e-9,
                                                           nan_ok=True), where


def value_of(pairs: pd.DataFrame, level: str, statistic: str) -> float:
    if statistic in ("kappa_quadratic", "exact", "within_1"):
        return agreement_by_hand(pairs["judge"], pairs["human"])[statistic]
    return level_value(pairs, level, statistic)


# -- real data --------------------------------------------------------------------------------------------------------


def decoda_judge() -> pd.DataFrame:
    return pd.read_csv(DECODA / "judge_scores.csv")


@needs_decoda
def test_decoda_agreement_alpha_and_ceiling_values(tmp_path):
    out = run_calibrate(tmp_path, DECODA / "judge_scores.csv", DECODA / "annotations.csv", "--bootstrap", "0")
    labels = pd.read_csv(DECODA / "annotations.csv")
    judge = decoda_judge()
    shared = set(labels["criterion"])
    judge = judge[judge["criterion"].isin(shared)]
    check_agreement(out, judge, labels)
    check_alpha(out, judge.dropna(subset=["score"]), labels)
    check_ceiling(out, judge, labels)


@needs_dialsummeval
@pytest.mark.slow
def test_dialsummeval_one_annotator_as_the_judge(tmp_path):
    """ann1's own labels as a 'judge': on the humans' scale, so every statistic is meaningful."""
    labels = pd.read_csv(DIALSUMMEVAL / "annotations.csv")
    labels = labels[labels["criterion"].isin(["coherence", "relevance"])]
    judge = labels[labels["annotator"] == "ann1"][KEY + ["score"]].astype({"score": float})
    labels.to_csv(tmp_path / "labels.csv", index=False)
    judge.to_csv(tmp_path / "judge.csv", index=False)
    out = run_calibrate(tmp_path, tmp_path / "judge.csv", tmp_path / "labels.csv", "--bootstrap", "0")
    check_agreement(out, judge, labels)
    check_alpha(out, judge, labels, levels=("interval", "ordinal"))
    check_ceiling(out, judge, labels)


# -- the map's cross-validated errors and --compare -------------------------------------------------------------------


def test_map_cross_validated_errors_and_applied_scores(tmp_path):
    rng = np.random.default_rng(11)
    items = [f"d{i:02d}" for i in range(30)]
    rows, judge_rows = [], []
    for item in items:
        for system in ("x", "y"):
            quality = rng.uniform(1, 5)
            for annotator in ("a", "b"):
                rows.append({"item_id": item, "system": system, "annotator": annotator, "criterion": "q",
                             "score": int(np.clip(round(quality + rng.normal(0, 0.5)), 1, 5))})
            # A judge that is monotone but squashed towards 2: the map must help.
            judge_rows.append({"item_id": item, "system": system, "criterion": "q",
                               "score": round(1 + (quality - 1) ** 2 / 8 + rng.normal(0, 0.2), 2)})
    labels, judge = pd.DataFrame(rows), pd.DataFrame(judge_rows)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    judge.to_csv(tmp_path / "judge.csv", index=False)
    out = run_calibrate(tmp_path, tmp_path / "judge.csv", tmp_path / "labels.csv", "--bootstrap", "0",
                        "--fit-map", str(tmp_path / "map.json"))
    cv = pd.read_csv(out / "calibration_map_cv.csv").set_index("criterion").loc["q"]
    pairs = judge_vs_mean(judge, labels)
    x, y, groups = pairs["judge"].to_numpy(), pairs["human"].to_numpy(), pairs["item_id"].to_numpy()
    predicted = np.empty_like(y)
    for train, test in GroupKFold(n_splits=5).split(x, y, groups):
        predicted[test] = IsotonicRegression(out_of_bounds="clip").fit(x[train], y[train]).predict(x[test])
    assert cv["n"] == len(pairs) and cv["folds"] == 5
    assert cv["mae_before"] == pytest.approx(np.mean(np.abs(x - y)))
    assert cv["rmse_before"] == pytest.approx(np.sqrt(np.mean((x - y) ** 2)))
    assert cv["mae_after"] == pytest.approx(np.mean(np.abs(predicted - y)))
    assert cv["rmse_after"] == pytest.approx(np.sqrt(np.mean((predicted - y) ** 2)))
    assert cv["mae_after"] < cv["mae_before"]

    # --apply-map: the calibrated scores are the fitted map's predictions on the raw scores.
    applied = run_calibrate(tmp_path, tmp_path / "judge.csv", tmp_path / "labels.csv", "--bootstrap", "0",
                            "--apply-map", str(tmp_path / "map.json"), name="applied")
    scores = pd.read_csv(applied / "calibrated_scores.csv")
    full = IsotonicRegression(out_of_bounds="clip").fit(x, y)
    raw = scores["score_raw"].to_numpy()
    assert scores["score"].to_numpy() == pytest.approx(full.predict(raw))
    assert not np.allclose(scores["score"], raw)
    # ... and the agreement that run prints is computed on those calibrated scores.
    table = agreement_table(applied)
    want = agreement_by_hand(full.predict(x), y)
    assert table[("q", "mae")] == pytest.approx(want["mae"])


def paired_bootstrap(pairs: pd.DataFrame, level: str, statistic: str, resamples: int, seed: int) -> np.ndarray:
    """corr(A, human) - corr(B, human) on resampled dialogues, from per-dialogue pieces: the summary level is a
    mean of per-dialogue correlations, the item level's Pearson r is built from per-dialogue sums."""
    rng = np.random.default_rng(seed)
    groups = [part for _, part in pairs.groupby("item_id")]
    counts = np.stack([np.bincount(rng.integers(0, len(groups), len(groups)), minlength=len(groups))
                       for _ in range(resamples)]).astype(float)
    if level == "summary":
        per_item = np.array([correlation(statistic, g["judge_a"], g["human"])
                             - correlation(statistic, g["judge_b"], g["human"]) for g in groups])
        defined = ~np.isnan(per_item)
        return counts[:, defined] @ per_item[defined] / counts[:, defined].sum(axis=1)
    assert (level, statistic) == ("item", "pearson")

    def pearson(column):
        sums = np.array([[len(g), g[column].sum(), g["human"].sum(), (g[column] ** 2).sum(), (g["human"] ** 2).sum(),
                          (g[column] * g["human"]).sum()] for g in groups])
        n, sx, sy, sxx, syy, sxy = (counts @ sums).T
        return (sxy - sx * sy / n) / np.sqrt((sxx - sx * sx / n) * (syy - sy * sy / n))

    return pearson("judge_a") - pearson("judge_b")


@needs_decoda
def test_compare_paired_interval_and_p_value_with_resamples(tmp_path):
    """DECODA's LLM judge against one annotator used as a second judge, on faithfulness."""
    labels = pd.read_csv(DECODA / "annotations.csv")
    labels = labels[labels["criterion"] == "faithfulness"]
    other = labels[labels["annotator"] == "ann2_f"][KEY + ["score"]].astype({"score": float})
    rng = np.random.default_rng(5)
    other["score"] = np.clip(other["score"] + rng.normal(0, 1.0, len(other)), 1, 5).round(1)
    other.to_csv(tmp_path / "other.csv", index=False)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    judge = decoda_judge()
    judge = judge[judge["criterion"] == "faithfulness"]
    out = run_calibrate(tmp_path, DECODA / "judge_scores.csv", tmp_path / "labels.csv", "--bootstrap", "2000",
                        "--compare", str(tmp_path / "other.csv"), "--criteria", "faithfulness")
    comparison = pd.read_csv(out / "comparison.csv").set_index(["level", "statistic"])
    pairs = judge_vs_mean(judge, labels).rename(columns={"judge": "judge_a"}).merge(
        other.rename(columns={"score": "judge_b"}), on=KEY).dropna()
    for level, statistic in (("item", "pearson"), ("summary", "spearman"), ("summary", "pearson")):
        row = comparison.loc[(level, statistic)]
        a = value_of(pairs.rename(columns={"judge_a": "judge"}), level, statistic)
        b = value_of(pairs.rename(columns={"judge_b": "judge"}), level, statistic)
        assert row["judge_a"] == pytest.approx(a) and row["judge_b"] == pytest.approx(b)
        assert row["difference"] == pytest.approx(a - b)
        replicates = paired_bootstrap(pairs, level, statistic, 4000, seed=123)
        replicates = replicates[~np.isnan(replicates)]
        low, high = np.percentile(replicates, [2.5, 97.5])
        p = min(1.0, 2 * min(np.mean(replicates <= 0), np.mean(replicates >= 0)))
        spread = high - low
        # Monte Carlo error of a 2.5% quantile with 1000-2000 resamples: a few percent of the width.
        assert row["ci_low"] == pytest.approx(low, abs=0.1 * spread), (level, statistic, row["ci_low"], low)
        assert row["ci_high"] == pytest.approx(high, abs=0.1 * spread), (level, statistic, row["ci_high"], high)
        assert row["p_value"] == pytest.approx(p, abs=0.03), (level, statistic, row["p_value"], p)
        assert row["ci_low"] <= row["difference"] <= row["ci_high"]


def test_alpha_with_a_judge_and_no_labels_is_undefined_not_a_crash():
    """No label for the criterion, a judge as one more rater and no scale: alpha is NaN (undefined), as without the
    judge. It used to take the humans' score range from the empty table and raise a numpy ValueError."""
    empty = pd.DataFrame(columns=["item_id", "system", "criterion", "annotator", "score"])
    judge = pd.DataFrame({"item_id": ["a"], "system": ["s"], "score": [3.0]})
    assert np.isnan(krippendorff_alpha(empty, "x"))
    assert np.isnan(krippendorff_alpha(empty, "x", extra_rater=judge))
