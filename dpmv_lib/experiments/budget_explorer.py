"""The budget-exploration widget of notebook 05, fast enough to feel instant.

Redrawing a fresh pyplot figure into an Output area on every change (:func:`make_redraw_widget`,
kept as the benchmark's baseline: clear + show, ~1.3 s, 2-3 intermediate images, the area collapses
in between) is too slow. :func:`make_explorer` instead:

* :func:`precompute` turns the exact grid (:func:`dpmv_lib.experiments.sensitivity.compute_grid`) once into
  per-setting arrays over T and per-mode (T, B_a, K) heat cubes, so a redraw does no pandas work;
* :class:`ExplorerFigure` builds ONE matplotlib figure (Agg canvas, no pyplot) with every artist
  created up front and updates them in place (``set_data``, ``set_text``) - fixed axes limits and
  colour scale, so nothing moves between frames; a frame blits the setting's artists over a
  background cached per mode (axes, ticks, legends' frames, the mode's settings in grey);
* :class:`PaperFigure` is the paper's view: the learned-auditor AUC (our Table 3 run), the paper's
  Table 3 point and the exact ceilings of the selected setting, and their per-attribute breakdown
  (:func:`paper_view_table`, :func:`attribute_ceilings`);
* :func:`selector_grid`, :func:`selector_rows` and :func:`summary_markdown` build notebook 05's
  permute-and-flip vs Eq. (7) tables at one setting and its closing summary;
* :func:`make_explorer` pushes one PNG per change into a fixed-size ``ipywidgets.Image`` (one
  frame, no layout jump); sliders send their value on release (``continuous_update=False``, the
  drag debounce), unchanged settings are not redrawn, and frames are kept in a small LRU cache.

The summary line of a setting is shown once (the HTML label), not repeated in the figure.
"""
from __future__ import annotations

import io
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from .sensitivity import MODES, check_grid, grid_lookup, grid_options, match_settings, mode_parts, setting_label

_T = TypeVar("_T")

CURVE_METRICS: tuple[str, ...] = ("ceiling_auc", "target_rate_M", "target_rate_Mp", "max_loss", "bound_max")
VIEWS: tuple[str, ...] = ("exact grid", "paper's view")
#: the mode of the grid that corresponds to each Table 3 selector (learned auditor: online rule only)
SELECTOR_MODE: dict[str, str] = {"em": "on", "pf": "on, P&F"}


# ---- precomputation ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ExplorerData:
    """The grid as arrays: ``curves[(mode, B_a, K)][metric]`` over ``Ts`` and ``heat[mode]`` of shape
    (len(Ts), len(b_as), len(ks)) holding the ceiling AUC (NaN where a cell is absent)."""

    modes: tuple[str, ...]
    b_as: tuple[float, ...]
    ks: tuple[int, ...]
    Ts: np.ndarray
    curves: Mapping[tuple[str, float, int], Mapping[str, np.ndarray]]
    heat: Mapping[str, np.ndarray]

    def key(self, mode: str, b_a: Any, k: Any, T: Any) -> tuple[str, float, int, int]:
        """The validated (mode, B_a, K, T); unknown values raise naming the valid ones."""
        if mode not in self.modes:
            raise ParameterError(f"mode {mode!r} not in the grid; valid: {list(self.modes)}")
        b = next((x for x in self.b_as if math.isclose(float(b_a), x)), None)
        if b is None:
            raise ParameterError(f"B_a = {b_a!r} not in the grid; valid: {list(self.b_as)}")
        if int(k) not in self.ks:
            raise ParameterError(f"K = {k!r} not in the grid; valid: {list(self.ks)}")
        if (mode, b, int(k)) not in self.curves:
            raise ParameterError(f"the grid has no cells for mode={mode}, B_a={b:g}, K={int(k)}")
        lo, hi = int(self.Ts[0]), int(self.Ts[-1])
        if not lo <= int(T) <= hi:
            raise ParameterError(f"T = {T!r} outside the grid's horizons {lo}..{hi}")
        return mode, b, int(k), int(T)

    def point(self, mode: str, b_a: Any, k: Any, T: Any) -> dict[str, float]:
        """The grid's metrics at (mode, B_a, K, T)."""
        mode, b, k, T = self.key(mode, b_a, k, T)
        i = int(np.searchsorted(self.Ts, T))
        return {m: float(v[i]) for m, v in self.curves[(mode, b, k)].items()}


def precompute(grid: pd.DataFrame) -> ExplorerData:
    """Everything a redraw needs, computed once from the grid (one pass, no per-frame pandas)."""
    check_grid(grid)
    missing = set(CURVE_METRICS) - set(grid.columns)
    if missing:
        raise ParameterError(f"the grid lacks columns {sorted(missing)}")
    Ts = np.array(sorted(int(t) for t in grid["T"].unique()))
    if not np.array_equal(Ts, np.arange(Ts[0], Ts[-1] + 1)):
        raise ParameterError(f"the grid's horizons are not contiguous: {Ts.tolist()}")
    modes = tuple(m for m in MODES if m in set(grid["mode"]))
    b_as = tuple(sorted(float(b) for b in grid["b_a"].unique()))
    ks = tuple(sorted(int(k) for k in grid["k"].unique()))
    curves: dict[tuple[str, float, int], dict[str, np.ndarray]] = {}
    heat = {m: np.full((len(Ts), len(b_as), len(ks)), np.nan) for m in modes}
    for (mode, b, k), g in grid.groupby(["mode", "b_a", "k"], sort=True):
        g = g.sort_values("T")
        if len(g) != len(Ts):
            raise ParameterError(f"mode={mode}, B_a={b:g}, K={k}: {len(g)} horizons, expected {len(Ts)}")
        key = (str(mode), float(b), int(k))
        curves[key] = {m: g[m].to_numpy(float) for m in CURVE_METRICS}
        heat[key[0]][:, b_as.index(key[1]), ks.index(key[2])] = curves[key]["ceiling_auc"]
    return ExplorerData(modes, b_as, ks, Ts, curves, heat)


def setting_text(data: ExplorerData, mode: str, b_a: Any, k: Any, T: Any) -> str:
    """The one-line summary of a setting (shown once, in the widget's label)."""
    mode, b, k, T = data.key(mode, b_a, k, T)
    p = data.point(mode, b, k, T)
    eps = "B_a/C_a (planned)" if mode_parts(mode)[0] == "pre" else f"{b / k:.3f}"
    return (f"mode={mode}  B_a={b:g}  K={k}  eps={eps}  T={T}: exact AUC ceiling {p['ceiling_auc']:.3f}, "
            f"max loss {p['max_loss']:.3f} (B_a={b:g}), target-view rate M {p['target_rate_M']:.3f} / "
            f"M' {p['target_rate_Mp']:.3f}, bound {p['bound_max']:.2f}")


# ---- the exact-grid figure, updated in place ---------------------------------------------------------
def _agg_figure(size: tuple[float, float], dpi: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.canvas.print_png(buf)
    return buf.getvalue()


def _span(vals: Sequence[np.ndarray], lo: float | None = None, pad: float = 0.05) -> tuple[float, float]:
    v = np.concatenate([np.asarray(x, float).ravel() for x in vals]) if vals else np.array([0.0, 1.0])
    v = v[np.isfinite(v)]
    a = float(v.min()) if len(v) else 0.0
    b = float(v.max()) if len(v) else 1.0
    a = a if lo is None else min(lo, a)
    d = (b - a) or 1.0
    return a - pad * d, b + pad * d


class ExplorerFigure:
    """One 2 x 2 figure for the exact grid: ceiling AUC vs T (grey: the mode's other settings),
    target-linked view rates vs T, realised loss and reconstructed bound vs T against B_a
    (Theorem 1), and the ceiling over (B_a, K) at T. :meth:`update` changes artists in place;
    :meth:`png` renders one frame (``draws`` counts them)."""

    def __init__(self, data: ExplorerData, *, size: tuple[float, float] = (11, 7), dpi: int = 72):
        from matplotlib import colormaps
        from matplotlib.patches import Rectangle

        self.data = data
        self.draws = 0
        fig = self.fig = _agg_figure(size, dpi)
        ax = self.ax = fig.subplots(2, 2)
        Ts = data.Ts
        n_lines = max(sum(1 for key in data.curves if key[0] == m) for m in data.modes)
        self.grey = [ax[0, 0].plot(Ts, np.full(len(Ts), np.nan), color="grey", lw=0.6, alpha=0.5)[0]
                     for _ in range(n_lines)]
        nan = np.full(len(Ts), np.nan)
        self.auc = ax[0, 0].plot(Ts, nan, color="#1f77b4", lw=2, label="selected setting")[0]
        self.rate_m = ax[0, 1].plot(Ts, nan, color="#2ca02c", label="M (supported)")[0]
        self.rate_mp = ax[0, 1].plot(Ts, nan, color="#9467bd", label="M' (unsupported)")[0]
        self.loss = ax[1, 0].plot(Ts, nan, color="#d62728", label="max realised loss")[0]
        self.bound = ax[1, 0].plot(Ts, nan, color="#ff7f0e", label="reconstructed bound (max)")[0]
        self.cap = ax[1, 0].axhline(np.nan, color="k", ls="--", lw=1, label="cap B_a")
        self.vlines = [a.axvline(Ts[0], color="k", ls=":") for a in (ax[0, 0], ax[0, 1], ax[1, 0])]
        ax[0, 0].axhline(0.5, color="grey", lw=0.8)
        allc = list(data.curves.values())
        xl = (Ts[0] - 0.5, Ts[-1] + 0.5)
        ax[0, 0].set(xlim=xl, ylim=_span([c["ceiling_auc"] for c in allc], lo=0.5), xlabel="horizon T", ylabel="AUC",
                     title="exact optimal-auditor AUC (grey: the mode's settings)")
        ax[0, 1].set(xlim=xl, ylim=_span([c[m] for c in allc for m in ("target_rate_M", "target_rate_Mp")], lo=0.0),
                     xlabel="horizon T", ylabel="expected share of turns", title="target-linked view release rate")
        ax[1, 0].set(xlim=xl, ylim=_span([c[m] for c in allc for m in ("max_loss", "bound_max")]
                                         + [np.array(data.b_as)], lo=0.0),
                     xlabel="horizon T", ylabel="privacy loss", title="Theorem 1: loss <= bound <= B_a")
        for a in (ax[0, 0], ax[0, 1], ax[1, 0]):
            a.legend(fontsize=8, loc="upper left")
        cube = np.stack(list(data.heat.values()))
        lo, hi = float(np.nanmin(cube)), float(np.nanmax(cube))
        nb, nk = len(data.b_as), len(data.ks)
        self.im = ax[1, 1].imshow(np.full((nb, nk), np.nan), aspect="auto", origin="lower",
                                  cmap=colormaps["viridis"].with_extremes(bad="white"),  # opaque: covers the background
                                  vmin=lo, vmax=hi if hi > lo else lo + 1e-9)
        ax[1, 1].set_xticks(range(nk), [str(x) for x in data.ks])
        ax[1, 1].set_yticks(range(nb), [f"{x:g}" for x in data.b_as])
        self.cells = [[ax[1, 1].text(j, i, "", ha="center", va="center", fontsize=8, color="w") for j in range(nk)]
                      for i in range(nb)]
        self.sel = ax[1, 1].add_patch(Rectangle((-0.5, -0.5), 1, 1, fill=False, ec="red", lw=2))
        fig.colorbar(self.im, ax=ax[1, 1], fraction=0.046)
        ax[1, 1].set(xlabel="K", ylabel="B_a")
        self.heat_title = ax[1, 1].set_title(" ")
        fig.tight_layout()  # once: the layout never changes between frames
        # blitting: what changes with the setting is drawn over a cached background per mode
        self.dynamic = sorted([self.im, *(t for row in self.cells for t in row), self.sel, self.auc, self.rate_m,
                               self.rate_mp, self.loss, self.bound, self.cap, *self.vlines, self.heat_title,
                               *(a.get_legend() for a in (ax[0, 0], ax[0, 1], ax[1, 0]))],  # legends stay on top
                              key=lambda a: a.get_zorder())
        for a in self.dynamic:
            a.set_animated(True)
        self._backgrounds: dict[str, Any] = {}
        self._mode: str | None = None

    def update(self, mode: str, b_a: Any, k: Any, T: Any) -> None:
        """Point every artist at the setting (in place; no new artists, no layout pass)."""
        d = self.data
        mode, b, k, T = d.key(mode, b_a, k, T)
        c = d.curves[(mode, b, k)]
        self._mode = mode
        self.auc.set_ydata(c["ceiling_auc"])
        self.rate_m.set_ydata(c["target_rate_M"])
        self.rate_mp.set_ydata(c["target_rate_Mp"])
        self.loss.set_ydata(c["max_loss"])
        self.bound.set_ydata(c["bound_max"])
        self.cap.set_ydata([b, b])
        for v in self.vlines:
            v.set_xdata([T, T])
        h = d.heat[mode][int(np.searchsorted(d.Ts, T))]
        self.im.set_data(h)
        for i, row in enumerate(self.cells):
            for j, t in enumerate(row):
                t.set_text("" if math.isnan(h[i, j]) else f"{h[i, j]:.3f}")
        self.sel.set_xy((d.ks.index(k) - 0.5, d.b_as.index(b) - 0.5))
        self.heat_title.set_text(f"AUC ceiling at T={T} ({mode})")

    def _background(self, mode: str) -> Any:
        """The figure without the setting's artists, with every setting of ``mode`` in grey (drawn
        once per mode and cached)."""
        if mode not in self._backgrounds:
            curves = [v["ceiling_auc"] for key, v in self.data.curves.items() if key[0] == mode]
            for i, line in enumerate(self.grey):
                line.set_visible(i < len(curves))
                if i < len(curves):
                    line.set_ydata(curves[i])
            self.fig.canvas.draw()
            self._backgrounds[mode] = self.fig.canvas.copy_from_bbox(self.fig.bbox)
        return self._backgrounds[mode]

    def warm(self) -> None:
        """Draw every mode's background now (at widget creation), not at the mode's first visit."""
        for m in self.data.modes:
            self._background(m)

    def png(self) -> bytes:
        """Render the current state to PNG bytes (one frame): restore the mode's background, draw
        the setting's artists over it, encode."""
        if self._mode is None:
            raise ParameterError("ExplorerFigure.png() before update(): no setting to draw")
        from PIL import Image

        canvas = self.fig.canvas
        canvas.restore_region(self._background(self._mode))
        for a in self.dynamic:
            a.axes.draw_artist(a)
        w, h = canvas.get_width_height()
        buf = io.BytesIO()
        Image.frombuffer("RGBA", (w, h), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(buf, "PNG", compress_level=1)
        self.draws += 1
        return buf.getvalue()


# ---- the paper's view -----------------------------------------------------------------------------------
MACRO = "macro (all attributes)"


def paper_view_table(t3: pd.DataFrame, audit_summary: pd.DataFrame, *, horizon: int,
                     attr_ceilings: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table of the paper's view: per Table 3 setting (selector, B_a, K) and attribute (plus the
    macro row): our learned-auditor AUC (seed-averaged embedding auditor; CI on the macro row), the
    paper's Table 3 AUC (macro, selector em only) and the exact ceilings (macro from the grid via
    ``t3``; per attribute from ``attr_ceilings`` of :func:`attribute_ceilings`, else NaN)."""
    need = {"selector", "b_a", "k", "auc", "auc_lo", "auc_hi", "ceiling_auc", "ceiling_auc_seeds"}
    if missing := need - set(t3.columns):
        raise ParameterError(f"Table 3 lacks columns {sorted(missing)} (build it with grid=...)")
    aud = audit_summary[audit_summary["horizon"] == horizon] if "horizon" in audit_summary.columns else audit_summary
    aud = aud.drop_duplicates("method").set_index("method")
    attrs = sorted(c[4:-1] for c in aud.columns if c.startswith("auc[") and c.endswith("]"))
    ceil = None
    if attr_ceilings is not None:
        ceil = attr_ceilings.set_index(["selector", "b_a", "k", "attribute"])
    rows = []
    for r in t3.drop_duplicates(["selector", "b_a", "k"]).itertuples(index=False):
        base = {"selector": r.selector, "b_a": float(r.b_a), "k": int(r.k), "mode": SELECTOR_MODE[r.selector]}
        rows.append({**base, "attribute": MACRO, "learned_auc": r.auc, "auc_lo": r.auc_lo, "auc_hi": r.auc_hi,
                     "paper_auc": getattr(r, "paper_auc", math.nan) if r.selector == "em" else math.nan,
                     "ceiling_auc": r.ceiling_auc, "ceiling_auc_seeds": r.ceiling_auc_seeds})
        method = setting_label(r.b_a, r.k, r.selector)
        for a in attrs:
            learned = float(aud.at[method, f"auc[{a}]"]) if method in aud.index else math.nan
            key = (r.selector, float(r.b_a), int(r.k), a)
            c1 = float(ceil.at[key, "ceiling_auc"]) if ceil is not None and key in ceil.index else math.nan
            cs = float(ceil.at[key, "ceiling_auc_seeds"]) if ceil is not None and key in ceil.index else math.nan
            rows.append({**base, "attribute": a, "learned_auc": learned, "auc_lo": math.nan, "auc_hi": math.nan,
                         "paper_auc": math.nan, "ceiling_auc": c1, "ceiling_auc_seeds": cs})
    return pd.DataFrame(rows)


def attribute_ceilings(bench: Any, pairs: Sequence[Any], t3: pd.DataFrame, *, horizon: int,
                       view_links: Mapping[str, Sequence[str]], n_seeds: int = 1, max_atoms: int = 4096
                       ) -> pd.DataFrame:
    """Per Table 3 setting and attribute: the exact optimal-auditor AUC pooled over ``pairs`` of that
    attribute at ``horizon`` for one transcript (``ceiling_auc``) and for ``n_seeds`` transcripts
    observed together (``ceiling_auc_seeds``) - the per-attribute terms whose mean is the grid's
    macro ceiling (:func:`dpmv_lib.experiments.sensitivity.compute_grid`, same code path)."""
    from ..evaluate.llr import mixture
    from .rq2_support import MemoScorer
    from ..core.scorer import LexiconScorer
    from .sensitivity import pair_grid_rows

    if not pairs:
        raise ParameterError("attribute_ceilings needs at least one pair")
    scorer = MemoScorer(LexiconScorer())
    rows = []
    for r in t3.drop_duplicates(["selector", "b_a", "k"]).itertuples(index=False):
        by_attr: dict[str, list] = {}
        for pair in pairs:
            _, d = pair_grid_rows(bench.policy(pair), pair, SELECTOR_MODE[r.selector], float(r.b_a), int(r.k),
                                  horizon=horizon, plan_horizon=horizon, view_links=view_links, scorer=scorer,
                                  max_atoms=max_atoms)
            by_attr.setdefault(pair.attribute, []).append(d[horizon])
        for a, ds in sorted(by_attr.items()):
            one = mixture(ds).auc()
            seeds = mixture([x.power(n_seeds, max_atoms=max_atoms) for x in ds]).auc() if n_seeds > 1 else one
            rows.append({"selector": r.selector, "b_a": float(r.b_a), "k": int(r.k), "attribute": a,
                         "ceiling_auc": float(one), "ceiling_auc_seeds": float(seeds), "n_pairs": len(ds)})
    return pd.DataFrame(rows)


# ---- notebook 05: permute-and-flip vs Eq. (7) at one setting, and the closing summary -------------------
SELECTOR_GRID_COLUMNS: tuple[str, ...] = ("mode", "ceiling_auc", "ceiling_auc_seeds", "max_loss", "target_rate_M",
                                          "target_rate_Mp", "bound_max", "admit_rate")


def selector_grid(grid: pd.DataFrame, *, b_a: Any, k: Any, T: int) -> pd.DataFrame:
    """The exact grid at one setting for both selectors and both budget rules (notebook 05, section 6):
    one row per mode of :data:`~dpmv_lib.experiments.sensitivity.MODES`, columns
    :data:`SELECTOR_GRID_COLUMNS` (:func:`~dpmv_lib.experiments.sensitivity.grid_lookup`; unknown values raise)."""
    return pd.DataFrame([grid_lookup(grid, mode=m, b_a=b_a, k=k, T=T) for m in MODES])[list(SELECTOR_GRID_COLUMNS)]


def selector_rows(t3: pd.DataFrame, *, b_a: Any, k: Any) -> pd.DataFrame:
    """The Table 3 rows (:func:`~dpmv_lib.experiments.sensitivity.table3`) of the setting (``b_a``, ``k``),
    one per selector (em: Eq. (7); pf: permute-and-flip), in table order."""
    return t3[(t3["b_a"] == float(b_a)) & (t3["k"] == int(k))].drop_duplicates("selector")


def summary_markdown(t3: pd.DataFrame, claims: pd.DataFrame, grid: pd.DataFrame, *, b_a: Any, k: Any,
                     T: int) -> str:
    """Notebook 05's closing summary as a Markdown list: the Table 3 verdict counts; the main setting
    (B_a = 2, K = 3, selector em; else Table 3's first row) beside the paper with its exact ceiling;
    Theorem 1 (max realised loss <= B_a) on every grid cell; per selector at (``b_a``, ``k``, ``T``)
    the grid's target-view rates and ceiling with the judged tRec, Unsup, U and auditor AUC.

    Parameters
    ----------
    t3 : DataFrame
        :func:`~dpmv_lib.experiments.sensitivity.table3` built with ``paper=`` and ``grid=``.
    claims : DataFrame
        :func:`~dpmv_lib.experiments.sensitivity.table3_claims`.
    grid : DataFrame
        The exact grid (:func:`~dpmv_lib.experiments.sensitivity.cached_grid`).
    b_a, k, T
        The setting of the selector lines (the notebook's widget defaults).

    Returns
    -------
    str
        One ``- `` line per finding, newline-separated.
    """
    from .rq2 import counts_text

    main = t3[(t3["sweep"] == "granularity") & (t3["b_a"] == 2) & (t3["k"] == 3) & (t3["selector"] == "em")]
    base = (main if len(main) else t3).iloc[0]
    lines = [f"- Table 3 verdicts: {counts_text(claims)} (see above)",
             f"- setting B_a={base['b_a']:g}, K={int(base['k'])}: "
             f"AUC {base['auc']:.3f} (paper {base['paper_auc']:.3f}), "
             f"tRec {base['trec']:.3f} (paper {base['paper_trec']:.3f}), "
             f"Unsup {base['unsup']:.3f} (paper {base['paper_unsup']:.3f}); exact ceiling {base['ceiling_auc']:.3f}",
             f"- grid: {len(grid)} cells; Theorem 1 holds on every cell: "
             f"{bool((grid['max_loss'] <= grid['b_a'] + 1e-9).all())}"]
    for _, r in selector_rows(t3, b_a=b_a, k=k).iterrows():
        g = grid_lookup(grid, mode=SELECTOR_MODE[r["selector"]], b_a=b_a, k=k, T=T)
        lines.append(f"- selector {r['selector']} (on, B_a={b_a:g}, K={k}, T={T}): target-view rate "
                     f"M {g['target_rate_M']:.4f} / M' {g['target_rate_Mp']:.4f}, "
                     f"exact ceiling {g['ceiling_auc']:.3f}; "
                     f"tRec {r['trec']:.3f}, Unsup {r['unsup']:.3f}, "
                     f"U {'undefined' if math.isnan(r['u']) else format(r['u'], '.3f')}, AUC {r['auc']:.3f}")
    return "\n".join(lines)


class PaperFigure:
    """The paper's view of one setting (left: learned AUC with CI, the paper's Table 3 AUC and the
    exact ceilings, macro over attributes; right: the same per attribute). Bars start at chance
    (0.5) on an axis centred on it; a learned AUC above its exact ceiling (all seeds observed),
    which no auditor can beat in expectation, is flagged in red over its group. Settings outside
    Table 3 (or without a learned auditor: preallocated modes) show a note instead. Updated in place."""

    BARS = (("learned_auc", "learned auditor (ours)", "#d62728"), ("paper_auc", "paper Table 3", "#7f7f7f"),
            ("ceiling_auc_seeds", "exact ceiling (all seeds)", "#1f77b4"),
            ("ceiling_auc", "exact ceiling (1 transcript)", "#aec7e8"))

    def __init__(self, table: pd.DataFrame, *, horizon: int, size: tuple[float, float] = (11, 7), dpi: int = 72):
        self.table, self.horizon, self.draws = table, int(horizon), 0
        self.attrs = [a for a in dict.fromkeys(table["attribute"]) if a != MACRO]
        fig = self.fig = _agg_figure(size, dpi)
        self.ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 2]})
        w = 0.8 / len(self.BARS)
        self.bars: dict[str, list] = {}
        self.values: dict[str, list] = {}  # the value above each bar ("n/a" where there is none)
        self.flags: dict[int, list] = {}   # "above ceiling" over a group whose learned AUC beats its ceiling
        for side, labels in ((0, [MACRO]), (1, self.attrs)):
            ax = self.ax[side]
            x = np.arange(len(labels))
            for i, (col, name, color) in enumerate(self.BARS):
                self.bars[f"{side}:{col}"] = list(ax.bar(x + (i - 1.5) * w, np.zeros(len(labels)), w, bottom=0.5,
                                                         color=color, label=name))
                self.values[f"{side}:{col}"] = [ax.text(xx + (i - 1.5) * w, 0.0, "", ha="center", va="bottom",
                                                        fontsize=6, rotation=90) for xx in x]
            ax.set_xticks(x, [lab.replace(" (all attributes)", "\n(all attributes)") for lab in labels],
                          rotation=0 if side == 0 else 30, ha="center" if side == 0 else "right", fontsize=8)
            ax.axhline(0.5, color="k", lw=0.8)
            vals = table[[c for c, _, _ in self.BARS] + ["auc_lo", "auc_hi"]].to_numpy(float)
            dev = float(np.nanmax(np.abs(vals - 0.5))) if np.isfinite(vals).any() else 0.5
            ax.set_ylim(0.5 - min(0.5, dev + 0.08), 0.5 + min(0.5, dev + 0.08))
            ax.set_ylabel("AUC (bars from chance, 0.5)")
            self.flags[side] = [ax.text(xx, 0.0, "", ha="center", va="bottom", fontsize=7, color="#d62728",
                                        fontweight="bold") for xx in x]
        self.err = self.ax[0].errorbar([-1.5 * w], [0.5], yerr=[[0], [0]], fmt="none", ecolor="k", capsize=4)
        self.ax[0].legend(fontsize=8, loc="upper left")
        self.title = fig.text(0.01, 0.985, " ", ha="left", va="top", fontsize=10)
        self.ax[1].set_title(f"per attribute at T={self.horizon} (the paper reports macro AUC only)", fontsize=9)
        self.note = fig.text(0.5, 0.5, "", ha="center", va="center", fontsize=11,
                             bbox={"fc": "lightyellow", "ec": "grey"})
        fig.tight_layout(rect=(0, 0, 1, 0.95))

    def rows(self, mode: str, b_a: Any, k: Any) -> pd.DataFrame:
        t = self.table
        return t[(t["mode"] == mode) & np.isclose(t["b_a"], float(b_a)) & (t["k"] == int(k))]

    def update(self, mode: str, b_a: Any, k: Any, T: Any = None) -> None:
        """Show the setting (T is fixed at Table 3's horizon; the learned auditor exists only there)."""
        sub = self.rows(mode, b_a, k).set_index("attribute")
        have = len(sub) > 0
        for side, labels in ((0, [MACRO]), (1, self.attrs)):
            for col, _, _ in self.BARS:
                for bar, txt, a in zip(self.bars[f"{side}:{col}"], self.values[f"{side}:{col}"], labels):
                    v = float(sub.at[a, col]) if have and a in sub.index else math.nan
                    bar.set_height(0.0 if math.isnan(v) else v - 0.5)
                    txt.set_y(0.51 if math.isnan(v) else (v + 0.01 if v >= 0.5 else v - 0.01))
                    txt.set_va("bottom" if math.isnan(v) or v >= 0.5 else "top")
                    txt.set_text(("n/a" if math.isnan(v) else f"{v:.3f}") if have else "")
            top = self.ax[side].get_ylim()[1]
            for flag, a in zip(self.flags[side], labels):
                above = (have and a in sub.index
                         and float(sub.at[a, "learned_auc"]) > float(sub.at[a, "ceiling_auc_seeds"]) + 1e-9)
                flag.set_y(top - 0.06 * (top - 0.5))
                flag.set_text("learned > ceiling" if above else "")
        if have and np.isfinite(sub.at[MACRO, "auc_lo"]):
            auc, lo, hi = (float(sub.at[MACRO, c]) for c in ("learned_auc", "auc_lo", "auc_hi"))
            seg = self.err.lines[2][0]
            x = seg.get_segments()[0][0][0]
            seg.set_segments([[[x, lo], [x, hi]]])
            for cap, y in zip(self.err.lines[1], (lo, hi)):
                cap.set_data([x], [y])
            txt = self.values["0:learned_auc"][0]   # the value beyond the CI, not across it
            txt.set_y(hi + 0.01 if auc >= 0.5 else lo - 0.01)
        for art in (*self.err.lines[1], *self.err.lines[2]):
            art.set_visible(bool(have))
        if have:
            r = sub.loc[MACRO]
            paper = "" if math.isnan(r["paper_auc"]) else f", paper {r['paper_auc']:.3f}"
            self.title.set_text(f"{mode} B_a={float(b_a):g} K={int(k)}, T={self.horizon}: learned AUC "
                                f"{r['learned_auc']:.3f}{paper}, ceiling {r['ceiling_auc_seeds']:.3f}")
            self.note.set_text("")
            self.note.set_visible(False)
        else:
            self.title.set_text(f"{mode} B_a={float(b_a):g} K={int(k)}")
            settings = sorted({(f"{b:g}", int(kk)) for b, kk in zip(self.table["b_a"], self.table["k"])})
            self.note.set_text("no learned auditor for this setting: Table 3 trains it for the online rule at "
                               f"T={self.horizon} on\n(B_a, K) in " + ", ".join(f"({b}, {kk})" for b, kk in settings)
                               + f" and modes {sorted(set(self.table['mode']))}")
            self.note.set_visible(True)

    def png(self) -> bytes:
        self.draws += 1
        return _png(self.fig)


# ---- the widget ---------------------------------------------------------------------------------------
class FrameCache:
    """PNG frames (or any rendered value) by key, least recently used dropped beyond ``size``."""

    def __init__(self, size: int = 128):
        self.size = int(size)
        self._d: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, render: Callable[[], _T]) -> _T:
        if key in self._d:
            self._d.move_to_end(key)
            return self._d[key]
        png = self._d[key] = render()
        if len(self._d) > self.size:
            self._d.popitem(last=False)
        return png


def make_explorer(grid: pd.DataFrame, *, paper: pd.DataFrame | None = None, paper_horizon: int = 16,
                  mode: str = "on", b_a: Any = 2, k: Any = 3, T: int = 16, dpi: int = 72,
                  size: tuple[float, float] = (11, 7)):
    """ipywidgets controls (B_a, K, T sliders; mode and view toggles) over one fixed-size PNG image.
    Each change renders at most one frame (none when the setting is unchanged) from precomputed
    arrays. ``paper`` (:func:`paper_view_table`) enables the paper's view. Returns the box with
    ``update`` (the callback), ``image``, ``label``, ``controls`` and ``figures`` attributes."""
    import ipywidgets as W

    data = precompute(grid)
    data.key(mode, b_a, k, T)  # validate the defaults
    figs: dict[str, Any] = {VIEWS[0]: ExplorerFigure(data, size=size, dpi=dpi)}
    figs[VIEWS[0]].warm()
    if paper is not None:
        figs[VIEWS[1]] = PaperFigure(paper, horizon=paper_horizon, size=size, dpi=dpi)
    w_px, h_px = int(size[0] * dpi), int(size[1] * dpi)
    s_b = W.SelectionSlider(options=[(f"{b:g}", b) for b in data.b_as], value=data.key(mode, b_a, k, T)[1],
                            description="B_a", continuous_update=False)
    s_k = W.SelectionSlider(options=list(data.ks), value=int(k), description="K", continuous_update=False)
    s_t = W.IntSlider(min=int(data.Ts[0]), max=int(data.Ts[-1]), value=int(T), description="horizon T",
                      continuous_update=False)
    s_m = W.ToggleButtons(options=list(data.modes), value=mode, description="mode")
    s_v = W.ToggleButtons(options=list(figs), value=VIEWS[0], description="view")
    label = W.HTML(layout=W.Layout(height="4.5em", width=f"{int(size[0] * dpi)}px", overflow="hidden"))
    image = W.Image(format="png", layout=W.Layout(width=f"{w_px}px", height=f"{h_px}px", object_fit="contain"))
    cache = FrameCache()
    shown: dict[str, Any] = {"key": None}

    def update(*_):
        view = s_v.value
        key = (view, s_m.value, s_b.value, int(s_k.value), int(s_t.value))
        if view != VIEWS[0]:  # the paper's view does not depend on T
            key = key[:4] + (paper_horizon,)
        text = setting_text(data, s_m.value, s_b.value, s_k.value, s_t.value)
        if view != VIEWS[0]:
            text += f" | paper's view (Table 3: T={paper_horizon})"
        html = f'<span style="font-family: monospace; white-space: normal; line-height: 1.4">{text}</span>'
        if label.value != html:
            label.value = html
        if key == shown["key"]:
            return key
        fig = figs[view]

        def render():
            fig.update(s_m.value, s_b.value, s_k.value, s_t.value)
            return fig.png()

        image.value = cache.get(key, render)
        shown["key"] = key
        return key

    for w, css in ((s_b, "b_a"), (s_k, "k"), (s_t, "T"), (s_m, "mode"), (s_v, "view")):
        w.observe(update, names="value")
        w.add_class(f"dpmv-{css}")  # stable hooks for the browser test and benchmark
    rows = [W.HBox([s_b, s_k]), W.HBox([s_t, s_m])] + ([s_v] if paper is not None else [])
    box = W.VBox([*rows, label, image])
    box.add_class("dpmv-explorer")
    box.update, box.image, box.label, box.figures = update, image, label, figs
    box.controls = {"b_a": s_b, "k": s_k, "T": s_t, "mode": s_m, "view": s_v}
    update()
    return box


# ---- notebook 05 steps: the paper's view, the explorer, the selectors and the summary ---------------
def attribute_auc_intervals(scores: pd.DataFrame, *, horizon: int, n_boot: int = 1000, seed: int = 0
                            ) -> pd.DataFrame:
    """Per method and attribute the learned (seed-averaged) AUC at ``horizon`` with a 95% bootstrap
    interval over that attribute's test pairs (the per-attribute terms of the auditor's macro AUC,
    :func:`dpmv_lib.evaluate.audit.summarise_scores`), and the number of test pairs behind it.

    Raises
    ------
    ParameterError
        ``scores`` lacks a column or has no row at ``horizon``.
    """
    from ..evaluate.audit import auc_rows, auc_score, require_columns

    require_columns(scores, {"method", "attribute", "horizon", "pair_id", "side", "seed", "score"}, "auditor scores")
    at = scores[scores["horizon"] == horizon]
    if at.empty:
        raise ParameterError(f"no auditor scores at horizon {horizon}")
    rng = np.random.default_rng(seed)
    rows = []
    for (method, attr), g in at.groupby(["method", "attribute"], sort=True):
        tab = g.pivot_table(index="pair_id", columns="side", values="score", aggfunc="mean")
        pos, neg = tab["M"].to_numpy(float), tab["M'"].to_numpy(float)
        ii = rng.integers(0, len(pos), size=(n_boot, len(pos)))
        boot = auc_rows(pos[ii], neg[ii])
        rows.append({"method": method, "attribute": attr, "learned_auc": auc_score(pos, neg),
                     "auc_lo": float(np.quantile(boot, 0.025)), "auc_hi": float(np.quantile(boot, 0.975)),
                     "n_test_pairs": int(len(pos))})
    return pd.DataFrame(rows)


#: fewer test pairs than this leave a bootstrap interval over pairs too coarse to judge (one pair: a point)
MIN_INTERVAL_PAIRS = 5


def above_ceiling(paper_view: pd.DataFrame, intervals: pd.DataFrame) -> pd.DataFrame:
    """The attribute rows of :func:`paper_view_table` whose learned AUC lies above the exact ceiling
    (all seeds observed), with the learned AUC's interval (:func:`attribute_auc_intervals`) and
    ``sampling_error``: the interval reaches down to the ceiling, or rests on fewer than
    :data:`MIN_INTERVAL_PAIRS` test pairs (then the learned AUC is one of a few coarse values such
    as 0, 0.5 or 1, and its bootstrap interval cannot rule the ceiling out)."""
    pv = paper_view[(paper_view["attribute"] != MACRO)
                    & (paper_view["learned_auc"] > paper_view["ceiling_auc_seeds"] + 1e-9)]
    iv = intervals.assign(selector=["pf" if "P&F" in m else "em" for m in intervals["method"]])
    rows = []
    for r in pv.itertuples(index=False):
        m = setting_label(r.b_a, int(r.k), r.selector)
        hit = iv[(iv["method"] == m) & (iv["attribute"] == r.attribute)]
        lo, hi, n = ((float(hit["auc_lo"].iloc[0]), float(hit["auc_hi"].iloc[0]), int(hit["n_test_pairs"].iloc[0]))
                     if len(hit) else (math.nan, math.nan, 0))
        rows.append({"selector": r.selector, "b_a": float(r.b_a), "k": int(r.k), "attribute": r.attribute,
                     "learned_auc": float(r.learned_auc), "auc_lo": lo, "auc_hi": hi, "n_test_pairs": n,
                     "ceiling_auc_seeds": float(r.ceiling_auc_seeds),
                     "sampling_error": bool(n and (n < MIN_INTERVAL_PAIRS
                                                   or lo <= float(r.ceiling_auc_seeds) + 1e-9))})
    return pd.DataFrame(rows, columns=["selector", "b_a", "k", "attribute", "learned_auc", "auc_lo", "auc_hi",
                                       "n_test_pairs", "ceiling_auc_seeds", "sampling_error"])


def above_ceiling_sentence(flags: pd.DataFrame, *, mode: str, b_a: Any, k: Any) -> str:
    """One sentence explaining the "learned > ceiling" flags of the paper's view at one setting
    (``mode``, ``b_a``, ``k``) with the numbers and intervals of :func:`above_ceiling`."""
    sel = next((s for s, m in SELECTOR_MODE.items() if m == mode), None)
    here = flags[(flags["selector"] == sel) & np.isclose(flags["b_a"], float(b_a)) & (flags["k"] == int(k))]
    rest = len(flags) - len(here)
    if here.empty:
        return (f"At {mode} B_a={float(b_a):g}, K={int(k)} no attribute's learned AUC lies above its exact ceiling"
                + (f" ({rest} attribute rows of other settings do: the written table 05_learned_above_ceiling)."
                   if rest else "."))
    parts = [f"{r.attribute}: learned {r.learned_auc:.3f} (95% CI {r.auc_lo:.3f} to {r.auc_hi:.3f}, "
             f"{r.n_test_pairs} test pairs) vs ceiling {r.ceiling_auc_seeds:.3f}" for r in here.itertuples()]
    ok = bool(here["sampling_error"].all())
    few = bool((here["n_test_pairs"] < MIN_INTERVAL_PAIRS).any())
    why = (f"each interval reaches down to its ceiling or rests on fewer than {MIN_INTERVAL_PAIRS} test pairs "
           f"(one pair makes the AUC 0, 0.5 or 1)" if few else "each interval reaches down to its ceiling")
    tail = (f" Here {why}: the flags are the sampling error of a learned auditor measured on few test pairs, "
            "against an exact ceiling that bounds its expected AUC, not an auditor beating the optimum." if ok else
            " An interval lies wholly above its ceiling: no auditor can do that in expectation, so the auditor or "
            "the oracle is in error (claim S5 tests this).")
    more = f" Other settings have {rest} such rows (05_learned_above_ceiling)." if rest else ""
    return (f"The paper's view flags \"learned > ceiling\" at {mode} B_a={float(b_a):g}, K={int(k)} for "
            + "; ".join(parts) + "." + tail + more)


def paper_view_step(run: Any, loaded: Any, grid: Any, table3_result: Any, measured: Any) -> Any:
    """The paper's view per Table 3 setting (``05_paper_view``): the learned auditor, the paper's
    Table 3 AUC and the exact ceilings, macro and per attribute; the attribute rows whose learned
    AUC lies above the ceiling with their intervals (``05_learned_above_ceiling``)."""
    from .result import Result

    cfg, params = run.cfg, run.params
    t3 = table3_result["t3"]
    with run.timer("attribute ceilings"):
        attr_ceil = attribute_ceilings(loaded["bench"], grid["pairs"], t3, horizon=cfg.T, view_links=grid["links"],
                                       n_seeds=len(run.profile.em_seeds))
    view = paper_view_table(t3, measured["audit"], horizon=cfg.T, attr_ceilings=attr_ceil)
    run.write_table("05_paper_view", view)
    intervals = attribute_auc_intervals(measured["scores"], horizon=cfg.T, n_boot=cfg.n_boot, seed=cfg.seed)
    flags = above_ceiling(view, intervals)
    run.write_table("05_learned_above_ceiling", flags)
    mode = params.get("mode", "on")
    cols = ["selector", "b_a", "k", "attribute", "learned_auc", "auc_lo", "auc_hi", "paper_auc", "ceiling_auc_seeds",
            "ceiling_auc"]
    macro = view.loc[(view["attribute"] == MACRO) & (view["selector"] == "em"), cols].reset_index(drop=True)
    here = view[(view["attribute"] != MACRO) & (view["mode"] == mode) & np.isclose(view["b_a"], float(cfg.B_a))
                & (view["k"] == int(cfg.K))]
    return Result("The paper's view: learned auditor, Table 3 and the exact ceiling",
                  tables={f"macro AUC at T={cfg.T}, Eq. (7) rows": macro,
                          f"per attribute at {mode} B_a={float(cfg.B_a):g}, K={cfg.K} (every setting: the written "
                          f"table)": here[cols].reset_index(drop=True)},
                  finding=(f"{len(flags)} attribute rows over every setting have a learned AUC above the exact "
                           f"ceiling ({int(flags['sampling_error'].sum())} of them within sampling error; "
                           f"05_learned_above_ceiling); the figure of the next section flags those of the run's "
                           f"setting, and its finding explains them."),
                  data={"table": view, "above_ceiling": flags})


def explorer_step(run: Any, grid: Any, paper_view: Any) -> Any:
    """The budget explorer: in an interactive session the widget (:func:`make_explorer`); otherwise
    both views drawn statically for the run's setting (``05_budget_explorer.png``,
    ``05_paper_view.png``) with the setting's line and the paper's view's flags explained."""
    from .result import Result

    cfg = run.cfg
    mode = run.params.get("mode", "on")
    if run.interactive:
        return make_explorer(grid["grid"], paper=paper_view["table"], paper_horizon=cfg.T, mode=mode, b_a=cfg.B_a,
                             k=cfg.K, T=cfg.T)
    data = precompute(grid["grid"])
    res = Result("Budget explorer (static: the run's setting)")
    for view, name in ((ExplorerFigure(data, dpi=130), "05_budget_explorer"),
                       (PaperFigure(paper_view["table"], horizon=cfg.T, dpi=130), "05_paper_view")):
        view.update(mode, cfg.B_a, cfg.K, cfg.T)
        path = run.figure_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(view.png())
        res.show_figure(name, path)
    res.notes.append(f"`{setting_text(data, mode, cfg.B_a, cfg.K, cfg.T)}`")
    res.finding = above_ceiling_sentence(paper_view["above_ceiling"], mode=mode, b_a=cfg.B_a, k=cfg.K)
    return res


def selector_step(run: Any, grid: Any, table3_result: Any) -> Any:
    """Permute-and-flip beside Eq. (7) at the run's setting: the exact grid for both selectors and
    both budget rules (``05_pf_vs_em``) and the measured Table 3 rows."""
    from .result import Result, sentence

    cfg = run.cfg
    pf_grid = selector_grid(grid["grid"], b_a=cfg.B_a, k=cfg.K, T=cfg.T)
    run.write_table("05_pf_vs_em", pf_grid)
    rows = selector_rows(table3_result["t3"], b_a=cfg.B_a, k=cfg.K)
    rows = rows[["selector", "b_a", "k", "eps_tg", "auc", "trec", "unsup", "u", "target_rate_M", "target_rate_Mp",
                 "ceiling_auc"]].reset_index(drop=True)
    g = pf_grid.set_index("mode")
    finding = sentence("At B_a = {b:g}, K = {k}, T = {T} (online rule) permute-and-flip releases a target-linked view "
                       "on M at rate {pm:.4f} against Eq. (7)'s {em:.4f} (on M' {pq:.4f} against {eq:.4f}), with exact "
                       "ceiling {pc:.3f} against {ec:.3f}.", b=float(cfg.B_a), k=cfg.K, T=cfg.T,
                       pm=float(g.at["on, P&F", "target_rate_M"]), em=float(g.at["on", "target_rate_M"]),
                       pq=float(g.at["on, P&F", "target_rate_Mp"]), eq=float(g.at["on", "target_rate_Mp"]),
                       pc=float(g.at["on, P&F", "ceiling_auc"]), ec=float(g.at["on", "ceiling_auc"]))
    return Result("Permute-and-flip beside Eq. (7)", tables={"exact grid": pf_grid, "Table 3 rows": rows},
                  finding=finding, precision=4)


def summary_step(run: Any, loaded: Any, table3_result: Any, grid: Any) -> Any:
    """Notebook 05's closing summary (:func:`summary_markdown`) and ``05_run.json``."""
    import json

    from .result import Result

    cfg = run.cfg
    md = summary_markdown(table3_result["t3"], table3_result["claims"], grid["grid"], b_a=cfg.B_a, k=cfg.K, T=cfg.T)
    (run.tables_dir / "05_run.json").write_text(json.dumps(
        {"profile": run.profile.name, "pairs": len(loaded["bench"]), "T": cfg.T, "grid_pairs": len(grid["pairs"]),
         "timings_s": run.timer.seconds, "total_s": run.timer.total}, indent=1))
    return Result("Summary", notes=[md], finding=f"The notebook took {run.timer.total:.0f} s on profile "
                                                 f"{run.profile.name}.")


# ---- the redraw widget: the baseline of benchmarks/bench_widget.py ----------------------------------
@dataclass(frozen=True)
class SettingFrame:
    """Everything one frame of :func:`make_redraw_widget` draws, selected from the grid (pure data)."""

    mode: str
    b_a: float
    k: int
    T: int
    point: pd.Series          # the grid row at (mode, B_a, K, T)
    curve: pd.DataFrame       # the selected setting vs T
    others: pd.DataFrame      # every other setting of the same mode vs T (context lines)
    heat: pd.DataFrame        # ceiling AUC at T for this mode: rows B_a, columns K
    text: str                 # a one-line summary of the point


def setting_frame(grid: pd.DataFrame, *, mode: str, b_a: Any, k: Any, T: int) -> SettingFrame:
    """The redraw widget's data step: select curves, heat map and point from the grid."""
    point = grid_lookup(grid, mode=mode, b_a=b_a, k=k, T=T)
    curve = match_settings(grid, mode, b_a, k).sort_values("T").reset_index(drop=True)
    same = grid[grid["mode"] == mode]
    others = same[~(np.isclose(same["b_a"].astype(float), float(b_a)) & (same["k"] == int(k)))]
    heat = same[same["T"] == int(T)].pivot_table(index="b_a", columns="k", values="ceiling_auc", aggfunc="first")
    eps = "B_a/C_a (planned)" if mode_parts(mode)[0] == "pre" else f"{float(b_a) / int(k):.3f}"
    text = (f"mode={mode}  B_a={float(b_a):g}  K={int(k)}  eps={eps}  T={int(T)}: exact AUC ceiling "
            f"{point['ceiling_auc']:.3f}, max loss {point['max_loss']:.3f} (B_a={float(b_a):g}), target-view rate "
            f"M {point['target_rate_M']:.3f} / M' {point['target_rate_Mp']:.3f}, bound {point['bound_max']:.2f}")
    return SettingFrame(mode, float(b_a), int(k), int(T), point, curve, others, heat, text)


def render_frame(state: SettingFrame, fig: Any = None):
    """Draw one frame (2 x 2): ceiling AUC vs T, target-view rates vs T, realised loss and
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


def make_redraw_widget(grid: pd.DataFrame, *, mode: str = "on", b_a: Any = 2, k: Any = 3, T: int = 16):
    """ipywidgets controls (B_a, K, T sliders; mode toggle) that redraw a fresh pyplot figure
    (:func:`render_frame`) into an Output area on every change: the baseline against which
    :func:`make_explorer`'s in-place updates are measured (benchmarks/bench_widget.py). Returns the
    widget box; its ``update`` attribute is the callback (called with the current values) so it
    can be driven without a browser."""
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
        st = setting_frame(grid, mode=s_m.value, b_a=s_b.value, k=s_k.value, T=s_t.value)
        label.value = f"<code>{st.text}</code>"
        with out:
            # no clear_output(wait=True): headless kernels (papermill/nbclient) can wait forever on it
            out.clear_output()
            fig = render_frame(st)
            plt.show()
            plt.close(fig)
        return st

    for w in (s_b, s_k, s_t, s_m):
        w.observe(update, names="value")
    box = W.VBox([W.HBox([s_b, s_k]), W.HBox([s_t, s_m]), label, out])
    box.update = update
    update()
    return box
