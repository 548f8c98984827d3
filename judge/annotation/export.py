"""`judge export`: write an annotation package into a new directory, all at once or not at all.

label-studio: labeling_config.xml, tasks.json (import it into a project with that config), project.json (the
body of Label Studio's project-creation call), instructions.md, key.json.
csv: sheet.csv (sheet_<annotator>.csv with --annotators N > 1), instructions.md, key.json.
key.json maps letters back to systems: it stays with whoever runs the study, never with the annotators.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from judge.annotation import NA, OTHER, default_mode
from judge.annotation.package import Task, allows_na, build_tasks, key_dict
from judge.annotation.plan import key_json
from judge.errors import OutputError
from judge.items import Item
from judge.rubric import Rubric

FORMATS = ("label-studio", "csv")


@dataclass
class Exported:
    directory: Path
    files: list[str]
    tasks: list[Task]

    def count(self, kind: str) -> int:
        return sum(t.kind == kind for t in self.tasks)


def instructions(rubric: Rubric, fmt: str) -> str:
    """The guideline as annotators read it beside the sheet: criteria, scale points and their meanings."""
    pairwise = rubric.task == "pairwise"
    out = [f"# {rubric.title}", "", rubric.instructions.strip(), ""]
    if rubric.qualification:
        out += ["The first tasks (section `qualification`) are a short qualification test; the evaluation follows.",
                ""]
    if pairwise:
        out += ["Each task shows two summaries, #1 and #2. For each criterion answer 1 (#1 is better), 2 (#2 is "
                "better) or 0 (they are even). Some summaries may appear twice: identical summaries are always 0.", ""]
    else:
        out += ["Each task shows one dialogue and its candidates under letters (A, B, C...). The order of the letters "
                "is random and says nothing about quality. Rate every candidate on every criterion.", ""]
    for c in rubric.criteria:
        out += [f"## {c.name}", "", " ".join(c.definition.split()), ""]
        if c.scale.type == "likert":
            out += [f"- **{p.value}** ({p.label}): {p.meaning}" for p in c.scale.points]
        else:
            out += [f"- **{lab.value}**: {lab.meaning}" for lab in c.scale.labels]
        if c.gate is not None:  # allows_na(c)
            out += [f"- **{NA}**: {c.gate.na_reason}. {' '.join(c.gate.question.split())} If not, answer {NA} for "
                    f"every candidate of the dialogue."]
        if c.per_segment:
            out += ["", "Rate each topic segment of a candidate separately (A.1, A.2, ...)."]
        if c.only_when:
            cond = "; ".join(f"{k} is {' or '.join(v)}" for k, v in c.only_when.items())
            out += ["", f"Only for candidates whose {cond}; the other cells say {NA}."]
        if c.explanations:
            out += ["", "Then pick the explanation that fits your choice best:", ""]
            out += [f"- {e}" for e in c.explanations] + [f"- {OTHER}: your own words"]
        out.append("")
    if fmt == "csv":
        out += ["## Filling the sheet", "",
                "Write your name in the `annotator` column of every row, then one answer per cell: the number or "
                f"label exactly as listed above{', or ' + NA if any(allows_na(c) for c in rubric.criteria) else ''}. "
                "Explanation cells (`..._why`) take one line of the list, or `other: ...`. "
                "Do not change the other columns.", ""]
    return "\n".join(out)


def export_package(rubric: Rubric, items: list[Item], fmt: str, output: str | Path, seed: int = 0,
                   annotators: int = 1, plan: dict[str, str] | None = None, repeats: int | None = None,
                   qualification: bool = True, plan_source: dict | None = None) -> Exported:
    from judge.annotation import csvsheet, labelstudio

    output = Path(output)
    if fmt not in FORMATS:
        raise OutputError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if annotators < 1:
        raise OutputError("--annotators must be at least 1")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise OutputError(f"{output}: exists and is not an empty directory; export into a new directory")
    tasks = build_tasks(rubric, items, seed, plan, repeats, qualification)
    files: dict[str, str] = {"instructions.md": instructions(rubric, fmt)}
    if fmt == "label-studio":
        config = labelstudio.label_config(rubric, tasks)
        files["labeling_config.xml"] = config
        files["tasks.json"] = json.dumps(labelstudio.tasks_file(rubric, tasks), ensure_ascii=False, indent=1) + "\n"
        project = labelstudio.project_file(rubric, config, annotators, files["instructions.md"])
        files["project.json"] = json.dumps(project, ensure_ascii=False, indent=1) + "\n"
    elif annotators == 1:
        files["sheet.csv"] = csvsheet.sheet_text(rubric, tasks)
    else:
        for n in range(1, annotators + 1):
            files[f"sheet_ann{n}.csv"] = csvsheet.sheet_text(rubric, tasks, annotator=f"ann{n}")
    files["key.json"] = key_json(key_dict(rubric, tasks, seed, fmt, annotators, plan_source))

    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{output}: the directory {parent} does not exist")
    scratch = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=parent))
    try:
        scratch.chmod(default_mode(0o777))
        for name, text in files.items():
            (scratch / name).write_text(text, encoding="utf-8")
        if output.exists():
            output.rmdir()  # empty, checked above
        scratch.rename(output)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Exported(output, list(files), tasks)
