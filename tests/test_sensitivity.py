"""Budget sensitivity (dpmv_lib.experiments.sensitivity): Table 3 assembly and claims, the exact grid on a
small benchmark (Theorem 1 on every cell), and the widget logic (lookup, state, render,
ipywidgets callback) on a synthetic grid, without a browser."""
from __future__ import annotations

import itertools
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.experiments import sensitivity as S
from dpmv_lib.core.errors import ParameterError

from test_rq2 import mini_benchmark


def synthetic_grid(b_as=(1.0, 2.0, 4.0), ks=(2, 3), horizon=5) -> pd.DataFrame:
    rows = []
    for mode, b, k, T in itertools.product(S.MODES, b_as, ks, range(1, horizon + 1)):
        rows.append({"mode": mode, "b_a": b, "k": k, "T": T, "eps": b / k if mode == "on" else np.nan,
                     "ceiling_auc": 0.5 + 0.01 * b * T / k, "ceiling_tpr": 0.05 + 0.001 * T,
                     "max_loss": min(b, 0.1 * b * T), "target_rate_M": 0.3 / T, "target_rate_Mp": 0.1 / T,
                     "bound_max": min(b, 0.5 * T), "bound_mean": min(b, 0.4 * T), "admit_rate": 1.0})
    return pd.DataFrame(rows)


# ---- Table 3 ---------------------------------------------------------------------------------------
def test_table3_settings_exact_eps_and_labels():
    st = S.table3_settings()
    assert len(st) == 7 and list(st["sweep"]).count("cap_magnitude") == 4
    assert st.loc[(st["b_a"] == 2) & (st["k"] == 3), "eps_exact"].tolist() == ["2/3", "2/3"]
    assert st["eps_tg"].round(3).tolist() == [0.333, 0.667, 1.333, 2.667, 1.0, 0.667, 0.5]
    assert len(S.unique_settings(st)) == 6 and st["method"].nunique() == 6
    with pytest.raises(ParameterError):
        S.table3_settings(ks=(0,))
    with pytest.raises(ParameterError):
        S.table3_settings(b_as=(-1,))


def _t3_inputs(aucs, trecs, unsups):
    st = S.table3_settings()
    meth = list(dict.fromkeys(st["method"]))
    priv = pd.DataFrame({"method": meth, "horizon": 16, "auc": aucs, "tpr": 0.05})
    util = pd.DataFrame({"method": meth, "U": 0.88, "tRec": trecs, "Unsup": unsups})
    return st, priv, util


def _t3_metrics(priv, util, sd=0.004):
    from helpers.metrics import table_metrics

    u = util.set_index("method")
    rows = [(m, {"auc": a, **u.loc[m].to_dict()}) for m, a in zip(priv["method"], priv["auc"])]
    return table_metrics(rows, {"auc": "auc", "U": "U", "tRec": "tRec", "Unsup": "Unsup"}, sd=sd)


def test_table3_assembly_and_claims_hold():
    # unique settings in order: B=1,2,4,8 @K=3, then K=2, K=4 @B=2
    st, priv, util = _t3_inputs([0.50, 0.49, 0.51, 0.60, 0.51, 0.52], [0.50, 0.51, 0.52, 0.53, 0.48, 0.55],
                                [0.11, 0.12, 0.11, 0.10, 0.09, 0.15])
    paper = pd.DataFrame({"sweep": ["cap_magnitude", "granularity"], "b_a": [1.0, 2.0], "k": [3, 4],
                          "eps_tg": [0.333, 0.5], "auc": [0.541, 0.525], "trec": [0.508, 0.527],
                          "unsup": [0.115, 0.129]})
    t3 = S.table3(st, priv, util, paper=paper)
    assert len(t3) == 7
    assert t3.loc[0, "delta_auc"] == pytest.approx(0.50 - 0.541)
    assert math.isnan(t3.loc[1, "delta_auc"])       # no paper row for that setting here
    c = S.table3_claims(t3, _t3_metrics(priv, util)).set_index("id")["verdict"]
    assert c["S1"] == "HOLDS" and c["S2"] == "HOLDS"   # little change for B_a <= 4; B_a = 8 more distinguishable
    assert c["S3"] == "HOLDS" and c["S4"] == "HOLDS"


def test_table3_claims_can_fail():
    st, priv, util = _t3_inputs([0.50, 0.60, 0.51, 0.55, 0.51, 0.52], [0.50, 0.51, 0.52, 0.53, 0.56, 0.55],
                                [0.11, 0.12, 0.11, 0.10, 0.13, 0.12])
    c = S.table3_claims(S.table3(st, priv, util), _t3_metrics(priv, util)).set_index("id")["verdict"]
    assert (c[["S1", "S2", "S3", "S4"]] == "DOES NOT HOLD").all(), c
    # the reviewer's case: AUC at B_a = 8 within the noise of the B_a <= 4 settings gives no verdict
    st, priv, util = _t3_inputs([0.50, 0.49, 0.51, 0.513, 0.51, 0.52], [0.50] * 6, [0.1] * 6)
    c = S.table3_claims(S.table3(st, priv, util), _t3_metrics(priv, util, sd=0.03)).set_index("id")["verdict"]
    assert c["S2"] == "INCONCLUSIVE"


def test_table3_needs_every_setting():
    st, priv, util = _t3_inputs([0.5] * 6, [0.5] * 6, [0.1] * 6)
    with pytest.raises(ParameterError):
        S.table3(st, priv.iloc[:-1], util)


# ---- the exact grid ------------------------------------------------------------------------------------
def test_compute_grid_on_mini_benchmark_obeys_theorem1():
    bench = mini_benchmark(8)
    links = {"food.low_sugar": ["diabetes"], "finance.strict_budget": ["debt"]}
    spec = S.GridSpec(b_as=(1, 2), ks=(2, 3), horizon=8, plan_horizon=8)
    g = S.compute_grid(bench, bench.pairs, spec, view_links=links, n_seeds=3)
    assert len(g) == 2 * 2 * 2 * 8                     # modes x B_a x K x T
    assert (g["ceiling_auc_seeds"] >= g["ceiling_auc"] - 1e-9).all()   # three transcripts beat one
    S.check_grid(g)
    assert (g["max_loss"] <= g["b_a"] + 1e-9).all()    # Theorem 1 on every cell
    assert (g["bound_max"] <= g["b_a"] + 1e-12).all()
    assert g["ceiling_auc"].between(0.5 - 1e-9, 1.0).all()
    pre = g[g["mode"] == "pre"]
    a, b = (pre[pre["k"] == k].drop(columns="k").reset_index(drop=True) for k in (2, 3))
    pd.testing.assert_frame_equal(a, b)                # K does not enter the preallocated rule
    on = g[(g["mode"] == "on") & (g["b_a"] == 2) & (g["k"] == 2)].sort_values("T")
    assert on["bound_max"].is_monotonic_increasing and on["eps"].iloc[0] == 1.0
    assert (on["target_rate_M"] >= 0).all() and (on["target_rate_M"] <= 1).all()


def test_grid_spec_validation():
    with pytest.raises(ParameterError):
        S.GridSpec(modes=("sometimes",))
    with pytest.raises(ParameterError):
        S.GridSpec(ks=(0,))
    with pytest.raises(ParameterError):
        S.GridSpec(horizon=40)
    assert len(S.GridSpec(b_as=(1, 2), ks=(2, 3, 4)).settings()) == 2 * 3 + 2


def test_target_views():
    links = {"v1": ["a"], "v2": ["a", "b"], "v3": ["b"]}
    assert S.target_views(links, "a") == {"v1", "v2"}


# ---- widget logic ------------------------------------------------------------------------------------------
def test_grid_lookup_and_errors():
    g = synthetic_grid()
    row = S.grid_lookup(g, mode="on", b_a=2, k=3, T=4)
    assert row["ceiling_auc"] == pytest.approx(0.5 + 0.01 * 2 * 4 / 3)
    with pytest.raises(ParameterError, match="valid"):
        S.grid_lookup(g, mode="on", b_a=3, k=3, T=4)
    with pytest.raises(ParameterError, match="valid"):
        S.grid_lookup(g, mode="on", b_a=2, k=5, T=4)
    with pytest.raises(ParameterError):
        S.grid_lookup(g, mode="on", b_a=2, k=3, T=9)
    with pytest.raises(ParameterError):
        S.grid_lookup(g, mode="later", b_a=2, k=3, T=1)
    assert S.grid_options(g) == {"b_a": [1.0, 2.0, 4.0], "k": [2, 3], "T": (1, 5), "mode": list(S.MODES)}
    assert S.grid_options(g[g["mode"].isin(S.PAPER_MODES)])["mode"] == ["on", "pre"]


def test_grid_save_load_roundtrip(tmp_path):
    g = synthetic_grid()
    p = S.save_grid(g, tmp_path / "grid.csv")
    back = S.load_grid(p)
    assert len(back) == len(g) and np.allclose(back["ceiling_auc"], g["ceiling_auc"])
    with pytest.raises(ParameterError):
        S.check_grid(pd.concat([g, g.iloc[:1]]))
    with pytest.raises(ParameterError):
        S.load_grid(tmp_path / "missing.csv")


def test_cached_grid_reuses_and_recomputes(tmp_path):
    bench = mini_benchmark(4)
    spec = S.GridSpec(b_as=(2,), ks=(3,), modes=("on",), horizon=4, plan_horizon=4)
    logs = []
    p = tmp_path / "grids" / "g.csv"
    g1 = S.cached_grid(bench, bench.pairs, spec, view_links={}, path=p, log=logs.append)
    g2 = S.cached_grid(bench, bench.pairs, spec, view_links={}, path=p, log=logs.append)
    assert any("reused" in x for x in logs) and np.allclose(g1["ceiling_auc"], g2["ceiling_auc"])
    spec2 = S.GridSpec(b_as=(1,), ks=(3,), modes=("on",), horizon=4, plan_horizon=4)
    g3 = S.cached_grid(bench, bench.pairs, spec2, view_links={}, path=p, log=logs.append)
    assert set(g3["b_a"]) == {1.0}


def test_the_grid_does_not_depend_on_the_number_of_workers():
    """compute_grid over forked processes (the usable cores by default) gives the grid
    of one process, byte for byte."""
    bench = mini_benchmark(8)
    links = {"food.low_sugar": ["diabetes"], "finance.strict_budget": ["debt"]}
    spec = S.GridSpec(b_as=(1, 2), ks=(2, 3), modes=S.MODES, horizon=6, plan_horizon=6)
    one = S.compute_grid(bench, bench.pairs, spec, view_links=links, n_seeds=2, workers=1)
    two = S.compute_grid(bench, bench.pairs, spec, view_links=links, n_seeds=2, workers=2)
    assert one.to_csv(index=False) == two.to_csv(index=False)
    with pytest.raises(ParameterError, match="workers"):
        S.compute_grid(bench, bench.pairs, spec, view_links=links, workers=0)


def test_parallel_map_keeps_order_and_runs_in_other_processes():
    import os

    from dpmv_lib.common.parallel import parallel_map

    pids = parallel_map(lambda x: (x * x, os.getpid()), range(12), workers=2)  # (a lambda: not pickled)
    assert [v for v, _ in pids] == [x * x for x in range(12)]
    assert any(p != os.getpid() for _, p in pids)
    assert parallel_map(lambda x: x + 1, [1, 2], workers=1) == [2, 3] and parallel_map(str, [], workers=2) == []


# ---- permute-and-flip rows (beyond the paper) -----------------------------------------------------------
def test_grid_pf_modes_obey_theorem1_and_share_the_ledger():
    bench = mini_benchmark(8)
    links = {"food.low_sugar": ["diabetes"], "finance.strict_budget": ["debt"]}
    spec = S.GridSpec(b_as=(2,), ks=(3,), modes=S.MODES, horizon=6, plan_horizon=6)
    g = S.compute_grid(bench, bench.pairs, spec, view_links=links)
    S.check_grid(g)
    assert set(g["mode"]) == set(S.MODES) and (g["max_loss"] <= g["b_a"] + 1e-9).all()
    by = {m: g[g["mode"] == m].sort_values("T").reset_index(drop=True) for m in S.MODES}
    for rule in ("on", "pre"):
        em, pf = by[rule], by[f"{rule}, P&F"]
        # same public plan, charges and caps: identical accounting and admission
        pd.testing.assert_series_equal(em["bound_max"], pf["bound_max"])
        pd.testing.assert_series_equal(em["admit_rate"], pf["admit_rate"])
        assert not np.allclose(em["target_rate_M"], pf["target_rate_M"])  # a different selector
    assert S.mode_parts("pre, P&F") == ("pre", "pf") and S.mode_parts("on") == ("on", "em")
    with pytest.raises(ParameterError):
        S.mode_parts("on, gumbel")


def test_table3_pf_rows_have_no_paper_values_and_stay_out_of_the_claims():
    st = S.table3_settings(selectors=("em", "pf"))
    assert len(st) == 14 and st["method"].nunique() == 12 and set(st["selector"]) == {"em", "pf"}
    assert (st[st["selector"] == "pf"]["method"].str.startswith("DP-MemView (on, P&F) [")).all()
    meth = list(dict.fromkeys(st["method"]))
    n = len(meth)
    priv = pd.DataFrame({"method": meth, "horizon": 16, "auc": [0.5 + 0.01 * i for i in range(n)], "tpr": 0.05})
    util = pd.DataFrame({"method": meth, "U": 0.88, "tRec": 0.5, "Unsup": 0.1})
    paper = pd.DataFrame({"sweep": ["cap_magnitude"], "b_a": [1.0], "k": [3], "eps_tg": [0.333], "auc": [0.541],
                          "trec": [0.508], "unsup": [0.115]})
    t3 = S.table3(st, priv, util, paper=paper)
    pf = t3[t3["selector"] == "pf"]
    assert len(pf) == 7 and pf["paper_auc"].isna().all()
    assert t3[(t3["selector"] == "em") & (t3["b_a"] == 1.0)]["paper_auc"].iloc[0] == 0.541
    only_em = S.table3(S.table3_settings(), priv, util)
    met = _t3_metrics(priv, util)
    pd.testing.assert_frame_equal(S.table3_claims(t3, met), S.table3_claims(only_em, met))
    with pytest.raises(ParameterError):
        S.table3_settings(selectors=("argmax",))


def test_grid_cache_key_names_modules_that_exist():
    """The grid's cache key hashes these modules' source: a name left behind by a move must fail here."""
    from dpmv_lib.experiments.pipeline import CODE_MODULES, code_fingerprint

    for mods in (CODE_MODULES, S.GRID_CODE_MODULES):
        assert len(code_fingerprint(mods)) == 16
