"""Speed of `judge select` (8 judges) and `judge audit` (no probes) on DialSummEval-sized input, beside
per-resample loops.

Input: 1,400 summaries (100 dialogues x 14 systems) x 4 criteria, 3 annotators, 1,000 bootstrap resamples.
- select: 8 judges = 8 metric columns of DialSummEval's metric_scores.csv against its annotations.csv (cleaned), at
  the summary level (the paper's Table 3), and at the item level with Kendall (the costliest statistic: every pair
  of 1,400 summaries). Beside it, the same numbers by a loop over the 1,000 resamples: each resample's dialogues
  drawn, the statistic computed for every judge (the way one would write it without resample counts).
- audit: invented judgments and items of the same size (candidate lengths drawn per summary, a judge and humans
  that both like length a little). Beside it, a loop over the 1,000 resamples recomputing the judge's, the humans'
  and the excess length slopes and each system's mean per criterion from the resampled dialogues (the core of what
  audit bootstraps; the loop is a stand-in written here, not audit's own code).
Invented data of the same shape replace DialSummEval when ../shared/data is absent. Wall time and this process's
CPU time are printed for every row; the machine may be shared with other work, so ratios are the robust number.

    python benchmarks/audit_speed.py [--resamples 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.correlation import PairedScores, level_statistic  # noqa: E402
from calibration.humans import aggregate_humans  # noqa: E402
from calibration.io import load_human_labels  # noqa: E402

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "dialsummeval"
CRITERIA = ["coherence", "consistency", "fluency", "relevance"]
METRICS = ["rouge-1", "rouge-l", "bertscore_p", "bartscore_s_h", "blanc_help", "questeval", "feqa_score", "ppl"]


def timed(function, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - wall, time.process_time() - cpu


def select_inputs(folder: Path) -> tuple[Path, dict[str, Path]]:
    if (DATA / "metric_scores.csv").exists():
        return DATA / "annotations.csv", {m: DATA / "metric_scores.csv" for m in METRICS}
    rng = np.random.default_rng(0)
    grid = pd.MultiIndex.from_product([[f"d{i:03d}" for i in range(100)], [f"s{j:02d}" for j in range(14)]])
    keys = grid.to_frame(index=False, name=["item_id", "system"])
    truth = rng.normal(3, 1, len(keys))
    rows = [(i, s, a, c, int(np.clip(round(t + rng.normal(0, 0.7)), 1, 5)))
            for (i, s), t in zip(grid, truth) for a in ("a1", "a2", "a3") for c in CRITERIA]
    labels = folder / "labels.csv"
    pd.DataFrame(rows, columns=["item_id", "system", "annotator", "criterion", "score"]).to_csv(labels, index=False)
    wide = keys.assign(**{m: truth + rng.normal(0, 1 + k / 4, len(keys)) for k, m in enumerate(METRICS)})
    wide.to_csv(folder / "metrics.csv", index=False)
    return labels, {m: folder / "metrics.csv" for m in METRICS}


def select_matrices(labels: Path, judges: dict[str, Path]) -> list:
    """Per criterion: the dialogues, systems, human matrix and every judge's matrix (dialogues x systems)."""
    means = aggregate_humans(load_human_labels(labels), clean=True)
    wide = pd.read_csv(next(iter(judges.values())), dtype={"item_id": str})
    out = []
    for criterion in CRITERIA:
        part = means[means.criterion == criterion].merge(wide, on=["item_id", "system"])
        human = part.pivot(index="item_id", columns="system", values="human")
        matrices = [part.pivot(index="item_id", columns="system", values=m).to_numpy(float) for m in judges]
        out.append((human.index.to_numpy(), human.columns.to_numpy(), human.to_numpy(float), matrices))
    return out


def select_core(prepared: list, level: str, statistic: str, resamples: int) -> None:
    """select's statistics from ready matrices: shared resample counts, every judge's replicates, the best set (the
    simultaneous bounds of every judge's difference from the others, as `select` decides it at 95%)."""
    from calibration.stats import resample_counts
    from calibration.trust.select import _best_set, _stat_rows

    for items, systems, human, matrices in prepared:
        rng = np.random.default_rng(0)
        weights = resample_counts(rng, len(items), resamples), resample_counts(rng, len(systems), resamples)
        scores = {f"judge{k}": m for k, m in enumerate(matrices)}
        _best_set(*_stat_rows(scores, human, items, systems, level, statistic, weights),
                  len(items) if level == "summary" else None, 0.95)


def select_loop(labels: Path, judges: dict[str, Path], level: str, statistic: str, resamples: int,
                prepared: list | None = None) -> np.ndarray:
    """Every judge's statistic per resample, one resample at a time (dialogues drawn, matrices indexed)."""
    prepared = select_matrices(labels, judges) if prepared is None else prepared
    rng = np.random.default_rng(0)
    out = np.empty((resamples, len(CRITERIA), len(judges)))
    for c, (items, systems, human, matrices) in enumerate(prepared):
        for b in range(resamples):
            drawn = rng.integers(0, len(items), len(items))
            for j, matrix in enumerate(matrices):
                paired = PairedScores("", items[drawn], systems, matrix[drawn], human[drawn])
                out[b, c, j] = level_statistic(paired, level, statistic)
    return out


def audit_inputs(folder: Path) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(1)
    words = "the customer asked about a parcel and the agent promised to resend it tomorrow morning".split()
    items, judgments, labels = [], [], []
    for i in range(100):
        for j in range(14):
            length = int(rng.integers(8, 60))
            quality = rng.normal(3, 1)
            items.append({"id": f"d{i:03d}", "system": f"s{j:02d}", "dialogue": [{"speaker": "A", "text": "hello"}],
                          "candidate": " ".join(rng.choice(words, length))})
            for criterion in CRITERIA:
                judge = np.clip(round(quality + 0.01 * length + rng.normal(0, 0.6)), 1, 5)
                judgments.append({"item_id": f"d{i:03d}", "system": f"s{j:02d}", "criterion": criterion,
                                  "score": float(judge)})
                for annotator in ("a1", "a2", "a3"):
                    human = int(np.clip(round(quality + 0.005 * length + rng.normal(0, 0.7)), 1, 5))
                    labels.append((f"d{i:03d}", f"s{j:02d}", annotator, criterion, human))
    (folder / "items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    pd.DataFrame(judgments).to_csv(folder / "judge.csv", index=False)
    pd.DataFrame(labels, columns=["item_id", "system", "annotator", "criterion", "score"]).to_csv(
        folder / "audit_labels.csv", index=False)
    return folder / "judge.csv", folder / "items.jsonl", folder / "audit_labels.csv"


def audit_loop(judge_path: Path, items_path: Path, labels_path: Path, resamples: int) -> np.ndarray:
    """Judge, human and excess length slopes and system means per criterion, one resample at a time."""
    judge = pd.read_csv(judge_path)
    items = pd.read_json(items_path, lines=True).rename(columns={"id": "item_id"})
    items["words"] = items["candidate"].str.split().str.len()
    human = pd.read_csv(labels_path).groupby(["item_id", "system", "criterion"])["score"].mean().rename("human")
    table = judge.merge(items[["item_id", "system", "words"]], on=["item_id", "system"]).merge(
        human.reset_index(), on=["item_id", "system", "criterion"])
    dialogues = np.array(sorted(table["item_id"].unique()))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(resamples):
        drawn = rng.choice(dialogues, len(dialogues))
        sample = pd.concat([table[table.item_id == d].assign(copy=k) for k, d in enumerate(drawn)])
        row = []
        for _, part in sample.groupby("criterion"):
            centred = part["words"] - part.groupby("copy")["words"].transform("mean")
            z = centred / centred.std()
            slopes = [np.polyfit(z, part[column], 1)[0] for column in ("score", "human")]
            row += [*slopes, slopes[0] - slopes[1], *part.groupby("system")["score"].mean()]
        out.append(row)
    return np.array(out)


def report(name: str, fast: tuple[float, float], loop: tuple[float, float], scale: float = 1.0) -> None:
    wall, cpu = fast
    loop_wall, loop_cpu = loop[0] * scale, loop[1] * scale
    print(f"{name:<48} {wall:7.2f}s wall {cpu:7.2f}s cpu | loop {loop_wall:8.1f}s wall {loop_cpu:8.1f}s cpu"
          f"{' (extrapolated)' if scale != 1 else ''} | {loop_wall / wall:6.1f}x wall {loop_cpu / cpu:6.1f}x cpu")


def main_benchmark() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--loop-share", type=float, default=0.1,
                        help="run the slow loops on this share of the resamples and extrapolate (default 0.1)")
    args = parser.parse_args()
    from calibration.trust.select import select

    loop_resamples = max(1, int(args.resamples * args.loop_share))
    scale = args.resamples / loop_resamples
    print(f"1,400 summaries x 4 criteria, 8 judges, {args.resamples} resamples (loops: {loop_resamples}, scaled up); "
          f"{os.cpu_count()} cores, possibly shared")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        labels, judges = select_inputs(folder)
        prepared = select_matrices(labels, judges)
        _, wall, cpu = timed(select_core, prepared, "summary", "pearson", args.resamples)
        _, loop_wall, loop_cpu = timed(select_loop, labels, judges, "summary", "pearson", loop_resamples, prepared)
        report("select's bootstrap alone, summary pearson", (wall, cpu), (loop_wall, loop_cpu), scale)
        # Files parsed and checked once beforehand, so the row times the statistics alone (the loop parses once too).
        from calibration.io import load_judge_scores

        frames = {m: load_judge_scores(path, score_column=m) for m, path in judges.items()}
        human = load_human_labels(labels)
        _, wall, cpu = timed(select, human, frames, clean=True, bootstrap=args.resamples)
        _, loop_wall, loop_cpu = timed(select_loop, labels, judges, "summary", "pearson", loop_resamples)
        report("select 8 judges, summary pearson, inputs loaded", (wall, cpu), (loop_wall, loop_cpu), scale)
        for level, statistic in (("summary", "pearson"), ("item", "kendall")):
            _, wall, cpu = timed(select, labels, judges, level=level, statistic=statistic, clean=True,
                                 bootstrap=args.resamples)
            _, loop_wall, loop_cpu = timed(select_loop, labels, judges, level, statistic, loop_resamples)
            report(f"select 8 judges, {level} {statistic}, from the files", (wall, cpu), (loop_wall, loop_cpu), scale)
        try:
            from calibration.trust.audit import audit
        except ImportError:
            print("audit: calibration.trust.audit not found on this branch: merge main to time it")
            return
        judge_path, items_path, audit_labels = audit_inputs(folder)
        _, wall, cpu = timed(audit, judge_path, items_path, audit_labels, bootstrap=args.resamples)
        _, loop_wall, loop_cpu = timed(audit_loop, judge_path, items_path, audit_labels, loop_resamples)
        report("audit (no probes), with human labels", (wall, cpu), (loop_wall, loop_cpu), scale)
    print("target: under 10 s and >= 20x faster than the loop")


if __name__ == "__main__":
    main_benchmark()
