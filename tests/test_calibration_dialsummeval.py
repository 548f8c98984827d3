"""Reproducing DialSummEval (Gao & Wan, NAACL 2022) Tables 2, 3 and 4 from ../shared/data/dialsummeval."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from calibration.agreement import krippendorff_alpha
from calibration.alignment import align
from calibration.correlation import PairedScores, level_statistic
from calibration.humans import aggregate_humans, clean_noise
from calibration.io import load_human_labels, load_judge_scores

SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DATA = SHARED / "dialsummeval"
pytestmark = pytest.mark.skipif(not (DATA / "annotations.csv").exists(),
                                reason=f"DialSummEval data not found at {DATA} (set JUDGE_SHARED_DATA)")
CRITERIA = ("coherence", "consistency", "fluency", "relevance")


@pytest.fixture(scope="module")
def raw():
    return load_human_labels(DATA / "annotations.csv")


@pytest.fixture(scope="module")
def cleaned_means(raw):
    return aggregate_humans(raw, clean=True)


# Table 2: cleaned score counts (of 4,200) and interval alpha after noise removal.
TABLE_2 = {"coherence": (3161, 0.7564), "consistency": (3360, 0.6709), "fluency": (3050, 0.6782),
           "relevance": (3439, 0.5621)}


@pytest.mark.parametrize("criterion", CRITERIA)
def test_table_2_cleaned_counts_and_alpha(raw, criterion):
    count, alpha = TABLE_2[criterion]
    cleaned = clean_noise(raw)
    assert (raw.criterion == criterion).sum() == 4200
    assert (cleaned.criterion == criterion).sum() == count
    assert krippendorff_alpha(cleaned, criterion, "interval") == pytest.approx(alpha, abs=5e-5)


# Table 4 (cleaned per-system means), coherence / consistency / fluency / relevance, all 14 systems.
TABLE_4 = {
    "reference": (4.500, 4.370, 4.560, 4.210), "LONGEST-3": (3.230, 4.393, 4.100, 4.363),
    "LEAD-3": (4.370, 4.093, 4.200, 3.843), "PGN": (3.568, 2.103, 3.657, 2.293),
    "Transformer": (3.403, 1.573, 3.673, 1.650), "BART": (4.480, 3.667, 4.667, 3.500),
    "PEGASUS": (4.590, 3.730, 4.640, 3.417), "UniLM": (4.303, 3.320, 4.523, 3.290),
    "CODS": (4.268, 3.637, 4.567, 3.397), "ConvoSumm": (4.507, 3.743, 4.643, 3.437),
    "MV-BART": (4.320, 3.937, 4.660, 3.747), "PLM-BART": (4.360, 3.717, 4.680, 3.500),
    "Ctrl-DiaSumm": (4.320, 3.893, 4.650, 3.670), "S-BART": (4.227, 3.307, 4.520, 3.337),
}


@pytest.mark.parametrize("system", sorted(TABLE_4))
def test_table_4_per_system_cleaned_means(cleaned_means, system):
    means = cleaned_means[cleaned_means.system == system].groupby("criterion")["human"].mean()
    assert [round(means[c], 3) for c in CRITERIA] == pytest.approx(TABLE_4[system], abs=0.002)


# Table 3 (Pearson r vs cleaned human means, 14 systems incl. the reference): for each criterion
# (coherence, consistency, fluency, relevance) the system-level then summary-level value, as printed.
TABLE_3 = {
    "rouge-1": (0.59, 0.30, 0.42, 0.33, 0.58, 0.27, 0.40, 0.30),
    "rouge-2": (0.47, 0.26, 0.41, 0.32, 0.43, 0.22, 0.41, 0.30),
    "rouge-3": (0.39, 0.22, 0.39, 0.30, 0.33, 0.17, 0.40, 0.30),
    "rouge-4": (0.33, 0.20, 0.37, 0.27, 0.27, 0.14, 0.38, 0.28),
    "rouge-l": (0.57, 0.32, 0.39, 0.30, 0.54, 0.27, 0.37, 0.27),
    "bertscore_p": (0.57, 0.37, 0.11, 0.10, 0.50, 0.31, 0.08, 0.06),
    "bertscore_r": (0.43, 0.21, 0.45, 0.38, 0.42, 0.20, 0.46, 0.39),
    "bertscore_f1": (0.53, 0.31, 0.28, 0.24, 0.48, 0.27, 0.27, 0.22),
    "moverscore": (0.50, 0.28, 0.39, 0.32, 0.46, 0.25, 0.38, 0.31),
    "sms": (0.33, 0.18, 0.38, 0.28, 0.27, 0.14, 0.40, 0.29),
    "bartscore_s_h": (0.09, 0.08, 0.62, 0.44, 0.24, 0.15, 0.60, 0.42),
    "bartscore_h": (0.08, 0.05, -0.09, -0.09, 0.16, 0.13, -0.18, -0.12),
    "bartscore_h_r": (0.50, 0.21, 0.55, 0.46, 0.51, 0.21, 0.56, 0.46),
    "bartscore_r_h": (0.67, 0.42, 0.31, 0.23, 0.67, 0.40, 0.26, 0.17),
    "blanc_help": (-0.32, -0.21, 0.54, 0.45, -0.13, -0.08, 0.60, 0.50),
    "blanc_tune": (-0.37, -0.23, 0.50, 0.38, -0.18, -0.10, 0.56, 0.43),
    "feqa_score": (0.82, 0.27, 0.32, 0.16, 0.84, 0.26, 0.25, 0.10),
    "questeval": (0.50, 0.15, 0.85, 0.39, 0.75, 0.20, 0.83, 0.37),
    "summaqa_prob": (-0.08, -0.03, 0.64, 0.39, 0.03, -0.01, 0.67, 0.39),
    "summaqa_fscore": (-0.26, -0.11, 0.58, 0.26, -0.06, -0.06, 0.62, 0.29),
    "ppl": (-0.13, -0.01, -0.49, -0.30, -0.34, -0.15, -0.43, -0.30),
    "chrf": (0.42, 0.20, 0.46, 0.38, 0.41, 0.20, 0.47, 0.39),
    "Bleu_1": (0.35, 0.15, 0.34, 0.29, 0.30, 0.13, 0.36, 0.30),
    "Bleu_2": (0.31, 0.16, 0.35, 0.29, 0.25, 0.12, 0.37, 0.30),
    "Bleu_3": (0.28, 0.15, 0.33, 0.27, 0.21, 0.11, 0.36, 0.28),
    "Bleu_4": (0.25, 0.14, 0.33, 0.25, 0.17, 0.09, 0.36, 0.28),
    "METEOR": (0.37, 0.19, 0.42, 0.35, 0.33, 0.17, 0.43, 0.35),
    "EmbeddingAverageCosineSimilarity": (0.43, 0.17, 0.17, 0.20, 0.52, 0.22, 0.15, 0.19),
    "VectorExtremaCosineSimilarity": (0.47, 0.22, 0.35, 0.28, 0.43, 0.21, 0.35, 0.26),
    "GreedyMatchingScore": (0.43, 0.21, 0.35, 0.31, 0.43, 0.21, 0.36, 0.30),
    "factcc_cls": (-0.29, -0.09, 0.46, 0.19, -0.23, -0.09, 0.49, 0.19),
    "dae": (-0.24, -0.07, 0.50, 0.29, -0.15, -0.02, 0.54, 0.29),
}
# The one cell of 256 that the released data does not reproduce (data README): ROUGE-L fluency, summary
# level, is 0.256 from these files against 0.27 printed in the paper.
KNOWN_MISMATCH = {("rouge-l", "fluency", "summary"): 0.256}

CELLS = [(metric, criterion, level, TABLE_3[metric][2 * index + offset])
         for metric in TABLE_3 for index, criterion in enumerate(CRITERIA)
         for offset, level in enumerate(("system", "summary"))]


@pytest.fixture(scope="module")
def metric_paired(cleaned_means):
    cache = {}

    def get(metric, criterion):
        if metric not in cache:
            judge = load_judge_scores(DATA / "metric_scores.csv", score_column=metric)
            cache[metric] = align(judge, cleaned_means)[0]
        return PairedScores.from_pairs(cache[metric], criterion)

    return get


@pytest.mark.parametrize("metric, criterion, level, paper", CELLS,
                         ids=[f"{m}-{c}-{lv}" for m, c, lv, _ in CELLS])
def test_table_3_pearson(metric_paired, metric, criterion, level, paper):
    paired = metric_paired(metric, criterion)
    assert len(paired.systems) == 14 and paired.mask.all()
    value = level_statistic(paired, level, "pearson")
    if (metric, criterion, level) in KNOWN_MISMATCH:
        assert value == pytest.approx(KNOWN_MISMATCH[(metric, criterion, level)], abs=5e-4)
        assert round(value, 2) != paper  # documented exception: if this starts matching, drop it
    else:
        assert round(value, 2) == pytest.approx(paper, abs=1e-9)


@pytest.mark.parametrize("criterion", CRITERIA)
def test_discarded_amt_round_has_alpha_near_zero(criterion):
    amt = load_human_labels(DATA / "annotations_amt.csv")
    assert amt.groupby(["item_id", "system", "criterion"]).size().eq(5).all()
    assert abs(krippendorff_alpha(amt, criterion, "interval")) < 0.03


def test_table_2_alpha_through_the_cli_with_clean(tmp_path, capsys):
    from judge.cli import main

    out = tmp_path / "out"
    code = main(["calibrate", "--judgments", str(DATA / "metric_scores.csv"), "--score-column", "rouge-1",
                 "--human", str(DATA / "annotations.csv"), "--clean", "--bootstrap", "0", "--output-dir", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    table = pd.read_csv(out / "agreement.csv").set_index(["criterion", "statistic"])["value"]
    for criterion in CRITERIA:
        assert table[(criterion, "alpha_interval_humans")] == pytest.approx(TABLE_2[criterion][1], abs=5e-5)
    # The ceiling stays on the raw labels, and both the output and summary.json say which labels each used.
    assert "Krippendorff's alpha after noise removal (--clean)" in printed
    assert "on the raw labels even with --clean" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["alpha_on"], summary["ceiling_on"]) == ("cleaned labels", "raw labels")
