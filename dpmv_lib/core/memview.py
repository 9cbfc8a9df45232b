"""MemView: the trusted DP-MemView interface (paper Figure 2, Appendix A).

Per turn, in public steps that checks call and contract-violating variants override
(:mod:`dpmv_lib.checks.variants`): :meth:`~MemView.route` the public query to ordered active
slots (C4); per slot :meth:`~MemView.plan` the read of the policy's positions and charge every
attribute whose group it touches (C2, :meth:`~MemView.charge_set`); :meth:`~MemView.prepare`:
:meth:`~MemView.admit` against every ledger prospectively (C5), then score the fixed
:meth:`~MemView.vocabulary` (C1); :meth:`~MemView.select` a public view with an eps-DP selector
(C3; the exponential mechanism of Eq. (7) by default, or permute-and-flip,
:mod:`dpmv_lib.core.selection`) or the slot's fixed generic view at zero cost;
:meth:`~MemView.make_release`. Only public things leave: the view per slot, which attributes
were charged and at what eps, and the public ledger state (C3, C6; :meth:`~MemView.extras`).

Theorem 1: under C1-C6 the whole adaptive augmented transcript is pure B_a-DP for each a.

C3, generalised: the view is sampled by an eps-DP selector for utilities of sensitivity Du on the
shared vocabulary - Eq. (7) (``selector="em"``, default) or permute-and-flip (``selector="pf"``,
McKenna & Sheldon 2020: eps-DP with the same sensitivity, expected utility never below Eq. (7)'s).
Theorem 1's proof uses only this per-release eps-DP property, so it holds for either selector.

C3 exactly (utilities are exact rationals from the scorer to the sampler, so |u_M(v) - u_M'(v)|
<= Du holds for the numbers the sampler uses) and C5 fail-closed scoring (a failing scorer makes
its slot uniform over V_g at the planned charge; nothing is raised, the failure is listed only in
the operator-side ``MemView.scorer_failures``): see :mod:`dpmv_lib.core.releases`.
"""
from __future__ import annotations

import copy
import logging
import math
from fractions import Fraction
from typing import Any, ClassVar, Iterable, Mapping, Sequence, cast

import numpy as np

from .rationals import to_fraction
from .memo import remember
from .errors import (BudgetError, BudgetTypeError, ParameterError, ParameterTypeError, PolicyTypeError,
                     QueryTypeError, StoreTypeError)
from .ledger import BudgetRule, InMemoryLedger, Ledger, OnlineBudget
from .sampling import RandomSource, SeededRandomSource, SystemRandomSource
from .selection import Selector, get_selector
from .policy import Policy, Query, View
from .releases import (FAILSAFE_UTILITY, PlanMemo, PreparedSlot, Release, ScorerFailure, SlotPlan, SlotRelease,
                       check_history, checked_rule_epsilon, checked_utility, selector_log_probabilities)
from .scorer import LexiconScorer, Scorer
from .store import MemoryStore


_log = logging.getLogger(__name__)


_PURE_RULES = (OnlineBudget,)  # frozen, its eps a function of (Gamma, caps) only (PreallocatedBudget's
                               # planned counts are a dict a caller could still change)
_MISSING = object()
_NO_ATTRIBUTES: frozenset[str] = frozenset()
_ZERO = Fraction(0)


class MemView:
    """The DP-MemView interface over one user's store (paper Figure 2, Appendix A).

    >>> mv = MemView(policy, store, budget=OnlineBudget(K=3), seed=0)
    >>> rel = mv.release(Query("Any ideas for an affordable dinner?", "affordable_dinner"))
    >>> rel.views, rel.spent

    :meth:`release` runs the public steps :meth:`route`, :meth:`plan` (:meth:`charge_set`),
    :meth:`prepare` (:meth:`admit`, :meth:`vocabulary`), :meth:`select` (:meth:`extras`) and
    :meth:`make_release` (module docstring); :meth:`outcomes` and :meth:`log_outcomes` give the
    exact law of :meth:`select`, for checks. A failing scorer never raises out of
    :meth:`release` (C5 fail-closed); its failures are listed, operator-side only, in
    ``scorer_failures``.

    Parameters
    ----------
    policy : Policy
        The public policy (slots, positions, groups I_a, caps B_a, vocabularies V_g, router).
    store : MemoryStore
        The user's memory M (trusted side); its layout must match ``policy``.
    budget : BudgetRule, optional
        The public rule eps_{t,g} = f(Gamma, caps) (C4); default ``OnlineBudget(3)``.
    ledger : Ledger, optional
        Any :class:`~dpmv_lib.core.ledger.Ledger` backend (e.g. a durable one) with the policy's
        caps; default a fresh :class:`~dpmv_lib.core.ledger.InMemoryLedger`.
    scorer : Scorer, optional
        u(q, v, M[R]) with a ``sensitivity`` Du <= the policy's; default ``LexiconScorer()``.
    exact : bool, default True
        Sample with the exact rational sampler (True) or the float one.
    seed : int or None, default None
        None draws from the OS (deployment); an int >= 0 makes runs reproducible (experiments).
    random_source : RandomSource, optional
        The exact sampler's source of random bits (instead of ``seed``'s).
    selector : {"em", "pf"} or Selector, default "em"
        The C3 eps-DP selector: Eq. (7), permute-and-flip or a custom one.
    fixed_work : bool or None, default None
        A selector tag's exact sampler: True, the one whose work is fixed by the public
        (|V_g|, eps, Du) (its running time reveals nothing,
        ``benchmarks/results/timing_channel.md``); False, the one whose work varies with the
        utilities (same law, :data:`~dpmv_lib.core.selection.VARIABLE_WORK_SAMPLERS`); None: True
        with OS randomness (deployment), False with a seed or random source (experiments).

    Raises
    ------
    PolicyTypeError, StoreTypeError
        If ``policy`` is not a Policy, ``store`` not a MemoryStore.
    StoreError
        If the store's layout does not match the policy.
    BudgetTypeError
        If ``budget`` has no ``epsilon()``, ``ledger`` is not a Ledger (or its caps not a
        mapping to numbers), or ``scorer`` is not a callable with a ``sensitivity``.
    BudgetError
        If the ledger's caps differ from the policy's or the scorer's Du exceeds the policy's.
    ParameterTypeError
        If ``seed`` is not None or an integer, or ``selector`` not a tag or a Selector.
    ParameterError
        If ``seed`` < 0 or ``selector`` is an unknown tag.
    """

    label: ClassVar[str] = "DP-MemView"
    violates: ClassVar[str | None] = None  # contract condition a variant breaks (None = compliant)

    def __init__(self, policy: Policy, store: MemoryStore, *, budget: BudgetRule | None = None,
                 ledger: Ledger | None = None, scorer: Scorer | None = None, exact: bool = True,
                 seed: int | None = None, random_source: RandomSource | None = None,
                 selector: str | Selector = "em", fixed_work: bool | None = None) -> None:
        if not isinstance(policy, Policy):
            raise PolicyTypeError(f"MemView needs a Policy, got {type(policy).__name__}")
        if not isinstance(store, MemoryStore):
            raise StoreTypeError(f"MemView needs a MemoryStore, got {type(store).__name__}")
        if budget is not None and not callable(getattr(budget, "epsilon", None)):
            raise BudgetTypeError(f"budget must be a budget rule with an epsilon() method, got {budget!r}")
        if ledger is not None and not all(hasattr(ledger, m) for m in ("caps", "spent", "try_charge")):
            raise BudgetTypeError(f"ledger must implement the Ledger protocol (caps, spent, try_charge), "
                                  f"got {type(ledger).__name__}")
        if scorer is not None and not (callable(scorer) and hasattr(scorer, "sensitivity")):
            raise BudgetTypeError(f"scorer must be callable with a 'sensitivity' bound, got {scorer!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ParameterTypeError(f"seed must be None (OS randomness) or an integer >= 0, got {seed!r}")
        if seed is not None and seed < 0:
            raise ParameterError(f"seed must be None (OS randomness) or an integer >= 0, got {seed!r}")
        if not isinstance(selector, (str, Selector)):
            raise ParameterTypeError(f"selector must be 'em', 'pf' or a Selector, got {type(selector).__name__}")
        if fixed_work is None:  # deployment (OS randomness): timing-safe; a seeded experiment: variable work
            fixed_work = seed is None and random_source is None
        self.selector = get_selector(selector, bool(fixed_work))
        store.check_layout(policy)
        self.policy = policy
        self._store = store
        self.budget = budget if budget is not None else OnlineBudget(3)
        self.ledger = ledger if ledger is not None else InMemoryLedger.for_policy(policy)
        try:
            caps = {a: Fraction(b) for a, b in self.ledger.caps.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            error = BudgetError if isinstance(exc, ValueError) else BudgetTypeError
            raise error(f"ledger caps must be a mapping attribute -> exact cap, got "
                        f"{getattr(self.ledger, 'caps', None)!r}") from None
        if caps != policy.caps:
            raise BudgetError(f"ledger caps {caps} do not match the policy caps {policy.caps}")
        self._scorer = scorer if scorer is not None else LexiconScorer()
        sens = to_fraction(self._scorer.sensitivity, "scorer sensitivity", positive=True, error=BudgetError)
        if sens > policy.sensitivity:
            raise BudgetError(f"scorer sensitivity {self._scorer.sensitivity} exceeds the policy's "
                              f"fixed bound {policy.sensitivity}")
        self.exact = exact
        self._memo: PlanMemo = PlanMemo(None, None)
        self.scorer_failures: list[ScorerFailure] = []  # operator-side log (C5 fail-closed)
        self._rng = np.random.default_rng(seed)
        if random_source is not None:
            self._source = random_source
        else:
            self._source = SeededRandomSource(seed) if seed is not None else SystemRandomSource()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass overriding a private hook name that MemView never calls (the release
        steps are public: :data:`_HOOK_STEPS`)."""
        super().__init_subclass__(**kwargs)
        hooks = sorted(set(vars(cls)) & set(_HOOK_STEPS))
        if hooks:
            raise TypeError(f"{cls.__name__} overrides {', '.join(hooks)}: MemView's release steps are "
                            f"public; override {', '.join(_HOOK_STEPS[n] for n in hooks)} instead")

    @property
    def store(self) -> MemoryStore:
        """The memory store M (trusted side: only what :meth:`select` draws leaves the interface)."""
        return self._store

    # ---- public API --------------------------------------------------------------------------
    def release(self, query: Query, history: Sequence[Release] = ()) -> Release:
        """Release the view tuple for one turn given the public released history (C1-C6):
        plan every active slot before anything is charged (C2, C4), admit each against the caps
        (C5; one ledger transaction when the ledger offers ``try_charge_many``), then score and
        select per slot in route order (C1, C3).

        Parameters
        ----------
        query : Query
            The public query q_t.
        history : sequence of Release, default ()
            The public released history h (the earlier turns).

        Returns
        -------
        Release

        Raises
        ------
        QueryTypeError
            If ``query`` is not a Query or ``history`` not a sequence of Release objects.
        QueryError, PolicyError
            If the policy cannot route or read the query.
        BudgetError
            If the budget rule returns an invalid eps (nothing is charged then).
        """
        if not isinstance(query, Query):
            raise QueryTypeError(f"release() needs a Query, got {type(query).__name__}")
        history = check_history(history)
        # every slot's public plan is validated before anything is charged
        plans = [self._plan(query, slot, history) for slot in self.route(query, history)]
        batch = self._admit_batch(plans)
        if batch is None:
            out = [self.select(self.prepare(query, p.slot, history, p)) for p in plans]
            return self.make_release(query, out)
        admitted, spent = batch
        plain = self._memo.plain  # (current: _plan refreshed it)
        out = []
        for p, ok in zip(plans, admitted):
            # a blocked or empty slot: what select(prepare(...)) returns, when already built
            shared = self._memo.generic_of(p) if plain and not (ok and p.epsilon is not None) else None
            out.append(shared if shared is not None else self.select(self.prepare(query, p.slot, history, p, ok)))
        return Release(query, tuple(out), tuple(sorted(spent.items())))

    def plan(self, query: Query, slot: str, history: Sequence[Release] = ()) -> SlotPlan:
        """C2, C4: read set R, affected Gamma*(R), charge set Gamma (:meth:`charge_set`) and eps
        of one slot, from public inputs only. Charges nothing.

        Parameters
        ----------
        query : Query
        slot : str
        history : sequence of Release, default ()

        Returns
        -------
        SlotPlan
            ``epsilon`` is None for an empty read or a charge set the budget rule gives no eps.

        Raises
        ------
        QueryTypeError
            If ``query`` is not a Query, ``slot`` not a str or ``history`` not Releases.
        PolicyError
            If the slot is unknown to the policy.
        BudgetError
            If the budget rule's eps is neither None nor an exact rational > 0.
        """
        if not isinstance(query, Query):
            raise QueryTypeError(f"plan() needs a Query, got {type(query).__name__}")
        if not isinstance(slot, str):
            raise QueryTypeError(f"plan() needs a slot name, got {type(slot).__name__}")
        return self._plan(query, slot, check_history(history))

    def fork(self) -> MemView:
        """A copy with an independent copy of the ledger (for exact enumeration and checkers);
        BudgetError if the ledger is not an in-memory ledger."""
        other = copy.copy(self)
        if not isinstance(self.ledger, InMemoryLedger):
            raise BudgetError("fork() needs an in-memory ledger")
        other.ledger = self.ledger.copy()
        other.scorer_failures = list(self.scorer_failures)
        return other

    # ---- the release pipeline, step by step (public: checks call it, variants override it) ----
    def route(self, query: Query, history: Sequence[Release] = ()) -> tuple[str, ...]:
        """C4: the ordered active slots G_t, from the public query and released history only.

        Parameters
        ----------
        query : Query
        history : sequence of Release, default ()

        Returns
        -------
        tuple of str

        Raises
        ------
        QueryTypeError
            If ``query`` is not a Query or ``history`` not a sequence of Release objects.
        """
        if not isinstance(query, Query):
            raise QueryTypeError(f"route() needs a Query, got {type(query).__name__}")
        return self.policy.route(query, check_history(history))

    def charge_set(self, affected: frozenset[str]) -> frozenset[str]:
        """C2: the charge set Gamma of a read: every affected attribute, Gamma = Gamma*(R) (an
        override that charges less violates C2).

        Parameters
        ----------
        affected : frozenset of str
            Gamma*(R), from the public policy.

        Returns
        -------
        frozenset of str
        """
        return affected

    def admit(self, charged: frozenset[str], epsilon: Fraction) -> bool:
        """C5: prospective cap check and ledger update (atomic in the ledger backend), from the
        public plan before the scorer runs (a later scorer failure fails closed).

        Parameters
        ----------
        charged : frozenset of str
            The charge set Gamma.
        epsilon : Fraction
            eps_{t,g}, charged to every attribute of Gamma.

        Returns
        -------
        bool
            True if L_a + eps <= B_a for every charged a (then charged), else False (nothing
            charged: the slot falls back to its generic view).
        """
        if not charged:
            return True
        return self.ledger.try_charge(charged, epsilon)

    def vocabulary(self, slot: str) -> tuple[View, ...]:
        """C1: the fixed public vocabulary V_g of ``slot`` (with its generic view), shared by
        all stores.

        Parameters
        ----------
        slot : str

        Returns
        -------
        tuple of View
        """
        return self.policy.slot(slot).views

    def prepare(self, query: Query, slot: str, history: Sequence[Release] = (),
                plan: SlotPlan | None = None, admitted: bool | None = None) -> PreparedSlot:
        """One slot-level operation up to the draw, on the code path of :meth:`release`: admit
        the plan against the caps (C5; the ledger moves here, before the scorer runs), then
        score the :meth:`vocabulary` exactly (C1, C3; fail-closed on a scorer failure, C5).

        Parameters
        ----------
        query : Query
        slot : str
        history : sequence of Release, default ()
            Used only to plan when ``plan`` is None.
        plan : SlotPlan, optional
            The slot's plan (:meth:`plan`); planned here when None.
        admitted : bool, optional
            The C5 decision if already made (a batched admission); else :meth:`admit` decides.

        Returns
        -------
        PreparedSlot
            Not admitted (empty read, no eps, failed cap check), or admitted with the
            vocabulary and its exact utilities.

        Raises
        ------
        QueryTypeError
            If ``query`` is not a Query or ``slot`` not a str (or as :meth:`plan`).
        ParameterTypeError
            If ``plan`` is neither None nor a SlotPlan.
        """
        if not isinstance(query, Query):
            raise QueryTypeError(f"prepare() needs a Query, got {type(query).__name__}")
        if not isinstance(slot, str):
            raise QueryTypeError(f"prepare() needs a slot name, got {type(slot).__name__}")
        if plan is None:
            plan = self.plan(query, slot, history)
        elif not isinstance(plan, SlotPlan):
            raise ParameterTypeError(f"prepare() needs a SlotPlan or None, got {type(plan).__name__}")
        if plan.epsilon is None:
            return PreparedSlot(plan, False)
        if admitted is None:
            admitted = self.admit(plan.charged, plan.epsilon)  # C5: commit before anything is sampled
        if not admitted:
            return PreparedSlot(plan, False)
        views = self.vocabulary(slot)
        contents = self._store.read(plan.read_set)
        return PreparedSlot(plan, True, views, self._utilities(query, slot, views, contents))

    def select(self, prepared: PreparedSlot) -> SlotRelease:
        """C3: the slot's release: one draw of the eps-DP selector over the vocabulary (with
        :meth:`extras`, C6), or the fixed generic view at zero cost when not admitted.

        Parameters
        ----------
        prepared : PreparedSlot
            From :meth:`prepare`.

        Returns
        -------
        SlotRelease
        """
        if not prepared.admitted:
            return self._generic(prepared)
        i = self._draw(prepared.utilities, prepared.epsilon)
        return self._released(prepared, prepared.views[i].id, self.selector.name, self.extras(prepared))

    def outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        """C3: every possible release of :meth:`select` with its exact probability, as a float
        (for checks and exact enumeration; a variant that changes :meth:`select` overrides it).

        Parameters
        ----------
        prepared : PreparedSlot

        Returns
        -------
        list of (SlotRelease, float)
            One entry per view, or the generic release with probability 1 when not admitted.
        """
        if not prepared.admitted:
            return [(self._generic(prepared), 1.0)]
        probs = self.selector.probabilities(prepared.utilities, prepared.epsilon, self.policy.sensitivity)
        return [(self._released(prepared, v.id, self.selector.name, self.extras(prepared)), float(p))
                for v, p in zip(prepared.views, probs)]

    def log_outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        """C3: every release of :meth:`select` with Pr > 0 and its natural-log probability (the
        exact enumerators: a Pr below the float range keeps a finite log). A class that
        overrides :meth:`outcomes` is read through its floats (log p for every p > 0).

        Parameters
        ----------
        prepared : PreparedSlot

        Returns
        -------
        list of (SlotRelease, float)
        """
        if type(self).outcomes is not MemView.outcomes:
            return [(sr, math.log(p)) for sr, p in self.outcomes(prepared) if p > 0]
        if not prepared.admitted:
            return [(self._generic(prepared), 0.0)]
        logp = selector_log_probabilities(self.selector, prepared.utilities, prepared.epsilon,
                                          self.policy.sensitivity)
        return [(self._released(prepared, v.id, self.selector.name, self.extras(prepared)), lp)
                for v, lp in zip(prepared.views, logp) if lp > -math.inf]

    def extras(self, prepared: PreparedSlot) -> tuple[tuple[str, Any], ...]:
        """C3/C6: what an admitted slot releases besides its view: nothing (a field that
        depends on memory here violates C6).

        Parameters
        ----------
        prepared : PreparedSlot

        Returns
        -------
        tuple of (str, Any)
            Extra public fields of the SlotRelease.
        """
        return ()

    def make_release(self, query: Query, slots: Sequence[SlotRelease]) -> Release:
        """C6: the turn's Release: the slot releases in route order and the public ledger
        state L_a after them.

        Parameters
        ----------
        query : Query
        slots : sequence of SlotRelease
            From :meth:`select` (or :meth:`outcomes`), one per active slot.

        Returns
        -------
        Release

        Raises
        ------
        QueryTypeError
            If ``query`` is not a Query.
        """
        if not isinstance(query, Query):
            raise QueryTypeError(f"make_release() needs a Query, got {type(query).__name__}")
        return Release(query, tuple(slots), tuple(sorted(self.ledger.spent().items())))

    # ---- internal helpers --------------------------------------------------------------------
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
        charged = self.charge_set(affected)
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
        return cast("Fraction | None", eps)  # a memo entry (not _MISSING) by now

    def _memos(self) -> PlanMemo:
        """The memo of the current (policy, budget) pair (a new one when either was replaced)."""
        memo = self._memo
        if memo.policy is not self.policy or memo.budget is not self.budget:
            cls = type(self)
            pure = (type(self.budget) in _PURE_RULES and cls.charge_set is MemView.charge_set
                    and cls._epsilon is MemView._epsilon)
            memo = self._memo = PlanMemo(self.policy, self.budget, pure, pure and all(
                getattr(cls, m) is getattr(MemView, m) for m in ("prepare", "select", "_generic")))
        return memo

    def _utilities(self, query: Query, slot: str, views: tuple[View, ...],
                   contents: Sequence[str]) -> tuple[Fraction, ...]:
        """Exact utilities of the slot's views (C3); fail-closed on any scorer failure (C5, see
        :mod:`~dpmv_lib.core.releases`): the slot's utilities become 1/2, nothing is raised."""
        out = []
        for v in views:
            try:
                value = self._scorer(query, v, contents)
            except Exception as exc:  # a failure may depend on memory: never let it out
                return self._failed(slot, v, f"raised {type(exc).__name__}", len(views))
            u = checked_utility(value)
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

    def _generic(self, prep: PreparedSlot) -> SlotRelease:
        p = prep.plan
        memo = self._memos()
        out = memo.generic_of(p) if memo.pure else None  # (a shared plan: its generic release too)
        if out is None:
            out = SlotRelease(p.slot, self.policy.slot(p.slot).generic.id, p.read_set, p.affected,
                              _NO_ATTRIBUTES, _ZERO, "generic", fallback=bool(p.read_set))
            if memo.pure:
                remember(memo.generic, id(p), (p, out), 1024)
        return out

    def _released(self, prep: PreparedSlot, view_id: str, mechanism: str,
                  extras: Iterable[tuple[str, Any]] = ()) -> SlotRelease:
        p = prep.plan
        return SlotRelease(p.slot, view_id, p.read_set, p.affected, p.charged, prep.epsilon,
                           mechanism, False, tuple(extras))

    def _draw(self, utilities: Sequence[Fraction], epsilon: Fraction) -> int:
        if self.exact:
            return self.selector.sample_exact(list(utilities), epsilon, self.policy.sensitivity, self._source)
        return self.selector.sample(list(utilities), epsilon, self.policy.sensitivity, self._rng)

    def _admit_batch(self, plans: Sequence[SlotPlan]
                     ) -> tuple[list[bool], Mapping[str, Fraction]] | None:
        """C5 for every charged slot of one release in ONE ledger transaction, before anything
        is sampled, when the ledger offers ``try_charge_many`` (the durable backends): the same
        decisions, in slot order, as one ``admit`` per slot, plus L_a right after the commit.
        None (per-slot ``admit``) for other ledgers and for variants that override ``admit``."""
        many = getattr(self.ledger, "try_charge_many", None)
        if many is None or type(self).admit is not MemView.admit:
            return None
        idx = [i for i, p in enumerate(plans) if p.epsilon is not None and p.charged]
        if not idx:
            return None
        decisions, spent = many([(plans[i].charged, plans[i].epsilon) for i in idx])
        admitted = [True] * len(plans)
        for i, ok in zip(idx, decisions):
            admitted[i] = ok
        return admitted, spent


#: private hook names MemView never calls -> the public release step to override instead (a
#: subclass overriding such a name is refused: the override would silently not take effect)
_HOOK_STEPS: dict[str, str] = {
    "_route": "route", "_charge_set": "charge_set", "_admit": "admit", "_vocabulary": "vocabulary",
    "_prepare": "prepare", "_sample": "select", "_outcomes": "outcomes", "_log_outcomes": "log_outcomes",
    "_extras": "extras", "_make_release": "make_release",
}
