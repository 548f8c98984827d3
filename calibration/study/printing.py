"""Printing the study tables on a terminal."""

from __future__ import annotations


# -- what `judge screen` prints ----------------------------------------------------------------------------------
def format_table(frame, float_format="{:.3f}") -> str:
    if frame.empty:
        return "  (none)"
    return frame.to_string(index=False, float_format=lambda v: float_format.format(v), na_rep="-")
