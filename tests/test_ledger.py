"""Ledgers (exact arithmetic, C5 prospective check on EVERY charged attribute) and budget rules."""
from __future__ import annotations

import threading
from fractions import Fraction

import pytest

from dpmv_lib.core.errors import BudgetError, UnknownAttributeError
from dpmv_lib.core.ledger import (InMemoryLedger, OnlineBudget, PreallocatedBudget, planned_charges)
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query

TWO_THIRDS = Fraction(2, 3)


def test_three_charges_of_two_thirds_fill_a_cap_of_two_exactly():
    led = InMemoryLedger({"a": 2})
    assert [led.try_charge(frozenset({"a"}), TWO_THIRDS) for _ in range(3)] == [True, True, True]
    assert led.spent() == {"a": Fraction(2)}
    assert led.remaining() == {"a": Fraction(0)}
    assert led.try_charge(frozenset({"a"}), TWO_THIRDS) is False  # a fourth is refused
    assert led.spent() == {"a": Fraction(2)}
    assert [r.admitted for r in led.log] == [True, True, True, False]


def test_string_and_float_epsilons_are_read_exactly():
    led = InMemoryLedger({"a": "2"})
    for eps in ("2/3", Fraction(2, 3), "2/3"):
        assert led.try_charge(frozenset({"a"}), eps)
    assert led.spent()["a"] == 2
    led2 = InMemoryLedger({"a": 1})
    for _ in range(10):
        assert led2.try_charge(frozenset({"a"}), 0.1)  # 0.1 is read as 1/10
    assert led2.spent()["a"] == 1
    assert not led2.try_charge(frozenset({"a"}), 0.1)


@pytest.mark.parametrize("binding", ["a", "b", "c"])
def test_check_applies_to_every_attribute_and_failure_changes_nothing(binding):
    caps = {"a": 2, "b": 2, "c": 2}
    caps[binding] = 1  # only this attribute cannot afford a second charge
    led = InMemoryLedger(caps)
    everything = frozenset(caps)
    assert led.try_charge(everything, TWO_THIRDS)
    before = led.spent()
    assert led.try_charge(everything, TWO_THIRDS) is False
    assert led.spent() == before == {"a": TWO_THIRDS, "b": TWO_THIRDS, "c": TWO_THIRDS}
    # charges that avoid the binding attribute still go through
    others = everything - {binding}
    assert led.try_charge(others, TWO_THIRDS)
    assert led.spent()[binding] == TWO_THIRDS
    assert all(led.spent()[a] == 2 * TWO_THIRDS for a in others)


def test_empty_charge_set_is_free():
    led = InMemoryLedger({"a": 1})
    assert led.try_charge(frozenset(), Fraction(5))
    assert led.spent() == {"a": 0}


def test_bad_ledger_calls_raise_and_change_nothing():
    led = InMemoryLedger({"a": 1, "b": 1})
    with pytest.raises(UnknownAttributeError, match="'cancer'"):
        led.try_charge(frozenset({"a", "cancer"}), Fraction(1, 2))
    with pytest.raises(BudgetError, match="epsilon must be >= 0"):
        led.try_charge(frozenset({"a"}), -1)
    with pytest.raises(BudgetError, match="epsilon must be finite"):
        led.try_charge(frozenset({"a"}), float("nan"))
    with pytest.raises(BudgetError, match="epsilon must be finite"):
        led.try_charge(frozenset({"a"}), float("inf"))
    assert led.spent() == {"a": 0, "b": 0} and led.log == []
    with pytest.raises(BudgetError, match="at least one attribute cap"):
        InMemoryLedger({})
    with pytest.raises(BudgetError, match="cap of 'a' must be > 0"):
        InMemoryLedger({"a": 0})
    with pytest.raises(BudgetError, match="cap of 'a' must be finite"):
        InMemoryLedger({"a": float("inf")})
    with pytest.raises(UnknownAttributeError, match="'z'"):
        InMemoryLedger({"a": 1}, spent={"z": 0})
    with pytest.raises(BudgetError, match="spent budget of 'a'"):
        InMemoryLedger({"a": 1}, spent={"a": -1})


def test_copy_is_independent_and_unchecked_charge_is_visible():
    led = InMemoryLedger({"a": 1})
    twin = led.copy()
    led.charge_unchecked(frozenset({"a"}), Fraction(3, 2))  # only NoCap may do this
    assert led.spent()["a"] == Fraction(3, 2) > led.caps["a"]
    assert twin.spent()["a"] == 0


def test_concurrent_charges_never_exceed_the_cap():
    led = InMemoryLedger({"a": 2, "b": 5})
    results: list[bool] = []
    lock = threading.Lock()

    def worker():
        for _ in range(50):
            ok = led.try_charge(frozenset({"a", "b"}), Fraction(1, 7))
            with lock:
                results.append(ok)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 14  # floor(2 / (1/7))
    assert led.spent() == {"a": Fraction(2), "b": Fraction(2)}


# ---- budget rules --------------------------------------------------------------------------
def test_online_budget():
    caps = {"diabetes": Fraction(2), "debt": Fraction(1)}
    assert OnlineBudget(3).epsilon(frozenset({"diabetes"}), caps) == TWO_THIRDS
    assert OnlineBudget(3).epsilon(frozenset({"diabetes", "debt"}), caps) == Fraction(1, 3)  # min_a B_a / K
    for bad in (0, -1, 1.5, True):
        with pytest.raises(BudgetError, match="granularity K"):
            OnlineBudget(bad)


def test_preallocated_budget_and_planned_charges(running, dinner):
    policy = running[0]
    meal = Query("Plan meals", "meal_plan")
    plan = planned_charges(policy, [dinner, meal, Query("b", "budget_check")])
    assert plan == {"diabetes": 2, "debt": 4}
    rule = PreallocatedBudget(plan)
    caps = policy.caps
    assert rule.epsilon(frozenset({"diabetes"}), caps) == 1
    assert rule.epsilon(frozenset({"debt"}), caps) == Fraction(1, 2)
    assert rule.epsilon(frozenset({"diabetes", "debt"}), caps) == Fraction(1, 2)  # min_a B_a / C_a
    assert PreallocatedBudget({"diabetes": 2, "debt": 0}).epsilon(frozenset({"debt"}), caps) is None
    assert PreallocatedBudget({}).epsilon(frozenset(), caps) is None
    with pytest.raises(BudgetError, match="C_debt"):
        PreallocatedBudget({"debt": -1})
    # the planned selections all fit: debt (the binding attribute) is exhausted exactly,
    # diabetes is charged the shared eps = 1/2 twice
    mv = MemView(policy, running[1], budget=rule, seed=0)
    h = []
    for q in [dinner, meal, Query("b", "budget_check")]:
        h.append(mv.release(q, h))
    assert h[-1].spent == {"diabetes": 1, "debt": 2}
    assert all(not s.fallback for r in h for s in r.slots)


def test_memview_with_online_budget_admits_three_then_falls_back(running):
    policy, m, _, _ = running
    mv = MemView(policy, m, budget=OnlineBudget(3), seed=0)
    q = Query("checkup", "checkup_prep")  # health slot, diabetes only
    rels = []
    for _ in range(4):
        rels.append(mv.release(q, rels))
    assert [r.slots[0].mechanism for r in rels] == ["em", "em", "em", "generic"]
    assert [r.spent["diabetes"] for r in rels] == [TWO_THIRDS, 2 * TWO_THIRDS, 2, 2]
    assert rels[-1].slots[0].view == "health.generic" and rels[-1].slots[0].fallback


def test_memview_rejects_mismatched_ledger_or_scorer(running):
    policy, m, _, _ = running
    with pytest.raises(BudgetError, match="do not match the policy caps"):
        MemView(policy, m, ledger=InMemoryLedger({"diabetes": 2, "debt": 1}))

    class Loud:
        sensitivity = Fraction(1)

        def __call__(self, q, v, x):
            return 0.0
    with pytest.raises(BudgetError, match="exceeds the policy's fixed bound"):
        MemView(policy, m, scorer=Loud())
