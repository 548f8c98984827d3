"""What a judge saved in labels, said honestly (issue 24): `labels_saved` = effective_labels - n_labelled in every
table `judge estimate` writes, and a note naming the rows worth more than twice their labels, which a judge no better
than the systems it rates cannot be (Dorner, Nastl & Hardt 2025)."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from calibration.study.estimate_tables import estimate, twice_the_labels

SYSTEMS = ("a", "b", "c")


def frames(noise: float, seed: int = 0, n: int = 12, big_n: int = 200):
    """Three systems on big_n dialogues, one annotator on the first n; the judge = the human score + noise."""
    rng = np.random.default_rng(seed)
    items = [f"d{i:03d}" for i in range(big_n)]
    human = {s: 3.0 + k * 0.3 + rng.standard_normal(big_n) for k, s in enumerate(SYSTEMS)}
    judge = pd.DataFrame([{"item_id": d, "system": s, "criterion": "q", "status": "ok",
                           "score": human[s][i] + noise * rng.standard_normal()}
                          for s in SYSTEMS for i, d in enumerate(items)])
    labels = pd.DataFrame([{"item_id": d, "system": s, "criterion": "q", "annotator": "x", "score": human[s][i]}
                           for s in SYSTEMS for i, d in enumerate(items[:n])])
    return judge, labels


@pytest.mark.parametrize("noise", [0.05, 1.0, 5.0])
def test_labels_saved_is_effective_labels_less_the_labels_in_both_tables(noise):
    tables = estimate(*frames(noise))
    for table in (tables.estimates, tables.differences):
        expected = table["effective_labels"].astype(float) - table["n_labelled"].astype(float)
        np.testing.assert_allclose(table["labels_saved"].astype(float), expected, rtol=0, atol=1e-12)
    saved = tables.estimates["labels_saved"].astype(float)
    if noise == 0.05:  # a judge that is nearly the labels: worth many times the 12 labelled dialogues
        assert (saved > 12).all()
    if noise == 5.0:  # a judge that is mostly noise (rho 0.2) saves close to nothing: a few labels either way
        assert abs(saved.mean()) < 3 and (saved < 6).all()


def test_a_judge_worth_more_than_twice_its_labels_is_named_in_a_note():
    strong = estimate(*frames(0.05))
    over = strong.estimates[strong.estimates["effective_labels"] > 2 * strong.estimates["n_labelled"]]
    assert len(over) == len(SYSTEMS)
    notes = [n for n in strong.notes if "twice n_labelled" in n]
    assert len(notes) == 1 and "Dorner, Nastl & Hardt 2025" in notes[0]
    assert all(f"q/{s}" in notes[0] for s in SYSTEMS) and f"for {len(SYSTEMS)} of {len(SYSTEMS)} rows" in notes[0]
    weak = estimate(*frames(5.0))
    assert (weak.estimates["effective_labels"] <= 2 * weak.estimates["n_labelled"]).all()
    assert not any("twice n_labelled" in n for n in weak.notes)


@pytest.mark.parametrize("effective, named", [(24.0, False), (24.000001, True), (23.0, False), (np.nan, False)])
def test_twice_the_labels_names_only_rows_strictly_above_twice(effective, named):
    frame = pd.DataFrame({"criterion": ["q", "q"], "system": ["a", "b"], "n_labelled": [12, 12],
                          "effective_labels": [effective, 5.0]})
    note = twice_the_labels(frame, "system")
    assert ("q/a" in note) is named and "q/b" not in note
    assert (note == "") is (not named)


def test_the_cli_writes_labels_saved_and_prints_the_note(tmp_path):
    judge, labels = frames(0.05)
    judge.to_csv(tmp_path / "judge.csv", index=False)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "judge.cli", "estimate", "--judgments", str(tmp_path / "judge.csv"),
                          "--human", str(tmp_path / "labels.csv"), "--scale=-10,15", "--output-dir", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "labels_saved" in run.stdout and "twice n_labelled" in run.stdout
    for name in ("estimates.csv", "differences.csv"):
        table = pd.read_csv(out / name)
        np.testing.assert_allclose(table["labels_saved"], table["effective_labels"] - table["n_labelled"], atol=1e-9)
    assert any("twice n_labelled" in n for n in json.loads((out / "summary.json").read_text())["notes"])
