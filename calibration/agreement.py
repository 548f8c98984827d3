"""Agreement: Krippendorff's alpha, weighted kappa, exact / +-1 agreement, categorical and pairwise labels."""

from __future__ import annotations

import warnings
from typing import Literal

import krippendorff
import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from .humans import KEY, annotator_matrix

AlphaLevel = Literal["nominal", "ordinal", "interval", "ratio"]  # krippendorff.alpha's levels of measurement
ALPHA_LEVELS: tuple[AlphaLevel, ...] = ("interval", "ordinal", "nominal")
PAIRWISE_VERDICTS = ("1", "2", "0")  # 0 = tie


def round_to_scale(values) -> np.ndarray:
    """Half-up rounding to whole scale points (3.5 -> 4): needed for kappa/ordinal/nominal on means."""
    return np.floor(np.asarray(values, dtype=float) + 0.5)


def krippendorff_alpha(labels: pd.DataFrame, criterion: str | None = None, level: AlphaLevel = "interval",
                       extra_rater: pd.DataFrame | None = None, scale: tuple[float, float] | None = None) -> float:
    """Krippendorff's alpha among annotators (units = (item, system)), via the `krippendorff` package.

    `extra_rater` (item_id, system, score) is added as one more rater, e.g. the judge; for the ordinal and
    nominal levels its scores are rounded to the scale so that they share the humans' categories. It must lie on
    `scale` (low, high), by default the range the humans used.
    """
    if criterion is not None:
        labels = labels[labels["criterion"] == criterion]
    if labels.empty:
        return float("nan")  # no label: alpha is undefined (and the humans' range, the judge's default scale, too)
    criterion_name = labels["criterion"].iloc[0]
    table = annotator_matrix(labels.assign(criterion=criterion_name), criterion_name)
    if extra_rater is not None:
        scores = extra_rater.set_index(["item_id", "system"])["score"]
        human_values = table.to_numpy(dtype=float)
        low, high = scale if scale is not None else (np.nanmin(human_values), np.nanmax(human_values))
        if scores.min() < low or scores.max() > high:
            return float("nan")  # not on the humans' scale (e.g. a metric in [0, 1]): alpha is meaningless
        # Interval: 0.1 steps keep the package's values x values coincidence matrix small for continuous
        # scores; ordinal / nominal: whole scale points, the humans' categories.
        steps = 10.0 if level == "interval" else 1.0
        scores = pd.Series(round_to_scale(scores * steps) / steps, index=scores.index)
        table = table.join(scores.rename("__extra_rater__"), how="left")
    data = table.to_numpy(dtype=float).T  # raters x units
    paired_units = (np.isfinite(data).sum(axis=0) >= 2).sum()
    if paired_units == 0 or len(np.unique(data[np.isfinite(data)])) < 2:
        return float("nan")  # one annotator per unit (a mean-only release) or one value: alpha is undefined
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def score_agreement(judge, human) -> dict[str, float]:
    """Quadratic-weighted Cohen's kappa, exact and +-1 agreement, MAE and RMSE of two score vectors.

    Both sides are rounded half-up to whole scale points for kappa and exact / +-1 agreement (a mean of
    annotators or an expected score is rarely a whole point); MAE and RMSE use the raw values. Kappa weighs a
    disagreement by the squared distance in scale points, (i - j)^2, over every point between the lowest and the
    highest one used. Pairs with a missing value on either side are left out.
    """
    judge = np.asarray(judge, dtype=float)
    human = np.asarray(human, dtype=float)
    keep = ~(np.isnan(judge) | np.isnan(human))
    judge, human = judge[keep], human[keep]
    if judge.size == 0:
        return {"kappa_quadratic": np.nan, "exact": np.nan, "within_1": np.nan, "mae": np.nan, "rmse": np.nan}
    judge_points, human_points = round_to_scale(judge), round_to_scale(human)
    if len(np.unique(np.concatenate([judge_points, human_points]))) < 2:
        kappa = float("nan")  # one category only: kappa is undefined
    else:
        # Every whole point between the lowest and the highest is passed as a label: scikit-learn weighs by the
        # position in `labels`, so with only 1, 4 and 5 used it would count 1 -> 4 as one step instead of three.
        points = np.arange(int(min(judge_points.min(), human_points.min())),
                           int(max(judge_points.max(), human_points.max())) + 1)
        kappa = float(cohen_kappa_score(judge_points.astype(int), human_points.astype(int), labels=points,
                                        weights="quadratic"))
    difference = judge_points - human_points
    return {
        "kappa_quadratic": kappa,
        "exact": float(np.mean(difference == 0)),
        "within_1": float(np.mean(np.abs(difference) <= 1)),
        "mae": float(np.mean(np.abs(judge - human))),
        "rmse": float(np.sqrt(np.mean((judge - human) ** 2))),
    }


def agreement(pairs: pd.DataFrame, criteria=None) -> pd.DataFrame:
    """Judge vs human aggregate per criterion, long form: criterion, statistic, value, n.

    The definition: each judge score against the mean over annotators of the same (item, system, criterion) (the
    cleaned mean with --clean), not against each annotator; see score_agreement for the rounding.
    """
    criteria = sorted(pairs["criterion"].unique()) if criteria is None else criteria
    rows = []
    for criterion in criteria:
        part = pairs[pairs["criterion"] == criterion]
        for statistic, value in score_agreement(part["judge"], part["human"]).items():
            rows.append({"criterion": criterion, "statistic": statistic, "value": value, "n": len(part)})
    return pd.DataFrame(rows, columns=["criterion", "statistic", "value", "n"])


def _majority(labels: pd.Series):
    counts = labels.value_counts()
    if counts.empty or (len(counts) > 1 and counts.iloc[0] == counts.iloc[1]):
        return None  # no majority: the human side is undecided
    return counts.index[0]


def _abstained(human_labels: pd.DataFrame) -> pd.Series:
    if "abstained" not in human_labels:
        return pd.Series(False, index=human_labels.index)
    return human_labels["abstained"].fillna(False).astype(bool)


def human_majority_labels(human_labels: pd.DataFrame) -> pd.DataFrame:
    """Majority label over annotators per (item, system, criterion); ties give None. Abstentions do not vote."""
    labelled = human_labels[~_abstained(human_labels)]
    labelled = labelled.assign(
        label=labelled["label"].where(labelled["label"].notna(),
                                      labelled["score"].map(lambda v: None if pd.isna(v) else f"{v:g}")))
    labelled = labelled[labelled["label"].notna()]
    return labelled.groupby(KEY)["label"].agg(_majority).reset_index()


def label_agreement(judge: pd.DataFrame, human_labels: pd.DataFrame, criterion: str,
                    abstain_labels=()) -> dict:
    """Categorical criterion: accuracy, Cohen's kappa and confusion matrix of judge vs human majority labels.

    Abstentions are counted apart and left out of the statistics, on both sides: the judge's (status "abstain",
    a label in `abstain_labels`, or no label), and the humans' (rows flagged `abstained`, the rubric's
    abstaining label), which do not vote in the majority. Cells without a human majority are counted apart too.
    """
    judge = judge[(judge["criterion"] == criterion) & judge["status"].isin(["label", "abstain", "ok"])]
    judge = judge.assign(label=judge["label"].where(judge["label"].notna(),
                                                    judge["score"].map(lambda v: None if pd.isna(v) else f"{v:g}")))
    abstained = (judge["status"] == "abstain") | judge["label"].isin(list(abstain_labels)) | judge["label"].isna()
    human_rows = human_labels[human_labels["criterion"] == criterion]
    human = human_majority_labels(human_rows)
    merged = judge[~abstained].merge(human, on=KEY, how="inner", suffixes=("_judge", "_human"))
    undecided = merged["label_human"].isna()
    merged = merged[~undecided]
    classes = sorted(set(merged["label_judge"]) | set(merged["label_human"]))
    result = {"criterion": criterion, "n": len(merged), "abstained": int(abstained.sum()),
              "human_abstained": int(_abstained(human_rows).sum()),
              "human_undecided": int(undecided.sum()), "classes": classes}
    if len(merged) == 0:
        result.update(accuracy=np.nan, kappa=np.nan, confusion=pd.DataFrame())
        return result
    result["accuracy"] = float(np.mean(merged["label_judge"] == merged["label_human"]))
    result["kappa"] = (float(cohen_kappa_score(merged["label_human"], merged["label_judge"], labels=classes))
                       if len(classes) > 1 else float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # one class only: the 1 x 1 matrix is still right
        matrix = confusion_matrix(merged["label_human"], merged["label_judge"], labels=classes)
    result["confusion"] = pd.DataFrame(matrix, index=pd.Index(classes, name="human"),
                                       columns=pd.Index(classes, name="judge"))
    return result


def _verdict_from_scores(first: float, second: float) -> str:
    return "1" if first > second else "2" if second > first else "0"


def pairwise_agreement(judge: pd.DataFrame, human_labels: pd.DataFrame, criterion: str) -> dict:
    """Pairwise criterion (judge systems system_1 / system_2, label 1 / 2 / 0 = tie): agreement with humans with
    and without ties.

    The human verdict is the annotators' majority label for the same "A|B" row when there is one; otherwise it
    is derived from the human mean scores of A and B on that item (higher wins, equal = tie). `judge` comes
    from load_judge_scores, which fills system_1 / system_2 (from "A|B" in files older than those fields).
    """
    judge = judge[(judge["criterion"] == criterion) & judge["system_1"].notna()]
    judge = judge[judge["label"].isin(PAIRWISE_VERDICTS)]
    human = human_labels[human_labels["criterion"] == criterion]
    direct = human_majority_labels(human[human["system"].str.contains("|", regex=False)])
    direct = direct.set_index(["item_id", "system"])["label"]
    means = human[human["score"].notna()].groupby(["item_id", "system"])["score"].mean()
    verdicts = []
    for row in judge.itertuples(index=False):
        verdict = direct.get((row.item_id, row.system))
        if verdict is None:
            first, second = row.system_1, row.system_2
            if (row.item_id, first) in means.index and (row.item_id, second) in means.index:
                verdict = _verdict_from_scores(means[(row.item_id, first)], means[(row.item_id, second)])
        verdicts.append(verdict)
    judge = judge.assign(human=verdicts)
    judge = judge[judge["human"].isin(PAIRWISE_VERDICTS)]
    decisive = judge[(judge["label"] != "0") & (judge["human"] != "0")]
    return {
        "criterion": criterion,
        "n": len(judge),
        "agreement_with_ties": float(np.mean(judge["label"] == judge["human"])) if len(judge) else np.nan,
        "n_without_ties": len(decisive),
        "agreement_without_ties": float(np.mean(decisive["label"] == decisive["human"])) if len(decisive) else np.nan,
        "judge_ties": int((judge["label"] == "0").sum()),
        "human_ties": int((judge["human"] == "0").sum()),
    }
