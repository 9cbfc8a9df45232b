"""Batch transcripts: the table contract of docs/architecture.md, dedup, workers, parquet."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from generation_toy import toy_benchmark

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.generate.filters import DeletionFilter
from dpmv_lib.generate.generation import (CONTRACT_COLUMNS, GenerationStats, InterfaceParams, generate_transcripts,
                                 load_transcripts, save_transcripts)
from dpmv_lib.generate.interfaces import METHODS, RQ1_METHODS
from dpmv_lib.generate.responders import DecodingConfig, SurrogateResponder, TransformersResponder, smollm2_gguf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
BENCH = toy_benchmark()


@pytest.fixture(scope="module")
def table():
    st = GenerationStats()
    df = generate_transcripts(BENCH, SurrogateResponder.from_benchmark(BENCH), RQ1_METHODS, seeds=(0, 1),
                              progress=False, stats=st)
    return df, st


def test_schema_and_row_counts(table):
    df, st = table
    assert list(df.columns[: len(CONTRACT_COLUMNS)]) == list(CONTRACT_COLUMNS)
    # pairs x sides x turns x (5 deterministic methods + 4 stochastic (EM and P&F, on and pre) x 2 seeds)
    assert len(df) == 2 * 2 * 32 * (5 + 4 * 2) == st.rows
    assert not df.duplicated(["track", "pair_id", "method", "side", "seed", "turn"]).any()
    for c in ("seed", "turn", "block"):
        assert df[c].dtype == "int64"
    assert df["overlap"].dtype == bool
    assert set(df["side"]) == {"M", "M'"} and set(df["method"]) == set(RQ1_METHODS)
    assert set(df["response_model"]) == {"surrogate"} and set(df["track"]) == {"pairedmem"}
    det = df["method"].isin(["GenericOnly", "RawReadSet", "TypedMask", "TaskMin", "OutputFilter"])
    assert set(df.loc[det, "seed"]) == {-1} and set(df.loc[~det, "seed"]) == {0, 1}
    assert set(df["block"]) == {0, 1} and df["turn"].between(0, 31).all()
    for col in ("views", "released", "view_probs"):
        parsed = df[col].map(json.loads)
        assert parsed.notna().all()
    mem = df["method"].isin(["RawReadSet", "TypedMask", "TaskMin", "OutputFilter"])
    assert (df.loc[mem, "views"] == "[]").all() and (df.loc[mem, "view_probs"] == "{}").all()
    dp = df[df["method"] == "DP-MemView (on)"]
    for probs in dp["view_probs"].map(json.loads):
        assert probs and all(abs(sum(d.values()) - 1) < 1e-9 for d in probs.values())
    assert df["response"].str.len().gt(0).all()


def test_dedup_and_chance_by_construction(table):
    df, st = table
    assert st.unique_requests < st.requests and st.generated == st.unique_requests
    key = ["pair_id", "method", "seed", "turn"]
    for m in ("GenericOnly", "TypedMask"):
        sub = df[df["method"] == m].pivot_table(index=key, columns="side", values=["request", "response"],
                                                aggfunc="first")
        assert (sub[("request", "M")] == sub[("request", "M'")]).all()
        assert (sub[("response", "M")] == sub[("response", "M'")]).all()
    raw = df[df["method"] == "RawReadSet"].set_index(["pair_id", "side", "turn"])
    of = df[df["method"] == "OutputFilter"].set_index(["pair_id", "side", "turn"])
    assert (raw["request"] == of["request"]).all()  # same generation ...
    f = DeletionFilter()
    assert (of["response"] == raw["response"].map(f)).all()  # ... then the deletion filter
    assert not of["response"].map(f.pattern.findall).map(bool).any()
    assert raw["response"].map(f.pattern.findall).map(bool).any()  # the filter had something to remove


def test_parquet_round_trip(table, tmp_path):
    df, _ = table
    path = save_transcripts(df, tmp_path / "t.parquet")
    back = load_transcripts(path)
    pd.testing.assert_frame_equal(back, df)
    with pytest.raises(ParameterError, match="contract columns"):
        save_transcripts(df.drop(columns=["views"]), tmp_path / "bad.parquet")
    with pytest.raises(ParameterError, match="not found"):
        load_transcripts(tmp_path / "missing.parquet")


def test_workers_turns_and_rq2_methods():
    r = SurrogateResponder.from_benchmark(BENCH)
    one = generate_transcripts(BENCH, r, list(METHODS), seeds=(0,), turns=16, progress=False)
    two = generate_transcripts(BENCH, r, list(METHODS), seeds=(0,), turns=16, workers=2, progress=False)
    pd.testing.assert_frame_equal(one, two)
    assert one["turn"].max() == 15 and set(one["block"]) == {0}
    sc = one[one["method"] == "ScoreChannel"]["released"].map(json.loads)
    assert any("top_score" in s for rel in sc for s in rel["slots"])
    p = generate_transcripts(BENCH, r, ["DP-MemView (on)"], seeds=(0,), turns=2, progress=False,
                             params=InterfaceParams(B_a=4, K=2))
    assert {s["epsilon"] for rel in p["released"].map(json.loads) for s in rel["slots"]
            if s["mechanism"] == "em"} == {"2"}                                   # B_a / K


def test_bad_arguments():
    r = SurrogateResponder.from_benchmark(BENCH)
    with pytest.raises(ParameterError, match="side"):
        generate_transcripts(BENCH, r, ["GenericOnly"], sides=("X",), progress=False)
    with pytest.raises(ParameterError, match="seeds"):
        generate_transcripts(BENCH, r, ["DP-MemView (on)"], seeds=(-1,), progress=False)
    with pytest.raises(ParameterError, match="unknown method"):
        generate_transcripts(BENCH, r, ["Nope"], progress=False)
    with pytest.raises(ParameterError, match="Benchmark"):
        generate_transcripts([], r, ["GenericOnly"], progress=False)


@pytest.mark.slow
def test_transcripts_with_real_smollm2(tmp_path):
    try:
        smollm2_gguf()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(str(exc))
    model = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=6), batch_size=8)
    sub = BENCH.subset([BENCH.pairs[0].pair_id])
    st = GenerationStats()
    df = generate_transcripts(sub, model, ["GenericOnly", "TypedMask", "DP-MemView (on)"], seeds=(0, 1), turns=2,
                              cache=tmp_path / "c.sqlite", progress=False, stats=st)
    assert len(df) == 2 * 2 * (1 + 1 + 2) and df["response"].str.strip().str.len().gt(0).all()
    # greedy decoding: identical prompts (sides, seeds, methods) are generated once
    assert st.generated == df["request"].nunique() < len(df)
    st2 = GenerationStats()
    df2 = generate_transcripts(sub, model, ["GenericOnly", "TypedMask", "DP-MemView (on)"], seeds=(0, 1), turns=2,
                               cache=tmp_path / "c.sqlite", progress=False, stats=st2)
    assert st2.generated == 0 and df2["response"].tolist() == df["response"].tolist()
    assert set(df["response_model"]) == {"smollm2"}
