"""Pairwise studies to a ranking: win rates against a baseline, Bradley-Terry strengths and rank sets, from the
judge's verdict on every judged pair corrected by the human votes on a few (prediction-powered inference).

The data. A unit is one judged pair (dialogue, system_1|system_2, criterion) as `judge compare` writes it. The
judge's prediction f of a pair is the probability that system_1 wins as the judge says it: the mean of its two
verdicts when both orders were asked (1 = system_1 better, 0 = system_2, 1/2 a tie; both orders average the
position bias out), else its one verdict; a failed or abstaining judgment keeps the pair in the population with
f = 1/2 (a constant; any fixed prediction keeps the estimators unbiased). The human vote h of a pair is the mean over
its annotators of the same coding (`judge import` writes "1", "2", "0" in the judgments' order; a label given in
the reverse order "B|A" is turned round). The sampling unit is the dialogue: every estimator sums a dialogue's pairs
before taking variances (cluster by dialogue), and the labelled dialogues must be a uniformly random sample of the
judged ones: with --plan (`judge screen --budget` plans pairwise dialogues as it plans scored ones) the plan's
random part, its targeted dialogues' votes left out; without, every labelled dialogue, and the output says so.

Win rate of system s against the baseline b: the population mean, over dialogues, of the share of the dialogue's s
vs b pairs s wins (a tie counting 1/2; either order). On dialogues with one such pair (the usual design) this is the
share of pairs. Estimated by ppi.py's PPI++ mean (`ppi_mean`: lambda tuned from 20 labelled dialogues on, t
intervals, none below 3 labels), with dialogues as units; the interval adds Agresti-Coull's pseudo-votes (two wins,
two losses; see adjusted_intervals), as a share near 0 or 1 needs.

Bradley-Terry: log strengths theta (baseline 0) with P(i beats j) = sigmoid(theta_i - theta_j); the estimand is the
fit to the human votes over the population of judged pairs, ties counting 1/2 in the likelihood (the logistic loss
with outcome 1/2 is half a win each way). It is a logistic regression without intercept on x = e_1 - e_2 (the
baseline's column dropped), so PPI for M-estimation applies (Angelopoulos et al. 2023; PPI++ for GLMs): with n
labelled dialogues L and m judged-only dialogues U, theta solves

    (1/n) sum_L g(theta; h) + lambda [ (1/m) sum_U g(theta; f) - (1/n) sum_L g(theta; f) ] = 0,

g(theta; y) = sum over the dialogue's pairs of x (sigmoid(x theta) - y). The loss is convex for lambda in [0, 1]
(lambda is clipped there: judge and humans are on one scale), and systems met only through others are estimated
through the judged pairs of U. Its covariance is the cluster sandwich H^-1 [lambda^2 Cov_U(g_f)/m +
Cov_L(g_h - lambda g_f)/n] H^-1; lambda minimises its trace (PPI++), from 10 labelled dialogues on, and falls
back to 0 when the tuned fit's standard errors are wider on average than those at lambda = 0 (the choice reads
variances only, as the tuning does); below 10, lambda = 0: the human-only fit (classic PPI, lambda = 1, was 1.59
times as wide with a useless judge at 5 labelled dialogues). Intervals use a t quantile on n - 1 degrees of
freedom (n - 2 with a tuned lambda). Human-only: the same fit with lambda = 0
(a plain Bradley-Terry fit of the labelled pairs; tests check it against statsmodels' GLM), its interval from the
same sandwich; not defined when the labelled pairs leave a system unconnected to the baseline or a system wins or
loses every labelled pair (interval_note says so).

Rank sets: every difference theta_i - theta_j gets an interval that holds for all K(K-1)/2 pairs at once (the
max-|t| quantile of the strengths' estimated covariance, by Monte Carlo with a fixed seed, never above Bonferroni's
t quantile at 1 - alpha / K(K-1)), on n - p degrees of freedom for p strengths (rank_df); i is surely above j
when that interval excludes 0. rank_low = 1 + the number of systems surely above, rank_high = K - the number surely
below; when every interval covers, every system's true rank is inside its set, so the sets cover the true ranking
jointly at --confidence. The sets printed are the PPI fit's, or the human-only fit's when a PPI difference is less
precise than the human-only one (combined_rank_sets: a choice from the covariances, never from the strengths).

Length-controlled win rate (with the items' texts): the win rate at equal text length, from a logistic fit of the
votes on tanh(length gap / its sd) with an intercept, by the same PPI (length_controlled_rows). Style-controlled win
rate: the win rate at the baseline's style (length, markdown headers, list items, bold), Arena-Hard's style control:
one logistic fit over every system's pairs against the baseline with an intercept per system and the style gaps'
coefficients shared, by the same PPI (style_controlled_rows).

Non-inferiority (--margin M): a system is non-inferior to the baseline when its win rate's lower bound exceeds
0.5 - M (the two-sided interval's lower end: a one-sided test at (1 + confidence) / 2 per system); no interval, no
claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..cells import chosen_criteria
from ..errors import CalibrationError
from .bradley_terry import bradley_terry, bt_rows, connected
from .estimate_tables import twice_the_labels, with_labels_saved
from .pairs import read_pairs
from .ppi import MIN_TUNED
from .rank_sets import combined_rank_sets, rank_df, rank_sets
from .win_rates import item_styles, length_controlled_rows, style_controlled_rows, win_rate_rows

ESTIMATE_COLUMNS = ["criterion", "quantity", "system", "baseline", "estimate", "ci_low", "ci_high", "human_only",
                    "human_only_ci_low", "human_only_ci_high", "n_labelled", "n_judged", "width_ratio",
                    "effective_labels", "labels_saved", "interval_note"]


RANKING_COLUMNS = ["criterion", "system", "rank", "rank_low", "rank_high", "human_only_rank_low",
                   "human_only_rank_high"]


@dataclass
class PairwiseTables:
    estimates: pd.DataFrame
    ranking: pd.DataFrame
    criteria: list[str]
    confidence: float
    baseline: str
    margin: float | None
    n_random: int
    notes: list[str] = field(default_factory=list)
    lambdas: dict = field(default_factory=dict)
    from_plan: bool = False  # the labelled dialogues are a plan's random part (else every labelled one)


def pairwise_criteria(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None) -> list[str]:
    judged = sorted(set(judge.loc[judge["system_1"].notna(), "criterion"]))
    voted = sorted(set(labels.loc[labels["system"].astype(str).str.contains("|", regex=False), "criterion"]))
    if criteria is not None:
        return chosen_criteria(criteria, judged, "--criteria: no pairwise judgment on {unknown}; the judgments have "
                               "{available}")
    shared = [c for c in judged if c in voted]
    if not shared:
        raise CalibrationError("the pairwise judgments and the human labels have no criterion in common (judgments: "
                               f"{', '.join(judged) or '-'}; labels on pairs: {', '.join(voted) or '-'}); pairwise "
                               "labels name a pair as system 'A|B', as `judge import` writes them")
    return shared


def pairwise_estimate(judge: pd.DataFrame, labels: pd.DataFrame, baseline: str, *, criteria=None,
                      confidence: float = 0.95, margin: float | None = None, where: str = "the human labels",
                      items=None) -> PairwiseTables:
    """Win rates, Bradley-Terry strengths and rank sets of every criterion (frames as calibration.io reads them);
    with `items` (the pairs with their texts), length- and style-controlled win rates too."""
    criteria = pairwise_criteria(judge, labels, criteria)
    styles, unit = item_styles(items) if items is not None else (None, "")
    estimates, ranking, notes, lambdas = [], [], [], {}
    random_dialogues = set()
    for criterion in criteria:
        data = read_pairs(judge, labels, criterion, where)
        if baseline not in data.systems:
            raise CalibrationError(f"--baseline {baseline!r} is not a system of the pairs judged on {criterion!r} "
                                   f"(they have {', '.join(data.systems)})")
        b = data.systems.index(baseline)
        reach = connected(len(data.systems), data.first, data.second, b)
        if not reach.all():
            lost = [data.systems[s] for s in np.flatnonzero(~reach)]
            raise CalibrationError(f"{criterion}: {', '.join(lost)} never meet(s) the baseline {baseline!r}, directly "
                                   "or through other systems: no strength relative to it can be estimated; judge "
                                   "pairs that connect them")
        if not data.labelled.any():
            raise CalibrationError(f"{criterion}: no human vote on a judged pair: the estimates need votes on a random "
                                   "sample of the judged pairs")
        random_dialogues |= set(data.dialogues[np.unique(data.dialogue[data.labelled])])
        rows = win_rate_rows(data, b, confidence)
        if styles is not None:
            rows += length_controlled_rows(data, b, confidence, {key: value[0] for key, value in styles.items()})
            style_rows, style_note = style_controlled_rows(data, b, confidence, styles)
            rows += style_rows
        fit = bradley_terry(data, b, confidence)
        human = bradley_terry(data, b, confidence, human_only=True)
        lambdas[criterion] = fit.lam
        rows += bt_rows(data, b, confidence, fit, human)
        table = pd.DataFrame(rows).assign(criterion=criterion, baseline=baseline)
        estimates.append(table)
        rank, low, high = combined_rank_sets(fit, human, confidence)
        _, hlow, hhigh = rank_sets(human.theta, human.cov, rank_df(human), confidence)
        ranking.append(pd.DataFrame({"criterion": criterion, "system": data.systems, "rank": rank.astype(int),
                                     "rank_low": low.astype(int), "rank_high": high.astype(int),
                                     "human_only_rank_low": hlow.astype(int),
                                     "human_only_rank_high": hhigh.astype(int)}).sort_values(["rank", "system"]))
        if styles is not None:
            notes.append(f"{criterion}: win_rate_length_controlled = the win rate at equal text length ({unit}), "
                         "alpaca_eval's length-controlled GLM without its per-instruction term")
            if style_note:
                notes.append(f"{criterion}: win_rate_style_controlled = the win rate at the baseline's style, "
                             f"Arena-Hard's style control (length in {unit}) {style_note}")
        if data.n_failed:
            notes.append(f"{criterion}: {data.n_failed} pair(s) without a usable verdict (failed or abstained): kept "
                         "with the judge's prediction 1/2")
        if fit.ok and fit.n_labelled < MIN_TUNED:
            notes.append(f"{criterion}: {fit.n_labelled} labelled dialogues: the Bradley-Terry strengths are the human "
                         f"votes' alone (lambda = 0); the judge is used from {MIN_TUNED} on")
        if not human.ok:
            notes.append(f"{criterion}: {human.note}")
    frame = with_labels_saved(pd.concat(estimates, ignore_index=True))
    if note := twice_the_labels(frame, "quantity", "system"):
        notes.append(note)
    columns = list(ESTIMATE_COLUMNS)
    if margin is not None:
        low = frame["ci_low"].astype(float)
        frame["noninferior"] = np.where(frame["quantity"] == "win_rate", np.where(
            np.isfinite(low) & (low > 0.5 - margin), "yes", "no"), "")
        columns.append("noninferior")
    return PairwiseTables(frame[columns], pd.concat(ranking, ignore_index=True)[RANKING_COLUMNS], criteria,
                          confidence, baseline, margin, len(random_dialogues), notes, lambdas)


METHOD = ("pairwise: win rates by PPI++ (estimate.py's mean, dialogues as units); Bradley-Terry by PPI for "
          "M-estimation (logistic loss, ties 1/2, cluster sandwich by dialogue, lambda tuned from 10 labelled "
          "dialogues on and never wider than the human votes alone, else 0); rank sets from simultaneous max-t "
          "intervals on all strength differences (n - p degrees of freedom), PPI's or human-only's by their "
          "covariances; length- and style-controlled win rates with --items")


def margin_option(margin, baseline) -> float | None:
    """--margin as the functions take it: None, or a number in [0, 0.5), and only with --baseline."""
    import numbers

    from ..options import must_be

    if margin is None:
        return None
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin) \
            or not 0.0 <= float(margin) < 0.5:
        raise CalibrationError(must_be("--margin", "a number from 0 up to (not including) 0.5, e.g. 0.05", margin))
    if baseline is None:
        raise CalibrationError("--margin says how far below the baseline a system may be: give --baseline SYSTEM "
                               "too (pairwise judgments)")
    return float(margin)


def summary_markdown(tables: PairwiseTables) -> str:
    """The short Markdown a CI job can post: the decision per system and criterion."""
    level = f"{tables.confidence:.0%}"
    rows = tables.estimates[tables.estimates["quantity"] == "win_rate"]
    lines = [f"## Pairwise estimate against `{tables.baseline}`", ""]
    if tables.margin is not None:
        failing = rows[rows["noninferior"] != "yes"]
        verdict = ("every system is non-inferior" if failing.empty else
                   f"{len(failing)} of {len(rows)} system-criterion rows are not shown non-inferior")
        lines += [f"**Non-inferiority** (margin {tables.margin:g}: win rate's {level} lower bound above "
                  f"{0.5 - tables.margin:g}): {verdict}.", ""]
    lines += ["| criterion | system | win rate | " + level + " interval | human only | labelled / judged pairs |"
              + (" non-inferior |" if tables.margin is not None else ""),
              "|---|---|---|---|---|---|" + ("---|" if tables.margin is not None else "")]
    for r in rows.itertuples():
        interval = "-" if not np.isfinite(r.ci_low) else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"
        human = "-" if not np.isfinite(r.human_only) else f"{r.human_only:.3f}"
        lines.append(f"| {r.criterion} | {r.system} | {r.estimate:.3f} | {interval} | {human} | "
                     f"{r.n_labelled} / {r.n_judged} |" + (f" {r.noninferior} |" if tables.margin is not None else ""))
    lines += ["", f"Ranking (Bradley-Terry, rank sets jointly at {level}):", ""]
    for criterion, part in tables.ranking.groupby("criterion", sort=False):
        ranks = ", ".join(f"{r.system} {r.rank} [{r.rank_low}-{r.rank_high}]" for r in part.itertuples())
        lines.append(f"- {criterion}: {ranks}")
    return "\n".join(lines) + "\n"


def print_pairwise(result, out) -> None:
    from .printing import format_table, say

    level = f"{result.confidence:.0%}"
    if result.from_plan:
        say(f"Random sample: the {result.n_random} labelled dialogues of the plan's random part.", file=out)
    else:
        say(f"Random sample: all {result.n_random} dialogues with human votes are taken as a uniformly random "
              "sample of the judged dialogues; if some were chosen on purpose, the estimates are biased.", file=out)
    say(f"Against the baseline {result.baseline!r}: win_rate = share of its pairs with the baseline a system wins "
          "(tie 1/2, either order); bradley_terry = log strength relative to the baseline, fitted over every judged "
          f"pair. Intervals: {level}, prediction-powered (judge verdict on every pair, human votes correct it).",
          file=out)
    columns = ["criterion", "quantity", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
               "human_only_ci_high", "n_labelled", "n_judged", "width_ratio"]
    if result.margin is not None:
        columns.append("noninferior")
    table = result.estimates.assign(note=result.estimates["interval_note"].fillna(""))
    print(format_table(table[columns + ["note"]]), file=out)
    say(f"\nRanking (1 = best; rank_low..rank_high hold jointly for all systems at {level})", file=out)
    print(format_table(result.ranking), file=out)
    if result.margin is not None:
        failing = result.estimates[(result.estimates["quantity"] == "win_rate")
                                   & (result.estimates["noninferior"] != "yes")]
        if failing.empty:
            say(f"\nnon-inferior: every system (win rate's lower bound above {0.5 - result.margin:g})", file=out)
        else:
            names = ", ".join(f"{r.system} ({r.criterion})" for r in failing.itertuples())
            say(f"\nNOT shown non-inferior (win rate's lower bound not above {0.5 - result.margin:g}): {names}",
                  file=out)
    for note in result.notes:
        say(f"note: {note}", file=out)
