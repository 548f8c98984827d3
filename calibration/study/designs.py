"""Plan designs under a budget: uniform (a random sample plus the highest-priority dialogues), active (the random
part drawn with known probabilities rising with the judge's doubt, checked on a pilot: stratified allocation with
the dialogue as the unit) and two-stage (a pilot as the first, uniform stage; the second drawn on its labels), and
the warnings a plan carries. The method is in calibration.study.screen's docstring."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from judge.annotation.plan import plan_contract

from ..errors import CalibrationError


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


def inclusion_probabilities(uncertainty, size: int, floor: float | None = None) -> np.ndarray:
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


@dataclass
class FirstStage:
    """The uniform plan a two-stage study started from (first_stage): its random and targeted dialogues, the
    digest of its plan.csv, and what the pilot's labels leave to say."""

    random: list
    targeted: list
    digest: str
    warnings: list


def first_stage(directory: Path, judgments: Path | str, judged_items, pilot: pd.DataFrame) -> FirstStage:
    """The plan `--pilot-plan` names, held to what a first stage must be: a uniform random draw of dialogues (no
    unequal inclusion probabilities, not itself a second stage), made from these judgments, unedited; the
    pilot's labels on its dialogues only."""
    frame, info, digest, warnings = plan_contract(directory, judgments, judged_items,
                                                  "both stages must draw from the same dialogues", CalibrationError)
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
