"""`judge audit`: the judge's known biases, each measured against the humans' own effect and the judge's re-run noise.

The findings' estimators are in topic modules: dialogues (the bootstrap), noise, length, position, gain and
self_preference, family (Holm over an audit's findings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from ..cells import chosen_criteria, spelled_as_judged
from ..errors import CalibrationError
from ..items import read_items
from ..result import Result
from .dialogues import Dialogues
from .family import family_wise
from .human_agreement import CHANCE_NOTE, agreement_table, human_agreement
from .length import CONTROLLED_COLUMNS, LENGTH_COLUMNS, length_controlled_means, length_slopes, pairwise_length
from .noise import noise_floor
from .position import POSITION_COLUMNS, block_position, pairwise_position
from .self_preference import NO_LABELS_NOTE, SELF_COLUMNS, pairwise_self_preference, self_preference


@dataclass
class AuditResult(Result):

    verb: ClassVar[str] = "audit"
    mode: str  # "score" (pointwise or a CSV), "block" or "pairwise"
    criteria: list[str]
    noise: pd.DataFrame
    length: pd.DataFrame
    length_controlled: pd.DataFrame
    position: pd.DataFrame
    self_preference: pd.DataFrame
    sentences: list[str]
    warnings: list[str]
    n_resamples: int
    seed: int
    has_human: bool
    length_threshold: float  # pairwise: lengths differ by more than this share of the longer
    length_unit: str  # "characters" for scripts written without spaces (calibration.items.length_unit)
    flags: int  # findings tested together (Holm, 5% family-wise)
    probes: pd.DataFrame | None = None  # set by audit() when probes were judged
    agreement: pd.DataFrame | None = None  # with human scores: the judge's agreement with them (human_agreement)

    def files(self) -> dict[str, str]:
        files = {"noise.csv": self.noise, "length.csv": self.length, "length_controlled.csv": self.length_controlled,
                 "position.csv": self.position, "self_preference.csv": self.self_preference}
        if self.probes is not None:
            files["probes.csv"] = self.probes
        if self.agreement is not None:
            files["agreement.csv"] = self.agreement
        return {name: frame.to_csv(index=False) for name, frame in files.items()}

    def report_html(self) -> str:
        from .report import audit_section  # matplotlib: only when a report is asked for

        return audit_section(self)

    def text(self) -> str:
        return "\n".join(self.sentences) + "\n"


# -- reading --------------------------------------------------------------------------------------------------------


def read_judgments(judgments, score_column: str | None = None, failure_value: float | None = None) -> pd.DataFrame:
    """The judgments table (judge/table.py: samples, positions and orders beside the verdicts), from a path or as
    given; a CSV of scores has the verdicts only."""
    from ..io import read_judge_scores

    frame, where = read_judge_scores(judgments, score_column, failure_value)
    frame.attrs["path"] = str(where)
    for name in ("samples", "position", "forward", "swapped", "fingerprint"):  # what read_judge_scores may lack
        if name not in frame.columns:
            frame[name] = None
    frame["item_id"] = frame["item_id"].astype(str)
    frame["system"] = frame["system"].astype(str)
    return frame


def read_human(human, scales=None, judge=None) -> pd.DataFrame:
    """The human mean per (item, system, criterion); labels checked against `scales` (calibration.io) and spelled
    as the judgments `judge` spell their criteria and items (calibration.cells)."""
    from ..humans import aggregate_humans
    from ..io import read_human_labels

    if isinstance(human, pd.DataFrame) and "human" in human.columns and "annotator" not in human.columns:
        out = human[["item_id", "system", "criterion", "human"]].astype({"item_id": str, "system": str})
        return out.assign(human_a=np.nan, human_b=np.nan)  # already aggregated by a script: one reading
    labels = read_human_labels(human, scales)  # per annotator (its columns: calibration.io.HUMAN_COLUMNS)
    spelled_as_judged(labels, judge)
    aggregated = aggregate_humans(labels)[["item_id", "system", "criterion", "human"]]
    # Two independent readings of each summary where it has two annotators or more: the first annotator (by name)
    # and the mean of the others (NaN with one annotator). Their errors are independent, which identifies the
    # judge's gain (Gain).
    numeric = labels[labels["score"].notna()].sort_values("annotator")
    grouped = numeric.groupby(["item_id", "system", "criterion"], sort=False)["score"]
    halves = pd.DataFrame({"human_a": grouped.first(), "human_b": grouped.apply(lambda s: s.iloc[1:].mean())})
    out = aggregated.merge(halves.reset_index(), on=["item_id", "system", "criterion"], how="left")
    return out.astype({"item_id": str, "system": str})


# -- the verb -------------------------------------------------------------------------------------------------------


def _check(judge: pd.DataFrame, words: pd.DataFrame, self_systems, where: str) -> str:
    """The audit's input checks; returns the mode (score, block or pairwise)."""
    rubrics = sorted({r for r in judge["rubric"].dropna().astype(str) if r})
    if len(rubrics) > 1:
        raise CalibrationError(f"{where}: judgments of several rubrics ({', '.join(rubrics)}): audit one rubric's "
                               "judgments at a time")
    pairwise = judge["system_1"].notna()
    if pairwise.any() and not pairwise.all():
        raise CalibrationError(f"{where}: pairwise and single-candidate judgments mixed: audit one mode at a time")
    keys = words.attrs.get("judged_keys") or set(zip(words["item_id"], words["item_system"]))
    missing = [(i, s, line) for i, s, line in zip(judge["item_id"], judge["system"], judge["line"])
               if (i, s) not in keys]
    if missing:
        item, system, line = missing[0]
        more = f" (and {len(missing) - 1} more judgments)" if len(missing) > 1 else ""
        raise CalibrationError(f"{where}:{line}: no item with id {item!r} and system {system!r} in --items{more}: "
                               "the items file must be the one that was judged")
    if self_systems:
        systems = set(judge["system"]) if not pairwise.any() else set(judge["system_1"]) | set(judge["system_2"])
        unknown = [s for s in self_systems if s not in systems]
        if unknown:
            raise CalibrationError(f"--self: no system {unknown[0]!r} in {where} (its systems: "
                                   f"{', '.join(sorted(systems)[:12])})")
    if pairwise.any():
        return "pairwise"
    return "block" if judge["position"].notna().any() else "score"


def _parse_self(value) -> list[str]:
    if value is None:
        return []
    names = [s.strip() for s in (value.split(",") if isinstance(value, str) else value)]
    if not names or not all(names):
        raise CalibrationError("--self must name one or more systems, comma-separated")
    return names


def _check_threshold(length_threshold) -> None:
    if not 0.0 <= float(length_threshold) < 1.0:
        raise CalibrationError("--length-threshold must be a share between 0 and 1, e.g. 0.1")


def _read_rerun(rerun, judge: pd.DataFrame, where: str, failure_value, allow_different_judge: bool,
                warnings: list[str]) -> pd.DataFrame:
    """The re-run's judgments, refused unless the same judge (or `allow_different_judge`, then warned)."""
    from ..io import judge_differences

    second = read_judgments(rerun, failure_value=failure_value)
    common = judge.merge(second, on=["item_id", "system", "criterion"], suffixes=("", "_rerun"))
    if common.empty:
        raise CalibrationError(f"--rerun: {second.attrs.get('path', 'rerun')} has no judgment in common with "
                               f"{where} (same item, system and criterion)")
    rerun_models = {m for m in second.get("model", pd.Series(dtype=str)).dropna() if m}
    models = {m for m in judge.get("model", pd.Series(dtype=str)).dropna() if m}
    differences = judge_differences(common["fingerprint"], common["fingerprint_rerun"])
    if not differences and models and rerun_models and models != rerun_models:
        differences = [f"model {', '.join(sorted(models))} -> {', '.join(sorted(rerun_models))}"]
    if differences and not allow_different_judge:
        raise CalibrationError(
            f"--rerun: {second.attrs.get('path', 'rerun')} is not a re-run of the judge of {where}: "
            f"{'; '.join(differences)}; re-run noise must be the same judge's: re-judge with the same settings, "
            "or pass --allow-different-judge")
    if differences:
        warnings.append("--rerun is another judge, used as the noise floor on purpose "
                        f"(--allow-different-judge): {'; '.join(differences)}")
    return second


def _read_people(human, judge: pd.DataFrame, judgments, scale, warnings: list[str]) -> pd.DataFrame:
    """The human means, their labels checked against the judgments' scales (the unchecked ones noted)."""
    from ..io import judge_scales
    from ..options import scale_option

    scales, unchecked = judge_scales(judge, scale_option(scale), judgments)
    warnings += [f"note: {note}" for note in unchecked]
    return read_human(human, scales, judge)


def _check_human_criteria(judge: pd.DataFrame, people: pd.DataFrame, present: list[str], where: str,
                          warnings: list[str]) -> None:
    """The criteria judged and labelled: at least one, the others warned of, and each one's two scales compared."""
    shared = [c for c in present if c in set(people["criterion"])]
    if not shared:
        raise CalibrationError(f"--human: no criterion in common with {where} ({', '.join(present)})")
    if len(shared) < len(present):
        warnings.append("no human labels for criteria " + ", ".join(c for c in present if c not in shared)
                        + ": their effects are the judge's alone")
    for criterion in shared:
        spread = judge.loc[judge["criterion"] == criterion, "score"].std()
        human_spread = people.loc[people["criterion"] == criterion, "human"].std()
        if spread > 0 and human_spread > 0 and not 1 / 3 <= spread / human_spread <= 3:
            warnings.append(f"{criterion}: the judge's scores (SD {spread:.3g}) and the humans' (SD "
                            f"{human_spread:.3g}) are on different scales: the excess slope and self-preference "
                            "subtract points of one from points of the other; map the judge onto the human "
                            "scale first (judge calibrate --fit-map)")


@dataclass
class _Tables:
    """The per-criterion findings' rows, as the audit gathers them."""

    length: list = field(default_factory=list)
    controlled: list = field(default_factory=list)
    position: list = field(default_factory=list)
    self_preference: list = field(default_factory=list)
    agreement: list = field(default_factory=list)


def _criterion_findings(tables: _Tables, mode: str, judge: pd.DataFrame, words: pd.DataFrame, labelled,
                        boot: Dialogues, criterion: str, length_threshold: float, self_list: list[str],
                        seed: int) -> None:
    """One criterion's rows of each finding, added to `tables`."""
    if mode == "pairwise":
        tables.length.append(pairwise_length(judge, words, labelled, boot, criterion, length_threshold))
        tables.position += pairwise_position(judge, labelled, boot, criterion)
        if self_list:
            tables.self_preference.append(pairwise_self_preference(judge, labelled, boot, criterion, self_list))
        return
    tables.length.append({"mode": mode, **length_slopes(judge, words, labelled, boot, criterion)})
    tables.controlled.append(length_controlled_means(judge, words, labelled, boot, criterion))
    if mode == "block" and (row := block_position(judge, boot, criterion)):
        tables.position.append(row)
    if self_list:
        tables.self_preference.append(self_preference(judge, labelled, boot, criterion, self_list))
    if labelled is not None:
        tables.agreement.append(human_agreement(judge, labelled, boot, criterion, seed))


def _findings(mode: str, judge: pd.DataFrame, words: pd.DataFrame, people, boot: Dialogues, present: list[str],
              length_threshold: float, self_list: list[str], seed: int) -> tuple:
    """The findings' tables (length, length-controlled, position, self-preference, agreement or None) and the
    number of findings tested together (their flags set family-wise)."""
    tables = _Tables()
    for criterion in present:
        labelled = people if people is not None and criterion in set(people["criterion"]) else None
        _criterion_findings(tables, mode, judge, words, labelled, boot, criterion, length_threshold, self_list, seed)
    length = pd.DataFrame(tables.length).reindex(columns=LENGTH_COLUMNS)
    controlled_frame = (pd.concat(tables.controlled, ignore_index=True) if tables.controlled
                        else pd.DataFrame(columns=CONTROLLED_COLUMNS))
    position = pd.DataFrame(tables.position).reindex(columns=POSITION_COLUMNS)
    self_frame = pd.DataFrame(tables.self_preference).reindex(columns=SELF_COLUMNS)
    agreement = agreement_table(tables.agreement) if tables.agreement else None
    flags = family_wise(length, position, self_frame, len(boot.ids), agreement=agreement)
    if not controlled_frame.empty:  # "at equal length the ranking changes" only where length is a finding
        shown = set(length.loc[length["effect"].astype(bool), "criterion"])  # family_wise sets every row's flag
        controlled_frame["rank_changed"] = controlled_frame["rank_changed"] & controlled_frame["criterion"].isin(shown)
    return length, controlled_frame, position, self_frame, agreement, flags


def audit(judgments, items, human=None, *, self_systems=None, rerun=None, criteria=None, bootstrap: int = 1000,
          seed: int = 0, length_threshold: float = 0.1, score_column: str | None = None,
          probes: dict | None = None, scale=None, allow_different_judge: bool = False,
          failure_value: float | None = None) -> AuditResult:
    """Audit a judge's scores or verdicts: noise floor, length, position and self-preference, per criterion.

    `probes`: {probe name: (its judgments, the (item_id, system) keys it perturbed)}, as
    calibration.trust.probes makes and the CLI judges them (`--probe`). `scale`: (MIN, MAX) for the human labels
    when the judgments name no rubric. `rerun` must be the same judge (model, rubric version, template, decoding, as
    the fingerprints record), or its differences are refused unless `allow_different_judge` (said in the output).

    >>> import calibration
    >>> result = calibration.audit("examples/study/judgments.jsonl", "examples/study/items.jsonl",
    ...                            "examples/study/labels.csv", bootstrap=200)
    >>> sorted(result.files())
    ['agreement.csv', 'length.csv', 'length_controlled.csv', 'noise.csv', 'position.csv', 'self_preference.csv']
    >>> result.text().startswith("Findings flagged: 0 of 2")  # the judge's agreement with the humans, per criterion
    True
    """
    from ..options import resamples_option, seed_option

    bootstrap, seed = resamples_option(bootstrap), seed_option(seed, "--bootstrap-seed")
    _check_threshold(length_threshold)
    from ..options import criteria_option

    criteria = criteria_option(criteria)
    self_list = _parse_self(self_systems)
    judge = read_judgments(judgments, score_column, failure_value)
    where = judge.attrs.get("path", "judgments")
    words = read_items(items)
    mode = _check(judge, words, self_list, where)
    warnings: list[str] = []
    if words.attrs.get("empty"):
        warnings.append(f"{words.attrs['empty']} empty candidate(s) in --items: length 0")
    second = None
    if rerun is not None:
        second = _read_rerun(rerun, judge, where, failure_value, allow_different_judge, warnings)
    people = None
    if human is not None:
        people = _read_people(human, judge, judgments, scale, warnings)
    if people is not None and (judge["criterion"] == "*").any():
        from ..alignment import expand_all_criteria  # one metric column stands for every labelled criterion

        judge = expand_all_criteria(judge, sorted(set(people["criterion"])))
        judge.attrs["path"] = where
    present = list(dict.fromkeys(judge["criterion"]))
    present = chosen_criteria(criteria, present, "--criteria: no judgments for criterion {first!r} in {where}",
                              where=where)
    if people is not None:
        _check_human_criteria(judge, people, present, where, warnings)
    boot = Dialogues(judge["item_id"], bootstrap, seed)
    if len(boot.ids) < 2:
        warnings.append("one dialogue: no interval and no flag (every interval resamples dialogues)")
    noise = noise_floor(judge, second, boot, present)
    length, controlled_frame, position, self_frame, agreement, flags = _findings(
        mode, judge, words, people, boot, present, length_threshold, self_list, seed)
    result = AuditResult(
        mode=mode, criteria=present, noise=noise, length=length, length_controlled=controlled_frame,
        position=position, self_preference=self_frame, sentences=[], warnings=warnings, flags=flags,
        n_resamples=bootstrap, seed=seed, has_human=people is not None, length_threshold=float(length_threshold),
        length_unit=words.attrs.get("length_unit", "words"), agreement=agreement)
    if probes:
        from .probes import probe_table

        runs = {name: (read_judgments(probed), keys) for name, (probed, keys) in probes.items()}
        result.probes = probe_table(judge, runs, noise, boot, present)
    result.sentences = sentences(result)
    return result


# -- sentences ------------------------------------------------------------------------------------------------------


def _ci(low, high, fmt="{:+.2f}") -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "[no interval]"
    return f"[{fmt.format(low)}, {fmt.format(high)}]"


def _noise_clause(noise: pd.DataFrame, criterion: str) -> str:
    row = noise[noise["criterion"] == criterion]
    if row.empty or row.iloc[0]["source"] == "none":
        return "re-run noise unknown (judge with --samples 2 or more, or give --rerun)"
    row = row.iloc[0]
    how = "a second run" if row["source"] == "rerun" else "re-asked samples"
    return f"re-run noise changes {row['changed_share']:.0%} of verdicts ({how})"


def agreement_sentences(agreement: pd.DataFrame | None) -> list[str]:
    """Per labelled criterion: the judge's agreement with the humans against their ceiling, flagged when not
    distinguishable from chance."""
    out = []
    for row in (agreement.itertuples() if agreement is not None else ()):
        if not np.isfinite(row.judge_r):
            out.append(f"{row.criterion}: FLAGGED: {row.note}.")
            continue
        ceiling = (f"the humans' own ceiling (one annotator against the others' mean) r {row.ceiling_r:.2f} "
                   f"{_ci(row.ceiling_ci_low, row.ceiling_ci_high, '{:.2f}')}" if np.isfinite(row.ceiling_r)
                   else "the humans' own ceiling unknown (no summary read by two annotators)")
        verdict = f"FLAGGED: {CHANCE_NOTE}" if row.effect else "agreement beyond chance"
        out.append(f"{row.criterion}: the judge's item-level agreement with the human mean is r {row.judge_r:.2f} "
                   f"{_ci(row.ci_low, row.ci_high, '{:.2f}')} over {row.n_summaries} summaries, against {ceiling}; "
                   f"{verdict}.")
    return out


def sentences(result: AuditResult) -> list[str]:
    """One sentence per finding, ready to paste into a paper."""
    out = []
    if result.flags:
        tables = [result.length, result.position, result.self_preference]
        tables += [result.agreement] if result.agreement is not None else []
        flagged = int(sum(t["effect"].astype(bool).sum() for t in tables))  # family_wise sets every row's flag
        out.append(f"Findings flagged: {flagged} of {result.flags} tested together (Holm, 5% family-wise: with "
                   "nothing there, any flag in at most 5% of audits); intervals are 95% expanded percentile "
                   f"bootstrap intervals over {result.length['n_dialogues'].max() if len(result.length) else 0:.0f} "
                   "dialogues.")
    for row in result.length.itertuples():
        noise = _noise_clause(result.noise, row.criterion)
        if row.mode == "pairwise":
            if row.n_pairs == 0 or not np.isfinite(row.prefers_longer):
                out.append(f"{row.criterion}: no decided pair whose lengths differ enough to measure a length "
                           f"preference; {noise}")
                continue
            humans = "" if not np.isfinite(row.human_prefers_longer) else (
                f" (humans {row.human_prefers_longer:.0%} "
                f"{_ci(row.human_prefers_longer_ci_low, row.human_prefers_longer_ci_high, '{:.0%}')})")
            out.append(f"{row.criterion}: the judge prefers the longer candidate in {row.prefers_longer:.0%} "
                       f"{_ci(row.prefers_longer_ci_low, row.prefers_longer_ci_high, '{:.0%}')} of {row.n_pairs} "
                       f"decided pairs whose lengths differ by more than {result.length_threshold:.0%} of the longer"
                       f"{humans}; {noise}")
            continue
        if not np.isfinite(row.judge_slope):
            out.append(f"{row.criterion}: length slope not measurable (no dialogue with candidates of different "
                       f"lengths); {noise}")
            continue
        unit = f"per SD of length within a dialogue ({row.length_sd_words:.0f} {result.length_unit})"
        if row.judge_slope == row.judge_slope_ci_low == row.judge_slope_ci_high == 0:
            # every resample gives exactly 0: the judge scores the summaries of each dialogue alike
            out.append(f"{row.criterion}: the judge gives every summary of a dialogue the same score, so no length "
                       "effect can show (slope 0 in every resample); a judge that does not tell summaries apart "
                       f"needs `judge qualify` before any audit; {noise}")
        elif np.isfinite(row.excess_slope):
            out.append(f"{row.criterion}: beyond what quality explains, the judge adds {row.excess_slope:+.2f} of its "
                       f"points {unit} {_ci(row.excess_ci_low, row.excess_ci_high)} (quality as two annotators' "
                       f"readings show it, whatever the judge's scale; judge {row.judge_slope:+.2f}, humans "
                       f"{row.human_slope:+.2f} on the same {row.n_summaries} summaries); {noise}")
        elif np.isfinite(row.human_slope):
            out.append(f"{row.criterion}: the judge's score moves {row.judge_slope:+.2f} points {unit}, the humans' "
                       f"{row.human_slope:+.2f}; {row.note}; {noise}")
        else:
            out.append(f"{row.criterion}: the judge's score moves {row.judge_slope:+.2f} points {unit} "
                       f"{_ci(row.judge_slope_ci_low, row.judge_slope_ci_high)}; without human labels this cannot "
                       f"separate a taste for length from longer summaries being better; {noise}")
    for criterion, part in result.length_controlled.groupby("criterion", sort=False):
        moved = part[part["rank_changed"]]
        if moved.empty:
            out.append(f"{criterion}: the ranking of the {len(part)} systems is the same at equal length "
                       "(length-controlled means).")
        else:
            out.append(f"{criterion}: at equal length the ranking changes: " + "; ".join(
                f"{r.system} from {r.raw_rank} to {r.lc_rank}" for r in moved.itertuples()) + ".")
    for row in result.position.itertuples():
        noise = _noise_clause(result.noise, row.criterion)
        if row.mode == "block":
            out.append(f"{row.criterion}: each later letter in the block moves the score by {row.position_slope:+.3f} "
                       f"points {_ci(row.position_slope_ci_low, row.position_slope_ci_high, '{:+.3f}')}; {noise}")
        elif row.stratum == "all":
            out.append(f"{row.criterion}: the two orders disagree in {row.flip_rate:.0%} "
                       f"{_ci(row.ci_low, row.ci_high, '{:.0%}')} of {row.n} pairs and decided verdicts choose the "
                       f"first-shown candidate {row.first_shown_wins:.0%} "
                       f"{_ci(row.first_shown_ci_low, row.first_shown_ci_high, '{:.0%}')} of the time (50% is "
                       f"unbiased); {noise}")
    unit = "of win share" if result.mode == "pairwise" else "points"
    for row in result.self_preference.itertuples():
        if not np.isfinite(row.judge_gap):
            out.append(f"{row.criterion}: self-preference for {row.self_systems} not measurable: {row.note}")
        elif np.isfinite(row.self_preference):
            scale = "of its points" if result.mode != "pairwise" else unit
            beyond = ("beyond what their quality explains (as two annotators read it)" if result.mode != "pairwise"
                      else "relative to the other systems, than humans do")
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.self_preference:+.2f} {scale} more, "
                       f"{beyond} {_ci(row.ci_low, row.ci_high)} (judge gap {row.judge_gap:+.2f}, human gap "
                       f"{row.human_gap:+.2f}, {row.n_dialogues} dialogues); "
                       f"{_noise_clause(result.noise, row.criterion)}")
        elif np.isfinite(row.human_gap):
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.judge_gap:+.2f} {unit} above the "
                       f"other systems, humans {row.human_gap:+.2f}; {row.note}")
        else:
            out.append(f"{row.criterion}: the judge rates {row.self_systems} {row.judge_gap:+.2f} {unit} above the "
                       f"other systems {_ci(row.judge_gap_ci_low, row.judge_gap_ci_high)}; {NO_LABELS_NOTE}; "
                       f"{_noise_clause(result.noise, row.criterion)}")
    out += agreement_sentences(result.agreement)
    if result.probes is not None:
        from .probes import probe_sentences

        out += probe_sentences(result.probes)
    return out
