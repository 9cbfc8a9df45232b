"""Budget sensitivity (paper "Budget sensitivity", Table 3) and the exact grid its widgets read.

Table 3 varies the cap B_a at K = 3 and the granularity K at B_a = 2 for DP-MemView (on) on
PairedMem at T = 16, with eps_{t,g} = B_a / K (online rule), and reports AUC, tRec, Unsup (+ U).

Beyond the table, :func:`compute_grid` precomputes cheap EXACT quantities on a grid
B_a x K x mode (on / pre) x horizon T = 1..T_max, from the exact view distributions of the
interface run on M and M' (no responses needed):

* ``ceiling_auc`` / ``ceiling_tpr``: the optimal auditor of the augmented transcript (pooled over
  the pairs, macro over attributes; :mod:`dpmv_lib.evaluate.oracle`), an upper bound for any auditor;
* ``max_loss``: the maximum realised privacy loss over pairs (Theorem 1: <= B_a);
* ``target_rate_M`` / ``target_rate_Mp``: the expected share of turns whose released view is
  linked to the pair's target attribute (public gold rules) under M (supported personalisation,
  a proxy for tRec) and under M' (unsupported, a proxy for Unsup);
* ``bound_max`` / ``bound_mean``: the reconstructed target bound
  (:func:`dpmv_lib.checks.accounting.reconstructed_bound`) after T turns;
* ``admit_rate``: the share of target-touching selections that were admitted (not the fallback).

The widgets read only this grid (:func:`grid_lookup` gives one cell):
:mod:`~dpmv_lib.experiments.budget_explorer`, testable without a browser. Under papermill the
notebook draws the same figures statically.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .plots import save_figure
from ..core.rationals import to_fraction
from ..checks.accounting import reconstructed_bound
from ..core.errors import ParameterError
from ..generate.interfaces import PF_METHODS
from ..core.memview import MemView
from ..core.releases import Release, SlotRelease
from .rq2 import with_paper
from .verdicts import BootClaim, Case, ExactClaim, decide, highest, lowest
from .rq2_support import MemoScorer, SlotStep, lockstep_steps
from ..common.parallel import parallel_map
from .rq2_horizon import pooled_ceiling, prefix_distributions, steps_to_turns


METHOD = "DP-MemView (on)"
#: budget modes of the grid: the paper's online / preallocated rules with Eq. (7), and the same
#: rules with the permute-and-flip selector (beyond the paper; same eps, ledger and caps)
MODES: tuple[str, ...] = ("on", "pre", "on, P&F", "pre, P&F")
PAPER_MODES: tuple[str, ...] = ("on", "pre")


def mode_parts(mode: str) -> tuple[str, str]:
    """A grid mode as (budget rule "on" | "pre", selector tag "em" | "pf")."""
    if mode not in MODES:
        raise ParameterError(f"unknown mode {mode!r}; use {MODES}")
    base, _, sel = mode.partition(", ")
    return base, ("pf" if sel == "P&F" else "em")


def _online_k(k: int | None) -> int:
    """K of a setting of the online rule (settings of the preallocated rule carry None)."""
    if k is None:
        raise ParameterError("the online budget rule needs K")
    return int(k)
TABLE3_METRICS: tuple[str, ...] = ("eps_tg", "auc", "trec", "unsup")  # the paper's Table 3 columns
GRID_METRICS: dict[str, str] = {
    "ceiling_auc": "exact optimal-auditor AUC (ceiling)",
    "ceiling_tpr": "exact optimal-auditor TPR@5%FPR",
    "max_loss": "max realised privacy loss",
    "target_rate_M": "target-linked view rate on M",
    "target_rate_Mp": "target-linked view rate on M'",
    "bound_max": "reconstructed target bound (max)",
    "bound_mean": "reconstructed target bound (mean)",
    "admit_rate": "admitted share of target-touching selections",
}


# ---- Table 3 ---------------------------------------------------------------------------------------
def _num(x: Any) -> Fraction:
    return to_fraction(x, "budget parameter", positive=True, error=ParameterError)


#: the online interface of each selector (Table 3 rows; "pf" is beyond the paper)
SELECTOR_METHODS: dict[str, str] = {"em": METHOD, "pf": PF_METHODS[0]}


def _selector_method(selector: str) -> str:
    if selector not in SELECTOR_METHODS:
        raise ParameterError(f"unknown selector {selector!r}; use {sorted(SELECTOR_METHODS)}")
    return SELECTOR_METHODS[selector]


def setting_label(b_a: Any, k: int, selector: str = "em") -> str:
    """The method label of one budget setting in the transcript table (distinct per setting)."""
    return f"{_selector_method(selector)} [B_a={float(_num(b_a)):g}, K={int(k)}]"


def table3_settings(b_as: Sequence[Any] = (1, 2, 4, 8), k_fixed: int = 3, ks: Sequence[int] = (2, 3, 4),
                    b_fixed: Any = 2, selectors: Sequence[str] = ("em",)) -> pd.DataFrame:
    """The rows of Table 3: cap magnitude (B_a in ``b_as`` at K = ``k_fixed``) and budget
    granularity (K in ``ks`` at B_a = ``b_fixed``), with eps_{t,g} = B_a / K exactly, once per
    selector ("em": the paper's rows; "pf": permute-and-flip rows, beyond the paper)."""
    rows = []
    for sel in selectors:
        _selector_method(sel)
        for sweep, pairs in (("cap_magnitude", [(b, k_fixed) for b in b_as]),
                             ("granularity", [(b_fixed, k) for k in ks])):
            for b, k in pairs:
                if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
                    raise ParameterError(f"K must be an integer >= 1, got {k!r}")
                eps = _num(b) / int(k)
                rows.append({"sweep": sweep, "b_a": float(_num(b)), "k": int(k), "eps_tg": float(eps),
                             "eps_exact": str(eps), "method": setting_label(b, k, sel), "selector": sel})
    return pd.DataFrame(rows)


def _selectors_of(settings: pd.DataFrame) -> pd.Series:
    return settings["selector"] if "selector" in settings.columns else pd.Series("em", index=settings.index)


def unique_settings(settings: pd.DataFrame) -> list[tuple[float, int]]:
    """Distinct (B_a, K) of the settings table (the shared B_a=2, K=3 row is computed once)."""
    return list(dict.fromkeys((float(b), int(k)) for b, k in zip(settings["b_a"], settings["k"])))


def budget_transcripts(bench: Any, responder: Any, settings: pd.DataFrame, *, seeds: Sequence[int], turns: int = 16,
                       cache_dir: str | Path | None = None, workers: int | None = 1, progress: bool = False,
                       log: Callable[[str], None] = print) -> pd.DataFrame:
    """DP-MemView (on) transcripts (and (on, P&F) for "pf" rows) for every distinct (B_a, K) of
    ``settings``, cached per setting
    (:func:`dpmv_lib.experiments.pipeline.cached_transcripts`), with ``method`` relabelled per setting and ``b_a``,
    ``k`` columns added."""
    from .pipeline import cached_transcripts

    frames = []
    sels = _selectors_of(settings)
    for b, k in unique_settings(settings):
        here = list(dict.fromkeys(sels[(settings["b_a"] == b) & (settings["k"] == k)]))
        df = cached_transcripts(bench, responder, [_selector_method(x) for x in here], seeds=seeds, turns=turns,
                                B_a=b, K=k, plan_horizon=turns, cache_dir=cache_dir, workers=workers,
                                progress=progress, log=log)
        for x in here:
            part = df[df["method"] == _selector_method(x)]
            frames.append(part.assign(method=setting_label(b, k, x), b_a=float(b), k=int(k)))
    return pd.concat(frames, ignore_index=True)


def table3(settings: pd.DataFrame, privacy: pd.DataFrame, utility: pd.DataFrame, *, horizon: int = 16,
           paper: pd.DataFrame | None = None, grid: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 3 with our numbers: per settings row eps_{t,g}, the embedding-auditor AUC / TPR, tRec,
    U, Unsup; with ``grid`` the exact ceiling and target-view rates at T = ``horizon`` (mode on);
    with ``paper`` the paper's values and deltas (matched on sweep, b_a, k)."""
    for name, df, cols in (("settings", settings, {"sweep", "b_a", "k", "eps_tg", "method"}),
                           ("privacy", privacy, {"method", "auc"}),
                           ("utility", utility, {"method", "U", "tRec", "Unsup"})):
        missing = cols - set(df.columns)
        if missing:
            raise ParameterError(f"{name} table lacks columns {sorted(missing)}")
    priv = privacy[privacy["horizon"] == horizon] if "horizon" in privacy.columns else privacy
    priv = priv.drop_duplicates("method").set_index("method")
    util = utility.drop_duplicates("method").set_index("method")
    recs = []
    settings = settings.assign(selector=_selectors_of(settings))
    for r in settings.itertuples(index=False):
        for name, tab in (("privacy", priv), ("utility", util)):
            if r.method not in tab.index:
                raise ParameterError(f"{name} results lack setting {r.method!r}")
        rec = {"sweep": r.sweep, "b_a": r.b_a, "k": r.k, "eps_tg": r.eps_tg, "selector": r.selector,
               "auc": float(priv.at[r.method, "auc"]),
               "tpr": float(priv.at[r.method, "tpr"]) if "tpr" in priv.columns else math.nan,
               "auc_lo": float(priv.at[r.method, "auc_lo"]) if "auc_lo" in priv.columns else math.nan,
               "auc_hi": float(priv.at[r.method, "auc_hi"]) if "auc_hi" in priv.columns else math.nan,
               "trec": float(util.at[r.method, "tRec"]), "u": float(util.at[r.method, "U"]),
               "unsup": float(util.at[r.method, "Unsup"]),
               **({"u_dims": str(util.at[r.method, "U_dims"])} if "U_dims" in util.columns else {})}
        if grid is not None:
            g = grid_lookup(grid, mode="on" if r.selector == "em" else "on, P&F", b_a=r.b_a, k=r.k, T=horizon)
            rec.update(ceiling_auc=float(g["ceiling_auc"]),
                       ceiling_auc_seeds=float(g["ceiling_auc_seeds"]) if "ceiling_auc_seeds" in g else math.nan,
                       target_rate_M=float(g["target_rate_M"]),
                       target_rate_Mp=float(g["target_rate_Mp"]), max_loss=float(g["max_loss"]))
        recs.append(rec)
    out = pd.DataFrame.from_records(recs)
    if paper is not None:  # the paper has Eq. (7) rows only: P&F rows get no paper values
        em = with_paper(out[out["selector"] == "em"], paper, ["sweep", "b_a", "k"], TABLE3_METRICS)
        out = pd.concat([em, out[out["selector"] != "em"]], ignore_index=True)
    return out


def setting_ceilings(t3: pd.DataFrame) -> pd.DataFrame:
    """The exact ceilings of every Table 3 setting keyed by its transcript method label
    (:func:`setting_label`), for the learned auditors' power (notebook 05)."""
    for c in ("ceiling_auc", "ceiling_auc_seeds"):
        if c not in t3.columns:
            raise ParameterError(f"Table 3 lacks {c!r}: build it with grid=...")
    sel = _selectors_of(t3)
    out = pd.DataFrame({"method": [setting_label(b, int(k), x) for b, k, x in zip(t3["b_a"], t3["k"], sel)],
                        "ceiling_auc": t3["ceiling_auc"].to_numpy(float),
                        "ceiling_auc_seeds": t3["ceiling_auc_seeds"].to_numpy(float)})
    return out.drop_duplicates("method").reset_index(drop=True)


def table3_claims(t3: pd.DataFrame, metrics: Any, *, little: float = 0.05) -> pd.DataFrame:
    """The paper's budget-sensitivity claims, each from a stated test (:mod:`.verdicts`).

    Paired bootstrap over pairs (the same resample for every setting; one Holm family):
    (1) at K = 3, AUC, tRec and Unsup change little for B_a <= 4 (the CI of every range, max - min
    over B_a, lies below ``little``); (2) at K = 3, B_a = 8 increases distinguishability (AUC above
    every B_a <= 4); (3) at B_a = 2, increasing K increases tRec and (4) Unsup (every step along K).
    Beyond the paper: (5) a two-sided ceiling check per setting (ERROR when the seed-averaged learned
    AUC's CI lies wholly above its exact ceiling, all seeds observed) and (6, exact) the ceiling
    grows with B_a at K = 3. Only the Eq. (7) rows enter (the paper's mechanism).

    Parameters
    ----------
    t3 : DataFrame
        :func:`table3` (with ``grid`` for the ceilings).
    metrics : verdicts.Metrics
        :func:`~dpmv_lib.experiments.verdicts.paired_bootstrap` of the Table 3 settings' auditor
        scores at T and judge results; methods are the :func:`setting_label` names.
    little : float
        The margin of claim (1).
    """
    if "selector" in t3.columns:
        t3 = t3[t3["selector"] == "em"]
    track, model = metrics.combos()[0]
    label = lambda r: setting_label(r["b_a"], int(r["k"]), "em")  # noqa: E731
    cap = t3[t3["sweep"] == "cap_magnitude"].sort_values("b_a")
    gran = t3[t3["sweep"] == "granularity"].sort_values("k")
    small = [label(r) for _, r in cap[cap["b_a"] <= 4].iterrows()]
    big = [label(r) for _, r in cap[cap["b_a"] == 8].iterrows()]
    ks = [label(r) for _, r in gran.iterrows()]

    def at(method: str, metric: str):
        return lambda g: g(track, model, method, metric)

    def gain(a: str, b: str, metric: str):
        return lambda g: at(b, metric)(g) - at(a, metric)(g)

    def spread(metric: str):
        return lambda g: highest(*(g(track, model, m, metric) for m in small)) - lowest(*(g(track, model, m, metric)
                                                                                          for m in small))

    out: list = []
    if len(small) > 1:
        out.append(BootClaim("S1", f"at K=3, AUC, tRec and Unsup change little for B_a <= 4 (range < {little})",
                             "max - min over B_a <= 4, per metric", tuple(Case(f"{m} range", spread(k), little, "<")
                                                                          for m, k in (("AUC", "auc"), ("tRec", "tRec"),
                                                                                       ("Unsup", "Unsup")))))
    if big and small:
        out.append(BootClaim("S2", "at K=3, B_a=8 increases distinguishability (AUC above every B_a <= 4)",
                             "AUC(B_a=8) - max AUC(B_a <= 4) > 0",
                             (Case("B_a=8",
                                   lambda g: at(big[0], "auc")(g) - highest(*(at(m, "auc")(g) for m in small))),)))
    for cid, metric, name in (("S3", "tRec", "tRec"), ("S4", "Unsup", "Unsup")):
        if len(ks) > 1:
            out.append(BootClaim(cid, f"at B_a=2, increasing K increases {name}",
                                 f"{name}(K+1) - {name}(K) > 0, every step",
                                 tuple(Case(f"{a.split('[')[1][:-1]} -> {b.split('[')[1][:-1]}",
                                            gain(a, b, metric))
                                       for a, b in zip(ks, ks[1:]))))
    if "ceiling_auc_seeds" in t3.columns and t3["ceiling_auc_seeds"].notna().all():
        seen = t3.drop_duplicates(["b_a", "k"])
        out.append(BootClaim("S5", "beyond the paper: the learned (seed-averaged) AUC is consistent with its exact "
                                   "ceiling (all seeds observed) in every setting",
                             "learned AUC < exact ceiling; ERROR if the CI lies wholly above",
                             tuple(Case(f"B_a={r.b_a:g},K={r.k}", at(label(r._asdict()), "auc"),
                                        float(r.ceiling_auc_seeds), "<")
                                   for r in seen.itertuples()), kind="ceiling"))
    if "ceiling_auc" in cap.columns:
        vals = cap["ceiling_auc"].to_numpy(float)
        out.append(ExactClaim("S6", "beyond the paper: at K=3 the exact optimal-auditor ceiling grows with B_a",
                              "exact ceiling AUC, every step along B_a",
                              bool(len(vals) > 1 and np.all(np.diff(vals) > 0)),
                              ", ".join(f"B_a={b:g}: {v:.3f}" for b, v in zip(cap["b_a"], vals)),
                              estimate=float(np.diff(vals).min()) if len(vals) > 1 else math.nan, margin=0.0))
    return decide(out, metrics)


def plot_table3(t3: pd.DataFrame, path: str | Path | None = None):
    """Table 3 as one panel per metric (columns: AUC with the exact ceiling, tRec, Unsup; rows: B_a at
    K=3, K at B_a=2), each on its own labelled axis: ours (solid) beside the paper (dashed)."""
    import matplotlib.pyplot as plt

    if "selector" in t3.columns:
        t3 = t3[t3["selector"] == "em"]
    panels = (("auc", "AUC (auditor)", ("ceiling_auc",)), ("trec", "tRec (judge, on M)", ()),
              ("unsup", "Unsup (judge, on M')", ()))
    sweeps = (("cap_magnitude", "b_a", "B_a (K=3)"), ("granularity", "k", "K (B_a=2)"))
    fig, axes = plt.subplots(len(sweeps), len(panels), figsize=(13, 7), squeeze=False)
    for row, (sweep, x, xl) in enumerate(sweeps):
        g = t3[t3["sweep"] == sweep].sort_values(x)
        for col, (m, label, extra) in enumerate(panels):
            ax = axes[row, col]
            if m in g.columns:
                ax.plot(g[x], g[m], marker="o", color="#1f77b4", label="ours")
            if f"paper_{m}" in g.columns:
                ax.plot(g[x], g[f"paper_{m}"], marker="x", ls="--", color="#7f7f7f", label="paper")
            for e in extra:
                if e in g.columns:
                    ax.plot(g[x], g[e], marker=".", ls=":", color="k", label="exact ceiling (one transcript)")
            if m == "auc":
                ax.axhline(0.5, color="grey", lw=0.6)
            if x == "b_a":
                ax.set_xscale("log", base=2)
            ax.set_xticks(list(g[x]), [f"{v:g}" for v in g[x]])
            ax.set(xlabel=xl, ylabel=label, title=f"{label.split(' ')[0]}: {sweep.replace('_', ' ')}")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=130)


# ---- the exact grid --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GridSpec:
    """The grid: caps ``b_as`` x granularities ``ks`` x ``modes`` x horizons 1..``horizon``.
    ``pre`` plans C_a over the first ``plan_horizon`` queries (Table 2's rule, plan = T = 16);
    K does not enter the preallocated rule, so its rows repeat over K. Modes ``"on, P&F"`` /
    ``"pre, P&F"`` use the permute-and-flip selector (:mod:`dpmv_lib.core.selection`)."""

    b_as: tuple[float, ...] = (1, 2, 4, 8)
    ks: tuple[int, ...] = (2, 3, 4)
    modes: tuple[str, ...] = PAPER_MODES
    horizon: int = 32
    plan_horizon: int = 16

    def __post_init__(self) -> None:
        if not self.b_as or not self.ks or not self.modes:
            raise ParameterError("the grid needs at least one B_a, one K and one mode")
        for m in self.modes:
            if m not in MODES:
                raise ParameterError(f"unknown mode {m!r}; use {MODES}")
        for k in self.ks:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
                raise ParameterError(f"K must be an integer >= 1, got {k!r}")
        for b in self.b_as:
            _num(b)
        if not 1 <= self.horizon <= 32 or not 1 <= self.plan_horizon <= 32:
            raise ParameterError(f"horizon and plan_horizon must lie in 1..32, got {self.horizon}, {self.plan_horizon}")
        object.__setattr__(self, "b_as", tuple(float(_num(b)) for b in self.b_as))
        object.__setattr__(self, "ks", tuple(int(k) for k in self.ks))

    def settings(self) -> list[tuple[str, float, int | None]]:
        """(mode, B_a, K) to run: every K for ``on``, one run per B_a for ``pre`` (K = None)."""
        out: list[tuple[str, float, int | None]] = []
        for mode in self.modes:
            for b in self.b_as:
                if mode_parts(mode)[0] == "on":
                    out.extend((mode, b, k) for k in self.ks)
                else:
                    out.append((mode, b, None))
        return out


def target_views(view_links: Mapping[str, Sequence[str]], attribute: str) -> frozenset[str]:
    """Views whose public gold link names ``attribute`` (target-specific personalisation)."""
    return frozenset(v for v, attrs in view_links.items() if attribute in attrs)


def _steps_to_releases(steps: Sequence[SlotStep], queries: Sequence[Any], horizon: int) -> list[Release]:
    """Public releases (one representative view per slot; the accounting ignores views) of a run."""
    by_turn: list[list[SlotRelease]] = [[] for _ in range(horizon)]
    for s in steps:
        if s.turn < horizon:
            mech = s.mechanism if s.admitted else "generic"
            eps = s.epsilon if (s.admitted and s.epsilon is not None) else Fraction(0)
            charged = s.charged if s.admitted else frozenset()
            by_turn[s.turn].append(SlotRelease(s.slot, next(iter(s.probs_m)), s.read_set, s.affected, charged, eps,
                                               mech, not s.admitted and bool(s.read_set)))
    return [Release(queries[t], tuple(sl), ()) for t, sl in enumerate(by_turn)]


def pair_grid_rows(policy: Any, pair: Any, mode: str, b_a: float, k: int | None, *, horizon: int,
                   plan_horizon: int, view_links: Mapping[str, Sequence[str]], scorer: Any,
                   max_atoms: int = 4096) -> tuple[list[dict], dict]:
    """Exact per-horizon quantities of one pair under one setting (see the module docstring).
    Returns (rows, {T: LLRDistribution}) with one row per T = 1..horizon."""
    from ..core.ledger import OnlineBudget, PreallocatedBudget, planned_charges

    pol = policy.with_caps(b_a)
    qs = pair.queries[:horizon]
    if len(qs) < horizon:
        raise ParameterError(f"pair {pair.pair_id} has {len(qs)} turns, the grid needs {horizon}")
    rule, selector = mode_parts(mode)
    budget = (OnlineBudget(_online_k(k)) if rule == "on"
              else PreallocatedBudget(planned_charges(pol, pair.queries[:plan_horizon])))
    steps = lockstep_steps(pol, pair.m, pair.m_prime, qs, budget=budget, variant=MemView, scorer=scorer,
                           variant_kwargs={"selector": selector})
    turns, equal = steps_to_turns(steps, horizon)
    dists = prefix_distributions(turns, range(1, horizon + 1), public_equal=equal, max_atoms=max_atoms)
    tv = target_views(view_links, pair.attribute)
    rate_m = np.array([sum(p for sl in pm.values() for v, p in sl.items() if v in tv) for pm, _ in turns])
    rate_mp = np.array([sum(p for sl in pq.values() for v, p in sl.items() if v in tv) for _, pq in turns])
    touch = np.zeros(horizon)
    adm = np.zeros(horizon)
    for s in steps:
        if pair.attribute in s.affected and s.read_set:
            touch[s.turn] += 1
            adm[s.turn] += s.admitted
    rels = _steps_to_releases(steps, qs, horizon)
    rows, last = [], None
    for T in range(1, horizon + 1):
        d = dists[T]
        if last is None or d is not last[0]:
            last = (d, d.auc(), d.max_loss())
        rb = reconstructed_bound(rels[:T], pair.attribute)
        rows.append({"mode": mode, "b_a": b_a, "k": k, "T": T, "pair_id": pair.pair_id, "attribute": pair.attribute,
                     "pair_auc": last[1], "max_loss": last[2],
                     "target_rate_M": float(rate_m[:T].mean()), "target_rate_Mp": float(rate_mp[:T].mean()),
                     "bound": float(rb), "touch": float(touch[:T].sum()), "admitted": float(adm[:T].sum())})
    return rows, dists


def compute_grid(bench: Any, pairs: Sequence[Any], spec: GridSpec, *, view_links: Mapping[str, Sequence[str]],
                 max_atoms: int = 4096, fpr: float = 0.05, n_seeds: int = 1, progress: bool = False,
                 workers: int | None = None) -> pd.DataFrame:
    """The exact grid (module docstring) over ``pairs``: one row per (mode, B_a, K, T).

    With ``n_seeds`` > 1 also ``ceiling_auc_seeds``: the ceiling when ``n_seeds`` independent
    transcripts of each pair (the EM seeds) are observed together - the bound of the seed-averaged
    learned auditor of Table 3. For a fixed query trajectory every seed has the same exact
    distribution, so it is the ``n_seeds``-fold convolution of one transcript's.

    ``workers``: processes over the settings (None: the usable cores; 1: this process). Each
    setting is computed alone, by the same code, so the grid does not depend on it."""
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 1:
        raise ParameterError(f"n_seeds must be an int >= 1, got {n_seeds!r}")
    if not pairs:
        raise ParameterError("the grid needs at least one pair")
    settings = spec.settings()
    job = _GridJob(bench, tuple(pairs), spec, view_links, max_atoms, fpr, n_seeds)
    out = [row for rows in parallel_map(job, settings, workers=workers, progress=progress, desc="budget grid",
                                        unit="setting") for row in rows]
    cols = ["mode", "b_a", "k", "T", "eps", *GRID_METRICS, "ceiling_auc_seeds", "ceiling_tpr", "auc_err",
            "mean_pair_auc", "n_pairs", "n_seeds"]
    df = pd.DataFrame(out)
    keep = [c for c in dict.fromkeys(cols) if c in df.columns]
    return df[keep].sort_values(["mode", "b_a", "k", "T"]).reset_index(drop=True)


@dataclass
class _GridJob:
    """The grid rows of one setting (mode, B_a, K), every T (run by :func:`parallel_map`)."""

    bench: Any
    pairs: tuple[Any, ...]
    spec: GridSpec
    view_links: Mapping[str, Sequence[str]]
    max_atoms: int
    fpr: float
    n_seeds: int
    scorer: Any = None

    def __call__(self, setting: tuple[str, float, int | None]) -> list[dict[str, Any]]:
        from ..core.scorer import LexiconScorer

        mode, b, k = setting
        spec, n_seeds, max_atoms = self.spec, self.n_seeds, self.max_atoms
        if self.scorer is None:  # one memo per process, shared by its settings
            self.scorer = MemoScorer(LexiconScorer())
        scorer = self.scorer
        rows, dists = [], {}
        for pair in self.pairs:
            r, d = pair_grid_rows(self.bench.policy(pair), pair, mode, b, k, horizon=spec.horizon,
                                  plan_horizon=spec.plan_horizon, view_links=self.view_links, scorer=scorer,
                                  max_atoms=max_atoms)
            rows.extend(r)
            dists[pair.pair_id] = (pair.attribute, d)
        per = pd.DataFrame(rows)
        powered: dict[int, Any] = {}
        out = []
        for T, g in per.groupby("T", sort=True):
            by_attr: dict[str, list] = {}
            by_attr_seeds: dict[str, list] = {}
            for attr, d in dists.values():
                by_attr.setdefault(attr, []).append(d[T])
                if n_seeds > 1:
                    key = id(d[T])  # an unchanged prefix is the same object: convolve it once
                    if key not in powered:
                        powered[key] = (d[T], d[T].power(n_seeds, max_atoms=max_atoms))
                    by_attr_seeds.setdefault(attr, []).append(powered[key][1])
            auc, tpr, err = pooled_ceiling(by_attr, self.fpr)
            seeds_auc = pooled_ceiling(by_attr_seeds, self.fpr)[0] if n_seeds > 1 else auc
            touch = g["touch"].sum()
            base = {"b_a": b, "T": int(T), "ceiling_auc": auc, "ceiling_tpr": tpr, "auc_err": err,
                    "ceiling_auc_seeds": seeds_auc, "n_seeds": n_seeds,
                    "mean_pair_auc": float(g["pair_auc"].mean()), "max_loss": float(g["max_loss"].max()),
                    "target_rate_M": float(g["target_rate_M"].mean()),
                    "target_rate_Mp": float(g["target_rate_Mp"].mean()),
                    "bound_max": float(g["bound"].max()), "bound_mean": float(g["bound"].mean()),
                    "admit_rate": float(g["admitted"].sum() / touch) if touch else math.nan,
                    "n_pairs": int(g["pair_id"].nunique())}
            if mode_parts(mode)[0] == "on":
                out.append({"mode": mode, "k": _online_k(k), "eps": float(Fraction(str(b)) / _online_k(k)), **base})
            else:
                out.extend({"mode": mode, "k": kk, "eps": math.nan, **base} for kk in spec.ks)
        return out


def save_grid(grid: pd.DataFrame, path: str | Path) -> Path:
    """Write the grid as CSV (atomic: tmp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    grid.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def load_grid(path: str | Path) -> pd.DataFrame:
    """Read a grid written by :func:`save_grid` and check its columns."""
    path = Path(path)
    if not path.exists():
        raise ParameterError(f"grid file not found: {path}")
    df = pd.read_csv(path)
    check_grid(df)
    return df


def check_grid(grid: pd.DataFrame) -> None:
    missing = {"mode", "b_a", "k", "T", "ceiling_auc"} - set(grid.columns)
    if missing:
        raise ParameterError(f"not a budget grid: missing columns {sorted(missing)}")
    dup = grid.duplicated(["mode", "b_a", "k", "T"])
    if dup.any():
        raise ParameterError(f"the grid repeats {int(dup.sum())} (mode, B_a, K, T) cells")


# ---- widget logic (no browser needed) -------------------------------------------------------------------
def grid_options(grid: pd.DataFrame) -> dict[str, Any]:
    """What the sliders offer: the grid's B_a and K values, its T range and modes."""
    check_grid(grid)
    return {"b_a": sorted(float(b) for b in grid["b_a"].unique()), "k": sorted(int(k) for k in grid["k"].unique()),
            "T": (int(grid["T"].min()), int(grid["T"].max())), "mode": [m for m in MODES if m in set(grid["mode"])]}


def match_settings(grid: pd.DataFrame, mode: str, b_a: Any, k: Any) -> pd.DataFrame:
    opts = grid_options(grid)
    if mode not in opts["mode"]:
        raise ParameterError(f"mode {mode!r} not in the grid; valid: {opts['mode']}")
    b = float(b_a)
    if not any(math.isclose(b, x) for x in opts["b_a"]):
        raise ParameterError(f"B_a = {b_a!r} not in the grid; valid: {opts['b_a']}")
    if int(k) not in opts["k"]:
        raise ParameterError(f"K = {k!r} not in the grid; valid: {opts['k']}")
    return grid[(grid["mode"] == mode) & np.isclose(grid["b_a"].astype(float), b) & (grid["k"] == int(k))]


def grid_lookup(grid: pd.DataFrame, *, mode: str, b_a: Any, k: Any, T: int) -> pd.Series:
    """The grid row for (mode, B_a, K, T); unknown values raise naming the valid ones."""
    sub = match_settings(grid, mode, b_a, k)
    lo, hi = grid_options(grid)["T"]
    if not lo <= int(T) <= hi:
        raise ParameterError(f"T = {T!r} outside the grid's horizons {lo}..{hi}")
    row = sub[sub["T"] == int(T)]
    if len(row) != 1:
        raise ParameterError(f"the grid has {len(row)} rows for mode={mode}, B_a={b_a}, K={k}, T={T}")
    return row.iloc[0]


# the modules whose source decides a grid (its cache key); dotted names below dpmv_lib
GRID_CODE_MODULES: tuple[str, ...] = ("experiments.sensitivity", "experiments.rq2", "experiments.rq2_score",
                                      "experiments.rq2_support", "experiments.rq2_horizon", "evaluate.oracle",
                                      "checks.accounting")


def grid_key(bench: Any, pairs: Sequence[Any], spec: GridSpec, view_links: Mapping[str, Sequence[str]],
             max_atoms: int, n_seeds: int = 1) -> str:
    """Cache key of a grid: data (checksums + pairs), spec, gold links, atom budget and code."""
    from dataclasses import asdict

    from .pipeline import benchmark_fingerprint, code_fingerprint, frame_hash

    return frame_hash(benchmark_fingerprint(bench), sorted(p.pair_id for p in pairs), asdict(spec),
                      {k: list(v) for k, v in sorted(view_links.items())}, max_atoms, n_seeds,
                      code_fingerprint() + code_fingerprint(GRID_CODE_MODULES))


def cached_grid(bench: Any, pairs: Sequence[Any], spec: GridSpec, *, view_links: Mapping[str, Sequence[str]],
                path: str | Path, max_atoms: int = 4096, n_seeds: int = 1, progress: bool = False,
                log: Callable[[str], None] = print, workers: int | None = None) -> pd.DataFrame:
    """:func:`compute_grid`, stored at ``path`` (CSV) with a ``.key`` sidecar; reused when the key
    (data, pairs, spec, links, code) matches, recomputed otherwise."""
    path = Path(path)
    key = grid_key(bench, pairs, spec, view_links, max_atoms, n_seeds)
    side = path.with_name(path.name + ".key")
    if path.exists() and side.exists() and side.read_text().strip() == key:
        try:
            grid = load_grid(path)
            log(f"[grid] reused {path}")
            return grid
        except (ParameterError, ValueError, OSError) as exc:
            log(f"[grid] recomputing: unreadable {path} ({exc})")
    grid = compute_grid(bench, pairs, spec, view_links=view_links, max_atoms=max_atoms, n_seeds=n_seeds,
                        progress=progress, workers=workers)
    save_grid(grid, path)
    side.write_text(key + "\n")
    return grid


# ---- notebook 05 steps: each takes the run (:class:`~.session.Session`) and returns a Result ------
TABLE3_PRIVACY_COLUMNS = ("b_a", "k", "eps_tg", "auc", "paper_auc", "tpr", "ceiling_auc_seeds", "ceiling_auc",
                          "max_loss")
TABLE3_UTILITY_COLUMNS = ("b_a", "k", "trec", "paper_trec", "unsup", "paper_unsup", "u", "target_rate_M",
                          "target_rate_Mp")


def settings_step(run: Any) -> Any:
    """The rows of Table 3 (:func:`table3_settings`), each once per selector (em, pf)."""
    from .result import Result

    settings = table3_settings(selectors=("em", "pf"))
    em = settings[settings["selector"] == "em"].drop(columns=["selector", "method"])
    return Result("The settings of Table 3", tables={"Eq. (7) rows (each repeats with selector pf)": em},
                  finding=f"{len(settings)} rows: {len(em)} settings x 2 selectors, "
                          f"{len(unique_settings(settings))} distinct (B_a, K).", data={"settings": settings})


def measure_step(run: Any, loaded: Any, settings: Any) -> Any:
    """Per setting the DP-MemView transcripts (cached), the RQ1 embedding auditor at T and the
    blinded rubric judge at T."""
    from ..evaluate import u_validity
    from ..evaluate.audit import AuditConfig, run_audit
    from ..evaluate.judge import make_judge, score_transcripts, summarise_utility
    from .common import run_encoder
    from .result import Result

    cfg, prof = run.cfg, run.profile
    with run.timer("transcripts"):
        tr = budget_transcripts(loaded["bench"], loaded["responder"], settings["settings"], seeds=prof.em_seeds,
                                turns=cfg.T, cache_dir=cfg.cache_dir / "transcripts", workers=cfg.workers,
                                progress=cfg.progress, log=run.log)
    with run.timer("audit"):
        encoder = run_encoder(prof.encoder, cfg.results_dir)
        acfg = AuditConfig(horizons=(cfg.T,), n_boot=cfg.n_boot, seed=cfg.seed, unit=cfg.audit_unit)
        audit_sum, scores = run_audit(tr, encoder, acfg, progress=cfg.progress)
    with run.timer("judge"):
        judge = make_judge(prof.judge, encoder)
        util_t = score_transcripts(tr, {"pairedmem": loaded["bench"]}, judge, cfg.T, progress=cfg.progress)
        # U holds the validated dimensions (03's check, from the cache)
        util_t = u_validity.with_validated_u(util_t, judge, cfg.data_dir, cfg.cache_dir)
        util = summarise_utility(util_t, n_boot=cfg.n_boot, seed=cfg.seed)
    return Result("Transcripts, auditor and judge per setting",
                  finding=(f"{len(tr)} transcript rows; encoder {encoder.id} (unit "
                           f"{audit_sum['embedding_unit'].iloc[0]}); judge {judge.id} with "
                           f"{int(util['n_failed'].sum())} failures; "
                           f"{u_validity.dims_label(util_t['U_dims'].iloc[0])}."),
                  data={"transcripts": tr, "audit": audit_sum, "scores": scores, "util_t": util_t, "util": util,
                        "encoder": encoder, "judge": judge})


GRID_SHOWN_COLUMNS = ("b_a", "k", "ceiling_auc", "ceiling_auc_seeds", "max_loss", "bound_max", "admit_rate",
                      "target_rate_M", "target_rate_Mp")


def grid_step(run: Any, loaded: Any) -> Any:
    """The exact grid over B_a x K x mode x T on the auditor's test pairs (:func:`cached_grid`,
    ``<results_dir>/grids/05_budget_grid.csv``), shown at T for the online mode."""
    from ..bench.datasets import load_gold_rules
    from .result import Result, sentence

    cfg = run.cfg
    bench = loaded["bench"]
    spec = GridSpec(b_as=tuple(sorted({1, 2, 4, 8, float(cfg.B_a)})), ks=tuple(sorted({2, 3, 4, int(cfg.K)})),
                    horizon=cfg.T_max, plan_horizon=cfg.T, modes=MODES)
    pairs = [p for p in bench.pairs if p.split == "test"] or list(bench.pairs)
    links = load_gold_rules(cfg.data_dir)["view_links"]
    with run.timer("grid"):
        grid = cached_grid(bench, pairs, spec, view_links=links, path=run.results_dir / "grids" / "05_budget_grid.csv",
                           n_seeds=len(run.profile.em_seeds), progress=cfg.progress)
    at_T = grid[(grid["T"] == cfg.T) & (grid["mode"] == "on")][list(GRID_SHOWN_COLUMNS)].reset_index(drop=True)
    finding = sentence("{n} cells over {p} test pairs; Theorem 1 (max realised loss <= B_a) holds on every cell: "
                       "{thm}; the largest merge error of the AUC ceiling is {err:.1e}.", n=len(grid),
                       p=int(grid["n_pairs"].iloc[0]), thm=bool((grid["max_loss"] <= grid["b_a"] + 1e-9).all()),
                       err=float(grid["auc_err"].max()))
    return Result("The exact grid", tables={f"mode on, T = {cfg.T} (every mode and T: the grid file)": at_T},
                  finding=finding, precision=4, data={"grid": grid, "pairs": pairs, "links": links})


def table3_step(run: Any, loaded: Any, settings: Any, measured: Any, grid: Any) -> Any:
    """Table 3 beside the paper (``05_table3_budget``, in full), its claims (``05_table3_claims``) and
    the figure ``05_table3.png``; shown as a privacy table and a utility table of the Eq. (7) rows."""
    from . import verdicts
    from .common import load_paper_csv, markdown_table
    from .rq2 import counts_text
    from .result import Result

    cfg = run.cfg
    g = grid["grid"]
    paper = load_paper_csv("paper_table3_budget.csv")
    t3 = table3(settings["settings"], measured["audit"], measured["util"], horizon=cfg.T, paper=paper, grid=g)
    cols = ["sweep", "selector", "b_a", "k", "eps_tg", "auc", "paper_auc", "delta_auc", "trec", "paper_trec",
            "delta_trec", "unsup", "paper_unsup", "delta_unsup", "u", "tpr", "ceiling_auc_seeds", "ceiling_auc",
            "max_loss", "target_rate_M", "target_rate_Mp"]
    head = (f"Table 3 reproduction: DP-MemView (on) (selector em: Eq. (7); pf: permute-and-flip, beyond the paper), "
            f"PairedMem, T={cfg.T}, eps = B_a/K; profile {run.profile.name}; response model "
            f"{loaded['responder'].name}; encoder {measured['encoder'].id}; judge {measured['judge'].id}; "
            f"{len(loaded['bench'])} pairs; ceiling/rates: exact grid on {g['n_pairs'].iloc[0]} test pairs. "
            f"Paper: Qwen2.5-7B.\n\n")
    run.write_table("05_table3_budget", t3, head + markdown_table(t3[cols]))
    scores = measured["scores"]
    metrics = verdicts.paired_bootstrap(scores[scores["horizon"] == cfg.T], measured["util_t"],
                                        n_boot=max(cfg.n_boot, verdicts.N_BOOT), seed=cfg.seed)
    claims = table3_claims(t3, metrics)
    run.write_table("05_table3_claims", claims, verdicts.claims_markdown(claims))
    path = run.figure_path("05_table3")
    import matplotlib.pyplot as plt

    plt.close(plot_table3(t3, path))
    em = t3[t3["selector"] == "em"]
    shown = {"privacy (Eq. (7) rows)": em[list(TABLE3_PRIVACY_COLUMNS)].reset_index(drop=True),
             "utility (Eq. (7) rows)": em[list(TABLE3_UTILITY_COLUMNS)].reset_index(drop=True)}
    res = Result(f"Table 3 at T = {cfg.T}", tables=shown, notes=[verdicts.claims_markdown(claims)],
                 finding=(f"Table 3 verdicts: {counts_text(claims)}. The permute-and-flip rows and the differences "
                          f"from the paper are in the written table (05_table3_budget)."),
                 data={"t3": t3, "claims": claims, "metrics": metrics, "paper": paper})
    return res.show_figure("Table 3: one panel per metric, ours beside the paper", path)


def power_step(run: Any, measured: Any, table3_result: Any, grid: Any) -> Any:
    """The C.5 auditor beside stronger honest learned auditors per Table 3 setting against the exact
    ceiling of the same statistic (``05_auditor_power``, ``05_auditor_power.png``)."""
    import matplotlib.pyplot as plt

    from .auditor_power import POWER_GOAL, auditor_power, power_figure, power_table
    from .result import Result

    cfg = run.cfg
    power = auditor_power(measured["transcripts"], measured["encoder"], setting_ceilings(table3_result["t3"]),
                          horizon=cfg.T, view_links=grid["links"], seed=cfg.seed, n_boot=cfg.n_boot)
    ptab = power_table(power)
    run.write_table("05_auditor_power", ptab)
    path = run.figure_path("05_auditor_power")
    plt.close(power_figure(power, path))
    top = ptab[ptab["method"] == setting_label(8, 3, "em")]
    finding = ""
    if len(top):
        r = top.iloc[0]
        finding = (f"At B_a = 8, K = 3 the best learned auditor ({r['best']}) reaches power {r['best power']:.2f} "
                   f"(goal {POWER_GOAL:g}: {'met' if r['meets_goal'] else 'not met'}); the best auditor is chosen on "
                   f"the evaluation pairs, so its power is optimistic by that choice.")
    shown = ptab.drop(columns=["track", "response_model", "best power_lo", "best power_hi"], errors="ignore")
    shown = shown[shown["method"].str.startswith(METHOD + " [")].reset_index(drop=True)
    return Result("Auditors with power", tables={"Eq. (7) settings (every setting: the written table)": shown},
                  finding=finding, data={"power": ptab}).show_figure("power per setting", path)


def auditor_limits(t3: pd.DataFrame, claims: pd.DataFrame, power: pd.DataFrame, *, b_a: float = 8, k: int = 3
                   ) -> tuple[pd.DataFrame, str]:
    """Which Table 3 verdicts reflect the auditor rather than the mechanism: per Eq. (7) setting of the
    cap sweep the learned (seed-averaged) AUC, the exact ceiling of the same statistic and the best
    honest auditor's AUC; and one sentence on S1 and S2 (learned AUC) beside S6 (exact ceiling) with
    the numbers at (``b_a``, ``k``).

    Parameters
    ----------
    t3 : DataFrame
        :func:`table3` with the grid's ceilings.
    claims : DataFrame
        :func:`table3_claims` (``id``, ``verdict``).
    power : DataFrame
        :func:`~.auditor_power.power_table` keyed by :func:`setting_label`.
    """
    from ..evaluate.audit import require_columns

    require_columns(t3, {"sweep", "selector", "b_a", "k", "auc", "ceiling_auc_seeds"}, "Table 3")
    require_columns(power, {"method", "best"}, "power table")
    pw = power.set_index("method")
    em = t3[(t3["selector"] == "em") & (t3["sweep"] == "cap_magnitude")].sort_values("b_a")
    rows = []
    for r in em.itertuples(index=False):
        m = setting_label(r.b_a, int(r.k), "em")
        best = pw.at[m, "best"] if m in pw.index else None
        rows.append({"b_a": float(r.b_a), "k": int(r.k), "learned_auc": float(r.auc),
                     "ceiling_auc_seeds": float(r.ceiling_auc_seeds), "best_auditor": best or "-",
                     "best_auc": float(pw.at[m, f"auc {best}"]) if best is not None else math.nan,
                     "views_links_auc": (float(pw.at[m, "auc views-links"])
                                         if m in pw.index and "auc views-links" in pw.columns else math.nan)})
    tab = pd.DataFrame(rows)
    verdict = claims.set_index("id")["verdict"].to_dict()
    at = tab[np.isclose(tab["b_a"], float(b_a)) & (tab["k"] == int(k))]
    if at.empty:
        raise ParameterError(f"Table 3 has no Eq. (7) row at B_a={b_a:g}, K={k}")
    r = at.iloc[0]
    vl = ("" if math.isnan(r["views_links_auc"])
          else f", while the views-links auditor reaches {r['views_links_auc']:.3f}")
    text = (f"At B_a = {b_a:g}, K = {k} the C.5 auditor's AUC is {r['learned_auc']:.3f} against an exact ceiling of "
            f"{r['ceiling_auc_seeds']:.3f}{vl} (best honest auditor: {r['best_auditor']}, {r['best_auc']:.3f}). ")
    learned = {c: verdict.get(c, "absent") for c in ("S1", "S2")}
    exact = verdict.get("S6", "absent")
    weak = (r["learned_auc"] - 0.5) < 0.5 * (r["ceiling_auc_seeds"] - 0.5)
    if exact == "HOLDS" and any(v != "HOLDS" for v in learned.values()) and weak:
        text += (f"S1 is {learned['S1']} and S2 {learned['S2']} beside S6 (the exact ceiling grows with B_a) "
                 f"HOLDS: the learned verdicts reflect the auditor, which closes less than half of the ceiling's "
                 f"gap over chance, not the mechanism.")
    else:
        text += f"S1 is {learned['S1']}, S2 {learned['S2']} and S6 {exact}."
    return tab, text


def auditor_limits_step(run: Any, table3_result: Any, power: Any) -> Any:
    """:func:`auditor_limits` as a result (``05_auditor_limits``)."""
    from .result import Result

    tab, finding = auditor_limits(table3_result["t3"], table3_result["claims"], power["power"])
    run.write_table("05_auditor_limits", tab)
    return Result("The Table 3 verdicts against the exact ceilings",
                  tables={"cap sweep at K = 3: learned AUC, ceiling and the best auditor": tab}, finding=finding,
                  data={"table": tab})


def seed_verdicts_step(run: Any) -> Any:
    """The RQ1, RQ2 and Table 3 verdicts of the runs with other seeds under
    ``<results_dir>/seeds/`` beside this run's (``05_verdicts_by_seed``)."""
    from . import verdicts
    from .result import Result

    runs = verdicts.seed_runs(run.cfg.results_dir, run.cfg.seed)
    if len(runs) <= 1:
        return Result("Verdicts by seed", finding=f"No runs with other seeds under {run.cfg.results_dir}/seeds/ "
                                                  f"(make seeds writes them).")
    by_seed = verdicts.seed_stability(runs)
    run.write_table("05_verdicts_by_seed", by_seed)
    flips = by_seed[by_seed["flip"]]
    shown = flips if len(flips) else by_seed.head(0)
    return Result("Verdicts by seed", tables={"claims that flip (every claim: the written table)": shown},
                  finding=(f"Runs with seeds {sorted(runs)}: {int(by_seed['flip'].sum())} of {len(by_seed)} "
                           f"claims flip."),
                  data={"table": by_seed})


def decomposition_step(run: Any, loaded: Any, measured: Any, table3_result: Any) -> Any:
    """Every Table 3 setting's tRec and Unsup split into the exact reach and the measured credits
    (:func:`dpmv_lib.experiments.utility_decomposition.decomposition`, figure
    ``05_utility_decomposition.png``; the paper reports no such split for Table 3)."""
    from .utility_decomposition import decomposition

    return decomposition(measured["transcripts"], measured["util_t"], {"pairedmem": loaded["bench"]},
                         horizon=run.cfg.T, metrics=table3_result["metrics"], paper=pd.DataFrame(),
                         figure_path=run.figure_path("05_utility_decomposition"))
