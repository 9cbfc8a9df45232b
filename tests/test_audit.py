"""Embedding auditor (C.5): known answers on constructed transcripts, metrics, calibration, dagger check."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from dpmv_lib.evaluate.audit import (AuditConfig, PlattScaler, independent_auc, apply_dagger, auc_score,
                                     conditioning_identical, embed_responses, prefix_features, run_audit, tpr_at_fpr)
from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.core.errors import ParameterError
from rq1_synth import make_transcripts

ENC = HashingEncoder(256)


@pytest.fixture(scope="module")
def audited():
    df = make_transcripts(n_per_attr=6, turns=4)
    summary, scores = run_audit(df, ENC, AuditConfig(horizons=(1, 4), n_boot=200, seed=1))
    return df, summary.set_index(["method", "horizon"]), scores


def test_perfectly_separable_gives_auc_one(audited):
    _, s, _ = audited
    for t in (1, 4):
        assert s.loc[("Leaky", t), "auc"] == 1.0
        assert s.loc[("Leaky", t), "tpr"] == 1.0
        assert s.loc[("Leaky", t), "auc_lo"] == 1.0


def test_identical_transcripts_give_chance(audited):
    _, s, _ = audited
    assert s.loc[("Same", 4), "auc"] == 0.5          # identical score multisets under M and M'
    assert s.loc[("Same", 4), "auc_indep"] == 0.5
    assert s.loc[("Same", 4), "tpr"] <= 0.05


def test_dagger_is_checked_not_assumed(audited):
    df, s, _ = audited
    ident = conditioning_identical(df).set_index("method")
    assert bool(ident.loc["Same", "identical"]) and not bool(ident.loc["Leaky", "identical"])
    assert not bool(ident.loc["Views", "identical"])
    out = apply_dagger(s.reset_index(), conditioning_identical(df)).set_index(["method", "horizon"])
    assert out.loc[("Same", 4), "by_construction"] and out.loc[("Same", 4), "tpr"] == 0.05
    assert out.loc[("Same", 4), "tpr_measured"] == s.loc[("Same", 4), "tpr"]   # measured value kept
    assert not out.loc[("Leaky", 4), "by_construction"] and out.loc[("Leaky", 4), "auc"] == 1.0
    # one differing cell anywhere removes the dagger
    df2 = df.copy()
    i = df2.index[(df2["method"] == "Same") & (df2["side"] == "M")][5]
    df2.loc[i, "conditioning"] += " extra"
    assert not bool(conditioning_identical(df2).set_index("method").loc["Same", "identical"])


def test_views_method_evaluated_on_test_pairs_with_cis(audited):
    _, s, scores = audited
    r = s.loc[("Views", 4)]
    assert r["n_pairs"] == 8 and r["n_seeds"] == 3            # 2 test pairs x 4 attributes
    assert r["auc_lo"] <= r["auc"] <= r["auc_hi"]
    assert set(scores["pair_id"].str[-3:].astype(int) % 6) <= {4, 5}   # test pairs only (split_of)


def test_transfer_uses_pairedmem_auditors_without_refit():
    pm = make_transcripts(n_per_attr=6, turns=2, methods=("Leaky", "Views"))
    tr = pm[pm["split"] == "test"].copy()
    tr["track"] = "transfer"
    tr["pair_id"] = "tr" + tr["pair_id"].str[2:]
    tr["split"] = "train"      # the transfer split is ignored: every transfer pair is evaluated
    df = pd.concat([pm, tr], ignore_index=True)
    _, scores = run_audit(df, ENC, AuditConfig(horizons=(2,), n_boot=0))
    a = scores[scores["track"] == "pairedmem"].assign(k=lambda d: d["pair_id"].str[2:]).set_index(
        ["method", "k", "side", "seed"])["score"].sort_index()
    b = scores[scores["track"] == "transfer"].assign(k=lambda d: d["pair_id"].str[2:]).set_index(
        ["method", "k", "side", "seed"])["score"].sort_index()
    assert np.allclose(a.to_numpy(), b.to_numpy())   # same auditor, same calibration, same inputs
    _, scores_pm = run_audit(pm, ENC, AuditConfig(horizons=(2,), n_boot=0))
    assert np.allclose(np.sort(scores_pm["score"]), np.sort(a.to_numpy()))  # transfer rows do not change the fit


def test_metrics_match_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(20):
        pos, neg = rng.integers(0, 6, 17).astype(float), rng.integers(0, 6, 23).astype(float)
        y = np.r_[np.ones(17), np.zeros(23)]
        s = np.r_[pos, neg]
        assert auc_score(pos, neg) == pytest.approx(roc_auc_score(y, s))
        fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
        assert tpr_at_fpr(pos, neg, 0.05) == pytest.approx(tpr[fpr <= 0.05 + 1e-12].max())


def test_indep_auc_brute_force():
    rng = np.random.default_rng(1)
    P, Q = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    num = den = 0.0
    for i in range(4):
        for s in range(3):
            for j in range(4):
                for s2 in range(3):
                    if i == j and s == s2:
                        continue
                    w = 1 / 6 if i == j else 1 / 9     # same pair: average over s != s'
                    num += w * ((P[i, s] > Q[j, s2]) + 0.5 * (P[i, s] == Q[j, s2]))
                    den += w
    assert independent_auc(P, Q) == pytest.approx(num / den)


def test_platt_is_monotone_and_calibrated():
    rng = np.random.default_rng(0)
    f = np.r_[rng.normal(1, 1, 200), rng.normal(-1, 1, 200)]
    y = np.r_[np.ones(200), np.zeros(200)].astype(int)
    p = PlattScaler.fit(f, y)
    grid = np.linspace(-3, 3, 13)
    assert np.all(np.diff(p(grid)) > 0) and p.A < 0
    assert p(np.array([0.0]))[0] == pytest.approx(0.5, abs=0.08)
    with pytest.raises(ParameterError, match="both"):
        PlattScaler.fit(f[:5], np.ones(5, int))


class FixedEncoder:
    id, dim = "fixed", 2
    table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "a.": [1.0, 0.0], "b.": [0.0, 1.0], "a. b.": [1.0, 1.0]}

    def encode(self, texts):
        x = np.array([self.table[t] for t in texts], dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_prefix_features_are_normalised_prefix_means():
    df = make_transcripts(n_per_attr=1, turns=3, methods=("Same",))
    df["response"] = df["turn"].map({0: "a", 1: "b", 2: "b"})
    keys, feats, unit = prefix_features(df, FixedEncoder(), (1, 3))
    assert unit == "response"
    assert np.allclose(feats[1], [1, 0])
    v = np.array([1, 2]) / np.sqrt(5)                 # mean of a, b, b -> normalised
    assert np.allclose(feats[3], v, atol=1e-6)
    assert len(keys) == 8                              # 4 pairs x 2 sides


def test_prefix_features_equal_the_stacked_cumsum_bitwise():
    """The running sum over turns (no (transcripts, turns, dim) stack) performs the
    same float64 additions as a cumsum over that stack, so the features are bit-identical."""
    df = make_transcripts(n_per_attr=3, turns=5, methods=("Same", "Leaky"))
    horizons = (5, 1, 3)
    keys, feats, _ = prefix_features(df, ENC, horizons)
    d = df[df["turn"] < 5].sort_values(["track", "response_model", "method", "pair_id", "side", "seed", "turn"],
                                       kind="stable")
    uniq, inv = np.unique(d["response"].astype(str).to_numpy(), return_inverse=True)
    emb = ENC.encode(list(uniq))
    cum = np.cumsum(emb[inv].reshape(len(keys), 5, -1), axis=1, dtype=np.float64)
    assert list(feats) == list(horizons)
    for t in horizons:
        x = cum[:, t - 1, :] / t
        nrm = np.linalg.norm(x, axis=1, keepdims=True)
        nrm[nrm == 0] = 1.0
        assert np.array_equal(feats[t], (x / nrm).astype(np.float32))


def test_sentence_unit_is_mean_of_sentence_embeddings():
    x, unit = embed_responses(["a. b.", "a. a."], FixedEncoder(), "sentence")
    assert unit == "sentence" and np.allclose(x[0], np.array([1, 1]) / np.sqrt(2))
    assert np.allclose(x[1], [1, 0])
    x, unit = embed_responses(["a. b."], FixedEncoder(), "response")
    assert unit == "response" and np.allclose(x[0], np.array([1, 1]) / np.sqrt(2))


def test_bad_inputs():
    df = make_transcripts(n_per_attr=6, turns=2, methods=("Same",))
    with pytest.raises(ParameterError, match="lacks columns"):
        run_audit(df.drop(columns=["response"]), ENC)
    with pytest.raises(ParameterError, match="turns 0..1"):
        prefix_features(df[df["turn"] == 0], ENC, (2,))
    with pytest.raises(ParameterError, match="validation"):
        run_audit(df[df["split"] != "validation"], ENC, AuditConfig(horizons=(2,), n_boot=0))
    with pytest.raises(ParameterError, match="horizons"):
        AuditConfig(horizons=(0,))
