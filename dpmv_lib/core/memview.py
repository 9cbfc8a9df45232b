"""MemView: the trusted DP-MemView interface (paper Figure 2, Appendix A).

Per turn: route the public query to ordered active slots (C4); per slot read the policy's
positions, charge every attribute whose group the read touches (C2), check every ledger
prospectively (C5), and either sample a public view with an eps-DP selector (C1, C3; the
exponential mechanism of Eq. (7) by default, or permute-and-flip, :mod:`dpmv_lib.core.selection`)
or return the slot's fixed generic view at zero cost. Only public things leave: the view per
slot, which attributes were charged and at what eps, and the public ledger state (C3, C6).

Theorem 1: under C1-C6 the whole adaptive augmented transcript is pure B_a-DP for each a.

C3, generalised: the view is sampled by an eps-DP selector for utilities of sensitivity Du on the
shared vocabulary - Eq. (7) (``selector="em"``, default) or permute-and-flip (``selector="pf"``,
McKenna & Sheldon 2020: eps-DP with the same sensitivity, expected utility never below Eq. (7)'s).
Theorem 1's proof uses only this per-release eps-DP property, so it holds for either selector.

C3, exactly: Eq. (7) (and likewise permute-and-flip) is eps-DP only if |u_M(v) - u_M'(v)| <= Du holds for the numbers the sampler
really uses. Utilities are therefore kept as exact rationals from the scorer to the sampler (the
lexicon scorer returns ``Fraction``s; a float is read through its exact binary value), Du is the
policy's exact bound, and the exact sampler decides with rationals only; the float path rounds
only the shifted exponents eps*(u - u_max)/(2 Du). So the bound is met exactly, not up to
rounding (in floats 0.4*0 + 0.4*1 + 0.2*1 = 0.6000000000000001 > 3/5 = Du).

C5, fail-closed scoring: the prospective check charges the slot before the scorer runs, from the
public plan only. If the scorer then fails for any view of the slot (raises, returns a non-number,
NaN/inf, or a value outside [0, 1]), every utility of the slot is replaced by the constant 1/2:
the slot releases a uniformly random view of V_g, with exactly the public fields of any admitted
release (the selector's mechanism tag, the planned charge and eps; permute-and-flip accepts
the first view it visits, also uniform). Nothing is raised and the ledger moves as planned, so whether the call errors or the ledger moves cannot depend on memory; the failure is
recorded only in the operator-side list ``MemView.scorer_failures`` (never in a Release).
Privacy: 1/2 lies within 1/2 <= Du of every valid utility in [0, 1], so the sanitised scorer
keeps sensitivity Du and the release stays eps-DP for every policy with Du >= 1/2 (all shipped
policies: 3/5 or 1; for Du < 1/2 the bound is eps/(2 Du)). Releasing the fixed generic view
instead would not be DP: probability 1 on the failing store against as little as
e^(-eps/(2 Du))/|V_g| on its neighbour.
"""
from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Rational
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from ._exact import to_fraction
from ._memo import remember
from .errors import BudgetError, ParameterError, PolicyError, QueryError, StoreError
from .ledger import BudgetRule, InMemoryLedger, Ledger, OnlineBudget
from .mechanism import RandomSource, SeededRandomSource, SystemRandomSource, em_log_probabilities, em_probabilities
from .policy_format import short_repr
from .selection import Selector, get_selector, pf_log_probabilities, pf_probabilities
from .policy import Policy, Query, View
from .scorer import LexiconScorer, Scorer
from .store import MemoryStore


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


def _check_history(history: Any) -> tuple["Release", ...]:
    """The released history h must be a sequence of Release objects (typed error otherwise)."""
    if isinstance(history, (str, bytes)) or not hasattr(history, "__iter__"):
        raise QueryError(f"history must be a sequence of Release objects, got {type(history).__name__}")
    h = tuple(history)
    for r in h:
        if not isinstance(r, Release):
            raise QueryError(f"history must contain only Release objects, got {type(r).__name__}")
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
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScorerFailure:
    """Operator-side record of one fail-closed slot (private: never part of a Release)."""

    slot: str
    view: str
    reason: str


@dataclass
class _Prepared:
    plan: SlotPlan
    admitted: bool
    views: tuple[View, ...] = ()
    utilities: tuple[Fraction, ...] = ()  # exact rationals in [0, 1] (C3)


def _checked_utility(value: Any) -> Fraction | None:
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

    Eq. (7): :func:`~dpmv_lib.core.mechanism.em_log_probabilities` (exact exponents, then a
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


class _Memo:
    """What MemView computes once per (policy, budget): eps per charge set (C4), and, when
    ``pure``, the plan per (slot, R) and the generic release per shared plan."""

    __slots__ = ("policy", "budget", "pure", "plain", "eps", "plans", "generic")

    def __init__(self, policy: Any, budget: Any, pure: bool = False, plain: bool = False) -> None:
        self.policy, self.budget, self.pure = policy, budget, pure
        self.plain = plain  # pure, and _prepare, _sample and _generic are MemView's own
        self.eps: dict[frozenset[str], Fraction | None] = {}
        self.plans: dict[tuple[str, tuple[int, ...]], SlotPlan] = {}
        self.generic: dict[int, tuple[SlotPlan, SlotRelease]] = {}  # id(plan) -> (plan, release)

    def generic_of(self, plan: SlotPlan) -> SlotRelease | None:
        """The shared generic release of a shared ``plan``, once built (the entry holds the plan:
        its id is not reused while the entry is there)."""
        hit = self.generic.get(id(plan))
        return hit[1] if hit is not None and hit[0] is plan else None


_PURE_RULES = (OnlineBudget,)  # frozen, its eps a function of (Gamma, caps) only (PreallocatedBudget's
                               # planned counts are a dict a caller could still change)
_MISSING = object()
_NO_ATTRIBUTES: frozenset[str] = frozenset()
_ZERO = Fraction(0)


class MemView:
    """The DP-MemView interface over one user's store.

    >>> mv = MemView(policy, store, budget=OnlineBudget(K=3), seed=0)
    >>> rel = mv.release(Query("Any ideas for an affordable dinner?", "affordable_dinner"))
    >>> rel.views, rel.spent

    ``exact=True`` (default) samples with the exact rational sampler; ``seed=None`` draws from
    the OS (deployment), an int makes runs reproducible (experiments). ``selector`` is the C3
    eps-DP selector: "em" (Eq. 7, default), "pf" (permute-and-flip) or a
    :class:`~dpmv_lib.core.selection.Selector`. ``fixed_work`` picks a selector tag's exact
    sampler: True, the one whose work is fixed by the public (|V_g|, eps, Du) (its running time
    reveals nothing about the utilities: issue 29, ``benchmarks/results/timing_channel.md``);
    False, the earlier one (same law, running time depends on the utilities); None (default):
    True with OS randomness (deployment), False with a seed or a random source (experiments: the
    committed results reproduce). ``ledger`` may be any
    :class:`~dpmv_lib.core.ledger.Ledger` backend (e.g. a durable one); its caps must equal the policy's.
    A failing scorer never raises out of ``release()`` (C5 fail-closed, module docstring); its
    failures are listed, operator-side only, in ``scorer_failures``.
    """

    label: ClassVar[str] = "DP-MemView"
    violates: ClassVar[str | None] = None  # contract condition a variant breaks (None = compliant)

    def __init__(self, policy: Policy, store: MemoryStore, *, budget: BudgetRule | None = None,
                 ledger: Ledger | None = None, scorer: Scorer | None = None, exact: bool = True,
                 seed: int | None = None, random_source: RandomSource | None = None,
                 selector: str | Selector = "em", fixed_work: bool | None = None) -> None:
        if not isinstance(policy, Policy):
            raise PolicyError(f"MemView needs a Policy, got {type(policy).__name__}")
        if not isinstance(store, MemoryStore):
            raise StoreError(f"MemView needs a MemoryStore, got {type(store).__name__}")
        if budget is not None and not callable(getattr(budget, "epsilon", None)):
            raise BudgetError(f"budget must be a budget rule with an epsilon() method, got {budget!r}")
        if ledger is not None and not all(hasattr(ledger, m) for m in ("caps", "spent", "try_charge")):
            raise BudgetError(f"ledger must implement the Ledger protocol (caps, spent, try_charge), "
                              f"got {type(ledger).__name__}")
        if scorer is not None and not (callable(scorer) and hasattr(scorer, "sensitivity")):
            raise BudgetError(f"scorer must be callable with a 'sensitivity' bound, got {scorer!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise ParameterError(f"seed must be None (OS randomness) or an integer >= 0, got {seed!r}")
        if fixed_work is None:  # deployment (OS randomness): timing-safe; a seeded experiment: as before
            fixed_work = seed is None and random_source is None
        self.selector = get_selector(selector, bool(fixed_work))
        store.check_layout(policy)
        self.policy = policy
        self._store = store
        self.budget = budget if budget is not None else OnlineBudget(3)
        self.ledger = ledger if ledger is not None else InMemoryLedger.for_policy(policy)
        try:
            caps = {a: Fraction(b) for a, b in self.ledger.caps.items()}
        except (AttributeError, TypeError, ValueError):
            raise BudgetError(f"ledger caps must be a mapping attribute -> exact cap, got "
                              f"{getattr(self.ledger, 'caps', None)!r}") from None
        if caps != policy.caps:
            raise BudgetError(f"ledger caps {caps} do not match the policy caps {policy.caps}")
        self._scorer = scorer if scorer is not None else LexiconScorer()
        sens = to_fraction(self._scorer.sensitivity, "scorer sensitivity", positive=True, error=BudgetError)
        if sens > policy.sensitivity:
            raise BudgetError(f"scorer sensitivity {self._scorer.sensitivity} exceeds the policy's "
                              f"fixed bound {policy.sensitivity}")
        self.exact = exact
        self._memo: _Memo = _Memo(None, None)
        self.scorer_failures: list[ScorerFailure] = []  # operator-side log (C5 fail-closed)
        self._rng = np.random.default_rng(seed)
        if random_source is not None:
            self._source = random_source
        else:
            self._source = SeededRandomSource(seed) if seed is not None else SystemRandomSource()

    # ---- public API --------------------------------------------------------------------------
    def release(self, query: Query, history: Sequence[Release] = ()) -> Release:
        """Release the view tuple for one turn given the public released history."""
        if not isinstance(query, Query):
            raise QueryError(f"release() needs a Query, got {type(query).__name__}")
        history = _check_history(history)
        # every slot's public plan is validated before anything is charged
        plans = [self._plan(query, slot, history) for slot in self._route(query, history)]
        batch = self._admit_batch(plans)
        if batch is None:
            out = [self._sample(self._prepare(query, p.slot, history, p)) for p in plans]
            return self._make_release(query, out)
        admitted, spent = batch
        plain = self._memo.plain  # (current: _plan refreshed it)
        out = []
        for p, ok in zip(plans, admitted):
            # a blocked or empty slot: what _sample(_prepare(...)) returns, when already built
            shared = self._memo.generic_of(p) if plain and not (ok and p.epsilon is not None) else None
            out.append(shared if shared is not None else self._sample(self._prepare(query, p.slot, history, p, ok)))
        return Release(query, tuple(out), tuple(sorted(spent.items())))

    def plan(self, query: Query, slot: str, history: Sequence[Release] = ()) -> SlotPlan:
        """Read set R, affected Gamma*(R), charge set Gamma and eps for one slot (C2, C4)."""
        if not isinstance(query, Query):
            raise QueryError(f"plan() needs a Query, got {type(query).__name__}")
        if not isinstance(slot, str):
            raise QueryError(f"plan() needs a slot name, got {type(slot).__name__}")
        return self._plan(query, slot, _check_history(history))

    def _plan(self, query: Query, slot: str, history: tuple[Release, ...]) -> SlotPlan:
        """``plan`` for checked arguments. The plan is a function of (slot, R) alone when the
        charge set is MemView's own (C2) and the budget rule is pure: it is then built once per
        (slot, R) and shared, and so is the slot's generic release (see ``_generic``)."""
        read = self.policy.read(query, slot, history)
        memo = self._memos()
        got = memo.plans.get((slot, read)) if memo.pure else None  # (unhashable: charge_set raises too)
        if got is not None:
            return got
        affected = self.policy.charge_set(read)
        charged = self._charge_set(affected)
        eps = checked_rule_epsilon(self._epsilon(charged), self.budget, slot, charged) if read else None
        out = SlotPlan(slot, read, affected, charged, eps)
        if memo.pure and all(type(i) is int for i in read):
            remember(memo.plans, (slot, read), out, 1024)
        return out

    def _epsilon(self, charged: frozenset[str]) -> Fraction | None:
        """eps_{t,g} of the budget rule (C4: a public function of Gamma and the caps), computed
        once per charge set for OnlineBudget (frozen: B_a / K); any other rule is asked every
        time."""
        policy, budget = self.policy, self.budget
        if type(budget) not in _PURE_RULES:
            return budget.epsilon(charged, policy.caps)
        memo = self._memos().eps
        eps = memo.get(charged, _MISSING)
        if eps is _MISSING:
            eps = memo[charged] = budget.epsilon(charged, policy.caps)
        return eps

    def _memos(self) -> "_Memo":
        """The memo of the current (policy, budget) pair (a new one when either was replaced)."""
        memo = self._memo
        if memo.policy is not self.policy or memo.budget is not self.budget:
            cls = type(self)
            pure = (type(self.budget) in _PURE_RULES and cls._charge_set is MemView._charge_set
                    and cls._epsilon is MemView._epsilon)
            memo = self._memo = _Memo(self.policy, self.budget, pure, pure and all(
                getattr(cls, m) is getattr(MemView, m) for m in ("_prepare", "_sample", "_generic")))
        return memo

    def fork(self) -> "MemView":
        """A copy with an independent copy of the ledger (for exact enumeration and checkers)."""
        other = copy.copy(self)
        if not isinstance(self.ledger, InMemoryLedger):
            raise BudgetError("fork() needs an in-memory ledger")
        other.ledger = self.ledger.copy()
        other.scorer_failures = list(self.scorer_failures)
        return other

    # ---- the slot-level operation ------------------------------------------------------------
    def _prepare(self, query: Query, slot: str, history: tuple[Release, ...],
                 plan: SlotPlan | None = None, admitted: bool | None = None) -> _Prepared:
        plan = plan if plan is not None else self.plan(query, slot, history)
        if plan.epsilon is None:
            return _Prepared(plan, False)
        if admitted is None:
            admitted = self._admit(plan.charged, plan.epsilon)  # C5: commit before anything is sampled
        if not admitted:
            return _Prepared(plan, False)
        views = self._vocabulary(slot)
        contents = self._store.read(plan.read_set)
        return _Prepared(plan, True, views, self._utilities(query, slot, views, contents))

    def _utilities(self, query: Query, slot: str, views: tuple[View, ...],
                   contents: Sequence[str]) -> tuple[Fraction, ...]:
        """Exact utilities of the slot's views (C3); fail-closed on any scorer failure (C5, see
        the module docstring): the slot's utilities become the constant 1/2, nothing is raised."""
        out = []
        for v in views:
            try:
                value = self._scorer(query, v, contents)
            except Exception as exc:  # a failure may depend on memory: never let it out
                return self._failed(slot, v, f"raised {type(exc).__name__}", len(views))
            u = _checked_utility(value)
            if u is None:
                return self._failed(slot, v, f"returned a non-finite or out-of-range value of type "
                                             f"{type(value).__name__}", len(views))
            out.append(u)
        return tuple(out)

    def _failed(self, slot: str, view: View, reason: str, n: int) -> tuple[Fraction, ...]:
        self.scorer_failures.append(ScorerFailure(slot, view.id, reason))
        _log.warning("scorer failed on slot %r (view %r: %s); slot released uniformly over V_g",
                     slot, view.id, reason)
        return (FAILSAFE_UTILITY,) * n

    def _generic(self, prep: _Prepared) -> SlotRelease:
        p = prep.plan
        memo = self._memos()
        out = memo.generic_of(p) if memo.pure else None  # (a shared plan: its generic release too)
        if out is None:
            out = SlotRelease(p.slot, self.policy.slot(p.slot).generic.id, p.read_set, p.affected,
                              _NO_ATTRIBUTES, _ZERO, "generic", fallback=bool(p.read_set))
            if memo.pure:
                remember(memo.generic, id(p), (p, out), 1024)
        return out

    def _released(self, prep: _Prepared, view_id: str, mechanism: str, extras=()) -> SlotRelease:
        p = prep.plan
        return SlotRelease(p.slot, view_id, p.read_set, p.affected, p.charged, p.epsilon,
                           mechanism, False, tuple(extras))

    def _sample(self, prep: _Prepared) -> SlotRelease:
        if not prep.admitted:
            return self._generic(prep)
        i = self._draw(prep.utilities, prep.plan.epsilon)
        return self._released(prep, prep.views[i].id, self.selector.name, self._extras(prep))

    def _outcomes(self, prep: _Prepared) -> list[tuple[SlotRelease, float]]:
        """Every possible SlotRelease of this operation with its exact probability (for checks)."""
        if not prep.admitted:
            return [(self._generic(prep), 1.0)]
        probs = self.selector.probabilities(prep.utilities, prep.plan.epsilon, self.policy.sensitivity)
        return [(self._released(prep, v.id, self.selector.name, self._extras(prep)), float(p))
                for v, p in zip(prep.views, probs)]

    def _log_outcomes(self, prep: _Prepared) -> list[tuple[SlotRelease, float]]:
        """Every SlotRelease of this operation with positive probability, with its natural-log
        probability (for the exact enumerators: a probability below the float range keeps a
        finite log, :func:`selector_log_probabilities`). A class that overrides ``_outcomes``
        is read through its floats (log p for every p > 0), so its own distribution is used."""
        if type(self)._outcomes is not MemView._outcomes:
            return [(sr, math.log(p)) for sr, p in self._outcomes(prep) if p > 0]
        if not prep.admitted:
            return [(self._generic(prep), 0.0)]
        logp = selector_log_probabilities(self.selector, prep.utilities, prep.plan.epsilon, self.policy.sensitivity)
        return [(self._released(prep, v.id, self.selector.name, self._extras(prep)), lp)
                for v, lp in zip(prep.views, logp) if lp > -math.inf]

    def _draw(self, utilities: Sequence[Fraction], epsilon: Fraction) -> int:
        if self.exact:
            return self.selector.sample_exact(list(utilities), epsilon, self.policy.sensitivity, self._source)
        return self.selector.sample(list(utilities), epsilon, self.policy.sensitivity, self._rng)

    def _make_release(self, query: Query, slots: list[SlotRelease]) -> Release:
        return Release(query, tuple(slots), tuple(sorted(self.ledger.spent().items())))

    # ---- hooks the contract-violating variants override (see variants.py) ---------------------
    def _route(self, query: Query, history: tuple[Release, ...]) -> tuple[str, ...]:
        """C4: the ordered active slots G_t from the public query and released history only."""
        return self.policy.route(query, history)

    def _vocabulary(self, slot: str) -> tuple[View, ...]:
        """C1: the fixed public vocabulary V_g, shared by all stores."""
        return self.policy.slot(slot).views

    def _charge_set(self, affected: frozenset[str]) -> frozenset[str]:
        """C2: charge every affected attribute, Gamma = Gamma*(R)."""
        return affected

    def _admit(self, charged: frozenset[str], epsilon: Fraction) -> bool:
        """C5: prospective cap check and ledger update (atomic in the ledger backend), made from
        the public plan before the scorer runs; a later scorer failure fails closed (see above)."""
        if not charged:
            return True
        return self.ledger.try_charge(charged, epsilon)

    def _admit_batch(self, plans: Sequence[SlotPlan]
                     ) -> tuple[list[bool], Mapping[str, Fraction]] | None:
        """C5 for every charged slot of one release in ONE ledger transaction, before anything
        is sampled, when the ledger offers ``try_charge_many`` (the durable backends): the same
        decisions, in slot order, as one ``_admit`` per slot, plus L_a right after the commit.
        None (per-slot ``_admit``) for other ledgers and for variants that override ``_admit``."""
        many = getattr(self.ledger, "try_charge_many", None)
        if many is None or type(self)._admit is not MemView._admit:
            return None
        idx = [i for i, p in enumerate(plans) if p.epsilon is not None and p.charged]
        if not idx:
            return None
        decisions, spent = many([(plans[i].charged, plans[i].epsilon) for i in idx])
        admitted = [True] * len(plans)
        for i, ok in zip(idx, decisions):
            admitted[i] = ok
        return admitted, spent

    def _extras(self, prep: _Prepared) -> tuple[tuple[str, Any], ...]:
        """C3/C6: nothing but the view leaves the interface."""
        return ()
