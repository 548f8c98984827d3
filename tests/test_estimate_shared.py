"""One lambda shared by a criterion's systems (or pairs) below MIN_CROSS_FITTED labels (issue 24): tuned on the
other labelled dialogues of every system (leave one dialogue out), so no row's lambda has seen its own labels; the
estimate written out with numpy; coverage and width against human-only and the oracle, planted and recovered."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calibration.study.ppi import MIN_CROSS_FITTED, ppi_mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def study(rng, systems=3, dialogues=60, n=12, rho=0.6, slopes=None):
    """(labels (S, D) NaN where unlabelled, judge (S, D), full labels): a dialogue effect shared by the systems."""
    dialogue = rng.standard_normal(dialogues)
    y = 3.0 + 0.8 * dialogue + 0.6 * rng.standard_normal((systems, dialogues)) + 0.2 * np.arange(systems)[:, None]
    slopes = np.ones(systems) if slopes is None else np.asarray(slopes)
    f = slopes[:, None] * (rho * (y - y.mean(1, keepdims=True)) + 0.7 * rng.standard_normal((systems, dialogues)))
    labelled = rng.permutation(dialogues) < n
    return np.where(labelled, y, np.nan), f + 10.0, y


def reference_shared(human, judge, confidence=0.95):
    """The shared, cross-fitted estimator with plain loops: each labelled dialogue's lambda from the within-system
    covariances of the other labelled dialogues pooled over systems, PPI++'s denominator with n/m var(f) on all
    judged dialogues, shrunk by t^2 / (1 + t^2); each system's estimate mean_L(y - lambda_i f_i) + mean(lambda_i)
    mean_U(f), se^2 = mean(lambda)^2 var(f) / m + var(y - lambda_i f_i) / n, t on n - 1 (f centred on its judged
    mean)."""
    systems, dialogues = human.shape
    labelled = ~np.isnan(human[0])
    n, m = labelled.sum(), dialogues - labelled.sum()
    f = judge - judge.mean(1, keepdims=True)
    var_f = f.var(1, ddof=1)
    lam = np.zeros(dialogues)
    for i in np.flatnonzero(labelled):
        others = labelled.copy()
        others[i] = False
        c_yf = c_ff = c_yy = c_u = dof = 0.0
        for s in range(systems):
            ys, fs = human[s, others], f[s, others]
            c_yf += np.sum((ys - ys.mean()) * (fs - fs.mean()))
            c_ff += np.sum((fs - fs.mean()) ** 2)
            c_yy += np.sum((ys - ys.mean()) ** 2)
            c_u += (others.sum() - 1) * n / m * var_f[s]
            dof += others.sum() - 1
        r2 = c_yf ** 2 / (c_ff * c_yy)
        t2 = r2 * (dof - 1) / (1 - r2)
        lam[i] = c_yf / (c_ff + c_u) * t2 / (1 + t2)
    rows = []
    for s in range(systems):
        rectified = human[s, labelled] - lam[labelled] * f[s, labelled]
        lam_bar = lam[labelled].mean()
        estimate = rectified.mean() + lam_bar * f[s, ~labelled].mean()
        se = np.sqrt(lam_bar ** 2 * var_f[s] / m + rectified.var(ddof=1) / n)
        q = stats.t.ppf(0.5 + confidence / 2, n - 1)
        rows.append((estimate, se, estimate - q * se, estimate + q * se, lam_bar))
    return np.array(rows)


@pytest.mark.parametrize("systems, n", [(2, 10), (3, 12), (6, 19)])
def test_the_shared_estimator_written_out(systems, n):
    human, judge, _ = study(np.random.default_rng(systems + n), systems=systems, n=n)
    result = ppi_mean(human, judge, confidence=0.9, shared=True)
    expected = reference_shared(human, judge, confidence=0.9)
    for column, name in enumerate(("estimate", "se", "ci_low", "ci_high", "lam")):
        np.testing.assert_allclose(getattr(result, name), expected[:, column], rtol=1e-9, atol=1e-12)


def test_no_lambda_has_seen_its_own_dialogues_labels():
    """Changing dialogue i's label in one system leaves dialogue i's lambda unchanged in every system (the rectified
    terms stay unbiased) and moves every other labelled dialogue's lambda."""
    from calibration.study.ppi import shared_cross_fitted_lambdas

    human, judge, _ = study(np.random.default_rng(3), systems=3, n=12)
    labelled = ~np.isnan(human)
    i = int(np.flatnonzero(labelled[0])[4])

    def lambdas(h):
        y0 = np.where(labelled, h - np.nanmean(h, 1, keepdims=True), 0.0)
        f = judge - judge.mean(1, keepdims=True)
        n, m = labelled.sum(1, keepdims=True) * 1.0, (~labelled).sum(1, keepdims=True) * 1.0
        return shared_cross_fitted_lambdas(labelled, y0, np.where(labelled, f, 0.0), n, m,
                                           f.var(1, ddof=1, keepdims=True), np.ones((3, 1), dtype=bool))

    before = lambdas(human)
    changed = human.copy()
    changed[1, i] += 4.0
    after = lambdas(changed)
    np.testing.assert_allclose(after[:, i], before[:, i], rtol=1e-12)
    others = labelled[0].copy()
    others[i] = False
    assert np.all(np.abs(after[:, others] - before[:, others]) > 1e-9)
    assert np.all(after[:, ~labelled[0]] == 0.0)
    assert np.all(after == after[:1])  # one lambda per dialogue, the same in every system


@pytest.mark.parametrize("systems, n, shared", [
    (1, 12, True),   # a lone row: cross-fitted on its own other labels, not fitted in-sample
    (1, 19, True),
    (2, 10, True),
    (3, 6, False),   # under MIN_TUNED labels: no lambda at all (human-only), shared or not
    (2, 25, False),  # from MIN_CROSS_FITTED on: each row's own cross-fitted lambda
])
def test_which_rows_share(systems, n, shared):
    human, judge, _ = study(np.random.default_rng(11), systems=systems, n=n)
    together, alone = ppi_mean(human, judge, shared=True), ppi_mean(human, judge)
    same = np.allclose(together.ci_high, alone.ci_high) and np.allclose(together.lam, alone.lam)
    assert same != shared
    if systems == 1 and shared:  # the lone row's lambdas are cross_fitted_lambdas' (leave one out), t on n - 1
        np.testing.assert_allclose(together.ci_high - together.estimate,
                                   stats.t.ppf(0.975, n - 1) * together.se, rtol=1e-12)


def test_rows_with_other_slopes_still_cover():
    """The shared lambda is not each system's optimum when the judge's slope differs by system (here 0.3 and 3
    times), but it never saw the labels it corrects: coverage holds (2,000 studies, 2 systems, n = 12)."""
    rng = np.random.default_rng(5)
    reps, dialogues, n = 2000, 80, 12
    human, judge, truth = [], [], []
    for _ in range(reps):
        h, f, y = study(rng, systems=2, dialogues=dialogues, n=n, rho=0.8, slopes=[0.3, 3.0])
        human.append(h), judge.append(f)
    result = ppi_mean(np.array(human), np.array(judge), shared=True)
    truth = 3.0 + 0.2 * np.arange(2)  # the super-population means
    covered = (result.ci_low <= truth) & (truth <= result.ci_high)
    assert covered.mean() >= 0.935, covered.mean()


@pytest.mark.parametrize("kind", ["likert", "gaussian"])
@pytest.mark.parametrize("systems", [2, 6])
def test_planted_means_recovered_and_lambdas_cost_small(kind, systems):
    """labels_coverage.py's studies (100 judged dialogues, a useless and a strong judge), n = 10 and 15: coverage
    >= 0.93 over 1,500 studies; with a useless judge no wider than human-only (+1.5%; each system fitting its own
    lambda: +6-9%); with a strong one (rho 0.9) within 6% of the oracle sqrt(1 - r^2 (1 - n/N)) (own: 5-10%)."""
    from labels_coverage import draw

    big_h, big_j = draw(np.random.default_rng(12345), (200_000,), kind, 0.9, systems)
    truth = big_h.mean(0)
    r2 = np.mean([np.corrcoef(big_h[:, s], big_j[:, s, 0])[0, 1] ** 2 for s in range(systems)])
    for rho in (0.0, 0.9):
        for n in (10, 15):
            rng = np.random.default_rng(int(100 * rho) + n + systems)
            human, judges = draw(rng, (1500, 100), kind, rho, systems)
            labelled = rng.random((1500, 100)).argsort(1) < n
            y = np.moveaxis(np.where(labelled[..., None], human, np.nan), -1, -2)
            result = ppi_mean(y, np.moveaxis(judges[..., 0], -1, -2), shared=True)
            covered = (result.ci_low <= truth) & (truth <= result.ci_high)
            assert covered.mean() >= 0.93, (rho, n, covered.mean())
            ratio = np.mean(result.ci_high - result.ci_low) / np.mean(result.human_only_ci_high -
                                                                      result.human_only_ci_low)
            if rho == 0.0:
                assert ratio <= 1.015, (n, ratio)
            else:
                assert ratio / np.sqrt(1 - r2 * (1 - n / 100)) <= 1.06, (n, ratio)
    assert MIN_CROSS_FITTED == 20  # the shared lambda's range is 10-19 labels
