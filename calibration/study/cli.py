"""`judge screen` and `judge estimate`: plan a human study from the judge's scores, then estimate from its labels."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..options import (
    FAILURE_HELP,
    NUMBER,
    SHARE,
    criteria_type,
    failure_value_type,
    flag_type,
    judge_spec_type,
    positive_type,
    scale_type,
    seed_type,
    share_type,
)

FIXTURES = "examples/study"

SCREEN_EPILOG = f"""\
examples:
  # systems with CIs, uncertain dialogues, power; a plan of 6 dialogues, half of them drawn at random
  judge screen --judgments {FIXTURES}/judgments.jsonl --budget 6 --output-dir out/plan

  # with a pilot's human labels: the human-scale effect and the judge-human correlation enter the power analysis
  judge screen --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/pilot_labels.csv --power 0.9

  # a metric column of a wide CSV as the judge, budget counted in judgments humans must give
  judge screen --judgments {FIXTURES}/metric_scores.csv --score-column rouge-1 --budget 40 --budget-unit judgments \\
      --output-dir out/plan-rouge

  # an active design: the random part drawn where the judge is unsure, each dialogue's probability recorded
  judge screen --judgments {FIXTURES}/judgments.jsonl --budget 8 --design active --output-dir out/plan-active

  # a second stage after a labelled uniform plan (the pilot): the pilot's labels count in `judge estimate --plan`
  judge screen --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv --pilot-plan {FIXTURES}/plan \\
      --design active --budget 4 --output-dir out/plan-second

  # more judges: where they disagree is one more sign of doubt (items.csv's mean_jury_disagreement)
  judge screen --judgments {FIXTURES}/judgments.jsonl --judge rouge-1={FIXTURES}/metric_scores.csv --budget 8 \\
      --design active --output-dir out/plan-jury

writes (with --output-dir): systems.csv, items.csv, power.csv and, with --budget, the plan:
  plan.csv   item_id,part,reason   one row per dialogue; part is random or targeted; --design active adds
             inclusion_probability (each random row's probability of being drawn: estimate weighs it by 1/p)
  plan.json  unit, budget, random share, seed, the judgments file and its sha256, the plan's own sha256, the power
             analysis
--design active: power.csv (and plan.json's power) gain dialogues_active, what that design needs: with a --human
pilot, from the pilot's errors weighed by 1/p (design_factor, active_basis "pilot"); without one, at most the
uniform count at the worst case the design's floor allows (active_basis "worst case"). With a --human pilot the
draw follows each judgment's doubt weighted by the judge's error in its system and criterion on the pilot (plan.json's
strata): doubt where the judge errs draws labels, doubt where it is right anyway hardly does. The pilot also
checks that the doubt marks the judge's errors and that its labels do not bunch at one end of the scale (where the
estimate would print no interval for a one-stage active draw); the draw is uniform otherwise, and the warning says
why.
--pilot-plan DIR (with --human, the labels of DIR's plan): a two-stage study. DIR's uniform random part is the
first stage; its labels check the doubt as a pilot does, and --budget more dialogues are planned among the others
(plan.csv's stage column: 1 or 2; plan.json's stages). `judge estimate --plan` then weighs both stages' labels so
that the estimate stays unbiased whatever the pilot decided, and `judge export --plan` leaves out what the first
stage labelled: a pilot's labels are not paid for twice.
A plan is a contract: an --output-dir that holds one is refused (a plan is never replaced), `judge export --plan`
records its digest in the key, and `judge estimate --plan` refuses a plan edited since or made from other judgments.
Only the random part may enter `judge estimate`: a plan with none is refused (or, with --random-share 0, warned
about); keep the share high enough for the intervals you need.
"""

ESTIMATE_EPILOG = f"""\
examples:
  # every labelled dialogue taken as a random sample (the output says so)
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv

  # the plan from `judge screen` says which dialogues were the random sample; tables for scripts
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv \\
      --plan {FIXTURES}/plan --output-dir out/estimate

  # a metric of a wide CSV as the judge, DialSummEval noise cleaning of the human labels, the 1-5 scale checked
  judge estimate --judgments {FIXTURES}/metric_scores.csv --score-column bartscore_s_h \\
      --human {FIXTURES}/labels.csv --clean --scale 1,5 --report out/estimate.html

  # several judges as one predictor: the judgments and two metrics, combined by a cross-fitted regression
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv \\
      --judge rouge-1={FIXTURES}/metric_scores.csv --judge bartscore_s_h={FIXTURES}/metric_scores.csv

  # a two-stage study (out/plan-second: the `judge screen --pilot-plan` example): each stage's labels in a file
  judge estimate --judgments {FIXTURES}/judgments.jsonl --human {FIXTURES}/labels.csv \\
      --human {FIXTURES}/second_stage_labels.csv --plan out/plan-second

method: prediction-powered inference with the power-tuned lambda (PPI++): the judge's scores on every judged
dialogue correct the mean of the human labels on the random sample; from 10 labelled dialogues on, lambda is
tuned, each dialogue's on the other labels (cross-fitted: no degree of freedom spent, t on n - 1; from 10 to 19
labels one lambda shared by a criterion's systems); below, the human mean with n - 1;
no interval below 3 labels or on labels that do not vary (interval_note says why); a system whose labels bunch at
one end of the scale takes, on the other side, the betting bound valid for any scores on the scale (interval_note
says so: a share of failures none of its labels drew could lie there). width_ratio = PPI interval /
human-only interval from the same labels; effective_labels = n_labelled / width_ratio^2 (divided by that ratio's
own upward bias at small n), the labels the human-only estimate would need for an interval this narrow (the
judge's worth in labels); labels_saved = effective_labels - n_labelled. A judge no better than the systems it rates
is worth at most twice its labels (Dorner, Nastl & Hardt 2025): a note names the rows above that. With --judge, the
judgments and every --judge are one predictor: a ridge regression on the labels (or the judgments' judge alone,
where cross-validation prefers it), pooled over systems and cross-fitted over folds of labelled dialogues,
weighted by the unlabelled share m/(n+m): no degree of freedom spent, from 3 labels on.
A --plan from `judge screen --design active` records each random dialogue's inclusion probability p: every labelled
dialogue then weighs 1/p, normalised by their realised sum, with a t quantile on Kish's effective number of labels.
A two-stage --plan (`judge screen --pilot-plan`): the first stage's labels weigh 1 + w (N - m1) / m1 and the
second's (1 - w) / p, w = m1 (N - m1 - m2) / ((N - m1)(m1 + m2)) (the uniform first stage's mean and the second
stage's estimate of the rest, combined; every weight equal when the second stage is uniform); a row whose labels
bunch at one end of the scale takes the betting interval of the first stage alone.
--human then holds both stages' labels: give it twice (the pilot's file and the second stage's) or one file with both.
writes (with --output-dir): estimates.csv, differences.csv (paired, per dialogue), targeted.csv, summary.json

pairwise judgments (`judge compare`) and votes "A|B" (`judge import`): --baseline SYSTEM gives per system the win
rate against it and the Bradley-Terry log strength (PPI-corrected, beside the human-only estimate), ranking.csv with
rank sets that hold jointly at --confidence, and summary.md; --margin M decides non-inferiority; --items (the
pairs with their texts) adds the length-controlled win rate (the win rate at equal text length):
  judge estimate --judgments examples/pairwise/judgments.jsonl --human examples/pairwise/labels.csv \\
      --baseline lead-3 --margin 0.1 --items examples/pairwise/pairs.jsonl --output-dir out/pairwise
exit status with --margin: 0 every system non-inferior (win rate's lower bound above 0.5 - M), 1 one is not,
2 bad input.
checks: every label on the rubric's scale (or --scale), on a judged dialogue, system and criterion; N/A (as
`judge import` writes it) takes the cell out of that criterion's population; a labelled cell with no judgment line
counts as a failed judgment; judgments of two rubrics or models in one file are refused; with --key, the labels'
sheets must come from --plan. No interval is printed where none can hold; `separated` needs two finite bounds.
"""


# Every flag's error names the flag and says what it must be, in the wording calibration.screen and estimate use;
# ranges the functions check themselves (--power, --confidence's open interval) come from them, word for word.
_power_type = flag_type(SHARE)


_number_type = flag_type(NUMBER)


def _groups(parser: argparse.ArgumentParser, *titles: str) -> dict:
    """`--help` in named groups (the verbs have more than 12 options): title -> argument group."""
    return {title: parser.add_argument_group(title) for title in titles}


def _add_judge_arguments(groups: dict) -> None:
    parser = groups["judgments"]
    parser.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                        help="judgments JSONL (`judge score`), or a CSV of scores read as `judge calibrate` reads it")
    parser.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    parser.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    parser.add_argument("--criteria", type=criteria_type, metavar="a,b",
                        help="only these criteria (default: all shared)")
    parser = groups["human labels"]
    parser.add_argument("--clean", action="store_true",
                        help="DialSummEval noise cleaning of the human labels before averaging annotators")
    parser.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human scale, e.g. 1,5: any human score outside it is an error (default: the "
                             "scales of the rubric the judgments name), as in `judge calibrate`")
    parser = groups["output"]
    parser.add_argument("--output-dir", type=Path, metavar="DIR", help="write the tables here")
    parser.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with a plot")


def register(sub) -> None:
    screen = sub.add_parser(
        "screen", help="Systems with CIs, uncertain items, a human-study plan under a budget, and power.",
        description="What the judge already says (systems with CIs, which it cannot separate, uncertain dialogues) "
                    "and what a human study needs: a plan under a budget, and how many dialogues to label.",
        epilog=SCREEN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser = screen
    groups = _groups(parser, "judgments", "human labels", "plan (with --budget)", "power and resampling", "output")
    _add_judge_arguments(groups)
    screen = groups["judgments"]
    screen.add_argument("--judge", action="append", type=judge_spec_type, metavar="NAME=FILE",
                        help="one more judge: where the judges disagree is one more sign of doubt (items.csv's "
                             "mean_jury_disagreement); with --human also one more predictor for the power analysis, "
                             "combined with --judgments as `judge estimate --judge` combines them; repeat")
    screen = groups["human labels"]
    screen.add_argument("--human", action="append", type=Path, metavar="PILOT.csv",
                        help="labels from a pilot (long CSV): human-scale effect and judge-human correlation; "
                             "repeat for labels in several files")
    screen = groups["plan (with --budget)"]
    screen.add_argument("--budget", type=positive_type, metavar="N", help="plan a study of N dialogues or judgments")
    screen.add_argument("--budget-unit", choices=["dialogues", "judgments"], default="dialogues",
                        help="what --budget counts (default: dialogues)")
    screen.add_argument("--random-share", type=share_type, default=0.5, metavar="X",
                        help="share of the budget drawn uniformly at random (default 0.5); only this part enters "
                             "the unbiased estimates of `judge estimate`")
    screen.add_argument("--design", choices=["uniform", "active"], default="uniform",
                        help="how the random part is drawn: uniform (default), or active: with known inclusion "
                             "probabilities rising with the judge's uncertainty (floored so every dialogue can be "
                             "drawn; checked against a --human pilot when given, which also weighs each "
                             "judgment's doubt by the judge's error in its system and criterion there); plan.csv "
                             "records each probability")
    screen.add_argument("--pilot-plan", type=Path, metavar="DIR",
                        help="the --output-dir of an earlier uniform `judge screen --budget` whose random part "
                             "--human labels: this plan is its second stage, --budget more dialogues drawn "
                             "among the others (needs --design active), and `judge estimate --plan` counts both")
    screen = groups["power and resampling"]
    screen.add_argument("--power", type=_power_type, default=0.8, help="target power (default 0.8)")
    screen.add_argument("--bootstrap", type=positive_type, default=1000, metavar="N",
                        help="bootstrap resamples of dialogues (default 1000)")
    screen.add_argument("--seed", type=seed_type, default=0,
                        help="seed of the bootstrap and the random sample (default 0)")
    parser.set_defaults(run=run_screen)

    estimate = sub.add_parser(
        "estimate", help="Each system's mean human score, and differences, from judge scores plus few labels (PPI++).",
        description="Each system's mean human score per criterion by prediction-powered inference, beside the "
                    "human-only estimate from the same labels, and the paired differences between systems.",
        epilog=ESTIMATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser = estimate
    groups = _groups(parser, "judgments", "human labels", "pairwise judgments (`judge compare`)", "interval", "output")
    _add_judge_arguments(groups)
    estimate = groups["human labels"]
    estimate.add_argument("--human", required=True, action="append", type=Path, metavar="LABELS.csv",
                          help="human labels (long CSV); repeat for labels in several files (a two-stage study's "
                               "two stages): read as one, a cell labelled twice by one annotator refused")
    estimate.add_argument("--plan", type=Path, metavar="DIR",
                          help="the --output-dir of `judge screen --budget`: which dialogues are the random sample")
    estimate.add_argument("--key", type=Path, metavar="KEY.json",
                          help="the key `judge export --plan` wrote: checks that the labels come from this plan")
    estimate = groups["interval"]
    estimate.add_argument("--confidence", type=share_type, default=0.95, help="interval level (default 0.95)")
    estimate = groups["judgments"]
    estimate.add_argument("--apply-map", type=Path, metavar="MAP.json",
                          help="judge scores through a map fitted by `judge calibrate --fit-map`")
    estimate.add_argument("--judge", action="append", type=judge_spec_type, metavar="NAME=FILE",
                          help="one more predictor beside --judgments (another judge, prompt or metric; a wide CSV "
                               "gives its column NAME); repeat: all are combined into one by a cross-fitted "
                               "regression on the labels")
    estimate = groups["pairwise judgments (`judge compare`)"]
    estimate.add_argument("--baseline", metavar="SYSTEM",
                          help="pairwise judgments (`judge compare`): win rates and Bradley-Terry strengths against "
                               "this system, and rank sets of every system")
    estimate.add_argument("--margin", type=_number_type, metavar="M",
                          help="with --baseline: non-inferiority margin, 0 <= M < 0.5; exit 1 unless every system's "
                               "win rate has its lower bound above 0.5 - M")
    estimate.add_argument("--items", type=Path, metavar="PAIRS.jsonl",
                          help="with --baseline: the pairs `judge compare` judged, with their texts: adds "
                               "length- and style-controlled win rates (win_rate_length_controlled, "
                               "win_rate_style_controlled)")
    parser.set_defaults(run=run_estimate)


# -- running: the functions do the work, the CLI checks every path, writes, prints ------------------------------


def _run(args: argparse.Namespace, verb: str, compute, exit_code=lambda result: 0) -> int:
    from ..result import run_verb

    started = time.perf_counter()
    inputs = [p for p in (args.judgments, *(getattr(args, "human", None) or []), getattr(args, "key", None)) if p]
    inputs += [Path(source) for _, source in getattr(args, "judge", None) or []]
    for plan in (getattr(args, "plan", None), getattr(args, "pilot_plan", None)):
        if plan is not None:
            inputs += [Path(plan) / "plan.csv", Path(plan) / "plan.json"]

    def footer(result) -> str:
        systems = (result.systems if verb == "screen" else result.estimates)["system"].nunique()
        if getattr(result, "baseline", None) is not None:
            systems += 1  # the baseline has no row of its own in estimates.csv
        detail = (f"{len(result.items)} dialogues, {result.n_resamples} resamples" if verb == "screen"
                  else f"from {result.n_random} random-sample dialogues")
        planned = "" if verb != "screen" or result.plan is None else (
            f", plan {result.plan_info['n_random']} random + {result.plan_info['n_targeted']} targeted dialogues")
        return (f"\n{verb}: {len(result.criteria)} criteria, {systems} systems, {detail}{planned}, "
                f"{time.perf_counter() - started:.1f}s")

    return run_verb(verb, compute, output_dir=args.output_dir, report=args.report, inputs=inputs, footer=footer,
                    exit_code=exit_code)


# -- screen -------------------------------------------------------------------------------------------------------


def run_screen(args: argparse.Namespace) -> int:
    from .screen import screen

    print(f"screening {args.judgments} ({args.bootstrap} resamples)...", file=sys.stderr)
    return _run(args, "screen", lambda: screen(
        args.judgments, args.human, criteria=args.criteria, score_column=args.score_column, clean=args.clean,
        failure_value=args.failure_value,
        scale=args.scale, budget=args.budget, budget_unit=args.budget_unit, random_share=args.random_share,
        power=args.power, bootstrap=args.bootstrap, seed=args.seed, design=args.design, judges=args.judge,
        pilot_plan=args.pilot_plan))


# -- estimate -----------------------------------------------------------------------------------------------------


def run_estimate(args: argparse.Namespace) -> int:
    from .estimate import estimate

    return _run(args, "estimate", lambda: estimate(
        args.judgments, args.human, plan=args.plan, key=args.key, criteria=args.criteria,
        score_column=args.score_column, clean=args.clean, scale=args.scale, confidence=args.confidence,
        failure_value=args.failure_value,
        apply_map=args.apply_map, baseline=args.baseline, margin=args.margin, judges=args.judge,
        items=args.items),
        exit_code=lambda result: getattr(result, "exit_code", 0))
