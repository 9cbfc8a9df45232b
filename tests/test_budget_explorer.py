"""The fast budget explorer (dpmv_lib.experiments.budget_explorer), without a browser: precomputed
arrays equal the grid, the figure is updated in place (same artists, same layout), one frame per
change and none for an unchanged setting, sliders debounced, the summary shown once, and the
paper's view (learned AUC, paper point, exact ceilings per attribute) built from real inputs."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.experiments import budget_explorer as E
from dpmv_lib.experiments import sensitivity as S
from dpmv_lib.core.errors import ParameterError

from test_rq2 import mini_benchmark
from test_sensitivity import _t3_inputs, synthetic_grid


def test_precompute_matches_grid_lookup():
    g = synthetic_grid()
    d = E.precompute(g)
    assert d.b_as == (1.0, 2.0, 4.0) and d.ks == (2, 3) and list(d.Ts) == [1, 2, 3, 4, 5] and d.modes == S.MODES
    for mode, b, k, T in [("on", 4, 2, 3), ("pre", 1, 3, 5), ("on, P&F", 2, 2, 1)]:
        row = S.grid_lookup(g, mode=mode, b_a=b, k=k, T=T)
        p = d.point(mode, b, k, T)
        assert {m: p[m] for m in E.CURVE_METRICS} == pytest.approx({m: float(row[m]) for m in E.CURVE_METRICS})
        assert d.heat[mode][T - 1, d.b_as.index(float(b)), d.ks.index(k)] == pytest.approx(row["ceiling_auc"])
    for bad in (dict(mode="later"), dict(b_a=16), dict(k=9), dict(T=6)):
        with pytest.raises(ParameterError):
            d.key(**{"mode": "on", "b_a": 2, "k": 3, "T": 2, **bad})
    with pytest.raises(ParameterError, match="contiguous"):
        E.precompute(g[g["T"] != 3])


def test_setting_text_is_the_grid_point():
    g = synthetic_grid()
    st = E.setting_frame(g, mode="on", b_a=4, k=2, T=3)
    assert E.setting_text(E.precompute(g), "on", 4, 2, 3) == st.text   # same summary as the redraw widget
    assert "planned" in E.setting_text(E.precompute(g), "pre", 4, 2, 3)


def test_figure_updates_artists_in_place():
    d = E.precompute(synthetic_grid())
    f = E.ExplorerFigure(d, dpi=40)
    f.update("on", 2, 3, 2)
    artists = [id(a) for ax in f.fig.axes for a in ax.get_children()]
    png1 = f.png()
    pos = [ax.get_position().bounds for ax in f.fig.axes]
    f.update("pre", 4, 2, 5)
    assert [id(a) for ax in f.fig.axes for a in ax.get_children()] == artists   # no artist created
    assert np.allclose(f.auc.get_ydata(), d.curves[("pre", 4.0, 2)]["ceiling_auc"])
    assert list(f.vlines[0].get_xdata()) == [5, 5]
    assert np.allclose(f.im.get_array(), d.heat["pre"][4], equal_nan=True)
    assert f.cells[2][0].get_text() == f"{d.heat['pre'][4, 2, 0]:.3f}"
    png2 = f.png()
    assert [ax.get_position().bounds for ax in f.fig.axes] == pos                # no layout change
    assert png1[:8] == b"\x89PNG\r\n\x1a\n" and png1 != png2 and f.draws == 2
    from PIL import Image
    import io
    assert Image.open(io.BytesIO(png1)).size == Image.open(io.BytesIO(png2)).size  # fixed frame size
    # the blitted frame (cached background + the setting's artists) is the full drawing of the state
    blit = np.asarray(Image.open(io.BytesIO(png2)).convert("RGBA")).astype(int)
    for a in f.dynamic:
        a.set_animated(False)
    f.fig.canvas.draw()
    full = np.asarray(f.fig.canvas.buffer_rgba()).astype(int)
    assert blit.shape == full.shape and (np.abs(blit - full).sum(-1) > 0).mean() < 0.005
    with pytest.raises(ParameterError):
        E.ExplorerFigure(d, dpi=20).png()                    # nothing to draw before update()


def test_widget_one_frame_per_change_and_debounced():
    g = synthetic_grid()
    box = E.make_explorer(g, mode="on", b_a=2, k=3, T=2, dpi=30)
    c, fig = box.controls, box.figures[E.VIEWS[0]]
    sets = []
    box.image.observe(lambda ch: sets.append(ch["new"]), names="value")
    assert fig.draws == 1 and "B_a=2" in box.label.value
    assert all(not c[n].continuous_update for n in ("b_a", "k", "T"))  # drags send the value on release
    c["b_a"].value = 1.0
    assert len(sets) == 1 and fig.draws == 2 and "B_a=1" in box.label.value
    c["T"].value = 4
    c["mode"].value = "pre"
    assert len(sets) == 3 and fig.draws == 4 and "mode=pre" in box.label.value and "T=4" in box.label.value
    box.update()                                  # unchanged setting: no new frame
    assert len(sets) == 3 and fig.draws == 4
    c["b_a"].value = 2.0
    c["b_a"].value = 1.0                          # back to a cached frame: sent, not redrawn
    assert len(sets) == 5 and fig.draws == 5 and sets[-1] == sets[-3]
    assert box.label.value.count("exact AUC ceiling") == 1   # the summary is shown once
    lay = box.image.layout
    assert lay.width.endswith("px") and lay.height.endswith("px")   # fixed size: no layout jump
    assert "view" not in [w.description for w in box.children if hasattr(w, "description")]
    with pytest.raises(ParameterError):
        E.make_explorer(g, b_a=16)


def _paper_inputs():
    st, priv, util = _t3_inputs([0.50, 0.49, 0.51, 0.60, 0.51, 0.52], [0.50, 0.51, 0.52, 0.53, 0.48, 0.55],
                                [0.11, 0.12, 0.11, 0.10, 0.09, 0.13])
    priv = priv.assign(auc_lo=priv["auc"] - 0.02, auc_hi=priv["auc"] + 0.02, **{"auc[diabetes]": priv["auc"] - 0.01,
                                                                                 "auc[debt]": priv["auc"] + 0.01})
    grid = synthetic_grid(b_as=(1.0, 2.0, 4.0, 8.0), ks=(2, 3, 4), horizon=16)
    grid["ceiling_auc_seeds"] = grid["ceiling_auc"] + 0.01
    paper = pd.DataFrame({"sweep": ["cap_magnitude"], "b_a": [8.0], "k": [3], "eps_tg": [2.667], "auc": [0.608],
                          "trec": [0.534], "unsup": [0.105]})
    t3 = S.table3(st, priv, util, horizon=16, paper=paper, grid=grid)
    return t3, priv, grid


def test_paper_view_table_and_figure():
    t3, priv, grid = _paper_inputs()
    ceil = pd.DataFrame([{"selector": "em", "b_a": 8.0, "k": 3, "attribute": a, "ceiling_auc": v,
                          "ceiling_auc_seeds": v + 0.1}
                         for a, v in (("diabetes", 0.6), ("debt", 0.7))])
    pv = E.paper_view_table(t3, priv, horizon=16, attr_ceilings=ceil)
    assert set(pv["attribute"]) == {E.MACRO, "diabetes", "debt"} and len(pv) == 6 * 3
    macro = pv[(pv["attribute"] == E.MACRO) & (pv["b_a"] == 8)].iloc[0]
    assert macro["learned_auc"] == pytest.approx(0.60) and macro["paper_auc"] == pytest.approx(0.608)
    assert macro["ceiling_auc"] == pytest.approx(S.grid_lookup(grid, mode="on", b_a=8, k=3, T=16)["ceiling_auc"])
    d8 = pv[(pv["attribute"] == "diabetes") & (pv["b_a"] == 8)].iloc[0]
    assert d8["learned_auc"] == pytest.approx(0.59) and d8["ceiling_auc_seeds"] == pytest.approx(0.7)
    assert math.isnan(pv[(pv["attribute"] == "debt") & (pv["b_a"] == 1)]["ceiling_auc"].iloc[0])  # not computed: NaN
    box = E.make_explorer(grid, paper=pv, mode="on", b_a=8, k=3, T=5, dpi=30)
    c, pf = box.controls, box.figures[E.VIEWS[1]]
    c["view"].value = E.VIEWS[1]
    assert pf.draws == 1 and "paper's view" in box.label.value
    heights = {lab: b.get_height() for lab, b in zip(("learned", "paper", "ceil_s", "ceil"), [
        pf.bars[f"0:{col}"][0] for col, _, _ in pf.BARS])}
    assert heights["learned"] == pytest.approx(0.10) and heights["paper"] == pytest.approx(0.108)  # from chance
    lo, hi = pf.ax[0].get_ylim()
    assert lo + hi == pytest.approx(1.0)                                  # the axis is centred on 0.5
    flagged = {t.get_text() for t in pf.flags[1]}
    assert flagged == {""}                                                # no learned AUC above its ceiling here
    pv_bad = pv.copy()
    pv_bad.loc[(pv_bad["attribute"] == "diabetes") & (pv_bad["b_a"] == 8), "learned_auc"] = 0.75
    bad = E.PaperFigure(pv_bad, horizon=16, dpi=30)
    bad.update("on", 8, 3)
    assert [t.get_text() for t in bad.flags[1]][bad.attrs.index("diabetes")] == "learned > ceiling"
    assert "learned AUC 0.600, paper 0.608" in pf.title.get_text() and not pf.note.get_visible()
    assert pf.values["0:learned_auc"][0].get_text() == "0.600"
    assert pf.values["1:paper_auc"][0].get_text() == "n/a"      # the paper has no per-attribute AUC
    c["T"].value = 7                              # T does not change the paper's view: no new frame
    assert pf.draws == 1
    c["mode"].value = "pre"                       # no learned auditor for the preallocated rule
    assert pf.draws == 2 and pf.note.get_visible() and "no learned auditor" in pf.note.get_text()
    with pytest.raises(ParameterError, match="lacks columns"):
        E.paper_view_table(t3.drop(columns=["ceiling_auc"]), priv, horizon=16)


def test_attribute_ceilings_average_to_the_grid_ceiling():
    bench = mini_benchmark(8)
    links = {"food.low_sugar": ["diabetes"], "finance.strict_budget": ["debt"]}
    spec = S.GridSpec(b_as=(2,), ks=(3,), horizon=8, plan_horizon=8, modes=("on",))
    g = S.compute_grid(bench, bench.pairs, spec, view_links=links, n_seeds=2)
    t3 = pd.DataFrame({"selector": ["em"], "b_a": [2.0], "k": [3]})
    ac = E.attribute_ceilings(bench, bench.pairs, t3, horizon=6, view_links=links, n_seeds=2)
    assert sorted(ac["attribute"]) == sorted({p.attribute for p in bench.pairs})
    row = S.grid_lookup(g, mode="on", b_a=2, k=3, T=6)
    assert ac["ceiling_auc"].mean() == pytest.approx(row["ceiling_auc"], abs=1e-12)
    assert ac["ceiling_auc_seeds"].mean() == pytest.approx(row["ceiling_auc_seeds"], abs=1e-12)
    with pytest.raises(ParameterError):
        E.attribute_ceilings(bench, [], t3, horizon=6, view_links=links)


def _summary_inputs():
    """Table 3 with both selectors, the paper's main-setting row and an exact grid (synthetic)."""
    grid = synthetic_grid(b_as=(1.0, 2.0, 4.0, 8.0), ks=(2, 3, 4), horizon=16)
    grid["ceiling_auc_seeds"] = grid["ceiling_auc"] + 0.01
    paper = pd.DataFrame({"sweep": ["granularity"], "b_a": [2.0], "k": [3], "eps_tg": [0.667], "auc": [0.49],
                          "trec": [0.506], "unsup": [0.119]})
    st = S.table3_settings(selectors=("em", "pf"))
    meth = list(dict.fromkeys(st["method"]))
    priv = pd.DataFrame({"method": meth, "horizon": 16, "auc": [0.5 + 0.01 * i for i in range(len(meth))]})
    util = pd.DataFrame({"method": meth, "U": 0.88, "tRec": 0.5, "Unsup": 0.1})
    t3 = S.table3(st, priv, util, horizon=16, paper=paper, grid=grid)
    return t3, grid


def test_selector_grid_and_rows_at_one_setting():
    t3, grid = _summary_inputs()
    sg = E.selector_grid(grid, b_a=2, k=3, T=16)
    assert list(sg.columns) == list(E.SELECTOR_GRID_COLUMNS) and list(sg["mode"]) == list(S.MODES)
    for r in sg.itertuples(index=False):
        assert r.ceiling_auc == S.grid_lookup(grid, mode=r.mode, b_a=2, k=3, T=16)["ceiling_auc"]
    rows = E.selector_rows(t3, b_a=2, k=3)
    assert list(rows["selector"]) == ["em", "pf"] and (rows["b_a"] == 2.0).all() and (rows["k"] == 3).all()
    assert rows.index.tolist() == t3[(t3["b_a"] == 2.0) & (t3["k"] == 3)].drop_duplicates("selector").index.tolist()
    with pytest.raises(ParameterError):
        E.selector_grid(grid, b_a=16, k=3, T=16)


def test_summary_markdown_lists_verdicts_the_main_setting_the_grid_and_both_selectors():
    t3, grid = _summary_inputs()
    claims = pd.DataFrame({"verdict": ["HOLDS", "INCONCLUSIVE", "HOLDS"]})
    lines = E.summary_markdown(t3, claims, grid, b_a=2, k=3, T=16).splitlines()
    assert len(lines) == 5 and all(ln.startswith("- ") for ln in lines)
    assert lines[0] == "- Table 3 verdicts: 2 HOLDS, 1 INCONCLUSIVE (see above)"
    main = t3[(t3["sweep"] == "granularity") & (t3["b_a"] == 2) & (t3["k"] == 3) & (t3["selector"] == "em")].iloc[0]
    assert lines[1] == (f"- setting B_a=2, K=3: AUC {main['auc']:.3f} (paper 0.490), tRec 0.500 (paper 0.506), "
                        f"Unsup 0.100 (paper 0.119); exact ceiling {main['ceiling_auc']:.3f}")
    assert lines[2] == f"- grid: {len(grid)} cells; Theorem 1 holds on every cell: True"
    g = S.grid_lookup(grid, mode="on, P&F", b_a=2, k=3, T=16)
    assert lines[4].startswith(f"- selector pf (on, B_a=2, K=3, T=16): target-view rate M {g['target_rate_M']:.4f} / "
                               f"M' {g['target_rate_Mp']:.4f}, exact ceiling {g['ceiling_auc']:.3f}; tRec 0.500")
    bad = grid.assign(max_loss=grid["b_a"] + 1)
    assert "every cell: False" in E.summary_markdown(t3, claims, bad, b_a=2, k=3, T=16)
    undefined = E.summary_markdown(t3.assign(u=float("nan")), claims, grid, b_a=2, k=3, T=16)
    assert ", U undefined, AUC" in undefined and "nan" not in undefined


def test_setting_frame_selects_from_grid():
    g = synthetic_grid()
    st = E.setting_frame(g, mode="on", b_a=4, k=2, T=3)
    assert list(st.curve["T"]) == [1, 2, 3, 4, 5]
    assert st.point["ceiling_auc"] == pytest.approx(0.5 + 0.01 * 4 * 3 / 2)
    assert not ((st.others["b_a"] == 4) & (st.others["k"] == 2)).any()
    assert st.heat.shape == (3, 2) and st.heat.loc[4.0, 2] == pytest.approx(st.point["ceiling_auc"])
    assert "B_a=4" in st.text and "T=3" in st.text
    st2 = E.setting_frame(g, mode="pre", b_a=4, k=2, T=3)
    assert "planned" in st2.text


def test_render_frame_draws_four_panels(tmp_path):
    import matplotlib.pyplot as plt

    fig = E.render_frame(E.setting_frame(synthetic_grid(), mode="on", b_a=2, k=3, T=2))
    assert len(fig.axes) >= 4
    fig.savefig(tmp_path / "w.png")
    assert (tmp_path / "w.png").stat().st_size > 0
    plt.close(fig)


def test_redraw_widget_callback_updates_from_grid():
    g = synthetic_grid()
    box = E.make_redraw_widget(g, mode="on", b_a=2, k=3, T=2)
    label = box.children[2]
    assert "B_a=2" in label.value
    slider_b = box.children[0].children[0]
    slider_b.value = 1.0                               # what a user drag does: the observer redraws
    assert "B_a=1" in label.value
    st = box.update()
    assert st.b_a == 1.0 and st.k == 3
    with pytest.raises(ParameterError):
        E.make_redraw_widget(g, b_a=16)
