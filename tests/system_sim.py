"""Plant and recover for the system-level correlation interval that `judge calibrate` and `judge select` print:
few systems drawn from many (their true judge and human means correlated rho), dialogues with a shared difficulty
and summary noise that the judge partly shares with the humans. The interval resamples dialogues and systems, so
its estimand is the correlation over the population of systems (Pearson rho; Spearman (6/pi) asin(rho/2); Kendall
(2/pi) asin(rho) for normal means). Used by tests/test_select_guards.py (reduced) and benchmarks/trust_coverage.py:

    python tests/system_sim.py 300
"""

from __future__ import annotations

import sys

import numpy as np

from calibration.correlation import PairedScores, bootstrap_ci

TRUTH = {"pearson": lambda r: r, "spearman": lambda r: 6 / np.pi * np.arcsin(r / 2),
         "kendall": lambda r: 2 / np.pi * np.arcsin(r)}


def rates(repetitions: int, systems: int, dialogues: int, statistic: str = "pearson", rho: float = 0.8,
          spread: float = 0.5, noise: float = 0.8, seed: int = 0) -> dict:
    """Shares of studies whose 95% interval is printed and covers the population value, and its median width."""
    rng = np.random.default_rng(seed)
    truth = TRUTH[statistic](rho)
    covers, printed, widths = [], [], []
    for rep in range(repetitions):
        means = rng.multivariate_normal([0, 0], spread ** 2 * np.array([[1, rho], [rho, 1]]), systems)
        shared = rng.normal(0, noise, (dialogues, systems))
        human = means[:, 0] + rng.normal(0, 1, (dialogues, 1)) + shared
        judge = (means[:, 1] + rng.normal(0, 1, (dialogues, 1)) + 0.5 * shared
                 + rng.normal(0, noise, (dialogues, systems)))
        paired = PairedScores("c", np.arange(dialogues), np.arange(systems), judge, human)
        low, high = bootstrap_ci(paired, "system", statistic, 400, seed=rep)
        printed.append(bool(np.isfinite(low)))
        if printed[-1]:
            covers.append(bool(low <= truth <= high))
            widths.append(high - low)
    return {"covers": float(np.mean(covers)) if covers else float("nan"), "printed": float(np.mean(printed)),
            "width": float(np.median(widths)) if widths else float("nan"), "n": repetitions}


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for statistic in TRUTH:
        for systems in (4, 6, 10, 16):
            for dialogues in (20, 100):
                r = rates(reps, systems, dialogues, statistic)
                print(f"{statistic}, {systems} systems, {dialogues} dialogues: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
