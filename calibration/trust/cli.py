"""`judge audit`, `judge drift` and `judge select`: the argument parsers and the thin CLI layer over
calibration.trust.audit, calibration.trust.drift and calibration.trust.select.

Nothing heavy is imported at module level: every `judge` command builds the whole parser.
"""

from __future__ import annotations

from judge.errors import Stopped

from ..options import (
    AT_LEAST_100,
    FAILURE_HELP,
    POINTS,
    POSITIVE,
    SHARE,
    THRESHOLD,
    criteria_type,
    failure_value_type,
    flag_type,
    judge_spec_type,
    scale_type,
    seed_type,
)

# Every flag's error names the flag and says what it must be, in the wording of calibration.trust's functions; the
# ranges they check themselves come from them, word for word (these types only refuse what is not a number).
_positive_count = flag_type(POSITIVE, int)
_resamples = flag_type(AT_LEAST_100, int)


def _wrap(text: str) -> str:
    """A description wrapped to fit 120 columns (the raw formatter keeps the epilogs' own line breaks)."""
    import textwrap

    return textwrap.fill(text, 118)


def register(sub) -> None:
    register_audit(sub)
    register_drift(sub)
    register_select(sub)


# -- audit ----------------------------------------------------------------------------------------------------------


AUDIT_EPILOG = """\
examples:
  # scores with human labels: length slopes of the judge and the humans, the excess, position, noise
  judge audit --judgments examples/study/judgments.jsonl --items examples/study/items.jsonl \\
      --human examples/study/labels.csv --output-dir out/audit

  # a system written by the judge's own model family (here: alpha); a second plain run as the noise floor
  judge audit --judgments examples/study/judgments.jsonl --items examples/study/items.jsonl \\
      --human examples/study/labels.csv --self alpha --rerun examples/study/judgments_rerun.jsonl --report audit.html

length: words of the candidate, centred within its dialogue and divided by the pooled within-dialogue SD
(reported in words), so a slope is points per typical length difference between summaries of one dialogue.
excess = slope of (judge - human) on the same summaries, never the length term of judge ~ human + length.
writes (with --output-dir): noise.csv, length.csv, length_controlled.csv, position.csv, self_preference.csv,
with --human agreement.csv (the judge's item-level r with the human mean against the humans' ceiling; a judge not
shown to agree beyond chance is FLAGGED, one finding per criterion, Holm with the others)
"""


def register_audit(sub) -> None:
    """`judge audit`: the judge's length, position and self-preference effects against humans and its noise."""
    import argparse
    from pathlib import Path

    p = sub.add_parser(
        "audit", help="The judge's length, position and self-preference effects, against humans and its noise.",
        description=_wrap("Audit a judge: re-run noise, length slopes beside the humans' (and the excess), length-"
                    "controlled system means, position effects and self-preference, each with a dialogue-"
                    "bootstrap 95% CI."), epilog=AUDIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    inputs = p.add_argument_group("inputs")
    inputs.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                   help="judgments JSONL (`judge score`/`compare`) or a CSV of scores, read as `judge calibrate` does")
    inputs.add_argument("--items", required=True, type=Path, metavar="ITEMS", help="the items that were judged (texts)")
    inputs.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    inputs.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    inputs.add_argument("--criteria", metavar="a,b", type=criteria_type,
                        help="only these criteria")
    humans = p.add_argument_group("human labels (the excess over the humans' own effect, agreement with them)")
    humans.add_argument("--human", type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    humans.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human labels' scale, when the judgments name no rubric (a CSV of scores)")
    findings = p.add_argument_group("findings")
    findings.add_argument("--self", dest="self_systems", metavar="SYSTEM[,SYSTEM...]",
                   help="systems written by the judge's own model or family: self-preference")
    findings.add_argument("--rerun", type=Path, metavar="J2",
                          help="a second plain run of the same judgments: the noise floor")
    findings.add_argument("--allow-different-judge", action="store_true",
                   help="accept a --rerun made by another judge (model, rubric, template or decoding) on purpose")
    findings.add_argument("--length-threshold", type=flag_type(THRESHOLD), default=0.1, metavar="X",
                   help="pairwise: lengths differ when by more than this share of the longer (default 0.1)")
    intervals = p.add_argument_group("intervals")
    intervals.add_argument("--bootstrap", type=_positive_count, default=1000, metavar="N",
                   help="resamples of dialogues (default 1000)")
    intervals.add_argument("--bootstrap-seed", type=seed_type, default=0, metavar="N",
                   help="seed of the bootstrap and of the probes' sample (default 0; --seed is the model's)")
    output = p.add_argument_group("output")
    output.add_argument("--output-dir", type=Path, metavar="DIR",
                        help="write the tables here (and the probes' judgments)")
    output.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with plots")
    probes = p.add_argument_group("probes (judge perturbed copies through the engine, with the cache and resume)")
    probes.add_argument("--probe", metavar="filler,attribution,order",
                        help="filler: a closing sentence that says nothing; attribution: a first line naming a "
                             "famous model as author; order: another shuffle of each block (block mode)")
    probes.add_argument("--rubric", help="the rubric the judgments were made with (needed by --probe)")
    probes.add_argument("--probe-sample", type=_positive_count, default=30, metavar="N",
                        help="candidates (block mode: dialogues) to perturb per probe (default 30)")
    from judge.cli import add_model_arguments  # judge.cli is loaded: it is building this parser

    add_model_arguments(p)
    p.set_defaults(run=run_audit)


def run_audit(args) -> int:
    from ..result import run_verb
    from .audit import audit

    options = dict(self_systems=args.self_systems, rerun=args.rerun, criteria=args.criteria,
                   bootstrap=args.bootstrap, seed=args.bootstrap_seed, scale=args.scale,
                   allow_different_judge=args.allow_different_judge,
                   length_threshold=args.length_threshold, score_column=args.score_column,
                   failure_value=args.failure_value)

    def compute():
        result = audit(args.judgments, args.items, args.human, **options)
        if args.probe:
            runs = _run_probes(args, result)
            result = audit(args.judgments, args.items, args.human, probes=runs, **options)
        return result

    return run_verb("audit", compute, output_dir=args.output_dir, report=args.report,
                    inputs=[args.judgments, args.items, args.human, args.rerun])


class ProbesPending(Stopped):
    """Some probes wait for batch answers: no audit is printed until every probe is judged."""


def _run_probes(args, result) -> dict:
    """Judge each probe's perturbed items through `judge score` (same engine, cache and resume); the items and the
    judgments are kept in --output-dir as probe_NAME_items.jsonl and probe_NAME.jsonl, so a rerun resumes."""
    import json
    import sys
    from pathlib import Path

    from judge.cli import report, run_options
    from judge.errors import JudgeError
    from judge.items import load_items
    from judge.outputs import write_files
    from judge.rubric import load_rubric
    from judge.run import run

    from .audit import read_judgments
    from .probes import check_probes, parse_probes, probe_items

    names = parse_probes(args.probe)
    if not args.rubric:
        raise JudgeError("--probe needs --rubric: the rubric the judgments were made with")
    if args.output_dir is None:
        raise JudgeError("--probe needs --output-dir: the probes' judgments are kept there (a rerun resumes)")
    if args.probe_sample < 1:
        raise JudgeError("--probe-sample must be a positive whole number")
    rubric = load_rubric(args.rubric)
    judge = read_judgments(args.judgments, args.score_column)
    made_with = sorted({r for r in judge["rubric"].dropna().astype(str) if r})
    if made_with and made_with[0].partition("@")[0] != rubric.name:
        raise JudgeError(f"--rubric {args.rubric}: the judgments were made with {made_with[0]}; probe with that rubric")
    check_probes(names, rubric, result.mode)
    mode = "block" if result.mode == "block" else "pointwise"
    # The audited run's model flags, on the probes' items: a probe is judged as the judgments were.
    model = run_options(args, command="score", rubric=args.rubric, mode=mode, criteria=result.criteria)
    _check_same_decoding(args.judgments, model)
    items = load_items(args.items, rubric.inputs)
    runs, pending = {}, []
    for name in names:
        records, keys = probe_items(items, judge, name, args.probe_sample, args.bootstrap_seed, mode)
        item_file, output = args.output_dir / f"probe_{name}_items.jsonl", args.output_dir / f"probe_{name}.jsonl"
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if not (item_file.exists() and item_file.read_text(encoding="utf-8") == text):
            write_files({item_file: text}, verb="audit", inputs=[args.judgments, args.items])
        probe = {"input": str(item_file), "output": str(output)}
        if name == "order":
            probe["seed"] = model.seed + 1  # the block's shuffle follows the run's seed: another seed, another order
        if model.batch_dir is not None:
            # each probe's batch files apart: they are other runs
            probe["batch_dir"] = str(Path(model.batch_dir) / f"probe_{name}")
        print(f"probe {name}: judging {len(keys)} perturbed candidates ({len(records)} items) into {output}",
              file=sys.stderr)
        outcome = run(model.model_copy(update=probe))
        report(outcome)
        # An audit is never built on a fragment of a probe: interrupted, failed or waiting, it stops here.
        if outcome.status == "interrupted":
            raise KeyboardInterrupt
        if outcome.status == "pending":
            pending.append(f"probe {name}: {probe['batch_dir']}")
            continue
        if outcome.status != "complete":
            raise JudgeError(f"probe {name}: some perturbed candidates could not be judged (see above); {output} "
                             "keeps the finished ones: run the same command to retry them before the audit")
        runs[name] = (output, keys)
    if pending:
        raise ProbesPending("the probes wait for batch answers (" + "; ".join(pending) + "): run each folder's "
                            "batch files, then the same command to read them and print the audit")
    return runs


def _check_same_decoding(judgments, options) -> None:
    """Probes are judged as the judgments were: a verdict that is the mean of 3 samples moves less than one sample,
    so other --samples (or temperature, or logprobs) would measure the settings, not the perturbation."""
    from judge.errors import JudgeError
    from judge.judgment import Judgment

    try:
        with open(judgments, encoding="utf-8") as handle:
            first = Judgment.model_validate_json(handle.readline())
    except (OSError, ValueError):
        return  # a CSV of scores records no decoding: nothing to hold the probes to
    made = first.fingerprint or {}
    asked = {"samples": options.samples, "temperature": options.sampling_temperature, "logprobs": options.logprobs}
    for name, value in asked.items():
        if name in made and made[name] != value:
            raise JudgeError(f"--{name} {value}, but the judgments were made with {name} {made[name]}: probe with the "
                             "same settings, or the probes measure the change of settings, not the perturbation")


# -- drift ----------------------------------------------------------------------------------------------------------


def register_drift(sub) -> None:
    """`judge drift`: the anchor set judged again, compared with the reference run."""
    import argparse
    from pathlib import Path

    parser = sub.add_parser(
        "drift", help="Is it still the same judge? Compare a new run on an anchor set with a reference run.",
        description=_wrap("Compares the same (item, system, criterion) judgments of two runs: per criterion the "
                          "paired mean "
                    "shift with a CI, the share of verdicts changed against the re-ask noise, weighted kappa, and "
                    "with --human the change in agreement with humans; then what changed in how the judgments were "
                    "produced (fingerprints, the model and engine the server reported). Exit 0 when every criterion "
                    "shows no drift, 1 otherwise, 2 on bad input."),
        epilog=DRIFT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    runs = parser.add_argument_group("the two runs")
    runs.add_argument("--reference", required=True, type=Path, metavar="OLD",
                        help="the reference run (judgments JSONL, or a CSV of scores)")
    runs.add_argument("--judgments", required=True, type=Path, metavar="NEW", help="the new run of the same anchors")
    runs.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    runs.add_argument("--allow-different-judge", action="store_true",
                      help="compare runs of two different judges (model, rubric, template or decoding) on purpose")
    humans = parser.add_argument_group("human labels")
    humans.add_argument("--human", type=Path, metavar="LABELS.csv", help="human labels: change in agreement with them")
    humans.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human labels' scale, when the judgments name no rubric (a CSV of scores); also the "
                             "largest change a score can make, for the shift's bound when few scores changed")
    verdict = parser.add_argument_group("verdict")
    verdict.add_argument("--margin", type=flag_type(POINTS), default=0.25, metavar="M",
                        help="a mean shift within +-M score points is no drift (TOST; default 0.25)")
    verdict.add_argument("--share-margin", type=flag_type(SHARE), default=0.1, metavar="X",
                        help="changed verdicts beyond the re-ask noise that still count as no drift (default 0.1)")
    verdict.add_argument("--bootstrap", type=_resamples, default=1000, metavar="N",
                         help="resamples of dialogues (default 1000)")
    verdict.add_argument("--seed", type=seed_type, default=0, help="bootstrap seed (default 0)")
    output = parser.add_argument_group("output")
    output.add_argument("--output-dir", type=Path, metavar="DIR", help="write drift.csv and provenance.csv here")
    output.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with a plot")
    parser.set_defaults(run=run_drift)


DRIFT_EPILOG = """\
examples:
  # re-judging the anchor set later: the same command with --refresh (the model answers anew; without it the answer
  # cache would repeat the first run's answers, and drift refuses a run answered from the cache)
  #   judge score --rubric R --input anchors.jsonl --output anchors_now.jsonl --model M ... --refresh
  # the anchor set judged once, and judged again (a re-run of the same judge)
  judge drift --reference examples/study/judgments.jsonl --judgments examples/study/judgments_rerun.jsonl \\
      --output-dir out/drift

  # with human labels of the anchors: did agreement with humans change?
  judge drift --reference examples/study/judgments.jsonl --judgments examples/study/judgments_rerun.jsonl \\
      --human examples/study/labels.csv --margin 0.2

verdicts: no drift = the shift is within +-margin (TOST, 90% CI) and the changed share's one-sided 95% bound is
within the re-ask noise (from the runs' --samples) + --share-margin; drift = the shift's 95% CI excludes 0, or the
changed share's lower bound exceeds the re-ask noise, or (labels) Stuart-Maxwell rejects; else inconclusive, with
the number of anchor dialogues that would settle it. Where fewer than 5 dialogues have a changed score, the shift's
intervals also span +-(the scale's MAX - MIN) x the exact bound on the share of judgments whose score changed (what
was not observed may still have changed): two identical runs of few dialogues are inconclusive, not no drift.
writes (with --output-dir): drift.csv (criterion, n, mean_shift, ci_low, ci_high, changed_share, kappa, verdict,
...), provenance.csv (field, reference, new, changed)
"""


def run_drift(args) -> int:
    from ..result import run_verb
    from .drift import drift

    return run_verb("drift", lambda: drift(
        args.reference, args.judgments, args.human, margin=args.margin, share_margin=args.share_margin,
        bootstrap=args.bootstrap, seed=args.seed, scale=args.scale, failure_value=args.failure_value,
        allow_different_judge=args.allow_different_judge), output_dir=args.output_dir, report=args.report,
        inputs=[args.reference, args.judgments, args.human], exit_code=lambda result: 1 if result.drifted else 0)


# -- select ---------------------------------------------------------------------------------------------------------


def register_select(sub) -> None:
    """`judge select`: several judges against the same human labels."""
    import argparse
    from pathlib import Path

    parser = sub.add_parser(
        "select", help="Which judge (model, prompt, metric, jury) agrees best with humans, with paired CIs.",
        description=_wrap("Each judge's agreement with humans at one level, with bootstrap CIs paired across "
                          "judges, the "
                    "set not significantly worse than the best (Holm), each judge's worth in human labels, and "
                    "cross-fitted juries."),
        epilog=SELECT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    inputs.add_argument("--judge", required=True, action="append", type=judge_spec_type, metavar="NAME=FILE",
                        help="a judge: judgments JSONL or a CSV of scores (a wide CSV gives its column NAME); repeat")
    inputs.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human labels' scale, when no judge names a rubric (CSVs of scores)")
    inputs.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    inputs.add_argument("--clean", action="store_true",
                        help="DialSummEval noise cleaning of the human labels before averaging annotators")
    agreement = parser.add_argument_group("agreement")
    agreement.add_argument("--level", choices=["system", "summary", "item"], default="summary",
                        help="system means, per-dialogue correlations averaged (summary), or every pair (item)")
    agreement.add_argument("--statistic", choices=["pearson", "spearman", "kendall"], default="pearson")
    agreement.add_argument("--bootstrap", type=_resamples, default=1000, metavar="N",
                           help="resamples of dialogues (default 1000)")
    agreement.add_argument("--seed", type=seed_type, default=0, help="bootstrap seed (default 0)")
    output = parser.add_argument_group("output")
    output.add_argument("--output-dir", type=Path, metavar="DIR", help="write selection.csv here")
    output.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with the CIs")
    parser.set_defaults(run=run_select)


SELECT_EPILOG = """\
examples:
  # two runs of a judge (or two prompt variants, two models)
  judge select --human examples/study/labels.csv --judge llm=examples/study/judgments.jsonl \\
      --judge rerun=examples/study/judgments_rerun.jsonl --output-dir out/select

  # metrics of a wide CSV as judges (NAME is the column) beside the LLM judge, at DialSummEval's summary level
  judge select --human examples/study/labels.csv --level summary --statistic spearman \\
      --judge llm=examples/study/judgments.jsonl --judge rouge-1=examples/study/metric_scores.csv \\
      --judge bartscore_s_h=examples/study/metric_scores.csv

writes (with --output-dir): selection.csv (criterion, judge, kind, level, statistic, estimate, ci_low, ci_high,
in_best_set, p_adjusted, compared_estimate, n_compared, label_worth, ...). label_worth: labelled dialogues saved per 100
by PPI++ (1 - its variance ratio, many more judged than labelled dialogues). Jury rows are cross-fitted: chosen on
one half of the dialogues, measured on the other.
"""


def run_select(args) -> int:
    from pathlib import Path

    from ..result import run_verb
    from .select import select

    return run_verb("select", lambda: select(
        args.human, list(args.judge), level=args.level, statistic=args.statistic, clean=args.clean,
        bootstrap=args.bootstrap, seed=args.seed, scale=args.scale, failure_value=args.failure_value),
        output_dir=args.output_dir,
        report=args.report, inputs=[args.human, *(Path(p) for _, p in args.judge)])
