"""What the property tests recompute the trust verbs' bootstrap intervals from: the dialogue resamples drawn again
from a verb's seed, and the expanded percentile interval written out."""

from __future__ import annotations

import numpy as np
from scipy import stats


def counts_from_seed(seed, n, resamples):
    """The first resample draw a verb makes: n dialogues drawn with replacement, `resamples` times."""
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    return np.array([np.bincount(row, minlength=n) for row in draws], float)


def expanded(replicates, confidence, n):
    """Hesterberg's expanded percentile interval: the normal quantile replaced by sqrt(n / (n - 1)) t_{n-1}."""
    tail = stats.norm.sf(np.sqrt(n / (n - 1)) * stats.t.ppf(0.5 + confidence / 2, n - 1)) * 100
    finite = replicates[np.isfinite(replicates)]
    return tuple(np.percentile(finite, [tail, 100 - tail]))
