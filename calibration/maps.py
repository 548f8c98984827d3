"""Calibration maps: isotonic regression from judge scores to the human scale."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression
from sklearn.model_selection import GroupKFold

from .errors import CalibrationError
from .io import read_text

FORMAT = "judge-calibration-map/isotonic@1"


class IsotonicCalibrationMap:
    """Monotone map judge score -> expected human score, shaped like a scikit-learn estimator.

    Out-of-range inputs are clipped to the fitted range (out_of_bounds="clip"). The fitted map is the
    piecewise-linear curve through (X_thresholds_, y_thresholds_), which is all that save() needs to store.
    """

    def __init__(self, increasing: bool | str = True, y_min: float | None = None, y_max: float | None = None):
        self.increasing = increasing
        self.y_min = y_min
        self.y_max = y_max

    def get_params(self, deep: bool = True) -> dict:
        return {"increasing": self.increasing, "y_min": self.y_min, "y_max": self.y_max}

    def set_params(self, **params):
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def fit(self, X, y, sample_weight=None):
        x = np.asarray(X, dtype=float).ravel()
        y = np.asarray(y, dtype=float).ravel()
        keep = ~(np.isnan(x) | np.isnan(y))
        if keep.sum() < 2:
            raise CalibrationError("a calibration map needs at least two (judge, human) pairs")
        model = IsotonicRegression(increasing=self.increasing, y_min=self.y_min, y_max=self.y_max,
                                   out_of_bounds="clip")
        model.fit(x[keep], y[keep], None if sample_weight is None else np.asarray(sample_weight)[keep])
        self.X_thresholds_ = np.asarray(model.X_thresholds_, dtype=float)
        self.y_thresholds_ = np.asarray(model.y_thresholds_, dtype=float)
        self.n_samples_ = int(keep.sum())
        return self

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "X_thresholds_"):
            raise CalibrationError("the calibration map is not fitted")
        x = np.asarray(X, dtype=float).ravel()
        # np.interp clips to the end values, as IsotonicRegression(out_of_bounds="clip") does; NaN stays NaN.
        return np.where(np.isnan(x), np.nan, np.interp(x, self.X_thresholds_, self.y_thresholds_))

    transform = predict

    def fit_transform(self, X, y):
        return self.fit(X, y).predict(X)

    def to_dict(self) -> dict:
        return {"X_thresholds": self.X_thresholds_.tolist(), "y_thresholds": self.y_thresholds_.tolist(),
                "n_samples": self.n_samples_, **self.get_params()}

    @classmethod
    def from_dict(cls, data: dict) -> IsotonicCalibrationMap:
        mapping = cls(data.get("increasing", True), data.get("y_min"), data.get("y_max"))
        mapping.X_thresholds_ = np.asarray(data["X_thresholds"], dtype=float)
        mapping.y_thresholds_ = np.asarray(data["y_thresholds"], dtype=float)
        mapping.n_samples_ = int(data.get("n_samples", 0))
        return mapping

    def save(self, path: str | Path) -> None:
        save_maps({"*": self}, path)

    @classmethod
    def load(cls, path: str | Path) -> IsotonicCalibrationMap:
        maps = load_maps(path)
        if len(maps) != 1:
            raise CalibrationError(f"{path}: holds maps for {len(maps)} criteria; use load_maps()")
        return next(iter(maps.values()))


def save_maps(maps: dict[str, IsotonicCalibrationMap], path: str | Path) -> None:
    """One JSON file holding one map per criterion."""
    payload = {"format": FORMAT, "maps": {criterion: m.to_dict() for criterion, m in maps.items()}}
    from judge.outputs import write_files

    write_files({Path(path): json.dumps(payload, indent=2) + "\n"}, verb="calibrate --fit-map")


def load_maps(path: str | Path) -> dict[str, IsotonicCalibrationMap]:
    path = Path(path)
    try:
        payload = json.loads(read_text(path, "calibration map"))
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CalibrationError(f"{path}: not a calibration map file (expected \"format\": \"{FORMAT}\")")
    try:
        return {criterion: IsotonicCalibrationMap.from_dict(data) for criterion, data in payload["maps"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: malformed map ({exc})") from None


def fit_maps(pairs: pd.DataFrame, criteria=None) -> dict[str, IsotonicCalibrationMap]:
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    return {c: IsotonicCalibrationMap().fit(pairs.loc[pairs.criterion == c, "judge"],
                                            pairs.loc[pairs.criterion == c, "human"]) for c in criteria}


def apply_maps(judge: pd.DataFrame, maps: dict[str, IsotonicCalibrationMap]) -> pd.DataFrame:
    """Calibrated copy of judge scores; `score_raw` keeps the original. A "*" map applies to every criterion."""
    out = judge.copy()
    out["score_raw"] = out["score"]
    for criterion in out["criterion"].unique():
        mapping = maps.get(criterion, maps.get("*"))
        if mapping is None:
            continue
        rows = out["criterion"] == criterion
        out.loc[rows, "score"] = mapping.predict(out.loc[rows, "score_raw"])
    return out


def cross_validate_maps(pairs: pd.DataFrame, criteria=None, n_splits: int = 5) -> pd.DataFrame:
    """MAE / RMSE of the judge against the humans before and after the map, out of fold.

    Folds are grouped by dialogue (GroupKFold on item_id) so that no dialogue is both fitted and scored.
    """
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        part = pairs[pairs["criterion"] == criterion]
        groups = part["item_id"].to_numpy()
        folds = min(n_splits, len(np.unique(groups)))
        if folds < 2:
            continue
        x, y = part["judge"].to_numpy(float), part["human"].to_numpy(float)
        predicted = np.empty_like(y)
        for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
            predicted[test] = IsotonicCalibrationMap().fit(x[train], y[train]).predict(x[test])
        rows.append({
            "criterion": criterion, "n": len(part), "folds": folds,
            "mae_before": float(np.mean(np.abs(x - y))), "mae_after": float(np.mean(np.abs(predicted - y))),
            "rmse_before": float(np.sqrt(np.mean((x - y) ** 2))),
            "rmse_after": float(np.sqrt(np.mean((predicted - y) ** 2))),
        })
    return pd.DataFrame(rows)
