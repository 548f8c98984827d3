"""The pairwise estimate's tables as a script receives them (calibration.study.pairwise.pairwise_estimate): one row
per index label (a RangeIndex, so .loc and joins work), and non-inferiority strictly above one half minus the
margin, at exact equality too. Written after the seed-11 draw of benchmarks/mutation.py let both survive."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pandas as pd
import pytest
from test_pairwise_estimate import study
from test_pairwise_properties import prepared

from calibration.study.pairwise import pairwise_estimate


@pytest.fixture(scope="module")
def tables():
    judge, labels = study(seed=61, dialogues=80, labelled=30, copy=0.8)
    return judge, prepared(judge, labels), pairwise_estimate(judge, prepared(judge, labels), "base")


def test_the_tables_have_one_row_per_index_label(tables):
    judge, labels, _ = tables
    # Two criteria: each criterion's rows are one table, and the tables are stacked.
    two = lambda frame: pd.concat([frame, frame.assign(criterion="other")], ignore_index=True)  # noqa: E731
    result = pairwise_estimate(two(judge), two(labels), "base")
    assert set(result.estimates["criterion"]) == {"other", judge["criterion"].iloc[0]}
    for frame in (result.estimates, result.ranking):
        assert isinstance(frame.index, pd.RangeIndex) and frame.index.equals(pd.RangeIndex(len(frame)))


def test_a_lower_bound_exactly_at_one_half_minus_the_margin_is_not_non_inferior(tables):
    judge, labels, result = tables
    wins = result.estimates[result.estimates["quantity"] == "win_rate"].set_index("system")["ci_low"]
    exact = [(system, low) for system, low in wins.items() if 0.0 < 0.5 - low < 0.5 and 0.5 - (0.5 - low) == low]
    assert exact  # a bound whose margin 0.5 - bound gives the bound back exactly in floating point
    system, low = exact[0]
    table = pairwise_estimate(judge, labels, "base", margin=0.5 - low).estimates
    row = table[(table["quantity"] == "win_rate") & (table["system"] == system)]
    assert row["ci_low"].item() == low and row["noninferior"].item() == "no"


@pytest.mark.parametrize("usable", [[[False, False], [False, False]], [[False, True], [True, False]]])
def test_the_max_t_quantile_with_one_or_no_usable_pair_is_the_single_t_quantile(usable):
    """No usable pair (every strength infinite or unconnected) or one: Bonferroni over one comparison, i.e. scipy's
    two-sided t quantile; never a division by zero."""
    import numpy as np
    from scipy import stats

    from calibration.study.rank_sets import max_t_quantile

    cov = np.array([[0.04, 0.01], [0.01, 0.05]])
    assert max_t_quantile(cov, np.array(usable), 12.0, 0.9) == pytest.approx(stats.t.ppf(0.95, 12.0))


def test_the_criteria_asked_for_are_the_ones_estimated_and_an_unjudged_one_is_refused():
    from calibration.errors import CalibrationError

    judge, labels = study(seed=62, dialogues=40, labelled=15)
    judge = pd.concat([judge, judge.assign(criterion="fluency")], ignore_index=True)
    labels = prepared(judge, pd.concat([labels, labels.assign(criterion="fluency")], ignore_index=True))
    both = pairwise_estimate(judge, labels, "base")
    assert both.criteria == ["fluency", "quality"]
    one = pairwise_estimate(judge, labels, "base", criteria=["quality"])
    assert one.criteria == ["quality"] and set(one.estimates["criterion"]) == {"quality"}
    pd.testing.assert_frame_equal(one.estimates, both.estimates[both.estimates["criterion"] == "quality"]
                                  .reset_index(drop=True))
    with pytest.raises(CalibrationError, match=r"^--criteria: no pairwise judgment on coherence; the judgments have "
                                               r"fluency, quality$"):
        pairwise_estimate(judge, labels, "base", criteria=["quality", "coherence"])


def test_votes_on_systems_not_pairs_share_no_criterion_with_pairwise_judgments():
    from calibration.errors import CalibrationError

    judge, labels = study(seed=63, dialogues=20, labelled=8)
    pointwise = labels.assign(system=labels["system"].str.split("|").str[0])
    with pytest.raises(CalibrationError, match=r"^the pairwise judgments and the human labels have no criterion in "
                                               r"common \(judgments: quality; labels on pairs: -\)"):
        pairwise_estimate(judge, prepared(judge, pointwise), "base")


@pytest.mark.parametrize("seed, spread", [(0, 1.0), (1, 0.01), (2, 5.0)])
def test_variance_inflation_is_statsmodels(seed, spread):
    """_variance_inflation(others, column) = 1 / (1 - R^2) of the column on the others (which hold the systems'
    indicators, so the constant): statsmodels' variance_inflation_factor of the column in [others, column]; a
    column that does not vary is inflated without bound."""
    from statsmodels.stats.outliers_influence import variance_inflation_factor

    from calibration.study.win_rates import _variance_inflation

    rng = np.random.default_rng(seed)
    systems = np.eye(3)[rng.integers(0, 3, 40)]
    other = rng.normal(0, 1, 40)
    column = spread * (0.6 * other + systems @ np.array([0.5, -0.2, 0.1]) + rng.normal(0, 0.5, 40))
    others = np.column_stack([systems, other])
    with warnings.catch_warnings():  # it adds a constant of its own, which the indicators span: it warns
        warnings.simplefilter("ignore")
        expected = variance_inflation_factor(np.column_stack([others, column]), 4)
    assert _variance_inflation(others, column) == pytest.approx(expected, rel=1e-9)
    assert _variance_inflation(others, np.full(40, 0.3)) == np.inf


def test_a_controlled_fit_with_one_judged_only_dialogue_keeps_the_judge():
    """30 labelled pairs and one judged only: the judge's term has one dialogue (its spread taken over every
    dialogue, as for the strengths), lambda is cross-fitted and the fit is not the votes' alone."""
    from test_pairwise_estimate import SYSTEMS, _against_baseline, _lengths, _single_pairs

    from calibration.study.pairs import Pairs
    from calibration.study.win_rates import _controlled_fit

    data, b, _ = _single_pairs(seed=5, dialogues=31, labelled=30, copy=0.9)
    mine, x, h, f = _against_baseline(data, b, SYSTEMS[1], _lengths(data, 5))
    assert np.isnan(h).sum() == 1
    one = Pairs("quality", data.systems, np.full(mine.sum(), data.systems.index(SYSTEMS[1])), np.full(mine.sum(), b),
                data.dialogue[mine], data.dialogues, f, h)
    fit, plain = _controlled_fit(one, b, x), _controlled_fit(one, b, x, lam=0.0)
    assert fit["theta"] != pytest.approx(plain["theta"], abs=1e-3)
    assert fit["se"][0] < plain["se"][0] and fit["df"] == 29


def test_a_vote_on_a_pair_judged_in_both_orders_is_the_vote_on_the_order_it_names():
    """A dialogue whose pair was judged as alpha|base and again as base|alpha (two units): the vote labelled
    'alpha|base' is that pair's vote as given (not turned round as if it were base|alpha's)."""
    from calibration.study.pairs import read_pairs

    judge, labels = study(seed=64, dialogues=12, labelled=6)
    pair = judge[(judge["item_id"] == labels["item_id"].iloc[0]) & (judge["system"] == labels["system"].iloc[0])]
    a, b = pair["system_1"].iloc[0], pair["system_2"].iloc[0]
    turned = pair.assign(system=f"{b}|{a}", system_1=b, system_2=a)
    judge = pd.concat([judge, turned], ignore_index=True)
    labels = labels.assign(score=labels["score"].where(labels.index != 0, "1"))  # the first system wins
    data = read_pairs(judge, prepared(judge, labels), "quality", "labels")
    dialogue = list(data.dialogues).index(pair["item_id"].iloc[0])
    first, second = data.systems.index(a), data.systems.index(b)
    here = data.dialogue == dialogue
    assert data.human[here & (data.first == first) & (data.second == second)].tolist() == [1.0]
    assert np.isnan(data.human[here & (data.first == second) & (data.second == first)]).all()


@pytest.mark.parametrize("labelled", [1, 2])
def test_a_win_rate_with_no_interval_is_never_called_non_inferior(labelled):
    """Issue 41 part 6: fewer than MIN_LABELLED labelled dialogues give every win rate an estimate (the judge's
    verdicts) but no interval; with a margin that every estimate clears, no row may be called non-inferior ("no
    interval, no claim"), and the printed verdict and the summary list every system as not shown non-inferior.
    A decision read from the estimate, or written as "not (bound <= 0.5 - margin)" (true for a NaN bound), fails."""
    from calibration.study.pairwise import print_pairwise, summary_markdown
    from calibration.study.ppi import MIN_LABELLED

    assert labelled < MIN_LABELLED
    judge, labels = study(seed=7, dialogues=40, labelled=labelled, copy=0.9)
    margin = 0.49  # a bound above 0.01 would do: every estimate clears it
    result = pairwise_estimate(judge, prepared(judge, labels), "base", margin=margin)
    wins = result.estimates[result.estimates["quantity"] == "win_rate"]
    assert len(wins) >= 3 and wins["ci_low"].isna().all() and wins["ci_high"].isna().all()
    assert (wins["estimate"] > 0.5 - margin).all()  # the slip would call each of them non-inferior
    assert (wins["noninferior"] == "no").all()
    printed = io.StringIO()
    print_pairwise(result, printed)
    out = " ".join(printed.getvalue().split())  # the printed lines fold at 120 columns
    assert "NOT shown non-inferior" in out and "non-inferior: every system" not in out
    assert all(f"{system} (" in out.split("NOT shown non-inferior")[1] for system in wins["system"])
    assert f"{len(wins)} of {len(wins)} system-criterion rows are not shown non-inferior" in summary_markdown(result)
