"""Embedding privacy auditor (paper C.5 "Embedding privacy auditing") and its metrics.

For each response model, method, protected attribute a and prefix length t:

1. embed each assistant response with a frozen sentence encoder (:mod:`dpmv_lib.evaluate.encoders`);
2. a transcript prefix is the mean of its first t response embeddings, L2-normalised;
3. a logistic regression separates prefixes from M (label 1) and M' (label 0); it is fitted on
   the PairedMem *training* pairs of attribute a (both sides of every pair; for stochastic
   methods every EM seed is one labelled sample), sigmoid-calibrated (Platt) on the
   *validation* pairs, and evaluated on the held-out *test* pairs;
4. the same fitted, calibrated PairedMem auditor is applied to every transfer pair of attribute
   a, without refitting or recalibration.

Metrics (per attribute, then the macro mean over the four attributes): AUC (Mann-Whitney, ties
count 1/2) and TPR at 5% FPR (the largest TPR whose empirical FPR is <= 5%). For stochastic
methods (several EM seeds) the calibrated probability is **averaged over the seeds within each
(pair, side)** before the metrics are computed over pairs (C.5 "Runs and aggregation"); the
per-seed metrics (one transcript per pair, averaged over seeds afterwards) are reported too as
``auc_per_seed``. 95% confidence intervals are percentile bootstraps over pairs, stratified by
attribute, with a fixed seed (M and M' of a pair are resampled together).

"Chance by construction" (the paper's dagger) is never assumed: :func:`conditioning_identical`
checks from the transcripts that what the response model received is identical under M and M'
for every pair, seed and turn; only then do tables print 0.500/0.050 for the method, and they
keep the measured auditor values in separate columns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression

from .encoders import Encoder
from ..core.errors import ParameterError

GROUP = ["track", "response_model", "method", "pair_id", "side", "seed"]
REQUIRED = {"track", "pair_id", "attribute", "split", "response_model", "method", "side", "seed", "turn",
            "conditioning", "response"}
CHANCE_AUC, CHANCE_TPR = 0.5, 0.05


@dataclass(frozen=True)
class AuditConfig:
    """Auditor settings. ``horizons``: prefix lengths t to fit (Table 2 uses 16)."""

    horizons: tuple[int, ...] = (16,)
    C: float = 1.0                  # inverse L2 strength of the logistic regression
    fpr: float = 0.05               # TPR is reported at this FPR
    n_boot: int = 1000              # bootstrap replicates over pairs (0: no CIs)
    seed: int = 0                   # bootstrap seed
    max_iter: int = 2000
    tol: float = 1e-8               # lbfgs tolerance: scikit-learn's default (1e-4) stops before the
                                    # first step when the M/M' signal is tiny, leaving w = 0
    unit: str = "response"          # embedding unit: "response" (C.5; "auto" = the same) or "sentence"

    def __post_init__(self) -> None:
        if not self.horizons or any((not isinstance(h, (int, np.integer))) or h < 1 for h in self.horizons):
            raise ParameterError(f"horizons must be positive ints, got {self.horizons!r}")
        if not 0 < self.fpr < 1:
            raise ParameterError(f"fpr must lie in (0, 1), got {self.fpr}")
        if self.n_boot < 0 or self.C <= 0:
            raise ParameterError("n_boot must be >= 0 and C > 0")
        if self.unit not in UNITS:
            raise ParameterError(f"unknown embedding unit {self.unit!r}; use one of {UNITS}")


# ---- metrics --------------------------------------------------------------------------------
def auc_score(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC = P(score_M > score_M') + 1/2 P(tie) (Mann-Whitney; equals sklearn's roc_auc_score)."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    d = pos[:, None] - neg[None, :]
    return float(((d > 0).sum() + 0.5 * (d == 0).sum()) / d.size)


def tpr_at_fpr(pos: np.ndarray, neg: np.ndarray, fpr: float = 0.05) -> float:
    """Largest TPR over thresholds whose empirical FPR is <= ``fpr`` (no interpolation):
    with k = floor(fpr * n_neg) and the (k+1)-th largest negative score tau, TPR = P(pos > tau)."""
    pos, neg = np.asarray(pos, float), np.sort(np.asarray(neg, float))[::-1]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    k = int(math.floor(fpr * len(neg) + 1e-9))
    if k >= len(neg):
        return 1.0
    return float(np.mean(pos > neg[k]))


def auc_rows(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Row-wise AUC (ties 1/2) for (B, n) arrays of resampled positives and negatives."""
    d = pos[:, :, None] - neg[:, None, :]
    return ((d > 0).sum(axis=(1, 2)) + 0.5 * (d == 0).sum(axis=(1, 2))) / (pos.shape[1] * neg.shape[1])


def tpr_rows(pos: np.ndarray, neg: np.ndarray, fpr: float) -> np.ndarray:
    """Row-wise :func:`tpr_at_fpr` for (B, n) arrays of resampled positives and negatives."""
    k = int(math.floor(fpr * neg.shape[1] + 1e-9))
    if k >= neg.shape[1]:
        return np.ones(pos.shape[0])
    tau = -np.sort(-neg, axis=1)[:, k]
    return (pos > tau[:, None]).mean(axis=1)


# ---- chance by construction -------------------------------------------------------------------
def conditioning_identical(transcripts: pd.DataFrame, horizon: int | None = None) -> pd.DataFrame:
    """Per (track, response_model, method): is everything the response model received (the
    ``conditioning`` text, plus the released ``views`` and public ``released`` record where
    present) identical under M and M' for every pair, seed and turn (< ``horizon`` if given)?
    Returns the verdict with the number of (pair, seed, turn) cells checked and differing."""
    require_columns(transcripts, REQUIRED)
    df = transcripts if horizon is None else transcripts[transcripts["turn"] < horizon]
    cols = [c for c in ("conditioning", "views", "released") if c in df.columns]
    key = ["track", "response_model", "method", "pair_id", "seed", "turn"]
    m = df[df["side"] == "M"].set_index(key)[cols].sort_index()
    mp = df[df["side"] == "M'"].set_index(key)[cols].sort_index()
    if not m.index.equals(mp.index):
        raise ParameterError("transcripts must hold the same (pair, seed, turn) cells for M and M'")
    diff = (m.fillna("") != mp.fillna("")).any(axis=1)
    g = diff.groupby(level=["track", "response_model", "method"])
    out = pd.DataFrame({"cells": g.size(), "differing": g.sum()}).reset_index()
    out["identical"] = out["differing"] == 0
    return out


# ---- features ---------------------------------------------------------------------------------
UNITS = ("response", "sentence", "auto")


def embed_responses(texts: Sequence[str], encoder: Encoder, unit: str = "response", *,
                    progress: bool = False) -> tuple[np.ndarray, str]:
    """Unit-norm embeddings of responses. ``unit="response"`` encodes each response as one text
    (exactly C.5; ``"auto"`` is the same, kept as the default name of the profiles' setting).
    ``unit="sentence"`` (opt-in, not C.5) encodes each distinct sentence once and represents a
    response by the L2-normalised mean of its sentence embeddings. Returns (embeddings, unit used)."""
    if unit not in UNITS:
        raise ParameterError(f"unknown embedding unit {unit!r}; use one of {UNITS}")
    texts = list(texts)
    if unit == "auto":
        unit = "response"
    if unit == "response":
        return _encode_batched(encoder, texts, progress=progress), unit
    from .rubric_judge import split_sentences

    parts = [split_sentences(t) or [t] for t in texts]
    index: dict[str, int] = {}
    for ps in parts:
        for x in ps:
            index.setdefault(x, len(index))
    emb = _encode_batched(encoder, list(index), progress=progress)
    rows = np.repeat(np.arange(len(parts)), [len(ps) for ps in parts])
    cols = np.fromiter((index[x] for ps in parts for x in ps), dtype=np.int64)
    out = np.zeros((len(parts), emb.shape[1]), dtype=np.float64)
    np.add.at(out, rows, emb[cols])
    nrm = np.linalg.norm(out, axis=1, keepdims=True)
    nrm[nrm == 0] = 1.0
    return (out / nrm).astype(np.float32), unit


def prefix_features(transcripts: pd.DataFrame, encoder: Encoder, horizons: Sequence[int],
                    *, unit: str = "response", progress: bool = False
                    ) -> tuple[pd.DataFrame, dict[int, np.ndarray], str]:
    """Mean of the first t response embeddings, L2-normalised, for every transcript
    (track, response_model, method, pair, side, seed) and every t in ``horizons``.

    Returns (keys, {t: X_t}, unit) with one row of ``keys`` (GROUP columns + attribute, split) per
    transcript, aligned with the rows of every X_t; ``unit`` is the embedding unit used (see
    :func:`embed_responses`). Each distinct response text is encoded once."""
    require_columns(transcripts, REQUIRED)
    hmax = int(max(horizons))
    df = transcripts[transcripts["turn"] < hmax].sort_values(GROUP + ["turn"], kind="stable")
    sizes = df.groupby(GROUP, sort=False).size()
    if (sizes != hmax).any():
        bad = sizes[sizes != hmax].index[:3].tolist()
        raise ParameterError(f"every transcript needs turns 0..{hmax - 1}; incomplete: {bad}")
    texts = df["response"].astype(str).to_numpy()
    uniq, inv = np.unique(texts, return_inverse=True)
    emb, unit = embed_responses(list(uniq), encoder, unit, progress=progress)
    n = len(sizes)
    rows = inv.reshape(n, hmax)
    wanted = {int(t) for t in horizons}
    # running float64 sum over turns: the same additions, in the same order, as a cumsum over the
    # (n, hmax, dim) stack, without holding that stack (peak memory)
    acc = np.zeros((n, emb.shape[1]), dtype=np.float64)
    feats = {}
    for t in range(1, hmax + 1):
        acc += emb[rows[:, t - 1]]
        if t in wanted:
            x = acc / t
            nrm = np.linalg.norm(x, axis=1, keepdims=True)
            nrm[nrm == 0] = 1.0
            feats[t] = (x / nrm).astype(np.float32)
    feats = {int(t): feats[int(t)] for t in horizons}
    keys = df.groupby(GROUP, sort=False)[["attribute", "split"]].first().reset_index()
    return keys, feats, unit


def _encode_batched(encoder: Encoder, texts: list[str], *, progress: bool, chunk: int = 4096) -> np.ndarray:
    if not texts:
        raise ParameterError("no responses to encode")
    parts = []
    rng = range(0, len(texts), chunk)
    if progress:
        from tqdm.auto import tqdm
        rng = tqdm(rng, desc=f"encode {len(texts)} responses", unit="chunk")
    for i in rng:
        parts.append(encoder.encode(texts[i:i + chunk]))
    return np.concatenate(parts)


# ---- fitting ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlattScaler:
    """Sigmoid calibration p = 1 / (1 + exp(A f + B)) with Platt's smoothed targets."""

    A: float
    B: float

    @classmethod
    def fit(cls, f: np.ndarray, y: np.ndarray) -> "PlattScaler":
        f, y = np.asarray(f, float), np.asarray(y, int)
        n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
        if n_pos == 0 or n_neg == 0:
            raise ParameterError("sigmoid calibration needs validation samples from both M and M'")
        t = np.where(y == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

        def nll(ab):
            z = ab[0] * f + ab[1]
            # -sum t log p + (1-t) log(1-p) with p = sigmoid(-z)
            return float(np.sum(t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z)))

        def grad(ab):
            z = ab[0] * f + ab[1]
            p = 1.0 / (1.0 + np.exp(np.clip(z, -500, 500)))
            g = t - p
            return np.array([np.sum(g * f), np.sum(g)])

        b0 = math.log((n_neg + 1.0) / (n_pos + 1.0))
        res = minimize(nll, np.array([0.0, b0]), jac=grad, method="BFGS")
        return cls(float(res.x[0]), float(res.x[1]))

    def __call__(self, f: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(np.clip(self.A * np.asarray(f, float) + self.B, -500, 500)))


@dataclass(frozen=True)
class Auditor:
    """One fitted, calibrated auditor (response model, method, attribute, prefix length)."""

    response_model: str
    method: str
    attribute: str
    horizon: int
    clf: LogisticRegression
    platt: PlattScaler
    n_train: int
    n_val: int

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Calibrated P(transcript comes from M)."""
        return self.platt(self.clf.decision_function(x))


def fit_auditor(x_tr, y_tr, x_val, y_val, *, C: float = 1.0, max_iter: int = 2000, tol: float = 1e-8,
                **meta) -> Auditor:
    """L2 logistic regression (lbfgs, fitted to tight convergence) + Platt scaling on validation."""
    y_tr = np.asarray(y_tr, int)
    if y_tr.min() == y_tr.max():
        raise ParameterError(f"auditor {meta}: training data hold one class only")
    clf = LogisticRegression(C=C, max_iter=max_iter, tol=tol)
    clf.fit(x_tr, y_tr)
    platt = PlattScaler.fit(clf.decision_function(x_val), y_val)
    return Auditor(clf=clf, platt=platt, n_train=len(y_tr), n_val=len(y_val), **meta)


# ---- the whole audit -------------------------------------------------------------------------
def run_audit(transcripts: pd.DataFrame, encoder: Encoder, config: AuditConfig = AuditConfig(), *,
              source_track: str = "pairedmem", progress: bool = False
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit auditors on ``source_track`` and evaluate on its test pairs and on every pair of the other
    tracks. Returns (summary, scores): one summary row per (track, response_model, method,
    horizon) with macro AUC / TPR@fpr and bootstrap CIs, per-attribute values, the per-seed and
    independent-draw AUCs and the embedding unit used; and the calibrated score of every evaluated
    (pair, side, seed) transcript (seed averaging happens in :func:`summarise_scores`)."""
    require_columns(transcripts, REQUIRED)
    if source_track not in set(transcripts["track"]):
        raise ParameterError(f"the auditor is fitted on the {source_track!r} track, absent from the transcripts")
    keys, feats, unit = prefix_features(transcripts, encoder, config.horizons, unit=config.unit,
                                        progress=progress)
    keys["y"] = (keys["side"] == "M").astype(int)
    src = keys["track"] == source_track
    eval_mask = (src & (keys["split"] == "test")) | ~src
    score_rows = []
    combos = list(keys.groupby(["response_model", "method", "attribute"]).groups.items())
    it = combos
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(combos, desc="fit auditors", unit="aud")
    for (model, method, attr), idx in it:
        idx = np.asarray(idx)
        k = keys.loc[idx]
        tr = idx[(src.loc[idx] & (k["split"] == "train")).to_numpy()]
        va = idx[(src.loc[idx] & (k["split"] == "validation")).to_numpy()]
        ev = idx[eval_mask.loc[idx].to_numpy()]
        if len(tr) == 0 or len(va) == 0:
            raise ParameterError(f"{model}/{method}/{attr}: needs {source_track} train and validation pairs "
                                 f"(got {len(tr)} and {len(va)} transcripts)")
        for t in config.horizons:
            x = feats[t]
            aud = fit_auditor(x[tr], keys["y"].to_numpy()[tr], x[va], keys["y"].to_numpy()[va],
                              C=config.C, max_iter=config.max_iter, tol=config.tol, response_model=model, method=method,
                              attribute=attr, horizon=t)
            p = aud.predict(x[ev])
            part = keys.loc[ev, ["track", "response_model", "method", "pair_id", "attribute", "side", "seed"]].copy()
            part["horizon"] = t
            part["score"] = p
            score_rows.append(part)
    scores = pd.concat(score_rows, ignore_index=True)
    summary = summarise_scores(scores, config)
    summary["embedding_unit"] = unit
    return summary, scores


def independent_auc(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """AUC of single transcripts with M and M' drawn independently: P, Q are (..., n pairs, S seeds)
    scores; same-pair comparisons use different seeds only (seed s of M vs s' != s of M'), so the
    common random numbers that couple M and M' of one pair and seed never enter. With S = 1 the
    same-pair comparisons are dropped. Its expectation is the pooled AUC of the fixed auditor,
    which the exact single-transcript ceiling bounds."""
    n, S = P.shape[-2], P.shape[-1]
    d = P[..., :, :, None, None] - Q[..., None, None, :, :]          # (..., i, s, j, s')
    c = (d > 0) + 0.5 * (d == 0)
    same_pair = np.eye(n, dtype=bool)[:, None, :, None]
    same_seed = np.eye(S, dtype=bool)[None, :, None, :]
    off = c.sum(axis=(-4, -3, -2, -1)) - (c * same_pair).sum(axis=(-4, -3, -2, -1))
    diag = (c * (same_pair & ~same_seed)).sum(axis=(-4, -3, -2, -1))
    if S == 1:
        return off / (n * (n - 1))
    return (off / (S * S) + diag / (S * (S - 1))) / (n * n)


def summarise_scores(scores: pd.DataFrame, config: AuditConfig = AuditConfig()) -> pd.DataFrame:
    """Macro AUC / TPR over attributes with pair-bootstrap CIs, from per-(pair, side, seed) scores.

    * ``auc``, ``tpr`` (Table 2): calibrated scores averaged over EM seeds within each (pair, side),
      then AUC / TPR@fpr over pairs;
    * ``auc_per_seed``: one transcript per pair and side, AUC per seed, then averaged over seeds;
    * ``auc_indep``: one transcript per pair and side with M and M' drawn independently (see
      :func:`independent_auc`): the quantity the exact single-transcript ceiling bounds in expectation."""
    rng = np.random.default_rng(config.seed)
    recs = []
    for (track, model, method, t), g in scores.groupby(["track", "response_model", "method", "horizon"], sort=True):
        seeds = sorted(g["seed"].unique())
        per: dict[str, dict[str, float]] = {k: {} for k in ("auc", "tpr", "seed", "indep")}
        boots: dict[str, list[np.ndarray]] = {k: [] for k in ("auc", "tpr", "indep")}
        n_pairs = 0
        for attr, ga in g.groupby("attribute"):
            tab = ga.pivot_table(index="pair_id", columns=["side", "seed"], values="score", aggfunc="mean")
            try:
                P = tab["M"][seeds].to_numpy()
                Q = tab["M'"][seeds].to_numpy()
            except KeyError:
                raise ParameterError(f"{track}/{model}/{method}/{attr}: every pair needs scores for M and M' "
                                     f"at every seed {seeds}") from None
            if np.isnan(P).any() or np.isnan(Q).any():
                raise ParameterError(f"{track}/{model}/{method}/{attr}: missing scores for some (pair, side, seed)")
            n_pairs += len(P)
            pos, neg = P.mean(axis=1), Q.mean(axis=1)
            per["auc"][attr] = auc_score(pos, neg)
            per["tpr"][attr] = tpr_at_fpr(pos, neg, config.fpr)
            per["seed"][attr] = float(np.mean([auc_score(P[:, k], Q[:, k]) for k in range(len(seeds))]))
            per["indep"][attr] = float(independent_auc(P, Q)) if len(P) > 1 or len(seeds) > 1 else float("nan")
            if config.n_boot:
                ii = rng.integers(0, len(pos), size=(config.n_boot, len(pos)))
                boots["auc"].append(auc_rows(pos[ii], neg[ii]))
                boots["tpr"].append(tpr_rows(pos[ii], neg[ii], config.fpr))
                if len(P) > 1 or len(seeds) > 1:
                    chunks = [independent_auc(P[ii[k:k + 100]], Q[ii[k:k + 100]]) for k in range(0, config.n_boot, 100)]
                    boots["indep"].append(np.concatenate(chunks))
        rec = {"track": track, "response_model": model, "method": method, "horizon": int(t),
               "auc": float(np.mean(list(per["auc"].values()))), "tpr": float(np.mean(list(per["tpr"].values()))),
               "auc_per_seed": float(np.mean(list(per["seed"].values()))),
               "auc_indep": float(np.mean(list(per["indep"].values()))),
               "n_pairs": int(n_pairs), "n_seeds": int(len(seeds))}
        if config.n_boot:
            for k, name in (("auc", "auc"), ("tpr", "tpr"), ("indep", "auc_indep")):
                if boots[k] and len(boots[k]) == len(per["auc"]):
                    b = np.mean(boots[k], axis=0)
                    rec[f"{name}_lo"], rec[f"{name}_hi"] = float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))
        for a, v in per["auc"].items():
            rec[f"auc[{a}]"] = v
        for a, v in per["tpr"].items():
            rec[f"tpr[{a}]"] = v
        recs.append(rec)
    return pd.DataFrame.from_records(recs)


def apply_dagger(summary: pd.DataFrame, identical: pd.DataFrame) -> pd.DataFrame:
    """Add ``by_construction`` (checked: identical conditioning under M and M' everywhere) and the
    reported values: 0.500 / 0.050 for such methods, the measured auditor otherwise. The measured
    values stay in ``auc_measured`` / ``tpr_measured``."""
    ident = identical.set_index(["track", "response_model", "method"])["identical"]
    out = summary.copy()
    out["by_construction"] = [bool(ident.get((r.track, r.response_model, r.method), False))
                              for r in out.itertuples()]
    out["auc_measured"], out["tpr_measured"] = out["auc"], out["tpr"]
    out["auc"] = np.where(out["by_construction"], CHANCE_AUC, out["auc_measured"])
    out["tpr"] = np.where(out["by_construction"], CHANCE_TPR, out["tpr_measured"])
    return out


def require_columns(df: pd.DataFrame, cols: Iterable[str], what: str = "transcript table") -> None:
    """ParameterError naming the columns ``df`` (the ``what``) lacks."""
    missing = set(cols) - set(df.columns)
    if missing:
        raise ParameterError(f"{what} lacks columns {sorted(missing)}")
