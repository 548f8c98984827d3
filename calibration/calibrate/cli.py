"""`judge calibrate`: judge-vs-human agreement, correlations with CIs, the human ceiling, maps and a report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from judge.errors import JudgeError, exit_with

from ..options import FAILURE_HELP, RESAMPLES, criteria_type, failure_value_type, flag_type, scale_type, seed_type

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
    # More than 12 options: shown in named groups (what is read, what is computed, a second judge and maps, written).
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                        help="judgments JSONL, or a CSV of scores")
    inputs.add_argument("--score-column", metavar="C", help="with a wide CSV: the column to use as the score")
    inputs.add_argument("--human", required=True, type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    inputs.add_argument("--scale", type=scale_type, metavar="MIN,MAX",
                        help="the human scale, e.g. 1,5: any human score outside it is an error (default: the "
                             "scales of the rubric the judgments name; needed for a CSV of scores)")
    inputs.add_argument("--failure-value", type=failure_value_type, metavar="V", help=FAILURE_HELP)
    analysis = parser.add_argument_group("analysis")
    analysis.add_argument("--criteria", type=criteria_type, metavar="a,b",
                          help="only these criteria (default: all shared)")
    analysis.add_argument("--clean", action="store_true",
                          help="DialSummEval noise cleaning: in a triple where two annotators agree, drop the third")
    analysis.add_argument("--bootstrap", type=_resamples_type, default=1000, metavar="N",
                          help="bootstrap resamples for the 95%% CIs (default 1000; 0 = none)")
    analysis.add_argument("--seed", type=seed_type, default=0, help="random seed of the bootstrap (default 0)")
    more = parser.add_argument_group("a second judge and calibration maps")
    more.add_argument("--compare", type=Path, metavar="FILE",
                      help="a second judge (or metric) to compare with, paired bootstrap on the same items")
    more.add_argument("--compare-score-column", metavar="C", help="score column of --compare when it is wide")
    more.add_argument("--fit-map", type=Path, metavar="MAP.json",
                      help="fit isotonic calibration maps (one per criterion) and save them here")
    more.add_argument("--apply-map", type=Path, metavar="MAP.json",
                      help="calibrate the judge scores with a saved map before the analysis")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--report", type=Path, metavar="REPORT.html", help="write a self-contained HTML report")
    outputs.add_argument("--output-dir", type=Path, metavar="DIR",
                         help="write correlations.csv, agreement.csv and the other tables here")
    parser.set_defaults(run=run)
    return parser


def write_tables(results, directory: Path) -> None:
    from judge.outputs import write_folder

    from .calibrate import table_files

    files: dict[str, str | bytes] = dict(table_files(results))
    write_folder(directory, files, verb="calibrate")


def _check_outputs(args) -> None:
    """Refuse unusable output paths before any work, and never let an output overwrite an input."""
    from ..errors import CalibrationError

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
        from .calibrate import calibrate

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
            from ..maps import save_maps

            check_writable(args.fit_map, inputs=_inputs(args), what="--fit-map")
            save_maps(results.maps, args.fit_map)
        written: dict[str | Path, str | bytes] = {args.output_dir / name: text for name, text in files.items()}
        if page is not None:
            written[args.report] = page
        write_files(written, verb="calibrate", inputs=_inputs(args))
        # Printed after the files are written: a reader that stops early (`| head`) costs no output file.
        print(results.text(), end="")
    except BrokenPipeError:
        raise  # the reader of stdout has gone: `judge` ends quietly
    except (JudgeError, OSError) as exc:
        return exit_with("calibrate", exc)
    return _summary(results, args, time.perf_counter() - started)


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
