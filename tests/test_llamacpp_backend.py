"""The llama.cpp backend: real SmolLM2 generation from the packaged GGUF (no mocks of the model).

Checks the prompt it builds against the transformers tokenizer's chat template, greedy and seeded
outputs, the shared-prefix cache, KV budgeting, and the generation pipeline through it."""
from __future__ import annotations

import os

import pytest
from generation_toy import toy_benchmark

from dpmv_lib.errors import GenerationError
from dpmv_lib.interfaces import render_guidance, render_memory
from dpmv_lib.responders import DecodingConfig, LlamaCppResponder, Prompt, make_responder, smollm2_gguf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPTS = [
    Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
    Prompt("How do I save money?", "", ("p", 1, 0)),
    Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0)),
    Prompt("What should I pack for a trip?", render_guidance(["Suggest light options."]), ("p", 3, 0))]


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make install-llamacpp)")
    try:
        smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    r = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=12), batch_size=4, threads=2,
                          weights="f16")
    yield r
    r.close()


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(GenerationError, match="existing .gguf"):
        LlamaCppResponder(str(tmp_path / "missing.gguf"))
    with pytest.raises(GenerationError, match="batch_size"):
        LlamaCppResponder("smollm2", batch_size=0)
    with pytest.raises(GenerationError, match="n_ctx"):
        LlamaCppResponder("smollm2", n_ctx=10)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    pytest.importorskip("llama_cpp")
    with pytest.raises(GenerationError, match="could not load"):
        LlamaCppResponder(str(bad)).load()


@pytest.mark.slow
def test_prompt_matches_transformers_chat_template(llm):
    """Same rendered text and token ids as the transformers backend builds for the same prompt."""
    from dpmv_lib.responders import TransformersResponder
    hf = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=4))
    tok, _ = hf.load()
    for p in PROMPTS:
        text = llm.render(p)
        assert text == hf.render(p)
        assert llm.tokenize(text) == tok(text, add_special_tokens=False)["input_ids"]
    prefix = llm.load()["prefix"]
    assert prefix and all(llm.tokenize(llm.render(p))[:len(prefix)] == prefix for p in PROMPTS)


@pytest.mark.slow
def test_greedy_generates_real_text_independent_of_order(llm):
    out = llm.respond(PROMPTS)
    assert len(out) == 4 and all(t.strip() for t in out) and len(set(out)) == 4
    assert all("<|im_" not in t for t in out)  # special tokens are not rendered
    assert llm.generated_tokens > 0
    # each prompt alone (batch of one) and in reverse order give the same greedy text
    assert [llm.respond([p])[0] for p in PROMPTS] == out
    assert llm.respond(PROMPTS[::-1])[::-1] == out
    # the shared prefix is evaluated once per context; each prompt adds only its own tokens
    lens = [len(llm.tokenize(llm.render(p))) for p in PROMPTS]
    n_prefix, before = len(llm.load()["prefix"]), llm.prompt_tokens_evaluated
    llm.respond(PROMPTS)
    assert llm.prompt_tokens_evaluated - before == sum(n - n_prefix for n in lens)
    # without the shared-prefix cache every prompt is evaluated from its first token: same text
    plain = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=12), batch_size=4, threads=2,
                              prefix_cache=False, weights="f16")
    assert plain.respond(PROMPTS) == out
    assert plain.prompt_tokens_evaluated == sum(lens)
    plain.close()


@pytest.mark.slow
def test_output_limit_and_kv_budget(llm):
    one = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=1), batch_size=4, threads=2)
    texts = one.respond(PROMPTS)
    assert one.generated_tokens <= len(PROMPTS) and all(len(t.split()) <= 1 for t in texts)
    # a fixed number of KV cells per sequence: the output does not depend on it, and a prompt that
    # cannot fit is refused with a clear error
    small = LlamaCppResponder("smollm2", DecodingConfig(max_new_tokens=12), batch_size=3, threads=2,
                              n_ctx=256, weights="f16")
    assert small.respond(PROMPTS) == llm.respond(PROMPTS)
    with pytest.raises(GenerationError, match="raise n_ctx"):
        small.respond([Prompt("Summarise. " * 120, "", ("p", 9, 0))])
    # the default grows the cells to fit a long prompt
    long = Prompt("Summarise this list. " + ", ".join(f"item {i}" for i in range(200)), "", ("p", 10, 0))
    assert llm.respond([long])[0].strip() and llm.load()["cells"] >= 512
    for r in (one, small):
        r.close()


@pytest.mark.slow
def test_seeded_sampling_is_keyed_by_prompt(llm):
    dec = DecodingConfig(max_new_tokens=12, temperature=0.9, top_p=0.95)
    s = LlamaCppResponder("smollm2", dec, batch_size=4, threads=2, weights="f16")
    a = s.respond(PROMPTS)
    assert all(t.strip() for t in a)
    assert s.respond(PROMPTS[2:3]) == a[2:3]          # the draw does not depend on the batch
    other = s.respond([Prompt(p.query, p.conditioning, (p.key[0], p.key[1], 7)) for p in PROMPTS])
    assert other != a
    assert s.seeded and not llm.seeded
    s.close()


@pytest.mark.slow
def test_pipeline_through_llamacpp(tmp_path):
    pytest.importorskip("llama_cpp")
    from dpmv_lib.cache import GenerationCache
    from dpmv_lib.generation import generate_transcripts
    bench = toy_benchmark()
    r = make_responder("llamacpp", decoding=DecodingConfig(max_new_tokens=8), batch_size=8, threads=2)
    assert isinstance(r, LlamaCppResponder) and r.identity()["backend"] == "llamacpp"
    cache = GenerationCache(tmp_path / "gen.sqlite")
    df = generate_transcripts(bench, r, ["GenericOnly", "DP-MemView (on)"], seeds=(0,), turns=2,
                              cache=cache, progress=False)
    assert (df["response"].str.strip() != "").all()
    g = df[df.method == "GenericOnly"]
    # identical conditioning under M and M' -> identical response (one deduplicated request)
    assert (g.groupby(["pair_id", "turn"])["response"].nunique() == 1).all()
    again = generate_transcripts(bench, r, ["GenericOnly", "DP-MemView (on)"], seeds=(0,), turns=2,
                                 cache=cache, progress=False)
    assert again["response"].tolist() == df["response"].tolist()
    r.close()


@pytest.mark.slow
def test_packaged_q4_1_and_f16_weights_are_separate_models(llm, tmp_path):
    from dpmv_lib.responders.llamacpp_backend import convert_gguf
    src = smollm2_gguf()
    out = convert_gguf(src, "f16", tmp_path, "rev")
    assert out.exists() and out.stat().st_size > src.stat().st_size and not list(tmp_path.glob("*.tmp"))
    assert convert_gguf(src, "f16", tmp_path, "rev") == out          # converted once
    with pytest.raises(GenerationError, match="weights must be"):
        convert_gguf(src, "q2", tmp_path, "rev")
    with pytest.raises(GenerationError, match="weights must be"):
        LlamaCppResponder("smollm2", weights="int4")
    f16 = LlamaCppResponder(str(out), DecodingConfig(max_new_tokens=12), batch_size=4, threads=2)
    texts = f16.respond(PROMPTS)
    assert all(t.strip() for t in texts) and f16.respond(PROMPTS[1:2]) == texts[1:2]
    q4 = make_responder("llamacpp", decoding=DecodingConfig(max_new_tokens=12), batch_size=4, threads=2)
    assert q4.weights == "gguf" and make_responder("llamacpp:smollm2@f16").weights == "f16"
    assert llm.revision == q4.revision + "+f16" and llm.identity() != q4.identity()
    q4_texts = q4.respond(PROMPTS)                      # the packaged Q4_1 file, run as it is
    assert all(t.strip() for t in q4_texts) and q4.respond(PROMPTS[:1]) == q4_texts[:1]
    for r in (f16, q4):
        r.close()


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
