"""Acceptance simulation of issue 24's active design (`judge screen --design active`, `judge estimate --plan`):
labels drawn where the judge is unsure, with known inclusion probabilities, against a uniform draw of as many.

Per cell: N judged dialogues of one system. Human score y ~ N(3, 1) ("gaussian") or a 1-5 Likert mean of 3
annotators ("likert"); the judge is f = y + e, good on most dialogues (e sd 0.25) and bad on a `hard` share
(e sd 1.5: the judge misreads them). The judge's uncertainty signal (what screen's items.csv calls uncertainty:
sample spread, entropy, order disagreement) is "informative": high on the hard dialogues (0.9 +- 0.1), low
elsewhere (0.1 +- 0.1), or "useless": the same values shuffled. Uniform: n dialogues drawn at random, estimated
by ppi_mean_weighted with equal probabilities; active: n drawn by systematic sampling with
screen.inclusion_probabilities (proportional to the uncertainty, floored at ACTIVE_FLOOR x uniform), estimated
by ppi_mean_weighted with those probabilities (`shown`: the share of active studies with an interval; t on
Kish's effective n leaves none where it falls below 3). Truth: the population mean (3 for gaussian; a large draw for
likert). `saved` = 1 - n_active / n: n_active is the number of labels the active draw needs for the mean width
uniform gets from n, found by running the active draw at 0.3, 0.4, ..., 1.5 x n and interpolating its mean width
(no model of how width falls with n: the judge's term, lambda^2 var(f) / N, does not fall with the labels at all,
so 1 - (width ratio)^2 understates the saving); its Monte Carlo 95% interval by resampling the studies.

    nice -n 10 python benchmarks/active_design.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.study.estimate import MIN_LABELLED, ppi_mean, ppi_mean_weighted  # noqa: E402
from calibration.study.screen import inclusion_probabilities, systematic_sample  # noqa: E402


# The active draw is run at these shares of n to find how many labels it needs for uniform's width at n.
FRACTIONS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.15, 1.3, 1.5)


def population(rng, reps, size, kind, hard):
    if kind == "gaussian":
        y = 3.0 + rng.standard_normal((reps, size))
    else:
        quality = rng.standard_normal((reps, size))
        y = np.clip(np.rint(3.2 + 0.9 * quality[None] + 0.7 * rng.standard_normal((3, reps, size))), 1, 5).mean(0)
    is_hard = rng.random((reps, size)) < hard
    f = y + np.where(is_hard, 1.5, 0.25) * rng.standard_normal((reps, size))
    signal = np.clip(np.where(is_hard, 0.9, 0.1) + 0.1 * rng.standard_normal((reps, size)), 0, 1)
    return y, f, signal


def widths(y, f, mask, prob, truth):
    result = ppi_mean_weighted(np.where(mask, y, np.nan), f, prob)
    shown = np.isfinite(result.ci_low)
    return result.ci_high - result.ci_low, shown, (result.ci_low <= truth) & (truth <= result.ci_high)


def labels_needed(grid, width_means, target):
    """The active draw's n whose mean width equals `target`, by linear interpolation along the grid (widths fall
    with n); NaN outside it."""
    for k in range(len(grid) - 1):
        upper, lower = width_means[k], width_means[k + 1]
        if np.isfinite(upper) and np.isfinite(lower) and lower <= target <= upper:
            return grid[k] + (grid[k + 1] - grid[k]) * (upper - target) / (upper - lower)
    return np.nan


def run_cell(kind, hard, signal_kind, n, size, reps, seed, fractions=FRACTIONS, bootstrap=300, floor=None):
    rng = np.random.default_rng(seed)
    truth = 3.0 if kind == "gaussian" else population(np.random.default_rng(99), 1, 400_000, kind, hard)[0].mean()
    y, f, signal = population(rng, reps, size, kind, hard)
    if signal_kind == "useless":
        signal = rng.permuted(signal, axis=1)
    out = {}
    uniform_mask = rng.random((reps, size)).argsort(1) < n
    width_u, shown_u, hit_u = widths(y, f, uniform_mask, np.full((reps, size), n / size), truth)
    grid = sorted({max(MIN_LABELLED, int(round(share * n))) for share in fractions})
    active = []
    for size_a in grid:
        pi = np.array([inclusion_probabilities(s, size_a, floor=floor) for s in signal])
        mask = np.zeros((reps, size), dtype=bool)
        for r in range(reps):
            mask[r, systematic_sample(pi[r], rng)] = True
        active.append(widths(y, f, mask, pi, truth))
    width_a, shown_a, hit_a = active[grid.index(n)]  # the active draw of n labels
    out["uniform"] = {"coverage": float(hit_u[shown_u].mean()), "width": width_u}
    out["active"] = {"coverage": float(hit_a[shown_a].mean()), "width": width_a}
    plain = ppi_mean(np.where(uniform_mask, y, np.nan), f)  # `judge estimate` without a plan's probabilities
    out["ppi_mean"] = {"coverage": np.mean((plain.ci_low <= truth) & (truth <= plain.ci_high)),
                       "width": plain.ci_high - plain.ci_low}
    out["shown"] = float(shown_a.mean())

    def saved(rows):
        # A grid point where active prints no interval in more than 2% of studies is no match for uniform's width.
        means = [np.nanmean(w[rows]) if s[rows].mean() >= 0.98 else np.inf for w, s, _ in active]
        return 1.0 - labels_needed(grid, means, np.nanmean(width_u[rows])) / n

    draws = np.random.default_rng(seed + 1).integers(0, reps, (bootstrap, reps))
    spread = np.array([saved(rows) for rows in draws])
    out["saved"] = (saved(np.arange(reps)), *np.nanpercentile(spread, [2.5, 97.5]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--floor", type=float, default=None, help="the uniform share (default: screen's ACTIVE_FLOOR)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print("kind     hard  signal      N   n | cover: uniform active ppi_mean | width: uniform active shown "
          "| labels saved by active [MC 95%]")
    cells = [(kind, hard, sig, size, n) for kind in ("gaussian", "likert") for hard in (0.1, 0.2)
             for sig in ("informative", "useless") for size in (100, 500) for n in (10, 20, 50)]
    if args.quick:
        cells = [("gaussian", 0.1, "informative", 200, 20), ("likert", 0.2, "useless", 200, 20)]
    for index, (kind, hard, sig, size, n) in enumerate(cells):
        o = run_cell(kind, hard, sig, n, size, args.repetitions, index, floor=args.floor)
        saved = o["saved"]
        print(f"{kind:8s} {hard:4.2f} {sig:11s} {size:4d} {n:3d} | {o['uniform']['coverage']:.3f} "
              f"{o['active']['coverage']:.3f} {o['ppi_mean']['coverage']:.3f} | "
              f"{np.nanmean(o['uniform']['width']):.3f} {np.nanmean(o['active']['width']):.3f} {o['shown']:.2f} | "
              f"{saved[0]:+.2f} [{saved[1]:+.2f}, {saved[2]:+.2f}]", flush=True)
    print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
