"""Small random policies, adjacent stores and query strategies for exact checks of Theorem 1.

Everything is generated from a seed (numpy Generator), so a failing instance is reproducible.
Groups I_a overlap on purpose, some reads are empty, and the :class:`HashScorer` lets a store
change move every utility by up to Du = 1 (the worst case Eq. 7 must absorb). The adaptive
router/read policy and :func:`adaptive_strategy` depend on the released history only (C4).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.errors import ParameterError
from ..core.exact import Strategy, fixed_strategy
from ..core.ledger import BudgetRule, OnlineBudget, PreallocatedBudget, planned_charges
from ..core.memview import MemView
from ..core.releases import Release
from ..core.policy import Policy, Query, View
from ..core.store import MemoryStore, check_adjacent

CAPS = (Fraction(1, 2), Fraction(2, 3), Fraction(1), Fraction(3, 2), Fraction(2))


@dataclass(frozen=True)
class HashScorer:
    """u(q, v; X) = a pseudo-random level in {0, 1/L, ..., 1} from sha256(salt, intent, view, X).

    Deterministic and in [0, 1], so |u_M - u_M'| <= 1 = Du for any two stores."""

    salt: int = 0
    levels: int = 4
    sensitivity: Fraction = Fraction(1)

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> float:
        key = "\x1f".join([str(self.salt), query.intent, view.id, *read_contents]).encode()
        h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
        return (h % (self.levels + 1)) / self.levels


def _informative(history: Sequence[Release]) -> int:
    """Number of non-generic views released so far (a function of the public history)."""
    return sum(1 for r in history for s in r.slots if not s.view.endswith(".generic"))


@dataclass(frozen=True)
class AdaptiveRouter:
    """Routes by intent; reverses the slot order after a turn that released an informative view
    and drops the last slot on odd turns. Uses the public history only (C4)."""

    routes: Mapping[str, tuple[str, ...]]

    def route(self, query: Query, history: Sequence[Release] = ()) -> tuple[str, ...]:
        slots = tuple(self.routes[query.intent])
        if history and _informative(history[-1:]):
            slots = slots[::-1]
        if len(history) % 2 == 1 and len(slots) > 1:
            slots = slots[:-1]
        return slots


@dataclass(frozen=True)
class AdaptiveReadPolicy:
    """Reads a prefix of the slot's positions whose length depends on the released history (C4);
    the prefix may be empty (then the slot releases its generic view at zero cost)."""

    slot_positions: Mapping[str, tuple[int, ...]]

    def read(self, query: Query, slot: str, history: Sequence[Release] = ()) -> tuple[int, ...]:
        pos = tuple(self.slot_positions[slot])
        k = (len(history) + _informative(history) + len(query.intent)) % (len(pos) + 1) if pos else 0
        return pos[: max(k, 1) if len(history) == 0 else k]


def adaptive_strategy(intents: Sequence[str], text: str = "q") -> Strategy:
    """An adaptive query strategy: the next intent depends on which views were released."""
    its = tuple(intents)
    if not its:
        raise ParameterError("adaptive_strategy needs at least one intent")

    def strategy(history: tuple[Release, ...]) -> Query:
        views = "|".join(s.view for r in history for s in r.slots)
        k = (len(history) + int(hashlib.sha256(views.encode()).hexdigest(), 16)) % len(its)
        return Query(f"{text} {len(history)}", its[k])
    return strategy


@dataclass(frozen=True)
class RandomCase:
    """A random policy with an adjacent pair M ~_a M' and a fixed query plan."""

    seed: int
    policy: Policy
    m: MemoryStore
    m_prime: MemoryStore
    attribute: str
    queries: tuple[Query, ...]
    scorer: Any = field(default_factory=HashScorer)

    @property
    def bound(self) -> Fraction:
        return self.policy.attribute(self.attribute).cap

    @property
    def horizon(self) -> int:
        return len(self.queries)

    def strategy(self, kind: str) -> Strategy:
        """``"fixed"`` (the plan) or ``"adaptive"`` (next intent from the released views)."""
        if kind == "fixed":
            return fixed_strategy(self.queries)
        if kind == "adaptive":
            return adaptive_strategy(self.policy.intents)
        raise ParameterError(f"unknown strategy kind {kind!r}; use 'fixed' or 'adaptive'")

    def budget(self, mode: str, K: int = 2) -> BudgetRule:
        """``"online"`` (B_a / K) or ``"pre"`` (B_a / C_a with C_a from the fixed plan)."""
        if mode == "online":
            return OnlineBudget(K)
        if mode == "pre":
            return PreallocatedBudget(planned_charges(self.policy, self.queries))
        raise ParameterError(f"unknown budget mode {mode!r}; use 'online' or 'pre'")

    def factory(self, cls: type[MemView] = MemView, budget: BudgetRule | None = None,
                **kwargs: Any) -> Callable[[MemoryStore], MemView]:
        b = budget if budget is not None else self.budget("online")
        return lambda store: cls(self.policy, store, budget=b, scorer=self.scorer, seed=0, **kwargs)


def random_case(seed: int, *, horizon: int = 3, max_slots_per_turn: int = 2, adaptive: bool = False,
                levels: int = 4) -> RandomCase:
    """A small random policy (2-3 slots, 3-5 positions, 2-3 attributes with overlapping groups,
    2-3 views per slot, some empty or partial reads), stores M ~_a M' and a fixed plan.

    ``adaptive=True`` swaps in a history-dependent router and read policy (C4-compliant)."""
    if horizon < 1:
        raise ParameterError("horizon must be >= 1")
    rng = np.random.default_rng(seed)
    n_slots = int(rng.integers(2, 4))
    slots = [f"s{k}" for k in range(n_slots)]
    n_pos = int(rng.integers(3, 6))
    pos_slot = {i: slots[int(rng.integers(n_slots))] for i in range(1, n_pos + 1)}
    pos_slot[1] = slots[0]  # at least two slots hold memory
    pos_slot[2] = slots[1]
    ids = list(pos_slot)
    n_attr = int(rng.integers(2, 4))
    groups = []
    for _ in range(n_attr):
        size = int(rng.integers(1, min(3, n_pos) + 1))
        groups.append(sorted(int(i) for i in rng.choice(ids, size=size, replace=False)))
    if not any(set(g) & set(h) for k, g in enumerate(groups) for h in groups[k + 1:]):
        shared = groups[0][0]
        groups[1] = sorted(set(groups[1]) | {shared})
    attrs = [f"a{k}" for k in range(n_attr)]
    # attribute a (prefer one whose group overlaps another group) and the positions D to change
    overlapping = [a for a, g in zip(attrs, groups) if any(set(g) & set(h) for b, h in zip(attrs, groups) if b != a)]
    attribute = overlapping[int(rng.integers(len(overlapping)))] if overlapping else attrs[0]
    group = groups[attrs.index(attribute)]
    change = [i for i in group if rng.random() < 0.7] or [group[0]]
    intents = [f"i{k}" for k in range(int(rng.integers(2, 4)))]
    routes = {}
    for it in intents:
        k = int(rng.integers(1, min(max_slots_per_turn, n_slots) + 1))
        routes[it] = [slots[int(j)] for j in rng.permutation(n_slots)[:k]]
    hot = pos_slot[change[0]]  # intent i0 reads a changed position, so the instance is not vacuous
    if hot not in routes[intents[0]]:
        routes[intents[0]] = [hot] + routes[intents[0]][: max_slots_per_turn - 1]
    reads = []
    for it in intents:
        for s in routes[it]:
            own = [i for i in ids if pos_slot[i] == s]
            if own and rng.random() < 0.4 and not (it == intents[0] and s == hot):
                sub = [i for i in own if rng.random() < 0.5]
                reads.append({"intent": it, "slot": s, "positions": sub})
    data = {
        "name": f"random-{seed}",
        "sensitivity": "1",
        "slots": [{"name": s, "views": [{"id": f"{s}.generic", "text": "generic", "generic": True}] +
                   [{"id": f"{s}.v{j}", "text": f"view {j}"} for j in range(1, int(rng.integers(2, 4)))]}
                  for s in slots],
        "positions": [{"id": i, "slot": pos_slot[i]} for i in ids],
        "attributes": [{"name": a, "group": g, "cap": str(CAPS[int(rng.integers(len(CAPS)))])}
                       for a, g in zip(attrs, groups)],
        "routes": routes,
        "reads": reads,
    }
    policy = Policy.from_dict(data)
    if adaptive:
        slot_positions = {s: tuple(i for i in ids if pos_slot[i] == s) for s in slots}
        policy = replace(policy, router=AdaptiveRouter({k: tuple(v) for k, v in routes.items()}),
                         reader=AdaptiveReadPolicy(slot_positions), source={})
    contents = {i: f"m{i} c{int(rng.integers(10))}" for i in ids}
    m = MemoryStore.from_policy(policy, contents, "M")
    m_prime = m.replace({i: contents[i] + " changed" for i in change}, "M'")
    check_adjacent(m, m_prime, policy, attribute)
    queries = (Query("q0", intents[0]),) + tuple(Query(f"q{t}", intents[int(rng.integers(len(intents)))])
                                                   for t in range(1, horizon))
    return RandomCase(seed, policy, m, m_prime, attribute, queries, HashScorer(salt=seed, levels=levels))


# ---- a tight case for Eq. (7) ------------------------------------------------------------
@dataclass(frozen=True)
class FlipScorer:
    """u(v_target) = phi(X), u(other views) = 1 - phi(X), Du = 1: the normaliser moves against
    the target view, so one selection's loss approaches eps as the vocabulary grows."""

    target: str
    marker: str = "evidence"
    sensitivity: Fraction = Fraction(1)

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> float:
        phi = 1.0 if any(self.marker in c.lower() for c in read_contents) else 0.0
        return phi if view.id == self.target else 1.0 - phi


def tight_em_loss(epsilon: float, n_views: int) -> float:
    """Closed form of the single-selection loss under :class:`FlipScorer` with n_views views:
    log( e^{eps/2} (1 + k e^{eps/2}) / (e^{eps/2} + k) ), k = n_views - 1 (< eps)."""
    k, h = n_views - 1, math.exp(epsilon / 2)
    return math.log(h * (1 + k * h) / (h + k))


def tight_em_case(n_views: int = 6, cap: Fraction = Fraction(2)) -> RandomCase:
    """One slot with ``n_views`` views, one attribute with cap B_a spent by one selection
    (OnlineBudget(1)); the compliant loss is :func:`tight_em_loss` (B_a, n_views) <= B_a."""
    if n_views < 2:
        raise ParameterError("tight_em_case needs at least two views")
    policy = Policy.from_dict({
        "name": "tight-em", "sensitivity": "1",
        "slots": [{"name": "g", "views": [{"id": "g.generic", "text": "generic", "generic": True}] +
                   [{"id": f"g.v{j}", "text": f"view {j}"} for j in range(1, n_views)]}],
        "positions": [{"id": 1, "slot": "g"}],
        "attributes": [{"name": "a", "group": [1], "cap": str(cap)}],
        "routes": {"ask": ["g"]}})
    m = MemoryStore.from_policy(policy, {1: "evidence"}, "M")
    mp = m.replace({1: "neutral"}, "M'")
    return RandomCase(-1, policy, m, mp, "a", (Query("q", "ask"),), FlipScorer("g.v1"))
