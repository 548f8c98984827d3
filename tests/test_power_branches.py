"""The paired t test's power (calibration.study.power.paired_power) where scipy's noncentral t gives up: far in the
tail it returns NaN, and the normal form takes over. Power is then still a probability that never falls as the
dialogues grow, and 1 for an effect that large. Written after a fresh draw of benchmarks/mutation.py (seed 9) let a
sign change in the normal form survive. Then dialogues_needed at its edges: the count written out with
scipy, a target power reached exactly, equal systems, the 100,000 cap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from calibration.study.power import dialogues_needed, paired_power


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


# -- dialogues_needed at its edges (written after the full sweep of power.py left them) ------------------------------

def _power(effect, n, share=1.0, df_spent=1, alpha=0.05):
    """Two-sided paired t power written out with scipy's noncentral t (n - df_spent degrees of freedom)."""
    df = n - df_spent
    critical, noncentrality = stats.t.ppf(1 - alpha / 2, df), abs(effect) * np.sqrt(n / share)
    return stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality)


@pytest.mark.parametrize("effect", [0.25, 1.0, 1.7, 4.0])
def test_the_human_only_count_is_the_first_n_from_three_whose_power_reaches(effect):
    n = np.arange(3, 400)
    expected = int(n[np.argmax(_power(effect, n) >= 0.8)])
    assert dialogues_needed(effect, 0.8) == expected
    assert dialogues_needed(-effect, 0.8) == expected


@pytest.mark.parametrize("effect, power, options", [
    (0.0, 0.04, {}), (0.0, 0.04, {"rho": 0.9, "n_judged": 50}), (np.nan, 0.8, {}), (np.inf, 0.8, {}),
    (-np.inf, 0.8, {"rho": 0.5, "n_judged": 100})])
def test_equal_systems_or_an_undefined_effect_have_no_count_whatever_the_power_asked(effect, power, options):
    """Power at effect 0 is alpha: a target below it (0.04 < 0.05) would be 'reached' by any n, but no study
    separates equal systems; an infinite or undefined effect has no count either."""
    assert dialogues_needed(effect, power, **options) is None


@pytest.mark.parametrize("n, rho, combined", [(7, None, False), (10, 0.8, False), (12, 0.8, False),
                                              (20, 0.7, False), (26, 0.7, False), (8, 0.6, True)])
def test_a_power_reached_exactly_is_reached(n, rho, combined):
    """The count is the smallest n whose power is at least the target: a target equal to the power at n (each
    regime's: human-only, lambda tuned at 10-19 labels, cross-fitted from 20, a jury; each regime's first
    count among them) gives n itself."""
    judged = 60
    if rho is None:
        target = paired_power(0.9, n)
    elif combined:
        target = paired_power(0.9, n, 0.05, 1 - rho * rho * (judged - n) / judged)
    else:
        share = 1 - rho * rho * (judged - n) / judged + (1 - rho * rho) / (n - 1)
        target = paired_power(0.9, n, 0.05, share, df_spent=2 if n < 20 else 1)
    options = {} if rho is None else {"rho": rho, "n_judged": judged, "combined": combined}
    assert dialogues_needed(0.9, float(target), **options) == n
    assert dialogues_needed(0.9, float(target) + 1e-9, **options) == n + 1


def test_a_study_that_needs_more_than_100000_labels_gets_no_count():
    """The human-only search stops at 100,000 labelled dialogues: an effect whose count is exactly that is
    printed, one that needs one dialogue more is not."""
    def effect_for(n):  # the effect whose power at n dialogues is 80%, a hair above
        return optimize.brentq(lambda e: _power(e, n) - 0.8, 0.005, 0.02, xtol=1e-15) * (1 + 1e-9)

    assert dialogues_needed(effect_for(100_000), 0.8) == 100_000
    assert dialogues_needed(effect_for(100_001), 0.8) is None


# At rho 0.5 (factor 1.4) and 0.7 (factor 0.7) the count moves by one if lambda's error were taken off the residual
# instead of added to it (46 -> 45, 18 -> 19).
@pytest.mark.parametrize("rho, factor, combined", [(0.5, 1.4, False), (0.7, 0.7, False), (0.8, 1.3, True)])
def test_the_active_designs_count_is_written_out_with_its_factor_on_the_residual(rho, factor, combined):
    """An active design (design_factor) multiplies the residual part of the variance, lambda's own error included
    ((1 - rho^2)(1 + 1 / (n - 1)) from 10 labels on; a jury's (1 - rho^2) with nothing tuned): the count is the
    first n from 3 whose power, written out with scipy, reaches 80%."""
    effect, judged = 0.45, 300
    n = np.arange(3, judged + 1)
    residual = 1 - rho * rho
    if combined:
        share = 1 - rho * rho * (judged - n) / judged + (factor - 1) * residual
        power = _power(effect, n, share)
    else:
        share = (1 - rho * rho * (judged - n) / judged + residual / (n - 1)
                 + (factor - 1) * residual * (1 + 1 / (n - 1)))
        tuned = _power(effect, n, share, df_spent=np.where(n >= 20, 1, 2))
        power = np.where(n >= 10, tuned, _power(effect, n, factor))
    expected = int(n[np.argmax(power >= 0.8)])
    assert expected >= 10  # the judge is used at the count
    assert dialogues_needed(effect, 0.8, rho=rho, n_judged=judged, combined=combined,
                            design_factor=factor) == expected
