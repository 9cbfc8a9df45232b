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

It enumerates every slot-level outcome exactly (the interface's own public steps ``route``,
``prepare`` and ``log_outcomes``, on forked in-memory ledgers), so it needs a
:class:`~dpmv_lib.core.memview.MemView` (subclass); it then cross-checks ``release()`` by
sampling and computes the exact transcript privacy loss (Theorem 1: at most B_a) in log space,
so it stays finite for large eps (inf only where the supports really differ).
``python -m dpmv_lib.checks.contract --variant all`` prints the report.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping, Sequence, cast

from ..core.errors import DPMVError, ParameterError, StoreError
from .examples import running_example
from ..core.exact import log_privacy_loss
from ..core.ledger import OnlineBudget
from ..core.memview import MemView
from ..core.releases import Release
from ..core.policy import Policy, Query
from ..core.scorer import cue_hits
from ..core.store import MemoryStore, check_adjacent
from .variants import VARIANTS
from .contract_report import CONDITIONS, ConditionResult, ContractReport, Factory, LossCheck, Strategy, TOLERANCE
from .contract_walk import Findings, PrefixIds, compare_walks, views_of, walk


# ---- a C4-violating demonstration variant -------------------------------------------------------
class MemoryRouting(MemView):
    """VIOLATES C4 (a checker demonstration; never deploy): a well-meant "skip sensitive slots"
    heuristic that drops an active slot when its memory contains cues of the slot's first
    specific view. The route G_t then depends on raw memory, which the transcript reveals even
    though every read that does happen is charged completely and sampled by Eq. (7)."""

    label = "MemoryRouting"
    violates = "C4"

    def route(self, query: Query, history: Sequence[Release] = ()) -> tuple[str, ...]:
        keep = []
        for name in super().route(query, history):
            specific = [v for v in self.policy.slot(name).views if not v.generic]
            text = " ".join(self.store.read(self.policy.positions_of(name)))
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
    F = Findings(max_evidence)
    losses, ops, sampled = [], 0, 0
    name = label
    for attr, m, mp in pairs:
        for sname, strat in strats.items():
            ctx = f"{attr} pair, {sname}"
            walks = {}
            ids = PrefixIds()
            for side, store in (("M", m), ("M'", mp)):
                w = walk(factory, policy, store, strat, horizon, ctx, side, F, max_transcripts, ids)
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
                        F.add("Enum", f"{ctx}, {side}", f"release() produced {views_of(hist)} (ledger "
                                                        f"{dict(hist[-1].ledger)}), which the hooks give probability 0")
            compare_walks(attr, walks["M"], walks["M'"], ctx, F, ids, policy.sensitivity)
            pl = log_privacy_loss(walks["M"].final, walks["M'"].final)  # log space: finite for large eps
            cap = policy.attribute(attr).cap
            losses.append(LossCheck(attr, sname, pl.max_loss, cap, pl.n_transcripts))
            if pl.max_loss > float(cap) + TOLERANCE:
                worst = cast(int, pl.worst)  # the walks key transcripts by their public id (Walk.final)
                F.add("Thm1", ctx, f"exact transcript privacy loss {pl.max_loss:.4g} > B_{attr} = {cap} "
                                   f"(worst transcript {views_of(ids.hist.get(worst, ()))})")
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
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.checks.contract",
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
