"""Checker for the DP-MemView interface contract C1-C6 (paper, "End-to-End Transcript Privacy").

``check_contract(factory, policy, pairs, strategies)`` runs an interface on adjacent stores
M ~_a M' under the same public prefixes and reports which conditions fail, with evidence:

* C1 common support: the vocabulary offered (and the support of the released view) must be the
  policy's fixed vocabulary V_g, the same under M and M';
* C2 complete charging: the charge set must contain Gamma*(R) computed from the PUBLIC policy,
  and a slot whose distribution depends on I_a must charge a;
* C3 private selection: an admitted charged selection must release the interface's eps-DP selector
  (Eq. (7), or permute-and-flip with ``selector="pf"``) exactly (no point
  mass / argmax), with log-ratio <= eps between M and M'; Eq. (7)'s premise
  |u_M(v) - u_M'(v)| <= Du is checked exactly, in rationals, with no tolerance;
* C4 public control: route G_t, read set, charge set, eps and the budget branch must be equal
  under M and M' given the same prefix h_{t,j};
* C5 pathwise caps: no admission with L_a + eps > B_a, ledger updated by exactly eps on admission,
  unchanged with the fixed generic view on fallback, L_a <= B_a on every path;
* C6 observable releases: nothing beside the view (e.g. a score) may differ between M and M'.

It enumerates every slot-level outcome exactly (the interface's own ``_route/_prepare/_outcomes``
hooks, on forked in-memory ledgers), so it needs a :class:`~dpmv_lib.memview.MemView` (subclass);
it then cross-checks ``release()`` by sampling and computes the exact transcript privacy loss
(Theorem 1: at most B_a). ``python -m dpmv_lib.contract --variant all`` prints the report.
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from .errors import DPMVError, ParameterError, StoreError
from .examples import running_example
from .exact import privacy_loss
from .ledger import InMemoryLedger, OnlineBudget
from .mechanism import _exact_utility
from .selection import exponential_mechanism
from .memview import MemView, Release, SlotRelease
from .policy import Policy, Query
from .scorer import cue_hits
from .store import MemoryStore, check_adjacent
from .variants import VARIANTS

Strategy = Callable[[tuple[Release, ...]], Query]
Factory = Callable[[Policy, MemoryStore], MemView]

CONDITIONS: dict[str, str] = {
    "C1": "common view support: fixed vocabulary V_g (with generic view) shared by adjacent stores",
    "C2": "complete charging: Gamma contains Gamma*(R); no uncharged attribute moves a view",
    "C3": "private selection: admitted charged views sampled by Eq. (7), log-ratio <= eps",
    "C4": "public control: route, read/charge set, eps and budget branch fixed by the prefix",
    "C5": "pathwise caps: prospective check, generic fallback, exact update, L_a <= B_a",
    "C6": "observable releases: nothing beside the view depends on raw memory",
    "Thm1": "exact transcript privacy loss <= B_a (Theorem 1 on these pairs and strategies)",
    "Enum": "release() stays inside the enumerated transcript support",
}
# Tolerance for comparisons of float probabilities / log-ratios only (exp is irrational, so these
# cannot be exact); they corroborate. The premise that decides eps-DP of Eq. (7), the utility
# sensitivity |u_M(v) - u_M'(v)| <= Du, is compared exactly (see _compare).
_TOL = 1e-9


# ---- result types -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Violation:
    """One piece of evidence: which condition, where (pair, strategy, side, prefix) and what."""

    condition: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.condition} [{self.where}] {self.detail}"


@dataclass(frozen=True)
class ConditionResult:
    condition: str
    description: str
    passed: bool
    count: int
    evidence: tuple[Violation, ...] = ()


@dataclass(frozen=True)
class LossCheck:
    """Exact max privacy loss of the augmented transcript for one pair and strategy."""

    attribute: str
    strategy: str
    max_loss: float
    cap: Fraction
    n_transcripts: int

    @property
    def ok(self) -> bool:
        return self.max_loss <= float(self.cap) + _TOL


@dataclass(frozen=True)
class ContractReport:
    """Which contract conditions an interface fails on the given pairs and strategies."""

    interface: str
    policy: str
    results: tuple[ConditionResult, ...]
    losses: tuple[LossCheck, ...]
    n_pairs: int
    n_strategies: int
    horizon: int
    operations: int
    sampled_runs: int

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.condition for r in self.results if not r.passed)

    @property
    def failed_conditions(self) -> tuple[str, ...]:
        """The failing conditions among C1-C6 only."""
        return tuple(c for c in self.failed if c.startswith("C"))

    @property
    def passed(self) -> bool:
        return not self.failed

    def result(self, condition: str) -> ConditionResult:
        for r in self.results:
            if r.condition == condition:
                return r
        raise ParameterError(f"unknown condition {condition!r}; known: {list(CONDITIONS)}")

    def table(self, evidence: int = 2) -> str:
        """A readable report: conditions x pass/FAIL with evidence."""
        worst = max(self.losses, key=lambda l: l.max_loss / float(l.cap), default=None)
        lines = [f"Contract check of {self.interface} on policy {self.policy!r}: {self.n_pairs} adjacent "
                 f"pair(s) x {self.n_strategies} strategies, horizon {self.horizon}; "
                 f"{self.operations} slot operations enumerated, {self.sampled_runs} sampled release() runs",
                 f"{'cond':<5} {'result':<6} {'#':>5}  description", "-" * 100]
        for r in self.results:
            lines.append(f"{r.condition:<5} {'pass' if r.passed else 'FAIL':<6} {r.count:>5}  {r.description}")
            if r.condition == "Thm1" and worst is not None:
                lines.append(f"{'':<19}worst: {worst.attribute} / {worst.strategy}: exact loss "
                             f"{worst.max_loss:.4g} vs B_a = {worst.cap}")
            for v in r.evidence[:evidence]:
                lines.append(f"{'':<19}- [{v.where}] {v.detail}")
        verdict = "PASSES the contract" if self.passed else f"FAILS {', '.join(self.failed)}"
        lines.append(f"=> {self.interface} {verdict}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"interface": self.interface, "policy": self.policy, "passed": self.passed,
                "failed": list(self.failed),
                "results": [{"condition": r.condition, "passed": r.passed, "count": r.count,
                             "evidence": [str(v) for v in r.evidence]} for r in self.results],
                "losses": [{"attribute": l.attribute, "strategy": l.strategy, "max_loss": l.max_loss,
                            "cap": str(l.cap)} for l in self.losses]}


# ---- a C4-violating demonstration variant -------------------------------------------------------
class MemoryRouting(MemView):
    """VIOLATES C4 (a checker demonstration; never deploy): a well-meant "skip sensitive slots"
    heuristic that drops an active slot when its memory contains cues of the slot's first
    specific view. The route G_t then depends on raw memory, which the transcript reveals even
    though every read that does happen is charged completely and sampled by Eq. (7)."""

    label = "MemoryRouting"
    violates = "C4"

    def _route(self, query: Query, history: tuple[Release, ...]) -> tuple[str, ...]:
        keep = []
        for name in super()._route(query, history):
            specific = [v for v in self.policy.slot(name).views if not v.generic]
            text = " ".join(self._store.read(self.policy.positions_of(name)))
            if not (specific and cue_hits(specific[0].cues, text) > 0):
                keep.append(name)
        return tuple(keep)


CONTRACT_VARIANTS: dict[str, type[MemView]] = {**VARIANTS, "MemoryRouting": MemoryRouting}


# ---- default pairs and strategies ---------------------------------------------------------------
def synthetic_pairs(policy: Policy, neutral: str = "nothing notable") -> list[tuple[str, MemoryStore, MemoryStore]]:
    """For any policy: M puts every cue of its slot's views at every position; M'_a replaces the
    positions of I_a by neutral text (so M ~_a M')."""
    contents = {}
    for p in policy.positions:
        cues = [c for v in policy.slot(p.slot).views if not v.generic for c in v.cues]
        contents[p.id] = " ".join(cues) if cues else neutral
    m = MemoryStore.from_policy(policy, contents, name="M")
    return [(a.name, m, m.replace({i: neutral for i in a.group}, name=f"M' (no {a.name})"))
            for a in policy.attributes]


def default_pairs(policy: Policy) -> list[tuple[str, MemoryStore, MemoryStore]]:
    """The running example's pairs (Figure 2) for that policy, else :func:`synthetic_pairs`."""
    ex, m, m_d, m_b = running_example()
    if policy.source and ex.source and policy.to_dict() == ex.to_dict():
        return [("diabetes", m, m_d), ("debt", m, m_b)]
    return synthetic_pairs(policy)


def default_strategies(policy: Policy, horizon: int) -> dict[str, Strategy]:
    """One fixed strategy per intent (repeated), a round-robin one, and an adaptive one that
    stays on an intent while it yields a specific (non-generic) view and moves on otherwise."""
    intents = list(policy.intents)
    if not intents:
        raise ParameterError("the policy has no public intents to build default strategies from")
    qs = {i: Query(f"A question about {i.replace('_', ' ')}", i) for i in intents}
    out: dict[str, Strategy] = {}
    for i in intents:
        out[f"repeat:{i}"] = (lambda q: (lambda h: q))(qs[i])
    out["round-robin"] = lambda h: qs[intents[len(h) % len(intents)]]

    def adaptive(h: tuple[Release, ...]) -> Query:
        if not h:
            return qs[intents[0]]
        last = h[-1]
        k = intents.index(last.query.intent) if last.query.intent in intents else 0
        specific = any(not policy.view(s.view).generic for s in last.slots)
        return qs[intents[k if specific else (k + 1) % len(intents)]]

    out["adaptive"] = adaptive
    return out


def _strategy(s: Strategy | Sequence[Query]) -> Strategy:
    if callable(s):
        return s
    qs = tuple(s)
    if not all(isinstance(q, Query) for q in qs):
        raise ParameterError("a strategy must be a callable history -> Query or a list of Query objects")
    return lambda h: qs[len(h) % len(qs)]


# ---- the exact lockstep walk --------------------------------------------------------------------
@dataclass
class _Node:
    hist: tuple = ()
    done: tuple = ()
    reach: float = 0.0
    plans: set = field(default_factory=set)
    admitted: set = field(default_factory=set)
    vocab: set = field(default_factory=set)
    utils: set = field(default_factory=set)
    ledgers: set = field(default_factory=set)
    dist: dict = field(default_factory=lambda: defaultdict(float))


class _Ids:
    """Interns public prefixes as small integers (shared by the M and M' walks, so the same
    public prefix gets the same id on both sides and nothing is re-hashed)."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self.hist: dict[int, tuple[Release, ...]] = {0: ()}

    def child(self, parent: Any, item: Any) -> int:
        k = (parent, item)
        i = self._ids.get(k)
        if i is None:
            i = self._ids[k] = len(self._ids) + 1
        return i

    def get(self, parent: Any, item: Any) -> int | None:
        return self._ids.get((parent, item))

    def history_id(self, hist: Sequence[Release]) -> int | None:
        """The id of a released history, or None if no walk ever reached it."""
        hid: int | None = 0
        for rel in hist:
            key = self.get(("turn", hid), (rel.query, tuple(s.slot for s in rel.slots)))
            for sr in rel.slots:
                key = None if key is None else self.get(key, sr)
            hid = None if key is None else self.get(("hist", hid), (key, _lkey(dict(rel.ledger))))
            if hid is None:
                return None
        return hid


def _lkey(spent: Mapping[str, Fraction]) -> tuple:
    return tuple((a, v.numerator, v.denominator) for a, v in sorted(spent.items()))


@dataclass
class _Walk:
    routes: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    final: dict = field(default_factory=dict)
    ops: int = 0


class _Findings:
    def __init__(self, max_evidence: int) -> None:
        self.count: dict[str, int] = defaultdict(int)
        self.evidence: dict[str, list[Violation]] = defaultdict(list)
        self.seen: set[tuple[str, str]] = set()
        self.max_evidence = max_evidence

    def add(self, cond: str, where: str | Callable[[], str], detail: str) -> None:
        self.count[cond] += 1
        if (cond, detail) in self.seen or len(self.evidence[cond]) >= self.max_evidence:
            return
        self.seen.add((cond, detail))
        self.evidence[cond].append(Violation(cond, where() if callable(where) else where, detail))


def _views_of(hist: tuple[Release, ...], done: tuple[SlotRelease, ...] = ()) -> str:
    turns = [",".join(s.view for s in r.slots) or "-" for r in hist]
    if done:
        turns.append(",".join(s.view for s in done) + ",...")
    return "[" + " | ".join(turns) + "]" if turns else "[start]"


def _fmt_dist(d: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:.3g}" for k, v in sorted(d.items())) + "}"


def _route_of(iface: MemView, q: Query, hist: tuple[Release, ...]) -> tuple[str, ...]:
    hook = getattr(iface, "_route", None)
    return tuple(hook(q, hist)) if hook is not None else tuple(iface.policy.route(q, hist))


def _walk(factory: Factory, policy: Policy, store: MemoryStore, strategy: Strategy, horizon: int,
          ctx: str, side: str, F: _Findings, max_transcripts: int, ids: _Ids) -> _Walk:
    """Exact enumeration of one store's slot-level outcomes, grouped by public prefix."""
    root = factory(policy, store)
    if not isinstance(root, MemView):
        raise ParameterError(f"check_contract needs a factory returning a MemView (subclass), got "
                             f"{type(root).__name__}")
    caps = policy.caps
    lcaps = {a: Fraction(b) for a, b in root.ledger.caps.items()}
    if lcaps != caps:
        F.add("C5", f"{ctx}, {side}", f"ledger caps {lcaps} differ from the policy caps {caps}")
    W = _Walk()
    frontier: dict[int, list] = {0: [(root, 1.0)]}
    for t in range(horizon):
        nxt: dict[int, list] = defaultdict(list)
        for hid, branches in frontier.items():
            hist = ids.hist[hid]
            q = strategy(hist)
            by_route: dict[tuple, list] = defaultdict(list)
            for b, p in branches:
                by_route[_route_of(b, q, hist)].append((b, p))
            W.routes[(hid, q)] = set(by_route)
            if len(by_route) > 1:
                F.add("C4", lambda: f"{ctx}, {side}, turn {t + 1} after {_views_of(hist)}",
                      f"route for intent {q.intent!r} is not determined by the public prefix: {_routes(set(by_route))}")
            for route, brs in by_route.items():
                partial: dict[int, tuple] = {ids.child(("turn", hid), (q, route)): ((), brs)}
                for slot in route:
                    grown: dict[int, tuple] = {}
                    for dkey, (done, bl) in partial.items():
                        node = W.nodes.get((dkey, slot))
                        if node is None:
                            node = W.nodes[(dkey, slot)] = _Node(hist, done)
                        where = (lambda d=done, s=slot: f"{ctx}, {side}, turn {t + 1} slot {s} after "
                                                        f"{_views_of(hist, d)}")
                        for b, p in bl:
                            b = _fork(b)
                            W.ops += 1
                            before = b.ledger.spent()
                            prep = b._prepare(q, slot, hist)
                            after = b.ledger.spent()
                            outs = [(sr, pr) for sr, pr in b._outcomes(prep) if pr > 0]
                            _self_checks(policy, b, prep, outs, before, after, caps, where, F)
                            node.reach += p
                            node.plans.add(prep.plan)
                            node.admitted.add(bool(prep.admitted))
                            node.ledgers.add(_lkey(before))
                            if prep.admitted:
                                node.vocab.add(tuple(v.id for v in b._vocabulary(slot)))
                                node.utils.add(tuple(zip((v.id for v in prep.views),
                                                         map(_exact_utility, prep.utilities))))
                            for sr, pr in outs:
                                node.dist[sr] += p * pr
                                k = ids.child(dkey, sr)
                                if k not in grown:
                                    grown[k] = (done + (sr,), [])
                                grown[k][1].append((b, p * pr))
                    partial = {k: (d, _merge(bl)) for k, (d, bl) in grown.items()}
                for dkey, (done, bl) in partial.items():
                    for b, p in bl:
                        spent = b.ledger.spent()
                        h = ids.child(("hist", hid), (dkey, _lkey(spent)))
                        if h not in ids.hist:
                            ids.hist[h] = hist + (b._make_release(q, list(done)),)
                        nxt[h].append((b, p))
        frontier = {k: _merge(v) for k, v in nxt.items()}
        if len(frontier) > max_transcripts:
            raise ParameterError(f"more than {max_transcripts} public prefixes; use a smaller horizon or example")
    W.final = {h: sum(p for _, p in bl) for h, bl in frontier.items()}
    return W


def _fork(b: MemView) -> MemView:
    """``b.fork()``; for a plain InMemoryLedger a lighter copy (same spent values, empty audit
    log: the checker reads ledgers only through ``spent()``)."""
    if type(b).fork is not MemView.fork or type(b.ledger) is not InMemoryLedger:
        return b.fork()
    led = copy.copy(b.ledger)
    led._spent = dict(b.ledger._spent)
    led._lock = threading.Lock()
    led.log = []
    other = copy.copy(b)
    other.ledger = led
    return other


def _merge(branches: list) -> list:
    """Merge branches that share a public prefix AND an identical ledger state (a MemView's
    only mutable state), summing their probabilities."""
    out: dict[tuple, list] = {}
    for b, p in branches:
        k = _lkey(b.ledger.spent())
        if k in out:
            out[k][1] += p
        else:
            out[k] = [b, p]
    return [(b, p) for b, p in out.values()]


def _self_checks(policy: Policy, b: MemView, prep: Any, outs: list, before: dict, after: dict,
                 caps: dict, where: Callable[[], str], F: _Findings) -> None:
    """Single-store checks of one slot-level operation (C1, C2, C3, C5)."""
    plan = prep.plan
    slot = policy.slot(plan.slot)
    gamma = policy.charge_set(plan.read_set)  # Gamma*(R) from the PUBLIC policy
    for a in caps:
        if after.get(a, Fraction(0)) > caps[a]:
            F.add("C5", where, f"ledger L_{a} = {after[a]} exceeds its cap B_{a} = {caps[a]}")
    if not prep.admitted:
        if any(after.get(a) != before.get(a) for a in caps):
            F.add("C5", where, f"fallback changed the ledger: {before} -> {after}")
        if [sr.view for sr, _ in outs] != [slot.generic.id]:
            F.add("C5", where, f"fallback released {sorted({sr.view for sr, _ in outs})} instead of the "
                               f"fixed generic view {slot.generic.id}")
        return
    eps = plan.epsilon
    missing = gamma - plan.charged
    if missing and plan.read_set:
        F.add("C2", where, f"read {list(plan.read_set)} touches {sorted(gamma)} but charges only "
                           f"{sorted(plan.charged)} (missed: {sorted(missing)})")
    for a in plan.charged:
        if a not in caps:
            F.add("C2", where, f"charges unknown attribute {a!r}")
            continue
        if before[a] + eps > caps[a]:
            F.add("C5", where, f"admitted eps={eps} on {a} although L_{a} + eps = {before[a] + eps} > "
                               f"B_{a} = {caps[a]}")
        if after[a] - before[a] != eps:
            F.add("C5", where, f"ledger of {a} moved by {after[a] - before[a]}, not by eps = {eps}")
    for a in caps:
        if a not in plan.charged and after.get(a) != before.get(a):
            F.add("C5", where, f"ledger of uncharged attribute {a} changed: {before[a]} -> {after[a]}")
    views = [v.id for v in prep.views]
    policy_views = list(slot.view_ids)
    if sorted(views) != sorted(policy_views):
        F.add("C1", where, f"offered vocabulary {sorted(views)} is not the public V_{slot.name} {sorted(policy_views)}")
    got: dict[str, float] = defaultdict(float)
    for sr, pr in outs:
        got[sr.view] += pr
    outside = sorted(set(got) - set(views))
    if outside:
        F.add("C1", where, f"released views {outside} outside the offered vocabulary")
        return
    sel = getattr(b, "selector", None) or exponential_mechanism()  # C3: the interface's eps-DP selector
    expect = dict(zip(views, sel.probabilities(prep.utilities, eps, policy.sensitivity)))
    if any(abs(got.get(v, 0.0) - expect[v]) > 1e-9 for v in views):
        if len(got) == 1 and len(views) > 1:
            F.add("C3", where, f"deterministic release: point mass on {next(iter(got))} where {sel.label} "
                               f"gives {_fmt_dist(expect)}")
        else:
            F.add("C3", where, f"view distribution {_fmt_dist(got)} is not {sel.label} {_fmt_dist(expect)}")


def _compare(attr: str, wm: _Walk, wp: _Walk, ctx: str, F: _Findings, ids: _Ids,
             sensitivity: Fraction) -> None:
    """Cross-store checks under the same public prefix (C1, C2, C3, C4, C6)."""
    for key in wm.routes.keys() & wp.routes.keys():
        if wm.routes[key] != wp.routes[key]:
            hid, q = key
            hist = ids.hist[hid]
            F.add("C4", f"{ctx}, turn {len(hist) + 1} after {_views_of(hist)}",
                  f"route for intent {q.intent!r} differs: M -> {_routes(wm.routes[key])}, "
                  f"M' -> {_routes(wp.routes[key])}")
    for key in wm.nodes.keys() & wp.nodes.keys():
        slot = key[1]
        nm, np_ = wm.nodes[key], wp.nodes[key]
        hist, done = nm.hist, nm.done
        where = (lambda h=hist, d=done, s=slot: f"{ctx}, M vs M', turn {len(h) + 1} slot {s} after "
                                                f"{_views_of(h, d)}")
        if nm.plans != np_.plans or len(nm.plans) > 1:
            fields = sorted({f for a in nm.plans for c in np_.plans
                             for f in ("read_set", "charged", "epsilon", "affected") if getattr(a, f) != getattr(c, f)})
            F.add("C4", where, f"slot plan differs ({', '.join(fields) or 'not unique'}): "
                               f"M {_plans(nm.plans)} vs M' {_plans(np_.plans)}")
            continue
        if nm.ledgers != np_.ledgers or len(nm.ledgers) > 1:
            F.add("C4", where, f"hidden ledger state differs: M {sorted(nm.ledgers)} vs M' {sorted(np_.ledgers)}")
            continue
        if nm.admitted != np_.admitted or len(nm.admitted) > 1:
            F.add("C4", where, f"budget branch differs: admitted under M {sorted(nm.admitted)}, under M' "
                               f"{sorted(np_.admitted)}")
            continue
        vocab_differs = nm.vocab != np_.vocab
        if vocab_differs:
            F.add("C1", where, f"vocabulary differs: M offers {_vocabs(nm.vocab)}, M' offers {_vocabs(np_.vocab)}")
        plan = next(iter(nm.plans))
        _check_sensitivity(nm.utils, np_.utils, sensitivity, where, F)
        dm, dp = _project(nm), _project(np_)
        if set(dm) != set(dp):
            only = f"only under M: {sorted(set(dm) - set(dp))}; only under M': {sorted(set(dp) - set(dm))}"
            if vocab_differs:
                F.add("C1", where, f"view support differs ({only})")
            elif len(dm) == 1 or len(dp) == 1:
                F.add("C3", where, f"deterministic, store-dependent release ({only})")
            elif attr not in plan.charged:
                F.add("C2", where, f"{attr} is not charged but the view support depends on I_{attr} ({only})")
            else:
                F.add("C1", where, f"view support differs ({only})")
        common = set(dm) & set(dp)
        if common:
            loss = max(abs(math.log(dm[v]) - math.log(dp[v])) for v in common)
            if attr not in plan.charged and loss > _TOL:
                F.add("C2", where, f"{attr} is not charged (charged {sorted(plan.charged)}) but the view "
                                   f"distribution depends on I_{attr}: |log ratio| = {loss:.3g}")
            elif attr in plan.charged and plan.epsilon is not None and loss > float(plan.epsilon) + _TOL \
                    and not vocab_differs:
                F.add("C3", where, f"view log-ratio {loss:.3g} exceeds eps = {plan.epsilon}")
        for v in common:
            rm = {sr for sr in nm.dist if sr.view == v}
            rp = {sr for sr in np_.dist if sr.view == v}
            if rm != rp:
                ex_m = sorted({sr.extras for sr in rm}, key=repr)
                ex_p = sorted({sr.extras for sr in rp}, key=repr)
                if ex_m != ex_p:
                    F.add("C6", where, f"with view {v} the release also exposes {_extras(ex_m)} under M but "
                                       f"{_extras(ex_p)} under M' (a memory-dependent observable; C3/C6)")
                else:
                    F.add("C4", where, f"public release fields differ for view {v}: {sorted(rm, key=repr)} vs "
                                       f"{sorted(rp, key=repr)}")


def _check_sensitivity(um: set, up: set, du: Fraction, where: Callable[[], str], F: _Findings) -> None:
    """C3 premise of Eq. (7), exactly: |u_M(v) - u_M'(v)| <= Du for every view offered on both
    sides (rational arithmetic, no tolerance: an excess of 1e-17 is a violation)."""
    ups = [dict(b) for b in up]
    for a in um:
        for ub in ups:
            for v, x in a:
                if v in ub and abs(x - ub[v]) > du:
                    F.add("C3", where, f"utility of view {v} moves by {abs(x - ub[v])} = Du + "
                                       f"{abs(x - ub[v]) - du} > Du = {du} between M and M' (exact check of "
                                       f"Eq. 7's premise)")


def _project(node: _Node) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for sr, p in node.dist.items():
        out[sr.view] += p / node.reach
    return {v: p for v, p in out.items() if p > 0}


def _routes(routes: set) -> str:
    return " / ".join("(" + ", ".join(r) + ")" for r in sorted(routes))


def _plans(plans: set) -> str:
    return "; ".join(f"read={list(p.read_set)} charged={sorted(p.charged)} eps={p.epsilon}"
                     for p in sorted(plans, key=repr))


def _vocabs(v: set) -> str:
    return " / ".join(str(sorted(x)) for x in sorted(v))


def _extras(ex: list) -> str:
    return "; ".join(", ".join(f"{k}={val}" for k, val in e) or "(nothing)" for e in ex)


# ---- the checker ------------------------------------------------------------------------------
def check_contract(factory: Factory, policy: Policy,
                   pairs: Sequence[tuple[str, MemoryStore, MemoryStore]] | None = None,
                   strategies: Mapping[str, Strategy | Sequence[Query]] | None = None, *,
                   horizon: int = 3, samples: int = 10, label: str | None = None,
                   max_evidence: int = 3, max_transcripts: int = 50_000) -> ContractReport:
    """Check C1-C6 for ``factory(policy, store)`` on adjacent pairs (attribute, M, M') and named
    query strategies (callables history -> Query, or query lists), enumerating every
    slot-level outcome for ``horizon`` turns; ``samples`` release() runs per side cross-check
    the enumeration. Returns a :class:`ContractReport` with evidence for every failure."""
    if not isinstance(policy, Policy):
        raise ParameterError(f"check_contract needs a Policy, got {type(policy).__name__}")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ParameterError(f"horizon must be an integer >= 1, got {horizon!r}")
    pairs = list(pairs) if pairs is not None else default_pairs(policy)
    if not pairs:
        raise StoreError("check_contract needs at least one adjacent pair (attribute, M, M')")
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 3):
            raise StoreError(f"each pair must be (attribute, M, M'), got {item!r}")
        a, m, mp = item
        check_adjacent(m, mp, policy, a)
    strats = {k: _strategy(s) for k, s in (strategies or default_strategies(policy, horizon)).items()}
    F = _Findings(max_evidence)
    losses, ops, sampled = [], 0, 0
    name = label
    for attr, m, mp in pairs:
        for sname, strat in strats.items():
            ctx = f"{attr} pair, {sname}"
            walks = {}
            ids = _Ids()
            for side, store in (("M", m), ("M'", mp)):
                w = _walk(factory, policy, store, strat, horizon, ctx, side, F, max_transcripts, ids)
                walks[side] = w
                ops += w.ops
                for _ in range(samples):  # release() must follow the enumerated distribution
                    iface = factory(policy, store)
                    name = name or getattr(iface, "label", type(iface).__name__)
                    hist: tuple[Release, ...] = ()
                    for _t in range(horizon):
                        hist = hist + (iface.release(strat(hist), hist),)
                    sampled += 1
                    if ids.history_id(hist) not in w.final:
                        F.add("Enum", f"{ctx}, {side}", f"release() produced {_views_of(hist)} (ledger "
                                                        f"{dict(hist[-1].ledger)}), which the hooks give probability 0")
            _compare(attr, walks["M"], walks["M'"], ctx, F, ids, policy.sensitivity)
            pl = privacy_loss(walks["M"].final, walks["M'"].final)
            cap = policy.attribute(attr).cap
            losses.append(LossCheck(attr, sname, pl.max_loss, cap, pl.n_transcripts))
            if pl.max_loss > float(cap) + _TOL:
                F.add("Thm1", ctx, f"exact transcript privacy loss {pl.max_loss:.4g} > B_{attr} = {cap} "
                                   f"(worst transcript {_views_of(ids.hist.get(pl.worst, ()))})")
    results = tuple(ConditionResult(c, d, F.count[c] == 0, F.count[c], tuple(F.evidence[c]))
                    for c, d in CONDITIONS.items())
    return ContractReport(name or "interface", policy.name, results, tuple(losses), len(pairs), len(strats),
                          horizon, ops, sampled)


def variant_factory(cls: type[MemView], budget: Any = None, seed: int | None = 0) -> Factory:
    """(policy, store) -> cls(policy, store, budget=..., seed=...)."""
    return lambda policy, store: cls(policy, store, budget=budget if budget is not None else OnlineBudget(3),
                                     seed=seed)


# ---- CLI ----------------------------------------------------------------------------------------
def _summary(reports: dict[str, ContractReport]) -> str:
    conds = list(CONDITIONS)
    lines = [f"{'interface':<26} {'violates':<9} " + " ".join(f"{c:<5}" for c in conds), "-" * 90]
    for name, r in reports.items():
        viol = getattr(CONTRACT_VARIANTS.get(name), "violates", None) or "-"
        lines.append(f"{name:<26} {viol:<9} " + " ".join(f"{'ok' if r.result(c).passed else 'FAIL':<5}" for c in conds))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.contract",
                                 description="Check an interface against the DP-MemView contract C1-C6.")
    ap.add_argument("--variant", default="DP-MemView",
                    help=f"interface to check: one of {sorted(CONTRACT_VARIANTS)} or 'all' (default DP-MemView)")
    ap.add_argument("--policy", default=None, help="policy JSON file (default: the paper's running example); "
                    "adjacent pairs are then built by synthetic_pairs()")
    ap.add_argument("--horizon", type=int, default=3, help="turns to enumerate per strategy (default 3)")
    ap.add_argument("--K", type=int, default=3, help="online budget: eps = min B_a / K (default 3)")
    ap.add_argument("--samples", type=int, default=5, help="release() runs per side cross-checking the enumeration")
    ap.add_argument("--evidence", type=int, default=2, help="evidence lines per failing condition")
    args = ap.parse_args(argv)
    try:
        policy = Policy.load(args.policy) if args.policy else running_example()[0]
        names = list(CONTRACT_VARIANTS) if args.variant == "all" else [args.variant]
        for n in names:
            if n not in CONTRACT_VARIANTS:
                raise ParameterError(f"unknown variant {n!r}; choose from {sorted(CONTRACT_VARIANTS)} or 'all'")
        reports = {}
        for n in names:
            rep = check_contract(variant_factory(CONTRACT_VARIANTS[n], OnlineBudget(args.K)), policy,
                                 horizon=args.horizon, samples=args.samples, label=n)
            reports[n] = rep
            print(rep.table(evidence=args.evidence))
            print()
        if len(reports) > 1:
            print(_summary(reports))
    except DPMVError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if all(r.passed for r in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
