"""Notebook 04's steps: Table 4 in two readable tables, the AUC verdict against the exact ceilings,
and the steps on the smoke benchmark (one call each, a Result with a generated finding)."""
import math

import pandas as pd
import pytest

import dpmv_lib.experiments as dx
from dpmv_lib.core.errors import ParameterError

rq2 = dx.rq2
VARIANTS = list(rq2.TABLE4_METHODS)


def _t4(aucs):
    return pd.DataFrame({"variant": VARIANTS, "auc": aucs})


def _claims(verdict):
    return pd.DataFrame({"id": ["R1", "R3"], "verdict": ["HOLDS", verdict]})


def _ceilings(values):
    return pd.DataFrame({"method": VARIANTS, "ceiling_auc_seeds": values})


def _power(best_aucs):
    return pd.DataFrame({"method": VARIANTS, "best": "views-links", "auc views-links": best_aucs})


def test_auditor_limits_names_the_variant_the_auditor_misses_with_its_numbers():
    tab, finding = rq2.auditor_limits(_t4([0.49, 0.56, 0.75, 0.445]), _claims("DOES NOT HOLD"),
                                      _ceilings([0.52, 0.55, 1.0, 0.581]), _power([0.5, 0.55, 0.9, 0.57]))
    assert "R3 is DOES NOT HOLD, and this reflects the auditor, not the mechanism" in finding
    assert "NoCap's learned AUC is 0.445 against an exact ceiling of 0.581" in finding
    assert "views-links, 0.570" in finding and "IncompleteCharge" not in finding
    row = tab.set_index("variant").loc["NoCap"]
    assert row["learned_share_of_ceiling"] == pytest.approx((0.445 - 0.5) / (0.581 - 0.5))


def test_auditor_limits_says_nothing_is_missed_when_every_ablation_rises():
    _, finding = rq2.auditor_limits(_t4([0.49, 0.56, 0.75, 0.6]), _claims("HOLDS"),
                                    _ceilings([0.52, 0.55, 1.0, 0.581]), _power([0.5, 0.55, 0.9, 0.57]))
    assert finding.startswith("R3 is HOLDS; no ablation's learned AUC falls below")


def test_auditor_limits_refuses_a_table_without_its_columns():
    with pytest.raises(ParameterError, match="ceilings"):
        rq2.auditor_limits(_t4([0.5] * 4), _claims("HOLDS"), pd.DataFrame({"method": VARIANTS}), _power([0.5] * 4))


def test_table4_display_splits_accounting_from_measurements():
    t4 = pd.DataFrame({"variant": VARIANTS, "violated": [None, "C2", "C3", "C5"], "dp_bound": [2.0, 4.0, math.inf, 5.0],
                       "dp_bound_mean": [1.9, 3.5, math.inf, 4.8], "ledger_reported": [2.0, 1.0, 2.0, 5.0],
                       "paper_dp_bound": [2.0, 4.0, math.inf, 5.33], "auc": [0.5] * 4, "paper_auc": [0.49] * 4,
                       "trec": [0.1] * 4, "u": [0.8] * 4, "unsup": [0.1] * 4})
    shown = rq2.table4_display(t4, 2.0)
    acc, meas = shown["accounting"], shown["measured, beside the paper"]
    assert list(acc["violated"]) == ["-", "C2", "C3", "C5"]
    assert acc.loc[2, "DP bound (max / mean)"].startswith("inf") and acc.loc[1, "DP bound (paper)"] == "4.00 > B_a"
    assert list(meas.columns) == ["variant", "AUC ours", "AUC paper", "tRec ours", "U ours", "Unsup ours"]
    assert all(len(df.columns) <= 10 for df in shown.values())


def test_counts_text_lists_only_the_verdicts_that_occur():
    assert rq2.counts_text(pd.DataFrame({"verdict": ["HOLDS", "HOLDS", "ERROR"]})) == "2 HOLDS, 1 ERROR"


def test_steps_on_the_smoke_benchmark_write_their_tables_and_find_from_the_numbers(tmp_path):
    run = dx.session.start("04", profile="smoke", results_dir=str(tmp_path), T=4, T_max=4, workers=1)
    loaded = dx.pipeline.load(run)
    assert "PairedMem pairs" in loaded.finding and loaded["bench"] is not None
    charge = rq2.charge_step(run, loaded)
    assert (tmp_path / "tables" / "04_charge_structure.csv").is_file()
    assert "NoCap, which charges eps = B_a/K = 2/3" in charge.finding
    sup = dx.rq2_support.support_step(run, loaded)
    table = sup["table"].set_index("variant")
    assert f"{int(table.loc['StoreDependentVocabulary', 'pairs_with_failure'])} of" in sup.finding
    assert "Compliant MemView: 0 failing operations" in sup.finding
