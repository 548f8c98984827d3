"""Helpers of `judge select` (calibration.trust.select) against independent computations, on tables of inputs
that reach each branch: which dialogues can give a summary-level correlation, the jury's mean of the judges
present, the standardised scores, and the labels a judge saves (adjusted r^2 from scipy's Pearson r). Written
after fresh draws of benchmarks/mutation.py left survivors on these edges."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.trust.select import MIN_DIALOGUES, _mean_of_present, _standardise, _varying, _worth

nan = np.nan


def test_a_dialogue_varies_when_two_or_more_present_scores_differ():
    matrix = np.array([[1.0, 2.0, nan], [1.0, nan, nan], [3.0, 3.0, 3.0], [1.0, 2.0, 3.0], [nan, nan, nan],
                       [2.0, nan, 2.0], [nan, 5.0, 4.0]])
    assert _varying(matrix).tolist() == [True, False, False, True, False, False, True]


def test_the_jury_is_the_mean_of_the_judges_that_scored_each_cell():
    stacked = np.array([[[1.0, nan], [nan, nan]], [[3.0, 2.0], [nan, 4.0]]])
    out = _mean_of_present(stacked)
    assert out[0, 0] == 2.0 and out[0, 1] == 2.0 and np.isnan(out[1, 0]) and out[1, 1] == 4.0


def test_standardised_scores_have_mean_0_and_sd_1_over_the_present_cells():
    matrix = np.array([[1.0, 4.0, nan], [2.0, 7.0, 3.0]])
    z = _standardise(matrix)
    values = matrix[~np.isnan(matrix)]
    np.testing.assert_allclose(z[~np.isnan(matrix)], (values - values.mean()) / values.std())
    assert np.isnan(z[0, 2])


@pytest.mark.parametrize("dialogues", [MIN_DIALOGUES - 1, MIN_DIALOGUES, 12, 40])
def test_labels_saved_are_100_times_the_mean_adjusted_r2_over_systems(dialogues):
    rng = np.random.default_rng(dialogues)
    human = rng.normal(size=(dialogues, 3))
    judge = human * np.array([1.0, 0.5, 0.0]) + rng.normal(size=(dialogues, 3))
    judge[0, 1] = nan  # one system judged on a dialogue fewer
    saved = _worth(judge, human)
    adjusted = []
    for s in range(3):
        ok = ~np.isnan(judge[:, s])
        n = ok.sum()
        if n < MIN_DIALOGUES:
            continue
        r = stats.pearsonr(judge[ok, s], human[ok, s])[0]
        adjusted.append(max(0.0, 1 - (1 - r ** 2) * (n - 1) / (n - 2)))
    if adjusted:
        assert saved == pytest.approx(100 * np.mean(adjusted))
    else:
        assert np.isnan(saved)


def test_a_judge_without_a_statistic_on_the_fitting_half_is_never_the_cross_fitted_pick():
    """A constant judge has no correlation on either half (NaN, counted as 0): the judge that agrees with humans
    is picked on both halves, so the cross-fitted best is its standardised scores everywhere. Written after the
    seed-11 draw let the stand-in for NaN become 1.0 (the constant judge picked)."""
    from calibration.trust.select import BEST_PICKED, _cross_fitted

    rng = np.random.default_rng(4)
    human = rng.normal(3, 1, (30, 3))
    scores = {"good": human + rng.normal(0, 0.5, human.shape), "flat": np.full(human.shape, 3.0)}
    items, systems = np.array([f"d{i}" for i in range(30)]), np.array(["a", "b", "c"])
    out = _cross_fitted(scores, human, items, systems, "summary", "pearson", 0, 200, 0.95)
    np.testing.assert_allclose(out[BEST_PICKED], _standardise(scores["good"]))


@pytest.mark.parametrize("missing", ["absent.csv", "absent.jsonl", "folder.csv"])
def test_a_judge_file_that_is_not_there_is_named_exit_2_nothing_written(missing, tmp_path, monkeypatch, capsys):
    """A judge given as a path that is not a file (a CSV too, whose header select reads first for a column named
    after the judge; a folder named like a CSV) is the reader's one line, exit 2, not a traceback."""
    from pathlib import Path

    from judge.cli import main

    study = Path(__file__).resolve().parents[1] / "examples" / "study"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.csv").mkdir()
    assert main(["select", "--human", str(study / "labels.csv"), "--judge", f"a={tmp_path / missing}",
                 "--judge", f"b={study / 'judgments.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(f"judge select: error: {tmp_path / missing}: ")
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == ["folder.csv"]


@pytest.mark.parametrize("missing", ["absent.csv", "folder.csv"])
def test_the_python_function_names_a_judge_file_that_is_not_there(missing, tmp_path):
    """calibration.select given a judge path that is not a file: the reader's CalibrationError naming it, as the CLI
    says it, never an OSError from reading the CSV's header first."""
    from pathlib import Path

    import calibration

    study = Path(__file__).resolve().parents[1] / "examples" / "study"
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(calibration.CalibrationError) as caught:
        calibration.select(study / "labels.csv", {"a": tmp_path / missing, "b": study / "judgments.jsonl"})
    assert str(caught.value).startswith(f"{tmp_path / missing}: ")


@pytest.mark.parametrize("confidence", ["0.9", None, 1.0, 0.3, 0.49])
def test_a_confidence_that_is_not_a_level_is_refused_in_the_clis_words(confidence):
    """calibration.select's confidence: a text, None, 1 or below one half is refused naming --confidence and the
    value, as the CLI says it (never a TypeError from comparing a text with a number)."""
    from pathlib import Path

    import calibration

    study = Path(__file__).resolve().parents[1] / "examples" / "study"
    with pytest.raises(calibration.CalibrationError) as caught:
        calibration.select(study / "labels.csv", {"a": study / "judgments.jsonl", "b": study / "judgments_rerun.jsonl"},
                           confidence=confidence)
    assert str(caught.value) == f"--confidence must be between 0.5 and 1, got {confidence!r}"
