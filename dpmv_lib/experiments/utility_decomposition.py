"""Where personalisation goes: tRec and Unsup split into reach and credit (beyond the paper).

tRec is the mean, over the judged target-required items of M transcripts, of the item's credit
``grade / 4`` (:func:`dpmv_lib.evaluate.judge.score_transcripts`; seeds averaged within a pair,
then pairs averaged). Unsup is the same over the unsupported items of M' transcripts. Each item is
one gold behaviour ``req:<attribute>:<view>`` (``unsup:...``) at one turn, and names the policy
view that carries it (:func:`dpmv_lib.evaluate.rubric.behaviour_view`). With the judge's own
weights ``w`` (1 / items of the transcript / valid seeds of the pair / valid pairs),

    tRec = P(reached) * credit(reached) + (1 - P(reached)) * credit(not reached),

where an item is **reached** when what the response model received at that turn carries the
target-linked behaviour:

* **view interfaces** (the transcript records ``view_probs``: DP-MemView in every mode, its
  ablations and GenericOnly, whose only view is the generic one): the item's view is among the
  views released at that turn. Its exact probability given the public ledger path is the item's
  view's probability in that turn's ``view_probs`` (the exact per-turn law of Eq. (7) / P&F that
  the exact oracle, :mod:`dpmv_lib.evaluate.oracle`, convolves), not a sampled frequency. The
  item's slot is **admitted** when it ran the selector at that turn (its release is not the
  generic fallback at the cap; the ledger path, hence admission, does not depend on the draws,
  so admission is exact too), and P(reached) = P(admitted) * P(target view | admitted);
* **memory-text interfaces** (RawReadSet, TypedMask, TaskMin, OutputFilter): nothing gates the
  text, so P(admitted) = 1; an item on M is reached when the conditioning text of that turn
  differs between M and M' (raw evidence of the attribute reached the model; OutputFilter's filter
  acts after the model), which is 0 or 1 and exact. On M' no evidence of the attribute exists
  (M' is the adjacent store without it), so no Unsup item is reached.

``credit(reached)`` and ``credit(not reached)`` are measured: the mean credit of the items that
were (were not) reached in the judged transcripts. ``credit(not reached)`` is the responder's and
judge's *free* credit: what the judge awards without the behaviour's view or evidence. The
recombination uses the exact P(reached); the measured tRec equals the same formula with the
sampled reach frequency, so the two differ only by the sampling noise of the draws, and
:func:`decompose` reports whether the recombined value lies in the measured tRec's 95% CI
(paired bootstrap over pairs, :func:`dpmv_lib.experiments.verdicts.paired_bootstrap`).

The paper's side (:func:`paper_parts`): the paper reports tRec only, so its free credit is
GenericOnly's tRec (reach 0 by construction) and RawReadSet's tRec is its credit when reached
(reach 1); the reach a method's tRec implies under those two credits is (tRec - free) /
(RawReadSet - free).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..bench.benchmark import Benchmark
from ..core.errors import ParameterError
from ..evaluate.judge_agreement import SHOWN
from ..evaluate.rubric import behaviour_view, build_rubrics
from .styled import styled
from .verdicts import Metrics, paired_bootstrap

#: the judged metrics, the item kind each averages and the store side it is judged on
METRIC_ITEMS: dict[str, tuple[str, str]] = {"tRec": ("target_required", "M"), "Unsup": ("unsupported", "M'")}
FAMILIES = ("views", "memory_text")
ITEM_COLUMNS = ("track", "response_model", "method", "family", "metric", "pair_id", "attribute", "side", "seed",
                "turn", "item_id", "view", "slot", "grade", "credit", "weight", "admitted", "p_reached", "reached")
PART_COLUMNS = ("track", "response_model", "method", "family", "metric", "n_pairs", "n_items", "p_admitted",
                "p_target_given_admitted", "p_reached", "p_reached_sampled", "credit_reached",
                "credit_not_reached", "shown_reached", "shown_not_reached", "recombined", "measured", "measured_lo",
                "measured_hi", "within_ci", "draw_sd", "draw_z")
#: above this gap between a view's exact probability and admission (0), the transcript is inconsistent
_TOL = 1e-9


@lru_cache(maxsize=65536)
def _json(s: str) -> Any:
    try:
        return json.loads(s) if s else {}
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"the transcript table holds invalid JSON: {s[:80]!r}") from exc


def _admitted_slots(released: str) -> frozenset[str]:
    """Slots of one turn that ran the selector (not the generic fallback / generic release)."""
    rel = _json(released or "")
    slots = rel.get("slots", []) if isinstance(rel, dict) else []
    return frozenset(s["slot"] for s in slots
                     if s.get("mechanism", "generic") != "generic" and not s.get("fallback", False))


def _released(views: str) -> frozenset[str]:
    v = _json(views or "")
    return frozenset(v.values() if isinstance(v, dict) else v)


def item_table(transcripts: pd.DataFrame, per_transcript: pd.DataFrame, benchmarks: Mapping[str, Benchmark],
               horizon: int = 16) -> pd.DataFrame:
    """One row per judged tRec / Unsup item (see the module docstring for every column's rule).

    Parameters
    ----------
    transcripts : DataFrame
        The transcript table (:mod:`dpmv_lib.generate.generation`), both sides.
    per_transcript : DataFrame
        :func:`dpmv_lib.evaluate.judge.score_transcripts` of those transcripts (with ``items``).
    benchmarks : mapping
        Track -> benchmark (the gold behaviours of the rubrics).
    horizon : int
        The judged horizon T.

    Raises
    ------
    ParameterError
        Missing columns, a judged transcript without its turns, or a view released with positive
        probability in a slot that was not admitted.
    """
    need_t = {"track", "response_model", "method", "pair_id", "side", "seed", "turn", "conditioning", "views",
              "released", "view_probs"}
    need_j = {"track", "response_model", "method", "pair_id", "attribute", "side", "seed", "items", "failed"}
    for name, df, need in (("transcript", transcripts, need_t), ("judge", per_transcript, need_j)):
        if need - set(df.columns):
            raise ParameterError(f"{name} table lacks columns {sorted(need - set(df.columns))}")
    tr = transcripts[transcripts["turn"] < horizon]
    key = ["track", "response_model", "method", "pair_id", "seed", "turn"]
    empty = tr["view_probs"].fillna("").astype(str).str.strip().isin(["", "{}"])
    family = {k: ("memory_text" if g.all() else "views") for k, g in empty.groupby([tr["track"], tr["method"]])}
    pairs = set(zip(per_transcript["track"], per_transcript["pair_id"]))
    rubrics = build_rubrics(benchmarks, horizon, pairs)
    behaviours = {t: b.behaviours for t, b in benchmarks.items()}
    recs = []
    ok = per_transcript[~per_transcript["failed"].astype(bool)]
    for r in ok.itertuples(index=False):
        for metric, (kind, side) in METRIC_ITEMS.items():
            if r.side != side:
                continue
            rub = rubrics.get((r.track, r.pair_id, side))
            if rub is None:
                raise ParameterError(f"no rubric for {r.track}/{r.pair_id}/{side}")
            cat = behaviours[r.track]
            items = [i for i in rub.items if cat[i.item_id].kind == kind and i.key in r.items]
            if (r.track, r.method) not in family:
                raise ParameterError(f"no transcripts for {r.track}/{r.method}")
            for i in items:
                b = cat[i.item_id]
                recs.append((r.track, r.response_model, r.method, family[(r.track, r.method)], metric, r.pair_id,
                             r.attribute, side, int(r.seed), i.turn, i.item_id, behaviour_view(b), b.slot,
                             float(r.items[i.key]), 1.0 / len(items)))
    df = pd.DataFrame.from_records(recs, columns=list(ITEM_COLUMNS[:12]) + ["slot", "grade", "weight"])
    if df.empty:
        return pd.DataFrame(columns=list(ITEM_COLUMNS))
    m = tr[tr["side"] == "M"].set_index(key)[["conditioning", "views", "released", "view_probs"]]
    mp = tr[tr["side"] == "M'"].set_index(key)[["conditioning", "views", "released", "view_probs"]]
    both = m.add_suffix("_M").join(mp.add_suffix("_Mp"), how="inner").reset_index()
    n = len(df)
    df = df.merge(both, on=key, how="inner", validate="many_to_one")
    if len(df) != n:
        raise ParameterError(f"{n - len(df)} judged items have no transcript turn on both sides")
    here = np.where(df["side"] == "M", "_M", "_Mp")
    pick = lambda c: np.where(here == "_M", df[c + "_M"], df[c + "_Mp"])  # noqa: E731
    views, released, probs = pick("views"), pick("released"), pick("view_probs")
    is_view = (df["family"] == "views").to_numpy()
    p = np.array([float(sum(sl.get(v, 0.0) for sl in _json(pr or "").values())) if (iv and v) else 0.0
                  for iv, v, pr in zip(is_view, df["view"], probs)])
    adm = np.array([float(s in _admitted_slots(rel or "")) if iv else 1.0
                    for iv, s, rel in zip(is_view, df["slot"], released)])
    got = np.array([float(v in _released(vs or "")) if iv else 0.0 for iv, v, vs in zip(is_view, df["view"], views)])
    bad = is_view & (p > _TOL) & (adm == 0)
    if bad.any():
        row = df[bad].iloc[0]
        raise ParameterError(f"{row['method']} {row['pair_id']} turn {row['turn']}: view {row['view']!r} has positive "
                             f"probability in slot {row['slot']!r}, which was not admitted")
    text = ((df["side"] == "M") & (df["conditioning_M"] != df["conditioning_Mp"])).to_numpy(float)
    df["admitted"] = adm
    df["p_reached"] = np.where(is_view, p, text)
    df["reached"] = np.where(is_view, got, text)
    df["credit"] = df["grade"] / 4
    grp = ["track", "response_model", "method", "metric"]
    n_seeds = df.groupby(grp + ["pair_id"])["seed"].transform("nunique")
    n_pairs = df.groupby(grp)["pair_id"].transform("nunique")
    df["weight"] = df["weight"] / n_seeds / n_pairs
    return df[list(ITEM_COLUMNS)]


def _draw_var(g: pd.DataFrame) -> float:
    """Exact variance, over the selectors' draws, of the sampled reach ``sum w * reached`` given
    the public path: one draw per (transcript, turn, slot), whose views are mutually exclusive
    outcomes (a view named by several items counts with their summed weight); draws of
    different slots, turns and seeds are independent."""
    by_view = g.groupby(["pair_id", "seed", "turn", "slot", "view"], sort=False).agg(
        w=("weight", "sum"), r=("p_reached", "first"))
    by_view["w2r"], by_view["wr"] = by_view["w"] ** 2 * by_view["r"], by_view["w"] * by_view["r"]
    draw = by_view.groupby(level=["pair_id", "seed", "turn", "slot"], sort=False)[["w2r", "wr"]].sum()
    return float(np.clip(draw["w2r"] - draw["wr"] ** 2, 0, None).sum())


def _ratio(num: float, den: float) -> float:
    return num / den if den > _TOL else math.nan


def decompose(items: pd.DataFrame, metrics: Metrics | None = None, per_transcript: pd.DataFrame | None = None,
              *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The parts of tRec and Unsup per (track, response model, method), and their recombination.

    ``p_reached = p_admitted * p_target_given_admitted`` (exact), ``credit_*`` measured (mean
    grade / 4, what tRec averages), ``shown_*`` the share graded >= 2 ("shown"; beside the credit,
    outside the identity),
    ``recombined = p_reached * credit_reached + (1 - p_reached) * credit_not_reached`` (a missing
    credit counts only where its weight is positive), ``measured`` the judge's tRec / Unsup with
    its 95% CI from the paired bootstrap over pairs (``metrics``, or computed from
    ``per_transcript``), ``within_ci`` whether the recombination lies in that CI.

    ``measured - recombined = (sampled reach - exact reach) * (credit_reached - credit_not_reached)``
    exactly, and the sampled reach's variance over the draws given the public path is known
    (:func:`_draw_var`): ``draw_sd`` is the resulting standard deviation of that difference and
    ``draw_z`` the difference in its units (|z| <= 1.96 in about 95% of rows when the exact laws
    are the ones sampled). The pair bootstrap's CI is narrow where strata hold few pairs (two
    pairs per attribute in the smoke profile's transfer track), so ``draw_z`` is the sharper check.

    Raises
    ------
    ParameterError
        Missing columns, or neither ``metrics`` nor ``per_transcript``.
    """
    missing = set(ITEM_COLUMNS) - set(items.columns)
    if missing:
        raise ParameterError(f"item table lacks columns {sorted(missing)}")
    if metrics is None:
        if per_transcript is None:
            raise ParameterError("decompose needs the bootstrap metrics or the per-transcript judge table")
        metrics = paired_bootstrap(utility=per_transcript, n_boot=n_boot, seed=seed)
    recs = []
    for (track, model, method, family, metric), g in items.groupby(
            ["track", "response_model", "method", "family", "metric"], sort=True):
        w, c = g["weight"].to_numpy(float), g["credit"].to_numpy(float)
        a, p, z = (g[x].to_numpy(float) for x in ("admitted", "p_reached", "reached"))
        p_adm, p_r, p_z = float(w @ a), float(w @ p), float(w @ z)
        c1, c0 = _ratio(float(w @ (z * c)), p_z), _ratio(float(w @ ((1 - z) * c)), 1 - p_z)
        shown = (g["grade"].to_numpy(float) >= SHOWN).astype(float)
        s1, s0 = _ratio(float(w @ (z * shown)), p_z), _ratio(float(w @ ((1 - z) * shown)), 1 - p_z)
        recombined = (p_r * c1 if p_r > _TOL else 0.0) + ((1 - p_r) * c0 if 1 - p_r > _TOL else 0.0)
        key = (track, model, method, metric)
        boot = metrics.boot.get(key)
        lo, hi = ((float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))) if boot is not None
                  else (math.nan, math.nan))
        measured = float(metrics.point.get(key, w @ c))
        sd = abs(c1 - c0) * math.sqrt(_draw_var(g)) if math.isfinite(c1 - c0) else 0.0
        recs.append({"track": track, "response_model": model, "method": method, "family": family, "metric": metric,
                     "n_pairs": int(g["pair_id"].nunique()), "n_items": int(len(g)), "p_admitted": p_adm,
                     "p_target_given_admitted": _ratio(p_r, p_adm), "p_reached": p_r, "p_reached_sampled": p_z,
                     "credit_reached": c1, "credit_not_reached": c0, "shown_reached": s1, "shown_not_reached": s0,
                     "recombined": recombined,
                     "measured": measured, "measured_lo": lo, "measured_hi": hi,
                     "within_ci": bool(lo - _TOL <= recombined <= hi + _TOL) if boot is not None else False,
                     "draw_sd": sd, "draw_z": (measured - recombined) / sd if sd > 0 else 0.0})
    return pd.DataFrame.from_records(recs, columns=list(PART_COLUMNS))


def paper_parts(paper: pd.DataFrame, baseline: str = "GenericOnly", raw: str = "RawReadSet") -> pd.DataFrame:
    """What the paper's Table 2 allows: per (track, response model, method) its tRec, the free
    credit (``baseline``'s tRec), the credit when reached (``raw``'s tRec, reach 1), the lift
    over the free credit and the reach it implies, ``(tRec - free) / (raw - free)``; one more
    row per track and method for the mean over the paper's models (``response_model`` "mean").

    Parameters
    ----------
    paper : DataFrame
        :func:`dpmv_lib.experiments.tables.load_paper_table2` (columns track, method,
        response_model, trec).
    """
    need = {"track", "method", "response_model", "trec"}
    if need - set(paper.columns):
        raise ParameterError(f"paper table lacks columns {sorted(need - set(paper.columns))}")
    mean = paper.groupby(["track", "method"], as_index=False)["trec"].mean().assign(response_model="mean")
    df = pd.concat([paper[list(need)], mean], ignore_index=True)
    recs = []
    for (track, model), g in df.groupby(["track", "response_model"], sort=True):
        t = g.set_index("method")["trec"]
        if baseline not in t.index or raw not in t.index:
            raise ParameterError(f"paper {track}/{model} lacks {baseline} or {raw}")
        free, full = float(t[baseline]), float(t[raw])
        for method, v in t.items():
            recs.append({"track": track, "response_model": model, "method": method, "trec": float(v),
                         "free_credit": free, "credit_reached": full, "lift": float(v) - free,
                         "implied_reach": _ratio(float(v) - free, full - free)})
    return pd.DataFrame.from_records(recs)


def ours_implied(parts: pd.DataFrame, baseline: str = "GenericOnly", raw: str = "RawReadSet") -> pd.DataFrame:
    """The paper-side arithmetic applied to our tRec (the reach implied by GenericOnly's and
    RawReadSet's tRec), beside our exact reach: where they differ, the credit per reached item
    differs between methods."""
    t = parts[parts["metric"] == "tRec"]
    recs = []
    for (track, model), g in t.groupby(["track", "response_model"], sort=True):
        m = g.set_index("method")
        if baseline not in m.index or raw not in m.index:
            continue
        free, full = float(m.at[baseline, "measured"]), float(m.at[raw, "measured"])
        for method, r in m.iterrows():
            recs.append({"track": track, "response_model": model, "method": method, "trec": float(r["measured"]),
                         "free_credit": free, "credit_reached": full, "lift": float(r["measured"]) - free,
                         "implied_reach": _ratio(float(r["measured"]) - free, full - free),
                         "exact_reach": float(r["p_reached"])})
    return pd.DataFrame.from_records(recs)


@dataclass
class Decomposition:
    """The decomposition of one run: ``items`` (per judged item), ``parts`` (per method, both
    metrics), ``paper`` (:func:`paper_parts`), ``implied`` (:func:`ours_implied`) and ``figure``.
    Displays itself in a notebook (tables, then the figure)."""

    items: pd.DataFrame
    parts: pd.DataFrame
    paper: pd.DataFrame
    implied: pd.DataFrame
    figure: Any = None

    def _ipython_display_(self) -> None:
        from IPython.display import display

        show = ["track", "response_model", "method", "family", "metric", "p_admitted", "p_target_given_admitted",
                "p_reached", "credit_reached", "credit_not_reached", "shown_reached", "shown_not_reached", "recombined",
                "measured", "measured_lo",
                "measured_hi", "within_ci"]
        display(styled(self.parts[show], precision=3,
                       caption="tRec / Unsup = P(reached) x credit(reached) + (1 - P(reached)) x credit(not reached)"))
        if not self.implied.empty:
            display(styled(self.implied, precision=3, caption="ours: reach implied by GenericOnly and RawReadSet "
                                                              "tRec, beside the exact reach"))
        if not self.paper.empty:
            display(styled(self.paper[self.paper["response_model"] == "mean"], precision=3,
                           caption="paper (mean of its three models): free credit = GenericOnly's tRec, "
                                   "credit when reached = RawReadSet's tRec"))
        if self.figure is not None:
            display(self.figure)

    def __repr__(self) -> str:
        return self.parts.to_string()


def decomposition_figure(parts: pd.DataFrame, paper: pd.DataFrame | None = None, *, metric: str = "tRec",
                         path: Any = None):
    """One stacked bar per method and track: the reached share ``p_reached * credit_reached`` over
    the free share ``(1 - p_reached) * credit_not_reached``, the measured value with its 95% CI as
    an error bar; the paper's bars (mean of its models) split into free credit and lift (a negative
    lift as an outlined gap below GenericOnly's value)."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    d = parts[parts["metric"] == metric]
    tracks = sorted(d["track"].unique())
    fig, axes = plt.subplots(1, len(tracks), figsize=(6.5 * max(len(tracks), 1), 4.2), squeeze=False)
    for ax, track in zip(axes[0], tracks):
        g = d[d["track"] == track].drop_duplicates("method")
        methods = list(g["method"])
        x = np.arange(len(methods))
        free = ((1 - g["p_reached"]) * g["credit_not_reached"].fillna(0)).to_numpy(float)
        reach = (g["p_reached"] * g["credit_reached"].fillna(0)).to_numpy(float)
        ax.bar(x - 0.2, free, 0.4, color="#bdbdbd", label="free credit share (not reached)")
        ax.bar(x - 0.2, reach, 0.4, bottom=free, color="#2ca02c", label="reached share")
        ax.errorbar(x - 0.2, g["measured"], yerr=[g["measured"] - g["measured_lo"], g["measured_hi"] - g["measured"]],
                    fmt="k.", capsize=3, label=f"measured {metric} (95% CI)")
        if paper is not None and metric == "tRec":
            pm = paper[(paper["track"] == track) & (paper["response_model"] == "mean")].set_index("method")
            pf = np.array([pm.at[m, "free_credit"] if m in pm.index else np.nan for m in methods])
            pl = np.array([pm.at[m, "lift"] if m in pm.index else np.nan for m in methods])
            low = np.minimum(pf, pf + pl)
            ax.bar(x + 0.2, low, 0.4, color="#bdbdbd", hatch="//", edgecolor="white", label="paper: free (GenericOnly)")
            ax.bar(x + 0.2, np.clip(pl, 0, None), 0.4, bottom=pf, color="#98df8a", hatch="//", edgecolor="white",
                   label="paper: lift over GenericOnly")
            neg = pl < 0
            if neg.any():
                ax.bar(x[neg] + 0.2, -pl[neg], 0.4, bottom=low[neg], color="none", edgecolor="#d62728",
                       label="paper: below GenericOnly")
        ax.set_xticks(x, methods, rotation=35, ha="right", fontsize=8)
        ax.set(ylabel=metric, ylim=(0, 1), title=f"{track}: ours (left bar) vs paper (right, hatched)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, path)


def decomposition(transcripts: pd.DataFrame, per_transcript: pd.DataFrame, benchmarks: Mapping[str, Benchmark],
                  *, horizon: int = 16, metrics: Metrics | None = None, paper: pd.DataFrame | None = None,
                  n_boot: int = 1000, seed: int = 0, figure_path: Any = None) -> Decomposition:
    """:func:`item_table` + :func:`decompose` + :func:`paper_parts` + the figure, as one result.

    ``paper`` defaults to the paper's Table 2 (:func:`dpmv_lib.experiments.tables.load_paper_table2`);
    pass an empty frame to leave the paper out."""
    from .tables import load_paper_table2

    items = item_table(transcripts, per_transcript, benchmarks, horizon)
    parts = decompose(items, metrics, per_transcript, n_boot=n_boot, seed=seed)
    paper = load_paper_table2() if paper is None else paper
    pp = paper_parts(paper) if len(paper) else pd.DataFrame()
    import matplotlib.pyplot as plt

    fig = decomposition_figure(parts, pp if len(pp) else None, path=figure_path)
    plt.close(fig)
    return Decomposition(items, parts, pp, ours_implied(parts), fig)


def rq1_decomposition(rq1: Any, *, name: str = "03_utility_decomposition", track: str = "pairedmem") -> Any:
    """Notebook step: :func:`decomposition` of an RQ1 run (the result of
    :func:`dpmv_lib.experiments.rq1.run`): its transcripts, judge table and bootstrap metrics, the
    benchmarks reloaded as the run loaded them. With ``config.write`` the parts go to
    ``{results_dir}/tables/<name>.csv|md`` and the figure to ``{results_dir}/figures/<name>.png``.
    Shown: the tRec parts on ``track``; ``result["parts"]`` holds every part."""
    from ..common.paths import resolve
    from .result import Result
    from .rq1 import result_of, load_tracks
    from .tables import write_table

    res = result_of(rq1)
    cfg = res.config
    out = resolve(cfg.results_dir)
    benches = load_tracks(cfg.data_dir, res.profile, cfg.seed)
    fig_path = (out / "figures" / f"{name}.png") if cfg.write else None
    dec = decomposition(res.transcripts, res.utility_transcripts, benches, horizon=cfg.T, metrics=res.metrics,
                        seed=cfg.seed, figure_path=fig_path)
    if cfg.write:
        write_table(dec.parts, out / "tables", name)
    p = dec.parts
    shown = p[(p["track"] == track) & (p["metric"] == "tRec")][
        ["method", "p_admitted", "p_target_given_admitted", "p_reached", "credit_reached", "credit_not_reached",
         "recombined", "measured", "within_ci"]]
    within = p["within_ci"].astype(bool)
    d = shown.set_index("method")
    bits = [f"{int(within.sum())} of {len(p)} recombined values (every method, track and metric) lie within the "
            f"measured value's 95% CI"]
    for m in ("DP-MemView (on)", "RawReadSet", "GenericOnly"):
        if m in d.index:
            r = d.loc[m]
            if not np.isfinite(r["credit_reached"]):
                bits.append(f"{m} never reaches the target view or evidence (probability {r['p_reached']:.3f}) and "
                            f"earns credit {r['credit_not_reached']:.3f} without it")
                continue
            bits.append(f"{m} reaches the target view or evidence with probability {r['p_reached']:.3f} and earns "
                        f"credit {r['credit_reached']:.3f} when reached, "
                        + (f"{r['credit_not_reached']:.3f} when not" if np.isfinite(r["credit_not_reached"])
                           else "with no unreached items"))
    result = Result(f"tRec = P(reached) x credit(reached) + (1 - P(reached)) x credit(not reached), on {track} "
                    f"(every track and Unsup: tables/{name}.csv)", "; ".join(bits) + ".",
                    tables={"tRec parts": shown}, data={"parts": p, "decomposition": dec})
    if len(dec.paper):
        pm = dec.paper[(dec.paper["response_model"] == "mean") & (dec.paper["track"] == track)]
        result.show_table("paper (mean of its three models): free credit = GenericOnly's tRec, credit when "
                          "reached = RawReadSet's tRec", pm)
    if fig_path is not None:
        result.show_figure("decomposition", fig_path)
    return result
