"""`judge drift` on the hard cases, reduced from tests/drift_sim.py's table: an unchanged deterministic judge whose
block prompts share their re-ask noise across a dialogue's summaries is covered by the mean-shift interval and not
called DRIFT (the bootstrap's percentiles covered 0.91-0.92 at 10-20 dialogues, the TOST interval 0.85), and a
planted shift is found and covered (an interval that is merely wide, or a verdict that never fires, fails)."""

from __future__ import annotations

import pytest

from drift_sim import rates

REPETITIONS = 300  # coverage 0.95 has a Monte-Carlo SD of 1.3%, a 5% rate 1.3%


@pytest.mark.slow
@pytest.mark.parametrize("flip", [0.03, 0.3], ids=["deterministic", "sampled"])
def test_an_unchanged_judge_in_block_mode_is_covered_and_not_drift(flip):
    r = rates(REPETITIONS, 20, seed=int(flip * 100), systems=4, k=3, flip=flip, block=True)
    assert r["printed"] == 1.0, r
    assert r["covers"] >= 0.93 and r["tost_covers"] >= 0.87, r  # 95% and 90% intervals
    assert r["drift"] <= 0.07, r


@pytest.mark.slow
def test_a_planted_shift_is_found_and_covered():
    r = rates(100, 20, seed=5, systems=4, k=3, flip=0.03, block=True, shift=0.4)
    assert r["drift"] >= 0.8, r  # power
    assert r["covers"] >= 0.9, r  # 100 repetitions: 0.95 has a Monte-Carlo SD of 2.2%
