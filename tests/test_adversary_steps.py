"""Notebook 06's steps: the optimal adaptive attacker's table written in full and summarised per
instance, with Theorem 1 in the finding."""
import math

import numpy as np
import pandas as pd

import dpmv_lib.experiments as dx

A = dx.adversary


def test_small_summary_counts_per_instance():
    small = pd.DataFrame({"instance": ["a", "a", "b"], "B_a": [1, 2, 1], "loss_over_B_a": [0.5, 0.9, 0.2],
                          "max_loss_le_B_a": [True, True, True], "adaptive_tv": [0.2, 0.3, 0.1],
                          "fixed_tv": [0.2, 0.25, 0.1], "adaptive_kl": [0.1, 0.2, 0.05], "fixed_kl": [0.1, 0.2, 0.05]})
    summ = A.small_summary(small).set_index("instance")
    assert summ.at["a", "rows"] == 2 and summ.at["a", "max_loss_over_B_a"] == 0.9
    assert summ.at["a", "rows_adaptivity_helps"] == 1 and summ.at["b", "rows_adaptivity_helps"] == 0
    assert math.isclose(summ.at["a", "max_tv_gain"], 0.05) and bool(summ["within_B_a"].all())
    assert np.issubdtype(summ["rows_adaptivity_helps"].dtype, np.integer)


def test_small_step_writes_the_full_table_and_finds_theorem_1(tmp_path):
    run = dx.session.start("06", profile="smoke", results_dir=str(tmp_path), dp_budgets=[1], dp_K=2, dp_horizon=1)
    res = A.small_step(run)
    full = pd.read_csv(tmp_path / "tables" / "06_optimal_small.csv")
    assert len(full) == len(res["small"]) and list(full.columns) == A.SMALL_COLUMNS
    assert f"holds on {len(full)} of {len(full)}" in res.finding
