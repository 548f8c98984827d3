"""The pairwise estimate's tables as a script receives them (calibration.study.pairwise.pairwise_estimate): one row
per index label (a RangeIndex, so .loc and joins work), and non-inferiority strictly above one half minus the
margin, at exact equality too. Written after the seed-11 draw of benchmarks/mutation.py let both survive."""

from __future__ import annotations

import pandas as pd
import pytest

from calibration.study.pairwise import pairwise_estimate
from test_pairwise_estimate import study
from test_pairwise_properties import prepared


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

    from calibration.study.pairwise import max_t_quantile

    cov = np.array([[0.04, 0.01], [0.01, 0.05]])
    assert max_t_quantile(cov, np.array(usable), 12.0, 0.9) == pytest.approx(stats.t.ppf(0.95, 12.0))
