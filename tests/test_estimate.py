"""`judge estimate`: the PPI++ estimator against independent computations, the CLI on invented fixtures, bad input."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.ppi import ppi_mean
from judge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "examples" / "study"
JUDGMENTS = FIXTURES / "judgments.jsonl"
LABELS = FIXTURES / "labels.csv"
PLAN = FIXTURES / "plan"


def correlated(rng, size, rho=0.7, scale=1.0, shift=0.0):
    """Human scores y and judge scores f with correlation rho; the judge on another scale (scale, shift)."""
    f = rng.normal(size=size)
    y = 3.0 + rho * f + np.sqrt(1 - rho * rho) * rng.normal(size=size)
    return y, scale * f + shift


def reference_cross_fitted(y, f, labelled, confidence=0.95):
    """Cross-fitted PPI++ (from MIN_CROSS_FITTED labels on) written out from the formulas, one vector and one
    labelled dialogue at a time, with plain numpy and scipy: dialogue i's lambda is tuned on the other labelled
    dialogues (np.cov) and shrunk by t^2 / (1 + t^2), t the others' correlation t statistic (scipy.stats.pearsonr);
    t interval on n - 1 df."""
    f = f - f.mean()  # the judge centred on all judged dialogues
    yl, fl, fu = y[labelled], f[labelled], f[~labelled]
    n, m = len(yl), len(fu)
    var_f = np.var(f, ddof=1)
    lams = np.empty(n)
    for i in range(n):
        others = np.arange(n) != i
        (_, cov), (_, var_fl) = np.cov(yl[others], fl[others], ddof=1)
        r = stats.pearsonr(yl[others], fl[others]).statistic
        t2 = r * r * (n - 3) / (1 - r * r)
        lams[i] = cov / (var_fl + n / m * var_f) * t2 / (1 + t2)
    rectified = yl - lams * fl
    lam = lams.mean()
    estimate = rectified.mean() + lam * fu.mean()
    se = np.sqrt(lam ** 2 * var_f / m + np.var(rectified, ddof=1) / n)
    q = stats.t.ppf(0.5 + confidence / 2, n - 1)
    return estimate, lam, se, (estimate - q * se, estimate + q * se)


def reference_in_sample(y, f, labelled, confidence=0.95):
    """PPI++ with lambda fitted on all labels (below MIN_CROSS_FITTED) written out from the formulas, one vector at a
    time, with plain numpy and scipy: lambda tuned on the labels, so the residuals have n - 2 degrees of freedom and
    lambda's own error is added at the unlabelled mean."""
    yl, fl, fu = y[labelled], f[labelled], f[~labelled]
    n, m = len(yl), len(fu)
    var_f = np.var(f, ddof=1)
    lam = np.cov(yl, fl, ddof=1)[0, 1] / (np.var(fl, ddof=1) + n / m * var_f)
    estimate = yl.mean() + lam * (fu.mean() - fl.mean())
    residual = np.sum((yl - yl.mean() - lam * (fl - fl.mean())) ** 2) / (n - 2)
    leverage = (fu.mean() - fl.mean()) ** 2 / np.sum((fl - fl.mean()) ** 2)
    se = np.sqrt(lam ** 2 * var_f / m + residual * (1 / n + leverage))
    q = stats.t.ppf(0.5 + confidence / 2, n - 2)
    return estimate, lam, se, (estimate - q * se, estimate + q * se)


def reference_ppi(y, f, labelled, confidence=0.95):
    """The estimator `judge estimate` prints from MIN_TUNED labels on: fitted on all labels below 20, cross-fitted
    from there."""
    if labelled.sum() >= 20:
        return reference_cross_fitted(y, f, labelled, confidence)
    return reference_in_sample(y, f, labelled, confidence)


@pytest.mark.parametrize("count", [14, 36])  # lambda fitted on the row's labels; cross-fitted
def test_ppi_matches_the_formulas_row_by_row(count):
    rng = np.random.default_rng(1)
    y, f = correlated(rng, (5, 120), scale=0.2, shift=-3.0)
    labelled = rng.random((5, 120)).argsort(axis=1) < count
    result = ppi_mean(np.where(labelled, y, np.nan), f, confidence=0.9)
    for row in range(5):
        estimate, lam, se, (low, high) = reference_ppi(y[row], f[row], labelled[row], 0.9)
        assert result.estimate[row] == pytest.approx(estimate)
        assert result.lam[row] == pytest.approx(lam)
        assert result.se[row] == pytest.approx(se)
        assert (result.ci_low[row], result.ci_high[row]) == pytest.approx((low, high))


def test_human_only_interval_is_scipys_t_interval():
    rng = np.random.default_rng(2)
    y, f = correlated(rng, 60)
    labelled = np.arange(60) < 18
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    low, high = stats.t.interval(0.95, 17, loc=y[:18].mean(), scale=stats.sem(y[:18]))
    assert (result.human_only_ci_low, result.human_only_ci_high) == pytest.approx((low, high))
    assert result.human_only == pytest.approx(y[:18].mean())
    fixed = ppi_mean(np.where(labelled, y, np.nan), f, lam=0.0)
    assert (fixed.ci_low, fixed.ci_high) == pytest.approx((low, high))  # lambda = 0 is the human-only interval


@pytest.mark.parametrize("rho", [0.9, -0.6])
def test_narrower_with_a_good_judge(rho):
    rng = np.random.default_rng(3)
    y, f = correlated(rng, (300, 80), rho=rho)
    labelled = rng.random((300, 80)) < 0.3
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    # Theory: the width ratio tends to sqrt(1 - rho^2 m / (m + n)), plus what lambda's own error costs.
    expected = np.sqrt(1 - rho ** 2 * 0.7)
    assert np.median(result.width_ratio) == pytest.approx(expected, abs=0.06)


def test_with_a_useless_judge_the_price_of_lambda_is_small():
    """No free lunch: a judge uncorrelated with humans makes the interval a little wider (lambda is estimated),
    never narrower than the truth allows; the shrunk, cross-fitted lambda keeps it near 1 + 0.3/n at n = 24."""
    rng = np.random.default_rng(3)
    y, f = correlated(rng, (2000, 80), rho=0.0)
    labelled = np.zeros((2000, 80), dtype=bool)
    labelled[:, :24] = True
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    assert 1.0 < np.mean(result.width_ratio) < 1.03


def test_the_tuned_interval_is_the_regression_prediction_interval_of_statsmodels():
    """Below MIN_CROSS_FITTED labels, with (almost) every judged dialogue unlabelled, PPI++'s lambda is the
    least-squares slope of y on f and the estimate is the regression's prediction at the unlabelled mean of f: its
    standard error and t quantile (n - 2 degrees of freedom) must be statsmodels' se_mean of that prediction."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(8)
    y, f = correlated(rng, 200_000, rho=0.6)
    labelled = np.zeros(200_000, dtype=bool)
    labelled[:12] = True
    f[:12] += 0.8  # the labelled dialogues sit away from the judged mean: lambda's own error matters
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    fit = sm.OLS(y[:12], sm.add_constant(f[:12])).fit()
    prediction = fit.get_prediction(np.array([[1.0, f[12:].mean()]]))
    assert float(result.lam) == pytest.approx(fit.params[1], rel=1e-3)
    assert float(result.estimate) == pytest.approx(prediction.predicted_mean[0], rel=1e-4)
    assert float(np.sqrt(result.var_residual)) == pytest.approx(prediction.se_mean[0], rel=1e-3)
    low, high = prediction.conf_int(alpha=0.05)[0]
    assert (float(result.ci_low), float(result.ci_high)) == pytest.approx((low, high), rel=1e-3)


def test_each_lambda_is_tuned_without_its_own_label():
    """Cross-fitting: changing one labelled dialogue's human score leaves its own lambda unchanged (it moves every
    other one), so each rectified term y_i - lambda_i f_i is unbiased; the estimate moves by exactly the change / n
    plus what the others' lambdas do."""
    from calibration.study.ppi import cross_fitted_lambdas

    rng = np.random.default_rng(9)
    y, f = correlated(rng, 40, rho=0.6)
    labelled = np.arange(40) < 12
    f = f - f.mean()
    y0, fl = np.where(labelled, y, 0.0), np.where(labelled, f, 0.0)
    n, m, var_f = np.array([12.0]), np.array([28.0]), np.array([np.var(f, ddof=1)])
    before = cross_fitted_lambdas(labelled, y0, fl, n, m, var_f)
    y0[3] += 5.0
    after = cross_fitted_lambdas(labelled, y0, fl, n, m, var_f)
    assert after[3] == pytest.approx(before[3], rel=1e-12)
    assert np.all(np.abs(np.delete(after - before, 3)[:11]) > 1e-6)
    assert np.all(after[~labelled] == 0.0)


def test_unbiased_and_covering_on_simulated_populations():
    """Superpopulation check: fresh dialogues each repetition, the interval covers the true mean 3.0."""
    rng = np.random.default_rng(4)
    y, f = correlated(rng, (4000, 60), rho=0.8, scale=5.0)
    labelled = np.zeros((4000, 60), dtype=bool)
    labelled[:, :20] = True
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    covered = (result.ci_low <= 3.0) & (3.0 <= result.ci_high)
    assert covered.mean() == pytest.approx(0.95, abs=0.015)
    assert result.estimate.mean() == pytest.approx(3.0, abs=0.01)
    assert np.mean(result.ci_high - result.ci_low) < np.mean(result.human_only_ci_high - result.human_only_ci_low)


def test_many_rows_and_repetitions_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(7)
    y, f = correlated(rng, (4, 40), rho=0.6, scale=3.0, shift=10.0)
    y[1, 5] = np.nan  # a dialogue without a label in one row: it stays judged-only there
    f[2, 7] = np.nan  # a dialogue not judged for one row: not in that row's population
    masks = rng.random((6, 1, 40)) < 0.4
    together = ppi_mean(np.where(masks, y[None], np.nan), f[None])  # (repetitions, rows)
    for r in range(6):
        for row in range(4):
            alone = ppi_mean(np.where(masks[r, 0], y[row], np.nan), f[row])
            for name in ("estimate", "se", "ci_low", "ci_high", "lam", "human_only_ci_high"):
                np.testing.assert_allclose(getattr(together, name)[r, row], getattr(alone, name), rtol=1e-9,
                                           atol=1e-12)


def test_all_labelled_or_constant_judge_falls_back_to_humans():
    y = np.array([1.0, 2.0, 4.0, 5.0, 3.0])
    everything = ppi_mean(y, y + 1)
    assert everything.lam == 0.0 and everything.estimate == pytest.approx(3.0)
    constant = ppi_mean(np.array([1.0, 2.0, 4.0, np.nan, np.nan, np.nan]), np.full(6, 2.0))
    assert constant.lam == 0.0 and constant.estimate == pytest.approx(7 / 3)


def test_paired_difference_is_the_estimator_on_differences_and_scipys_paired_t_without_judge():
    rng = np.random.default_rng(5)
    ya, fa = correlated(rng, 50)
    yb, fb = ya - 0.3 + 0.5 * rng.normal(size=50), fa - 0.2 + 0.4 * rng.normal(size=50)
    labelled = np.arange(50) < 25
    result = ppi_mean(np.where(labelled, ya - yb, np.nan), fa - fb)
    interval = stats.ttest_rel(ya[:25], yb[:25]).confidence_interval(0.95)
    assert (result.human_only_ci_low, result.human_only_ci_high) == pytest.approx((interval.low, interval.high))


def test_against_ppi_python():
    """The authors' cross-prediction estimator (crossppi_mean_*), given our n leave-one-out models' predictions:
    the same point estimate; their interval is normal (z) with ddof=0 variances and the unlabelled part's variance
    over the unlabelled dialogues only, so at n = 300 ours is theirs within 2%."""
    ppi_py = pytest.importorskip("ppi_py", reason="ppi_python (the method authors' library) is not installed")
    from calibration.study.ppi import cross_fitted_lambdas

    rng = np.random.default_rng(6)
    y, f = correlated(rng, 3000, rho=0.6, scale=1.0)
    labelled = np.arange(3000) < 300
    result = ppi_mean(np.where(labelled, y, np.nan), f)
    centred = f - f.mean()
    y0, fl = np.where(labelled, y - y[labelled].mean(), 0.0), np.where(labelled, centred, 0.0)
    lams = cross_fitted_lambdas(labelled, y0, fl, np.array([300.0]), np.array([2700.0]),
                                np.array([np.var(centred, ddof=1)]))[labelled]
    yl, fl, fu = y[labelled], centred[labelled], centred[~labelled]
    predictions, unlabelled = lams * fl, fu[:, None] * lams[None, :]  # model i: lambda_i f
    assert float(ppi_py.crossppi_mean_pointestimate(yl, predictions, unlabelled)[0]) == \
        pytest.approx(float(result.estimate), rel=1e-9)
    low, high = ppi_py.crossppi_mean_ci(yl, predictions, unlabelled, alpha=0.05)
    z = stats.norm.ppf(0.975)
    assert float(high[0] - low[0]) / 2 / z == pytest.approx(float(result.se), rel=0.02)
    assert float(result.lam) == pytest.approx(lams.mean())



def run_cli(*args):
    return main(["estimate", *map(str, args)])


def test_help_teaches_with_an_example_that_runs(capsys, tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as stop:
        main(["estimate", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert "judge estimate --judgments examples/study/judgments.jsonl" in text
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(["estimate", "--judgments", "examples/study/judgments.jsonl", "--human",
                 "examples/study/labels.csv", "--plan", "examples/study/plan"]) == 0


def test_with_plan_uses_only_the_random_part(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli("--judgments", JUDGMENTS, "--human", LABELS, "--plan", PLAN, "--output-dir", out,
                   "--report", tmp_path / "r.html") == 0
    printed = capsys.readouterr().out
    assert "the 6 labelled dialogues of the plan's random part" in printed
    estimates = pd.read_csv(out / "estimates.csv")
    assert {"criterion", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
            "human_only_ci_high", "n_labelled", "n_judged", "width_ratio", "lambda"} <= set(estimates.columns)
    assert set(estimates["n_labelled"]) == {6}
    cells = estimates.set_index(["criterion", "system"])
    # The fixture's failed judgment (d01, gamma, accuracy) stays in the population without a number; its N/A
    # (d04, beta, clarity) takes the dialogue out of that system's population.
    assert (cells.loc[("accuracy", "gamma"), "n_judged"], cells.loc[("accuracy", "gamma"), "n_dialogues"]) == (15, 16)
    assert (cells.loc[("clarity", "beta"), "n_judged"], cells.loc[("clarity", "beta"), "n_dialogues"]) == (15, 15)
    assert (estimates.ci_high - estimates.ci_low <= estimates.human_only_ci_high - estimates.human_only_ci_low
            + 1e-12).all()
    differences = pd.read_csv(out / "differences.csv")
    assert {"criterion", "system_a", "system_b", "estimate", "ci_low", "ci_high", "human_only_ci_low",
            "human_only_ci_high"} <= set(differences.columns)
    assert len(differences) == 2 * 3
    # The human-only numbers come from the random part's labels alone, recomputed here with pandas.
    plan = pd.read_csv(PLAN / "plan.csv", dtype=str)
    labels = pd.read_csv(LABELS, dtype={"item_id": str})
    random_part = labels[labels.item_id.isin(plan.loc[plan.part == "random", "item_id"])]
    means = random_part.groupby(["criterion", "system", "item_id"]).score.mean().groupby(["criterion", "system"]).mean()
    for row in estimates.itertuples():
        assert row.human_only == pytest.approx(means[(row.criterion, row.system)])
    targeted = pd.read_csv(out / "targeted.csv")
    assert set(targeted["n_labelled"]) == {4}
    assert json.loads((out / "summary.json").read_text())["random_sample"] == "plan"
    assert "data:image/png;base64," in (tmp_path / "r.html").read_text()


def test_without_plan_every_labelled_dialogue_is_the_random_sample(tmp_path, capsys):
    assert run_cli("--judgments", JUDGMENTS, "--human", LABELS, "--output-dir", tmp_path) == 0
    assert "no --plan given, so all 10 labelled dialogues are taken as a uniformly random sample" in \
        capsys.readouterr().out
    assert set(pd.read_csv(tmp_path / "estimates.csv")["n_labelled"]) == {10}


def test_judge_scores_through_a_fitted_map(tmp_path, capsys):
    assert main(["calibrate", "--judgments", str(JUDGMENTS), "--human", str(LABELS), "--bootstrap", "0",
                 "--fit-map", str(tmp_path / "map.json")]) == 0
    assert run_cli("--judgments", JUDGMENTS, "--human", LABELS, "--output-dir", tmp_path / "raw") == 0
    assert run_cli("--judgments", JUDGMENTS, "--human", LABELS, "--apply-map", tmp_path / "map.json",
                   "--output-dir", tmp_path / "mapped") == 0
    raw, mapped = (pd.read_csv(tmp_path / name / "estimates.csv") for name in ("raw", "mapped"))
    np.testing.assert_allclose(raw.human_only, mapped.human_only)  # the same labels
    assert not np.allclose(raw["lambda"], mapped["lambda"])  # another judge score


def test_plan_from_a_changed_judgments_file_is_refused(tmp_path, capsys):
    changed = tmp_path / "judgments.jsonl"
    changed.write_text(JUDGMENTS.read_text() + "\n")  # other bytes: the plan's random sample was not drawn from it
    shutil.copy(JUDGMENTS.parent / "toy.yaml", tmp_path)  # the rubric the judgments name, as a study folder has it
    assert run_cli("--judgments", changed, "--human", LABELS, "--plan", PLAN) == 2
    assert "not the judgments the plan was made from (examples/study/judgments.jsonl" in capsys.readouterr().err


def _labels_on(tmp_path, keep):
    labels = pd.read_csv(LABELS, dtype=str)
    path = tmp_path / "subset.csv"
    labels[labels.item_id.isin(keep)].to_csv(path, index=False)
    return path


def _bad_plan(tmp_path):
    plan = tmp_path / "other_plan"
    shutil.copytree(PLAN, plan)
    (plan / "plan.csv").write_text("item_id,part,reason\nd12,random,x\nzz99,random,x\n")
    info = json.loads((plan / "plan.json").read_text())
    info["plan_sha256"] = hashlib.sha256((plan / "plan.csv").read_bytes()).hexdigest()  # whole, but not ours
    (plan / "plan.json").write_text(json.dumps(info))
    return plan


def _foreign_labels(tmp_path):
    path = tmp_path / "foreign.csv"
    path.write_text(LABELS.read_text() + "x-unknown,alpha,ann_a,clarity,3\n")
    return path


def _targeted_only(tmp_path):
    return _labels_on(tmp_path, ["d09", "d14", "d05", "d01"])


def _outside_plan(tmp_path):
    labels = pd.read_csv(LABELS, dtype=str)
    extra = labels[labels.item_id == "d12"].assign(item_id="d07")
    path = tmp_path / "outside.csv"
    pd.concat([labels, extra]).to_csv(path, index=False)
    return path


BAD_INPUT = [
    # (what the user gives, extra flags, the message's telling part)
    ("labels on an item the judgments lack", lambda t: ["--human", _foreign_labels(t)],
     "foreign.csv:122: item 'x-unknown' is not in the judgments"),
    ("a plan made for other judgments", lambda t: ["--human", LABELS, "--plan", _bad_plan(t)],
     "plan.csv:3: dialogue 'zz99' is not in"),
    ("labels only on targeted dialogues", lambda t: ["--human", _targeted_only(t), "--plan", PLAN],
     "no human label is on a dialogue of the plan's random sample"),
    ("labels outside the plan", lambda t: ["--human", _outside_plan(t), "--plan", PLAN],
     "dialogue 'd07' is not in the plan"),
    ("an unknown criterion", lambda t: ["--human", LABELS, "--criteria", "clarity,elegance"],
     "--criteria: no human scores for elegance"),
    ("a plan directory without a plan", lambda t: ["--human", LABELS, "--plan", t],
     "plan.csv: no such file"),
    ("a missing labels file", lambda t: ["--human", t / "absent.csv"], "absent.csv"),
]


@pytest.mark.parametrize("case, flags, message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, case, flags, message):
    out = tmp_path / "out"
    out.mkdir()
    (out / "estimates.csv").write_text("kept from before\n")
    code = run_cli("--judgments", JUDGMENTS, *flags(tmp_path), "--output-dir", out, "--report", out / "r.html")
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith("judge estimate: error: ") and message in error
    assert error.count("\n") == 1 and "Traceback" not in error
    assert sorted(p.name for p in out.iterdir()) == ["estimates.csv"]
    assert (out / "estimates.csv").read_text() == "kept from before\n"
