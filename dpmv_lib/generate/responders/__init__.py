"""Response models behind one interface: ``Responder.respond(prompts) -> texts``.

* :class:`SurrogateResponder` (``"surrogate"``): the seeded CPU instrument (default profile);
* :class:`TransformersResponder` (``"smollm2"`` or ``"hf:<path>"``): a local causal LM (the paper
  profile's HF model paths);
* :class:`OpenVINOResponder` (``"openvino"`` or ``"openvino:<model>[@f32|@bf16]"``): an OpenVINO IR
  exported once (``tools/export_openvino.sh``) run by OpenVINO GenAI (needs the ``openvino`` extra;
  the llm profiles);
* :class:`OpenAIResponder` (``"openai:<base_url>|<model>"``): an OpenAI-compatible server (vLLM;
  the paper profile).

All render prompts with :func:`build_messages` (query + conditioning; never a method name or a
store label) and share the output limit in :class:`DecodingConfig`.
"""
from __future__ import annotations

from typing import Any, Iterable

from ...core.errors import ParameterError, ParameterTypeError
from ...core.policy import Policy
from .base import (SMOLLM2_DECODING, SYSTEM_PROMPT, DecodingConfig, Prompt, Responder, build_messages, key_seed,
                   parse_messages)
from .openai_backend import OpenAIResponder
from .openvino_backend import OpenVINOResponder
from .surrogate import SurrogateResponder
from .transformers_backend import TransformersResponder, smollm2_gguf

__all__ = ["SMOLLM2_DECODING", "SYSTEM_PROMPT", "DecodingConfig", "Prompt", "Responder", "build_messages", "key_seed",
           "parse_messages", "OpenAIResponder", "OpenVINOResponder", "SurrogateResponder", "TransformersResponder",
           "smollm2_gguf", "make_responder"]


_TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16"}


def make_responder(spec: str, policies: Policy | Iterable[Policy] | None = None,
                   decoding: DecodingConfig | None = None, **kwargs: Any) -> Responder:
    """A responder from a profile spec: ``surrogate`` (needs ``policies``), ``smollm2[@f32|@bf16]``,
    ``hf:<model dir or .gguf>[@f32|@bf16]`` (transformers; ``@``: torch dtype),
    ``openvino[:<model>][@f32|@bf16]`` (``@``: inference precision) or
    ``openai:<base_url>|<model>``. Extra keyword arguments go to the backend (e.g. ``batch_size``,
    ``concurrency``).

    Parameters
    ----------
    spec : str
        The responder spec (one of the forms above).
    policies : Policy or iterable of Policy, optional
        The public policies whose view vocabularies the surrogate knows (needed for
        ``surrogate`` only).
    decoding : DecodingConfig, optional
        Shared decoding settings (default: :data:`SMOLLM2_DECODING` for the packaged SmolLM2
        in any local engine, else the backend's default).
    **kwargs
        Backend options.

    Returns
    -------
    Responder
        The backend; model weights load lazily, on first use.

    Raises
    ------
    ParameterTypeError
        If ``spec`` is not a string or ``decoding`` not a :class:`DecodingConfig`.
    ParameterError
        If ``spec`` is empty or unknown, malformed (an ``openai:`` spec without ``|<model>``,
        an unknown ``@`` precision), or ``surrogate`` is asked for without ``policies``; the
        surrogate's own option checks raise it too.
    GenerationError
        From a backend's constructor: a model path that does not exist, a bad backend option.

    Examples
    --------
    >>> from dpmv_lib.checks.examples import running_example
    >>> type(make_responder("surrogate", running_example()[0])).__name__
    'SurrogateResponder'
    """
    if not isinstance(spec, str) or not spec:
        raise (ParameterError if isinstance(spec, str) else ParameterTypeError)(
            f"responder spec must be a non-empty string, got {spec!r}")
    if decoding is not None and not isinstance(decoding, DecodingConfig):
        raise ParameterTypeError(f"decoding must be a DecodingConfig, got {type(decoding).__name__}")
    if spec == "surrogate":
        if policies is None:
            raise ParameterError("the surrogate responder needs the public policies (its view vocabulary)")
        return SurrogateResponder(policies, decoding, **kwargs)
    if spec == "smollm2" or spec.startswith(("smollm2@", "hf:")):
        model, _, dtype = (spec[3:] if spec.startswith("hf:") else spec).partition("@")
        if model == "smollm2":
            decoding = decoding or SMOLLM2_DECODING
        if dtype:
            if dtype not in _TORCH_DTYPES:
                raise ParameterError(f"transformers precision must be one of {sorted(_TORCH_DTYPES)}, got {dtype!r}")
            kwargs.setdefault("dtype", _TORCH_DTYPES[dtype])
        return TransformersResponder(model, decoding, **kwargs)
    if spec == "openvino" or spec.startswith("openvino:"):
        model, _, precision = (spec[len("openvino:"):] or "smollm2").partition("@")
        if (model or "smollm2") == "smollm2":
            decoding = decoding or SMOLLM2_DECODING
        if precision:
            kwargs.setdefault("precision", precision)
        return OpenVINOResponder(model or "smollm2", decoding, **kwargs)
    if spec.startswith("openai:"):
        url, sep, model = spec[len("openai:"):].partition("|")
        if not sep or not model:
            raise ParameterError(f"openai responder spec must be 'openai:<base_url>|<model>', got {spec!r}")
        return OpenAIResponder(url, model, decoding, **kwargs)
    raise ParameterError(f"unknown responder spec {spec!r}; use surrogate, smollm2[@f32|@bf16], "
                         "hf:<path>[@f32|@bf16], openvino[:<model>][@f32|@bf16] or openai:<base_url>|<model>")
