"""The study verbs' rules that a mutation run (benchmarks/mutation.py) found no test for, each on a small invented
input: screen's printed order of the dialogues that most need humans, its power table and sentence per criterion,
the cap on a judgment's uncertainty, where the numbers came from; estimate's --criteria; the reports' plots (each
interval drawn from its bounds, the scale shown) and sources; and the CLI's defaults, which must be the Python
functions' own."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest
from test_trust_mutants import _figures  # the report's figures, captured

from calibration.errors import CalibrationError
from calibration.study.estimate import estimate
from calibration.study.screen import screen

SYSTEMS = ("alpha", "beta", "gamma")


def judge_frame(means: dict, n_items=24, noise=0.6, seed=0):
    """Scores per (dialogue, system, criterion): `means[criterion][system]` plus a dialogue effect and noise."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 0.5, n_items)
    return pd.DataFrame([{"item_id": f"d{i:02d}", "system": system, "criterion": criterion,
                          "score": mean + difficulty[i] + rng.normal(0, noise), "label": None, "status": "ok"}
                         for i in range(n_items) for criterion, by_system in means.items()
                         for system, mean in by_system.items()])


def human_labels(judge: pd.DataFrame, items, seed=1) -> pd.DataFrame:
    """Two annotators' 1-5 labels near the judge's scores on `items`."""
    rng = np.random.default_rng(seed)
    part = judge[judge["item_id"].isin(items)]
    return pd.DataFrame([{"item_id": r.item_id, "system": r.system, "annotator": name, "criterion": r.criterion,
                          "score": float(np.clip(np.round(r.score + rng.normal(0, 0.7)), 1, 5))}
                         for r in part.itertuples() for name in ("ann1", "ann2")])


# -- screen --------------------------------------------------------------------------------------------------------


def test_screen_prints_the_dialogues_that_most_need_humans_first():
    result = screen(judge_frame({"c": {"alpha": 3.5, "beta": 3.3, "gamma": 2.0}}, noise=0.9), bootstrap=100)
    text = result.text()
    block = text.split("Dialogues that most need humans")[1].split("\n\nPower")[0].strip().splitlines()[2:]
    priorities = [float(line.split()[1]) + float(line.split()[2]) for line in block]  # uncertainty + discrimination
    assert len(priorities) == 10
    assert priorities == sorted(priorities, reverse=True)
    assert priorities[0] == pytest.approx(result.items["priority"].max(), abs=1e-3)


def test_the_power_table_follows_each_criteria_own_top_two():
    means = {"up": {"alpha": 4.0, "beta": 3.4, "gamma": 2.0}, "down": {"alpha": 2.0, "beta": 3.4, "gamma": 4.0}}
    result = screen(judge_frame(means), bootstrap=100)
    power = result.power.set_index("criterion")
    for criterion in means:
        ranked = result.systems[result.systems["criterion"] == criterion].sort_values("rank")["system"].tolist()
        assert [power.loc[criterion, "system_a"], power.loc[criterion, "system_b"]] == ranked[:2]
    assert power.loc["up", "system_a"] == "alpha" and power.loc["down", "system_a"] == "gamma"


def test_the_power_sentence_says_when_no_study_can_separate_the_top_two():
    judge = judge_frame({"same": {"alpha": 3.0, "beta": 3.0, "gamma": 2.0}, "apart": {"alpha": 4.0, "beta": 3.0,
                                                                                     "gamma": 2.0}})
    same = judge["criterion"] == "same"
    twin = judge[same & (judge["system"] == "alpha")].set_index("item_id")["score"]
    judge.loc[same & (judge["system"] == "beta"), "score"] = judge.loc[same & (judge["system"] == "beta"),
                                                                       "item_id"].map(twin).to_numpy()
    result = screen(judge, bootstrap=100)
    power = result.power.set_index("criterion")
    assert pd.isna(power.loc["same", "dialogues_human_only"]) and power.loc["apart", "dialogues_human_only"] > 0
    assert "same: more dialogues than any study can label (the judge sees no difference)" in result.sentence
    assert f"apart: {power.loc['apart', 'dialogues_human_only']} dialogues for" in result.sentence


def test_a_judgments_uncertainty_is_capped_at_one(tmp_path):
    """A judgment whose samples spread wider than half the criterion's observed range counts as fully uncertain (1),
    never more: uncertainty is 0..1."""
    lines = [{"id": f"d{i}", "system": s, "criterion": "c", "score": 3.0 + 0.5 * (s == "b"), "rubric": "toy@1",
              "model": "m"} for i in range(6) for s in ("a", "b")]
    lines[0].update(samples=[1.0, 5.0, 3.0], spread=2.0)  # half the observed range is 0.25: 8 times over
    path = tmp_path / "j.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    items = screen(path, bootstrap=100).items.set_index("item_id")
    assert items.loc["d0", "uncertainty"] == pytest.approx(0.5)  # (1 + 0) / 2 judgments
    assert items["uncertainty"].max() <= 1.0


def test_screen_says_where_a_dataframe_came_from():
    judge = judge_frame({"c": {"alpha": 3.0, "beta": 2.0}})
    assert screen(judge, bootstrap=100).provenance["judgments"] == {"path": "(a DataFrame)", "sha256": None}
    judge.attrs["path"] = "scores.csv"
    assert screen(judge, bootstrap=100).provenance["judgments"]["path"] == "scores.csv"


# -- estimate ------------------------------------------------------------------------------------------------------


def test_estimate_takes_the_criteria_asked_for():
    judge = judge_frame({"clarity": {"alpha": 3.5, "beta": 3.0}, "accuracy": {"alpha": 3.0, "beta": 3.2}})
    labels = human_labels(judge, [f"d{i:02d}" for i in range(12)])
    both = estimate(judge, labels, scale=(1, 5))
    one = estimate(judge, labels, scale=(1, 5), criteria=["accuracy"])
    assert one.criteria == ["accuracy"] and set(one.estimates["criterion"]) == {"accuracy"}
    pd.testing.assert_frame_equal(one.estimates.reset_index(drop=True),
                                  both.estimates[both.estimates["criterion"] == "accuracy"].reset_index(drop=True))
    # A criterion the judge has, but with no score (every judgment failed), cannot be asked for: said, not skipped.
    broken = pd.concat([judge, judge[judge["criterion"] == "accuracy"].assign(criterion="broken", score=np.nan,
                                                                              status="error")])
    labels = pd.concat([labels, labels[labels["criterion"] == "accuracy"].assign(criterion="broken")])
    assert estimate(broken, labels, scale=(1, 5)).criteria == ["accuracy", "clarity"]
    with pytest.raises(CalibrationError, match="--criteria: no judge scores for broken; the judgments have "
                                               "accuracy, clarity"):
        estimate(broken, labels, scale=(1, 5), criteria=["broken"])


# -- the reports -----------------------------------------------------------------------------------------------------


def test_the_estimate_report_draws_each_interval_from_its_bounds_on_the_scale(monkeypatch):
    import matplotlib.pyplot as plt

    from calibration.study import report

    judge = judge_frame({"c": {"alpha": 3.5, "beta": 3.0, "gamma": 2.5}})
    result = estimate(judge, human_labels(judge, [f"d{i:02d}" for i in range(14)]), scale=(1, 5))
    figures = _figures(monkeypatch, report)
    result.report_html()
    try:
        differences, estimates = figures  # differences first, then each system's mean
        axis = estimates.axes[0]
        assert axis.get_xlim() == pytest.approx((0.8, 5.2))  # the 1-5 scale and 5% of it either side
        assert differences.axes[0].get_xlim() == pytest.approx((-4.4, 4.4))  # differences lie within +-4
        (judged,) = [c for c in axis.containers if c.get_label() == "with the judge (PPI++)"]
        drawn = sorted((round(float(a), 9), round(float(b), 9)) for a, b in
                       (segment[:, 0] for segment in judged.lines[2][0].get_segments()))
        table = result.estimates
        assert drawn == sorted((round(float(a), 9), round(float(b), 9)) for a, b in
                               zip(table["ci_low"].clip(1, 5), table["ci_high"].clip(1, 5)))
    finally:
        for figure in figures:
            plt.close(figure)


def test_the_screen_report_names_its_resamples(monkeypatch):
    from calibration.study import report

    figures = _figures(monkeypatch, report)
    page = screen(judge_frame({"c": {"alpha": 3.0, "beta": 2.0}}), bootstrap=120).report_html()
    assert "<dt>Bootstrap</dt><dd>120 resamples</dd>" in page
    import matplotlib.pyplot as plt

    for figure in figures:
        plt.close(figure)


# -- the CLI's defaults are the functions' -------------------------------------------------------------------------


@pytest.mark.parametrize("verb, function, argv", [
    ("screen", screen, ["--judgments", "j"]),
    ("estimate", estimate, ["--judgments", "j", "--human", "h"]),
])
def test_the_cli_defaults_are_the_functions_defaults(verb, function, argv):
    from judge.cli import build_parser

    args = vars(build_parser().parse_args([verb, *argv]))
    defaults = {name: p.default for name, p in inspect.signature(function).parameters.items()
                if p.default is not inspect.Parameter.empty}
    compared = 0
    for dest, value in args.items():
        if dest in defaults and value is not None and not callable(value):
            assert value == defaults[dest], (verb, dest)
            compared += 1
    assert compared >= 2


# -- gaps the second mutation draw (seed 2) found -----------------------------------------------------------------
def test_dialogues_needed_may_be_exactly_the_smallest_count_printed():
    """With only MIN_LABELLED (3) dialogues judged and an effect that 3 labels already detect, 3 is the answer (a
    limit equal to the smallest printed count is allowed)."""
    from calibration.study.power import dialogues_needed
    from calibration.study.ppi import MIN_LABELLED

    assert dialogues_needed(10.0, rho=0.5, n_judged=MIN_LABELLED) == MIN_LABELLED
    assert dialogues_needed(10.0, rho=0.5, n_judged=MIN_LABELLED - 1) is None


def test_discrimination_is_the_contenders_spread_over_half_the_observed_range():
    """Two contenders scored 1 and 5 on a dialogue (observed range 1..5, half of it 2): population SD 2 / 2 = 1;
    scored 2 and 4: SD 1 / 2 = 0.5."""
    from calibration.study.uncertainty import discrimination

    rows = [("d1", "a", 1.0), ("d1", "b", 5.0), ("d2", "a", 2.0), ("d2", "b", 4.0)]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "score": v, "status": "ok", "label": None}
                          for i, s, v in rows])
    systems = pd.DataFrame([{"criterion": "c", "system": "a", "rank": 1, "tied_with_best": True},
                            {"criterion": "c", "system": "b", "rank": 2, "tied_with_best": True}])
    values = discrimination(judge, systems, ["c"])
    assert values["d1"] == pytest.approx(1.0) and values["d2"] == pytest.approx(0.5)


# -- gaps the second mutation draw (seed 2) left, round two ---------------------------------------------------------
def _tuned_power(effect, n, share, df_spent):
    """Two-sided paired t power from scipy's noncentral t, on n - df_spent degrees of freedom."""
    from scipy import stats

    df = n - df_spent
    critical, noncentrality = stats.t.ppf(0.975, df), effect * np.sqrt(n / share)
    return stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality)


def _needed_by_search(effect, rho, n_judged, df_spent=2):
    """The smallest n with 80% power, by a linear search: human-only below MIN_TUNED labels; from there the judge's
    residual share plus lambda's own error, and lambda costs a degree of freedom (n - 2, as estimate.py's t)."""
    from calibration.study.ppi import MIN_LABELLED, MIN_TUNED

    for n in range(MIN_LABELLED, n_judged + 1):
        if n < MIN_TUNED:
            reached = _tuned_power(effect, n, 1.0, 1) >= 0.8
        else:
            share = 1 - rho * rho * (n_judged - n) / n_judged + (1 - rho * rho) / (n - 1)
            reached = _tuned_power(effect, n, share, df_spent) >= 0.8
        if reached:
            return n
    return None


def test_dialogues_needed_with_the_judge_prices_lambda_as_a_spent_degree_of_freedom():
    """estimate.py's tuned interval is a t on n - 2 degrees of freedom: the count screen prints is the smallest n
    whose power on that t reaches 80%, not one on n - 3 (nor n - 1)."""
    from calibration.study.power import dialogues_needed

    cases = [(0.6, 0.7), (0.5, 0.5), (0.65, 0.8), (0.55, 0.6), (0.45, 0.9)]
    differs = 0
    for effect, rho in cases:
        expected = _needed_by_search(effect, rho, 200)
        assert dialogues_needed(effect, rho=rho, n_judged=200) == expected, (effect, rho)
        differs += _needed_by_search(effect, rho, 200, df_spent=3) != expected
    assert differs >= 1  # the cases tell n - 2 from n - 3


def test_a_criterion_scored_the_same_everywhere_reads_spread_against_one_point():
    """Every judgment of a criterion has the same mean score (no observed range): a judgment's sample spread is read
    in score points (divided by 1), not as infinitely uncertain."""
    from calibration.study.uncertainty import judgment_uncertainty

    judge = pd.DataFrame([{"item_id": f"d{i}", "system": s, "criterion": "flat", "score": 3.0, "status": "ok",
                           "spread": 0.0} for i in range(4) for s in ("a", "b")])
    judge.loc[0, "spread"] = 0.4  # samples 2.6 and 3.4: mean 3
    frame = judgment_uncertainty(judge)
    assert frame["spread"].tolist() == pytest.approx([0.4] + [0.0] * 7)
    assert frame["uncertainty"].iloc[0] == pytest.approx(0.4)


def test_the_plan_file_counts_its_random_and_targeted_dialogues():
    """plan.json's n_random and n_targeted are the counts of plan.csv's parts (a quarter of 12 drawn at random)."""
    result = screen(judge_frame({"c": {"alpha": 3.5, "beta": 3.0}}), budget=12, random_share=0.25, bootstrap=100)
    parts = result.plan["part"].value_counts()
    assert (parts["random"], parts["targeted"]) == (3, 9)
    assert (result.plan_info["n_random"], result.plan_info["n_targeted"]) == (3, 9)


def test_a_plan_with_bad_parts_names_the_line_of_the_first(tmp_path):
    from judge.annotation.plan import read_plan

    (tmp_path / "plan.json").write_text(json.dumps({"version": 1}), encoding="utf-8")
    parts = ["random", "targeted", "Random", "random", "manual"]
    (tmp_path / "plan.csv").write_text("item_id,part,reason\n" + "".join(
        f"d{k},{p},x\n" for k, p in enumerate(parts)), encoding="utf-8")
    with pytest.raises(CalibrationError, match=r"plan\.csv:4: part must be random or targeted, got 'Random'"):
        read_plan(tmp_path, CalibrationError)


# -- gaps the third mutation draw (seed 3) found ------------------------------------------------------------------
def test_lambda_is_tuned_once_the_labelled_judge_scores_spread_a_quarter_as_much_as_all():
    """lambda is tuned (the power-tuned PPI++ value, cov / (var_L f + n/m var f)) when the labelled dialogues' judge
    scores vary at least 1/4 as much as all judged ones, and is 0 (humans only) below: at 26% and 24% of it."""
    from scipy.optimize import brentq

    from calibration.study.ppi import ppi_mean

    rng = np.random.default_rng(0)
    n, m = 12, 28
    base, wide = rng.normal(0, 1, n), rng.normal(3, 1.5, m)
    y = 3 + base + rng.normal(0, 0.5, n)

    def judge(a):
        return np.concatenate([3 + a * base, wide])

    def ratio(a):
        f = judge(a)
        return np.var(f[:n], ddof=1) / np.var(f, ddof=1)

    for share, tuned in ((0.26, True), (0.24, False)):
        f = judge(brentq(lambda a: ratio(a) - share, 0.01, 10))
        result = ppi_mean(np.concatenate([y, np.full(m, np.nan)]), f)
        fl = f[:n]
        expected = np.cov(y, fl)[0, 1] / (np.var(fl, ddof=1) + n / m * np.var(f, ddof=1))
        assert abs(expected) > 0.05  # a lambda that would matter
        assert float(result.lam) == pytest.approx(expected if tuned else 0.0)
        assert float(result.estimate) == pytest.approx(y.mean() + float(result.lam) * (f[n:].mean() - fl.mean()))


def test_a_zero_probability_leaves_the_entropy_of_the_others():
    """Probabilities {1: .5, 2: .5, 3: 0}: entropy ln 2 / ln 3 (scipy's, normalised by the 3 labels offered); a zero
    is no event, not an undefined term."""
    from scipy.stats import entropy

    from calibration.study.uncertainty import judgment_uncertainty

    judge = pd.DataFrame([{"item_id": "d1", "system": "a", "criterion": "c", "score": 1.5, "status": "ok",
                           "probs": {"1": 0.5, "2": 0.5, "3": 0.0}},
                          {"item_id": "d1", "system": "b", "criterion": "c", "score": 3.0, "status": "ok",
                           "probs": {"1": 0.0, "2": 0.0, "3": 1.0}}])
    frame = judgment_uncertainty(judge)
    assert frame["entropy"].tolist() == pytest.approx([entropy([0.5, 0.5]) / np.log(3), 0.0])
    assert frame["uncertainty"].iloc[0] == pytest.approx(np.log(2) / np.log(3))


def test_the_pilot_effect_of_each_criterion_comes_from_its_own_labels():
    """A pilot labelling every dialogue: each criterion's human difference is the mean paired difference of its own
    labels (the PPI++ estimate with nothing unlabelled), its rho their correlation with the judge's differences."""
    means = {"up": {"alpha": 4.0, "beta": 3.4, "gamma": 2.0}, "down": {"alpha": 2.0, "beta": 3.4, "gamma": 4.0}}
    judge = judge_frame(means)
    labels = human_labels(judge, judge["item_id"].unique())
    power = screen(judge, labels, scale=(1, 5), bootstrap=100).power.set_index("criterion")
    human = labels.groupby(["criterion", "item_id", "system"])["score"].mean()
    scores = judge.set_index(["criterion", "item_id", "system"])["score"]
    for criterion in means:
        a, b = power.loc[criterion, "system_a"], power.loc[criterion, "system_b"]
        d = human[criterion].unstack()[a] - human[criterion].unstack()[b]
        g = scores[criterion].unstack()[a] - scores[criterion].unstack()[b]
        assert power.loc[criterion, "n_pilot"] == 24
        assert power.loc[criterion, "human_difference"] == pytest.approx(d.mean())
        assert power.loc[criterion, "rho"] == pytest.approx(np.corrcoef(d, g.loc[d.index])[0, 1])
