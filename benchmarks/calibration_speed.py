"""Speed of the vectorised bootstrap against a per-resample loop of scipy.stats calls.

The full DialSummEval analysis: ROUGE-1 (metric_scores.csv) against the cleaned human means, 4 criteria,
3 levels (system / summary / item), Pearson, Spearman and Kendall tau-b, 1,000 bootstrap resamples of the
dialogues (and of the systems at system level).

    python benchmarks/calibration_speed.py [--resamples 1000] [--loop-resamples N]

--loop-resamples times the scipy loop on fewer resamples and scales its time up linearly (each resample
costs the same), for a quick run; by default both sides run all resamples.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.alignment import align  # noqa: E402
from calibration.correlation import PairedScores, correlations  # noqa: E402
from calibration.humans import aggregate_humans  # noqa: E402
from calibration.io import load_human_labels, load_judge_scores  # noqa: E402

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "dialsummeval"
SCIPY = (
    lambda x, y: scipy_stats.pearsonr(x, y).statistic,
    lambda x, y: scipy_stats.spearmanr(x, y).statistic,
    lambda x, y: scipy_stats.kendalltau(x, y, variant="b").statistic,
)


def _defined(function, x, y):
    # scipy warns and returns NaN on a constant input; the loop skips such contexts, as the package does.
    return np.nan if np.ptp(x) == 0 or np.ptp(y) == 0 else function(x, y)


def scipy_loop(paired: PairedScores, n_resamples: int, seed: int) -> np.ndarray:
    """The straightforward implementation: materialise each resample, then call scipy per statistic."""
    rng = np.random.default_rng(seed)
    n_items, n_systems = paired.judge.shape
    out = np.empty((n_resamples, 3, 3))
    for b in range(n_resamples):
        items = rng.integers(0, n_items, n_items)
        systems = rng.integers(0, n_systems, n_systems)
        judge, human = paired.judge[items], paired.human[items]
        for s, function in enumerate(SCIPY):
            out[b, 0, s] = _defined(function, judge.mean(0)[systems], human.mean(0)[systems])
            out[b, 1, s] = np.nanmean([_defined(function, j, h) for j, h in zip(judge, human)])
            out[b, 2, s] = _defined(function, judge.ravel(), human.ravel())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--loop-resamples", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (DATA / "annotations.csv").exists():
        print(f"skipped: DialSummEval data not found at {DATA} (set JUDGE_SHARED_DATA)")
        return 0
    # Reading: the labels loader uses the csv module (it knows the physical line of every record, which pandas'
    # C reader does not, so errors can name the line even after a quoted multi-line cell). Its cost next to
    # pandas.read_csv on the same file:
    for name in ("annotations.csv", "annotations_amt.csv"):
        started = time.perf_counter()
        load_human_labels(DATA / name)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        pd.read_csv(DATA / name, dtype=str, keep_default_na=False)
        theirs = time.perf_counter() - started
        print(f"loading {name}: load_human_labels {ours:.3f} s (csv module, checks included), "
              f"pandas.read_csv alone {theirs:.3f} s")
    human = aggregate_humans(load_human_labels(DATA / "annotations.csv"), clean=True)
    pairs, _ = align(load_judge_scores(DATA / "metric_scores.csv", score_column="rouge-1"), human)
    criteria = sorted(pairs["criterion"].unique())

    started = time.perf_counter()
    table = correlations(pairs, criteria, n_resamples=args.resamples, seed=args.seed)
    vectorised = time.perf_counter() - started

    loop_resamples = args.loop_resamples or args.resamples
    started = time.perf_counter()
    for criterion in criteria:
        scipy_loop(PairedScores.from_pairs(pairs, criterion), loop_resamples, args.seed)
    loop = (time.perf_counter() - started) * args.resamples / loop_resamples

    print(f"DialSummEval, ROUGE-1 vs cleaned human means: {len(criteria)} criteria x 3 levels x 3 statistics, "
          f"{args.resamples} bootstrap resamples ({len(table)} CIs)")
    print(f"vectorised (calibration.correlations): {vectorised:8.2f} s")
    scaled = "" if loop_resamples == args.resamples else f" (timed on {loop_resamples} resamples, scaled)"
    print(f"per-resample scipy.stats loop:         {loop:8.2f} s{scaled}")
    print(f"speed-up: {loop / vectorised:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
