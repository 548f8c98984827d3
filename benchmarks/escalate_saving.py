"""What a later judge is spared when `judge escalate` runs it itself (a judge given as run options), against judging
every cell, and whether the decisions stay those of the judge run on every cell.

A synthetic study (tests/cascade_sim.py): D dialogues x 3 systems, one criterion; a cheap judge unanimous and right
on 60% of the cells; a share of the cells labelled one by one; the strong judge is tests/stub_server.py (in this
process, through the OpenAI SDK). For each setting: the cells the strong judge judged, the share spared, and whether
decisions, thresholds and the tested path equal those of the cascade whose strong judge judged every cell.

    python benchmarks/escalate_saving.py            # the table (about a minute on 2 cores)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# (dialogues, labelled share, --path-cells)
SETTINGS = [(80, 0.5, 40), (400, 0.1, 100), (400, 0.1, 300), (1000, 0.05, 200)]


def one(folder: Path, url: str, dialogues: int, labelled: float, path_cells: int) -> dict:
    import pandas as pd
    from cascade_sim import judged_cells, strong_options, write_study

    import calibration
    from judge.options import RunOptions
    from judge.run import run

    write_study(folder, dialogues, labelled=labelled)
    options = dict(alpha=0.2, delta=0.1, units="cells", path_cells=path_cells)
    started = time.monotonic()
    result = calibration.escalate(folder / "labels.csv", {"small": folder / "small.jsonl",
                                                          "large": strong_options(folder, url)},
                                  judgments_dir=folder / "out", **options)
    seconds = time.monotonic() - started
    outcome = run(RunOptions(**strong_options(folder, url), output=str(folder / "full.jsonl"), criteria=["clarity"]))
    assert outcome.status == "complete"
    every = calibration.escalate(folder / "labels.csv", {"small": folder / "small.jsonl",
                                                         "large": folder / "full.jsonl"}, **options)
    same = (result.decisions_csv() == every.decisions_csv() and result.thresholds.equals(every.thresholds)
            and result.path.equals(every.path))
    cost = result.cost.set_index("what").loc["judge large"]
    cells = dialogues * 3
    return {"cells": cells, "labelled": len(pd.read_csv(folder / "labels.csv")),
            "path_cells": path_cells, "kept_by_cheap": int((result.decisions["decided_by"] == "small").sum()),
            "judged": int(cost["judged"]), "spared": int(cost["spared"]),
            "spared_share": cost["spared"] / cells, "file_lines": len(judged_cells(folder / "out" / "large.jsonl")),
            "same_as_every_cell": same, "seconds": seconds}


def main() -> None:
    from stub_server import StubServer

    server = StubServer().start()
    print("cells  labelled  path  kept_by_cheap  strong_judged  spared  share  same_as_every_cell  seconds")
    try:
        for dialogues, labelled, path_cells in SETTINGS:
            with tempfile.TemporaryDirectory() as scratch:
                r = one(Path(scratch), server.base_url, dialogues, labelled, path_cells)
            assert r["judged"] == r["file_lines"]
            print(f"{r['cells']:>5}  {r['labelled']:>8}  {r['path_cells']:>4}  {r['kept_by_cheap']:>13}  "
                  f"{r['judged']:>13}  {r['spared']:>6}  {r['spared_share']:>5.0%}  {str(r['same_as_every_cell']):>18}"
                  f"  {r['seconds']:>7.1f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
