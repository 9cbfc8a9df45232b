"""The notebook-02 diagnostics compute what they claim (small sizes; the notebook runs them in full)."""
from __future__ import annotations

import math

import pytest

from dpmv_lib.experiments import diagnostics as dg
from dpmv_lib.experiments.tables import write_table
from dpmv_lib.core.ledger import OnlineBudget


def test_em_view_table_is_a_distribution_within_eps(running):
    policy, m, m_d, _ = running
    df = dg.em_view_table(policy, m, m_d, dg.DINNER, budget=OnlineBudget(3))
    for _, g in df.groupby("slot"):
        assert g["P_M"].sum() == pytest.approx(1) and g["P_M'"].sum() == pytest.approx(1)
        assert (g["log_ratio"].abs() <= g["epsilon"] + 1e-12).all()
    fin = df[df.slot == "finance"]
    assert (fin["log_ratio"] == 0).all()  # finance reads nothing from I_diabetes (B.1)


def test_ledger_trace_columns_and_fallback(running):
    policy, m, _, _ = running
    df = dg.ledger_trace(policy, m, dg.running_queries(6), budget=OnlineBudget(3), seed=0)
    assert {"turn", "slot", "charged", "epsilon", "admitted", "fallback", "L_diabetes", "L_debt"} <= set(df)
    assert df["fallback"].any() and df["admitted"].any()
    assert (df.loc[df.fallback, "epsilon"] == "0").all()
    assert (df["L_debt"] == df["recon_debt"]).all()


def test_counterexample_and_theorem1_tables():
    cex = dg.counterexample_table()
    assert cex["exceeds_B_a"].all() and cex["MemView_within_B_a"].all()
    finite = cex[cex.analytic_loss.apply(math.isfinite)]
    assert (finite.exact_loss - finite.analytic_loss).abs().max() < 1e-9
    thm = dg.theorem1_table(horizon=1, strategies=("fixed",))
    assert thm[thm.violates == "-"]["holds"].all()
    assert not thm[thm.interface == "CappedArgmax"]["holds"].any()
    rnd = dg.random_theorem1_table(range(2), horizon=2)
    assert rnd["holds"].all() and len(rnd) == 16


def test_sizes_and_write_table(tmp_path):
    assert dg.notebook_sizes("smoke")["horizon"] < dg.notebook_sizes("default")["horizon"]
    assert dg.notebook_sizes("paper", horizon=5)["horizon"] == 5
    with pytest.raises(ValueError, match="unknown size"):
        dg.notebook_sizes("smoke", turns=3)
    layout = dg.running_example_table()
    csv, md = write_table(layout, tmp_path / "t", "x", layout.to_markdown(index=False))   # as notebook 02 writes it
    assert csv.exists() and md.read_text().startswith("|")


def test_notebook_steps_write_their_tables_and_say_what_they_found(tmp_path):
    from dpmv_lib.experiments import session

    run = session.start("02", profile="smoke", results_dir=str(tmp_path), horizon=None, max_selections=3)
    assert dg.sizes(run)["max_selections"] == 3 and dg.sizes(run)["horizon"] == 2
    em = dg.em_step(run)
    assert "within $\\varepsilon$" in em.finding and "identical distributions" in em.finding
    trace = dg.ledger_trace_step(run)
    assert "final ledgers L_diabetes = 2, L_debt = 2" in trace.finding and "equals the ledger" in trace.finding
    fig2 = dg.figure2_step(run)
    assert "food falls back to food.generic; finance is admitted" in fig2.finding
    assert "L_diabetes = 3/2 and L_debt = 2/3" in fig2.finding
    sweep = dg.loss_sweep_step(run)
    assert sweep.figures["loss"].is_file() and "At N = 3" in sweep.finding
    assert list(sweep.tables["exact max loss"].index) == [1, 2, 3]
    thm = dg.theorem1_step(run)
    assert thm.finding.startswith("Compliant MemView holds on 8 of 8 checks")
    for name in ("02_em_views", "02_ledger_trace", "02_figure2_turn", "02_loss_vs_selections",
                 "02_theorem1_running_example"):
        assert (tmp_path / "tables" / f"{name}.csv").is_file(), name
    assert "took" in run.timings().finding
