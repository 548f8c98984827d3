"""How many dialogues humans must label to separate two systems: paired t power, with and without the judge.

The test is the one `judge estimate` runs on a difference between two systems: a two-sided t interval (n - 1
degrees of freedom) on the per-dialogue paired difference. Its power at n labelled dialogues, for a standardised
effect e = mean difference / sd of the differences, is that of a noncentral t with noncentrality e * sqrt(n / k).

k is the share of the variance left. Human-only: k = 1. Prediction-powered (PPI++, the judge on all N dialogues,
humans on a random n of them): with the optimal lambda the variance of the estimate is
sd^2 / n * (1 - rho^2 * (N - n) / N), rho being the judge-human correlation of the paired differences, so
k = 1 - rho^2 (N - n) / N: a perfect judge leaves only the part the N judged dialogues cannot remove.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats

# The human-only search stops here: a study that needs more labels than this is not separable in practice.
MAX_DIALOGUES = 100_000


def paired_power(effect: float, n, alpha: float = 0.05, variance_share=1.0, df_spent: int = 1) -> np.ndarray:
    """Power of the two-sided paired t test at n dialogues (vectorised over n and variance_share); `df_spent`
    degrees of freedom go to the estimate (1 for a mean, 2 with a lambda tuned on the labels). NaN where no degree
    of freedom is left (dialogues_needed asks from MIN_LABELLED = 3 on)."""
    n = np.asarray(n, dtype=float)
    df = n - df_spent
    noncentrality = abs(effect) * np.sqrt(n / np.asarray(variance_share, dtype=float))
    critical = scipy_stats.t.ppf(1.0 - alpha / 2.0, df)
    with np.errstate(invalid="ignore"):
        exact = scipy_stats.nct.sf(critical, df, noncentrality) + scipy_stats.nct.cdf(-critical, df, noncentrality)
    # scipy's noncentral t returns NaN far in the tail (noncentrality above about 2, most often 8 and more); there
    # the normal form is exact enough, and its lower tail, Phi(-critical - noncentrality) < 1e-14, is nil.
    normal = scipy_stats.norm.sf(critical - noncentrality)
    return np.where(np.isnan(exact), normal, exact)


def dialogues_needed(effect: float, power: float = 0.8, alpha: float = 0.05, rho: float | None = None,
                     n_judged: int | None = None, combined: bool = False, design_factor: float = 1.0,
                     human_factor: float | None = None) -> int | None:
    """Smallest n reaching `power` with an interval `judge estimate` prints (n >= MIN_LABELLED); None when none
    does (within n_judged for PPI, MAX_DIALOGUES otherwise).

    With `rho` and `n_judged`, the prediction-powered count (humans label n of the n_judged judged dialogues),
    priced as ppi.py computes it: below MIN_TUNED labels the judge is not used, from there lambda costs a
    degree of freedom, and from MIN_CROSS_FITTED on (cross-fitted) it costs none. `combined`: rho is that of
    several judges' cross-fitted predictor (`judge estimate --judge`), whose weight m / (n + m) is fixed by the
    design: used from MIN_LABELLED on, no degree of freedom spent, nothing tuned.
    `design_factor`: the labels' draw multiplies the variance of the part they estimate (the residual, or the
    differences themselves without a judge) by this much against a uniform draw (an active design: screen's
    active_design_factor); the judged part, from all n_judged dialogues, is left as it is. `human_factor`: the same
    for the differences themselves, where the judge is not used (below MIN_TUNED labels; default design_factor).
    The t's degrees of freedom stay the uniform draw's (an active draw's lie between Kish's effective n and n).
    """
    from .ppi import MIN_CROSS_FITTED, MIN_LABELLED, MIN_TUNED

    if not np.isfinite(effect) or effect == 0.0:
        return None
    if rho is not None and n_judged is None:
        return None  # a prediction-powered count needs the number of judged dialogues
    judged = n_judged or 0  # read only with rho given, where it is n_judged
    limit = judged if rho is not None else MAX_DIALOGUES

    extra = design_factor - 1.0  # the sampled part's variance beyond a uniform draw's, per unit of that part

    def reaches(n: int) -> bool:
        if combined and rho is not None:
            share = 1.0 - rho * rho * (judged - n) / judged + extra * (1.0 - rho * rho)
            return bool(paired_power(effect, n, alpha, share) >= power)
        if rho is None or n < MIN_TUNED:
            return bool(paired_power(effect, n, alpha, design_factor if human_factor is None else human_factor)
                        >= power)
        # lambda's own error adds about (1 - rho^2) / (n - 1) of the residual variance (the expected leverage of
        # the unlabelled mean, E[(mean_U f - mean_L f)^2 / S_ff] ~ 1 / (n (n - 1)); cross-fitted, the noise of
        # each dialogue's lambda adds about as much).
        residual = (1.0 - rho * rho) * (1.0 + 1.0 / (n - 1))
        share = 1.0 - rho * rho * (judged - n) / judged + (1.0 - rho * rho) / (n - 1) + extra * residual
        return bool(paired_power(effect, n, alpha, share, df_spent=1 if n >= MIN_CROSS_FITTED else 2) >= power)

    # Power grows with n (more dialogues, more degrees of freedom, less variance left): bisect.
    if limit < MIN_LABELLED or not reaches(limit):
        return None
    if reaches(MIN_LABELLED):
        return MIN_LABELLED
    low, high = MIN_LABELLED, limit  # reaches(high) holds; low is below every answer
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return high
