"""What the response model wrote: the sample keeps both sides of every cell, the
conditioning each response got, and the judge's grades of that turn."""
from __future__ import annotations

import json

import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.evaluate.rubric_judge import RubricJudge
from dpmv_lib.experiments import samples as SA


@pytest.fixture(scope="module")
def run():
    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.experiments.rq1 import select_pairs
    from dpmv_lib.generate.generation import generate_transcripts
    from dpmv_lib.generate.responders import make_responder

    bench = select_pairs(load_benchmark("pairedmem", "data"), 8, seed=0)
    resp = make_responder("surrogate", list(bench.policies.values()))
    tr = generate_transcripts(bench, resp, ("RawReadSet", "GenericOnly"), seeds=(0,), turns=4)
    return tr, {"pairedmem": bench}


def test_sample_keeps_both_sides_and_grades_each_turn(run):
    tr, benches = run
    s = SA.response_sample(tr, benches, RubricJudge(HashingEncoder()), cells=5, seed=1)
    assert s.groupby(["track", "method"]).size().tolist() == [10, 10]            # 5 cells x 2 sides
    assert (s.groupby(["method", "pair_id", "seed", "turn"])["side"].nunique() == 2).all()
    merged = s.merge(tr, on=["track", "method", "pair_id", "seed", "turn", "side"], suffixes=("", "_t"))
    assert (merged["response"] == merged["response_t"]).all()
    assert (merged["conditioning"] == merged["conditioning_t"]).all()
    items = [json.loads(x) for x in s["items"]]
    assert all(items) and all(0 <= v["grade"] <= 4 for it in items for v in it.values())
    assert s["U"].between(0, 1).all()
    sbs = SA.side_by_side(s, n=2)
    assert len(sbs) == 4 and {"response (M)", "response (M')"} <= set(sbs.columns)
    assert SA.response_sample(tr, benches, RubricJudge(HashingEncoder()), cells=5, seed=1).equals(s)


def test_bad_input(run):
    tr, benches = run
    with pytest.raises(ParameterError, match="lacks columns"):
        SA.response_sample(tr.drop(columns=["conditioning"]), benches, RubricJudge(HashingEncoder()))
    with pytest.raises(ParameterError, match="no benchmark"):
        SA.response_sample(tr, {}, RubricJudge(HashingEncoder()))
