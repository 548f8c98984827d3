"""`judge drift`: is the judge that scored the anchor set today the same judge as before?

The same (item, system, criterion) judgments of two runs are paired. Per criterion: the mean shift (new - reference,
of the scores: with `--samples k` each is the mean of k samples) with a t interval clustered by dialogue, the share
of verdicts that changed, weighted kappa between the runs (labels: Cohen's kappa and the Stuart-Maxwell test of marginal
homogeneity), and with human labels the change in the judge's agreement with them.

The changed share and the re-ask noise are in one unit, a single sample: when both runs kept their `samples`, the
changed share of a judgment is the share of (reference sample, new sample) pairs that differ, and the re-ask noise
is the share of pairs of samples within the reference run that differ (the new run's only when the reference has
no re-asks: a noisier new judge must not widen its own allowance). An unchanged judge has the same expected share
in both, whatever k. A pair judged in both orders holds the forward samples, then the swapped ones: samples are
compared within one order only (a position flip is not a re-ask). Without samples, the verdicts are compared.

A verdict per criterion:

- no drift: the shift is shown equivalent to zero within +-margin (TOST: the 90% interval inside the margin; labels:
  Stuart-Maxwell does not reject at 5%), and the share of changed verdicts is shown no larger than the re-ask noise
  plus --share-margin (its one-sided 95% bound);
- drift: otherwise, when the shift's 97.5% CI excludes zero, or the changed share's 97.5% lower bound exceeds the
  re-ask noise, or (labels) Stuart-Maxwell rejects at 2.5%: a judge that changes 30% of verdicts with its mean in
  place has drifted. Two rules at 2.5% each (Bonferroni): an unchanged judge is called drift in at most 5% of runs;
- inconclusive: neither shown; the number of anchor dialogues that would settle it is printed.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..cells import spelled_as_judged
from ..errors import CalibrationError
from ..options import criteria_option, resamples_option, scale_option, seed_option
from ..result import Result
from ..stats import pearson, percentile_interval, resample_counts, widened_share

DRIFT_COLUMNS = ["criterion", "kind", "n", "n_dialogues", "mean_shift", "ci_low", "ci_high", "tost_low", "tost_high",
                 "changed_share", "changed_ci_low", "changed_ci_high", "reask_noise", "kappa", "stuart_maxwell_p",
                 "human_r_reference", "human_r_new", "human_r_change", "human_ci_low", "human_ci_high", "verdict",
                 "dialogues_needed", "note"]
KEY = ["item_id", "system", "criterion"]
PROVENANCE_FIELDS = ("model", "system_fingerprint", "engine", "model_digest")
# Fewer anchor dialogues give no interval and no verdict but "inconclusive": at 5 dialogues a sampled judge in block
# mode was called DRIFT in 7% of runs and its shift interval covered 0.925 (tests/drift_sim.py); from 10 on, <= 5%.
MIN_DIALOGUES = 10
# z quantiles for the sample size an inconclusive verdict needs: one-sided 5% test, 80% power.
_Z_ALPHA, _Z_POWER = 1.6449, 0.8416


@dataclass
class DriftResult(Result):
    """What `judge drift` found: one row per criterion, what changed in how the runs were produced, warnings."""

    verb: ClassVar[str] = "drift"

    drift: pd.DataFrame
    provenance: pd.DataFrame
    margin: float
    share_margin: float
    n_resamples: int
    warnings: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> bool:
        """True unless every criterion shows no drift (the CLI exits 1 then)."""
        return bool((self.drift["verdict"] != "no drift").any())

    def files(self) -> dict[str, str]:
        return {"drift.csv": self.drift.to_csv(index=False), "provenance.csv": self.provenance.to_csv(index=False)}

    def report_html(self) -> str:
        return drift_section(self)

    def text(self) -> str:
        notes: list[str] = []
        lines = [f"Drift per criterion (new - reference, paired; 95% t interval clustered by dialogue; no drift = "
                 f"shift within +-{self.margin:g} by TOST and changed verdicts within re-ask noise + "
                 f"{self.share_margin:g}; drift = the shift or the changed share beyond the noise, each at 2.5%, "
                 f"5% together; {self.n_resamples} bootstrap resamples for the shares)"]
        for row in self.drift.itertuples():
            shift = ("" if not np.isfinite(row.mean_shift) else
                     f"mean shift {row.mean_shift:+.3f} {_interval(row.ci_low, row.ci_high)}, ")
            human = ("" if not np.isfinite(row.human_r_change) else
                     f", agreement with humans {row.human_r_change:+.3f} "
                     f"{_interval(row.human_ci_low, row.human_ci_high)}")
            kappa = "-" if not np.isfinite(row.kappa) else f"{row.kappa:.2f}"
            if row.note:
                notes.append(f"{row.criterion}: {row.note}")
            lines.append(f"{row.criterion}: {row.verdict.upper()}: {shift}{100 * row.changed_share:.1f}% of "
                         f"{row.n} verdicts changed (re-ask noise {100 * row.reask_noise:.1f}%), kappa {kappa}"
                         f"{human}" + (f" [{len(notes)}]" if row.note else ""))
        changed = self.provenance[self.provenance["changed"]]
        if changed.empty:
            lines.append("How the judgments were produced: nothing recorded changed (fingerprints and served "
                         "provenance the same, where recorded).")
        else:
            lines.append("How the judgments were produced, what changed:")
            for row in changed.itertuples():
                lines.append(f"  {row.field}: {row.reference} -> {row.new}")
        from .report import footnoted

        return "\n".join(footnoted(lines, notes)) + "\n"

    def __str__(self) -> str:
        return self.text()


def _interval(low: float, high: float) -> str:
    """Below MIN_DIALOGUES anchor dialogues no interval is printed (the row's note says why)."""
    return f"[{low:+.3f}, {high:+.3f}]" if np.isfinite(low) else "[no interval]"


# -- reading ------------------------------------------------------------------------------------------------------


def _run(source, what: str, failure_value: float | None = None) -> tuple[pd.DataFrame, dict, str]:
    """The run's judgments table (judge/table.py) plus `both_orders`, its production record, and where it came
    from. A CSV of scores has no samples, fingerprints or provenance."""
    from ..io import read_judge_scores

    frame, where = read_judge_scores(source, failure_value=failure_value)
    for name in ("samples", "fingerprint", "served", "swapped"):
        if name not in frame.columns:
            frame[name] = None
    cached = frame["from_cache"] if "from_cache" in frame.columns else pd.Series(False, index=frame.index)
    record: dict[str, set] = {name: set() for name in ("fingerprint", *PROVENANCE_FIELDS)}
    for fingerprint, served in zip(frame["fingerprint"], frame["served"]):
        if isinstance(fingerprint, dict) and fingerprint:
            record["fingerprint"].add(hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12])
        for name in PROVENANCE_FIELDS:
            value = (served or {}).get(name) if isinstance(served, dict) else None
            if value:
                record[name].add(str(value))
    frame = frame.assign(
        samples=[list(v) if isinstance(v, (list, tuple, np.ndarray)) and len(v) else None for v in frame["samples"]],
        both_orders=[isinstance(v, str) and bool(v) for v in frame["swapped"]],
        from_cache=[isinstance(v, (bool, np.bool_)) and bool(v) for v in cached])
    if frame.empty:
        raise CalibrationError(f"{where}: no judgments in the {what}")
    return frame, record, str(where)


def _verdict_value(row) -> object:
    return row.score if row.status == "ok" else (row.label if row.status == "label" else None)


def _comparable(value) -> str:
    """A sample or verdict as text that compares equal when the verdicts are: 3, 3.0 and "3" alike."""
    if isinstance(value, (bool, np.bool_)):
        return str(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        try:
            return repr(float(value))
        except ValueError:
            return value
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)


def _could_be_one_sample(value) -> bool:
    """A verdict one answer could give: a label, or a whole number of points (a mean of samples mostly is not)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return True
    return not isinstance(value, (int, float, np.integer, np.floating)) or float(value).is_integer()


def _orders(samples, both_orders: bool) -> dict[str, list[str]]:
    """A judgment's samples by the order they were asked in: re-asks of one prompt. A pair judged in both orders
    holds the forward samples, then the swapped ones (judge.judging); anything else is one prompt."""
    if not isinstance(samples, (list, tuple, np.ndarray)):
        return {}
    values = [_comparable(s) for s in samples]
    if both_orders and len(values) >= 2:
        half = len(values) // 2
        return {"forward": values[:half], "swapped": values[half:]}
    return {"forward": values} if values else {}


def _within(groups: dict[str, list[str]]) -> tuple[float, float]:
    """(pairs of re-asks that disagree, pairs) of one judgment, within each order."""
    disagree = pairs = 0.0
    for values in groups.values():
        n = len(values)
        pairs += n * (n - 1) / 2
        disagree += n * (n - 1) / 2 - sum(c * (c - 1) / 2 for c in Counter(values).values())
    return disagree, pairs


def _across(reference: dict[str, list[str]], new: dict[str, list[str]]) -> tuple[float, float]:
    """(pairs of a reference sample and a new sample that disagree, pairs), within each order."""
    disagree = pairs = 0.0
    for order in reference.keys() & new.keys():
        a, b = Counter(reference[order]), Counter(new[order])
        both = len(reference[order]) * len(new[order])
        pairs += both
        disagree += both - sum(count * b[value] for value, count in a.items())
    return disagree, pairs


def _provenance(reference: dict, new: dict) -> pd.DataFrame:
    rows = []
    for name in ("fingerprint", *PROVENANCE_FIELDS):
        old, now = reference[name], new[name]
        rows.append({"field": name if name == "fingerprint" else f"served.{name}",
                     "reference": ", ".join(sorted(old)) or "(not recorded)", "new": ", ".join(sorted(now)) or
                     "(not recorded)", "changed": bool(old and now and old != now)})
    return pd.DataFrame(rows)


# -- statistics ---------------------------------------------------------------------------------------------------


def _cluster_sums(frame: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per dialogue: the number of pairs and the sum of each column (the bootstrap resamples dialogues)."""
    grouped = frame.groupby("item_id", sort=True)
    return grouped.size().to_numpy(float), grouped[columns].sum().to_numpy(float)


def _ratio_replicates(counts: np.ndarray, sizes: np.ndarray, sums: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ sums) / (counts @ sizes)[:, None]


def _share_interval(value: float, replicates: np.ndarray, confidence: float, n: int, dialogues: int
                    ) -> tuple[float, float]:
    """The changed share's interval: the expanded percentile one, widened to Clopper-Pearson's at its effective
    number of judgments (calibration.stats.widened_share; one per dialogue when nothing or everything changed). A
    rare change (3% of a deterministic judge's verdicts) no longer gives a zero-width [0%, 0%] that "no drift"
    would lean on."""
    low, high = percentile_interval(replicates, confidence, dialogues)
    # Every resample holds judgments (a dialogue has one or more), so every replicate is a share: no NaN.
    spread = float(np.std(replicates, ddof=1))
    return widened_share(value, low, high, spread, n, dialogues, confidence, "beta")


def mean_interval(sizes: np.ndarray, sums: np.ndarray, confidence: float) -> tuple[float, float]:
    """The interval for a mean over clustered judgments (sum(sums) / sum(sizes), dialogues the clusters): the t
    interval with the cluster-robust standard error, t_{n-1} quantile over n dialogues.

    Why not the bootstrap's percentiles: an unchanged deterministic judge changes a few verdicts, and in block mode
    a dialogue's verdicts change together, so most dialogues shift by exactly 0 and a handful by a lot. The
    resampled means then pile up on a few values, and their percentiles gave a 95% interval covering the true
    shift in 0.91-0.92 of runs at 10-20 dialogues (the 90% TOST interval 0.85). The t interval does not lean on
    the shape: with nothing changed each dialogue's shift is symmetric about 0 (the two runs are exchangeable),
    where Student's t is conservative (Efron, "Student's t-test under symmetry conditions", JASA 1969)."""
    from scipy import stats

    n, total = len(sizes), float(sizes.sum())  # n >= MIN_DIALOGUES (_criterion_row)
    mean = float(sums.sum()) / total
    residual = sums - mean * sizes  # each dialogue's part of the linearised ratio
    se = math.sqrt(n / (n - 1) * float((residual ** 2).sum())) / total
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * se
    return mean - half, mean + half


# Fewer dialogues with a changed score than this leave the t interval no shape to stand on (with none it has width
# 0): the interval then also spans +-(the largest change the scale allows) x (the changed share's upper bound).
FEW_MOVED = 5


def shift_interval(sizes: np.ndarray, sums: np.ndarray, confidence: float, moved: int, span: float,
                   changed_high: float) -> tuple[float, float]:
    """The mean shift's interval: the cluster t interval (mean_interval), and where fewer than FEW_MOVED dialogues
    have a changed score, its hull with +-span x changed_high.

    Why: a judgment's shift is 0 unless its score changed, and then at most the scale's span, so the mean shift is
    at most span x the population's share of judgments whose score changed, which changed_high (that share's exact
    Clopper-Pearson bound at its effective number of judgments, calibration.stats.widened_share: one per dialogue
    when none changed) exceeds with the interval's confidence. When no or few changes are observed, this bound is
    what the data can say: a deterministic judge that changes 3% of its verdicts left every score of 10 dialogues
    unchanged in a third of runs, and the t interval, of width 0 there, covered the true shift in 0.46-0.65 of runs
    (0.75-0.92 at 20 dialogues; tests/drift_sim.py changed_rates)."""
    low, high = mean_interval(sizes, sums, confidence)
    if moved < FEW_MOVED and np.isfinite(span):
        reach = span * changed_high
        low, high = min(low, -reach), max(high, reach)
    return low, high


def _span(part: pd.DataFrame, scale: tuple[float, float] | None) -> float:
    """The largest change a score can make: the scale's MAX - MIN when known, else the range of every score and
    sample of both runs."""
    if scale is not None:
        return float(scale[1] - scale[0])
    values = [*part["score_ref"], *part["score_new"]]
    for column in ("samples_ref", "samples_new"):
        for samples in part.get(column, ()):
            if isinstance(samples, (list, tuple, np.ndarray)):
                values += [float(v) for v in samples if _could_be_one_sample(v) and not isinstance(v, str)]
    finite = np.asarray(values, float)
    finite = finite[np.isfinite(finite)]
    return float(finite.max() - finite.min()) if finite.size else math.nan


def _kappa(reference, new, numeric: bool) -> float:
    from sklearn.metrics import cohen_kappa_score

    if numeric:
        reference = np.floor(np.asarray(reference, float) + 0.5).astype(int)
        new = np.floor(np.asarray(new, float) + 0.5).astype(int)
    if len(set(reference) | set(new)) < 2:
        return float("nan")
    return float(cohen_kappa_score(reference, new, weights="quadratic" if numeric else None))


def _stuart_maxwell(reference, new) -> float:
    from statsmodels.stats.contingency_tables import SquareTable

    categories = sorted(set(reference) | set(new))
    if len(categories) < 2:
        return float("nan")
    table = pd.crosstab(pd.Categorical(reference, categories), pd.Categorical(new, categories), dropna=False)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a singular covariance (one-sided changes) falls back to a pseudo-inverse
        try:
            return float(SquareTable(table.to_numpy(float), shift_zeros=False).homogeneity().pvalue)
        except (np.linalg.LinAlgError, ValueError):
            return float("nan")


def _needed(sd: float, margin: float) -> int:
    """Dialogues for an equivalence test at 80% power when the truth is no change (normal approximation); `sd`:
    of the per-dialogue mean shift."""
    if not np.isfinite(sd):  # one dialogue
        return 0
    return int(math.ceil(((_Z_ALPHA + _Z_POWER) * sd / margin) ** 2))


def _criterion_row(part: pd.DataFrame, human: pd.DataFrame | None, noise: float, margin: float,
                   share_margin: float, n_resamples: int, seed: int, confidence: float,
                   noise_known: bool = True, scale: tuple[float, float] | None = None) -> dict:
    numeric = bool((part["status_ref"] == "ok").all() and (part["status_new"] == "ok").all())
    if numeric:
        part = part.assign(shift=part["score_new"] - part["score_ref"])
        part = part.assign(moved=(part["shift"] != 0).astype(float))
    # The change beyond each judgment's own re-ask noise, paired within dialogues (block mode shares a dialogue's
    # noise across its summaries: comparing with the noise as if it were known called an unchanged judge DRIFT in
    # 10-14% of runs at 10-20 dialogues).
    paired_noise = "noise" in part and bool(part["noise"].notna().all())
    if paired_noise:
        part = part.assign(excess=part["changed"] - part["noise"])
    columns = ["changed"] + (["excess"] if paired_noise else []) + (["shift", "moved"] if numeric else [])
    sizes, sums = _cluster_sums(part, columns)
    counts = resample_counts(np.random.default_rng(seed), len(sizes), n_resamples)
    replicates = _ratio_replicates(counts, sizes, sums)
    at = {name: k for k, name in enumerate(columns)}
    n, dialogues = len(part), len(sizes)
    changed = float(part["changed"].mean())
    changed_low, changed_high = _share_interval(changed, replicates[:, 0], confidence, n, dialogues)
    row = {"criterion": part["criterion"].iloc[0], "kind": "scores" if numeric else "labels", "n": n,
           "n_dialogues": dialogues, "changed_share": changed, "changed_ci_low": changed_low,
           "changed_ci_high": changed_high, "reask_noise": noise, "mean_shift": np.nan, "ci_low": np.nan,
           "ci_high": np.nan, "tost_low": np.nan, "tost_high": np.nan, "stuart_maxwell_p": np.nan,
           "human_r_reference": np.nan, "human_r_new": np.nan, "human_r_change": np.nan, "human_ci_low": np.nan,
           "human_ci_high": np.nan, "dialogues_needed": 0, "note": ""}
    per_dialogue = n / dialogues
    p = max(noise + share_margin / 2, 0.01)  # share_margin is in (0, 1) (_check_options)
    needed = int(math.ceil((_Z_ALPHA + _Z_POWER) ** 2 * p * (1 - p) / share_margin ** 2 / per_dialogue))
    if changed == 0 and not paired_noise:
        # Nothing changed: the exact bound counts a dialogue once (its verdicts may change together), so
        # "no drift" needs (1 - bound)^dialogues <= 5%.
        needed = max(needed, int(math.ceil(math.log(0.05) / math.log(1 - min(noise + share_margin, 0.99)))))
    moved, span = 0, math.nan
    if numeric:
        row.update(mean_shift=float(part["shift"].mean()), kappa=_kappa(part["score_ref"], part["score_new"], True))
        needed = max(needed, _needed(float(part.groupby("item_id")["shift"].mean().std(ddof=1)), margin))
        moved = int((part["shift"] != 0).groupby(part["item_id"]).any().sum())
        span = _span(part, scale)
        if moved < FEW_MOVED and span > margin:
            # No drift then needs span x the changed share's one-sided 95% bound within the margin.
            needed = max(needed, int(math.ceil(math.log(0.05) / math.log(1 - margin / span))))
        if human is not None:
            row.update(_human_change(part, human, counts, confidence))
    else:
        row["kappa"] = _kappa(part["value_ref"].astype(str), part["value_new"].astype(str), False)
        row["stuart_maxwell_p"] = _stuart_maxwell(part["value_ref"].astype(str), part["value_new"].astype(str))
    if dialogues < MIN_DIALOGUES:
        settle = max(needed, MIN_DIALOGUES)
        row.update(verdict="inconclusive", dialogues_needed=settle, changed_ci_low=np.nan, changed_ci_high=np.nan,
                   human_ci_low=np.nan, human_ci_high=np.nan,
                   note=f"no interval or verdict below {MIN_DIALOGUES} anchor dialogues (the intervals are not shown "
                        f"to hold there); about {settle} anchor dialogues would settle it ({dialogues} now)")
        return row
    # DRIFT is the union of two rules (the shift, the changed share; labels: Stuart-Maxwell, the share): each is
    # tested at half the level (Bonferroni), so an unchanged judge is called DRIFT in at most 1 - confidence of
    # runs. Each at the full level called a sampled judge in block mode DRIFT in 6.5-8% of runs at 10 dialogues.
    strict = 1 - (1 - confidence) / 2
    if paired_noise:
        # every statistic is a mean over dialogues: expanded intervals (calibration.stats.percentile_interval)
        excess_low, _ = percentile_interval(replicates[:, at["excess"]], strict, dialogues)
        _, excess_high = percentile_interval(replicates[:, at["excess"]], 2 * confidence - 1, dialogues)  # one-sided
        share_equivalent = excess_high <= share_margin
        share_drift = excess_low > 0
    else:
        _, one_sided_high = _share_interval(changed, replicates[:, 0], 2 * confidence - 1, n, dialogues)
        share_equivalent = one_sided_high <= noise + share_margin
        # Without re-asks the noise is unknown, not 0: a judge at temperature 0 may still change a few verdicts
        # between runs (taken as 0, an unchanged one that changes 3% was called DRIFT in 54% of runs at 60
        # dialogues). Only a change beyond the allowance for it, --share-margin, is then drift.
        allowance = noise if noise_known else noise + share_margin
        share_drift = _share_interval(changed, replicates[:, 0], strict, n, dialogues)[0] > allowance
    if numeric:
        shift = sums[:, at["shift"]]

        share_moved = float(part["moved"].mean())

        def interval(level):
            bound = _share_interval(share_moved, replicates[:, at["moved"]], level, n, dialogues)[1]
            return shift_interval(sizes, shift, level, moved, span, bound)

        row["ci_low"], row["ci_high"] = interval(confidence)
        row["tost_low"], row["tost_high"] = interval(2 * confidence - 1)  # TOST at 5%: the 90%
        shift_equivalent = -margin < row["tost_low"] and row["tost_high"] < margin
        strict_low, strict_high = interval(strict)
        shift_drift = strict_low > 0 or strict_high < 0
        if moved < FEW_MOVED:
            row["note"] = (f"scores changed in {moved} of {dialogues} dialogues: the shift's intervals reach "
                           f"+-{span:g} points (the scale's span) x the changed share's upper bound")
    else:
        shift_drift = bool(row["stuart_maxwell_p"] < 1 - strict)  # NaN (one category) does not reject
        shift_equivalent = not row["stuart_maxwell_p"] < 1 - confidence
    if shift_equivalent and share_equivalent:
        row["verdict"] = "no drift"
    elif shift_drift or share_drift:
        row["verdict"] = "drift"
    else:
        row["verdict"] = "inconclusive"
        row["dialogues_needed"] = max(needed, dialogues + 1)
        row["note"] = "; ".join(filter(None, [row["note"], f"about {row['dialogues_needed']} anchor dialogues would "
                                              f"settle it ({dialogues} now)"]))
    return row


def _human_change(part: pd.DataFrame, human: pd.DataFrame, counts: np.ndarray, confidence: float) -> dict:
    """Change in the judge's item-level Pearson r with the human mean, paired over resampled dialogues."""
    merged = part.merge(human, on=KEY, how="inner")
    if len(merged) < 3:
        return {}
    dialogues = pd.Index(sorted(part["item_id"].unique()))
    weights = counts[:, dialogues.get_indexer(merged["item_id"])]
    ref = pearson(merged["score_ref"].to_numpy(), merged["human"].to_numpy())
    new = pearson(merged["score_new"].to_numpy(), merged["human"].to_numpy())
    change = pearson(merged["score_new"].to_numpy(), merged["human"].to_numpy(), weights) - pearson(
        merged["score_ref"].to_numpy(), merged["human"].to_numpy(), weights)
    low, high = percentile_interval(change, confidence, len(dialogues))
    return {"human_r_reference": float(ref), "human_r_new": float(new), "human_r_change": float(new - ref),
            "human_ci_low": low, "human_ci_high": high}


def _changed_and_noise(part: pd.DataFrame) -> tuple[pd.DataFrame, float, str, bool]:
    """Per judgment, the share of it that changed (`changed`), and the criterion's re-ask noise, in one unit.

    With samples in both runs: the share of (reference sample, new sample) pairs that differ, against the share of
    pairs of re-asks that differ, per judgment and averaged over judgments, in the reference run (the new run's
    only when the reference has none). A run that kept no samples contributes its verdict as its one sample when
    every verdict could be one (a point of the scale, a label); a verdict that is a mean of samples (3.667, from a
    CSV of scores) is compared with the other run's verdict instead: a mean is not one sample, and the same scores
    never count as changed. Samples are paired within one presentation order only."""
    one_sample = {run: part[f"value_{run}"].map(_could_be_one_sample).all() for run in ("ref", "new")}
    changed: list[float] = []
    noise: dict[str, list[float]] = {"ref": [], "new": []}
    per_row: dict[str, list[float]] = {"ref": [], "new": []}
    verdicts_only = 0
    for row in part.itertuples():
        groups = {}
        for run in ("ref", "new"):
            groups[run] = _orders(getattr(row, f"samples_{run}"), getattr(row, f"both_orders_{run}"))
        if any(not groups[run] and not one_sample[run] for run in groups):
            verdicts_only += 1
            changed.append(float(_comparable(row.value_ref) != _comparable(row.value_new)))
            per_row["ref"].append(np.nan)
            per_row["new"].append(np.nan)
            continue
        for run in ("ref", "new"):
            d, p = _within(groups[run])
            per_row[run].append(d / p if p else np.nan)
            if p:
                noise[run].append(d / p)
            if not groups[run]:
                groups[run] = {"forward": [_comparable(getattr(row, f"value_{run}"))]}
        d, p = _across(groups["ref"], groups["new"])  # both runs have a non-empty "forward" order: p >= 1
        changed.append(d / p)
    # Each judgment's own re-ask noise beside its change: drift is decided on their paired difference per dialogue.
    source = "ref" if noise["ref"] else "new"
    part = part.assign(changed=changed, noise=per_row[source])
    if verdicts_only:
        return part, 0.0, (f"{verdicts_only} judgments kept no samples in one run and are means of samples in it: "
                           "verdict is compared with verdict, and a verdict's re-ask noise is unknown: changed "
                           "verdicts are drift only beyond --share-margin"), False
    if noise["ref"]:
        return part, float(np.mean(noise["ref"])), "", True
    if noise["new"]:
        return (part, float(np.mean(noise["new"])), "no re-asks in the reference: the re-ask noise is the new run's",
                True)
    return part, 0.0, ("no re-asks in either run: the re-ask noise is unknown, so changed verdicts are drift only "
                       "beyond --share-margin (judge the anchor set with --samples 3 to measure it)"), False


# -- the verb -----------------------------------------------------------------------------------------------------


def _check_options(margin, share_margin, n_resamples, confidence) -> None:
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
        raise CalibrationError(f"--margin must be a positive number of score points, got {margin!r}")
    if not (isinstance(share_margin, (int, float)) and 0 < share_margin < 1):
        raise CalibrationError(f"--share-margin must be between 0 and 1, got {share_margin!r}")
    if not (isinstance(confidence, (int, float)) and 0.5 <= confidence < 1.0):
        raise CalibrationError(f"--confidence must be between 0.5 and 1, got {confidence!r}")
    resamples_option(n_resamples, confidence, floor=100)


def _check_fresh(new: pd.DataFrame, where: str) -> None:
    """A new run answered from the answer cache repeats an earlier run: it cannot show that the model changed."""
    stored = int(new["from_cache"].sum())
    if stored:
        raise CalibrationError(
            f"{where}: {stored} of {len(new)} judgments were answered from the answer cache (asked in an earlier "
            "run), so they cannot show whether the model behind the name changed; re-judge the anchor set with "
            "`judge score ... --refresh` (or --no-cache) into a new --output, then run drift on that")


def drift(reference, judgments, human=None, *, margin: float = 0.25, share_margin: float = 0.1, criteria=None,
          bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95, scale=None,
          allow_different_judge: bool = False, failure_value: float | None = None) -> DriftResult:
    """Compare a new run of the judge (`judgments`) with a reference run on the same anchor judgments.

    `reference`, `judgments`: paths or DataFrames as `judge calibrate` reads them (a `samples` column of lists is
    used as re-asks when present); `human`: labels (path or DataFrame) for the change in agreement with humans.
    `margin`: the mean shift (score points) that counts as no drift; `share_margin`: the share of changed verdicts
    beyond the re-ask noise that still counts as no drift. `scale`: (MIN, MAX) to check the human labels against
    when the judgments name no rubric. The two runs must come from one judge (model, rubric version, template,
    decoding, as their fingerprints record) and the new one from the model, not the answer cache; a deliberate
    comparison of two judges needs `allow_different_judge=True`, and is said in the output.

    >>> import calibration
    >>> result = calibration.drift("examples/study/judgments.jsonl", "examples/study/judgments_rerun.jsonl",
    ...                            bootstrap=200)
    >>> result.drift[["criterion", "verdict"]].values.tolist()
    [['accuracy', 'no drift'], ['clarity', 'no drift']]
    """
    _check_options(margin, share_margin, bootstrap, confidence)
    seed = seed_option(seed)
    criteria = criteria_option(criteria)
    old, old_record, old_where = _run(reference, "reference", failure_value)
    new, new_record, new_where = _run(judgments, "new run", failure_value)
    _check_fresh(new, new_where)
    rubrics = (set(old["rubric"].fillna("")) - {""}, set(new["rubric"].fillna("")) - {""})
    if rubrics[0] and rubrics[1] and rubrics[0] != rubrics[1]:
        raise CalibrationError(f"{new_where}: judged with rubric {', '.join(sorted(rubrics[1]))}, the reference "
                               f"{old_where} with {', '.join(sorted(rubrics[0]))}: drift compares the same rubric")
    notes = []
    for frame in (old, new):
        frame["value"] = [_verdict_value(r) for r in frame.itertuples()]
    paired = old.merge(new, on=KEY, suffixes=("_ref", "_new"))
    if paired.empty:
        raise CalibrationError(f"{new_where}: no (item, system, criterion) in common with the reference {old_where}: "
                               f"e.g. {'/'.join(old[KEY].iloc[0].astype(str))} there, "
                               f"{'/'.join(new[KEY].iloc[0].astype(str))} here")
    usable = paired["value_ref"].notna() & paired["value_new"].notna()
    lost = len(old) - len(paired), len(new) - len(paired), int((~usable).sum())
    if any(lost):
        notes.append(f"compared {int(usable.sum())} judgments in common; left out {lost[0]} only in the reference, "
                        f"{lost[1]} only in the new run, {lost[2]} failed, N/A or abstained in either")
    paired = paired[usable]
    from ..io import judge_differences

    if differences := judge_differences(paired["fingerprint_ref"], paired["fingerprint_new"]):
        if not allow_different_judge:
            raise CalibrationError(
                f"{new_where}: not the judge of the reference {old_where}: {'; '.join(differences)}; drift follows "
                "one judge over time: re-judge with the reference's settings, or pass --allow-different-judge to "
                "compare two judges on purpose")
        notes.append(f"two different judges compared on purpose (--allow-different-judge): {'; '.join(differences)}")
    if criteria is not None:
        paired = paired[paired["criterion"].isin(criteria)]
    labels = None
    if human is not None:
        from ..humans import aggregate_humans
        from ..io import judge_scales, read_human_labels

        scales, unchecked = judge_scales(new, scale_option(scale), judgments)
        notes += [f"note: {note}" for note in unchecked]
        labels = read_human_labels(human, scales)
        spelled_as_judged(labels, new)
        labels = aggregate_humans(labels)[KEY + ["human"]]
    bounds = _scale_bounds(new, scale, judgments)
    rows = []
    for criterion, part in paired.groupby("criterion", sort=True):
        part, noise, note, known = _changed_and_noise(part)
        row = _criterion_row(part, labels, noise, margin, share_margin, bootstrap, seed, confidence, known,
                             bounds.get(criterion, bounds.get("*")))
        row["note"] = "; ".join(filter(None, [row["note"], note]))
        rows.append(row)
    if not rows:
        raise CalibrationError(f"{new_where}: no judgment with a verdict in both runs")
    table = pd.DataFrame(rows).reindex(columns=DRIFT_COLUMNS)
    return DriftResult(table, _provenance(old_record, new_record), margin, share_margin, bootstrap, notes)


def _scale_bounds(new: pd.DataFrame, scale, source) -> dict[str, tuple[float, float]]:
    """(MIN, MAX) per criterion ("*": every one) from --scale or the rubric the judgments name; none when neither
    is known (the shift's bound then spans the scores seen)."""
    from ..io import judge_scales, scale_bounds

    try:
        return scale_bounds(judge_scales(new, scale_option(scale), source)[0])
    except CalibrationError:  # a rubric found nowhere: drift does not need it otherwise
        return {}


def drift_section(result: DriftResult) -> str:
    """The HTML section: each criterion's mean shift with its CI against the margin, then the tables."""
    import html

    from ..html_kit import image as _img
    from ..html_kit import intervals_figure
    from ..html_kit import table as _table

    table = result.drift.assign(what=[f"{v} ({100 * s:.0f}% changed)" for v, s in
                                      zip(result.drift["verdict"], result.drift["changed_share"])])
    numeric = table[table["mean_shift"].notna()]
    parts = ["<h2>Drift: the same judge, still the same?</h2>",
             "<p class=note>Mean shift (new − reference, paired) with a 95% t interval clustered by dialogue; no drift "
             f"= within ±{result.margin:g} by TOST and changed verdicts within the re-ask noise + "
             f"{result.share_margin:g}.</p>"]
    if len(numeric):
        figure = intervals_figure(numeric, "what", "mean_shift", "ci_low", "ci_high", xlabel="mean shift (CI)",
                                  zero=True)
        parts.append(_img("mean shift with CIs", figure))
    parts += [_table(result.drift), "<h2>Drift: how the judgments were produced</h2>", _table(result.provenance)]
    parts += [f"<p class=note>Warning: {html.escape(w)}</p>" for w in result.warnings]
    return "".join(parts)
