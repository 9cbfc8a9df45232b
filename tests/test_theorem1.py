"""Exact verification of Theorem 1 by enumerating every augmented transcript (dpmv_lib.core.exact).

For small random policies (overlapping groups, empty reads, adaptive routing), adjacent stores
M ~_a M', a fixed and an adaptive query strategy and both budget modes:
    P[t | M] <= e^{B_a} P[t | M']  and  P[t | M'] <= e^{B_a} P[t | M]  for every transcript t,
and each distribution sums to 1. The same harness shows the B.5 variants exceeding B_a.
"""
from __future__ import annotations

import math

import pytest

from dpmv_lib.checks import counterexamples as cx
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.experiments.diagnostics import running_adaptive_strategy, running_queries, theorem1_check
from dpmv_lib.core.exact import privacy_loss_of, fixed_strategy, transcript_distribution
from dpmv_lib.checks.instances import random_case, tight_em_case, tight_em_loss
from dpmv_lib.core.ledger import OnlineBudget, PreallocatedBudget, planned_charges
from dpmv_lib.core.memview import MemView

REL = 1e-9


def assert_theorem1(make, m, m_prime, strategy, horizon, bound):
    """The check itself, written out here (not delegated to the harness under test)."""
    dm = transcript_distribution(make, m, strategy, horizon)
    dmp = transcript_distribution(make, m_prime, strategy, horizon)
    assert sum(dm.values()) == pytest.approx(1.0, abs=1e-9)
    assert sum(dmp.values()) == pytest.approx(1.0, abs=1e-9)
    factor = math.exp(float(bound)) * (1 + REL)
    caps = make(m).policy.caps
    for t in set(dm) | set(dmp):
        p, q = dm.get(t, 0.0), dmp.get(t, 0.0)
        assert p <= factor * q, f"P[t|M]={p} > e^B P[t|M']={factor * q} for t={t}"
        assert q <= factor * p, f"P[t|M']={q} > e^B P[t|M]={factor * p} for t={t}"
        for rel in t:  # every path keeps L_a <= B_a (C5)
            assert all(rel.spent[a] <= c for a, c in caps.items())
    return len(set(dm) | set(dmp))


SEEDS = range(16)


@pytest.mark.parametrize("adaptive_policy", [False, True], ids=["table-router", "adaptive-router"])
@pytest.mark.parametrize("seed", SEEDS)
def test_theorem1_random_policies(seed, adaptive_policy):
    case = random_case(seed, adaptive=adaptive_policy, levels=1 if seed % 2 else 4)
    assert case.policy.attribute(case.attribute).group & case.m_prime.contents.keys()
    n = 0
    for kind in ("fixed", "adaptive"):
        for budget in (case.budget("online", K=1 + seed % 3), case.budget("pre")):
            n += assert_theorem1(case.factory(budget=budget), case.m, case.m_prime, case.strategy(kind),
                                 case.horizon, case.bound)
    assert n >= 4


def test_random_cases_are_not_vacuous():
    """The random instances exercise overlap, charged selections and positive privacy loss."""
    losses, overlaps = [], 0
    for seed in SEEDS:
        case = random_case(seed)
        groups = [a.group for a in case.policy.attributes]
        overlaps += any(g & h for i, g in enumerate(groups) for h in groups[i + 1:])
        losses.append(privacy_loss_of(case.factory(), case.m, case.m_prime, case.strategy("fixed"),
                                         case.horizon).max_loss)
    assert overlaps == len(SEEDS)
    assert sum(x > 0.05 for x in losses) >= len(SEEDS) // 2


@pytest.mark.parametrize("attribute", ["diabetes", "debt"])
@pytest.mark.parametrize("mode", ["online", "pre"])
def test_theorem1_running_example(running, attribute, mode):
    policy, m, m_d, m_b = running
    mp = m_d if attribute == "diabetes" else m_b
    queries = running_queries(3)
    budget = OnlineBudget(3) if mode == "online" else PreallocatedBudget(planned_charges(policy, queries))
    make = lambda s: MemView(policy, s, budget=budget, seed=0)  # noqa: E731
    for strategy in (fixed_strategy(queries), running_adaptive_strategy):
        assert_theorem1(make, m, mp, strategy, 3, policy.attribute(attribute).cap)


def test_tight_em_case_matches_closed_form_and_bound():
    """One selection whose normaliser moves against the target view: the exact loss equals the
    closed form (< B_a). A missing factor 2 in Eq. (7) would give a loss above B_a here."""
    case = tight_em_case(n_views=6)
    make = case.factory(budget=OnlineBudget(1))
    loss = privacy_loss_of(make, case.m, case.m_prime, case.strategy("fixed"), 1).max_loss
    assert loss == pytest.approx(tight_em_loss(float(case.bound), 6), rel=1e-9)
    assert loss > 0.8 * float(case.bound)
    assert_theorem1(make, case.m, case.m_prime, case.strategy("fixed"), 1, case.bound)


# ---- B.5: the harness shows each violating variant exceeding B_a -----------------------------
@pytest.mark.parametrize("name", sorted(cx.CASES))
def test_b5_variant_exceeds_bound_and_memview_does_not(name):
    case = cx.CASES[name]()
    bad = theorem1_check(case.factory(), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    assert bad.total_m == pytest.approx(1) and bad.total_m_prime == pytest.approx(1)
    assert bad.violations > 0 and bad.max_loss > float(case.bound)
    if math.isinf(case.analytic_loss):
        assert math.isinf(bad.max_loss)
    else:
        assert bad.max_loss == pytest.approx(case.analytic_loss, rel=1e-9)
    with pytest.raises(AssertionError):
        assert_theorem1(case.factory(), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    # compliant MemView on the very same construction stays within B_a
    good = theorem1_check(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    assert good.holds and good.max_loss <= float(case.bound)
    assert_theorem1(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon, case.bound)


@pytest.mark.parametrize("names", [("a", "b"), ("b", "a")])
def test_b5_incomplete_charge_both_name_orders(names):
    """Compliant MemView charges BOTH attributes whichever name sorts first."""
    case = cx.incomplete_charge_case(4, target=names[0], other=names[1])
    bad = theorem1_check(case.factory(), case.m, case.m_prime, case.strategy, case.horizon, case.bound)
    assert not bad.holds and bad.max_loss == pytest.approx(1.0, rel=1e-9)
    assert_theorem1(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon, case.bound)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_b5_loss_grows_as_n_eps0_over_2(n):
    """IncompleteCharge and NoCap: exact loss N eps_0 / 2 (all N selections admitted)."""
    for case in (cx.incomplete_charge_case(n), cx.no_cap_case(n)):
        loss = privacy_loss_of(case.factory(), case.m, case.m_prime, case.strategy, n).max_loss
        assert loss == pytest.approx(n * float(case.budget.epsilon0) / 2, rel=1e-9)
        good = privacy_loss_of(case.factory(MemView), case.m, case.m_prime, case.strategy, n).max_loss
        assert good <= float(case.bound) * (1 + REL)


def test_b5_constructions_keep_the_other_conditions():
    """Each construction uses adjacent stores, a public route and a fixed vocabulary (only the
    named condition is broken)."""
    from dpmv_lib.core.store import is_adjacent
    for case in cx.all_cases():
        assert is_adjacent(case.m, case.m_prime, case.policy, case.attribute)
        assert case.variant.violates == case.violates
        with pytest.raises(ParameterError, match="N must be an integer >= 1"):
            cx.CASES[case.variant.label](n=0)
