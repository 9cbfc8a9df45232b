"""RQ2 C1 support failure: :class:`~dpmv_lib.checks.variants.StoreDependentVocabulary` (and any
interface) run in lockstep on M and M' under the same public prefix; the exact view supports show
which views have positive probability under one store and zero under the other.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ..core.errors import ParameterError
from ..core.memview import MemView
from ..core.releases import Release, SlotRelease
from ..core.policy import Policy, Query, TableReadPolicy, TableRouter
from ..core.store import MemoryStore
from ..evaluate.audit import require_columns


# ---- lockstep runs on M and M' (C1 support, exact view distributions) ---------------------------------
@dataclass(frozen=True)
class SlotStep:
    """One slot-level operation run on M and M' under the same public prefix: the public plan,
    the admission decision and the exact view distribution on each side (``_outcomes``)."""

    turn: int
    slot: str
    read_set: tuple[int, ...]
    affected: frozenset[str]
    charged: frozenset[str]
    epsilon: Fraction | None
    admitted: bool
    mechanism: str
    probs_m: Mapping[str, float] = field(hash=False)
    probs_mp: Mapping[str, float] = field(hash=False)
    public_equal: bool = True


class MemoScorer:
    """Memoises a pure scorer on (intent, query text, view id, read contents) (same values)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sensitivity = inner.sensitivity
        self._memo: dict[tuple, float] = {}

    def __call__(self, query: Query, view: Any, read_contents: Sequence[str]) -> float:
        k = (query.intent, query.text, view.id, tuple(read_contents))
        v = self._memo.get(k)
        if v is None:
            if len(self._memo) > 1_000_000:
                self._memo.clear()
            v = self._memo[k] = self.inner(query, view, read_contents)
        return v


def history_free(policy: Policy) -> bool:
    """True if the policy's router and read policy ignore the released history (table policies)."""
    return isinstance(policy.router, TableRouter) and isinstance(policy.reader, TableReadPolicy)


def lockstep_steps(policy: Policy, m: MemoryStore, m_prime: MemoryStore, queries: Sequence[Query], *,
                   budget: Any, variant: type[MemView] = MemView, scorer: Any = None, seed: int = 0,
                   variant_kwargs: Mapping[str, Any] | None = None) -> list[SlotStep]:
    """Run ``variant`` on M and M' side by side over a fixed query plan, under the same public
    prefix, through the interface's own public steps (``route``, ``prepare`` - which performs the
    C5 check and ledger update -, ``outcomes``); nothing is sampled unless the router needs history.

    For a history-free policy the public ledger path does not depend on the sampled views
    (C4/C5), so the per-step distributions are exact for every realisation. Otherwise the
    history is the M side's sampled release, identical for both sides (one realised prefix)."""
    kw = dict(variant_kwargs or {})
    args = dict(budget=budget, seed=seed, **({"scorer": scorer} if scorer is not None else {}))
    mv, mvp = variant(policy, m, **args, **kw), variant(policy, m_prime, **args, **kw)
    free = history_free(policy)
    hist: list[Release] = []
    steps: list[SlotStep] = []
    for t, q in enumerate(queries):
        h = () if free else tuple(hist)
        route, route_p = mv.route(q, h), mvp.route(q, h)
        if tuple(route) != tuple(route_p):  # C4 broken: the public control itself differs
            steps.append(SlotStep(t, "|".join(route), (), frozenset(), frozenset(), None, False, "route",
                                  {"|".join(route): 1.0}, {"|".join(route_p): 1.0}, False))
            break
        done = []
        for g in route:
            prep, prep_p = mv.prepare(q, g, h), mvp.prepare(q, g, h)
            equal = prep.plan == prep_p.plan and prep.admitted == prep_p.admitted
            out, out_p = mv.outcomes(prep), mvp.outcomes(prep_p)
            pm = _probs(out)
            pq = _probs(out_p)
            mech = out[0][0].mechanism
            steps.append(SlotStep(t, g, prep.plan.read_set, prep.plan.affected, prep.plan.charged,
                                  prep.plan.epsilon, bool(prep.admitted), mech, pm, pq, equal))
            if not free:
                done.append(mv.select(prep))
        if not free:
            hist.append(mv.make_release(q, done))
    return steps


def _probs(outcomes: Sequence[tuple[SlotRelease, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for sr, p in outcomes:
        out[sr.view] = out.get(sr.view, 0.0) + float(p)
    return out


def one_sided(p_m: Mapping[str, float], p_mp: Mapping[str, float]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """C1: views released with positive probability under M but zero under M', and vice versa."""
    sm = {v for v, p in p_m.items() if p > 0}
    sq = {v for v, p in p_mp.items() if p > 0}
    return tuple(sorted(sm - sq)), tuple(sorted(sq - sm))


def support_records(steps: Sequence[SlotStep], **meta: Any) -> pd.DataFrame:
    """Per slot-level operation: supports, one-sided views and their probability mass per side."""
    recs = []
    for s in steps:
        only_m, only_mp = one_sided(s.probs_m, s.probs_mp)
        recs.append({**meta, "turn": s.turn, "slot": s.slot, "admitted": s.admitted,
                     "n_support_M": sum(p > 0 for p in s.probs_m.values()),
                     "n_support_Mp": sum(p > 0 for p in s.probs_mp.values()),
                     "only_M": json.dumps(list(only_m)), "only_Mp": json.dumps(list(only_mp)),
                     "mass_only_M": float(sum(s.probs_m[v] for v in only_m)),
                     "mass_only_Mp": float(sum(s.probs_mp[v] for v in only_mp)),
                     "failure": bool(only_m or only_mp)})
    return pd.DataFrame.from_records(recs)


def detection_probability(masses: Iterable[float]) -> float:
    """P[at least one release that is impossible under the other store] over independent
    slot-level operations with one-sided masses ``masses``: 1 - prod(1 - m). Such a transcript
    has probability 0 under the other store (privacy loss +inf)."""
    prod = 1.0
    for x in masses:
        if not 0 <= x <= 1 + 1e-12:
            raise ParameterError(f"a probability mass must lie in [0, 1], got {x}")
        prod *= max(0.0, 1.0 - x)
    return 1.0 - prod


def support_failure_summary(records: pd.DataFrame, by: str = "variant") -> pd.DataFrame:
    """Per ``by`` (e.g. variant): pairs, pairs with a support failure, slot operations and failing
    ones, one-sided views, and the mean probability that a transcript on M (resp. M') contains a
    release impossible under the other store."""
    require_columns(records, {by, "pair_id", "failure", "mass_only_M", "mass_only_Mp", "only_M", "only_Mp"},
             "support records")
    recs = []
    for key, g in records.groupby(by, sort=False):
        per_pair = g.groupby("pair_id").agg(fail=("failure", "any"),
                                            det_m=("mass_only_M", detection_probability),
                                            det_mp=("mass_only_Mp", detection_probability))
        n_views = int(sum(len(json.loads(x)) for x in g["only_M"]) + sum(len(json.loads(x)) for x in g["only_Mp"]))
        recs.append({by: key, "pairs": int(len(per_pair)), "pairs_with_failure": int(per_pair["fail"].sum()),
                     "share_pairs": float(per_pair["fail"].mean()), "slot_ops": int(len(g)),
                     "failing_ops": int(g["failure"].sum()), "one_sided_views": n_views,
                     "p_detect_M": float(per_pair["det_m"].mean()), "p_detect_Mp": float(per_pair["det_mp"].mean())})
    return pd.DataFrame.from_records(recs)


def benchmark_support_failures(benchmark: Any, pairs: Sequence[Any], *, horizon: int = 16, B_a: Any = 2,
                               K: int = 3, variants: Mapping[str, type[MemView]] | None = None,
                               progress: bool = False) -> pd.DataFrame:
    """Support records (:func:`support_records`) for every pair and variant over the first
    ``horizon`` turns, online budget eps = B_a / K (Table 4 setting). Default variants: the
    C1-violating :class:`~dpmv_lib.checks.variants.StoreDependentVocabulary` and compliant MemView."""
    from ..core.ledger import OnlineBudget
    from ..core.scorer import LexiconScorer
    from ..checks.variants import StoreDependentVocabulary

    variants = dict(variants or {"StoreDependentVocabulary": StoreDependentVocabulary, "DP-MemView": MemView})
    scorer = MemoScorer(LexiconScorer())
    parts = []
    it: Iterable = pairs
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(pairs, desc="C1 supports", unit="pair")
    for pair in it:
        pol = benchmark.policy(pair).with_caps(B_a)
        qs = pair.queries[:horizon]
        for name, cls in variants.items():
            steps = lockstep_steps(pol, pair.m, pair.m_prime, qs, budget=OnlineBudget(K), variant=cls, scorer=scorer)
            parts.append(support_records(steps, variant=name, pair_id=pair.pair_id, attribute=pair.attribute))
    return pd.concat(parts, ignore_index=True)


def support_step(run: Any, loaded: Any) -> Any:
    """Notebook 04: the C1 support failures of ``StoreDependentVocabulary`` and the compliant
    control over the first T turns (``04_c1_support_failure``)."""
    from .result import Result, sentence

    cfg = run.cfg
    bench = loaded["bench"]
    with run.timer("C1 support"):
        sup = benchmark_support_failures(bench, bench.pairs, horizon=cfg.T, B_a=cfg.B_a, K=cfg.K,
                                         progress=cfg.progress)
        summary = support_failure_summary(sup)
    run.write_table("04_c1_support_failure", summary)
    s = summary.set_index("variant")
    finding = sentence("StoreDependentVocabulary: {f} of {n} pairs have a one-sided view within T = {T}; the "
                       "probability that an M transcript holds a release impossible under M' is {p:.3f} (mean over "
                       "pairs). Compliant MemView: {c} failing operations.",
                       f=int(s.loc["StoreDependentVocabulary", "pairs_with_failure"]),
                       n=int(s.loc["StoreDependentVocabulary", "pairs"]), T=cfg.T,
                       p=float(s.loc["StoreDependentVocabulary", "p_detect_M"]),
                       c=int(s.loc["DP-MemView", "failing_ops"]))
    return Result("C1 support failure", tables={"per variant": summary}, finding=finding, data={"table": summary})
