"""Exact small cases of the pairwise Bradley-Terry fit (calibration.study.pairwise) at the edges the fresh mutation
draws of benchmarks/mutation.py found unguarded: one labelled dialogue, and a system set apart only once another
has been (the second round of set_apart)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibration.study.bradley_terry import bradley_terry, set_apart
from calibration.study.pairs import Pairs


def pairs(systems, rows, judge=None):
    """rows: (first, second, human vote P(first wins) or NaN, dialogue)."""
    first, second, human, dialogue = (np.array(c) for c in zip(*rows))
    human = human.astype(float)
    return Pairs("q", systems, first, second, dialogue, np.array([f"d{i}" for i in range(dialogue.max() + 1)]),
                 human.copy() if judge is None else np.asarray(judge, float), human)


def test_one_labelled_dialogue_is_fitted_and_has_no_interval():
    """One labelled dialogue where a and c each win one pair against the baseline and lose one: strengths 0, 0
    degrees of freedom (no interval, a NaN covariance of the right shape), and no "no labelled pair" note; with
    none labelled, that note."""
    rows = [(1, 0, 1.0, 0), (0, 1, 1.0, 0), (2, 0, 1.0, 0), (0, 2, 1.0, 0), (1, 0, np.nan, 1), (2, 0, np.nan, 1)]
    fit = bradley_terry(pairs(["base", "a", "c"], rows, judge=[0.7, 0.4, 0.6, 0.5, 0.6, 0.4]), 0, 0.95)
    assert fit.ok and fit.n_labelled == 1 and fit.df == 0.0 and fit.theta == pytest.approx([0.0] * 3, abs=1e-9)
    assert fit.cov.shape == (3, 3) and np.isnan(fit.cov[1:, 1:]).all()
    assert "no labelled pair" not in fit.note
    none = bradley_terry(pairs(["base", "a"], [(1, 0, np.nan, 0), (0, 1, np.nan, 1)], judge=[0.7, 0.4]), 0, 0.95)
    assert not none.ok and none.note == "no labelled pair: no estimate"


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_a_system_that_won_every_pair_but_those_against_one_set_apart_is_set_apart_next(lam):
    """x wins every pair; y loses only to x (y shown first there), so once x is set apart y has won every pair left
    and is set apart too (+1), in the second round; z and the baseline split theirs and stay."""
    rows = [(1, 0, 1.0, 0), (2, 1, 0.0, 1), (1, 3, 1.0, 2), (2, 0, 1.0, 3), (2, 3, 1.0, 4), (3, 0, 1.0, 5),
            (0, 3, 1.0, 6)]
    data = pairs(["base", "x", "y", "z"], rows)
    active, direction = set_apart(data, 0, lam)
    assert active.tolist() == [True, False, False, True]
    assert direction.tolist() == [0.0, 1.0, 1.0, 0.0]
    fit = bradley_terry(data, 0, 0.95, lam=lam)
    assert fit.ok and fit.theta[1] == fit.theta[2] == np.inf and np.isfinite(fit.theta[3])


def test_a_judge_whose_gradient_never_varies_gets_lambda_0_and_the_human_only_fit():
    """Every dialogue the same two pairs, shown the same way, and a judge that calls every pair a tie (one that failed
    everywhere is read so): its gradient is the same in every dialogue, PPI++'s lambda is 0/0 and must be 0 (the
    judge carries nothing), so the fit, covariance and degrees of freedom are the human votes' alone."""
    rng = np.random.default_rng(3)
    rows = [row for d in range(30) for row in ((1, 0, float(rng.random() < 0.6) if d < 14 else np.nan, d),
                                               (2, 1, float(rng.random() < 0.5) if d < 14 else np.nan, d))]
    data = pairs(["base", "a", "c"], rows, judge=[0.5] * len(rows))
    fit, plain = bradley_terry(data, 0, 0.95), bradley_terry(data, 0, 0.95, lam=0.0)
    assert fit.ok and fit.lam == 0.0 and fit.df == plain.df == 13
    assert fit.theta == pytest.approx(plain.theta) and fit.cov == pytest.approx(plain.cov)


def _against_base(votes, unlabelled, gaps=None):
    """System a against the baseline, one pair a dialogue (shown a first on even dialogues): the labelled votes
    (P(a wins)), then `unlabelled` judged-only pairs; the judge agrees with the votes, says 1/2 elsewhere.
    Returns the pairs and the lengths (a's text `gaps[d]` words longer; equal lengths without gaps)."""
    total = len(votes) + unlabelled
    rows, judge = [], []
    for d in range(total):
        vote = votes[d] if d < len(votes) else np.nan
        a_first = d % 2 == 0
        rows.append((1, 0, vote, d) if a_first else (0, 1, 1.0 - vote, d))
        judge.append(0.5 if np.isnan(vote) else rows[-1][2])
    gaps = np.zeros(total) if gaps is None else gaps
    lengths = {(f"d{d}", s): 50.0 + (gaps[d] if s == "a" else 0.0) for d in range(total) for s in ("base", "a")}
    return pairs(["base", "a"], rows, judge=judge), lengths


@pytest.mark.parametrize("votes, shown", [((1.0, 0.0), False), ((1.0, 0.0, 1.0), True)])
def test_the_length_controlled_win_rate_needs_three_labelled_dialogues_for_an_interval(votes, shown):
    """Equal lengths (no length to control for): the win rate is the votes' share; from 3 labelled dialogues on with
    an interval, below with the note saying how many there are."""
    from calibration.study.win_rates import length_controlled_rows

    data, lengths = _against_base(votes, unlabelled=4)
    row, = length_controlled_rows(data, 0, 0.95, lengths)
    assert row["estimate"] == pytest.approx(np.mean(votes), abs=1e-6) and row["n_labelled"] == len(votes)
    assert np.isfinite(row["ci_low"]) == shown and np.isfinite(row["ci_high"]) == shown
    assert (row["interval_note"] == "") == shown
    if not shown:
        assert row["interval_note"] == ("2 labelled dialogues with a pair against the baseline: an interval needs at "
                                        "least 3 labelled at random")
        return
    # Below 10 labelled dialogues lambda is 0: both intervals are the votes' intercept-only logistic fit, its
    # cluster sandwich by hand (one pair a dialogue): var = s^2 / (n p^2 (1 - p)^2), t quantile on n - 1 df.
    from scipy import stats

    h, n = np.array(votes), len(votes)
    p = h.mean()
    se = np.sqrt(h.var(ddof=1) / (n * p * p * (1 - p) * (1 - p)))
    q = stats.t.ppf(0.975, n - 1)
    expected = [1 / (1 + np.exp(-(np.log(p / (1 - p)) + sign * q * se))) for sign in (-1, 1)]
    assert [row["ci_low"], row["ci_high"]] == pytest.approx(expected, abs=1e-6)
    assert [row["human_only_ci_low"], row["human_only_ci_high"]] == pytest.approx(expected, abs=1e-6)
    assert row["width_ratio"] == pytest.approx(1.0) and row["effective_labels"] == pytest.approx(n)



def test_labelled_votes_that_are_all_ties_give_a_length_controlled_rate_of_one_half_and_no_width_ratio():
    """Every labelled vote a tie, lengths on both sides of equal: the fit is exact (win rate 1/2 at any length,
    every residual 0), both intervals have width 0 and their ratio is undefined (NaN), not a division error."""
    from calibration.study.win_rates import length_controlled_rows

    gaps = np.array([30.0, -20.0, 25.0, -35.0, 10.0, -15.0, 40.0, -5.0])
    data, lengths = _against_base([0.5] * 6, unlabelled=2, gaps=gaps)
    row, = length_controlled_rows(data, 0, 0.95, lengths)
    assert row["estimate"] == pytest.approx(0.5) and row["interval_note"] == ""
    assert row["ci_high"] - row["ci_low"] == pytest.approx(0.0, abs=1e-9)
    assert np.isnan(row["width_ratio"]) and np.isnan(row["effective_labels"])


@pytest.mark.parametrize("labelled_gaps, estimated", [
    ([30.0, 25.0, -20.0, -35.0, -15.0], False),  # longer on 2 labelled pairs, shorter on 3
    ([30.0, 25.0, -20.0, -35.0, -15.0, 0.0, 0.0], False),  # and 2 of equal length: on neither side
    ([30.0, 25.0, 12.0, -35.0, -15.0, 0.0, 0.0], False),  # the other way round
    ([30.0, 25.0, -20.0, -35.0, -15.0, 12.0], True)])  # longer on 3: estimated
def test_a_labelled_pair_of_equal_length_is_on_neither_side_of_it(labelled_gaps, estimated):
    """The win rate at equal length needs 3 labelled pairs where the system's text is longer and 3 where it is
    shorter (else it is an extrapolation); a pair of equal length counts on neither side."""
    from calibration.study.win_rates import length_controlled_rows

    votes = [1.0, 0.0] * 4
    data, lengths = _against_base(votes[:len(labelled_gaps)], unlabelled=2,
                                  gaps=np.array(labelled_gaps + [5.0, -5.0]))
    row, = length_controlled_rows(data, 0, 0.95, lengths)
    assert ("would be an extrapolation" in row["interval_note"]) != estimated
    assert np.isfinite(row["estimate"]) == estimated

@pytest.mark.parametrize("lost, converges", [(False, False), (True, True)])
def test_a_system_that_won_every_labelled_pair_has_no_length_controlled_win_rate_and_says_why(lost, converges):
    """Lengths on both sides of equal (4 pairs each way): a system that won all 8 labelled pairs has no finite fit
    (said); one loss among them and it has an estimate."""
    votes = [1.0] * 8
    if lost:
        votes[1] = 0.0  # at a gap of -20, with a win at -35: not separable by length
    gaps = np.array([30.0, -20.0, 25.0, -35.0, 10.0, -15.0, 40.0, -5.0, 12.0, -8.0])
    data, lengths = _against_base(votes, unlabelled=2, gaps=gaps)
    from calibration.study.win_rates import length_controlled_rows

    row, = length_controlled_rows(data, 0, 0.95, lengths)
    assert np.isfinite(row["estimate"]) == converges
    assert ("did not converge" in row["interval_note"]) != converges


@pytest.mark.parametrize("labelled", [9, 10])
def test_the_notes_say_how_many_pairs_failed_and_when_the_strengths_are_the_votes_alone(labelled):
    """Two judgments failed: said, with the count. Below 10 labelled dialogues the strengths are the votes' alone
    (lambda 0), said with the count; from 10 on the judge is used and nothing is said."""
    from test_pairwise_estimate import study
    from test_pairwise_properties import prepared

    from calibration.study.pairwise import pairwise_estimate

    judge, labels = study(seed=81, dialogues=40, labelled=labelled)
    judge.loc[[3, 7], ["forward", "swapped", "label"]] = None
    judge.loc[[3, 7], "status"] = "error"
    result = pairwise_estimate(judge, prepared(judge, labels), "base")
    assert ("quality: 2 pair(s) without a usable verdict (failed or abstained): kept with the judge's prediction 1/2"
            in result.notes)
    alone = [n for n in result.notes if "the human votes' alone" in n]
    assert alone == ([f"quality: {labelled} labelled dialogues: the Bradley-Terry strengths are the human votes' "
                      "alone (lambda = 0); the judge is used from 10 on"] if labelled < 10 else [])
    assert (result.lambdas["quality"] == 0.0) == (labelled < 10)


@pytest.mark.parametrize("ratio, expected", [(2.0, 2.5), (0.5, 40.0), (1.0, 10.0), (0.0, np.nan), (np.inf, np.nan),
                                             (np.nan, np.nan), (-1.0, np.nan)])
def test_effective_labels_are_the_labels_over_the_squared_width_ratio_where_it_is_a_positive_number(ratio, expected):
    """10 labels at width ratio r are worth 10 / r^2 human labels; a zero, infinite, missing or negative ratio gives
    none (never a division by zero)."""
    from calibration.study.pairs import _effective

    assert _effective(10, ratio) == pytest.approx(expected, nan_ok=True)


def test_each_strength_without_a_number_says_why():
    """a beats the baseline and d every time (+infinite); b and d split their pairs but meet the baseline only
    through a (not connected once a is set apart); c splits with the baseline (strength 0, no note)."""
    from calibration.study.bradley_terry import bt_rows

    rows = [(f, s, v, 6 * rep + k) for rep in range(4) for k, (f, s, v) in enumerate(
        [(1, 0, 1.0), (1, 3, 1.0), (2, 3, 1.0), (3, 2, 1.0), (4, 0, 1.0), (0, 4, 1.0)])]
    data = pairs(["base", "a", "b", "d", "c"], rows)
    fit, human = bradley_terry(data, 0, 0.95), bradley_terry(data, 0, 0.95, human_only=True)
    notes = {r["system"]: r["interval_note"] for r in bt_rows(data, 0, 0.95, fit, human)}
    cut_off = "not connected to the baseline by the pairs left once the systems with infinite strength are set apart"
    assert notes == {"a": "a won every pair the fit weighs: its strength is +infinite, no interval (its win rate has "
                          "one)", "b": cut_off, "d": cut_off, "c": ""}


def test_a_system_that_won_every_labelled_pair_but_not_every_judged_one_says_its_human_only_strength_is_infinite():
    """At lambda 0.5 the judge's pairs count: a, which the judge sees lose on the judged-only dialogues, has a finite
    strength; the votes alone put it at +infinity, and its row says so."""
    from calibration.study.bradley_terry import bt_rows

    rows, judge = [], []
    for d in range(12):
        labelled = d < 6
        for first, second, f in ((1, 0, 1.0 if labelled else 0.0), (2, 0, 1.0), (0, 2, 1.0)):
            rows.append((first, second, 1.0 if labelled else np.nan, d))
            judge.append(f)
    data = pairs(["base", "a", "c"], rows, judge=judge)
    fit, human = bradley_terry(data, 0, 0.95, lam=0.5), bradley_terry(data, 0, 0.95, human_only=True)
    assert np.isfinite(fit.theta[1]) and human.theta[1] == np.inf
    row = {r["system"]: r for r in bt_rows(data, 0, 0.95, fit, human)}["a"]
    assert np.isnan(row["human_only"]) and np.isfinite(row["estimate"])
    assert row["interval_note"] == "human-only: a won every labelled pair (strength infinite)"


@pytest.mark.parametrize("votes", [(1.0, 0.0), (1.0, 0.0, 1.0), (1.0, 0.0, 1.0, 1.0)])
def test_the_human_only_strength_has_an_interval_from_three_labelled_dialogues_on(votes):
    """One pair a dialogue against the baseline: the human-only Bradley-Terry strength is the logit of the votes'
    share, and from MIN_LABELLED (3) labelled dialogues on its interval is the intercept-only logistic fit's
    (cluster sandwich by hand, t quantile on n - 1 df, from scipy); below, none."""
    from scipy import stats

    from calibration.study.bradley_terry import bt_rows
    from calibration.study.ppi import MIN_LABELLED

    data, _ = _against_base(votes, unlabelled=4)
    fit, human = bradley_terry(data, 0, 0.95), bradley_terry(data, 0, 0.95, lam=0.0)
    row, = bt_rows(data, 0, 0.95, fit, human)
    h, n = np.array(votes), len(votes)
    p = h.mean()
    assert row["human_only"] == pytest.approx(np.log(p / (1 - p)), abs=1e-6)
    if n < 3:  # MIN_LABELLED, as documented (a changed constant must fail here)
        assert MIN_LABELLED == 3
        assert np.isnan(row["human_only_ci_low"]) and np.isnan(row["human_only_ci_high"])
        return
    se = np.sqrt(h.var(ddof=1) / (n * p * p * (1 - p) * (1 - p)))
    q = stats.t.ppf(0.975, n - 1)
    assert [row["human_only_ci_low"], row["human_only_ci_high"]] == pytest.approx(
        [np.log(p / (1 - p)) - q * se, np.log(p / (1 - p)) + q * se], abs=1e-6)
    # below 10 labelled dialogues the printed strength is the votes' fit, with the same interval and no note
    assert [row["ci_low"], row["ci_high"]] == pytest.approx([row["human_only_ci_low"], row["human_only_ci_high"]])
    assert row["interval_note"] == ""


@pytest.mark.parametrize("votes", [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0, 0.5)])
def test_win_rate_bounds_stay_within_zero_and_one_where_the_t_interval_leaves_them(votes):
    """Three or four labelled pairs all (nearly) won or lost: the pseudo-voted t interval reaches past 1 (or below
    0) — (n + 2 wins) / (n + 4) plus t_{n+3} se (scipy) — and every printed bound, the human-only ones too, is
    clipped to [0, 1]."""
    from scipy import stats

    from calibration.study.win_rates import win_rate_rows

    data, _ = _against_base(votes, unlabelled=4)
    row, = win_rate_rows(data, 0, 0.95)
    augmented = np.array([*votes, 1.0, 1.0, 0.0, 0.0])
    reach = augmented.mean() + np.array([-1, 1]) * stats.t.ppf(0.975, len(augmented) - 1) * stats.sem(augmented)
    assert reach[1] > 1.0 or reach[0] < 0.0  # the unclipped interval leaves [0, 1]
    for name in ("ci_low", "ci_high", "human_only_ci_low", "human_only_ci_high"):
        assert 0.0 <= row[name] <= 1.0, name
    assert row["human_only_ci_high"] == pytest.approx(min(reach[1], 1.0)) or reach[1] <= 1.0


@pytest.mark.parametrize("theta, expected", [
    ([0.0, 0.4], 20.0),                                  # one strength: the fit's df
    ([0.0, 0.4, -0.2], 19.0),                            # two: one spent beyond the first
    ([0.0, 0.4, -0.2, 1.1], 18.0),
    ([0.0, 0.4, np.inf, 1.1], 19.0),                     # an infinite strength is not estimated
    ([0.0, np.nan, -np.inf], 20.0),
])
def test_the_rank_sets_spend_one_degree_of_freedom_per_strength_beyond_the_first(theta, expected):
    """rank_df: the fit's degrees of freedom less the finite strengths it estimates beyond one (the baseline's 0
    is not estimated); a fit without an estimate has none."""
    from calibration.study.bradley_terry import BTFit
    from calibration.study.rank_sets import rank_df

    k = len(theta)
    fit = BTFit(np.array(theta), np.zeros((k, k)), 20.0, 0.0, 21)
    assert rank_df(fit) == expected
    assert np.isnan(rank_df(BTFit(np.array(theta), np.zeros((k, k)), 20.0, 0.0, 21, ok=False)))


@pytest.mark.parametrize("labelled", [19, 20])
def test_the_win_rate_uses_the_judge_from_twenty_labelled_votes_on(labelled):
    """A judge that agrees with every vote: from WIN_TUNED (20) labelled dialogues the win rate's lambda is tuned
    and its interval narrower than the votes' alone (width ratio < 1); at 19 it is the human-only share's,
    ratio 1 and the estimate the votes' pseudo-voted share."""
    from calibration.study.win_rates import win_rate_rows

    votes = tuple(float(k % 5 != 0) for k in range(labelled))
    data, _ = _against_base(votes, unlabelled=60)
    row, = win_rate_rows(data, 0, 0.95)
    if labelled < 20:  # the documented threshold, not the constant (a changed constant must fail here)
        assert row["width_ratio"] == pytest.approx(1.0) and row["estimate"] == pytest.approx(np.mean(votes))
    else:
        assert row["width_ratio"] < 0.99


def test_a_length_gap_under_one_word_on_average_is_still_controlled_for():
    """Texts within a word of the baseline's (gaps -1, 0, +1: their spread is below 1): the length-controlled win
    rate is still sigmoid of the intercept of the votes' logistic fit on tanh(gap / spread) (statsmodels' GLM,
    the spread over every judged pair against the baseline), not the plain share. Below 10 labelled dialogues
    lambda is 0, so the estimate is that fit's too. Written after the seed-18 draw let `spread > 0` become
    `spread > 1`."""
    import statsmodels.api as sm

    from calibration.study.win_rates import length_controlled_rows

    votes = (1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0)
    gaps = np.array([1.0, -1.0, 1.0, -1.0, 0.0, 1.0, -1.0, -1.0, 1.0, 0.0, 1.0, -1.0])
    data, lengths = _against_base(votes, unlabelled=3, gaps=gaps)
    row, = length_controlled_rows(data, 0, 0.95, lengths)
    spread = gaps.std()
    assert 0 < spread < 1
    x = sm.add_constant(np.tanh(gaps[:len(votes)] / spread))
    glm = sm.GLM(np.array(votes), x, family=sm.families.Binomial()).fit(tol=1e-14)
    expected = 1.0 / (1.0 + np.exp(-glm.params[0]))
    assert abs(expected - np.mean(votes)) > 0.01  # controlling for length moves it here
    assert row["human_only"] == pytest.approx(expected, abs=1e-6)
    assert row["estimate"] == pytest.approx(expected, abs=1e-6)


def test_one_order_verdicts_beside_an_empty_score_column_are_the_verdicts():
    """A judgments file read with a score column that is empty (verdicts only, one order asked): each pair's
    prediction is its verdict (1, 0, 1/2), none failed; the score column is P(system_1 wins) only when no verdict
    is there at all."""
    from calibration.study.pairs import judge_predictions

    frame = pd.DataFrame({"label": ["1", "2", "0", None], "score": [np.nan] * 4})
    f, failed = judge_predictions(frame)
    assert f.tolist() == [1.0, 0.0, 0.5, 0.5] and failed == 1


@pytest.mark.parametrize("lam, human_only", [(None, False), (0.0, False), (None, True)])
def test_a_group_of_systems_that_wins_every_pair_has_no_finite_strength(lam, human_only):
    """a and c split the pairs between them but win every pair against the baseline and d (which split theirs):
    no system alone won everything (set_apart keeps them), yet the pair's strengths run to +infinity together.
    The fit must say it did not converge rather than print a finite strength near 27 where Newton's loss stopped
    moving (its divergence bound is 25 in log odds)."""
    rows = [(f, s, 1.0, 8 * rep + k) for rep in range(4) for k, (f, s) in enumerate(
        [(1, 0), (2, 0), (1, 3), (2, 3), (1, 2), (2, 1), (0, 3), (3, 0)])]
    data = pairs(["base", "a", "c", "d"], rows)
    fit = bradley_terry(data, 0, 0.95, lam=lam, human_only=human_only)
    assert not fit.ok and np.isnan(fit.theta).all()
    assert ("a group of systems" in fit.note) and ("did not converge" in fit.note or "no finite strength" in fit.note)


def test_where_every_vote_agrees_the_win_rate_is_worth_the_labels_over_the_squared_pseudo_voted_ratio():
    """24 labelled dialogues all won, a judge that mostly agrees: the plain PPI interval has no width to compare
    (every vote the same), so the estimate's worth in votes is the printed (pseudo-voted) width ratio's:
    n / ratio^2, as _effective and the module docstring define it."""
    from calibration.study.win_rates import win_rate_rows

    rng = np.random.default_rng(2)
    votes = (1.0,) * 24
    data, _ = _against_base(votes, unlabelled=60)
    data.judge[len(votes):] = rng.choice([1.0, 0.0, 0.5], 60, p=[0.8, 0.1, 0.1])
    data.judge[:len(votes)] = rng.choice([1.0, 0.5], len(votes), p=[0.8, 0.2])
    row, = win_rate_rows(data, 0, 0.95)
    assert row["interval_note"] == "" and 0.0 < row["width_ratio"] < 1.0
    assert row["effective_labels"] == pytest.approx(24 / row["width_ratio"] ** 2, rel=1e-12)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e3])
@pytest.mark.parametrize("ppi", [False, True])
def test_newton_solves_the_score_equation_to_rounding(scale, ppi):
    """Newton's answer is the root of the loss's gradient sum_k x_k (w_k sigmoid(x_k theta) - v_k) as scipy's root
    finder gives it from there (analytic Jacobian), to 1e-9 in log odds, whatever the weights'
    scale; `ppi`: targets v / w outside [0, 1], as a PPI loss at lambda in (0, 1) has them (the loss can then be
    near 0 or negative). A step is accepted unless it raises the loss beyond rounding; one that had to lower it by
    1e-15 of itself stopped 5e-8 short."""
    from scipy import optimize

    from calibration.study.bradley_terry import newton

    rng = np.random.default_rng(9)
    for _ in range(5):
        x = rng.choice([-1.0, 0.0, 1.0], size=(80, 4))
        w = rng.uniform(0.2, 2.0, 80) * scale
        v = w * (rng.uniform(-0.3, 1.3, 80) if ppi else rng.uniform(0.1, 0.9, 80))
        theta, ok = newton(x, w, v)
        p = lambda t: 1.0 / (1.0 + np.exp(-(x @ t)))  # noqa: E731
        score = lambda t: x.T @ (w * p(t) - v) / scale  # noqa: E731
        root = optimize.root(score, theta, tol=1e-15,
                             jac=lambda t: (x * (w * p(t) * (1 - p(t)))[:, None]).T @ x / scale)
        assert np.max(np.abs(score(root.x))) < 1e-12  # the root finder's answer is a root
        assert ok and theta == pytest.approx(root.x, abs=1e-9)


def test_newton_whose_linear_solve_fails_says_it_did_not_converge():
    """Two identical columns (the strengths are not identified) with weights so large that the 1e-12 ridge added to
    the Hessian is lost to rounding: numpy's solve refuses the singular system, and Newton must report no
    convergence (the caller then says so), never a converged fit at its starting point."""
    from calibration.study.bradley_terry import newton

    x = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    w = np.full(4, 1e6)
    hess = (x * (w * 0.25)[:, None]).T @ x + 1e-12 * np.eye(2)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.solve(hess, np.ones(2))
    theta, ok = newton(x, w, w * np.array([0.7, 0.2, 0.6, 0.5]))
    assert not ok


def test_a_judge_whose_own_fit_runs_away_halves_lambda_from_one():
    """20 labelled dialogues where the judge agrees with each vote, 40 judged-only ones where it says a wins every
    time: the judge's own fit (lambda = 1, where the tuning starts) has no finite optimum, so lambda falls back to
    1 and is halved until the fit converges: 1/2. There the PPI loss is half the votes' plus half the judge's on the
    judged-only pairs, whose optimum is sigmoid(theta) = (the votes' share + 1) / 2 (written out here)."""
    rng = np.random.default_rng(1)
    votes = (rng.random(20) < 0.7).astype(float)
    rows = [(1, 0, votes[d] if d < 20 else np.nan, d) for d in range(60)]
    data = pairs(["base", "a"], rows, judge=[*votes, *[1.0] * 40])
    fit = bradley_terry(data, 0, 0.95)
    share = (votes.mean() + 1.0) / 2.0
    assert fit.ok and fit.lam == 0.5
    assert fit.theta[1] == pytest.approx(np.log(share / (1.0 - share)), abs=1e-8)


def test_the_pairwise_estimate_prints_no_numpy_warning():
    """A user would see numpy's RuntimeWarnings ("divide by zero encountered in divide") on stderr beside the
    tables: the whole estimate (win rates, strengths, rank sets, length- and style-controlled win rates) runs with
    warnings as errors on three studies (a few votes; many; labelled dialogues with some pairs unvoted, whose
    pairs weigh pairs / labelled pairs, and judged-only dialogues with none)."""
    import warnings

    from test_pairwise_estimate import study
    from test_pairwise_properties import partly_labelled, prepared

    from calibration.study.pairs import read_pairs
    from calibration.study.pairwise import pairwise_estimate
    from calibration.study.win_rates import length_controlled_rows, style_controlled_rows

    for judge, labels in (study(seed=61, dialogues=80, labelled=30, copy=0.8),
                          study(seed=3, dialogues=30, labelled=6), partly_labelled(seed=2)):
        rng = np.random.default_rng(7)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pairwise_estimate(judge, prepared(judge, labels), "base")
            data = read_pairs(judge, prepared(judge, labels), "quality", "labels")
            styles = {(d, s): np.array([rng.integers(20, 200), rng.integers(0, 3), rng.integers(0, 6),
                                        rng.integers(0, 4)], dtype=float) for d in data.dialogues for s in data.systems}
            base = data.systems.index("base")
            length_controlled_rows(data, base, 0.95, {key: value[0] for key, value in styles.items()})
            style_controlled_rows(data, base, 0.95, styles)


def _near_calibrated_judge(toward_vote, noise):
    """Four systems, 120 dialogues of 6 pairs, 40 labelled; the judge's pair score is the true P(first wins) moved
    `toward_vote` of the way to the vote, plus normal noise of sd `noise` (clipped to 0..1)."""
    rng = np.random.default_rng(3)
    strength = np.array([0.0, 0.6, -0.4, 0.2])
    rows, judge = [], []
    for d in range(120):
        for first, second in ((1, 0), (2, 0), (3, 0), (1, 2), (2, 3), (3, 1)):
            p = 1.0 / (1.0 + np.exp(-(strength[first] - strength[second])))
            vote = float(rng.random() < p)
            rows.append((first, second, vote if d < 40 else np.nan, d))
            judge.append(np.clip(p + toward_vote * (vote - p) + rng.normal(0, noise), 0.0, 1.0))
    return pairs(["base", "a", "c", "d"], rows, judge=judge)


@pytest.mark.parametrize("toward_vote, noise, clipped", [(0.05, 0.1, False), (0.1, 0.12, True)])
def test_ppi_plus_pluss_lambda_for_a_judge_near_the_fitted_probabilities(toward_vote, noise, clipped):
    """A probabilistic judge close to the fitted probabilities: its gradients vary little, so PPI++'s denominator
    2 (1 + n/m) tr(H^-1 Var(g_f) H^-1) is small (below 1 in the first study), yet lambda is still the ratio
    (written out in tests/test_pairwise_properties.py's Reference, from the module docstring): an interior 0.8;
    in the second study the ratio exceeds 1 and lambda is clipped to 1, where the PPI loss is still convex."""
    from test_pairwise_properties import Reference

    data = _near_calibrated_judge(toward_vote, noise)
    ref = Reference(data, 0)
    start = ref.fit(1.0)
    gh, gf_l, gf_u, _ = ref.gradients(start)
    h_inv = np.linalg.inv(ref.hessian(start, 1.0))
    n, m = len(ref.L), len(ref.U)
    bottom = 2 * (1 + n / m) * np.trace(h_inv @ np.cov(np.vstack([gf_l, gf_u]), rowvar=False) @ h_inv)
    cross = (gh - gh.mean(0)).T @ (gf_l - gf_l.mean(0)) / (n - 1)
    ratio = np.trace(h_inv @ (cross + cross.T) @ h_inv) / bottom
    assert (ratio > 1.0) == clipped and (0.0 < bottom < 1.0 or clipped)  # the cases this test is for
    fit = bradley_terry(data, 0, 0.95)
    assert fit.lam == pytest.approx(min(ratio, 1.0), rel=1e-5) and fit.df == n - 2
    assert fit.lam == pytest.approx(ref.tuned_lambda(start), rel=1e-5)


def test_style_control_with_three_labelled_pairs_on_the_short_side_is_estimated():
    """a's text is longer than the baseline's on 9 of 12 labelled pairs and shorter on exactly 3: equal style is
    inside the labelled gaps (3 a side is enough), so the style-controlled win rate is estimated: the human-only
    one is sigmoid of the intercept of statsmodels' logistic GLM of the votes on the length gap
    (s - b) / (s + b + 1) scaled by its root mean square over every judged pair; the markdown features, zero
    everywhere, are left out and said."""
    import statsmodels.api as sm

    from calibration.study.win_rates import style_controlled_rows

    votes = (1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0)
    data, _ = _against_base(votes, unlabelled=6)
    length = np.array([80.0 - d if d in (1, 4, 7) else 100.0 + d for d in range(18)])
    styles = {**{(f"d{d}", "base"): np.array([90.0, 0, 0, 0]) for d in range(18)},
              **{(f"d{d}", "a"): np.array([length[d], 0, 0, 0]) for d in range(18)}}
    (row,), note = style_controlled_rows(data, 0, 0.95, styles)
    assert note == "over length; left out, non-zero on fewer than 3 labelled pairs: headers, list items, bold"
    assert row["interval_note"] == "" and np.isfinite(row["ci_low"])
    gap = (length - 90.0) / (length + 90.0 + 1.0)
    x = sm.add_constant(gap / np.sqrt(np.mean(gap ** 2)))[:len(votes)]
    glm = sm.GLM(np.array(votes), x, family=sm.families.Binomial()).fit(tol=1e-14)
    assert row["human_only"] == pytest.approx(1.0 / (1.0 + np.exp(-glm.params[0])), abs=1e-6)


def test_a_markdown_habit_of_one_system_is_its_own_and_left_out_of_style_control():
    """a writes one markdown header in every text, the baseline none: the header gap is the same on every pair
    (no spread to learn an effect from: the systems explain all of it), so it is left out as the systems' own,
    said in the note, and the fit runs over length alone."""
    from calibration.study.win_rates import style_controlled_rows

    votes = (1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0)
    data, _ = _against_base(votes, unlabelled=6)
    length = np.array([80.0 - d if d in (1, 4, 7) else 100.0 + d for d in range(18)])
    styles = {**{(f"d{d}", "base"): np.array([90.0, 0, 0, 0]) for d in range(18)},
              **{(f"d{d}", "a"): np.array([length[d], 1, 0, 0]) for d in range(18)}}
    (row,), note = style_controlled_rows(data, 0, 0.95, styles)
    assert note == ("over length; left out, non-zero on fewer than 3 labelled pairs: list items, bold; left out, "
                    "the systems' own on the labelled pairs (variance inflation 10 or more): headers")
    assert row["interval_note"] == "" and np.isfinite(row["estimate"])


def test_summary_md_shows_each_win_rates_human_only_share_to_three_decimals():
    """summary.md's win-rate table: the human-only column is estimates.csv's human_only to three decimals where it
    is a number, '-' where it is not (written after the seed-19 draw let the test's `not` go)."""
    from pathlib import Path

    import calibration

    examples = Path(__file__).resolve().parents[1] / "examples" / "pairwise"
    result = calibration.estimate(examples / "judgments.jsonl", examples / "labels.csv", baseline="lead-3")
    markdown = result.files()["summary.md"]
    rates = result.estimates[result.estimates["quantity"] == "win_rate"]
    assert len(rates) and rates["human_only"].notna().all()
    for r in rates.itertuples():
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {r.criterion} | {r.system} |"))
        assert row.split("|")[5].strip() == f"{r.human_only:.3f}"


def test_summary_md_gives_each_interval_and_counts_the_rows_not_shown_non_inferior():
    from pathlib import Path

    import calibration

    examples = Path(__file__).resolve().parents[1] / "examples" / "pairwise"
    result = calibration.estimate(examples / "judgments.jsonl", examples / "labels.csv", baseline="lead-3",
                                  margin=0.1)
    markdown = result.files()["summary.md"]
    rates = result.estimates[result.estimates["quantity"] == "win_rate"]
    failing = int((rates["noninferior"] != "yes").sum())
    verdict = ("every system is non-inferior" if failing == 0 else
               f"{failing} of {len(rates)} system-criterion rows are not shown non-inferior")
    assert f"): {verdict}." in markdown
    for r in rates.itertuples():
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {r.criterion} | {r.system} |"))
        shown = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if np.isfinite(r.ci_low) else "-"
        assert row.split("|")[4].strip() == shown and row.split("|")[7].strip() == r.noninferior
