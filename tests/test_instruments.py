"""Tables 2-4 side by side per response model (dpmv_lib.experiments.instruments): every column is
read from a run's own tables, with its manifest as provenance."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments import instruments as I


def make_run(d, profile, responder, *, table2=None, table4=None, commit="a" * 40, dirty=False):
    (d / "tables").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({
        "profile": profile, "profile_settings": {"responder": responder},
        "git": {"commit": commit, "dirty": dirty}, "finished": "2026-12-03T00:00:00+00:00"}))
    if table2 is not None:
        pd.DataFrame(table2).to_csv(d / "tables" / I.TABLE2.file, index=False)
    if table4 is not None:
        pd.DataFrame(table4).to_csv(d / "tables" / I.TABLE4.file, index=False)
    return d


def t2(auc_raw, auc_dp):
    rows = []
    for method, auc in (("RawReadSet", auc_raw), ("DP-MemView (on)", auc_dp)):
        rows.append({"track": "pairedmem", "method": method, "metric": "AUC", "ours": auc,
                     "paper_mean": 0.9 if method == "RawReadSet" else 0.5})
        rows.append({"track": "pairedmem", "method": method, "metric": "AUC@8", "ours": 0.1, "paper_mean": 0.2})
    return rows


def test_table2_one_column_per_run_and_the_paper(tmp_path):
    root = tmp_path / "results"
    make_run(root, "default", "surrogate", table2=t2(0.98, 0.52))
    make_run(root / "llm", "llm", "openvino:smollm2@f32", table2=t2(0.71, 0.49)[:2])   # no DP row
    make_run(root / "smoke", "smoke", "surrogate", table2=t2(0.0, 0.0))                 # left out
    runs = I.find_runs(root)
    assert [r.label for r in runs] == ["surrogate", "openvino:smollm2@f32"]
    # the llm run as the current one: still the surrogate column first (profile order)
    assert [r.label for r in I.find_runs(root, current=root / "llm")] == ["surrogate", "openvino:smollm2@f32"]
    tab = I.side_by_side(I.TABLE2, runs)
    assert list(tab.columns) == ["track", "method", "metric", "surrogate", "openvino:smollm2@f32", "paper"]
    assert set(tab["metric"]) == {"AUC"}                     # only the table's metrics
    raw = tab[tab["method"] == "RawReadSet"].iloc[0]
    assert (raw["surrogate"], raw["openvino:smollm2@f32"], raw["paper"]) == (0.98, 0.71, 0.9)
    dp = tab[tab["method"] == "DP-MemView (on)"].iloc[0]
    assert dp["surrogate"] == 0.52 and math.isnan(dp["openvino:smollm2@f32"])
    md = I.side_by_side_markdown(I.TABLE2, tab)
    assert "| pairedmem | RawReadSet | 0.980 | 0.710 | 0.900 |" in md
    assert "| pairedmem | DP-MemView (on) | 0.520 | - | 0.500 |" in md
    prov = I.provenance(runs)
    assert list(prov["profile"]) == ["default", "llm"] and prov["clean"].all()


def test_current_run_first_and_smoke_only_when_current(tmp_path):
    root = tmp_path / "results"
    make_run(root, "default", "surrogate", table2=t2(0.98, 0.52))
    cur = make_run(root / "smoke", "smoke", "surrogate", table2=t2(0.6, 0.5))
    runs = I.find_runs(root, current=cur)
    assert [(r.label, r.profile) for r in runs] == [("surrogate", "smoke")]   # same model: current wins
    assert I.side_by_side(I.TABLE2, runs).iloc[0]["surrogate"] == 0.6


def test_wide_table4(tmp_path):
    rows = [{"variant": "NoCap", "dp_bound": 5.33, "auc": 0.44, "trec": 0.1, "u": 0.5, "unsup": 0.1,
             "paper_dp_bound": 5.33, "paper_auc": 0.6, "paper_trec": 0.5, "paper_u": 0.8, "paper_unsup": 0.16}]
    a = make_run(tmp_path / "a", "default", "surrogate", table4=rows)
    b = make_run(tmp_path / "b", "llm", "smollm2", table4=[{**rows[0], "auc": 0.55}], dirty=True)
    runs = [I.read_run(a), I.read_run(b)]
    tab = I.side_by_side(I.TABLE4, runs).set_index("metric")
    assert tab.loc["auc", "surrogate"] == 0.44 and tab.loc["auc", "smollm2"] == 0.55 and tab.loc["auc", "paper"] == 0.6
    assert list(I.provenance(runs)["clean"]) == [True, False]


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ParameterError, match="no run manifest"):
        I.read_run(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(ParameterError, match="malformed run manifest"):
        I.read_run(tmp_path)
    r = make_run(tmp_path / "r", "default", "surrogate")
    with pytest.raises(ParameterError, match="no run has table2_rq1_vs_paper.csv"):
        I.side_by_side(I.TABLE2, [I.read_run(r)])
    pd.DataFrame([{"track": "x"}]).to_csv(r / "tables" / I.TABLE2.file, index=False)
    with pytest.raises(ParameterError, match="missing for Table 2"):
        I.side_by_side(I.TABLE2, [I.read_run(r)])


def test_the_committed_default_tables_are_readable():
    """The spec's columns exist in the tables the notebooks write (the committed default run)."""
    from dpmv_lib.common.paths import project_root
    root = project_root() / "results"
    if not (root / "manifest.json").is_file():
        pytest.skip("no committed default run")
    run = I.read_run(root)
    for spec in I.TABLES.values():
        tab = I.side_by_side(spec, [run])
        assert len(tab) > 0 and tab[run.label].notna().any()
