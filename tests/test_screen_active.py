"""`judge screen --design active` and `judge estimate --plan` on its plan: inclusion probabilities, the fixed-size
draw, the 1/p-weighted estimator against independent computations, planted and recovered, and bad input."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.designs import ACTIVE_FLOOR, inclusion_probabilities, systematic_sample
from calibration.study.ppi_weighted import ppi_mean_weighted
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "examples" / "study"
JUDGMENTS, LABELS = FIXTURES / "judgments.jsonl", FIXTURES / "labels.csv"
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_probabilities_sum_to_the_size_rise_with_uncertainty_and_keep_the_floor():
    u = np.random.default_rng(0).random(80) ** 3
    pi = inclusion_probabilities(u, 20)
    assert pi.sum() == pytest.approx(20)
    assert pi.min() >= ACTIVE_FLOOR * 20 / 80 - 1e-12 and pi.max() <= 1.0
    assert (np.diff(pi[np.argsort(u)]) >= -1e-12).all()
    np.testing.assert_allclose(inclusion_probabilities(np.zeros(10), 4), 0.4)
    capped = inclusion_probabilities(np.r_[100.0, np.ones(9)], 5, floor=0.0)  # one dialogue would get p > 1
    assert capped[0] == 1.0 and capped.sum() == pytest.approx(5)


def test_the_draw_has_the_size_and_the_probabilities_it_claims():
    rng = np.random.default_rng(1)
    pi = inclusion_probabilities(rng.random(30), 8)
    counts = np.zeros(30)
    for _ in range(6000):
        drawn = systematic_sample(pi, rng)
        assert len(drawn) == 8 and len(set(drawn)) == 8
        counts[drawn] += 1
    # each count is binomial(6000, pi): none further than 4.5 sd from its expectation
    z = (counts - 6000 * pi) / np.sqrt(6000 * pi * (1 - pi) + 1e-12)
    assert np.abs(z).max() < 4.5


def test_equal_probabilities_give_the_human_t_interval_and_the_plain_mean():
    rng = np.random.default_rng(2)
    y, f = rng.normal(3, 1, 60), rng.normal(size=60)
    labelled = np.arange(60) < 8  # below MIN_TUNED: lambda 0
    result = ppi_mean_weighted(np.where(labelled, y, np.nan), f, 8 / 60)
    interval = stats.ttest_1samp(y[labelled], 0).confidence_interval(0.95)
    assert (result.ci_low, result.ci_high) == pytest.approx((interval.low, interval.high))
    assert result.estimate == pytest.approx(y[labelled].mean())


def test_unequal_probabilities_give_the_hajek_mean_and_its_linearised_variance():
    rng = np.random.default_rng(3)
    y, f = rng.normal(3, 1, 50), rng.normal(size=50)
    pi = rng.uniform(0.05, 0.5, 50)
    labelled = np.zeros(50, bool)
    labelled[rng.choice(50, 9, replace=False)] = True
    result = ppi_mean_weighted(np.where(labelled, y, np.nan), f, pi)
    w = 1 / pi[labelled]
    mean = np.average(y[labelled], weights=w)
    z = w * (y[labelled] - mean) / w.sum()  # the ratio estimator's linearisation
    se = np.sqrt(np.sum(z * z) * 9 / 8)
    kish = int(np.floor(w.sum() ** 2 / np.sum(w * w) + 1e-9))
    q = stats.t.ppf(0.975, kish - 1)
    assert result.estimate == pytest.approx(mean)
    assert (result.ci_low, result.ci_high) == pytest.approx((mean - q * se, mean + q * se))


@pytest.mark.parametrize("components, n, k, kish, tuned, expected", [
    ([1.0] * 20, 20, 2, 14, True, 18),  # equal terms: n - k (Satterthwaite 3 * 20^2 / 20 * 18 / 20 = 54, capped)
    ([1.0] + [1e-6] * 19, 20, 2, 14, True, 12),  # one term carries all: 3 * 18 / 20 = 2.7, floored at Kish - k
    ([16.0, 16.0] + [1.0] * 10, 12, 2, 8, True, 3 * 42 ** 2 / 522 * 10 / 12),  # between: 8.45
    ([1.0] + [1e-6] * 29, 30, 1, 20, True, 19),  # lambda cross-fitted: nothing fitted on the labels but the mean
    ([1.0] * 20, 20, 1, 14, False, 13),  # lambda not tuned: Kish's n_eff - 1 whatever the terms
])
def test_the_weighted_df_is_satterthwaites_on_the_residual_terms_between_kish_and_n(components, n, k, kish, tuned,
                                                                                      expected):
    from calibration.study.ppi_weighted import weighted_df

    assert float(weighted_df(np.array(components), np.float64(n), np.float64(k), np.float64(kish),
                             np.bool_(tuned))) == pytest.approx(expected)


def test_effective_labels_of_unequal_weights_for_nothing_count_fewer_than_n_uniform_labels():
    """A constant judge (lambda 0): the estimate is the Hajek mean, whose interval is as wide as its human-only one,
    yet n labels drawn with unequal probabilities are worth fewer than n drawn uniformly (the design effect)."""
    from calibration.study.ppi import effective_labels

    rng = np.random.default_rng(4)
    pi = rng.uniform(0.05, 0.5, 200)
    labelled = np.zeros(200, bool)
    labelled[rng.choice(200, 30, replace=False)] = True
    result = ppi_mean_weighted(np.where(labelled, rng.normal(3, 1, 200), np.nan), np.full(200, 3.0), pi)
    assert float(result.ci_high - result.ci_low) == pytest.approx(
        float(result.human_only_ci_high - result.human_only_ci_low))
    w = 1 / pi[labelled]
    kish = w.sum() ** 2 / np.sum(w * w)
    assert kish - 3 < float(effective_labels(result)) < 30 - 3  # near Kish's n_eff, not the 30 labels


@pytest.mark.parametrize("kind, size, n", [("gaussian", 100, 50), ("likert", 500, 20)])
def test_effective_labels_of_an_active_draw_match_what_it_is_worth(kind, size, n):
    """Printed effective_labels over what the estimate was worth (n x the uniform human-only squared error over
    the active estimate's), 1,000 studies: never above 1.15 (MC se about 0.05-0.07), and not far below. Uncorrected
    (the Hajek interval as the human-only one, no ratio bias) it printed 1.32 and 1.31 x the worth in these cells
    (benchmarks/active_design.py); with lambda cross-fitted from 20 labels the se is a little conservative at
    n = 50 of N = 100 and the printed value 0.85 x the worth there (understating, never overstating)."""
    from active_design import run_cell

    out = run_cell(kind, 0.1, "informative", n, size, 1000, seed=3, savings=False, bootstrap=50)
    assert 0.8 < out["effective"][0] < 1.15


@pytest.mark.parametrize("kind, hard, signal, size, n", [("gaussian", 0.1, "informative", 500, 50),
                                                         ("likert", 0.2, "informative", 100, 20),
                                                         ("likert", 0.2, "useless", 100, 20)])
def test_planted_means_are_recovered_and_an_informative_signal_saves_labels(kind, hard, signal, size, n):
    from active_design import run_cell

    out = run_cell(kind, hard, signal, n, size, 400, seed=7, bootstrap=100)
    assert out["active"]["coverage"] >= 0.925 and out["uniform"]["coverage"] >= 0.925
    if signal == "informative":
        assert out["saved"][1] > 0.05  # the Monte Carlo interval of the labels saved is above 5%
    else:  # a useless signal costs labels (unequal weights for nothing): why screen checks it on a pilot
        assert out["saved"][2] < 0.0


def brute_force_lambda(y, f, weights, judged_mean, var_f, big_n):
    """The lambda minimising the weighted variance on labels (y, f) with Hajek weights `weights`, found numerically on
    the variance itself, lambda^2 var_f / N + (2 lambda / N) sum b (f - mean_all f) r + sum b^2 r^2, then shrunk by
    the t^2 / (1 + t^2) of the weighted correlation on Kish's n (numpy's weighted covariance)."""
    from scipy.optimize import minimize_scalar

    b = weights / weights.sum()

    def variance(lam):
        r = (y - b @ y) - lam * (f - b @ f)
        return lam * lam * var_f / big_n + 2 * lam / big_n * np.sum(b * (f - judged_mean) * r) + np.sum(b * b * r * r)

    best = minimize_scalar(variance, bracket=(-5.0, 5.0), tol=1e-12).x
    c = np.cov(f, y, aweights=b)
    r2 = c[0, 1] ** 2 / (c[0, 0] * c[1, 1])
    t2 = r2 * (1.0 / np.sum(b * b) - 2.0) / (1.0 - r2)
    return best * t2 / (1.0 + t2)


def test_from_twenty_labels_each_labels_lambda_is_tuned_on_the_others_only():
    """Each labelled dialogue's lambda is the one the other labels would choose alone (leave one out), so no label's
    lambda has seen it: the printed lambda is their a-weighted mean and the estimate sum a_i (y_i - lambda_i (f_i -
    mean_all f)). The in-sample lambda (all labels, the label's own included) fails both by 1e-3 or more."""
    rng = np.random.default_rng(12)
    dialogues, n = 150, 24
    f = rng.normal(3, 1, dialogues)
    y = np.clip(np.rint(f + rng.normal(0, 0.8, dialogues)), 1, 5)
    pi = inclusion_probabilities(rng.random(dialogues), n)
    drawn = systematic_sample(pi, rng)
    result = ppi_mean_weighted(np.where(np.isin(np.arange(dialogues), drawn), y, np.nan), f, pi)
    w = 1 / pi[drawn]
    a = w / w.sum()
    var_f = np.var(f, ddof=1)
    own = np.array([brute_force_lambda(np.delete(y[drawn], i), np.delete(f[drawn], i), np.delete(w, i), f.mean(),
                                       var_f, dialogues) for i in range(n)])
    assert np.ptp(own) > 1e-3  # the lambdas differ: each is tuned on a different set
    assert float(result.lam) == pytest.approx(a @ own, rel=1e-6)
    assert float(result.estimate) == pytest.approx(a @ (y[drawn] - own * (f[drawn] - f.mean())), rel=1e-9)


def test_rare_failures_at_fifty_active_labels_are_covered():
    """Rare failures (10% of summaries badly wrong, the judge calling fine those on its hard dialogues), 6 systems,
    50 active labels of 100, 500 studies: with lambda tuned on the labels it corrects the interval covered
    0.910-0.926 on five seeds (skewed residuals fitted); cross-fitted, 0.944-0.955."""
    from active_design import run_cell

    for signal in ("informative", "useless"):
        out = run_cell("rare", 0.1, signal, 50, 100, 500, seed=0, savings=False, bootstrap=2, systems=6)
        assert out["shown"] > 0.98
        assert out["active"]["coverage"] >= 0.935


def run(*args):
    try:
        return main([*map(str, args)])
    except SystemExit as stop:
        return stop.code


def test_cli_active_plan_records_probabilities_and_estimate_weighs_by_them(tmp_path, capsys):
    out = tmp_path / "plan"
    assert run("screen", "--judgments", JUDGMENTS, "--budget", 12, "--random-share", 1, "--design", "active",
               "--bootstrap", 200, "--output-dir", out) == 0
    printed = capsys.readouterr()
    assert "inclusion probabilities rising with the judge's uncertainty" in printed.out
    assert "unchecked (no --human pilot)" in printed.err
    plan = pd.read_csv(out / "plan.csv")
    assert list(plan.columns) == ["item_id", "part", "reason", "inclusion_probability"]
    assert plan["inclusion_probability"].between(0, 1, inclusive="right").all()
    info = json.loads((out / "plan.json").read_text())
    assert info["design"] == "active" and info["uncertainty_share"] == pytest.approx(1 - ACTIVE_FLOOR)
    labels = pd.read_csv(LABELS)
    labels = labels[labels["item_id"].isin(plan["item_id"])]
    labels.to_csv(tmp_path / "labels.csv", index=False)
    assert run("estimate", "--judgments", JUDGMENTS, "--human", tmp_path / "labels.csv", "--plan", out,
               "--output-dir", tmp_path / "est") == 0
    assert "weighs 1/p" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "est" / "estimates.csv")
    row = table.iloc[0]
    mine = labels[(labels.criterion == row.criterion) & (labels.system == row.system)]
    human = mine.groupby("item_id")["score"].mean()
    pi = plan.set_index("item_id")["inclusion_probability"].reindex(human.index)
    assert row.human_only == pytest.approx(np.average(human, weights=1 / pi))


def test_a_pilot_where_uncertainty_does_not_predict_the_error_falls_back_to_uniform(tmp_path, capsys):
    out = tmp_path / "plan"
    assert run("screen", "--judgments", JUDGMENTS, "--human", FIXTURES / "pilot_labels.csv", "--budget", 10,
               "--design", "active", "--bootstrap", 200, "--output-dir", out) == 0
    error = capsys.readouterr().err
    assert "draw is uniform" in error or "falls back to uniform" in error
    plan = pd.read_csv(out / "plan.csv")
    random = plan[plan.part == "random"]["inclusion_probability"]
    assert np.allclose(random, random.iloc[0])


@pytest.mark.parametrize("signal, low, high", [("useless", 0.0, 0.25), ("informative", 0.6, 1.0)])
def test_the_pilot_check_goes_active_when_the_uncertainty_marks_where_the_judge_errs(signal, low, high):
    """signal_check on 60 simulated pilots of 30 dialogues (a judge bad on 20% of 100 dialogues): a useless signal
    passes about at the test's level (0.1), one that marks the bad dialogues nearly always (measured 0.92-0.94 at
    250 pilots; the Spearman check it replaced, 0.53-0.55 at 1,000)."""
    from active_design import population

    from calibration.study.designs import pilot_errors, signal_check

    rng = np.random.default_rng(8)
    y, f, u = population(rng, 60, 100, "gaussian", 0.2)
    if signal == "useless":
        u = rng.permuted(u, axis=1)
    ids = np.array([f"d{i}" for i in range(100)])
    active = 0
    for r in range(60):
        items = pd.DataFrame({"item_id": ids, "uncertainty": u[r]})
        judge = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "score": f[r], "status": "ok"})
        chosen = rng.choice(100, 30, replace=False)
        pilot = pd.DataFrame({"item_id": ids[chosen], "system": "a", "criterion": "c", "human": y[r, chosen]})
        active += signal_check(items, pilot_errors(judge, pilot))[0] > 0
    assert low <= active / 60 <= high


def _bad_probability(tmp_path, value="1.5"):
    out = tmp_path / f"plan{value}"
    run("screen", "--judgments", JUDGMENTS, "--budget", 10, "--design", "active", "--bootstrap", 200,
        "--output-dir", out)
    text = (out / "plan.csv").read_text().splitlines()
    first = text[1].rsplit(",", 1)[0] + "," + value
    (out / "plan.csv").write_text("\n".join([text[0], first, *text[2:]]) + "\n")
    return out


BAD_INPUT = [
    ("active with a budget in judgments", lambda t: ["screen", "--judgments", JUDGMENTS, "--budget", 30,
                                                      "--budget-unit", "judgments", "--design", "active"],
     "--design active draws dialogues with known probabilities"),
    ("an unknown design", lambda t: ["screen", "--judgments", JUDGMENTS, "--budget", 6, "--design", "clever"],
     "invalid choice: 'clever'"),
    ("a probability above 1 in plan.csv", lambda t: ["estimate", "--judgments", JUDGMENTS, "--human", LABELS,
                                                      "--plan", _bad_probability(t)],
     "plan.csv:2: inclusion_probability must be a number in (0, 1]"),
    ("an empty probability on a random row", lambda t: ["estimate", "--judgments", JUDGMENTS, "--human", LABELS,
                                                         "--plan", _bad_probability(t, "")],
     "plan.csv:2: inclusion_probability must be a number in (0, 1]"),
]


@pytest.mark.parametrize("case, args, message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, case, args, message):
    given = args(tmp_path)
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.csv").write_text("kept\n")
    assert run(*given, "--output-dir", out) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert sorted(p.name for p in out.iterdir()) == ["kept.csv"]


@pytest.mark.parametrize("probabilities, weighted", [(["0.25", "0.25", "1.0"], False),  # `judge escalate`'s plans
                                                     (["0.25", "0.5", ""], True)])
def test_only_unequal_recorded_probabilities_weigh_the_labels(tmp_path, probabilities, weighted):
    from calibration.study.estimate import plan_inclusion

    (tmp_path / "plan.json").write_text('{"version": 1}')
    pd.DataFrame({"item_id": ["a", "b", "c"], "part": ["random", "random", "targeted"], "reason": "x",
                  "inclusion_probability": probabilities}).to_csv(tmp_path / "plan.csv", index=False)
    found = plan_inclusion(tmp_path)
    assert (found == {"a": 0.25, "b": 0.5}) if weighted else found is None
