"""Rendering (rubric, criterion, item) into chat messages with sandboxed Jinja2.

Templates are trusted-looking but may come from users, so they run in a `SandboxedEnvironment` with
`StrictUndefined` (a typo fails loudly instead of rendering an empty string). Dialogues, candidates and
references are untrusted: they reach the template only as variables, never as template source, and they are
wrapped by the `fence` filter in delimiters derived from their own hash, which the text therefore cannot contain
and cannot close.

A template defines the blocks `system` and `user`; each becomes one chat message. Shared content comes first
(rubric and criterion in `system`, then the dialogue), the candidate and the question last, so that requests
about one dialogue share a long prefix that servers cache.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from judge.errors import TemplateError
from judge.items import Item
from judge.resources import bundled_dir
from judge.rubric import Criterion, Rubric

ROLES = ("system", "user")


def fence(text: str, kind: str) -> str:
    """Wrap untrusted text in delimiters it cannot contain, so it cannot pose as instructions."""
    label = kind.upper()
    salt = ""
    while True:
        tag = hashlib.sha256((salt + text).encode("utf-8")).hexdigest()[:12]
        opening, closing = f"<<<{label} {tag}>>>", f"<<<END {label} {tag}>>>"
        if opening not in text and closing not in text:
            return f"{opening}\n{text}\n{closing}"
        salt += "#"  # astronomically unlikely; keeps the guarantee unconditional


@lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(bundled_dir("prompts"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # chat text, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["fence"] = fence
    return env


@lru_cache(maxsize=64)
def load_template(name_or_path: str) -> jinja2.Template:
    env = _environment()
    path = Path(name_or_path)
    try:
        if path.suffix == ".j2" and path.is_file():
            template = env.from_string(path.read_text(encoding="utf-8"))
        else:
            template = env.get_template(name_or_path)
    except jinja2.TemplateNotFound:
        raise TemplateError(f"template {name_or_path!r} not found (neither a bundled template nor a file)") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{exc.filename or name_or_path}:{exc.lineno}: template syntax error: {exc.message}") from None
    missing = [role for role in ROLES if role not in template.blocks]
    if missing:
        raise TemplateError(f"template {name_or_path!r} must define the blocks {ROLES}; missing {missing}")
    return template


# The variables a system block may use and still be shared by every item: rubric and criterion, nothing of the item.
SHARED_VARIABLES = ("rubric", "criterion", "scale", "gate")


def _render_block(template: jinja2.Template, role: str, variables: dict) -> str:
    return "".join(template.blocks[role](template.new_context(variables))).strip()


def _system_block(template_name: str, template: jinja2.Template, variables: dict) -> str:
    """The system block, rendered once per (template, rubric, criterion) when it uses no item variable.

    Rendering it with the shared variables only proves that: StrictUndefined raises on any other name, and such
    a template is then rendered per item. This takes Jinja off the per-judgment hot path for the longest block.
    """
    rubric, criterion = variables.get("rubric"), variables.get("criterion")
    if not isinstance(rubric, Rubric):
        return _render_block(template, "system", variables)
    cache = rubric.rendered_system  # lives and dies with the rubric object
    key = (template_name, getattr(criterion, "id", None))
    if key not in cache:
        try:
            cache[key] = _render_block(template, "system", {k: variables[k] for k in SHARED_VARIABLES if k in variables})
        except jinja2.UndefinedError:
            cache[key] = None  # the block reads item variables: render it per item
    cached = cache[key]
    return cached if cached is not None else _render_block(template, "system", variables)


def render_messages(template_name: str, variables: dict) -> list[dict[str, str]]:
    template = load_template(template_name)
    try:
        contents = [_system_block(template_name, template, variables), _render_block(template, "user", variables)]
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"template {template_name!r}: {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateError(f"template {template_name!r} tried something the sandbox forbids: {exc}") from None
    return [{"role": role, "content": content} for role, content in zip(ROLES, contents) if content]


def _variables(rubric: Rubric, criterion: Criterion, item: Item) -> dict:
    return {
        "rubric": rubric,
        "criterion": criterion,
        "scale": criterion.scale,
        "dialogue": item.dialogue_text,
        "candidate": item.candidate,
        "candidate_1": item.candidate_1,
        "candidate_2": item.candidate_2,
        "reference": item.reference if criterion.needs_reference else None,
        "segment": None,
        "segment_number": None,
        "extra": item.extra,
    }


def criterion_messages(rubric: Rubric, criterion: Criterion, item: Item, template: str | None = None,
                       segment: str | None = None, segment_number: int | None = None) -> list[dict]:
    """One criterion, one candidate (or one of its segments, or one ordered pair)."""
    variables = _variables(rubric, criterion, item)
    variables.update(segment=segment, segment_number=segment_number)
    return render_messages(template or rubric.template, variables)


def block_messages(rubric: Rubric, criterion: Criterion, items: list[Item], letters: list[str]) -> list[dict]:
    """All candidates of one dialogue, already in the order shown, labelled by `letters`."""
    variables = _variables(rubric, criterion, items[0])
    variables["candidates"] = [{"letter": k, "text": i.candidate} for k, i in zip(letters, items)]
    return render_messages(rubric.block_template, variables)


def segment_messages(rubric: Rubric, item: Item) -> list[dict]:
    return render_messages("segment.j2", {"rubric": rubric, "dialogue": item.dialogue_text, "candidate": item.candidate})


def gate_messages(rubric: Rubric, criterion: Criterion, item: Item) -> list[dict]:
    """The once-per-dialogue applicability question: it sees the dialogue only, never a candidate."""
    variables = {"rubric": rubric, "criterion": criterion, "gate": criterion.gate, "dialogue": item.dialogue_text}
    return render_messages("gate.j2", variables)
