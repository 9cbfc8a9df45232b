"""Which of the judge's holistic dimensions U may hold (paper C.5 "Utility judging": U is the mean
of relevance, correctness, actionability and personalisation, over 4).

The judge's four dimensions are checked against the independent labels of ``data/judge_labels``
(annotator A on ``sample.jsonl``, plus each extension of :data:`EXTENSIONS` whose labels exist:
surrogate units in ``sample_extra.jsonl`` and ``sample_extra_b.jsonl``, SmolLM2 units in ``sample_extra_smollm2.jsonl``,
``sample_extra_smollm2_b.jsonl`` and the two-stratum draw ``sample_extra_smollm2_c.jsonl`` of
:mod:`.enriched_draw`, whose held-out units are also measured weighted to its population,
:func:`enriched_table`), by
fitting on one half of the labelled units and measuring on the other:

* **split** (:func:`split_halves`): ``sklearn.model_selection.StratifiedGroupKFold`` with two
  folds (seeded), stratified by response model x item kind, grouped by (query, response). The
  holistic labels depend only on the query and the response, so a response that occurs in several
  units lies wholly in one half; otherwise the held-out half would contain copies of fitted units.
* **model** (:mod:`.holistic`): the rubric judge's holistic scores come from cumulative logistic
  models on item-independent features, fitted on the fitting half of the split of seed
  :data:`SPLIT_SEED` (:func:`fit_holistic_model`; committed with the labels). :func:`validate_u`
  refuses a model fitted on other labels or another split (it could have seen held-out units) and,
  for a judge with the encoder the model was fitted with, one that differs from the refit. A judge
  with another encoder (e.g. an OpenVINO runtime of the same MiniLM) applies the committed model to
  its own features. For the spread over other splits the model is refitted on each split's
  fitting half; a cross-encoded dimension's spread needs a fine-tuning per split, done once and
  committed as shards (:mod:`.cross_encoder_spread`), read where every split has a current one.
  A judge without a model (the hashing encoder) keeps the rules of rubric-v4.
* **fit** (:func:`fit_cuts`): per dimension, the judge's 0-4 score s is read on the labels'
  scale by four cut points: grade = number of cuts c_k with s >= c_k. Each c_k maximises Cohen's
  kappa of (label >= k) against (s >= c_k) on the fitting half (candidates: every score value,
  from ``sklearn.metrics.roc_curve``; ties go to the cut nearest k, the judge's own boundary);
  the cuts are then made non-decreasing. This monotone recalibration never changes which of two
  responses the judge scores higher, so a validated dimension enters U with the judge's own scores.
* **agreement**: on the held-out half only, ``sklearn.metrics.cohen_kappa_score`` of the binary
  "positive" (grade >= 2, the positive class of :mod:`.judge_agreement`; the table's
  ``kappa``) and quadratic-weighted kappa on the 0-4 grades (``weighted_kappa``), for the judge's
  grade read directly (``raw``) and for the fitted cuts (``fitted``); pooled and per response model.
* **weights** (:func:`~.enriched_draw.design_weights`): every unit counts once, except the units
  of the two-stratum draw, which count by inverse inclusion probability scaled to the draw's
  effective sample size; the model fit, the cuts and the kappas all use these weights
  (``sklearn``'s ``sample_weight``), so the draw's oversampled stratum adds positives without
  standing for more of the responses than it does. ``kappa_fitted_unweighted`` counts every unit once.
* **U** (:func:`u_dimensions`, :class:`UDefinition`): a dimension whose pooled held-out fitted
  kappa is below :data:`FLOOR` leaves U; U is the mean of the others over 4. The goal for a
  dimension is :data:`GOAL`.

No parameter is fitted on the held-out half: the split, then the model and the cuts from the
fitting half, then one measurement. The split behind U is fixed (:data:`SPLIT_SEED`);
:func:`split_spread` shows how far the kappa moves over other splits, each with its own refit.
Caveats: the feature list of :mod:`.holistic` was drafted from the labelling guide and a few
variants were compared on the seed-0 split, held-out half included, so the spread over the other
splits is the less biased figure (which features each dimension reads was later compared inside the
fitting half only, :mod:`dpmv_lib.experiments.judge_features`); many surrogate responses share stock
sentences, so the halves are not independent in wording. Under rubric-v4 a unit is judged with its one rubric item
(:func:`~.judge_agreement.judge_units`) while a transcript's turn is judged with all its items;
rubric-v5's holistic scores do not depend on the items.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..common.io import write_atomic
from ..core.errors import ParameterError
from .enriched_draw import design_weights
from .holistic import FEATURES, REFIT_TOLERANCE, HolisticModel, catalogue_anchors
from .holistic import fit as fit_holistic
from .judge_agreement import SHOWN, annotator_name, judge_units, labels_dir, load_units
from .rubric import DIMENSIONS, Judge

FLOOR = 0.4         # a dimension below this held-out kappa leaves U
GOAL = 0.6          # the held-out kappa a dimension should reach
MIN_POSITIVES = 200  # labelled positives wanted per dimension and response model
EXTRA_SAMPLE = "sample_extra.jsonl"
EXTRA_LABELS = "labels_extra_a.jsonl"
SURR_SAMPLE_B = "sample_extra_b.jsonl"
SURR_LABELS_B = "labels_extra_b.jsonl"
#: a second annotator's labels of a subset of the second surrogate extension (not read into the pool)
SURR_LABELS_B_B = "labels_extra_b_b.jsonl"
SMOL_SAMPLE = "sample_extra_smollm2.jsonl"
SMOL_LABELS = "labels_extra_smollm2.jsonl"
SMOL_SAMPLE_B = "sample_extra_smollm2_b.jsonl"
SMOL_LABELS_B = "labels_extra_smollm2_b.jsonl"
SMOL_SAMPLE_C = "sample_extra_smollm2_c.jsonl"
SMOL_LABELS_C = "labels_extra_smollm2_c.jsonl"
#: a second annotator's labels of a subset of the enriched draw (its reliability; not read into the pool)
SMOL_LABELS_C_B = "labels_extra_smollm2_c_b.jsonl"
#: the label extensions: pool -> (sample file, label file); read where the label file exists
EXTENSIONS = {"extra": (EXTRA_SAMPLE, EXTRA_LABELS), "extra_b": (SURR_SAMPLE_B, SURR_LABELS_B),
              "extra_smollm2": (SMOL_SAMPLE, SMOL_LABELS),
              "extra_smollm2_b": (SMOL_SAMPLE_B, SMOL_LABELS_B), "extra_smollm2_c": (SMOL_SAMPLE_C, SMOL_LABELS_C)}
MODELS = ("surrogate", "smollm2")
#: the split behind U's definition: fixed, so that runs with other seeds share one U
SPLIT_SEED = 0
#: the splits over which the held-out kappa's spread is shown (:func:`split_spread`)
SPREAD_SEEDS = tuple(range(10))
SPREAD_DIR = "cross_encoder_spread"   # the cross-encoded dimensions' per-split shards, under the label directory
CROSS_SPREAD_FORMAT = "dpmv-cross-encoder-spread-1"
#: dimensions the judge scores with a cross-encoder fine-tuned on the fitting half
#: (:mod:`.cross_encoder`), each with the feature model's weight in its score
#: (:class:`~.holistic.CrossEncoded`; 0: the cross-encoder alone): those the feature study's rule
#: adopted (``python -m dpmv_lib.experiments.judge_features --cross-encoder``; data/judge_labels/README.md)
CROSS_ENCODED: Mapping[str, float] = {"actionability": 0.0}
#: dimensions the judge scores with a sentence bag fitted on the fitting half (:mod:`.sentence_bag`),
#: each with the feature model's weight in its score (:class:`~.holistic.SentenceBagged`): those the
#: sentence-bag study's rule adopted (``python -m dpmv_lib.experiments.judge_features --sentence-bag``)
SENTENCE_BAGGED: Mapping[str, float] = {"relevance": 0.5}
#: a refitted cross-encoder's scores on the labelled units may differ from the committed one's by this
#: much on another CPU (float rounding in 3 epochs of training; the weights are stored in float16)
CROSS_REFIT_TOLERANCE = 0.05
#: a pooled kappa this far above every per-model kappa is flagged (:meth:`UValidity.mixed_dimensions`)
MIXING_MARGIN = 0.1
NOT_VALIDATED = " (not validated)"
#: what :attr:`UValidity.held_out` keeps of each held-out unit
HELD_OUT_COLUMNS = ("unit_id", "track", "response_model", "method", "side", "query", "response", "design_weight",
                    *DIMENSIONS, *(f"judge_{d}" for d in DIMENSIONS))


# ---- the labelled units -----------------------------------------------------------------------------
def label_pool(label_dir: str | Path | None = None) -> pd.DataFrame:
    """Annotator A's units of ``sample.jsonl`` and, for each extension of :data:`EXTENSIONS`
    whose labels exist, its labelled units (column ``pool``: "sample" or the extension's key;
    ``design_weight``: :func:`~.enriched_draw.design_weights`)."""
    d = labels_dir(label_dir)
    parts = [load_units(d, "a").assign(pool="sample")]
    for pool, (sample, labels) in EXTENSIONS.items():
        if (d / labels).exists():
            parts.append(load_units(d, annotator_name(labels), sample)
                         .assign(pool=pool))
    units = pd.concat(parts, ignore_index=True)
    if units["unit_id"].duplicated().any():
        raise ParameterError("judge labels: unit ids shared by two sample files: "
                             f"{units.loc[units['unit_id'].duplicated(), 'unit_id'].tolist()[:5]}")
    units["design_weight"] = design_weights(units["inclusion_probability"] if "inclusion_probability" in units
                                            else np.full(len(units), np.nan))
    return units


def split_halves(units: pd.DataFrame, seed: int = 0) -> np.ndarray:
    """Boolean mask, True for the fitting half: two seeded ``StratifiedGroupKFold`` folds,
    stratified by response model x item kind, grouped by (query, response)."""
    from sklearn.model_selection import StratifiedGroupKFold

    need = {"response_model", "item_kind", "query", "response"}
    if need - set(units.columns):
        raise ParameterError(f"units lack columns {sorted(need - set(units.columns))}")
    strata = (units["response_model"].astype(str) + "/" + units["item_kind"].astype(str)).to_numpy()
    groups = pd.factorize(units["query"].astype(str) + "\x00" + units["response"].astype(str))[0]
    if len(set(groups)) < 2:
        raise ParameterError("need at least two distinct (query, response) pairs to split")
    fit, _ = next(StratifiedGroupKFold(n_splits=2, shuffle=True, random_state=seed).split(units, strata, groups))
    mask = np.zeros(len(units), bool)
    mask[fit] = True
    return mask


# ---- the fit ------------------------------------------------------------------------------------------
def _kappa_per_cut(y: np.ndarray, s: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every cut c of ``roc_curve`` (predict s >= c) with the binary Cohen's kappa of y it gives
    (units weighted by ``w`` where given)."""
    from sklearn.metrics import roc_curve

    fpr, tpr, cuts = roc_curve(y, s, drop_intermediate=False, sample_weight=w)
    pos = float(np.sum(y if w is None else w * y))
    neg = float(len(y) if w is None else np.sum(w)) - pos
    tp, fp = tpr * pos, fpr * neg
    fn, tn = pos - tp, neg - fp
    den = (tp + fp) * (fp + tn) + (tp + fn) * (fn + tn)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = np.where(den > 0, 2 * (tp * tn - fn * fp) / den, 0.0)
    return np.asarray(cuts, float), kappa


def fit_cuts(scores: Sequence[float], labels: Sequence[int],
             sample_weight: Sequence[float] | None = None) -> tuple[float, float, float, float]:
    """The four cut points c_1 <= ... <= c_4 that read judge scores on the 0-4 label scale (see the
    module docstring; kappa weighted by ``sample_weight`` where given). A boundary k that no fitting
    label reaches gets c_k = inf; one that every label reaches gets -inf."""
    s, y = np.asarray(scores, float), np.asarray(labels, float)
    ok = ~(np.isnan(s) | np.isnan(y))
    s, y = s[ok], y[ok]
    w = None if sample_weight is None else np.asarray(sample_weight, float)[ok]
    if len(s) == 0:
        raise ParameterError("no scored and labelled units to fit on")
    out = []
    for k in range(1, 5):
        pos = y >= k
        if not pos.any():
            out.append(math.inf)
            continue
        if pos.all():
            out.append(-math.inf)
            continue
        cuts, kappa = _kappa_per_cut(pos, s, w)
        best = np.flatnonzero(kappa >= kappa.max() - 1e-12)
        out.append(float(cuts[best[np.argmin(np.abs(cuts[best] - k))]]))
    c = np.maximum.accumulate(np.array(out))
    return (float(c[0]), float(c[1]), float(c[2]), float(c[3]))


def grade_with(scores: Sequence[float], cuts: Sequence[float]) -> np.ndarray:
    """0-4: how many cuts a score reaches (NaN stays NaN)."""
    s = np.asarray(scores, float)
    g = (s[:, None] >= np.asarray(cuts, float)[None, :]).sum(axis=1).astype(float)
    g[np.isnan(s)] = np.nan
    return g


def kappas(labels: Sequence[float], grades: Sequence[float],
           sample_weight: Sequence[float] | None = None) -> tuple[float, float]:
    """(binary kappa of grade >= 2, quadratic-weighted kappa on 0-4), ``sklearn.metrics.cohen_kappa_score``
    (each unit weighted by ``sample_weight`` where given); NaN where a side has a single class."""
    from sklearn.metrics import cohen_kappa_score

    a, b = np.asarray(labels, float), np.asarray(grades, float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    w = None if sample_weight is None else np.asarray(sample_weight, float)[ok]
    ya, yb = a >= SHOWN, b >= SHOWN
    binary = float(cohen_kappa_score(ya, yb, sample_weight=w)) if len(set(ya) | set(yb)) > 1 else math.nan
    ga, gb = np.rint(a).astype(int), np.rint(b).astype(int)
    weighted = float(cohen_kappa_score(ga, gb, weights="quadratic", labels=list(range(5)), sample_weight=w)) \
        if len(set(ga) | set(gb)) > 1 else math.nan
    return binary, weighted


def heldout_table(judged: pd.DataFrame, fit_mask: np.ndarray) -> tuple[pd.DataFrame, dict[str, tuple]]:
    """Held-out agreement per dimension, pooled (``response_model`` "all") and per response model.

    Parameters
    ----------
    judged : DataFrame
        :func:`~.judge_agreement.judge_units` output: the labels and ``judge_<dimension>``.
    fit_mask : array of bool
        True for the fitting half (:func:`split_halves`).

    Returns
    -------
    (table, cuts)
        One row per (dimension, response model): units and positives of each half, the fitted
        cut for "positive" (``cut_2``), ``kappa_raw`` / ``kappa_fitted`` (binary) and
        ``weighted_kappa_raw`` / ``weighted_kappa_fitted`` (quadratic) on the held-out half, each
        unit counted with its ``design_weight`` where the column exists (``kappa_fitted_unweighted``:
        every unit once); the cuts per dimension, fitted with the same weights.
    """
    fit_mask = np.asarray(fit_mask, bool)
    if len(fit_mask) != len(judged):
        raise ParameterError(f"fit mask has {len(fit_mask)} entries for {len(judged)} units")
    w = judged["design_weight"].to_numpy(float) if "design_weight" in judged else np.ones(len(judged))
    cuts = {d: fit_cuts(judged.loc[fit_mask, f"judge_{d}"], judged.loc[fit_mask, d], w[fit_mask])
            for d in DIMENSIONS}
    recs = []
    models = ["all"] + [m for m in MODELS if m in set(judged["response_model"])] + \
        sorted(set(judged["response_model"]) - set(MODELS))
    for d in DIMENSIONS:
        fitted = grade_with(judged[f"judge_{d}"], cuts[d])
        for model in models:
            sel = np.ones(len(judged), bool) if model == "all" else (judged["response_model"] == model).to_numpy()
            ho = sel & ~fit_mask
            y = judged[d].to_numpy(float)
            raw = judged[f"judge_{d}"].to_numpy(float)
            k_raw, w_raw = kappas(y[ho], raw[ho], w[ho])
            k_fit, w_fit = kappas(y[ho], fitted[ho], w[ho])
            recs.append({"dimension": d, "response_model": model,
                         "units_fit": int((sel & fit_mask).sum()), "units_held_out": int(ho.sum()),
                         "positives_fit": int((y[sel & fit_mask] >= SHOWN).sum()),
                         "positives_held_out": int((y[ho] >= SHOWN).sum()),
                         "cut_2": cuts[d][SHOWN - 1], "kappa_raw": k_raw, "kappa_fitted": k_fit,
                         "weighted_kappa_raw": w_raw, "weighted_kappa_fitted": w_fit,
                         "kappa_fitted_unweighted": kappas(y[ho], fitted[ho])[0]})
    table = pd.DataFrame.from_records(recs)
    table["goal_met"] = table["kappa_fitted"] >= GOAL
    return table, cuts


def enriched_table(judged: pd.DataFrame, fit_mask: np.ndarray, cuts: Mapping[str, tuple]) -> pd.DataFrame:
    """The held-out units of the two-stratum draw (:mod:`.enriched_draw`; the units with an
    ``inclusion_probability``), per dimension: the binary kappa of the fitted grades as drawn
    (``kappa_drawn``) and with the units' design weights, proportional to 1 / inclusion probability
    (``kappa_weighted``: the draw's population, the llm store's units of its pairs), with the
    positive rate both ways. Empty where no labelled unit carries a probability."""
    if "inclusion_probability" not in judged.columns:
        return pd.DataFrame()
    ho = ~np.asarray(fit_mask, bool) & judged["inclusion_probability"].notna().to_numpy()
    if not ho.any():
        return pd.DataFrame()
    w = judged["design_weight"].to_numpy(float)[ho]
    recs = []
    for d in DIMENSIONS:
        y = judged[d].to_numpy(float)[ho]
        g = grade_with(judged[f"judge_{d}"], cuts[d])[ho]
        pos = y >= SHOWN
        recs.append({"dimension": d, "units_held_out": int(ho.sum()),
                     "units_high": int((judged["stratum"].to_numpy()[ho] == "high").sum()),
                     "positives_held_out": int(pos.sum()), "positive_rate_drawn": float(pos.mean()),
                     "positive_rate_weighted": float(np.average(pos, weights=w)),
                     "kappa_drawn": kappas(y, g)[0], "kappa_weighted": kappas(y, g, w)[0]})
    return pd.DataFrame.from_records(recs)


def split_spread(judged: pd.DataFrame, seeds: Sequence[int] = SPREAD_SEEDS,
                 rescore: Callable[[np.ndarray], pd.DataFrame] | None = None,
                 fixed: Sequence[str] = ()) -> pd.DataFrame:
    """How much the held-out fitted kappa moves with the split: per dimension and response model,
    its min, median and max over the splits of ``seeds`` (each split fitted and measured afresh;
    ``rescore(fit_mask)`` gives the units judged by a holistic model refitted on that split's
    fitting half, so no split is measured on units its model was fitted on). The dimensions of
    ``fixed`` have a scorer that is not refitted per split (a cross-encoder: one fine-tuning each):
    their spread is NaN, never measured on units their scorer was fitted on."""
    parts = []
    for s in seeds:
        mask = split_halves(judged, s)
        parts.append(heldout_table(rescore(mask) if rescore else judged, mask)[0].assign(split_seed=s))
    t = pd.concat(parts, ignore_index=True)
    g = t.groupby(["dimension", "response_model"], sort=False)["kappa_fitted"]
    out = pd.DataFrame({"kappa_fitted_min": g.min(), "kappa_fitted_median": g.median(),
                        "kappa_fitted_max": g.max()}).reset_index()
    spread = ["kappa_fitted_min", "kappa_fitted_median", "kappa_fitted_max"]
    out.loc[out["dimension"].isin(list(fixed)), spread] = math.nan
    return out


# ---- the definition of U ----------------------------------------------------------------------------
def u_dimensions(heldout_kappa: Mapping[str, float], floor: float = FLOOR) -> tuple[str, ...]:
    """The dimensions (in :data:`~.rubric.DIMENSIONS` order) whose held-out kappa is >= ``floor``;
    a NaN or missing kappa leaves U."""
    unknown = set(heldout_kappa) - set(DIMENSIONS)
    if unknown:
        raise ParameterError(f"unknown U dimensions {sorted(unknown)}; U holds {DIMENSIONS}")
    return tuple(d for d in DIMENSIONS if d in heldout_kappa and np.isfinite(heldout_kappa[d])
                 and heldout_kappa[d] >= floor)


@dataclass(frozen=True)
class UDefinition:
    """U = mean of ``dimensions`` / 4. ``kappas``: the pooled held-out kappa of every dimension
    (empty when U was not validated); ``validated``: whether the dimensions come from
    :func:`u_dimensions`."""

    dimensions: tuple[str, ...] = DIMENSIONS
    kappas: Mapping[str, float] = field(default_factory=dict)
    floor: float = FLOOR
    validated: bool = False

    def __post_init__(self) -> None:
        bad = [d for d in self.dimensions if d not in DIMENSIONS]
        if bad:
            raise ParameterError(f"unknown U dimensions {bad}; U holds {DIMENSIONS}")

    @classmethod
    def from_kappas(cls, heldout_kappa: Mapping[str, float], floor: float = FLOOR) -> "UDefinition":
        return cls(u_dimensions(heldout_kappa, floor), dict(heldout_kappa), floor, True)

    @property
    def dims(self) -> str:
        """Short form for a table column: "relevance+personalisation" ("none" if empty; with
        " (not validated)" when it was not checked)."""
        return ("+".join(self.dimensions) or "none") + ("" if self.validated else NOT_VALIDATED)

    @property
    def label(self) -> str:
        """"U = mean(relevance, personalisation)", with "(not validated)" when it was not checked."""
        body = (f"U = mean({', '.join(self.dimensions)})" if self.dimensions
                else "U = undefined (no dimension validated)")
        return body if self.validated else f"{body} (not validated against labels)"

    def sentence(self) -> str:
        """Which dimensions U holds and why, from the kappas."""
        if not self.validated:
            return f"{self.label}: the judge's dimensions were not checked against the labels in this run."
        kept = [f"{d} ({self.kappas[d]:.2f})" for d in self.dimensions]
        left = [f"{d} ({self.kappas.get(d, math.nan):.2f})" for d in DIMENSIONS if d not in self.dimensions]
        text = (f"{self.label}: held-out kappa (binary, grade >= 2, judge cuts fitted on the other half) "
                f"of {', '.join(kept) or 'no dimension'} reaches {self.floor:g}")
        if left:
            text += f"; {', '.join(left)} stay{'s' if len(left) == 1 else ''} below it and leave U"
        reach = [d for d in self.dimensions if self.kappas[d] >= GOAL]
        text += (f". Goal {GOAL:g} reached by {', '.join(reach)}" if reach
                 else f". No dimension reaches the goal {GOAL:g}")
        return text + "."

    def apply(self, per_transcript: pd.DataFrame) -> pd.DataFrame:
        """A copy of :func:`~.judge.score_transcripts` output with ``U`` = mean of the dimensions / 4
        (NaN if none), the four-dimension mean kept as ``U_all``, and ``U_dims`` naming the dimensions."""
        missing = set(DIMENSIONS) - set(per_transcript.columns)
        if missing:
            raise ParameterError(f"per-transcript scores lack columns {sorted(missing)}")
        out = per_transcript.copy()
        out["U_all"] = out[list(DIMENSIONS)].mean(axis=1, skipna=False) / 4.0
        out["U"] = out[list(self.dimensions)].mean(axis=1, skipna=False) / 4.0 if self.dimensions else math.nan
        if "failed" in out.columns:
            out.loc[out["failed"].astype(bool), ["U", "U_all"]] = math.nan
        out["U_dims"] = self.dims
        return out


def dims_label(dims: str) -> str:
    """The label of a ``U_dims`` value: "relevance+personalisation" -> "U = mean(relevance, personalisation)"."""
    body = dims.removesuffix(NOT_VALIDATED)
    names = tuple(x for x in body.split("+") if x and x != "none")
    return UDefinition(names, validated=body == dims).label


# ---- how many labels -------------------------------------------------------------------------------
def positives(units: pd.DataFrame, need: int = MIN_POSITIVES) -> pd.DataFrame:
    """Labelled positives (grade >= 2) per response model and dimension, and the shortfall to ``need``."""
    recs = []
    for model in sorted(set(units["response_model"]), key=lambda m: (m not in MODELS, m)):
        g = units[units["response_model"] == model]
        for d in DIMENSIONS:
            pos = int((g[d] >= SHOWN).sum())
            recs.append({"response_model": model, "dimension": d, "units": int(len(g)), "positives": pos,
                         "need": need, "shortfall": max(0, need - pos)})
    return pd.DataFrame.from_records(recs)


def extra_units_needed(units: pd.DataFrame, model: str = "surrogate", need: int = MIN_POSITIVES,
                       confidence: float = 0.95) -> pd.DataFrame:
    """New units of ``model`` to label so that every dimension can reach ``need`` positives: per
    dimension the shortfall over the lower Wilson bound (``scipy.stats.binomtest``) of its
    positive rate in the labelled units of that model. The sample needs the largest."""
    from scipy.stats import binomtest

    pos = positives(units, need)
    pos = pos[pos["response_model"] == model]
    if pos.empty:
        raise ParameterError(f"no labelled units of response model {model!r}")
    recs = []
    for r in pos.itertuples(index=False):
        low = binomtest(r.positives, r.units).proportion_ci(confidence, method="wilson").low if r.units else 0.0
        n = 0 if r.shortfall == 0 else (math.inf if low <= 0 else math.ceil(r.shortfall / low))
        recs.append({"dimension": r.dimension, "units": r.units, "positives": r.positives,
                     "rate": r.positives / r.units if r.units else math.nan, "rate_low": float(low),
                     "shortfall": r.shortfall, "units_needed": n})
    return pd.DataFrame.from_records(recs)


# ---- everything, for a notebook ----------------------------------------------------------------------
@dataclass(frozen=True)
class UValidity:
    """The held-out agreement table, the cuts, the definition of U and the label counts."""

    table: pd.DataFrame
    cuts: Mapping[str, tuple]
    definition: UDefinition
    positives: pd.DataFrame
    judge_id: str
    seed: int
    n_units: int
    n_extra: int
    enriched: pd.DataFrame = field(default_factory=pd.DataFrame)
    cross_encoded: Mapping[str, float] = field(default_factory=dict)
    cross_spread: Mapping[str, int] = field(default_factory=dict)
    spread_splits: int = 0
    #: the held-out half's units: labels and the judge's scores of every dimension (:data:`HELD_OUT_COLUMNS`)
    held_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: sentence-bagged dimension -> the feature model's weight in its score
    sentence_bagged: Mapping[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """One paragraph from the numbers."""
        t = self.table
        per = []
        for model in [m for m in t["response_model"].unique() if m != "all"]:
            r = t[t["response_model"] == model].set_index("dimension")["kappa_fitted"]
            per.append(f"{model}: " + ", ".join(f"{d} {r[d]:.2f}" for d in DIMENSIONS))
        short = self.positives[self.positives["shortfall"] > 0]
        lack = "; ".join(f"{m}: " + ", ".join(f"{r.dimension} {r.positives}" for r in g.itertuples())
                         for m, g in short.groupby("response_model", sort=False))
        spread = ""
        if "kappa_fitted_min" in t.columns:
            a = t[t["response_model"] == "all"].set_index("dimension")
            spread = (" Over other splits the pooled held-out kappa ranges " + ", ".join(
                f"{d} {a.at[d, 'kappa_fitted_min']:.2f}-{a.at[d, 'kappa_fitted_max']:.2f}" for d in DIMENSIONS
                if not math.isnan(a.at[d, "kappa_fitted_min"]))
                + f" (the floor is {self.definition.floor:g}).")
        cross = ""
        if self.cross_encoded or self.sentence_bagged:
            ce = ("a cross-encoder (all-MiniLM-L6-v2 reading the query and the response together, fine-tuned on the "
                  "fitting half's labels; dpmv_lib.evaluate.cross_encoder)")
            parts = [f"{d} is scored by {ce if i == 0 else 'its own such cross-encoder'}"
                     + (f", its score weighted {1 - w:g} beside the feature model's {w:g}" if w else "")
                     for i, (d, w) in enumerate(self.cross_encoded.items())]
            parts += [f"{d} is scored by a sentence bag (each response sentence's embedding read against the "
                      "query's, a linear score per sentence pooled by a soft maximum, fitted on the fitting half's "
                      "labels; dpmv_lib.evaluate.sentence_bag, torch)"
                      + (f", its score weighted {1 - w:g} beside the feature model's {w:g}" if w else "")
                      + " and refitted on every split" for d, w in self.sentence_bagged.items()]
            text = "; ".join(parts)
            cross = f" {text[0].upper()}{text[1:]}; the other dimensions by the feature model.{self._cross_spread()}"
        return (f"{self.definition.sentence()}{self._mixed()}{cross} Judge {self.judge_id}, {self.n_units} labelled "
                f"units ({self.n_extra} from the extensions), split with seed {self.seed}. Held-out kappa per response "
                f"model: {'; '.join(per)}.{spread} Positives (grade >= 2) below {MIN_POSITIVES}: {lack or 'none'} "
                f"(sklearn.model_selection.StratifiedGroupKFold split, sklearn.metrics.cohen_kappa_score)."
                f"{self._enriched()}")

    def _cross_spread(self) -> str:
        done = {d: n for d, n in self.cross_spread.items() if n}
        missing = [d for d in self.cross_encoded if d not in done]
        out = ""
        if done:
            out = (" Their spread over other splits comes from one fine-tuning per split and dimension, committed "
                   f"under data/judge_labels/{SPREAD_DIR} (dpmv_lib.evaluate.cross_encoder_spread): "
                   + ", ".join(f"{d} {n} of {self.spread_splits} splits" for d, n in done.items())
                   + (" (a range is shown only where every split is done)"
                      if any(n < self.spread_splits for n in done.values()) else "") + ".")
        if missing:
            out += (f" The spread over other splits is not computed for {', '.join(missing)} "
                    f"(`python -m dpmv_lib.evaluate.cross_encoder_spread` fine-tunes one per split).")
        return out

    def _enriched(self) -> str:
        e = self.enriched
        if e.empty:
            return ""
        r = e.set_index("dimension")
        a = self.table[self.table["response_model"] == "all"].set_index("dimension")
        once = ""
        if "kappa_fitted_unweighted" in a.columns:
            once = (" Counting every unit once instead (the draw's oversampled stratum at full weight), the pooled "
                    "held-out kappa reads " + ", ".join(f"{d} {a.at[d, 'kappa_fitted_unweighted']:.2f}"
                                                        for d in DIMENSIONS) + ".")
        return (f"{once} The enriched SmolLM2 draw ({r['units_held_out'].iloc[0]} held-out units, "
                f"{r['units_high'].iloc[0]} of them echoing a released view) gives, as drawn and weighted to its "
                "population by inverse inclusion probability: " + ", ".join(
                    f"{d} {r.at[d, 'kappa_drawn']:.2f} / {r.at[d, 'kappa_weighted']:.2f}" for d in DIMENSIONS)
                + " (positive rate of personalisation "
                f"{r.at['personalisation', 'positive_rate_drawn']:.2f} as drawn, "
                f"{r.at['personalisation', 'positive_rate_weighted']:.2f} weighted).")

    def mixed_dimensions(self) -> dict[str, dict[str, float]]:
        """Dimensions whose pooled held-out kappa exceeds every per-model kappa by more than
        :data:`MIXING_MARGIN`: the pooled figure then rests on the response models' different
        base rates more than on ranking responses within one model. Maps dimension -> kappas."""
        t = self.table
        out = {}
        for d in DIMENSIONS:
            r = t[t["dimension"] == d].set_index("response_model")["kappa_fitted"]
            per = r.drop("all", errors="ignore").dropna()
            if "all" in r and len(per) > 1 and per.max() < r["all"] - MIXING_MARGIN:
                out[d] = r.to_dict()
        return out

    def _mixed(self) -> str:
        mixed = self.mixed_dimensions()
        if not mixed:
            return ""
        return " " + " ".join(
            f"{d.capitalize()}'s pooled {k['all']:.2f} rests on the response models' base rates: within a model it is "
            + ", ".join(f"{m} {v:.2f}" for m, v in k.items() if m != "all") + "." for d, k in mixed.items())

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def markdown(self) -> str:
        """The held-out table and :meth:`summary`, as Markdown."""
        cols = [c for c in ("dimension", "response_model", "units_held_out", "positives_held_out", "kappa_raw",
                            "kappa_fitted", "kappa_fitted_min", "kappa_fitted_max", "weighted_kappa_raw",
                            "weighted_kappa_fitted", "cut_2", "goal_met") if c in self.table.columns]
        enriched = "" if self.enriched.empty else f"{self.enriched_markdown()}\n"
        return f"{self.table[cols].to_markdown(index=False, floatfmt='.3f')}\n\n{enriched}{self.summary()}\n"

    def enriched_markdown(self) -> str:
        """:attr:`enriched` (:func:`enriched_table`) with its caption, as Markdown."""
        return ("Enriched SmolLM2 draw, held-out half: kappa as drawn and weighted to its population "
                f"(dpmv_lib.evaluate.enriched_draw).\n\n{self.enriched.to_markdown(index=False, floatfmt='.3f')}\n")


def validate_u(judge: Judge, label_dir: str | Path | None = None, data_dir: str | Path = "data", *,
               seed: int = SPLIT_SEED, spread_seeds: Sequence[int] = SPREAD_SEEDS) -> UValidity:
    """Judge every labelled unit (:func:`~.judge_agreement.judge_units`), split with ``seed``, fit
    the cuts on one half, measure kappa on the other, and define U from the pooled held-out kappas
    of that split; the kappa's range over the splits of ``spread_seeds`` is reported beside it."""
    from ..bench.datasets import load_benchmark
    from ..common.paths import resolve

    units = label_pool(label_dir)
    benches = {t: load_benchmark(t, str(resolve(data_dir))) for t in sorted(set(units["track"]))}
    judged = judge_units(units, benches, judge)
    rescore = None
    model = getattr(judge, "holistic", None)
    cross = {d: model.cross_encoded[d].feature_weight for d in DIMENSIONS
             if model is not None and d in model.cross_encoded}
    if model is not None:
        info = model.fit_info
        stale = f"the judge's holistic model ({model.sha}) is not the one the labels' fitting half gives"
        if info.get("labels") != _label_hash(label_dir) or info.get("split_seed") != seed:
            raise ParameterError(f"{stale}: it was fitted on labels {info.get('labels')} with split seed "
                                 f"{info.get('split_seed')}, these are {_label_hash(label_dir)} with seed {seed}; "
                                 "refit it with `python -m dpmv_lib.evaluate.u_validity`")
        parts = [(d, "cross-encoder", ref.fit_info) for d, ref in model.cross_encoded.items()]
        parts += [(d, "sentence bag", ref.bag.fit_info) for d, ref in model.sentence_bagged.items()]
        for d, kind, fitted in parts:
            if fitted.get("labels") != _label_hash(label_dir) or fitted.get("split_seed") != seed:
                raise ParameterError(f"{stale}: its {d} {kind} was fitted on labels "
                                     f"{fitted.get('labels')} with split seed {fitted.get('split_seed')}; "
                                     "refit it with `python -m dpmv_lib.evaluate.u_validity`")
        rescore = _holistic_rescorer(judge, units, judged, label_dir)
        if info.get("encoder") == str(getattr(getattr(judge, "encoder", None), "id", "")):
            # the same features: the committed model must be the refit itself
            refit = rescore(split_halves(units, seed))
            cols = [f"judge_{d}" for d in DIMENSIONS]
            gap = float(np.nanmax(np.abs(refit[cols].to_numpy(float) - judged[cols].to_numpy(float))))
            if gap > REFIT_TOLERANCE:
                raise ParameterError(f"{stale} (scores differ by up to {gap:.3g}): refit it with "
                                     "`python -m dpmv_lib.evaluate.u_validity`")
    fit_mask = split_halves(judged, seed)
    table, cuts = heldout_table(judged, fit_mask)
    cross_spread: dict[str, int] = {}
    if spread_seeds:
        table = table.merge(split_spread(judged, spread_seeds, rescore, tuple(cross)),
                            on=["dimension", "response_model"], how="left")
        if cross and model is not None:
            table, cross_spread = _with_cross_spread(table, model, labels_dir(label_dir) / SPREAD_DIR, spread_seeds)
    pooled = table[table["response_model"] == "all"].set_index("dimension")["kappa_fitted"]
    held_out = judged.loc[~fit_mask, [c for c in HELD_OUT_COLUMNS if c in judged.columns]].reset_index(drop=True)
    return UValidity(table, cuts, UDefinition.from_kappas(pooled.to_dict()), positives(units),
                     str(getattr(judge, "id", type(judge).__name__)), seed, len(units),
                     int((units["pool"] != "sample").sum()), enriched_table(judged, fit_mask, cuts), cross,
                     cross_spread, len(spread_seeds), held_out,
                     {d: ref.feature_weight for d, ref in model.sentence_bagged.items()} if model is not None else {})


# ---- the cross-encoded dimensions' spread (shards written by :mod:`.cross_encoder_spread`) ----------------
def cross_spread_scorer(model: HolisticModel, dimension: str) -> dict[str, Any]:
    """What a current shard of ``dimension`` records about its scorer: the committed model's labels,
    encoder, feature weight and fine-tuning config; where the score blends in the feature model, also
    the sha256 of the committed boundaries of ``dimension`` (``feature_model``: a change of the
    features or of their fit changes them, so the shard goes stale)."""
    ref = model.cross_encoded.get(dimension)
    if ref is None:
        raise ParameterError(f"the committed holistic model does not cross-encode {dimension!r} "
                             f"(it cross-encodes {sorted(model.cross_encoded) or 'nothing'})")
    out = {"labels": model.fit_info.get("labels"), "encoder": model.fit_info.get("encoder"),
           "feature_weight": float(ref.feature_weight), "config": dict(ref.fit_info.get("config", {}))}
    if ref.feature_weight:
        out["feature_model"] = model.boundaries_sha(dimension)
    return out


def read_cross_spread(spread_dir: str | Path) -> list[dict[str, Any]]:
    """Every shard under ``spread_dir`` (an unreadable or foreign file is refused by name)."""
    out = []
    for p in sorted(Path(spread_dir).glob("*-split*.json")):
        try:
            obj = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise ParameterError(f"{p}: not a JSON shard ({exc})") from None
        if not isinstance(obj, dict) or obj.get("format") != CROSS_SPREAD_FORMAT:
            raise ParameterError(f"{p}: not a {CROSS_SPREAD_FORMAT} shard")
        out.append(obj)
    return out


def cross_spread_current(shard: Mapping[str, Any], model: HolisticModel) -> bool:
    """True where ``shard`` was computed for the committed scorer of its dimension
    (:func:`cross_spread_scorer`)."""
    d = shard.get("dimension")
    if d not in model.cross_encoded:
        return False
    want = cross_spread_scorer(model, str(d))
    return all(shard.get(k) == v for k, v in want.items())


def cross_spread_table(shards: Sequence[Mapping[str, Any]], model: HolisticModel,
                       seeds: Sequence[int] = SPREAD_SEEDS) -> pd.DataFrame:
    """Per cross-encoded dimension and response model: the current shards' number of splits among
    ``seeds`` and their held-out kappa's min, median and max (NaN where none is current), beside
    the split behind U (:data:`SPLIT_SEED`) where its shard exists."""
    recs = []
    for d in (x for x in DIMENSIONS if x in model.cross_encoded):
        got = {int(s["split_seed"]): s for s in shards if s.get("dimension") == d
               and int(s.get("split_seed", -1)) in set(seeds) and cross_spread_current(s, model)}
        for m in ("all", *MODELS):
            k = np.array([got[s]["kappa_fitted"].get(m, math.nan) for s in sorted(got)], float)
            recs.append({"dimension": d, "response_model": m, "splits": len(got), "of": len(seeds),
                         "kappa_split_seed": (got[SPLIT_SEED]["kappa_fitted"].get(m, math.nan)
                                              if SPLIT_SEED in got else math.nan),
                         "kappa_min": float(np.nanmin(k)) if np.isfinite(k).any() else math.nan,
                         "kappa_median": float(np.nanmedian(k)) if np.isfinite(k).any() else math.nan,
                         "kappa_max": float(np.nanmax(k)) if np.isfinite(k).any() else math.nan})
    return pd.DataFrame.from_records(recs)


def _with_cross_spread(table: pd.DataFrame, model: HolisticModel, spread_dir: Path, seeds: Sequence[int]
                       ) -> tuple[pd.DataFrame, dict[str, int]]:
    """``table`` with the cross-encoded dimensions' spread from their committed per-split shards
    (:mod:`.cross_encoder_spread`) where every split of ``seeds`` has a current one, and the number
    of current shards per dimension."""
    shards = read_cross_spread(spread_dir) if spread_dir.is_dir() else []
    spread = cross_spread_table(shards, model, seeds)
    table = table.copy()
    for r in spread[spread["splits"] == len(seeds)].itertuples():
        sel = (table["dimension"] == r.dimension) & (table["response_model"] == r.response_model)
        table.loc[sel, ["kappa_fitted_min", "kappa_fitted_median", "kappa_fitted_max"]] = \
            [r.kappa_min, r.kappa_median, r.kappa_max]
    return table, {str(d): int(n) for d, n in spread.groupby("dimension", sort=False)["splits"].first().items()}


def distinct_rows(units: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """Index labels of the first unit of each distinct (query, response) among the masked units."""
    sub = units[np.asarray(mask, bool)]
    return sub.index[~sub.duplicated(["query", "response"])].to_numpy()


def _label_hash(label_dir: str | Path | None) -> str:
    import hashlib

    d = labels_dir(label_dir)
    h = hashlib.sha256()
    for name in ("sample.jsonl", "labels_a.jsonl", *(f for pair in EXTENSIONS.values() for f in pair)):
        if (d / name).exists():
            h.update(name.encode() + b"\0" + (d / name).read_bytes())
    return h.hexdigest()[:16]


def fit_on(units: pd.DataFrame, features: np.ndarray, vectors: np.ndarray, mask: np.ndarray,
           anchors: Mapping[str, Sequence[str]], info: Mapping[str, object],
           dimension_features: Mapping[str, Sequence[str]] | None = None) -> HolisticModel:
    """:func:`.holistic.fit` on the units of ``mask``, one row per distinct (query, response), each
    with its ``design_weight`` (``features`` and ``vectors``:
    :meth:`~.rubric_judge.RubricJudge.holistic_features_and_vectors` of every unit). Where a
    dimension reads the content features, :func:`.holistic.fit` fits their projection on the same rows."""
    units = units.reset_index(drop=True)
    rows = distinct_rows(units, mask)
    weight = units.loc[rows, "design_weight"].to_numpy(float) if "design_weight" in units else None
    return fit_holistic(pd.DataFrame(np.asarray(features, float)[rows], columns=list(FEATURES)),
                        units.loc[rows, list(DIMENSIONS)].reset_index(drop=True),
                        {**info, "fitted_on": int(len(rows))}, anchors=anchors, dimension_features=dimension_features,
                        sample_weight=weight, vectors=np.asarray(vectors, float)[rows])


def training_rows(units: pd.DataFrame, mask: np.ndarray, dimension: str
                  ) -> tuple[list[str], list[str], np.ndarray, np.ndarray | None]:
    """(queries, responses, labels, weights) of one row per distinct (query, response) among the
    units of ``mask``: ``dimension``'s labels and each row's ``design_weight`` (None where the units
    carry none), the rows a cross-encoder is fine-tuned on (:func:`fit_cross_encoder_on`)."""
    if dimension not in DIMENSIONS:
        raise ParameterError(f"unknown dimension {dimension!r}; U holds {DIMENSIONS}")
    units = units.reset_index(drop=True)
    rows = distinct_rows(units, mask)
    weight = units.loc[rows, "design_weight"].to_numpy(float) if "design_weight" in units else None
    return (units.loc[rows, "query"].astype(str).tolist(), units.loc[rows, "response"].astype(str).tolist(),
            units.loc[rows, dimension].to_numpy(float), weight)


def fit_cross_encoder_on(units: pd.DataFrame, mask: np.ndarray, dimension: str, config: Any = None, *,
                         base: Any = None, log: Callable[[str], None] | None = None) -> Any:
    """A :class:`~.cross_encoder.CrossEncoder` fine-tuned to ``dimension``'s labels on the units of
    ``mask``, one row per distinct (query, response), each with its ``design_weight`` (as
    :func:`fit_on` fits the holistic model; :func:`training_rows`). ``base``: a local model
    directory to fine-tune (default the offline MiniLM)."""
    from .cross_encoder import CrossEncoder

    q, r, y, w = training_rows(units, mask, dimension)
    return CrossEncoder.fit(q, r, y, w, config, base=base, log=log)


def _holistic_rescorer(judge: Any, units: pd.DataFrame, judged: pd.DataFrame,
                       label_dir: str | Path | None) -> Callable[[np.ndarray], pd.DataFrame]:
    """``rescore(fit_mask)``: ``judged`` with its holistic columns from a model refitted on the
    units of ``fit_mask`` (features computed once), a sentence-bagged dimension with its bag refitted
    there too (the committed bag's settings and feature weight); the cross-encoded dimensions keep
    the judge's own scores (a cross-encoder is not refitted per split: :func:`split_spread` leaves
    them out)."""
    from .holistic import blend_scores
    from .sentence_bag import SentenceBagConfig

    bagged = judge.holistic.sentence_bagged
    F, V, bags = judge.holistic_features_vectors_and_bags(list(zip(units["query"], units["response"])),
                                                          judge.holistic.anchors)
    info = {"labels": _label_hash(label_dir), "encoder": str(getattr(judge.encoder, "id", ""))}
    empty = units["response"].map(lambda a: not str(a).strip()).to_numpy()

    done: dict[bytes, pd.DataFrame] = {}

    def rescore(mask: np.ndarray) -> pd.DataFrame:
        key = np.packbits(np.asarray(mask, bool)).tobytes()
        if key in done:
            return done[key]
        model = fit_on(units, F, V, mask, judge.holistic.anchors, info)
        scores = model.score(model.with_content(F, V))
        for d, ref in bagged.items():
            bag = fit_sentence_bag_on(units, bags, mask, d, SentenceBagConfig(**ref.bag.fit_info.get("config", {})))
            j = DIMENSIONS.index(d)
            scores[:, j] = blend_scores(bag.score_bags(bags), scores[:, j], ref.feature_weight)
        scores[empty] = 0.0                       # an empty response scores 0 everywhere
        out = judged.copy()
        for j, d in enumerate(DIMENSIONS):
            if d not in judge.holistic.cross_encoded:
                out[f"judge_{d}"] = scores[:, j]
        done[key] = out
        return out
    return rescore


def fit_sentence_bag_on(units: pd.DataFrame, bags: Sequence[np.ndarray], mask: np.ndarray, dimension: str,
                        config: Any = None, fit_info: Mapping[str, Any] | None = None) -> Any:
    """A :class:`~.sentence_bag.SentenceBag` fitted to ``dimension``'s labels on the units of
    ``mask``, one row per distinct (query, response), each with its ``design_weight`` (as
    :func:`fit_on` fits the holistic model); ``bags``: every unit's
    :func:`~.sentence_bag.bag_rows`, in the order of ``units``."""
    import torch

    from ..common.machine import cpu_info
    from .sentence_bag import fit

    if dimension not in DIMENSIONS:
        raise ParameterError(f"unknown dimension {dimension!r}; U holds {DIMENSIONS}")
    units = units.reset_index(drop=True)
    if len(bags) != len(units):
        raise ParameterError(f"{len(units)} units but {len(bags)} sentence bags")
    rows = distinct_rows(units, mask)
    weight = units.loc[rows, "design_weight"].to_numpy(float) if "design_weight" in units else None
    return fit([bags[i] for i in rows], units.loc[rows, dimension].to_numpy(float), weight, config,
               {**dict(fit_info or {}), "fitted_on": int(len(rows)), "torch": torch.__version__,
                "cpu": str(cpu_info().get("model", ""))})


def fit_holistic_model(encoder: Any, label_dir: str | Path | None = None, data_dir: str | Path = "data", *,
                       seed: int = SPLIT_SEED, encoder_spec: str | None = None,
                       cross_encoded: Mapping[str, float] | Sequence[str] = (),
                       sentence_bagged: Mapping[str, float] | None = None,
                       cross_dir: str | Path | None = None, log: Callable[[str], None] | None = None) -> HolisticModel:
    """The judge's holistic model (:mod:`.holistic`) fitted on the fitting half of the labels
    (:func:`split_halves` with ``seed``), one row per distinct query and response, against the
    behaviour catalogue of ``data_dir``. Each dimension of ``cross_encoded`` (a mapping to the
    feature model's weight in its score, :data:`CROSS_ENCODED`; a plain sequence weighs it 0) also
    gets a cross-encoder fine-tuned on the same rows (:func:`fit_cross_encoder_on`, about 4 minutes on
    2 cores), written to ``cross_dir/cross_encoder_<dimension>.safetensors`` and named in the model.
    Each dimension of ``sentence_bagged`` (default :data:`SENTENCE_BAGGED`: a mapping to the feature
    model's weight in its score) gets a sentence bag fitted on the same rows (:func:`fit_sentence_bag_on`)."""
    from dataclasses import replace

    units, F, V, anchors, bags = holistic_inputs_and_bags(encoder, label_dir, data_dir)
    labels = _label_hash(label_dir)
    info = {"labels": labels, "encoder": str(getattr(encoder, "id", "")), "split_seed": seed,
            "units": int(len(units)), **({"encoder_spec": encoder_spec} if encoder_spec else {})}
    mask = split_halves(units, seed)
    model = fit_on(units, F, V, mask, anchors, info)
    bagged = dict(SENTENCE_BAGGED if sentence_bagged is None else sentence_bagged)
    if bagged:
        from .holistic import SentenceBagged

        stamp = {"labels": labels, "split_seed": seed}
        model = replace(model, sentence_bagged={
            d: SentenceBagged(fit_sentence_bag_on(units, bags, mask, d, fit_info=stamp), w) for d, w in bagged.items()})
    if not cross_encoded:
        return model
    from dataclasses import asdict

    import torch

    from ..common.machine import cpu_info
    from .holistic import CrossEncoded

    if cross_dir is None:
        raise ParameterError("cross-encoded dimensions need a directory for their weights (cross_dir)")
    weights = dict(cross_encoded) if isinstance(cross_encoded, Mapping) else dict.fromkeys(cross_encoded, 0.0)
    cross = {}
    for d, weight in weights.items():
        ce = fit_cross_encoder_on(units, mask, d, log=log)
        name = f"cross_encoder_{d}.safetensors"
        sha = ce.save(Path(cross_dir) / name)
        cross[d] = CrossEncoded(name, sha, {"labels": labels, "split_seed": seed,
                                            "fitted_on": int(len(distinct_rows(units, mask))),
                                            "config": asdict(ce.config), "torch": torch.__version__,
                                            "cpu": str(cpu_info().get("model", ""))}, weight)
    return replace(model, cross_encoded=cross, directory=Path(cross_dir))


def cross_encoder_gap(committed: HolisticModel, refit: HolisticModel, label_dir: str | Path | None = None,
                      precision: str = "fp32") -> float:
    """Largest absolute difference between two models' cross-encoder scores on the labelled units
    (inf where they cross-encode different dimensions; 0 where neither has one)."""
    if set(committed.cross_encoded) != set(refit.cross_encoded):
        return math.inf
    units = label_pool(label_dir).drop_duplicates(["query", "response"])
    q, r = units["query"].astype(str).tolist(), units["response"].astype(str).tolist()
    gap = 0.0
    for d in committed.cross_encoded:
        a = committed.cross_encoder(d, precision).predict(q, r)
        b = refit.cross_encoder(d, precision).predict(q, r)
        gap = max(gap, float(np.max(np.abs(a - b))))
    return gap


def holistic_inputs(encoder: Any, label_dir: str | Path | None = None, data_dir: str | Path = "data"
                    ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, dict[str, tuple[str, ...]]]:
    """(units, features, content vectors, anchors): the labelled units (:func:`label_pool`, index
    0..n-1), their holistic features with ``encoder`` (content columns NaN) and content vectors
    (:meth:`~.rubric_judge.RubricJudge.holistic_features_and_vectors`), and the behaviour
    catalogue's descriptions they are measured against."""
    return holistic_inputs_and_bags(encoder, label_dir, data_dir)[:4]


def holistic_inputs_and_bags(encoder: Any, label_dir: str | Path | None = None, data_dir: str | Path = "data"
                             ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, dict[str, tuple[str, ...]],
                                        list[np.ndarray]]:
    """:func:`holistic_inputs` and each unit's sentence bag (:func:`~.sentence_bag.bag_rows`), from
    one embedding of every distinct text
    (:meth:`~.rubric_judge.RubricJudge.holistic_features_vectors_and_bags`)."""
    from ..bench.datasets import load_benchmark
    from ..common.paths import resolve
    from .rubric_judge import RubricJudge

    units = label_pool(label_dir).reset_index(drop=True)
    benches = {t: load_benchmark(t, str(resolve(data_dir))) for t in sorted(set(units["track"]))}
    anchors = catalogue_anchors(benches)
    F, V, bags = RubricJudge(encoder, holistic=None).holistic_features_vectors_and_bags(
        list(zip(units["query"], units["response"])), anchors)
    return units, F, V, anchors, bags


def cache_key(judge: Judge, data_dir: str | Path, seed: int = SPLIT_SEED) -> str:
    """What a :func:`validate_u` result depends on: the judge's id, the split seed, scikit-learn's
    version, the data sets under ``data_dir`` (labels and the committed holistic model included)
    and the source of this module's import closure, hashed as the run's fingerprints hash them
    (:mod:`dpmv_lib.common.fingerprint`)."""
    import sklearn

    from ..common import fingerprint as fp
    from ..common.paths import resolve

    package = Path(__file__).resolve().parents[1]
    code = {m: fp.digest_of(p.read_text()) for m, p in fp.module_closure([__name__], package).items()}
    return fp.digest_of({"judge": str(getattr(judge, "id", type(judge).__name__)), "seed": seed,
                         "sklearn": sklearn.__version__, "data": fp.data_sets(resolve(data_dir)), "code": code})


def try_validate_u(judge: Judge, data_dir: str | Path = "data", notes: list[str] | None = None, *,
                   spread_seeds: Sequence[int] = SPREAD_SEEDS,
                   cache_dir: str | Path | None = None) -> UValidity | None:
    """:func:`validate_u` on ``{data_dir}/judge_labels``, or None (with a note) where the labels or
    the benchmark are missing. With ``cache_dir`` the result is kept there under :func:`cache_key`
    and reused by a later call whose ``spread_seeds`` it covers (notebooks 04 and 05 reuse 03's)."""
    import pickle

    from ..common.paths import resolve
    from ..core.errors import StoreError

    try:
        path = None
        if cache_dir is not None:
            path = Path(cache_dir) / f"u_validity-{cache_key(judge, data_dir)}.pkl"
            if path.exists():
                try:
                    hit = pickle.loads(path.read_bytes())
                    if isinstance(hit, tuple) and set(spread_seeds) <= set(hit[0]) and isinstance(hit[1], UValidity):
                        return hit[1]
                except Exception:  # noqa: BLE001 - an unreadable cache entry is recomputed, never used
                    pass
        res = validate_u(judge, resolve(data_dir) / "judge_labels", data_dir, spread_seeds=spread_seeds)
        if path is not None:
            write_atomic(path, pickle.dumps((tuple(spread_seeds), res)))
        return res
    except (ParameterError, StoreError, FileNotFoundError, OSError) as exc:
        if notes is not None:
            notes.append(f"U not validated against labels: {exc}")
        return None


def with_validated_u(per_transcript: pd.DataFrame, judge: Judge, data_dir: str | Path = "data",
                     cache_dir: str | Path | None = None) -> pd.DataFrame:
    """``per_transcript`` (:func:`~.judge.score_transcripts`) with U redefined by :func:`validate_u`
    of ``judge`` (:meth:`UDefinition.apply`; all four dimensions, marked not validated, where the
    labels are missing). U's definition needs the split of :data:`SPLIT_SEED` only: no spread."""
    uv = try_validate_u(judge, data_dir, spread_seeds=(), cache_dir=cache_dir)
    return (uv.definition if uv is not None else UDefinition()).apply(per_transcript)


def main(argv: Sequence[str] | None = None) -> int:
    """Refit the judge's holistic model (:mod:`.holistic`) from the labels with the encoder the
    committed model names (``--encoder``: another; the default profile's is the one to use) and
    write it to ``data/judge_labels/holistic_model.json`` (``--check``: compare with the
    committed file, write nothing)."""
    import argparse
    import shutil
    import tempfile
    from dataclasses import replace

    from .encoders import get_encoder
    from .holistic import committed_cross_encoded, committed_encoder_spec, load, model_path

    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.evaluate.u_validity", description=main.__doc__)
    ap.add_argument("--encoder", default=None,
                    help="encoder spec (default: the committed model's, which a test keeps the default profile's)")
    ap.add_argument("--data", default="data")
    ap.add_argument("--check", action="store_true", help="refit and compare with the committed file; write nothing")
    ap.add_argument("--no-cross-encoders", action="store_true",
                    help=f"fit the feature model only (the cross-encoders of {', '.join(CROSS_ENCODED)} take about "
                         "4 minutes each on 2 cores); with --check, compare the feature model only")
    args = ap.parse_args(argv)
    label_dir = Path(args.data) / "judge_labels"
    try:
        spec = args.encoder or committed_encoder_spec(label_dir)
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None
    cross = () if args.no_cross_encoders else CROSS_ENCODED
    path = model_path(label_dir)
    with tempfile.TemporaryDirectory() as tmp:
        # the weights go to the label directory only once the model file is written beside them
        model = fit_holistic_model(get_encoder(spec), label_dir, args.data, encoder_spec=spec, cross_encoded=cross,
                                   cross_dir=tmp, log=print)
        if args.check:
            try:
                committed = load(label_dir)
            except ParameterError as exc:
                print(f"{path}: the committed model does not load against this code, refit it ({exc})")
                return 1
            gap = committed.max_difference(model) if committed is not None else math.inf
            print(f"{path}: largest difference from the refit {gap:.3g} (tolerance {REFIT_TOLERANCE:g})")
            ok = gap <= REFIT_TOLERANCE
            if cross and committed is not None:
                cgap = cross_encoder_gap(committed, model, label_dir)
                print(f"cross-encoders ({', '.join(cross)}): largest score difference from the refit on the labelled "
                      f"units {cgap:.3g} (tolerance {CROSS_REFIT_TOLERANCE:g})")
                ok = ok and cgap <= CROSS_REFIT_TOLERANCE
            return 0 if ok else 1
        if not cross:
            kept = {d: ref for d, ref in committed_cross_encoded(label_dir).items() if d in CROSS_ENCODED}
            model = replace(model, cross_encoded=kept)
        for ref in model.cross_encoded.values():
            if (Path(tmp) / ref.file).exists():
                shutil.copyfile(Path(tmp) / ref.file, label_dir / (ref.file + ".tmp"))
                (label_dir / (ref.file + ".tmp")).replace(label_dir / ref.file)
        write_atomic(path, model.dumps())
    print(f"wrote {path} (sha {model.sha})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
