"""`judge drift`: plant-and-recover simulations, independent checks, the CLI end to end against a real HTTP server
(tests/stub_server.py) whose answers change for a share of prompts, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.trust.drift import drift
from calibration.errors import CalibrationError
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ROOT / "examples" / "study" / "items.jsonl"


def simulated_runs(rng, n_items=60, n_systems=4, shift=0.0, reshuffle=0.0, noise=0.15):
    """Two runs of a 1-5 judge on the same anchors, each with two re-asks in `samples`.

    Each verdict is the summary's quality moved one point with probability `noise` (re-ask noise). Planted drift:
    `shift` = the share of verdicts moved up one point in the new run (so the planted mean shift is `shift`);
    `reshuffle` = the share of verdicts permuted among themselves in the new run (the mean stays put).
    """
    quality = rng.integers(1, 6, size=(n_items, n_systems))

    def ask():
        moved = rng.random(quality.shape) < noise
        return np.where(moved, np.clip(quality + rng.choice([-1, 1], size=quality.shape), 1, 5), quality).astype(float)

    old, old_again, new, new_again = ask(), ask(), ask(), ask()
    if reshuffle:
        picked = rng.random(new.shape) < reshuffle
        new[picked] = rng.permutation(new[picked])
        new_again[picked] = new[picked]
    if shift:
        up = rng.random(new.shape) < shift
        new, new_again = new + up, new_again + up

    def frame(first, second):
        return pd.DataFrame([{"item_id": f"d{i}", "system": f"s{j}", "criterion": "coherence",
                              "score": first[i, j], "samples": [first[i, j], second[i, j]]}
                             for i in range(n_items) for j in range(n_systems)])

    return frame(old, old_again), frame(new, new_again)


REPETITIONS = 40


@pytest.mark.parametrize("planted", [{}, {"shift": 0.5}, {"reshuffle": 0.3}], ids=["nothing", "shift", "reshuffle"])
def test_plant_and_recover(planted):
    rng = np.random.default_rng(16)
    verdicts, covered = [], 0
    for repetition in range(REPETITIONS):
        reference, new = simulated_runs(rng, **planted)
        row = drift(reference, new, bootstrap=300, seed=repetition).drift.iloc[0]
        verdicts.append(row.verdict)
        covered += row.ci_low <= planted.get("shift", 0.0) <= row.ci_high
    expected = "no drift" if not planted else "drift"
    share = verdicts.count(expected) / REPETITIONS
    print(f"{planted or 'nothing'}: {expected} in {share:.0%}, CI covers the planted shift in "
          f"{covered / REPETITIONS:.0%}")
    assert share >= 0.9
    assert covered / REPETITIONS >= 0.9


def test_verdicts_reshuffled_with_the_mean_in_place_is_drift():
    reference, new = simulated_runs(np.random.default_rng(3), reshuffle=0.3)
    row = drift(reference, new).drift.iloc[0]
    assert abs(row.mean_shift) < 0.1 and row.ci_low < 0 < row.ci_high  # the mean did not move...
    assert row.verdict == "drift" and row.changed_share > row.reask_noise + 0.1  # ...the verdicts did


def test_numbers_against_an_independent_computation():
    reference, new = simulated_runs(np.random.default_rng(5), shift=0.2)
    row = drift(reference, new).drift.iloc[0]
    from sklearn.metrics import cohen_kappa_score

    assert row.mean_shift == pytest.approx((new.score - reference.score).mean())
    assert row.changed_share == pytest.approx((new.score != reference.score).mean())
    assert row.kappa == pytest.approx(cohen_kappa_score(reference.score.astype(int), new.score.astype(int),
                                                        weights="quadratic"))
    # Re-ask noise: the share of pairs of samples that disagree, pooled over both runs.
    pooled = pd.concat([reference, new])
    assert row.reask_noise == pytest.approx(np.mean([a != b for a, b in pooled.samples]))


def test_too_few_anchors_is_inconclusive_and_says_how_many():
    reference, new = simulated_runs(np.random.default_rng(7), n_items=6, n_systems=2, noise=0.3)
    row = drift(reference, new).drift.iloc[0]
    assert row.verdict == "inconclusive"
    assert row.dialogues_needed > 6 and f"about {row.dialogues_needed} anchor dialogues" in row.note


def test_labels_use_kappa_and_stuart_maxwell():
    rng = np.random.default_rng(11)
    keys = [{"item_id": f"d{i}", "system": "s", "criterion": "topic"} for i in range(200)]
    old = rng.choice(["a", "b", "c"], size=200, p=[0.5, 0.3, 0.2])
    new = np.where(rng.random(200) < 0.35, "c", old)  # a judge that now says "c" far more often
    frame = lambda labels: pd.DataFrame([{**k, "score": np.nan, "label": v, "status": "label"}  # noqa: E731
                                         for k, v in zip(keys, labels)])
    result = drift(frame(old), frame(new))
    row = result.drift.iloc[0]
    from scipy import stats

    # Stuart-Maxwell by its formula: d = row - column margins, S_ii = n_i. + n_.i - 2 n_ii, S_ij = -(n_ij + n_ji).
    n = pd.crosstab(pd.Categorical(old, ["a", "b", "c"]), pd.Categorical(new, ["a", "b", "c"]),
                    dropna=False).to_numpy(float)
    d = (n.sum(1) - n.sum(0))[:2]
    cov = -(n + n.T)
    np.fill_diagonal(cov, n.sum(1) + n.sum(0) - 2 * np.diag(n))
    statistic = d @ np.linalg.solve(cov[:2, :2], d)
    assert row.kind == "labels" and row.verdict == "drift"
    assert row.stuart_maxwell_p == pytest.approx(stats.chi2.sf(statistic, 2))
    same = drift(frame(old), frame(old)).drift.iloc[0]
    assert same.verdict == "no drift" and same.changed_share == 0 and same.kappa == pytest.approx(1.0)


def test_with_humans_the_change_in_agreement_has_a_ci():
    rng = np.random.default_rng(2)
    truth = rng.normal(3, 1, size=(80, 3))
    keys = [(f"d{i}", f"s{j}") for i in range(80) for j in range(3)]
    human = pd.DataFrame([{"item_id": i, "system": s, "annotator": "a1", "criterion": "c",
                           "score": float(truth[int(i[1:]), int(s[1:])])} for i, s in keys])
    good = np.round(truth + rng.normal(0, 0.5, truth.shape))
    worse = np.round(truth + rng.normal(0, 2.0, truth.shape))
    frame = lambda m: pd.DataFrame([{"item_id": i, "system": s, "criterion": "c",  # noqa: E731
                                     "score": float(m[int(i[1:]), int(s[1:])])} for i, s in keys])
    row = drift(frame(good), frame(worse), human).drift.iloc[0]
    assert row.human_r_change < 0 and row.human_ci_high < 0
    assert row.human_r_change == pytest.approx(np.corrcoef(worse.ravel(), truth.ravel())[0, 1]
                                               - np.corrcoef(good.ravel(), truth.ravel())[0, 1])


# -- end to end: `judge score` twice against a real HTTP server, then `judge drift` ----------------------------


def _score(stub, output: Path) -> None:
    code = main(["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--output", str(output),
                 "--criteria", "coherence", "--backend", "openai", "--base-url", stub.base_url, "--model", "stub",
                 "--no-cache", "--no-progress"])
    assert code == 0


@pytest.mark.parametrize("changed_share, expected_code", [(0.0, 0), (0.3, 1)], ids=["unchanged", "drifted"])
def test_end_to_end_against_a_server_whose_answers_change(stub_server, tmp_path, capsys, changed_share,
                                                          expected_code):
    _score(stub_server, tmp_path / "old.jsonl")
    stub_server.configure(changed_share=changed_share,
                          system_fingerprint="fp_stub_v2" if changed_share else "fp_stub")
    _score(stub_server, tmp_path / "new.jsonl")
    capsys.readouterr()
    out = tmp_path / "drift"
    code = main(["drift", "--reference", str(tmp_path / "old.jsonl"), "--judgments", str(tmp_path / "new.jsonl"),
                 "--output-dir", str(out), "--report", str(tmp_path / "drift.html")])
    printed = capsys.readouterr().out
    assert code == expected_code
    table = pd.read_csv(out / "drift.csv")
    assert {"criterion", "n", "mean_shift", "ci_low", "ci_high", "changed_share", "kappa", "verdict"} <= set(table)
    row = table.iloc[0]
    assert row.n == 48
    if changed_share:
        assert row.verdict == "drift" and "coherence: DRIFT" in printed
        assert 0.1 < row.changed_share < 0.5 and row.mean_shift > 0
        assert "served.system_fingerprint: fp_stub -> fp_stub_v2" in printed
    else:
        assert row.verdict == "no drift" and row.changed_share == 0 and "nothing recorded changed" in printed
    provenance = pd.read_csv(out / "provenance.csv")
    assert set(provenance["field"]) >= {"fingerprint", "served.model", "served.system_fingerprint"}


def test_report_renders_in_a_real_browser(tmp_path):
    from conftest import CHROMIUM, browser_dom

    if not CHROMIUM.exists():
        pytest.skip("headless browser check needs Debian's chromium at /usr/bin/chromium")
    reference, new = simulated_runs(np.random.default_rng(1), shift=0.5)
    page = tmp_path / "drift.html"
    drift(reference, new).report(page)
    dom, images = browser_dom(page, tmp_path)
    assert images == 1 and 'data-images-rendered="1/1"' in dom
    assert "Drift: the same judge, still the same?" in dom and "<td>drift</td>" in dom


# -- bad input --------------------------------------------------------------------------------------------------


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rows(ids, rubric="dialsummeval@1"):
    return [{"id": i, "system": "s", "criterion": "coherence", "score": 3, "rubric": rubric, "model": "m"}
            for i in ids]


BAD = [
    ("no keys in common", lambda d: (_jsonl(d / "old.jsonl", _rows(["a", "b"])), _jsonl(d / "new.jsonl", _rows(["c"]))),
     [], "no (item, system, criterion) in common with the reference"),
    ("mixed rubrics between runs", lambda d: (_jsonl(d / "old.jsonl", _rows(["a"])),
                                              _jsonl(d / "new.jsonl", _rows(["a"], "summeval@1"))),
     [], "drift compares the same rubric"),
    ("mixed rubrics in one run", lambda d: (_jsonl(d / "old.jsonl", _rows(["a"]) + _rows(["b"], "summeval@1")),
                                            _jsonl(d / "new.jsonl", _rows(["a", "b"]))),
     [], "judgments of 2 judges in one file"),
    ("a margin of zero", lambda d: (_jsonl(d / "old.jsonl", _rows(["a"])), _jsonl(d / "new.jsonl", _rows(["a"]))),
     ["--margin", "0"], "--margin must be a positive number"),
    ("a missing reference", lambda d: (d / "nowhere.jsonl", _jsonl(d / "new.jsonl", _rows(["a"]))),
     [], "nowhere.jsonl"),
]


@pytest.mark.parametrize("make, extra, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, make, extra, message):
    old, new = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    code = main(["drift", "--reference", str(old), "--judgments", str(new), "--output-dir", str(tmp_path / "out"),
                 "--report", str(tmp_path / "r.html"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "r.html").exists()
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_function_raises_the_clis_message():
    frame = pd.DataFrame([{"item_id": "a", "system": "s", "criterion": "c", "score": 1.0}])
    with pytest.raises(CalibrationError, match="--share-margin must be between 0 and 1"):
        drift(frame, frame, share_margin=2)
