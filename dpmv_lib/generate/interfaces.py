"""The compared memory interfaces (paper Table 1, Table 8 / C.4, and the RQ2 variants of Table 4).

Each interface turns one turn of one pair (public query + one store side) into what the response
model sees: the ``conditioning`` text. All share the same queries, router (``Policy.route``),
read policy (``Policy.read``), response model and output limit; they differ only in that text
and its protection.

* ``GenericOnly``: the fixed generic view text of each routed slot, identical under M and M'.
* ``RawReadSet``: the memory items at R_{t,g}, ordered by position (non-private reference).
* ``TypedMask`` (MemPrivacy adaptation): the RawReadSet items, with every *protected* item (a
  position inside any group I_a of the policy) replaced by a slot-typed placeholder
  ``[withheld <slot> detail]``. M and M' differ only inside I_a, so the text is identical.
* ``TaskMin`` (AirGapAgent adaptation): a fixed, per-pair task-family subset. Rule:
  P_task = union over the trajectory's turns whose query type is ``target`` (target-relevant
  family) or ``neutral`` (same-domain family) of the read sets R_{t,g}, g in G_t (public policy,
  empty history). Positions read only by ``distractor`` queries (and positions never read) are
  excluded. With ``scope="union"`` (default, "fixed task-family subset") every turn receives the
  items at P_task ordered by position; with ``scope="turn"`` a turn receives P_task intersected
  with its own read sets.
* ``OutputFilter``: the RawReadSet conditioning; after generation the response passes through a
  deletion filter of explicit protected labels and sensitive-state phrases (:mod:`.filters`).
* ``DP-MemView (on)``: :class:`~dpmv_lib.core.memview.MemView` with ``OnlineBudget(K)``,
  eps = min_a B_a / K; ``DP-MemView (pre)``: ``PreallocatedBudget`` with C_a =
  :func:`~dpmv_lib.core.ledger.planned_charges` over the first ``plan_horizon`` queries (default 16),
  eps = min_a B_a / C_a. The response model sees only the released views' texts.
* ``DP-MemView (on, P&F)`` / ``(pre, P&F)`` (beyond the paper): the same interfaces with the
  permute-and-flip selector instead of Eq. (7) (:mod:`.selection`; same eps, ledger, caps).
* ``DP-MemView (attribute decision)`` (beyond the paper): one randomised decision per protected
  attribute, reused by every slot (:class:`~dpmv_lib.core.attribute_decision.AttributeDecisionMemView`;
  pure B_a-DP over the whole transcript); view -> attribute links from the public gold rules.
* RQ2 (contract-violating, :mod:`.variants`): ``IncompleteCharge`` (C2), ``CappedArgmax`` (C3),
  ``NoCap`` (C5), ``ScoreChannel`` (C3/C6), all online with K. IncompleteCharge keeps, on a read
  that touches several groups, the charge of the first affected attribute other than the pair's
  target (so the target's charge is the one omitted, as in Table 4).

View-based interfaces run sequentially over the trajectory per (pair, side, seed) because the
ledger carries over. The MemView RNG is seeded by (pair, EM seed), the same on M and M' (common
random numbers, as a run seeded per seed would be): each side's releases still follow Eq. (7)
exactly, so every single-transcript auditor sees the correct distributions; only the pairing of
M and M' runs is correlated. For EM-based methods each turn also records ``view_probs``: the exact
per-slot view distribution of its selector (Eq. (7) or P&F) under this side, computed by MemView's own ``_outcomes``
on the same prepared operation that is sampled (a trusted-side diagnostic for the exact optimal
auditor; never shown to a model).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Mapping, Sequence

from ..core.rationals import Number, fraction_str, to_fraction
from ..bench.benchmark import Pair
from ..core.errors import ParameterError
from .filters import DeletionFilter
from ..core.ledger import OnlineBudget, PreallocatedBudget, planned_charges
from ..core.attribute_decision import AttributeDecisionMemView
from ..core.memview import MemView
from ..core.releases import Release
from ..core.policy import Policy, Query
from ..core.scorer import LexiconScorer, Scorer
from ..core.selection import get_selector
from ..core.store import MemoryStore
from ..checks.variants import CappedArgmax, IncompleteCharge, NoCap, ScoreChannel

GUIDANCE_HEADER = "Response guidance:"
MEMORY_HEADER = "Notes from the user's memory:"
PLACEHOLDER = "[withheld {slot} detail]"

#: beyond the paper: DP-MemView with the permute-and-flip selector (no paper values)
PF_METHODS = ("DP-MemView (on, P&F)", "DP-MemView (pre, P&F)")
RQ1_METHODS = ("GenericOnly", "RawReadSet", "TypedMask", "TaskMin", "OutputFilter",
               "DP-MemView (on)", "DP-MemView (pre)") + PF_METHODS
#: beyond the paper: one randomised decision per attribute, reused by every slot
ATTRIBUTE_DECISION = "DP-MemView (attribute decision)"
#: interfaces beyond the paper's tables (not in RQ1_METHODS: a run adds them by name)
EXTRA_METHODS = (ATTRIBUTE_DECISION,)
RQ2_METHODS = ("IncompleteCharge", "CappedArgmax", "NoCap", "ScoreChannel")
SIDES = ("M", "M'")
DETERMINISTIC_SEED = -1


# ---- per-turn output -----------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnConditioning:
    """What one interface passes the response model at one turn, plus the public release.

    ``conditioning``: exactly the text the model receives besides the query. ``views``: released
    view ids (empty for memory-text methods). ``items``: memory positions whose text was passed
    (empty for view methods). ``released``: JSON-able public release extras (charged attributes,
    eps, ledger, side channels). ``view_probs``: {slot: {view id: prob}} (EM-based methods and
    GenericOnly; empty for memory-text methods). ``release``: the MemView Release (for accounting)."""

    turn: int
    conditioning: str
    views: tuple[str, ...] = ()
    items: tuple[int, ...] = ()
    released: Mapping[str, Any] = field(default_factory=dict)
    view_probs: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    release: Release | None = field(default=None, compare=False, repr=False)


def render_guidance(texts: Sequence[str]) -> str:
    """Views rendered as short guidance (the only memory-derived input of view-based methods)."""
    texts = [t for t in texts if t]
    return GUIDANCE_HEADER + "\n" + "\n".join(f"- {t}" for t in texts) if texts else ""


def render_memory(texts: Sequence[str]) -> str:
    """Memory items rendered as notes, in the given (position) order; empty items are skipped."""
    texts = [t for t in texts if t and t.strip()]
    return MEMORY_HEADER + "\n" + "\n".join(f"- {t}" for t in texts) if texts else ""


def em_seed(pair_id: str, seed: int) -> int:
    """The MemView RNG seed for (pair, EM seed): the same on both sides (common random numbers;
    each side's release distribution is still exactly Eq. (7))."""
    h = hashlib.blake2b(f"{pair_id}|{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") >> 1


# ---- interfaces ------------------------------------------------------------------------------------
class Interface:
    """Base class: ``run(pair, policy, side, seed)`` -> one TurnConditioning per turn."""

    name: ClassVar[str] = ""
    stochastic: ClassVar[bool] = False
    view_based: ClassVar[bool] = False
    violates: ClassVar[str | None] = None

    def run(self, pair: Pair, policy: Policy, side: str, seed: int | None = None,
            turns: int | None = None) -> tuple[TurnConditioning, ...]:
        """Conditioning for the first ``turns`` turns (default all) of ``pair`` on ``side``.

        ``seed``: the EM seed (>= 0) for stochastic methods; -1 or None for deterministic ones."""
        raise NotImplementedError

    def postprocess(self, response: str) -> str:
        """Applied to the generated response (identity except for OutputFilter)."""
        return response

    def seeds(self, em_seeds: Sequence[int]) -> tuple[int, ...]:
        """The seeds this method is run with: the EM seeds if stochastic, else (-1,)."""
        return tuple(em_seeds) if self.stochastic else (DETERMINISTIC_SEED,)

    # helpers
    @staticmethod
    def _queries(pair: Pair, turns: int | None) -> tuple[Query, ...]:
        qs = pair.queries
        if turns is not None:
            if turns < 0 or turns > len(qs):
                raise ParameterError(f"turns must be in 0..{len(qs)} for pair {pair.pair_id}, got {turns}")
            qs = qs[:turns]
        return qs

    @staticmethod
    def _check(pair: Pair, side: str, seed: int | None, stochastic: bool) -> MemoryStore:
        store = pair.store(side)
        if stochastic and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ParameterError(f"a stochastic method needs an EM seed >= 0, got {seed!r}")
        if not stochastic and seed not in (None, DETERMINISTIC_SEED):
            raise ParameterError(f"deterministic methods use seed {DETERMINISTIC_SEED}, got {seed!r}")
        return store


@dataclass(frozen=True)
class GenericOnly(Interface):
    """Table 8: the same fixed slot-level generic string under M and M' (memory-independent)."""

    name: ClassVar[str] = "GenericOnly"
    view_based: ClassVar[bool] = True

    def run(self, pair, policy, side, seed=None, turns=None):
        self._check(pair, side, seed, False)
        out = []
        for t, q in enumerate(self._queries(pair, turns)):
            slots = policy.route(q, ())
            views = tuple(policy.slot(g).generic for g in slots)
            out.append(TurnConditioning(
                t, render_guidance([v.text for v in views]), tuple(v.id for v in views), (),
                {"slots": [{"slot": g, "view": v.id, "mechanism": "generic"} for g, v in zip(slots, views)]},
                {g: {v.id: 1.0} for g, v in zip(slots, views)}))
        return tuple(out)


def _read_sets(policy: Policy, q: Query) -> list[tuple[str, tuple[int, ...]]]:
    return [(g, policy.read(q, g, ())) for g in policy.route(q, ())]


@dataclass(frozen=True)
class RawReadSet(Interface):
    """Table 8: the memory items at R_{t,g}, ordered by position (non-private reference)."""

    name: ClassVar[str] = "RawReadSet"

    def _items(self, pair: Pair, policy: Policy, q: Query) -> tuple[int, ...]:
        return tuple(sorted({i for _, r in _read_sets(policy, q) for i in r}))

    def _text(self, store: MemoryStore, policy: Policy, items: tuple[int, ...]) -> list[str]:
        return list(store.read(items))

    def run(self, pair, policy, side, seed=None, turns=None):
        store = self._check(pair, side, seed, False)
        out = []
        for t, q in enumerate(self._queries(pair, turns)):
            items = self._items(pair, policy, q)
            out.append(TurnConditioning(t, render_memory(self._text(store, policy, items)), (), items,
                                        {"items": list(items)}, {}))
        return tuple(out)


@dataclass(frozen=True)
class TypedMask(RawReadSet):
    """Table 8 (MemPrivacy adaptation): protected read items -> slot-typed placeholders.

    A read item is protected if its position lies in any attribute group I_a of the policy."""

    name: ClassVar[str] = "TypedMask"

    def _text(self, store, policy, items):
        protected = frozenset().union(*(a.group for a in policy.attributes))
        slot_of = dict(policy.layout)
        texts = store.read(items)
        return [PLACEHOLDER.format(slot=slot_of[i]) if i in protected else txt
                for i, txt in zip(items, texts)]


def task_positions(pair: Pair, policy: Policy) -> tuple[int, ...]:
    """TaskMin's P_task: union of read sets of the trajectory's target-relevant and same-domain
    (``neutral``) queries; positions read only by distractor queries are excluded."""
    keep: set[int] = set()
    for q in pair.queries:
        if q.qtype in ("target", "neutral"):
            for _, r in _read_sets(policy, q):
                keep.update(r)
    return tuple(sorted(keep))


@dataclass(frozen=True)
class TaskMin(RawReadSet):
    """Table 8 (AirGapAgent adaptation): the fixed task-family subset P_task (see module doc)."""

    name: ClassVar[str] = "TaskMin"
    scope: str = "union"

    def __post_init__(self) -> None:
        if self.scope not in ("union", "turn"):
            raise ParameterError(f"TaskMin scope must be 'union' or 'turn', got {self.scope!r}")

    def run(self, pair, policy, side, seed=None, turns=None):
        store = self._check(pair, side, seed, False)
        allowed = task_positions(pair, policy)
        allowed_set = set(allowed)
        out = []
        for t, q in enumerate(self._queries(pair, turns)):
            if self.scope == "union":
                items = allowed
            else:
                items = tuple(i for i in RawReadSet._items(self, pair, policy, q) if i in allowed_set)
            out.append(TurnConditioning(t, render_memory(store.read(items)), (), items,
                                        {"items": list(items)}, {}))
        return tuple(out)


@dataclass(frozen=True)
class OutputFilter(RawReadSet):
    """Table 8: RawReadSet conditioning, then post-generation deletion of protected phrases."""

    name: ClassVar[str] = "OutputFilter"
    filter: DeletionFilter = field(default_factory=DeletionFilter)

    def postprocess(self, response: str) -> str:
        return self.filter(response)


# ---- MemView-based interfaces -------------------------------------------------------------------------
class _CachedScorer:
    """Memoises a pure scorer on (intent, view id, read contents): same values, same code path."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.sensitivity = inner.sensitivity
        self._memo: dict[tuple, Fraction | float] = {}

    def __call__(self, query, view, read_contents):
        key = (query.intent, query.text, view.id, tuple(read_contents))
        v = self._memo.get(key)
        if v is None:
            if len(self._memo) > 500_000:
                self._memo.clear()
            v = self._memo[key] = self.inner(query, view, read_contents)
        return v


@dataclass(frozen=True)
class MemViewInterface(Interface):
    """A MemView (or contract-violating variant) run sequentially over the trajectory.

    ``B_a``: one cap for every attribute (None keeps the policy's caps); ``K``: online
    granularity; ``plan_horizon``: T for the preallocated plan (None = whole trajectory);
    ``exact``: exact rational sampler (True, default) or float Gumbel-max sampler (False);
    ``selector``: the C3 selector, "em" (Eq. 7) or "pf" (permute-and-flip). On
    PairedMem the DP conditioning took 0.9x-1.3x the float sampler's time in our runs
    (benchmarks/results/generation.json) and the RQ1 run stays within target, so experiments
    use the exact sampler too."""

    name: ClassVar[str] = "DP-MemView (on)"
    stochastic: ClassVar[bool] = True
    view_based: ClassVar[bool] = True
    mode: str = "online"
    variant: str = "DP-MemView"
    B_a: Fraction | None = Fraction(2)
    K: int = 3
    plan_horizon: int | None = 16
    exact: bool = True
    selector: str = "em"
    seed: int | None = None   # default EM seed of run() (None: run() must be given one)
    scorer: Any = field(default_factory=LexiconScorer, compare=False)
    _caches: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("online", "preallocated"):
            raise ParameterError(f"mode must be 'online' or 'preallocated', got {self.mode!r}")
        if self.variant not in _VARIANT_CLASSES:
            raise ParameterError(f"unknown MemView variant {self.variant!r}; known: {sorted(_VARIANT_CLASSES)}")
        if self.B_a is not None:
            object.__setattr__(self, "B_a", to_fraction(self.B_a, "B_a", positive=True, error=ParameterError))
        OnlineBudget(self.K)  # validates K
        get_selector(self.selector)  # validates the selector tag
        if self.plan_horizon is not None and (isinstance(self.plan_horizon, bool) or
                                              not isinstance(self.plan_horizon, int) or self.plan_horizon < 1):
            raise ParameterError(f"plan_horizon must be a positive int or None, got {self.plan_horizon!r}")
        object.__setattr__(self, "_caches", {"policy": {}, "scorer": _CachedScorer(self.scorer)})

    @property
    def violates(self) -> str | None:  # type: ignore[override]  # a per-instance value for a ClassVar: by design
        return _VARIANT_CLASSES[self.variant].violates

    def capped_policy(self, policy: Policy) -> Policy:
        """The policy with B_a applied to every attribute (memoised per policy object)."""
        if self.B_a is None:
            return policy
        memo = self._caches["policy"]
        hit = memo.get(id(policy))
        if hit is None or hit[0] is not policy:
            hit = memo[id(policy)] = (policy, policy.with_caps(self.B_a))
        return hit[1]

    def budget(self, policy: Policy, queries: Sequence[Query]):
        if self.mode == "online":
            return OnlineBudget(self.K)
        plan = queries if self.plan_horizon is None else queries[: self.plan_horizon]
        return PreallocatedBudget(planned_charges(policy, plan))

    def memview(self, pair: Pair, policy: Policy, side: str, seed: int) -> MemView:
        pol = self.capped_policy(policy)
        cls = _VARIANT_CLASSES[self.variant]
        kwargs: dict[str, Any] = {}
        if cls is IncompleteCharge:
            kwargs["keep"] = tuple(a for a in pol.attribute_names if a != pair.attribute)
        if isinstance(self, AttributeDecisionInterface):
            kwargs["links"] = self.view_links()
        return cls(pol, pair.store(side), budget=self.budget(pol, pair.queries), scorer=self._caches["scorer"],
                   exact=self.exact, seed=em_seed(pair.pair_id, seed), selector=self.selector, **kwargs)

    def run(self, pair, policy, side, seed=None, turns=None):
        if seed is None and self.stochastic:
            seed = self.seed
        self._check(pair, side, seed, self.stochastic)
        seed = DETERMINISTIC_SEED if seed is None else seed
        mv = self.memview(pair, policy, side, seed)
        pol = mv.policy
        history: list[Release] = []
        out = []
        for t, q in enumerate(self._queries(pair, turns)):
            hist = tuple(history)
            slots, probs = [], {}
            for g in pol.route(q, hist):
                prep = mv.prepare(q, g, hist)           # the same steps as MemView.release
                probs[g] = {sr.view: p for sr, p in mv.outcomes(prep)}
                slots.append(mv.select(prep))
            rel = mv.make_release(q, slots)
            history.append(rel)
            pub = rel.public_dict()
            del pub["query"]
            out.append(TurnConditioning(t, render_guidance(rel.guidance(pol)), tuple(s.view for s in rel.slots),
                                        (), pub, probs, rel))
        return tuple(out)


_VARIANT_CLASSES: dict[str, type[MemView]] = {
    "DP-MemView": MemView, "AttributeDecision": AttributeDecisionMemView, "IncompleteCharge": IncompleteCharge,
    "CappedArgmax": CappedArgmax,
    "NoCap": NoCap, "ScoreChannel": ScoreChannel,
}


@dataclass(frozen=True)
class DPMemViewOnline(MemViewInterface):
    name: ClassVar[str] = "DP-MemView (on)"


@dataclass(frozen=True)
class DPMemViewPre(MemViewInterface):
    name: ClassVar[str] = "DP-MemView (pre)"
    mode: str = "preallocated"


@dataclass(frozen=True)
class DPMemViewOnlinePF(MemViewInterface):
    name: ClassVar[str] = "DP-MemView (on, P&F)"
    selector: str = "pf"


@dataclass(frozen=True)
class DPMemViewPrePF(MemViewInterface):
    name: ClassVar[str] = "DP-MemView (pre, P&F)"
    mode: str = "preallocated"
    selector: str = "pf"


@dataclass(frozen=True)
class AttributeDecisionInterface(MemViewInterface):
    """One randomised decision per attribute, reused by every slot (beyond the paper; ``K`` and
    ``mode`` do not enter it). ``links``: public view id -> attributes; None reads the public
    gold rules of ``data_dir``."""

    name: ClassVar[str] = ATTRIBUTE_DECISION
    variant: str = "AttributeDecision"
    links: Mapping[str, Sequence[str]] | None = field(default=None, compare=False)
    data_dir: str = "data"

    def view_links(self) -> Mapping[str, Sequence[str]]:
        """The public view -> attribute links (read once from the gold rules when not given)."""
        if self.links is None:
            from ..bench.datasets import load_gold_rules

            object.__setattr__(self, "links", load_gold_rules(self.data_dir)["view_links"])
        assert self.links is not None
        return self.links


@dataclass(frozen=True)
class IncompleteChargeInterface(MemViewInterface):
    name: ClassVar[str] = "IncompleteCharge"
    variant: str = "IncompleteCharge"


@dataclass(frozen=True)
class CappedArgmaxInterface(MemViewInterface):
    name: ClassVar[str] = "CappedArgmax"
    stochastic: ClassVar[bool] = False   # deterministic selection: run once (C.5)
    variant: str = "CappedArgmax"


@dataclass(frozen=True)
class NoCapInterface(MemViewInterface):
    name: ClassVar[str] = "NoCap"
    variant: str = "NoCap"


@dataclass(frozen=True)
class ScoreChannelInterface(MemViewInterface):
    name: ClassVar[str] = "ScoreChannel"
    variant: str = "ScoreChannel"


METHODS: dict[str, type[Interface]] = {
    "GenericOnly": GenericOnly, "RawReadSet": RawReadSet, "TypedMask": TypedMask, "TaskMin": TaskMin,
    "OutputFilter": OutputFilter, "DP-MemView (on)": DPMemViewOnline, "DP-MemView (pre)": DPMemViewPre,
    "DP-MemView (on, P&F)": DPMemViewOnlinePF, "DP-MemView (pre, P&F)": DPMemViewPrePF,
    ATTRIBUTE_DECISION: AttributeDecisionInterface,
    "IncompleteCharge": IncompleteChargeInterface, "CappedArgmax": CappedArgmaxInterface,
    "NoCap": NoCapInterface, "ScoreChannel": ScoreChannelInterface,
}


def make_interface(method: str, *, B_a: Number | None = 2, K: int = 3, plan_horizon: int | None = 16,
                   exact: bool = True, seed: int | None = None, scorer: Scorer | None = None,
                   **kwargs: Any) -> Interface:
    """Build a compared interface by its method name (docs/architecture.md) with its parameters.

    B_a, K, plan_horizon, exact, seed (default EM seed of ``run``) and scorer apply to
    MemView-based methods; memory-text and generic methods ignore them (a deterministic method
    rejects an EM seed). Extra keyword arguments go to the interface (e.g. ``scope`` of TaskMin,
    ``filter`` of OutputFilter)::

        iface = make_interface("DP-MemView (on)", B_a=2, K=3, seed=0)
        turns = iface.run(pair, benchmark.policy(pair), "M")   # one TurnConditioning per turn
    """
    if method not in METHODS:
        raise ParameterError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    cls = METHODS[method]
    if seed is not None and not cls.stochastic and seed != DETERMINISTIC_SEED:
        raise ParameterError(f"{method} is deterministic (seed {DETERMINISTIC_SEED}); got EM seed {seed!r}")
    if seed is not None and cls.stochastic and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ParameterError(f"a stochastic method needs an EM seed >= 0, got {seed!r}")
    if issubclass(cls, MemViewInterface):
        params = dict(B_a=B_a, K=K, plan_horizon=plan_horizon, exact=exact, seed=seed, **kwargs)
        if scorer is not None:
            params["scorer"] = scorer
        return cls(**params)
    return cls(**kwargs)


def is_deterministic(method: str) -> bool:
    if method not in METHODS:
        raise ParameterError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    return not METHODS[method].stochastic


def to_json(obj: Any) -> str:
    """Canonical JSON for the transcript table (Fractions as exact strings)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_default)


def _default(o: Any) -> Any:
    if isinstance(o, Fraction):
        return fraction_str(o)
    if isinstance(o, (frozenset, set)):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
