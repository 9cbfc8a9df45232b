"""The DP utility frontier per B_a with every interface placed on it (notebook 05, beyond the paper).

The curve is :func:`dpmv_lib.checks.frontier.frontier_rate`: the largest M-side rate any pure
B_a-DP interface can have at a given M'-side rate of the same transcript statistic. Points:

* exact target-view rates (M, M') of DP-MemView (on / pre / P&F) from the exact grid and of any
  interface rows in the grid's columns (:mod:`dpmv_lib.experiments.interface_rows`);
* measured tRec (on M) against Unsup (on M') of our runs and of the paper (Tables 2 and 3). These
  are two different judged statistics, so their distance to the curve is indicative only: the
  frontier binds one statistic compared across M and M'.

Each point's distance is g_B(q) - p (:func:`~dpmv_lib.checks.frontier.distance`).
"""
from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..checks.frontier import distance, frontier_rate, max_separation
from ..core.errors import ParameterError
from .interface_rows import grid_rows
from .plots import save_figure
from .styled import styled

EXACT = "target-view rate (exact)"
MEASURED = "tRec vs Unsup (measured)"
PAPER = "tRec vs Unsup (paper)"


@dataclass
class FrontierReport:
    """The frontier's points (``table``: source, interface, b_a, statistic, q = M'-side value,
    p = M-side value, frontier = g_B(q), distance = g_B(q) - p), the figure and a paragraph
    generated from the numbers. Displays itself (table, figure, paragraph)."""

    table: pd.DataFrame
    figure: object
    markdown: str
    path: Path | None = None

    def _png(self) -> str:
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=110)  # type: ignore[attr-defined]
        return base64.b64encode(buf.getvalue()).decode("ascii")

    def _repr_html_(self) -> str:
        tab = styled(self.table, precision=4, caption="Points on the DP utility frontier").to_html()
        return (f"{tab}<img src='data:image/png;base64,{self._png()}'/>"
                f"<p>{html.escape(self.markdown)}</p>")

    def __repr__(self) -> str:
        return f"{self.table.to_string(index=False)}\n\n{self.markdown}"


def points(grid: pd.DataFrame | None = None, *, rows: pd.DataFrame | None = None,
           measured: pd.DataFrame | None = None, paper_table3: pd.DataFrame | None = None,
           paper_table2: pd.DataFrame | None = None, b_as: Sequence[float] = (1, 2, 4, 8), k: int = 3,
           T: int = 16, paper_b_a: float = 2.0) -> pd.DataFrame:
    """Every point with its distance to the frontier at its own B_a.

    Parameters
    ----------
    grid : DataFrame, optional
        The exact grid (DP-MemView's modes at K = ``k``, horizon ``T``).
    rows : DataFrame, optional
        Exact interface rows (``interface``, ``b_a``, ``target_rate_M``, ``target_rate_Mp``).
    measured : DataFrame, optional
        Our measured rows with ``b_a``, ``trec``, ``unsup`` (and ``k``, ``selector`` or ``method``).
    paper_table3, paper_table2 : DataFrame, optional
        The paper's Table 3 (``b_a``, ``k``, ``trec``, ``unsup``) and Table 2 (``method``,
        ``trec``, ``unsup``, ``track``; placed at ``paper_b_a``, its main setting).
    """
    out: list[dict] = []

    def add(source: str, interface: str, b: float, stat: str, q: float, p: float) -> None:
        if not (np.isfinite(q) and np.isfinite(p)):
            return
        q, p = min(max(float(q), 0.0), 1.0), min(max(float(p), 0.0), 1.0)
        out.append({"source": source, "interface": interface, "b_a": float(b), "statistic": stat, "q": q, "p": p,
                    "frontier": float(frontier_rate(q, b)), "distance": distance(q, p, b)})

    exact = [grid_rows(grid, b_as, k=k, T=T)] if grid is not None else []
    if rows is not None:
        exact.append(rows)
    for frame in exact:
        for r in frame.itertuples(index=False):
            add("ours", str(r.interface), float(r.b_a), EXACT, float(r.target_rate_Mp), float(r.target_rate_M))
    if measured is not None:
        _need(measured, {"b_a", "trec", "unsup"}, "measured")
        m = measured[measured["k"] == int(k)] if "k" in measured.columns else measured
        for r in m.to_dict("records"):
            if "selector" in r:  # Table 3's rows: the online interface of each selector
                name = "DP-MemView (on, P&F)" if r["selector"] == "pf" else "DP-MemView (on)"
            else:
                name = str(r.get("method") or "DP-MemView (on)")
            add("ours", name, float(r["b_a"]), MEASURED, float(r["unsup"]), float(r["trec"]))
    if paper_table3 is not None:
        _need(paper_table3, {"b_a", "k", "trec", "unsup"}, "paper_table3")
        for r in paper_table3[paper_table3["k"] == int(k)].to_dict("records"):
            add("paper", "DP-MemView (on) (Table 3)", float(r["b_a"]), PAPER, float(r["unsup"]), float(r["trec"]))
    if paper_table2 is not None:
        _need(paper_table2, {"method", "trec", "unsup"}, "paper_table2")
        t2 = paper_table2[paper_table2["track"] == "PairedMem"] if "track" in paper_table2.columns else paper_table2
        for method, g in t2.groupby("method", sort=False):
            add("paper", f"{method} (Table 2, mean over models)", paper_b_a, PAPER, float(g["unsup"].mean()),
                float(g["trec"].mean()))
    table = pd.DataFrame(out, columns=["source", "interface", "b_a", "statistic", "q", "p", "frontier", "distance"])
    return table.drop_duplicates(["source", "interface", "b_a", "statistic"]).reset_index(drop=True)


def _need(frame: pd.DataFrame, cols: set[str], name: str) -> None:
    missing = cols - set(frame.columns)
    if missing:
        raise ParameterError(f"{name} lacks the columns {sorted(missing)}")


def figure(table: pd.DataFrame, b_as: Sequence[float] = (1, 2, 4, 8), path: str | Path | None = None):
    """One panel per B_a: the frontier g_B(q), the diagonal (no separation) and every point."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(b_as), figsize=(4.0 * len(b_as), 4.0), squeeze=False)
    q = np.linspace(0, 1, 401)
    markers = {EXACT: "o", MEASURED: "s", PAPER: "^"}
    names = sorted(set(table["interface"])) if len(table) else []
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    for ax, b in zip(axes[0], b_as):
        ax.plot(q, frontier_rate(q, b), color="black", lw=1.5, label=f"frontier, B_a={b:g}")
        ax.plot(q, q, color="grey", lw=0.8, ls="--")
        g = table[np.isclose(table["b_a"], float(b))] if len(table) else table
        for r in g.itertuples(index=False):
            ax.scatter(r.q, r.p, marker=markers.get(r.statistic, "o"), color=colours[r.interface], s=36,
                       edgecolor="black" if r.source == "paper" else "none", label=f"{r.interface}: {r.statistic}")
        qs, sep = max_separation(b)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="M'-side rate q", ylabel="M-side rate p",
               title=f"B_a={b:g}: max p - q = {sep:.2f} at q={qs:.2f}")
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("frontier"):
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    return save_figure(fig, path, dpi=130)


def summary(table: pd.DataFrame, attribution: pd.DataFrame | None = None, *, b_a: float = 2.0,
            new_interface: str = "DP-MemView (attribute decision)") -> str:
    """A paragraph from the numbers: the frontier at ``b_a``, where DP-MemView (on) and the new
    interface sit, and which single contract change moves DP-MemView most."""
    qs, sep = max_separation(b_a)
    at = table[np.isclose(table["b_a"], float(b_a)) & (table["statistic"] == EXACT)]
    parts = [f"At B_a = {b_a:g} any interface that is pure B_a-DP over the whole transcript can separate a "
             f"statistic's M-side and M'-side values by at most tanh(B_a/2) = {sep:.3f} (at M'-side value {qs:.3f}; "
             f"closed form, equal to the linprog LP)."]
    for name in ("DP-MemView (on)", "DP-MemView (pre)", new_interface):
        r = at[at["interface"] == name]
        if len(r):
            x = r.iloc[0]
            parts.append(f"{name}: exact target-view rates {x.p:.3f} on M and {x.q:.3f} on M' (difference "
                         f"{x.p - x.q:.3f}), {x.distance:.3f} below the curve, whose value at q = {x.q:.3f} is "
                         f"{x.frontier:.3f}.")
    if attribution is not None and len(attribution):
        base = attribution.iloc[0]
        moves = attribution.iloc[1:]
        broken = moves[moves["contract"].str.startswith("BREAKS")]
        if len(broken):
            best = broken.loc[broken["difference"].idxmax()]
            parts.append(f"Changing one contract element of DP-MemView (on) at a time (each change breaks the "
                         f"contract: measurement only) moves its difference from {base['difference']:.3f} to at most "
                         f"{best['difference']:.3f} ({best['interface']}); the gaps to the curve stay between "
                         f"{broken['frontier_gap'].min():.3f} and {broken['frontier_gap'].max():.3f} (DP-MemView (on): "
                         f"{base['frontier_gap']:.3f}), so "
                         + ("no single element accounts for the distance." if best["difference"] < sep / 4 else
                            f"{best['interface']} accounts for much of it."))
        keep = moves[moves["contract"].str.startswith("keeps")]
        for r in keep.itertuples(index=False):
            parts.append(f"{r.interface}, inside the contract, reaches a difference of {r.difference:.3f} with a "
                         f"largest realised loss of {r.max_loss:.3f} (cap {b_a:g}).")
    pq = table[(table["statistic"] == PAPER) & np.isclose(table["b_a"], float(b_a))]
    if len(pq):
        parts.append(f"The paper's tRec/Unsup points at B_a = {b_a:g} lie {pq['distance'].min():.3f} to "
                     f"{pq['distance'].max():.3f} below the curve (different judged statistics on M and M': "
                     f"indicative only).")
    above = table[(table["statistic"] != EXACT) & (table["distance"] < 0)]
    if len(above):
        names = ", ".join(sorted(set(above["interface"])))
        parts.append(f"{len(above)} tRec/Unsup point(s) lie above the curve ({names}), "
                     f"which no pure B_a-DP interface could reach for one statistic: tRec and Unsup grade different "
                     f"behaviours, and the responder's and judge's credit without memory counts in tRec.")
    return " ".join(parts)


def report(grid: pd.DataFrame | None = None, *, rows: pd.DataFrame | None = None,
           measured: pd.DataFrame | None = None, paper_table3: pd.DataFrame | None = None,
           paper_table2: pd.DataFrame | None = None, attribution: pd.DataFrame | None = None,
           b_as: Sequence[float] = (1, 2, 4, 8), k: int = 3, T: int = 16, b_a: float = 2.0,
           path: str | Path | None = None) -> FrontierReport:
    """The frontier per B_a with every point on it, its figure (written to ``path`` when given)
    and a paragraph from the numbers (:func:`points`, :func:`figure`, :func:`summary`)."""
    table = points(grid, rows=rows, measured=measured, paper_table3=paper_table3, paper_table2=paper_table2,
                   b_as=b_as, k=k, T=T, paper_b_a=b_a)
    fig = figure(table, b_as, path)
    return FrontierReport(table, fig, summary(table, attribution, b_a=b_a), Path(path) if path else None)


def rq1_frontier(session: Any, rq1: Any, track: str = "pairedmem") -> Any:
    """Notebook step: :func:`report` of an RQ1 run's Table 2 on ``track`` (tRec against Unsup,
    at the run's B_a) beside the paper's Table 2 points, with the exact target-view rates at
    B_a in (1, 2, 4, 8); the figure goes to ``figures/<notebook>_utility_frontier.png``. Shown: the
    points at the run's B_a; the finding is the generated paragraph."""
    import matplotlib.pyplot as plt

    from .common import load_paper_csv
    from .result import Result
    from .rq1 import result_of

    res = result_of(rq1)
    cfg = res.config
    t2 = res.table2
    path = session.figure_path(f"{session.notebook}_utility_frontier")
    rep = report(measured=t2[t2["track"] == track].assign(b_a=float(cfg.B_a)),
                 paper_table2=load_paper_csv("paper_table2_rq1.csv"), k=cfg.K, T=cfg.T, b_a=float(cfg.B_a), path=path)
    plt.close(rep.figure)  # type: ignore[arg-type]
    session.write_table(f"{session.notebook}_utility_frontier", rep.table)
    at = rep.table[np.isclose(rep.table["b_a"], float(cfg.B_a)) & (rep.table["statistic"] != PAPER)]
    return Result(f"Every interface against the DP utility frontier at B_a = {cfg.B_a:g} (every point, the paper's "
                  f"too: tables/{session.notebook}_utility_frontier.csv)", rep.markdown,
                  tables={f"this run's points at B_a = {cfg.B_a:g}": at}, figures={"frontier": path},
                  data={"report": rep})


def report_step(run: Any, decision: Any, attribution: Any, table3_result: Any) -> FrontierReport:
    """Notebook 05: :func:`report` of the attribute-decision rows, the measured Table 3 and the
    paper's Tables 2 and 3, with the attribution rows (``05_utility_frontier.png``)."""
    from .common import load_paper_csv

    cfg = run.cfg
    return report(rows=decision.table, measured=table3_result["t3"], paper_table3=table3_result["paper"],
                  paper_table2=load_paper_csv("paper_table2_rq1.csv"), attribution=attribution.table, k=cfg.K,
                  T=cfg.T, b_a=cfg.B_a, path=run.figure_path("05_utility_frontier"))
