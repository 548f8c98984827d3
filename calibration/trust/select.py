"""`judge select`: which judge (model, prompt variant, metric, jury) agrees best with humans, with intervals.

Every judge is measured on the same labelled summaries (those all judges scored), with the same bootstrap
resamples of dialogues (and of systems at the system level), so differences between judges are paired. The best
set is every judge that no other judge is shown better than by simultaneous bounds on every paired difference
(calibration.stats.simultaneous_differences: Bonferroni-t over the pairs of judges, per criterion), so a truly best
judge, of however many tied ones, is left out in at most 5% of studies; comparing only with the observed best
(Holm) left one of 8 equal judges out in 22%. At the summary level the comparison is made on the dialogues where
every judge and the humans vary (`n_compared`): a dialogue where one judge gives every summary the same score says
nothing of that judge, and dropping it for that judge alone let a judge cut to two score values outrank the judge
it came from. A jury (mean of standardised scores) and the pick of the best single judge are measured with
cross-fitting: chosen on one half of the dialogues, measured on the other, so the optimism of picking the best of
many shows. At the system level, systems are resampled too (the systems read as drawn from many) and each row's
interval is calibration.correlation.system_interval's (Fisher's z for Pearson): with fewer than
calibration.correlation.min_systems() (6 at 95%) no interval or best set is printed, and the note says why.

`label_worth` (labelled dialogues saved per 100, PPI++'s variance ratio 1 - rho^2 per system) uses the adjusted
rho^2 (1 - (1 - r^2)(n - 1)/(n - 2), floored at 0): the plug-in r^2 is biased up by about 1/n, which printed +5 to
+11 labels per 100 for a useless judge. It is printed from MIN_DIALOGUES dialogues on, as are intervals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..correlation import (
    LEVELS,
    STATISTIC_NAMES,
    PairedScores,
    bootstrap_replicates,
    few_systems_note,
    level_statistic,
    system_interval,
)
from ..errors import CalibrationError
from ..judges import read_judges
from ..options import criteria_option, judges_option, resamples_option, seed_option
from ..result import Result
from ..stats import percentile_interval, resample_counts

SELECTION_COLUMNS = ["criterion", "judge", "kind", "level", "statistic", "estimate", "ci_low", "ci_high",
                     "in_best_set", "p_adjusted", "p_holm", "compared_estimate", "n_compared", "label_worth",
                     "n_common", "n_judged", "n_dialogues", "failed_resamples", "note"]
# Fewer dialogues give no interval, best set or label worth: a correlation over 2 dialogues is +-1 whatever the
# judge, and its resamples collapse (zero-width intervals, "saves 100/100 labels" at r = 0).
MIN_DIALOGUES = 10
JURY_ALL, JURY_BEST, BEST_PICKED = "jury (all judges)", "jury (best set)", "best judge (cross-fitted)"


@dataclass
class SelectResult(Result):
    """What `judge select` found: one row per (criterion, judge) and the jury rows, with the settings."""

    verb: ClassVar[str] = "select"

    selection: pd.DataFrame
    level: str
    statistic: str
    n_resamples: int
    seed: int
    judges: list[str]
    warnings: list[str] = field(default_factory=list)

    def files(self) -> dict[str, str]:
        return {"selection.csv": self.selection.to_csv(index=False)}

    def report_html(self) -> str:
        return select_section(self)

    def best_set(self, criterion: str) -> list[str]:
        part = self.selection[(self.selection["criterion"] == criterion) & self.selection["in_best_set"]]
        return part.sort_values("estimate", ascending=False)["judge"].tolist()

    def interval_method(self) -> str:
        """How the printed intervals were made, naming the system level's estimand (system_interval)."""
        if self.level != "system":
            return "95% percentile bootstrap CI"
        method = ("Fisher's z over the systems' means" if self.statistic == "pearson" else
                  "percentile bootstrap over dialogues and systems")
        return f"95% CI for the population of systems these are drawn from ({method}, widened for the means' noise)"

    def text(self) -> str:
        lines = [f"Agreement with humans: {self.statistic} at {self.level} level, {self.interval_method()} "
                 f"({self.n_resamples} resamples of dialogues, the same for every judge; the summary level expanded "
                 "for its mean over dialogues); best set (*) = no other judge shown better by simultaneous paired "
                 "bounds over every pair of judges (Bonferroni-t, 5% per criterion: a truly best judge is left out "
                 "in at most 5% of studies), compared on the dialogues where every judge varies; label_worth = "
                 "labelled dialogues saved per 100 in a study (PPI++ variance ratio, adjusted rho^2)"]
        notes: list[str] = []
        for criterion, part in self.selection.groupby("criterion", sort=False):
            judges = part[part["kind"] == "judge"]
            common = int(judges["n_common"].iloc[0])
            lines.append(f"\n{criterion}: {common} summaries judged by every judge")
            for row in part.itertuples():
                mark = "*" if row.in_best_set else " "
                p = "" if not np.isfinite(row.p_adjusted) else f"  p_adj {row.p_adjusted:.3f}"
                worth = "" if not np.isfinite(row.label_worth) else f"  saves {row.label_worth:.0f}/100 labels"
                gap = "" if row.kind != "judge" or row.n_judged == row.n_common else f"  (judged {row.n_judged})"
                ci = ("[no interval]" if not np.isfinite(row.ci_low) else
                      f"[{row.ci_low:+.3f}, {row.ci_high:+.3f}]")
                lines.append(f" {mark} {row.judge:<28} {row.estimate:+.3f} {ci}{p}{worth}{gap}")
            if isinstance(note := part["note"].iloc[0], str) and note:
                notes.append(f"{criterion}: {note}")
                lines.append(f"  note: [{len(notes)}]")
            lines.append(f"  best set: {', '.join(self.best_set(criterion))}")
        from .report import footnoted

        return "\n".join(footnoted(lines, notes)) + "\n"

    def __str__(self) -> str:
        return self.text()


def _check_options(level: str, statistic: str, n_resamples: int, confidence: float) -> None:
    if level not in LEVELS:
        raise CalibrationError(f"--level must be one of {', '.join(LEVELS)}, got {level!r}")
    if statistic not in STATISTIC_NAMES:
        raise CalibrationError(f"--statistic must be one of {', '.join(STATISTIC_NAMES)}, got {statistic!r}")
    if not (isinstance(confidence, (int, float)) and 0.5 <= confidence < 1.0):
        raise CalibrationError(f"--confidence must be between 0.5 and 1, got {confidence!r}")
    resamples_option(n_resamples, confidence, floor=100)


def _standardise(matrix: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (matrix - np.nanmean(matrix)) / np.nanstd(matrix)


def _worth(judge: np.ndarray, human: np.ndarray) -> float:
    """Labelled dialogues saved per 100 at equal precision by PPI++ with many more judged than labelled dialogues.

    Per system, dialogues are the units (as in `judge estimate`): PPI++'s variance ratio tends to 1 - rho^2 (rho:
    the judge-human correlation over dialogues) when the judged dialogues far outnumber the labelled ones; the
    saving is 100 (1 - ratio), averaged over systems. rho^2 is the adjusted one, 1 - (1 - r^2)(n - 1)/(n - 2)
    floored at 0: the plug-in r^2 has expectation about 1/(n - 1) for a useless judge.
    """
    from ..stats import pearson

    rho = pearson(judge.T, human.T)  # one per system, over dialogues
    n = np.sum(~(np.isnan(judge) | np.isnan(human)), axis=0)
    keep = np.isfinite(rho) & (n >= MIN_DIALOGUES)
    if not keep.any():
        return float("nan")
    r2, n = rho[keep] ** 2, n[keep]
    adjusted = np.maximum(0.0, 1.0 - (1.0 - r2) * (n - 1) / (n - 2))
    return float(100.0 * np.mean(adjusted))


def _stat_rows(scores: dict[str, np.ndarray], human: np.ndarray, items, systems, level, statistic, weights):
    """Point estimates and (B,) replicates of every judge's statistic with the same resample weights."""
    estimates, replicates = {}, {}
    for name, matrix in scores.items():
        paired = PairedScores("", items, systems, matrix, human)
        estimates[name] = float(level_statistic(paired, level, statistic))
        replicates[name] = bootstrap_replicates(paired, level, statistic, *weights)
    return estimates, replicates


def _best_set(estimates: dict, replicates: dict, units: int | None, confidence: float
              ) -> tuple[str, dict, dict, int]:
    """The observed best, each judge's adjusted p-value of being below another, who is in the best set, and the
    resamples left out because a judge's statistic was undefined there (calibration.stats.simultaneous_differences)."""
    from ..stats import simultaneous_differences

    names = list(estimates)
    best = max(names, key=lambda n: -np.inf if np.isnan(estimates[n]) else estimates[n])
    found = simultaneous_differences(np.array([estimates[n] for n in names]),
                                     np.column_stack([replicates[n] for n in names]), confidence=confidence,
                                     units=units)
    shown_worse = (found["lower"] > 0).any(axis=1)
    p = {n: (float("nan") if n == best else float(found["p"][k])) for k, n in enumerate(names)}
    in_set = {n: n == best or not bool(shown_worse[k]) for k, n in enumerate(names)}
    return best, p, in_set, found["failed"]


def _varying(matrix: np.ndarray) -> np.ndarray:
    """Dialogues (rows) whose scores differ across systems: where a summary-level correlation is defined."""
    import warnings

    present = (~np.isnan(matrix)).sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN dialogue: not varying
        spread = np.nanmax(matrix, axis=1) - np.nanmin(matrix, axis=1)
    return (present >= 2) & (np.nan_to_num(spread) > 0)


def _mean_of_present(stacked: np.ndarray) -> np.ndarray:
    """The jury's score per cell: the mean of the judges that scored it; NaN (silently) where none did."""
    present = ~np.isnan(stacked)
    with np.errstate(invalid="ignore"):  # 0 / 0 where no judge scored: NaN
        return np.where(present, stacked, 0.0).sum(axis=0) / present.sum(axis=0)


def _cross_fitted(scores: dict[str, np.ndarray], human: np.ndarray, items, systems, level, statistic, seed: int,
                  bootstrap: int, confidence: float) -> dict[str, np.ndarray]:
    """Score matrices whose rows (dialogues) in each half come from the choice made on the other half (at the
    study's confidence, as the reported best set)."""
    rng = np.random.default_rng(seed + 1)
    half = np.zeros(len(items), dtype=bool)
    half[rng.permutation(len(items))[: len(items) // 2]] = True
    out = {JURY_ALL: np.full_like(human, np.nan), JURY_BEST: np.full_like(human, np.nan),
           BEST_PICKED: np.full_like(human, np.nan)}
    standardised = {name: _standardise(matrix) for name, matrix in scores.items()}
    for fit in (half, ~half):
        measure = ~fit
        # The choice is made on the fitting half exactly as the reported one is on all dialogues: the best judge and
        # the set not significantly worse (paired bootstrap, Holm), with resamples of the fitting half only.
        weights = (resample_counts(rng, int(fit.sum()), bootstrap), resample_counts(rng, len(systems), bootstrap))
        fitted, replicates = _stat_rows({n: m[fit] for n, m in scores.items()}, human[fit], items[fit], systems,
                                        level, statistic, weights)
        fitted = {n: (0.0 if np.isnan(v) else v) for n, v in fitted.items()}
        best, _, in_set, _ = _best_set(fitted, replicates, int(fit.sum()) if level == "summary" else None,
                                       confidence)
        # Each judge enters the jury pointed the way it agrees with humans on the fitting half (ppl: lower = better).
        signs = {n: (1.0 if v >= 0 else -1.0) for n, v in fitted.items()}
        stacked = np.stack([signs[n] * standardised[n][measure] for n in scores])
        out[JURY_ALL][measure] = _mean_of_present(stacked)
        out[JURY_BEST][measure] = _mean_of_present(np.stack([standardised[n][measure] for n in scores if in_set[n]]))
        out[BEST_PICKED][measure] = standardised[best][measure]
    return out


def _matrices(tables: dict, names: list[str], common: list) -> tuple:
    """The dialogues, systems, the human matrix and each judge's (dialogues x systems) on the common summaries."""
    index = pd.MultiIndex.from_tuples(common, names=["item_id", "system"])
    grid = lambda column, table: table[column].reindex(index).unstack("system")  # noqa: E731
    first = grid("human", tables[names[0]])
    items, systems = first.index.to_numpy(), first.columns.to_numpy()
    human_matrix = first.to_numpy(float)
    scores = {n: grid("judge", t).reindex(index=first.index, columns=first.columns).to_numpy(float)
              for n, t in tables.items()}
    return items, systems, human_matrix, scores


def _comparison(names: list[str], scores: dict, human_matrix: np.ndarray, items, systems, level: str,
                statistic: str, weights, estimates: dict, replicates: dict, bootstrap: int,
                confidence: float) -> tuple:
    """The best set: on the dialogues where every judge and the humans vary (summary level), one set for all.
    Returns the dialogues compared, whether enough, whether intervals are shown, the note, each judge's membership,
    adjusted p-value and estimate on the compared dialogues."""
    compared = np.ones(len(items), bool)
    if level == "summary":
        for matrix in (human_matrix, *scores.values()):
            compared &= _varying(matrix)
    n_compared = int(compared.sum())
    note = ""
    enough = n_compared >= MIN_DIALOGUES  # every dialogue is compared but at the summary level
    few_systems = few_systems_note(len(systems), confidence) if level == "system" else ""
    if not enough or few_systems:
        note = few_systems if enough else (
            f"{n_compared} dialogues to compare: no interval, best set "
            f"or label worth below {MIN_DIALOGUES} (a correlation over 2 dialogues is +-1 whatever the "
            f"judge); label at least {MIN_DIALOGUES} dialogues")
        in_set, p_adjusted = {n: True for n in names}, {n: float("nan") for n in names}
        compared_estimates = {n: float("nan") for n in names}
    else:
        if n_compared < len(items):  # the summary level, some dialogues not varying
            sub = (weights[0][:, compared], None)  # the summary level resamples dialogues only
            compared_estimates, compared_replicates = _stat_rows(
                {n: m[compared] for n, m in scores.items()}, human_matrix[compared], items[compared], systems,
                level, statistic, sub)
        else:
            compared_estimates, compared_replicates = estimates, replicates
        _, p_adjusted, in_set, failed = _best_set(compared_estimates, compared_replicates,
                                                  n_compared if level == "summary" else None, confidence)
        if failed:
            note = (f"{failed} of {bootstrap} resamples left some judge's statistic undefined (too few varying "
                    "dialogues in them): the best set uses the others")
    shown = enough and not few_systems
    return n_compared, enough, shown, note, in_set, p_adjusted, compared_estimates


def _criterion_rows(criterion: str, pairs: dict, names: list[str], level: str, statistic: str, seed: int,
                    bootstrap: int, confidence: float, warnings: list[str]) -> list[dict]:
    """One criterion's rows of the selection (each judge's, then the cross-fitted ones); why it is left out, or
    the summaries some judges judged beyond the common ones, added to `warnings`."""
    tables = {n: p[p["criterion"] == criterion].set_index(["item_id", "system"]) for n, p in pairs.items()}
    empty = [n for n, t in tables.items() if t.empty]
    if empty:
        warnings.append(f"{criterion}: left out: judge {empty[0]} has no score paired with a human label")
        return []
    common = sorted(set.intersection(*(set(t.index) for t in tables.values())))
    if not common:
        warnings.append(f"{criterion}: left out: no summary is judged by every judge")
        return []
    items, systems, human_matrix, scores = _matrices(tables, names, common)
    rng = np.random.default_rng(seed)
    weights = (resample_counts(rng, len(items), bootstrap), resample_counts(rng, len(systems), bootstrap))
    estimates, replicates = _stat_rows(scores, human_matrix, items, systems, level, statistic, weights)
    units = len(items) if level == "summary" else None  # a mean over dialogues: the expanded interval
    n_compared, enough, shown, note, in_set, p_adjusted, compared_estimates = _comparison(
        names, scores, human_matrix, items, systems, level, statistic, weights, estimates, replicates, bootstrap,
        confidence)

    def interval(matrix, replicates_of_judge):
        if level == "system":
            return system_interval(PairedScores("", items, systems, matrix, human_matrix), statistic,
                                   weights[0], replicates_of_judge, confidence)
        return percentile_interval(replicates_of_judge, confidence, units)

    rows = []
    for name in names:
        low, high = interval(scores[name], replicates[name]) if shown else (np.nan, np.nan)
        rows.append({"criterion": criterion, "judge": name, "kind": "judge", "estimate": estimates[name],
                     "ci_low": low, "ci_high": high, "in_best_set": bool(in_set[name]),
                     "p_adjusted": p_adjusted[name], "p_holm": p_adjusted[name],
                     "compared_estimate": compared_estimates[name], "n_compared": n_compared,
                     "label_worth": _worth(scores[name], human_matrix) if enough else np.nan,
                     "n_common": len(common), "n_judged": len(tables[name]), "n_dialogues": len(items),
                     "failed_resamples": int(np.isnan(replicates[name]).sum()), "note": note})
    if not shown:
        return rows
    juries = _cross_fitted(scores, human_matrix, items, systems, level, statistic, seed, bootstrap, confidence)
    jury_estimates, jury_replicates = _stat_rows(juries, human_matrix, items, systems, level, statistic, weights)
    for name in juries:
        low, high = interval(juries[name], jury_replicates[name])
        rows.append({"criterion": criterion, "judge": name, "kind": "cross-fitted",
                     "estimate": jury_estimates[name], "ci_low": low, "ci_high": high, "in_best_set": False,
                     "p_adjusted": float("nan"), "p_holm": float("nan"), "compared_estimate": float("nan"),
                     "n_compared": n_compared, "label_worth": _worth(juries[name], human_matrix),
                     "n_common": len(common), "n_judged": len(common), "n_dialogues": len(items),
                     "failed_resamples": int(np.isnan(jury_replicates[name]).sum()), "note": note})
    gaps = {n: len(t) - len(common) for n, t in tables.items() if len(t) > len(common)}
    if gaps:
        warnings.append(f"{criterion}: judges compared on the {len(common)} summaries all of them judged; left out "
                        + ", ".join(f"{n} {g}" for n, g in gaps.items()))
    return rows


def select(human, judges, *, level: str = "summary", statistic: str = "pearson", criteria=None, clean: bool = False,
           bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95, scale=None,
           failure_value: float | None = None) -> SelectResult:
    """Compare judges (name -> path or DataFrame) against human labels (path or DataFrame) at one level.

    >>> import calibration
    >>> result = calibration.select("examples/study/labels.csv", {"first": "examples/study/judgments.jsonl",
    ...                             "again": "examples/study/judgments_rerun.jsonl"}, bootstrap=200)
    >>> list(result.selection.query("criterion == 'clarity'")["judge"])[:2]
    ['first', 'again']
    """
    from ..alignment import align
    from ..humans import aggregate_humans
    _check_options(level, statistic, bootstrap, confidence)
    seed = seed_option(seed)
    criteria = criteria_option(criteria)
    listed = judges_option(judges, "select", 2)
    frames, labels, unchecked = read_judges(listed, human, scale, failure_value)
    means = aggregate_humans(labels, clean=clean)
    pairs = {name: align(frame, means)[0] for name, frame in frames.items()}
    names = [name for name, _ in listed]
    wanted = sorted(means["criterion"].unique()) if criteria is None else list(criteria)
    warnings, rows = [f"note: {note}" for note in unchecked], []
    for criterion in wanted:
        rows += _criterion_rows(criterion, pairs, names, level, statistic, seed, bootstrap, confidence, warnings)
    if not rows:
        raise CalibrationError("no criterion has summaries judged by every judge and labelled by humans: "
                               + (warnings[0] if warnings else "check the item ids and systems of the files"))
    selection = pd.DataFrame(rows).assign(level=level, statistic=statistic)[SELECTION_COLUMNS]
    return SelectResult(selection, level, statistic, bootstrap, seed, names, warnings)


def select_section(result: SelectResult) -> str:
    """The HTML section: every judge (and the cross-fitted rows) with its CI per criterion, then the table."""
    import html

    from ..html_kit import image as _img
    from ..html_kit import intervals_figure
    from ..html_kit import table as _table

    table = result.selection.assign(judge=[f"{j}{' *' if b else ''}" for j, b in
                                           zip(result.selection["judge"], result.selection["in_best_set"])])
    figure = intervals_figure(table, "judge", "estimate", "ci_low", "ci_high",
                              xlabel=f"{result.statistic} with humans, {result.level} level (CI)", zero=True)
    best = "; ".join(f"{c}: {', '.join(result.best_set(c))}" for c in dict.fromkeys(result.selection["criterion"]))
    parts = ["<h2>Select: judges against humans</h2>",
             f"<p class=note>{html.escape(result.statistic)} at {html.escape(result.level)} level with a "
             f"{html.escape(result.interval_method())} ({result.n_resamples} resamples of dialogues, the same for "
             "every judge, on the summaries every judge scored). * = in the best set: not significantly worse than "
             "the best (paired, Holm, 5%). "
             "Jury rows and the best judge's row are cross-fitted: chosen on one half of the dialogues, measured on "
             "the other.</p>", _img("judges with CIs", figure),
             f"<p>Best set: {html.escape(best)}</p>", _table(result.selection)]
    parts += [f"<p class=note>Warning: {html.escape(w)}</p>" for w in result.warnings]
    return "".join(parts)
