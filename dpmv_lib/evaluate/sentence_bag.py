"""A relevance scorer that reads the response sentence by sentence against its query (paper C.5
"Utility judging"): the judge's relevance beside the feature model
(:data:`~.u_validity.SENTENCE_BAGGED`, :class:`~.holistic.SentenceBagged`), as the rule of
:mod:`dpmv_lib.experiments.judge_features` adopted it.

Relevance ("does it address the query?", ``data/judge_labels/GUIDE.md``) is often decided by one
sentence: the one that answers. The feature model (:mod:`.holistic`) sees a response through
summaries of its sentences' similarities; a :class:`SentenceBag` learns which direction of a
sentence's embedding, seen from the query, answers it. Each sentence s of the response
(:func:`~.rubric_judge.split_sentences`) with the query q, both unit embeddings of the judge's
encoder, gives one row [q * s, s, q . s] (:func:`bag_rows`; a judge's bags of (query, response)
pairs: :meth:`~.rubric_judge.RubricJudge.holistic_features_vectors_and_bags`); a linear score per
row, pooled over the sentences by a soft maximum at ``temperature`` (T log sum exp(z / T)), is the latent of a
cumulative logistic model of the 0-4 grade with four thresholds. The score is
sum_k sigmoid(pooled - theta_k), in [0, 4], the expected grade as the feature model's is.

:func:`fit` minimises the design-weighted binary cross-entropy of the four cumulative targets
(grade >= k, k = 1..4) plus ``l2`` x |w|^2, full batch, ``torch.optim.Adam`` in float64 from zero
weights and thresholds (-1, 0, 1, 2): no random draw, so the same rows give the same model (on
another CPU, to rounding). Its settings (:class:`SentenceBagConfig`) were chosen by 4-fold grouped cross-validation
inside the fitting half of U's split.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.errors import ParameterError

GRADE_MAX = 4
SAVE_FORMAT = "dpmv-sentence-bag-1"
INITIAL_THRESHOLDS = (-1.0, 0.0, 1.0, 2.0)


@dataclass(frozen=True)
class SentenceBagConfig:
    """Fitting settings: soft-maximum ``temperature``, ``l2`` penalty on the row weights, ``epochs``
    full-batch Adam steps at ``learning_rate``."""

    temperature: float = 0.5
    l2: float = 1e-4
    epochs: int = 300
    learning_rate: float = 0.02

    def __post_init__(self) -> None:
        for name in ("temperature", "learning_rate"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ParameterError(f"sentence bag {name} must be finite and > 0, got {v!r}")
        if not (np.isfinite(self.l2) and self.l2 >= 0):
            raise ParameterError(f"sentence bag l2 must be finite and >= 0, got {self.l2!r}")
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise ParameterError(f"sentence bag epochs must be a positive integer, got {self.epochs!r}")


def bag_rows(query: np.ndarray, sentences: np.ndarray) -> np.ndarray:
    """One row [q * s, s, q . s] per sentence embedding s (rows of ``sentences``) with the query
    embedding q; a response without sentences gives one row of zeros."""
    q = np.asarray(query, float).reshape(-1)
    S = np.asarray(sentences, float).reshape(-1, len(q)) if np.size(sentences) else np.zeros((1, len(q)))
    return np.hstack([S * q, S, (S @ q)[:, None]])


def _pooled(rows: np.ndarray, weights: np.ndarray, temperature: float) -> float:
    z = rows @ weights / temperature
    top = float(np.max(z))
    return temperature * (top + float(np.log(np.sum(np.exp(z - top)))))


@dataclass(frozen=True)
class SentenceBag:
    """A fitted scorer (module docstring): one weight per bag column, four thresholds, the
    soft-maximum temperature and what it was fitted on (``fit_info``)."""

    weights: tuple[float, ...]
    thresholds: tuple[float, ...]
    temperature: float
    fit_info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.thresholds) != GRADE_MAX:
            raise ParameterError(f"sentence bag: {len(self.thresholds)} thresholds, want {GRADE_MAX}")
        if not (len(self.weights) and np.all(np.isfinite(self.weights)) and np.all(np.isfinite(self.thresholds))):
            raise ParameterError("sentence bag: weights and thresholds must be finite and not empty")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ParameterError(f"sentence bag temperature must be finite and > 0, got {self.temperature!r}")

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The weights and thresholds as arrays, converted once (the judge scores every turn)."""
        return np.asarray(self.weights, float), np.asarray(self.thresholds, float)

    def score_bags(self, bags: Sequence[np.ndarray]) -> np.ndarray:
        """The score in [0, 4] of each bag of :func:`bag_rows`."""
        w, th = self._arrays
        out = np.empty(len(bags))
        for i, rows in enumerate(bags):
            rows = np.atleast_2d(np.asarray(rows, float))
            if rows.shape[1] != len(w):
                raise ParameterError(f"sentence bag rows have {rows.shape[1]} columns, the model takes {len(w)}")
            out[i] = float(np.sum(1.0 / (1.0 + np.exp(th - _pooled(rows, w, self.temperature)))))
        return out

    def to_dict(self) -> dict:
        return {"format": SAVE_FORMAT, "weights": [float(x) for x in self.weights],
                "thresholds": [float(x) for x in self.thresholds], "temperature": float(self.temperature),
                "fit_info": dict(self.fit_info)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "SentenceBag":
        if obj.get("format") != SAVE_FORMAT:
            raise ParameterError(f"sentence bag format {obj.get('format')!r}, this code reads {SAVE_FORMAT}")
        try:
            return cls(tuple(float(x) for x in obj["weights"]), tuple(float(x) for x in obj["thresholds"]),
                       float(obj["temperature"]), dict(obj.get("fit_info", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ParameterError(f"sentence bag: malformed entry ({exc})") from exc


def fit(bags: Sequence[np.ndarray], labels: Sequence[float], weights: Sequence[float] | None = None,
        config: SentenceBagConfig | None = None, fit_info: Mapping[str, Any] | None = None) -> SentenceBag:
    """A :class:`SentenceBag` fitted to the 0-4 ``labels`` of ``bags`` (:func:`bag_rows`), each
    weighted by ``weights`` (default 1; the labels' design weights)."""
    import torch

    cfg = config or SentenceBagConfig()
    y = np.asarray(labels, float)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, float)
    if len(bags) != len(y) or len(w) != len(y) or not len(y):
        raise ParameterError(f"sentence bag fit: {len(bags)} bags, {len(y)} labels and {len(w)} weights")
    if not (np.all(np.isfinite(y)) and np.all((y >= 0) & (y <= GRADE_MAX))):
        raise ParameterError(f"sentence bag fit: labels must be grades in 0-{GRADE_MAX}")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
        raise ParameterError("sentence bag fit: weights must be finite, non-negative and not all 0")
    arrays = [np.atleast_2d(np.asarray(b, float)) for b in bags]
    width = {a.shape[1] for a in arrays}
    if len(width) != 1 or any(len(a) == 0 for a in arrays):
        raise ParameterError(f"sentence bag fit: every bag needs rows of one width, got widths {sorted(width)}")
    X = torch.tensor(np.vstack(arrays), dtype=torch.float64)
    seg = torch.repeat_interleave(torch.arange(len(arrays)), torch.tensor([len(a) for a in arrays]))
    n = len(arrays)
    target = torch.tensor(np.stack([(y >= k) for k in range(1, GRADE_MAX + 1)], 1), dtype=torch.float64)
    wt = torch.tensor(w, dtype=torch.float64)
    W = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
    th = torch.tensor(INITIAL_THRESHOLDS, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([W, th], lr=cfg.learning_rate)
    t = cfg.temperature
    for _ in range(int(cfg.epochs)):
        opt.zero_grad()
        z = X @ W / t
        top = torch.full((n,), -torch.inf, dtype=torch.float64).scatter_reduce(0, seg, z, reduce="amax")
        pooled = t * (top + torch.log(torch.zeros(n, dtype=torch.float64).index_add(0, seg, torch.exp(z - top[seg]))))
        bce = torch.nn.functional.binary_cross_entropy_with_logits(pooled[:, None] - th[None, :], target,
                                                                   reduction="none").sum(1)
        loss = (bce * wt).sum() / wt.sum() + cfg.l2 * (W ** 2).sum()
        loss.backward()
        opt.step()
    info = {"config": asdict(cfg), "units": n, **dict(fit_info or {})}
    return SentenceBag(tuple(W.detach().double().tolist()), tuple(th.detach().double().tolist()), t, info)
