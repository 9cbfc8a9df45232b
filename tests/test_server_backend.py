"""OpenAI-compatible backend against a real HTTP server on 127.0.0.1 started by the test
(tests/helpers/chat_servers.py), backed by a real responder (surrogate; SmolLM2 when slow)."""
from __future__ import annotations

import socket
import time

import pytest
from generation_toy import toy_benchmark

from dpmv_lib.core.errors import GenerationError
from dpmv_lib.generate.generation import generate_transcripts
from dpmv_lib.generate.interfaces import render_guidance, render_memory
from dpmv_lib.generate.responders import (DecodingConfig, OpenAIResponder, Prompt, SurrogateResponder,
                                 TransformersResponder, smollm2_gguf)
from helpers.chat_servers import LocalChatServer

BENCH = toy_benchmark()
POLICY = BENCH.policies["running-example"]
PROMPTS = [Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
           Prompt("How do I save money?", "", ("p", 1, 0)),
           Prompt("Plan my meals.", render_memory(["Trying to cut sugar and refined carbs."]), ("p", 2, 0))]


def client(server, **kw):
    kw.setdefault("backoff", 0.01)
    return OpenAIResponder(server.base_url, "surrogate-served", **kw)


def test_chat_completions_round_trip_matches_backing_model():
    backing = SurrogateResponder(POLICY)
    with LocalChatServer(backing) as srv:
        r = client(srv, concurrency=3)
        out = r.respond(PROMPTS * 4)
    # greedy requests carry no seed: the server keys its surrogate by ("server", 0, -1)
    expect = [backing.respond_one(Prompt(p.query, p.conditioning, ("server", 0, -1))) for p in PROMPTS] * 4
    assert out == expect
    assert srv.requests == 12 and r.attempts == 12


def test_seeded_sampling_sends_seed():
    backing = SurrogateResponder(POLICY)
    with LocalChatServer(backing) as srv:
        r = client(srv, decoding=DecodingConfig(temperature=0.7))
        a = r.respond(PROMPTS)
        b = r.respond(PROMPTS)
        c = r.respond([Prompt(p.query, p.conditioning, ("q", 9, 3)) for p in PROMPTS])
    assert a == b and a != c
    assert "seed" in r.payload(PROMPTS[0]) and "seed" not in client(srv).payload(PROMPTS[0])


def test_retries_injected_500s_with_backoff():
    with LocalChatServer(SurrogateResponder(POLICY), fail_first=2, fail_status=500) as srv:
        r = client(srv, max_retries=3, concurrency=1)
        t0 = time.perf_counter()
        out = r.respond(PROMPTS[:1])
        took = time.perf_counter() - t0
    assert out[0] and srv.requests == 3 and r.attempts == 3
    assert took >= 0.01 * 0.5 + 0.02 * 0.5  # two backoff sleeps happened


def test_exhausted_retries_and_client_errors_are_clear():
    with LocalChatServer(SurrogateResponder(POLICY), fail_first=10, fail_status=503) as srv:
        r = client(srv, max_retries=2)
        with pytest.raises(GenerationError, match=r"after 3 attempts.*HTTP 503.*injected failure"):
            r.respond(PROMPTS[:1])
    with LocalChatServer(SurrogateResponder(POLICY), fail_first=10, fail_status=400) as srv:
        r = client(srv, max_retries=5)
        with pytest.raises(GenerationError, match=r"not retried.*HTTP 400.*injected failure"):
            r.respond(PROMPTS[:1])
        assert srv.requests == 1


def test_timeout_is_retried_then_reported():
    with LocalChatServer(SurrogateResponder(POLICY), delay=1.0) as srv:
        r = client(srv, timeout=0.2, max_retries=1)
        with pytest.raises(GenerationError, match="timeout"):
            r.respond(PROMPTS[:1])
        assert r.attempts == 2


def test_connection_refused_and_bad_config():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = OpenAIResponder(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(GenerationError, match="connection error"):
        r.respond(PROMPTS[:1])
    for bad in (dict(base_url="ftp://x", model="m"), dict(base_url="http://x", model=""),
                dict(base_url="http://x", model="m", concurrency=0)):
        with pytest.raises(GenerationError):
            OpenAIResponder(**bad)


def test_server_backend_in_batch_generation_with_cache(tmp_path):
    with LocalChatServer(SurrogateResponder(POLICY)) as srv:
        r = client(srv, concurrency=4)
        sub = BENCH.subset([BENCH.pairs[0].pair_id])
        df = generate_transcripts(sub, r, ["GenericOnly", "RawReadSet"], turns=4, cache=tmp_path / "c.sqlite",
                                  progress=False)
        first = srv.requests
        df2 = generate_transcripts(sub, r, ["GenericOnly", "RawReadSet"], turns=4, cache=tmp_path / "c.sqlite",
                                   progress=False)
    # GenericOnly prompts are identical under M and M' -> deduplicated before reaching the server
    assert first == df["request"].nunique() < len(df)
    assert srv.requests == first  # the rerun came entirely from the cache
    assert df2["response"].tolist() == df["response"].tolist()
    assert set(df["response_model"]) == {"surrogate-served"}


@pytest.mark.slow
def test_server_backed_by_real_smollm2():
    try:
        smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    model = TransformersResponder("smollm2", DecodingConfig(max_new_tokens=8), batch_size=4)
    with LocalChatServer(model) as srv:
        out = OpenAIResponder(srv.base_url, "smollm2", DecodingConfig(max_new_tokens=8)).respond(PROMPTS[:2])
    assert all(t.strip() for t in out)
    assert out == model.respond(PROMPTS[:2])
