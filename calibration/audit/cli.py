"""`judge audit`, `judge drift` and `judge select`: the argument parsers and the thin CLI layer over
calibration.audit.audit, calibration.audit.drift and calibration.audit.select.

Nothing heavy is imported at module level: every `judge` command builds the whole parser.
"""

from __future__ import annotations


def register(sub) -> None:
    register_audit(sub)
    register_drift(sub)
    register_select(sub)


# -- audit ----------------------------------------------------------------------------------------------------------


def register_audit(sub) -> None:
    """`judge audit` (being built)."""


# -- drift ----------------------------------------------------------------------------------------------------------


def register_drift(sub) -> None:
    """`judge drift` (being built)."""


# -- select ---------------------------------------------------------------------------------------------------------


def register_select(sub) -> None:
    """`judge select` (being built)."""
