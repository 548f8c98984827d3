"""Rendering (rubric, criterion, item) into chat messages with sandboxed Jinja2.

Templates are trusted-looking but may come from users, so they run in a `SandboxedEnvironment` with
`StrictUndefined` (a typo fails loudly instead of rendering an empty string). Dialogues, candidates,
references and the rubric's context fields are untrusted: they reach the template only as variables, never as
template source, and they are wrapped by the `fence` filter in delimiters derived from their own hash, which
the text therefore cannot contain and cannot close.

A template defines the blocks `system` and `user`; each becomes one chat message. Shared content comes first
(rubric and criterion in `system`, then the dialogue), the candidate and the question last, so that requests
about one dialogue share a long prefix that servers cache.

Every template problem, at load or at render time, is one `TemplateError` naming the template file and line. The
sandbox is judge/sandbox.py, imported with Jinja at the first template: a run that renders nothing never loads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.errors import TemplateError
from judge.items import Item
from judge.resources import bundled_dir, read_text
from judge.rubric import Criterion, Rubric

if TYPE_CHECKING:
    import jinja2

ROLES = ("system", "user")


def fence(text: Any, kind: str) -> str:
    """Wrap untrusted text in delimiters it cannot contain, so it cannot pose as instructions.

    Non-text values (a number or list in an item's context field) are fenced as their JSON; a missing value
    (None) is an error, because rendering "null" into a prompt would hide a missing field.
    """
    if text is None:
        raise ValueError(f"nothing to fence as {kind!r}: the value is missing (None)")
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False)
    return _fenced(text, kind)


@lru_cache(maxsize=64)  # a dialogue is fenced again for each of its candidates: hashed and scanned once
def _fenced(text: str, kind: str) -> str:
    label = kind.upper()
    salt = ""
    while True:
        tag = hashlib.sha256((salt + text).encode("utf-8")).hexdigest()[:12]
        opening, closing = f"<<<{label} {tag}>>>", f"<<<END {label} {tag}>>>"
        if opening not in text and closing not in text:
            return f"{opening}\n{text}\n{closing}"
        salt += "#"  # astronomically unlikely; keeps the guarantee unconditional


@lru_cache(maxsize=1)
def _environment():
    """The sandboxed Jinja environment, made (and Jinja imported) at the first template: a run that renders no
    prompt (--batch-dir reading its answers through the key file) never loads Jinja."""
    import jinja2

    from judge.sandbox import Sandbox

    env = Sandbox(
        loader=jinja2.FileSystemLoader(str(bundled_dir("prompts"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # chat text, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        auto_reload=False,  # no stat of every included file at each render: bundled templates do not change mid-run
        cache_size=-1,  # a plain dict (never evicted): it holds the bundled templates only, looked up at each include
    )
    env.filters["fence"] = fence
    return env


def _bundled_names() -> str:
    return ", ".join(sorted(p.name for p in bundled_dir("prompts").glob("*.j2")))


def load_template(name_or_path: str) -> jinja2.Template:
    """A bundled template by name (pointwise.j2) or a user's template file; user files win a name clash."""
    if not _is_user_file(name_or_path):
        return _bundled_template(name_or_path)
    # A user's file is compiled again when it changes, or when the same relative name means another file.
    try:
        stat = os.stat(name_or_path)
        stamp = (os.path.abspath(name_or_path), stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None  # gone: reading it says so
    return _user_template(name_or_path, stamp)


@lru_cache(maxsize=256)
def _is_user_file(name_or_path: str) -> bool:
    return Path(name_or_path).is_file() or not (bundled_dir("prompts") / name_or_path).is_file()


@lru_cache(maxsize=16)
def _bundled_template(name: str) -> jinja2.Template:
    return _checked(name, lambda env: env.get_template(name))


@lru_cache(maxsize=64)
def _user_template(name_or_path: str, stamp: tuple | None) -> jinja2.Template:
    path = Path(name_or_path)
    if path.suffix != ".j2" and not path.exists():
        raise TemplateError(f"template {name_or_path!r} not found: neither a bundled template ({_bundled_names()}) "
                            "nor a file")
    source = read_text(path, TemplateError)  # no such file, a directory, not UTF-8: one clear line
    return _checked(name_or_path, lambda env: env.template_class.from_code(
        env, env.compile(source, name=path.name, filename=str(path)), env.make_globals(None)))


def _checked(name: str, build) -> jinja2.Template:
    import jinja2

    try:
        template = build(_environment())
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{exc.filename or name}:{exc.lineno}: template syntax error: {exc.message}") from None
    if missing := [role for role in ROLES if role not in template.blocks]:
        raise TemplateError(f"template {name!r} must define the blocks {ROLES}; missing {missing}")
    return template


def _where(exc: BaseException, fallback: str) -> str:
    """'file:line' of the innermost template frame of a render error (Jinja rewrites frames to template lines)."""
    import jinja2

    if isinstance(exc, jinja2.TemplateSyntaxError) and exc.lineno:
        return f"{exc.filename or fallback}:{exc.lineno}"
    where, tb = fallback, exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            where = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _problem(exc: BaseException) -> str:
    import jinja2
    import jinja2.sandbox

    if isinstance(exc, jinja2.TemplateNotFound):
        return f"included template {exc.name!r} not found; the bundled ones are {_bundled_names()}"
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return f"the sandbox forbids this: {exc}"
    if isinstance(exc, jinja2.TemplateError):
        return exc.message or type(exc).__name__
    if isinstance(exc, OverflowError) and "MAX_RANGE" in str(exc):  # the sandbox's own range() limit
        return f"the sandbox forbids this: range() may not exceed {jinja2.sandbox.MAX_RANGE} items"
    if isinstance(exc, ValueError):  # a filter refusing its input (fence of a missing value)
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _render_block(template: jinja2.Template, role: str, variables: dict) -> str:
    try:
        return "".join(template.blocks[role](template.new_context(variables))).strip()
    except Exception:
        template.environment.handle_exception()  # re-raises with the template's own file and line in the traceback


# The variables a system block may use and still be shared by every item: rubric and criterion, nothing of the item.
SHARED_VARIABLES = ("rubric", "criterion", "scale", "gate")
# System blocks rendered once per (template, criterion), per rubric object; the entry goes with the rubric.
_SYSTEM_CACHE: dict[int, dict] = {}


def _system_cache(rubric: Rubric) -> dict:
    key = id(rubric)
    if key not in _SYSTEM_CACHE:
        _SYSTEM_CACHE[key] = {}
        weakref.finalize(rubric, _SYSTEM_CACHE.pop, key, None)
    return _SYSTEM_CACHE[key]


def _system_block(template: jinja2.Template, variables: dict) -> str:
    """The system block, rendered once per (template, rubric, criterion) when it uses no item variable.

    Rendering it with the shared variables only proves that: StrictUndefined raises on any other name, and such
    a template is then rendered per item. This takes Jinja off the per-judgment hot path for the longest block.
    """
    import jinja2

    rubric, criterion = variables.get("rubric"), variables.get("criterion")
    if not isinstance(rubric, Rubric):
        return _render_block(template, "system", variables)
    cache = _system_cache(rubric)
    key = (template, getattr(criterion, "id", None))  # the template object: a changed file is a new one
    if key not in cache:
        try:
            shared = {k: variables[k] for k in SHARED_VARIABLES if k in variables}
            cache[key] = _render_block(template, "system", shared)
        except jinja2.UndefinedError:
            cache[key] = None  # the block reads item variables: render it per item
    cached = cache[key]
    return cached if cached is not None else _render_block(template, "system", variables)


def render_messages(template_name: str, variables: dict) -> list[dict[str, str]]:
    template = load_template(template_name)
    try:
        contents = [_system_block(template, variables), _render_block(template, "user", variables)]
    except Exception as exc:  # the template's fault, whatever it raised: one line with its file and line
        problem = " ".join(_problem(exc).split())
        raise TemplateError(f"{_where(exc, template_name)}: {problem}") from None
    return [{"role": role, "content": content} for role, content in zip(ROLES, contents) if content]


def _context(rubric: Rubric, item: Item) -> dict[str, Any]:
    """The rubric's context fields this item has (e.g. summary_type), in the rubric's order."""
    if not rubric.context_fields:  # most rubrics: keep the per-judgment path free of dict building
        return {}
    extra = item.model_extra or {}
    values = {name: extra[name] if name in extra else getattr(item, name, None) for name in rubric.context_fields}
    return {name: value for name, value in values.items() if value is not None}


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
        "context": _context(rubric, item),
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
    variables["candidates"] = [{"letter": k, "text": i.candidate, "context": _context(rubric, i)}
                               for k, i in zip(letters, items)]
    return render_messages(rubric.block_template, variables)


def segment_messages(rubric: Rubric, item: Item) -> list[dict]:
    return render_messages("segment.j2",
                           {"rubric": rubric, "dialogue": item.dialogue_text, "candidate": item.candidate})


def gate_messages(rubric: Rubric, criterion: Criterion, item: Item) -> list[dict]:
    """The once-per-dialogue applicability question: it sees the dialogue only, never a candidate."""
    variables = {"rubric": rubric, "criterion": criterion, "gate": criterion.gate, "dialogue": item.dialogue_text}
    return render_messages("gate.j2", variables)


def template_sources(user_template: str | None) -> list:
    """Every template text a prompt may come from (bundled templates include each other), for the fingerprint."""
    sources: list[tuple[str, str | None]] = [(p.name, p.read_text(encoding="utf-8"))
                                             for p in sorted(bundled_dir("prompts").glob("*.j2"))]
    if user_template:
        try:
            sources.append((user_template, Path(user_template).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            sources.append((user_template, None))  # a bundled name, or rendering reports the problem
    return sources
