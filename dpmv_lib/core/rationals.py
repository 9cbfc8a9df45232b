"""Exact rational helpers shared by the ledger, the policy and the selectors: reading numbers as
``Fraction``s, bounded rationals for caps B_a and the sensitivity Du, and their text form."""
from __future__ import annotations

import math
import re
from fractions import Fraction
from numbers import Rational
from typing import Any, cast

from .errors import ParameterError, PolicyError, short_repr, type_error_for

Number = int | float | str | Fraction

MAX_RATIONAL = 10**6
"""Largest cap B_a or sensitivity bound (anything larger is no privacy guarantee at all)."""
MAX_DENOMINATOR = 10**18
"""Largest denominator of a cap or sensitivity in lowest terms (18 decimal places)."""


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


_DECIMAL = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*")
_RATIO = re.compile(r"\s*[+-]?\d+\s*/\s*[+-]?\d+\s*")


def parse_rational(x: Any, what: str, *, error: type[Exception] = PolicyError) -> Fraction:
    """A cap B_a or sensitivity bound as an exact, finite, positive rational.

    Accepts an int, a ``Fraction``, a decimal string ("0.6", "1e-3"), a ratio string ("2/3"),
    or a finite float read through its shortest decimal repr (0.1 -> 1/10, as in the JSON
    text). Rejects bool, NaN, inf, values <= 0 or > ``MAX_RATIONAL``, denominators over
    ``MAX_DENOMINATOR`` and any other string (at most 100 characters, exponents checked
    before any big-number arithmetic).

    Parameters
    ----------
    x : int, Fraction, float or str
        The value.
    what : str
        What it is, for the message (e.g. "cap B_a of attribute 'debt'").
    error : type, optional
        The domain error class (default :class:`PolicyError`).

    Returns
    -------
    Fraction
        In (0, ``MAX_RATIONAL``].

    Raises
    ------
    PolicyTypeError
        (``type_error_for(error)``) If ``x`` is not a number (bool, None, a list, ...).
    PolicyError
        (``error``) If ``x`` is not finite, not a valid number, <= 0, over ``MAX_RATIONAL`` or
        too fine.
    """
    if isinstance(x, bool):
        raise type_error_for(error)(f"{what} must be a number, got bool {x!r}")
    if isinstance(x, float):
        if not math.isfinite(x):
            raise error(f"{what} must be finite, got {x!r}")
        out = Fraction(repr(x))
    elif isinstance(x, Rational):
        out = Fraction(cast(int, x.numerator), cast(int, x.denominator))  # Integral (typeshed: _IntegralLike)
    elif isinstance(x, str):
        m = _DECIMAL.fullmatch(x) if len(x) <= 100 else None
        if m is None and len(x) <= 100 and _RATIO.fullmatch(x):
            num, den = (int(t) for t in x.split("/"))
            if den == 0:
                raise error(f"{what} is not a valid number: {x!r} (zero denominator)")
            out = Fraction(num, den)
        elif m is None:
            raise error(f"{what} is not a valid number: {short_repr(x)} (want an integer, a decimal like "
                        f"'0.6' or a ratio like '2/3')")
        elif m.group(1) is not None and abs(int(m.group(1))) > 40:
            raise error(f"{what} is out of range: {x!r} (want 0 < value <= {MAX_RATIONAL})")
        else:
            out = Fraction(x.strip())
    else:
        raise type_error_for(error)(f"{what} must be an int, float, Fraction or numeric string, "
                                    f"got {type(x).__name__}")
    if out <= 0:
        raise error(f"{what} must be > 0, got {short_repr(x)}")
    if out > MAX_RATIONAL:
        raise error(f"{what} is out of range: {short_repr(x)} (want 0 < value <= {MAX_RATIONAL})")
    if out.denominator > MAX_DENOMINATOR:
        raise error(f"{what} is too fine: {short_repr(x)} has denominator {out.denominator} > {MAX_DENOMINATOR}")
    return out
