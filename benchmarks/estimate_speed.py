"""Speed of `judge screen` and `judge estimate` on DialSummEval-sized input, beside per-resample loops.

Input: 1,400 summaries (100 dialogues x 14 systems) x 4 criteria; the judge is a metric of metric_scores.csv
given to every criterion, the labels are the 3 annotators of annotations.csv (invented data of the same size when
../shared/data is absent). Both verbs run in-process, with their output directories in a temporary folder.

- screen: 1,000 bootstrap resamples of the dialogues, all systems and criteria at once (counts @ scores), timed
  beside two loops over the same 1,000 resamples: pandas (materialise the resample, group by) and numpy.
- estimate: its intervals are closed-form (t with the PPI++ variance), so one run resamples nothing; its
  resampling use is the repeated hiding of labels (the coverage check): 1,000 repetitions of every system and
  every paired difference, as one array, beside a loop over the repetitions.

    python benchmarks/estimate_speed.py [--resamples 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.humans import aggregate_humans  # noqa: E402
from calibration.io import load_human_labels, load_judge_scores  # noqa: E402
from calibration.stats import resample_counts  # noqa: E402
from calibration.study.estimate_tables import pair_indices  # noqa: E402
from calibration.study.matrices import study_matrices  # noqa: E402
from calibration.study.ppi import ppi_mean  # noqa: E402
from calibration.study.systems import score_table, systems_table, weighted_means  # noqa: E402
from judge.cli import main  # noqa: E402

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "dialsummeval"
CRITERIA = ["coherence", "consistency", "fluency", "relevance"]
METRIC = "bartscore_s_h"


def inputs(folder: Path) -> tuple[Path, Path]:
    """A long judge-scores CSV (1,400 x 4 rows) and the labels file."""
    if (DATA / "metric_scores.csv").exists():
        metric = pd.read_csv(DATA / "metric_scores.csv", dtype={"item_id": str})[["item_id", "system", METRIC]]
        labels = DATA / "annotations.csv"
    else:  # invented, same shape
        rng = np.random.default_rng(0)
        grid = pd.MultiIndex.from_product([[f"d{i:03d}" for i in range(100)], [f"s{j:02d}" for j in range(14)]])
        metric = grid.to_frame(index=False, name=["item_id", "system"]).assign(**{METRIC: rng.normal(size=1400)})
        rows = [(i, s, a, c, int(rng.integers(1, 6))) for i, s in grid for a in ("a1", "a2", "a3") for c in CRITERIA]
        labels = folder / "labels.csv"
        pd.DataFrame(rows, columns=["item_id", "system", "annotator", "criterion", "score"]).to_csv(labels, index=False)
    judge = pd.concat([metric.rename(columns={METRIC: "score"}).assign(criterion=c) for c in CRITERIA])
    path = folder / "judge.csv"
    judge[["item_id", "system", "criterion", "score"]].to_csv(path, index=False)
    return path, labels


def timed(function, *args):
    started = time.perf_counter()
    value = function(*args)
    return time.perf_counter() - started, value


def quiet_main(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    assert code == 0, argv
    return code


def pandas_loop(judge: pd.DataFrame, resamples: int, seed: int) -> np.ndarray:
    """The straightforward bootstrap: materialise each resample of dialogues, then group by."""
    items = np.sort(judge["item_id"].unique())
    counts = resample_counts(np.random.default_rng(seed), len(items), resamples)
    out = []
    for b in range(resamples):
        sample = pd.DataFrame({"item_id": np.repeat(items, counts[b].astype(int))})
        out.append(sample.merge(judge, on="item_id").groupby(["criterion", "system"])["score"].mean().to_numpy())
    return np.array(out)


def numpy_loop(judge: pd.DataFrame, resamples: int, seed: int) -> np.ndarray:
    """The same resamples, one at a time, with numpy: index the dialogues, take column means."""
    _, _, table = score_table(judge, CRITERIA)
    rng = np.random.default_rng(seed)
    n = table.shape[0]
    out = np.empty((resamples, table.shape[1]))
    for b in range(resamples):
        out[b] = np.nanmean(table[rng.integers(0, n, n)], axis=0)
    return out


def vectorised_core(judge: pd.DataFrame, resamples: int, seed: int) -> np.ndarray:
    """What systems_table does for the resamples: counts of each dialogue, then one matrix product."""
    _, _, table = score_table(judge, CRITERIA)
    return weighted_means(table, resample_counts(np.random.default_rng(seed), table.shape[0], resamples))


def label_masks(count, n_labelled, repetitions):
    rng = np.random.default_rng(0)
    keep = np.argsort(rng.random((repetitions, count)), axis=1)[:, :n_labelled]
    mask = np.zeros((repetitions, count))
    np.put_along_axis(mask, keep, 1.0, axis=1)
    return mask


def repetitions_vectorised(cells, repetitions):
    """All repetitions of every row of a cell at once: one (repetitions, rows, dialogues) array."""
    for human, judge in cells:
        masks = label_masks(human.shape[-1], 20, repetitions)
        ppi_mean(np.where(masks[:, None, :] > 0, human[None], np.nan), judge[None])


def repetitions_loop(cells, repetitions):
    """One repetition at a time (each call still covers every system or pair of a criterion)."""
    for human, judge in cells:
        for mask in label_masks(human.shape[-1], 20, repetitions).astype(bool):
            ppi_mean(np.where(mask, human, np.nan), judge)


def cell_loop(cells, repetitions):
    """One call per (repetition, system or pair): the way one calls a scalar estimator."""
    for human, judge in cells:
        for mask in label_masks(human.shape[-1], 20, repetitions).astype(bool):
            for row in range(human.shape[0]):
                ppi_mean(np.where(mask, human[row], np.nan), judge[row])


def main_benchmark() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        judge_path, labels_path = inputs(folder)
        print(f"input: {judge_path.stat().st_size // 1024} kB of judge scores (1,400 summaries x 4 criteria), "
              f"labels {labels_path}")
        screen_time, _ = timed(quiet_main, ["screen", "--judgments", str(judge_path), "--human", str(labels_path),
                                            "--budget", "50", "--bootstrap", str(args.resamples), "--scale", "1,5",
                                            "--output-dir", str(folder / "screen")])
        estimate_time, _ = timed(quiet_main, ["estimate", "--judgments", str(judge_path), "--human", str(labels_path),
                                              "--scale", "1,5", "--output-dir", str(folder / "estimate")])
        print(f"judge screen   (whole verb, {args.resamples} resamples): {screen_time:6.2f} s")
        print(f"judge estimate (whole verb, closed-form intervals): {estimate_time:6.2f} s")

        judge = load_judge_scores(judge_path)
        core, _ = timed(vectorised_core, judge, args.resamples, 0)
        table, _ = timed(systems_table, judge, CRITERIA, args.resamples, 0)
        loop_numpy, _ = timed(numpy_loop, judge, args.resamples, 0)
        loop_pandas, _ = timed(pandas_loop, judge, args.resamples, 0)
        print(f"\nscreen bootstrap, {args.resamples} resamples of 100 dialogues x 56 (criterion, system) means:")
        print(f"  vectorised resamples (counts @ scores)  {core:7.3f} s")
        print(f"  per-resample loop, numpy                {loop_numpy:7.3f} s   ({loop_numpy / core:6.1f}x slower)")
        print(f"  per-resample loop, pandas               {loop_pandas:7.3f} s   ({loop_pandas / core:6.1f}x slower)")
        print(f"  whole systems table (CIs, Holm, dominance)  {table:7.3f} s")

        human = aggregate_humans(load_human_labels(labels_path))
        cells = []
        for criterion in CRITERIA:
            m = study_matrices(judge, human, criterion)
            a, b = pair_indices(len(m.systems))
            cells += [(m.human.T, m.judge.T), (m.human.T[a] - m.human.T[b], m.judge.T[a] - m.judge.T[b])]
        fast, _ = timed(repetitions_vectorised, cells, args.resamples)
        slow, _ = timed(repetitions_loop, cells, args.resamples)
        few = max(1, args.resamples // 50)
        per_cell, _ = timed(cell_loop, cells, few)
        per_cell *= args.resamples / few  # each repetition costs the same: timed on fewer, scaled up
        print(f"\nestimate, {args.resamples} label-hiding repetitions x (14 systems + 91 pairs) x 4 criteria:")
        print(f"  vectorised (one array)                 {fast:7.3f} s")
        print(f"  per-repetition loop (rows vectorised)   {slow:7.3f} s   ({slow / fast:6.1f}x slower)")
        print(f"  per-cell loop (scaled from {few})         {per_cell:7.3f} s   ({per_cell / fast:6.1f}x slower)")


if __name__ == "__main__":
    main_benchmark()
