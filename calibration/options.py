"""What each option of the statistics verbs must be, in one wording for the CLI's argparse types and the functions'
errors (`--budget must be a positive whole number, got 2.5`), and the normalising of `criteria` and `scale` that every
function applies to what a script passes."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

POSITIVE = "a positive whole number"
WHOLE = "a whole number"
RESAMPLES = "0 (no bootstrap) or a whole number of at least 40"
AT_LEAST_100 = "a whole number of at least 100"
SHARE = "between 0 and 1"
NUMBER = "a number"
POINTS = "a positive number of score points"
THRESHOLD = "a share between 0 and 1, e.g. 0.1"
SCALE = "MIN,MAX with MIN < MAX, e.g. 1,5"
CRITERIA = "a comma-separated list of criteria, e.g. coherence,fluency"
SEED = "a whole number of at least 0"


def must_be(flag: str, what: str, value: Any) -> str:
    """The one message for a bad option: `--budget must be a positive whole number, got 2.5`."""
    return f"{flag} must be {what}, got {value!r}"


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


whole_type = flag_type(WHOLE, int)
positive_type = flag_type(POSITIVE, int, lambda n: n >= 1)
share_type = flag_type(SHARE, ok=lambda x: 0.0 <= x <= 1.0)
# numpy's generators take no negative seed: refused here in words, never a traceback from inside numpy.
seed_type = flag_type(SEED, int, lambda n: n >= 0)


def resamples_option(n, confidence: float = 0.95, flag: str = "--bootstrap", allow_zero: bool = False,
                     floor: int = 40) -> int:
    """A bootstrap count as the functions take it: enough resamples that each tail of the printed interval is read
    from at least one of them (40 at 95%, 200 at 99%; `floor` at the least); 3 gave a '95%' interval that excluded
    its own estimate. 0 means no bootstrap where the verb has that choice (`allow_zero`)."""
    from .errors import CalibrationError

    least = max(floor, math.ceil(2 / (1 - confidence) - 1e-9)) if 0 < confidence < 1 else floor
    what = (f"0 (no bootstrap) or a whole number of at least {least}" if allow_zero else
            f"a whole number of at least {least}") + (f" at confidence {confidence:g}" if least > floor else "")
    whole = isinstance(n, numbers.Integral) and not isinstance(n, bool)
    if not whole or not (n >= least or (allow_zero and n == 0)):
        raise CalibrationError(must_be(flag, what, n))
    return int(n)


def failure_value_option(value) -> float | None:
    """--failure-value as the functions take it: None or a finite number."""
    from .errors import CalibrationError

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise CalibrationError(must_be("--failure-value", NUMBER, value))
    return float(value)


failure_value_type = flag_type(NUMBER)
FAILURE_HELP = "in a CSV of scores, the number that stands for a failed judgment (e.g. -1, 'unparsed'): a failure"


def seed_option(seed, flag: str = "--seed") -> int:
    """A seed as the functions take it: a whole number >= 0 (numpy's too); else a CalibrationError in the CLI's
    wording."""
    from .errors import CalibrationError

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise CalibrationError(must_be(flag, SEED, seed))
    return int(seed)


def judges_option(judges, verb: str, minimum: int, reserved: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """`--judge NAME=FILE` pairs (a dict or (name, source) pairs) checked: at least `minimum` judges, each NAME
    given once, not empty (spaces around it dropped) and none of the names `reserved` for the output's own rows."""
    from .errors import CalibrationError

    items = list(judges.items()) if isinstance(judges, dict) else list(judges)
    if len(items) < minimum:
        raise CalibrationError(f"{verb} needs at least {'one' if minimum == 1 else 'two'} --judge NAME=FILE"
                               + (" to compare" if minimum > 1 else ""))
    names = [str(name).strip() for name, _ in items]
    if any(not n for n in names):
        raise CalibrationError("--judge needs NAME=FILE with a non-empty NAME")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise CalibrationError(f"--judge name {repeated[0]!r} is given twice: give each judge its own NAME")
    if any(n in reserved for n in names):
        raise CalibrationError(f"--judge NAME may not be {' or '.join(map(repr, reserved))}: those name rows of "
                               "the output")
    return [(n, source) for n, (_, source) in zip(names, items)]


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
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):  # numpy's too
            return None
        values = [float(v) for v in values]
    if len(values) != 2 or not all(math.isfinite(v) for v in values) or not values[0] < values[1]:
        return None
    return values[0], values[1]


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


def judge_spec_type(value: str) -> tuple[str, str]:
    """The argparse type of `--judge NAME=FILE` (select, escalate, screen, estimate): (name, path), spaces around
    either dropped."""
    import argparse

    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {value!r}")
    return name.strip(), path.strip()
