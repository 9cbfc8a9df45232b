"""Response models behind one interface: ``Responder.respond(prompts) -> texts``.

* :class:`SurrogateResponder` (``"surrogate"``): the seeded CPU instrument (default profile);
* :class:`TransformersResponder` (``"smollm2"`` or ``"hf:<path>"``): a local causal LM;
* :class:`LlamaCppResponder` (``"llamacpp"`` or ``"llamacpp:<path.gguf>"``): a GGUF model run
  natively by llama.cpp (the fast CPU path for SmolLM2; needs ``llama-cpp-python``);
* :class:`OpenAIResponder` (``"openai:<base_url>|<model>"``): an OpenAI-compatible server (vLLM).

All render prompts with :func:`build_messages` (query + conditioning; never a method name or a
store label) and share the output limit in :class:`DecodingConfig`.
"""
from __future__ import annotations

from typing import Any, Iterable

from ...core.errors import ParameterError
from ...core.policy import Policy
from .base import (SYSTEM_PROMPT, DecodingConfig, Prompt, Responder, build_messages, key_seed,
                   parse_messages)
from .llamacpp_backend import LlamaCppResponder
from .openai_backend import OpenAIResponder
from .surrogate import SurrogateResponder
from .transformers_backend import TransformersResponder, smollm2_gguf

__all__ = ["SYSTEM_PROMPT", "DecodingConfig", "Prompt", "Responder", "build_messages", "key_seed",
           "parse_messages", "LlamaCppResponder", "OpenAIResponder", "SurrogateResponder", "TransformersResponder",
           "smollm2_gguf", "make_responder"]


def make_responder(spec: str, policies: Policy | Iterable[Policy] | None = None,
                   decoding: DecodingConfig | None = None, **kwargs: Any) -> Responder:
    """A responder from a profile spec: ``surrogate`` (needs ``policies``), ``smollm2``,
    ``hf:<model dir or .gguf>``, ``llamacpp`` (SmolLM2), ``llamacpp:<smollm2 or path.gguf>[@f16|@f32]``
    (``@``: re-encoded weights), or ``openai:<base_url>|<model>``. Extra keyword arguments go to
    the backend (e.g. ``batch_size``, ``concurrency``)."""
    if not isinstance(spec, str) or not spec:
        raise ParameterError(f"responder spec must be a non-empty string, got {spec!r}")
    if spec == "surrogate":
        if policies is None:
            raise ParameterError("the surrogate responder needs the public policies (its view vocabulary)")
        return SurrogateResponder(policies, decoding, **kwargs)
    if spec == "smollm2":
        return TransformersResponder("smollm2", decoding, **kwargs)
    if spec.startswith("hf:"):
        return TransformersResponder(spec[3:], decoding, **kwargs)
    if spec == "llamacpp" or spec.startswith("llamacpp:"):
        model, _, weights = (spec[len("llamacpp:"):] or "smollm2").partition("@")
        if weights:
            kwargs.setdefault("weights", weights)
        return LlamaCppResponder(model, decoding, **kwargs)
    if spec.startswith("openai:"):
        url, sep, model = spec[len("openai:"):].partition("|")
        if not sep or not model:
            raise ParameterError(f"openai responder spec must be 'openai:<base_url>|<model>', got {spec!r}")
        return OpenAIResponder(url, model, decoding, **kwargs)
    raise ParameterError(f"unknown responder spec {spec!r}; use surrogate, smollm2, hf:<path>, "
                         "llamacpp, llamacpp:<path.gguf>[@f16] or openai:<base_url>|<model>")
