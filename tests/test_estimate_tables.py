"""calibration.study.estimate.estimate's tables pinned against the estimator run on matrices built independently with
pandas: every row of the systems' and the pairs' tables (estimate, both intervals, lambda, the counts, the worth in
labels, the note) is ppi_mean on the dialogue x system matrix of its criterion, where a failed judgment keeps its
dialogue at the system's mean judge score, an N/A judgment removes the dialogue (and its label) from that system,
several annotators' labels are averaged (three, two of them often agreeing: no noise cleaning unless asked), only the
plan's random dialogues' labels enter, pairwise verdicts are not scores, and the summary notes say which rows have no
interval or a bounded one. Small invented fixtures."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from calibration.study.estimate_tables import estimate
from calibration.study.ppi import effective_labels, ppi_mean

SYSTEMS = ["alpha", "beta", "gamma"]


def _fixture(seed=3, dialogues=40, labelled=14):
    rng = np.random.default_rng(seed)
    items = [f"d{i:02d}" for i in range(dialogues)]
    quality = rng.normal(0, 1, (dialogues, len(SYSTEMS))) + rng.normal(0, 1, (dialogues, 1))
    rows = []
    for criterion, shift in (("overall", 0.0), ("fluency", 0.5)):
        judge = np.clip(np.round(3 + quality + shift + rng.normal(0, 0.7, quality.shape)), 1, 5)
        for d, item in enumerate(items):
            for s, system in enumerate(SYSTEMS):
                status = "ok"
                if (d + s) % 11 == 0:
                    status = "failed"
                elif (d * 3 + s) % 13 == 0 and criterion == "overall":
                    status = "na"
                rows.append({"item_id": item, "system": system, "criterion": criterion,
                             "score": judge[d, s] if status == "ok" else np.nan, "status": status})
    judge_frame = pd.DataFrame(rows)
    # A pairwise verdict line (system_1 set) is not a score of a system and must not enter.
    judge_frame["system_1"] = np.nan
    judge_frame = pd.concat([judge_frame, pd.DataFrame([{"item_id": items[0], "system": "alpha", "criterion": "overall",
                                                         "score": 1.0, "status": "ok", "system_1": "beta"}])],
                            ignore_index=True)
    chosen = rng.permutation(dialogues)[:labelled + 4]
    labels = []
    for criterion in ("overall", "fluency"):
        truth = np.clip(np.round(3 + quality + (0.5 if criterion == "fluency" else 0.0)), 1, 5)
        for d in chosen:
            for s, system in enumerate(SYSTEMS):
                if criterion == "fluency" and s == 2 and d % 4 == 0:
                    continue  # a label missing on a dialogue of the random sample
                for annotator in ("ann1", "ann2", "ann3"):
                    labels.append({"item_id": items[d], "system": system, "criterion": criterion,
                                   "annotator": annotator,
                                   "score": float(np.clip(truth[d, s] + rng.integers(-1, 2), 1, 5))})
    random_items = [items[d] for d in chosen[:labelled]] + [items[d] for d in rng.permutation(dialogues)[:3]]
    targeted = [items[d] for d in chosen[labelled:]]
    return judge_frame, pd.DataFrame(labels), random_items, targeted


def _matrices(judge, labels, criterion, random_items):
    """(judge, human, judged) dialogue x system matrices with pandas, from the rules in the module docstring."""
    part = judge[(judge["criterion"] == criterion) & judge["system_1"].isna()]
    scores = part.pivot(index="item_id", columns="system", values="score")
    status = part.pivot(index="item_id", columns="system", values="status")
    filled = scores.fillna(scores.mean())
    filled = filled.where(status != "na")
    human = (labels[(labels["criterion"] == criterion) & labels["item_id"].isin(random_items)]
             .groupby(["item_id", "system"])["score"].mean().unstack()
             .reindex(index=scores.index, columns=scores.columns))
    human = human.where(filled.notna())
    return filled.to_numpy(float), human.to_numpy(float), scores.notna().to_numpy(), list(scores.columns)


def test_the_tables_are_the_estimator_on_the_matrices_pandas_builds():
    judge, labels, random_items, targeted = _fixture()
    tables = estimate(judge, labels, random_items=random_items, targeted_items=targeted,
                      scales={"*": (1.0, 5.0)})
    assert tables.criteria == ["fluency", "overall"] and tables.random_source == "plan"
    assert tables.n_random == len(set(random_items) & set(labels["item_id"]))
    for criterion in tables.criteria:
        f, y, judged, systems = _matrices(judge, labels, criterion, set(random_items))
        assert systems == SYSTEMS
        result = ppi_mean(y.T, f.T, bounds=(1.0, 5.0), shared=True)
        worth = effective_labels(result)
        rows = tables.estimates[tables.estimates["criterion"] == criterion].set_index("system")
        for s, system in enumerate(systems):
            row = rows.loc[system]
            for column, value in (("estimate", result.estimate), ("ci_low", result.ci_low),
                                  ("ci_high", result.ci_high), ("human_only", result.human_only),
                                  ("human_only_ci_low", result.human_only_ci_low),
                                  ("human_only_ci_high", result.human_only_ci_high), ("lambda", result.lam),
                                  ("effective_labels", worth)):
                assert row[column] == pytest.approx(value[s], rel=1e-12, nan_ok=True), (criterion, system, column)
            units = ~np.isnan(f[:, s])
            labelled = units & ~np.isnan(y[:, s])
            in_sample = np.isin(np.array(sorted(set(judge["item_id"]))),
                                list(set(random_items) & set(labels["item_id"])))
            assert row["n_labelled"] == labelled.sum() and row["n_dialogues"] == units.sum()
            assert row["n_judged"] == judged[:, s].sum()
            assert row["n_missing_labels"] == (in_sample & units & np.isnan(y[:, s])).sum()
            assert row["width_ratio"] == pytest.approx((result.ci_high[s] - result.ci_low[s]) /
                                                       (result.human_only_ci_high[s] - result.human_only_ci_low[s]))
        pairs = tables.differences[tables.differences["criterion"] == criterion]
        a, b = np.array(list(combinations(range(len(systems)), 2))).T
        paired = ppi_mean((y[:, a] - y[:, b]).T, (f[:, a] - f[:, b]).T, shared=True)
        paired_worth = effective_labels(paired)
        assert list(zip(pairs["system_a"], pairs["system_b"])) == [(systems[i], systems[k]) for i, k in zip(a, b)]
        for p, (_, row) in enumerate(pairs.iterrows()):
            for column, value in (("estimate", paired.estimate), ("ci_low", paired.ci_low),
                                  ("ci_high", paired.ci_high), ("human_only_ci_high", paired.human_only_ci_high),
                                  ("lambda", paired.lam), ("effective_labels", paired_worth)):
                assert row[column] == pytest.approx(value[p], rel=1e-12, nan_ok=True), (criterion, p, column)
            assert row["n_labelled"] == paired.n_labelled[p]
            assert row["n_dialogues"] == (~np.isnan(f[:, a[p]] - f[:, b[p]])).sum()
    # The targeted dialogues' labels: plain means beside the judge's, never in the estimates.
    target = tables.targeted.set_index(["criterion", "system"])
    for criterion in tables.criteria:
        f, y, _, systems = _matrices(judge, labels, criterion, set(targeted))
        for s, system in enumerate(systems):
            labelled = ~np.isnan(y[:, s])
            assert target.loc[(criterion, system), "n_labelled"] == labelled.sum()
            assert target.loc[(criterion, system), "human_mean"] == pytest.approx(y[labelled, s].mean())
            assert target.loc[(criterion, system), "judge_mean"] == pytest.approx(f[labelled, s].mean())


def test_the_notes_name_the_rows_without_an_interval_the_bounded_ones_and_a_fully_labelled_criterion():
    items = [f"d{i}" for i in range(12)]
    judge = pd.DataFrame({"item_id": items * 2, "system": ["a"] * 12 + ["b"] * 12, "criterion": "c",
                          "score": np.r_[np.linspace(1, 5, 12), np.linspace(5, 1, 12)], "status": "ok"})
    # a: two labels only (no interval); b: ten labels bunched at the top (the bounded-scale interval).
    labels = pd.DataFrame({"item_id": items[:2] + items[:10], "system": ["a"] * 2 + ["b"] * 10, "criterion": "c",
                           "annotator": "x", "score": [3.0, 4.0] + [5, 5, 4, 5, 5, 5, 5, 4, 5, 5]})
    tables = estimate(judge, labels, scales={"c": (1, 5)})
    assert any(note.startswith("c: no interval for a (2 labelled dialogues:") for note in tables.notes)
    assert any(note.startswith("c: bounded-scale interval for b (the 10 labels bunch") for note in tables.notes)
    assert not any("every judged dialogue is labelled" in note for note in tables.notes)
    every = pd.DataFrame({"item_id": items * 2, "system": ["a"] * 12 + ["b"] * 12, "criterion": "c",
                          "annotator": "x", "score": np.r_[np.arange(12) % 5 + 1, (np.arange(12) + 2) % 5 + 1]})
    tables = estimate(judge, every.astype({"score": float}))
    assert tables.notes == ["c: every judged dialogue is labelled, so the judge adds nothing: the estimates are "
                            "the human means"]
    assert tables.estimates["estimate"].tolist() == pytest.approx(
        every.groupby("system")["score"].mean().loc[["a", "b"]].tolist())


def test_the_criteria_asked_for_are_estimated_and_unknown_ones_refused_with_what_there_is():
    """--criteria through estimate(): only the criteria asked for; one without human scores, or without judge
    scores, refused naming what the files have; a judge whose scores are for every criterion ('*', a wide metric
    file) serves any criterion the labels have."""
    from calibration.errors import CalibrationError

    judge, labels, random_items, _ = _fixture()
    one = estimate(judge, labels, criteria=["overall"], random_items=random_items)
    assert one.criteria == ["overall"] and set(one.estimates["criterion"]) == {"overall"}
    with pytest.raises(CalibrationError, match=r"--criteria: no human scores for coherence; the labels have "
                                               r"fluency, overall"):
        estimate(judge, labels, criteria=["coherence"])
    extra = pd.concat([labels, labels.assign(criterion="coherence")], ignore_index=True)
    with pytest.raises(CalibrationError, match=r"--criteria: no judge scores for coherence; the judgments have "
                                               r"fluency, overall"):
        estimate(judge, extra, criteria=["coherence"])
    assert estimate(judge, extra).criteria == ["fluency", "overall"]  # shared criteria only, coherence left out
    wide = judge[judge["criterion"] == "overall"].assign(criterion="*")
    both = estimate(wide, labels, criteria=["fluency", "overall"], random_items=random_items)
    assert both.criteria == ["fluency", "overall"]
    assert estimate(wide, labels, random_items=random_items).criteria == ["fluency", "overall"]
