"""The utility decomposition (reach x credit) and the lift over GenericOnly."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments import utility_decomposition as ud
from dpmv_lib.experiments import utility_lift as ul
from dpmv_lib.experiments.verdicts import Metrics, paired_bootstrap

ATTRS = ("debt", "diabetes", "job_loss", "pregnancy")


# ---- synthetic items ------------------------------------------------------------------------------
def synthetic(n_per_attr=15, seeds=(0, 1, 2), n_items=6, p=0.3, credit_hit=0.8, credit_miss=0.1, rng_seed=0):
    """Items whose reach is drawn from an exact probability ``p`` (varying by turn around ``p``)
    and whose grade depends on the reach; the per-transcript table averages them as the judge does."""
    rng = np.random.default_rng(rng_seed)
    items, per = [], []
    for a in ATTRS:
        for i in range(n_per_attr):
            pid = f"{a}-{i}"
            for s in seeds:
                for metric, side in (("tRec", "M"), ("Unsup", "M'")):
                    pe = np.clip(p + 0.1 * rng.standard_normal(n_items), 0.01, 0.99)
                    z = rng.random(n_items) < pe
                    hit, miss = rng.random(n_items) < credit_hit, rng.random(n_items) < credit_miss
                    grades = 4 * np.where(z, hit, miss)
                    for t in range(n_items):
                        items.append({"track": "pairedmem", "response_model": "toy", "method": "Views",
                                      "family": "views", "metric": metric, "pair_id": pid, "attribute": a,
                                      "side": side, "seed": s, "turn": t, "item_id": f"x:{a}:v{t}", "view": f"v{t}",
                                      "slot": "s", "grade": float(grades[t]), "credit": grades[t] / 4,
                                      "weight": 1 / n_items / len(seeds) / (n_per_attr * len(ATTRS)),
                                      "admitted": 1.0, "p_reached": float(pe[t]), "reached": float(z[t])})
                    per.append({"track": "pairedmem", "response_model": "toy", "method": "Views", "pair_id": pid,
                                "attribute": a, "side": side, "seed": s, "U": 0.5, "failed": False,
                                "tRec": grades.mean() / 4 if metric == "tRec" else math.nan,
                                "Unsup": grades.mean() / 4 if metric == "Unsup" else math.nan})
    return pd.DataFrame(items), pd.DataFrame(per)


def test_parts_multiply_back_to_the_measured_value_on_synthetic_data():
    items, per = synthetic()
    parts = ud.decompose(items, per_transcript=per)
    assert len(parts) == 2 and parts["within_ci"].all(), parts
    for r in parts.itertuples():
        sub = items[items["metric"] == r.metric]
        assert r.measured == pytest.approx(float((sub["weight"] * sub["credit"]).sum()), abs=1e-12)
        assert r.p_reached == pytest.approx(r.p_admitted * r.p_target_given_admitted, abs=1e-12)
        assert r.recombined == pytest.approx(r.p_reached * r.credit_reached + (1 - r.p_reached) * r.credit_not_reached)
        assert 0.7 < r.credit_reached < 0.9 and 0.03 < r.credit_not_reached < 0.2


def test_with_the_sampled_reach_the_recombination_is_an_identity():
    items, per = synthetic(rng_seed=3)
    parts = ud.decompose(items.assign(p_reached=items["reached"]), per_transcript=per)
    assert np.allclose(parts["recombined"], parts["measured"], atol=1e-12)


def test_a_wrong_reach_is_caught():
    items, per = synthetic(rng_seed=4)
    parts = ud.decompose(items.assign(p_reached=0.9), per_transcript=per)
    assert not parts["within_ci"].any() and (parts["draw_z"].abs() > 10).all()


def test_the_draw_sd_is_the_spread_of_the_recombination_error():
    """Over independent draws of the same exact laws, measured - recombined has the predicted sd."""
    diffs, sds = [], []
    for k in range(40):
        items, per = synthetic(n_per_attr=5, rng_seed=100 + k)
        parts = ud.decompose(items, per_transcript=per, n_boot=100)
        diffs.extend(parts["measured"] - parts["recombined"])
        sds.extend(parts["draw_sd"])
    z = np.array(diffs) / np.array(sds)
    assert abs(z.mean()) < 0.4 and 0.75 < z.std() < 1.3


def test_bad_input_is_named():
    items, per = synthetic(n_per_attr=2)
    with pytest.raises(ParameterError, match="lacks columns"):
        ud.decompose(items.drop(columns=["p_reached"]), per_transcript=per)
    with pytest.raises(ParameterError, match="needs the bootstrap"):
        ud.decompose(items)


# ---- the smoke profile, end to end ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke():
    from dpmv_lib.evaluate.encoders import HashingEncoder
    from dpmv_lib.evaluate.judge import score_transcripts
    from dpmv_lib.evaluate.rubric_judge import RubricJudge
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.experiments.rq1 import RQ1_METHODS, load_tracks
    from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
    from dpmv_lib.generate.responders import make_responder

    prof = get_profile("smoke")
    benches = load_tracks("data", prof, 0)
    resp = make_responder("surrogate", [p for b in benches.values() for p in b.policies.values()], salt=0)
    tr = pd.concat([generate_transcripts(b, resp, RQ1_METHODS, seeds=prof.em_seeds, turns=16,
                                         params=InterfaceParams(B_a=2, K=3, plan_horizon=16), workers=1)
                    for b in benches.values()], ignore_index=True)
    per = score_transcripts(tr, benches, RubricJudge(HashingEncoder()), 16)
    return tr, per, benches


def test_smoke_decomposition_multiplies_back_within_the_ci(smoke):
    tr, per, benches = smoke
    metrics = paired_bootstrap(utility=per, n_boot=1000, seed=0)
    dec = ud.decomposition(tr, per, benches, metrics=metrics, paper=pd.DataFrame())
    parts = dec.parts
    assert set(parts["method"]) >= {"GenericOnly", "RawReadSet", "DP-MemView (on)", "DP-MemView (pre)"}
    # the pair bootstrap's 95% CI (narrow where a stratum holds two pairs) and, sharper, the exact
    # spread of measured - recombined over the selectors' draws, Bonferroni over the rows
    assert parts["within_ci"].mean() >= 0.9, parts[~parts["within_ci"]]
    bound = stats.norm.ppf(1 - 0.025 / len(parts))
    assert (parts["draw_z"].abs() <= bound).all(), parts[parts["draw_z"].abs() > bound]
    for r in parts.itertuples():  # the point estimate is the judge's own tRec / Unsup
        assert r.measured == pytest.approx(metrics.point[(r.track, r.response_model, r.method, r.metric)], abs=1e-12)
        sub = dec.items[(dec.items["track"] == r.track) & (dec.items["method"] == r.method)
                        & (dec.items["metric"] == r.metric)]
        assert r.measured == pytest.approx(float((sub["weight"] * sub["credit"]).sum()), abs=1e-12)
    t = parts[parts["metric"] == "tRec"].set_index(["track", "method"])
    assert np.allclose(t.xs("RawReadSet", level="method")["p_reached"], 1)
    assert (t.xs("GenericOnly", level="method")["p_reached"] == 0).all()
    assert (t.xs("TypedMask", level="method")["p_reached"] == 0).all()
    dp = t.xs("DP-MemView (on)", level="method")
    assert ((dp["p_reached"] > 0) & (dp["p_reached"] < 1) & (dp["p_admitted"] < 1)).all()
    assert (parts.loc[(parts["metric"] == "Unsup") & (parts["family"] == "memory_text"), "p_reached"] == 0).all()
    fig = ud.decomposition_figure(parts, ud.paper_parts(paper_frame()))
    assert len(fig.axes) == 2


def test_the_paper_side_is_its_free_credit_and_raw_memory():
    paper = paper_frame()
    pp = ud.paper_parts(paper)
    mean = pp[(pp["response_model"] == "mean") & (pp["track"] == "pairedmem")].set_index("method")
    raw = paper[paper["track"] == "pairedmem"].groupby("method")["trec"].mean()
    assert mean.at["GenericOnly", "implied_reach"] == 0 and mean.at["RawReadSet", "implied_reach"] == pytest.approx(1)
    assert mean.at["DP-MemView (on)", "free_credit"] == pytest.approx(raw["GenericOnly"])
    assert mean.at["DP-MemView (on)", "implied_reach"] == pytest.approx(
        (raw["DP-MemView (on)"] - raw["GenericOnly"]) / (raw["RawReadSet"] - raw["GenericOnly"]))
    with pytest.raises(ParameterError, match="lacks GenericOnly"):
        ud.paper_parts(paper[paper["method"] != "GenericOnly"])


def test_smoke_reach_is_the_exact_view_probability(smoke):
    import json

    tr, per, benches = smoke
    items = ud.item_table(tr, per, benches)
    row = items[(items["method"] == "DP-MemView (on)") & (items["p_reached"] > 0)].iloc[0]
    turn = tr[(tr["method"] == row["method"]) & (tr["pair_id"] == row["pair_id"]) & (tr["seed"] == row["seed"])
              & (tr["turn"] == row["turn"]) & (tr["side"] == row["side"])].iloc[0]
    probs = json.loads(turn["view_probs"])
    assert row["p_reached"] == pytest.approx(probs[row["slot"]][row["view"]], abs=0)
    assert row["reached"] == float(row["view"] in json.loads(turn["views"]))


def test_a_view_released_outside_an_admitted_slot_is_an_error(smoke):
    tr, per, benches = smoke
    dp = tr["method"] == "DP-MemView (on)"
    broken = tr.copy()
    broken.loc[dp, "released"] = broken.loc[dp, "released"].str.replace('"fallback":false', '"fallback":true')
    with pytest.raises(ParameterError, match="not admitted"):
        ud.item_table(broken, per, benches)


# ---- lift --------------------------------------------------------------------------------------------
def toy_metrics(values, n_boot=400, seed=0):
    """Metrics of one (track, model) with replicates = value + shared noise + own noise."""
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 0.02, n_boot)
    point, boot = {}, {}
    for (method, metric), v in values.items():
        key = ("pairedmem", "toy", method, metric)
        point[key] = v
        boot[key] = v + common + rng.normal(0, 0.01, n_boot)
    return Metrics(point, boot, n_boot)


def paper_frame():
    from dpmv_lib.experiments.tables import load_paper_table2
    return load_paper_table2()


def test_lift_and_its_paired_ci():
    vals = {("GenericOnly", "tRec"): 0.01, ("RawReadSet", "tRec"): 0.78, ("DP-MemView (on)", "tRec"): 0.08,
            ("DP-MemView (pre)", "tRec"): 0.18, ("GenericOnly", "Unsup"): 0.05, ("RawReadSet", "Unsup"): 0.06,
            ("DP-MemView (on)", "Unsup"): 0.07, ("DP-MemView (pre)", "Unsup"): 0.09}
    m = toy_metrics(vals)
    paper = paper_frame()
    lifts = ul.lift_table(m, paper).set_index(["method", "metric"])
    r = lifts.loc[("DP-MemView (on)", "tRec")]
    assert r["lift"] == pytest.approx(0.07)
    d = m.boot[("pairedmem", "toy", "DP-MemView (on)", "tRec")] - m.boot[("pairedmem", "toy", "GenericOnly", "tRec")]
    assert (r["lift_lo"], r["lift_hi"]) == pytest.approx((np.quantile(d, 0.025), np.quantile(d, 0.975)))
    assert r["lift_hi"] - r["lift_lo"] < 0.07  # paired: the shared noise cancels
    pm = paper[paper["track"] == "pairedmem"].groupby("method")["trec"].mean()
    assert r["paper_lift"] == pytest.approx(pm["DP-MemView (on)"] - pm["GenericOnly"])
    ratios = ul.lift_ratio(m, paper).set_index("method")
    assert ratios.at["DP-MemView (on)", "ratio"] == pytest.approx(0.07 / 0.77)
    assert ratios.at["DP-MemView (on)", "paper_ratio"] == pytest.approx(
        (pm["DP-MemView (on)"] - pm["GenericOnly"]) / (pm["RawReadSet"] - pm["GenericOnly"]))
    with pytest.raises(ParameterError, match="baseline"):
        ul.lift_table(toy_metrics({("RawReadSet", "tRec"): 0.5, ("RawReadSet", "Unsup"): 0.1}))


def t3_frame(ys, paper_ys):
    b = [1.0, 2.0, 4.0, 8.0]
    return pd.DataFrame({"sweep": "cap_magnitude", "b_a": b, "k": 3, "selector": "em", "trec": ys, "unsup": ys,
                         "paper_trec": paper_ys, "paper_unsup": paper_ys})


def test_budget_slope_on_known_lines():
    from dpmv_lib.experiments.sensitivity import setting_label

    ys = [0.1 + 0.02 * k for k in range(4)]          # +0.02 per doubling
    t3 = t3_frame(ys, [0.5, 0.5, 0.5, 0.5])
    vals = {}
    for b, y in zip(t3["b_a"], ys):
        vals[(setting_label(float(b), 3), "tRec")] = y
    m = toy_metrics(vals)
    s = ul.budget_slope(t3, m).set_index("source")
    assert s.at["ours", "slope"] == pytest.approx(0.02) and s.at["paper", "slope"] == pytest.approx(0.0, abs=1e-12)
    assert s.at["ours", "slope_lo"] < 0.02 < s.at["ours", "slope_hi"]
    lin = ul.budget_slope(t3, log2=False).set_index("source")
    assert lin.at["ours", "slope"] == pytest.approx(stats.linregress([1, 2, 4, 8], ys).slope)
    with pytest.raises(ParameterError, match="at least 3"):
        ul.budget_slope(t3.iloc[:2])
    text = ul.slope_finding(t3, m).text
    assert "+0.020 per doubling" in text and "+0.000" in text


def test_the_finding_is_generated_from_the_numbers():
    base = {("GenericOnly", "tRec"): 0.01, ("DP-MemView (on)", "tRec"): 0.08, ("DP-MemView (pre)", "tRec"): 0.18,
            ("GenericOnly", "Unsup"): 0.05, ("RawReadSet", "Unsup"): 0.06, ("DP-MemView (on)", "Unsup"): 0.07,
            ("DP-MemView (pre)", "Unsup"): 0.09}
    paper = paper_frame()
    far = ul.lift_finding(toy_metrics({**base, ("RawReadSet", "tRec"): 0.78}), paper)
    near = ul.lift_finding(toy_metrics({**base, ("RawReadSet", "tRec"): 0.111}), paper)
    r = far.lifts.set_index(["method", "metric"]).loc[("RawReadSet", "tRec")]
    assert f"{r['lift']:+.3f}" in far.text and f"{r['paper_lift']:+.3f}" in far.text
    assert "barely moves tRec" in far.text and "barely moves tRec" not in near.text
    assert "reproduces within its CI" in near.text
    assert far.text != near.text
