"""`judge screen`'s per-judgment uncertainty and per-dialogue discrimination (calibration.study.screen) against
independent computations (scipy's entropy, numpy's SD over half the observed range) on a table of judgments that
reaches each branch, and their invariance to the judge's units. Written after fresh draws of
benchmarks/mutation.py left survivors on these edges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.uncertainty import FAILED, NOT_APPLICABLE, discrimination, judgment_uncertainty


def _judgments():
    rows = [
        # item, system, criterion, score, status, spread, probs, order disagreement
        ("d1", "a", "c", 1.0, "ok", 0.5, {"1": 0.5, "2": 0.5, "3": 0.0}, False),
        ("d1", "b", "c", 5.0, "ok", 4.0, {"5": 1.0}, 1),
        ("d2", "a", "c", 3.0, "ok", np.nan, {"2": 0.2, "3": 0.7, "4": 0.1}, True),
        ("d2", "b", "c", np.nan, "error", np.nan, None, False),
        ("d3", "a", "c", np.nan, "na", np.nan, None, False),
        ("d3", "b", "c", 2.0, "ok", 1.0, None, 0),
        ("d1", "a", "k", 7.0, "ok", 0.4, None, False),  # a second criterion: its own range (7 - 7: none, so 1)
    ]
    return pd.DataFrame(rows, columns=["item_id", "system", "criterion", "score", "status", "spread", "probs",
                                       "order_disagreement"])


def test_each_judgments_uncertainty_against_its_parts_written_out():
    frame = judgment_uncertainty(_judgments())
    half_range = {"c": (5.0 - 1.0) / 2, "k": 1.0}
    judge = _judgments()
    for k, row in judge.iterrows():
        got = frame.iloc[k]
        spread = min(row["spread"] / half_range[row["criterion"]], 1.0) if np.isfinite(row["spread"]) else np.nan
        assert (np.isnan(got["spread"]) and np.isnan(spread)) or got["spread"] == pytest.approx(spread)
        probs = row["probs"]
        if isinstance(probs, dict) and len(probs) >= 2:
            p = np.array(list(probs.values()))
            assert got["entropy"] == pytest.approx(stats.entropy(p) / np.log(len(p)))
        else:
            assert np.isnan(got["entropy"])
        assert got["order_disagreement"] == (row["order_disagreement"] in (True, 1))
        doubt = FAILED if row["status"] == "error" else NOT_APPLICABLE if row["status"] == "na" else 0.0
        parts = [doubt, np.nan_to_num(spread), np.nan_to_num(got["entropy"]), float(got["order_disagreement"])]
        assert got["uncertainty"] == pytest.approx(max(parts))


def test_uncertainty_does_not_depend_on_the_judges_units():
    """Where the scores vary (criterion c); a criterion whose scores never vary has no range to measure a spread
    against and takes it in points (half range 1), so there it does depend on the units."""
    judge = _judgments()
    judge = judge[judge["criterion"] == "c"]
    base = judgment_uncertainty(judge)
    moved = judgment_uncertainty(judge.assign(score=3.0 * judge["score"] - 2.0, spread=3.0 * judge["spread"]))
    pd.testing.assert_frame_equal(base, moved)
    assert base["spread"].max() > 0 and base["entropy"].max() > 0


def _scores(seed=0, dialogues=8):
    rng = np.random.default_rng(seed)
    rows = [{"item_id": f"d{i}", "system": s, "criterion": "c", "score": float(rng.integers(1, 6)), "status": "ok"}
            for i in range(dialogues) for s in ("a", "b", "c", "d")]
    systems = pd.DataFrame({"criterion": "c", "system": ["a", "b", "c", "d"], "rank": [1, 2, 3, 4],
                            "tied_with_best": [True, False, False, True]})
    return pd.DataFrame(rows), systems


def test_discrimination_is_the_contenders_sd_over_half_their_range_and_ignores_the_judges_units():
    judge, systems = _scores()
    got = discrimination(judge, systems, ["c"])
    table = judge.pivot(index="item_id", columns="system", values="score")[["a", "b", "d"]]  # top two, and tied
    half = (table.to_numpy().max() - table.to_numpy().min()) / 2
    expected = np.minimum(table.std(axis=1, ddof=0) / half, 1.0)
    assert got.to_dict() == pytest.approx(expected.to_dict())
    assert got.max() > 0
    moved = discrimination(judge.assign(score=-2.0 + 4.0 * judge["score"]), systems, ["c"])
    assert moved.to_dict() == pytest.approx(got.to_dict())
    # A criterion with no ranked systems adds nothing; none at all gives an empty series.
    assert discrimination(judge, systems, ["c", "other"]).to_dict() == pytest.approx(got.to_dict())
    assert discrimination(judge, systems, ["other"]).empty


def test_the_power_sentence_says_each_case_in_its_own_words():
    """One row per branch of the sentence: a count, no count (the judge sees no difference), and with a pilot: the
    count with the judge, more than the judged dialogues, and a correlation that cannot be measured. Written after
    the seed-11 draw let a `not` of these branches go."""
    from calibration.study.power_table import power_sentence

    nan = np.nan
    table = pd.DataFrame({"criterion": ["a", "b", "c", "d"], "system_a": "x", "system_b": "y",
                          "dialogues_human_only": pd.array([40, None, 60, 80], dtype="Int64"),
                          "rho": [0.7, 0.5, nan, 0.2], "n_judged": 200, "n_pilot": 20,
                          "dialogues_with_judge": pd.array([12, None, None, None], dtype="Int64")})  # as power_table
    said = power_sentence(table, 0.8, 0.05)
    assert "a: 40 dialogues (12 with the judge's scores on all 200, rho 0.70) for x vs y" in said
    assert ("b: more dialogues than any study can label (the judge sees no difference) (more than the 200 judged "
            "with the judge's help) for x vs y") in said
    assert "c: 60 dialogues (the judge-human correlation cannot be measured on this pilot) for x vs y" in said
    assert "d: 80 dialogues (more than the 200 judged with the judge's help) for x vs y" in said
    assert "estimated from 20 pilot dialogues" in said
    plain = power_sentence(table.drop(columns=["n_pilot"]), 0.8, 0.05)
    assert "a: 40 dialogues for x vs y" in plain and "with the judge" not in plain


def test_the_targeted_part_takes_equal_priorities_in_the_order_of_their_ids():
    """Ties in priority are broken by dialogue id, smallest first, so a plan is the same whoever lists the items.
    Written after the seed-11 draw let the tie-break's order flip."""
    from calibration.study.designs import make_plan

    items = pd.DataFrame({"item_id": ["d3", "d1", "d4", "d0", "d2"], "priority": [0.5, 0.5, 0.9, 0.5, 0.5],
                          "uncertainty": 0.5, "discrimination": 0.0, "n_judgments": 1})
    plan = make_plan(items, 3, "dialogues", 0.0, 0)
    assert plan["item_id"].tolist() == ["d4", "d0", "d1"] and set(plan["part"]) == {"targeted"}
    shuffled = make_plan(items.sample(frac=1.0, random_state=1), 3, "dialogues", 0.0, 0)
    assert shuffled["item_id"].tolist() == plan["item_id"].tolist()


# -- the active design's signal check on a pilot ---------------------------------------------------------------------

def _pilot(size: int, marked: tuple[int, ...] = (2, 7)):
    """`size` pilot dialogues of one system and criterion: the judge's scores 1..size, the human's the same plus a
    large error on the `marked` dialogues, which are the ones the judge is uncertain about."""
    ids = [f"d{i}" for i in range(size)]
    score = np.arange(1.0, size + 1.0)
    human = score + np.where(np.isin(np.arange(size), marked), [4.0 if i % 2 else -4.0 for i in range(size)], 0.0)
    uncertainty = np.where(np.isin(np.arange(size), marked), 1.0, 0.0)
    items = pd.DataFrame({"item_id": ids, "uncertainty": uncertainty})
    judge = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "score": score, "status": "ok"})
    pilot = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "human": human})
    return items, judge, pilot, score, human, uncertainty


def _exact_permutation_p(score, human, uncertainty):
    """The one-sided p of T = sum r^2 (1 - 1/p~) over every placement of the uncertain dialogues (scipy's least
    squares for the residuals), p~ = floor + (1 - floor) u / mean(u)."""
    from itertools import combinations

    from calibration.study.designs import ACTIVE_FLOOR

    fit = stats.linregress(score, human)
    r2 = (human - fit.intercept - fit.slope * score) ** 2
    relative = ACTIVE_FLOOR + (1.0 - ACTIVE_FLOOR) * uncertainty / uncertainty.mean()
    gain = 1.0 - 1.0 / relative
    observed = r2 @ gain
    high, low = gain.max(), gain.min()
    k = int((uncertainty > 0).sum())
    stats_all = []
    for chosen in combinations(range(len(score)), k):
        g = np.full(len(score), low)
        g[list(chosen)] = high
        stats_all.append(r2 @ g)
    return float(np.mean(np.array(stats_all) >= observed - 1e-9 * abs(observed)))


@pytest.mark.parametrize("size", [9, 10, 12])
def test_the_signal_is_checked_from_ten_pilot_dialogues_on_and_its_p_is_the_permutation_p(size):
    """From PILOT_CHECK (10) pilot dialogues the uncertainty is checked: here it marks the two dialogues the judge
    gets wrong, so the draw goes active, and the printed p is the exact permutation p (every placement of the two
    uncertain dialogues) within the Monte-Carlo error of 1,999 shuffles; at 9 the draw is uniform, unchecked."""
    import re

    from calibration.study.designs import ACTIVE_FLOOR, PERMUTATIONS, PILOT_CHECK, pilot_errors, signal_check

    items, judge, pilot, score, human, uncertainty = _pilot(size)
    share, why = signal_check(items, pilot_errors(judge, pilot))
    assert PILOT_CHECK == 10  # the documented count, so a changed constant fails here too
    if size < 10:
        assert share == 0.0 and f"{size} pilot dialogues (fewer than 10)" in why
        return
    exact = _exact_permutation_p(score, human, uncertainty)
    assert exact < 0.05  # the planted signal is real
    assert share == pytest.approx(1.0 - ACTIVE_FLOOR) and f"checked on {size} pilot dialogues" in why
    printed = float(re.search(r"permutation p ([0-9.]+)", why).group(1))
    sd = np.sqrt(exact * (1.0 - exact) / PERMUTATIONS)
    assert abs(printed - exact) <= 4.0 * sd + 1.0 / (PERMUTATIONS + 1) + 0.0005  # + the printed rounding


# -- a plan directory read back (read_plan): bad input, one row each ---------------------------------------------------

PLAN_CSV = "item_id,part,inclusion_probability\nd1,random,0.5\nd2,targeted,\n"
PLAN_ROWS = [
    ('{"version": 2}', PLAN_CSV, "plan.json: not a plan file (expected \"version\": 1)"),
    ('[1]', PLAN_CSV, "plan.json: not a plan file (expected \"version\": 1)"),
    ('{"versions": 1}', PLAN_CSV, "plan.json: not a plan file (expected \"version\": 1)"),
    ('{"version": 1}', PLAN_CSV + "d3,random,0.5\nd1,targeted,\n", "plan.csv:5: dialogue 'd1' is listed twice"),
    ('{"version": 1}', "item_id,part\nd1,random\nd1,random\n", "plan.csv:3: dialogue 'd1' is listed twice"),
]


@pytest.mark.parametrize("info, csv, message", PLAN_ROWS)
def test_a_plan_that_is_not_one_is_refused_naming_file_and_line(info, csv, message, tmp_path):
    """A plan.json of another version or shape, a plan.csv listing a dialogue twice: refused, naming the file and
    the line of the second listing; the files are left as they were."""
    from calibration.errors import CalibrationError
    from judge.annotation.plan import read_plan

    (tmp_path / "plan.json").write_text(info, encoding="utf-8")
    (tmp_path / "plan.csv").write_text(csv, encoding="utf-8")
    with pytest.raises(CalibrationError) as caught:
        read_plan(tmp_path, CalibrationError)
    assert str(caught.value) == f"{tmp_path}/{message}"
    assert (tmp_path / "plan.json").read_text(encoding="utf-8") == info
    assert (tmp_path / "plan.csv").read_text(encoding="utf-8") == csv


def test_a_missing_uncertainty_counts_as_none_in_the_signal_check():
    """A pilot dialogue whose uncertainty was not recorded (NaN) is checked as one the judge is sure of (0): the
    same verdict and message as with 0 written there, and not the same as with the dialogue marked uncertain."""
    from calibration.study.designs import pilot_errors, signal_check

    items, judge, pilot, *_ = _pilot(12)
    zero, missing, marked = items.copy(), items.copy(), items.copy()
    zero.loc[0, "uncertainty"], missing.loc[0, "uncertainty"], marked.loc[0, "uncertainty"] = 0.0, np.nan, 1.0
    assert signal_check(missing, pilot_errors(judge, pilot)) == signal_check(zero, pilot_errors(judge, pilot))
    assert signal_check(marked, pilot_errors(judge, pilot)) != signal_check(zero, pilot_errors(judge, pilot))


@pytest.mark.parametrize("pilot_size", [2, 3])
def test_the_power_tables_pilot_correlation_needs_three_labelled_differences(pilot_size):
    """The top two systems' judge differences on 20 dialogues, the pilot's human differences on the first
    `pilot_size`: from 3 labelled differences the table has their correlation with the judge's (numpy) and the
    human effect; with 2, neither."""
    from calibration.study.power_table import power_table

    rng = np.random.default_rng(9)
    ids = [f"d{i}" for i in range(20)]
    a, b = rng.normal(4.0, 0.6, 20), rng.normal(3.0, 0.6, 20)
    judge = pd.DataFrame({"item_id": ids * 2, "system": ["a"] * 20 + ["b"] * 20, "criterion": "c",
                          "score": np.r_[a, b], "status": "ok"})
    systems = pd.DataFrame({"criterion": "c", "system": ["a", "b"], "rank": [1, 2]})
    human_a, human_b = a + rng.normal(0, 0.5, 20), b + rng.normal(0, 0.5, 20)
    chosen = ids[:pilot_size]
    pilot = pd.DataFrame({"item_id": chosen * 2, "system": ["a"] * pilot_size + ["b"] * pilot_size,
                          "criterion": "c", "human": np.r_[human_a[:pilot_size], human_b[:pilot_size]]})
    row = power_table(judge, systems, ["c"], pilot=pilot).iloc[0]
    assert row["n_pilot"] == pilot_size
    if pilot_size < 3:
        assert np.isnan(row["rho"]) and ("human_effect" not in row or np.isnan(row["human_effect"]))
        return
    d, g = (human_a - human_b)[:pilot_size], (a - b)[:pilot_size]
    assert row["rho"] == pytest.approx(np.corrcoef(d, g)[0, 1])
    assert np.isfinite(row["human_effect"])


@pytest.mark.parametrize("uncertainty_share, active", [(None, True), (0.4, True), (0.0, False)])
def test_each_drawn_dialogue_says_whether_the_draw_was_active_or_fell_back(uncertainty_share, active):
    """The random part's reason: an active draw on the judge's uncertainty whenever any share of the draw follows it,
    a uniform draw that fell back when none does; with the seed either way. The inclusion probabilities say the same:
    uniform (budget / dialogues) exactly when the draw fell back."""
    from calibration.study.designs import _active_plan

    items = pd.DataFrame({"item_id": [f"d{i:02d}" for i in range(30)],
                          "uncertainty": np.linspace(0.0, 1.0, 30), "discrimination": 0.0, "priority": 0.0})
    plan = _active_plan(items, 10, "dialogues", 1.0, 7, uncertainty_share)
    drawn = plan[plan["part"] == "random"]
    assert len(drawn) == 10
    expected = ("active draw on the judge's uncertainty (seed 7)" if active
                else "uniform draw: the active design fell back (plan.json says why; seed 7)")
    assert set(drawn["reason"]) == {expected}
    assert np.allclose(drawn["inclusion_probability"], 10 / 30) != active


def test_each_dialogues_counts_of_failed_na_abstained_and_order_disagreements_are_a_crosstabs():
    """items_table's per-dialogue counts against pandas' crosstab of the statuses (the seed-18 draw left its
    'na' and 'abstain' counts untested: either could count the other statuses)."""
    from calibration.study.uncertainty import items_table

    statuses = ["ok", "error", "na", "abstain", "ok", "na", "abstain", "abstain", "error", "ok"]
    judge = pd.DataFrame({
        "item_id": ["d1", "d1", "d1", "d1", "d2", "d2", "d2", "d3", "d3", "d3"],
        "system": list("abcdabcabc"), "criterion": "c",
        "score": [3.0 if s == "ok" else np.nan for s in statuses], "status": statuses,
        "spread": np.nan, "probs": None,
        "order_disagreement": [True, False, False, False, 1, 0, False, False, False, True]})
    systems = pd.DataFrame(columns=["criterion", "system", "estimate"])
    table = items_table(judge, systems, ["c"]).set_index("item_id")
    counts = pd.crosstab(judge["item_id"], judge["status"])
    for column, status in (("n_failed", "error"), ("n_na", "na"), ("n_abstained", "abstain")):
        assert table[column].tolist() == counts[status].tolist(), column
    assert table["n_judgments"].tolist() == judge.groupby("item_id").size().tolist()
    assert table["n_order_disagreement"].tolist() == [1, 1, 1]


# -- the verb as a function: a wide metric column, provenance, defaults, the pilot's fallback -----------------------

def _wide_csv(tmp_path, dialogues=12):
    """A wide score CSV (one metric column, no criterion): `bleu` per dialogue and system."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "bleu": float(rng.integers(1, 6))}
                          for i in range(dialogues) for s in ("a", "b")])
    path = tmp_path / "wide.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_a_wide_metric_column_is_screened_under_its_own_name_or_the_pilots_criteria(tmp_path):
    """A wide CSV's one metric column stands for every criterion: without a pilot it is screened under the column's
    name, with one under each of the pilot's criteria, each with the column's means (pandas' groupby); never as
    the internal wildcard "*"."""
    from calibration.study.screen import screen

    path, frame = _wide_csv(tmp_path)
    means = frame.groupby("system")["bleu"].mean()
    alone = screen(path, score_column="bleu", bootstrap=100)
    assert alone.criteria == ["bleu"] and set(alone.systems["criterion"]) == {"bleu"}
    assert alone.systems.set_index("system")["mean"].to_dict() == pytest.approx(means.to_dict())
    assert alone.power["criterion"].tolist() == ["bleu"]
    labels = pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "annotator": "ann", "criterion": c, "score": 3}
                           for i in range(4) for s in ("a", "b") for c in ("fluency", "accuracy")])
    labels.to_csv(tmp_path / "human.csv", index=False)
    piloted = screen(path, tmp_path / "human.csv", score_column="bleu", scale=(1, 5), bootstrap=100)
    assert piloted.criteria == ["accuracy", "fluency"]
    for criterion in ("accuracy", "fluency"):
        rows = piloted.systems[piloted.systems["criterion"] == criterion].set_index("system")
        assert rows["mean"].to_dict() == pytest.approx(means.to_dict())


def test_the_provenance_names_the_judgments_model_and_rubric_or_none():
    """provenance's model and rubric: the judgments' own (one judge per file), None when they carry none (not an
    empty string); and the seed used."""
    from calibration.study.screen import screen

    judge = pd.DataFrame([{"item_id": f"d{i}", "system": s, "criterion": "c", "score": float(i % 3 + (s == "a")),
                           "status": "ok", "model": "m1", "rubric": "toy@1"}
                          for i in range(8) for s in ("a", "b")])
    said = screen(judge, bootstrap=100, seed=4).provenance
    assert (said["model"], said["rubric"], said["seed"]) == ("m1", "toy@1", 4)
    bare = screen(judge.assign(model=None, rubric=""), bootstrap=100).provenance
    assert bare["model"] is None and bare["rubric"] is None


# screen()'s keyword -> the same setting's name in the helpers and the result
_SAME_SETTING = {"seed": "seed", "bootstrap": "n_resamples", "power": "power", "random_share": "random_share",
                 "budget_unit": "unit", "design": "design", "clean": "clean"}


def test_a_screen_result_or_helper_called_without_a_setting_uses_the_verbs_default():
    """ScreenResult and the helpers are public: one built or called without a seed, resamples, power, random share,
    budget unit, design or cleaning uses what `screen()` uses by default, and says so (a result's seed and
    resamples are printed)."""
    import inspect

    from calibration.study import screen as module

    defaults = {name: p.default for name, p in inspect.signature(module.screen).parameters.items()}
    empty = pd.DataFrame()
    result = module.ScreenResult(["c"], empty, {}, empty, empty, "")
    assert (result.seed, result.n_resamples) == (defaults["seed"], defaults["bootstrap"])
    checked = 0
    for helper in (module.systems_table, module.screen_tables, module.power_table):
        parameters = inspect.signature(helper).parameters
        for verb_name, name in _SAME_SETTING.items():
            if name in parameters and parameters[name].default is not inspect.Parameter.empty:
                assert parameters[name].default == defaults[verb_name], (helper.__name__, name)
                checked += 1
    assert checked >= 8


@pytest.mark.parametrize("pilot_size, flat", [(2, False), (6, True)])
def test_a_pilot_with_no_fit_to_check_the_signal_on_falls_back_to_a_uniform_draw(pilot_size, flat):
    """Fewer than three labelled dialogues, or judge scores that never vary: no residual to check the uncertainty
    against, so the share following it is none and the active plan's draw is uniform (budget / dialogues each),
    its reason saying it fell back."""
    from calibration.study.designs import _active_plan, pilot_errors, signal_check

    items, judge, pilot, *_ = _pilot(12)
    if flat:
        judge = judge.assign(score=3.0)
    pilot = pilot.iloc[:pilot_size]
    share, why = signal_check(items, pilot_errors(judge, pilot))
    assert why == "the pilot has no labels to check the signal on: uniform"
    items = items.assign(discrimination=0.0, priority=items["uncertainty"])
    plan = _active_plan(items, 6, "dialogues", 1.0, 2, share)
    assert np.allclose(plan["inclusion_probability"], 6 / 12)
    assert set(plan["reason"]) == {"uniform draw: the active design fell back (plan.json says why; seed 2)"}


def test_a_pilot_the_judge_fits_exactly_falls_back_to_uniform_whatever_the_rounding():
    """Human labels an exact linear function of the judge's scores (a deterministic judge in agreement with the
    humans): there is no error for the uncertainty to mark, so every such pilot falls back to a uniform draw and says
    why. Before, the fit's rounding residuals (~1e-15) were tested as errors, and 6 of these 40 pilots went active
    claiming the uncertainty marks where the judge errs. One real error (0.5 on one dialogue) is still checked."""
    from calibration.study.designs import pilot_errors, signal_check

    rng = np.random.default_rng(1)
    for _ in range(40):
        ids = [f"d{i}" for i in range(20)]
        score = rng.integers(1, 6, 20).astype(float)
        items = pd.DataFrame({"item_id": ids, "uncertainty": rng.random(20)})
        judge = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "score": score, "status": "ok"})
        pilot = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "human": 2.0 * score - 1.0})
        share, why = signal_check(items, pilot_errors(judge, pilot))
        assert share == 0.0 and why == ("on 20 pilot dialogues the judge's scores fit the labels exactly (a linear "
                                        "function of them): no error for the uncertainty to mark, so the draw is "
                                        "uniform")
    pilot.loc[3, "human"] += 0.5
    assert "fit the labels exactly" not in signal_check(items, pilot_errors(judge, pilot))[1]


def test_the_output_files_read_back_as_the_tables_with_no_index_column():
    """systems.csv, items.csv, power.csv and plan.csv read back with pandas are the result's tables, column for
    column (no index column added); plan.json parses back to plan_info."""
    import io
    import json

    from calibration.study.screen import screen

    rng = np.random.default_rng(2)
    judge = pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "criterion": "c", "status": "ok",
                           "score": float(rng.integers(1, 6))} for i in range(16) for s in ("a", "b", "c")])
    result = screen(judge, budget=6, bootstrap=100)
    files = result.files()
    for name, table in (("systems.csv", result.systems), ("items.csv", result.items), ("power.csv", result.power),
                        ("plan.csv", result.plan)):
        back = pd.read_csv(io.StringIO(files[name]))
        assert back.columns.tolist() == table.columns.tolist(), name
        assert len(back) == len(table), name
    assert json.loads(files["plan.json"]) == json.loads(json.dumps(result.plan_info))


def test_pairwise_verdicts_become_each_systems_share_of_its_comparisons_won():
    """win_shares against a loop written out: per dialogue and system, the mean over its comparisons of 1 for a win,
    1/2 for a tie, 0 for a loss, whichever side of the pair the system was on; other labels and failures left out."""
    from calibration.study.systems import win_shares

    rng = np.random.default_rng(4)
    rows = []
    for i in range(6):
        for first, second in (("x", "y"), ("x", "z"), ("y", "z"), ("z", "x")):
            label = str(rng.choice(["0", "1", "2", "1", "2", "maybe"]))
            status = "error" if rng.random() < 0.1 else "label"
            rows.append({"item_id": f"d{i}", "system_1": first, "system_2": second, "criterion": "pref",
                         "label": label, "status": status})
    pairs = pd.DataFrame(rows)
    got = win_shares(pairs).set_index(["item_id", "system"])["score"]
    points = {}
    for row in rows:
        if row["status"] != "label" or row["label"] not in ("0", "1", "2"):
            continue
        won_first = {"1": 1.0, "2": 0.0, "0": 0.5}[row["label"]]
        points.setdefault((row["item_id"], row["system_1"]), []).append(won_first)
        points.setdefault((row["item_id"], row["system_2"]), []).append(1.0 - won_first)
    expected = {key: float(np.mean(values)) for key, values in points.items()}
    assert got.to_dict() == pytest.approx(expected)
    assert {"0", "1", "2"} <= {r["label"] for r in rows if r["status"] == "label"}  # wins, losses and ties


# -- what `judge screen` prints ---------------------------------------------------------------------------------------

def _three_systems(gap=2.0, dialogues=20, seed=0):
    """Systems a and b close, c `gap` points below on both criteria."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "criterion": c, "status": "ok",
                          "score": m + rng.normal(0, 0.3)}
                         for i in range(dialogues) for c in ("x", "y") for s, m in (("a", 4.0), ("b", 3.9),
                                                                                   ("c", 4.0 - gap))])


def test_the_printed_screen_says_who_is_dominated_tied_and_what_the_plan_holds():
    """The printed tables and sentences, each against the result it prints: the dominated system and by whom (or
    that none is), 'tied' exactly on the rows tied with the best, the ten dialogues of highest priority (ties by id)
    in that order, and the plan's counts with singular and plural (or that no plan was written)."""
    from calibration.study.screen import screen

    result = screen(_three_systems(), budget=3, bootstrap=200)
    text = result.text()
    assert set(result.dominated) == {"c"}
    assert (f"Dominated on every criterion (kept; candidates to leave out of the human study): "
            f"c (by {result.dominated['c']})") in text
    first = text.split("\n\n")[0].splitlines()  # the heading is folded at 120 columns: rows follow the header
    table = first[next(k for k, line in enumerate(first) if line.split()[:2] == ["criterion", "rank"]) + 1:]
    assert len(table) == len(result.systems)
    for line, tied in zip(table, result.systems["tied_with_best"]):
        assert line.split()[-1] == "tied" if tied else line.split()[-1] != "tied"
    assert result.systems["tied_with_best"].any() and not result.systems["tied_with_best"].all()
    block = text.split("Dialogues that most need humans")[1].split("\n\nPower")[0].strip().splitlines()[2:]
    by_priority = sorted(result.items.itertuples(), key=lambda r: (-r.priority, r.item_id))[:10]
    assert [line.split()[0] for line in block] == [r.item_id for r in by_priority]
    result.items["priority"] = (result.items["priority"] * 4).round() / 4  # ties, broken by id
    block = result.text().split("Dialogues that most need humans")[1].split("\n\nPower")[0].strip().splitlines()[2:]
    by_priority = sorted(result.items.itertuples(), key=lambda r: (-r.priority, r.item_id))[:10]
    assert [line.split()[0] for line in block] == [r.item_id for r in by_priority]
    assert result.items["priority"].duplicated().sum() >= 5
    n_random, n_targeted = (result.plan["part"] == "random").sum(), (result.plan["part"] == "targeted").sum()
    assert (n_random, n_targeted) == (2, 1)
    assert ("Plan: budget 3 dialogues: 2 dialogues drawn uniformly at random (share 0.5, seed 0) and 1 dialogue "
            "targeted.") in text
    assert "No --budget given" not in text

    plain = screen(_three_systems(gap=0.0), bootstrap=200).text()
    assert "No system is dominated on every criterion." in plain and "Dominated on every" not in plain
    assert "No --budget given: no plan written" in plain and "\nPlan:" not in plain


def test_the_printed_plan_says_how_its_random_part_was_drawn():
    """--design active: the random part was drawn with inclusion probabilities rising with the uncertainty; one
    dialogue drawn at random is said in the singular."""
    from calibration.study.screen import screen

    judge = _three_systems(dialogues=12).assign(spread=np.linspace(0.0, 1.0, 72))
    text = " ".join(screen(judge, budget=2, bootstrap=100, design="active").text().split())  # prose folded
    assert ("1 dialogue drawn at random with inclusion probabilities rising with the judge's uncertainty "
            "(plan.csv records them) (share 0.5, seed 0) and 1 dialogue targeted.") in text


def test_a_system_judged_on_two_dialogues_gets_the_range_of_its_two_scores_and_on_one_no_interval():
    """The expanded percentile interval at 2 dialogues cuts sqrt(2) t_1 (0.975) = 18 standard errors off each side:
    a tail below 1e-70 percent, so the interval is the bootstrap's whole range, the two scores' min and max. At 1
    dialogue no interval is printed (NaN); the systems judged everywhere keep theirs."""
    from calibration.study.systems import systems_table

    assert stats.norm.sf(np.sqrt(2.0) * stats.t.ppf(0.975, 1)) < 1e-70
    rng = np.random.default_rng(6)
    rows = [{"item_id": f"d{i:02d}", "system": s, "criterion": "c", "status": "ok", "score": float(rng.normal(3, 1))}
            for i in range(12) for s in ("a", "b")]
    rows += [{"item_id": "d00", "system": "two", "criterion": "c", "status": "ok", "score": 1.5},
             {"item_id": "d07", "system": "two", "criterion": "c", "status": "ok", "score": 4.25},
             {"item_id": "d03", "system": "one", "criterion": "c", "status": "ok", "score": 2.0}]
    table = systems_table(pd.DataFrame(rows), ["c"], n_resamples=400, seed=1)[0].set_index("system")
    assert (table.loc["two", "ci_low"], table.loc["two", "ci_high"]) == (1.5, 4.25)
    assert table.loc["two", "n"] == 2 and table.loc["one", "n"] == 1
    assert np.isnan(table.loc["one", "ci_low"]) and np.isnan(table.loc["one", "ci_high"])
    assert np.isfinite(table.loc[["a", "b"], ["ci_low", "ci_high"]].to_numpy()).all()


def _bonferroni_t_p(systems, replicates, columns, units):
    """Each system's adjusted p of being below another of its criterion, written out: every within-criterion pair's
    paired bootstrap SE (numpy, resamples where some mean is undefined left out), widened by sqrt(u / (u - 1)),
    a two-sided t_{u-1} p (scipy) times the number of pairs, capped at 1, the smallest over the pairs it loses."""
    reps = replicates[~np.isnan(replicates).any(axis=1)]
    point = {(r.criterion, r.system): r.mean for r in systems.itertuples()}
    pairs = [(i, j) for i in range(len(columns)) for j in range(i + 1, len(columns)) if columns[i][0] == columns[j][0]]
    p = {column: 1.0 for column in columns}
    for i, j in pairs:
        d = point[columns[j]] - point[columns[i]]
        se = np.std(reps[:, j] - reps[:, i], ddof=1) * np.sqrt(units / (units - 1.0))
        adjusted = min(1.0, len(pairs) * 2 * stats.t.sf(abs(d) / se, units - 1))
        loser = columns[i] if d > 0 else columns[j]
        p[loser] = min(p[loser], adjusted)
    return p


@pytest.mark.parametrize("extra, units", [((), 12), (("two",), 2), (("two", "one"), 2)])
def test_each_systems_adjusted_p_is_the_bonferroni_t_over_every_pair_written_out(extra, units):
    """p_adjusted (and tied_with_best) against the Bonferroni-t written out with numpy and scipy, the t's degrees of
    freedom from the fewest dialogues a system was judged on (12; 2 when one system has only 2; still 2, the least
    that gives a t, when one has a single dialogue)."""
    from calibration.study.systems import systems_table

    rng = np.random.default_rng(8)
    means = {"a": 4.0, "b": 3.8, "c": 1.0}
    rows = [{"item_id": f"d{i:02d}", "system": s, "criterion": k, "status": "ok",
             "score": float(m + (k == "y") * 0.3 + rng.normal(0, 0.4))}
            for i in range(12) for k in ("x", "y") for s, m in means.items()]
    if "two" in extra:
        rows += [{"item_id": d, "system": "two", "criterion": k, "status": "ok", "score": v}
                 for k in ("x", "y") for d, v in (("d01", 0.5), ("d05", 0.8))]
    if "one" in extra:
        rows += [{"item_id": "d02", "system": "one", "criterion": k, "status": "ok", "score": 2.0} for k in ("x", "y")]
    systems, _, replicates, columns = systems_table(pd.DataFrame(rows), ["x", "y"], n_resamples=500, seed=3)
    expected = _bonferroni_t_p(systems, replicates, columns, units)
    for row in systems.itertuples():
        if row.rank == 1:
            assert np.isnan(row.p_adjusted) and row.tied_with_best
            continue
        assert row.p_adjusted == pytest.approx(expected[(row.criterion, row.system)], rel=1e-9)
    assert systems["p_adjusted"].between(1e-12, 0.999).sum() >= 2  # not capped: the df shows
    assert (systems["p_adjusted"] < 0.05).any() == (units == 12)  # c is far below, shown at 11 df, not at 1


def test_two_systems_the_judge_scores_identically_are_both_tied_with_the_best():
    """Identical scores on every dialogue: their difference is known to be 0 exactly, so neither is shown below the
    other; both are tied with the best and neither dominates the other."""
    from calibration.study.systems import systems_table

    rng = np.random.default_rng(12)
    base = rng.normal(4.0, 0.5, 15)
    rows = [{"item_id": f"d{i:02d}", "system": s, "criterion": "c", "status": "ok", "score": float(v)}
            for i in range(15) for s, v in (("a", base[i]), ("b", base[i]), ("c", base[i] - 1.0 - rng.random()))]
    systems, dominated, _, _ = systems_table(pd.DataFrame(rows), ["c"], n_resamples=300, seed=0)
    tied = systems.set_index("system")["tied_with_best"]
    assert tied.to_dict() == {"a": True, "b": True, "c": False}
    assert set(dominated) == {"c"}


def test_a_system_is_dominated_only_when_shown_below_one_other_on_every_criterion():
    """From planted bounds on theta_j - theta_i: 'low' is below 'top' on both criteria (dominated, by the first such
    system in name order); 'mixed' is below on one criterion only; 'partial' lacks a criterion (no domination
    without it), whatever its bound on the other; the bounds of 0 exactly or NaN decide nothing."""
    from calibration.study.systems import dominated_systems

    columns = [("x", "top"), ("x", "low"), ("x", "mixed"), ("x", "partial"), ("x", "zero"),
               ("y", "top"), ("y", "low"), ("y", "mixed"), ("y", "zero")]
    where = {c: k for k, c in enumerate(columns)}
    lower = np.full((len(columns), len(columns)), np.nan)

    def shown(criterion, loser, winner, bound):
        lower[where[(criterion, loser)], where[(criterion, winner)]] = bound

    for criterion in ("x", "y"):
        shown(criterion, "low", "top", 0.4)
        shown(criterion, "low", "mixed", 0.2 if criterion == "x" else np.nan)
        shown(criterion, "zero", "top", 0.0 if criterion == "x" else 0.3)
    shown("x", "mixed", "top", 0.3)
    shown("y", "mixed", "top", -0.1)
    shown("x", "partial", "top", 0.5)
    assert dominated_systems(lower, columns, ["x", "y"]) == {"low": "top"}
    assert dominated_systems(lower, columns, ["x"]) == {"low": "mixed", "mixed": "top", "partial": "top"}


# -- the plan: its refusals at their edges, the targeted part's fill, each row's reason ---------------------------

def _items(n=8, cost=(1, 2, 3)):
    return pd.DataFrame({"item_id": [f"d{i}" for i in range(n)], "n_judgments": [cost[i % len(cost)] for i in range(n)],
                         "uncertainty": np.linspace(0.9, 0.1, n), "discrimination": np.linspace(0.0, 0.8, n),
                         "priority": np.linspace(0.9, 0.1, n) + np.linspace(0.0, 0.8, n) * 0.5})


PLAN_EDGES = [
    # budget, unit, random share, design, refused with (None: a plan of that budget)
    (8, "dialogues", 1.0, "uniform", None),
    (15, "judgments", 0.0, "uniform", None),
    (9, "dialogues", 0.5, "uniform", "--budget 9 dialogues is more than the data has: 8 dialogues in 8 dialogues"),
    (16, "judgments", 0.5, "uniform", "--budget 16 judgments is more than the data has: 15 judgments in 8 dialogues"),
    (0, "dialogues", 0.5, "uniform", "--budget must be at least 1, got 0"),
    (1, "dialogues", 0.5, "uniform", None),
    (4, "dialogues", 1.5, "uniform", "--random-share must be between 0 and 1, got 1.5"),
    (4, "dialogues", 1.05, "uniform", "--random-share must be between 0 and 1, got 1.05"),
    (4, "dialogues", -0.25, "uniform", "--random-share must be between 0 and 1, got -0.25"),
    (8, "dialogues", 0.5, "active", None),
    (9, "dialogues", 0.5, "active", "--budget 9 dialogues is more than the data has: 8 dialogues"),
    (4, "judgments", 0.5, "active", "--design active draws dialogues with known probabilities"),
]


@pytest.mark.parametrize("budget, unit, share, design, refused", PLAN_EDGES)
def test_a_plan_is_refused_past_its_edges_and_made_at_them(budget, unit, share, design, refused):
    """make_plan called directly (it is public): the whole data is a budget, one more is refused with the counts;
    a budget of 1 and random shares of 0 and 1 are plans, outside [0, 1] refused; an active design counts only
    dialogues. A made plan spends exactly its budget here (costs 1, 2, 3 fit it)."""
    from calibration.errors import CalibrationError
    from calibration.study.designs import make_plan

    items = _items()
    before = items.copy()
    if refused:
        with pytest.raises(CalibrationError) as caught:
            make_plan(items, budget, unit, share, 0, design)
        assert str(caught.value).startswith(refused)
    else:
        plan = make_plan(items, budget, unit, share, 0, design)
        cost = items.set_index("item_id")["n_judgments"] if unit == "judgments" else pd.Series(1, items["item_id"])
        assert cost[plan["item_id"]].sum() == budget and plan["item_id"].is_unique
    pd.testing.assert_frame_equal(items, before)


def test_the_targeted_part_fills_the_budget_greedily_in_priority_order():
    """Counted in judgments, after the random part: each dialogue in priority order is taken if its cost still fits
    what is left, else passed over for the next (written out as a loop); one that fits exactly is taken."""
    from calibration.study.designs import make_plan

    items = _items(n=10, cost=(3, 1, 4, 2, 5))
    for budget, share in ((9, 0.0), (10, 0.3), (13, 0.5), (7, 0.0)):
        plan = make_plan(items, budget, "judgments", share, 5)
        cost = items.set_index("item_id")["n_judgments"]
        drawn = plan.loc[plan["part"] == "random", "item_id"].tolist()
        left = budget - cost[drawn].sum()
        expected = []
        for row in sorted(items.itertuples(), key=lambda r: (-r.priority, r.item_id)):
            if row.item_id not in drawn and cost[row.item_id] <= left:
                expected.append(row.item_id)
                left -= cost[row.item_id]
        assert plan.loc[plan["part"] == "targeted", "item_id"].tolist() == expected, (budget, share)
    # 3 + 1, d2's 4 passed over, + 2, d4 and d5 passed over, + d6's 1: exactly 7
    assert make_plan(items, 7, "judgments", 0.0, 5)["item_id"].tolist() == ["d0", "d1", "d3", "d6"]


@pytest.mark.parametrize("design", ["uniform", "active"])
def test_each_targeted_row_says_which_of_uncertainty_or_discrimination_put_it_there(design):
    """'uncertain judgments (u)' when the uncertainty is at least the discrimination (a tie counts as uncertainty),
    'separates the leading systems (d)' otherwise, each with its value to two decimals."""
    from calibration.study.designs import make_plan

    items = pd.DataFrame({"item_id": ["a", "b", "c", "d"], "n_judgments": 1, "uncertainty": [0.7, 0.25, 0.5, 0.0],
                          "discrimination": [0.2, 0.6, 0.5, 0.0], "priority": [0.9, 0.85, 1.0, 0.0]})
    plan = make_plan(items, 3, "dialogues", 0.0, 0, design, 0.0).set_index("item_id")
    assert plan["reason"].to_dict() == {"c": "uncertain judgments (0.50)", "a": "uncertain judgments (0.70)",
                                        "b": "separates the leading systems (0.60)"}


def test_the_entropy_of_probabilities_that_do_not_sum_to_one_is_of_their_renormalised_share():
    """--logprobs keeps the top tokens only, so the recorded probabilities may sum below 1: the entropy is that of
    their renormalised shares (scipy's entropy normalises too), over log of the number recorded."""
    judge = pd.DataFrame({"item_id": ["d1", "d2", "d3"], "system": "a", "criterion": "c", "score": [1.0, 2.0, 3.0],
                          "status": "ok", "probs": [{"1": 0.3, "2": 0.3}, {"1": 0.1, "2": 0.4, "3": 0.2},
                                                    {"4": 0.45, "5": 0.05, "3": 0.0}]})
    got = judgment_uncertainty(judge)["entropy"].to_numpy()
    expected = [stats.entropy([0.3, 0.3]) / np.log(2), stats.entropy([0.1, 0.4, 0.2]) / np.log(3),
                stats.entropy([0.45, 0.05]) / np.log(3)]
    assert got == pytest.approx(expected)
    assert got[0] == pytest.approx(1.0)


# -- the active design's inclusion probabilities, exactly -----------------------------------------------------------

def _mixture_capped(u, size, floor):
    """The probabilities written out: weights floor / N + (1 - floor) u / sum(u) (uniform when no u), scaled to
    `size`; any above 1 set to 1 and the rest rescaled to what is left, repeated until none is above 1."""
    u = np.nan_to_num(np.asarray(u, float)).clip(min=0.0)
    n = len(u)
    share = u / u.sum() if u.sum() > 0 else np.full(n, 1.0 / n)
    weights = floor / n + (1.0 - floor) * share
    fixed = np.zeros(n, bool)
    while True:
        pi = np.where(fixed, 1.0, (size - fixed.sum()) * weights / weights[~fixed].sum())
        if not (pi[~fixed] > 1.0 + 1e-12).any():
            return np.minimum(pi, 1.0)
        fixed |= pi > 1.0 + 1e-12


@pytest.mark.parametrize("u, size, floor", [
    (np.linspace(0.0, 1.0, 12), 4, 0.6),               # none capped
    (np.r_[50.0, 20.0, np.ones(8)], 4, 0.2),           # two capped, one after the other
    (np.r_[4.0, np.ones(9)], 4, 0.2),                  # one just over 1 (1.065) before the cap
    (np.r_[-1.0, np.nan, 2.0, 1.0, 0.5, 0.0], 3, 0.5), # negative and missing uncertainty count as none
    (np.zeros(7), 3, 0.6),                             # nothing recorded: uniform
    (np.r_[0.1, 0.05, 0.0, 0.2, 0.0, 0.02], 2, 0.5),   # little recorded (summing below 1): still followed
    (np.linspace(0.1, 1.0, 5), 5, 0.6),                # every dialogue: all drawn for certain
])
def test_inclusion_probabilities_are_the_floored_mixture_capped_at_one(u, size, floor):
    from calibration.study.designs import inclusion_probabilities

    pi = inclusion_probabilities(u, size, floor=floor)
    np.testing.assert_allclose(pi, _mixture_capped(u, size, floor), rtol=1e-12, atol=1e-12)
    assert pi.sum() == pytest.approx(size) and pi.max() <= 1.0


def test_inclusion_probabilities_default_to_the_documented_floor():
    from calibration.study.designs import ACTIVE_FLOOR, inclusion_probabilities

    u = np.linspace(0.0, 1.0, 10)
    np.testing.assert_allclose(inclusion_probabilities(u, 3), inclusion_probabilities(u, 3, floor=ACTIVE_FLOOR))
    np.testing.assert_allclose(inclusion_probabilities(u, 3), _mixture_capped(u, 3, 0.6))


def test_a_spread_on_a_criterion_with_no_numeric_score_is_read_in_points():
    """A criterion whose judgments all failed or were N/A has no observed range to measure a spread against: its
    recorded spread is read in points (over 1), capped at 1, as for a criterion scored the same everywhere."""
    judge = pd.DataFrame({"item_id": ["d1", "d2", "d3"], "system": "a", "criterion": "k", "score": np.nan,
                          "status": ["na", "error", "na"], "spread": [0.4, 0.7, 3.0]})
    np.testing.assert_allclose(judgment_uncertainty(judge)["spread"], [0.4, 0.7, 1.0])


# -- the power table, column by column ------------------------------------------------------------------------------

def _power_data(seed=21, dialogues=30):
    """Three systems on two criteria, a few judgments missing; human labels near the judge's."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for i in range(dialogues):
        for k, shift in (("x", 0.0), ("y", 1.5)):
            for s, m in (("a", 4.0), ("b", 3.0), ("c", 2.0)):
                if (i, s, k) in {(3, "a", "x"), (7, "b", "x"), (11, "b", "y")}:
                    continue
                score = m + (k == "y" and s == "b") * shift + rng.normal(0, 0.5)
                rows.append({"item_id": f"d{i:02d}", "system": s, "criterion": k, "status": "ok", "score": score})
                labels.append({"item_id": f"d{i:02d}", "system": s, "criterion": k,
                               "human": score + rng.normal(0, 0.3)})
    return pd.DataFrame(rows), pd.DataFrame(labels)


@pytest.mark.parametrize("pilot_share", [None, 1.0, 0.4])
def test_each_power_table_column_against_its_parts_written_out(pilot_share):
    """Per criterion, the top two by rank; the judge's paired differences on the dialogues both were judged on: their
    count, mean, mean / SD (ddof 1); the dialogues needed (calibration.study.power) at that effect. With a pilot that
    labels every judged dialogue, the human difference is the human mean (the judge adds nothing), its effect the
    mean over the SD of the human differences, rho their correlation with the judge's (numpy)."""
    from calibration.study.power import dialogues_needed
    from calibration.study.power_table import power_table
    from calibration.study.ppi import ppi_mean

    judge, labels = _power_data()
    systems = pd.DataFrame({"criterion": ["x", "x", "x", "y", "y", "y"], "system": ["a", "b", "c", "b", "a", "c"],
                            "rank": [1, 2, 3, 1, 2, 3]})
    pilot = None if pilot_share is None else labels[labels["item_id"] < f"d{round(30 * pilot_share):02d}"]
    table = power_table(judge, systems, ["x", "y"], power=0.9, alpha=0.1, pilot=pilot).set_index("criterion")
    for criterion, first, second in (("x", "a", "b"), ("y", "b", "a")):
        wide = judge[judge["criterion"] == criterion].pivot(index="item_id", columns="system", values="score")
        both = wide[[first, second]].dropna()
        g = (both[first] - both[second]).to_numpy()
        row = table.loc[criterion]
        assert (row["system_a"], row["system_b"], row["n_judged"]) == (first, second, len(g))
        assert len(g) == {"x": 28, "y": 29}[criterion]  # the dialogues missing one of the two left out
        assert row["judge_difference"] == pytest.approx(g.mean())
        assert row["judge_effect"] == pytest.approx(g.mean() / g.std(ddof=1))
        assert (row["power"], row["alpha"]) == (0.9, 0.1)
        effect = g.mean() / g.std(ddof=1)
        if pilot is None:
            assert row["dialogues_human_only"] == dialogues_needed(effect, 0.9, 0.1)
            assert "rho" not in table.columns and pd.isna(row["dialogues_with_judge"])
            continue
        human = pilot[pilot["criterion"] == criterion].pivot(index="item_id", columns="system", values="human")
        d = (human[first] - human[second]).reindex(both.index).to_numpy()
        labelled = ~np.isnan(d)
        assert row["n_pilot"] == labelled.sum() == (len(g) if pilot_share == 1.0 else {"x": 10, "y": 11}[criterion])
        # every judged dialogue labelled: the human mean; else PPI++ on the labelled ones (estimate.py)
        difference = d.mean() if pilot_share == 1.0 else ppi_mean(d, g).estimate
        effect = difference / d[labelled].std(ddof=1)
        rho = np.corrcoef(d[labelled], g[labelled])[0, 1]
        assert row["human_difference"] == pytest.approx(difference)
        assert row["human_effect"] == pytest.approx(effect)
        assert row["rho"] == pytest.approx(rho)
        assert row["dialogues_human_only"] == dialogues_needed(effect, 0.9, 0.1)
        with_judge = dialogues_needed(effect, 0.9, 0.1, rho, len(g))
        got = row["dialogues_with_judge"]
        assert (pd.isna(got) and with_judge is None) or got == with_judge
        assert with_judge is not None or pilot_share < 1.0


def test_a_criterion_with_one_system_has_no_power_row_and_a_single_difference_no_effect():
    from calibration.study.power_table import effect_size, power_table

    judge, _ = _power_data()
    judge = judge[~((judge["criterion"] == "y") & (judge["system"] != "a"))]
    systems = pd.DataFrame({"criterion": ["x", "x", "y"], "system": ["a", "b", "a"], "rank": [1, 2, 1]})
    assert power_table(judge, systems, ["x", "y"])["criterion"].tolist() == ["x"]
    assert np.isnan(effect_size(np.array([0.7]))) and np.isnan(effect_size(np.array([0.5, 0.5])))
    assert effect_size(np.array([1.0, 2.0])) == pytest.approx(1.5 / np.std([1.0, 2.0], ddof=1))


@pytest.mark.parametrize("flat", ["human", "judge"])
def test_a_pilot_with_no_spread_in_one_side_has_no_correlation_and_warns_nothing(flat):
    """Human differences (or the judge's, on the labelled dialogues) that never vary: no correlation can be
    measured, so rho is NaN, and no numpy warning leaks to the user's terminal."""
    import warnings

    from calibration.study.power_table import power_table

    judge, labels = _power_data()
    labelled = [f"d{i:02d}" for i in range(12, 20)]
    pilot = labels[labels["item_id"].isin(labelled) & (labels["criterion"] == "x")].copy()
    if flat == "human":
        pilot["human"] = np.where(pilot["system"] == "a", 4.0, 3.0)
    else:
        at = judge["item_id"].isin(labelled) & (judge["criterion"] == "x")
        judge.loc[at, "score"] = np.where(judge.loc[at, "system"] == "a", 4.5, 3.5)
    systems = pd.DataFrame({"criterion": "x", "system": ["a", "b", "c"], "rank": [1, 2, 3]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = power_table(judge, systems, ["x"], pilot=pilot).iloc[0]
    assert row["n_pilot"] == 8 and np.isnan(row["rho"]) and pd.isna(row["dialogues_with_judge"])


def test_each_dialogues_priority_is_its_uncertainty_plus_the_discrimination_of_the_scores_given():
    """items_table: priority = uncertainty + discrimination, the discrimination computed from `scored` when given
    (pairwise win shares) and from the judgments otherwise; a dialogue the contenders have no score on (every
    judgment failed) discriminates nothing (0), so its priority is its uncertainty, and no numpy warning is
    printed for it."""
    import warnings

    from calibration.study.uncertainty import items_table

    judge, systems = _scores(seed=3)
    judge.loc[judge["item_id"] == "d5", ["score", "status"]] = [np.nan, "error"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing leaks to the user's terminal (numpy's nanstd of no score did)
        table = items_table(judge, systems, ["c"]).set_index("item_id")
    expected = discrimination(judge, systems, ["c"])
    assert table.loc["d5", "discrimination"] == 0.0 and table.loc["d5", "uncertainty"] == 1.0
    assert table["discrimination"].drop("d5").to_dict() == pytest.approx(expected.drop("d5").to_dict())
    assert table["priority"].to_dict() == pytest.approx((table["uncertainty"] + table["discrimination"]).to_dict())
    # scores from elsewhere (win shares), on every dialogue but d5 (its verdicts all failed)
    other = judge.assign(score=judge["score"].where(judge["system"] != "a", 1.0))
    other = other[other["item_id"] != "d5"]
    given = items_table(judge, systems, ["c"], scored=other).set_index("item_id")
    assert given.loc["d5", "discrimination"] == 0.0
    assert given["discrimination"].drop("d5").to_dict() == pytest.approx(
        discrimination(other, systems, ["c"]).to_dict())
    assert not np.allclose(given["discrimination"], table["discrimination"])


def test_discrimination_does_not_depend_on_the_judges_units_below_one_point_either():
    """Scores in tenths (half the observed range below 1): the same discrimination as in points, and as numpy's SD
    over half the range written out."""
    judge, systems = _scores(seed=5)
    points = discrimination(judge, systems, ["c"])
    tenths = discrimination(judge.assign(score=judge["score"] / 10.0), systems, ["c"])
    assert tenths.to_dict() == pytest.approx(points.to_dict())
    table = judge.pivot(index="item_id", columns="system", values="score")[["a", "b", "d"]] / 10.0
    half = (table.to_numpy().max() - table.to_numpy().min()) / 2
    assert half < 1.0
    assert tenths.to_dict() == pytest.approx((table.std(axis=1, ddof=0) / half).clip(upper=1.0).to_dict())


def test_uncertainty_does_not_depend_on_the_judges_units_below_one_point_either():
    judge = _judgments()
    judge = judge[judge["criterion"] == "c"]
    base = judgment_uncertainty(judge)
    tenths = judgment_uncertainty(judge.assign(score=judge["score"] / 10.0, spread=judge["spread"] / 10.0))
    pd.testing.assert_frame_equal(base, tenths)
    assert set(base["spread"].dropna()) >= {0.25, 0.5}  # spreads not capped: the units show


# -- a plan read back: each inclusion probability a user could write, one row each ---------------------------------

PROBABILITY_ROWS = [
    # the rows' (part, inclusion_probability), the message expected (None: read)
    ([("random", "0.5"), ("targeted", "")], None),
    ([("random", "1"), ("targeted", "1")], None),                # `judge escalate` writes 1 on a targeted row
    ([("random", " 0.25 "), ("random", "1.0")], None),           # spaces around a number are read
    ([("random", "0.5"), ("random", "0")], "plan.csv:3: inclusion_probability must be a number in (0, 1] (empty "
                                           "allowed on a targeted row), got '0'"),
    ([("random", "1.0001")], "plan.csv:2: inclusion_probability must be a number in (0, 1]"),
    ([("random", "-0.5")], "plan.csv:2: inclusion_probability must be a number in (0, 1]"),
    ([("targeted", ""), ("random", "")], "plan.csv:3: inclusion_probability must be a number in (0, 1] (empty "
                                         "allowed on a targeted row), got ''"),
    ([("targeted", "half")], "plan.csv:2: inclusion_probability must be a number in (0, 1] (empty allowed on a "
                             "targeted row), got 'half'"),
    ([("targeted", "0")], "plan.csv:2: inclusion_probability must be a number in (0, 1]"),
]


@pytest.mark.parametrize("rows, message", PROBABILITY_ROWS)
def test_each_inclusion_probability_in_a_plan_is_checked_with_its_line(rows, message, tmp_path):
    """Every random row needs a probability in (0, 1]; a targeted row may leave it empty or give one in (0, 1];
    anything else is refused naming plan.csv and the line of the first bad row; the files are left as they were."""
    from calibration.errors import CalibrationError
    from judge.annotation.plan import read_plan

    csv = "item_id,part,inclusion_probability\n" + "".join(f"d{k},{part},{p}\n" for k, (part, p) in enumerate(rows))
    (tmp_path / "plan.json").write_text('{"version": 1}', encoding="utf-8")
    (tmp_path / "plan.csv").write_text(csv, encoding="utf-8")
    if message is None:
        plan, info = read_plan(tmp_path)
        assert plan["item_id"].tolist() == [f"d{k}" for k in range(len(rows))] and info == {"version": 1}
    else:
        with pytest.raises(CalibrationError) as caught:
            read_plan(tmp_path, CalibrationError)
        assert str(caught.value).startswith(f"{tmp_path}/{message}")
    assert (tmp_path / "plan.csv").read_text(encoding="utf-8") == csv


@pytest.mark.parametrize("files, message", [
    ({"plan.json": '{"version": 1}'}, "plan.csv: no such file (--plan takes the --output-dir of `judge screen "
                                      "--budget`)"),
    ({"plan.csv": "item_id,part\nd1,random\n"}, "plan.json: no such file"),
    ({"plan.json": '{"version": 1,\n "unit": }', "plan.csv": "item_id,part\n"}, "plan.json:2: invalid JSON at "
                                                                                "column 10"),
    ({"plan.json": '{"version": 1}', "plan.csv": "item_id,reason\nd1,x\n"}, "plan.csv:1: missing column(s) part"),
    ({"plan.json": '{"version": 1}', "plan.csv": "part\nrandom\n"}, "plan.csv:1: missing column(s) item_id"),
    ({"plan.json": '{"version": 1}', "plan.csv": ""}, "plan.csv: not a readable CSV file"),
])
def test_a_plan_folder_missing_a_file_or_a_column_is_refused_naming_it(files, message, tmp_path):
    from calibration.errors import CalibrationError
    from judge.annotation.plan import read_plan

    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(CalibrationError) as caught:
        read_plan(tmp_path, CalibrationError)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


# -- the signal check's numbers: its p and the variance ratio it prints ---------------------------------------------

def _noisy_pilot(seed, n=12):
    """A pilot whose judge errs at random (human = score + N(0, 1)) and an uncertainty that knows nothing of it."""
    rng = np.random.default_rng(seed)
    ids = [f"d{i:02d}" for i in range(n)]
    score = rng.integers(1, 6, n).astype(float)
    human = score + rng.normal(0, 1, n)
    u = rng.random(n)
    items = pd.DataFrame({"item_id": ids, "uncertainty": u})
    judge = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "score": score, "status": "ok"})
    pilot = pd.DataFrame({"item_id": ids, "system": "a", "criterion": "c", "human": human})
    return items, judge, pilot, score, human, u


def _ratio_and_p(score, human, u, permutations=1999):
    """The residual-variance ratio mean(r^2 / p~) / mean(r^2) and the one-sided permutation p of T = r^2 . (1 - 1/p~)
    written out (scipy's least squares; the shuffles drawn as signal_check draws them: seed 0, one permutation of
    the gains each), counting ties."""
    from calibration.study.designs import ACTIVE_FLOOR

    fit = stats.linregress(score, human)
    r2 = (human - fit.intercept - fit.slope * score) ** 2
    relative = ACTIVE_FLOOR + (1.0 - ACTIVE_FLOOR) * u / u.mean()
    gain = 1.0 - 1.0 / relative
    rng = np.random.default_rng(0)
    shuffled = np.array([r2 @ rng.permutation(gain) for _ in range(permutations)])
    observed = r2 @ gain
    p = (1 + np.sum(shuffled >= observed - 1e-9 * abs(observed))) / (permutations + 1)
    return np.mean(r2 / relative) / np.mean(r2), p


@pytest.mark.parametrize("seed, follows", [(1, 0.0), (2, 0.0), (3, 0.0), (15, 1.0), (10, 0.5)])
def test_the_signal_checks_printed_ratio_and_p_are_the_statistics_written_out(seed, follows):
    """With an uncertainty that knows nothing of the errors (follows 0), or follows their size with noise: the
    verdict is uniform exactly when p >= 0.1, and the printed variance ratio and p are those written out with scipy
    (the same seeded shuffles, so the printed p is the written-out one to its digits: two for a fallback, three for
    an active draw; seed 10's p, 13 / 2000, would print 0.007 over 1,998)."""
    import re

    from calibration.study.designs import pilot_errors, signal_check

    items, judge, pilot, score, human, u = _noisy_pilot(seed)
    if follows:
        u = follows * np.abs(human - score) + np.random.default_rng(seed + 100).random(12)
        items = items.assign(uncertainty=u)
    ratio, p = _ratio_and_p(score, human, u)
    share, why = signal_check(items, pilot_errors(judge, pilot))
    printed = re.search(r"residual variance ([0-9.]+) x a uniform draw's.*permutation p ([0-9.]+)", why)
    assert float(printed.group(1)) == pytest.approx(ratio, abs=0.005 + 1e-9)
    assert printed.group(2) == (f"{p:.2f}" if share == 0.0 else f"{p:.3f}")
    assert (share == 0.0) == (p >= 0.1) and (share == 0.0) == ("falls back to uniform" in why)
    assert p > 0.0015  # a p of the permutations, not the smallest one (1 / 2000)


def test_a_pilot_whose_permutation_p_is_exactly_the_threshold_falls_back_to_uniform():
    """Active only when p < 0.1 (the docstring's rule): this pilot's p is exactly 200 / 2000 = 0.1 (written out),
    so the draw stays uniform. The shuffle count is the documented 1,999."""
    from calibration.study.designs import PERMUTATIONS, pilot_errors, signal_check

    assert PERMUTATIONS == 1999
    items, judge, pilot, score, human, u = _noisy_pilot(2473)
    assert _ratio_and_p(score, human, u)[1] == pytest.approx(0.1, abs=1e-12)
    share, why = signal_check(items, pilot_errors(judge, pilot))
    assert share == 0.0 and "permutation p 0.10): the draw falls back to uniform" in why


def test_an_active_plan_without_a_share_takes_the_documented_one():
    """No uncertainty share given: 1 - ACTIVE_FLOOR of the draw follows the uncertainty, the share signal_check gives
    without a pilot (and 0.4, the documented floor of 0.6 leaves)."""
    from calibration.study.designs import ACTIVE_FLOOR, _active_plan, signal_check

    items = pd.DataFrame({"item_id": [f"d{i:02d}" for i in range(20)], "uncertainty": np.linspace(0.0, 1.0, 20),
                          "discrimination": 0.0, "priority": 0.0})
    assert ACTIVE_FLOOR == 0.6
    unchecked, _ = signal_check(items, None)
    assert unchecked == pytest.approx(0.4)
    pd.testing.assert_frame_equal(_active_plan(items, 8, "dialogues", 0.5, 3, None),
                                  _active_plan(items, 8, "dialogues", 0.5, 3, unchecked))


@pytest.mark.parametrize("scale", [1e-3, 1e4])
def test_the_signal_check_does_not_depend_on_the_units_of_scores_and_labels(scale):
    """Judge scores and human labels in other units (thousandths, or tens of thousands): the same verdict, ratio and
    p; and a pilot the judge fits exactly still falls back, whatever the size of the labels' rounding."""
    from calibration.study.designs import pilot_errors, signal_check

    items, judge, pilot, score, human, u = _noisy_pilot(15)
    items = items.assign(uncertainty=np.abs(human - score) + np.random.default_rng(115).random(12))
    base = signal_check(items, pilot_errors(judge, pilot))
    moved = signal_check(items, pilot_errors(judge.assign(score=judge["score"] * scale),
                                             pilot.assign(human=pilot["human"] * scale + 7.0 * scale)))
    assert moved == base and base[0] > 0
    exact = pilot.assign(human=(2.0 * judge["score"] - 1.0) * scale)
    share, why = signal_check(items, pilot_errors(judge.assign(score=judge["score"] * scale), exact))
    assert share == 0.0 and "fit the labels exactly" in why


def test_the_signals_error_per_dialogue_averages_every_criterion_fitted_from_three_labels():
    """A second criterion labelled on only three dialogues is fitted too (three points make a line with residuals):
    each dialogue's error is the mean of its squared residuals over the criteria (scipy per criterion), and the
    printed ratio is computed from those."""
    import re

    from calibration.study.designs import ACTIVE_FLOOR, pilot_errors, signal_check

    items, judge, pilot, score, human, u = _noisy_pilot(15)
    items = items.assign(uncertainty=u)
    ids = items["item_id"].tolist()
    extra_score, extra_human = np.array([1.0, 3.0, 4.0]), np.array([2.0, 2.5, 5.5])
    judge = pd.concat([judge, pd.DataFrame({"item_id": ids[:3], "system": "a", "criterion": "k",
                                            "score": extra_score, "status": "ok"})], ignore_index=True)
    pilot = pd.concat([pilot, pd.DataFrame({"item_id": ids[:3], "system": "a", "criterion": "k",
                                            "human": extra_human})], ignore_index=True)
    fit = stats.linregress(score, human)
    error = (human - fit.intercept - fit.slope * score) ** 2
    fit_k = stats.linregress(extra_score, extra_human)
    error[:3] = (error[:3] + (extra_human - fit_k.intercept - fit_k.slope * extra_score) ** 2) / 2.0
    relative = ACTIVE_FLOOR + (1.0 - ACTIVE_FLOOR) * u / u.mean()
    ratio = np.mean(error / relative) / np.mean(error)
    printed = re.search(r"residual variance ([0-9.]+) x", signal_check(items, pilot_errors(judge, pilot))[1]).group(1)
    assert float(printed) == pytest.approx(ratio, abs=0.005)
    only_c = pilot_errors(judge[judge["criterion"] == "c"], pilot[pilot["criterion"] == "c"])
    without = re.search(r"residual variance ([0-9.]+) x", signal_check(items, only_c)[1]).group(1)
    assert printed != without  # the three labels count


def test_an_active_plans_recorded_probabilities_are_the_floored_mixture_and_its_ties_go_by_id():
    """_active_plan: each drawn dialogue's inclusion_probability is its probability under the floored mixture
    written out (floor 1 - the uncertainty share), dialogues taken in id order; the targeted rest by priority, ties
    by id."""
    from calibration.study.designs import _active_plan

    rng = np.random.default_rng(4)
    ids = [f"d{i:02d}" for i in range(16)]
    items = pd.DataFrame({"item_id": ids[::-1], "uncertainty": rng.random(16), "discrimination": 0.0,
                          "priority": 0.5})
    for share in (0.4, 0.9):
        plan = _active_plan(items, 10, "dialogues", 0.5, 1, share)
        drawn = plan[plan["part"] == "random"]
        ordered = items.set_index("item_id").loc[ids, "uncertainty"].to_numpy()
        expected = dict(zip(ids, _mixture_capped(ordered, 5, 1.0 - share)))
        assert len(drawn) == 5
        for row in drawn.itertuples():
            assert row.inclusion_probability == pytest.approx(expected[row.item_id], rel=1e-12)
        targeted = plan.loc[plan["part"] == "targeted", "item_id"].tolist()
        assert targeted == sorted(set(ids) - set(drawn["item_id"]))[:5]


# -- screen()'s options and the plan's warnings, one row each ------------------------------------------------------

OPTION_ROWS = [
    # keyword, value, the message expected (None: accepted); with --budget 4 unless the keyword is budget
    ("budget", 0, "--budget must be a positive whole number, got 0"),
    ("budget", 1, None),
    ("budget", 1.5, "--budget must be a positive whole number, got 1.5"),
    ("budget", True, "--budget must be a positive whole number, got True"),
    ("budget", 4, None),
    ("random_share", 1.0, None),
    ("random_share", 0.0, None),
    ("random_share", 1.05, "--random-share must be between 0 and 1, got 1.05"),
    ("random_share_alone", 1.05, "--random-share must be between 0 and 1, got 1.05"),  # no --budget: no plan
    ("random_share", "0.5", "--random-share must be between 0 and 1, got '0.5'"),
    ("power", 0.99, None),
    ("power", 1.0, "--power must be between 0 and 1, got 1.0"),
    ("power", 1.05, "--power must be between 0 and 1, got 1.05"),
    ("power", 0.0, "--power must be between 0 and 1, got 0.0"),
    ("power", "0.8", "--power must be between 0 and 1, got '0.8'"),
]


@pytest.mark.parametrize("keyword, value, message", OPTION_ROWS)
def test_each_screen_option_is_checked_at_its_edges(keyword, value, message):
    from calibration.errors import CalibrationError
    from calibration.study.screen import screen

    judge = _three_systems(dialogues=12)
    before = judge.copy()
    options = {"budget": 4, "bootstrap": 50, keyword: value}
    if keyword == "budget" and value == 1:
        options["random_share"] = 1.0  # one dialogue, drawn at random
    if keyword == "random_share_alone":
        options = {"bootstrap": 50, "random_share": value}
    if message is None:
        assert screen(judge, **options).criteria == ["x", "y"]
    else:
        with pytest.raises(CalibrationError) as caught:
            screen(judge, **options)
        assert str(caught.value) == message
    pd.testing.assert_frame_equal(judge, before)


@pytest.mark.parametrize("n_random, share, expected", [
    (0, 0.0, "--random-share 0: the plan has no random part"),
    (0, 0.5, "refused"),
    (1, 0.5, "the plan's random part has 1 dialogue: "),
    (9, 0.5, "the plan's random part has 9 dialogues: "),
    (10, 0.5, None),
])
def test_a_plans_random_part_is_refused_empty_warned_small_and_accepted_from_ten(n_random, share, expected):
    """A random part left empty by rounding is refused, asked for empty warned about; below 10 dialogues (the
    documented count for intervals that decide something) warned about, in the singular for one; 10 is enough."""
    from calibration.errors import CalibrationError
    from calibration.study.designs import plan_warnings

    plan = pd.DataFrame({"item_id": [f"d{i}" for i in range(n_random + 3)],
                         "part": ["random"] * n_random + ["targeted"] * 3})
    if expected == "refused":
        with pytest.raises(CalibrationError, match="leaves no dialogue drawn at random"):
            plan_warnings(plan, 3, "dialogues", share)
        return
    said = plan_warnings(plan, n_random + 3, "dialogues", share)
    assert said == [] if expected is None else (len(said) == 1 and said[0].startswith(expected))
    if 0 < n_random < 10:
        assert "below about 10" in said[0]


def test_the_plan_records_its_own_digest_and_the_verdicts_level():
    """plan.json's plan_sha256 is the sha256 of the plan.csv written (hashlib); the power is computed at the
    documented 5% level."""
    import hashlib
    import json

    from calibration.study.screen import screen

    result = screen(_three_systems(dialogues=12), budget=4, bootstrap=50)
    files = result.files()
    assert json.loads(files["plan.json"])["plan_sha256"] == hashlib.sha256(files["plan.csv"].encode()).hexdigest()
    assert json.loads(files["plan.json"])["version"] == 1
    assert (result.power["alpha"] == 0.05).all() and "at the 5% level" in result.sentence


def test_screen_names_where_the_pilot_came_from_and_takes_more_judges_without_one():
    """More judges need no pilot for their disagreement (a sign of doubt); without labels they are no predictor, so
    the power analysis is the judgments' judge's alone, exactly as without them. A judge of another study is still
    refused."""
    from calibration.errors import CalibrationError
    from calibration.study.screen import screen

    judge = _three_systems(dialogues=12)
    labels = pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "annotator": "ann", "criterion": "x", "score": 3}
                           for i in range(4) for s in ("a", "b")])
    piloted = screen(judge, labels, scale=(1, 5), bootstrap=50)
    assert piloted.provenance["human"] == {"path": "(a DataFrame)", "sha256": None}
    alone = screen(judge, bootstrap=50)
    assert alone.provenance["human"] is None
    rng = np.random.default_rng(5)
    other = judge.assign(score=judge["score"] + rng.normal(0, 1.0, len(judge)))
    jury = screen(judge, judges={"other": other}, bootstrap=50)
    assert jury.items["mean_jury_disagreement"].notna().all() and alone.items["mean_jury_disagreement"].isna().all()
    assert (jury.items["uncertainty"] >= alone.items["uncertainty"] - 1e-12).all()
    pd.testing.assert_frame_equal(jury.power, alone.power)
    with pytest.raises(CalibrationError, match="--judge stranger: scores no dialogue and system of --judgments"):
        screen(judge, judges={"stranger": judge.assign(item_id="elsewhere-" + judge["item_id"])})


def test_only_an_active_design_says_how_its_signal_was_checked():
    """--design active: a warning and plan.json say how the signal was checked (unchecked without a pilot) and the
    share that follows it; a uniform plan says neither."""
    from calibration.study.screen import screen

    judge = _three_systems(dialogues=12).assign(spread=np.linspace(0.0, 1.0, 72))
    active = screen(judge, budget=4, bootstrap=50, design="active")
    said = [w for w in active.warnings if w.startswith("--design active: ")]
    assert said == ["--design active: unchecked (no --human pilot): a useless signal costs labels, and where the "
                    "labels bunch at one end of the scale the estimate prints no interval"]
    assert active.plan_info["design"] == "active" and active.plan_info["uncertainty_share"] == pytest.approx(0.4)
    assert active.plan_info["signal"].startswith("unchecked")
    uniform = screen(judge, budget=4, bootstrap=50)
    assert not any("--design active" in w for w in uniform.warnings)
    assert "design" not in uniform.plan_info and "signal" not in uniform.plan_info


def test_a_pilot_on_judgments_that_name_no_scale_needs_one_given():
    """The pilot's labels are checked against a scale: judgments without a rubric and no --scale are refused with
    what to give, and nothing of the inputs changes."""
    from calibration.errors import CalibrationError
    from calibration.study.screen import screen

    judge = _three_systems(dialogues=12)
    labels = pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "annotator": "ann", "criterion": "x", "score": 3}
                           for i in range(4) for s in ("a", "b")])
    before = labels.copy()
    with pytest.raises(CalibrationError, match=r"the judgments name no rubric, so the human scores' scale is unknown: "
                                               r"give --scale MIN,MAX"):
        screen(judge, labels, bootstrap=50)
    pd.testing.assert_frame_equal(labels, before)


def test_the_power_tables_counts_are_whole_numbers_or_empty_in_power_csv():
    """dialogues_human_only and dialogues_with_judge are counts (pandas Int64): power.csv writes 274, not 274.0, and
    an empty cell where no study size reaches the power."""
    import io

    from calibration.study.screen import screen

    judge, labels = _power_data()
    result = screen(judge, labels.rename(columns={"human": "score"}).assign(annotator="ann"), scale=(0, 7),
                    bootstrap=50)
    assert str(result.power["dialogues_human_only"].dtype) == "Int64"
    assert str(result.power["dialogues_with_judge"].dtype) == "Int64"
    text = result.files()["power.csv"]
    back = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    for column in ("dialogues_human_only", "dialogues_with_judge"):
        assert all(v == "" or v.isdigit() for v in back[column]), (column, back[column].tolist())
    assert any(v.isdigit() for v in back["dialogues_human_only"])


def test_the_jurys_differences_turn_round_with_the_pair():
    """jury_differences(first, second) is the cross-fitted jury's first minus second on each judged dialogue: the
    pair turned round gives its negative, and a system against itself nothing."""
    from calibration.study.power_table import jury_differences

    judge, labels = _power_data()
    judge, labels = judge[judge["criterion"] == "x"], labels[labels["criterion"] == "x"]
    rng = np.random.default_rng(2)
    other = judge.assign(score=judge["score"] + rng.normal(0, 0.4, len(judge)), system_1=None)
    judge = judge.assign(system_1=None)
    wide = labels[labels["item_id"] < "d15"].pivot(index="item_id", columns="system", values="human")
    ab = jury_differences(judge, wide, "x", {"other": other}, "a", "b")
    ba = jury_differences(judge, wide, "x", {"other": other}, "b", "a")
    assert np.isfinite(ab).sum() >= 20 and np.nanstd(ab) > 0
    np.testing.assert_allclose(ab, -ba)
    assert np.nanmax(np.abs(jury_differences(judge, wide, "x", {"other": other}, "a", "a"))) == 0.0
    # ... and it is the jury of the paired differences (fitted on each summary's departure from its dialogue's
    # mean, as estimate.py's differences use it), not the jury of the levels
    from calibration.study.matrices import StudyMatrices, judge_matrices, predictor_features
    from calibration.study.predictor import cross_fitted_prediction

    items, names, scores, judged = judge_matrices(judge, "x")
    human = wide.reindex(index=items, columns=names).to_numpy(float)
    human = np.where(np.isnan(scores), np.nan, human)
    features = predictor_features(StudyMatrices("x", items, names, scores, human, judged), {"other": other})
    a, b = list(names).index("a"), list(names).index("b")
    for contrasts in (True, False):
        fitted = cross_fitted_prediction(features, human, ~np.isnan(scores), contrasts=contrasts)
        same = np.allclose(ab, fitted[:, a] - fitted[:, b], equal_nan=True)
        assert same == contrasts
