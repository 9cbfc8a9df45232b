"""Adaptive adversaries (dpmv_lib.experiments.adversary): exact DP vs brute force, Theorem 1 for the optimal
adaptive attacker, adaptive >= fixed, and the greedy benchmark attacker's determinism."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from dpmv_lib.experiments import adversary as A
from dpmv_lib.core.errors import ParameterError

TOL = 1e-9


def _tiny(seed: int, B, adaptive_policy: bool):
    inst = A.random_instance(seed, B, 2, adaptive_policy)
    return inst, inst.queries[:2]


@pytest.mark.parametrize("seed,adaptive_policy", [(4, True), (0, False), (10, True)])
def test_dp_matches_brute_force_over_all_adaptive_strategies(seed, adaptive_policy):
    inst, qs = _tiny(seed, 2, adaptive_policy)
    opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, qs, 2)
    ref = A.brute_force_adaptive(inst.make, inst.m, inst.m_prime, qs)
    assert ref["n_strategies"] >= 4
    assert opt.max_loss == pytest.approx(ref["max_loss"], abs=TOL)
    assert opt.kl == pytest.approx(ref["kl"], abs=TOL)
    assert opt.tv == pytest.approx(ref["tv"], abs=TOL)


def test_optimal_policies_attain_their_values():
    inst = A.random_instance(4, 2, 2, True)
    opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 3)
    kl = A.strategy_value(inst.make, inst.m, inst.m_prime, A.policy_strategy(opt.kl_policy, inst.queries), 3)
    tv = A.strategy_value(inst.make, inst.m, inst.m_prime, A.policy_strategy(opt.tv_policy, inst.queries), 3)
    assert kl.kl == pytest.approx(opt.kl, abs=TOL)
    assert tv.tv == pytest.approx(opt.tv, abs=TOL)
    assert 0.5 <= tv.auc <= 1.0


@pytest.mark.parametrize("B", ["1/2", 1, 2, 4])
@pytest.mark.parametrize("seed", range(6))
def test_theorem1_holds_for_the_optimal_adaptive_attacker(seed, B):
    for adaptive_policy in (False, True):
        inst = A.random_instance(seed, B, 2, adaptive_policy)
        opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 3)
        assert math.isfinite(opt.max_loss)
        assert opt.max_loss <= inst.bound * (1 + 1e-9), (inst.name, opt.max_loss, inst.bound)
        # a TV <= tanh(B/2) bound follows from pure B-DP (Kairouz et al.); KL <= B (tanh(B/2) too)
        assert opt.tv <= math.tanh(inst.bound / 2) + 1e-9
        assert opt.kl <= inst.bound * math.tanh(inst.bound / 2) + 1e-9


def test_tight_case_approaches_the_cap_and_the_cap_blocks():
    from dpmv_lib.checks.instances import tight_em_loss
    for n in (6, 64):
        inst = A.tight_instance(2, n)
        opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 2)
        assert opt.max_loss == pytest.approx(tight_em_loss(2.0, n), rel=1e-9)  # 2nd turn blocked
    assert opt.max_loss > 0.98 * 2                                              # n = 64


@pytest.mark.parametrize("seed,adaptive_policy", [(0, False), (4, True), (10, True), (1, True)])
def test_adaptive_at_least_fixed_and_equal_in_max_loss(seed, adaptive_policy):
    inst = A.random_instance(seed, 2, 2, adaptive_policy)
    opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 3)
    fx = A.best_fixed(inst.make, inst.m, inst.m_prime, inst.queries, 3)
    assert opt.kl >= fx.kl - TOL and opt.tv >= fx.tv - TOL
    assert opt.max_loss == pytest.approx(fx.max_loss, abs=TOL)  # every adaptive leaf is a fixed leaf


def test_adaptivity_strictly_helps_with_a_history_dependent_router():
    inst = A.random_instance(4, 2, 2, True)
    opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 3)
    fx = A.best_fixed(inst.make, inst.m, inst.m_prime, inst.queries, 3)
    assert opt.tv > fx.tv + 1e-4 and opt.kl > fx.kl + 1e-4


def test_running_example_under_the_cap():
    for inst in A.running_example_instances(1, 2):
        opt = A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 2)
        assert 0 < opt.max_loss <= inst.bound + 1e-9


def test_distribution_metrics_by_hand():
    v = A.distribution_metrics({"x": 0.75, "y": 0.25}, {"x": 0.25, "y": 0.75})
    assert v.max_loss == pytest.approx(math.log(3))
    assert v.tv == pytest.approx(0.5)
    assert v.kl == pytest.approx(0.5 * math.log(3))
    assert v.auc == pytest.approx(0.75 * 0.75 + 0.5 * (0.75 * 0.25 + 0.25 * 0.75))


def test_bad_arguments():
    inst = A.random_instance(0, 2)
    with pytest.raises(ParameterError):
        A.optimal_adaptive(inst.make, inst.m, inst.m_prime, (), 2)
    with pytest.raises(ParameterError):
        A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 0)
    with pytest.raises(ParameterError, match="tree nodes"):
        A.optimal_adaptive(inst.make, inst.m, inst.m_prime, inst.queries, 3, max_nodes=5)


# ---- the greedy attacker on benchmark pairs -------------------------------------------------------
@pytest.fixture(scope="module")
def bench():
    from dpmv_lib.bench.datasets import load_benchmark
    return load_benchmark("pairedmem", "data")


@pytest.fixture(scope="module")
def test_pairs(bench):
    return [p for p in bench if p.split == "test"][:3]


@pytest.mark.parametrize("method", ["DP-MemView (on)", "DP-MemView (pre)"])
def test_fixed_attacker_matches_the_interfaces_view_probs(bench, test_pairs, method):
    """The attacker's exact per-turn laws agree with what the RQ1 interface records (oracle input)."""
    from dpmv_lib.generate.interfaces import make_interface
    from dpmv_lib.evaluate.llr import trajectory_distribution

    for pair in test_pairs:
        pol = bench.policy(pair)
        it = make_interface(method, B_a=2, K=3, seed=0)
        a, b = it.run(pair, pol, "M", 0, turns=8), it.run(pair, pol, "M'", 0, turns=8)
        ref = trajectory_distribution([(x.view_probs, y.view_probs) for x, y in zip(a, b)])
        got = A.greedy_attack(pair, pol, method, adaptive=False, horizon=8).cumulative()[-1]
        assert got.auc() == pytest.approx(ref.auc(), abs=1e-12)
        assert got.max_loss() == pytest.approx(ref.max_loss(), abs=1e-12)


def test_greedy_is_deterministic_under_a_seed_and_within_the_cap(bench, test_pairs):
    pair = test_pairs[0]
    pol = bench.policy(pair)
    for method in ("DP-MemView (on)", "RawReadSet", "TaskMin", "GenericOnly"):
        r1 = A.greedy_attack(pair, pol, method, seed=3)
        r2 = A.greedy_attack(pair, pol, method, seed=3)
        assert r1.queries == r2.queries and r1.gains == r2.gains
        assert [d.auc() for d in r1.cumulative()] == [d.auc() for d in r2.cumulative()]
    run = A.greedy_attack(pair, pol, "DP-MemView (on)", seed=0)
    cum = run.cumulative()
    assert cum[-1].max_loss() <= 2 + 1e-9
    assert all(x.auc() <= y.auc() + 1e-12 for x, y in zip(cum, cum[1:]))  # more turns never hurt


def test_greedy_first_turn_is_at_least_the_fixed_first_turn(bench, test_pairs):
    """Turn 1 of the greedy attacker maximises the Jeffreys divergence over the bank, which holds
    the fixed trajectory's first query."""
    for pair in test_pairs:
        pol = bench.policy(pair)
        g = A.greedy_attack(pair, pol, "DP-MemView (on)", horizon=1)
        f = A.greedy_attack(pair, pol, "DP-MemView (on)", adaptive=False, horizon=1)
        assert g.gains[0] >= f.gains[0] - 1e-12


def test_attack_table_and_summary(bench, test_pairs):
    sub = bench.subset([p.pair_id for p in test_pairs])
    per_t, per_pair = A.attack_table(sub, ("GenericOnly", "TypedMask", "RawReadSet", "DP-MemView (on)"), horizon=4)
    assert len(per_t) == 4 * 2 * 4 and len(per_pair) == 4 * 2 * len(test_pairs)
    s = A.summary_at(per_t, 4).set_index("method")
    assert s.loc["GenericOnly", "adaptive_auc"] == 0.5 and s.loc["TypedMask", "fixed_auc"] == 0.5
    assert s.loc["RawReadSet", "adaptive_auc"] >= s.loc["RawReadSet", "fixed_auc"]
    with pytest.raises(ParameterError):
        A.summary_at(per_t, 5)


def test_attack_table_same_for_any_worker_count(bench, test_pairs):
    """The games run over forked workers; one and two workers give identical tables."""
    sub = bench.subset([p.pair_id for p in test_pairs[:3]])
    methods = ("RawReadSet", "DP-MemView (on)")
    one = A.attack_table(sub, methods, horizon=3, workers=1)
    two = A.attack_table(sub, methods, horizon=3, workers=2)
    for a, b in zip(one, two):
        pd.testing.assert_frame_equal(a, b)


def test_greedy_bad_arguments(bench, test_pairs):
    pair = test_pairs[0]
    with pytest.raises(ParameterError, match="unknown method"):
        A.greedy_attack(pair, bench.policy(pair), "nope")
    with pytest.raises(ParameterError, match="horizon"):
        A.greedy_attack(pair, bench.policy(pair), "DP-MemView (on)", horizon=0)


@pytest.mark.parametrize("method", ["RawReadSet", "TypedMask", "TaskMin", "OutputFilter"])
def test_text_methods_follow_the_oracle_rule(bench, test_pairs, method):
    """Fixed attacker: a turn is separable iff the interface's conditioning differs under M and M'."""
    import numpy as np

    from dpmv_lib.generate.interfaces import make_interface

    for pair in test_pairs:
        pol = bench.policy(pair)
        it = make_interface(method)
        a, b = it.run(pair, pol, "M", turns=8), it.run(pair, pol, "M'", turns=8)
        run = A.greedy_attack(pair, pol, method, adaptive=False, horizon=8)
        assert [bool(np.isinf(d.llr).any()) for d in run.turns] == [x.conditioning != y.conditioning
                                                                  for x, y in zip(a, b)]
        adaptive = A.greedy_attack(pair, pol, method, horizon=8).cumulative()[-1].auc()
        assert adaptive >= run.cumulative()[-1].auc()


def _small_and_at_T():
    small = pd.DataFrame({"instance": ["running", "running", "tight EM (6 views)"], "B_a": [0.5, 2.0, 1.0],
                          "loss_over_B_a": [0.5, 0.25, 0.98], "max_loss_le_B_a": [True, True, True],
                          "adaptive_tv": [0.2, 0.3, 0.4], "fixed_tv": [0.2, 0.1, 0.4],
                          "adaptive_kl": [0.1, 0.2, 0.3 + 1e-12], "fixed_kl": [0.1, 0.2, 0.3]})
    at_T = pd.DataFrame({"method": ["GenericOnly", "DP-MemView (on)"], "adaptive_auc": [0.5, 0.5414],
                         "fixed_auc": [0.5, 0.529], "adaptive_max_loss": [0.0, 0.79],
                         "fixed_max_loss": [0.0, math.inf]})
    return small, at_T


def test_adaptivity_gain_counts_gains_above_the_tolerance():
    small, _ = _small_and_at_T()
    g = A.adaptivity_gain(small)
    assert g["tv_gain"].tolist() == pytest.approx([0.0, 0.2, 0.0]) and list(g["helps"]) == [False, True, False]
    assert list(A.adaptivity_gain(small, tol=1e-13)["helps"]) == [False, True, True]
    assert list(g.columns[:len(small.columns)]) == list(small.columns)


def test_summary_markdown_states_theorem1_adaptivity_and_every_method():
    small, at_T = _small_and_at_T()
    lines = A.summary_markdown(small, at_T, 16).splitlines()
    assert len(lines) == 2 + len(at_T) and all(ln.startswith("- ") for ln in lines)
    assert lines[0] == ("- small instances: optimal adaptive max loss <= B_a on all 3 (instance, B_a) rows: True; "
                        "largest ratio 0.980 (tight EM (6 views), B_a=1)")
    assert lines[1].startswith("- adaptivity strictly raised TV/KL on 1 of 3 rows (max loss: never")
    assert lines[3] == "- DP-MemView (on): AUC at T=16 adaptive 0.541 vs fixed 0.529 (max loss 0.790 vs inf)"
    small.loc[1, "max_loss_le_B_a"] = False
    assert "rows: False;" in A.summary_markdown(small, at_T, 16)
