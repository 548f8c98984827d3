"""Acceptance simulation of issue 24's active design (`judge screen --design active`, `judge estimate --plan`):
labels drawn where the judge is unsure, with known inclusion probabilities, against a uniform draw of as many.

Per cell: N judged dialogues of one system. Human score y ~ N(3, 1) ("gaussian") or a 1-5 Likert mean of 3
annotators ("likert"); the judge is f = y + e, good on most dialogues (e sd 0.25) and bad on a `hard` share
(e sd 1.5: the judge misreads them). The judge's uncertainty signal (what screen's items.csv calls uncertainty:
sample spread, entropy, order disagreement) is "informative": high on the hard dialogues (0.9 +- 0.1), low
elsewhere (0.1 +- 0.1), or "useless": the same values shuffled. Uniform: n dialogues drawn at random, estimated
by ppi_mean_weighted with equal probabilities (`uniform`) and by ppi_mean (`ppi_mean`: what `judge estimate` prints
for a uniform plan, lambda cross-fitted from 20 labels); active: n drawn by systematic sampling with
screen.inclusion_probabilities (proportional to the uncertainty, floored at ACTIVE_FLOOR x uniform), estimated
by ppi_mean_weighted with those probabilities (`shown`: the share of active studies with an interval). The scale
(1, 5) is passed for Likert and rare failures, as `judge estimate` knows the rubric's. Truth: the population mean
(3 for gaussian; a large draw otherwise). `worst_active`: the active draw's lowest coverage over its systems.
`saved` = 1 - n / n_u: n_u is the number of labels a uniform draw (estimated by ppi_mean_weighted with equal
probabilities, or by ppi_mean) needs for the mean width the active draw gets from n, read off the uniform draw's
mean widths at sizes around n within n's regime of lambda (uniform_sizes, labels_matched; no model of how width
falls with n beyond the neighbouring sizes: the judge's term, lambda^2 var(f) / N, does not fall with the labels at
all, so 1 - (width ratio)^2 understates the saving); its Monte Carlo 95% interval by resampling the studies; a bound
(">") where the uniform curve, cut at 0.75 N, never gets that narrow; NaN where the active draw
prints an interval in fewer than 98% of studies. `eff/worth`: the active draw's printed effective_labels (mean)
over what its estimates were worth (n x the uniform draw's human-only squared error / its own), +- its MC se.

--two-stage: the labelled pilot as the plan's first stage (`judge screen`'s two-stage plan): m1 random dialogues,
checked as --pilot checks them, then m2 of the others drawn actively (or uniformly where the check fails), both
stages estimated together (ppi_mean_weighted with ppi_weighted.two_stage_inclusion), against a uniform draw of m1 + m2
(ppi_mean) and today's pilot (m1 only checked, m2 drawn from all N and estimated alone), per m1 + m2 labels paid.

--hard: N = 100, hard share 0.1; 2 and 6 systems (a dialogue's difficulty shared by its summaries, each system
shifted by 0.3, the judge bad on a dialogue for all its systems, one signal per dialogue), rare failures (10% of
summaries badly wrong, the judge calling fine those on its hard dialogues), and a constant judge (lambda 0).

    nice -n 10 python benchmarks/active_design.py            # the main table (about 4 minutes at load 5)
    nice -n 10 python benchmarks/active_design.py --hard     # the hard cases
    nice -n 10 python benchmarks/active_design.py --recheck  # the cells under 0.94, at 4,000 studies
    nice -n 10 python benchmarks/active_design.py --strength # savings over the signal's strength, with the ceiling
    python benchmarks/active_design.py --floors              # the ceiling over the design's floor (closed form)
    nice -n 10 python benchmarks/active_design.py --decompose  # the informative gap: the t's df or lambda
    nice -n 10 python benchmarks/active_design.py --worth    # eff/worth alone, active and uniform, hard 0 beside
    nice -n 10 python benchmarks/active_design.py --pilot    # with a labelled pilot: the signal check per study
    nice -n 10 python benchmarks/active_design.py --two-stage  # the pilot's labels counted: uniform m1, then m2
    nice -n 10 python benchmarks/active_design.py --two-stage-rare  # the same on rare failures, from 3 + 3 labels
    nice -n 10 python benchmarks/active_design.py --strata   # two criteria, the judge's error weighting the draw
    nice -n 10 python benchmarks/active_design.py --jury     # the disagreement of more judges as the signal
    nice -n 10 python benchmarks/active_design.py --real     # DialSummEval: its metrics' disagreement as the doubt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.study.bounded import unseen_pull  # noqa: E402
from calibration.study.designs import (  # noqa: E402
    ACTIVE_FLOOR,
    PILOT_CHECK,
    SIGNAL_LEVEL,
    inclusion_probabilities,
    signal_test,
    systematic_sample,
    uncertainty_weights,
)
from calibration.study.ppi import MIN_CROSS_FITTED, MIN_LABELLED, MIN_TUNED, effective_labels, ppi_mean  # noqa: E402
from calibration.study.ppi_weighted import ppi_mean_weighted, two_stage_inclusion  # noqa: E402


def population(rng, reps, size, kind, hard, systems=1):
    """(human, judge) (reps, size) for one system, (reps, systems, size) for several; signal (reps, size).

    One system: y ~ N(3, 1) or a Likert mean (the main table). Several: a dialogue's difficulty shared by its
    summaries, each system shifted by 0.3; the judge is bad on a dialogue for all its systems, and the signal is
    the dialogue's (screen's items.csv is per dialogue). "rare": most summaries fine (about 5), 10% badly wrong (1
    or 2), and on the hard dialogues the judge calls a failure fine (4.8): the failures it misses are rare."""
    shape = (reps, size) if systems == 1 else (reps, systems, size)
    is_hard = rng.random((reps, size)) < hard
    hard_cells = is_hard if systems == 1 else is_hard[:, None, :]
    if kind == "gaussian":
        y = 3.0 + rng.standard_normal(shape) if systems == 1 else \
            3.0 + 0.3 * np.arange(systems)[:, None] + 0.6 * rng.standard_normal((reps, 1, size)) \
            + 0.8 * rng.standard_normal(shape)
    elif kind == "likert":
        quality = rng.standard_normal(shape) if systems == 1 else \
            0.3 * np.arange(systems)[:, None] + 0.6 * rng.standard_normal((reps, 1, size)) \
            + 0.8 * rng.standard_normal(shape)
        y = np.clip(np.rint(3.2 + 0.9 * quality[None] + 0.7 * rng.standard_normal((3,) + shape)), 1, 5).mean(0)
    else:  # rare
        fail = rng.random(shape) < 0.1
        y = np.where(fail, rng.integers(1, 3, shape), np.clip(np.rint(4.7 + 0.4 * rng.standard_normal(shape)), 1, 5))
        y = y.astype(float)
    f = y + np.where(hard_cells, 1.5, 0.25) * rng.standard_normal(shape)
    if kind == "rare":
        f = np.where(hard_cells & (y < 3), 4.8 + 0.25 * rng.standard_normal(shape), f)
    signal = np.clip(np.where(is_hard, 0.9, 0.1) + 0.1 * rng.standard_normal((reps, size)), 0, 1)
    return y, f, signal


def measure(y, f, mask, prob, truth, bounds=None):
    """The weighted estimator on the labels `mask` drew with probabilities `prob`, the scale `bounds` known as
    `judge estimate` knows the rubric's: (result, width, shown, hit)."""
    result = ppi_mean_weighted(np.where(mask, y, np.nan), f, prob, bounds=bounds)
    shown = np.isfinite(result.ci_low)
    return result, result.ci_high - result.ci_low, shown, (result.ci_low <= truth) & (truth <= result.ci_high)


def ceiling(y, f, signal, n, floor=None):
    """The design's ceiling: 1 - n_active / n at equal variance with lambda known (each design's own best) and the
    true variances, in closed form. A fixed-size draw with probabilities pi estimates the super-population mean
    with variance sum (1/pi - 1) (r - mean r)^2 / N^2 (Poisson approximation; r = y - lambda f; f is known on all
    N, so lambda mean_all(f) adds no sampling error) plus var(y) / N (the N dialogues are themselves a draw), the
    same for both designs; uniform pi = n / N gives (1/n - 1/N) S_r^2 + var(y) / N. No degree of freedom spent, a
    normal quantile: no estimator of these labels beats it with this signal and these probabilities."""
    size = y.shape[-1]
    lams = np.linspace(0.0, 1.2, 49)
    r = y[None] - lams[:, None, None] * f[None]
    rc2 = (r - r.mean(-1, keepdims=True)) ** 2

    def variance(pi):
        return (((1.0 / pi - 1.0) * rc2).sum(-1) / size ** 2).mean(-1).min() + y.var(-1).mean() / size

    target = variance(np.full(signal.shape, n / size))
    grid = np.arange(max(MIN_LABELLED, int(0.3 * n)), int(1.5 * n) + 1)
    values = np.array([variance(np.array([inclusion_probabilities(row, k, floor=floor) for row in signal]))
                       for k in grid])
    return 1.0 - np.interp(target, values[::-1], grid[::-1]) / n


def uniform_sizes(n, size):
    """The uniform draw's sizes for its width curve around n, within n's regime of the estimator: lambda fitted on
    all the labels at MIN_TUNED to MIN_CROSS_FITTED - 1, cross-fitted from MIN_CROSS_FITTED. The width jumps up
    between the two (cross-fitting stops fitting the labels it corrects: 0.575 at 19 labels, 0.589 at 20 in the
    gaussian informative cell), so a curve across the jump would credit the draw with the regime's change. At most
    0.75 N: with most dialogues labelled the uniform draw's width levels off (var(y) / N, the super-population's
    own term, and PPI's unlabelled part vanishing) and then rises (0.433 at 75 of 100 dialogues, 0.529 at 98)."""
    low, high = (MIN_TUNED, MIN_CROSS_FITTED - 1) if n < MIN_CROSS_FITTED else (MIN_CROSS_FITTED, int(0.75 * size))
    return np.array(sorted({int(round(k)) for k in np.linspace(max(low, 0.6 * n), min(high, 2 * n), 7)} | {n}))


# labels_matched's answer where only a bound is known: the uniform draw needs more labels than its curve reaches.
CENSORED = -1.0


def mc_interval(spread):
    """The 2.5 and 97.5 percentiles of a resampled statistic, NaN where every resample is NaN (no saving: the active
    draw printed too few intervals)."""
    spread = np.asarray(spread, dtype=float)
    return tuple(np.nanpercentile(spread, [2.5, 97.5])) if np.isfinite(spread).any() else (np.nan, np.nan)


def labels_matched(sizes, widths, target, n):
    """The uniform draw's n whose mean width is `target`, read off its mean widths at `sizes` by linear
    interpolation of width^2 in 1 / n (the residual term falls as 1/n, the judge's term lambda^2 var(f) / N does
    not) between the first two neighbouring sizes that bracket it, or extrapolated from the two sizes at the end
    it lies beyond; inf where the curve never reaches it; CENSORED beyond its last size when that is below 2 n (the
    curve cut short at 0.75 N: only "more than the last size" is known)."""
    x, z, goal = 1.0 / np.asarray(sizes, dtype=float), np.square(widths), target * target
    if goal < z[-1] and sizes[-1] < 2 * n:  # beyond a curve cut short by N: censored (CENSORED: saved >= 1 - n/max)
        return CENSORED
    for k in range(len(x) - 1):
        if z[k] >= goal >= z[k + 1]:
            break
    else:
        k = 0 if goal > z[0] else len(x) - 2
    slope = (z[k + 1] - z[k]) / (x[k + 1] - x[k])
    at = x[k] + (goal - z[k]) / slope if slope > 0 else np.nan
    return 1.0 / at if at > 0 else np.inf


# A saving is read only where the active draw prints an interval in this share of its rows at least (else no mean
# width to match against the uniform draw's).
SHOWN = 0.98


def labels_saved(sizes, curve, width, rows, n):
    """(1 - n / n_u, censored) for the studies `rows`: n_u the uniform draw's labels (labels_matched on its mean
    widths `curve`, one array per size) for the mean of `width`; censored, the lower bound 1 - n / its last size.
    (NaN, False) where fewer than SHOWN of the rows' widths are finite (intervals withheld)."""
    if np.isfinite(width[rows]).mean() < SHOWN:
        return np.nan, False
    means = np.array([np.nanmean(w[rows]) for w in curve])
    matched = labels_matched(sizes, means, np.nanmean(width[rows]), n)
    return 1.0 - n / (sizes[-1] if matched == CENSORED else matched), matched == CENSORED


def saved_interval(sizes, curve, width, draws, n):
    """(saved, its Monte Carlo 2.5 and 97.5 percentiles, censored): labels_saved over every study, and over each
    resample of the studies in `draws`."""
    value, bound = labels_saved(sizes, curve, width, np.arange(len(width)), n)
    return (value, *mc_interval([labels_saved(sizes, curve, width, rows, n)[0] for rows in draws]), bool(bound))


def squared_residuals(x, y):
    """The squared residuals of y on x by least squares (the pilot's errors, as screen.pilot_errors fits them)."""
    slope, intercept = np.polyfit(x, y, 1)
    return (y - intercept - slope * x) ** 2


def jury_signal(rng, y, f):
    """(reps, size) the doubt `judge screen --judge` gives each dialogue of one system when two more judges score it,
    each uniformly mediocre (y plus noise of sd 0.5 and 0.7): screen.jury_disagreement of the three, per study."""
    import pandas as pd

    from calibration.study.uncertainty import jury_disagreement

    reps, size = y.shape
    others = (y + 0.5 * rng.standard_normal(y.shape), y + 0.7 * rng.standard_normal(y.shape))
    ids = [f"d{i}" for i in range(size)]
    signal = np.zeros((reps, size))
    for r in range(reps):
        frames = [pd.DataFrame({"item_id": ids, "system": "s", "criterion": "c", "score": x[r], "status": "ok"})
                  for x in (f, *others)]
        signal[r] = jury_disagreement(frames[0], dict(zip("ab", frames[1:]))).to_numpy()
    return signal


def pilot_checks(rng, y, f, signal, pilot, scale=None, chosen=None):
    """(floors, bunched) per study, `judge screen --human PILOT`'s two checks on `pilot` dialogues labelled at
    random (y, f: (reps, size), or (reps, S, size) for S systems; signal (reps, size)). floors: ACTIVE_FLOOR where the
    permutation test finds that the uncertainty marks the judge's error (the human score's residual on the judge's,
    least squares on the pilot, squared and averaged over a dialogue's systems; p < SIGNAL_LEVEL: screen.signal_check's
    test on the same statistics), 1 (a uniform draw) otherwise; bunched: the pilot's labels bunch at one end of
    `scale` for some system (screen.bunched_rows; False without a scale), where screen draws uniformly too.
    `chosen`: (reps, pilot) the pilot's dialogues per study (a two-stage plan's first stage), else drawn here."""
    floors, bunched = np.ones(len(y)), np.zeros(len(y), dtype=bool)
    for r in range(len(y)):
        picked = rng.choice(y.shape[-1], pilot, replace=False) if chosen is None else chosen[r]
        labels, judged = y[r][..., picked], f[r][..., picked]
        error = squared_residuals(judged.ravel(), labels.ravel()).reshape(-1, pilot).mean(0)
        relative = uncertainty_weights(signal[r], ACTIVE_FLOOR)[picked]
        if pilot >= PILOT_CHECK and np.ptp(relative) > 0 and error.any():
            floors[r] = ACTIVE_FLOOR if signal_test(relative, error)[0] < SIGNAL_LEVEL else 1.0
        bunched[r] = scale is not None and bool(np.any(unseen_pull(labels, judged, scale)))
    return floors, bunched


def active_draw(rng, signal, size, floor=None):
    """(mask, inclusion probabilities) of one fixed-size active draw per study, as `judge screen` draws it; `floor`
    one uniform share, or one per study (pilot_checks)."""
    floors = np.broadcast_to(np.asarray(floor if floor is not None else ACTIVE_FLOOR, dtype=float), (len(signal),))
    pi = np.array([inclusion_probabilities(s, size, floor=x) for s, x in zip(signal, floors)])
    mask = np.zeros(signal.shape, dtype=bool)
    for r in range(len(signal)):
        mask[r, systematic_sample(pi[r], rng)] = True
    return mask, pi


def run_cell(kind, hard, signal_kind, n, size, reps, seed, savings=True, bootstrap=300, floor=None, systems=1,
             constant=False, pilot=0):
    """One cell: uniform and active draws of the same studies. `constant`: the judge gives every summary the same
    score (lambda 0: the Hajek mean of the labels). `pilot`: that many dialogues labelled first, the active draw's
    share checked on them per study (pilot_checks; one system), its share of active studies in out["active_share"];
    a study whose check fell back is estimated as `judge estimate --plan` estimates a plan of equal probabilities
    (ppi_mean). `savings`: the labels saved (the uniform draw's width curve around n; from MIN_TUNED labels)."""
    rng = np.random.default_rng(seed)
    big = population(np.random.default_rng(99), 1, 200_000 if systems > 1 else 400_000, kind, hard, systems)[0]
    truth = 3.0 if kind == "gaussian" and systems == 1 else big.mean(-1)[0]
    y, f, signal = population(rng, reps, size, kind, hard, systems)
    if constant:
        f = np.full_like(f, 3.0)
    if signal_kind == "useless":
        signal = rng.permuted(signal, axis=1)
    elif signal_kind == "jury":  # no self-reported doubt: two more judges, and where the three disagree
        signal = jury_signal(rng, y, f)
    elif signal_kind.startswith("strength"):  # "strength=q": each dialogue keeps its own signal with probability q,
        keep = rng.random(signal.shape) < float(signal_kind.split("=")[1])  # else another dialogue's (shuffled)
        signal = np.where(keep, signal, rng.permuted(signal, axis=1))
    scale = None if kind == "gaussian" else (1, 5)
    if pilot:
        floors, bunched = pilot_checks(rng, y, f, signal, pilot, scale)
        floor = np.where(bunched, 1.0, floors)
    lift = (lambda a: a) if systems == 1 else (lambda a: a[:, None, :])  # noqa: E731  (reps, size) -> per system
    out = {}

    def uniform_draw(k):
        mask = rng.random((reps, size)).argsort(1) < k
        weighted = measure(y, f, lift(mask), lift(np.full((reps, size), k / size)), truth, scale)
        return mask, weighted, ppi_mean(np.where(lift(mask), y, np.nan), f, bounds=scale)  # `judge estimate`

    uniform_mask, (uniform, width_u, shown_u, hit_u), plain = uniform_draw(n)
    mask, pi = active_draw(rng, signal, n, floor)
    drawn, width_a, shown_a, hit_a = measure(y, f, lift(mask), lift(pi), truth, scale)
    estimate_a, effective = drawn.estimate, effective_labels(drawn)
    if pilot:  # a plan that fell back records equal probabilities: `judge estimate --plan` takes ppi_mean there
        fell_back, plain_a = floor >= 1.0, ppi_mean(np.where(mask, y, np.nan), f, bounds=scale)
        shown_p = np.isfinite(plain_a.ci_low)
        width_a = np.where(fell_back, plain_a.ci_high - plain_a.ci_low, width_a)
        hit_a = np.where(fell_back, (plain_a.ci_low <= truth) & (truth <= plain_a.ci_high), hit_a)
        shown_a = np.where(fell_back, shown_p, shown_a)
        estimate_a = np.where(fell_back, plain_a.estimate, estimate_a)
        effective = np.where(fell_back, effective_labels(plain_a), effective)
    out["uniform"] = {"coverage": float(hit_u[shown_u].mean()), "width": width_u}
    out["active"] = {"coverage": float(hit_a[shown_a].mean()), "width": width_a}
    # The active draw's lowest coverage over its systems.
    out["worst"] = float(np.min(np.where(shown_a.sum(0) > 0, (hit_a & shown_a).sum(0) / np.maximum(shown_a.sum(0), 1),
                                         1.0)))
    out["ppi_mean"] = {"coverage": np.mean((plain.ci_low <= truth) & (truth <= plain.ci_high)),
                       "width": plain.ci_high - plain.ci_low}
    out["shown"] = float(shown_a.mean())
    # What the active estimate is worth in labels: printed (effective_labels, mean) over n x the uniform draw's
    # human-only squared error / the active estimate's (over the studies); its MC se by resampling the studies.
    errors = (estimate_a - truth) ** 2
    # The estimates' own mean squared error, active over uniform (both weighted), before any interval is drawn.
    out["mse_ratio"] = float(np.mean(errors) / np.mean((uniform.estimate - truth) ** 2))
    effective = np.where(shown_a, effective, np.nan)
    human = (np.where(lift(uniform_mask), y, 0).sum(-1) / n - truth) ** 2

    def ratio(rows):
        return float(np.nanmean(effective[rows]) / (n * np.mean(human[rows]) / np.mean(errors[rows])))

    # Labels saved: 1 - n / n_u, n_u the uniform draw's labels for the active draw's mean width at n, read off the
    # uniform draw's width curve (weighted with equal probabilities, or ppi_mean) in n's regime (uniform_sizes).
    # NaN where the active draw prints no interval in more than 2% of studies (no match for uniform's width).
    draws = np.random.default_rng(seed + 1).integers(0, reps, (bootstrap, reps))
    everyone = np.arange(reps)
    if savings and n >= MIN_TUNED:
        sizes = uniform_sizes(n, size)
        curves = {"saved": [], "saved_plain": []}
        for k in sizes:
            _, (_, width_k, shown_k, _), plain_k = uniform_draw(k)
            curves["saved"].append(np.where(shown_k, width_k, np.nan))
            curves["saved_plain"].append(plain_k.ci_high - plain_k.ci_low)
        for key, curve in curves.items():
            value, low, high, bound = saved_interval(sizes, curve, width_a, draws, n)
            out[key], out[key + "_bound"] = (value, low, high), bound
    else:
        out["saved"] = out["saved_plain"] = (np.nan, np.nan, np.nan)
        out["saved_bound"] = out["saved_plain_bound"] = False
    spread = np.array([ratio(rows) for rows in draws])
    out["effective"] = (ratio(everyone), float(np.std(spread)))
    # The same for the uniform draw's ppi_mean (what `judge estimate` prints for a uniform plan), on its own errors.
    plain_effective = effective_labels(plain)
    plain_errors = (plain.estimate - truth) ** 2

    def plain_ratio(rows):
        return float(np.nanmean(plain_effective[rows]) / (n * np.mean(human[rows]) / np.mean(plain_errors[rows])))

    out["effective_plain"] = (plain_ratio(everyone), float(np.std([plain_ratio(rows) for rows in draws])))

    # The same comparison in squared-error units: the harmonic mean of the printed values over the worth, i.e.
    # mean(n / effective_labels), the printed variance ratio, against own squared error / human-only (per label).
    # An estimate whose precision varies from draw to draw (which dialogues it drew) has an arithmetic mean of its
    # per-draw worths above the worth of its mean squared error (AM >= HM) even when each is printed exactly.
    def harmonic(printed, own, rows):
        return float(1.0 / np.nanmean(1.0 / printed[rows]) / (n * np.mean(human[rows]) / np.mean(own[rows])))

    for key, printed, own in (("harmonic", effective, errors), ("harmonic_plain", plain_effective, plain_errors)):
        out[key] = (harmonic(printed, own, everyone), float(np.std([harmonic(printed, own, rows) for rows in draws])))
    out["ceiling"] = ceiling(y[:100], f[:100], signal[:100], n, floor) if systems == 1 and np.ndim(floor) == 0 \
        else np.nan
    out["active_share"] = float(np.mean(np.asarray(floor) < 1.0)) if pilot else np.nan
    return out


def two_stage_draw(rng, signal, chosen, floor, m2):
    """(mask, first, probability), each (reps, N), of a two-stage plan per study: the first stage `chosen` (reps, m1;
    a simple random sample, the pilot), the second m2 of the other dialogues by systematic_sample on
    inclusion_probabilities over them with the study's `floor` (ACTIVE_FLOOR where its pilot passed the check, 1:
    uniform, q = m2 / (N - m1)). probability: m1 / N in the first stage, q_i in the second, 1 elsewhere."""
    reps, size = signal.shape
    m1 = chosen.shape[1]
    mask, first, probability = np.zeros((reps, size), dtype=bool), np.zeros((reps, size), dtype=bool), \
        np.ones((reps, size))
    for r in range(reps):
        rest = np.setdiff1d(np.arange(size), chosen[r])
        q = inclusion_probabilities(signal[r, rest], m2, floor=floor[r])
        picked = systematic_sample(q, rng)
        mask[r, chosen[r]] = first[r, chosen[r]] = True
        probability[r, chosen[r]] = m1 / size
        mask[r, rest[picked]] = True
        probability[r, rest[picked]] = q[picked]
    return mask, first, probability


def two_stage_weights(mask, first, probability):
    """(reps, N) what ppi_mean_weighted takes as `inclusion` for two_stage_draw's plans: two_stage_inclusion on each
    study's labelled dialogues (1 elsewhere, not read)."""
    size = mask.shape[1]
    inclusion = np.ones(mask.shape)
    for r in range(len(mask)):
        on = mask[r]
        inclusion[r, on] = two_stage_inclusion(first[r][on], probability[r, on], size)
    return inclusion


def two_stage_cell(kind, signal_kind, size, m1, m2, reps, seed, hard=0.1, savings=True, bootstrap=300):
    """One cell of --two-stage, the same studies under three plans of m1 + m2 labels: "U" a uniform draw of m1 + m2
    estimated by ppi_mean (`judge estimate`'s uniform plan); "T" the two-stage plan as `judge screen --pilot-plan`
    makes it and `judge estimate --plan` reads it: a pilot of m1 checked as pilot_checks checks it (the bunching
    check does not apply: bunched rows take the first stage's interval), the second stage drawn by two_stage_draw,
    estimated by ppi_mean_weighted with two_stage_inclusion and the first stage's bounded interval, or, where the
    second stage is uniform (every weight equal), by ppi_mean as one simple random sample; "P" today's pilot: the
    same m1 dialogues only checked, then m2 drawn from all N (active_draw; uniform where the check fails or the
    pilot bunches), estimated on the m2 alone as run_cell's pilot estimates it. Per plan: cover (over the rows with
    an interval), shown, width (NaN where none), error; "active": the share of studies drawn active; "saved":
    {plan: saved_interval against U's width curve at uniform_sizes(m1 + m2)} for T and P (NaN without `savings`).
    Truth: 3 for gaussian, a draw of 400,000 otherwise (run_cell's)."""
    rng = np.random.default_rng(seed)
    truth = 3.0 if kind == "gaussian" else population(np.random.default_rng(99), 1, 400_000, kind, hard)[0].mean()
    y, f, signal = population(rng, reps, size, kind, hard)
    if signal_kind == "useless":
        signal = rng.permuted(signal, axis=1)
    scale = None if kind == "gaussian" else (1, 5)
    n = m1 + m2

    def uniform(k):
        return ppi_mean(np.where(rng.random((reps, size)).argsort(1) < k, y, np.nan), f, bounds=scale)

    plans = {"U": uniform(n)}
    chosen = np.array([rng.choice(size, m1, replace=False) for _ in range(reps)])
    floors, bunched = pilot_checks(rng, y, f, signal, m1, scale, chosen=chosen)
    floor = np.where(bunched, 1.0, floors)  # today's one-stage plan (P) falls back where the pilot bunches
    mask, first, probability = two_stage_draw(rng, signal, chosen, floors, m2)
    labels = np.where(mask, y, np.nan)
    weighted = ppi_mean_weighted(labels, f, two_stage_weights(mask, first, probability), bounds=scale, first=first)
    together = ppi_mean(labels, f, bounds=scale)  # a uniform second stage: one simple random sample
    uniform_second = floors >= 1.0
    plans["T"] = {key: np.where(uniform_second, getattr(together, key), getattr(weighted, key))
                  for key in ("estimate", "ci_low", "ci_high")}
    mask, pi = active_draw(rng, signal, m2, floor)
    drawn = ppi_mean_weighted(np.where(mask, y, np.nan), f, pi, bounds=scale)
    plain = ppi_mean(np.where(mask, y, np.nan), f, bounds=scale)  # a plan that fell back: equal probabilities
    back = floor >= 1.0
    plans["P"] = {key: np.where(back, getattr(plain, key), getattr(drawn, key)) for key in ("estimate", "ci_low",
                                                                                           "ci_high")}
    out = {"active": float(np.mean(~uniform_second)), "saved": {}}  # T's second stages drawn active
    for key, result in plans.items():
        estimate, low, high = (result[k] if isinstance(result, dict) else getattr(result, k)
                               for k in ("estimate", "ci_low", "ci_high"))
        shown = np.isfinite(low)
        out[key] = {"cover": float(((low <= truth) & (truth <= high))[shown].mean()), "shown": float(shown.mean()),
                    "width": np.where(shown, high - low, np.nan), "error": estimate - truth}
    draws = np.random.default_rng(seed + 1).integers(0, reps, (bootstrap, reps))
    sizes = uniform_sizes(n, size)
    curve = [(lambda r: r.ci_high - r.ci_low)(uniform(k)) for k in sizes] if savings else None
    for key in ("T", "P"):
        out["saved"][key] = saved_interval(sizes, curve, out[key]["width"], draws, n) if savings \
            else (np.nan, np.nan, np.nan, False)
    return out


def two_stage_line(label, o) -> str:
    """One row of --two-stage (two_stage_cell's `o`)."""
    u_width, u_error = np.nanmean(o["U"]["width"]), np.mean(o["U"]["error"] ** 2)
    error = o["T"]["error"]
    saved = lambda t: f"{'>' if t[3] else ' '}{t[0]:+.2f} [{t[1]:+.2f}, {t[2]:+.2f}]"  # noqa: E731
    return (f"{label} | {o['T']['cover']:.3f} {o['U']['cover']:.3f} {o['P']['cover']:.3f} | {o['T']['shown']:.2f} | "
            f"{o['active']:.2f} | {np.nanmean(o['T']['width']) / u_width:.3f} "
            f"{np.nanmean(o['P']['width']) / u_width:.3f} | {np.mean(error ** 2) / u_error:.3f} "
            f"{np.mean(o['P']['error'] ** 2) / u_error:.3f} | "
            f"{np.mean(error):+.4f} {np.std(error) / np.sqrt(len(error)):.4f} | {saved(o['saved']['T'])} "
            f"{saved(o['saved']['P'])}")


TWO_STAGE_COLUMNS = ("| cover: T U P | shown T | active | width / U's: T P | squared error / U's: T P | bias T, "
                     "its MC se | labels saved vs uniform [MC 95%]: T, P")


def strata_population(rng, reps, size, errors, hard=0.1):
    """(y, f, doubt), each (reps, C, size): C criteria of one system on `size` dialogues, y ~ N(3, 1) each; the
    judge errs by sd errors[c] on criterion c's hard dialogues (a share `hard`, drawn for each criterion on its
    own), by 0.25 elsewhere, and its doubt about a judgment is 0.9 +- 0.1 on its criterion's hard dialogues and
    0.1 +- 0.1 elsewhere (screen's per-judgment uncertainty)."""
    shape = (reps, len(errors), size)
    is_hard = rng.random(shape) < hard
    y = 3.0 + rng.standard_normal(shape)
    f = y + np.where(is_hard, np.asarray(errors, dtype=float)[:, None], 0.25) * rng.standard_normal(shape)
    return y, f, np.clip(np.where(is_hard, 0.9, 0.1) + 0.1 * rng.standard_normal(shape), 0.0, 1.0)


def strata_designs(rng, y, f, doubt, pilot):
    """Per study, one pilot of `pilot` dialogues labelled at random, and the active draw `judge screen --human`
    makes from it: {"plain": the dialogue's uncertainty the mean of its judgments' (before), "strata": weighted by
    screen.stratum_weights on the pilot's errors} -> (uncertainty (reps, size), floors (reps,)), each checked by
    screen's signal test on the same pilot (the dialogue's squared residual, the mean over its criteria)."""
    import pandas as pd

    from calibration.study.designs import stratum_weights

    reps, criteria, size = y.shape
    out = {key: (np.zeros((reps, size)), np.ones(reps)) for key in ("plain", "strata")}
    for r in range(reps):
        chosen = rng.choice(size, pilot, replace=False)
        squared = np.array([squared_residuals(f[r, c, chosen], y[r, c, chosen]) for c in range(criteria)])
        index = pd.MultiIndex.from_product([chosen, ["s"], range(criteria)], names=["item_id", "system", "criterion"])
        errors = pd.Series(squared.T.ravel(), index=index)
        weights = stratum_weights(errors).droplevel("system").reindex(range(criteria)).to_numpy()
        for key, w in (("plain", np.ones(criteria)), ("strata", weights)):
            signal = (w[:, None] * doubt[r]).mean(0)
            relative = uncertainty_weights(signal, ACTIVE_FLOOR)[chosen]
            out[key][0][r] = signal
            out[key][1][r] = ACTIVE_FLOOR if signal_test(relative, squared.mean(0))[0] < SIGNAL_LEVEL else 1.0
    return out


def strata_cell(errors, n, size, reps, seed, pilot, useless=False, bootstrap=200):
    """Labels saved per criterion by the active draw whose uncertainty is or is not weighted by the pilot's error per
    criterion (strata_designs), against a uniform draw, the same studies: {design: {"saved": [(value, lo, hi,
    censored) per criterion], "cover": [...], "active": share of studies drawn active}}. `useless`: each
    criterion's doubt shuffled over the dialogues."""
    rng = np.random.default_rng(seed)
    y, f, doubt = strata_population(rng, reps, size, errors)
    if useless:
        doubt = rng.permuted(doubt, axis=-1)
    designs = strata_designs(rng, y, f, doubt, pilot)
    sizes = uniform_sizes(n, size)
    criteria = len(errors)
    curves = [[] for _ in range(criteria)]
    for k in sizes:
        mask = rng.random((reps, size)).argsort(1) < k
        for c in range(criteria):
            _, width, shown, _ = measure(y[:, c], f[:, c], mask, np.full((reps, size), k / size), 3.0)
            curves[c].append(np.where(shown, width, np.nan))
    draws = np.random.default_rng(seed + 1).integers(0, reps, (bootstrap, reps))
    out = {}
    for key, (signal, floors) in designs.items():
        mask, pi = active_draw(rng, signal, n, floors)
        row = {"saved": [], "cover": [], "active": float(np.mean(floors < 1.0))}
        for c in range(criteria):
            _, width, shown, hit = measure(y[:, c], f[:, c], mask, pi, 3.0)
            width = np.where(shown, width, np.nan)
            row["saved"].append(saved_interval(sizes, curves[c], width, draws, n))
            row["cover"].append(float(hit[shown].mean()))
        out[key] = row
    return out


def real_doubt(metrics, systems, judge_index):
    """(D,) each dialogue's doubt as `judge screen --judge NAME=FILE ...` records it with DialSummEval's other 31
    metrics as the jury: screen.jury_disagreement of the judge and them, per summary, averaged over the dialogue's
    summaries (items.csv's uncertainty; the metrics have no other sign of doubt)."""
    import pandas as pd

    from calibration.study.uncertainty import jury_disagreement

    dialogues, count, k = metrics.shape

    def frame(x):
        return pd.DataFrame({"item_id": np.repeat([f"d{i}" for i in range(dialogues)], count),
                             "system": np.tile(systems, dialogues), "criterion": "c", "score": x.reshape(-1),
                             "status": "ok"})

    others = {str(i): frame(metrics[..., i]) for i in range(k) if i != judge_index}
    spread = jury_disagreement(frame(metrics[..., judge_index]), others).to_numpy().reshape(dialogues, count)
    return np.nanmean(spread, axis=1)


def real(reps: int, seed: int = 5, sizes=(10, 20, 30), pilot: int = 20) -> None:
    """DialSummEval (../shared/data or $JUDGE_SHARED_DATA): 100 dialogues x 14 systems, 4 criteria (each its own
    study), QuestEval as the judge and the disagreement of the other 31 metrics with it as the doubt (real_doubt).
    Per criterion and n, the dialogues redrawn `reps` times: uniformly (estimated as `judge estimate` estimates a
    uniform plan: ppi_mean, the systems sharing lambda below 20 labels, the 1-5 scale known), actively
    (ppi_mean_weighted with the draw's inclusion probabilities, as `judge estimate --plan`), and actively after a
    pilot of `pilot` random labelled dialogues, checked as `judge screen --human` checks it (`piloted`: the signal
    check; `guarded`: also uniform where the pilot's labels bunch at one end of the scale for some system, the
    estimate's unseen_pull on the pilot); a study that falls back labels a uniform draw, estimated as the uniform one.
    Truth: each system's mean over the 100 dialogues. The pilot's labels are not counted. `worst`: the lowest
    coverage over the systems that print an interval; `shown`: the share of rows (systems x studies) with one."""
    from labels_coverage import dialsummeval  # the same folder
    from scipy import stats as scipy_stats

    criteria, systems, human, metrics, names = dialsummeval()
    judge_index = names.index("questeval")
    f = metrics[..., judge_index].T  # (S, D)
    doubt = real_doubt(metrics, systems, judge_index)
    dialogues = len(doubt)
    print(f"DialSummEval: {dialogues} dialogues x {len(systems)} systems; judge questeval, doubt the disagreement of "
          f"the other {len(names) - 1} metrics (per dialogue {doubt.min():.2f}-{doubt.max():.2f}); {reps} redraws per "
          f"cell; pilot {pilot} dialogues")
    print("criterion     n rho | cover/worst/shown: uniform | active | piloted | guarded | labels saved vs uniform "
          "[MC 95%]: active; piloted, guarded (share drawn active) | MSE active/uniform")
    for c, criterion in enumerate(criteria):
        y = human[c].T  # (S, D)
        truth = y.mean(1)
        # The judge's error on each dialogue, on all the labels (what the doubt should mark): the mean over its
        # summaries of the squared residual of the human score on the judge's (within systems).
        yc, fc = y - y.mean(1, keepdims=True), f - f.mean(1, keepdims=True)
        residual = ((yc - ((yc * fc).sum() / (fc * fc).sum()) * fc) ** 2).mean(0)
        marks = float(scipy_stats.spearmanr(doubt, residual)[0])
        for n in sizes:
            rng = np.random.default_rng(seed + 101 * c + n)

            def uniform(k):
                mask = rng.random((reps, dialogues)).argsort(1) < k
                return ppi_mean(np.where(mask[:, None, :], y, np.nan), f, bounds=(1, 5), shared=True)

            def weighted(floors=None):
                mask, pi = active_draw(rng, np.broadcast_to(doubt, (reps, dialogues)), n, floors)
                return ppi_mean_weighted(np.where(mask[:, None, :], y, np.nan), f, pi[:, None, :], bounds=(1, 5))

            plain, drawn = uniform(n), weighted()
            every = lambda a: np.broadcast_to(a, (reps,) + a.shape)  # noqa: E731  (the same labels in every study)
            checked, bunched = pilot_checks(rng, every(y), every(f), every(doubt), pilot, (1, 5))
            guarded_floors = np.where(bunched, 1.0, checked)
            fallen = uniform(n)  # a study whose check fell back labels a uniform draw, estimated as `plain`
            results = {"uniform": plain, "active": drawn}
            for key, floors in (("piloted", checked), ("guarded", guarded_floors)):
                active = weighted(floors)
                back = (floors >= 1.0)[:, None]
                results[key] = {name: np.where(back, getattr(fallen, name), getattr(active, name))
                                for name in ("estimate", "ci_low", "ci_high")}
            get = lambda r, name: r[name] if isinstance(r, dict) else getattr(r, name)  # noqa: E731

            def cover(r):
                low, high = get(r, "ci_low"), get(r, "ci_high")
                shown = np.isfinite(low)
                hit = (low <= truth) & (truth <= high) & shown
                per_system = np.where(shown.sum(0) > 0, hit.sum(0) / np.maximum(shown.sum(0), 1), np.nan)
                return f"{hit.sum() / max(shown.sum(), 1):.3f}/{np.nanmin(per_system):.3f}/{shown.mean():.2f}"

            curve_sizes = uniform_sizes(n, dialogues)
            curve = [(lambda r: r.ci_high - r.ci_low)(uniform(k)) for k in curve_sizes]
            boot = np.random.default_rng(seed).integers(0, reps, (200, reps))

            def saved(r):
                width = get(r, "ci_high") - get(r, "ci_low")
                if np.isfinite(width).mean() < SHOWN:
                    return "   nan (intervals withheld)  "
                value, low, high, bound = saved_interval(curve_sizes, curve, width, boot, n)
                return f"{'>' if bound else ' '}{value:+.2f} [{low:+.2f}, {high:+.2f}]"

            mse = np.mean((drawn.estimate - truth) ** 2) / np.mean((plain.estimate - truth) ** 2)
            print(f"{criterion:12s} {n:3d} {marks:+.2f} | " + " | ".join(cover(results[k]) for k in results)
                  + f" | {saved(drawn)}; {saved(results['piloted'])}, {saved(results['guarded'])} "
                  f"({np.mean(checked < 1.0):.2f}, {np.mean(guarded_floors < 1.0):.2f}) | {mse:.3f}", flush=True)


def line(label, o) -> str:
    saved, plain, effective = o["saved"], o["saved_plain"], o["effective"]
    at_least = lambda key: ">" if o.get(key + "_bound") else " "  # noqa: E731  (censored: a lower bound)
    return (f"{label} | {o['uniform']['coverage']:.3f} {o['active']['coverage']:.3f} {o['worst']:.3f} "
            f"{o['ppi_mean']['coverage']:.3f} | {np.nanmean(o['uniform']['width']):.3f} "
            f"{np.nanmean(o['active']['width']):.3f} {o['shown']:.2f} | {at_least('saved')}{saved[0]:+.2f} "
            f"[{saved[1]:+.2f}, {saved[2]:+.2f}] {at_least('saved_plain')}{plain[0]:+.2f} [{plain[1]:+.2f}, "
            f"{plain[2]:+.2f}] | "
            f"{effective[0]:.2f}+-{effective[1]:.2f} | "
            f"{o['ceiling']:+.2f}")


COLUMNS = ("| cover: uniform active worst_active ppi_mean | width: uniform active shown | labels saved by active "
           "[MC 95%]: vs uniform, vs ppi_mean | eff/worth | ceiling (lambda known, z)")


# (kind, hard share, signal, n, N, constant judge): the cells whose active coverage was under 0.94 at 1,000 studies.
RECHECK = [("likert", 0.1, "useless", 10, 500, False), ("likert", 0.2, "useless", 20, 500, False),
           ("likert", 0.2, "useless", 50, 500, False), ("likert", 0.1, "informative", 10, 100, True),
           ("likert", 0.1, "informative", 20, 100, True), ("gaussian", 0.1, "informative", 20, 100, True)]


FLOORS = (0.4, 0.6, 0.7, 0.8, 0.9)


def decompose(reps: int, best_lambda: float = 0.88) -> None:
    """Where the informative signal's gap to the ceiling goes: the saving as measured, with a normal quantile in
    place of the t (the weighted estimator's Satterthwaite df), with lambda fixed at the design's best (about 0.88
    for this population, from the closed form), and both. Patches calibration.study.ppi_weighted for the run only."""
    from scipy import stats

    import calibration.study.ppi_weighted as estimate_module

    saved_quantile, saved_lambdas = estimate_module.t_quantile, estimate_module.weighted_cross_fitted_lambdas
    normal = lambda confidence, df: np.full(np.shape(df), stats.norm.ppf(0.5 + confidence / 2))  # noqa: E731
    known = lambda labelled, *rest: np.where(labelled, best_lambda, 0.0)  # noqa: E731
    print("variant                  hard    N   n | cover: uniform active | saved [MC 95%] | ceiling | "
          "MSE active/uniform")
    try:
        for name, quantile, lambdas in (("as is", saved_quantile, saved_lambdas), ("z", normal, saved_lambdas),
                                        ("lambda known, t", saved_quantile, known), ("lambda known, z", normal, known)):
            estimate_module.t_quantile, estimate_module.weighted_cross_fitted_lambdas = quantile, lambdas
            for hard, size, n in ((0.1, 500, 10), (0.1, 500, 20), (0.1, 500, 50), (0.2, 500, 10), (0.2, 500, 20),
                                  (0.1, 100, 10), (0.1, 100, 20)):
                if n < MIN_CROSS_FITTED and lambdas is known:
                    continue  # at 10-19 labels lambda is fitted on them all, in _ppi_mean_weighted: not patched
                o = run_cell("gaussian", hard, "informative", n, size, reps, 7 + n, bootstrap=200)
                saved = o["saved"]
                print(f"{name:22s} {hard:5.2f} {size:4d} {n:3d} | {o['uniform']['coverage']:.3f} "
                      f"{o['active']['coverage']:.3f} | {saved[0]:+.2f} [{saved[1]:+.2f}, {saved[2]:+.2f}] | "
                      f"{o['ceiling']:+.2f} | {o['mse_ratio']:.3f}", flush=True)
    finally:
        estimate_module.t_quantile, estimate_module.weighted_cross_fitted_lambdas = saved_quantile, saved_lambdas


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hard", action="store_true", help="the hard cases: rare failures, a constant judge, "
                        "2 and 6 systems")
    parser.add_argument("--floor", type=float, default=None, help="the uniform share (default: screen's ACTIVE_FLOOR)")
    parser.add_argument("--strength", action="store_true", help="savings over the signal's strength (the share of "
                        "dialogues keeping their own signal), gaussian, hard share 0.1 and 0.2, beside the ceiling")
    parser.add_argument("--floors", action="store_true", help="the ceiling over the design's floor, informative and "
                        "useless signals (closed form, no simulation of the estimator)")
    parser.add_argument("--decompose", action="store_true", help="the informative gap to the ceiling: the same cells "
                        "with a normal quantile in place of the t and/or lambda fixed at the design's best (0.88)")
    parser.add_argument("--worth", action="store_true", help="eff/worth only (the draw at n, no savings grid): "
                        "the main table's cells at N = 100 and 500, n = 10, 20, 50, the active draw's and the uniform "
                        "draw's ppi_mean, and a judge without a hard share (hard 0: normal residuals) beside them")
    parser.add_argument("--pilot", action="store_true", help="with a labelled pilot (`judge screen --human`): each "
                        "study's draw active or uniform by the signal check on 10, 20 or 30 pilot dialogues")
    parser.add_argument("--two-stage", action="store_true", help="the pilot's labels counted: a uniform first stage "
                        "of m1, the signal checked on it, m2 more drawn actively from the others (uniformly where the "
                        "check fails), both stages estimated together; against m1 + m2 uniform, and today's pilot")
    parser.add_argument("--two-stage-rare", action="store_true", help="--two-stage on rare failures (10%% of "
                        "summaries badly wrong), down to 3 + 3 labels: coverage where the labels bunch")
    parser.add_argument("--strata", action="store_true", help="two criteria whose judge errs differently, a pilot: "
                        "the active draw's uncertainty weighted by the pilot's error per criterion, or not")
    parser.add_argument("--jury", action="store_true", help="no self-reported doubt: the disagreement of two more "
                        "judges as the signal (screen --judge), unchecked and with a pilot of 20")
    parser.add_argument("--real", action="store_true", help="DialSummEval (the shared data): QuestEval as the judge, "
                        "the other 31 metrics' disagreement as the doubt, unchecked and after a pilot of 20")
    parser.add_argument("--recheck", action="store_true", help="the cells under 0.94 in the 1,000-study tables, "
                        "the active draw at n only, 4,000 studies on new seeds")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.real:
        from labels_coverage import missing_data  # the same folder

        if missing_data("dialsummeval"):
            print(missing_data("dialsummeval"))
            return 0
        real(args.repetitions)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} redraws per cell)")
        return 0
    if args.recheck:
        for kind, hard, sig, n, size, constant in RECHECK:
            o = run_cell(kind, hard, sig, n, size, 4000, 500 + n, savings=False, bootstrap=2, floor=args.floor,
                         constant=constant)
            cover = o["active"]["coverage"]
            print(f"{kind:8s} {hard:4.2f} {sig:11s} {size:4d} {n:3d} constant={str(constant)[0]} | active "
                  f"{cover:.3f} +- {np.sqrt(cover * (1 - cover) / 4000):.3f} uniform {o['uniform']['coverage']:.3f} "
                  f"ppi_mean {o['ppi_mean']['coverage']:.3f}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s, 4000 repetitions per cell)")
        return 0
    if args.worth:
        print("kind     hard  signal      N   n | eff/worth [+- MC se]: active  uniform (ppi_mean) | harmonic mean "
              "of eff over worth: active  uniform")
        cells = [(kind, hard, sig, size, n) for kind in ("gaussian", "likert") for hard in (0.0, 0.1, 0.2)
                 for sig in ("informative", "useless") for size in (100, 500) for n in (10, 20, 50)
                 if not (hard == 0.0 and sig == "informative")]  # hard 0: the signal marks nothing either way
        for index, (kind, hard, sig, size, n) in enumerate(cells):
            o = run_cell(kind, hard, sig, n, size, args.repetitions, 900 + index, savings=False, bootstrap=200,
                         floor=args.floor)
            (a, a_se), (u, u_se) = o["effective"], o["effective_plain"]
            (ha, ha_se), (hu, hu_se) = o["harmonic"], o["harmonic_plain"]
            print(f"{kind:8s} {hard:4.2f} {sig:11s} {size:4d} {n:3d} | {a:.2f} +- {a_se:.2f}  {u:.2f} +- {u_se:.2f} | "
                  f"{ha:.2f} +- {ha_se:.2f}  {hu:.2f} +- {hu_se:.2f}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        return 0
    if args.floors:
        print("N    hard   n | ceiling informative/useless by floor: " + "  ".join(f"{x:.1f}" for x in FLOORS))
        for size in (100, 500):
            for hard in (0.1, 0.2):
                for n in (20, 50):
                    rng = np.random.default_rng(11)
                    y, f, signal = population(rng, 100, size, "gaussian", hard)
                    shuffled = rng.permuted(signal, axis=1)
                    print(f"{size:4d} {hard:4.2f} {n:3d} | " + "  ".join(
                        f"{ceiling(y, f, signal, n, x):+.2f}/{ceiling(y, f, shuffled, n, x):+.2f}" for x in FLOORS),
                        flush=True)
        return 0
    if args.decompose:
        decompose(args.repetitions)
        return 0
    if args.pilot:
        print("kind     hard  signal        N   n pilot " + COLUMNS + " | share of studies drawn active")
        cells = [(kind, 0.1, sig, size, n, m) for kind in ("gaussian", "likert")
                 for sig in ("informative", "useless", "strength=0.5") for size in (100, 500) for n in (20, 50)
                 for m in (10, 20, 30) if kind == "gaussian" or not sig.startswith("strength")]
        for index, (kind, hard, sig, size, n, m) in enumerate(cells):
            o = run_cell(kind, hard, sig, n, size, args.repetitions, 700 + index, pilot=m)
            print(line(f"{kind:8s} {hard:4.2f} {sig:13s} {size:4d} {n:3d} {m:5d}", o)
                  + f" | {o['active_share']:.2f}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        return 0
    if args.two_stage:
        print("kind     signal        N  m1  m2 " + TWO_STAGE_COLUMNS)
        cells = [(kind, sig, size, m1, m2) for kind in ("likert", "gaussian") for sig in ("informative", "useless")
                 for size in (100, 500) for m1, m2 in ((10, 10), (20, 20), (30, 30), (20, 40))]
        low = []
        for index, (kind, sig, size, m1, m2) in enumerate(cells):
            o = two_stage_cell(kind, sig, size, m1, m2, args.repetitions, 1500 + index)
            print(two_stage_line(f"{kind:8s} {sig:11s} {size:4d} {m1:3d} {m2:3d}", o), flush=True)
            if o["T"]["cover"] < 0.94:
                low.append((index, kind, sig, size, m1, m2, o["T"]["cover"]))
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        if low:
            print(f"T's coverage under 0.94 at {args.repetitions}: rechecked at 4,000 studies, new seeds, no savings")
            print("kind     signal        N  m1  m2 | cover T: before, at 4,000 +- se | cover U P at 4,000 | shown T")
        for index, kind, sig, size, m1, m2, before in low:
            o = two_stage_cell(kind, sig, size, m1, m2, 4000, 1600 + index, savings=False, bootstrap=2)
            cover = o["T"]["cover"]
            print(f"{kind:8s} {sig:11s} {size:4d} {m1:3d} {m2:3d} | {before:.3f}, {cover:.3f} +- "
                  f"{np.sqrt(cover * (1 - cover) / (4000 * o['T']['shown'])):.3f} | {o['U']['cover']:.3f} "
                  f"{o['P']['cover']:.3f} | {o['T']['shown']:.2f}", flush=True)
        if low:
            print(f"({time.perf_counter() - started:.0f}s in all)")
        return 0
    if args.two_stage_rare:
        print("kind signal        N  m1+m2 | cover: T U P | shown T | active | width T / U's (2,000 studies a cell)")
        for signal_kind in ("informative", "useless"):
            for size, m1, m2 in ((100, 10, 10), (100, 20, 20), (100, 30, 30), (500, 20, 20), (100, 6, 4), (100, 3, 3)):
                o = two_stage_cell("rare", signal_kind, size, m1, m2, 2000, 900 + m1 + m2 + size, savings=False,
                                   bootstrap=2)
                print(f"rare {signal_kind:11s} {size:4d} {m1:2d}+{m2:<2d} | {o['T']['cover']:.3f} "
                      f"{o['U']['cover']:.3f} {o['P']['cover']:.3f} | {o['T']['shown']:.2f} | {o['active']:.2f} | "
                      f"{np.nanmean(o['T']['width']) / np.nanmean(o['U']['width']):.3f}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s)")
        return 0
    if args.strata:
        print("errors A,B  signal        N   n pilot | drawn active: plain strata | labels saved [MC 95%] A: plain, "
              "strata | B: plain, strata | cover A, B: plain; strata")
        cells = [(errors, useless, size, n, m) for errors in ((0.5, 1.5), (0.25, 1.5), (1.5, 1.5))
                 for useless in (False, True) for size in (100, 500) for n in (20, 50) for m in (20, 30)
                 if not (useless and m == 30)]
        for index, (errors, useless, size, n, m) in enumerate(cells):
            o = strata_cell(errors, n, size, args.repetitions, 1100 + index, m, useless)
            plain, strata = o["plain"], o["strata"]
            fmt = lambda t: f"{'>' if t[3] else ' '}{t[0]:+.2f} [{t[1]:+.2f}, {t[2]:+.2f}]"  # noqa: E731
            print(f"{errors[0]:4.2f},{errors[1]:4.2f}  {'useless' if useless else 'informative':11s} {size:4d} "
                  f"{n:3d} {m:5d} | {plain['active']:.2f} {strata['active']:.2f} | {fmt(plain['saved'][0])} "
                  f"{fmt(strata['saved'][0])} | {fmt(plain['saved'][1])} {fmt(strata['saved'][1])} | "
                  f"{plain['cover'][0]:.3f} {plain['cover'][1]:.3f}; {strata['cover'][0]:.3f} "
                  f"{strata['cover'][1]:.3f}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        return 0
    if args.jury:
        print("kind     hard  signal        N   n pilot " + COLUMNS + " | share of studies drawn active")
        cells = [(kind, hard, size, n, m) for kind in ("gaussian", "likert") for hard in (0.1, 0.2)
                 for size in (100, 500) for n in (20, 50) for m in (0, 20)]
        for index, (kind, hard, size, n, m) in enumerate(cells):
            o = run_cell(kind, hard, "jury", n, size, args.repetitions, 1300 + index, pilot=m)
            share = f"{o['active_share']:.2f}" if m else "-"
            print(line(f"{kind:8s} {hard:4.2f} {'jury':13s} {size:4d} {n:3d} {m:5d}", o) + f" | {share}", flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        return 0
    if args.strength:
        print("kind     hard  signal        N   n " + COLUMNS)
        cells = [("gaussian", hard, f"strength={q}", size, n) for hard in (0.1, 0.2) for q in (0.0, 0.5, 0.8, 1.0)
                 for size in (100, 500) for n in (20, 50)]
        for index, (kind, hard, sig, size, n) in enumerate(cells):
            o = run_cell(kind, hard, sig, n, size, args.repetitions, 300 + index, floor=args.floor)
            print(line(f"{kind:8s} {hard:4.2f} {sig:13s} {size:4d} {n:3d}", o), flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
        return 0
    if args.hard:
        print("kind     signal      S const   n " + COLUMNS)
        cells = [(kind, sig, systems, False, n) for kind in ("gaussian", "likert", "rare")
                 for sig in ("informative", "useless") for systems in (2, 6) for n in (10, 20, 50)]
        cells += [(kind, "informative", systems, True, n) for kind in ("gaussian", "likert") for systems in (1, 6)
                  for n in (10, 20, 50)]
        for index, (kind, sig, systems, constant, n) in enumerate(cells):
            o = run_cell(kind, 0.1, sig, n, 100, args.repetitions, 100 + index, floor=args.floor, systems=systems,
                         constant=constant)
            print(line(f"{kind:8s} {sig:11s} {systems} {str(constant)[0]:5s} {n:3d}", o), flush=True)
        print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell, N = 100)")
        return 0
    print("kind     hard  signal      N   n " + COLUMNS)
    cells = [(kind, hard, sig, size, n) for kind in ("gaussian", "likert") for hard in (0.1, 0.2)
             for sig in ("informative", "useless") for size in (100, 500) for n in (10, 20, 50)]
    if args.quick:
        cells = [("gaussian", 0.1, "informative", 200, 20), ("likert", 0.2, "useless", 200, 20)]
    for index, (kind, hard, sig, size, n) in enumerate(cells):
        o = run_cell(kind, hard, sig, n, size, args.repetitions, index, floor=args.floor)
        print(line(f"{kind:8s} {hard:4.2f} {sig:11s} {size:4d} {n:3d}", o), flush=True)
    print(f"({time.perf_counter() - started:.0f}s, {args.repetitions} repetitions per cell)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
