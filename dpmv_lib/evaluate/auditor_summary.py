"""Learned auditors' scores -> their summaries (:mod:`dpmv_lib.evaluate.auditors` fits them): per
(auditor, track, response model, method, horizon) the macro AUC over attributes with a bootstrap
interval over pairs, the pooled TPR at a fixed FPR (interpolated on the empirical ROC curve), the
exact ceiling and the power (AUC - 0.5) / (ceiling - 0.5); the best auditor per method.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score, roc_curve

from ..core.errors import ParameterError
from .audit import auc_rows, independent_auc, require_columns
from .auditors import AUDITORS, CEILING_KEYS, SCORE_COLUMNS, SUMMARY_KEYS


def tpr_at_fpr_interp(pos: np.ndarray, neg: np.ndarray, fpr: float = 0.05) -> float:
    """TPR at ``fpr`` on the empirical ROC curve (:func:`sklearn.metrics.roc_curve`), linearly
    interpolated between the last vertex with FPR <= ``fpr`` (its highest TPR) and the next one:
    the TPR of the randomised test at exactly ``fpr``.

    Parameters
    ----------
    pos, neg, fpr : scores of the positives (M) and negatives (M'); the FPR, in [0, 1].

    Returns
    -------
    The interpolated TPR (NaN if either sample is empty).

    Raises
    ------
    ParameterError
        if ``fpr`` lies outside [0, 1].
    """
    if not 0 <= fpr <= 1:
        raise ParameterError(f"fpr must lie in [0, 1], got {fpr}")
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    f, t, _ = roc_curve(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos, neg], drop_intermediate=False)
    i = int(np.searchsorted(f, fpr, side="right")) - 1
    if i >= len(f) - 1:
        return float(t[-1])
    return float(np.interp(fpr, [f[i], f[i + 1]], [t[i], t[i + 1]]))


def _ceiling_lookup(summary: pd.DataFrame, ceilings: pd.DataFrame) -> pd.DataFrame:
    require_columns(ceilings, {"ceiling_auc"}, "ceiling table")
    on = [c for c in CEILING_KEYS if c in ceilings.columns]
    if "method" not in on:
        raise ParameterError("the ceiling table needs a 'method' column")
    cols = on + ["ceiling_auc"] + (["ceiling_auc_seeds"] if "ceiling_auc_seeds" in ceilings.columns else [])
    c = ceilings[cols].copy()
    if c.duplicated(on).any():
        raise ParameterError(f"the ceiling table holds several rows per {on}")
    if "horizon" in on:
        c["horizon"] = c["horizon"].astype(int)
    return summary.merge(c, on=on, how="left")


def _power(auc: pd.Series, ceiling: pd.Series) -> pd.Series:
    gap = ceiling - 0.5
    return ((auc - 0.5) / gap).where(gap > 1e-12)


def summarise(scores: pd.DataFrame, ceilings: pd.DataFrame | None = None, *, fpr: float = 0.05,
              n_boot: int = 0, seed: int = 0) -> pd.DataFrame:
    """Per (auditor, track, response_model, method, horizon): the auditors' AUC, TPR and power.

    * ``auc``: macro over attributes of the AUC (:func:`sklearn.metrics.roc_auc_score`) of the
      scores averaged over the EM seeds within each (pair, side), as C.5; ``auc[<attribute>]``;
      with ``n_boot``, ``auc_lo`` / ``auc_hi``: 95% percentile bootstrap over pairs, stratified
      by attribute (M and M' of a pair resampled together);
    * ``auc_per_seed``: AUC per seed, averaged; ``auc_indep``: M and M' drawn independently
      (:func:`dpmv_lib.evaluate.audit.independent_auc`, the quantity ``ceiling_auc`` bounds);
    * ``tpr``: TPR at ``fpr`` on the ROC of ALL attributes' seed-averaged scores pooled, linearly
      interpolated (:func:`tpr_at_fpr_interp`); ``min_fpr`` = 1 / n_neg, the lowest nonzero FPR
      the pooled negatives reach;
    * with ``ceilings`` (``ceiling_auc``, optional ``ceiling_auc_seeds``, keyed by any of track,
      response_model, method, horizon; ``method`` required): ``ceiling`` (``ceiling_auc_seeds``
      where several seeds are averaged, else ``ceiling_auc``), ``power = (auc - 0.5) / (ceiling
      - 0.5)`` (and ``power_lo`` / ``power_hi`` from the AUC interval), ``power_indep = (auc_indep
      - 0.5) / (ceiling_auc - 0.5)``; NaN where the ceiling is <= 0.5.

    Parameters
    ----------
    scores : scores in :data:`SCORE_COLUMNS` (without ``auditor``: one auditor, "c5").
    ceilings : the exact ceilings, or None.
    fpr : the false-positive rate of ``tpr``.
    n_boot, seed : bootstrap replicates (0: no intervals) and seed.

    Returns
    -------
    One row per summary key.

    Raises
    ------
    ParameterError
        on missing columns, a (pair, side, seed) without scores or n_boot < 0.
    """
    if "auditor" not in scores.columns:
        scores = scores.assign(auditor="c5")
    require_columns(scores, set(SCORE_COLUMNS), "score table")
    if n_boot < 0:
        raise ParameterError(f"n_boot must be >= 0, got {n_boot}")
    rng = np.random.default_rng(seed)
    recs = []
    for key, g in scores.groupby(list(SUMMARY_KEYS), sort=True):
        seeds = sorted(g["seed"].unique())
        rec = dict(zip(SUMMARY_KEYS, key))
        rec["horizon"] = int(rec["horizon"])
        aucs, per_seed, indep, pos_all, neg_all, boots = {}, [], [], [], [], []
        for attr, ga in g.groupby("attribute", sort=True):
            tab = ga.pivot_table(index="pair_id", columns=["side", "seed"], values="score", aggfunc="mean")
            try:
                P, Q = tab["M"][seeds].to_numpy(), tab["M'"][seeds].to_numpy()
            except KeyError:
                raise ParameterError(f"{'/'.join(map(str, key))}/{attr}: every pair needs scores for M and M' "
                                     f"at every seed {seeds}") from None
            if np.isnan(P).any() or np.isnan(Q).any():
                raise ParameterError(f"{'/'.join(map(str, key))}/{attr}: missing scores for some (pair, side, seed)")
            pos, neg = P.mean(axis=1), Q.mean(axis=1)
            y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
            aucs[attr] = float(roc_auc_score(y, np.r_[pos, neg]))
            per_seed.append(np.mean([roc_auc_score(y, np.r_[P[:, s], Q[:, s]]) for s in range(len(seeds))]))
            indep.append(float(independent_auc(P, Q)) if len(P) > 1 or len(seeds) > 1 else float("nan"))
            pos_all.append(pos)
            neg_all.append(neg)
            if n_boot:
                ii = rng.integers(0, len(pos), size=(n_boot, len(pos)))
                boots.append(auc_rows(pos[ii], neg[ii]))
        pos, neg = np.concatenate(pos_all), np.concatenate(neg_all)
        rec.update(auc=float(np.mean(list(aucs.values()))), auc_per_seed=float(np.mean(per_seed)),
                   auc_indep=float(np.mean(indep)), tpr=tpr_at_fpr_interp(pos, neg, fpr), fpr=fpr,
                   min_fpr=1.0 / len(neg), n_pos=int(len(pos)), n_neg=int(len(neg)), n_seeds=len(seeds))
        if n_boot:
            b = np.mean(boots, axis=0)
            rec["auc_lo"], rec["auc_hi"] = float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))
        rec.update({f"auc[{a}]": v for a, v in aucs.items()})
        recs.append(rec)
    out = pd.DataFrame.from_records(recs)
    if ceilings is None or out.empty:
        return out
    out = _ceiling_lookup(out, ceilings)
    seeds_c = out.get("ceiling_auc_seeds", pd.Series(np.nan, index=out.index))
    out["ceiling"] = seeds_c.where((out["n_seeds"] > 1) & seeds_c.notna(), out["ceiling_auc"])
    for name, col in (("power", "auc"), ("power_lo", "auc_lo"), ("power_hi", "auc_hi")):
        if col in out.columns:
            out[name] = _power(out[col], out["ceiling"])
    out["power_indep"] = _power(out["auc_indep"], out["ceiling_auc"])
    return out


def best_auditor(summary: pd.DataFrame, *, exclude: Sequence[str] = ()) -> pd.DataFrame:
    """Per (track, response_model, method, horizon): the auditor with the highest ``power`` (ties:
    the first in :data:`AUDITORS` order), leaving out ``exclude``.

    Parameters
    ----------
    summary, exclude : :func:`summarise` output with ceilings; auditor names not to consider.

    Returns
    -------
    The chosen rows (methods without a finite power are left out).

    Raises
    ------
    ParameterError
        if ``summary`` has no ``power`` column.
    """
    require_columns(summary, {"power", "auditor"}, "summary")
    s = summary[~summary["auditor"].isin(exclude) & summary["power"].notna()].copy()
    s["_rank"] = s["auditor"].map({a: i for i, a in enumerate(AUDITORS)}).fillna(len(AUDITORS))
    s = s.sort_values(["power", "_rank"], ascending=[False, True], kind="stable")
    keys = [k for k in CEILING_KEYS if k in s.columns]
    return s.drop_duplicates(keys).sort_values(keys).drop(columns="_rank").reset_index(drop=True)
