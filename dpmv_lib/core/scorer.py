"""The view scorer u = 0.4 r(q, v) + 0.4 c(v; M_R) + 0.2 s(v; M_R) in [0, 1] (C.5).

r depends on the public query only; c and s on the read memory text. Hence for adjacent stores
|u_M(v) - u_M'(v)| <= 0.4 |c_M - c_M'| + 0.2 |s_M - s_M'| <= 0.6 = Du (the fixed sensitivity).
The scorer runs only inside the trusted interface; its values never leave it (C3).

Exactness: weights and components are ``Fraction``s, so u is an exact rational and the bound
above holds exactly (in floats 0.4*0 + 0.4*1 + 0.2*1 = 0.6000000000000001 > 3/5, which would make
each release eps*(1 + 1.5e-16)-DP instead of eps-DP).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Protocol, Sequence

from .rationals import to_fraction
from .errors import ParameterError, ParameterTypeError
from .policy import Query, View


class Scorer(Protocol):
    """u(q, v; M_R) in [0, 1] with a fixed sensitivity bound ``sensitivity`` (Du).

    Return an exact ``Fraction`` (or int) where possible; a float is read through its exact
    binary value, so |u_M - u_M'| <= Du must hold for the floats actually returned. A failing
    call (exception, NaN/inf, value outside [0, 1]) is handled fail-closed by MemView (C5)."""

    sensitivity: Fraction

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> Fraction | float: ...


@lru_cache(maxsize=4096)
def _cue_pattern(cue: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(cue.lower()) + r"\b")


def cue_hits(cues: Sequence[str], text: str) -> int:
    """How many of the cue phrases occur in ``text`` (case-insensitive, whole words)."""
    if isinstance(cues, tuple):
        return _cue_hits_cached(cues, text)
    low = text.lower()
    return sum(1 for c in cues if _cue_pattern(c).search(low))


@lru_cache(maxsize=1 << 17)
def _cue_hits_cached(cues: tuple[str, ...], text: str) -> int:
    """Memoised :func:`cue_hits` for a view's (immutable) cue tuple: benchmark stores repeat texts."""
    low = text.lower()
    return sum(1 for c in cues if _cue_pattern(c).search(low))


@dataclass(frozen=True)
class LexiconScorer:
    """The paper's scorer with lexicon components:

    * r(q, v) = 1 if the query's public intent is one the view serves, ``generic_r`` for the
      generic view, else 0 (query only);
    * c(v; M_R) = share of read items that contain a cue of v (coverage);
    * s(v; M_R) = min(1, cue hits over the read text / ``saturation``) (strength).
    The generic view gets the store-independent constants ``generic_c`` and ``generic_s``.

    Weights and constants are exact rationals (floats/strings given are read through their
    shortest repr: 0.4 -> 2/5); u is returned as an exact ``Fraction``, so
    |u_M(v) - u_M'(v)| <= w_c + w_s = ``sensitivity`` holds exactly.

    Raises
    ------
    ParameterTypeError
        If a weight or constant is not a number, or ``saturation`` is not an integer.
    ParameterError
        If a weight or constant is negative or not finite, a generic constant is over 1, or
        ``saturation`` < 1."""

    w_r: Fraction = Fraction(2, 5)
    w_c: Fraction = Fraction(2, 5)
    w_s: Fraction = Fraction(1, 5)
    generic_r: Fraction = Fraction(1, 2)
    generic_c: Fraction = Fraction(1, 2)
    generic_s: Fraction = Fraction(1, 2)
    saturation: int = 2

    def __post_init__(self) -> None:
        for name in ("w_r", "w_c", "w_s", "generic_r", "generic_c", "generic_s"):
            x = to_fraction(getattr(self, name), f"LexiconScorer.{name}", nonnegative=True)
            if name.startswith("generic") and x > 1:
                raise ParameterError(f"LexiconScorer.{name} must lie in [0, 1], got {x}")
            object.__setattr__(self, name, x)
        if isinstance(self.saturation, bool) or not isinstance(self.saturation, int):
            raise ParameterTypeError(f"LexiconScorer.saturation must be an integer >= 1, got {self.saturation!r}")
        if self.saturation < 1:
            raise ParameterError(f"LexiconScorer.saturation must be an integer >= 1, got {self.saturation!r}")

    @property
    def sensitivity(self) -> Fraction:
        """Du = w_c + w_s, exact (r is query-only; clamping to [0, 1] is 1-Lipschitz)."""
        return self.w_c + self.w_s

    def components(self, query: Query, view: View,
                   read_contents: Sequence[str]) -> tuple[Fraction, Fraction, Fraction]:
        """(r, c, s) as exact rationals in [0, 1]."""
        if view.generic:
            return self.generic_r, self.generic_c, self.generic_s
        r = Fraction(1) if query.intent in view.intents else Fraction(0)
        if not read_contents or not view.cues:
            return r, Fraction(0), Fraction(0)
        hits = [cue_hits(view.cues, t) for t in read_contents]
        c = Fraction(sum(1 for h in hits if h > 0), len(read_contents))
        s = min(Fraction(1), Fraction(sum(hits), self.saturation))
        return r, c, s

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> Fraction:
        if view.generic:
            return _combine(self.w_r, self.w_c, self.w_s, self.generic_r, self.generic_c, self.generic_s)
        r = Fraction(1) if query.intent in view.intents else Fraction(0)
        if not read_contents or not view.cues:
            return _combine(self.w_r, self.w_c, self.w_s, r, Fraction(0), Fraction(0))
        hits = [cue_hits(view.cues, t) for t in read_contents]
        k, n, h = sum(1 for x in hits if x > 0), len(read_contents), min(sum(hits), self.saturation)
        return _combine_counts(self.w_r, self.w_c, self.w_s, r, k, n, h, self.saturation)


@lru_cache(maxsize=1 << 14)
def _combine(w_r: Fraction, w_c: Fraction, w_s: Fraction, r: Fraction, c: Fraction, s: Fraction) -> Fraction:
    """u = clamp_[0,1](w_r r + w_c c + w_s s), exact (memoised: few distinct component values)."""
    return min(Fraction(1), max(Fraction(0), w_r * r + w_c * c + w_s * s))


@lru_cache(maxsize=1 << 14)
def _combine_counts(w_r: Fraction, w_c: Fraction, w_s: Fraction, r: Fraction, k: int, n: int, h: int,
                    saturation: int) -> Fraction:
    """:func:`_combine` with c = k/n and s = h/saturation (h already capped at saturation)."""
    return _combine(w_r, w_c, w_s, r, Fraction(k, n), Fraction(h, saturation))
