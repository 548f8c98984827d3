"""What the judge already says before a human study, and what the study needs: `judge screen`.

Systems: each system's mean judge score per criterion with an expanded percentile bootstrap CI (see
`calibration.stats.expanded_tail`) that resamples dialogues,
the same resampled dialogues for every system and criterion (paired), so differences between systems keep the
correlation of summaries of one dialogue. Every difference between two systems on one criterion gets a lower bound
that holds simultaneously with all the others (calibration.stats.simultaneous_differences: Bonferroni-t over every
pair of systems of every criterion). A system is "tied with the best" unless some other system is shown better than
it; a system is dominated when another one is shown better on every criterion; it is listed, never dropped. One
family for the whole table: with nothing to separate, any system is left out of "tied with the best" or called
dominated in at most 5% of screens, however many systems and criteria (Holm against the observed best left one of
14 equal systems out in 18-27% of runs per criterion, and "dominated" was uncorrected over pairs: 78%).

Items: every judgment's uncertainty, from what the run recorded (spread of --samples, entropy of --logprobs
probabilities, pairwise order disagreement, failures, abstentions and N/A) and, with --judge, where the judges
disagree, and each dialogue's power to discriminate the systems still in contention (how far apart the judge puts
them on it).

Plan: under a budget (dialogues, or judgments a human must give), a uniformly random sample of dialogues (what
keeps `judge estimate` unbiased) and, for the rest, the dialogues with the highest priority (uncertainty plus
discrimination); `--design active` draws the random part with known probabilities rising with the uncertainty,
checked on a --human pilot, which also weighs each judgment's doubt by the judge's error in its system and criterion
(stratified allocation with the dialogue as the unit). A plan is a contract: plan.json records the digest of
plan.csv (and of the judgments), `judge export --plan` copies it into the key, `judge estimate --plan` refuses a
plan that does not match, and an --output-dir that holds a plan is refused rather than rewritten. A plan whose
random part is empty is refused (the budget rounded it away) or warned about (--random-share 0): `judge estimate`
could estimate nothing from it.
Power: dialogues humans must label to separate the top two systems (calibration.study.power).

`screen()` is the verb as a function (paths or DataFrames in, a ScreenResult out); the CLI only wraps it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from judge.annotation.plan import PLAN_FILES, PLAN_VERSION, plan_files, plan_sha256
from judge.resources import file_sha256

from ..alignment import expand_all_criteria
from ..cells import chosen_criteria
from ..errors import CalibrationError
from ..humans import aggregate_humans
from ..options import criteria_option, scale_option
from ..result import Result
from .designs import (
    bunched_rows,
    first_stage,
    make_plan,
    pilot_errors,
    plan_warnings,
    relative_probabilities,
    second_stage_plan,
    signal_check,
    strata_clause,
    stratified_uncertainty,
    stratum_weights,
)
from .power_table import power_sentence, power_table, second_stage_count
from .printing import format_table, say
from .systems import systems_table, win_shares
from .uncertainty import items_table, judgment_uncertainty, jury_disagreement


@dataclass
class ScreenResult(Result):
    """What `judge screen` found: the tables, the plan (with --budget), warnings, and where it all came from."""

    verb: ClassVar[str] = "screen"

    criteria: list[str]
    systems: pd.DataFrame
    dominated: dict[str, str]
    items: pd.DataFrame
    power: pd.DataFrame
    sentence: str
    plan: pd.DataFrame | None = None
    plan_info: dict = field(default_factory=dict)
    n_resamples: int = 1000
    seed: int = 0
    warnings: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        """The exact --output-dir files."""
        files = {"systems.csv": self.systems.to_csv(index=False), "items.csv": self.items.to_csv(index=False),
                 "power.csv": self.power.to_csv(index=False)}
        if self.plan is not None:
            files.update(plan_files(self.plan, self.plan_info))
        return files

    def check_output_dir(self, output_dir, inputs=()) -> None:
        """A folder that holds a plan keeps it: a plan is a contract with the labels drawn from it."""
        from judge.outputs import check_writable

        folder = Path(output_dir)
        for name in PLAN_FILES:
            if (folder / name).exists():
                raise CalibrationError(
                    f"{folder / name}: --output-dir holds a plan already; a plan is never replaced (labels may "
                    "have been drawn from it): write into a new folder, or move the old plan away first")
        for name in self.files():
            check_writable(folder / name, inputs=inputs, what="--output-dir file")

    def report_html(self) -> str:
        from .report import screen_section  # matplotlib: only when a report is asked for

        return screen_section(self)

    def text(self) -> str:
        from io import StringIO


        out = StringIO()
        print_screen(self, out)
        return out.getvalue()


def screen(judgments, human=None, *, criteria=None, score_column: str | None = None, clean: bool = False,
           scale: tuple[float, float] | None = None, budget: int | None = None, budget_unit: str = "dialogues",
           random_share: float = 0.5, power: float = 0.8, bootstrap: int = 1000, seed: int = 0,
           failure_value: float | None = None, design: str = "uniform", judges=None,
           pilot_plan=None) -> ScreenResult:
    """`judge screen` as a function: `judgments` and `human` (a pilot's labels) are paths or DataFrames (as
    calibration.io loads them); the keywords are the CLI's flags. Every option and every label is checked here
    (CalibrationError with the CLI's message); warnings go into `result.warnings`. `pilot_plan`: the folder of
    the uniform plan whose random part `human` labels; the new plan is its second stage (second_stage_plan).

    >>> import calibration
    >>> result = calibration.screen("examples/study/judgments.jsonl", budget=8, bootstrap=200)
    >>> sorted(result.files())
    ['items.csv', 'plan.csv', 'plan.json', 'power.csv', 'systems.csv']
    >>> list(result.systems.columns[:4])
    ['criterion', 'system', 'mean', 'ci_low']
    """
    from ..io import check_labels, judge_scales, read_human_labels, read_judge_scores, scale_bounds

    _check_options(budget, budget_unit, random_share, power, bootstrap, seed)
    if design not in ("uniform", "active"):
        raise CalibrationError(f"--design must be uniform or active, got {design!r}")
    if pilot_plan is not None:
        missing = [flag for flag, given in (("--design active", design == "active"), ("--human", human is not None),
                                            ("--budget", budget is not None),
                                            ("--budget-unit dialogues", budget_unit == "dialogues")) if not given]
        if missing:
            raise CalibrationError(f"--pilot-plan plans an active second stage after the pilot's uniform first: "
                                   f"give {', '.join(missing)}")
    scale, criteria = scale_option(scale), criteria_option(criteria)
    judge, path = read_judge_scores(judgments, score_column, failure_value)
    warnings_: list[str] = []
    pilot_labels, bounds = None, {}
    if human is not None:
        scales, notes = judge_scales(judge, scale, judgments, required=True)
        bounds = scale_bounds(scales)
        warnings_ += notes
        pilot_labels = read_human_labels(human, scales)
        judge, imputed = check_labels(pilot_labels, judge, criteria=criteria)
        if imputed:
            warnings_.append(f"{imputed} labelled cell(s) have no judgment line: counted as failed judgments")
    others: dict[str, pd.DataFrame] = {}
    if judges:  # their disagreement is a sign of doubt; with a pilot they are also one predictor
        from .predictor import other_judges

        others, notes = other_judges(judges, human, scale, failure_value, judge)
        warnings_ += notes
    result = screen_tables(path, judge, criteria, pilot_labels, clean, budget, budget_unit, random_share, power,
                           seed, bootstrap, score_column, design, others, bounds,
                           None if pilot_plan is None else Path(pilot_plan))
    result.warnings = warnings_ + result.warnings
    result.provenance = provenance(judgments, judge, human, seed)
    return result


def provenance(judgments, judge: pd.DataFrame, human, seed: int | None) -> dict:
    """Where the numbers come from, for the reports: files (with digests), model, rubric, date, seed."""
    from datetime import datetime

    def named(source):
        if isinstance(source, (list, tuple)):  # several label files: each named, one alone as before
            return [named(one) for one in source] if len(source) > 1 else named(source[0])
        if isinstance(source, (str, Path)):
            return {"path": str(source), "sha256": file_sha256(Path(source))}
        return {"path": source.attrs.get("path", "(a DataFrame)") if source is not None else None, "sha256": None}

    values = lambda column: sorted({str(v) for v in judge[column].dropna() if str(v)})  # noqa: E731
    return {"judgments": named(judgments), "human": named(human) if human is not None else None,
            "model": ", ".join(values("model")) or None, "rubric": ", ".join(values("rubric")) or None,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "seed": seed}


def _check_options(budget, unit, random_share, power, bootstrap, seed) -> None:
    whole = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool)  # noqa: E731
    if budget is not None and (not whole(budget) or budget < 1):
        raise CalibrationError(f"--budget must be a positive whole number, got {budget!r}")
    if unit not in ("dialogues", "judgments"):
        raise CalibrationError(f"--budget-unit must be dialogues or judgments, got {unit!r}")
    if not (isinstance(random_share, (int, float)) and 0.0 <= random_share <= 1.0):
        raise CalibrationError(f"--random-share must be between 0 and 1, got {random_share!r}")
    if not (isinstance(power, (int, float)) and 0.0 < power < 1.0):
        raise CalibrationError(f"--power must be between 0 and 1, got {power!r}")
    from ..options import resamples_option, seed_option

    resamples_option(bootstrap)
    seed_option(seed)


def screen_tables(path: Path | str, judge: pd.DataFrame, criteria=None, pilot_labels: pd.DataFrame | None = None,
                  clean: bool = False, budget: int | None = None, unit: str = "dialogues", random_share: float = 0.5,
                  power: float = 0.8, seed: int = 0, n_resamples: int = 1000,
                  score_column: str | None = None, design: str = "uniform",
                  judges: dict | None = None, bounds: dict | None = None,
                  pilot_plan: Path | None = None) -> ScreenResult:
    """The computation on loaded, checked frames. `bounds`: each criterion's scale (low, high) from the rubric or
    --scale (key "*" for every criterion), for the pilot's bunching check (bunched_rows). `pilot_plan`: the first
    stage's plan folder (second_stage_plan)."""
    pilot = _pilot(pilot_labels, clean, judge)
    # A second stage's first: checked before any resampling, so bad input fails at once.
    first = None if pilot_plan is None else first_stage(pilot_plan, path, judge["item_id"], pilot)
    judge, scored, criteria = _screened(path, judge, criteria, pilot, score_column)
    systems, dominated, _, _ = systems_table(scored, criteria, n_resamples, seed)
    if judges:  # more judges: where they disagree is one more sign of doubt
        judges = {name: expand_all_criteria(frame, criteria) for name, frame in judges.items()}
        judge = judge.assign(jury_disagreement=jury_disagreement(judge, judges))
    per_judgment = judgment_uncertainty(judge)
    items = items_table(judge, systems, criteria, scored[scored["criterion"].isin(criteria)], per_judgment)
    alpha = 0.05
    strata, drawn_on, share, why = _active_draw(design, judge, pilot, items, per_judgment, criteria, bounds,
                                                pilot_plan)
    relative = relative_probabilities(drawn_on, share) if design == "active" else None
    table = power_table(scored, systems, criteria, power, alpha, pilot, judges, relative)
    sentence = _with_second_stage(table, first, power_sentence(table, power, alpha))
    result = ScreenResult(list(criteria), systems, dominated, items, table, sentence,
                          n_resamples=n_resamples, seed=seed)
    if design == "active":
        result.warnings.append(f"--design active: {why}" + (strata_clause(strata) if share else ""))
        if pilot is not None and first is None and budget is not None:
            result.warnings.append(
                f"--human: the pilot's {pilot['item_id'].nunique()} dialogues check the draw but are not in this "
                "plan, so `judge estimate --plan` will not count their labels (a pilot thrown away costs more labels "
                "than an active draw saves: benchmarks/active_design.py --two-stage); if they are the random part of "
                "an earlier uniform plan, give its folder as --pilot-plan and they count")
    if first is not None:
        result.warnings += first.warnings
    if budget is not None:
        plan = (make_plan(items, budget, unit, random_share, seed, design, share, drawn_on["uncertainty"])
                if first is None else
                second_stage_plan(items, first, budget, random_share, seed, share, drawn_on["uncertainty"]))
        result.warnings += plan_warnings(plan, budget, unit, random_share)
        result.plan = plan
        items["part"] = items["item_id"].map(dict(zip(plan["item_id"], plan["part"]))).fillna("")
        result.plan_info = _plan_info(plan, path, table, unit, budget, random_share, seed, design, share, why,
                                      strata, first, pilot_plan, len(items))
    return result


def _pilot(pilot_labels: pd.DataFrame | None, clean: bool, judge: pd.DataFrame) -> pd.DataFrame | None:
    """The --human pilot's labels, one value per cell, every dialogue among the judged ones."""
    if pilot_labels is None:
        return None
    pilot = aggregate_humans(pilot_labels, clean=clean)
    unknown = pilot[~pilot["item_id"].isin(set(judge["item_id"]))]
    if len(unknown):
        raise CalibrationError(f"--human: {unknown['item_id'].nunique()} labelled dialogue(s) are not in the "
                               f"judgments, e.g. {unknown['item_id'].iloc[0]!r}")
    return pilot


def _screened(path: Path | str, judge: pd.DataFrame, criteria, pilot: pd.DataFrame | None, score_column: str | None
              ) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """(the judgments on the criteria screened, the scores (pairwise verdicts as win shares), those criteria)."""
    if "*" in set(judge["criterion"]):
        # One metric column for every criterion: the pilot's criteria, or else the column's own name.
        names = sorted(pilot["criterion"].unique()) if pilot is not None else [score_column or "score"]
        judge = expand_all_criteria(judge, names)
    pairwise = judge["system_1"].notna()
    scored = judge[~pairwise]
    pointwise = set(scored.loc[scored["status"] == "ok", "criterion"])
    wins = win_shares(judge[pairwise & ~judge["criterion"].isin(pointwise)])
    scored = pd.concat([scored, wins], ignore_index=True) if len(wins) else scored
    available = sorted(set(scored.loc[scored["status"] == "ok", "criterion"]))
    criteria = chosen_criteria(criteria, available, "--criteria: no judge scores for {unknown}; the judgments have "
                               "{available}")
    if not criteria:
        raise CalibrationError(f"{path}: no numeric judge score to screen")
    return judge[judge["criterion"].isin(criteria)], scored, criteria


def _active_draw(design: str, judge: pd.DataFrame, pilot: pd.DataFrame | None, items: pd.DataFrame,
                 per_judgment: pd.DataFrame, criteria, bounds: dict | None, pilot_plan: Path | None):
    """(strata weights, what the draw follows, the share of the draw following the doubt, why). An active draw
    follows the judge's doubt, weighted by its error per system and criterion on a pilot, which also checks that
    the weighted doubt marks where the judge errs."""
    errors = pilot_errors(judge, pilot) if design == "active" and pilot is not None else None
    strata = stratum_weights(errors) if errors is not None else pd.Series(dtype=float)
    drawn_on = stratified_uncertainty(items, per_judgment, strata)
    share, why = signal_check(drawn_on, errors) if design == "active" else (None, "")
    # A two-stage plan's bunched rows take the first stage's own interval whichever way the second is drawn.
    bunched = bunched_rows(pilot, criteria, bounds or {}) if share and pilot_plan is None else []
    if bunched:
        share, why = 0.0, (f"the pilot's labels bunch at one end of the scale for {len(bunched)} system(s) and "
                           f"criteria ({', '.join(bunched[:3])}{' ...' if len(bunched) > 3 else ''}): there "
                           "`judge estimate --plan` would withhold an active design's interval (the bounded-scale "
                           "interval that replaces the t assumes a uniform draw), so the draw is uniform")
    return strata, drawn_on, share, why


def _with_second_stage(table: pd.DataFrame, first, sentence: str) -> str:
    """The power sentence, and with a first stage the second stage's own count (power.csv gains a column)."""
    if first is None or "dialogues_active" not in table:
        return sentence
    table["dialogues_second_stage"] = [second_stage_count(row, len(first.random)) for row in table.itertuples()]
    table["dialogues_second_stage"] = table["dialogues_second_stage"].astype("Int64")
    counts = [f"{row.criterion} {row.dialogues_second_stage}" for row in table.itertuples()
              if not pd.isna(row.dialogues_second_stage)]
    if counts:
        sentence += (f" With the first stage's {len(first.random)} dialogues labelled, the second stage needs "
                     f"{', '.join(counts)} more (power.csv's dialogues_second_stage).")
    return sentence


def _plan_info(plan: pd.DataFrame, path: Path | str, table: pd.DataFrame, unit: str, budget: int, random_share: float,
               seed: int, design: str, share, why: str, strata: pd.Series, first, pilot_plan: Path | None,
               judged: int) -> dict:
    """plan.json: the settings, the digests (of plan.csv and of the judgments) and the power the plan was made for."""
    info = {
        "version": PLAN_VERSION, "unit": unit, "budget": budget, "random_share": random_share, "seed": seed,
        "judgments": str(path), "judgments_sha256": file_sha256(Path(path)) if Path(path).is_file() else None,
        "plan_sha256": plan_sha256(plan),
        "n_random": int((plan["part"] == "random").sum()), "n_targeted": int((plan["part"] == "targeted").sum()),
        "power": json.loads(table.to_json(orient="records")),
    }
    if design == "active":
        info.update(design="active", uncertainty_share=share, signal=why, strata=[
            {"system": system, "criterion": criterion, "weight": float(weight)}
            for (system, criterion), weight in strata.items()])
    if first is not None:
        info["stages"] = {
            "first_plan": str(pilot_plan), "first_plan_sha256": first.digest, "judged": judged,
            "first": len(first.random), "second": int((plan["stage"].eq(2) & plan["part"].eq("random")).sum()),
            # dialogues labelled in the first stage: `judge export --plan` leaves them out
            "labelled": sorted(map(str, first.random + first.targeted))}
    return info


def print_screen(result, out=None) -> None:
    out = sys.stdout if out is None else out
    say(f"Systems: mean judge score per criterion, 95% percentile bootstrap CI ({result.n_resamples} resamples of "
          "dialogues, paired across systems); tied = no system shown better (simultaneous paired bounds over every "
          "pair of systems and criteria, Bonferroni-t: 5% for the whole table, dominated included)", file=out)
    table = result.systems.assign(tied=result.systems["tied_with_best"].map({True: "tied", False: ""}))
    print(format_table(table[["criterion", "rank", "system", "mean", "ci_low", "ci_high", "n", "p_adjusted", "tied"]]),
          file=out)
    if result.dominated:
        say("\nDominated on every criterion (kept; candidates to leave out of the human study): "
              + "; ".join(f"{loser} (by {winner})" for loser, winner in sorted(result.dominated.items())), file=out)
    else:
        say("\nNo system is dominated on every criterion.", file=out)
    top = result.items.sort_values(["priority", "item_id"], ascending=[False, True]).head(10)
    say("\nDialogues that most need humans (uncertainty of the judgments + discrimination of the leading systems)",
          file=out)
    print(format_table(top[["item_id", "uncertainty", "discrimination", "n_failed", "n_na", "n_order_disagreement",
                       "part"]]), file=out)
    say("\nPower", file=out)
    power = result.power.dropna(axis=1, how="all")  # a count no input here can give is left out, and said
    print(format_table(power), file=out)
    if "dialogues_with_judge" in result.power.columns and "dialogues_with_judge" not in power.columns:
        say("(How many dialogues with the judge's scores beside the labels, dialogues_with_judge, needs a pilot's "
            "labels: --human.)", file=out)
    say(f"\n{result.sentence}", file=out)
    if result.plan is None:
        say("\nNo --budget given: no plan written (--budget N, with --output-dir DIR, writes plan.csv and "
            "plan.json).", file=out)
    else:
        info = result.plan_info
        dialogues = lambda n: f"{n} dialogue{'' if n == 1 else 's'}"  # noqa: E731
        how = ("uniformly at random" if info.get("design") != "active" else
               "at random with inclusion probabilities rising with the judge's uncertainty (plan.csv records them)")
        if info.get("uncertainty_share") == 0.0:
            how = "uniformly at random (the active design fell back; plan.csv records the probabilities)"
        stages = info.get("stages")
        random = dialogues(info["n_random"]) if not stages else (
            f"the first stage's {dialogues(stages['first'])} (the --pilot-plan's random part) and "
            f"{dialogues(stages['second'])}")
        say(f"\nPlan: budget {info['budget']} {info['unit']}: {random} drawn {how} "
              f"(share {info['random_share']}, seed {info['seed']}) and {dialogues(info['n_targeted'])} targeted.",
              file=out)
