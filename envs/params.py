"""Validation of constructor parameters, shared by the environments.

Each checker returns the value as a plain Python ``int``/``float`` or raises a
``ValueError`` whose message names the parameter, the allowed range and the
value received. ``bool`` (and ``np.bool_``) is never accepted as a number, and
real values must be finite (NaN and ±inf are rejected). :func:`check_known`
refuses parameters an environment does not take, listing the ones it does;
:func:`check_like_default` refuses a value of another kind than the parameter's
default (a string where a number is expected, ...).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def is_number(value: Any, integral: bool) -> bool:
    """Whether ``value`` is a number (an integer when ``integral``), never a bool.

    Args:
        value: the value to test.
        integral: accept only integers (Python or numpy).

    Returns:
        True for ``int``/``np.integer`` (and, unless ``integral``, ``float``/``np.floating``).
    """
    types = (int, np.integer) if integral else (int, float, np.integer, np.floating)
    return isinstance(value, types) and not isinstance(value, (bool, np.bool_))


def _fmt(x: float) -> str:
    """``0.0 -> '0'``, ``1e6 -> '1000000'``, ``0.5 -> '0.5'``, ``inf -> 'inf'``."""
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


def check_int(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    """Return ``int(value)`` if it is an integer with ``minimum <= value [<= maximum]``."""
    if not is_number(value, integral=True) or value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and <= {maximum}"
        raise ValueError(f"{name} must be an integer >= {minimum}{upper}, got {value!r}")
    return int(value)


def _in_interval(value: Any, low: float, high: float, low_open: bool, high_open: bool) -> bool:
    if not is_number(value, integral=False):
        return False
    v = float(value)
    return (math.isfinite(v) and (v > low if low_open else v >= low)
            and (v < high if high_open else v <= high))


def check_real(value: Any, name: str, low: float = -math.inf, high: float = math.inf,
               low_open: bool = False, high_open: bool = False) -> float:
    """Return ``float(value)`` if it is a finite number in the interval from ``low`` to ``high``.

    ``low_open``/``high_open`` exclude the corresponding end point. The message
    writes the interval with brackets, e.g. ``"(0, 1]"``; an infinite end is
    always shown open (``"[0, inf)"``) since only finite values are accepted.
    """
    if not _in_interval(value, low, high, low_open, high_open):
        left = "(" if low_open or math.isinf(low) else "["
        right = ")" if high_open or math.isinf(high) else "]"
        raise ValueError(f"{name} must be a finite number in {left}{_fmt(low)}, {_fmt(high)}{right}, got {value!r}")
    return float(value)


def check_prob(value: Any, name: str) -> float:
    """Return ``float(value)`` if it is a probability, i.e. a finite number in ``[0, 1]``."""
    if not _in_interval(value, 0.0, 1.0, False, False):
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


# A default's kind -> (does a value have it, how the message names it); bool before int (a bool is an int).
_KINDS = (
    (bool, lambda v: isinstance(v, (bool, np.bool_)), "true or false"),
    (int, lambda v: is_number(v, integral=True), "an integer"),
    (float, lambda v: is_number(v, integral=False), "a number"),
    (str, lambda v: isinstance(v, str), "a string"),
)


def check_like_default(value: Any, default: Any, name: str) -> None:
    """Refuses a value of another kind than a parameter's scalar default.

    An integer is accepted where the default is a float; a default that is not a bool,
    int, float or str (None, an array, a dict) accepts anything.

    Args:
        value: the value given.
        default: the parameter's default value.
        name: the parameter's name as the message shows it.

    Raises:
        ValueError: if ``default`` is a bool, int, float or str and ``value`` is not one
            of the same kind; the message names ``name``, the kind and the value.
    """
    for kind, has_kind, form in _KINDS:
        if isinstance(default, kind):
            if not has_kind(value):
                raise ValueError(f"{name} must be {form}, got {value!r}")
            return
