"""`judge screen`: systems, items, plan and power against independent computations; the CLI; bad input."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.io import load_judge_scores
from calibration.stats import holm, resample_counts
from calibration.study.designs import make_plan
from calibration.study.power import dialogues_needed, paired_power
from calibration.study.ppi import ppi_mean
from calibration.study.systems import systems_table
from calibration.study.uncertainty import judgment_uncertainty
from judge.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "examples" / "study"
JUDGMENTS = FIXTURES / "judgments.jsonl"
PILOT = FIXTURES / "pilot_labels.csv"


def judge_frame(means: dict, n_items=40, noise=0.8, seed=0, criteria=("clarity", "accuracy")):
    """Invented judge scores: system means per criterion, a shared dialogue effect, Gaussian noise."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0, 0.5, n_items)
    rows = [{"item_id": f"i{i:03d}", "system": system, "criterion": criterion,
             "score": means[system][k] + difficulty[i] + rng.normal(0, noise), "label": None, "status": "ok"}
            for i in range(n_items) for system in means for k, criterion in enumerate(criteria)]
    return pd.DataFrame(rows)


# -- systems ------------------------------------------------------------------------------------------------------


def test_vectorised_bootstrap_equals_a_loop_over_resamples():
    judge = judge_frame({"a": (3.0, 3.5), "b": (2.8, 3.0), "c": (2.0, 2.2)}, n_items=25)
    judge = judge.drop(index=[3, 17, 40])  # a few missing judgments
    systems, _, replicates, columns = systems_table(judge, ["clarity", "accuracy"], n_resamples=300, seed=5)
    items = sorted(judge["item_id"].unique())
    counts = resample_counts(np.random.default_rng(5), len(items), 300)
    for b in range(300):
        sample = pd.DataFrame({"item_id": np.repeat(items, counts[b].astype(int))})
        expanded = sample.merge(judge, on="item_id")
        means = expanded.groupby(["criterion", "system"])["score"].mean()
        for k, column in enumerate(columns):
            assert replicates[b, k] == pytest.approx(means[column])
    point = judge.groupby(["criterion", "system"])["score"].mean()
    for row in systems.itertuples():
        assert row.mean == pytest.approx(point[(row.criterion, row.system)])
        k = columns.index((row.criterion, row.system))
        # The expanded percentile interval: the normal quantile replaced by sqrt(n / (n - 1)) t_{n-1}.
        n = row.n
        tail = 100 * stats.norm.sf(np.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1))
        assert tail < 2.5
        assert (row.ci_low, row.ci_high) == pytest.approx(tuple(np.percentile(replicates[:, k], [tail, 100 - tail])))


def test_holm_against_a_hand_example_and_statsmodels():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    multitest = pytest.importorskip("statsmodels.stats.multitest", reason="statsmodels not installed")
    p = np.random.default_rng(0).uniform(0, 0.2, 12)
    assert holm(p) == pytest.approx(multitest.multipletests(p, method="holm")[1])


def test_ties_with_the_best_and_domination():
    judge = judge_frame({"best": (4.0, 4.0), "close": (3.95, 4.3), "worse": (2.5, 2.5)}, n_items=60, seed=2)
    systems, dominated, _, _ = systems_table(judge, ["clarity", "accuracy"], n_resamples=1000, seed=0)
    tied = systems[systems.tied_with_best]
    assert set(tied.system) == {"best", "close"}
    assert set(dominated) == {"worse"} and dominated["worse"] in {"best", "close"}
    assert (systems.loc[systems.system == "worse", "dominated_by"] != "").all()


def test_pairwise_verdicts_become_win_shares(tmp_path, capsys):
    lines = [json.dumps({"id": f"d{i}", "system": f"{a}|{b}", "system_1": a, "system_2": b, "criterion": "pref",
                         "score": None, "label": verdict, "order_disagreement": verdict == "0"})
             for i, verdicts in enumerate([("1", "1", "0"), ("1", "2", "1"), ("0", "1", "1"), ("1", "1", "2")])
             for (a, b), verdict in zip([("x", "y"), ("x", "z"), ("y", "z")], verdicts)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert run_cli("--judgments", path, "--bootstrap", 100, "--output-dir", tmp_path / "out") == 0
    systems = pd.read_csv(tmp_path / "out" / "systems.csv").set_index("system")
    # x: d0 (1+1)/2, d1 (1+0)/2, d2 (0.5+1)/2, d3 (1+1)/2 -> mean 0.8125, computed by hand.
    assert systems.loc["x", "mean"] == pytest.approx(np.mean([1.0, 0.5, 0.75, 1.0]))
    assert systems.loc["x", "rank"] == 1
    items = pd.read_csv(tmp_path / "out" / "items.csv").set_index("item_id")
    assert items.loc["d0", "n_order_disagreement"] == 1 and items.loc["d1", "n_order_disagreement"] == 0


# -- items --------------------------------------------------------------------------------------------------------


def test_judgment_uncertainty_from_what_the_run_recorded(tmp_path):
    def line(**fields):
        base = {"id": "d1", "system": "s", "criterion": "c", "score": 3.0, "rubric": "toy@1", "model": "m"}
        return json.dumps({**base, **fields})

    probs = {"1": 0.1, "2": 0.2, "3": 0.4, "4": 0.2, "5": 0.1}
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join([
        line(system="s1", score=1.0), line(system="s2", score=5.0),                # the observed range: 1..5
        line(system="s3", spread=1.0), line(system="s4", probs=probs),
        line(system="s5", score=None, error="timeout"), line(system="s6", score=None, na=True),
        line(system="a|b", score=None, label="0", system_1="a", system_2="b", order_disagreement=True),
    ]) + "\n")
    table = judgment_uncertainty(load_judge_scores(path)).set_index(
        pd.Index(["s1", "s2", "s3", "s4", "s5", "s6", "a|b"]))
    assert table.loc["s1", "uncertainty"] == 0.0
    assert table.loc["s3", "spread"] == pytest.approx(1.0 / 2.0)  # spread over half the observed range
    expected = stats.entropy(list(probs.values())) / np.log(5)
    assert table.loc["s4", "entropy"] == pytest.approx(expected)
    assert table.loc["s4", "uncertainty"] == pytest.approx(expected)
    assert table.loc["s5", "uncertainty"] == 1.0 and table.loc["s6", "uncertainty"] == 0.5
    assert table.loc["a|b", "uncertainty"] == 1.0


# -- plan ---------------------------------------------------------------------------------------------------------


def items_frame(count=30, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"item_id": [f"d{i:02d}" for i in range(count)], "n_judgments": rng.integers(4, 9, count),
                         "uncertainty": rng.random(count), "discrimination": rng.random(count)}) \
        .assign(priority=lambda t: t.uncertainty + t.discrimination)


def test_plan_random_part_is_uniform_and_ignores_priorities():
    items = items_frame()
    plan = make_plan(items, 10, "dialogues", 0.5, seed=3)
    assert list(plan.part).count("random") == 5 and list(plan.part).count("targeted") == 5
    shuffled = items.assign(priority=items.priority.sample(frac=1, random_state=1).to_numpy())
    again = make_plan(shuffled, 10, "dialogues", 0.5, seed=3)
    assert set(again.item_id[again.part == "random"]) == set(plan.item_id[plan.part == "random"])
    rest = items[~items.item_id.isin(plan.item_id[plan.part == "random"])]
    assert set(plan.item_id[plan.part == "targeted"]) == set(rest.nlargest(5, "priority").item_id)
    # Over many seeds every dialogue is drawn about equally often (5 of 30 each time): a chi-square test.
    drawn = pd.concat([make_plan(items, 10, "dialogues", 0.5, seed=s).query("part == 'random'").item_id
                       for s in range(600)]).value_counts().reindex(items.item_id, fill_value=0)
    assert stats.chisquare(drawn).pvalue > 0.001


def test_plan_counted_in_judgments_stays_within_budget():
    items = items_frame()
    plan = make_plan(items, 60, "judgments", 0.4, seed=0)
    cost = items.set_index("item_id").n_judgments
    assert cost[plan.item_id].sum() <= 60
    assert cost[plan.item_id[plan.part == "random"]].sum() <= 24
    assert cost[plan.item_id].sum() > 60 - cost.max()  # nearly all of it spent


# -- power --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effect, n", [(0.5, 20), (0.3, 60), (0.8, 8)])
def test_paired_power_matches_a_simulated_t_test(effect, n):
    rng = np.random.default_rng(int(effect * 100) + n)
    samples = rng.normal(effect, 1.0, size=(20000, n))
    simulated = (stats.ttest_1samp(samples, 0.0, axis=1).pvalue < 0.05).mean()
    assert float(paired_power(effect, n)) == pytest.approx(simulated, abs=0.012)


def test_dialogues_needed_is_the_smallest_count():
    for effect in (0.2, 0.5, 1.1):
        n = dialogues_needed(effect, 0.8)
        assert paired_power(effect, n) >= 0.8 > paired_power(effect, n - 1)
    assert dialogues_needed(0.0) is None
    assert dialogues_needed(0.05, rho=0.5, n_judged=100) is None  # not reachable within the judged dialogues


def test_prediction_powered_count_matches_a_simulation():
    rho, effect, judged = 0.8, 0.35, 200
    n = dialogues_needed(effect, 0.8, rho=rho, n_judged=judged)
    assert n < dialogues_needed(effect, 0.8)
    rng = np.random.default_rng(3)
    g = rng.normal(size=(3000, judged))
    d = effect + rho * g + np.sqrt(1 - rho * rho) * rng.normal(size=(3000, judged))
    labelled = np.arange(judged) < n
    result = ppi_mean(np.where(labelled, d, np.nan), 2.0 * g + 1.0)
    separated = ((result.ci_low > 0) | (result.ci_high < 0)).mean()
    assert separated == pytest.approx(0.8, abs=0.03)


# -- the CLI ------------------------------------------------------------------------------------------------------


def run_cli(*args):
    return main(["screen", *map(str, args)])


def test_help_example_runs(capsys, tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as stop:
        main(["screen", "--help"])
    assert stop.value.code == 0
    assert "judge screen --judgments examples/study/judgments.jsonl --budget 6" in capsys.readouterr().out
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert main(["screen", "--judgments", "examples/study/judgments.jsonl", "--budget", "6", "--output-dir",
                 str(tmp_path / "plan")]) == 0


def test_end_to_end_writes_the_plan_format(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli("--judgments", JUDGMENTS, "--human", PILOT, "--budget", 8, "--random-share", 0.75, "--seed", 4,
                   "--bootstrap", 200, "--output-dir", out, "--report", tmp_path / "r.html") == 0
    printed = " ".join(capsys.readouterr().out.split())  # prose is folded at 120 columns
    assert "humans must label, per criterion" in printed and "pilot dialogues" in printed
    plan = pd.read_csv(out / "plan.csv", dtype=str)
    assert list(plan.columns) == ["item_id", "part", "reason"]
    assert (plan.part == "random").sum() == 6 and (plan.part == "targeted").sum() == 2
    info = json.loads((out / "plan.json").read_text())
    assert set(info) == {"version", "unit", "budget", "random_share", "seed", "judgments", "judgments_sha256",
                         "plan_sha256", "n_random", "n_targeted", "power"}
    assert info["judgments_sha256"] == hashlib.sha256(JUDGMENTS.read_bytes()).hexdigest()
    assert (info["unit"], info["budget"], info["random_share"], info["seed"]) == ("dialogues", 8, 0.75, 4)
    systems = pd.read_csv(out / "systems.csv")
    assert set(systems.criterion) == {"clarity", "accuracy"} and len(systems) == 6
    items = pd.read_csv(out / "items.csv", dtype={"item_id": str})
    assert len(items) == 16 and items.loc[items.item_id == "d01", "n_failed"].item() == 1
    assert set(items.part.dropna()) == {"random", "targeted"}
    assert "data:image/png;base64," in (tmp_path / "r.html").read_text()
    # A plan in this format feeds `judge estimate` (the fixture plan was written by this verb).
    assert main(["estimate", "--judgments", str(JUDGMENTS), "--human", str(FIXTURES / "labels.csv"),
                 "--plan", str(FIXTURES / "plan")]) == 0


def _unknown_pilot(tmp_path):
    path = tmp_path / "pilot.csv"
    path.write_text(PILOT.read_text() + "nowhere,alpha,ann_a,clarity,3\n")
    return path


BAD_INPUT = [
    ("a budget larger than the data", lambda t: ["--budget", 17],
     "--budget 17 dialogues is more than the data has: 16"),
    ("a judgment budget larger than the data", lambda t: ["--budget", 500, "--budget-unit", "judgments"],
     "--budget 500 judgments is more than the data has: 96"),
    ("an unknown criterion", lambda t: ["--criteria", "clarity,elegance"], "--criteria: no judge scores for elegance"),
    ("pilot labels on dialogues not judged", lambda t: ["--human", _unknown_pilot(t)],
     "pilot.csv:50: item 'nowhere' is not in the judgments"),
    ("a power outside (0, 1)", lambda t: ["--power", 1.5], "--power must be between 0 and 1"),
]


@pytest.mark.parametrize("case, flags, message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, case, flags, message):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.csv").write_text("item_id,part,reason\nkept,random,earlier\n")
    code = run_cli("--judgments", JUDGMENTS, *flags(tmp_path), "--output-dir", out, "--report", out / "r.html")
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert error.startswith("judge screen: error: ") and message in error, error
    assert sorted(p.name for p in out.iterdir()) == ["plan.csv"]
    assert (out / "plan.csv").read_text() == "item_id,part,reason\nkept,random,earlier\n"
