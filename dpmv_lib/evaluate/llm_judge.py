"""The LLM judge (paper C.5): a frozen prompt (:data:`LLM_PROMPT`) sent to a local model (through
:mod:`dpmv_lib.generate.responders`) or an OpenAI-compatible endpoint; strict JSON parsing with
retries; an unparseable answer is a recorded failure, never a default score (:class:`LLMJudge`).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Sequence


from ..core.errors import ParameterError
from .rubric import DIMENSIONS, Judgement, Rubric


# ---- LLM judge --------------------------------------------------------------------------------------
LLM_PROMPT_VERSION = "llm-judge-v1"
LLM_PROMPT = """You are a strict evaluator of an assistant's answers. You see a numbered transcript of user \
requests and assistant responses, and a checklist of behaviours per turn. You do not know which system \
produced the answers.

Score each item from 0 (absent or very poor) to 4 (clearly present or excellent):
- "relevance": do the responses address the requests?
- "correctness": are they sound, and free of assumptions about the user that the checklist marks as unsupported?
- "actionability": do they give concrete, usable steps?
- "personalisation": do they use the behaviours marked APPLY?
- "behaviours": for every checklist key, how clearly the response at that turn shows the behaviour.

Transcript:
{transcript}

Checklist (key: [role] description):
{checklist}

Answer with ONLY one JSON object, no other text, exactly of this form:
{{"relevance": <0-4>, "correctness": <0-4>, "actionability": <0-4>, "personalisation": <0-4>, \
"behaviours": {{{keys}}}}}"""
REPAIR = "\n\nYour previous answer was not valid ({error}). Reply again with ONLY the JSON object."


def render_llm_prompt(rubric: Rubric, responses: Sequence[str]) -> str:
    """The frozen judge prompt for one transcript (what an LLM judge sees, and nothing else)."""
    transcript = "\n".join(f"[turn {t}] User: {q}\n[turn {t}] Assistant: {a}"
                           for t, (q, a) in enumerate(zip(rubric.queries, responses)))
    checklist = "\n".join(f"{i.key}: [{'APPLY' if i.role == 'apply' else 'UNSUPPORTED'}] {i.description}"
                          for i in rubric.items) or "(no items)"
    keys = ", ".join(f'"{i.key}": <0-4>' for i in rubric.items)
    return LLM_PROMPT.format(transcript=transcript, checklist=checklist, keys=keys)


_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.S)


def parse_llm_output(text: str, rubric: Rubric) -> tuple[dict[str, float], dict[str, float]]:
    """Strict parse: the whole output (optionally inside one ```json fence) must be one JSON object
    with the four integer scores 0-4 and exactly the rubric's behaviour keys. Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError("output is not text")
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1)
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON object: {exc.msg} at char {exc.pos}") from None
    if not isinstance(obj, dict):
        raise ValueError("the JSON value is not an object")
    scores = {}
    for d in DIMENSIONS:
        v = obj.get(d, obj.get("personalization") if d == "personalisation" else None)
        scores[d] = _score(v, d)
    beh = obj.get("behaviours", obj.get("behaviors", {}))
    if not isinstance(beh, dict):
        raise ValueError("'behaviours' is not an object")
    want = {i.key for i in rubric.items}
    if set(beh) != want:
        missing, extra = sorted(want - set(beh)), sorted(set(beh) - want)
        raise ValueError(f"behaviour keys differ from the checklist (missing {missing[:5]}, extra {extra[:5]})")
    return scores, {k: _score(v, k) for k, v in beh.items()}


def _score(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 0 <= v <= 4:
        raise ValueError(f"{name!r} must be an integer 0-4, got {v!r}")
    return float(v)


class LLMJudge:
    """An LLM behind ``generate(prompts) -> texts`` with the frozen prompt, strict parsing and up to
    ``retries`` repair attempts per transcript. Failures are recorded, never scored by default."""

    def __init__(self, generate: Callable[[list[str]], list[str]], *, name: str = "llm", retries: int = 2) -> None:
        if retries < 0:
            raise ParameterError("retries must be >= 0")
        self.generate = generate
        self.retries = int(retries)
        self.id = f"{LLM_PROMPT_VERSION}[{name}]"

    def judge(self, rubric: Rubric, responses: Sequence[str]) -> Judgement:
        return self.judge_many([(rubric, responses)])[0]

    def judge_many(self, jobs: Sequence[tuple[Rubric, Sequence[str]]], *, progress: bool = False) -> list[Judgement]:
        prompts = [render_llm_prompt(r, resp) for r, resp in jobs]
        raws: list[list[str]] = [[] for _ in jobs]
        errors: list[str] = ["" for _ in jobs]
        done: list[Judgement | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))
        for attempt in range(self.retries + 1):
            if not pending:
                break
            batch = [prompts[i] + (REPAIR.format(error=errors[i]) if attempt else "") for i in pending]
            outs: Sequence[str | None]
            try:
                outs = self.generate(batch)
            except Exception as exc:  # noqa: BLE001 - a backend failure is a recorded failure
                outs = [None] * len(batch)
                for i in pending:
                    errors[i] = f"backend error: {type(exc).__name__}: {exc}"
            if len(outs) != len(batch):
                raise ParameterError(f"judge backend returned {len(outs)} outputs for {len(batch)} prompts")
            still = []
            for i, out in zip(pending, outs):
                if out is None:
                    still.append(i)
                    continue
                raws[i].append(out)
                try:
                    scores, items = parse_llm_output(out, jobs[i][0])
                except ValueError as exc:
                    errors[i] = str(exc)
                    still.append(i)
                    continue
                done[i] = Judgement(scores, items, attempts=attempt + 1, raw=tuple(raws[i]))
            pending = still
        for i in pending:
            done[i] = Judgement({d: math.nan for d in DIMENSIONS}, {}, failed=True, error=errors[i],
                                attempts=self.retries + 1, raw=tuple(raws[i]))
        return done  # type: ignore[return-value]


def openai_generate(base_url: str, model: str, *, timeout: float = 120.0, max_tokens: int = 1024,
                    system: str = "You are a careful evaluator. Reply with JSON only."
                    ) -> Callable[[list[str]], list[str]]:
    """A ``generate`` for an OpenAI-compatible chat endpoint (temperature 0), stdlib HTTP only."""
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + ("/chat/completions" if base_url.rstrip("/").endswith("/v1")
                                  else "/v1/chat/completions")

    def gen(prompts: list[str]) -> list[str]:
        outs = []
        for p in prompts:
            body = json.dumps({"model": model, "temperature": 0, "max_tokens": max_tokens,
                               "messages": [{"role": "system", "content": system}, {"role": "user", "content": p}]})
            req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    outs.append(json.loads(r.read())["choices"][0]["message"]["content"])
            except (urllib.error.URLError, KeyError, ValueError, TimeoutError) as exc:
                raise ParameterError(f"judge endpoint {url} failed: {exc}") from exc
        return outs

    return gen


def responder_generate(spec: str, *, max_new_tokens: int = 768, **kwargs: Any) -> Callable[[list[str]], list[str]]:
    """A ``generate`` backed by :func:`dpmv_lib.generate.responders.make_responder` (e.g. "smollm2" or
    "hf:<path>"; greedy decoding). The judge prompt is sent as the user turn with no conditioning."""
    from ..generate.responders import DecodingConfig, Prompt, make_responder

    resp = make_responder(spec, decoding=DecodingConfig(max_new_tokens=max_new_tokens, temperature=0.0), **kwargs)
    return lambda prompts: resp.respond([Prompt(p, "", ("judge", i, -1)) for i, p in enumerate(prompts)])
