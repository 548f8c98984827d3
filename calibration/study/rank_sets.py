"""Rank sets from Bradley-Terry strengths: simultaneous intervals for every difference (the max-|t| quantile of the
strengths' covariance by Monte Carlo, never above Bonferroni's), a system's rank set the ranks those leave it; the
PPI fit's sets, or the human-only fit's where a PPI difference is less precise (combined_rank_sets)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

from .bradley_terry import BTFit


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
