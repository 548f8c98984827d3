"""`judge screen --design active --human PILOT`: the draw follows the judge's doubt weighted by its error per system
and criterion on the pilot (stratified allocation), checked against computations written out, end to end, and for
the permutation check's level when the doubt says nothing."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.study.designs import (
    STRATUM_PRIOR,
    inclusion_probabilities,
    pilot_errors,
    relative_probabilities,
    stratified_uncertainty,
    stratum_weights,
)
from calibration.study.screen import screen
from calibration.study.uncertainty import judgment_uncertainty

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_stratum_weights_are_each_cells_shrunk_mean_squared_error_over_their_mean():
    """Written out cell by cell: (sum of squared errors + STRATUM_PRIOR x its criterion's mean) / (count +
    STRATUM_PRIOR), over the mean of the cells."""
    rng = np.random.default_rng(4)
    rows = [(f"d{i}", system, criterion, rng.exponential(scale))
            for i in range(7) for system in ("a", "b") for criterion, scale in (("x", 0.2), ("y", 2.0))
            if not (system == "b" and criterion == "y" and i > 2)]  # one cell with fewer labels than the others
    errors = pd.DataFrame(rows, columns=["item_id", "system", "criterion", "e"]).set_index(
        ["item_id", "system", "criterion"])["e"]
    got = stratum_weights(errors)
    expected = {}
    for system in ("a", "b"):
        for criterion in ("x", "y"):
            own = [e for _, s, c, e in rows if s == system and c == criterion]
            prior = np.mean([e for _, _, c, e in rows if c == criterion])
            expected[(system, criterion)] = (sum(own) + STRATUM_PRIOR * prior) / (len(own) + STRATUM_PRIOR)
    mean = np.mean(list(expected.values()))
    assert STRATUM_PRIOR == 5  # the documented count
    for cell, value in expected.items():
        assert got[cell] == pytest.approx(value / mean)
    assert got[("a", "y")] > 3 * got[("a", "x")]  # the judge errs on y: its doubt there weighs more


@pytest.mark.parametrize("errors", [pd.Series(dtype=float), pd.Series([0.0, 0.0], index=pd.MultiIndex.from_tuples(
    [("d0", "a", "x"), ("d1", "a", "x")], names=["item_id", "system", "criterion"]))])
def test_no_error_to_share_out_gives_no_weights_and_the_items_unchanged(errors):
    items = pd.DataFrame({"item_id": ["d0", "d1"], "uncertainty": [0.3, 0.7]})
    assert stratum_weights(errors).empty
    assert stratified_uncertainty(items, pd.DataFrame(), stratum_weights(errors)) is items


def test_the_dialogues_uncertainty_is_the_mean_of_its_judgments_doubt_times_their_strata_weight():
    """A stratum the pilot labelled: its weight; a system it did not label: its criterion's mean weight; a criterion
    it did not label: 1."""
    judge = pd.DataFrame({
        "item_id": ["d0", "d0", "d0", "d1", "d1", "d1"],
        "system": ["a", "c", "a", "a", "c", "a"],
        "criterion": ["x", "x", "z", "x", "x", "z"],
        "score": [3.0, 2.0, 4.0, 1.0, 5.0, 2.0], "status": "ok", "spread": [0.8, 0.4, 1.2, 0.0, 2.0, 0.4]})
    weights = pd.Series([0.5, 1.5], index=pd.MultiIndex.from_tuples([("a", "x"), ("b", "x")],
                                                                    names=["system", "criterion"]))
    items = pd.DataFrame({"item_id": ["d0", "d1"], "uncertainty": [9.0, 9.0], "priority": [1.0, 2.0]})
    got = stratified_uncertainty(items, judgment_uncertainty(judge), weights)
    doubt = judgment_uncertainty(judge)["uncertainty"].to_numpy()  # the spreads over half each criterion's range
    weight = np.array([0.5, 1.0, 1.0, 0.5, 1.0, 1.0])  # (a, x) its own; (c, x) x's mean 1.0; z unlabelled: 1
    expected = [np.mean(doubt[:3] * weight[:3]), np.mean(doubt[3:] * weight[3:])]
    assert got["uncertainty"].tolist() == pytest.approx(expected)
    assert got["priority"].tolist() == [1.0, 2.0] and items["uncertainty"].tolist() == [9.0, 9.0]


def _study(size=40, seed=0):
    """Two systems, two criteria on `size` dialogues: the judge is exact on fluency and wrong by 3 points on
    consistency's dialogues 8-15; it is unsure (spread 1) on fluency's dialogues 0-7 (where it is right anyway) and on
    consistency's 8-15 (where it errs). The pilot: humans on dialogues 0-19."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for i in range(size):
        for system in ("a", "b"):
            for criterion in ("fluency", "consistency"):
                human = int(rng.integers(1, 6))
                wrong = criterion == "consistency" and 8 <= i < 16
                score = float(6 - human if wrong and human != 3 else (1 if wrong else human))
                unsure = (criterion == "fluency" and i < 8) or wrong
                rows.append((f"d{i:02d}", system, criterion, score, "ok", 4.0 if unsure else 0.0))
                if i < 20:
                    labels.append((f"d{i:02d}", system, "ann", criterion, human))
    judge = pd.DataFrame(rows, columns=["item_id", "system", "criterion", "score", "status", "spread"])
    pilot = pd.DataFrame(labels, columns=["item_id", "system", "annotator", "criterion", "score"])
    return judge, pilot


def test_a_pilot_weights_the_draw_toward_the_doubt_where_the_judge_errs():
    """End to end: plan.json's strata give consistency more weight than fluency, the warning says so, and every
    drawn dialogue's inclusion probability is the weighted doubt's (consistency's doubtful dialogues 8-15 above
    fluency's 0-7, which the unweighted mean gives the same doubt)."""
    judge, pilot = _study()
    result = screen(judge, pilot, scale=(1, 5), budget=20, random_share=1.0, bootstrap=50, design="active")
    strata = {(s["system"], s["criterion"]): s["weight"] for s in result.plan_info["strata"]}
    assert set(strata) == {(s, c) for s in ("a", "b") for c in ("fluency", "consistency")}
    assert min(strata[(s, "consistency")] for s in "ab") > 5 * max(strata[(s, "fluency")] for s in "ab")
    said = [w for w in result.warnings if w.startswith("--design active: ")]
    assert len(said) == 1 and "the uncertainty weighted by the judge's error per system and criterion on the pilot" \
        in said[0] and "checked on 20 pilot dialogues" in said[0]
    items = result.items
    weighted = stratified_uncertainty(items, judgment_uncertainty(judge), stratum_weights(pilot_errors(
        judge, pilot.rename(columns={"score": "human"}))))
    relative = relative_probabilities(weighted, result.plan_info["uncertainty_share"])
    assert relative[[f"d{i:02d}" for i in range(8, 16)]].min() > 2 * relative[[f"d{i:02d}" for i in range(8)]].max()
    plain = relative_probabilities(items, result.plan_info["uncertainty_share"])
    assert plain[[f"d{i:02d}" for i in range(8, 16)]].to_numpy() == pytest.approx(
        plain[[f"d{i:02d}" for i in range(8)]].to_numpy())  # unweighted, both groups look alike
    pi = pd.Series(inclusion_probabilities(weighted["uncertainty"], 20, 1.0 - result.plan_info["uncertainty_share"]),
                   index=weighted["item_id"])
    drawn = result.plan.set_index("item_id")["inclusion_probability"]
    assert drawn.to_numpy() == pytest.approx(pi[drawn.index].to_numpy())
    assert pi["d08"] > pi["d00"]


def test_without_a_pilot_or_a_uniform_design_there_are_no_strata():
    """No pilot: nothing to weigh by; a uniform design: nothing drawn on doubt; a check that fell back to uniform
    records the weights in plan.json but the warning does not claim a weighted draw."""
    judge, pilot = _study()
    few = screen(judge, pilot[pilot["item_id"].between("d06", "d10")], scale=(1, 5), budget=20, bootstrap=50,
                 design="active")
    assert few.plan_info["uncertainty_share"] == 0.0 and len(few.plan_info["strata"]) == 4
    assert not any("per system and criterion" in w for w in few.warnings)
    unchecked = screen(judge, scale=(1, 5), budget=20, bootstrap=50, design="active")
    assert unchecked.plan_info["strata"] == []
    assert not any("per system and criterion" in w for w in unchecked.warnings)
    uniform = screen(judge, pilot, scale=(1, 5), budget=20, bootstrap=50)
    assert "strata" not in uniform.plan_info


def test_weighting_keeps_the_signal_checks_level_when_the_doubt_says_nothing():
    """Criteria whose judge errs differently and a doubt shuffled over the dialogues (it marks nothing): with the
    weights fitted on the same pilot the check still goes active in about SIGNAL_LEVEL of pilots (the permutation
    test is exact given the weights, which treat every pilot dialogue alike). 600 simulated pilots of 20: at most
    0.1 + 3 MC se."""
    from active_design import strata_designs, strata_population

    rng = np.random.default_rng(12)
    y, f, doubt = strata_population(rng, 600, 100, (0.5, 1.5))
    designs = strata_designs(rng, y, f, rng.permuted(doubt, axis=-1), 20)
    for key in ("plain", "strata"):
        active = np.mean(designs[key][1] < 1.0)
        assert active <= 0.1 + 3 * np.sqrt(0.09 / 600), (key, active)


def test_jury_disagreement_is_the_sd_of_the_judges_within_system_standardised_scores():
    """Written out: each judge's scores standardised within (system, criterion) over its judged dialogues, the sample
    sd over the judges that scored the summary, capped at 1; NaN with one judge only, or where a judge's scores of
    the system do not vary (it cannot disagree) and no other two remain."""
    from calibration.study.uncertainty import jury_disagreement

    rng = np.random.default_rng(8)
    ids = [f"d{i}" for i in range(12)]

    def frame(scores, system):
        return pd.DataFrame({"item_id": ids, "system": system, "criterion": "x", "score": scores, "status": "ok"})

    base = rng.normal(3, 1, 12)
    main_a, main_b = frame(base, "a"), frame(base + 1.0, "b")
    judge = pd.concat([main_a, main_b], ignore_index=True)
    other_scores = base + rng.normal(0, 0.8, 12)
    other = pd.concat([frame(other_scores, "a"), frame(np.full(12, 0.1), "b")], ignore_index=True)  # flat on b
    third_b = base + rng.normal(0, 0.6, 12)
    third = pd.concat([frame(base * 2.0 + rng.normal(0, 0.5, 12), "a"), frame(third_b, "b")], ignore_index=True)
    got = jury_disagreement(judge, {"other": other, "third": third})

    def z(v):
        return (v - v.mean()) / v.std(ddof=1)

    on_a = np.vstack([z(base), z(other_scores), z(third.loc[third["system"] == "a", "score"].to_numpy())])
    expected_a = np.minimum(on_a.std(axis=0, ddof=1), 1.0)
    assert got[:12].to_numpy() == pytest.approx(expected_a)
    # System b: the other judge is flat (its sd exactly 0, its centred scores rounding, not 0), so it is left out
    # rather than poisoning the row with infinities; the main judge and the third disagree as two.
    expected_b = np.minimum(np.vstack([z(base + 1.0), z(third_b)]).std(axis=0, ddof=1), 1.0)
    assert got[12:].to_numpy() == pytest.approx(expected_b)
    assert jury_disagreement(judge, {"other": other}).iloc[12:].isna().all()  # one judge left on b
    assert 0.0 < expected_a.min() and (expected_a <= 1.0).all()
    assert jury_disagreement(judge, None).isna().all()
    # A judge that ranks the dialogues the other way round disagrees by sqrt(2) |z|, above 1 where |z| > 0.71: capped.
    reversed_ = jury_disagreement(main_a, {"reversed": frame(6.0 - base, "a")}).to_numpy()
    uncapped = np.sqrt(2.0) * np.abs(z(base))
    assert reversed_ == pytest.approx(np.minimum(uncapped, 1.0)) and (uncapped > 1.0).any()


def test_screen_with_more_judges_draws_where_they_disagree():
    """End to end: items.csv gains mean_jury_disagreement, and a judgment's uncertainty is at least its jury's
    disagreement (the largest sign of doubt); without --judge the column is empty."""
    judge, pilot = _study()
    rng = np.random.default_rng(3)
    other = judge.assign(score=np.clip(judge["score"] + rng.normal(0, 1.0, len(judge)), 1, 5))
    result = screen(judge, pilot, scale=(1, 5), judges={"other": other}, bootstrap=50, budget=10, design="active")
    items = result.items.set_index("item_id")
    from calibration.study.uncertainty import jury_disagreement

    per_judgment = jury_disagreement(judge, {"other": other}).fillna(0.0)
    expected = per_judgment.groupby(judge["item_id"]).mean()
    assert items["mean_jury_disagreement"].to_numpy() == pytest.approx(expected[items.index].to_numpy())
    assert (items["uncertainty"] >= items["mean_jury_disagreement"] - 1e-12).all()
    alone = screen(judge, pilot, scale=(1, 5), bootstrap=50)
    assert alone.items["mean_jury_disagreement"].isna().all()


def _pilot(rows):
    """A pilot frame (as aggregate_humans gives it) of (system, criterion, labels) rows."""
    return pd.DataFrame([(f"d{i:02d}", system, criterion, float(v)) for system, criterion, labels in rows
                         for i, v in enumerate(labels)], columns=["item_id", "system", "criterion", "human"])


SPREAD, TOP, BOTTOM = [1, 2, 3, 4, 5] * 4, [5] * 19 + [4], [1] * 18 + [2, 1]


@pytest.mark.parametrize("rows, criteria, bounds, expected", [
    ([("a", "fluency", SPREAD)], ["fluency"], {"fluency": (1, 5)}, []),
    ([("a", "fluency", SPREAD), ("b", "fluency", TOP)], ["fluency"], {"fluency": (1, 5)}, ["b/fluency"]),
    ([("a", "fluency", BOTTOM)], ["fluency"], {"*": (1, 5)}, ["a/fluency"]),  # --scale: every criterion
    ([("a", "fluency", TOP)], ["consistency"], {"*": (1, 5)}, []),  # a criterion not screened
    ([("a", "fluency", TOP)], ["fluency"], {"consistency": (1, 5)}, []),  # no scale known for it
    ([("a", "fluency", TOP), ("a", "consistency", SPREAD)], ["fluency", "consistency"], {"*": (1, 5)},
     ["a/fluency"]),
])
def test_bunched_rows_are_the_pilot_rows_whose_labels_sit_at_one_end_of_their_scale(rows, criteria, bounds,
                                                                                     expected):
    """screen.bunched_rows: estimate.unseen_pull on each (system, criterion) of the pilot with its scale."""
    from calibration.study.designs import bunched_rows

    assert bunched_rows(_pilot(rows), criteria, bounds) == expected
    assert bunched_rows(None, criteria, bounds) == []


def test_an_active_draw_falls_back_to_uniform_where_the_pilots_labels_bunch():
    """End to end: the study whose pilot passes the signal check (test above) draws uniformly once one system's
    fluency labels on the pilot all sit at the top of the scale, and the warning names that row; the plan's
    probabilities are then all equal."""
    judge, pilot = _study()
    top = (pilot["system"] == "b") & (pilot["criterion"] == "fluency")
    bunched = pilot.assign(score=pilot["score"].where(~top, 5))
    result = screen(judge, bunched, scale=(1, 5), budget=20, random_share=1.0, bootstrap=50, design="active")
    said = [w for w in result.warnings if w.startswith("--design active: ")]
    assert len(said) == 1 and "bunch at one end of the scale for 1 system(s) and criteria (b/fluency)" in said[0]
    assert result.plan_info["uncertainty_share"] == 0.0
    assert result.plan["inclusion_probability"].to_numpy() == pytest.approx(20 / 40)
    kept = screen(judge, pilot, scale=(1, 5), budget=20, random_share=1.0, bootstrap=50, design="active")
    assert kept.plan_info["uncertainty_share"] > 0.0  # the same pilot without the bunched row: active
