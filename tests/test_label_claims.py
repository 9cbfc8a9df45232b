"""The claims on U decided on the held-out labels (dpmv_lib.experiments.label_claims): U per method is
the weighted mean recomputed by hand, the bootstrap resamples distinct responses and pairs the two
sources, the claims' statistics are the claims' own, a judge that over-credits one memory-text
method turns C7 around, and validate_u keeps exactly the held-out units."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import u_validity as UV
from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.evaluate.rubric import DIMENSIONS
from dpmv_lib.evaluate.rubric_judge import RubricJudge
from dpmv_lib.experiments import label_claims as L
from dpmv_lib.experiments.rq1_claims import MEMORY_TEXT, PAPER_METHODS

DIMS = ("relevance", "personalisation")


def _units(u_of: dict[str, float], judge_of: dict[str, float] | None = None, model: str = "surrogate",
           per: int = 12, seed: int = 0) -> pd.DataFrame:
    """``per`` held-out units per method, grades near 4 x the method's U (labels) and the judge's."""
    rng = np.random.default_rng(seed)
    judge_of = judge_of or u_of
    recs = []
    for method, u in u_of.items():
        for i in range(per):
            lab = np.clip(np.round(4 * u + rng.normal(0, 0.3, len(DIMS))), 0, 4)
            jud = np.clip(4 * judge_of[method] + rng.normal(0, 0.2, len(DIMS)), 0, 4)
            rec = {"response_model": model, "method": method, "track": "pairedmem", "query": f"q{i % 5}",
                   "response": f"{method}-{model}-r{i}", "design_weight": 1.0 + (i % 3) / 2}
            rec.update({d: float(lab[k]) for k, d in enumerate(DIMS)})
            rec.update({f"judge_{d}": float(jud[k]) for k, d in enumerate(DIMS)})
            recs.append(rec)
    df = pd.DataFrame.from_records(recs)
    for d in DIMENSIONS:
        if d not in DIMS:
            df[d] = df[f"judge_{d}"] = 2.0
    return df


C7_HOLDS = {"GenericOnly": 0.8, "RawReadSet": 0.2, "TaskMin": 0.25, "OutputFilter": 0.2, "TypedMask": 0.3,
            "DP-MemView (on)": 0.5, "DP-MemView (pre)": 0.5}


def test_u_per_method_is_the_weighted_mean_and_replicates_resample_distinct_responses():
    df = _units(C7_HOLDS)
    df = pd.concat([df, df.iloc[:3]], ignore_index=True)      # one response twice: one resampling unit
    m = L.method_metrics(df, DIMS, n_boot=300, seed=4)
    for method, g in df.groupby("method"):
        key = (L.TRACK, "surrogate", method, "U")
        w = g["design_weight"].to_numpy()
        assert m["labels"].point[key] == pytest.approx(np.average(g[list(DIMS)].mean(axis=1) / 4, weights=w))
        assert m["judge"].point[key] == pytest.approx(
            np.average(g[[f"judge_{d}" for d in DIMS]].mean(axis=1) / 4, weights=w))
        assert m["labels"].boot[key].shape == (300,)
    # a cell of one distinct response has no spread; the same seed gives the same replicates
    one = _units({"GenericOnly": 0.5}, per=1)
    reps = L.method_metrics(one, DIMS, n_boot=50)["labels"].boot[(L.TRACK, "surrogate", "GenericOnly", "U")]
    assert np.ptp(reps) == 0
    again = L.method_metrics(df, DIMS, n_boot=300, seed=4)
    k = (L.TRACK, "surrogate", "TaskMin", "U")
    assert np.array_equal(again["judge"].boot[k], m["judge"].boot[k])
    assert not np.array_equal(L.method_metrics(df, DIMS, n_boot=300, seed=5)["judge"].boot[k], m["judge"].boot[k])


def test_the_sources_share_resamples_so_a_faithful_judge_has_no_gap():
    df = _units(C7_HOLDS)
    for d in DIMS:
        df[f"judge_{d}"] = df[d]
    lc = L.decide_on_labels(df, DIMS, n_boot=400)
    assert np.allclose(lc.gaps[["gap", "gap_lo", "gap_hi"]].to_numpy(), 0)
    assert lc.claims["agree"].all()
    assert np.allclose(lc.cases["value_labels"], lc.cases["value_judge"])
    assert np.allclose(lc.cases["lo_labels"], lc.cases["lo_judge"])


def test_the_dimension_shares_sum_to_the_gap_and_name_the_dimension_that_errs():
    df = _units(C7_HOLDS)
    df.loc[df["method"] == "TaskMin", "judge_relevance"] += 1.0
    g = L.decide_on_labels(df, DIMS, n_boot=200).gaps.set_index("method")
    assert np.allclose(g[[f"gap_{d}" for d in DIMS]].sum(axis=1), g["gap"])
    assert g.at["TaskMin", "gap_relevance"] > g.at["TaskMin", "gap_personalisation"] + 0.1


def test_the_cases_are_the_claims_own_statistics():
    df = _units(C7_HOLDS)
    lc = L.decide_on_labels(df, DIMS, n_boot=400)
    u = df.assign(U=df[list(DIMS)].mean(axis=1) / 4).groupby("method").apply(
        lambda g: np.average(g["U"], weights=g["design_weight"]), include_groups=False)
    c = lc.cases.set_index("id")
    assert c.at["C7", "value_labels"] == pytest.approx(u["GenericOnly"] - max(u[x] for x in MEMORY_TEXT))
    dp = min(u["DP-MemView (on)"], u["DP-MemView (pre)"])
    assert c.at["C9", "value_labels"] == pytest.approx(dp - max(u[x] for x in MEMORY_TEXT))
    spread = max(u[x] for x in PAPER_METHODS) - min(u[x] for x in PAPER_METHODS)
    assert c.at["C11", "value_labels"] == pytest.approx(
        abs(u["DP-MemView (on)"] - u["DP-MemView (pre)"]) - min(0.02, 0.25 * spread))
    assert "R5" not in set(lc.claims["id"])      # no ablation labelled: no R5, and the summary says so
    assert "R5 not decided here" in lc.summary()


def test_a_judge_that_over_credits_a_memory_text_method_turns_c7_around():
    judge = dict(C7_HOLDS, TaskMin=0.95)
    lc = L.decide_on_labels(_units(C7_HOLDS, judge), DIMS, n_boot=1000)
    c7 = lc.claims.set_index("id").loc["C7"]
    assert (c7["verdict_labels"], c7["verdict_judge"]) == ("HOLDS", "DOES NOT HOLD")
    assert not c7["agree"]
    text = lc.summary()
    assert "C7 HOLDS on the labels" in text and "DOES NOT HOLD on the judge" in text
    assert "TaskMin (surrogate)" in text          # the largest error, named
    assert lc.agreement()[0] < lc.agreement()[1]


def test_r5_reads_the_labelled_ablations_of_each_response_model():
    u = dict(C7_HOLDS, **{"IncompleteCharge": 0.5, "CappedArgmax": 0.9, "NoCap": 0.5})
    df = pd.concat([_units(u), _units(C7_HOLDS, model="smollm2", seed=1)], ignore_index=True)
    lc = L.decide_on_labels(df, DIMS, n_boot=1000)
    r5 = lc.cases[lc.cases["id"] == "R5"]
    assert sorted(r5["case"]) == sorted(f"{L.TRACK}/surrogate/{a}" for a in ("IncompleteCharge", "CappedArgmax",
                                                                           "NoCap"))
    assert lc.claims.set_index("id").at["R5", "verdict_labels"] == "DOES NOT HOLD"   # CappedArgmax moves U by 0.4
    assert set(lc.cases.loc[lc.cases["id"] == "C7", "case"]) == {f"{L.TRACK}/surrogate", f"{L.TRACK}/smollm2"}


def test_bad_input_is_refused_by_name():
    df = _units(C7_HOLDS)
    with pytest.raises(ParameterError, match="unknown U dimensions"):
        L.method_metrics(df, ("relevance", "style"))
    with pytest.raises(ParameterError, match="holds no dimension"):
        L.method_metrics(df, ())
    with pytest.raises(ParameterError, match="judge_relevance"):
        L.method_metrics(df.drop(columns=["judge_relevance"]), DIMS)
    with pytest.raises(ParameterError, match="n_boot"):
        L.method_metrics(df, DIMS, n_boot=0)


def test_validate_u_keeps_exactly_the_held_out_units():
    uv = UV.validate_u(RubricJudge(HashingEncoder()), "data/judge_labels", "data", spread_seeds=())
    units = UV.label_pool("data/judge_labels")
    held = units.loc[~UV.split_halves(units, UV.SPLIT_SEED), "unit_id"]
    assert list(uv.held_out["unit_id"]) == list(held)
    assert set(UV.HELD_OUT_COLUMNS) <= set(uv.held_out.columns)
    lc = L.decide_on_labels(uv.held_out, uv.definition.dimensions or DIMENSIONS, n_boot=200)
    assert lc.gaps["units"].sum() == len(held)
