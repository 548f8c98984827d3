"""`judge drift` refuses what it cannot judge, and each of its decision rules is exercised alone.

- Drift through the answer cache: the anchor set re-judged the README's way (`judge score ... --refresh`) against a
  real HTTP server (tests/stub_server.py) that now serves another model under the same name says DRIFT, with a
  cache directory and without one; a re-run answered from the cache is refused, never called NO DRIFT.
- Identical scores are never drift, whatever the file types of the two runs.
- Two runs of different judges are refused naming what differs (unless --allow-different-judge, said in the output);
  labels off the rubric's scale, negative seeds and too few resamples are refused in one line, exit 2.
- Each decision rule alone (TOST's level, the mean-shift test, the no-drift bound, dialogues needed, the paired
  change in agreement with humans, the provenance rows), so that a bug planted in any one of them fails a test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from calibration.errors import CalibrationError
from calibration.trust import drift as drift_module
from calibration.trust.drift import drift
from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ROOT / "examples" / "study" / "items.jsonl"


def _score(stub, output: Path, *flags: str) -> int:
    return main(["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--output", str(output),
                 "--criteria", "coherence", "--backend", "openai", "--base-url", stub.base_url, "--model", "stub",
                 "--no-progress", *flags])


# -- drift reaches the model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", ["a cache directory", "no cache"])
def test_the_readme_way_sees_a_model_changed_behind_the_same_name(stub_server, tmp_path, capsys, cache):
    flags = ["--cache", str(tmp_path / "cache")] if cache == "a cache directory" else ["--no-cache"]
    assert _score(stub_server, tmp_path / "old.jsonl", *flags) == 0
    stub_server.configure(changed_share=0.3, system_fingerprint="fp_stub_v2")  # another model, the same name
    before = stub_server.stats.total
    again = ["--refresh", *flags] if cache == "a cache directory" else flags
    assert _score(stub_server, tmp_path / "new.jsonl", *again) == 0
    assert stub_server.stats.total - before >= 48  # every anchor was asked anew
    capsys.readouterr()
    code = main(["drift", "--reference", str(tmp_path / "old.jsonl"), "--judgments", str(tmp_path / "new.jsonl")])
    printed = capsys.readouterr().out
    assert code == 1 and "coherence: DRIFT" in printed
    assert "served.system_fingerprint: fp_stub -> fp_stub_v2" in printed


def test_a_rerun_answered_from_the_cache_is_refused_not_no_drift(stub_server, tmp_path, capsys):
    cache = ["--cache", str(tmp_path / "cache")]
    assert _score(stub_server, tmp_path / "old.jsonl", *cache) == 0
    stub_server.configure(changed_share=0.3, system_fingerprint="fp_stub_v2")
    assert _score(stub_server, tmp_path / "new.jsonl", *cache) == 0  # the same command: all 48 from the cache
    lines = [json.loads(line) for line in (tmp_path / "new.jsonl").read_text().splitlines()]
    assert len(lines) == 48 and all(line["from_cache"] is True for line in lines)
    capsys.readouterr()
    code = main(["drift", "--reference", str(tmp_path / "old.jsonl"), "--judgments", str(tmp_path / "new.jsonl"),
                 "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "48 of 48 judgments were answered from the answer cache" in err and "--refresh" in err
    assert not (tmp_path / "out").exists()
    # --refresh into the same output redoes exactly the lines that came from the cache, and asks the model.
    before = stub_server.stats.total
    assert _score(stub_server, tmp_path / "new.jsonl", "--refresh", *cache) == 0
    assert "redoing 48 judgments answered from the cache (--refresh)" in capsys.readouterr().err
    assert stub_server.stats.total - before >= 48
    assert main(["drift", "--reference", str(tmp_path / "old.jsonl"), "--judgments", str(tmp_path / "new.jsonl")]) == 1


def test_refresh_with_no_cache_is_refused(tmp_path, capsys):
    code = main(["score", "--rubric", "dialsummeval", "--input", str(ITEMS), "--output", str(tmp_path / "o.jsonl"),
                 "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--refresh",
                 "--no-cache"])
    assert code == 2 and "--refresh writes fresh answers to the cache that --no-cache turns off" in \
        capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


# -- identical scores, other file types ----------------------------------------------------------------------------


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sampled_rows(rng, n=30, systems=3, model="m", temperature=1.0):
    rows = []
    for i in range(n):
        for j in range(systems):
            samples = [int(v) for v in rng.integers(2, 5, size=3)]
            rows.append({"id": f"d{i}", "system": f"s{j}", "criterion": "coherence", "score": float(np.mean(samples)),
                         "samples": samples, "rubric": "dialsummeval@1", "model": model,
                         "fingerprint": {"model": model, "temperature": temperature, "samples": 3, "item": f"i{i}{j}"}})
    return rows


def test_the_same_scores_in_a_csv_and_a_jsonl_are_not_drift(tmp_path, capsys):
    rows = _sampled_rows(np.random.default_rng(0))
    new = _jsonl(tmp_path / "new.jsonl", rows)
    reference = tmp_path / "ref.csv"
    pd.DataFrame({"item_id": [r["id"] for r in rows], "system": [r["system"] for r in rows],
                  "criterion": "coherence", "score": [r["score"] for r in rows]}).to_csv(reference, index=False)
    assert any(not float(r["score"]).is_integer() for r in rows)  # means of samples: the case that broke
    for old, now in ((reference, new), (new, reference)):
        code = main(["drift", "--reference", str(old), "--judgments", str(now)])
        printed = capsys.readouterr().out
        assert "coherence: DRIFT" not in printed and "0.0% of 90 verdicts changed" in printed, printed
        assert code in (0, 1) and "kappa 1.00" in printed


# -- one judge over time -------------------------------------------------------------------------------------------


def test_a_different_judge_is_refused_naming_what_differs(tmp_path, capsys):
    rng = np.random.default_rng(1)
    old = _jsonl(tmp_path / "old.jsonl", _sampled_rows(rng))
    rows = _sampled_rows(np.random.default_rng(1), model="m", temperature=0.7)
    new = _jsonl(tmp_path / "new.jsonl", rows)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    code = main(["drift", "--reference", str(old), "--judgments", str(new), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "temperature 1.0 -> 0.7 (90 judgments)" in err and "--allow-different-judge" in err
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before
    code = main(["drift", "--reference", str(old), "--judgments", str(new), "--allow-different-judge",
                 "--output-dir", str(tmp_path / "out")])
    out = capsys.readouterr()
    # Exit 1: no score changed in any dialogue, so the shift's interval is the scale's span x the exact bound on
    # the share that changed, too wide for "no drift" at 30 dialogues (issue 41 part 5).
    assert code == 1 and "two different judges compared on purpose" in out.out + out.err
    provenance = pd.read_csv(tmp_path / "out" / "provenance.csv").set_index("field")
    assert bool(provenance.loc["fingerprint", "changed"])  # what the fingerprint row hashes is the fingerprint


def test_the_provenance_rows_follow_their_own_fields(tmp_path):
    def run(name, fingerprint, served):
        return _jsonl(tmp_path / name, [{"id": "d1", "system": "s", "criterion": "coherence", "score": 3,
                                         "rubric": "dialsummeval@1", "model": "m", "fingerprint": fingerprint,
                                         "served": served}])

    same_print = {"model": "m", "temperature": 0.0}
    result = drift(run("a.jsonl", same_print, {"model": "m-2024", "system_fingerprint": "fp1"}),
                   run("b.jsonl", same_print, {"model": "m-2025", "system_fingerprint": "fp1"}), bootstrap=100)
    rows = result.provenance.set_index("field")
    assert not rows.loc["fingerprint", "changed"] and rows.loc["served.model", "changed"]
    assert not rows.loc["served.system_fingerprint", "changed"]
    assert rows.loc["served.model", "reference"] == "m-2024" and rows.loc["served.model", "new"] == "m-2025"


# -- bad input, table-driven: one line, exit 2, nothing written --------------------------------------------------


def _labels(path: Path, value: str) -> Path:
    path.write_text("item_id,system,annotator,criterion,score\n"
                    + "".join(f"d{i},s0,a1,coherence,{value if i == 3 else 3}\n" for i in range(30)))
    return path


BAD = [
    ("labels off the rubric's 1-5 scale", ["--human", "{d}/labels.csv"], "labels.csv:5",
     lambda d: _labels(d / "labels.csv", "9")),
    ("a negative seed", ["--seed", "-1"], "argument --seed: must be a whole number of at least 0, got '-1'", None),
    ("three resamples", ["--bootstrap", "3"], "--bootstrap must be a whole number of at least 100, got 3", None),
    ("a scale that is no scale", ["--scale", "5,1"], "argument --scale: must be MIN,MAX with MIN < MAX", None),
]


@pytest.mark.parametrize("extra, message, make", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, extra, message, make):
    rows = _sampled_rows(np.random.default_rng(2), systems=1)
    old, new = _jsonl(tmp_path / "old.jsonl", rows), _jsonl(tmp_path / "new.jsonl", rows)
    if make:
        make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    try:
        code = main(["drift", "--reference", str(old), "--judgments", str(new), "--output-dir",
                     str(tmp_path / "out"), *[e.format(d=tmp_path) for e in extra]])
    except SystemExit as exc:  # a flag argparse refuses: its usage line, then the one error line
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err.splitlines()[-1] and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before and not (tmp_path / "out").exists()


def test_the_functions_refuse_what_the_cli_refuses():
    frame = pd.DataFrame([{"item_id": "a", "system": "s", "criterion": "c", "score": 1.0}])
    with pytest.raises(CalibrationError, match="--seed must be a whole number of at least 0, got -3"):
        drift(frame, frame, seed=-3)
    with pytest.raises(CalibrationError, match="--bootstrap must be a whole number of at least 200 at confidence"):
        drift(frame, frame, bootstrap=150, confidence=0.99)


# -- each decision rule alone ---------------------------------------------------------------------------------------


def _part(shifts_by_dialogue: list[list[float]], changed: list[list[float]] | None = None) -> pd.DataFrame:
    """A criterion's paired judgments as drift's rule sees them: scores, per-judgment change, dialogues."""
    rows = []
    for i, shifts in enumerate(shifts_by_dialogue):
        for j, shift in enumerate(shifts):
            rows.append({"item_id": f"d{i:03d}", "system": f"s{j}", "criterion": "c", "status_ref": "ok",
                         "status_new": "ok", "score_ref": 3.0, "score_new": 3.0 + shift,
                         "changed": (changed[i][j] if changed else float(shift != 0))})
    return pd.DataFrame(rows)


def _row(part, noise=0.0, margin=0.25, share_margin=0.1, seed=0):
    return drift_module._criterion_row(part, None, noise, margin, share_margin, 1000, seed, 0.95)


def test_the_shift_intervals_are_clustered_t_intervals_as_statsmodels_computes_them():
    """The 95% interval and TOST's 90% one: the mean shift with its dialogue-clustered standard error and t over
    dialogues - 1 degrees of freedom, as statsmodels' OLS on a constant computes them (cluster covariance, use_t)."""
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    part = _part([list(rng.normal(0.05, 0.3, 3)) for _ in range(40)])
    row = _row(part, noise=0.9)
    shift = (part.score_new - part.score_ref).to_numpy()
    groups = pd.factorize(part["item_id"])[0]
    fit = sm.OLS(shift, np.ones(len(shift))).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(fit.conf_int(0.05)[0]))
    assert (row["tost_low"], row["tost_high"]) == pytest.approx(tuple(fit.conf_int(0.10)[0]))
    assert row["ci_high"] - row["ci_low"] > row["tost_high"] - row["tost_low"]


def test_a_mean_shift_alone_is_drift():
    # Every judgment moves +0.3 +- a little; the changed share is within a huge re-ask noise, so only the shift
    # rule can call it drift.
    rng = np.random.default_rng(4)
    row = _row(_part([list(0.3 + rng.normal(0, 0.05, 3)) for _ in range(20)]), noise=1.0)
    assert row["ci_low"] > 0 and row["verdict"] == "drift"


def test_no_drift_needs_the_bound_not_the_point_estimate():
    # 6% of verdicts changed on 12 dialogues with no re-ask noise: the point (0.06) is within 0 + 0.1, but its
    # one-sided bound is not, so "no drift" is not shown.
    changed = [[0.0, 0.0, 0.0] for _ in range(12)]
    changed[0], changed[5] = [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]
    row = _row(_part([[0.0, 0.0, 0.0] for _ in range(12)], changed), noise=0.0)
    assert 0.05 < row["changed_share"] < 0.1 and row["verdict"] != "no drift"


def test_dialogues_needed_is_the_equivalence_tests_sample_size():
    rng = np.random.default_rng(5)
    shifts = [list(rng.normal(0, 0.6, 2)) for _ in range(8)]
    row = _row(_part(shifts, [[0.0, 0.0]] * 8), noise=0.5, share_margin=0.5)
    assert row["verdict"] == "inconclusive"
    sd = pd.Series([np.mean(s) for s in shifts]).std(ddof=1)
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.8)
    assert row["dialogues_needed"] == math.ceil((z * sd / 0.25) ** 2)


def test_the_change_in_agreement_with_humans_is_paired():
    # The new run is the reference plus a little noise: their correlations with the humans move together, so a
    # paired interval is narrow; an unpaired one (each r resampled on its own) would be ~0.2 wide here.
    rng = np.random.default_rng(6)
    truth = rng.normal(3, 1, size=(40, 3))
    keys = [(f"d{i}", f"s{j}") for i in range(40) for j in range(3)]
    human = pd.DataFrame([{"item_id": i, "system": s, "annotator": "a1", "criterion": "c",
                           "score": float(truth[int(i[1:]), int(s[1:])])} for i, s in keys])
    judge = truth + rng.normal(0, 1.0, truth.shape)
    frame = lambda m: pd.DataFrame([{"item_id": i, "system": s, "criterion": "c",  # noqa: E731
                                     "score": float(m[int(i[1:]), int(s[1:])])} for i, s in keys])
    row = drift(frame(judge), frame(judge + rng.normal(0, 0.05, truth.shape)), human).drift.iloc[0]
    assert row.human_ci_low <= row.human_r_change <= row.human_ci_high
    assert row.human_ci_high - row.human_ci_low < 0.05
