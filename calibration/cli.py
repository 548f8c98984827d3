"""`judge calibrate`: judge-vs-human agreement, correlations with CIs, the human ceiling, maps and a report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from judge.errors import JudgeError

from .options import FAILURE_HELP, RESAMPLES, criteria_type, failure_value_type, flag_type, scale_type, seed_type

# pandas, scipy, scikit-learn and matplotlib are imported inside run(): every `judge` command builds this parser.

EPILOG = """\
examples:
  # judge the example summaries with the embedded model, then read the judge against three annotators
  judge score --rubric dialsummeval --input examples/items.jsonl --output judgments.jsonl
  judge calibrate --judgments judgments.jsonl --human examples/labels.csv --report report.html

  # DialSummEval noise cleaning, tables for a paper, 2,000 resamples
  judge calibrate --judgments judgments.jsonl --human examples/labels.csv --clean --bootstrap 2000 --seed 1 \
      --report out/report.html --output-dir out/calibration

  # any metric column of a wide CSV (one column applied to every criterion); --scale bounds the human scores
  judge calibrate --judgments examples/study/metric_scores.csv --score-column rouge-1 \
      --human examples/study/labels.csv --scale 1,5

  # fit an isotonic map from judge scores to the human scale, then apply it to new judgments (here a re-run)
  judge calibrate --judgments examples/study/judgments.jsonl --human examples/study/labels.csv --fit-map map.json
  judge calibrate --judgments examples/study/judgments_rerun.jsonl --human examples/study/labels.csv \
      --apply-map map.json --output-dir out/mapped

input formats:
  --human      long CSV: item_id,system,annotator,criterion,score (extra columns allowed). Per criterion the
               scores are numbers or labels; labels are compared as categories, "I don't know" (the rubric's
               abstaining label) counted apart. With one annotator per summary (a release of means) there is no
               human agreement nor ceiling, the rest works.
  --judgments  the judgments JSONL written by `judge score` / `judge compare` (its rubric bounds the human
               scores), or a CSV with item_id (or id), system and either criterion+score (long) or a score
               column named by --score-column (wide)

levels (DialSummEval): system = correlation of per-system means; summary = mean over items of the
correlation across systems (constant items skipped and counted); item = all pairs pooled.
--clean: the human mean and Krippendorff's alpha use the cleaned labels; the human ceiling stays on the raw ones.
Exit status: 0 when every criterion was analysed, 1 when one had no judge-human pair, 2 on bad input.
"""


# Every flag's error names the flag and says what it must be, in the wording calibration.calibrate uses.
_resamples_type = flag_type(RESAMPLES, int, lambda n: n == 0 or n >= 40)


def register(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "calibrate", help="agreement and correlation of judge scores with human labels",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                        help="judgments JSONL, or a CSV of scores")
    parser.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    parser.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    parser.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human scale, e.g. 1,5: any human score outside it is an error (default: the "
                             "scales of the rubric the judgments name; needed for a CSV of scores)")
    parser.add_argument("--criteria", type=criteria_type, metavar="a,b",
                        help="only these criteria (default: all shared)")
    parser.add_argument("--clean", action="store_true",
                        help="DialSummEval noise cleaning: in a triple where two annotators agree, drop the third")
    parser.add_argument("--bootstrap", type=_resamples_type, default=1000, metavar="N",
                        help="bootstrap resamples for the 95%% CIs (default 1000; 0 = none)")
    parser.add_argument("--seed", type=seed_type, default=0, help="random seed of the bootstrap (default 0)")
    parser.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
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


def _format(frame, columns=None) -> str:
    if frame.empty:
        return "  (none)"
    frame = frame if columns is None else frame[[c for c in columns if c in frame.columns]]
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-")


def _single(results) -> str:
    return (f"\n  {', '.join(results.single_annotator)}: needs >= 2 annotators per summary (this file has one)"
            if results.single_annotator else "")


def print_results(results, out=None) -> None:
    out = sys.stdout if out is None else out  # resolved per call: stdout may be replaced (tests, pipes)
    human = "cleaned (DialSummEval noise removal) mean" if results.cleaned else "mean"
    print(f"Human score: {human} over annotators. Bootstrap: {results.n_resamples} resamples of items "
          f"(and systems at system level), seed {results.seed}.", file=out)
    for name, value in results.sources.items():
        print(f"{name}: {value}", file=out)
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
    print("\nHuman ceiling (each annotator vs the mean of the others, on the raw labels even with --clean) and the "
          "judge vs the raw mean of all, with its 95% CI", file=out)
    print(_format(results.ceiling, ["criterion", "level", "statistic", "judge", "judge_ci_low", "judge_ci_high",
                                    "ceiling", "ceiling_min", "ceiling_max", "fraction_of_ceiling"])
          + _single(results), file=out)
    after = " after noise removal (--clean)" if results.cleaned else " on the raw labels"
    print(f"\nKrippendorff's alpha{after}: humans, and humans with the judge as one more rater", file=out)
    print(_format(results.alpha) + _single(results), file=out)
    if not results.map_evaluation.empty:
        print("\nIsotonic calibration map, cross-validated by dialogue", file=out)
        print(_format(results.map_evaluation), file=out)
    for result in results.labels:
        print(f"\nLabels, {result['criterion']}: accuracy {result['accuracy']:.3f}, kappa {result['kappa']:.3f}, "
              f"n {result['n']}, judge abstentions {result['abstained']}, human abstentions "
              f"{result['human_abstained']}, no human majority {result['human_undecided']}", file=out)
        if not result["confusion"].empty:
            print(result["confusion"].to_string(), file=out)
    for result in results.pairwise:
        print(f"\nPairwise, {result['criterion']}: agreement with ties {result['agreement_with_ties']:.3f} "
              f"(n {result['n']}), without ties {result['agreement_without_ties']:.3f} "
              f"(n {result['n_without_ties']})", file=out)
    if not results.comparison.empty:
        print("\nJudge vs --compare: difference of correlations with the humans (paired bootstrap)", file=out)
        print(_format(results.comparison), file=out)


def table_files(results) -> dict[str, str]:
    """Every table of --output-dir as CSV (or JSON) text, keyed by file name."""
    import pandas as pd

    alpha_rows = [
        {"criterion": row.criterion, "statistic": f"alpha_{row.level}_{who}", "value": getattr(row, column),
         "n": row.n_units}
        for row in results.alpha.itertuples()
        for who, column in (("humans", "alpha_humans"), ("humans_plus_judge", "alpha_humans_plus_judge"))
    ]
    files = {
        "correlations.csv": results.correlations.to_csv(index=False),
        "agreement.csv": pd.concat([results.agreement, pd.DataFrame(alpha_rows, columns=["criterion", "statistic",
                                                                                         "value", "n"])],
                                   ignore_index=True).to_csv(index=False),
        "coverage.csv": results.coverage.to_csv(index=False),
        "ceiling.csv": results.ceiling.to_csv(index=False),
        "system_means.csv": results.system_means.to_csv(index=False),
    }
    if not results.map_evaluation.empty:
        files["calibration_map_cv.csv"] = results.map_evaluation.to_csv(index=False)
    if not results.comparison.empty:
        files["comparison.csv"] = results.comparison.to_csv(index=False)
    if results.labels:
        files["label_agreement.csv"] = pd.DataFrame(
            [{k: v for k, v in r.items() if k not in ("confusion", "classes")} for r in results.labels]
        ).to_csv(index=False)
    if results.pairwise:
        files["pairwise_agreement.csv"] = pd.DataFrame(results.pairwise).to_csv(index=False)
    summary = {"criteria": results.criteria, "human_cleaned": results.cleaned,
               "alpha_on": "cleaned labels" if results.cleaned else "raw labels", "ceiling_on": "raw labels",
               "single_annotator_criteria": results.single_annotator,
               "bootstrap_resamples": results.n_resamples, "seed": results.seed, "sources": results.sources}
    files["summary.json"] = json.dumps(summary, indent=2) + "\n"
    return files


def write_tables(results, directory: Path) -> None:
    from judge.outputs import write_folder

    write_folder(directory, table_files(results), verb="calibrate")


def _check_outputs(args) -> None:
    """Refuse unusable output paths before any work, and never let an output overwrite an input."""
    from .errors import CalibrationError

    inputs = {p.resolve() for p in (args.judgments, args.human, args.compare, args.apply_map) if p}
    for flag, path, kind in (("--report", args.report, "file"), ("--fit-map", args.fit_map, "file"),
                             ("--output-dir", args.output_dir, "dir")):
        if path is None:
            continue
        if path.resolve() in inputs:
            raise CalibrationError(f"{flag} {path}: is one of the input files; choose another path")
        if kind == "file" and path.is_dir():
            raise CalibrationError(f"{flag} {path}: is a directory, expected a file name")
        if kind == "dir" and path.exists() and not path.is_dir():
            raise CalibrationError(f"{flag} {path}: is a file, expected a directory")
        for parent in (path.parent if kind == "file" else path, *path.parents):
            if parent.exists() and not parent.is_dir():
                raise CalibrationError(f"{flag} {path}: {parent} is a file, not a directory")


def _progress(message: str) -> None:
    print(f"judge calibrate: {message}", file=sys.stderr, flush=True)


def _inputs(args) -> list:
    return [args.judgments, args.human, getattr(args, "compare", None), getattr(args, "apply_map", None)]


def written_paths(args, files: dict, page) -> list[Path]:
    return [args.output_dir / name for name in files] + ([args.report] if page is not None else [])


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        _check_outputs(args)
        from .analysis import calibrate

        _progress(f"reading {args.judgments} and {args.human}; {args.bootstrap} bootstrap resamples per statistic")
        results = calibrate(args.judgments, args.human, score_column=args.score_column, scale=args.scale,
                            failure_value=args.failure_value,
                            criteria=args.criteria, clean=args.clean, bootstrap=args.bootstrap, seed=args.seed,
                            compare=args.compare, compare_score_column=args.compare_score_column,
                            fit_map=args.fit_map is not None, apply_map=args.apply_map)
        for warning in results.warnings:
            _progress(warning)
        # Everything is computed and rendered before the first byte is written: an error leaves no half output.
        files = results.files() if args.output_dir else {}
        page = None
        if args.report:
            _progress("drawing the report")
            page = results.report_html()
        from judge.outputs import check_writable, write_files

        for path in written_paths(args, files, page):
            check_writable(path, inputs=_inputs(args))
        if args.fit_map:
            from .maps import save_maps

            check_writable(args.fit_map, inputs=_inputs(args), what="--fit-map")
            save_maps(results.maps, args.fit_map)
        written = {args.output_dir / name: text for name, text in files.items()}
        if page is not None:
            written[args.report] = page
        write_files(written, verb="calibrate", inputs=_inputs(args))
        # Printed after the files are written: a reader that stops early (`| head`) costs no output file.
        print(results.text(), end="")
    except JudgeError as exc:
        print(f"judge calibrate: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # the reader of stdout has gone: `judge` ends quietly
    except OSError as exc:
        print(f"judge calibrate: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return _summary(results, args, time.perf_counter() - started)


def _observed_ranges(labels, scales: dict) -> str:
    """"coherence (1 to 99), ..." for the numeric criteria no rubric nor --scale bounds: a typo such as 99 on a
    1-5 scale shows in the range."""
    numeric = labels[labels["score"].notna() & ~labels["criterion"].isin(list(scales))]
    if "*" in scales or numeric.empty:
        return ""
    ranges = numeric.groupby("criterion")["score"].agg(["min", "max"])
    return ", ".join(f"{c} ({r['min']:g} to {r['max']:g})" for c, r in ranges.iterrows())


def _summary(results, args, seconds: float) -> int:
    """The one-line summary; exit 1 when a requested criterion produced nothing to report."""
    used = int(results.coverage["pairs_used"].sum()) if not results.coverage.empty else 0
    analysed = (set(results.correlations["criterion"]) if not results.correlations.empty else set()) | \
        {r["criterion"] for r in results.labels if r["n"]} | {r["criterion"] for r in results.pairwise if r["n"]}
    empty = [c for c in results.criteria if c not in analysed]
    written = [str(p) for p in (args.output_dir, args.report, args.fit_map) if p]
    line = (f"calibrated {len(analysed)} of {len(results.criteria)} criteria, {used} judge-human pairs, "
            f"{results.n_resamples} resamples" + (f", wrote {', '.join(written)}" if written else "")
            + f", {seconds:.1f}s")
    if empty:
        print(f"judge calibrate: {line}; incomplete: no judge-human pair for {', '.join(empty)}", file=sys.stderr)
        return 1
    print(f"judge calibrate: {line}", file=sys.stderr)
    return 0
