"""Figures for RQ1: privacy-utility trade-off, leakage vs horizon, learned auditor vs exact ceiling."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

MARKERS = {"GenericOnly": "s", "RawReadSet": "X", "TypedMask": "P", "TaskMin": "D", "OutputFilter": "v",
           "DP-MemView (on)": "o", "DP-MemView (pre)": "^", "IncompleteCharge": "<", "CappedArgmax": ">",
           "NoCap": "h", "ScoreChannel": "*", "DP-MemView (on, P&F)": "8", "DP-MemView (pre, P&F)": "d"}
#: P&F rows share their Eq. (7) counterpart's colour (told apart by the marker)
COLOUR_OF = {"DP-MemView (on, P&F)": "DP-MemView (on)", "DP-MemView (pre, P&F)": "DP-MemView (pre)"}


#: PNG text chunks written with every figure: none (``None`` drops matplotlib's default ``Software``)
PNG_METADATA = {"Software": None}


def save_figure(fig, path: str | Path | None, dpi: int = 130):
    """Write ``fig`` as PNG to ``path`` (parents created) when a path is given; return ``fig``.

    The file holds pixels and ``dpi`` only: no text chunks (matplotlib's default ``Software``
    names its version), so the same figure gives the same bytes on any run."""
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi, metadata=PNG_METADATA)
    return fig


def pyplot():
    import matplotlib.pyplot as plt  # Agg without a display, inline in notebooks
    return plt


def method_colors(methods: Sequence[str]) -> dict[str, tuple]:
    """One fixed colour per method name (the same in every figure)."""
    import matplotlib
    cmap = matplotlib.colormaps["tab10"]
    known = list(MARKERS)
    extra = [m for m in methods if m not in known]

    def index(m: str) -> int:
        m = COLOUR_OF.get(m, m)
        return known.index(m) if m in known else len(known) + extra.index(m)
    return {m: cmap(index(m) % 10) for m in methods}


def privacy_utility_figure(table2: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """AUC (x; 0.5 = chance) against tRec and against U (y), one point per method, per track
    (filled: PairedMem, hollow: transfer), with 95% CI bars where available."""
    plt = pyplot()
    methods = list(dict.fromkeys(table2["method"]))
    col = method_colors(methods)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharex=True)
    for ax, (ym, yl) in zip(axes, (("trec", "tRec (target-required personalisation, M)"),
                                   ("u", "U (overall response quality)"))):
        for r in table2.itertuples(index=False):
            rd = r._asdict()
            x, y = rd["auc"], rd.get(ym, np.nan)
            if np.isnan(y):
                continue
            hollow = rd["track"] != "pairedmem"
            xerr = None if rd.get("by_construction") or np.isnan(rd.get("auc_lo", np.nan)) else \
                [[x - rd["auc_lo"]], [rd["auc_hi"] - x]]
            yerr = None if np.isnan(rd.get(f"{ym}_lo", np.nan)) else [[y - rd[f"{ym}_lo"]], [rd[f"{ym}_hi"] - y]]
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=MARKERS.get(rd["method"], "o"), ms=8,
                        color=col[rd["method"]], mfc="white" if hollow else col[rd["method"]],
                        ecolor=col[rd["method"]], elinewidth=0.8, capsize=2, alpha=0.9)
        ax.axvline(0.5, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("auditor macro-AUC at T (0.5 = chance)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=col[m], marker=MARKERS.get(m, "o"), ls="", ms=8, label=m) for m in methods]
    handles += [plt.Line2D([], [], color="k", marker="o", ls="", label="PairedMem"),
                plt.Line2D([], [], color="k", marker="o", mfc="white", ls="", label="transfer")]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(title or "Privacy-utility (Table 2)")
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    return save_figure(fig, path, dpi=130)


def leakage_horizon_figure(audit: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """Learned auditor macro-AUC (measured, seed-averaged) against prefix length t, per track."""
    plt = pyplot()
    tracks = list(dict.fromkeys(audit["track"]))
    methods = list(dict.fromkeys(audit["method"]))
    col = method_colors(methods)
    fig, axes = plt.subplots(1, len(tracks), figsize=(5.5 * len(tracks), 4), squeeze=False, sharey=True)
    ycol = "auc_measured" if "auc_measured" in audit.columns else "auc"
    for ax, track in zip(axes[0], tracks):
        g = audit[audit["track"] == track]
        for (model, method), gm in g.groupby(["response_model", "method"], sort=False):
            gm = gm.sort_values("horizon")
            ax.plot(gm["horizon"], gm[ycol], marker=MARKERS.get(method, "o"), color=col[method],
                    label=method if g["response_model"].nunique() == 1 else f"{model}: {method}")
        ax.axhline(0.5, color="grey", lw=0.8, ls="--")
        ax.set_title(track)
        ax.set_xlabel("prefix length t (turns)")
        ax.set_ylabel("auditor macro-AUC")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.suptitle(title or "Leakage vs horizon")
    fig.tight_layout()
    return save_figure(fig, path, dpi=130)


def ceiling_figure(oracle: pd.DataFrame, audit_at_T: pd.DataFrame, path: str | Path | None = None, title: str = ""):
    """Learned single-transcript AUC (independent draws, 95% CI) next to the exact ceiling, per method."""
    plt = pyplot()
    m = oracle.merge(audit_at_T, on=["track", "response_model", "method"], how="left")
    m = m[m["kind"] == "views"] if (m["kind"] == "views").any() else m
    labels = [f"{r.method}\n({r.track})" for r in m.itertuples()]
    x = np.arange(len(m))
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(m)), 3.8))
    ax.bar(x - 0.18, m["ceiling_auc"], width=0.36, color="#bbb", label="exact ceiling (any auditor)")
    y = m["auc_indep"].to_numpy()
    err = np.vstack([y - m.get("auc_indep_lo", pd.Series(y)).to_numpy(),
                     m.get("auc_indep_hi", pd.Series(y)).to_numpy() - y])
    ax.errorbar(x + 0.18, y, yerr=np.clip(err, 0, None), fmt="o", color="C0", capsize=3, label="learned auditor")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("AUC (one transcript per pair)")
    lo = min(0.45, float(np.nanmin(y)) - 0.02) if len(y) else 0.45
    ax.set_ylim(lo, max(0.6, float(np.nanmax(m["ceiling_auc"])) + 0.03))
    ax.legend(fontsize=8)
    ax.set_title(title or "Learned auditor vs exact optimal auditor")
    fig.tight_layout()
    return save_figure(fig, path, dpi=130)


def auc_forest_figure(metrics, ceilings: pd.DataFrame | None = None, methods: Sequence[str] | None = None,
                      path: str | Path | None = None, title: str = ""):
    """Learned AUC per method with its paired-bootstrap 95% interval (seaborn point plot over the
    replicates of :func:`dpmv_lib.experiments.verdicts.paired_bootstrap`: point = replicate median,
    bar = 2.5-97.5 percentiles), one panel per (track, response model), on an axis centred on
    chance (0.5). ``ceilings`` (rows with track, response_model, method, ``ceiling_auc_seeds``) adds
    the exact ceiling for the same seed-averaged statistic as a black bar; a learned interval wholly
    to its right is an ERROR (see :mod:`.verdicts`)."""
    import seaborn as sns

    plt = pyplot()
    rows = []
    for (track, model, method, metric), reps in metrics.boot.items():
        if metric == "auc" and (methods is None or method in methods):
            rows.append(pd.DataFrame({"panel": f"{track} / {model}", "method": method, "AUC": reps}))
    if not rows:
        raise ValueError("no AUC replicates to plot")
    df = pd.concat(rows, ignore_index=True)
    order = list(dict.fromkeys(df["method"]))
    panels = list(dict.fromkeys(df["panel"]))
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.42 * len(order) + 1.6), squeeze=False,
                                 sharey=True)
        dev = max(0.1, float(np.nanmax(np.abs(df["AUC"] - 0.5))) + 0.04)
        if ceilings is not None and "ceiling_auc_seeds" in ceilings.columns:
            dev = max(dev, float(np.nanmax(np.abs(ceilings["ceiling_auc_seeds"] - 0.5))) + 0.04)
        for ax, panel in zip(axes[0], panels):
            sub = df[df["panel"] == panel]
            sns.pointplot(data=sub, x="AUC", y="method", order=order, estimator="median", errorbar=("pi", 95),
                          linestyle="none", capsize=0.3, color="C0", ax=ax, label="learned (95% bootstrap interval)")
            if ceilings is not None:
                track, model = panel.split(" / ", 1)
                c = ceilings[(ceilings["track"] == track) & (ceilings["response_model"] == model)
                             & ceilings["method"].isin(order)]
                ys = [order.index(m) for m in c["method"]]
                ax.scatter(c["ceiling_auc_seeds"], ys, marker="|", s=260, color="k", zorder=5,
                           label="exact ceiling (any auditor)")
            ax.axvline(0.5, color="grey", lw=1, ls="--")
            ax.set_xlim(0.5 - min(dev, 0.5), 0.5 + min(dev, 0.5))
            ax.set(title=panel, xlabel="AUC (0.5 = chance)", ylabel="")
        axes[0][0].legend(fontsize=7, loc="best")
        fig.suptitle(title or "Learned AUC (95% paired-bootstrap interval) and exact ceiling", fontsize=10)
        fig.tight_layout()
    return save_figure(fig, path, dpi=130)
