"""Where the interval's width at 10-20 labels goes, against the oracle (issue 24): each cost added one at a time.

The cells of benchmarks/labels_coverage.py (its `draw`: four judges, correlations rho, 0.8 rho, 0.5 rho, 0; S
systems; N = 100 judged dialogues; n labelled at random). Every row is ppi_mean with a t quantile on n - 1 degrees
of freedom unless said, so its width over human-only's (same labels, t on n - 1) compares like with like:

  analytic     sqrt(1 - R^2 (1 - n/N)), R^2 of the best linear combination of the judges (within systems)
  f*, lam*     the best combination known (from a draw of 400,000) and its PPI++ lambda known: the oracle simulated
               (differs from `analytic` only by E[se] against sqrt(E se^2) and the t quantile on both sides)
  f*, shared   the best combination known, one lambda cross-fitted over the criterion's systems (lambda's cost)
  f*, own      ... each system's lambda fitted on its own labels (n - 2 df and lambda's error, as `judge estimate`
               prints a single judge at 10-19 labels): the per-system cost
  jury         the cross-fitted ridge over the four judges, lambda m/(n+m) (`judge estimate --judge`)
  one, own     the first judge alone, its lambda fitted per system (what `judge estimate` prints without --judge)
  one, shared  the first judge alone, one cross-fitted lambda over the systems (ppi_mean(shared=True))

Printed: width over human-only (mean width / mean human-only width), over the analytic oracle, and coverage of
the rows with an interval (Wilson 95%).

    nice -n 10 python benchmarks/width_decomposition.py --repetitions 1000
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labels_coverage import draw  # noqa: E402

from calibration.study.estimate import ppi_mean  # noqa: E402
from calibration.study.predictor import cross_fitted_prediction, cross_prediction_lambda  # noqa: E402


def wilson(hits: int, count: int) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    return proportion_confint(hits, count, alpha=0.05, method="wilson")


def best_combination(human, judges, pairs=None):
    """Within-system least-squares weights of the judges (per system, or per pair of differences)."""
    if pairs is None:
        y, x = human, judges
    else:
        a, b = pairs
        y, x = human[:, a] - human[:, b], judges[:, a] - judges[:, b]
    y = y - y.mean(0)
    x = x - x.mean(0)
    beta = np.stack([np.linalg.lstsq(x[:, s], y[:, s], rcond=None)[0] for s in range(y.shape[1])])
    fit = np.einsum("dsk,sk->ds", x, beta)
    r2 = 1.0 - (y - fit).var(0) / y.var(0)
    slope = (fit * y).mean(0) / (fit * fit).mean(0)  # 1 for least squares
    return beta, r2, slope


def run(kind, rho, systems, n, reps, seed, big_n=100, what="mean"):
    big_h, big_j = draw(np.random.default_rng(12345), (400_000 // systems,), kind, rho, systems)
    truth = big_h.mean(0)
    pairs = np.array(list(combinations(range(systems), 2))).T if what == "diff" else None
    beta, r2, slope = best_combination(big_h, big_j, pairs)
    if what == "diff":
        truth = truth[pairs[0]] - truth[pairs[1]]
    share = 1 - n / big_n
    analytic = np.sqrt(1 - np.mean(r2) * share)
    lam_star = slope * (big_n - n) / big_n
    rng = np.random.default_rng(seed)
    rows = {key: {"cover": 0, "shown": 0, "w": 0.0, "h": 0.0} for key in
            ("f*, lam*", "f*, shared", "f*, own", "jury", "jury, shared", "one, own", "one, shared")}
    move = lambda m: np.moveaxis(m, -1, -2)  # noqa: E731
    for start in range(0, reps, 50):
        count = min(50, reps - start)
        human, judges = draw(rng, (count, big_n), kind, rho, systems)
        labelled = rng.random((count, big_n)).argsort(axis=1) < n
        y = np.where(labelled[..., None], human, np.nan)
        if what == "diff":
            a, b = pairs
            jury = cross_fitted_prediction(judges, y, contrasts=True)
            jury = jury[..., a] - jury[..., b]
            dj = judges[..., a, :] - judges[..., b, :]
            star = np.einsum("...dsk,sk->...ds", dj, beta)
            one = dj[..., 0]
            y = y[..., a] - y[..., b]
        else:
            jury = cross_fitted_prediction(judges, y)
            star = np.einsum("...dsk,sk->...ds", judges, beta)
            one = judges[..., 0]
        Y = move(y)
        results = {
            "f*, lam*": ppi_mean(Y, move(star), lam=np.broadcast_to(lam_star, Y.shape[:-1])),
            "f*, shared": ppi_mean(Y, move(star), shared=True),
            "f*, own": ppi_mean(Y, move(star)),
            "jury": ppi_mean(Y, move(jury), lam=cross_prediction_lambda(Y, move(jury)), fitted_judge=True),
            "jury, shared": ppi_mean(Y, move(jury), shared=True),
            "one, own": ppi_mean(Y, move(one)),
            "one, shared": ppi_mean(Y, move(one), shared=True),
        }
        for key, r in results.items():
            shown = np.isfinite(r.ci_low)
            row = rows[key]
            row["cover"] += int((shown & (r.ci_low <= truth) & (truth <= r.ci_high)).sum())
            row["shown"] += int(shown.sum())
            row["w"] += float(np.where(shown, r.ci_high - r.ci_low, 0).sum())
            row["h"] += float(np.where(shown, r.human_only_ci_high - r.human_only_ci_low, 0).sum())
    return analytic, rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--cell", action="append", default=[], metavar="KIND,RHO,S,N,WHAT")
    args = parser.parse_args(argv)
    cells = [c.split(",") for c in args.cell] or [
        [kind, rho, s, n, what] for what in ("mean", "diff") for kind in ("gaussian", "likert")
        for rho in ("0.5", "0.9") for s in ("2", "6") for n in ("10", "20")]
    print("cell                         | analytic | variant: width/h width/oracle cover [Wilson 95%]")
    for kind, rho, s, n, what in cells:
        analytic, rows = run(kind, float(rho), int(s), int(n), args.repetitions, args.seed, what=what)
        head = f"{what} {kind} rho={rho} S={s} n={n}"
        print(f"{head:28s} | {analytic:.3f}")
        for key, row in rows.items():
            ratio = row["w"] / row["h"]
            low, high = wilson(row["cover"], row["shown"])
            print(f"   {key:14s} {ratio:.3f} {ratio / analytic:.3f}  {row['cover'] / row['shown']:.3f} "
                  f"[{low:.3f}, {high:.3f}]", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
