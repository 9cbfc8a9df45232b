"""Exact rational helpers shared by ledger, policy and mechanism."""
from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational

from .errors import ParameterError, type_error_for

Number = int | float | str | Fraction


def to_fraction(value: object, what: str, *, positive: bool = False, nonnegative: bool = False,
                error: type[Exception] = ParameterError) -> Fraction:
    """Convert to an exact Fraction. Floats are read through their shortest repr
    (0.1 -> 1/10), strings like "2/3" or "0.6" exactly; bool, NaN and inf are rejected.

    A value of the wrong type (bool, None, a list, ...) raises ``type_error_for(error)``
    (e.g. :class:`~dpmv_lib.core.errors.BudgetTypeError` for ``BudgetError``), a bad value
    ``error``."""
    if isinstance(value, bool):
        raise type_error_for(error)(f"{what} must be a number, got bool {value!r}")
    try:
        if isinstance(value, Rational):
            out = Fraction(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise error(f"{what} must be finite, got {value!r}")
            out = Fraction(repr(value))
        elif isinstance(value, str):
            out = Fraction(value.strip())
        else:
            raise type_error_for(error)(f"{what} must be an int, float, Fraction or numeric string, "
                                        f"got {type(value).__name__}")
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        if isinstance(exc, error):
            raise
        raise error(f"{what} is not a valid number: {value!r}") from None
    if positive and out <= 0:
        raise error(f"{what} must be > 0, got {value!r}")
    if nonnegative and out < 0:
        raise error(f"{what} must be >= 0, got {value!r}")
    return out


def fraction_str(x: Fraction) -> str:
    """Stable text form of a Fraction ("2", "2/3")."""
    return str(Fraction(x))
