"""The paper's RQ1 claims (section 5, Table 2), each from a stated test (:mod:`.verdicts`).

Every claim names its statistic and margin; the sampled ones are decided by the paired bootstrap
over pairs (one Holm family), the dagger check (C1, C2) and the exact oracle (X2, X3) are exact,
and X1 checks the learned auditor against its exact ceiling in both directions (ERROR above it).
A claim made "in every model-track combination" has one case per combination and holds only if
every case does. The claims are about the paper's methods: the P&F rows (beyond the paper) are
left out.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from ..generate.interfaces import PF_METHODS
from .verdicts import BootClaim, Case, ExactClaim, Metrics, decide, highest, lowest

MEMORY_TEXT = ("RawReadSet", "TaskMin", "OutputFilter")
DP_MODES = ("DP-MemView (on)", "DP-MemView (pre)")
PAPER_METHODS = ("GenericOnly", "RawReadSet", "TypedMask", "TaskMin", "OutputFilter") + DP_MODES
#: C11's margins: |dU| within 0.02 (the paper's "comparable") and within a quarter of the spread
#: of U over the seven methods (so the claim cannot hold merely because U barely moves)
U_ABS, U_REL = 0.02, 0.25


def _f3(x: float) -> str:
    """Three decimals; an unbounded loss is "inf"."""
    if x is None or np.isnan(x):
        return "nan"
    return ("inf" if x > 0 else "-inf") if np.isinf(x) else f"{x:.3f}"


def _cases(metrics: Metrics, make, tracks: Sequence[str] | None = None) -> tuple[Case, ...]:
    """One case per (track, model) of the run (optionally only ``tracks``), from
    ``make(track, model) -> (value function, margin, direction) | None``."""
    out = []
    for track, model in metrics.combos():
        if tracks is not None and track not in tracks:
            continue
        spec = make(track, model)
        if spec is not None:
            fn, margin, direction = spec
            out.append(Case(f"{track}/{model}", fn, margin, direction))
    return tuple(out)


def _each(metrics: Metrics, methods: Sequence[str], fn_of, margin: float, direction: str,
          tracks: Sequence[str] | None = None) -> tuple[Case, ...]:
    """One case per (track, model, method)."""
    return tuple(Case(f"{t}/{m}/{meth}", fn_of(t, m, meth), margin, direction)
                 for t, m in metrics.combos() if tracks is None or t in tracks for meth in methods)


def _metric(metric: str):
    def of(t, m, meth):
        return lambda g: g(t, m, meth, metric)
    return of


def _abs_gap(g, t, m, meth):
    return np.abs(g(t, m, meth, "auc") - 0.5)


def _c4(t, m):
    return (lambda g: 0.5 * lowest(*(_abs_gap(g, t, m, x) for x in MEMORY_TEXT))
            - highest(*(_abs_gap(g, t, m, x) for x in DP_MODES)), 0.0, ">")


def bootstrap_claims(metrics: Metrics, u_label: str = "") -> list[BootClaim]:
    """C3-C13 as bootstrap claims on the run's metrics; ``u_label`` (e.g. "U = mean(relevance)",
    :attr:`dpmv_lib.evaluate.u_validity.UDefinition.label`) names the dimensions U holds in the
    claims on U (C7, C9, C11)."""
    M = metrics
    on_u = f" [{u_label}]" if u_label else ""
    dp_min = lambda g, t, m, k: lowest(*(g(t, m, x, k) for x in DP_MODES))  # noqa: E731
    mt_max = lambda g, t, m, k: highest(*(g(t, m, x, k) for x in MEMORY_TEXT))  # noqa: E731
    others_pre = [x for x in PAPER_METHODS if x != "DP-MemView (pre)"]
    c3 = _each(M, MEMORY_TEXT, _metric("auc"), 0.5, ">")
    claims = [
        BootClaim("C3", "RawReadSet, TaskMin and OutputFilter remain distinguishable on every model and track",
                  "AUC of each memory-text method > 0.5", c3),
        BootClaim("C4", "Both DP-MemView modes are much closer to chance than the memory-text methods",
                  "half the smallest memory-text |AUC-0.5| minus the largest DP-MemView |AUC-0.5| > 0",
                  _cases(M, _c4)),
        BootClaim("C5", "TPR@5 shows the same separation (every DP-MemView mode below every memory-text method)",
                  "smallest memory-text TPR@5 minus largest DP-MemView TPR@5 > 0",
                  _cases(M, lambda t, m: (lambda g: lowest(*(g(t, m, x, "tpr") for x in MEMORY_TEXT))
                                          - highest(*(g(t, m, x, "tpr") for x in DP_MODES)), 0.0, ">"))),
        BootClaim("C6", "GenericOnly has lower tRec than both DP-MemView modes",
                  "smaller DP-MemView tRec minus GenericOnly tRec > 0",
                  _cases(M, lambda t, m: (lambda g: dp_min(g, t, m, "tRec") - g(t, m, "GenericOnly", "tRec"),
                                          0.0, ">"))),
        BootClaim("C7", "GenericOnly attains high overall quality (U above every memory-text method)" + on_u,
                  "GenericOnly U minus the largest memory-text U > 0",
                  _cases(M, lambda t, m: (lambda g: g(t, m, "GenericOnly", "U") - mt_max(g, t, m, "U"), 0.0, ">"))),
        BootClaim("C8", "TypedMask has lower tRec than both DP-MemView modes",
                  "smaller DP-MemView tRec minus TypedMask tRec > 0",
                  _cases(M, lambda t, m: (lambda g: dp_min(g, t, m, "tRec") - g(t, m, "TypedMask", "tRec"), 0.0, ">"))),
        BootClaim("C9", "Both DP-MemView modes achieve higher U than RawReadSet, TaskMin and OutputFilter in every "
                        "model-track combination" + on_u, "smaller DP-MemView U minus the largest memory-text U > 0",
                  _cases(M, lambda t, m: (lambda g: dp_min(g, t, m, "U") - mt_max(g, t, m, "U"), 0.0, ">"))),
        BootClaim("C10", "DP-MemView (pre) achieves the highest tRec in every model-track combination",
                  "(pre) tRec minus the largest tRec of the other six methods > 0",
                  _cases(M, lambda t, m: (lambda g: g(t, m, "DP-MemView (pre)", "tRec")
                                          - highest(*(g(t, m, x, "tRec") for x in others_pre)), 0.0, ">"))),
        BootClaim("C11", f"DP-MemView (on) achieves comparable U to (pre) (|dU| < {U_ABS} and < {U_REL} x the "
                         "spread of U over the seven methods)" + on_u,
                  f"|U(on) - U(pre)| minus min({U_ABS}, {U_REL} x (max - min U over the seven methods)) < 0",
                  _cases(M, lambda t, m: (
                      lambda g: np.abs(g(t, m, "DP-MemView (on)", "U") - g(t, m, "DP-MemView (pre)", "U"))
                      - lowest(U_ABS, U_REL * (highest(*(g(t, m, x, "U") for x in PAPER_METHODS))
                                               - lowest(*(g(t, m, x, "U") for x in PAPER_METHODS)))),
                      0.0, "<"))),
        BootClaim("C12", "DP-MemView (on) has lower Unsup than (pre), RawReadSet, TaskMin and OutputFilter",
                  "smallest Unsup of (pre) and the memory-text methods minus (on) Unsup > 0",
                  _cases(M, lambda t, m: (
                      lambda g: lowest(*(g(t, m, x, "Unsup") for x in ("DP-MemView (pre)",) + MEMORY_TEXT))
                      - g(t, m, "DP-MemView (on)", "Unsup"), 0.0, ">"))),
        BootClaim("C13", "The privacy separation (C3 and C4) transfers to the corpus-sourced track without auditor "
                         "refitting", "C3 and C4 on the transfer track",
                  _each(M, MEMORY_TEXT, _metric("auc"), 0.5, ">", tracks=("transfer",))
                  + _cases(M, _c4, tracks=("transfer",))),
    ]
    return claims


def _dagger(identical: pd.DataFrame, method: str, cid: str) -> ExactClaim:
    r = identical[identical["method"] == method]
    parts = [f"{x.track}/{x.response_model}: {int(x.differing)} of {int(x.cells)} (pair, seed, turn) cells differ"
             for x in r.itertuples()]
    return ExactClaim(cid, f"{method}: identical conditioning under M and M' (chance by construction)",
                      "cells whose conditioning differs between M and M' (= 0)",
                      bool(r["identical"].all()) if len(r) else None, "; ".join(parts),
                      estimate=float(r["differing"].sum()) if len(r) else math.nan, margin=0.0)


def _ceiling_check(oracle: pd.DataFrame, audit_T: pd.DataFrame) -> ExactClaim:
    """X1, two-sided at 95%, decided as S5 of Table 3 (:func:`dpmv_lib.experiments.sensitivity`):
    HOLDS when every case's 95% CI lies wholly below its exact ceiling, ERROR when one lies wholly
    above (no auditor can beat the ceiling), INCONCLUSIVE when a CI contains its ceiling. The cases
    are the DP-MemView modes; a method whose ceiling is 0.5 (GenericOnly: chance by construction,
    claim C1) has no learned AUC to check and is only named in the evidence. The binding case is the
    one whose learned AUC lies closest to (or furthest above) its ceiling."""
    cases, chance = [], []
    for a in audit_T.itertuples():
        if a.method not in DP_MODES + ("GenericOnly",) or not np.isfinite(a.auc_indep):
            continue
        o = oracle[(oracle["track"] == a.track) & (oracle["response_model"] == a.response_model)
                   & (oracle["method"] == a.method)]
        if o.empty:
            continue
        ceil, err = float(o["ceiling_auc"].iloc[0]), float(o["auc_err"].iloc[0])
        label = f"{a.track}/{a.response_model}/{a.method}"
        if ceil <= 0.5 + 1e-9:
            chance.append(label)
            continue
        lo, hi = getattr(a, "auc_indep_lo", a.auc_indep), getattr(a, "auc_indep_hi", a.auc_indep)
        side = "above" if lo > ceil + err else ("below" if hi < ceil - err else "contains")
        cases.append({"label": label, "auc": float(a.auc_indep), "lo": float(lo), "hi": float(hi), "ceil": ceil,
                      "side": side, "power": (a.auc_indep - 0.5) / (ceil - 0.5)})
    parts = [f"{c['label']} learned {_f3(c['auc'])} [{_f3(c['lo'])}, {_f3(c['hi'])}] vs ceiling {_f3(c['ceil'])} "
             f"(power {_f3(c['power'])}; CI {'wholly ' + c['side'] if c['side'] != 'contains' else 'contains it'})"
             for c in cases]
    if chance:
        parts.append(f"not a case (ceiling 0.500: chance by construction, claim C1): {', '.join(chance)}")
    claim = ("Beyond the paper: the learned auditor (one transcript per pair, M and M' drawn independently) is "
             "consistent with the exact optimal-auditor ceiling")
    statistic = ("learned single-transcript AUC < exact ceiling, per DP-MemView mode; HOLDS if every 95% CI lies "
                 "wholly below, ERROR if one lies wholly above")
    test = "audit bootstrap CI (95%) against the exact ceiling, two-sided (as S5)"
    if not cases:
        return ExactClaim("X1", claim, statistic, None, "; ".join(parts) or "no DP-MemView case in this run",
                          test=test)
    above = [c for c in cases if c["side"] == "above"]
    binding = max(above or cases, key=lambda c: ((c["lo"] if above else c["auc"]) - c["ceil"], c["hi"]))
    holds: bool | None = False if above else (True if all(c["side"] == "below" for c in cases) else None)
    if holds is None:
        parts.append(f"INCONCLUSIVE because the CI of {binding['label']} contains its ceiling: that auditor can be "
                     f"told neither from the best possible one nor from a weaker one")
    return ExactClaim("X1", claim, statistic, holds, "; ".join(parts), estimate=binding["auc"], margin=binding["ceil"],
                      ci=(binding["lo"], binding["hi"]), test=test, error=True, undecided=holds is None)


def exact_claims(oracle: pd.DataFrame, audit_T: pd.DataFrame, identical: pd.DataFrame, B_a: float,
                 methods: Sequence[str]) -> tuple[list[ExactClaim], list[ExactClaim]]:
    """(C1, C2) and (X1, X2, X3): the dagger check, the ceiling check and the exact oracle."""
    head = [_dagger(identical, "GenericOnly", "C1"), _dagger(identical, "TypedMask", "C2")]

    def over(rows: pd.DataFrame, ok) -> tuple[bool | None, str]:
        if rows.empty:
            return None, ""
        return bool(ok(rows).all()), "; ".join(
            f"{r.track}/{r.response_model}/{r.method} max loss {_f3(float(r.max_loss))} over {int(r.n_pairs)} pairs"
            for r in rows.itertuples())

    dp = oracle[oracle["method"].isin(DP_MODES + PF_METHODS)]
    holds, ev = over(dp, lambda r: r["max_loss_le_cap_all_pairs"].astype(bool))
    tail = [_ceiling_check(oracle, audit_T),
            ExactClaim("X2", f"Beyond the paper: the exact maximum realised privacy loss of DP-MemView is <= B_a = "
                             f"{B_a:g} on every benchmark pair (Theorem 1, checked numerically)",
                       "max realised loss over pairs <= B_a", holds, ev,
                       estimate=float(dp["max_loss"].max()) if len(dp) else math.nan, margin=B_a)]
    abl = oracle[~oracle["method"].isin(methods)]
    if len(abl):
        holds, ev = over(abl, lambda r: ~r["max_loss_le_cap_all_pairs"].astype(bool))
        names = ", ".join(dict.fromkeys(abl["method"]))
        within = ", ".join(dict.fromkeys(abl.loc[abl["max_loss_le_cap_all_pairs"].astype(bool), "method"]))
        if within:
            ev += f"; within B_a = {B_a:g} on every pair at this horizon: {within}"
        tail.append(ExactClaim("X3", f"Beyond the paper: every contract-violating variant ({names}) realises a "
                                     f"privacy loss > B_a = {B_a:g} on at least one pair",
                               "max realised loss over pairs > B_a, per variant", holds, ev,
                               estimate=float(abl["max_loss"].min()), margin=B_a))
    return head, tail


def evaluate_claims(metrics: Metrics, oracle: pd.DataFrame, audit_T: pd.DataFrame, identical: pd.DataFrame,
                    B_a: float, methods: Sequence[str] = PAPER_METHODS + PF_METHODS, *,
                    u_label: str = "") -> pd.DataFrame:
    """The RQ1 claims table (:func:`dpmv_lib.experiments.verdicts.decide`): C1-C13 and X1-X3.

    Parameters
    ----------
    metrics : Metrics
        :func:`~dpmv_lib.experiments.verdicts.paired_bootstrap` of the auditor scores at T and the
        judge's per-transcript results.
    oracle : DataFrame
        :func:`dpmv_lib.evaluate.oracle.summary` (ceilings and max loss per method).
    audit_T : DataFrame
        The auditor summary at T (``auc_indep`` with its CI, for X1).
    identical : DataFrame
        :func:`dpmv_lib.evaluate.audit.conditioning_identical`.
    B_a : float
        The cap.
    methods : sequence of str
        The compliant methods of the run; oracle rows of other methods are the ablations (X3).
    u_label : str
        Which dimensions U holds (:attr:`dpmv_lib.evaluate.u_validity.UDefinition.label`), named in
        C7, C9 and C11.
    """
    head, tail = exact_claims(oracle, audit_T, identical, B_a, methods)
    return decide([*head, *bootstrap_claims(metrics, u_label), *tail], metrics)
