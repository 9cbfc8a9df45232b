"""The llama.cpp backend: real SmolLM2 generation from the packaged GGUF (no mocks of the model).

Checks the prompt it builds against the transformers tokenizer's chat template, greedy and seeded
outputs, the shared-prefix cache, KV budgeting, and the generation pipeline through it.

Every native call runs in a child process (tests/helpers/native.py): a segfault inside llama.cpp
fails the one test that hit it, with the backend, the weights (the packaged Q4_1 file or its F16
re-encoding), the CPU model and ISA flags and the library's compiled features in the message,
instead of taking the suite down (issue 11). The children emit plain values; the assertions run
here."""
from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

import pytest
from helpers.native import run_native

from dpmv_lib.core.errors import GenerationError
from dpmv_lib.generate.interfaces import render_guidance, render_memory
from dpmv_lib.generate.responders import DecodingConfig, LlamaCppResponder, Prompt, smollm2_gguf
from dpmv_lib.generate.responders import llamacpp_backend

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPTS = [
    Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
    Prompt("How do I save money?", "", ("p", 1, 0)),
    Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0)),
    Prompt("What should I pack for a trip?", render_guidance(["Suggest light options."]), ("p", 3, 0))]

# imported by every child: the prompts, the responder types, and two shorthands
_CHILD = """
from test_llamacpp_backend import PROMPTS
from dpmv_lib.core.errors import GenerationError
from dpmv_lib.generate.responders import DecodingConfig, LlamaCppResponder, Prompt, make_responder, smollm2_gguf

def f16(max_new_tokens=12, **kw):
    kw = {"batch_size": 4, "threads": 2, "weights": "f16", **kw}
    return LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=max_new_tokens), **kw)

def error(fn):
    try:
        fn()
    except GenerationError as exc:
        return str(exc)
    return None
"""


def _weights(kind: str) -> str:
    src = smollm2_gguf()
    return {"q4_1": f"q4_1 (the packaged GGUF as it is: {src})",
            "f16": f"f16 (re-encoded once from {src} under results/cache/models/)"}.get(kind, kind)


@pytest.fixture(scope="module")
def build() -> str:
    """The llama.cpp library's compiled CPU features, read in a child (skip when not installed)."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (make install-llamacpp)")
    try:
        smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    run = run_native("import llama_cpp\nemit(llama_cpp.llama_print_system_info().decode())",
                     backend="llamacpp", weights="none (loading the library)", timeout=300)
    return run.value.strip(" |")


def native(build: str, weights: str, code: str, timeout: float = 1200):
    """Run ``code`` (after :data:`_CHILD`) in a child; what it emits, or the test fails naming
    the backend, ``weights`` ("q4_1", "f16" or a description), the CPU and the build."""
    return run_native(_CHILD + code, backend="llamacpp", weights=_weights(weights),
                      extra={"llama.cpp build": build}, timeout=timeout).value


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(GenerationError, match="existing .gguf"):
        LlamaCppResponder(str(tmp_path / "missing.gguf"))
    with pytest.raises(GenerationError, match="batch_size"):
        LlamaCppResponder("smollm2", batch_size=0)
    with pytest.raises(GenerationError, match="n_ctx"):
        LlamaCppResponder("smollm2", n_ctx=10)
    with pytest.raises(GenerationError, match="weights must be"):
        LlamaCppResponder("smollm2", weights="int4")


def test_a_file_that_is_not_gguf_is_refused(build, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    msg = native(build, f"a non-GGUF file ({bad})", f"emit(error(lambda: LlamaCppResponder({str(bad)!r}).load()))")
    assert msg and "could not load" in msg


def test_build_features_and_the_amx_guard(monkeypatch, tmp_path):
    """A library compiled with AMX loads models without the extra buffer types (so weights never
    take ggml's AMX path: issue 11); any other keeps llama.cpp's default. No native code here: a
    stand-in for the module records the model parameters the backend passes."""
    amx = b"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | OPENMP = 1 | "
    assert llamacpp_backend.build_features(SimpleNamespace(llama_print_system_info=lambda: amx)) == {
        "SSE3": "1", "AVX2": "1", "AVX512": "1", "AVX512_VNNI": "1", "AMX_INT8": "1", "OPENMP": "1"}
    seen = []

    def fake(info: bytes) -> SimpleNamespace:
        def load(path, mp):
            seen.append(mp.use_extra_bufts)
            return None                       # "could not load": load() stops right there
        return SimpleNamespace(llama_log_set=lambda *a: None, llama_backend_init=lambda: None,
                               llama_print_system_info=lambda: info, llama_model_load_from_file=load,
                               llama_model_default_params=lambda: SimpleNamespace(n_gpu_layers=0,
                                                                                  use_extra_bufts=True))
    monkeypatch.setattr(llamacpp_backend, "_LOG_CB", object())   # no ctypes callback for the fake
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    for info in (amx, b"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | "):
        monkeypatch.setattr(llamacpp_backend, "llama_cpp_module", lambda info=info: fake(info))
        with pytest.raises(GenerationError, match="could not load"):
            LlamaCppResponder(str(model)).load()
    assert seen == [False, True]


@pytest.mark.slow
def test_packaged_q4_1_generates_at_batch_1_and_4(build):
    """The call that segfaulted on an AMX Xeon (issue 11): the packaged Q4_1 weights, the first
    respond of a fresh responder, batch 1 and 4, 1 and 4 new tokens."""
    out = native(build, "q4_1", """
res = {}
for bs in (1, 4):
    for n in (1, 4):
        r = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=n), batch_size=bs, threads=2)
        res[f"{bs}x{n}"] = [r.respond(PROMPTS), r.generated_tokens, r.weights]
        r.close()
emit(res)""")
    assert sorted(out) == ["1x1", "1x4", "4x1", "4x4"]
    for key, (texts, generated, weights) in out.items():
        n = int(key.split("x")[1])
        assert weights == "gguf" and len(texts) == 4 and 0 < generated <= 4 * n, key
        assert all(len(t.split()) <= n for t in texts) and (n == 1 or all(t.strip() for t in texts)), key


@pytest.mark.slow
def test_prompt_matches_transformers_chat_template(build):
    """Same rendered text and token ids as the transformers backend builds for the same prompt."""
    out = native(build, "f16", """
from dpmv_lib.generate.responders import TransformersResponder
llm = f16()
hf = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=4))
tok, _ = hf.load()
texts = [llm.render(p) for p in PROMPTS]
emit({"texts": texts, "hf_texts": [hf.render(p) for p in PROMPTS], "ids": [llm.tokenize(t) for t in texts],
      "hf_ids": [tok(t, add_special_tokens=False)["input_ids"] for t in texts], "prefix": llm.load()["prefix"]})""")
    assert out["texts"] == out["hf_texts"] and out["ids"] == out["hf_ids"]
    prefix = out["prefix"]
    assert prefix and all(ids[:len(prefix)] == prefix for ids in out["ids"])


@pytest.mark.slow
def test_greedy_generates_real_text_independent_of_order(build):
    o = native(build, "f16", """
llm = f16()
res = {"out": llm.respond(PROMPTS), "generated": llm.generated_tokens}
res["alone"] = [llm.respond([p])[0] for p in PROMPTS]
res["reversed"] = llm.respond(PROMPTS[::-1])[::-1]
res["lens"] = [len(llm.tokenize(llm.render(p))) for p in PROMPTS]
res["n_prefix"], before = len(llm.load()["prefix"]), llm.prompt_tokens_evaluated
llm.respond(PROMPTS)
res["evaluated_again"] = llm.prompt_tokens_evaluated - before
plain = f16(prefix_cache=False)
res["plain"], res["plain_evaluated"] = plain.respond(PROMPTS), plain.prompt_tokens_evaluated
emit(res)""")
    out = o["out"]
    assert len(out) == 4 and all(t.strip() for t in out) and len(set(out)) == 4
    assert all("<|im_" not in t for t in out)  # special tokens are not rendered
    assert o["generated"] > 0
    # each prompt alone (batch of one) and in reverse order give the same greedy text
    assert o["alone"] == out and o["reversed"] == out
    # the shared prefix is evaluated once per context; each prompt adds only its own tokens
    assert o["evaluated_again"] == sum(n - o["n_prefix"] for n in o["lens"])
    # without the shared-prefix cache every prompt is evaluated from its first token: same text
    assert o["plain"] == out and o["plain_evaluated"] == sum(o["lens"])


@pytest.mark.slow
def test_output_limit_q4_1(build):
    o = native(build, "q4_1", """
one = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=1), batch_size=4, threads=2)
emit([one.respond(PROMPTS), one.generated_tokens])""")
    texts, generated = o
    assert generated <= len(PROMPTS) and all(len(t.split()) <= 1 for t in texts)


@pytest.mark.slow
def test_kv_budget(build):
    o = native(build, "f16", """
llm, small = f16(), f16(batch_size=3, n_ctx=256)
res = {"small": small.respond(PROMPTS), "default": llm.respond(PROMPTS)}
res["too_long"] = error(lambda: small.respond([Prompt("Summarise. " * 120, "", ("p", 9, 0))]))
long = Prompt("Summarise this list. " + ", ".join(f"item {i}" for i in range(200)), "", ("p", 10, 0))
res["long"], res["cells"] = llm.respond([long])[0], llm.load()["cells"]
emit(res)""")
    # a fixed number of KV cells per sequence: the output does not depend on it, and a prompt that
    # cannot fit is refused with a clear error
    assert o["small"] == o["default"]
    assert o["too_long"] and "raise n_ctx" in o["too_long"]
    # the default grows the cells to fit a long prompt
    assert o["long"].strip() and o["cells"] >= 512


@pytest.mark.slow
def test_seeded_sampling_is_keyed_by_prompt(build):
    o = native(build, "f16", """
s = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=12, temperature=0.9, top_p=0.95),
                      batch_size=4, threads=2, weights="f16")
a = s.respond(PROMPTS)
emit({"a": a, "third": s.respond(PROMPTS[2:3]), "seeded": s.seeded, "greedy_seeded": f16().seeded,
      "other": s.respond([Prompt(p.query, p.conditioning, (p.key[0], p.key[1], 7)) for p in PROMPTS])})""")
    assert all(t.strip() for t in o["a"])
    assert o["third"] == o["a"][2:3]          # the draw does not depend on the batch
    assert o["other"] != o["a"]
    assert o["seeded"] and not o["greedy_seeded"]


@pytest.mark.slow
def test_pipeline_through_llamacpp(build, tmp_path):
    o = native(build, "q4_1", f"""
from generation_toy import toy_benchmark
from dpmv_lib.generate.cache import GenerationCache
from dpmv_lib.generate.generation import generate_transcripts
bench = toy_benchmark()
r = make_responder("llamacpp", decoding=DecodingConfig(max_new_tokens=8), batch_size=8, threads=2)
cache = GenerationCache({str(tmp_path / "gen.sqlite")!r})
runs = [generate_transcripts(bench, r, ["GenericOnly", "DP-MemView (on)"], seeds=(0,), turns=2,
                             cache=cache, progress=False) for _ in range(2)]
emit({{"type": type(r).__name__, "backend": r.identity()["backend"],
      "rows": [df[["method", "pair_id", "turn", "response"]].to_dict("records") for df in runs]}})""")
    import pandas as pd
    assert o["type"] == "LlamaCppResponder" and o["backend"] == "llamacpp"
    df, again = (pd.DataFrame(rows) for rows in o["rows"])
    assert (df["response"].str.strip() != "").all()
    g = df[df.method == "GenericOnly"]
    # identical conditioning under M and M' -> identical response (one deduplicated request)
    assert (g.groupby(["pair_id", "turn"])["response"].nunique() == 1).all()
    assert again["response"].tolist() == df["response"].tolist()


@pytest.mark.slow
def test_packaged_q4_1_and_f16_weights_are_separate_models(build, tmp_path):
    o = native(build, "f16", f"""
from pathlib import Path
from dpmv_lib.generate.responders.llamacpp_backend import convert_gguf
src, tmp = smollm2_gguf(), Path({str(tmp_path)!r})
out = convert_gguf(src, "f16", tmp, "rev")
res = {{"out": str(out), "exists": out.exists(), "bigger": out.stat().st_size > src.stat().st_size,
       "tmp_left": [p.name for p in tmp.glob("*.tmp")], "again": str(convert_gguf(src, "f16", tmp, "rev")),
       "bad": error(lambda: convert_gguf(src, "q2", tmp, "rev"))}}
f16_file = LlamaCppResponder(str(out), DecodingConfig(max_new_tokens=12), batch_size=4, threads=2)
res["texts"], res["one"] = f16_file.respond(PROMPTS), f16_file.respond(PROMPTS[1:2])
emit(res)""")
    assert o["exists"] and o["bigger"] and not o["tmp_left"]
    assert o["again"] == o["out"]                                # converted once
    assert o["bad"] and "weights must be" in o["bad"]
    assert all(t.strip() for t in o["texts"]) and o["one"] == o["texts"][1:2]
    q4 = native(build, "q4_1", """
q4 = make_responder("llamacpp", decoding=DecodingConfig(max_new_tokens=12), batch_size=4, threads=2)
texts = q4.respond(PROMPTS)                      # the packaged Q4_1 file, run as it is
emit({"weights": q4.weights, "texts": texts, "first": q4.respond(PROMPTS[:1])})""")
    assert q4["weights"] == "gguf" and all(t.strip() for t in q4["texts"]) and q4["first"] == q4["texts"][:1]
    # identities (no native call: the constructor only reads the file's fingerprint)
    from dpmv_lib.generate.responders import make_responder
    f16, plain = make_responder("llamacpp:smollm2@f16"), make_responder("llamacpp")
    assert f16.weights == "f16" and f16.revision == plain.revision + "+f16" and f16.identity() != plain.identity()


def test_sampling_rule_matches_softmax_with_top_p():
    """Gumbel-max on temperature-scaled logits restricted to the top-p set draws each token with
    probability softmax(z / T) renormalised over that set (chi-square), never one outside it."""
    import numpy as np
    from scipy.stats import chisquare
    try:
        smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    T, top_p = 0.7, 0.9
    r = LlamaCppResponder("smollm2", DecodingConfig(temperature=T, top_p=top_p))
    p = np.exp(logits / T - (logits / T).max())
    p /= p.sum()
    keep = (np.cumsum(p) - p) <= top_p             # sorted descending already
    expect = np.where(keep, p, 0) / p[keep].sum()
    rng = np.random.default_rng(0)
    n = 20000
    counts = np.bincount([r._choose(logits, rng) for _ in range(n)], minlength=len(logits))
    assert counts[~keep].sum() == 0 and keep.sum() < len(logits)
    assert chisquare(counts[keep], expect[keep] * n).pvalue > 1e-3
    assert LlamaCppResponder("smollm2")._choose(logits, None) == 0   # greedy: the argmax


# ---- the `llm:` judge against llama-cpp-python's own OpenAI-compatible server (issue 12) ------------
def test_llm_judge_against_real_llama_cpp_server(build):
    """A real ``python -m llama_cpp.server`` on 127.0.0.1 serving SmolLM2 (F16 re-encoding of the
    packaged GGUF, off the AMX path of issue 11), reached through the ``llm:openai:`` judge path:
    every transcript ends as a strictly parsed judgement or a recorded failure (a 135M model often
    writes invalid JSON), never as a crash or a default score."""
    import math
    import time

    from dpmv_lib.evaluate.rubric import DIMENSIONS, Rubric, RubricItem
    from dpmv_lib.evaluate.llm_judge import LLMJudge, openai_generate
    from dpmv_lib.evaluate.judge import make_judge
    from dpmv_lib.generate.responders.local_server import LlamaCppServer

    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.fail("llama_cpp.server needs the server packages of the extra `llamacpp` "
                    "(fastapi, uvicorn, sse-starlette, starlette-context, pydantic-settings)")
    path = native(build, "f16", """
from dpmv_lib.common.paths import project_root
from dpmv_lib.generate.responders.llamacpp_backend import convert_gguf
r = f16()
emit(str(convert_gguf(r.path, "f16", project_root() / "results" / "cache" / "models", r._source_revision)))
""")
    rub = Rubric("r-judge-test", ("What should I cook tonight?",),
                 (RubricItem(0, "b1", "Suggests a quick dinner", "apply"),))
    jobs = [(rub, ("Make a ten-minute vegetable stir-fry with rice.",)),
            (rub, ("The weather is nice today.",))]
    with LlamaCppServer(path, alias="smollm2", n_ctx=2048, threads=2) as srv:
        assert make_judge(f"llm:openai:{srv.base_url}|smollm2").id == "llm-judge-v1[smollm2]"
        judge = LLMJudge(openai_generate(srv.base_url, "smollm2", max_tokens=64, timeout=120), name="smollm2",
                         retries=0)   # the retry path is tested with scripted outputs in test_judge.py
        t = time.perf_counter()
        out = judge.judge_many(jobs)
        secs = time.perf_counter() - t
        assert srv.alive, srv.log_tail()
    assert len(out) == 2
    for j in out:
        assert len(j.raw) == 1 and isinstance(j.raw[0], str) and j.raw[0]   # a real answer came back
        if j.failed:
            assert j.error and not j.error.startswith("backend error") and j.attempts == 1
            assert all(math.isnan(j.scores[d]) for d in DIMENSIONS) and math.isnan(j.U)
        else:
            assert all(0 <= j.scores[d] <= 4 for d in DIMENSIONS) and set(j.items) == {"0:b1"}
    print(f"llm judge over llama_cpp.server: {sum(j.failed for j in out)}/2 failed ({secs:.1f} s); errors: "
          f"{[j.error[:80] for j in out if j.failed]}")
