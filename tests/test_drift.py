"""`judge drift`: plant-and-recover simulations, independent checks, the CLI end to end against a real HTTP server
(tests/stub_server.py) whose answers change for a share of prompts, and bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.errors import CalibrationError
from calibration.trust.drift import drift
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ROOT / "examples" / "study" / "items.jsonl"


def simulated_runs(rng, n_items=60, n_systems=4, shift=0.0, reshuffle=0.0, noise=0.15, k=3):
    """Two runs of a 1-5 judge on the same anchors, as `judge score --samples k` writes them: `samples` holds the k
    verdicts, `score` is their mean.

    Each sample is the summary's quality moved one point with probability `noise` (re-ask noise). Planted drift:
    `shift` = the share of judgments whose samples all move up one point in the new run (so the planted mean shift
    is `shift`); `reshuffle` = the share of judgments whose quality is permuted among themselves in the new run
    (the mean stays put, the verdicts do not).
    """
    quality = rng.integers(1, 6, size=(n_items, n_systems))

    def ask(truth):
        moved = rng.random((k, *truth.shape)) < noise
        step = rng.choice([-1, 1], size=moved.shape)
        return np.where(moved, np.clip(truth + step, 1, 5), truth).astype(float)

    truth = quality.copy()
    if reshuffle:
        picked = rng.random(truth.shape) < reshuffle
        truth[picked] = rng.permutation(truth[picked])
    old, new = ask(quality), ask(truth)
    if shift:
        new = new + (rng.random(truth.shape) < shift)

    def frame(samples):
        return pd.DataFrame([{"item_id": f"d{i}", "system": f"s{j}", "criterion": "coherence",
                              "score": float(samples[:, i, j].mean()), "samples": list(samples[:, i, j])}
                             for i in range(n_items) for j in range(n_systems)])

    return frame(old), frame(new)


# The count CI runs; DRIFT_REPETITIONS=200 pytest tests/test_drift.py -k plant -s prints the README's numbers.
REPETITIONS = int(os.environ.get("DRIFT_REPETITIONS", "30"))
SCENARIOS = [{}, {"shift": 0.5}, {"reshuffle": 0.3}]
# k = 1: a deterministic judge (temperature 0), no re-asks, the noise unknown; k = 3: re-ask noise 15% a sample.
JUDGES = {1: 0.0, 3: 0.15}


@pytest.mark.parametrize("k", list(JUDGES), ids=[f"k{k}" for k in JUDGES])
@pytest.mark.parametrize("planted", SCENARIOS, ids=["nothing", "shift", "reshuffle"])
def test_plant_and_recover(planted, k):
    """Measured at 200 repetitions (60 dialogues x 4 systems, bootstrap 300). k = 3 samples, score their mean:
    nothing planted no drift 100% (drift 0%, inconclusive 0%), the shift's CI covers 0 in 92.5%; shift +0.5 drift
    100%, covered 94%; 30% reshuffled drift 100%, covered 100%. k = 1: nothing planted no drift 100%, covered 100%
    (the shift is exactly 0); shift drift 100%, covered 91.5%; reshuffled drift 100%, covered 100%.

    The issue's bars: the expected verdict in >= 90% and the CI covering the planted shift in >= 90%, checked at 200
    repetitions; at CI's 30 a 95% CI's coverage is held to >= 80% (a miss there is a real fault, not chance)."""
    rng = np.random.default_rng(16 + k)
    verdicts, covered = [], 0
    for repetition in range(REPETITIONS):
        reference, new = simulated_runs(rng, k=k, noise=JUDGES[k], **planted)
        row = drift(reference, new, bootstrap=300, seed=repetition).drift.iloc[0]
        verdicts.append(row.verdict)
        covered += row.ci_low <= planted.get("shift", 0.0) <= row.ci_high
    expected = "no drift" if not planted else "drift"
    shares = {v: verdicts.count(v) / REPETITIONS for v in ("no drift", "drift", "inconclusive")}
    print(f"k={k} {planted or 'nothing'} ({REPETITIONS} repetitions): "
          + ", ".join(f"{v} {100 * x:.1f}%" for v, x in shares.items())
          + f"; CI covers the planted shift in {100 * covered / REPETITIONS:.1f}%")
    assert shares[expected] >= 0.9
    assert covered / REPETITIONS >= (0.9 if REPETITIONS >= 200 else 0.8)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_an_unchanged_judge_with_samples_is_not_drift(k):
    """The changed share and the noise are both per sample: a score (the mean of k samples) changes more often
    between runs than one sample does between re-asks, and that is not drift."""
    for seed in range(3):
        reference, new = simulated_runs(np.random.default_rng(100 * k + seed), k=k, noise=0.2)
        row = drift(reference, new).drift.iloc[0]
        assert (new.score != reference.score).mean() > row.reask_noise + 0.1  # the means do change more...
        assert row.verdict == "no drift" and abs(row.changed_share - row.reask_noise) < 0.05  # ...the samples not


def test_verdicts_reshuffled_with_the_mean_in_place_is_drift():
    reference, new = simulated_runs(np.random.default_rng(3), reshuffle=0.3)
    row = drift(reference, new).drift.iloc[0]
    assert abs(row.mean_shift) < 0.1 and row.ci_low < 0 < row.ci_high  # the mean did not move...
    assert row.verdict == "drift" and row.changed_share > row.reask_noise + 0.1  # ...the verdicts did


def _sample_shares(reference, new):
    """Independently: per judgment, the share of cross-run sample pairs that differ, and of within-run pairs."""
    across = [np.mean([a != b for a in r for b in n]) for r, n in zip(reference.samples, new.samples)]
    within = [np.mean([r[i] != r[j] for i in range(len(r)) for j in range(i + 1, len(r))])
              for r in reference.samples]
    return float(np.mean(across)), float(np.mean(within))


def test_numbers_against_an_independent_computation():
    reference, new = simulated_runs(np.random.default_rng(5), shift=0.2)
    row = drift(reference, new).drift.iloc[0]
    from sklearn.metrics import cohen_kappa_score

    assert row.mean_shift == pytest.approx((new.score - reference.score).mean())  # of the scores (means)
    across, within = _sample_shares(reference, new)
    assert row.changed_share == pytest.approx(across)
    assert row.reask_noise == pytest.approx(within)  # the reference run's re-asks only
    rounded = lambda s: np.floor(s + 0.5).astype(int)  # noqa: E731
    assert row.kappa == pytest.approx(cohen_kappa_score(rounded(reference.score), rounded(new.score),
                                                        weights="quadratic"))
    # Without samples the verdicts themselves are compared.
    bare = drift(reference.drop(columns="samples"), new.drop(columns="samples")).drift.iloc[0]
    assert bare.changed_share == pytest.approx((new.score != reference.score).mean()) and bare.reask_noise == 0


def test_the_noise_is_the_references_unless_it_has_no_reasks():
    """A noisier new run must not widen its own allowance: against a reference whose re-asks agree, a new run whose
    samples move a point in 20% (less where clipped at 1 and 5) has drifted."""
    rng = np.random.default_rng(8)
    reference, _ = simulated_runs(rng, noise=0.0)
    quality = np.array([s[0] for s in reference.samples])
    moved = rng.random((len(quality), 3)) < 0.2
    samples = np.where(moved, np.clip(quality[:, None] + rng.choice([-1, 1], moved.shape), 1, 5), quality[:, None])
    new = reference.assign(samples=[list(s) for s in samples], score=samples.mean(1))
    row = drift(reference, new).drift.iloc[0]
    assert row.reask_noise == 0 and row.verdict == "drift" and 0.1 < row.changed_share < 0.2
    # A reference without re-asks: the new run's noise, and the output says so.
    alone = drift(reference.drop(columns="samples"), new).drift.iloc[0]
    assert alone.reask_noise == pytest.approx(_sample_shares(new, new)[1]) and "the new run's" in alone.note


def test_too_few_anchors_is_inconclusive_and_says_how_many():
    reference, new = simulated_runs(np.random.default_rng(7), n_items=6, n_systems=2, noise=0.3, k=2)
    row = drift(reference, new).drift.iloc[0]
    assert row.verdict == "inconclusive"
    assert f"about {row.dialogues_needed} anchor dialogues would settle it (6 now)" in row.note
    # The count, independently: the larger of the two equivalence tests' normal-approximation sample sizes (one-
    # sided 5%, 80% power): the changed share within the re-ask noise + 0.1, a binomial share at noise + 0.05 with
    # 2 judgments per dialogue, and the mean shift within +-0.25, from the per-dialogue SD of the shift.
    from scipy.stats import norm

    z = norm.ppf(0.95) + norm.ppf(0.80)
    p = row.reask_noise + 0.1 / 2
    share = z ** 2 * p * (1 - p) / 0.1 ** 2 / 2
    sd = (new["score"] - reference["score"]).groupby(reference["item_id"]).mean().std(ddof=1)
    expected = max(share, (z * sd / 0.25) ** 2)
    assert expected <= row.dialogues_needed <= expected * 1.01 + 1
    # ... and that many anchor dialogues settle it: the same unchanged judge, judged again on that many, is now
    # mostly called NO DRIFT (80% power: at least 3 studies of 5 here).
    verdicts = [drift(*simulated_runs(np.random.default_rng(100 + s), n_items=int(row.dialogues_needed), n_systems=2,
                                      noise=0.3, k=2)).drift.iloc[0].verdict for s in range(5)]
    assert verdicts.count("no drift") >= 3, verdicts


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


def test_labels_moved_to_one_category_are_drift_not_no_drift():
    """Stuart-Maxwell must not reject for no drift: 6.3% of 2,000 labels moved to one category is a changed share
    within the margin, but the marginals moved (p ~ 0)."""
    rng = np.random.default_rng(12)
    keys = [{"item_id": f"d{i // 4}", "system": f"s{i % 4}", "criterion": "topic"} for i in range(2000)]
    old = rng.choice(["a", "b", "c"], size=2000, p=[0.4, 0.4, 0.2])
    moved = np.flatnonzero(old != "c")[:126]
    new = old.copy()
    new[moved] = "c"
    frame = lambda labels: pd.DataFrame([{**k, "score": np.nan, "label": v, "status": "label"}  # noqa: E731
                                         for k, v in zip(keys, labels)])
    row = drift(frame(old), frame(new)).drift.iloc[0]
    assert row.changed_share == pytest.approx(0.063) and row.changed_ci_high < 0.1
    assert row.stuart_maxwell_p < 1e-6 and row.verdict == "drift"


def _pairwise(rng, n=300, per_order=1, flips=0.3, reversed_share=0.0, flipped=None):
    """A deterministic pairwise judge with position bias: each pair judged in both orders, `per_order` samples
    each, the swapped answers read back into the input's order; in `flips` of the pairs the judge prefers whichever
    candidate is shown first, so the orders disagree (label "0"). `reversed_share`: preferences reversed in both
    orders (a real change)."""
    preferred = np.where(rng.random(n) < 0.5, "1", "2")
    flipped = rng.random(n) < flips if flipped is None else flipped
    if reversed_share:
        turn = rng.random(n) < reversed_share
        preferred = np.where(turn, np.where(preferred == "1", "2", "1"), preferred)
    other = np.where(preferred == "1", "2", "1")
    swapped = np.where(flipped, other, preferred)
    rows = [{"item_id": f"d{i // 3}", "system": f"a{i % 3}|b{i % 3}", "criterion": "preference",
             "score": np.nan, "label": "0" if f != s else f, "status": "label",
             "samples": [f] * per_order + [s] * per_order, "forward": f, "swapped": s}
            for i, (f, s) in enumerate(zip(preferred, swapped))]
    return pd.DataFrame(rows), flipped


@pytest.mark.parametrize("per_order", [1, 2])
def test_pairwise_noise_is_within_one_order(per_order, tmp_path):
    """Position flips are not re-asks: 30% order flips, 25% of preferences reversed is drift (taking the two
    orders as re-asks gave noise 0.34 against 0.18 changed, and no drift)."""
    rng = np.random.default_rng(21)
    reference, flipped = _pairwise(rng, per_order=per_order)
    new, _ = _pairwise(np.random.default_rng(21), per_order=per_order, reversed_share=0.25, flipped=flipped)
    row = drift(reference, new).drift.iloc[0]
    assert row.reask_noise == 0 and row.verdict == "drift"
    assert row.changed_share == pytest.approx(0.25, abs=0.06)
    unchanged = drift(reference, reference).drift.iloc[0]
    assert unchanged.verdict == "no drift" and unchanged.changed_share == 0
    # The same read from judgments files, where `orders` says both orders were judged.
    files = []
    for name, frame in (("old", reference), ("new", new)):
        lines = [{"id": r.item_id, "system": r.system, "criterion": r.criterion, "label": r.label,
                  "samples": r.samples, "orders": {"forward": r.forward, "swapped": r.swapped},
                  "system_1": r.system.split("|")[0], "system_2": r.system.split("|")[1], "rubric": "pairs@1",
                  "model": "m"} for r in frame.itertuples()]
        files.append(_jsonl(tmp_path / f"{name}.jsonl", lines))
    from_files = drift(*files).drift.iloc[0]
    assert from_files.reask_noise == 0 and from_files.changed_share == pytest.approx(row.changed_share)
    assert from_files.verdict == "drift"


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


# Unchanged, deterministic (no re-asks), 16 dialogues: nothing changed, but a dialogue's verdicts may change together,
# so 16 dialogues cannot show the changed share below 10% (exact bound 17%): inconclusive, saying 29 would.
@pytest.mark.parametrize("changed_share, expected_code", [(0.0, 1), (0.3, 1)], ids=["unchanged", "drifted"])
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
        assert row.verdict == "inconclusive" and row.changed_share == 0 and "nothing recorded changed" in printed
        assert row.dialogues_needed == 47 and "about 47 anchor dialogues would settle it (16 now)" in printed
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
