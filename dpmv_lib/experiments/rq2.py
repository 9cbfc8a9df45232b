"""RQ2: interface safeguards (paper "RQ2: Interface Safeguards", Table 4, Appendix B.5).

What notebook 04 computes, as functions of the transcript table (docs/architecture.md)
or of the benchmark pairs; this module holds the accounting and Table 4, its siblings the rest:

* **Accounting** (Table 4 "DP bound"): the public releases of every transcript are turned back
  into :class:`~dpmv_lib.core.releases.Release` objects and passed to
  :func:`dpmv_lib.checks.accounting.reconstructed_bound` (the target attribute's cost including charges
  omitted from its ledger; inf for a deterministic release) next to
  :func:`~dpmv_lib.checks.accounting.reported_ledger` (what the interface's own ledger says).
* **Table 4 assembly** with the paper's numbers and deltas, and the RQ2 claims evaluated from
  the table (:func:`claims`); the benchmark's charge structure behind its DP-bound column
  (:func:`charge_structure_table`) and notebook 04's closing summary (:func:`summary_markdown`).
* **Score channel** (C3/C6, :mod:`~dpmv_lib.experiments.rq2_score`): a calibrated logistic-regression
  auditor on the released top internal score sequence (``ScoreChannel`` extras), same split protocol
  as the embedding auditor of :mod:`dpmv_lib.evaluate.audit`, plus the exact pair-level fact that the
  score sequence differs between M and M'.
* **C1 support failure** (:mod:`~dpmv_lib.experiments.rq2_support`):
  :class:`~dpmv_lib.checks.variants.StoreDependentVocabulary` run in lockstep on M and M' under the
  same public prefix; the exact view supports (``_outcomes``) show which views have positive
  probability under one store and zero under the other.
* **Leakage vs horizon** (:mod:`~dpmv_lib.experiments.rq2_horizon`): the exact optimal auditor of
  :mod:`dpmv_lib.evaluate.oracle` (:class:`~dpmv_lib.evaluate.llr.LLRDistribution`) convolved
  turn by turn, recording every prefix T = 1..32 in one pass; max realised privacy loss <= B_a
  (Theorem 1) for DP-MemView, not for the ablations.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .plots import save_figure
from ..bench.benchmark_quality import charge_structure
from ..checks.accounting import reconstructed_bound, reported_ledger
from ..core.errors import ParameterError
from ..evaluate.u_validity import dims_label
from ..core.releases import Release, SlotRelease
from ..core.policy import Query
from ..evaluate.audit import require_columns
from .common import fmt_delta, fmt_number, markdown_table
from .verdicts import BootClaim, Case, ExactClaim, decide, verdict_counts


TABLE4_METHODS: tuple[str, ...] = ("DP-MemView (on)", "IncompleteCharge", "CappedArgmax", "NoCap")
HORIZON_METHODS: tuple[str, ...] = ("DP-MemView (on)", "DP-MemView (pre)", "IncompleteCharge",
                                    "CappedArgmax", "NoCap")
SCORE_CHANNEL = "ScoreChannel"
TABLE4_METRICS: tuple[str, ...] = ("dp_bound", "auc", "trec", "u", "unsup")
#: R5's bound on |U(ablation) - U(DP-MemView)|
U_TOLERANCE = 0.002
HORIZON_MAX_ATOMS = 4096  # atoms kept per prefix distribution (error bounds stay rigorous)


# ---- small helpers ------------------------------------------------------------------------------
def violated_condition(method: str) -> str:
    """The contract condition a compared interface breaks ("" if compliant), read from the code
    (:attr:`MemView.violates` of the variant behind the interface), never typed in."""
    from ..generate.interfaces import make_interface

    return make_interface(method).violates or ""


def fraction_or_inf(x: Fraction | float) -> float:
    """A bound as a float (inf stays inf)."""
    return math.inf if (isinstance(x, float) and math.isinf(x)) else float(x)



def one_model(transcripts: pd.DataFrame) -> pd.DataFrame:
    """Releases do not depend on the response model: keep the rows of the first one."""
    if "response_model" in transcripts.columns and transcripts["response_model"].nunique() > 1:
        return transcripts[transcripts["response_model"] == transcripts["response_model"].iloc[0]]
    return transcripts


def with_paper(ours: pd.DataFrame, paper: pd.DataFrame | None, on: str | Sequence[str],
               metrics: Sequence[str]) -> pd.DataFrame:
    """``ours`` with ``paper_<m>`` and ``delta_<m>`` = ours - paper for every metric ``m`` that
    both tables have (rows matched on ``on``; rows the paper lacks get NaN). inf - inf is NaN and
    inf vs a finite paper value is inf."""
    out = ours.copy()
    if paper is None:
        return out
    on = [on] if isinstance(on, str) else list(on)
    require_columns(paper, on, "paper table")
    have = [m for m in dict.fromkeys(metrics) if m in paper.columns and m in out.columns]
    ref = paper[on + have].rename(columns={m: f"paper_{m}" for m in have})
    out = out.merge(ref, on=on, how="left")
    for m in have:
        a = pd.to_numeric(out[m], errors="coerce").astype(float)
        b = pd.to_numeric(out[f"paper_{m}"], errors="coerce").astype(float)
        with np.errstate(invalid="ignore"):
            out[f"delta_{m}"] = a - b
    return out


# ---- accounting from the public releases (Table 4 "DP bound") ---------------------------------
def release_from_json(released: str | Mapping[str, Any], query: Query) -> Release:
    """Rebuild the public :class:`Release` of one turn from the transcript table's ``released``
    column (``Release.public_dict()`` without the query)."""
    obj = json.loads(released) if isinstance(released, str) else released
    if not isinstance(obj, Mapping) or "slots" not in obj:
        raise ParameterError(f"'released' must be a JSON object with 'slots' (a MemView release), got "
                             f"{str(released)[:80]!r}")
    slots = []
    for s in obj["slots"]:
        try:
            slots.append(SlotRelease(
                slot=s["slot"], view=s["view"], read_set=tuple(s.get("read_set", ())),
                affected=frozenset(s.get("affected", ())), charged=frozenset(s.get("charged", ())),
                epsilon=Fraction(str(s.get("epsilon", "0"))), mechanism=s["mechanism"],
                fallback=bool(s.get("fallback", False)),
                extras=tuple((k, v) for k, v in s.items() if k not in _SLOT_FIELDS)))
        except (KeyError, ValueError, TypeError) as exc:
            raise ParameterError(f"malformed slot release {s!r}: {exc}") from None
    ledger = tuple(sorted((a, Fraction(str(v))) for a, v in obj.get("ledger", {}).items()))
    return Release(query, tuple(slots), ledger)


_SLOT_FIELDS = frozenset({"slot", "view", "read_set", "affected", "charged", "epsilon", "mechanism", "fallback"})


def transcript_releases(rows: pd.DataFrame) -> tuple[Release, ...]:
    """The releases of ONE transcript (one method, pair, side, seed), in turn order."""
    require_columns(rows, {"turn", "query", "intent", "released"})
    rows = rows.sort_values("turn")
    qtype = rows["qtype"] if "qtype" in rows.columns else [""] * len(rows)
    return tuple(release_from_json(r, Query(q, i, qt)) for r, q, i, qt in
                 zip(rows["released"], rows["query"], rows["intent"], qtype))


def accounting_per_pair(transcripts: pd.DataFrame, horizons: Sequence[int] = (16,), *,
                        sides: Sequence[str] = ("M", "M'"),
                        methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (method, pair, side, seed, horizon T) of a view-releasing method:

    * ``recon_bound``: :func:`~dpmv_lib.checks.accounting.reconstructed_bound` of the pair's target
      attribute over the first T releases (inf if a deterministic release touched I_a);
    * ``ledger``: the target's own ledger after T turns (:func:`~dpmv_lib.checks.accounting.reported_ledger`);
    * ``omitted``: admitted private selections that touched I_a but did not charge a (C2);
    * ``admitted_target``: admitted selections that touched I_a."""
    require_columns(transcripts, {"method", "pair_id", "attribute", "side", "seed", "turn", "query", "intent",
                           "released"})
    df = one_model(transcripts)
    if methods is not None:
        df = df[df["method"].isin(methods)]
    df = df[df["side"].isin(sides)]
    hs = sorted({int(h) for h in horizons})
    if not hs or hs[0] < 1:
        raise ParameterError(f"horizons must be positive ints, got {horizons!r}")
    df = df[df["turn"] < hs[-1]]
    qtype = df["qtype"].tolist() if "qtype" in df.columns else [""] * len(df)
    cols = {c: df[c].tolist() for c in ("method", "pair_id", "attribute", "side", "seed", "turn", "query",
                                        "intent", "released")}
    parsed: dict[tuple, Release] = {}
    contrib: dict[tuple, Fraction | float] = {}
    want = set(hs)
    recs = []
    for (method, pair_id, side, seed), idx in df.groupby(["method", "pair_id", "side", "seed"],
                                                          sort=True).indices.items():
        idx = sorted(idx, key=lambda i: cols["turn"][i])
        if not any('"slots"' in (cols["released"][i] or "") for i in idx):
            continue  # memory-text method: no public releases to account
        if len(idx) < hs[-1]:
            raise ParameterError(f"{method}/{pair_id}/{side}/{seed}: {len(idx)} turns, need {hs[-1]}")
        rels = []
        for i in idx:
            k = (cols["released"][i], cols["query"][i], cols["intent"][i], qtype[i])
            r = parsed.get(k)
            if r is None:
                r = parsed[k] = release_from_json(k[0], Query(k[1], k[2], k[3]))
            rels.append(r)
        attr = cols["attribute"][idx[0]]
        omitted = admitted = 0
        total: Fraction | float = Fraction(0)
        for t, rel in enumerate(rels[:hs[-1]], start=1):
            # reconstructed_bound is a sum over releases (inf once a deterministic release touched
            # I_a), so the prefix bound is the running sum of each release's own bound
            ck = (id(rel), attr)
            step = contrib.get(ck)
            if step is None:
                step = contrib[ck] = reconstructed_bound((rel,), attr)
            total = math.inf if (isinstance(total, float) or isinstance(step, float)) else total + step
            for s_ in rel.slots:
                if attr in s_.affected and s_.mechanism != "generic":
                    admitted += 1
                    omitted += attr not in s_.charged
            if t not in want:
                continue
            recs.append({"method": method, "pair_id": pair_id, "attribute": attr, "side": side,
                         "seed": int(seed), "horizon": t, "recon_bound": fraction_or_inf(total),
                         "recon_bound_exact": "inf" if isinstance(total, float) else str(total),
                         "ledger": float(reported_ledger((rel,), attr)), "omitted": omitted,
                         "admitted_target": admitted})
    return pd.DataFrame.from_records(recs)


def accounting_summary(acc: pd.DataFrame, cap: float | Mapping[str, float]) -> pd.DataFrame:
    """Per (method, horizon): reconstructed target bound (max / mean over pairs, seeds, sides),
    the ledger's own value (max / mean), the share of transcripts whose bound exceeds B_a, the
    omitted target charges, and whether the bound is the same on M and M' (a public quantity)."""
    require_columns(acc, {"method", "horizon", "pair_id", "side", "seed", "recon_bound", "ledger", "omitted",
                   "attribute"}, "accounting table")
    cap_of = (lambda a: float(cap[a])) if isinstance(cap, Mapping) else (lambda a: float(cap))
    df = acc.assign(_cap=acc["attribute"].map(cap_of))
    df["_over"] = df["recon_bound"] > df["_cap"] + 1e-12
    df["_omits"] = df["omitted"] > 0
    df["_under"] = df["recon_bound"] > df["ledger"] + 1e-12
    df["_inf"] = np.isinf(df["recon_bound"])
    keys = ["method", "horizon"]
    same = (df.groupby(keys + ["pair_id", "seed"], sort=False)["recon_bound"].nunique() <= 1
            ).groupby(level=keys).all()
    g = df.groupby(keys, sort=False)
    out = g.agg(n_pairs=("pair_id", "nunique"), dp_bound=("recon_bound", "max"), dp_bound_mean=("recon_bound", "mean"),
                dp_bound_median=("recon_bound", "median"), ledger_max=("ledger", "max"), ledger_mean=("ledger", "mean"),
                share_bound_over_cap=("_over", "mean"), omitted_mean=("omitted", "mean"),
                omitted_max=("omitted", "max"),
                share_omitting=("_omits", "mean"), ledger_underreports=("_under", "any"), _any_inf=("_inf", "any"))
    out.loc[out["_any_inf"], "dp_bound_mean"] = math.inf
    out["bound_same_on_M_and_Mprime"] = same
    out = out.drop(columns="_any_inf").reset_index()
    out["horizon"] = out["horizon"].astype(int)
    out["omitted_max"] = out["omitted_max"].astype(int)
    return out


#: the paper's figures behind Table 4's DP-bound column, beside :func:`charge_structure_table`
PAPER_CHARGE_STRUCTURE: tuple[str, ...] = ("5.33 (16/3)", "8", "1/4", "0")


def charge_structure_table(pairs: Sequence[Any], policy_of: Callable[[Any], Any], *, horizon: int = 16,
                           K: int = 3, B_a: Any = 2) -> pd.DataFrame:
    """The benchmark's charge structure behind the paper's Table 4 DP-bound column (notebook 04),
    min and max over ``pairs`` beside the paper: ``NoCap``'s reconstructed target bound at
    ``horizon`` (online budget eps = B_a / K, the real variant class; C5 broken, C2 kept), the
    preallocated :math:`C_a` over the first ``horizon`` queries, its eps = B_a / C_a, and how many
    neutral turns read a position of :math:`I_a` (0 by construction). Exact values (fractions) as
    strings, from :func:`dpmv_lib.bench.benchmark_quality.charge_structure`.

    Parameters
    ----------
    pairs : sequence of Pair
        The benchmark pairs.
    policy_of : callable
        Pair -> its public policy (e.g. ``Benchmark.policy``).
    horizon, K : int
        T and the online granularity.
    B_a : int, float or Fraction
        The cap (exact as a Fraction).

    Returns
    -------
    DataFrame
        Columns quantity, min, max, paper; one row per quantity above.
    """
    cs = pd.DataFrame(charge_structure(pairs, policy_of, horizon=horizon, K=K, variants=("NoCap",)))
    rows = (
        (f"NoCap reconstructed bound at T={horizon}", str(cs["NoCap_bound"].min()), str(cs["NoCap_bound"].max())),
        (f"preallocated C_a over the first {horizon} queries", str(cs["C_a"].min()), str(cs["C_a"].max())),
        ("preallocated eps = B_a / C_a", str(Fraction(B_a) / cs["C_a"].max()), str(Fraction(B_a) / cs["C_a"].min())),
        ("neutral turns reading I_a (per pair)", str(cs["neutral_reading_I_a"].min()),
         str(cs["neutral_reading_I_a"].max())),
    )
    return pd.DataFrame([{"quantity": q, "min": lo, "max": hi, "paper": paper}
                         for (q, lo, hi), paper in zip(rows, PAPER_CHARGE_STRUCTURE)])


# ---- Table 4 assembly and claims ---------------------------------------------------------------------
def table4(accounting: pd.DataFrame, privacy: pd.DataFrame, utility: pd.DataFrame, *,
           methods: Sequence[str] = TABLE4_METHODS, paper: pd.DataFrame | None = None,
           horizon: int = 16) -> pd.DataFrame:
    """Paper Table 4 with our numbers: one row per variant with the violated condition (from the
    code), the reconstructed target bound (max and mean over pairs), the ledger's own value, the
    embedding-auditor AUC / TPR, tRec, U, Unsup, and (with ``paper``) the paper's values and deltas.

    ``accounting``: :func:`accounting_summary`; ``privacy``: rows with ``method``, ``auc``
    (optional ``tpr``, ``horizon``) e.g. :func:`dpmv_lib.evaluate.audit.run_audit`'s summary; ``utility``:
    rows with ``method``, ``U``, ``tRec``, ``Unsup`` (:func:`dpmv_lib.evaluate.judge.summarise_utility`)."""
    require_columns(accounting, {"method", "horizon", "dp_bound", "dp_bound_mean", "ledger_max"}, "accounting summary")
    require_columns(privacy, {"method", "auc"}, "privacy summary")
    require_columns(utility, {"method", "U", "tRec", "Unsup"}, "utility summary")
    acc = accounting[accounting["horizon"] == horizon].set_index("method")
    priv = privacy[privacy["horizon"] == horizon] if "horizon" in privacy.columns else privacy
    priv = priv.drop_duplicates("method").set_index("method")
    util = utility.drop_duplicates("method").set_index("method")
    recs = []
    for m in methods:
        for name, tab in (("accounting", acc), ("privacy", priv), ("utility", util)):
            if m not in tab.index:
                raise ParameterError(f"{name} results lack method {m!r} (have {sorted(tab.index)})")
        recs.append({
            "variant": m, "violated": violated_condition(m),
            "dp_bound": float(acc.at[m, "dp_bound"]), "dp_bound_mean": float(acc.at[m, "dp_bound_mean"]),
            "ledger_reported": float(acc.at[m, "ledger_max"]),
            "auc": float(priv.at[m, "auc"]), "tpr": float(priv.at[m, "tpr"]) if "tpr" in priv.columns else math.nan,
            "trec": float(util.at[m, "tRec"]), "u": float(util.at[m, "U"]), "unsup": float(util.at[m, "Unsup"]),
            **({"u_dims": str(util.at[m, "U_dims"])} if "U_dims" in util.columns else {}),
        })
    out = pd.DataFrame.from_records(recs)
    if paper is not None:
        p = paper.copy()
        if "variant" not in p.columns:
            raise ParameterError("the paper's Table 4 needs a 'variant' column")
        p["dp_bound"] = pd.to_numeric(p["dp_bound"].replace({"inf": np.inf}), errors="coerce")
        out = with_paper(out, p, "variant", TABLE4_METRICS)
        if "violated" in p.columns:
            pv = p.set_index("variant")["violated"].fillna("").astype(str)
            out["paper_violated"] = out["variant"].map(pv).fillna("")
    return out


def format_bound(x: float, cap: float) -> str:
    """'2.0 <= B_a', '4.0 > B_a' or 'inf' as in the paper's Table 4."""
    if math.isinf(x):
        return "inf"
    return f"{x:.2f} {'<=' if x <= cap + 1e-12 else '>'} B_a"


def u_claim(ablations: Sequence[str], compliant: str, track: str, model: str, u_tolerance: float = U_TOLERANCE,
            u_label: str = "") -> BootClaim:
    """R5 (an equivalence claim): |U(ablation) - U(``compliant``)| < ``u_tolerance`` for every one of
    ``ablations`` on (``track``, ``model``); ``u_label`` names the dimensions U holds."""
    on_u = f" [{u_label}]" if u_label else ""

    def gap(v: str) -> Callable[[Callable[..., Any]], Any]:
        return lambda g: np.abs(g(track, model, v, "U") - g(track, model, compliant, "U"))
    return BootClaim("R5", f"U changes by at most {u_tolerance}{on_u}",
                     f"|U(ablation) - U(DP-MemView)| < {u_tolerance}",
                     tuple(Case(v, gap(v), u_tolerance, "<") for v in ablations))


def claims(t4: pd.DataFrame, cap: float, metrics: Any, *, compliant: str = "DP-MemView (on)",
           u_tolerance: float = U_TOLERANCE, u_label: str | None = None) -> pd.DataFrame:
    """The RQ2 claims of the paper, each from a stated test (:mod:`.verdicts`).

    Exact (accounting): the compliant bound is <= B_a, every ablation's exceeds it, IncompleteCharge's
    ledger under-reports its reconstructed charge. Paired bootstrap over pairs (one Holm family): AUC
    and tRec rise above the compliant interface for every ablation; U changes by at most
    ``u_tolerance`` (an equivalence claim: the CI of every |dU| must lie below it); CappedArgmax has
    the lowest Unsup and the highest AUC.

    Parameters
    ----------
    t4 : DataFrame
        :func:`table4` (the bounds and the ledger's own values).
    cap : float
        B_a.
    metrics : verdicts.Metrics
        :func:`~dpmv_lib.experiments.verdicts.paired_bootstrap` of the auditor scores at T and the
        judge's per-transcript results of the Table 4 methods (one track and response model).
    u_label : str, optional
        Which dimensions U holds, named in R5 (:attr:`dpmv_lib.evaluate.u_validity.UDefinition.label`);
        by default read from Table 4's ``u_dims`` column when it has one.

    Raises
    ------
    ParameterError
        Table 4 lacks a column or the compliant row.
    """
    require_columns(t4, {"variant", "dp_bound", "auc", "trec", "u", "unsup", "ledger_reported"}, "Table 4")
    t = t4.set_index("variant")
    if compliant not in t.index:
        raise ParameterError(f"Table 4 lacks the compliant row {compliant!r}")
    base = t.loc[compliant]
    abl = t.drop(index=compliant)
    track, model = metrics.combos()[0]

    def diff(a: str, b: str, metric: str):
        return lambda g: g(track, model, a, metric) - g(track, model, b, metric)

    fmt = lambda s: ", ".join(f"{k} {v:.3f}" for k, v in s.items())  # noqa: E731
    if u_label is None and "u_dims" in t.columns:
        u_label = "; ".join(dims_label(x) for x in sorted(set(t["u_dims"].astype(str))))
    stated: list[BootClaim | ExactClaim] = [
        ExactClaim("R1", "DP-MemView's reconstructed bound stays <= B_a", "reconstructed target bound (max over pairs)",
                   bool(base["dp_bound"] <= cap + 1e-12), f"{base['dp_bound']:.3f} vs B_a = {cap:g}",
                   estimate=float(base["dp_bound"]), margin=cap),
        ExactClaim("R2", "every ablation's reconstructed bound exceeds B_a", "reconstructed bound per ablation",
                   bool((abl["dp_bound"] > cap + 1e-12).all()), fmt(abl["dp_bound"]),
                   estimate=float(abl["dp_bound"].min()), margin=cap),
        BootClaim("R3", "AUC rises above DP-MemView for every ablation", "AUC(ablation) - AUC(DP-MemView) > 0",
                  tuple(Case(v, diff(v, compliant, "auc")) for v in abl.index)),
        BootClaim("R4", "tRec rises above DP-MemView for every ablation", "tRec(ablation) - tRec(DP-MemView) > 0",
                  tuple(Case(v, diff(v, compliant, "tRec")) for v in abl.index)),
        u_claim(tuple(abl.index), compliant, track, model, u_tolerance, u_label or ""),
    ]
    if "IncompleteCharge" in t.index:
        r = t.loc["IncompleteCharge"]
        stated.append(ExactClaim("R6", "IncompleteCharge's ledger under-reports the reconstructed charge",
                                 "ledger's own value < reconstructed bound",
                                 bool(r["ledger_reported"] < r["dp_bound"] - 1e-12),
                                 f"ledger {r['ledger_reported']:.3f} vs reconstructed {r['dp_bound']:.3f}",
                                 estimate=float(r["ledger_reported"]), margin=float(r["dp_bound"])))
    if "CappedArgmax" in t.index:
        others = [v for v in t.index if v != "CappedArgmax"]
        stated.append(BootClaim("R7", "CappedArgmax has the lowest Unsup and the highest AUC",
                                "Unsup(other) - Unsup(CappedArgmax) > 0 and AUC(CappedArgmax) - AUC(other) > 0",
                                tuple(Case(f"Unsup vs {v}", diff(v, "CappedArgmax", "Unsup")) for v in others)
                                + tuple(Case(f"AUC vs {v}", diff("CappedArgmax", v, "auc")) for v in others)))
    return decide(stated, metrics)


# ---- paper consistency -------------------------------------------------------------------------------
def paper_vs_ceiling(paper: pd.DataFrame, hsum: pd.DataFrame, horizon: int = 16) -> pd.DataFrame:
    """The paper's Table 4 AUC of each variant beside this benchmark's exact optimal-auditor
    ceilings at T = ``horizon`` (:func:`dpmv_lib.experiments.rq2_horizon.horizon_summary`): no
    auditor of this benchmark's transcripts can exceed ``ceiling_auc`` (one transcript per pair)
    or ``ceiling_auc_seeds`` (all EM seeds of a pair observed). A paper AUC above both cannot come
    from a benchmark whose view distributions match ours."""
    require_columns(paper, {"variant", "auc"}, "paper Table 4")
    require_columns(hsum, {"method", "horizon", "ceiling_auc"}, "horizon summary")
    at = hsum[hsum["horizon"] == horizon].set_index("method")
    recs = []
    for r in paper.itertuples(index=False):
        if r.variant not in at.index:
            continue
        ceil = float(at.at[r.variant, "ceiling_auc"])
        seeds = float(at.at[r.variant, "ceiling_auc_seeds"]) if "ceiling_auc_seeds" in at.columns else math.nan
        top = np.nanmax([ceil, seeds])
        recs.append({"variant": r.variant, "paper_auc": float(r.auc), "ceiling_auc": ceil, "ceiling_auc_seeds": seeds,
                     "paper_minus_ceiling": float(r.auc) - top, "paper_above_ceiling": bool(float(r.auc) > top + 1e-9)})
    return pd.DataFrame.from_records(recs)


def omitted_charges(transcripts: pd.DataFrame, method: str = "IncompleteCharge", horizon: int = 16) -> pd.DataFrame:
    """Where a C2-violating interface's omitted target charges went, per transcript at T:
    ``charged`` / ``omitted`` admitted target-touching selections (charged to the target, or not),
    ``absorbed_by`` the other attributes charged instead, ``max_groups_per_read`` the most
    protected groups one read touched, ``eps`` the per-selection epsilon(s), and the exact
    reconstructed bound (charged + omitted) x eps. The paper's 4.0 vs our 16/3 (Table 4) is read
    off this table (notebook 04)."""
    df = one_model(transcripts)
    df = df[(df["method"] == method) & (df["turn"] < horizon)]
    if df.empty:
        raise ParameterError(f"no {method} transcripts to account")
    recs = []
    for (pair_id, side, seed), g in df.sort_values("turn").groupby(["pair_id", "side", "seed"], sort=True):
        attr = g["attribute"].iloc[0]
        charged = omitted = widest = 0
        absorbed: set[str] = set()
        eps: set[str] = set()
        total = Fraction(0)
        for rel_json in g["released"]:
            for s_ in json.loads(rel_json).get("slots", []):
                if attr not in s_["affected"] or s_["mechanism"] == "generic":
                    continue
                widest = max(widest, len(s_["affected"]))
                e = Fraction(s_["epsilon"])
                eps.add(str(e))
                total += e
                if attr in s_["charged"]:
                    charged += 1
                else:
                    omitted += 1
                    absorbed.update(a for a in s_["charged"] if a != attr)
        recs.append({"pair_id": pair_id, "attribute": attr, "side": side, "seed": int(seed), "charged": charged,
                     "omitted": omitted, "absorbed_by": ", ".join(sorted(absorbed)) or "-",
                     "n_absorbing": len(absorbed), "max_groups_per_read": widest,
                     "eps": ", ".join(sorted(eps)) or "-", "recon_bound": str(total)})
    return pd.DataFrame.from_records(recs)


def omitted_charges_summary(per: pd.DataFrame) -> pd.DataFrame:
    """:func:`omitted_charges` grouped by reconstructed bound: transcripts, charged / omitted
    counts, how many other attributes absorbed the omitted charges, and the widest read."""
    g = per.assign(_b=per["recon_bound"].map(Fraction)).groupby("_b", sort=True)
    out = g.agg(transcripts=("pair_id", "size"), charged=("charged", "max"), omitted_min=("omitted", "min"),
                omitted_max=("omitted", "max"), absorbing_attributes_max=("n_absorbing", "max"),
                max_groups_per_read=("max_groups_per_read", "max")).reset_index()
    out.insert(0, "recon_bound", out.pop("_b").map(str))
    return out


def omitted_charges_note(per: pd.DataFrame, paper_bound: float, cap: float) -> str:
    """One computed paragraph: how our maximum reconstructed bound of the C2 variant decomposes
    into charged and omitted selections, and how many selections the paper's bound stands for."""
    b = per["recon_bound"].map(Fraction)
    top = per[b == b.max()]
    eps = sorted({Fraction(e) for x in per["eps"] if x != "-" for e in x.split(", ")})
    e = eps[0] if len(eps) == 1 else None
    paper_sel = f"{float(paper_bound) / float(e):g} selections x {e}" if e else "(several epsilons)"
    reach = int((b >= Fraction(paper_bound).limit_denominator(1000)).sum())
    return (f"Our largest reconstructed bound is {b.max()} = ({int(top['charged'].max())} charged + "
            f"{int(top['omitted'].max())} omitted selections) x {e}: the target's ledger reports "
            f"{float(int(top['charged'].max()) * e) if e else 'n/a'} (the cap B_a = {cap:g}) while the omitted "
            f"charges went to {int(top['n_absorbing'].max())} other attributes' ledgers "
            f"({top['absorbed_by'].iloc[0]}); reads of this benchmark touch up to "
            f"{int(per['max_groups_per_read'].max())} protected groups. The paper's "
            f"{paper_bound:g} is {paper_sel}, i.e. its ledger's {cap:g} plus {paper_bound - cap:g} omitted. "
            f"{reach} of {len(per)} transcripts here reach the paper's {paper_bound:g} or more.")


def plot_table4(t4: pd.DataFrame, path: str | Path | None = None):
    """Bar chart of Table 4: ours vs the paper for AUC, tRec, U, Unsup."""
    import matplotlib.pyplot as plt

    metrics = [m for m in ("auc", "trec", "u", "unsup") if m in t4.columns]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.6))
    x = np.arange(len(t4))
    for ax, m in zip(np.atleast_1d(axes), metrics):
        ax.bar(x - 0.2, t4[m], 0.4, label="reproduced")
        if f"paper_{m}" in t4.columns:
            ax.bar(x + 0.2, t4[f"paper_{m}"], 0.4, label="paper", alpha=0.6)
        ax.set_xticks(x, t4["variant"], rotation=30, ha="right", fontsize=8)
        ax.set_title(m)
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=130)


def table4_markdown(t4: pd.DataFrame, cap: float, header: str = "") -> str:
    """Table 4 in the paper's layout, ours beside the paper with the difference."""
    rows = []
    for r in t4.to_dict("records"):
        row = {"Variant": r["variant"], "Violated": r["violated"] or "-",
               "DP bound (ours: max / mean)":
                   f"{format_bound(r['dp_bound'], cap)} / {fmt_number(r['dp_bound_mean'], 2)}",
               "ledger reports": fmt_number(r["ledger_reported"], 2)}
        if "paper_dp_bound" in r:
            row["DP bound (paper)"] = format_bound(r["paper_dp_bound"], cap)
        for m, lab in (("auc", "AUC"), ("trec", "tRec"), ("u", "U"), ("unsup", "Unsup")):
            row[f"{lab} ours"] = fmt_number(r[m])
            if f"paper_{m}" in r:
                row[f"{lab} paper"] = fmt_number(r[f"paper_{m}"])
                row[f"{lab} \u0394"] = fmt_delta(r[f"delta_{m}"])
        rows.append(row)
    return (header + "\n\n" if header else "") + markdown_table(pd.DataFrame(rows))


def summary_markdown(t4: pd.DataFrame, score_channel: pd.DataFrame, rq2_verdicts: pd.DataFrame,
                     horizon_verdicts: pd.DataFrame, cap: float) -> str:
    """Notebook 04's closing summary as a Markdown list: per Table 4 variant its reconstructed bound,
    AUC, tRec and Unsup beside the paper; the score channel's learned (by query family) and exact
    pair-known AUC beside the paper's; the verdict counts of the RQ2 and the horizon claims.

    Parameters
    ----------
    t4 : DataFrame
        :func:`table4` with the paper's columns (``paper=``).
    score_channel : DataFrame
        :func:`dpmv_lib.experiments.rq2_score.score_channel_table` with ``paper_auc`` (its rows in
        their order: raw sequence, by query family, exact pair-known).
    rq2_verdicts, horizon_verdicts : DataFrame
        :func:`claims` and :func:`dpmv_lib.experiments.rq2_horizon.horizon_claims`.
    cap : float
        B_a.
    """
    row = t4.set_index("variant")
    lines = [f"- {v}: bound {format_bound(row.loc[v, 'dp_bound'], cap)} "
             f"(paper {format_bound(row.loc[v, 'paper_dp_bound'], cap)}), "
             f"AUC {row.loc[v, 'auc']:.3f} (paper {row.loc[v, 'paper_auc']:.3f}), tRec {row.loc[v, 'trec']:.3f}, "
             f"Unsup {row.loc[v, 'unsup']:.3f}" for v in row.index]
    sc = score_channel
    lines.append(f"- score channel: learned {sc['auc'].iloc[1]:.3f} / exact pair-known {sc['auc'].iloc[2]:.3f} "
                 f"(paper {sc['paper_auc'].iloc[0]:.3f})")
    lines.append(f"- RQ2 verdicts: {counts_text(rq2_verdicts)}; horizon claims: {counts_text(horizon_verdicts)}")
    return "\n".join(lines)


def counts_text(claims_table: pd.DataFrame) -> str:
    """The verdict counts of a claims table in words, verdicts that occur only: "5 HOLDS, 1 DOES NOT HOLD"."""
    return ", ".join(f"{n} {v}" for v, n in verdict_counts(claims_table).items() if n) or "no claims"


# ---- notebook 04 steps: each takes the run (:class:`~.session.Session`) and returns a Result ------
def transcripts_step(run: Any, loaded: Any) -> Any:
    """The transcripts of every horizon method and ``ScoreChannel`` over ``T_max`` turns (cached
    under ``<results_dir>/cache/transcripts``), with pairs, seeds and turns per method."""
    from .pipeline import cached_transcripts
    from .result import Result

    cfg = run.cfg
    with run.timer("transcripts"):
        tr = cached_transcripts(loaded["bench"], loaded["responder"], HORIZON_METHODS + (SCORE_CHANNEL,),
                                seeds=run.profile.em_seeds, turns=cfg.T_max, B_a=cfg.B_a, K=cfg.K,
                                plan_horizon=cfg.T, cache_dir=cfg.cache_dir / "transcripts", workers=cfg.workers,
                                progress=cfg.progress, log=run.log)
    per = tr.groupby("method").agg(pairs=("pair_id", "nunique"), seeds=("seed", "nunique"), turns=("turn", "nunique"))
    return Result("Transcripts of the compared interfaces", tables={"per method": per}, data={"transcripts": tr},
                  finding=f"{len(tr)} transcript rows with {tr['response'].nunique()} distinct responses.")


def accounting_step(run: Any, transcripts: Any) -> Any:
    """The reconstructed target bound and the interface's own ledger per method at every horizon
    (``04_accounting`` holds horizon T), with IncompleteCharge's omitted charges in the finding."""
    from .result import Result, sentence

    cfg = run.cfg
    with run.timer("accounting"):
        acc = accounting_per_pair(transcripts["transcripts"], horizons=range(1, cfg.T_max + 1),
                                  methods=HORIZON_METHODS)
        acc_sum = accounting_summary(acc, cfg.B_a)
    acc_T = acc_sum[acc_sum["horizon"] == cfg.T].reset_index(drop=True)
    run.write_table("04_accounting", acc_T)
    ic = acc[(acc["method"] == "IncompleteCharge") & (acc["horizon"] == cfg.T)]
    omitted, admitted = int(ic["omitted"].sum()), int(ic["admitted_target"].sum())
    finding = sentence("IncompleteCharge at T = {T}: the target's charge was omitted on {o} of {a} admitted "
                       "target-touching selections ({share:.0%}); its ledger reports at most {led:.2f}, the "
                       "reconstruction reaches {rec:.2f}. The bound is the same on M and M' for every method: "
                       "{same}.", T=cfg.T, o=omitted, a=admitted, share=omitted / max(admitted, 1),
                       led=float(ic["ledger"].max()), rec=float(ic["recon_bound"].max()),
                       same=bool(acc_T["bound_same_on_M_and_Mprime"].all()))
    shown = acc_T[["method", "dp_bound", "dp_bound_mean", "ledger_max", "share_bound_over_cap", "omitted_max",
                   "share_omitting", "ledger_underreports", "bound_same_on_M_and_Mprime"]]
    return Result("Accounting: the reconstructed target bound", finding=finding,
                  tables={f"T = {cfg.T} (every column: the written table)": shown},
                  data={"per_pair": acc, "summary": acc_sum})


def charge_step(run: Any, loaded: Any) -> Any:
    """The benchmark's charge structure behind Table 4's DP-bound column
    (:func:`charge_structure_table`), with the NoCap bound it implies in the finding."""
    from .result import Result, sentence

    cfg = run.cfg
    bench = loaded["bench"]
    charge = charge_structure_table(bench.pairs, bench.policy, horizon=cfg.T, K=cfg.K, B_a=cfg.B_a)
    run.write_table("04_charge_structure", charge)
    rows = charge.set_index("quantity")
    nocap = rows.loc[f"NoCap reconstructed bound at T={cfg.T}"]
    c_a = rows.loc[f"preallocated C_a over the first {cfg.T} queries"]
    neutral = rows.loc["neutral turns reading I_a (per pair)"]
    finding = sentence("Neutral queries read I_a on {n_lo} to {n_hi} turns per pair, so the target's group is read "
                       "only by target-relevant queries; NoCap, which charges eps = B_a/K = {eps} per admitted "
                       "target selection and never blocks, reaches {nc_lo} to {nc_hi} at T = {T}, and the "
                       "preallocated mode plans C_a = {c_lo} to {c_hi} target-touching reads.",
                       n_lo=neutral["min"], n_hi=neutral["max"], eps=Fraction(str(cfg.B_a)) / cfg.K,
                       nc_lo=nocap["min"], nc_hi=nocap["max"], T=cfg.T, c_lo=c_a["min"], c_hi=c_a["max"])
    return Result("Charge structure of the benchmark", finding=finding, tables={"per pair, min and max": charge})


def measure_step(run: Any, loaded: Any, transcripts: Any) -> Any:
    """The RQ1 embedding auditor at every learned horizon and the blinded rubric judge at T."""
    from ..evaluate import u_validity
    from ..evaluate.audit import AuditConfig, run_audit
    from ..evaluate.judge import make_judge, score_transcripts, summarise_utility
    from .common import run_encoder
    from .result import Result

    cfg, prof = run.cfg, run.profile
    tr = transcripts["transcripts"]
    bench_of = {"pairedmem": loaded["bench"]}
    with run.timer("audit"):
        encoder = run_encoder(prof.encoder, cfg.results_dir)
        acfg = AuditConfig(horizons=cfg.learned_horizons, n_boot=cfg.n_boot, seed=cfg.seed, unit=cfg.audit_unit)
        audit_sum, scores = run_audit(tr[tr["method"].isin(HORIZON_METHODS)], encoder, acfg, progress=cfg.progress)
    with run.timer("judge"):
        judge = make_judge(prof.judge, encoder)
        util_t = score_transcripts(tr[tr["method"].isin(TABLE4_METHODS)], bench_of, judge, cfg.T,
                                   progress=cfg.progress)
        # U holds the validated dimensions (03's check, from the cache)
        util_t = u_validity.with_validated_u(util_t, judge, cfg.data_dir, cfg.cache_dir)
        util = summarise_utility(util_t, n_boot=cfg.n_boot, seed=cfg.seed)
    return Result("Auditor and judge", tables={"judge at T": util[["method", "U", "tRec", "Unsup", "n_pairs",
                                                                  "n_failed"]]},
                  finding=(f"Encoder {encoder.id} (embedding unit {audit_sum['embedding_unit'].iloc[0]}); judge "
                           f"{judge.id} with {int(util['n_failed'].sum())} failures; "
                           f"{u_validity.dims_label(util_t['U_dims'].iloc[0])}."),
                  data={"audit": audit_sum, "scores": scores, "util_t": util_t, "util": util, "encoder": encoder,
                        "judge": judge})


def table4_display(t4: pd.DataFrame, cap: float) -> dict[str, pd.DataFrame]:
    """Table 4 as two readable tables: the accounting columns and the measured columns, ours beside
    the paper (the differences are in the written table)."""
    acc = pd.DataFrame({"variant": t4["variant"], "violated": t4["violated"].fillna("").replace("", "-"),
                        "DP bound (max / mean)": [f"{format_bound(b, cap)} / {fmt_number(m, 2)}"
                                                  for b, m in zip(t4["dp_bound"], t4["dp_bound_mean"])],
                        "ledger reports": [fmt_number(x, 2) for x in t4["ledger_reported"]]})
    if "paper_dp_bound" in t4.columns:
        acc["DP bound (paper)"] = [format_bound(x, cap) for x in t4["paper_dp_bound"]]
    meas = pd.DataFrame({"variant": t4["variant"]})
    for m, lab in (("auc", "AUC"), ("trec", "tRec"), ("u", "U"), ("unsup", "Unsup")):
        meas[f"{lab} ours"] = t4[m]
        if f"paper_{m}" in t4.columns:
            meas[f"{lab} paper"] = t4[f"paper_{m}"]
    return {"accounting": acc, "measured, beside the paper": meas}


def table4_step(run: Any, loaded: Any, accounting: Any, measured: Any) -> Any:
    """Table 4 beside the paper (``04_table4_safeguards``), the RQ2 claims decided by the paired
    bootstrap (``04_rq2_claims``) and the bar chart ``04_table4.png``."""
    from . import verdicts
    from .common import load_paper_csv
    from .result import Result

    cfg = run.cfg
    paper = load_paper_csv("paper_table4_safeguards.csv")
    t4 = table4(accounting["summary"], measured["audit"], measured["util"], paper=paper, horizon=cfg.T)
    head = (f"Table 4 reproduction (RQ2) at T={cfg.T}, B_a={cfg.B_a:g}, K={cfg.K}; profile {run.profile.name}; "
            f"response model {loaded['responder'].name}; encoder {measured['encoder'].id}; judge "
            f"{measured['judge'].id}; {len(loaded['bench'])} pairs. DP bound = reconstructed target bound "
            f"(max / mean over pairs); paper: Qwen2.5-7B.")
    run.write_table("04_table4_safeguards", t4, table4_markdown(t4, cfg.B_a, head))
    scores = measured["scores"]
    metrics = verdicts.paired_bootstrap(scores[(scores["horizon"] == cfg.T) & scores["method"].isin(TABLE4_METHODS)],
                                        measured["util_t"], n_boot=max(cfg.n_boot, verdicts.N_BOOT), seed=cfg.seed)
    rq2_claims = claims(t4, cfg.B_a, metrics)
    run.write_table("04_rq2_claims", rq2_claims, verdicts.claims_markdown(rq2_claims))
    path = run.figure_path("04_table4")
    plot_table4(t4, path)
    res = Result(f"Table 4 at T = {cfg.T}, B_a = {cfg.B_a:g}, K = {cfg.K}", tables=table4_display(t4, cfg.B_a),
                 notes=[verdicts.claims_markdown(rq2_claims)],
                 finding=f"RQ2 verdicts: {counts_text(rq2_claims)} (each claim's test and evidence above).",
                 data={"t4": t4, "claims": rq2_claims, "metrics": metrics, "paper": paper})
    return res.show_figure("Table 4, ours beside the paper", path)


def power_step(run: Any, transcripts: Any, leakage: Any, measured: Any, table4_result: Any) -> Any:
    """The C.5 auditor beside stronger honest learned auditors against the exact ceiling of the
    same statistic at T (``04_auditor_power``, figure ``04_auditor_power.png``)."""
    from ..bench.datasets import load_gold_rules
    from .auditor_power import POWER_GOAL, auditor_power, power_figure, power_table
    from .result import Result

    cfg = run.cfg
    tr = transcripts["transcripts"]
    track, model = table4_result["metrics"].combos()[0]
    hsum = leakage["summary"]
    ceil_T = hsum[hsum["horizon"] == cfg.T].assign(track=track, response_model=model)
    power = auditor_power(tr[tr["method"].isin(HORIZON_METHODS)], measured["encoder"], ceil_T, horizon=cfg.T,
                          view_links=load_gold_rules(cfg.data_dir)["view_links"], seed=cfg.seed, n_boot=cfg.n_boot)
    ptab = power_table(power)
    run.write_table("04_auditor_power", ptab)
    path = run.figure_path("04_auditor_power")
    import matplotlib.pyplot as plt

    plt.close(power_figure(power, path))
    row = ptab.set_index("method")
    ca = row.loc["CappedArgmax"] if "CappedArgmax" in row.index else None
    finding = (f"For CappedArgmax the best learned auditor ({ca['best']}) reaches power {ca['best power']:.2f} "
               f"(goal {POWER_GOAL:g}: {'met' if ca['meets_goal'] else 'not met'}); the best auditor is chosen on the "
               f"evaluation pairs, so its power is optimistic by that choice." if ca is not None else "")
    shown = ptab.drop(columns=["track", "response_model", "best power_lo", "best power_hi"], errors="ignore")
    return Result("Auditors with power", tables={"AUC per auditor and the best one's power": shown},
                  finding=finding, data={"power": ptab}).show_figure("power", path)


def auditor_limits(t4: pd.DataFrame, rq2_claims: pd.DataFrame, ceilings: pd.DataFrame, power: pd.DataFrame, *,
                   claim: str = "R3", compliant: str = "DP-MemView (on)") -> tuple[pd.DataFrame, str]:
    """Which AUC verdict reflects the auditor rather than the mechanism: per variant the learned
    (seed-averaged) AUC, the exact ceiling of the same statistic, the best honest auditor's AUC and
    the share of the ceiling's gap over chance the learned auditor closes; and one sentence for
    ``claim`` (the AUC claim) that names every variant whose learned AUC lies below the compliant
    interface's while its exact ceiling lies above it.

    Parameters
    ----------
    t4 : DataFrame
        :func:`table4` (``variant``, ``auc``).
    rq2_claims : DataFrame
        :func:`claims`.
    ceilings : DataFrame
        ``method``, ``ceiling_auc_seeds`` at T (:func:`~.rq2_horizon.horizon_summary`).
    power : DataFrame
        :func:`~.auditor_power.power_table` (``method``, ``best`` and ``auc <auditor>`` columns).
    """
    require_columns(t4, {"variant", "auc"}, "Table 4")
    require_columns(ceilings, {"method", "ceiling_auc_seeds"}, "ceilings")
    require_columns(power, {"method", "best"}, "power table")
    ceil = ceilings.set_index("method")["ceiling_auc_seeds"]
    pw = power.set_index("method")
    rows = []
    for v, auc in zip(t4["variant"], t4["auc"]):
        c = float(ceil.get(v, np.nan))
        best = pw.at[v, "best"] if v in pw.index else None
        best_auc = float(pw.at[v, f"auc {best}"]) if best is not None else np.nan
        rows.append({"variant": v, "learned_auc": float(auc), "ceiling_auc_seeds": c, "best_auditor": best or "-",
                     "best_auc": best_auc,
                     "learned_share_of_ceiling": (auc - 0.5) / (c - 0.5) if c > 0.5 + 1e-9 else np.nan})
    tab = pd.DataFrame(rows)
    verdict = rq2_claims.set_index("id").at[claim, "verdict"]
    t = tab.set_index("variant")
    base_auc, base_ceil = float(t.at[compliant, "learned_auc"]), float(t.at[compliant, "ceiling_auc_seeds"])
    weak = t[(t.index != compliant) & (t["learned_auc"] <= base_auc) & (t["ceiling_auc_seeds"] > base_ceil)]
    if weak.empty:
        return tab, (f"{claim} is {verdict}; no ablation's learned AUC falls below {compliant}'s "
                     f"({base_auc:.3f}) while its exact ceiling lies above it.")
    parts = [f"{v}'s learned AUC is {r.learned_auc:.3f} against an exact ceiling of {r.ceiling_auc_seeds:.3f} "
             f"(best honest auditor: {r.best_auditor}, {r.best_auc:.3f})" for v, r in weak.iterrows()]
    return tab, (f"{claim} is {verdict}, and this reflects the auditor, not the mechanism: "
                 + "; ".join(parts) + f", while {compliant} has learned AUC {base_auc:.3f} and ceiling "
                 f"{base_ceil:.3f}. The exact ceiling shows the ablation is more distinguishable than the "
                 f"compliant interface; the C.5 auditor does not find it.")


def auditor_limits_step(run: Any, table4_result: Any, leakage: Any, power: Any) -> Any:
    """:func:`auditor_limits` at T as a result (``04_auditor_limits``)."""
    from .result import Result

    hsum = leakage["summary"]
    tab, finding = auditor_limits(table4_result["t4"], table4_result["claims"], hsum[hsum["horizon"] == run.cfg.T],
                                  power["power"])
    run.write_table("04_auditor_limits", tab)
    return Result("The AUC verdicts against the exact ceilings", tables={"learned AUC, ceiling and best auditor": tab},
                  finding=finding, data={"table": tab})


def paper_step(run: Any, transcripts: Any, table4_result: Any, leakage: Any) -> Any:
    """The paper's Table 4 AUCs against this benchmark's exact ceilings (``04_paper_vs_ceiling``) and
    IncompleteCharge's omitted charges (``04_incomplete_charge_accounting``)."""
    from .result import Result

    cfg = run.cfg
    paper = table4_result["paper"]
    pvc = paper_vs_ceiling(paper, leakage["summary"], horizon=cfg.T)
    run.write_table("04_paper_vs_ceiling", pvc)
    above = [f"{r.variant}: the paper's AUC {r.paper_auc:.3f} is above this benchmark's exact ceilings "
             f"({r.ceiling_auc:.3f} one transcript, {r.ceiling_auc_seeds:.3f} all seeds) by "
             f"{r.paper_minus_ceiling:+.3f}"
             for r in pvc[pvc["paper_above_ceiling"]].itertuples()]
    ic = omitted_charges(transcripts["transcripts"], "IncompleteCharge", horizon=cfg.T)
    ic_sum = omitted_charges_summary(ic)
    run.write_table("04_incomplete_charge_accounting", ic_sum)
    paper_ic = float(paper.set_index("variant").at["IncompleteCharge", "dp_bound"])
    lead = ("; ".join(above) + ". ") if above else "No paper AUC lies above both exact ceilings. "
    return Result("The paper's numbers against the exact ceilings",
                  tables={"paper AUC vs exact ceilings": pvc, "IncompleteCharge: charged and omitted": ic_sum},
                  finding=lead + omitted_charges_note(ic, paper_ic, cfg.B_a), data={"paper_vs_ceiling": pvc})


def summary_step(run: Any, loaded: Any, table4_result: Any, score_channel: Any, theorem: Any) -> Any:
    """Notebook 04's closing summary (:func:`summary_markdown`) and ``04_run.json``."""
    from .result import Result, sentence

    cfg = run.cfg
    md = summary_markdown(table4_result["t4"], score_channel["table"], table4_result["claims"], theorem["claims"],
                          cfg.B_a)
    (run.tables_dir / "04_run.json").write_text(json.dumps(
        {"profile": run.profile.name, "pairs": len(loaded["bench"]), "B_a": cfg.B_a, "K": cfg.K, "T": cfg.T,
         "T_max": cfg.T_max, "timings_s": run.timer.seconds, "total_s": run.timer.total}, indent=1))
    return Result("Summary", notes=[md], finding=sentence(
        "RQ2 verdicts: {rq2}; horizon claims: {hor}; the notebook took {s:.0f} s.",
        rq2=counts_text(table4_result["claims"]), hor=counts_text(theorem["claims"]), s=float(run.timer.total)))
