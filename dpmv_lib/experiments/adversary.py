"""Adaptive adversaries against DP-MemView (beyond the paper; Theorem 1 covers them all).

Theorem 1 bounds the privacy loss of the *adaptive* augmented transcript, but the benchmark only
plays fixed trajectories. This module adds attackers that choose each next query from the public
released history.

1. :func:`optimal_adaptive` -- the exactly optimal adaptive attacker on small instances, by
   backward induction over the tree of (query, release) histories with horizon T and a query set
   Q. Each node carries both interfaces' forked ledgers (the ledger evolves with the transcript;
   the cap blocks and returns the generic view) and the exact per-turn release probabilities of
   :mod:`.exact` (MemView's own ``_prepare``/``_outcomes``). Three exactly computable objectives,
   each maximised separately over all deterministic adaptive strategies (randomising the choice
   of query cannot help: the queries are part of the transcript, so a mixture of strategies is
   worth the average of their values):

   * ``max_loss`` = max over strategies and transcripts of positive probability of
     |log P_M(tr)/P_M'(tr)|. Leaf value |log A/B| with A, B the path masses; a node takes the max
     over queries and outcomes. (Every leaf of an adaptive tree is also a leaf of the fixed
     sequence of its queries, so adaptivity cannot raise this one; the DP confirms it.)
   * ``kl`` = max over strategies of KL(P_M || P_M') of the transcript distribution, by the chain
     rule: V(h) = max_q sum_o p(o|h,q) [log p(o|h,q)/p'(o|h,q) + V(h o)], V(leaf) = 0.
   * ``tv`` = max over strategies of the total variation between the transcript distributions,
     via W(h) = max_q sum_o W(h o) with W(leaf) = max(A, B) on the unnormalised path masses, so
     W(root) = 1 + TV; the Bayes accuracy of the best test at prior 1/2 is (1 + TV) / 2.

   For the TV- and KL-optimal trees the AUC of the likelihood-ratio test on their transcript
   distribution is also reported (AUC itself is not a per-node recursion, so it is not optimised).
   :func:`best_fixed` enumerates every fixed sequence in Q^T for comparison and
   :func:`brute_force_adaptive` enumerates every deterministic adaptive strategy (tests only).

2. :func:`greedy_attack` -- a greedy adaptive attacker on the benchmark pairs: at each turn it
   picks, from the pair's public query bank (the distinct queries of its 32-turn trajectory),
   the query whose next release has the largest expected log-likelihood-ratio separation given
   the history, the Jeffreys divergence J = KL(P||P') + KL(P'||P) = E_M[L_t] - E_M'[L_t] of the
   next release (ties broken by a seeded generator). For view-based methods with the benchmark's
   table router and read policy (history-independent) the ledger moves the same way whatever
   view is sampled (C4/C5: charges are committed from the public plan), so the next release's
   distribution, hence the greedy choice, depends on the history only through the query
   sequence; the final log-LR is then a sum of independent per-turn terms and its distribution
   is computed exactly by convolution (:mod:`.oracle`), as for the fixed trajectory. For the
   deterministic memory-text methods the oracle's likelihood model applies: a turn is separable
   (L = +-inf) iff its conditioning differs under M and M', and the greedy attacker asks a
   separating query first if the bank has one.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..core.exact import Strategy, Transcript, fixed_strategy, transcript_distribution, turn_outcomes
from ..core.memview import MemView
from ..core.releases import Release
from ..evaluate.llr import LLRDistribution, merge_atoms, mixture
from ..core.policy import Query, TableReadPolicy, TableRouter
from ..core.store import MemoryStore
from .result import Result

Factory = Callable[[MemoryStore], MemView]
TOL = 1e-12


# ---- one turn, both stores ----------------------------------------------------------------------
def turn_branches(iface_m: MemView, iface_mp: MemView, query: Query, history: Transcript
                  ) -> list[tuple[Release, float, float, MemView | None, MemView | None]]:
    """Every public release of one turn with its exact probability under M and M' and the forked
    interfaces after it (None on a side where the release has probability 0)."""
    out: dict[Release, list] = {}
    for k, iface in enumerate((iface_m, iface_mp)):
        for slots, branch, p in turn_outcomes(iface, query, history, log=False):
            rel = branch.make_release(query, slots)
            row = out.setdefault(rel, [rel, 0.0, 0.0, None, None])
            row[1 + k] += p
            row[3 + k] = branch
    return [tuple(r) for r in out.values()]


def _kl_term(p: float, q: float) -> float:
    if p <= 0:
        return 0.0
    return math.inf if q <= 0 else p * (math.log(p) - math.log(q))


# ---- 1. the exactly optimal adaptive attacker ---------------------------------------------------
@dataclass(frozen=True)
class AdaptiveOptimum:
    """Values of the optimal adaptive strategies (one per objective) and their query policies
    (released history -> index into the query set)."""

    horizon: int
    n_queries: int
    max_loss: float
    kl: float
    tv: float
    kl_policy: Mapping[Transcript, int]
    tv_policy: Mapping[Transcript, int]
    n_nodes: int

    @property
    def bayes_accuracy(self) -> float:
        return (1.0 + self.tv) / 2.0


def optimal_adaptive(make: Factory, m: MemoryStore, m_prime: MemoryStore, queries: Sequence[Query],
                     horizon: int, *, max_nodes: int = 2_000_000) -> AdaptiveOptimum:
    """Backward induction over the (query, release) tree (module docstring, objectives 1-3)."""
    qs = _check_queries(queries, horizon)
    kl_pol: dict[Transcript, int] = {}
    tv_pol: dict[Transcript, int] = {}
    count = [0]

    def solve(h: Transcript, im: MemView, imp: MemView, la: float, lb: float, a: float, b: float
              ) -> tuple[float, float, float]:
        count[0] += 1
        if count[0] > max_nodes:
            raise ParameterError(f"more than {max_nodes} tree nodes; use a smaller instance or horizon")
        if len(h) == horizon:
            return abs(la - lb), 0.0, max(a, b)
        best_ml, best_kl, best_w = -1.0, -1.0, -1.0
        arg_kl = arg_w = 0
        for qi, q in enumerate(qs):
            ml_q, kl_q, w_q = 0.0, 0.0, 0.0
            for rel, p, pp, bm, bmp in turn_branches(im, imp, q, h):
                if p > 0 and pp > 0:
                    assert bm is not None and bmp is not None  # Pr > 0 on a side => its fork (turn_branches)
                    ml, kl, w = solve(h + (rel,), bm, bmp, la + math.log(p), lb + math.log(pp), a * p, b * pp)
                    kl_q += p * (math.log(p) - math.log(pp) + kl)
                else:  # support mismatch: the whole subtree is separable
                    ml, w = math.inf, a * p + b * pp
                    kl_q += _kl_term(p, pp)
                ml_q, w_q = max(ml_q, ml), w_q + w
            best_ml = max(best_ml, ml_q)
            if kl_q > best_kl + TOL:
                best_kl, arg_kl = kl_q, qi
            if w_q > best_w + TOL:
                best_w, arg_w = w_q, qi
        kl_pol[h], tv_pol[h] = arg_kl, arg_w
        return best_ml, best_kl, best_w

    ml, kl, w = solve((), make(m), make(m_prime), 0.0, 0.0, 1.0, 1.0)
    return AdaptiveOptimum(horizon, len(qs), ml, kl, max(0.0, w - 1.0), kl_pol, tv_pol, count[0])


def policy_strategy(policy: Mapping[Transcript, int], queries: Sequence[Query]) -> Strategy:
    """The strategy that plays ``queries[policy[history]]`` (histories off the tree: query 0)."""
    qs = tuple(queries)
    return lambda history: qs[policy.get(tuple(history), 0)]


@dataclass(frozen=True)
class StrategyValue:
    """Exact metrics of one strategy's pair of transcript distributions."""

    max_loss: float
    kl: float
    tv: float
    auc: float


def distribution_metrics(dist_m: Mapping[Transcript, float], dist_mp: Mapping[Transcript, float]
                         ) -> StrategyValue:
    """max |L|, KL(P_M||P_M'), TV and the likelihood-ratio test's AUC of two transcript laws."""
    keys = [t for t in set(dist_m) | set(dist_mp) if dist_m.get(t, 0.0) > 0 or dist_mp.get(t, 0.0) > 0]
    a = np.array([dist_m.get(t, 0.0) for t in keys])
    b = np.array([dist_mp.get(t, 0.0) for t in keys])
    with np.errstate(divide="ignore"):
        llr = np.log(a) - np.log(b)
    ml = float(np.max(np.abs(llr))) if len(llr) else 0.0
    kl = float(sum(_kl_term(x, y) for x, y in zip(a, b)))
    tv = float(0.5 * np.sum(np.abs(a - b)))
    auc = merge_atoms(llr, a, b, llr.copy(), llr.copy(), 1e-9, 1_000_000).auc()
    return StrategyValue(ml, kl, tv, auc)


def strategy_value(make: Factory, m: MemoryStore, m_prime: MemoryStore, strategy: Strategy,
                   horizon: int) -> StrategyValue:
    return distribution_metrics(transcript_distribution(make, m, strategy, horizon),
                                transcript_distribution(make, m_prime, strategy, horizon))


@dataclass(frozen=True)
class FixedBest:
    """The best fixed (non-adaptive) sequence in Q^T per objective."""

    max_loss: float
    kl: float
    tv: float
    auc: float
    best_tv_sequence: tuple[int, ...]


def best_fixed(make: Factory, m: MemoryStore, m_prime: MemoryStore, queries: Sequence[Query],
               horizon: int) -> FixedBest:
    """Enumerate every fixed sequence of ``horizon`` queries from ``queries``."""
    qs = _check_queries(queries, horizon)
    best = {"max_loss": -1.0, "kl": -1.0, "tv": -1.0, "auc": -1.0}
    arg: tuple[int, ...] = ()
    for seq in itertools.product(range(len(qs)), repeat=horizon):
        chosen = tuple(qs[i] for i in seq)
        v = strategy_value(make, m, m_prime, fixed_strategy(chosen), horizon)
        if v.tv > best["tv"] + TOL:
            arg = seq
        for k in best:
            best[k] = max(best[k], getattr(v, k))
    return FixedBest(best["max_loss"], best["kl"], best["tv"], best["auc"], arg)


def brute_force_adaptive(make: Factory, m: MemoryStore, m_prime: MemoryStore, queries: Sequence[Query]
                         ) -> dict[str, float]:
    """Reference for horizon 2 (tests): enumerate every deterministic adaptive strategy (first
    query, then one query per possible first release) and return the best value per objective."""
    qs = _check_queries(queries, 2)
    best = {"max_loss": -1.0, "kl": -1.0, "tv": -1.0, "n_strategies": 0}
    for q0 in qs:
        firsts = [r for r, *_ in turn_branches(make(m), make(m_prime), q0, ())]
        for choice in itertools.product(range(len(qs)), repeat=len(firsts)):
            table = {(r,): qs[c] for r, c in zip(firsts, choice)}
            strat = lambda h, q0=q0, table=table: q0 if not h else table[tuple(h)]  # noqa: E731
            v = strategy_value(make, m, m_prime, strat, 2)
            best["n_strategies"] += 1
            for k in ("max_loss", "kl", "tv"):
                best[k] = max(best[k], getattr(v, k))
    return best


def _check_queries(queries: Sequence[Query], horizon: int) -> tuple[Query, ...]:
    qs = tuple(queries)
    if not qs or not all(isinstance(q, Query) for q in qs):
        raise ParameterError("the query set must be a non-empty sequence of Query objects")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ParameterError(f"horizon must be an int >= 1, got {horizon!r}")
    return qs


# ---- the small instances ------------------------------------------------------------------------
@dataclass(frozen=True)
class SmallInstance:
    """A policy, an adjacent pair, a query set Q and the interface factory at one cap B_a."""

    name: str
    attribute: str
    bound: float
    m: MemoryStore
    m_prime: MemoryStore
    queries: tuple[Query, ...]
    make: Factory


def running_example_instances(B_a, K: int = 2) -> list[SmallInstance]:
    """The running example (Figure 2) with every cap set to B_a, online budget K, lexicon scorer;
    Q = one query per intent; M vs M' for diabetes and for debt."""
    from ..checks.examples import running_example
    from ..core.ledger import OnlineBudget

    policy, m, m_d, m_b = running_example()
    pol = policy.with_caps(B_a)
    qs = tuple(Query(f"help with {it.replace('_', ' ')}", it) for it in pol.intents)
    make = lambda store: MemView(pol, store, budget=OnlineBudget(K), seed=0)  # noqa: E731
    return [SmallInstance(f"running example ({a})", a, float(pol.attribute(a).cap), m, mp, qs, make)
            for a, mp in (("diabetes", m_d), ("debt", m_b))]


def random_instance(seed: int, B_a, K: int = 2, adaptive_policy: bool = False) -> SmallInstance:
    """Notebook 02's random instance ``seed`` (:func:`.instances.random_case`) with caps B_a;
    ``adaptive_policy`` swaps in its history-dependent router and read policy (C4)."""
    from ..checks.instances import random_case
    from ..core.ledger import OnlineBudget

    case = random_case(seed, adaptive=adaptive_policy)
    pol = case.policy.with_caps(B_a)
    qs = tuple(Query(f"q {it}", it) for it in pol.intents)
    make = lambda store: MemView(pol, store, budget=OnlineBudget(K), scorer=case.scorer, seed=0)  # noqa: E731
    name = f"random-{seed}" + (" (adaptive router)" if adaptive_policy else "")
    return SmallInstance(name, case.attribute, float(pol.attribute(case.attribute).cap),
                         case.m, case.m_prime, qs, make)


def tight_instance(B_a, n_views: int = 6) -> SmallInstance:
    """:func:`.instances.tight_em_case`: one selection spends B_a and its loss approaches B_a."""
    from ..checks.instances import tight_em_case
    from ..core.ledger import OnlineBudget

    case = tight_em_case(n_views, cap=B_a)
    make = case.factory(budget=OnlineBudget(1))
    return SmallInstance(f"tight EM ({n_views} views)", case.attribute, float(case.bound), case.m, case.m_prime,
                         case.queries, make)


def small_instance_table(budgets: Sequence = (0.5, 1, 2, 4), horizon: int = 3,
                         random_seeds: Sequence[int] = (0, 4, 10), K: int = 2,
                         tight_views: Sequence[int] = (6, 64)) -> pd.DataFrame:
    """Optimal adaptive vs best fixed attacker on the small instances for every B_a: the running
    example (both attributes), notebook 02's random instances with the table router and with the
    history-dependent router (online K), and the tight EM case (K = 1, horizon 2: the second
    query is blocked by the cap and returns the generic view)."""
    recs = []
    for B in budgets:
        insts = running_example_instances(B, K) + [random_instance(s, B, K, ad) for s in random_seeds
                                                   for ad in (False, True)]
        insts += [tight_instance(B, n) for n in tight_views]
        for inst in insts:
            T = 2 if inst.name.startswith("tight") else horizon
            opt = optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, T)
            fx = best_fixed(inst.make, inst.m, inst.m_prime, inst.queries, T)
            tv_auc = strategy_value(inst.make, inst.m, inst.m_prime, policy_strategy(opt.tv_policy, inst.queries),
                                    T).auc
            recs.append({"instance": inst.name, "attribute": inst.attribute, "B_a": inst.bound, "T": T,
                         "|Q|": len(inst.queries), "adaptive_max_loss": opt.max_loss, "fixed_max_loss": fx.max_loss,
                         "max_loss_le_B_a": bool(opt.max_loss <= inst.bound + 1e-9),
                         "loss_over_B_a": opt.max_loss / inst.bound,
                         "adaptive_kl": opt.kl, "fixed_kl": fx.kl, "adaptive_tv": opt.tv, "fixed_tv": fx.tv,
                         "adaptive_auc_tv_tree": tv_auc, "fixed_best_auc": fx.auc, "tree_nodes": opt.n_nodes})
    return pd.DataFrame.from_records(recs)


# ---- 2. the greedy adaptive attacker on benchmark pairs ----------------------------------------
TEXT_METHODS = ("RawReadSet", "TypedMask", "TaskMin", "OutputFilter")


def query_bank(pair) -> tuple[Query, ...]:
    """The pair's public query bank: the distinct queries of its trajectory, in trajectory order."""
    seen, out = set(), []
    for q in pair.queries:
        if q not in seen:
            seen.add(q)
            out.append(q)
    return tuple(out)


def _turn_llr(branches) -> LLRDistribution:
    p = np.array([b[1] for b in branches])
    q = np.array([b[2] for b in branches])
    with np.errstate(divide="ignore"):
        llr = np.log(p) - np.log(q)
    llr[p == 0], llr[q == 0] = -np.inf, np.inf
    return merge_atoms(llr, p, q, llr.copy(), llr.copy(), 1e-9, 200_000)


def _jeffreys(branches) -> float:
    return float(sum((p - q) * (math.log(p) - math.log(q)) if p > 0 and q > 0 else
                     (math.inf if p != q else 0.0) for _, p, q, _, _ in branches))


@dataclass(frozen=True)
class AttackRun:
    """The queries one attacker played (bank indices) and the exact per-turn LLR laws."""

    method: str
    kind: str                       # "views" | "memory_text" | "generic"
    queries: tuple[int, ...]
    gains: tuple[float, ...]        # Jeffreys divergence of each played turn
    turns: tuple[LLRDistribution, ...]

    def cumulative(self) -> list[LLRDistribution]:
        """The LLR law of the transcript prefix of length 1..len(turns)."""
        out, d = [], LLRDistribution.point()
        for td in self.turns:
            if not (td.n_atoms == 1 and td.llr[0] == 0):
                d = d.convolve(td)
            out.append(d)
        return out


def _static(policy) -> bool:
    return isinstance(policy.router, TableRouter) and isinstance(policy.reader, TableReadPolicy)


def greedy_attack(pair, policy, method: str, *, adaptive: bool = True, horizon: int = 16, B_a=2, K: int = 3,
                  seed: int = 0) -> AttackRun:
    """Play ``horizon`` turns against ``method`` on ``pair``: the greedy adaptive attacker
    (``adaptive=True``) or the pair's fixed trajectory (``adaptive=False``)."""
    from ..generate.interfaces import METHODS, make_interface

    if method not in METHODS:
        raise ParameterError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= len(pair.queries):
        raise ParameterError(f"horizon must be an int in 1..{len(pair.queries)}, got {horizon!r}")
    rng = np.random.default_rng(seed)
    bank = query_bank(pair) if adaptive else tuple(pair.queries)
    if method == "GenericOnly":  # the same generic view under M and M': nothing to learn
        return AttackRun(method, "generic", tuple(range(horizon)), (0.0,) * horizon,
                         (LLRDistribution.point(),) * horizon)
    if method in TEXT_METHODS:
        return _text_attack(pair, policy, method, bank, adaptive, horizon, rng)
    iface = make_interface(method, B_a=B_a, K=K, seed=0)
    if not hasattr(iface, "memview"):
        raise ParameterError(f"greedy_attack supports RQ1 methods; {method!r} has no view release")
    mv_m, mv_mp = iface.memview(pair, policy, "M", 0), iface.memview(pair, policy, "M'", 0)
    if not _static(mv_m.policy):
        raise ParameterError("greedy_attack needs a table router and read policy (history-independent)")
    hist: tuple[Release, ...] = ()
    played, gains, turns = [], [], []
    for t in range(horizon):
        cands = range(len(bank)) if adaptive else (t,)
        scored = []
        for i in cands:
            br = turn_branches(mv_m, mv_mp, bank[i], hist)
            scored.append((_jeffreys(br), i, br))
        top = max(s[0] for s in scored)
        ties = [s for s in scored if s[0] >= top - 1e-12 * max(1.0, abs(top))] if math.isfinite(top) else \
            [s for s in scored if s[0] == top]
        g, i, br = ties[int(rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
        ledgers = {tuple(sorted(b.ledger.spent().items())) for row in br for b in row[3:] if b is not None}
        both = [row for row in br if row[3] is not None and row[4] is not None]
        if len(ledgers) != 1 or not both:
            raise ParameterError(f"{method}: the public state after a turn depends on the sampled view; "
                                 f"the exact greedy model does not apply")
        rel, _, _, mv_m, mv_mp = both[0]  # any outcome: the next turn's law does not depend on it
        hist = hist + (rel,)
        played.append(i)
        gains.append(g)
        turns.append(_turn_llr(br))
    return AttackRun(method, "views", tuple(played), tuple(gains), tuple(turns))


def _text_attack(pair, policy, method, bank, adaptive, horizon, rng) -> AttackRun:
    """Deterministic memory-text methods: a turn is separable iff its conditioning differs."""
    from ..bench.benchmark import Turn
    from ..generate.interfaces import make_interface

    iface = make_interface(method)
    base = pair.turns[0]
    bank_pair = replace(pair, turns=tuple(Turn(k, base.block, q, base.slot, base.gold) for k, q in enumerate(bank)))
    if method == "TaskMin":  # P_task is fixed by the pair's public trajectory: the same text every turn
        a, b = iface.run(pair, policy, "M", turns=1), iface.run(pair, policy, "M'", turns=1)
        diff = [a[0].conditioning != b[0].conditioning] * len(bank)
    else:
        cm = iface.run(bank_pair, policy, "M")
        cp = iface.run(bank_pair, policy, "M'")
        diff = [a.conditioning != b.conditioning for a, b in zip(cm, cp)]
    played, turns, gains = [], [], []
    for t in range(horizon):
        cands = list(range(len(bank))) if adaptive else [t]
        sep = [i for i in cands if diff[i]]
        i = (sep[int(rng.integers(len(sep)))] if sep else cands[int(rng.integers(len(cands)))]) if adaptive else t
        played.append(i)
        gains.append(math.inf if diff[i] else 0.0)
        turns.append(LLRDistribution.separable() if diff[i] else LLRDistribution.point())
    return AttackRun(method, "memory_text", tuple(played), tuple(gains), tuple(turns))


def attack_table(bench, methods: Sequence[str], *, horizon: int = 16, B_a=2, K: int = 3, seed: int = 0,
                 split: str | None = "test", workers: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leakage vs horizon of the greedy adaptive and the fixed attacker, per method.

    Returns (per_t, per_pair): per_t has one row per (method, attacker, T) with the pooled
    exact AUC of the final log-LR over pairs (mixture per attribute, macro over attributes, as
    :func:`.oracle.summary`), the mean per-pair AUC and the max realised loss; per_pair
    lists each pair's played queries and AUC at ``horizon``. The (method, attacker, pair) games
    are independent and deterministic given ``seed``; they run over ``workers`` processes
    (None: the usable cores; :func:`dpmv_lib.common.parallel.parallel_map`) with the same result for any count."""
    from ..common.parallel import parallel_map

    pairs = [p for p in bench if split is None or p.split == split]
    if not pairs:
        raise ParameterError(f"no pairs in split {split!r}")
    games = [(method, attacker, adaptive, i) for method in methods
             for attacker, adaptive in (("adaptive", True), ("fixed", False)) for i in range(len(pairs))]

    def play(game):
        method, _, adaptive, i = game
        run = greedy_attack(pairs[i], bench.policy(pairs[i]), method, adaptive=adaptive, horizon=horizon,
                            B_a=B_a, K=K, seed=seed)
        return run.kind, run.queries, run.cumulative()

    runs = iter(parallel_map(play, games, workers=workers))
    per_t, per_pair = [], []
    for method in methods:
        for attacker in ("adaptive", "fixed"):
            cums: dict[str, list[list[LLRDistribution]]] = {}
            for pair in pairs:
                kind, queries, cum = next(runs)
                cums.setdefault(pair.attribute, []).append(cum)
                per_pair.append({"method": method, "attacker": attacker, "pair_id": pair.pair_id,
                                 "attribute": pair.attribute, "kind": kind, "auc": cum[-1].auc(),
                                 "max_loss": cum[-1].max_loss(), "n_distinct_queries": len(set(queries)),
                                 "queries": " ".join(map(str, queries))})
            for T in range(1, horizon + 1):
                aucs = [mixture([c[T - 1] for c in cs]).auc() for cs in cums.values()]
                all_d = [c[T - 1] for cs in cums.values() for c in cs]
                per_t.append({"method": method, "attacker": attacker, "T": T, "pooled_auc": float(np.mean(aucs)),
                              "mean_pair_auc": float(np.mean([d.auc() for d in all_d])),
                              "max_loss": float(max(d.max_loss() for d in all_d)), "n_pairs": len(all_d)})
    return pd.DataFrame.from_records(per_t), pd.DataFrame.from_records(per_pair)


def attack_pairs(bench, n: int | None = None, seed: int = 0, split: str = "test"):
    """The pairs the greedy attacker is evaluated on: ``split`` of the track, stratified down to
    ``n`` pairs (:func:`.experiments.select_pairs`; None keeps all)."""
    from .rq1 import select_pairs

    sub = bench.subset([p.pair_id for p in bench if p.split == split])
    if len(sub) == 0:
        raise ParameterError(f"no {split!r} pairs in the {bench.track} track")
    return select_pairs(sub, n, seed)


def summary_at(per_t: pd.DataFrame, T: int) -> pd.DataFrame:
    """Adaptive vs fixed per method at horizon T (pooled AUC, mean pair AUC, max realised loss)."""
    if T not in set(per_t["T"]):
        raise ParameterError(f"horizon {T} not in the table (have {sorted(set(per_t['T']))})")
    at = per_t[per_t["T"] == T].set_index(["method", "attacker"])
    recs = []
    for method in dict.fromkeys(per_t["method"]):
        a, f = at.loc[(method, "adaptive")], at.loc[(method, "fixed")]
        recs.append({"method": method, "T": T, "adaptive_auc": a["pooled_auc"], "fixed_auc": f["pooled_auc"],
                     "delta_auc": a["pooled_auc"] - f["pooled_auc"], "adaptive_mean_pair_auc": a["mean_pair_auc"],
                     "fixed_mean_pair_auc": f["mean_pair_auc"], "adaptive_max_loss": a["max_loss"],
                     "fixed_max_loss": f["max_loss"], "n_pairs": int(a["n_pairs"])})
    return pd.DataFrame.from_records(recs)


def adaptivity_gain(small: pd.DataFrame, tol: float = 1e-9) -> pd.DataFrame:
    """:func:`small_instance_table` (``small``) with the optimal adaptive attacker's gain over the best
    fixed sequence added: ``tv_gain``, ``kl_gain`` (adaptive minus fixed) and ``helps`` (either > ``tol``)."""
    gain = small.assign(tv_gain=small["adaptive_tv"] - small["fixed_tv"],
                        kl_gain=small["adaptive_kl"] - small["fixed_kl"])
    return gain.assign(helps=(gain["tv_gain"] > tol) | (gain["kl_gain"] > tol))


def summary_markdown(small: pd.DataFrame, at_T: pd.DataFrame, T: int) -> str:
    """Notebook 06's closing summary as a Markdown list: Theorem 1 (optimal adaptive max loss <= B_a)
    on every small-instance row with the largest loss / B_a, how many rows adaptivity strictly helps
    (:func:`adaptivity_gain`), and per method the greedy adaptive vs fixed AUC and max loss at ``T``.

    Parameters
    ----------
    small : DataFrame
        :func:`small_instance_table`.
    at_T : DataFrame
        :func:`summary_at` of the greedy attacker's table at ``T``.
    T : int
        The horizon of ``at_T``.

    Returns
    -------
    str
        One ``- `` line per finding, newline-separated.
    """
    worst = small.loc[small["loss_over_B_a"].idxmax()]
    gain = adaptivity_gain(small)
    lines = [f"- small instances: optimal adaptive max loss <= B_a on all {len(small)} (instance, B_a) rows: "
             f"{bool(small['max_loss_le_B_a'].all())}; largest ratio {worst['loss_over_B_a']:.3f} "
             f"({worst['instance']}, B_a={worst['B_a']:g})",
             f"- adaptivity strictly raised TV/KL on {int(gain['helps'].sum())} "
             f"of {len(gain)} rows (max loss: never, as every adaptive leaf is a fixed-sequence leaf)"]
    for r in at_T.itertuples():
        lines.append(f"- {r.method}: AUC at T={T} adaptive {r.adaptive_auc:.3f} vs fixed {r.fixed_auc:.3f} "
                     f"(max loss {r.adaptive_max_loss:.3f} vs {r.fixed_max_loss:.3f})")
    return "\n".join(lines)


def plot_adversary(small: pd.DataFrame, per_t: pd.DataFrame, path=None):
    """Left: optimal adaptive max loss / B_a per small instance vs B_a (Theorem 1: <= 1).
    Middle / right: pooled exact AUC vs horizon, greedy adaptive (solid) vs fixed trajectory
    (dashed), for the DP-MemView methods (zoomed) and for every method."""
    from .plots import method_colors, pyplot, save_figure

    plt = pyplot()
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, g in small.groupby("instance", sort=False):
        ax0.plot(g["B_a"], g["adaptive_max_loss"] / g["B_a"], marker="o", label=name)
    ax0.axhline(1.0, color="k", lw=0.8, ls=":")
    budgets = sorted(set(small["B_a"]))
    ax0.set(xscale="log", xlabel="B_a", ylabel="optimal adaptive max loss / B_a", ylim=(0, 1.05),
            title="Exact optimal adaptive attacker")
    ax0.set_xticks(budgets, [f"{b:g}" for b in budgets])
    ax0.minorticks_off()
    ax0.legend(fontsize=6, loc="center right")
    methods = list(dict.fromkeys(per_t["method"]))
    col = method_colors(methods)
    for ax, shown in ((ax1, [m for m in methods if m.startswith("DP-MemView")]), (ax2, methods)):
        for method in shown:
            for attacker, ls in (("adaptive", "-"), ("fixed", "--")):
                g = per_t[(per_t["method"] == method) & (per_t["attacker"] == attacker)]
                ax.plot(g["T"], g["pooled_auc"], ls=ls, color=col[method], label=f"{method} ({attacker})")
        ax.set(xlabel="horizon T", ylabel="exact AUC of the final log-LR (pooled over pairs)")
        ax.legend(fontsize=6)
    ax1.set_title("DP-MemView: greedy adaptive vs fixed")
    ax2.set(ylim=(0.45, 1.02), title="All RQ1 methods")
    fig.tight_layout()
    return save_figure(fig, path)


# ---- notebook 06 steps: each takes the run (:class:`~.session.Session`) and returns a Result ------
SMALL_COLUMNS = ["instance", "attribute", "B_a", "T", "|Q|", "adaptive_max_loss", "fixed_max_loss", "loss_over_B_a",
                 "max_loss_le_B_a", "adaptive_kl", "fixed_kl", "adaptive_tv", "fixed_tv", "adaptive_auc_tv_tree",
                 "fixed_best_auc", "tree_nodes"]


def small_horizon(run) -> int:
    """The small instances' horizon: the ``dp_horizon`` parameter, else 2 in the smoke profile and 3."""
    h = run.params.get("dp_horizon")
    return int(h) if h is not None else (2 if run.profile.name == "smoke" else 3)


def small_summary(small: pd.DataFrame) -> pd.DataFrame:
    """:func:`small_instance_table` summarised per instance: the B_a values, the largest optimal
    adaptive max loss / B_a, whether it stays within B_a everywhere, and the largest TV and KL gain
    of adaptivity over the best fixed sequence with the number of rows where it strictly helps."""
    gain = adaptivity_gain(small)
    out = gain.groupby("instance", sort=False).agg(
        rows=("B_a", "size"), max_loss_over_B_a=("loss_over_B_a", "max"), within_B_a=("max_loss_le_B_a", "all"),
        max_tv_gain=("tv_gain", "max"), max_kl_gain=("kl_gain", "max"), rows_adaptivity_helps=("helps", "sum"))
    out["rows_adaptivity_helps"] = out["rows_adaptivity_helps"].astype(int)
    return out.reset_index()


def small_step(run) -> Result:
    """The exactly optimal adaptive attacker against the best fixed sequence on every small instance
    and cap (``06_optimal_small``, in full), summarised per instance."""
    from .common import markdown_table

    budgets, dp_k = run.params.get("dp_budgets", [0.5, 1, 2, 4]), int(run.params.get("dp_K", 2))
    h = small_horizon(run)
    with run.timer("small instances"):
        small = small_instance_table(budgets=budgets, horizon=h, K=dp_k)
    head = (f"Exactly optimal adaptive attacker vs best fixed sequence on small instances (online K={dp_k}, "
            f"horizon {h}; tight EM case: K=1, horizon 2). Profile {run.profile.name}.\n\n")
    run.write_table("06_optimal_small", small[SMALL_COLUMNS], head + markdown_table(small[SMALL_COLUMNS], 4))
    summ = small_summary(small)
    worst = small.loc[small["loss_over_B_a"].idxmax()]
    gain = adaptivity_gain(small)
    finding = (f"Theorem 1 (optimal adaptive max loss <= B_a) holds on {int(small['max_loss_le_B_a'].sum())} of "
               f"{len(small)} (instance, B_a) rows; the largest ratio is {worst['loss_over_B_a']:.3f} "
               f"({worst['instance']}, B_a = {worst['B_a']:g}). Adaptivity strictly raises TV or KL over the best "
               f"fixed sequence on {int(gain['helps'].sum())} rows (largest TV gain {gain['tv_gain'].max():.2e}); it "
               f"never raises the max loss.")
    return Result(f"Optimal adaptive attacker on small instances (B_a in {list(budgets)}, K = {dp_k}, horizon {h})",
                  tables={"per instance (every row: 06_optimal_small)": summ}, finding=finding, precision=4,
                  data={"small": small})


def greedy_step(run) -> Result:
    """The greedy adaptive attacker against the fixed trajectory on the PairedMem test pairs, for
    every RQ1 method: exact AUC at T (``06_greedy_at_T``), per horizon (``06_greedy_horizon``) and
    per pair (``06_greedy_pairs.csv``)."""
    from ..bench.datasets import load_benchmark
    from ..generate.interfaces import RQ1_METHODS
    from .common import markdown_table

    cfg = run.cfg
    bench = load_benchmark("pairedmem", cfg.data_dir)
    pairs = attack_pairs(bench, run.profile.pairs, cfg.seed)
    with run.timer("greedy"):
        per_t, per_pair = attack_table(pairs, RQ1_METHODS, horizon=cfg.T, B_a=cfg.B_a, K=cfg.K, seed=cfg.seed,
                                       split=None)
    at_T = summary_at(per_t, cfg.T)
    head = (f"Greedy adaptive attacker vs fixed trajectory at T={cfg.T} (B_a={cfg.B_a}, K={cfg.K}); {len(pairs)} "
            f"PairedMem test pairs; exact AUC of the final log-likelihood ratio; profile {run.profile.name}.\n\n")
    run.write_table("06_greedy_at_T", at_T, head + markdown_table(at_T, 4))
    run.write_table("06_greedy_horizon", per_t, f"Leakage vs horizon, greedy adaptive vs fixed ({len(pairs)} test "
                                                f"pairs).\n\n" + markdown_table(per_t, 4))
    per_pair.to_csv(run.tables_dir / "06_greedy_pairs.csv", index=False)
    dp = at_T[at_T["method"].str.startswith("DP-MemView")]
    top = at_T.loc[at_T["delta_auc"].idxmax()]
    finding = (f"On {len(pairs)} test pairs the DP-MemView modes' largest adaptive max loss is "
               f"{dp['adaptive_max_loss'].max():.3f} (B_a = {cfg.B_a:g}; within: "
               f"{bool((dp['adaptive_max_loss'] <= cfg.B_a + 1e-9).all())}). The largest AUC gain of adaptivity at "
               f"T = {cfg.T} is {top['delta_auc']:+.3f} ({top['method']}: {top['adaptive_auc']:.3f} vs fixed "
               f"{top['fixed_auc']:.3f}).")
    shown = at_T[["method", "adaptive_auc", "fixed_auc", "delta_auc", "adaptive_max_loss", "fixed_max_loss",
                  "n_pairs"]]
    return Result(f"Greedy adaptive attacker at T = {cfg.T}", tables={"adaptive vs fixed": shown}, finding=finding,
                  precision=4, data={"at_T": at_T, "per_t": per_t, "pairs": pairs})


def figure_step(run, small: Result, greedy: Result) -> Result:
    """:func:`plot_adversary` (``06_adaptive_adversary.png``)."""
    from .plots import pyplot

    path = run.figure_path("06_adaptive_adversary")
    pyplot().close(plot_adversary(small["small"], greedy["per_t"], path))
    return Result("The adaptive attackers").show_figure(
        "left: optimal adaptive max loss / B_a; middle, right: greedy adaptive (solid) vs fixed (dashed)", path)


def summary_step(run, small: Result, greedy: Result) -> Result:
    """Notebook 06's closing summary (:func:`summary_markdown`) and ``06_run.json``."""
    import json


    cfg = run.cfg
    (run.tables_dir / "06_run.json").write_text(json.dumps(
        {"profile": run.profile.name, "pairs": len(greedy["pairs"]), "T": cfg.T, "B_a": cfg.B_a, "K": cfg.K,
         "dp_horizon": small_horizon(run),
         "timings_s": {f"{k.replace(' ', '_')}_s": round(v, 1) for k, v in run.timer.seconds.items()}}, indent=1))
    return Result("Summary", notes=[summary_markdown(small["small"], greedy["at_T"], cfg.T)],
                  finding=f"The notebook took {run.timer.total:.0f} s on profile {run.profile.name}.")
