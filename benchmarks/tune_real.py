"""`judge tune` on released scores with human ratings: does an accepted candidate also gain on labels it never saw?

No release under ../shared/data has one judge model with several prompts (DECODA's has one DeepSeek-R1 prompt,
SummEval and CSDS none). The closest are DialSummEval's 32 automatic metrics on the same 1,400 summaries, rated by
3 annotators on 4 criteria: each metric stands for a scorer "already made" (--candidate NAME=FILE). The current
judge is ROUGE-L; the candidates are eight other metrics. The 100 dialogues are split in two by id: tune sees only
the first half's labels; the second half is held out from tune entirely and measures every accepted candidate
again (the same paired statistic, its own bootstrap). The reference summaries are left out (a reference-based
metric scores the reference against itself).

    python benchmarks/tune_real.py [--write]      # needs ../shared/data/dialsummeval (or $JUDGE_SHARED_DATA)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.tune.tune import Candidate, tune  # noqa: E402

TABLE = Path(__file__).with_name("tune_real_table.txt")
CURRENT = "rouge-l"
CANDIDATES = ["rouge-1", "bertscore_f1", "moverscore", "bartscore_s_h", "blanc_help", "questeval", "chrf", "Bleu_4"]


def data_dir() -> Path | None:
    root = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    folder = root / "dialsummeval"
    return folder if (folder / "annotations.csv").is_file() else None


def halves(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, Path]:
    labels = pd.read_csv(folder / "annotations.csv", dtype=str)
    labels = labels[labels["system"] != "reference"]
    dialogues = sorted(set(labels["item_id"]))
    first = set(dialogues[: len(dialogues) // 2])
    return labels[labels["item_id"].isin(first)], labels[~labels["item_id"].isin(first)], folder / "metric_scores.csv"


def run(folder: Path, criteria=None, candidates=CANDIDATES, n_resamples: int = 2000) -> pd.DataFrame:
    tuning, held, scores = halves(folder)
    listed = [Candidate(name, "judgments", f"metric {name}", scores) for name in candidates]
    first = tune(scores, tuning, listed, judge_name=CURRENT, criteria=criteria, scale=(1, 5), n_resamples=n_resamples)
    table = first.candidates.assign(split="tune: first 50 dialogues")
    accepted = first.accepted
    rows = [table]
    for criterion, part in accepted.groupby("criterion"):
        again = tune(scores, held, [Candidate(n, "judgments", f"metric {n}", scores) for n in part["candidate"]],
                     judge_name=CURRENT, criteria=[criterion], scale=(1, 5), n_resamples=n_resamples)
        rows.append(again.candidates.assign(split="held out: other 50"))
    return pd.concat(rows, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.name}")
    args = parser.parse_args()
    folder = data_dir()
    if folder is None:
        sys.exit("no ../shared/data/dialsummeval (set JUDGE_SHARED_DATA): nothing to measure")
    started = time.time()
    table = run(folder)
    columns = ["split", "criterion", "candidate", "n_labelled", "current", "value", "gain", "ci_low", "ci_high",
               "lower_family", "p_adjusted", "accepted"]
    text = table[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}") + "\n"
    footer = (f"\ncurrent judge {CURRENT}; item-level Kendall tau-b with the mean of 3 annotators; Romano-Wolf "
              f"step-down max-T over the {len(CANDIDATES)} x 4 candidates of the tune split (over the accepted ones "
              f"on the held-out split), equal-tailed family bounds (alpha / 2 below); 95% percentile intervals, "
              f"unadjusted; 2000 resamples of dialogues; "
              f"{time.time() - started:.0f} s\n"
              "python benchmarks/tune_real.py --write\n")
    print(text + footer, end="")
    if args.write:
        TABLE.write_text(__doc__.split("\n\n")[0] + "\n\n" + text + footer, encoding="utf-8")


if __name__ == "__main__":
    main()
