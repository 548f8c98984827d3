"""`judge calibrate`: judge-vs-human agreement, correlations with CIs, the human ceiling, maps and a report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from .analysis import CalibrationResults, analyse
from .errors import CalibrationError
from .io import load_human_labels, load_judge_scores
from .maps import apply_maps, load_maps, save_maps

EPILOG = """\
examples:
  # an LLM judge's judgments against three annotators, DialSummEval noise cleaning, HTML report
  judge calibrate --judgments out/judgments.jsonl --human labels.csv --clean \\
      --report out/report.html --output-dir out/calibration

  # any metric column of a wide CSV (one column applied to every criterion), 2,000 resamples
  judge calibrate --judgments metric_scores.csv --score-column rouge-1 \\
      --human annotations.csv --clean --bootstrap 2000 --seed 1

  # fit an isotonic map from judge scores to the human scale, then apply it to new judgments
  judge calibrate --judgments dev.jsonl --human dev_labels.csv --fit-map map.json
  judge calibrate --judgments test.jsonl --human test_labels.csv --apply-map map.json --output-dir out

input formats:
  --human      long CSV: item_id,system,annotator,criterion,score (extra columns allowed)
  --judgments  the judgments JSONL written by `judge score`, or a CSV with item_id (or id), system and
               either criterion+score (long) or a score column named by --score-column (wide)

levels (DialSummEval): system = correlation of per-system means; summary = mean over items of the
correlation across systems (constant items skipped and counted); item = all pairs pooled.
"""


def _criteria(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of criteria, e.g. coherence,fluency")
    return names


def _positive_or_zero(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 (no bootstrap) or a positive number of resamples")
    return number


def register(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "calibrate", help="agreement and correlation of judge scores with human labels",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                        help="judgments JSONL, or a CSV of scores")
    parser.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    parser.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    parser.add_argument("--criteria", type=_criteria, metavar="a,b", help="only these criteria (default: all shared)")
    parser.add_argument("--clean", action="store_true",
                        help="DialSummEval noise cleaning: in a triple where two annotators agree, drop the third")
    parser.add_argument("--bootstrap", type=_positive_or_zero, default=1000, metavar="N",
                        help="bootstrap resamples for the 95%% CIs (default 1000; 0 = none)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the bootstrap (default 0)")
    parser.add_argument("--compare", type=Path, metavar="FILE",
                        help="a second judge (or metric) to compare with, paired bootstrap on the same items")
    parser.add_argument("--compare-score-column", metavar="C", help="score column of --compare when it is wide")
    parser.add_argument("--fit-map", type=Path, metavar="MAP.json",
                        help="fit isotonic calibration maps (one per criterion) and save them here")
    parser.add_argument("--apply-map", type=Path, metavar="MAP.json",
                        help="calibrate the judge scores with a saved map before the analysis")
    parser.add_argument("--report", type=Path, metavar="REPORT.html", help="write a self-contained HTML report")
    parser.add_argument("--output-dir", type=Path, metavar="DIR",
                        help="write correlations.csv, agreement.csv and the other tables here")
    parser.set_defaults(run=run)
    return parser


def _format(frame: pd.DataFrame, columns=None) -> str:
    if frame.empty:
        return "  (none)"
    frame = frame if columns is None else frame[[c for c in columns if c in frame.columns]]
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-")


def print_results(results: CalibrationResults, out=None) -> None:
    out = sys.stdout if out is None else out  # resolved per call: stdout may be replaced (tests, pipes)
    human = "cleaned (DialSummEval noise removal) mean" if results.cleaned else "mean"
    print(f"Human score: {human} over annotators. Bootstrap: {results.n_resamples} resamples of items "
          f"(and systems at system level), seed {results.seed}.", file=out)
    print("\nCoverage", file=out)
    print(_format(results.coverage), file=out)
    for level in ("system", "summary", "item"):
        part = results.correlations[results.correlations["level"] == level] if not results.correlations.empty else \
            results.correlations
        print(f"\nCorrelation, {level} level", file=out)
        print(_format(part, ["criterion", "statistic", "value", "ci_low", "ci_high", "p_value", "n_used",
                             "n_skipped"]), file=out)
    print("\nAgreement (judge vs human mean; rounded to whole points for kappa / exact / within_1)", file=out)
    if not results.agreement.empty:
        print(_format(results.agreement.pivot(index="criterion", columns="statistic", values="value")
                      .reset_index()), file=out)
    print("\nHuman ceiling (each annotator vs the mean of the others, raw labels) and the judge vs the mean of all",
          file=out)
    print(_format(results.ceiling, ["criterion", "level", "statistic", "judge", "ceiling", "ceiling_min",
                                    "ceiling_max", "fraction_of_ceiling"]), file=out)
    print("\nKrippendorff's alpha: humans, and humans with the judge as one more rater", file=out)
    print(_format(results.alpha), file=out)
    if not results.map_evaluation.empty:
        print("\nIsotonic calibration map, cross-validated by dialogue", file=out)
        print(_format(results.map_evaluation), file=out)
    for result in results.labels:
        print(f"\nLabels, {result['criterion']}: accuracy {result['accuracy']:.3f}, kappa {result['kappa']:.3f}, "
              f"n {result['n']}, judge abstentions {result['abstained']}, no human majority "
              f"{result['human_undecided']}", file=out)
        if not result["confusion"].empty:
            print(result["confusion"].to_string(), file=out)
    for result in results.pairwise:
        print(f"\nPairwise, {result['criterion']}: agreement with ties {result['agreement_with_ties']:.3f} "
              f"(n {result['n']}), without ties {result['agreement_without_ties']:.3f} "
              f"(n {result['n_without_ties']})", file=out)
    if not results.comparison.empty:
        print("\nJudge vs --compare: difference of correlations with the humans (paired bootstrap)", file=out)
        print(_format(results.comparison), file=out)


def write_tables(results: CalibrationResults, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    results.correlations.to_csv(directory / "correlations.csv", index=False)
    alpha_rows = [
        {"criterion": row.criterion, "statistic": f"alpha_{row.level}_{who}", "value": getattr(row, column),
         "n": row.n_units}
        for row in results.alpha.itertuples()
        for who, column in (("humans", "alpha_humans"), ("humans_plus_judge", "alpha_humans_plus_judge"))
    ]
    pd.concat([results.agreement, pd.DataFrame(alpha_rows, columns=["criterion", "statistic", "value", "n"])],
              ignore_index=True).to_csv(directory / "agreement.csv", index=False)
    results.coverage.to_csv(directory / "coverage.csv", index=False)
    results.ceiling.to_csv(directory / "ceiling.csv", index=False)
    results.system_means.to_csv(directory / "system_means.csv", index=False)
    if not results.map_evaluation.empty:
        results.map_evaluation.to_csv(directory / "calibration_map_cv.csv", index=False)
    if not results.comparison.empty:
        results.comparison.to_csv(directory / "comparison.csv", index=False)
    if results.labels:
        pd.DataFrame([{k: v for k, v in r.items() if k not in ("confusion", "classes")} for r in results.labels]) \
            .to_csv(directory / "label_agreement.csv", index=False)
    if results.pairwise:
        pd.DataFrame(results.pairwise).to_csv(directory / "pairwise_agreement.csv", index=False)
    summary = {"criteria": results.criteria, "human_cleaned": results.cleaned,
               "bootstrap_resamples": results.n_resamples, "seed": results.seed}
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        labels = load_human_labels(args.human)
        judge = load_judge_scores(args.judgments, args.score_column)
        other = load_judge_scores(args.compare, args.compare_score_column) if args.compare else None
        if args.apply_map:
            judge = apply_maps(judge, load_maps(args.apply_map))
        results = analyse(judge, labels, args.criteria, args.clean, args.bootstrap, args.seed,
                          fit_map=args.fit_map is not None, other_judge=other)
        print_results(results)
        if args.fit_map:
            if not results.maps:
                raise CalibrationError("--fit-map: no criterion has numeric (judge, human) pairs to fit")
            save_maps(results.maps, args.fit_map)
        if args.output_dir:
            write_tables(results, args.output_dir)
            if args.apply_map:
                judge[["item_id", "system", "criterion", "score", "score_raw", "status"]].to_csv(
                    args.output_dir / "calibrated_scores.csv", index=False)
        if args.report:
            from .report import write_report  # matplotlib is imported only when a report is asked for

            write_report(results, args.report)
    except CalibrationError as exc:
        print(f"judge calibrate: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"judge calibrate: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    used = int(results.coverage["pairs_used"].sum())
    print(f"\ncalibrated {len(results.criteria)} criteria, {used} judge-human pairs, "
          f"{results.n_resamples} resamples, {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0
