"""The cross-encoded dimensions' spread over splits (dpmv_lib.evaluate.cross_encoder_spread): each
split's scorer is fine-tuned and blended on that split's fitting half only, its held-out kappa is
recomputed by hand with sklearn, the shards resume (a current shard is never redone, a stale one is),
bad shards and inputs are refused by name, and validate_u shows a range only where every split is
current."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import cross_encoder as CE
from dpmv_lib.evaluate import cross_encoder_spread as CS
from dpmv_lib.evaluate import u_validity as UV
from dpmv_lib.evaluate.cross_encoder import CrossEncoderConfig
from dpmv_lib.evaluate.rubric import DIMENSIONS


def _units(n: int = 80, seed: int = 0) -> pd.DataFrame:
    """``n`` labelled units over n // 2 distinct (query, response) pairs (each twice, as units of two
    rubric items; a few responses empty), two response models, design weights not all 1."""
    rng = np.random.default_rng(seed)
    k = n // 2
    base = pd.DataFrame({"query": [f"query {i % 17}" for i in range(k)],
                         "response": ["" if i % 7 == 3 else f"response {i}" for i in range(k)],
                         "response_model": ["surrogate" if i % 2 else "smollm2" for i in range(k)],
                         **{d: rng.integers(0, 5, k).astype(float) for d in DIMENSIONS},
                         "design_weight": rng.choice([0.5, 1.0, 2.0], k)})
    units = pd.concat([base.assign(item_kind="generic"), base.assign(item_kind="target_required")],
                      ignore_index=True)
    return units


class _Stub:
    """A cross-encoder whose prediction is a fixed function of the pair."""

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table

    def predict(self, queries, responses, batch_size=64):
        return np.array([self.table[(q, r)] for q, r in zip(queries, responses)], float)


class _FeatureModel:
    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def with_content(self, F, V):
        return F

    def score(self, X):
        return self.scores


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_a_split_is_fitted_on_its_fitting_half_and_its_kappa_recomputed(monkeypatch, weight):
    units = _units()
    mask = UV.split_halves(units, 3)
    rng = np.random.default_rng(1)
    pairs = units[["query", "response", "relevance"]].drop_duplicates(["query", "response"])
    noise = {(q, r): float(y + rng.normal(0, 1.2)) if r else 4.0 for q, r, y in pairs.itertuples(index=False)}
    feature_scores = rng.uniform(0, 4, (len(units), len(DIMENSIONS)))
    seen: dict[str, object] = {}

    def fit(q, r, y, w=None, config=None, *, base=None, log=None):
        seen["pairs"], seen["labels"], seen["weights"] = list(zip(q, r)), np.asarray(y), w
        return _Stub(noise)

    def fit_on(u, F, V, m, anchors, info):
        seen["feature_mask"] = np.asarray(m, bool).copy()
        return _FeatureModel(feature_scores)

    monkeypatch.setattr(CE.CrossEncoder, "fit", staticmethod(fit))
    monkeypatch.setattr(CS, "fit_on", fit_on)
    res = CS.split_kappas((units, None, None, {}), mask, "relevance", weight)

    # the fine-tuning saw one row per distinct pair of the fitting half, never a held-out pair
    fit_pairs = set(zip(units.loc[mask, "query"], units.loc[mask, "response"]))
    held_pairs = set(zip(units.loc[~mask, "query"], units.loc[~mask, "response"]))
    assert set(seen["pairs"]) == fit_pairs and len(seen["pairs"]) == len(fit_pairs)
    assert not set(seen["pairs"]) & held_pairs
    assert (seen["feature_mask"] == mask).all()
    # by hand: the blend, the cuts on the fitting half, sklearn's kappa on the other
    cross = np.array([noise[(q, r)] for q, r in zip(units["query"], units["response"])])
    score = (1 - weight) * np.clip(cross, 0, 4) + weight * feature_scores[:, 0]
    score[units["response"].str.strip().eq("").to_numpy()] = 0.0
    y, w = units["relevance"].to_numpy(), units["design_weight"].to_numpy()
    grades = UV.grade_with(score, UV.fit_cuts(score[mask], y[mask], w[mask]))
    for model in ("all", "surrogate", "smollm2"):
        sel = ~mask & ((units["response_model"] == model).to_numpy() if model != "all" else True)
        want = cohen_kappa_score(y[sel] >= 2, grades[sel] >= 2, sample_weight=w[sel])
        assert res["kappa_fitted"][model] == pytest.approx(want)
        assert res["positives_held_out"][model] == int((y[sel] >= 2).sum())


def test_an_oracle_cross_encoder_alone_agrees_perfectly(monkeypatch):
    units = _units()
    truth = {(q, r): float(y) for q, r, y in units[["query", "response", "relevance"]].itertuples(index=False)}
    units = units[units["response"].str.strip().ne("")].reset_index(drop=True)
    truth = {(q, r): float(y) for q, r, y in units[["query", "response", "relevance"]].itertuples(index=False)}
    noise = np.random.default_rng(2).uniform(0, 4, (len(units), len(DIMENSIONS)))
    monkeypatch.setattr(CE.CrossEncoder, "fit", staticmethod(lambda *a, **k: _Stub(truth)))
    monkeypatch.setattr(CS, "fit_on", lambda *a: _FeatureModel(noise))
    mask = UV.split_halves(units, 0)
    res = CS.split_kappas((units, None, None, {}), mask, "relevance", 0.0)
    assert res["kappa_fitted"]["all"] == pytest.approx(1.0)
    # the blend weighs the feature model: almost all of it (here noise) loses that agreement
    res = CS.split_kappas((units, None, None, {}), mask, "relevance", 0.99)
    assert not res["kappa_fitted"]["all"] > 0.5


def _model(weight: float = 0.75, labels: str = "L1", encoder: str = "enc", features: str = "F1") -> SimpleNamespace:
    ref = SimpleNamespace(feature_weight=weight, fit_info={"config": asdict(CrossEncoderConfig())})
    return SimpleNamespace(cross_encoded={"relevance": ref}, fit_info={"labels": labels, "encoder": encoder},
                           boundaries_sha=lambda dimension: f"{features}:{dimension}")


def _fake_compute(monkeypatch, model):
    calls = []

    def split_kappas(inputs, mask, d, w, config, *, base=None, log=None):
        calls.append((d, int(mask.sum()), w, config))
        k = 0.5 + 0.01 * len(calls)
        return {"kappa_fitted": {"all": k, "surrogate": k - 0.1, "smollm2": k + 0.1},
                "positives_held_out": {"all": 10, "surrogate": 4, "smollm2": 6}, "cut_2": 1.5}

    from dpmv_lib.evaluate import holistic
    monkeypatch.setattr(holistic, "load", lambda label_dir=None: model)
    monkeypatch.setattr(UV, "holistic_inputs", lambda enc, label_dir, data_dir: (_units(), None, None, {}))
    monkeypatch.setattr(CS, "split_kappas", split_kappas)
    return calls


def test_shards_resume_and_a_stale_one_is_redone(tmp_path, monkeypatch):
    enc = SimpleNamespace(id="enc")
    calls = _fake_compute(monkeypatch, _model())
    t = CS.compute(tmp_path, seeds=(0, 1, 2), encoder=enc).set_index("response_model")
    assert len(calls) == 3 and calls[0][2] == 0.75 and calls[0][3] == CrossEncoderConfig()
    assert sorted(p.name for p in (tmp_path / UV.SPREAD_DIR).iterdir()) == [
        "relevance-split0.json", "relevance-split1.json", "relevance-split2.json"]
    assert t.at["all", "splits"] == 3 and t.at["all", "of"] == 3
    assert (t.at["all", "kappa_min"], t.at["all", "kappa_median"], t.at["all", "kappa_max"]) == \
        pytest.approx((0.51, 0.52, 0.53))
    assert t.at["all", "kappa_split_seed"] == pytest.approx(0.51)
    assert t.at["surrogate", "kappa_max"] == pytest.approx(0.43)
    # a rerun finds every shard current and fine-tunes nothing; a wider one does the new seed only
    CS.compute(tmp_path, seeds=(0, 1, 2), encoder=enc)
    assert len(calls) == 3
    t = CS.compute(tmp_path, seeds=(0, 1, 2, 3), encoder=enc).set_index("response_model")
    assert len(calls) == 4 and t.at["all", "splits"] == 4
    # another feature weight, other labels or another feature model in the blend make every shard stale
    for changed in (_model(weight=0.5), _model(labels="L2"), _model(labels="L2", features="F2")):
        calls = _fake_compute(monkeypatch, changed)
        before = UV.cross_spread_table(UV.read_cross_spread(tmp_path / UV.SPREAD_DIR), changed, (0, 1))
        assert (before["splits"] == 0).all() and before["kappa_min"].isna().all()
        CS.compute(tmp_path, seeds=(0, 1), encoder=enc)
        assert len(calls) == 2
    # a cross-encoder alone reads no feature model: its shard stays current when the features change
    _fake_compute(monkeypatch, _model(weight=0.0))
    CS.compute(tmp_path, seeds=(0,), encoder=enc)
    assert UV.cross_spread_current(UV.read_cross_spread(tmp_path / UV.SPREAD_DIR)[0],
                                   _model(weight=0.0, features="F3"))
    with pytest.raises(ParameterError, match="not the one the committed model"):
        CS.compute(tmp_path, seeds=(7,), encoder=SimpleNamespace(id="other"))
    with pytest.raises(ParameterError, match="does not cross-encode 'actionability'"):
        CS.compute(tmp_path, seeds=(0,), dimensions=["actionability"], encoder=enc)


def test_a_foreign_or_garbled_shard_is_refused_by_name(tmp_path):
    d = tmp_path / UV.SPREAD_DIR
    d.mkdir()
    (d / "relevance-split0.json").write_text("{not json")
    with pytest.raises(ParameterError, match="relevance-split0.json: not a JSON shard"):
        UV.read_cross_spread(d)
    (d / "relevance-split0.json").write_text(json.dumps({"dimension": "relevance"}))
    with pytest.raises(ParameterError, match="relevance-split0.json: not a dpmv-cross-encoder-spread-1 shard"):
        UV.read_cross_spread(d)


def test_validate_u_fills_the_range_only_where_every_split_is_current(tmp_path, monkeypatch):
    enc = SimpleNamespace(id="enc")
    model = _model()
    _fake_compute(monkeypatch, model)
    CS.compute(tmp_path, seeds=(0, 1), encoder=enc)
    cols = ["kappa_fitted_min", "kappa_fitted_median", "kappa_fitted_max"]
    table = pd.DataFrame([{"dimension": d, "response_model": m, **dict.fromkeys(cols, math.nan)}
                          for d in DIMENSIONS for m in ("all", "surrogate", "smollm2")])
    partial, counts = UV._with_cross_spread(table, model, tmp_path / UV.SPREAD_DIR, (0, 1, 2))
    assert counts == {"relevance": 2} and partial[cols].isna().all().all()
    full, counts = UV._with_cross_spread(table, model, tmp_path / UV.SPREAD_DIR, (0, 1))
    assert counts == {"relevance": 2}
    rel = full.set_index(["dimension", "response_model"]).loc[("relevance", "all"), cols].to_numpy(float)
    assert rel == pytest.approx([0.51, 0.515, 0.52])
    assert full[full["dimension"] != "relevance"][cols].isna().all().all()


def test_training_rows_are_the_masked_distinct_pairs_with_their_weights(monkeypatch):
    units = _units()
    mask = UV.split_halves(units, 1)
    q, r, y, w = UV.training_rows(units, mask, "actionability")
    first = units[mask].drop_duplicates(["query", "response"])
    assert list(zip(q, r)) == list(zip(first["query"], first["response"]))
    assert (y == first["actionability"].to_numpy()).all() and (w == first["design_weight"].to_numpy()).all()
    assert UV.training_rows(units.drop(columns="design_weight"), mask, "actionability")[3] is None
    with pytest.raises(ParameterError, match="unknown dimension 'fluency'"):
        UV.training_rows(units, mask, "fluency")
    got = {}
    monkeypatch.setattr(CE.CrossEncoder, "fit", staticmethod(lambda *a, **k: got.update(args=a, kwargs=k)))
    UV.fit_cross_encoder_on(units, mask, "actionability", CrossEncoderConfig(epochs=2), base="/models/tiny")
    assert got["args"][:4] == (q, r, pytest.approx(y), pytest.approx(w))
    assert got["args"][4] == CrossEncoderConfig(epochs=2) and got["kwargs"]["base"] == "/models/tiny"
