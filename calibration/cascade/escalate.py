"""`judge escalate`: which verdicts may stand without a human, with a guaranteed agreement rate (selective judging and
cascades, after Jung, Brahman & Choi, "Trust or Escalate", ICLR 2025).

Judges are given cheapest first. The (item, system, criterion) cells that carry human labels are the calibration set;
every other cell a judge judged is decided: the first judge whose confidence reaches its threshold keeps its verdict,
and a cell no judge is confident about goes to humans.

The guarantee is for the cascade as a whole, per criterion: with probability >= 1 - delta over the draw of the
calibration set, the verdicts the cascade accepts (whichever judge gave them) agree with humans at a rate >= 1 - alpha,
for cells drawn like the calibration cells (exchangeability: the labelled cells are a random sample of the population
the decided cells come from). Testing each judge at delta, as the paper does, holds for a cascade of k judges only at
k * delta; here one fixed-sequence test runs along one path through the judges' joint thresholds:

- the path is fixed before any label is looked at: at step q (q = 1/steps, 2/steps, ..., 1) every judge accepts at most
  the share q of the unlabelled cells, its most confident ones (ties are never split: a coarse, two-valued confidence
  accepts its confident group only once q reaches that group's share, and everything only at q = 1, so a cheap judge
  cannot take every cell early); the thresholds come from the unlabelled cells' confidences only;
- the path starts where the expected number of accepted calibration cells could reject at all (see `start_step`),
  a count computed from the number of labels and the unlabelled confidences, never from the labels;
- at each step, H0: P(disagree | accepted) > alpha is tested with the exact binomial p-value P(Bin(n, alpha) <= e)
  (n accepted calibration cells, e disagreements; given n, the accepted cells' outcomes are iid under
  exchangeability), at level delta; the first step not rejected stops the walk, and the last rejected step is used
  (fixed-sequence testing: the family-wise error along the whole path is <= delta). If the first step is not
  rejected, nothing is accepted: a useless confidence accepts nothing it cannot guarantee.
- labels usually come in whole dialogues (`judge export` shows annotators every candidate of a dialogue), and cells of
  one dialogue are not independent: drawing DialSummEval's dialogues whole, the binomial test failed in 13-20% of draws
  at delta 0.1. So when some dialogue has several labelled cells (units "auto"), each dialogue is one unit and H0 is
  tested by betting (Waudby-Smith & Ramdas) on y_d = (e_d + alpha (m - n_d)) / m over the independent dialogues
  (see `fit_cascade`); valid, and more conservative. `units="cells"` keeps the binomial test for labels drawn cell by
  cell.

Agreement per scale: a Likert verdict agrees when it lies within `tolerance` points of the human mean; a categorical
verdict when it is the human majority label (on a tie among annotators, one of the tied labels); a pairwise verdict
(1 / 2 / 0 = tie) when it is the human majority verdict for the pair (or the one the human means give). Abstentions
and ties are verdicts, and can be wrong. A failed judgment is never accepted.

A judge given as run options is judged by the cascade itself (`runs.py`, through `judge.run`), round by round as a
user would: the labelled cells and the cells that fix the path first, then the cells every judge before it
escalated. The thresholds depend on those first cells only (the path's sample is drawn from the cells and the seed,
never from a confidence or a label), so the statistics are those of the judge run on every cell; the cells it never
judged are what `cost.csv` counts as spared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..errors import CalibrationError
from ..options import criteria_option, judges_option, must_be, seed_option
from ..result import Result

UNITS = ("auto", "cells", "dialogues")
SIGNALS = ("probs", "samples", "order", "jury", "none")
SIGNAL_TEXT = {"probs": "probability of the verdict (probs)", "samples": "share of samples agreeing with the verdict",
               "order": "both orders give the same verdict (pairwise)", "jury": "share of the other judges agreeing",
               "none": "no confidence signal (all or nothing)"}
HUMAN = "human"
DECISION_COLUMNS = ["item_id", "system", "criterion", "decided_by", "verdict", "confidence"]
THRESHOLD_COLUMNS = ["criterion", "judge", "signal", "threshold", "calibration_decided", "agreement",
                     "agreement_bound", "unlabelled_decided", "unlabelled_share"]
PATH_STEPS = 40
# cost.csv: cells_run = the unlabelled cells a judge must run on; judged = the cells (labelled too) it has judgments
# for; spared = the cells it never judged, against judging every cell
COST_COLUMNS = ["what", "cells_run", "tokens", "judged", "spared"]
# what --output-dir receives (plan.* only with a plan): checked before any judge runs
TABLE_FILES = ("decisions.csv", "thresholds.csv", "path.csv", "risk_coverage.csv", "signals.csv", "cost.csv",
               "pending.csv", "plan.csv", "plan.json")
EXCHANGEABILITY = ("that the labelled cells are a random sample of the cells decided (exchangeable with them): the "
                   "guarantee is over the draw of the calibration set, for cells drawn like it, not a promise about "
                   "any one small batch")


# -- the statistics on arrays (the simulation calls these directly) --------------------------------------------------


def min_labels(alpha: float, delta: float) -> int:
    """The fewest accepted calibration cells with which even zero disagreements reject risk > alpha at level delta:
    (1 - alpha)^n <= delta."""
    return int(math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12))


def binomial_p(errors, n, alpha: float):
    """Exact p-value of H0: P(disagree) >= alpha given `errors` disagreements in `n` cells (P(Bin(n, alpha) <= e));
    1 where n is 0."""
    from scipy.stats import binom

    errors, n = np.asarray(errors), np.asarray(n)
    return np.where(n > 0, binom.cdf(errors, np.maximum(n, 1), alpha), 1.0)


def agreement_bound(errors, n, delta: float):
    """Clopper-Pearson one-sided lower (1 - delta) bound of the agreement rate; NaN where n is 0."""
    from scipy.stats import beta

    errors, n = np.asarray(errors, float), np.asarray(n, float)
    with np.errstate(invalid="ignore"):
        upper = np.where(errors >= n, 1.0, beta.ppf(1 - delta, errors + 1, np.maximum(n - errors, 1)))
    return np.where(n > 0, 1.0 - upper, np.nan)


def path_thresholds(pool: np.ndarray, steps: int = PATH_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """The path through the judges' joint thresholds, strict to loose, from the unlabelled confidences only.

    `pool` (m cells x K judges; NaN where a judge gave no verdict). At step q = j/steps each judge's threshold is the
    lowest confidence value whose cells (confidence >= it) are at most the share q of the m cells; +inf (accept none)
    when even its top value covers more. Returns (thresholds: steps x K, q: steps), consecutive repeats dropped.
    """
    m, judges = pool.shape
    qs = np.arange(1, steps + 1) / steps
    out = np.full((steps, judges), np.inf)
    for k in range(judges):
        values = pool[:, k][np.isfinite(pool[:, k])]
        if not len(values):
            continue
        distinct, counts = np.unique(values, return_counts=True)
        distinct, share = distinct[::-1], np.cumsum(counts[::-1]) / m  # share accepted at threshold = distinct[i]
        for j, q in enumerate(qs):
            ok = np.nonzero(share <= q + 1e-12)[0]
            if len(ok):
                out[j, k] = distinct[ok[-1]]
    keep = np.ones(steps, bool)
    keep[1:] = np.any(out[1:] != out[:-1], axis=1)
    return out[keep], qs[keep]


def path_sample(pool: np.ndarray, path_cells: int | None, seed: int) -> np.ndarray:
    """The indices of the unlabelled cells (`pool`: a mask over the criterion's cells, sorted by item and system)
    that fix the path: all of them, or a seeded sample of `path_cells`. Drawn from the cells and the seed only (never
    a confidence or a label), so a later judge needs to judge only these, the labelled cells and what reaches it,
    and the thresholds stay the same once it has judged the rest."""
    indices = np.flatnonzero(pool)
    if path_cells is None or path_cells >= len(indices):
        return indices
    return np.sort(np.random.default_rng([seed, path_cells]).choice(indices, path_cells, replace=False))


def decide(conf: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Which judge keeps each cell's verdict: the first (cheapest) whose confidence reaches its threshold; -1 = humans.
    `thresholds` (K,) or (S, K) gives (n,) or (S, n)."""
    thresholds = np.asarray(thresholds, float)
    single = thresholds.ndim == 1
    thresholds = np.atleast_2d(thresholds)
    with np.errstate(invalid="ignore"):
        accept = conf[None, :, :] >= thresholds[:, None, :]  # NaN never reaches
    first = np.where(accept.any(axis=2), accept.argmax(axis=2), -1)
    return first[0] if single else first


def start_step(pool_coverage: np.ndarray, n_labelled: int, alpha: float, delta: float, units: int | None = None
               ) -> int:
    """The first step of the path at which the test could reject (a test that cannot reject would end the walk before
    it starts). Label-free: counts and unlabelled confidences only, never the labels.

    Cells: the expected accepted calibration count, n_labelled x the cascade's share c of the unlabelled cells, is at
    least min_labels + 2 sqrt(min_labels). Dialogues (`units` of them, m = n_labelled / units cells each): with
    disagreements at half the allowed rate, y's mean is alpha (1 - c/2) and its variance about mean (1 - mean) / m;
    the step starts the walk once N (alpha - mean)^2 / (2 variance) >= 1.5 log(1/delta) (a betting test's reach)."""
    if units is not None:
        mean = alpha * (1 - pool_coverage / 2)
        variance = mean * (1 - mean) / max(n_labelled / units, 1.0)
        reach = np.nonzero(units * (alpha - mean) ** 2 / (2 * variance) >= 1.5 * math.log(1 / delta))[0]
        return int(reach[0]) if len(reach) else len(pool_coverage)
    need = min_labels(alpha, delta)
    need = need + 2.0 * math.sqrt(need)
    reach = np.nonzero(pool_coverage * n_labelled >= need)[0]
    return int(reach[0]) if len(reach) else len(pool_coverage)


def betting_p(y: np.ndarray, alpha: float, delta: float) -> np.ndarray:
    """p-value of H0: E[y] >= alpha from independent y in [0, 1] (one row per hypothesis: S x N), by testing by
    betting (Waudby-Smith & Ramdas, JRSS-B 2024): the wealth K_t = prod (1 + lambda_t (alpha - y_t)) is a non-negative
    supermartingale under H0 for any predictable lambda_t in [0, 0.75 / (1 - alpha)], so p = 1 / max_t K_t is valid
    (Ville's inequality). lambda_t: their predictable plug-in, sqrt(2 log(1/delta) / (N var_{t-1})), capped. The units
    are taken in one fixed order (a seeded shuffle of the order given): the same inputs give the same p-value."""
    y = np.atleast_2d(np.asarray(y, float))
    rows, count = y.shape
    y = y[:, np.random.default_rng(0).permutation(count)]
    mean, var = np.full(rows, 0.5), np.full(rows, 0.25)
    total, squares, wealth, best = np.zeros(rows), np.zeros(rows), np.zeros(rows), np.zeros(rows)
    cap = 0.75 / (1 - alpha)
    for t in range(count):
        bet = np.minimum(np.sqrt(2 * math.log(1 / delta) / (count * var)), cap)
        wealth += np.log1p(bet * (alpha - y[:, t]))
        best = np.maximum(best, wealth)
        total += y[:, t]
        squares += (y[:, t] - mean) ** 2
        mean, var = (0.5 + total) / (t + 2), (0.25 + squares) / (t + 2)
    return np.minimum(1.0, np.exp(-best))


@dataclass
class CascadeFit:
    thresholds: np.ndarray  # (K,) the chosen thresholds; +inf = the judge accepts nothing
    path: pd.DataFrame  # one row per step of the path that was tested (or skipped)
    chosen: int  # the index in `path` of the step used; -1 = none rejected (nothing accepted)


def fit_cascade(cal_conf: np.ndarray, cal_agree: np.ndarray, pool_conf: np.ndarray, alpha: float, delta: float,
                steps: int = PATH_STEPS, groups: np.ndarray | None = None) -> CascadeFit:
    """Thresholds for the cascade by one fixed-sequence test along the label-free path.

    `cal_conf`, `cal_agree` (n x K): each judge's confidence (NaN: no verdict) and whether its verdict agrees with the
    humans on the calibration cells; `pool_conf` (m x K): the unlabelled cells' confidences (they fix the path).

    `groups` (n,): the dialogue of each calibration cell, when labels come in whole dialogues (cells of one dialogue
    are not independent, and the binomial test assumes they are). Each dialogue d is then one unit:
    y_d = (e_d + alpha (m - n_d)) / m in [0, 1] (e_d disagreements among its n_d accepted cells, m the most cells a
    dialogue has), whose mean is >= alpha exactly when the accepted verdicts' disagreement rate is >= alpha; H0 is
    tested by betting over the independent dialogues (`betting_p`)."""
    thresholds, qs = path_thresholds(pool_conf, steps)
    judges = cal_conf.shape[1]
    pool_first = decide(pool_conf, thresholds)  # (S, m)
    pool_coverage = (pool_first >= 0).mean(axis=1) if pool_conf.shape[0] else np.zeros(len(qs))
    first = decide(cal_conf, thresholds)  # (S, n)
    accepted = first >= 0
    picked = np.take_along_axis(np.broadcast_to(cal_agree, (len(qs), *cal_agree.shape)),
                                np.maximum(first, 0)[:, :, None], axis=2)[:, :, 0]
    n = accepted.sum(axis=1)
    wrong = accepted & ~picked
    errors = wrong.sum(axis=1)
    if groups is None:
        p = binomial_p(errors, n, alpha)
        begin = start_step(pool_coverage, cal_conf.shape[0], alpha, delta)
    else:
        _, unit = np.unique(groups, return_inverse=True)
        units = int(unit.max()) + 1
        onehot = np.zeros((len(unit), units))
        onehot[np.arange(len(unit)), unit] = 1.0
        size = onehot.sum(axis=0).max()
        y = ((wrong @ onehot) + alpha * (size - accepted @ onehot)) / size  # (S, units)
        p = betting_p(y, alpha, delta)
        begin = start_step(pool_coverage, cal_conf.shape[0], alpha, delta, units=units)
    tested = np.arange(len(qs)) >= begin
    rejected = np.zeros(len(qs), bool)
    chosen = -1
    for s in range(begin, len(qs)):
        if p[s] > delta:
            break
        rejected[s] = True
        chosen = s
    tested &= np.arange(len(qs)) <= (chosen + 1 if chosen >= 0 else begin)
    path = pd.DataFrame({"step": np.arange(len(qs)), "q": qs, "pool_coverage": pool_coverage,
                         "n_accepted": n, "disagreements": errors, "p_value": p, "tested": tested,
                         "rejected": rejected, "chosen": np.arange(len(qs)) == chosen})
    for k in range(judges):
        path[f"threshold_{k}"] = thresholds[:, k]
    final = thresholds[chosen] if chosen >= 0 else np.full(judges, np.inf)
    return CascadeFit(final, path, chosen)


# -- verdicts, agreement and confidence from the judgments -------------------------------------------------------------


def _kind(frame: pd.DataFrame) -> str:
    if frame["system_1"].notna().any():
        return "pairwise"
    return "categorical" if frame["label"].notna().any() else "likert"


def _verdicts(frame: pd.DataFrame, kind: str) -> pd.Series:
    """The verdict of each judge row (None for a failure or N/A): a number (Likert) or a label."""
    usable = frame["status"].isin(["ok", "label", "abstain"])
    if kind == "likert":
        values = frame["score"].where(usable & frame["status"].eq("ok"))
        return values.astype(object).where(values.notna(), None)
    labels = frame["label"].where(frame["label"].notna(), frame["score"].map(
        lambda v: None if pd.isna(v) else f"{v:g}"))
    return labels.where(usable, None)


def _same(a, b, kind: str, tolerance: float) -> bool:
    if a is None or b is None:
        return False
    if kind == "likert":
        return abs(float(a) - float(b)) <= tolerance + 1e-9
    return str(a) == str(b)


def _confidence(row, verdict, kind: str, signal: str, tolerance: float, jury: list) -> float:
    if verdict is None:
        return np.nan
    if signal == "none":
        return 1.0
    if signal == "probs":
        probs = row.probs if isinstance(row.probs, dict) else None
        if not probs:
            return 0.0
        if kind == "likert":
            return float(sum(p for k, p in probs.items() if _number(k) is not None
                             and abs(_number(k) - float(verdict)) <= tolerance + 1e-9))
        return float(probs.get(str(verdict), 0.0))
    if signal == "samples":
        samples = row.samples if isinstance(row.samples, (list, tuple)) else []
        if len(samples) < 2:
            return 0.0
        return float(np.mean([_same(s if kind == "likert" else str(s), verdict, kind, tolerance) for s in samples]))
    if signal == "order":
        forward, swapped = getattr(row, "forward", None), getattr(row, "swapped", None)
        if forward is None or swapped is None or pd.isna(forward) or pd.isna(swapped):
            return 0.0
        return 1.0 if forward == swapped else 0.0
    if signal == "jury":
        others = [v for v in jury if v is not None]
        return float(np.mean([_same(v, verdict, kind, tolerance) for v in others])) if others else 0.0
    raise CalibrationError(f"--signal must be one of {', '.join(SIGNALS)}, got {signal!r}")


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def available_signals(frame: pd.DataFrame, kind: str, judges: int) -> list[str]:
    """The signals this judge's file records for most of its verdicts, best first (the choice never looks at labels)."""
    verdicts = frame[frame["status"].isin(["ok", "label", "abstain"])]
    if verdicts.empty:
        return ["none"]
    found = []
    if "probs" in verdicts and verdicts["probs"].map(lambda p: isinstance(p, dict) and bool(p)).mean() >= 0.5:
        found.append("probs")
    if "samples" in verdicts and verdicts["samples"].map(
            lambda s: isinstance(s, (list, tuple)) and len(s) >= 2).mean() >= 0.5 and kind != "pairwise":
        found.append("samples")
    if kind == "pairwise" and "forward" in verdicts and verdicts["forward"].notna().mean() >= 0.5 \
            and verdicts["swapped"].notna().mean() >= 0.5:
        found.append("order")
    if judges >= 2:
        found.append("jury")
    return found + ["none"]


# -- the human side ------------------------------------------------------------------------------------------------


def _modal(values: pd.Series) -> frozenset:
    counts = values.value_counts()
    return frozenset(counts.index[counts == counts.max()]) if len(counts) else frozenset()


def human_verdicts(labels: pd.DataFrame, criterion: str, kind: str, cells: pd.DataFrame) -> pd.Series:
    """The human side of each calibration cell of `cells` (item_id, system[, system_1, system_2]): the mean (Likert)
    or the set of modal labels (categorical, pairwise); None where the humans give nothing usable."""
    part = labels[labels["criterion"] == criterion]
    key = list(zip(cells["item_id"], cells["system"]))
    if kind == "likert":
        means = part[part["score"].notna()].groupby(["item_id", "system"])["score"].mean()
        return pd.Series([means.get(k) for k in key], index=cells.index, dtype=object)
    text = part["label"].where(part["label"].notna(), part["score"].map(lambda v: None if pd.isna(v) else f"{v:g}"))
    voting = part.assign(text=text)[text.notna()]  # an annotator's abstention is a label a verdict can match
    modal = voting.groupby(["item_id", "system"])["text"].agg(_modal)
    out = [modal.get(k) for k in key]
    if kind == "pairwise":
        means = part[part["score"].notna() & part["label"].isna()].groupby(["item_id", "system"])["score"].mean()
        for i, row in enumerate(cells.itertuples(index=False)):
            if out[i] is None and (row.item_id, row.system_1) in means.index \
                    and (row.item_id, row.system_2) in means.index:
                a, b = means[(row.item_id, row.system_1)], means[(row.item_id, row.system_2)]
                out[i] = frozenset({"1" if a > b else "2" if b > a else "0"})
    return pd.Series(out, index=cells.index, dtype=object)


def _agrees(verdict, human, kind: str, tolerance: float) -> bool:
    if verdict is None or human is None:
        return False
    if kind == "likert":
        return _same(verdict, human, kind, tolerance)
    return str(verdict) in human


# -- the result -----------------------------------------------------------------------------------------------------


@dataclass
class EscalateResult(Result):
    """What `judge escalate` decided: one row per unlabelled cell, the thresholds, the tested path, risk-coverage."""

    verb: ClassVar[str] = "escalate"

    decisions: pd.DataFrame
    thresholds: pd.DataFrame
    path: pd.DataFrame
    risk_coverage: pd.DataFrame
    signals: pd.DataFrame
    cost: pd.DataFrame
    alpha: float
    delta: float
    tolerance: float
    judges: list[str]
    agreement: dict[str, str]  # criterion -> how agreement was defined there
    plan: pd.DataFrame | None = None
    seed: int = 0
    tests: dict[str, str] = field(default_factory=dict)  # criterion -> the test used
    # cells every judge before `judge` escalated but `judge` has not judged: what to run it on next
    pending: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["item_id", "system", "criterion",
                                                                                "judge"]))
    warnings: list[str] = field(default_factory=list)
    # judge -> the cells (item_id, system, criterion) it has judged: what escalate asks a run judge again
    judged: dict = field(default_factory=dict, repr=False)

    def decisions_csv(self) -> str:
        frame = self.decisions.copy()
        frame["confidence"] = frame["confidence"].map(lambda v: "" if pd.isna(v) else f"{v:.6g}")
        frame["verdict"] = frame["verdict"].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v))
                                                else (f"{v:g}" if isinstance(v, float) else str(v)))
        return frame[DECISION_COLUMNS].to_csv(index=False)

    def files(self) -> dict[str, str]:
        out = {"decisions.csv": self.decisions_csv(), "thresholds.csv": self.thresholds.to_csv(index=False),
               "path.csv": self.path.to_csv(index=False), "risk_coverage.csv": self.risk_coverage.to_csv(index=False),
               "signals.csv": self.signals.to_csv(index=False), "cost.csv": self.cost.to_csv(index=False),
               "pending.csv": self.pending.to_csv(index=False)}
        if self.plan is not None and len(self.plan):
            import hashlib
            import json

            text = self.plan.to_csv(index=False)
            out["plan.csv"] = text
            out["plan.json"] = json.dumps({
                "version": 1, "made_by": "judge escalate", "unit": "dialogue",
                "random_dialogues": int((self.plan["part"] == "random").sum()), "seed": self.seed,
                "plan_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "note": "targeted: dialogues with a cell escalated to humans; random: a uniform draw of the "
                        "dialogues with unlabelled cells (only this part may enter judge estimate)"}, indent=1) + "\n"
        return out

    def coverage(self, criterion: str | None = None) -> float:
        part = self.decisions if criterion is None else self.decisions[self.decisions["criterion"] == criterion]
        return float((part["decided_by"] != HUMAN).mean()) if len(part) else float("nan")

    def text(self) -> str:
        lines = [f"Guarantee, per criterion: with probability >= {1 - self.delta:g} over the draw of the calibration "
                 f"set, the verdicts the cascade accepts (whichever judge) agree with humans at >= {1 - self.alpha:g}; "
                 f"one fixed-sequence test along a label-free path through the joint thresholds. "
                 f"Assumes {EXCHANGEABILITY}.", f"Judges, cheapest first: {', '.join(self.judges)}"]
        for criterion, part in self.thresholds.groupby("criterion", sort=False):
            decided = self.decisions[self.decisions["criterion"] == criterion]
            lines.append(f"\n{criterion}: agreement = {self.agreement[criterion]}; test: {self.tests[criterion]}; "
                         f"{len(decided)} unlabelled cells, {self.coverage(criterion):.1%} decided without humans")
            for row in part.itertuples():
                threshold = ("accepts none" if not np.isfinite(row.threshold) else f">= {row.threshold:.4g}") \
                    if row.judge not in ("cascade", HUMAN) else ""
                agree = "" if not np.isfinite(row.agreement) else f"  agreement {row.agreement:.3f}"
                bound = "" if not np.isfinite(row.agreement_bound) else f" (>= {row.agreement_bound:.3f})"
                lines.append(f"  {row.judge:<14} {row.signal:<8} {threshold:<14} calibration "
                             f"{row.calibration_decided:>5}"
                             f"{agree}{bound}  unlabelled {row.unlabelled_decided:>6} ({row.unlabelled_share:.1%})")
        below = self.thresholds[~self.thresholds["judge"].isin(["cascade", HUMAN])
                                & (self.thresholds["agreement"] < 1 - self.alpha)]
        if len(below):
            lines.append("\nNote: the guarantee is for every accepted verdict together; a judge's own share may lie "
                         f"below {1 - self.alpha:g} when another's lies above (here: "
                         + ", ".join(f"{r.criterion} {r.judge} {r.agreement:.3f}" for r in below.itertuples()) + ")")
        if len(self.pending):
            lines.append("\nNot judged yet by the judge whose turn it is (pending.csv; run it on them, then again): "
                         + "; ".join(f"{j} {c}" for j, c in self.pending.groupby("judge", sort=False).size().items()))
        spared = self.cost[self.cost["what"].str.startswith("judge ") & (self.cost["spared"] > 0)]
        if len(spared):
            lines.append("\nSpared (against judging every cell, labelled ones included): " + "; ".join(
                f"{r.what.removeprefix('judge ')} judged {r.judged:,} of {r.judged + r.spared:,} cells, {r.spared:,} "
                f"judgments spared ({r.spared / (r.judged + r.spared):.0%})" for r in spared.itertuples()))
        if not self.cost.empty and self.cost["tokens"].notna().any():
            lines.append("\nCost (tokens on the unlabelled cells): " + "; ".join(
                f"{r.what} {r.tokens:,.0f}" for r in self.cost.itertuples() if pd.notna(r.tokens)))
        return "\n".join(lines) + "\n"

    def report_html(self) -> str:
        from .report import escalate_section

        return escalate_section(self)

    def __str__(self) -> str:
        return self.text()


# -- the verb -------------------------------------------------------------------------------------------------------


def _share_option(value, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < float(value) < 1.0):
        raise CalibrationError(must_be(flag, "between 0 and 1 (both excluded)", value))
    return float(value)


def _signal_map(signal, names: list[str]) -> dict[str, str]:
    if signal is None or signal == "auto":
        return {}
    if isinstance(signal, str):
        pairs = [s.strip() for s in signal.split(",") if s.strip()]
        chosen = {}
        for part in pairs:
            name, sep, value = part.rpartition("=")
            if sep:
                chosen[name.strip()] = value.strip()
            else:
                chosen.update({n: value.strip() for n in names})
    else:
        chosen = dict(signal)
    for name, value in chosen.items():
        if name not in names:
            raise CalibrationError(f"--signal names judge {name!r}, which is not among --judge ({', '.join(names)})")
        if value not in SIGNALS:
            raise CalibrationError(must_be("--signal", "one of " + ", ".join(SIGNALS) + " (or NAME=SIGNAL)", value))
    return chosen


def _tokens(source) -> dict[tuple, float]:
    """Tokens per (item, system, criterion) when the judge is a judgments JSONL that records usage."""
    from pathlib import Path

    if isinstance(source, pd.DataFrame):  # a run judge's frame names its whole judgments file
        source = source.attrs.get("tokens_from", "")
    # Read as calibration.io reads a judge file: anything but a CSV is a judgments JSONL, whatever its name.
    if not str(source) or Path(str(source)).suffix.lower() == ".csv" or not Path(str(source)).is_file():
        return {}
    from judge.judgment import read_judgments

    try:
        return {j.key: float(j.usage.prompt_tokens + j.usage.completion_tokens) for _, j in read_judgments(Path(source))
                if j.usage.prompt_tokens or j.usage.completion_tokens}
    except Exception:  # noqa: BLE001 - the verdicts were read already; tokens are a bonus
        return {}


def escalate(human, judges, *, alpha: float, delta: float, criteria=None, tolerance: float = 0.5, signal=None,
             units: str = "auto", scale=None, failure_value: float | None = None, steps: int = PATH_STEPS,
             path_cells: int | None = None, random_dialogues: int = 0, seed: int = 0, judgments_dir=None,
             base_url=None) -> EscalateResult:
    """Decide every unlabelled cell of the judges' files (name -> path or DataFrame, cheapest first) by a cascade
    whose accepted verdicts agree with the human labels (`human`: the calibration set) at >= 1 - alpha with
    probability >= 1 - delta.

    A judge may also be given as run options (a `judge.options.RunOptions`, a dict of them, or a .json / .toml file of
    them: see calibration/cascade/runs.py): escalate then runs it itself, through `judge.run`, on the cells the
    cascade needs from it only (the labelled cells, the cells that fix the path, and those every judge before it
    escalated), into `judgments_dir`/NAME.jsonl, and carries on down the cascade once its run is complete.
    `base_url`: the servers of the run judges whose options name none. A failed or batch-pending run raises
    `RunStopped` (its exit_code), an interrupted one KeyboardInterrupt; no decision is made then.

    >>> import calibration
    >>> result = calibration.escalate("examples/escalate/labels.csv",
    ...     {"small": "examples/escalate/small.jsonl", "large": "examples/escalate/large.jsonl"}, alpha=0.2, delta=0.1)
    >>> sorted(set(result.decisions["decided_by"])) <= ["human", "large", "small"]
    True
    """
    from pathlib import Path

    from .runs import is_run_judge, judge_cells, judgments_path, load_run_judge

    options = _checked_options(alpha=alpha, delta=delta, criteria=criteria, tolerance=tolerance, signal=signal,
                               units=units, scale=scale, failure_value=failure_value, steps=steps,
                               path_cells=path_cells, random_dialogues=random_dialogues, seed=seed)
    listed = judges_option(judges, "escalate", 1, reserved=(HUMAN, "cascade"))
    _signal_map(signal, [n for n, _ in listed])  # refused before any judge runs
    if isinstance(base_url, (str, Path)):
        base_url = [str(base_url)]
    runs = {n: load_run_judge(n, s, base_url) for n, s in listed if is_run_judge(s)}
    if runs and judgments_dir is None:
        raise CalibrationError(f"judge {next(iter(runs))} is given as run options: its judgments need a folder "
                               "(--output-dir DIR; judgments_dir= in Python), where a rerun resumes them")
    files = {n: judgments_path(judgments_dir, n) for n in runs}
    given = [Path(str(s)) for n, s in listed if n not in runs and isinstance(s, (str, Path))] + \
        ([Path(str(human))] if isinstance(human, (str, Path)) else [])
    for name, path in files.items():
        if any(g.exists() and path.exists() and g.samefile(path) for g in given):
            raise CalibrationError(f"judge {name}'s judgments would go to {path}, which is an input of this run: "
                                   "choose another --output-dir or another NAME")
    first = listed[0][0]
    if first in runs:
        # every cell passes the cheapest judge first: it judges every item of its input, and its cells are the
        # cascade's cells (the later judges are asked for some of them only)
        judge_cells(first, runs[first], _every_cell(runs[first], options["criteria"], human, options["scale"]), files[first])
    later = set(runs) - {first}
    asked_before = set()
    # Each later judge runs at least once per call, on what its file holds at least: the run checks those
    # judgments were asked as its options ask now (another model, template or decoding is refused, naming
    # --redo-changed) before any decision uses them; a run with nothing to do starts no server.
    unchecked = {n for n in later if files[n].is_file()}
    while True:
        sources = [(n, _run_source(n, files[n], runs[n]) if n in runs else s) for n, s in listed]
        result = _cascade(human, sources, later=later, **options)
        wanted = result.pending[result.pending["judge"].isin(later)]
        due = set(wanted["judge"]) | unchecked
        if not due:
            break
        # Round by round, as a user would run them: first the cells that fix the thresholds (labelled and path
        # cells, for every judge), then the cells every judge before it escalated; each run also plans what the
        # judge's file holds already, so the run checks them too (and skips them).
        for name in [n for n in runs if n in due]:
            unchecked.discard(name)
            cells: dict[str, set] = {}
            for part in (wanted[wanted["judge"] == name], result.judged.get(name)):
                if part is not None:
                    for item, system, criterion in zip(part["item_id"], part["system"], part["criterion"]):
                        cells.setdefault(criterion, set()).add((item, system))
            request = frozenset((name, c, *cell) for c, part in cells.items() for cell in part)
            if request in asked_before:  # a run that completes judges what it was asked: never loop on it
                raise CalibrationError(f"judge {name} was asked for the same cells twice and {files[name]} still "
                                       "lacks some of them: is its input the items the other judges judged?")
            asked_before.add(request)
            judge_cells(name, runs[name], cells, files[name])
    if later and options["path_cells"] is None:
        result.warnings.append("without --path-cells every unlabelled cell fixes the path, so "
                               f"{', '.join(sorted(later))} judged every cell: --path-cells N (e.g. a few hundred) "
                               "spares a later judge the cells the judges before it keep")
    if base_url and not runs:  # said, not refused: a script may pass its server to every escalate it runs
        result.warnings.append("--base-url is the server of the judges given as run options, and no --judge is "
                               "(NAME=OPTIONS.toml or .json): it was not used")
    return result


def _checked_options(*, alpha, delta, criteria, tolerance, signal, units, scale, failure_value, steps, path_cells,
                     random_dialogues, seed) -> dict:
    """The options of the cascade, checked with the CLI's words before any file is read or any judge runs."""
    alpha, delta = _share_option(alpha, "--alpha"), _share_option(delta, "--delta")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (tolerance >= 0):
        raise CalibrationError(must_be("--tolerance", "a number of score points >= 0", tolerance))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise CalibrationError(must_be("--steps", "a positive whole number", steps))
    if path_cells is not None and (isinstance(path_cells, bool) or not isinstance(path_cells, int) or path_cells < 1):
        raise CalibrationError(must_be("--path-cells", "a positive whole number", path_cells))
    if isinstance(random_dialogues, bool) or not isinstance(random_dialogues, int) or random_dialogues < 0:
        raise CalibrationError(must_be("--random-dialogues", "a whole number of at least 0", random_dialogues))
    if units not in UNITS:
        raise CalibrationError(must_be("--units", "one of " + ", ".join(UNITS), units))
    return dict(alpha=alpha, delta=delta, criteria=criteria_option(criteria), tolerance=tolerance, signal=signal,
                units=units, scale=scale, failure_value=failure_value, steps=steps, path_cells=path_cells,
                random_dialogues=random_dialogues, seed=seed_option(seed))


def _run_source(name: str, path, judge) -> pd.DataFrame:
    """What a run judge has judged so far (its judgments file, or no judgment yet), naming the file and the rubric
    it judges with (the scale the human labels are checked against)."""
    from judge.rubric import resolve_rubric_path
    from judge.table import TABLE_COLUMNS

    from ..io import load_judge_scores

    frame = pd.DataFrame(columns=TABLE_COLUMNS)
    if path.is_file() and path.stat().st_size > 0:
        try:
            frame = load_judge_scores(path)
        except CalibrationError as exc:
            raise CalibrationError(f"judge {name}'s judgments file is not one this tool wrote ({exc}): it is left "
                                   "untouched; move it away or choose another --output-dir") from None
    frame.attrs.update(path=str(path), rubric_file=str(resolve_rubric_path(judge.options.rubric)),
                       tokens_from=str(path))
    return frame


def _every_cell(judge, criteria, human, scale) -> dict[str, set]:
    """Every (item, system) of a run judge's input, for escalate's criteria (default: those of its rubric's that
    the human labels have: a criterion without labels cannot be decided, so it is not paid for). The labels are read
    and checked against the rubric's scales first: a bad label is refused before the judge runs, not after."""
    from judge.items import ItemFile
    from judge.rubric import load_rubric, resolve_rubric_path

    from ..io import judge_scales, read_human_labels
    from ..options import scale_option

    rubric = load_rubric(judge.options.rubric)
    named = pd.DataFrame({"rubric": [rubric.ref]})
    named.attrs["rubric_file"] = str(resolve_rubric_path(judge.options.rubric))
    labels = read_human_labels(human, judge_scales(named, scale_option(scale), named)[0])
    chosen = rubric.select(criteria)
    if criteria is None:
        labelled = set(labels["criterion"].astype(str))
        chosen = [c for c in chosen if c.id in labelled]
        if not chosen:
            raise CalibrationError(f"the human labels name no criterion of rubric {rubric.name!r} "
                                   f"({', '.join(c.id for c in rubric.criteria)}), which the first judge judges with")
    keys = {(item.id, item.system) for item in ItemFile(judge.options.input, rubric.inputs)}
    return {c.id: keys for c in chosen}


def _cascade(human, listed, *, alpha: float, delta: float, criteria, tolerance: float, signal, units: str, scale,
             failure_value, steps: int, path_cells, random_dialogues: int, seed: int, later: set) -> EscalateResult:
    """The cascade of the judges as they have judged so far (name -> path or frame); `later`: judges run on the
    cells the cascade needs only, whose other cells are not the cascade's (nor missing)."""
    from ..alignment import expand_all_criteria
    from ..io import label_at
    from ..trust.select import read_judges

    names = [n for n, _ in listed]
    signals_asked = _signal_map(signal, names)
    frames, labels, notes = read_judges(listed, human, scale, failure_value)
    where = labels.attrs.get("path", "the human labels")
    label_criteria = sorted(set(labels["criterion"]))
    frames = {n: expand_all_criteria(f, label_criteria) for n, f in frames.items()}
    judged = sorted(set().union(*(set(f["criterion"]) for f in frames.values())))
    warnings = [f"note: {n}" for n in notes]

    # Labels must land on judged cells: a label for an item, system or criterion no judge judged is a mistake.
    cells_of = {n: set(zip(f["item_id"], f["system"], f["criterion"])) for n, f in frames.items()}
    every = set().union(*cells_of.values())
    usable = labels[labels["score"].notna() | labels["label"].notna()]
    for column, known, what in (("criterion", set(judged), "criterion"),
                                ("item_id", {c[0] for c in every}, "item"),):
        off = ~usable[column].isin(known)
        if off.any():
            row = usable[off].iloc[0]
            raise CalibrationError(f"{label_at(usable, row, where)}: {what} {row[column]!r} is not judged by any "
                                   f"judge (judged criteria: {', '.join(judged)}); labels from another rubric or "
                                   f"study? ({int(off.sum())} label(s) like it)")
    pair_systems = {(c[0], s, c[2]) for n, f in frames.items() for c, s1, s2 in
                    zip(zip(f["item_id"], f["system"], f["criterion"]), f["system_1"], f["system_2"])
                    if isinstance(s1, str) for s in (s1, s2)}
    lab_cells = list(zip(usable["item_id"], usable["system"], usable["criterion"]))
    off = np.array([c not in every and c not in pair_systems for c in lab_cells], bool)
    if off.any():
        row = usable[off].iloc[0]
        raise CalibrationError(f"{label_at(usable, row, where)}: item {row.item_id!r}, system {row.system!r}, "
                               f"criterion {row.criterion!r} is not judged by any judge ({int(off.sum())} label(s) "
                               "like it)")
    annotators = usable.groupby(["item_id", "system", "criterion"])["annotator"].nunique()
    if len(annotators) and annotators.max() <= 1:
        warnings.append("every labelled cell has one annotator: agreement is with that one person, not a majority")

    wanted = judged if criteria is None else criteria
    unknown = [c for c in wanted if c not in judged]
    if unknown:
        raise CalibrationError(f"--criteria {unknown[0]!r} is not judged by any judge (they judge {', '.join(judged)})")
    labelled_cells = set(lab_cells)
    decisions, threshold_rows, paths, curves, signal_rows, cost_rows, agreement = [], [], [], [], [], [], {}
    tests, pending, judged_cells = {}, [], {}
    token_maps = {n: _tokens(s) for n, s in listed}
    for criterion in wanted:
        parts = {n: f[f["criterion"] == criterion] for n, f in frames.items()}
        present = [n for n in names if not parts[n].empty]
        kinds = {n: _kind(parts[n]) for n in present}
        if len(set(kinds.values())) > 1:
            raise CalibrationError(f"{criterion}: the judges give different kinds of verdict ("
                                   + ", ".join(f"{n}: {k}" for n, k in kinds.items()) + "): another rubric?")
        kind = next(iter(kinds.values()))
        # the cells are those of the judges that judge everything given to them (a later run judge's other
        # judgments, made for an earlier state of the files, are not the cascade's)
        cells = pd.concat([p[["item_id", "system", "system_1", "system_2"]] for n, p in parts.items()
                           if n not in later]) \
            .drop_duplicates(["item_id", "system"]).sort_values(["item_id", "system"]).reset_index(drop=True)
        missing = {n: len(cells) - len(parts[n]) for n in names if len(parts[n]) < len(cells) and n not in later}
        if missing:
            warnings.append(f"{criterion}: the judges' files cover different cells ("
                            + ", ".join(f"{n} lacks {m}" for n, m in missing.items())
                            + " of " + f"{len(cells)}): a judge decides only the cells it judged; the rest pass on")
        index = pd.MultiIndex.from_frame(cells[["item_id", "system"]])
        verdicts = {n: _verdicts(parts[n], kind).set_axis(pd.MultiIndex.from_frame(parts[n][["item_id", "system"]]))
                    .reindex(index).to_numpy(object) for n in names}
        for n in names:
            verdicts[n] = np.array([None if (v is None or (isinstance(v, float) and math.isnan(v))) else v
                                    for v in verdicts[n]], object)
        rows = {n: parts[n].set_index(["item_id", "system"]).reindex(index) for n in names}
        chosen_signal = {}
        for n in names:
            found = available_signals(parts[n], kind, len(names)) if not parts[n].empty else ["none"]
            asked = signals_asked.get(n)
            if asked and asked not in found and not parts[n].empty:  # a run judge yet to judge: not yet
                raise CalibrationError(f"--signal {n}={asked}: judge {n} does not record it for {criterion} "
                                       f"(it records: {', '.join(found)})")
            chosen_signal[n] = asked or found[0]
        human_side = human_verdicts(labels, criterion, kind, cells)
        if kind == "likert" and labels.loc[labels["criterion"] == criterion, "label"].notna().any():
            raise CalibrationError(f"{where}: criterion {criterion!r}: the judges give scores, the human labels are "
                                   "text labels: labels from another rubric or scale?")
        if kind == "categorical" and labels.loc[labels["criterion"] == criterion, "label"].isna().all() and \
                labels.loc[labels["criterion"] == criterion, "score"].notna().any():
            warnings.append(f"{criterion}: the judges give labels and the humans numbers: compared as text")
        # A cell is labelled when the humans labelled it, or (pairwise) labelled both of its systems on that item.
        labelled_here = np.array([(i, s, criterion) in labelled_cells or (
            isinstance(s1, str) and (i, s1, criterion) in labelled_cells and (i, s2, criterion) in labelled_cells)
            for i, s, s1, s2 in zip(cells["item_id"], cells["system"], cells["system_1"], cells["system_2"])])
        is_cal = labelled_here & human_side.map(lambda h: h is not None).to_numpy()
        conf = np.full((len(cells), len(names)), np.nan)
        agree = np.zeros((len(cells), len(names)), bool)
        for k, n in enumerate(names):
            others = [verdicts[o] for o in names if o != n]
            table = rows[n]
            for i, row in enumerate(table.itertuples(index=False)):
                v = verdicts[n][i]
                conf[i, k] = _confidence(row, v, kind, chosen_signal[n], tolerance, [o[i] for o in others])
                if is_cal[i]:
                    agree[i, k] = _agrees(v, human_side.iloc[i], kind, tolerance)
        n_cal = int(is_cal.sum())
        need = min_labels(alpha, delta)
        if n_cal < need:
            raise CalibrationError(
                f"{criterion}: {n_cal} labelled cells, too few for alpha {alpha:g} and delta {delta:g}: even with no "
                f"disagreement at all, fewer than {need} accepted labelled cells cannot show agreement >= "
                f"{1 - alpha:g} at confidence {1 - delta:g}; label at least {need} cells of {criterion} (several times "
                f"that for useful coverage), or ask a larger alpha or delta")
        pool = ~labelled_here
        if not pool.any():
            raise CalibrationError(f"{criterion}: every judged cell has a human label: nothing to decide")
        groups = cells["item_id"].to_numpy()[is_cal]
        several = pd.Series(groups).value_counts().max() > 1
        by_dialogue = units == "dialogues" or (units == "auto" and several)
        if by_dialogue:
            tests[criterion] = (f"testing by betting over {len(set(groups))} labelled dialogues (their cells are not "
                                "independent: each dialogue is one unit)")
            # the betting test's largest stake is 0.75 / (1 - alpha): with no disagreement and every cell accepted
            # its wealth grows by at most 1 + 0.75 alpha / (1 - alpha) per dialogue, and must reach 1 / delta
            need_units = max(need, math.ceil(math.log(1 / delta) / math.log1p(0.75 * alpha / (1 - alpha)) - 1e-9))
            if len(set(groups)) < need_units:
                raise CalibrationError(
                    f"{criterion}: {len(set(groups))} labelled dialogues, too few for alpha {alpha:g} and delta "
                    f"{delta:g}: with dialogues as units even no disagreement at all needs {need_units}; label at "
                    f"least {need_units} dialogues (several times that for useful coverage), or --units cells if the "
                    "labelled cells were drawn one by one")
        else:
            tests[criterion] = f"exact binomial over {n_cal} labelled cells"
        path_pool = path_sample(pool, path_cells, seed)
        lacking = {n: int(np.isnan(conf[path_pool, k]).sum()) for k, n in enumerate(names)}
        lacking = {n: c for n, c in lacking.items() if c > 0.1 * len(path_pool)}
        if lacking:
            warnings.append(f"{criterion}: " + ", ".join(f"{n} has no verdict on {c} of the {len(path_pool)} cells "
                                                         "that fix the path" for n, c in lacking.items())
                            + ": its thresholds are set as if it would not accept them (judge them for coverage)")
        fit = fit_cascade(conf[is_cal], agree[is_cal], conf[path_pool], alpha, delta, steps,
                          groups=groups if by_dialogue else None)
        first = decide(conf, fit.thresholds)
        agreement[criterion] = {"likert": f"the verdict within {tolerance:g} points of the human mean",
                                "categorical": "the human majority label (on a tie, one of the tied labels)",
                                "pairwise": "the human majority verdict for the pair, tie (0) included, or the one "
                                            "the human means give"}[kind]
        # A cascade run in rounds: each judge must judge the labelled cells and the cells that fix the path first,
        # then the cells every judge before it escalated; what it has not judged yet is pending (run it on them, then
        # escalate again: the thresholds depend on the labelled and the path's cells only, so they settle once those
        # are judged).
        judged = np.column_stack([rows[n]["status"].notna().to_numpy() for n in names])
        waiting = set()
        fixing = np.union1d(path_pool, np.flatnonzero(is_cal))  # the thresholds depend on these cells only
        for j, n in enumerate(names):
            waiting |= {(i, n) for i in fixing if not judged[i, j]}
        if not waiting:  # the thresholds are final only once every judge has judged those cells
            for i in np.nonzero(pool)[0]:
                if first[i] < 0:
                    j = next((j for j in range(len(names)) if not judged[i, j]), None)
                    if j is not None:
                        waiting.add((i, names[j]))
        for i, n in sorted(waiting, key=lambda w: (names.index(w[1]), w[0])):
            pending.append({"item_id": cells["item_id"].iloc[i], "system": cells["system"].iloc[i],
                            "criterion": criterion, "judge": n})
        for i in np.nonzero(pool)[0]:
            k = first[i]
            decisions.append({"item_id": cells["item_id"].iloc[i], "system": cells["system"].iloc[i],
                              "criterion": criterion, "decided_by": names[k] if k >= 0 else HUMAN,
                              "verdict": verdicts[names[k]][i] if k >= 0 else None,
                              "confidence": conf[i, k] if k >= 0 else np.nan})
        cal_first, pool_first = first[is_cal], first[pool]
        cal_agree = agree[is_cal]
        total_n = total_e = 0
        for k, n in enumerate(names):
            mine = cal_first == k
            n_k = int(mine.sum())
            e_k = int((~cal_agree[mine, k]).sum())
            total_n, total_e = total_n + n_k, total_e + e_k
            threshold_rows.append({"criterion": criterion, "judge": n, "signal": chosen_signal[n],
                                   "threshold": fit.thresholds[k], "calibration_decided": n_k,
                                   "agreement": (n_k - e_k) / n_k if n_k else np.nan,
                                   "agreement_bound": float(agreement_bound(e_k, n_k, delta)) if n_k and not by_dialogue
                                   else np.nan,
                                   "unlabelled_decided": int((pool_first == k).sum()),
                                   "unlabelled_share": float((pool_first == k).mean())})
        threshold_rows.append({"criterion": criterion, "judge": "cascade", "signal": "", "threshold": np.nan,
                               "calibration_decided": total_n,
                               "agreement": (total_n - total_e) / total_n if total_n else np.nan,
                               "agreement_bound": float(agreement_bound(total_e, total_n, delta))
                               if total_n and not by_dialogue else np.nan,  # cells independent: only then
                               "unlabelled_decided": int((pool_first >= 0).sum()),
                               "unlabelled_share": float((pool_first >= 0).mean())})
        threshold_rows.append({"criterion": criterion, "judge": HUMAN, "signal": "", "threshold": np.nan,
                               "calibration_decided": int((cal_first < 0).sum()), "agreement": np.nan,
                               "agreement_bound": np.nan, "unlabelled_decided": int((pool_first < 0).sum()),
                               "unlabelled_share": float((pool_first < 0).mean())})
        if fit.chosen < 0:
            warnings.append(f"{criterion}: no confident verdict could be guaranteed (agreement >= {1 - alpha:g} at "
                            f"{1 - delta:g}): every unlabelled cell goes to humans")
        path = fit.path.rename(columns={f"threshold_{k}": f"threshold_{n}" for k, n in enumerate(names)})
        paths.append(path.assign(criterion=criterion)[["criterion", *path.columns]])
        for k, n in enumerate(names):
            curves.append(_risk_coverage(conf[is_cal, k], agree[is_cal, k], criterion, n, chosen_signal[n]))
            for s in (available_signals(parts[n], kind, len(names)) if not parts[n].empty else []):
                values = np.array([_confidence(row, verdicts[n][i], kind, s, tolerance,
                                               [verdicts[o][i] for o in names if o != n])
                                   for i, row in enumerate(rows[n].itertuples(index=False))])
                signal_rows.append(_signal_row(values[is_cal], agree[is_cal, k], criterion, n, s,
                                               s == chosen_signal[n]))
        in_path = np.zeros(len(cells), bool)
        in_path[path_pool] = True
        cost_rows += _cost(token_maps, names, cells, criterion, pool, first, chosen_signal, in_path, judged)
        for j, n in enumerate(names):
            mine = cells[judged[:, j]]
            judged_cells.setdefault(n, []).append(mine[["item_id", "system"]].assign(criterion=criterion))
    decisions_frame = pd.DataFrame(decisions, columns=DECISION_COLUMNS)
    decisions_frame = decisions_frame.sort_values(["criterion", "item_id", "system"], kind="stable")
    decisions_frame = decisions_frame.reset_index(drop=True)
    cost = _cost_table(cost_rows)
    plan = _plan(decisions_frame, random_dialogues, seed)
    return EscalateResult(decisions_frame, pd.DataFrame(threshold_rows, columns=THRESHOLD_COLUMNS),
                          pd.concat(paths, ignore_index=True), pd.concat(curves, ignore_index=True),
                          pd.DataFrame(signal_rows), cost, alpha, delta, float(tolerance), names, agreement, plan,
                          seed, tests, pd.DataFrame(pending, columns=["item_id", "system", "criterion", "judge"]),
                          warnings, {n: pd.concat(f, ignore_index=True) for n, f in judged_cells.items()})


def _risk_coverage(conf: np.ndarray, agree: np.ndarray, criterion: str, judge: str, signal: str,
                   points: int = 50) -> pd.DataFrame:
    """The judge alone on the calibration cells: at each threshold (its distinct confidences, at most `points`), the
    share of cells it would accept and their agreement with humans."""
    finite = np.isfinite(conf)
    values = np.unique(conf[finite])[::-1]
    if len(values) > points:
        values = np.unique(np.quantile(conf[finite], np.linspace(1, 0, points), method="lower"))[::-1]
    rows = []
    for v in values:
        accepted = finite & (conf >= v)
        rows.append({"criterion": criterion, "judge": judge, "signal": signal, "threshold": float(v),
                     "coverage": float(accepted.mean()), "n_accepted": int(accepted.sum()),
                     "agreement": float(agree[accepted].mean())})
    return pd.DataFrame(rows, columns=["criterion", "judge", "signal", "threshold", "coverage", "n_accepted",
                                       "agreement"])


def _signal_row(conf, agree, criterion, judge, signal, used) -> dict:
    """How well a signal ranks agreeing verdicts above disagreeing ones on the calibration cells (AUROC; 0.5 = no
    better than chance). Shown only: the signal used is chosen by what the file records, never by this number."""
    from scipy.stats import rankdata

    finite = np.isfinite(conf)
    c, a = conf[finite], agree[finite]
    pos, neg = int(a.sum()), int((~a).sum())
    auc = np.nan
    if pos and neg:
        ranks = rankdata(c)
        auc = (ranks[a].sum() - pos * (pos + 1) / 2) / (pos * neg)
    return {"criterion": criterion, "judge": judge, "signal": signal, "used": used, "n": int(finite.sum()),
            "agreement": float(a.mean()) if len(a) else np.nan, "auroc": float(auc),
            "distinct_values": len(np.unique(c))}


def _cost(token_maps, names, cells, criterion, pool, first, chosen_signal, in_path, judged) -> list[dict]:
    """Tokens on the unlabelled cells: each judge runs on the cells that fix the path (every unlabelled cell unless
    --path-cells) and on those that reach it (every cell if a jury signal is used), against the strongest (last)
    judge alone. `judged` (cells x judges): the cells (labelled ones too) each judge has judged; the rest it was
    spared, against judging every cell."""
    rows = []
    jury = any(s == "jury" for s in chosen_signal.values())
    keys = [(i, s, criterion) for i, s in zip(cells["item_id"], cells["system"])]
    for k, n in enumerate(names):
        tokens = token_maps[n]
        reach = pool & ((first < 0) | (first >= k) | in_path) if not jury else pool
        values = [tokens.get(keys[i]) for i in np.nonzero(reach)[0]]
        alone = [tokens.get(keys[i]) for i in np.nonzero(pool)[0]]
        rows.append({"judge": n, "cells_run": int(reach.sum()), "pool": int(pool.sum()),
                     "judged": int(judged[:, k].sum()), "cells": len(cells),
                     "tokens": float(np.nansum([v for v in values if v is not None])) if tokens else np.nan,
                     "tokens_alone": float(np.nansum([v for v in alone if v is not None])) if tokens else np.nan})
    return rows


def _cost_table(rows: list[dict]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame(columns=COST_COLUMNS)
    frame = pd.DataFrame(rows).groupby("judge", sort=False).sum(min_count=1).reset_index()
    out = [{"what": f"judge {r.judge}", "cells_run": int(r.cells_run), "tokens": r.tokens, "judged": int(r.judged),
            "spared": int(r.cells - r.judged)} for r in frame.itertuples()]
    out.append({"what": "cascade", "cells_run": int(frame["cells_run"].sum()),
                "tokens": frame["tokens"].sum(min_count=1), "judged": int(frame["judged"].sum()),
                "spared": int((frame["cells"] - frame["judged"]).sum())})
    last = frame.iloc[-1]
    out.append({"what": f"strongest ({last['judge']}) alone", "cells_run": int(last["pool"]),
                "tokens": last["tokens_alone"], "judged": int(last["cells"]), "spared": 0})
    return pd.DataFrame(out, columns=COST_COLUMNS)


def _plan(decisions: pd.DataFrame, random_dialogues: int, seed: int) -> pd.DataFrame:
    """plan.csv for `judge export --plan DIR` (item_id,part,reason): every dialogue with a cell escalated to humans
    (part targeted), and `random_dialogues` dialogues drawn uniformly from all decided ones (part random: the
    sample `judge estimate` needs; targeted dialogues never enter its estimates)."""
    dialogues = sorted(set(decisions["item_id"]))
    escalated = decisions[decisions["decided_by"] == HUMAN].groupby("item_id")["criterion"].agg(
        lambda c: sorted(set(c)))
    counts = decisions[decisions["decided_by"] == HUMAN].groupby("item_id").size()
    rng = np.random.default_rng(seed)
    drawn = set(rng.choice(dialogues, size=min(random_dialogues, len(dialogues)), replace=False)) \
        if random_dialogues and dialogues else set()
    rows = []
    for item in dialogues:
        if item in drawn:
            rows.append({"item_id": item, "part": "random", "reason": "uniform draw of the decided dialogues",
                         "inclusion_probability": min(random_dialogues, len(dialogues)) / len(dialogues)})
        elif item in escalated.index:
            rows.append({"item_id": item, "part": "targeted",
                         "reason": f"escalated: {counts[item]} cell(s) ({', '.join(escalated[item])})",
                         "inclusion_probability": 1.0})
    return pd.DataFrame(rows, columns=["item_id", "part", "reason", "inclusion_probability"])
