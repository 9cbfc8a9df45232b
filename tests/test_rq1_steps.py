"""Notebook 03's display steps on a tiny RQ1 result: each returns a Result whose finding agrees
with the verdicts and tables it sits beside (X3 and the oracle, X1, pipes in claim text)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments import rq1 as R
from dpmv_lib.experiments import rq1_claims as C
from dpmv_lib.experiments.profiles import get_profile
from dpmv_lib.experiments.result import Result
from helpers.metrics import metrics_from

METHODS = C.PAPER_METHODS
BASE = {"GenericOnly": (0.5, 0.05, 0.40, 0.88, 0.04), "RawReadSet": (0.90, 0.60, 0.52, 0.70, 0.20),
        "TypedMask": (0.5, 0.05, 0.30, 0.75, 0.20), "TaskMin": (0.90, 0.60, 0.50, 0.70, 0.20),
        "OutputFilter": (0.85, 0.50, 0.50, 0.70, 0.20), "DP-MemView (on)": (0.51, 0.04, 0.51, 0.88, 0.11),
        "DP-MemView (pre)": (0.49, 0.04, 0.56, 0.878, 0.17)}
ABLATIONS = ("IncompleteCharge", "CappedArgmax", "NoCap", "ScoreChannel")


def _result(ablation_loss: dict[str, float]) -> R.RQ1Result:
    t2 = pd.DataFrame([dict(track="pairedmem", response_model="m", method=m, auc=a, tpr=t, trec=r, u=u, unsup=s,
                            by_construction=a == 0.5) for m, (a, t, r, u, s) in BASE.items()])
    cols = {"auc": "auc", "tpr": "tpr", "trec": "tRec", "u": "U", "unsup": "Unsup"}
    fixed = frozenset(("pairedmem", "m", r.method, k) for r in t2.itertuples() if r.by_construction
                      for k in ("auc", "tpr"))
    metrics = metrics_from({("pairedmem", "m", r.method, k): float(getattr(r, c)) for r in t2.itertuples()
                            for c, k in cols.items()}, sd=0.004, fixed=fixed)
    identical = pd.DataFrame({"track": "pairedmem", "response_model": "m", "method": t2["method"], "cells": 100,
                              "differing": [0 if b else 50 for b in t2["by_construction"]],
                              "identical": t2["by_construction"]})
    oracle = pd.DataFrame({"track": "pairedmem", "response_model": "m", "method": list(BASE) + list(ablation_loss),
                           "ceiling_auc": [0.5 if BASE[m][0] == 0.5 else 0.55 for m in BASE]
                           + [0.6] * len(ablation_loss),
                           "auc_err": 0.0, "max_loss": [0.6] * len(BASE) + list(ablation_loss.values()),
                           "n_pairs": 10})
    oracle["max_loss_le_cap_all_pairs"] = oracle["max_loss"] <= 2
    oracle["pairs_over_cap"] = (~oracle["max_loss_le_cap_all_pairs"]).astype(int)
    audit = t2[["track", "response_model", "method", "auc"]].assign(horizon=16, auc_indep=0.52, auc_indep_lo=0.50,
                                                                   auc_indep_hi=0.54, embedding_unit="response")
    claims = C.evaluate_claims(metrics, oracle, audit, identical, 2.0, METHODS)
    cfg = R.RQ1Config(profile="smoke", write=False, methods=METHODS, oracle_ablations=tuple(ablation_loss))
    return R.RQ1Result(cfg, get_profile("smoke"), pd.DataFrame(), audit, identical, pd.DataFrame(), oracle,
                       pd.DataFrame(), pd.DataFrame(), t2, pd.DataFrame(), claims, metrics=metrics)


def test_oracle_finding_agrees_with_x3_when_some_variant_stays_within_the_cap():
    res = _result({"IncompleteCharge": 1.09, "CappedArgmax": np.inf, "NoCap": 1.284, "ScoreChannel": np.inf})
    assert res.claims.set_index("id").at["X3", "verdict"] == "DOES NOT HOLD"
    out = R.oracle(Result("run", data={"rq1": res}))
    assert "X3 DOES NOT HOLD" in out.finding and "need not show" in out.finding
    assert "CappedArgmax and ScoreChannel realise an unbounded loss" in out.finding
    assert "IncompleteCharge and NoCap stay within B_a at T = 16 (largest 1.090, 1.284)" in out.finding
    shown = out.tables[next(iter(out.tables))].set_index("method")
    assert np.isinf(shown.at["ScoreChannel", "max loss (pairedmem)"])
    assert len(shown) == len(METHODS) + len(ABLATIONS)


def test_oracle_finding_agrees_with_x3_when_every_variant_exceeds_the_cap():
    res = _result({"NoCap": 2.5, "ScoreChannel": np.inf})
    out = R.oracle(res)
    assert res.claims.set_index("id").at["X3", "verdict"] == "HOLDS"
    assert "X3 HOLDS." in out.finding and "NoCap exceeds B_a" in out.finding
    assert "ScoreChannel realises an unbounded loss" in out.finding and "stay within B_a at T" not in out.finding


def test_claims_step_renders_one_row_per_claim_and_counts_every_verdict():
    res = _result({"NoCap": 2.5})
    out = R.claims(res)
    md = out.notes[0]
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert sum(t.type == "tr_open" for t in tokens) == len(res.claims) + 1
    counts = res.claims["verdict"].value_counts()
    for v, n in counts.items():
        assert f"{v} {n} (" in out.finding
    # X1 reports a DP-MemView case with a CI, never GenericOnly's fixed 0.5
    x1 = res.claims.set_index("id").loc["X1"]
    assert x1["verdict"] == "HOLDS" and x1["estimate"] == 0.52 and "GenericOnly" not in x1["statistic"]
    assert "- X1 " in md and "- C1 " not in md   # evidence of X1-X3 and of what does not hold only


def test_dagger_and_table2_steps_state_what_the_tables_show():
    res = _result({"NoCap": 2.5})
    d = R.dagger(res)
    assert d.finding.startswith("Identical conditioning under M and M' in every (pair, seed, turn) cell: "
                                "GenericOnly, TypedMask;")
    assert list(d.tables["differing cells"]["pairedmem"])[:2] == ["0 of 100", "50 of 100"]
    t = R.table2(res)
    assert "memory-text methods reach AUC 0.850-0.900 and the DP-MemView modes 0.490-0.510" in t.finding
    assert t.finding[0].isupper() and "|" in t.notes[0]


def test_steps_refuse_what_is_not_an_rq1_result():
    with pytest.raises(ParameterError, match="dx.rq1.run"):
        R.dagger(Result("x", data={"rq1": 3}))


@pytest.fixture()
def smoke_session(tmp_path):
    import dpmv_lib.experiments as dx

    return dx.session.start("03", profile="smoke", results_dir=str(tmp_path), data_dir="data")


def test_verdicts_by_seed_counts_flips_and_writes_the_table(smoke_session, tmp_path):
    from dpmv_lib.experiments import verdicts as V

    def claims(path, verdicts):
        path.mkdir(parents=True)
        pd.DataFrame({"id": ["C1", "C2", "C3"], "claim": ["a", "b", "c"], "verdict": verdicts}).to_csv(
            path / "rq1_claims.csv", index=False)

    claims(tmp_path / "tables", ["HOLDS", "HOLDS", "INCONCLUSIVE"])
    claims(tmp_path / "seeds" / "1" / "tables", ["DOES NOT HOLD", "HOLDS", "HOLDS"])
    out = V.by_seed(smoke_session, ("rq1_claims",))
    assert out.finding.startswith("Runs with seeds [0, 1]: 1 of 3 claims flip") and "2 change verdict" in out.finding
    assert list(next(iter(out.tables.values()))["id"]) == ["C1", "C3"]
    assert (tmp_path / "tables" / "03_verdicts_by_seed.csv").exists()


def test_judge_steps_on_the_smoke_judge(smoke_session, tmp_path):
    from dpmv_lib.experiments import judge_labels as JL

    fit = JL.threshold_fit(smoke_session)
    assert fit.finding.startswith("Not fitted for this run's judge (rubric-v4[hashing") and not fit.tables
    agr = JL.agreement(smoke_session)
    full = pd.read_csv(tmp_path / "tables" / "03_judge_agreement.csv")
    pooled = full[full["response_model"] == "all"].set_index("what")["kappa"]
    assert f"with kappa {pooled['shown: tRec items']:.2f} on tRec items" in agr.finding.split("annotator A")[1]
    assert all(len(t) <= 12 for t in agr.tables.values()) and len(full) > 12
    # each second reading is a table and a sentence; one where both readings are all positive says so
    for name, (suffix, *_) in JL.SECOND_READINGS.items():
        again = pd.read_csv(tmp_path / "tables" / f"03_judge_inter_annotator_{suffix}.csv").set_index("what")
        assert f"On the {name} a second annotator" in agr.finding
        assert any(k.startswith(f"{name}: two annotators") for k in agr.tables)
        for d in ("relevance", "correctness"):
            k = again.at[f"U: {d}", "kappa"]
            assert f"{d} {'undefined' if pd.isna(k) else f'{k:.2f}'}" in agr.finding.split(f"On the {name}")[1]


def test_comparison_step_states_the_differences_it_shows():
    from dpmv_lib.experiments.tables import compare_with_paper

    res = _result({"NoCap": 2.5})
    paper = res.table2.assign(response_model="Qwen2.5-7B", trec=res.table2["trec"] + 0.1)
    res.comparison = compare_with_paper(res.table2, paper)
    out = R.comparison(res)
    assert "tRec: mean |diff| 0.100, largest -0.100" in out.finding and "AUC: mean |diff| 0.000" in out.finding
    shown = out.tables["pairedmem, m: ours (paper mean)"].set_index("method")
    assert shown.at["RawReadSet", "tRec"] == "0.520 (0.620)" and shown.at["GenericOnly", "AUC"] == "0.500\u2020 (0.500)"
    assert list(shown.columns) == ["AUC", "TPR@5", "tRec", "U", "Unsup"]
