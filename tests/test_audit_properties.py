"""Properties of `judge audit`'s estimators (calibration.trust.audit) that whole families of bugs break.

Every statistic is a function of the dialogues drawn, so each bootstrap replicate must equal the statistic recomputed
on the resampled data set itself (each dialogue repeated as often as the resample draws it): here by least squares
with dialogue dummies (numpy lstsq), two-stage least squares written as matrices, and pandas group means, on the
resamples the audit drew (its Dialogues.interval is watched). Each printed interval is then the expanded percentile
interval of those replicates (scipy's t and normal quantiles), each p-value the t test read from the interval and
Holm's adjustment statsmodels'. Renaming dialogues and systems, and reordering rows, change nothing.

Written against classes of mutants that survived the fresh draws of benchmarks/mutation.py (constants, dropped
terms, swapped operands in the sums), not against any one of them."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from resampling import expanded as expanded_interval
from scipy import stats
from test_audit import simulate, simulate_own_pairs

from calibration.trust.dialogues import Dialogues
from calibration.trust.family import family_wise
from calibration.trust.length import length_controlled_means, length_slopes, pairwise_length
from calibration.trust.noise import noise_floor
from calibration.trust.position import block_position, pairwise_position
from calibration.trust.self_preference import pairwise_self_preference, self_preference

RESAMPLES = 40


@pytest.fixture
def watched(monkeypatch):
    """Every (replicates,) the audit's percentile intervals are computed from, in order."""
    calls = []
    original = Dialogues.interval

    def spy(self, replicates):
        calls.append((np.array(replicates, dtype=float),))
        return original(self, replicates)

    monkeypatch.setattr(Dialogues, "interval", spy)
    return calls


def resampled(frame, boot, r):
    """The data set of resample r: each dialogue's rows repeated as often as it was drawn, each copy its own
    dialogue (copy number appended)."""
    parts = []
    for d, count in zip(boot.ids, boot.counts[r]):
        rows = frame[frame["item_id"] == d]
        for copy in range(int(count)):
            parts.append(rows.assign(item_id=f"{d}#{copy}"))
    return pd.concat(parts, ignore_index=True)


def within_slope(frame, y, x):
    """Least-squares slope of y on x with a dummy per dialogue."""
    dummies = pd.get_dummies(frame["item_id"]).to_numpy(float)
    return np.linalg.lstsq(np.column_stack([frame[x].to_numpy(float), dummies]), frame[y].to_numpy(float),
                           rcond=None)[0][0]


def jackknife_interval(frame, y, a, b, x, confidence):
    """The excess's interval written out: 2SLS refitted with each dialogue read twice left out in turn, the
    delete-one-cluster jackknife's standard error (CV3), the expanded t quantile on those dialogues' count. A
    dialogue identifies b only with two summaries read twice or more (one alone is its dialogue effect's)."""
    twice = frame.loc[frame[a].notna() & frame[b].notna(), "item_id"].value_counts()
    read_twice = twice.index[twice >= 2]
    g = len(read_twice)
    dropped = np.array([two_stage(frame[frame["item_id"] != d], y, a, b, x) for d in read_twice])
    se = np.sqrt((g - 1) / g * ((dropped - dropped.mean()) ** 2).sum())
    estimate = two_stage(frame, y, a, b, x)
    quantile = np.sqrt(g / (g - 1)) * stats.t.ppf(0.5 + confidence / 2, g - 1)
    return g, (estimate - quantile * se, estimate + quantile * se)


def two_stage(frame, y, a, b, x):
    """2SLS of y on (a, x) with instruments (b, x), dialogue effects removed by centring within dialogues: the
    coefficient of x."""
    two = frame[frame[a].notna() & frame[b].notna()]
    centred = {c: two[c] - two.groupby("item_id")[c].transform("mean") for c in (y, a, b, x)}
    X = np.column_stack([centred[a], centred[x]])
    Z = np.column_stack([centred[b], centred[x]])
    return np.linalg.solve(Z.T @ X, Z.T @ centred[y].to_numpy())[1]


@pytest.fixture(scope="module")
def pointwise():
    rng = np.random.default_rng(17)
    judge, words, human, _ = simulate(rng, dialogues=12, judge_length=0.5, human_length=0.1, self_bonus=0.3,
                                      position=0.1)
    units = judge.merge(words[["item_id", "system", "words"]]).merge(human)
    centred = units["words"] - units.groupby("item_id")["words"].transform("mean")
    units["z"] = centred / np.sqrt((centred ** 2).sum() / (len(units) - units["item_id"].nunique()))
    units["own"] = (units["system"] == "sys0").astype(float)
    units["letter"] = units["position"].map(lambda p: float(ord(p) - ord("A")))
    units["letter"] -= units.groupby("item_id")["letter"].transform("mean")
    return judge, words, human, units


def test_length_slope_replicates_are_the_slopes_of_the_resampled_data(pointwise, watched):
    judge, words, human, units = pointwise
    boot = Dialogues(judge["item_id"], RESAMPLES, 3, confidence=0.9)
    row = length_slopes(judge, words, human, boot, "c")
    (judge_r,), (human_r,), _relevance = watched
    assert row["judge_slope"] == pytest.approx(within_slope(units, "score", "z"), abs=1e-10)
    assert row["human_slope"] == pytest.approx(within_slope(units, "human", "z"), abs=1e-10)
    assert row["excess_slope"] == pytest.approx(two_stage(units, "score", "human_a", "human_b", "z"), abs=1e-10)
    for r in range(0, RESAMPLES, 7):
        data = resampled(units, boot, r)
        assert judge_r[r] == pytest.approx(within_slope(data, "score", "z"), abs=1e-9)
        assert human_r[r] == pytest.approx(within_slope(data, "human", "z"), abs=1e-9)
    n = len(boot.ids)
    assert (row["judge_slope_ci_low"], row["judge_slope_ci_high"]) == pytest.approx(
        expanded_interval(judge_r, 0.9, n))
    read_twice, interval = jackknife_interval(units, "score", "human_a", "human_b", "z", 0.9)
    assert row["excess_dialogues"] == read_twice and (row["excess_ci_low"], row["excess_ci_high"]) == pytest.approx(
        interval)
    assert row["n_summaries"] == len(units) and row["n_dialogues"] == n
    assert row["effect"] == (row["excess_ci_low"] > 0 or row["excess_ci_high"] < 0)


@pytest.mark.parametrize("criterion_part", ["length", "own system"])
def test_an_excess_stands_on_the_dialogues_read_twice(pointwise, criterion_part):
    """With a second reading on 8 of 12 dialogues, the excess's jackknife and t quantile are over those 8: the
    other 4 add nothing to b, so they must add no degree of freedom (family_wise reads the same count)."""
    judge, words, human, units = pointwise
    once = sorted(units["item_id"].unique())[::3]  # 4 dialogues read once
    human = human.copy()
    single = human["item_id"].isin(once)
    human.loc[single, "human_b"] = np.nan
    human.loc[single, "human"] = human.loc[single, "human_a"]
    units = units.drop(columns=["human", "human_a", "human_b"]).merge(human)
    boot = Dialogues(judge["item_id"], RESAMPLES, 5)
    if criterion_part == "length":
        row = length_slopes(judge, words, human, boot, "c")
        low, high, x = row["excess_ci_low"], row["excess_ci_high"], "z"
    else:
        row = self_preference(judge, human, boot, "c", ["sys0"])
        low, high, x = row["ci_low"], row["ci_high"], "own"
    read_twice, interval = jackknife_interval(units, "score", "human_a", "human_b", x, boot.confidence)
    assert read_twice == 8 and row["excess_dialogues"] == 8 and row["n_dialogues"] == 12
    assert (low, high) == pytest.approx(interval)
    # The family's p-value is the t test on those 8 dialogues, read back from the interval.
    table = pd.DataFrame([row])
    empty = pd.DataFrame(columns=["self_preference", "ci_low", "ci_high"])
    if criterion_part == "length":
        family_wise(table, pd.DataFrame(columns=["position_slope"]), empty, 12)
    else:
        family_wise(pd.DataFrame(columns=["excess_slope"]), pd.DataFrame(columns=["position_slope"]), table, 12)
    # The jackknife's t interval is symmetric: its half-width over t_7 is the se (the expansion inside it).
    estimate = (low + high) / 2
    p = 2 * stats.t.sf(abs(estimate) / ((high - low) / (2 * stats.t.ppf(0.5 + boot.confidence / 2, 7))), 7)
    assert table["p_adjusted"].iloc[0] == pytest.approx(p)
    assert (p < 1 - boot.confidence) == (low > 0 or high < 0)


def test_self_preference_replicates_are_the_resampled_gaps_and_excess(pointwise, watched):
    judge, _, human, units = pointwise
    boot = Dialogues(judge["item_id"], RESAMPLES, 4)
    row = self_preference(judge, human, boot, "c", ["sys0"])
    (judge_r,), (human_r,), _relevance = watched

    def gap(data, column):
        own = data[data["own"] == 1].groupby("item_id")[column].mean()
        rest = data[data["own"] == 0].groupby("item_id")[column].mean()
        return (own - rest).dropna().mean()

    assert row["judge_gap"] == pytest.approx(gap(units, "score")) and row["human_gap"] == pytest.approx(
        gap(units, "human"))
    assert row["self_preference"] == pytest.approx(two_stage(units, "score", "human_a", "human_b", "own"))
    for r in range(0, RESAMPLES, 9):
        data = resampled(units, boot, r)
        assert judge_r[r] == pytest.approx(gap(data, "score"), abs=1e-9)
        assert human_r[r] == pytest.approx(gap(data, "human"), abs=1e-9)
    assert row["n_dialogues"] == len(boot.ids)
    read_twice, interval = jackknife_interval(units, "score", "human_a", "human_b", "own", 0.95)
    assert row["excess_dialogues"] == read_twice and (row["ci_low"], row["ci_high"]) == pytest.approx(interval)


def test_block_position_and_length_controlled_means_replicates(pointwise, watched):
    judge, words, _, units = pointwise
    boot = Dialogues(judge["item_id"], RESAMPLES, 5)
    row = block_position(judge, boot, "c")
    (slopes,), = watched
    assert row["position_slope"] == pytest.approx(within_slope(units, "score", "letter"), abs=1e-10)
    for r in range(0, RESAMPLES, 9):
        assert slopes[r] == pytest.approx(within_slope(resampled(units, boot, r), "score", "letter"), abs=1e-9)
    watched.clear()
    table = length_controlled_means(judge, words, None, boot, "c").set_index("system")
    systems = sorted(units["system"].unique())

    def controlled(data):
        dummies = pd.get_dummies(data["item_id"]).to_numpy(float)
        own = pd.get_dummies(data["system"]).reindex(columns=systems).to_numpy(float)[:, 1:]
        beta = np.linalg.lstsq(np.column_stack([data["z"], own, dummies]), data["score"], rcond=None)[0][0]
        means = data.groupby("system")[["score", "z"]].mean()
        return means["score"], means["score"] - beta * means["z"]

    raw, lc = controlled(units)
    for system in systems:
        assert table.loc[system, "raw_mean"] == pytest.approx(raw[system], abs=1e-10)
        assert table.loc[system, "length_controlled"] == pytest.approx(lc[system], abs=1e-9)
        assert table.loc[system, "n"] == (units["system"] == system).sum()
    # per system: (raw replicates, lc replicates), in the table's system order
    for k, system in enumerate(systems):
        raw_r, lc_r = watched[2 * k][0], watched[2 * k + 1][0]
        for r in range(0, RESAMPLES, 13):
            raw_b, lc_b = controlled(resampled(units, boot, r))
            assert raw_r[r] == pytest.approx(raw_b[system], abs=1e-9)
            assert lc_r[r] == pytest.approx(lc_b[system], abs=1e-8)
    assert list(table["raw_rank"]) == list(table["raw_mean"].rank(ascending=False, method="min").astype(int))


def test_noise_floor_from_a_rerun_is_the_changed_share_by_dialogue(pointwise, watched):
    judge, _, _, _ = pointwise
    rng = np.random.default_rng(8)
    rerun = judge.assign(score=np.where(rng.random(len(judge)) < 0.3, judge["score"] + 1, judge["score"]))
    judge = judge.assign(label=None, samples=None, swapped=None)
    rerun = rerun.assign(label=None)
    boot = Dialogues(judge["item_id"], RESAMPLES, 6)
    row = noise_floor(judge, rerun, boot, ["c"]).iloc[0]
    changed = pd.DataFrame({"item_id": judge["item_id"], "changed": (judge["score"] != rerun["score"]).astype(float)})
    assert row["changed_share"] == pytest.approx(changed["changed"].mean())
    assert row["mean_abs_change"] == pytest.approx((judge["score"] - rerun["score"]).abs().mean())
    assert row["n"] == len(judge) and row["source"] == "rerun"
    (replicates,), = watched
    for r in range(0, RESAMPLES, 9):
        assert replicates[r] == pytest.approx(resampled(changed, boot, r)["changed"].mean())


def test_pairwise_statistics_are_the_resampled_shares(watched):
    rng = np.random.default_rng(9)
    pairs, humans, _ = simulate_own_pairs(rng, bonus=0.8, own_quality=0.2, dialogues=15)
    pairs = pairs.assign(system=pairs["system_1"] + "|" + pairs["system_2"])
    boot = Dialogues(pairs["item_id"], RESAMPLES, 7)
    row = pairwise_self_preference(pairs, humans, boot, "c", ["sys0"])
    means = humans.set_index(["item_id", "system"])["human"]
    h1 = means.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
    h2 = means.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
    own_first = pairs["system_1"].eq("sys0").to_numpy()
    first = pairs["label"].map({"1": 1.0, "2": 0.0, "0": 0.5}).to_numpy()
    human_first = np.sign(h1 - h2) / 2 + 0.5
    shares = pd.DataFrame({"item_id": pairs["item_id"], "judge": np.where(own_first, first, 1 - first),
                           "human": np.where(own_first, human_first, 1 - human_first)})
    shares["diff"] = shares["judge"] - shares["human"]
    assert row["judge_gap"] == pytest.approx(shares["judge"].mean() - 0.5)
    assert row["human_gap"] == pytest.approx(shares["human"].mean() - 0.5)
    assert row["self_preference"] == pytest.approx(shares["diff"].mean())
    (judge_r,), (human_r,), (diff_r,) = watched
    for r in range(0, RESAMPLES, 9):
        data = resampled(shares, boot, r)
        assert judge_r[r] == pytest.approx(data["judge"].mean() - 0.5)
        assert human_r[r] == pytest.approx(data["human"].mean() - 0.5)
        assert diff_r[r] == pytest.approx(data["diff"].mean())
    # length: the share of pairs the judge gives the longer candidate, among pairs more than 10% apart
    watched.clear()
    length = pd.DataFrame({"item_id": humans["item_id"], "system": humans["system"],
                           "words": rng.integers(20, 80, len(humans)).astype(float)})
    row = pairwise_length(pairs, length, humans, boot, "c", 0.1)
    w = length.set_index(["item_id", "system"])["words"]
    w1 = w.reindex(list(zip(pairs["item_id"], pairs["system_1"]))).to_numpy()
    w2 = w.reindex(list(zip(pairs["item_id"], pairs["system_2"]))).to_numpy()
    apart = np.abs(w1 - w2) / np.maximum(w1, w2) > 0.1
    decided = apart & pairs["label"].isin(["1", "2"]).to_numpy()
    longer = np.where(pairs["label"] == "1", w1 > w2, w2 > w1)
    assert row["n_pairs"] == decided.sum()
    assert row["prefers_longer"] == pytest.approx(longer[decided].mean())
    human_decided = apart & (h1 != h2)
    assert row["human_prefers_longer"] == pytest.approx(((h1 > h2) == (w1 > w2))[human_decided].mean())


def test_order_flips_and_first_shown_wins_are_counted_over_both_orders():
    """Per pair: a flip when the two orders' verdicts (read back in the input's order) differ; the first-shown
    candidate wins with "1" in the forward order and "2" read back from the swapped one; ties are not decided."""
    forward = ["1", "1", "2", "0", "1", "2", "1", "0"]
    swapped = ["1", "2", "2", "0", "2", "1", "0", "2"]
    pairs = pd.DataFrame({"item_id": [f"d{k // 2}" for k in range(8)], "system_1": "a", "system_2": "b",
                          "criterion": "c", "label": forward, "status": "label", "forward": forward,
                          "swapped": swapped})
    boot = Dialogues(pairs["item_id"], 200, 0)
    (row,) = pairwise_position(pairs, None, boot, "c")
    flips = sum(f != s for f, s in zip(forward, swapped))
    decided = sum(f != "0" for f in forward) + sum(s != "0" for s in swapped)
    first = sum(f == "1" for f in forward) + sum(s == "2" for s in swapped)
    assert row["flip_rate"] == pytest.approx(flips / 8) and row["n"] == 8
    assert row["first_shown_wins"] == pytest.approx(first / decided)
    assert row["ci_low"] <= row["flip_rate"] <= row["ci_high"]
    assert row["effect"] == (row["first_shown_ci_low"] > 0.5 or row["first_shown_ci_high"] < 0.5)


def test_family_wise_p_values_are_t_tests_read_from_each_interval_and_holms_adjustment(pointwise):
    from statsmodels.stats.multitest import multipletests

    judge, words, human, _ = pointwise
    boot = Dialogues(judge["item_id"], 200, 11)
    length = pd.DataFrame([length_slopes(judge, words, human, boot, "c"),
                           length_slopes(judge, words, None, boot, "c")])
    position = pd.DataFrame([block_position(judge, boot, "c")])
    selfp = pd.DataFrame([self_preference(judge, human, boot, "c", ["sys0"])])
    n = len(boot.ids)
    tested = family_wise(length, position, selfp, n)
    quantile = stats.t.ppf(0.975, n - 1)
    raw = []
    for estimate, low, high in ((length.loc[0, "excess_slope"], length.loc[0, "excess_ci_low"],
                                 length.loc[0, "excess_ci_high"]),
                                (length.loc[1, "judge_slope"], length.loc[1, "judge_slope_ci_low"],
                                 length.loc[1, "judge_slope_ci_high"]),
                                (position.loc[0, "position_slope"], position.loc[0, "position_slope_ci_low"],
                                 position.loc[0, "position_slope_ci_high"]),
                                (selfp.loc[0, "self_preference"], selfp.loc[0, "ci_low"], selfp.loc[0, "ci_high"])):
        # the se from the bound on 0's side (percentile intervals are not symmetric): alone, p < 0.05 exactly when
        # the printed interval excludes 0
        se = (estimate - low if estimate >= 0 else high - estimate) / quantile
        raw.append(2 * stats.t.sf(abs(estimate) / se, n - 1))
        assert (raw[-1] < 0.05) == (low > 0 or high < 0)
    assert tested == 4
    adjusted = multipletests(raw, method="holm")[1]
    got = [length.loc[0, "p_adjusted"], length.loc[1, "p_adjusted"], position.loc[0, "p_adjusted"],
           selfp.loc[0, "p_adjusted"]]
    assert got == pytest.approx(list(adjusted), rel=1e-9)
    flags = [length.loc[0, "effect"], length.loc[1, "effect"], position.loc[0, "effect"], selfp.loc[0, "effect"]]
    assert flags == [bool(p < 0.05) for p in adjusted]
    assert any(flags) and not all(flags)  # both outcomes are in play


def test_renaming_and_reordering_change_no_number(pointwise):
    judge, words, human, _ = pointwise
    ids = {d: f"z{99 - k:02d}" for k, d in enumerate(sorted(judge["item_id"].unique()))}
    systems = {s: f"{chr(ord('q') - k)}" for k, s in enumerate(sorted(judge["system"].unique()))}

    def rename(frame):
        return frame.assign(item_id=frame["item_id"].map(ids), system=frame["system"].map(systems)).sample(
            frac=1.0, random_state=3)

    def run(j, w, h, own):
        boot = Dialogues(j["item_id"], RESAMPLES, 1)
        return [length_slopes(j, w, h, boot, "c"), self_preference(j, h, boot, "c", [own]),
                block_position(j, boot, "c")]

    first = run(judge, words, human, "sys0")
    # the point estimates do not depend on names or row order (the intervals' resamples follow the sorted names)
    second = run(rename(judge), rename(words), rename(human), systems["sys0"])
    for a, b in zip(first, second):
        for key in ("judge_slope", "human_slope", "excess_slope", "judge_gap", "human_gap", "self_preference",
                    "position_slope", "n_summaries", "n_dialogues"):
            if key in a:
                assert a[key] == pytest.approx(b[key], abs=1e-10), key


def test_a_shares_interval_is_the_bootstrap_widened_to_wilson_at_its_effective_trials(watched):
    """Flip rates: the expanded percentile interval of the resampled shares, widened to statsmodels' Wilson interval
    at trials / design effect (the bootstrap SD read from the interval's half-width), never past all the trials."""
    from statsmodels.stats.proportion import proportion_confint

    rng = np.random.default_rng(21)
    n = 60
    forward = rng.choice(["1", "2"], n)
    swapped = np.where(rng.random(n) < 0.2, np.where(forward == "1", "2", "1"), forward)
    pairs = pd.DataFrame({"item_id": [f"d{k // 3:02d}" for k in range(n)], "system_1": "a", "system_2": "b",
                          "criterion": "c", "label": forward, "status": "label", "forward": forward,
                          "swapped": swapped})
    boot = Dialogues(pairs["item_id"], 300, 2)
    (row,) = pairwise_position(pairs, None, boot, "c")
    replicates = watched[0][0]
    low, high = expanded_interval(replicates, 0.95, len(boot.ids))
    value = float(np.mean(forward != swapped))
    spread = (high - low) / (2 * stats.norm.ppf(0.975))
    effective = min(n, max(len(boot.ids), value * (1 - value) / spread ** 2))
    wilson = proportion_confint(value * effective, effective, 0.05, "wilson")
    assert row["ci_low"] == pytest.approx(min(low, wilson[0])) and row["ci_high"] == pytest.approx(
        max(high, wilson[1]))
    assert row["ci_low"] < low or row["ci_high"] > high or effective == n  # the widening is in play or capped


@pytest.mark.parametrize("samples, both, expected", [
    (["3", "3", "4"], False, 2 / 3), (["3", "3"], False, 0.0), (["3"], False, np.nan), ([], False, np.nan),
    (["1", "2", "1", "1"], True, 0.5), (["1", "1", "2", "2"], True, 0.0), (["1", "2", "3", "1", "1", "1"], False,
                                                                           1 - (4 * 3) / 30),
    ([1, "1", 1.0], False, 2 / 3)])  # "1.0" is another verdict than "1": compared as text
def test_reask_noise_is_the_share_of_ordered_pairs_of_samples_that_differ(samples, both, expected):
    from calibration.trust.noise import _sample_change

    value = _sample_change(samples, both)
    assert (np.isnan(value) and np.isnan(expected)) or value == pytest.approx(expected)


@pytest.mark.parametrize("text, unit", [("好好 ab", "words"), ("好好好 ab", "characters"), ("ab cd", "words"),
                                        ("", "words"), ("好 a", "words")])
def test_the_length_unit_is_characters_only_when_more_than_half_the_letters_are_unspaced(text, unit):
    """"好好 ab": 2 of 4 letters unspaced, exactly half: words; "好好好 ab": 3 of 5: characters."""
    from calibration.items import length_unit

    assert length_unit([text]) == unit


def test_block_letters_are_positions_from_zero_and_two_letters_continue_after_z():
    from calibration.trust.position import _letter_index

    assert [_letter_index(x) for x in ("A", "B", "Z", "AA", "AB", "BA")] == [0, 1, 25, 26, 27, 52]
    assert all(np.isnan(_letter_index(x)) for x in ("a", "1", "AAA", None, "", "A1"))


def _scale_study(judge_scores, human_scores):
    keys = [(f"d{d}", s) for d in range(10) for s in ("a", "b", "c")]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "score": float(v), "status": "ok"}
                          for (i, s), v in zip(keys, judge_scores)])
    items = pd.DataFrame([{"id": i, "system": s, "dialogue": "A: hi", "candidate": "word " * (3 + k % 7)}
                          for k, (i, s) in enumerate(keys)])
    human = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "human": float(v)}
                          for (i, s), v in zip(keys, human_scores)])
    return judge, items, human


@pytest.mark.parametrize("judge_sd, human_sd", [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0)])
def test_a_constant_side_has_no_scale_to_compare_and_gets_no_scale_warning(judge_sd, human_sd):
    from calibration.trust.audit import audit

    rng = np.random.default_rng(6)
    quality = rng.normal(3, 1, 30)
    judge, items, human = _scale_study(3 + judge_sd * (quality - 3), 3 + human_sd * (quality - 3))
    result = audit(judge, items, human, bootstrap=100)
    assert not any("different scales" in w for w in result.warnings)


def test_items_as_a_table_with_empty_cells_are_read_like_the_file():
    """A DataFrame of items mixing single candidates and pairs has NaN in the other kind's columns: missing, not
    text (the JSONL file simply lacks those keys)."""
    from calibration.items import read_items

    items = pd.DataFrame([{"id": "d1", "system": "a", "dialogue": "A: hi", "candidate": "one two three",
                           "candidate_1": np.nan, "candidate_2": np.nan, "system_1": np.nan, "system_2": np.nan},
                          {"id": "d1", "system": "a|b", "dialogue": "A: hi", "candidate": np.nan,
                           "candidate_1": "one", "candidate_2": "one two", "system_1": "a", "system_2": "b"}])
    words = read_items(items).set_index(["item_id", "system"])["words"]
    assert words.to_dict() == {("d1", "a"): 3, ("d1", "b"): 2}


# -- a wide metric CSV (criterion "*"), with and without labels -------------------------------------------------------

def _wide_metric(tmp_path, judge):
    path = tmp_path / "metric_scores.csv"
    judge[["item_id", "system", "score"]].rename(columns={"score": "m"}).to_csv(path, index=False)
    return path


def test_a_wide_metric_csv_without_labels_is_audited_as_one_criterion_with_the_least_squares_slope(tmp_path):
    """Without --human the metric's "*" column is its own criterion (nothing to copy it to); its length slope is the
    within-dialogue least-squares slope on standardised length (numpy lstsq with dialogue dummies)."""
    from calibration.trust.audit import audit

    rng = np.random.default_rng(11)
    judge, items, _ = _scale_study(rng.normal(3, 1, 30), np.zeros(30))
    result = audit(_wide_metric(tmp_path, judge), items, score_column="m", bootstrap=100)
    assert result.criteria == ["*"] and not result.has_human
    row = result.length.set_index("criterion").loc["*"]
    words = items["candidate"].str.split().str.len().to_numpy(float)
    dialogue = pd.get_dummies(items["id"]).to_numpy(float)
    centred = words - dialogue @ np.linalg.lstsq(dialogue, words, rcond=None)[0]
    sd = np.sqrt((centred ** 2).sum() / (len(words) - dialogue.shape[1]))
    slope = np.linalg.lstsq(np.column_stack([words / sd, dialogue]), judge["score"].to_numpy(), rcond=None)[0][0]
    assert row["length_sd_words"] == pytest.approx(sd, rel=1e-12)
    assert row["judge_slope"] == pytest.approx(slope, rel=1e-9)


def test_a_wide_metric_csv_stands_for_every_labelled_criterion(tmp_path):
    """With labels of two criteria, the "*" column is audited under each, exactly as the long CSV that writes the
    metric out once per criterion."""
    from calibration.trust.audit import audit

    rng = np.random.default_rng(12)
    quality = rng.normal(3, 1, 30)
    judge, items, human = _scale_study(quality + rng.normal(0, 0.5, 30), quality)
    labels = pd.concat([human.assign(criterion=c, human=human["human"] + k) for k, c in enumerate(("c1", "c2"))])
    wide = audit(_wide_metric(tmp_path, judge), items, labels, score_column="m", bootstrap=100)
    long = audit(pd.concat([judge.assign(criterion=c) for c in ("c1", "c2")]), items, labels, bootstrap=100)
    assert wide.criteria == ["c1", "c2"] == sorted(long.criteria)
    columns = ["criterion", "judge_slope", "judge_slope_ci_low", "human_slope", "excess_slope"]
    pd.testing.assert_frame_equal(wide.length[columns].sort_values("criterion").reset_index(drop=True),
                                  long.length[columns].sort_values("criterion").reset_index(drop=True))


@pytest.mark.parametrize("ratio, warned", [(3.0, False), (1 / 3, False), (3.03, True), (1 / 3.03, True),
                                           (2.97, False), (1 / 2.97, False)])
def test_the_scale_warning_fires_beyond_a_factor_of_three_and_not_at_it(ratio, warned):
    """Judge and human SDs within a factor of 3 (inclusive) are one scale; beyond it the warning says to map one
    onto the other. Scores alternating 2, 4 make the SD ratio of a x scores exactly a in floating point."""
    from calibration.trust.audit import audit

    base = np.tile([2.0, 4.0], 15)
    judge_scale, human_scale = (ratio, 1.0) if ratio >= 1 else (1.0, 1 / ratio)
    judge, items, human = _scale_study(judge_scale * base, human_scale * base)
    if ratio in (3.0, 1 / 3):  # the boundary is hit exactly
        assert judge["score"].std() / human["human"].std() == ratio
    result = audit(judge, items, human, bootstrap=100)
    assert any("on different scales" in w for w in result.warnings) == warned


def test_the_two_readings_are_the_first_annotator_by_name_and_the_mean_of_the_others():
    """read_human's halves, written out with a loop: human_a the alphabetically first annotator's label, human_b the
    mean of the rest (NaN with one annotator), human the mean of all; failed (blank) labels are not readings."""
    from calibration.trust.audit import read_human

    rng = np.random.default_rng(13)
    rows = []
    for k in range(12):
        annotators = list(rng.permutation(["zoe", "ann", "bob", "kim"])[: 1 + k % 4])  # 1 to 4, not in name order
        rows += [{"item_id": f"d{k // 3}", "system": f"s{k % 3}", "criterion": "c", "annotator": a,
                  "score": float(rng.integers(1, 6))} for a in annotators]
    rows.append({"item_id": "d0", "system": "s0", "criterion": "c", "annotator": "aaa", "score": np.nan})
    labels = pd.DataFrame(rows)
    got = read_human(labels).set_index(["item_id", "system"])
    for (item, system), part in labels.dropna(subset=["score"]).groupby(["item_id", "system"]):
        ordered = part.sort_values("annotator")["score"].to_list()
        row = got.loc[(item, system)]
        assert row["human"] == pytest.approx(np.mean(ordered))
        assert row["human_a"] == ordered[0]
        if len(ordered) == 1:
            assert np.isnan(row["human_b"])
        else:
            assert row["human_b"] == pytest.approx(np.mean(ordered[1:]))


def _block_study(dialogues: int, systems: str = "abcdef", seed: int = 1):
    rng = np.random.default_rng(seed)
    keys = [(f"d{d}", s) for d in range(dialogues) for s in systems]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": "c", "score": float(rng.integers(1, 6)),
                           "status": "ok", "position": "ABCDEF"[k % len(systems)]} for k, (i, s) in enumerate(keys)])
    items = pd.DataFrame([{"id": i, "system": s, "dialogue": "A: hi", "candidate": "word " * int(rng.integers(3, 30))}
                          for i, s in keys])
    return judge, items


INTERVALS = {"length": ["judge_slope_ci_low", "judge_slope_ci_high"],
             "position": ["position_slope_ci_low", "position_slope_ci_high"],
             "self_preference": ["judge_gap_ci_low", "judge_gap_ci_high"],
             "length_controlled": ["raw_ci_low", "raw_ci_high", "lc_ci_low", "lc_ci_high"]}


def test_one_dialogue_has_estimates_but_no_interval_and_says_why():
    """Every resample of one dialogue is that dialogue: its percentiles are the estimate, a zero-width interval that
    once printed as [-0.80, -0.80]. Now no interval, no flag, and a warning; two dialogues have intervals."""
    from calibration.trust.audit import audit

    one = audit(*_block_study(1), self_systems="a", bootstrap=100)
    assert any("one dialogue: no interval" in w for w in one.warnings)
    for table, columns in INTERVALS.items():
        frame = getattr(one, table)
        assert len(frame) and frame[columns].isna().all().all(), table
    assert np.isfinite(one.length["judge_slope"]).all() and np.isfinite(one.self_preference["judge_gap"]).all()
    assert one.flags == 0 and "[no interval]" in one.text() and not re.search(r"\[[+-]?\d", one.text())
    two = audit(*_block_study(2), self_systems="a", bootstrap=100)
    assert not any("one dialogue" in w for w in two.warnings)
    for table, columns in INTERVALS.items():
        assert np.isfinite(getattr(two, table)[columns].to_numpy(float)).all(), table


@pytest.mark.parametrize("criterion_part", ["length", "own system"])
@pytest.mark.parametrize("twice_in_last", [1, 2])
def test_a_dialogue_with_one_summary_read_twice_identifies_nothing(pointwise, criterion_part, twice_in_last):
    """A 13th dialogue with one summary read twice (the others once) identifies nothing (within its dialogue that
    summary is centred to 0): the jackknife and its t quantile stay on the 12 that do. With two read twice it is a
    13th identifying dialogue. Either way the interval is the written-out 2SLS jackknife's."""
    judge, words, human, units = pointwise
    extra = "d999"
    rng = np.random.default_rng(14)
    systems = sorted(judge["system"].unique())
    new_judge = judge[judge["item_id"] == judge["item_id"].iloc[0]].assign(
        item_id=extra, score=lambda f: f["score"] + rng.normal(0, 1, len(f)))
    new_words = words[words["item_id"] == words["item_id"].iloc[0]].assign(
        item_id=extra, words=lambda f: f["words"] + rng.integers(-20, 20, len(f)))
    new_human = human[human["item_id"] == human["item_id"].iloc[0]].assign(
        item_id=extra, human_a=lambda f: f["human_a"] + rng.normal(0, 1, len(f)))
    new_human["human_b"] = np.where(new_human["system"].isin(systems[:twice_in_last]), new_human["human_a"] - 0.3,
                                    np.nan)
    new_human["human"] = new_human[["human_a", "human_b"]].mean(axis=1)
    judge2, words2, human2 = (pd.concat([a, b], ignore_index=True) for a, b in
                              ((judge, new_judge), (words, new_words), (human, new_human)))
    units2 = judge2.merge(words2[["item_id", "system", "words"]]).merge(human2)
    centred = units2["words"] - units2.groupby("item_id")["words"].transform("mean")
    units2["z"] = centred / np.sqrt((centred ** 2).sum() / (len(units2) - units2["item_id"].nunique()))
    units2["own"] = (units2["system"] == "sys0").astype(float)
    boot = Dialogues(judge2["item_id"], RESAMPLES, 5)
    if criterion_part == "length":
        row = length_slopes(judge2, words2, human2, boot, "c")
        estimate, low, high, x = row["excess_slope"], row["excess_ci_low"], row["excess_ci_high"], "z"
    else:
        row = self_preference(judge2, human2, boot, "c", ["sys0"])
        estimate, low, high, x = row["self_preference"], row["ci_low"], row["ci_high"], "own"
    read_twice, interval = jackknife_interval(units2, "score", "human_a", "human_b", x, boot.confidence)
    assert read_twice == row["excess_dialogues"] == 12 + (twice_in_last == 2)
    assert estimate == pytest.approx(two_stage(units2, "score", "human_a", "human_b", x), abs=1e-10)
    assert (low, high) == pytest.approx(interval)


# -- standardised length: one definition for the slopes and the length-controlled means ------------------------------

def _unbalanced(sizes, rng, equal_within=False):
    rows, words = [], []
    for d, size in enumerate(sizes):
        base = int(rng.integers(5, 60))
        for k in range(size):
            rows.append({"item_id": f"d{d}", "system": f"s{k}", "criterion": "c", "status": "ok",
                         "score": float(rng.normal(3, 1))})
            words.append({"item_id": f"d{d}", "system": f"s{k}",
                          "words": base if equal_within else base + int(rng.integers(0, 40))})
    return pd.DataFrame(rows), pd.DataFrame(words)


@pytest.mark.parametrize("sizes", [[1, 2, 3, 5, 2, 1, 4, 3], [2, 1, 1, 1, 1]])
def test_length_is_standardised_by_the_pooled_within_dialogue_sd_on_n_minus_dialogues_degrees_of_freedom(sizes):
    """Dialogues of 1 to 5 summaries (or one pair among singletons: 1 degree of freedom): the SD is the residual SD
    of length on dialogue dummies (numpy lstsq, N - G degrees of freedom), and the slopes the least-squares ones on
    length over that SD."""
    rng = np.random.default_rng(15)
    judge, words = _unbalanced(sizes, rng)
    boot = Dialogues(judge["item_id"], RESAMPLES, 0)
    row = length_slopes(judge, words, None, boot, "c")
    dummies = pd.get_dummies(judge["item_id"]).to_numpy(float)
    length = words["words"].to_numpy(float)
    residual = length - dummies @ np.linalg.lstsq(dummies, length, rcond=None)[0]
    sd = np.sqrt((residual ** 2).sum() / (len(length) - dummies.shape[1]))
    assert row["length_sd_words"] == pytest.approx(sd, rel=1e-12)
    slope = np.linalg.lstsq(np.column_stack([length / sd, dummies]), judge["score"].to_numpy(), rcond=None)[0][0]
    assert row["judge_slope"] == pytest.approx(slope, rel=1e-9)
    # The length-controlled means' beta: least squares with system and dialogue dummies (numpy lstsq).
    systems = pd.get_dummies(judge["system"]).to_numpy(float)[:, 1:]
    beta = np.linalg.lstsq(np.column_stack([length / sd, systems, dummies]), judge["score"].to_numpy(),
                           rcond=None)[0][0]
    if len(judge) - dummies.shape[1] > systems.shape[1]:  # identified beside the systems
        assert length_controlled_means(judge, words, None, boot, "c").attrs["beta"] == pytest.approx(beta, rel=1e-9)


@pytest.mark.parametrize("sizes, equal_within", [([1] * 12, False), ([3] * 12, True)])
def test_no_length_difference_within_any_dialogue_gives_sd_zero_no_slope_and_raw_means(sizes, equal_within):
    """One summary per dialogue, or summaries of equal length within each: the within-dialogue SD is 0 (not NaN),
    no slope is measurable, and the length-controlled means are the raw ones. Their intervals: the raw ones with
    one system; with several, length cannot be told from the systems in any resample, so none."""
    rng = np.random.default_rng(16)
    judge, words = _unbalanced(sizes, rng, equal_within)
    boot = Dialogues(judge["item_id"], RESAMPLES, 0)
    row = length_slopes(judge, words, None, boot, "c")
    assert row["length_sd_words"] == 0.0 and np.isnan(row.get("judge_slope", np.nan))
    means = length_controlled_means(judge, words, None, boot, "c")
    assert means["length_controlled"].to_numpy() == pytest.approx(means["raw_mean"].to_numpy())
    lc = means[["lc_ci_low", "lc_ci_high"]].to_numpy()
    if len(means) == 1:
        assert lc == pytest.approx(means[["raw_ci_low", "raw_ci_high"]].to_numpy())
    else:
        assert np.isnan(lc).all() and np.isfinite(means[["raw_ci_low", "raw_ci_high"]].to_numpy()).all()
    assert not means["rank_changed"].any()


@pytest.mark.parametrize("bias", [0.25, 0.03])
def test_mirroring_who_wins_mirrors_the_first_shown_share_its_interval_and_keeps_the_flag(bias):
    """Every verdict read the other way ("1" <-> "2" in both orders): the first-shown share becomes 1 - share, its
    interval [1 - high, 1 - low], and the flag against a half is the same (a judge that favours the second-shown
    candidate is as biased as one favouring the first)."""
    from test_audit import simulate_pairs

    pairs, _, _ = simulate_pairs(np.random.default_rng(21), bias, dialogues=30)
    other = {"1": "2", "2": "1", "0": "0"}
    mirrored = pairs.assign(**{c: pairs[c].map(other) for c in ("forward", "swapped", "label")})
    boot = Dialogues(pairs["item_id"], 200, 0)
    (row,), (flipped,) = pairwise_position(pairs, None, boot, "c"), pairwise_position(mirrored, None, boot, "c")
    assert flipped["first_shown_wins"] == pytest.approx(1 - row["first_shown_wins"])
    assert (flipped["first_shown_ci_low"], flipped["first_shown_ci_high"]) == pytest.approx(
        (1 - row["first_shown_ci_high"], 1 - row["first_shown_ci_low"]))
    assert flipped["flip_rate"] == pytest.approx(row["flip_rate"])
    assert row["effect"] == flipped["effect"] == (bias > 0.1)
    assert (row["first_shown_ci_low"] > 0.5) == (flipped["first_shown_ci_high"] < 0.5) == (bias > 0.1)


@pytest.mark.parametrize("p", [0.0499, 0.0501, 0.054, 0.2])
def test_a_lone_finding_is_flagged_exactly_when_its_t_test_is_below_five_percent(p):
    """One finding (Holm over one is the p-value itself): an interval built so that its t test on 10 dialogues has
    p-value p (scipy), flagged only below 5%."""
    n, estimate = 10, 0.3
    se = estimate / stats.t.isf(p / 2, n - 1)
    half = stats.t.ppf(0.975, n - 1) * se
    length = pd.DataFrame([{"criterion": "c", "judge_slope": estimate, "judge_slope_ci_low": estimate - half,
                            "judge_slope_ci_high": estimate + half}])
    none = pd.DataFrame(columns=["position_slope"]), pd.DataFrame(columns=["self_preference", "ci_low", "ci_high"])
    assert family_wise(length, *none, n) == 1
    assert length["p_adjusted"].iloc[0] == pytest.approx(p, rel=1e-9)
    assert length["effect"].iloc[0] == (p < 0.05)


def test_every_table_of_an_audit_of_two_criteria_is_numbered_from_zero_in_order():
    """The tables a Python user gets (and the CSVs) are plain frames: rows 0..n-1, each criterion's rows together,
    length-controlled means by raw rank within each criterion."""
    from calibration.trust.audit import audit

    rng = np.random.default_rng(22)
    judge, words, human, _ = simulate(rng, dialogues=12)
    judge = pd.concat([judge, judge.assign(criterion="d", score=-judge["score"])], ignore_index=True)
    items = words.rename(columns={"item_id": "id"}).assign(dialogue="A: hi",
                                                            candidate=lambda f: ["w " * int(n) for n in f["words"]])
    result = audit(judge, items[["id", "system", "dialogue", "candidate"]], self_systems="sys0", bootstrap=100)
    for name in ("noise", "length", "length_controlled", "position", "self_preference"):
        table = getattr(result, name)
        assert table.index.equals(pd.RangeIndex(len(table))), name
        assert list(dict.fromkeys(table["criterion"])) == ["c", "d"], name
    for _, part in result.length_controlled.groupby("criterion"):
        assert part["raw_rank"].is_monotonic_increasing


def test_each_criterions_sentences_quote_its_own_noise_and_the_unlabelled_criteria_are_named():
    """Two criteria re-asked twice: "steady" whose samples always agree (noise 0%), "shaky" whose samples always
    differ (100%); each sentence quotes its own criterion's noise. Labels only for "steady": the warning names
    "shaky", and only it."""
    from calibration.trust.audit import audit

    rng = np.random.default_rng(23)
    judge, words, human, _ = simulate(rng, dialogues=10)
    steady = judge.assign(criterion="steady", samples=[[3, 3]] * len(judge))
    shaky = judge.assign(criterion="shaky", samples=[[3, 4]] * len(judge))
    items = words.rename(columns={"item_id": "id"}).assign(dialogue="A: hi",
                                                            candidate=lambda f: ["w " * int(n) for n in f["words"]])
    labels = human.assign(criterion="steady")[["item_id", "system", "criterion", "human"]]
    result = audit(pd.concat([steady, shaky], ignore_index=True), items[["id", "system", "dialogue", "candidate"]],
                   labels, self_systems="sys0", bootstrap=100)
    noise = result.noise.set_index("criterion")["changed_share"]
    assert noise.to_dict() == {"steady": 0.0, "shaky": 1.0}
    quoted = {"steady": "re-run noise changes 0% of verdicts", "shaky": "re-run noise changes 100% of verdicts"}
    said = [s for s in result.sentences if "re-run noise" in s]
    assert {s.split(":")[0] for s in said} == {"steady", "shaky"}
    for sentence in said:
        criterion = sentence.split(":")[0]
        assert quoted[criterion] in sentence and quoted[{"steady": "shaky", "shaky": "steady"}[criterion]] \
            not in sentence, sentence
    unlabelled = [w for w in result.warnings if w.startswith("no human labels for criteria")]
    assert unlabelled == ["no human labels for criteria shaky: their effects are the judge's alone"]
