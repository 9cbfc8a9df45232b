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

from .rationals import Number, to_fraction
from .errors import BudgetError, BudgetTypeError, PolicyTypeError, QueryTypeError, UnknownAttributeError, short_repr
from .policy import Policy, Query


@dataclass(frozen=True)
class ChargeRecord:
    """One audit-log entry: a prospective charge and whether it was admitted.

    Parameters
    ----------
    attributes : frozenset of str
        The charge set Gamma of the selection.
    epsilon : Fraction
        The requested eps.
    admitted : bool
        False when a cap blocked it (the generic view was released at zero cost, C5).
    remaining : tuple of (str, Fraction), optional
        B_a - L_a after the decision, for every a in ``attributes`` (sorted).
    """

    attributes: frozenset[str]
    epsilon: Fraction
    admitted: bool
    remaining: tuple[tuple[str, Fraction], ...] = ()


@runtime_checkable
class Ledger(Protocol):
    """What MemView needs from a ledger backend. ``try_charge`` is the atomic C5 step.

    Implemented by :class:`InMemoryLedger`, :class:`~dpmv_lib.ledgers.sqlite.SqliteLedger` and
    :class:`~dpmv_lib.ledgers.postgres.PostgresLedger`."""

    @property
    def caps(self) -> Mapping[str, Fraction]:
        """attribute -> cap B_a (exact)."""
        ...

    def spent(self) -> dict[str, Fraction]:
        """attribute -> L_a, the eps charged so far (exact)."""
        ...

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool:
        """C5, atomically: admit iff L_a + eps <= B_a for every a in ``attributes``, then charge all.

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma.
        epsilon : Fraction
            The selection's eps (>= 0).

        Returns
        -------
        bool
            True when admitted and charged; False when blocked (nothing charged).
        """
        ...

    def charge_unchecked(self, attributes: frozenset[str], epsilon: Fraction) -> None:
        """Charge without the prospective check (the NoCap ablation only: violates C5).

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma.
        epsilon : Fraction
            The selection's eps (>= 0).
        """
        ...


def check_charge_args(caps: Mapping[str, Fraction], attributes: object, epsilon: object
                      ) -> tuple[frozenset[str], Fraction]:
    """Validate a prospective charge before anything changes (typed errors, no side effects);
    shared by every ledger backend.

    Parameters
    ----------
    caps : Mapping of str to Fraction
        The ledger's caps (the attributes it tracks).
    attributes : collection of str
        The charge set Gamma (any iterable of names other than a string).
    epsilon : number
        eps >= 0 (int, ``Fraction``, finite float, numeric string).

    Returns
    -------
    (frozenset of str, Fraction)
        The charge set and eps as exact values.

    Raises
    ------
    BudgetTypeError
        If ``attributes`` is a string, not iterable or holds unhashable items, or ``epsilon`` is
        not a number.
    UnknownAttributeError
        If an attribute is not tracked by the ledger.
    BudgetError
        If ``epsilon`` is not a valid number, not finite or negative.
    """
    if (type(attributes) is frozenset and type(epsilon) is Fraction and epsilon.numerator >= 0
            and attributes.issubset(caps) and all(type(a) is str for a in attributes)):
        return attributes, epsilon      # already exact and valid (MemView's plan): no re-parsing
    if isinstance(attributes, (str, bytes)) or not isinstance(attributes, IterableABC):
        raise BudgetTypeError(f"attributes must be a collection of attribute names, got {attributes!r}")
    try:
        attrs = frozenset(attributes)
    except TypeError:
        raise BudgetTypeError(f"attributes must be hashable attribute names, got {attributes!r}") from None
    for a in attrs:
        if not isinstance(a, str) or a not in caps:
            raise UnknownAttributeError(f"ledger has no attribute {a!r}; it tracks {sorted(caps)}")
    eps = to_fraction(epsilon, "epsilon", nonnegative=True, error=BudgetError)
    return attrs, eps


class InMemoryLedger:
    """Exact in-process ledger (thread-safe). ``log`` is the operator-visible audit log.

    Implements :class:`Ledger`: L_a <= B_a on every path (C5), in exact rationals.

    Parameters
    ----------
    caps : Mapping of str to number
        attribute -> cap B_a > 0 (int, ``Fraction``, finite float, numeric string).
    spent : Mapping of str to number, optional
        attribute -> L_a to start from (default 0 for every attribute).

    Raises
    ------
    BudgetTypeError
        If ``caps`` or ``spent`` is not a mapping, an attribute name is not a string, or a cap
        or spent value is not a number.
    BudgetError
        If ``caps`` is empty, a cap is not finite or <= 0, or a spent value is negative.
    UnknownAttributeError
        If ``spent`` names an attribute without a cap.

    Examples
    --------
    >>> from fractions import Fraction
    >>> led = InMemoryLedger({"debt": 2})
    >>> [led.try_charge(frozenset({"debt"}), Fraction(2, 3)) for _ in range(4)]
    [True, True, True, False]
    >>> led.remaining()
    {'debt': Fraction(0, 1)}
    """

    def __init__(self, caps: Mapping[str, Number], spent: Mapping[str, Number] | None = None) -> None:
        if not isinstance(caps, MappingABC) or not caps:
            raise (BudgetError if isinstance(caps, MappingABC) else BudgetTypeError)(
                f"a ledger needs at least one attribute cap (a mapping attribute -> cap), got {caps!r}")
        if spent is not None and not isinstance(spent, MappingABC):
            raise BudgetTypeError(f"spent must be a mapping attribute -> spent budget, got {spent!r}")
        bad = [a for a in caps if not isinstance(a, str)]
        if bad:
            raise BudgetTypeError(f"attribute names must be strings, got {bad[0]!r}")
        if "" in caps:   # as Policy and the durable ledgers: a name is a non-empty string
            raise BudgetError("attribute names must be non-empty strings, got ''")
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
        """A fresh ledger (L_a = 0) with the policy's caps B_a.

        Parameters
        ----------
        policy : Policy
            The public policy.

        Returns
        -------
        InMemoryLedger

        Raises
        ------
        PolicyTypeError
            If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
        """
        if not isinstance(policy, Policy):
            raise PolicyTypeError(f"InMemoryLedger.for_policy needs a Policy, got {type(policy).__name__}")
        return cls(policy.caps)

    @property
    def caps(self) -> dict[str, Fraction]:
        """attribute -> cap B_a (a copy)."""
        return dict(self._caps)

    def spent(self) -> dict[str, Fraction]:
        """attribute -> L_a, the eps charged so far (a consistent copy)."""
        with self._lock:
            return dict(self._spent)

    def remaining(self) -> dict[str, Fraction]:
        """attribute -> B_a - L_a (a consistent snapshot)."""
        with self._lock:
            return {a: self._caps[a] - self._spent[a] for a in self._caps}

    def _require(self, a: str) -> None:
        if not isinstance(a, str) or a not in self._caps:
            raise UnknownAttributeError(f"ledger has no attribute {a!r}; it tracks {sorted(self._caps)}")

    def _check_args(self, attributes: Iterable[str], epsilon: Fraction) -> tuple[frozenset[str], Fraction]:
        return check_charge_args(self._caps, attributes, epsilon)

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool:
        """C5: admit iff L_a + eps <= B_a for every a in ``attributes``; then charge all of them.

        Blocked or admitted, the decision is appended to :attr:`log`.

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma (any collection of names).
        epsilon : Fraction or number
            The selection's eps >= 0.

        Returns
        -------
        bool
            True when admitted and charged to every a in Gamma; False when blocked (nothing
            charged: the caller releases the generic view at zero cost).

        Raises
        ------
        BudgetTypeError, UnknownAttributeError, BudgetError
            For a bad charge, as :func:`check_charge_args`; nothing changes.
        """
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
        """Charge without the prospective check. Only the NoCap ablation (violates C5) uses this.

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma.
        epsilon : Fraction or number
            The selection's eps >= 0.

        Raises
        ------
        BudgetTypeError, UnknownAttributeError, BudgetError
            For a bad charge, as :func:`check_charge_args`; nothing changes.
        """
        attrs, eps = self._check_args(attributes, epsilon)
        with self._lock:
            for a in attrs:
                self._spent[a] += eps
            self.log.append(ChargeRecord(attrs, eps, True, tuple(
                (a, self._caps[a] - self._spent[a]) for a in sorted(attrs))))

    def copy(self, *, log: bool = True) -> "InMemoryLedger":
        """An independent ledger with the same caps and spent budgets.

        Parameters
        ----------
        log : bool, optional
            Copy the operator-side audit log too (default); False starts the copy with an
            empty log (the exact checkers branch a ledger many times and read only ``spent()``).

        Returns
        -------
        InMemoryLedger
        """
        out = InMemoryLedger.__new__(InMemoryLedger)
        out._caps = self._caps                 # never mutated after construction: shared
        out._spent = dict(self._spent)
        out._lock = threading.Lock()
        out.log = list(self.log) if log else []
        return out

    def __repr__(self) -> str:
        s = ", ".join(f"{a}: {self._spent[a]}/{self._caps[a]}" for a in sorted(self._caps))
        return f"InMemoryLedger({s})"


# ---- budget rules ---------------------------------------------------------------------------
MAX_CHARGES = 10**9
"""Largest K (online) or C_a (preallocated): keeps every eps_{t,g} = B_a / K a printable rational."""


class BudgetRule(Protocol):
    """Maps a charge set Gamma and caps to the local parameter eps_{t,g} (public, C4)."""

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction | None:
        """eps_{t,g} for one selection (a function of public data only).

        Parameters
        ----------
        charge_set : frozenset of str
            Gamma*(R_{t,g}) (empty for a selection that touches no group).
        caps : Mapping of str to Fraction
            The caps B_a.

        Returns
        -------
        Fraction or None
            eps > 0, or None: no budget for this selection (generic view at zero cost).
        """
        ...


@dataclass(frozen=True)
class OnlineBudget:
    """Online mode: eps_{t,g} = min_{a in Gamma} B_a / K (K equal charges per budget).

    Parameters
    ----------
    K : int, optional
        Charges per budget, in [1, ``MAX_CHARGES``] (default 3).

    Raises
    ------
    BudgetTypeError
        If ``K`` is not an integer (bool included).
    BudgetError
        If ``K`` is outside [1, ``MAX_CHARGES``].

    Examples
    --------
    >>> from fractions import Fraction
    >>> OnlineBudget(3).epsilon(frozenset({"debt"}), {"debt": Fraction(2), "diabetes": Fraction(1)})
    Fraction(2, 3)
    """

    K: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.K, bool) or not isinstance(self.K, int) or not 1 <= self.K <= MAX_CHARGES:
            raise (BudgetTypeError if isinstance(self.K, bool) or not isinstance(self.K, int) else BudgetError)(
                f"online budget granularity K must be an integer in [1, {MAX_CHARGES}], got {short_repr(self.K)}")

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction:
        """eps_{t,g} = min_{a in Gamma} B_a / K (over all capped attributes when Gamma is empty).

        Parameters
        ----------
        charge_set : frozenset of str
            Gamma*(R_{t,g}).
        caps : Mapping of str to Fraction
            The caps B_a; must cover ``charge_set``.

        Returns
        -------
        Fraction

        Raises
        ------
        KeyError
            If ``charge_set`` names an attribute without a cap (MemView checks this first).
        """
        attrs = charge_set or frozenset(caps)
        return min(c if type(c) is Fraction else Fraction(c) for c in map(caps.__getitem__, attrs)) / self.K


@dataclass(frozen=True)
class PreallocatedBudget:
    """Preallocated mode: eps_{t,g} = min_{a in Gamma} B_a / C_a, C_a = planned charged selections.

    An attribute with C_a = 0 was not planned to be charged: such a selection gets no epsilon
    (None) and falls back to the generic view at zero cost.

    Parameters
    ----------
    planned : Mapping of str to int, optional
        attribute -> C_a in [0, ``MAX_CHARGES``], e.g. from :func:`planned_charges`.

    Raises
    ------
    BudgetTypeError
        If ``planned`` is not a mapping, a key is not a string or a count not an integer.
    BudgetError
        If a key is blank or a count outside [0, ``MAX_CHARGES``].
    """

    planned: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.planned, MappingABC):
            raise BudgetTypeError(f"planned charge counts must be a mapping attribute -> C_a, got "
                                  f"{short_repr(self.planned)}")
        for a, c in self.planned.items():
            if not isinstance(a, str) or not a.strip():
                raise (BudgetError if isinstance(a, str) else BudgetTypeError)(
                    f"planned charge counts are keyed by attribute names (non-empty strings), got {short_repr(a)}")
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CHARGES:
                raise (BudgetTypeError if isinstance(c, bool) or not isinstance(c, int) else BudgetError)(
                    f"planned charge count C_{a} must be an integer in [0, {MAX_CHARGES}], got {short_repr(c)}")
        object.__setattr__(self, "planned", dict(self.planned))

    def check_attributes(self, caps: Mapping[str, Fraction]) -> None:
        """Every planned C_a must name an attribute of the policy (no silently ignored names).

        Parameters
        ----------
        caps : Mapping of str to Fraction
            The policy's caps (its attributes).

        Raises
        ------
        UnknownAttributeError
            If ``planned`` names an attribute that ``caps`` lacks.
        """
        unknown = sorted(a for a in self.planned if a not in caps)
        if unknown:
            raise UnknownAttributeError(f"PreallocatedBudget plans charges for unknown attributes {unknown}; "
                                        f"the policy has {sorted(caps)}")

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction | None:
        """eps_{t,g} = min_{a in Gamma} B_a / C_a, or None when some a in Gamma has C_a = 0.

        Parameters
        ----------
        charge_set : frozenset of str
            Gamma*(R_{t,g}) (empty: every attribute with C_a > 0).
        caps : Mapping of str to Fraction
            The caps B_a.

        Returns
        -------
        Fraction or None
            None: the selection was not planned (generic view at zero cost).

        Raises
        ------
        UnknownAttributeError
            If ``planned`` names an attribute without a cap (:meth:`check_attributes`).
        """
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

    Uses only the public policy (routes and reads with an empty history).

    Parameters
    ----------
    policy : Policy
        The public policy.
    queries : sequence of Query
        The planned queries, in order.

    Returns
    -------
    dict of str to int
        attribute -> C_a (for :class:`PreallocatedBudget`).

    Raises
    ------
    PolicyTypeError
        If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
    QueryTypeError
        If ``queries`` is not an iterable of queries.
    QueryError, PolicyError
        If a query cannot be routed or read (see :meth:`~dpmv_lib.core.policy.Policy.route` and
        :meth:`~dpmv_lib.core.policy.Policy.read`).

    Examples
    --------
    >>> from dpmv_lib.checks.examples import running_example
    >>> planned_charges(running_example()[0], [Query("dinner?", "affordable_dinner")] * 2)
    {'diabetes': 2, 'debt': 4}
    """
    if not isinstance(policy, Policy):
        raise PolicyTypeError(f"planned_charges needs a Policy, got {type(policy).__name__}")
    if isinstance(queries, (str, bytes)) or not isinstance(queries, IterableABC):
        raise QueryTypeError(f"queries must be a sequence of Query objects, got {short_repr(queries)}")
    counts = {a: 0 for a in policy.attribute_names}
    for q in queries:
        for slot in policy.route(q, ()):
            for a in policy.charge_set(policy.read(q, slot, ())):
                counts[a] += 1
    return counts
