"""`judge calibrate` end to end on a small invented fixture, plus maps, labels, pairwise and error handling."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import browser_dom, needs_chromium

from calibration.agreement import label_agreement, pairwise_agreement
from calibration.errors import CalibrationError
from calibration.io import load_human_labels, load_judge_scores
from calibration.maps import IsotonicCalibrationMap, load_maps
from judge.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "calibration"
JUDGMENTS = FIXTURES / "judgments.jsonl"
HUMAN = FIXTURES / "human_labels.csv"


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
    system = correlations.level == "system"  # the fixture's few systems: no system-level interval, and why
    assert correlations.loc[system, "ci_low"].isna().all() and "systems: no system-level interval" in printed
    assert (correlations.loc[~system, "ci_low"] <= correlations.loc[~system, "value"] + 1e-9).all()
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
    ('{"id": "x", "system": "s", "criterion": "clarity", "score": "high"}\n',
     "bad.jsonl:1: not a judgment: field 'score'"),
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
    frame = pd.DataFrame(rows, columns=["item_id", "system", "criterion", "score", "label", "status"])
    pairs = frame["system"].str.partition("|")
    has_pair = frame["system"].str.contains("|", regex=False)
    return frame.assign(system_1=pairs[0].where(has_pair), system_2=pairs[2].where(has_pair))


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


@needs_chromium
def test_report_renders_every_image_in_a_headless_browser(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 100, "--report", report) == 0
    dom, total = browser_dom(report, tmp_path)
    assert total >= 4
    assert "<h1>Judge calibration report</h1>" in dom
    assert f'data-images-rendered="{total}/{total}"' in dom


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _write_csv(path, header, rows, bom=False):
    text = header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def test_report_names_model_rubric_files_and_date(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--bootstrap", 50, "--report", report) == 0
    page = report.read_text(encoding="utf-8")
    for text in ("toy-model", "toy@1", str(JUDGMENTS), str(HUMAN), "Date</dt>"):
        assert text in page
    assert re.search(r"<dd>\d{4}-\d\d-\d\d \d\d:\d\d UTC</dd>", page)
    # The ceiling table carries the judge's bootstrap CI, which the chart draws as error bars.
    assert "judge_ci_low" in page and "judge_ci_high" in page


def test_abstentions_are_counted_apart_on_both_sides(tmp_path, capsys):
    def row(item, system, label, **extra):
        return {"id": item, "system": system, "criterion": "appropriateness", "label": label,
                "score": {"appropriate": 1.0, "not appropriate": 0.0}.get(label), "rubric": "response_quality@1",
                "model": "toy-model", **extra}

    judgments = _write_jsonl(tmp_path / "j.jsonl", [
        row("d1", "alpha", "appropriate"), row("d1", "beta", "not appropriate"),
        row("d2", "alpha", "I don't know", abstained=True),
        row("d2", "beta", "I don't know"),  # an older file: no abstained flag, the rubric's abstaining label
        row("d3", "alpha", "appropriate"), row("d3", "beta", "appropriate")])
    humans = {("d1", "alpha"): ("appropriate", "appropriate"), ("d1", "beta"): ("not appropriate", "I don't know"),
              ("d2", "alpha"): ("appropriate", "appropriate"), ("d2", "beta"): ("appropriate", "not appropriate"),
              ("d3", "alpha"): ("I don't know", "I don't know"), ("d3", "beta"): ("not appropriate",) * 2}
    labels = _write_csv(tmp_path / "h.csv", "item_id,system,annotator,criterion,score",
                        [(i, s, f"ann{k}", "appropriateness", v) for (i, s), values in humans.items()
                         for k, v in enumerate(values)])
    assert run_cli("--judgments", judgments, "--human", labels, "--bootstrap", 0, "--output-dir", tmp_path / "o") == 0
    result = pd.read_csv(tmp_path / "o" / "label_agreement.csv").iloc[0]
    # Judge abstains on d2 (both rows); a human "I don't know" does not vote, so d1/beta has a majority and
    # d3/alpha has no human label at all. Left: d1/alpha agree, d1/beta agree, d3/beta disagrees.
    assert (result["abstained"], result["human_abstained"], result["n"]) == (2, 3, 3)
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert "human abstentions 3" in capsys.readouterr().out


def test_one_annotator_per_summary_is_read_and_says_what_it_cannot_do(tmp_path, capsys):
    rng = np.random.default_rng(1)
    items, systems = [f"d{i}" for i in range(6)], ["alpha", "beta", "gamma"]
    means = {(i, s): round(float(rng.uniform(1, 5)), 6) for i in items for s in systems}
    labels = _write_csv(tmp_path / "h.csv", "item_id,system,annotator,criterion,score",
                        [(i, s, "expert_mean", "coherence", v) for (i, s), v in means.items()])
    judgments = _write_jsonl(tmp_path / "j.jsonl", [
        {"id": i, "system": s, "criterion": "coherence", "score": float(round(v)), "rubric": "dialsummeval@1",
         "model": "m"} for (i, s), v in means.items()])
    code = run_cli("--judgments", judgments, "--human", labels, "--bootstrap", 40, "--output-dir", tmp_path / "o",
                   "--report", tmp_path / "r.html")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.count("coherence: needs >= 2 annotators") == 2  # the ceiling and alpha sections
    assert "needs &gt;= 2 annotators" in (tmp_path / "r.html").read_text()
    table = pd.read_csv(tmp_path / "o" / "correlations.csv").set_index(["level", "statistic"])
    judge = np.array([round(means[k]) for k in means], dtype=float)
    human = np.array(list(means.values()))
    assert table.loc[("item", "pearson"), "value"] == pytest.approx(np.corrcoef(judge, human)[0, 1])


def test_compare_without_bootstrap(tmp_path, capsys):
    judge = load_judge_scores(JUDGMENTS)
    numbers = judge[judge.criterion == "accuracy"].dropna(subset=["score"])
    other = _write_csv(tmp_path / "other.csv", "id,system,criterion,score",
                       [(r.item_id, r.system, "accuracy", 6 - r.score) for r in numbers.itertuples()])
    assert run_cli("--judgments", JUDGMENTS, "--human", HUMAN, "--compare", other, "--bootstrap", 0,
                   "--criteria", "accuracy", "--output-dir", tmp_path / "o") == 0
    comparison = pd.read_csv(tmp_path / "o" / "comparison.csv")
    assert comparison.ci_low.isna().all() and comparison.p_value.isna().all()
    np.testing.assert_allclose(comparison.difference, comparison.judge_a - comparison.judge_b)
    # The reversed judge correlates exactly as negatively at the item level (Pearson is sign-symmetric).
    item = comparison[(comparison.level == "item") & (comparison.statistic == "pearson")].iloc[0]
    assert item.judge_b == pytest.approx(-item.judge_a)


def test_pairs_are_read_from_system_1_and_system_2(tmp_path, capsys):
    records = [{"id": "d1", "system": "A vs B", "system_1": "A", "system_2": "B", "criterion": "pref", "label": "1"},
               {"id": "d2", "system": "A vs B", "system_1": "A", "system_2": "B", "criterion": "pref", "label": "1"},
               {"id": "d1", "system": "A|C", "criterion": "pref", "label": "2"}]  # an older file: split on "|"
    judgments = _write_jsonl(tmp_path / "j.jsonl", records)
    scores = {("d1", "A"): 5, ("d1", "B"): 3, ("d1", "C"): 4, ("d2", "A"): 2, ("d2", "B"): 4}
    labels = _write_csv(tmp_path / "h.csv", "item_id,system,annotator,criterion,score",
                        [(i, s, "ann1", "pref", v) for (i, s), v in scores.items()])
    assert run_cli("--judgments", judgments, "--human", labels, "--bootstrap", 0, "--output-dir", tmp_path / "o") == 0
    result = pd.read_csv(tmp_path / "o" / "pairwise_agreement.csv").iloc[0]
    # Humans: d1 A>B (1, agrees), d2 B>A (2, disagrees), d1 A>C (1, the judge said 2: disagrees).
    assert result["n"] == 3 and result["agreement_with_ties"] == pytest.approx(1 / 3)


def test_exit_1_when_a_criterion_has_nothing_to_report(tmp_path, capsys):
    records = [{"id": f"d{i}", "system": s, "criterion": c, "score": None if c == "fluency" else float(i % 5 + 1),
                "error": "timeout" if c == "fluency" else None}
               for i in range(4) for s in ("a", "b") for c in ("coherence", "fluency")]
    judgments = _write_jsonl(tmp_path / "j.jsonl", records)
    labels = _write_csv(tmp_path / "h.csv", "item_id,system,annotator,criterion,score",
                        [(f"d{i}", s, an, c, (i + len(an)) % 5 + 1) for i in range(4) for s in ("a", "b")
                         for an in ("x", "yy") for c in ("coherence", "fluency")])
    assert run_cli("--judgments", judgments, "--human", labels, "--bootstrap", 0) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("judge calibrate: calibrated 1 of 2 criteria") and "incomplete: no judge-human pair " \
        "for fluency" in last


def test_a_byte_order_mark_changes_nothing(tmp_path, capsys):
    plain = HUMAN.read_text(encoding="utf-8")
    (tmp_path / "bom.csv").write_text("\ufeff" + plain, encoding="utf-8")
    for name, labels in (("plain", HUMAN), ("bom", tmp_path / "bom.csv")):
        assert run_cli("--judgments", JUDGMENTS, "--human", labels, "--bootstrap", 0, "--output-dir",
                       tmp_path / name) == 0
    assert (tmp_path / "plain" / "correlations.csv").read_text() == (tmp_path / "bom" / "correlations.csv").read_text()


def test_the_verb_module_imports_nothing_heavy():
    code = ("import sys\nfrom judge.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'scipy', 'sklearn', 'matplotlib', 'numpy', 'krippendorff')"
            " if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stderr


def test_without_any_scale_the_observed_range_is_shown(tmp_path, capsys):
    judge = load_judge_scores(JUDGMENTS)
    scores = judge[judge.criterion == "accuracy"].dropna(subset=["score"])
    metric = _write_csv(tmp_path / "metric.csv", "id,system,criterion,score",
                        [(r.item_id, r.system, "accuracy", r.score) for r in scores.itertuples()])
    labels = HUMAN.read_text().splitlines()
    at = next(n for n, line in enumerate(labels) if ",accuracy," in line)
    labels[at] = labels[at].rsplit(",", 1)[0] + ",99"
    (tmp_path / "h.csv").write_text("\n".join(labels) + "\n")
    assert run_cli("--judgments", metric, "--human", tmp_path / "h.csv", "--bootstrap", 0) == 0
    assert "note: no scale known for accuracy (1 to 99)" in capsys.readouterr().err
    assert run_cli("--judgments", metric, "--human", tmp_path / "h.csv", "--scale", "1,5") == 2
    assert f"h.csv:{at + 1}: score 99 of criterion 'accuracy' is off the scale of --scale 1,5" in \
        capsys.readouterr().err
