"""A judge that reads the query and the response together: a cross-encoder fine-tuned on the
independent labels (paper C.5 "Utility judging").

The rubric judge's holistic features (:mod:`.holistic`) come from a bi-encoder: the query and each
response sentence are embedded apart and only their similarities meet. For relevance ("does it
address the query?", ``data/judge_labels/GUIDE.md``) that cannot tell a real step on the query's
topic from a real step on another topic. A :class:`CrossEncoder` feeds "query [SEP] response" to one
transformer, so every response token attends to the query: the offline all-MiniLM-L6-v2
(:func:`~.encoders.minilm_path`, or any local BERT-family model directory), mean pooling over the
pair's tokens and one linear output, every weight fine-tuned (``torch.optim.AdamW``, linear decay)
to the 0-4 grade of one dimension by design-weighted squared error. The prediction is a score on the
grade scale; cut points (:func:`~.u_validity.fit_cuts`) turn it into grades as they do the holistic
scores.

Training is seeded (weight init of the output, batch order) and runs on the CPU in float32;
the same inputs, seed and machine give the same weights.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core.errors import ParameterError

GRADE_MAX = 4
SAVE_FORMAT = "dpmv-cross-encoder-1"   # the layout save() writes and load() reads


@dataclass(frozen=True)
class CrossEncoderConfig:
    """Fine-tuning settings: ``epochs`` passes over the distinct (query, response) units, batches of
    ``batch_size``, AdamW at ``learning_rate`` decayed linearly to 0, ``weight_decay``; pairs cut to
    ``max_length`` tokens; ``seed`` fixes the output layer's initial weights and the batch order."""

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 3e-5
    weight_decay: float = 0.01
    max_length: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_length"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ParameterError(f"cross-encoder {name} must be a positive integer, got {v!r}")
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ParameterError(f"cross-encoder learning_rate must be finite and positive, got {self.learning_rate!r}")
        if not (np.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ParameterError(f"cross-encoder weight_decay must be finite and >= 0, got {self.weight_decay!r}")


def _pairs(queries: Sequence[str], responses: Sequence[str]) -> tuple[list[str], list[str]]:
    if isinstance(queries, str) or isinstance(responses, str):
        raise ParameterError("the cross-encoder takes sequences of queries and responses, not one string")
    q, r = [str(x) for x in queries], [str(x) for x in responses]
    if len(q) != len(r):
        raise ParameterError(f"{len(q)} queries but {len(r)} responses")
    return q, r


def other_query_negatives(queries: Sequence[str], responses: Sequence[str], share: float, seed: int = 0,
                          groups: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """Relevance negatives built without labels: each of ``round(share * n)`` responses, drawn at
    random (``seed``), paired with the query of another unit whose query differs from its own (an
    answer written for a different question, relevance 0 by the guide's scale); with ``groups`` (one
    per unit, e.g. the slot domain its query is routed to), of another unit of another group only."""
    q, r = _pairs(queries, responses)
    if not (np.isfinite(share) and share >= 0):
        raise ParameterError(f"negative share must be finite and >= 0, got {share!r}")
    if groups is not None and len(groups) != len(q):
        raise ParameterError(f"{len(q)} units but {len(groups)} groups")
    rng = np.random.default_rng(seed)
    qa = np.asarray(q, dtype=object)
    ga = np.asarray(groups if groups is not None else [""] * len(q), dtype=object)
    out_q, out_r = [], []
    for i in rng.permutation(len(q))[:round(share * len(q))]:
        others = np.flatnonzero((qa != q[i]) & ((ga != ga[i]) if groups is not None else True))
        if len(others):
            out_q.append(q[others[rng.integers(len(others))]])
            out_r.append(r[i])
    return out_q, out_r


class CrossEncoder:
    """A fine-tuned query-response scorer (module docstring). Build it with :meth:`fit`."""

    def __init__(self, model: Any, tokenizer: Any, config: CrossEncoderConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config

    @staticmethod
    def _network(base: Path | None, seed: int, encoder_config: Any = None) -> Any:
        """The pair scorer: the encoder from ``base``'s weights (or, with ``encoder_config``, its
        architecture alone, for weights loaded next) and an output layer initialised with ``seed``."""
        import torch
        from transformers import AutoModel

        class PairScorer(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.encoder = (AutoModel.from_config(encoder_config) if encoder_config is not None
                                else AutoModel.from_pretrained(str(base)))
                torch.manual_seed(seed)
                self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)

            def forward(self, batch: Any) -> Any:
                h = self.encoder(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
                pooled = (h * mask).sum(1) / mask.sum(1)
                # the output layer as an elementwise product and a sum over each row: a matrix
                # product may change its summation order with the number of rows
                return (pooled * self.head.weight[0]).sum(-1) + self.head.bias[0]

        return PairScorer()

    @classmethod
    def fit(cls, queries: Sequence[str], responses: Sequence[str], labels: Sequence[float] | np.ndarray,
            weights: Sequence[float] | np.ndarray | None = None, config: CrossEncoderConfig | None = None, *,
            base: str | Path | None = None, log: Callable[[str], None] | None = None) -> "CrossEncoder":
        """Fine-tune on one row per (query, response) with its 0-4 ``labels`` and design ``weights``
        (default 1). ``base``: a local BERT-family model directory (default the offline MiniLM)."""
        import torch
        from transformers import AutoTokenizer

        from .encoders import minilm_path

        config = config or CrossEncoderConfig()
        q, r = _pairs(queries, responses)
        y = np.asarray(labels, float)
        w = np.ones(len(q)) if weights is None else np.asarray(weights, float)
        if len(q) == 0:
            raise ParameterError("the cross-encoder needs at least one labelled (query, response)")
        if y.shape != (len(q),) or w.shape != (len(q),):
            raise ParameterError(f"{len(q)} pairs but labels of shape {y.shape} and weights of shape {w.shape}")
        if not np.all(np.isfinite(y)) or y.min() < 0 or y.max() > GRADE_MAX:
            raise ParameterError(f"labels must be grades in [0, {GRADE_MAX}]")
        if not np.all(np.isfinite(w)) or w.min() < 0 or w.sum() == 0:
            raise ParameterError("weights must be finite, non-negative and not all 0")
        base = Path(base) if base is not None else minilm_path()
        if not (base / "config.json").exists():
            raise ParameterError(f"no model at {base} (a local model directory with config.json)")
        torch.manual_seed(config.seed)
        tok = AutoTokenizer.from_pretrained(str(base))
        net = cls._network(base, config.seed)
        opt = torch.optim.AdamW(net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        per_epoch = -(-len(q) // config.batch_size)
        sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, config.epochs * per_epoch)
        yt = torch.tensor(y, dtype=torch.float32)
        wt = torch.tensor(w / w.mean(), dtype=torch.float32)
        t0 = time.monotonic()
        for epoch in range(config.epochs):
            net.train()
            order = np.random.default_rng([config.seed, epoch]).permutation(len(q))
            total = 0.0
            for i in range(0, len(q), config.batch_size):
                idx = order[i:i + config.batch_size]
                batch = tok([q[j] for j in idx], [r[j] for j in idx], truncation=True,
                            max_length=config.max_length, padding=True, return_tensors="pt")
                ix = torch.as_tensor(idx)
                loss = (wt[ix] * (net(batch) - yt[ix]) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            if log is not None:
                log(f"cross-encoder epoch {epoch + 1}/{config.epochs}: weighted squared error "
                    f"{total / len(q):.3f}, {time.monotonic() - t0:.0f} s")
        net.eval()
        return cls(net, tok, config)

    def predict(self, queries: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Scores on the 0-4 grade scale (unclipped), one per (query, response); an empty response
        scores 0, as every holistic dimension of the judge does. Each pair is padded to a width set
        by its own token count (:func:`~.encoders.padded_batches`), so its score is the same bytes
        alone and in any batch."""
        import torch

        from .encoders import padded_batches

        q, r = _pairs(queries, responses)
        out = np.zeros(len(q))
        with torch.inference_mode():
            for idx, feats in padded_batches(self.tokenizer, q, self.config.max_length, batch_size, pairs=r):
                batch = {k: torch.from_numpy(v) for k, v in feats.items()}
                out[idx] = self.model(batch).to(torch.float32).numpy()
        out[[not a.strip() for a in r]] = 0.0
        return out

    def save(self, path: str | Path) -> str:
        """Write the weights as float16 safetensors (the fine-tuned encoder and the output layer;
        ``config`` in the header's metadata), atomically; returns the file's sha256."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        state = {k: v.detach().to("cpu").half().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(tmp), metadata={"config": json.dumps(asdict(self.config), sort_keys=True),
                                             "encoder_config": self.model.encoder.config.to_json_string(),
                                             "format": SAVE_FORMAT})
        _sort_header(tmp)
        tmp.replace(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()

    @classmethod
    def load(cls, path: str | Path, *, precision: str = "fp32", tokenizer: str | Path | None = None) -> "CrossEncoder":
        """The cross-encoder :meth:`save` wrote (float16 weights and the encoder's architecture, run
        in float32, or in bfloat16 with ``precision="bf16"``); ``tokenizer``: the directory of the
        tokenizer it was fine-tuned with (default the offline MiniLM's)."""
        import torch
        from safetensors import SafetensorError, safe_open
        from transformers import AutoConfig, AutoTokenizer

        from .encoders import minilm_path

        if precision not in ("fp32", "bf16"):
            raise ParameterError(f"cross-encoder precision must be 'fp32' or 'bf16', got {precision!r}")
        path = Path(path)
        if not path.is_file():
            raise ParameterError(f"no cross-encoder weights at {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                state = {k: f.get_tensor(k).to(torch.float32) for k in f.keys()}
            if meta.get("format") != SAVE_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, this code reads {SAVE_FORMAT!r}")
            config = CrossEncoderConfig(**json.loads(meta["config"]))
            arch = json.loads(meta["encoder_config"])
            encoder_config = AutoConfig.for_model(arch.pop("model_type"), **arch)
        except (OSError, KeyError, TypeError, ValueError, SafetensorError) as exc:
            raise ParameterError(f"{path}: not a saved cross-encoder ({exc})") from exc
        net = cls._network(None, config.seed, encoder_config)
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise ParameterError(f"{path}: weights do not fit the architecture it names ({exc})") from exc
        net.eval()
        if precision == "bf16":
            net.to(torch.bfloat16)
        tok = Path(tokenizer) if tokenizer is not None else minilm_path()
        return cls(net, AutoTokenizer.from_pretrained(str(tok)), config)


def _sort_header(path: Path) -> None:
    """Rewrite a safetensors file's JSON header with sorted keys (padded with spaces to 8 bytes, as
    the format writes it), so the same weights give the same bytes and sha256: ``save_file`` writes
    the header's keys in an order that changes from process to process."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    text = json.dumps(json.loads(raw[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def pair_text(query: str, response: str) -> str:
    """One string per (query, response) (a JSON list of the two): the key under which
    :class:`PairScores` caches a pair's score."""
    return json.dumps([query, response], ensure_ascii=False)


class PairScores:
    """A cross-encoder as an encoder of :func:`pair_text` strings into one column, its score, so
    :class:`~.encoders.CachedEncoder` keeps the scores on disk keyed by (``id``, pair). ``id`` names
    the weights (``name``, e.g. their sha256 prefix), the precision and the padding rule."""

    dim = 1

    def __init__(self, model: CrossEncoder, name: str, precision: str) -> None:
        from .encoders import PADDING_ID

        self.model = model
        self.id = f"ce-{name}-{precision}-{PADDING_ID}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        pairs = [json.loads(t) for t in texts]
        return self.model.predict([p[0] for p in pairs], [p[1] for p in pairs]).astype(np.float32)[:, None]
