"""The public records of one release and the checks on what enters them (paper Figure 2).

:class:`SlotPlan` (the public plan of a slot: C2, C4), :class:`PreparedSlot` (after the C5
check and the scoring, before the C3 draw), :class:`SlotRelease` and :class:`Release` (what
leaves: C6), the operator-side :class:`ScorerFailure`; and the checks that
:class:`~dpmv_lib.core.memview.MemView` applies to a history, a scorer value and a budget
rule's eps, the C3 selector's log probabilities, and MemView's memo of plans and generic
releases (:class:`PlanMemo`). MemView imports them from here; this module is their one home.

C3, exactly: Eq. (7) (and likewise permute-and-flip) is eps-DP only if |u_M(v) - u_M'(v)| <= Du
holds for the numbers the sampler really uses. Utilities are therefore kept as exact rationals
from the scorer to the sampler (the lexicon scorer returns ``Fraction``s; a float is read through
its exact binary value, :func:`checked_utility`), Du is the policy's exact bound, and the exact
sampler decides with rationals only; the float path rounds only the shifted exponents
eps*(u - u_max)/(2 Du). So the bound is met exactly, not up to rounding (in floats
0.4*0 + 0.4*1 + 0.2*1 = 0.6000000000000001 > 3/5 = Du).

C5, fail-closed scoring: the prospective check charges the slot before the scorer runs, from the
public plan only. If the scorer then fails for any view of the slot (raises, returns a non-number,
NaN/inf, or a value outside [0, 1]), every utility of the slot is replaced by the constant 1/2
(:data:`FAILSAFE_UTILITY`): the slot releases a uniformly random view of V_g, with exactly the
public fields of any admitted release (the selector's mechanism tag, the planned charge and eps;
permute-and-flip accepts the first view it visits, also uniform). Nothing is raised and the
ledger moves as planned, so whether the call errors or the ledger moves cannot depend on memory;
the failure is recorded only in the operator-side list ``MemView.scorer_failures`` (never in a
Release). Privacy: 1/2 lies within 1/2 <= Du of every valid utility in [0, 1], so the sanitised
scorer keeps sensitivity Du and the release stays eps-DP for every policy with Du >= 1/2 (all
shipped policies: 3/5 or 1; for Du < 1/2 the bound is eps/(2 Du)). Releasing the fixed generic
view instead would not be DP: probability 1 on the failing store against as little as
e^(-eps/(2 Du))/|V_g| on its neighbour.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import BudgetError, QueryTypeError, short_repr
from .policy import Policy, Query, View
from .selection import Selector, em_log_probabilities, em_probabilities, pf_log_probabilities, pf_probabilities


@dataclass(frozen=True)
class SlotRelease:
    """What one slot-level operation releases (all public).

    ``mechanism`` is "em" (sampled by Eq. 7), "pf" (permute-and-flip), "generic" (fixed generic view: empty read,
    unplanned charge or failed cap check) or, in ablations only, "argmax"."""

    slot: str
    view: str
    read_set: tuple[int, ...]
    affected: frozenset[str]
    charged: frozenset[str]
    epsilon: Fraction
    mechanism: str
    fallback: bool = False
    extras: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Release:
    """One turn of the augmented transcript, minus the response: q_t, v_t and public ledger state."""

    query: Query
    slots: tuple[SlotRelease, ...]
    ledger: tuple[tuple[str, Fraction], ...]

    @property
    def views(self) -> dict[str, str]:
        return {s.slot: s.view for s in self.slots}

    @property
    def spent(self) -> dict[str, Fraction]:
        return dict(self.ledger)

    def guidance(self, policy: Policy) -> list[str]:
        """The view texts the response model receives (post-processing input, C6)."""
        return [policy.view(s.view).text for s in self.slots]

    def public_dict(self) -> dict[str, Any]:
        return {"query": {"text": self.query.text, "intent": self.query.intent},
                "slots": [{"slot": s.slot, "view": s.view, "read_set": list(s.read_set),
                           "affected": sorted(s.affected), "charged": sorted(s.charged),
                           "epsilon": str(s.epsilon), "mechanism": s.mechanism,
                           "fallback": s.fallback, **dict(s.extras)} for s in self.slots],
                "ledger": {a: str(v) for a, v in self.ledger}}


def check_history(history: Any) -> tuple[Release, ...]:
    """The released history h must be a sequence of Release objects (QueryTypeError otherwise)."""
    if isinstance(history, (str, bytes)) or not hasattr(history, "__iter__"):
        raise QueryTypeError(f"history must be a sequence of Release objects, got {type(history).__name__}")
    h = tuple(history)
    for r in h:
        if not isinstance(r, Release):
            raise QueryTypeError(f"history must contain only Release objects, got {type(r).__name__}")
    return h


@dataclass(frozen=True)
class SlotPlan:
    """The public part of a slot-level operation: identical under adjacent stores given h (C4)."""

    slot: str
    read_set: tuple[int, ...]
    affected: frozenset[str]
    charged: frozenset[str]
    epsilon: Fraction | None


#: C5 fail-closed: the utility of every view of a slot whose scorer failed (uniform release).
FAILSAFE_UTILITY = Fraction(1, 2)


@dataclass(frozen=True)
class ScorerFailure:
    """Operator-side record of one fail-closed slot (private: never part of a Release)."""

    slot: str
    view: str
    reason: str


@dataclass(frozen=True)
class PreparedSlot:
    """One slot-level operation after the C5 check and the scoring, before the C3 draw
    (:meth:`MemView.prepare`). ``admitted`` is False for an empty read, an unplanned charge
    (no eps) or a failed cap check: the slot then releases its fixed generic view at zero cost
    and ``views``/``utilities`` are empty. Otherwise ``views`` is the public vocabulary V_g (C1)
    and ``utilities`` the exact rationals in [0, 1] the selector uses (C3; the constant 1/2 for
    every view after a scorer failure, C5 fail-closed). Trusted side: the utilities depend on
    memory and never leave the interface."""

    plan: SlotPlan
    admitted: bool
    views: tuple[View, ...] = ()
    utilities: tuple[Fraction, ...] = ()  # exact rationals in [0, 1] (C3)

    @property
    def epsilon(self) -> Fraction:
        """The planned eps_{t,g} of an admitted slot (C4: :meth:`MemView.prepare` admits only a
        plan with an eps)."""
        eps = self.plan.epsilon
        assert eps is not None, "an admitted slot has a planned eps"
        return eps


def checked_utility(value: Any) -> Fraction | None:
    """A scorer value as an exact rational in [0, 1] (floats through their exact binary value);
    None if it is not a finite number in [0, 1] (C5 fail-closed)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, Fraction):
        u = value
    elif isinstance(value, (int, np.integer)):
        u = Fraction(int(value))
    elif isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return None
        u = Fraction(float(value))
    else:
        return None
    return u if 0 <= u <= 1 else None


def checked_rule_epsilon(value: Any, rule: Any, slot: str, charged: frozenset[str]) -> Fraction | None:
    """The budget rule's eps_{t,g} for one slot as an exact rational > 0, or None (no eps: the
    slot falls back to the generic view at zero cost).

    C4 makes eps_{t,g} a public function of Gamma and the caps, and C5 compares L_a + eps with
    B_a exactly; both need the very rational the ledger is charged, so a rule must return an
    exact rational: an ``int`` (not ``bool``), a :class:`~fractions.Fraction` or another
    :class:`numbers.Rational` (e.g. a numpy integer). A float is refused even when exactly
    representable (0.1 would mean either its binary value or 1/10), and so is a numeric string
    such as ``"1/2"``: nothing converts a rule's output, so ``SlotRelease.epsilon`` is always
    the Fraction that was charged.

    Raises
    ------
    BudgetError
        If ``value`` is not None and not an exact rational > 0; the message names the rule, the
        slot, the charge set and the value. MemView plans every slot of a turn before it charges
        any, so the ledger is unchanged when this is raised.
    """
    if value is None or (type(value) is Fraction and value.numerator > 0):
        return value
    if isinstance(value, Rational) and not isinstance(value, bool):
        try:
            eps = Fraction(int(value.numerator), int(value.denominator))
        except (TypeError, ValueError, ZeroDivisionError):
            eps = None
        if eps is not None and eps > 0:
            return eps
        problem = "must be > 0"
    else:
        problem = "must be an exact rational (int or fractions.Fraction) or None"
    raise BudgetError(f"budget rule {type(rule).__name__} returned eps = {short_repr(value)} "
                      f"({type(value).__name__}) for slot {slot!r} with charge set {sorted(charged)}: "
                      f"eps_(t,g) {problem}; nothing was charged")


def selector_log_probabilities(selector: Selector, utilities: Sequence[Fraction], epsilon: Fraction,
                               sensitivity: Fraction) -> list[float]:
    """log Pr[v] of the C3 selector (Eq. (7) or permute-and-flip) for every view, in log space,
    so that a probability below the float range (large eps) keeps a finite log; -inf only for
    a probability that is exactly 0 (an exponent below the float range; a custom selector's 0).

    Eq. (7): :func:`~dpmv_lib.core.selection.em_log_probabilities` (exact exponents, then a
    log-sum-exp). Permute-and-flip: :func:`~dpmv_lib.core.selection.pf_log_probabilities`
    (x_r + log S_r, S_r in [1/n, 1]). Any other selector: the log of its float probabilities.

    Raises
    ------
    ParameterError
        If the utilities are not exact numbers in [0, 1] or eps / Du are invalid (as for the
        selector itself).
    """
    if selector.probabilities is em_probabilities:
        return [float(x) for x in em_log_probabilities(utilities, epsilon, sensitivity)]
    if selector.probabilities is pf_probabilities:
        return pf_log_probabilities(utilities, epsilon, sensitivity)
    probs = selector.probabilities(utilities, epsilon, sensitivity)
    return [math.log(p) if p > 0 else -math.inf for p in map(float, probs)]


class PlanMemo:
    """What MemView computes once per (policy, budget): eps per charge set (C4), and, when
    ``pure``, the plan per (slot, R) and the generic release per shared plan."""

    __slots__ = ("policy", "budget", "pure", "plain", "eps", "plans", "generic")

    def __init__(self, policy: Any, budget: Any, pure: bool = False, plain: bool = False) -> None:
        self.policy, self.budget, self.pure = policy, budget, pure
        self.plain = plain  # pure, and prepare, select and _generic are MemView's own
        self.eps: dict[frozenset[str], Fraction | None] = {}
        self.plans: dict[tuple[str, tuple[int, ...]], SlotPlan] = {}
        self.generic: dict[int, tuple[SlotPlan, SlotRelease]] = {}  # id(plan) -> (plan, release)

    def generic_of(self, plan: SlotPlan) -> SlotRelease | None:
        """The shared generic release of a shared ``plan``, once built (the entry holds the plan:
        its id is not reused while the entry is there)."""
        hit = self.generic.get(id(plan))
        return hit[1] if hit is not None and hit[0] is plan else None
