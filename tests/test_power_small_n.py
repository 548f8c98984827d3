"""`judge screen`'s dialogue counts are honest under the intervals `judge estimate` prints (issue 15): simulate
studies at the recommended count (100 judged dialogues, humans label n of them, the judge correlating rho with the
humans' paired differences) and count how often the printed interval separates the two systems. 4,000 studies
per cell: the Monte-Carlo standard error of a power of 0.8 is 0.0063.
"""

import numpy as np
import pytest

from calibration.study.power import dialogues_needed
from calibration.study.ppi import MIN_LABELLED, ppi_mean

STUDIES, JUDGED = 4000, 100


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.7, 0.9])
@pytest.mark.parametrize("effect", [0.4, 0.7, 1.2])
def test_realised_power_at_the_recommended_count(rho, effect):
    n = dialogues_needed(effect, 0.8, rho=rho, n_judged=JUDGED)
    human_only = dialogues_needed(effect, 0.8)
    # A judge that does not correlate costs lambda's degree of freedom and error: a few more dialogues, no fewer.
    assert MIN_LABELLED <= n <= (human_only if rho >= 0.5 else 1.1 * human_only)
    rng = np.random.default_rng([int(rho * 10), int(effect * 10)])
    judge = rng.normal(size=(STUDIES, JUDGED))
    human = effect + rho * judge + np.sqrt(1 - rho * rho) * rng.normal(size=(STUDIES, JUDGED))
    realised = []
    for count in (n - 1, n):
        result = ppi_mean(np.where(np.arange(JUDGED) < count, human, np.nan), 3.0 * judge - 1.0)
        realised.append(((result.ci_low > 0) | (result.ci_high < 0)).mean())
    print(f"\nrho {rho} effect {effect}: {n} dialogues (human-only {human_only}); realised power "
          f"{realised[1]:.3f} (at {n - 1}: {realised[0]:.3f})")
    assert realised[1] >= 0.8 - 3 * 0.0063  # the promised power is reached
    assert realised[0] <= 0.8 + 3 * 0.0063  # and the count is not padded
