"""`judge audit` on the hard cases, reduced from tests/audit_sim.py's table: a judge on another scale with no taste
is not flagged where length goes with quality (the old `judge slope - human slope` flagged it in 57-100% of
audits), intervals cover at 20 dialogues, the family of flags stays under 10%, and a planted taste is found."""

from __future__ import annotations

import pytest

from audit_sim import rates

REPETITIONS = 300  # a 5% rate has a Monte-Carlo SD of 1.3%; coverage 0.95 has 1.3%


@pytest.mark.slow
@pytest.mark.parametrize("gain", [0.5, 1.5])
def test_a_judge_on_another_scale_is_not_flagged(gain):
    r = rates(REPETITIONS, 20, seed=int(gain * 10), gain=gain, length_quality=0.6)
    assert r["length_flag"] <= 0.085 and r["self_flag"] <= 0.085 and r["any_flag"] <= 0.10, r
    assert r["length_covers"] >= 0.92 and r["self_covers"] >= 0.92, r
    assert r["printed"] >= 0.9, r  # two readings on most summaries: the interval is printed


@pytest.mark.slow
def test_a_planted_taste_is_found_and_covered():
    # Continuous scores: on a rounded 1-5 scale the planted b of the latent score is not the rounded score's.
    r = rates(REPETITIONS, 20, seed=7, judge_length=0.8, self_bonus=1.2, likert=False)
    assert r["length_flag"] >= 0.8 and r["self_flag"] >= 0.6, r  # power: a merely wide interval fails here
    assert r["length_covers"] >= 0.92 and r["self_covers"] >= 0.92, r
