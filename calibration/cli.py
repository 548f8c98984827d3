"""The command hub: every `judge` verb of calibration/ registers here, and `judge/cli.py` imports calibration/ only
through this module. Each family keeps its own parser in its `cli.py`, with `register(subparsers)`; none may import
pandas, scipy or matplotlib at module level, as every `judge` command builds the whole parser."""

from __future__ import annotations

from importlib import import_module

# In the order `judge --help` lists them.
FAMILY_CLIS = ("calibration.calibrate.cli", "calibration.study.cli", "calibration.trust.cli", "calibration.cascade.cli",
               "calibration.tune.cli")


def register(sub) -> None:
    """Add every calibration verb to the `judge` subparsers `sub`."""
    for module in FAMILY_CLIS:
        import_module(module).register(sub)
