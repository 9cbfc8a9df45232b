"""RQ2 leakage vs horizon: the exact optimal auditor of :mod:`dpmv_lib.evaluate.oracle` convolved
turn by turn, recording every prefix T = 1..32 in one pass; max realised privacy loss <= B_a
(Theorem 1) for DP-MemView, not for the ablations; its figure, claims and cross-checks.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .plots import save_figure
from ..core.errors import ParameterError
from ..evaluate.llr import DEFAULT_GRID, LLRDistribution, mixture
from .common import fmt_number
from .rq2_support import SlotStep
from .verdicts import ExactClaim, decide
from ..evaluate.audit import require_columns
from .rq2 import HORIZON_MAX_ATOMS, HORIZON_METHODS, one_model, violated_condition


# ---- exact optimal auditor, every prefix in one pass ----------------------------------------------------
def prefix_distributions(turns: Sequence[tuple[Mapping, Mapping]], horizons: Iterable[int], *,
                         public_equal: Sequence[bool] | None = None, grid: float = DEFAULT_GRID,
                         max_atoms: int = HORIZON_MAX_ATOMS,
                         turn_dist: Callable[[int], LLRDistribution] | None = None) -> dict[int, LLRDistribution]:
    """The exact LLR distribution of the augmented transcript prefix for every T in ``horizons``
    (the computation of :func:`dpmv_lib.evaluate.llr.trajectory_distribution`, recorded turn by turn).

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
    from ..evaluate.llr import trajectory_distribution

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
    as :mod:`dpmv_lib.evaluate.oracle` defines it: the ``released`` JSON without view/views/query keys."""
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
    require_columns(transcripts, {"method", "pair_id", "attribute", "split", "side", "seed", "turn", "view_probs",
                           "released"})
    df = one_model(transcripts)
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
            continue  # memory-text method: no views (see dpmv_lib.evaluate.oracle for its ceiling)
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
                                             turn_dist=lambda t: memo.dist(sig[t][0] or "", sig[t][1] or ""))  # noqa: B023 - called within the iteration
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
    transcripts per attribute (every transcript equally likely; :func:`dpmv_lib.evaluate.llr.mixture`),
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
    require_columns(per_pair, {"method", "horizon", "attribute", "split", "pair_id", "seed", "max_loss", "oracle_auc",
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
    require_columns(acc, {"method", "horizon", "recon_bound", "ledger"}, "accounting table")
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
    axes[1].set(xlabel="horizon T", ylabel="max realised privacy loss over pairs",
                title="(b) exact max loss (Theorem 1)")
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


def horizon_claims(hsum: pd.DataFrame, cap: float, *,
                   compliant: Sequence[str] = ("DP-MemView (on)", "DP-MemView (pre)"),
                   T: int = 16) -> pd.DataFrame:
    """Leakage-vs-horizon statements computed exactly from :func:`horizon_summary` (no sampling
    error): Theorem 1 for the compliant modes at every horizon; where each ablation first exceeds
    B_a; and whether every ablation's ceiling at T lies above the compliant online mode's."""
    out = []
    for i, m in enumerate(compliant):
        g = hsum[hsum["method"] == m]
        if len(g):
            out.append(ExactClaim(f"H{i + 1}", f"{m}: max realised loss <= B_a on every pair at every T <= "
                                  f"{int(g['horizon'].max())}", "max realised loss over pairs and horizons <= B_a",
                                  bool(g["loss_le_cap_all_pairs"].all()),
                                  f"max over T {g['max_loss'].max():.3f} vs B_a {cap:g}",
                                  estimate=float(g["max_loss"].max()), margin=cap))
    for m, g in hsum[~hsum["method"].isin(compliant)].groupby("method", sort=False):
        over = g[g["max_loss"] > cap + 1e-9].sort_values("horizon")
        ev = (f"first above B_a at T={int(over['horizon'].iloc[0])} (loss {fmt_number(over['max_loss'].iloc[0])}, "
              f"{int(over['pairs_over_cap'].iloc[0])} pairs)" if len(over) else
              f"max over T {fmt_number(g['max_loss'].max())} (never above B_a = {cap:g})")
        out.append(ExactClaim(f"H{len(out) + 1}", f"{m}: max realised loss exceeds B_a at some T <= "
                              f"{int(g['horizon'].max())}", "max realised loss over pairs and horizons > B_a",
                              bool(len(over)), ev, estimate=float(g["max_loss"].max()), margin=cap))
    at = hsum[hsum["horizon"] == T].set_index("method")
    if compliant[0] in at.index:
        base = at.loc[compliant[0], "ceiling_auc"]
        abl = at.drop(index=[m for m in compliant if m in at.index])["ceiling_auc"]
        out.append(ExactClaim(f"H{len(out) + 1}", f"at T={T} every ablation's exact AUC ceiling is above "
                              f"{compliant[0]}'s", "exact ceiling AUC(ablation) - ceiling AUC(compliant) > 0",
                              bool(len(abl) and (abl > base).all()),
                              f"{compliant[0]} {base:.3f}; " + ", ".join(f"{k} {v:.3f}" for k, v in abl.items()),
                              estimate=float(abl.min()) if len(abl) else float("nan"), margin=float(base)))
    return decide(out, None)


def oracle_cross_check(transcripts: pd.DataFrame, per_pair: pd.DataFrame, horizon: int, n_pairs: int = 8,
                       methods: Sequence[str] | None = None) -> dict[str, float]:
    """Recompute the first ``n_pairs`` pairs at ``horizon`` with :func:`dpmv_lib.evaluate.oracle.pair_results`
    and return the largest differences from :func:`horizon_oracle` (AUC, finite max loss) and
    whether the infinite losses coincide."""
    from ..evaluate.oracle import pair_results

    df = one_model(transcripts)
    if methods is not None:
        df = df[df["method"].isin(methods)]
    ids = sorted(df["pair_id"].unique())[:n_pairs]
    sub = df[df["pair_id"].isin(ids) & (df["turn"] < horizon)]
    ref = pair_results(sub, horizon)
    ref = ref[ref["kind"] == "views"].set_index(["method", "pair_id", "seed"])
    ours = per_pair[(per_pair["horizon"] == horizon) & per_pair["pair_id"].isin(ids)]
    ours = ours[ours["method"].isin(ref.index.get_level_values("method"))].set_index(["method", "pair_id", "seed"])
    j = ours[["oracle_auc", "max_loss"]].join(ref[["oracle_auc", "max_loss"]].add_suffix("_ref"), how="inner")
    fin = np.isfinite(j["max_loss"]) & np.isfinite(j["max_loss_ref"])
    return {"rows_compared": int(len(j)),
            "max_abs_auc_diff": float((j["oracle_auc"] - j["oracle_auc_ref"]).abs().max()),
            "max_abs_loss_diff": (float((j.loc[fin, "max_loss"] - j.loc[fin, "max_loss_ref"]).abs().max())
                                  if fin.any() else 0.0),
            "inf_losses_agree": bool((np.isinf(j["max_loss"]) == np.isinf(j["max_loss_ref"])).all())}


def ceiling_consistency(hsum: pd.DataFrame, audit_summary: pd.DataFrame) -> pd.DataFrame:
    """Learned auditor vs its exact ceiling at every audited horizon, two-sided: the
    single-transcript AUC (``auc_indep``) against ``ceiling_auc`` and the seed-averaged AUC
    (``auc``) against ``ceiling_auc_seeds``. ``*_check``: "ERROR" when the learned 95% CI lies
    wholly above the ceiling (plus its merge error; no auditor can beat it), "below" when it lies
    wholly below, "at ceiling" when it straddles it; ``*_consistent`` is False only for ERROR.
    ``power_*`` = (AUC - 0.5) / (ceiling - 0.5), NaN where the ceiling is at chance."""
    a = audit_summary.copy()
    keep = [c for c in ("method", "horizon", "auc", "auc_lo", "auc_hi", "auc_indep", "auc_indep_lo", "auc_indep_hi")
            if c in a.columns]
    m = a[keep].merge(hsum, on=["method", "horizon"], how="inner")
    out = m[["method", "horizon"]].copy()
    specs = [("indep", "auc_indep", "ceiling_auc", "auc_err")]
    if "ceiling_auc_seeds" in m.columns:
        specs.append(("seed_avg", "auc", "ceiling_auc_seeds", "auc_err_seeds"))
    for tag, col, ceil, err in specs:
        val = m.get(col, pd.Series(np.nan, index=m.index))
        lo, hi = m.get(f"{col}_lo", val), m.get(f"{col}_hi", val)
        out[f"learned_{'auc_indep' if tag == 'indep' else 'auc_seed_avg'}"] = val
        out[ceil] = m[ceil]
        bound = m[ceil] + m[err]
        out[f"{tag}_check"] = _check(lo, hi, bound)
        out[f"{tag}_consistent"] = _flag(lo, bound)
        gap = m[ceil] - 0.5
        out[f"power_{tag}"] = np.where(gap > 1e-9, (val - 0.5) / gap.where(gap > 1e-9), np.nan)
    return out.sort_values(["method", "horizon"]).reset_index(drop=True)


def _check(lo: pd.Series, hi: pd.Series, bound: pd.Series) -> pd.Series:
    lo, hi, b = (pd.to_numeric(x, errors="coerce") for x in (lo, hi, bound))
    out = pd.Series("at ceiling", index=lo.index, dtype=object)
    out[hi < b - 1e-9] = "below"
    out[lo > b + 1e-9] = "ERROR"
    out[lo.isna() | b.isna()] = "not evaluated"
    return out


def _flag(value: pd.Series, bound: pd.Series) -> pd.Series:
    """value <= bound as a nullable boolean: <NA> where either side is missing (not evaluated)."""
    v, b = pd.to_numeric(value, errors="coerce"), pd.to_numeric(bound, errors="coerce")
    out = pd.Series(v.to_numpy() <= b.to_numpy() + 1e-9, index=v.index, dtype="boolean")
    out[v.isna() | b.isna()] = pd.NA
    return out


# ---- notebook 04 steps ---------------------------------------------------------------------------------


def leakage_step(run: Any, transcripts: Any, accounting: Any, measured: Any) -> Any:
    """The exact optimal auditor at every prefix T = 1..T_max (:func:`horizon_oracle`), cross-checked
    on a few pairs against :func:`dpmv_lib.evaluate.oracle.pair_results`; the curves beside the
    learned auditor and the reconstructed bound (``04_leakage_vs_horizon.csv`` and ``.png``)."""
    from .result import Result, sentence

    cfg = run.cfg
    tr = transcripts["transcripts"]
    methods = HORIZON_METHODS
    with run.timer("exact oracle"):
        hp = horizon_oracle(tr, range(1, cfg.T_max + 1), methods=methods, progress=cfg.progress)
        hsum = horizon_summary(hp, cfg.B_a, seeds_horizons=cfg.learned_horizons)
        xcheck = oracle_cross_check(tr, hp, cfg.T, n_pairs=4, methods=methods)
    bounds = bound_vs_horizon(accounting["per_pair"])
    learned = measured["audit"][["method", "horizon", "auc", "auc_indep"]]
    curves = hsum.merge(bounds, on=["method", "horizon"], how="left").merge(
        learned.rename(columns={"auc": "learned_auc", "auc_indep": "learned_auc_indep"}), on=["method", "horizon"],
        how="left")
    run.tables_dir.mkdir(parents=True, exist_ok=True)
    curves.to_csv(run.tables_dir / "04_leakage_vs_horizon.csv", index=False)
    path = run.figure_path("04_leakage_vs_horizon")
    import matplotlib.pyplot as plt

    plt.close(plot_leakage_vs_horizon(hsum, bounds, cfg.B_a, learned, path))
    shown = curves[curves["horizon"].isin(sorted({cfg.T, cfg.T_max}))][
        ["method", "horizon", "ceiling_auc", "learned_auc_indep", "ceiling_auc_seeds", "learned_auc", "max_loss",
         "pairs_over_cap", "bound_max", "auc_err"]].reset_index(drop=True)
    finding = sentence("The exact oracle agrees with oracle.pair_results on {n} transcripts at T = {T} (largest AUC "
                       "difference {dauc:.1e}, largest finite loss difference {dloss:.1e}, infinite losses agree: "
                       "{inf}).", n=xcheck["rows_compared"], T=cfg.T, dauc=xcheck["max_abs_auc_diff"],
                       dloss=xcheck["max_abs_loss_diff"], inf=xcheck["inf_losses_agree"])
    caption = f"at T = {cfg.T} and {cfg.T_max} (every horizon: figure, written table)"
    res = Result("Leakage against the horizon", tables={caption: shown},
                 finding=finding, data={"per_pair": hp, "summary": hsum, "bounds": bounds, "cross_check": xcheck})
    return res.show_figure("exact ceiling (solid) vs learned auditor (dashed); max loss; reconstructed bound", path)


def ceiling_step(run: Any, leakage: Any, measured: Any, table4_result: Any) -> Any:
    """The learned auditor against its exact ceiling at every audited horizon
    (:func:`ceiling_consistency`, ``04_learned_vs_ceiling``) and the AUC intervals at T
    (``04_auc_intervals.png``)."""
    import matplotlib.pyplot as plt

    from .plots import auc_forest_figure
    from .result import Result

    cfg = run.cfg
    hsum = leakage["summary"]
    cons = ceiling_consistency(hsum, measured["audit"])
    run.write_table("04_learned_vs_ceiling", cons)
    metrics = table4_result["metrics"]
    track, model = metrics.combos()[0]
    path = run.figure_path("04_auc_intervals")
    plt.close(auc_forest_figure(metrics, hsum[hsum["horizon"] == cfg.T].assign(track=track, response_model=model),
                                path=path))
    counts = {tag: cons[f"{tag}_check"].value_counts().to_dict() for tag in ("indep", "seed_avg")}
    fmt = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"  # noqa: E731
    errors = sum(d.get("ERROR", 0) for d in counts.values())
    finding = (f"Learned AUC against its exact ceiling at every audited horizon (95% CI): one transcript: "
               f"{fmt(counts['indep'])}; seed-averaged: {fmt(counts['seed_avg'])}. "
               + ("No learned interval lies above its ceiling." if errors == 0 else
                  f"{errors} learned intervals lie above their ceiling: an error in the auditor or the oracle."))
    keep = ["method", "learned_auc_indep", "ceiling_auc", "indep_check", "learned_auc_seed_avg", "ceiling_auc_seeds",
            "seed_avg_check", "power_seed_avg"]
    shown = cons.loc[cons["horizon"] == cfg.T, [c for c in keep if c in cons.columns]]
    res = Result("Learned auditor against its exact ceiling", tables={f"T = {cfg.T}": shown},
                 finding=finding, data={"consistency": cons})
    return res.show_figure("learned AUC intervals and exact ceilings at T", path)


def theorem_step(run: Any, leakage: Any) -> Any:
    """Theorem 1 on the benchmark pairs at T and T_max (``04_theorem1_check``) and the horizon claims
    (``04_horizon_claims``)."""
    from . import verdicts
    from .result import Result

    cfg = run.cfg
    hsum = leakage["summary"]
    thm = pd.concat([theorem_check(hsum, h, cfg.B_a) for h in sorted({cfg.T, cfg.T_max})], ignore_index=True)
    run.write_table("04_theorem1_check", thm)
    hclaims = horizon_claims(hsum, cfg.B_a, T=cfg.T)
    run.write_table("04_horizon_claims", hclaims, verdicts.claims_markdown(hclaims))
    comp = thm[thm["method"].str.startswith("DP-MemView")]
    over = thm[~thm["within_B_a"]]
    at = ", ".join(str(h) for h in sorted({cfg.T, cfg.T_max}))
    finding = (f"The compliant modes stay within B_a = {cfg.B_a:g} at T = {at}: "
               f"{bool(comp['within_B_a'].all())} (largest realised loss {fmt_number(comp['max_loss'].max())}). "
               + ("Above B_a: " + "; ".join(f"{r.method} at T = {r.horizon} ({fmt_number(r.max_loss)})"
                                             for r in over.itertuples()) + "."
                  if len(over) else "No ablation exceeds B_a on these pairs."))
    return Result("Theorem 1 on the benchmark pairs", tables={"max realised loss": thm},
                  notes=[verdicts.claims_markdown(hclaims)], finding=finding, data={"claims": hclaims, "table": thm})
