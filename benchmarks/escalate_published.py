"""`judge escalate` against the published fixed-sequence procedure of Trust or Escalate, on the same splits.

The published procedure (Jung, Brahman & Choi, "Trust or Escalate: LLM Judges with Provable Guarantees for Human
Agreement", ICLR 2025), written here from the paper as a baseline (it is not in the package): a judge's thresholds
are the distinct confidences of the calibration cells, tested from the most confident down; a threshold is tested
only once at least 30 calibration cells reach it; H0: P(disagree | confidence >= threshold) > alpha, rejected when
the exact binomial p-value P(Bin(n, alpha) <= e) is <= the level; the walk stops at the first threshold not rejected
and keeps the last one rejected (none: the judge accepts nothing). For a cascade the judges are calibrated in order,
judge k on the calibration cells the judges before it escalated: at level delta / K each (`split`: a guarantee for
the whole cascade, by Bonferroni, as escalate gives), or at delta each (`per judge`: as the paper runs it, which holds
for the cascade only at K delta).

Ours: `calibration.cascade.threshold_tests.fit_cascade`, the function `judge escalate` runs, with the unlabelled cells
of the split fixing its path (cells drawn one by one: the exact binomial over cells).

Each setting: 40 random splits of the cells into 250 labelled (calibration) and the rest (test, unlabelled). Printed:
the mean coverage (share of the test cells accepted) and the number of splits in which the guarantee held (the
accepted test verdicts agree with humans at >= 1 - alpha; nothing accepted holds trivially).

(a) Real judges, ../shared/data (or $JUDGE_SHARED_DATA): DialSummEval's automatic metrics read as pairwise judges,
    one verdict per dialogue and pair of its 14 summaries (9,100 pairs a criterion): a metric prefers the summary it
    scores higher, its confidence the logistic of the score gap over the gaps' SD; the human verdict is the preference
    the three annotators' mean scores give (a human tie is a verdict the metrics, which never tie, get wrong). One
    judge: bartscore_s_h, questeval; the cascade: rouge-1, then questeval, then bartscore_s_h. These metrics' most
    confident 5% of pairs agree with humans only 0.82-0.89 (consistency, relevance) and far less on coherence and
    fluency, so at alpha 0.15-0.2 neither procedure can accept much; alpha 0.25 and 0.35 are shown too. DECODA's
    DeepSeek-R1 judge gives one answer per cell (no confidence: all or nothing, both procedures alike) and has 360
    cells a criterion, too few for 250 labelled and a test set: not used.
(b) Simulated judges whose most confident verdicts still disagree with humans at a rate e0 (5 or 10%): confidence
    c uniform, P(disagree | c) = e0 + (0.5 - e0) (1 - c)^2. The cascade: three judges with independent errors, e0
    10%, 7.5% and 5% (cheapest first).

    python benchmarks/escalate_published.py            # the table (a few minutes on one core)
    python benchmarks/escalate_published.py --splits 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import binom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.cascade.threshold_tests import decide, fit_cascade  # noqa: E402

LABELLED = 250
SPLITS = 40
N_MIN = 30  # the published procedure tests a threshold only once this many calibration cells reach it
SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
TABLE = Path(__file__).with_name("escalate_published_table.txt")


# -- the published procedure (the baseline) ---------------------------------------------------------------------------


def published_threshold(conf: np.ndarray, agree: np.ndarray, alpha: float, level: float) -> float:
    """One judge's threshold by the published fixed-sequence test: +inf when the first tested threshold fails."""
    finite = np.isfinite(conf)
    chosen = np.inf
    for value in np.unique(conf[finite])[::-1]:
        accepted = finite & (conf >= value)
        n = int(accepted.sum())
        if n < N_MIN:
            continue
        errors = int((~agree[accepted]).sum())
        if binom.cdf(errors, n, alpha) > level:
            break
        chosen = value
    return chosen


def published_cascade(conf: np.ndarray, agree: np.ndarray, alpha: float, delta: float, split: bool) -> np.ndarray:
    """The judges calibrated in order, each on the calibration cells the judges before it escalated, at delta / K
    (`split`) or delta each."""
    judges = conf.shape[1]
    level = delta / judges if split else delta
    thresholds = np.full(judges, np.inf)
    reach = np.ones(len(conf), bool)
    for k in range(judges):
        thresholds[k] = published_threshold(np.where(reach, conf[:, k], np.nan), agree[:, k], alpha, level)
        with np.errstate(invalid="ignore"):
            reach &= ~(conf[:, k] >= thresholds[k])
    return thresholds


# -- the judges ---------------------------------------------------------------------------------------------------


def simulated(e0s: list[float], size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    conf = rng.random((size, len(e0s)))
    wrong = np.column_stack([rng.random(size) < e0 + (0.5 - e0) * (1 - conf[:, k]) ** 2 for k, e0 in enumerate(e0s)])
    return conf, ~wrong


def metric_judges(criterion: str, metrics: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """DialSummEval's metrics as pairwise judges of every pair of summaries of a dialogue, and their agreement with
    the preference of the annotators' mean scores."""
    scores = pd.read_csv(SHARED / "dialsummeval" / "metric_scores.csv")
    labels = pd.read_csv(SHARED / "dialsummeval" / "annotations.csv")
    means = labels[labels["criterion"] == criterion].groupby(["item_id", "system"])["score"].mean()
    gaps, human = {m: [] for m in metrics}, []
    for item, group in scores.groupby("item_id", sort=True):
        group = group.set_index("system").sort_index()
        systems = list(group.index)
        for a in range(len(systems)):
            for b in range(a + 1, len(systems)):
                h = means[(item, systems[a])] - means[(item, systems[b])]
                human.append(np.sign(h))
                for m in metrics:
                    gaps[m].append(group.loc[systems[a], m] - group.loc[systems[b], m])
    conf, agree = [], []
    for m in metrics:
        gap = np.array(gaps[m], float)
        conf.append(1 / (1 + np.exp(-np.abs(gap) / np.std(gap))))
        agree.append(np.sign(gap) == np.array(human))
    return np.column_stack(conf), np.column_stack(agree)


# -- the comparison -----------------------------------------------------------------------------------------------


def outcome(conf, agree, thresholds, alpha) -> tuple[float, bool]:
    first = decide(conf, thresholds)
    accepted = first >= 0
    if not accepted.any():
        return 0.0, True
    picked = agree[np.arange(len(first)), np.maximum(first, 0)]
    return float(accepted.mean()), bool(picked[accepted].mean() >= 1 - alpha)


def compare(conf, agree, alpha: float, delta: float, splits: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    methods = ["ours", "published"] + (["per judge"] if conf.shape[1] > 1 else [])
    coverage = {m: [] for m in methods}
    held = {m: 0 for m in methods}
    for _ in range(splits):
        order = rng.permutation(len(conf))
        cal, test = order[:LABELLED], order[LABELLED:]
        fits = {"ours": fit_cascade(conf[cal], agree[cal], conf[test], alpha, delta).thresholds,
                "published": published_cascade(conf[cal], agree[cal], alpha, delta, split=True)}
        if "per judge" in methods:
            fits["per judge"] = published_cascade(conf[cal], agree[cal], alpha, delta, split=False)
        for m, thresholds in fits.items():
            share, ok = outcome(conf[test], agree[test], thresholds, alpha)
            coverage[m].append(share)
            held[m] += ok
    return {m: (float(np.mean(coverage[m])), held[m]) for m in methods}


def settings():
    for alpha in (0.15, 0.2):
        yield "simulated", "one judge, e0 5%", alpha, lambda: simulated([0.05], 5000, 1)
        yield "simulated", "one judge, e0 10%", alpha, lambda: simulated([0.10], 5000, 2)
        yield "simulated", "cascade, e0 10/7.5/5%", alpha, lambda: simulated([0.10, 0.075, 0.05], 5000, 3)
    if not (SHARED / "dialsummeval" / "metric_scores.csv").is_file():
        print(f"DialSummEval not found at {SHARED / 'dialsummeval'} (set JUDGE_SHARED_DATA): real judges skipped")
        return
    for criterion in ("consistency", "relevance"):
        for alpha in (0.15, 0.2, 0.25, 0.35):
            for name, metrics in (("bartscore_s_h", ["bartscore_s_h"]), ("questeval", ["questeval"]),
                                  ("cascade rouge-1, questeval, bartscore_s_h",
                                   ["rouge-1", "questeval", "bartscore_s_h"])):
                yield f"DialSummEval {criterion}", name, alpha, lambda m=metrics, c=criterion: metric_judges(c, m)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", type=int, default=SPLITS)
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--no-write", action="store_true", help="print only (do not rewrite the table file)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cache: dict = {}
    lines = [f"{'data':<26} {'judges':<42} {'alpha':>5}  {'ours':>6} {'held':>5}  {'published':>9} {'held':>5}  "
             f"{'per judge':>9} {'held':>5}"]
    print(lines[0], flush=True)
    for data, name, alpha, make in settings():
        key = (data, name)
        if key not in cache:
            cache[key] = make()
        conf, agree = cache[key]
        result = compare(conf, agree, alpha, args.delta, args.splits, seed=len(lines))
        per = result.get("per judge")
        line = (f"{data:<26} {name:<42} {alpha:>5}  {result['ours'][0]:>6.3f} {result['ours'][1]:>5}  "
                f"{result['published'][0]:>9.3f} {result['published'][1]:>5}  "
                + (f"{per[0]:>9.3f} {per[1]:>5}" if per else ""))
        lines.append(line.rstrip())
        print(lines[-1], flush=True)
    lines.append(f"\ncoverage: mean share of the test cells accepted over {args.splits} splits of {LABELLED} labelled; "
                 f"held: splits whose accepted test verdicts agree at >= 1 - alpha (delta {args.delta}). published: "
                 f"delta / K per judge for a cascade (a guarantee for the whole cascade); per judge: delta each (the "
                 f"paper's run; holds for the cascade only at K delta). {time.perf_counter() - start:.0f} s")
    print(lines[-1])
    if not args.no_write:
        TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
