"""`judge estimate`'s verb layer (calibration.study.estimate): what it prints where no interval is given, and a
result built by hand. Written after fresh draws of benchmarks/mutation.py left survivors here (estimating.py:42,
:375)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibration.study.estimate import EstimateResult
from calibration.study.estimate_tables import interval_note


def _judge(dialogues=12, seed=5):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"item_id": f"d{i:02d}", "system": s, "criterion": "c", "status": "ok", "label": None,
                          "score": float(np.clip(np.round(3 + (s == "a") + rng.normal(0, 0.8)), 1, 5))}
                         for i in range(dialogues) for s in ("a", "b")])


def _labels(judge, items):
    part = judge[judge["item_id"].isin(items)]
    return pd.DataFrame({"item_id": part["item_id"], "system": part["system"], "annotator": "ann",
                         "criterion": part["criterion"], "score": part["score"].to_numpy()})


def test_a_table_row_without_an_interval_prints_why_in_its_note():
    """Two labelled dialogues: no interval can hold, and the printed tables (per system and per difference) say so
    in their note column, in estimate.py's own words (interval_note), not a blank."""
    from calibration.study.estimate import estimate

    judge = _judge()
    result = estimate(judge, _labels(judge, ["d00", "d01"]), scale=(1, 5))
    assert result.estimates["ci_low"].isna().all()
    text = result.text()
    per_system, per_difference = text.split("Paired differences")
    why = interval_note("few", 2)
    assert why.split(":")[0] in per_system and why.split(":")[0] in per_difference
    # one row per system marks the note, printed once as a footnote under the table
    assert per_system.count("[1] 2 labelled dialogues: an interval needs") == 1 and per_system.count(" [1]") == 2


def test_a_result_built_by_hand_claims_no_imputed_or_na_cells():
    """EstimateResult is public: built from the tables alone, it says no labelled cell lacked a judgment and none
    was called N/A, in its summary and in what it prints."""
    from calibration.study.estimate import estimate

    judge = _judge()
    tables = estimate(judge, _labels(judge, [f"d{i:02d}" for i in range(12)]), scale=(1, 5))
    bare = EstimateResult(tables.estimates, tables.differences, tables.targeted, tables.criteria, tables.confidence,
                          tables.random_source, tables.n_random, tables.cleaned, list(tables.notes))
    summary = bare.summary()
    assert summary["labelled_cells_without_judgment"] == 0 and summary["cells_humans_called_na"] == 0
    assert "had no judgment line" not in bare.text()
    assert bare.text().split("Per system")[1] == tables.text().split("Per system")[1]


def test_a_difference_is_separated_only_by_two_finite_distinct_bounds_that_exclude_zero():
    """separated(): a row per case, the verdict a reader would give."""
    from calibration.study.estimate import separated

    nan = np.nan
    rows = [  # ci_low, ci_high, separated
        (0.1, 0.5, True), (-0.5, -0.1, True), (-0.1, 0.5, False), (0.0, 0.5, False), (-0.5, 0.0, False),
        (0.3, 0.3, False),  # zero width: labels without variance decide nothing
        (nan, 0.5, False), (0.1, nan, False), (0.1, np.inf, False), (-np.inf, -0.1, False),
    ]
    frame = pd.DataFrame(rows, columns=["ci_low", "ci_high", "expected"])
    assert separated(frame).tolist() == frame["expected"].tolist()


@pytest.mark.parametrize("probabilities, weighted", [
    (["0.25", "0.25", "0.25"], False),            # a uniform draw recorded
    (["0.25", "0.25000000000001", "0.25"], False),  # equal up to rounding
    (["0.2", "0.25", "0.3"], True),
    (["0.01", "0.01000000001", "0.01"], True),  # small probabilities 1e-9 apart: more than rounding, relative to them
])
def test_only_a_plan_with_unequal_probabilities_weighs_the_labels(probabilities, weighted, tmp_path):
    from calibration.study.estimate import plan_inclusion

    rows = "".join(f"d{k},random,{p}\n" for k, p in enumerate(probabilities)) + "d9,targeted,\n"
    (tmp_path / "plan.csv").write_text("item_id,part,inclusion_probability\n" + rows, encoding="utf-8")
    (tmp_path / "plan.json").write_text('{"version": 1}', encoding="utf-8")
    got = plan_inclusion(tmp_path)
    if weighted:
        assert got == {f"d{k}": float(p) for k, p in enumerate(probabilities)}
    else:
        assert got is None
    (tmp_path / "plan.csv").write_text("item_id,part\nd0,random\n", encoding="utf-8")
    assert plan_inclusion(tmp_path) is None


def test_the_estimate_files_read_back_as_the_tables_with_no_index_column():
    import io
    import json

    from calibration.study.estimate import estimate

    judge = _judge()
    result = estimate(judge, _labels(judge, [f"d{i:02d}" for i in range(12)]), scale=(1, 5))
    files = result.files()
    for name, table in (("estimates.csv", result.estimates), ("differences.csv", result.differences)):
        back = pd.read_csv(io.StringIO(files[name]))
        assert back.columns.tolist() == table.columns.tolist() and len(back) == len(table), name
    assert json.loads(files["summary.json"])["criteria"] == ["c"]


@pytest.mark.parametrize("pairwise", [False, True])
def test_the_files_are_the_tables_without_an_index_and_the_summary_as_json(pairwise):
    """What --output-dir holds: each CSV reads back as its table (no index column: a column of row numbers would
    shift every column a script reads), summary.json is summary() as JSON indented 2 with a final newline, as
    every verb writes it."""
    import io
    import json

    import calibration

    if pairwise:
        result = calibration.estimate("examples/pairwise/judgments.jsonl", "examples/pairwise/labels.csv",
                                      baseline="lead-3", margin=0.1)
        tables = {"estimates.csv": result.estimates, "ranking.csv": result.ranking}
    else:
        result = calibration.estimate("examples/study/judgments.jsonl", "examples/study/labels.csv",
                                      plan="examples/study/plan")
        tables = {"estimates.csv": result.estimates, "differences.csv": result.differences,
                  "targeted.csv": result.targeted}
        assert len(result.targeted)  # the plan's targeted labels are in play
    files = result.files()
    assert set(tables) | {"summary.json"} <= set(files)
    for name, frame in tables.items():
        back = pd.read_csv(io.StringIO(files[name]), keep_default_na=False, na_values=[""])
        assert list(back.columns) == list(frame.columns), name
        assert len(back) == len(frame), name
    assert files["summary.json"] == json.dumps(json.loads(files["summary.json"]), indent=2) + "\n"
    assert json.loads(files["summary.json"])["confidence"] == result.confidence


def test_the_printed_differences_say_yes_where_separated_and_nothing_elsewhere():
    """a is 1.5 points above b and c, which are tied: a - b and a - c are separated (both bounds above 0), b - c
    is not; the separated column says yes on those two rows and is blank (not '-') on the third."""
    from calibration.study.estimate import estimate

    rng = np.random.default_rng(5)
    rows = []
    for i in range(30):
        base = rng.normal(0, 0.7)
        for system, shift in (("a", 1.5), ("b", 0.0), ("c", 0.05)):
            rows.append({"item_id": f"d{i:02d}", "system": system, "criterion": "c", "status": "ok", "label": None,
                         "score": float(np.clip(np.round(3 + shift + base + rng.normal(0, 0.6)), 1, 5))})
    judge = pd.DataFrame(rows)
    result = estimate(judge, _labels(judge, [f"d{i:02d}" for i in range(16)]), scale=(1, 5))
    low = result.differences.set_index(["system_a", "system_b"])["ci_low"]
    high = result.differences.set_index(["system_a", "system_b"])["ci_high"]
    assert low[("a", "b")] > 0 and low[("a", "c")] > 0 and low[("b", "c")] < 0 < high[("b", "c")]
    printed = result.text().split("Paired differences")[1].splitlines()
    # the table is printed in blocks of at most 120 columns: the one holding `separated` repeats the pair
    header = next(k for k, line in enumerate(printed)
                  if line.split()[:3] == ["criterion", "system_a", "system_b"] and "separated" in line.split())
    end = printed[header].index("separated") + len("separated")
    separated = {tuple(line.split()[1:3]): line[:end].split()[-1:] if line[:end].strip().endswith("yes") else []
                 for line in printed[header + 1:header + 4]}
    assert separated == {("a", "b"): ["yes"], ("a", "c"): ["yes"], ("b", "c"): []}


@pytest.mark.parametrize("content", ['[1, 2]', '"a key"', '{"format": "judge-annotation-sheet"}', '{}'])
def test_a_key_of_another_kind_is_refused_as_not_a_key(content, tmp_path):
    from calibration.errors import CalibrationError
    from judge.annotation.plan import check_key

    path = tmp_path / "key.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CalibrationError, match=r"key.json: not a key written by `judge export`$"):
        check_key(path, {"d0": "random"}, "0" * 64, CalibrationError)
    assert path.read_text(encoding="utf-8") == content  # nothing lost


def test_the_targeted_labels_are_printed_apart_only_when_there_are_some():
    import calibration

    with_plan = calibration.estimate("examples/study/judgments.jsonl", "examples/study/labels.csv",
                                     plan="examples/study/plan")
    without = calibration.estimate("examples/study/judgments.jsonl", "examples/study/labels.csv")
    assert len(with_plan.targeted) and without.targeted.empty
    heading = "Labels on targeted dialogues (not a random sample"
    assert heading in with_plan.text() and heading not in without.text()
