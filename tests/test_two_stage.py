"""Two-stage studies (`judge screen --pilot-plan`): the pilot is a plan's uniform random part, the second stage is
drawn among the other dialogues on what the pilot showed, and `judge estimate --plan` counts both stages' labels.

Checked: the weights against the composite estimator written out; unbiasedness and coverage by plant-and-recover,
with a second stage chosen on the pilot's own labels (the case a naive union of the two samples gets wrong); bad
input table-driven (each refusal names what is wrong and leaves every file as it was); and end to end on the
example study, down to the sheets `judge export --plan` writes."""

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import calibration
from calibration.errors import CalibrationError
from calibration.study.designs import inclusion_probabilities, systematic_sample
from calibration.study.estimate import plan_first_stage, plan_inclusion
from calibration.study.ppi import MIN_LABELLED, effective_labels
from calibration.study.ppi_weighted import ppi_mean_weighted, two_stage_inclusion
from calibration.study.screen import print_screen
from judge.annotation.plan import plan_to_label as export_plan
from judge.annotation.plan import read_plan

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the weights ----------------------------------------------------------------------------------------------------


def test_the_weighted_mean_is_the_composite_of_the_two_stages_written_out():
    """Hajek with two_stage_inclusion's weights = (w T1 + (1 - w) T2) / (w N + (1 - w) (m1 + sum 1/q)), T1 = N x
    the first stage's mean, T2 = the first stage's sum + the second's sum of y / q, w = m1 / (m1 + m2)."""
    rng = np.random.default_rng(7)
    big_n, m1, m2 = 60, 8, 12
    y = rng.normal(3.0, 1.0, big_n)
    first = np.zeros(big_n, dtype=bool)
    first[rng.choice(big_n, m1, replace=False)] = True
    rest = np.flatnonzero(~first)
    q = inclusion_probabilities(rng.random(len(rest)), m2)
    second = rest[systematic_sample(q, rng)]
    q_of = dict(zip(rest, q))
    drawn = np.r_[np.flatnonzero(first), second]
    stage_one = first[drawn]
    probability = np.where(stage_one, m1 / big_n, [q_of.get(i, np.nan) for i in drawn])
    inclusion = np.full(big_n, np.nan)
    inclusion[drawn] = two_stage_inclusion(stage_one, probability, big_n)
    labels = np.full(big_n, np.nan)
    labels[drawn] = y[drawn]
    got = ppi_mean_weighted(labels, np.zeros(big_n) + rng.random(big_n), inclusion).human_only

    w = m1 * (big_n - m1 - m2) / ((big_n - m1) * (m1 + m2))
    total = y[first].sum() + w * (big_n - m1) * y[first].mean() + (1 - w) * sum(y[i] / q_of[i] for i in second)
    denominator = m1 + w * (big_n - m1) + (1 - w) * sum(1 / q_of[i] for i in second)
    assert got == pytest.approx(total / denominator, rel=1e-12)


@pytest.mark.parametrize("big_n,m1,m2", [(100, 20, 20), (100, 30, 30), (500, 10, 10), (60, 8, 52), (40, 5, 11)])
def test_a_uniform_second_stage_weighs_every_label_alike(big_n, m1, m2):
    """q = m2 / (N - m1) everywhere: the two stages are one simple random sample of m1 + m2, every weight equal
    (w = m1 (N - m1 - m2) / ((N - m1)(m1 + m2)), not m1 / (m1 + m2), whose first-stage labels weighed (N + m2) /
    (N - m1) times the others')."""
    first = np.r_[np.ones(m1, bool), np.zeros(m2, bool)]
    probability = np.where(first, m1 / big_n, m2 / (big_n - m1))
    assert two_stage_inclusion(first, probability, big_n) == pytest.approx(np.ones(m1 + m2), rel=1e-12)


def test_one_stage_alone_is_a_simple_random_sample_or_the_draws_own_probabilities():
    assert np.all(two_stage_inclusion([True, True, True], [0.1, 0.1, 0.1], 30) == 1.0)
    got = two_stage_inclusion([False, False], [0.2, 0.4], 30)
    assert got == pytest.approx([0.5, 1.0])
    # One second-stage dialogue is a second stage: weights 1 + w (N - m1) / m1 and (1 - w) / q.
    w = 2 * (30 - 3) / ((30 - 2) * 3)
    weights = np.array([1 + w * 28 / 2, 1 + w * 28 / 2, (1 - w) / 0.3])
    assert two_stage_inclusion([True, True, False], [2 / 30, 2 / 30, 0.3], 30) == pytest.approx(
        weights.min() / weights)


# -- plant and recover ----------------------------------------------------------------------------------------------


def studies(reps: int, seed: int, rule: str):
    """`reps` two-stage studies of one system: N = 120 dialogues, the judge good on most (error sd 0.25) and bad
    on 15% (sd 1.5), its doubt high there; first stage 15 uniform, second 15 among the others, drawn actively or
    uniformly as `rule` decides on the first stage: "signal" (the doubt of the worst-judged pilot dialogues is
    high, as screen's check asks) or "level" (active when the pilot's mean label is under the population's: a
    rule that reads the labels' level, which a union of the two samples treated as one draw would turn into bias)."""
    rng = np.random.default_rng(seed)
    big_n, m1, m2 = 120, 15, 15
    hard = rng.random((reps, big_n)) < 0.15
    y = rng.normal(3.0, 1.0, (reps, big_n)) - 1.0 * hard  # the judge's hard dialogues are the weaker summaries
    f = y + np.where(hard, 1.5, 0.25) * rng.standard_normal((reps, big_n))
    doubt = np.where(hard, 0.9, 0.1) + 0.1 * rng.random((reps, big_n))
    labels, inclusion, first_mask = (np.full((reps, big_n), np.nan), np.ones((reps, big_n)),
                                     np.zeros((reps, big_n), dtype=bool))
    active = 0
    for r in range(reps):
        first = rng.choice(big_n, m1, replace=False)
        rest = np.setdiff1d(np.arange(big_n), first)
        if rule == "signal":
            go = np.corrcoef(doubt[r, first], np.abs(y[r, first] - f[r, first]))[0, 1] > 0.3
        else:
            go = y[r, first].mean() < 2.85
        active += go
        q = inclusion_probabilities(doubt[r, rest], m2, floor=0.6 if go else 1.0)
        second = rest[systematic_sample(q, rng)]
        drawn = np.r_[first, second]
        stage_one = np.r_[np.ones(m1, bool), np.zeros(m2, bool)]
        probability = np.r_[np.full(m1, m1 / big_n), q[np.searchsorted(rest, second)]]
        labels[r, drawn] = y[r, drawn]
        inclusion[r, drawn] = two_stage_inclusion(stage_one, probability, big_n)
        first_mask[r, first] = True
    return y, f, labels, inclusion, first_mask, active / reps


@pytest.mark.parametrize("rule", ["signal", "level"])
def test_two_stage_estimates_are_unbiased_and_cover_whatever_the_pilot_decided(rule):
    """The finite population's mean is the truth (the design is the only randomness that matters: 2,000 studies,
    each its own population). Bias within 3 Monte Carlo se, coverage of the PPI interval >= 0.93."""
    y, f, labels, inclusion, _, share = studies(2000, 11 if rule == "signal" else 12, rule)
    result = ppi_mean_weighted(labels, f, inclusion)
    truth = y.mean(-1)
    error = result.estimate - truth
    assert 0.2 < share < 0.9  # both branches taken often
    assert abs(error.mean()) < 3 * error.std() / np.sqrt(len(error))
    covered = (result.ci_low <= truth) & (truth <= result.ci_high)
    assert covered.mean() >= 0.93
    # The human-only (Hajek) mean is unbiased too; the union of the stages read as one uniform draw is not: the
    # active second stage drew the (weaker) hard dialogues more often.
    assert abs((result.human_only - truth).mean()) < 3 * (result.human_only - truth).std() / np.sqrt(len(truth))
    naive = np.nanmean(labels, -1) - truth
    assert naive.mean() < -5 * naive.std() / np.sqrt(len(truth))


def test_bunched_rows_take_the_first_stages_betting_interval():
    """A row whose labels sit at the top of the scale (rare failures): the weighted estimator's interval is
    replaced by the betting interval of the first stage's labels alone, its mean the estimate; with fewer than
    MIN_LABELLED first-stage labels, none."""
    rng = np.random.default_rng(3)
    big_n = 80
    y = np.where(rng.random((2, big_n)) < 0.04, 1.0, np.where(rng.random((2, big_n)) < 0.3, 4.67, 5.0))
    y[:, :12] = np.where(np.arange(12) % 3 == 0, 4.67, 5.0)  # the labelled ones: at the top, no failure drawn
    f = y + 0.1 * rng.standard_normal((2, big_n))
    labels = np.full((2, big_n), np.nan)
    labels[:, :12] = y[:, :12]
    # A third row spread over the scale: never tripped, kept as the weighted estimator has it.
    y = np.vstack([y, np.where(rng.random(big_n) < 0.5, 2.0, 4.0)])
    f = np.vstack([f, y[2] + 0.5 * rng.standard_normal(big_n)])
    labels = np.vstack([labels, np.where(np.arange(big_n) < 12, y[2], np.nan)])
    first = np.zeros((3, big_n), dtype=bool)
    first[0, :MIN_LABELLED] = True  # exactly as few first-stage labels as an interval needs
    first[1, :MIN_LABELLED - 1] = True
    first[2, :6] = True
    inclusion = np.ones((3, big_n))
    inclusion[:, 6:12] = 0.5  # the second stage drawn with unequal probabilities
    result = ppi_mean_weighted(labels, f, inclusion, bounds=(1, 5), first=first)
    plain = ppi_mean_weighted(labels, f, inclusion, bounds=(1, 5))
    assert list(result.no_interval) == ["first stage", "unseen", ""]
    assert result.estimate[0] == pytest.approx(labels[0, :MIN_LABELLED].mean())
    assert result.ci_low[0] < 5.0 <= result.ci_high[0] and result.ci_low[0] > 1.0
    assert np.isnan(result.ci_low[1])
    assert result.lam[0] == 0.0 and result.lam[2] == plain.lam[2]
    # What the first stage's interval is worth: its own labels, no more; the untouched row as before.
    worth = effective_labels(result)
    assert worth[0] == pytest.approx(MIN_LABELLED)
    assert worth[2] == pytest.approx(effective_labels(plain)[2])
    assert (result.ci_low[2], result.ci_high[2]) == (plain.ci_low[2], plain.ci_high[2])


# -- bad input ------------------------------------------------------------------------------------------------------


def first_plan(tmp_path: Path, **changes) -> Path:
    """A copy of the example study's uniform plan, plan.csv optionally changed (and plan.json's digest with it
    unless `stale`)."""
    directory = tmp_path / "first"
    shutil.copytree(STUDY / "plan", directory)
    frame = pd.read_csv(directory / "plan.csv", dtype=str, keep_default_na=False)
    stale = changes.pop("stale", False)
    for column, values in changes.items():
        frame[column] = values
    if changes or stale:
        frame.to_csv(directory / "plan.csv", index=False)
        if not stale:
            info = json.loads((directory / "plan.json").read_text())
            info["plan_sha256"] = digest(directory / "plan.csv")
            (directory / "plan.json").write_text(json.dumps(info))
    return directory


def other_judgments(tmp_path: Path) -> Path:
    path = tmp_path / "judgments.jsonl"
    path.write_text((STUDY / "judgments.jsonl").read_text() + "\n")
    shutil.copy(STUDY / "toy.yaml", tmp_path / "toy.yaml")  # the rubric beside them, as the example has it
    return path


def labels_outside(tmp_path: Path) -> Path:
    frame = pd.read_csv(STUDY / "labels.csv")
    extra = frame[frame["item_id"] == "d12"].assign(item_id="d04")
    path = tmp_path / "labels.csv"
    pd.concat([frame, extra]).to_csv(path, index=False)
    return path


PROBABILITIES = ["0.5"] * 3 + ["0.25"] * 3 + [""] * 4

BAD = [
    ("not active", {"design": "uniform"}, None, "--pilot-plan plans an active second stage after the pilot's "
                                                "uniform first: give --design active"),
    ("no labels", {"human": None}, None, "give --human"),
    ("no budget", {"budget": None}, None, "give --budget"),
    ("budget in judgments", {"budget_unit": "judgments"}, None, "give --budget-unit dialogues"),
    ("no such plan", {"pilot_plan": "missing"}, None, "plan.csv: no such file"),
    ("an active first plan", {}, {"inclusion_probability": PROBABILITIES}, "drawn with unequal inclusion "
                                                                           "probabilities (an active plan)"),
    ("a second stage as first", {}, {"inclusion_probability": ["0.375"] * 6 + [""] * 4, "stage": ["1"] * 10},
     "already a two-stage plan"),
    ("an edited first plan", {}, {"reason": ["edited"] * 10, "stale": True}, "differs from the plan `judge "
                                                                               "screen` wrote"),
    ("other judgments", {"judgments": "other"}, None, "not the judgments the plan was made from (examples/study/"
                                                      "judgments.jsonl, sha256 a97cc0b54f59...): the plan's random "
                                                      "sample was drawn from those; both stages must draw from the "
                                                      "same dialogues"),
    ("labels outside the first plan", {"human": "outside"}, None, "labelled dialogue(s) are not in the "
                                                                   "--pilot-plan, e.g. 'd04'"),
    ("budget beyond what is left", {"budget": 11}, None, "--budget 11 dialogues is more than the first stage left: "
                                                         "10 of 16 dialogues"),
]


@pytest.mark.parametrize("name,options,plan_changes,message", BAD, ids=[row[0] for row in BAD])
def test_bad_two_stage_input_is_refused_with_what_is_wrong_and_nothing_touched(tmp_path, name, options,
                                                                                plan_changes, message):
    directory = first_plan(tmp_path, **(plan_changes or {}))
    before = {p.name: digest(p) for p in directory.iterdir()}
    kwargs = {"judgments": STUDY / "judgments.jsonl", "human": STUDY / "labels.csv", "design": "active",
              "budget": 4, "bootstrap": 50, "pilot_plan": directory}
    kwargs.update(options)
    if kwargs["pilot_plan"] == "missing":
        kwargs["pilot_plan"] = tmp_path / "nowhere"
    if kwargs["judgments"] == "other":
        kwargs["judgments"] = other_judgments(tmp_path)
    if kwargs["human"] == "outside":
        kwargs["human"] = labels_outside(tmp_path)
    with pytest.raises(CalibrationError) as caught:
        calibration.screen(kwargs.pop("judgments"), kwargs.pop("human"), **kwargs)
    assert message in str(caught.value)
    assert {p.name: digest(p) for p in directory.iterdir()} == before  # the first plan untouched


@pytest.mark.parametrize("column,values,message", [
    ("stage", ["1"] * 6 + ["3"] * 4, "plan.csv:8: stage must be 1 or 2, got '3'"),
    ("stage", ["1"] * 10, "plan.csv:1: a stage column without inclusion_probability"),
])
def test_a_two_stage_plan_csv_with_a_bad_stage_column_is_refused_with_its_line(tmp_path, column, values, message):
    directory = first_plan(tmp_path, **{column: values})
    with pytest.raises(CalibrationError) as caught:
        read_plan(directory, CalibrationError)
    assert message in str(caught.value)


@pytest.mark.parametrize("stages", [None, {}, {"judged": "16"}, {"judged": True}, {"judged": 5}])
def test_a_two_stage_plan_without_its_judged_count_is_refused(tmp_path, stages):
    """plan.csv with a stage column needs plan.json's stages.judged (N, at least the random rows) to weigh them."""
    directory = first_plan(tmp_path, inclusion_probability=["0.375"] * 6 + [""] * 4, stage=["1"] * 10)
    info = json.loads((directory / "plan.json").read_text())
    if stages is not None:
        info["stages"] = stages
    (directory / "plan.json").write_text(json.dumps(info))
    with pytest.raises(CalibrationError) as caught:
        plan_inclusion(directory)
    assert "plan.json: plan.csv has two stages but plan.json records no number of judged dialogues" in \
        str(caught.value)
    for judged in (16, 6):  # 6: every judged dialogue drawn at random, as many as the plan's random rows
        info["stages"] = {"judged": judged}
        (directory / "plan.json").write_text(json.dumps(info))
        assert plan_inclusion(directory) is None  # one stage of equal probabilities: a simple random sample


def test_a_first_plan_that_records_equal_probabilities_and_a_budget_of_all_that_is_left_are_accepted(tmp_path):
    """A uniform plan may record its probabilities (all equal, as `judge escalate` writes them); a second stage may
    take every dialogue the first left."""
    directory = first_plan(tmp_path, inclusion_probability=["0.375"] * 6 + [""] * 4)
    result = calibration.screen(STUDY / "judgments.jsonl", STUDY / "labels.csv", design="active", budget=10,
                                random_share=1.0, bootstrap=50, pilot_plan=directory)
    second = result.plan[(result.plan["stage"] == 2) & (result.plan["part"] == "random")]
    assert len(second) == 10 and (second["inclusion_probability"] == 1.0).all()
    assert "second stage needs" not in result.sentence  # no count reaches the power here: none is listed
    printed = io.StringIO()
    print_screen(result, printed)
    assert ("the first stage's 6 dialogues (the --pilot-plan's random part) and 10 dialogues drawn uniformly at "
            "random (the active design fell back") in " ".join(printed.getvalue().split())  # prose folded at 120


# -- end to end -----------------------------------------------------------------------------------------------------


def test_a_pilot_plan_then_estimate_counts_both_stages_and_export_skips_what_is_labelled(tmp_path):
    """The example study's uniform plan (6 random, 4 targeted, all labelled in labels.csv) as the first stage: the
    second plan keeps its random part as stage 1 at probability 6/16, draws 4 more among the other 10, and
    `judge estimate --plan` weighs the labels as two_stage_inclusion says (checked on a row's human-only mean,
    written out); `judge export --plan` reads only the dialogues not labelled yet."""
    result = calibration.screen(STUDY / "judgments.jsonl", STUDY / "labels.csv", design="active", budget=4,
                                random_share=1.0, bootstrap=50, pilot_plan=STUDY / "plan", seed=2)
    out = tmp_path / "second"
    result.write(out)
    plan, info = read_plan(out)
    first = plan[plan["stage"] == "1"]
    assert sorted(first.loc[first["part"] == "random", "item_id"]) == ["d02", "d03", "d10", "d12", "d13", "d16"]
    assert (first.loc[first["part"] == "random", "inclusion_probability"].astype(float) == 6 / 16).all()
    second = plan[(plan["stage"] == "2") & (plan["part"] == "random")]
    assert len(second) == 4 and not set(second["item_id"]) & set(first["item_id"][first["part"] == "random"])
    probabilities = second["inclusion_probability"].astype(float)
    assert ((probabilities > 0) & (probabilities <= 1)).all()
    assert info["stages"] == {"first_plan": str(STUDY / "plan"),
                              "first_plan_sha256": digest(STUDY / "plan" / "plan.csv"),
                              "judged": 16, "first": 6, "second": 4,
                              "labelled": ["d01", "d02", "d03", "d05", "d09", "d10", "d12", "d13", "d14", "d16"]}
    assert plan_first_stage(out) == set(first.loc[first["part"] == "random", "item_id"])
    exported = export_plan(out)
    assert not set(exported) & set(info["stages"]["labelled"]) and set(second["item_id"]) - set(
        info["stages"]["labelled"]) <= set(exported)

    # Labels: the example's (stage 1 and its targeted part) plus made-up ones on the new second-stage dialogues.
    labels = pd.read_csv(STUDY / "labels.csv")
    new = [i for i in second["item_id"] if i not in set(labels["item_id"])]
    template = labels[labels["item_id"] == "d12"]
    rows = [template.assign(item_id=item, score=(template["score"] + k) % 5 + 1) for k, item in enumerate(new)]
    path = tmp_path / "labels.csv"
    pd.concat([labels, *rows]).to_csv(path, index=False)
    estimate = calibration.estimate(STUDY / "judgments.jsonl", path, plan=out)
    # This pilot's doubt does not mark the judge's errors: the second stage is uniform, every weight equal, and the
    # two stages are estimated exactly as a one-stage uniform plan with the same random part.
    assert result.plan_info["uncertainty_share"] == 0.0 and plan_inclusion(out) is None
    assert any("second stage was drawn uniformly" in note for note in estimate.notes)
    flat = tmp_path / "flat"
    flat.mkdir()
    plan.drop(columns=["inclusion_probability", "stage"]).to_csv(flat / "plan.csv", index=False)
    (flat / "plan.json").write_text(json.dumps({**{k: v for k, v in info.items() if k != "stages"},
                                                "plan_sha256": digest(flat / "plan.csv")}))
    one = calibration.estimate(STUDY / "judgments.jsonl", path, plan=flat)
    pd.testing.assert_frame_equal(estimate.estimates, one.estimates)
    pd.testing.assert_frame_equal(estimate.differences, one.differences)


def test_an_active_second_stage_is_estimated_with_the_two_stage_weights(tmp_path):
    """A pilot whose doubt marks the judge's errors (test_screen_strata's study, the first stage its dialogues
    0-13): the second stage is drawn with unequal probabilities and `judge estimate --plan` weighs each labelled
    dialogue as two_stage_inclusion says: a human-only mean written out from plan.csv's numbers."""
    from test_screen_strata import _study

    judge, pilot = _study()
    first = tmp_path / "first"
    first.mkdir()
    drawn = [f"d{i:02d}" for i in range(14)]
    pd.DataFrame({"item_id": drawn, "part": "random", "reason": "uniform"}).to_csv(first / "plan.csv", index=False)
    (first / "plan.json").write_text(json.dumps({"version": 1, "unit": "dialogues", "budget": 14}))
    stage_one = pilot[pilot["item_id"].isin(drawn)]
    result = calibration.screen(judge, stage_one, scale=(1, 5), budget=12, random_share=1.0, bootstrap=50,
                                design="active", pilot_plan=first, seed=5)
    assert result.plan_info["uncertainty_share"] > 0.0
    out = tmp_path / "second"
    result.write(out)
    plan, info = read_plan(out)
    second = plan[plan["stage"] == "2"]
    made_up = judge[judge["item_id"].isin(set(second["item_id"]))].assign(annotator="ann", score=lambda f: (
        f["score"].round().clip(1, 5)))[["item_id", "system", "annotator", "criterion", "score"]]
    labels = pd.concat([stage_one, made_up], ignore_index=True)
    estimate = calibration.estimate(judge, labels, plan=out, scale=(1, 5))
    assert any("a two-stage plan: the first stage's 14" in note for note in estimate.notes)

    weights = plan_inclusion(out)
    probability = plan.loc[plan["part"] == "random"].set_index("item_id")["inclusion_probability"].astype(float)
    m1, m2, big_n = 14, 12, 40
    share = m1 * (big_n - m1 - m2) / ((big_n - m1) * (m1 + m2))
    weight = {i: (1 + share * (big_n - m1) / m1) if i in drawn else (1 - share) / p for i, p in probability.items()}
    assert info["stages"]["judged"] == big_n and len(weights) == m1 + m2
    for item, value in weights.items():  # inverse weights, scaled: their ratios are the plan's
        assert value / weights["d00"] == pytest.approx(weight["d00"] / weight[item], rel=1e-9)
    rows = estimate.estimates.query("interval_note == ''")
    assert len(rows)
    for row in rows.itertuples():
        cell = labels[(labels["criterion"] == row.criterion) & (labels["system"] == row.system)]
        w = cell["item_id"].map(weight)
        assert row.human_only == pytest.approx(float((w * cell["score"]).sum() / w.sum()))


def test_a_two_stage_plan_stays_active_where_the_pilots_labels_bunch(tmp_path):
    """A one-stage active plan falls back to uniform where the pilot's labels bunch (test_screen_strata): the
    estimate would withhold those rows' intervals. A two-stage plan's bunched rows take the first stage's own
    interval whichever way the second stage is drawn, so it keeps the active draw the signal check allows."""
    from test_screen_strata import _study

    judge, pilot = _study()
    top = (pilot["system"] == "b") & (pilot["criterion"] == "fluency")
    bunched = pilot.assign(score=pilot["score"].where(~top, 5))
    first = tmp_path / "first"
    first.mkdir()
    drawn = [f"d{i:02d}" for i in range(14)]  # the first stage leaves two of the judge's bad dialogues
    pd.DataFrame({"item_id": drawn, "part": "random", "reason": "uniform"}).to_csv(first / "plan.csv", index=False)
    (first / "plan.json").write_text(json.dumps({"version": 1, "unit": "dialogues", "budget": 20}))
    one = calibration.screen(judge, bunched, scale=(1, 5), budget=20, random_share=1.0, bootstrap=50,
                             design="active")
    two = calibration.screen(judge, bunched[bunched["item_id"].isin(drawn)], scale=(1, 5), budget=10,
                             random_share=1.0, bootstrap=50, design="active", pilot_plan=first)
    assert one.plan_info["uncertainty_share"] == 0.0
    assert two.plan_info["uncertainty_share"] > 0.0
    second = two.plan[two.plan["stage"] == 2]["inclusion_probability"].astype(float)
    assert second.nunique() > 1  # drawn with unequal probabilities
    assert not any("bunch" in w for w in two.warnings)
    thrown = [w for w in one.warnings if w.startswith("--human: the pilot's 20 dialogues check the draw")]
    assert len(thrown) == 1 and "give its folder as --pilot-plan" in thrown[0]
    assert not any(w.startswith("--human: the pilot's") for w in two.warnings)
    assert "dialogues_second_stage" in two.power and "dialogues_second_stage" not in one.power


@pytest.mark.parametrize("uniform,active,first", [(40, 20, 10), (40, 40, 10), (40, 30, 25), (12, 8, 20),
                                                  (100, 70, 20), (7, 5, 3)])
def test_the_second_stage_needs_the_fewest_dialogues_whose_two_stage_variance_reaches_the_uniform_counts(
        uniform, active, first):
    """second_stage_count against a search: the smallest m2 with (m1 + m2 d) / (m1 + m2)^2 <= 1 / n, d = active /
    n (the two-stage weights' variance in units of one label's)."""
    from types import SimpleNamespace

    from calibration.study.power_table import second_stage_count

    row = SimpleNamespace(dialogues_with_judge=uniform, dialogues_human_only=uniform + 5, dialogues_active=active)
    d = active / uniform
    expected = next(m2 for m2 in range(0, 10 * uniform) if (first + m2 * d) / (first + m2) ** 2 <= 1 / uniform + 1e-12)
    assert second_stage_count(row, first) == expected
    assert second_stage_count(SimpleNamespace(dialogues_with_judge=pd.NA, dialogues_human_only=uniform,
                                              dialogues_active=pd.NA), first) is None
