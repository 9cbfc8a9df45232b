"""Accounting: reconstructed bounds (Table 4), Corollary 1's composite cost, B.4 posterior odds."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from dpmv_lib.checks import counterexamples as cx
from dpmv_lib.checks.accounting import (composite_cost, posterior_odds_bounds, reconstructed_bound,
                                 reported_ledger)
from dpmv_lib.experiments.diagnostics import running_queries
from dpmv_lib.core.errors import PolicyError
from dpmv_lib.core.exact import privacy_loss_of, transcript_distribution
from dpmv_lib.checks.instances import random_case
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.store import differing_positions
from dpmv_lib.checks.variants import CappedArgmax, IncompleteCharge, NoCap


def _run(iface, queries):
    h = []
    for q in queries:
        h.append(iface.release(q, h))
    return h


@pytest.mark.parametrize("seed", range(4))
def test_reconstructed_bound_equals_ledger_for_memview(running, seed):
    policy, m, _, _ = running
    h = _run(MemView(policy, m, budget=OnlineBudget(4), seed=seed), running_queries(9))
    for a in policy.attribute_names:
        assert reconstructed_bound(h, a) == reported_ledger(h, a) <= policy.caps[a]
    assert reported_ledger([], "debt") == 0


def test_incomplete_charge_underreports_on_the_overlap(running):
    """Food reads position 3 (in I_D and I_B) but IncompleteCharge charges diabetes only."""
    policy, m, _, _ = running
    h = _run(IncompleteCharge(policy, m, budget=OnlineBudget(3), seed=0), running_queries(2))
    assert reconstructed_bound(h, "debt") > reported_ledger(h, "debt")
    assert reconstructed_bound(h, "debt") - reported_ledger(h, "debt") == 2 * Fraction(2, 3)  # 2 food reads
    assert reconstructed_bound(h, "diabetes") == reported_ledger(h, "diabetes")


def test_capped_argmax_has_no_finite_bound(running, dinner):
    policy, m, _, _ = running
    h = _run(CappedArgmax(policy, m, seed=0), [dinner])
    assert reconstructed_bound(h, "diabetes") == math.inf and reconstructed_bound(h, "debt") == math.inf


def test_no_cap_exceeds_the_cap(running):
    policy, m, _, _ = running
    h = _run(NoCap(policy, m, budget=OnlineBudget(3), seed=0), running_queries(8))
    for a in policy.attribute_names:
        assert reconstructed_bound(h, a) > policy.caps[a]
        assert reported_ledger(h, a) == reconstructed_bound(h, a)  # NoCap charges, it just never refuses


def _brute_force_kappa(policy, m, mp):
    d = differing_positions(m, mp)
    best = math.inf if d else Fraction(0)
    attrs = policy.attributes
    for k in range(len(attrs) + 1):
        for combo in itertools.combinations(attrs, k):
            union = set().union(*(a.group for a in combo)) if combo else set()
            if d <= union:
                best = min(best, sum((a.cap for a in combo), Fraction(0)))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_composite_cost_matches_brute_force(seed):
    import numpy as np
    case = random_case(seed)
    rng = np.random.default_rng(seed)
    ids = case.policy.position_ids
    d = [i for i in ids if rng.random() < 0.5]
    mp = case.m.replace({i: case.m.contents[i] + " x" for i in d})
    kappa, cover = composite_cost(case.policy, case.m, mp)
    assert kappa == _brute_force_kappa(case.policy, case.m, mp)
    if math.isfinite(kappa) and d:
        assert set(d) <= set().union(*(case.policy.attribute(a).group for a in cover))
        assert sum(case.policy.attribute(a).cap for a in cover) == kappa


def test_composite_cost_running_example(running):
    policy, m, m_d, m_b = running
    assert composite_cost(policy, m, m) == (0, frozenset())
    assert composite_cost(policy, m, m_d) == (2, frozenset({"diabetes"}))
    both = m_d.replace({4: "x", 5: "y"})
    assert composite_cost(policy, m, both) == (4, frozenset({"diabetes", "debt"}))
    outside = m.replace({6: "I work as a nurse."})
    assert composite_cost(policy, m, outside) == (math.inf, frozenset())  # no cover: no guarantee
    cheap = policy.with_caps({"debt": Fraction(1, 2)})
    assert composite_cost(cheap, m, m.replace({3: "z"}))[0] == Fraction(1, 2)  # cheapest cover of {3}


@pytest.mark.parametrize("seed", range(6))
def test_corollary1_exact_loss_below_kappa(seed):
    """Stores differing across several groups: the exact loss is at most kappa(M, M')."""
    case = random_case(seed, horizon=2)
    groups = [a.group for a in case.policy.attributes]
    touched = sorted(set().union(*groups))
    mp = case.m.replace({i: case.m.contents[i] + " y" for i in touched})
    kappa, _ = composite_cost(case.policy, case.m, mp)
    loss = privacy_loss_of(case.factory(), case.m, mp, case.strategy("fixed"), case.horizon).max_loss
    assert loss <= float(kappa) * (1 + 1e-9)


def test_posterior_odds_bounds_formula():
    lo, hi = posterior_odds_bounds(math.log(3), 0.5)
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.75)
    lo, hi = posterior_odds_bounds(Fraction(0), 0.3)
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.3)
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(PolicyError, match="prior"):
            posterior_odds_bounds(1.0, bad)


@pytest.mark.parametrize("prior", [0.1, 0.5, 0.9])
def test_posterior_of_every_transcript_within_b4_bounds(running, prior):
    policy, m, m_d, _ = running
    make = lambda s: MemView(policy, s, seed=0)  # noqa: E731
    from dpmv_lib.core.exact import fixed_strategy
    strat = fixed_strategy(running_queries(3))
    dm, dmp = transcript_distribution(make, m, strat, 3), transcript_distribution(make, m_d, strat, 3)
    lo, hi = posterior_odds_bounds(policy.caps["diabetes"], prior)
    for t in dm:
        post = dm[t] * prior / (dm[t] * prior + dmp[t] * (1 - prior))
        assert lo - 1e-12 <= post <= hi + 1e-12


def test_b4_bound_is_broken_by_a_violating_variant():
    case = cx.incomplete_charge_case(4)
    strat = case.strategy
    dm = transcript_distribution(case.factory(), case.m, strat, 4)
    dmp = transcript_distribution(case.factory(), case.m_prime, strat, 4)
    lo, hi = posterior_odds_bounds(case.bound, 0.5)
    posts = [dm[t] * 0.5 / (dm[t] * 0.5 + dmp[t] * 0.5) for t in dm]
    assert max(posts) > hi
