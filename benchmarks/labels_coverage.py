"""Acceptance simulation of issue 24's jury (`judge estimate --judge ...`, calibration.study.predictor): coverage
and width of the means and paired differences when several judges are one cross-fitted predictor, beside the one
judge alone (PPI++ as `judge estimate` runs it without --judge), against human-only and the oracle.

Simulated part. Per cell: S systems on N dialogues; a summary's quality is 0.8 * the dialogue's difficulty +
0.6 * its own + the system's shift (0, 0.15, 0.3, ...); humans: 3 annotators ("likert": each rounds 3.2 + 0.9 q
+ 0.7 noise to 1..5, the summary's score their mean; "gaussian": q + noise 0.5 / sqrt 3); four judges with
correlations rho, 0.8 rho, 0.5 rho and 0 to the quality (likert: each rounded to 1..5). n dialogues are labelled
uniformly at random (all their summaries). The truth is the super-population mean (a draw of 400,000). Coverage
counts rows that print an interval; `mean` is over every system (means) or pair (differences) and repetition,
`min` the worst system or pair. Widths are averages over repetitions, as ratios:
  jury/h   the jury's interval over human-only from the same labels
  one/h    the first judge alone (PPI++ as now) over human-only
  oracle/h sqrt(1 - R^2 (1 - n/N)): the best linear combination of the judges and its lambda known in advance
           (R^2 within systems, from the large draw)
  jury/or  jury/h over oracle/h
  one/or   one/h over the first judge's own oracle, sqrt(1 - rho1^2 (1 - n/N)), rho1 its within-system correlation
           with the human score (the differences': of the paired differences): the acceptance's oracle for the
           judge alone, its lambda known
  eff/worth  the jury's mean printed effective_labels over what its estimates were worth in human-only labels
           (n x the human-only estimates' mean squared error / the jury's, over the repetitions): above 1 overstates

Real part (--real): DialSummEval (../shared/data/dialsummeval or $JUDGE_SHARED_DATA): 100 dialogues x 14 systems,
4 criteria, the mean of 3 annotators; the jury is all 32 metrics of metric_scores.csv, the single judge QuestEval.
n dialogues redrawn at random; truth = the mean over the 100 dialogues; oracle = the within-system correlation
of the human score with the jury's least-squares fit on all 1,400 summaries (optimistic: fitted on every label).

    nice -n 10 python benchmarks/labels_coverage.py            # the table of the report (about 10 minutes)
    nice -n 10 python benchmarks/labels_coverage.py --real     # DialSummEval
    nice -n 10 python benchmarks/labels_coverage.py --real-scale   # the bounded-scale check on 3 real releases
    nice -n 10 python benchmarks/labels_coverage.py --decoda   # DECODA's LLM judge per system
    nice -n 10 python benchmarks/labels_coverage.py --rare     # 8-18% badly wrong, a bimodal scale: the scale's check
    python benchmarks/labels_coverage.py --quick               # a few cells
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.study.bounded import bounded_scale  # noqa: E402
from calibration.study.ppi import effective_labels, ppi_mean  # noqa: E402
from calibration.study.predictor import cross_fitted_prediction, cross_prediction_lambda, fit_leverage  # noqa: E402

WEIGHTS = np.array([1.0, 0.8, 0.5, 0.0])  # each judge's correlation, as a share of rho
CHUNK = 50  # repetitions per call (memory)


def draw(rng, shape, kind: str, rho: float, systems: int):
    """(human (..., D, S), judges (..., D, S, k)) of one study."""
    dialogue = rng.standard_normal(shape + (1,))
    quality = 0.8 * dialogue + 0.6 * rng.standard_normal(shape + (systems,)) + 0.15 * np.arange(systems)
    latent = quality / 1.0  # sd of quality within a system: 1.0
    r = rho * WEIGHTS
    noise = rng.standard_normal(shape + (systems, len(WEIGHTS)))
    judges = r * (latent[..., None] - 0.15 * np.arange(systems)[:, None]) + np.sqrt(1 - r * r) * noise
    judges = judges + 0.15 * np.arange(systems)[:, None]
    if kind == "gaussian":
        human = quality + 0.5 * rng.standard_normal((3,) + shape + (systems,)).mean(0)
        return human, judges
    ratings = np.clip(np.rint(3.2 + 0.9 * quality + 0.7 * rng.standard_normal((3,) + shape + (systems,))), 1, 5)
    return ratings.mean(0), np.clip(np.rint(3.0 + 1.1 * judges), 1, 5)


def oracle_r2(human, judges, first_only: bool = False):
    """Within-system R^2 of the best linear combination of the judges (`first_only`: of the first judge alone), for
    levels and for paired differences."""
    if first_only:
        judges = judges[..., :1]

    def r2(y, x):
        y = y - y.mean(0)
        x = x - x.mean(0)
        beta = np.linalg.lstsq(x, y, rcond=None)[0]
        return 1.0 - np.var(y - x @ beta) / np.var(y)

    levels = np.mean([r2(human[:, s], judges[:, s]) for s in range(human.shape[1])])
    pairs = list(combinations(range(human.shape[1]), 2))
    differences = np.mean([r2(human[:, a] - human[:, b], judges[:, a] - judges[:, b]) for a, b in pairs])
    return levels, differences


def intervals(human, judge, combined: bool, bounds=None, leverage=None):
    """ppi_mean as `judge estimate` runs it: the judge's PPI++ lambda, or the jury's m / (n + m) (`leverage`: its
    fit_leverage per row); `bounds`: the scale (Likert), for the bounded-scale check."""
    if combined:
        return ppi_mean(human, judge, lam=cross_prediction_lambda(human, judge), bounds=bounds, fitted_judge=True,
                        fit_leverage=leverage)
    return ppi_mean(human, judge, bounds=bounds, shared=True)


def measure(human, judge, truth, combined: bool, bounds=None, leverage=None) -> dict:
    result = intervals(human, judge, combined, bounds, leverage)
    shown = np.isfinite(result.ci_low)
    covered = (result.ci_low <= truth) & (truth <= result.ci_high)
    axes = tuple(range(covered.ndim - 1))  # all but the system / pair axis
    width = np.where(shown, result.ci_high - result.ci_low, np.nan)
    human_width = np.where(shown, result.human_only_ci_high - result.human_only_ci_low, np.nan)
    n = result.n_labelled
    return {"covered": (covered & shown).sum(axis=axes), "shown": shown.sum(axis=axes),
            "width": np.nanmean(width), "human_width": np.nanmean(human_width),
            # what the estimate is worth in labels: printed (effective_labels) and true (n x the human-only
            # estimate's squared error over the estimate's, summed over the repetitions)
            "effective": np.nansum(np.where(shown, effective_labels(result), np.nan)), "rows": int(shown.sum()),
            "error2": ((result.estimate - truth) ** 2).sum(axis=axes),
            "human_error2": (n * (result.human_only - truth) ** 2).sum(axis=axes)}


def combine(parts: list[dict]) -> dict:
    """Coverage over every row, the worst system's or pair's, and the width ratio of the averages."""
    covered, shown = sum(p["covered"] for p in parts), sum(p["shown"] for p in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_row = np.where(shown > 0, covered / shown, np.nan)
    return {"coverage": covered.sum() / shown.sum() if shown.sum() else np.nan, "shown": int(shown.sum()),
            "worst": np.nanmin(per_row) if np.isfinite(per_row).any() else np.nan,
            "ratio": np.mean([p["width"] for p in parts]) / np.mean([p["human_width"] for p in parts]),
            "effective": effective_over_worth(parts), "effective_se": jackknife(parts, effective_over_worth)}


def effective_over_worth(parts: list[dict]) -> float:
    """Printed effective_labels (mean) over what the estimates were worth (n var(human-only) / var(estimate))."""
    return (sum(p["effective"] for p in parts) / sum(p["rows"] for p in parts)) \
        / np.mean(sum(p["human_error2"] for p in parts) / sum(p["error2"] for p in parts))


def jackknife(parts: list[dict], statistic) -> float:
    """Monte Carlo standard error of a pooled statistic, leaving out one chunk of repetitions at a time."""
    k = len(parts)
    if k < 2:
        return float("nan")
    values = np.array([statistic(parts[:i] + parts[i + 1:]) for i in range(k)])
    return float(np.sqrt((k - 1) / k * np.sum((values - values.mean()) ** 2)))


def run_cell(kind: str, rho: float, n: int, systems: int, n_judged: int, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    big_h, big_j = draw(np.random.default_rng(12345), (400_000 // systems,), kind, rho, systems)
    truth = big_h.mean(0)
    r2_level, r2_difference = oracle_r2(big_h, big_j) if rho > 0 else (0.0, 0.0)
    one_level, one_difference = oracle_r2(big_h, big_j, first_only=True) if rho > 0 else (0.0, 0.0)
    a, b = np.array(list(combinations(range(systems), 2))).T
    parts = {key: [] for key in ("jury_mean", "one_mean", "jury_diff", "one_diff")}
    for start in range(0, reps, CHUNK):
        count = min(CHUNK, reps - start)
        human, judges = draw(rng, (count, n_judged), kind, rho, systems)
        labelled = rng.random((count, n_judged)).argsort(axis=1) < n
        y = np.where(labelled[..., None], human, np.nan)
        jury, fit = cross_fitted_prediction(judges, y, with_fit=True)
        contrast, contrast_fit = cross_fitted_prediction(judges, y, contrasts=True, with_fit=True)  # of differences
        move = lambda m: np.moveaxis(m, -1, -2)  # noqa: E731  (..., D, S) -> (..., S, D)
        scale = (1, 5) if kind == "likert" else None  # as `judge estimate` checks means (differences: never)
        parts["jury_mean"].append(measure(move(y), move(jury), truth, True, scale, fit_leverage(*fit)))
        parts["one_mean"].append(measure(move(y), move(judges[..., 0]), truth, False, scale))
        dy, dt = move(y[..., a] - y[..., b]), truth[a] - truth[b]
        parts["jury_diff"].append(measure(dy, move(contrast[..., a] - contrast[..., b]), dt, True,
                                          leverage=fit_leverage(*contrast_fit, a, b)))
        parts["one_diff"].append(measure(dy, move(judges[..., a, 0] - judges[..., b, 0]), dt, False))
    out = {key: combine(value) for key, value in parts.items()}
    share = 1.0 - n / n_judged
    out["oracle_mean"], out["oracle_diff"] = np.sqrt(1 - r2_level * share), np.sqrt(1 - r2_difference * share)
    out["own_mean"], out["own_diff"] = np.sqrt(1 - one_level * share), np.sqrt(1 - one_difference * share)
    return out


def cell_line(kind, rho, n, systems, n_judged, out, reps) -> str:
    se = lambda p: np.sqrt(p * (1 - p) / max(out["jury_mean"]["shown"], 1))  # noqa: E731  (of `cover`)
    parts = [f"{kind:8s} {rho:3.1f} {n_judged:4d} {systems:2d} {n:3d}"]
    for what in ("mean", "diff"):
        jury, one, oracle = out[f"jury_{what}"], out[f"one_{what}"], out[f"oracle_{what}"]
        parts.append(f"{jury['coverage']:.3f} {jury['worst']:.3f} {one['coverage']:.3f} "
                     f"{jury['ratio']:.3f} {one['ratio']:.3f} {oracle:.3f} {jury['ratio'] / oracle:.3f} "
                     f"{one['ratio'] / out[f'own_{what}']:.3f} "
                     f"{jury['effective']:.2f}+-{jury['effective_se']:.2f}")
    return " | ".join(parts) + f"   (MC se of a coverage ~{se(0.95):.3f}, {reps} reps)"


HEADER = ("kind     rho    N  S   n | means: cover worst one_cov jury/h one/h oracle/h jury/or one/or eff/worth "
          "| differences: cover worst one_cov jury/h one/h oracle/h jury/or one/or eff/worth")


# -- DialSummEval ---------------------------------------------------------------------------------------------------


def shared_data() -> Path:
    return Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def missing_data(*folders: str) -> str:
    """Why a real-data table cannot run ("" when it can): the first release of `folders` absent from the shared
    data, with where it was looked for."""
    for folder in folders:
        if not (shared_data() / folder / "annotations.csv").is_file():
            return f"skipped: {folder} not found at {shared_data() / folder} (set JUDGE_SHARED_DATA)"
    return ""


def dialsummeval():
    """(criteria, systems, human (C, D, S), metrics (D, S, 32), metric names) from the shared data."""
    import pandas as pd

    folder = shared_data() / "dialsummeval"
    labels = pd.read_csv(folder / "annotations.csv")
    metrics = pd.read_csv(folder / "metric_scores.csv")
    means = labels.groupby(["criterion", "item_id", "system"])["score"].mean()
    items, systems = sorted(metrics["item_id"].unique()), sorted(metrics["system"].unique())
    names = [c for c in metrics.columns if c not in ("dataset", "item_id", "system")]
    wide = metrics.set_index(["item_id", "system"])[names]
    cube = np.stack([wide[name].unstack("system").reindex(index=items, columns=systems).to_numpy(float)
                     for name in names], axis=-1)
    criteria = sorted(labels["criterion"].unique())
    human = np.stack([means[c].unstack("system").reindex(index=items, columns=systems).to_numpy(float)
                      for c in criteria])
    return criteria, systems, human, cube, names


def real(reps: int, seed: int, sizes=(10, 20, 50)) -> None:
    """DialSummEval with its 32 metrics as the jury, as `judge estimate` runs it (the scale 1-5 known, so the
    bounded-scale check on), beside the same intervals without the scale (the t alone) and the labels' own t
    interval (human-only): a system whose t undercovers for the jury and for its labels alone alike undercovers
    for its labels' shape (skewed toward the top at 10 labels), not for the jury."""
    criteria, systems, human, metrics, names = dialsummeval()
    # QuestEval first, as `judge estimate --judgments questeval --judge ...` would give them: the jury may take
    # it alone (predictor.candidate_inverses).
    order = [names.index("questeval")] + [i for i, name in enumerate(names) if name != "questeval"]
    metrics, names, single = metrics[..., order], [names[i] for i in order], 0
    d = human.shape[1]
    print(f"DialSummEval: {d} dialogues x {len(systems)} systems, jury of {len(names)} metrics, single judge "
          f"{names[single]}; {reps} redraws of the labelled dialogues per n (MC se of one system's coverage "
          f"~{np.sqrt(0.95 * 0.05 / reps):.3f})")
    print("criterion     n | jury, scale known: cover worst_sys tripped jury/h oracle/h jury/or | t alone: cover "
          "worst_sys | labels' t: worst_sys | questeval: cover one/h | systems whose jury/h > 1")
    for c, criterion in enumerate(criteria):
        y_all = human[c]
        truth = y_all.mean(0)
        # Oracle: the jury's within-system least-squares fit on all 1,400 summaries.
        x = np.nan_to_num(metrics - np.nanmean(metrics, axis=0, keepdims=True))
        x = x / np.maximum(x.reshape(-1, x.shape[-1]).std(0), 1e-12)
        yc = y_all - y_all.mean(0)
        beta = np.linalg.lstsq(x.reshape(-1, x.shape[-1]), yc.reshape(-1), rcond=None)[0]
        fit = x @ beta
        rho = np.array([np.corrcoef(fit[:, s], y_all[:, s])[0, 1] for s in range(len(systems))])
        for n in sizes:
            rng = np.random.default_rng(seed + n)
            hits = {key: np.zeros(len(systems)) for key in ("scale", "t", "labels")}
            shown = {key: np.zeros(len(systems)) for key in hits}
            widths, human_widths, tripped, one_cov, one_widths, one_human = [], [], 0, [], [], []
            for start in range(0, reps, 10):
                count = min(10, reps - start)
                labelled = rng.random((count, d)).argsort(axis=1) < n
                y = np.where(labelled[..., None], y_all, np.nan)
                jury, jury_fit = cross_fitted_prediction(np.broadcast_to(metrics, (count,) + metrics.shape), y,
                                                         with_fit=True)
                yy, jj = np.moveaxis(y, -1, -2), np.moveaxis(jury, -1, -2)
                plain = intervals(yy, jj, True, leverage=fit_leverage(*jury_fit))
                r = bounded_scale(plain, yy, jj, (1, 5))
                for key, low, high in (("scale", r.ci_low, r.ci_high), ("t", plain.ci_low, plain.ci_high),
                                       ("labels", plain.human_only_ci_low, plain.human_only_ci_high)):
                    ok = np.isfinite(low)
                    hits[key] += ((low <= truth) & (truth <= high) & ok).sum(0)
                    shown[key] += ok.sum(0)
                ok = np.isfinite(r.ci_low)
                tripped += int((r.no_interval == "bounded").sum())
                widths.append(np.where(ok, r.ci_high - r.ci_low, np.nan))
                human_widths.append(np.where(ok, r.human_only_ci_high - r.human_only_ci_low, np.nan))
                one = intervals(yy, np.broadcast_to(metrics[..., single].T, yy.shape), False, bounds=(1, 5))
                one_cov.append((one.ci_low <= truth) & (truth <= one.ci_high))
                one_widths.append(one.ci_high - one.ci_low)
                one_human.append(one.human_only_ci_high - one.human_only_ci_low)
            widths, human_widths = np.concatenate(widths), np.concatenate(human_widths)
            ratio_sys = np.nanmean(widths, 0) / np.nanmean(human_widths, 0)
            oracle_sys = np.sqrt(1 - rho ** 2 * (1 - n / d))
            one_ratio = np.nanmean(np.concatenate(one_widths)) / np.nanmean(np.concatenate(one_human))
            cover = {key: hits[key].sum() / shown[key].sum() for key in hits}
            worst = {key: np.min(hits[key] / np.maximum(shown[key], 1)) for key in hits}
            print(f"{criterion:12s} {n:3d} | {cover['scale']:.3f} {worst['scale']:.3f} "
                  f"{tripped / shown['scale'].sum():.2f} {np.nanmean(widths) / np.nanmean(human_widths):.3f} "
                  f"{oracle_sys.mean():.3f} {np.mean(ratio_sys / oracle_sys):.3f} | {cover['t']:.3f} "
                  f"{worst['t']:.3f} | {worst['labels']:.3f} | {np.nanmean(np.concatenate(one_cov)):.3f} "
                  f"{one_ratio:.3f} | {int((ratio_sys > 1).sum())} of {len(systems)}", flush=True)
            if n == sizes[0]:
                print(f"   per system at n={n}, jury (scale known) / t alone / labels' t: "
                      + " ".join(f"{s[:10]}={a:.3f}/{b:.3f}/{h:.3f}" for s, a, b, h in
                                 zip(systems, *(hits[key] / np.maximum(shown[key], 1) for key in hits))))
            if n == sizes[-1]:
                print(f"   per system jury/or at n={n}: " + " ".join(f"{s[:10]}={v:.2f}" for s, v in
                                                                        zip(systems, ratio_sys / oracle_sys)))


# -- rare failures and a bimodal scale: where the t interval fails, and the bounded-scale interval -----------------


def rare_failures(rng, shape, share):
    """Summaries mostly fine (3 annotators around 4.5) and a share badly wrong (around 1.5); the judge catches half
    of the failures."""
    bad = rng.random(shape) < share
    fine = np.clip(np.rint(4.5 + 0.5 * rng.standard_normal((3,) + shape)), 1, 5).mean(0)
    poor = np.clip(np.rint(1.5 + 0.5 * rng.standard_normal((3,) + shape)), 1, 5).mean(0)
    caught = bad & (rng.random(shape) < 0.5)
    judge = np.clip(np.rint(np.where(caught, 2.0, 4.4) + 0.6 * rng.standard_normal(shape)), 1, 5)
    return np.where(bad, poor, fine), judge, bad


def bimodal(rng, shape):
    """One annotator: 54% ones, 26% fives, the rest 2-4; a judge correlated about 0.5. `bad`: the fives (the
    minority mode)."""
    u = rng.random(shape)
    human = np.where(u < 0.54, 1.0, np.where(u < 0.80, 5.0, rng.integers(2, 5, shape).astype(float)))
    judge = np.clip(np.rint(3 + 0.3 * (human - 2.4) + 0.95 * rng.standard_normal(shape)), 1, 5)
    return human, judge, human == 5.0


def rare(reps: int, seed: int) -> None:
    """Coverage of `judge estimate`'s interval with the scale known (1-5: the bounded-scale check on) and without
    (the t interval alone), split by whether the labels hold a failure (bimodal: a five); the share of studies
    whose row became the betting interval, and the width against the t interval. 100 judged dialogues, two systems
    (each a row; they share lambda below 20 labels)."""
    rng = np.random.default_rng(seed)
    shapes = {"rare 8%": lambda r, s: rare_failures(r, s, 0.08), "rare 18%": lambda r, s: rare_failures(r, s, 0.18),
              "bimodal": bimodal}
    print("shape      n | P(none labelled) | cover: scale known [MC 95%]  t alone | given none: known t | "
          "betting rows | width known/t")
    for name, population in shapes.items():
        truth = population(np.random.default_rng(99), (2_000_000,))[0].mean()
        for n in (3, 4, 6, 10, 20, 50):
            keep = {key: [] for key in ("none", "known", "t", "bounded", "shown", "width", "t_width")}
            for _ in range(0, reps, 500):
                # Two systems of this shape on the same labelled dialogues: they share lambda as `judge estimate`
                # tunes it below 20 labels.
                y, f, bad = population(rng, (500, 2, 100))
                labelled = (rng.random((500, 100)).argsort(1) < n)[:, None, :]
                known = ppi_mean(np.where(labelled, y, np.nan), f, bounds=(1, 5), shared=True)
                alone = ppi_mean(np.where(labelled, y, np.nan), f, shared=True)
                keep["none"].append((bad & labelled).sum(-1) == 0)
                keep["shown"].append(np.isfinite(known.ci_low))
                keep["known"].append((known.ci_low <= truth) & (truth <= known.ci_high))
                keep["t"].append((alone.ci_low <= truth) & (truth <= alone.ci_high))
                keep["bounded"].append(known.no_interval == "bounded")
                keep["width"].append(known.ci_high - known.ci_low)
                keep["t_width"].append(alone.ci_high - alone.ci_low)
            none, known, t, bounded, shown, width, t_width = (np.concatenate(keep[key]) for key in keep)
            cover, count = known[shown].mean(), shown.sum()
            half = 1.96 * np.sqrt(cover * (1 - cover) / count)
            given = lambda hit: hit[shown & none].mean() if (shown & none).any() else float("nan")  # noqa: E731
            print(f"{name:9s} {n:3d} | {none.mean():.3f} | {cover:.3f} [{cover - half:.3f}, {cover + half:.3f}] "
                  f"{t[shown].mean():.3f} | {given(known):.3f} {given(t):.3f} | {bounded[shown].mean():.3f} | "
                  f"{np.mean(width[shown]) / np.mean(t_width[shown]):.3f}", flush=True)


def decoda(reps: int, seed: int) -> None:
    """DECODA (20 dialogues x 6 systems, the LLM judge of the release, the mean of 3 annotators): coverage of
    `judge estimate`'s interval (scale 1-5 known) per system and its width against human-only and the oracle,
    sqrt(1 - rho^2 (1 - n/N)) with rho the system's judge-human correlation over the 20. n dialogues redrawn at
    random; truth = the mean over the 20. Sub-issues left out: humans rated them on fewer dialogues than the judge."""
    import pandas as pd

    folder = shared_data() / "decoda_llm_sum_guidelines"
    labels = pd.read_csv(folder / "annotations.csv")
    labels = labels[pd.to_numeric(labels["score"], errors="coerce").notna()].astype({"score": float})
    judged = pd.read_csv(folder / "judge_scores.csv")
    rng = np.random.default_rng(seed)
    print("criterion     n | cover (worst system) | width/h  oracle/h  width/oracle per system")
    for criterion in ("faithfulness", "main_issues", "resolution"):
        human = labels[labels["criterion"] == criterion].groupby(["item_id", "system"])["score"].mean().unstack()
        judge = judged[judged["criterion"] == criterion].groupby(["item_id", "system"])["score"].mean().unstack()
        human, judge = human.align(judge, join="inner")
        keep = human.notna().all(axis=1) & judge.notna().all(axis=1)
        y, f = human[keep].to_numpy(float), judge[keep].to_numpy(float)
        d = len(y)
        rho = np.array([np.corrcoef(y[:, s], f[:, s])[0, 1] if f[:, s].std() > 0 else 0.0
                        for s in range(y.shape[1])])
        for n in (5, 10, 15):
            mask = rng.random((reps, d)).argsort(1) < n
            hy = np.moveaxis(np.where(mask[..., None], y[None], np.nan), 1, 2)
            r = ppi_mean(hy, np.broadcast_to(f.T, hy.shape), bounds=(1, 5), shared=True)
            shown = np.isfinite(r.ci_low)
            hit = ((r.ci_low <= y.mean(0)) & (y.mean(0) <= r.ci_high) & shown).sum(0) / np.maximum(shown.sum(0), 1)
            ratio = np.nanmean(np.where(shown, r.ci_high - r.ci_low, np.nan), 0) / \
                np.nanmean(np.where(shown, r.human_only_ci_high - r.human_only_ci_low, np.nan), 0)
            oracle = np.sqrt(1 - np.nan_to_num(rho) ** 2 * (1 - n / d))
            print(f"{criterion:12s} {n:3d} | {(hit * shown.sum(0)).sum() / shown.sum():.3f} ({hit.min():.3f}) | "
                  f"{np.mean(ratio):.3f} {np.mean(oracle):.3f} | "
                  + " ".join(f"{name[:12]}={v:.2f}" for name, v in zip(human.columns, ratio / oracle)), flush=True)


def real_scale(reps: int, seed: int) -> None:
    """The bounded-scale check on real labels: each system's mean of each criterion of SummEval, DialSummEval and
    DECODA (the mean of the annotators per summary), n dialogues redrawn at random, the labels alone (the check
    looks at nothing else); truth = the mean over the release's dialogues. Coverage of the t interval and of what
    `judge estimate` prints with the 1-5 scale known, the share of rows the check trips, the width ratio."""
    import pandas as pd

    releases = {"summeval": "summeval", "dialsummeval": "dialsummeval", "decoda": "decoda_llm_sum_guidelines"}
    rng = np.random.default_rng(seed)
    print("release      criterion     n | tripped | cover: t  scale known | width known/t")
    for name, folder in releases.items():
        labels = pd.read_csv(shared_data() / folder / "annotations.csv")
        labels = labels[pd.to_numeric(labels["score"], errors="coerce").notna()].astype({"score": float})
        for criterion, part in labels.groupby("criterion"):
            wide = part.groupby(["item_id", "system"])["score"].mean().unstack("system").dropna()
            y = wide.to_numpy(float)
            if len(y) < 15:
                continue
            truth = y.mean(0)
            for n in (3, 6, 10, 20):
                if n > len(y) // 2:
                    continue
                mask = rng.random((reps, len(y))).argsort(1) < n
                human = np.moveaxis(np.where(mask[..., None], y[None], np.nan), 1, 2)  # (reps, S, D)
                judge = np.zeros_like(human)  # a constant judge: the labels alone
                plain, known = ppi_mean(human, judge), ppi_mean(human, judge, bounds=(1, 5))
                shown = np.isfinite(plain.ci_low)
                cover = lambda r: ((r.ci_low <= truth) & (truth <= r.ci_high))[shown].mean()  # noqa: E731
                ratio = np.mean((known.ci_high - known.ci_low)[shown]) / np.mean((plain.ci_high - plain.ci_low)[shown])
                print(f"{name:12s} {criterion[:12]:12s} {n:3d} | "
                      f"{np.mean(known.no_interval[shown] == 'bounded'):.2f} | {cover(plain):.3f} {cover(known):.3f} "
                      f"| {ratio:.3f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few cells")
    parser.add_argument("--real", action="store_true", help="DialSummEval instead of the simulation")
    parser.add_argument("--rare", action="store_true",
                        help="rare failures and a bimodal scale: the bounded-scale check against the t")
    parser.add_argument("--real-scale", action="store_true", help="the bounded-scale check on three real releases")
    parser.add_argument("--decoda", action="store_true", help="DECODA's LLM judge: coverage, width to the oracle")
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cell", action="append", default=[], metavar="KIND,RHO,S,N",
                        help="only these cells (repeatable), e.g. likert,0.3,2,20: re-run a cell with more studies")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # The other tables, each with its default number of repetitions; the first flag given wins.
    for chosen, table, default, folders in (
            (args.rare, rare, 2000, ()), (args.decoda, decoda, 1000, ("decoda_llm_sum_guidelines",)),
            (args.real_scale, real_scale, 1000, ("summeval", "dialsummeval", "decoda_llm_sum_guidelines")),
            (args.real, real, 200, ("dialsummeval",))):
        if chosen:
            if missing_data(*folders):
                print(missing_data(*folders))
                return 0
            table(args.repetitions or default, args.seed)
            print(f"({time.perf_counter() - started:.0f}s)")
            return 0
    reps = args.repetitions or (200 if args.quick else 400)
    if args.cell:
        print(HEADER)
        for text in args.cell:
            kind, rho, systems, n = text.split(",")
            out = run_cell(kind, float(rho), int(n), int(systems), 100, reps, args.seed + 7919 * int(n))
            print(cell_line(kind, float(rho), int(n), int(systems), 100, out, reps), flush=True)
        print(f"({time.perf_counter() - started:.0f}s)")
        return 0
    grid = ([("likert", 0.0, 2), ("likert", 0.7, 6), ("gaussian", 0.5, 2)] if args.quick else
            [(kind, rho, systems) for kind in ("likert", "gaussian") for rho in (0.0, 0.3, 0.5, 0.7, 0.9)
             for systems in (2, 6)])
    sizes = (6, 10, 20) if args.quick else (3, 4, 6, 10, 20, 50)
    print(HEADER)
    for index, (kind, rho, systems) in enumerate(grid):
        for n in sizes:
            out = run_cell(kind, rho, n, systems, 100, reps, args.seed + 1000 * index + n)
            print(cell_line(kind, rho, n, systems, 100, out, reps), flush=True)
    print(f"({time.perf_counter() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
