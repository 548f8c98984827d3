"""Edges of `judge drift` (calibration.trust.drift) pinned as properties against independent computations:
agreement on scores rounds each score half up to its category before scikit-learn's kappa (two categories are
enough for a kappa); the options' open bounds; an inconclusive verdict asks for more anchor dialogues than it
has. Written after fresh draws of benchmarks/mutation.py left survivors on these edges."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score
from test_drift import simulated_runs

from calibration.errors import CalibrationError
from calibration.trust.drift import _kappa, drift


@pytest.mark.parametrize("reference, new", [
    ([1.46, 2.5, 3.0, 4.44, 5.0, 2.49], [1.0, 2.46, 3.5, 4.0, 4.6, 2.51]),
    ([1.0, 2.0, 1.0, 2.0], [2.0, 2.0, 1.0, 1.0]),  # two categories give a kappa
    ([3.2, 3.4, 2.6, 2.7], [3.3, 2.8, 3.1, 2.9])])  # all round to 3: no kappa
def test_kappa_on_scores_rounds_half_up_then_is_scikit_learns_quadratic_kappa(reference, new):
    rounded = [[math.floor(v + 0.5) for v in run] for run in (reference, new)]
    got = _kappa(pd.Series(reference), pd.Series(new), True)
    if len(set(rounded[0]) | set(rounded[1])) < 2:
        assert math.isnan(got)
    else:
        assert got == pytest.approx(cohen_kappa_score(*rounded, weights="quadratic"))
    labels = [str(v) for v in rounded[0]], [str(v) for v in rounded[1]]
    if len(set(labels[0]) | set(labels[1])) >= 2:
        assert _kappa(*labels, False) == pytest.approx(cohen_kappa_score(*labels))


@pytest.fixture(scope="module")
def runs():
    return simulated_runs(np.random.default_rng(3), n_items=12, shift=0.0)


@pytest.mark.parametrize("option, value", [("share_margin", 0.0), ("share_margin", 1.0), ("share_margin", -0.1),
                                           ("margin", 0.0), ("margin", math.inf), ("confidence", 1.0),
                                           ("confidence", 0.49)])
def test_options_at_their_open_bounds_are_refused(runs, option, value):
    reference, new = runs
    with pytest.raises(CalibrationError, match=f"--{option.replace('_', '-')} must be"):
        drift(reference, new, bootstrap=200, **{option: value})


def test_an_inconclusive_verdict_asks_for_more_dialogues_than_it_has(runs):
    reference, new = runs
    # A tight margin that 12 dialogues cannot settle.
    row = drift(reference, new, margin=0.02, share_margin=0.02, bootstrap=300).drift.iloc[0]
    assert row["verdict"] == "inconclusive"
    assert row["dialogues_needed"] > row["n_dialogues"] == 12
    assert f"about {row['dialogues_needed']} anchor dialogues would settle it (12 now)" == row["note"]


INTERVALS = ["ci_low", "ci_high", "tost_low", "tost_high", "changed_ci_low", "changed_ci_high", "human_ci_low",
             "human_ci_high"]


@pytest.mark.parametrize("dialogues", [2, 3, 9, 10])
def test_below_ten_anchor_dialogues_the_numbers_are_printed_without_any_interval(dialogues):
    """The estimates (mean shift, changed share, the change in Pearson r with the humans, scipy's) at any count; an
    interval only from 10 anchor dialogues: below, every interval column is empty and the text says "[no
    interval]" where it printed "[+nan, +nan]" for the shift and an interval for the agreement change."""
    from scipy import stats

    reference, new = simulated_runs(np.random.default_rng(7), n_items=dialogues, n_systems=6, shift=0.3)
    rng = np.random.default_rng(8)
    labels = reference[["item_id", "system", "criterion"]].assign(
        annotator="a", score=np.clip(np.round(reference["score"] + rng.normal(0, 0.8, len(reference))), 1, 5))
    result = drift(reference, new, labels, bootstrap=300, seed=5, scale=(1, 5))
    row = result.drift.iloc[0]
    human = labels["score"].to_numpy(float)
    assert row["mean_shift"] == pytest.approx((new["score"] - reference["score"]).mean())
    assert row["human_r_change"] == pytest.approx(stats.pearsonr(new["score"], human)[0]
                                                  - stats.pearsonr(reference["score"], human)[0])
    shown = np.isfinite(row[INTERVALS].to_numpy(float))
    text = result.text()
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    if dialogues < 10:
        assert not shown.any() and row["verdict"] == "inconclusive"
        assert text.count("[no interval]") == 2  # the shift's and the agreement change's
    else:
        assert shown.all() and "[no interval]" not in text


@pytest.mark.parametrize("value, one", [("A", True), ("better", True), ("3", True), ("3.0", True), ("3.5", False),
                                        (3, True), (4.0, True), (3.6666666666666665, False), (np.int64(2), True),
                                        (np.float64(2.5), False), (None, True)])
def test_a_verdict_that_one_answer_could_give_is_a_label_or_a_whole_number(value, one):
    """Written after the seed-13 draw let a label (text that is not a number) stop counting as one sample."""
    from calibration.trust.drift import _could_be_one_sample

    assert _could_be_one_sample(value) is one


def test_a_changed_share_without_re_asks_asks_for_the_normal_approximations_dialogues():
    """Four summaries a dialogue, kept without their samples, 5% of verdicts moved: the re-ask noise is unknown and
    the verdict inconclusive. The dialogues asked for are the normal approximation's for the share at 80% power
    (scipy's quantiles; p = noise + margin / 2, per dialogue), at least one more than there are; the exact bound
    for nothing changed, which counts a dialogue once, is not applied to a share that did change."""
    from scipy import stats

    reference, new = simulated_runs(np.random.default_rng(4), n_items=20, n_systems=4, shift=0.1, noise=0.0)
    reference, new = reference.drop(columns="samples"), new.drop(columns="samples")
    margin = 0.1
    row = drift(reference, new, margin=5.0, share_margin=margin, bootstrap=400).drift.iloc[0]
    assert row["verdict"] == "inconclusive" and row["changed_share"] > 0 and row["reask_noise"] == 0.0
    p, per_dialogue = margin / 2, row["n"] / row["n_dialogues"]
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.80)
    approximation = math.ceil(z * z * p * (1 - p) / margin ** 2 / per_dialogue)
    assert row["dialogues_needed"] == max(approximation, row["n_dialogues"] + 1) == 21
    exact_if_unchanged = math.ceil(math.log(0.05) / math.log(1 - margin))
    assert exact_if_unchanged > row["dialogues_needed"]  # so the rule for nothing changed would show


def test_the_text_shows_a_mean_shift_for_scores_and_none_for_labels(runs):
    """Each criterion's line of the text: for scores, the mean shift and its interval as the table holds them; for
    labels (no mean shift), no shift at all, never a 'nan'."""
    reference, new = runs
    result = drift(reference, new, bootstrap=200)
    row = result.drift.iloc[0]
    line = next(t for t in result.text().splitlines() if t.startswith(f"{row['criterion']}: "))
    assert f"mean shift {row['mean_shift']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], " in line
    as_labels = [frame.assign(label=frame["score"].round().astype(int).astype(str), score=np.nan,
                              status="label").drop(columns="samples") for frame in (reference, new)]
    labelled = drift(*as_labels, bootstrap=200)
    assert labelled.drift.iloc[0]["kind"] == "labels"
    text = labelled.text()
    assert "mean shift" not in text and not re.search(r"\bnan\b", text)


@pytest.mark.parametrize("shift, verdict", [(0.0, "no drift"), (0.6, "drift")])
def test_a_settled_verdict_asks_for_no_more_anchor_dialogues(shift, verdict):
    """drift.csv's dialogues_needed is what would settle an inconclusive verdict; a settled one (30 anchor dialogues,
    nothing planted or 60% of judgments moved up a point) needs none: 0, and no note. Written after the seed-18 draw
    let the placeholder 0 become 1."""
    reference, new = simulated_runs(np.random.default_rng(3), n_items=30, shift=shift)
    row = drift(reference, new, bootstrap=200).drift.iloc[0]
    assert row["verdict"] == verdict
    assert row["dialogues_needed"] == 0 and row["note"] == ""


@pytest.mark.parametrize("one, other, same", [
    ({"coherence": 3, "relevance": 4}, {"relevance": 4, "coherence": 3}, True),  # a verdict per segment, keys reordered
    ([{"a": 1, "b": 2}], [{"b": 2, "a": 1}], True),
    ({"coherence": 3}, {"coherence": 4}, False), (3, "3.0", True), ("A", "B", False)])
def test_structured_verdicts_compare_by_content_not_key_order(one, other, same):
    """A verdict that is a mapping (one score per segment or criterion) is the same verdict whatever order its keys
    were written in; drift counts it changed only when a value changes."""
    from calibration.trust.drift import _comparable

    assert (_comparable(one) == _comparable(other)) is same


def test_a_tight_share_margin_plans_dialogues_for_a_share_of_at_least_one_percent():
    """--share-margin 0.01 without re-asks (noise unknown, 0): the normal approximation's share p = noise +
    margin / 2 = 0.005 is floored at 1%, so the dialogues asked for are ceil(z^2 p (1 - p) / margin^2 / judgments
    per dialogue) at p = 0.01 (scipy's quantiles), 154 here."""
    from scipy import stats

    reference, new = simulated_runs(np.random.default_rng(0), n_items=20, n_systems=4, shift=0.015, noise=0.0)
    reference, new = reference.drop(columns="samples"), new.drop(columns="samples")
    margin = 0.01
    row = drift(reference, new, margin=5.0, share_margin=margin, bootstrap=400).drift.iloc[0]
    assert row["verdict"] == "inconclusive" and 0 < row["changed_share"] and row["reask_noise"] == 0.0
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.80)
    p = 0.01
    assert row["dialogues_needed"] == math.ceil(z * z * p * (1 - p) / margin ** 2 / (row["n"] / row["n_dialogues"]))


def _label_runs(moved_share, seed=0, dialogues=40):
    """Two runs of a labelling judge (A, B or C on 4 summaries a dialogue) without re-asks: the new run moves
    `moved_share` of the verdicts one label on (A -> B -> C -> A)."""
    rng = np.random.default_rng(seed)
    rows = [{"item_id": f"d{i}", "system": f"s{j}", "criterion": "verdict", "label": str(rng.choice(list("ABC"))),
             "score": np.nan, "status": "label"} for i in range(dialogues) for j in range(4)]
    reference = pd.DataFrame(rows)
    new = reference.copy()
    moved = rng.random(len(new)) < moved_share
    new.loc[moved, "label"] = [{"A": "B", "B": "C", "C": "A"}[v] for v in new.loc[moved, "label"]]
    return reference, new


def test_labels_that_barely_change_are_no_drift_by_stuart_maxwell_and_the_share():
    """Labels (no mean shift): 5 of 160 verdicts moved. Stuart-Maxwell's test of marginal homogeneity
    (statsmodels) does not reject at 5% and the changed share's one-sided bound is within --share-margin: no
    drift, the only verdict that lets a pipeline go on."""
    from statsmodels.stats.contingency_tables import SquareTable

    reference, new = _label_runs(0.03)
    row = drift(reference, new, bootstrap=300).drift.iloc[0]
    table = pd.crosstab(reference["label"], new["label"]).reindex(index=list("ABC"), columns=list("ABC"),
                                                                  fill_value=0)
    p = SquareTable(table.to_numpy(float), shift_zeros=False).homogeneity().pvalue
    assert row["kind"] == "labels" and row["stuart_maxwell_p"] == pytest.approx(p) and p > 0.05
    assert row["changed_share"] == pytest.approx((reference["label"] != new["label"]).mean())
    assert row["verdict"] == "no drift"


def test_verdicts_without_samples_in_one_run_are_drift_only_beyond_the_share_margin():
    """The reference kept 3 samples a judgment (its scores are their means), the new run only its scores, 8% of them
    moved a point up or down: a verdict's re-ask noise is then unknown, so a changed share whose lower bound is
    above 0 but within --share-margin (0.1) is not drift: inconclusive, said in its note."""
    reference, _ = simulated_runs(np.random.default_rng(1), n_items=30, shift=0.0, noise=0.15)
    new = reference.drop(columns="samples").copy()
    moved = np.flatnonzero(np.random.default_rng(11).random(len(new)) < 0.06)
    new.loc[moved, "score"] += np.where(np.arange(len(moved)) % 2 == 0, 1.0, -1.0)
    result = drift(reference, new, bootstrap=300)
    row = result.drift.iloc[0]
    assert 0.0 < row["changed_ci_low"] < 0.1 and row["reask_noise"] == 0.0  # the case this test is for
    assert row["verdict"] == "inconclusive"
    assert "changed verdicts are drift only beyond --share-margin" in row["note"]


def test_judgments_in_one_run_only_or_failed_are_counted_in_the_warning():
    """The reference has 2 judgments the new run lacks, the new run 3 the reference lacks, and 1 common judgment
    failed in the new run: compared on the rest, and the warning counts each kind."""
    reference, new = simulated_runs(np.random.default_rng(3), n_items=30, shift=0.0)
    new = pd.concat([new.drop(index=[5, 9]), new.iloc[:3].assign(item_id=["x1", "x2", "x3"])], ignore_index=True)
    new.loc[20, "score"] = np.nan
    new.loc[20, "samples"] = None
    result = drift(reference, new, bootstrap=200)
    assert result.drift.iloc[0]["n"] == 120 - 2 - 1
    assert ("compared 117 judgments in common; left out 2 only in the reference, 3 only in the new run, 1 failed, "
            "N/A or abstained in either") in result.warnings


def test_labels_whose_marginals_hold_but_whose_share_is_unsettled_are_inconclusive_not_drift():
    """8% of 160 labels moved round the cycle A -> B -> C -> A: the marginals barely move (Stuart-Maxwell, statsmodels,
    p well above the strict level) and the changed share's bound is above 0 but within --share-margin, so neither
    rule calls drift and the share is not shown small enough for no drift: inconclusive. Written after the seed-19
    draw let the strict level's `1 - strict` become `1 + strict` (every p then 'rejected')."""
    from statsmodels.stats.contingency_tables import SquareTable

    reference, new = _label_runs(0.08, seed=1)
    row = drift(reference, new, bootstrap=300).drift.iloc[0]
    table = pd.crosstab(reference["label"], new["label"]).reindex(index=list("ABC"), columns=list("ABC"),
                                                                  fill_value=0)
    p = SquareTable(table.to_numpy(float), shift_zeros=False).homogeneity().pvalue
    assert row["stuart_maxwell_p"] == pytest.approx(p) and p > 0.3
    assert 0.0 < row["changed_ci_low"] < 0.1
    assert row["verdict"] == "inconclusive"


@pytest.mark.parametrize("dialogues, verdict_given", [(9, False), (10, True)])
def test_ten_anchor_dialogues_are_the_fewest_with_a_verdict(dialogues, verdict_given):
    """Below 10 anchor dialogues no interval or verdict is printed (not shown to hold there); at exactly 10 the
    usual rules decide (nothing planted: no drift) and the interval is printed."""
    reference, new = simulated_runs(np.random.default_rng(3), n_items=dialogues, shift=0.0)
    row = drift(reference, new, bootstrap=200).drift.iloc[0]
    assert row["n_dialogues"] == dialogues
    assert ("no interval or verdict below 10 anchor dialogues" in row["note"]) is not verdict_given
    assert bool(np.isfinite(row["ci_low"])) is verdict_given
    assert (row["verdict"] == "no drift") is verdict_given


@pytest.mark.parametrize("fingerprint, shown", [({}, None), ("abc", None), (None, None), ({"model": "m"}, "model")])
def test_only_a_recorded_fingerprint_is_hashed_into_the_provenance(runs, fingerprint, shown):
    """provenance.csv's fingerprint row: the first 12 hex digits of the SHA-256 of a recorded fingerprint's canonical
    JSON (hashlib written out); an empty or malformed one is '(not recorded)', not the hash of '{}' (written after
    the seed-20 draw let `isinstance(...) and fingerprint` become `or`)."""
    import hashlib
    import json

    reference, new = (run.assign(fingerprint=[fingerprint] * len(run)) for run in runs)
    row = drift(reference, new, bootstrap=200).provenance.set_index("field").loc["fingerprint"]
    if shown is None:
        assert row["reference"] == row["new"] == "(not recorded)"
    else:
        digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:12]
        assert row["reference"] == row["new"] == digest
    assert not row["changed"]


def test_a_fingerprint_is_the_same_whatever_the_order_of_its_keys(runs):
    """The same recorded judge written with its keys in another order (a JSON writer's choice) is the same
    fingerprint: one digest, nothing changed."""
    first = {"model": "m", "template": "t1", "temperature": 0}
    again = {"temperature": 0, "template": "t1", "model": "m"}
    reference, new = runs[0].assign(fingerprint=[first] * len(runs[0])), runs[1].assign(
        fingerprint=[again] * len(runs[1]))
    result = drift(reference, new, bootstrap=200)
    row = result.provenance.set_index("field").loc["fingerprint"]
    assert row["reference"] == row["new"] != "(not recorded)" and not row["changed"]
    assert "nothing recorded changed" in result.text()


def _sampled_new_run(single_sample_rows=(39,)):
    """Reference: 40 scores of 3 without samples. New run: two agreeing re-asks per judgment (re-ask noise 0), half
    of the verdicts moved to 4 or 2 (mean shift 0); the rows in `single_sample_rows` asked once."""
    reference, new = [], []
    for k in range(40):
        key = {"item_id": f"d{k // 2:02d}", "system": "ab"[k % 2], "criterion": "c"}
        value = 3.0 if k % 2 == 0 else (4.0 if k % 4 == 1 else 2.0)
        reference.append({**key, "score": 3.0})
        new.append({**key, "score": value, "samples": [value] if k in single_sample_rows else [value, value]})
    return pd.DataFrame(reference), pd.DataFrame(new)


def test_the_new_runs_measured_noise_is_the_allowance_when_the_reference_has_no_re_asks():
    """The new run's re-asks measure the noise (0 here): 50% of verdicts changed is drift, although within the
    --share-margin of 0.5 that an unknown noise would allow (one judgment asked once keeps the comparison
    unpaired, so the allowance decides)."""
    reference, new = _sampled_new_run()
    row = drift(reference, new, share_margin=0.5, bootstrap=200).drift.iloc[0]
    assert row["reask_noise"] == 0.0 and row["changed_share"] == 0.5 and abs(row["mean_shift"]) < 1e-12
    assert 0.0 < row["changed_ci_low"] < 0.5  # beyond the measured noise, within the unknown noise's allowance
    assert row["verdict"] == "drift" and "the re-ask noise is the new run's" in row["note"]


@pytest.mark.parametrize("means", [1, 7])
def test_the_note_counts_the_judgments_compared_verdict_to_verdict(means):
    """A reference of scores without samples where `means` verdicts are means of samples (3.5, from a CSV): its
    verdicts cannot be read as one sample each, so all 40 judgments are compared verdict to verdict against the
    sampled new run, and the note says how many."""
    reference, new = _sampled_new_run(())
    reference.loc[: means - 1, "score"] = 3.5
    row = drift(reference, new, share_margin=0.5, bootstrap=200).drift.iloc[0]
    said = [part for part in row["note"].split("; ") if "kept no samples" in part]
    assert said == ["40 judgments kept no samples in one run and are means of samples in it: verdict is compared "
                    "with verdict, and a verdict's re-ask noise is unknown: changed verdicts are drift only beyond "
                    "--share-margin"]


def test_criteria_are_reported_in_name_order_whatever_the_files_order(runs):
    """drift.csv and the text list criteria by name, not in the order the judgments happen to come in."""
    reference, new = runs
    twice = [pd.concat([run.assign(criterion="zeta"), run.assign(criterion="alpha")], ignore_index=True)
             for run in (reference, new)]
    result = drift(*twice, bootstrap=200)
    assert list(result.drift["criterion"]) == ["alpha", "zeta"]
    # (the header is wrapped to 120 columns: the criteria's lines are those starting with a criterion's name)
    starts = [line.split(":")[0] for line in result.text().splitlines()]
    assert [name for name in starts if name in ("alpha", "zeta")] == ["alpha", "zeta"]


def test_the_references_measured_noise_is_the_allowance_when_it_has_re_asks():
    """The mirror of the case above: the reference's re-asks measure the noise (0), the new run kept its verdicts
    only; 50% of verdicts changed is drift, although within the --share-margin of 0.5 an unknown noise would allow."""
    without, with_samples = _sampled_new_run()  # as the reference: the one with re-asks
    row = drift(with_samples, without, share_margin=0.5, bootstrap=200).drift.iloc[0]
    assert row["reask_noise"] == 0.0 and row["changed_share"] == 0.5
    assert 0.0 < row["changed_ci_low"] < 0.5  # beyond the measured noise, within the unknown noise's allowance
    assert row["verdict"] == "drift" and "re-ask noise" not in row["note"]
