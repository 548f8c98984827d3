"""Acceptance simulation of `judge estimate --baseline` (calibration.study.pairwise): coverage of the win-rate and
Bradley-Terry intervals, width against the human-only ones, and rank sets against the true ranking.

Each cell simulates a pairwise study many times: K systems with true strengths, D dialogues; on every dialogue
each system is compared with the baseline and (K - 1) // 2 more random pairs of the others (both orders asked).
Human votes: P(first wins) = sigmoid(q_1 - q_2) with q = strength + a per-dialogue-and-system effect (tau), ties
in between (a tie keeps the expected vote); one vote per pair. The judge copies the human vote with probability
`copy` and otherwise votes from its own view (its strengths, distorted by a length bias on the two texts'
lengths and a style bias on their markdown, plus a position bias for the system shown first); its verdict is the
mean over the two orders. Each text's length is its system's typical length plus its own, and its markdown
headers, list items and bold spans Poisson counts at its system's rates; humans ignore length and markdown, so the
length- and style-controlled win rates' truth is the win rate. A uniform random share of dialogues is labelled (all
their pairs). The truth is the population estimand: each system's expected win rate against the baseline and the
Bradley-Terry fit to the expected votes over the design's pairs (tau attenuates it), computed once per cell by
quadrature. Coverage counts
rows where an interval is printed (the count beside it). Cells "all tied" give every system the same strength:
the rank sets must then claim nothing.

    nice -n 10 python benchmarks/pairwise_coverage.py > benchmarks/pairwise_coverage_table.txt   # the README's table
    python benchmarks/pairwise_coverage.py --cells 8,13 --repetitions 1000                  # two rows, more studies
    python benchmarks/pairwise_coverage.py --quick               # a smaller grid (tests/test_pairwise_estimate.py)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# one BLAS thread: the fits' matrices are small, and threads fighting over shared cores made a study 4 times slower
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")
from dataclasses import dataclass  # noqa: E402 -- below the BLAS thread settings on purpose
from pathlib import Path  # noqa: E402 -- below the BLAS thread settings on purpose

import numpy as np  # noqa: E402 -- below the BLAS thread settings on purpose
from scipy import stats as scipy_stats  # noqa: E402 -- below the BLAS thread settings on purpose

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.study.bradley_terry import bradley_terry, bt_rows, newton  # noqa: E402
from calibration.study.pairs import Pairs  # noqa: E402
from calibration.study.rank_sets import combined_rank_sets, rank_df, rank_sets  # noqa: E402
from calibration.study.win_rates import length_controlled_rows, style_controlled_rows, win_rate_rows  # noqa: E402

CONFIDENCE = 0.95
TAU = 0.6  # per-dialogue spread of a system's quality, in log odds
TIE = 0.3  # share of the smaller side's probability turned into ties
LENGTH_NOISE = 0.7  # spread of a text's length around its system's typical length (sd units)

# judges: copy = P(verdict = the human vote), own = weight of the true strengths in its own view,
# length = its length bias (log odds per sd of a system's length), position = log odds for the first shown,
# style = log odds per unit of the summed markdown gaps (headers, list items, bold; each (a - b) / (a + b + 1))
JUDGES = {
    "none (r=0)": dict(copy=0.0, own=0.0, length=0.0, position=0.0, style=0.0),
    "weak": dict(copy=0.2, own=0.5, length=0.5, position=0.0, style=0.0),
    "good": dict(copy=0.6, own=1.0, length=0.0, position=0.0, style=0.0),
    "strong (0.9)": dict(copy=0.9, own=1.0, length=0.0, position=0.0, style=0.0),
    "position-biased": dict(copy=0.4, own=1.0, length=0.0, position=1.5, style=0.0),
    "length-biased": dict(copy=0.4, own=1.0, length=1.0, position=0.0, style=0.0),
    "style-biased": dict(copy=0.4, own=1.0, length=0.5, position=0.0, style=1.5),
}
MARKDOWN_RATE = 1.5  # a system's typical count of headers, list items or bold spans (times a lognormal habit)


@dataclass
class Cell:
    systems: int
    dialogues: int
    share: float
    judge: str
    spread: float = 0.7  # sd of the true strengths; 0: every system tied (rank sets must then claim nothing)

    @property
    def pairs(self) -> int:
        return self.dialogues * (self.systems - 1 + (self.systems - 1) // 2)


FULL = [Cell(6, 100, 0.05, "none (r=0)"), Cell(6, 100, 0.2, "good"), Cell(6, 400, 0.1, "position-biased"),
        Cell(10, 200, 0.1, "weak"), Cell(10, 200, 0.1, "strong (0.9)"), Cell(12, 300, 0.05, "length-biased"),
        Cell(20, 150, 0.2, "good"), Cell(20, 700, 0.05, "position-biased"), Cell(20, 700, 0.1, "none (r=0)"),
        Cell(6, 100, 0.1, "none (r=0)"), Cell(6, 100, 0.1, "good", spread=0.0), Cell(10, 200, 0.1, "weak", spread=0.0),
        Cell(6, 100, 0.1, "style-biased"), Cell(10, 200, 0.1, "style-biased"), Cell(20, 700, 0.05, "style-biased"),
        Cell(6, 60, 0.05, "style-biased")]  # 3 labelled dialogues: the fewest any interval is printed for
QUICK = [Cell(6, 100, 0.1, "position-biased"), Cell(8, 150, 0.2, "style-biased"), Cell(10, 100, 0.1, "none (r=0)"),
         Cell(6, 100, 0.1, "good", spread=0.0)]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


GH_X, GH_W = np.polynomial.hermite_e.hermegauss(60)
GH_W = GH_W / GH_W.sum()


def expected_vote(delta):
    """E[sigmoid(delta + tau (z1 - z2))], z standard normal: the population's expected vote for a gap."""
    delta = np.asarray(delta, dtype=float)
    return (sigmoid(delta[..., None] + TAU * np.sqrt(2.0) * GH_X) * GH_W).sum(-1)


def design(k: int, dialogues: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, second, dialogue) of every pair; system 0 is the baseline."""
    extra = (k - 1) // 2
    first, second, dialogue = [], [], []
    others = np.arange(1, k)
    for d in range(dialogues):
        a = list(others)
        b = [0] * (k - 1)
        for _ in range(extra):
            i, j = rng.choice(others, 2, replace=False)
            a.append(i)
            b.append(j)
        a, b = np.array(a), np.array(b)
        flip = rng.random(len(a)) < 0.5
        first.append(np.where(flip, b, a))
        second.append(np.where(flip, a, b))
        dialogue.append(np.full(len(a), d))
    return np.concatenate(first), np.concatenate(second), np.concatenate(dialogue)


def truth(k: int, strengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(win rate of each system against the baseline, population Bradley-Terry strengths), baseline = 0."""
    win = expected_vote(strengths - strengths[0])
    extra = (k - 1) // 2
    rows, weights, outcomes = [], [], []
    for i in range(1, k):
        rows.append((i, 0))
        weights.append(1.0)
    n_other = (k - 1) * (k - 2) / 2
    for i in range(1, k):
        for j in range(i + 1, k):
            rows.append((i, j))
            weights.append(extra / n_other if n_other else 0.0)
    x = np.zeros((len(rows), k))
    for r, (i, j) in enumerate(rows):
        x[r, i] += 1
        x[r, j] -= 1
        outcomes.append(expected_vote(strengths[i] - strengths[j]))
    x = x[:, 1:]
    w = np.array(weights)
    theta, ok = newton(x, w, w * np.array(outcomes))
    assert ok
    return win, np.insert(theta, 0, 0.0)


def simulate(cell: Cell, strengths, lengths, habits, rng) -> tuple[Pairs, dict, dict]:
    k = cell.systems
    first, second, dialogue = design(k, cell.dialogues, rng)
    z = TAU * rng.standard_normal((cell.dialogues, k))
    p = sigmoid(strengths[first] - strengths[second] + z[dialogue, first] - z[dialogue, second])
    tie = TIE * 2 * np.minimum(p, 1 - p)
    u = rng.random(len(p))
    h = np.where(u < p - tie / 2, 1.0, np.where(u < p + tie / 2, 0.5, 0.0))
    j = JUDGES[cell.judge]
    # each text's length (in sd units): its system's typical length and the dialogue's own; humans ignore it
    text = lengths[None, :] + LENGTH_NOISE * rng.standard_normal((cell.dialogues, k))
    markdown = rng.poisson(habits[None, :, :], size=(cell.dialogues, k, 3)).astype(float)

    def order(shown_first, shown_second):  # P(the first shown wins) in the judge's own view; 10% ties
        a, b = markdown[dialogue, shown_first], markdown[dialogue, shown_second]
        q = sigmoid(j["own"] * (strengths[shown_first] - strengths[shown_second]) + j["position"]
                    + j["length"] * (text[dialogue, shown_first] - text[dialogue, shown_second])
                    + j["style"] * ((a - b) / (a + b + 1.0)).sum(1))
        v = rng.random(len(q))
        return np.where(v < 0.1, 0.5, np.where(rng.random(len(q)) < q, 1.0, 0.0))

    forward = order(first, second)  # P(first) as shown
    swapped = 1.0 - order(second, first)  # shown swapped, mapped back to the pair's order
    copy = rng.random(len(p)) < j["copy"]
    f = np.where(copy, h, (forward + swapped) / 2.0)
    labelled_dialogues = rng.choice(cell.dialogues, max(1, round(cell.share * cell.dialogues)), replace=False)
    labelled = np.isin(dialogue, labelled_dialogues)
    systems = [f"s{i:02d}" for i in range(k)]
    data = Pairs("sim", systems, first, second, dialogue, np.arange(cell.dialogues), f, np.where(labelled, h, np.nan))
    lengths = {(d, systems[s]): text[d, s] for d in range(cell.dialogues) for s in range(k)}
    # words: 100 at the typical length, a text's length sd (LENGTH_NOISE) about 30% of it
    styles = {(d, systems[s]): np.array([100.0 * np.exp(0.4 * text[d, s]), *markdown[d, s]])
              for d in range(cell.dialogues) for s in range(k)}
    return data, lengths, styles


def run_cell(cell: Cell, repetitions: int, seed: int, controlled_only: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    k = cell.systems
    strengths = np.concatenate([[0.0], rng.normal(0.0, 1.0, k - 1)]) * cell.spread
    lengths = rng.standard_normal(k)
    habits = MARKDOWN_RATE * np.exp(0.7 * rng.standard_normal((k, 3)))
    win, theta = truth(k, strengths)
    true_rank = 1 + (theta[None, :] > theta[:, None]).sum(1)
    stats = {key: [] for key in ("win_cover", "win_shown", "bt_cover", "bt_shown", "win_ratio", "bt_ratio",
                                 "rank_cover", "rank_cover_h", "rank_size", "rank_size_h", "rank_larger", "corr",
                                 "lam", "lc_cover", "lc_ratio", "sc_cover", "sc_ratio", "win_eff", "win_err2",
                                 "win_herr2",
                                 "bt_eff", "bt_err2", "bt_herr2", "win_plug", "bt_plug")}
    covers = ("win_cover", "bt_cover", "lc_cover", "sc_cover", "rank_cover")
    study = {key: [] for key in covers}  # the study each coverage entry came from (its rows are correlated)
    for repetition in range(repetitions):
        data, text, styles = simulate(cell, strengths, lengths, habits, rng)
        # humans ignore length and style here, so the controlled win rates' estimand is the win rate itself
        for key, controlled in (("lc", length_controlled_rows(data, 0, CONFIDENCE, text)),
                                ("sc", style_controlled_rows(data, 0, CONFIDENCE, styles)[0])):
            for r, s in zip(controlled, range(1, k)):
                if np.isfinite(r["ci_low"]):
                    stats[f"{key}_cover"].append(r["ci_low"] <= win[s] <= r["ci_high"])
                    if np.isfinite(r["width_ratio"]):
                        stats[f"{key}_ratio"].append(r["width_ratio"])
        if not controlled_only:  # the win rates, strengths and rank sets too
            for r, s in zip(win_rate_rows(data, 0, CONFIDENCE), range(1, k)):
                shown = np.isfinite(r["ci_low"])
                stats["win_shown"].append(shown)
                if shown:
                    stats["win_cover"].append(r["ci_low"] <= win[s] <= r["ci_high"])
                    if np.isfinite(r["width_ratio"]):
                        stats["win_ratio"].append(r["width_ratio"])
                    if np.isfinite(r["effective_labels"]) and np.isfinite(r["human_only"]):
                        # what the printed effective_labels claims, and what the estimate was worth: n x the
                        # human-only share's squared error over the estimate's (pooled over the studies)
                        stats["win_eff"].append(r["effective_labels"])
                        stats["win_plug"].append(r["n_labelled"] / r["width_ratio"] ** 2)  # uncorrected
                        stats["win_err2"].append((r["estimate"] - win[s]) ** 2)
                        stats["win_herr2"].append(r["n_labelled"] * (r["human_only"] - win[s]) ** 2)
            fit = bradley_terry(data, 0, CONFIDENCE)
            human = bradley_terry(data, 0, CONFIDENCE, human_only=True)
            stats["lam"].append(fit.lam)
            if fit.ok and fit.df >= 1:
                q = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, fit.df))
                se = fit.se[1:]
                shown = np.isfinite(se) & np.isfinite(fit.theta[1:])
                stats["bt_shown"].extend(shown)
                stats["bt_cover"].extend((np.abs(fit.theta[1:] - theta[1:]) <= q * se)[shown])
                if human.ok:
                    both = shown & np.isfinite(human.se[1:]) & np.isfinite(human.theta[1:])
                    stats["bt_ratio"].extend((se / human.se[1:])[both])
                rows = bt_rows(data, 0, CONFIDENCE, fit, human)
                for r, s in zip(rows, range(1, k)):
                    if np.isfinite([r["effective_labels"], r["human_only"], r["estimate"]]).all():
                        stats["bt_eff"].append(r["effective_labels"])
                        stats["bt_plug"].append(r["n_labelled"] / r["width_ratio"] ** 2)  # se ratio, uncorrected
                        stats["bt_err2"].append((r["estimate"] - theta[s]) ** 2)
                        stats["bt_herr2"].append(r["n_labelled"] * (r["human_only"] - theta[s]) ** 2)
            else:
                stats["bt_shown"].extend([False] * (k - 1))
            _, low, high = combined_rank_sets(fit, human, CONFIDENCE)
            _, hlow, hhigh = rank_sets(human.theta, human.cov, rank_df(human), CONFIDENCE)
            stats["rank_cover"].append(bool(((low <= true_rank) & (true_rank <= high)).all()))
            stats["rank_cover_h"].append(bool(((hlow <= true_rank) & (true_rank <= hhigh)).all()))
            stats["rank_size"].append(float(np.mean(high - low + 1)))
            stats["rank_size_h"].append(float(np.mean(hhigh - hlow + 1)))
            stats["rank_larger"].append(float(np.mean((high - low) > (hhigh - hlow))))
        for key in covers:
            study[key] += [repetition] * (len(stats[key]) - len(study[key]))
        lab = data.labelled
        stats["corr"].append(np.corrcoef(data.judge[lab], data.human[lab])[0, 1] if lab.sum() > 2 else np.nan)
    mean = lambda key: float(np.nanmean(stats[key])) if len(stats[key]) else float("nan")  # noqa: E731

    def margin(key):
        """The Monte-Carlo 95% margin of a coverage: 1.96 cluster standard errors of the ratio, studies as
        clusters (a study's rows share its votes, so a binomial margin over rows would be too small)."""
        hits = np.asarray(stats[key], dtype=float)
        if len(hits) < 2:
            return float("nan")
        covered = np.bincount(study[key], hits, repetitions)
        counted = np.bincount(study[key], minlength=repetitions).astype(float)
        residual = covered - hits.mean() * counted
        return float(1.96 * np.sqrt(np.sum(residual ** 2) * repetitions / (repetitions - 1)) / counted.sum())
    def over_worth(key, printed="eff"):
        """Printed effective_labels (mean) over what the estimates were worth (n x the human-only estimate's mean
        squared error over the estimate's), with a Monte-Carlo se by the delta method over the rows."""
        eff, err2, herr2 = (np.asarray(stats[f"{key}_{part}"], dtype=float) for part in (printed, "err2", "herr2"))
        if len(eff) < 2 or err2.sum() <= 0:
            return float("nan"), float("nan")
        value = eff.mean() / (herr2.mean() / err2.mean())
        grad = np.stack([eff / eff.mean(), -herr2 / herr2.mean(), err2 / err2.mean()])
        return float(value), float(value * np.sqrt(np.var(grad.sum(0)) / len(eff)))

    return {"systems": k, "pairs": cell.pairs, "win_worth": over_worth("win"), "bt_worth": over_worth("bt"),
            "win_plug": over_worth("win", "plug"), "bt_plug": over_worth("bt", "plug"), "share": cell.share,
            "labelled": round(cell.share * cell.dialogues),
            "judge": cell.judge + (", all tied" if cell.spread == 0 else ""), "corr": mean("corr"),
            "lambda": mean("lam"),
            "win_cover": mean("win_cover"), "win_n": len(stats["win_cover"]), "win_shown": mean("win_shown"),
            "win_ratio": mean("win_ratio"), "bt_cover": mean("bt_cover"), "bt_n": len(stats["bt_cover"]),
            "bt_shown": mean("bt_shown"),
            "bt_ratio": mean("bt_ratio"), "lc_cover": mean("lc_cover"), "lc_n": len(stats["lc_cover"]),
            "lc_ratio": mean("lc_ratio"), "sc_cover": mean("sc_cover"), "sc_n": len(stats["sc_cover"]),
            "sc_ratio": mean("sc_ratio"), "rank_cover": mean("rank_cover"), "rank_cover_h": mean("rank_cover_h"),
            "rank_size": mean("rank_size"), "rank_size_h": mean("rank_size_h"), "rank_larger": mean("rank_larger"),
            "repetitions": repetitions, **{f"{key}_margin": margin(key) for key in covers}}


HEADER = ("systems  pairs  labelled(dialogues)  judge                       corr  lambda | win cover (n) +-MC   width "
          "| BT cover (n) +-MC    width | LC cover (n) +-MC    width | SC cover (n) +-MC    width | rank cover +-MC  "
          "human | set size  human  larger | eff/worth: win  BT (plug-in n/ratio^2: win  BT)")


def line(r: dict) -> str:
    cover = lambda key: (f"{r[key + '_cover']:.3f} ({r[key + '_n']:>5}) {r[key + '_cover_margin']:.3f} "  # noqa: E731
                         f"{r[key + '_ratio']:5.3f}")
    return (f"{r['systems']:>7} {r['pairs']:>6} {r['share']:>8.0%} ({r['labelled']:>4})   {r['judge']:<26} "
            f"{r['corr']:5.2f} {r['lambda']:6.2f} | {cover('win')} | {cover('bt')} | {cover('lc')} | {cover('sc')} | "
            f"{r['rank_cover']:10.3f} {r['rank_cover_margin']:.3f} {r['rank_cover_h']:6.3f} | "
            f"{r['rank_size']:8.2f} {r['rank_size_h']:6.2f} {r['rank_larger']:6.3f} | "
            f"{r['win_worth'][0]:.2f}+-{r['win_worth'][1]:.2f} {r['bt_worth'][0]:.2f}+-{r['bt_worth'][1]:.2f} "
            f"({r['win_plug'][0]:.2f} {r['bt_plug'][0]:.2f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small grid, few repetitions (for the test)")
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cells", help="only these rows of the grid, by position from 0 (e.g. 8,12): a row re-run "
                                        "with more repetitions keeps its seed (its first studies are the table's)")
    parser.add_argument("--controlled-only", action="store_true",
                        help="only the length- and style-controlled win rates (the others' columns nan): faster")
    args = parser.parse_args(argv)
    cells = QUICK if args.quick else FULL
    chosen = range(len(cells)) if args.cells is None else [int(c) for c in args.cells.split(",")]
    repetitions = args.repetitions or (150 if args.quick else 300)
    print(HEADER)
    started = time.perf_counter()
    for index in chosen:
        result = run_cell(cells[index], repetitions, args.seed + index, args.controlled_only)
        print(line(result), flush=True)
    print(f"({repetitions} repetitions a cell, {CONFIDENCE:.0%} intervals, {time.perf_counter() - started:.0f}s; "
          "width = PPI / human-only interval width, mean where both exist; larger = share of systems whose rank set "
          "is larger than the human-only one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
