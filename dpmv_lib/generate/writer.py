"""An LLM as the PairedMem S2 writer (paper C.2: an LLM writes the wording): any responder
backend wrapped as the ``generate`` callable of
:func:`~dpmv_lib.bench.pairedmem_realise.validated_rewrite`, and the build CLI with it::

    python -m dpmv_lib.generate.writer --build --realiser responder:openai:http://localhost:8000/v1|mistral

Every rewritten position is code-validated in bench; a rejected one keeps the template wording.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, Sequence

from ..bench.pairedmem import PairedMemBuild, build_pairedmem
from ..bench.pairedmem import main as _build_main
from ..bench.pairedmem_specs import template_policies
from ..core.errors import ParameterError
from ..core.policy import Policy
from .responders import make_responder
from .responders.base import Prompt


def responder_writer(responder: Any, tag: str = "pairedmem-s2") -> Callable[[list[str]], list[str]]:
    """Wrap a responder (:func:`dpmv_lib.generate.responders.make_responder`: a local model,
    OpenVINO or an OpenAI-compatible server) as the ``generate`` callable of
    :func:`~dpmv_lib.bench.pairedmem_realise.llm_rewrite`: each rewrite prompt is sent as one
    request with no conditioning, keyed (tag, k, 0) for seeded backends."""

    def generate(prompts: list[str]) -> list[str]:
        return list(responder.respond([Prompt(query=p, key=(tag, k, 0)) for k, p in enumerate(prompts)]))

    return generate


def make_writer(realiser: str, policies: Mapping[str, Policy] | None = None) -> Callable[[list[str]], list[str]] | None:
    """``"template"`` -> None (the offline deterministic realiser alone); ``"responder:<spec>"`` ->
    an LLM writer over any responder spec (e.g. ``responder:openai:http://localhost:8000/v1|mistral``,
    ``responder:hf:/models/Mistral-7B-Instruct``)."""
    if realiser == "template":
        return None
    if realiser.startswith("responder:"):
        return responder_writer(make_responder(realiser[len("responder:"):],
                                               list(policies.values()) if policies else None))
    raise ParameterError(f"unknown realiser {realiser!r}; use 'template' or 'responder:<spec>'")


def build_with_writer(realiser: str, seed: int = 0, cap: str = "2", **kwargs: Any) -> PairedMemBuild:
    """:func:`~dpmv_lib.bench.pairedmem.build_pairedmem` with the writer of ``realiser``
    (:func:`make_writer`; ``"template"`` is the plain offline build)."""
    return build_pairedmem(seed, cap=cap, realiser=realiser,
                           writer=make_writer(realiser, template_policies(cap)), **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """The PairedMem build CLI (:func:`dpmv_lib.bench.pairedmem.main`) with LLM realisers."""
    return _build_main(argv, make_writer=make_writer, prog="python -m dpmv_lib.generate.writer")


if __name__ == "__main__":
    sys.exit(main())
