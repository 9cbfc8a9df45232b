"""The isolating counterexamples of Appendix B.5 as small, exactly checkable constructions.

Each construction keeps every condition of the contract but one, and returns the public policy,
an adjacent store pair M ~_a M', a fixed query plan, the budget rule, the scorer, the
contract-violating interface and the paper's closed-form privacy loss. The compliant
:class:`~dpmv_lib.core.memview.MemView` on the same construction stays within B_a (Theorem 1); the
violating variant does not. Exact losses come from :mod:`dpmv_lib.core.exact`, never from here.

Common setting: one slot ``g`` with the fixed generic view v_0 = ``g.generic`` and one informative
view v_1 = ``g.v1``; phi(X) = 1 iff a read item contains the evidence marker, and (B.5)
u(v_1; X) = phi(X), u(v_0; X) = 1 - phi(X), Du = 1, so one admitted selection with parameter
eps_0 gives Pr[v_1 | M] / Pr[v_1 | M'] = e^{eps_0 / 2}.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from ..core.rationals import Number, to_fraction
from ..core.errors import ParameterError
from ..core.exact import Strategy, fixed_strategy
from ..core.memview import MemView
from ..core.policy import Policy, Query, View
from ..core.store import MemoryStore, check_adjacent
from .variants import CappedArgmax, IncompleteCharge, NoCap, ScoreChannel, StoreDependentVocabulary

MARKER = "evidence"
QUERY = Query("What should I keep in mind today?", "ask")


@dataclass(frozen=True)
class ConstantBudget:
    """A public, store-independent budget rule: every charged selection uses eps_0 (B.5)."""

    epsilon0: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon0", to_fraction(self.epsilon0, "epsilon0", positive=True))

    def epsilon(self, charge_set: frozenset[str], caps: Mapping[str, Fraction]) -> Fraction:
        return self.epsilon0


@dataclass(frozen=True)
class EvidenceScorer:
    """The B.5 scorer: u(v_1; X) = phi(X) for informative views; the generic view gets
    1 - phi(X) (``generic_utility=None``) or a fixed constant. Sensitivity Du = 1."""

    marker: str = MARKER
    generic_utility: float | None = None
    sensitivity: Fraction = Fraction(1)

    def phi(self, read_contents: Sequence[str]) -> float:
        return 1.0 if any(self.marker in c.lower() for c in read_contents) else 0.0

    def __call__(self, query: Query, view: View, read_contents: Sequence[str]) -> float:
        p = self.phi(read_contents)
        if view.generic:
            return 1.0 - p if self.generic_utility is None else float(self.generic_utility)
        return p


@dataclass(frozen=True)
class Counterexample:
    """One B.5 construction: everything needed to enumerate its transcripts exactly."""

    name: str
    violates: str
    policy: Policy
    m: MemoryStore
    m_prime: MemoryStore
    attribute: str
    queries: tuple[Query, ...]
    budget: ConstantBudget
    scorer: Any
    variant: type[MemView]
    analytic_loss: float
    variant_kwargs: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def bound(self) -> Fraction:
        """B_a of the attribute w.r.t. which M ~_a M'."""
        return self.policy.attribute(self.attribute).cap

    @property
    def horizon(self) -> int:
        return len(self.queries)

    @property
    def strategy(self) -> Strategy:
        return fixed_strategy(self.queries)

    def factory(self, cls: type[MemView] | None = None) -> Callable[[MemoryStore], MemView]:
        """store -> interface; ``cls=None`` builds the violating variant, ``MemView`` the compliant one."""
        cls = self.variant if cls is None else cls
        kwargs = dict(self.variant_kwargs) if cls is self.variant else {}
        return lambda store: cls(self.policy, store, budget=self.budget, scorer=self.scorer, seed=0, **kwargs)


def _policy(attributes: Sequence[tuple[str, Sequence[int], Number]], n_positions: int = 2) -> Policy:
    return Policy.from_dict({
        "name": "b5-counterexample",
        "sensitivity": "1",
        "slots": [{"name": "g", "views": [
            {"id": "g.generic", "text": "Answer generally.", "generic": True},
            {"id": "g.v1", "text": "Answer with the protected fact in mind.", "cues": [MARKER],
             "intents": ["ask"]}]}],
        "positions": [{"id": i, "slot": "g"} for i in range(1, n_positions + 1)],
        "attributes": [{"name": n, "group": list(g), "cap": str(to_fraction(c, f"cap of {n!r}", positive=True))}
                       for n, g, c in attributes],
        "routes": {"ask": ["g"]},
    })


def _stores(policy: Policy, attribute: str) -> tuple[MemoryStore, MemoryStore]:
    m = MemoryStore.from_policy(policy, {1: f"{MARKER} of the protected attribute", 2: "a neutral note"}, "M")
    mp = m.replace({1: "another neutral note"}, "M'")
    check_adjacent(m, mp, policy, attribute)
    return m, mp


def _check(n: int, eps0: Number) -> Fraction:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ParameterError(f"the number of selections N must be an integer >= 1, got {n!r}")
    return to_fraction(eps0, "eps0", positive=True)


def incomplete_charge_case(n: int = 4, eps0: Number = Fraction(1, 2), cap_a: Number = Fraction(1, 2),
                           target: str = "a", other: str = "b") -> Counterexample:
    """C2: the read touches I_a and I_b (shared position 1) but only b is charged; B_b = N eps_0
    admits all N selections, so the loss for a is N eps_0 / 2, above B_a when N eps_0 / 2 > B_a.

    ``target``/``other`` name a and b (the construction is symmetric in the names)."""
    e = _check(n, eps0)
    if target == other:
        raise ParameterError("target and other must be different attribute names")
    policy = _policy([(target, [1], to_fraction(cap_a, "cap_a", positive=True)), (other, [1, 2], n * e)])
    m, mp = _stores(policy, target)
    return Counterexample("incomplete charging", "C2", policy, m, mp, target, (QUERY,) * n, ConstantBudget(e),
                          EvidenceScorer(), IncompleteCharge, float(n * e / 2), {"keep": other},
                          f"Gamma = {{{other}}} although the read touches I_{target} and I_{other}")


def no_cap_case(n: int = 6, eps0: Number = Fraction(1, 2), cap_a: Number = 1) -> Counterexample:
    """C5: complete charging and a valid EM, but no prospective check: N selections of eps_0 on
    a, loss N eps_0 / 2 while B_a is fixed."""
    e = _check(n, eps0)
    policy = _policy([("a", [1], to_fraction(cap_a, "cap_a", positive=True))])
    m, mp = _stores(policy, "a")
    return Counterexample("no pathwise cap", "C5", policy, m, mp, "a", (QUERY,) * n, ConstantBudget(e),
                          EvidenceScorer(), NoCap, float(n * e / 2), {}, "L_a grows past B_a")


def capped_argmax_case(n: int = 1, eps0: Number = Fraction(1, 2), cap_a: Number = 1) -> Counterexample:
    """C3: the top-scoring view is released deterministically: Pr[v_1|M] = 1, Pr[v_1|M'] = 0."""
    e = _check(n, eps0)
    policy = _policy([("a", [1], to_fraction(cap_a, "cap_a", positive=True))])
    m, mp = _stores(policy, "a")
    return Counterexample("deterministic release", "C3", policy, m, mp, "a", (QUERY,) * n, ConstantBudget(e),
                          EvidenceScorer(), CappedArgmax, math.inf, {}, "support mismatch")


def score_channel_case(n: int = 1, eps0: Number = Fraction(1, 2), cap_a: Number = 1) -> Counterexample:
    """C6: a valid EM view plus the top internal score (1 under M, 1/2 under M') as an observable
    control c = 1{M_{I_a} has evidence for a}: the supports differ."""
    e = _check(n, eps0)
    policy = _policy([("a", [1], to_fraction(cap_a, "cap_a", positive=True))])
    m, mp = _stores(policy, "a")
    return Counterexample("memory-dependent channel", "C6", policy, m, mp, "a", (QUERY,) * n, ConstantBudget(e),
                          EvidenceScorer(generic_utility=0.5), ScoreChannel, math.inf, {},
                          "the top score is released next to the view")


def store_dependent_vocabulary_case(n: int = 1, eps0: Number = Fraction(1, 2), cap_a: Number = 1) -> Counterexample:
    """C1: v_1 is in V_g(M) (its cue occurs in memory) but not in V_g(M'): support mismatch."""
    e = _check(n, eps0)
    policy = _policy([("a", [1], to_fraction(cap_a, "cap_a", positive=True))])
    m, mp = _stores(policy, "a")
    return Counterexample("store-dependent vocabulary", "C1", policy, m, mp, "a", (QUERY,) * n,
                          ConstantBudget(e), EvidenceScorer(), StoreDependentVocabulary, math.inf, {},
                          "v_1 offered only when memory supports it")


CASES: dict[str, Callable[..., Counterexample]] = {
    "IncompleteCharge": incomplete_charge_case,
    "NoCap": no_cap_case,
    "CappedArgmax": capped_argmax_case,
    "ScoreChannel": score_channel_case,
    "StoreDependentVocabulary": store_dependent_vocabulary_case,
}


def all_cases(**kwargs: Any) -> list[Counterexample]:
    """One construction per violated condition (keyword arguments go to every builder)."""
    return [build(**kwargs) for build in CASES.values()]
