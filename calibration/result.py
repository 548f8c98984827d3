"""What every statistics function returns (calibrate, screen, estimate, audit, drift, select), and the one CLI
layer over them: tables as DataFrames on the result; `files()` the exact --output-dir files, `text()` what the
CLI prints, `report_html()` its HTML section; `write()` and `report()` replace only files this tool wrote.
"""

from __future__ import annotations

import html
import math
import sys
from pathlib import Path
from typing import Any, Callable, ClassVar

# -- options: what each flag must be, in one wording for the CLI's argparse types and the functions' errors --------

POSITIVE = "a positive whole number"
WHOLE = "a whole number"
RESAMPLES = "0 (no bootstrap) or a positive number of resamples"
AT_LEAST_100 = "a whole number of at least 100"
SHARE = "between 0 and 1"
NUMBER = "a number"
POINTS = "a positive number of score points"
THRESHOLD = "a share between 0 and 1, e.g. 0.1"
SCALE = "MIN,MAX with MIN < MAX, e.g. 1,5"
CRITERIA = "a comma-separated list of criteria, e.g. coherence,fluency"


def must_be(flag: str, what: str, value: Any) -> str:
    """The one message for a bad option: `--budget must be a positive whole number, got 2.5`."""
    return f"{flag} must be {what}, got {value!r}"


def _whole(text: str) -> int:
    return int(text)


def _number(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(text)
    return number


def flag_type(what: str, convert: Callable[[str], Any] = _number,
              ok: Callable[[Any], bool] = lambda value: True) -> Callable[[str], Any]:
    """An argparse type: `convert` the text and accept it when `ok`, else argparse.ArgumentTypeError with the
    functions' wording (argparse names the flag: `argument --budget: must be a positive whole number, got '2.5'`),
    never `invalid _positive value`. A range the function checks itself may be left out of `ok`: its error then
    comes from the function, word for word the same."""
    import argparse

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except (TypeError, ValueError):
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = what  # read by argparse only if an error escaped; `what` is the user-facing text anyway
    return parse


whole_type = flag_type(WHOLE, _whole)
positive_type = flag_type(POSITIVE, _whole, lambda n: n >= 1)
share_type = flag_type(SHARE, ok=lambda x: 0.0 <= x <= 1.0)


def _split(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def criteria_option(criteria) -> list[str] | None:
    """--criteria as the functions take it: None (all), a list of names, or 'a,b' split on commas as the CLI does.
    Anything else, or no name at all, is a CalibrationError with the CLI's wording."""
    from .errors import CalibrationError

    if criteria is None:
        return None
    if isinstance(criteria, str):
        names = _split(criteria)
    elif isinstance(criteria, (list, tuple, set, frozenset)) and all(isinstance(c, str) for c in criteria):
        names = [c.strip() for c in criteria if c.strip()]
    else:
        names = []
    if not names:
        raise CalibrationError(must_be("--criteria", CRITERIA, criteria))
    return list(dict.fromkeys(names))


def _scale_pair(scale) -> tuple[float, float] | None:
    """(MIN, MAX) from 'MIN,MAX' or two real numbers with MIN < MAX, both finite; None when it is not one."""
    if isinstance(scale, str):
        parts = scale.split(",")
        try:
            values = [float(part) for part in parts]
        except ValueError:
            return None
    else:
        try:
            values = list(scale)
        except TypeError:
            return None
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) or _is_numpy_real(v) for v in values):
            return None
        values = [float(v) for v in values]
    if len(values) != 2 or not all(math.isfinite(v) for v in values) or not values[0] < values[1]:
        return None
    return values[0], values[1]


def _is_numpy_real(value) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, (numpy.integer, numpy.floating))


def scale_option(scale) -> tuple[float, float] | None:
    """--scale as the functions take it: None, two numbers (MIN, MAX) or 'MIN,MAX'; else a CalibrationError with the
    CLI's wording."""
    from .errors import CalibrationError

    if scale is None:
        return None
    pair = _scale_pair(scale)
    if pair is None:
        raise CalibrationError(must_be("--scale", SCALE, scale))
    return pair


def _scale_text(text: str) -> tuple[float, float]:
    pair = _scale_pair(text)
    if pair is None:
        raise ValueError(text)
    return pair


def _criteria_text(text: str) -> list[str]:
    names = _split(text)
    if not names:
        raise ValueError(text)
    return names


scale_type = flag_type(SCALE, _scale_text)
criteria_type = flag_type(CRITERIA, _criteria_text)


class Result:
    verb: ClassVar[str]  # the CLI verb: names the writer of its files and the page title
    warnings: list[str]

    def files(self) -> dict[str, str]:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    def report_html(self) -> str:
        """The report's HTML section (matplotlib is imported only here)."""
        raise NotImplementedError

    def page(self) -> str:
        """The self-contained report page: the section, its plots embedded as data URIs."""
        from .report import STYLE

        title = html.escape(f"Judge {self.verb}")
        return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
                f"<style>{STYLE}</style></head><body><h1>{title}</h1>{self.report_html()}</body></html>")

    def check_output_dir(self, output_dir, inputs=()) -> None:
        """Refuse, before anything is written, a folder where one of `files()` is not ours (or is an input)."""
        from judge.outputs import check_folder

        check_folder(output_dir, self.files(), inputs=inputs)

    def write(self, output_dir, inputs=()) -> list[Path]:
        """Write `files()` into `output_dir`; returns the files replaced (written by an earlier run)."""
        from judge.outputs import write_folder

        self.check_output_dir(output_dir, inputs)
        return write_folder(output_dir, self.files(), verb=self.verb, inputs=inputs)

    def report(self, path, inputs=()) -> list[Path]:
        """Write the report page to `path` (a new file, or one this tool wrote); returns the files replaced."""
        from judge.outputs import write_files

        return write_files({Path(path): self.page()}, verb=self.verb, inputs=inputs)

    def __str__(self) -> str:
        return self.text()


def run_verb(verb: str, compute: Callable[[], Result], *, output_dir, report, inputs,
             exit_code: Callable[[Result], int] = lambda result: 0,
             footer: Callable[[Result], str] | None = None) -> int:
    """The CLI of a statistics verb: every output path checked before any is written, then the tables and the
    report, then what the verb prints (and `footer` on stderr); one line and exit 2 on bad input."""
    from judge.errors import JudgeError
    from judge.outputs import check_writable

    inputs = [p for p in inputs if p]
    try:
        if report:
            check_writable(report, inputs=inputs, what="--report", page=True)  # before a long computation, not after
        result = compute()
        if output_dir:
            result.check_output_dir(output_dir, inputs)
        page = result.page() if report else None
        replaced = result.write(output_dir, inputs) if output_dir else []
        if page is not None:
            from judge.outputs import write_files

            replaced += write_files({Path(report): page}, verb=verb, inputs=inputs)
    except JudgeError as exc:  # CalibrationError and OutputError are JudgeErrors
        print(f"judge {verb}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"judge {verb}: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(result.text(), end="")
    for warning in result.warnings:
        print(f"judge {verb}: warning: {warning}", file=sys.stderr)
    if replaced:
        print(f"replaced (written by an earlier run): {', '.join(map(str, replaced))}", file=sys.stderr)
    if footer is not None:
        print(footer(result), file=sys.stderr)
    return exit_code(result)
