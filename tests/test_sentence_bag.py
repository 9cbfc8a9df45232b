"""The sentence-bag relevance scorer (dpmv_lib.evaluate.sentence_bag): it learns a grade carried by
one sentence's match to the query wherever that sentence sits, pools by a soft maximum (a filler
sentence barely moves the score), fits without a random draw, saves and loads to the same scores,
and names bad input; and the study's blends (dpmv_lib.experiments.judge_features) fit it on
training folds only."""
from __future__ import annotations

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


class _Encoder:
    """Unit vectors from a hash of the text: a stand-in for the judge's encoder."""

    id = "hash"

    def encode(self, texts):
        return np.stack([_unit(np.random.default_rng(abs(hash(t)) % 2**32).normal(size=DIM)) for t in texts])


def test_pairs_are_split_into_sentences_and_embedded_once():
    enc = _Encoder()
    bags = SB.encode_bags(enc, [("How?", "Do this. Then that."), ("Why?", "")])
    assert [b.shape for b in bags] == [(2, 2 * DIM + 1), (1, 2 * DIM + 1)]
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


def test_the_study_fits_the_bag_on_training_folds_only(monkeypatch):
    """Each fold's bag is fitted on its training part alone (120 of the 150 fitting units) and
    grades the test part by what it learnt; a cross-encoder that scores every pair alike grades
    nothing (kappa 0)."""
    bags, y = _synthetic(200)
    n = len(y)
    units = pd.DataFrame({"query": [f"q{i}" for i in range(n)], "response": [f"r{i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          "design_weight": 1.0, **{d: y for d in DIMENSIONS}})
    mask = np.arange(n) < 150
    F = np.zeros((n, len(JF.FEATURES)))
    seen: list[int] = []
    real_fit = SB.fit

    def spy(b, labels, weights=None, config=None, fit_info=None):
        seen.append(len(b))
        return real_fit(b, labels, weights, config, fit_info)

    monkeypatch.setattr(SB, "fit", spy)
    from sklearn.model_selection import KFold

    folds = [(tr, te, np.zeros(150)) for tr, te in KFold(5).split(np.arange(150))]
    out = JF.bag_blend_kappas(units, mask, bags, F, None, folds, [(0.0, 0.0, 1.0), (1.0, 0.0, 0.0)])
    assert seen == [120] * 5
    assert out[(0.0, 0.0, 1.0)]["all"] > 0.6 and abs(out[(1.0, 0.0, 0.0)]["all"]) < 1e-9
