"""The first budget-grid widget (``before`` in benchmarks/bench_widget.py; notebook 05 uses
:mod:`~dpmv_lib.experiments.budget_explorer`), testable without a browser: the state to draw for a
setting (:func:`widget_state`, from :func:`~dpmv_lib.experiments.sensitivity.grid_lookup`), its
figure (:func:`render_state`) and the ipywidgets box (:func:`make_widget`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .sensitivity import match_settings, grid_lookup, grid_options, mode_parts


@dataclass(frozen=True)
class WidgetState:
    """Everything one widget frame draws, selected from the grid (pure data)."""

    mode: str
    b_a: float
    k: int
    T: int
    point: pd.Series          # the grid row at (mode, B_a, K, T)
    curve: pd.DataFrame       # the selected setting vs T
    others: pd.DataFrame      # every other setting of the same mode vs T (context lines)
    heat: pd.DataFrame        # ceiling AUC at T for this mode: rows B_a, columns K
    text: str                 # a one-line summary of the point


def widget_state(grid: pd.DataFrame, *, mode: str, b_a: Any, k: Any, T: int) -> WidgetState:
    """The widget callback's data step: select curves, heat map and point from the grid."""
    point = grid_lookup(grid, mode=mode, b_a=b_a, k=k, T=T)
    curve = match_settings(grid, mode, b_a, k).sort_values("T").reset_index(drop=True)
    same = grid[grid["mode"] == mode]
    others = same[~(np.isclose(same["b_a"].astype(float), float(b_a)) & (same["k"] == int(k)))]
    heat = same[same["T"] == int(T)].pivot_table(index="b_a", columns="k", values="ceiling_auc", aggfunc="first")
    eps = "B_a/C_a (planned)" if mode_parts(mode)[0] == "pre" else f"{float(b_a) / int(k):.3f}"
    text = (f"mode={mode}  B_a={float(b_a):g}  K={int(k)}  eps={eps}  T={int(T)}: exact AUC ceiling "
            f"{point['ceiling_auc']:.3f}, max loss {point['max_loss']:.3f} (B_a={float(b_a):g}), target-view rate "
            f"M {point['target_rate_M']:.3f} / M' {point['target_rate_Mp']:.3f}, bound {point['bound_max']:.2f}")
    return WidgetState(mode, float(b_a), int(k), int(T), point, curve, others, heat, text)


def render_state(state: WidgetState, fig: Any = None):
    """Draw one widget frame (2 x 2): ceiling AUC vs T, target-view rates vs T, realised loss and
    reconstructed bound vs T (B_a dashed), and the ceiling heat map over (B_a, K) at T."""
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(11, 7.5))
    fig.clear()
    ax = fig.subplots(2, 2)
    c, T = state.curve, state.T
    for _, g in state.others.groupby(["b_a", "k"]):
        g = g.sort_values("T")
        ax[0, 0].plot(g["T"], g["ceiling_auc"], color="grey", lw=0.6, alpha=0.5)
    ax[0, 0].plot(c["T"], c["ceiling_auc"], color="#1f77b4", lw=2, label="selected setting")
    ax[0, 0].axvline(T, color="k", ls=":")
    ax[0, 0].axhline(0.5, color="grey", lw=0.8)
    ax[0, 0].set(xlabel="horizon T", ylabel="AUC", title="exact optimal-auditor AUC (grey: other settings)")
    ax[0, 0].legend(fontsize=8)
    ax[0, 1].plot(c["T"], c["target_rate_M"], color="#2ca02c", label="M (supported)")
    ax[0, 1].plot(c["T"], c["target_rate_Mp"], color="#9467bd", label="M' (unsupported)")
    ax[0, 1].axvline(T, color="k", ls=":")
    ax[0, 1].set(xlabel="horizon T", ylabel="expected share of turns", title="target-linked view release rate")
    ax[0, 1].legend(fontsize=8)
    ax[1, 0].plot(c["T"], c["max_loss"], color="#d62728", label="max realised loss")
    ax[1, 0].plot(c["T"], c["bound_max"], color="#ff7f0e", label="reconstructed bound (max)")
    ax[1, 0].axhline(state.b_a, color="k", ls="--", lw=1, label=f"B_a = {state.b_a:g}")
    ax[1, 0].axvline(T, color="k", ls=":")
    ax[1, 0].set(xlabel="horizon T", ylabel="privacy loss", title="Theorem 1: loss <= bound <= B_a")
    ax[1, 0].legend(fontsize=8)
    h = state.heat
    if not h.empty:
        im = ax[1, 1].imshow(h.to_numpy(float), aspect="auto", cmap="viridis", origin="lower")
        ax[1, 1].set_xticks(range(h.shape[1]), [str(x) for x in h.columns])
        ax[1, 1].set_yticks(range(h.shape[0]), [f"{x:g}" for x in h.index])
        for i in range(h.shape[0]):
            for j in range(h.shape[1]):
                ax[1, 1].text(j, i, f"{h.iat[i, j]:.3f}", ha="center", va="center", fontsize=8, color="w")
        fig.colorbar(im, ax=ax[1, 1], fraction=0.046)
        ax[1, 1].set(xlabel="K", ylabel="B_a", title=f"AUC ceiling at T={T} ({state.mode})")
    fig.suptitle(state.text, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def make_widget(grid: pd.DataFrame, *, mode: str = "on", b_a: Any = 2, k: Any = 3, T: int = 16):
    """ipywidgets controls (B_a, K, T sliders; mode toggle) that redraw :func:`render_state` from the
    grid on every change (no recomputation). Returns the widget box; its ``update`` attribute is
    the callback (called with the current values) so it can be driven without a browser."""
    import ipywidgets as W
    import matplotlib.pyplot as plt

    opts = grid_options(grid)
    grid_lookup(grid, mode=mode, b_a=b_a, k=k, T=T)  # validate the defaults
    s_b = W.SelectionSlider(options=[(f"{b:g}", b) for b in opts["b_a"]], value=float(b_a), description="B_a")
    s_k = W.SelectionSlider(options=opts["k"], value=int(k), description="K")
    s_t = W.IntSlider(min=opts["T"][0], max=opts["T"][1], value=int(T), description="horizon T")
    s_m = W.ToggleButtons(options=opts["mode"], value=mode, description="mode")
    out = W.Output()
    label = W.HTML()

    def update(*_):
        st = widget_state(grid, mode=s_m.value, b_a=s_b.value, k=s_k.value, T=s_t.value)
        label.value = f"<code>{st.text}</code>"
        with out:
            # no clear_output(wait=True): headless kernels (papermill/nbclient) can wait forever on it
            out.clear_output()
            fig = render_state(st)
            plt.show()
            plt.close(fig)
        return st

    for w in (s_b, s_k, s_t, s_m):
        w.observe(update, names="value")
    box = W.VBox([W.HBox([s_b, s_k]), W.HBox([s_t, s_m]), label, out])
    box.update = update
    update()
    return box
