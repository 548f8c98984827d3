"""`judge tune`: the argument parser and the thin CLI layer over calibration.tune.tune (and, for candidates built
from the labels, the engine: each fold's version is judged by `judge score`'s run, with its cache and resume).

Nothing heavy is imported at module level: every `judge` command builds the whole parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..options import SEED, criteria_type, failure_value_type, flag_type, judge_spec_type, scale_type

if TYPE_CHECKING:
    from .runs import Context
    from .tune import TuneResult

EPILOG = """\
examples:
  # judgments already made (other prompts, other models) against the current judge; no model is called
  judge tune --judge current=examples/study/judgments.jsonl --human examples/study/labels.csv \\
      --output-dir out/tune --candidate rerun=examples/study/judgments_rerun.jsonl

  # candidates built from the labels, cross-fitted over 5 folds of dialogues, judged through the engine
  judge tune --judge current=examples/study/judgments.jsonl --human examples/study/labels.csv \\
      --output-dir out/tune-built --candidates few-shot,decoding --rubric examples/study/toy.yaml \\
      --items examples/study/items.jsonl --base-url http://127.0.0.1:8000/v1 --model M --folds 5

what it does: the gain = candidate minus current in item-level agreement with the mean human score (Kendall tau-b by
default) on the same labelled cells; a paired bootstrap of dialogues; a one-sided step-down max-T over every candidate
tried (Romano & Wolf 2005). A candidate is accepted when its lower bound at family level lies above zero; the accepted
version (built from all labels) is written as DIR/rubrics/NAME.yaml. Its demonstrations' dialogues are marked in every
judgment made with it, and every statistics verb leaves their labels out. Do not reuse these labels to estimate with the
accepted judge: label new dialogues (docs/verbs/tune.md).
writes: DIR/candidates.csv, DIR/rubrics/NAME.yaml (when a built candidate is accepted), DIR/runs/ (the folds'
items and judgments: a rerun resumes)
Exit status: 0 when a candidate is accepted, 1 when none is, 2 on bad input.
"""

_folds = flag_type("a whole number of at least 2", int, lambda n: n >= 2)
_alpha = flag_type("between 0 and 0.5", float, lambda a: 0 < a < 0.5)
_resamples = flag_type("a whole number of at least 200", int, lambda n: n >= 200)
_shots = flag_type("a positive whole number", int, lambda n: n >= 1)


def register(sub) -> None:
    import argparse
    from pathlib import Path

    p = sub.add_parser(
        "tune", help="Propose better versions of the judge from the human labels; accept one only with an honest "
                     "held-out gain.",
        description="Tests candidate versions of the current judge against it on the human labels: judgments "
                    "already made (--candidate), and versions built from the labels (--candidates), cross-fitted "
                    "by dialogue. Accepts one only when its gain, adjusted for every candidate tried, is above zero.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judge", required=True, type=judge_spec_type, metavar="NAME=FILE",
                   help="the current judge: judgments JSONL, or a CSV of scores (a wide CSV: its column NAME)")
    p.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    p.add_argument("--output-dir", required=True, type=Path, metavar="DIR", help="candidates.csv, rubrics/, runs/")
    p.add_argument("--criteria", type=criteria_type, metavar="a,b", help="only these criteria (default: all labelled)")
    p.add_argument("--candidate", action="append", type=judge_spec_type, default=[], metavar="NAME=FILE",
                   help="judgments already made on the same items (repeat it)")
    p.add_argument("--candidates", metavar="few-shot,rubric-edit,decoding",
                   help="build these from the labels (needs --rubric and --items and a model)")
    p.add_argument("--rubric", help="the rubric the current judgments were made with (name or YAML)")
    p.add_argument("--items", type=Path, metavar="ITEMS", help="the judged items (texts), for built candidates")
    p.add_argument("--proposer-model", metavar="M", help="rubric-edit: the model (on --base-url) proposing edits")
    p.add_argument("--shots", type=_shots, default=4, metavar="N",
                   help="few-shot: demonstrations per criterion, from distinct dialogues (default 4)")
    p.add_argument("--metric", choices=["kendall", "spearman", "agreement"], default="kendall",
                   help="item-level agreement with the mean human score (default kendall: tau-b)")
    p.add_argument("--folds", type=_folds, default=5, metavar="K", help="cross-fitting folds of dialogues (default 5)")
    p.add_argument("--alpha", type=_alpha, default=0.05, metavar="A",
                   help="family-wise level over every candidate tried, that of the lower bounds that decide "
                        "(default 0.05)")
    p.add_argument("--bootstrap", type=_resamples, default=2000, metavar="N", help="dialogue resamples (default 2000)")
    p.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                   help="the human scale, when the judgments name no rubric (a CSV of scores)")
    p.add_argument("--failure-value", type=failure_value_type, metavar="V",
                   help="in a CSV of scores, the number that stands for a failed judgment")
    p.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section")
    from judge.cli import add_model_arguments, add_plan_arguments  # judge.cli is loaded: it is building this parser

    add_plan_arguments(add_model_arguments(p))  # --dry-run, --executor: the folds' runs are ordinary runs
    for action in p._actions:  # one seed: the folds, the bootstrap and the model's sampling
        if action.dest == "seed":
            action.help = f"the folds' shuffle, the bootstrap and the model's sampling seed ({SEED}; default 0)"
    p.set_defaults(run=run_tune)


def run_tune(args) -> int:
    from ..result import run_verb

    name, judge_file = args.judge
    if args.dry_run:
        return _dry_run(args, name, judge_file)

    def compute() -> TuneResult:
        from .tune import Candidate, tune

        listed = [Candidate(n, "judgments", f"judgments already made ({f})", f) for n, f in args.candidate]
        notes: list[str] = []
        context: Context | None = None
        if args.candidates:
            from .runs import built_candidates

            built, notes, context = built_candidates(args, name, judge_file)
            listed += built
        result = tune(judge_file, args.human, listed, judge_name=name, criteria=args.criteria, metric=args.metric,
                      alpha=args.alpha, n_resamples=args.bootstrap, seed=args.seed, scale=args.scale,
                      failure_value=args.failure_value, rubric=args.rubric, notes=notes)
        if context is not None:
            from .runs import write_accepted

            write_accepted(args, result, context)
        return result

    inputs = [judge_file, args.human, args.items, *(f for _, f in args.candidate)]
    # a fold waiting for batch answers (TunePending) stops tune with the batch-pending exit: run_verb says so
    return run_verb("tune", compute, output_dir=args.output_dir, report=args.report, inputs=inputs,
                    exit_code=lambda result: 0 if not result.accepted.empty else 1)


def _dry_run(args, name: str, judge_file) -> int:
    """Every fold's run of the built candidates planned (judge/dry_run.py), summed; the last line one JSON object.
    Nothing is written and no model is called; judgments already made (--candidate) cost nothing."""
    import json

    from judge.errors import JudgeError, exit_with

    from ..errors import CalibrationError
    from .runs import Plan, built_candidates

    try:
        if not args.candidates:
            raise CalibrationError("--dry-run plans the runs of built candidates (--candidates): judgments already "
                                   "made (--candidate) are not judged again and cost nothing")
        plan = Plan()
        built_candidates(args, name, judge_file, planner=plan)
        numbers = plan.numbers()
    except (JudgeError, OSError) as exc:
        return exit_with("tune", exc)
    price = "" if numbers["cost"] is None else f"; at most {numbers['cost']:.6g} at the --prices table"
    proposer = (f"; the proposer's {numbers['proposer_calls']} call(s) not counted (rubric-edit folds planned "
                "with the current definitions)") if numbers["proposer_calls"] else ""
    print(f"tune dry run: {numbers['runs']} candidate run(s) over {args.folds} folds, {numbers['judgments']} "
          f"judgments, {numbers['requests']} requests, {numbers['input_tokens']} input tokens ({numbers['tokens']}), "
          f"at most {numbers['output_tokens_max']} output tokens{price}{proposer}; no model was called, nothing "
          "was written")
    print(json.dumps(numbers, ensure_ascii=False))
    return 0
