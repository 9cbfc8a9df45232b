"""The exact lockstep walk of the contract checker (:mod:`dpmv_lib.checks.contract`): every
slot-level outcome of an interface on M and M' under the same public prefix, enumerated through
its own public steps (``route``, ``prepare``, ``log_outcomes``) on forked in-memory ledgers, and
the C1-C6 comparisons of the two walks.

The walk carries natural-log probabilities (``MemView.log_outcomes``, sums by log-add), so a
view or transcript whose probability is below the float range (large eps: Pr ~ e^(-eps/2))
keeps a finite log: supports, per-slot log-ratios and the transcript loss are those of the
exact distribution, and only a probability that is exactly 0 counts as outside the support.
"""
from __future__ import annotations

import copy
import math
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from ..core.errors import ParameterError
from ..core.exact import log_add
from ..core.ledger import InMemoryLedger
from ..core.selection import exact_utility, exponential_mechanism
from ..core.memview import MemView
from ..core.releases import Release, SlotRelease
from ..core.policy import Policy, Query
from ..core.store import MemoryStore
from .contract_report import Factory, Strategy, Violation, TOLERANCE


# ---- the exact lockstep walk --------------------------------------------------------------------
def _neg_inf() -> float:
    return -math.inf


@dataclass
class _Node:
    """One (public prefix, slot) of a walk; ``reach`` and ``dist`` are natural-log probabilities."""

    hist: tuple = ()
    done: tuple = ()
    reach: float = -math.inf
    plans: set = field(default_factory=set)
    admitted: set = field(default_factory=set)
    vocab: set = field(default_factory=set)
    utils: set = field(default_factory=set)
    ledgers: set = field(default_factory=set)
    dist: dict = field(default_factory=lambda: defaultdict(_neg_inf))


class PrefixIds:
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
class Walk:
    routes: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    final: dict = field(default_factory=dict)
    ops: int = 0


class Findings:
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


def views_of(hist: tuple[Release, ...], done: tuple[SlotRelease, ...] = ()) -> str:
    turns = [",".join(s.view for s in r.slots) or "-" for r in hist]
    if done:
        turns.append(",".join(s.view for s in done) + ",...")
    return "[" + " | ".join(turns) + "]" if turns else "[start]"


def _fmt_dist(d: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:.3g}" for k, v in sorted(d.items())) + "}"


def _route_of(iface: MemView, q: Query, hist: tuple[Release, ...]) -> tuple[str, ...]:
    return tuple(iface.route(q, hist))  # the interface's own route (C4 hook)


def walk(factory: Factory, policy: Policy, store: MemoryStore, strategy: Strategy, horizon: int,
          ctx: str, side: str, F: Findings, max_transcripts: int, ids: PrefixIds) -> Walk:
    """Exact enumeration of one store's slot-level outcomes, grouped by public prefix, in log
    space: ``final`` maps each public transcript id to its log probability."""
    root = factory(policy, store)
    if not isinstance(root, MemView):
        raise ParameterError(f"check_contract needs a factory returning a MemView (subclass), got "
                             f"{type(root).__name__}")
    caps = policy.caps
    lcaps = {a: Fraction(b) for a, b in root.ledger.caps.items()}
    if lcaps != caps:
        F.add("C5", f"{ctx}, {side}", f"ledger caps {lcaps} differ from the policy caps {caps}")
    W = Walk()
    frontier: dict[int, list] = {0: [(root, 0.0)]}
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
                def route_where(t: int = t, hist: tuple[Release, ...] = hist) -> str:
                    return f"{ctx}, {side}, turn {t + 1} after {views_of(hist)}"

                F.add("C4", route_where,
                      f"route for intent {q.intent!r} is not determined by the public prefix: {_routes(set(by_route))}")
            for route, brs in by_route.items():
                partial: dict[int, tuple] = {ids.child(("turn", hid), (q, route)): ((), brs)}
                for slot in route:
                    grown: dict[int, tuple] = {}
                    for dkey, (done, bl) in partial.items():
                        node = W.nodes.get((dkey, slot))
                        if node is None:
                            node = W.nodes[(dkey, slot)] = _Node(hist, done)
                        def where(d: tuple[SlotRelease, ...] = done, s: str = slot, t: int = t,
                                  hist: tuple[Release, ...] = hist) -> str:
                            return f"{ctx}, {side}, turn {t + 1} slot {s} after {views_of(hist, d)}"

                        for b, p in bl:
                            b = _fork(b)
                            W.ops += 1
                            before = b.ledger.spent()
                            prep = b.prepare(q, slot, hist)
                            after = b.ledger.spent()
                            outs = b.log_outcomes(prep)  # (release, log Pr), Pr > 0
                            _self_checks(policy, b, prep, [(sr, math.exp(lp)) for sr, lp in outs], before,
                                         after, caps, where, F)
                            node.reach = log_add(node.reach, p)
                            node.plans.add(prep.plan)
                            node.admitted.add(bool(prep.admitted))
                            node.ledgers.add(_lkey(before))
                            if prep.admitted:
                                node.vocab.add(tuple(v.id for v in b.vocabulary(slot)))
                                node.utils.add(tuple(zip((v.id for v in prep.views),
                                                         map(exact_utility, prep.utilities))))
                            for sr, lpr in outs:
                                node.dist[sr] = log_add(node.dist[sr], p + lpr)
                                k = ids.child(dkey, sr)
                                if k not in grown:
                                    grown[k] = (done + (sr,), [])
                                grown[k][1].append((b, p + lpr))
                    partial = {k: (d, _merge(bl)) for k, (d, bl) in grown.items()}
                for dkey, (done, bl) in partial.items():
                    for b, p in bl:
                        spent = b.ledger.spent()
                        h = ids.child(("hist", hid), (dkey, _lkey(spent)))
                        if h not in ids.hist:
                            ids.hist[h] = hist + (b.make_release(q, list(done)),)
                        nxt[h].append((b, p))
        frontier = {k: _merge(v) for k, v in nxt.items()}
        if len(frontier) > max_transcripts:
            raise ParameterError(f"more than {max_transcripts} public prefixes; use a smaller horizon or example")
    W.final = {h: _log_sum(p for _, p in bl) for h, bl in frontier.items()}
    return W


def _fork(b: MemView) -> MemView:
    """``b.fork()``; for a plain InMemoryLedger a lighter copy (same spent values, empty audit
    log: the checker reads ledgers only through ``spent()``)."""
    if type(b).fork is not MemView.fork or type(b.ledger) is not InMemoryLedger:
        return b.fork()
    other = copy.copy(b)
    other.ledger = b.ledger.copy(log=False)
    return other


def _log_sum(logs: Any) -> float:
    """log of the sum of the probabilities whose logs are given (-inf for none)."""
    out = -math.inf
    for x in logs:
        out = log_add(out, x)
    return out


def _merge(branches: list) -> list:
    """Merge branches that share a public prefix AND an identical ledger state (a MemView's
    only mutable state), summing their probabilities (log-add of their log probabilities)."""
    out: dict[tuple, list] = {}
    for b, p in branches:
        k = _lkey(b.ledger.spent())
        if k in out:
            out[k][1] = log_add(out[k][1], p)
        else:
            out[k] = [b, p]
    return [(b, p) for b, p in out.values()]


def _self_checks(policy: Policy, b: MemView, prep: Any, outs: list, before: dict, after: dict,
                 caps: dict, where: Callable[[], str], F: Findings) -> None:
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


def compare_walks(attr: str, wm: Walk, wp: Walk, ctx: str, F: Findings, ids: PrefixIds,
             sensitivity: Fraction) -> None:
    """Cross-store checks under the same public prefix (C1, C2, C3, C4, C6)."""
    for key in wm.routes.keys() & wp.routes.keys():
        if wm.routes[key] != wp.routes[key]:
            hid, q = key
            hist = ids.hist[hid]
            F.add("C4", f"{ctx}, turn {len(hist) + 1} after {views_of(hist)}",
                  f"route for intent {q.intent!r} differs: M -> {_routes(wm.routes[key])}, "
                  f"M' -> {_routes(wp.routes[key])}")
    for key in wm.nodes.keys() & wp.nodes.keys():
        slot = key[1]
        nm, np_ = wm.nodes[key], wp.nodes[key]
        hist, done = nm.hist, nm.done
        def where(h: tuple[Release, ...] = hist, d: tuple[SlotRelease, ...] = done, s: str = slot) -> str:
            return f"{ctx}, M vs M', turn {len(h) + 1} slot {s} after {views_of(h, d)}"

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
            loss = max(abs(dm[v] - dp[v]) for v in common)  # log space (_project)
            if attr not in plan.charged and loss > TOLERANCE:
                F.add("C2", where, f"{attr} is not charged (charged {sorted(plan.charged)}) but the view "
                                   f"distribution depends on I_{attr}: |log ratio| = {loss:.3g}")
            elif attr in plan.charged and plan.epsilon is not None and loss > float(plan.epsilon) + TOLERANCE \
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


def _check_sensitivity(um: set, up: set, du: Fraction, where: Callable[[], str], F: Findings) -> None:
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
    """log Pr[view | node reached]: the slot's view distribution at this public prefix (log space;
    only views of positive probability)."""
    out: dict[str, float] = defaultdict(_neg_inf)
    for sr, lp in node.dist.items():
        out[sr.view] = log_add(out[sr.view], lp)
    return {v: lp - node.reach for v, lp in out.items() if lp > -math.inf}


def _routes(routes: set) -> str:
    return " / ".join("(" + ", ".join(r) + ")" for r in sorted(routes))


def _plans(plans: set) -> str:
    return "; ".join(f"read={list(p.read_set)} charged={sorted(p.charged)} eps={p.epsilon}"
                     for p in sorted(plans, key=repr))


def _vocabs(v: set) -> str:
    return " / ".join(str(sorted(x)) for x in sorted(v))


def _extras(ex: list) -> str:
    return "; ".join(", ".join(f"{k}={val}" for k, val in e) or "(nothing)" for e in ex)
