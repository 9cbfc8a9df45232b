"""MemView: the trusted DP-MemView interface (paper Figure 2, Appendix A).

Per turn: route the public query to ordered active slots (C4); per slot read the policy's
positions, charge every attribute whose group the read touches (C2), check every ledger
prospectively (C5), and either sample a public view with the exponential mechanism (C1, C3)
or return the slot's fixed generic view at zero cost. Only public things leave: the view per
slot, which attributes were charged and at what eps, and the public ledger state (C3, C6).

Theorem 1: under C1-C6 the whole adaptive augmented transcript is pure B_a-DP for each a.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Sequence

import numpy as np

from ._exact import to_fraction
from .errors import BudgetError, ParameterError, PolicyError, QueryError, StoreError
from .ledger import BudgetRule, InMemoryLedger, Ledger, OnlineBudget
from .mechanism import (RandomSource, SeededRandomSource, SystemRandomSource, em_probabilities,
                        sample_em, sample_em_exact)
from .policy import Policy, Query, View
from .scorer import LexiconScorer, Scorer
from .store import MemoryStore


@dataclass(frozen=True)
class SlotRelease:
    """What one slot-level operation releases (all public).

    ``mechanism`` is "em" (sampled by Eq. 7), "generic" (fixed generic view: empty read,
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


@dataclass
class _Prepared:
    plan: SlotPlan
    admitted: bool
    views: tuple[View, ...] = ()
    utilities: np.ndarray = field(default_factory=lambda: np.zeros(0))


class MemView:
    """The DP-MemView interface over one user's store.

    >>> mv = MemView(policy, store, budget=OnlineBudget(K=3), seed=0)
    >>> rel = mv.release(Query("Any ideas for an affordable dinner?", "affordable_dinner"))
    >>> rel.views, rel.spent

    ``exact=True`` (default) samples with the exact rational sampler; ``seed=None`` draws from
    the OS (deployment), an int makes runs reproducible (experiments). ``ledger`` may be any
    :class:`~dpmv_lib.ledger.Ledger` backend (e.g. a durable one); its caps must equal the policy's.
    """

    label: ClassVar[str] = "DP-MemView"
    violates: ClassVar[str | None] = None  # contract condition a variant breaks (None = compliant)

    def __init__(self, policy: Policy, store: MemoryStore, *, budget: BudgetRule | None = None,
                 ledger: Ledger | None = None, scorer: Scorer | None = None, exact: bool = True,
                 seed: int | None = None, random_source: RandomSource | None = None) -> None:
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
        plans = [self.plan(query, slot, history) for slot in self._route(query, history)]
        out = [self._sample(self._prepare(query, p.slot, history, p)) for p in plans]
        return self._make_release(query, out)

    def plan(self, query: Query, slot: str, history: Sequence[Release] = ()) -> SlotPlan:
        """Read set R, affected Gamma*(R), charge set Gamma and eps for one slot (C2, C4)."""
        if not isinstance(query, Query):
            raise QueryError(f"plan() needs a Query, got {type(query).__name__}")
        if not isinstance(slot, str):
            raise QueryError(f"plan() needs a slot name, got {type(slot).__name__}")
        read = self.policy.read(query, slot, _check_history(history))
        affected = self.policy.charge_set(read)
        charged = self._charge_set(affected)
        eps = self.budget.epsilon(charged, self.policy.caps) if read else None
        return SlotPlan(slot, read, affected, charged, eps)

    def fork(self) -> "MemView":
        """A copy with an independent copy of the ledger (for exact enumeration and checkers)."""
        other = copy.copy(self)
        if not isinstance(self.ledger, InMemoryLedger):
            raise BudgetError("fork() needs an in-memory ledger")
        other.ledger = self.ledger.copy()
        return other

    # ---- the slot-level operation ------------------------------------------------------------
    def _prepare(self, query: Query, slot: str, history: tuple[Release, ...],
                 plan: SlotPlan | None = None) -> _Prepared:
        plan = plan if plan is not None else self.plan(query, slot, history)
        if plan.epsilon is None:
            return _Prepared(plan, False)
        if not self._admit(plan.charged, plan.epsilon):  # C5: commit before anything is sampled
            return _Prepared(plan, False)
        views = self._vocabulary(slot)
        contents = self._store.read(plan.read_set)
        u = np.array([float(self._scorer(query, v, contents)) for v in views])
        if np.any(~np.isfinite(u)) or np.any(u < 0) or np.any(u > 1):
            raise BudgetError(f"scorer returned utilities outside [0, 1] for slot {slot!r}")
        return _Prepared(plan, True, views, u)

    def _generic(self, prep: _Prepared) -> SlotRelease:
        p = prep.plan
        return SlotRelease(p.slot, self.policy.slot(p.slot).generic.id, p.read_set, p.affected,
                           frozenset(), Fraction(0), "generic", fallback=bool(p.read_set))

    def _released(self, prep: _Prepared, view_id: str, mechanism: str, extras=()) -> SlotRelease:
        p = prep.plan
        return SlotRelease(p.slot, view_id, p.read_set, p.affected, p.charged, p.epsilon,
                           mechanism, False, tuple(extras))

    def _sample(self, prep: _Prepared) -> SlotRelease:
        if not prep.admitted:
            return self._generic(prep)
        i = self._draw(prep.utilities, prep.plan.epsilon)
        return self._released(prep, prep.views[i].id, "em", self._extras(prep))

    def _outcomes(self, prep: _Prepared) -> list[tuple[SlotRelease, float]]:
        """Every possible SlotRelease of this operation with its exact probability (for checks)."""
        if not prep.admitted:
            return [(self._generic(prep), 1.0)]
        probs = em_probabilities(prep.utilities, float(prep.plan.epsilon), float(self.policy.sensitivity))
        return [(self._released(prep, v.id, "em", self._extras(prep)), float(p))
                for v, p in zip(prep.views, probs)]

    def _draw(self, utilities: np.ndarray, epsilon: Fraction) -> int:
        if self.exact:
            return sample_em_exact(list(utilities), epsilon, self.policy.sensitivity, self._source)
        return sample_em(utilities, float(epsilon), float(self.policy.sensitivity), self._rng)

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
        """C5: prospective cap check and ledger update (atomic in the ledger backend)."""
        if not charged:
            return True
        return self.ledger.try_charge(charged, epsilon)

    def _extras(self, prep: _Prepared) -> tuple[tuple[str, Any], ...]:
        """C3/C6: nothing but the view leaves the interface."""
        return ()
