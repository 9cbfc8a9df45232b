"""Contract-VIOLATING variants of MemView for the RQ2 ablations (paper Table 4, Appendix B.5).

Each breaks exactly one condition of the interface contract and is marked by ``violates``, by
overriding one public step of :class:`~dpmv_lib.core.memview.MemView` (``charge_set``, ``select``
and ``outcomes``, ``admit``, ``extras``, ``vocabulary``). They exist to show what goes wrong;
never deploy them.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from ..core.memview import MemView
from ..core.releases import PreparedSlot, SlotRelease
from ..core.policy import View
from ..core.scorer import cue_hits


class IncompleteCharge(MemView):
    """VIOLATES C2: charges only one affected attribute: ``keep`` if affected (a name, or a
    sequence of names in priority order), else the first affected one in policy order."""

    label = "IncompleteCharge"
    violates = "C2"

    def __init__(self, *args: Any, keep: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep = keep

    def charge_set(self, affected: frozenset[str]) -> frozenset[str]:
        if len(affected) <= 1:
            return affected
        prefs = (self.keep,) if isinstance(self.keep, str) else tuple(self.keep or ())
        for a in prefs:
            if a in affected:
                return frozenset({a})
        first = next(a for a in self.policy.attribute_names if a in affected)
        return frozenset({first})


class CappedArgmax(MemView):
    """VIOLATES C3: releases the highest-scoring view deterministically (ledger and cap kept)."""

    label = "CappedArgmax"
    violates = "C3"

    def select(self, prepared: PreparedSlot) -> SlotRelease:
        if not prepared.admitted:
            return super().select(prepared)  # the generic view, as MemView
        p = prepared.plan
        best = int(np.argmax(np.asarray(prepared.utilities, dtype=object)))  # exact Fractions: an object array
        return SlotRelease(p.slot, prepared.views[best].id, p.read_set, p.affected, p.charged, prepared.epsilon,
                           "argmax")

    def outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        return [(self.select(prepared), 1.0)]


class NoCap(MemView):
    """VIOLATES C5: valid EM and complete charging, but no prospective cap check or fallback."""

    label = "NoCap"
    violates = "C5"

    def admit(self, charged: frozenset[str], epsilon: Fraction) -> bool:
        if charged:
            self.ledger.charge_unchecked(charged, epsilon)
        return True


class ScoreChannel(MemView):
    """VIOLATES C3/C6: also exposes the top internal score next to the (valid) EM view."""

    label = "ScoreChannel"
    violates = "C6"

    def extras(self, prepared: PreparedSlot) -> tuple[tuple[str, Any], ...]:
        return (("top_score", round(float(np.max(np.asarray(prepared.utilities, dtype=object))), 6)),)


class StoreDependentVocabulary(MemView):
    """VIOLATES C1: offers only the views that the user's own memory supports (plus the generic
    view), so the view support differs between adjacent stores."""

    label = "StoreDependentVocabulary"
    violates = "C1"

    def vocabulary(self, slot: str) -> tuple[View, ...]:
        text = " ".join(self.store.read(self.policy.positions_of(slot)))
        return tuple(v for v in self.policy.slot(slot).views if v.generic or cue_hits(v.cues, text) > 0)


VARIANTS: dict[str, type[MemView]] = {
    "DP-MemView": MemView,
    "IncompleteCharge": IncompleteCharge,
    "CappedArgmax": CappedArgmax,
    "NoCap": NoCap,
    "ScoreChannel": ScoreChannel,
    "StoreDependentVocabulary": StoreDependentVocabulary,
}


class MonotoneUtility(MemView):
    """VIOLATES C3 (a measurement device for the utility frontier, never a proposal): samples
    with exponent eps u / Du instead of Eq. (7)'s eps u / (2 Du), which is eps-DP only for a
    utility monotone in the store (the scorer's is not: a cue can raise one view and lower another)."""

    label = "MonotoneUtility"
    violates = "C3"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.draws = np.random.default_rng(kwargs.get("seed"))

    def select(self, prepared: PreparedSlot) -> SlotRelease:
        if not prepared.admitted:
            return super().select(prepared)
        outs = self.outcomes(prepared)
        w = np.array([p for _, p in outs])
        return outs[int(self.draws.choice(len(outs), p=w / w.sum()))][0]

    def outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        if not prepared.admitted:
            return super().outcomes(prepared)
        half = Fraction(self.policy.sensitivity) / 2
        probs = self.selector.probabilities(prepared.utilities, prepared.epsilon, half)
        p = prepared.plan
        return [(SlotRelease(p.slot, v.id, p.read_set, p.affected, p.charged, prepared.epsilon,
                             self.selector.name), float(q)) for v, q in zip(prepared.views, probs)]


class ChargeOncePerRead(MemView):
    """VIOLATES C2 (a measurement device for the utility frontier, never a proposal): a fresh
    Eq. (7) selection every time, but a (slot, read set) already charged is not charged again."""

    label = "ChargeOncePerRead"
    violates = "C2"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.charged_reads: set[tuple[str, tuple[int, ...]]] = set()

    def fork(self) -> MemView:
        other = super().fork()
        assert isinstance(other, ChargeOncePerRead)
        other.charged_reads = set(self.charged_reads)
        return other

    def prepare(self, query: Any, slot: str, history: Sequence[Any] = (), plan: Any = None,
                admitted: bool | None = None) -> PreparedSlot:
        if plan is None:
            plan = self.plan(query, slot, history)
        key = (plan.slot, plan.read_set)
        if plan.epsilon is not None and key in self.charged_reads:
            return super().prepare(query, slot, history, plan, True)
        prep = super().prepare(query, slot, history, plan, admitted)
        if prep.admitted and plan.epsilon is not None:
            self.charged_reads.add(key)
        return prep
