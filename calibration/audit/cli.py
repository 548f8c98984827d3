"""`judge audit`, `judge drift` and `judge select`: the argument parsers and the thin CLI layer over
calibration.audit.audit, calibration.audit.drift and calibration.audit.select.

Nothing heavy is imported at module level: every `judge` command builds the whole parser.
"""

from __future__ import annotations


def register(sub) -> None:
    register_audit(sub)
    register_drift(sub)
    register_select(sub)


# -- audit ----------------------------------------------------------------------------------------------------------


AUDIT_EPILOG = """\
examples:
  # scores with human labels: length slopes of the judge and the humans, the excess, position, noise
  judge audit --judgments judgments.jsonl --items items.jsonl --human labels.csv --output-dir out/audit

  # the systems written by the judge's own model family; a second plain run as the noise floor
  judge audit --judgments judgments.jsonl --items items.jsonl --human labels.csv --self gpt-4o,gpt-4o-mini \\
      --rerun judgments_again.jsonl --report audit.html

length: words of the candidate, centred within its dialogue and divided by the pooled within-dialogue SD
(reported in words), so a slope is points per typical length difference between summaries of one dialogue.
excess = slope of (judge - human) on the same summaries, never the length term of judge ~ human + length.
writes (with --output-dir): noise.csv, length.csv, length_controlled.csv, position.csv, self_preference.csv
"""


def register_audit(sub) -> None:
    """`judge audit`: the judge's length, position and self-preference effects against humans and its noise."""
    import argparse
    from pathlib import Path

    p = sub.add_parser(
        "audit", help="The judge's length, position and self-preference effects, against humans and its noise.",
        description="Audit a judge: re-run noise, length slopes beside the humans' (and the excess), length-"
                    "controlled system means, position effects and self-preference, each with a dialogue-"
                    "bootstrap 95% CI.", epilog=AUDIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--judgments", required=True, type=Path, metavar="FILE",
                   help="judgments JSONL (`judge score`/`compare`) or a CSV of scores, read as `judge calibrate` does")
    p.add_argument("--items", required=True, type=Path, metavar="ITEMS", help="the items that were judged (texts)")
    p.add_argument("--human", type=Path, metavar="LABELS.csv", help="human labels (long CSV)")
    p.add_argument("--self", dest="self_systems", metavar="SYSTEM[,SYSTEM...]",
                   help="systems written by the judge's own model or family: self-preference")
    p.add_argument("--rerun", type=Path, metavar="J2", help="a second plain run of the same judgments: the noise floor")
    p.add_argument("--criteria", metavar="a,b", type=lambda v: [c.strip() for c in v.split(",") if c.strip()],
                   help="only these criteria")
    p.add_argument("--length-threshold", type=float, default=0.1, metavar="X",
                   help="pairwise: lengths differ when by more than this share of the longer (default 0.1)")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="resamples of dialogues (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--output-dir", type=Path, metavar="DIR", help="write the tables here")
    p.add_argument("--report", type=Path, metavar="FILE.html", help="write an HTML section with plots")
    p.set_defaults(run=run_audit)


def run_audit(args) -> int:
    import sys

    from judge.errors import JudgeError
    from judge.outputs import check_writable

    from .audit import audit

    inputs = [args.judgments, args.items, args.human, args.rerun]
    try:
        if args.report:
            check_writable(args.report, inputs=inputs, what="--report")
        result = audit(args.judgments, args.items, args.human, self_systems=args.self_systems, rerun=args.rerun,
                       criteria=args.criteria, bootstrap=args.bootstrap, seed=args.seed,
                       length_threshold=args.length_threshold)
        page = result.report_html() if args.report else None
        result.write(args.output_dir, inputs=inputs)
        if page is not None:
            from .report import write_page

            write_page(page, args.report, "Judge audit")
    except JudgeError as exc:  # CalibrationError and OutputError are JudgeErrors
        print(f"judge audit: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"judge audit: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(result.text(), end="")
    for warning in result.warnings:
        print(f"judge audit: warning: {warning}", file=sys.stderr)
    return 0


# -- drift ----------------------------------------------------------------------------------------------------------


def register_drift(sub) -> None:
    """`judge drift` (being built)."""


# -- select ---------------------------------------------------------------------------------------------------------


def register_select(sub) -> None:
    """`judge select` (being built)."""
