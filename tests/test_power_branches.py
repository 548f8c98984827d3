"""The paired t test's power (calibration.study.power.paired_power) where scipy's noncentral t gives up: far in the
tail it returns NaN, and the normal form takes over. Power is then still a probability that never falls as the
dialogues grow, and 1 for an effect that large. Written after a fresh draw of benchmarks/mutation.py (seed 9) let a
sign change in the normal form survive."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calibration.study.power import paired_power


@pytest.mark.parametrize("effect", [0.5, 2.0, 6.0])
def test_power_never_falls_with_more_dialogues_even_where_the_noncentral_t_gives_up(effect):
    n = np.unique(np.round(np.geomspace(3, 20_000, 80)))
    df = n - 1
    nc = effect * np.sqrt(n)
    critical = stats.t.ppf(0.975, df)
    exact = stats.nct.sf(critical, df, nc) + stats.nct.cdf(-critical, df, nc)
    assert np.isnan(exact).any()  # the branch is reached
    power = paired_power(effect, n)
    assert np.all((power >= 0) & (power <= 1)) and np.all(np.diff(power) >= -1e-12)
    assert power[-1] == pytest.approx(1.0)
    normal = stats.norm.sf(critical - nc) + stats.norm.cdf(-critical - nc)
    np.testing.assert_allclose(power[np.isnan(exact)], normal[np.isnan(exact)])
