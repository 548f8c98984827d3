"""Properties of the pairwise estimate (calibration.study.pairwise) that whole families of bugs break: every number
of the Bradley-Terry fit (strengths, cluster-sandwich covariance, tuned lambda, degrees of freedom, intervals)
recomputed from the PPI loss written out here and minimised by scipy; the win rates' Agresti-Coull intervals from
the votes by hand; rank sets against a brute-force count and the max-t quantile against scipy's multivariate t;
invariances (rows reordered, a pair's orientation turned round, dialogues and systems renamed); and exact small cases
at every boundary (a score of exactly 0 or 1, a failed judgment, a system that won every pair).

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py (constants, dropped
terms, swapped comparisons), not against any one of them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats
from test_pairwise_estimate import SYSTEMS, study

import calibration
from calibration.errors import CalibrationError
from calibration.study.bradley_terry import bradley_terry, newton, set_apart
from calibration.study.pairs import Pairs, judge_predictions, read_pairs
from calibration.study.pairwise import pairwise_estimate
from calibration.study.rank_sets import max_t_quantile, rank_sets


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def prepared(judge, labels):
    return labels.assign(line=range(2, len(labels) + 2), label=None, na=False)


def pairs_of(judge, labels) -> Pairs:
    return read_pairs(judge, prepared(judge, labels), "quality", "labels")


def partly_labelled(seed=0, dialogues=80, labelled=24, drop=0.3, **options):
    """study() with a share of the labelled dialogues' pairs left unvoted: a labelled dialogue then stands for all its
    pairs through the weight pairs / labelled pairs (r != 1), which a single-pair design never exercises."""
    judge, labels = study(seed=seed, dialogues=dialogues, labelled=labelled, extra=2, **options)
    # a random extra pair drawn twice in a dialogue (in either order) is kept once
    unordered = lambda f: f["item_id"] + ":" + f["system"].map(lambda s: "|".join(sorted(s.split("|"))))  # noqa: E731
    judge = judge[~unordered(judge).duplicated()].reset_index(drop=True)
    labels = labels[unordered(labels).isin(set(judge["item_id"] + ":" + judge["system"].map(
        lambda s: "|".join(sorted(s.split("|"))))))]
    labels = labels[~unordered(labels).duplicated()].reset_index(drop=True)
    rng = np.random.default_rng(seed + 100)
    keep = rng.random(len(labels)) >= drop
    first = ~labels["item_id"].duplicated()  # every labelled dialogue keeps at least one vote
    return judge, labels[keep | first].reset_index(drop=True)


# -- the PPI Bradley-Terry fit written out ------------------------------------------------------------------------


class Reference:
    """The PPI loss for Bradley-Terry with dialogues as clusters, from the module docstring's formulas, in plain
    loops over dialogues (no code shared with calibration.study.pairwise)."""

    def __init__(self, data: Pairs, baseline: int):
        k = len(data.systems)
        self.x = np.zeros((len(data.first), k))
        for row, (a, b) in enumerate(zip(data.first, data.second)):
            self.x[row, a] += 1.0
            self.x[row, b] -= 1.0
        self.x = np.delete(self.x, baseline, axis=1)
        self.f, self.h = data.judge, data.human
        lab = ~np.isnan(data.human)
        frame = pd.DataFrame({"d": data.dialogue, "lab": lab})
        per = frame.groupby("d").size()
        voted = frame.groupby("d")["lab"].sum()
        self.L = [d for d in per.index if voted[d] > 0]
        self.U = [d for d in per.index if voted[d] == 0]
        self.rows = {d: np.flatnonzero(data.dialogue == d) for d in per.index}
        self.weight = {d: per[d] / voted[d] for d in self.L}
        self.lab = lab

    def loss(self, theta, lam):
        n, m = len(self.L), len(self.U)
        if m == 0:
            lam = 0.0
        total = 0.0
        for d in self.L:
            for i in self.rows[d]:
                if self.lab[i]:
                    eta = self.x[i] @ theta
                    soft = np.logaddexp(0.0, eta)
                    total += self.weight[d] * ((soft - self.h[i] * eta) - lam * (soft - self.f[i] * eta)) / n
        for d in self.U:
            for i in self.rows[d]:
                eta = self.x[i] @ theta
                total += lam * (np.logaddexp(0.0, eta) - self.f[i] * eta) / m
        return total

    def fit(self, lam):
        return optimize.minimize(lambda t: self.loss(t, lam), np.zeros(self.x.shape[1]), method="BFGS",
                                 options={"gtol": 1e-10}).x

    def gradients(self, theta):
        """Per-dialogue gradient sums: human on L, judge on L, judge on U."""
        p = sigmoid(self.x @ theta)
        gh = np.array([sum(self.weight[d] * self.x[i] * (p[i] - self.h[i]) for i in self.rows[d] if self.lab[i])
                       for d in self.L])
        gf_l = np.array([sum(self.weight[d] * self.x[i] * (p[i] - self.f[i]) for i in self.rows[d] if self.lab[i])
                         for d in self.L])
        gf_u = np.array([sum(self.x[i] * (p[i] - self.f[i]) for i in self.rows[d]) for d in self.U]).reshape(
            len(self.U), self.x.shape[1])
        return gh, gf_l, gf_u, p

    def hessian(self, theta, lam):
        n, m = len(self.L), len(self.U)
        p = sigmoid(self.x @ theta)
        out = np.zeros((self.x.shape[1],) * 2)
        for d in self.L:
            for i in self.rows[d]:
                if self.lab[i]:
                    out += (1.0 - lam) * self.weight[d] / n * p[i] * (1 - p[i]) * np.outer(self.x[i], self.x[i])
        for d in self.U:
            for i in self.rows[d]:
                out += lam / m * p[i] * (1 - p[i]) * np.outer(self.x[i], self.x[i])
        return out

    def covariance(self, theta, lam):
        n, m = len(self.L), len(self.U)
        gh, gf_l, gf_u, _ = self.gradients(theta)
        h_inv = np.linalg.inv(self.hessian(theta, lam))
        meat = np.cov(gh - lam * gf_l, rowvar=False) / n
        if lam != 0.0 and m >= 1:  # one judged-only dialogue: the judge's spread over every dialogue
            meat = meat + lam ** 2 * np.cov(gf_u if m >= 2 else np.vstack([gf_l, gf_u]), rowvar=False) / m
        return h_inv @ meat @ h_inv

    def tuned_lambda(self, theta):
        n, m = len(self.L), len(self.U)
        gh, gf_l, gf_u, _ = self.gradients(theta)
        h_inv = np.linalg.inv(self.hessian(theta, 1.0))
        cross = (gh - gh.mean(0)).T @ (gf_l - gf_l.mean(0)) / (n - 1)
        var_f = np.cov(np.vstack([gf_l, gf_u]), rowvar=False)
        lam = np.trace(h_inv @ (cross + cross.T) @ h_inv) / (2 * (1 + n / m) * np.trace(h_inv @ var_f @ h_inv))
        return float(np.clip(lam, 0.0, 1.0))


@pytest.fixture(scope="module")
def clustered():
    judge, labels = partly_labelled(seed=21)
    data = pairs_of(judge, labels)
    return judge, labels, data, data.systems.index("base"), Reference(data, data.systems.index("base"))


@pytest.mark.parametrize("lam", [0.0, 0.35, 1.0])
def test_fixed_lambda_fit_and_sandwich_equal_the_loss_written_out(clustered, lam):
    _, _, data, b, ref = clustered
    assert any(w != 1.0 for w in ref.weight.values())  # partly labelled dialogues are in play
    fit = bradley_terry(data, b, 0.95, lam=lam)
    theta = ref.fit(lam)
    assert np.delete(fit.theta, b) == pytest.approx(theta, abs=1e-5)
    cov = ref.covariance(np.delete(fit.theta, b), lam)
    assert np.delete(np.delete(fit.cov, b, 0), b, 1) == pytest.approx(cov, rel=1e-6, abs=1e-12)
    assert fit.theta[b] == 0.0 and (fit.cov[b] == 0).all() and (fit.cov[:, b] == 0).all()
    assert fit.df == len(ref.L) - 1 and fit.lam == lam and fit.n_labelled == len(ref.L)


def test_tuned_lambda_and_its_degrees_of_freedom_follow_ppi_plus_plus(clustered):
    _, _, data, b, ref = clustered
    start = ref.fit(1.0)
    lam = ref.tuned_lambda(start)
    assert 0.0 < lam < 1.0  # an interior lambda: the clip is not what is being checked
    fit = bradley_terry(data, b, 0.95)
    assert fit.lam == pytest.approx(lam, rel=1e-5)
    assert np.delete(fit.theta, b) == pytest.approx(ref.fit(fit.lam), abs=1e-5)
    assert fit.df == len(ref.L) - 2  # a tuned lambda spends a degree of freedom



@pytest.mark.parametrize("labelled", [9, 10])
def test_lambda_is_tuned_from_exactly_ten_labelled_dialogues_and_spends_a_degree_of_freedom(labelled):
    """MIN_TUNED at its edge: 9 labelled dialogues give the human-only fit on 8 degrees of freedom; 10 give
    PPI++'s tuned lambda (the reference's) on n - 2 = 8."""
    judge, labels = partly_labelled(seed=4, dialogues=60, labelled=labelled)
    data = pairs_of(judge, labels)
    b = data.systems.index("base")
    ref = Reference(data, b)
    assert len(ref.L) == labelled
    fit = bradley_terry(data, b, 0.95)
    lam = ref.tuned_lambda(ref.fit(1.0)) if labelled >= 10 else 0.0
    assert fit.lam == pytest.approx(lam, rel=1e-5) and (lam > 0.1) == (labelled >= 10)
    assert np.delete(fit.theta, b) == pytest.approx(ref.fit(lam), abs=1e-5)
    assert fit.df == 8

def test_every_printed_bradley_terry_number_is_the_reference_one(clustered):
    judge, labels, data, b, ref = clustered
    confidence = 0.9
    result = calibration.estimate(judge, labels, baseline="base", confidence=confidence)
    bt = result.estimates[result.estimates["quantity"] == "bradley_terry"].set_index("system")
    n = len(ref.L)
    fit = bradley_terry(data, b, confidence)
    theta, human = np.insert(ref.fit(fit.lam), b, 0.0), np.insert(ref.fit(0.0), b, 0.0)
    se = np.sqrt(np.diag(ref.covariance(np.delete(theta, b), fit.lam)))
    hse = np.sqrt(np.diag(ref.covariance(np.delete(human, b), 0.0)))
    q, qh = stats.t.ppf(0.95, n - 2), stats.t.ppf(0.95, n - 1)
    lab = ~np.isnan(data.human)
    for k, system in enumerate(s for s in data.systems if s != "base"):
        s = data.systems.index(system)
        row = bt.loc[system]
        assert row["estimate"] == pytest.approx(theta[s], abs=1e-5)
        assert row["human_only"] == pytest.approx(human[s], abs=1e-5)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((theta[s] - q * se[k], theta[s] + q * se[k]), abs=1e-5)
        assert (row["human_only_ci_low"], row["human_only_ci_high"]) == pytest.approx(
            (human[s] - qh * hse[k], human[s] + qh * hse[k]), abs=1e-5)
        assert row["width_ratio"] == pytest.approx(se[k] / hse[k], rel=1e-5)
        touches = (data.first == s) | (data.second == s)
        assert row["n_labelled"] == (touches & lab).sum() and row["n_judged"] == touches.sum()
        # worth in votes: the printed widths' ratio, t quantiles included (the tuned lambda's lost degree of freedom)
        assert row["effective_labels"] == pytest.approx((touches & lab).sum() / (q * se[k] / (qh * hse[k])) ** 2,
                                                        rel=1e-5)
        assert row["interval_note"] == ""


def test_human_only_covariance_is_the_cluster_sandwich_around_statsmodels_fit(clustered):
    """lambda = 0: the fit is statsmodels' Bradley-Terry GLM on the votes (a tie half a win, half a loss, a vote of
    a partly labelled dialogue weighing pairs / votes), the covariance the cluster-robust sandwich by dialogue with
    the n / (n - 1) factor of a covariance over n dialogues."""
    import statsmodels.api as sm

    _, _, data, b, ref = clustered
    lab = ref.lab
    x, h = ref.x[lab], data.human[lab]
    w = np.array([ref.weight[d] for d in data.dialogue[lab]])
    groups = data.dialogue[lab]
    xx = np.vstack([x, x])
    yy = np.concatenate([np.ones(len(h)), np.zeros(len(h))])
    ww = np.concatenate([w * h, w * (1 - h)])
    keep = ww > 0
    model = sm.GLM(yy[keep], xx[keep], family=sm.families.Binomial(), freq_weights=ww[keep]).fit(tol=1e-14)
    fit = bradley_terry(data, b, 0.95, human_only=True)
    assert np.delete(fit.theta, b) == pytest.approx(model.params, abs=1e-6)
    p = sigmoid(x @ model.params)
    scores = pd.DataFrame(x * (w * (p - h))[:, None]).groupby(groups).sum().to_numpy()
    bread = np.linalg.inv((x * (w * p * (1 - p))[:, None]).T @ x)
    n = len(scores)
    expected = bread @ (scores.T @ scores) @ bread * n / (n - 1)
    assert np.delete(np.delete(fit.cov, b, 0), b, 1) == pytest.approx(expected, rel=1e-5)


# -- win rates -------------------------------------------------------------------------------------------------------


def _votes_against_base(judge, labels, system):
    """Per dialogue: the judge's prediction and the mean vote of `system`'s pairs with the baseline, on its side."""
    value = {"1": 1.0, "2": 0.0, "0": 0.5}
    mine = judge[judge["system"].isin([f"{system}|base", f"base|{system}"])]
    side = np.where(mine["system_1"] == system, 1.0, -1.0)
    f = (mine["forward"].map(value) + mine["swapped"].map(value)) / 2
    f = pd.Series(np.where(side > 0, f, 1 - f), index=mine["item_id"].to_numpy()).groupby(level=0).mean()
    lab = labels[labels["system"].isin([f"{system}|base", f"base|{system}"])]
    v = lab["score"].map(value)
    h = pd.Series(np.where(lab["system"].str.startswith(system + "|"), v, 1 - v),
                  index=lab["item_id"].to_numpy()).groupby(level=0).mean()
    return f, h


@pytest.mark.parametrize("labelled, confidence", [(12, 0.95), (16, 0.8)])
def test_few_votes_give_the_share_and_agresti_coulls_interval_by_hand(labelled, confidence):
    """Below 20 labelled dialogues the win rate is the share of votes won, its interval the t interval of the votes
    plus two pseudo-wins and two pseudo-losses (n + 4 values, n + 3 df), clipped to [0, 1] and widened to hold the
    share; the same for the human-only column, so the width ratio is 1."""
    judge, labels = study(seed=31, dialogues=60, labelled=labelled)
    result = calibration.estimate(judge, labels, baseline="base", confidence=confidence)
    rows = result.estimates[result.estimates["quantity"] == "win_rate"].set_index("system")
    for system in SYSTEMS[1:]:
        _, h = _votes_against_base(judge, labels, system)
        votes = np.concatenate([h.to_numpy(), [1.0, 1.0, 0.0, 0.0]])
        centre = votes.mean()
        half = stats.t.ppf((1 + confidence) / 2, len(votes) - 1) * votes.std(ddof=1) / np.sqrt(len(votes))
        low = np.clip(min(centre - half, h.mean()), 0.0, 1.0)
        high = np.clip(max(centre + half, h.mean()), 0.0, 1.0)
        row = rows.loc[system]
        assert row["estimate"] == pytest.approx(h.mean(), abs=1e-12)
        assert row["human_only"] == pytest.approx(h.mean(), abs=1e-12)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-10)
        assert (row["human_only_ci_low"], row["human_only_ci_high"]) == pytest.approx((low, high), abs=1e-10)
        assert row["width_ratio"] == pytest.approx(1.0) and row["effective_labels"] == pytest.approx(len(h))


def test_many_votes_use_the_judge_with_pseudo_votes_carrying_its_mean_on_won_and_lost_dialogues():
    """From 20 labelled dialogues: estimate.py's PPI++ mean of the per-dialogue vectors; the interval the same mean
    with four pseudo-votes whose judge predictions are its mean on the dialogues the system won (wins) and lost
    (losses), clipped and widened to hold the estimate; the human-only interval the lambda = 0 one."""
    from calibration.study.ppi import ppi_mean

    judge, labels = study(seed=32, dialogues=120, labelled=40, copy=0.8)
    result = calibration.estimate(judge, labels, baseline="base")
    rows = result.estimates[result.estimates["quantity"] == "win_rate"].set_index("system")
    for system in SYSTEMS[1:]:
        f, h = _votes_against_base(judge, labels, system)
        hh = h.reindex(f.index).to_numpy()
        ff = f.to_numpy()
        plain = ppi_mean(hh, ff)
        labelled = ~np.isnan(hh)
        won, lost = ff[labelled & (hh > 0.5)], ff[labelled & (hh < 0.5)]
        extra_f = [won.mean() if len(won) else ff.mean()] * 2 + [lost.mean() if len(lost) else ff.mean()] * 2
        tuned = ppi_mean(np.concatenate([hh, [1, 1, 0, 0]]), np.concatenate([ff, extra_f]))
        fixed = ppi_mean(np.concatenate([hh, [1, 1, 0, 0]]), np.concatenate([ff, extra_f]), lam=0.0)
        row = rows.loc[system]
        estimate = float(plain.estimate)
        assert row["estimate"] == pytest.approx(estimate, abs=1e-12)
        assert row["ci_low"] == pytest.approx(np.clip(min(float(tuned.ci_low), estimate), 0, 1), abs=1e-12)
        assert row["ci_high"] == pytest.approx(np.clip(max(float(tuned.ci_high), estimate), 0, 1), abs=1e-12)
        assert row["human_only_ci_low"] == pytest.approx(
            np.clip(min(float(fixed.human_only_ci_low), h.mean()), 0, 1), abs=1e-12)
        assert row["human_only_ci_high"] == pytest.approx(
            np.clip(max(float(fixed.human_only_ci_high), h.mean()), 0, 1), abs=1e-12)
        assert row["width_ratio"] < 1.0  # a judge copying 80% of the votes helps


def test_win_rate_and_strength_agree_in_direction_and_order():
    """Monotonicity: the systems' win rates against the baseline and their strengths order them alike when the
    judge and the votes are plentiful, and each sits on the side of 1/2 (of 0) its planted strength says."""
    judge, labels = study(seed=33, dialogues=300, labelled=120, copy=0.9)
    result = calibration.estimate(judge, labels, baseline="base")
    est = result.estimates.set_index(["quantity", "system"])["estimate"]
    wins = est["win_rate"][SYSTEMS[1:]]
    strengths = est["bradley_terry"][SYSTEMS[1:]]
    assert list(wins.sort_values().index) == list(strengths.sort_values().index) == ["gamma", "beta", "alpha", "delta"]
    assert ((wins > 0.5) == (strengths > 0)).all()


# -- invariances -------------------------------------------------------------------------------------------------


def _turned(judge, labels, which):
    """The same study with the pairs `which` selects stated the other way round (B|A, verdicts 1 <-> 2)."""
    swap = {"1": "2", "2": "1", "0": "0"}
    judge = judge.copy()
    rows = which(judge)
    a, b = judge.loc[rows, "system_1"].copy(), judge.loc[rows, "system_2"].copy()
    judge.loc[rows, "system_1"], judge.loc[rows, "system_2"] = b, a
    judge.loc[rows, "system"] = b + "|" + a
    for column in ("forward", "swapped", "label"):
        judge.loc[rows, column] = judge.loc[rows, column].map(swap)
    return judge


def _sorted(result):
    return (result.estimates.sort_values(["quantity", "system"]).reset_index(drop=True),
            result.ranking.sort_values("system").reset_index(drop=True))


def test_reordering_rows_and_turning_pairs_round_changes_nothing():
    judge, labels = partly_labelled(seed=41)
    first = _sorted(calibration.estimate(judge, labels, baseline="base"))
    rng = np.random.default_rng(0)
    shuffled = calibration.estimate(judge.sample(frac=1.0, random_state=1), labels.sample(frac=1.0, random_state=2),
                                    baseline="base")
    # the judgments turned round on a random half of the pairs: the labels still name the old order and are turned
    turned = _turned(judge, labels, lambda f: pd.Series(rng.random(len(f)) < 0.5, index=f.index))
    for other in (_sorted(shuffled), _sorted(calibration.estimate(turned, labels, baseline="base"))):
        pd.testing.assert_frame_equal(first[0], other[0], rtol=1e-7, atol=1e-9)
        pd.testing.assert_frame_equal(first[1], other[1])


def test_renaming_dialogues_and_systems_changes_nothing_but_the_names():
    judge, labels = partly_labelled(seed=42)
    first = _sorted(calibration.estimate(judge, labels, baseline="base"))
    # names that sort the other way round (the systems' and dialogues' indices all change)
    names = {s: f"{chr(ord('z') - k)}_{s}" for k, s in enumerate(sorted(SYSTEMS))}
    dialogues = {d: f"x{999 - k}" for k, d in enumerate(sorted(judge["item_id"].unique()))}

    def rename(frame):
        out = frame.assign(item_id=frame["item_id"].map(dialogues))
        a, b = out["system"].str.split("|", expand=True).T.to_numpy()
        out["system"] = [f"{names[x]}|{names[y]}" for x, y in zip(a, b)]
        for column in ("system_1", "system_2"):
            if column in out:
                out[column] = out[column].map(names)
        return out

    renamed = calibration.estimate(rename(judge), rename(labels), baseline=names["base"])
    back = {v: k for k, v in names.items()}
    est = renamed.estimates.assign(system=renamed.estimates["system"].map(back), baseline="base")
    ranking = renamed.ranking.assign(system=renamed.ranking["system"].map(back))
    est = est.sort_values(["quantity", "system"]).reset_index(drop=True)
    ranking = ranking.sort_values("system").reset_index(drop=True)
    pd.testing.assert_frame_equal(first[0], est, rtol=1e-6, atol=1e-8)
    pd.testing.assert_frame_equal(first[1][["system", "rank"]], ranking[["system", "rank"]])


# -- rank sets and the max-t quantile ------------------------------------------------------------------------------


def test_rank_sets_are_the_brute_force_count_of_differences_surely_above():
    rng = np.random.default_rng(5)
    for _trial in range(6):
        k = 5
        theta = np.concatenate([[0.0], rng.normal(0, 1, k - 1)])
        a = rng.normal(0, 0.3, (k - 1, k - 1))
        small = a @ a.T + 0.01 * np.eye(k - 1)
        cov = np.zeros((k, k))
        cov[1:, 1:] = small
        df = 30.0
        rank, low, high = rank_sets(theta, cov, df, 0.9)
        se = np.sqrt(np.maximum(np.diag(cov)[:, None] + np.diag(cov)[None, :] - 2 * cov, 0))
        q = max_t_quantile(cov, se > 0, df, 0.9)
        above = np.array([[theta[i] - theta[j] - q * se[i, j] > 0 if i != j else False for j in range(k)]
                          for i in range(k)])
        assert rank.tolist() == [1 + sum(theta[j] > theta[i] for j in range(k)) for i in range(k)]
        assert low.tolist() == [1 + above[:, i].sum() for i in range(k)]
        assert high.tolist() == [k - above[i, :].sum() for i in range(k)]
        assert (low <= rank).all() and (rank <= high).all()


def test_max_t_quantile_is_scipys_multivariate_t_and_never_above_bonferroni():
    k = 4
    rng = np.random.default_rng(7)
    a = rng.normal(size=(k, k))
    cov = a @ a.T + 0.5 * np.eye(k)
    usable = ~np.eye(k, dtype=bool)
    df, confidence = 12.0, 0.9
    q = max_t_quantile(cov, usable, df, confidence)
    draws = stats.multivariate_t(loc=np.zeros(k), shape=cov, df=df).rvs(size=200_000, random_state=3)
    i, j = np.nonzero(np.triu(usable, 1))
    se = np.sqrt(cov[i, i] + cov[j, j] - 2 * cov[i, j])
    expected = np.quantile(np.max(np.abs(draws[:, i] - draws[:, j]) / se, axis=1), confidence)
    assert q == pytest.approx(expected, rel=0.03)
    assert q <= stats.t.ppf(1 - (1 - confidence) / (2 * len(i)), df) + 1e-12
    assert q > stats.t.ppf(1 - (1 - confidence) / 2, df)  # several pairs at once: wider than one
    # one usable pair: exactly the two-sided t quantile
    one = np.zeros((k, k), bool)
    one[1, 2] = one[2, 1] = True
    assert max_t_quantile(cov, one, df, confidence) == pytest.approx(stats.t.ppf(1 - (1 - confidence) / 2, df))


def test_rank_sets_without_degrees_of_freedom_or_with_one_system_allow_every_rank():
    theta = np.array([0.0, 2.0, -1.0])
    cov = np.eye(3) * 1e-4
    for df in (0.5, np.nan):
        rank, low, high = rank_sets(theta, cov, df, 0.95)
        assert rank.tolist() == [2, 1, 3] and low.tolist() == [1, 1, 1] and high.tolist() == [3, 3, 3]
    rank, low, high = rank_sets(theta, cov, 1.0, 0.95)  # one degree of freedom is enough
    assert low.tolist() == [2, 1, 3] and high.tolist() == [2, 1, 3]
    rank, low, high = rank_sets(np.array([0.0]), np.zeros((1, 1)), 10.0, 0.95)
    assert rank.tolist() == [1] and low.tolist() == [1] and high.tolist() == [1]
    # an infinite strength ranks first but is never surely above anyone
    rank, low, high = rank_sets(np.array([0.0, np.inf, -1.0]), cov, 10.0, 0.95)
    assert rank.tolist() == [2, 1, 3] and low.tolist() == [1, 1, 2] and high.tolist() == [2, 3, 3]


# -- exact small cases --------------------------------------------------------------------------------------------


def test_judge_predictions_average_both_orders_and_count_failures():
    frame = pd.DataFrame({"forward": ["1", "1", "2", None, "x", "0"], "swapped": ["1", "2", "0", None, "1", None],
                          "label": ["1", "0", "2", "2", None, None]})
    f, failed = judge_predictions(frame)
    assert f.tolist() == [1.0, 0.5, 0.25, 0.0, 0.5, 0.5] and failed == 2
    scores = pd.DataFrame({"label": [None, None, None], "score": [0.0, 1.0, 0.3]})
    f, failed = judge_predictions(scores)
    assert f.tolist() == [0.0, 1.0, 0.3] and failed == 0


@pytest.mark.parametrize("score, ok", [(0.0, True), (1.0, True), (-1e-9, False), (1.0 + 1e-9, False)])
def test_a_pair_score_of_exactly_0_or_1_is_a_probability(score, ok):
    judge, labels = study(seed=51, dialogues=20, labelled=10)
    frame = judge.assign(label=None, forward=None, swapped=None, score=0.5)
    frame.loc[3, "score"] = score
    frame["line"] = range(2, len(frame) + 2)
    if ok:
        assert pairs_of(frame, labels).judge.min() == min(score, 0.5)
    else:
        with pytest.raises(CalibrationError, match="line 5: pair"):
            pairs_of(frame, labels)


def test_newton_minimises_the_weighted_logistic_loss_like_scipy():
    rng = np.random.default_rng(9)
    x = rng.choice([-1.0, 0.0, 1.0], size=(60, 3))
    w = rng.uniform(0.2, 2.0, 60)
    v = w * rng.uniform(0.1, 0.9, 60)
    theta, ok = newton(x, w, v)
    expected = optimize.minimize(lambda t: w @ np.logaddexp(0, x @ t) - v @ (x @ t), np.zeros(3),
                                 method="BFGS", options={"gtol": 1e-12}).x
    assert ok and theta == pytest.approx(expected, abs=1e-6)
    # a separable direction (column 0 always won) runs away: not converged
    v_sep = np.where(x[:, 0] > 0, w, np.where(x[:, 0] < 0, 0.0, v))
    _, ok = newton(x, w, v_sep)
    assert not ok


def test_set_apart_names_winners_losers_and_those_cut_off_by_them():
    """a beats the baseline and d every time -> +1; c loses to the baseline every time -> -1; b and d split their
    pairs but meet the baseline only through a: once a is set apart they are cut off -> 0."""
    systems = ["a", "b", "base", "c", "d"]
    first = np.array([0, 2, 0, 4, 1, 3, 2])
    second = np.array([2, 0, 4, 1, 4, 2, 3])
    human = np.array([1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    data = Pairs("q", systems, first, second, np.arange(7), np.array([f"d{i}" for i in range(7)]), human.copy(),
                 human)
    active, direction = set_apart(data, 2, 0.0)
    assert active.tolist() == [False, False, True, False, False]
    assert direction.tolist() == [1.0, 0.0, 0.0, -1.0, 0.0]
    # nothing is left to fit beside the baseline: no strength, said, not a traceback (an empty fit crashed)
    fit = bradley_terry(data, 2, 0.95, lam=0.0)
    assert not fit.ok and "wins or loses every pair" in fit.note


def test_non_inferiority_is_the_lower_bound_strictly_above_one_half_minus_the_margin():
    judge, labels = study(seed=61, dialogues=150, labelled=50, copy=0.8)
    labels_ = prepared(judge, labels)
    plain = pairwise_estimate(judge, labels_, "base").estimates
    wins = plain[plain["quantity"] == "win_rate"].set_index("system")["ci_low"]
    for system, low in wins.items():
        for margin, expected in ((0.5 - low + 1e-9, "yes"), (0.5 - low - 1e-9, "no")):
            if not 0 <= margin < 0.5:
                continue
            table = pairwise_estimate(judge, labels_, "base", margin=margin).estimates
            row = table[(table["quantity"] == "win_rate") & (table["system"] == system)]
            assert row["noninferior"].item() == expected, (system, low, margin)
            assert (table.loc[table["quantity"] == "bradley_terry", "noninferior"] == "").all()


def test_a_study_where_every_system_but_the_baseline_is_set_apart_says_so_instead_of_a_traceback():
    """Found by the set-apart case above: a beats the baseline every time, c always loses to it, b and d meet it only
    through a. Nothing is left to fit beside the baseline; the fit ended in a ValueError from an empty array."""
    rows, votes = [], []
    for d in range(12):
        for a, b, v in [("a", "base", "1"), ("a", "d", "1"), ("d", "b", "1"), ("b", "d", "1"), ("c", "base", "2")]:
            rows.append({"item_id": f"d{d}", "system": f"{a}|{b}", "criterion": "quality", "score": np.nan,
                         "label": v, "status": "label", "system_1": a, "system_2": b, "rubric": "r@1", "model": "m",
                         "forward": v, "swapped": v})
            if d < 11:  # from MIN_TUNED labelled dialogues on: the tuning's start fit meets the empty set too
                votes.append({"item_id": f"d{d}", "system": f"{a}|{b}", "annotator": "x", "criterion": "quality",
                              "score": v})
    result = calibration.estimate(pd.DataFrame(rows), pd.DataFrame(votes), baseline="base")
    bt = result.estimates[result.estimates["quantity"] == "bradley_terry"]
    assert bt["estimate"].isna().all() and bt["interval_note"].str.contains("wins or loses every pair").all()
    wins = result.estimates[result.estimates["quantity"] == "win_rate"].set_index("system")["estimate"]
    assert wins["a"] == 1.0 and wins["c"] == 0.0


def test_every_dialogue_labelled_is_the_human_fit_and_one_judged_only_dialogue_keeps_the_judge_term():
    """m = 0 (every dialogue has a vote, some pairs unvoted): lambda is 0 and the fit is the votes' alone, their
    dialogues standing for their unvoted pairs; m = 1: the judge's term takes its spread over every dialogue (one
    judged-only dialogue has none of its own), so the interval is wider than the labelled part's alone."""
    judge, labels = partly_labelled(seed=71, dialogues=30, labelled=30)
    data = pairs_of(judge, labels)
    b = data.systems.index("base")
    ref = Reference(data, b)
    assert not ref.U and any(w != 1.0 for w in ref.weight.values())
    fit = bradley_terry(data, b, 0.95)
    assert fit.lam == 0.0 and np.delete(fit.theta, b) == pytest.approx(ref.fit(0.0), abs=1e-5)
    assert np.delete(np.delete(fit.cov, b, 0), b, 1) == pytest.approx(ref.covariance(ref.fit(0.0), 0.0), rel=1e-5)
    for dialogues, unlabelled in ((25, 1), (26, 2)):  # the judged-only term from two such dialogues on
        judge, labels = partly_labelled(seed=72, dialogues=dialogues, labelled=24)
        data = pairs_of(judge, labels)
        ref = Reference(data, b)
        assert len(ref.U) == unlabelled
        for lam in (None, 0.5):
            fit = bradley_terry(data, b, 0.95, lam=lam)
            assert np.isfinite(fit.se[np.arange(len(fit.se)) != b]).all()
            theta = ref.fit(fit.lam)
            assert np.delete(np.delete(fit.cov, b, 0), b, 1) == pytest.approx(ref.covariance(theta, fit.lam),
                                                                               rel=1e-4)
            if unlabelled == 1 and fit.lam > 0:  # the judge's term is in: wider than the labelled part's alone
                gh, gf_l, _, _ = ref.gradients(theta)
                h_inv = np.linalg.inv(ref.hessian(theta, fit.lam))
                alone = h_inv @ (np.cov(gh - fit.lam * gf_l, rowvar=False) / len(ref.L)) @ h_inv
                assert (np.diag(np.delete(np.delete(fit.cov, b, 0), b, 1)) > np.diag(alone)).all()


def test_a_margin_of_zero_is_allowed_and_the_text_and_summary_follow_the_margin():
    judge, labels = study(seed=81, dialogues=60, labelled=25)
    plain = calibration.estimate(judge, labels, baseline="base")
    text = plain.text()
    assert "non-inferior" not in text and "noninferior" not in text and "Ranking (1 = best" in text
    assert "Non-inferiority" not in plain.files()["summary.md"]
    strict = calibration.estimate(judge, labels, baseline="base", margin=0.0)
    wins = strict.estimates[strict.estimates["quantity"] == "win_rate"]
    assert (wins["noninferior"] == np.where(wins["ci_low"] > 0.5, "yes", "no")).all()
    assert "lower bound above 0.5" in strict.files()["summary.md"] or "lower bound not above 0.5" in strict.text()


def test_two_systems_are_ranked_and_two_usable_pairs_take_the_max_t_quantile():
    rank, low, high = rank_sets(np.array([0.0, 5.0]), np.diag([0.0, 0.01]), 10.0, 0.95)
    assert rank.tolist() == [2, 1] and low.tolist() == [2, 1] and high.tolist() == [2, 1]
    # two usable pairs sharing a noisy system: their differences move together, so the max-t quantile is close to
    # one pair's t quantile and well below Bonferroni's for two
    cov = np.diag([4.0, 0.01, 0.01])
    usable = np.zeros((3, 3), bool)
    usable[0, 1] = usable[1, 0] = usable[0, 2] = usable[2, 0] = True
    df, confidence = 20.0, 0.9
    q = max_t_quantile(cov, usable, df, confidence)
    bonferroni = stats.t.ppf(1 - (1 - confidence) / 4, df)
    single = stats.t.ppf(1 - (1 - confidence) / 2, df)
    assert q < bonferroni - 0.1 and q == pytest.approx(single, rel=0.02)
    draws = stats.multivariate_t(loc=np.zeros(3), shape=cov, df=df).rvs(size=200_000, random_state=4)
    se = np.sqrt([cov[0, 0] + cov[1, 1], cov[0, 0] + cov[2, 2]])
    largest = np.max(np.abs(np.column_stack([draws[:, 0] - draws[:, 1], draws[:, 0] - draws[:, 2]])) / se, axis=1)
    assert q == pytest.approx(np.quantile(largest, confidence), rel=0.03)


def test_a_system_the_votes_do_not_connect_has_no_human_only_strength_and_says_why():
    """Votes only on pairs against the baseline of alpha and beta: gamma and delta are met by the judge alone."""
    judge, labels = study(seed=91, dialogues=60, labelled=30)
    keep = labels["system"].isin(["alpha|base", "base|alpha", "beta|base", "base|beta"])
    result = calibration.estimate(judge, labels[keep], baseline="base")
    bt = result.estimates[result.estimates["quantity"] == "bradley_terry"].set_index("system")
    for system in ("gamma", "delta"):  # no vote touches them: the few-labels note, in the singular system
        assert np.isnan(bt.loc[system, "human_only"]) and np.isnan(bt.loc[system, "human_only_ci_low"])
        assert bt.loc[system, "interval_note"] == ("0 labelled dialogues with a pair of this system: an interval "
                                                   "needs at least 3 labelled at random")
    assert (bt.loc[["alpha", "beta"], "interval_note"].str.startswith(
        "human-only: the labelled pairs do not connect")).all()
    assert any("do not connect" in note for note in result.notes)
