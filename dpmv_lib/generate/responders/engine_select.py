"""The ``auto`` responder: the engine measured fastest for SmolLM2 on a CPU with this one's ISA.

Rule (no engine is assumed fast): ``benchmarks/bench_generation.py --parts engines`` records, per
engine spec, end-to-end generated tokens/s at each batch size, whether the greedy texts were the
same at every batch size, and the machine's CPU flags. :func:`choose_engine` uses that record
only if its ISA flags (:data:`~dpmv_lib.common.machine.RELEVANT_ISA`) and architecture equal this CPU's
(kernels, and so speed, are chosen by ISA); among the engines that are usable here (package
installed, OpenVINO IR exported) and were batch-invariant, it takes the highest tokens/s at the
largest batch measured. Without a matching record it falls back to the reference engine, llama.cpp
F16 (transformers float32 where llama-cpp-python is missing), and says why.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import GenerationError
from ...common.machine import cpu_info

RECORD_ENV = "DPMV_ENGINE_RECORD"
FALLBACKS = ("llamacpp:smollm2@f16", "smollm2@f32")


@dataclass(frozen=True)
class EngineChoice:
    """The chosen responder spec, why, and its recorded tokens/s (None for a fallback)."""

    spec: str
    reason: str
    tokens_per_s: float | None = None


def record_path() -> Path:
    """``$DPMV_ENGINE_RECORD`` or the checkout's ``benchmarks/results/generation.json``."""
    if os.environ.get(RECORD_ENV):
        return Path(os.environ[RECORD_ENV])
    from ...common.paths import project_root
    return project_root() / "benchmarks" / "results" / "generation.json"


def usable(spec: str) -> bool:
    """Whether ``spec``'s engine can run here: its package is installed and, for OpenVINO, the
    IR is exported (bf16 also needs a BF16-capable CPU)."""
    if spec.startswith("llamacpp"):
        return importlib.util.find_spec("llama_cpp") is not None
    if spec.startswith("openvino"):
        if importlib.util.find_spec("openvino_genai") is None:
            return False
        from .openvino_backend import openvino_capabilities
        from .openvino_export import ir_dir, missing_files
        model, _, precision = (spec[len("openvino:"):] or "smollm2").partition("@")
        try:
            ok = not missing_files(ir_dir(model or "smollm2"))
        except GenerationError:
            return False
        return ok and (precision != "bf16" or "BF16" in openvino_capabilities())
    return importlib.util.find_spec("torch") is not None


def _same_isa(recorded: dict[str, Any] | None, here: dict[str, Any]) -> bool:
    if not recorded:
        return False
    return recorded.get("isa") is not None and here["isa"] is not None and \
        recorded.get("arch") == here["arch"] and sorted(recorded["isa"]) == sorted(here["isa"])


def choose_engine(record: Path | None = None, cpu: dict[str, Any] | None = None) -> EngineChoice:
    """The engine for ``auto`` (see the module docstring for the rule)."""
    here = cpu or cpu_info()
    path = record or record_path()
    why = f"no engine measurement in {path}"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    eng = data.get("engines")
    if eng:
        if not _same_isa((eng.get("machine") or {}).get("cpu"), here):
            why = f"the engine measurement in {path} is from a CPU with other ISA flags"
        else:
            best: tuple[float, str] | None = None
            for spec, res in eng.get("results", {}).items():
                runs = res.get("runs") or []
                if not runs or not res.get("batch_invariant") or not usable(spec):
                    continue
                top = max(runs, key=lambda r: r["batch_size"])
                if best is None or top["tokens_per_s"] > best[0]:
                    best = (top["tokens_per_s"], spec)
            if best is not None:
                return EngineChoice(best[1], f"fastest batch-invariant engine measured on this ISA ({path})", best[0])
            why = f"no engine measured in {path} is batch-invariant and usable here"
    spec = next((s for s in FALLBACKS if usable(s)), FALLBACKS[-1])
    return EngineChoice(spec, why + "; the reference engine is used (run benchmarks/bench_generation.py "
                        "--parts engines on this machine)")
