"""Acceptance: the dialogues `judge screen` says humans must label to separate two DialSummEval systems agree with
a simulation on the real labels (draw that many dialogues again and again; the share of studies that separate
the two systems is near the stated power). The judge is an automatic metric; the pilot is the full label set,
so the power analysis sees the real human effect and judge-human correlation.
"""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.study.ppi import ppi_mean
from judge.cli import main

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "dialsummeval"
pytestmark = pytest.mark.skipif(not (DATA / "annotations.csv").exists(),
                                reason=f"DialSummEval data not found at {DATA} (set JUDGE_SHARED_DATA)")
METRIC, CRITERION = "bartscore_s_h", "relevance"
SIMULATIONS = 4000


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """`judge screen` on two systems, then the real per-dialogue differences those two systems have."""
    pair = ("LEAD-3", "UniLM")
    folder = tmp_path_factory.mktemp("power")
    metric = pd.read_csv(DATA / "metric_scores.csv", dtype=str)
    metric[metric.system.isin(pair)][["item_id", "system", METRIC]].to_csv(folder / "judge.csv", index=False)
    labels = pd.read_csv(DATA / "annotations.csv", dtype=str)
    labels = labels[labels.system.isin(pair) & (labels.criterion == CRITERION)]
    labels.to_csv(folder / "pilot.csv", index=False)
    assert main(["screen", "--judgments", str(folder / "judge.csv"), "--score-column", METRIC, "--human",
                 str(folder / "pilot.csv"), "--clean", "--scale", "1,5", "--power", "0.8", "--output-dir",
                 str(folder / "out")]) == 0
    power = pd.read_csv(folder / "out" / "power.csv").iloc[0]
    # The same human scores screen used: cleaned means over annotators, per dialogue and system.
    from calibration.humans import aggregate_humans
    from calibration.io import load_human_labels

    human = aggregate_humans(load_human_labels(folder / "pilot.csv"), clean=True)
    human = human.pivot(index="item_id", columns="system", values="human")
    judge = metric[metric.system.isin(pair)].pivot(index="item_id", columns="system", values=METRIC).astype(float)
    a, b = power.system_a, power.system_b
    return power, (human[a] - human[b]).to_numpy(), (judge[a] - judge[b]).reindex(human.index).to_numpy()


def test_human_only_count_reaches_the_power_in_simulation(study):
    power, human_difference, _ = study
    n = int(power.dialogues_human_only)
    assert 10 <= n <= 100, power
    rng = np.random.default_rng(0)
    draws = human_difference[rng.integers(0, len(human_difference), size=(SIMULATIONS, n))]
    separated = stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05
    print(f"\nhuman-only: screen says {n} dialogues for 80% power; simulated power {separated.mean():.3f}")
    assert separated.mean() == pytest.approx(0.8, abs=0.05)
    # Half as many dialogues fall clearly short: the count is not padded.
    fewer = human_difference[rng.integers(0, len(human_difference), size=(SIMULATIONS, max(2, n // 2)))]
    assert (stats.ttest_1samp(fewer, 0.0, axis=1).pvalue < 0.05).mean() < 0.75


def test_prediction_powered_count_reaches_the_power_in_simulation(study):
    power, human_difference, judge_difference = study
    n = int(power.dialogues_with_judge)
    judged = len(human_difference)
    assert n <= int(power.dialogues_human_only)
    rng = np.random.default_rng(1)
    # Each simulated study: a fresh judged set of 100 dialogues from the real ones, humans label n of them.
    draws = rng.integers(0, judged, size=(SIMULATIONS, judged))
    labelled = np.arange(judged) < n
    result = ppi_mean(np.where(labelled, human_difference[draws], np.nan), judge_difference[draws])
    separated = (result.ci_low > 0) | (result.ci_high < 0)
    print(f"\nwith the judge: screen says {n} dialogues (rho {power.rho:.2f}) for 80% power; simulated power "
          f"{separated.mean():.3f}")
    assert separated.mean() == pytest.approx(0.8, abs=0.05)
