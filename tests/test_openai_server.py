"""The ``openai:`` path against a real third-party OpenAI-compatible server: llama-cpp-python's own
(``python -m llama_cpp.server``, extra ``llamacpp``) serving the packaged SmolLM2 GGUF on
127.0.0.1, in a child process (tests/helpers/chat_servers.py). The paper profile reaches its
response models (vLLM) and its LLM judge this way; tests/test_server_backend.py covers retries,
timeouts and errors against a scripted server.

One server thread (LlamaCppServer's default) and generous client timeouts: on 2 shared cores this
module took 17 s, and 100 s beside two CPU-bound processes; no request came near TIMEOUT."""
from __future__ import annotations

import importlib.util
import math
import os

import pytest
from helpers.chat_servers import LlamaCppServer

from dpmv_lib.core.errors import GenerationError
from dpmv_lib.evaluate.judge import make_judge
from dpmv_lib.evaluate.llm_judge import LLMJudge, openai_generate
from dpmv_lib.evaluate.rubric import DIMENSIONS, Rubric, RubricItem
from dpmv_lib.generate.interfaces import render_guidance, render_memory
from dpmv_lib.generate.responders import DecodingConfig, OpenAIResponder, Prompt, make_responder, smollm2_gguf

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TIMEOUT = 600.0     # per request: a bound for a wedged server, not a speed expectation

PROMPTS = [Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
           Prompt("How do I save money?", "", ("p", 1, 0)),
           Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0))]


@pytest.fixture(scope="module")
def server():
    """The packaged SmolLM2 GGUF served by llama_cpp.server (skipped where either is missing)."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (make install-llamacpp)")
    missing = [m for m in ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"llama_cpp.server needs the server packages of the extra `llamacpp`; missing: {missing}")
    try:
        gguf = smollm2_gguf()
    except GenerationError as exc:
        pytest.skip(str(exc))
    with LlamaCppServer(gguf, alias="smollm2", n_ctx=2048) as srv:
        yield srv
        assert srv.alive, srv.log_tail()


def test_openai_responder_gets_real_greedy_text(server):
    r = make_responder(f"openai:{server.base_url}|smollm2", decoding=DecodingConfig(max_new_tokens=24),
                       timeout=TIMEOUT, concurrency=1, max_retries=0)
    assert isinstance(r, OpenAIResponder)
    out = r.respond(PROMPTS)
    assert len(out) == 3 and all(isinstance(t, str) and t.strip() for t in out), out
    assert r.attempts == 3                       # no retry was needed
    assert r.respond(PROMPTS[1:2]) == out[1:2]   # greedy: the same text again


def test_seeded_sampling_repeats_for_the_same_prompt_key(server):
    """With sampling, each request carries the seed of its prompt key, and the server honours it."""
    r = OpenAIResponder(server.base_url, "smollm2", DecodingConfig(max_new_tokens=24, temperature=0.9),
                        timeout=TIMEOUT, concurrency=1, max_retries=0)
    a = r.respond(PROMPTS[:2])
    assert r.respond(PROMPTS[:2]) == a and all(t.strip() for t in a)


def test_unknown_route_is_a_clear_error(server):
    r = OpenAIResponder(server.base_url + "/nowhere", "smollm2", timeout=TIMEOUT, max_retries=0)
    with pytest.raises(GenerationError, match=r"not retried.*HTTP 404"):
        r.respond(PROMPTS[:1])


def test_llm_judge_against_the_real_server(server):
    """The ``llm:openai:`` judge: every transcript ends as a strictly parsed judgement or a recorded
    failure (a 135M model often writes invalid JSON), never as a crash or a default score."""
    rub = Rubric("r-judge-test", ("What should I cook tonight?",),
                 (RubricItem(0, "b1", "Suggests a quick dinner", "apply"),))
    jobs = [(rub, ("Make a ten-minute vegetable stir-fry with rice.",)),
            (rub, ("The weather is nice today.",))]
    assert make_judge(f"llm:openai:{server.base_url}|smollm2").id == "llm-judge-v1[smollm2]"
    judge = LLMJudge(openai_generate(server.base_url, "smollm2", max_tokens=64, timeout=TIMEOUT), name="smollm2",
                     retries=0)   # the retry path is tested with scripted outputs in test_judge.py
    out = judge.judge_many(jobs)
    assert len(out) == 2
    for j in out:
        assert len(j.raw) == 1 and isinstance(j.raw[0], str) and j.raw[0]   # a real answer came back
        if j.failed:
            assert j.error and not j.error.startswith("backend error") and j.attempts == 1
            assert all(math.isnan(j.scores[d]) for d in DIMENSIONS) and math.isnan(j.U)
        else:
            assert all(0 <= j.scores[d] <= 4 for d in DIMENSIONS) and set(j.items) == {"0:b1"}
