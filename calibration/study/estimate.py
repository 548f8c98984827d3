"""`judge estimate` as a function: the inputs read and checked, the plan held to its contract, the estimator run.

The estimators are in ppi.py (ppi_weighted.py, bounded.py), their tables in estimate_tables.py; this module decides
what enters them. Every label must land on something judged (calibration.io.check_labels), lie on the rubric's scale
(or --scale), and a plan must be the one the labels were drawn from: its own digest, the judgments' digest it names,
and the key `judge export` wrote from it. A plan that does not match is refused, never re-counted: targeted dialogues
taken as random would bias every estimate.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from judge.annotation.plan import check_key, plan_contract, read_plan
from judge.resources import file_sha256

from ..cells import labels_on_judged
from ..errors import CalibrationError
from ..result import Result
from .estimate_tables import Estimates
from .pairwise import PairwiseTables
from .printing import format_table, say

METHOD = ("PPI++: lambda tuned from 10 labels on, each dialogue's on the other labels (cross-fitted: t interval, "
          "n-1 df; at 10-19 labels one lambda shared by a criterion's systems; an active plan's fitted on all its "
          "labels there, n-2 df and lambda's error counted), else the human mean (t, n-1 df); no interval below 3 "
          "labels or on labels that do not vary; labels bunched at one end of the scale: the betting bound (human "
          "labels only) on the other side; with --judge, one cross-fitted predictor weighted m/(n+m); with an "
          "active plan, 1/p weights (Hajek)")


@dataclass
class EstimateResult(Estimates, Result):
    """Each system's mean human score and the paired differences (estimate_tables.py), with what went in."""

    verb: ClassVar[str] = "estimate"

    warnings: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    n_imputed: int = 0  # labelled cells with no judgment line, counted as failed judgments
    n_human_na: int = 0  # cells the annotators called N/A: out of that criterion's population
    scales: dict = field(default_factory=dict)  # criterion -> (low, high) of the human scale, where known

    def summary(self) -> dict:
        return {"criteria": self.criteria, "confidence": self.confidence, "random_sample": self.random_source,
                "n_random_dialogues": self.n_random, "human_cleaned": self.cleaned, "method": METHOD,
                "labelled_cells_without_judgment": self.n_imputed, "cells_humans_called_na": self.n_human_na,
                "provenance": self.provenance, "notes": self.notes + self.warnings}

    def files(self) -> dict[str, str]:
        """The exact --output-dir files."""
        return {"estimates.csv": self.estimates.to_csv(index=False),
                "differences.csv": self.differences.to_csv(index=False),
                "targeted.csv": self.targeted.to_csv(index=False),
                "summary.json": json.dumps(self.summary(), indent=2, default=str) + "\n"}

    def report_html(self) -> str:
        from .report import estimate_section  # matplotlib: only when a report is asked for

        return estimate_section(self)

    def text(self) -> str:
        from io import StringIO


        out = StringIO()
        print_estimate(self, out)
        return out.getvalue()


@dataclass
class PairwiseEstimateResult(PairwiseTables, Result):
    """`judge estimate --baseline`: win rates and Bradley-Terry strengths against the baseline, and rank sets
    (pairwise.py's tables), with what went in; `exit_code` is 1 when --margin was given and a system is not shown
    non-inferior."""

    verb: ClassVar[str] = "estimate"

    warnings: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.margin is None:
            return 0
        rows = self.estimates[self.estimates["quantity"] == "win_rate"]
        return 0 if (rows["noninferior"] == "yes").all() else 1

    def summary(self) -> dict:
        from .pairwise import METHOD as PAIRWISE_METHOD

        return {"criteria": self.criteria, "confidence": self.confidence, "baseline": self.baseline,
                "margin": self.margin, "random_sample": "plan" if self.from_plan else "all labelled",
                "n_random_dialogues": self.n_random,
                "lambda_bradley_terry": self.lambdas, "method": PAIRWISE_METHOD, "provenance": self.provenance,
                "notes": self.notes + self.warnings}

    def files(self) -> dict[str, str]:
        from .pairwise import summary_markdown

        return {"estimates.csv": self.estimates.to_csv(index=False), "ranking.csv": self.ranking.to_csv(index=False),
                "summary.json": json.dumps(self.summary(), indent=2, default=str) + "\n",
                "summary.md": summary_markdown(self)}

    def report_html(self) -> str:
        import html

        from .pairwise import summary_markdown

        return f"<h2>Pairwise estimate</h2><pre>{html.escape(summary_markdown(self))}</pre>"

    def text(self) -> str:
        from io import StringIO

        from .pairwise import print_pairwise

        out = StringIO()
        print_pairwise(self, out)
        return out.getvalue()


def estimate(judgments, human, *, plan=None, key=None, criteria=None, score_column: str | None = None,
             clean: bool = False, scale: tuple[float, float] | None = None, confidence: float = 0.95,
             apply_map=None, failure_value: float | None = None, baseline: str | None = None,
             margin: float | None = None, judges=None, items=None) -> EstimateResult | PairwiseEstimateResult:
    """`judge estimate`: `judgments` and `human` are paths or DataFrames (as calibration.io loads them; `human` also
    a list of them, labels in several files: a two-stage study's, one per stage), `plan` the
    folder `judge screen --budget` wrote, `key` the key.json `judge export --plan` wrote (checked against the plan);
    the other keywords are the CLI's flags. Raises CalibrationError with the CLI's message; warnings go into
    `result.warnings`. With `baseline` (pairwise judgments, as `judge compare` writes them, and pairwise votes
    "A|B" as `judge import` writes them) a PairwiseEstimateResult: win rates, Bradley-Terry strengths and rank sets
    (calibration.study.pairwise); `margin` adds the non-inferiority decision, `items` (the pairs with their texts)
    length- and style-controlled win rates. `judges` (--judge NAME=FILE: a dict or (name, path or DataFrame) pairs) are
    more judges, metrics or prompts: with them the judgments and these are combined into one predictor by a cross-fitted
    regression on the labels (calibration.study.predictor).

    >>> import calibration
    >>> result = calibration.estimate("examples/study/judgments.jsonl", "examples/study/labels.csv",
    ...                               plan="examples/study/plan")
    >>> sorted(result.files())
    ['differences.csv', 'estimates.csv', 'summary.json', 'targeted.csv']
    >>> row = result.estimates.query("criterion == 'accuracy' and system == 'alpha'").iloc[0]
    >>> bool(row.ci_low < row.estimate < row.ci_high)
    True
    """
    from ..io import check_labels, human_na_cells, judge_scales, read_human_labels, read_judge_scores, scale_bounds
    from .estimate_tables import estimate as estimate_tables
    from .screen import provenance

    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise CalibrationError(f"--confidence must be between 0 and 1, got {confidence!r}")
    from ..options import criteria_option, scale_option

    scale, criteria = scale_option(scale), criteria_option(criteria)
    from .pairwise import margin_option

    margin = margin_option(margin, baseline)
    if baseline is not None and judges:
        raise CalibrationError("--judge does not apply to pairwise estimates (--baseline): their judge is the "
                               "pairwise judgments' verdict")
    if baseline is not None:
        return pairwise_result(judgments, human, baseline, margin=margin, plan=plan, key=key, criteria=criteria,
                               score_column=score_column, clean=clean, confidence=confidence, apply_map=apply_map,
                               failure_value=failure_value, items=items)
    if items is not None:
        raise CalibrationError("--items gives the pairs' texts for length-controlled win rates: pairwise estimates "
                               "only, with --baseline SYSTEM")
    if key is not None and plan is None:
        raise CalibrationError("--key checks the labels against a plan: give --plan too")
    judge, where = read_judge_scores(judgments, score_column, failure_value)
    if len(judge) and judge["system_1"].notna().all():
        raise CalibrationError(f"{where}: pairwise judgments (as `judge compare` writes them): give --baseline SYSTEM "
                               "for win rates, Bradley-Terry strengths and rank sets against it")
    scales, warnings = judge_scales(judge, scale, judgments, required=True)
    labels = read_human_labels(human, scales)
    judge, imputed = check_labels(labels, judge, criteria=criteria)
    if imputed:
        warnings.append(f"{imputed} labelled cell(s) have no judgment line (the judgments file skips them): counted "
                        "as failed judgments, in the population and imputed as the engine's failures are")
    judge, human_na = human_na_cells(judge, labels)
    random_items, targeted_items, plan_notes = plan_parts(plan, key, labels, judge, judgments)
    inclusion = plan_inclusion(plan) if plan is not None else None
    first_stage = plan_first_stage(plan) if plan is not None else None
    warnings += plan_notes
    if apply_map is not None:
        from ..maps import apply_maps, load_maps

        judge = apply_maps(judge, load_maps(apply_map))
    from .predictor import judges_listed, named_source, other_judges

    others, notes = other_judges(judges, human, scale, failure_value, judge)
    warnings += notes
    bounds = scale_bounds(scales)
    tables = estimate_tables(judge, labels, criteria, clean, random_items, targeted_items, confidence, others,
                             inclusion, bounds, first_stage)
    result = EstimateResult(tables.estimates, tables.differences, tables.targeted, tables.criteria,
                            tables.confidence, tables.random_source, tables.n_random, tables.cleaned,
                            list(tables.notes), warnings, provenance(judgments, judge, human, None), imputed,
                            human_na, bounds)
    result.provenance.pop("seed", None)
    if plan is not None:
        result.provenance["plan"] = {"path": str(plan), "sha256": file_sha256(Path(plan) / "plan.csv")}
    if human_na:
        result.notes.append(f"{human_na} labelled cell(s) the annotators called N/A: left out of that criterion's "
                            "population, as the judge's N/A are")
    if first_stage is not None and inclusion is None:
        result.notes.append(f"a two-stage plan whose second stage was drawn uniformly: with the first stage's "
                            f"{len(first_stage)} dialogues (the pilot) it is one simple random sample, estimated as "
                            "one")
    elif first_stage is not None:
        result.notes.append(f"a two-stage plan: the first stage's {len(first_stage)} uniformly drawn dialogues (the "
                            "pilot) and the second stage's count together, weighted so that the estimate is unbiased "
                            "whatever the pilot decided (calibration.study.ppi_weighted.two_stage_inclusion), "
                            "normalised "
                            "by their realised sum (Hajek); where labels bunch at one end of the scale, the interval "
                            "is the first stage's bounded one")
    elif inclusion is not None:
        result.notes.append("the plan's random part was drawn with unequal inclusion probabilities (an active "
                            "design): every labelled dialogue weighs 1/p, normalised by their realised sum (Hajek), "
                            "t on Kish's effective number of labels")
    if others:
        result.provenance["judges"] = {name: named_source(source) for name, source in judges_listed(judges)}
        result.notes.append(f"the judge is one predictor from the judgments and {len(others)} more "
                            f"({', '.join(others)}): a ridge regression on the labels (or the judgments' judge alone "
                            "where cross-validation prefers it), cross-fitted over folds of labelled dialogues, "
                            "with lambda = the unlabelled share m / (n + m) (no degree of freedom spent)")
    return result


def pairwise_result(judgments, human, baseline, *, margin, plan, key, criteria, score_column, clean, confidence,
                    apply_map, failure_value, items=None) -> PairwiseEstimateResult:
    """The pairwise path of estimate(): inputs read and checked, then calibration.study.pairwise."""
    from ..io import read_human_labels, read_judge_scores
    from .pairwise import pairwise_estimate
    from .screen import provenance

    if not isinstance(baseline, str) or not baseline.strip():
        raise CalibrationError(f"--baseline must name a system of the pairs, got {baseline!r}")
    refused = [flag for flag, value in (("--clean", clean), ("--apply-map", apply_map)) if value]
    if refused:
        raise CalibrationError(f"{', '.join(refused)} do(es) not apply to pairwise estimates (--baseline)")
    if key is not None and plan is None:
        raise CalibrationError("--key checks the labels against a plan: give --plan too")
    judge, where = read_judge_scores(judgments, score_column, failure_value)
    if not judge["system_1"].notna().any():
        raise CalibrationError(f"{where}: no pairwise judgment (system_1 / system_2, as `judge compare` writes "
                               "them): --baseline applies to pairwise studies; without it, estimate scores systems")
    labels = read_human_labels(human, {})
    labels_on_judged(labels, "item_id", set(judge["item_id"]), lambda row: f"item {row['item_id']!r} is not in "
                     "the judgments")
    judged = set(judge.loc[judge["system_1"].notna(), "criterion"])
    labels_on_judged(labels, "criterion", judged, lambda row: f"criterion {row['criterion']!r} matches no pairwise "
                     f"criterion of the judgments; they have {', '.join(sorted(judged))}")
    random_items, targeted_items, warnings = plan_parts(plan, key, labels, judge, judgments)
    if plan is not None and plan_inclusion(plan) is not None:
        raise CalibrationError(f"{Path(plan) / 'plan.csv'}: an active plan (unequal inclusion probabilities): "
                               "pairwise estimates do not weigh votes by 1/p yet; plan pairwise studies with "
                               "--design uniform")
    if targeted_items:  # the votes on the plan's targeted dialogues are no sample: they never enter the estimates
        targeted = labels["item_id"].isin(targeted_items)
        if targeted.any():
            warnings.append(f"{int(targeted.sum())} vote(s) on the plan's targeted dialogues: left out of the "
                            "estimates, which take the random part only")
        labels = labels[labels["item_id"].isin(random_items)]
    if judge["system_1"].isna().any():
        warnings.append(f"{int(judge['system_1'].isna().sum())} judgment(s) score one system (not a pair): left out of "
                        "the pairwise estimate")
    tables = pairwise_estimate(judge, labels, baseline.strip(), criteria=criteria, confidence=confidence,
                               margin=margin, where=labels.attrs.get("path", "the human labels"), items=items)
    tables.from_plan = plan is not None
    result = PairwiseEstimateResult(**{f.name: getattr(tables, f.name) for f in fields(tables)}, warnings=warnings,
                                    provenance=provenance(judgments, judge, human, None))
    result.provenance.pop("seed", None)
    return result


def plan_parts(plan, key, labels: pd.DataFrame, judge: pd.DataFrame, judgments) -> tuple[set | None, set | None,
                                                                                          list[str]]:
    """(random items, targeted items, warnings) from the plan, after holding it to its contract."""
    from ..io import label_at
    if plan is None:
        return None, None, []
    plan = Path(plan)
    frame, info, digest, warnings = plan_contract(plan, judgments, judge["item_id"],
                                                  "estimate with them, or screen these judgments for a new plan",
                                                  CalibrationError)
    parts = dict(zip(frame["item_id"], frame["part"]))
    unplanned = ~labels["item_id"].isin(set(parts))
    if unplanned.any():
        raise CalibrationError(f"{label_at(labels, labels[unplanned].iloc[0])}: "
                               f"dialogue {labels['item_id'][unplanned].iloc[0]!r} is not in the plan; labels outside "
                               "the plan are neither the random sample nor targeted")
    if key is not None:
        check_key(Path(key), parts, digest, CalibrationError)
    random_items = {i for i, part in parts.items() if part == "random"}
    if not random_items:
        raise CalibrationError(f"{plan / 'plan.csv'}: the plan has no random part: its labels are not a sample of "
                               "the judged dialogues, so nothing can be estimated from them")
    return random_items, {i for i, part in parts.items() if part == "targeted"}, warnings


def plan_inclusion(plan) -> dict[str, float] | None:
    """{dialogue: inclusion probability} of the plan's random part when plan.csv records unequal ones (an active
    design, `judge screen --design active`); None for a uniform draw, recorded (`judge escalate` writes n/N) or not:
    every probability equal, the plain estimator. A two-stage plan (`judge screen --pilot-plan`): what stands for
    them, estimate.two_stage_inclusion; None too when its second stage was drawn uniformly (the weights are then
    equal: one simple random sample)."""
    from .ppi_weighted import two_stage_inclusion

    frame, info = read_plan(Path(plan), CalibrationError)
    if "inclusion_probability" not in frame.columns:
        return None
    random = frame[frame["part"] == "random"]
    probabilities = random["inclusion_probability"].astype(float)
    if "stage" in frame.columns:
        judged = (info.get("stages") or {}).get("judged")
        if isinstance(judged, bool) or not isinstance(judged, int) or judged < len(random):
            raise CalibrationError(f"{Path(plan) / 'plan.json'}: plan.csv has two stages but plan.json records no "
                                   "number of judged dialogues (stages.judged) to weigh them by")
        probabilities = pd.Series(two_stage_inclusion(random["stage"].eq("1").to_numpy(), probabilities.to_numpy(),
                                                      judged), index=random.index)
    if np.ptp(probabilities.to_numpy()) <= 1e-12 * probabilities.max():
        return None
    return dict(zip(random["item_id"], probabilities))


def plan_first_stage(plan) -> set | None:
    """The dialogues of a two-stage plan's first, uniform stage (its random part), None for a one-stage plan."""
    frame, _ = read_plan(Path(plan), CalibrationError)
    if "stage" not in frame.columns:
        return None
    return set(frame.loc[frame["part"].eq("random") & frame["stage"].eq("1"), "item_id"])


# -- what `judge estimate` prints ------------------------------------------------------------------------------
def separated(differences):
    """A difference is separated from zero only by an interval with two finite, distinct bounds that exclude it: a
    NaN bound (no interval could hold) or a zero-width one (labels without variance) decides nothing."""
    import numpy as np

    low, high = differences["ci_low"].astype(float), differences["ci_high"].astype(float)
    proper = np.isfinite(low) & np.isfinite(high) & (low < high)
    return proper & ((low > 0) | (high < 0))


def _with_note(frame):
    """The table with a `note` column: estimate_tables.py's interval_note (why no interval, or why its far side is the
    bounded-scale betting bound), blank otherwise."""
    note = frame["interval_note"].fillna("").astype(str) if "interval_note" in frame else ""
    return frame.assign(note=note)


def print_estimate(result, out=None) -> None:
    out = sys.stdout if out is None else out
    if result.random_source == "plan":
        say(f"Random sample: the {result.n_random} labelled dialogues of the plan's random part.", file=out)
    else:
        say(f"Random sample: no --plan given, so all {result.n_random} labelled dialogues are taken as a uniformly "
              "random sample of the judged dialogues; if some were chosen on purpose, the estimates are biased.",
              file=out)
    human = "cleaned (DialSummEval noise removal) mean" if result.cleaned else "mean"
    level = f"{result.confidence:.0%}"
    say(f"Human score of a summary: the {human} over its annotators. Intervals: {level}, PPI++ with a t quantile.",
          file=out)
    if result.n_imputed:
        say(f"{result.n_imputed} labelled cell(s) had no judgment line: counted as failed judgments.", file=out)
    say("\nPer system (estimate = prediction-powered; human_only = the same labels alone)", file=out)
    columns = ["criterion", "system", "estimate", "ci_low", "ci_high", "human_only", "human_only_ci_low",
               "human_only_ci_high", "n_labelled", "n_judged", "width_ratio", "effective_labels", "labels_saved",
               "lambda"]
    print(format_table(_with_note(result.estimates)[columns + ["note"]]), file=out)
    say(f"\nPaired differences system_a - system_b (per dialogue); each interval holds at {level} on its own, "
          "not for all pairs at once; separated only where both bounds are finite and exclude 0", file=out)
    differences = _with_note(result.differences).assign(separated=separated(result.differences).map(
        {True: "yes", False: ""}))
    print(format_table(differences[["criterion", "system_a", "system_b", "estimate", "ci_low", "ci_high",
                               "human_only_ci_low", "human_only_ci_high", "n_labelled", "width_ratio",
                               "effective_labels", "labels_saved", "separated", "note"]]), file=out)
    if not result.targeted.empty:
        say("\nLabels on targeted dialogues (not a random sample: not in the estimates above; read with care)",
              file=out)
        print(format_table(result.targeted), file=out)
    for note in result.notes:
        say(f"note: {note}", file=out)
