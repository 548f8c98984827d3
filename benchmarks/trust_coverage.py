"""Acceptance table of issue 20 for `judge audit`, `judge drift` and `judge select`: for each estimator and hard
case, the interval's coverage, the flag's false-flag rate with nothing planted, the audit's family-wise rate and the
power with an effect planted, each with a 95% Monte-Carlo (Wilson) interval over the repetitions.

The data-generating processes are the test harnesses' (tests/audit_sim.py, tests/drift_sim.py, tests/system_sim.py;
the best set's as tests/test_select_guards.py draws it), run through the verbs' public functions; the reduced
versions of these cells run in the test suite.

    nice -n 10 python benchmarks/trust_coverage.py --reps 300 --only audit --only select --only system
    nice -n 10 python benchmarks/trust_coverage.py --reps 150 --only drift    # the README's tables (~30 min)
    python benchmarks/trust_coverage.py --reps 40                              # a quick look
    nice -n 10 python benchmarks/trust_coverage.py --reps 40 --only agreement --only changed --only block

The last run, with its repetitions, load and timings: benchmarks/trust_coverage_table.txt.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

COLUMNS = ("coverage", "false flag", "family-wise", "power")


def rate(share: float, reps: int) -> str:
    """A share with its 95% Wilson interval over `reps` repetitions; '-' where not measured."""
    if share is None or not np.isfinite(share):
        return "-"
    low, high = proportion_confint(round(share * reps), reps, 0.05, "wilson")
    return f"{share:.3f} [{low:.3f}, {high:.3f}]"


def line(verb: str, estimator: str, case: str, n: str, reps: int, printed: float | None = None, **cells) -> str:
    shown = "-" if printed is None else f"{printed:.2f}"
    # Coverage is measured where an interval is printed: its Monte-Carlo interval is over those repetitions.
    counts = {c: max(1, round(reps * printed)) if c == "coverage" and printed is not None else reps for c in COLUMNS}
    return (f"| {verb} | {estimator} | {case} | {n} | {reps} | {shown} | "
            + " | ".join(rate(cells.get(c.replace(" ", "_").replace("-", "_")), counts[c]) for c in COLUMNS) + " |")


def audit_rows(reps: int):
    from audit_sim import rates

    for dialogues in (10, 20, 60):
        for gain in (0.5, 1.0, 1.5):
            r = rates(reps, dialogues, seed=dialogues + int(10 * gain), gain=gain, length_quality=0.6)
            case = f"no taste, gain {gain}, length~quality r 0.6, Likert"
            yield line("audit", "length excess", case, f"{dialogues} dialogues", reps, r["printed"],
                       coverage=r["length_covers"], false_flag=r["length_flag"], family_wise=r["any_flag"])
            yield line("audit", "own-system excess", case, f"{dialogues} dialogues", reps, r["printed"],
                       coverage=r["self_covers"], false_flag=r["self_flag"])
        r = rates(reps, dialogues, seed=7 + dialogues, judge_length=0.5, self_bonus=0.5, likert=False)
        case = "planted length 0.5 and own +0.5, continuous"
        yield line("audit", "length excess", case, f"{dialogues} dialogues", reps, r["printed"],
                   coverage=r["length_covers"], power=r["length_flag"])
        yield line("audit", "own-system excess", case, f"{dialogues} dialogues", reps, r["printed"],
                   coverage=r["self_covers"], power=r["self_flag"])


def block_rows(reps: int):
    """Issue 41 part 5: nothing planted, 4 criteria in block mode (shuffled letters), one own system, 3 annotators;
    the false-flag column is each finding's unadjusted rate (its interval excludes 0) over the 4 criteria."""
    from audit_sim import block_flags, block_study

    for dialogues in (20, 60):
        rng = np.random.default_rng(dialogues)
        totals = {"length": 0, "position": 0, "self": 0, "any": 0}
        for rep in range(reps):
            raw, _ = block_flags(*block_study(rng, dialogues), seed=rep)
            for name in totals:
                totals[name] += raw[name]
        case = "nothing planted, block, 4 criteria, --self, 3 annotators"
        for name, estimator in (("length", "length excess"), ("position", "block position"),
                                ("self", "own-system excess")):
            yield line("audit", estimator, case, f"{dialogues} dialogues x 5 systems", 4 * reps,
                       false_flag=totals[name] / (4 * reps))
        yield line("audit", "any finding (Holm)", case, f"{dialogues} dialogues x 5 systems", reps,
                   family_wise=totals["any"] / reps)


def agreement_rows(reps: int):
    """Issue 43 part 6: the judge's agreement with the humans, flagged when not distinguishable from chance (Holm
    over the criteria, a family apart from the bias findings); 4 criteria, block mode, 3 annotators."""
    from audit_sim import agreement_rates, good_judge, noise_judge

    for dialogues, systems in ((10, 3), (60, 5)):  # the examples' size (10 dialogues x 3 systems), and 60
        for name, judge, column in (("pure-noise judge", noise_judge, "power"),
                                    ("good judge (r about 0.6)", good_judge, "false_flag")):
            r = agreement_rates(reps, dialogues, systems, judge, seed=dialogues + systems)
            case = f"{name}, mean r {r['mean_r']:.2f}"
            where = f"{dialogues} dialogues x {systems} systems"
            yield line("audit", "agreement with humans", case, where, r["flag_trials"],
                       **{column: r["agreement_flag"]})
            yield line("audit", "any finding (Holm)", case, where, reps, family_wise=r["any_flag"])


def drift_changed_rows(reps: int):
    """Issue 41 part 5: a deterministic judge whose new run differs in 3% of judgments (true shift -0.004)."""
    from drift_sim import changed_rates

    for block in (False, True):
        for dialogues in (10, 20, 30):
            r = changed_rates(reps, dialogues, seed=dialogues, block=block)
            case = f"3% of judgments changed, {'block' if block else 'per summary'}; zero-width {r['zero_width']:.2f}"
            where = f"{dialogues} dialogues x 4 systems"
            yield line("drift", "mean shift 95%", case, where, reps, r["printed"], coverage=r["covers"],
                       false_flag=r["drift"])
            yield line("drift", "TOST 90%", case, where, reps, r["printed"], coverage=r["tost_covers"])


def drift_rows(reps: int):
    from drift_sim import CASES, rates

    for name, case in CASES.items():
        for systems in (2, 6):
            for dialogues in (10, 20, 60):
                r = rates(reps, dialogues, seed=systems * 100 + dialogues, systems=systems, **case)
                where = f"{dialogues} dialogues x {systems} systems"
                yield line("drift", "mean shift 95%", f"unchanged, {name}", where, reps, r["printed"],
                           coverage=r["covers"], false_flag=r["drift"])
                yield line("drift", "TOST 90%", f"unchanged, {name}", where, reps, r["printed"],
                           coverage=r["tost_covers"])
    for dialogues in (10, 20):
        r = rates(reps, dialogues, seed=dialogues, systems=4, k=3, flip=0.03, block=True, shift=0.4)
        yield line("drift", "mean shift 95%", "shift +0.4 planted, deterministic, block",
                   f"{dialogues} dialogues x 4 systems", reps, r["printed"], coverage=r["covers"], power=r["drift"])


def select_rows(reps: int):
    from calibration.stats import simultaneous_differences

    def studies(rng, n, k, shift=0.0):
        for _ in range(reps):
            x = rng.normal(0, 1, (n, k)) + rng.normal(0, 1, (n, 1))
            x[:, -1] -= shift
            idx = rng.integers(0, n, (400, n))
            yield x.mean(0), x[idx].mean(1)

    for n, k in ((10, 3), (10, 8), (20, 14), (60, 8)):
        rng = np.random.default_rng(n * k)
        left_out = np.mean([(simultaneous_differences(m, r, units=n)["lower"] > 0).any()
                            for m, r in studies(rng, n, k)])
        yield line("select", "best set", f"{k} equal candidates (a best one left out)", f"{n} dialogues", reps,
                   false_flag=left_out)
    rng = np.random.default_rng(3)
    excluded = np.mean([(simultaneous_differences(m, r, units=30)["lower"][-1] > 0).any()
                        for m, r in studies(rng, 30, 4, shift=1.2)])
    yield line("select", "best set", "4 candidates, one 1.2 SD worse (excluded)", "30 dialogues", reps,
               power=excluded)


def system_rows(reps: int):
    from system_sim import GRID, TRUTH, rates

    for statistic in TRUTH:
        for systems, dialogues, rho, shape in GRID:
            r = rates(reps, systems, dialogues, statistic, rho, seed=systems * 1000 + dialogues, **shape)
            yield system_line(statistic, systems, dialogues, rho, shape, reps, r)


def system_line(statistic: str, systems: int, dialogues: int, rho: float, shape: dict, reps: int, r: dict) -> str:
    """One row of the system-level grid; the case names the hard case and the printed intervals' median width."""
    hard = ", ".join(f"{k} {v}" for k, v in shape.items()).replace("likert True", "Likert ties")
    case = f"systems drawn from many, rho {rho}{', ' + hard if hard else ''}; median width {r['width']:.2f}"
    return line("select/calibrate", f"system-level {statistic}", case, f"{systems} systems x {dialogues} dialogues",
                reps, r["printed"], coverage=r["covers"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="repetitions per cell (default 200)")
    parser.add_argument("--only", choices=["audit", "block", "agreement", "drift", "changed", "select", "system"],
                        action="append",
                        help="run only these sections (repeatable)")
    args = parser.parse_args()
    sections = {"audit": audit_rows, "block": block_rows, "agreement": agreement_rows, "drift": drift_rows,
                "changed": drift_changed_rows, "select": select_rows, "system": system_rows}
    print("| verb | estimator | case | n | reps | printed | " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * (6 + len(COLUMNS)))
    for name in args.only or sections:
        # The best set's cells are cheap (no verb call): four times the repetitions.
        reps = args.reps * 4 if name == "select" else args.reps
        start = time.perf_counter()
        for row in sections[name](reps):
            print(row, flush=True)
        print(f"<!-- {name}: {time.perf_counter() - start:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
