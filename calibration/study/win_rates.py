"""Win rates against a baseline by PPI++ (ppi.py's mean, dialogues as units), with Agresti-Coull's pseudo-votes in
the interval; the length- and style-controlled win rates (Arena-Hard's style control: a logistic fit of the votes on
the style gaps, by the same PPI). The method is in calibration.study.pairwise's docstring."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pandas as pd

from .bradley_terry import _Parts, newton
from .estimate_tables import interval_note
from .pairs import Pairs, _effective
from .ppi import MIN_CROSS_FITTED, MIN_LABELLED, MIN_TUNED, effective_labels, ppi_mean, t_quantile


def win_rate_rows(data: Pairs, baseline: int, confidence: float) -> list[dict]:
    """PPI++ win rate of every system against the baseline, dialogues as units (ppi.py's ppi_mean)."""
    others = [k for k in range(len(data.systems)) if k != baseline]
    n_dialogues = len(data.dialogues)
    human = np.full((len(others), n_dialogues), np.nan)
    judge = np.full((len(others), n_dialogues), np.nan)
    counts = []
    for row, s in enumerate(others):
        mine = ((data.first == s) & (data.second == baseline)) | ((data.first == baseline) & (data.second == s))
        sign = data.first[mine] == s
        f = np.where(sign, data.judge[mine], 1.0 - data.judge[mine])
        h = np.where(sign, data.human[mine], 1.0 - data.human[mine])
        d = data.dialogue[mine]
        labelled = ~np.isnan(h)
        # per dialogue: the mean over its pairs; on a labelled dialogue both over the labelled pairs (matched)
        frame = pd.DataFrame({"d": d, "f": f, "h": h, "lab": labelled})
        lab_d = frame[frame["lab"]].groupby("d").agg(f=("f", "mean"), h=("h", "mean"))
        all_d = frame.groupby("d")["f"].mean()
        judge[row, all_d.index.to_numpy(int)] = all_d.to_numpy()
        judge[row, lab_d.index.to_numpy(int)] = lab_d["f"].to_numpy()
        human[row, lab_d.index.to_numpy(int)] = lab_d["h"].to_numpy()
        counts.append((int(labelled.sum()), int(mine.sum())))
    result = ppi_mean(human, judge, confidence)
    # lambda is tuned from WIN_TUNED real votes on (below: the human-only share, lambda = 0)
    small = result.n_labelled < WIN_TUNED
    result.estimate = np.where(small, result.human_only, result.estimate)
    low, high, human_low, human_high, ratio = adjusted_intervals(human, judge, result, confidence, small)
    # never wider than the votes alone: where the tuned interval is (a useless judge's were 1.002 times as wide on
    # average at 70 labelled dialogues), the human-only share and its interval; a choice from the two widths, which
    # read variances, as the tuning of lambda does
    wider = ratio > 1.0
    result.estimate = np.where(wider, result.human_only, result.estimate)
    low, high, ratio = np.where(wider, human_low, low), np.where(wider, human_high, high), np.where(wider, 1.0, ratio)
    # What the estimate is worth in votes: the plain PPI interval's effective_labels (its width against the votes'
    # own, the plug-in's overstatement divided out), not the pseudo-voted ratio: the four pseudo-votes widen the
    # votes-alone interval more than the judge's (whose pseudo-votes carry the judge's matching predictions), which
    # overstated a good judge's worth by 27% at 20 labelled dialogues (benchmarks/pairwise_coverage.py).
    # Where the votes all agree the plain interval has none: the pseudo-voted ratio then.
    with np.errstate(invalid="ignore", divide="ignore"):
        own = effective_labels(result)
        own = np.where(np.isfinite(own), own, result.n_labelled / ratio ** 2)
        worth = np.where(small | wider, result.n_labelled, own)
    rows = []
    for row, s in enumerate(others):
        n_labelled, n_judged = counts[row]
        n = int(result.n_labelled[row])
        note = interval_note("few", n) if n < MIN_LABELLED else ""
        if n_judged == 0:
            note = "no judged pair against the baseline: see bradley_terry for a comparison through other systems"
        shown = not note
        nan = math.nan
        rows.append({"quantity": "win_rate", "system": data.systems[s], "estimate": float(result.estimate[row]),
                     "ci_low": low[row] if shown else nan, "ci_high": high[row] if shown else nan,
                     "human_only": float(result.human_only[row]) if n_labelled else nan,
                     "human_only_ci_low": human_low[row] if shown else nan,
                     "human_only_ci_high": human_high[row] if shown else nan, "n_labelled": n_labelled,
                     "n_judged": n_judged, "width_ratio": ratio[row] if shown else nan,
                     "effective_labels": float(worth[row]) if shown else nan, "interval_note": note})
    return rows


# Agresti-Coull's pseudo-votes: z^2 ~ 4 at 95%, two wins and two losses.
# Win rates use the judge from this many labelled dialogues on, where ppi.py cross-fits lambda: with 10-19
# votes its in-sample tuned lambda covered 0.927 on a length-biased judge (benchmarks/pairwise_coverage.py), the
# human-only share with pseudo-votes 0.96-0.97.
WIN_TUNED = 20


PSEUDO_VOTES = np.array([1.0, 1.0, 0.0, 0.0])


def adjusted_intervals(human: np.ndarray, judge: np.ndarray, result, confidence: float, small: np.ndarray):
    """Win-rate intervals as Agresti and Coull's for a proportion: the same PPI++ interval computed with four
    pseudo-votes added to the labelled dialogues, two wins and two losses. A share near 0 or 1 from few votes has a
    sample variance that is too small (the t interval covered 0.925-0.938 at 15-20 labelled dialogues in
    benchmarks/pairwise_coverage.py); the pseudo-votes fix that and give an interval where every vote agrees
    (ppi.py's "flat"). Each pseudo-win carries the judge's mean prediction on the labelled dialogues the system
    won, each pseudo-loss its mean on those it lost (the overall mean where there is none), so that the judge's help
    is not lost (with the overall mean for all four: 0.97-0.985 and the width gain halved). lambda as ppi.py
    tunes it on the real votes, from WIN_TUNED of them on (`small`: the rows below, lambda = 0). The bounds are
    clipped to [0, 1] and widened to hold the unadjusted estimate.
    Returns (low, high, human-only low, human-only high, width ratio)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a system without a pair against the baseline
        mean_f = np.nanmean(judge, axis=1)
        won = np.where(human > 0.5, judge, np.nan)
        lost = np.where(human < 0.5, judge, np.nan)
        f_won = np.where(np.isfinite(np.nanmean(won, axis=1)), np.nanmean(won, axis=1), mean_f)
        f_lost = np.where(np.isfinite(np.nanmean(lost, axis=1)), np.nanmean(lost, axis=1), mean_f)
    extra_h = np.broadcast_to(PSEUDO_VOTES, (len(human), len(PSEUDO_VOTES)))
    extra_f = np.nan_to_num(np.stack([f_won, f_won, f_lost, f_lost], axis=1), nan=0.5)
    aug_h, aug_f = np.hstack([human, extra_h]), np.hstack([judge, extra_f])
    tuned = ppi_mean(aug_h, aug_f, confidence)
    fixed = ppi_mean(aug_h, aug_f, confidence, lam=0.0)
    pick = lambda a, b: np.where(small, b, a)  # noqa: E731
    low, high = pick(tuned.ci_low, fixed.ci_low), pick(tuned.ci_high, fixed.ci_high)
    low = np.clip(np.minimum(low, result.estimate), 0.0, 1.0)
    high = np.clip(np.maximum(high, result.estimate), 0.0, 1.0)
    human_low = np.clip(np.minimum(fixed.human_only_ci_low, result.human_only), 0.0, 1.0)
    human_high = np.clip(np.maximum(fixed.human_only_ci_high, result.human_only), 0.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = (high - low) / (human_high - human_low)
    return low, high, human_low, human_high, ratio


# Arena's style features of a text: its length (words, or characters for scripts without spaces), and its markdown
# headers, list items and bold spans (fenced code left out, as Arena's counts leave it out).
STYLE_FEATURES = ("length", "headers", "list items", "bold")


_CODE = re.compile(r"```.*?```", re.S)


_HEADER = re.compile(r"^#{1,6}\s", re.M)


_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s", re.M)


_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")


def markdown_counts(text: str) -> tuple[int, int, int]:
    """(headers, list items, bold spans) of a text, outside fenced code."""
    text = _CODE.sub("", text or "")
    return len(_HEADER.findall(text)), len(_LIST_ITEM.findall(text)), len(_BOLD.findall(text))


def item_styles(items) -> tuple[dict, str]:
    """({(dialogue, system): [length, headers, list items, bold]} from the items `judge compare` read (candidate_1
    and candidate_2 of each pair), and the length's unit (words, or characters for scripts without spaces, as
    `judge audit` counts them)."""
    from ..items import read_items

    frame = read_items(items)
    styles = {(str(d), s): np.array([words, *markdown_counts(text)], dtype=float)
              for d, s, words, text in zip(frame["item_id"], frame["system"], frame["words"], frame["text"])}
    return styles, frame.attrs["length_unit"]


def _take(data: Pairs, keep: np.ndarray) -> Pairs:
    return Pairs(data.criterion, data.systems, data.first[keep], data.second[keep], data.dialogue[keep],
                 data.dialogues, data.judge[keep], data.human[keep])


def against_baseline(data: Pairs, baseline: int) -> Pairs:
    """The pairs with the baseline, turned round so that `first` is the other system (judge and votes with them)."""
    mine = (data.first == baseline) != (data.second == baseline)
    pairs = _take(data, mine)
    turned = pairs.second == baseline
    pairs.first = np.where(turned, pairs.first, pairs.second)
    pairs.second = np.full(len(pairs.first), baseline)
    pairs.judge = np.where(turned, pairs.judge, 1.0 - pairs.judge)
    pairs.human = np.where(turned, pairs.human, 1.0 - pairs.human)
    return pairs


def _controlled_row(quantity: str, system: str, pairs: Pairs) -> dict:
    nan = math.nan
    return {"quantity": quantity, "system": system, "estimate": nan, "ci_low": nan, "ci_high": nan,
            "human_only": nan, "human_only_ci_low": nan, "human_only_ci_high": nan,
            "n_labelled": int(pairs.labelled.sum()), "n_judged": len(pairs.first), "width_ratio": nan,
            "effective_labels": nan, "interval_note": ""}


def _fill(row: dict, fit: dict, human: dict, column: int, n: int, confidence: float) -> None:
    """A controlled win rate's row from the fits: sigmoid of the system's intercept, its interval sigmoid of the
    intercept's (t quantile); `n` labelled dialogues with a pair of the system against the baseline."""
    if n < MIN_LABELLED:
        row["interval_note"] = interval_note("few", n).replace(":", " with a pair against the baseline:", 1)
    elif not fit["ok"]:
        row["interval_note"] = "the controlled fit did not converge (a system won or lost every pair): no estimate"
        return
    if not fit["ok"]:
        return
    alpha, se = fit["theta"][column], fit["se"][column]
    row["estimate"] = float(_sigmoid(alpha))
    if human["ok"]:
        row["human_only"] = float(_sigmoid(human["theta"][column]))
    if not row["interval_note"] and np.isnan(fit["df"]):  # else at least n - 1 >= shared >= 1
        row["interval_note"] = (f"{fit['n']} labelled dialogues for {fit['shared']} style coefficients shared by "
                                "the systems: an interval needs more dialogues than coefficients")
    if row["interval_note"]:
        return
    q = float(t_quantile(confidence, fit["df"]))
    row["ci_low"], row["ci_high"] = (float(_sigmoid(alpha + sign * q * se)) for sign in (-1, 1))
    if human["ok"]:  # the same labelled dialogues as the fit: its n - 1 degrees of freedom and its errors exist
        qh = float(t_quantile(confidence, human["df"]))
        row["human_only_ci_low"], row["human_only_ci_high"] = (
            float(_sigmoid(human["theta"][column] + sign * qh * human["se"][column])) for sign in (-1, 1))
        width = row["human_only_ci_high"] - row["human_only_ci_low"]
        row["width_ratio"] = (row["ci_high"] - row["ci_low"]) / width if width > 0 else math.nan
        row["effective_labels"] = _effective(n, row["width_ratio"])


def length_controlled_rows(data: Pairs, baseline: int, confidence: float, lengths: dict) -> list[dict]:
    """`win_rate_length_controlled` of every system against the baseline: the win rate it would have if its texts
    were as long as the baseline's (alpaca_eval's length-controlled GLM without its per-instruction term):
    P(s wins) = sigmoid(alpha + beta tanh(d / sd)), d = the length of s's text minus the baseline's on the pair, sd
    its spread over the judged pairs of s against the baseline; the estimate is sigmoid(alpha), the win rate at
    d = 0. Fitted as the strengths are (PPI for M-estimation with the votes on the labelled pairs and the judge on
    all, ties 1/2, lambda 0 below 10 labelled dialogues, tuned on them below 20 and cross-fitted from 20 on, never
    wider than the human votes alone, a sandwich clustered by dialogue, t quantile); the interval is sigmoid of
    alpha's. `lengths`: {(dialogue, system): length}. With a judge biased towards length and markdown, lambda tuned
    in-sample covered 0.945 +- 0.006 at 20 labelled dialogues (10 systems) and 0.937 +- 0.004 at 35 (20 systems),
    1,000 studies each; cross-fitted, 0.954 +- 0.006 and 0.947 +- 0.004 on the same studies (README, Pairwise
    studies)."""
    turned = against_baseline(data, baseline)
    rows = []
    for s in (k for k in range(len(data.systems)) if k != baseline):
        pairs = _take(turned, turned.first == s)
        row = _controlled_row("win_rate_length_controlled", data.systems[s], pairs)
        rows.append(row)
        names = data.dialogues[pairs.dialogue]
        length = np.array([lengths.get((d, data.systems[s]), np.nan) - lengths.get((d, data.systems[baseline]),
                                                                                   np.nan) for d in names])
        if np.isnan(length).any():
            row["interval_note"] = (f"{int(np.isnan(length).sum())} of its pairs against the baseline have no text "
                                    "length in --items: no length-controlled win rate")
            continue
        spread = float(np.std(length))
        z = np.tanh(length / spread) if spread > 0 else np.zeros(len(length))
        labelled = pairs.labelled
        sides = min(int((labelled & (length > 0)).sum()), int((labelled & (length < 0)).sum()))
        if spread > 0 and sides < MIN_LABELLED:
            # the votes say nothing about equal lengths: sigmoid(alpha) would be an extrapolation (its intervals
            # spanned nearly all of 0..1, the human-only ones collapsed on a fit that ran away)
            row["interval_note"] = (f"{sides} labelled pair(s) where its text is the shorter or the longer one "
                                    f"(fewer than {MIN_LABELLED}): the win rate at equal length would be an "
                                    "extrapolation, no estimate")
            continue
        x = np.column_stack([np.ones(len(z)), z])
        fit = _controlled_fit(pairs, baseline, x)
        _fill(row, fit, _controlled_fit(pairs, baseline, x, lam=0.0), 0, fit["n"], confidence)
    return rows


def style_controlled_rows(data: Pairs, baseline: int, confidence: float, styles: dict) -> tuple[list[dict], str]:
    """`win_rate_style_controlled` of every system against the baseline: the win rate it would have if its texts
    had the baseline's style (Arena-Hard's style control): one logistic fit over every system's pairs against the
    baseline, P(s wins) = sigmoid(alpha_s + gamma . z), z the pair's style gaps (STYLE_FEATURES, each
    (s - b) / (s + b + 1) as Arena takes them, scaled by its root mean square but not centred, so that z = 0 is
    equal style), gamma shared by all systems; the estimate is sigmoid(alpha_s). Fitted by the same PPI as the
    length-controlled win rate (lambda tuned for the mean of the alphas, cross-fitted from 20 labelled dialogues
    on; never wider on average over the alphas than the votes alone). A feature the labelled pairs show on fewer
    than 3 pairs is left out (nothing to learn its effect from: markdown in plain summaries); when a feature's
    labelled gaps lie on one side of 0 (fewer than 3 on the other), equal style is an extrapolation and nothing is
    estimated. A system without every text's style, or that won or lost every labelled pair (its alpha infinite), is
    left out of the fit with a note. `styles`:
    {(dialogue, system): [length, headers, list items, bold]}. Returns (rows, which features were fitted)."""
    turned = against_baseline(data, baseline)
    others = [k for k in range(len(data.systems)) if k != baseline]
    rows = {s: _controlled_row("win_rate_style_controlled", data.systems[s], _take(turned, turned.first == s))
            for s in others}
    missing = np.full(len(STYLE_FEATURES), np.nan)
    names = data.dialogues[turned.dialogue]
    mine = np.array([styles.get((d, data.systems[s]), missing) for d, s in zip(names, turned.first)]).reshape(-1, 4)
    base = np.array([styles.get((d, data.systems[baseline]), missing) for d in names]).reshape(-1, 4)
    gap = (mine - base) / (mine + base + 1.0)
    fitted = []
    for s in others:
        own = turned.first == s
        votes = turned.human[own & turned.labelled]
        if np.isnan(gap[own]).any():
            rows[s]["interval_note"] = (f"{int(np.isnan(gap[own]).any(1).sum())} of its pairs against the baseline "
                                        "have no text in --items: no style-controlled win rate")
        elif not len(votes):
            rows[s]["interval_note"] = "no labelled pair against the baseline: no style-controlled win rate"
        elif (votes == 1.0).all() or (votes == 0.0).all():
            rows[s]["interval_note"] = (f"it {'won' if votes[0] == 1.0 else 'lost'} every labelled pair against the "
                                        "baseline: its win rate at equal style is 0 or 1 by the fit, no estimate")
        else:
            fitted.append(s)
    if not fitted:
        return list(rows.values()), ""
    keep = np.isin(turned.first, fitted)
    pairs, z = _take(turned, keep), gap[keep]
    lab = pairs.labelled
    systems = (pairs.first[:, None] == np.array(fitted)[None, :]).astype(float)
    rare = [k for k in range(len(STYLE_FEATURES)) if int((z[lab, k] != 0).sum()) < MIN_LABELLED]
    used: list[int] = []
    confounded: list[int] = []
    for k in (k for k in range(len(STYLE_FEATURES)) if k not in rare):
        # a feature the systems (and the features kept) explain on the labelled pairs, variance inflation 10 or more
        # (each system's gap nearly the same on all its pairs), cannot be told from the systems' quality: its
        # coefficient would rest on a few pairs' noise and the win rates at equal style on an extrapolation
        (used if _variance_inflation(np.column_stack([systems, z[:, used]])[lab], z[lab, k]) < 10.0
         else confounded).append(k)
    names_of = lambda ks: ", ".join(STYLE_FEATURES[k] for k in ks)  # noqa: E731
    note = f"over {names_of(used) or 'no feature'}"
    if rare:
        note += f"; left out, non-zero on fewer than {MIN_LABELLED} labelled pairs: {names_of(rare)}"
    if confounded:
        note += ("; left out, the systems' own on the labelled pairs (variance inflation 10 or more): "
                 + names_of(confounded))
    one_sided = [STYLE_FEATURES[k] for k in used
                 if min(int((z[lab, k] <= 0).sum()), int((z[lab, k] >= 0).sum())) < MIN_LABELLED]
    if not used:
        for s in fitted:
            rows[s]["interval_note"] = ("no style feature varies apart from the systems on the labelled pairs: "
                                        "nothing to control for (see win_rate)")
        return list(rows.values()), note
    if one_sided:
        for s in fitted:
            rows[s]["interval_note"] = (f"the labelled pairs' {', '.join(one_sided)} gaps lie on one side of the "
                                        f"baseline's (fewer than {MIN_LABELLED} on the other): the win rate at equal "
                                        "style would be an extrapolation, no estimate")
        return list(rows.values()), note
    z = z[:, used]
    x = np.column_stack([systems, z / np.sqrt(np.mean(z ** 2, axis=0))])
    fit = _controlled_fit(pairs, baseline, x, focus=range(len(fitted)), shared=len(used))
    human = _controlled_fit(pairs, baseline, x, lam=0.0, shared=len(used))
    for column, s in enumerate(fitted):
        n = len(np.unique(pairs.dialogue[lab & (pairs.first == s)]))
        _fill(rows[s], fit, human, column, n, confidence)
    return list(rows.values()), note


def _variance_inflation(others: np.ndarray, column: np.ndarray) -> float:
    """1 / (1 - R^2) of `column` regressed on `others` (which span the constant: every pair has its system)."""
    fitted = others @ np.linalg.lstsq(others, column, rcond=None)[0]
    total = float(np.sum((column - column.mean()) ** 2))
    return total / float(np.sum((column - fitted) ** 2)) if total > 0 else math.inf


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _controlled_fit(data: Pairs, baseline: int, x: np.ndarray, lam: float | np.ndarray | None = None, focus=(0,),
                    shared: int = 1) -> dict:
    """The PPI logistic fit of the votes on `x`: its coefficients, their standard errors and the degrees of
    freedom; lambda when None: 0 below MIN_TUNED labelled dialogues, tuned on them in-sample below
    MIN_CROSS_FITTED, cross-fitted from there on (_Parts.cross_fitted_lambdas, for the mean of the `focus`
    columns), and never wider on average over the `focus` columns than the votes alone. Degrees of freedom n - 1
    (n - 2 with an in-sample lambda) from n labelled dialogues, and none (no
    interval) unless n exceeds the `shared` coefficients (length or style effects) every intercept leans on: the
    clustered sandwich of four style effects from 3 dialogues is too small (style control covered 0.919 there; with
    length alone at 3 dialogues, 0.965; four effects from 5, 0.948; n - 1 - shared degrees of freedom instead
    covered 0.988-0.992, needlessly wide)."""
    parts = _Parts(data, baseline, x=x)
    nan = np.full(x.shape[1], np.nan)
    out = {"n": parts.n, "ok": False, "theta": nan, "se": nan, "df": math.nan, "shared": shared}
    if parts.n == 0:
        return out
    tuned = lam is None
    in_sample = False  # lambda fitted on the labels it is used on (10-19 labelled dialogues): n - 2 df
    if tuned:
        lam = 0.0
        if parts.n >= MIN_TUNED and parts.m:
            start, ok = newton(x, *parts.weights(1.0))
            if ok and parts.n >= MIN_CROSS_FITTED:
                lam = parts.cross_fitted_lambdas(start, focus)
            elif ok:
                lam, in_sample = parts.tuned_lambda(start), True
    if parts.m == 0:
        lam = 0.0
    judged = bool(np.any(lam != 0.0))
    theta, ok = newton(x, *parts.weights(lam))
    if not ok:
        return out if not judged else _controlled_fit(data, baseline, x, lam=0.0, shared=shared)
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.maximum(np.diag(parts.covariance(theta, lam)), 0.0))
    df = float(parts.n - 2 if in_sample and judged else parts.n - 1) if parts.n > shared else math.nan
    out.update(ok=True, theta=theta, se=se, df=df)
    if tuned and judged:
        plain = _controlled_fit(data, baseline, x, lam=0.0, shared=shared)
        focus = list(focus)
        # never a larger standard error than the votes alone, on average over the win rates' intercepts (on the
        # win-rate scale, choosing the narrower interval covered 0.932 at 20 labelled dialogues: a near-separated
        # human-only fit looks narrow)
        if plain["ok"] and np.mean(se[focus] / plain["se"][focus]) > 1.0:
            return plain
    return out
