"""Plant and recover for the system-level correlation interval that `judge calibrate` and `judge select` print
(calibration.correlation.system_interval): few systems drawn from many (their true judge and human means correlated
rho), dialogues with a shared difficulty and summary noise that the judge partly shares with the humans. The
interval's estimand is the correlation over the population of systems (Pearson rho; Spearman (6/pi) asin(rho/2);
Kendall (2/pi) asin(rho) for normal means). Hard cases: a judge on another scale (`gain`: its signal scaled, its own
noise not, so its means are less reliable at gain 0.5), and Likert scores (judge and humans rounded to 1-5, so
system means tie). Used by tests/test_select_guards.py (reduced) and benchmarks/trust_coverage.py:

    python tests/system_sim.py 1000
"""

from __future__ import annotations

import sys

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from calibration.correlation import PairedScores, bootstrap_ci

TRUTH = {"pearson": lambda r: r, "spearman": lambda r: 6 / np.pi * np.arcsin(r / 2),
         "kendall": lambda r: 2 / np.pi * np.arcsin(r)}


def study(rng: np.random.Generator, systems: int, dialogues: int, rho: float, spread: float = 0.5,
          noise: float = 0.8, gain: float = 1.0, likert: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(judge, human) dialogues x systems matrices of one study."""
    means = rng.multivariate_normal([0, 0], spread ** 2 * np.array([[1, rho], [rho, 1]]), systems)
    difficulty = rng.normal(0, 1, (dialogues, 1))
    shared = rng.normal(0, noise, (dialogues, systems))
    human = means[:, 0] + difficulty + shared
    judge = gain * (means[:, 1] + difficulty + 0.5 * shared) + rng.normal(0, noise, (dialogues, systems))
    if likert:
        human, judge = (np.clip(np.round(3 + m), 1, 5) for m in (human, judge))
    return judge, human


def rates(repetitions: int, systems: int, dialogues: int, statistic: str = "pearson", rho: float = 0.8,
          seed: int = 0, resamples: int = 400, **shape) -> dict:
    """Shares of studies whose 95% interval is printed and covers the population value (with its Wilson 95%
    Monte-Carlo interval), the printed intervals' median width and, for reference, the median width of Fisher's z
    interval alone on the studies' Pearson r."""
    rng = np.random.default_rng(seed)
    truth = TRUTH[statistic](rho)
    covers, printed, widths, fisher = [], [], [], []
    for rep in range(repetitions):
        judge, human = study(rng, systems, dialogues, rho, **shape)
        paired = PairedScores("c", np.arange(dialogues), np.arange(systems), judge, human)
        low, high = bootstrap_ci(paired, "system", statistic, resamples, seed=rep)
        printed.append(bool(np.isfinite(low)))
        if printed[-1]:
            covers.append(bool(low <= truth <= high))
            widths.append(high - low)
        # The reference width: Fisher's z interval alone on the study's Pearson r, by hand.
        r = np.corrcoef(judge.mean(axis=0), human.mean(axis=0))[0, 1]
        fisher.append(np.ptp(np.tanh(np.arctanh(r) + np.array([-1.96, 1.96]) / np.sqrt(systems - 3))))
    mc_low, mc_high = (proportion_confint(sum(covers), len(covers), 0.05, "wilson") if covers
                       else (float("nan"), float("nan")))
    return {"covers": float(np.mean(covers)) if covers else float("nan"), "mc_low": float(mc_low),
            "mc_high": float(mc_high), "printed": float(np.mean(printed)),
            "width": float(np.median(widths)) if widths else float("nan"),
            "fisher_width": float(np.median(fisher)), "n": repetitions}


# The grid of the README and benchmarks/trust_coverage_table.txt: (systems, dialogues, rho, shape).
GRID = ([(s, d, rho, {}) for s in (6, 7, 8, 10, 16) for d in (30, 100) for rho in (0.5, 0.8, 0.95)]
        + [(s, d, 0.8, shape) for s in (6, 10) for d in (30, 100)
           for shape in ({"gain": 0.5}, {"gain": 1.5}, {"likert": True})]
        + [(16, 30, 0.95, shape) for shape in ({"gain": 0.5}, {"likert": True})])


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    only = sys.argv[2:] or list(TRUTH)
    for statistic in only:
        for systems, dialogues, rho, shape in GRID:
            r = rates(reps, systems, dialogues, statistic, rho, seed=systems * 1000 + dialogues, **shape)
            print(f"{statistic}, {systems} systems, {dialogues} dialogues, rho {rho} {shape or ''}: "
                  f"covers {r['covers']:.3f} [{r['mc_low']:.3f}, {r['mc_high']:.3f}], printed {r['printed']:.2f}, "
                  f"width {r['width']:.3f}, n {r['n']}", flush=True)
