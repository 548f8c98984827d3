"""`judge estimate --judge NAME=FILE ...`: several judges as one cross-fitted predictor (calibration.study.predictor)
against independent computations, planted and recovered, and on the CLI with bad input."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import calibration.study.predictor as predictor
from calibration.study.ppi import ppi_mean
from calibration.study.predictor import cross_fitted_prediction, cross_prediction_lambda
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "examples" / "study"
JUDGMENTS, LABELS, METRICS = FIXTURES / "judgments.jsonl", FIXTURES / "labels.csv", FIXTURES / "metric_scores.csv"
sys.path.insert(0, str(ROOT / "benchmarks"))


def study(rng, dialogues=60, systems=3, weights=(0.7, 0.4, 0.0), n=20):
    """(features (D, S, k), labels (D, S) with NaN where unlabelled, the full labels)."""
    quality = 0.8 * rng.standard_normal((dialogues, 1)) + 0.6 * rng.standard_normal((dialogues, systems))
    w = np.array(weights)
    x = w * quality[..., None] + np.sqrt(1 - w * w) * rng.standard_normal((dialogues, systems, len(w)))
    y = quality + 0.4 * rng.standard_normal((dialogues, systems))
    labelled = rng.permutation(dialogues) < n
    return x, np.where(labelled[:, None], y, np.nan), y


def reference_fold_fits(x, y, folds, penalty):
    """Each fold's ridge regression written out with numpy: features centred per system over all dialogues and
    scaled by their pooled within-system sd, labels centred on their system's mean in the training folds,
    coefficients from np.linalg.lstsq on the penalised (augmented) system. Returns (fold of each dialogue,
    (K, D, S) predictions)."""
    d, s, k = x.shape
    xc = x - x.mean(0)
    xc = xc / np.sqrt((xc ** 2).mean((0, 1)))
    labelled = ~np.isnan(y).all(1)
    rank = np.cumsum(labelled) - 1
    fold = np.where(labelled, rank % folds, -1)
    predictions = []
    for k_fold in range(folds):
        train = labelled & (fold != k_fold)
        yt = y[train] - y[train].mean(0)
        design, target = xc[train].reshape(-1, k), yt.reshape(-1)
        alpha = penalty * np.linalg.eigvalsh(design.T @ design).mean()
        augmented = np.vstack([design, np.sqrt(alpha) * np.eye(k)])
        beta = np.linalg.lstsq(augmented, np.concatenate([target, np.zeros(k)]), rcond=None)[0]
        predictions.append(xc @ beta)
    return fold, np.array(predictions)


def one_candidate(monkeypatch, penalty=0.5):
    """The ridge at one penalty the only candidate (not the judge alone, nor no predictor): nothing chosen."""
    every = predictor.candidate_inverses
    monkeypatch.setattr(predictor, "PENALTIES", np.array([penalty]))

    def first(gram):
        inverses, weights = every(gram)
        return inverses[..., :1, :, :], weights[:1]

    monkeypatch.setattr(predictor, "candidate_inverses", first)


def test_each_fold_is_the_ridge_regression_written_out(monkeypatch):
    one_candidate(monkeypatch)
    x, y, _ = study(np.random.default_rng(1))
    fold, fits = reference_fold_fits(x, y, predictor.FOLDS, 0.5)
    combined = cross_fitted_prediction(x, y)
    labelled = fold >= 0
    held_out = fits[fold[labelled], np.flatnonzero(labelled)]
    np.testing.assert_allclose(combined[labelled], held_out, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(combined[~labelled], fits[:, ~labelled].mean(0), rtol=1e-8, atol=1e-10)


def test_the_estimate_is_the_authors_cross_prediction_with_these_folds(monkeypatch):
    """ppi_py.crossppi_mean_pointestimate with our folds' models (lambda 1) is ppi_mean's estimate with lambda 1."""
    ppi_py = pytest.importorskip("ppi_py", reason="ppi_python (the method authors' library) is not installed")
    one_candidate(monkeypatch)
    x, y, _ = study(np.random.default_rng(2), dialogues=200, n=40)
    fold, fits = reference_fold_fits(x, y, predictor.FOLDS, 0.5)
    combined = cross_fitted_prediction(x, y)
    labelled = fold >= 0
    for s in range(x.shape[1]):
        ours = ppi_mean(y[:, s], combined[:, s], lam=1.0)
        theirs = ppi_py.crossppi_mean_pointestimate(y[labelled, s], fits[fold[labelled], np.flatnonzero(labelled), s],
                                                    fits[:, ~labelled, s].T)
        assert float(ours.estimate) == pytest.approx(float(np.ravel(theirs)[0]), rel=1e-9)


def test_no_labelled_prediction_has_seen_its_own_label():
    x, y, _ = study(np.random.default_rng(3))
    before = cross_fitted_prediction(x, y)
    first = int(np.flatnonzero(~np.isnan(y[:, 0]))[0])
    changed = y.copy()
    changed[first] += 50.0  # an outrageous label moves every other fold's fit, never its own prediction
    after = cross_fitted_prediction(x, changed)
    np.testing.assert_array_equal(before[first], after[first])
    assert not np.allclose(before, after)


def test_repetitions_at_once_equal_one_at_a_time():
    rng = np.random.default_rng(4)
    draws = [study(rng) for _ in range(3)]
    together = cross_fitted_prediction(np.stack([d[0] for d in draws]), np.stack([d[1] for d in draws]))
    for i, (x, y, _) in enumerate(draws):
        np.testing.assert_allclose(together[i], cross_fitted_prediction(x, y), rtol=1e-10, atol=1e-12)


def test_a_useful_jury_beats_its_best_member_and_a_useless_one_costs_nothing():
    rng = np.random.default_rng(5)
    x, y, full = study(rng, dialogues=2000, n=200)
    combined = cross_fitted_prediction(x, y)
    unlabelled = np.isnan(y[:, 0])
    best_alone = np.corrcoef(x[unlabelled, 0, 0], full[unlabelled, 0])[0, 1]
    assert np.corrcoef(combined[unlabelled, 0], full[unlabelled, 0])[0, 1] > best_alone + 0.01
    x_noise = rng.standard_normal(x.shape)
    assert np.allclose(cross_fitted_prediction(x_noise, y[..., :]), 0.0) or \
        np.std(cross_fitted_prediction(x_noise, y)) < 0.05 * np.nanstd(y)


def test_lambda_is_the_unlabelled_share():
    y = np.array([[1.0, 2.0, np.nan, np.nan, np.nan], [1.0, np.nan, np.nan, np.nan, np.nan]])
    f = np.array([[0.0, 1.0, 2.0, 3.0, np.nan], [0.0, 1.0, 2.0, 3.0, 4.0]])
    np.testing.assert_allclose(cross_prediction_lambda(y, f), [2 / 4, 4 / 5])


@pytest.mark.parametrize("kind, rho, n, systems", [("likert", 0.0, 6, 2), ("likert", 0.0, 10, 2),
                                                     ("gaussian", 0.0, 20, 6), ("likert", 0.7, 10, 6),
                                                     ("gaussian", 0.5, 3, 2), ("gaussian", 0.9, 20, 2)])
def test_planted_means_and_differences_are_recovered(kind, rho, n, systems):
    """benchmarks/labels_coverage.py's cells: coverage at the nominal rate (400 repetitions: 0.925 is 2.5 Monte
    Carlo se below 0.95 for 2 systems) and never wider than human-only on average (a useless or weak jury at 10
    labels: 1.000-1.002 measured on 2,000 studies; the judge alone 1.004-1.028)."""
    from labels_coverage import run_cell

    out = run_cell(kind, rho, n, systems, 100, 400, seed=11 * n + systems)
    for what in ("jury_mean", "jury_diff"):
        assert out[what]["coverage"] >= 0.925, (what, out[what])
        assert out[what]["ratio"] <= 1.005, (what, out[what])
    if rho >= 0.7 and n >= 10:
        assert out["jury_mean"]["ratio"] < 0.9


def run_cli(*args):
    try:
        return main(["estimate", *map(str, args)])
    except SystemExit as stop:  # argparse's own errors (a malformed NAME=FILE)
        return stop.code


def test_cli_jury_of_the_judgments_and_two_metrics(tmp_path, capsys):
    out = tmp_path / "out"
    code = run_cli("--judgments", JUDGMENTS, "--human", LABELS, "--judge", f"rouge-1={METRICS}",
                   "--judge", f"bartscore_s_h={METRICS}", "--output-dir", out)
    printed = capsys.readouterr().out
    assert code == 0
    assert "one predictor from the judgments and 2 more (rouge-1, bartscore_s_h)" in printed
    table = pd.read_csv(out / "estimates.csv")
    alone = calibration_estimate()
    # The same human-only intervals, and the PPI estimate moved by the jury (not the judge alone).
    pd.testing.assert_series_equal(table["human_only_ci_low"], alone["human_only_ci_low"])
    assert not np.allclose(table["estimate"], alone["estimate"])
    summary = (out / "summary.json").read_text()
    assert "rouge-1" in summary and "sha256" in summary


def calibration_estimate():
    import calibration

    return calibration.estimate(JUDGMENTS, LABELS).estimates


def _foreign_metric(tmp_path):
    path = tmp_path / "foreign.csv"
    pd.DataFrame({"item_id": ["q1", "q2"], "system": ["x", "y"], "criterion": "accuracy",
                  "score": [1.0, 2.0]}).to_csv(path, index=False)
    return path


BAD_INPUT = [
    ("NAME=FILE without a name", lambda t: ["--judge", f"={METRICS}"], "expected NAME=FILE"),
    ("a judge file that is missing", lambda t: ["--judge", f"m={t / 'absent.csv'}"], "absent.csv"),
    ("one name twice", lambda t: ["--judge", f"rouge-1={METRICS}", "--judge", f"rouge-1={METRICS}"],
     "--judge name 'rouge-1' is given twice"),
    ("a judge of another study", lambda t: ["--judge", f"other={_foreign_metric(t)}"],
     "--judge other: scores no dialogue and system of --judgments"),
    ("a jury for pairwise estimates", lambda t: ["--judge", f"rouge-1={METRICS}", "--baseline", "alpha"],
     "--judge does not apply to pairwise estimates"),
]


@pytest.mark.parametrize("case, flags, message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, case, flags, message):
    out = tmp_path / "out"
    out.mkdir()
    (out / "estimates.csv").write_text("kept from before\n")
    code = run_cli("--judgments", JUDGMENTS, "--human", LABELS, *flags(tmp_path), "--output-dir", out)
    error = capsys.readouterr().err
    assert code == 2
    assert message in error and "Traceback" not in error
    assert (out / "estimates.csv").read_text() == "kept from before\n"
    assert sorted(p.name for p in out.iterdir()) == ["estimates.csv"]


def test_the_predictor_of_differences_ignores_what_a_dialogue_does_to_every_system():
    """contrasts=True: predictions sum to 0 over a dialogue's systems, and a shift of a dialogue's features (or
    labels) shared by all its systems changes nothing: paired differences cannot see it."""
    rng = np.random.default_rng(8)
    x, y, _ = study(rng, dialogues=80, systems=4, n=30)
    base = cross_fitted_prediction(x, y, contrasts=True)
    np.testing.assert_allclose(base.sum(-1), 0.0, atol=1e-10)
    shift = rng.normal(size=(80, 1))
    moved = cross_fitted_prediction(x + 5.0 * shift[..., None], y + shift, contrasts=True)
    np.testing.assert_allclose(moved, base, atol=1e-8)
    levels = cross_fitted_prediction(x + 5.0 * shift[..., None], y + shift)
    assert not np.allclose(levels, cross_fitted_prediction(x, y))  # the level predictor does see it


def test_screen_with_judges_and_no_pilot_takes_their_disagreement_as_doubt(tmp_path):
    """No pilot: the judges are no predictor (power.csv as without them) but where they disagree is doubt."""
    code = main(["screen", "--judgments", str(JUDGMENTS), "--judge", f"rouge-1={METRICS}", "--output-dir",
                 str(tmp_path / "out")])
    assert code == 0
    items = pd.read_csv(tmp_path / "out" / "items.csv")
    assert items["mean_jury_disagreement"].notna().all() and (items["mean_jury_disagreement"] > 0).any()
    assert main(["screen", "--judgments", str(JUDGMENTS), "--output-dir", str(tmp_path / "alone")]) == 0
    assert pd.read_csv(tmp_path / "out" / "power.csv").equals(pd.read_csv(tmp_path / "alone" / "power.csv"))


DIALSUMMEVAL = Path(__import__("os").environ.get("JUDGE_SHARED_DATA", ROOT.parent / "shared" / "data")) / "dialsummeval"


@pytest.mark.skipif(not (DIALSUMMEVAL / "annotations.csv").exists(),
                    reason=f"DialSummEval data not found at {DIALSUMMEVAL} (set JUDGE_SHARED_DATA)")
def test_screen_power_uses_the_jury_on_a_real_pilot(tmp_path):
    """DialSummEval, 4 systems, a 40-dialogue relevance pilot: with QuestEval and four metrics as one predictor the
    power table measures rho out of fold and its count never exceeds the human-only one."""
    import calibration

    metrics = pd.read_csv(DIALSUMMEVAL / "metric_scores.csv", dtype=str)
    systems = ["LEAD-3", "UniLM", "BART", "PGN"]
    metrics = metrics[metrics.system.isin(systems)].drop(columns=["dataset"])
    metrics.to_csv(tmp_path / "metrics.csv", index=False)
    labels = pd.read_csv(DIALSUMMEVAL / "annotations.csv", dtype=str)
    pilot_items = sorted(metrics.item_id.unique())[:40]
    labels[labels.system.isin(systems) & (labels.criterion == "relevance") & labels.item_id.isin(pilot_items)] \
        .to_csv(tmp_path / "pilot.csv", index=False)
    names = ["rouge-1", "bertscore_f1", "bartscore_s_h", "moverscore"]
    result = calibration.screen(tmp_path / "metrics.csv", tmp_path / "pilot.csv", score_column="questeval",
                                scale=(1, 5), bootstrap=200, judges={n: tmp_path / "metrics.csv" for n in names})
    row = result.power.iloc[0]
    assert row.n_pilot == 40 and np.isfinite(row.rho)
    assert row.dialogues_with_judge <= row.dialogues_human_only


def test_fit_leverage_is_the_ridge_coefficients_covariance_written_out(monkeypatch):
    """fit_leverage: each fold's (X'X + a)^-1 X'X (X'X + a)^-1 with numpy (one penalty), averaged over the folds,
    between each system's gap of unlabelled-minus-labelled mean standardised predictors."""
    from calibration.study.predictor import fit_leverage

    one_candidate(monkeypatch)
    x, y, _ = study(np.random.default_rng(4))
    d, s, k = x.shape
    xc = x - x.mean(0)
    xc = xc / np.sqrt((xc ** 2).mean((0, 1)))
    labelled = ~np.isnan(y).all(1)
    fold = np.where(labelled, (np.cumsum(labelled) - 1) % predictor.FOLDS, -1)
    covariances = []
    for k_fold in range(predictor.FOLDS):
        design = xc[labelled & (fold != k_fold)].reshape(-1, k)
        gram = design.T @ design
        inverse = np.linalg.inv(gram + 0.5 * np.linalg.eigvalsh(gram).mean() * np.eye(k))
        covariances.append(inverse @ gram @ inverse)
    covariance = np.mean(covariances, 0)
    gap = xc[~labelled].mean(0) - xc[labelled].mean(0)  # (S, k)
    _, fit = cross_fitted_prediction(x, y, with_fit=True)
    np.testing.assert_allclose(fit_leverage(*fit), np.einsum("si,ij,sj->s", gap, covariance, gap), rtol=1e-8)
    a, b = np.array([0, 0]), np.array([1, 2])
    pair_gap = gap[a] - gap[b]
    np.testing.assert_allclose(fit_leverage(*fit, a, b), np.einsum("si,ij,sj->s", pair_gap, covariance, pair_gap),
                               rtol=1e-8)
