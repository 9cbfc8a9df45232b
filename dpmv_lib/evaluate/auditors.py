"""Learned auditors beside the paper's C.5 column (their summaries and power against the exact ceiling:
:mod:`dpmv_lib.evaluate.auditor_summary`).

The paper's embedding auditor (:mod:`dpmv_lib.evaluate.audit`, ``"c5"``) is kept unchanged. Beside
it, on the same splits (fitted on the ``source_track``'s training pairs, evaluated on its test
pairs and on every pair of the other tracks without refitting; with several EM seeds each (pair,
side, seed) transcript is one sample):

* ``"c5-raw"`` - the same fitted C.5 logistic regression, scored by its decision function (the
  Platt step, fitted on ~16 validation pairs per attribute without a sign constraint, can invert
  the ranking);
* ``"views"`` - a logistic regression on the released public views (what the exact ceiling sees):
  the count of every released view id and of every slot over the prefix's slots whose public
  record lists the audited attribute a as ``affected`` and released no fallback (every view where
  ``released`` has no slot list). The other slots read no protected item of a, or release the
  fixed fallback: their view law is the same under M and M'. The exact log-likelihood ratio is a
  sum of per-slot terms, so a linear model of such counts can approach it;
* ``"views-links"`` - the same slots, with the public gold rules' view -> attribute links: how many
  of them released a view linked to a, and how many there were (the EM contrast term rewards
  exactly the linked views);
* ``"tfidf"`` - lexical: TF-IDF of the prefix's responses (word uni- and bigrams, sublinear tf).

The learned (non-C.5) auditors choose the inverse L2 strength C by cross-validation on the fitting
pairs only (folds by pair, seeded; criterion: the seed-averaged out-of-fold AUC; ties to the
smaller C). Their scores are decision functions; :func:`~dpmv_lib.evaluate.auditor_summary.summarise`
averages them over the EM seeds of each (pair, side) as C.5 averages its probabilities (for log-odds,
the mean combines seeds).
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.feature_extraction import DictVectorizer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from .audit import GROUP, REQUIRED, AuditConfig, fit_auditor, prefix_features, require_columns
from .encoders import Encoder
from ..common.parallel import parallel_map
from ..core.errors import ParameterError

AUDITORS: tuple[str, ...] = ("c5", "c5-raw", "views", "views-links", "tfidf")
KEY_COLUMNS: tuple[str, ...] = ("track", "response_model", "method", "pair_id", "attribute", "side", "seed", "horizon")
SCORE_COLUMNS: tuple[str, ...] = KEY_COLUMNS + ("score", "auditor")
SUMMARY_KEYS: tuple[str, ...] = ("auditor", "track", "response_model", "method", "horizon")
CEILING_KEYS: tuple[str, ...] = ("track", "response_model", "method", "horizon")
DEFAULT_CS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)


@dataclass(frozen=True)
class LearnedConfig:
    """Settings of the learned auditors.

    Parameters
    ----------
    horizons : prefix lengths t to fit (one auditor per t).
    Cs, folds : candidate inverse L2 strengths, chosen by cross-validation with ``folds`` folds of
        fitting pairs (fewer if there are fewer pairs).
    fit_splits : splits of ``source_track`` the auditors are fitted on (C.5: training pairs).
    source_track : the track the auditors are fitted on; every other track is evaluated only.
    seed : seed of the fold assignment (the only stochastic step).
    max_iter, tol, ngram_range, min_df : lbfgs settings; the TF-IDF vocabulary (word n-grams,
        minimum document frequency).
    """

    horizons: tuple[int, ...] = (16,)
    Cs: tuple[float, ...] = DEFAULT_CS
    folds: int = 5
    fit_splits: tuple[str, ...] = ("train",)
    source_track: str = "pairedmem"
    seed: int = 0
    max_iter: int = 5000
    tol: float = 1e-6
    ngram_range: tuple[int, int] = (1, 2)
    min_df: int = 2

    def __post_init__(self) -> None:
        if not self.horizons or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1
                                    for h in self.horizons):
            raise ParameterError(f"horizons must be positive ints, got {self.horizons!r}")
        if not self.Cs or any(not (float(c) > 0 and math.isfinite(float(c))) for c in self.Cs):
            raise ParameterError(f"Cs must be finite positive numbers, got {self.Cs!r}")
        if self.folds < 2 or not self.fit_splits or "test" in self.fit_splits:
            raise ParameterError(f"need folds >= 2 and non-empty fit_splits without 'test', got {self.folds}, "
                                 f"{self.fit_splits!r}")
        if not 1 <= self.ngram_range[0] <= self.ngram_range[1] or self.min_df < 1:
            raise ParameterError(f"need 1 <= ngram_range[0] <= ngram_range[1] and min_df >= 1, got "
                                 f"{self.ngram_range}, {self.min_df}")


# ---- transcripts -> one row per transcript ------------------------------------------------------------
def _transcript_rows(transcripts: pd.DataFrame, hmax: int) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(turn rows below ``hmax`` sorted by transcript and turn, one key row per transcript (GROUP +
    attribute, split), (n transcripts, hmax) positions into the rows); every turn must be present."""
    require_columns(transcripts, REQUIRED)
    df = transcripts[transcripts["turn"] < hmax].sort_values(GROUP + ["turn"], kind="stable").reset_index(drop=True)
    sizes = df.groupby(GROUP, sort=False).size()
    if len(sizes) == 0 or (sizes != hmax).any():
        bad = sizes[sizes != hmax].index[:3].tolist()
        raise ParameterError(f"every transcript needs turns 0..{hmax - 1}; incomplete: {bad or 'no transcripts'}")
    keys = df.groupby(GROUP, sort=False)[["attribute", "split"]].first().reset_index()
    return df, keys, np.arange(len(df)).reshape(len(keys), hmax)


def _fit_eval_sets(keys: pd.DataFrame, source_track: str, fit_splits: Sequence[str]
                   ) -> list[tuple[tuple[str, str, str], np.ndarray, np.ndarray]]:
    """Per (response model, method, attribute): (fitting rows, evaluation rows), as C.5."""
    if source_track not in set(keys["track"]):
        raise ParameterError(f"the auditors are fitted on the {source_track!r} track, absent from the transcripts")
    src = (keys["track"] == source_track).to_numpy()
    fit = src & keys["split"].isin(fit_splits).to_numpy()
    ev = (src & (keys["split"] == "test").to_numpy()) | ~src
    out = []
    for combo, idx in sorted(keys.groupby(["response_model", "method", "attribute"]).indices.items()):
        idx = np.asarray(idx)
        f, e = idx[fit[idx]], idx[ev[idx]]
        if len(f) == 0:
            raise ParameterError(f"{'/'.join(combo)}: no {source_track} pairs in splits {list(fit_splits)} to fit on")
        out.append((combo, f, e))
    return out


def _score_frame(keys: pd.DataFrame, idx: np.ndarray, horizon: int, score: np.ndarray, auditor: str) -> pd.DataFrame:
    part = keys.loc[idx, list(KEY_COLUMNS[:-1])].copy()
    part["horizon"] = int(horizon)
    part["score"] = np.asarray(score, dtype=float)
    part["auditor"] = auditor
    return part


def _finish(parts: list[pd.DataFrame]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SCORE_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)[list(SCORE_COLUMNS)]


# ---- C.5 and its uncalibrated scores -------------------------------------------------------------------
def c5_scores(transcripts: pd.DataFrame, encoder: Encoder, config: AuditConfig = AuditConfig(), *,
              source_track: str = "pairedmem", progress: bool = False) -> pd.DataFrame:
    """The paper's C.5 auditor (``"c5"``: Platt-calibrated probability, exactly
    :func:`dpmv_lib.evaluate.audit.run_audit`'s scores) and the decision function of the same fitted
    logistic regression (``"c5-raw"``).

    Parameters
    ----------
    transcripts, encoder : the transcript table and the frozen sentence encoder (C.5).
    config : the C.5 settings (horizons, C, embedding unit; the bootstrap fields are unused).
    source_track, progress : the track the auditors are fitted on; show progress bars.

    Returns
    -------
    Scores in :data:`SCORE_COLUMNS` (two rows per evaluated transcript and horizon).

    Raises
    ------
    ParameterError
        on missing columns, incomplete transcripts or missing train / validation pairs.
    """
    require_columns(transcripts, REQUIRED)
    keys, feats, _ = prefix_features(transcripts, encoder, config.horizons, unit=config.unit, progress=progress)
    y = (keys["side"] == "M").to_numpy().astype(int)
    src, split = (keys["track"] == source_track).to_numpy(), keys["split"].to_numpy()
    ev_mask = (src & (split == "test")) | ~src
    parts = []
    for (model, method, attr), idx in keys.groupby(["response_model", "method", "attribute"]).groups.items():
        idx = np.asarray(idx)
        (tr, va), ev = (idx[src[idx] & (split[idx] == s)] for s in ("train", "validation")), idx[ev_mask[idx]]
        if len(tr) == 0 or len(va) == 0:
            raise ParameterError(f"{model}/{method}/{attr}: needs {source_track} train and validation pairs "
                                 f"(got {len(tr)} and {len(va)} transcripts)")
        for t in config.horizons:
            x = feats[t]
            aud = fit_auditor(x[tr], y[tr], x[va], y[va], C=config.C, max_iter=config.max_iter, tol=config.tol,
                              response_model=model, method=method, attribute=attr, horizon=t)
            parts.append(_score_frame(keys, ev, t, aud.predict(x[ev]), "c5"))
            parts.append(_score_frame(keys, ev, t, aud.clf.decision_function(x[ev]), "c5-raw"))
    return _finish(parts)


# ---- cross-validated logistic regression ---------------------------------------------------------------
def _folds(groups: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold of every sample: the groups (pairs) in a seeded random order, dealt round-robin."""
    uniq = np.unique(groups)
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold_of = dict(zip(uniq[order], np.arange(len(uniq)) % k))
    return np.array([fold_of[g] for g in groups])


def _unit_auc(y: np.ndarray, inv: np.ndarray, score: np.ndarray) -> float:
    """AUC of the scores averaged within each unit ((pair, side): the EM seeds); ``inv`` holds
    every sample's unit code (0..n_units-1)."""
    n = np.bincount(inv)
    s = np.bincount(inv, weights=score) / n
    yu = np.bincount(inv, weights=y) / n
    if np.unique(yu).size < 2:
        return float("nan")
    return float(roc_auc_score(yu > 0.5, s))


def fit_cv(X, y: np.ndarray, groups: np.ndarray, units: np.ndarray, config: LearnedConfig
           ) -> tuple[LogisticRegression, float, float]:
    """L2 logistic regression with C chosen by grouped cross-validation.

    Parameters
    ----------
    X, y : (n, d) features (dense or sparse) and labels (1: M, 0: M').
    groups : (n,) pair ids: a pair's transcripts (both sides, every seed) share one fold.
    units : (n,) (pair, side) ids; out-of-fold scores are averaged within a unit before the AUC.
    config : the candidate Cs, folds, seed and solver settings.

    Returns
    -------
    (classifier fitted on all of X, chosen C, its cross-validated AUC: NaN with one candidate
    or one pair, where the smallest C is used).

    Raises
    ------
    ParameterError
        if y holds one class only.
    """
    y = np.asarray(y, int)
    if y.min() == y.max():
        raise ParameterError("the fitting data hold one class only (need transcripts from M and M')")
    make = lambda c: LogisticRegression(C=float(c), max_iter=config.max_iter, tol=config.tol)  # noqa: E731
    k = min(config.folds, len(np.unique(groups)))
    cs = sorted(float(c) for c in config.Cs)
    best = (float("nan"), cs[0])
    if len(cs) > 1 and k >= 2:
        fold = _folds(np.asarray(groups), k, config.seed)
        inv = np.unique(np.asarray(units), return_inverse=True)[1].ravel()
        for c in cs:
            oof = np.zeros(len(y))
            for f in range(k):
                te = fold == f
                if np.unique(y[~te]).size < 2:
                    oof[te] = 0.0
                    continue
                oof[te] = make(c).fit(X[~te], y[~te]).decision_function(X[te])
            auc = _unit_auc(y, inv, oof)
            if not math.isnan(auc) and (math.isnan(best[0]) or auc > best[0] + 1e-12):
                best = (auc, c)
    return make(best[1]).fit(X, y), best[1], best[0]


def _learned(keys: pd.DataFrame, config: LearnedConfig, auditor: str,
             features: Callable[[np.ndarray, np.ndarray, str, int], tuple], workers: int | None = None
             ) -> pd.DataFrame:
    """Fit one auditor per (response model, method, attribute, horizon) and score its evaluation
    transcripts. ``features(fit_rows, eval_rows, attribute, t) -> (X_fit, X_eval)``. The fits run
    over ``workers`` forked processes (None: the usable cores; each fit single-threaded), with the
    same scores for any count."""
    y = (keys["side"] == "M").to_numpy().astype(int)
    pair = keys["pair_id"].astype(str).to_numpy()
    unit = pair + "|" + keys["side"].astype(str).to_numpy()
    tasks = [(attr, fit, ev, int(t)) for (_, _, attr), fit, ev in
             _fit_eval_sets(keys, config.source_track, config.fit_splits) for t in config.horizons]

    def one(task: tuple[str, np.ndarray, np.ndarray, int]) -> pd.DataFrame:
        attr, fit, ev, t = task
        x_fit, x_ev = features(fit, ev, attr, t)
        with threadpool_limits(limits=1):   # small problems: BLAS threads only contend
            clf, _, _ = fit_cv(x_fit, y[fit], pair[fit], unit[fit], config)
        return _score_frame(keys, ev, t, clf.decision_function(x_ev), auditor)
    return _finish(parallel_map(one, tasks, workers=workers))


# ---- the released-views auditor -------------------------------------------------------------------------
def _slot_records(released: str, views: str) -> tuple[tuple[str, str, frozenset | None, bool], ...]:
    """(slot, view, affected attributes or None, fallback) of every slot released in one turn."""
    try:
        rel = json.loads(released) if released else {}
    except (TypeError, ValueError):
        raise ParameterError(f"the 'released' column holds invalid JSON: {str(released)[:80]!r}") from None
    slots = rel.get("slots") if isinstance(rel, dict) else None
    if slots:
        return tuple((str(s.get("slot", "")), str(s.get("view", "")),
                      frozenset(s.get("affected", ())) if "affected" in s else None, bool(s.get("fallback", False)))
                     for s in slots if isinstance(s, dict) and "view" in s)
    try:
        vs = json.loads(views) if views else []
    except (TypeError, ValueError):
        raise ParameterError(f"the 'views' column holds invalid JSON: {str(views)[:80]!r}") from None
    vs = list(vs.values()) if isinstance(vs, dict) else list(vs)
    return tuple((str(v).split(".", 1)[0], str(v), None, False) for v in vs)


def view_methods(transcripts: pd.DataFrame) -> list[str]:
    """Methods that release views (some ``views`` cell is a non-empty list)."""
    require_columns(transcripts, {"method", "views"})
    has = transcripts["views"].fillna("").astype(str).str.strip().map(lambda s: s not in ("", "[]", "{}"))
    return sorted(transcripts.loc[has, "method"].unique())


def views_scores(transcripts: pd.DataFrame, config: LearnedConfig = LearnedConfig(), *,
                 view_links: Mapping[str, Sequence[str]] | None = None, workers: int | None = None) -> pd.DataFrame:
    """The released-views auditor (``"views"``, or ``"views-links"`` with ``view_links``).

    Parameters
    ----------
    transcripts, config : the transcript table (view-releasing methods only, :func:`view_methods`,
        are audited) and the learned-auditor settings.
    view_links : public gold rules' view id -> linked attributes; replaces the per-view counts
        by the number of informative slots and of those releasing a view linked to the attribute.
    workers : processes for the fits (None: the usable cores; same scores for any count).

    Returns
    -------
    Scores in :data:`SCORE_COLUMNS` (empty if no method releases views).

    Raises
    ------
    ParameterError
        on missing columns, invalid JSON or incomplete transcripts.
    """
    require_columns(transcripts, REQUIRED | {"views", "released"})
    methods = view_methods(transcripts)
    if not methods:
        return _finish([])
    hs = sorted({int(h) for h in config.horizons})
    rows, keys, index = _transcript_rows(transcripts[transcripts["method"].isin(methods)], hs[-1])
    parse = lru_cache(maxsize=None)(_slot_records)      # many cells repeat
    recs = [parse(r, v) for r, v in zip(rows["released"].fillna("").astype(str), rows["views"].fillna("").astype(str))]
    links = {str(v): frozenset(a) for v, a in (view_links or {}).items()}
    attrs = keys["attribute"].to_numpy()
    dicts: dict[int, list[dict]] = {}
    for t in hs:
        out = []
        for i in range(len(keys)):
            a, d = attrs[i], {"_const": 1.0}
            for r in index[i, :t]:
                for slot, view, affected, fallback in recs[r]:
                    if fallback or (affected is not None and a not in affected):
                        continue                    # the same view law under M and M'
                    names = ((f"v={view}", f"s={slot}") if view_links is None
                             else ("n",) + (("linked",) if a in links.get(view, ()) else ()))
                    for name in names:
                        d[name] = d.get(name, 0.0) + 1.0
            out.append(d)
        dicts[t] = out

    def features(fit, ev, attr, t):
        dv = DictVectorizer(sort=True).fit([dicts[t][i] for i in fit])
        return dv.transform([dicts[t][i] for i in fit]), dv.transform([dicts[t][i] for i in ev])

    return _learned(keys, config, "views" if view_links is None else "views-links", features, workers)


# ---- the lexical auditor ------------------------------------------------------------------------------
def tfidf_scores(transcripts: pd.DataFrame, config: LearnedConfig = LearnedConfig(), *,
                 workers: int | None = None) -> pd.DataFrame:
    """The lexical auditor (``"tfidf"``): TF-IDF (word n-grams, sublinear tf, fitted on the fitting
    transcripts of the attribute) of the prefix's responses joined in turn order, with a
    cross-validated logistic regression.

    Parameters
    ----------
    transcripts, config : the transcript table and the learned-auditor settings.
    workers : processes for the fits (None: the usable cores; same scores for any count).

    Returns
    -------
    Scores in :data:`SCORE_COLUMNS`.

    Raises
    ------
    ParameterError
        on missing columns or incomplete transcripts.
    """
    hs = sorted({int(h) for h in config.horizons})
    rows, keys, index = _transcript_rows(transcripts, hs[-1])
    resp = rows["response"].fillna("").astype(str).to_numpy()
    docs = {t: ["\n".join(resp[index[i, :t]]) for i in range(len(keys))] for t in hs}

    def features(fit, ev, attr, t):
        d = docs[t]
        for min_df in (config.min_df, 1):
            vec = TfidfVectorizer(ngram_range=tuple(config.ngram_range), min_df=min_df, sublinear_tf=True,
                                  token_pattern=r"(?u)\b\w+\b")
            try:
                return vec.fit_transform([d[i] for i in fit]), vec.transform([d[i] for i in ev])
            except ValueError:      # empty vocabulary (all documents empty or below min_df)
                continue
        return np.ones((len(fit), 1)), np.ones((len(ev), 1))

    return _learned(keys, config, "tfidf", features, workers)


# ---- every auditor ---------------------------------------------------------------------------------------
def learned_audit(transcripts: pd.DataFrame, auditors: Sequence[str] = ("c5", "c5-raw", "views", "tfidf"), *,
                  encoder: Encoder | None = None, config: LearnedConfig = LearnedConfig(),
                  audit_config: AuditConfig | None = None, view_links: Mapping[str, Sequence[str]] | None = None,
                  progress: bool = False, workers: int | None = None) -> pd.DataFrame:
    """Scores of several auditors (names from :data:`AUDITORS`) on one transcript table, stacked.

    Parameters
    ----------
    transcripts : the transcript table.
    auditors : the auditors to run.
    encoder : the C.5 encoder (``"c5"``, ``"c5-raw"``).
    config : the learned-auditor settings.
    audit_config : the C.5 settings (default ``AuditConfig(horizons=config.horizons, n_boot=0)``).
    view_links : public view -> attributes links (``"views-links"``).
    progress : show the encoder's progress bar.
    workers : processes for the learned auditors' fits (None: the usable cores; same scores for any count).

    Returns
    -------
    Scores in :data:`SCORE_COLUMNS`.

    Raises
    ------
    ParameterError
        on an unknown auditor or a missing encoder / view links.
    """
    bad = [a for a in auditors if a not in AUDITORS]
    if bad:
        raise ParameterError(f"unknown auditors {bad}; use {AUDITORS}")
    if encoder is None and {"c5", "c5-raw"} & set(auditors):
        raise ParameterError("the c5 auditors need an encoder")
    if view_links is None and "views-links" in auditors:
        raise ParameterError("the views-links auditor needs view_links (the public gold rules)")
    parts = []
    if {"c5", "c5-raw"} & set(auditors):
        assert encoder is not None  # checked above
        acfg = audit_config or AuditConfig(horizons=tuple(config.horizons), n_boot=0)
        c5 = c5_scores(transcripts, encoder, acfg, source_track=config.source_track, progress=progress)
        parts.append(c5[c5["auditor"].isin(auditors)])
    if "views" in auditors:
        parts.append(views_scores(transcripts, config, workers=workers))
    if "views-links" in auditors:
        parts.append(views_scores(transcripts, config, view_links=view_links, workers=workers))
    if "tfidf" in auditors:
        parts.append(tfidf_scores(transcripts, config, workers=workers))
    return _finish([p for p in parts if len(p)])
