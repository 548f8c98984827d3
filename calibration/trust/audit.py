"""`judge audit`: the judge's known biases, each measured against the humans' own effect and the judge's re-run noise.

Every interval is a percentile bootstrap over dialogues, with one (B, dialogues) matrix of resample counts shared
by every criterion and statistic (calibration.stats.resample_counts). Each statistic is a ratio of per-dialogue
sums, so a resample is one matrix product: counts @ sums, no loop over resamples.

Length is measured in words of the candidate, centred within its dialogue (only how much longer a summary is than
the dialogue's other summaries counts: a long dialogue has long summaries of every quality) and divided by the
pooled within-dialogue standard deviation of length, so a slope reads "points per typical length difference
between summaries of one dialogue"; that SD is reported in words beside it. The judge's slope and the humans' slope
are fitted on the same summaries, and the excess is the slope of (judge - human): a paired difference of slopes.
It is NOT the length coefficient of judge ~ human + length: label noise attenuates the human coefficient and
pushes the humans' own taste for length into the length term (tests/test_audit.py shows both).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from ..errors import CalibrationError
from ..result import Result
from ..stats import expanded_tail, holm, resample_counts, widened_share

NOISE_COLUMNS = ["criterion", "source", "n", "changed_share", "ci_low", "ci_high", "mean_abs_change"]
LENGTH_COLUMNS = ["criterion", "mode", "n_summaries", "n_dialogues", "length_sd_words", "judge_slope",
                  "judge_slope_ci_low", "judge_slope_ci_high", "human_slope", "human_slope_ci_low",
                  "human_slope_ci_high", "excess_slope", "excess_ci_low", "excess_ci_high", "excess_dialogues",
                  "effect", "note",
                  "n_pairs", "prefers_longer", "prefers_longer_ci_low", "prefers_longer_ci_high",
                  "human_prefers_longer", "human_prefers_longer_ci_low", "human_prefers_longer_ci_high"]
CONTROLLED_COLUMNS = ["criterion", "system", "n", "raw_mean", "raw_ci_low", "raw_ci_high", "length_controlled",
                      "lc_ci_low", "lc_ci_high", "mean_length_z", "raw_rank", "lc_rank", "rank_changed",
                      "human_mean"]
POSITION_COLUMNS = ["criterion", "mode", "stratum", "n", "flip_rate", "ci_low", "ci_high", "first_shown_wins",
                    "first_shown_ci_low", "first_shown_ci_high", "position_slope", "position_slope_ci_low",
                    "position_slope_ci_high", "effect"]
SELF_COLUMNS = ["criterion", "self_systems", "n_dialogues", "judge_gap", "judge_gap_ci_low", "judge_gap_ci_high",
                "human_gap", "human_gap_ci_low", "human_gap_ci_high", "self_preference", "ci_low", "ci_high",
                "excess_dialogues", "effect", "note"]
# Human quality gap strata for the pairwise position breakdown (absolute difference of mean human scores).
GAP_STRATA = ((0.0, 0.5, "human gap < 0.5"), (0.5, 1.5, "human gap 0.5-1.5"), (1.5, math.inf, "human gap >= 1.5"))
NO_LABELS_NOTE = ("without human labels the gap cannot separate the judge's bias from the systems really being "
                  "better or worse")


@dataclass
class AuditResult(Result):

    verb: ClassVar[str] = "audit"
    mode: str  # "score" (pointwise or a CSV), "block" or "pairwise"
    criteria: list[str]
    noise: pd.DataFrame
    length: pd.DataFrame
    length_controlled: pd.DataFrame
    position: pd.DataFrame
    self_preference: pd.DataFrame
    sentences: list[str]
    warnings: list[str]
    n_resamples: int
    seed: int
    has_human: bool
    length_threshold: float  # pairwise: lengths differ by more than this share of the longer
    length_unit: str  # "characters" for scripts written without spaces (calibration.trust.audit.length_unit)
    flags: int  # findings tested together (Holm, 5% family-wise)
    probes: pd.DataFrame | None = None  # set by audit() when probes were judged

    def files(self) -> dict[str, str]:
        files = {"noise.csv": self.noise, "length.csv": self.length, "length_controlled.csv": self.length_controlled,
                 "position.csv": self.position, "self_preference.csv": self.self_preference}
        if self.probes is not None:
            files["probes.csv"] = self.probes
        return {name: frame.to_csv(index=False) for name, frame in files.items()}

    def report_html(self) -> str:
        from .report import audit_section  # matplotlib: only when a report is asked for

        return audit_section(self)

    def text(self) -> str:
        return "\n".join(self.sentences) + "\n"


# -- reading --------------------------------------------------------------------------------------------------------


def _letter_index(letter) -> float:
    """Shown position of a block letter: A=0, B=1, ..., Z=25, AA=26 (judge.judging.block_letters)."""
    if not isinstance(letter, str) or not letter.isalpha() or not letter.isupper() or len(letter) > 2:
        return math.nan
    if len(letter) == 1:
        return float(ord(letter) - 65)
    return float((ord(letter[0]) - 64) * 26 + ord(letter[1]) - 65)


def _sample_change(samples, both_orders: bool) -> float:
    """Share of pairs of plain re-asks (samples of one prompt) whose verdicts differ; NaN with fewer than two.

    A pair judged in both orders holds the forward samples, then the swapped ones: only samples of one order are
    re-asks of the same prompt."""
    if not isinstance(samples, (list, tuple)):
        return math.nan
    groups = [samples[:len(samples) // 2], samples[len(samples) // 2:]] if both_orders else [samples]
    differ = total = 0
    for group in groups:
        k = len(group)
        if k < 2:
            continue
        counts = pd.Series([str(v) for v in group]).value_counts().to_numpy()
        total += k * (k - 1)
        differ += k * (k - 1) - int((counts * (counts - 1)).sum())
    return differ / total if total else math.nan


def read_judgments(judgments, score_column: str | None = None, failure_value: float | None = None) -> pd.DataFrame:
    """The judgments table (judge/table.py: samples, positions and orders beside the verdicts), from a path or as
    given; a CSV of scores has the verdicts only."""
    from ..io import read_judge_scores

    frame, where = read_judge_scores(judgments, score_column, failure_value)
    frame.attrs["path"] = str(where)
    for name in ("samples", "position", "forward", "swapped", "fingerprint"):  # what read_judge_scores may lack
        if name not in frame.columns:
            frame[name] = None
    frame["item_id"] = frame["item_id"].astype(str)
    frame["system"] = frame["system"].astype(str)
    return frame


def read_items(items) -> pd.DataFrame:
    """(item_id, system, words, text) for every candidate of the items: single candidates and both sides of pairs
    (the text for pairwise style control's markdown counts).

    `words` is the candidate's length in the unit that fits its language (`attrs["length_unit"]`: characters when
    most of the text is Chinese, Japanese or Korean, which put no spaces between words; words otherwise). An empty
    candidate the judge rated is length 0, counted in `attrs["empty"]`, not bad input: items are read for their
    lengths, not judged again. `attrs["judged_keys"]` holds every (item_id, judged system) the file defines, pairs'
    "A|B" keys included (one dialogue may carry every pair of its systems)."""
    from judge.errors import JudgeError
    from judge.items import Item, _records

    if isinstance(items, (str, Path)):
        try:
            records = [(f"{items}:{number}", record) for number, record in _records(Path(items))]
        except JudgeError as exc:
            raise CalibrationError(str(exc)) from None
    else:
        rows = items.to_dict("records") if isinstance(items, pd.DataFrame) else list(items)
        records = [(f"--items row {n}", r) for n, r in enumerate(rows, start=1)]
    loaded = []
    for where, record in records:
        record = {k: v for k, v in record.items() if not _missing(v)}
        # Lengths are all the audit needs: an empty candidate or dialogue is measured (0), not refused.
        texts = {k: record[k] for k in ("candidate", "candidate_1", "candidate_2") if isinstance(record.get(k), str)}
        placeholder = {k: v if v.strip() else "-" for k, v in texts.items()}
        if not str(record.get("dialogue", "")).strip():
            placeholder["dialogue"] = "-"
        try:
            item = Item.model_validate({**record, **placeholder})
        except Exception as exc:  # pydantic's message, first line
            raise CalibrationError(f"{where}: not an item: {str(exc).splitlines()[0]}") from None
        loaded.append((item, texts))
    unit = length_unit(t for _, texts in loaded for t in texts.values())
    rows = []
    for item, texts in loaded:
        if item.is_pair:
            rows.append((item.id, item.system_1, _length(texts.get("candidate_1"), unit), item.system,
                         texts.get("candidate_1", "")))
            rows.append((item.id, item.system_2, _length(texts.get("candidate_2"), unit), item.system,
                         texts.get("candidate_2", "")))
        else:
            rows.append((item.id, item.system, _length(texts.get("candidate"), unit), item.system,
                         texts.get("candidate", "")))
    frame = pd.DataFrame(rows, columns=["item_id", "system", "words", "item_system", "text"])
    judged_keys = set(zip(frame["item_id"], frame["item_system"]))
    empty = int(sum(not t.strip() for _, texts in loaded for t in texts.values()))
    frame = frame.drop_duplicates(["item_id", "system"])
    frame.attrs.update(length_unit=unit, empty=empty, judged_keys=judged_keys)
    return frame


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


# Han, kana and hangul: scripts written without spaces between words.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def length_unit(texts) -> str:
    """'characters' when most letters of the candidates are of a script written without spaces, else 'words'."""
    letters = unspaced = 0
    for text in texts:
        letters += sum(not c.isspace() for c in text)
        unspaced += len(_UNSPACED.findall(text))
    return "characters" if letters and unspaced > letters / 2 else "words"


def _length(text: str | None, unit: str) -> int:
    if not text:
        return 0
    return len(text.split()) if unit == "words" else sum(not c.isspace() for c in text)


def read_human(human, scales=None) -> pd.DataFrame:
    """The human mean per (item, system, criterion); labels checked against `scales` (calibration.io)."""
    from ..humans import aggregate_humans
    from ..io import read_human_labels

    if isinstance(human, pd.DataFrame) and "human" in human.columns and "annotator" not in human.columns:
        out = human[["item_id", "system", "criterion", "human"]].astype({"item_id": str, "system": str})
        return out.assign(human_a=np.nan, human_b=np.nan)  # already aggregated by a script: one reading
    labels = read_human_labels(human, scales)  # per annotator (its columns: calibration.io.HUMAN_COLUMNS)
    aggregated = aggregate_humans(labels)[["item_id", "system", "criterion", "human"]]
    # Two independent readings of each summary where it has two annotators or more: the first annotator (by name)
    # and the mean of the others (NaN with one annotator). Their errors are independent, which identifies the
    # judge's gain (Gain).
    numeric = labels[labels["score"].notna()].sort_values("annotator")
    grouped = numeric.groupby(["item_id", "system", "criterion"], sort=False)["score"]
    halves = pd.DataFrame({"human_a": grouped.first(), "human_b": grouped.apply(lambda s: s.iloc[1:].mean())})
    out = aggregated.merge(halves.reset_index(), on=["item_id", "system", "criterion"], how="left")
    return out.astype({"item_id": str, "system": str})


# -- the bootstrap: ratios of per-dialogue sums ---------------------------------------------------------------------


class Dialogues:
    """The dialogues of the audit and one matrix of bootstrap counts over them, shared by every statistic."""

    def __init__(self, item_ids, n_resamples: int, seed: int, confidence: float = 0.95):
        self.ids = np.array(sorted(set(item_ids)))
        self.position = {d: k for k, d in enumerate(self.ids)}
        self.counts = resample_counts(np.random.default_rng(seed), len(self.ids), n_resamples)
        self.confidence = confidence
        # Every statistic is a ratio of sums over dialogues: the expanded percentile interval for their number
        # (calibration.stats.expanded_tail); the plain one covered 0.88-0.92 at 10-20 dialogues. One dialogue has
        # no interval: every resample is that dialogue, and its percentiles the estimate itself.
        self.tail = expanded_tail(confidence, len(self.ids)) if len(self.ids) >= 2 else math.nan

    def index(self, item_ids) -> np.ndarray:
        return np.fromiter((self.position[d] for d in item_ids), dtype=int, count=len(item_ids))

    def sums(self, index: np.ndarray, values) -> np.ndarray:
        return np.bincount(index, weights=np.asarray(values, dtype=float), minlength=len(self.ids))

    def ratio(self, index: np.ndarray, numerator, denominator) -> tuple[float, float, float]:
        """sum(numerator) / sum(denominator) with its dialogue-bootstrap percentile interval."""
        top, bottom = self.sums(index, numerator), self.sums(index, denominator)
        if bottom.sum() <= 0:
            return math.nan, math.nan, math.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            replicates = (self.counts @ top) / (self.counts @ bottom)
        return (float(top.sum() / bottom.sum()), *self.interval(replicates))

    def share(self, index: np.ndarray, events, trials) -> tuple[float, float, float]:
        """A share of events (flips, wins) with an interval that cannot collapse: the bootstrap's, widened to the
        Wilson interval at its effective number of trials (calibration.stats.widened_share). Rare flips gave
        [0%, 0%] in up to 47% of runs and covered 0.37-0.92 with the bootstrap alone."""
        from scipy import stats

        events, trials = np.asarray(events, float), np.asarray(trials, float)
        value, low, high = self.ratio(index, events, trials)
        if not np.isfinite(high):  # no trial (no share), or one dialogue (no interval)
            return value, low, high
        used = int(np.count_nonzero(self.sums(index, trials)))
        # The bootstrap SD read from the interval's half-width.
        spread = (high - low) / (2 * stats.norm.ppf(0.5 + self.confidence / 2))
        return (value, *widened_share(value, low, high, spread, float(trials.sum()), used, self.confidence,
                                      "wilson"))

    def interval(self, replicates: np.ndarray) -> tuple[float, float]:
        """The expanded percentile interval over the defined replicates; none over one dialogue."""
        replicates = replicates[np.isfinite(replicates)]
        if replicates.size < 2 or not np.isfinite(self.tail):
            return math.nan, math.nan
        low, high = np.percentile(replicates, [self.tail, 100.0 - self.tail])
        return float(low), float(high)

    def t_interval(self, estimate: float, se: float, n: int) -> tuple[float, float]:
        """estimate +- sqrt(n / (n - 1)) t_{n-1} se over n dialogues (n >= 2; se the plug-in one, the expansion
        making its variance unbiased): the quantile every expanded interval of the audit uses, so family_wise reads
        the p-value back from it (_p_from_interval: p < 1 - level exactly when it excludes 0)."""
        from scipy import stats

        if not (np.isfinite(estimate) and np.isfinite(se)):
            return math.nan, math.nan
        quantile = math.sqrt(n / (n - 1.0)) * stats.t.ppf(0.5 + self.confidence / 2.0, n - 1)
        return float(estimate - quantile * se), float(estimate + quantile * se)


def _centred(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Values minus their dialogue's mean."""
    total = np.bincount(index, weights=values, minlength=n)
    size = np.bincount(index, minlength=n)
    return values - (total / np.maximum(size, 1))[index]


def _excludes_zero(low: float, high: float) -> bool:
    return bool(np.isfinite(low) and np.isfinite(high) and (low > 0 or high < 0))


# -- the statistics -------------------------------------------------------------------------------------------------


def noise_floor(judge: pd.DataFrame, rerun: pd.DataFrame | None, boot: Dialogues, criteria) -> pd.DataFrame:
    """Per criterion, the share of verdicts that change on a plain re-ask of the same prompt."""
    rows = []
    for criterion in criteria:
        part = judge[(judge["criterion"] == criterion) & judge["status"].isin(["ok", "label"])]
        if rerun is not None:
            other = rerun[rerun["criterion"] == criterion]
            both = part.merge(other, on=["item_id", "system", "criterion"], suffixes=("", "_2"))
            both = both[both["status_2"].isin(["ok", "label"])]
            numeric = both["score"].notna() & both["score_2"].notna()
            changed = np.where(numeric, ~np.isclose(both["score"], both["score_2"]),
                               both["label"].astype(str) != both["label_2"].astype(str)).astype(float)
            source, frame = "rerun", both
            absolute = float((both["score"] - both["score_2"]).abs().mean()) if numeric.any() else math.nan
        else:
            both_orders = part["swapped"].notna().to_numpy()
            share = pd.Series([_sample_change(v, b) for v, b in zip(part["samples"], both_orders)], index=part.index)
            frame = part[share.notna()]
            changed, source = share[share.notna()].to_numpy(), "samples"
            absolute = math.nan
        if frame.empty:
            rows.append({"criterion": criterion, "source": "none", "n": 0})
            continue
        index = boot.index(frame["item_id"].to_numpy())
        value, low, high = boot.ratio(index, changed, np.ones(len(frame)))
        rows.append({"criterion": criterion, "source": source, "n": len(frame), "changed_share": value,
                     "ci_low": low, "ci_high": high, "mean_abs_change": absolute})
    return pd.DataFrame(rows, columns=NOISE_COLUMNS)


def _length_units(judge, words, human, criterion) -> pd.DataFrame:
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")][["item_id", "system", "score"]]
    part = part.merge(words[["item_id", "system", "words"]], on=["item_id", "system"])
    if human is not None:
        columns = ["item_id", "system", "human", "human_a", "human_b"]
        part = part.merge(human[human["criterion"] == criterion].reindex(columns=columns), on=["item_id", "system"])
    return part


# Fewer dialogues with two readings of a summary leave the judge's gain unidentified: no excess is tested.
MIN_GAIN_DIALOGUES = 8
ONE_ANNOTATOR_NOTE = ("fewer than {n} dialogues have summaries read by two annotators: a judge on another scale "
                      "(scores a multiple of the humans') cannot be told from a judge with a taste for it, so the "
                      "excess is not tested; label some summaries twice")
WEAK_NOTE = ("the humans' two readings do not agree beyond what {x} explains (their partial covariance has an "
             "interval reaching 0): the excess is not identified here, so not tested")


class Gain:
    """The judge's gain g on the human scale (judge = dialogue effect + g x quality + noise, within dialogues), by
    instrumental variables: two annotators' readings h_a and h_b of the same summaries have independent errors, so
    cov(judge, h_b) / cov(h_a, h_b) = g, where regressing the judge on the human mean would shrink g by the labels'
    noise. With a covariate x in the model (length; own system), the 2SLS solution of
        judge = g h_a + b x (+ dialogue effects),   instruments (h_b, x)
    gives b, the judge's own effect of x beyond quality as the humans read it, in the judge's points, whatever its
    gain (a judge that follows length and not quality at all, g = 0, has its whole length slope as b). All the
    moments are within-dialogue sums over dialogues, so each bootstrap resample is one matrix product and a 2x2
    solve. A judge whose scores are a compressed copy of quality (g = 0.6) then shows no excess where length goes
    with quality, while `judge slope - human slope` flagged it in 57-100% of audits. Identification needs the two
    readings to agree beyond x (the instrument's relevance): checked on its interval, else no interval."""

    def __init__(self, boot: "Dialogues", index: np.ndarray, judge: np.ndarray, human_a: np.ndarray,
                 human_b: np.ndarray, covariate: np.ndarray):
        n = len(boot.ids)
        two = np.isfinite(human_a) & np.isfinite(human_b)
        # The dialogues that identify g and b: two summaries read twice or more. One alone is absorbed by its
        # dialogue's effect (centred, it is 0): counted, it would add a jackknife replicate equal to b and a degree
        # of freedom b never had, a narrower interval (singletons with fixed effects and clustered errors; Correia,
        # "Singletons, cluster-robust standard errors and fixed effects: a bad mix", 2015).
        self.read_twice = np.bincount(index[two], minlength=n) > 1
        self.dialogues = int(np.count_nonzero(self.read_twice))
        self.boot = boot
        centred = {name: _centred(index[two], values[two], n) for name, values in
                   (("y", judge), ("a", human_a), ("b", human_b), ("x", covariate))}
        at = index[two]
        self.sums = {pair: boot.sums(at, centred[pair[0]] * centred[pair[1]])
                     for pair in ("ba", "bx", "xa", "xx", "by", "xy")}

    def solve(self) -> float:
        """b at the observed dialogues."""
        return float(self._b({k: v.sum() for k, v in self.sums.items()}))

    def leave_one_out(self) -> np.ndarray:
        """b with each dialogue left out in turn (the jackknife's replicates), one per dialogue."""
        return self._b({k: v.sum() - v for k, v in self.sums.items()})

    @staticmethod
    def _b(s: dict):
        """b of the 2x2 2SLS normal equations by Cramer's rule (g, their other unknown, is not needed)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return (s["ba"] * s["xy"] - s["xa"] * s["by"]) / (s["ba"] * s["xx"] - s["bx"] * s["xa"])

    def excess(self, covariate: str = "length") -> tuple[float, float, float, str]:
        """b, the judge's own effect of the covariate beyond quality in its points, with its interval, and a note;
        NaN and the reason when unidentified (too few dialogues with two readings, or a gain whose interval reaches
        0: a weak instrument, e.g. quality moving with length in every dialogue)."""
        if self.dialogues < MIN_GAIN_DIALOGUES:
            return math.nan, math.nan, math.nan, ONE_ANNOTATOR_NOTE.format(n=MIN_GAIN_DIALOGUES)
        # Relevance: h_b predicts h_a beyond x (the first stage's partial covariance, per resample).
        s, counts = self.sums, self.boot.counts
        with np.errstate(invalid="ignore", divide="ignore"):
            partial = lambda w: (w @ s["ba"]) - (w @ s["bx"]) * (w @ s["xa"]) / (w @ s["xx"])  # noqa: E731
            relevance_low, _ = self.boot.interval(partial(counts))
        if not (np.isfinite(relevance_low) and relevance_low > 0):
            return math.nan, math.nan, math.nan, WEAK_NOTE.format(x=covariate)
        b = self.solve()
        # The standard error from the delete-one-dialogue jackknife (CV3 in MacKinnon, Nielsen & Webb, "Cluster-robust
        # inference: a guide to empirical practice", J. Econometrics 2023), with the expanded t quantile. b is a
        # ratio whose denominator nearly vanishes in some bootstrap resamples of few dialogues: the percentiles of
        # those resamples gave an interval too narrow on skewed Likert labels (own-system excess flagged in 5.3-8.0%
        # of audits with nothing planted at 10-20 dialogues, 6.8% of 1000 at 20; the jackknife 4.6-5.5%).
        # Over the dialogues read twice only, on their count's degrees of freedom: the others add nothing to b, and
        # counting them (one annotator on most dialogues) would give the t quantile degrees of freedom b never had.
        dropped = self.leave_one_out()[self.read_twice]
        n = len(dropped)
        if not np.isfinite(dropped).all():  # one dialogue carries the whole identification
            return b, math.nan, math.nan, WEAK_NOTE.format(x=covariate)
        se = math.sqrt((n - 1) / n * float(((dropped - dropped.mean()) ** 2).sum()))
        return (b, *self.boot.t_interval(b, se, n), "")


def _standard_length(boot: Dialogues, index: np.ndarray, words) -> tuple[np.ndarray, float]:
    """Length centred within its dialogue over the pooled within-dialogue SD (z), and that SD in words; z is all
    zeros when no dialogue has candidates of different lengths (SD 0)."""
    centred = _centred(index, np.asarray(words, float), len(boot.ids))
    sd = math.sqrt((centred ** 2).sum() / max(len(centred) - len(np.unique(index)), 1))
    return (centred / sd if sd > 0 else centred), sd


def length_slopes(judge, words, human, boot: Dialogues, criterion: str) -> dict:
    """The judge's, the humans' and the excess slope on within-dialogue standardised length, on the same summaries."""
    units = _length_units(judge, words, human, criterion)
    row = {"criterion": criterion, "n_summaries": len(units), "n_dialogues": units["item_id"].nunique()}
    if units.empty:
        return row
    index = boot.index(units["item_id"].to_numpy())
    z, row["length_sd_words"] = _standard_length(boot, index, units["words"])
    if row["length_sd_words"] == 0:
        return row
    # Slope within dialogues: sum z*y / sum z^2 (z is centred within each dialogue, so y need not be).
    row["judge_slope"], row["judge_slope_ci_low"], row["judge_slope_ci_high"] = boot.ratio(
        index, z * units["score"].to_numpy(float), z * z)
    tested = ("judge_slope_ci_low", "judge_slope_ci_high")
    if human is not None:
        h = units["human"].to_numpy(float)
        row["human_slope"], row["human_slope_ci_low"], row["human_slope_ci_high"] = boot.ratio(index, z * h, z * z)
        gain = Gain(boot, index, units["score"].to_numpy(float), units["human_a"].to_numpy(float),
                    units["human_b"].to_numpy(float), z)
        row["excess_slope"], row["excess_ci_low"], row["excess_ci_high"], row["note"] = gain.excess()
        row["excess_dialogues"] = gain.dialogues
        tested = ("excess_ci_low", "excess_ci_high")
    row["effect"] = _excludes_zero(row[tested[0]], row[tested[1]])
    return row


def length_controlled_means(judge, words, human, boot: Dialogues, criterion: str) -> pd.DataFrame:
    """Each system's mean judge score predicted at equal length, beside the raw mean (alpaca_eval's LC idea).

    score = dialogue effect + system effect + beta * z, fitted by least squares within dialogues (the system
    dummies keep a better system's extra length from being read as length); the length-controlled mean of a
    system is its raw mean minus beta times its mean z (how much longer it is than its dialogues' other
    summaries). Each resample refits beta from the per-dialogue normal equations: one batched solve.
    """
    units = _length_units(judge, words, None, criterion)
    if units.empty:
        return pd.DataFrame(columns=CONTROLLED_COLUMNS)
    n = len(boot.ids)
    index = boot.index(units["item_id"].to_numpy())
    z, _ = _standard_length(boot, index, units["words"])
    systems = sorted(units["system"].unique())
    code = units["system"].map({s: k for k, s in enumerate(systems)}).to_numpy()
    dummies = np.eye(len(systems))[code][:, 1:]
    design = np.column_stack([z, np.apply_along_axis(lambda col: _centred(index, col, n), 0, dummies)]
                             if len(systems) > 1 else [z])
    y = units["score"].to_numpy(float)
    p = design.shape[1]
    outer = np.einsum("ni,nj->nij", design, design).reshape(len(units), p * p)
    xx = np.stack([boot.sums(index, outer[:, k]) for k in range(p * p)], axis=1)  # (dialogues, p*p)
    xy = np.stack([boot.sums(index, design[:, k] * y) for k in range(p)], axis=1)
    beta_point = (np.linalg.pinv(xx.sum(0).reshape(p, p)) @ xy.sum(0))[0]
    gram = (boot.counts @ xx).reshape(-1, p, p)
    beta = np.einsum("bij,bj->bi", np.linalg.pinv(gram), boot.counts @ xy)[:, 0]
    if p > 1:  # a resample whose dialogues confound length with the systems cannot tell beta (pinv's answer would
        # depend on which system is the baseline, i.e. on the names): undefined, left out of the interval
        rank = np.linalg.matrix_rank
        beta[rank(gram) <= rank(gram[:, 1:, 1:])] = np.nan
    rows = []
    for k, system in enumerate(systems):
        mine = code == k
        top_y, top_z = boot.sums(index[mine], y[mine]), boot.sums(index[mine], z[mine])
        size = boot.sums(index[mine], np.ones(mine.sum()))
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = (boot.counts @ top_y) / (boot.counts @ size)
            mean_z = (boot.counts @ top_z) / (boot.counts @ size)
        raw_point, z_point = top_y.sum() / size.sum(), top_z.sum() / size.sum()
        rows.append({"criterion": criterion, "system": system, "n": int(mine.sum()), "raw_mean": raw_point,
                     **dict(zip(("raw_ci_low", "raw_ci_high"), boot.interval(raw))),
                     "length_controlled": raw_point - beta_point * z_point,
                     **dict(zip(("lc_ci_low", "lc_ci_high"), boot.interval(raw - beta * mean_z))),
                     "mean_length_z": z_point})
    frame = pd.DataFrame(rows)
    frame["raw_rank"] = frame["raw_mean"].rank(ascending=False, method="min").astype(int)
    frame["lc_rank"] = frame["length_controlled"].rank(ascending=False, method="min").astype(int)
    frame["rank_changed"] = frame["raw_rank"] != frame["lc_rank"]
    if human is not None:
        means = human[human["criterion"] == criterion].groupby("system")["human"].mean()
        frame["human_mean"] = frame["system"].map(means)
    frame.attrs["beta"] = beta_point
    return frame.reindex(columns=CONTROLLED_COLUMNS).sort_values("raw_rank", kind="stable")


def _pairs(judge: pd.DataFrame, criterion: str) -> pd.DataFrame:
    part = judge[(judge["criterion"] == criterion) & judge["system_1"].notna()].copy()
    part["system_1"] = part["system_1"].astype(str)
    part["system_2"] = part["system_2"].astype(str)
    return part


def _with_human(pairs: pd.DataFrame, human, criterion) -> pd.DataFrame:
    if human is None:
        return pairs.assign(human_1=np.nan, human_2=np.nan)
    means = human[human["criterion"] == criterion].set_index(["item_id", "system"])["human"]
    pairs = pairs.copy()
    pairs["human_1"] = means.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
    pairs["human_2"] = means.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
    return pairs


def pairwise_length(judge, words, human, boot: Dialogues, criterion: str, threshold: float) -> dict:
    """P(the judge prefers the longer candidate | lengths differ by more than `threshold` of the longer one)."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    lengths = words.set_index(["item_id", "system"])["words"]
    w1 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy(float)
    w2 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        apart = np.abs(w1 - w2) / np.maximum(w1, w2) > threshold
    first_longer = w1 > w2
    label = pairs["label"].astype(str).to_numpy()
    decided = apart & np.isin(label, ["1", "2"])
    row = {"criterion": criterion, "mode": "pairwise", "n_pairs": int(decided.sum()),
           "n_dialogues": pairs.loc[decided, "item_id"].nunique()}
    index = boot.index(pairs["item_id"].to_numpy())
    longer = (label == "1") == first_longer
    row["prefers_longer"], row["prefers_longer_ci_low"], row["prefers_longer_ci_high"] = boot.ratio(
        index, (decided & longer).astype(float), decided.astype(float))
    h1, h2 = pairs["human_1"].to_numpy(float), pairs["human_2"].to_numpy(float)
    human_decided = apart & np.isfinite(h1) & np.isfinite(h2) & (h1 != h2)
    if human_decided.any():
        human_longer = (h1 > h2) == first_longer
        row["human_prefers_longer"], row["human_prefers_longer_ci_low"], row["human_prefers_longer_ci_high"] = \
            boot.ratio(index, (human_decided & human_longer).astype(float), human_decided.astype(float))
    return row


def pairwise_position(judge, human, boot: Dialogues, criterion: str) -> list[dict]:
    """Order flips (both orders judged, mapped back to the input's order) and the first-shown candidate's wins."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    pairs = pairs[pairs["forward"].notna() & pairs["swapped"].notna()]
    if pairs.empty:
        return []
    forward, swapped = pairs["forward"].astype(str).to_numpy(), pairs["swapped"].astype(str).to_numpy()
    flip = (forward != swapped).astype(float)
    # In the swapped prompt the input's second candidate was shown first: "2" (read back) is a first-shown win.
    decided = (forward != "0").astype(float) + (swapped != "0").astype(float)
    first = (forward == "1").astype(float) + (swapped == "2").astype(float)
    gap = np.abs(pairs["human_1"].to_numpy(float) - pairs["human_2"].to_numpy(float))
    strata = [("all", np.ones(len(pairs), bool))]
    if np.isfinite(gap).any():
        strata += [(name, (gap >= low) & (gap < high)) for low, high, name in GAP_STRATA]
    index = boot.index(pairs["item_id"].to_numpy())
    rows = []
    for name, mask in strata:
        if not mask.any():
            continue
        row = {"criterion": criterion, "mode": "pairwise", "stratum": name, "n": int(mask.sum())}
        row["flip_rate"], row["ci_low"], row["ci_high"] = boot.share(index, flip * mask, mask.astype(float))
        row["first_shown_wins"], row["first_shown_ci_low"], row["first_shown_ci_high"] = boot.share(
            index, first * mask, decided * mask)
        low, high = row["first_shown_ci_low"] - 0.5, row["first_shown_ci_high"] - 0.5
        row["effect"] = _excludes_zero(low, high)
        rows.append(row)
    return rows


def block_position(judge, boot: Dialogues, criterion: str) -> dict | None:
    """The score's slope on the letter a candidate was shown under (shuffled per dialogue, so identified)."""
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")]
    shown = part["position"].map(_letter_index)
    part, shown = part[shown.notna()], shown[shown.notna()].to_numpy(float)
    if part.empty:
        return None
    index = boot.index(part["item_id"].to_numpy())
    x = _centred(index, shown, len(boot.ids))
    row = {"criterion": criterion, "mode": "block", "stratum": "all", "n": len(part)}
    row["position_slope"], row["position_slope_ci_low"], row["position_slope_ci_high"] = boot.ratio(
        index, x * part["score"].to_numpy(float), x * x)
    row["effect"] = _excludes_zero(row["position_slope_ci_low"], row["position_slope_ci_high"])
    return row


def self_preference(judge, human, boot: Dialogues, criterion: str, self_systems: list[str]) -> dict:
    """How much more the judge rates its own systems than the others, beyond what humans do, paired by dialogue.

    Per dialogue: mean(own) - mean(others) of the judge's scores, of the humans', and of (judge - human); the
    estimate is the mean of that per-dialogue difference over dialogues having both kinds of system.
    """
    part = judge[(judge["criterion"] == criterion) & (judge["status"] == "ok")][["item_id", "system", "score"]]
    if human is not None:
        columns = ["item_id", "system", "human", "human_a", "human_b"]
        part = part.merge(human[human["criterion"] == criterion].reindex(columns=columns), on=["item_id", "system"])
    row = {"criterion": criterion, "self_systems": ",".join(self_systems)}
    mine = part["system"].isin(self_systems).to_numpy()
    index = boot.index(part["item_id"].to_numpy())
    n_self, n_other = boot.sums(index[mine], np.ones(mine.sum())), boot.sums(index[~mine], np.ones((~mine).sum()))
    valid = (n_self > 0) & (n_other > 0)
    row["n_dialogues"] = int(valid.sum())
    if not valid.any():
        row["note"] = "no dialogue has both an own and another system"
        return row

    def gap(values):
        own = boot.sums(index[mine], values[mine]) / np.maximum(n_self, 1)
        rest = boot.sums(index[~mine], values[~mine]) / np.maximum(n_other, 1)
        per_dialogue = np.where(valid, own - rest, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            replicates = (boot.counts @ per_dialogue) / (boot.counts @ valid.astype(float))
        return (float(per_dialogue.sum() / valid.sum()), *boot.interval(replicates))

    score = part["score"].to_numpy(float)
    row["judge_gap"], row["judge_gap_ci_low"], row["judge_gap_ci_high"] = gap(score)
    if human is None:
        row["note"] = NO_LABELS_NOTE
        return row
    h = part["human"].to_numpy(float)
    row["human_gap"], row["human_gap_ci_low"], row["human_gap_ci_high"] = gap(h)
    # The judge's own-system effect beyond quality, on the human scale (Gain): judge_gap - human_gap would call a
    # judge on a compressed scale biased whenever its own systems really are better or worse.
    gain = Gain(boot, index, score, part["human_a"].to_numpy(float), part["human_b"].to_numpy(float),
                mine.astype(float))
    row["self_preference"], row["ci_low"], row["ci_high"], row["note"] = gain.excess("being an own system")
    row["excess_dialogues"] = gain.dialogues
    row["effect"] = _excludes_zero(row["ci_low"], row["ci_high"])
    return row


def pairwise_self_preference(judge, human, boot: Dialogues, criterion: str, self_systems: list[str]) -> dict:
    """Pairs of an own system against another: the judge's win share of the own one (a tie counts half), minus a
    half; with labels, minus the humans' win share on the same pairs (paired), in shares of pairs."""
    pairs = _with_human(_pairs(judge, criterion), human, criterion)
    own_first = pairs["system_1"].isin(self_systems).to_numpy()
    own_second = pairs["system_2"].isin(self_systems).to_numpy()
    label = pairs["label"].astype(str).to_numpy()
    usable = (own_first != own_second) & np.isin(label, ["0", "1", "2"])
    first_wins = np.where(label == "1", 1.0, np.where(label == "2", 0.0, 0.5))
    judge_win = np.where(own_first, first_wins, 1.0 - first_wins)
    h1, h2 = pairs["human_1"].to_numpy(float), pairs["human_2"].to_numpy(float)
    human_first = np.where(h1 > h2, 1.0, np.where(h1 < h2, 0.0, 0.5))
    human_win = np.where(own_first, human_first, 1.0 - human_first)
    index = boot.index(pairs["item_id"].to_numpy())
    row = {"criterion": criterion, "self_systems": ",".join(self_systems),
           "n_dialogues": pairs.loc[usable, "item_id"].nunique()}
    if not usable.any():
        row["note"] = "no pair of an own system against another"
        return row
    row["judge_gap"], row["judge_gap_ci_low"], row["judge_gap_ci_high"] = boot.ratio(
        index, np.where(usable, judge_win - 0.5, 0.0), usable.astype(float))
    labelled = usable & np.isfinite(h1) & np.isfinite(h2)
    if human is None or not labelled.any():
        row["note"] = NO_LABELS_NOTE + " (gaps are win shares minus a half)"
        return row
    row["human_gap"], row["human_gap_ci_low"], row["human_gap_ci_high"] = boot.ratio(
        index, np.where(labelled, human_win - 0.5, 0.0), labelled.astype(float))
    row["self_preference"], row["ci_low"], row["ci_high"] = boot.ratio(
        index, np.where(labelled, judge_win - human_win, 0.0), labelled.astype(float))
    row["effect"] = _excludes_zero(row["ci_low"], row["ci_high"])
    row["note"] = "gaps are win shares of the own systems minus a half, on pairs against other systems"
    return row


# -- one audit, one error rate ------------------------------------------------------------------------------------


def _p_from_interval(estimate: float, low: float, high: float, dialogues: int, confidence: float = 0.95) -> float:
    """Two-sided p-value that the effect is 0, read from its printed interval: the interval is estimate +-
    t_{n-1} x the standard error with the unbiased variance (the sqrt(n / (n - 1)) expansion of the bootstrap's
    plug-in SD is part of that se), so the distance from the estimate to the bound on 0's side over t_{n-1} is the
    se, and the estimate over it a t_{n-1} statistic. Then p < 1 - confidence exactly when the printed interval
    excludes 0: a flag never contradicts its interval (reading the se as half-width / (sqrt(n/(n-1)) t) flagged
    estimates 0.71-1.0 half-widths from 0 at 2 dialogues, 0.975-1.0 at 20, while their interval held 0)."""
    from scipy import stats

    if not all(np.isfinite([estimate, low, high])):  # (one dialogue: t on 0 degrees of freedom gives NaN below)
        return math.nan
    toward_zero = estimate - low if estimate >= 0 else high - estimate
    se = toward_zero / stats.t.ppf(0.5 + confidence / 2, dialogues - 1)
    if se <= 0:
        return 0.0 if estimate != 0 else 1.0
    return float(2 * stats.t.sf(abs(estimate) / se, dialogues - 1))


def family_wise(length: pd.DataFrame, position: pd.DataFrame, self_preference: pd.DataFrame, dialogues: int,
                level: float = 0.05) -> int:
    """Every finding an audit prints (criteria x length, position, self-preference) tested as one family: Holm's
    step-down over their p-values, so that with nothing planted any flag fires in at most `level` of audits (it
    was 54% at 20 dialogues with 12 findings, each tested at 5%). Sets each table's `p_adjusted` and `effect` (the
    flag as printed) in place; returns the number of findings tested."""
    specs = [(length, "excess_slope", "excess_ci_low", "excess_ci_high", "judge_slope", "judge_slope_ci_low",
              "judge_slope_ci_high"),
             (position, "position_slope", "position_slope_ci_low", "position_slope_ci_high", "first_shown_wins",
              "first_shown_ci_low", "first_shown_ci_high"),
             (self_preference, "self_preference", "ci_low", "ci_high", None, None, None)]
    found = []
    for table, *columns in specs:
        table["p_adjusted"] = np.nan
        table["effect"] = pd.Series(False, index=table.index, dtype=object)
        for index, row in table.iterrows():
            est, low, high, alt, alt_low, alt_high = (row.get(c, np.nan) if c else np.nan for c in columns)
            unlabelled = columns[0] != "excess_slope" or not np.isfinite(row.get("human_slope", np.nan))
            # An excess's interval is on the dialogues read twice (Gain.excess), the others' on all of them.
            n = row.get("excess_dialogues", np.nan)
            n = int(n) if np.isfinite(n) else dialogues
            if not np.isfinite(est) and alt is not None and np.isfinite(alt) and unlabelled:
                # No labels (the judge's own slope) or a pairwise stratum (first-shown wins against a half).
                centre = 0.5 if columns[3] == "first_shown_wins" else 0.0
                est, low, high, n = alt - centre, alt_low - centre, alt_high - centre, dialogues
            p = _p_from_interval(est, low, high, n)
            if np.isfinite(p):
                found.append((table, index, p))
    if found:
        adjusted = holm([p for _, _, p in found])
        for (table, index, _), p in zip(found, adjusted):
            table.at[index, "p_adjusted"] = float(p)
            table.at[index, "effect"] = bool(p < level)
    return len(found)


# -- the verb -------------------------------------------------------------------------------------------------------


def _check(judge: pd.DataFrame, words: pd.DataFrame, self_systems, where: str) -> str:
    """The audit's input checks; returns the mode (score, block or pairwise)."""
    rubrics = sorted({r for r in judge["rubric"].dropna().astype(str) if r})
    if len(rubrics) > 1:
        raise CalibrationError(f"{where}: judgments of several rubrics ({', '.join(rubrics)}): audit one rubric's "
                               "judgments at a time")
    pairwise = judge["system_1"].notna()
    if pairwise.any() and not pairwise.all():
        raise CalibrationError(f"{where}: pairwise and single-candidate judgments mixed: audit one mode at a time")
    keys = words.attrs.get("judged_keys") or set(zip(words["item_id"], words["item_system"]))
    missing = [(i, s, line) for i, s, line in zip(judge["item_id"], judge["system"], judge["line"])
               if (i, s) not in keys]
    if missing:
        item, system, line = missing[0]
        more = f" (and {len(missing) - 1} more judgments)" if len(missing) > 1 else ""
        raise CalibrationError(f"{where}:{line}: no item with id {item!r} and system {system!r} in --items{more}: "
                               "the items file must be the one that was judged")
    if self_systems:
        systems = set(judge["system"]) if not pairwise.any() else set(judge["system_1"]) | set(judge["system_2"])
        unknown = [s for s in self_systems if s not in systems]
        if unknown:
            raise CalibrationError(f"--self: no system {unknown[0]!r} in {where} (its systems: "
                                   f"{', '.join(sorted(systems)[:12])})")
    if pairwise.any():
        return "pairwise"
    return "block" if judge["position"].notna().any() else "score"


def _parse_self(value) -> list[str]:
    if value is None:
        return []
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value)]
    if not names or not all(names):
        raise CalibrationError("--self must name one or more systems, comma-separated")
    return names


def audit(judgments, items, human=None, *, self_systems=None, rerun=None, criteria=None, bootstrap: int = 1000,
          seed: int = 0, length_threshold: float = 0.1, score_column: str | None = None,
          probes: dict | None = None, scale=None, allow_different_judge: bool = False,
          failure_value: float | None = None) -> AuditResult:
    """Audit a judge's scores or verdicts: noise floor, length, position and self-preference, per criterion.

    `probes`: {probe name: (its judgments, the (item_id, system) keys it perturbed)}, as
    calibration.trust.probes makes and the CLI judges them (`--probe`). `scale`: (MIN, MAX) for the human labels
    when the judgments name no rubric. `rerun` must be the same judge (model, rubric version, template, decoding, as
    the fingerprints record), or its differences are refused unless `allow_different_judge` (said in the output).

    >>> import calibration
    >>> result = calibration.audit("examples/study/judgments.jsonl", "examples/study/items.jsonl",
    ...                            "examples/study/labels.csv", bootstrap=200)
    >>> sorted(result.files())
    ['length.csv', 'length_controlled.csv', 'noise.csv', 'position.csv', 'self_preference.csv']
    >>> result.text().startswith("clarity: the judge's score moves")  # the toy study's readings barely agree
    True
    """
    from ..options import resamples_option, seed_option

    bootstrap, seed = resamples_option(bootstrap), seed_option(seed, "--bootstrap-seed")
    if not 0.0 <= float(length_threshold) < 1.0:
        raise CalibrationError("--length-threshold must be a share between 0 and 1, e.g. 0.1")
    from ..options import criteria_option

    criteria = criteria_option(criteria)
    self_list = _parse_self(self_systems)
    judge = read_judgments(judgments, score_column, failure_value)
    where = judge.attrs.get("path", "judgments")
    words = read_items(items)
    mode = _check(judge, words, self_list, where)
    warnings: list[str] = []
    if words.attrs.get("empty"):
        warnings.append(f"{words.attrs['empty']} empty candidate(s) in --items: length 0")
    second = None
    if rerun is not None:
        from ..io import judge_differences

        second = read_judgments(rerun, failure_value=failure_value)
        common = judge.merge(second, on=["item_id", "system", "criterion"], suffixes=("", "_rerun"))
        if common.empty:
            raise CalibrationError(f"--rerun: {second.attrs.get('path', 'rerun')} has no judgment in common with "
                                   f"{where} (same item, system and criterion)")
        rerun_models = {m for m in second.get("model", pd.Series(dtype=str)).dropna() if m}
        models = {m for m in judge.get("model", pd.Series(dtype=str)).dropna() if m}
        differences = judge_differences(common["fingerprint"], common["fingerprint_rerun"])
        if not differences and models and rerun_models and models != rerun_models:
            differences = [f"model {', '.join(sorted(models))} -> {', '.join(sorted(rerun_models))}"]
        if differences and not allow_different_judge:
            raise CalibrationError(
                f"--rerun: {second.attrs.get('path', 'rerun')} is not a re-run of the judge of {where}: "
                f"{'; '.join(differences)}; re-run noise must be the same judge's: re-judge with the same settings, "
                "or pass --allow-different-judge")
        if differences:
            warnings.append("--rerun is another judge, used as the noise floor on purpose "
                            f"(--allow-different-judge): {'; '.join(differences)}")
    people = None
    if human is not None:
        from ..io import judge_scales
        from ..options import scale_option

        scales, unchecked = judge_scales(judge, scale_option(scale), judgments)
        warnings += [f"note: {note}" for note in unchecked]
        people = read_human(human, scales)
    if people is not None and (judge["criterion"] == "*").any():
        from ..alignment import expand_all_criteria  # one metric column stands for every labelled criterion

        judge = expand_all_criteria(judge, sorted(set(people["criterion"])))
        judge.attrs["path"] = where
    present = list(dict.fromkeys(judge["criterion"]))
    if criteria:
        unknown = [c for c in criteria if c not in present]
        if unknown:
            raise CalibrationError(f"--criteria: no judgments for criterion {unknown[0]!r} in {where}")
        present = list(criteria)
    if people is not None:
        shared = [c for c in present if c in set(people["criterion"])]
        if not shared:
            raise CalibrationError(f"--human: no criterion in common with {where} ({', '.join(present)})")
        if len(shared) < len(present):
            warnings.append("no human labels for criteria " + ", ".join(c for c in present if c not in shared)
                            + ": their effects are the judge's alone")
        for criterion in shared:
            spread = judge.loc[judge["criterion"] == criterion, "score"].std()
            human_spread = people.loc[people["criterion"] == criterion, "human"].std()
            if spread > 0 and human_spread > 0 and not 1 / 3 <= spread / human_spread <= 3:
                warnings.append(f"{criterion}: the judge's scores (SD {spread:.3g}) and the humans' (SD "
                                f"{human_spread:.3g}) are on different scales: the excess slope and self-preference "
                                "subtract points of one from points of the other; map the judge onto the human "
                                "scale first (judge calibrate --fit-map)")
    boot = Dialogues(judge["item_id"], bootstrap, seed)
    if len(boot.ids) < 2:
        warnings.append("one dialogue: no interval and no flag (every interval resamples dialogues)")
    noise = noise_floor(judge, second, boot, present)
    length_rows, controlled, position_rows, self_rows = [], [], [], []
    for criterion in present:
        labelled = people if people is not None and criterion in set(people["criterion"]) else None
        if mode == "pairwise":
            length_rows.append(pairwise_length(judge, words, labelled, boot, criterion, length_threshold))
            position_rows += pairwise_position(judge, labelled, boot, criterion)
            if self_list:
                self_rows.append(pairwise_self_preference(judge, labelled, boot, criterion, self_list))
            continue
        length_rows.append({"mode": mode, **length_slopes(judge, words, labelled, boot, criterion)})
        controlled.append(length_controlled_means(judge, words, labelled, boot, criterion))
        if mode == "block" and (row := block_position(judge, boot, criterion)):
            position_rows.append(row)
        if self_list:
            self_rows.append(self_preference(judge, labelled, boot, criterion, self_list))
    length = pd.DataFrame(length_rows).reindex(columns=LENGTH_COLUMNS)
    controlled_frame = (pd.concat(controlled, ignore_index=True) if controlled
                        else pd.DataFrame(columns=CONTROLLED_COLUMNS))
    position = pd.DataFrame(position_rows).reindex(columns=POSITION_COLUMNS)
    self_frame = pd.DataFrame(self_rows).reindex(columns=SELF_COLUMNS)
    flags = family_wise(length, position, self_frame, len(boot.ids))
    if not controlled_frame.empty:  # "at equal length the ranking changes" only where length is a finding
        shown = set(length.loc[length["effect"].astype(bool), "criterion"])  # family_wise sets every row's flag
        controlled_frame["rank_changed"] = controlled_frame["rank_changed"] & controlled_frame["criterion"].isin(shown)
    result = AuditResult(
        mode=mode, criteria=present, noise=noise, length=length, length_controlled=controlled_frame,
        position=position, self_preference=self_frame, sentences=[], warnings=warnings, flags=flags,
        n_resamples=bootstrap, seed=seed, has_human=people is not None, length_threshold=float(length_threshold),
        length_unit=words.attrs.get("length_unit", "words"))
    if probes:
        from .probes import probe_table

        runs = {name: (read_judgments(probed), keys) for name, (probed, keys) in probes.items()}
        result.probes = probe_table(judge, runs, noise, boot, present)
    result.sentences = sentences(result)
    return result


# -- sentences ------------------------------------------------------------------------------------------------------


def _ci(low, high, fmt="{:+.2f}") -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "[no interval]"
    return f"[{fmt.format(low)}, {fmt.format(high)}]"


def _noise_clause(noise: pd.DataFrame, criterion: str) -> str:
    row = noise[noise["criterion"] == criterion]
    if row.empty or row.iloc[0]["source"] == "none":
        return "re-run noise unknown (judge with --samples 2 or more, or give --rerun)"
    row = row.iloc[0]
    how = "a second run" if row["source"] == "rerun" else "re-asked samples"
    return f"re-run noise changes {row['changed_share']:.0%} of verdicts ({how})"


def sentences(result: AuditResult) -> list[str]:
    """One sentence per finding, ready to paste into a paper."""
    out = []
    if result.flags:
        flagged = int(sum(t["effect"].astype(bool).sum() for t in  # family_wise sets every row's flag
                          (result.length, result.position, result.self_preference)))
        out.append(f"Findings flagged: {flagged} of {result.flags} tested together (Holm, 5% family-wise: with "
                   "nothing there, any flag in at most 5% of audits); intervals are 95% expanded percentile "
                   f"bootstrap intervals over {result.length['n_dialogues'].max() if len(result.length) else 0:.0f} "
                   "dialogues.")
    for row in result.length.itertuples():
        noise = _noise_clause(result.noise, row.criterion)
        if row.mode == "pairwise":
            if row.n_pairs == 0 or not np.isfinite(row.prefers_longer):
                out.append(f"{row.criterion}: no decided pair whose lengths differ enough to measure a length "
                           f"preference; {noise}")
                continue
            humans = "" if not np.isfinite(row.human_prefers_longer) else (
                f" (humans {row.human_prefers_longer:.0%} {_ci(row.human_prefers_longer_ci_low, row.human_prefers_longer_ci_high, '{:.0%}')})")
            out.append(f"{row.criterion}: the judge prefers the longer candidate in {row.prefers_longer:.0%} "
                       f"{_ci(row.prefers_longer_ci_low, row.prefers_longer_ci_high, '{:.0%}')} of {row.n_pairs} "
                       f"decided pairs whose lengths differ by more than {result.length_threshold:.0%} of the longer"
                       f"{humans}; {noise}")
            continue
        if not np.isfinite(row.judge_slope):
            out.append(f"{row.criterion}: length slope not measurable (no dialogue with candidates of different "
                       f"lengths); {noise}")
            continue
        unit = f"per SD of length within a dialogue ({row.length_sd_words:.0f} {result.length_unit})"
        if np.isfinite(row.excess_slope):
            out.append(f"{row.criterion}: beyond what quality explains, the judge adds {row.excess_slope:+.2f} of its "
                       f"points {unit} {_ci(row.excess_ci_low, row.excess_ci_high)} (quality as two annotators' "
                       f"readings show it, whatever the judge's scale; judge {row.judge_slope:+.2f}, humans "
                       f"{row.human_slope:+.2f} on the same {row.n_summaries} summaries); {noise}")
        elif np.isfinite(row.human_slope):
            out.append(f"{row.criterion}: the judge's score moves {row.judge_slope:+.2f} points {unit}, the humans' "
                       f"{row.human_slope:+.2f}; {row.note}; {noise}")
        else:
            out.append(f"{row.criterion}: the judge's score moves {row.judge_slope:+.2f} points {unit} "
                       f"{_ci(row.judge_slope_ci_low, row.judge_slope_ci_high)}; without human labels this cannot "
                       f"separate a taste for length from longer summaries being better; {noise}")
    for criterion, part in result.length_controlled.groupby("criterion", sort=False):
        moved = part[part["rank_changed"]]
        if moved.empty:
            out.append(f"{criterion}: the ranking of the {len(part)} systems is the same at equal length "
                       "(length-controlled means).")
        else:
            out.append(f"{criterion}: at equal length the ranking changes: " + "; ".join(
                f"{r.system} from {r.raw_rank} to {r.lc_rank}" for r in moved.itertuples()) + ".")
    for row in result.position.itertuples():
        noise = _noise_clause(result.noise, row.criterion)
        if row.mode == "block":
            out.append(f"{row.criterion}: each later letter in the block moves the score by {row.position_slope:+.3f} "
                       f"points {_ci(row.position_slope_ci_low, row.position_slope_ci_high, '{:+.3f}')}; {noise}")
        elif row.stratum == "all":
            out.append(f"{row.criterion}: the two orders disagree in {row.flip_rate:.0%} "
                       f"{_ci(row.ci_low, row.ci_high, '{:.0%}')} of {row.n} pairs and decided verdicts choose the "
                       f"first-shown candidate {row.first_shown_wins:.0%} "
                       f"{_ci(row.first_shown_ci_low, row.first_shown_ci_high, '{:.0%}')} of the time (50% is "
                       f"unbiased); {noise}")
    unit = "of win share" if result.mode == "pairwise" else "points"
    for row in result.self_preference.itertuples():
        if not np.isfinite(row.judge_gap):
            out.append(f"{row.criterion}: self-preference for {row.self_systems} not measurable: {row.note}")
        elif np.isfinite(row.self_preference):
            scale = "of its points" if result.mode != "pairwise" else unit
            beyond = ("beyond what their quality explains (as two annotators read it)" if result.mode != "pairwise"
                      else "relative to the other systems, than humans do")
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.self_preference:+.2f} {scale} more, "
                       f"{beyond} {_ci(row.ci_low, row.ci_high)} (judge gap {row.judge_gap:+.2f}, human gap "
                       f"{row.human_gap:+.2f}, {row.n_dialogues} dialogues); "
                       f"{_noise_clause(result.noise, row.criterion)}")
        elif np.isfinite(row.human_gap):
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.judge_gap:+.2f} {unit} above the "
                       f"other systems, humans {row.human_gap:+.2f}; {row.note}")
        else:
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.judge_gap:+.2f} {unit} above the "
                       f"other systems {_ci(row.judge_gap_ci_low, row.judge_gap_ci_high)}; {NO_LABELS_NOTE}; "
                       f"{_noise_clause(result.noise, row.criterion)}")
    if result.probes is not None:
        from .probes import probe_sentences

        out += probe_sentences(result.probes)
    return out
