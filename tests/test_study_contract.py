"""The study loop's contracts: a plan cannot be rewritten or mismatched, every label is checked, nothing is
overwritten, and `screen()` / `estimate()` are functions the CLI only wraps.

Bad inputs are one table: each row a mistake a user could make, the message expected, exit code 2, and every file
in the working folder byte-identical afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.errors import CalibrationError
from calibration.io import load_human_labels, load_judge_scores
from calibration.study.estimate import estimate, separated
from calibration.study.screen import screen
from calibration.study.systems import systems_table
from judge.cli import main

ITEMS = [f"d{n:02d}" for n in range(1, 21)]
SYSTEMS = ("alpha", "beta", "gamma")
CRITERIA = ("coherence", "fluency")  # dialsummeval's: Likert 1-5


def _judge_score(i, s, c):
    return float(min(5.0, max(1.0, 2 + (i * 7 + c * 3) % 3 + (1 - s) * 0.5 + ((i * s) % 2) * 0.5)))


def _human_score(i, s, c, a):
    return int(min(5, max(1, round(_judge_score(i, s, c) + (a - 0.5) * ((i + s) % 3 - 1)))))


def judgment_records(model="toy-model", rubric="dialsummeval@1"):
    return [{"id": item, "system": system, "criterion": criterion, "score": _judge_score(i, s, c),
             "rubric": rubric, "model": model}
            for i, item in enumerate(ITEMS) for s, system in enumerate(SYSTEMS)
            for c, criterion in enumerate(CRITERIA)]


def label_rows(items=ITEMS[:12]):
    return [[item, system, f"ann{a}", criterion, str(_human_score(ITEMS.index(item), s, c, a))]
            for item in items for s, system in enumerate(SYSTEMS) for c, criterion in enumerate(CRITERIA)
            for a in (0, 1)]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_labels(path: Path, rows) -> Path:
    path.write_text("item_id,system,annotator,criterion,score\n" + "".join(",".join(r) + "\n" for r in rows),
                    encoding="utf-8")
    return path


@pytest.fixture()
def study(tmp_path):
    """judgments, labels, and a plan of 12 dialogues (8 random) made by `judge screen` from them."""
    judgments = write_jsonl(tmp_path / "judgments.jsonl", judgment_records())
    plan = tmp_path / "plan"
    assert main(["screen", "--judgments", str(judgments), "--budget", "12", "--random-share", "0.67",
                 "--bootstrap", "50", "--output-dir", str(plan)]) == 0
    planned = pd.read_csv(plan / "plan.csv", dtype=str)["item_id"].tolist()
    labels = write_labels(tmp_path / "labels.csv", label_rows(planned))
    return {"dir": tmp_path, "judgments": judgments, "labels": labels, "plan": plan, "planned": planned}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- bad inputs: one row each ---------------------------------------------------------------------------------------


def _spoil_labels(replace):
    def spoil(s):
        rows = label_rows(s["planned"])
        rows = replace(rows)
        write_labels(s["labels"], rows)
        return []
    return spoil


def _set(n, column, value):
    def replace(rows):
        rows[n][column] = value
        return rows
    return replace


def _metric_csv(s):
    rows = [r for r in judgment_records() if r["score"] is not None]
    table = s["dir"] / "metric.csv"
    table.write_text("item_id,system,criterion,score\n" + "".join(
        f"{r['id']},{r['system']},{r['criterion']},{r['score']}\n" for r in rows), encoding="utf-8")
    return ["--judgments", str(table)]


def _unknown_rubric(s):
    records = judgment_records()
    for record in records:
        record["rubric"] = "house_style@2"
    write_jsonl(s["judgments"], records)
    return []


def _mixed_judges(s):
    records = judgment_records()
    for record in records[::7]:
        record["model"] = "another-model"
    write_jsonl(s["judgments"], records)
    return []


def _two_rubrics(s):
    records = judgment_records()
    records[5]["rubric"] = "call_centre_fr@1"
    write_jsonl(s["judgments"], records)
    return []


def _edit_plan(s):
    text = (s["plan"] / "plan.csv").read_text()
    first_random = next(line for line in text.splitlines() if ",random," in line)
    (s["plan"] / "plan.csv").write_text(text.replace(first_random, first_random.replace(",random,", ",targeted,")))
    return []


def _other_key(s):
    key = s["dir"] / "key.json"
    key.write_text(json.dumps({"format": "judge-annotation-key", "plan": {"sha256": "0" * 64}, "tasks": []}))
    return ["--key", str(key)]


def _key_without_plan(s):
    key = s["dir"] / "key.json"
    key.write_text(json.dumps({"format": "judge-annotation-key", "tasks": []}))
    return ["--key", str(key)]


def _key_parts_differ(s):
    from judge.resources import file_sha256

    plan = pd.read_csv(s["plan"] / "plan.csv", dtype=str)
    tasks = [{"task_id": f"t{n}", "kind": "item", "item_id": row.item_id,
              "part": "targeted" if row.part == "random" else "random"} for n, row in enumerate(plan.itertuples())]
    key = s["dir"] / "key.json"
    key.write_text(json.dumps({"format": "judge-annotation-key", "plan": {"sha256": file_sha256(s["plan"] /
                                                                                                  "plan.csv")},
                               "tasks": tasks}))
    return ["--key", str(key)]


def _judgments_changed(s):
    with s["judgments"].open("a") as out:
        out.write("\n")
    return []


def _targeted_only_plan(s):
    """A plan of the same dialogues, all targeted (--random-share 0): the labels are a sample of nothing."""
    plan = s["dir"] / "targeted_plan"
    result = screen(s["judgments"], budget=12, random_share=0.0, bootstrap=40)
    result.write(plan)
    rows = label_rows([i for i in s["planned"] if i in set(result.plan["item_id"])])
    write_labels(s["labels"], rows)
    return ["--plan", str(plan)]


ESTIMATE_BAD = [
    # (case, spoil(study) -> extra flags, expected message)
    ("a 7 on a 1-5 rubric", _spoil_labels(_set(3, 4, "7")),
     "labels.csv:5: score 7 of criterion 'fluency' is off the scale of rubric dialsummeval@1"),
    ("a 99 on a 1-5 rubric", _spoil_labels(_set(0, 4, "99")), "labels.csv:2: score 99"),
    ("a criterion no judgment has", _spoil_labels(_set(2, 3, "Clarity")),
     "labels.csv:4: criterion 'Clarity' matches no judged criterion; the judgments have coherence, fluency"),
    ("a system no judgment has", _spoil_labels(_set(0, 1, "delta")), "labels.csv:2: system 'delta' is not in the "
                                                                      "judgments"),
    ("a dialogue not judged", _spoil_labels(_set(0, 0, "d99")), "labels.csv:2: item 'd99' is not in the judgments"),
    ("a plan with no random part", _targeted_only_plan, "the plan has no random part"),
    ("a file of the user's in --output-dir", lambda s: [], "estimates.csv: exists and was not written by this tool"),
    ("a label off the plan", None, None),  # the dialogue depends on the plan: built in the test
    ("a CSV of metric scores, no --scale", _metric_csv,
     "the judgments name no rubric, so the human scores' scale is unknown: give --scale"),
    ("a rubric found nowhere, no --scale", _unknown_rubric,
     "the judgments name rubric house_style@2, which is not bundled nor in"),
    ("two models in one file", _mixed_judges, "judgments of 2 judges in one file"),
    ("two rubrics in one file", _two_rubrics, "judgments of 2 judges in one file"),
    ("an edited plan", _edit_plan, "plan.csv: differs from the plan `judge screen` wrote"),
    ("judgments other than the plan's", _judgments_changed, "not the judgments the plan was made from"),
    ("a key from another plan", _other_key, "the sheets were exported from another plan"),
    ("a key exported without --plan", _key_without_plan, "the key records no plan"),
    ("a key whose parts differ from the plan", _key_parts_differ, "in the key and"),
]


@pytest.mark.parametrize("case, spoil, message", ESTIMATE_BAD, ids=[row[0] for row in ESTIMATE_BAD])
def test_estimate_refuses_in_one_line_and_writes_nothing(study, capsys, case, spoil, message):
    if message is None:  # a label on a dialogue outside the plan
        planned = set(study["planned"])
        outside = next(i for i in ITEMS if i not in planned)
        rows = label_rows(study["planned"]) + [[outside, "alpha", "ann0", "coherence", "3"]]
        write_labels(study["labels"], rows)
        extra, message = [], f"dialogue '{outside}' is not in the plan"
    else:
        extra = spoil(study)
    out = study["dir"] / "out"
    out.mkdir()
    (out / "estimates.csv").write_text("mine\n")
    before = snapshot(study["dir"])
    capsys.readouterr()
    code = main(["estimate", "--judgments", str(study["judgments"]), "--human", str(study["labels"]), "--plan",
                 str(study["plan"]), *extra, "--output-dir", str(out), "--report", str(study["dir"] / "r.html")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("judge estimate: error: ") and message in err[-1], err[-1]
    assert "Traceback" not in "\n".join(err)
    assert snapshot(study["dir"]) == before


SCREEN_BAD = [
    ("--budget 1 leaves no random dialogue", ["--budget", "1"], "leaves no dialogue drawn at random"),
    ("a judgments budget that rounds the random part to zero",
     ["--budget", "3", "--budget-unit", "judgments", "--random-share", "0.3"], "leaves no dialogue drawn at random"),
    ("a 7 on a 1-5 rubric in the pilot", ["--human", "{bad_pilot}", "--budget", "12"],
     "pilot.csv:3: score 7 of criterion 'coherence' is off the scale"),
    ("--scale bounds a pilot without a rubric", ["--human", "{bad_pilot}", "--scale", "1,3"],
     "off the scale of --scale 1,3"),
    ("a pilot criterion no judgment has", ["--human", "{clarity_pilot}"], "criterion 'Clarity' matches no judged"),
    ("--output-dir holds a plan", ["--budget", "12", "--output-dir", "{plan}"],
     "--output-dir holds a plan already; a plan is never replaced"),
    ("--output-dir holds a plan, no budget", ["--output-dir", "{plan}"], "a plan is never replaced"),
    ("--report over an input", ["--report", "{judgments}"], "would replace an input"),
    ("--report over a foreign file", ["--report", "{foreign}"], "was not written by this tool"),
    ("--report over the plan screen wrote", ["--report", "{plan}/plan.csv"],
     "holds a table, plan or key this tool wrote"),
]


@pytest.mark.parametrize("case, flags, message", SCREEN_BAD, ids=[row[0] for row in SCREEN_BAD])
def test_screen_refuses_in_one_line_and_writes_nothing(study, capsys, case, flags, message):
    rows = label_rows(study["planned"][:4])
    rows[1][4] = "7"
    write_labels(study["dir"] / "pilot.csv", rows)
    clarity = label_rows(study["planned"][:4])
    clarity[0][3] = "Clarity"
    write_labels(study["dir"] / "clarity.csv", clarity)
    (study["dir"] / "foreign.html").write_text("<p>my notes</p>")
    names = {"bad_pilot": study["dir"] / "pilot.csv", "clarity_pilot": study["dir"] / "clarity.csv",
             "plan": study["plan"], "judgments": study["judgments"], "foreign": study["dir"] / "foreign.html"}
    before = snapshot(study["dir"])
    capsys.readouterr()
    code = main(["screen", "--judgments", str(study["judgments"]), "--bootstrap", "50",
                 *[flag.format(**names) for flag in flags]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("judge screen: error: ") and message in err[-1], err[-1]
    assert snapshot(study["dir"]) == before


def test_calibrate_refuses_a_file_of_two_judges(study, capsys):
    _mixed_judges(study)
    code = main(["calibrate", "--judgments", str(study["judgments"]), "--human", str(study["labels"])])
    assert code == 2
    assert "judgments of 2 judges in one file" in capsys.readouterr().err


# -- new behaviour --------------------------------------------------------------------------------------------------


def test_the_plan_records_its_digest_and_a_random_share_of_zero_warns(study, capsys):
    from judge.resources import file_sha256

    info = json.loads((study["plan"] / "plan.json").read_text())
    assert info["plan_sha256"] == file_sha256(study["plan"] / "plan.csv")
    result = screen(study["judgments"], budget=6, random_share=0.0, bootstrap=40)
    assert (result.plan["part"] == "targeted").all()
    assert any("no random part" in w and "will refuse it" in w for w in result.warnings)
    small = screen(study["judgments"], budget=4, bootstrap=40)
    assert any("random part has 2 dialogues" in w for w in small.warnings)


def test_estimate_accepts_the_key_exported_from_its_plan(study, tmp_path, capsys):
    """export --plan records the plan's digest and each task's part; estimate --key holds the plan to it."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": item, "system": s, "dialogue": f"A: hello {item}",
                                         "candidate": f"summary {s} of {item}"}) + "\n"
                             for item in ITEMS for s in SYSTEMS))
    assert main(["export", "--rubric", "dialsummeval", "--input", str(items), "--plan", str(study["plan"]),
                 "--format", "csv", "--output", str(tmp_path / "sheets"), "--no-qualification"]) == 0
    key = json.loads((tmp_path / "sheets" / "key.json").read_text())
    plan = pd.read_csv(study["plan"] / "plan.csv", dtype=str)
    from judge.resources import file_sha256

    assert key["plan"]["sha256"] == file_sha256(study["plan"] / "plan.csv")
    parts = {t["item_id"]: t["part"] for t in key["tasks"] if t["kind"] == "item"}
    assert parts == dict(zip(plan.item_id, plan.part))
    result = estimate(study["judgments"], study["labels"], plan=study["plan"], key=tmp_path / "sheets" / "key.json")
    assert result.random_source == "plan" and result.n_random == (plan.part == "random").sum()
    # An edited plan is refused by export too.
    (study["plan"] / "plan.csv").write_text((study["plan"] / "plan.csv").read_text().replace("random", "targeted", 1))
    assert main(["export", "--rubric", "dialsummeval", "--input", str(items), "--plan", str(study["plan"]),
                 "--format", "csv", "--output", str(tmp_path / "sheets2")]) == 2
    assert "differs from the plan `judge screen` wrote" in capsys.readouterr().err


def test_na_from_import_is_read_as_not_applicable(study):
    rows = label_rows(study["planned"])
    rows[0][4] = rows[1][4] = "N/A"  # both annotators of d?/alpha/coherence: the criterion does not apply there
    write_labels(study["labels"], rows)
    labels = load_human_labels(study["labels"])
    assert labels["na"].sum() == 2 and labels.loc[labels["na"], "score"].isna().all()
    result = estimate(study["judgments"], study["labels"], plan=study["plan"])
    assert result.n_human_na == 1
    as_frame = estimate(load_judge_scores(study["judgments"]), labels)  # a DataFrame keeps its N/A
    assert as_frame.n_human_na == 1
    assert any("called N/A" in note for note in result.notes)
    baseline = estimate(study["judgments"], write_labels(study["dir"] / "full.csv", label_rows(study["planned"])),
                        plan=study["plan"])
    first = (result.estimates["criterion"] == "coherence") & (result.estimates["system"] == "alpha")
    # The N/A cell leaves the population: one dialogue fewer for alpha's coherence.
    assert result.estimates.loc[first, "n_dialogues"].item() == baseline.estimates.loc[first, "n_dialogues"].item() - 1
    # calibrate reads the same file.
    assert main(["calibrate", "--judgments", str(study["judgments"]), "--human", str(study["labels"])]) == 0


def test_labels_on_cells_without_a_judgment_line_count_as_failed_judgments(study):
    records = [r for r in judgment_records()
               if not (r["id"] == study["planned"][0] and r["system"] == "beta" and r["criterion"] == "fluency")]
    write_jsonl(study["judgments"], records)
    # The plan names the old judgments' digest: estimate without it (every label taken as random).
    result = estimate(study["judgments"], study["labels"])
    assert result.n_imputed == 1
    assert any("1 labelled cell(s) have no judgment line" in w for w in result.warnings)
    row = result.estimates[(result.estimates.criterion == "fluency") & (result.estimates.system == "beta")]
    assert row["n_dialogues"].item() == len(ITEMS)  # in the population
    assert row["n_judged"].item() == len(ITEMS) - 1  # but not judged


def test_screen_and_estimate_take_dataframes_and_agree_with_paths(study):
    judge, labels = load_judge_scores(study["judgments"]), load_human_labels(study["labels"])
    from_paths = estimate(study["judgments"], study["labels"])
    from_frames = estimate(judge, labels)
    pd.testing.assert_frame_equal(from_paths.estimates, from_frames.estimates)
    assert from_paths.text() == from_frames.text() == str(from_frames)
    assert from_frames.text().startswith(f"Random sample: no --plan given, so all {len(study['planned'])} labelled "
                                         "dialogues are taken as a uniformly random sample")
    assert set(from_paths.files()) == {"estimates.csv", "differences.csv", "targeted.csv", "summary.json"}
    a = screen(study["judgments"], bootstrap=40, budget=6)
    b = screen(judge, bootstrap=40, budget=6)
    pd.testing.assert_frame_equal(a.systems, b.systems)
    assert a.plan.equals(b.plan)
    with pytest.raises(CalibrationError, match="--budget must be a positive whole number"):
        screen(judge, budget=0)
    with pytest.raises(CalibrationError, match="--random-share must be between 0 and 1"):
        screen(judge, budget=4, random_share=1.5)
    with pytest.raises(CalibrationError, match="--confidence must be between 0 and 1"):
        estimate(judge, labels, confidence=95)
    spoiled = labels.copy()
    spoiled.loc[3, "score"] = 7.0
    with pytest.raises(CalibrationError, match="off the scale of rubric dialsummeval@1"):
        estimate(judge, spoiled)


def test_estimate_without_plan_keeps_the_plan_its_report_would_replace(study, capsys):
    # Without --plan the plan is not an input: only the kind of file protects it (a report replaces only a page).
    before = snapshot(study["dir"])
    capsys.readouterr()
    assert main(["estimate", "--judgments", str(study["judgments"]), "--human", str(study["labels"]),
                 "--report", str(study["plan"] / "plan.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "plan.csv: holds a table, plan or key this tool wrote" in err[-1], err[-1]
    assert snapshot(study["dir"]) == before


def test_reruns_replace_our_files_and_say_so_and_an_edited_file_is_kept(study, capsys):
    out, report = study["dir"] / "est", study["dir"] / "est.html"
    args = ["estimate", "--judgments", str(study["judgments"]), "--human", str(study["labels"]), "--plan",
            str(study["plan"]), "--output-dir", str(out), "--report", str(report)]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "replaced (written by an earlier run):" in err and "estimates.csv" in err and "est.html" in err
    (out / "summary.json").write_text((out / "summary.json").read_text() + " ")  # edited by hand
    before = snapshot(study["dir"])
    assert main(args) == 2
    assert "summary.json: exists and was not written by this tool" in capsys.readouterr().err
    assert snapshot(study["dir"]) == before


def test_identical_systems_are_tied_not_separated():
    rows = [{"item_id": f"d{i}", "system": s, "criterion": "c", "score": 3.0, "status": "ok"}
            for i in range(8) for s in ("a", "b")]
    rows += [{"item_id": f"d{i}", "system": "z", "criterion": "c", "score": 1.0 + i % 2, "status": "ok"}
             for i in range(8)]
    systems, _, _, _ = systems_table(pd.DataFrame(rows), ["c"], n_resamples=200)
    tied = dict(zip(systems.system, systems.tied_with_best))
    assert tied["a"] and tied["b"] and not tied["z"]
    assert systems.loc[systems.system == "b", "p_holm"].item() == 1.0


def test_separated_needs_two_finite_distinct_bounds():
    frame = pd.DataFrame({"ci_low": [0.2, np.nan, 1.0, -0.5, 0.1], "ci_high": [0.9, 0.9, 1.0, -0.1, np.inf]})
    assert separated(frame).tolist() == [True, False, False, True, False]


def test_pairwise_files_are_screened_as_win_shares(tmp_path, capsys):
    records = [{"id": f"d{i}", "system": "a|b", "system_1": "a", "system_2": "b", "criterion": "overall",
                "score": None, "label": "1" if i % 4 else "2", "rubric": "pairwise_summary@1", "model": "m"}
               for i in range(12)]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    assert main(["screen", "--judgments", str(path), "--bootstrap", "50"]) == 0
    captured = capsys.readouterr()
    assert "2 systems" in captured.err  # the end line counts systems, not pairs
    unusable = write_jsonl(tmp_path / "nolabel.jsonl", [dict(r, label=None, error="x") for r in records])
    assert main(["screen", "--judgments", str(unusable), "--bootstrap", "50"]) == 2
    assert "no numeric judge score to screen" in capsys.readouterr().err


def test_screen_reruns_replace_its_tables_and_say_so(study, capsys):
    out = study["dir"] / "tables"
    args = ["screen", "--judgments", str(study["judgments"]), "--bootstrap", "40", "--output-dir", str(out),
            "--report", str(study["dir"] / "screen.html")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "replaced (written by an earlier run):" in err and "systems.csv" in err and "screen.html" in err
    (out / "power.csv").write_text("edited by hand\n")
    before = snapshot(study["dir"])
    assert main(args) == 2
    assert "power.csv: exists and was not written by this tool" in capsys.readouterr().err
    assert snapshot(study["dir"]) == before


API_BAD = [
    # (verb, keyword options, the CLI's message)
    ("screen", {"budget": 0}, "--budget must be a positive whole number"),
    ("screen", {"budget": 2.5}, "--budget must be a positive whole number"),
    ("screen", {"budget": 4, "budget_unit": "pages"}, "--budget-unit must be dialogues or judgments"),
    ("screen", {"random_share": -0.1}, "--random-share must be between 0 and 1"),
    ("screen", {"power": 1.0}, "--power must be between 0 and 1"),
    ("screen", {"bootstrap": 0}, "--bootstrap must be a whole number of at least 40, got 0"),
    ("screen", {"seed": "x"}, "--seed must be a whole number"),
    ("screen", {"budget": 1000}, "--budget 1000 dialogues is more than the data has"),
    ("screen", {"criteria": ["Clarity"]}, "--criteria: no judge scores for Clarity"),
    ("estimate", {"confidence": 1.0}, "--confidence must be between 0 and 1"),
    ("estimate", {"key": "key.json"}, "--key checks the labels against a plan: give --plan too"),
    ("estimate", {"scale": (5, 1)}, "--scale must be MIN,MAX with MIN < MAX"),
    ("estimate", {"scale": (1, 3)}, "off the scale of --scale 1,3"),
]


@pytest.mark.parametrize("verb, options, message", API_BAD, ids=[f"{r[0]} {r[1]}" for r in API_BAD])
def test_the_functions_check_every_option_with_the_clis_message(study, verb, options, message):
    judge = load_judge_scores(study["judgments"])
    with pytest.raises(CalibrationError) as caught:
        if verb == "screen":
            screen(judge, **options)
        else:
            estimate(judge, study["labels"], **options)
    assert message in str(caught.value)


@pytest.mark.parametrize("verb", ["estimate", "screen", "calibrate"])
def test_a_study_rubric_beside_the_judgments_checks_the_labels(tmp_path, capsys, verb):
    # examples/study names rubric toy@1, not bundled: its toy.yaml beside the judgments gives the 1-5 scale, so a
    # 99 is refused by its line in all three verbs (it once moved an estimate to 12.2 with a note).
    study = Path(__file__).resolve().parents[1] / "examples" / "study"
    labels = tmp_path / "labels.csv"
    lines = (study / "labels.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = ",".join(lines[3].split(",")[:4] + ["99\n"])
    labels.write_text("".join(lines), encoding="utf-8")
    flag = "--human"
    capsys.readouterr()
    assert main([verb, "--judgments", str(study / "judgments.jsonl"), flag, str(labels)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "labels.csv:4: score 99" in err and "rubric toy@1" in err, err


def test_every_table_of_an_estimate_with_a_plan_has_one_row_per_index_label(study):
    """The estimates, the differences and the targeted part's means as a script receives them: a RangeIndex (so
    .loc and joins work), the targeted table covering both criteria."""
    import pandas as pd

    result = estimate(study["judgments"], study["labels"], plan=study["plan"])
    assert len(result.targeted) > 1 and result.targeted["criterion"].nunique() >= 2
    for frame in (result.estimates, result.differences, result.targeted):
        assert isinstance(frame.index, pd.RangeIndex) and frame.index.equals(pd.RangeIndex(len(frame)))
