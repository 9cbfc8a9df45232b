"""The judge's holistic scores learned from independent labels (paper C.5 "Utility judging": U is
the mean of relevance, correctness, actionability and personalisation, over 4).

The rubric judge measures each turn with item-independent features of the query and the response
(:data:`FEATURES`, each dimension reading those of :data:`DIMENSION_FEATURES`; computed by
:meth:`dpmv_lib.evaluate.rubric_judge.RubricJudge.holistic_features`:
similarity to the query, to the behaviour catalogue's attribute-specific and generic descriptions,
both at once per sentence (a sentence that answers the query with attribute-specific advice),
advice, concrete detail, repetition, truncation, placeholders, personal-claim cues, first- and
third-person voice, and principal components of the query's and response's embeddings,
:class:`ContentProjection`). A :class:`HolisticModel` turns them into the four 0-4 scores: per
dimension and grade boundary k = 1..4 one L2-regularised logistic regression of P(label >= k)
(``sklearn.linear_model.LogisticRegressionCV`` on standardised features, C chosen by 5-fold
cross-validated log loss inside the fitting half), and the score is sum_k P(label >= k), the expected grade of the
cumulative model.

It is fitted (:func:`fit`) on the fitting half of ``data/judge_labels``
(:func:`dpmv_lib.evaluate.u_validity.split_halves`, seed :data:`~.u_validity.SPLIT_SEED`) and
nothing else; :mod:`~.u_validity` measures it on the other half. A dimension in
:attr:`HolisticModel.cross_encoded` (those the feature study's rule adopted) is scored by a
cross-encoder fine-tuned on the same rows (:mod:`.cross_encoder`, :class:`CrossEncoded`; its float16
weights are committed beside the model and checked by their sha256), alone or blended with the
boundaries' score (actionability: alone); a dimension in :attr:`HolisticModel.sentence_bagged` (those
the sentence-bag study's rule adopted) by a sentence bag fitted on the same rows (:mod:`.sentence_bag`,
:class:`SentenceBagged`; its weights are part of the model), blended with the boundaries' score
(relevance: 0.5 x the bag's + 0.5 x the boundaries'). The fitted model is committed
(:data:`MODEL_FILE`, written by ``python -m dpmv_lib.evaluate.u_validity``) and a test refits it from
the committed labels. Holistic labels depend only on the query and the response, so the model sees
each distinct (query, response) once.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from .rubric import DIMENSIONS

#: per sentence, its cosine to the query times its best cosine to a specific description (and times
#: its margin over the best generic one); the largest over the response's sentences
QUERY_SPECIFIC = ("query_specific", "query_specific_margin")
#: the response's content seen from its query: the first principal components of [q * r, r]
#: (:class:`ContentProjection`)
CONTENT_COMPONENTS = 64
CONTENT = tuple(f"content_{i:02d}" for i in range(1, CONTENT_COMPONENTS + 1))
FEATURES = ("sentences", "log_words", "query_max", "query_mean", "query_soft", "specific_max",
            "generic_max", "specific_margin", "specific_mean", "echo", "repeated", "truncated",
            "advice", "concrete", "concrete_sentences", "placeholders", "claim", "care", "negations",
            "first_person", "third_person", "questions", "action_rule", *QUERY_SPECIFIC, *CONTENT)
# What each dimension reads. Relevance ("does it address the query?", data/judge_labels/GUIDE.md)
# reads no catalogue similarity, so advice about another topic cannot earn it: fixed from the guide
# before the fit, and kept by dpmv_lib.experiments.judge_features (reading every feature, or the
# content components, raises its kappa inside the fitting half but lets more off-topic answers tie
# or win on the degradation set). No committed dimension reads CONTENT: it is the study's candidate.
# Actionability ("can the user act on it?") reads every feature but the per-sentence joins of
# query and catalogue (QUERY_SPECIFIC, a relevance candidate the study did not adopt) and narration
# (NARRATION, a candidate of every dimension the study did not adopt): in the same study the
# catalogue-similarity features carry concreteness the labels reward (the study's table is in
# data/judge_labels/README.md); its guide scale does not ask whether the steps fit the query.


def uses_content(columns: Sequence[str]) -> bool:
    """Whether ``columns`` include a :data:`CONTENT` feature (a model reading them needs a
    :class:`ContentProjection`)."""
    return not set(columns).isdisjoint(CONTENT)


#: form features of the response (length, repetition, truncation, echo, placeholders, questions)
FORM = ("sentences", "log_words", "echo", "repeated", "truncated", "placeholders", "first_person", "questions")
#: sentences narrating about someone rather than answering the user: a candidate of
#: :mod:`dpmv_lib.experiments.judge_features` that the rule did not adopt, read by no dimension
NARRATION = ("third_person",)
#: every feature but the per-sentence joins of query and catalogue, the content components and narration
SEPARATE = tuple(f for f in FEATURES if f not in QUERY_SPECIFIC and f not in CONTENT and f not in NARRATION)
DIMENSION_FEATURES: Mapping[str, tuple[str, ...]] = {
    "relevance": ("query_max", "query_mean", "query_soft", "advice", *FORM),
    "correctness": SEPARATE,
    "actionability": SEPARATE,
    "personalisation": SEPARATE,
}
C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
CV_FOLDS = 5
MIN_CLASS = 5            # a boundary with fewer fitting units on one side is a constant rate
MODEL_FILE = "holistic_model.json"
REFIT_TOLERANCE = 1e-6   # a refit (scores or fitted numbers) on another CPU may differ in lbfgs's last digits
VERSION = 1


@dataclass(frozen=True)
class Boundary:
    """P(label >= k) for one grade boundary: a logistic model on standardised features, or a
    constant rate where the fitting half has fewer than :data:`MIN_CLASS` units on one side."""

    k: int
    columns: tuple[str, ...] = ()
    mean: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    coef: tuple[float, ...] = ()
    intercept: float = 0.0
    C: float = math.nan
    constant: float | None = None

    def prob(self, X: np.ndarray) -> np.ndarray:
        """P(label >= k) for rows of all :data:`FEATURES`. The linear part is summed feature by
        feature in elementwise steps, so each row gets the same bytes whatever rows are scored with
        it (a matrix product or an axis sum may change its summation order with the batch)."""
        if self.constant is not None:
            return np.full(len(X), self.constant)
        z = np.full(len(X), self.intercept)
        for c, mean, scale, coef in zip(self.columns, self.mean, self.scale, self.coef):
            z += (X[:, FEATURES.index(c)] - mean) / scale * coef
        return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True, eq=False)
class ContentProjection:
    """The :data:`CONTENT` features: the first :data:`CONTENT_COMPONENTS` principal components of a
    turn's content vector (:func:`content_vector`), ``sklearn.decomposition.PCA`` fitted on the
    fitting half's distinct units (unsupervised: the labels are not read). ``mean`` and
    ``components`` are PCA's ``mean_`` and ``components_``."""

    mean: np.ndarray
    components: np.ndarray

    def __post_init__(self) -> None:
        mean, comp = np.asarray(self.mean, float), np.asarray(self.components, float)
        if mean.ndim != 1 or comp.shape != (CONTENT_COMPONENTS, len(mean)) or not (
                np.isfinite(mean).all() and np.isfinite(comp).all()):
            raise ParameterError(f"content projection: want a finite mean of length d and {CONTENT_COMPONENTS} x d "
                                 f"components, got {mean.shape} and {comp.shape}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "components", comp)

    @classmethod
    def fit(cls, vectors: np.ndarray) -> "ContentProjection":
        """PCA (full SVD, signs fixed by scikit-learn's ``svd_flip``) of the rows of ``vectors``."""
        from sklearn.decomposition import PCA

        V = np.asarray(vectors, float)
        if V.ndim != 2 or len(V) <= CONTENT_COMPONENTS:
            raise ParameterError(f"content projection: need more than {CONTENT_COMPONENTS} content vectors, "
                                 f"got shape {V.shape}")
        pca = PCA(CONTENT_COMPONENTS, svd_solver="full").fit(V)
        return cls(pca.mean_, pca.components_)

    def project(self, vector: np.ndarray) -> np.ndarray:
        """The :data:`CONTENT` features of one content vector (one row at a time, so a turn gets
        the same bytes in any batch)."""
        v = np.asarray(vector, float)
        if v.shape != self.mean.shape:
            raise ParameterError(f"the content projection takes vectors of length {len(self.mean)} (embeddings of "
                                 f"dimension {len(self.mean) // 2}), got {v.shape}: another encoder than the "
                                 "holistic model was fitted with")
        return self.components @ (v - self.mean)

    def complete(self, features: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """``features`` (rows of :data:`FEATURES`) with the :data:`CONTENT` columns projected from
        ``vectors``."""
        F = np.array(features, float)
        cols = [FEATURES.index(c) for c in CONTENT]
        for i, v in enumerate(np.asarray(vectors, float)):
            F[i, cols] = self.project(v)
        return F

    def max_difference(self, other: "ContentProjection") -> float:
        if self.components.shape != other.components.shape:
            return math.inf
        return float(max(np.max(np.abs(self.mean - other.mean)), np.max(np.abs(self.components - other.components))))

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "components": self.components.tolist()}


def content_vector(query: np.ndarray, sentences: np.ndarray) -> np.ndarray:
    """[q * r, r]: ``query``'s embedding times r elementwise, and r, where r is the unit mean of the
    response's ``sentences`` embeddings (zeros for a response without sentences)."""
    q = np.asarray(query, float)
    S = np.asarray(sentences, float).reshape(-1, len(q))
    r = S.mean(0) if len(S) else np.zeros(len(q))
    norm = float(np.linalg.norm(r))
    r = r / norm if norm > 0 else r
    return np.concatenate([q * r, r])


def blend_scores(cross: Any, features: Any, feature_weight: float) -> np.ndarray:
    """(1 - w) x ``cross`` clipped to 0-4 + w x ``features`` (``cross`` clipped alone where w = 0):
    a cross-encoded dimension's score (:class:`CrossEncoded`)."""
    clipped = np.clip(np.asarray(cross, float), 0.0, 4.0)
    w = float(feature_weight)
    return (1.0 - w) * clipped + w * np.asarray(features, float) if w else clipped


def _check_feature_weight(what: str, weight: float) -> None:
    if not 0.0 <= weight < 1.0:
        raise ParameterError(f"{what}: feature_weight must lie in [0, 1), got {weight!r}")


@dataclass(frozen=True)
class CrossEncoded:
    """A dimension the judge scores with a cross-encoder (:mod:`.cross_encoder`) fine-tuned on the
    same fitting half instead of with its boundaries: the weights' file name (beside the model file),
    their sha256 and what they were fitted on. The boundaries stay in the model: they are the
    feature model the cross-encoder was compared with (:mod:`dpmv_lib.experiments.judge_features`).
    ``feature_weight``: the boundaries' weight in the dimension's score, (1 - w) x the cross-encoder's
    score clipped to 0-4 + w x the boundaries' (0: the cross-encoder alone; 0.5: the mean of the two)."""

    file: str
    sha256: str
    fit_info: Mapping[str, Any]
    feature_weight: float = 0.0

    def __post_init__(self) -> None:
        _check_feature_weight(f"cross-encoded {self.file}", self.feature_weight)

    def to_dict(self) -> dict:
        return {"file": self.file, "sha256": self.sha256, "fit_info": dict(self.fit_info),
                **({"feature_weight": self.feature_weight} if self.feature_weight else {})}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "CrossEncoded":
        return cls(str(obj["file"]), str(obj["sha256"]), dict(obj.get("fit_info", {})),
                   float(obj.get("feature_weight", 0.0)))


@dataclass(frozen=True)
class SentenceBagged:
    """A dimension the judge scores with a sentence bag (:mod:`.sentence_bag`) fitted on the same
    fitting half, blended with the boundaries' score: (1 - w) x the bag's + w x the boundaries'
    (``feature_weight`` w; :func:`blend_scores`). The bag's weights are part of the model."""

    bag: Any
    feature_weight: float = 0.0

    def __post_init__(self) -> None:
        _check_feature_weight("sentence-bagged dimension", self.feature_weight)

    def to_dict(self) -> dict:
        return {"bag": self.bag.to_dict(), **({"feature_weight": self.feature_weight} if self.feature_weight else {})}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "SentenceBagged":
        from .sentence_bag import SentenceBag

        return cls(SentenceBag.from_dict(obj["bag"]), float(obj.get("feature_weight", 0.0)))


_CROSS_ENCODERS: dict[tuple[str, str, str], Any] = {}


@dataclass(frozen=True)
class HolisticModel:
    """The four holistic dimensions as cumulative logistic models on :data:`FEATURES`.

    ``anchors`` holds the catalogue descriptions the features compare with ("specific": the
    attribute-linked behaviours, "generic": the slots' generic ones); ``content`` projects the
    :data:`CONTENT` features (None where no dimension reads them); ``fit_info`` says what it was
    fitted on (labels' hash, split seed, units, encoder); ``cross_encoded`` names the dimensions the
    judge scores with a cross-encoder (:class:`CrossEncoded`), whose weights lie in ``directory``
    (where the model was loaded from; not part of the model's content)."""

    features: tuple[str, ...]
    anchors: Mapping[str, tuple[str, ...]]
    dimensions: Mapping[str, tuple[Boundary, ...]]
    fit_info: Mapping[str, Any]
    content: ContentProjection | None = None
    cross_encoded: Mapping[str, CrossEncoded] = field(default_factory=dict)
    sentence_bagged: Mapping[str, SentenceBagged] = field(default_factory=dict)
    directory: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.features) != FEATURES:
            raise ParameterError(f"holistic model features {tuple(self.features)} differ from {FEATURES}")
        if set(self.dimensions) != set(DIMENSIONS):
            raise ParameterError(f"holistic model dimensions {sorted(self.dimensions)} differ from {DIMENSIONS}")
        for d, bs in self.dimensions.items():
            if [b.k for b in bs] != [1, 2, 3, 4]:
                raise ParameterError(f"holistic model {d}: boundaries {[b.k for b in bs]}, want 1-4")
            for b in bs:
                if b.constant is None and not (set(b.columns) <= set(FEATURES)
                                               and len(b.columns) == len(b.coef) == len(b.mean) == len(b.scale)):
                    raise ParameterError(f"holistic model {d}, boundary {b.k}: columns, coefficients, means "
                                         "and scales do not match")
        if set(self.cross_encoded) - set(DIMENSIONS):
            raise ParameterError(f"holistic model: cross-encoded dimensions {sorted(self.cross_encoded)} are not "
                                 f"all of {DIMENSIONS}")
        if set(self.sentence_bagged) - set(DIMENSIONS):
            raise ParameterError(f"holistic model: sentence-bagged dimensions {sorted(self.sentence_bagged)} are "
                                 f"not all of {DIMENSIONS}")
        if set(self.sentence_bagged) & set(self.cross_encoded):
            raise ParameterError("holistic model: a dimension is scored by a cross-encoder or by a sentence bag, "
                                 f"not both ({sorted(set(self.sentence_bagged) & set(self.cross_encoded))})")

    @property
    def reads_content(self) -> bool:
        """Whether some boundary reads a :data:`CONTENT` feature."""
        return any(uses_content(b.columns) for bs in self.dimensions.values() for b in bs)

    def with_content(self, features: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """``features`` with the :data:`CONTENT` columns projected from ``vectors`` by the model's
        ``content`` (unchanged where it has none)."""
        return self.content.complete(features, vectors) if self.content is not None else np.asarray(features, float)

    def cross_encoder(self, dimension: str, precision: str = "fp32") -> Any:
        """The :class:`~.cross_encoder.CrossEncoder` that scores ``dimension`` (run in ``precision``),
        loaded once per process from ``directory`` after its sha256 is checked against the model's
        record."""
        from .cross_encoder import CrossEncoder

        ref = self.cross_encoded.get(dimension)
        if ref is None:
            raise ParameterError(f"the holistic model scores {dimension} with its boundaries, not a cross-encoder")
        if self.directory is None:
            raise ParameterError(f"the holistic model was not loaded from a directory: cannot find {ref.file}")
        path = Path(self.directory) / ref.file
        key = (str(path), ref.sha256, precision)
        if key not in _CROSS_ENCODERS:
            if not path.is_file():
                raise ParameterError(f"the holistic model's {dimension} cross-encoder {path} is missing")
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            if sha != ref.sha256:
                raise ParameterError(f"{path} has sha256 {sha[:12]}, the holistic model names {ref.sha256[:12]}: "
                                     "refit both with `python -m dpmv_lib.evaluate.u_validity`")
            _CROSS_ENCODERS[key] = CrossEncoder.load(path, precision=precision)
        return _CROSS_ENCODERS[key]

    def feature_weight(self, dimension: str) -> float:
        """The boundaries' weight in ``dimension``'s score where a cross-encoder or a sentence bag
        scores it (:func:`blend_scores`)."""
        ref = self.cross_encoded.get(dimension) or self.sentence_bagged.get(dimension)
        if ref is None:
            raise ParameterError(f"{dimension!r} is scored by the boundaries alone")
        return ref.feature_weight

    def bag_scores(self, query: np.ndarray, sentences: np.ndarray) -> dict[int, float]:
        """Index in :data:`~.rubric.DIMENSIONS` -> the sentence bag's score of each sentence-bagged
        dimension for one turn: its query's embedding and its response's sentence embeddings."""
        from .sentence_bag import bag_rows

        if not self.sentence_bagged:
            return {}
        rows = bag_rows(query, sentences)
        return {DIMENSIONS.index(d): float(ref.bag.score_bags([rows])[0]) for d, ref in self.sentence_bagged.items()}

    def boundaries_sha(self, dimension: str) -> str:
        """First 16 hex digits of the sha256 of ``dimension``'s fitted boundaries (columns,
        coefficients, intercepts, scalings): what changes when its features or their fit change."""
        if dimension not in self.dimensions:
            raise ParameterError(f"unknown dimension {dimension!r}; the model holds {DIMENSIONS}")
        text = json.dumps([_boundary_dict(b) for b in self.dimensions[dimension]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def score(self, X: np.ndarray) -> np.ndarray:
        """(n, 4) scores in :data:`~.rubric.DIMENSIONS` order, each sum_k P(label >= k) in [0, 4]."""
        X = np.atleast_2d(np.asarray(X, float))
        if X.shape[1] != len(self.features):
            raise ParameterError(f"{X.shape[1]} features given, the model takes {len(self.features)}")
        return np.stack([sum(b.prob(X) for b in self.dimensions[d]) for d in DIMENSIONS], axis=1)

    def max_difference(self, other: "HolisticModel") -> float:
        """Largest absolute difference of any fitted number (coefficients, intercepts, means,
        scales, constant rates, sentence-bag weights) between two models; inf where they differ in
        structure (columns, constant or fitted boundaries, the chosen C, sentence-bagged dimensions) or
        anchors. The cross-encoders are not compared
        here: by their scores, :func:`~.u_validity.cross_encoder_gap`."""
        if (self.anchors != other.anchors or (self.content is None) != (other.content is None)
                or set(self.sentence_bagged) != set(other.sentence_bagged)):
            return math.inf
        gap = 0.0
        for d, ref in self.sentence_bagged.items():
            o = other.sentence_bagged[d]
            if ref.feature_weight != o.feature_weight or len(ref.bag.weights) != len(o.bag.weights):
                return math.inf
            gap = max(gap, float(np.max(np.abs(np.subtract(ref.bag.weights + ref.bag.thresholds,
                                                          o.bag.weights + o.bag.thresholds)))))
        if self.content is not None and other.content is not None:
            gap = max(gap, self.content.max_difference(other.content))
        for d in DIMENSIONS:
            for x, y in zip(self.dimensions[d], other.dimensions[d]):
                if (x.constant is None) != (y.constant is None) or x.columns != y.columns:
                    return math.inf
                if x.constant is not None and y.constant is not None:
                    gap = max(gap, abs(x.constant - y.constant))
                    continue
                if x.C != y.C:
                    return math.inf
                for u, v in ((x.coef, y.coef), (x.mean, y.mean), (x.scale, y.scale), ((x.intercept,), (y.intercept,))):
                    gap = max(gap, float(np.max(np.abs(np.subtract(u, v)))))
        return gap

    def to_dict(self) -> dict:
        return {"version": VERSION, "features": list(self.features),
                "anchors": {k: list(v) for k, v in self.anchors.items()},
                "dimensions": {d: [_boundary_dict(b) for b in self.dimensions[d]] for d in DIMENSIONS},
                "fit_info": dict(self.fit_info),
                **({"content": self.content.to_dict()} if self.content is not None else {}),
                **({"cross_encoded": {d: self.cross_encoded[d].to_dict() for d in sorted(self.cross_encoded)}}
                   if self.cross_encoded else {}),
                **({"sentence_bagged": {d: self.sentence_bagged[d].to_dict() for d in sorted(self.sentence_bagged)}}
                   if self.sentence_bagged else {})}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], directory: str | Path | None = None) -> "HolisticModel":
        if obj.get("version") != VERSION:
            raise ParameterError(f"holistic model version {obj.get('version')!r}, this code reads {VERSION}")
        try:
            dims = {d: tuple(Boundary(k=int(b["k"]), columns=tuple(b.get("columns", ())),
                                      mean=tuple(b.get("mean", ())), scale=tuple(b.get("scale", ())),
                                      coef=tuple(b.get("coef", ())), intercept=float(b.get("intercept", 0.0)),
                                      C=float(b.get("C", math.nan)), constant=b.get("constant"))
                             for b in bs) for d, bs in obj["dimensions"].items()}
            content = obj.get("content")
            cross = {d: CrossEncoded.from_dict(c) for d, c in obj.get("cross_encoded", {}).items()}
            bagged = {d: SentenceBagged.from_dict(b) for d, b in obj.get("sentence_bagged", {}).items()}
            return cls(tuple(obj["features"]), {k: tuple(v) for k, v in obj["anchors"].items()}, dims,
                       dict(obj.get("fit_info", {})),
                       ContentProjection(content["mean"], content["components"]) if content is not None else None,
                       cross, bagged, Path(directory) if directory is not None else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise ParameterError(f"holistic model: malformed entry ({exc})") from exc

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"

    @property
    def sha(self) -> str:
        """First 12 hex digits of the sha256 of :meth:`dumps`: named in the judge's id."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:12]


def _boundary_dict(b: Boundary) -> dict:
    if b.constant is not None:
        return {"k": b.k, "constant": b.constant}
    return {"k": b.k, "columns": list(b.columns), "mean": list(b.mean), "scale": list(b.scale), "coef": list(b.coef),
            "intercept": b.intercept, "C": b.C}


def catalogue_anchors(benchmarks: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The distinct behaviour descriptions of the benchmarks' catalogues: "specific" (target
    required and unsupported: attribute-linked) and "generic", sorted."""
    spec: set[str] = set()
    gen: set[str] = set()
    for bench in benchmarks.values():
        for b in bench.behaviours.values():
            (gen if b.kind == "generic" else spec).add(b.description)
    if not spec or not gen:
        raise ParameterError("the behaviour catalogue needs attribute-specific and generic descriptions")
    return {"specific": tuple(sorted(spec)), "generic": tuple(sorted(gen))}


def fit(features: pd.DataFrame, labels: pd.DataFrame, fit_info: Mapping[str, Any] | None = None, *,
        anchors: Mapping[str, Sequence[str]],
        dimension_features: Mapping[str, Sequence[str]] | None = None,
        sample_weight: Sequence[float] | None = None, vectors: np.ndarray | None = None) -> HolisticModel:
    """Fit the cumulative logistic models on the rows given (the fitting half, one row per
    distinct query and response).

    Parameters
    ----------
    features : DataFrame
        Columns :data:`FEATURES` (the :data:`CONTENT` columns are filled in here where a dimension
        reads them, and may hold NaN).
    labels : DataFrame
        The four label columns of :data:`~.rubric.DIMENSIONS` (0-4), aligned with ``features``.
    anchors : mapping
        The descriptions the features were computed against (:func:`catalogue_anchors`).
    dimension_features : mapping, optional
        The features each dimension reads (default :data:`DIMENSION_FEATURES`; another set is
        for comparing candidates, :mod:`dpmv_lib.experiments.judge_features`).
    sample_weight : sequence of float, optional
        Per row, its weight in the fit (the labels' design weights,
        :func:`~.enriched_draw.design_weights`); default 1 each.
    vectors : array, optional
        Per row, its content vector (:func:`content_vector`): where a dimension reads the
        :data:`CONTENT` features, their :class:`ContentProjection` is fitted on these rows, fills
        the columns and is kept in the model for the judge.
    """
    missing = [f for f in FEATURES if f not in features.columns]
    if missing:
        raise ParameterError(f"holistic fit: feature columns missing: {missing}")
    if len(features) != len(labels):
        raise ParameterError(f"holistic fit: {len(features)} feature rows for {len(labels)} label rows")
    reads = {**DIMENSION_FEATURES, **(dimension_features or {})}
    unknown = {d: sorted(set(c) - set(FEATURES)) for d, c in reads.items() if set(c) - set(FEATURES) or not c}
    if unknown or set(reads) != set(DIMENSIONS):
        raise ParameterError(f"holistic fit: dimension features must name {DIMENSIONS} with columns of FEATURES; "
                             f"unknown or empty: {unknown}, dimensions given: {sorted(reads)}")
    content = None
    if uses_content([c for cols in reads.values() for c in cols]):
        if vectors is None or len(vectors) != len(features):
            raise ParameterError(f"holistic fit: a dimension reads content features; need {len(features)} content "
                                 "vectors")
        content = ContentProjection.fit(vectors)
        features = pd.DataFrame(content.complete(features[list(FEATURES)].to_numpy(float), vectors),
                                columns=list(FEATURES))
    read = sorted({c for cols in reads.values() for c in cols}, key=FEATURES.index)
    if not np.isfinite(features[read].to_numpy(float)).all():
        raise ParameterError("holistic fit: the features read hold NaN or inf")
    w = None if sample_weight is None else np.asarray(sample_weight, float)
    if w is not None and (len(w) != len(features) or not (np.isfinite(w).all() and (w > 0).all())):
        raise ParameterError(f"holistic fit: need {len(features)} finite positive sample weights, got {len(w)}")
    dims = {d: fit_boundaries(features[list(reads[d])].to_numpy(float), labels[d].to_numpy(float), reads[d], w)
            for d in DIMENSIONS}
    return HolisticModel(FEATURES, {k: tuple(v) for k, v in anchors.items()}, dims, dict(fit_info or {}), content)


def fit_boundaries(X: np.ndarray, labels: np.ndarray, columns: Sequence[str],
                   sample_weight: np.ndarray | None = None) -> tuple[Boundary, ...]:
    """The four boundaries P(label >= k), k = 1..4, of one dimension (:func:`fit`), on ``X`` whose
    columns are ``columns`` (rows weighted by ``sample_weight`` where given); the dimension's score
    is the sum of their probabilities."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X, sample_weight=sample_weight)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    Z = (X - scaler.mean_) / scale
    bs = []
    for k in range(1, 5):
        y = (labels >= k).astype(int)
        pos = int(y.sum())
        if min(pos, len(y) - pos) < MIN_CLASS:
            bs.append(Boundary(k=k, constant=float(np.average(y, weights=sample_weight))))
            continue
        folds = min(CV_FOLDS, pos, len(y) - pos)
        lr = LogisticRegressionCV(Cs=list(C_GRID), cv=StratifiedKFold(folds, shuffle=True, random_state=0),
                                  scoring="neg_log_loss", max_iter=5000, l1_ratios=(0.0,),
                                  use_legacy_attributes=False).fit(Z, y, sample_weight=sample_weight)
        bs.append(Boundary(k=k, columns=tuple(columns), mean=tuple(map(float, scaler.mean_)),
                           scale=tuple(map(float, scale)),
                           coef=tuple(map(float, lr.coef_[0])), intercept=float(lr.intercept_[0]),
                           C=float(lr.C_)))
    return tuple(bs)


def committed_encoder_spec(label_dir: str | Path | None = None) -> str:
    """The encoder spec the committed model was fitted with (its ``fit_info["encoder_spec"]``), read
    from the file as it is, so a model made stale by a change of :data:`FEATURES` can be refitted."""
    p = model_path(label_dir)
    try:
        info = json.loads(p.read_text()).get("fit_info", {}) if p.exists() else {}
    except (json.JSONDecodeError, AttributeError):
        info = {}
    spec = info.get("encoder_spec") if isinstance(info, dict) else None
    if not spec:
        raise ParameterError(f"no holistic model in {model_path(label_dir).parent} names its encoder: "
                             f"pass --encoder (the default profile's)")
    return str(spec)


def model_path(label_dir: str | Path | None = None) -> Path:
    """``{label_dir}/holistic_model.json``; by default in the project's ``data/judge_labels``."""
    from ..common.paths import project_root
    return (Path(label_dir) if label_dir is not None else project_root() / "data" / "judge_labels") / MODEL_FILE


def _model_json(label_dir: str | Path | None) -> tuple[Path, dict | None]:
    p = model_path(label_dir)
    if not p.exists():
        return p, None
    try:
        return p, json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ParameterError(f"{p}: not JSON ({exc})") from exc


def load(label_dir: str | Path | None = None) -> HolisticModel | None:
    """The committed model of ``data/judge_labels`` (None where there is none)."""
    p, obj = _model_json(label_dir)
    return None if obj is None else HolisticModel.from_dict(obj, p.parent)


def committed_cross_encoded(label_dir: str | Path | None = None) -> dict[str, CrossEncoded]:
    """The cross-encoders the committed model file names, read without loading the model: a refit
    keeps them even where the file's features are an older judge's (:data:`FEATURES` changed)."""
    p, obj = _model_json(label_dir)
    try:
        return {d: CrossEncoded.from_dict(c) for d, c in (obj or {}).get("cross_encoded", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ParameterError(f"{p}: malformed cross-encoder entry ({exc})") from exc
