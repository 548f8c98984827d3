"""`judge escalate`: the statistics (exact binomial p-values and bounds, the label-free path, the fixed-sequence test
along it), the decisions (one row per unlabelled cell, deterministic, the cascade's order), agreement per scale (Likert
tolerance, categorical ties, pairwise ties and the order signal), the guarantee by simulation, and the CLI: bad input
refused with a clear message and nothing written or lost, DECISIONS.csv never replacing a user's file, plan.csv for
`judge export --plan`."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

import calibration
from calibration.cascade.threshold_tests import (
    agreement_bound,
    binomial_p,
    decide,
    fit_cascade,
    min_labels,
    path_thresholds,
)
from calibration.cascade.verdicts import human_verdicts
from calibration.errors import CalibrationError
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "escalate"
JUDGES = {"small": EXAMPLE / "small.jsonl", "large": EXAMPLE / "large.jsonl"}
LABELS = EXAMPLE / "labels.csv"


# -- the statistics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("errors, n, alpha", [(0, 22, 0.1), (3, 50, 0.1), (10, 60, 0.2), (0, 1, 0.5), (7, 7, 0.3)])
def test_p_value_and_bound_are_scipys_exact_binomial(errors, n, alpha):
    assert binomial_p(errors, n, alpha) == pytest.approx(binomtest(errors, n, alpha, alternative="less").pvalue)
    # one-sided (1 - delta) Clopper-Pearson upper bound of disagreement = two-sided at 1 - 2 delta
    high = binomtest(errors, n).proportion_ci(confidence_level=1 - 2 * 0.1, method="exact").high
    assert agreement_bound(errors, n, 0.1) == pytest.approx(1 - high)


@pytest.mark.parametrize("alpha, delta", [(0.1, 0.1), (0.1, 0.05), (0.2, 0.1), (0.15, 0.05), (0.01, 0.01)])
def test_min_labels_is_the_first_count_where_no_disagreement_rejects(alpha, delta):
    n = min_labels(alpha, delta)
    assert binomial_p(0, n, alpha) <= delta < binomial_p(0, n - 1, alpha)


def test_the_path_never_lets_a_judge_take_more_than_its_share_and_a_coarse_one_takes_all_only_at_the_end():
    rng = np.random.default_rng(1)
    coarse = (rng.random(1000) < 0.7).astype(float)  # 70% "confident"
    fine = rng.random(1000)
    pool = np.column_stack([coarse, fine])
    thresholds, qs = path_thresholds(pool, 40)
    for row, q in zip(thresholds, qs):
        with np.errstate(invalid="ignore"):
            shares = (pool >= row).mean(axis=0)
        assert np.all(shares <= q + 1e-9)
    coarse_shares = [(coarse >= t).mean() for t in thresholds[:, 0]]
    assert coarse_shares[-1] == 1.0 and max(coarse_shares[:-1]) == pytest.approx(0.7, abs=0.03)
    assert np.all(np.diff(np.minimum(thresholds, 2.0), axis=0) <= 0)  # strict to loose (inf: accepts none)


def test_decide_takes_the_first_confident_judge_and_never_a_missing_verdict():
    conf = np.array([[0.9, 0.9], [0.1, 0.9], [0.1, 0.1], [np.nan, 0.95], [np.nan, np.nan]])
    assert decide(conf, np.array([0.5, 0.8])).tolist() == [0, 1, -1, 1, -1]
    assert decide(conf, np.array([np.inf, np.inf])).tolist() == [-1] * 5


def test_a_useless_signal_accepts_nothing_and_an_informative_one_stops_where_the_test_fails():
    rng = np.random.default_rng(2)
    c = rng.random((400, 1))
    useless = rng.random((400, 1)) < 0.7  # agreement 0.7 < 0.9 whatever the confidence says
    fit = fit_cascade(c, useless, rng.random((2000, 1)), alpha=0.1, delta=0.1)
    assert fit.chosen == -1 and np.isinf(fit.thresholds).all()
    informative = rng.random((400, 1)) < 0.5 + 0.5 * c
    # alpha 0.2: its top q share disagrees at q / 4, under 0.2 up to q = 0.8, where the walk starts (75 cells, 19%);
    # at alpha 0.1 (under 0.1 only up to q = 0.4) a start sized for a judge at alpha / 2 would leave no room
    fit = fit_cascade(c, informative, rng.random((2000, 1)), alpha=0.2, delta=0.1)
    path = fit.path
    assert fit.chosen >= 0 and path.loc[fit.chosen, "p_value"] <= 0.1
    tested = path[path["tested"]]
    # every tested step before the chosen one rejected; the one after it (if tested) did not
    assert tested["rejected"].iloc[:-1].all()
    after = path[path["step"] > fit.chosen]
    assert after.empty or not after["tested"].any() or after[after["tested"]]["p_value"].iloc[0] > 0.1


# -- the verb on the example ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example():
    return calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1)


def test_every_unlabelled_cell_gets_exactly_one_row(example):
    judged = set()
    for path in JUDGES.values():
        frame = pd.read_json(path, lines=True)
        judged |= set(zip(frame["id"], frame["system"], frame["criterion"]))
    labels = pd.read_csv(LABELS)
    labelled = set(zip(labels["item_id"], labels["system"], labels["criterion"]))
    rows = list(zip(example.decisions["item_id"], example.decisions["system"], example.decisions["criterion"]))
    assert len(rows) == len(set(rows)) and set(rows) == judged - labelled
    assert set(example.decisions["decided_by"]) <= {"small", "large", "human"}
    assert example.decisions.loc[example.decisions["decided_by"] == "human", "verdict"].isna().all()


def test_decisions_follow_the_thresholds_in_the_cascades_order(example):
    thresholds = example.thresholds.set_index("judge")["threshold"]
    small = pd.read_json(JUDGES["small"], lines=True).set_index(["id", "system"])
    for row in example.decisions.itertuples():
        samples = small.loc[(row.item_id, row.system), "samples"]
        small_conf = np.mean(np.abs(np.array(samples) - np.mean(samples)) <= 0.5)
        if row.decided_by == "small":
            assert row.confidence == pytest.approx(small_conf) and small_conf >= thresholds["small"]
        else:
            assert small_conf < thresholds["small"]  # the cheap judge was asked first
            if row.decided_by == "large":
                assert row.confidence >= thresholds["large"]


def test_the_same_inputs_give_the_same_decisions(example):
    again = calibration.escalate(LABELS, dict(reversed(list(JUDGES.items()))), alpha=0.2, delta=0.1)
    assert again.decisions_csv() != example.decisions_csv()  # the order of the judges is the cascade's order
    assert calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1).decisions_csv() == example.decisions_csv()


def test_the_printed_numbers_are_the_calibration_cells_own(example):
    labels = pd.read_csv(LABELS).groupby(["item_id", "system"])["score"].mean()
    large = pd.read_json(JUDGES["large"], lines=True).set_index(["id", "system"])
    row = example.thresholds.set_index("judge").loc["large"]
    conf = large.apply(lambda r: r["probs"][str(int(r["score"]))], axis=1)
    mine = [k for k in labels.index if conf[k] >= row["threshold"]]
    small = pd.read_json(JUDGES["small"], lines=True).set_index(["id", "system"])
    small_conf = small["samples"].map(lambda s: np.mean(np.abs(np.array(s) - np.mean(s)) <= 0.5))
    mine = [k for k in mine if small_conf[k] < example.thresholds.set_index("judge").loc["small", "threshold"]]
    agree = np.mean([abs(large.loc[k, "score"] - labels[k]) <= 0.5 for k in mine])
    assert row["calibration_decided"] == len(mine) and row["agreement"] == pytest.approx(agree)
    assert "betting over 60 labelled dialogues" in example.text()  # labels on whole dialogues: dialogues are units
    assert np.isnan(example.thresholds["agreement_bound"]).all()  # a bound over cells would assume them independent
    assert example.path.loc[example.path["chosen"], "p_value"].iloc[0] <= 0.1
    cells = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, units="cells")
    cascade = cells.thresholds.set_index("judge").loc["cascade"]
    assert cascade["agreement_bound"] >= 0.8  # what was tested: the cascade's bound clears 1 - alpha
    assert "exact binomial over 180 labelled cells" in cells.text()
    assert "exchangeable" in example.text() and "0.9 over the draw of the calibration set" in example.text()


def test_tokens_are_counted_against_the_strongest_judge_alone(example):
    cost = example.cost.set_index("what")
    cells = len(example.decisions)
    # without --path-cells every unlabelled cell fixes the path, so the large judge runs on all of them: no saving
    assert cost.loc["judge large", "cells_run"] == cells
    assert cost.loc["strongest (large) alone", "tokens"] == pytest.approx(cells * 904)
    assert cost.loc["cascade", "tokens"] == pytest.approx(cells * 312 + cells * 904)
    sampled = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, path_cells=60)
    cost = sampled.cost.set_index("what")
    reach = int((sampled.decisions["decided_by"] != "small").sum())
    run = cost.loc["judge large", "cells_run"]
    assert max(reach, 60) <= run <= reach + 60 < cells
    assert cost.loc["cascade", "tokens"] == pytest.approx(cells * 312 + run * 904)


# -- agreement per scale ----------------------------------------------------------------------------------------


def _frame(rows, **extra):
    frame = pd.DataFrame(rows)
    for column, value in extra.items():
        frame[column] = [value] * len(frame) if not callable(value) else frame.apply(value, axis=1)
    return frame


def test_pairwise_ties_are_verdicts_that_can_be_wrong():
    cells = pd.DataFrame({"item_id": ["a", "b", "c", "d"], "system": ["x|y"] * 4, "system_1": ["x"] * 4,
                          "system_2": ["y"] * 4})
    labels = pd.DataFrame({"item_id": ["a", "a", "b", "b", "c", "c", "d", "d"], "system": ["x|y"] * 4 + ["x", "y"] * 2,
                           "criterion": "pref", "annotator": ["h1", "h2"] * 4,
                           "score": [0, 0, 1, 2, np.nan, np.nan, 3, 3],
                           "label": [None] * 8})
    labels.loc[4:5, "score"] = [4, 2]  # c: x scored above y by the humans' means
    labels["abstained"] = False
    side = human_verdicts(labels, "pref", "pairwise", cells)
    assert side.tolist() == [frozenset({"0"}), frozenset({"1", "2"}), frozenset({"1"}), frozenset({"0"})]
    from calibration.cascade.verdicts import _agrees

    assert _agrees("0", side[0], "pairwise", 0) and not _agrees("1", side[0], "pairwise", 0)
    assert not _agrees("0", side[1], "pairwise", 0)  # humans split 1-2: a judge's tie matches neither
    assert _agrees("1", side[2], "pairwise", 0) and _agrees("0", side[3], "pairwise", 0) is not False


def _pairwise_study(n=300, seed=3):
    """A pairwise judge whose two orders agree on 70% of pairs (then right 95%), else a tie; humans: 2 annotators."""
    rng = np.random.default_rng(seed)
    judge, labels = [], []
    for i in range(n):
        truth = rng.choice(["1", "2"])
        consistent = rng.random() < 0.7
        other = "2" if truth == "1" else "1"
        forward = truth if (not consistent or rng.random() < 0.95) else other
        swapped = forward if consistent else (other if forward == truth else truth)
        label = forward if forward == swapped else "0"
        judge.append({"item_id": f"p{i:03d}", "system": "x|y", "criterion": "pref", "score": np.nan, "label": label,
                      "status": "label", "system_1": "x", "system_2": "y", "forward": forward, "swapped": swapped,
                      "order_disagreement": forward != swapped})
        if i < n // 2:
            labels += [{"item_id": f"p{i:03d}", "system": "x|y", "annotator": a, "criterion": "pref",
                        "score": truth} for a in ("h1", "h2")]
    return pd.DataFrame(judge), pd.DataFrame(labels)


def test_pairwise_order_signal_accepts_the_consistent_pairs_only():
    judge, labels = _pairwise_study()
    result = calibration.escalate(labels, {"j": judge}, alpha=0.1, delta=0.1)
    row = result.thresholds.set_index("judge").loc["j"]
    assert row["signal"] == "order" and row["threshold"] == 1.0
    decided = result.decisions[result.decisions["decided_by"] == "j"]
    assert (decided["verdict"] != "0").all() and 0.6 < result.coverage() < 0.8
    assert "tie (0) included" in result.text()


def test_categorical_agreement_counts_a_tied_human_label_and_abstentions_can_be_wrong():
    cells = pd.DataFrame({"item_id": ["a", "b"], "system": ["s", "s"], "system_1": [None] * 2, "system_2": [None] * 2})
    labels = pd.DataFrame({"item_id": ["a", "a", "b", "b", "b"], "system": "s", "criterion": "topic",
                           "annotator": ["h1", "h2", "h1", "h2", "h3"], "score": np.nan,
                           "label": ["bus", "metro", "idk", "idk", "bus"], "abstained": [False, False, True, True,
                                                                                         False]})
    side = human_verdicts(labels, "topic", "categorical", cells)
    assert side.tolist() == [frozenset({"bus", "metro"}), frozenset({"idk"})]


def test_likert_tolerance_is_against_the_human_mean():
    from calibration.cascade.verdicts import _agrees

    assert _agrees(4.0, 3.5, "likert", 0.5) and not _agrees(4.0, 3.4, "likert", 0.5)
    assert _agrees(3.0, 3.0, "likert", 0.0) and not _agrees(3.0, 3.5, "likert", 0.0)


def test_a_jury_signal_needs_two_judges_and_is_the_share_of_the_others_agreeing():
    rng = np.random.default_rng(5)
    truth = rng.integers(1, 6, 200)
    rows = lambda noise: [{"item_id": f"i{i}", "system": "s", "criterion": "c",  # noqa: E731
                           "score": float(np.clip(t + noise[i], 1, 5))} for i, t in enumerate(truth)]
    a, b = rows(rng.choice([0, 0, 0, 1, -2], 200)), rows(rng.choice([0, 0, 1, -1], 200))
    labels = pd.DataFrame([{"item_id": f"i{i}", "system": "s", "annotator": "h", "criterion": "c", "score": t}
                           for i, t in enumerate(truth[:100])])
    result = calibration.escalate(labels, {"a": pd.DataFrame(a), "b": pd.DataFrame(b)}, alpha=0.2, delta=0.1)
    signals = result.thresholds.set_index("judge")["signal"]
    assert signals["a"] == "jury" and signals["b"] == "jury"
    first = result.decisions[result.decisions["decided_by"] == "a"]
    assert (first["confidence"] == 1.0).all()  # b agrees with a on every cell a kept
    assert any("one annotator" in w for w in result.warnings)


# -- the simulation -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_simulation_failure_rate_stays_within_delta():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import escalate_coverage

    draws = 200
    rows = escalate_coverage.run(list(escalate_coverage.quick_settings()), draws, seed=11)
    for row in rows:
        allowance = 2.33 * np.sqrt(row["delta"] * (1 - row["delta"]) / draws)  # one-sided 99% simulation error
        assert row["failure_rate"] <= row["delta"] + allowance, row
    by = {(r["signal"], r["judges"]): r for r in rows}
    assert by[("useless", 1)]["coverage"] < 0.01  # accepts (almost) nothing: only in the draws where the test errs
    assert by[("informative", 1)]["coverage"] > 0.15 and by[("coarse", 1)]["coverage"] > 0.4
    assert by[("mixed", 2)]["coverage"] > by[("coarse", 1)]["coverage"]  # the second judge adds coverage


# -- the CLI: bad input, files ----------------------------------------------------------------------------------


def _labels_file(tmp_path, rows, name="labels.csv"):
    path = tmp_path / name
    pd.DataFrame(rows, columns=["item_id", "system", "annotator", "criterion", "score"]).to_csv(path, index=False)
    return path


def _base_labels():
    return pd.read_csv(LABELS)


def _bad_labels(tmp_path, change):
    frame = _base_labels()
    frame = change(frame)
    path = tmp_path / "bad_labels.csv"
    frame.to_csv(path, index=False)
    return str(path)


# (what a user gives, the message): each refused with exit 2, no DECISIONS.csv and no folder made, inputs unchanged
BAD = [
    ("labels of another rubric", lambda t: ["--human", _bad_labels(t, lambda f: f.assign(criterion="coherence"))],
     "criterion 'coherence' is not judged by any judge"),
    ("a label off the rubric's scale", lambda t: ["--human", _bad_labels(
        t, lambda f: f.assign(score=f["score"].where(f.index != 3, 7)))], "is off the scale of rubric toy@1"),
    ("labels for an item no judge judged", lambda t: ["--human", _bad_labels(
        t, lambda f: pd.concat([f, pd.DataFrame([{"item_id": "zz9", "system": "alpha", "annotator": "ann_a",
                                                 "criterion": "clarity", "score": 3}])]))],
     "item 'zz9' is not judged by any judge"),
    ("too few labels for alpha and delta", lambda t: ["--human", _bad_labels(t, lambda f: f.head(16))],
     "8 labelled cells, too few for alpha 0.2 and delta 0.1: even with no disagreement at all, fewer than 11"),
    ("alpha 0", lambda t: ["--alpha", "0"], "--alpha: must be between 0 and 1 (both excluded), got '0'"),
    ("delta 1.5", lambda t: ["--delta", "1.5"], "--delta: must be between 0 and 1 (both excluded), got '1.5'"),
    ("the same judge name twice", lambda t: ["--judge", f"small={JUDGES['large']}"],
     "--judge name 'small' is given twice"),
    ("a signal the file does not record", lambda t: ["--signal", "small=probs"],
     "judge small does not record it for clarity"),
    ("a judge named human", lambda t: ["--judge", f"human={JUDGES['large']}"], "may not be 'human'"),
    ("a text label on a Likert criterion", lambda t: ["--human", _bad_labels(
        t, lambda f: f.assign(score=f["score"].astype(str).where(f.index != 5, "good")))], "is not a number"),
    ("criteria nobody judged", lambda t: ["--criteria", "accuracy"], "--criteria 'accuracy' is not judged"),
]


def _run(tmp_path, capsys, extra, output=None):
    output = output or tmp_path / "decisions.csv"
    argv = ["escalate", "--judge", f"small={JUDGES['small']}", "--judge", f"large={JUDGES['large']}",
            "--human", str(LABELS), "--alpha", "0.2", "--delta", "0.1", "--output", str(output),
            "--output-dir", str(tmp_path / "out")]
    # a later flag replaces an earlier single-valued one; --judge appends
    for flag in ("--human", "--alpha", "--delta"):
        if flag in extra:
            at = argv.index(flag)
            del argv[at:at + 2]
    try:
        code = main(argv + extra)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


@pytest.mark.parametrize("name, extra, message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_nothing_is_written(tmp_path, capsys, name, extra, message):
    given = extra(tmp_path)
    inputs = [Path(p) for p in [*JUDGES.values(), LABELS, *given] if Path(str(p)).is_file()]
    before = {p: p.read_bytes() for p in inputs}
    code, out = _run(tmp_path, capsys, given)
    assert code == 2
    assert message in out.err.strip().splitlines()[-1] and "Traceback" not in out.err
    assert {p: p.read_bytes() for p in inputs} == before
    assert not (tmp_path / "decisions.csv").exists() and not (tmp_path / "out").exists()


def test_decisions_never_replace_a_users_file_and_replace_our_own(tmp_path, capsys):
    users = tmp_path / "decisions.csv"
    users.write_text("item_id,system\nmine,1\n", encoding="utf-8")
    before = hashlib.sha256(users.read_bytes()).hexdigest()
    code, out = _run(tmp_path, capsys, [])
    assert code == 2 and "was not written by this tool" in out.err
    assert hashlib.sha256(users.read_bytes()).hexdigest() == before and not (tmp_path / "out").exists()
    ours = tmp_path / "ours.csv"
    assert _run(tmp_path, capsys, [], output=ours)[0] == 0
    first = ours.read_bytes()
    code, out = _run(tmp_path, capsys, [], output=ours)
    assert code == 0 and ours.read_bytes() == first and "replaced" in out.err
    frame = pd.read_csv(ours)
    assert list(frame.columns) == ["item_id", "system", "criterion", "decided_by", "verdict", "confidence"]
    assert (tmp_path / "out" / "decisions.csv").read_bytes() == first


def test_the_plan_is_one_export_and_estimate_read(tmp_path, capsys):
    from judge.annotation.plan import plan_record
    from judge.annotation.plan import plan_to_label as export_reads
    from judge.annotation.plan import read_plan as estimate_reads

    code, _ = _run(tmp_path, capsys, ["--random-dialogues", "10", "--seed", "4"])
    assert code == 0
    folder = tmp_path / "out"
    plan = export_reads(folder)
    frame, info = estimate_reads(folder)
    assert list(plan.values()).count("random") == 10 and info["version"] == 1
    assert plan_record(folder)["sha256"] == info["plan_sha256"]
    decisions = pd.read_csv(tmp_path / "decisions.csv", dtype=str)
    escalated = set(decisions.loc[decisions["decided_by"] == "human", "item_id"])
    assert escalated <= set(plan)  # every dialogue with a cell for humans is in the plan
    targeted = {i for i, part in plan.items() if part == "targeted"}
    assert targeted <= escalated


def test_the_report_is_written_and_names_the_guarantee(tmp_path, capsys):
    code, _ = _run(tmp_path, capsys, ["--report", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert code == 0 and "Escalate: what stands without a human" in page and "data:image/png;base64" in page
    assert "random sample of the cells decided" in page


def test_judges_covering_different_cells_are_warned_about_and_decide_only_their_own(tmp_path):
    lines = JUDGES["small"].read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "small.jsonl").write_text("".join(lines[:300]), encoding="utf-8")
    (tmp_path / "toy.yaml").write_bytes((EXAMPLE / "toy.yaml").read_bytes())
    result = calibration.escalate(LABELS, {"small": tmp_path / "small.jsonl", "large": JUDGES["large"]},
                                  alpha=0.2, delta=0.1)
    assert any("small lacks 60 of 360" in w for w in result.warnings)
    missing = set(pd.read_json(JUDGES["large"], lines=True)["id"][300:])
    assert not (result.decisions["item_id"].isin(missing) & (result.decisions["decided_by"] == "small")).any()
    assert len(result.decisions) == 180


def test_no_confident_verdict_sends_everything_to_humans():
    rng = np.random.default_rng(8)
    truth = rng.integers(1, 6, 300)
    judge = pd.DataFrame({"item_id": [f"i{i}" for i in range(300)], "system": "s", "criterion": "c",
                          "score": rng.integers(1, 6, 300).astype(float),
                          "probs": [{str(p): 0.2 for p in range(1, 6)}] * 300})
    labels = pd.DataFrame({"item_id": [f"i{i}" for i in range(150)], "system": "s", "annotator": "h",
                           "criterion": "c", "score": truth[:150]})
    result = calibration.escalate(labels, {"coin": judge}, alpha=0.1, delta=0.1)
    assert (result.decisions["decided_by"] == "human").all() and len(result.decisions) == 150
    assert any("no confident verdict could be guaranteed" in w for w in result.warnings)


def test_the_function_prints_and_writes_what_the_cli_does(tmp_path, capsys, example):
    code, out = _run(tmp_path, capsys, [])
    assert code == 0 and out.out == example.text()
    example.write(tmp_path / "api")
    for name in example.files():
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
    assert (tmp_path / "decisions.csv").read_bytes() == (tmp_path / "api" / "decisions.csv").read_bytes()


def test_a_judgments_frame_goes_in_as_its_file_does(example):
    import judge

    frames = {name: judge.judgments_frame(path) for name, path in JUDGES.items()}
    from_frames = calibration.escalate(LABELS, frames, alpha=0.2, delta=0.1)
    assert from_frames.decisions_csv() == example.decisions_csv()
    assert from_frames.thresholds.equals(example.thresholds)


def test_a_cascade_run_in_rounds_ends_with_the_decisions_of_a_full_run(tmp_path):
    """The cheap judge judges everything, the large one only the labelled cells at first; each round the large one
    judges what pending.csv lists for it; with --path-cells the thresholds settle, and the decisions are the full
    run's, while the large judge never judged the cells the small one kept."""
    (tmp_path / "toy.yaml").write_bytes((EXAMPLE / "toy.yaml").read_bytes())
    lines = JUDGES["large"].read_text(encoding="utf-8").splitlines(keepends=True)
    key = lambda line: tuple(pd.read_json(__import__("io").StringIO(line), lines=True).iloc[0][["id", "system"]])  # noqa: E731
    keys = [key(line) for line in lines]
    labels = pd.read_csv(LABELS)
    have = set(zip(labels["item_id"], labels["system"]))
    full = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, path_cells=60)
    assert full.pending.empty
    for _ in range(5):
        (tmp_path / "large.jsonl").write_text("".join(l for l, k in zip(lines, keys) if k in have), encoding="utf-8")
        result = calibration.escalate(LABELS, {"small": JUDGES["small"], "large": tmp_path / "large.jsonl"},
                                      alpha=0.2, delta=0.1, path_cells=60)
        if result.pending.empty:
            break
        assert set(result.pending["judge"]) == {"large"}
        have |= set(zip(result.pending["item_id"], result.pending["system"]))
    assert result.pending.empty and result.decisions_csv() == full.decisions_csv()
    kept_by_small = set(zip(*[full.decisions.loc[full.decisions["decided_by"] == "small", c]
                              for c in ("item_id", "system")]))
    assert len(have) < len(keys) and len(kept_by_small - have) > 50  # the large judge was spared these


# (what a script passes, the message): the same wording as the CLI's, before any file is read
OPTION_ROWS = [
    ({"alpha": 1.0}, "--alpha must be between 0 and 1 (both excluded), got 1.0"),
    ({"delta": 0}, "--delta must be between 0 and 1 (both excluded), got 0"),
    ({"alpha": True}, "--alpha must be between 0 and 1 (both excluded), got True"),
    ({"tolerance": -1}, "--tolerance must be a number of score points >= 0, got -1"),
    ({"units": "rows"}, "--units must be one of auto, cells, dialogues, got 'rows'"),
    ({"signal": "magic"}, "--signal must be one of probs, samples, order, jury, none (or NAME=SIGNAL), got 'magic'"),
    ({"signal": "tiny=probs"}, "--signal names judge 'tiny', which is not among --judge (small, large)"),
    ({"path_cells": 0}, "--path-cells must be a positive whole number, got 0"),
    ({"criteria": ""}, "--criteria must be a comma-separated list of criteria"),
]


@pytest.mark.parametrize("given, message", OPTION_ROWS, ids=[m[:30] for _, m in OPTION_ROWS])
def test_the_function_refuses_bad_options_in_the_clis_words(given, message):
    options = {"alpha": 0.2, "delta": 0.1, **given}
    with pytest.raises(CalibrationError) as caught:
        calibration.escalate(LABELS, JUDGES, **options)
    assert message in str(caught.value)


def test_every_help_line_starting_with_judge_is_a_runnable_example():
    from calibration.cascade.cli import EPILOG

    starts = [line.strip() for line in EPILOG.splitlines() if line.strip().startswith("judge ")]
    assert len(starts) == 3 and all(line.startswith("judge escalate --judge ") for line in starts)


def test_too_few_dialogues_for_the_betting_test_are_refused_and_the_count_is_right():
    from calibration.cascade.threshold_tests import betting_p

    labels = pd.read_csv(LABELS)
    few = labels[labels["item_id"].isin(sorted(set(labels["item_id"]))[:12])]  # 12 dialogues x 3 cells
    with pytest.raises(CalibrationError, match="12 labelled dialogues, too few .* needs 14; label at least 14"):
        calibration.escalate(few, JUDGES, alpha=0.2, delta=0.1)
    # the count is the test's own: 13 dialogues without a single disagreement cannot reject, 14 can
    assert betting_p(np.zeros((1, 13)), 0.2, 0.1)[0] > 0.1 >= betting_p(np.zeros((1, 14)), 0.2, 0.1)[0]


def test_each_criterion_prints_its_own_count_of_unlabelled_cells(tmp_path):
    # Two criteria of different sizes: "clarity" as in the example, "brevity" a copy of it on 2 of every 3 dialogues.
    # The summary's line for each must count that criterion's decisions, not the other's.
    import json

    judges = {}
    for name, path in JUDGES.items():
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        lines += [{**j, "criterion": "brevity"} for j in lines if int(j["id"][1:]) % 3 != 0]
        judges[name] = tmp_path / f"{name}.jsonl"
        judges[name].write_text("".join(json.dumps(j) + "\n" for j in lines), encoding="utf-8")
    labels = pd.read_csv(LABELS)
    copy = labels[labels["item_id"].str[1:].astype(int) % 3 != 0].assign(criterion="brevity")
    pd.concat([labels, copy]).to_csv(tmp_path / "labels.csv", index=False)
    result = calibration.escalate(tmp_path / "labels.csv", judges, alpha=0.2, delta=0.1, scale=(1, 5))
    counts = result.decisions["criterion"].value_counts()
    assert counts["clarity"] != counts["brevity"]
    for criterion in ("clarity", "brevity"):
        assert f"\n{criterion}: {counts[criterion]} unlabelled cells," in result.text()


def test_no_judge_at_all_is_refused_in_python_as_on_the_command_line():
    # The command line cannot omit --judge; the Python API can: the same one-line refusal, before anything is read.
    with pytest.raises(CalibrationError, match="escalate needs at least one --judge NAME=FILE$"):
        calibration.escalate(LABELS, {}, alpha=0.2, delta=0.1)


def test_a_risk_coverage_curve_of_many_distinct_confidences_spans_them_in_at_most_50_points():
    from calibration.cascade.walk import _risk_coverage

    rng = np.random.default_rng(4)
    conf = rng.random(400)  # 400 distinct confidences: the curve is drawn at 50 quantiles of them
    agree = rng.random(400) < conf
    curve = _risk_coverage(conf, agree, "clarity", "small", "probs")
    assert 45 <= len(curve) <= 50
    assert curve["threshold"].iloc[0] == conf.max() and curve["threshold"].iloc[-1] == conf.min()
    assert curve["coverage"].is_monotonic_increasing and curve["coverage"].iloc[-1] == 1.0
    assert curve["n_accepted"].iloc[0] == 1


def test_the_cost_tables_cascade_row_adds_up_its_judges_rows():
    from calibration.cascade.walk import _cost_table

    rows = [{"judge": "small", "cells_run": 100, "pool": 100, "judged": 120, "cells": 150, "tokens": 1000.0,
             "tokens_alone": 1000.0},
            {"judge": "large", "cells_run": 40, "pool": 100, "judged": 70, "cells": 150, "tokens": 8000.0,
             "tokens_alone": 20000.0}]
    table = _cost_table(rows).set_index("what")
    assert table.loc["judge small", "spared"] == 30 and table.loc["judge large", "spared"] == 80
    cascade = table.loc["cascade"]
    assert cascade["spared"] == 110 and cascade["judged"] == 190 and cascade["cells_run"] == 140
    assert cascade["tokens"] == 9000.0
    alone = table.loc["strongest (large) alone"]
    assert alone["tokens"] == 20000.0 and alone["cells_run"] == 100 and alone["spared"] == 0
