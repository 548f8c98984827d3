"""The whole calibration run as one function: what the CLI prints and what the report draws."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..agreement import agreement, label_agreement, pairwise_agreement
from ..alignment import align
from ..cells import chosen_criteria, spelled_as_judged
from ..correlation import LEVELS, STATISTIC_NAMES, PairedScores, correlations
from ..errors import CalibrationError
from ..humans import aggregate_humans, clean_noise
from ..maps import IsotonicCalibrationMap, cross_validate_maps, fit_maps
from ..result import Result
from ..stats import percentile_interval, resample_counts
from .ceiling import alpha_with_judge, human_ceiling
from .compare import compare_judges


@dataclass
class CalibrationResults(Result):
    """What `judge calibrate` found; its report is a whole page of its own (several sections)."""

    verb: ClassVar[str] = "calibrate"
    criteria: list[str]
    cleaned: bool
    n_resamples: int
    seed: int | None
    pairs: pd.DataFrame
    coverage: pd.DataFrame
    correlations: pd.DataFrame
    agreement: pd.DataFrame
    ceiling: pd.DataFrame
    alpha: pd.DataFrame
    system_means: pd.DataFrame
    map_evaluation: pd.DataFrame = field(default_factory=pd.DataFrame)
    maps: dict[str, IsotonicCalibrationMap] = field(default_factory=dict)
    labels: list[dict] = field(default_factory=list)
    pairwise: list[dict] = field(default_factory=list)
    comparison: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Numeric criteria with one annotator per summary (mean-only releases): no human agreement nor ceiling.
    single_annotator: list[str] = field(default_factory=list)
    # What the report names: judge model(s), rubric(s), input files; filled in by `calibrate`.
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # notes for stderr (the CLI prints them)
    calibrated_scores: pd.DataFrame = field(default_factory=pd.DataFrame)  # with --apply-map

    def files(self) -> dict[str, str]:
        """The exact files of `--output-dir` (name -> CSV or JSON text)."""
        files = table_files(self)
        if not self.calibrated_scores.empty:
            files["calibrated_scores.csv"] = self.calibrated_scores.to_csv(index=False)
        return files

    def report_html(self) -> str:
        """The HTML report page (matplotlib is imported here, not before)."""
        from .report import report_html

        return report_html(self)

    def page(self) -> str:
        return self.report_html()

    def text(self) -> str:
        """Exactly what `judge calibrate` prints on stdout."""
        import io

        out = io.StringIO()
        print_results(self, out)
        return out.getvalue()


def system_means_with_ci(pairs: pd.DataFrame, n_resamples: int = 1000, seed: int | None = 0,
                         confidence: float = 0.95) -> pd.DataFrame:
    """Per-system mean of judge and human scores with bootstrap CIs over items (dialogues)."""
    rows = []
    for criterion in sorted(pairs["criterion"].unique()):
        paired = PairedScores.from_pairs(pairs, criterion)
        mask = paired.mask.astype(float)
        counts = (resample_counts(np.random.default_rng(seed), len(paired.items), n_resamples)
                  if n_resamples else np.ones((1, len(paired.items))))
        with np.errstate(invalid="ignore", divide="ignore"):
            denominator = counts @ mask
            replicates = {name: (counts @ np.where(paired.mask, values, 0.0)) / denominator
                          for name, values in (("judge", paired.judge), ("human", paired.human))}
        for j, system in enumerate(paired.systems):
            used = paired.mask[:, j]
            if not used.any():
                continue
            row = {"criterion": criterion, "system": system, "n": int(used.sum())}
            for name, values in (("judge", paired.judge), ("human", paired.human)):
                low, high = percentile_interval(replicates[name][:, j], confidence) if n_resamples else (np.nan,) * 2
                row.update({f"{name}_mean": float(values[used, j].mean()), f"{name}_low": low,
                            f"{name}_high": high})
            rows.append(row)
    return pd.DataFrame(rows)


def _annotators_per_unit(labels: pd.DataFrame) -> dict[str, int]:
    """Most annotators on one (item, system) per criterion: agreement and the ceiling need at least two."""
    numeric = labels[labels["score"].notna()]
    return numeric.groupby(["criterion", "item_id", "system"]).size().groupby("criterion").max().to_dict()


def _kinds(judge: pd.DataFrame, labels: pd.DataFrame, criteria) -> tuple[list[str], list[str], list[str]]:
    """Which criteria are numeric, categorical (labels) and pairwise; a criterion may be pairwise and one other.

    Pairwise: the judge compared two systems. Categorical: the humans gave labels, or the judge gave labels on
    single systems. A judge that gives only numbers where the humans gave labels cannot be compared at all.
    """
    from ..io import label_at

    pair_rows = judge["system_1"].notna()
    pairwise = sorted(set(judge.loc[pair_rows, "criterion"]) & set(criteria))
    single = judge[~pair_rows]
    human_labels = set(labels.loc[labels["label"].notna(), "criterion"])
    judge_labels = set(single.loc[single["label"].notna() | (single["status"] == "label"), "criterion"])
    judge_numbers_only = set(single.loc[single["status"] == "ok", "criterion"]) - judge_labels
    for criterion in criteria:
        if criterion in human_labels and criterion in judge_numbers_only:
            example = labels.loc[(labels["criterion"] == criterion) & labels["label"].notna()].iloc[0]
            where = label_at(labels, example, "human labels")
            raise CalibrationError(
                f"{where}: criterion {criterion!r} has text scores such as {example['label']!r} where the judge "
                "gives numbers: write the human scores as numbers")
    categorical = sorted((human_labels | judge_labels) & set(criteria))
    numeric = [c for c in criteria if c not in categorical]
    return numeric, categorical, pairwise


def analyse(judge: pd.DataFrame, labels: pd.DataFrame, criteria=None, clean: bool = False,
            n_resamples: int = 1000, seed: int | None = 0, fit_map: bool = False,
            other_judge: pd.DataFrame | None = None, levels=LEVELS, statistics=STATISTIC_NAMES,
            scales: dict | None = None) -> CalibrationResults:
    """Everything `judge calibrate` reports.

    `scales` (criterion -> io.HumanScale, "*" for all, from the judgments' rubric or --scale) bounds the judge as
    one more rater in alpha, and names the labels that abstain in judgment files written before judgments
    carried an `abstained` flag (the rubric's "I don't know").
    """
    scales = scales or {}
    scale_of = {c: scales.get(c, scales.get("*")) for c in set(labels["criterion"])}
    criteria = _chosen(judge, labels, criteria)
    numeric, label_criteria, pairwise_criteria = _kinds(judge, labels, criteria)
    scored = judge[judge["system_1"].isna()]
    human = aggregate_humans(labels, clean=clean)
    pairs, coverage = align(scored, human, criteria)
    numeric = [c for c in numeric if (pairs["criterion"] == c).any()]
    if not numeric and not label_criteria and not pairwise_criteria:
        raise CalibrationError("no (item, system, criterion) has both a judge score and a human score: "
                               "check that the item ids and system names match between the two files")
    # Agreement among humans and the ceiling need two annotators on some unit; mean-only releases have one.
    annotators = _annotators_per_unit(labels)
    rated = [c for c in numeric if annotators.get(c, 0) >= 2]
    tables = _numeric_tables(scored, labels, pairs, criteria, numeric, rated, clean, n_resamples, seed, levels,
                             statistics, scale_of)
    abstaining = {c: scale.abstain for c, scale in scale_of.items() if scale is not None}
    results = CalibrationResults(
        criteria=list(criteria), cleaned=clean, n_resamples=n_resamples, seed=seed, pairs=pairs,
        coverage=coverage, agreement=agreement(pairs, numeric), **tables,
        labels=[label_agreement(scored, labels, c, abstaining.get(c, ()))
                for c in label_criteria],
        pairwise=[pairwise_agreement(judge, labels, c) for c in pairwise_criteria],
        single_annotator=[c for c in numeric if c not in rated],
    )
    if fit_map and numeric:
        results.maps = fit_maps(pairs, numeric)
        results.map_evaluation = cross_validate_maps(pairs, numeric)
    if other_judge is not None and numeric:
        results.comparison = compare_judges(scored, other_judge[other_judge["system_1"].isna()], human, numeric,
                                            levels, statistics, n_resamples, seed)
    return results


def _chosen(judge: pd.DataFrame, labels: pd.DataFrame, criteria) -> list[str]:
    """The criteria asked (each must have human labels), or every one the humans label and the judge scores."""
    human_criteria = sorted(labels["criterion"].unique())
    judge_criteria = set(judge["criterion"]) - {"*"}
    wildcard = "*" in set(judge["criterion"])
    if criteria is None:
        # A wide metric column ("*") stands for every numeric criterion, never for the humans' labels.
        label_only = set(labels.loc[labels["label"].notna(), "criterion"])
        criteria = [c for c in human_criteria if c in judge_criteria or (wildcard and c not in label_only)]
    else:
        criteria = chosen_criteria(criteria, human_criteria,
                                   "--criteria: no human labels for {unknown}; the human file has {available}")
    if not criteria:
        raise CalibrationError("the judge scores and the human labels have no criterion in common (judge: "
                               f"{', '.join(sorted(judge_criteria)) or '-'}; human: {', '.join(human_criteria)})")
    return criteria


def _numeric_tables(scored, labels, pairs, criteria, numeric, rated, clean, n_resamples, seed, levels, statistics,
                    scale_of) -> dict:
    """The correlations, the human ceiling, alpha and the system means of the numeric criteria (empty tables where
    none is numeric, or none has two annotators on a unit for the ceiling and alpha)."""
    if not numeric:
        return dict(correlations=pd.DataFrame(), ceiling=pd.DataFrame(), alpha=pd.DataFrame(),
                    system_means=pd.DataFrame())
    bounds = {c: (s.low, s.high) for c, s in scale_of.items() if s is not None and s.low is not None}
    table = correlations(pairs, numeric, levels, statistics, n_resamples, seed)
    out = dict(correlations=table, ceiling=pd.DataFrame(), alpha=pd.DataFrame(),
               system_means=system_means_with_ci(pairs, n_resamples, seed))
    if not rated:
        return out
    # The ceiling is read against the raw mean (see human_ceiling), whatever --clean says; alpha follows
    # --clean (DialSummEval's Table 2 is alpha after noise removal).
    raw_pairs, raw_table = pairs, table
    if clean:
        raw_pairs = align(scored, aggregate_humans(labels), criteria)[0]
        raw_table = correlations(raw_pairs, rated, levels, statistics, n_resamples, seed)
    out["ceiling"] = _with_judge_ci(human_ceiling(labels, raw_pairs, rated, levels, statistics), raw_table)
    out["alpha"] = alpha_with_judge(clean_noise(labels) if clean else labels, pairs, rated, scales=bounds)
    return out


def _with_judge_ci(ceiling: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The judge's bootstrap CI (against the same raw mean) next to each correlation in the ceiling table."""
    if ceiling.empty or table.empty:
        return ceiling.assign(judge_ci_low=np.nan, judge_ci_high=np.nan)
    ci = table[["criterion", "level", "statistic", "ci_low", "ci_high"]].rename(
        columns={"ci_low": "judge_ci_low", "ci_high": "judge_ci_high"})
    merged = ceiling.merge(ci, on=["criterion", "level", "statistic"], how="left")
    first = ["criterion", "level", "statistic", "judge", "judge_ci_low", "judge_ci_high"]
    return merged[first + [c for c in merged.columns if c not in first]]


def calibrate(judgments, human, *, score_column: str | None = None, scale: tuple[float, float] | None = None,
              criteria=None, clean: bool = False, bootstrap: int = 1000, seed: int = 0, compare=None,
              compare_score_column: str | None = None, fit_map=False, apply_map=None,
              failure_value: float | None = None) -> CalibrationResults:
    """`judge calibrate` as a function: the judge's agreement and correlation with human labels, the human
    ceiling, Krippendorff's alpha, and optionally isotonic maps. Keyword arguments are the CLI's flags.

    `judgments`: a judgments JSONL or a CSV of scores (path), a frame from `judge.score` / `judge.judgments_frame`,
    or one in the shape `calibration.io.load_judge_scores` returns. `human`: a long labels CSV (path) or a frame in
    the shape `load_human_labels` returns. `fit_map`: fit maps (`result.maps`; the CLI saves them to its path);
    `apply_map`: a saved map file applied to the judge scores first. Raises CalibrationError with the CLI's message.

    >>> import calibration
    >>> result = calibration.calibrate("examples/study/judgments.jsonl", "examples/study/labels.csv", bootstrap=0)
    >>> sorted(result.files())[:2]
    ['agreement.csv', 'ceiling.csv']
    >>> "Correlation, system level" in result.text()
    True
    """
    from pathlib import Path

    from ..alignment import check_overlap
    from ..io import judge_scales, read_human_labels
    from ..maps import apply_maps, load_maps
    from ..options import criteria_option, resamples_option, scale_option, seed_option

    bootstrap, seed = resamples_option(bootstrap, allow_zero=True), seed_option(seed)

    scale, criteria = scale_option(scale), criteria_option(criteria)
    judge, judgments_name = _judge_frame(judgments, score_column, failure_value)
    scales, notes = judge_scales(judge, scale, judgments)
    warnings = [f"note: {note}" for note in notes]
    # A frame from a script gets the scale and duplicate checks a file gets.
    labels = read_human_labels(human, scales)
    human_name = "(a DataFrame)" if isinstance(human, pd.DataFrame) else str(human)

    if unbounded := _observed_ranges(labels, scales):
        warnings.append(f"note: no scale known for {unbounded}: the scores are not range-checked "
                        "(--scale MIN,MAX checks them)")
    spelled_as_judged(labels, judge)
    check_overlap(judge, labels, judgments_name, human_name)
    other = None
    if compare is not None:
        other, compare_name = _judge_frame(compare, compare_score_column, failure_value)
        check_overlap(other, labels, compare_name, human_name)
    if apply_map is not None:
        judge = apply_maps(judge, load_maps(Path(apply_map)))
    results = analyse(judge, labels, criteria, clean, bootstrap, seed, fit_map=bool(fit_map), other_judge=other,
                      scales=scales)
    models = sorted(m for m in judge["model"].dropna().unique() if m)
    rubrics = sorted(r for r in judge["rubric"].dropna().unique() if r)
    results.sources = {"Judge model": ", ".join(models) or "(not named in the file)",
                       "Rubric": ", ".join(rubrics) or "(not named in the file)",
                       "Judgments": judgments_name + (f" (column {score_column})" if score_column else ""),
                       "Human labels": human_name}
    if compare is not None:
        results.sources["Compared with"] = compare_name
    if apply_map is not None:
        results.sources["Calibration map"] = str(apply_map)
        results.calibrated_scores = judge[["item_id", "system", "criterion", "score", "score_raw", "status"]]
    if fit_map and not results.maps:
        raise CalibrationError("--fit-map: no criterion has numeric (judge, human) pairs to fit")
    results.warnings = warnings
    return results


def _judge_frame(judgments, score_column, failure_value=None) -> tuple[pd.DataFrame, str]:
    """Judge scores in load_judge_scores's shape, and how to name them."""
    from ..io import load_judge_scores

    if not isinstance(judgments, pd.DataFrame):
        return load_judge_scores(judgments, score_column, failure_value=failure_value), str(judgments)
    return judgments, str(judgments.attrs.get("path", "(a DataFrame)"))


# -- what `judge calibrate` prints and writes -------------------------------------------------------------------
def _format(frame, columns=None) -> str:
    if frame.empty:
        return "  (none)"
    frame = frame if columns is None else frame[[c for c in columns if c in frame.columns]]
    return frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-")


def _single(results) -> str:
    return (f"\n  {', '.join(results.single_annotator)}: needs >= 2 annotators per summary (this file has one)"
            if results.single_annotator else "")


# Printed tables fit this many columns; a note longer than a line becomes a numbered footnote at the end.
WIDTH = 120
# The ceiling table's printed headers (the CSV keeps its columns): the judge's CI and its share of the ceiling.
CEILING_PRINTED = {"judge_ci_low": "ci_low", "judge_ci_high": "ci_high", "judge_matched": "matched",
                   "fraction_of_ceiling": "of_ceiling"}


class _Footnotes:
    """Numbered notes printed after the tables: a line stays within WIDTH, its detail moves here."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def mark(self, note: str) -> str:
        """The note's mark, '[n]'; a note given twice keeps its first number."""
        if note not in self.notes:
            self.notes.append(note)
        return f"[{self.notes.index(note) + 1}]"

    def text(self) -> str:
        if not self.notes:
            return ""
        import textwrap

        lines = ["", "Notes"]
        for number, note in enumerate(self.notes, start=1):
            lines += textwrap.wrap(note, WIDTH, initial_indent=f"[{number}] ", subsequent_indent="    ")
        return "\n".join(lines)


def _system_interval_lines(part: pd.DataFrame, notes: _Footnotes) -> list[str]:
    """One line per criterion whose system-level interval says nothing: none could be computed (too few systems
    to resample) or it spans the whole of [-1, 1]; with how many systems would be needed (correlation.systems_needed,
    from Fisher's z width at the observed Pearson r)."""
    from ..correlation import few_systems_note, systems_needed

    lines = []
    for criterion, rows in part.groupby("criterion", sort=False):
        n = int(rows["n_used"].min())
        whole = (rows["ci_low"] <= -1 + 1e-9) & (rows["ci_high"] >= 1 - 1e-9)
        if not (rows["ci_low"].isna().all() or whole.any()):
            continue
        pearson = rows.loc[rows["statistic"] == "pearson", "value"]
        r = float(pearson.iloc[0]) if len(pearson) else float("nan")
        needed = systems_needed(r)
        need = (f"{needed:.0f} would be needed" if needed != float("inf") else
                "no number of systems would tell it from 0")
        why = few_systems_note(n) or f"{n} systems: the 95% interval spans all of [-1, 1]"
        mark = notes.mark(f"{why}. Systems needed: the fewest J whose Fisher z interval around the observed Pearson "
                          "r, atanh(r) +- 1.96 / sqrt(J - 3), excludes 0 (J > 3 + (1.96 / atanh|r|)^2), and at "
                          "least 6, below which resampled systems make any interval [-1, 1].")
        lines.append(f"  {criterion}: too few systems to say ({n} systems, Pearson r {r:.3f}; {need}) {mark}")
    return lines


def print_results(results, out=None) -> None:
    out = sys.stdout if out is None else out  # resolved per call: stdout may be replaced (tests, pipes)
    notes = _Footnotes()
    human = "cleaned (DialSummEval noise removal) mean" if results.cleaned else "mean"
    bootstrap = notes.mark("Resamples of items, and of systems at system level, where Pearson is Fisher's z "
                           "widened for the means' noise: systems read as drawn from many.")
    print(f"Human score: {human} over annotators. Bootstrap: {results.n_resamples} resamples {bootstrap}, seed "
          f"{results.seed}.", file=out)
    for name, value in results.sources.items():
        print(f"{name}: {value}", file=out)
    print("\nCoverage", file=out)
    print(_format(results.coverage), file=out)
    for level in ("system", "summary", "item"):
        part = results.correlations[results.correlations["level"] == level] if not results.correlations.empty else \
            results.correlations
        print(f"\nCorrelation, {level} level", file=out)
        print(_format(part, ["criterion", "statistic", "value", "ci_low", "ci_high", "p_value", "n_used",
                             "n_skipped"]), file=out)
        if level == "system" and len(part):
            for line in _system_interval_lines(part, notes):
                print(line, file=out)
    print("\nAgreement (judge vs human mean; rounded to whole points for kappa / exact / within_1)", file=out)
    if not results.agreement.empty:
        print(_format(results.agreement.pivot(index="criterion", columns="statistic", values="value")
                      .reset_index()), file=out)
    ceiling = notes.mark("Human ceiling: each annotator vs the mean of the others, on the raw labels even with "
                         "--clean; judge: the judge vs the raw mean of all annotators, with its 95% CI (ci_low, "
                         "ci_high; judge_ci_low, judge_ci_high in ceiling.csv); of_ceiling (fraction_of_ceiling): "
                         "matched (judge_matched), the judge against each annotator's own reference, the mean of "
                         "the others, over the ceiling: like with like.")
    print(f"\nHuman ceiling, and the judge against the raw human mean {ceiling}", file=out)
    print(_format(results.ceiling.rename(columns=CEILING_PRINTED),
                  ["criterion", "level", "statistic", "judge", "ci_low", "ci_high", "ceiling", "ceiling_min",
                   "ceiling_max", "matched", "of_ceiling"]) + _single(results), file=out)
    after = " after noise removal (--clean)" if results.cleaned else " on the raw labels"
    print(f"\nKrippendorff's alpha{after}: humans, and humans with the judge as one more rater", file=out)
    print(_format(results.alpha) + _single(results), file=out)
    if not results.map_evaluation.empty:
        print("\nIsotonic calibration map, cross-validated by dialogue", file=out)
        print(_format(results.map_evaluation), file=out)
    for result in results.labels:
        print(f"\nLabels, {result['criterion']}: accuracy {result['accuracy']:.3f}, kappa {result['kappa']:.3f}, "
              f"n {result['n']}, judge abstentions {result['abstained']}, human abstentions "
              f"{result['human_abstained']}, no human majority {result['human_undecided']}", file=out)
        if not result["confusion"].empty:
            print(result["confusion"].to_string(), file=out)
    for result in results.pairwise:
        print(f"\nPairwise, {result['criterion']}: agreement with ties {result['agreement_with_ties']:.3f} "
              f"(n {result['n']}), without ties {result['agreement_without_ties']:.3f} "
              f"(n {result['n_without_ties']})", file=out)
    if not results.comparison.empty:
        print("\nJudge vs --compare: difference of correlations with the humans (paired bootstrap)", file=out)
        print(_format(results.comparison), file=out)
    print(notes.text(), file=out)


def table_files(results) -> dict[str, str]:
    """Every table of --output-dir as CSV (or JSON) text, keyed by file name."""
    import pandas as pd

    alpha_rows = [
        {"criterion": row.criterion, "statistic": f"alpha_{row.level}_{who}", "value": getattr(row, column),
         "n": row.n_units}
        for row in results.alpha.itertuples()
        for who, column in (("humans", "alpha_humans"), ("humans_plus_judge", "alpha_humans_plus_judge"))
    ]
    files = {
        "correlations.csv": results.correlations.to_csv(index=False),
        "agreement.csv": pd.concat([results.agreement, pd.DataFrame(alpha_rows, columns=["criterion", "statistic",
                                                                                         "value", "n"])],
                                   ignore_index=True).to_csv(index=False),
        "coverage.csv": results.coverage.to_csv(index=False),
        "ceiling.csv": results.ceiling.to_csv(index=False),
        "system_means.csv": results.system_means.to_csv(index=False),
    }
    if not results.map_evaluation.empty:
        files["calibration_map_cv.csv"] = results.map_evaluation.to_csv(index=False)
    if not results.comparison.empty:
        files["comparison.csv"] = results.comparison.to_csv(index=False)
    if results.labels:
        files["label_agreement.csv"] = pd.DataFrame(
            [{k: v for k, v in r.items() if k not in ("confusion", "classes")} for r in results.labels]
        ).to_csv(index=False)
    if results.pairwise:
        files["pairwise_agreement.csv"] = pd.DataFrame(results.pairwise).to_csv(index=False)
    summary = {"criteria": results.criteria, "human_cleaned": results.cleaned,
               "alpha_on": "cleaned labels" if results.cleaned else "raw labels", "ceiling_on": "raw labels",
               "single_annotator_criteria": results.single_annotator,
               "bootstrap_resamples": results.n_resamples, "seed": results.seed, "sources": results.sources}
    files["summary.json"] = json.dumps(summary, indent=2) + "\n"
    return files


def _observed_ranges(labels, scales: dict) -> str:
    """"coherence (1 to 99), ..." for the numeric criteria no rubric nor --scale bounds: a typo such as 99 on a
    1-5 scale shows in the range."""
    numeric = labels[labels["score"].notna() & ~labels["criterion"].isin(list(scales))]
    if "*" in scales or numeric.empty:
        return ""
    ranges = numeric.groupby("criterion")["score"].agg(["min", "max"])
    return ", ".join(f"{c} ({r['min']:g} to {r['max']:g})" for c, r in ranges.iterrows())
