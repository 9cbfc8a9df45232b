"""Per-attribute privacy ledgers (exact arithmetic) and the per-selection budget rules.

C5: before a charged selection with local parameter eps and charge set Gamma, check
L_a + eps <= B_a for EVERY a in Gamma; if any check fails, release the fixed generic view at zero
cost and leave all ledgers unchanged; otherwise add eps to every L_a, a in Gamma. Hence
L_a <= B_a on every execution path. Values are ``fractions.Fraction``: three charges of 2/3 fill
a cap of 2 exactly.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable as IterableABC, Mapping as MappingABC
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ._exact import Number, to_fraction
from .errors import BudgetError, UnknownAttributeError
from .policy import Policy, Query
from .policy_format import short_repr


@dataclass(frozen=True)
class ChargeRecord:
    """One audit-log entry: a prospective charge and whether it was admitted."""

    attributes: frozenset[str]
    epsilon: Fraction
    admitted: bool
    remaining: tuple[tuple[str, Fraction], ...] = ()


@runtime_checkable
class Ledger(Protocol):
    """What MemView needs from a ledger backend. ``try_charge`` is the atomic C5 step."""

    @property
    def caps(self) -> Mapping[str, Fraction]: ...

    def spent(self) -> dict[str, Fraction]: ...

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool: ...

    def charge_unchecked(self, attributes: frozenset[str], epsilon: Fraction) -> None: ...


def check_charge_args(caps: Mapping[str, Fraction], attributes: object, epsilon: object
                      ) -> tuple[frozenset[str], Fraction]:
    """Validate a prospective charge before anything changes (typed errors, no side effects);
    shared by every ledger backend."""
    if (type(attributes) is frozenset and type(epsilon) is Fraction and epsilon.numerator >= 0
            and attributes.issubset(caps) and all(type(a) is str for a in attributes)):
        return attributes, epsilon      # already exact and valid (MemView's plan): no re-parsing
    if isinstance(attributes, (str, bytes)) or not isinstance(attributes, IterableABC):
        raise BudgetError(f"attributes must be a collection of attribute names, got {attributes!r}")
    try:
        attrs = frozenset(attributes)
    except TypeError:
        raise BudgetError(f"attributes must be hashable attribute names, got {attributes!r}") from None
    for a in attrs:
        if not isinstance(a, str) or a not in caps:
            raise UnknownAttributeError(f"ledger has no attribute {a!r}; it tracks {sorted(caps)}")
    eps = to_fraction(epsilon, "epsilon", nonnegative=True, error=BudgetError)
    return attrs, eps


class InMemoryLedger:
    """Exact in-process ledger (thread-safe). ``log`` is the operator-visible audit log."""

    def __init__(self, caps: Mapping[str, Number], spent: Mapping[str, Number] | None = None) -> None:
        if not isinstance(caps, MappingABC) or not caps:
            raise BudgetError(f"a ledger needs at least one attribute cap (a mapping attribute -> cap), got {caps!r}")
        if spent is not None and not isinstance(spent, MappingABC):
            raise BudgetError(f"spent must be a mapping attribute -> spent budget, got {spent!r}")
        bad = [a for a in caps if not isinstance(a, str)]
        if bad:
            raise BudgetError(f"attribute names must be strings, got {bad[0]!r}")
        self._caps = {a: to_fraction(b, f"cap of {a!r}", positive=True, error=BudgetError)
                      for a, b in caps.items()}
        self._spent = {a: Fraction(0) for a in self._caps}
        for a, v in (spent or {}).items():
            self._require(a)
            self._spent[a] = to_fraction(v, f"spent budget of {a!r}", nonnegative=True, error=BudgetError)
        self._lock = threading.Lock()
        self.log: list[ChargeRecord] = []

    @classmethod
    def for_policy(cls, policy: Policy) -> "InMemoryLedger":
        return cls(policy.caps)

    @property
    def caps(self) -> dict[str, Fraction]:
        return dict(self._caps)

    def spent(self) -> dict[str, Fraction]:
        with self._lock:
            return dict(self._spent)

    def remaining(self) -> dict[str, Fraction]:
        with self._lock:
            return {a: self._caps[a] - self._spent[a] for a in self._caps}

    def _require(self, a: str) -> None:
        if not isinstance(a, str) or a not in self._caps:
            raise UnknownAttributeError(f"ledger has no attribute {a!r}; it tracks {sorted(self._caps)}")

    def _check_args(self, attributes: Iterable[str], epsilon: Fraction) -> tuple[frozenset[str], Fraction]:
        return check_charge_args(self._caps, attributes, epsilon)

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool:
        """C5: admit iff L_a + eps <= B_a for every a in ``attributes``; then charge all of them."""
        attrs, eps = self._check_args(attributes, epsilon)
        with self._lock:
            ok = all(self._spent[a] + eps <= self._caps[a] for a in attrs)
            if ok:
                for a in attrs:
                    self._spent[a] += eps
            self.log.append(ChargeRecord(attrs, eps, ok, tuple(
                (a, self._caps[a] - self._spent[a]) for a in sorted(attrs))))
            return ok

    def charge_unchecked(self, attributes: frozenset[str], epsilon: Fraction) -> None:
        """Charge without the prospective check. Only the NoCap ablation (violates C5) uses this."""
        attrs, eps = self._check_args(attributes, epsilon)
        with self._lock:
            for a in attrs:
                self._spent[a] += eps
            self.log.append(ChargeRecord(attrs, eps, True, tuple(
                (a, self._caps[a] - self._spent[a]) for a in sorted(attrs))))

    def copy(self) -> "InMemoryLedger":
        out = InMemoryLedger(self._caps, self.spent())
        out.log = list(self.log)
        return out

    def __repr__(self) -> str:
        s = ", ".join(f"{a}: {self._spent[a]}/{self._caps[a]}" for a in sorted(self._caps))
        return f"InMemoryLedger({s})"


# ---- budget rules ---------------------------------------------------------------------------
MAX_CHARGES = 10**9
"""Largest K (online) or C_a (preallocated): keeps every eps_{t,g} = B_a / K a printable rational."""


class BudgetRule(Protocol):
    """Maps a charge set Gamma and caps to the local parameter eps_{t,g} (public, C4)."""

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction | None: ...


@dataclass(frozen=True)
class OnlineBudget:
    """Online mode: eps_{t,g} = min_{a in Gamma} B_a / K (K equal charges per budget)."""

    K: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.K, bool) or not isinstance(self.K, int) or not 1 <= self.K <= MAX_CHARGES:
            raise BudgetError(f"online budget granularity K must be an integer in [1, {MAX_CHARGES}], "
                              f"got {short_repr(self.K)}")

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction:
        attrs = charge_set or frozenset(caps)
        return min(c if type(c) is Fraction else Fraction(c) for c in map(caps.__getitem__, attrs)) / self.K


@dataclass(frozen=True)
class PreallocatedBudget:
    """Preallocated mode: eps_{t,g} = min_{a in Gamma} B_a / C_a, C_a = planned charged selections.

    An attribute with C_a = 0 was not planned to be charged: such a selection gets no epsilon
    (None) and falls back to the generic view at zero cost."""

    planned: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.planned, MappingABC):
            raise BudgetError(f"planned charge counts must be a mapping attribute -> C_a, got {short_repr(self.planned)}")
        for a, c in self.planned.items():
            if not isinstance(a, str) or not a.strip():
                raise BudgetError(f"planned charge counts are keyed by attribute names (non-empty strings), "
                                  f"got {short_repr(a)}")
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CHARGES:
                raise BudgetError(f"planned charge count C_{a} must be an integer in [0, {MAX_CHARGES}], "
                                  f"got {short_repr(c)}")
        object.__setattr__(self, "planned", dict(self.planned))

    def check_attributes(self, caps: Mapping[str, Fraction]) -> None:
        """Every planned C_a must name an attribute of the policy (no silently ignored names)."""
        unknown = sorted(a for a in self.planned if a not in caps)
        if unknown:
            raise UnknownAttributeError(f"PreallocatedBudget plans charges for unknown attributes {unknown}; "
                                        f"the policy has {sorted(caps)}")

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction | None:
        self.check_attributes(caps)
        attrs = charge_set or frozenset(a for a in caps if self.planned.get(a, 0) > 0)
        if not attrs:
            return None
        if any(self.planned.get(a, 0) == 0 for a in attrs):
            return None
        return min(Fraction(caps[a]) / self.planned[a] for a in attrs)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.planned.items())))


def planned_charges(policy: Policy, queries: Sequence[Query]) -> dict[str, int]:
    """C_a: how many selections along a fixed (non-adaptive) query plan touch I_a.

    Uses only the public policy (routes and reads with an empty history)."""
    counts = {a: 0 for a in policy.attribute_names}
    for q in queries:
        for slot in policy.route(q, ()):
            for a in policy.charge_set(policy.read(q, slot, ())):
                counts[a] += 1
    return counts
