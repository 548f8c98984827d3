"""The one exception the calibration package raises for bad input: a `JudgeError`, the project's single root."""

from __future__ import annotations

from judge.errors import JudgeError


class CalibrationError(JudgeError):
    """Bad input or an impossible request; the message says which file, line/column and what is wrong."""
