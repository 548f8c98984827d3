"""`judge escalate`: the argument parser and the thin CLI layer over calibration.cascade.escalate.

Nothing heavy is imported at module level: every `judge` command builds the whole parser.
"""

from __future__ import annotations

from ..options import FAILURE_HELP, criteria_type, failure_value_type, flag_type, judge_spec_type, scale_type, seed_type

EXAMPLES = "examples/escalate"
# The ranges are checked by calibration.cascade.escalate in the same words; these types refuse what is not a number.
_share = flag_type("between 0 and 1 (both excluded)", ok=lambda x: 0.0 < x < 1.0)
_tolerance = flag_type("a number of score points >= 0", ok=lambda x: x >= 0)
_whole = flag_type("a whole number of at least 0", int, lambda n: n >= 0)
_steps = flag_type("a positive whole number", int, lambda n: n >= 1)

EPILOG = f"""\
examples:
  # a cheap judge (3 samples per verdict) first, a stronger one (probs) next, humans last; 20% disagreement at most,
  # guaranteed with probability 0.9 over the draw of the labelled cells
  judge escalate --judge small={EXAMPLES}/small.jsonl --judge large={EXAMPLES}/large.jsonl \\
      --human {EXAMPLES}/labels.csv --alpha 0.2 --delta 0.1 --output decisions.csv --output-dir out/escalate

  # the strong judge run by escalate itself from its run options (large.toml: rubric, items, model, logprobs),
  # only on the labelled cells, 60 cells that fix the path and the cells the cheap judge escalates; its judgments
  # go to out/escalate-run/large.jsonl (a rerun resumes them); cost.csv says how many judgments it was spared
  judge escalate --judge small={EXAMPLES}/small.jsonl --judge large={EXAMPLES}/large.toml \\
      --base-url http://127.0.0.1:8000/v1 --human {EXAMPLES}/labels.csv --alpha 0.2 --delta 0.1 \\
      --path-cells 60 --output decisions-run.csv --output-dir out/escalate-run

  # one judge alone, a report, and 10 dialogues drawn at random in the plan (the part `judge estimate` takes) for
  # `judge export --plan out/escalate-large`
  judge escalate --judge large={EXAMPLES}/large.jsonl --human {EXAMPLES}/labels.csv \\
      --alpha 0.2 --delta 0.1 --tolerance 0.5 --output decisions-large.csv --output-dir out/escalate-large \\
      --random-dialogues 10 --report escalate.html

the guarantee (per criterion): with probability >= 1 - delta over the draw of the calibration set (the cells with
human labels), the verdicts the cascade accepts, whichever judge gave them, agree with humans at >= 1 - alpha, for
cells drawn like the calibration cells (the labels must be a random sample of the judged cells). One fixed-sequence
test runs along a path through all judges' thresholds, fixed from the unlabelled cells' confidences (at step q each
of them accepts at most its q most confident share), so the guarantee holds for the cascade as a whole: an exact
binomial test over cells, or a betting test over dialogues when labels come in whole dialogues (--units; cells of
one dialogue are not independent). The binomial walk starts where the expected labelled cells accepted let a judge
that disagrees at alpha / 2 pass with 80% power (a strong judge's surest verdicts still disagree 5-10% of the time),
sized from alpha, delta and the number of labels only. Too few labels for alpha and delta (even no disagreement could
not pass): refused, saying how many.
a judge given as run options (NAME=OPTIONS.toml or .json; the keys are judge score's flags, underscored or not;
paths read from the file's folder; output, criteria and block mode are escalate's to choose) is run by escalate
itself through the run API, on the cells the cascade needs from it only: the labelled cells and the cells that fix
the path first, then those every judge before it escalated (a first judge: every item of its input). Its judgments
go to DIR/NAME.jsonl (--output-dir; a rerun resumes them and refuses judgments its options would now ask
differently). Without --path-cells every unlabelled cell fixes the path, so a later judge is spared nothing.
agreement: Likert, within --tolerance points of the human mean (default 0.5); categorical, the human majority label;
pairwise, the human majority verdict (ties and abstentions are verdicts, and can be wrong).
confidence (--signal, default: the first the file records): probs (the verdict's probability, --logprobs), samples
(share of --samples agreeing), order (pairwise: both orders agree), jury (share of the other judges agreeing), none.
writes: --output DECISIONS.csv item_id,system,criterion,decided_by,verdict,confidence (one row per unlabelled cell;
decided_by = a judge NAME or human); with --output-dir: decisions.csv, thresholds.csv, path.csv (every step tested),
risk_coverage.csv, signals.csv, cost.csv (cells run, tokens, cells judged and spared per judge), pending.csv (cells
a judge given as a file must still judge: a cascade in rounds), and plan.csv + plan.json (the dialogues with a cell
for humans, part targeted; --random-dialogues N adds a uniform random part) for `judge export --plan DIR`.
exit: 0 done, 1 a judge run by escalate failed, 2 bad input, 3 a judge run by escalate waits for batch answers
(it says what to run; the same command carries on), 130 interrupted; on all but 0 no decision is written.
"""


def register(sub) -> None:
    import argparse
    from pathlib import Path

    parser = sub.add_parser(
        "escalate", help="Which verdicts may stand without a human, with a guaranteed agreement rate (cascade).",
        description="Judges given cheapest first decide every unlabelled cell where their confidence passes a "
                    "threshold; the rest go\nto humans. The thresholds are chosen on the cells with human labels so "
                    "that the accepted verdicts agree with\nhumans at >= 1 - alpha with probability >= 1 - delta.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    judges = parser.add_argument_group("judges and labels")
    guarantee = parser.add_argument_group("the guarantee")
    path = parser.add_argument_group("the path through the thresholds")
    scales = parser.add_argument_group("reading the files")
    outputs = parser.add_argument_group("outputs")
    judges.add_argument("--judge", required=True, action="append", type=judge_spec_type, metavar="NAME=FILE",
                        help="a judge: judgments JSONL or a CSV of scores (a wide CSV gives its column NAME), or "
                             "the run options of one escalate runs itself (OPTIONS.toml or .json: the keys are "
                             "judge score's flags); repeat, cheapest first")
    judges.add_argument("--base-url", action="append", metavar="URL",
                        help="the server of the judges given as run options that name none (as judge score's "
                             "--base-url; default $JUDGE_BASE_URLS, else the embedded model); repeat for several")
    judges.add_argument("--human", required=True, type=Path, metavar="CALIB.csv",
                        help="human labels of a random sample of the judged cells (long CSV): the calibration set")
    guarantee.add_argument("--alpha", required=True, type=_share, metavar="A",
                        help="the disagreement rate allowed among accepted verdicts, e.g. 0.1")
    guarantee.add_argument("--delta", required=True, type=_share, metavar="D",
                        help="the chance the guarantee may fail over the draw of the labels, e.g. 0.1")
    outputs.add_argument("--output", required=True, type=Path, metavar="DECISIONS.csv",
                        help="one row per unlabelled cell: who decides it and the verdict")
    guarantee.add_argument("--criteria", type=criteria_type, metavar="a,b", help="only these criteria")
    guarantee.add_argument("--tolerance", type=_tolerance, default=0.5, metavar="T",
                        help="Likert: a verdict within T points of the human mean agrees (default 0.5)")
    guarantee.add_argument("--signal", action="append", metavar="[NAME=]SIGNAL",
                        help="the confidence of a judge (or of all): probs, samples, order, jury or none "
                             "(default: the first its file records, in that order)")
    guarantee.add_argument("--units", choices=["auto", "cells", "dialogues"], default="auto",
                        help="what was drawn at random for labelling: dialogues (tested by betting over dialogues)"
                             " or single cells (exact binomial); auto: dialogues when one has several "
                             "labelled cells")
    path.add_argument("--steps", type=_steps, default=40, metavar="N",
                        help="steps of the path from strict to loose (default 40)")
    path.add_argument("--path-cells", type=_steps, metavar="N",
                        help="fix the path from a seeded sample of N unlabelled cells (default: all): a later judge "
                             "then needs only those, the labelled cells and the cells pending.csv lists for it")
    outputs.add_argument("--random-dialogues", type=_whole, default=0, metavar="N",
                        help="add N dialogues drawn uniformly at random to plan.csv (its random part)")
    outputs.add_argument("--seed", type=seed_type, default=0, help="seed of the random part of the plan (default 0)")
    scales.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human labels' scale, when no judge names a rubric (CSVs of scores)")
    scales.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    outputs.add_argument("--output-dir", type=Path, metavar="DIR",
                        help="write the tables and the plan here, and the judgments of the judges given as run "
                             "options (DIR/NAME.jsonl; a rerun resumes them)")
    outputs.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with the curves")
    parser.set_defaults(run=run_escalate)


def run_escalate(args) -> int:
    import sys
    from pathlib import Path

    from judge.errors import JudgeError, exit_with
    from judge.outputs import check_folder, check_writable, write_files

    from ..result import run_verb
    from .escalate import TABLE_FILES, escalate

    inputs = [args.human, *(Path(p) for _, p in args.judge)]
    signal = ",".join(args.signal) if args.signal else None
    written = {}

    def compute():
        # --output and --output-dir are checked before any work (a judge may run for hours), and --output written
        # by run_verb's caller only once every check passed
        check_writable(args.output, inputs=inputs, what="--output", page=False)
        if args.output_dir is not None:
            check_folder(args.output_dir, TABLE_FILES, inputs=inputs)
        result = escalate(args.human, list(args.judge), alpha=args.alpha, delta=args.delta, criteria=args.criteria,
                          tolerance=args.tolerance, signal=signal, units=args.units, scale=args.scale,
                          failure_value=args.failure_value, steps=args.steps, path_cells=args.path_cells,
                          random_dialogues=args.random_dialogues, seed=args.seed, judgments_dir=args.output_dir,
                          base_url=args.base_url)
        written["result"] = result
        return result

    # a judge escalate runs that failed or waits for batch answers (RunStopped) decides nothing: run_verb says so
    code = run_verb("escalate", compute, output_dir=args.output_dir, report=args.report, inputs=inputs)
    if code != 0 or "result" not in written:
        return code
    try:
        replaced = write_files({args.output: written["result"].decisions_csv()}, verb="escalate", inputs=inputs)
    except JudgeError as exc:
        return exit_with("escalate", exc)
    decisions = written["result"].decisions
    kept = int((decisions["decided_by"] != "human").sum())
    if replaced:
        print(f"replaced (written by an earlier run): {args.output}", file=sys.stderr)
    print(f"judge escalate: {len(decisions)} unlabelled cells: {kept} decided by a judge, {len(decisions) - kept} "
          f"to humans; decisions in {args.output}", file=sys.stderr)
    return 0
