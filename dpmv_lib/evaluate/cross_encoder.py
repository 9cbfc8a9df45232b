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

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core.errors import ParameterError

GRADE_MAX = 4


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


def other_query_negatives(queries: Sequence[str], responses: Sequence[str], share: float, seed: int = 0
                          ) -> tuple[list[str], list[str]]:
    """Relevance negatives built without labels: each of ``round(share * n)`` responses, drawn at
    random (``seed``), paired with the query of another unit whose query differs from its own (an
    answer written for a different question, relevance 0 by the guide's scale)."""
    q, r = _pairs(queries, responses)
    if not (np.isfinite(share) and share >= 0):
        raise ParameterError(f"negative share must be finite and >= 0, got {share!r}")
    rng = np.random.default_rng(seed)
    qa = np.asarray(q, dtype=object)
    out_q, out_r = [], []
    for i in rng.permutation(len(q))[:round(share * len(q))]:
        others = np.flatnonzero(qa != q[i])
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
    def _network(base: Path, seed: int) -> Any:
        import torch
        from transformers import AutoModel

        class PairScorer(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.encoder = AutoModel.from_pretrained(str(base))
                torch.manual_seed(seed)
                self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)

            def forward(self, batch: Any) -> Any:
                h = self.encoder(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(h.dtype)
                return self.head((h * mask).sum(1) / mask.sum(1)).squeeze(-1)

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
        scores 0, as every holistic dimension of the judge does."""
        import torch

        q, r = _pairs(queries, responses)
        out = np.zeros(len(q))
        with torch.no_grad():
            for i in range(0, len(q), batch_size):
                batch = self.tokenizer(q[i:i + batch_size], r[i:i + batch_size], truncation=True,
                                       max_length=self.config.max_length, padding=True, return_tensors="pt")
                out[i:i + batch_size] = self.model(batch).numpy()
        out[[not a.strip() for a in r]] = 0.0
        return out
