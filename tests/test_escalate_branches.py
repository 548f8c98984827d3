"""Every clause of escalate's option checks (calibration.cascade.escalate), one row each: a bool, a number of the
wrong kind, a value out of range, each refused in the CLI's words before any file is read. Written after a fresh
draw of benchmarks/mutation.py (seed 12) let an `or` of these checks become an `and`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_escalate import JUDGES, LABELS

import calibration
from calibration.errors import CalibrationError

ROWS = [
    ({"tolerance": True}, "--tolerance must be a number of score points >= 0, got True"),
    ({"tolerance": "0.5"}, "--tolerance must be a number of score points >= 0, got '0.5'"),
    ({"tolerance": math.nan}, "--tolerance must be a number of score points >= 0, got nan"),
    ({"tolerance": -0.5}, "--tolerance must be a number of score points >= 0, got -0.5"),
    ({"steps": True}, "--steps must be a positive whole number, got True"),
    ({"steps": 2.0}, "--steps must be a positive whole number, got 2.0"),
    ({"steps": 0}, "--steps must be a positive whole number, got 0"),
    ({"path_cells": True}, "--path-cells must be a positive whole number, got True"),
    ({"path_cells": 5.0}, "--path-cells must be a positive whole number, got 5.0"),
    ({"random_dialogues": True}, "--random-dialogues must be a whole number of at least 0, got True"),
    ({"random_dialogues": 2.0}, "--random-dialogues must be a whole number of at least 0, got 2.0"),
    ({"random_dialogues": -1}, "--random-dialogues must be a whole number of at least 0, got -1"),
]


@pytest.mark.parametrize("given, message", ROWS, ids=[m[:40] for _, m in ROWS])
def test_each_clause_of_each_option_check_refuses_on_its_own(given, message):
    with pytest.raises(CalibrationError) as caught:
        calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, **given)
    assert message in str(caught.value)


@pytest.mark.parametrize("given", [{"tolerance": 0}, {"steps": 1}, {"path_cells": None}, {"random_dialogues": 0}])
def test_the_edge_of_each_range_is_accepted(given):
    result = calibration.escalate(LABELS, JUDGES, alpha=0.2, delta=0.1, **given)
    assert len(result.decisions) > 0


def test_every_table_of_the_result_has_one_row_per_index_label(tmp_path):
    """The tables a script receives are stacked per criterion: each keeps a RangeIndex (so .loc and joins work).
    The example's one criterion copied as a second. Written after the seed-14 draw let the path's concatenation
    keep each criterion's index."""
    import json

    import pandas as pd

    labels = pd.read_csv(LABELS)
    pd.concat([labels, labels.assign(criterion="other")]).to_csv(tmp_path / "labels.csv", index=False)
    import shutil

    for rubric in JUDGES["small"].parent.glob("*.yaml"):  # the example's rubric, beside the judgments
        shutil.copy(rubric, tmp_path / rubric.name)
    judges = {}
    for name, path in JUDGES.items():
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        copy = tmp_path / f"{name}.jsonl"
        copy.write_text("".join(json.dumps(r) + "\n" for r in lines + [{**r, "criterion": "other"} for r in lines]),
                        encoding="utf-8")
        judges[name] = copy
    result = calibration.escalate(tmp_path / "labels.csv", judges, alpha=0.2, delta=0.1)
    for name in ("decisions", "thresholds", "path", "risk_coverage"):
        frame = getattr(result, name)
        assert frame["criterion"].nunique() == 2, name
        assert frame.index.equals(pd.RangeIndex(len(frame))), name


@pytest.mark.parametrize("steps", [2, 4])
def test_the_fixed_sequence_tests_each_step_up_to_the_first_it_cannot_reject(steps):
    """Fixed-sequence testing from the first step: each step is tested while the ones before were rejected (p <=
    delta), and the first whose p exceeds delta is tested too (its p-value decides the stop); none after it. The
    judge is right above confidence 0.5 and mostly wrong below: of two steps only the first is rejected."""
    from calibration.cascade.threshold_tests import fit_cascade

    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, (400, 1))
    agree = (conf[:, 0] > 0.5) | (rng.random(400) < 0.3)
    pool = rng.uniform(0, 1, (2000, 1))
    # alpha 0.2: the walk starts at 75 expected cells (a judge at alpha / 2 passes with 80% power), so with 4 steps
    # the first (100 cells) is tested too
    fit = fit_cascade(conf, agree[:, None], pool, 0.2, 0.1, steps=steps)
    p = fit.path["p_value"].to_numpy()
    stop = next(k for k in range(steps) if p[k] > 0.1)
    assert fit.chosen == stop - 1 >= 0 and (steps != 2 or stop == 1)
    assert list(fit.path["rejected"]) == [k < stop for k in range(steps)]
    assert list(fit.path["tested"]) == [k <= stop for k in range(steps)]


@pytest.mark.parametrize("kind", ["likert", "pairwise"])
@pytest.mark.parametrize("missing", [None, [4.0]])
@pytest.mark.parametrize("share, found", [(0.4, False), (0.5, True), (0.6, True)])
def test_the_samples_signal_is_offered_when_half_the_verdicts_record_two_or_more(share, found, missing, kind):
    """Re-asks are a confidence signal when at least half the verdicts keep two or more samples (a lone sample or
    none is no spread); never for pairwise verdicts, whose samples are the two orders (the `order` signal)."""
    import pandas as pd

    from calibration.cascade.verdicts import available_signals

    n = 10
    frame = pd.DataFrame({"status": "ok", "score": 3.0,
                          "samples": [[3.0, 4.0, 3.0] if k < share * n else missing for k in range(n)]})
    assert ("samples" in available_signals(frame, kind, 1)) == (found and kind != "pairwise")
