"""The Jinja sandbox prompts are rendered in (judge/prompting.py makes the environment): Jinja's own sandbox, with
bounds on what a template may build and the per-prompt checks decided once per (type, attribute).

A module of its own so that Jinja is imported only when a prompt is rendered: a run that renders none (--batch-dir
reading its answers through the key file) starts without it.
"""

from __future__ import annotations

import operator
import types
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

# Bounds on what a template may build: Jinja's sandbox caps range() at 100,000 but not `10 ** 10 ** 10` or
# `"x" * 10 ** 9`, which would hang or exhaust memory instead of failing.
MAX_POWER_BITS = 10_000
MAX_REPEAT = 1_000_000
_MISSING = object()


class Sandbox(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **options):
        super().__init__(**options)
        # Jinja's rule for an attribute depends on the object's type and the attribute's name only (isinstance
        # checks): decided once per pair instead of at each of the few attributes every prompt reads.
        self._safe: dict[tuple[type, str], bool] = {}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        kind = type(obj)
        safe = self._safe.get((kind, attr))
        if safe is None:
            safe = super().is_safe_attribute(obj, attr, value)
            if obj.__class__ is kind and len(self._safe) < 4096:  # an object posing as another type is asked each time
                self._safe[kind, attr] = safe
        return safe

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Data already found safe for this type (a criterion's name, a scale's values) is read directly; a method
        # (str.format must be wrapped), a missing attribute or a first read takes Jinja's whole path.
        if not self._safe.get((type(obj), attribute)):
            return super().getattr(obj, attribute)
        value = getattr(obj, attribute, _MISSING)
        return super().getattr(obj, attribute) if value is _MISSING or callable(value) else value

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's signature (no clash with kwargs)
        # A dict's own methods (`context.items()`) take no context and are never unsafe: called directly, without
        # Jinja's probing for pass_context markers (two failed attribute lookups, half the cost of such a call).
        if type(__obj) is types.BuiltinMethodType and type(__obj.__self__) is dict:
            kwargs.pop("_block_vars", None)
            kwargs.pop("_loop_vars", None)
            return __obj(*args, **kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def make_globals(self, d):
        # A plain dict, not Jinja's ChainMap over the environment's globals (which this module never changes once
        # made): every render copies a template's globals, and copying a ChainMap was half the cost of a prompt.
        return {**self.globals, **(d or {})}

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        if op == "**" and all(isinstance(v, int) for v in (left, right)) and abs(left) > 1 \
                and right * abs(left).bit_length() > MAX_POWER_BITS:
            raise jinja2.exceptions.SecurityError(f"{left} ** {right} is too large for a template")
        if op == "*":
            sizes = [len(v) for v in (left, right) if isinstance(v, (str, list, tuple))]
            counts = [v for v in (left, right) if isinstance(v, int)]
            if sizes and counts and sizes[0] * counts[0] > MAX_REPEAT:
                raise jinja2.exceptions.SecurityError(f"repeating a text {counts[0]} times is too large for a template")
        return {"*": operator.mul, "**": operator.pow}[op](left, right)
