"""Auditors with power: the table and the ceilings it is measured against."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments import auditor_power as AP
from dpmv_lib.experiments import sensitivity as S


def _summary():
    rows = []
    for method, ceil, aucs in (("DP-MemView (on)", 0.70, {"c5": 0.49, "views": 0.66, "tfidf": 0.55}),
                               ("CappedArgmax", 0.99, {"c5": 0.96, "views": 0.99, "tfidf": 0.98})):
        for a, auc in aucs.items():
            rows.append({"auditor": a, "track": "pairedmem", "response_model": "s", "method": method, "horizon": 16,
                         "auc": auc, "auc_lo": auc - 0.05, "auc_hi": auc + 0.05, "ceiling": ceil,
                         "power": (auc - 0.5) / (ceil - 0.5), "power_lo": (auc - 0.55) / (ceil - 0.5),
                         "power_hi": (auc - 0.45) / (ceil - 0.5)})
    return pd.DataFrame(rows)


def test_power_table_picks_the_best_auditor_and_checks_the_goal():
    t = AP.power_table(_summary()).set_index("method")
    assert t.at["DP-MemView (on)", "best"] == "views"
    assert t.at["DP-MemView (on)", "best power"] == pytest.approx(0.16 / 0.20)
    assert bool(t.at["DP-MemView (on)", "meets_goal"]) and bool(t.at["CappedArgmax", "meets_goal"])
    assert t.at["CappedArgmax", "auc c5"] == pytest.approx(0.96)
    lower = _summary().assign(auc=lambda d: d["auc"] - 0.1,
                              power=lambda d: (d["auc"] - 0.1 - 0.5) / (d["ceiling"] - 0.5))
    assert not AP.power_table(lower).set_index("method").at["DP-MemView (on)", "meets_goal"]


def test_views_ceilings_prefer_the_released_views_row():
    o = pd.DataFrame({"track": ["p", "p"], "response_model": ["s", "s"], "method": ["A", "A"],
                      "kind": ["responses", "views"], "ceiling_auc": [1.0, 0.6]})
    c = AP.views_ceilings(o)
    assert len(c) == 1 and c["ceiling_auc"].iloc[0] == 0.6


def test_setting_ceilings_key_every_table3_setting_once():
    t3 = pd.DataFrame({"sweep": ["cap_magnitude", "granularity"], "b_a": [2.0, 2.0], "k": [3, 3],
                       "selector": ["em", "em"], "ceiling_auc": [0.55, 0.55], "ceiling_auc_seeds": [0.6, 0.6]})
    c = S.setting_ceilings(t3)
    assert list(c["method"]) == [S.setting_label(2, 3)] and np.isclose(c["ceiling_auc_seeds"].iloc[0], 0.6)
    with pytest.raises(ParameterError, match="ceiling_auc_seeds"):
        S.setting_ceilings(t3.drop(columns=["ceiling_auc_seeds"]))
    with pytest.raises(ParameterError, match="no transcripts"):
        AP.auditor_power(pd.DataFrame(), None, t3, horizon=16, view_links=None)
