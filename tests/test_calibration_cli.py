"""`judge calibrate` end to end on a small invented fixture, plus maps, labels, pairwise and error handling."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.agreement import label_agreement, pairwise_agreement
from calibration.errors import CalibrationError
from calibration.io import load_human_labels, load_judge_scores
from calibration.maps import IsotonicCalibrationMap, load_maps
from judge.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "calibration"
JUDGMENTS = FIXTURES / "judgments.jsonl"
HUMAN = FIXTURES / "human_labels.csv"
CHROMIUM = Path("/usr/bin/chromium")


def run_cli(*args):
    return main(["calibrate", *map(str, args)])


def test_help_teaches_with_an_example(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["calibrate", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert "judge calibrate --judgments" in text and "--score-column rouge-1" in text


def test_end_to_end_writes_tables_and_report(tmp_path, capsys):
    out = tmp_path / "out"
    code = run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 200, "--seed", 3,
                   "--output-dir", out, "--report", tmp_path / "report.html", "--fit-map", tmp_path / "map.json")
    assert code == 0
    printed = capsys.readouterr().out
    for heading in ("Correlation, system level", "Correlation, summary level", "Correlation, item level",
                    "Human ceiling", "Coverage", "Labels, on_topic", "Pairwise, clarity"):
        assert heading in printed
    correlations = pd.read_csv(out / "correlations.csv")
    assert {"criterion", "level", "statistic", "value", "ci_low", "ci_high", "p_value", "n_used",
            "n_skipped"} <= set(correlations.columns)
    assert len(correlations) == 2 * 3 * 3  # 2 Likert criteria x 3 levels x 3 statistics
    assert (correlations.ci_low <= correlations.value + 1e-9).all()
    assert correlations.loc[correlations.level == "summary", "p_value"].isna().all()
    agreement = pd.read_csv(out / "agreement.csv")
    assert {"criterion", "statistic", "value", "n"} <= set(agreement.columns)
    assert "kappa_quadratic" in set(agreement.statistic) and "alpha_interval_humans" in set(agreement.statistic)
    coverage = pd.read_csv(out / "coverage.csv").set_index("criterion")
    # Invented fixture: one N/A (clarity) and one failure (accuracy) out of 32 judgments each.
    assert coverage.loc["clarity", "judge_na"] == 1 and coverage.loc["clarity", "pairs_used"] == 31
    assert coverage.loc["accuracy", "judge_failed"] == 1 and coverage.loc["accuracy", "pairs_used"] == 31
    assert set(load_maps(tmp_path / "map.json")) == {"accuracy", "clarity"}
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") >= 4


def test_fitted_map_applies_to_new_judgments(tmp_path, capsys):
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 0, "--fit-map",
                   tmp_path / "map.json") == 0
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 0, "--apply-map",
                   tmp_path / "map.json", "--output-dir", tmp_path / "out") == 0
    calibrated = pd.read_csv(tmp_path / "out" / "calibrated_scores.csv").dropna(subset=["score_raw"])
    maps = load_maps(tmp_path / "map.json")
    for criterion, part in calibrated.groupby("criterion"):
        if criterion in maps:
            np.testing.assert_allclose(part.score, maps[criterion].predict(part.score_raw))


def test_wide_score_csv_with_score_column(tmp_path, capsys):
    judge = load_judge_scores(JUDGMENTS)
    wide = judge[judge.criterion == "clarity"].dropna(subset=["score"])
    wide[["item_id", "system"]].assign(metric=wide.score.to_numpy()).rename(columns={"item_id": "id"}).to_csv(
        tmp_path / "metric.csv", index=False)
    assert run_cli("--judgments", tmp_path / "metric.csv", "--score-column", "metric", "--human", HUMAN,
                   "--criteria", "clarity,accuracy", "--bootstrap", 0, "--output-dir", tmp_path / "o") == 0
    table = pd.read_csv(tmp_path / "o" / "correlations.csv")
    assert set(table.criterion) == {"clarity", "accuracy"}  # one column applied to every criterion


@pytest.mark.parametrize("content, expected", [
    ('{"id": "x", "system": "s", "criterion": "clarity", "score": 3}\n{"id": "y", "system": ', "bad.jsonl:2: "),
    ('{"id": "x", "system": "s", "criterion": "clarity", "score": "high"}\n', "bad.jsonl:1: not a judgment: field 'score'"),
    ('{"system": "s", "criterion": "clarity", "score": 3}\n', "bad.jsonl:1: not a judgment: field 'id'"),
])
def test_bad_judgments_give_a_clear_error(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert run_cli("--judgments", bad, "--human", HUMAN) == 2
    error = capsys.readouterr().err
    last = error.strip().splitlines()[-1]
    assert last.startswith("judge calibrate: error: ") and expected in last and "Traceback" not in error


def test_bad_human_file_and_unknown_criterion(tmp_path, capsys):
    bad = tmp_path / "labels.csv"
    bad.write_text("item_id,system,rater,criterion,score\na,b,c,d,1\n")
    assert run_cli("--judgments", JUDGMENTS, "--human", bad) == 2
    assert "missing column(s) annotator" in capsys.readouterr().err
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--criteria", "nonsense") == 2
    assert "no human labels for nonsense" in capsys.readouterr().err
    assert run_cli("--judgments", tmp_path / "absent.jsonl", "--human", HUMAN) == 2
    assert "no such file" in capsys.readouterr().err


def test_map_is_monotone_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    judge = rng.uniform(1, 5, 200)
    human = np.clip(1 + 0.8 * (judge - 1) + rng.normal(scale=0.5, size=200), 1, 5)
    mapping = IsotonicCalibrationMap().fit(judge, human)
    grid = np.linspace(0, 6, 50)  # beyond the fitted range on both sides: clipped
    predicted = mapping.predict(grid)
    assert np.all(np.diff(predicted) >= 0)
    assert predicted[0] == mapping.predict([judge.min()])[0] and predicted[-1] == mapping.predict([judge.max()])[0]
    mapping.save(tmp_path / "m.json")
    np.testing.assert_allclose(IsotonicCalibrationMap.load(tmp_path / "m.json").predict(grid), predicted)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(CalibrationError, match=r"broken.json:1: invalid JSON"):
        IsotonicCalibrationMap.load(tmp_path / "broken.json")


def _judge_rows(rows):
    return pd.DataFrame(rows, columns=["item_id", "system", "criterion", "score", "label", "status"])


def _human_rows(rows):
    return pd.DataFrame(rows, columns=["item_id", "system", "annotator", "criterion", "score", "label"])


def test_label_agreement_on_a_handmade_example():
    judge = _judge_rows([("i1", "s", "topic", None, "yes", "label"), ("i2", "s", "topic", None, "no", "label"),
                         ("i3", "s", "topic", None, "yes", "label"), ("i4", "s", "topic", None, None, "abstain"),
                         ("i5", "s", "topic", None, "no", "label")])
    human = _human_rows([(f"i{i}", "s", a, "topic", None, label) for i, labels in
                         enumerate([["yes", "yes", "no"], ["no", "no", "no"], ["no", "no", "yes"],
                                    ["yes", "yes", "yes"], ["no", "yes", None]], start=1)
                         for a, label in zip("abc", labels) if label])
    result = label_agreement(judge, human, "topic")
    assert (result["n"], result["abstained"], result["human_undecided"]) == (3, 1, 1)
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["confusion"].loc["no", "yes"] == 1 and result["confusion"].loc["yes", "yes"] == 1


def test_pairwise_agreement_with_and_without_ties():
    judge = _judge_rows([("i1", "A|B", "pref", None, "1", "label"), ("i2", "A|B", "pref", None, "2", "label"),
                         ("i3", "A|B", "pref", None, "0", "label"), ("i4", "A|B", "pref", None, "1", "label")])
    scores = {"i1": (5, 3), "i2": (4, 4), "i3": (2, 4), "i4": (3, 4)}  # human verdicts 1, 0, 2, 2
    human = _human_rows([(i, system, "a", "pref", value, None) for i, (a, b) in scores.items()
                         for system, value in (("A", a), ("B", b))])
    result = pairwise_agreement(judge, human, "pref")
    assert result["n"] == 4 and result["agreement_with_ties"] == pytest.approx(1 / 4)
    assert result["n_without_ties"] == 2 and result["agreement_without_ties"] == pytest.approx(1 / 2)


def test_human_loader_rejects_duplicates(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("item_id,system,annotator,criterion,score\na,s,r,c,1\na,s,r,c,2\n")
    with pytest.raises(CalibrationError, match="dup.csv:3: duplicate"):
        load_human_labels(path)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser check needs Debian's chromium at /usr/bin/chromium")
def test_report_renders_every_image_in_a_headless_browser(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 100, "--report", report) == 0
    page = report.read_text(encoding="utf-8")
    total = page.count("<img")
    assert total >= 4
    # A marker the browser fills in once the page has loaded: images that decoded / images present.
    probe = ('<script>window.addEventListener("load",function(){var i=[].slice.call(document.images);'
             'document.body.setAttribute("data-images-rendered",'
             'i.filter(function(x){return x.complete&&x.naturalWidth>0}).length+"/"+i.length)});</script>')
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    profile = tmp_path / "profile"
    result = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    assert "<h1>Judge calibration report</h1>" in result.stdout, result.stderr[-2000:]
    assert f'data-images-rendered="{total}/{total}"' in result.stdout
