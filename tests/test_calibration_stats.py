"""Data-independent checks of the vectorised statistics, the levels, the bootstrap and noise cleaning."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from calibration.correlation import PairedScores, bootstrap_ci, correlations, level_statistic
from calibration.humans import aggregate_humans, clean_noise
from calibration.stats import kendall_tau_b, pearson, resample_counts, spearman, weighted_ranks

SCIPY = {
    "pearson": (pearson, lambda x, y: scipy_stats.pearsonr(x, y).statistic),
    "spearman": (spearman, lambda x, y: scipy_stats.spearmanr(x, y).statistic),
    "kendall": (kendall_tau_b, lambda x, y: scipy_stats.kendalltau(x, y, variant="b").statistic),
}


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_batched_statistic_matches_scipy_on_tied_data(name):
    ours, reference = SCIPY[name]
    rng = np.random.default_rng(7)
    # Likert-like values: many ties on both sides.
    x = rng.integers(1, 6, size=(30, 25)).astype(float)
    y = np.clip(x + rng.integers(-2, 3, size=x.shape), 1, 5)
    expected = np.array([reference(a, b) for a, b in zip(x, y)])
    np.testing.assert_allclose(ours(x, y), expected, atol=1e-12)


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_weights_equal_repeating_units(name):
    """A bootstrap count vector must give the statistic of the expanded (repeated) sample."""
    ours, reference = SCIPY[name]
    rng = np.random.default_rng(11)
    x = rng.integers(1, 5, 40).astype(float)
    y = np.round(x * 0.5 + rng.normal(size=40))
    counts = resample_counts(rng, 40, 6)
    batched = ours(x, y, counts)
    for row, value in zip(counts, batched):
        repeat = row.astype(int)
        assert value == pytest.approx(reference(np.repeat(x, repeat), np.repeat(y, repeat)), abs=1e-12)


def test_kendall_large_shared_values_uses_blocked_path_consistently():
    rng = np.random.default_rng(3)
    x = rng.integers(1, 6, 3000).astype(float)
    y = np.clip(x + rng.integers(-1, 2, 3000), 1, 5)
    counts = resample_counts(rng, 3000, 3)
    batched = kendall_tau_b(x, y, counts)
    one_by_one = [kendall_tau_b(x[None, :], y[None, :], row[None, :])[0] for row in counts]
    np.testing.assert_allclose(batched, one_by_one, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_kendall_with_group_weights_equals_the_expanded_sample(seed):
    """Resampling whole dialogues: weights per dialogue (groups=) give what weights per summary give, and each
    replicate equals scipy's tau-b on the expanded sample (ties, a missing value, a dialogue never drawn)."""
    rng = np.random.default_rng(seed)
    dialogues, per = 9, 4
    groups = rng.permutation(np.repeat(np.arange(dialogues), per))  # units in any order
    x = rng.integers(0, 4, groups.size).astype(float)
    y = np.round(x / 2 + rng.integers(0, 3, groups.size))
    x[rng.integers(groups.size)] = np.nan
    counts = resample_counts(rng, dialogues, 40)
    grouped = kendall_tau_b(x, y, counts, groups=groups)
    assert np.allclose(grouped, kendall_tau_b(x, y, counts[:, groups]), equal_nan=True)
    keep = ~np.isnan(x)
    for b in range(5):
        repeat = counts[b, groups].astype(int)[keep]
        expected = scipy_stats.kendalltau(np.repeat(x[keep], repeat), np.repeat(y[keep], repeat), variant="b")
        assert grouped[b] == pytest.approx(expected.statistic, abs=1e-12)
    assert kendall_tau_b(x, y, groups=groups) == pytest.approx(kendall_tau_b(x, y))
    assert np.isnan(kendall_tau_b(x, np.ones_like(y), counts, groups=groups)).all()  # a constant side


def test_missing_values_are_left_out():
    x = np.array([1.0, 2.0, np.nan, 4.0, 5.0])
    y = np.array([2.0, 1.0, 3.0, np.nan, 5.0])
    keep = [0, 1, 4]
    assert spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x[keep], y[keep]).statistic)


def test_weighted_ranks_are_mid_ranks():
    ranks, tied = weighted_ranks(np.array([3.0, 1.0, 3.0, 2.0]), np.ones(4))
    np.testing.assert_allclose(ranks, [3.5, 1.0, 3.5, 2.0])
    np.testing.assert_allclose(tied, [2.0, 1.0, 2.0, 1.0])


def test_constant_side_gives_nan():
    assert np.isnan(pearson([1, 2, 3], [2, 2, 2]))
    assert np.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))


def _pairs_frame(judge, human, criterion="c"):
    items, systems = judge.shape
    return pd.DataFrame({
        "item_id": np.repeat([f"dlg{i}" for i in range(items)], systems),
        "system": np.tile([f"sys{j}" for j in range(systems)], items),
        "criterion": criterion,
        "judge": judge.ravel(),
        "human": human.ravel(),
    })


def test_levels_follow_the_definitions_and_skip_constant_items():
    rng = np.random.default_rng(5)
    judge = rng.integers(1, 6, size=(12, 5)).astype(float)
    human = np.clip(judge + rng.integers(-1, 2, size=judge.shape), 1, 5)
    judge[0] = 3.0  # constant judge on this item: skipped at summary level
    human[1] = 4.0  # constant human on this item: skipped too
    paired = PairedScores.from_pairs(_pairs_frame(judge, human), "c")
    per_item = [scipy_stats.pearsonr(judge[i], human[i]).statistic for i in range(2, 12)]
    assert level_statistic(paired, "summary", "pearson") == pytest.approx(np.mean(per_item))
    assert level_statistic(paired, "system", "pearson") == pytest.approx(
        scipy_stats.pearsonr(judge.mean(0), human.mean(0)).statistic)
    assert level_statistic(paired, "item", "kendall") == pytest.approx(
        scipy_stats.kendalltau(judge.ravel(), human.ravel()).statistic)
    table = correlations(_pairs_frame(judge, human), n_resamples=0)
    summary = table[(table.level == "summary") & (table.statistic == "pearson")].iloc[0]
    assert (summary.n_used, summary.n_skipped) == (10, 2)
    assert np.isnan(summary.p_value)


def test_bootstrap_ci_contains_estimate_and_is_reproducible():
    rng = np.random.default_rng(9)
    judge = rng.normal(size=(60, 8))
    human = judge + rng.normal(scale=0.8, size=judge.shape)
    paired = PairedScores.from_pairs(_pairs_frame(judge, human), "c")
    for level in ("system", "summary", "item"):
        estimate = level_statistic(paired, level, "spearman")
        low, high = bootstrap_ci(paired, level, "spearman", n_resamples=400, seed=42)
        assert low <= estimate <= high
        assert (low, high) == bootstrap_ci(paired, level, "spearman", n_resamples=400, seed=42)
        assert (low, high) != bootstrap_ci(paired, level, "spearman", n_resamples=400, seed=43)


def _labels(rows):
    return pd.DataFrame(rows, columns=["item_id", "system", "annotator", "criterion", "score"]).assign(label=None)


def test_noise_cleaning_drops_only_the_odd_one_out_of_a_triple():
    labels = _labels([
        ("d1", "s", "a", "coh", 4), ("d1", "s", "b", "coh", 4), ("d1", "s", "c", "coh", 2),  # c is noise
        ("d2", "s", "a", "coh", 1), ("d2", "s", "b", "coh", 3), ("d2", "s", "c", "coh", 5),  # all differ: kept
        ("d3", "s", "a", "coh", 5), ("d3", "s", "b", "coh", 5), ("d3", "s", "c", "coh", 5),  # all agree: kept
        ("d4", "s", "a", "coh", 2), ("d4", "s", "b", "coh", 3),  # a pair, not a triple: kept
        ("d1", "s", "a", "flu", 3), ("d1", "s", "b", "flu", 1), ("d1", "s", "c", "flu", 1),  # a is noise
    ])
    cleaned = clean_noise(labels)
    dropped = labels.merge(cleaned, how="left", indicator=True).query("_merge == 'left_only'")
    assert sorted(zip(dropped.item_id, dropped.annotator, dropped.criterion)) == [("d1", "a", "flu"),
                                                                                   ("d1", "c", "coh")]
    means = aggregate_humans(labels, clean=True).set_index(["item_id", "criterion"])["human"]
    assert means[("d1", "coh")] == 4 and means[("d2", "coh")] == 3 and means[("d1", "flu")] == 1
    assert aggregate_humans(labels).set_index(["item_id", "criterion"])["human"][("d1", "coh")] == pytest.approx(10 / 3)
