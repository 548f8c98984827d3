"""What `judge screen --design active` says the study needs: the active design's own count (power.csv's
dialogues_active, its design_factor and active_basis), from a pilot's errors and the inclusion probabilities, or
without a pilot the uniform count at the worst case the design's floor allows. Planted and recovered: the factor
against the simulated variance of the 1/p-weighted mean under screen's own draw, the count against the simulated
power of `judge estimate --plan`'s weighted estimator on studies of that size."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.designs import (
    ACTIVE_FLOOR,
    active_design_factor,
    inclusion_probabilities,
    relative_probabilities,
    systematic_sample,
)
from calibration.study.power import dialogues_needed
from calibration.study.power_table import power_sentence, power_table
from calibration.study.ppi_weighted import ppi_mean_weighted
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "examples" / "study"
JUDGMENTS = FIXTURES / "judgments.jsonl"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _population(signal, size=500, seed=0):
    """One system's dialogues as benchmarks/active_design.py draws them (a judge good on most, bad on 10%), the
    uncertainty marking the bad ones (informative) or shuffled (useless)."""
    from active_design import population

    rng = np.random.default_rng(seed)
    y, f, u = (a[0] for a in population(rng, 1, size, "gaussian", 0.1))
    return y, f, (rng.permutation(u) if signal == "useless" else u)


@pytest.mark.parametrize("signal", ["informative", "useless"])
def test_the_design_factor_is_the_weighted_means_variance_under_screens_draw(signal):
    """active_design_factor(r, p~) against the variance of the Hajek mean of r over 6,000 of screen's own
    fixed-size systematic draws, divided by a uniform draw's exact (1/n - 1/N) S^2: equal within 4 Monte Carlo se
    once the finite population is counted, (N/n D - 1) / (N/n - 1). The informative signal makes it well below 1,
    the useless one above (and both at most 1 / ACTIVE_FLOOR)."""
    y, f, u = _population(signal)
    big_n, n, draws = len(y), 20, 6000
    r = y - np.cov(y, f)[0, 1] / np.var(f, ddof=1) * f  # the residual a known lambda leaves
    items = pd.DataFrame({"item_id": [f"d{i:03d}" for i in range(big_n)], "uncertainty": u})
    relative = relative_probabilities(items, 1.0 - ACTIVE_FLOOR).to_numpy()
    pi = inclusion_probabilities(u, n)
    assert pi == pytest.approx(n * relative / big_n)  # no cap at 20 of 500: p~ is the draw's own
    factor = active_design_factor(r, relative)
    rng = np.random.default_rng(1)
    means = np.empty(draws)
    for k in range(draws):
        chosen = systematic_sample(pi, rng)
        means[k] = np.sum(r[chosen] / pi[chosen]) / np.sum(1.0 / pi[chosen])
    uniform = (1.0 / n - 1.0 / big_n) * np.var(r, ddof=1)
    measured = np.var(means, ddof=1) / uniform
    se = measured * np.sqrt((stats.kurtosis(means, fisher=False) - 1.0) / draws)
    expected = (big_n / n * factor - 1.0) / (big_n / n - 1.0)
    assert measured == pytest.approx(expected, abs=4 * se), (measured, expected, se)
    assert (factor < 0.8) if signal == "informative" else (1.0 < factor < 1.0 / ACTIVE_FLOOR)


def test_the_design_factor_of_values_that_do_not_vary_is_1_and_a_small_spread_counts():
    """Constant values leave no variance for a design to change: factor 1, not 0 / 0. A spread whose squares sum
    below 1 is a spread like any other: mean(v^2 / p~) / mean(v^2), v centred (here 1.33)."""
    relative = np.array([0.5, 1.0, 1.5])
    assert active_design_factor(np.full(3, 4.2), relative) == 1.0
    values = np.array([0.0, 0.1, 0.2])
    v = values - values.mean()
    expected = np.mean(v * v / relative) / np.mean(v * v)
    assert expected == pytest.approx(4.0 / 3.0)
    assert active_design_factor(values, relative) == pytest.approx(expected, rel=1e-12)


def _differences(rng, shape, shift):
    """Paired differences of two systems (sd 1, mean `shift`) and the judge's (its error sd 1.5 on a hard 10% of
    dialogues, 0.25 elsewhere), with an uncertainty that marks the hard ones."""
    hard = rng.random(shape) < 0.1
    d = shift + rng.standard_normal(shape)
    g = d + np.where(hard, 1.5, 0.25) * rng.standard_normal(shape)
    return d, g, np.clip(np.where(hard, 0.9, 0.1) + 0.1 * rng.standard_normal(shape), 0, 1)


@pytest.mark.parametrize("signal", ["informative", "useless"])
def test_the_active_count_reaches_the_power_with_the_weighted_estimator(signal):
    """The count with the design factor measured on 20,000 dialogues (a pilot as large as one likes) gives the
    weighted estimator `judge estimate --plan` runs 80% power (+- 0.05) over 2,000 active studies of that size, each
    on 1,000 freshly drawn dialogues. The uniform count (what screen said before) is at least 20% more labels than
    an informative signal needs (measured: 55 against 40, active power there 0.91) and too few with a useless one
    (55 against 64, active power there 0.75)."""
    rng = np.random.default_rng(2)
    shift, big_n, studies = 0.2, 1000, 2000
    d, g, u = _differences(rng, 20_000, shift)
    shuffle = (lambda a: rng.permuted(a, axis=-1)) if signal == "useless" else (lambda a: a)  # noqa: E731
    u = shuffle(u)
    relative = relative_probabilities(pd.DataFrame({"item_id": np.arange(len(u)), "uncertainty": u}),
                                      1.0 - ACTIVE_FLOOR).to_numpy()
    rho = np.corrcoef(d, g)[0, 1]
    slope, intercept = np.polyfit(g, d, 1)
    factor = active_design_factor(d - intercept - slope * g, relative)
    n = dialogues_needed(shift, 0.8, 0.05, rho, big_n, design_factor=factor,
                         human_factor=active_design_factor(d, relative))
    uniform = dialogues_needed(shift, 0.8, 0.05, rho, big_n)
    if signal == "informative":
        assert 20 <= n <= uniform / 1.2, (n, uniform, factor)
    else:
        assert n > uniform * 1.1, (n, uniform, factor)
    d, g, u = _differences(rng, (studies, big_n), shift)
    u = shuffle(u)
    pi = np.array([inclusion_probabilities(row, n) for row in u])
    labelled = np.zeros((studies, big_n), dtype=bool)
    for k in range(studies):
        labelled[k, systematic_sample(pi[k], rng)] = True
    result = ppi_mean_weighted(np.where(labelled, d, np.nan), g, pi)
    separated = (result.ci_low > 0) | (result.ci_high < 0)
    assert separated.mean() == pytest.approx(0.8, abs=0.05), (separated.mean(), n, uniform)


def _frames(size=60, seed=3, relative_share=1.0 - ACTIVE_FLOOR, shift=1.0):
    """A judge's scores for two systems, a labelled pilot of 30 dialogues and an uncertainty per dialogue."""
    rng = np.random.default_rng(seed)
    ids = [f"d{i:02d}" for i in range(size)]
    quality = rng.standard_normal((size, 2)) + [shift, 0.0]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "status": "ok",
                           "score": quality[k, j] + 0.5 * rng.standard_normal()}
                          for k, i in enumerate(ids) for j, s in enumerate("ab")])
    pilot = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "human": quality[k, j]}
                          for k, i in enumerate(ids[:30]) for j, s in enumerate("ab")])
    systems = pd.DataFrame({"criterion": "c", "system": ["a", "b"], "rank": [1, 2]})
    items = pd.DataFrame({"item_id": ids, "uncertainty": rng.random(size)})
    return judge, pilot, systems, relative_probabilities(items, relative_share)


def test_with_a_pilot_the_factor_is_the_pilots_residuals_weighed_by_one_over_p():
    judge, pilot, systems, relative = _frames()
    row = power_table(judge, systems, ["c"], pilot=pilot, relative=relative).iloc[0]
    wide = judge.pivot(index="item_id", columns="system", values="score")
    g = (wide["a"] - wide["b"]).to_numpy()
    human = pilot.pivot(index="item_id", columns="system", values="human")
    d = (human["a"] - human["b"]).to_numpy()
    fit = stats.linregress(g[:30], d)
    residual = d - fit.intercept - fit.slope * g[:30]
    residual = residual - residual.mean()
    p = relative.to_numpy()[:30]
    factor = np.mean(residual ** 2 / p) / np.mean(residual ** 2)
    assert row.active_basis == "pilot"
    assert row.design_factor == pytest.approx(factor, rel=1e-9)
    centred = d - d.mean()
    assert row.dialogues_active == dialogues_needed(
        row.human_effect, 0.8, 0.05, row.rho, 60, design_factor=factor,
        human_factor=np.mean(centred ** 2 / p) / np.mean(centred ** 2))
    uniform = power_table(judge, systems, ["c"], pilot=pilot).iloc[0]  # a uniform design: the table as before
    assert "dialogues_active" not in uniform and uniform.dialogues_with_judge == row.dialogues_with_judge


def test_without_a_pilot_the_count_is_the_uniform_one_at_the_floors_worst_case():
    judge, _, systems, relative = _frames()
    row = power_table(judge, systems, ["c"], relative=relative).iloc[0]
    worst = 1.0 / relative.min()
    assert row.active_basis == "worst case" and row.design_factor == pytest.approx(worst)
    assert 1.0 < worst <= 1.0 / ACTIVE_FLOOR
    assert row.dialogues_active == dialogues_needed(row.judge_effect, 0.8, 0.05, design_factor=worst)
    assert row.dialogues_active > row.dialogues_human_only
    # A draw that fell back to uniform (share 0) needs what a uniform one needs.
    judge, pilot, systems, flat = _frames(relative_share=0.0)
    row = power_table(judge, systems, ["c"], pilot=pilot, relative=flat).iloc[0]
    assert row.active_basis == "uniform" and row.dialogues_active == row.dialogues_with_judge
    assert row.design_factor == 1.0  # a uniform draw: no inflation of the variance


@pytest.mark.parametrize("with_pilot, said", [(True, "with this active design, more than the 60 judged"),
                                               (False, "with this active design at most")])
def test_the_sentence_says_the_active_count_and_its_basis(with_pilot, said):
    """A difference too small for the 60 judged dialogues with the pilot (no count within them), and the
    no-pilot bound, each said in the plan's sentence."""
    judge, pilot, systems, relative = _frames(shift=0.05 if with_pilot else 1.0)
    table = power_table(judge, systems, ["c"], pilot=pilot if with_pilot else None, relative=relative)
    assert table["dialogues_active"].isna().all() == with_pilot
    assert said in power_sentence(table, 0.8, 0.05)


def test_the_cli_says_what_the_active_design_needs_in_power_csv_plan_json_and_the_sentence(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["screen", "--judgments", str(JUDGMENTS), "--budget", "10", "--random-share", "1", "--design",
                 "active", "--bootstrap", "200", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    power = pd.read_csv(out / "power.csv")
    items = pd.read_csv(out / "items.csv")
    u = items.set_index("item_id")["uncertainty"]
    worst = 1.0 / (ACTIVE_FLOOR + (1.0 - ACTIVE_FLOOR) * u / u.mean()).min()  # every dialogue judged for both
    assert (power["active_basis"] == "worst case").all()
    assert power["design_factor"].to_numpy() == pytest.approx(worst)
    for row in power.itertuples():
        assert row.dialogues_active == dialogues_needed(row.judge_effect, 0.8, 0.05, design_factor=worst)
        assert f"with this active design at most {row.dialogues_active}" in printed
    recorded = json.loads((out / "plan.json").read_text())["power"]
    assert [r["dialogues_active"] for r in recorded] == power["dialogues_active"].tolist()
    assert {r["active_basis"] for r in recorded} == {"worst case"}
