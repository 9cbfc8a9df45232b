"""The sentence-bag relevance scorer (dpmv_lib.evaluate.sentence_bag): it learns a grade carried by
one sentence's match to the query wherever that sentence sits, pools by a soft maximum (a filler
sentence barely moves the score), fits without a random draw, saves and loads to the same scores,
and names bad input; and the study's blends (dpmv_lib.experiments.judge_features) fit it on
training folds only."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import sentence_bag as SB
from dpmv_lib.evaluate.holistic import blend_scores
from dpmv_lib.evaluate.rubric import DIMENSIONS
from dpmv_lib.experiments import judge_features as JF

pytest.importorskip("torch")
DIM = 16


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


def _synthetic(n=240, seed=0):
    """Bags of 1-4 sentences: a relevant response (grade 3-4) holds one sentence close to its query,
    anywhere among filler sentences; an irrelevant one (grade 0-1) holds filler only."""
    rng = np.random.default_rng(seed)
    bags, y = [], []
    for i in range(n):
        q = _unit(rng.normal(size=DIM))
        filler = [_unit(rng.normal(size=DIM)) for _ in range(rng.integers(1, 4))]
        relevant = i % 2 == 0
        if relevant:
            filler.insert(int(rng.integers(0, len(filler) + 1)), _unit(q + 0.3 * rng.normal(size=DIM)))
        bags.append(SB.bag_rows(q, np.stack(filler)))
        y.append(int(rng.integers(3, 5)) if relevant else int(rng.integers(0, 2)))
    return bags, np.array(y, float)


def test_bag_rows_are_query_products_sentences_and_cosines():
    q, S = _unit([1, 2, 0, 0]), np.stack([_unit([1, 0, 0, 0]), _unit([0, 0, 1, 1])])
    rows = SB.bag_rows(q, S)
    assert rows.shape == (2, 9)
    assert np.allclose(rows[:, :4], S * q) and np.allclose(rows[:, 4:8], S) and np.allclose(rows[:, 8], S @ q)
    assert np.array_equal(SB.bag_rows(q, np.zeros((0, 4))), np.zeros((1, 9)))


def test_it_learns_a_grade_carried_by_one_sentence_wherever_it_sits():
    bags, y = _synthetic()
    model = SB.fit(bags[:160], y[:160])
    s = model.score_bags(bags[160:])
    assert np.all((s >= 0) & (s <= 4))
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(y[160:] >= 2, s) > 0.95


def test_the_soft_maximum_lets_a_filler_sentence_barely_move_the_score():
    bags, y = _synthetic()
    model = SB.fit(bags, y)
    rng = np.random.default_rng(1)
    q = _unit(rng.normal(size=DIM))
    answer = _unit(q + 0.1 * rng.normal(size=DIM))
    fillers = np.stack([_unit(rng.normal(size=DIM)) for _ in range(3)])
    alone, padded, filler = model.score_bags([SB.bag_rows(q, answer[None]),
                                              SB.bag_rows(q, np.vstack([answer, fillers])), SB.bag_rows(q, fillers)])
    assert alone - filler > 2.0 and abs(padded - alone) < 0.25 * (alone - filler)


def test_the_fit_draws_nothing_and_saves_to_the_same_scores():
    bags, y = _synthetic(80)
    a, b = SB.fit(bags, y, fit_info={"labels": "x"}), SB.fit(bags, y, fit_info={"labels": "x"})
    assert a == b and a.fit_info["units"] == 80 and a.fit_info["config"]["temperature"] == 0.5
    loaded = SB.SentenceBag.from_dict(a.to_dict())
    assert loaded == a and np.array_equal(loaded.score_bags(bags), a.score_bags(bags))
    # the design weights count: a unit weighted 0 is not fitted
    w = np.ones(80)
    w[::2] = 0.0
    assert SB.fit(bags, y, w) != a


@pytest.mark.parametrize("kwargs, match", [({"temperature": 0.0}, "temperature"), ({"l2": -1.0}, "l2"),
                                           ({"epochs": 0}, "epochs"),
                                           ({"learning_rate": float("nan")}, "learning_rate")])
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        SB.SentenceBagConfig(**kwargs)


def test_bad_training_data_and_files_are_named():
    bags, y = _synthetic(20)
    with pytest.raises(ParameterError, match="20 bags, 19 labels"):
        SB.fit(bags, y[:19])
    with pytest.raises(ParameterError, match="grades in 0-4"):
        SB.fit(bags, np.r_[y[:19], 5.0])
    with pytest.raises(ParameterError, match="not all 0"):
        SB.fit(bags, y, np.zeros(20))
    with pytest.raises(ParameterError, match="one width"):
        SB.fit([*bags[:19], np.zeros((2, 3))], y)
    model = SB.fit(bags, y, config=SB.SentenceBagConfig(epochs=5))
    with pytest.raises(ParameterError, match="columns"):
        model.score_bags([np.zeros((1, 3))])
    with pytest.raises(ParameterError, match="format"):
        SB.SentenceBag.from_dict({**model.to_dict(), "format": "other"})
    with pytest.raises(ParameterError, match="thresholds"):
        SB.SentenceBag.from_dict({**model.to_dict(), "thresholds": [0.0]})


def test_the_judge_splits_pairs_into_sentences_and_embeds_each_text_once():
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.rubric_judge import RubricJudge

    enc = HashingEncoder()
    seen: list[list[str]] = []

    class Counting(HashingEncoder):
        def encode(self, texts):
            seen.append(list(texts))
            return super().encode(texts)

    bags = RubricJudge(Counting()).holistic_features_vectors_and_bags(
        [("How?", "Do this. Then that."), ("How?", "Then that."), ("Why?", "")],
        {"specific": ("a plan",), "generic": ("advice",)})[2]
    assert len(seen) == 1 and sorted(seen[0]) == sorted({"a plan", "advice", "How?", "Do this.", "Then that.", "Why?"})
    bags = [bags[0], bags[2]]
    width = 2 * enc.encode(["x"]).shape[1] + 1
    assert [b.shape for b in bags] == [(2, width), (1, width)]
    q, s = enc.encode(["How?", "Then that."])
    assert np.allclose(bags[0][1], SB.bag_rows(q, s[None])[0]) and not bags[1].any()


def test_mix_scores_is_the_judge_blend_where_the_bag_weighs_nothing():
    rng = np.random.default_rng(0)
    cross, feat, bag = rng.normal(2, 2, 50), rng.uniform(0, 4, 50), rng.uniform(0, 4, 50)
    assert np.allclose(JF.mix_scores([cross, feat, bag], (0.25, 0.75, 0.0)), blend_scores(cross, feat, 0.75))
    assert np.allclose(JF.mix_scores([cross, feat, bag], (0.0, 0.0, 1.0)), bag)
    with pytest.raises(ParameterError, match="summing to 1"):
        JF.mix_scores([cross, feat, bag], (0.5, 0.0, 0.0))
    assert len(JF.BAG_BLENDS) == 10 and all(b[2] > 0 and np.isclose(sum(b), 1) for b in JF.BAG_BLENDS)


def _study_inputs(monkeypatch):
    """200 synthetic units (150 in the fitting half), zero features, and the row counts every bag
    fit sees."""
    bags, y = _synthetic(200)
    n = len(y)
    units = pd.DataFrame({"query": [f"q{i}" for i in range(n)], "response": [f"r{i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          "design_weight": 1.0, **{d: y for d in DIMENSIONS}})
    seen: list[int] = []
    real_fit = SB.fit

    def spy(b, labels, weights=None, config=None, fit_info=None):
        seen.append(len(b))
        return real_fit(b, labels, weights, config, fit_info)

    monkeypatch.setattr(SB, "fit", spy)
    return bags, y, units, np.arange(n) < 150, np.zeros((n, len(JF.FEATURES))), seen


def test_the_study_fits_the_bag_on_training_folds_only(monkeypatch):
    """Each fold's bag is fitted on its training part alone (120 of the 150 fitting units) and
    grades the test part by what it learnt; a cross-encoder that scores every pair alike grades
    nothing (kappa 0)."""
    bags, y, units, mask, F, seen = _study_inputs(monkeypatch)
    from sklearn.model_selection import KFold

    folds = [(tr, te, np.zeros(150)) for tr, te in KFold(5).split(np.arange(150))]
    out = JF.bag_blend_kappas(units, mask, bags, F, None, folds, [(0.0, 0.0, 1.0), (1.0, 0.0, 0.0)])
    assert seen == [120] * 5
    assert out[(0.0, 0.0, 1.0)]["all"] > 0.6 and abs(out[(1.0, 0.0, 0.0)]["all"]) < 1e-9


def test_the_learning_curve_fits_on_a_share_of_each_training_part_and_ends_at_the_study(monkeypatch):
    """At a share of 0.5 each fold's bag sees half its training part's distinct units; at 1.0 the curve
    is the sentence-bag study's kappa on the same folds."""
    from sklearn.model_selection import GroupKFold

    bags, y, units, mask, F, seen = _study_inputs(monkeypatch)
    bag_only = (0.0, 0.0, 1.0)
    curve = JF.learning_curve(units, mask, bags, F, None, (0.5, 1.0), bag_only, shuffles=(0,))
    assert seen == [60] * 5 + [120] * 5
    assert curve["training units"].tolist() == [60.0, 120.0]
    groups = np.arange(150)
    folds = [(tr, te, np.zeros(150)) for tr, te in
             GroupKFold(5, shuffle=True, random_state=0).split(groups, y[:150], groups)]
    study = JF.bag_blend_kappas(units, mask, bags, F, None, folds, [bag_only])[bag_only]
    assert curve.iloc[1]["kappa all"] == pytest.approx(study["all"]) and study["all"] > 0.6
    assert curve.iloc[1]["kappa smollm2"] == pytest.approx(study["smollm2"])
    with pytest.raises(ParameterError, match="fractions"):
        JF.learning_curve(units, mask, bags, F, None, (0.0, 1.0))


# ---- the judge's sentence-bagged relevance ---------------------------------------------------------------
LABELS = "data/judge_labels"


@pytest.fixture(scope="module")
def bagged():
    """The hashing encoder's holistic model: without a sentence bag, and with relevance blended 0.5 /
    0.5 with one (the committed blend)."""
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import HashingEncoder

    plain = UV.fit_holistic_model(HashingEncoder(), LABELS, "data", sentence_bagged={})
    return plain, UV.fit_holistic_model(HashingEncoder(), LABELS, "data", sentence_bagged={"relevance": 0.5})


def test_a_sentence_bagged_model_saves_loads_and_refuses_what_it_cannot_be(bagged):
    from dpmv_lib.evaluate import holistic as H

    plain, model = bagged
    assert not plain.sentence_bagged and plain.dimensions == model.dimensions
    assert H.HolisticModel.from_dict(model.to_dict()) == model and model.sha != plain.sha
    assert model.max_difference(plain) == float("inf") and model.max_difference(model) == 0.0
    # a bag's difference counts beside a content projection's (neither masks the other)
    import dataclasses

    rng = np.random.default_rng(0)
    content = H.ContentProjection(rng.normal(size=8), rng.normal(size=(H.CONTENT_COMPONENTS, 8)))
    bag = model.sentence_bagged["relevance"].bag
    moved = dataclasses.replace(bag, weights=(bag.weights[0] + 1.0, *bag.weights[1:]))
    a = dataclasses.replace(model, content=content)
    b = dataclasses.replace(a, sentence_bagged={"relevance": H.SentenceBagged(moved, 0.5)})
    assert a.max_difference(b) == pytest.approx(1.0)
    ref = model.sentence_bagged["relevance"]
    assert ref.feature_weight == 0.5 and ref.bag.fit_info["split_seed"] == 0
    with pytest.raises(ParameterError, match="feature_weight"):
        H.SentenceBagged(ref.bag, 1.0)
    with pytest.raises(ParameterError, match="not both"):
        dataclasses.replace(model, cross_encoded={"relevance": H.CrossEncoded("x", "0", {})})
    with pytest.raises(ParameterError, match="not all of"):
        dataclasses.replace(model, sentence_bagged={"tone": ref})


def test_the_judge_blends_the_bag_with_the_boundaries_and_splits_refit_both(bagged):
    from dpmv_lib.bench.datasets import load_benchmark
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.judge_agreement import judge_units
    from dpmv_lib.evaluate.rubric_judge import RubricJudge

    plain, model = bagged
    units = UV.label_pool().head(60).reset_index(drop=True)
    units.loc[0, "response"] = ""
    benches = {t: load_benchmark(t, "data") for t in sorted(set(units["track"]))}
    a, b = (judge_units(units, benches, RubricJudge(HashingEncoder(), holistic=m)) for m in (model, plain))
    pairs = list(zip(units["query"].astype(str), units["response"].astype(str)))
    bags = RubricJudge(HashingEncoder(), holistic=model).holistic_features_vectors_and_bags(pairs)[2]
    bag = model.sentence_bagged["relevance"].bag.score_bags(bags)
    want = 0.5 * bag + 0.5 * b["judge_relevance"].to_numpy()
    np.testing.assert_allclose(a.loc[1:, "judge_relevance"], want[1:], atol=1e-9)
    assert a.loc[0, "judge_relevance"] == 0.0
    for d in ("correctness", "actionability", "personalisation"):
        np.testing.assert_array_equal(a[f"judge_{d}"], b[f"judge_{d}"])
    # a split's rescoring refits the bag on that split's fitting half
    judge = RubricJudge(HashingEncoder(), holistic=model)
    pool = UV.label_pool()
    judged = judge_units(pool, {t: load_benchmark(t, "data") for t in sorted(set(pool["track"]))}, judge)
    rescore = UV._holistic_rescorer(judge, pool, judged, LABELS)
    same = rescore(UV.split_halves(pool, UV.SPLIT_SEED))
    np.testing.assert_allclose(same["judge_relevance"], judged["judge_relevance"], atol=1e-6)
    other = rescore(UV.split_halves(pool, 1))
    assert np.max(np.abs(other["judge_relevance"] - judged["judge_relevance"])) > 0.01


def test_validity_refuses_a_bag_fitted_on_other_labels(bagged):
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.rubric_judge import RubricJudge

    _, model = bagged
    ref = model.sentence_bagged["relevance"]
    relabelled = dataclasses.replace(ref.bag, fit_info={**ref.bag.fit_info, "labels": "0" * 16})
    stale = dataclasses.replace(ref, bag=relabelled)
    with pytest.raises(ParameterError, match="relevance sentence bag was fitted on labels 0000"):
        UV.validate_u(RubricJudge(HashingEncoder(), holistic=dataclasses.replace(model, sentence_bagged={
            "relevance": stale})), LABELS, "data", spread_seeds=(0,))


def test_the_committed_judge_bags_what_the_study_adopted():
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate import u_validity as UV

    model = H.load(LABELS)
    assert {d: r.feature_weight for d, r in model.sentence_bagged.items()} == dict(UV.SENTENCE_BAGGED)
    for ref in model.sentence_bagged.values():
        assert ref.bag.fit_info["labels"] == model.fit_info["labels"]
        assert ref.bag.fit_info["split_seed"] == UV.SPLIT_SEED
        assert ref.bag.fit_info["config"] == dataclasses.asdict(SB.SentenceBagConfig())
