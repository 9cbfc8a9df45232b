"""Response models: prompt builder, the surrogate instrument's rules, the real transformers backend."""
from __future__ import annotations

import os

import pytest
from generation_toy import toy_benchmark

from dpmv_lib.core.errors import GenerationError, ParameterError
from dpmv_lib.generate.interfaces import METHODS, make_interface, render_guidance, render_memory
from dpmv_lib.generate.responders import (DecodingConfig, Prompt, SurrogateResponder, TransformersResponder,
                                 build_messages, make_responder, parse_messages, smollm2_gguf)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
BENCH = toy_benchmark()
POLICY = BENCH.policies["running-example"]


def surrogate(**kw):
    return SurrogateResponder(POLICY, **kw)


# ---- prompt builder -------------------------------------------------------------------------
def test_prompt_builder_round_trip_and_hides_labels():
    p = Prompt("Any dinner ideas?", render_memory(["I like soup."]), ("pair-1", 3, 0))
    msgs = build_messages(p)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert parse_messages(msgs) == (p.query, p.conditioning)
    assert parse_messages(build_messages(Prompt("Just a question?"))) == ("Just a question?", "")
    assert "pair-1" not in str(msgs)  # the randomness key never reaches the model
    # what the model reads for every interface: no method names, no store labels
    pair = BENCH.pairs[0]
    for m in METHODS:
        iface = make_interface(m)
        for side in ("M", "M'"):
            for tc in iface.run(pair, POLICY, side, 0 if iface.stochastic else -1, turns=4):
                text = " ".join(x["content"] for x in build_messages(Prompt("q", tc.conditioning)))
                assert not any(name in text for name in METHODS)
                assert "M'" not in text and "store" not in text.lower()
    with pytest.raises(ParameterError):
        parse_messages([{"role": "system", "content": "x"}])


def test_decoding_config_validation():
    assert DecodingConfig().greedy and not DecodingConfig(temperature=0.7).greedy
    for bad in (dict(max_new_tokens=0), dict(temperature=-1), dict(top_p=0)):
        with pytest.raises(ParameterError):
            DecodingConfig(**bad)


def test_make_responder_specs():
    assert isinstance(make_responder("surrogate", POLICY), SurrogateResponder)
    r = make_responder("openai:http://127.0.0.1:9/v1|my-model", concurrency=2)
    assert r.url == "http://127.0.0.1:9/v1/chat/completions" and r.name == "my-model"
    assert isinstance(make_responder("smollm2"), TransformersResponder)  # lazy: nothing loaded yet
    for bad in ("", "gpt", "openai:http://x", "surrogate"):
        with pytest.raises(ParameterError):
            make_responder(bad)
    with pytest.raises(GenerationError, match="does not exist"):
        make_responder("hf:/nonexistent/model")


# ---- the surrogate instrument ---------------------------------------------------------------------
def test_surrogate_randomness_keyed_by_pair_turn_seed_not_store():
    s = surrogate()
    cond = render_memory(["I skip restaurants and cook cheap dinners with little sugar."])
    p = Prompt("Dinner ideas?", cond, ("pair-1", 4, 0))
    assert s.respond([p]) == surrogate().respond([p])  # reproducible across instances
    outs = {s.respond_one(Prompt("Dinner ideas?", cond, ("pair-1", t, sd))) for t in range(6) for sd in range(3)}
    assert len(outs) > 3                                # stochastic across keys
    # end to end: identical conditioning under M and M' gives identical responses
    from dpmv_lib.generate.generation import generate_transcripts
    df = generate_transcripts(BENCH, s, ["GenericOnly", "TypedMask", "RawReadSet", "DP-MemView (on)"],
                              seeds=(0,), progress=False)
    key = ["pair_id", "method", "seed", "turn"]
    wide = df.pivot_table(index=key, columns="side", values=["conditioning", "response"], aggfunc="first")
    same_cond = wide[("conditioning", "M")] == wide[("conditioning", "M'")]
    same_resp = wide[("response", "M")] == wide[("response", "M'")]
    assert (same_resp[same_cond]).all()
    assert same_cond.xs("GenericOnly", level="method").all() and same_cond.xs("TypedMask", level="method").all()
    assert not same_resp.xs("RawReadSet", level="method").all()


def test_surrogate_follows_views():
    s = surrogate(p_follow_view=1.0)
    for v in [v for sl in POLICY.slots for v in sl.views]:
        out = s.respond_one(Prompt("Help?", render_guidance([v.text]), ("p", 0, 0)))
        core = v.text.rstrip(".").split(":")[0][1:].lower()
        assert core in out.lower(), (v.id, out)
    phr = {s.respond_one(Prompt("Help?", render_guidance(["Keep preparation under 20 minutes."]), ("p", t, 0)))
           for t in range(30)}
    assert len({x.split("minutes")[0][-60:] for x in phr}) >= 3  # several phrasings per view
    none = surrogate(p_follow_view=0.0).respond_one(
        Prompt("Help?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)))
    assert "20 minutes" not in none


def test_surrogate_personalises_from_memory_cues_and_overreaches():
    s = surrogate(p_follow_strong=1.0, p_echo=1.0, p_follow_weak=0.0, p_related=0.0)
    out = s.respond_one(Prompt("Checkup?", render_memory(["Doctor said my A1C is high and I started metformin."]),
                               ("p", 0, 0)))
    assert "blood-sugar-conscious" in out and ("a1c" in out.lower() or "metformin" in out.lower())
    # no cue -> no personalisation
    plain = s.respond_one(Prompt("Checkup?", render_memory(["I like long walks by the river."]), ("p", 0, 0)))
    assert not any(v.text.lower()[:20] in plain.lower() for sl in POLICY.slots for v in sl.views)
    # weak cue (a cue word's stem: "budgeting" ~ "budget") triggers over-reach only via p_follow_weak
    weak_mem = render_memory(["I have been budgeting for a trip."])
    off = surrogate(p_follow_weak=0.0, p_related=0.0).respond_one(Prompt("Dinner?", weak_mem, ("p", 0, 0)))
    on = surrogate(p_follow_weak=1.0, p_related=0.0).respond_one(Prompt("Dinner?", weak_mem, ("p", 0, 0)))
    cheap = POLICY.view("food.cheap").text.lower()[1:25]
    assert cheap not in off.lower() and cheap in on.lower()
    # related views (same slot, shared intent) are over-reached with p_related
    rel = surrogate(p_follow_strong=1.0, p_related=1.0, max_personalised=5).respond_one(
        Prompt("Dinner?", render_memory(["I skip restaurants and cook cheap dinners."]), ("p", 0, 0)))
    assert "blood-sugar-conscious" in rel  # food.low_sugar is related to food.cheap


def test_surrogate_placeholders_and_output_limit():
    s = surrogate(p_awkward=1.0)
    out = s.respond_one(Prompt("Dinner?", render_memory(["[withheld food detail]"]), ("p", 0, 0)))
    assert "[withheld food detail]" in out
    short = SurrogateResponder(POLICY, DecodingConfig(max_new_tokens=5)).respond_one(
        Prompt("Dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)))
    assert len(short.split()) <= 5
    with pytest.raises(ParameterError):
        SurrogateResponder(POLICY, p_echo=1.5)
    with pytest.raises(ParameterError):
        SurrogateResponder([])


def test_surrogate_identity_tracks_policy_and_params():
    a, b = surrogate(), surrogate(p_echo=0.1)
    assert a.identity() != b.identity() and a.identity() == surrogate().identity()
    assert a.seeded and "key" in a.request(Prompt("q", "", ("p", 0, 1)))


# ---- the real transformers backend (SmolLM2-135M-Instruct GGUF, offline) ------------------------------
@pytest.fixture(scope="module")
def smollm2():
    try:
        smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    return TransformersResponder("smollm2", DecodingConfig(max_new_tokens=8), batch_size=4)


@pytest.mark.slow
def test_transformers_smollm2_generates_real_text(smollm2):
    prompts = [Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
               Prompt("How do I save money?", "", ("p", 1, 0)),
               Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0))]
    out = smollm2.respond(prompts)
    assert len(out) == 3 and all(isinstance(t, str) and t.strip() for t in out)
    assert len(set(out)) == 3
    assert smollm2.respond(prompts[::-1])[::-1] == out  # greedy: order/batching does not matter
    assert smollm2.respond(prompts[1:2]) == out[1:2]
    assert smollm2.generated_tokens > 0
    # seeded sampling: reproducible per prompt key, independent of the batch
    sampler = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=8, temperature=0.9), batch_size=4)
    a = sampler.respond(prompts)
    assert all(t.strip() for t in a)
    assert sampler.respond([prompts[2]]) == a[2:3]
    other = sampler.respond([Prompt(p.query, p.conditioning, (p.key[0], p.key[1], 7)) for p in prompts])
    assert other != a
    assert smollm2.identity()["revision"] and smollm2.device in ("cpu", "cuda")


def test_surrogate_cue_index_matches_naive_scan():
    """The token index finds exactly the cues a scan of every cue pattern finds."""
    import re

    from dpmv_lib.generate.responders.surrogate import _WORD_RE
    s = surrogate()
    lines = [t for p in BENCH.pairs for st in (p.m, p.m_prime) for t in st.contents.values()]
    lines += ["My A1C readings and blood sugar are fine.", "I'm budgeting; cheap dinners, quick prep.",
              "Sugar-free snacks for the school trip.", ""]
    for line in lines:
        low, toks = line.lower(), set(_WORD_RE.findall(line.lower()))
        expect = []
        for vc in s.cues:
            hit = next((c for c, pat in zip(vc.strong_text, vc.strong) if pat.search(low)), None)
            if hit is not None:
                expect.append((vc.view.id, 2, hit))
                continue
            weak = sorted(toks & vc.weak_words) or sorted(t for t in toks if len(t) >= 5 and t[:5] in vc.weak_prefixes)
            if weak:
                expect.append((vc.view.id, 1, weak[0]))
        assert s._analyse_line(line) == tuple(expect), line
    assert re


def test_length_batches_bound_padding_and_size():
    from dpmv_lib.generate.responders.transformers_backend import length_batches
    lengths = [400, 100, 120, 390, 150, 160, 300, 110, 95, 101]
    batches = length_batches(lengths, 3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3 and min(lengths[i] for i in b) >= 0.75 * max(lengths[i] for i in b)
    assert [len(b) for b in length_batches([5] * 7, 3)] == [3, 3, 1]
    assert length_batches([10, 1], 4, 0.0) == [[0, 1]] and length_batches([], 4) == []


def test_cpu_threads():
    from dpmv_lib.generate.responders.transformers_backend import busy_cores, cpu_threads
    assert cpu_threads(3) == 3
    assert 1 <= cpu_threads() <= (os.cpu_count() or 1)
    b = busy_cores(0.05)
    assert b is None or 0 <= b <= (os.cpu_count() or 1) + 1e-9


def test_repetition_control_acts_on_each_sequence_own_tokens():
    """The penalty divides positive logits and multiplies negative ones of seen tokens; the
    n-gram rule bans exactly the tokens that would repeat an n-gram; left padding is ignored."""
    import numpy as np
    import torch

    from dpmv_lib.generate.responders.base import repetition_adjusted
    from dpmv_lib.generate.responders.transformers_backend import _RepetitionControl

    z = np.array([2.0, -1.0, 0.5, 3.0, 1.0])
    got = repetition_adjusted(z, [0], [1, 1], DecodingConfig(repetition_penalty=2.0))
    assert got.tolist() == [1.0, -2.0, 0.5, 3.0, 1.0]
    got = repetition_adjusted(z, [0], [1, 1, 3], DecodingConfig(frequency_penalty=0.5))   # output tokens only
    assert got.tolist() == [2.0, -2.0, 0.5, 2.5, 1.0]
    # tokens 3 4 2 3 4: the bigram rule bans what followed "4" before (2); trigram: what followed "3 4" (2)
    assert np.isneginf(repetition_adjusted(z, [3, 4], [2, 3, 4], DecodingConfig(no_repeat_ngram_size=2))).tolist() \
        == [False, False, True, False, False]
    assert np.isneginf(repetition_adjusted(z, [3, 4, 2], [3, 4], DecodingConfig(no_repeat_ngram_size=3))).tolist() \
        == [False, False, True, False, False]
    assert not np.isneginf(repetition_adjusted(z, [3, 4, 2, 1, 4], [], DecodingConfig(no_repeat_ngram_size=3))).any()
    dec = DecodingConfig(repetition_penalty=1.3, no_repeat_ngram_size=2, frequency_penalty=0.25)
    ids = torch.tensor([[0, 0, 3, 4, 2, 3, 4], [3, 4, 2, 3, 4, 1, 1]])   # row 0 left-padded with token 0
    scores = torch.tensor([[2.0, -1.0, 0.5, 3.0, 1.0]] * 2)
    out = _RepetitionControl([2, 0], 5, dec)(ids, scores)            # prompts: 5 columns, then 2 generated
    alone = _RepetitionControl([0], 3, dec)(ids[:1, 2:], scores[:1])
    assert torch.equal(out[0], alone[0]) and out[0, 0] == 2.0        # the pad token 0 is not penalised
    assert not torch.equal(out[0], out[1])


@pytest.mark.slow
def test_transformers_repetition_control_is_batch_invariant(smollm2):
    """SmolLM2's decoding in the transformers backend: the same texts alone and left-padded in a
    batch of 4 (the control reads each row's own tokens, not the padding)."""
    from dataclasses import replace

    from dpmv_lib.generate.responders import SMOLLM2_DECODING

    prompts = [Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
               Prompt("How do I save money?", "", ("p", 1, 0)),
               Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0)),
               Prompt("List three cheap dinners, one per line.", "", ("p", 3, 0))]
    dec = replace(SMOLLM2_DECODING, max_new_tokens=24)
    batched = TransformersResponder("smollm2", dec, batch_size=4).respond(prompts)
    alone = [TransformersResponder("smollm2", dec, batch_size=1).respond([p])[0] for p in prompts]
    assert batched == alone and all(t.strip() for t in batched)
    assert batched != TransformersResponder("smollm2", DecodingConfig(max_new_tokens=24), batch_size=4).respond(prompts)
