"""Which features each holistic dimension of the rubric judge reads
(:data:`dpmv_lib.evaluate.holistic.DIMENSION_FEATURES`), compared with candidate sets without
touching the held-out half of U's split (paper C.5 "Utility judging").

For each candidate set of a dimension (the others keep the committed sets):

* **kappa inside the fitting half**: the binary kappa (grade >= 2) of that dimension,
  cross-validated inside the fitting half of :data:`~dpmv_lib.evaluate.u_validity.SPLIT_SEED`'s
  split only (``sklearn.model_selection.GroupKFold``, :data:`FOLDS` folds grouped by distinct
  query and response, :data:`SHUFFLES` shuffles averaged). On each training part the holistic
  model (:func:`~dpmv_lib.evaluate.holistic.fit`) and the cuts
  (:func:`~dpmv_lib.evaluate.u_validity.fit_cuts`) are fitted as :func:`~dpmv_lib.evaluate.u_validity.validate_u`
  fits them on the whole fitting half; ``sklearn.metrics.cohen_kappa_score``
  (:func:`~dpmv_lib.evaluate.u_validity.kappas`) on the pooled
  out-of-fold grades, pooled and per response model; every fit and kappa with the units' design
  weights (:func:`~dpmv_lib.evaluate.enriched_draw.design_weights`).
* **degradation**: with a model fitted on the whole fitting half, the share of items of the
  degradation set (:mod:`.judge_degradation`) whose variant scores strictly lower than its original,
  for the variants meant to lower this dimension.
* **method gap**: from the same out-of-fold scores, per (response model, method) the design-weighted
  mean of (score - label) / 16, this dimension's share of the judge's U error there
  (:func:`method_gaps`); the table gives the largest in size, its cell, and the gap in the cell
  where the committed set's is largest.

:data:`RULE`: a candidate replaces the committed set only where it raises the pooled kappa by at
least :data:`MIN_GAIN` and lowers no degradation row of the dimension.

:func:`compare_cross_encoder` (``--cross-encoder``) puts a judge that reads the query and the
response together beside the committed sets, by the same kappa, degradation rows and rule: a
:class:`~dpmv_lib.evaluate.cross_encoder.CrossEncoder` fine-tuned on each training part
(:data:`CROSS_ENCODER_CANDIDATES`; for relevance also with label-free negatives, :class:`Negatives`:
answers paired with another unit's query, from any slot domain or from another one only; and blended
with the committed feature model's score fitted on the same training part, :class:`CrossCandidate`,
the candidates with the same negatives sharing their fine-tunings), on the first shuffle only, the
committed set beside it on the same folds (``--only`` runs some candidates). The cross-encoders the
rule adopted are the judge's (:data:`~dpmv_lib.evaluate.u_validity.CROSS_ENCODED`: actionability
alone); the "committed" rows here are the feature model.

:func:`compare_sentence_bag` (``--sentence-bag``) puts relevance scored by a sentence bag
(:mod:`dpmv_lib.evaluate.sentence_bag`: each response sentence read against the query) beside the
feature model by the same kappa, degradation rows and rule, alone and in every blend with the
cross-encoder and the feature model in steps of 0.25 (:data:`BAG_BLENDS`), with the judge's blend
before it (:data:`JUDGE_BLEND`). The rule adopted 0.5 x the feature model + 0.5 x the bag
(:data:`~dpmv_lib.evaluate.u_validity.SENTENCE_BAGGED`), which replaced that blend.

:func:`learning_curve` (``--learning-curve``) refits the judge's relevance on a growing share of
each training part inside the fitting half: where the kappa still rises at the full share, more
labels would raise it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.holistic import (CONTENT, DIMENSION_FEATURES, FEATURES, FORM, NARRATION, QUERY_SPECIFIC, SEPARATE,
                                 uses_content)
from ..evaluate.rubric import DIMENSIONS

FOLDS = 5
SHUFFLES = (0, 1, 2)
MIN_GAIN = 0.05
RULE = (f"adopt a candidate only where the pooled kappa inside the fitting half rises by at least {MIN_GAIN} "
        "and no degradation row of the dimension falls; of several, the highest kappa")
#: candidates compared with the committed sets: for relevance every feature, and the guide's set
#: with the per-sentence joins of query and catalogue (a sentence both on the query and specific);
#: for actionability the subset fixed from the guide before any fit (advice, concrete detail, the
#: rule actionability, form); for every dimension its set with the count of sentences narrating about
#: someone (:data:`~dpmv_lib.evaluate.holistic.NARRATION`), which SmolLM2 writes under TaskMin
CANDIDATES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "relevance": {"every feature": FEATURES,
                  "guide set + query-specific": (*DIMENSION_FEATURES["relevance"], *QUERY_SPECIFIC),
                  "guide set + content": (*DIMENSION_FEATURES["relevance"], *CONTENT),
                  "guide set + narration": (*DIMENSION_FEATURES["relevance"], *NARRATION)},
    "correctness": {"separate + narration": (*SEPARATE, *NARRATION)},
    "actionability": {"guide subset": ("advice", "concrete", "concrete_sentences", "action_rule", *FORM),
                      "separate + content": (*SEPARATE, *CONTENT),
                      "separate + narration": (*SEPARATE, *NARRATION)},
    "personalisation": {"separate + narration": (*SEPARATE, *NARRATION)},
}


def fitting_half_kappa(units: pd.DataFrame, features: np.ndarray, fit_mask: np.ndarray, dimension: str,
                       columns: Sequence[str], vectors: np.ndarray | None = None, *, folds: int = FOLDS,
                       shuffles: Sequence[int] = SHUFFLES) -> dict[str, float]:
    """Binary kappa of ``dimension`` read from ``columns``, cross-validated inside the fitting half
    (module docstring): {"all": pooled, <response model>: within it}, means over ``shuffles``.
    Where ``columns`` read the content features, their projection is fitted on each training part's
    ``vectors`` (:meth:`~dpmv_lib.evaluate.rubric_judge.RubricJudge.holistic_features_and_vectors`)."""
    return _fitting_half_study(units, features, fit_mask, dimension, columns, vectors, folds=folds,
                               shuffles=shuffles)[0]


def _fitting_half_study(units: pd.DataFrame, features: np.ndarray, fit_mask: np.ndarray, dimension: str,
                        columns: Sequence[str], vectors: np.ndarray | None = None, *, folds: int = FOLDS,
                        shuffles: Sequence[int] = SHUFFLES) -> tuple[dict[str, float], list[np.ndarray]]:
    """:func:`fitting_half_kappa` and, per shuffle, the out-of-fold scores of the fitting half's units."""
    from sklearn.model_selection import GroupKFold

    from ..evaluate.u_validity import fit_cuts, grade_with

    sub, groups, y, w = _fitting_half(units, fit_mask, dimension)
    X, V, empty = _feature_inputs(units, features, vectors, fit_mask, dimension, columns)
    first = ~pd.Series(groups).duplicated().to_numpy()     # one row per distinct (query, response)
    out: dict[str, list[float]] = {}
    oof = []
    for seed in shuffles:
        grades, scores = np.full(len(sub), np.nan), np.full(len(sub), np.nan)
        for tr, te in GroupKFold(folds, shuffle=True, random_state=seed).split(X, y, groups):
            s = _feature_score(X, V, y, w, tr[first[tr]], columns)
            s[empty] = 0.0
            scores[te] = s[te]
            grades[te] = grade_with(s[te], fit_cuts(s[tr], y[tr], w[tr]))
        for name, k in _pooled_kappas(sub, y, grades, w).items():
            out.setdefault(name, []).append(k)
        oof.append(scores)
    return {k: float(np.mean(v)) for k, v in out.items()}, oof


def method_gaps(units: pd.DataFrame, labels: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> pd.Series:
    """Per (response model, method) of ``units``: the design-weighted mean of (score - label) / 16,
    this dimension's share of the judge's U error there (U is the mean of the four dimensions' 0-4
    scores over 4; the held-out version of the same error: :mod:`dpmv_lib.experiments.label_claims`)."""
    y, s, w = (np.asarray(a, float) for a in (labels, scores, weights))
    if not (len(y) == len(s) == len(w) == len(units)) or not np.all(np.isfinite(s)):
        raise ParameterError(f"method gaps: {len(units)} units, {len(y)} labels, {len(s)} finite scores "
                             f"and {len(w)} weights wanted")
    frame = pd.DataFrame({"response_model": units["response_model"].to_numpy(), "method": units["method"].to_numpy(),
                          "err": w * (s - y) / (4.0 * len(DIMENSIONS)), "w": w})
    g = frame.groupby(["response_model", "method"])[["err", "w"]].sum()
    return g["err"] / g["w"]


def _largest_gap(gaps: pd.Series) -> dict[str, Any]:
    """The (response model, method) cell whose :func:`method_gaps` is largest in size."""
    at = gaps.abs().idxmax()
    return {"largest method gap": float(gaps[at]), "gap at": f"{at[1]} ({at[0]})"}


def _feature_inputs(units: pd.DataFrame, features: np.ndarray, vectors: np.ndarray | None, mask: np.ndarray,
                    dimension: str, columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The feature rows and content vectors of the units of ``mask`` (an empty (n, 0) array where
    ``columns`` read no content feature) and which of them have an empty response."""
    units = units.reset_index(drop=True)
    if len(features) != len(units):
        raise ParameterError(f"{len(units)} units but {len(features)} feature rows")
    unknown = sorted(set(columns) - set(FEATURES))
    if unknown or not columns:
        raise ParameterError(f"feature set for {dimension}: unknown or no columns {unknown}")
    idx = np.flatnonzero(np.asarray(mask, bool))
    content = uses_content(columns)
    if content and (vectors is None or len(vectors) != len(units)):
        raise ParameterError(f"feature set for {dimension} reads content features: give one content vector per unit")
    V = np.asarray(vectors, float)[idx] if content and vectors is not None else np.zeros((len(idx), 0))
    empty = units["response"].iloc[idx].map(lambda a: not str(a).strip()).to_numpy()
    return np.asarray(features, float)[idx], V, empty


def _feature_score(X: np.ndarray, V: np.ndarray, y: np.ndarray, w: np.ndarray, rows: np.ndarray,
                   columns: Sequence[str]) -> np.ndarray:
    """The feature model's score (sum of the four boundaries' probabilities) of every row of ``X``,
    its boundaries (and the content projection, where ``columns`` read it) fitted on ``rows``."""
    from ..evaluate.holistic import ContentProjection, fit_boundaries

    Xf = ContentProjection.fit(V[rows]).complete(X, V) if uses_content(columns) else X
    cols = [FEATURES.index(c) for c in columns]
    bounds = fit_boundaries(Xf[rows][:, cols], y[rows], tuple(columns), w[rows])
    return np.sum([b.prob(Xf) for b in bounds], axis=0)


def _fitting_half(units: pd.DataFrame, fit_mask: np.ndarray, dimension: str
                  ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The fitting half's units, their (query, response) groups, ``dimension``'s labels and design
    weights."""
    if dimension not in DIMENSIONS:
        raise ParameterError(f"unknown dimension {dimension!r}; one of {DIMENSIONS}")
    units = units.reset_index(drop=True)
    fit_mask = np.asarray(fit_mask, bool)
    if len(fit_mask) != len(units):
        raise ParameterError(f"{len(units)} units and {len(fit_mask)} mask entries")
    sub = units.iloc[np.flatnonzero(fit_mask)].reset_index(drop=True)
    groups = pd.factorize(sub["query"].astype(str) + "\x00" + sub["response"].astype(str))[0]
    w = sub["design_weight"].to_numpy(float) if "design_weight" in sub else np.ones(len(sub))
    return sub, groups, sub[dimension].to_numpy(float), w


def _pooled_kappas(sub: pd.DataFrame, y: np.ndarray, grades: np.ndarray, w: np.ndarray) -> dict[str, float]:
    from ..evaluate.u_validity import kappas

    return {name: kappas(y[sel], grades[sel], w[sel])[0]
            for name, sel in [("all", np.ones(len(sub), bool))] + [
                (m, (sub["response_model"] == m).to_numpy()) for m in sorted(set(sub["response_model"]))]}


@dataclass(frozen=True)
class Negatives:
    """Label-free relevance negatives for a cross-encoder's fine-tuning (label 0, weight 1):
    ``share`` x n responses each paired with another unit's query
    (:func:`~dpmv_lib.evaluate.cross_encoder.other_query_negatives`); with ``other_domain``, only
    with a query routed to another slot domain (:func:`slot_domain`), as the degradation set's
    other_query answers are."""

    share: float = 0.0
    other_domain: bool = False


def slot_domain(item_id: str) -> str:
    """The slot domain of a rubric item ("finance" for ``unsup:job_loss:finance.strict_budget`` or
    ``generic:finance.budget_app``): the domain of the slot the unit's query is routed to."""
    return str(item_id).rsplit(":", 1)[-1].split(".", 1)[0]


def fit_cross_encoder(queries: Sequence[str], responses: Sequence[str], labels: np.ndarray, weights: np.ndarray,
                      dimension: str, negatives: Negatives | float = 0.0, config: Any = None, *,
                      domains: Sequence[str] | None = None, base: Any = None, log: Any = None) -> Any:
    """A :class:`~dpmv_lib.evaluate.cross_encoder.CrossEncoder` fine-tuned on these units, with
    relevance ``negatives`` (:class:`Negatives`; a number is its share); ``domains``: each unit's
    slot domain, needed for negatives from other domains."""
    from ..evaluate.cross_encoder import CrossEncoder, other_query_negatives

    q, r = list(queries), list(responses)
    y, w = np.asarray(labels, float), np.asarray(weights, float)
    neg = negatives if isinstance(negatives, Negatives) else Negatives(float(negatives))
    if neg.share:
        if dimension != "relevance":
            raise ParameterError(f"other-query negatives are relevance labels; {dimension} has none")
        groups = None
        if neg.other_domain:
            if domains is None:
                raise ParameterError("negatives from other slot domains need each unit's domain")
            groups = list(domains)
        nq, nr = other_query_negatives(q, r, neg.share, groups=groups)
        q, r = q + nq, r + nr
        y, w = np.r_[y, np.zeros(len(nq))], np.r_[w, np.ones(len(nq))]
    return CrossEncoder.fit(q, r, y, w, config, base=base, log=log)


def _domains(units: pd.DataFrame) -> list[str] | None:
    return [slot_domain(i) for i in units["item_id"]] if "item_id" in units else None


def _fit_on_distinct(units: pd.DataFrame, dimension: str, negatives: Negatives | float, config: Any, base: Any,
                     log: Any) -> Any:
    """:func:`fit_cross_encoder` on one row per distinct (query, response) of ``units``
    (:func:`~dpmv_lib.evaluate.u_validity.training_rows`, as the judge's cross-encoders are fitted)."""
    from ..evaluate.u_validity import training_rows

    units = units.reset_index(drop=True)
    q, r, y, w = training_rows(units, np.ones(len(units), bool), dimension)
    domains = _domains(units.drop_duplicates(["query", "response"]))    # the same rows, in the same order
    return fit_cross_encoder(q, r, y, np.ones(len(q)) if w is None else w, dimension, negatives, config,
                             domains=domains, base=base, log=log)


def cross_encoder_kappa(units: pd.DataFrame, fit_mask: np.ndarray, dimension: str,
                        config: Any = None, *, negatives: Negatives | float = 0.0, folds: int = FOLDS,
                        shuffles: Sequence[int] = (0,), base: Any = None, log: Any = None,
                        feature_weight: float = 0.0, features: np.ndarray | None = None,
                        vectors: np.ndarray | None = None) -> dict[str, float]:
    """As :func:`fitting_half_kappa`, with the score of a cross-encoder (:func:`fit_cross_encoder`)
    fine-tuned on each training part's distinct (query, response) units (design-weighted) instead of
    the holistic model; the cuts are fitted on the training part's labelled units. With
    ``feature_weight`` the score blends it with the committed feature model's fitted on the same
    training part (:func:`~dpmv_lib.evaluate.holistic.blend_scores`, as the judge does; ``features``
    and ``vectors`` of every unit). One fine-tuning per fold: ``shuffles`` defaults to the first only."""
    tuned = _fold_fine_tunings(units, fit_mask, dimension, config, negatives=negatives, folds=folds,
                               shuffles=shuffles, base=base, log=log)
    return _fold_kappas(units, fit_mask, dimension, tuned, feature_weight, features, vectors)


def _fold_fine_tunings(units: pd.DataFrame, fit_mask: np.ndarray, dimension: str, config: Any = None, *,
                       negatives: Negatives | float = 0.0, folds: int = FOLDS, shuffles: Sequence[int] = (0,),
                       base: Any = None, log: Any = None) -> dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per shuffle, per fold of the fitting half: (training part, test part, the scores of every
    fitting-half unit by a cross-encoder fine-tuned on the training part's distinct units), shared by
    the candidates that differ only in their blend (:func:`_fold_kappas`)."""
    from sklearn.model_selection import GroupKFold

    sub, groups, y, w = _fitting_half(units, fit_mask, dimension)
    q, r = sub["query"].astype(str).tolist(), sub["response"].astype(str).tolist()
    dom = _domains(sub)
    first = ~pd.Series(groups).duplicated().to_numpy()
    out: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for seed in shuffles:
        out[seed] = []
        for k, (tr, te) in enumerate(GroupKFold(folds, shuffle=True, random_state=seed).split(sub, y, groups)):
            rows = tr[first[tr]]
            ce = fit_cross_encoder([q[i] for i in rows], [r[i] for i in rows], y[rows], w[rows], dimension,
                                   negatives, config, domains=[dom[i] for i in rows] if dom else None,
                                   base=base, log=log)
            out[seed].append((tr, te, ce.predict(q, r)))
            if log is not None:
                log(f"{dimension}: shuffle {seed}, fold {k + 1}/{folds} done")
    return out


def _fold_kappas(units: pd.DataFrame, fit_mask: np.ndarray, dimension: str,
                 tuned: Mapping[int, Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]], feature_weight: float,
                 features: np.ndarray | None, vectors: np.ndarray | None) -> dict[str, float]:
    """:func:`cross_encoder_kappa` from the fine-tunings of :func:`_fold_fine_tunings`."""
    from ..evaluate.holistic import blend_scores
    from ..evaluate.u_validity import fit_cuts, grade_with

    sub, groups, y, w = _fitting_half(units, fit_mask, dimension)
    columns = DIMENSION_FEATURES[dimension]
    if feature_weight:
        if features is None:
            raise ParameterError("a score blended with the feature model needs each unit's features")
        X, V, empty = _feature_inputs(units, features, vectors, fit_mask, dimension, columns)
    first = ~pd.Series(groups).duplicated().to_numpy()
    out: dict[str, list[float]] = {}
    for parts in tuned.values():
        grades = np.full(len(sub), np.nan)
        for tr, te, s in parts:
            if feature_weight:
                s = blend_scores(s, _feature_score(X, V, y, w, tr[first[tr]], columns), feature_weight)
                s[empty] = 0.0
            grades[te] = grade_with(s[te], fit_cuts(s[tr], y[tr], w[tr]))
        for name, kappa in _pooled_kappas(sub, y, grades, w).items():
            out.setdefault(name, []).append(kappa)
    return {k: float(np.mean(v)) for k, v in out.items()}


def cross_encoder_degradation(model: Any, dimension: str, records: Sequence[dict[str, Any]] | None = None
                              ) -> dict[str, float]:
    """{variant: share of the degradation set's items (:mod:`.judge_degradation`) whose variant
    ``model`` scores strictly lower than the original}, for the variants meant to lower
    ``dimension`` (as :func:`~.judge_degradation.evaluate_judge` counts them)."""
    from ..common.io import read_jsonl
    from .judge_degradation import DEFAULT_SET, INTENDED

    records = read_jsonl(DEFAULT_SET) if records is None else list(records)
    out = {}
    for v in [v for v, dims in INTENDED.items() if dimension in dims]:
        items = [rec for rec in records if v in rec["variants"]]
        if items:
            queries = [rec["query"] for rec in items]
            orig = model.predict(queries, [rec["original"] for rec in items])
            var = model.predict(queries, [rec["variants"][v] for rec in items])
            out[v] = float(np.mean(var < orig))
    return out


def cross_encoder_heldout_kappa(units: pd.DataFrame, fit_mask: np.ndarray, dimension: str, config: Any = None, *,
                                negatives: Negatives | float = 0.0, base: Any = None, log: Any = None,
                                feature_weight: float = 0.0, features: np.ndarray | None = None,
                                vectors: np.ndarray | None = None) -> dict[str, float]:
    """Binary kappa on the held-out half (``~fit_mask``) of a cross-encoder (:func:`fit_cross_encoder`)
    fine-tuned on the fitting half's distinct units, with cuts fitted there (with ``feature_weight``
    blended with the feature model fitted there, as :func:`cross_encoder_kappa`), as
    :func:`~dpmv_lib.evaluate.u_validity.validate_u` measures the judge: the figure of a candidate
    that :data:`RULE` adopts, never one that chose it."""
    from ..evaluate.holistic import blend_scores
    from ..evaluate.u_validity import distinct_rows, fit_cuts, grade_with

    units = units.reset_index(drop=True)
    mask = np.asarray(fit_mask, bool)
    sub, _, y, w = _fitting_half(units, mask, dimension)
    model = _fit_on_distinct(sub, dimension, negatives, config, base, log)
    held, _, yh, wh = _fitting_half(units, ~mask, dimension)
    s_fit = model.predict(sub["query"].astype(str).tolist(), sub["response"].astype(str).tolist())
    s_held = model.predict(held["query"].astype(str).tolist(), held["response"].astype(str).tolist())
    if feature_weight:
        if features is None:
            raise ParameterError("a score blended with the feature model needs each unit's features")
        everyone = np.ones(len(units), bool)
        X, V, empty = _feature_inputs(units, features, vectors, everyone, dimension, DIMENSION_FEATURES[dimension])
        design = units["design_weight"].to_numpy(float) if "design_weight" in units else np.ones(len(units))
        rows = distinct_rows(units, mask)
        f = _feature_score(X, V, units[dimension].to_numpy(float), design, rows, DIMENSION_FEATURES[dimension])
        f[empty] = 0.0
        s_fit, s_held = blend_scores(s_fit, f[mask], feature_weight), blend_scores(s_held, f[~mask], feature_weight)
        s_fit[empty[mask]], s_held[empty[~mask]] = 0.0, 0.0
    grades = grade_with(s_held, fit_cuts(s_fit, y.tolist(), w.tolist()))
    return _pooled_kappas(held, yh, grades, wh)


@dataclass(frozen=True)
class FeatureStudy:
    """``table``: one row per (dimension, feature set): the columns read, kappa inside the fitting
    half (pooled and per response model), the degradation rows of the dimension, whether
    :data:`RULE` adopts it and (:func:`compare_feature_sets`) its method gaps."""

    table: pd.DataFrame
    encoder: str
    shuffles: int = len(SHUFFLES)

    def markdown(self) -> str:
        shown = self.table.astype(object).where(self.table.notna(), None)
        return (shown.to_markdown(index=False, floatfmt=".3f", missingval="-") + "\n\n"
                + f"Rule: {RULE}. Encoder {self.encoder}; {FOLDS}-fold GroupKFold inside the fitting half, "
                + (f"mean of {self.shuffles} shuffles.\n" if self.shuffles > 1 else "first shuffle only.\n"))

    def _repr_markdown_(self) -> str:
        return self.markdown()


def _adopt(base: Mapping[str, float] | None, scores: Mapping[str, float]) -> str:
    """:data:`RULE` for a candidate's ``scores`` against the committed set's ``base``."""
    if base is None:
        return "-"
    kept = all(scores[c] >= base[c] for c in scores if c.startswith("degradation"))
    return "yes" if scores["kappa all"] - base["kappa all"] >= MIN_GAIN and kept else "no"


def _best_adopted(table: pd.DataFrame) -> pd.DataFrame:
    """Where :data:`RULE` adopts several candidates of one dimension, the one with the highest pooled
    kappa keeps "yes"; the others read "no (lower kappa)"."""
    table = table.copy()
    for _, g in table[table["adopt"] == "yes"].groupby("dimension"):
        table.loc[g.index.difference([g["kappa all"].idxmax()]), "adopt"] = "no (lower kappa)"
    return table


def _feature_degradation(encoder: Any, inputs: tuple, mask: np.ndarray, dimension: str,
                         columns: Sequence[str], cross: tuple[Any, float] | None = None) -> dict[str, float]:
    """Degradation rows of ``dimension`` for a judge whose holistic model reads ``columns`` there,
    fitted on the fitting half; with ``cross`` = (cross-encoder, feature weight), the judge blends
    that cross-encoder's score with the model's there (:class:`~dpmv_lib.evaluate.holistic.CrossEncoded`)."""
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from ..evaluate.holistic import CrossEncoded
    from ..evaluate.rubric_judge import RubricJudge
    from ..evaluate.u_validity import fit_on
    from .judge_degradation import INTENDED, evaluate_judge

    meant = [v for v, dims in INTENDED.items() if dimension in dims]
    if not meant:
        return {}
    units, F, V, anchors = inputs
    model = fit_on(units, F, V, mask, anchors, {}, dimension_features={dimension: columns})
    with tempfile.TemporaryDirectory() as tmp:
        if cross is not None:
            name = f"cross_encoder_{dimension}.safetensors"
            sha = cross[0].save(Path(tmp) / name)
            model = replace(model, cross_encoded={dimension: CrossEncoded(name, sha, {}, cross[1])},
                            directory=Path(tmp))
        deg = evaluate_judge(RubricJudge(encoder, holistic=model, cross_precision="fp32")
                             ).summary.set_index(["variant", "dimension"])
    return {f"degradation {v}": float(deg.loc[(v, dimension), "accuracy"]) for v in meant}


#: the study's column: a candidate's :func:`method_gaps` in the cell where the committed set's is largest
GAP_AT_COMMITTED = "gap in the committed set's cell"


def compare_feature_sets(encoder: Any, candidates: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                         label_dir: Any = None, data_dir: Any = "data") -> FeatureStudy:
    """Each dimension's committed feature set against ``candidates`` (default :data:`CANDIDATES`)."""
    from ..evaluate.u_validity import SPLIT_SEED, holistic_inputs, split_halves

    candidates = CANDIDATES if candidates is None else candidates
    inputs = holistic_inputs(encoder, label_dir, data_dir)
    units, F, V, _ = inputs
    mask = split_halves(units, SPLIT_SEED)
    rows = []
    for d, sets in candidates.items():
        base: dict[str, float] | None = None
        worst = None     # the cell where the committed set's gap is largest
        sub, _, y, w = _fitting_half(units, mask, d)
        for name, cols in {"committed": DIMENSION_FEATURES[d], **sets}.items():
            kappa, oof = _fitting_half_study(units, F, mask, d, cols, V)
            gaps = pd.concat([method_gaps(sub, y, s, w) for s in oof], axis=1).mean(axis=1)
            worst = worst if worst is not None else gaps.abs().idxmax()
            scores = {f"kappa {m}": v for m, v in kappa.items()}
            scores.update(_feature_degradation(encoder, inputs, mask, d, cols))
            rows.append({"dimension": d, "feature set": name, "columns": len(cols), **scores,
                         "adopt": _adopt(base, scores), **_largest_gap(gaps),
                         GAP_AT_COMMITTED: float(gaps[worst])})
            base = base or scores
    table = pd.DataFrame(rows)
    gap = ["largest method gap", "gap at", GAP_AT_COMMITTED]
    return FeatureStudy(table[[c for c in table if c not in gap] + gap],
                        str(getattr(encoder, "id", type(encoder).__name__)))


@dataclass(frozen=True)
class CrossCandidate:
    """A cross-encoder candidate of :func:`compare_cross_encoder`: the relevance ``negatives`` added
    to its fine-tuning units (:func:`fit_cross_encoder`) and the committed feature model's weight in
    the dimension's score (``feature_weight``: 0, the cross-encoder alone; 0.5, the mean of the two;
    :func:`~dpmv_lib.evaluate.holistic.blend_scores`)."""

    negatives: Negatives = Negatives()
    feature_weight: float = 0.0


#: the feature model's weights in the blended relevance candidates (:class:`CrossCandidate`)
BLEND_WEIGHTS = (0.25, 0.5, 0.75)
#: cross-encoder candidates per dimension
CROSS_ENCODER_CANDIDATES: Mapping[str, Mapping[str, CrossCandidate]] = {
    "relevance": {"cross-encoder": CrossCandidate(),
                  "cross-encoder + other-query negatives": CrossCandidate(Negatives(0.5)),
                  "cross-encoder + other-domain negatives": CrossCandidate(Negatives(0.5, other_domain=True)),
                  **{f"cross-encoder blended with feature model ({w:g})": CrossCandidate(feature_weight=w)
                     for w in BLEND_WEIGHTS}},
    "actionability": {"cross-encoder": CrossCandidate()},
}


def compare_cross_encoder(encoder: Any, candidates: Mapping[str, Mapping[str, CrossCandidate]] | None = None,
                          config: Any = None, label_dir: Any = None, data_dir: Any = "data", *,
                          base_model: Any = None, log: Any = None) -> FeatureStudy:
    """Each dimension's committed feature set against cross-encoders fine-tuned on the labels
    (default :data:`CROSS_ENCODER_CANDIDATES`; :func:`cross_encoder_kappa`, the degradation rows with
    one fine-tuned on the whole fitting half), both on the first shuffle only: a fine-tuning takes
    minutes where a logistic fit takes milliseconds."""
    from ..evaluate.u_validity import SPLIT_SEED, holistic_inputs, split_halves

    candidates = CROSS_ENCODER_CANDIDATES if candidates is None else candidates
    inputs = holistic_inputs(encoder, label_dir, data_dir)
    units, F, V, _ = inputs
    mask = split_halves(units, SPLIT_SEED)
    rows = []
    for d, sets in candidates.items():
        cols = DIMENSION_FEATURES[d]
        base = {f"kappa {m}": v for m, v in fitting_half_kappa(units, F, mask, d, cols, V, shuffles=(0,)).items()}
        base.update(_feature_degradation(encoder, inputs, mask, d, cols))
        rows.append({"dimension": d, "feature set": "committed", "columns": len(cols), **base, "adopt": "-"})
        tuned: dict[Negatives, Any] = {}       # fine-tunings shared by candidates with the same negatives
        whole: dict[Negatives, Any] = {}
        for name, cand in sets.items():
            if cand.negatives not in tuned:
                tuned[cand.negatives] = _fold_fine_tunings(units, mask, d, config, negatives=cand.negatives,
                                                           base=base_model, log=log)
            scores = {f"kappa {m}": v for m, v in _fold_kappas(units, mask, d, tuned[cand.negatives],
                                                                 cand.feature_weight, F, V).items()}
            if any(c.startswith("degradation") for c in base):
                if cand.negatives not in whole:
                    whole[cand.negatives] = _fit_on_distinct(units[mask], d, cand.negatives, config, base_model, log)
                model = whole[cand.negatives]
                scores.update(_feature_degradation(encoder, inputs, mask, d, cols, (model, cand.feature_weight))
                              if cand.feature_weight else
                              {f"degradation {v}": a for v, a in cross_encoder_degradation(model, d).items()})
            rows.append({"dimension": d, "feature set": name, "columns": len(cols) if cand.feature_weight else None,
                         **scores, "adopt": _adopt(base, scores)})
            if log is not None:
                log(f"{d} / {name}: {scores}")
    table = _best_adopted(pd.DataFrame(rows).astype({"columns": "Int64"}))   # a cross-encoder alone reads no column
    return FeatureStudy(table, str(getattr(encoder, "id", type(encoder).__name__)), shuffles=1)


def adopted_cross_encoders_heldout(study: FeatureStudy,
                                   candidates: Mapping[str, Mapping[str, CrossCandidate]] | None = None,
                                   config: Any = None, label_dir: Any = None, *, encoder: Any = None,
                                   data_dir: Any = "data", log: Any = None) -> pd.DataFrame:
    """:func:`cross_encoder_heldout_kappa` of each cross-encoder row that :data:`RULE` adopts in
    ``study`` (:func:`compare_cross_encoder`): one row per (dimension, candidate), empty where none is.
    A candidate blended with the feature model needs the ``encoder`` of its features."""
    from ..evaluate.u_validity import SPLIT_SEED, holistic_inputs, label_pool, split_halves

    candidates = CROSS_ENCODER_CANDIDATES if candidates is None else candidates
    adopted = study.table[study.table["adopt"] == "yes"]
    rows = []
    if len(adopted):
        picked = [(d, name, candidates[d][name]) for d, name in zip(adopted["dimension"], adopted["feature set"])]
        F = V = None
        if any(c.feature_weight for _, _, c in picked):
            if encoder is None:
                raise ParameterError("a candidate blended with the feature model needs the encoder of its features")
            units, F, V, _ = holistic_inputs(encoder, label_dir, data_dir)
        else:
            units = label_pool(label_dir)
        units = units.reset_index(drop=True)
        mask = split_halves(units, SPLIT_SEED)
        for d, name, cand in picked:
            k = cross_encoder_heldout_kappa(units, mask, d, config, negatives=cand.negatives, log=log,
                                            feature_weight=cand.feature_weight, features=F, vectors=V)
            rows.append({"dimension": d, "feature set": name, **{f"held-out kappa {m}": v for m, v in k.items()}})
    return pd.DataFrame(rows)


#: the blends of the sentence-bag study: (cross-encoder, feature model, sentence bag) weights in steps
#: of 0.25, every one with the bag (:func:`compare_sentence_bag`)
BAG_BLENDS: tuple[tuple[float, float, float], ...] = tuple(
    (a / 4, b / 4, (4 - a - b) / 4) for a in range(4) for b in range(4 - a))
#: the judge's relevance scorer when the study ran: 0.25 x the cross-encoder + 0.75 x the feature model
JUDGE_BLEND = (0.25, 0.75, 0.0)


def mix_scores(parts: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """sum_i w_i x part_i over (cross-encoder clipped to 0-4, feature model, sentence bag): a score
    of :func:`compare_sentence_bag` (:func:`~dpmv_lib.evaluate.holistic.blend_scores` where the
    bag's weight is 0)."""
    if len(parts) != len(weights) or not np.isclose(sum(weights), 1.0) or min(weights) < 0:
        raise ParameterError(f"blend weights {tuple(weights)} must be {len(parts)} non-negative numbers summing to 1")
    cross, *rest = parts
    out = float(weights[0]) * np.clip(np.asarray(cross, float), 0.0, 4.0)
    for w, p in zip(weights[1:], rest):
        out = out + float(w) * np.asarray(p, float)
    return out


def _blend_name(weights: Sequence[float]) -> str:
    names = ("cross-encoder", "feature model", "sentence bag")
    return " + ".join(n if w == 1 else f"{w:g} x {n}" for w, n in zip(weights, names) if w)


def compare_sentence_bag(encoder: Any, blends: Sequence[tuple[float, float, float]] = BAG_BLENDS,
                         config: Any = None, bag_config: Any = None, label_dir: Any = None,
                         data_dir: Any = "data", *, base_model: Any = None,
                         log: Any = None) -> tuple[FeatureStudy, pd.DataFrame]:
    """Relevance scored with a sentence bag (:mod:`dpmv_lib.evaluate.sentence_bag`), alone or blended
    with the cross-encoder and the feature model (``blends``: (cross-encoder, feature model, bag)
    weights, :func:`mix_scores`), against the feature model by :data:`RULE`, on the same folds as
    :func:`compare_cross_encoder` (first shuffle; one cross-encoder fine-tuning per fold, shared by
    every blend; the feature model and the bag refitted on each training part's distinct units). The
    judge's blend (:data:`JUDGE_BLEND`) is a row too. The degradation rows use each part fitted on the
    whole fitting half. Returns the study and the held-out kappa of the candidate the rule adopts
    (cuts fitted on the fitting half; empty where none is)."""
    from ..evaluate.rubric import DIMENSIONS
    from ..evaluate.rubric_judge import RubricJudge
    from ..evaluate.u_validity import (SPLIT_SEED, fit_cuts, fit_on, fit_sentence_bag_on, grade_with,
                                       holistic_inputs_and_bags, split_halves)

    d = "relevance"
    units, F, V, anchors, bags = holistic_inputs_and_bags(encoder, label_dir, data_dir)
    mask = split_halves(units, SPLIT_SEED)
    pairs = list(zip(units["query"].astype(str), units["response"].astype(str)))
    tuned = _fold_fine_tunings(units, mask, d, config, base=base_model, log=log)[0]
    weights = [(0.0, 1.0, 0.0), JUDGE_BLEND, *blends]
    kappas = bag_blend_kappas(units, mask, bags, F, V, tuned, weights, bag_config, log=log)
    # each part fitted on the whole fitting half: the held-out figure and the degradation rows
    whole = _fit_on_distinct(units[mask], d, Negatives(), config, base_model, log)
    model = fit_on(units, F, V, mask, anchors, {})
    bag = fit_sentence_bag_on(units, bags, mask, d, bag_config)
    parts = [whole.predict([q for q, _ in pairs], [a for _, a in pairs]),
             model.score(model.with_content(F, V))[:, DIMENSIONS.index(d)], bag.score_bags(bags)]
    deg = _part_degradation(RubricJudge(encoder, holistic=model), whole, bag)
    rows, base = [], None
    for b in weights:
        scores = {f"kappa {m}": v for m, v in kappas[b].items()}
        scores.update({f"degradation {v}": float(np.mean(mix_scores(var, b) < mix_scores(orig, b)))
                       for v, (orig, var) in deg.items()})
        rows.append({"dimension": d, "feature set": _blend_name(b),
                     "columns": len(DIMENSION_FEATURES[d]) if b[1] else None, **scores, "adopt": _adopt(base, scores)})
        base = base or scores
    table = _best_adopted(pd.DataFrame(rows).astype({"columns": "Int64"}))
    y, w = units[d].to_numpy(float), units["design_weight"].to_numpy(float)
    empty = units["response"].map(lambda a: not str(a).strip()).to_numpy()
    held = []
    for b, (_, row) in zip(weights, table.iterrows()):
        if row["adopt"] == "yes":
            s = mix_scores(parts, b)
            s[empty] = 0.0
            k = _pooled_kappas(units[~mask].reset_index(drop=True), y[~mask],
                               grade_with(s[~mask], fit_cuts(s[mask], y[mask], w[mask])), w[~mask])
            held.append({"dimension": d, "feature set": row["feature set"],
                         **{f"held-out kappa {m}": v for m, v in k.items()}})
    return FeatureStudy(table, str(getattr(encoder, "id", type(encoder).__name__)), shuffles=1), pd.DataFrame(held)


def _blend_parts(units: pd.DataFrame, rows: np.ndarray, bags: Sequence[np.ndarray], features: np.ndarray,
                 vectors: np.ndarray | None, cross: np.ndarray, bag_config: Any = None) -> list[np.ndarray]:
    """(cross-encoder, feature model, sentence bag) relevance scores of every unit of ``units``: the
    given ``cross`` scores, and the feature model and the bag fitted on ``rows`` (positions, one per
    distinct unit) with their design weights."""
    from ..evaluate.u_validity import fit_sentence_bag_on

    cols = DIMENSION_FEATURES["relevance"]
    X, V, _ = _feature_inputs(units, features, vectors, np.ones(len(units), bool), "relevance", cols)
    y = units["relevance"].to_numpy(float)
    w = units["design_weight"].to_numpy(float) if "design_weight" in units else np.ones(len(units))
    mask = np.zeros(len(units), bool)
    mask[rows] = True
    bag = fit_sentence_bag_on(units, bags, mask, "relevance", bag_config)
    return [np.asarray(cross, float), _feature_score(X, V, y, w, rows, cols), bag.score_bags(bags)]


def bag_blend_kappas(units: pd.DataFrame, fit_mask: np.ndarray, bags: Sequence[np.ndarray], features: np.ndarray,
                     vectors: np.ndarray | None, tuned: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                     blends: Sequence[tuple[float, float, float]], bag_config: Any = None, *,
                     log: Any = None) -> dict[tuple[float, float, float], dict[str, float]]:
    """Relevance's binary kappa inside the fitting half, pooled and per response model, of each blend
    of (cross-encoder, feature model, sentence bag) (:func:`mix_scores`): per fold of ``tuned``
    (:func:`_fold_fine_tunings`, one shuffle: training part, test part, the fold's cross-encoder
    scores of the fitting half's units), the feature model and the bag (``bags``: every unit's
    :func:`~dpmv_lib.evaluate.sentence_bag.bag_rows`) fitted on the training part's distinct units and
    the cuts on its units; an empty response scores 0."""
    from ..evaluate.u_validity import fit_cuts, grade_with

    units = units.reset_index(drop=True)
    fit_idx = np.flatnonzero(np.asarray(fit_mask, bool))
    sub, groups, y, w = _fitting_half(units, fit_mask, "relevance")
    first = ~pd.Series(groups).duplicated().to_numpy()
    empty = sub["response"].map(lambda a: not str(a).strip()).to_numpy()
    grades = {b: np.full(len(sub), np.nan) for b in blends}
    for k, (tr, te, cross_fit) in enumerate(tuned):
        cross = np.zeros(len(units))
        cross[fit_idx] = cross_fit
        parts = [p[fit_idx] for p in _blend_parts(units, fit_idx[tr[first[tr]]], bags, features, vectors, cross,
                                                  bag_config)]
        for b in grades:
            s = mix_scores(parts, b)
            s[empty] = 0.0
            grades[b][te] = grade_with(s[te], fit_cuts(s[tr], y[tr], w[tr]))
        if log is not None:
            log(f"sentence-bag blends: fold {k + 1}/{len(tuned)} scored")
    return {b: _pooled_kappas(sub, y, g, w) for b, g in grades.items()}


#: the shares of each training part's distinct units :func:`learning_curve` fits on
CURVE_FRACTIONS = (0.4, 0.6, 0.8, 1.0)


def learning_curve(units: pd.DataFrame, fit_mask: np.ndarray, bags: Sequence[np.ndarray], features: np.ndarray,
                   vectors: np.ndarray | None, fractions: Sequence[float] = CURVE_FRACTIONS,
                   blend: tuple[float, float, float] | None = None, bag_config: Any = None, *,
                   folds: int = FOLDS, shuffles: Sequence[int] = SHUFFLES) -> pd.DataFrame:
    """Relevance's binary kappa inside the fitting half as the training data grows: per shuffle, the
    :data:`FOLDS` grouped folds of :func:`fitting_half_kappa`, and in each training part a seeded
    draw (``numpy.random.default_rng(shuffle)``) of ``fraction`` of its distinct (query, response)
    units, on which :func:`bag_blend_kappas` fits the feature model, the sentence bag and the cuts;
    the test part is graded with the judge's relevance (``blend``: (cross-encoder, feature model, bag) weights, default
    the committed :data:`~dpmv_lib.evaluate.u_validity.SENTENCE_BAGGED` weight; no cross-encoder).
    One row per fraction: the mean number of distinct training units and the kappas (means over
    ``shuffles``), pooled and per response model. Whether more labels would raise the kappa is read
    from the slope."""
    from sklearn.model_selection import GroupKFold

    from ..evaluate.u_validity import SENTENCE_BAGGED

    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ParameterError(f"learning-curve fractions must lie in (0, 1], got {tuple(fractions)}")
    if blend is None:
        blend = (0.0, SENTENCE_BAGGED["relevance"], 1.0 - SENTENCE_BAGGED["relevance"])
    sub, groups, y, _ = _fitting_half(units, fit_mask, "relevance")
    recs = []
    for frac in fractions:
        out: dict[str, list[float]] = {}
        sizes = []
        for seed in shuffles:
            rng = np.random.default_rng(seed)
            parts = []
            for tr, te in GroupKFold(folds, shuffle=True, random_state=seed).split(sub, y, groups):
                distinct = np.unique(groups[tr])
                keep = rng.choice(distinct, max(1, int(round(frac * len(distinct)))), replace=False)
                parts.append((tr[np.isin(groups[tr], keep)], te, np.zeros(len(sub))))
                sizes.append(len(keep))
            for name, k in bag_blend_kappas(units, fit_mask, bags, features, vectors, parts, [blend],
                                            bag_config)[blend].items():
                out.setdefault(name, []).append(k)
        recs.append({"fraction": frac, "training units": float(np.mean(sizes)),
                     **{f"kappa {m}": float(np.mean(v)) for m, v in out.items()}})
    return pd.DataFrame.from_records(recs)


def _part_degradation(judge: Any, cross: Any, bag: Any) -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
    """Per relevance variant of the degradation set (:mod:`.judge_degradation`): the (cross-encoder,
    feature model, sentence bag) scores of its items' originals and variants: ``cross``, ``judge``'s
    holistic model and ``bag``, each fitted on the fitting half."""
    from ..common.io import read_jsonl
    from ..evaluate.rubric import DIMENSIONS
    from .judge_degradation import DEFAULT_SET, INTENDED

    model, j = judge.holistic, DIMENSIONS.index("relevance")

    def parts(items: list[tuple[str, str]]) -> list[np.ndarray]:
        Fx, Vx, bags = judge.holistic_features_vectors_and_bags(items, model.anchors)
        return [cross.predict([q for q, _ in items], [a for _, a in items]),
                model.score(model.with_content(Fx, Vx))[:, j], bag.score_bags(bags)]

    records = read_jsonl(DEFAULT_SET)
    out = {}
    for v in [v for v, dims in INTENDED.items() if "relevance" in dims]:
        items = [rec for rec in records if v in rec["variants"]]
        if items:
            out[v] = (parts([(rec["query"], rec["original"]) for rec in items]),
                      parts([(rec["query"], rec["variants"][v]) for rec in items]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print :func:`compare_feature_sets` (``--cross-encoder``: :func:`compare_cross_encoder`;
    ``--sentence-bag``: :func:`compare_sentence_bag`; ``--learning-curve``: :func:`learning_curve`) for an
    encoder (default: the committed model's)."""
    import argparse
    import sys
    from pathlib import Path

    from ..evaluate.encoders import get_encoder
    from ..evaluate.holistic import committed_encoder_spec

    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.experiments.judge_features", description=main.__doc__)
    ap.add_argument("--encoder", default=None)
    ap.add_argument("--data", default="data")
    ap.add_argument("--cross-encoder", action="store_true",
                    help="compare the committed sets with a cross-encoder fine-tuned on the labels instead "
                         "(about 20 minutes per dimension on 2 cores)")
    ap.add_argument("--learning-curve", action="store_true",
                    help="relevance's kappa inside the fitting half with a share of each training part "
                         "(whether more labels would help; about 2 minutes on 2 cores)")
    ap.add_argument("--sentence-bag", action="store_true",
                    help="compare relevance scored with a sentence bag, alone and blended with the cross-encoder "
                         "and the feature model (31 minutes on 2 cores when measured)")
    ap.add_argument("--only", default=None, nargs="+", metavar="CANDIDATE",
                    help="with --cross-encoder: these candidates of CROSS_ENCODER_CANDIDATES alone, beside the "
                         "committed set of their dimension")
    args = ap.parse_args(argv)
    candidates = None
    if args.only is not None:
        known = {n for c in CROSS_ENCODER_CANDIDATES.values() for n in c}
        unknown = [n for n in args.only if n not in known]
        if unknown:
            raise SystemExit(f"no cross-encoder candidate {unknown[0]!r}; one of {sorted(known)}")
        candidates = {d: {n: v for n, v in c.items() if n in args.only} for d, c in CROSS_ENCODER_CANDIDATES.items()}
        candidates = {d: c for d, c in candidates.items() if c}
    try:
        spec = args.encoder or committed_encoder_spec(Path(args.data) / "judge_labels")
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
    if args.learning_curve:
        from ..evaluate.u_validity import SPLIT_SEED, holistic_inputs_and_bags, split_halves

        units, F, V, _, bags = holistic_inputs_and_bags(get_encoder(spec), Path(args.data) / "judge_labels", args.data)
        curve = learning_curve(units, split_halves(units, SPLIT_SEED), bags, F, V)
        print(f"Relevance (the judge's blend) inside the fitting half, {len(units)} labelled units; "
              f"{FOLDS}-fold GroupKFold x {len(SHUFFLES)} shuffles; encoder {spec}\n\n"
              + curve.to_markdown(index=False, floatfmt=".3f") + "\n")
    elif args.sentence_bag:
        study, held = compare_sentence_bag(get_encoder(spec), data_dir=args.data, log=log)
        print(study.markdown())
        print("Held-out half (split seed of U's validation), adopted candidate only:\n\n"
              + (held.to_markdown(index=False, floatfmt=".3f") if len(held) else "none adopted") + "\n")
    elif args.cross_encoder:
        study = compare_cross_encoder(get_encoder(spec), candidates, data_dir=args.data, log=log)
        print(study.markdown())
        held = adopted_cross_encoders_heldout(study, candidates, label_dir=Path(args.data) / "judge_labels",
                                              encoder=get_encoder(spec), data_dir=args.data, log=log)
        print("Held-out half (split seed of U's validation), adopted candidates only:\n\n"
              + (held.to_markdown(index=False, floatfmt=".3f") if len(held) else "none adopted") + "\n")
    else:
        print(compare_feature_sets(get_encoder(spec), data_dir=args.data).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
