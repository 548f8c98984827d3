"""Properties of `judge escalate`'s statistics (calibration.cascade.threshold_tests, .walk) that whole families of
bugs break: the fixed-sequence walk, the label-free path, the cascade's order, the start step and the betting test each
written out here in plain loops from the module docstring and compared on random inputs (several judges, both kinds
of unit); the betting p-value's validity at the null's boundary and its monotonicity; and every number of the
thresholds table recounted from the decisions and the labels.

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py (constants in a formula,
a dropped term, a boundary `<` / `<=`), not against any one of them."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_escalate import JUDGES, LABELS

import calibration
from calibration.cascade.threshold_tests import (
    betting_p,
    decide,
    fit_cascade,
    min_labels,
    path_thresholds,
    start_size,
    start_step,
)
from calibration.cascade.walk import _risk_coverage, _signal_row


def path_by_hand(pool, steps):
    m, judges = pool.shape
    rows, qs = [], []
    for j in range(1, steps + 1):
        q = j / steps
        row = []
        for k in range(judges):
            values = pool[:, k][np.isfinite(pool[:, k])]
            ok = [v for v in set(values.tolist()) if (values >= v).sum() / m <= q + 1e-12]
            row.append(min(ok) if ok else np.inf)
        if not rows or row != rows[-1]:
            rows.append(row)
            qs.append(q)
    return np.array(rows), np.array(qs)


def decide_by_hand(conf, thresholds):
    out = []
    for row in conf:
        chosen = -1
        for k, (c, t) in enumerate(zip(row, thresholds)):
            if np.isfinite(c) and c >= t:
                chosen = k
                break
        out.append(chosen)
    return np.array(out)


def betting_by_hand(y, alpha, delta):
    """Waudby-Smith & Ramdas' predictable plug-in bet for one hypothesis, a scalar loop in the order the seeded
    shuffle gives: each bet uses the mean and variance of the outcomes before it (prior 1/2 and 1/4, one
    pseudo-unit)."""
    y = np.asarray(y, float)[np.random.default_rng(0).permutation(len(y))]
    count = len(y)
    mean, var, total, squares, log_wealth, best = 0.5, 0.25, 0.0, 0.0, 0.0, 0.0
    for t, value in enumerate(y):
        bet = min(math.sqrt(2 * math.log(1 / delta) / (count * var)), 0.75 / (1 - alpha))
        log_wealth += math.log(1 + bet * (alpha - value))
        best = max(best, log_wealth)
        total += value
        squares += (value - mean) ** 2
        mean, var = (0.5 + total) / (t + 2), (0.25 + squares) / (t + 2)
    return min(1.0, math.exp(-best))


@functools.cache
def start_size_by_hand(alpha, delta, power=0.8):
    """The first n from which on (for 30 counts) the exact binomial test at level delta rejects risk >= alpha with
    probability >= power when the verdicts disagree at alpha / 2: every count and outcome enumerated."""
    good = []
    n = 0
    while True:
        n += 1
        rejecting = [e for e in range(n + 1) if stats.binom.cdf(e, n, alpha) <= delta]
        good.append(bool(rejecting) and stats.binom.cdf(max(rejecting), n, alpha / 2) >= power)
        if len(good) >= 30 and all(good[-30:]):
            return n - 29


def start_by_hand(coverage, n_labelled, alpha, delta, units=None):
    for s, c in enumerate(coverage):
        if units is None:
            need = min_labels(alpha, delta)
            if c * n_labelled >= max(need + 2 * math.sqrt(need), min(start_size_by_hand(alpha, delta),
                                                                     0.4 * n_labelled)):
                return s
        else:
            mean = alpha * (1 - c / 2)
            variance = mean * (1 - mean) / max(n_labelled / units, 1.0)
            if units * (alpha - mean) ** 2 / (2 * variance) >= 1.5 * math.log(1 / delta):
                return s
    return len(coverage)


def fit_by_hand(cal_conf, cal_agree, pool_conf, alpha, delta, steps, groups=None):
    thresholds, qs = path_by_hand(pool_conf, steps)
    coverage = [np.mean(decide_by_hand(pool_conf, t) >= 0) for t in thresholds]
    n, errors, p = [], [], []
    for t in thresholds:
        first = decide_by_hand(cal_conf, t)
        accepted = first >= 0
        wrong = np.array([accepted[i] and not cal_agree[i, first[i]] for i in range(len(first))])
        n.append(int(accepted.sum()))
        errors.append(int(wrong.sum()))
        if groups is None:
            p.append(stats.binom.cdf(errors[-1], n[-1], alpha) if n[-1] else 1.0)
        else:
            names = sorted(set(groups))
            size = max(list(groups).count(g) for g in names)
            y = [(wrong[groups == g].sum() + alpha * (size - accepted[groups == g].sum())) / size for g in names]
            p.append(betting_by_hand(y, alpha, delta))
    if groups is None:
        begin = start_by_hand(coverage, len(cal_conf), alpha, delta)
    else:
        begin = start_by_hand(coverage, len(cal_conf), alpha, delta, units=len(set(groups)))
    chosen = -1
    for s in range(begin, len(qs)):
        if p[s] > delta:
            break
        chosen = s
    return thresholds, qs, coverage, n, errors, p, begin, chosen


def random_study(seed, judges=2, cal=300, pool=800, dialogues=None):
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random((cal + pool, judges)), 2)  # ties between cells are in play
    conf[rng.random(conf.shape) < 0.05] = np.nan  # a judge without a verdict here and there
    agree = rng.random((cal, judges)) < 0.75 + 0.25 * np.nan_to_num(conf[:cal])
    groups = None if dialogues is None else np.sort(rng.integers(0, dialogues, cal))
    return conf[:cal], agree, conf[cal:], groups


@pytest.mark.parametrize("seed, judges, alpha, delta, steps", [(1, 1, 0.1, 0.1, 40), (2, 2, 0.15, 0.05, 40),
                                                               (3, 3, 0.2, 0.1, 13), (4, 2, 0.05, 0.2, 40)])
def test_the_walk_over_cells_is_the_fixed_sequence_test_written_out(seed, judges, alpha, delta, steps):
    cal_conf, cal_agree, pool_conf, _ = random_study(seed, judges)
    fit = fit_cascade(cal_conf, cal_agree, pool_conf, alpha, delta, steps)
    thresholds, qs, coverage, n, errors, p, begin, chosen = fit_by_hand(cal_conf, cal_agree, pool_conf, alpha,
                                                                        delta, steps)
    path = fit.path
    assert np.array_equal(path[[f"threshold_{k}" for k in range(judges)]].to_numpy(), thresholds)
    assert path["q"].to_numpy() == pytest.approx(qs)
    assert path["pool_coverage"].to_numpy() == pytest.approx(coverage)
    assert path["n_accepted"].tolist() == n and path["disagreements"].tolist() == errors
    assert path["p_value"].to_numpy() == pytest.approx(p, rel=1e-9)
    assert fit.chosen == chosen
    assert path["rejected"].tolist() == [begin <= s <= chosen for s in range(len(qs))]
    assert path["tested"].tolist() == [begin <= s <= (chosen + 1 if chosen >= 0 else begin) for s in range(len(qs))]
    expected = thresholds[chosen] if chosen >= 0 else np.full(judges, np.inf)
    assert np.array_equal(fit.thresholds, expected)


@pytest.mark.parametrize("seed, dialogues, alpha", [(5, 60, 0.2), (6, 120, 0.15)])
def test_the_walk_over_dialogues_is_the_betting_test_written_out(seed, dialogues, alpha):
    cal_conf, cal_agree, pool_conf, groups = random_study(seed, 2, cal=400, dialogues=dialogues)
    fit = fit_cascade(cal_conf, cal_agree, pool_conf, alpha, 0.1, 40, groups=groups)
    _, _, _, n, errors, p, begin, chosen = fit_by_hand(cal_conf, cal_agree, pool_conf, alpha, 0.1, 40, groups)
    assert fit.path["p_value"].to_numpy() == pytest.approx(p, rel=1e-9)
    assert fit.chosen == chosen and fit.path["n_accepted"].tolist() == n
    assert fit.path["tested"].tolist() == [begin <= s <= (chosen + 1 if chosen >= 0 else begin)
                                           for s in range(len(n))]


def test_path_and_cascade_order_are_the_loops_of_the_docstring():
    rng = np.random.default_rng(8)
    pool = np.round(rng.random((300, 3)), 1)
    pool[:, 2] = (pool[:, 2] > 0.5).astype(float)  # a two-valued confidence
    pool[rng.random(pool.shape) < 0.1] = np.nan
    for steps in (1, 7, 40):
        thresholds, qs = path_thresholds(pool, steps)
        expected, expected_q = path_by_hand(pool, steps)
        assert np.array_equal(thresholds, expected) and qs == pytest.approx(expected_q)
        for row in thresholds:
            assert decide(pool, row).tolist() == decide_by_hand(pool, row).tolist()
    assert decide(pool, thresholds).shape == (len(thresholds), len(pool))
    # a judge with no verdict at all accepts nothing at any step
    empty = np.column_stack([pool[:, 0], np.full(len(pool), np.nan)])
    assert np.isinf(path_thresholds(empty, 10)[0][:, 1]).all()


@pytest.mark.parametrize(("alpha", "delta"), [(0.15, 0.1), (0.2, 0.1), (0.1, 0.05), (0.35, 0.1)])
def test_the_start_size_rejects_a_judge_at_half_the_allowed_rate_with_80_percent_power(alpha, delta):
    n = start_size(alpha, delta)
    assert n == start_size_by_hand(alpha, delta)
    # at that size a judge whose verdicts disagree at alpha / 2 is rejected by the binomial test 80% of the time or
    # more (simulated), where the old start (min_labels + 2 sqrt(min_labels)) fails it most of the time
    rng = np.random.default_rng(0)
    errors = rng.binomial(n, alpha / 2, 20_000)
    assert (stats.binom.cdf(errors, n, alpha) <= delta).mean() >= 0.79
    old = math.ceil(min_labels(alpha, delta) + 2 * math.sqrt(min_labels(alpha, delta)))
    assert (stats.binom.cdf(rng.binomial(old, alpha / 2, 20_000), old, alpha) <= delta).mean() < 0.6


@pytest.mark.parametrize("units", [None, 10, 40, 200])
def test_the_start_step_is_the_first_reachable_one(units):
    coverage = np.linspace(0.0, 1.0, 41)
    for n_labelled, alpha, delta in ((50, 0.1, 0.1), (300, 0.2, 0.05), (1000, 0.05, 0.1), (30, 0.1, 0.1)):
        assert start_step(coverage, n_labelled, alpha, delta, units) == start_by_hand(coverage, n_labelled, alpha,
                                                                                      delta, units)
    assert start_step(np.zeros(5), 100, 0.1, 0.1, units) == 5  # never reachable: past the end


def test_betting_p_is_the_bet_written_out_and_monotone_in_the_outcomes():
    rng = np.random.default_rng(11)
    for alpha, delta in ((0.1, 0.1), (0.2, 0.05), (0.3, 0.2)):
        y = rng.beta(1, 8, size=(3, 50))
        ours = betting_p(y, alpha, delta)
        assert ours == pytest.approx([betting_by_hand(row, alpha, delta) for row in y], rel=1e-9)
        worse = y.copy()
        worse[:, 0] = np.minimum(1.0, worse[:, 0] + 0.5)
        assert np.all(betting_p(worse, alpha, delta) >= ours - 1e-12)  # a worse outcome is never more evidence
    assert betting_p(np.full((1, 30), 0.5), 0.1, 0.1) == pytest.approx(1.0)  # y above alpha: no evidence at all


def test_betting_p_is_valid_at_the_nulls_boundary():
    """y with mean exactly alpha (H0's boundary): P(p <= delta) <= delta, over 400 draws of 80 units (a binomial
    bound: the share stays under delta + 2.5 SE)."""
    rng = np.random.default_rng(12)
    alpha, delta, reps = 0.2, 0.1, 400
    y = rng.binomial(5, alpha, size=(reps, 80)) / 5.0
    rate = float((betting_p(y, alpha, delta) <= delta).mean())
    assert rate <= delta + 2.5 * math.sqrt(delta * (1 - delta) / reps)
    # and it has power when the disagreement rate is half the allowed one
    y = rng.binomial(5, alpha / 2, size=(reps, 80)) / 5.0
    assert (betting_p(y, alpha, delta) <= delta).mean() > 0.5


# -- the verb's tables, recounted ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example():
    return calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1)


def test_the_thresholds_table_counts_are_the_decisions_own(example):
    table = example.thresholds
    for criterion, part in table.groupby("criterion"):
        decided = example.decisions[example.decisions["criterion"] == criterion]
        rows = part.set_index("judge")
        for judge in example.judges + ["human"]:
            count = int((decided["decided_by"] == judge).sum())
            assert rows.loc[judge, "unlabelled_decided"] == count
            assert rows.loc[judge, "unlabelled_share"] == pytest.approx(count / len(decided))
        judges = rows.loc[example.judges]
        cascade = rows.loc["cascade"]
        assert cascade["unlabelled_decided"] == judges["unlabelled_decided"].sum()
        assert cascade["calibration_decided"] == judges["calibration_decided"].sum()
        agreeing = (judges["agreement"].fillna(0) * judges["calibration_decided"]).sum()
        assert cascade["agreement"] == pytest.approx(agreeing / cascade["calibration_decided"])
        assert cascade["unlabelled_share"] + rows.loc["human", "unlabelled_share"] == pytest.approx(1.0)
        # every calibration cell is accepted by one judge or escalated: the two counts add up to them all
        path = example.path[example.path["criterion"] == criterion]
        n_cal = int(rows.loc["human", "calibration_decided"] + cascade["calibration_decided"])
        labels = pd.read_csv(LABELS)
        assert n_cal == len(labels[labels["criterion"] == criterion].drop_duplicates(["item_id", "system"]))
        # the path's chosen step accepted exactly the cascade's calibration cells and disagreements
        path = example.path[example.path["criterion"] == criterion]
        chosen = path[path["chosen"]]
        if len(chosen):
            assert chosen["n_accepted"].item() == cascade["calibration_decided"]
            assert chosen["disagreements"].item() == round(cascade["calibration_decided"] * (1 - cascade["agreement"]))
            assert chosen["p_value"].item() <= example.delta
        if np.isfinite(cascade["agreement_bound"]):
            errors = round(cascade["calibration_decided"] * (1 - cascade["agreement"]))
            n = int(cascade["calibration_decided"])
            high = stats.binomtest(errors, n).proportion_ci(1 - 2 * example.delta, method="exact").high
            assert cascade["agreement_bound"] == pytest.approx(1 - high)


def test_risk_coverage_and_auroc_against_loops_and_scikit_learn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(13)
    conf = np.round(rng.random(200), 2)
    conf[:10] = np.nan
    agree = rng.random(200) < 0.4 + 0.5 * np.nan_to_num(conf)
    curve = _risk_coverage(conf, agree, "c", "j", "probs", points=500)
    values = sorted(set(conf[np.isfinite(conf)].tolist()), reverse=True)
    assert curve["threshold"].tolist() == values
    for row, v in zip(curve.itertuples(), values):
        accepted = np.isfinite(conf) & (conf >= v)
        assert row.n_accepted == accepted.sum() and row.coverage == pytest.approx(accepted.mean())
        assert row.agreement == pytest.approx(agree[accepted].mean())
    few = _risk_coverage(conf, agree, "c", "j", "probs", points=10)
    assert len(few) <= 10 and few["threshold"].is_monotonic_decreasing
    row = _signal_row(conf, agree, "c", "j", "probs", True)
    finite = np.isfinite(conf)
    assert row["auroc"] == pytest.approx(roc_auc_score(agree[finite], conf[finite]))
    assert row["n"] == finite.sum() and row["agreement"] == pytest.approx(agree[finite].mean())
    assert row["distinct_values"] == len(set(conf[finite].tolist()))
    assert np.isnan(_signal_row(conf, np.ones(200, bool), "c", "j", "probs", True)["auroc"])  # one class: none


def test_the_plan_draws_the_random_part_uniformly_and_targets_every_escalated_dialogue():
    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, random_dialogues=3, seed=5)
    plan = result.plan.set_index("item_id")
    dialogues = sorted(set(result.decisions["item_id"]))
    random_part = plan[plan["part"] == "random"]
    assert len(random_part) == min(3, len(dialogues))
    assert (random_part["inclusion_probability"] == min(3, len(dialogues)) / len(dialogues)).all()
    escalated = set(result.decisions.loc[result.decisions["decided_by"] == "human", "item_id"])
    targeted = set(plan.index[plan["part"] == "targeted"])
    assert targeted == escalated - set(random_part.index)
    for item in targeted:
        count = int(((result.decisions["item_id"] == item) & (result.decisions["decided_by"] == "human")).sum())
        assert plan.loc[item, "reason"].startswith(f"escalated: {count} cell(s)")
        assert plan.loc[item, "inclusion_probability"] == 1.0


def test_the_text_prints_each_judges_threshold_and_the_cascades_line_without_one(example):
    text = example.text()
    for row in example.thresholds.itertuples():
        line = next(x for x in text.splitlines() if x.strip().startswith(row.judge + " "))
        if row.judge in ("cascade", "human"):
            assert ">=" not in line.split("calibration")[0] and "accepts none" not in line
        elif np.isfinite(row.threshold):
            assert f">= {row.threshold:.4g}" in line
        else:
            assert "accepts none" in line
        assert f"calibration {row.calibration_decided:>5}" in line
        assert f"unlabelled {row.unlabelled_decided:>6} ({row.unlabelled_share:.1%})" in line


def test_labels_judged_against_human_numbers_are_compared_as_text_and_said_for_that_criterion_only():
    """Two criteria, both judged with labels: on c1 the humans gave numbers (1 / 0), on c2 labels. The note names
    c1 alone, and the numbers match the judge's labels as text ("1" is "1")."""
    rng = np.random.default_rng(5)
    judge, labels = [], []
    for d in range(60):
        truth = int(rng.random() < 0.5)
        for criterion, text in (("c1", str(truth)), ("c2", "yes" if truth else "no")):
            judge.append({"item_id": f"d{d:02d}", "system": "s", "criterion": criterion, "score": np.nan,
                          "label": text, "status": "label"})
            if d < 30:
                labels.append({"item_id": f"d{d:02d}", "system": "s", "annotator": "a", "criterion": criterion,
                               "score": float(truth) if criterion == "c1" else np.nan,
                               "label": None if criterion == "c1" else text})
    result = calibration.escalate(pd.DataFrame(labels), {"j": pd.DataFrame(judge)}, alpha=0.2, delta=0.1)
    notes = [w for w in result.warnings if "compared as text" in w]
    assert notes == ["c1: the judges give labels and the humans numbers: compared as text"]
    rows = result.thresholds.set_index(["criterion", "judge"])
    assert rows.loc[("c1", "j"), "agreement"] == 1.0 and rows.loc[("c2", "j"), "agreement"] == 1.0
    assert rows.loc[("c1", "j"), "calibration_decided"] == 30  # the judge agrees everywhere: everything accepted


# -- --path-cells: the sample that fixes the path, and the warning for a judge lacking part of it -----------------


def _rounds(path_cells, judged_path_cells):
    """The large judge has judged the labelled cells and the first `judged_path_cells` of the path's cells (the ones
    a first round lists as pending for it); returns the first round's pending cells and the second round's result."""
    import judge

    frames = {name: judge.judgments_frame(path) for name, path in JUDGES.items()}
    labels = pd.read_csv(LABELS)
    have = set(zip(labels["item_id"], labels["system"]))
    large = frames["large"]
    cell = list(zip(large["item_id"], large["system"]))
    first = calibration.escalate(LABELS, {"small": frames["small"], "large": large[[c in have for c in cell]]},
                                 alpha=0.2, delta=0.1, path_cells=path_cells)
    path = list(zip(first.pending["item_id"], first.pending["system"]))
    have |= set(path[:judged_path_cells])
    second = calibration.escalate(LABELS, {"small": frames["small"], "large": large[[c in have for c in cell]]},
                                  alpha=0.2, delta=0.1, path_cells=path_cells)
    return first, second


@pytest.mark.parametrize("path_cells", [60, 179, 180, 500])
def test_path_cells_draws_that_many_distinct_unlabelled_cells(path_cells):
    """The example has 180 unlabelled cells: --path-cells N fixes the path with N distinct ones (all of them from 180
    on), and a judge that has judged only the labelled cells is asked for exactly those."""
    first, _ = _rounds(path_cells, 0)
    pending = first.pending
    assert set(pending["judge"]) == {"large"}
    assert len(pending) == len(set(zip(pending["item_id"], pending["system"]))) == min(path_cells, 180)
    unlabelled = set(zip(first.decisions["item_id"], first.decisions["system"]))
    assert set(zip(pending["item_id"], pending["system"])) <= unlabelled


@pytest.mark.parametrize("judged, warned", [(90, False), (89, True)])
def test_a_judge_lacking_more_than_a_tenth_of_the_path_is_warned_about_and_a_tenth_is_not(judged, warned):
    """100 path cells: lacking 10 (exactly a tenth) is not warned about, lacking 11 is, with the count."""
    _, second = _rounds(100, judged)
    lacking = [w for w in second.warnings if "cells that fix the path" in w]
    expected = (f"clarity: large has no verdict on {100 - judged} of the 100 cells that fix the path: its thresholds "
                "are set as if it would not accept them (judge them for coverage)")
    assert lacking == ([expected] if warned else [])
    assert len(second.pending[second.pending["judge"] == "large"]) == 100 - judged  # the rest of the path is pending


@pytest.mark.parametrize("random_dialogues", [30, 59, 60, 61])
def test_the_plans_random_part_is_that_many_distinct_dialogues(random_dialogues):
    """The example decides cells of 60 dialogues: a uniform draw of k of them without replacement, all from 60 on."""
    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, random_dialogues=random_dialogues, seed=2)
    dialogues = set(result.decisions["item_id"])
    assert len(dialogues) == 60
    drawn = result.plan[result.plan["part"] == "random"]
    assert drawn["item_id"].is_unique and len(drawn) == min(random_dialogues, 60)
    assert (drawn["inclusion_probability"] == min(random_dialogues, 60) / 60).all()
