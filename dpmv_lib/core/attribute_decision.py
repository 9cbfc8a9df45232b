"""One private decision per protected attribute, reused by every slot (beyond the paper).

DP-MemView draws a fresh Eq. (7) selection for every active slot of every turn and charges it to
every attribute its read touches, so a cap B_a of 2 at eps_{t,g} = 2/3 buys three weak selections
and every later turn falls back to the generic view. This interface spends each attribute's cap
on ONE strong decision instead and reuses it:

* **decision** (the only step that reads memory): the first slot-level operation whose read
  touches attribute a, and whose vocabulary holds a view publicly linked to a, decides z_a in
  {0, 1} from the contents of I_a alone. It reads R = I_a, charges every attribute of
  Gamma*(I_a) (C2) with eps_a = min_{b in Gamma*(I_a)} B_b / N_b, where N_b counts the decisions
  whose read touches I_b (public), after the prospective cap check (C5; a refused decision is
  z_a = 0 at zero cost). Each ledger L_b then reaches at most B_b.
* **randomised response on a score**: with s = s_a(M) in [0, 1] (the scorer's memory part for
  the views linked to a, divided by Du), P(z_a = 1) = e^{eps s} / (e^{eps s} + e^{eps (1 - s)}).
  For any s, s' in [0, 1] this is eps-DP: log P(z = 1) = -log(1 + e^{-eps (2s - 1)}) is monotone in
  s and changes by at most eps between s = 0 and s = 1 (and so does P(z = 0)), so it is the law
  of the Eq. (7) sampler on utilities (s, 1 - s) with exponent eps u, i.e. the exact sampler
  called with sensitivity 1/2. With s_M = 1 and s_M' = 0 it is randomised response at eps,
  which sits on the DP frontier (:mod:`dpmv_lib.checks.frontier`).
* **release**: the deciding operation shows a view linked to a if z_a = 1, else the generic view
  (the same two views whatever was decided before, so its law given the public path does not
  depend on earlier draws).
* **reuse** (post-processing): every later slot's view is a fixed public function of the query,
  the slot and the decisions already released (z_a is read back from the history: the deciding
  release names a and shows a view linked to a exactly when z_a = 1). Nothing else is read or
  charged; its mechanism tag is ``"reuse"`` and its likelihood ratio given the prefix is 1.

The view-to-attribute links are public policy (the benchmark's public gold rules, or by default
every view of a slot linked to every attribute whose group meets the slot's positions). Theorem 1's
argument applies unchanged: the decisions are the only memory-dependent releases, each eps_a-DP
given the public prefix (C3), with plans, charges and cap checks that are public functions of the
prefix (C4, C5); the exact checks of ``tests/test_frontier.py`` enumerate every transcript.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Sequence

from .errors import ParameterError, ParameterTypeError
from .memview import MemView
from .policy import Policy, Query, View
from .releases import PreparedSlot, Release, SlotPlan, SlotRelease, check_history, selector_log_probabilities
from .selection import get_selector

#: the public mechanism tags of this interface's releases
DECISION, REFUSED, REUSE = "decision", "decision-refused", "reuse"
#: the exponent eps * u of randomised response on a score: the Eq. (7) sampler at sensitivity 1/2
_RR_SENSITIVITY = Fraction(1, 2)


def slot_links(policy: Policy) -> dict[str, tuple[str, ...]]:
    """The default public links: every non-generic view of a slot -> every attribute whose
    group meets the slot's positions (a function of the policy alone)."""
    out: dict[str, tuple[str, ...]] = {}
    for slot in policy.slot_names:
        attrs = tuple(a for a in policy.attribute_names
                      if policy.attribute(a).group & set(policy.positions_of(slot)))
        for v in policy.slot(slot).views:
            if not v.generic:
                out[v.id] = attrs
    return out


@dataclass(frozen=True)
class DecisionSlot(PreparedSlot):
    """A slot-level operation of :class:`AttributeDecisionMemView` before its draw: the public
    plan (read I_a and charge set Gamma*(I_a) for a decision, nothing for a reuse), the attribute
    it decides (None for a reuse), the decisions already public and, trusted side, the score s."""

    query: Query | None = None
    decides: str | None = None
    known: tuple[tuple[str, int], ...] = ()
    read_attributes: frozenset[str] = frozenset()
    score: Fraction = Fraction(0)


class AttributeDecisionMemView(MemView):
    """DP-MemView with one randomised decision per attribute, reused by every slot (module
    docstring). Pure B_a-DP per attribute over the whole adaptive transcript.

    Parameters
    ----------
    policy, store, budget, ledger, scorer, exact, seed, random_source, fixed_work
        As :class:`~dpmv_lib.core.memview.MemView` (``budget`` is not used: each decision's eps
        is the public eps_a of the module docstring; ``selector`` is not used either).
    links : Mapping of str to sequence of str, optional
        Public view id -> linked attributes; views or attributes the policy does not hold are
        ignored. Default :func:`slot_links`.

    Raises
    ------
    ParameterTypeError
        If ``links`` is not a mapping of view ids to sequences of attribute names.
    """

    label = "DP-MemView (attribute decision)"

    def __init__(self, policy: Policy, store: Any, *, links: Mapping[str, Sequence[str]] | None = None,
                 **kwargs: Any) -> None:
        kwargs.pop("selector", None)
        super().__init__(policy, store, **kwargs)
        fixed = kwargs.get("fixed_work")
        if fixed is None:
            fixed = kwargs.get("seed") is None and kwargs.get("random_source") is None
        self.decider = get_selector("em", bool(fixed))
        self.scorer = kwargs.get("scorer") or _default_scorer()
        if links is None:
            links = slot_links(policy)
        if not hasattr(links, "items"):
            raise ParameterTypeError(f"links must map view ids to attribute names, got {type(links).__name__}")
        known_views = {v.id for s in policy.slots for v in s.views if not v.generic}
        names = set(policy.attribute_names)
        clean: dict[str, frozenset[str]] = {}
        for v, attrs in links.items():
            if not isinstance(v, str) or isinstance(attrs, str) or not hasattr(attrs, "__iter__"):
                raise ParameterTypeError(f"links must map view ids to sequences of attribute names, got "
                                         f"{v!r}: {attrs!r}")
            if v in known_views:
                clean[v] = frozenset(a for a in attrs if a in names)
        self.links = clean
        self.epsilons = decision_epsilons(policy, clean)

    # ---- public helpers ------------------------------------------------------------------------
    def linked(self, view: View, attribute: str) -> bool:
        """True if the public links tie ``view`` to ``attribute``."""
        return attribute in self.links.get(view.id, ())

    def decisions(self, history: Sequence[Release]) -> dict[str, int]:
        """The decisions z_a already released in ``history`` (public: the deciding release names a
        and shows a view linked to a exactly when z_a = 1)."""
        out: dict[str, int] = {}
        for rel in check_history(history):
            for sr in rel.slots:
                a = dict(sr.extras).get("decides")
                if isinstance(a, str) and a not in out:
                    out[a] = int(a in self.links.get(sr.view, ()))
        return out

    def candidates(self, slot: str, read_attributes: frozenset[str]) -> list[str]:
        """The attributes a slot reading Gamma*(R) = ``read_attributes`` may decide: those with a
        view of the slot linked to them (policy order)."""
        views = [v for v in self.policy.slot(slot).views if not v.generic]
        return [a for a in self.policy.attribute_names
                if a in read_attributes and a in self.epsilons and any(self.linked(v, a) for v in views)]

    def view_for(self, query: Query, slot: str, read_attributes: frozenset[str], known: Mapping[str, int],
                 fresh: tuple[str, int] | None = None) -> str:
        """The slot's view, a public function of the decisions: with a fresh z_a = 1, a view linked
        to a; otherwise a view linked to an attribute of Gamma*(R) decided 1 (never one linked to a
        fresh a decided 0), preferring views that serve the query's intent and then views linked to
        more positive attributes; else the generic view."""
        spec = self.policy.slot(slot)
        positive = {b for b in read_attributes if known.get(b) == 1}
        if fresh is not None and fresh[1] == 1:
            positive.add(fresh[0])
            pool = [v for v in spec.views if not v.generic and self.linked(v, fresh[0])]
        else:
            pool = [v for v in spec.views if not v.generic and self.links.get(v.id, frozenset()) & positive
                    and not (fresh is not None and self.linked(v, fresh[0]))]
        if not pool:
            return spec.generic.id
        order = {v.id: i for i, v in enumerate(spec.views)}
        return min(pool, key=lambda v: (query.intent not in v.intents,
                                        -len(self.links.get(v.id, frozenset()) & positive), order[v.id])).id

    def score(self, attribute: str, query: Query) -> Fraction:
        """s_a(M) in [0, 1] (trusted side): the largest memory part of the scorer over the views
        linked to a, read on I_a, divided by Du; 1/2 if the scorer fails (C5 fail-closed)."""
        group = tuple(sorted(self.policy.attribute(attribute).group))
        contents = self.store.read(group)
        du = Fraction(self.policy.sensitivity)
        best = Fraction(0)
        for slot in self.policy.slots:
            for v in slot.views:
                if v.generic or not self.linked(v, attribute):
                    continue
                try:
                    gain = (Fraction(self.scorer(query, v, contents)) - Fraction(self.scorer(query, v, ()))) / du
                except Exception:  # a failure may depend on memory: fail closed, raise nothing
                    return Fraction(1, 2)
                best = max(best, gain)
        return min(Fraction(1), max(Fraction(0), best))

    # ---- the release pipeline ------------------------------------------------------------------
    def admit(self, charged: frozenset[str], epsilon: Fraction) -> bool:
        """C5: the prospective cap check of one decision (as MemView's; one charge per decision)."""
        return super().admit(charged, epsilon)

    def prepare(self, query: Query, slot: str, history: Sequence[Release] = (),
                plan: SlotPlan | None = None, admitted: bool | None = None) -> PreparedSlot:
        """The slot-level operation: which attribute it decides (the first undecided candidate not
        claimed by an earlier slot of the turn; public), its cap check and ledger update (C5), and
        the trusted score s_a. ``plan`` and ``admitted`` are ignored (the plan is the decision's)."""
        history = check_history(history)
        known = self.decisions(history)
        claimed: set[str] = set()
        own: str | None = None
        attrs: frozenset[str] = frozenset()
        route = tuple(self.route(query, history))
        for g in (route[:route.index(slot)] if slot in route else ()) + (slot,):
            read = self.policy.read(query, g, history)
            g_attrs = self.policy.charge_set(read)
            free = [a for a in self.candidates(g, g_attrs) if a not in known and a not in claimed]
            if g == slot:
                own, attrs = (free[0] if free else None), g_attrs
                break
            if free:
                claimed.add(free[0])
        if own is None:
            return DecisionSlot(SlotPlan(slot, (), frozenset(), frozenset(), None), False, query=query,
                                known=tuple(sorted(known.items())), read_attributes=attrs)
        group = tuple(sorted(self.policy.attribute(own).group))
        charged = self.policy.charge_set(group)
        eps = self.epsilons[own]
        ok = self.admit(charged, eps)
        plan_out = SlotPlan(slot, group, charged, charged, eps)
        return DecisionSlot(plan_out, ok, query=query, decides=own, known=tuple(sorted(known.items())),
                            read_attributes=attrs, score=self.score(own, query) if ok else Fraction(0))

    def _decision_outcomes(self, prep: DecisionSlot) -> list[tuple[SlotRelease, Fraction | None, int]]:
        """(release, unused, z) of each value of the decision (z = 1 first). A decision's two views
        do not depend on earlier decisions (z = 1: a view linked to a; z = 0: the generic view), so
        its law given the public path is the same whatever was realised before (the exact oracle
        convolves decisions); a reuse releases the view of the decisions already public."""
        assert prep.query is not None
        slot = prep.plan.slot
        if prep.decides is None:
            view = self.view_for(prep.query, slot, prep.read_attributes, dict(prep.known))
            return [(self._release(prep, view), None, 0)]
        generic = self.policy.slot(slot).generic.id
        if not prep.admitted:
            return [(self._release(prep, generic), None, 0)]
        linked = self.view_for(prep.query, slot, frozenset({prep.decides}), {prep.decides: 1})
        return [(self._release(prep, linked), None, 1), (self._release(prep, generic), None, 0)]

    def _release(self, prep: DecisionSlot, view: str) -> SlotRelease:
        p = prep.plan
        if prep.decides is None:
            return SlotRelease(p.slot, view, (), frozenset(), frozenset(), Fraction(0), REUSE)
        if not prep.admitted:
            return SlotRelease(p.slot, view, p.read_set, p.affected, frozenset(), Fraction(0), REFUSED, True,
                               (("decides", prep.decides),))
        return SlotRelease(p.slot, view, p.read_set, p.affected, p.charged, prep.epsilon, DECISION, False,
                           (("decides", prep.decides),))

    def _utilities_of(self, prep: DecisionSlot) -> list[Fraction]:
        return [prep.score, 1 - prep.score]  # (z = 1, z = 0)

    def decision_epsilon(self, prepared: PreparedSlot) -> Fraction:
        """The eps a decision is sampled at: exactly the eps its ledger charge records (C3, C5)."""
        return prepared.epsilon

    def select(self, prepared: PreparedSlot) -> SlotRelease:
        """One draw of the decision (the exact sampler) or the reused view."""
        prep = _checked(prepared)
        outs = self._decision_outcomes(prep)
        if len(outs) == 1:
            return outs[0][0]
        utils = self._utilities_of(prep)
        if self.exact:
            i = self.decider.sample_exact(utils, self.decision_epsilon(prep), _RR_SENSITIVITY, self._source)
        else:
            i = self.decider.sample(utils, self.decision_epsilon(prep), _RR_SENSITIVITY, self._rng)
        return outs[i][0]

    def outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        """Every release with its exact probability (as a float)."""
        prep = _checked(prepared)
        outs = self._decision_outcomes(prep)
        if len(outs) == 1:
            return [(outs[0][0], 1.0)]
        probs = self.decider.probabilities(self._utilities_of(prep), self.decision_epsilon(prep), _RR_SENSITIVITY)
        return [(o[0], float(p)) for o, p in zip(outs, probs)]

    def log_outcomes(self, prepared: PreparedSlot) -> list[tuple[SlotRelease, float]]:
        """Every release with Pr > 0 and its natural-log probability (log space)."""
        prep = _checked(prepared)
        outs = self._decision_outcomes(prep)
        if len(outs) == 1:
            return [(outs[0][0], 0.0)]
        logp = selector_log_probabilities(self.decider, self._utilities_of(prep), self.decision_epsilon(prep),
                                          _RR_SENSITIVITY)
        return [(o[0], lp) for o, lp in zip(outs, logp)]

    def decision_probability(self, prepared: PreparedSlot) -> float:
        """P(z_a = 1) of a decision (0 for a reuse or a refused decision), trusted side."""
        prep = _checked(prepared)
        if not prep.admitted:
            return 0.0
        return float(self.decider.probabilities(self._utilities_of(prep), self.decision_epsilon(prep),
                                               _RR_SENSITIVITY)[0])


def decision_epsilons(policy: Policy, links: Mapping[str, frozenset[str]]) -> dict[str, Fraction]:
    """eps_a = min_{b in Gamma*(I_a)} B_b / N_b for every attribute with a linked view, N_b the
    number of such attributes c with b in Gamma*(I_c): every ledger then totals at most B_b."""
    decidable = [a for a in policy.attribute_names if any(a in attrs for attrs in links.values())]
    touch = {a: policy.charge_set(tuple(sorted(policy.attribute(a).group))) for a in decidable}
    n = {b: sum(1 for c in decidable if b in touch[c]) for b in policy.attribute_names}
    return {a: min(Fraction(policy.attribute(b).cap) / n[b] for b in touch[a]) for a in decidable}


def _checked(prepared: PreparedSlot) -> DecisionSlot:
    if not isinstance(prepared, DecisionSlot):
        raise ParameterError(f"AttributeDecisionMemView needs its own prepared slots, got {type(prepared).__name__}")
    return prepared


def _default_scorer() -> Any:
    from .scorer import LexiconScorer

    return LexiconScorer()
