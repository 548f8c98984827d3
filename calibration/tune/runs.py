"""Candidates built from the labels, judged through the engine: each fold's version of the rubric is judged on that
fold's labelled items by `judge score`'s run (its cache, batch and executors, the CLI's model flags), into
DIR/runs/NAME/ so that a rerun resumes; then the accepted version rebuilt from every label.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from judge.errors import Stopped

from ..errors import CalibrationError
from .build import (
    BUILDERS,
    DECODING_VARIANTS,
    Built,
    accepted_rubric,
    apply_proposal,
    check_folds,
    cross_fit,
    few_shot,
    fold_of,
    proposer_messages,
)
from .tune import Candidate, labelled_cells, read_judge


class TunePending(Stopped):
    """A fold waits for batch answers: nothing is tested until every candidate is judged."""


@dataclass
class Context:
    """What building needed and writing the accepted version needs again."""

    rubric: object
    disagreements: pd.DataFrame
    built: dict[str, Built] = field(default_factory=dict)


def _builders(text: str, args) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown or not names:
        raise CalibrationError(f"--candidates: unknown {', '.join(unknown) or '(empty)'}; choose among "
                               f"{', '.join(BUILDERS)}")
    if args.rubric is None or args.items is None:
        raise CalibrationError("--candidates builds versions of the rubric and judges them: give --rubric (the rubric "
                               "the current judgments were made with) and --items (the judged items)")
    if "rubric-edit" in names and not args.proposer_model:
        raise CalibrationError("--candidates rubric-edit needs --proposer-model M (the model proposing the edits)")
    return names


def built_candidates(args, judge_name: str, judge_file, planner: Plan | None = None
                     ) -> tuple[list[Candidate], list[str], Context]:
    """The built candidates, each fold judged by `judge score`'s run; with `planner` (--dry-run), each fold's run
    only planned into it, nothing written and no model called (the candidates then hold no judgments)."""
    from judge.items import load_items
    from judge.rubric import load_rubric

    names = _builders(args.candidates, args)
    rubric = load_rubric(args.rubric)
    current = read_judge(judge_name, judge_file, args.failure_value)
    made_with = sorted({r for r in current["rubric"].dropna().astype(str) if r})
    if made_with and made_with[0].partition("@")[0] != rubric.name:
        raise CalibrationError(f"--rubric {args.rubric}: the current judgments were made with {made_with[0]}")
    cells, _ = labelled_cells(current, judge_file, args.human, args.scale, args.criteria, args.rubric)
    likert = {c.id for c in rubric.criteria if c.scale.type == "likert"}
    cells = cells[cells["criterion"].isin(likert)]  # demonstrations and point meanings are a Likert scale's
    scores = current[["item_id", "system", "criterion", "score"]].rename(columns={"score": "judge"})
    disagreements = cells.merge(scores, on=["item_id", "system", "criterion"], how="inner").dropna(subset=["judge"])
    criteria = sorted(set(disagreements["criterion"]))
    by_criterion = {c: sorted(set(disagreements.loc[disagreements["criterion"] == c, "item_id"])) for c in criteria}
    check_folds(by_criterion, args.folds)
    items = {(i.id, i.system): i for i in load_items(args.items, rubric.inputs)}
    lacking = [k for k in zip(disagreements["item_id"], disagreements["system"]) if k not in items]
    if lacking:
        raise CalibrationError(f"--items {args.items}: no item {lacking[0][0]!r}, system {lacking[0][1]!r} of the "
                               f"labelled cells ({len(lacking)} missing): give the items that were judged")
    folds = fold_of(set(disagreements["item_id"]), args.folds, args.seed)
    context = Context(rubric, disagreements)
    procedures = _procedures(names, rubric, items, args, planner)
    judge_fold = _fold_judge(args, rubric, items, disagreements, criteria, planner)
    listed = []
    for built in procedures:
        frame = cross_fit(built, rubric, disagreements, folds, judge_fold)
        context.built[built.name] = built
        listed.append(Candidate(built.name, built.kind, built.description, frame))
    notes = [f"built candidates cross-fitted over {args.folds} folds of {len(folds)} labelled dialogues: each fold "
             "judged by a version built without it"]
    return listed, notes, context


def _procedures(names: list[str], rubric, items: dict, args, planner: Plan | None = None) -> list[Built]:
    out = []
    if "few-shot" in names:
        out.append(Built("few-shot", "few-shot", f"{args.shots} demonstrations per criterion, the current judge's "
                         "largest labelled disagreements", lambda d: few_shot(rubric, d, items, args.shots), {}))
    if "rubric-edit" in names:
        out.append(Built("rubric-edit", "rubric-edit", f"definition and point meanings proposed by "
                         f"{args.proposer_model} from the disagreements",
                         (lambda d: planner.proposed(rubric, d)) if planner else
                         (lambda d: _proposed(rubric, d, items, args)), {}))
    if "decoding" in names:
        for variant, (options, description) in DECODING_VARIANTS.items():
            if all(getattr(args, k, None) == v for k, v in options.items()):
                continue  # the current judge already decodes so
            out.append(Built(f"decoding-{variant}", "decoding", description, None, options))
    return out


def _fold_judge(args, rubric, items: dict, disagreements: pd.DataFrame, criteria: list[str],
                planner: Plan | None = None):
    """judge_fold for cross_fit: a version of the rubric judged on the labelled items of some dialogues (with
    `planner`, the run planned instead: its rubric and items in a temporary folder, nothing else written)."""
    import tempfile

    import yaml

    from judge.cli import report, run_options
    from judge.outputs import write_files
    from judge.run import run

    from ..io import read_judge_scores

    labelled = disagreements[["item_id", "system"]].drop_duplicates()

    def judge_fold(name: str, fold, version, dialogues, decoding: dict) -> pd.DataFrame:
        folder = args.output_dir / "runs" / name
        stem = "all" if fold is None else f"fold_{fold}"
        version = version.model_copy(update={"version": f"{rubric.version}+{name}"})
        keys = labelled[labelled["item_id"].isin(dialogues)]
        records = [items[k].model_dump(mode="json", exclude_none=True) for k in zip(keys["item_id"], keys["system"])]
        texts = {f"{stem}.yaml": yaml.safe_dump(version.model_dump(mode="json"), sort_keys=False, allow_unicode=True),
                 f"{stem}_items.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)}
        output = folder / f"{stem}.jsonl"
        own = {}
        if getattr(args, "batch_dir", None):  # each fold's batch files apart: they are other runs
            own["batch_dir"] = str(Path(args.batch_dir) / name / stem)

        def options_in(where: Path):
            """The fold's run options, its rubric and items read from `where`."""
            return run_options(args, command="score", rubric=str(where / f"{stem}.yaml"),
                               input=str(where / f"{stem}_items.jsonl"), output=str(output), criteria=criteria,
                               **decoding, **own)

        if planner is not None:
            with tempfile.TemporaryDirectory() as scratch:
                for file_name, text in texts.items():
                    (Path(scratch) / file_name).write_text(text, encoding="utf-8")
                planner.add(name, stem, options_in(Path(scratch)))
            return pd.DataFrame()
        changed: dict[str | Path, str | bytes] = {
            folder / n: t for n, t in texts.items()
            if not ((folder / n).exists() and (folder / n).read_text(encoding="utf-8") == t)}
        if changed:
            write_files(changed, verb="tune", inputs=[args.human, args.items])
        options = options_in(folder)
        print(f"judge tune: candidate {name} {stem}: judging {len(records)} labelled items", file=sys.stderr)
        outcome = run(options)
        report(outcome)
        if outcome.status == "interrupted":
            raise KeyboardInterrupt
        if outcome.status == "pending":
            raise TunePending(f"candidate {name} {stem} waits for batch answers ({own.get('batch_dir', 'the batch')})"
                              ": run its batch files, then the same command to read them and go on")
        if outcome.status != "complete":
            raise CalibrationError(f"candidate {name} {stem}: not every item could be judged ({outcome.status}); "
                                   f"{output} keeps the finished ones: run the same command again")
        return read_judge_scores(output)[0]

    return judge_fold


class Plan:
    """`judge tune --dry-run`: the plan of every fold's run (judge/dry_run.py), summed; the proposer not asked."""

    SUMMED = ("requests", "input_tokens", "cached_input_tokens", "output_tokens_max", "judgments", "already_done")

    def __init__(self):
        self.runs: list[dict] = []
        self.proposer_calls = 0

    def add(self, name: str, stem: str, options) -> None:
        from judge.dry_run import plan

        self.runs.append({"candidate": name, "run": stem, **plan(options)})

    def proposed(self, rubric, disagreements: pd.DataFrame):
        """rubric-edit in a dry run: the proposer is not asked (its answer is not known); the fold is planned
        with the current definitions, whose tokens an edit changes little."""
        self.proposer_calls += sum(c.scale.type == "likert" and c.id in set(disagreements["criterion"])
                                   for c in rubric.criteria)
        return rubric

    def numbers(self) -> dict:
        total: dict = {k: sum(r[k] for r in self.runs) for k in self.SUMMED}
        costs = [r["cost"] for r in self.runs]
        total.update(runs=len(self.runs), rounds=max((r["rounds"] for r in self.runs), default=0),
                     input_tokens_exact=all(r["input_tokens_exact"] for r in self.runs),
                     cost=None if not costs or None in costs else sum(costs), proposer_calls=self.proposer_calls,
                     tokens=self.runs[0]["tokens"] if self.runs else None,
                     per_run=[{k: r[k] for k in ("candidate", "run", "requests", "input_tokens")} for r in self.runs])
        return total


def _proposed(rubric, disagreements: pd.DataFrame, items: dict, args):
    """The rubric with the proposer's edits of every likert criterion it has disagreements on; an unusable
    proposal (other scale points, not JSON) is discarded and the criterion kept as it was."""
    tuned = rubric
    for criterion in rubric.criteria:
        if criterion.scale.type != "likert" or criterion.id not in set(disagreements["criterion"]):
            continue
        answer = _ask_proposer(proposer_messages(criterion, disagreements, items), args)
        edited, why = apply_proposal(tuned, criterion.id, answer)
        if edited is None:
            print(f"judge tune: rubric-edit proposal for {criterion.id} discarded: {why}", file=sys.stderr)
            continue
        tuned = edited
    return tuned


def _ask_proposer(messages: list[dict], args) -> str:
    """One chat call to --proposer-model on the first --base-url (the key from --api-key-env, never a flag)."""
    from openai import OpenAI

    urls = args.base_url or [os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")]
    client = OpenAI(base_url=urls[0], api_key=os.environ.get(args.api_key_env) or "none", timeout=args.timeout or 120)
    reply = client.chat.completions.create(
        messages=messages,  # type: ignore[arg-type]  # the SDK types each message as its own TypedDict
        model=args.proposer_model, temperature=0, seed=args.seed)
    return reply.choices[0].message.content or ""


def write_accepted(args, result, context: Context) -> None:
    """The accepted built version of each criterion, rebuilt from every label, as DIR/rubrics/NAME.yaml (one file:
    the criteria whose accepted candidate is a rubric version); a decoding variant is a note (run options)."""
    picked = result.accepted
    rebuild = {}
    for row in picked.itertuples():
        built = context.built.get(row.candidate)
        if built is None:
            continue  # judgments already made: nothing to rebuild
        if built.build is None:
            flags = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                             for k, v in built.decoding.items())
            result.notes.append(f"{row.criterion}: the accepted variant is a way of decoding: judge with {flags}")
            continue
        rebuild[row.criterion] = built
    if rebuild:
        name, text = accepted_rubric(context.rubric, rebuild, context.disagreements)
        result.rubric_files[name] = text
        result.notes.append(f"{name}: the accepted version rebuilt from every label; judgments made with it mark its "
                            "demonstrations' dialogues, and every statistics verb leaves their labels out")
