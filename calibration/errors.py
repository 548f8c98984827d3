"""The one exception the calibration package raises for bad input."""

from __future__ import annotations


class CalibrationError(Exception):
    """Bad input or an impossible request; the message says which file, line/column and what is wrong."""
