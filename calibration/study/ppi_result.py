"""What a PPI estimate is (PPIResult), the t quantile its intervals use, and the fewest labels an interval needs:
apart from calibration.study.ppi so that the bounded-scale interval (bounded.py), which ppi_mean falls back to,
builds on them without an import cycle."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats


@dataclass
class PPIResult:
    """Arrays over the leading axes of the input (one value per system, pair, repetition...)."""

    estimate: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    human_only: np.ndarray
    human_only_se: np.ndarray
    human_only_ci_low: np.ndarray
    human_only_ci_high: np.ndarray
    lam: np.ndarray
    n_labelled: np.ndarray
    n_unlabelled: np.ndarray
    # Why no interval is given ("few": under MIN_LABELLED labels; "flat": the labels do not vary), or why it is the
    # bounded-scale one ("bounded": bounded_scale), "" otherwise.
    no_interval: np.ndarray
    # The two variance terms (judged-only part, residual part), for checks against other implementations.
    var_unlabelled: np.ndarray | None = None
    var_residual: np.ndarray | None = None
    # How far n / width_ratio^2 overstates on average (_jensen; for the weighted estimator also the Hajek interval's
    # design effect), which effective_labels divides out; None: not corrected.
    jensen: np.ndarray | None = None

    @property
    def width_ratio(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.se / self.human_only_se


def t_quantile(confidence: float, df) -> np.ndarray:
    """Two-sided t quantile per cell (NaN below 1 degree of freedom); computed once per distinct df (few)."""
    df = np.asarray(df, dtype=float)
    values, inverse = np.unique(df, return_inverse=True)
    quantiles = scipy_stats.t.ppf(0.5 + confidence / 2.0, np.where(values >= 1, values, np.nan))
    return quantiles[inverse].reshape(df.shape)


# An interval needs this many labelled dialogues: below, the t interval with n - 1 = 1 degree of freedom still
# undercovers on discrete labels (0.90 at n = 2 in the Likert simulations of tests/coverage_sim.py).
MIN_LABELLED = 3
