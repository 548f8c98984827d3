"""Plant and recover for `judge drift` on the hard cases: a deterministic judge (a few % of verdicts change between
re-asks) or a sampled one, k = 1 or 3 samples, 2-6 systems, 10-60 anchor dialogues, skewed Likert verdicts, and
block mode, where one prompt per dialogue shares its re-ask noise across the dialogue's summaries (a re-ask that
reads the block differently moves several of its verdicts the same way). Used by tests/test_drift_sim.py (reduced)
and benchmarks/trust_coverage.py (the full table):

    python tests/drift_sim.py 300
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from calibration.trust.drift import drift

# Verdict shares of a skewed 1-5 criterion (most summaries fine), as the shared data's Likert criteria look.
LIKERT = np.array([0.05, 0.10, 0.20, 0.35, 0.30])


def runs(rng, dialogues=20, systems=4, k=3, flip=0.03, block=False, shift=0.0):
    """Two runs (reference, new) of one judge on the same anchors, as `judge score --samples k` writes them.

    Each sample is the summary's verdict moved one point (clipped to 1-5) with probability `flip` per summary; in
    block mode the same share of verdicts moves, but in bursts: a re-ask of the dialogue's block is read
    differently with probability 2 x `flip`, and then moves each of its verdicts, with probability a half, the
    same way. Planted drift: `shift` = the share of judgments whose samples all move up one point in the new run
    (unclipped), so the planted mean shift is `shift`."""
    verdict = rng.choice(np.arange(1, 6), size=(dialogues, systems), p=LIKERT)

    def ask():
        if block:
            burst = rng.random((k, dialogues, 1)) < min(1.0, 2 * flip)
            step = np.broadcast_to(rng.choice([-1, 1], size=(k, dialogues, 1)), (k, dialogues, systems))
            moved = burst & (rng.random((k, dialogues, systems)) < 0.5)
        else:
            moved = rng.random((k, dialogues, systems)) < flip
            step = rng.choice([-1, 1], size=moved.shape)
        return np.where(moved, np.clip(verdict + step, 1, 5), verdict).astype(float)

    old, new = ask(), ask()
    if shift:
        new = new + (rng.random((dialogues, systems)) < shift)
    ids = np.repeat([f"d{d:03d}" for d in range(dialogues)], systems)
    names = np.tile([f"s{j}" for j in range(systems)], dialogues)

    def frame(samples):
        flat = samples.reshape(k, -1).T
        return pd.DataFrame({"item_id": ids, "system": names, "criterion": "c", "score": flat.mean(axis=1),
                             "samples": [list(row) for row in flat]})

    return frame(old), frame(new)


def changed_runs(rng, dialogues=20, systems=4, change=0.03, block=False, shift=0.0):
    """A deterministic judge (one sample, --samples 1) whose new run differs from the reference in `change` of its
    judgments, each moved one point up or down (clipped to 1-5); in block mode a dialogue's block is read
    differently with probability 2 x `change` and then moves each verdict, with probability a half, one way.
    Planted drift: `shift` of the judgments move one point more (unclipped; negative: down). Returns the two runs
    and the true mean shift: change x (P(verdict < 5) - P(verdict > 1)) / 2 + shift, as the clipping makes it."""
    verdict = rng.choice(np.arange(1, 6), size=(dialogues, systems), p=LIKERT)
    if block:
        moved = (rng.random((dialogues, 1)) < min(1.0, 2 * change)) & (rng.random((dialogues, systems)) < 0.5)
        step = np.broadcast_to(rng.choice([-1, 1], size=(dialogues, 1)), moved.shape)
    else:
        moved = rng.random((dialogues, systems)) < change
        step = rng.choice([-1, 1], size=moved.shape)
    new = np.where(moved, np.clip(verdict + step, 1, 5), verdict).astype(float)
    if shift:
        new = new + np.sign(shift) * (rng.random((dialogues, systems)) < abs(shift))
    ids = np.repeat([f"d{d:03d}" for d in range(dialogues)], systems)
    names = np.tile([f"s{j}" for j in range(systems)], dialogues)

    def frame(values):
        return pd.DataFrame({"item_id": ids, "system": names, "criterion": "c", "score": values.ravel().astype(float),
                             "samples": [[v] for v in values.ravel().astype(float)]})

    truth = change * (LIKERT[:4].sum() - LIKERT[1:].sum()) / 2 + shift
    return frame(verdict.astype(float)), frame(new), truth


def changed_rates(repetitions: int, dialogues: int, seed: int = 0, margin: float = 0.25, **case) -> dict:
    """As rates(), for changed_runs(): the shares of runs whose 95% shift interval and 90% TOST interval cover the
    true shift, of zero-width intervals, and of DRIFT verdicts."""
    rng = np.random.default_rng(seed)
    out = {"covers": [], "tost_covers": [], "zero_width": [], "drift": [], "no_drift": [], "printed": []}
    for rep in range(repetitions):
        reference, new, truth = changed_runs(rng, dialogues, **case)
        row = drift(reference, new, margin=margin, bootstrap=400, seed=rep, scale=(1, 5)).drift.iloc[0]
        printed = bool(np.isfinite(row.ci_low))
        out["printed"].append(printed)
        out["covers"].append(bool(printed and row.ci_low <= truth <= row.ci_high))
        out["tost_covers"].append(bool(printed and row.tost_low <= truth <= row.tost_high))
        out["zero_width"].append(bool(printed and (row.ci_high - row.ci_low <= 1e-12
                                                   or row.tost_high - row.tost_low <= 1e-12)))
        out["drift"].append(row.verdict == "drift")
        out["no_drift"].append(row.verdict == "no drift")
    printed = np.array(out["printed"])
    summary = {name: float(np.mean(values)) for name, values in out.items()}
    for name in ("covers", "tost_covers"):
        summary[name] = float(np.mean(np.array(out[name])[printed])) if printed.any() else float("nan")
    summary["n"] = repetitions
    return summary


def rates(repetitions: int, dialogues: int, seed: int = 0, margin: float = 0.25, **case) -> dict:
    """Per cell: the shares of runs whose 95% mean-shift interval covers the planted shift (`covers`), whose 90% TOST
    interval does (`tost_covers`), called DRIFT (`drift`: the false-alarm rate with nothing planted, the power
    otherwise), NO DRIFT (`no_drift`), and printed an interval at all (`printed`)."""
    rng = np.random.default_rng(seed)
    planted = case.get("shift", 0.0)
    out = {"covers": [], "tost_covers": [], "drift": [], "no_drift": [], "printed": []}
    for rep in range(repetitions):
        reference, new = runs(rng, dialogues, **case)
        row = drift(reference, new, margin=margin, bootstrap=400, seed=rep).drift.iloc[0]
        printed = bool(np.isfinite(row.ci_low))
        out["printed"].append(printed)
        out["covers"].append(bool(printed and row.ci_low <= planted <= row.ci_high))
        out["tost_covers"].append(bool(printed and row.tost_low <= planted <= row.tost_high))
        out["drift"].append(row.verdict == "drift")
        out["no_drift"].append(row.verdict == "no drift")
    printed = np.array(out["printed"])
    summary = {name: float(np.mean(values)) for name, values in out.items()}
    for name in ("covers", "tost_covers"):  # coverage where an interval is printed
        summary[name] = float(np.mean(np.array(out[name])[printed])) if printed.any() else float("nan")
    summary["n"] = repetitions
    return summary


CASES = {
    "deterministic, per summary": {"k": 3, "flip": 0.03},
    "deterministic, block": {"k": 3, "flip": 0.03, "block": True},
    "sampled, per summary": {"k": 3, "flip": 0.3},
    "sampled, block": {"k": 3, "flip": 0.3, "block": True},
    "deterministic k=1, block": {"k": 1, "flip": 0.03, "block": True},
}

if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for name, case in CASES.items():
        for systems in (2, 6):
            for dialogues in (10, 20, 60):
                r = rates(reps, dialogues, systems=systems, **case)
                print(f"{name}, {systems} systems, {dialogues} dialogues: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
