"""RQ2: interface safeguards (paper "RQ2: Interface Safeguards", Table 4, Appendix B.5).

Everything notebook 04 computes, as functions of the transcript table (docs/architecture.md)
or of the benchmark pairs:

* **Accounting** (Table 4 "DP bound"): the public releases of every transcript are turned back
  into :class:`~dpmv_lib.memview.Release` objects and passed to
  :func:`dpmv_lib.accounting.reconstructed_bound` (the target attribute's cost including charges
  omitted from its ledger; inf for a deterministic release) next to
  :func:`~dpmv_lib.accounting.reported_ledger` (what the interface's own ledger says).
* **Table 4 assembly** with the paper's numbers and deltas, and the RQ2 claims evaluated from
  the table (:func:`rq2_claims`).
* **Score channel** (C3/C6): a calibrated logistic-regression auditor on the released top
  internal score sequence (``ScoreChannel`` extras), same split protocol as the embedding
  auditor of :mod:`dpmv_lib.audit`, plus the exact pair-level fact that the score sequence
  differs between M and M'.
* **C1 support failure**: :class:`~dpmv_lib.variants.StoreDependentVocabulary` run in lockstep
  on M and M' under the same public prefix; the exact view supports (``_outcomes``) show which
  views have positive probability under one store and zero under the other.
* **Leakage vs horizon**: the exact optimal auditor of :mod:`dpmv_lib.oracle`
  (:class:`~dpmv_lib.oracle.LLRDistribution`) convolved turn by turn, recording every prefix
  T = 1..32 in one pass; max realised privacy loss <= B_a (Theorem 1) for DP-MemView, not for
  the ablations.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .plots import save_figure
from .accounting import reconstructed_bound, reported_ledger
from .errors import ParameterError
from .memview import MemView, Release, SlotRelease
from .oracle import DEFAULT_GRID, LLRDistribution, mixture
from .policy import Policy, Query, TableReadPolicy, TableRouter
from .store import MemoryStore

TABLE4_METHODS: tuple[str, ...] = ("DP-MemView (on)", "IncompleteCharge", "CappedArgmax", "NoCap")
HORIZON_METHODS: tuple[str, ...] = ("DP-MemView (on)", "DP-MemView (pre)", "IncompleteCharge",
                                    "CappedArgmax", "NoCap")
SCORE_CHANNEL = "ScoreChannel"
TABLE4_METRICS: tuple[str, ...] = ("dp_bound", "auc", "trec", "u", "unsup")
HORIZON_MAX_ATOMS = 4096  # atoms kept per prefix distribution (error bounds stay rigorous)


# ---- small helpers ------------------------------------------------------------------------------
def violated_condition(method: str) -> str:
    """The contract condition a compared interface breaks ("" if compliant), read from the code
    (:attr:`MemView.violates` of the variant behind the interface), never typed in."""
    from .interfaces import make_interface

    return make_interface(method).violates or ""


def fraction_or_inf(x: Fraction | float) -> float:
    """A bound as a float (inf stays inf)."""
    return math.inf if (isinstance(x, float) and math.isinf(x)) else float(x)


def _require(df: pd.DataFrame, cols: Iterable[str], what: str = "transcript table") -> None:
    missing = sorted(set(cols) - set(df.columns))
    if missing:
        raise ParameterError(f"{what} lacks columns {missing}")


def _one_model(transcripts: pd.DataFrame) -> pd.DataFrame:
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
    _require(paper, on, "paper table")
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
    _require(rows, {"turn", "query", "intent", "released"})
    rows = rows.sort_values("turn")
    qtype = rows["qtype"] if "qtype" in rows.columns else [""] * len(rows)
    return tuple(release_from_json(r, Query(q, i, qt)) for r, q, i, qt in
                 zip(rows["released"], rows["query"], rows["intent"], qtype))


def accounting_per_pair(transcripts: pd.DataFrame, horizons: Sequence[int] = (16,), *,
                        sides: Sequence[str] = ("M", "M'"),
                        methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (method, pair, side, seed, horizon T) of a view-releasing method:

    * ``recon_bound``: :func:`~dpmv_lib.accounting.reconstructed_bound` of the pair's target
      attribute over the first T releases (inf if a deterministic release touched I_a);
    * ``ledger``: the target's own ledger after T turns (:func:`~dpmv_lib.accounting.reported_ledger`);
    * ``omitted``: admitted private selections that touched I_a but did not charge a (C2);
    * ``admitted_target``: admitted selections that touched I_a."""
    _require(transcripts, {"method", "pair_id", "attribute", "side", "seed", "turn", "query", "intent",
                           "released"})
    df = _one_model(transcripts)
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
    for (method, pair_id, side, seed), idx in df.groupby(["method", "pair_id", "side", "seed"], sort=True).indices.items():
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
    _require(acc, {"method", "horizon", "pair_id", "side", "seed", "recon_bound", "ledger", "omitted",
                   "attribute"}, "accounting table")
    cap_of = (lambda a: float(cap[a])) if isinstance(cap, Mapping) else (lambda a: float(cap))
    df = acc.assign(_cap=acc["attribute"].map(cap_of))
    df["_over"] = df["recon_bound"] > df["_cap"] + 1e-12
    df["_omits"] = df["omitted"] > 0
    df["_under"] = df["recon_bound"] > df["ledger"] + 1e-12
    df["_inf"] = np.isinf(df["recon_bound"])
    keys = ["method", "horizon"]
    same = (df.groupby(keys + ["pair_id", "seed"], sort=False)["recon_bound"].nunique() <= 1).groupby(level=keys).all()
    g = df.groupby(keys, sort=False)
    out = g.agg(n_pairs=("pair_id", "nunique"), dp_bound=("recon_bound", "max"), dp_bound_mean=("recon_bound", "mean"),
                dp_bound_median=("recon_bound", "median"), ledger_max=("ledger", "max"), ledger_mean=("ledger", "mean"),
                share_bound_over_cap=("_over", "mean"), omitted_mean=("omitted", "mean"), omitted_max=("omitted", "max"),
                share_omitting=("_omits", "mean"), ledger_underreports=("_under", "any"), _any_inf=("_inf", "any"))
    out.loc[out["_any_inf"], "dp_bound_mean"] = math.inf
    out["bound_same_on_M_and_Mprime"] = same
    out = out.drop(columns="_any_inf").reset_index()
    out["horizon"] = out["horizon"].astype(int)
    out["omitted_max"] = out["omitted_max"].astype(int)
    return out


# ---- Table 4 assembly and claims ---------------------------------------------------------------------
def table4(accounting: pd.DataFrame, privacy: pd.DataFrame, utility: pd.DataFrame, *,
           methods: Sequence[str] = TABLE4_METHODS, paper: pd.DataFrame | None = None,
           horizon: int = 16) -> pd.DataFrame:
    """Paper Table 4 with our numbers: one row per variant with the violated condition (from the
    code), the reconstructed target bound (max and mean over pairs), the ledger's own value, the
    embedding-auditor AUC / TPR, tRec, U, Unsup, and (with ``paper``) the paper's values and deltas.

    ``accounting``: :func:`accounting_summary`; ``privacy``: rows with ``method``, ``auc``
    (optional ``tpr``, ``horizon``) e.g. :func:`dpmv_lib.audit.run_audit`'s summary; ``utility``:
    rows with ``method``, ``U``, ``tRec``, ``Unsup`` (:func:`dpmv_lib.judge.summarise_utility`)."""
    _require(accounting, {"method", "horizon", "dp_bound", "dp_bound_mean", "ledger_max"}, "accounting summary")
    _require(privacy, {"method", "auc"}, "privacy summary")
    _require(utility, {"method", "U", "tRec", "Unsup"}, "utility summary")
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


@dataclass(frozen=True)
class Claim:
    """One claim of the paper's RQ2 text, evaluated on our numbers."""

    claim: str
    holds: bool
    evidence: str


def rq2_claims(t4: pd.DataFrame, cap: float, *, compliant: str = "DP-MemView (on)",
               u_tolerance: float = 0.002) -> pd.DataFrame:
    """The RQ2 claims of the paper computed from our Table 4 (not typed in):
    the compliant bound is <= B_a and every ablation's exceeds it; AUC and tRec rise above the
    compliant interface for every ablation; U changes by at most ``u_tolerance``; IncompleteCharge's
    ledger under-reports its reconstructed charge; CappedArgmax has the lowest Unsup and the
    highest AUC."""
    _require(t4, {"variant", "dp_bound", "auc", "trec", "u", "unsup", "ledger_reported"}, "Table 4")
    t = t4.set_index("variant")
    if compliant not in t.index:
        raise ParameterError(f"Table 4 lacks the compliant row {compliant!r}")
    base = t.loc[compliant]
    abl = t.drop(index=compliant)
    claims = []
    fmt = lambda s: ", ".join(f"{k} {v:.3f}" for k, v in s.items())  # noqa: E731
    claims.append(Claim("DP-MemView's reconstructed bound stays <= B_a", bool(base["dp_bound"] <= cap + 1e-12),
                        f"{base['dp_bound']:.3f} vs B_a = {cap:g}"))
    claims.append(Claim("every ablation's reconstructed bound exceeds B_a", bool((abl["dp_bound"] > cap + 1e-12).all()),
                        fmt(abl["dp_bound"])))
    claims.append(Claim("AUC rises above DP-MemView for every ablation", bool((abl["auc"] > base["auc"]).all()),
                        f"DP-MemView {base['auc']:.3f}; " + fmt(abl["auc"])))
    claims.append(Claim("tRec rises above DP-MemView for every ablation", bool((abl["trec"] > base["trec"]).all()),
                        f"DP-MemView {base['trec']:.3f}; " + fmt(abl["trec"])))
    du = (abl["u"] - base["u"]).abs()
    claims.append(Claim(f"U changes by at most {u_tolerance}", bool(du.max() <= u_tolerance + 1e-12),
                        f"max |dU| = {du.max():.4f}"))
    if "IncompleteCharge" in t.index:
        r = t.loc["IncompleteCharge"]
        claims.append(Claim("IncompleteCharge's ledger under-reports the reconstructed charge",
                            bool(r["ledger_reported"] < r["dp_bound"] - 1e-12),
                            f"ledger {r['ledger_reported']:.3f} vs reconstructed {r['dp_bound']:.3f}"))
    if "CappedArgmax" in t.index:
        r = t.loc["CappedArgmax"]
        claims.append(Claim("CappedArgmax has the lowest Unsup and the highest AUC",
                            bool(r["unsup"] <= t["unsup"].min() + 1e-12 and r["auc"] >= t["auc"].max() - 1e-12),
                            f"Unsup {r['unsup']:.3f} (min {t['unsup'].min():.3f}), AUC {r['auc']:.3f} "
                            f"(max {t['auc'].max():.3f})"))
    return pd.DataFrame([c.__dict__ for c in claims])


# ---- score channel (C3/C6) ----------------------------------------------------------------------------
def score_sequences(transcripts: pd.DataFrame, horizon: int = 16, *, method: str = SCORE_CHANNEL,
                    key: str = "top_score") -> tuple[pd.DataFrame, np.ndarray]:
    """The released side channel as features: per transcript (pair, side, seed) the vector of the
    top internal score per turn (max over the turn's slots; 0 where no score was released, i.e.
    generic fallback, a public event identical under M and M').

    Returns (keys, X) with keys = track, response_model, method, pair_id, attribute, split, side, seed."""
    _require(transcripts, {"method", "pair_id", "attribute", "split", "side", "seed", "turn", "released"})
    df = transcripts[(transcripts["method"] == method) & (transcripts["turn"] < horizon)]
    if df.empty:
        raise ParameterError(f"no {method!r} rows in the transcript table")
    df = _one_model(df)
    cols = ["track", "response_model", "method", "pair_id", "attribute", "split", "side", "seed"]
    for c in ("track", "response_model"):
        if c not in df.columns:
            df = df.assign(**{c: ""})
    keys, rows = [], []
    for k, g in df.sort_values("turn").groupby(cols, sort=True):
        if len(g) != horizon:
            raise ParameterError(f"{k}: need turns 0..{horizon - 1}, got {len(g)}")
        vec = []
        for r in g["released"]:
            obj = json.loads(r)
            vals = [float(s[key]) for s in obj.get("slots", []) if key in s]
            vec.append(max(vals) if vals else 0.0)
        keys.append(dict(zip(cols, k)))
        rows.append(vec)
    return pd.DataFrame(keys), np.asarray(rows, dtype=float)


def feature_audit(keys: pd.DataFrame, X: np.ndarray, *, horizon: int, config: Any = None,
                  label: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The embedding auditor's protocol (C.5) on arbitrary transcript features: per attribute a
    logistic regression fitted on train pairs, sigmoid-calibrated on validation pairs, evaluated
    on test pairs; macro AUC / TPR over attributes with seeds averaged within a pair
    (:func:`dpmv_lib.audit.summarise_scores`). Returns (summary, scores)."""
    from .audit import AuditConfig, fit_auditor, summarise_scores

    config = config or AuditConfig(horizons=(horizon,))
    _require(keys, {"pair_id", "attribute", "split", "side", "seed"}, "feature keys")
    if len(keys) != len(X):
        raise ParameterError(f"{len(keys)} keys but {len(X)} feature rows")
    keys = keys.reset_index(drop=True).copy()
    for c in ("track", "response_model", "method"):
        if c not in keys.columns:
            keys[c] = ""
    if label is not None:
        keys["method"] = label
    y = (keys["side"] == "M").to_numpy(int)
    parts = []
    for attr, idx in keys.groupby("attribute").groups.items():
        idx = np.asarray(idx)
        sp = keys.loc[idx, "split"].to_numpy()
        tr, va, te = idx[sp == "train"], idx[sp == "validation"], idx[sp == "test"]
        if len(tr) == 0 or len(va) == 0 or len(te) == 0:
            raise ParameterError(f"attribute {attr!r}: need train, validation and test pairs "
                                 f"(got {len(tr)}, {len(va)}, {len(te)} transcripts)")
        aud = fit_auditor(X[tr], y[tr], X[va], y[va], C=config.C, max_iter=config.max_iter,
                          response_model=str(keys.loc[tr[0], "response_model"]),
                          method=str(keys.loc[tr[0], "method"]), attribute=attr, horizon=horizon)
        part = keys.loc[te, ["track", "response_model", "method", "pair_id", "attribute", "side", "seed"]].copy()
        part["horizon"] = horizon
        part["score"] = aud.predict(X[te])
        parts.append(part)
    scores = pd.concat(parts, ignore_index=True)
    return summarise_scores(scores, config), scores


def score_channel_exact(keys: pd.DataFrame, X: np.ndarray, *, atol: float = 0.0) -> pd.DataFrame:
    """Exact facts about the score channel, per attribute and overall: the share of (pair, seed)
    whose released score sequence differs between M and M'. The channel is a deterministic
    function of the store given the public path, so an auditor that knows the pair and sees one
    differing sequence identifies the store with certainty: its AUC is 0.5 + share / 2."""
    k = keys.reset_index(drop=True)
    m = {(r.pair_id, r.seed): i for i, r in k.iterrows() if r.side == "M"}
    mp = {(r.pair_id, r.seed): i for i, r in k.iterrows() if r.side == "M'"}
    if set(m) != set(mp):
        raise ParameterError("every (pair, seed) needs a score sequence for M and M'")
    recs = []
    for (pid, seed), i in m.items():
        j = mp[(pid, seed)]
        recs.append({"pair_id": pid, "seed": seed, "attribute": k.at[i, "attribute"],
                     "differs": bool(np.any(np.abs(X[i] - X[j]) > atol)),
                     "mean_gap": float(np.mean(X[i] - X[j]))})
    per = pd.DataFrame(recs)
    out = per.groupby("attribute").agg(share_differing=("differs", "mean"), mean_gap=("mean_gap", "mean")).reset_index()
    out.loc[len(out)] = {"attribute": "all", "share_differing": per["differs"].mean(), "mean_gap": per["mean_gap"].mean()}
    out["pair_known_auc"] = 0.5 + out["share_differing"] / 2
    return out


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
    prefix, through the interface's own hooks (``_route``, ``_prepare`` - which performs the C5
    check and ledger update -, ``_outcomes``); nothing is sampled unless the router needs history.

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
        route, route_p = mv._route(q, h), mvp._route(q, h)
        if tuple(route) != tuple(route_p):  # C4 broken: the public control itself differs
            steps.append(SlotStep(t, "|".join(route), (), frozenset(), frozenset(), None, False, "route",
                                  {"|".join(route): 1.0}, {"|".join(route_p): 1.0}, False))
            break
        done = []
        for g in route:
            prep, prep_p = mv._prepare(q, g, h), mvp._prepare(q, g, h)
            equal = prep.plan == prep_p.plan and prep.admitted == prep_p.admitted
            out, out_p = mv._outcomes(prep), mvp._outcomes(prep_p)
            pm = _probs(out)
            pq = _probs(out_p)
            mech = out[0][0].mechanism
            steps.append(SlotStep(t, g, prep.plan.read_set, prep.plan.affected, prep.plan.charged,
                                  prep.plan.epsilon, bool(prep.admitted), mech, pm, pq, equal))
            if not free:
                done.append(mv._sample(prep))
        if not free:
            hist.append(mv._make_release(q, done))
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
    _require(records, {by, "pair_id", "failure", "mass_only_M", "mass_only_Mp", "only_M", "only_Mp"},
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
    C1-violating :class:`~dpmv_lib.variants.StoreDependentVocabulary` and compliant MemView."""
    from .ledger import OnlineBudget
    from .scorer import LexiconScorer
    from .variants import StoreDependentVocabulary

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


# ---- exact optimal auditor, every prefix in one pass ----------------------------------------------------
def prefix_distributions(turns: Sequence[tuple[Mapping, Mapping]], horizons: Iterable[int], *,
                         public_equal: Sequence[bool] | None = None, grid: float = DEFAULT_GRID,
                         max_atoms: int = HORIZON_MAX_ATOMS,
                         turn_dist: Callable[[int], LLRDistribution] | None = None) -> dict[int, LLRDistribution]:
    """The exact LLR distribution of the augmented transcript prefix for every T in ``horizons``
    (the computation of :func:`dpmv_lib.oracle.trajectory_distribution`, recorded turn by turn).

    ``turns[t]`` = (probs under M, probs under M'), each slot -> {view: prob}. A turn whose public
    release (``public_equal[t]`` False) or active slots differ makes the rest separable.
    ``turn_dist(t)`` may supply turn t's own (memoised) LLR distribution."""
    hs = sorted({int(h) for h in horizons})
    if not hs or hs[0] < 1 or hs[-1] > len(turns):
        raise ParameterError(f"horizons must lie in 1..{len(turns)}, got {list(horizons)}")
    want = set(hs)
    out: dict[int, LLRDistribution] = {}
    d = LLRDistribution.point()
    separable = False
    for t in range(hs[-1]):
        pm_t, pq_t = turns[t]
        if not separable:
            if (public_equal is not None and not public_equal[t]) or set(pm_t) != set(pq_t):
                separable, d = True, LLRDistribution.separable()
            else:
                td = turn_dist(t) if turn_dist is not None else _turn_distribution(pm_t, pq_t)
                if not (td.n_atoms == 1 and td.llr[0] == 0):
                    d = d.convolve(td, grid=grid, max_atoms=max_atoms)
        if t + 1 in want:
            out[t + 1] = d
    return out


def _turn_distribution(pm_t: Mapping, pq_t: Mapping) -> LLRDistribution:
    """One turn's LLR distribution: its slots' releases convolved (independent given the prefix)."""
    from .oracle import trajectory_distribution

    return trajectory_distribution([(pm_t, pq_t)])


def steps_to_turns(steps: Sequence[SlotStep], horizon: int) -> tuple[list[tuple[dict, dict]], list[bool]]:
    """Group lockstep steps into the per-turn (probs_M, probs_M') format of the oracle."""
    turns: list[tuple[dict, dict]] = [({}, {}) for _ in range(horizon)]
    equal = [True] * horizon
    for s in steps:
        if s.turn >= horizon:
            continue
        turns[s.turn][0][s.slot] = dict(s.probs_m)
        turns[s.turn][1][s.slot] = dict(s.probs_mp)
        equal[s.turn] = equal[s.turn] and s.public_equal
    return turns, equal


def public_path(released: str) -> str:
    """The public release of one turn minus the sampled views (the ledger path given the prefix),
    as :mod:`dpmv_lib.oracle` defines it: the ``released`` JSON without view/views/query keys."""
    try:
        obj = json.loads(released) if released else {}
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"the 'released' column holds invalid JSON: {str(released)[:80]!r}") from exc
    return json.dumps(_strip_views(obj), sort_keys=True)


def _strip_views(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_views(v) for k, v in obj.items() if k not in ("view", "views", "query")}
    if isinstance(obj, list):
        return [_strip_views(v) for v in obj]
    return obj


class _Memo:
    """Memoised parsing of the transcript table's JSON cells (many repeat across pairs/seeds)."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        self.probs: dict[str, dict] = {}
        self.dists: dict[tuple[str, str], LLRDistribution] = {}

    def path(self, s: str) -> str:
        hit = self.paths.get(s)
        if hit is None:
            hit = self.paths[s] = public_path(s)
        return hit

    def prob(self, s: str) -> dict:
        hit = self.probs.get(s)
        if hit is None:
            try:
                hit = self.probs[s] = json.loads(s) if s else {}
            except (TypeError, ValueError) as exc:
                raise ParameterError(f"the 'view_probs' column holds invalid JSON: {s[:80]!r}") from exc
        return hit

    def dist(self, a: str, b: str) -> LLRDistribution:
        hit = self.dists.get((a, b))
        if hit is None:
            hit = self.dists[(a, b)] = _turn_distribution(self.prob(a), self.prob(b))
        return hit


def horizon_oracle(transcripts: pd.DataFrame, horizons: Sequence[int], *, methods: Sequence[str] | None = None,
                   max_atoms: int = HORIZON_MAX_ATOMS, fpr: float = 0.05, keep_dists: bool = True,
                   progress: bool = False) -> pd.DataFrame:
    """Per (method, pair, seed, horizon T): the exact single-transcript ceilings of the optimal
    auditor of the augmented transcript (AUC, TPR@fpr, max realised privacy loss, merge error
    bound) from the ``view_probs`` and ``released`` columns. View-releasing methods only.

    Seeds whose (view distributions, public path) coincide - the usual case for a fixed query
    trajectory - are computed once."""
    _require(transcripts, {"method", "pair_id", "attribute", "split", "side", "seed", "turn", "view_probs",
                           "released"})
    df = _one_model(transcripts)
    if methods is not None:
        df = df[df["method"].isin(methods)]
    hs = sorted({int(h) for h in horizons})
    if not hs or hs[0] < 1:
        raise ParameterError(f"horizons must be positive ints, got {horizons!r}")
    df = df[df["turn"] < hs[-1]]
    cols = {c: df[c].tolist() for c in ("method", "pair_id", "attribute", "split", "side", "seed", "turn",
                                        "view_probs", "released")}
    memo = _Memo()
    groups = list(df.groupby(["method", "pair_id"], sort=True).indices.items())
    it: Iterable = groups
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(groups, desc="exact oracle vs T", unit="pair")
    recs = []
    for (method, pair_id), idx in it:
        vp = [cols["view_probs"][i] or "{}" for i in idx]
        if all(v == "{}" for v in vp):
            continue  # memory-text method: no views (see dpmv_lib.oracle for its ceiling)
        by_seed: dict[int, dict[str, dict[int, int]]] = {}
        for i in idx:
            by_seed.setdefault(int(cols["seed"][i]), {"M": {}, "M'": {}})[cols["side"][i]][cols["turn"][i]] = i
        done: dict[tuple, dict[int, tuple]] = {}
        i0 = idx[0]
        for seed, sides in sorted(by_seed.items()):
            m = [sides["M"].get(t) for t in range(hs[-1])]
            mp = [sides["M'"].get(t) for t in range(hs[-1])]
            if None in m or None in mp:
                raise ParameterError(f"{method}/{pair_id} seed {seed}: need turns 0..{hs[-1] - 1} on both sides")
            sig = tuple((cols["view_probs"][a], cols["view_probs"][b], memo.path(cols["released"][a] or ""),
                         memo.path(cols["released"][b] or "")) for a, b in zip(m, mp))
            res = done.get(sig)
            if res is None:
                turns = [(memo.prob(s[0] or ""), memo.prob(s[1] or "")) for s in sig]
                equal = [s[2] == s[3] for s in sig]
                dists = prefix_distributions(turns, hs, public_equal=equal, max_atoms=max_atoms,
                                             turn_dist=lambda t: memo.dist(sig[t][0] or "", sig[t][1] or ""))
                res, last = {}, None
                for h in hs:
                    d = dists[h]
                    if last is None or d is not last[0]:  # unchanged prefix: reuse its statistics
                        last = (d, (d.auc(), d.auc_error(), d.tpr_at(fpr)[0], d.max_loss()))
                    res[h] = (d, last[1], all(equal[:h]))
                done[sig] = res
            for h in hs:
                d, (auc, err, tpr, loss), eq = res[h]
                rec = {"method": method, "pair_id": pair_id, "attribute": cols["attribute"][i0],
                       "split": cols["split"][i0], "seed": seed, "horizon": h, "oracle_auc": auc,
                       "oracle_auc_err": err, "oracle_tpr": tpr, "max_loss": loss, "public_path_equal": eq}
                if keep_dists:
                    rec["dist"] = d
                recs.append(rec)
    return pd.DataFrame.from_records(recs)


def pooled_ceiling(dists_by_attribute: Mapping[str, Sequence[LLRDistribution]], fpr: float = 0.05
                   ) -> tuple[float, float, float]:
    """(macro AUC, macro TPR@fpr, max AUC error bound) of the optimal auditor over a pool of
    transcripts per attribute (every transcript equally likely; :func:`dpmv_lib.oracle.mixture`),
    the ceiling of an auditor evaluated over those pairs."""
    if not dists_by_attribute:
        raise ParameterError("no distributions to pool")
    aucs, tprs, errs = [], [], []
    for _, ds in sorted(dists_by_attribute.items()):
        mix = mixture(list(ds))
        aucs.append(mix.auc())
        tprs.append(mix.tpr_at(fpr)[0])
        errs.append(mix.auc_error())
    return float(np.mean(aucs)), float(np.mean(tprs)), float(max(errs))


def horizon_summary(per_pair: pd.DataFrame, cap: float | Mapping[str, float], *, fpr: float = 0.05,
                    pool_splits: Sequence[str] | None = ("test",), seeds_horizons: Iterable[int] | None = (),
                    max_atoms: int = HORIZON_MAX_ATOMS) -> pd.DataFrame:
    """Per (method, horizon): the pooled ceiling AUC / TPR on the pairs of ``pool_splits`` (the
    learned auditor's evaluation pairs; None = all) for ONE transcript per pair (``ceiling_auc``,
    the bound of the learned ``auc_indep``) and, at ``seeds_horizons`` (None = every horizon), for
    all EM seeds of a pair observed together (``ceiling_auc_seeds``, the bound of the seed-averaged
    learned ``auc``); the mean per-pair ceiling; and Theorem 1's check on EVERY pair: max realised
    privacy loss, number of pairs above B_a."""
    _require(per_pair, {"method", "horizon", "attribute", "split", "pair_id", "seed", "max_loss", "oracle_auc",
                        "dist"}, "per-pair oracle table")
    cap_of = (lambda a: float(cap[a])) if isinstance(cap, Mapping) else (lambda a: float(cap))
    want_seeds = None if seeds_horizons is None else {int(h) for h in seeds_horizons}
    recs = []
    for (method, h), g in per_pair.groupby(["method", "horizon"], sort=False):
        pool = g if pool_splits is None else g[g["split"].isin(pool_splits)]
        if pool.empty:
            pool = g
        auc, tpr, err = pooled_ceiling({a: list(ga["dist"]) for a, ga in pool.groupby("attribute")}, fpr)
        rec = {"method": method, "horizon": int(h), "ceiling_auc": auc, "ceiling_tpr": tpr, "auc_err": err}
        if want_seeds is None or int(h) in want_seeds:
            by_attr: dict[str, list] = {}
            for (attr, _), gp in pool.groupby(["attribute", "pair_id"]):
                d = gp["dist"].iloc[0].coarsen(max_atoms)
                for other in gp["dist"].iloc[1:]:
                    d = d.convolve(other.coarsen(max_atoms), max_atoms=max_atoms)
                by_attr.setdefault(attr, []).append(d)
            a2, t2, e2 = pooled_ceiling(by_attr, fpr)
            rec.update(ceiling_auc_seeds=a2, ceiling_tpr_seeds=t2, auc_err_seeds=e2)
        over = g[g["max_loss"] > g["attribute"].map(cap_of) + 1e-9]
        rec.update({"n_pool_pairs": int(pool["pair_id"].nunique()),
                    "mean_pair_auc": float(g["oracle_auc"].mean()), "max_loss": float(g["max_loss"].max()),
                    "share_inf_loss": float(np.isinf(g["max_loss"]).mean()),
                    "mean_finite_max_loss": float(g["max_loss"].replace(np.inf, np.nan).mean()),
                    "n_pairs": int(g["pair_id"].nunique()), "pairs_over_cap": int(over["pair_id"].nunique()),
                    "loss_le_cap_all_pairs": bool(over.empty)})
        recs.append(rec)
    return pd.DataFrame.from_records(recs)


def theorem_check(summary: pd.DataFrame, horizon: int, cap: float) -> pd.DataFrame:
    """Theorem 1 on the benchmark pairs at one horizon: max realised loss per method vs B_a."""
    s = summary[summary["horizon"] == horizon].copy()
    if s.empty:
        raise ParameterError(f"no oracle results at horizon {horizon}")
    s["B_a"] = cap
    s["violated"] = [violated_condition(m) for m in s["method"]]
    s["within_B_a"] = s["max_loss"] <= cap + 1e-9
    return s[["method", "violated", "horizon", "n_pairs", "max_loss", "mean_finite_max_loss", "share_inf_loss",
              "B_a", "within_B_a", "pairs_over_cap"]].reset_index(drop=True)


def bound_vs_horizon(acc: pd.DataFrame) -> pd.DataFrame:
    """Reconstructed target bound per (method, horizon): max and mean over pairs and seeds."""
    _require(acc, {"method", "horizon", "recon_bound", "ledger"}, "accounting table")
    g = acc.groupby(["method", "horizon"], sort=False)
    return g.agg(bound_max=("recon_bound", "max"), bound_mean=("recon_bound", "mean"),
                 ledger_max=("ledger", "max"), ledger_mean=("ledger", "mean")).reset_index()


# ---- figures --------------------------------------------------------------------------------------------
METHOD_STYLE: dict[str, dict[str, Any]] = {
    "DP-MemView (on)": {"color": "#1f77b4", "marker": "o"},
    "DP-MemView (pre)": {"color": "#17becf", "marker": "s"},
    "IncompleteCharge": {"color": "#ff7f0e", "marker": "^"},
    "CappedArgmax": {"color": "#d62728", "marker": "v"},
    "NoCap": {"color": "#9467bd", "marker": "D"},
}


def plot_leakage_vs_horizon(oracle_sum: pd.DataFrame, bounds: pd.DataFrame, cap: float,
                            learned: pd.DataFrame | None = None, path: str | Path | None = None,
                            learned_col: str = "auc_indep"):
    """Figure: (a) exact optimal-auditor AUC ceiling for one transcript vs T, with the learned
    auditor's single-transcript AUC (``learned_col``, dashed) where given; (b) max realised privacy
    loss vs T (inf not drawn, noted); (c) reconstructed target bound vs T; B_a dotted."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    notes = []
    for m, g in oracle_sum.groupby("method", sort=False):
        st = METHOD_STYLE.get(m, {})
        g = g.sort_values("horizon")
        axes[0].plot(g["horizon"], g["ceiling_auc"], label=f"{m}", ms=3, **st)
        axes[1].plot(g["horizon"], g["max_loss"].replace(np.inf, np.nan), label=m, ms=3, **st)
        if g["max_loss"].eq(np.inf).any():
            notes.append(f"{m}: inf from T={int(g.loc[g['max_loss'].eq(np.inf), 'horizon'].min())} (support mismatch)")
    if learned is not None and not learned.empty and learned_col in learned.columns:
        for m, g in learned.groupby("method", sort=False):
            st = dict(METHOD_STYLE.get(m, {}))
            g = g.sort_values("horizon")
            axes[0].plot(g["horizon"], g[learned_col], ls="--", ms=4, alpha=0.8, **st)
    axes[0].axhline(0.5, color="grey", lw=0.8)
    axes[0].set(xlabel="horizon T", ylabel="AUC (one transcript per pair)",
                title="(a) exact ceiling (solid) vs learned auditor (dashed)")
    axes[0].legend(fontsize=7, loc="center right")
    axes[1].axhline(cap, color="k", ls=":", label=f"B_a = {cap:g}")
    axes[1].set(xlabel="horizon T", ylabel="max realised privacy loss over pairs", title="(b) exact max loss (Theorem 1)")
    axes[1].legend(fontsize=7, loc="upper left")
    if notes:
        axes[1].text(0.98, 0.02, "\n".join(notes), transform=axes[1].transAxes, ha="right", va="bottom", fontsize=7)
    for m, g in bounds.groupby("method", sort=False):
        st = METHOD_STYLE.get(m, {})
        g = g.sort_values("horizon")
        axes[2].plot(g["horizon"], g["bound_max"].replace(np.inf, np.nan), label=m, ms=3, **st)
    axes[2].axhline(cap, color="k", ls=":", label=f"B_a = {cap:g}")
    axes[2].set(xlabel="horizon T", ylabel="reconstructed target bound (max over pairs)",
                title="(c) accounting (deterministic releases: inf, not drawn)")
    axes[2].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, path, dpi=130)


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


def frame_hash(*parts: Any) -> str:
    """A short content hash of JSON-able parts (cache keys of derived tables)."""
    body = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# ---- pipeline pieces shared by notebooks 04 and 05 ------------------------------------------------------
CODE_MODULES: tuple[str, ...] = ("interfaces", "memview", "variants", "ledger", "mechanism", "scorer", "policy",
                                 "generation", "filters", "responders.surrogate", "responders.base")


def code_fingerprint(modules: Sequence[str] = CODE_MODULES) -> str:
    """sha256 prefix of the source of the modules that determine a transcript (cache key part):
    a change to the mechanism, an interface or the surrogate invalidates cached transcripts."""
    import importlib
    import inspect

    h = hashlib.sha256()
    for name in modules:
        mod = importlib.import_module(f"dpmv_lib.{name}")
        h.update(name.encode())
        h.update(Path(inspect.getsourcefile(mod) or "").read_bytes())
    return h.hexdigest()[:16]


def benchmark_fingerprint(bench: Any) -> str:
    """sha256 prefix of the track's manifest checksums and the selected pair ids."""
    files = bench.manifest.get("files", {}) if isinstance(bench.manifest, Mapping) else {}
    return frame_hash(bench.track, sorted(p.pair_id for p in bench.pairs),
                      {k: v.get("sha256") if isinstance(v, Mapping) else v for k, v in sorted(files.items())})


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def cached_transcripts(bench: Any, responder: Any, methods: Sequence[str], *, seeds: Sequence[int], turns: int,
                       B_a: Any = 2, K: int = 3, plan_horizon: int | None = 16,
                       cache_dir: str | Path | None = None, workers: int = 1, progress: bool = False,
                       log: Callable[[str], None] = print) -> pd.DataFrame:
    """The transcript table (:func:`dpmv_lib.generation.generate_transcripts`) of ``methods`` over
    the first ``turns`` turns, with one parquet per method in ``cache_dir`` keyed by the benchmark
    (checksums + pairs), the responder identity, B_a, K, the preallocation horizon, the seeds and
    the source of the generating code. A cached table with at least ``turns`` turns is reused
    (truncated); only the missing methods are generated (in one call, so identical prompts are
    generated once)."""
    from .generation import InterfaceParams, generate_transcripts, load_transcripts, save_transcripts
    from .interfaces import is_deterministic

    if not methods:
        raise ParameterError("no methods to generate")
    base = (benchmark_fingerprint(bench), responder.identity(), str(Fraction(str(B_a))), int(K), plan_horizon,
            code_fingerprint())
    found: dict[str, pd.DataFrame] = {}
    todo: list[str] = []
    keys: dict[str, str] = {}
    cdir = Path(cache_dir) if cache_dir is not None else None
    for m in methods:
        sd = (-1,) if is_deterministic(m) else tuple(int(s) for s in seeds)
        keys[m] = f"{_slug(m)}-{frame_hash(m, sd, *base)}"
        best = None
        if cdir is not None and cdir.is_dir():
            for f in cdir.glob(f"{keys[m]}-T*.parquet"):
                try:
                    t = int(f.stem.rsplit("-T", 1)[1])
                except ValueError:
                    continue
                if t >= turns and (best is None or t < best[0]):
                    best = (t, f)
        if best is not None:
            try:
                df = load_transcripts(best[1])
                found[m] = df[df["turn"] < turns].reset_index(drop=True)
                continue
            except Exception as exc:  # noqa: BLE001 - a corrupt cache file is regenerated, never used
                log(f"[cache] ignoring unreadable {best[1].name}: {exc}")
        todo.append(m)
    if todo:
        df = generate_transcripts(bench, responder, todo, seeds=tuple(seeds), turns=turns,
                                  params=InterfaceParams(B_a=B_a, K=K, plan_horizon=plan_horizon),
                                  workers=workers, progress=progress)
        for m in todo:
            part = df[df["method"] == m].reset_index(drop=True)
            found[m] = part
            if cdir is not None:
                save_transcripts(part, cdir / f"{keys[m]}-T{turns}.parquet")
    if todo and cdir is not None:
        log(f"[cache] generated {', '.join(todo)}; reused {', '.join(m for m in methods if m not in todo) or '-'}")
    elif cdir is not None:
        log(f"[cache] reused every method from {cdir}")
    return pd.concat([found[m] for m in methods], ignore_index=True)


def reference_dir() -> Path:
    """Directory of the paper's reference CSVs (as :func:`dpmv_lib.tables.paper_csv_path`:
    ``../shared/reference`` beside the project, DPMV_REFERENCE overrides)."""
    from .tables import paper_csv_path

    return paper_csv_path().parent


def load_paper_csv(name: str) -> pd.DataFrame:
    """One of the paper's reference tables, e.g. ``paper_table4_safeguards.csv``."""
    p = reference_dir() / name
    if not p.exists():
        raise ParameterError(f"paper reference table not found: {p} (set DPMV_REFERENCE to its directory)")
    return pd.read_csv(p)


def paper_figure(name: str) -> float:
    """A single number of ``paper_other_figures.csv`` (e.g. ``score_channel_auc``)."""
    df = load_paper_csv("paper_other_figures.csv")
    hit = df.loc[df["figure"] == name, "value"]
    if hit.empty:
        raise ParameterError(f"paper_other_figures.csv has no figure {name!r}")
    return float(hit.iloc[0])


@dataclass(frozen=True)
class RQ2Config:
    """Notebook 04's parameters: Table 4 at horizon T with caps B_a and granularity K (paper:
    T=16, B_a=2, K=3); leakage curves up to T_max; the learned auditor at ``learned_horizons``."""

    profile: str = "default"
    seed: int = 0
    results_dir: str = "results"
    data_dir: str = "data"
    B_a: float = 2
    K: int = 3
    T: int = 16
    T_max: int = 32
    learned_horizons: tuple[int, ...] | None = None  # None: (4, 16, 32) for smoke, else (1, 2, 4, 8, 16, 24, 32)
    n_boot: int | None = None       # bootstrap replicates; None: 200 for smoke, else 1000
    audit_unit: str = "auto"
    workers: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.T <= self.T_max <= 32:
            raise ParameterError(f"need 1 <= T <= T_max <= 32, got T={self.T}, T_max={self.T_max}")
        if float(self.B_a) <= 0 or self.K < 1:
            raise ParameterError(f"need B_a > 0 and K >= 1, got B_a={self.B_a}, K={self.K}")
        smoke = self.profile == "smoke"
        wanted = self.learned_horizons if self.learned_horizons is not None else (
            (4, 16, 32) if smoke else (1, 2, 4, 8, 16, 24, 32))
        hs = tuple(sorted({int(h) for h in wanted if 1 <= int(h) <= self.T_max} | {self.T}))
        object.__setattr__(self, "learned_horizons", hs)
        if self.n_boot is None:
            object.__setattr__(self, "n_boot", 200 if smoke else 1000)

    @property
    def cache_dir(self) -> Path:
        from .paths import resolve

        return resolve(self.results_dir) / "cache"


def load_pairs(cfg: Any, profile: Any) -> Any:
    """The PairedMem pairs of the profile (the RQ1 stratified subset: same pairs as notebook 03)."""
    from .datasets import load_benchmark
    from .experiments import select_pairs

    return select_pairs(load_benchmark("pairedmem", cfg.data_dir), profile.pairs, cfg.seed)


def make_surrogate_or_profile_responder(profile: Any, bench: Any) -> Any:
    """The profile's response model (the surrogate needs the public policies)."""
    from .experiments import responder_specs
    from .responders import make_responder

    spec = responder_specs(profile)[0]
    return make_responder(spec, list(bench.policies.values())) if spec == "surrogate" else make_responder(spec)


QUERY_FAMILIES: tuple[str, ...] = ("target", "neutral", "distractor")


def score_family_features(transcripts: pd.DataFrame, keys: pd.DataFrame, X: np.ndarray, *, horizon: int,
                          generic_utility: float = 0.5,
                          families: Sequence[str] = QUERY_FAMILIES) -> tuple[np.ndarray, list[str]]:
    """Order-free features of the released score sequence by public query family (the query is
    public, so is its family): per family, the mean released top score and the share of turns
    whose top score exceeds the generic view's fixed, store-independent utility (a non-generic
    view matched memory cues). Turn order differs across pairs, so these pool better than the
    raw per-turn vector."""
    _require(transcripts, {"pair_id", "side", "seed", "turn", "qtype"})
    fam = (transcripts[transcripts["turn"] < horizon].drop_duplicates(["pair_id", "turn"])
           .set_index(["pair_id", "turn"])["qtype"])
    Q = np.array([[fam.get((pid, t), "") for t in range(horizon)] for pid in keys["pair_id"]])
    cols, names = [], []
    for f in families:
        msk = Q == f
        n = np.maximum(msk.sum(axis=1), 1)
        cols.append(np.where(msk, X, 0.0).sum(axis=1) / n)
        cols.append(np.where(msk & (X > generic_utility + 1e-9), 1.0, 0.0).sum(axis=1) / n)
        names += [f"mean[{f}]", f"above_generic[{f}]"]
    return np.column_stack(cols), names


# ---- notebook helpers: timing, markdown, the score-channel and horizon summaries -----------------------
class Timer:
    """Wall time per named step: ``with timer("audit"): ...``; ``timer.seconds`` maps step -> s."""

    def __init__(self) -> None:
        import time

        self._clock = time.perf_counter
        self._t0 = self._clock()
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str):
        import contextlib

        @contextlib.contextmanager
        def _ctx():
            t = self._clock()
            try:
                yield
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + self._clock() - t
        return _ctx()

    @property
    def total(self) -> float:
        return self._clock() - self._t0

    def table(self) -> pd.DataFrame:
        rows = [{"step": k, "seconds": round(v, 1)} for k, v in self.seconds.items()]
        rows.append({"step": "total (wall)", "seconds": round(self.total, 1)})
        return pd.DataFrame(rows)


def _fmt(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, (float, np.floating)) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return f"{x:.{nd}f}"
    return str(x)


def _delta(x: Any) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x))):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:+.3f}"


def markdown_table(df: pd.DataFrame, nd: int = 3) -> str:
    """A DataFrame as a Markdown table with numbers to ``nd`` decimals and inf/NaN spelled out."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v, nd) for v in r) + " |")
    return "\n".join(lines)


def table4_markdown(t4: pd.DataFrame, cap: float, header: str = "") -> str:
    """Table 4 in the paper's layout, ours beside the paper with the difference."""
    rows = []
    for r in t4.to_dict("records"):
        row = {"Variant": r["variant"], "Violated": r["violated"] or "-",
               "DP bound (ours: max / mean)": f"{format_bound(r['dp_bound'], cap)} / {_fmt(r['dp_bound_mean'], 2)}",
               "ledger reports": _fmt(r["ledger_reported"], 2)}
        if "paper_dp_bound" in r:
            row["DP bound (paper)"] = format_bound(r["paper_dp_bound"], cap)
        for m, lab in (("auc", "AUC"), ("trec", "tRec"), ("u", "U"), ("unsup", "Unsup")):
            row[f"{lab} ours"] = _fmt(r[m])
            if f"paper_{m}" in r:
                row[f"{lab} paper"] = _fmt(r[f"paper_{m}"])
                row[f"{lab} \u0394"] = _delta(r[f"delta_{m}"])
        rows.append(row)
    return (header + "\n\n" if header else "") + markdown_table(pd.DataFrame(rows))


def claims_markdown(claims: pd.DataFrame) -> str:
    """Claims as a Markdown list: HOLDS / DOES NOT HOLD with the numbers behind each verdict."""
    return "\n".join(f"- **{'HOLDS' if r['holds'] else 'DOES NOT HOLD'}** - {r['claim']}: {r['evidence']}"
                     for r in claims.to_dict("records"))


def score_channel_table(transcripts: pd.DataFrame, *, horizon: int = 16, n_boot: int = 1000, seed: int = 0,
                        generic_utility: float = 0.5, paper_auc: float | None = None) -> pd.DataFrame:
    """The C3/C6 score-channel AUC three ways (rows): a learned auditor on the raw released score
    sequence, a learned auditor on its per-query-family summary (:func:`score_family_features`),
    both with the C.5 split protocol; and the exact pair-known auditor (0.5 + share of pairs whose
    score sequence differs / 2). With ``paper_auc`` the paper's value and the difference."""
    from .audit import AuditConfig

    keys, X = score_sequences(transcripts, horizon)
    cfg = AuditConfig(horizons=(horizon,), n_boot=n_boot, seed=seed)
    F, names = score_family_features(transcripts, keys, X, horizon=horizon, generic_utility=generic_utility)
    rows = []
    for label, feats in (("learned: raw score sequence", X), ("learned: by query family", F)):
        s, _ = feature_audit(keys, feats, horizon=horizon, config=cfg)
        r = s.iloc[0]
        rows.append({"auditor": label, "auc": float(r["auc"]), "auc_lo": float(r.get("auc_lo", np.nan)),
                     "auc_hi": float(r.get("auc_hi", np.nan)), "tpr": float(r["tpr"]), "n_test_pairs": int(r["n_pairs"])})
    ex = score_channel_exact(keys, X)
    allr = ex[ex["attribute"] == "all"].iloc[0]
    rows.append({"auditor": "exact: pair-known (any differing score identifies the store)",
                 "auc": float(allr["pair_known_auc"]), "auc_lo": np.nan, "auc_hi": np.nan, "tpr": np.nan,
                 "n_test_pairs": int(keys["pair_id"].nunique())})
    out = pd.DataFrame(rows)
    if paper_auc is not None:
        out["paper_auc"] = paper_auc
        out["delta_auc"] = out["auc"] - paper_auc
    return out


def horizon_claims(hsum: pd.DataFrame, cap: float, *, compliant: Sequence[str] = ("DP-MemView (on)", "DP-MemView (pre)"),
                   T: int = 16) -> pd.DataFrame:
    """Leakage-vs-horizon statements computed from :func:`horizon_summary`: Theorem 1 for the
    compliant modes at every horizon; where each ablation first exceeds B_a; and whether every
    ablation's ceiling at T lies above the compliant online mode's."""
    out = []
    for m in compliant:
        g = hsum[hsum["method"] == m]
        if len(g):
            out.append(Claim(f"{m}: max realised loss <= B_a on every pair at every T <= {int(g['horizon'].max())}",
                             bool(g["loss_le_cap_all_pairs"].all()), f"max over T {g['max_loss'].max():.3f} vs B_a {cap:g}"))
    for m, g in hsum[~hsum["method"].isin(compliant)].groupby("method", sort=False):
        over = g[g["max_loss"] > cap + 1e-9].sort_values("horizon")
        ev = (f"first above B_a at T={int(over['horizon'].iloc[0])} (loss {_fmt(over['max_loss'].iloc[0])}, "
              f"{int(over['pairs_over_cap'].iloc[0])} pairs)" if len(over) else
              f"max over T {_fmt(g['max_loss'].max())} (never above B_a = {cap:g})")
        out.append(Claim(f"{m}: max realised loss exceeds B_a at some T <= {int(g['horizon'].max())}",
                         bool(len(over)), ev))
    at = hsum[hsum["horizon"] == T].set_index("method")
    if compliant[0] in at.index:
        base = at.loc[compliant[0], "ceiling_auc"]
        abl = at.drop(index=[m for m in compliant if m in at.index])["ceiling_auc"]
        out.append(Claim(f"at T={T} every ablation's exact AUC ceiling is above {compliant[0]}'s",
                         bool(len(abl) and (abl > base).all()),
                         f"{compliant[0]} {base:.3f}; " + ", ".join(f"{k} {v:.3f}" for k, v in abl.items())))
    return pd.DataFrame([c.__dict__ for c in out])


def oracle_cross_check(transcripts: pd.DataFrame, per_pair: pd.DataFrame, horizon: int, n_pairs: int = 8,
                       methods: Sequence[str] | None = None) -> dict[str, float]:
    """Recompute the first ``n_pairs`` pairs at ``horizon`` with :func:`dpmv_lib.oracle.oracle_per_pair`
    and return the largest differences from :func:`horizon_oracle` (AUC, finite max loss) and
    whether the infinite losses coincide."""
    from .oracle import oracle_per_pair

    df = _one_model(transcripts)
    if methods is not None:
        df = df[df["method"].isin(methods)]
    ids = sorted(df["pair_id"].unique())[:n_pairs]
    sub = df[df["pair_id"].isin(ids) & (df["turn"] < horizon)]
    ref = oracle_per_pair(sub, horizon)
    ref = ref[ref["kind"] == "views"].set_index(["method", "pair_id", "seed"])
    ours = per_pair[(per_pair["horizon"] == horizon) & per_pair["pair_id"].isin(ids)]
    ours = ours[ours["method"].isin(ref.index.get_level_values("method"))].set_index(["method", "pair_id", "seed"])
    j = ours[["oracle_auc", "max_loss"]].join(ref[["oracle_auc", "max_loss"]].add_suffix("_ref"), how="inner")
    fin = np.isfinite(j["max_loss"]) & np.isfinite(j["max_loss_ref"])
    return {"rows_compared": int(len(j)), "max_abs_auc_diff": float((j["oracle_auc"] - j["oracle_auc_ref"]).abs().max()),
            "max_abs_loss_diff": float((j.loc[fin, "max_loss"] - j.loc[fin, "max_loss_ref"]).abs().max()) if fin.any() else 0.0,
            "inf_losses_agree": bool((np.isinf(j["max_loss"]) == np.isinf(j["max_loss_ref"])).all())}


def ceiling_consistency(hsum: pd.DataFrame, audit_summary: pd.DataFrame) -> pd.DataFrame:
    """Learned auditor vs its exact ceiling at every audited horizon: the single-transcript AUC
    (``auc_indep``) against ``ceiling_auc`` and the seed-averaged AUC (``auc``) against
    ``ceiling_auc_seeds``; consistent when the learned CI's lower end does not exceed the ceiling
    (plus its merge error)."""
    a = audit_summary.copy()
    keep = [c for c in ("method", "horizon", "auc", "auc_lo", "auc_indep", "auc_indep_lo") if c in a.columns]
    m = a[keep].merge(hsum, on=["method", "horizon"], how="inner")
    out = m[["method", "horizon"]].copy()
    out["learned_auc_indep"] = m.get("auc_indep", np.nan)
    out["ceiling_auc"] = m["ceiling_auc"]
    lo = m.get("auc_indep_lo", m.get("auc_indep", np.nan))
    out["indep_consistent"] = _flag(lo, m["ceiling_auc"] + m["auc_err"])
    out["learned_auc_seed_avg"] = m["auc"]
    if "ceiling_auc_seeds" in m.columns:
        out["ceiling_auc_seeds"] = m["ceiling_auc_seeds"]
        out["seed_avg_consistent"] = _flag(m.get("auc_lo", m["auc"]), m["ceiling_auc_seeds"] + m["auc_err_seeds"])
    return out.sort_values(["method", "horizon"]).reset_index(drop=True)


def _flag(value: pd.Series, bound: pd.Series) -> pd.Series:
    """value <= bound as a nullable boolean: <NA> where either side is missing (not evaluated)."""
    v, b = pd.to_numeric(value, errors="coerce"), pd.to_numeric(bound, errors="coerce")
    out = pd.Series(v.to_numpy() <= b.to_numpy() + 1e-9, index=v.index, dtype="boolean")
    out[v.isna() | b.isna()] = pd.NA
    return out
