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


def test_the_excess_interval_is_the_dialogue_jackknife_of_an_independent_2sls():
    """The own-system excess's interval: b +- sqrt(n / (n - 1)) t_{n-1} se, se the delete-one-dialogue jackknife's,
    each b refitted by statsmodels' IV2SLS on the dialogue-demeaned data without that dialogue."""
    import numpy as np
    from audit_sim import study
    from scipy import stats
    from statsmodels.sandbox.regression.gmm import IV2SLS

    from calibration.trust.dialogues import Dialogues
    from calibration.trust.self_preference import self_preference

    judge, _, human = study(np.random.default_rng(4), 12, gain=0.7, self_bonus=0.4, likert=False)
    row = self_preference(judge, human, Dialogues(judge["item_id"], 200, 0), "c", ["s0"])
    data = judge.merge(human, on=["item_id", "system", "criterion"]).assign(own=lambda f: (f.system == "s0") * 1.0)
    data = data.dropna(subset=["human_a", "human_b"])

    def b(part):
        demeaned = {c: part[c] - part.groupby("item_id")[c].transform("mean") for c in ("score", "human_a",
                                                                                       "human_b", "own")}
        fit = IV2SLS(demeaned["score"].to_numpy(), np.column_stack([demeaned["human_a"], demeaned["own"]]),
                     np.column_stack([demeaned["human_b"], demeaned["own"]])).fit()
        return fit.params[1]

    ids = sorted(judge["item_id"].unique())
    dropped = np.array([b(data[data.item_id != d]) for d in ids])
    n = len(ids)
    se = np.sqrt((n - 1) / n * ((dropped - dropped.mean()) ** 2).sum())
    half = np.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1) * se
    assert row["self_preference"] == pytest.approx(b(data), rel=1e-8)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((b(data) - half, b(data) + half), rel=1e-8)


def test_a_judge_of_pure_noise_is_flagged_and_a_good_one_is_not():
    """Issue 43 part 6: with human labels, a judge whose item-level agreement with them is not distinguishable
    from chance is a finding of its own (never "0 flagged"); a judge with r about 0.6 is not flagged. 60 dialogues
    x 5 systems, 4 criteria, 3 annotators (benchmarks/trust_coverage.py --only agreement has the rates)."""
    from audit_sim import agreement_rates, good_judge, noise_judge

    noise = agreement_rates(3, 60, 5, noise_judge, seed=1)
    good = agreement_rates(3, 60, 5, good_judge, seed=2)
    assert noise["agreement_flag"] >= 11 / 12 and noise["any_flag"] == 1.0, noise
    assert good["agreement_flag"] == 0.0 and 0.5 < good["mean_r"] < 0.7, good


def test_the_agreement_finding_is_counted_in_the_audits_flags(tmp_path):
    """A noise judge audited with labels: its sentence says FLAGGED and the count of findings flagged includes it."""
    import numpy as np
    from audit_sim import block_study, noise_judge

    from calibration.trust.audit import audit

    judged, words, labels = block_study(np.random.default_rng(5), 30, judge=noise_judge)
    items = words.rename(columns={"item_id": "id"}).assign(dialogue="d", candidate=lambda f: ["w " * int(n) for n in
                                                                                               f["words"]])
    result = audit(judged.assign(rubric=None), items[["id", "system", "dialogue", "candidate"]], labels,
                   bootstrap=200, scale=(1, 5))
    flagged = int(result.agreement["effect"].astype(bool).sum())
    assert flagged >= 3, result.agreement
    assert result.sentences[0].startswith(f"Findings flagged: {flagged}") or \
        int(result.sentences[0].split()[2]) >= flagged, result.sentences[0]
    assert sum("FLAGGED: not distinguishable from chance" in s for s in result.sentences) == flagged
    assert "agreement.csv" in result.files()
