"""The judge's holistic model (dpmv_lib.evaluate.holistic): the committed model is what the labels'
fitting half gives, its scores are sum_k P(label >= k) in [0, 4] and item-independent, a stale
model is refused by the validity check, and bad model files are named."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.bench.datasets import load_benchmark
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import holistic as H
from dpmv_lib.evaluate import u_validity as UV
from dpmv_lib.evaluate.encoders import HashingEncoder, get_encoder
from dpmv_lib.evaluate.rubric import DIMENSIONS, build_rubric
from dpmv_lib.evaluate.rubric_judge import RubricJudge
from dpmv_lib.experiments.profiles import get_profile

LABELS = "data/judge_labels"


@pytest.fixture(scope="module")
def hashing_model():
    return UV.fit_holistic_model(HashingEncoder(), LABELS, "data")


def test_the_committed_model_is_the_fit_of_the_labels_fitting_half():
    committed = H.load(LABELS)
    assert committed is not None
    spec = get_profile("default").encoder                 # the default run's judge is the one fitted
    assert committed.fit_info["encoder_spec"] == spec == H.committed_encoder_spec(LABELS)
    refit = UV.fit_holistic_model(get_encoder(spec), LABELS, "data")
    assert refit.fit_info["labels"] == committed.fit_info["labels"]        # fitted on these label files
    assert refit.fit_info["split_seed"] == UV.SPLIT_SEED
    assert committed.max_difference(refit) <= H.REFIT_TOLERANCE
    assert committed.max_difference(UV.fit_holistic_model(get_encoder(spec), LABELS, "data", seed=1)) > 0.01
    benches = {t: load_benchmark(t, "data") for t in ("pairedmem", "transfer")}
    assert committed.anchors == H.catalogue_anchors(benches)


def test_scores_are_the_cumulative_sum_and_lie_in_0_4(hashing_model):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, len(H.FEATURES))) * 3
    s = hashing_model.score(X)
    assert s.shape == (50, 4) and (s >= 0).all() and (s <= 4).all()
    d = DIMENSIONS.index("correctness")
    want = sum(b.prob(X) for b in hashing_model.dimensions["correctness"])
    np.testing.assert_allclose(s[:, d], want)
    with pytest.raises(ParameterError, match="features given"):
        hashing_model.score(X[:, :3])
    # a row scores the same bytes alone, in any batch and in any order (the judge scores in chunks)
    for i in (0, 17, 49):
        assert hashing_model.score(X[i:i + 1]).tobytes() == s[i:i + 1].tobytes()
    assert hashing_model.score(X[::-1]).tobytes() == s[::-1].tobytes()


def test_fit_learns_a_label_that_follows_one_feature():
    rng = np.random.default_rng(1)
    F = pd.DataFrame(rng.normal(size=(400, len(H.FEATURES))), columns=H.FEATURES)
    grade = np.clip(np.round(F["query_max"] * 1.2 + 2), 0, 4).to_numpy()
    labels = pd.DataFrame({d: grade for d in DIMENSIONS})
    anchors = {"specific": ("a",), "generic": ("b",)}
    fit, test = slice(0, 300), slice(300, 400)
    r = DIMENSIONS.index("relevance")
    m = H.fit(F.iloc[fit], labels.iloc[fit], anchors=anchors)
    assert np.corrcoef(m.score(F.iloc[test].to_numpy())[:, r], grade[test])[0, 1] > 0.9
    shuffled = labels.iloc[fit].sample(frac=1.0, random_state=0).reset_index(drop=True)
    m0 = H.fit(F.iloc[fit].reset_index(drop=True), shuffled, anchors=anchors)
    assert abs(np.corrcoef(m0.score(F.iloc[test].to_numpy())[:, r], grade[test])[0, 1]) < 0.5
    # a boundary with fewer than MIN_CLASS units on one side is a constant rate
    few = labels.iloc[fit].copy()
    few["actionability"] = 0
    few.iloc[:3, few.columns.get_loc("actionability")] = 4
    m1 = H.fit(F.iloc[fit], few, anchors=anchors)
    assert all(b.constant == pytest.approx(3 / 300) for b in m1.dimensions["actionability"])


def test_holistic_scores_do_not_depend_on_the_items(hashing_model):
    judge = RubricJudge(HashingEncoder(), holistic=hashing_model)
    assert judge.id.startswith("rubric-v5[") and hashing_model.sha in judge.id
    bench = load_benchmark("pairedmem", "data")
    pair = bench.pairs[0]
    rm, rp = (build_rubric(pair, side, bench.behaviours, len(pair.turns)) for side in ("M", "M'"))
    answer = "Given your note about money, cook a big pot of lentils. Try 20 minutes of walking."
    jm, jp = judge.judge(rm, [answer] * len(rm.queries)), judge.judge(rp, [answer] * len(rp.queries))
    for d in DIMENSIONS:
        assert jm.scores[d] == pytest.approx(jp.scores[d])
    f = judge.holistic_features([(rm.queries[0], answer)])
    assert jm.scores["relevance"] != 0 and f.shape == (1, len(H.FEATURES))
    empty = judge.judge(rm, [""] * len(rm.queries))
    assert all(empty.scores[d] == 0 for d in DIMENSIONS)


def test_validity_refuses_a_model_fitted_on_another_split(hashing_model):
    ok = UV.validate_u(RubricJudge(HashingEncoder(), holistic=hashing_model), LABELS, "data", spread_seeds=(0, 1))
    assert set(ok.table["dimension"]) == set(DIMENSIONS)
    other = UV.fit_holistic_model(HashingEncoder(), LABELS, "data", seed=1)
    with pytest.raises(ParameterError, match="not the one the labels' fitting half gives"):
        UV.validate_u(RubricJudge(HashingEncoder(), holistic=other), LABELS, "data", spread_seeds=(0,))
    # fitted on other labels: refused, whatever its numbers
    relabelled = H.HolisticModel.from_dict({**hashing_model.to_dict(),
                                            "fit_info": {**hashing_model.fit_info, "labels": "0" * 16}})
    with pytest.raises(ParameterError, match="fitted on labels"):
        UV.validate_u(RubricJudge(HashingEncoder(), holistic=relabelled), LABELS, "data", spread_seeds=(0,))
    # the same numbers under a stated encoder that is not the judge's: applied, not refitted in the check
    tweaked = hashing_model.to_dict()
    tweaked["dimensions"]["relevance"][1]["intercept"] += 0.5
    moved = H.HolisticModel.from_dict({**tweaked, "fit_info": {**hashing_model.fit_info, "encoder": "elsewhere"}})
    with pytest.raises(ParameterError, match="scores differ"):
        UV.validate_u(RubricJudge(HashingEncoder(), holistic=H.HolisticModel.from_dict(tweaked)), LABELS, "data",
                      spread_seeds=(0,))
    assert UV.validate_u(RubricJudge(HashingEncoder(), holistic=moved), LABELS, "data", spread_seeds=(0,)) is not None


def test_bad_model_files_are_named(tmp_path, hashing_model):
    d = tmp_path / "labels"
    shutil.copytree(LABELS, d)
    (d / H.MODEL_FILE).write_text("{not json")
    with pytest.raises(ParameterError, match="not JSON"):
        H.load(d)
    obj = hashing_model.to_dict()
    (d / H.MODEL_FILE).write_text(json.dumps({**obj, "version": 99}))
    with pytest.raises(ParameterError, match="version"):
        H.load(d)
    bad = json.loads(json.dumps(obj))
    bad["dimensions"]["relevance"][1]["coef"] = bad["dimensions"]["relevance"][1]["coef"][:-1]
    (d / H.MODEL_FILE).write_text(json.dumps(bad))
    with pytest.raises(ParameterError, match="do not match"):
        H.load(d)
    (d / H.MODEL_FILE).write_text(hashing_model.dumps())          # fitted without naming its encoder
    with pytest.raises(ParameterError, match="names its encoder"):
        H.committed_encoder_spec(d)
    (d / H.MODEL_FILE).unlink()
    assert H.load(d) is None
    with pytest.raises(ParameterError, match="names its encoder"):
        H.committed_encoder_spec(d)
    with pytest.raises(ParameterError, match="holistic must be"):
        RubricJudge(HashingEncoder(), holistic="yes")
    assert H.HolisticModel.from_dict(obj).dumps() == hashing_model.dumps()


def test_an_older_judges_model_is_refused_but_its_cross_encoders_are_kept(tmp_path):
    """A model file written before FEATURES changed no longer loads, but a refit reads the
    cross-encoders it names (committed_cross_encoded), so ``--no-cross-encoders`` can rewrite it."""
    d = tmp_path / "labels"
    d.mkdir()
    obj = json.loads((Path(LABELS) / H.MODEL_FILE).read_text())
    obj["features"] = [f for f in obj["features"] if f != "third_person"]
    (d / H.MODEL_FILE).write_text(json.dumps(obj))
    with pytest.raises(ParameterError, match="differ from"):
        H.load(d)
    kept = H.committed_cross_encoded(d)
    assert set(kept) == set(UV.CROSS_ENCODED) and kept == H.load(LABELS).cross_encoded
    (d / H.MODEL_FILE).write_text(json.dumps({**obj, "cross_encoded": {"actionability": {"sha256": "x"}}}))
    with pytest.raises(ParameterError, match="malformed cross-encoder entry"):
        H.committed_cross_encoded(d)
    (d / H.MODEL_FILE).unlink()
    assert H.committed_cross_encoded(d) == {}


def test_query_specific_joins_query_and_catalogue_within_one_sentence():
    """query_specific(_margin) is the largest over sentences of cos(sentence, query) times the
    sentence's best cosine to a specific description (minus its best generic one): an on-query
    generic sentence beside an off-query specific one does not add up to an on-query specific one."""
    from dpmv_lib.evaluate.rubric_judge import split_sentences

    enc = HashingEncoder()
    anchors = {"specific": ("gentle low impact exercise during pregnancy", "pay down high interest debt"),
               "generic": ("general exercise advice", "general money advice")}
    q = "what exercise routine would you suggest"
    apart = "An exercise routine would be good. Pay down high interest debt first."
    joined = "A gentle low impact exercise routine during pregnancy. Write it down."
    F = RubricJudge(enc, holistic=None).holistic_features([(q, apart), (q, joined)], anchors)
    col = {c: F[:, H.FEATURES.index(c)] for c in H.QUERY_SPECIFIC}
    A, G, e = enc.encode(list(anchors["specific"])), enc.encode(list(anchors["generic"])), enc.encode([q])[0]
    for i, a in enumerate((apart, joined)):
        S = enc.encode(split_sentences(a))
        sq, sp, gn = S @ e, (S @ A.T).max(1), (S @ G.T).max(1)
        assert col["query_specific"][i] == pytest.approx(float((sq * sp).max()), abs=1e-6)
        assert col["query_specific_margin"][i] == pytest.approx(float((sq * (sp - gn)).max()), abs=1e-6)
    assert col["query_specific"][1] > col["query_specific"][0]


def test_third_person_counts_sentences_narrating_about_someone():
    """third_person counts the sentences that open with a third-person pronoun, bullets included
    (SmolLM2's "They're going to wake up at 6am" under TaskMin); words that merely start with one
    ("Then", "Here", "Health") do not count, and no committed dimension reads it."""
    enc = HashingEncoder()
    anchors = {"specific": ("pay down high interest debt",), "generic": ("general money advice",)}
    q = "what's a realistic routine from morning to evening"
    answers = ["They're going to wake up at 6am. Their lunch is their favourite meal. - She walks for an hour.",
               "Then wake up at 6am. Here is a plan. Health comes first. Try a short walk.",
               "Wake up at 6am. He said to try it. Try a short walk."]
    F = RubricJudge(enc, holistic=None).holistic_features([(q, a) for a in answers], anchors)
    assert F[:, H.FEATURES.index("third_person")].tolist() == [3.0, 0.0, 1.0]
    assert all("third_person" not in cols for cols in H.DIMENSION_FEATURES.values())


def test_the_fit_follows_the_sample_weights():
    rng = np.random.default_rng(2)
    F = pd.DataFrame(rng.normal(size=(400, len(H.FEATURES))), columns=H.FEATURES)
    by_query = np.clip(np.round(F["query_max"] * 1.2 + 2), 0, 4).to_numpy()
    by_words = np.clip(np.round(F["log_words"] * 1.2 + 2), 0, 4).to_numpy()
    first = np.arange(400) < 200          # rows whose label follows query_max; the others log_words
    labels = pd.DataFrame({d: np.where(first, by_query, by_words) for d in DIMENSIONS})
    anchors = {"specific": ("a",), "generic": ("b",)}
    r = DIMENSIONS.index("relevance")
    for heavy, grade in ((first, by_query), (~first, by_words)):
        m = H.fit(F, labels, anchors=anchors, sample_weight=np.where(heavy, 1.0, 1e-3))
        assert np.corrcoef(m.score(F.to_numpy())[:, r], grade)[0, 1] > 0.85
    few = labels.copy()
    few["actionability"] = 0
    few.iloc[:3, few.columns.get_loc("actionability")] = 4
    w = np.ones(400)
    w[:3] = 2.0
    m1 = H.fit(F, few, anchors=anchors, sample_weight=w)
    assert all(b.constant == pytest.approx(6 / 403) for b in m1.dimensions["actionability"])
    for bad in (np.ones(3), np.zeros(400), np.full(400, np.nan)):
        with pytest.raises(ParameterError, match="sample weights"):
            H.fit(F, labels, anchors=anchors, sample_weight=bad)


def test_content_projection_is_scikit_learns_pca_of_query_and_response():
    """The content features: PCA (scikit-learn) of [q * r, r], r the unit mean of the response's
    sentence embeddings; projected one row at a time, for the encoder the model was fitted with."""
    from sklearn.decomposition import PCA

    from dpmv_lib.evaluate.rubric_judge import split_sentences

    rng = np.random.default_rng(3)
    V = rng.normal(size=(200, 16)) @ rng.normal(size=(16, 16))
    X = np.hstack([V, V[:, :8] ** 2, rng.normal(size=(200, 56))])
    P = H.ContentProjection.fit(X)
    want = PCA(H.CONTENT_COMPONENTS, svd_solver="full").fit(X)
    assert P.components.shape == (H.CONTENT_COMPONENTS, 80)
    np.testing.assert_allclose(P.components, want.components_)
    np.testing.assert_allclose(P.mean, want.mean_)
    W = rng.normal(size=(5, 80))
    np.testing.assert_allclose(np.stack([P.project(w) for w in W]), (W - P.mean) @ P.components.T, atol=1e-10)
    assert P.max_difference(H.ContentProjection(**{k: np.asarray(v) for k, v in P.to_dict().items()})) == 0.0
    with pytest.raises(ParameterError, match="vectors of length 80"):
        P.project(np.zeros(24))
    with pytest.raises(ParameterError, match="more than"):
        H.ContentProjection.fit(V[:10])
    # the judge's content vector of a turn
    enc = HashingEncoder()
    q, a = "what should I cook tonight", "Cook a big pot of lentils. Add rice on the side."
    S, e = enc.encode(split_sentences(a)), enc.encode([q])[0]
    r = S.mean(0) / np.linalg.norm(S.mean(0))
    np.testing.assert_allclose(H.content_vector(e, S), np.concatenate([e * r, r]), atol=1e-7)
    assert not H.content_vector(e, S[:0]).any()


def test_the_judge_projects_the_content_features_of_its_model(hashing_model):
    """A model reading the content features holds its projection; the judge's features are the
    projection of each turn's content vector, scored alone or in a batch, and a model that reads them
    without a projection is refused."""
    from dpmv_lib.evaluate.rubric_judge import split_sentences

    assert hashing_model.reads_content == any(set(c) & set(H.CONTENT) for c in H.DIMENSION_FEATURES.values())
    assert (hashing_model.content is not None) == hashing_model.reads_content
    units, F, V, anchors = UV.holistic_inputs(HashingEncoder(), LABELS, "data")
    reads = {"relevance": ("query_max", *H.CONTENT)}
    model = H.fit(pd.DataFrame(F[:300], columns=H.FEATURES), units.loc[:299, list(DIMENSIONS)],
                  anchors=anchors, dimension_features=reads, vectors=V[:300])
    P = model.content
    assert P.max_difference(H.ContentProjection.fit(V[:300])) == 0.0
    with pytest.raises(ParameterError, match="content vectors"):
        H.fit(pd.DataFrame(F[:300], columns=H.FEATURES), units.loc[:299, list(DIMENSIONS)],
              anchors=anchors, dimension_features=reads)
    assert model.reads_content and H.HolisticModel.from_dict(json.loads(model.dumps())).dumps() == model.dumps()
    judge = RubricJudge(HashingEncoder(), holistic=model)
    pairs = list(zip(units["query"][:4], units["response"][:4]))
    f = judge.holistic_features(pairs)
    enc = HashingEncoder()
    for i, (q, a) in enumerate(pairs):
        v = H.content_vector(enc.encode([q])[0], enc.encode(split_sentences(a)))
        np.testing.assert_allclose(f[i, [H.FEATURES.index(c) for c in H.CONTENT]], P.project(v), atol=1e-6)
        assert judge.holistic_features([pairs[i]]).tobytes() == f[i:i + 1].tobytes()
    assert np.isnan(RubricJudge(enc, holistic=None).holistic_features(pairs, anchors)[:, -1]).all()
    with pytest.raises(ParameterError, match="no content projection"):
        RubricJudge(enc, holistic=dataclasses.replace(model, content=None))


def test_the_refit_command_rewrites_an_older_judges_model(tmp_path, monkeypatch, capsys):
    """``python -m dpmv_lib.evaluate.u_validity`` on a model file whose features are an older
    judge's: ``--check`` says it does not load (exit 1) instead of crashing, and a refit with
    ``--no-cross-encoders`` writes a model that loads and keeps the committed cross-encoders."""
    committed = H.load(LABELS)
    d = tmp_path / "judge_labels"
    d.mkdir()
    obj = json.loads((Path(LABELS) / H.MODEL_FILE).read_text())
    obj["features"] = [f for f in obj["features"] if f != "third_person"]
    (d / H.MODEL_FILE).write_text(json.dumps(obj))
    monkeypatch.setattr(UV, "fit_holistic_model",
                        lambda *a, **k: dataclasses.replace(committed, cross_encoded={}, directory=None))
    assert UV.main(["--data", str(tmp_path), "--check", "--no-cross-encoders"]) == 1
    assert "does not load against this code" in capsys.readouterr().out
    assert UV.main(["--data", str(tmp_path), "--no-cross-encoders"]) == 0
    assert H.load(d).cross_encoded == committed.cross_encoded and H.load(d).features == H.FEATURES
