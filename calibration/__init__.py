"""Judge-versus-human calibration (`calibrate/`: agreement, correlation, calibration maps and reports); the human
study (`study/`: screen, estimate); whether the judge can be trusted without humans (`trust/`: audit, drift,
select); the cascade of judges and humans (`cascade/`: escalate). The shared base sits at this package's root.

Names are imported on first use: `judge --help` imports `calibration.cli`, which must not pull in pandas, scipy
or scikit-learn through this package.
"""

import sys
import types
from importlib import import_module

from .errors import CalibrationError

_WHERE = {
    "agreement": "agreement", "krippendorff_alpha": "agreement", "label_agreement": "agreement",
    "pairwise_agreement": "agreement", "score_agreement": "agreement",
    "align": "alignment", "check_overlap": "alignment",
    "CalibrationResults": "calibrate.calibrate", "analyse": "calibrate.calibrate", "calibrate": "calibrate.calibrate",
    "alpha_with_judge": "calibrate.ceiling", "human_ceiling": "calibrate.ceiling",
    "compare_judges": "calibrate.compare",
    "PairedScores": "correlation", "bootstrap_ci": "correlation", "correlations": "correlation",
    "level_statistic": "correlation",
    "aggregate_humans": "humans", "clean_noise": "humans",
    "HumanScale": "io", "load_human_labels": "io", "load_judge_scores": "io", "rubric_scales": "io",
    "IsotonicCalibrationMap": "maps", "apply_maps": "maps", "cross_validate_maps": "maps",
    "fit_maps": "maps", "load_maps": "maps", "save_maps": "maps",
    "kendall_tau_b": "stats", "pearson": "stats", "spearman": "stats",
    "write_report": "calibrate.report",
    "ScreenResult": "study.screen", "screen": "study.screen",
    "EstimateResult": "study.estimate", "PairwiseEstimateResult": "study.estimate", "estimate": "study.estimate",
    "AuditResult": "trust.audit", "audit": "trust.audit",
    "DriftResult": "trust.drift", "drift": "trust.drift",
    "SelectResult": "trust.select", "select": "trust.select",
    "EscalateResult": "cascade.escalate", "escalate": "cascade.escalate",
    "TuneResult": "tune.tune", "tune": "tune",
}

__all__ = ["CalibrationError", *sorted(_WHERE)]
# The verbs: an unknown keyword is a CalibrationError naming the closest one, as the docs promise (not a TypeError).
_VERBS = ("calibrate", "screen", "estimate", "audit", "drift", "select", "escalate")  # tune: its package checks


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'calibration' has no attribute {name!r}")
    module = import_module(f".{_WHERE[name]}", __name__)
    value = module if name == "tune" else getattr(module, name)  # the tune family's package is callable: the verb
    if name in _VERBS:
        value = _keywords_checked(value)
    globals()[name] = value  # later look-ups skip this function
    return value


def _keywords_checked(verb):
    import difflib
    import functools
    import inspect

    parameters = inspect.signature(verb).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return verb  # it takes any keyword, and says itself what it does not know
    known = [n for n, p in parameters.items() if p.kind is not p.VAR_POSITIONAL]

    @functools.wraps(verb)
    def checked(*args, **kwargs):
        for name in kwargs:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                raise CalibrationError(f"calibration.{verb.__name__}() got an unknown option {name!r}"
                                       + (f"; did you mean {close[0]}?" if close else ""))
        return verb(*args, **kwargs)

    return checked


def __dir__():
    return __all__


class _Package(types.ModuleType):
    """`calibration.calibrate` is the verb, a function, though a family folder has the same name: importing the
    folder (`from calibration.calibrate import ceiling`) must not rebind the package's attribute to the folder."""

    def __setattr__(self, name, value):
        if name in _WHERE and isinstance(value, types.ModuleType):
            return  # the import system binding a subpackage over a public name: keep the name
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
