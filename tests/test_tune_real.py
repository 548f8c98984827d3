"""`judge tune` on released scores with human ratings (DialSummEval's metrics as scorers already made, read from
../shared/data, never copied): a candidate accepted on half of the dialogues also gains on the other half, whose
labels tune never saw."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tune_real  # noqa: E402

FOLDER = tune_real.data_dir()


@pytest.mark.skipif(FOLDER is None, reason="../shared/data/dialsummeval is absent (set JUDGE_SHARED_DATA)")
def test_an_accepted_candidate_gains_on_labels_it_never_saw():
    table = tune_real.run(FOLDER, criteria=["relevance"], candidates=["rouge-1", "blanc_help", "Bleu_4"],
                          n_resamples=1000)
    tuned = table[table["split"].str.startswith("tune")]
    held = table[table["split"].str.startswith("held out")]
    assert tuned.set_index("candidate").loc["blanc_help", "accepted"]
    assert ((tuned["lower_family"] > 0) == tuned["accepted"]).all()  # the verdict is the family lower bound's sign
    assert not tuned.set_index("candidate").loc["Bleu_4", "accepted"]
    assert list(held["candidate"]) == ["blanc_help"]
    assert held["gain"].iloc[0] > 0.1 and held["ci_low"].iloc[0] > 0
