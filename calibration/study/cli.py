"""`judge screen` and `judge estimate`: plan a human study from the judge's scores, then estimate from its labels."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

FIXTURES = "examples/study"

SCREEN_EPILOG = f"""\
examples:
  # systems with CIs, uncertain dialogues, power; a plan of 6 dialogues, half of them drawn at random
  judge screen --judgments {FIXTURES}/judgments.jsonl --budget 6 --output-dir out/plan

  # with a pilot's human labels: the human-scale effect and the judge-human correlation enter the power analysis
  judge screen --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/pilot_labels.csv --power 0.9

  # a metric column of a wide CSV as the judge, budget counted in judgments humans must give
  judge screen --judgments metric_scores.csv --score-column rouge-1 --budget 2000 --budget-unit judgments

writes (with --output-dir): systems.csv, items.csv, power.csv and, with --budget, the plan:
  plan.csv   item_id,part,reason   one row per dialogue; part is random or targeted
  plan.json  unit, budget, random share, seed, the judgments file and its sha256, the power analysis
Only the random part may enter `judge estimate`: keep the share high enough for the intervals you need.
"""

ESTIMATE_EPILOG = f"""\
examples:
  # every labelled dialogue taken as a random sample (the output says so)
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv

  # the plan from `judge screen` says which dialogues were the random sample; tables for scripts
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv \\
      --plan {FIXTURES}/plan --output-dir out/estimate

  # a metric of a wide CSV as the judge, DialSummEval noise cleaning of the human labels
  judge estimate --judgments metric_scores.csv --score-column bartscore_s_h --human annotations.csv --clean

method: prediction-powered inference with the power-tuned lambda (PPI++): the judge's scores on every judged
dialogue correct the mean of the human labels on the random sample; t interval with n - 1 degrees of freedom
(n = labelled dialogues). width_ratio = PPI interval / human-only interval from the same labels.
writes (with --output-dir): estimates.csv, differences.csv (paired, per dialogue), targeted.csv, summary.json
"""


def _criteria(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of criteria, e.g. coherence,fluency")
    return names


def _share(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return number


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return number


def _add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                        help="judgments JSONL (`judge score`), or a CSV of scores read as `judge calibrate` reads it")
    parser.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    parser.add_argument("--criteria", type=_criteria, metavar="a,b", help="only these criteria (default: all shared)")
    parser.add_argument("--clean", action="store_true",
                        help="DialSummEval noise cleaning of the human labels before averaging annotators")
    parser.add_argument("--output-dir", type=Path, metavar="DIR", help="write the tables here")
    parser.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with a plot")


def register(sub) -> None:
    screen = sub.add_parser(
        "screen", help="Systems with CIs, uncertain items, a human-study plan under a budget, and power.",
        description="What the judge already says (systems with CIs, which it cannot separate, uncertain dialogues) "
                    "and what a human study needs: a plan under a budget, and how many dialogues to label.",
        epilog=SCREEN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_judge_arguments(screen)
    screen.add_argument("--human", type=Path, metavar="PILOT.csv",
                        help="labels from a pilot (long CSV): human-scale effect and judge-human correlation")
    screen.add_argument("--budget", type=_positive, metavar="N", help="plan a study of N dialogues or judgments")
    screen.add_argument("--budget-unit", choices=["dialogues", "judgments"], default="dialogues",
                        help="what --budget counts (default: dialogues)")
    screen.add_argument("--random-share", type=_share, default=0.5, metavar="X",
                        help="share of the budget drawn uniformly at random (default 0.5); only this part enters "
                             "the unbiased estimates of `judge estimate`")
    screen.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    screen.add_argument("--bootstrap", type=_positive, default=1000, metavar="N",
                        help="bootstrap resamples of dialogues (default 1000)")
    screen.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the random sample (default 0)")
    screen.set_defaults(run=run_screen)

    estimate = sub.add_parser(
        "estimate", help="Each system's mean human score, and differences, from judge scores plus few labels (PPI++).",
        description="Each system's mean human score per criterion by prediction-powered inference, beside the "
                    "human-only estimate from the same labels, and the paired differences between systems.",
        epilog=ESTIMATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_judge_arguments(estimate)
    estimate.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    estimate.add_argument("--plan", type=Path, metavar="DIR",
                          help="the --output-dir of `judge screen --budget`: which dialogues are the random sample")
    estimate.add_argument("--confidence", type=_share, default=0.95, help="interval level (default 0.95)")
    estimate.add_argument("--apply-map", type=Path, metavar="MAP.json",
                          help="judge scores through a map fitted by `judge calibrate --fit-map`")
    estimate.set_defaults(run=run_estimate)


# -- writing: every file complete or absent -----------------------------------------------------------------------


def write_outputs(directory: Path | None, files: dict[str, str], verb: str = "study", inputs=()) -> None:
    """All texts are built before this is called; each file then appears whole or not at all, and only over files
    this tool wrote (judge/outputs.py)."""
    from judge.outputs import write_folder

    write_folder(directory, files, verb=verb, inputs=inputs)


def _csv(frame) -> str:
    return frame.to_csv(index=False)


def _format(frame, float_format="{:.3f}") -> str:
    if frame.empty:
        return "  (none)"
    return frame.to_string(index=False, float_format=lambda v: float_format.format(v), na_rep="-")


def _error(verb: str, exc: Exception) -> int:
    print(f"judge {verb}: error: {exc}", file=sys.stderr)
    return 2


# -- screen -------------------------------------------------------------------------------------------------------


def run_screen(args: argparse.Namespace) -> int:
    from ..errors import CalibrationError
    from ..io import load_human_labels, load_judge_scores
    from .screen import screen

    started = time.perf_counter()
    try:
        judge = load_judge_scores(args.judgments, args.score_column)
        pilot = load_human_labels(args.human) if args.human else None
        print(f"screening {args.judgments}: {judge['item_id'].nunique()} dialogues, "
              f"{judge['system'].nunique()} systems, {args.bootstrap} resamples...", file=sys.stderr)
        result = screen(args.judgments, judge, args.criteria, pilot, args.clean, args.budget, args.budget_unit,
                        args.random_share, args.power, args.seed, args.bootstrap, args.score_column)
        files = {"systems.csv": _csv(result.systems), "items.csv": _csv(result.items),
                 "power.csv": _csv(result.power)}
        if result.plan is not None:
            files["plan.csv"] = _csv(result.plan)
            files["plan.json"] = json.dumps(result.plan_info, indent=2) + "\n"
        _write_all(args, files, result, "screen_section", "Judge screen")
    except CalibrationError as exc:
        return _error("screen", exc)
    except OSError as exc:
        return _error("screen", f"{exc.filename or ''}: {exc.strerror or exc}")
    print_screen(result)
    planned = "" if result.plan is None else (
        f", plan {result.plan_info['n_random']} random + {result.plan_info['n_targeted']} targeted dialogues")
    print(f"\nscreened {len(result.criteria)} criteria, {result.systems['system'].nunique()} systems, "
          f"{len(result.items)} dialogues, {result.n_resamples} resamples{planned}, "
          f"{time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


def _write_all(args, files: dict[str, str], result, section: str, title: str) -> None:
    """Every output is built before the first is written: the tables (each atomically), then the report section."""
    from judge.outputs import check_writable

    inputs = [args.judgments, getattr(args, "human", None), getattr(args, "plan", None)]
    if args.report:
        check_writable(args.report, inputs=inputs, what="--report")
    report = None
    if args.report:
        from . import report as study_report  # matplotlib: only when a report is asked for

        report = getattr(study_report, section)(result)
    write_outputs(args.output_dir, files, verb=args.command, inputs=inputs)
    if report is not None:
        study_report.write_section(report, args.report, title)


def print_screen(result, out=None) -> None:
    out = sys.stdout if out is None else out
    print(f"Systems: mean judge score per criterion, 95% percentile bootstrap CI ({result.n_resamples} resamples of "
          "dialogues, paired across systems); tied = not separated from the best (Holm, 5%)", file=out)
    table = result.systems.assign(tied=result.systems["tied_with_best"].map({True: "tied", False: ""}))
    print(_format(table[["criterion", "rank", "system", "mean", "ci_low", "ci_high", "n", "p_holm", "tied"]]),
          file=out)
    if result.dominated:
        print("\nDominated on every criterion (kept; candidates to leave out of the human study): "
              + "; ".join(f"{loser} (by {winner})" for loser, winner in sorted(result.dominated.items())), file=out)
    else:
        print("\nNo system is dominated on every criterion.", file=out)
    top = result.items.sort_values(["priority", "item_id"], ascending=[False, True]).head(10)
    print("\nDialogues that most need humans (uncertainty of the judgments + discrimination of the leading systems)",
          file=out)
    print(_format(top[["item_id", "uncertainty", "discrimination", "n_failed", "n_na", "n_order_disagreement",
                       "part"]]), file=out)
    print("\nPower", file=out)
    print(_format(result.power), file=out)
    print(f"\n{result.sentence}", file=out)
    if result.plan is None:
        print("\nNo --budget given: no plan written (add --budget N --output-dir DIR for plan.csv / plan.json).",
              file=out)
    else:
        info = result.plan_info
        dialogues = lambda n: f"{n} dialogue{'' if n == 1 else 's'}"  # noqa: E731
        print(f"\nPlan: budget {info['budget']} {info['unit']}: {dialogues(info['n_random'])} drawn uniformly at random "
              f"(share {info['random_share']}, seed {info['seed']}) and {dialogues(info['n_targeted'])} targeted.",
              file=out)


# -- estimate -----------------------------------------------------------------------------------------------------


def check_labels_against_judgments(labels, judge, path: Path) -> None:
    from ..errors import CalibrationError

    items = set(judge["item_id"])
    unknown = ~labels["item_id"].isin(items)
    if unknown.any():
        row = labels[unknown].iloc[0]
        raise CalibrationError(f"{path}:{row.line}: item {row.item_id!r} is not in the judgments "
                               f"({unknown.sum()} label(s) on unknown items)")
    cells = set(zip(judge["item_id"], judge["system"]))
    unknown = ~labels[["item_id", "system"]].apply(tuple, axis=1).isin(cells)
    if unknown.any():
        row = labels[unknown].iloc[0]
        raise CalibrationError(f"{path}:{row.line}: system {row.system!r} has no judgment for item {row.item_id!r}")


def plan_parts(args, labels, judge) -> tuple[set | None, set | None, list[str]]:
    """(random items, targeted items, warnings) from --plan, after checking it against the inputs."""
    from judge.resources import file_sha256

    from ..errors import CalibrationError
    from .screen import read_plan

    if args.plan is None:
        return None, None, []
    plan, info = read_plan(args.plan)
    items = set(judge["item_id"])
    outside = ~plan["item_id"].isin(items)
    if outside.any():
        raise CalibrationError(f"{args.plan / 'plan.csv'}:{int(outside.to_numpy().nonzero()[0][0]) + 2}: "
                               f"dialogue {plan['item_id'][outside].iloc[0]!r} is not in {args.judgments}: "
                               "the plan was made for other judgments")
    planned = set(plan["item_id"])
    unplanned = ~labels["item_id"].isin(planned)
    if unplanned.any():
        raise CalibrationError(f"{args.human}:{labels['line'][unplanned].iloc[0]}: dialogue "
                               f"{labels['item_id'][unplanned].iloc[0]!r} is not in the plan; labels outside the plan "
                               "are neither the random sample nor targeted")
    warnings = []
    if info.get("judgments_sha256") and info["judgments_sha256"] != file_sha256(args.judgments):
        warnings.append(f"the plan was made from {info.get('judgments')} (sha256 {info['judgments_sha256'][:12]}...), "
                        f"and {args.judgments} differs from it; its dialogues are all there")
    return (set(plan.loc[plan["part"] == "random", "item_id"]), set(plan.loc[plan["part"] == "targeted", "item_id"]),
            warnings)


def run_estimate(args: argparse.Namespace) -> int:
    from ..errors import CalibrationError
    from .estimate import estimate
    from ..io import load_human_labels, load_judge_scores
    from ..maps import apply_maps, load_maps

    started = time.perf_counter()
    try:
        labels = load_human_labels(args.human)
        judge = load_judge_scores(args.judgments, args.score_column)
        check_labels_against_judgments(labels, judge, args.human)
        random_items, targeted_items, warnings = plan_parts(args, labels, judge)
        if args.apply_map:
            judge = apply_maps(judge, load_maps(args.apply_map))
        result = estimate(judge, labels, args.criteria, args.clean, random_items, targeted_items, args.confidence)
        summary = {"criteria": result.criteria, "confidence": result.confidence, "random_sample": result.random_source,
                   "n_random_dialogues": result.n_random, "human_cleaned": result.cleaned,
                   "method": "PPI++ (power-tuned lambda), t interval with n-1 df", "notes": result.notes + warnings}
        files = {"estimates.csv": _csv(result.estimates), "differences.csv": _csv(result.differences),
                 "targeted.csv": _csv(result.targeted), "summary.json": json.dumps(summary, indent=2) + "\n"}
        _write_all(args, files, result, "estimate_section", "Judge estimate")
    except CalibrationError as exc:
        return _error("estimate", exc)
    except OSError as exc:
        return _error("estimate", f"{exc.filename or ''}: {exc.strerror or exc}")
    for warning in warnings:
        print(f"judge estimate: warning: {warning}", file=sys.stderr)
    print_estimate(result)
    print(f"\nestimated {len(result.criteria)} criteria, {result.estimates['system'].nunique()} systems from "
          f"{result.n_random} random-sample dialogues, {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


def print_estimate(result, out=None) -> None:
    out = sys.stdout if out is None else out
    if result.random_source == "plan":
        print(f"Random sample: the {result.n_random} labelled dialogues of the plan's random part.", file=out)
    else:
        print(f"Random sample: no --plan given, so all {result.n_random} labelled dialogues are taken as a uniformly "
              "random sample of the judged dialogues; if some were chosen on purpose, the estimates are biased.",
              file=out)
    human = "cleaned (DialSummEval noise removal) mean" if result.cleaned else "mean"
    level = f"{result.confidence:.0%}"
    print(f"Human score of a summary: the {human} over its annotators. Intervals: {level}, PPI++ with a t quantile.",
          file=out)
    print("\nPer system (estimate = prediction-powered; human_only = the same labels alone)", file=out)
    print(_format(result.estimates[["criterion", "system", "estimate", "ci_low", "ci_high", "human_only",
                                    "human_only_ci_low", "human_only_ci_high", "n_labelled", "n_judged",
                                    "width_ratio", "lambda"]]), file=out)
    print(f"\nPaired differences system_a - system_b (per dialogue); each interval holds at {level} on its own, "
          "not for all pairs at once", file=out)
    differences = result.differences.assign(
        separated=((result.differences["ci_low"] > 0) | (result.differences["ci_high"] < 0)).map({True: "yes",
                                                                                                False: ""}))
    print(_format(differences[["criterion", "system_a", "system_b", "estimate", "ci_low", "ci_high",
                               "human_only_ci_low", "human_only_ci_high", "n_labelled", "width_ratio",
                               "separated"]]), file=out)
    if not result.targeted.empty:
        print("\nLabels on targeted dialogues (not a random sample: not in the estimates above; read with care)",
              file=out)
        print(_format(result.targeted), file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)
