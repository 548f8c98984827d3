"""Properties of the study loop's statistics (calibration.study: estimate, screen, power) that whole families of bugs
break: PPI++'s regime at every threshold (MIN_LABELLED, MIN_TUNED, MIN_CROSS_FITTED, MIN_SPREAD, two unlabelled
dialogues) against the formulas written out in tests/test_estimate.py, on a grid of label counts either side of each;
invariance of the estimator to the judge's scale and to the order of the dialogues; screen's intervals from the
resample counts drawn again from the seed; the power search against a brute-force scan of scipy's noncentral t; and
exact small cases for uncertainty, discrimination and the plan.

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py (boundaries, constants,
dropped branches), not against any one of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_estimate import correlated, reference_cross_fitted, reference_in_sample

from calibration.study.designs import make_plan
from calibration.study.power import dialogues_needed, paired_power
from calibration.study.ppi import MIN_CROSS_FITTED, MIN_LABELLED, MIN_SPREAD, MIN_TUNED, ppi_mean
from calibration.study.systems import systems_table
from calibration.study.uncertainty import discrimination, judgment_uncertainty


def human_only(y, labelled, confidence):
    yl = y[labelled]
    n = len(yl)
    se = np.std(yl, ddof=1) / np.sqrt(n)
    q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    return yl.mean(), 0.0, se, (yl.mean() - q * se, yl.mean() + q * se)


def regime(y, f, labelled, confidence):
    """Which estimator the docstring says applies, and its numbers (None: no interval)."""
    n, m = labelled.sum(), (~labelled).sum()
    fc = f - f.mean()
    spread_ok = n >= 2 and np.var(fc[labelled], ddof=1) >= MIN_SPREAD * (np.sum(fc ** 2) / (len(f) - 1))
    if n >= MIN_TUNED and m >= 2 and spread_ok and np.var(f) > 0:
        if n >= MIN_CROSS_FITTED:
            return "cross-fitted", reference_cross_fitted(y, f, labelled, confidence)
        return "in-sample", reference_in_sample(y, f, labelled, confidence)
    return "human-only", human_only(y, labelled, confidence) if n >= 2 else None


@pytest.mark.parametrize("count", [2, 3, 9, 10, 11, 19, 20, 21])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_each_label_count_gets_the_estimator_the_docstring_names(count, confidence):
    rng = np.random.default_rng(count)
    y, f = correlated(rng, (4, 80), rho=0.8, scale=2.0, shift=1.0)
    labelled = rng.random((4, 80)).argsort(axis=1) < count
    result = ppi_mean(np.where(labelled, y, np.nan), f, confidence=confidence)
    for row in range(4):
        kind, numbers = regime(y[row], f[row], labelled[row], confidence)
        assert result.n_labelled[row] == count and result.n_unlabelled[row] == 80 - count
        assert result.human_only[row] == pytest.approx(y[row][labelled[row]].mean())
        if count < MIN_LABELLED:
            assert np.isnan(result.ci_low[row]) and np.isnan(result.se[row]) and result.no_interval[row] == "few"
            continue
        estimate, lam, se, (low, high) = numbers
        assert result.estimate[row] == pytest.approx(estimate), kind
        assert result.lam[row] == pytest.approx(lam, abs=1e-12), kind
        assert result.se[row] == pytest.approx(se), kind
        assert (result.ci_low[row], result.ci_high[row]) == pytest.approx((low, high)), kind
        _, _, hse, (hlow, hhigh) = human_only(y[row], labelled[row], confidence)
        assert (result.human_only_ci_low[row], result.human_only_ci_high[row]) == pytest.approx((hlow, hhigh))
        assert result.width_ratio[row] == pytest.approx(se / hse)


def test_labelled_judge_scores_spread_below_a_quarter_of_all_leave_the_judge_out():
    """The spread rule at its boundary: the labelled dialogues' judge variance just above and just below
    MIN_SPREAD times the variance over every judged one (the labelled scores squeezed toward their mean until
    the ratio is there)."""
    rng = np.random.default_rng(3)
    f = rng.normal(size=100)
    y = 3 + 0.8 * f + rng.normal(0, 0.5, 100)
    labelled = np.zeros(100, bool)
    labelled[:30] = True

    def squeezed(s):
        g = f.copy()
        g[:30] = f[:30].mean() + s * (f[:30] - f[:30].mean())
        gc = g - g.mean()
        return g, np.var(gc[:30], ddof=1) / (np.sum(gc ** 2) / 99)

    for factor, uses_judge in ((1.01, True), (0.99, False)):
        low, high = 0.0, 1.0
        for _ in range(60):  # the ratio grows with s
            middle = (low + high) / 2
            low, high = (middle, high) if squeezed(middle)[1] < factor * MIN_SPREAD else (low, middle)
        g, ratio = squeezed(high)
        assert ratio == pytest.approx(factor * MIN_SPREAD, rel=1e-6)
        result = ppi_mean(np.where(labelled, y, np.nan), g)
        assert (result.lam != 0) == uses_judge


def test_the_estimator_ignores_the_judges_scale_and_the_order_of_the_dialogues():
    rng = np.random.default_rng(4)
    y, f = correlated(rng, (3, 90), rho=0.7)
    labelled = rng.random((3, 90)).argsort(axis=1) < 25
    for fixed in (None, 0.6):
        base = ppi_mean(np.where(labelled, y, np.nan), f, lam=fixed)
        stretched = ppi_mean(np.where(labelled, y, np.nan), -4.0 * f + 11.0, lam=None if fixed is None else None)
        order = rng.permutation(90)
        shuffled = ppi_mean(np.where(labelled, y, np.nan)[:, order], f[:, order], lam=fixed)
        moved = ppi_mean(np.where(labelled, y + 5.0, np.nan), f, lam=fixed)
        for field in ("estimate", "se", "ci_low", "ci_high", "lam"):
            assert getattr(shuffled, field) == pytest.approx(getattr(base, field))
        assert moved.estimate == pytest.approx(base.estimate + 5.0) and moved.se == pytest.approx(base.se)
        if fixed is None:  # a tuned lambda follows the judge's scale (a judge upside down gets a negative one)
            assert stretched.estimate == pytest.approx(base.estimate) and stretched.se == pytest.approx(base.se)
            assert stretched.lam == pytest.approx(-base.lam / 4.0)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_a_fixed_lambda_is_the_rectified_mean_with_n_minus_one_degrees_of_freedom(lam):
    rng = np.random.default_rng(5)
    y, f = correlated(rng, 70, rho=0.6)
    labelled = np.arange(70) < 15
    result = ppi_mean(np.where(labelled, y, np.nan), f, lam=lam)
    fc = f - f.mean()
    rectified = y[labelled] - lam * fc[labelled]
    estimate = rectified.mean() + lam * fc[~labelled].mean()
    se = np.sqrt(lam ** 2 * np.sum(fc ** 2) / 69 / 55 + np.var(rectified, ddof=1) / 15)
    q = stats.t.ppf(0.975, 14)
    assert result.estimate == pytest.approx(estimate) and result.se == pytest.approx(se)
    assert (result.ci_low, result.ci_high) == pytest.approx((estimate - q * se, estimate + q * se))
    # one unlabelled dialogue cannot carry the judge: lambda is 0 whatever was asked
    lonely = np.arange(70) < 69
    assert ppi_mean(np.where(lonely, y, np.nan), f, lam=lam).lam == 0.0


# -- screen ----------------------------------------------------------------------------------------------------------


def judge_frame(rng, dialogues=18, systems=("a", "b", "c"), criteria=("x", "y"), missing=0.1):
    rows = []
    for d in range(dialogues):
        for c in criteria:
            for k, s in enumerate(systems):
                if rng.random() < missing:
                    continue
                rows.append({"item_id": f"d{d:02d}", "system": s, "criterion": c,
                             "score": float(np.clip(np.round(3 + 0.5 * k + rng.normal(0, 1)), 1, 5)),
                             "status": "ok"})
    return pd.DataFrame(rows)


def test_screens_system_intervals_are_expanded_percentiles_of_the_resampled_means():
    rng = np.random.default_rng(6)
    judge = judge_frame(rng)
    resamples, seed, confidence = 300, 7, 0.9
    systems, _, _, _ = systems_table(judge, ["x", "y"], resamples, seed, confidence)
    dialogues = sorted(judge["item_id"].unique())
    draws = np.random.default_rng(seed).integers(0, len(dialogues), size=(resamples, len(dialogues)))
    counts = np.array([np.bincount(row, minlength=len(dialogues)) for row in draws], float)
    for row in systems.itertuples():
        part = judge[(judge["criterion"] == row.criterion) & (judge["system"] == row.system)].set_index("item_id")
        values = part["score"].reindex(dialogues).to_numpy()
        present = ~np.isnan(values)
        replicates = counts[:, present] @ values[present] / counts[:, present].sum(1)
        n = int(present.sum())
        tail = stats.norm.sf(np.sqrt(n / (n - 1)) * stats.t.ppf(0.5 + confidence / 2, n - 1)) * 100
        finite = replicates[np.isfinite(replicates)]
        assert row.mean == pytest.approx(values[present].mean()) and row.n == n
        assert (row.ci_low, row.ci_high) == pytest.approx(tuple(np.percentile(finite, [tail, 100 - tail])))
    for _criterion, part in systems.groupby("criterion"):
        assert part["rank"].tolist() == list(range(1, len(part) + 1))
        assert part["mean"].is_monotonic_decreasing
        assert (part["difference_from_best"] == part["mean"].max() - part["mean"]).all()
        assert part.iloc[0]["tied_with_best"] and np.isnan(part.iloc[0]["p_adjusted"])


def test_judgment_uncertainty_exact_cases():
    judge = pd.DataFrame({
        "item_id": ["d1"] * 6, "criterion": ["c"] * 6,
        "status": ["ok", "ok", "ok", "error", "na", "abstain"],
        "score": [1.0, 5.0, 3.0, np.nan, np.nan, np.nan],
        "spread": [1.0, 4.0, 0.0, np.nan, np.nan, np.nan],  # half the range (1..5) is 2
        "probs": [{"1": 0.5, "2": 0.5}, {"1": 1.0, "2": 0.0, "3": 0.0}, {"1": 0.25, "2": 0.25, "3": 0.25, "4": 0.25},
                  None, None, None],
        "order_disagreement": [False, False, True, None, None, None]})
    frame = judgment_uncertainty(judge)
    assert frame["spread"].tolist()[:3] == [0.5, 1.0, 0.0]  # 4 / 2 capped at 1
    assert frame["entropy"].tolist()[:3] == pytest.approx([1.0, 0.0, 1.0])  # normalised by log(len(probs))
    assert frame["order_disagreement"].tolist() == [False, False, True, False, False, False]
    assert frame["uncertainty"].tolist()[:3] == pytest.approx([1.0, 1.0, 1.0])
    from calibration.study.uncertainty import FAILED, NOT_APPLICABLE

    assert frame["uncertainty"].tolist()[3:] == [FAILED, NOT_APPLICABLE, FAILED]


def test_discrimination_is_the_contenders_sd_over_half_their_range():
    judge = pd.DataFrame({"item_id": ["d1", "d1", "d1", "d2", "d2", "d2"], "system": ["a", "b", "c"] * 2,
                          "criterion": "x", "score": [5.0, 1.0, 3.0, 2.0, 2.0, 4.0], "status": "ok"})
    systems = pd.DataFrame({"criterion": "x", "system": ["a", "c", "b"], "rank": [1, 2, 3],
                            "tied_with_best": [True, False, False]})
    out = discrimination(judge, systems, ["x"])
    # contenders a and c (top two); their scores range 2..5, half range 1.5
    assert out["d1"] == pytest.approx(np.std([5.0, 3.0]) / 1.5)
    assert out["d2"] == pytest.approx(np.std([2.0, 4.0]) / 1.5)
    systems["tied_with_best"] = True  # every system in contention: b's scores count too (range 1..5)
    out = discrimination(judge, systems, ["x"])
    assert out["d1"] == pytest.approx(min(np.std([5.0, 1.0, 3.0]) / 2.0, 1.0))


def test_the_plan_spends_the_budget_random_prefix_first_then_by_priority():
    items = pd.DataFrame({"item_id": [f"d{k}" for k in range(10)], "n_judgments": [1, 2, 3, 1, 2, 3, 1, 2, 3, 1],
                          "priority": np.linspace(1, 0, 10), "uncertainty": np.linspace(1, 0, 10),
                          "discrimination": 0.5})
    for unit, budget, share in (("dialogues", 6, 0.5), ("judgments", 9, 0.4), ("dialogues", 10, 1.0),
                                ("dialogues", 4, 0.0)):
        plan = make_plan(items, budget, unit, share, seed=3)
        cost = items.set_index("item_id")["n_judgments"] if unit == "judgments" else pd.Series(1, index=items[
            "item_id"])
        random_part = plan[plan["part"] == "random"]["item_id"].tolist()
        order = list(np.random.default_rng(3).permutation(np.sort(items["item_id"].to_numpy())))
        assert random_part == order[:len(random_part)]  # a prefix of the seeded order
        assert cost[random_part].sum() <= round(share * budget)
        if len(random_part) < len(order):  # stopped at the first that does not fit
            assert cost[random_part].sum() + cost[order[len(random_part)]] > round(share * budget)
        assert cost[plan["item_id"]].sum() <= budget and plan["item_id"].is_unique
        targeted = plan[plan["part"] == "targeted"]["item_id"]
        priority = items.set_index("item_id")["priority"]
        assert priority[targeted].is_monotonic_decreasing


# -- power ----------------------------------------------------------------------------------------------------------


def power_by_hand(effect, n, alpha, share=1.0, spent=1):
    df = n - spent
    critical = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(effect) * np.sqrt(n / share)
    return stats.nct.sf(critical, df, nc) + stats.nct.cdf(-critical, df, nc)


@pytest.mark.parametrize("effect, power, alpha", [(0.5, 0.8, 0.05), (0.3, 0.9, 0.05), (1.2, 0.8, 0.1),
                                                  (-0.4, 0.8, 0.05), (2.5, 0.8, 0.05)])
def test_dialogues_needed_is_the_first_count_whose_power_reaches_the_target(effect, power, alpha):
    n = dialogues_needed(effect, power, alpha)
    assert n >= MIN_LABELLED
    assert power_by_hand(effect, n, alpha) >= power
    if n > MIN_LABELLED:
        assert power_by_hand(effect, n - 1, alpha) < power
    assert paired_power(effect, n, alpha) == pytest.approx(power_by_hand(effect, n, alpha))


@pytest.mark.parametrize("rho, judged", [(0.9, 400), (0.6, 200), (0.95, 150)])
def test_dialogues_needed_with_the_judge_prices_each_regime(rho, judged):
    effect = 0.35
    n = dialogues_needed(effect, 0.8, 0.05, rho, judged)

    def power_at(k):
        if k < MIN_TUNED:
            return power_by_hand(effect, k, 0.05)
        share = 1 - rho ** 2 * (judged - k) / judged + (1 - rho ** 2) / (k - 1)
        return power_by_hand(effect, k, 0.05, share, 1 if k >= MIN_CROSS_FITTED else 2)

    assert n is not None and power_at(n) >= 0.8 and (n == MIN_LABELLED or power_at(n - 1) < 0.8)
    assert n <= dialogues_needed(effect, 0.8, 0.05)  # the judge never costs labels
    assert dialogues_needed(0.0) is None and dialogues_needed(np.nan) is None
    assert dialogues_needed(effect, 0.8, 0.05, rho, 1) is None  # nothing to label within one judged dialogue


@pytest.mark.parametrize("confidence", ["0.9", True, 1.0, 0.0, -0.5, None])
@pytest.mark.parametrize("pairwise", [False, True])
def test_a_confidence_that_is_not_a_level_is_refused_in_the_clis_words(confidence, pairwise):
    from test_pairwise_estimate import study

    import calibration
    from calibration.errors import CalibrationError

    if pairwise:
        judge, labels = study(seed=1, dialogues=20, labelled=10)
        options = {"baseline": "base"}
    else:
        example = Path(__file__).resolve().parents[1] / "examples" / "study"
        judge, labels = example / "judgments.jsonl", example / "labels.csv"
        options = {}
    with pytest.raises(CalibrationError, match=r"^--confidence must be between 0 and 1, got "):
        calibration.estimate(judge, labels, confidence=confidence, **options)


@pytest.mark.parametrize("n_random, share, outcome", [
    (0, 0.5, "refused"), (0, 0.0, "no random part"), (1, 0.5, "1 dialogue:"), (9, 0.5, "9 dialogues:"),
    (10, 0.5, None), (25, 1.0, None)])
def test_plan_warnings_at_each_boundary(n_random, share, outcome):
    from calibration.errors import CalibrationError
    from calibration.study.designs import FEW_RANDOM, plan_warnings

    plan = pd.DataFrame({"item_id": [f"d{k}" for k in range(n_random + 3)],
                         "part": ["random"] * n_random + ["targeted"] * 3, "reason": ""})
    if outcome == "refused":
        with pytest.raises(CalibrationError, match="leaves no dialogue drawn at random"):
            plan_warnings(plan, 5, "dialogues", share)
        return
    warnings = plan_warnings(plan, 40, "dialogues", share)
    if outcome is None:
        assert warnings == [] and n_random >= FEW_RANDOM
    else:
        assert len(warnings) == 1 and outcome in warnings[0]


def test_a_system_scored_exactly_like_another_is_neither_dominated_by_it_nor_shown_below_it():
    """The simultaneous lower bound of a difference that is 0 in every resample is exactly 0: not 'shown better'."""
    rng = np.random.default_rng(8)
    judge = judge_frame(rng, missing=0.0)
    twin = judge[judge["system"] == "c"].assign(system="c2")
    systems, dominated, _, _ = systems_table(pd.concat([judge, twin], ignore_index=True), ["x", "y"], 300, 1)
    assert "c" not in dominated and "c2" not in dominated  # the best system and its twin: nobody is above them
    for _criterion, part in systems.groupby("criterion"):
        rows = part.set_index("system")
        assert rows.loc["c", "mean"] == rows.loc["c2", "mean"]
        assert rows.loc["c", "tied_with_best"] == rows.loc["c2", "tied_with_best"]
    # a system 0.6 below another on every criterion, in every dialogue, is dominated (its bound is 0.6, not 0)
    low = judge[judge["system"] == "a"].assign(system="worst", score=lambda f: f["score"] - 0.6)
    _, dominated, _, _ = systems_table(pd.concat([judge, low], ignore_index=True), ["x", "y"], 300, 1)
    assert dominated.get("worst") in {"a", "b", "c"}


def test_spread_is_read_against_half_of_each_criterions_own_range():
    """Scores 3..4 on d (half range 0.5), 1..5 on c (half range 2), one value on e (read against one point)."""
    judge = pd.DataFrame({"item_id": "d1", "criterion": ["d", "d", "c", "c", "e", "e"], "status": "ok",
                          "score": [3.0, 4.0, 1.0, 5.0, 2.0, 2.0], "spread": [0.25, 0.5, 1.0, 0.5, 0.3, 2.0]})
    frame = judgment_uncertainty(judge)
    assert frame["spread"].tolist() == pytest.approx([0.5, 1.0, 0.5, 0.25, 0.3, 1.0])


def test_effective_labels_are_the_labels_over_the_squared_width_ratio_in_every_table():
    """Found by the seed-5 draw: effective_labels = n_labelled / width_ratio^2 (bias-corrected) in the system and
    difference tables, where a tuned judge makes the ratio < 1."""
    import calibration

    rng = np.random.default_rng(9)
    rows, labels = [], []
    for d in range(80):
        for k, s in enumerate(("a", "b", "c")):
            quality = 3 + 0.3 * k + rng.normal()
            rows.append({"item_id": f"d{d:02d}", "system": s, "criterion": "q", "score": quality + rng.normal(0, 0.3),
                         "status": "ok"})
            if d < 30:
                labels.append({"item_id": f"d{d:02d}", "system": s, "annotator": "x", "criterion": "q",
                               "score": quality})
    # Labels around the scale's middle: at one end (3 on -10..20) the bounded-scale check rightly takes over (ratio 1).
    result = calibration.estimate(pd.DataFrame(rows), pd.DataFrame(labels), scale=(-4, 10))
    assert (result.estimates["interval_note"] == "").all()
    for table in (result.estimates, result.differences):
        assert (table["width_ratio"] < 1).all()
        # n / width_ratio^2 divided by the ratio's own small-sample bias (>= 1, a few % at most at 30 labels).
        plug_in = (table["n_labelled"] / table["width_ratio"] ** 2).to_numpy()
        assert (table["effective_labels"].to_numpy() <= plug_in * (1 + 1e-9)).all()
        assert (table["effective_labels"].to_numpy() >= plug_in / 1.05).all()


def test_a_judge_exactly_linear_in_the_labels_gets_the_unshrunk_lambda():
    """Found by the seed-5 draw: r^2 = 1 on the other labelled dialogues makes the shrinkage t^2 / (1 + t^2) its
    limit 1 (r^2 is held just below 1), not 0/0: lambda_i = cov_i / (var_fl_i + n / m var_f)."""
    rng = np.random.default_rng(10)
    f = rng.normal(size=100)
    y = 2.0 + 0.5 * f
    labelled = np.arange(100) < 25
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    fc = f - f.mean()
    var_f = np.sum(fc ** 2) / 99
    lams = []
    for i in range(25):
        others = np.flatnonzero(labelled & (np.arange(100) != i))
        (_, cov), (_, var_fl) = np.cov(y[others], fc[others], ddof=1)
        lams.append(cov / (var_fl + 25 / 75 * var_f))
    assert result.lam == pytest.approx(np.mean(lams), rel=1e-6)
