"""Judge-versus-human calibration: agreement, correlation, calibration maps and reports."""

from .agreement import agreement, krippendorff_alpha, label_agreement, pairwise_agreement, score_agreement
from .alignment import align
from .analysis import CalibrationResults, analyse
from .ceiling import alpha_with_judge, human_ceiling
from .compare import compare_judges
from .correlation import PairedScores, bootstrap_ci, correlations, level_statistic
from .errors import CalibrationError
from .humans import aggregate_humans, clean_noise
from .io import load_human_labels, load_judge_scores
from .maps import IsotonicCalibrationMap, apply_maps, cross_validate_maps, fit_maps, load_maps, save_maps
from .stats import kendall_tau_b, pearson, spearman

__all__ = [
    "CalibrationError", "CalibrationResults", "IsotonicCalibrationMap", "PairedScores", "aggregate_humans",
    "agreement", "align", "alpha_with_judge", "analyse", "apply_maps", "bootstrap_ci", "clean_noise",
    "compare_judges", "correlations", "cross_validate_maps", "fit_maps", "human_ceiling", "kendall_tau_b",
    "krippendorff_alpha", "label_agreement", "level_statistic", "load_human_labels", "load_judge_scores",
    "load_maps", "pairwise_agreement", "pearson", "save_maps", "score_agreement", "spearman", "write_report",
]


def __getattr__(name):
    # The report pulls in matplotlib; import it only when it is used.
    if name == "write_report":
        from .report import write_report

        return write_report
    raise AttributeError(f"module 'calibration' has no attribute {name!r}")
