"""Acceptance simulation of `judge escalate`: does the cascade's guarantee hold, and what coverage does it give?

For each setting, a population of cells (N = 20,000) is drawn once: each judge's confidence and whether its verdict
agrees with the humans. Each draw then takes a calibration set of n_cal cells with replacement from the population
(iid from it: exactly the guarantee's setting) and, apart, 1,000 unlabelled cells that fix the path; the thresholds
are fitted (calibration.cascade.threshold_tests.fit_cascade, the function the verb runs) and applied to the whole
population. A draw fails when the agreement of the verdicts accepted on the population is below 1 - alpha. Printed
per setting: the failure rate (must be <= delta, up to simulation error) and the mean coverage (share accepted).

Signals: informative (confidence uniform, P(agree | c) rises from 0.5 to 1), coarse (two values: 60% confident
cells at 0.92 agreement, the rest at 0.6), useless (confidence uniform, agreement 0.75 whatever it says), mixed
(the cheap judges coarse, the last one informative). Judge k (0-based) of K agrees 0.04 k more often (later =
stronger). For comparison, `per-judge` is the paper's rule applied to a cascade: each judge's threshold tested
alone at delta, on the calibration cells that reach it (valid only at K x delta for the cascade); `split-delta` the
same at delta / K (valid for the cascade, by Bonferroni).

    python benchmarks/escalate_coverage.py            # the full table (about 5-10 minutes on 2 cores)
    python benchmarks/escalate_coverage.py --quick    # a few settings, for the tests
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.cascade.threshold_tests import binomial_p, decide, fit_cascade, min_labels, path_thresholds  # noqa: E402

POPULATION = 20_000
POOL = 1_000


def population(signal: str, judges: int, rng: np.random.Generator, size: int = POPULATION):
    conf = np.empty((size, judges))
    agree = np.empty((size, judges), bool)
    for k in range(judges):
        kind = signal if signal != "mixed" else ("informative" if k == judges - 1 else "coarse")
        lift = 0.04 * k
        if kind == "informative":
            c = rng.random(size)
            p = np.clip(0.5 + 0.5 * c + lift, 0, 1)
        elif kind == "coarse":
            c = (rng.random(size) < 0.6).astype(float)
            p = np.where(c == 1, min(0.92 + lift, 1), min(0.6 + lift, 1))
        elif kind == "useless":
            c = rng.random(size)
            p = np.full(size, 0.75 + lift)
        else:
            raise ValueError(kind)
        conf[:, k], agree[:, k] = c, rng.random(size) < p
    return conf, agree


def realised(conf, agree, thresholds):
    first = decide(conf, thresholds)
    accepted = first >= 0
    if not accepted.any():
        return 0.0, np.nan
    picked = agree[np.arange(len(first)), np.maximum(first, 0)]
    return float(accepted.mean()), float(picked[accepted].mean())


def per_judge(cal_conf, cal_agree, pool_conf, alpha, delta, steps=40):
    """The paper's rule run judge by judge: each judge's own fixed-sequence test at delta, on the cells reaching it."""
    judges = cal_conf.shape[1]
    thresholds = np.full(judges, np.inf)
    reach_cal = np.ones(len(cal_conf), bool)
    reach_pool = np.ones(len(pool_conf), bool)
    need = min_labels(alpha, delta)
    need += 2 * need ** 0.5
    for k in range(judges):
        path, _ = path_thresholds(pool_conf[reach_pool][:, [k]], steps)
        for t in path[:, 0]:
            acc = reach_cal & (cal_conf[:, k] >= t)
            n, e = int(acc.sum()), int((acc & ~cal_agree[:, k]).sum())
            if n < need:  # as the cascade's path: start where a test could reject
                continue
            if binomial_p(e, n, alpha) > delta:
                break
            thresholds[k] = t
        with np.errstate(invalid="ignore"):
            reach_cal &= ~(cal_conf[:, k] >= thresholds[k])
            reach_pool &= ~(pool_conf[:, k] >= thresholds[k])
    return thresholds


def run(settings, draws: int, seed: int = 0, compare: bool = True):
    rows = []
    rng = np.random.default_rng(seed)
    populations = {}
    for alpha, delta, n_cal, signal, judges in settings:
        if (signal, judges) not in populations:
            populations[(signal, judges)] = population(signal, judges, np.random.default_rng([seed, judges,
                                                                                              hash(signal) % 997]))
        conf, agree = populations[(signal, judges)]
        failures, coverage, naive_failures, naive_coverage, split_failures, split_coverage = 0, [], 0, [], 0, []
        for _ in range(draws):
            cal = rng.integers(0, len(conf), n_cal)
            pool = rng.integers(0, len(conf), POOL)
            fit = fit_cascade(conf[cal], agree[cal], conf[pool], alpha, delta)
            share, agreement = realised(conf, agree, fit.thresholds)
            coverage.append(share)
            failures += bool(share > 0 and agreement < 1 - alpha)
            if compare and judges > 1:
                share, agreement = realised(conf, agree, per_judge(conf[cal], agree[cal], conf[pool], alpha, delta))
                naive_coverage.append(share)
                naive_failures += bool(share > 0 and agreement < 1 - alpha)
                share, agreement = realised(conf, agree, per_judge(conf[cal], agree[cal], conf[pool], alpha,
                                                                   delta / judges))
                split_coverage.append(share)
                split_failures += bool(share > 0 and agreement < 1 - alpha)
        rows.append({"alpha": alpha, "delta": delta, "n_cal": n_cal, "signal": signal, "judges": judges,
                     "draws": draws, "failure_rate": failures / draws, "coverage": float(np.mean(coverage)),
                     "per_judge_failure_rate": naive_failures / draws if naive_coverage else np.nan,
                     "per_judge_coverage": float(np.mean(naive_coverage)) if naive_coverage else np.nan,
                     "split_failure_rate": split_failures / draws if split_coverage else np.nan,
                     "split_coverage": float(np.mean(split_coverage)) if split_coverage else np.nan})
    return rows


def full_settings():
    for alpha, delta, n_cal, judges in itertools.product((0.1, 0.15, 0.2), (0.1, 0.05), (100, 300, 1000), (1, 2, 3)):
        for signal in ("informative", "coarse", "useless") + (("mixed",) if judges > 1 else ()):
            yield alpha, delta, n_cal, signal, judges


def quick_settings():
    for signal, judges in (("informative", 1), ("coarse", 1), ("useless", 1), ("mixed", 2), ("informative", 3)):
        yield 0.15, 0.1, 300, signal, judges


def table(rows) -> str:
    head = (f"{'alpha':>5} {'delta':>5} {'n_cal':>5} {'signal':<11} {'K':>1}  {'fail':>6} {'cover':>6}  "
            f"{'per-judge fail':>14} {'cover':>6}  {'split-delta fail':>16} {'cover':>6}")
    lines = [head]
    for r in rows:
        naive = ("" if np.isnan(r["per_judge_coverage"]) else
                 f"{r['per_judge_failure_rate']:>14.3f} {r['per_judge_coverage']:>6.3f}  "
                 f"{r['split_failure_rate']:>16.3f} {r['split_coverage']:>6.3f}")
        lines.append(f"{r['alpha']:>5} {r['delta']:>5} {r['n_cal']:>5} {r['signal']:<11} {r['judges']:>1}  "
                     f"{r['failure_rate']:>6.3f} {r['coverage']:>6.3f}  {naive}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few settings (for the tests)")
    parser.add_argument("--draws", type=int, default=None, help="draws per setting (default 300, quick 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    draws = args.draws or (200 if args.quick else 300)
    start = time.perf_counter()
    rows = run(list(quick_settings() if args.quick else full_settings()), draws, args.seed)
    print(table(rows))
    worst = max(rows, key=lambda r: r["failure_rate"] - r["delta"])
    print(f"\n{len(rows)} settings x {draws} draws in {time.perf_counter() - start:.0f} s; worst failure rate "
          f"{worst['failure_rate']:.3f} at delta {worst['delta']} ({worst['signal']}, K={worst['judges']}, "
          f"n_cal={worst['n_cal']}, alpha={worst['alpha']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
