"""The query-response cross-encoder (dpmv_lib.evaluate.cross_encoder): it reads the query and the
response together (a label carried by their match, which no response-only scorer can fit, is
learned), training is seeded, bad input is refused; and the study's kappa with it
(dpmv_lib.experiments.judge_features.cross_encoder_kappa) fine-tunes on training folds only."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pandas as pd
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.cross_encoder import CrossEncoder, CrossEncoderConfig
from dpmv_lib.evaluate.rubric import DIMENSIONS
from dpmv_lib.experiments import judge_features as JF

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _minilm():
    from dpmv_lib.evaluate.encoders import minilm_path
    try:
        return minilm_path()
    except ParameterError:
        pytest.skip("the offline MiniLM package is not installed")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A small random BERT (2 layers, width 32) with MiniLM's tokenizer: a local stand-in model."""
    base = _minilm()
    out = tmp_path_factory.mktemp("tiny-bert")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (base / name).exists():
            shutil.copy(base / name, out / name)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=512)
    import torch
    torch.manual_seed(0)
    transformers.BertModel(cfg).save_pretrained(out)
    return out


TOPICS = {
    "sleep": ("How can I sleep better at night?",
              ("Go to bed at the same time every night and keep the bedroom dark and cool.",
               "Stop using screens an hour before bed and avoid coffee after noon.")),
    "cooking": ("What should I cook for dinner this week?",
                ("Roast a tray of vegetables with chicken thighs and make a big pot of lentil soup.",
                 "Plan three simple pasta dishes and a stir-fry with rice.")),
    "running": ("How do I start running?",
                ("Begin with run-walk intervals three times a week and buy proper running shoes.",
                 "Run slowly enough to talk and add five minutes each week.")),
    "travel": ("Any tips for packing for a flight?",
               ("Roll your clothes, keep liquids in a clear bag and put a charger in your carry-on.",
                "Check the airline's baggage limits and weigh your suitcase before leaving.")),
}


def test_it_learns_a_label_carried_by_the_match_of_query_and_response():
    """Every response appears with label 4 (its own topic's query) and label 0 (the others): a scorer
    that reads the response alone gives both the same score; the cross-encoder ranks the right query
    first for every response."""
    q, r, y = [], [], []
    for topic, (_, answers) in TOPICS.items():
        for a in answers:
            for other, (query, _) in TOPICS.items():
                q.append(query), r.append(a), y.append(4.0 if other == topic else 0.0)
    ce = CrossEncoder.fit(q, r, y, config=CrossEncoderConfig(epochs=8, batch_size=8, learning_rate=2e-4))
    s = ce.predict(q, r).reshape(len(TOPICS) * 2, len(TOPICS))
    right = np.repeat(np.arange(len(TOPICS)), 2)
    assert (s.argmax(axis=1) == right).all(), s.round(2)
    wrong = np.ones_like(s, bool)
    wrong[np.arange(len(s)), right] = False
    assert s[~wrong].min() > s[wrong].max() - 1.0 and s[~wrong].mean() - s[wrong].mean() > 2.0


def test_training_is_seeded(tiny):
    q = ["a question", "another question", "a third one"] * 4
    r = [f"answer number {i}" for i in range(12)]
    y = np.arange(12) % 5
    cfg = CrossEncoderConfig(epochs=2, batch_size=4, learning_rate=1e-3)
    a = CrossEncoder.fit(q, r, y, config=cfg, base=tiny).predict(q, r)
    b = CrossEncoder.fit(q, r, y, config=cfg, base=tiny).predict(q, r)
    c = CrossEncoder.fit(q, r, y, config=CrossEncoderConfig(epochs=2, batch_size=4, learning_rate=1e-3, seed=1),
                         base=tiny).predict(q, r)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-6
    # an empty response scores 0, as every holistic dimension of the judge does
    assert CrossEncoder.fit(q, r, y, config=cfg, base=tiny).predict(["q"], ["  "])[0] == 0.0


@pytest.mark.parametrize("kwargs, match", [
    ({"epochs": 0}, "epochs"), ({"batch_size": True}, "batch_size"), ({"learning_rate": 0.0}, "learning_rate"),
    ({"weight_decay": -1.0}, "weight_decay"), ({"max_length": 2.5}, "max_length")])
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ParameterError, match=match):
        CrossEncoderConfig(**kwargs)


def test_bad_training_data_is_named(tiny, tmp_path):
    with pytest.raises(ParameterError, match="2 queries but 1 responses"):
        CrossEncoder.fit(["a", "b"], ["x"], [1, 2], base=tiny)
    with pytest.raises(ParameterError, match="not one string"):
        CrossEncoder.fit("a", ["x"], [1], base=tiny)
    with pytest.raises(ParameterError, match=r"grades in \[0, 4\]"):
        CrossEncoder.fit(["a"], ["x"], [5], base=tiny)
    with pytest.raises(ParameterError, match="not all 0"):
        CrossEncoder.fit(["a"], ["x"], [1], [0.0], base=tiny)
    with pytest.raises(ParameterError, match="labels of shape"):
        CrossEncoder.fit(["a", "b"], ["x", "y"], [1], base=tiny)
    with pytest.raises(ParameterError, match="at least one"):
        CrossEncoder.fit([], [], [], base=tiny)
    with pytest.raises(ParameterError, match="no model at"):
        CrossEncoder.fit(["a"], ["x"], [1], base=tmp_path)


class _Memo:
    """A stand-in cross-encoder that scores the pairs it was trained on by their label and every
    other pair 0, and records what it was given."""

    trained: list[set] = []

    def __init__(self, seen):
        self.seen = seen

    @classmethod
    def fit(cls, queries, responses, labels, weights=None, config=None, *, base=None, log=None):
        seen = dict(zip(zip(queries, responses), labels))
        cls.trained.append(set(seen))
        return cls(seen)

    def predict(self, queries, responses):
        return np.array([self.seen.get(k, 0.0) for k in zip(queries, responses)], float)


def test_the_study_fine_tunes_on_training_folds_only(monkeypatch):
    from dpmv_lib.evaluate import cross_encoder

    rng = np.random.default_rng(0)
    n = 150
    units = pd.DataFrame({"query": [f"q{i % 30}" for i in range(n)], "response": [f"answer {i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          **{d: rng.integers(0, 5, n) for d in DIMENSIONS}})
    mask = np.arange(n) < 100
    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Memo)
    out = JF.cross_encoder_kappa(units, mask, "relevance", folds=5)
    assert len(_Memo.trained) == 5
    fitting = set(zip(units["query"][mask], units["response"][mask]))
    held_out = set(zip(units["query"][~mask], units["response"][~mask]))
    assert all(t <= fitting and not t & held_out for t in _Memo.trained)
    # each fitting unit is left out of exactly one training part, so a memorising scorer knows
    # nothing of the units it grades: its kappa is that of a constant score
    assert sum(len(fitting - t) for t in _Memo.trained) == len(fitting)
    assert abs(out["all"]) < 1e-9 and set(out) == {"all", "smollm2", "surrogate"}


def test_degradation_share_counts_strictly_lower_variants():
    records = [{"query": "q", "original": "long original answer",
                "variants": {"off_topic": "short", "other_query": "much longer answer than it"}},
               {"query": "q", "original": "abc", "variants": {"off_topic": "abcd"}}]

    class Length:
        def predict(self, queries, responses):
            return np.array([len(a) for a in responses], float)
    out = JF.cross_encoder_degradation(Length(), "relevance", records)
    assert out == {"off_topic": 0.5, "other_query": 0.0}
    assert JF.cross_encoder_degradation(Length(), "actionability", records) == {}


def test_other_query_negatives_pair_a_response_with_another_query():
    from dpmv_lib.evaluate.cross_encoder import other_query_negatives

    q = ["q1", "q1", "q2", "q3", "q3", "q4"]
    r = [f"a{i}" for i in range(6)]
    nq, nr = other_query_negatives(q, r, 0.5, seed=1)
    assert len(nq) == 3 and len(set(nr)) == 3
    assert all(a != q[r.index(b)] for a, b in zip(nq, nr))
    assert other_query_negatives(q, r, 0.5, seed=1) == (nq, nr)
    assert other_query_negatives(["q"] * 3, ["a", "b", "c"], 1.0) == ([], [])   # no other query: none
    with pytest.raises(ParameterError, match="negative share"):
        other_query_negatives(q, r, -0.1)


def test_negatives_are_added_for_relevance_only(monkeypatch):
    from dpmv_lib.evaluate import cross_encoder

    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Memo)
    q = [f"q{i % 5}" for i in range(20)]
    r = [f"a{i}" for i in range(20)]
    model = JF.fit_cross_encoder(q, r, np.full(20, 3.0), np.ones(20), "relevance", 0.5)
    assert len(_Memo.trained[-1]) == 30
    assert sorted(set(model.seen.values())) == [0.0, 3.0]
    JF.fit_cross_encoder(q, r, np.full(20, 3.0), np.ones(20), "relevance", 0.0)
    assert len(_Memo.trained[-1]) == 20
    with pytest.raises(ParameterError, match="relevance labels"):
        JF.fit_cross_encoder(q, r, np.full(20, 3.0), np.ones(20), "actionability", 0.5)


def test_the_held_out_figure_fine_tunes_on_the_fitting_half_only(monkeypatch):
    from dpmv_lib.evaluate import cross_encoder

    rng = np.random.default_rng(1)
    n = 120
    units = pd.DataFrame({"query": [f"q{i % 30}" for i in range(n)], "response": [f"answer {i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          **{d: rng.integers(0, 5, n) for d in DIMENSIONS}})
    mask = np.arange(n) % 2 == 0
    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Memo)
    out = JF.cross_encoder_heldout_kappa(units, mask, "actionability")
    assert _Memo.trained == [set(zip(units["query"][mask], units["response"][mask]))]
    # the memorising scorer knows nothing of the held-out units: a constant score's kappa
    assert abs(out["all"]) < 1e-9 and set(out) == {"all", "smollm2", "surrogate"}


def test_held_out_figures_only_for_adopted_candidates(monkeypatch):
    from dpmv_lib.evaluate import cross_encoder

    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Memo)
    table = pd.DataFrame({"dimension": ["relevance", "relevance", "actionability"],
                          "feature set": ["committed", "cross-encoder", "cross-encoder"], "adopt": ["-", "no", "yes"]})
    held = JF.adopted_cross_encoders_heldout(JF.FeatureStudy(table, "enc", 1))
    assert list(held["dimension"]) == ["actionability"] and len(_Memo.trained) == 1
    none = JF.adopted_cross_encoders_heldout(JF.FeatureStudy(table.assign(adopt="no"), "enc", 1))
    assert none.empty and len(_Memo.trained) == 1


# ---- the judge's cross-encoded dimensions -----------------------------------------------------------
QS = ["How can I sleep better?", "What should I cook tonight?", "How do I start running?"] * 3
RS = ["Go to bed at ten and keep the room dark.", "Roast vegetables with rice.", "Run slowly three times a week.",
      "Keep a notebook by the bed.", "Make a lentil soup with garlic and cumin, then freeze half of it.",
      "Buy shoes.", "Try a warm shower an hour before bed and put the phone in another room.",
      "Cook pasta.", "Walk first, then add one minute of running each day for two weeks."]


@pytest.fixture(scope="module")
def tiny_ce(tiny):
    return CrossEncoder.fit(QS, RS, np.arange(len(QS)) % 5, config=CrossEncoderConfig(epochs=2, batch_size=4,
                                                                                        learning_rate=1e-3), base=tiny)


def test_a_pair_scores_the_same_bytes_alone_and_in_any_batch(tiny_ce):
    s = tiny_ce.predict(QS, RS)
    for size in (1, 2, 4):
        part = np.concatenate([tiny_ce.predict(QS[i:i + size], RS[i:i + size]) for i in range(0, len(QS), size)])
        np.testing.assert_array_equal(part, s)
    np.testing.assert_array_equal(tiny_ce.predict(QS[::-1], RS[::-1]), s[::-1])


def test_saved_weights_load_to_the_same_scores(tiny_ce, tmp_path):
    import hashlib

    sha = tiny_ce.save(tmp_path / "ce.safetensors")
    assert sha == hashlib.sha256((tmp_path / "ce.safetensors").read_bytes()).hexdigest()
    back = CrossEncoder.load(tmp_path / "ce.safetensors")       # architecture from the file, MiniLM's tokenizer
    assert back.config == tiny_ce.config
    a, b = tiny_ce.predict(QS, RS), back.predict(QS, RS)
    assert np.abs(a - b).max() < 1e-2 and np.abs(a - b).max() > 0     # float16 storage rounds the weights
    saved, loaded = tiny_ce.model.state_dict(), back.model.state_dict()
    assert set(saved) == set(loaded) and all(                           # the float16 weights come back exactly
        (saved[k].half() == loaded[k].half()).all() for k in saved)
    bf = CrossEncoder.load(tmp_path / "ce.safetensors", precision="bf16").predict(QS, RS)
    assert np.abs(bf - b).max() < 0.1


def test_the_same_weights_save_to_the_same_bytes_in_any_process(tiny_ce, tmp_path):
    """safetensors writes its header's keys in an order that changes between processes; the saved
    file sorts them, so a refit with the same weights keeps its sha256."""
    import subprocess
    import sys

    first = tiny_ce.save(tmp_path / "a.safetensors")
    assert tiny_ce.save(tmp_path / "b.safetensors") == first
    code = ("import sys; from dpmv_lib.evaluate.cross_encoder import CrossEncoder; "
            "print(CrossEncoder.load(sys.argv[1], tokenizer=sys.argv[2]).save(sys.argv[3]))")
    tok = tiny_ce.tokenizer.name_or_path
    shas = {subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.safetensors"), tok,
                            str(tmp_path / f"c{i}.safetensors")], capture_output=True, text=True,
                           check=True).stdout.split()[-1] for i in range(3)}
    assert shas == {first}


def test_load_refuses_what_save_did_not_write(tiny_ce, tmp_path):
    from safetensors.torch import save_file
    import torch

    with pytest.raises(ParameterError, match="no cross-encoder weights"):
        CrossEncoder.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ParameterError, match="not a saved cross-encoder"):
        CrossEncoder.load(tmp_path / "junk.safetensors")
    save_file({"w": torch.zeros(2)}, str(tmp_path / "bare.safetensors"))
    with pytest.raises(ParameterError, match="not a saved cross-encoder"):
        CrossEncoder.load(tmp_path / "bare.safetensors")
    tiny_ce.save(tmp_path / "ce.safetensors")
    with pytest.raises(ParameterError, match="precision"):
        CrossEncoder.load(tmp_path / "ce.safetensors", precision="int8")


def test_pair_scores_are_kept_on_disk(tiny_ce, tmp_path):
    from dpmv_lib.evaluate.cross_encoder import PairScores, pair_text
    from dpmv_lib.evaluate.encoders import CachedEncoder

    texts = [pair_text(q, r) for q, r in zip(QS, RS)]
    first = CachedEncoder(PairScores(tiny_ce, "tiny", "fp32"), tmp_path)
    s1 = first.encode(texts)
    assert first.misses == len(set(texts)) and s1.shape == (len(QS), 1)
    again = CachedEncoder(PairScores(tiny_ce, "tiny", "fp32"), tmp_path)
    s2 = again.encode(texts[::-1])
    assert again.misses == 0
    np.testing.assert_array_equal(s2[::-1], s1)
    np.testing.assert_array_equal(s1[:, 0], tiny_ce.predict(QS, RS).astype(np.float32))
    # the pair text keeps query and response apart: no join of two strings collides with another
    assert pair_text("a b", "c") != pair_text("a", "b c")


@pytest.fixture(scope="module")
def crossed(tiny_ce, tmp_path_factory):
    """The hashing encoder's holistic model with actionability scored by the small cross-encoder."""
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import HashingEncoder

    d = tmp_path_factory.mktemp("crossed")
    sha = tiny_ce.save(d / "cross_encoder_actionability.safetensors")
    model = UV.fit_holistic_model(HashingEncoder(), "data/judge_labels", "data")
    info = {"labels": model.fit_info["labels"], "split_seed": UV.SPLIT_SEED}
    return model, dataclasses.replace(model, cross_encoded={
        "actionability": H.CrossEncoded("cross_encoder_actionability.safetensors", sha, info)}, directory=d)


def test_the_judge_scores_a_cross_encoded_dimension_with_the_cross_encoder(crossed):
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.judge_agreement import judge_units
    from dpmv_lib.evaluate.rubric_judge import RubricJudge
    from dpmv_lib.evaluate.u_validity import label_pool
    from dpmv_lib.bench.datasets import load_benchmark

    plain, model = crossed
    units = label_pool().head(60).reset_index(drop=True)
    units.loc[0, "response"] = "   "                                   # an empty response scores 0
    benches = {t: load_benchmark(t, "data") for t in sorted(set(units["track"]))}
    with_ce = RubricJudge(HashingEncoder(), holistic=model, cross_precision="fp32")
    without = RubricJudge(HashingEncoder(), holistic=plain, cross_precision="fp32")
    a, b = judge_units(units, benches, with_ce), judge_units(units, benches, without)
    loaded = model.cross_encoder("actionability", "fp32")              # the committed float16 weights
    want = np.clip(loaded.predict(units["query"].astype(str).tolist(), units["response"].astype(str).tolist()), 0, 4)
    np.testing.assert_allclose(a["judge_actionability"], want, atol=1e-6)
    assert a.loc[0, "judge_actionability"] == 0.0
    for d in ("relevance", "correctness", "personalisation"):
        np.testing.assert_array_equal(a[f"judge_{d}"], b[f"judge_{d}"])
    assert not np.allclose(a["judge_actionability"], b["judge_actionability"])
    assert with_ce.id.endswith(f"holistic={model.sha};ce=fp32]") and model.sha != plain.sha
    assert H.HolisticModel.from_dict(model.to_dict(), model.directory) == model
    with pytest.raises(ParameterError, match="boundaries, not a cross-encoder"):
        model.cross_encoder("relevance")


def test_a_changed_weights_file_is_refused(crossed, tmp_path):
    _, model = crossed
    shutil.copytree(model.directory, tmp_path / "copy")
    f = tmp_path / "copy" / "cross_encoder_actionability.safetensors"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 1
    f.write_bytes(bytes(raw))
    with pytest.raises(ParameterError, match="sha256"):
        dataclasses.replace(model, directory=tmp_path / "copy").cross_encoder("actionability")
    with pytest.raises(ParameterError, match="missing"):
        dataclasses.replace(model, directory=tmp_path / "nowhere").cross_encoder("actionability")


def test_u_validity_measures_a_cross_encoded_dimension_on_the_held_out_half_only(crossed):
    """The held-out table reads the judge's cross-encoder scores; its spread over other splits is NaN
    (the cross-encoder was fitted on the seed-0 split only), the others' spread is measured; a
    cross-encoder fitted on other labels or another split is refused."""
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate import u_validity as UV
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.rubric_judge import RubricJudge

    _, model = crossed
    res = UV.validate_u(RubricJudge(HashingEncoder(), holistic=model, cross_precision="fp32"),
                        "data/judge_labels", "data", spread_seeds=(0, 1))
    t = res.table.set_index(["dimension", "response_model"])
    assert np.isnan(t.loc[("actionability", "all"), "kappa_fitted_min"])
    assert not np.isnan(t.loc[("relevance", "all"), "kappa_fitted_min"])
    assert not np.isnan(t.loc[("actionability", "all"), "kappa_fitted"])
    assert res.cross_encoded == {"actionability": 0.0} and "Actionability is scored by a cross-encoder" in res.summary()
    both = dataclasses.replace(res, cross_encoded={"relevance": 0.5, "actionability": 0.0}).summary()
    assert ("Relevance is scored by a cross-encoder" in both and "weighted 0.5 beside the feature model's 0.5" in both
            and "; actionability is scored by its own such cross-encoder;" in both
            and "not computed for relevance, actionability" in both)
    assert res.cross_spread == {"actionability": 0}       # no shard: no range
    ref = model.cross_encoded["actionability"]
    for bad in ({"labels": "0" * 16, "split_seed": 0}, {"labels": ref.fit_info["labels"], "split_seed": 1}):
        stale = dataclasses.replace(model, cross_encoded={"actionability": H.CrossEncoded(ref.file, ref.sha256, bad)})
        with pytest.raises(ParameterError, match="cross-encoder was fitted on labels"):
            UV.validate_u(RubricJudge(HashingEncoder(), holistic=stale, cross_precision="fp32"),
                          "data/judge_labels", "data", spread_seeds=())


def test_split_spread_leaves_fixed_dimensions_out():
    from dpmv_lib.evaluate import u_validity as UV

    units = UV.label_pool().reset_index(drop=True)
    judged = units.assign(**{f"judge_{d}": units[d].astype(float) for d in DIMENSIONS})
    out = UV.split_spread(judged, (0, 1), fixed=("actionability",)).set_index("dimension")
    assert out.loc["actionability", "kappa_fitted_min"].isna().all()
    assert (out.loc["relevance", "kappa_fitted_min"] == 1.0).all()


def test_the_committed_judge_cross_encodes_what_the_study_adopted():
    """The committed model names a cross-encoder for each dimension of CROSS_ENCODED, fitted on
    these label files and the split of SPLIT_SEED, whose committed weights match their sha256."""
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate import u_validity as UV

    model = H.load("data/judge_labels")
    assert tuple(sorted(model.cross_encoded)) == tuple(sorted(UV.CROSS_ENCODED))
    for d, ref in model.cross_encoded.items():
        assert ref.fit_info["labels"] == model.fit_info["labels"]   # tests/test_holistic.py: the current labels
        assert ref.fit_info["split_seed"] == UV.SPLIT_SEED
        assert ref.feature_weight == UV.CROSS_ENCODED[d]
        ce = model.cross_encoder(d)
        assert ce.config == CrossEncoderConfig(**ref.fit_info["config"])


def test_other_domain_negatives_pair_a_response_with_a_query_of_another_domain(monkeypatch):
    from dpmv_lib.evaluate import cross_encoder
    from dpmv_lib.evaluate.cross_encoder import other_query_negatives

    q = [f"q{i}" for i in range(12)]
    r = [f"a{i}" for i in range(12)]
    dom = ["finance", "health", "fitness"] * 4
    nq, nr = other_query_negatives(q, r, 1.0, seed=3, groups=dom)
    assert len(nq) == 12
    for query, resp in zip(nq, nr):
        assert dom[q.index(query)] != dom[r.index(resp)]
    with pytest.raises(ParameterError, match="12 units but 2 groups"):
        other_query_negatives(q, r, 1.0, groups=dom[:2])
    assert JF.slot_domain("unsup:job_loss:finance.strict_budget") == "finance"
    assert JF.slot_domain("generic:finance.budget") == "finance"
    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Memo)
    JF.fit_cross_encoder(q, r, np.full(12, 3.0), np.ones(12), "relevance", JF.Negatives(0.5, other_domain=True),
                         domains=dom)
    pairs = _Memo.trained[-1] - set(zip(q, r))
    assert len(pairs) == 6 and all(dom[q.index(a)] != dom[r.index(b)] for a, b in pairs)
    with pytest.raises(ParameterError, match="each unit's domain"):
        JF.fit_cross_encoder(q, r, np.full(12, 3.0), np.ones(12), "relevance", JF.Negatives(0.5, other_domain=True))


def test_cross_encoder_gap_compares_the_scores_of_two_models(crossed, tiny, tmp_path):
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate import u_validity as UV

    plain, model = crossed
    assert UV.cross_encoder_gap(model, model) == 0.0
    assert UV.cross_encoder_gap(model, plain) == float("inf")
    other = CrossEncoder.fit(QS, RS, np.arange(len(QS)) % 3, config=CrossEncoderConfig(epochs=1, batch_size=4,
                                                                                        learning_rate=1e-3), base=tiny)
    sha = other.save(tmp_path / "cross_encoder_actionability.safetensors")
    ref = model.cross_encoded["actionability"]
    moved = dataclasses.replace(model, cross_encoded={"actionability": H.CrossEncoded(ref.file, sha, ref.fit_info)},
                                directory=tmp_path)
    assert UV.cross_encoder_gap(model, moved) > UV.CROSS_REFIT_TOLERANCE


# ---- a score blended from the cross-encoder and the feature model ---------------------------------------
def test_blend_scores_and_the_feature_weight():
    from dpmv_lib.evaluate import holistic as H

    cross, feat = np.array([-1.0, 2.0, 5.0]), np.array([1.0, 3.0, 0.0])
    np.testing.assert_array_equal(H.blend_scores(cross, feat, 0.0), [0.0, 2.0, 4.0])
    np.testing.assert_allclose(H.blend_scores(cross, feat, 0.5), [0.5, 2.5, 2.0])
    np.testing.assert_allclose(H.blend_scores(cross, feat, 0.25), [0.25, 2.25, 3.0])
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ParameterError, match="feature_weight"):
            H.CrossEncoded("f", "0" * 64, {}, bad)
    half = H.CrossEncoded("f", "0" * 64, {"labels": "x"}, 0.5)
    assert H.CrossEncoded("f", "0" * 64, {}).to_dict() == {"file": "f", "sha256": "0" * 64, "fit_info": {}}
    assert half.to_dict()["feature_weight"] == 0.5


def test_the_judge_blends_a_cross_encoded_dimension_with_its_boundaries(crossed):
    from dpmv_lib.evaluate import holistic as H
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.judge_agreement import judge_units
    from dpmv_lib.evaluate.rubric_judge import RubricJudge
    from dpmv_lib.evaluate.u_validity import label_pool
    from dpmv_lib.bench.datasets import load_benchmark

    plain, model = crossed
    ref = model.cross_encoded["actionability"]
    half = dataclasses.replace(model, cross_encoded={"actionability": dataclasses.replace(ref, feature_weight=0.5)})
    assert H.HolisticModel.from_dict(half.to_dict(), half.directory) == half and half.sha != model.sha
    units = label_pool().head(40).reset_index(drop=True)
    units.loc[0, "response"] = ""
    benches = {t: load_benchmark(t, "data") for t in sorted(set(units["track"]))}
    a, b, c = (judge_units(units, benches, RubricJudge(HashingEncoder(), holistic=m, cross_precision="fp32"))
               for m in (half, model, plain))
    want = 0.5 * b["judge_actionability"] + 0.5 * c["judge_actionability"]
    np.testing.assert_allclose(a["judge_actionability"], want, atol=1e-9)
    assert a.loc[0, "judge_actionability"] == 0.0
    np.testing.assert_array_equal(a["judge_relevance"], c["judge_relevance"])


def _predictive_units(n=150, seed=0):
    """Units whose relevance label is carried by one relevance feature, with features for every unit."""
    from dpmv_lib.evaluate.holistic import DIMENSION_FEATURES, FEATURES

    rng = np.random.default_rng(seed)
    units = pd.DataFrame({"query": [f"q{i % 30}" for i in range(n)], "response": [f"answer {i}" for i in range(n)],
                          "response_model": np.where(np.arange(n) % 3 == 0, "smollm2", "surrogate"),
                          **{d: rng.integers(0, 5, n) for d in DIMENSIONS}})
    F = rng.normal(size=(n, len(FEATURES)))
    F[:, FEATURES.index(DIMENSION_FEATURES["relevance"][0])] = units["relevance"] + rng.normal(0, 0.2, n)
    return units, F


class _Blank(_Memo):
    """A stand-in cross-encoder that scores every pair 0."""

    def predict(self, queries, responses):
        return np.zeros(len(queries))


def test_the_study_blends_the_feature_model_fitted_on_each_training_part(monkeypatch):
    """A cross-encoder that scores every pair alike grades every unit alike (kappa 0); blended with
    a feature model fitted on each training part, the feature that carries the label shows."""
    from dpmv_lib.evaluate import cross_encoder

    units, F = _predictive_units()
    mask = np.arange(len(units)) < 100
    _Memo.trained = []
    monkeypatch.setattr(cross_encoder, "CrossEncoder", _Blank)
    alone = JF.cross_encoder_kappa(units, mask, "relevance", features=F)
    blended = JF.cross_encoder_kappa(units, mask, "relevance", feature_weight=0.5, features=F)
    assert abs(alone["all"]) < 1e-9 and blended["all"] > 0.5 and len(_Memo.trained) == 10
    assert all(t <= set(zip(units["query"][mask], units["response"][mask])) for t in _Memo.trained)
    held = JF.cross_encoder_heldout_kappa(units, mask, "relevance", feature_weight=0.5, features=F)
    assert held["all"] > 0.5
    assert abs(JF.cross_encoder_heldout_kappa(units, mask, "relevance")["all"]) < 1e-9
    with pytest.raises(ParameterError, match="needs each unit's features"):
        JF.cross_encoder_kappa(units, mask, "relevance", feature_weight=0.5)
    with pytest.raises(ParameterError, match="needs each unit's features"):
        JF.cross_encoder_heldout_kappa(units, mask, "relevance", feature_weight=0.5)


def test_of_several_adopted_candidates_the_highest_kappa_is_kept():
    table = pd.DataFrame({"dimension": ["relevance"] * 4 + ["actionability"] * 2,
                          "feature set": ["committed", "a", "b", "c", "committed", "d"],
                          "kappa all": [0.5, 0.58, 0.62, 0.7, 0.6, 0.66],
                          "adopt": ["-", "yes", "yes", "no", "-", "yes"]})
    out = JF._best_adopted(table)
    assert list(out["adopt"]) == ["-", "no (lower kappa)", "yes", "no", "-", "yes"]
    assert list(table["adopt"]) == ["-", "yes", "yes", "no", "-", "yes"]      # the input is left as it was
