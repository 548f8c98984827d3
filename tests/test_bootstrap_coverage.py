"""Do the 95% intervals cover at 95%? Plant-and-recover simulations at the sizes of the data and the examples.

- calibrate's correlation CIs (percentile bootstrap over dialogues): item and summary level, at DECODA's size
  (20 dialogues x 6 systems) and DialSummEval's (100 x 14). The planted value is the statistic of the model's
  population, computed on 40,000 dialogues drawn from it.
- screen's system-mean CIs (expanded percentile bootstrap over dialogues): at the study example's size (16 dialogues),
  DECODA's (20) and DialSummEval's (100).
- estimate's PPI++ intervals, super-population: the judged dialogues are redrawn (with replacement) from the real
  data each time and the target is the real data's mean, per system and per side, so a standard error 20% too
  small (coverage ~88%) fails.

A plain percentile bootstrap has no n - 1 and no t tails: at 16-20 dialogues it undercovered screen's system
means (0.91-0.94 where 95% is asked), so screen now expands it (calibration/study/screen.py `expanded_tail`:
0.93-0.96). calibrate's and select's summary-level correlation, a mean over dialogues, is expanded the same way
(0.877 -> 0.912 at 20 dialogues x 6 systems; the rest of the gap is the skew of correlations over 6 systems, see
the threshold below and the README). Run with -s to print the measured coverage.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.correlation import PairedScores, bootstrap_ci, level_statistic

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DECODA = SHARED / "decoda_llm_sum_guidelines"
DIALSUMMEVAL = SHARED / "dialsummeval"


def simulate_scores(rng, n_items: int, system_effects: np.ndarray):
    """Human = system + dialogue + noise; judge = a noisy, squashed view of the same quality."""
    quality = (system_effects[None, :] + rng.normal(0, 0.6, (n_items, 1))
               + rng.normal(0, 0.5, (n_items, len(system_effects))))
    human = quality + rng.normal(0, 0.4, quality.shape)
    judge = np.tanh(quality / 2) + rng.normal(0, 0.3, quality.shape)
    return judge, human


def paired(judge, human) -> PairedScores:
    n, j = judge.shape
    return PairedScores("q", np.arange(n), np.arange(j), judge, human)


# (level, statistic, dialogues, systems) -> least coverage accepted; measured with 250 repetitions (-s prints it):
# item pearson 0.948 (20 x 6) / 0.932 (100 x 14); summary pearson 0.912 / 0.948; item spearman 0.956 (20 x 6).
# Unexpanded, the summary level at 20 x 6 measured 0.888 here: the 0.90 below catches losing the expansion.
# The summary level at 20 dialogues still undercovers a little: the expanded interval (plain percentile: 0.877)
# corrects the small n, not the skew of per-dialogue correlations over only 6 systems (skewness -1.75 here; BCa
# on top measured 0.92 in 400 repetitions, not worth its jackknife).
CORRELATION_CASES = {("item", "pearson", 20, 6): 0.90, ("item", "pearson", 100, 14): 0.90,
                     ("summary", "pearson", 20, 6): 0.90, ("summary", "pearson", 100, 14): 0.92,
                     ("item", "spearman", 20, 6): 0.90}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CORRELATION_CASES), ids=lambda c: "-".join(map(str, c)))
def test_correlation_bootstrap_ci_coverage(case):
    level, statistic, n_items, n_systems = case
    rng = np.random.default_rng(n_items * 7 + n_systems)
    effects = np.linspace(-1, 1, n_systems)  # systems are fixed; dialogues are the random part
    truth = float(level_statistic(paired(*simulate_scores(rng, 40_000, effects)), level, statistic))
    repetitions = 250
    covered = below = 0
    for r in range(repetitions):
        data = paired(*simulate_scores(rng, n_items, effects))
        low, high = bootstrap_ci(data, level, statistic, n_resamples=300, seed=r)
        covered += low <= truth <= high
        below += high < truth
    coverage = covered / repetitions
    print(f"\ncorrelation {level} {statistic} n={n_items} J={n_systems}: coverage {coverage:.3f} "
          f"(interval below the truth {below / repetitions:.3f})")
    # 250 repetitions: standard error of a 95% coverage about 1.4 points.
    assert coverage >= CORRELATION_CASES[case]
    assert coverage <= 0.995  # far too wide would be wrong too


@pytest.mark.slow
# Plain percentile (before the expansion), 400 repetitions: 0.908-0.928 per system at 16 dialogues, 0.918-0.942 at 20,
# 0.930-0.960 at 100; expanded percentile, 300 repetitions: 0.933-0.947 at 16, 0.940-0.950 at 20, 0.930-0.957 at 100.
@pytest.mark.parametrize("n_items, minimum", [(16, 0.92), (20, 0.92), (100, 0.92)])
def test_screen_system_mean_ci_coverage(n_items, minimum):
    from calibration.study.systems import systems_table

    rng = np.random.default_rng(n_items)
    systems = ["alpha", "beta", "gamma"]
    effects = np.array([0.8, 0.0, -0.5])
    # Likert judge scores 1..5: a dialogue effect shared by the systems, clipped and rounded (skewed, discrete).
    population = np.clip(np.round(3 + effects[None, :] + rng.normal(0, 0.9, (200_000, 1))
                                  + rng.normal(0, 0.7, (200_000, 3))), 1, 5)
    truth = population.mean(axis=0)
    repetitions = 300
    covered = np.zeros(3)
    for r in range(repetitions):
        sample = population[rng.integers(0, len(population), n_items)]
        judge = pd.DataFrame([{"item_id": f"d{i}", "system": s, "criterion": "q", "score": sample[i, k],
                               "status": "ok"} for i in range(n_items) for k, s in enumerate(systems)])
        table = systems_table(judge, ["q"], n_resamples=300, seed=r)[0].set_index("system")
        for k, s in enumerate(systems):
            covered[k] += table.loc[s, "ci_low"] <= truth[k] <= table.loc[s, "ci_high"]
    coverage = covered / repetitions
    print(f"\nscreen system means n={n_items}: coverage per system {np.round(coverage, 3)}")
    assert coverage.min() >= minimum
    assert coverage.max() <= 0.995


# -- estimate: super-population coverage on the real data, per system, per side ---------------------------------------


def real_matrices(judgments, labels, criteria, clean, score_column=None):
    from calibration.alignment import expand_all_criteria
    from calibration.humans import aggregate_humans
    from calibration.io import load_human_labels, load_judge_scores
    from calibration.study.matrices import study_matrices

    human = aggregate_humans(load_human_labels(labels), clean=clean)
    judge = expand_all_criteria(load_judge_scores(judgments, score_column), criteria)
    return {criterion: study_matrices(judge, human, criterion) for criterion in criteria}


def superpopulation(human, judge, n_labelled, seed, repetitions=2000, se_scale=1.0):
    """(coverage, share below, share above) per row: the judged dialogues redrawn from the real ones each time,
    the first n_labelled of them labelled, the target the real data's mean. `se_scale` shrinks the interval
    around its centre (what a standard error that much too small would give)."""
    from calibration.study.ppi import ppi_mean

    rng = np.random.default_rng(seed)
    keep = ~np.isnan(judge).any(axis=0) & ~np.isnan(human).any(axis=0)  # dialogues that are units for every row
    human, judge = human[:, keep], judge[:, keep]
    count = human.shape[1]
    draws = rng.integers(0, count, size=(repetitions, count))
    sampled_human = np.transpose(human[:, draws], (1, 0, 2))
    sampled_judge = np.transpose(judge[:, draws], (1, 0, 2))
    labelled = np.arange(count) < n_labelled
    result = ppi_mean(np.where(labelled, sampled_human, np.nan), sampled_judge)
    centre = result.estimate
    low = centre - se_scale * (centre - result.ci_low)
    high = centre + se_scale * (result.ci_high - centre)
    target = human.mean(axis=1)
    below = (high < target).mean(axis=0)
    above = (low > target).mean(axis=0)
    return 1 - below - above, below, above


def check_superpopulation(name, table, n_labelled, limits, se_scale=1.0):
    """limits: (least mean coverage over systems, least coverage of any system, most misses on one side, on
    average over systems). Measured with the estimator as it is (lambda tuned from 10 labels, n - 2 degrees of
    freedom, lambda's own error), and with its standard error 20% too small (se x 0.8), over the criteria:

        data, n labelled        coverage mean / worst system     one side, mean       with se x 0.8: mean / worst
        DECODA n=10             0.928-0.949 / 0.847-0.922        up to 0.051           0.886-0.906 / 0.812-0.881
        DECODA n=15             0.950-0.959 / 0.905-0.952        up to 0.037           0.911-0.919 / 0.874-0.910
        DialSummEval n=20       0.945-0.951 / 0.927-0.937        up to 0.039           0.890-0.894 / 0.873-0.878
        DialSummEval n=50       0.950-0.953 / 0.940-0.944        up to 0.031           0.891-0.893 / 0.874-0.881

    DECODA's resolution at 10 labels has one system at 0.847: 20 dialogues on a skewed 1-5 scale, where a t
    interval on ten bunched values misses mostly on one side; every other row holds 0.91 per system. The limits
    sit between the two columns, so each row fails with a standard error 20% too small (tested below).
    """
    least_mean, least_system, most_one_side = limits
    lines = []
    for criterion, m in table.items():
        coverage, below, above = superpopulation(m.human.T, m.judge.T, n_labelled, seed=n_labelled,
                                                 se_scale=se_scale)
        lines.append(f"{name} {criterion} n={n_labelled}: coverage per system min {coverage.min():.3f} "
                     f"mean {coverage.mean():.3f}; misses below mean {below.mean():.3f} (max {below.max():.3f}), "
                     f"above mean {above.mean():.3f} (max {above.max():.3f})")
        # 2000 repetitions: a 95% coverage has a standard error of 0.5 points per system.
        assert coverage.mean() >= least_mean, lines[-1]
        assert coverage.min() >= least_system, lines[-1]
        assert below.mean() <= most_one_side and above.mean() <= most_one_side, lines[-1]
    print("\n" + "\n".join(lines))


DECODA_LIMITS = {10: (0.92, 0.83, 0.06), 15: (0.94, 0.89, 0.045)}
DIALSUMMEVAL_LIMITS = {20: (0.935, 0.915, 0.045), 50: (0.94, 0.93, 0.04)}


def decoda_table():
    return real_matrices(DECODA / "judge_scores.csv", DECODA / "annotations.csv",
                         ["faithfulness", "main_issues", "resolution"], clean=False)


def dialsummeval_table(criteria=("coherence", "consistency", "fluency", "relevance")):
    return real_matrices(DIALSUMMEVAL / "metric_scores.csv", DIALSUMMEVAL / "annotations.csv", list(criteria),
                         clean=True, score_column="bartscore_s_h")


needs_decoda = pytest.mark.skipif(not (DECODA / "annotations.csv").exists(),
                                  reason=f"DECODA data not found at {DECODA} (set JUDGE_SHARED_DATA)")
needs_dialsummeval = pytest.mark.skipif(not (DIALSUMMEVAL / "annotations.csv").exists(),
                                        reason=f"DialSummEval data not found at {DIALSUMMEVAL} (set JUDGE_SHARED_DATA)")


@needs_decoda
@pytest.mark.parametrize("n_labelled", sorted(DECODA_LIMITS))
def test_estimate_superpopulation_coverage_decoda(n_labelled):
    check_superpopulation("DECODA", decoda_table(), n_labelled, DECODA_LIMITS[n_labelled])


@needs_dialsummeval
@pytest.mark.parametrize("n_labelled", sorted(DIALSUMMEVAL_LIMITS))
def test_estimate_superpopulation_coverage_dialsummeval(n_labelled):
    check_superpopulation("DialSummEval", dialsummeval_table(), n_labelled, DIALSUMMEVAL_LIMITS[n_labelled])


@needs_decoda
@needs_dialsummeval
@pytest.mark.parametrize("se_scale", [0.8, 0.5])
def test_the_superpopulation_check_catches_a_standard_error_too_small(se_scale):
    for name, table, limits in (("DialSummEval", dialsummeval_table(["coherence"]), DIALSUMMEVAL_LIMITS),
                                ("DECODA", decoda_table(), DECODA_LIMITS)):
        for n_labelled, limit in limits.items():
            with pytest.raises(AssertionError):
                check_superpopulation(name, table, n_labelled, limit, se_scale=se_scale)
