"""mkdocs hook: `::: judge.score` and `::: calibration.calibrate` name the public names; the modules behind them
move as the code is refactored, so each is resolved to where it lives at build time (griffe, which mkdocstrings
uses, reads files and cannot follow the packages' lazy `__getattr__`)."""

from __future__ import annotations

import importlib
import inspect
import re

PUBLIC = re.compile(r"^::: ((?:judge|calibration)\.\w+)\s*$", re.MULTILINE)


def where(name: str) -> str:
    package, attribute = name.split(".", 1)
    try:
        obj = getattr(importlib.import_module(package), attribute)
    except AttributeError:  # judge.run is the module judge/run.py, whose function is run()
        obj = getattr(importlib.import_module(name), attribute)
    while inspect.ismodule(obj):  # a package or module of the verb's name (even a callable one): its function
        inner = getattr(obj, attribute, None)
        obj = inner if inner is not None else importlib.import_module(f"{obj.__name__}.{attribute}")
    return f"{obj.__module__}.{obj.__qualname__}"


def on_page_markdown(markdown: str, page, config, files) -> str:
    return PUBLIC.sub(lambda match: f"::: {where(match.group(1))}", markdown)
