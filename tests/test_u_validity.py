"""Which judge dimensions U holds (dpmv_lib.evaluate.u_validity): the held-out kappas are recomputed
from the committed label files with an independent sklearn call, the split is deterministic and
disjoint, the cuts never see the held-out half, a dimension below the floor leaves U, and U's
definition reaches the claims' metrics."""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from dpmv_lib.bench.datasets import load_benchmark
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate import u_validity as UV
from dpmv_lib.evaluate.encoders import HashingEncoder
from dpmv_lib.evaluate.judge_agreement import judge_units
from dpmv_lib.evaluate.rubric import DIMENSIONS
from dpmv_lib.evaluate.rubric_judge import RubricJudge

LABELS = "data/judge_labels"


@pytest.fixture(scope="module")
def validity():
    return UV.validate_u(RubricJudge(HashingEncoder()), LABELS, "data", spread_seeds=(0, 1))


def _raw_units() -> pd.DataFrame:
    """sample.jsonl joined with labels_a.jsonl (and the extension with its labels, where committed),
    read without the package."""
    frames = []
    for sample, labels in (("sample.jsonl", "labels_a.jsonl"), ("sample_extra.jsonl", "labels_extra_a.jsonl"),
                           ("sample_extra_b.jsonl", "labels_extra_b.jsonl"),
                           ("sample_extra_smollm2.jsonl", "labels_extra_smollm2.jsonl"),
                           ("sample_extra_smollm2_b.jsonl", "labels_extra_smollm2_b.jsonl"),
                           ("sample_extra_smollm2_c.jsonl", "labels_extra_smollm2_c.jsonl")):
        if not (Path(LABELS) / labels).exists():
            continue
        s = pd.read_json(f"{LABELS}/{sample}", lines=True)
        a = pd.read_json(f"{LABELS}/{labels}", lines=True)
        part = s.merge(a[["unit_id", *DIMENSIONS]], on="unit_id")
        part["w"] = 1.0
        if "inclusion_probability" in part:    # Horvitz-Thompson weights, summing to Kish's effective size
            ht = 1 / part["inclusion_probability"]
            part["w"] = ht * ht.sum() / (ht ** 2).sum()
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


# ---- the split -----------------------------------------------------------------------------------------
def test_split_is_deterministic_disjoint_and_stratified():
    units = UV.label_pool(LABELS)
    fit = UV.split_halves(units, 0)
    assert np.array_equal(fit, UV.split_halves(units, 0))
    assert not np.array_equal(fit, UV.split_halves(units, 1))
    assert 0.4 < fit.mean() < 0.6
    pairs = units["query"] + "\x00" + units["response"]
    assert not set(pairs[fit]) & set(pairs[~fit])          # a response lies in one half only
    strata = units["response_model"] + "/" + units["item_kind"]
    for s in strata.unique():                               # every stratum in both halves
        m = (strata == s).to_numpy()
        assert fit[m].any() and (~fit[m]).any()


# ---- the cuts ------------------------------------------------------------------------------------------
def test_cuts_recover_a_monotone_relabelling_and_ignore_the_held_out_half():
    rng = np.random.default_rng(3)
    s = rng.uniform(0, 4, 400)
    y = np.clip(np.floor(s + 0.5), 0, 4)            # labels: the score rounded
    cuts = UV.fit_cuts(s, y)
    assert list(cuts) == sorted(cuts)
    assert np.array_equal(UV.grade_with(s, cuts), y)
    assert UV.kappas(y, UV.grade_with(s, cuts)) == (1.0, 1.0)
    # the held-out half's labels never move the cuts
    jd = pd.DataFrame({"response_model": "surrogate", "judge_relevance": s, "relevance": y,
                       **{f"judge_{d}": s for d in DIMENSIONS[1:]}, **{d: y for d in DIMENSIONS[1:]}})
    fit = np.arange(400) < 200
    _, c1 = UV.heldout_table(jd, fit)
    jd.loc[~fit, "relevance"] = rng.permutation(jd.loc[~fit, "relevance"].to_numpy())
    t2, c2 = UV.heldout_table(jd, fit)
    assert c1 == c2
    assert t2.set_index(["dimension", "response_model"]).at[("relevance", "all"), "kappa_fitted"] < 0.5


def test_weighted_cuts_are_the_cuts_of_the_replicated_units():
    rng = np.random.default_rng(5)
    s = rng.uniform(0, 4, 60).round(2)
    y = np.clip(np.round(s + rng.normal(0, 0.8, 60)), 0, 4)
    w = rng.integers(1, 4, 60)
    assert UV.fit_cuts(s, y, w) == UV.fit_cuts(np.repeat(s, w), np.repeat(y, w))
    assert UV.fit_cuts(s, y, np.ones(60)) == UV.fit_cuts(s, y)


def test_cuts_for_a_boundary_no_label_reaches():
    assert UV.fit_cuts([0.5, 1.5, 2.5], [0, 1, 1])[1:] == (math.inf, math.inf, math.inf)
    with pytest.raises(ParameterError, match="no scored"):
        UV.fit_cuts([math.nan], [1])


# ---- kappa, from the committed labels --------------------------------------------------------------------
def test_heldout_kappa_is_recomputed_from_the_committed_labels(validity):
    t = validity.table.set_index(["dimension", "response_model"])
    units = UV.label_pool(LABELS)
    raw = _raw_units().set_index("unit_id").loc[units["unit_id"]]
    assert len(raw) == len(units) == validity.n_units
    judged = judge_units(units, {k: load_benchmark(k, "data") for k in ("pairedmem", "transfer")},
                         RubricJudge(HashingEncoder()))
    ho = ~UV.split_halves(units, UV.SPLIT_SEED)
    models = raw["response_model"].to_numpy()
    w = raw["w"].to_numpy()
    for d in DIMENSIONS:
        y = raw[d].to_numpy()
        score = judged[f"judge_{d}"].to_numpy()
        assert t.at[(d, "all"), "kappa_raw"] == pytest.approx(
            cohen_kappa_score(y[ho] >= 2, score[ho] >= 2, sample_weight=w[ho]))
        fitted = UV.grade_with(score, validity.cuts[d])
        for model in ("all", "surrogate", "smollm2"):
            m = ho & ((models == model) if model != "all" else True)
            ya, yb = y[m] >= 2, fitted[m] >= 2
            want = cohen_kappa_score(ya, yb, sample_weight=w[m]) if len(set(ya) | set(yb)) > 1 else math.nan
            assert t.at[(d, model), "kappa_fitted"] == pytest.approx(want, nan_ok=True)
            assert t.at[(d, model), "positives_held_out"] == int(ya.sum())
        assert t.at[(d, "all"), "weighted_kappa_fitted"] == pytest.approx(
            cohen_kappa_score(y[ho], fitted[ho].astype(int), weights="quadratic", labels=list(range(5)),
                              sample_weight=w[ho]))
        assert t.at[(d, "all"), "kappa_fitted_unweighted"] == pytest.approx(
            cohen_kappa_score(y[ho] >= 2, fitted[ho] >= 2))
        # the cuts are fitted on the fitting half with the same weights
        assert validity.cuts[d] == UV.fit_cuts(score[~ho], y[~ho], w[~ho])
    assert set(validity.definition.dimensions) == {
        d for d in DIMENSIONS if t.at[(d, "all"), "kappa_fitted"] >= UV.FLOOR}
    assert "U = " in validity.summary() and "|" in validity.markdown()


def test_the_summary_says_how_far_the_cross_encoded_spread_has_got(validity):
    part = dataclasses.replace(validity, cross_encoded={"relevance": 0.75, "actionability": 0.0},
                               cross_spread={"relevance": 4, "actionability": 0}, spread_splits=10)
    s = part.summary()
    assert "relevance 4 of 10 splits (a range is shown only where every split is done)." in s
    assert "The spread over other splits is not computed for actionability" in s
    s = dataclasses.replace(part, cross_spread={"relevance": 10, "actionability": 10}).summary()
    assert "relevance 10 of 10 splits, actionability 10 of 10 splits." in s and "not computed" not in s
    assert "data/judge_labels/cross_encoder_spread" in s


# ---- the definition of U -----------------------------------------------------------------------------------
def test_a_dimension_below_the_floor_leaves_u():
    k = {"relevance": 0.7, "correctness": 0.39, "actionability": math.nan, "personalisation": 0.4}
    assert UV.u_dimensions(k) == ("relevance", "personalisation")
    assert UV.u_dimensions(k, floor=0.2) == ("relevance", "correctness", "personalisation")
    d = UV.UDefinition.from_kappas(k)
    assert d.label == "U = mean(relevance, personalisation)" and d.dims == "relevance+personalisation"
    assert "correctness (0.39)" in d.sentence() and "leave U" in d.sentence()
    assert UV.dims_label(d.dims) == d.label
    assert UV.UDefinition.from_kappas({x: 0.1 for x in DIMENSIONS}).dimensions == ()
    assert "not validated" in UV.UDefinition().label and "not validated" in UV.dims_label(UV.UDefinition().dims)
    with pytest.raises(ParameterError, match="unknown U dimension"):
        UV.u_dimensions({"fluency": 0.9})


def test_the_u_definition_reaches_the_claims_metrics():
    from dpmv_lib.evaluate.judge import summarise_utility
    from dpmv_lib.experiments.verdicts import paired_bootstrap

    rng = np.random.default_rng(0)
    rows = []
    for method in ("A", "B"):
        for i in range(6):
            for side in ("M", "M'"):
                rows.append({"track": "pairedmem", "response_model": "surrogate", "method": method,
                             "pair_id": f"p{i}", "attribute": "debt" if i % 2 else "diabetes", "side": side,
                             "seed": 0, **{x: float(rng.integers(0, 5)) for x in DIMENSIONS}, "U": 0.0,
                             "tRec": 0.5 if side == "M" else math.nan, "Unsup": 0.1 if side == "M'" else math.nan,
                             "failed": False})
    util_t = UV.UDefinition(("relevance", "personalisation"), validated=True).apply(pd.DataFrame(rows))
    assert util_t["U"].to_numpy() == pytest.approx(((util_t["relevance"] + util_t["personalisation"]) / 8).to_numpy())
    assert util_t["U_all"].to_numpy() == pytest.approx((util_t[list(DIMENSIONS)].sum(axis=1) / 16).to_numpy())
    metrics = paired_bootstrap(None, util_t, n_boot=100)
    a = util_t[util_t["method"] == "A"]
    assert metrics.point[("pairedmem", "surrogate", "A", "U")] == pytest.approx(a["U"].mean())
    assert set(summarise_utility(util_t, n_boot=0)["U_dims"]) == {"relevance+personalisation"}
    none = UV.UDefinition((), validated=True).apply(pd.DataFrame(rows))
    assert none["U"].isna().all()


# ---- the label pool and the counts ----------------------------------------------------------------------
def test_extra_labels_are_read_when_they_exist(tmp_path):
    d = tmp_path / "labels"
    shutil.copytree(LABELS, d, ignore=shutil.ignore_patterns("*.parquet", "sample_extra.jsonl", "labels_extra_a.jsonl"))
    n = len(UV.label_pool(d))
    extra = [json.loads(x) for x in (d / "sample.jsonl").read_text().splitlines()[:3]]
    for i, u in enumerate(extra):
        u["unit_id"], u["response"] = f"e{i + 1:04d}", u["response"] + f" Extra {i}."
    (d / UV.EXTRA_SAMPLE).write_text("\n".join(json.dumps(u) for u in extra))
    assert len(UV.label_pool(d)) == n                       # no labels yet: the extension is not read
    labels = [{"unit_id": u["unit_id"], "shown": 0, "relevance": 3, "correctness": 3, "actionability": 2,
               "personalisation": 0} for u in extra[:2]]
    (d / UV.EXTRA_LABELS).write_text("\n".join(json.dumps(r) for r in labels))
    pool = UV.label_pool(d)
    assert len(pool) == n + 2 and (pool["pool"] == "extra").sum() == 2
    assert UV.split_halves(pool, 0).shape == (n + 2,)
    labels[1]["unit_id"] = "u0001"                          # an id that is no unit of the extension
    (d / UV.EXTRA_LABELS).write_text("\n".join(json.dumps(r) for r in labels))
    with pytest.raises(ParameterError, match="not in the sample"):
        UV.label_pool(d)


def test_positives_and_the_shortfall_count_the_label_files():
    raw = _raw_units()
    pos = UV.positives(UV.label_pool(LABELS)).set_index(["response_model", "dimension"])
    for (model, d), r in pos.iterrows():
        k = int((raw.loc[raw["response_model"] == model, d] >= 2).sum())
        assert r["positives"] == k and r["shortfall"] == max(0, UV.MIN_POSITIVES - k)
    need = UV.extra_units_needed(UV.label_pool(LABELS)).set_index("dimension")
    assert (need["rate_low"] < need["rate"]).all()
    short = need[need["shortfall"] > 0]
    assert (short["units_needed"] * short["rate_low"] >= short["shortfall"]).all()


def test_the_committed_extension_is_new_surrogate_units():
    s = pd.read_json(f"{LABELS}/sample.jsonl", lines=True)
    e = pd.read_json(f"{LABELS}/{UV.EXTRA_SAMPLE}", lines=True)
    assert set(e["response_model"]) == {"surrogate"} and e["unit_id"].str.startswith("e").all()
    assert not set(e["unit_id"]) & set(s["unit_id"]) and not e["unit_id"].duplicated().any()
    assert not set(zip(e["query"], e["response"])) & set(zip(s["query"], s["response"]))
    assert not e.duplicated(["query", "response"]).any() and not set(e["pair_id"]) & set(s["pair_id"])
    assert len(e) >= int(UV.extra_units_needed(UV.label_pool(LABELS))["units_needed"].max())


def test_the_second_surrogate_extension_is_new_units_of_new_pairs():
    """Pairs that neither earlier surrogate file uses; no (query, response) that any sample file holds;
    the surrogate item-kind proportions of sample.jsonl (135 : 135 : 80), generic items half per side."""
    others = pd.concat([pd.read_json(f"{LABELS}/{f}", lines=True)
                        for f in ("sample.jsonl", *(f for f, _ in UV.EXTENSIONS.values())) if f != UV.SURR_SAMPLE_B])
    surr = others[others["unit_id"].str[0].isin(["u", "e"])]
    e = pd.read_json(f"{LABELS}/{UV.SURR_SAMPLE_B}", lines=True)
    assert set(e["response_model"]) == {"surrogate"} and e["unit_id"].str.startswith("f").all()
    assert not set(e["unit_id"]) & set(others["unit_id"]) and not e["unit_id"].duplicated().any()
    assert not set(zip(e["query"], e["response"])) & set(zip(others["query"], others["response"]))
    assert not e.duplicated(["query", "response"]).any() and not set(e["pair_id"]) & set(surr["pair_id"])
    kinds = e["item_kind"].value_counts()
    assert (kinds["target_required"], kinds["unsupported"]) == (round(len(e) * 135 / 350),) * 2
    generic = e[e["item_kind"] == "generic"]["side"].value_counts()
    assert abs(generic["M"] - generic["M'"]) <= 1


@pytest.mark.parametrize("earlier, file, prefix", [(("sample.jsonl", UV.EXTRA_SAMPLE), UV.SMOL_SAMPLE, "s"),
                                                    (("sample.jsonl", UV.EXTRA_SAMPLE, UV.SMOL_SAMPLE),
                                                     UV.SMOL_SAMPLE_B, "t"),
                                                    (("sample.jsonl", UV.EXTRA_SAMPLE, UV.SMOL_SAMPLE,
                                                      UV.SMOL_SAMPLE_B), UV.SMOL_SAMPLE_C, "v")])
def test_the_committed_smollm2_extensions_are_new_non_test_smollm2_units(earlier, file, prefix):
    s = pd.concat([pd.read_json(f"{LABELS}/{f}", lines=True) for f in earlier])
    e = pd.read_json(f"{LABELS}/{file}", lines=True)
    assert set(e["response_model"]) == {"smollm2"} and e["unit_id"].str.startswith(prefix).all()
    assert not set(e["unit_id"]) & set(s["unit_id"]) and not e["unit_id"].duplicated().any()
    assert not set(zip(e["query"], e["response"])) & set(zip(s["query"], s["response"]))
    assert not e.duplicated(["query", "response"]).any() and not set(e["pair_id"]) & set(s["pair_id"])
    splits = {p.pair_id: p.split for t in ("pairedmem", "transfer") for p in load_benchmark(t, "data").pairs}
    assert {splits[p] for p in e["pair_id"]} <= {"train", "validation"}     # no table's test pair


def test_the_enriched_draw_carries_its_inclusion_probabilities():
    e = pd.read_json(f"{LABELS}/{UV.SMOL_SAMPLE_C}", lines=True)
    for stratum, g in e.groupby("stratum"):
        assert stratum in ("high", "low") and g["stratum_size"].nunique() == 1
        assert g["inclusion_probability"].to_numpy() == pytest.approx(len(g) / g["stratum_size"].iloc[0])
        assert (1 / g["inclusion_probability"]).sum() == pytest.approx(g["stratum_size"].iloc[0])
    assert set(e.loc[e["stratum"] == "high", "method"].str.slice(0, 10)) == {"DP-MemView"}


def test_the_enriched_table_is_recomputed_with_weights(validity):
    e = validity.enriched
    if not (Path(LABELS) / UV.SMOL_LABELS_C).exists():
        assert e.empty
        return
    units = UV.label_pool(LABELS)
    raw = _raw_units().set_index("unit_id").loc[units["unit_id"]]
    judged = judge_units(units, {k: load_benchmark(k, "data") for k in ("pairedmem", "transfer")},
                         RubricJudge(HashingEncoder()))
    p = units["inclusion_probability"].to_numpy(float)
    ho = ~UV.split_halves(units, UV.SPLIT_SEED) & ~np.isnan(p)
    r = e.set_index("dimension")
    for d in DIMENSIONS:
        y = raw[d].to_numpy()[ho] >= 2
        g = UV.grade_with(judged[f"judge_{d}"], validity.cuts[d])[ho] >= 2
        assert r.at[d, "kappa_drawn"] == pytest.approx(cohen_kappa_score(y, g), nan_ok=True)
        assert r.at[d, "kappa_weighted"] == pytest.approx(cohen_kappa_score(y, g, sample_weight=1 / p[ho]),
                                                          nan_ok=True)
        assert r.at[d, "positive_rate_weighted"] == pytest.approx(np.sum(y / p[ho]) / np.sum(1 / p[ho]))


def test_weighted_kappa_is_kappa_over_the_replicated_population():
    rng = np.random.default_rng(3)
    y, g = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 40).astype(float)
    w = rng.integers(1, 6, 40)
    assert UV.kappas(y, g, w) == pytest.approx(UV.kappas(np.repeat(y, w), np.repeat(g, w)))


def test_notebooks_get_the_validated_u_or_all_four_marked_not_validated(tmp_path, validity):
    judge = RubricJudge(HashingEncoder())
    rows = pd.DataFrame([{"track": "pairedmem", "response_model": "surrogate", "method": "A", "pair_id": "p0",
                          "side": "M", "seed": 0, "relevance": 4.0, "correctness": 2.0, "actionability": 0.0,
                          "personalisation": 2.0, "U": 0.5, "failed": False}])
    out = UV.with_validated_u(rows, judge, "data")
    assert out["U_dims"].iloc[0] == validity.definition.dims
    missing = UV.with_validated_u(rows, judge, tmp_path)          # no labels there
    assert missing["U_dims"].iloc[0].endswith(UV.NOT_VALIDATED) and missing["U"].iloc[0] == pytest.approx(0.5)


def test_validity_is_cached_under_its_inputs_and_reused_where_it_covers_the_request(tmp_path, monkeypatch):
    judge = RubricJudge(HashingEncoder())
    first = UV.try_validate_u(judge, "data", spread_seeds=(0, 1), cache_dir=tmp_path)
    files = list(tmp_path.glob("u_validity-*.pkl"))
    assert first is not None and len(files) == 1

    def fail(*a, **k):
        raise AssertionError("recomputed although cached")
    monkeypatch.setattr(UV, "validate_u", fail)
    again = UV.try_validate_u(judge, "data", spread_seeds=(), cache_dir=tmp_path)   # covered: no spread asked
    pd.testing.assert_frame_equal(again.table, first.table)
    assert again.definition == first.definition
    with pytest.raises(AssertionError, match="recomputed"):   # a wider spread is not covered
        UV.try_validate_u(judge, "data", spread_seeds=(0, 1, 2), cache_dir=tmp_path)
    files[0].write_bytes(b"garbage")                          # a corrupt entry is recomputed, never used
    with pytest.raises(AssertionError, match="recomputed"):
        UV.try_validate_u(judge, "data", spread_seeds=(), cache_dir=tmp_path)
    other = RubricJudge(HashingEncoder(), thresholds=(0.1, 0.2, 0.3, 0.4))
    assert UV.cache_key(other, "data") != UV.cache_key(judge, "data")
    assert UV.cache_key(judge, "data", seed=1) != UV.cache_key(judge, "data")
