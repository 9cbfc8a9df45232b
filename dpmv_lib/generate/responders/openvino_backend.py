"""OpenVINO GenAI backend: a local causal LM exported once to an OpenVINO IR
(:mod:`.openvino_export`, ``bash tools/export_openvino.sh``) and run by ``openvino_genai.LLMPipeline``
on the CPU (continuous batching, KV cache inside the model).

``precision``: "f32" runs the float32 IR as it is; "bf16" asks the CPU plugin for bfloat16
inference (``INFERENCE_PRECISION_HINT``; needs a CPU that OpenVINO reports BF16-capable:
AVX512-BF16 or AMX). Prompts are rendered by the model's chat template, tokenised without
special tokens like the other backends, left-padded in batches of ``batch_size`` (longest first)
and decoded greedily, or one by one with a per-prompt seed when sampling.

Measured on an AVX512-BF16 CPU without AMX (tests/test_openvino_backend.py,
benchmarks/results/generation.md): f32 greedy texts do not depend on the batch; bf16 texts repeat
exactly at a fixed batch size and were the same at batch 8, 32 and 64, but 6 of 16 benchmark
prompts generated alone (batch 1: other bf16 kernels) got other texts, so f32 is the default and
the reference.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from ...common import progress
from ...core.errors import GenerationError
from .base import DecodingConfig, Prompt, Responder, key_seed
from .openvino_export import EXPORT_HINT, ir_dir, missing_files, model_source
from .transformers_backend import cpu_threads, length_batches

_log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16")
_PIPES: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def openvino_capabilities() -> list[str]:
    """The CPU plugin's optimisation capabilities (e.g. ``BF16``, ``FP32``, ``INT8``) as OpenVINO
    detects them on this machine; [] when openvino is not installed."""
    try:
        import openvino as ov
    except ImportError:
        return []
    return list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def _pipeline(path: str, precision: str, threads: int, extra: tuple = ()):
    key = (path, precision, threads, extra)
    with _LOCK:
        if key not in _PIPES:
            import openvino_genai as og
            cfg = {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, **dict(extra)}
            try:
                # an explicit scheduler: no prefix cache (reused KV blocks made repeated bf16 calls differ)
                sched = og.SchedulerConfig()
                sched.enable_prefix_caching = False
                _PIPES[key] = (og.LLMPipeline(path, "CPU", scheduler_config=sched, **cfg), threading.Lock())
            except RuntimeError as exc:
                raise GenerationError(f"OpenVINO GenAI cannot load the IR at {path}: {exc}") from exc
        return _PIPES[key]


class OpenVINOResponder(Responder):
    """A local causal LM through OpenVINO GenAI (CPU).

    ``model``: "smollm2" (the packaged GGUF, exported once), a ``.gguf`` file or an HF model
    directory whose IR :func:`~.openvino_export.ir_dir` holds; ``ir``: an explicit IR directory
    instead. ``precision``: "f32" or "bf16" (another revision in the generation cache).
    ``threads``: default the cores not busy with other processes (:func:`cpu_threads`).
    ``config``: further CPU-plugin properties (e.g. ``{"KV_CACHE_PRECISION": "f32"}``)."""

    backend = "openvino"

    def __init__(self, model: str = "smollm2", decoding: DecodingConfig | None = None, *,
                 precision: str = "f32", batch_size: int = 32, threads: int | None = None,
                 ir: str | None = None, config: dict[str, Any] | None = None, revision: str | None = None,
                 name: str | None = None) -> None:
        self.decoding = decoding or DecodingConfig()
        if self.decoding.no_repeat_ngram_size > 0:
            # measured: GenerationConfig.no_repeat_ngram_size left every greedy text of the development
            # pairs unchanged in this pipeline (openvino-genai 2026.4), so it is refused, not ignored
            raise GenerationError("the openvino backend does not apply no_repeat_ngram_size (its pipeline ignored it); "
                                  "use repetition_penalty")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise GenerationError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if precision not in PRECISIONS:
            raise GenerationError(f"openvino precision must be one of {PRECISIONS}, got {precision!r}")
        self.batch_size, self.precision, self.threads = batch_size, precision, threads
        path, self.model_id, rev = model_source(model)
        self.ir = Path(ir).expanduser() if ir else ir_dir(model)
        self._model_arg = model
        self.name = name or ("smollm2" if model == "smollm2" else (path.stem if path.is_file() else path.name))
        self.revision = (revision or rev) + f"+openvino-{precision}"
        self.config = tuple(sorted((config or {}).items()))
        self._pipe: Any = None
        self.generated_tokens = 0

    def load(self):
        """The GenAI pipeline, loaded once per process and IR/precision/threads; a clear error
        when openvino-genai is missing, the IR was not exported, or bf16 is not supported here."""
        if self._pipe is not None:
            return self._pipe
        if importlib.util.find_spec("openvino_genai") is None:
            raise GenerationError("the openvino backend needs openvino-genai: pip install -e '.[openvino]'")
        miss = missing_files(self.ir)
        if miss:
            raise GenerationError(f"no OpenVINO IR of {self._model_arg!r} at {self.ir} (missing {', '.join(miss)}); "
                                  + EXPORT_HINT.format(model=self._model_arg))
        if self.precision == "bf16" and "BF16" not in openvino_capabilities():
            raise GenerationError("precision 'bf16' needs a CPU that OpenVINO reports BF16-capable (AVX512-BF16 "
                                  f"or AMX); this one offers {openvino_capabilities()}")
        threads = cpu_threads(self.threads)
        self._pipe, self._lock = _pipeline(str(self.ir), self.precision, threads, self.config)
        cores = os.cpu_count() or 1  # what cpu_threads() chooses from
        msg = f"OpenVINO {self.precision} on {threads} of {cores} cores"
        if not self.threads and threads < cores:  # the others were busy when the pipeline was built
            msg += (": the other cores were busy with other processes when it loaded, and the thread "
                    "count stays fixed for this process (restart it on free cores, or pass threads=)")
            _log.warning("%s", msg)
        progress.note(f"generate ({self.name})", msg)
        return self._pipe

    def render(self, prompt: Prompt) -> str:
        return self.load().get_tokenizer().apply_chat_template(self.messages(prompt), add_generation_prompt=True)

    def _config(self, seed: int | None = None):
        import openvino_genai as og
        gc = og.GenerationConfig()
        gc.max_new_tokens = self.decoding.max_new_tokens
        gc.apply_chat_template = False
        gc.repetition_penalty = float(self.decoding.repetition_penalty)
        gc.frequency_penalty = float(self.decoding.frequency_penalty)
        if self.decoding.greedy:
            gc.do_sample = False
        else:
            gc.do_sample, gc.temperature, gc.top_p = True, float(self.decoding.temperature), float(self.decoding.top_p)
            gc.rng_seed = int(seed or 0)
        return gc

    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        pipe = self.load()
        tok = pipe.get_tokenizer()
        texts = [self.render(p) for p in prompts]
        stops = {tok.get_eos_token_id(), tok.get_pad_token_id()} | set(pipe.get_generation_config().stop_token_ids)
        out: list[str] = [""] * len(texts)
        if self.decoding.greedy:
            lengths = [int(tok.encode(t, add_special_tokens=False).input_ids.shape[1]) for t in texts]
            groups = [(b, self._config()) for b in length_batches(lengths, self.batch_size, 0.0)]
        else:   # one prompt per call: its seed is its own, whatever else is generated
            groups = [([i], self._config(key_seed(p.key))) for i, p in enumerate(prompts)]
        for idx, gc in groups:
            enc = tok.encode([texts[i] for i in idx], add_special_tokens=False)
            with self._lock:          # one generate at a time per pipeline (shared by responders)
                res = pipe.generate(enc, gc)
            for row, i in enumerate(idx):
                ids = list(res.tokens[row])
                n = next((k for k, t in enumerate(ids) if t in stops), len(ids))
                self.generated_tokens += n
                out[i] = tok.decode(ids[:n], skip_special_tokens=True).strip()
        return out
