"""`judge tune`'s acceptance rule and gain intervals, measured on simulated studies.

Each study: D dialogues x 4 systems, 3 annotators. A summary's latent quality is a dialogue effect plus a system
effect plus its own part; each annotator and each judge sees it through noise of its own, and both score on 1-5
(thresholds at -1.5, -0.5, 0.5, 1.5). The current judge and the "equal" candidates have judge noise SD 1.2; the
"better" candidate is twice as precise (its noise variance halved: SD 1.2 / sqrt 2). The statistic is item-level
Kendall tau-b with the mean human score; the true gain is its population value, from 4 x 100,000 summaries.

Measured (the core `judge tune` runs, calibration.tune.gain: paired_gain and decide, Romano-Wolf step-down
max-T over the candidates at alpha / 2, equal-tailed family bounds at alpha 0.05, 1000 resamples):
  null      4 equal candidates, 100 dialogues: share of studies where anything is accepted (want <= 5%)
  power     1 better + 3 equal, 100 dialogues: share where the better one is accepted and picked (want >= 80%), and
            share where no equal one is accepted (want >= 95%); also at 125 and 200 dialogues, and with the better
            one's noise SD halved (four times as precise)
  family    in the null and power studies: share where every candidate's family lower bound is at most its true
            gain (0 for an equal one; want >= 95%)
  coverage  1 better candidate alone at 50, 100 and 300 dialogues: share of studies whose printed 95% interval
            holds the true gain (want >= 93%), for the percentile and the BCa interval (the same studies), and
            share whose lower bound (a family of one: the one-sided 95% studentized bound) is below it

    python benchmarks/tune_simulation.py [--studies N] [--write]     # N per row (5 N for the null and the power
                                                                     # at 100 dialogues); --write: the table file
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

# One BLAS thread: the replicates are many small products, which threads only slow down on a shared machine.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402
from scipy.stats import kendalltau  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.tune.gain import decide, dialogue_counts, interval, paired_gain  # noqa: E402

SYSTEMS = np.array([-0.5, -0.15, 0.15, 0.5])
CUTS = np.array([-1.5, -0.5, 0.5, 1.5])
SD_DIALOGUE, SD_OWN, SD_HUMAN, SD_JUDGE = 0.5, 1.0, 0.9, 1.2
SD_BETTER = SD_JUDGE / np.sqrt(2.0)
ALPHA, RESAMPLES = 0.05, 1000
FOCUS = 5
TABLE = Path(__file__).with_name("tune_simulation_table.txt")


def likert(values: np.ndarray) -> np.ndarray:
    return 1.0 + np.searchsorted(CUTS, values).astype(float)


def draw(rng: np.random.Generator, n_dialogues: int, judge_sds: list[float]):
    """(mean human score, [each judge's scores], dialogue index) of one study, cells ordered by dialogue."""
    quality = (rng.normal(0, SD_DIALOGUE, (n_dialogues, 1)) + SYSTEMS + rng.normal(0, SD_OWN, (n_dialogues, 4)))
    quality = quality.ravel()
    human = np.mean([likert(quality + rng.normal(0, SD_HUMAN, quality.shape)) for _ in range(3)], axis=0)
    judges = [likert(quality + rng.normal(0, sd, quality.shape)) for sd in judge_sds]
    return human, judges, np.repeat(np.arange(n_dialogues), 4)


@functools.cache
def true_gain(sd: float, seed: int = 12345) -> float:
    rng = np.random.default_rng(seed)
    gains = []
    for _ in range(4):
        human, (current, candidate), _ = draw(rng, 25_000, [SD_JUDGE, sd])
        gains.append(kendalltau(candidate, human).statistic - kendalltau(current, human).statistic)
    return float(np.mean(gains))


def study(rng, n_dialogues: int, candidate_sds: list[float], seed: int) -> tuple[list[dict], list]:
    """The decision rows of one study (as `judge tune` makes them, percentile intervals) and the gains."""
    human, (current, *others), dialogue = draw(rng, n_dialogues, [SD_JUDGE, *candidate_sds])
    counts = dialogue_counts(n_dialogues, RESAMPLES, np.random.default_rng(seed))
    gains = {f"c{i}": paired_gain("kendall", current, scores, human, dialogue, counts)
             for i, scores in enumerate(others)}
    rows = decide(gains, ALPHA, "percentile")
    return [{"candidate": name, **row} for name, row in rows.items()], list(gains.values())


def family_covered(rows: list[dict], truths: list[float]) -> bool:
    return all(row["lower_family"] <= truth for row, truth in zip(rows, truths))


def run(studies: int, seed: int) -> list[tuple[str, str, float, int]]:
    """`studies` per row; FOCUS times as many for the null and the power at 100 and 125 dialogues, whose rates sit near
    their thresholds (an exact 5% test measures about 5%), so their Monte Carlo error is small enough to read."""
    rng = np.random.default_rng(seed)
    rows = []
    nothing = covered = 0
    focused = studies * FOCUS
    for s in range(focused):
        result, _ = study(rng, 100, [SD_JUDGE] * 4, s)
        nothing += not any(r["accepted"] for r in result)
        covered += family_covered(result, [0.0] * 4)
    setting = "null: 4 equal candidates, 100 dialogues"
    rows.append((setting, "anything accepted", 1 - nothing / focused, focused))
    rows.append((setting, "every family lower bound <= its true gain", covered / focused, focused))
    for what, sd, n_dialogues in (("twice as precise", SD_BETTER, 100), ("twice as precise", SD_BETTER, 125),
                                  ("twice as precise", SD_BETTER, 200), ("noise SD halved", SD_JUDGE / 2, 100)):
        found = clean = covered = 0
        truths = [true_gain(sd)] + [0.0] * 3
        n = focused if sd == SD_BETTER and n_dialogues in (100, 125) else studies  # where the power is near 80%
        for s in range(n):
            result, _ = study(rng, n_dialogues, [sd] + [SD_JUDGE] * 3, s)
            accepted = [r for r in result if r["accepted"]]
            found += bool(accepted) and max(accepted, key=lambda r: r["gain"])["candidate"] == "c0"
            clean += not any(r["accepted"] for r in result[1:])
            covered += family_covered(result, truths)
        setting = f"1 {what} + 3 equal, {n_dialogues} dialogues"
        rows.append((setting, f"better one accepted and picked (gain {true_gain(sd):.3f})", found / n, n))
        rows.append((setting, "no equal one accepted", clean / n, n))
        rows.append((setting, "every family lower bound <= its true gain", covered / n, n))
    truth = true_gain(SD_BETTER)
    for n_dialogues in (50, 100, 300):
        n = studies
        held = {"percentile": 0, "bca": 0, "lower": 0}
        for s in range(n):
            (row,), (gain,) = study(rng, n_dialogues, [SD_BETTER], s)
            held["percentile"] += row["ci_low"] <= truth <= row["ci_high"]
            low, high = interval(gain, 1 - ALPHA, "bca")
            held["bca"] += low <= truth <= high
            held["lower"] += row["lower_family"] <= truth
        setting = f"1 twice as precise alone, {n_dialogues} dialogues"
        for method in ("percentile", "bca"):
            rows.append((setting, f"95% {method} interval holds the true gain {truth:.4f}", held[method] / n, n))
        rows.append((setting, "family lower bound (97.5% one-sided) <= the true gain", held["lower"] / n, n))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.name}")
    args = parser.parse_args()
    started = time.time()
    rows = run(args.studies, args.seed)
    lines = [f"{'setting':<46} {'measured':<52} {'rate':>6} {'studies':>7}"]
    for setting, what, rate, n in rows:
        se = np.sqrt(rate * (1 - rate) / n)
        lines.append(f"{setting:<46} {what:<52} {rate:>6.3f} {n:>7}   (+-{1.96 * se:.3f})")
    text = "\n".join(lines) + "\n"
    footer = (f"\njudge noise SD {SD_JUDGE}, better {SD_BETTER:.3f}; human noise SD {SD_HUMAN}, 3 annotators; "
              f"alpha {ALPHA}, {RESAMPLES} resamples; seed {args.seed}; {time.time() - started:.0f} s\n"
              f"python benchmarks/tune_simulation.py --studies {args.studies} --seed {args.seed} --write\n")
    print(text + footer, end="")
    if args.write:
        TABLE.write_text(__doc__.split("\n\n")[1] + "\n\n" + text + footer, encoding="utf-8")


if __name__ == "__main__":
    main()
