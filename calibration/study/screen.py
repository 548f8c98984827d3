"""What the judge already says before a human study, and what the study needs: `judge screen`.

Systems: each system's mean judge score per criterion with an expanded percentile bootstrap CI (see
`calibration.stats.expanded_tail`) that resamples dialogues,
the same resampled dialogues for every system and criterion (paired), so differences between systems keep the
correlation of summaries of one dialogue. Every difference between two systems on one criterion gets a lower bound
that holds simultaneously with all the others (calibration.stats.simultaneous_differences: Bonferroni-t over every
pair of systems of every criterion). A system is "tied with the best" unless some other system is shown better than
it; a system is dominated when another one is shown better on every criterion; it is listed, never dropped. One
family for the whole table: with nothing to separate, any system is left out of "tied with the best" or called
dominated in at most 5% of screens, however many systems and criteria (Holm against the observed best left one of
14 equal systems out in 18-27% of runs per criterion, and "dominated" was uncorrected over pairs: 78%).

Items: every judgment's uncertainty, from what the run recorded (spread of --samples, entropy of --logprobs
probabilities, pairwise order disagreement, failures, abstentions and N/A) and, with --judge, where the judges
disagree, and each dialogue's power to discriminate the systems still in contention (how far apart the judge puts
them on it).

Plan: under a budget (dialogues, or judgments a human must give), a uniformly random sample of dialogues (what
keeps `judge estimate` unbiased) and, for the rest, the dialogues with the highest priority (uncertainty plus
discrimination); `--design active` draws the random part with known probabilities rising with the uncertainty,
checked on a --human pilot, which also weighs each judgment's doubt by the judge's error in its system and criterion
(stratified allocation with the dialogue as the unit). A plan is a contract: plan.json records the digest of
plan.csv (and of the judgments), `judge export --plan` copies it into the key, `judge estimate --plan` refuses a
plan that does not match, and an --output-dir that holds a plan is refused rather than rewritten. A plan whose
random part is empty is refused (the budget rounded it away) or warned about (--random-share 0): `judge estimate`
could estimate nothing from it.
Power: dialogues humans must label to separate the top two systems (calibration.study.power).

`screen()` is the verb as a function (paths or DataFrames in, a ScreenResult out); the CLI only wraps it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from judge.resources import file_sha256

from ..alignment import expand_all_criteria
from ..errors import CalibrationError
from ..humans import aggregate_humans
from ..options import criteria_option, scale_option
from ..result import Result
from ..stats import expanded_tail, resample_counts, simultaneous_differences
from .matrices import judge_matrices
from .ppi import ppi_mean
from .power import dialogues_needed

SYSTEM_COLUMNS = ["criterion", "system", "mean", "ci_low", "ci_high", "n", "rank", "difference_from_best",
                  "p_adjusted", "p_holm", "tied_with_best", "dominated_by"]  # p_holm: p_adjusted's old name
ITEM_COLUMNS = ["item_id", "n_judgments", "n_failed", "n_na", "n_abstained", "n_order_disagreement", "mean_spread",
                "mean_entropy", "mean_jury_disagreement", "uncertainty", "discrimination", "priority", "part"]
# Weight of each recorded sign of doubt in a judgment's uncertainty (0..1); N/A is a verdict, so it counts half.
FAILED, NOT_APPLICABLE = 1.0, 0.5


@dataclass
class ScreenResult(Result):
    """What `judge screen` found: the tables, the plan (with --budget), warnings, and where it all came from."""

    verb: ClassVar[str] = "screen"

    criteria: list[str]
    systems: pd.DataFrame
    dominated: dict[str, str]
    items: pd.DataFrame
    power: pd.DataFrame
    sentence: str
    plan: pd.DataFrame | None = None
    plan_info: dict = field(default_factory=dict)
    n_resamples: int = 1000
    seed: int = 0
    warnings: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        """The exact --output-dir files."""
        files = {"systems.csv": self.systems.to_csv(index=False), "items.csv": self.items.to_csv(index=False),
                 "power.csv": self.power.to_csv(index=False)}
        if self.plan is not None:
            files["plan.csv"] = self.plan.to_csv(index=False)
            files["plan.json"] = json.dumps(self.plan_info, indent=2) + "\n"
        return files

    def check_output_dir(self, output_dir, inputs=()) -> None:
        """A folder that holds a plan keeps it: a plan is a contract with the labels drawn from it."""
        from judge.outputs import check_writable

        folder = Path(output_dir)
        for name in ("plan.csv", "plan.json"):
            if (folder / name).exists():
                raise CalibrationError(
                    f"{folder / name}: --output-dir holds a plan already; a plan is never replaced (labels may "
                    "have been drawn from it): write into a new folder, or move the old plan away first")
        for name in self.files():
            check_writable(folder / name, inputs=inputs, what="--output-dir file")

    def report_html(self) -> str:
        from .report import screen_section  # matplotlib: only when a report is asked for

        return screen_section(self)

    def text(self) -> str:
        from io import StringIO


        out = StringIO()
        print_screen(self, out)
        return out.getvalue()


# -- systems ------------------------------------------------------------------------------------------------------


def win_shares(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairwise verdicts as scores: per dialogue, the share of its comparisons a system won (a tie counts half).

    A verdict "1" is a win for system_1, "2" for system_2, "0" a tie; other labels and failures are left out.
    """
    verdicts = pairs[pairs["status"].eq("label") & pairs["label"].isin(["0", "1", "2"])]
    if verdicts.empty:
        return pd.DataFrame(columns=["item_id", "system", "criterion", "score", "label", "status"])
    first, second = verdicts["system_1"], verdicts["system_2"]  # calibration.io fills them for every pair
    share = verdicts["label"].map({"1": 1.0, "2": 0.0, "0": 0.5})
    both = pd.concat([
        pd.DataFrame({"item_id": verdicts["item_id"], "system": first, "criterion": verdicts["criterion"],
                      "score": share}),
        pd.DataFrame({"item_id": verdicts["item_id"], "system": second, "criterion": verdicts["criterion"],
                      "score": 1.0 - share}),
    ])
    out = both.groupby(["item_id", "system", "criterion"], as_index=False)["score"].mean()
    return out.assign(label=None, status="ok")


def score_table(judge: pd.DataFrame, criteria) -> tuple[np.ndarray, list[tuple[str, str]], np.ndarray]:
    """(items, columns (criterion, system), dialogues x columns judge scores, NaN where there is no number)."""
    numeric = judge[(judge["status"] == "ok") & judge["criterion"].isin(criteria)]
    table = numeric.pivot(index="item_id", columns=["criterion", "system"], values="score").sort_index()
    table = table.reindex(columns=sorted(table.columns))
    return table.index.to_numpy(), list(table.columns), table.to_numpy(float)


def weighted_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Column means over the resampled dialogues: (B, N) counts x (N, K) values with NaN -> (B, K)."""
    present = ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ np.where(present, values, 0.0)) / (counts @ present)


def systems_table(judge: pd.DataFrame, criteria, n_resamples: int = 1000, seed: int = 0,
                  confidence: float = 0.95) -> tuple[pd.DataFrame, dict[str, str], np.ndarray, list]:
    """The systems table, the dominated systems ({system: by}), and the replicates (B, K) behind them."""
    items, columns, values = score_table(judge, criteria)
    counts = resample_counts(np.random.default_rng(seed), len(items), n_resamples)
    replicates = weighted_means(values, counts)
    point = weighted_means(values, np.ones((1, len(items))))[0]
    n = (~np.isnan(values)).sum(axis=0)
    low, high = np.full(len(columns), np.nan), np.full(len(columns), np.nan)
    for size in np.unique(n[n >= 2]):
        at = n == size
        tail = expanded_tail(confidence, size)
        with np.errstate(invalid="ignore"):
            low[at], high[at] = np.nanpercentile(replicates[:, at], [tail, 100.0 - tail], axis=0)
    order = {c: i for i, c in enumerate(criteria)}
    bounds = simultaneous_differences(point, replicates, groups=[order.get(c, -1) for c, _ in columns],
                                      confidence=confidence, units=max(int(n.min()), 2) if len(n) else None)
    shown_below = (bounds["lower"] > 0).any(axis=1)  # some other system of its criterion is shown better
    rows = []
    for criterion in criteria:
        index = [k for k, (c, _) in enumerate(columns) if c == criterion]
        if not index:
            continue
        ranked = sorted(index, key=lambda k: -point[k])
        best = ranked[0]
        for rank, k in enumerate(ranked, start=1):
            p = np.nan if k == best else float(bounds["p"][k])
            rows.append({"criterion": criterion, "system": columns[k][1], "mean": point[k], "ci_low": low[k],
                         "ci_high": high[k], "n": int((~np.isnan(values[:, k])).sum()), "rank": rank,
                         "difference_from_best": point[best] - point[k], "p_adjusted": p, "p_holm": p,
                         "tied_with_best": bool(k == best or not shown_below[k]), "dominated_by": ""})
    systems = pd.DataFrame(rows, columns=SYSTEM_COLUMNS)
    dominated = dominated_systems(bounds["lower"], columns, criteria)
    systems["dominated_by"] = systems["system"].map(lambda system: dominated.get(system, ""))
    return systems, dominated, replicates, columns


def dominated_systems(lower: np.ndarray, columns, criteria) -> dict[str, str]:
    """{system: a system shown better on every criterion}, from the simultaneous bounds `lower[i, j]` on
    theta_j - theta_i of the columns (criterion, system) (calibration.stats.simultaneous_differences)."""
    systems = sorted({s for _, s in columns})
    where = {column: k for k, column in enumerate(columns)}
    out = {}
    for loser in systems:
        for winner in systems:
            if winner == loser:
                continue
            pairs = [(where.get((c, loser)), where.get((c, winner))) for c in criteria]
            # A criterion either lacks: no domination (NaN compares False).
            if all(l is not None and w is not None and lower[l, w] > 0 for l, w in pairs):
                out[loser] = winner
                break
    return out


# -- items --------------------------------------------------------------------------------------------------------


def judgment_uncertainty(judge: pd.DataFrame) -> pd.DataFrame:
    """One row per judgment: item_id, spread (0..1), entropy (0..1), order disagreement, jury disagreement (0..1),
    status, uncertainty (the largest of them, and of a failure's or N/A's doubt).

    From the judgments table's spread, probabilities and order disagreement (judge/table.py), and the jury's
    disagreement where screen was given other judges (jury_disagreement); a CSV of scores has only the scores, so
    its uncertainty is its failures.
    """
    ranges = judge[judge["status"] == "ok"].groupby("criterion")["score"].agg(["min", "max"])
    half_range = ((ranges["max"] - ranges["min"]) / 2.0).where(lambda r: r > 0, 1.0)

    def entropy(probs) -> float:
        if not isinstance(probs, dict) or len(probs) < 2:
            return np.nan
        p = np.array([v for v in probs.values() if v > 0], dtype=float)
        p = p / p.sum()
        return float(-(p * np.log(p)).sum() / np.log(len(probs)))

    column = lambda name: judge[name] if name in judge.columns else pd.Series(None, index=judge.index)  # noqa: E731
    spread = pd.to_numeric(column("spread"), errors="coerce") / judge["criterion"].map(half_range).fillna(1.0)
    frame = judge[[c for c in ("item_id", "system", "criterion", "status") if c in judge]].assign(
        spread=spread.clip(upper=1.0).to_numpy(), entropy=[entropy(p) for p in column("probs")],
        order_disagreement=[v is True or v == 1 for v in column("order_disagreement")],
        jury_disagreement=pd.to_numeric(column("jury_disagreement"), errors="coerce").to_numpy())
    doubt = np.select([frame["status"].isin(["error", "abstain"]), frame["status"] == "na"],
                      [FAILED, NOT_APPLICABLE], 0.0)
    frame["uncertainty"] = np.nanmax(np.column_stack([
        doubt, frame["spread"].fillna(0.0), frame["entropy"].fillna(0.0),
        frame["order_disagreement"].astype(float), frame["jury_disagreement"].fillna(0.0)]), axis=1)
    return frame


def jury_disagreement(judge: pd.DataFrame, judges: dict[str, pd.DataFrame] | None) -> pd.Series:
    """Per judgment of `judge` (its index): how far the judges (`judge` and each of `judges`, screen's --judge)
    disagree on the summary, the sd over them of their scores standardised within system and criterion (each
    judge's own mean and sd over its judged dialogues), capped at 1; NaN where fewer than two judges scored it (or a
    judge's scores of the system do not vary). Within system: a judge that rates a whole system higher disagrees
    about the system, not about the dialogue, and the active draw chooses dialogues."""
    keys = ["item_id", "system", "criterion"]
    standardised = []
    for frame in (judge, *(judges or {}).values()):
        ok = frame[(frame["status"] == "ok") & frame["system"].notna()]
        score = ok.groupby(keys)["score"].mean()
        by_system = score.groupby(level=["system", "criterion"])
        varies = by_system.transform("max") > by_system.transform("min")  # exact, where a tiny sd is rounding
        standardised.append((score - by_system.transform("mean")) / by_system.transform("std").where(varies))
    table = pd.concat(standardised, axis=1)
    spread = table.std(axis=1).where(table.notna().sum(axis=1) >= 2).clip(upper=1.0)
    cells = pd.MultiIndex.from_frame(judge[keys])
    return pd.Series(spread.reindex(cells).to_numpy(), index=judge.index)


def items_table(judge: pd.DataFrame, systems: pd.DataFrame, criteria, scored: pd.DataFrame | None = None,
                per_judgment: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per dialogue: counts of doubtful judgments, uncertainty, discrimination and priority.

    `judge`: every judgment (for the uncertainty); `scored`: the per-system scores the systems table used
    (pairwise verdicts as win shares), for the discrimination; default `judge`. `per_judgment`: judge's
    judgment_uncertainty when the caller has it already.
    """
    per_judgment = judgment_uncertainty(judge) if per_judgment is None else per_judgment
    grouped = per_judgment.groupby("item_id")
    table = pd.DataFrame({
        "n_judgments": grouped.size(),
        "n_failed": grouped["status"].apply(lambda s: int((s == "error").sum())),
        "n_na": grouped["status"].apply(lambda s: int((s == "na").sum())),
        "n_abstained": grouped["status"].apply(lambda s: int((s == "abstain").sum())),
        "n_order_disagreement": grouped["order_disagreement"].sum().astype(int),
        "mean_spread": grouped["spread"].mean(),
        "mean_entropy": grouped["entropy"].mean(),
        "mean_jury_disagreement": grouped["jury_disagreement"].mean(),
        "uncertainty": grouped["uncertainty"].mean(),
    })
    scored = judge if scored is None else scored
    table["discrimination"] = discrimination(scored, systems, criteria).reindex(table.index).fillna(0.0)
    table["priority"] = table["uncertainty"] + table["discrimination"]
    table["part"] = ""
    return table.rename_axis("item_id").reset_index()[ITEM_COLUMNS]


def discrimination(judge: pd.DataFrame, systems: pd.DataFrame, criteria) -> pd.Series:
    """Per dialogue: how far apart the judge puts the systems in contention (the top two at least), 0..1.

    The standard deviation across those systems of the dialogue's judge scores, over half the criterion's
    observed range, averaged over criteria.
    """
    parts = []
    for criterion in criteria:
        ranked = systems[systems["criterion"] == criterion]
        if ranked.empty:
            continue
        contenders = ranked.loc[ranked["tied_with_best"] | (ranked["rank"] <= 2), "system"].tolist()
        items, names, scores, judged = judge_matrices(judge, criterion)
        keep = np.isin(names, contenders)
        values = np.where(judged, scores, np.nan)[:, keep]
        half_range = (np.nanmax(values) - np.nanmin(values)) / 2.0 if np.isfinite(values).any() else 0.0
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a dialogue no contender has a score on: NaN, then 0
            spread = np.nanstd(values, axis=1) / (half_range if half_range > 0 else 1.0)
        parts.append(pd.Series(np.nan_to_num(np.minimum(spread, 1.0)), index=items))
    if not parts:
        return pd.Series(dtype=float)
    return pd.concat(parts, axis=1).mean(axis=1)


# -- the plan -----------------------------------------------------------------------------------------------------


def make_plan(items: pd.DataFrame, budget: int, unit: str, random_share: float, seed: int,
              design: str = "uniform", uncertainty_share: float | None = None,
              drawn_on: pd.Series | None = None) -> pd.DataFrame:
    """plan.csv rows (item_id, part, reason): a uniformly random part, then the highest-priority dialogues.

    `unit` "dialogues" counts dialogues; "judgments" counts the judgments humans must give (each dialogue costs
    as many as the judge made on it). `design` "active": the random part is drawn with inclusion probabilities
    rising with the dialogue's uncertainty (inclusion_probabilities; `uncertainty_share` of the budget follows the
    uncertainty, the rest is uniform), by a fixed-size systematic draw, and the rows gain `inclusion_probability`.
    `drawn_on`: the uncertainty the active draw follows, in the order of `items` (stratified_uncertainty's; default
    the items' own).
    """
    if design == "active":
        return _active_plan(items, budget, unit, random_share, seed, uncertainty_share, drawn_on)
    if not 0.0 <= random_share <= 1.0:
        raise CalibrationError(f"--random-share must be between 0 and 1, got {random_share}")
    cost = items.set_index("item_id")["n_judgments"] if unit == "judgments" else \
        pd.Series(1, index=items["item_id"])
    total = int(cost.sum())
    if budget < 1:
        raise CalibrationError(f"--budget must be at least 1, got {budget}")
    if budget > total:
        raise CalibrationError(f"--budget {budget} {unit} is more than the data has: {total} {unit} "
                               f"in {len(items)} dialogues")
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.sort(items["item_id"].to_numpy()))
    random_budget = int(round(random_share * budget))
    rows, spent = [], 0
    for item in order:
        # A prefix of a random order, stopped at the first dialogue that does not fit (never skipping one, which
        # would favour cheap dialogues): a simple random sample when every dialogue costs the same.
        if spent + cost[item] > random_budget:
            break
        rows.append((item, "random", f"uniform random sample (seed {seed})"))
        spent += int(cost[item])
    chosen = {row[0] for row in rows}
    ranked = items[~items["item_id"].isin(chosen)].sort_values(["priority", "item_id"], ascending=[False, True])
    for row in ranked.itertuples():
        if spent + cost[row.item_id] > budget:
            continue
        reason = (f"uncertain judgments ({row.uncertainty:.2f})" if row.uncertainty >= row.discrimination
                  else f"separates the leading systems ({row.discrimination:.2f})")
        rows.append((row.item_id, "targeted", reason))
        spent += int(cost[row.item_id])
    return pd.DataFrame(rows, columns=["item_id", "part", "reason"])


def _active_plan(items: pd.DataFrame, budget: int, unit: str, random_share: float, seed: int,
                 uncertainty_share: float | None, drawn_on=None) -> pd.DataFrame:
    if unit != "dialogues":
        raise CalibrationError("--design active draws dialogues with known probabilities: give --budget-unit "
                               "dialogues (a budget in judgments would make each draw's probability depend on cost)")
    if budget > len(items):
        raise CalibrationError(f"--budget {budget} dialogues is more than the data has: {len(items)} dialogues")
    size = int(round(random_share * budget))
    follows = items["uncertainty"].to_numpy(float) if drawn_on is None else np.asarray(drawn_on, dtype=float)
    ordered = items.assign(follows=follows).sort_values("item_id").reset_index(drop=True)
    share = 1.0 - ACTIVE_FLOOR if uncertainty_share is None else uncertainty_share
    pi = inclusion_probabilities(ordered["follows"].to_numpy(float), size, floor=1.0 - share)
    chosen = systematic_sample(pi, np.random.default_rng(seed)) if size else np.array([], dtype=int)
    how = (f"active draw on the judge's uncertainty (seed {seed})" if share > 0 else
           f"uniform draw: the active design fell back (plan.json says why; seed {seed})")
    rows = [(ordered["item_id"][i], "random", how, pi[i]) for i in chosen]
    drawn = {row[0] for row in rows}
    ranked = ordered[~ordered["item_id"].isin(drawn)].sort_values(["priority", "item_id"], ascending=[False, True])
    for row in ranked.head(budget - len(rows)).itertuples():
        reason = (f"uncertain judgments ({row.uncertainty:.2f})" if row.uncertainty >= row.discrimination
                  else f"separates the leading systems ({row.discrimination:.2f})")
        rows.append((row.item_id, "targeted", reason, np.nan))
    return pd.DataFrame(rows, columns=["item_id", "part", "reason", "inclusion_probability"])


def signal_check(items: pd.DataFrame, squared: pd.Series | None) -> tuple[float, str]:
    """(share of the active draw that follows the uncertainty, why): with a labelled pilot, the active draw must be
    expected to beat a uniform one on it, else the draw falls back to uniform (Li, Zrnic & Candes 2025). `squared`:
    the judge's squared errors on the pilot (pilot_errors), None without a pilot: then 1 - ACTIVE_FLOOR, unchecked.

    The check is the design's own: a 1/p-weighted mean's residual variance changes, relative to a uniform draw's,
    by mean(r^2 / p~) / mean(r^2) (p~ the inclusion probabilities over their mean, r the human score's residual on
    the judge's), so the statistic is T = sum over the pilot's dialogues of r_i^2 (1 - 1 / p~_i), positive when the
    draw puts its labels where the judge errs. Its one-sided p-value is a permutation test (the uncertainty
    shuffled among the pilot's dialogues: exact whatever the residuals' distribution when the uncertainty says
    nothing about the error); active when p < 0.1. Measured (benchmarks/active_design.py's studies, a judge bad on
    10-20% of 100 dialogues, Gaussian and Likert, 250 simulated pilots a cell, MC se about 0.03): a useless signal
    goes active in 9-13% of pilots (the test's level), one that marks the bad dialogues in 35-43% at 10 pilot
    dialogues, 66-81% at 20, 86-94% at 30; the Spearman correlation of the uncertainty with |r| it replaces (1,000
    pilots a cell): 19-27%, 29-42%, 36-55%."""
    if squared is None:
        return 1.0 - ACTIVE_FLOOR, ("unchecked (no --human pilot): a useless signal costs labels, and where the "
                                    "labels bunch at one end of the scale the estimate prints no interval")
    if squared.empty:
        return 0.0, "the pilot has no labels to check the signal on: uniform"
    error = squared.groupby(level="item_id").mean()
    relative = relative_probabilities(items, 1.0 - ACTIVE_FLOOR)
    both = relative.rename("relative").to_frame().join(error.rename("error"), how="inner")
    if len(both) < PILOT_CHECK or both["relative"].nunique() < 2:
        return 0.0, (f"{len(both)} pilot dialogues (fewer than {PILOT_CHECK}) or no spread of uncertainty: the "
                     "signal cannot be checked, so the draw is uniform")
    if not both["error"].to_numpy().any():
        return 0.0, (f"on {len(both)} pilot dialogues the judge's scores fit the labels exactly (a linear function "
                     "of them): no error for the uncertainty to mark, so the draw is uniform")
    p_value, change = signal_test(both["relative"].to_numpy(), both["error"].to_numpy())
    if p_value < SIGNAL_LEVEL:
        return 1.0 - ACTIVE_FLOOR, (f"checked on {len(both)} pilot dialogues: the uncertainty marks where the judge "
                                    f"errs (the active draw's residual variance {change:.2f} x a uniform draw's on "
                                    f"the pilot, permutation p {p_value:.3f})")
    return 0.0, (f"on {len(both)} pilot dialogues the uncertainty does not mark where the judge errs (the active "
                 f"draw's residual variance {change:.2f} x a uniform draw's, permutation p {p_value:.2f}): the draw "
                 "falls back to uniform")


def bunched_rows(pilot: pd.DataFrame | None, criteria, bounds: dict) -> list[str]:
    """"system/criterion" of each pilot row of `criteria` whose labels bunch at one end of its scale (`bounds`, per
    criterion or "*"): estimate.unseen_pull, a share of unseen dialogues at the far end would pull the mean past the
    t interval. `judge estimate --plan` withholds an active design's interval on such rows (estimate.unseen_hidden),
    so an active draw is not planned where the pilot shows them. Measured on DialSummEval (benchmarks/active_design.py
    --real, 14 systems, 500 redraws): an active draw printed intervals on 14-38% of the rows for coherence and
    fluency, 69-92% for consistency and relevance, where a uniform one prints them all."""
    from .bounded import unseen_pull

    if pilot is None:
        return []
    rows = []
    for (system, criterion), part in pilot[pilot["criterion"].isin(criteria)].groupby(["system", "criterion"]):
        scale = bounds.get(criterion, bounds.get("*"))
        values = part["human"].to_numpy(float)[None, :]
        if scale is not None and unseen_pull(values, np.zeros_like(values), scale)[0]:
            rows.append(f"{system}/{criterion}")
    return rows


def pilot_errors(judge: pd.DataFrame, pilot: pd.DataFrame) -> pd.Series:
    """The judge's squared error on each labelled summary of the pilot, by (item_id, system, criterion): the human
    score's residual on the judge's, a least-squares line per criterion (what PPI's lambda corrects is not error);
    empty when no criterion has 3 labelled summaries with a spread of judge scores."""
    scores = judge[judge["status"] == "ok"].groupby(["item_id", "system", "criterion"])["score"].mean()
    paired = pilot.set_index(["item_id", "system", "criterion"])["human"].to_frame().join(scores, how="inner")
    residual = []
    for _, part in paired.groupby(level="criterion"):
        if len(part) >= 3 and part["score"].std() > 0:
            slope, intercept = np.polyfit(part["score"], part["human"], 1)
            r = part["human"] - intercept - slope * part["score"]
            # The fit's rounding is no error: an exactly linear pilot has none for the uncertainty to mark.
            residual.append(r.where(r.abs() > 1e-9 * part["human"].abs().max(), 0.0) ** 2)
    return pd.concat(residual) if residual else pd.Series(dtype=float)


def stratum_weights(errors: pd.Series) -> pd.Series:
    """Each (system, criterion)'s weight in the active draw's uncertainty: the judge's mean squared error there on
    the pilot (pilot_errors) over the mean of all strata's, shrunk toward its criterion's with STRATUM_PRIOR pseudo-
    dialogues (a stratum has one label per pilot dialogue). Neyman's allocation: labels go where the error is, so
    the judge's doubt about a criterion it gets right anyway weighs little, and its doubt where it errs weighs
    more. Empty (every judgment weighs alike) when the pilot has no error to share out."""
    if errors.empty or not errors.any():
        return pd.Series(dtype=float)
    criterion = errors.groupby(level="criterion").mean()
    cells = errors.groupby(level=["system", "criterion"]).agg(["sum", "count"])
    prior = criterion.reindex(cells.index.get_level_values("criterion")).to_numpy()
    mean_square = (cells["sum"] + STRATUM_PRIOR * prior) / (cells["count"] + STRATUM_PRIOR)
    return mean_square / mean_square.mean()


def stratified_uncertainty(items: pd.DataFrame, per_judgment: pd.DataFrame, weights: pd.Series) -> pd.DataFrame:
    """`items` with each dialogue's uncertainty the mean over its judgments (`per_judgment`, judgment_uncertainty's)
    of the judgment's uncertainty times its stratum's weight (stratum_weights; a stratum the pilot did not label:
    its criterion's mean weight, else 1), so the active draw follows the doubt where the judge errs. `items` itself
    when there are no weights."""
    if weights.empty:
        return items
    by_criterion = weights.groupby(level="criterion").mean()
    cell = pd.MultiIndex.from_arrays([per_judgment["system"], per_judgment["criterion"]])
    weight = pd.Series(weights.reindex(cell).to_numpy(), index=per_judgment.index)
    weight = weight.fillna(per_judgment["criterion"].map(by_criterion)).fillna(1.0)
    weighted = (per_judgment["uncertainty"] * weight).groupby(per_judgment["item_id"]).mean()
    return items.assign(uncertainty=items["item_id"].map(weighted).to_numpy())


def strata_clause(weights: pd.Series) -> str:
    """What the warning says of stratum_weights: nothing without them."""
    if weights.empty:
        return ""
    low, high = weights.idxmin(), weights.idxmax()
    return (f"; the uncertainty weighted by the judge's error per system and criterion on the pilot, from "
            f"{weights.min():.2f} ({low[0]}, {low[1]}) to {weights.max():.2f} ({high[0]}, {high[1]})")


def signal_test(relative: np.ndarray, error: np.ndarray) -> tuple[float, float]:
    """(one-sided permutation p-value, the active draw's residual variance over a uniform draw's) on pilot dialogues
    with relative inclusion probabilities `relative` (p~) and squared residuals `error` (some nonzero): the statistic
    T = sum error (1 - 1 / p~) against PERMUTATIONS shuffles of p~ (signal_check; a fixed seed, so the same pilot
    gives the same verdict)."""
    gain = 1.0 - 1.0 / relative
    observed = error @ gain
    rng = np.random.default_rng(0)
    shuffled = np.array([rng.permutation(gain) for _ in range(PERMUTATIONS)]) @ error
    p_value = (1 + np.sum(shuffled >= observed - 1e-12 * np.abs(observed))) / (PERMUTATIONS + 1)
    return float(p_value), float(np.mean(error / relative) / np.mean(error))


def relative_probabilities(items: pd.DataFrame, share: float) -> pd.Series:
    """p~ by item_id: each dialogue's inclusion probability over their mean in an active draw of which `share`
    follows the uncertainty (inclusion_probabilities before its cap at 1, which only a draw of most dialogues
    reaches)."""
    return pd.Series(uncertainty_weights(items["uncertainty"], 1.0 - share), index=pd.Index(items["item_id"]))


def uncertainty_weights(uncertainty, floor: float) -> np.ndarray:
    """Each dialogue's weight in an active draw over the mean weight: a uniform share `floor` mixed with the rest
    in proportion to the judge's uncertainty (missing or negative: 0); all 1 (uniform) when no uncertainty is
    recorded (a CSV of scores)."""
    u = np.nan_to_num(np.asarray(uncertainty, dtype=float)).clip(min=0.0)
    if not (len(u) and u.mean() > 0):
        return np.ones(len(u))
    return floor + (1.0 - floor) * u / u.mean()


def active_design_factor(values: np.ndarray, relative: np.ndarray) -> float:
    """How much an active draw multiplies the variance of a 1/p-weighted mean of `values` against a uniform draw of
    as many: mean(v^2 / p~) / mean(v^2), v the values centred (Hansen-Hurwitz; sampling a small share of the
    dialogues). 1 when the values do not vary."""
    v = np.asarray(values, dtype=float) - np.mean(values)
    squares = v * v
    return float(np.mean(squares / relative) / np.mean(squares)) if squares.sum() > 0 else 1.0


# Shuffles of the pilot's uncertainty in signal_check's permutation test.
PERMUTATIONS = 1999
# Pilot dialogues needed to check an active design's signal.
PILOT_CHECK = 10
# The signal check's level: the draw goes active when the permutation p-value is below it.
SIGNAL_LEVEL = 0.1
# Pseudo-dialogues at its criterion's mean squared error a (system, criterion) stratum's own is shrunk toward.
STRATUM_PRIOR = 5


def inclusion_probabilities(uncertainty, size: int, floor: float = None) -> np.ndarray:
    """Each dialogue's probability of being drawn into the active design's random part: `size` dialogues in all,
    weighted as uncertainty_weights (a uniform share `floor`, ACTIVE_FLOOR, so every dialogue can be drawn), capped
    at 1 (the excess given to the others). Sums to `size`."""
    weights = uncertainty_weights(uncertainty, ACTIVE_FLOOR if floor is None else floor)
    total = len(weights)
    if size >= total:
        return np.ones(total)
    pi = np.zeros(total)
    capped = np.zeros(total, dtype=bool)
    for _ in range(total):  # cap at 1 and hand the excess to the rest, until none exceeds
        left = size - capped.sum()
        pi = np.where(capped, 1.0, left * weights / weights[~capped].sum())
        over = ~capped & (pi > 1.0)
        if not over.any():
            break
        capped |= over
    return pi


def systematic_sample(pi: np.ndarray, rng) -> np.ndarray:
    """Indices of a fixed-size sample in which dialogue i is drawn with probability exactly pi[i] (systematic
    sampling over a random order: one uniform start, a draw at start + 0, 1, 2, ... along the cumulated pi)."""
    order = rng.permutation(len(pi))
    edges = np.concatenate([[0.0], np.cumsum(pi[order])])
    points = rng.random() + np.arange(int(round(edges[-1])))
    chosen = np.searchsorted(edges, points, side="right") - 1
    return np.sort(order[np.clip(chosen, 0, len(pi) - 1)])


# The active design's uniform share: every dialogue keeps at least ACTIVE_FLOOR x the uniform probability. 0.2
# saved 2-17% of labels with an informative signal and cost 44-48% with a useless one; 0.6 saves 15-21% and costs
# 5-10% (benchmarks/active_design.py): unequal weights cost variance whenever the signal is wrong.
ACTIVE_FLOOR = 0.6


# -- power --------------------------------------------------------------------------------------------------------


def power_table(judge: pd.DataFrame, systems: pd.DataFrame, criteria, power: float = 0.8, alpha: float = 0.05,
                pilot: pd.DataFrame | None = None, judges: dict | None = None,
                relative: pd.Series | None = None) -> pd.DataFrame:
    """Per criterion: dialogues humans must label to separate the judge's top two systems.

    Without a pilot the standardised effect is the judge's (mean / sd of its paired per-dialogue differences),
    assumed to carry over to humans. With pilot labels (aggregated human scores), the human-scale effect is the
    PPI++ estimate of the mean paired difference over its pilot sd, and rho, the judge-human correlation of the
    paired differences on the pilot, gives the prediction-powered count as well. With `judges` (more judges'
    frames, `--judge`), the judge is the one predictor `judge estimate --judge` would use: their cross-fitted
    combination on the pilot's labels (rho measured out of fold), priced with its fixed weight.

    `relative` (an active design: each dialogue's p~, relative_probabilities): the table gains what that design
    needs, `dialogues_active`. With a pilot, the design's own variance: the pilot's errors (the paired differences'
    residual on the judge's, or the differences themselves where the judge cannot be used) weighed by 1/p~ at
    their dialogues (active_design_factor, `design_factor`; `active_basis` "pilot"). Without one nothing says
    where the judge errs, so the count is the uniform one at the design's worst case, errors only where p~ is
    lowest: 1 / min p~, at most 1 / ACTIVE_FLOOR (`active_basis` "worst case"); a signal unrelated to the error
    costs mean(1 / p~) (benchmarks/active_design.py --floors).
    """
    rows = []
    for criterion in criteria:
        ranked = systems[systems["criterion"] == criterion].sort_values("rank")
        if len(ranked) < 2:
            continue
        first, second = ranked["system"].iloc[0], ranked["system"].iloc[1]
        items, names, scores, judged = judge_matrices(judge, criterion)
        a, b = list(names).index(first), list(names).index(second)
        both = judged[:, a] & judged[:, b]
        g = scores[both, a] - scores[both, b]
        row = {"criterion": criterion, "system_a": first, "system_b": second, "n_judged": int(both.sum()),
               "judge_difference": float(g.mean()) if len(g) else np.nan,
               "judge_effect": effect_size(g), "power": power, "alpha": alpha}
        effect = row["judge_effect"]
        rho, d, labelled = np.nan, None, None
        if pilot is not None:
            part = pilot[pilot["criterion"] == criterion].pivot(index="item_id", columns="system", values="human")
            if judges:
                g = jury_differences(judge, part, criterion, judges, first, second)[both]
            part = part.reindex(index=items[both], columns=[first, second])
            d = (part[first] - part[second]).to_numpy(float)
            labelled = ~np.isnan(d)
            row["n_pilot"] = int(labelled.sum())
            if labelled.sum() >= 3:
                if judges:
                    from .predictor import cross_prediction_lambda

                    result = ppi_mean(d, g, lam=cross_prediction_lambda(d, g))
                else:
                    result = ppi_mean(d, g)
                sd = float(np.std(d[labelled], ddof=1))
                effect = float(result.estimate) / sd if sd > 0 else np.nan
                row["human_difference"] = float(result.estimate)
                row["human_effect"] = effect
                if np.std(g[labelled]) > 0 and sd > 0:
                    rho = float(np.corrcoef(d[labelled], g[labelled])[0, 1])
            row["rho"] = rho
        row["dialogues_human_only"] = dialogues_needed(effect, power, alpha)
        row["dialogues_with_judge"] = (dialogues_needed(effect, power, alpha, rho, row["n_judged"],
                                                        combined=bool(judges)) if np.isfinite(rho) else None)
        if relative is not None:
            p = relative.reindex(items[both]).fillna(1.0).to_numpy(float)
            pilot_labelled = labelled if row.get("n_pilot", 0) >= 3 else None
            row.update(zip(("design_factor", "active_basis", "dialogues_active"),
                           active_count(row, effect, power, alpha, rho, d, g, p, pilot_labelled, bool(judges))))
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("dialogues_human_only", "dialogues_with_judge", "dialogues_active"):
        if column in table:
            table[column] = table[column].astype("Int64")  # a count, or <NA> when no study size reaches the power
    return table


def active_count(row: dict, effect: float, power: float, alpha: float, rho: float, d, g, p, labelled,
                 combined: bool) -> tuple[float, str, int | None]:
    """(design_factor, active_basis, dialogues_active) of power_table's row for an active design with p~ = `p` on
    the pair's judged dialogues; `labelled`: the pilot's dialogues among them (None: no pilot to measure on)."""
    if np.allclose(p, 1.0):  # the pilot check fell back, or no uncertainty is recorded: a uniform draw after all
        return 1.0, "uniform", row["dialogues_with_judge"] if np.isfinite(rho) else row["dialogues_human_only"]
    if labelled is None:
        factor = float(1.0 / p.min())
        return factor, "worst case", dialogues_needed(effect, power, alpha, design_factor=factor)
    on = p[labelled]
    human = active_design_factor(d[labelled], on)
    if not np.isfinite(rho):
        return human, "pilot", dialogues_needed(effect, power, alpha, design_factor=human)
    slope = np.polyfit(g[labelled], d[labelled], 1)[0]
    factor = active_design_factor(d[labelled] - slope * g[labelled], on)  # it centres: no intercept needed
    return factor, "pilot", dialogues_needed(effect, power, alpha, rho, row["n_judged"], combined=combined,
                                             design_factor=factor, human_factor=human)


def second_stage_count(row, first: int) -> int | None:
    """The dialogues a two-stage study's second stage needs for the power asked, its first stage's `first` labelled:
    the uniform count n (dialogues_with_judge, else dialogues_human_only) and the active design's variance factor
    d = dialogues_active / n give the two-stage estimate's variance as (m1 + m2 d) / (m1 + m2)^2 in units of one
    label's (estimate.two_stage_inclusion's weights), which must reach 1 / n: m1 + m2 = (n d + sqrt(n^2 d^2 +
    4 n m1 (1 - d))) / 2. None where no study size reaches the power."""
    uniform = row.dialogues_with_judge if not pd.isna(getattr(row, "dialogues_with_judge", np.nan)) \
        else row.dialogues_human_only
    if pd.isna(uniform) or pd.isna(row.dialogues_active):
        return None
    n, d = float(uniform), float(row.dialogues_active) / float(uniform)
    total = (n * d + np.sqrt(n * n * d * d + 4.0 * n * first * (1.0 - d))) / 2.0
    return max(int(np.ceil(total - 1e-9)) - first, 0)


def jury_differences(judge: pd.DataFrame, pilot_wide: pd.DataFrame, criterion: str, judges: dict, first: str,
                     second: str) -> np.ndarray:
    """Per judged dialogue, first minus second of the cross-fitted jury (matrices.py's combined_matrices) fitted on
    the pilot's labels of every system of the criterion."""
    from .matrices import StudyMatrices, combined_matrices

    items, names, scores, judged = judge_matrices(judge, criterion)
    human = pilot_wide.reindex(index=items, columns=names).to_numpy(float)
    human = np.where(np.isnan(scores), np.nan, human)
    combined = combined_matrices(StudyMatrices(criterion, items, names, scores, human, judged), judges, True).judge
    a, b = list(names).index(first), list(names).index(second)
    return combined[:, a] - combined[:, b]


def effect_size(differences: np.ndarray) -> float:
    if len(differences) < 2:
        return float("nan")
    sd = float(np.std(differences, ddof=1))
    return float(np.mean(differences)) / sd if sd > 0 else float("nan")


def active_clause(row) -> str:
    """What the active design needs, and on what basis, for power_sentence."""
    count = row.dialogues_active
    if row.active_basis == "uniform":
        return "; the active design draws uniformly here (the --design active warning says why), so the same"
    if pd.isna(count):
        return (f"; with this active design, more than the {row.n_judged} judged"
                if not pd.isna(getattr(row, "rho", np.nan))
                else "; with this active design, more than any study can label")
    if row.active_basis == "pilot":
        return (f"; with this active design {count} (its 1/p-weighted variance {row.design_factor:.2f} x a uniform "
                "draw's on the pilot's errors)")
    return (f"; with this active design at most {count} (no pilot says where the judge errs: the worst case the "
            f"design's floor allows, {row.design_factor:.2f} x a uniform draw's variance)")


def power_sentence(table: pd.DataFrame, power: float, alpha: float) -> str:
    """The answer as one sentence for a study plan."""
    if table.empty:
        return "No criterion has two systems with judge scores, so there is nothing to separate."
    pilot = "n_pilot" in table
    parts = []
    for row in table.itertuples():
        count = row.dialogues_human_only
        text = (f"{row.criterion}: {count} dialogues" if not pd.isna(count)
                else f"{row.criterion}: more dialogues than any study can label (the judge sees no difference)")
        if pilot and pd.isna(row.rho):
            text += " (the judge-human correlation cannot be measured on this pilot)"
        elif pilot and not pd.isna(row.dialogues_with_judge):
            text += f" ({row.dialogues_with_judge} with the judge's scores on all {row.n_judged}, rho {row.rho:.2f})"
        elif pilot:
            text += f" (more than the {row.n_judged} judged with the judge's help)"
        if "dialogues_active" in table:
            text += active_clause(row)
        parts.append(f"{text} for {row.system_a} vs {row.system_b}")
    basis = (f"the human-scale effect estimated from {int(table['n_pilot'].max())} pilot dialogues and the judge "
             "(prediction-powered)" if pilot else
             "the judge's paired per-dialogue differences, assuming humans see the same standardised effect")
    return (f"To separate the judge's top two systems with {power:.0%} power in a two-sided paired t test at the "
            f"{alpha:.0%} level, humans must label, per criterion, {'; '.join(parts)}; based on {basis}.")


# -- the whole run ------------------------------------------------------------------------------------------------


def screen(judgments, human=None, *, criteria=None, score_column: str | None = None, clean: bool = False,
           scale: tuple[float, float] | None = None, budget: int | None = None, budget_unit: str = "dialogues",
           random_share: float = 0.5, power: float = 0.8, bootstrap: int = 1000, seed: int = 0,
           failure_value: float | None = None, design: str = "uniform", judges=None,
           pilot_plan=None) -> ScreenResult:
    """`judge screen` as a function: `judgments` and `human` (a pilot's labels) are paths or DataFrames (as
    calibration.io loads them); the keywords are the CLI's flags. Every option and every label is checked here
    (CalibrationError with the CLI's message); warnings go into `result.warnings`. `pilot_plan`: the folder of
    the uniform plan whose random part `human` labels; the new plan is its second stage (second_stage_plan).

    >>> import calibration
    >>> result = calibration.screen("examples/study/judgments.jsonl", budget=8, bootstrap=200)
    >>> sorted(result.files())
    ['items.csv', 'plan.csv', 'plan.json', 'power.csv', 'systems.csv']
    >>> list(result.systems.columns[:4])
    ['criterion', 'system', 'mean', 'ci_low']
    """
    from ..io import check_labels, judge_scales, read_human_labels, read_judge_scores, scale_bounds

    _check_options(budget, budget_unit, random_share, power, bootstrap, seed)
    if design not in ("uniform", "active"):
        raise CalibrationError(f"--design must be uniform or active, got {design!r}")
    if pilot_plan is not None:
        missing = [flag for flag, given in (("--design active", design == "active"), ("--human", human is not None),
                                            ("--budget", budget is not None),
                                            ("--budget-unit dialogues", budget_unit == "dialogues")) if not given]
        if missing:
            raise CalibrationError(f"--pilot-plan plans an active second stage after the pilot's uniform first: "
                                   f"give {', '.join(missing)}")
    scale, criteria = scale_option(scale), criteria_option(criteria)
    judge, path = read_judge_scores(judgments, score_column, failure_value)
    warnings_: list[str] = []
    pilot_labels, bounds = None, {}
    if human is not None:
        scales, notes = judge_scales(judge, scale, judgments, required=True)
        bounds = scale_bounds(scales)
        warnings_ += notes
        pilot_labels = read_human_labels(human, scales)
        judge, imputed = check_labels(pilot_labels, judge, criteria=criteria)
        if imputed:
            warnings_.append(f"{imputed} labelled cell(s) have no judgment line: counted as failed judgments")
    others = {}
    if judges:  # their disagreement is a sign of doubt; with a pilot they are also one predictor
        from .predictor import other_judges

        others, notes = other_judges(judges, human, scale, failure_value, judge)
        warnings_ += notes
    result = screen_tables(path, judge, criteria, pilot_labels, clean, budget, budget_unit, random_share, power,
                           seed, bootstrap, score_column, design, others, bounds,
                           None if pilot_plan is None else Path(pilot_plan))
    result.warnings = warnings_ + result.warnings
    result.provenance = provenance(judgments, judge, human, seed)
    return result


def provenance(judgments, judge: pd.DataFrame, human, seed: int) -> dict:
    """Where the numbers come from, for the reports: files (with digests), model, rubric, date, seed."""
    from datetime import datetime, timezone

    def named(source):
        if isinstance(source, (list, tuple)):  # several label files: each named, one alone as before
            return [named(one) for one in source] if len(source) > 1 else named(source[0])
        if isinstance(source, (str, Path)):
            return {"path": str(source), "sha256": file_sha256(Path(source))}
        return {"path": source.attrs.get("path", "(a DataFrame)") if source is not None else None, "sha256": None}

    values = lambda column: sorted({str(v) for v in judge[column].dropna() if str(v)})  # noqa: E731
    return {"judgments": named(judgments), "human": named(human) if human is not None else None,
            "model": ", ".join(values("model")) or None, "rubric": ", ".join(values("rubric")) or None,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "seed": seed}


def _check_options(budget, unit, random_share, power, bootstrap, seed) -> None:
    whole = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)  # noqa: E731
    if budget is not None and (not whole(budget) or budget < 1):
        raise CalibrationError(f"--budget must be a positive whole number, got {budget!r}")
    if unit not in ("dialogues", "judgments"):
        raise CalibrationError(f"--budget-unit must be dialogues or judgments, got {unit!r}")
    if not (isinstance(random_share, (int, float)) and 0.0 <= random_share <= 1.0):
        raise CalibrationError(f"--random-share must be between 0 and 1, got {random_share!r}")
    if not (isinstance(power, (int, float)) and 0.0 < power < 1.0):
        raise CalibrationError(f"--power must be between 0 and 1, got {power!r}")
    from ..options import resamples_option, seed_option

    resamples_option(bootstrap)
    seed_option(seed)


def screen_tables(path: Path, judge: pd.DataFrame, criteria=None, pilot_labels: pd.DataFrame | None = None,
                  clean: bool = False, budget: int | None = None, unit: str = "dialogues", random_share: float = 0.5,
                  power: float = 0.8, seed: int = 0, n_resamples: int = 1000,
                  score_column: str | None = None, design: str = "uniform",
                  judges: dict | None = None, bounds: dict | None = None,
                  pilot_plan: Path | None = None) -> ScreenResult:
    """The computation on loaded, checked frames. `bounds`: each criterion's scale (low, high) from the rubric or
    --scale (key "*" for every criterion), for the pilot's bunching check (bunched_rows). `pilot_plan`: the first
    stage's plan folder (second_stage_plan)."""
    pilot = None
    if pilot_labels is not None:
        pilot = aggregate_humans(pilot_labels, clean=clean)
        unknown = pilot[~pilot["item_id"].isin(set(judge["item_id"]))]
        if len(unknown):
            raise CalibrationError(f"--human: {unknown['item_id'].nunique()} labelled dialogue(s) are not in the "
                                   f"judgments, e.g. {unknown['item_id'].iloc[0]!r}")
    # A second stage's first: checked before any resampling, so bad input fails at once.
    first = None if pilot_plan is None else first_stage(pilot_plan, path, judge["item_id"], pilot)
    if "*" in set(judge["criterion"]):
        # One metric column for every criterion: the pilot's criteria, or else the column's own name.
        names = sorted(pilot["criterion"].unique()) if pilot is not None else [score_column or "score"]
        judge = expand_all_criteria(judge, names)
    pairwise = judge["system_1"].notna()
    scored = judge[~pairwise]
    pointwise = set(scored.loc[scored["status"] == "ok", "criterion"])
    wins = win_shares(judge[pairwise & ~judge["criterion"].isin(pointwise)])
    scored = pd.concat([scored, wins], ignore_index=True) if len(wins) else scored
    available = sorted(set(scored.loc[scored["status"] == "ok", "criterion"]))
    if criteria is None:
        criteria = available
    else:
        unknown = [c for c in criteria if c not in available]
        if unknown:
            raise CalibrationError(f"--criteria: no judge scores for {', '.join(unknown)}; "
                                   f"the judgments have {', '.join(available) or 'none'}")
    if not criteria:
        raise CalibrationError(f"{path}: no numeric judge score to screen")
    judge = judge[judge["criterion"].isin(criteria)]
    systems, dominated, _, _ = systems_table(scored, criteria, n_resamples, seed)
    if judges:  # more judges: where they disagree is one more sign of doubt
        judges = {name: expand_all_criteria(frame, criteria) for name, frame in judges.items()}
        judge = judge.assign(jury_disagreement=jury_disagreement(judge, judges))
    per_judgment = judgment_uncertainty(judge)
    items = items_table(judge, systems, criteria, scored[scored["criterion"].isin(criteria)], per_judgment)
    alpha = 0.05
    # An active draw follows the judge's doubt, weighted by its error per system and criterion on a pilot, which
    # also checks that the weighted doubt marks where the judge errs.
    errors = pilot_errors(judge, pilot) if design == "active" and pilot is not None else None
    strata = stratum_weights(errors) if errors is not None else pd.Series(dtype=float)
    drawn_on = stratified_uncertainty(items, per_judgment, strata)
    share, why = signal_check(drawn_on, errors) if design == "active" else (None, "")
    # A two-stage plan's bunched rows take the first stage's own interval whichever way the second is drawn.
    bunched = bunched_rows(pilot, criteria, bounds or {}) if share and pilot_plan is None else []
    if bunched:
        share, why = 0.0, (f"the pilot's labels bunch at one end of the scale for {len(bunched)} system(s) and "
                           f"criteria ({', '.join(bunched[:3])}{' ...' if len(bunched) > 3 else ''}): there "
                           "`judge estimate --plan` would withhold an active design's interval (the bounded-scale "
                           "interval that replaces the t assumes a uniform draw), so the draw is uniform")
    relative = relative_probabilities(drawn_on, share) if design == "active" else None
    table = power_table(scored, systems, criteria, power, alpha, pilot, judges, relative)
    sentence = power_sentence(table, power, alpha)
    if first is not None and "dialogues_active" in table:
        table["dialogues_second_stage"] = [second_stage_count(row, len(first.random)) for row in table.itertuples()]
        table["dialogues_second_stage"] = table["dialogues_second_stage"].astype("Int64")
        counts = [f"{row.criterion} {row.dialogues_second_stage}" for row in table.itertuples()
                  if not pd.isna(row.dialogues_second_stage)]
        if counts:
            sentence += (f" With the first stage's {len(first.random)} dialogues labelled, the second stage needs "
                         f"{', '.join(counts)} more (power.csv's dialogues_second_stage).")
    result = ScreenResult(list(criteria), systems, dominated, items, table, sentence,
                          n_resamples=n_resamples, seed=seed)
    if design == "active":
        result.warnings.append(f"--design active: {why}" + (strata_clause(strata) if share else ""))
        if pilot is not None and first is None and budget is not None:
            result.warnings.append(
                f"--human: the pilot's {pilot['item_id'].nunique()} dialogues check the draw but are not in this "
                "plan, so `judge estimate --plan` will not count their labels (a pilot thrown away costs more labels "
                "than an active draw saves: benchmarks/active_design.py --two-stage); if they are the random part of "
                "an earlier uniform plan, give its folder as --pilot-plan and they count")
    if first is not None:
        result.warnings += first.warnings
    if budget is not None:
        plan = (make_plan(items, budget, unit, random_share, seed, design, share, drawn_on["uncertainty"])
                if first is None else
                second_stage_plan(items, first, budget, random_share, seed, share, drawn_on["uncertainty"]))
        result.warnings += plan_warnings(plan, budget, unit, random_share)
        result.plan = plan
        items["part"] = items["item_id"].map(dict(zip(plan["item_id"], plan["part"]))).fillna("")
        result.plan_info = {
            "version": 1, "unit": unit, "budget": budget, "random_share": random_share, "seed": seed,
            "judgments": str(path), "judgments_sha256": file_sha256(path) if Path(path).is_file() else None,
            "plan_sha256": hashlib.sha256(plan.to_csv(index=False).encode("utf-8")).hexdigest(),
            "n_random": int((plan["part"] == "random").sum()), "n_targeted": int((plan["part"] == "targeted").sum()),
            "power": json.loads(table.to_json(orient="records")),
        }
        if design == "active":
            result.plan_info.update(design="active", uncertainty_share=share, signal=why, strata=[
                {"system": system, "criterion": criterion, "weight": float(weight)}
                for (system, criterion), weight in strata.items()])
        if first is not None:
            result.plan_info["stages"] = {
                "first_plan": str(pilot_plan), "first_plan_sha256": first.digest, "judged": len(items),
                "first": len(first.random), "second": int((plan["stage"].eq(2) & plan["part"].eq("random")).sum()),
                # dialogues labelled in the first stage: `judge export --plan` leaves them out
                "labelled": sorted(map(str, first.random + first.targeted))}
    return result


@dataclass
class FirstStage:
    """The uniform plan a two-stage study started from (first_stage): its random and targeted dialogues, the
    digest of its plan.csv, and what the pilot's labels leave to say."""

    random: list
    targeted: list
    digest: str
    warnings: list


def first_stage(directory: Path, judgments: Path, judged_items, pilot: pd.DataFrame) -> FirstStage:
    """The plan `--pilot-plan` names, held to what a first stage must be: a uniform random draw of dialogues (no
    unequal inclusion probabilities, not itself a second stage), made from these judgments, unedited; the
    pilot's labels on its dialogues only."""
    frame, info, digest, warnings = plan_contract(directory, judgments, judged_items,
                                                  "both stages must draw from the same dialogues")
    where = directory / "plan.csv"
    if "stage" in frame.columns:
        raise CalibrationError(f"{where}: already a two-stage plan: --pilot-plan takes the first, uniform plan")
    if info.get("unit", "dialogues") != "dialogues":
        raise CalibrationError(f"{directory / 'plan.json'}: a budget in {info.get('unit')}: the first stage must "
                               "draw dialogues (--budget-unit dialogues), each with the same probability")
    random = frame[frame["part"] == "random"]
    if "inclusion_probability" in frame.columns:
        drawn = random["inclusion_probability"].astype(float).to_numpy()
        if len(drawn) and np.ptp(drawn) > 1e-12 * drawn.max():
            raise CalibrationError(f"{where}: drawn with unequal inclusion probabilities (an active plan): the first "
                                   "stage must be a uniform random draw")
    if random.empty:
        raise CalibrationError(f"{where}: no random part: the first stage must be a uniform random draw")
    outside = ~pilot["item_id"].isin(set(frame["item_id"]))
    if outside.any():
        raise CalibrationError(f"--human: {pilot.loc[outside, 'item_id'].nunique()} labelled dialogue(s) are not in "
                               f"the --pilot-plan, e.g. {pilot.loc[outside, 'item_id'].iloc[0]!r}: the pilot must be "
                               "the labels of that plan's dialogues")
    unlabelled = sorted(set(random["item_id"]) - set(pilot["item_id"]))
    if unlabelled:
        warnings.append(f"{len(unlabelled)} of the first stage's {len(random)} random dialogues have no pilot label "
                        f"(e.g. {unlabelled[0]!r}): the check used the others; label them before `judge estimate`, "
                        "which counts the first stage's labelled dialogues as a random sample")
    targeted = frame.loc[frame["part"] == "targeted", "item_id"].tolist()
    return FirstStage(random["item_id"].tolist(), targeted, digest, warnings)


def second_stage_plan(items: pd.DataFrame, first: FirstStage, budget: int, random_share: float, seed: int,
                      share: float, drawn_on: pd.Series) -> pd.DataFrame:
    """plan.csv of a two-stage study (`--pilot-plan`): the first stage's rows (stage 1; its random part keeps
    its probability m1 / N), then `budget` more dialogues planned among the others as an active plan is (stage 2;
    each random one's probability given the first stage), so that `judge estimate --plan` counts the pilot's
    labels too (estimate.two_stage_inclusion). The draw follows the uncertainty as the pilot's check allowed
    (`share` 0: uniform)."""
    done = items["item_id"].isin(set(first.random)).to_numpy()
    rest = items[~done].reset_index(drop=True)
    if budget > len(rest):
        raise CalibrationError(f"--budget {budget} dialogues is more than the first stage left: {len(rest)} of "
                               f"{len(items)} dialogues")
    # The targeted part goes to dialogues not labelled yet (the first stage's targeted ones come last).
    labelled = rest["item_id"].isin(set(first.targeted))
    rest = rest.assign(priority=rest["priority"].where(~labelled, -np.inf))
    second = _active_plan(rest, budget, "dialogues", random_share, seed, share,
                          np.asarray(drawn_on, dtype=float)[~done])
    again = second["item_id"].isin(set(first.targeted)) & second["part"].eq("random")
    second.loc[again, "reason"] += "; labelled already (targeted in the first stage): its labels count"
    origin = "the --pilot-plan"
    stage_one = pd.DataFrame({"item_id": sorted(first.random), "part": "random",
                              "reason": f"first stage: the uniform random part of {origin}",
                              "inclusion_probability": len(first.random) / len(items)})
    kept = [item for item in first.targeted if item not in set(second["item_id"])]
    targeted = pd.DataFrame({"item_id": kept, "part": "targeted", "reason": f"first stage: targeted in {origin}",
                             "inclusion_probability": np.nan})
    return pd.concat([stage_one.assign(stage=1), targeted.assign(stage=1), second.assign(stage=2)],
                     ignore_index=True)



# Fewer labelled random dialogues than this give intervals too wide to decide anything, or none at all.
FEW_RANDOM = 10


def plan_warnings(plan: pd.DataFrame, budget: int, unit: str, random_share: float) -> list[str]:
    """A plan whose random part cannot carry `judge estimate`: refused when the budget left it empty by rounding,
    a warning when asked for (--random-share 0) or when it is small."""
    n_random = int((plan["part"] == "random").sum())
    if n_random == 0 and random_share > 0:
        raise CalibrationError(
            f"--budget {budget} {unit} with --random-share {random_share:g} leaves no dialogue drawn at random: "
            "`judge estimate` estimates only from the random part, so this plan could estimate nothing; raise "
            "--budget or --random-share")
    if n_random == 0:
        return ["--random-share 0: the plan has no random part; `judge estimate --plan` will refuse it (targeted "
                "labels are not a sample of anything): its labels serve only for reading"]
    if n_random < FEW_RANDOM:
        return [f"the plan's random part has {n_random} dialogue{'s' if n_random > 1 else ''}: `judge estimate` "
                f"prints no interval where it cannot hold (too few labelled dialogues) and wide ones below about "
                f"{FEW_RANDOM}; raise --budget or --random-share for intervals that decide something"]
    return []


def plan_contract(directory: Path, judgments, judged_items, instead: str) -> tuple[pd.DataFrame, dict, str, list]:
    """(plan.csv, plan.json, plan.csv's sha256, warnings) of a plan held to its contract: unedited since `judge
    screen` wrote it, made from these `judgments` (a path; a DataFrame, or the name screen gives one, cannot be
    checked: a warning) and naming only
    dialogues among `judged_items`. `instead`: what the judgments' refusal says to do."""
    frame, info = read_plan(directory)
    warnings = []
    digest = file_sha256(directory / "plan.csv")
    if info.get("plan_sha256") is None:
        warnings.append(f"{directory / 'plan.json'} records no digest of its plan (made by an older version): "
                        "plan.csv cannot be checked for edits")
    elif info["plan_sha256"] != digest:
        raise CalibrationError(f"{directory / 'plan.csv'}: differs from the plan `judge screen` wrote (plan.json "
                               f"records sha256 {info['plan_sha256'][:12]}..., the file has {digest[:12]}...): an "
                               "edited plan no longer says which dialogues were drawn at random")
    named = info.get("judgments_sha256")
    if isinstance(judgments, pd.DataFrame) or not Path(judgments).is_file():
        warnings.append("the judgments are a DataFrame: not checked against the file the plan was made from "
                        f"({info.get('judgments')})")
    elif named and named != file_sha256(Path(judgments)):
        raise CalibrationError(f"{judgments}: not the judgments the plan was made from ({info.get('judgments')}, "
                               f"sha256 {named[:12]}...): the plan's random sample was drawn from those; {instead}")
    outside = ~frame["item_id"].isin(set(judged_items))
    if outside.any():
        line = int(np.flatnonzero(outside.to_numpy())[0]) + 2
        raise CalibrationError(f"{directory / 'plan.csv'}:{line}: dialogue {frame['item_id'][outside].iloc[0]!r} is "
                               "not in the judgments: the plan was made for other judgments")
    return frame, info, digest, warnings


def read_plan(directory: Path) -> tuple[pd.DataFrame, dict]:
    """plan.csv and plan.json from a `judge screen --output-dir`, checked."""
    csv_path, json_path = directory / "plan.csv", directory / "plan.json"
    for path in (csv_path, json_path):
        if not path.is_file():
            raise CalibrationError(f"{path}: no such file (--plan takes the --output-dir of `judge screen --budget`)")
    try:
        info = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{json_path}:{exc.lineno}: invalid JSON at column {exc.colno} ({exc.msg})") \
            from None
    if not isinstance(info, dict) or info.get("version") != 1:
        raise CalibrationError(f"{json_path}: not a plan file (expected \"version\": 1)")
    try:
        plan = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{csv_path}: not a readable CSV file ({exc})") from None
    missing = [c for c in ("item_id", "part") if c not in plan.columns]
    if missing:
        raise CalibrationError(f"{csv_path}:1: missing column(s) {', '.join(missing)}")
    bad = ~plan["part"].isin(["random", "targeted"])
    if bad.any():
        line = int(bad.to_numpy().nonzero()[0][0]) + 2
        raise CalibrationError(f"{csv_path}:{line}: part must be random or targeted, "
                               f"got {plan['part'][bad].iloc[0]!r}")
    if "inclusion_probability" in plan.columns:
        text = plan["inclusion_probability"].str.strip()
        values = pd.to_numeric(text, errors="coerce")
        random = plan["part"] == "random"
        # A targeted row may leave it empty, or say 1 (`judge escalate` writes 1: drawn for certain); it never
        # enters the estimates either way.
        bad = (random | (text != "")) & ~((values > 0) & (values <= 1))
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2
            given = plan["inclusion_probability"][bad].iloc[0]
            raise CalibrationError(f"{csv_path}:{line}: inclusion_probability must be a number in (0, 1] (empty "
                                   f"allowed on a targeted row), got {given!r}")
    if "stage" in plan.columns:  # a two-stage plan (--pilot-plan): its weights need every random row's probability
        bad = ~plan["stage"].isin(["1", "2"])
        if bad.any():
            line = int(bad.to_numpy().nonzero()[0][0]) + 2
            raise CalibrationError(f"{csv_path}:{line}: stage must be 1 or 2, got {plan['stage'][bad].iloc[0]!r}")
        if "inclusion_probability" not in plan.columns:
            raise CalibrationError(f"{csv_path}:1: a stage column without inclusion_probability: a two-stage plan "
                                   "records each random dialogue's probability")
    duplicated = plan["item_id"].duplicated()
    if duplicated.any():
        line = int(duplicated.to_numpy().nonzero()[0][0]) + 2
        raise CalibrationError(f"{csv_path}:{line}: dialogue {plan['item_id'][duplicated].iloc[0]!r} "
                               "is listed twice")
    return plan, info


# -- what `judge screen` prints ----------------------------------------------------------------------------------
def format_table(frame, float_format="{:.3f}") -> str:
    if frame.empty:
        return "  (none)"
    return frame.to_string(index=False, float_format=lambda v: float_format.format(v), na_rep="-")


def print_screen(result, out=None) -> None:
    out = sys.stdout if out is None else out
    print(f"Systems: mean judge score per criterion, 95% percentile bootstrap CI ({result.n_resamples} resamples of "
          "dialogues, paired across systems); tied = no system shown better (simultaneous paired bounds over every "
          "pair of systems and criteria, Bonferroni-t: 5% for the whole table, dominated included)", file=out)
    table = result.systems.assign(tied=result.systems["tied_with_best"].map({True: "tied", False: ""}))
    print(format_table(table[["criterion", "rank", "system", "mean", "ci_low", "ci_high", "n", "p_adjusted", "tied"]]),
          file=out)
    if result.dominated:
        print("\nDominated on every criterion (kept; candidates to leave out of the human study): "
              + "; ".join(f"{loser} (by {winner})" for loser, winner in sorted(result.dominated.items())), file=out)
    else:
        print("\nNo system is dominated on every criterion.", file=out)
    top = result.items.sort_values(["priority", "item_id"], ascending=[False, True]).head(10)
    print("\nDialogues that most need humans (uncertainty of the judgments + discrimination of the leading systems)",
          file=out)
    print(format_table(top[["item_id", "uncertainty", "discrimination", "n_failed", "n_na", "n_order_disagreement",
                       "part"]]), file=out)
    print("\nPower", file=out)
    print(format_table(result.power), file=out)
    print(f"\n{result.sentence}", file=out)
    if result.plan is None:
        print("\nNo --budget given: no plan written (add --budget N --output-dir DIR for plan.csv / plan.json).",
              file=out)
    else:
        info = result.plan_info
        dialogues = lambda n: f"{n} dialogue{'' if n == 1 else 's'}"  # noqa: E731
        how = ("uniformly at random" if info.get("design") != "active" else
               "at random with inclusion probabilities rising with the judge's uncertainty (plan.csv records them)")
        if info.get("uncertainty_share") == 0.0:
            how = "uniformly at random (the active design fell back; plan.csv records the probabilities)"
        stages = info.get("stages")
        random = dialogues(info["n_random"]) if not stages else (
            f"the first stage's {dialogues(stages['first'])} (the --pilot-plan's random part) and "
            f"{dialogues(stages['second'])}")
        print(f"\nPlan: budget {info['budget']} {info['unit']}: {random} drawn {how} "
              f"(share {info['random_share']}, seed {info['seed']}) and {dialogues(info['n_targeted'])} targeted.",
              file=out)
