"""`judge tune`'s statistics core against independent computations, plant-and-recover at the smallest study it
accepts, the demonstration flag end to end in the readers, and bad input (exit 2, a clear message, nothing lost)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as st

from calibration.tune.gain import Cells, Gain, Statistic, assess, dialogue_counts, holm, interval, p_value, paired_gain

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "study"


def _cells(rng, dialogues=30, systems=4, noise=(1.0, 1.0)):
    quality = rng.normal(size=dialogues * systems)
    human = np.round(quality + rng.normal(size=quality.shape))
    judges = [np.round(quality + rng.normal(size=quality.shape) * s) for s in noise]
    return human, judges, np.repeat(np.arange(dialogues), systems)


@pytest.mark.parametrize("metric, reference", [("kendall", lambda x, y: st.kendalltau(x, y).statistic),
                                               ("spearman", lambda x, y: st.spearmanr(x, y).statistic)])
def test_the_statistic_of_a_resample_is_scipys_on_the_repeated_dialogues(metric, reference):
    rng = np.random.default_rng(7)
    human, (judge, _), dialogue = _cells(rng)
    order = rng.permutation(len(human))  # cells in any order, not grouped by dialogue
    human, judge, dialogue = human[order], judge[order], dialogue[order]
    statistic = Statistic(metric, judge, human, dialogue, 30)
    assert statistic(np.ones((1, 30)))[0] == pytest.approx(reference(judge, human), abs=1e-12)
    for counts in dialogue_counts(30, 5, rng):
        rows = np.concatenate([np.flatnonzero(dialogue == d) for d in range(30) for _ in range(int(counts[d]))])
        assert statistic(counts[None])[0] == pytest.approx(reference(judge[rows], human[rows]), abs=1e-12)


@pytest.mark.parametrize("metric", ["kendall", "spearman"])
def test_the_cells_compared_in_blocks_give_the_same_statistic(metric, monkeypatch):
    import calibration.tune.gain as gain

    rng = np.random.default_rng(8)
    human, (judge, _), dialogue = _cells(rng)
    counts = dialogue_counts(30, 20, rng)
    whole = Statistic(metric, judge, human, dialogue, 30)(counts)
    monkeypatch.setattr(gain, "BLOCK", 7)  # 120 cells in 18 blocks, one cut inside a dialogue
    assert Statistic(metric, judge, human, dialogue, 30)(counts) == pytest.approx(whole, abs=1e-12)


def test_agreement_is_the_share_of_rounded_matches():
    human = np.array([1.0, 2.4, 3.6, 5.0])
    judge = np.array([1.0, 2.0, 3.0, 4.0])
    assert Statistic("agreement", judge, human, np.array([0, 0, 1, 1]), 2)(np.ones((1, 2)))[0] == 0.5


def test_holm_is_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(3).uniform(0, 0.2, 9)
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1])


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_p_below_a_level_exactly_when_that_interval_leaves_out_zero(method):
    rng = np.random.default_rng(11)
    for shift in (0.0, 0.05, 0.1, 0.2):
        reps = rng.normal(shift, 0.07, 2000)
        gain = Gain(0.3, 0.3 + shift, shift, reps, rng.normal(shift, 0.01, 40))
        p = p_value(gain, method)
        for level in (0.9, 0.95, 0.99):
            low, high = interval(gain, level, method)
            outside = low > 0 or high < 0
            if abs(p - (1 - level)) > 0.003:  # away from the boundary, where resample granularity decides
                assert outside == (p < 1 - level), (shift, level, p, low, high)


def test_bca_interval_is_scipys_on_the_dialogue_resampling():
    """scipy.stats.bootstrap's BCa on the dialogues as the resampled units (its own resamples and jackknife)."""
    rng = np.random.default_rng(5)
    human, (current, better), dialogue = _cells(rng, dialogues=40, noise=(1.2, 0.6))

    def gain_of(units):
        rows = np.concatenate([np.flatnonzero(dialogue == d) for d in units.astype(int)])
        return st.kendalltau(better[rows], human[rows]).statistic - st.kendalltau(current[rows], human[rows]).statistic

    ours = paired_gain("kendall", current, better, human, dialogue, dialogue_counts(40, 4000, rng))
    theirs = st.bootstrap((np.arange(40.0),), gain_of, vectorized=False, n_resamples=4000, method="BCa",
                          random_state=1).confidence_interval
    assert interval(ours, 0.95, "bca") == pytest.approx((theirs.low, theirs.high), abs=0.03)
    assert ours.gain == pytest.approx(gain_of(np.arange(40.0)), abs=1e-12)


def test_plant_and_recover_at_the_smallest_study():
    """10 labelled dialogues (the least tune accepts): a candidate that is the human mean itself is accepted, a
    copy of the current judge is not and its gain is exactly zero."""
    rng = np.random.default_rng(2)
    human, (current,), dialogue = _cells(rng, dialogues=10, noise=(1.5,))
    rows = assess({"oracle": Cells(current, human, human, dialogue), "copy": Cells(current, current, human, dialogue)},
                  10, seed=0)
    oracle, copy = rows
    assert oracle["accepted"] and oracle["ci_low"] > 0 and oracle["gain"] == pytest.approx(
        1 - st.kendalltau(current, human).statistic)
    assert not copy["accepted"] and copy["gain"] == 0 and copy["p"] == 1


# -- the CLI on the example study ------------------------------------------------------------------------------------


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from judge.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _sha(paths) -> dict:
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if Path(p).is_file()}


def test_judgments_already_made_are_tested_without_a_model(tmp_path):
    code, out, err = _cli("tune", "--judge", f"current={STUDY / 'judgments.jsonl'}", "--human",
                          str(STUDY / "labels.csv"), "--output-dir", str(tmp_path),
                          "--candidate", f"rerun={STUDY / 'judgments_rerun.jsonl'}")
    assert code == 1, err  # a re-run of the same judge is no better
    table = pd.read_csv(tmp_path / "candidates.csv")
    assert list(table.columns) == ["criterion", "candidate", "kind", "description", "n_labelled", "current", "value",
                                   "gain", "ci_low", "ci_high", "p", "p_holm", "accepted"]
    assert set(table["criterion"]) == {"accuracy", "clarity"} and not table["accepted"].any()
    assert np.allclose(table["gain"], table["value"] - table["current"], atol=2e-6)  # 6 significant digits
    assert "rerun" in out and "rejected" in out


def _other_items(tmp_path: Path) -> Path:
    lines = (STUDY / "judgments_rerun.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if json.loads(line)["id"] != "d12"]
    path = tmp_path / "partial.jsonl"
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return path


def _few_labels(tmp_path: Path) -> Path:
    frame = pd.read_csv(STUDY / "labels.csv")
    path = tmp_path / "few.csv"
    frame[frame["item_id"].isin(sorted(set(frame["item_id"]))[:6])].to_csv(path, index=False)
    return path


BAD = [
    ("a candidate on other items", lambda t: ["--candidate", f"partial={_other_items(t)}"],
     "candidate partial", "a candidate must judge the same items as the current judge"),
    ("a criterion absent", lambda t: ["--candidate", f"rerun={STUDY / 'judgments_rerun.jsonl'}", "--criteria",
                                      "fluency"], "fluency", "no human label for fluency"),
    ("too few labels to resample", lambda t: ["--candidate", f"rerun={STUDY / 'judgments_rerun.jsonl'}", "--human",
                                              str(_few_labels(t))], "6 labelled dialogue(s)", "at least 10"),
    ("too few labels for the folds", lambda t: ["--candidates", "few-shot", "--rubric", str(STUDY / "toy.yaml"),
                                                "--items", str(STUDY / "items.jsonl"), "--folds", "6"],
     "--folds 6", "needs at least 12 (2 per fold)"),
    ("no candidate", lambda t: [], "no candidate to test", "--candidate NAME=FILE"),
    ("a candidate named as the current judge", lambda t: ["--candidate", f"current={STUDY / 'judgments_rerun.jsonl'}"],
     "candidate name 'current'", "a name of its own"),
    ("built without a rubric", lambda t: ["--candidates", "few-shot"], "--candidates", "give --rubric"),
    ("an unknown builder", lambda t: ["--candidates", "magic", "--rubric", "x", "--items", "y"], "unknown magic",
     "few-shot, rubric-edit, decoding"),
    ("rubric-edit without a proposer", lambda t: ["--candidates", "rubric-edit", "--rubric", str(STUDY / "toy.yaml"),
                                                  "--items", str(STUDY / "items.jsonl")], "--proposer-model",
     "proposing"),
]


@pytest.mark.parametrize("name, extra, where, what", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_a_clear_message_and_nothing_written(tmp_path, name, extra, where, what):
    args = extra(tmp_path)
    human = [] if "--human" in args else ["--human", str(STUDY / "labels.csv")]
    inputs = [STUDY / "judgments.jsonl", STUDY / "labels.csv", STUDY / "judgments_rerun.jsonl", *tmp_path.iterdir()]
    before = _sha(inputs)
    out = tmp_path / "out"
    code, stdout, err = _cli("tune", "--judge", f"current={STUDY / 'judgments.jsonl'}", *human, "--output-dir",
                             str(out), *args)
    assert code == 2, err
    assert where in err and what in err, err
    assert err.startswith("judge tune: error: ") and len(err.strip().splitlines()) == 1
    assert not out.exists() and stdout == ""
    assert _sha(inputs) == before


# -- demonstrations: marked by the judge, left out by the readers ------------------------------------------------------


def test_a_rubric_without_demonstrations_dumps_as_before():
    from judge.rubric import load_rubric

    rubric = load_rubric("dialsummeval")
    dumped = rubric.model_dump()
    assert "tuned_from" not in dumped
    assert all("item_id" not in e and "system" not in e for c in dumped["criteria"] for e in c["examples"])
    assert rubric.demonstration_items() == {c.id: set() for c in rubric.criteria}


def test_demonstration_labels_are_left_out_and_the_verb_says_so(tmp_path):
    """Judgments marking dialogue d12's clarity as a demonstration: calibrate drops d12's clarity labels only."""
    lines = (STUDY / "judgments.jsonl").read_text(encoding="utf-8").splitlines()
    marked = []
    for line in lines:
        judgment = json.loads(line)
        if judgment["id"] == "d12" and judgment["criterion"] == "clarity":
            judgment["demonstration"] = True
        marked.append(json.dumps(judgment))
    path = tmp_path / "judgments.jsonl"
    path.write_text("\n".join(marked) + "\n", encoding="utf-8")
    (tmp_path / "toy.yaml").write_text((STUDY / "toy.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    import calibration
    from calibration.io import judge_scales, load_judge_scores, read_human_labels

    judge = load_judge_scores(path)
    scales, notes = judge_scales(judge, None, path)
    labels = read_human_labels(STUDY / "labels.csv", scales)
    everything = pd.read_csv(STUDY / "labels.csv")
    dropped = everything[(everything["item_id"] == "d12") & (everything["criterion"] == "clarity")]
    assert len(labels) == len(everything) - len(dropped) and len(dropped) > 0
    assert labels.attrs["demonstration_labels"] == len(dropped)
    assert not ((labels["item_id"] == "d12") & (labels["criterion"] == "clarity")).any()
    assert ((labels["item_id"] == "d12") & (labels["criterion"] == "accuracy")).any()
    assert any("1 dialogue(s) as demonstrations" in n for n in notes)
    result = calibration.calibrate(path, STUDY / "labels.csv", bootstrap=0)
    assert any("left out of the labelled cells" in w for w in result.warnings)
    plain = calibration.calibrate(STUDY / "judgments.jsonl", STUDY / "labels.csv", bootstrap=0)
    assert not any("demonstration" in w for w in plain.warnings)


def test_the_library_verb_is_calibration_tune():
    import calibration
    from calibration.tune.tune import Candidate

    result = calibration.tune(STUDY / "judgments.jsonl", STUDY / "labels.csv",
                              [Candidate("rerun", "judgments", "a re-run", STUDY / "judgments_rerun.jsonl")],
                              n_resamples=400)
    assert result.accepted.empty and len(result.candidates) == 2
    assert os.path.basename(calibration.tune.__file__) == "__init__.py"
