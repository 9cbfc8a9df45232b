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

:data:`RULE`: a candidate replaces the committed set only where it raises the pooled kappa by at
least :data:`MIN_GAIN` and lowers no degradation row of the dimension.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.holistic import CONTENT, DIMENSION_FEATURES, FEATURES, FORM, QUERY_SPECIFIC, SEPARATE, uses_content
from ..evaluate.rubric import DIMENSIONS

FOLDS = 5
SHUFFLES = (0, 1, 2)
MIN_GAIN = 0.05
RULE = (f"adopt a candidate only where the pooled kappa inside the fitting half rises by at least {MIN_GAIN} "
        "and no degradation row of the dimension falls")
#: candidates compared with the committed sets: for relevance every feature, and the guide's set
#: with the per-sentence joins of query and catalogue (a sentence both on the query and specific);
#: for actionability the subset fixed from the guide before any fit (advice, concrete detail, the
#: rule actionability, form)
CANDIDATES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "relevance": {"every feature": FEATURES,
                  "guide set + query-specific": (*DIMENSION_FEATURES["relevance"], *QUERY_SPECIFIC),
                  "guide set + content": (*DIMENSION_FEATURES["relevance"], *CONTENT)},
    "actionability": {"guide subset": ("advice", "concrete", "concrete_sentences", "action_rule", *FORM),
                      "separate + content": (*SEPARATE, *CONTENT)},
}


def fitting_half_kappa(units: pd.DataFrame, features: np.ndarray, fit_mask: np.ndarray, dimension: str,
                       columns: Sequence[str], vectors: np.ndarray | None = None, *, folds: int = FOLDS,
                       shuffles: Sequence[int] = SHUFFLES) -> dict[str, float]:
    """Binary kappa of ``dimension`` read from ``columns``, cross-validated inside the fitting half
    (module docstring): {"all": pooled, <response model>: within it}, means over ``shuffles``.
    Where ``columns`` read the content features, their projection is fitted on each training part's
    ``vectors`` (:meth:`~dpmv_lib.evaluate.rubric_judge.RubricJudge.holistic_features_and_vectors`)."""
    from sklearn.model_selection import GroupKFold

    from ..evaluate.holistic import ContentProjection, fit_boundaries
    from ..evaluate.u_validity import fit_cuts, grade_with, kappas

    if dimension not in DIMENSIONS:
        raise ParameterError(f"unknown dimension {dimension!r}; one of {DIMENSIONS}")
    units = units.reset_index(drop=True)
    fit_mask = np.asarray(fit_mask, bool)
    if len(fit_mask) != len(units) or len(features) != len(units):
        raise ParameterError(f"{len(units)} units, {len(features)} feature rows and {len(fit_mask)} mask entries")
    idx = np.flatnonzero(fit_mask)
    sub = units.iloc[idx].reset_index(drop=True)
    X = np.asarray(features, float)[idx]
    groups = pd.factorize(sub["query"].astype(str) + "\x00" + sub["response"].astype(str))[0]
    y = sub[dimension].to_numpy(float)
    w = sub["design_weight"].to_numpy(float) if "design_weight" in sub else np.ones(len(sub))
    empty = sub["response"].map(lambda a: not str(a).strip()).to_numpy()
    unknown = sorted(set(columns) - set(FEATURES))
    if unknown or not columns:
        raise ParameterError(f"feature set for {dimension}: unknown or no columns {unknown}")
    cols = [FEATURES.index(c) for c in columns]
    content = uses_content(columns)
    if content and (vectors is None or len(vectors) != len(units)):
        raise ParameterError(f"feature set for {dimension} reads content features: give one content vector per unit")
    V = np.asarray(vectors, float)[idx] if content and vectors is not None else np.zeros((len(idx), 0))
    first = ~pd.Series(groups).duplicated().to_numpy()     # one row per distinct (query, response)
    out: dict[str, list[float]] = {}
    for seed in shuffles:
        grades = np.full(len(sub), np.nan)
        for tr, te in GroupKFold(folds, shuffle=True, random_state=seed).split(X, y, groups):
            rows = tr[first[tr]]
            Xf = ContentProjection.fit(V[rows]).complete(X, V) if content else X
            bounds = fit_boundaries(Xf[rows][:, cols], y[rows], tuple(columns), w[rows])
            s = np.sum([b.prob(Xf) for b in bounds], axis=0)
            s[empty] = 0.0
            grades[te] = grade_with(s[te], fit_cuts(s[tr], y[tr], w[tr]))
        for name, sel in [("all", np.ones(len(sub), bool))] + [
                (m, (sub["response_model"] == m).to_numpy()) for m in sorted(set(sub["response_model"]))]:
            out.setdefault(name, []).append(kappas(y[sel], grades[sel], w[sel])[0])
    return {k: float(np.mean(v)) for k, v in out.items()}


@dataclass(frozen=True)
class FeatureStudy:
    """``table``: one row per (dimension, feature set): the columns read, kappa inside the fitting
    half (pooled and per response model), the degradation rows of the dimension and whether
    :data:`RULE` adopts it."""

    table: pd.DataFrame
    encoder: str

    def markdown(self) -> str:
        shown = self.table.astype(object).where(self.table.notna(), None)
        return (shown.to_markdown(index=False, floatfmt=".3f", missingval="-") + "\n\n"
                + f"Rule: {RULE}. Encoder {self.encoder}; {FOLDS}-fold GroupKFold inside the fitting half, "
                f"mean of {len(SHUFFLES)} shuffles.\n")

    def _repr_markdown_(self) -> str:
        return self.markdown()


def compare_feature_sets(encoder: Any, candidates: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                         label_dir: Any = None, data_dir: Any = "data") -> FeatureStudy:
    """Each dimension's committed feature set against ``candidates`` (default :data:`CANDIDATES`)."""
    from ..evaluate.rubric_judge import RubricJudge
    from ..evaluate.u_validity import SPLIT_SEED, fit_on, holistic_inputs, split_halves
    from .judge_degradation import INTENDED, evaluate_judge

    candidates = CANDIDATES if candidates is None else candidates
    units, F, V, anchors = holistic_inputs(encoder, label_dir, data_dir)
    mask = split_halves(units, SPLIT_SEED)
    rows = []
    for d, sets in candidates.items():
        meant = [v for v, dims in INTENDED.items() if d in dims]
        base: dict[str, float] | None = None
        for name, cols in {"committed": DIMENSION_FEATURES[d], **sets}.items():
            scores = {f"kappa {m}": v for m, v in fitting_half_kappa(units, F, mask, d, cols, V).items()}
            if meant:
                model = fit_on(units, F, V, mask, anchors, {}, dimension_features={d: cols})
                judge = RubricJudge(encoder, holistic=model)
                deg = evaluate_judge(judge).summary.set_index(["variant", "dimension"])
                scores.update({f"degradation {v}": float(deg.loc[(v, d), "accuracy"]) for v in meant})
            if base is None:
                base, adopt = scores, "-"
            else:
                kept = all(scores[c] >= base[c] for c in scores if c.startswith("degradation"))
                adopt = "yes" if scores["kappa all"] - base["kappa all"] >= MIN_GAIN and kept else "no"
            rows.append({"dimension": d, "feature set": name, "columns": len(cols), **scores, "adopt": adopt})
    return FeatureStudy(pd.DataFrame(rows), str(getattr(encoder, "id", type(encoder).__name__)))


def main(argv: Sequence[str] | None = None) -> int:
    """Print :func:`compare_feature_sets` for an encoder (default: the committed model's)."""
    import argparse
    from pathlib import Path

    from ..evaluate.encoders import get_encoder
    from ..evaluate.holistic import committed_encoder_spec

    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.experiments.judge_features", description=main.__doc__)
    ap.add_argument("--encoder", default=None)
    ap.add_argument("--data", default="data")
    args = ap.parse_args(argv)
    try:
        spec = args.encoder or committed_encoder_spec(Path(args.data) / "judge_labels")
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None
    print(compare_feature_sets(get_encoder(spec), data_dir=args.data).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
