"""Exact target-view rates and realised privacy loss, one row per interface, in the columns of
notebook 05's exact grid (``target_rate_M``, ``target_rate_Mp``, ``b_a``, ``max_loss``).

* :func:`decision_rows`: :class:`~dpmv_lib.core.attribute_decision.AttributeDecisionMemView` on
  every pair, by exact enumeration of every augmented transcript on M and on M'
  (:func:`dpmv_lib.core.exact.transcript_log_distribution`, the enumerator of the Theorem 1
  checks): exact rates and the exact maximum realised loss max |log P_M - log P_M'|.
* :func:`grid_rows`: DP-MemView (on / pre / P&F) read from the exact grid at the same B_a.
* :func:`attribution`: the distance to the frontier, one contract element changed at a time on
  the exact grid (lockstep runs, :func:`dpmv_lib.experiments.rq2_support.lockstep_steps`): Eq. (7)'s
  2 Du -> Du, charging only the target, charging once per distinct read, no fallback. Each of
  these variants BREAKS the contract (:mod:`dpmv_lib.checks.variants`): measurement devices only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..checks.frontier import distance
from ..checks.variants import ChargeOncePerRead, IncompleteCharge, MonotoneUtility, NoCap
from ..common.parallel import parallel_map
from ..core.attribute_decision import AttributeDecisionMemView
from ..core.errors import ParameterError
from ..core.exact import fixed_strategy, log_privacy_loss, transcript_log_distribution
from ..core.ledger import OnlineBudget
from ..core.memview import MemView
from ..core.scorer import LexiconScorer
from ..generate.interfaces import ATTRIBUTE_DECISION
from .rq2_horizon import prefix_distributions, steps_to_turns
from .rq2_support import MemoScorer, lockstep_steps
from .sensitivity import target_views
from .styled import styled

#: grid mode -> the interface it runs
GRID_INTERFACES: dict[str, str] = {"on": "DP-MemView (on)", "pre": "DP-MemView (pre)",
                                   "on, P&F": "DP-MemView (on, P&F)", "pre, P&F": "DP-MemView (pre, P&F)"}
COLUMNS = ["interface", "b_a", "target_rate_M", "target_rate_Mp", "difference", "max_loss", "n_pairs"]


@dataclass(frozen=True)
class RowsResult:
    """A table of exact rows with a caption (and the per-pair rows behind it, where there are
    any); displays itself (HTML table, text fallback)."""

    table: pd.DataFrame
    caption: str
    per_pair: pd.DataFrame | None = None

    def _repr_html_(self) -> str:
        return styled(self.table, precision=4, caption=self.caption).to_html()

    def __repr__(self) -> str:
        return f"{self.caption}\n{self.table.to_string(index=False)}"


# ---- the new interface, exactly -------------------------------------------------------------
def decision_pair(policy: Any, pair: Any, b_a: float, *, links: Mapping[str, Sequence[str]], scorer: Any = None,
                  horizon: int = 16, max_transcripts: int = 200_000) -> dict[str, Any]:
    """The exact target-view rates on M and M' and the exact maximum realised loss of
    :class:`AttributeDecisionMemView` on one pair (every transcript of ``horizon`` turns)."""
    pol = policy.with_caps(b_a)
    qs = tuple(pair.queries[:horizon])
    if len(qs) < horizon:
        raise ParameterError(f"pair {pair.pair_id} has {len(qs)} turns, {horizon} needed")
    sc = scorer if scorer is not None else LexiconScorer()
    tv = target_views(links, pair.attribute)

    def make(store: Any) -> MemView:
        return AttributeDecisionMemView(pol, store, links=links, scorer=sc, seed=0)

    dists = [transcript_log_distribution(make, s, fixed_strategy(qs), horizon, max_transcripts)
             for s in (pair.m, pair.m_prime)]
    rates = [math.fsum(math.exp(lp) * sum(sr.view in tv for rel in t for sr in rel.slots) / horizon
                       for t, lp in d.items()) for d in dists]
    loss = log_privacy_loss(*dists)
    return {"pair_id": pair.pair_id, "attribute": pair.attribute, "b_a": float(b_a), "target_rate_M": rates[0],
            "target_rate_Mp": rates[1], "max_loss": loss.max_loss, "n_transcripts": loss.n_transcripts}


@dataclass
class _DecisionJob:
    bench: Any
    links: Mapping[str, Sequence[str]]
    horizon: int
    scorer: Any = None

    def __call__(self, item: tuple[Any, float]) -> dict[str, Any]:
        if self.scorer is None:
            self.scorer = MemoScorer(LexiconScorer())
        pair, b = item
        return decision_pair(self.bench.policy(pair), pair, b, links=self.links, scorer=self.scorer,
                             horizon=self.horizon)


def decision_pairs(bench: Any, pairs: Sequence[Any], b_as: Sequence[float] = (1, 2, 4, 8), *,
                   links: Mapping[str, Sequence[str]], horizon: int = 16, workers: int | None = None,
                   progress: bool = False) -> pd.DataFrame:
    """:func:`decision_pair` for every pair and B_a (one row each)."""
    if not pairs:
        raise ParameterError("decision_pairs needs at least one pair")
    items = [(p, float(b)) for b in b_as for p in pairs]
    return pd.DataFrame(parallel_map(_DecisionJob(bench, links, horizon), items, workers=workers,
                                     progress=progress, desc="attribute decisions", unit="pair"))


def summarise(per_pair: pd.DataFrame, interface: str = ATTRIBUTE_DECISION) -> pd.DataFrame:
    """Per-pair rows -> one row per B_a (mean rates over pairs, the largest loss, its pair)."""
    rows = []
    for b, g in per_pair.groupby("b_a", sort=True):
        worst = g.loc[g["max_loss"].idxmax()]
        m, mp = float(g["target_rate_M"].mean()), float(g["target_rate_Mp"].mean())
        rows.append({"interface": interface, "b_a": float(b), "target_rate_M": m, "target_rate_Mp": mp,
                     "difference": m - mp, "max_loss": float(g["max_loss"].max()), "n_pairs": int(len(g)),
                     "worst_pair": str(worst["pair_id"]),
                     "within_cap": bool((g["max_loss"] <= g["b_a"] * (1 + 1e-9)).all())})
    return pd.DataFrame(rows)


def decision_rows(bench: Any, pairs: Sequence[Any], b_as: Sequence[float] = (1, 2, 4, 8), *,
                  links: Mapping[str, Sequence[str]], horizon: int = 16, workers: int | None = None,
                  grid: pd.DataFrame | None = None, k: int = 3) -> RowsResult:
    """The new interface's exact rows at each B_a (over ``pairs``), beside DP-MemView's rows of
    the exact ``grid`` at the same B_a (K = ``k``, T = ``horizon``) when a grid is given."""
    per = decision_pairs(bench, pairs, b_as, links=links, horizon=horizon, workers=workers)
    rows = summarise(per)
    if grid is not None:
        rows = pd.concat([grid_rows(grid, b_as, k=k, T=horizon), rows], ignore_index=True)
    rows = rows.sort_values(["b_a", "interface"], kind="stable").reset_index(drop=True)
    return RowsResult(rows, f"Exact target-view rates on M and M' and max realised loss, T={horizon}, "
                            f"{len(pairs)} pairs (exact enumeration / exact grid)", per)


def grid_rows(grid: pd.DataFrame, b_as: Sequence[float] = (1, 2, 4, 8), *, k: int = 3, T: int = 16,
              modes: Sequence[str] | None = None) -> pd.DataFrame:
    """DP-MemView's rows of the exact grid (one per mode and B_a) in :data:`COLUMNS`."""
    need = {"mode", "b_a", "k", "T", "target_rate_M", "target_rate_Mp", "max_loss"}
    if need - set(grid.columns):
        raise ParameterError(f"not an exact grid: missing columns {sorted(need - set(grid.columns))}")
    modes = [m for m in (modes or GRID_INTERFACES) if m in set(grid["mode"])]
    out = []
    for mode in modes:
        for b in b_as:
            sel = grid[(grid["mode"] == mode) & np.isclose(grid["b_a"].astype(float), float(b))
                       & (grid["k"] == int(k)) & (grid["T"] == int(T))]
            if len(sel) != 1:
                continue
            r = sel.iloc[0]
            out.append({"interface": GRID_INTERFACES[mode], "b_a": float(b), "target_rate_M": float(r["target_rate_M"]),
                        "target_rate_Mp": float(r["target_rate_Mp"]),
                        "difference": float(r["target_rate_M"] - r["target_rate_Mp"]),
                        "max_loss": float(r["max_loss"]), "n_pairs": int(r.get("n_pairs", 0))})
    return pd.DataFrame(out, columns=COLUMNS)


# ---- attribution: one contract element at a time ---------------------------------------------
#: (row label, contract element changed, contract status, MemView class, per-pair kwargs)
ATTRIBUTION: tuple[tuple[str, str, str, type[MemView]], ...] = (
    ("DP-MemView (on)", "none (the paper's contract)", "keeps the contract", MemView),
    ("Eq. (7) with Du instead of 2 Du", "2 Du -> Du (monotone utility)", "BREAKS C3 (the scorer is not monotone)",
     MonotoneUtility),
    ("charge only the target attribute", "charge sets spanning several attributes -> the target's only",
     "BREAKS C2", IncompleteCharge),
    ("charge once per distinct read", "per-turn charging -> once per distinct (slot, read set)", "BREAKS C2",
     ChargeOncePerRead),
    ("no fallback", "cap check and generic fallback removed", "BREAKS C5", NoCap),
)


def variant_pair(policy: Any, pair: Any, b_a: float, k: int, variant: type[MemView], *,
                 links: Mapping[str, Sequence[str]], scorer: Any = None, horizon: int = 16) -> dict[str, Any]:
    """Exact rates and maximum realised loss of one MemView variant on one pair, online rule
    eps = B_a / K, from its lockstep view distributions (as the exact grid computes them)."""
    pol = policy.with_caps(b_a)
    qs = pair.queries[:horizon]
    kw = {"keep": pair.attribute} if variant is IncompleteCharge else {}
    steps = lockstep_steps(pol, pair.m, pair.m_prime, qs, budget=OnlineBudget(int(k)), variant=variant,
                           scorer=scorer, variant_kwargs=kw)
    turns, equal = steps_to_turns(steps, horizon)
    d = prefix_distributions(turns, [horizon], public_equal=equal)[horizon]
    tv = target_views(links, pair.attribute)
    rate = [float(np.mean([sum(p for sl in side.values() for v, p in sl.items() if v in tv) for side in
                           (turn[i] for turn in turns)])) for i in (0, 1)]
    return {"pair_id": pair.pair_id, "target_rate_M": rate[0], "target_rate_Mp": rate[1], "max_loss": d.max_loss()}


@dataclass
class _VariantJob:
    bench: Any
    links: Mapping[str, Sequence[str]]
    b_a: float
    k: int
    horizon: int
    scorer: Any = None

    def __call__(self, item: tuple[int, Any]) -> dict[str, Any]:
        if self.scorer is None:
            self.scorer = MemoScorer(LexiconScorer())
        i, pair = item
        row = variant_pair(self.bench.policy(pair), pair, self.b_a, self.k, ATTRIBUTION[i][3], links=self.links,
                           scorer=self.scorer, horizon=self.horizon)
        return {"variant": i, **row}


def attribution(bench: Any, pairs: Sequence[Any], *, links: Mapping[str, Sequence[str]], b_a: float = 2,
                k: int = 3, horizon: int = 16, workers: int | None = None,
                decision: pd.DataFrame | None = None) -> RowsResult:
    """One row per contract element changed alone (:data:`ATTRIBUTION`) on the exact grid at
    (B_a, K, T), plus the new interface (``decision``: its per-pair rows from
    :func:`decision_pairs`, computed here when None): mean rates, difference, the largest
    realised loss and the gap to the frontier g_B(q) - p at q = the M'-side rate."""
    if not pairs:
        raise ParameterError("attribution needs at least one pair")
    job = _VariantJob(bench, links, float(b_a), int(k), int(horizon))
    per = pd.DataFrame(parallel_map(job, [(i, p) for i in range(len(ATTRIBUTION)) for p in pairs],
                                    workers=workers, desc="attribution", unit="run"))
    rows = []
    for i, (label, element, status, _) in enumerate(ATTRIBUTION):
        g = per[per["variant"] == i]
        rows.append({"interface": label, "element changed": element, "contract": status,
                     "target_rate_M": float(g["target_rate_M"].mean()),
                     "target_rate_Mp": float(g["target_rate_Mp"].mean()), "b_a": float(b_a),
                     "max_loss": float(g["max_loss"].max())})
    if decision is None:
        decision = decision_pairs(bench, pairs, (b_a,), links=links, horizon=horizon, workers=workers)
    d = decision[np.isclose(decision["b_a"].astype(float), float(b_a))]
    rows.append({"interface": ATTRIBUTE_DECISION, "element changed":
                 "one decision per attribute, reused; budget over the decisions",
                 "contract": "keeps the contract", "target_rate_M": float(d["target_rate_M"].mean()),
                 "target_rate_Mp": float(d["target_rate_Mp"].mean()), "b_a": float(b_a),
                 "max_loss": float(d["max_loss"].max())})
    out = pd.DataFrame(rows)
    out["difference"] = out["target_rate_M"] - out["target_rate_Mp"]
    out["frontier_gap"] = [distance(q, p, float(b_a)) for q, p in zip(out["target_rate_Mp"], out["target_rate_M"])]
    out["loss_over_cap"] = out["max_loss"] > float(b_a) * (1 + 1e-9)
    return RowsResult(out, f"Where the distance to the frontier goes: one contract element changed at a time "
                           f"(B_a={float(b_a):g}, K={int(k)}, T={int(horizon)}, {len(pairs)} pairs; exact)")



def decision_step(run: Any, loaded: Any, grid: Any) -> RowsResult:
    """Notebook 05: :func:`decision_rows` for B_a in 1, 2, 4, 8 on the grid's test pairs, at the
    run's K and T."""
    cfg = run.cfg
    with run.timer("attribute decisions"):
        return decision_rows(loaded["bench"], grid["pairs"], (1, 2, 4, 8), links=grid["links"], grid=grid["grid"],
                             k=cfg.K, horizon=cfg.T, workers=cfg.workers)


def attribution_step(run: Any, loaded: Any, grid: Any, decision: RowsResult) -> RowsResult:
    """Notebook 05: :func:`attribution` at the run's B_a, K and T on the grid's test pairs."""
    cfg = run.cfg
    with run.timer("frontier attribution"):
        return attribution(loaded["bench"], grid["pairs"], links=grid["links"], b_a=cfg.B_a, k=cfg.K, horizon=cfg.T,
                           workers=cfg.workers, decision=decision.per_pair)
