"""Lift over GenericOnly, here and in the paper, and tRec's slope in the budget (beyond the paper).

GenericOnly's conditioning is the same under M and M', so its tRec and Unsup are what the
responder and the judge give without any memory: the *free* credit. A method's **lift** is its
tRec (Unsup) minus GenericOnly's, with a 95% percentile CI from the paired bootstrap over pairs
(:func:`dpmv_lib.experiments.verdicts.paired_bootstrap`: the same resample for both methods, so the
difference is bootstrapped as a paired difference). The paper's lift is the same difference of
its Table 2 values (mean over its three response models; their range beside it; no CI: the paper
gives none). :func:`lift_ratio` divides a DP-MemView mode's lift by RawReadSet's (the share of raw
memory's personalisation the interface keeps), per bootstrap replicate for the CI.

:func:`budget_slope` fits ``tRec = a + b * log2(B_a)`` over Table 3's cap sweep (B_a in {1, 2, 4, 8}
at K = 3, Eq. (7) rows) with :func:`scipy.stats.linregress`, here (CI: the slope of every
bootstrap replicate) and in the paper. log2 because the sweep doubles B_a: b is the change in
tRec per doubling.

:func:`finding` turns these numbers into the paragraph notebook 03 prints; nothing in it is typed in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..core.errors import ParameterError
from .rq1_claims import DP_MODES
from .styled import styled
from .verdicts import Metrics

BASELINE = "GenericOnly"
RAW = "RawReadSet"
LIFT_METRICS = {"tRec": "trec", "Unsup": "unsup"}


def _ci(x: np.ndarray) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if not len(x):
        return math.nan, math.nan
    return float(np.quantile(x, 0.025)), float(np.quantile(x, 0.975))


def _paper_values(paper: pd.DataFrame | None, track: str, method: str, col: str) -> np.ndarray:
    if paper is None or not len(paper):
        return np.array([])
    sub = paper[(paper["track"] == track) & (paper["method"] == method)]
    return sub.sort_values("response_model")[col].to_numpy(float)


def lift_table(metrics: Metrics, paper: pd.DataFrame | None = None, *, baseline: str = BASELINE) -> pd.DataFrame:
    """Per (track, response model, method, metric): ours, the lift over ``baseline`` with its CI,
    the paper's lift (mean over its models, min and max).

    Parameters
    ----------
    metrics : verdicts.Metrics
        The paired bootstrap of the judge results (``tRec``, ``Unsup`` per method).
    paper : DataFrame, optional
        :func:`dpmv_lib.experiments.tables.load_paper_table2` (our track names).

    Raises
    ------
    ParameterError
        If ``baseline`` is missing from a (track, response model).
    """
    recs = []
    for track, model in metrics.combos():
        methods = list(dict.fromkeys(k[2] for k in metrics.point if k[:2] == (track, model)))
        for metric, col in LIFT_METRICS.items():
            if (track, model, baseline, metric) not in metrics.point:
                raise ParameterError(f"{track}/{model}: no {metric} of the baseline {baseline}")
            b_pt, b_bt = metrics.point[(track, model, baseline, metric)], metrics.boot[(track, model, baseline, metric)]
            pb = _paper_values(paper, track, baseline, col)
            for method in methods:
                key = (track, model, method, metric)
                if method == baseline or key not in metrics.point:
                    continue
                lo, hi = _ci(metrics.boot[key] - b_bt)
                pm = _paper_values(paper, track, method, col)
                pl = pm - pb if len(pm) and len(pm) == len(pb) else np.array([])
                recs.append({"track": track, "response_model": model, "method": method, "metric": metric,
                             "value": metrics.point[key], "baseline": b_pt, "lift": metrics.point[key] - b_pt,
                             "lift_lo": lo, "lift_hi": hi,
                             "paper_value": float(pm.mean()) if len(pm) else math.nan,
                             "paper_baseline": float(pb.mean()) if len(pb) else math.nan,
                             "paper_lift": float(pl.mean()) if len(pl) else math.nan,
                             "paper_lift_min": float(pl.min()) if len(pl) else math.nan,
                             "paper_lift_max": float(pl.max()) if len(pl) else math.nan})
    return pd.DataFrame.from_records(recs)


def lift_ratio(metrics: Metrics, paper: pd.DataFrame | None = None, *, methods: Sequence[str] = DP_MODES,
               raw: str = RAW, baseline: str = BASELINE, metric: str = "tRec") -> pd.DataFrame:
    """Per (track, response model, method): the lift of ``method`` divided by the lift of ``raw``,
    with the percentile CI of the replicate ratios, and the paper's ratio of mean lifts."""
    col = LIFT_METRICS[metric]
    recs = []
    for track, model in metrics.combos():
        def get(m: str, src: Any, track: str = track, model: str = model) -> Any:
            return src.get((track, model, m, metric))

        if get(baseline, metrics.point) is None or get(raw, metrics.point) is None:
            continue
        den_pt = get(raw, metrics.point) - get(baseline, metrics.point)
        den_bt = get(raw, metrics.boot) - get(baseline, metrics.boot)
        pb, pr = (_paper_values(paper, track, m, col) for m in (baseline, raw))
        for m in methods:
            if get(m, metrics.point) is None:
                continue
            num_pt = get(m, metrics.point) - get(baseline, metrics.point)
            with np.errstate(divide="ignore", invalid="ignore"):
                lo, hi = _ci((get(m, metrics.boot) - get(baseline, metrics.boot)) / den_bt)
            pm = _paper_values(paper, track, m, col)
            paper_ratio = (float((pm - pb).mean() / (pr - pb).mean())
                           if len(pm) and len(pm) == len(pb) == len(pr) and (pr - pb).mean() != 0 else math.nan)
            recs.append({"track": track, "response_model": model, "method": m, "metric": metric,
                         "lift": num_pt, "raw_lift": den_pt, "ratio": num_pt / den_pt if den_pt else math.nan,
                         "ratio_lo": lo, "ratio_hi": hi, "paper_ratio": paper_ratio})
    return pd.DataFrame.from_records(recs)


def _slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of ``y`` on ``x`` (the slope linregress returns)."""
    xc = x - x.mean()
    return (y - y.mean(axis=-1, keepdims=True)) @ xc / (xc @ xc)


def budget_slope(t3: pd.DataFrame, metrics: Metrics | None = None, *, metric: str = "tRec", k: int = 3,
                 log2: bool = True) -> pd.DataFrame:
    """tRec's slope over Table 3's cap sweep (B_a at K = ``k``, Eq. (7) rows), here and in the paper.

    Parameters
    ----------
    t3 : DataFrame
        :func:`dpmv_lib.experiments.sensitivity.table3` (with the paper's columns for the paper row).
    metrics : verdicts.Metrics, optional
        The paired bootstrap of the settings' judge results (methods named by
        :func:`~dpmv_lib.experiments.sensitivity.setting_label`): gives the CI of our slope.
    log2 : bool
        Regress on log2(B_a) (change per doubling) instead of B_a.

    Returns
    -------
    DataFrame
        One row per source (ours, paper): x, slope, its CI (ours), intercept, r, p, stderr of
        :func:`scipy.stats.linregress`, the values at the smallest and largest B_a.
    """
    from .sensitivity import setting_label

    col = LIFT_METRICS[metric]
    sel = t3[t3["selector"] == "em"] if "selector" in t3.columns else t3
    cap = sel[(sel["sweep"] == "cap_magnitude") & (sel["k"] == k)].sort_values("b_a")
    if len(cap) < 3:
        raise ParameterError(f"the cap sweep at K={k} has {len(cap)} settings; a slope needs at least 3")
    b = cap["b_a"].to_numpy(float)
    x = np.log2(b) if log2 else b
    recs = []
    for source, ycol in (("ours", col), ("paper", f"paper_{col}")):
        if ycol not in cap.columns or cap[ycol].isna().any():
            continue
        y = cap[ycol].to_numpy(float)
        fit = stats.linregress(x, y)
        lo = hi = math.nan
        if source == "ours" and metrics is not None:
            track, model = metrics.combos()[0]
            keys = [(track, model, setting_label(float(bb), k, "em"), metric) for bb in b]
            if all(kk in metrics.boot for kk in keys):
                lo, hi = _ci(_slope(x, np.stack([metrics.boot[kk] for kk in keys], axis=1)))
        recs.append({"source": source, "metric": metric, "x": "log2(B_a)" if log2 else "B_a", "k": k,
                     "slope": float(fit.slope), "slope_lo": lo, "slope_hi": hi, "intercept": float(fit.intercept),
                     "r": float(fit.rvalue), "p": float(fit.pvalue), "stderr": float(fit.stderr),
                     "b_first": float(b[0]), "b_last": float(b[-1]), "first": float(y[0]), "last": float(y[-1])})
    return pd.DataFrame.from_records(recs)


def _f(x: float, sign: bool = True) -> str:
    return "n/a" if x is None or not math.isfinite(x) else (f"{x:+.3f}" if sign else f"{x:.3f}")


def _unit(x: str) -> str:
    return "per doubling of B_a" if x.startswith("log2") else "per unit of B_a"


def _same(a: float, lo: float, hi: float, b: float) -> str:
    """How our lift compares with the paper's: inside our CI, or above / below it."""
    if not all(math.isfinite(v) for v in (lo, hi, b)):
        return "not comparable"
    if lo <= b <= hi:
        return "the paper's value lies inside our CI"
    return f"the paper's value lies {'above' if b > hi else 'below'} our CI"


def finding(lifts: pd.DataFrame, ratios: pd.DataFrame, slope: pd.DataFrame | None = None, *,
            track: str = "pairedmem", decomposition: pd.DataFrame | None = None) -> str:
    """The finding in words, generated from :func:`lift_table`, :func:`lift_ratio`,
    :func:`budget_slope` and (optionally) the decomposition's parts
    (:func:`dpmv_lib.experiments.utility_decomposition.decompose`): what reproduces, what does not,
    and why."""
    lt = lifts[(lifts["track"] == track) & (lifts["metric"] == "tRec")]
    if lt.empty:
        raise ParameterError(f"no tRec lifts for track {track!r}")
    model = lt["response_model"].iloc[0]
    lt = lt[lt["response_model"] == model].set_index("method")
    out = []
    parts = []
    for m in (*DP_MODES, RAW):
        if m in lt.index:
            r = lt.loc[m]
            where = _same(r["lift"], r["lift_lo"], r["lift_hi"], r["paper_lift"])
            parts.append(f"{m} {_f(r['lift'])} here (95% CI {_f(r['lift_lo'])} to {_f(r['lift_hi'])}) and "
                         f"{_f(r['paper_lift'])} in the paper ({where})")
    out.append(f"On {track} ({model}), the lift of tRec over {BASELINE} is: " + "; ".join(parts) + ".")
    if len(lt):
        base, pbase = float(lt["baseline"].iloc[0]), float(lt["paper_baseline"].iloc[0])
        out.append(f"{BASELINE}'s own tRec, the free credit that needs no memory, is {_f(base, False)} here and "
                   f"{_f(pbase, False)} in the paper.")
    rt = ratios[(ratios["track"] == track) & (ratios["response_model"] == model)].set_index("method")
    if RAW in lt.index and len(rt):
        r = lt.loc[RAW]
        dp = [m for m in DP_MODES if m in rt.index]
        ratio_txt = "; ".join(f"{m} {_f(rt.at[m, 'ratio'], False)} here (CI {_f(rt.at[m, 'ratio_lo'], False)} "
                              f"to {_f(rt.at[m, 'ratio_hi'], False)}) and {_f(rt.at[m, 'paper_ratio'], False)} "
                              f"in the paper" for m in dp)
        out.append(f"As a share of {RAW}'s lift: {ratio_txt}.")
        dp_same = [m for m in dp if lt.at[m, "lift_lo"] <= lt.at[m, "paper_lift"] <= lt.at[m, "lift_hi"]]
        ratio_of = {m: (_f(rt.at[m, "paper_ratio"], False), _f(rt.at[m, "ratio"], False)) for m in dp}
        if r["paper_lift"] < r["lift_lo"]:
            verdict = (f"So in the paper raw memory itself barely moves tRec ({RAW} {_f(r['paper_lift'])} over a free "
                       f"credit of {_f(pbase, False)}), and DP-MemView's lift is "
                       + " / ".join(f"{v[0]} ({m})" for m, v in ratio_of.items())
                       + f" times that small lift; here raw memory lifts tRec by {_f(r['lift'])} and DP-MemView's "
                       f"lift is " + " / ".join(f"{v[1]} ({m})" for m, v in ratio_of.items()) + " times it")
        elif r["paper_lift"] > r["lift_hi"]:
            verdict = f"{RAW}'s lift is larger in the paper than here"
        else:
            verdict = f"{RAW}'s lift reproduces within its CI"
        same = ((" and ".join(dp_same) + " reproduce" + ("s" if len(dp_same) == 1 else "")
                 + " the paper's lift within the CI") if dp_same else "no DP-MemView lift reproduces within its CI")
        out.append(verdict + f". Of the lifts alone: {same}.")
        size = {m: lt.at[m, "lift"] / lt.at[m, "paper_lift"] for m in (*dp, RAW)
                if math.isfinite(lt.at[m, "paper_lift"]) and lt.at[m, "paper_lift"] > 0}
        if size:
            alike = [m for m, v in size.items() if 0.5 <= v <= 2]
            out.append("Lift here / lift in the paper: " + ", ".join(f"{m} {v:.2f}" for m, v in size.items())
                       + (f"; within a factor of 2, i.e. of the paper's size: {', '.join(alike)}" if alike
                          else "; none within a factor of 2") + ".")
    if decomposition is not None and len(decomposition):
        d = decomposition[(decomposition["track"] == track) & (decomposition["metric"] == "tRec")
                          & (decomposition["response_model"] == model)].set_index("method")
        if DP_MODES[0] in d.index and RAW in d.index:
            a = d.loc[DP_MODES[0]]
            out.append(f"Why, from the decomposition: {DP_MODES[0]} admits the target item's slot with probability "
                       f"{_f(a['p_admitted'], False)} and then releases the target-linked view with probability "
                       f"{_f(a['p_target_given_admitted'], False)} (exact), so the view reaches the responder with "
                       f"probability {_f(a['p_reached'], False)}; when it does, the judged credit is "
                       f"{_f(a['credit_reached'], False)}, and {_f(a['credit_not_reached'], False)} when it does not "
                       f"({RAW}: reached {_f(d.at[RAW, 'p_reached'], False)}, credit "
                       f"{_f(d.at[RAW, 'credit_reached'], False)}). Its tRec above its own free credit is "
                       f"P(reached) x (credit(reached) - credit(not reached)) = "
                       f"{_f(a['p_reached'] * (a['credit_reached'] - a['credit_not_reached']))}; with the same "
                       f"credits and a reach of 1 it would be {_f(a['credit_reached'] - a['credit_not_reached'])}.")
    if slope is not None and len(slope):
        s = slope.set_index("source")
        txt = []
        for src in ("ours", "paper"):
            if src in s.index:
                r = s.loc[src]
                ci = (f" (CI {_f(r['slope_lo'])} to {_f(r['slope_hi'])})" if math.isfinite(r["slope_lo"]) else "")
                txt.append(f"{_f(r['slope'])} {_unit(r['x'])}{ci} {'here' if src == 'ours' else 'in the paper'} "
                           f"({_f(r['first'], False)} at B_a={r['b_first']:g} to {_f(r['last'], False)} at "
                           f"B_a={r['b_last']:g})")
        out.append(f"tRec's slope in {s['x'].iloc[0]} at K={int(s['k'].iloc[0])} is " + " and ".join(txt) + ".")
    return " ".join(out)


@dataclass
class LiftFinding:
    """The lift table, the ratio table, the budget slope (if any) and the generated paragraph;
    displays itself in a notebook (the paragraph too unless ``show_text`` is False, for a notebook
    that prints it in a cell of its own)."""

    lifts: pd.DataFrame
    ratios: pd.DataFrame
    slope: pd.DataFrame | None = None
    text: str = ""
    show_text: bool = True

    def _ipython_display_(self) -> None:
        from IPython.display import Markdown, display

        if len(self.lifts):
            display(styled(self.lifts, precision=3, caption=f"lift over {BASELINE}: ours (paired bootstrap CI) "
                                                           f"and the paper (mean, min, max of its models)"))
        if len(self.ratios):
            display(styled(self.ratios, precision=3, caption=f"DP-MemView's lift as a share of {RAW}'s"))
        if self.slope is not None and len(self.slope):
            display(styled(self.slope, precision=4, caption="tRec's slope in the budget (scipy.stats.linregress)"))
        if self.text and self.show_text:
            display(Markdown(self.text))

    def __repr__(self) -> str:
        return self.text


def lift_finding(metrics: Metrics, paper: pd.DataFrame | None = None, *, slope: pd.DataFrame | None = None,
                 decomposition: pd.DataFrame | None = None, track: str = "pairedmem") -> LiftFinding:
    """:func:`lift_table`, :func:`lift_ratio` and :func:`finding` as one result. ``paper`` defaults
    to the paper's Table 2 (:func:`dpmv_lib.experiments.tables.load_paper_table2`)."""
    from .tables import load_paper_table2

    paper = load_paper_table2() if paper is None else paper
    lifts = lift_table(metrics, paper)
    ratios = lift_ratio(metrics, paper)
    return LiftFinding(lifts, ratios, slope, finding(lifts, ratios, slope, track=track, decomposition=decomposition))


def rq1_lift(rq1: Any, *, decomposition: Any = None, name: str = "03_utility_lift", track: str = "pairedmem") -> Any:
    """Notebook step: :func:`lift_finding` of an RQ1 run (the result of
    :func:`dpmv_lib.experiments.rq1.run`, its paired bootstrap metrics); ``decomposition``: the
    step result of :func:`~.utility_decomposition.rq1_decomposition` (or its parts). With
    ``config.write`` the lift and ratio tables go to ``{results_dir}/tables/<name>.csv|md`` (the
    paragraph heads the Markdown). Shown: the tRec lifts on ``track`` and the ratios; the finding is
    the generated paragraph."""
    from ..common.paths import resolve
    from .common import markdown_table
    from .result import Result
    from .rq1 import result_of
    from .tables import write_table

    res = result_of(rq1)
    parts = decomposition["parts"] if decomposition is not None and not isinstance(decomposition, pd.DataFrame) \
        else decomposition
    if res.metrics is None:
        raise ParameterError("the RQ1 result holds no bootstrap metrics")
    lf = lift_finding(res.metrics, decomposition=parts, track=track)
    if res.config.write:
        write_table(lf.lifts, resolve(res.config.results_dir) / "tables", name,
                    lf.text + "\n\n" + markdown_table(lf.lifts) + "\n\n" + markdown_table(lf.ratios))
    lt = lf.lifts[(lf.lifts["track"] == track) & (lf.lifts["metric"] == "tRec")][
        ["method", "value", "lift", "lift_lo", "lift_hi", "paper_value", "paper_lift", "paper_lift_min",
         "paper_lift_max"]]
    return Result(f"Lift of tRec over {BASELINE} on {track}, ours and the paper's (every track and Unsup: "
                  f"tables/{name}.csv)", lf.text,
                  tables={"tRec lift": lt, f"DP-MemView's lift as a share of {RAW}'s": lf.ratios},
                  data={"lift": lf})


def slope_finding(t3: pd.DataFrame, metrics: Metrics | None = None, *, log2: bool = True,
                  tables_dir: Any = None, name: str = "05_budget_slope") -> LiftFinding:
    """:func:`budget_slope` of tRec and Unsup with the sentence :func:`finding` writes for it
    (notebook 05); with ``tables_dir`` the slopes go to ``<tables_dir>/<name>.csv|md``."""
    slope = pd.concat([budget_slope(t3, metrics, metric=m, log2=log2) for m in LIFT_METRICS], ignore_index=True)
    s = slope[slope["metric"] == "tRec"].set_index("source")
    parts = []
    for src in ("ours", "paper"):
        if src in s.index:
            r = s.loc[src]
            ci = f" (CI {_f(r['slope_lo'])} to {_f(r['slope_hi'])})" if math.isfinite(r["slope_lo"]) else ""
            parts.append(f"{_f(r['slope'])} {_unit(r['x'])}{ci} {'here' if src == 'ours' else 'in the paper'}, "
                         f"{_f(r['first'], False)} -> {_f(r['last'], False)} from B_a={r['b_first']:g} to "
                         f"B_a={r['b_last']:g}")
    text = f"tRec's slope in {slope['x'].iloc[0]} at K=3: " + "; ".join(parts) + "."
    if {"ours", "paper"} <= set(s.index) and math.isfinite(s.at["ours", "slope_lo"]):
        inside = s.at["ours", "slope_lo"] <= s.at["paper", "slope"] <= s.at["ours", "slope_hi"]
        text += (" The paper's slope lies inside our CI: the budget moves tRec as little here as there."
                 if inside else " The paper's slope lies outside our CI.")
    if tables_dir is not None:
        from .common import markdown_table
        from .tables import write_table

        write_table(slope, tables_dir, name, text + "\n\n" + markdown_table(slope))
    return LiftFinding(pd.DataFrame(), pd.DataFrame(), slope, text)
