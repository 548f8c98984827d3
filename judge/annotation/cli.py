"""`judge export` and `judge import`: annotation sheets out, human labels back."""

from __future__ import annotations

import textwrap

from judge.annotation import NA

EXPORT_EXAMPLE = """
judge export --rubric call_centre_fr --input examples/items.jsonl --format csv --output study/
judge export --rubric dialsummeval --input examples/items.jsonl --format label-studio --output ls/ --seed 7
With --plan DIR (a `judge screen --budget` output) only the planned dialogues are exported, and the key records
the plan's digest and each task's part (random or targeted) for `judge estimate --plan --key`. Candidates are
shuffled per dialogue by --seed and shown under letters; study/key.json maps them back to systems: keep it away
from the annotators. Pairwise packages start with the rubric's qualification test and hide repeated identical
pairs (--repeats) that annotators must call ties.
"""

IMPORT_EXAMPLE = f"""
judge import --from examples/annotation/filled_sheet.csv --key examples/annotation/key.json --output labels.csv
judge import --from examples/annotation/label_studio_export.json --key ls/key.json --output ls_labels.csv
Writes item_id,system,annotator,criterion,score,explanation,segment_scores. Tokens: a Likert point as an
integer; a categorical label as its text, abstentions included ("I don't know"); a pairwise verdict 1/2/0 in
the input's order; {NA} where an annotator said a gated criterion does not apply; per-segment criteria: the
mean over segments, the segments' answers in segment_scores ("2;1"). Qualification answers are scored, not
written. Label Studio's JSON export names annotators by user id (user-3), or by e-mail when it gives one
(export JSON, not JSON-MIN). A sheet's extra columns (comments, a spreadsheet's empty last column) are ignored
with a note; save sheets comma-separated, UTF-8.
"""


def _command(sub, name: str, help: str, example: str):
    import argparse

    return sub.add_parser(name, help=help, description=help,
                          epilog="example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  "),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def run_export(args) -> int:
    from judge.annotation.export import export_package
    from judge.annotation.plan import plan_record, plan_to_label
    from judge.items import load_items
    from judge.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    plan = plan_to_label(args.plan) if args.plan else None
    source = plan_record(args.plan) if args.plan else None
    items = load_items(args.input, rubric.inputs)
    done = export_package(rubric, items, args.format, args.output, seed=args.seed, annotators=args.annotators,
                          plan=plan, repeats=args.repeats, qualification=not args.no_qualification,
                          plan_source=source)
    evaluation = [t for t in done.tasks if t.kind == "item"]
    shown = sum(len(t.slots) for t in evaluation)
    sheets = ", ".join(f for f in done.files if f != "key.json")
    print(f"exported {len(done.tasks)} tasks of {rubric.ref} ({len(evaluation)} "
          f"{'pairs' if rubric.task == 'pairwise' else 'dialogues, ' + str(shown) + ' candidates'}, "
          f"{done.count('qualification')} qualification, {done.count('check')} repeated-pair checks; seed "
          f"{args.seed}) as {args.format} into {done.directory}: {sheets}; the key is {done.directory / 'key.json'}"
          f" — keep it away from the annotators")
    return 0


def run_import(args) -> int:
    from judge.annotation.importing import import_labels, report_lines, write_labels

    result = import_labels(args.sources, args.key)
    write_labels(result.rows, args.output)
    for line in report_lines(result):
        print(line)
    passed = sum(result.passed(a) for a in result.qualification)
    qual = f"; qualification passed by {passed}/{len(result.qualification)}" if result.qualification else ""
    checks = f"; {len(result.failed_checks)} failed consistency checks" if result.checks else ""
    print(f"imported {len(result.rows)} labels from {len(result.annotators)} annotators into "
          f"{args.output}{qual}{checks}")
    return 0


def register(sub) -> None:
    p = _command(sub, "export", "Write annotation sheets in the guideline's layout (Label Studio or CSV) and a key.",
                 EXPORT_EXAMPLE)
    p.add_argument("--rubric", required=True, help="rubric name (see `judge rubrics`) or YAML path")
    p.add_argument("--input", required=True, help="items, JSONL or CSV")
    p.add_argument("--plan", metavar="DIR", help="a `judge screen` output directory: export only the dialogues in "
                                                  "DIR/plan.csv (default: all items)")
    p.add_argument("--format", required=True, choices=["label-studio", "csv"], help="sheet format")
    p.add_argument("--output", required=True, metavar="DIR", help="a new (or empty) directory for the package")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed, recorded in the key (default 0)")
    p.add_argument("--annotators", type=int, default=1,
                   help="annotators per task: Label Studio's overlap, or one CSV sheet each (default 1)")
    p.add_argument("--repeats", type=int, default=None,
                   help="pairwise: repeated identical pairs to hide as consistency checks (default: 1 per 10 pairs)")
    p.add_argument("--no-qualification", action="store_true", help="leave out the rubric's qualification items")
    p.set_defaults(run=run_export)

    p = _command(sub, "import", "Read filled sheets back into the long human-labels CSV, unshuffled by the key.",
                 IMPORT_EXAMPLE)
    p.add_argument("--from", dest="sources", required=True, nargs="+", metavar="FILE",
                   help="Label Studio JSON export(s), filled CSV sheet(s), or a crowdsourcing site's results CSV "
                        "(Input./Answer. columns and WorkerId, as Mechanical Turk writes them)")
    p.add_argument("--key", required=True, help="the key.json written by `judge export`")
    p.add_argument("--output", required=True, help="labels CSV to write (an existing one is replaced only if "
                                                   "`judge import` wrote it)")
    p.set_defaults(run=run_import)
