"""Budget rules must return exact rationals (typed error otherwise, nothing
charged), and the exact enumerators (exact.py and the contract checker) work in log space, so
eps = 2000 gives the true finite transcript loss instead of inf, while a genuine support
mismatch is still inf.

The large-eps references are computed independently of the package: exact rational exponents,
then ``decimal`` exp/ln at 80 significant digits (Eq. (7) and the (PF) formula of
permute-and-flip written out here), products over a fixed, fully admitted query plan.
"""
from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction
from math import comb
from typing import Any

import numpy as np
import pytest

from dpmv_lib.checks.contract import check_contract, variant_factory
from dpmv_lib.checks.counterexamples import ConstantBudget, capped_argmax_case, incomplete_charge_case, no_cap_case, \
    store_dependent_vocabulary_case
from dpmv_lib.core.errors import BudgetError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.exact import (privacy_loss_of, fixed_strategy, log_add, log_privacy_loss, privacy_loss,
                                 transcript_distribution, transcript_log_distribution)
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.releases import checked_rule_epsilon, selector_log_probabilities
from dpmv_lib.core.policy import Policy, Query
from dpmv_lib.core.selection import (Selector, em_probabilities, exponential_mechanism, permute_and_flip,
                                     pf_probabilities, sample_em, sample_em_exact)
from dpmv_lib.core.store import MemoryStore

DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")


@pytest.fixture(scope="module")
def running():
    return running_example()


class Returns:
    """A budget rule that returns one fixed value (whatever its type)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def epsilon(self, charge_set, caps):
        return self.value


class FirstGoodThen:
    """A budget rule whose first answer is valid and every later one is ``bad``."""

    def __init__(self, bad: Any) -> None:
        self.bad, self.calls = bad, 0

    def epsilon(self, charge_set, caps):
        self.calls += 1
        return Fraction(1, 2) if self.calls == 1 else self.bad


# ---- budget rules: exact rationals only -----------------------------------------------------------
BAD_RULE_VALUES = [
    pytest.param("1/2", id="str-1/2"),
    pytest.param("0.5", id="str-0.5"),
    pytest.param(0.5, id="float-0.5"),
    pytest.param(1.0, id="float-1.0"),
    pytest.param(0.1, id="float-0.1"),
    pytest.param(True, id="bool-True"),
    pytest.param(False, id="bool-False"),
    pytest.param(np.float64(0.5), id="np.float64"),
    pytest.param(np.float32(0.5), id="np.float32"),
    pytest.param(np.bool_(True), id="np.bool_"),
    pytest.param(-1, id="int-neg"),
    pytest.param(0, id="int-zero"),
    pytest.param(Fraction(-1, 2), id="Fraction-neg"),
    pytest.param(Fraction(0), id="Fraction-zero"),
    pytest.param(np.int64(-2), id="np.int64-neg"),
    pytest.param(Decimal("0.5"), id="Decimal"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(complex(0.5, 0), id="complex"),
    pytest.param([Fraction(1, 2)], id="list"),
]


@pytest.mark.parametrize("bad", BAD_RULE_VALUES)
def test_a_rule_returning_anything_but_an_exact_positive_rational_is_a_typed_error(running, bad):
    policy, m, _, _ = running
    mv = MemView(policy, m, budget=Returns(bad), seed=0)
    with pytest.raises(BudgetError) as info:
        mv.release(DINNER)
    msg = str(info.value)
    # names the rule, the slot (food is planned first), its charge set and the value
    assert "Returns" in msg and "'food'" in msg and "['debt', 'diabetes']" in msg and repr(bad)[:20] in msg
    assert mv.ledger.spent() == {"diabetes": 0, "debt": 0} and mv.ledger.log == []
    with pytest.raises(BudgetError, match="budget rule Returns returned eps"):
        mv.plan(DINNER, "finance")


@pytest.mark.parametrize("bad", ["1/2", 0.5, True, np.float64(0.5), -1])
def test_a_bad_later_slot_leaves_the_ledger_unchanged(running, bad):
    """Every slot of a turn is planned before any is charged: the valid first slot (food) is not
    charged when the second (finance) gets a bad eps."""
    policy, m, _, _ = running
    rule = FirstGoodThen(bad)
    mv = MemView(policy, m, budget=rule, seed=0)
    with pytest.raises(BudgetError, match="slot 'finance' with charge set \\['debt'\\]"):
        mv.release(DINNER)
    assert rule.calls == 2
    assert mv.ledger.spent() == {"diabetes": 0, "debt": 0} and mv.ledger.log == []


def test_the_exact_enumerators_raise_the_same_typed_error(running):
    policy, m, m_d, _ = running
    with pytest.raises(BudgetError, match="returned eps = '1/2'"):
        privacy_loss_of(lambda s: MemView(policy, s, budget=Returns("1/2"), seed=0), m, m_d,
                           fixed_strategy([DINNER]), 1)
    with pytest.raises(BudgetError, match="returned eps = 0.5 \\(float\\)"):
        check_contract(variant_factory(MemView, Returns(0.5)), policy, horizon=1, samples=1)


@pytest.mark.parametrize("good, expect", [
    (Fraction(1, 2), Fraction(1, 2)),
    (1, Fraction(1)),
    (np.int64(1), Fraction(1)),
    (Fraction(2, 3), Fraction(2, 3)),
])
def test_exact_rationals_are_accepted_and_charged_as_fractions(running, good, expect):
    policy, m, _, _ = running
    mv = MemView(policy, m, budget=Returns(good), seed=0)
    rel = mv.release(DINNER)
    for s in rel.slots:
        assert type(s.epsilon) is Fraction and s.epsilon == expect and s.mechanism == "em"
    assert rel.spent == {"diabetes": expect, "debt": 2 * expect}
    assert all(type(v) is Fraction for v in rel.spent.values())


def test_none_means_no_eps_generic_view_at_zero_cost(running):
    policy, m, _, _ = running
    rel = MemView(policy, m, budget=Returns(None), seed=0).release(DINNER)
    assert [s.mechanism for s in rel.slots] == ["generic", "generic"]
    assert all(s.epsilon == 0 and not s.charged for s in rel.slots)
    assert rel.spent == {"diabetes": 0, "debt": 0}


def test_checked_rule_epsilon_directly():
    rule, slot, charged = Returns(None), "g", frozenset({"a"})
    assert checked_rule_epsilon(None, rule, slot, charged) is None
    assert checked_rule_epsilon(Fraction(3, 7), rule, slot, charged) == Fraction(3, 7)
    got = checked_rule_epsilon(np.int64(5), rule, slot, charged)
    assert type(got) is Fraction and got == 5
    got = checked_rule_epsilon(10**40, rule, slot, charged)
    assert type(got) is Fraction and got == 10**40
    with pytest.raises(BudgetError, match="must be > 0"):
        checked_rule_epsilon(Fraction(0), rule, slot, charged)
    with pytest.raises(BudgetError, match="exact rational"):
        checked_rule_epsilon("1/2", rule, slot, charged)
    with pytest.raises(BudgetError, match="exact rational"):
        checked_rule_epsilon(True, rule, slot, charged)


# ---- an independent reference for large eps --------------------------------------------------------
D80 = 80


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def ref_em(us: list[Fraction], eps: Fraction, du: Fraction) -> list[Decimal]:
    """Eq. (7) at 80 digits: exp(eps u_v / (2 Du)) / sum_w exp(eps u_w / (2 Du))."""
    with localcontext() as ctx:
        ctx.prec = D80
        ws = [_dec(eps * u / (2 * du)).exp() for u in us]
        z = sum(ws)
        return [w / z for w in ws]


def ref_pf(us: list[Fraction], eps: Fraction, du: Fraction) -> list[Decimal]:
    """Permute-and-flip at 80 digits from its definition (McKenna & Sheldon, Alg. 1): r is output
    iff it is accepted and the views visited before it (a uniformly random subset S of the
    others, |S| = k with probability 1/n, uniform among k-subsets) are all rejected."""
    n = len(us)
    top = max(us)
    with localcontext() as ctx:
        ctx.prec = D80
        q = [_dec(eps * (u - top) / (2 * du)).exp() for u in us]
        out = []
        for r in range(n):
            others = [j for j in range(n) if j != r]
            total = Decimal(0)
            for k in range(n):
                w = Decimal(1) / Decimal(n * comb(n - 1, k))
                for sub in itertools.combinations(others, k):
                    prod = Decimal(1)
                    for j in sub:
                        prod *= 1 - q[j]
                    total += w * prod
            out.append(q[r] * total)
        return out


def ref_loss(pm: list[Decimal], pmp: list[Decimal], turns: int) -> float:
    """max over view sequences of |ln prod P_M - ln prod P_M'| for ``turns`` admitted selections."""
    with localcontext() as ctx:
        ctx.prec = D80
        best = Decimal(0)
        for seq in itertools.product(range(len(pm)), repeat=turns):
            a = sum((pm[i].ln() for i in seq), Decimal(0))
            b = sum((pmp[i].ln() for i in seq), Decimal(0))
            best = max(best, abs(a - b))
        return float(best)


MARK = "evidence"
Q = Query("What should I keep in mind today?", "ask")
#: utilities of (generic, v1, v2, v3) when position 1 holds the evidence (M) or not (M'); |diff| <= 1.
#: Under M two views tie at the top and a third is 1/2000 below (exponent -1/2 at eps = 2000), so
#: the normaliser matters: the Eq. (7) loss is 1000 + log(2 + e^(-1/2)) per selection, not eps/2.
U_M = (Fraction(0), Fraction(1), Fraction(1999, 2000), Fraction(1))
U_MP = (Fraction(1), Fraction(0), Fraction(1, 2), Fraction(1, 4))


class TableScorer:
    sensitivity = Fraction(1)

    def __call__(self, query, view, contents):
        table = U_M if any(MARK in c for c in contents) else U_MP
        return table[int(view.id[-1])]


def four_view_case(cap: int):
    policy = Policy.from_dict({
        "name": "large-eps", "sensitivity": "1",
        "slots": [{"name": "g", "views": [
            {"id": "g.v0", "text": "Answer generally.", "generic": True},
            {"id": "g.v1", "text": "One.", "cues": [MARK], "intents": ["ask"]},
            {"id": "g.v2", "text": "Two.", "cues": ["two"], "intents": ["ask"]},
            {"id": "g.v3", "text": "Three.", "cues": ["three"], "intents": ["ask"]}]}],
        "positions": [{"id": 1, "slot": "g"}, {"id": 2, "slot": "g"}],
        "attributes": [{"name": "a", "group": [1], "cap": str(cap)}],
        "routes": {"ask": ["g"]}})
    m = MemoryStore.from_policy(policy, {1: f"{MARK} of a", 2: "a note"}, "M")
    return policy, m, m.replace({1: "nothing"}, "M'")


EPS = Fraction(2000)


@pytest.mark.parametrize("selector, ref", [("em", ref_em), ("pf", ref_pf)])
@pytest.mark.parametrize("turns", [1, 2])
def test_eps_2000_loss_is_finite_and_matches_an_independent_computation(selector, ref, turns):
    """ConstantBudget(2000), B_a = 2000 * turns: every selection of the plan is admitted and one
    more turn falls back to the generic view (probability 1 on both sides)."""
    policy, m, mp = four_view_case(2000 * turns)
    expect = ref_loss(ref(list(U_M), EPS, Fraction(1)), ref(list(U_MP), EPS, Fraction(1)), turns)
    assert 500 * turns < expect < 2000 * turns  # far beyond exp's float range, within B_a
    if selector == "em":  # the closed form, as a check of the reference itself
        assert expect == pytest.approx(turns * (1000 + math.log(2 + math.exp(-0.5))), rel=1e-12)
    make = lambda s: MemView(policy, s, budget=ConstantBudget(EPS), scorer=TableScorer(), seed=0,  # noqa: E731
                             selector=selector)
    got = privacy_loss_of(make, m, mp, fixed_strategy([Q] * (turns + 1)), turns + 1)
    assert math.isfinite(got.max_loss) and got.max_loss == pytest.approx(expect, rel=1e-9)
    assert got.n_transcripts == 4 ** turns
    assert got.total_m == pytest.approx(1, abs=1e-12) and got.total_m_prime == pytest.approx(1, abs=1e-12)
    # the old float enumeration underflows to a spurious support mismatch on the same transcripts
    old = privacy_loss(transcript_distribution(make, m, fixed_strategy([Q] * (turns + 1)), turns + 1),
                       transcript_distribution(make, mp, fixed_strategy([Q] * (turns + 1)), turns + 1))
    assert old.max_loss == math.inf
    # the contract checker's own (lockstep) enumeration agrees and passes every condition
    rep = check_contract(lambda pol, s: make(s), policy, [("a", m, mp)], {"fixed": [Q]}, horizon=turns + 1,
                         samples=2)
    assert rep.passed, rep.table()
    assert rep.losses[0].max_loss == pytest.approx(expect, rel=1e-9)
    assert rep.losses[0].n_transcripts == got.n_transcripts


@pytest.mark.parametrize("selector, ref", [("em", ref_em), ("pf", ref_pf)])
def test_selector_log_probabilities_at_eps_2000(selector, ref):
    sel = exponential_mechanism() if selector == "em" else permute_and_flip()
    for us in (U_M, U_MP):
        got = selector_log_probabilities(sel, list(us), EPS, Fraction(1))
        with localcontext() as ctx:
            ctx.prec = D80
            want = [float(p.ln()) for p in ref(list(us), EPS, Fraction(1))]
        assert all(math.isfinite(g) for g in got)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("selector", ["em", "pf"])
def test_running_example_checker_at_eps_2000_passes_with_finite_losses(running, selector):
    """The old checker flagged a spurious C1 (underflowed views looked outside the support) and
    reported inf, or divided by a zero reach; the log-space walk passes, every loss within B_a,
    and its loss equals exact.py's."""
    policy, m, m_d, _ = running
    policy = policy.with_caps(2000)
    factory = lambda pol, s: MemView(pol, s, budget=OnlineBudget(1), seed=0, selector=selector)  # noqa: E731
    rep = check_contract(factory, policy, horizon=3, samples=1)
    assert rep.passed, rep.table()
    assert all(math.isfinite(loss.max_loss) and loss.ok for loss in rep.losses)
    assert max(loss.max_loss for loss in rep.losses) > 500
    rep1 = check_contract(factory, policy, [("diabetes", m, m_d)], {"dinner": [DINNER]}, horizon=2, samples=1)
    ref = privacy_loss_of(lambda s: factory(policy, s), m, m_d, fixed_strategy([DINNER] * 2), 2)
    assert math.isfinite(ref.max_loss) and rep1.losses[0].max_loss == pytest.approx(ref.max_loss, rel=1e-12)


def test_b5_counterexamples_at_eps0_2000_give_their_closed_forms():
    """N eps_0 / 2 exactly (was inf): the violation's size is measured, not a float artefact;
    the compliant MemView on the same construction stays within B_a."""
    for case in (incomplete_charge_case(n=4, eps0=2000, cap_a=1), no_cap_case(n=3, eps0=2000, cap_a=2000)):
        got = privacy_loss_of(case.factory(), case.m, case.m_prime, case.strategy, case.horizon)
        assert got.max_loss == pytest.approx(case.analytic_loss, rel=1e-12)
        ok = privacy_loss_of(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon)
        assert ok.max_loss <= float(case.bound) + 1e-9


@pytest.mark.parametrize("build", [capped_argmax_case, store_dependent_vocabulary_case])
def test_a_genuine_support_mismatch_is_still_inf_at_eps_2000(build):
    case = build(eps0=2000, cap_a=5000)
    got = privacy_loss_of(case.factory(), case.m, case.m_prime, case.strategy, case.horizon)
    assert got.max_loss == math.inf and case.analytic_loss == math.inf
    ok = privacy_loss_of(case.factory(MemView), case.m, case.m_prime, case.strategy, case.horizon)
    assert ok.max_loss == pytest.approx(1000, rel=1e-12)  # one compliant selection: eps_0 / 2


def test_log_privacy_loss_inf_only_on_a_support_mismatch():
    assert log_privacy_loss({"a": -1500.0, "b": 0.0}, {"a": -500.0, "b": 0.0}).max_loss == 1000.0
    pl = log_privacy_loss({"a": -1500.0, "b": 0.0}, {"b": 0.0})
    assert pl.max_loss == math.inf and pl.worst == "a" and pl.n_transcripts == 2
    assert log_privacy_loss({"a": -math.inf, "b": 0.0}, {"b": 0.0}).max_loss == 0.0
    assert log_add(-math.inf, -math.inf) == -math.inf
    assert log_add(-3.0, -math.inf) == -3.0
    assert log_add(-1000.0, -1000.0) == pytest.approx(-1000 + math.log(2), rel=1e-15)
    assert log_add(0.0, -800.0) == 0.0


# ---- small eps: the log-space enumeration equals the float one ------------------------------------
@pytest.mark.parametrize("selector", ["em", "pf"])
@pytest.mark.parametrize("intent", ["affordable_dinner", "meal_plan", "checkup_prep"])
def test_small_eps_log_enumeration_equals_the_float_enumeration(running, selector, intent):
    policy, m, m_d, m_b = running
    q = Query("q", intent)
    make = lambda s: MemView(policy, s, budget=OnlineBudget(3), seed=0, selector=selector)  # noqa: E731
    for mp in (m_d, m_b):
        for store in (m, mp):
            d = transcript_distribution(make, store, fixed_strategy([q] * 3), 3)
            ld = transcript_log_distribution(make, store, fixed_strategy([q] * 3), 3)
            assert set(d) == set(ld)
            for t, p in d.items():
                assert math.exp(ld[t]) == pytest.approx(p, rel=1e-12)
        old = privacy_loss(transcript_distribution(make, m, fixed_strategy([q] * 3), 3),
                           transcript_distribution(make, mp, fixed_strategy([q] * 3), 3))
        new = privacy_loss_of(make, m, mp, fixed_strategy([q] * 3), 3)
        assert new.max_loss == pytest.approx(old.max_loss, rel=1e-12, abs=1e-12)
        assert new.n_transcripts == old.n_transcripts
        assert new.total_m == pytest.approx(old.total_m, rel=1e-12)


def test_selector_log_probabilities_match_the_float_selectors_at_small_eps():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 7))
        us = [Fraction(int(x), 12) for x in rng.integers(0, 13, size=n)]
        eps = Fraction(int(rng.integers(1, 40)), 7)
        for sel, probs in ((exponential_mechanism(), em_probabilities), (permute_and_flip(), pf_probabilities)):
            got = np.exp(selector_log_probabilities(sel, us, eps, Fraction(3, 5)))
            assert got == pytest.approx(probs(us, eps, Fraction(3, 5)), rel=1e-12, abs=1e-300)
    custom = Selector("em", "custom Eq. (7)", lambda u, e, s: em_probabilities(u, e, s), sample_em,
                      sample_em_exact, "eps-DP")
    us = [Fraction(0), Fraction(1, 2), Fraction(1)]
    assert np.exp(selector_log_probabilities(custom, us, Fraction(1), Fraction(1))) == \
        pytest.approx(em_probabilities(us, 1, 1), rel=1e-15)
