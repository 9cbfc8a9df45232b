"""The one response-model interface every backend implements, and the one prompt builder.

A :class:`Prompt` is (query, conditioning) plus a randomness key (pair id, turn, seed) that never
reaches the model's input: the model sees the query and the conditioning (view guidance or
memory text), never a method name or a store label. :func:`build_messages` renders every prompt
the same way for every backend; all compared interfaces share it and the output limit
(:class:`DecodingConfig`).
"""
from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ...core.errors import ParameterError

SYSTEM_PROMPT = ("You are a helpful personal assistant. Answer in a few sentences; follow any response "
                 "guidance and use the user's notes only where relevant.")
REQUEST_LABEL = "Request:"


@dataclass(frozen=True)
class Prompt:
    """What one turn sends to a response model. ``key`` = (pair id, turn, seed) keys the
    randomness of seeded backends; it is not part of the model's input."""

    query: str
    conditioning: str = ""
    key: tuple[str, int, int] = ("", 0, -1)

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not isinstance(self.conditioning, str):
            raise ParameterError("a prompt needs a query string and a conditioning string")


def build_messages(prompt: Prompt, system: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Chat messages for one prompt: a fixed system message and the user turn
    (conditioning, blank line, ``Request: <query>``; just the query if there is no conditioning)."""
    user = f"{prompt.conditioning}\n\n{REQUEST_LABEL} {prompt.query}" if prompt.conditioning else prompt.query
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_messages(messages: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """Inverse of :func:`build_messages` on the last user message -> (query, conditioning)."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        raise ParameterError("chat request has no user message with string content")
    text = users[-1]["content"]
    m = re.search(r"\n\n" + re.escape(REQUEST_LABEL) + r" (.*)\Z", text, re.S)
    if m:
        return m.group(1), text[: m.start()]
    return text, ""


def key_seed(key: tuple[str, int, int]) -> int:
    """A 31-bit integer seed derived from a prompt key (for seeded sampling and HTTP ``seed``)."""
    h = hashlib.blake2b(json.dumps(list(key)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding shared by all compared interfaces for one response model.

    ``temperature == 0`` is greedy decoding (seed-independent); > 0 samples with a per-prompt
    seed derived from the prompt key. ``max_new_tokens`` is the shared output limit.
    Repetition control (both act on one sequence's own tokens, so greedy decoding stays
    deterministic and independent of the batch): ``repetition_penalty`` > 1 divides the positive
    logits (multiplies the negative ones) of tokens already in the prompt or the output (the
    CTRL penalty that transformers, OpenVINO GenAI and vLLM implement); ``no_repeat_ngram_size``
    n > 0 forbids any n-gram from occurring twice in the output. At their off values (1.0, 0)
    they are left out of :meth:`to_dict`, so the content addresses of generations without them
    do not change."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ParameterError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not (isinstance(self.temperature, (int, float)) and 0 <= self.temperature < 100):
            raise ParameterError(f"temperature must be in [0, 100), got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ParameterError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.repetition_penalty, bool) or not isinstance(self.repetition_penalty, (int, float)) \
                or not 1 <= self.repetition_penalty <= 10:
            raise ParameterError(f"repetition_penalty must be in [1, 10] (1: off), got {self.repetition_penalty!r}")
        if isinstance(self.frequency_penalty, bool) or not isinstance(self.frequency_penalty, (int, float)) \
                or not 0 <= self.frequency_penalty <= 2:
            raise ParameterError(f"frequency_penalty must be in [0, 2] (0: off), got {self.frequency_penalty!r}")
        if isinstance(self.no_repeat_ngram_size, bool) or not isinstance(self.no_repeat_ngram_size, int) \
                or self.no_repeat_ngram_size < 0:
            raise ParameterError("no_repeat_ngram_size must be an int >= 0 (0: off), "
                                 f"got {self.no_repeat_ngram_size!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def repetition_control(self) -> bool:
        return self.repetition_penalty != 1 or self.no_repeat_ngram_size > 0 or self.frequency_penalty != 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["repetition_penalty"] == 1:
            del d["repetition_penalty"]
        if d["no_repeat_ngram_size"] == 0:
            del d["no_repeat_ngram_size"]
        if d["frequency_penalty"] == 0:
            del d["frequency_penalty"]
        return d


# SmolLM2-135M's decoding in every local backend (chosen on development pairs,
# dpmv_lib/experiments/responder_dev.py; docs/generation_store.md): greedy with repetition control.
SMOLLM2_DECODING = DecodingConfig(frequency_penalty=1.0)


def repetition_adjusted(logits: Any, prompt: Sequence[int], output: Sequence[int], decoding: DecodingConfig) -> Any:
    """``logits`` (a numpy vector over the vocabulary) after ``decoding``'s repetition control,
    given one sequence's own prompt and output tokens: the repetition penalty over both (divide
    positive, multiply negative logits of seen tokens), the frequency penalty over the output
    (subtract penalty x count), the no-repeat n-gram rule over both."""
    import numpy as np

    z = np.array(logits, dtype=np.float64, copy=True)
    tokens = list(prompt) + list(output)
    if decoding.repetition_penalty != 1 and tokens:
        ids = np.unique(np.asarray(tokens, dtype=np.int64))
        got = z[ids]
        z[ids] = np.where(got > 0, got / decoding.repetition_penalty, got * decoding.repetition_penalty)
    if decoding.frequency_penalty != 0 and len(output):
        ids, counts = np.unique(np.asarray(output, dtype=np.int64), return_counts=True)
        z[ids] -= decoding.frequency_penalty * counts
    n = decoding.no_repeat_ngram_size
    if n > 0 and len(tokens) >= n:
        prefix = tuple(tokens[len(tokens) - n + 1:]) if n > 1 else ()
        banned = [tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n - 1]) == prefix]
        z[banned] = -np.inf
    return z


class Responder(ABC):
    """A response model: ``respond(prompts) -> texts`` (same order, one text per prompt).

    ``backend``/``model_id``/``revision`` and ``decoding`` identify its generations for the
    cache; ``seeded`` says whether the prompt key can change the output (if not, identical
    messages are one request whatever their key); ``name`` is the transcript table's
    ``response_model``."""

    backend: str = ""
    name: str = ""
    model_id: str = ""
    revision: str = ""
    decoding: DecodingConfig = DecodingConfig()
    system: str = SYSTEM_PROMPT     # the system message of every prompt (part of the request)

    def messages(self, prompt: Prompt) -> list[dict[str, str]]:
        """The chat messages this responder sends for ``prompt`` (:func:`build_messages`)."""
        return build_messages(prompt, self.system)

    @property
    def seeded(self) -> bool:
        return not self.decoding.greedy

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model_id, "revision": self.revision,
                "decoding": self.decoding.to_dict()}

    def request(self, prompt: Prompt) -> dict[str, Any]:
        """The content that determines this prompt's output (the cache's content address)."""
        body: dict[str, Any] = {"messages": self.messages(prompt)}
        if self.seeded:
            body["key"] = list(prompt.key)
        return body

    @abstractmethod
    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        """Generate one response per prompt."""

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release resources (models, connections); the default does nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model_id!r})"
