"""The judge's own effect of a covariate (length, being an own system) beyond quality as the humans read it, by
instrumental variables on two annotators' readings (Gain, its method in the class docstring), with a delete-one-
dialogue jackknife interval."""

from __future__ import annotations

import math

import numpy as np

from .dialogues import Dialogues, _centred

# Fewer dialogues with two readings of a summary leave the judge's gain unidentified: no excess is tested.
MIN_GAIN_DIALOGUES = 8
ONE_ANNOTATOR_NOTE = ("fewer than {n} dialogues have summaries read by two annotators: a judge on another scale "
                      "(scores a multiple of the humans') cannot be told from a judge with a taste for it, so the "
                      "excess is not tested; label some summaries twice")
WEAK_NOTE = ("the humans' two readings do not agree beyond what {x} explains (their partial covariance has an "
             "interval reaching 0): the excess is not identified here, so not tested")


class Gain:
    """The judge's gain g on the human scale (judge = dialogue effect + g x quality + noise, within dialogues), by
    instrumental variables: two annotators' readings h_a and h_b of the same summaries have independent errors, so
    cov(judge, h_b) / cov(h_a, h_b) = g, where regressing the judge on the human mean would shrink g by the labels'
    noise. With a covariate x in the model (length; own system), the 2SLS solution of
        judge = g h_a + b x (+ dialogue effects),   instruments (h_b, x)
    gives b, the judge's own effect of x beyond quality as the humans read it, in the judge's points, whatever its
    gain (a judge that follows length and not quality at all, g = 0, has its whole length slope as b). All the
    moments are within-dialogue sums over dialogues, so each bootstrap resample is one matrix product and a 2x2
    solve. A judge whose scores are a compressed copy of quality (g = 0.6) then shows no excess where length goes
    with quality, while `judge slope - human slope` flagged it in 57-100% of audits. Identification needs the two
    readings to agree beyond x (the instrument's relevance): checked on its interval, else no interval."""

    def __init__(self, boot: Dialogues, index: np.ndarray, judge: np.ndarray, human_a: np.ndarray,
                 human_b: np.ndarray, covariate: np.ndarray):
        n = len(boot.ids)
        two = np.isfinite(human_a) & np.isfinite(human_b)
        # The dialogues that identify g and b: two summaries read twice or more. One alone is absorbed by its
        # dialogue's effect (centred, it is 0): counted, it would add a jackknife replicate equal to b and a degree
        # of freedom b never had, a narrower interval (singletons with fixed effects and clustered errors; Correia,
        # "Singletons, cluster-robust standard errors and fixed effects: a bad mix", 2015).
        self.read_twice = np.bincount(index[two], minlength=n) > 1
        self.dialogues = int(np.count_nonzero(self.read_twice))
        self.boot = boot
        centred = {name: _centred(index[two], values[two], n) for name, values in
                   (("y", judge), ("a", human_a), ("b", human_b), ("x", covariate))}
        at = index[two]
        self.sums = {pair: boot.sums(at, centred[pair[0]] * centred[pair[1]])
                     for pair in ("ba", "bx", "xa", "xx", "by", "xy")}

    def solve(self) -> float:
        """b at the observed dialogues."""
        return float(self._b({k: v.sum() for k, v in self.sums.items()}))

    def leave_one_out(self) -> np.ndarray:
        """b with each dialogue left out in turn (the jackknife's replicates), one per dialogue."""
        return self._b({k: v.sum() - v for k, v in self.sums.items()})

    @staticmethod
    def _b(s: dict):
        """b of the 2x2 2SLS normal equations by Cramer's rule (g, their other unknown, is not needed)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return (s["ba"] * s["xy"] - s["xa"] * s["by"]) / (s["ba"] * s["xx"] - s["bx"] * s["xa"])

    def excess(self, covariate: str = "length") -> tuple[float, float, float, str]:
        """b, the judge's own effect of the covariate beyond quality in its points, with its interval, and a note;
        NaN and the reason when unidentified (too few dialogues with two readings, or a gain whose interval reaches
        0: a weak instrument, e.g. quality moving with length in every dialogue)."""
        if self.dialogues < MIN_GAIN_DIALOGUES:
            return math.nan, math.nan, math.nan, ONE_ANNOTATOR_NOTE.format(n=MIN_GAIN_DIALOGUES)
        # Relevance: h_b predicts h_a beyond x (the first stage's partial covariance, per resample).
        s, counts = self.sums, self.boot.counts
        with np.errstate(invalid="ignore", divide="ignore"):
            partial = lambda w: (w @ s["ba"]) - (w @ s["bx"]) * (w @ s["xa"]) / (w @ s["xx"])  # noqa: E731
            relevance_low, _ = self.boot.interval(partial(counts))
        if not (np.isfinite(relevance_low) and relevance_low > 0):
            return math.nan, math.nan, math.nan, WEAK_NOTE.format(x=covariate)
        b = self.solve()
        # The standard error from the delete-one-dialogue jackknife (CV3 in MacKinnon, Nielsen & Webb, "Cluster-robust
        # inference: a guide to empirical practice", J. Econometrics 2023), with the expanded t quantile. b is a
        # ratio whose denominator nearly vanishes in some bootstrap resamples of few dialogues: the percentiles of
        # those resamples gave an interval too narrow on skewed Likert labels (own-system excess flagged in 5.3-8.0%
        # of audits with nothing planted at 10-20 dialogues, 6.8% of 1000 at 20; the jackknife 4.6-5.5%).
        # Over the dialogues read twice only, on their count's degrees of freedom: the others add nothing to b, and
        # counting them (one annotator on most dialogues) would give the t quantile degrees of freedom b never had.
        dropped = self.leave_one_out()[self.read_twice]
        n = len(dropped)
        if not np.isfinite(dropped).all():  # one dialogue carries the whole identification
            return b, math.nan, math.nan, WEAK_NOTE.format(x=covariate)
        se = math.sqrt((n - 1) / n * float(((dropped - dropped.mean()) ** 2).sum()))
        return (b, *self.boot.t_interval(b, se, n), "")
