"""The trust verbs' rules that a mutation run (benchmarks/mutation.py) found no test for, each checked against a
hand computation or an independent one on a small invented input: audit's block letters past Z, two-sample noise,
pre-aggregated labels, share intervals, the identification checks of the excess, pairwise strata and
self-preference, Holm with a zero-width interval, its refusals and sentences; drift's binary labels, its count of
anchor dialogues and its margins; the probes' labels and sentences; the audit report; select's criteria order; and
the CLI's defaults, which must be the Python functions' own."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.errors import CalibrationError
from calibration.trust import position as position_module
from calibration.trust.audit import audit, read_human
from calibration.trust.dialogues import Dialogues
from calibration.trust.drift import drift
from calibration.trust.family import family_wise
from calibration.trust.gain import ONE_ANNOTATOR_NOTE, WEAK_NOTE
from calibration.trust.length import length_slopes
from calibration.trust.noise import noise_floor
from calibration.trust.position import block_position, pairwise_position
from calibration.trust.probes import probe_sentences, probe_table
from calibration.trust.select import select
from judge.judgment import Judgment

STUDY = Path(__file__).resolve().parents[1] / "examples" / "study"


# -- audit: the statistics -------------------------------------------------------------------------------------------


def test_block_letters_past_z_are_positions_26_and_up():
    """A block of 28 candidates is shown under A..Z, AA, AB: the last two are positions 26 and 27, not unknown."""
    letters = [chr(65 + k) for k in range(26)] + ["AA", "AB"]
    judge = pd.DataFrame([{"item_id": f"d{d}", "system": f"s{k}", "criterion": "c", "score": 1.0 + 0.1 * k + d,
                           "status": "ok", "position": letter} for d in range(4) for k, letter in enumerate(letters)])
    row = block_position(judge, Dialogues(judge["item_id"], 100, 0), "c")
    assert row["n"] == len(judge)  # every candidate placed, AA and AB included
    assert row["position_slope"] == pytest.approx(0.1)


def test_two_samples_are_a_reask_and_no_samples_is_no_noise():
    """Re-ask noise from two samples per judgment: the share of judgments whose two samples differ. A criterion
    without samples has no noise floor: source none, n 0."""
    samples = [[3, 3], [3, 4], [2, 2], [5, 4], [1, 1], [2, 3]] * 4
    judge = pd.DataFrame([{"item_id": f"d{k // 3}", "system": f"s{k % 3}", "criterion": "c", "score": np.mean(s),
                           "status": "ok", "samples": s, "swapped": None} for k, s in enumerate(samples)]
                         + [{"item_id": f"d{k // 3}", "system": f"s{k % 3}", "criterion": "plain", "score": 3.0,
                             "status": "ok", "samples": None, "swapped": None} for k in range(len(samples))])
    noise = noise_floor(judge, None, Dialogues(judge["item_id"], 100, 0), ["c", "plain"]).set_index("criterion")
    assert noise.loc["c", "source"] == "samples" and noise.loc["c", "n"] == len(samples)
    assert noise.loc["c", "changed_share"] == pytest.approx(np.mean([a != b for a, b in samples]))
    assert noise.loc["plain", "source"] == "none" and noise.loc["plain", "n"] == 0


def test_labels_already_averaged_by_a_script_are_taken_as_they_are():
    means = pd.DataFrame({"item_id": ["d1", "d1", "d2"], "system": ["a", "b", "a"], "criterion": "c",
                          "human": [3.5, 2.0, 4.25]})
    out = read_human(means)
    assert out[["item_id", "system", "criterion", "human"]].equals(means)
    assert out["human_a"].isna().all() and out["human_b"].isna().all()


def test_the_second_reading_is_the_mean_of_the_other_annotators():
    """Two readings of each summary for the instrument: the first annotator by name, and the mean of the others."""
    labels = pd.DataFrame([{"item_id": "d1", "system": "a", "annotator": name, "criterion": "c", "score": score}
                           for name, score in (("ann2", 4), ("ann1", 2), ("ann3", 5))]
                          + [{"item_id": "d1", "system": "b", "annotator": "ann1", "criterion": "c", "score": 3}])
    out = read_human(labels).set_index("system")
    assert out.loc["a", "human_a"] == 2 and out.loc["a", "human_b"] == pytest.approx(4.5)
    assert out.loc["a", "human"] == pytest.approx(11 / 3)
    assert out.loc["b", "human_a"] == 3 and np.isnan(out.loc["b", "human_b"])


def test_a_share_of_independent_pairs_has_the_binomial_interval_of_all_pairs():
    """40 dialogues of 10 independent pairs: the flip rate's interval is the Wilson interval at 400 pairs (the design
    effect is 1), not the one at one pair per dialogue, which a wrong bootstrap spread falls back to."""
    from statsmodels.stats.proportion import proportion_confint

    rng = np.random.default_rng(3)
    rows = []
    for d in range(40):
        for k in range(10):
            f = "1" if rng.random() < 0.5 else "2"
            s = f if rng.random() < 0.7 else ("2" if f == "1" else "1")
            rows.append({"item_id": f"d{d:02d}", "system": f"a{k}|b{k}", "system_1": f"a{k}", "system_2": f"b{k}",
                         "criterion": "c", "forward": f, "swapped": s, "label": f if f == s else "0",
                         "status": "label"})
    judge = pd.DataFrame(rows)
    row = pairwise_position(judge, None, Dialogues(judge["item_id"], 1000, 0), "c")[0]
    flips = int((judge["forward"] != judge["swapped"]).sum())
    assert row["flip_rate"] == pytest.approx(flips / 400)
    low, high = proportion_confint(flips, 400, 0.05, "wilson")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=0.01)


def test_the_excess_is_tested_from_eight_dialogues_with_two_readings():
    from audit_sim import study

    for dialogues, tested in ((7, False), (8, True)):
        judge, words, human = study(np.random.default_rng(0), dialogues=dialogues, gaps=0.0)
        row = length_slopes(judge, words, human, Dialogues(judge["item_id"], 400, 0), "c")
        assert (row["note"] != ONE_ANNOTATOR_NOTE.format(n=8)) == tested
        assert np.isfinite(row["excess_slope"]) == tested


def test_readings_that_agree_only_through_length_leave_the_excess_untested():
    """Quality is length in every dialogue: the two readings agree through length alone, the instrument is weak,
    and the excess is not tested (the first stage's partial covariance, not the plain one, decides)."""
    rng = np.random.default_rng(1)
    dialogues, systems = 30, 5
    z = rng.normal(0, 1, (dialogues, systems))
    a, b = z + rng.normal(0, 1, z.shape), z + rng.normal(0, 1, z.shape)
    judge = pd.DataFrame({"item_id": np.repeat([f"d{i:02d}" for i in range(dialogues)], systems),
                          "system": np.tile([f"s{k}" for k in range(systems)], dialogues), "criterion": "c",
                          "score": (3 + z + rng.normal(0, 0.3, z.shape)).ravel(), "status": "ok"})
    words = judge[["item_id", "system"]].assign(words=np.round(40 + 10 * z).ravel(), item_system=judge["system"])
    human = judge[["item_id", "system", "criterion"]].assign(human=((a + b) / 2).ravel(), human_a=a.ravel(),
                                                            human_b=b.ravel())
    row = length_slopes(judge, words, human, Dialogues(judge["item_id"], 400, 0), "c")
    assert np.isnan(row["excess_slope"]) and row["note"] == WEAK_NOTE.format(x="length")


@pytest.mark.parametrize("estimate, p, flagged", [(0.0, 1.0, False), (0.3, 0.0, True), (-0.3, 0.0, True)])
def test_a_zero_width_interval_is_tested_flagged_away_from_zero_and_not_at_it(estimate, p, flagged):
    length = pd.DataFrame({"criterion": ["c"], "excess_slope": [estimate], "excess_ci_low": [estimate],
                           "excess_ci_high": [estimate], "human_slope": [0.2]})
    tested = family_wise(length, pd.DataFrame(columns=["position_slope"]), pd.DataFrame(columns=["self_preference"]),
                         dialogues=20)
    assert tested == 1 and length["p_adjusted"].iloc[0] == p and length["effect"].iloc[0] == flagged


# -- audit end to end: pairs with labels ----------------------------------------------------------------------------


SYSTEMS = ("a", "b", "c")
PAIRS = [("a", "b"), ("a", "c"), ("b", "c")]


def _pairwise_study(tmp_path: Path) -> tuple[Path, Path, Path, pd.DataFrame, pd.DataFrame]:
    """12 dialogues x 3 pairs judged in both orders (ties and flips among them) and one annotator's scores."""
    rng = np.random.default_rng(4)
    human = {(f"p{d:02d}", s): int(rng.integers(1, 6)) for d in range(12) for s in SYSTEMS}
    items, judgments, pairs = [], [], []
    for d in range(12):
        for i, (x, y) in enumerate(PAIRS):
            item = f"p{d:02d}"
            forward, swapped = rng.choice(["1", "2", "0"], p=[0.5, 0.35, 0.15]), rng.choice(["1", "2", "0"])
            label = forward if forward == swapped else "0"
            items.append({"id": item, "dialogue": "A: hi", "system_1": x, "system_2": y,
                          "candidate_1": "short " * (2 + i + d % 3), "candidate_2": "a longer one " * (1 + d % 4)})
            judgments.append(Judgment(id=item, system=f"{x}|{y}", system_1=x, system_2=y, criterion="overall",
                                      label=label, orders={"forward": forward, "swapped": swapped},
                                      rubric="pairwise_summary@1", model="m"))
            pairs.append({"item_id": item, "system_1": x, "system_2": y, "forward": forward, "swapped": swapped,
                          "label": label, "h1": human[(item, x)], "h2": human[(item, y)]})
    items_path, judgments_path, labels_path = tmp_path / "pairs.jsonl", tmp_path / "j.jsonl", tmp_path / "labels.csv"
    items_path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    judgments_path.write_text("".join(j.to_line() + "\n" for j in judgments), encoding="utf-8")
    labels_path.write_text("item_id,system,annotator,criterion,score\n" + "".join(
        f"{i},{s},ann1,overall,{v}\n" for (i, s), v in human.items()), encoding="utf-8")
    return judgments_path, items_path, labels_path, pd.DataFrame(pairs), pd.DataFrame(human.items())


def test_pairwise_strata_and_self_preference_against_hand_counts(tmp_path):
    judgments, items, labels, pairs, _ = _pairwise_study(tmp_path)
    result = audit(judgments, items, labels, self_systems="a", bootstrap=200)
    f, s = pairs["forward"].to_numpy(), pairs["swapped"].to_numpy()
    first = (f == "1").astype(float) + (s == "2")
    decided = (f != "0").astype(float) + (s != "0")
    gap = np.abs(pairs["h1"] - pairs["h2"]).to_numpy()
    position = result.position.set_index("stratum")
    for low, high, name in position_module.GAP_STRATA:
        mask = (gap >= low) & (gap < high)
        assert position.loc[name, "n"] == mask.sum()
        assert position.loc[name, "first_shown_wins"] == pytest.approx(first[mask].sum() / decided[mask].sum())
    # Self-preference of "a" against the others: win shares (a tie is half) minus a half, and minus the humans'.
    own_first = (pairs["system_1"] == "a").to_numpy()
    usable = own_first | (pairs["system_2"] == "a").to_numpy()
    label = pairs["label"].to_numpy()
    first_wins = np.where(label == "1", 1.0, np.where(label == "2", 0.0, 0.5))
    judge_win = np.where(own_first, first_wins, 1 - first_wins)[usable]
    h1, h2 = pairs["h1"].to_numpy(), pairs["h2"].to_numpy()
    human_first = np.where(h1 > h2, 1.0, np.where(h1 < h2, 0.0, 0.5))
    human_win = np.where(own_first, human_first, 1 - human_first)[usable]
    row = result.self_preference.iloc[0]
    assert row["judge_gap"] == pytest.approx(np.mean(judge_win - 0.5))
    assert row["human_gap"] == pytest.approx(np.mean(human_win - 0.5))
    assert row["self_preference"] == pytest.approx(np.mean(judge_win - human_win))


def test_the_position_strata_split_the_human_gap_at_half_a_point_and_one_and_a_half(tmp_path):
    """The strata are the ones their names say, boundaries included: a gap of exactly 0.5 is in "0.5-1.5", exactly
    1.5 in ">= 1.5", and every labelled pair is in one stratum. A second annotator half a step away on system "a"
    makes gaps of 0.5 and 1.5 occur."""
    judgments, items, labels, pairs, _ = _pairwise_study(tmp_path)
    first = pd.read_csv(labels)
    step = np.where(first["score"] < 5, 1, -1) * (first["system"] == "a")
    pd.concat([first, first.assign(annotator="ann2", score=first["score"] + step)]).to_csv(labels, index=False)
    mean = (first["score"] + step / 2).set_axis(pd.MultiIndex.from_frame(first[["item_id", "system"]]))
    gap = np.array([abs(mean[(i, x)] - mean[(i, y)]) for i, x, y in pairs[["item_id", "system_1", "system_2"]]
                    .itertuples(index=False)])
    assert {0.5, 1.5} <= set(gap)
    position = audit(judgments, items, labels, bootstrap=50).position.set_index("stratum")
    strata = {"human gap < 0.5": gap < 0.5, "human gap 0.5-1.5": (gap >= 0.5) & (gap < 1.5),
              "human gap >= 1.5": gap >= 1.5}
    assert {name: position.loc[name, "n"] for name in strata} == {name: mask.sum() for name, mask in strata.items()}
    assert sum(position.loc[name, "n"] for name in strata) == position.loc["all", "n"] == len(pairs)


def _figures(monkeypatch, module) -> list:
    """The report's figures as matplotlib objects, closed by the caller: html_kit.png is captured, and the module's
    own alias of it when it has one (the shared figures of html_kit call png from there)."""
    from calibration import html_kit

    figures = []

    def keep(figure):
        figures.append(figure)
        return "data:image/png;base64,"

    monkeypatch.setattr(html_kit, "png", keep)
    if hasattr(module, "_png"):
        monkeypatch.setattr(module, "_png", keep)
    return figures


def test_the_pairwise_audit_report_shows_position_overall_and_self_preference(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from calibration.trust import report

    judgments, items, labels, _, _ = _pairwise_study(tmp_path)
    result = audit(judgments, items, labels, self_systems="a", bootstrap=200)
    figures = _figures(monkeypatch, report)
    page = result.report_html()
    assert "<h2>Audit: length and position (pairwise)</h2>" in page and "<h2>Audit: self-preference</h2>" in page
    try:
        position_axis = figures[0].axes[1]
        assert [t.get_text() for t in position_axis.get_yticklabels()] == ["overall"]
        overall = result.position[result.position["stratum"] == "all"].iloc[0]
        drawn = sorted(float(c.lines[0].get_xdata()[0]) for c in position_axis.containers)
        assert drawn == pytest.approx(sorted([overall["flip_rate"], overall["first_shown_wins"]]))
    finally:
        for figure in figures:
            plt.close(figure)


# -- audit: options, warnings, sentences ------------------------------------------------------------------------------


def test_self_systems_must_all_be_named():
    for value in ("alpha,,beta", []):
        with pytest.raises(CalibrationError, match="--self must name one or more systems"):
            audit(STUDY / "judgments.jsonl", STUDY / "items.jsonl", self_systems=value, bootstrap=100)


def test_a_length_threshold_of_zero_is_a_share_and_one_is_not():
    assert audit(STUDY / "judgments.jsonl", STUDY / "items.jsonl", length_threshold=0.0, bootstrap=100).mode
    with pytest.raises(CalibrationError, match="--length-threshold must be a share"):
        audit(STUDY / "judgments.jsonl", STUDY / "items.jsonl", length_threshold=1.0, bootstrap=100)


@pytest.mark.parametrize("ratio, warned", [(0.3, True), (0.35, False), (2.9, False), (3.2, True)])
def test_a_judge_on_another_scale_than_the_humans_is_warned_about(ratio, warned):
    rng = np.random.default_rng(5)
    keys = [(f"d{d}", s) for d in range(10) for s in SYSTEMS]
    quality = rng.normal(3, 1, len(keys))
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "score": 3 + ratio * (q - 3), "status": "ok"}
                          for (i, s), q in zip(keys, quality)])
    items = pd.DataFrame([{"id": i, "system": s, "dialogue": "A: hi", "candidate": "word " * (3 + k % 7)}
                          for k, (i, s) in enumerate(keys)])
    human = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "human": q}
                          for (i, s), q in zip(keys, quality)])
    result = audit(judge, items, human, bootstrap=100)
    assert any("are on different scales" in w for w in result.warnings) == warned


def test_the_sentences_print_the_judges_interval():
    result = audit(STUDY / "judgments.jsonl", STUDY / "items.jsonl", bootstrap=200)
    for row in result.length.itertuples():
        assert np.isfinite(row.judge_slope_ci_low)
        assert f"[{row.judge_slope_ci_low:+.2f}, {row.judge_slope_ci_high:+.2f}]" in result.text()
    assert "[no interval]" not in result.text()


# -- probes ------------------------------------------------------------------------------------------------------------


def test_probes_count_changed_labels_and_say_the_noise_and_the_empty_probe():
    keys = [(f"d{i}", "s") for i in range(8)]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "topic", "score": np.nan, "label": "x",
                           "status": "label"} for i, s in keys])
    probed = judge.assign(label=["y", "x", "x", "x"] * 2)  # a quarter of the labels changed
    noise = pd.DataFrame({"criterion": ["topic"], "changed_share": [0.2]})
    boot = Dialogues(judge["item_id"], 100, 0)
    table = probe_table(judge, {"filler": (probed, keys), "attribution": (judge, keys[:1]),
                                "order": (judge, [("elsewhere", "s")])}, noise, boot, ["topic"])
    table = table.set_index("probe")
    assert table.loc["filler", "changed_share"] == pytest.approx(0.25) and table.loc["attribution", "n"] == 1
    said = dict(zip(table.index, probe_sentences(table.reset_index())))
    assert "leaves 75% of 8 verdicts unchanged" in said["filler"] and "re-run noise changes 20%" in said["filler"]
    assert "leaves 100% of 1 verdicts unchanged" in said["attribution"]
    assert said["order"] == "topic: the order probe has no judgment to compare"
    unknown = probe_table(judge, {"filler": (probed, keys)}, pd.DataFrame(columns=["criterion", "changed_share"]),
                          boot, ["topic"])
    assert "re-run noise unknown" in probe_sentences(unknown)[0]


# -- drift -------------------------------------------------------------------------------------------------------------


def _labels(values):
    return pd.DataFrame([{"item_id": f"d{k}", "system": "s", "criterion": "ok", "score": np.nan, "label": v,
                          "status": "label"} for k, v in enumerate(values)])


def test_binary_labels_get_stuart_maxwell_which_is_mcnemar():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(9)
    old = rng.choice(["yes", "no"], size=120, p=[0.5, 0.5])
    new = np.where((old == "no") & (rng.random(120) < 0.3), "yes", old)
    row = drift(_labels(old), _labels(new)).drift.iloc[0]
    table = pd.crosstab(old, new).reindex(index=["no", "yes"], columns=["no", "yes"], fill_value=0).to_numpy()
    expected = mcnemar(table, exact=False, correction=False).pvalue
    assert row.kind == "labels" and row.stuart_maxwell_p == pytest.approx(expected) and row.verdict == "drift"


def test_an_inconclusive_verdict_asks_for_more_anchors_than_it_has():
    """30 summaries per dialogue: the sample-size formulas ask for about 3 dialogues (the share's: 2.3, the
    shift's: 0.7), fewer than the 6 that left it open; below 10 dialogues no verdict is given (the intervals are not
    shown to hold there), so it asks for the 10 and says why."""
    from test_drift import simulated_runs

    reference, new = simulated_runs(np.random.default_rng(1), n_items=6, n_systems=30, shift=0.1, noise=0.05, k=3)
    row = drift(reference, new).drift.iloc[0]
    assert row.verdict == "inconclusive"
    assert row.dialogues_needed == 10 and np.isnan(row.ci_low)
    assert row.note.startswith("no interval or verdict below 10 anchor dialogues")
    assert "about 10 anchor dialogues would settle it (6 now)" in row.note


@pytest.mark.parametrize("share_margin", [0, 1])
def test_the_share_margin_is_strictly_between_zero_and_one(share_margin):
    reference = _labels(["a", "b"] * 10)
    with pytest.raises(CalibrationError, match=f"--share-margin must be between 0 and 1, got {share_margin}"):
        drift(reference, reference, share_margin=share_margin)


# -- select ------------------------------------------------------------------------------------------------------------


def test_select_prints_the_criteria_in_the_order_asked():
    rng = np.random.default_rng(6)
    keys = [(f"d{d:02d}", f"s{j}", c) for d in range(12) for j in range(4) for c in ("zeta", "alpha")]
    truth = rng.normal(3, 1, len(keys))
    human = pd.DataFrame([{"item_id": i, "system": s, "annotator": "a1", "criterion": c, "score": t}
                          for (i, s, c), t in zip(keys, truth)])
    judges = {name: pd.DataFrame([{"item_id": i, "system": s, "criterion": c, "score": t + rng.normal(0, sd)}
                                  for (i, s, c), t in zip(keys, truth)]) for name, sd in (("j1", 0.5), ("j2", 1.5))}
    text = select(human, judges, criteria=["zeta", "alpha"], bootstrap=100).text()
    assert text.index("\nzeta:") < text.index("\nalpha:")


# -- the CLI's defaults are the functions' -------------------------------------------------------------------------


# audit's --seed is the model's (its bootstrap seed is --bootstrap-seed, the function's `seed`).
@pytest.mark.parametrize("verb, function, argv, renamed", [
    ("audit", audit, ["--judgments", "j", "--items", "i"], {"bootstrap_seed": "seed", "seed": None}),
    ("drift", drift, ["--reference", "r", "--judgments", "j"], {}),
    ("select", select, ["--human", "h", "--judge", "a=b"], {}),
])
def test_the_cli_defaults_are_the_functions_defaults(verb, function, argv, renamed):
    from judge.cli import build_parser

    args = vars(build_parser().parse_args([verb, *argv]))
    defaults = {name: p.default for name, p in inspect.signature(function).parameters.items()
                if p.default is not inspect.Parameter.empty}
    compared = 0
    for dest, value in args.items():
        name = renamed.get(dest, dest)
        if name is not None and name in defaults and value is not None and not callable(value):
            assert value == defaults[name], (verb, dest)
            compared += 1
    assert compared >= 3


# -- gaps the second mutation draw (seed 2) found -----------------------------------------------------------------
def test_drift_kappa_rounds_mean_scores_half_up_and_is_defined_for_two_values():
    """Weighted kappa of two runs reads a mean of samples at its nearest scale point, halves up (2.47 is 2, 2.5 is
    3), as scikit-learn computes it on those points; two distinct values are enough for a kappa."""
    from sklearn.metrics import cohen_kappa_score

    from calibration.trust.drift import _kappa

    reference = [1, 2, 3, 1, 2, 3, 2, 1]
    assert _kappa(reference, [1, 2.47, 3, 1, 2.47, 3, 2, 1], numeric=True) == pytest.approx(1.0)
    halves = [1, 2.5, 3, 1, 2.5, 3, 2, 1]
    expected = cohen_kappa_score(reference, [1, 3, 3, 1, 3, 3, 2, 1], weights="quadratic")
    assert _kappa(reference, halves, numeric=True) == pytest.approx(expected) and expected < 1
    assert _kappa([0, 1, 0, 1], [0, 1, 0, 1], numeric=True) == pytest.approx(1.0)  # binary scores
    assert np.isnan(_kappa([1, 1, 1], [1, 1, 1], numeric=True))  # one value: undefined


def test_select_without_a_judge_is_refused_by_the_parser(capsys):
    from judge.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["select", "--human", "examples/study/labels.csv"])
    assert stopped.value.code == 2 and "the following arguments are required: --judge" in capsys.readouterr().err


def test_the_report_has_a_block_position_section_only_for_a_block_audit(tmp_path):
    from test_audit_cli import write_items, write_judgments

    items = write_items(tmp_path / "items.jsonl")
    block = audit(write_judgments(tmp_path / "block.jsonl", block=True), items, bootstrap=100).report_html()
    pointwise = audit(write_judgments(tmp_path / "point.jsonl"), items, bootstrap=100).report_html()
    assert "Audit: position in the block" in block and 'alt="position slope"' in block
    assert "Audit: position in the block" not in pointwise


def test_a_probe_sample_of_one_candidate_is_allowed(stub_server, tmp_path, capsys):
    from test_audit_cli import _audit_probes, _judge
    from test_audit_cli import write_items as items_file

    items = items_file(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler", "--probe-sample", "1") == 0
    probes = pd.read_csv(tmp_path / "audit" / "probes.csv")
    assert set(probes["n"]) == {1}  # one perturbed candidate per criterion


# -- gaps the second mutation draw (seed 2) left, round two ---------------------------------------------------------
def test_an_item_with_an_empty_dialogue_is_measured_not_refused():
    """Lengths are all the audit reads: an empty (or blank) dialogue is no reason to refuse the item."""
    from calibration.items import read_items

    frame = read_items(pd.DataFrame([{"id": "d1", "system": "a", "dialogue": "", "candidate": "one two three"},
                                     {"id": "d1", "system": "b", "dialogue": "   ", "candidate": "four five"},
                                     {"id": "d2", "system": "a", "dialogue": "A: hi", "candidate": "six"}]))
    assert frame.set_index(["item_id", "system"])["words"].to_dict() == {("d1", "a"): 3, ("d1", "b"): 2,
                                                                         ("d2", "a"): 1}


@pytest.mark.parametrize("text, unit, length", [
    ("订单退款 delayed", "words", 2),  # 4 of 11 letters unspaced: a minority, words
    ("中文 ab", "words", 2),  # exactly half: not most, words
    ("中文中 ab", "characters", 5),  # 3 of 5: most, characters
])
def test_the_length_unit_is_characters_only_when_most_letters_are_unspaced(text, unit, length):
    from calibration.items import length_unit, read_items

    assert length_unit([text]) == unit
    frame = read_items([{"id": "d1", "system": "a", "dialogue": "A: hi", "candidate": text}])
    assert frame.attrs["length_unit"] == unit and frame["words"].iloc[0] == length


def test_a_share_of_one_decided_pair_is_its_value_not_undefined():
    """A ratio whose denominator sums to 1 (one decided pair) or less (fractional weights) is defined; only an
    empty denominator is not."""
    boot = Dialogues(["d1", "d2"], 200, 0)
    index = boot.index(["d1", "d2"])
    assert boot.ratio(index, [1.0, 0.0], [1.0, 0.0])[0] == 1.0
    assert boot.ratio(index, [0.5, 0.0], [0.5, 0.25])[0] == pytest.approx(2 / 3)
    assert np.isnan(boot.ratio(index, [0.0, 0.0], [0.0, 0.0])[0])
    value, low, high = boot.share(index, [1.0, 0.0], [1.0, 0.0])
    assert value == 1.0 and 0 < low < 1 and high == pytest.approx(1.0)


def test_an_interval_from_two_defined_replicates_is_their_expanded_percentiles():
    """Replicates undefined in most resamples: two defined ones still give an interval (the expanded percentile one
    over 4 dialogues: sqrt(4/3) t_3 in place of z), one does not."""
    from scipy import stats

    boot = Dialogues(["d1", "d2", "d3", "d4"], 200, 0)
    tail = 100 * stats.norm.sf(np.sqrt(4 / 3) * stats.t.ppf(0.975, 3))
    low, high = boot.interval(np.array([1.0, np.nan, 3.0, np.inf]))
    assert (low, high) == pytest.approx(tuple(np.percentile([1.0, 3.0], [tail, 100 - tail])))
    assert np.isnan(boot.interval(np.array([1.0, np.nan]))).all()


def test_pairs_exactly_at_the_length_threshold_are_not_apart():
    """'Lengths differ by more than the threshold': 10 against 9 words is 10% apart, not more than 10%."""
    from calibration.trust.length import pairwise_length

    rows, lengths = [], []
    for d in range(12):
        shorter = 9 if d < 6 else 8  # 10% apart (left out), then 20% apart (counted)
        rows.append({"item_id": f"p{d}", "system_1": "a", "system_2": "b", "criterion": "c",
                     "label": "1" if d % 3 else "2"})
        lengths += [{"item_id": f"p{d}", "system": "a", "words": 10}, {"item_id": f"p{d}", "system": "b",
                                                                       "words": shorter}]
    judge, words = pd.DataFrame(rows), pd.DataFrame(lengths)
    row = pairwise_length(judge, words, None, Dialogues(judge["item_id"], 200, 0), "c", threshold=0.1)
    assert row["n_pairs"] == 6 and row["n_dialogues"] == 6
    assert row["prefers_longer"] == pytest.approx(np.mean([d % 3 != 0 for d in range(6, 12)]))


def test_drift_csv_has_the_tables_columns_and_no_index(tmp_path):
    from test_drift import simulated_runs

    reference, new = simulated_runs(np.random.default_rng(2), n_items=12, n_systems=3)
    result = drift(reference, new, bootstrap=100)
    for name, table in (("drift.csv", result.drift), ("provenance.csv", result.provenance)):
        (tmp_path / name).write_text(result.files()[name], encoding="utf-8")
        assert pd.read_csv(tmp_path / name).columns.tolist() == table.columns.tolist(), name


def test_drift_measures_the_agreement_with_humans_from_three_labelled_summaries():
    """Three labelled judgments are enough for a Pearson r (scipy's), two are not."""
    from scipy.stats import pearsonr
    from test_drift import simulated_runs

    reference, new = simulated_runs(np.random.default_rng(3), n_items=12, n_systems=3, shift=0.3)
    keys = reference[["item_id", "system"]].iloc[[0, 4, 8]]
    human = keys.assign(annotator="ann1", criterion="coherence", score=[2.0, 5.0, 3.0])
    row = drift(reference, new, human, bootstrap=100).drift.iloc[0]
    ref = reference.set_index(["item_id", "system"]).loc[list(map(tuple, keys.to_numpy())), "score"].to_numpy()
    now = new.set_index(["item_id", "system"]).loc[list(map(tuple, keys.to_numpy())), "score"].to_numpy()
    assert row.human_r_reference == pytest.approx(pearsonr(ref, human["score"]).statistic)
    assert row.human_r_new == pytest.approx(pearsonr(now, human["score"]).statistic)
    two = drift(reference, new, human.iloc[:2], bootstrap=100).drift.iloc[0]
    assert np.isnan(two.human_r_reference)


def test_the_pointwise_audit_report_leaves_out_columns_with_no_value(monkeypatch):
    """Without human labels the length table has no human or excess slope, and a pointwise audit no pairwise
    columns: the report's table shows only the columns with a value."""
    from calibration.trust import report

    figures = _figures(monkeypatch, report)
    result = audit(STUDY / "judgments.jsonl", STUDY / "items.jsonl", bootstrap=100)
    page = result.report_html()
    import matplotlib.pyplot as plt

    for figure in figures:
        plt.close(figure)
    table = page.split("<h2>Audit: length</h2>")[1].split("<h2>")[0]
    assert "<th>judge_slope</th>" in table
    for column in ("human_slope", "excess_slope", "prefers_longer", "n_pairs"):
        assert result.length[column].isna().all() and f"<th>{column}</th>" not in table


def _select_data(rng, dialogues, systems, drop=0, noise=(0.5, 1.5)):
    """Human labels and two judges (j1, j2) whose scores are the truth plus noise of these SDs."""
    keys = [(f"d{d:02d}", f"s{j}") for d in range(dialogues) for j in range(systems)]
    truth = rng.normal(3, 1, len(keys))
    human = pd.DataFrame([{"item_id": i, "system": s, "annotator": "a1", "criterion": "c", "score": t}
                          for (i, s), t in zip(keys, truth)])
    judges = {name: pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "score": t + rng.normal(0, sd)}
                                  for (i, s), t in zip(keys, truth)]) for name, sd in zip(("j1", "j2"), noise)}
    judges["j2"] = judges["j2"].iloc[:len(keys) - drop]
    return human, judges


def test_select_says_which_judge_scored_more_than_the_compared_summaries():
    human, judges = _select_data(np.random.default_rng(6), 12, 4, drop=3)
    lines = select(human, judges, bootstrap=100).text().splitlines()
    line = {name: next(x for x in lines if x.strip(" *").startswith(name)) for name in ("j1", "j2", "jury (all")}
    assert "c: 45 summaries judged by every judge" in lines
    assert line["j1"].endswith("(judged 48)") and "(judged" not in line["j2"] and "(judged" not in line["jury (all"]


def test_select_at_summary_level_compares_dialogues_of_two_systems():
    """Two systems per dialogue: each dialogue's correlation is the sign of the judge's difference times the
    humans'; all 12 dialogues vary and are compared, with intervals and a best set."""
    human, judges = _select_data(np.random.default_rng(6), 12, 2)
    result = select(human, judges, bootstrap=100)
    rows = result.selection.set_index("judge")
    h = human.pivot(index="item_id", columns="system", values="score")
    for name, frame in judges.items():
        j = frame.pivot(index="item_id", columns="system", values="score")
        signs = np.sign((j["s0"] - j["s1"]) * (h["s0"] - h["s1"]))
        assert rows.loc[name, "estimate"] == pytest.approx(signs.mean())
        assert rows.loc[name, "n_compared"] == 12 and np.isfinite(rows.loc[name, "ci_low"])
    assert not isinstance(rows["note"].iloc[0], str) or not rows["note"].iloc[0]


def test_the_length_controlled_interval_does_not_depend_on_the_systems_names():
    """4 dialogues, 5 systems, summaries missing: some resamples confound length with the systems, where the length
    slope cannot be told; those are left out, so the interval is the same whichever system is the baseline (renaming
    the systems in reverse order moved a bound by 0.09 when they were kept)."""
    from calibration.trust.length import length_controlled_means

    rng = np.random.default_rng(14)
    rows = [(f"d{d}", f"s{s}", float(rng.integers(5, 60))) for d in range(4) for s in range(5) if rng.random() >= 0.2]
    words = pd.DataFrame(rows, columns=["item_id", "system", "words"])
    judge = words[["item_id", "system"]].assign(criterion="c", status="ok",
                                                score=3 + 0.02 * words["words"] + rng.normal(0, 1, len(words)))
    renamed = {f"s{k}": f"s{4 - k}" for k in range(5)}

    def means(judge, words):
        table = length_controlled_means(judge, words.assign(item_system=words["system"]), None,
                                        Dialogues(judge["item_id"], 400, 0), "c")
        return table.set_index("system").sort_index()[["length_controlled", "lc_ci_low", "lc_ci_high"]]

    plain = means(judge, words)
    swapped = means(judge.assign(system=judge["system"].map(renamed)),
                    words.assign(system=words["system"].map(renamed)))
    swapped.index = swapped.index.map(renamed)
    assert np.isfinite(plain.to_numpy()).all()
    pd.testing.assert_frame_equal(plain, swapped.sort_index(), atol=1e-9, rtol=0)


# -- gaps the third mutation draw (seed 3) found ------------------------------------------------------------------
@pytest.mark.parametrize("dialogues", [2, 3, 20])
def test_an_effects_p_value_is_read_from_its_expanded_interval_from_two_dialogues_on(dialogues):
    """The interval is estimate +- t_{n-1} se (se with the unbiased variance): its half-width gives se, and the
    p-value is scipy's two-sided t_{n-1} one, from 2 dialogues (1 degree of freedom) on; below, none."""
    from scipy import stats

    from calibration.trust.family import _p_from_interval

    se = 0.2 / stats.t.ppf(0.975, dialogues - 1)  # the interval is t_{n-1} x the unbiased se (expansion inside)
    expected = 2 * stats.t.sf(0.5 / se, dialogues - 1)
    assert _p_from_interval(0.5, 0.3, 0.7, dialogues) == pytest.approx(expected)
    assert 0 < expected < 0.5
    assert np.isnan(_p_from_interval(0.5, 0.3, 0.7, 1))


def test_the_audit_figures_draw_each_reference_line_at_its_null(tmp_path, monkeypatch):
    """The pairwise figure's dashed line is at 50% (its label says so) on both panels, the self-preference one at 0
    (no preference)."""
    import matplotlib.pyplot as plt

    from calibration.trust import report

    judgments, items, labels, _, _ = _pairwise_study(tmp_path)
    result = audit(judgments, items, labels, self_systems="a", bootstrap=200)
    figures = _figures(monkeypatch, report)
    result.report_html()
    try:
        def dashed(axis):
            return [float(line.get_xdata()[0]) for line in axis.lines if line.get_linestyle() == "--"]

        pairwise, own = figures
        assert [dashed(axis) for axis in pairwise.axes] == [[0.5], [0.5]]
        assert dashed(own.axes[0]) == [0.0]
    finally:
        for figure in figures:
            plt.close(figure)


@pytest.mark.parametrize("sample", ["0", "-3"])
def test_a_probe_sample_of_no_candidate_is_refused(tmp_path, capsys, sample):
    from judge.cli import main

    code = main(["audit", "--judgments", str(STUDY / "judgments.jsonl"), "--items", str(STUDY / "items.jsonl"),
                 "--probe", "filler", "--probe-sample", sample, "--rubric", "dialsummeval", "--output-dir",
                 str(tmp_path / "audit"), "--bootstrap", "100"])
    assert code == 2
    assert capsys.readouterr().err.strip().endswith("--probe-sample must be a positive whole number")
    assert not (tmp_path / "audit").exists()


def test_the_order_probe_runs_with_another_seed_a_score_run_could_use(stub_server, tmp_path):
    """The order probe reshuffles each block with another seed than the audited run's (0, the default), and one that
    `judge score --seed` accepts (numpy's generators take no negative seed), so the probe run can be made again."""
    from test_audit_cli import _audit_probes, _judge, write_items

    from calibration.options import seed_type

    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl", "--mode", "block")
    assert _audit_probes(stub_server, tmp_path, judgments, items, "order") == 0
    audited = {json.loads(line)["fingerprint"]["seed"] for line in judgments.read_text().splitlines()}
    probed = {json.loads(line)["fingerprint"]["seed"]
              for line in (tmp_path / "audit" / "probe_order.jsonl").read_text().splitlines()}
    assert audited == {0} and len(probed) == 1
    seed = probed.pop()
    assert seed != 0 and seed_type(str(seed)) == seed


def test_selects_p_value_at_summary_level_is_the_expanded_paired_t_over_dialogues():
    """Two judges at summary level: the worse one's p-value is the two-sided t_{n-1} test of the difference of their
    mean per-dialogue correlations (scipy's pearsonr per dialogue), its standard error the paired bootstrap SD over
    the same resampled dialogues (numpy's draws from the seed) widened by sqrt(n / (n - 1)): 15 dialogues, not a z."""
    from scipy import stats

    rng = np.random.default_rng(6)
    dialogues, systems, resamples = 15, 4, 400
    human, judges = _select_data(rng, dialogues, systems, noise=(0.6, 1.2))
    rows = select(human, judges, bootstrap=resamples, seed=3).selection.set_index("judge")
    h = human.pivot(index="item_id", columns="system", values="score")
    per_dialogue = {}
    for name, frame in judges.items():
        j = frame.pivot(index="item_id", columns="system", values="score").loc[h.index, h.columns]
        per_dialogue[name] = np.array([stats.pearsonr(j.loc[d], h.loc[d]).statistic for d in h.index])
    draws = np.random.default_rng(3).integers(0, dialogues, size=(resamples, dialogues))
    counts = np.array([np.bincount(row, minlength=dialogues) for row in draws], float)
    replicates = {name: counts @ r / counts.sum(axis=1) for name, r in per_dialogue.items()}
    difference = per_dialogue["j1"].mean() - per_dialogue["j2"].mean()
    se = (replicates["j1"] - replicates["j2"]).std(ddof=1) * np.sqrt(dialogues / (dialogues - 1))
    assert rows.loc["j1", "estimate"] == pytest.approx(per_dialogue["j1"].mean())
    assert rows.loc["j2", "p_adjusted"] == pytest.approx(2 * stats.t.sf(abs(difference) / se, dialogues - 1))
    assert np.isnan(rows.loc["j1", "p_adjusted"])


def test_a_long_score_file_is_read_from_its_score_column_whatever_else_it_has(tmp_path):
    """A long-form CSV (criterion, score) that also keeps a column named after the judge (its raw answers) is read
    from `score`; the column named NAME is read only from a wide file, which has no `score` column."""
    human, judges = _select_data(np.random.default_rng(7), 12, 3)
    long_form = judges["j1"].assign(j1=lambda f: "answer: " + f["score"].round(1).astype(str))
    long_form.to_csv(tmp_path / "long.csv", index=False)
    wide = judges["j2"].rename(columns={"score": "j2"}).drop(columns="criterion")
    wide.to_csv(tmp_path / "wide.csv", index=False)
    from_files = select(human, {"j1": tmp_path / "long.csv", "j2": tmp_path / "wide.csv"}, scale=None,
                        bootstrap=100).selection.set_index("judge")
    from_frames = select(human, judges, bootstrap=100).selection.set_index("judge")
    for name in ("j1", "j2"):
        assert from_files.loc[name, "estimate"] == pytest.approx(from_frames.loc[name, "estimate"])


@pytest.mark.parametrize("low, high, printed", [(0.1, 0.2, "[+0.10, +0.20]"), (-0.25, 0.0, "[-0.25, +0.00]"),
                                                (0.1, np.nan, "[no interval]"), (np.nan, 0.2, "[no interval]"),
                                                (np.nan, np.nan, "[no interval]"), (-np.inf, 0.2, "[no interval]")])
def test_an_interval_is_printed_only_when_both_bounds_are_numbers(low, high, printed):
    """Found by the seed-7 draw (after it): half an interval printed as "[+0.10, nan]" passed."""
    from calibration.trust.audit import _ci

    assert _ci(low, high) == printed


def test_the_pairwise_report_figure_titles_each_panel_with_its_own_effect(monkeypatch):
    """The audit report's pairwise figure: the left panel is the length preference, the right one the position
    effects, each titled and labelled as such (the figure is caught before it becomes a PNG)."""
    from calibration.trust import report

    caught = {}
    monkeypatch.setattr(report, "_png", lambda figure: caught.setdefault("figure", figure) and "png")
    length = pd.DataFrame({"criterion": ["overall"], "prefers_longer": [0.6], "prefers_longer_ci_low": [0.5],
                           "prefers_longer_ci_high": [0.7], "human_prefers_longer": [np.nan],
                           "human_prefers_longer_ci_low": [np.nan], "human_prefers_longer_ci_high": [np.nan]})
    position = pd.DataFrame({"criterion": ["overall"], "stratum": ["all"], "flip_rate": [0.2], "ci_low": [0.1],
                             "ci_high": [0.3], "first_shown_wins": [0.55], "first_shown_ci_low": [0.45],
                             "first_shown_ci_high": [0.65]})
    report.pairwise_figure(length, position)
    left, right = caught["figure"].axes[:2]
    assert left.get_title() == "Prefers the longer candidate" and right.get_title() == "Position"
    assert left.get_xlabel() == "share of decided pairs (95% CI)"
    assert right.get_xlabel() == "share (95% CI); dashed: 50%"
