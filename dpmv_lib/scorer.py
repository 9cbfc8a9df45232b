"""The view scorer u = 0.4 r(q, v) + 0.4 c(v; M_R) + 0.2 s(v; M_R) in [0, 1] (C.5).

r depends on the public query only; c and s on the read memory text. Hence for adjacent stores
|u_M(v) - u_M'(v)| <= 0.4 |c_M - c_M'| + 0.2 |s_M - s_M'| <= 0.6 = Du (the fixed sensitivity).
The scorer runs only inside the trusted interface; its values never leave it (C3).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Protocol, Sequence

from .policy import Query, View


class Scorer(Protocol):
    """u(q, v; M_R) in [0, 1] with a fixed sensitivity bound ``sensitivity`` (Du)."""

    sensitivity: Fraction

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> float: ...


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
    The generic view gets the store-independent constants ``generic_c`` and ``generic_s``."""

    w_r: float = 0.4
    w_c: float = 0.4
    w_s: float = 0.2
    generic_r: float = 0.5
    generic_c: float = 0.5
    generic_s: float = 0.5
    saturation: int = 2

    @property
    def sensitivity(self) -> Fraction:
        return Fraction(repr(self.w_c)) + Fraction(repr(self.w_s))

    def components(self, query: Query, view: View, read_contents: Sequence[str]) -> tuple[float, float, float]:
        if view.generic:
            return self.generic_r, self.generic_c, self.generic_s
        r = 1.0 if query.intent in view.intents else 0.0
        if not read_contents or not view.cues:
            return r, 0.0, 0.0
        hits = [cue_hits(view.cues, t) for t in read_contents]
        c = sum(1 for h in hits if h > 0) / len(read_contents)
        s = min(1.0, sum(hits) / self.saturation)
        return r, c, s

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> float:
        r, c, s = self.components(query, view, read_contents)
        return min(1.0, max(0.0, self.w_r * r + self.w_c * c + self.w_s * s))
