"""Simulated studies for the coverage checks of calibration/study/estimate.py (no shared data needed).

Each repetition draws N judged dialogues from a super-population, labels n of them at random, and asks
`ppi_mean` for an interval on the super-population mean of the human score (for one system) or of the paired
difference between two systems. The true means are computed once from a large draw of the same population.

Two kinds of data: "likert" (1-5 scores from 2-3 annotators, each rounded and clipped, averaged per summary, as
the guidelines' annotators give them; the judge is a rounded, clipped 1-5 score too) and "gaussian".
`rho` sets the correlation of the judge's latent score with the summary's true quality.

Run as a script for the table of the closing note: `python tests/coverage_sim.py`.
"""

from __future__ import annotations

import numpy as np

N_JUDGED = 100
TRUTH_DRAW = 400_000


def _population(rng, size: int, kind: str, rho: float, annotators: int, shift: float = 0.0):
    """(human score, judge score) of `size` summaries of one system, one per dialogue; `base` is the dialogue's
    own difficulty, shared by the systems of that dialogue (so paired differences are correlated)."""
    quality = rng.standard_normal(size) + shift
    latent_judge = rho * quality + np.sqrt(1.0 - rho * rho) * rng.standard_normal(size)
    if kind == "gaussian":
        human = quality + 0.5 * rng.standard_normal((annotators, size)).mean(0)
        return human, latent_judge
    # Likert: annotators rate around the quality, rounded and clipped to 1..5 each; the mean is the human score.
    ratings = np.clip(np.rint(3.2 + 0.9 * quality + 0.7 * rng.standard_normal((annotators, size))), 1, 5)
    judge = np.clip(np.rint(3.0 + 1.1 * latent_judge), 1, 5)
    return ratings.mean(0), judge


def draw_pair(rng, shape, kind: str, rho: float, annotators: int, effect: float = 0.3):
    """Two systems on the same dialogues: human and judge scores of each, with a shared dialogue effect."""
    size = int(np.prod(shape))
    dialogue = 0.8 * rng.standard_normal(size)
    out = []
    for shift in (0.0, effect):
        quality = 0.6 * rng.standard_normal(size) + dialogue + shift
        latent_judge = rho * quality / np.sqrt(1.0) + np.sqrt(max(1.0 - rho * rho, 0.0)) * rng.standard_normal(size)
        if kind == "gaussian":
            human = quality + 0.5 * rng.standard_normal((annotators, size)).mean(0)
            judge = latent_judge
        else:
            ratings = np.clip(np.rint(3.2 + 0.9 * quality + 0.7 * rng.standard_normal((annotators, size))), 1, 5)
            human, judge = ratings.mean(0), np.clip(np.rint(3.0 + 1.1 * latent_judge), 1, 5)
        out.append((human.reshape(shape), judge.reshape(shape)))
    return out


def truths(kind: str, rho: float, annotators: int, effect: float = 0.3, seed: int = 12345):
    """The super-population mean of one system's human score, and of the paired difference."""
    rng = np.random.default_rng(seed)
    (ha, _), (hb, _) = draw_pair(rng, (TRUTH_DRAW,), kind, rho, annotators, effect)
    return float(ha.mean()), float((hb - ha).mean())


def label_mask(rng, reps: int, n: int, n_judged: int = N_JUDGED) -> np.ndarray:
    """(reps, n_judged) booleans with exactly n True per row, at random."""
    order = rng.random((reps, n_judged)).argsort(axis=1)
    return order < n


def simulate(kind: str, rho: float, n: int, reps: int = 2000, annotators: int = 3, effect: float = 0.3,
             seed: int = 0, confidence: float = 0.95) -> dict:
    """Coverage and widths of the PPI and human-only intervals for one system's mean and for a difference."""
    from calibration.study.ppi import ppi_mean

    rng = np.random.default_rng(seed)
    (ha, fa), (hb, fb) = draw_pair(rng, (reps, N_JUDGED), kind, rho, annotators, effect)
    mask = label_mask(rng, reps, n)
    mean_truth, difference_truth = truths(kind, rho, annotators, effect)
    out = {}
    for name, human, judge, truth in (("mean", ha, fa, mean_truth), ("difference", hb - ha, fb - fa,
                                                                      difference_truth)):
        result = ppi_mean(np.where(mask, human, np.nan), judge, confidence)
        printed = np.isfinite(result.ci_low) & np.isfinite(result.ci_high)
        covered = (result.ci_low <= truth) & (truth <= result.ci_high)
        human_printed = np.isfinite(result.human_only_ci_low)
        human_covered = (result.human_only_ci_low <= truth) & (truth <= result.human_only_ci_high)
        width = result.ci_high - result.ci_low
        human_width = result.human_only_ci_high - result.human_only_ci_low
        both = printed & human_printed
        out[name] = {
            "printed": float(printed.mean()),
            "coverage": float(covered[printed].mean()) if printed.any() else float("nan"),
            "human_coverage": float(human_covered[human_printed].mean()) if human_printed.any() else float("nan"),
            "width_ratio": float(width[both].mean() / human_width[both].mean()) if both.any() else float("nan"),
            "separated": float(((result.ci_low > 0) | (result.ci_high < 0))[printed].mean()) if printed.any()
            else float("nan"),
        }
    return out


if __name__ == "__main__":
    print("kind      rho  n   | mean: printed coverage (human-only) width-ratio | difference: printed coverage "
          "(human-only) width-ratio")
    for kind in ("likert", "gaussian"):
        for rho in (0.0, 0.3, 0.7):
            for n in (2, 3, 4, 6, 10, 20, 50):
                r = simulate(kind, rho, n, reps=4000, seed=n)
                m, d = r["mean"], r["difference"]
                print(f"{kind:<9} {rho:.1f} {n:>3} | {m['printed']:.2f} {m['coverage']:.3f} "
                      f"({m['human_coverage']:.3f}) {m['width_ratio']:.3f} | {d['printed']:.2f} {d['coverage']:.3f} "
                      f"({d['human_coverage']:.3f}) {d['width_ratio']:.3f}")
