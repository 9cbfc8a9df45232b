"""RQ2 score channel (C3/C6, Table 4 ``ScoreChannel``): a calibrated logistic-regression auditor on
the released top internal score sequence, with the embedding auditor's split protocol, order-free
features by public query family, and the exact pair-level fact that the sequence differs between
M and M'.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError
from ..evaluate.audit import require_columns
from .rq2 import SCORE_CHANNEL, one_model


# ---- score channel (C3/C6) ----------------------------------------------------------------------------
def score_sequences(transcripts: pd.DataFrame, horizon: int = 16, *, method: str = SCORE_CHANNEL,
                    key: str = "top_score") -> tuple[pd.DataFrame, np.ndarray]:
    """The released side channel as features: per transcript (pair, side, seed) the vector of the
    top internal score per turn (max over the turn's slots; 0 where no score was released, i.e.
    generic fallback, a public event identical under M and M').

    Returns (keys, X) with keys = track, response_model, method, pair_id, attribute, split, side, seed."""
    require_columns(transcripts, {"method", "pair_id", "attribute", "split", "side", "seed", "turn", "released"})
    df = transcripts[(transcripts["method"] == method) & (transcripts["turn"] < horizon)]
    if df.empty:
        raise ParameterError(f"no {method!r} rows in the transcript table")
    df = one_model(df)
    cols = ["track", "response_model", "method", "pair_id", "attribute", "split", "side", "seed"]
    for c in ("track", "response_model"):
        if c not in df.columns:
            df = df.assign(**{c: ""})
    keys, rows = [], []
    for k, g in df.sort_values("turn").groupby(cols, sort=True):
        if len(g) != horizon:
            raise ParameterError(f"{k}: need turns 0..{horizon - 1}, got {len(g)}")
        vec = []
        for r in g["released"]:
            obj = json.loads(r)
            vals = [float(s[key]) for s in obj.get("slots", []) if key in s]
            vec.append(max(vals) if vals else 0.0)
        keys.append(dict(zip(cols, k)))
        rows.append(vec)
    return pd.DataFrame(keys), np.asarray(rows, dtype=float)


def feature_audit(keys: pd.DataFrame, X: np.ndarray, *, horizon: int, config: Any = None,
                  label: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The embedding auditor's protocol (C.5) on arbitrary transcript features: per attribute a
    logistic regression fitted on train pairs, sigmoid-calibrated on validation pairs, evaluated
    on test pairs; macro AUC / TPR over attributes with seeds averaged within a pair
    (:func:`dpmv_lib.evaluate.audit.summarise_scores`). Returns (summary, scores)."""
    from ..evaluate.audit import AuditConfig, fit_auditor, summarise_scores

    config = config or AuditConfig(horizons=(horizon,))
    require_columns(keys, {"pair_id", "attribute", "split", "side", "seed"}, "feature keys")
    if len(keys) != len(X):
        raise ParameterError(f"{len(keys)} keys but {len(X)} feature rows")
    keys = keys.reset_index(drop=True).copy()
    for c in ("track", "response_model", "method"):
        if c not in keys.columns:
            keys[c] = ""
    if label is not None:
        keys["method"] = label
    y = (keys["side"] == "M").to_numpy(int)
    parts = []
    for attr, idx in keys.groupby("attribute").groups.items():
        idx = np.asarray(idx)
        sp = keys.loc[idx, "split"].to_numpy()
        tr, va, te = idx[sp == "train"], idx[sp == "validation"], idx[sp == "test"]
        if len(tr) == 0 or len(va) == 0 or len(te) == 0:
            raise ParameterError(f"attribute {attr!r}: need train, validation and test pairs "
                                 f"(got {len(tr)}, {len(va)}, {len(te)} transcripts)")
        aud = fit_auditor(X[tr], y[tr], X[va], y[va], C=config.C, max_iter=config.max_iter,
                          response_model=str(keys.loc[tr[0], "response_model"]),
                          method=str(keys.loc[tr[0], "method"]), attribute=attr, horizon=horizon)
        part = keys.loc[te, ["track", "response_model", "method", "pair_id", "attribute", "side", "seed"]].copy()
        part["horizon"] = horizon
        part["score"] = aud.predict(X[te])
        parts.append(part)
    scores = pd.concat(parts, ignore_index=True)
    return summarise_scores(scores, config), scores


def score_channel_exact(keys: pd.DataFrame, X: np.ndarray, *, atol: float = 0.0) -> pd.DataFrame:
    """Exact facts about the score channel, per attribute and overall: the share of (pair, seed)
    whose released score sequence differs between M and M'. The channel is a deterministic
    function of the store given the public path, so an auditor that knows the pair and sees one
    differing sequence identifies the store with certainty: its AUC is 0.5 + share / 2."""
    k = keys.reset_index(drop=True)
    m = {(r.pair_id, r.seed): i for i, r in k.iterrows() if r.side == "M"}
    mp = {(r.pair_id, r.seed): i for i, r in k.iterrows() if r.side == "M'"}
    if set(m) != set(mp):
        raise ParameterError("every (pair, seed) needs a score sequence for M and M'")
    recs = []
    for (pid, seed), i in m.items():
        j = mp[(pid, seed)]
        recs.append({"pair_id": pid, "seed": seed, "attribute": k.at[i, "attribute"],
                     "differs": bool(np.any(np.abs(X[i] - X[j]) > atol)),
                     "mean_gap": float(np.mean(X[i] - X[j]))})
    per = pd.DataFrame(recs)
    out = per.groupby("attribute").agg(share_differing=("differs", "mean"), mean_gap=("mean_gap", "mean")).reset_index()
    out.loc[len(out)] = {"attribute": "all", "share_differing": per["differs"].mean(),
                         "mean_gap": per["mean_gap"].mean()}
    out["pair_known_auc"] = 0.5 + out["share_differing"] / 2
    return out


QUERY_FAMILIES: tuple[str, ...] = ("target", "neutral", "distractor")


def score_family_features(transcripts: pd.DataFrame, keys: pd.DataFrame, X: np.ndarray, *, horizon: int,
                          generic_utility: float = 0.5,
                          families: Sequence[str] = QUERY_FAMILIES) -> tuple[np.ndarray, list[str]]:
    """Order-free features of the released score sequence by public query family (the query is
    public, so is its family): per family, the mean released top score and the share of turns
    whose top score exceeds the generic view's fixed, store-independent utility (a non-generic
    view matched memory cues). Turn order differs across pairs, so these pool better than the
    raw per-turn vector."""
    require_columns(transcripts, {"pair_id", "side", "seed", "turn", "qtype"})
    fam = (transcripts[transcripts["turn"] < horizon].drop_duplicates(["pair_id", "turn"])
           .set_index(["pair_id", "turn"])["qtype"])
    Q = np.array([[fam.get((pid, t), "") for t in range(horizon)] for pid in keys["pair_id"]])
    cols, names = [], []
    for f in families:
        msk = Q == f
        n = np.maximum(msk.sum(axis=1), 1)
        cols.append(np.where(msk, X, 0.0).sum(axis=1) / n)
        cols.append(np.where(msk & (X > generic_utility + 1e-9), 1.0, 0.0).sum(axis=1) / n)
        names += [f"mean[{f}]", f"above_generic[{f}]"]
    return np.column_stack(cols), names


def score_channel_table(transcripts: pd.DataFrame, *, horizon: int = 16, n_boot: int = 1000, seed: int = 0,
                        generic_utility: float = 0.5, paper_auc: float | None = None) -> pd.DataFrame:
    """The C3/C6 score-channel AUC three ways (rows): a learned auditor on the raw released score
    sequence, a learned auditor on its per-query-family summary (:func:`score_family_features`),
    both with the C.5 split protocol; and the exact pair-known auditor (0.5 + share of pairs whose
    score sequence differs / 2). With ``paper_auc`` the paper's value and the difference."""
    from ..evaluate.audit import AuditConfig

    keys, X = score_sequences(transcripts, horizon)
    cfg = AuditConfig(horizons=(horizon,), n_boot=n_boot, seed=seed)
    F, names = score_family_features(transcripts, keys, X, horizon=horizon, generic_utility=generic_utility)
    rows = []
    for label, feats in (("learned: raw score sequence", X), ("learned: by query family", F)):
        s, _ = feature_audit(keys, feats, horizon=horizon, config=cfg)
        r = s.iloc[0]
        rows.append({"auditor": label, "auc": float(r["auc"]), "auc_lo": float(r.get("auc_lo", np.nan)),
                     "auc_hi": float(r.get("auc_hi", np.nan)), "tpr": float(r["tpr"]),
                     "n_test_pairs": int(r["n_pairs"])})
    ex = score_channel_exact(keys, X)
    allr = ex[ex["attribute"] == "all"].iloc[0]
    rows.append({"auditor": "exact: pair-known (any differing score identifies the store)",
                 "auc": float(allr["pair_known_auc"]), "auc_lo": np.nan, "auc_hi": np.nan, "tpr": np.nan,
                 "n_test_pairs": int(keys["pair_id"].nunique())})
    out = pd.DataFrame(rows)
    if paper_auc is not None:
        out["paper_auc"] = paper_auc
        out["delta_auc"] = out["auc"] - paper_auc
    return out


def score_channel_step(run: Any, transcripts: Any) -> Any:
    """Notebook 04: :func:`score_channel_table` at T beside the paper's AUC (``04_score_channel``)."""
    from .common import paper_figure
    from .result import Result, sentence

    cfg = run.cfg
    with run.timer("score channel"):
        sc = score_channel_table(transcripts["transcripts"], horizon=cfg.T, n_boot=cfg.n_boot, seed=cfg.seed,
                                 paper_auc=paper_figure("score_channel_auc"))
    run.write_table("04_score_channel", sc)
    finding = sentence("The released score identifies the store: the exact pair-known auditor reaches AUC {ex:.3f}, "
                       "the learned auditor by query family {fam:.3f} and on the raw sequence {raw:.3f} (paper "
                       "{paper:.3f}).", ex=float(sc["auc"].iloc[2]), fam=float(sc["auc"].iloc[1]),
                       raw=float(sc["auc"].iloc[0]), paper=float(sc["paper_auc"].iloc[0]))
    return Result("The score channel (C3/C6)", tables={"AUC of the released score": sc}, finding=finding,
                  data={"table": sc})
