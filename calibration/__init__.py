"""Judge-versus-human calibration: agreement, correlation, calibration maps and reports; the human study
(`study/`: screen, estimate) and whether the judge can be trusted without humans (`trust/`: audit, drift, select).

Names are imported on first use: `judge --help` imports `calibration.cli`, which must not pull in pandas, scipy
or scikit-learn through this package.
"""

from importlib import import_module

from .errors import CalibrationError

_WHERE = {
    "agreement": "agreement", "krippendorff_alpha": "agreement", "label_agreement": "agreement",
    "pairwise_agreement": "agreement", "score_agreement": "agreement",
    "align": "alignment", "check_overlap": "alignment",
    "CalibrationResults": "analysis", "analyse": "analysis", "calibrate": "analysis",
    "alpha_with_judge": "ceiling", "human_ceiling": "ceiling",
    "compare_judges": "compare",
    "PairedScores": "correlation", "bootstrap_ci": "correlation", "correlations": "correlation",
    "level_statistic": "correlation",
    "aggregate_humans": "humans", "clean_noise": "humans",
    "HumanScale": "io", "load_human_labels": "io", "load_judge_scores": "io", "rubric_scales": "io",
    "IsotonicCalibrationMap": "maps", "apply_maps": "maps", "cross_validate_maps": "maps", "fit_maps": "maps",
    "load_maps": "maps", "save_maps": "maps",
    "kendall_tau_b": "stats", "pearson": "stats", "spearman": "stats",
    "write_report": "report",
    "ScreenResult": "study.screen", "screen": "study.screen",
    "EstimateResult": "study.estimate", "PairwiseEstimateResult": "study.estimate", "estimate": "study.estimate",
    "AuditResult": "trust.audit", "audit": "trust.audit",
    "DriftResult": "trust.drift", "drift": "trust.drift",
    "SelectResult": "trust.select", "select": "trust.select",
    "EscalateResult": "cascade.escalate", "escalate": "cascade.escalate",
    "TuneResult": "tune.tune", "tune": "tune",
}

__all__ = ["CalibrationError", *sorted(_WHERE)]


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'calibration' has no attribute {name!r}")
    module = import_module(f".{_WHERE[name]}", __name__)
    value = module if name == "tune" else getattr(module, name)  # the tune family's package is callable: the verb
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return __all__
