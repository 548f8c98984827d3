"""Pairwise studies to a ranking: win rates against a baseline, Bradley-Terry strengths and rank sets, from the
judge's verdict on every judged pair corrected by the human votes on a few (prediction-powered inference).

The data. A unit is one judged pair (dialogue, system_1|system_2, criterion) as `judge compare` writes it. The
judge's prediction f of a pair is the probability that system_1 wins as the judge says it: the mean of its two
verdicts when both orders were asked (1 = system_1 better, 0 = system_2, 1/2 a tie; both orders average the
position bias out), else its one verdict; a failed or abstaining judgment keeps the pair in the population with
f = 1/2 (a constant; any fixed prediction keeps the estimators unbiased). The human vote h of a pair is the mean over
its annotators of the same coding (`judge import` writes "1", "2", "0" in the judgments' order; a label given in
the reverse order "B|A" is turned round). The sampling unit is the dialogue: every estimator sums a dialogue's pairs
before taking variances (cluster by dialogue), and the labelled dialogues must be a uniformly random sample of the
judged ones: with --plan (`judge screen --budget` plans pairwise dialogues as it plans scored ones) the plan's
random part, its targeted dialogues' votes left out; without, every labelled dialogue, and the output says so.

Win rate of system s against the baseline b: the population mean, over dialogues, of the share of the dialogue's s
vs b pairs s wins (a tie counting 1/2; either order). On dialogues with one such pair (the usual design) this is the
share of pairs. Estimated by estimate.py's PPI++ mean (`ppi_mean`: lambda tuned from 20 labelled dialogues on, t
intervals, none below 3 labels), with dialogues as units; the interval adds Agresti-Coull's pseudo-votes (two wins,
two losses; see adjusted_intervals), as a share near 0 or 1 needs.

Bradley-Terry: log strengths theta (baseline 0) with P(i beats j) = sigmoid(theta_i - theta_j); the estimand is the
fit to the human votes over the population of judged pairs, ties counting 1/2 in the likelihood (the logistic loss
with outcome 1/2 is half a win each way). It is a logistic regression without intercept on x = e_1 - e_2 (the
baseline's column dropped), so PPI for M-estimation applies (Angelopoulos et al. 2023; PPI++ for GLMs): with n
labelled dialogues L and m judged-only dialogues U, theta solves

    (1/n) sum_L g(theta; h) + lambda [ (1/m) sum_U g(theta; f) - (1/n) sum_L g(theta; f) ] = 0,

g(theta; y) = sum over the dialogue's pairs of x (sigmoid(x theta) - y). The loss is convex for lambda in [0, 1]
(lambda is clipped there: judge and humans are on one scale), and systems met only through others are estimated
through the judged pairs of U. Its covariance is the cluster sandwich H^-1 [lambda^2 Cov_U(g_f)/m +
Cov_L(g_h - lambda g_f)/n] H^-1; lambda minimises its trace (PPI++), from 10 labelled dialogues on, and falls
back to 0 when the tuned fit's standard errors are wider on average than those at lambda = 0 (the choice reads
variances only, as the tuning does); below 10, lambda = 0: the human-only fit (classic PPI, lambda = 1, was 1.59
times as wide with a useless judge at 5 labelled dialogues). Intervals use a t quantile on n - 1 degrees of
freedom (n - 2 with a tuned lambda). Human-only: the same fit with lambda = 0
(a plain Bradley-Terry fit of the labelled pairs; tests check it against statsmodels' GLM), its interval from the
same sandwich; not defined when the labelled pairs leave a system unconnected to the baseline or a system wins or
loses every labelled pair (interval_note says so).

Rank sets: every difference theta_i - theta_j gets an interval that holds for all K(K-1)/2 pairs at once (the
max-|t| quantile of the strengths' estimated covariance, by Monte Carlo with a fixed seed, never above Bonferroni's
t quantile at 1 - alpha / K(K-1)), on n - p degrees of freedom for p strengths (rank_df); i is surely above j
when that interval excludes 0. rank_low = 1 + the number of systems surely above, rank_high = K - the number surely
below; when every interval covers, every system's true rank is inside its set, so the sets cover the true ranking
jointly at --confidence. The sets printed are the PPI fit's, or the human-only fit's when a PPI difference is less
precise than the human-only one (combined_rank_sets: a choice from the covariances, never from the strengths).

Length-controlled win rate (with the items' texts): the win rate at equal text length, from a logistic fit of the
votes on tanh(length gap / its sd) with an intercept, by the same PPI (length_controlled_rows). Style-controlled win
rate: the win rate at the baseline's style (length, markdown headers, list items, bold), Arena-Hard's style control:
one logistic fit over every system's pairs against the baseline with an intercept per system and the style gaps'
coefficients shared, by the same PPI (style_controlled_rows).

Non-inferiority (--margin M): a system is non-inferior to the baseline when its win rate's lower bound exceeds
0.5 - M (the two-sided interval's lower end: a one-sided test at (1 + confidence) / 2 per system); no interval, no
claim.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as scipy_stats

from ..errors import CalibrationError
from .estimate import (MIN_CROSS_FITTED, MIN_LABELLED, MIN_TUNED, cross_fitted_lambdas, effective_labels,
                       interval_note, ppi_mean, t_quantile, twice_the_labels, with_labels_saved)

ESTIMATE_COLUMNS = ["criterion", "quantity", "system", "baseline", "estimate", "ci_low", "ci_high", "human_only",
                    "human_only_ci_low", "human_only_ci_high", "n_labelled", "n_judged", "width_ratio",
                    "effective_labels", "labels_saved", "interval_note"]
RANKING_COLUMNS = ["criterion", "system", "rank", "rank_low", "rank_high", "human_only_rank_low",
                   "human_only_rank_high"]
VERDICT = {"1": 1.0, "2": 0.0, "0": 0.5}
# A strength this far from the baseline (in log odds) means the fit ran away: a system that won or lost every pair.
DIVERGED = 25.0


# -- the pairs of one criterion --------------------------------------------------------------------------------


@dataclass
class Pairs:
    """One criterion's judged pairs: systems by index, the dialogue of each pair, judge prediction f and human vote
    h (NaN where unlabelled), both as P(first system wins)."""

    criterion: str
    systems: list[str]
    first: np.ndarray
    second: np.ndarray
    dialogue: np.ndarray  # index into `dialogues`
    dialogues: np.ndarray
    judge: np.ndarray
    human: np.ndarray
    n_failed: int = 0

    @property
    def labelled(self) -> np.ndarray:
        return ~np.isnan(self.human)


def _verdict(value) -> float:
    return VERDICT.get(str(value).strip(), math.nan) if value is not None else math.nan


def judge_predictions(frame: pd.DataFrame) -> tuple[np.ndarray, int]:
    """P(system_1 wins) per judged pair: the mean of the two orders' verdicts when recorded, else the verdict; 1/2
    for a failed or abstaining judgment (counted)."""
    forward = frame["forward"].map(_verdict) if "forward" in frame else pd.Series(np.nan, index=frame.index)
    swapped = frame["swapped"].map(_verdict) if "swapped" in frame else pd.Series(np.nan, index=frame.index)
    single = frame["label"].map(_verdict)
    if "score" in frame and frame["label"].isna().all():  # a CSV of pair scores: the score is P(system_1 wins)
        single = frame["score"].astype(float)
    both = (forward + swapped) / 2.0
    value = both.where(both.notna(), single).to_numpy(float)
    failed = np.isnan(value)
    return np.where(failed, 0.5, value), int(failed.sum())


def human_votes(labels: pd.DataFrame, pairs: pd.DataFrame, criterion: str, where: str) -> pd.Series:
    """Mean human vote per judged pair (index: position in `pairs`), as P(system_1 wins). Every label must be a
    verdict 1, 2 or 0 on a judged pair of this criterion; one given in the reverse order is turned round."""
    from ..io import label_at

    part = labels[(labels["criterion"] == criterion) & ~labels.get("na", pd.Series(False, index=labels.index))]
    if part.empty:
        return pd.Series(dtype=float)
    text = part["label"].where(part["label"].notna(), part["score"].map(
        lambda v: "" if pd.isna(v) else (f"{v:g}" if isinstance(v, float) else str(v)))).astype(str).str.strip()
    votes = text.map(VERDICT)
    bad = votes.isna()
    if bad.any():
        row = part[bad].iloc[0]
        raise CalibrationError(f"{label_at(part, row, where)}: {text[bad].iloc[0]!r} is not a pairwise verdict "
                               f"of criterion {criterion!r}: give 1 (the first system of the pair better), 2 (the "
                               f"second) or 0 (a tie), in the judgments' order ({int(bad.sum())} label(s) like it)")
    index = {(i, s): k for k, (i, s) in enumerate(zip(pairs["item_id"], pairs["system"]))}
    reverse = {(i, f"{b}|{a}"): k for k, (i, a, b) in enumerate(zip(pairs["item_id"], pairs["system_1"],
                                                                      pairs["system_2"]))}
    keys = list(zip(part["item_id"], part["system"]))
    position = [index.get(key, reverse.get(key, -1)) for key in keys]
    flipped = np.array([key not in index and key in reverse for key in keys])
    missing = np.array(position) < 0
    if missing.any():
        row = part[missing].iloc[0]
        if "|" not in str(row["system"]):
            message = (f"system {row['system']!r} is not a pair: pairwise judgments take labels on pairs, system "
                       "'A|B' as `judge import` writes them")
        else:
            message = f"pair {row['system']!r} of dialogue {row['item_id']!r} was not judged on {criterion!r}"
        raise CalibrationError(f"{label_at(part, row, where)}: {message} ({int(missing.sum())} label(s) like it)")
    values = np.where(flipped, 1.0 - votes.to_numpy(float), votes.to_numpy(float))
    return pd.Series(values).groupby(np.array(position)).mean()


def read_pairs(judge: pd.DataFrame, labels: pd.DataFrame, criterion: str, where: str) -> Pairs:
    """The Pairs of one criterion from the judgments table and the labels (rows with system_1 / system_2)."""
    pairs = judge[(judge["criterion"] == criterion) & judge["system_1"].notna() & (judge["status"] != "na")]
    pairs = pairs.reset_index(drop=True)
    f, failed = judge_predictions(pairs)
    off = (f < 0) | (f > 1)
    if off.any():
        row = pairs[off].iloc[0]
        raise CalibrationError(f"line {row['line']}: pair {row['system']!r} of dialogue {row['item_id']!r} has score "
                               f"{f[off][0]:g}: a pair's score is the probability that its first system wins, 0 to 1 "
                               f"(or give verdicts 1, 2, 0 as `judge compare` writes them)")
    votes = human_votes(labels, pairs, criterion, where)
    h = np.full(len(pairs), np.nan)
    h[votes.index.to_numpy(int)] = votes.to_numpy(float)
    systems = sorted(set(pairs["system_1"]) | set(pairs["system_2"]))
    number = {s: k for k, s in enumerate(systems)}
    dialogues, dialogue = np.unique(pairs["item_id"].astype(str).to_numpy(), return_inverse=True)
    first = pairs["system_1"].map(number).to_numpy(int)
    second = pairs["system_2"].map(number).to_numpy(int)
    same = first == second
    keep = ~same
    return Pairs(criterion, systems, first[keep], second[keep], dialogue[keep], dialogues, f[keep], h[keep], failed)


# -- win rates against the baseline ----------------------------------------------------------------------------


def win_rate_rows(data: Pairs, baseline: int, confidence: float) -> list[dict]:
    """PPI++ win rate of every system against the baseline, dialogues as units (estimate.py's ppi_mean)."""
    others = [k for k in range(len(data.systems)) if k != baseline]
    n_dialogues = len(data.dialogues)
    human = np.full((len(others), n_dialogues), np.nan)
    judge = np.full((len(others), n_dialogues), np.nan)
    counts = []
    for row, s in enumerate(others):
        mine = ((data.first == s) & (data.second == baseline)) | ((data.first == baseline) & (data.second == s))
        sign = data.first[mine] == s
        f = np.where(sign, data.judge[mine], 1.0 - data.judge[mine])
        h = np.where(sign, data.human[mine], 1.0 - data.human[mine])
        d = data.dialogue[mine]
        labelled = ~np.isnan(h)
        # per dialogue: the mean over its pairs; on a labelled dialogue both over the labelled pairs (matched)
        frame = pd.DataFrame({"d": d, "f": f, "h": h, "lab": labelled})
        lab_d = frame[frame["lab"]].groupby("d").agg(f=("f", "mean"), h=("h", "mean"))
        all_d = frame.groupby("d")["f"].mean()
        judge[row, all_d.index.to_numpy(int)] = all_d.to_numpy()
        judge[row, lab_d.index.to_numpy(int)] = lab_d["f"].to_numpy()
        human[row, lab_d.index.to_numpy(int)] = lab_d["h"].to_numpy()
        counts.append((int(labelled.sum()), int(mine.sum())))
    result = ppi_mean(human, judge, confidence)
    # lambda is tuned from WIN_TUNED real votes on (below: the human-only share, lambda = 0)
    small = result.n_labelled < WIN_TUNED
    result.estimate = np.where(small, result.human_only, result.estimate)
    low, high, human_low, human_high, ratio = adjusted_intervals(human, judge, result, confidence, small)
    # never wider than the votes alone: where the tuned interval is (a useless judge's were 1.002 times as wide on
    # average at 70 labelled dialogues), the human-only share and its interval; a choice from the two widths, which
    # read variances, as the tuning of lambda does
    wider = ratio > 1.0
    result.estimate = np.where(wider, result.human_only, result.estimate)
    low, high, ratio = np.where(wider, human_low, low), np.where(wider, human_high, high), np.where(wider, 1.0, ratio)
    # What the estimate is worth in votes: the plain PPI interval's effective_labels (its width against the votes'
    # own, the plug-in's overstatement divided out), not the pseudo-voted ratio: the four pseudo-votes widen the
    # votes-alone interval more than the judge's (whose pseudo-votes carry the judge's matching predictions), which
    # overstated a good judge's worth by 27% at 20 labelled dialogues (benchmarks/pairwise_coverage.py).
    # Where the votes all agree the plain interval has none: the pseudo-voted ratio then.
    with np.errstate(invalid="ignore", divide="ignore"):
        own = effective_labels(result)
        own = np.where(np.isfinite(own), own, result.n_labelled / ratio ** 2)
        worth = np.where(small | wider, result.n_labelled, own)
    rows = []
    for row, s in enumerate(others):
        n_labelled, n_judged = counts[row]
        n = int(result.n_labelled[row])
        note = interval_note("few", n) if n < MIN_LABELLED else ""
        if n_judged == 0:
            note = "no judged pair against the baseline: see bradley_terry for a comparison through other systems"
        shown = not note
        nan = math.nan
        rows.append({"quantity": "win_rate", "system": data.systems[s], "estimate": float(result.estimate[row]),
                     "ci_low": low[row] if shown else nan, "ci_high": high[row] if shown else nan,
                     "human_only": float(result.human_only[row]) if n_labelled else nan,
                     "human_only_ci_low": human_low[row] if shown else nan,
                     "human_only_ci_high": human_high[row] if shown else nan, "n_labelled": n_labelled,
                     "n_judged": n_judged, "width_ratio": ratio[row] if shown else nan,
                     "effective_labels": float(worth[row]) if shown else nan, "interval_note": note})
    return rows


# Agresti-Coull's pseudo-votes: z^2 ~ 4 at 95%, two wins and two losses.
# Win rates use the judge from this many labelled dialogues on, where estimate.py cross-fits lambda: with 10-19
# votes its in-sample tuned lambda covered 0.927 on a length-biased judge (benchmarks/pairwise_coverage.py), the
# human-only share with pseudo-votes 0.96-0.97.
WIN_TUNED = 20
PSEUDO_VOTES = np.array([1.0, 1.0, 0.0, 0.0])


def adjusted_intervals(human: np.ndarray, judge: np.ndarray, result, confidence: float, small: np.ndarray):
    """Win-rate intervals as Agresti and Coull's for a proportion: the same PPI++ interval computed with four
    pseudo-votes added to the labelled dialogues, two wins and two losses. A share near 0 or 1 from few votes has a
    sample variance that is too small (the t interval covered 0.925-0.938 at 15-20 labelled dialogues in
    benchmarks/pairwise_coverage.py); the pseudo-votes fix that and give an interval where every vote agrees
    (estimate.py's "flat"). Each pseudo-win carries the judge's mean prediction on the labelled dialogues the system
    won, each pseudo-loss its mean on those it lost (the overall mean where there is none), so that the judge's help
    is not lost (with the overall mean for all four: 0.97-0.985 and the width gain halved). lambda as estimate.py
    tunes it on the real votes, from WIN_TUNED of them on (`small`: the rows below, lambda = 0). The bounds are clipped to [0, 1] and widened to hold the
    unadjusted estimate. Returns (low, high, human-only low, human-only high, width ratio)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a system without a pair against the baseline
        mean_f = np.nanmean(judge, axis=1)
        won = np.where(human > 0.5, judge, np.nan)
        lost = np.where(human < 0.5, judge, np.nan)
        f_won = np.where(np.isfinite(np.nanmean(won, axis=1)), np.nanmean(won, axis=1), mean_f)
        f_lost = np.where(np.isfinite(np.nanmean(lost, axis=1)), np.nanmean(lost, axis=1), mean_f)
    extra_h = np.broadcast_to(PSEUDO_VOTES, (len(human), len(PSEUDO_VOTES)))
    extra_f = np.nan_to_num(np.stack([f_won, f_won, f_lost, f_lost], axis=1), nan=0.5)
    aug_h, aug_f = np.hstack([human, extra_h]), np.hstack([judge, extra_f])
    tuned = ppi_mean(aug_h, aug_f, confidence)
    fixed = ppi_mean(aug_h, aug_f, confidence, lam=0.0)
    pick = lambda a, b: np.where(small, b, a)  # noqa: E731
    low, high = pick(tuned.ci_low, fixed.ci_low), pick(tuned.ci_high, fixed.ci_high)
    low = np.clip(np.minimum(low, result.estimate), 0.0, 1.0)
    high = np.clip(np.maximum(high, result.estimate), 0.0, 1.0)
    human_low = np.clip(np.minimum(fixed.human_only_ci_low, result.human_only), 0.0, 1.0)
    human_high = np.clip(np.maximum(fixed.human_only_ci_high, result.human_only), 0.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = (high - low) / (human_high - human_low)
    return low, high, human_low, human_high, ratio


def _effective(n: int, ratio: float) -> float:
    """Human labels alone that would give the same width: n / width_ratio^2."""
    return float(n / ratio ** 2) if np.isfinite(ratio) and ratio > 0 else math.nan


# -- Bradley-Terry -----------------------------------------------------------------------------------------------


@dataclass
class BTFit:
    """Strengths of every system (baseline 0) and their covariance (K x K, the baseline's row and column 0)."""

    theta: np.ndarray
    cov: np.ndarray
    df: float
    lam: float
    n_labelled: int  # labelled dialogues
    note: str = ""  # why there is no estimate / interval ("" when there is)
    ok: bool = True

    @property
    def se(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.sqrt(np.maximum(np.diag(self.cov), 0.0))


def design(data: Pairs, baseline: int) -> np.ndarray:
    """x = e_first - e_second, the baseline's column dropped."""
    k = len(data.systems)
    rows = np.arange(len(data.first))
    x = np.zeros((len(rows), k))
    x[rows, data.first] += 1.0
    x[rows, data.second] -= 1.0
    return np.delete(x, baseline, axis=1)


def newton(x: np.ndarray, w: np.ndarray, v: np.ndarray, start=None, tol: float = 1e-12, max_iter: int = 100):
    """Minimise sum_k w_k softplus(x_k theta) - v_k x_k theta (convex for w >= 0): Newton with step halving.
    Returns (theta, converged)."""
    p = x.shape[1]
    theta = np.zeros(p) if start is None else np.array(start, dtype=float)

    def loss(t):
        eta = x @ t
        return float(w @ np.logaddexp(0.0, eta) - v @ eta)

    current = loss(theta)
    for _ in range(max_iter):
        eta = x @ theta
        p_hat = 1.0 / (1.0 + np.exp(-eta))
        grad = x.T @ (w * p_hat - v)
        hess = (x * (w * p_hat * (1.0 - p_hat))[:, None]).T @ x
        try:
            step = np.linalg.solve(hess + 1e-12 * np.eye(p), grad)
        except np.linalg.LinAlgError:
            return theta, False
        size = 1.0
        while size > 1e-10:
            trial = theta - size * step
            value = loss(trial)
            if value <= current + 1e-15 * abs(current):
                break
            size /= 2.0
        theta, previous, current = trial, current, value
        if np.max(np.abs(theta)) > DIVERGED:
            return theta, False
        if np.max(np.abs(size * step)) < 1e-10 or abs(previous - current) <= tol * max(1.0, abs(current)):
            return theta, True
    return theta, False


class _Parts:
    """Per-dialogue sums of the pairs' gradients, for the PPI estimating equation and its sandwich."""

    def __init__(self, data: Pairs, baseline: int, active: np.ndarray | None = None, x: np.ndarray | None = None):
        """`active`: the systems in the fit (the others' pairs weigh nothing, their columns are dropped); `x`: a
        design of its own instead of the strengths' (the length-controlled win rate's)."""
        active = np.ones(len(data.systems), bool) if active is None else active
        self.columns = np.delete(active, baseline)
        self.x = design(data, baseline)[:, self.columns] if x is None else x
        kept = active[data.first] & active[data.second]
        labelled = data.labelled
        n_dialogues = len(data.dialogues)
        per = np.bincount(data.dialogue, minlength=n_dialogues).astype(float)
        lab = np.bincount(data.dialogue, weights=labelled.astype(float), minlength=n_dialogues)
        self.is_l = lab > 0  # a labelled dialogue
        self.is_u = (per > 0) & ~self.is_l
        self.n, self.m = int(self.is_l.sum()), int(self.is_u.sum())
        # a labelled dialogue stands for all its pairs: its labelled pairs weigh pairs / labelled pairs
        ratio = np.divide(per, lab, out=np.zeros_like(per), where=lab > 0)
        in_l = self.is_l[data.dialogue]
        self.lab_pair = labelled & kept  # pairs entering the labelled terms
        self.u_pair = ~in_l & kept  # pairs of judged-only dialogues
        self.r = np.where(labelled, ratio[data.dialogue], 0.0)
        self.h = np.where(labelled, data.human, 0.0)
        self.f = data.judge
        self.dialogue = data.dialogue
        self.n_dialogues = n_dialogues
        self.sum = sparse.csr_matrix((np.ones(len(data.dialogue)), (data.dialogue, np.arange(len(data.dialogue)))),
                                     shape=(n_dialogues, len(data.dialogue)))

    def _lambdas(self, lam) -> tuple[np.ndarray, float]:
        """(each pair's lambda, lambda's mean over the labelled dialogues) from one lambda or one per dialogue
        (cross_fitted_lambdas: the labelled dialogue i's term is g_h - lambda_i g_f, the judged-only term's weight
        their mean, as estimate.py's cross-fitted mean has it)."""
        if np.ndim(lam) == 0:
            return np.full(len(self.dialogue), float(lam)), float(lam)
        return lam[self.dialogue], float(lam[self.is_l].mean())

    def weights(self, lam) -> tuple[np.ndarray, np.ndarray]:
        """(w, v) of the PPI loss at lambda (see newton; one lambda, or one per dialogue)."""
        n, m = max(self.n, 1), max(self.m, 1)
        pair_lam, lam_bar = self._lambdas(lam)
        w = np.where(self.lab_pair, (1.0 - pair_lam) * self.r / n, 0.0) + np.where(self.u_pair, lam_bar / m, 0.0)
        v = (np.where(self.lab_pair, self.r * (self.h - pair_lam * self.f) / n, 0.0)
             + np.where(self.u_pair, lam_bar * self.f / m, 0.0))
        if self.m == 0:
            w = np.where(self.lab_pair, self.r / n, 0.0)
            v = np.where(self.lab_pair, self.r * self.h / n, 0.0)
        return w, v

    def gradients(self, theta: np.ndarray):
        """Per-dialogue gradient sums (dialogues x p): human on L, judge on L, judge on U."""
        p_hat = 1.0 / (1.0 + np.exp(-(self.x @ theta)))
        gh = self.sum @ (self.x * (self.r * (p_hat - self.h) * self.lab_pair)[:, None])
        gf_l = self.sum @ (self.x * (self.r * (p_hat - self.f) * self.lab_pair)[:, None])
        gf_u = self.sum @ (self.x * ((p_hat - self.f) * self.u_pair)[:, None])
        return gh[self.is_l], gf_l[self.is_l], gf_u[self.is_u], p_hat

    def hessian(self, p_hat: np.ndarray, lam: float) -> np.ndarray:
        w, _ = self.weights(lam)
        return (self.x * (w * p_hat * (1.0 - p_hat))[:, None]).T @ self.x

    def covariance(self, theta: np.ndarray, lam) -> np.ndarray:
        """The sandwich covariance of theta, clustered by dialogue (one lambda, or one per dialogue)."""
        gh, gf_l, gf_u, p_hat = self.gradients(theta)
        h_inv = np.linalg.pinv(self.hessian(p_hat, lam))
        n, m = self.n, self.m
        own = np.asarray(lam, dtype=float)[self.is_l, None] if np.ndim(lam) else lam
        lam_bar = self._lambdas(lam)[1]
        meat = _cov(gh - own * gf_l) / n
        if lam_bar != 0.0:  # (a lambda is 0 without a judged-only dialogue: bradley_terry, _controlled_fit)
            # One judged-only dialogue has no spread of its own: the judge's spread over every dialogue (all drawn
            # alike), as tuned_lambda reads it; leaving the term out understated the variance.
            meat = meat + lam_bar * lam_bar * _cov(gf_u if m >= 2 else np.vstack([gf_l, gf_u])) / m
        return h_inv @ meat @ h_inv

    def cross_fitted_lambdas(self, theta: np.ndarray, focus) -> np.ndarray:
        """One lambda per dialogue (0 off the labelled ones), each tuned on the other labelled dialogues and shrunk
        as estimate.py's cross_fitted_lambdas does for a mean: here the mean of the `focus` coefficients, whose
        per-dialogue influences are the gradients through H^-1 at theta (the judge's fit, as for tuned_lambda).
        Tuned in-sample, lambda fitted the labels it was then used on: the controlled win rates covered 0.939-0.945
        at 20-35 labelled dialogues with a style-biased judge, the votes alone 0.949."""
        gh, gf_l, gf_u, p_hat = self.gradients(theta)
        h_inv = np.linalg.pinv(self.hessian(p_hat, 1.0) if self.m else self.hessian(p_hat, 0.0))
        c = h_inv[:, list(focus)].mean(1)
        a_h, a_l, a_u = gh @ c, gf_l @ c, gf_u @ c
        y0, fl = np.zeros(self.n_dialogues), np.zeros(self.n_dialogues)
        y0[self.is_l], fl[self.is_l] = a_h, a_l
        var_f = float(np.var(np.concatenate([a_l, a_u]), ddof=1))
        lam = cross_fitted_lambdas(self.is_l, y0, fl, float(self.n), float(max(self.m, 1)), var_f)
        # clipped to [0, 1] as the strengths' lambda is: the loss stays convex
        return np.where(self.is_l, np.clip(lam, 0.0, 1.0), 0.0)

    def tuned_lambda(self, theta: np.ndarray) -> float:
        """PPI++'s trace-optimal lambda at theta, clipped to [0, 1]."""
        gh, gf_l, gf_u, p_hat = self.gradients(theta)
        h_inv = np.linalg.pinv(self.hessian(p_hat, 1.0) if self.m else self.hessian(p_hat, 0.0))
        n, m = self.n, max(self.m, 1)
        centred_h, centred_f = gh - gh.mean(0), gf_l - gf_l.mean(0)
        cross = centred_h.T @ centred_f / (n - 1)
        all_f = np.vstack([gf_l, gf_u])
        var_f = _cov(all_f)
        top = np.trace(h_inv @ (cross + cross.T) @ h_inv)
        bottom = 2.0 * (1.0 + n / m) * np.trace(h_inv @ var_f @ h_inv)
        with np.errstate(divide="ignore", invalid="ignore"):  # a judge whose gradient never varies: 0 / 0
            lam = top / bottom
        return float(np.clip(lam, 0.0, 1.0)) if np.isfinite(lam) else 0.0


def _cov(g: np.ndarray) -> np.ndarray:
    if len(g) < 2:
        return np.full((g.shape[1], g.shape[1]), np.nan)
    centred = g - g.mean(0)
    return centred.T @ centred / (len(g) - 1)


def connected(k: int, first: np.ndarray, second: np.ndarray, baseline: int) -> np.ndarray:
    """Which systems the pairs connect to the baseline, directly or through others."""
    graph = sparse.csr_matrix((np.ones(len(first)), (first, second)), shape=(k, k))
    _, component = sparse.csgraph.connected_components(graph, directed=False)
    return component == component[baseline]


def set_apart(data: Pairs, baseline: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(active systems, direction): a system whose weighted wins (or losses) in the PPI loss at lambda are nil or
    negative has its strength at -infinity (+infinity): the fit has no finite optimum with it. Its pairs then add
    nothing to the others' fit (at the limit they are won or lost with probability 1), so it is set apart (direction
    -1 or +1) and the rest is fitted, again until none is left; systems the remaining pairs no longer connect to the
    baseline are set apart with direction 0. With the baseline itself degenerate nothing is active."""
    k = len(data.systems)
    active = np.ones(k, bool)
    direction = np.zeros(k)
    full = _Parts(data, baseline)
    w0, v0 = full.weights(lam)
    scale = max(float(np.abs(w0).sum()), 1e-300)
    for _ in range(k):
        keep = active[data.first] & active[data.second]
        w, v = np.where(keep, w0, 0.0), np.where(keep, v0, 0.0)
        wins = np.bincount(data.first, v, k) + np.bincount(data.second, w - v, k)
        losses = np.bincount(data.first, w - v, k) + np.bincount(data.second, v, k)
        weight = np.bincount(data.first, w, k) + np.bincount(data.second, w, k)
        lost, won = wins <= 1e-12 * scale, losses <= 1e-12 * scale
        bad = active & (weight > 0) & (lost | won)
        if bad[baseline]:
            return np.zeros(k, bool), direction
        if not bad.any():
            break
        direction[bad] = np.where(lost[bad], -1.0, 1.0)
        active &= ~bad
    keep = active[data.first] & active[data.second] & (np.abs(w0) > 0)
    reach = connected(k, data.first[keep], data.second[keep], baseline)
    active &= reach
    return active, direction


def bradley_terry(data: Pairs, baseline: int, confidence: float, lam: float | None = None,
                  human_only: bool = False) -> BTFit:
    """The PPI(++) Bradley-Terry fit (see the module docstring); `human_only`: lambda = 0 on the labelled pairs.
    A system that won (lost) every pair the fit weighs has strength +infinity (-infinity) and no interval
    (`set_apart`); the others are fitted without it."""
    k = len(data.systems)
    parts = _Parts(data, baseline)
    n = parts.n
    nan = BTFit(np.full(k, np.nan), np.full((k, k), np.nan), math.nan, 0.0, n, ok=False)
    if human_only:
        lam = 0.0
        lab = data.labelled
        reach = connected(k, data.first[lab], data.second[lab], baseline)
        if not reach.all():
            missing = [data.systems[s] for s in np.flatnonzero(~reach)]
            nan.note = (f"the labelled pairs do not connect {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
                        " to the baseline: no human-only strength")
            return nan
    elif parts.m == 0:
        lam = 0.0
    if n == 0:
        nan.note = "no labelled pair: no estimate"
        return nan
    fitted = lam is None
    if fitted:
        lam = 0.0  # below MIN_TUNED labelled dialogues: the human-only fit (never wider than itself)
        if n >= MIN_TUNED:
            active, _ = set_apart(data, baseline, 1.0)
            start_parts = _Parts(data, baseline, active)
            start, ok = (newton(start_parts.x, *start_parts.weights(1.0)) if np.delete(active, baseline).any()
                         else (None, False))
            lam = start_parts.tuned_lambda(start) if ok else 1.0
    tried = [lam] + ([lam / 2, lam / 4, 0.0] if fitted and lam > 0 else [])
    for lam in tried:
        active, direction = set_apart(data, baseline, lam)
        if not np.delete(active, baseline).any():  # nothing left to fit beside the baseline
            continue
        fit_parts = _Parts(data, baseline, active)
        theta, ok = newton(fit_parts.x, *fit_parts.weights(lam))
        if ok:
            break
    else:
        nan.note = ("the baseline won or lost every labelled pair, or a group of systems did: no finite strength"
                    if human_only else "the Bradley-Terry fit did not converge (a system or a group of systems "
                                       "wins or loses every pair)")
        nan.lam = lam
        return nan
    cov = fit_parts.covariance(theta, lam)
    index = np.flatnonzero(np.delete(active, baseline))
    p = k - 1
    small_theta = np.full(p, np.nan)
    small_theta[index] = theta
    small_cov = np.full((p, p), np.nan)
    small_cov[np.ix_(index, index)] = cov
    full_theta = np.insert(small_theta, baseline, 0.0)
    infinite = np.isnan(full_theta) & (direction != 0)
    full_theta[infinite] = direction[infinite] * np.inf
    full_cov = np.insert(np.insert(small_cov, baseline, 0.0, axis=0), baseline, 0.0, axis=1)
    df = n - 2 if (fitted and n >= MIN_TUNED and lam != 0.0) else n - 1
    note = ""
    if n < MIN_LABELLED:
        note = "few"
    fit = BTFit(full_theta, full_cov, float(df), float(lam), n, note=note)
    if fitted and lam != 0.0:
        # Never wider than the human votes alone: a lambda tuned on few labelled dialogues can be noise (a useless
        # judge's intervals were 1.01 times as wide at 10); the choice reads the standard errors only.
        plain = bradley_terry(data, baseline, confidence, lam=0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = fit.se / plain.se
        if plain.ok and np.nanmean(np.where(np.isfinite(ratio) & (ratio > 0), ratio, np.nan)) > 1.0:
            return plain
    return fit


def bt_rows(data: Pairs, baseline: int, confidence: float, fit: BTFit, human: BTFit) -> list[dict]:
    rows = []
    q = float(t_quantile(confidence, fit.df)) if fit.df >= 1 else math.nan
    qh = float(t_quantile(confidence, human.df)) if human.ok and human.df >= 1 else math.nan
    lab = data.labelled
    for s in range(len(data.systems)):
        if s == baseline:
            continue
        touches = (data.first == s) | (data.second == s)
        n_lab_d = len(np.unique(data.dialogue[touches & lab]))
        note = ""
        if not fit.ok:
            note = fit.note
        elif n_lab_d < MIN_LABELLED:
            # "2 labelled dialogues with a pair of this system: ..." (the plural's "s" kept before the insert)
            note = interval_note("few", n_lab_d).replace(":", " with a pair of this system:", 1)
        se, hse = fit.se[s], human.se[s] if human.ok else math.nan
        value, human_value = (fit.theta[s] if fit.ok else math.nan), (human.theta[s] if human.ok else math.nan)
        if not note and np.isinf(value):
            note = (f"{data.systems[s]} {'won' if value > 0 else 'lost'} every pair the fit weighs: its strength is "
                    f"{'+' if value > 0 else '-'}infinite, no interval (its win rate has one)")
        elif not note and np.isnan(value):
            note = "not connected to the baseline by the pairs left once the systems with infinite strength are set apart"
        shown = fit.ok and not note and np.isfinite(se)
        low, high = (value - q * se, value + q * se) if shown else (math.nan, math.nan)
        human_shown = human.ok and n_lab_d >= MIN_LABELLED and np.isfinite(human_value) and np.isfinite(hse)
        hlow, hhigh = (human_value - qh * hse, human_value + qh * hse) if human_shown else (math.nan, math.nan)
        ratio = float(se / hse) if shown and human_shown and hse > 0 else math.nan
        # What the strength is worth in votes: the printed intervals' ratio, t quantiles included (a tuned lambda's
        # lost degree of freedom counts, as estimate.effective_labels counts it).
        worth = ratio * q / qh if np.isfinite(ratio) else math.nan
        if not note and not human.ok:
            note = f"human-only: {human.note}"
        elif not note and np.isinf(human_value):
            note = (f"human-only: {data.systems[s]} {'won' if human_value > 0 else 'lost'} every labelled pair "
                    "(strength infinite)")
        rows.append({"quantity": "bradley_terry", "system": data.systems[s],
                     "estimate": float(value) if np.isfinite(value) else math.nan, "ci_low": low, "ci_high": high,
                     "human_only": float(human_value) if np.isfinite(human_value) else math.nan,
                     "human_only_ci_low": hlow, "human_only_ci_high": hhigh, "n_labelled": int((touches & lab).sum()),
                     "n_judged": int(touches.sum()), "width_ratio": ratio,
                     "effective_labels": _effective(int((touches & lab).sum()), worth), "interval_note": note})
    return rows


# -- length- and style-controlled win rates ------------------------------------------------------------------------

# Arena's style features of a text: its length (words, or characters for scripts without spaces), and its markdown
# headers, list items and bold spans (fenced code left out, as Arena's counts leave it out).
STYLE_FEATURES = ("length", "headers", "list items", "bold")
_CODE = re.compile(r"```.*?```", re.S)
_HEADER = re.compile(r"^#{1,6}\s", re.M)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s", re.M)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


def markdown_counts(text: str) -> tuple[int, int, int]:
    """(headers, list items, bold spans) of a text, outside fenced code."""
    text = _CODE.sub("", text or "")
    return len(_HEADER.findall(text)), len(_LIST_ITEM.findall(text)), len(_BOLD.findall(text))


def item_styles(items) -> tuple[dict, str]:
    """({(dialogue, system): [length, headers, list items, bold]} from the items `judge compare` read (candidate_1
    and candidate_2 of each pair), and the length's unit (words, or characters for scripts without spaces, as
    `judge audit` counts them)."""
    from ..trust.audit import read_items

    frame = read_items(items)
    styles = {(str(d), s): np.array([words, *markdown_counts(text)], dtype=float)
              for d, s, words, text in zip(frame["item_id"], frame["system"], frame["words"], frame["text"])}
    return styles, frame.attrs["length_unit"]


def _take(data: Pairs, keep: np.ndarray) -> Pairs:
    return Pairs(data.criterion, data.systems, data.first[keep], data.second[keep], data.dialogue[keep],
                 data.dialogues, data.judge[keep], data.human[keep])


def against_baseline(data: Pairs, baseline: int) -> Pairs:
    """The pairs with the baseline, turned round so that `first` is the other system (judge and votes with them)."""
    mine = (data.first == baseline) != (data.second == baseline)
    pairs = _take(data, mine)
    turned = pairs.second == baseline
    pairs.first = np.where(turned, pairs.first, pairs.second)
    pairs.second = np.full(len(pairs.first), baseline)
    pairs.judge = np.where(turned, pairs.judge, 1.0 - pairs.judge)
    pairs.human = np.where(turned, pairs.human, 1.0 - pairs.human)
    return pairs


def _controlled_row(quantity: str, system: str, pairs: Pairs) -> dict:
    nan = math.nan
    return {"quantity": quantity, "system": system, "estimate": nan, "ci_low": nan, "ci_high": nan,
            "human_only": nan, "human_only_ci_low": nan, "human_only_ci_high": nan,
            "n_labelled": int(pairs.labelled.sum()), "n_judged": len(pairs.first), "width_ratio": nan,
            "effective_labels": nan, "interval_note": ""}


def _fill(row: dict, fit: dict, human: dict, column: int, n: int, confidence: float) -> None:
    """A controlled win rate's row from the fits: sigmoid of the system's intercept, its interval sigmoid of the
    intercept's (t quantile); `n` labelled dialogues with a pair of the system against the baseline."""
    if n < MIN_LABELLED:
        row["interval_note"] = interval_note("few", n).replace(":", " with a pair against the baseline:", 1)
    elif not fit["ok"]:
        row["interval_note"] = "the controlled fit did not converge (a system won or lost every pair): no estimate"
        return
    if not fit["ok"]:
        return
    alpha, se = fit["theta"][column], fit["se"][column]
    row["estimate"] = float(_sigmoid(alpha))
    if human["ok"]:
        row["human_only"] = float(_sigmoid(human["theta"][column]))
    if not row["interval_note"] and np.isnan(fit["df"]):  # else at least n - 1 >= shared >= 1
        row["interval_note"] = (f"{fit['n']} labelled dialogues for {fit['shared']} style coefficients shared by "
                                "the systems: an interval needs more dialogues than coefficients")
    if row["interval_note"]:
        return
    q = float(t_quantile(confidence, fit["df"]))
    row["ci_low"], row["ci_high"] = (float(_sigmoid(alpha + sign * q * se)) for sign in (-1, 1))
    if human["ok"]:  # the same labelled dialogues as the fit: its n - 1 degrees of freedom and its errors exist
        qh = float(t_quantile(confidence, human["df"]))
        row["human_only_ci_low"], row["human_only_ci_high"] = (
            float(_sigmoid(human["theta"][column] + sign * qh * human["se"][column])) for sign in (-1, 1))
        width = row["human_only_ci_high"] - row["human_only_ci_low"]
        row["width_ratio"] = (row["ci_high"] - row["ci_low"]) / width if width > 0 else math.nan
        row["effective_labels"] = _effective(n, row["width_ratio"])


def length_controlled_rows(data: Pairs, baseline: int, confidence: float, lengths: dict) -> list[dict]:
    """`win_rate_length_controlled` of every system against the baseline: the win rate it would have if its texts
    were as long as the baseline's (alpaca_eval's length-controlled GLM without its per-instruction term):
    P(s wins) = sigmoid(alpha + beta tanh(d / sd)), d = the length of s's text minus the baseline's on the pair, sd
    its spread over the judged pairs of s against the baseline; the estimate is sigmoid(alpha), the win rate at
    d = 0. Fitted as the strengths are (PPI for M-estimation with the votes on the labelled pairs and the judge on
    all, ties 1/2, lambda 0 below 10 labelled dialogues, tuned on them below 20 and cross-fitted from 20 on, never
    wider than the human votes alone, a sandwich clustered by dialogue, t quantile); the interval is sigmoid of
    alpha's. `lengths`: {(dialogue, system): length}. With a judge biased towards length and markdown, lambda tuned
    in-sample covered 0.945 +- 0.006 at 20 labelled dialogues (10 systems) and 0.937 +- 0.004 at 35 (20 systems),
    1,000 studies each; cross-fitted, 0.954 +- 0.006 and 0.947 +- 0.004 on the same studies (README, Pairwise
    studies)."""
    turned = against_baseline(data, baseline)
    rows = []
    for s in (k for k in range(len(data.systems)) if k != baseline):
        pairs = _take(turned, turned.first == s)
        row = _controlled_row("win_rate_length_controlled", data.systems[s], pairs)
        rows.append(row)
        names = data.dialogues[pairs.dialogue]
        length = np.array([lengths.get((d, data.systems[s]), np.nan) - lengths.get((d, data.systems[baseline]),
                                                                                   np.nan) for d in names])
        if np.isnan(length).any():
            row["interval_note"] = (f"{int(np.isnan(length).sum())} of its pairs against the baseline have no text "
                                    "length in --items: no length-controlled win rate")
            continue
        spread = float(np.std(length))
        z = np.tanh(length / spread) if spread > 0 else np.zeros(len(length))
        labelled = pairs.labelled
        sides = min(int((labelled & (length > 0)).sum()), int((labelled & (length < 0)).sum()))
        if spread > 0 and sides < MIN_LABELLED:
            # the votes say nothing about equal lengths: sigmoid(alpha) would be an extrapolation (its intervals
            # spanned nearly all of 0..1, the human-only ones collapsed on a fit that ran away)
            row["interval_note"] = (f"{sides} labelled pair(s) where its text is the shorter or the longer one "
                                    f"(fewer than {MIN_LABELLED}): the win rate at equal length would be an "
                                    "extrapolation, no estimate")
            continue
        x = np.column_stack([np.ones(len(z)), z])
        fit = _controlled_fit(pairs, baseline, x)
        _fill(row, fit, _controlled_fit(pairs, baseline, x, lam=0.0), 0, fit["n"], confidence)
    return rows


def style_controlled_rows(data: Pairs, baseline: int, confidence: float, styles: dict) -> tuple[list[dict], list]:
    """`win_rate_style_controlled` of every system against the baseline: the win rate it would have if its texts
    had the baseline's style (Arena-Hard's style control): one logistic fit over every system's pairs against the
    baseline, P(s wins) = sigmoid(alpha_s + gamma . z), z the pair's style gaps (STYLE_FEATURES, each
    (s - b) / (s + b + 1) as Arena takes them, scaled by its root mean square but not centred, so that z = 0 is
    equal style), gamma shared by all systems; the estimate is sigmoid(alpha_s). Fitted by the same PPI as the
    length-controlled win rate (lambda tuned for the mean of the alphas, cross-fitted from 20 labelled dialogues
    on; never wider on average over the alphas than the votes alone). A feature the labelled pairs show on fewer
    than 3 pairs is left out (nothing to learn its effect from: markdown in plain summaries); when a feature's labelled gaps lie on one side of 0 (fewer than 3 on the
    other), equal style is an extrapolation and nothing is estimated. A system without every text's style, or
    that won or lost every labelled pair (its alpha infinite), is left out of the fit with a note. `styles`:
    {(dialogue, system): [length, headers, list items, bold]}. Returns (rows, which features were fitted)."""
    turned = against_baseline(data, baseline)
    others = [k for k in range(len(data.systems)) if k != baseline]
    rows = {s: _controlled_row("win_rate_style_controlled", data.systems[s], _take(turned, turned.first == s))
            for s in others}
    missing = np.full(len(STYLE_FEATURES), np.nan)
    names = data.dialogues[turned.dialogue]
    mine = np.array([styles.get((d, data.systems[s]), missing) for d, s in zip(names, turned.first)]).reshape(-1, 4)
    base = np.array([styles.get((d, data.systems[baseline]), missing) for d in names]).reshape(-1, 4)
    gap = (mine - base) / (mine + base + 1.0)
    fitted = []
    for s in others:
        own = turned.first == s
        votes = turned.human[own & turned.labelled]
        if np.isnan(gap[own]).any():
            rows[s]["interval_note"] = (f"{int(np.isnan(gap[own]).any(1).sum())} of its pairs against the baseline "
                                        "have no text in --items: no style-controlled win rate")
        elif not len(votes):
            rows[s]["interval_note"] = "no labelled pair against the baseline: no style-controlled win rate"
        elif (votes == 1.0).all() or (votes == 0.0).all():
            rows[s]["interval_note"] = (f"it {'won' if votes[0] == 1.0 else 'lost'} every labelled pair against the "
                                        "baseline: its win rate at equal style is 0 or 1 by the fit, no estimate")
        else:
            fitted.append(s)
    if not fitted:
        return list(rows.values()), ""
    keep = np.isin(turned.first, fitted)
    pairs, z = _take(turned, keep), gap[keep]
    lab = pairs.labelled
    systems = (pairs.first[:, None] == np.array(fitted)[None, :]).astype(float)
    rare = [k for k in range(len(STYLE_FEATURES)) if int((z[lab, k] != 0).sum()) < MIN_LABELLED]
    used, confounded = [], []
    for k in (k for k in range(len(STYLE_FEATURES)) if k not in rare):
        # a feature the systems (and the features kept) explain on the labelled pairs, variance inflation 10 or more
        # (each system's gap nearly the same on all its pairs), cannot be told from the systems' quality: its
        # coefficient would rest on a few pairs' noise and the win rates at equal style on an extrapolation
        (used if _variance_inflation(np.column_stack([systems, z[:, used]])[lab], z[lab, k]) < 10.0
         else confounded).append(k)
    names_of = lambda ks: ", ".join(STYLE_FEATURES[k] for k in ks)  # noqa: E731
    note = f"over {names_of(used) or 'no feature'}"
    if rare:
        note += f"; left out, non-zero on fewer than {MIN_LABELLED} labelled pairs: {names_of(rare)}"
    if confounded:
        note += ("; left out, the systems' own on the labelled pairs (variance inflation 10 or more): "
                 + names_of(confounded))
    one_sided = [STYLE_FEATURES[k] for k in used
                 if min(int((z[lab, k] <= 0).sum()), int((z[lab, k] >= 0).sum())) < MIN_LABELLED]
    if not used:
        for s in fitted:
            rows[s]["interval_note"] = ("no style feature varies apart from the systems on the labelled pairs: "
                                        "nothing to control for (see win_rate)")
        return list(rows.values()), note
    if one_sided:
        for s in fitted:
            rows[s]["interval_note"] = (f"the labelled pairs' {', '.join(one_sided)} gaps lie on one side of the "
                                        f"baseline's (fewer than {MIN_LABELLED} on the other): the win rate at equal "
                                        "style would be an extrapolation, no estimate")
        return list(rows.values()), note
    z = z[:, used]
    x = np.column_stack([systems, z / np.sqrt(np.mean(z ** 2, axis=0))])
    fit = _controlled_fit(pairs, baseline, x, focus=range(len(fitted)), shared=len(used))
    human = _controlled_fit(pairs, baseline, x, lam=0.0, shared=len(used))
    for column, s in enumerate(fitted):
        n = len(np.unique(pairs.dialogue[lab & (pairs.first == s)]))
        _fill(rows[s], fit, human, column, n, confidence)
    return list(rows.values()), note


def _variance_inflation(others: np.ndarray, column: np.ndarray) -> float:
    """1 / (1 - R^2) of `column` regressed on `others` (which span the constant: every pair has its system)."""
    fitted = others @ np.linalg.lstsq(others, column, rcond=None)[0]
    total = float(np.sum((column - column.mean()) ** 2))
    return total / float(np.sum((column - fitted) ** 2)) if total > 0 else math.inf


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _controlled_fit(data: Pairs, baseline: int, x: np.ndarray, lam: float | None = None, focus=(0,),
                    shared: int = 1) -> dict:
    """The PPI logistic fit of the votes on `x`: its coefficients, their standard errors and the degrees of
    freedom; lambda when None: 0 below MIN_TUNED labelled dialogues, tuned on them in-sample below
    MIN_CROSS_FITTED, cross-fitted from there on (_Parts.cross_fitted_lambdas, for the mean of the `focus`
    columns), and never wider on average over the `focus` columns than the votes alone. Degrees of freedom n - 1
    (n - 2 with an in-sample lambda) from n labelled dialogues, and none (no
    interval) unless n exceeds the `shared` coefficients (length or style effects) every intercept leans on: the
    clustered sandwich of four style effects from 3 dialogues is too small (style control covered 0.919 there; with
    length alone at 3 dialogues, 0.965; four effects from 5, 0.948; n - 1 - shared degrees of freedom instead
    covered 0.988-0.992, needlessly wide)."""
    parts = _Parts(data, baseline, x=x)
    nan = np.full(x.shape[1], np.nan)
    out = {"n": parts.n, "ok": False, "theta": nan, "se": nan, "df": math.nan, "shared": shared}
    if parts.n == 0:
        return out
    tuned = lam is None
    in_sample = False  # lambda fitted on the labels it is used on (10-19 labelled dialogues): n - 2 df
    if tuned:
        lam = 0.0
        if parts.n >= MIN_TUNED and parts.m:
            start, ok = newton(x, *parts.weights(1.0))
            if ok and parts.n >= MIN_CROSS_FITTED:
                lam = parts.cross_fitted_lambdas(start, focus)
            elif ok:
                lam, in_sample = parts.tuned_lambda(start), True
    if parts.m == 0:
        lam = 0.0
    judged = bool(np.any(lam != 0.0))
    theta, ok = newton(x, *parts.weights(lam))
    if not ok:
        return out if not judged else _controlled_fit(data, baseline, x, lam=0.0, shared=shared)
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.maximum(np.diag(parts.covariance(theta, lam)), 0.0))
    df = float(parts.n - 2 if in_sample and judged else parts.n - 1) if parts.n > shared else math.nan
    out.update(ok=True, theta=theta, se=se, df=df)
    if tuned and judged:
        plain = _controlled_fit(data, baseline, x, lam=0.0, shared=shared)
        focus = list(focus)
        # never a larger standard error than the votes alone, on average over the win rates' intercepts (on the
        # win-rate scale, choosing the narrower interval covered 0.932 at 20 labelled dialogues: a near-separated
        # human-only fit looks narrow)
        if plain["ok"] and np.mean(se[focus] / plain["se"][focus]) > 1.0:
            return plain
    return out


# -- rank sets ---------------------------------------------------------------------------------------------------


def rank_sets(theta: np.ndarray, cov: np.ndarray, df: float, confidence: float) -> tuple[np.ndarray, np.ndarray,
                                                                                            np.ndarray]:
    """(rank, rank_low, rank_high) of every system, 1 = strongest, from simultaneous max-t intervals on every
    difference theta_i - theta_j (i is surely above j when the interval excludes 0); all ranks possible where
    nothing is known. An infinite strength (a system that won or lost every pair) ranks first or last but is never
    surely above or below anyone: it has no interval. A system without any strength ranks last."""
    rank = point_rank(theta)
    if len(theta) < 2 or not df >= 1:
        return rank, np.ones(len(theta)), np.full(len(theta), float(len(theta)))
    diff, se, usable = _differences(theta, cov)
    q = max_t_quantile(cov, usable, df, confidence)
    above = (diff - q * se > 0) & usable  # i surely above j
    return rank, 1.0 + above.sum(0), len(theta) - above.sum(1)


def combined_rank_sets(fit: BTFit, human: BTFit, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank sets printed: the PPI fit's when none of its strength differences has a larger standard error than
    the human-only fit's, else the human-only fit's (the PPI point ranks either way). The choice reads the two
    covariances only, never the strengths, as PPI++ tunes lambda from variances: each set holds at --confidence
    and so does the one chosen (asymptotically; measured in benchmarks/pairwise_coverage.py, systems all tied
    included). Printing, system by system, the smaller of the two sets would not hold: each may miss on its own
    5% (it covered 0.90-0.93 for a nominal 0.95 with 6-10 tied systems, 300 repetitions); the union of both fits'
    claims with alpha spent across them holds, but its sets came out larger than the human-only ones about as often
    as the PPI ones alone (the shared quantile is wider). Sets that hold their level and are never larger than the
    human-only ones can gain nothing from the judge where it matters: with every system tied, the human-only sets
    already spend the whole 5% on wrong claims, so any claim the judge adds where they make none breaks the level;
    the only such rule that never loses is printing the human-only sets. (Exactly: a rule never larger must make
    every claim the human-only sets make; at the tie its error rate is then 5% plus the chance that it claims where
    they do not, so that chance must be nil, at the tie and so under any strengths, which give the same studies a
    positive probability: the judge could narrow no set in a study where the votes alone separate nothing.) So the
    PPI sets chosen can still be larger than the human-only ones for a system, by the noise in the strengths
    (benchmarks/pairwise_coverage.py measures how often). In expectation the choice nearly guarantees it: a claim
    "i above j" is made with probability Phi(d/se - q) + Phi(-d/se - q) for a true gap d, which grows as the
    standard error se and the max-t quantile q shrink, so with every PPI se and q no larger than the human-only
    ones each system's expected set is no larger, whatever the strengths. The rule checks the standard errors,
    not q: a tuned lambda costs a degree of freedom, which made the PPI quantile larger in 87-100% of simulated
    studies with a tuned lambda (6-20 systems, by 1-4% on average), and requiring it too would discard the judge
    there for a claim probability lower by a fraction of a percent at ties."""
    if not fit.ok:
        return rank_sets(fit.theta, fit.cov, math.nan, confidence)
    rank = point_rank(fit.theta)
    if human.ok and fit.lam != 0.0:
        _, se, usable = _differences(fit.theta, fit.cov)
        _, human_se, human_usable = _differences(human.theta, human.cov)
        both = usable & human_usable
        if not both.any() or np.any(se[both] > human_se[both]):
            return (rank, *rank_sets(human.theta, human.cov, rank_df(human), confidence)[1:])
    return rank_sets(fit.theta, fit.cov, rank_df(fit), confidence)


def rank_df(fit: BTFit) -> float:
    """Degrees of freedom of the simultaneous intervals: the fit's less the strengths it estimates beyond one. The
    clustered sandwich of p strengths from n dialogues is too small by about the dialogues' leverage (p / n), which
    one interval hardly feels but the largest of K(K-1)/2 does: with every system tied and n - 1 degrees of freedom
    the rank sets covered 0.915-0.945; with n - p, 0.935-0.995 (benchmarks/pairwise_coverage.py has the cells).
    Below one degree of freedom (fewer labelled dialogues than strengths) nothing is claimed."""
    if not fit.ok:
        return math.nan
    strengths = int(np.isfinite(fit.theta).sum()) - 1
    return float(fit.df - max(strengths - 1, 0))


def point_rank(theta: np.ndarray) -> np.ndarray:
    """1 + the number of systems with a larger strength; a system without any strength ranks last."""
    theta = np.asarray(theta, dtype=float)
    known = ~np.isnan(theta)
    ordered = np.where(known, theta, -np.inf)
    return np.where(known, 1.0 + (ordered[None, :] > ordered[:, None]).sum(1), float(len(theta)))


def _differences(theta: np.ndarray, cov: np.ndarray):
    """(theta_i - theta_j, its standard error, whether it has an interval), K x K each."""
    theta = np.asarray(theta, dtype=float)
    finite = np.isfinite(theta)
    var = np.diag(cov)
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.maximum(var[:, None] + var[None, :] - 2.0 * cov, 0.0))
        diff = theta[:, None] - theta[None, :]  # i minus j
        usable = np.isfinite(se) & (se > 0) & finite[:, None] & finite[None, :]
    return diff, se, usable


def max_t_quantile(cov: np.ndarray, usable: np.ndarray, df: float, confidence: float, draws: int = 4000,
                   seed: int = 0) -> float:
    """The quantile at `confidence` of max |theta_i - theta_j| / se_ij over the usable pairs, for a multivariate t
    with `df` degrees of freedom and scale `cov` (Monte Carlo, fixed seed): simultaneous intervals less conservative
    than Bonferroni's, which is the fallback (and the bound: never above it) when the draws cannot be made."""
    k = len(cov)
    count = max(int(np.triu(usable, 1).sum()), 1)
    bonferroni = float(scipy_stats.t.ppf(1.0 - (1.0 - confidence) / (2.0 * count), df))
    rows, cols = np.nonzero(np.triu(usable, 1))
    if len(rows) < 2:
        return bonferroni
    inside = np.zeros(k, bool)
    inside[rows] = inside[cols] = True
    index = np.flatnonzero(inside)
    sub = cov[np.ix_(index, index)]
    try:
        values, vectors = np.linalg.eigh((sub + sub.T) / 2.0)
    except np.linalg.LinAlgError:
        return bonferroni
    root = vectors * np.sqrt(np.clip(values, 0.0, None))
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((draws, len(index))) @ root.T
    z /= np.sqrt(rng.chisquare(df, size=(draws, 1)) / df)
    position = {s: k for k, s in enumerate(index)}
    a = np.array([position[r] for r in rows])
    b = np.array([position[c] for c in cols])
    scale = np.sqrt(np.maximum(np.diag(sub)[a] + np.diag(sub)[b] - 2.0 * sub[a, b], 1e-300))
    largest = np.max(np.abs(z[:, a] - z[:, b]) / scale, axis=1)
    return float(min(np.quantile(largest, confidence), bonferroni))


# -- the whole pairwise estimate ------------------------------------------------------------------------------------


@dataclass
class PairwiseTables:
    estimates: pd.DataFrame
    ranking: pd.DataFrame
    criteria: list[str]
    confidence: float
    baseline: str
    margin: float | None
    n_random: int
    notes: list[str] = field(default_factory=list)
    lambdas: dict = field(default_factory=dict)
    from_plan: bool = False  # the labelled dialogues are a plan's random part (else every labelled one)


def pairwise_criteria(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None) -> list[str]:
    judged = sorted(set(judge.loc[judge["system_1"].notna(), "criterion"]))
    voted = sorted(set(labels.loc[labels["system"].astype(str).str.contains("|", regex=False), "criterion"]))
    if criteria is not None:
        unknown = [c for c in criteria if c not in judged]
        if unknown:
            raise CalibrationError(f"--criteria: no pairwise judgment on {', '.join(unknown)}; the judgments have "
                                   f"{', '.join(judged) or 'none'}")
        return list(criteria)
    shared = [c for c in judged if c in voted]
    if not shared:
        raise CalibrationError("the pairwise judgments and the human labels have no criterion in common (judgments: "
                               f"{', '.join(judged) or '-'}; labels on pairs: {', '.join(voted) or '-'}); pairwise "
                               "labels name a pair as system 'A|B', as `judge import` writes them")
    return shared


def pairwise_estimate(judge: pd.DataFrame, labels: pd.DataFrame, baseline: str, *, criteria=None,
                      confidence: float = 0.95, margin: float | None = None, where: str = "the human labels",
                      items=None) -> PairwiseTables:
    """Win rates, Bradley-Terry strengths and rank sets of every criterion (frames as calibration.io reads them);
    with `items` (the pairs with their texts), length- and style-controlled win rates too."""
    criteria = pairwise_criteria(judge, labels, criteria)
    styles, unit = item_styles(items) if items is not None else (None, "")
    estimates, ranking, notes, lambdas = [], [], [], {}
    random_dialogues = set()
    for criterion in criteria:
        data = read_pairs(judge, labels, criterion, where)
        if baseline not in data.systems:
            raise CalibrationError(f"--baseline {baseline!r} is not a system of the pairs judged on {criterion!r} "
                                   f"(they have {', '.join(data.systems)})")
        b = data.systems.index(baseline)
        reach = connected(len(data.systems), data.first, data.second, b)
        if not reach.all():
            lost = [data.systems[s] for s in np.flatnonzero(~reach)]
            raise CalibrationError(f"{criterion}: {', '.join(lost)} never meet(s) the baseline {baseline!r}, directly "
                                   "or through other systems: no strength relative to it can be estimated; judge "
                                   "pairs that connect them")
        if not data.labelled.any():
            raise CalibrationError(f"{criterion}: no human vote on a judged pair: the estimates need votes on a random "
                                   "sample of the judged pairs")
        random_dialogues |= set(data.dialogues[np.unique(data.dialogue[data.labelled])])
        rows = win_rate_rows(data, b, confidence)
        if styles is not None:
            rows += length_controlled_rows(data, b, confidence, {key: value[0] for key, value in styles.items()})
            style_rows, style_note = style_controlled_rows(data, b, confidence, styles)
            rows += style_rows
        fit = bradley_terry(data, b, confidence)
        human = bradley_terry(data, b, confidence, human_only=True)
        lambdas[criterion] = fit.lam
        rows += bt_rows(data, b, confidence, fit, human)
        table = pd.DataFrame(rows).assign(criterion=criterion, baseline=baseline)
        estimates.append(table)
        rank, low, high = combined_rank_sets(fit, human, confidence)
        _, hlow, hhigh = rank_sets(human.theta, human.cov, rank_df(human), confidence)
        ranking.append(pd.DataFrame({"criterion": criterion, "system": data.systems, "rank": rank.astype(int),
                                     "rank_low": low.astype(int), "rank_high": high.astype(int),
                                     "human_only_rank_low": hlow.astype(int),
                                     "human_only_rank_high": hhigh.astype(int)}).sort_values(["rank", "system"]))
        if styles is not None:
            notes.append(f"{criterion}: win_rate_length_controlled = the win rate at equal text length ({unit}), "
                         "alpaca_eval's length-controlled GLM without its per-instruction term")
            if style_note:
                notes.append(f"{criterion}: win_rate_style_controlled = the win rate at the baseline's style, "
                             f"Arena-Hard's style control (length in {unit}) {style_note}")
        if data.n_failed:
            notes.append(f"{criterion}: {data.n_failed} pair(s) without a usable verdict (failed or abstained): kept "
                         "with the judge's prediction 1/2")
        if fit.ok and fit.n_labelled < MIN_TUNED:
            notes.append(f"{criterion}: {fit.n_labelled} labelled dialogues: the Bradley-Terry strengths are the human "
                         f"votes' alone (lambda = 0); the judge is used from {MIN_TUNED} on")
        if not human.ok:
            notes.append(f"{criterion}: {human.note}")
    frame = with_labels_saved(pd.concat(estimates, ignore_index=True))
    if note := twice_the_labels(frame, "quantity", "system"):
        notes.append(note)
    columns = list(ESTIMATE_COLUMNS)
    if margin is not None:
        low = frame["ci_low"].astype(float)
        frame["noninferior"] = np.where(frame["quantity"] == "win_rate", np.where(
            np.isfinite(low) & (low > 0.5 - margin), "yes", "no"), "")
        columns.append("noninferior")
    return PairwiseTables(frame[columns], pd.concat(ranking, ignore_index=True)[RANKING_COLUMNS], criteria,
                          confidence, baseline, margin, len(random_dialogues), notes, lambdas)


# -- the result ------------------------------------------------------------------------------------------------------

METHOD = ("pairwise: win rates by PPI++ (estimate.py's mean, dialogues as units); Bradley-Terry by PPI for "
          "M-estimation (logistic loss, ties 1/2, cluster sandwich by dialogue, lambda tuned from 10 labelled "
          "dialogues on and never wider than the human votes alone, else 0); rank sets from simultaneous max-t "
          "intervals on all strength differences (n - p degrees of freedom), PPI's or human-only's by their "
          "covariances; length- and style-controlled win rates with --items")


def margin_option(margin, baseline) -> float | None:
    """--margin as the functions take it: None, or a number in [0, 0.5), and only with --baseline."""
    import numbers

    from ..options import must_be

    if margin is None:
        return None
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin) \
            or not 0.0 <= margin < 0.5:
        raise CalibrationError(must_be("--margin", "a number from 0 up to (not including) 0.5, e.g. 0.05", margin))
    if baseline is None:
        raise CalibrationError("--margin says how far below the baseline a system may be: give --baseline SYSTEM "
                               "too (pairwise judgments)")
    return float(margin)


def summary_markdown(tables: PairwiseTables) -> str:
    """The short Markdown a CI job can post: the decision per system and criterion."""
    level = f"{tables.confidence:.0%}"
    rows = tables.estimates[tables.estimates["quantity"] == "win_rate"]
    lines = [f"## Pairwise estimate against `{tables.baseline}`", ""]
    if tables.margin is not None:
        failing = rows[rows["noninferior"] != "yes"]
        verdict = ("every system is non-inferior" if failing.empty else
                   f"{len(failing)} of {len(rows)} system-criterion rows are not shown non-inferior")
        lines += [f"**Non-inferiority** (margin {tables.margin:g}: win rate's {level} lower bound above "
                  f"{0.5 - tables.margin:g}): {verdict}.", ""]
    lines += ["| criterion | system | win rate | " + level + " interval | human only | labelled / judged pairs |"
              + (" non-inferior |" if tables.margin is not None else ""),
              "|---|---|---|---|---|---|" + ("---|" if tables.margin is not None else "")]
    for r in rows.itertuples():
        interval = "-" if not np.isfinite(r.ci_low) else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"
        human = "-" if not np.isfinite(r.human_only) else f"{r.human_only:.3f}"
        lines.append(f"| {r.criterion} | {r.system} | {r.estimate:.3f} | {interval} | {human} | "
                     f"{r.n_labelled} / {r.n_judged} |" + (f" {r.noninferior} |" if tables.margin is not None else ""))
    lines += ["", f"Ranking (Bradley-Terry, rank sets jointly at {level}):", ""]
    for criterion, part in tables.ranking.groupby("criterion", sort=False):
        ranks = ", ".join(f"{r.system} {r.rank} [{r.rank_low}-{r.rank_high}]" for r in part.itertuples())
        lines.append(f"- {criterion}: {ranks}")
    return "\n".join(lines) + "\n"


def print_pairwise(result, out) -> None:
    from .screen import format_table

    level = f"{result.confidence:.0%}"
    if result.from_plan:
        print(f"Random sample: the {result.n_random} labelled dialogues of the plan's random part.", file=out)
    else:
        print(f"Random sample: all {result.n_random} dialogues with human votes are taken as a uniformly random "
              "sample of the judged dialogues; if some were chosen on purpose, the estimates are biased.", file=out)
    print(f"Against the baseline {result.baseline!r}: win_rate = share of its pairs with the baseline a system wins "
          "(tie 1/2, either order); bradley_terry = log strength relative to the baseline, fitted over every judged "
          f"pair. Intervals: {level}, prediction-powered (judge verdict on every pair, human votes correct it).",
          file=out)
    columns = ["criterion", "quantity", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
               "human_only_ci_high", "n_labelled", "n_judged", "width_ratio"]
    if result.margin is not None:
        columns.append("noninferior")
    table = result.estimates.assign(note=result.estimates["interval_note"].fillna(""))
    print(format_table(table[columns + ["note"]]), file=out)
    print(f"\nRanking (1 = best; rank_low..rank_high hold jointly for all systems at {level})", file=out)
    print(format_table(result.ranking), file=out)
    if result.margin is not None:
        failing = result.estimates[(result.estimates["quantity"] == "win_rate")
                                   & (result.estimates["noninferior"] != "yes")]
        if failing.empty:
            print(f"\nnon-inferior: every system (win rate's lower bound above {0.5 - result.margin:g})", file=out)
        else:
            names = ", ".join(f"{r.system} ({r.criterion})" for r in failing.itertuples())
            print(f"\nNOT shown non-inferior (win rate's lower bound not above {0.5 - result.margin:g}): {names}",
                  file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
