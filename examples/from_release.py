"""Turn a long-format human-judgment release into an items file and a labels file.

A release in the long format (DialSummEval, DECODA and the others in the project's data folder) has three CSVs:
`items.csv` (item_id, dialogue, reference), `outputs.csv` (item_id, system, summary: the rated texts) and
`annotations.csv` (item_id, system, annotator, criterion, score). `judge score` wants one line per rated text with
the dialogue beside it; `judge calibrate` wants the annotations as they are, minus extra columns.

    python examples/from_release.py RELEASE_DIR --output-dir OUT [--dialogues N] [--systems a,b]

writes OUT/items.jsonl and OUT/labels.csv (`examples/release` is a small release of this shape), keeping the first N
dialogues (in the release's order) and the named systems (default: all). Column names that differ (e.g. `text` for
`summary`) are given with --text-column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from judge.errors import JudgeError
from judge.outputs import write_folder


def convert(release: Path, output_dir: Path, *, dialogues: int | None = None, systems: list[str] | None = None,
            text_column: str = "summary") -> tuple[int, int]:
    """Write items.jsonl and labels.csv for the release in `release`; return (items written, labels written)."""
    absent = [name for name in ("items.csv", "outputs.csv", "annotations.csv") if not (release / name).is_file()]
    if absent:
        raise SystemExit(f"{release}: no {', '.join(absent)} here; a release folder holds items.csv, outputs.csv and "
                         "annotations.csv (try examples/release)")
    items = pd.read_csv(release / "items.csv", dtype={"item_id": str})
    outputs = pd.read_csv(release / "outputs.csv", dtype={"item_id": str, "system": str})
    labels = pd.read_csv(release / "annotations.csv", dtype={"item_id": str, "system": str, "annotator": str})
    for name, frame, needed in (("items.csv", items, ["item_id", "dialogue"]),
                                ("outputs.csv", outputs, ["item_id", "system", text_column]),
                                ("annotations.csv", labels, ["item_id", "system", "annotator", "criterion", "score"])):
        missing = [column for column in needed if column not in frame.columns]
        if missing:
            raise SystemExit(f"{release / name}: no column {', '.join(missing)} (it has {', '.join(frame.columns)})")
    if dialogues is not None:
        items = items.head(dialogues)
    if systems:
        outputs = outputs[outputs["system"].isin(systems)]
    # One item per rated text, with its dialogue (and reference, when the release has one) beside it.
    keep = ["item_id", "dialogue"] + (["reference"] if "reference" in items.columns else [])
    rows = outputs.merge(items[keep], on="item_id", how="inner")
    rows = rows.rename(columns={"item_id": "id", text_column: "candidate"})
    rows = rows[["id", "system", "dialogue", "candidate"] + (["reference"] if "reference" in keep else [])]
    rows = rows.dropna(subset=["candidate"])
    # Labels on the texts kept only, in the five columns every statistics verb reads.
    labels = labels.merge(rows[["id", "system"]].rename(columns={"id": "item_id"}), on=["item_id", "system"])
    labels = labels[["item_id", "system", "annotator", "criterion", "score"]]
    # As every verb writes: all or nothing, and never over a file this tool did not write (a user's labels.csv).
    items_text = rows.to_json(orient="records", lines=True, force_ascii=False)
    files = {"items.jsonl": items_text if items_text.endswith("\n") else items_text + "\n",
             "labels.csv": labels.to_csv(index=False)}
    sources = [release / name for name in ("items.csv", "outputs.csv", "annotations.csv")]
    try:
        write_folder(output_dir, files, verb="from-release", inputs=sources)
    except JudgeError as exc:
        raise SystemExit(str(exc)) from None
    return len(rows), len(labels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", type=Path, help="folder holding items.csv, outputs.csv and annotations.csv")
    parser.add_argument("--output-dir", type=Path, required=True, help="where items.jsonl and labels.csv go")
    parser.add_argument("--dialogues", type=int, help="keep the first N dialogues only")
    parser.add_argument("--systems", help="comma-separated systems to keep (default: all)")
    parser.add_argument("--text-column", default="summary", help="outputs.csv's column with the rated text")
    args = parser.parse_args(argv)
    systems = args.systems.split(",") if args.systems else None
    n_items, n_labels = convert(args.release, args.output_dir, dialogues=args.dialogues, systems=systems,
                                text_column=args.text_column)
    print(f"wrote {n_items} items to {args.output_dir / 'items.jsonl'} and {n_labels} labels to "
          f"{args.output_dir / 'labels.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
