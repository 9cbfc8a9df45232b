"""RQ2 logic (dpmv_lib.experiments.rq2) on synthetic inputs with known answers: accounting from public
releases, Table 4 assembly and claims, the C1 support-failure counter, the score-channel
auditor, and the exact prefix oracle against dpmv_lib.evaluate.oracle."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from helpers.llr_reference import brute_force

from dpmv_lib.checks import counterexamples as cx
from dpmv_lib.evaluate import llr, oracle
from dpmv_lib.experiments import rq2
from dpmv_lib.experiments import common
from dpmv_lib.bench.datasets import load_benchmark
from dpmv_lib.experiments import pipeline
from dpmv_lib.experiments import rq2_horizon
from dpmv_lib.experiments import rq2_score
from dpmv_lib.experiments import rq2_support
from dpmv_lib.checks.accounting import reconstructed_bound
from dpmv_lib.bench.benchmark import Benchmark, Behaviour, GoldTurn, Pair, Turn
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query
from dpmv_lib.checks.variants import StoreDependentVocabulary

QUERIES = [("Any ideas for an affordable dinner?", "affordable_dinner", "target"),
           ("Plan my meals for the week.", "meal_plan", "target"),
           ("How is my budget looking this month?", "budget_check", "neutral"),
           ("What should I ask at my checkup?", "checkup_prep", "target")]


def mini_benchmark(turns: int = 8) -> Benchmark:
    """Two pairs on the paper's running example (diabetes and debt), ``turns`` turns each."""
    policy, m, m_nd, m_nb = running_example()
    ts = []
    for i in range(turns):
        text, intent, qtype = QUERIES[i % len(QUERIES)]
        q = Query(text, intent, qtype)
        ts.append(Turn(i, i // 16, q, policy.route(q)[0], GoldTurn()))
    pairs = tuple(Pair(f"mini-{a}", "pairedmem", a, "running-example", "running-example", True, "test", m, mp,
                       tuple(ts)) for a, mp in (("diabetes", m_nd), ("debt", m_nb)))
    return Benchmark("pairedmem", {"running-example": policy}, pairs,
                     {"b": Behaviour("b", "generic", "answers")})


def conditioning_frame(methods, turns=8, seeds=(0, 1)) -> pd.DataFrame:
    from dpmv_lib.generate.generation import ROW_FIELDS, conditioning_table

    rows = conditioning_table(mini_benchmark(turns), methods, seeds=seeds, turns=turns, progress=False)
    df = pd.DataFrame.from_records(rows, columns=list(ROW_FIELDS))
    df["response_model"] = "none"
    df["response"] = ""
    return df


# ---- accounting ------------------------------------------------------------------------------------
def _slot(affected, charged, eps, mech="em", view="g.v"):
    return {"slot": "g", "view": view, "read_set": [1], "affected": sorted(affected), "charged": sorted(charged),
            "epsilon": eps, "mechanism": mech, "fallback": mech == "generic"}


def _rows(slots_per_turn, ledgers, method="X", pair="p1", side="M", seed=0, attribute="a"):
    return [{"method": method, "pair_id": pair, "attribute": attribute, "side": side, "seed": seed, "turn": t,
             "query": "q", "intent": "i", "qtype": "target", "released": json.dumps({"slots": s, "ledger": led}),
             "views": "[]"} for t, (s, led) in enumerate(zip(slots_per_turn, ledgers))]


def test_accounting_counts_omitted_charges_exactly():
    # turn 0: reads I_a and I_b, only b charged (C2 broken); turn 1: a charged; turn 2: fallback
    slots = [[_slot({"a", "b"}, {"b"}, "1/2")], [_slot({"a"}, {"a"}, "1/2")], [_slot({"a"}, set(), "0", "generic")]]
    ledgers = [{"a": "0", "b": "1/2"}, {"a": "1/2", "b": "1/2"}, {"a": "1/2", "b": "1/2"}]
    rows = _rows(slots, ledgers) + _rows(slots, ledgers, side="M'")
    acc = rq2.accounting_per_pair(pd.DataFrame(rows), horizons=(1, 2, 3))
    m = acc[acc["side"] == "M"].set_index("horizon")
    assert m.loc[1, "recon_bound"] == 0.5 and m.loc[1, "ledger"] == 0.0 and m.loc[1, "omitted"] == 1
    assert m.loc[3, "recon_bound"] == 1.0 and m.loc[3, "ledger"] == 0.5 and m.loc[3, "recon_bound_exact"] == "1"
    assert m.loc[3, "admitted_target"] == 2
    s = rq2.accounting_summary(acc, cap=0.75)
    row = s[s["horizon"] == 3].iloc[0]
    assert row["dp_bound"] == 1.0 and row["ledger_underreports"] and row["bound_same_on_M_and_Mprime"]
    assert row["share_bound_over_cap"] == 1.0


def test_accounting_deterministic_release_is_infinite():
    slots = [[_slot({"a"}, {"a"}, "1/2", "argmax")]]
    acc = rq2.accounting_per_pair(pd.DataFrame(_rows(slots, [{"a": "1/2"}])), horizons=(1,))
    assert math.isinf(acc["recon_bound"].iloc[0]) and acc["recon_bound_exact"].iloc[0] == "inf"


def test_release_round_trip_matches_library_accounting():
    policy, m, _, _ = running_example()
    mv = MemView(policy, m, budget=OnlineBudget(3), seed=1)
    rels = []
    for i in range(6):
        text, intent, qt = QUERIES[i % 4]
        rels.append(mv.release(Query(text, intent, qt), rels))
    back = []
    for r in rels:
        pub = r.public_dict()
        back.append(rq2.release_from_json(json.dumps({"slots": pub["slots"], "ledger": pub["ledger"]}), r.query))
    for a in policy.attribute_names:
        assert reconstructed_bound(back, a) == reconstructed_bound(rels, a)
    assert back[-1].spent == rels[-1].spent
    with pytest.raises(ParameterError):
        rq2.release_from_json("{}", Query("x", "y"))


def test_accounting_on_real_interfaces_incomplete_charge_underreports():
    df = conditioning_frame(["DP-MemView (on)", "IncompleteCharge", "NoCap", "CappedArgmax"], turns=8)
    acc = rq2.accounting_per_pair(df, horizons=(3, 8))
    # the running sum equals the library function applied to every prefix
    for (method, pid, side, seed), g in df.groupby(["method", "pair_id", "side", "seed"]):
        rels = rq2.transcript_releases(g)
        attr = g["attribute"].iloc[0]
        for h in (3, 8):
            row = acc[(acc["method"] == method) & (acc["pair_id"] == pid) & (acc["side"] == side)
                      & (acc["seed"] == seed) & (acc["horizon"] == h)].iloc[0]
            assert row["recon_bound_exact"] == str(reconstructed_bound(rels[:h], attr)).replace("inf", "inf")
            assert row["ledger"] == float(rels[h - 1].spent[attr])
    acc = acc[acc["horizon"] == 8]
    acc = acc[acc["method"] != "CappedArgmax"]
    s = rq2.accounting_summary(acc, cap=2.0).set_index("method")
    assert s.loc["DP-MemView (on)", "dp_bound"] <= 2.0
    assert not s.loc["DP-MemView (on)", "ledger_underreports"]
    assert s.loc["IncompleteCharge", "ledger_underreports"] and s.loc["IncompleteCharge", "omitted_max"] > 0
    assert s.loc["NoCap", "dp_bound"] > 2.0
    assert s["bound_same_on_M_and_Mprime"].all()


# ---- Table 4 ---------------------------------------------------------------------------------------
def _t4_inputs():
    methods = list(rq2.TABLE4_METHODS)
    acc = pd.DataFrame({"method": methods, "horizon": 16, "dp_bound": [2.0, 4.0, math.inf, 5.0],
                        "dp_bound_mean": [1.9, 3.5, math.inf, 4.8], "ledger_max": [2.0, 1.0, 2.0, 5.0]})
    priv = pd.DataFrame({"method": methods, "horizon": 16, "auc": [0.5, 0.56, 0.75, 0.6], "tpr": [0.05] * 4})
    util = pd.DataFrame({"method": methods, "U": [0.877, 0.878, 0.876, 0.877], "tRec": [0.5, 0.56, 0.6, 0.58],
                         "Unsup": [0.12, 0.16, 0.05, 0.16]})
    return acc, priv, util


def _t4_metrics(priv, util, sd=0.004):
    from helpers.metrics import table_metrics

    rows = [(m, {**p, **u}) for (m, p), (_, u) in zip(priv.set_index("method").iterrows(),
                                                      util.set_index("method").iterrows())]
    return table_metrics([(m, dict(v)) for m, v in rows], {"auc": "auc", "U": "U", "tRec": "tRec", "Unsup": "Unsup"},
                         sd=sd)


def test_table4_assembly_with_paper_deltas():
    acc, priv, util = _t4_inputs()
    paper = pd.DataFrame({"variant": list(rq2.TABLE4_METHODS), "violated": [None, "C2", "C3", "C5"],
                          "dp_bound": ["2.0", "4.0", "inf", "5.33"], "auc": [0.49, 0.554, 0.754, 0.599],
                          "trec": [0.5] * 4, "u": [0.877] * 4, "unsup": [0.1] * 4})
    t4 = rq2.table4(acc, priv, util, paper=paper)
    assert list(t4["variant"]) == list(rq2.TABLE4_METHODS)
    assert list(t4["violated"]) == ["", "C2", "C3", "C5"]       # read from the variant classes
    assert list(t4["violated"]) == list(t4["paper_violated"])
    assert t4.loc[0, "delta_auc"] == pytest.approx(0.01)
    assert np.isnan(t4.loc[2, "delta_dp_bound"])              # inf - inf
    assert t4.loc[3, "delta_dp_bound"] == pytest.approx(5.0 - 5.33)
    with pytest.raises(ParameterError):
        rq2.table4(acc[acc["method"] != "NoCap"], priv, util)


def test_claims_computed_from_table():
    acc, priv, util = _t4_inputs()
    t4 = rq2.table4(acc, priv, util)
    c = rq2.claims(t4, 2.0, _t4_metrics(priv, util)).set_index("claim")["verdict"]
    assert c["DP-MemView's reconstructed bound stays <= B_a"] == "HOLDS"
    assert c["every ablation's reconstructed bound exceeds B_a"] == "HOLDS"
    assert c["AUC rises above DP-MemView for every ablation"] == "HOLDS"
    assert c["IncompleteCharge's ledger under-reports the reconstructed charge"] == "HOLDS"
    assert c["CappedArgmax has the lowest Unsup and the highest AUC"] == "HOLDS"
    assert c["U changes by at most 0.002"] == "INCONCLUSIVE"      # |dU| <= 0.001, spread 0.004: CI straddles
    # a falsifying table flips the verdicts
    priv2 = priv.assign(auc=[0.6, 0.56, 0.75, 0.6])
    c2 = rq2.claims(rq2.table4(acc, priv2, util), 2.0, _t4_metrics(priv2, util)).set_index("claim")["verdict"]
    assert c2["AUC rises above DP-MemView for every ablation"] == "DOES NOT HOLD"
    # the reviewer's case: one ablation's AUC inside DP-MemView's noise gives no verdict
    priv3 = priv.assign(auc=[0.481, 0.497, 0.75, 0.6])
    c3 = rq2.claims(rq2.table4(acc, priv3, util), 2.0, _t4_metrics(priv3, util, sd=0.02)).set_index("claim")
    assert c3.loc["AUC rises above DP-MemView for every ablation", "verdict"] == "INCONCLUSIVE"
    assert rq2.format_bound(2.0, 2.0) == "2.00 <= B_a" and rq2.format_bound(math.inf, 2) == "inf"


def test_r5_names_the_dimensions_u_holds():
    acc, priv, util = _t4_inputs()
    t4 = rq2.table4(acc, priv, util.assign(U_dims="relevance+personalisation"))
    assert set(t4["u_dims"]) == {"relevance+personalisation"}
    c = rq2.claims(t4, 2.0, _t4_metrics(priv, util)).set_index("id")
    assert c.loc["R5", "claim"] == "U changes by at most 0.002 [U = mean(relevance, personalisation)]"
    c = rq2.claims(t4, 2.0, _t4_metrics(priv, util), u_label="U = mean(relevance)").set_index("id")
    assert c.loc["R5", "claim"].endswith("[U = mean(relevance)]")


def test_charge_structure_table_matches_the_per_pair_rows_and_the_paper():
    """Notebook 04's charge-structure table: min / max of the per-pair figures of
    benchmark_quality.charge_structure, exact (fractions as strings), beside the paper's values."""
    from fractions import Fraction

    from dpmv_lib.bench.benchmark_quality import charge_structure

    bench = load_benchmark("pairedmem", "data")
    pairs = bench.pairs[:6]
    tab = rq2.charge_structure_table(pairs, bench.policy, horizon=16, K=3, B_a=2)
    assert list(tab.columns) == ["quantity", "min", "max", "paper"]
    assert list(tab["paper"]) == list(rq2.PAPER_CHARGE_STRUCTURE)
    per = pd.DataFrame(charge_structure(pairs, bench.policy, horizon=16, K=3, variants=("NoCap",)))
    got = tab.set_index("quantity")
    assert got.loc["NoCap reconstructed bound at T=16", "max"] == str(per["NoCap_bound"].max())
    assert got.loc["preallocated C_a over the first 16 queries", "min"] == str(per["C_a"].min())
    # benchmark v2 by construction: 8 target reads of I_a per 16 turns, none on neutral turns
    assert list(got["min"]) == list(got["max"]) == ["16/3", "8", "1/4", "0"]
    assert Fraction(got.loc["preallocated eps = B_a / C_a", "min"]) == Fraction(2, 8)
    assert rq2.charge_structure_table(pairs, bench.policy, horizon=8, K=3, B_a=2)["quantity"][0] == \
        "NoCap reconstructed bound at T=8"


def test_summary_markdown_lists_every_variant_the_score_channel_and_the_verdicts():
    acc, priv, util = _t4_inputs()
    paper = pd.DataFrame({"variant": list(rq2.TABLE4_METHODS), "dp_bound": ["2.0", "4.0", "inf", "5.33"],
                          "auc": [0.49, 0.554, 0.754, 0.599], "trec": [0.5] * 4, "u": [0.877] * 4,
                          "unsup": [0.1] * 4})
    t4 = rq2.table4(acc, priv, util, paper=paper)
    sc = pd.DataFrame({"auditor": ["raw", "family", "exact"], "auc": [0.5, 0.875, 0.96875], "paper_auc": 0.976})
    verdicts = pd.DataFrame({"verdict": ["HOLDS", "HOLDS", "INCONCLUSIVE"]})
    hverdicts = pd.DataFrame({"verdict": ["DOES NOT HOLD"]})
    md = rq2.summary_markdown(t4, sc, verdicts, hverdicts, 2.0)
    lines = md.splitlines()
    assert len(lines) == len(rq2.TABLE4_METHODS) + 2 and all(ln.startswith("- ") for ln in lines)
    assert lines[0] == ("- DP-MemView (on): bound 2.00 <= B_a (paper 2.00 <= B_a), AUC 0.500 (paper 0.490), "
                        "tRec 0.500, Unsup 0.120")
    assert lines[2].startswith("- CappedArgmax: bound inf (paper inf), AUC 0.750")
    assert lines[3].startswith("- NoCap: bound 5.00 > B_a (paper 5.33 > B_a)")
    assert lines[4] == "- score channel: learned 0.875 / exact pair-known 0.969 (paper 0.976)"
    assert lines[5] == "- RQ2 verdicts: 2 HOLDS, 1 INCONCLUSIVE; horizon claims: 1 DOES NOT HOLD"


def test_with_paper_leaves_unmatched_rows_nan():
    ours = pd.DataFrame({"k": ["a", "b"], "x": [1.0, 2.0]})
    out = rq2.with_paper(ours, pd.DataFrame({"k": ["a"], "x": [0.5]}), "k", ["x", "y"])
    assert out.loc[0, "delta_x"] == 0.5 and np.isnan(out.loc[1, "delta_x"])


# ---- C1 support failure ------------------------------------------------------------------------------
def test_support_failure_counter_known_answer():
    # B.5 C1 construction: v1 offered only under M; eps0 = 1/2, cap 1 -> two admitted selections
    case = cx.store_dependent_vocabulary_case(n=4)
    steps = rq2_support.lockstep_steps(case.policy, case.m, case.m_prime, case.queries, budget=case.budget,
                               variant=StoreDependentVocabulary, scorer=case.scorer)
    rec = rq2_support.support_records(steps, variant="SDV", pair_id="c1")
    assert list(rec["failure"]) == [True, True, False, False]
    assert list(rec["only_M"][:2]) == ['["g.v1"]'] * 2 and (rec["only_Mp"] == "[]").all()
    p = math.exp(0.25) / (1 + math.exp(0.25))          # Pr[v1 | M] with u = (1, 0), eps 1/2, Du 1
    assert rec["mass_only_M"].iloc[0] == pytest.approx(p)
    s = rq2_support.support_failure_summary(rec).iloc[0]
    assert s["failing_ops"] == 2 and s["pairs_with_failure"] == 1 and s["one_sided_views"] == 2
    assert s["p_detect_M"] == pytest.approx(1 - (1 - p) ** 2) and s["p_detect_Mp"] == 0
    # the compliant interface on the same construction: common support everywhere
    ok = rq2_support.support_records(rq2_support.lockstep_steps(case.policy, case.m, case.m_prime, case.queries,
                                                budget=case.budget, variant=MemView, scorer=case.scorer))
    assert not ok["failure"].any()


def test_one_sided_and_detection_probability():
    assert rq2_support.one_sided({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0}) == (("b",), ())
    assert rq2_support.one_sided({"a": 1.0}, {"a": 0.2, "c": 0.8}) == ((), ("c",))
    assert rq2_support.detection_probability([0.5, 0.5]) == pytest.approx(0.75)
    assert rq2_support.detection_probability([]) == 0.0
    with pytest.raises(ParameterError):
        rq2_support.detection_probability([1.5])


def test_benchmark_support_failures_on_mini_benchmark():
    bench = mini_benchmark(6)
    rec = rq2_support.benchmark_support_failures(bench, bench.pairs, horizon=6, B_a=2, K=3)
    s = rq2_support.support_failure_summary(rec).set_index("variant")
    assert s.loc["DP-MemView", "failing_ops"] == 0
    assert s.loc["StoreDependentVocabulary", "failing_ops"] > 0


# ---- exact prefix oracle -------------------------------------------------------------------------------
def _random_turns(rng, n, views=3):
    out = []
    for _ in range(n):
        p = rng.dirichlet(np.ones(views))
        q = rng.dirichlet(np.ones(views))
        ids = [f"v{i}" for i in range(views)]
        out.append(({"g": dict(zip(ids, p))}, {"g": dict(zip(ids, q))}))
    return out


def test_prefix_distributions_match_oracle_and_brute_force():
    rng = np.random.default_rng(0)
    turns = _random_turns(rng, 5)
    d = rq2_horizon.prefix_distributions(turns, range(1, 6), max_atoms=200_000)
    for h in (1, 3, 5):
        ref = llr.trajectory_distribution(turns[:h])
        assert d[h].auc() == pytest.approx(ref.auc(), abs=1e-12)
        assert d[h].max_loss() == pytest.approx(ref.max_loss(), abs=1e-12)
    bf = brute_force(turns[:4])
    assert d[4].auc() == pytest.approx(bf["auc"], abs=1e-9)
    sep = rq2_horizon.prefix_distributions(turns, (1, 3), public_equal=[True, False, True, True, True])
    assert sep[1].auc() < 1 and sep[3].auc() == 1.0 and math.isinf(sep[3].max_loss())
    with pytest.raises(ParameterError):
        rq2_horizon.prefix_distributions(turns, (0, 9))


def test_horizon_oracle_matches_oracle_per_pair():
    df = conditioning_frame(["DP-MemView (on)", "CappedArgmax", "NoCap"], turns=8)
    hp = rq2_horizon.horizon_oracle(df, horizons=(4, 8))
    for h in (4, 8):
        ref = oracle.pair_results(df[df["turn"] < h], h).set_index(["method", "pair_id", "seed"])
        ours = hp[hp["horizon"] == h].set_index(["method", "pair_id", "seed"])
        j = ours.join(ref[["oracle_auc", "max_loss"]].add_suffix("_ref"), how="inner")
        assert len(j) == len(ours) == len(ref)
        assert np.allclose(j["oracle_auc"], j["oracle_auc_ref"], atol=1e-12)
        assert np.array_equal(np.isinf(j["max_loss"]), np.isinf(j["max_loss_ref"]))
        fin = np.isfinite(j["max_loss"])
        assert np.allclose(j.loc[fin, "max_loss"], j.loc[fin, "max_loss_ref"], atol=1e-12)
    s = rq2_horizon.horizon_summary(hp, cap=2.0, pool_splits=None, seeds_horizons=None).set_index(["method", "horizon"])
    # pooled ceilings agree with dpmv_lib.evaluate.oracle.summary (single transcript and all seeds)
    ref8 = oracle.summary(oracle.pair_results(df, 8, keep_dists=True), caps=2.0, eval_split=None)
    for r in ref8.itertuples():
        assert s.loc[(r.method, 8), "ceiling_auc"] == pytest.approx(r.ceiling_auc, abs=1e-9)
        assert s.loc[(r.method, 8), "ceiling_auc_seeds"] == pytest.approx(r.ceiling_auc_seeds, abs=1e-9)
    assert s.loc[("DP-MemView (on)", 8), "loss_le_cap_all_pairs"]
    assert math.isinf(s.loc[("CappedArgmax", 8), "max_loss"])
    chk = rq2_horizon.theorem_check(s.reset_index(), 8, 2.0).set_index("method")
    assert chk.loc["DP-MemView (on)", "within_B_a"] and not chk.loc["CappedArgmax", "within_B_a"]
    assert chk.loc["CappedArgmax", "violated"] == "C3"


def test_pooled_ceiling_of_point_masses_is_chance():
    pt = llr.LLRDistribution.point()
    auc, tpr, err = rq2_horizon.pooled_ceiling({"a": [pt, pt], "b": [pt]})
    assert auc == pytest.approx(0.5) and tpr == pytest.approx(0.05) and err == 0
    auc, _, _ = rq2_horizon.pooled_ceiling({"a": [llr.LLRDistribution.separable()]})
    assert auc == 1.0


# ---- score channel -------------------------------------------------------------------------------------
def _score_frame(leak: bool, n_per_split=(8, 4, 4), turns=4, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    rows = []
    for attr in ("a1", "a2"):
        k = 0
        for split, n in zip(("train", "validation", "test"), n_per_split):
            for _ in range(n):
                pid = f"{attr}-{k}"
                k += 1
                base = rng.uniform(0.3, 0.6, size=turns)
                for side in ("M", "M'"):
                    for t in range(turns):
                        s = base[t] + (0.3 if (leak and side == "M" and t % 2 == 0) else 0.0)
                        rel = {"slots": [{"slot": "g", "view": "v", "mechanism": "em", "top_score": round(s, 6)}]}
                        rows.append({"track": "pairedmem", "response_model": "none", "method": "ScoreChannel",
                                     "pair_id": pid, "attribute": attr, "split": split, "side": side, "seed": 0,
                                     "turn": t, "qtype": "target", "released": json.dumps(rel)})
    return pd.DataFrame(rows)


def test_score_channel_auditor_separates_a_leaking_channel():
    keys, X = rq2_score.score_sequences(_score_frame(True), horizon=4)
    assert X.shape == (len(keys), 4)
    summ, scores = rq2_score.feature_audit(keys, X, horizon=4)
    assert summ["auc"].iloc[0] > 0.95
    test_ids = set(keys.loc[keys["split"] == "test", "pair_id"])
    assert set(scores["pair_id"]) == test_ids              # evaluated on held-out test pairs only
    ex = rq2_score.score_channel_exact(keys, X).set_index("attribute")
    assert ex.loc["all", "share_differing"] == 1.0 and ex.loc["all", "pair_known_auc"] == 1.0


def test_score_channel_without_leak_is_chance():
    keys, X = rq2_score.score_sequences(_score_frame(False), horizon=4)
    summ, _ = rq2_score.feature_audit(keys, X, horizon=4)
    assert summ["auc"].iloc[0] == pytest.approx(0.5)
    ex = rq2_score.score_channel_exact(keys, X).set_index("attribute")
    assert ex.loc["all", "share_differing"] == 0.0 and ex.loc["all", "pair_known_auc"] == 0.5


def test_score_features_by_query_family():
    df = _score_frame(True)
    keys, X = rq2_score.score_sequences(df, horizon=4)
    F, names = rq2_score.score_family_features(df, keys, X, horizon=4, generic_utility=0.5)
    assert F.shape == (len(keys), len(names)) and "mean[target]" in names


def test_real_score_channel_releases_scores():
    df = conditioning_frame(["ScoreChannel"], turns=6)
    keys, X = rq2_score.score_sequences(df, horizon=6)
    assert X.shape == (len(keys), 6) and np.all((X >= 0) & (X <= 1)) and X.max() > 0


def test_paper_vs_ceiling_flags_paper_aucs_above_both_ceilings():
    paper = pd.DataFrame({"variant": ["NoCap", "CappedArgmax"], "auc": [0.599, 0.754]})
    hs = pd.DataFrame({"method": ["NoCap", "CappedArgmax"], "horizon": 16, "ceiling_auc": [0.55, 0.99],
                       "ceiling_auc_seeds": [0.58, 0.999]})
    t = rq2.paper_vs_ceiling(paper, hs, 16).set_index("variant")
    assert bool(t.at["NoCap", "paper_above_ceiling"]) and not bool(t.at["CappedArgmax", "paper_above_ceiling"])
    assert t.at["NoCap", "paper_minus_ceiling"] == pytest.approx(0.599 - 0.58)


def test_omitted_charges_agree_with_the_reconstructed_bound():
    """The charge accounting of IncompleteCharge (notebook 04) gives, per transcript, the same exact
    bound as accounting_per_pair, and omitted + charged = the admitted target-touching selections."""
    from dpmv_lib.experiments.rq1 import select_pairs
    from dpmv_lib.generate.generation import ROW_FIELDS, InterfaceParams, conditioning_table

    bench = select_pairs(load_benchmark("pairedmem", "data"), 16, seed=0)
    rows = conditioning_table(bench, ("IncompleteCharge",), seeds=(0, 1), turns=16,
                              params=InterfaceParams(B_a=2, K=3, plan_horizon=16))
    df = pd.DataFrame.from_records(rows, columns=list(ROW_FIELDS)).assign(response_model="x", response="")
    per = rq2.omitted_charges(df).set_index(["pair_id", "side", "seed"])
    acc = rq2.accounting_per_pair(df, horizons=(16,)).set_index(["pair_id", "side", "seed"])
    assert (per["recon_bound"] == acc.loc[per.index, "recon_bound_exact"]).all()
    assert ((per["charged"] + per["omitted"]) == acc.loc[per.index, "admitted_target"]).all()
    assert (per["omitted"] == acc.loc[per.index, "omitted"]).all() and per["omitted"].max() > 0
    note = rq2.omitted_charges_note(per.reset_index(), 4.0, 2.0)
    assert "6 selections x 2/3" in note
    with pytest.raises(ParameterError):
        rq2.omitted_charges(df, "NoSuchMethod")


def test_violated_condition_from_code():
    assert rq2.violated_condition("DP-MemView (on)") == ""
    assert rq2.violated_condition("NoCap") == "C5"
    assert rq2.violated_condition("ScoreChannel") == "C6"


def test_ceiling_consistency_flags():
    hs = pd.DataFrame({"method": ["A", "A"], "horizon": [4, 8], "ceiling_auc": [0.6, 0.6], "auc_err": [0.0, 0.0],
                       "ceiling_auc_seeds": [0.7, 0.7], "auc_err_seeds": [0.0, 0.0]})
    au = pd.DataFrame({"method": ["A", "A"], "horizon": [4, 8], "auc": [0.65, 0.8], "auc_lo": [0.6, 0.75],
                       "auc_hi": [0.68, 0.85], "auc_indep": [0.55, 0.7], "auc_indep_lo": [0.5, 0.65],
                       "auc_indep_hi": [0.58, 0.75]})
    c = rq2_horizon.ceiling_consistency(hs, au)
    assert list(c["indep_consistent"]) == [True, False]
    assert list(c["seed_avg_consistent"]) == [True, False]
    assert list(c["indep_check"]) == ["below", "ERROR"] and list(c["seed_avg_check"]) == ["below", "ERROR"]
    assert c["power_indep"].tolist() == pytest.approx([0.5, 2.0])     # (0.55 - 0.5) / 0.1, (0.7 - 0.5) / 0.1
    straddle = rq2_horizon.ceiling_consistency(hs, au.assign(auc_indep_lo=[0.55, 0.5], auc_indep_hi=[0.65, 0.7]))
    assert list(straddle["indep_check"]) == ["at ceiling", "at ceiling"]
    c2 = rq2_horizon.ceiling_consistency(hs, au.assign(auc_indep=[np.nan, 0.5], auc_indep_lo=[np.nan, 0.5]))
    assert c2["indep_consistent"].isna().iloc[0] and bool(c2["indep_consistent"].iloc[1])


# ---- pipeline helpers ----------------------------------------------------------------------------------
def test_rq2_config_defaults_and_validation():
    assert common.ExperimentConfig(profile="smoke").n_boot == 200 and common.ExperimentConfig().n_boot == 1000
    assert common.ExperimentConfig(T=8, T_max=8).learned_horizons == (1, 2, 4, 8)
    with pytest.raises(ParameterError):
        common.ExperimentConfig(T=20, T_max=16)
    with pytest.raises(ParameterError):
        common.ExperimentConfig(B_a=0)


def test_cached_transcripts_reuse_truncate_and_key(tmp_path):
    from dpmv_lib.generate.responders import make_responder

    bench = mini_benchmark(8)
    resp = make_responder("surrogate", list(bench.policies.values()))
    logs = []
    kw = dict(seeds=(0,), cache_dir=tmp_path, log=logs.append, progress=False)
    a = pipeline.cached_transcripts(bench, resp, ["DP-MemView (on)", "CappedArgmax"], turns=8, **kw)
    assert set(a["method"]) == {"DP-MemView (on)", "CappedArgmax"} and a["turn"].max() == 7
    assert len(list(tmp_path.glob("*-T8.parquet"))) == 2
    b = pipeline.cached_transcripts(bench, resp, ["DP-MemView (on)"], turns=4, **kw)   # shorter: reused, truncated
    assert "reused every method" in logs[-1] and b["turn"].max() == 3
    pd.testing.assert_frame_equal(b.reset_index(drop=True),
                                  a[(a["method"] == "DP-MemView (on)") & (a["turn"] < 4)].reset_index(drop=True))
    pipeline.cached_transcripts(bench, resp, ["DP-MemView (on)"], turns=4, B_a=1, **kw)  # another cap: new key
    assert "generated DP-MemView (on)" in logs[-1]
    (next(tmp_path.glob("CappedArgmax*.parquet"))).write_bytes(b"not parquet")     # corrupt: regenerated
    pipeline.cached_transcripts(bench, resp, ["CappedArgmax"], turns=8, **kw)
    assert any("ignoring unreadable" in x for x in logs)
