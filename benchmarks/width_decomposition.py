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
  one, own     the first judge alone, its lambda fitted per system (`judge estimate` without --judge before the
               shared lambda)
  one, shared  the first judge alone, one cross-fitted lambda over the systems (ppi_mean(shared=True), what
               `judge estimate` prints now)

Printed: width over human-only (mean width / mean human-only width), over the analytic oracle (the jury's R^2 for
the f* and jury rows, the first judge's own r^2 for the `one` rows), coverage of the rows with an interval
(Wilson 95%), and the mean printed effective_labels over what the estimates were worth (var(y) / MSE over the
repetitions, var(y) from the large draw; jackknife MC se over chunks of 50).

    nice -n 10 python benchmarks/width_decomposition.py --repetitions 1000
    nice -n 10 python benchmarks/width_decomposition.py --real --repetitions 1000
    nice -n 10 python benchmarks/width_decomposition.py --tradeoff --repetitions 2000

--tradeoff: a lone row (one system) at 10-19 labels, the first judge alone, N = 100 and 500: the width over
human-only at rho 0 (a useless judge) against the width over the oracle's (lambda known) at rho >= 0.3, for lambda
rules computed from the study's labels only (tradeoff's docstring), with a verdict per n.
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labels_coverage import draw, jackknife  # noqa: E402

from calibration.study.ppi import effective_labels, ppi_mean  # noqa: E402
from calibration.study.predictor import cross_fitted_prediction, cross_prediction_lambda, fit_leverage  # noqa: E402


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
    r2_one = best_combination(big_h, big_j[..., :1], pairs)[1]
    variance = big_h.var(0)  # each row's label variance: what one human label is worth
    if what == "diff":
        truth = truth[pairs[0]] - truth[pairs[1]]
        variance = (big_h[:, pairs[0]] - big_h[:, pairs[1]]).var(0)
    share = 1 - n / big_n
    analytic = np.sqrt(1 - np.mean(r2) * share)
    analytic_one = np.sqrt(1 - np.mean(r2_one) * share)
    lam_star = slope * (big_n - n) / big_n
    rng = np.random.default_rng(seed)
    rows = {key: {"cover": 0, "shown": 0, "w": 0.0, "h": 0.0, "parts": []} for key in
            ("f*, lam*", "f*, shared", "f*, own", "jury", "one, own", "one, shared")}
    move = lambda m: np.moveaxis(m, -1, -2)  # noqa: E731
    for start in range(0, reps, 50):
        count = min(50, reps - start)
        human, judges = draw(rng, (count, big_n), kind, rho, systems)
        labelled = rng.random((count, big_n)).argsort(axis=1) < n
        y = np.where(labelled[..., None], human, np.nan)
        if what == "diff":
            a, b = pairs
            jury, fit = cross_fitted_prediction(judges, y, contrasts=True, with_fit=True)
            jury, leverage = jury[..., a] - jury[..., b], fit_leverage(*fit, a, b)
            dj = judges[..., a, :] - judges[..., b, :]
            star = np.einsum("...dsk,sk->...ds", dj, beta)
            one = dj[..., 0]
            y = y[..., a] - y[..., b]
        else:
            jury, fit = cross_fitted_prediction(judges, y, with_fit=True)
            leverage = fit_leverage(*fit)
            star = np.einsum("...dsk,sk->...ds", judges, beta)
            one = judges[..., 0]
        Y = move(y)
        results = {
            "f*, lam*": ppi_mean(Y, move(star), lam=np.broadcast_to(lam_star, Y.shape[:-1])),
            "f*, shared": ppi_mean(Y, move(star), shared=True),
            "f*, own": ppi_mean(Y, move(star)),
            "jury": ppi_mean(Y, move(jury), lam=cross_prediction_lambda(Y, move(jury)), fitted_judge=True,
                             fit_leverage=leverage),
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
            # effective_labels printed, and what the estimates were worth (var(y) / MSE: the human-only mean's MSE
            # is var(y) / n exactly), per chunk
            row["parts"].append((float(np.where(shown, effective_labels(r), 0).sum()), int(shown.sum()),
                                 float(np.where(shown, variance, 0).sum()),
                                 float(np.where(shown, (r.estimate - truth) ** 2, 0).sum())))
    return analytic, analytic_one, rows


def printed_over_worth(parts):
    """Mean printed effective_labels over the worth pooled over the chunks, and its jackknife MC se."""
    def ratio(chunks):
        p = np.array(chunks)
        return (p[:, 0].sum() / p[:, 1].sum()) / (p[:, 2].sum() / p[:, 3].sum())

    return ratio(parts), jackknife(list(parts), ratio)


def real(reps: int, seed: int, sizes=(10, 15, 20)) -> None:
    """DialSummEval (100 dialogues x 14 systems, 4 criteria, the mean of 3 annotators), QuestEval as the one judge:
    n dialogues redrawn at random, truth = the mean over the 100; per system, coverage and width over its oracle
    sqrt(1 - r^2 (1 - n/N)) (r: QuestEval's correlation with the humans over the 100), before (each system's lambda
    on its own labels) and after (shared), and the shared lambda forced at 20 labels (`forced`)."""
    from labels_coverage import dialsummeval

    import calibration.study.ppi as estimate

    criteria, systems, human, metrics, names = dialsummeval()
    f_all = metrics[..., names.index("questeval")]
    d = human.shape[1]
    print(f"DialSummEval, QuestEval alone, {reps} redraws per n; per system: cover, width/oracle")
    print("criterion     n  variant | cover min-max [Wilson of the worst] | width/h | width/oracle mean (max) ")
    for c, criterion in enumerate(criteria):
        y_all = human[c]
        truth = y_all.mean(0)
        r = np.array([np.corrcoef(y_all[:, s], f_all[:, s])[0, 1] for s in range(len(systems))])
        for n in sizes:
            oracle = np.sqrt(1 - r ** 2 * (1 - n / d))
            rng = np.random.default_rng(seed + n)
            mask = rng.random((reps, d)).argsort(1) < n
            y = np.moveaxis(np.where(mask[..., None], y_all[None], np.nan), -1, -2)  # (reps, S, D)
            f = np.broadcast_to(f_all.T, y.shape)
            # with the rubric's 1-5 scale known, as `judge estimate` runs (the bounded-scale check), and the labels
            # alone (human-only's own t interval) for reference
            variants = {"own": lambda: ppi_mean(y, f, bounds=(1, 5)),
                        "shared": lambda: ppi_mean(y, f, bounds=(1, 5), shared=True),
                        "human-only": lambda: ppi_mean(y, f, lam=np.zeros(y.shape[:-1]))}
            if n >= estimate.MIN_CROSS_FITTED:
                def forced():
                    saved, estimate.MIN_CROSS_FITTED = estimate.MIN_CROSS_FITTED, 10 ** 6
                    try:
                        return ppi_mean(y, f, bounds=(1, 5), shared=True)
                    finally:
                        estimate.MIN_CROSS_FITTED = saved
                variants = {"per-system": variants["own"], "forced": forced, "human-only": variants["human-only"]}
            for name, compute in variants.items():
                res = compute()
                shown = np.isfinite(res.ci_low)
                hit = ((res.ci_low <= truth) & (truth <= res.ci_high) & shown).sum(0)
                cover = hit / shown.sum(0)
                worst = int(np.argmin(cover))
                low, high = wilson(int(hit[worst]), int(shown.sum(0)[worst]))
                width = np.where(shown, res.ci_high - res.ci_low, np.nan)
                human_width = np.where(shown, res.human_only_ci_high - res.human_only_ci_low, np.nan)
                ratio = np.nanmean(width, 0) / np.nanmean(human_width, 0)
                print(f"{criterion:12s} {n:3d} {name:10s} | {cover.min():.3f}-{cover.max():.3f} "
                      f"[{low:.3f}, {high:.3f}] | {np.nanmean(width) / np.nanmean(human_width):.3f} "
                      f"| {np.mean(ratio / oracle):.3f} ({np.max(ratio / oracle):.3f})", flush=True)


def ratio_of_sums(chunks) -> tuple[float, float]:
    """sum of the first values over sum of the second, over (value, value) chunks of studies, and its jackknife MC
    se (labels_coverage.jackknife)."""
    def ratio(part):
        p = np.array(part)
        return p[:, 0].sum() / p[:, 1].sum()

    return ratio(chunks), jackknife(list(chunks), ratio)


def tradeoff(reps: int, seed: int, sizes=(100, 500), counts=(10, 15, 19), chunks: int = 20) -> None:
    """A lone row (one system, the first judge of `draw`) at n = 10-19 labels of N judged dialogues; the rules:

      as is        ppi_mean(shared=True), what `judge estimate` prints: a lone row's lambda cross-fitted on its own
                   other labels, shrunk by t^2 / (1 + t^2)
      shrink c     the same shrunk by t^2 / (c + t^2) (ppi._shrunk patched here, restored after)
      pre-test a   `as is` where pearsonr on the labelled dialogues (labels against judge scores) gives p < a,
                   else the human-only interval (a choice that looks at the labels: its coverage is measured)
      oracle       lambda known, cov(y, f) / var(f) (N - n) / N from a draw of 400,000 (PPI++'s m / (n + m))

    Per cell: width over human-only and over the oracle (means over the studies, same labels; jackknife MC se over
    `chunks` chunks of studies), coverage [Wilson 95%] (the pre-tests' also where they take the judge). Verdict
    per N and n over both kinds: (a) the rho 0 ratio to human-only at most 1.000 within 2 MC se, (b) at most 1.05 x
    the oracle at every rho >= 0.3, coverage >= 0.94. Every cell draws its studies from the same seed."""
    import warnings

    from scipy.stats import pearsonr

    import calibration.study.ppi as estimate

    original = estimate._shrunk

    def shrunk(c):  # t^2 is proportional to df: df / c turns t^2 / (1 + t^2) into t^2 / (c + t^2)
        return lambda lam, s_fy, s_ff, s_yy, df: original(lam, s_fy, s_ff, s_yy, df / c)

    rhos, names = (0.0, 0.3, 0.5, 0.7, 0.9), ("as is", "shrink 2", "shrink 4", "pre-test 0.05", "pre-test 0.2")
    print(f"lone row, first judge, {reps} studies a cell (seed {seed}); per rule: width/human-only+-MC se "
          f"width/oracle+-MC se cover [Wilson 95%]")
    for big_n in sizes:
        verdict = {}  # (rule, n) -> list of (kind, rho, to_h, to_h_se, to_oracle, to_oracle_se, cover)
        for kind in ("gaussian", "likert"):
            for rho in rhos:
                big_h, big_j = draw(np.random.default_rng(12345), (400_000,), kind, rho, 1)
                y_all, f_all = big_h[:, 0], big_j[:, 0, 0]
                truth, r = y_all.mean(), np.corrcoef(y_all, f_all)[0, 1]
                slope = np.cov(y_all, f_all)[0, 1] / f_all.var(ddof=1)
                for n in counts:
                    rng = np.random.default_rng(seed)
                    human, judges = draw(rng, (reps, big_n), kind, rho, 1)
                    labelled = rng.random((reps, big_n)).argsort(axis=1) < n
                    y = np.where(labelled, human[..., 0], np.nan)[:, None]  # (reps, 1, N)
                    f = judges[:, None, :, 0, 0]
                    base = ppi_mean(y, f, shared=True)
                    intervals = {"as is": (base.ci_low[:, 0], base.ci_high[:, 0])}
                    for c in (2, 4):
                        estimate._shrunk = shrunk(c)
                        try:
                            res = ppi_mean(y, f, shared=True)
                        finally:
                            estimate._shrunk = original
                        intervals[f"shrink {c}"] = res.ci_low[:, 0], res.ci_high[:, 0]
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a constant judge on the labels: p NaN, not rejected
                        p = pearsonr(human[..., 0][labelled].reshape(reps, n),
                                     judges[..., 0, 0][labelled].reshape(reps, n), axis=-1).pvalue
                    for a in (0.05, 0.2):
                        keep = (p < a)[:, None]
                        intervals[f"pre-test {a}"] = tuple(np.where(keep, base_ci, human_ci)[:, 0] for base_ci, human_ci
                                                           in ((base.ci_low, base.human_only_ci_low),
                                                               (base.ci_high, base.human_only_ci_high)))
                    res = ppi_mean(y, f, lam=np.full((reps, 1), slope * (big_n - n) / big_n))
                    intervals["oracle"] = res.ci_low[:, 0], res.ci_high[:, 0]
                    human_width = (base.human_only_ci_high - base.human_only_ci_low)[:, 0]
                    oracle_width = intervals["oracle"][1] - intervals["oracle"][0]
                    split = np.array_split(np.arange(reps), chunks)
                    print(f"N={big_n} {kind} rho={rho:.1f} (r {r:.3f}) n={n}: pre-test rejects "
                          f"{np.mean(p < 0.05):.3f} (0.05) {np.mean(p < 0.2):.3f} (0.2)")
                    picked = {f"pre-test {a}": p < a for a in (0.05, 0.2)}
                    for name, (low, high) in intervals.items():
                        width = high - low
                        held = (low <= truth) & (truth <= high)
                        hits = int(held.sum())
                        to_h = ratio_of_sums([(width[i].sum(), human_width[i].sum()) for i in split])
                        to_o = ratio_of_sums([(width[i].sum(), oracle_width[i].sum()) for i in split])
                        wl, wh = wilson(hits, reps)
                        print(f"   {name:14s} {to_h[0]:.3f}+-{to_h[1]:.3f}  {to_o[0]:.3f}+-{to_o[1]:.3f}  "
                              f"{hits / reps:.3f} [{wl:.3f}, {wh:.3f}]" + (
                                  f"  where it takes the judge: cover {held[picked[name]].mean():.3f}"
                                  if name in picked else ""), flush=True)
                        verdict.setdefault((name, n), []).append((kind, rho) + to_h + to_o + (hits / reps,))
        print(f"verdict N={big_n} (both kinds): (a) worst rho-0 width/h +- MC se <= 1.000 within 2 se; "
              f"(b) worst width/oracle at rho >= 0.3 <= 1.05; lowest coverage >= 0.94")
        for n in counts:
            for name in names:
                rows = verdict[(name, n)]
                a = max((row for row in rows if row[1] == 0.0), key=lambda row: row[2])
                b = max((row for row in rows if row[1] >= 0.3), key=lambda row: row[4])
                cover = min(rows, key=lambda row: row[6])
                ok_a, ok_b, ok_c = a[2] <= 1.0 + 2 * a[3], b[4] <= 1.05, cover[6] >= 0.94
                print(f"  n={n} {name:14s} (a) {a[2]:.3f}+-{a[3]:.3f} {a[0]:8s} {'meets' if ok_a else 'FAILS'} | "
                      f"(b) {b[4]:.3f}+-{b[5]:.3f} {b[0]} rho {b[1]:.1f} {'meets' if ok_b else 'FAILS'} | cover "
                      f"{cover[6]:.3f} {cover[0]} rho {cover[1]:.1f} {'meets' if ok_c else 'FAILS'} | all three: "
                      f"{'yes' if ok_a and ok_b and ok_c else 'no'}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--cell", action="append", default=[], metavar="KIND,RHO,S,N,WHAT")
    parser.add_argument("--real", action="store_true", help="DialSummEval with QuestEval alone, per system")
    parser.add_argument("--tradeoff", action="store_true", help="a lone row at 10-19 labels: lambda rules against "
                        "human-only at rho 0 and the oracle at rho >= 0.3")
    parser.add_argument("--sizes", default="100,500", help="--tradeoff: the N judged dialogues")
    args = parser.parse_args(argv)
    if args.tradeoff:
        tradeoff(args.repetitions, args.seed, tuple(int(v) for v in args.sizes.split(",")))
        return 0
    if args.real:
        real(args.repetitions, args.seed)
        return 0
    cells = [c.split(",") for c in args.cell] or [
        [kind, rho, s, n, what] for what in ("mean", "diff") for kind in ("gaussian", "likert")
        for rho in ("0.0", "0.3", "0.5", "0.7", "0.9") for s in ("2", "6") for n in ("10", "15", "20")]
    print("cell                           | oracle: jury one | variant: width/h width/oracle cover [Wilson 95%] "
          "eff/worth+-MC se   (oracle: the jury's for f* and jury rows, the first judge's for `one` rows)")
    for kind, rho, s, n, what in cells:
        analytic, analytic_one, rows = run(kind, float(rho), int(s), int(n), args.repetitions, args.seed, what=what)
        head = f"{what} {kind} rho={rho} S={s} n={n}"
        print(f"{head:30s} | {analytic:.3f} {analytic_one:.3f}")
        for key, row in rows.items():
            ratio = row["w"] / row["h"]
            oracle = analytic_one if key.startswith("one") else analytic
            low, high = wilson(row["cover"], row["shown"])
            eff, eff_se = printed_over_worth(row["parts"])
            print(f"   {key:12s} {ratio:.3f} {ratio / oracle:.3f}  {row['cover'] / row['shown']:.3f} "
                  f"[{low:.3f}, {high:.3f}]  {eff:.3f}+-{eff_se:.3f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
