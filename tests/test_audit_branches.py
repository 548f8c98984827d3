"""The audit's rarely taken branches (calibration.trust.audit) pinned by properties and independent computations
rather than one planted bug at a time: the p-value read back from an interval (scipy's t test; a probability
whatever the interval); plant and recover (a planted length taste, own-system bonus or position effect moves its
estimate, every replicate and so the interval by exactly itself; the judge's units scale only judge-side numbers);
length-controlled means against statsmodels' fixed-effects OLS; mirrored pairs; every statistic with nothing to
measure; the words of the sentences, the flags they count and the CSVs the audit writes.

Written after fresh draws of benchmarks/mutation.py showed survivors spread thin over these branches."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from test_audit import simulate
from test_trust_mutants import _pairwise_study

from calibration.trust.audit import audit, sentences
from calibration.trust.dialogues import Dialogues
from calibration.trust.family import _p_from_interval
from calibration.trust.length import CONTROLLED_COLUMNS, length_controlled_means, length_slopes, pairwise_length
from calibration.trust.position import block_position, pairwise_position
from calibration.trust.self_preference import NO_LABELS_NOTE, pairwise_self_preference, self_preference

# -- the p-value read back from a printed interval -------------------------------------------------------------------

def _t_test_p(estimate, low, high, n, confidence=0.95):
    """The two-sided t test whose interval (t_{n-1} x the unbiased se) is (low, high): se = half-width / t_{n-1}."""
    se = (high - low) / (2 * stats.t.ppf(0.5 + confidence / 2, n - 1))
    return 2 * stats.t.sf(abs(estimate) / se, n - 1)


@pytest.mark.parametrize("estimate, half, n, confidence", [
    (0.3, 0.4, 2, 0.95), (0.3, 0.4, 3, 0.95), (-0.3, 0.2, 12, 0.95), (0.05, 0.5, 40, 0.95), (1.0, 0.1, 7, 0.9),
    (0.0, 0.3, 10, 0.95), (-2.0, 1.0, 25, 0.8)])
def test_a_p_value_is_the_t_test_its_interval_implies(estimate, half, n, confidence):
    p = _p_from_interval(estimate, estimate - half, estimate + half, n, confidence)
    assert p == pytest.approx(_t_test_p(estimate, estimate - half, estimate + half, n, confidence), rel=1e-9)
    assert (p < 1 - confidence) == (abs(estimate) > half)
    assert 0.0 < p <= 1.0


@pytest.mark.parametrize("n", [2, 3, 5, 20, 200])
@pytest.mark.parametrize("below, above", [(1.0, 1.0), (0.4, 1.5), (2.0, 0.3)])  # symmetric, and skewed percentiles
def test_a_flag_never_contradicts_its_interval(n, below, above):
    """p < 0.05 exactly when the printed 95% interval excludes 0, on both sides of the boundary, whatever the
    interval's asymmetry (the p-value once read the se without the sqrt(n / (n - 1)) expansion and flagged
    estimates up to 29% of a half-width inside the interval at 2 dialogues)."""
    for sign in (1, -1):
        for distance in (0.999, 1.001):  # the estimate's distance to 0 over its distance to the bound on 0's side
            toward, away = (below, above) if sign > 0 else (above, below)
            estimate = sign * distance * toward
            p = _p_from_interval(estimate, estimate - below, estimate + above, n)
            assert (p < 0.05) == (distance > 1), (n, below, above, sign, distance, p)


@pytest.mark.parametrize("estimate, low, high, n", [
    (0.0, 0.0, 0.0, 10), (0.4, 0.4, 0.4, 10), (-0.4, -0.4, -0.4, 3), (0.0, 0.1, 0.1, 5), (0.2, 0.3, 0.1, 8),
    (0.0, -1e-300, 1e-300, 4), (1e-12, -1.0, 1.0, 2)])
def test_a_p_value_is_a_probability_whatever_the_interval(estimate, low, high, n):
    """A zero-width (or reversed) interval has no standard error: a nonzero estimate is certain (p = 0), a zero
    estimate is no evidence (p = 1); never a number outside [0, 1]."""
    p = _p_from_interval(estimate, low, high, n)
    assert 0.0 <= p <= 1.0
    if high - low <= 0:
        assert p == (0.0 if estimate != 0 else 1.0)
    # Symmetry: the sign of the effect does not change its p-value.
    assert _p_from_interval(-estimate, -high, -low, n) == pytest.approx(p, abs=1e-15)


@pytest.mark.parametrize("estimate, low, high, n", [
    (0.1, 0.0, 0.2, 1), (0.1, 0.0, 0.2, 0), (math.nan, 0.0, 0.2, 10), (0.1, math.nan, 0.2, 10),
    (0.1, 0.0, math.inf, 10), (math.inf, 0.0, 0.2, 10)])
def test_no_p_value_from_an_undefined_interval_or_a_single_dialogue(estimate, low, high, n):
    assert math.isnan(_p_from_interval(estimate, low, high, n))


# -- the shares' interval when the bootstrap gives none --------------------------------------------------------------

def test_a_share_with_fewer_than_two_defined_replicates_has_no_interval():
    """One resample: no percentile interval, and no binomial widening of a missing one (an interval that cannot
    hold is not printed). With two or more the interval holds the share."""
    ids = ["a", "b", "c", "d"]
    one = Dialogues(ids, 1, 0)
    value, low, high = one.share(one.index(ids), [1, 0, 1, 0], [1, 1, 1, 1])
    assert value == 0.5 and math.isnan(low) and math.isnan(high)
    many = Dialogues(ids, 200, 0)
    value, low, high = many.share(many.index(ids), [1, 0, 1, 0], [1, 1, 1, 1])
    assert value == 0.5 and 0.0 <= low < 0.5 < high <= 1.0


# -- the words of the sentences --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pairwise_study(tmp_path_factory):
    return _pairwise_study(tmp_path_factory.mktemp("pairs"))


@pytest.mark.parametrize("labelled", [False, True])
def test_a_pairwise_self_preference_is_said_in_win_share_never_in_points(pairwise_study, labelled):
    judgments, items, labels, _, _ = pairwise_study
    result = audit(judgments, items, labels if labelled else None, self_systems="a", bootstrap=100)
    row = result.self_preference.iloc[0]
    assert np.isfinite(row["judge_gap"]) and np.isfinite(row["self_preference"]) == labelled
    (said,) = [s for s in sentences(result) if "the judge rates a " in s]
    assert "of win share" in said and "points" not in said
    if labelled:
        assert "relative to the other systems, than humans do" in said and "annotators" not in said


# -- plant and recover: every estimate is linear in the judge's scores -------------------------------------------
#
# Adding c times a covariate to the judge's scores (c x standardised length, c x the shown letter's index, c x being
# an own system) moves the estimate of that covariate's effect by exactly c, each bootstrap or jackknife replicate
# by exactly c (so the interval by c), and leaves the humans' numbers alone; multiplying the judge's scores by a
# scales every judge-side number by a (a < 0 reflects the interval). These hold for each formula in the audit
# whatever the data, so a changed constant, a dropped term or a swapped operand in any of them breaks one.


@pytest.fixture(scope="module")
def study():
    judge, words, human, _ = simulate(np.random.default_rng(5), dialogues=14, judge_length=0.4, human_length=0.1,
                                      self_bonus=0.3, position=0.1)
    units = judge.merge(words[["item_id", "system", "words"]])
    centred = units["words"] - units.groupby("item_id")["words"].transform("mean")
    z = centred / np.sqrt((centred ** 2).sum() / (len(units) - units["item_id"].nunique()))
    letter = units["position"].map(lambda p: float(ord(p) - ord("A")))
    letter = letter - letter.groupby(units["item_id"]).transform("mean")
    return judge, words, human, z.to_numpy(), letter.to_numpy(), (units["system"] == "sys0").to_numpy(float)


def _boot(judge):
    return Dialogues(judge["item_id"], 60, 4)


LENGTH = ["judge_slope", "judge_slope_ci_low", "judge_slope_ci_high", "excess_slope", "excess_ci_low",
          "excess_ci_high"]


@pytest.mark.parametrize("c", [0.7, -0.35])
def test_a_planted_length_taste_moves_the_judges_slope_and_excess_by_exactly_itself(study, c):
    judge, words, human, z, _, _ = study
    base = length_slopes(judge, words, human, _boot(judge), "c")
    planted = length_slopes(judge.assign(score=judge["score"] + c * z), words, human, _boot(judge), "c")
    assert np.isfinite([base[k] for k in LENGTH]).all()
    for key in LENGTH:
        assert planted[key] == pytest.approx(base[key] + c, abs=1e-9), key
    for key in ("human_slope", "human_slope_ci_low", "human_slope_ci_high", "length_sd_words", "n_summaries"):
        assert planted[key] == pytest.approx(base[key], abs=1e-12), key
    assert base["judge_slope_ci_low"] < base["judge_slope"] < base["judge_slope_ci_high"]


@pytest.mark.parametrize("a", [2.5, -1.0])
def test_the_judges_units_scale_every_judge_side_number_and_no_human_one(study, a):
    judge, words, human, _, _, _ = study
    base = length_slopes(judge, words, human, _boot(judge), "c")
    scaled = length_slopes(judge.assign(score=a * judge["score"] + 4.0), words, human, _boot(judge), "c")
    for estimate, low, high in (LENGTH[:3], LENGTH[3:]):
        ends = sorted([a * base[low], a * base[high]])
        assert [scaled[estimate], scaled[low], scaled[high]] == pytest.approx([a * base[estimate], *ends])
    assert scaled["human_slope"] == pytest.approx(base["human_slope"])
    # Length in other units (characters, say) is the same standardised length: nothing moves.
    longer = length_slopes(judge, words.assign(words=words["words"] * 5.5 + 0), human, _boot(judge), "c")
    for key in LENGTH + ["human_slope"]:
        assert longer[key] == pytest.approx(base[key], abs=1e-9), key


@pytest.mark.parametrize("c", [0.5, -0.8])
def test_a_planted_own_system_bonus_moves_the_self_preference_by_exactly_itself(study, c):
    judge, _, human, _, _, own = study
    base = self_preference(judge, human, _boot(judge), "c", ["sys0"])
    planted = self_preference(judge.assign(score=judge["score"] + c * own), human, _boot(judge), "c", ["sys0"])
    for key in ("judge_gap", "judge_gap_ci_low", "judge_gap_ci_high", "self_preference", "ci_low", "ci_high"):
        assert np.isfinite(base[key]) and planted[key] == pytest.approx(base[key] + c, abs=1e-9), key
    for key in ("human_gap", "human_gap_ci_low", "human_gap_ci_high", "n_dialogues", "excess_dialogues"):
        assert planted[key] == pytest.approx(base[key], abs=1e-12), key
    # The judge gap is the mean over dialogues of mean(own) - mean(others) (pandas), the human gap likewise.
    frame = judge.merge(human)
    per = frame.assign(own=frame["system"] == "sys0").groupby(["item_id", "own"])[["score", "human"]].mean()
    gaps = per.xs(True, level="own") - per.xs(False, level="own")
    assert base["judge_gap"] == pytest.approx(gaps["score"].mean()) and base["human_gap"] == pytest.approx(
        gaps["human"].mean())
    # A constant per dialogue (a harder dialogue) changes no gap.
    shift = judge["item_id"].map({d: k * 0.3 for k, d in enumerate(sorted(judge["item_id"].unique()))})
    moved = self_preference(judge.assign(score=judge["score"] + shift), human, _boot(judge), "c", ["sys0"])
    for key in ("judge_gap", "judge_gap_ci_low", "judge_gap_ci_high", "self_preference", "ci_low", "ci_high"):
        assert moved[key] == pytest.approx(base[key], abs=1e-9), key


@pytest.mark.parametrize("c", [0.25, -0.6])
def test_a_planted_position_effect_moves_the_block_slope_by_exactly_itself(study, c):
    judge, _, _, _, letter, _ = study
    base = block_position(judge, _boot(judge), "c")
    planted = block_position(judge.assign(score=judge["score"] + c * letter), _boot(judge), "c")
    for key in ("position_slope", "position_slope_ci_low", "position_slope_ci_high"):
        assert planted[key] == pytest.approx(base[key] + c, abs=1e-9), key
    # The slope is least squares of the score on the letter's index with a dummy per dialogue (numpy lstsq).
    dummies = pd.get_dummies(judge["item_id"]).to_numpy(float)
    shown = judge["position"].map(lambda p: float(ord(p) - ord("A"))).to_numpy()
    slope = np.linalg.lstsq(np.column_stack([shown, dummies]), judge["score"].to_numpy(), rcond=None)[0][0]
    assert base["position_slope"] == pytest.approx(slope) and base["n"] == len(judge)
    assert base["effect"] == (base["position_slope_ci_low"] > 0 or base["position_slope_ci_high"] < 0)


def test_length_controlled_means_are_the_fixed_effects_fit_and_a_length_taste_moves_no_ranking(study):
    """statsmodels' OLS of score on dialogue and system dummies and standardised length gives beta; each system's
    length-controlled mean is its raw mean minus beta times its mean standardised length. Adding c x length to the
    judge's scores moves beta by c and no length-controlled mean (the planted taste is what is controlled for)."""
    import statsmodels.formula.api as smf

    judge, words, human, z, _, _ = study
    frame = judge.assign(z=z)
    fit = smf.ols("score ~ C(item_id) + C(system) + z", data=frame).fit()
    table = length_controlled_means(judge, words, human, _boot(judge), "c").set_index("system")
    assert list(table.columns) == CONTROLLED_COLUMNS[:1] + CONTROLLED_COLUMNS[2:]
    raw, mean_z = frame.groupby("system")["score"].mean(), frame.groupby("system")["z"].mean()
    expected = raw - fit.params["z"] * mean_z
    assert table["raw_mean"].to_dict() == pytest.approx(raw.to_dict())
    assert table["length_controlled"].to_dict() == pytest.approx(expected.to_dict())
    assert table["mean_length_z"].to_dict() == pytest.approx(mean_z.to_dict())
    assert table["raw_rank"].to_dict() == raw.rank(ascending=False, method="min").astype(int).to_dict()
    assert table["lc_rank"].to_dict() == expected.rank(ascending=False, method="min").astype(int).to_dict()
    assert (table["rank_changed"] == (table["raw_rank"] != table["lc_rank"])).all()
    assert table["human_mean"].to_dict() == pytest.approx(human.groupby("system")["human"].mean().to_dict())
    assert (table["raw_ci_low"] < table["raw_mean"]).all() and (table["raw_mean"] < table["raw_ci_high"]).all()
    planted = length_controlled_means(judge.assign(score=judge["score"] + 0.9 * z), words, human, _boot(judge),
                                      "c").set_index("system")
    for key in ("length_controlled", "lc_ci_low", "lc_ci_high"):
        assert planted[key].to_dict() == pytest.approx(table[key].to_dict(), abs=1e-9), key
    assert not planted["raw_mean"].to_dict() == pytest.approx(table["raw_mean"].to_dict(), abs=1e-3)


# -- pairs: mirroring each pair changes no order-free number ---------------------------------------------------------

def _mirrored(pairs):
    """The same pairs written the other way round: systems swapped, verdicts 1 <-> 2 (a tie stays a tie)."""
    flip = {"1": "2", "2": "1", "0": "0"}
    return pairs.assign(system_1=pairs["system_2"], system_2=pairs["system_1"],
                        label=pairs["label"].map(flip), forward=pairs["swapped"].map(flip),
                        swapped=pairs["forward"].map(flip))


@pytest.fixture(scope="module")
def pairs_study():
    rng = np.random.default_rng(3)
    rows, words, human = [], [], []
    systems = ["a", "b", "c"]
    for d in range(16):
        item = f"d{d:02d}"
        quality = {s: rng.normal() for s in systems}
        for s in systems:
            words.append({"item_id": item, "system": s, "words": float(rng.integers(5, 60))})
            human.append({"item_id": item, "system": s, "criterion": "c",
                          "human": float(np.clip(np.round(3 + quality[s] + rng.normal(0, 0.5)), 1, 5))})
        for x, y in (("a", "b"), ("a", "c"), ("b", "c")):
            if rng.random() < 0.5:
                x, y = y, x
            p = 1 / (1 + np.exp(-(quality[x] - quality[y] + (0.6 if x == "a" else -0.6 if y == "a" else 0))))
            forward = rng.choice(["1", "2", "0"], p=[0.8 * p, 0.8 * (1 - p), 0.2])
            swapped = forward if rng.random() < 0.7 else rng.choice(["1", "2", "0"])
            label = forward if forward == swapped else "0"
            rows.append({"item_id": item, "system": f"{x}|{y}", "system_1": x, "system_2": y, "criterion": "c",
                         "label": label, "forward": forward, "swapped": swapped, "status": "label"})
    return pd.DataFrame(rows), pd.DataFrame(words), pd.DataFrame(human)


def test_mirrored_pairs_give_the_same_self_preference_length_preference_and_flips(pairs_study):
    pairs, words, human = pairs_study
    mirrored = _mirrored(pairs)
    boot = Dialogues(pairs["item_id"], 80, 9)
    for system in ("a", "b"):
        one = pairwise_self_preference(pairs, human, boot, "c", [system])
        two = pairwise_self_preference(mirrored, human, boot, "c", [system])
        for key in ("judge_gap", "judge_gap_ci_low", "judge_gap_ci_high", "human_gap", "self_preference", "ci_low",
                    "ci_high", "n_dialogues"):
            assert one[key] == pytest.approx(two[key], abs=1e-12), (system, key)
    one, two = (pairwise_length(p, words, human, boot, "c", 0.2) for p in (pairs, mirrored))
    for key in ("prefers_longer", "prefers_longer_ci_low", "prefers_longer_ci_high", "human_prefers_longer",
                "n_pairs", "n_dialogues"):
        assert one[key] == pytest.approx(two[key], abs=1e-12), key
    first, second = (pairwise_position(p, human, boot, "c") for p in (pairs, mirrored))
    assert [r["stratum"] for r in first] == [r["stratum"] for r in second]
    for a, b in zip(first, second):
        assert (a["n"], a["flip_rate"], a["ci_low"], a["ci_high"]) == pytest.approx(
            (b["n"], b["flip_rate"], b["ci_low"], b["ci_high"]), abs=1e-12)


def test_pairwise_numbers_against_counts_written_out(pairs_study):
    pairs, words, human = pairs_study
    boot = Dialogues(pairs["item_id"], 80, 9)
    lengths = words.set_index(["item_id", "system"])["words"]
    w1 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
    w2 = lengths.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
    for threshold in (0.0, 0.2, 0.5):
        apart = np.abs(w1 - w2) > threshold * np.maximum(w1, w2)
        decided = apart & pairs["label"].isin(["1", "2"]).to_numpy()
        longer = (pairs["label"].to_numpy() == "1") == (w1 > w2)
        row = pairwise_length(pairs, words, human, boot, "c", threshold)
        assert row["n_pairs"] == decided.sum() and row["prefers_longer"] == pytest.approx(
            (decided & longer).sum() / decided.sum())
        assert row["n_dialogues"] == pairs.loc[decided, "item_id"].nunique()
        means = human.set_index(["item_id", "system"])["human"]
        h1 = means.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
        h2 = means.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
        differ = apart & (h1 != h2)
        assert row["human_prefers_longer"] == pytest.approx(((h1 > h2) == (w1 > w2))[differ].mean())
    # Without labels: the judge's side only, and the note says why.
    row = pairwise_self_preference(pairs, None, boot, "c", ["a"])
    assert row["note"].startswith(NO_LABELS_NOTE) and "human_gap" not in row and np.isfinite(row["judge_gap"])


# -- nothing to measure: each statistic says so instead of a number --------------------------------------------------

def test_each_statistic_with_nothing_to_measure_returns_no_number(study, pairs_study):
    judge, words, human, _, _, _ = study
    boot = _boot(judge)
    same = words.assign(words=10.0)  # every candidate the same length: no length slope
    row = length_slopes(judge, same, human, boot, "c")
    assert row["length_sd_words"] == 0 and "judge_slope" not in row
    assert length_slopes(judge, words, human, boot, "other") == {"criterion": "other", "n_summaries": 0,
                                                                  "n_dialogues": 0}
    assert list(length_controlled_means(judge, words, None, boot, "other").columns) == CONTROLLED_COLUMNS
    assert block_position(judge.assign(position=None), boot, "c") is None
    lonely = self_preference(judge[judge["system"] == "sys0"], human, boot, "c", ["sys0"])
    assert lonely["n_dialogues"] == 0 and lonely["note"] == "no dialogue has both an own and another system"
    no_labels = self_preference(judge, None, boot, "c", ["sys0"])
    assert no_labels["note"] == NO_LABELS_NOTE and "self_preference" not in no_labels
    pairs, _, phuman = pairs_study
    pboot = Dialogues(pairs["item_id"], 40, 1)
    assert pairwise_position(pairs.assign(swapped=None), phuman, pboot, "c") == []
    row = pairwise_self_preference(pairs[(pairs["system_1"] != "a") & (pairs["system_2"] != "a")], phuman, pboot,
                                   "c", ["a"])
    assert row["note"] == "no pair of an own system against another" and "judge_gap" not in row


def test_every_csv_an_audit_writes_is_its_table_without_an_index_column(pairwise_study):
    """Written after the seed-9 draw let `to_csv(index=True)` survive: each file reads back as its table."""
    import io

    judgments, items, labels, _, _ = pairwise_study
    result = audit(judgments, items, labels, self_systems="a", bootstrap=100)
    tables = {"noise.csv": result.noise, "length.csv": result.length, "position.csv": result.position,
              "self_preference.csv": result.self_preference, "length_controlled.csv": result.length_controlled}
    files = result.files()
    assert set(tables) <= set(files)
    for name, table in tables.items():
        read = pd.read_csv(io.StringIO(files[name]))
        assert list(read.columns) == [str(c) for c in table.columns], name
        assert len(read) == len(table), name


def test_the_first_sentence_counts_the_flags_the_tables_hold(pairwise_study):
    """Written after the seed-9 draw let `"effect" in t` become `not in` (every count 0)."""
    judgments, items, labels, _, _ = pairwise_study
    result = audit(judgments, items, labels, self_systems="a", bootstrap=100)
    assert result.flags > 0

    def flagged():
        (first,) = [s for s in sentences(result) if s.startswith("Findings flagged:")]
        return int(first.split()[2])

    counted = sum(int(t["effect"].fillna(False).astype(bool).sum()) for t in
                  (result.length, result.position, result.self_preference) if "effect" in t)
    assert flagged() == counted
    length_flags = int(result.length["effect"].fillna(False).astype(bool).sum()) if "effect" in result.length else 0
    result.self_preference["effect"] = True
    result.position["effect"] = True
    assert flagged() == length_flags + len(result.self_preference) + len(result.position) > counted


def test_a_dialogue_without_an_own_or_another_system_is_left_out_without_a_numpy_warning(study):
    """Written after the seed-12 draw let the guard against dividing by 0 other summaries go: such dialogues are
    left out and no RuntimeWarning reaches the user."""
    import warnings

    judge, _, human, _, _, _ = study
    ids = judge["item_id"].unique()
    # one dialogue without the own system, another with nothing else
    part = judge[((judge["item_id"] != ids[0]) | (judge["system"] != "sys0"))
                 & ((judge["item_id"] != ids[1]) | (judge["system"] == "sys0"))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = self_preference(part, human, _boot(judge), "c", ["sys0"])
    assert row["n_dialogues"] == len(ids) - 2 and np.isfinite(row["judge_gap"])


def test_a_pairwise_self_preference_whose_own_system_has_no_labels_is_the_judges_gap_alone(pairwise_study,
                                                                                           tmp_path):
    """Labels given, but none for the own system: no own-against-other pair is labelled, so the row is the judge's
    gap with the no-labels note, as without labels, and no human gap or self-preference (never a 0/0)."""
    import pandas as pd

    from calibration.trust.self_preference import NO_LABELS_NOTE

    judgments, items, labels, _, _ = pairwise_study
    frame = pd.read_csv(labels)
    unlabelled_a = tmp_path / "labels_without_a.csv"
    frame[frame["system"] != "a"].to_csv(unlabelled_a, index=False)
    row = audit(judgments, items, unlabelled_a, self_systems="a", bootstrap=100).self_preference.iloc[0]
    alone = audit(judgments, items, None, self_systems="a", bootstrap=100).self_preference.iloc[0]
    assert row["note"].startswith(NO_LABELS_NOTE) and row["note"] == alone["note"]
    assert row["judge_gap"] == pytest.approx(alone["judge_gap"])
    assert np.isnan(row["self_preference"]) and np.isnan(row.get("human_gap", np.nan))


def test_a_rerun_of_pairwise_verdicts_is_the_noise_floor(tmp_path):
    """Pairwise judgments (verdicts, no score: status 'label') re-run with every third verdict changed: the noise
    floor is the share of changed verdicts, counted by pandas, from the re-run, over all 12 pairs. Written after
    the seed-302 draw let the judgments' own status be replaced by one read from the (empty) score."""
    from test_audit_cli import write_pairs

    from calibration.io import load_judge_scores

    items, judgments = write_pairs(tmp_path, dialogues=12)
    frame = load_judge_scores(judgments)
    rerun = frame.copy()
    rerun.loc[rerun.index % 3 == 0, "label"] = "1"
    noise = audit(frame, items, rerun=rerun, bootstrap=100).noise.iloc[0]
    assert noise["source"] == "rerun" and noise["n"] == 12
    assert noise["changed_share"] == pytest.approx((frame["label"] != rerun["label"]).mean())


@pytest.mark.parametrize("low, high, excludes", [
    (0.0, 1.0, False), (-1.0, 0.0, False), (0.0, 0.0, False), (1e-12, 1.0, True), (-1.0, -1e-12, True),
    (-0.5, 0.5, False), (np.nan, 1.0, False), (0.2, np.nan, False), (0.2, np.inf, False), (-np.inf, -0.2, False)])
def test_an_effect_is_flagged_only_when_its_finite_closed_interval_leaves_out_zero(low, high, excludes):
    """The effect column reads an interval [low, high]: a bound exactly at 0 still holds 0, and an interval without
    two finite bounds claims nothing."""
    from calibration.trust.dialogues import _excludes_zero

    assert _excludes_zero(low, high) is excludes


@pytest.mark.parametrize("a", [0.05, 20.0])
def test_the_humans_units_move_no_judge_side_number(study, a):
    """Human readings on another scale (each annotator's times a: a 1-5 scale read as 0.05-0.25, or as 20-100): the
    excess is the judge's own length effect in its points and identified by the sign of the readings' agreement,
    so it and its interval are unchanged; the humans' slope scales by a."""
    judge, words, human, _, _, _ = study
    base = length_slopes(judge, words, human, _boot(judge), "c")
    scaled = human.assign(**{c: a * human[c] for c in ("human", "human_a", "human_b")})
    moved = length_slopes(judge, words, scaled, _boot(judge), "c")
    assert np.isfinite([base[k] for k in LENGTH]).all()
    for key in LENGTH:
        assert moved[key] == pytest.approx(base[key], rel=1e-9), key
    assert moved["human_slope"] == pytest.approx(a * base["human_slope"], rel=1e-9)


@pytest.mark.parametrize("seed, bias", [(1, 0.12), (5, -0.07)])
def test_a_position_effect_is_flagged_when_the_first_shown_share_interval_leaves_out_one_half(seed, bias):
    """Pairwise position: the effect column says whether the first-shown candidate's win share interval excludes
    1/2, the share with no position effect. The two studies put a bound just beside 1/2 (within 0.05 of it), where a
    reference moved off 1/2 would flag the other way."""
    from test_audit import simulate_pairs

    pairs, _, _ = simulate_pairs(np.random.default_rng(seed), bias, dialogues=30)
    row = pairwise_position(pairs, None, Dialogues(pairs["item_id"], 200, 0), "c")[0]
    low, high = row["first_shown_ci_low"], row["first_shown_ci_high"]
    assert 0.5 < low <= 0.55 or 0.5 <= high < 0.55  # the case this test is for
    assert row["effect"] == (low > 0.5 or high < 0.5)


def test_two_own_systems_are_averaged_before_the_gap(study):
    """--self with two systems: per dialogue, the mean of the own systems' scores less the mean of the others'
    (pandas), averaged over dialogues; the humans' likewise."""
    judge, _, human, _, _, _ = study
    own = ["sys0", "sys1"]
    row = self_preference(judge, human, _boot(judge), "c", own)
    frame = judge.merge(human)
    per = frame.assign(own=frame["system"].isin(own)).groupby(["item_id", "own"])[["score", "human"]].mean()
    gaps = per.xs(True, level="own") - per.xs(False, level="own")
    assert row["judge_gap"] == pytest.approx(gaps["score"].mean(), rel=1e-12)
    assert row["human_gap"] == pytest.approx(gaps["human"].mean(), rel=1e-12)


@pytest.mark.parametrize("seed, bias", [(1, 0.12), (5, -0.07), (3, 0.0)])
def test_a_pairwise_position_p_value_tests_the_first_shown_share_against_one_half(seed, bias):
    """family_wise reads a pairwise position row's p-value from its first-shown share and interval, less 1/2 (the
    share with no position effect): the t test (scipy) whose interval it is, on the dialogues' degrees of freedom;
    alone in its family, Holm leaves it as it is."""
    from test_audit import simulate_pairs

    from calibration.trust.family import family_wise

    pairs, _, _ = simulate_pairs(np.random.default_rng(seed), bias, dialogues=30)
    position = pd.DataFrame(pairwise_position(pairs, None, Dialogues(pairs["item_id"], 200, 0), "c"))
    assert family_wise(pd.DataFrame(columns=["excess_slope"]), position, pd.DataFrame(columns=["self_preference"]),
                       30) == 1
    row = position.iloc[0]
    estimate, low, high = (row[c] - 0.5 for c in ("first_shown_wins", "first_shown_ci_low", "first_shown_ci_high"))
    se = (estimate - low if estimate >= 0 else high - estimate) / stats.t.ppf(0.975, 29)
    assert row["p_adjusted"] == pytest.approx(2 * stats.t.sf(abs(estimate) / se, 29), rel=1e-9)
    assert row["effect"] == (row["p_adjusted"] < 0.05)


@pytest.mark.parametrize("seed, length, flagged", [(20, 0.1, False), (18, 0.25, True)])
def test_a_ranking_changed_at_equal_length_is_said_only_where_length_is_a_finding(seed, length, flagged):
    """length_controlled.csv's rank_changed: the length-controlled rank differs from the raw one and the criterion's
    length effect is flagged. Seed 20 (a faint length taste, noisy judge, 12 dialogues) has ranks that move at equal
    length while its length slope is not flagged: nothing is said; seed 18 (a clear taste): the moved ranks are."""
    from calibration.items import read_items

    judge, words, _, _ = simulate(np.random.default_rng(seed), dialogues=12, judge_length=length,
                                  quality_length=0.0 if length < 0.2 else 0.5, judge_noise=1.0 if length < 0.2 else 0.8)
    items = pd.DataFrame({"id": words["item_id"], "system": words["system"], "dialogue": "A: hi",
                          "candidate": [" ".join(["w"] * int(n)) for n in words["words"]]})
    result = audit(judge, items, bootstrap=200, seed=1)
    assert bool(result.length["effect"].iloc[0]) is flagged
    table = result.length_controlled
    moved = table["raw_rank"] != table["lc_rank"]
    assert moved.any()  # the ranking does move at equal length
    assert (table["rank_changed"] == (moved & flagged)).all()
    alone = length_controlled_means(judge, read_items(items), None, Dialogues(judge["item_id"], 200, 1), "c")
    assert (alone["rank_changed"] == (alone["raw_rank"] != alone["lc_rank"])).all()


def test_the_audit_result_says_whether_it_had_human_labels(tmp_path):
    """AuditResult.has_human, read by Python callers: True with --human, False without."""
    from test_audit_cli import write_items, write_judgments, write_labels

    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl")
    labels = write_labels(tmp_path / "labels.csv")
    assert audit(judgments, items, labels, bootstrap=50).has_human is True
    assert audit(judgments, items, bootstrap=50).has_human is False


def test_one_decided_pair_of_different_lengths_is_reported_not_called_none(tmp_path):
    """Pairwise judgments where every pair but one is a tie: the length preference rests on that one decided pair,
    and the sentence reports it (100% of 1 decided pairs), never 'no decided pair'."""
    from test_audit_cli import write_pairs

    from calibration.io import load_judge_scores

    items, judgments = write_pairs(tmp_path, dialogues=10)
    frame = load_judge_scores(judgments)
    frame["label"] = np.where(np.arange(len(frame)) == 1, "2", "0")  # pair p1: the longer (second) candidate wins
    result = audit(frame, items, bootstrap=50)
    row = result.length.iloc[0]
    assert row["n_pairs"] == 1 and row["prefers_longer"] == 1.0
    (said,) = [s for s in result.sentences if s.startswith("overall: the judge prefers")]
    assert "the longer candidate in 100%" in said and "of 1 decided pairs" in said
    assert not any("no decided pair" in s for s in result.sentences)


def test_centring_skips_dialogues_with_no_value_silently():
    """_centred takes each value's dialogue mean away; a dialogue with no value (audit's excess length slope keeps
    only dialogues with a summary read twice) is never read, and dividing its empty sum must not warn on the
    user's terminal."""
    import warnings

    from calibration.trust.dialogues import _centred

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _centred(np.array([0, 0, 2]), np.array([1.0, 2.0, 5.0]), 3)
    np.testing.assert_array_equal(got, [-0.5, 0.5, 0.0])
