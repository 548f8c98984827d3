"""The plan and key formats, one owner for each: every verb reads and writes them through this module.

A plan is the folder `judge screen --budget` (or `judge escalate`) writes: `plan.csv` (one row per dialogue:
item_id, part = random | targeted, reason; an active design adds inclusion_probability, a two-stage plan stage)
and `plan.json` ("version": 1, the settings, plan_sha256 = the digest of plan.csv, judgments_sha256 = that of the
judgments it was drawn from). A plan is a contract: `judge export --plan` copies its digest into the key, and
`judge estimate --plan` refuses a plan that was edited, made from other judgments, or names other dialogues.

The key is the `key.json` `judge export` writes beside the sheets (which system is behind each letter, each task's
part of the plan); `judge import` reads it to turn sheets into labels, `judge estimate --key` to check the labels
came from the plan.

Errors are raised as `error` (the caller's error class: InputError for `judge export`/`import`, the calibration
verbs pass theirs), the message naming the file, the line where there is one, and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from judge.errors import InputError
from judge.resources import file_sha256

if TYPE_CHECKING:  # pandas is imported when a plan is read, not when the module is
    import pandas as pd


# The key's tasks: what `judge export` shows and `judge import` reads back (built by annotation.package).
@dataclass(frozen=True)
class Slot:
    """One candidate as shown: its letter (or "1"/"2" in a pair), the system behind it, its text."""

    letter: str
    system: str
    text: str = ""
    segments: tuple[str, ...] = ()  # topic segments, when the rubric judges per segment
    skip: tuple[str, ...] = ()  # criteria that do not apply to this candidate (only_when)
    context: tuple[tuple[str, str], ...] = ()  # its own reference or summary type, when candidates differ
    position: int = 0  # where the candidate was in the input: the key lists candidates unshuffled


@dataclass
class Task:
    task_id: str
    kind: str  # "qualification" | "item" | "check" (a repeated identical pair)
    item_id: str
    slots: list[Slot]
    system: str | None = None  # a pair's "system_1|system_2", in the input's order
    swapped: bool = False  # the pair is shown as (#1 = candidate_2, #2 = candidate_1)
    must_tie: bool = False  # both sides of the pair are the same text
    part: str | None = None  # from the plan: random | targeted
    expected: dict[str, str] | None = None  # qualification answers (a pair's in the input's order)
    dialogue: str | list = ""
    context: dict[str, str] = field(default_factory=dict)  # reference and the rubric's context fields

    @property
    def section(self) -> str:
        return "qualification" if self.kind == "qualification" else "evaluation"


PLAN_VERSION = 1
PLAN_PARTS = ("random", "targeted")
PLAN_FILES = ("plan.csv", "plan.json")
KEY_FORMAT = "judge-annotation-key"


# -- writing ------------------------------------------------------------------------------------------------------


def plan_csv(plan: pd.DataFrame) -> str:
    """The exact text of plan.csv."""
    return plan.to_csv(index=False)


def plan_sha256(plan: pd.DataFrame) -> str:
    """The digest plan.json records: of plan.csv's text as written."""
    return hashlib.sha256(plan_csv(plan).encode("utf-8")).hexdigest()


def plan_files(plan: pd.DataFrame, info: dict) -> dict[str, str]:
    """{file name: exact text} of a plan folder: plan.csv and plan.json (`info`, which records plan_sha256)."""
    return {"plan.csv": plan_csv(plan), "plan.json": json.dumps(info, indent=2) + "\n"}


# -- reading and checking -----------------------------------------------------------------------------------------


def _first_line(mask) -> int:
    """The file line (header = 1) of the first True row of a boolean Series."""
    return int(mask.to_numpy().nonzero()[0][0]) + 2


def _plan_json(json_path: Path, error: type[Exception]) -> dict:
    try:
        info = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise error(f"{json_path}:{exc.lineno}: invalid JSON at column {exc.colno} ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{json_path}: not a readable plan file ({exc})") from None
    if not isinstance(info, dict) or info.get("version") != PLAN_VERSION:
        raise error(f"{json_path}: not a plan file (expected \"version\": {PLAN_VERSION})")
    return info


def _check_columns(plan: pd.DataFrame, csv_path: Path, error: type[Exception]) -> None:
    """The optional columns an active or two-stage plan carries: probabilities in (0, 1], stages 1 or 2."""
    import pandas as pd

    if "inclusion_probability" in plan.columns:
        text = plan["inclusion_probability"].str.strip()
        values = pd.to_numeric(text, errors="coerce")
        random = plan["part"] == "random"
        # A targeted row may leave it empty, or say 1 (`judge escalate` writes 1: drawn for certain); it never
        # enters the estimates either way.
        bad = (random | (text != "")) & ~((values > 0) & (values <= 1))
        if bad.any():
            given = plan["inclusion_probability"][bad].iloc[0]
            raise error(f"{csv_path}:{_first_line(bad)}: inclusion_probability must be a number in (0, 1] (empty "
                        f"allowed on a targeted row), got {given!r}")
    if "stage" in plan.columns:  # a two-stage plan (--pilot-plan): its weights need every random row's probability
        bad = ~plan["stage"].isin(["1", "2"])
        if bad.any():
            raise error(f"{csv_path}:{_first_line(bad)}: stage must be 1 or 2, got {plan['stage'][bad].iloc[0]!r}")
        if "inclusion_probability" not in plan.columns:
            raise error(f"{csv_path}:1: a stage column without inclusion_probability: a two-stage plan records each "
                        "random dialogue's probability")


def read_plan(directory: str | Path, error: type[Exception] = InputError) -> tuple[pd.DataFrame, dict]:
    """(plan.csv as strings, plan.json) from a plan folder, checked: both files there, plan.json a version-1 plan,
    plan.csv with item_id and part (random or targeted), each dialogue once, the optional columns valid."""
    import pandas as pd

    directory = Path(directory)
    csv_path, json_path = directory / "plan.csv", directory / "plan.json"
    for path in (csv_path, json_path):
        if not path.is_file():
            raise error(f"{path}: no such file (--plan takes the --output-dir of `judge screen --budget`)")
    info = _plan_json(json_path, error)
    try:
        plan = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise error(f"{csv_path}: not a readable CSV file ({exc})") from None
    missing = [c for c in ("item_id", "part") if c not in plan.columns]
    if missing:
        raise error(f"{csv_path}:1: missing column(s) {', '.join(missing)}")
    if plan.empty:
        raise error(f"{csv_path}: the plan lists no dialogue")
    empty = plan["item_id"].str.strip() == ""
    if empty.any():
        raise error(f"{csv_path}:{_first_line(empty)}: empty item_id")
    bad = ~plan["part"].isin(PLAN_PARTS)
    if bad.any():
        given = plan["part"][bad].iloc[0]
        raise error(f"{csv_path}:{_first_line(bad)}: part must be random or targeted, got {given!r}")
    _check_columns(plan, csv_path, error)
    duplicated = plan["item_id"].duplicated()
    if duplicated.any():
        raise error(f"{csv_path}:{_first_line(duplicated)}: dialogue {plan['item_id'][duplicated].iloc[0]!r} "
                    "is listed twice")
    return plan, info


def plan_contract(directory: str | Path, judgments, judged_items, instead: str, error: type[Exception] = InputError
                  ) -> tuple[pd.DataFrame, dict, str, list[str]]:
    """(plan.csv, plan.json, plan.csv's sha256, warnings) of a plan held to its contract: unedited since it was
    written, made from these `judgments` (a path; a DataFrame, or a name that is not a file, cannot be checked: a
    warning) and naming only dialogues among `judged_items`. `instead`: what the judgments' refusal says to do."""
    import numpy as np
    import pandas as pd

    directory = Path(directory)
    frame, info = read_plan(directory, error)
    warnings = []
    digest = file_sha256(directory / "plan.csv")
    if info.get("plan_sha256") is None:
        warnings.append(f"{directory / 'plan.json'} records no digest of its plan (made by an older version): "
                        "plan.csv cannot be checked for edits")
    elif info["plan_sha256"] != digest:
        raise error(f"{directory / 'plan.csv'}: differs from the plan `judge screen` wrote (plan.json records "
                    f"sha256 {info['plan_sha256'][:12]}..., the file has {digest[:12]}...): an edited plan no longer "
                    "says which dialogues were drawn at random")
    named = info.get("judgments_sha256")
    if isinstance(judgments, pd.DataFrame) or not Path(judgments).is_file():
        warnings.append("the judgments are a DataFrame: not checked against the file the plan was made from "
                        f"({info.get('judgments')})")
    elif named and named != file_sha256(Path(judgments)):
        raise error(f"{judgments}: not the judgments the plan was made from ({info.get('judgments')}, "
                    f"sha256 {named[:12]}...): the plan's random sample was drawn from those; {instead}")
    outside = ~frame["item_id"].isin(set(judged_items))
    if outside.any():
        line = int(np.flatnonzero(outside.to_numpy())[0]) + 2
        raise error(f"{directory / 'plan.csv'}:{line}: dialogue {frame['item_id'][outside].iloc[0]!r} is "
                    "not in the judgments: the plan was made for other judgments")
    return frame, info, digest, warnings


def plan_to_label(directory: str | Path, error: type[Exception] = InputError) -> dict[str, str]:
    """What `judge export --plan` puts in the sheets: {item_id: part} in plan.csv's order, checked (read_plan) and
    unedited (plan_record), a second stage's plan without the dialogues its first stage labelled (plan.json's
    stages.labelled)."""
    frame, info = read_plan(directory, error)
    plan_record(directory, error)
    labelled = set((info.get("stages") or {}).get("labelled") or [])
    return {item: part for item, part in zip(frame["item_id"], frame["part"]) if item not in labelled}


def plan_record(directory: str | Path, error: type[Exception] = InputError) -> dict:
    """Which plan a package was exported from, for the key: its folder and digest (and the judgments it was made
    from). A plan.csv that no longer matches the digest its plan.json records was edited, and is refused."""
    directory = Path(directory)
    digest = file_sha256(directory / "plan.csv")
    info = _plan_json(directory / "plan.json", error)
    recorded = info.get("plan_sha256")
    if recorded and recorded != digest:
        raise error(f"{directory / 'plan.csv'}: differs from the plan `judge screen` wrote (plan.json records "
                    f"sha256 {recorded[:12]}...): an edited plan no longer says which dialogues are random")
    return {"path": str(directory), "sha256": digest, "judgments_sha256": info.get("judgments_sha256")}


# -- the key ------------------------------------------------------------------------------------------------------


def key_json(key: dict) -> str:
    """The exact text of key.json."""
    return json.dumps(key, ensure_ascii=False, indent=1) + "\n"


def read_key(path: str | Path, error: type[Exception] = InputError) -> dict:
    """key.json as written by `judge export`: a JSON object of its format (the rest is read by its users)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such file (--key takes the key.json `judge export` wrote)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not a JSON key file written by `judge export` ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != KEY_FORMAT:
        raise error(f"{path}: not a key written by `judge export`")
    return data


def load_key(path: str | Path):
    """The key for `judge import`: its rubric, its tasks by id (Task), and the raw dict."""
    from pydantic import ValidationError

    from judge.rubric import Rubric

    data = read_key(path)
    try:
        rubric = Rubric.model_validate(data["rubric"])
        tasks = {}
        for row in data["tasks"]:
            slots = ([Slot(s["letter"], s["system"], "", ("",) * s["segments"], tuple(s["skip"]), position=n)
                      for n, s in enumerate(row["slots"])]
                     if "slots" in row else [Slot("1", ""), Slot("2", "")])
            tasks[row["task_id"]] = Task(row["task_id"], row["kind"], row["item_id"], slots,
                                         system=row.get("system"), swapped=row.get("swapped", False),
                                         must_tie=row.get("must_tie", False), part=row.get("part"),
                                         expected=row.get("expected"))
    except (KeyError, TypeError, ValidationError) as exc:
        raise InputError(f"{path}: the key is damaged ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    return rubric, tasks, data


def check_key(path: str | Path, parts: dict[str, str], digest: str, error: type[Exception] = InputError) -> None:
    """The key `judge export --plan` wrote must come from this plan (`digest`: plan.csv's), task by task."""
    data = read_key(path, error)
    recorded = (data.get("plan") or {}).get("sha256")
    if recorded is None:
        raise error(f"{path}: the key records no plan (exported without --plan): its labels cannot be matched to "
                    "the plan's random part")
    if recorded != digest:
        raise error(f"{path}: the sheets were exported from another plan (sha256 {recorded[:12]}...) than --plan "
                    f"({digest[:12]}...): the labels were not drawn from this plan")
    for task in data.get("tasks", []):
        if task.get("kind") != "item":
            continue
        item, part = task.get("item_id"), task.get("part")
        if parts.get(item) != part:
            raise error(f"{path}: task {task.get('task_id')!r} (dialogue {item!r}) is {part or 'unplanned'} in the "
                        f"key and {parts.get(item, 'absent')} in the plan")
