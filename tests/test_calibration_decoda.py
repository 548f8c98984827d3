"""DECODA (RATP call centre): the DeepSeek-R1 judge against three annotators and their own ceiling."""

import os
from pathlib import Path

import pandas as pd
import pytest

from calibration.agreement import krippendorff_alpha
from calibration.calibrate.calibrate import analyse
from calibration.io import load_human_labels, load_judge_scores

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "decoda_llm_sum_guidelines"
pytestmark = pytest.mark.skipif(not (DATA / "annotations.csv").exists(),
                                reason=f"DECODA data not found at {DATA} (set JUDGE_SHARED_DATA)")
CRITERIA = ("faithfulness", "main_issues", "resolution", "sub_issues")
SYSTEMS = ("reference", "BARThez", "3.5-Baseline", "3.5-G_O_A→B", "4-Baseline", "4-G_O_A→B")

# Figures reported in the data README (decoda_convert.py).
ALPHA = {"faithfulness": (0.469, 0.384), "main_issues": (0.473, 0.393), "resolution": (0.643, 0.586),
         "sub_issues": (0.734, 0.786)}
JUDGE_ITEM_LEVEL = {"faithfulness": (0.623, 0.556, 0.450), "main_issues": (0.657, 0.455, 0.379),
                    "resolution": (0.539, 0.494, 0.411), "sub_issues": (0.541, 0.531, 0.470)}
HUMAN_SYSTEM_MEANS = {"faithfulness": (3.72, 2.17, 4.02, 3.97, 4.13, 3.93),
                      "main_issues": (4.15, 2.32, 4.30, 4.47, 4.37, 4.30),
                      "resolution": (3.25, 2.22, 4.18, 4.20, 2.70, 4.05),
                      "sub_issues": (3.22, 1.00, 2.67, 3.67, 1.44, 2.67)}
JUDGE_FAITHFULNESS_MEANS = (3.65, 1.70, 4.00, 3.20, 4.00, 4.15)


@pytest.fixture(scope="module")
def results():
    labels = load_human_labels(DATA / "annotations.csv")
    judge = load_judge_scores(DATA / "judge_scores.csv")
    return labels, judge, analyse(judge, labels, n_resamples=1000, seed=0)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_annotator_alpha(results, criterion):
    labels = results[0]
    interval, ordinal = ALPHA[criterion]
    assert krippendorff_alpha(labels, criterion, "interval") == pytest.approx(interval, abs=5e-4)
    assert krippendorff_alpha(labels, criterion, "ordinal") == pytest.approx(ordinal, abs=5e-4)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_judge_vs_human_mean_item_level(results, criterion):
    table = results[2].correlations.set_index(["criterion", "level", "statistic"])["value"]
    observed = [table[(criterion, "item", s)] for s in ("pearson", "spearman", "kendall")]
    assert observed == pytest.approx(JUDGE_ITEM_LEVEL[criterion], abs=5e-4)


def test_system_level_pearson_and_means(results):
    calibration = results[2]
    table = calibration.correlations.set_index(["criterion", "level", "statistic"])["value"]
    for criterion in ("faithfulness", "main_issues", "resolution"):
        assert 0.925 <= table[(criterion, "system", "pearson")] <= 0.965
    means = calibration.system_means.set_index(["criterion", "system"])
    # Sub-issues are left out: the README averages annotator cells (1 to 3 per summary there), whereas
    # system means here average per-summary means, as DialSummEval defines them.
    for criterion in ("faithfulness", "main_issues", "resolution"):
        expected = HUMAN_SYSTEM_MEANS[criterion]
        assert [means.loc[(criterion, s), "human_mean"] for s in SYSTEMS] == pytest.approx(expected, abs=0.006)
    assert [means.loc[("faithfulness", s), "judge_mean"] for s in SYSTEMS] == pytest.approx(
        JUDGE_FAITHFULNESS_MEANS, abs=1e-9)


def test_coverage_counts_sub_issues_apart(results):
    coverage = results[2].coverage.set_index("criterion")
    assert coverage.loc["sub_issues", "pairs_used"] == 36
    # The judge rated sub-issues for all 120 summaries, the humans only for 36; two answers did not parse.
    assert coverage.loc["sub_issues", "human_missing"] + coverage.loc["sub_issues", "judge_failed"] == 84
    assert (coverage.set_index(coverage.index).loc[["faithfulness", "main_issues", "resolution"],
                                                   "pairs_used"] == 120).all()


def test_judge_against_the_annotators_ceiling(results):
    ceiling = results[2].ceiling
    assert set(ceiling.criterion) == set(CRITERIA) and (ceiling.n_annotators == 3).all()
    item = ceiling[(ceiling.level == "item") & (ceiling.statistic == "pearson")].set_index("criterion")
    assert item.loc["faithfulness", "judge"] == pytest.approx(0.623, abs=5e-4)
    # Leave-one-annotator-out: every annotator's figure lies within [min, max] and the ceiling is their mean.
    assert ((ceiling.ceiling_min <= ceiling.ceiling + 1e-12) & (ceiling.ceiling <= ceiling.ceiling_max + 1e-12)).all()
    # Every annotator here labels every summary: the like-for-like fraction is the matched judge over the ceiling.
    fraction = item["judge_matched"] / item["ceiling"]
    assert fraction.to_numpy() == pytest.approx(item["fraction_of_ceiling"].to_numpy())
    # Sub-issues: the judge is far below the annotators (who agree strongly on 36 summaries).
    assert item.loc["sub_issues", "fraction_of_ceiling"] < 0.8
    alpha = results[2].alpha.set_index(["criterion", "level"])
    assert alpha.loc[("faithfulness", "interval"), "alpha_humans"] == pytest.approx(0.469, abs=5e-4)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print("\nDECODA: judge vs human mean, and the human ceiling (raw labels)")
        print(ceiling[[c for c in ceiling.columns if not c.startswith("annotator:")]].round(3).to_string(index=False))
        print(results[2].alpha.round(3).to_string(index=False))
