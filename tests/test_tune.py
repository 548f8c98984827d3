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

from calibration.tune.gain import (
    Cells,
    Statistic,
    assess,
    decide,
    dialogue_counts,
    interval,
    paired_gain,
    step_down,
)

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


def _step_down_by_ranks(g, reps, alpha):
    """Romano-Wolf written the other way round, for the check: sort the t-statistics once; the j-th largest is
    rejected when every i <= j beats the (1 - alpha) quantile of the max over the hypotheses ranked i and below."""
    se = reps.std(axis=0, ddof=1)
    t = g / se
    ranked = np.argsort(-t)
    rejected, cuts = np.zeros(len(g), bool), np.zeros(len(g))
    for j, k in enumerate(ranked):
        tail = ranked[j:]
        cuts[k] = np.quantile(((reps[:, tail] - g[tail]) / se[tail]).max(axis=1), 1 - alpha, method="inverted_cdf")
        rejected[k] = t[k] > cuts[k] and (j == 0 or rejected[ranked[j - 1]])
    return rejected, cuts, se


def _correlated(rng, means, rho, n_reps, sds=None):
    k = len(means)
    sds = np.ones(k) if sds is None else np.asarray(sds)
    cov = (np.full((k, k), rho) + (1 - rho) * np.eye(k)) * np.outer(sds, sds)
    return rng.multivariate_normal(np.zeros(k), cov, size=n_reps) + np.asarray(means)


@pytest.mark.parametrize("seed", range(6))
def test_step_down_is_the_same_as_a_rank_by_rank_implementation(seed):
    """Synthetic paired replicates, correlated, of unequal spread: the rejections are those of the ranked
    recursion, each lower bound is g - c se with c its step's critical value (the recursion's cut at the step it
    was rejected), the verdict is the lower bound's sign, and p_adjusted <= alpha exactly for the rejected."""
    rng = np.random.default_rng(seed)
    sds = rng.uniform(0.5, 2.0, 6)
    g = np.array([3.4, 2.6, 2.3, 1.0, 0.2, -1.0]) * sds
    reps = _correlated(rng, g, 0.5, 4000, sds) + rng.normal(0, 0.05, (4000, 6)) * g  # not exactly normal
    family = step_down(g, reps, 0.05)
    rejected, cuts, se = _step_down_by_ranks(g, reps, 0.05)
    assert family.rejected.tolist() == rejected.tolist()
    assert 0 < rejected.sum() < 6  # the test exercises more than one step and a stop
    assert family.se == pytest.approx(se, rel=1e-12)
    last = cuts[~rejected].max()  # the step that stops: its cut is over every hypothesis not rejected
    for k in range(6):
        if rejected[k]:
            # rejected at a step whose set holds k: that step's c is the cut of the first of its set
            assert np.isclose(family.critical[k], cuts[rejected], rtol=1e-12, atol=0).any()
            assert family.critical[k] >= cuts[k] - 1e-12
        else:
            assert family.critical[k] == pytest.approx(last, rel=1e-12)
    assert family.lower == pytest.approx(g - family.critical * se, rel=1e-12)
    assert ((family.lower > 0) == family.rejected).all()
    assert ((family.p_adjusted <= 0.05) == family.rejected).all()
    assert family.steps >= 2
    ranked = np.argsort(-g / se)
    assert (np.diff(family.critical[ranked]) <= 1e-12).all()  # later steps, fewer hypotheses, smaller c


def test_one_candidate_c_is_the_one_sided_bootstrap_quantile_of_its_studentized_replicate():
    rng = np.random.default_rng(4)
    reps = rng.gamma(4.0, 0.05, 5000)  # skewed, so a normal quantile would not do
    g = 0.21
    family = step_down([g], reps[:, None], 0.05)
    se = reps.std(ddof=1)
    c = np.quantile((reps - g) / se, 0.95, method="inverted_cdf")
    assert family.critical[0] == pytest.approx(c, rel=1e-12)
    assert family.lower[0] == pytest.approx(g - c * se, rel=1e-12)
    assert family.p[0] == family.p_adjusted[0] == pytest.approx(np.mean((reps - g) / se >= g / se))


@pytest.mark.parametrize("k", [2, 5, 10])
def test_independent_candidates_c_is_close_to_sidak(k):
    from scipy.stats import norm

    rng = np.random.default_rng(k)
    reps = rng.normal(size=(40000, k))
    family = step_down(np.zeros(k), reps, 0.05)
    assert not family.rejected.any()
    assert family.critical[0] == pytest.approx(norm.ppf(0.95 ** (1 / k)), abs=0.03)


def test_correlated_candidates_c_is_the_multivariate_normal_quantile_below_sidak():
    """Four gains correlated 0.5 (candidates sharing the current judge): c is the one-sided equicorrelated
    normal max quantile (Dunnett's), solved here with scipy's multivariate normal CDF, and below Sidak's 2.23."""
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal, norm

    cov = np.full((4, 4), 0.5) + 0.5 * np.eye(4)
    exact = brentq(lambda c: multivariate_normal(np.zeros(4), cov).cdf(np.full(4, c)) - 0.95, 1.5, 3.0)
    family = step_down(np.zeros(4), _correlated(np.random.default_rng(9), np.zeros(4), 0.5, 40000), 0.05)
    assert family.critical[0] == pytest.approx(exact, abs=0.03)
    assert family.critical[0] < norm.ppf(0.95 ** 0.25) - 0.05


def test_step_down_agrees_with_arch_stepm_on_means():
    """The method authors' procedure as arch implements it (StepM, on loss differentials, iid bootstrap): the
    same superior models, and the same first critical value for mean differentials of equal spread."""
    arch = pytest.importorskip("arch.bootstrap")
    rng = np.random.default_rng(12)
    n = 400
    shared = rng.normal(size=(n, 1))
    gains = shared + rng.normal(size=(n, 6)) + np.array([0.45, 0.3, 0.12, 0.0, 0.0, -0.3])
    stepm = arch.StepM(np.zeros(n), -gains, size=0.05, reps=20000, bootstrap="stationary", block_size=1,
                       studentize=False, seed=3)  # losses: a model whose loss is below the benchmark's is better
    stepm.compute()
    rows = rng.integers(0, n, size=(20000, n))
    reps = np.vstack([gains[r].mean(axis=1) for r in np.array_split(rows, 40)])  # (B, 6) resampled means
    family = step_down(gains.mean(axis=0), reps, 0.05)
    assert sorted(np.flatnonzero(family.rejected).tolist()) == [int(i) for i in stepm.superior_models] == [0, 1, 2]
    t = gains.mean(axis=0) / family.se
    assert family.critical[2] < t[2] < family.critical[0]  # model 2 is shown only at the second step, by both
    stepm.spa.compute()
    theirs = stepm.spa.critical_values(0.05)["upper"]
    ours = np.quantile((reps - gains.mean(axis=0)).max(axis=1), 0.95)
    assert ours == pytest.approx(theirs, rel=0.03)
    assert family.critical[0] * family.se.mean() == pytest.approx(theirs, rel=0.08)  # studentized, spreads ~equal


def test_an_undefined_or_unmoving_gain_is_never_shown_and_leaves_the_others_alone():
    rng = np.random.default_rng(6)
    reps = _correlated(rng, [3.0, 0.0], 0.5, 4000)
    alone = step_down([3.0, 0.0], reps, 0.05)
    with_nan = step_down([3.0, 0.0, np.nan], np.column_stack([reps, np.full(4000, np.nan)]), 0.05)
    copy = step_down([3.0, 0.0, 0.0], np.column_stack([reps, np.zeros(4000)]), 0.05)
    assert alone.rejected.tolist() == [True, False]
    assert with_nan.rejected.tolist() == [True, False, False] and np.isnan(with_nan.lower[2])
    assert with_nan.critical[:2] == pytest.approx(alone.critical)
    assert copy.rejected.tolist() == [True, False, False] and copy.lower[2] == 0 and copy.p_adjusted[2] == 1


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


@pytest.mark.parametrize("seed", range(4))
def test_the_verdict_is_the_step_down_at_half_alpha_its_bounds_equal_tailed_and_its_p_two_sided(seed):
    """decide's family: the lower ends of simultaneous two-sided 1 - alpha bounds, i.e. the one-sided step-down at
    alpha / 2 (an equal candidate was accepted in 6-7% of simulated studies at alpha one-sided); p values twice the
    one-sided ones, so a candidate is accepted exactly when its p_adjusted is at most alpha."""
    rng = np.random.default_rng(seed)
    human, judges, dialogue = _cells(rng, dialogues=40, noise=(1.2, 0.6, 1.0, 1.2, 0.9))
    counts = dialogue_counts(40, 400, np.random.default_rng(seed))
    gains = {f"c{i}": paired_gain("kendall", judges[0], j, human, dialogue, counts) for i, j in enumerate(judges[1:])}
    rows = decide(gains, 0.1)
    family = step_down([g.gain for g in gains.values()], np.column_stack([g.replicates for g in gains.values()]), 0.05)
    one_sided = step_down([g.gain for g in gains.values()], np.column_stack([g.replicates for g in gains.values()]),
                          0.1)
    for i, row in enumerate(rows.values()):
        assert row["accepted"] == family.rejected[i] and row["lower_family"] == pytest.approx(family.lower[i])
        assert row["p_adjusted"] == pytest.approx(min(1.0, 2 * family.p_adjusted[i]))
        assert row["accepted"] == (row["p_adjusted"] <= 0.1)
        assert row["lower_family"] <= one_sided.lower[i] + 1e-12  # a wider bound than the one-sided one


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
    assert oracle["lower_family"] > 0 and oracle["p_adjusted"] <= 0.05
    assert not copy["accepted"] and copy["gain"] == 0 and copy["p"] == 1 and copy["p_adjusted"] == 1
    assert copy["lower_family"] == 0 and copy["ci_low"] == copy["ci_high"] == 0


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
                                   "gain", "ci_low", "ci_high", "lower_family", "p", "p_adjusted",
                                   "accepted"]
    assert set(table["criterion"]) == {"accuracy", "clarity"} and not table["accepted"].any()
    assert np.allclose(table["gain"], table["value"] - table["current"], atol=2e-6)  # 6 significant digits
    assert "rerun" in out and "rejected" in out
    assert ((table["lower_family"] > 0) == table["accepted"]).all() and (table["lower_family"] < table["gain"]).all()
    assert max(len(line) for line in out.splitlines()) <= 120
    for row in table.itertuples():  # the printed numbers are the table's: the verdict and its bound never disagree
        assert f"{row.lower_family:>+12.3f}  {row.p_adjusted:>6.3g}  rejected" in out


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
