"""MemView on the running example (Figure 2): charging, fallback, public-only release, variants."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from dpmv_lib.core.errors import (BudgetError, BudgetTypeError, ParameterError, ParameterTypeError, PolicyError,
                                  PolicyTypeError, QueryError, QueryTypeError, StoreError, StoreTypeError)
from dpmv_lib.core.ledger import InMemoryLedger, OnlineBudget, PreallocatedBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.releases import PreparedSlot, SlotPlan
from dpmv_lib.core.policy import Policy, Query
from dpmv_lib.core.store import MemoryStore
from dpmv_lib.checks.variants import (VARIANTS, CappedArgmax, IncompleteCharge, NoCap, ScoreChannel,
                               StoreDependentVocabulary)

TWO_THIRDS = Fraction(2, 3)


def test_first_dinner_turn_charges_every_affected_attribute(running, dinner):
    policy, m, _, _ = running
    rel = MemView(policy, m, budget=OnlineBudget(3), seed=0).release(dinner)
    food, finance = rel.slots
    assert (food.slot, finance.slot) == ("food", "finance")
    assert food.read_set == (2, 3) and food.affected == food.charged == {"diabetes", "debt"}
    assert finance.read_set == (4, 5) and finance.charged == {"debt"}
    assert food.epsilon == finance.epsilon == TWO_THIRDS
    assert food.mechanism == finance.mechanism == "em"
    assert food.view in policy.slot("food").view_ids and finance.view in policy.slot("finance").view_ids
    assert rel.spent == {"diabetes": TWO_THIRDS, "debt": 2 * TWO_THIRDS}


def test_figure2_food_falls_back_finance_charges_debt(running, dinner):
    """Figure 2: the diabetes ledger cannot afford the food selection (its read touches I_D and
    I_B), so food releases the generic view at zero cost; finance charges debt only."""
    policy, m, _, _ = running
    ledger = InMemoryLedger(policy.caps, spent={"diabetes": Fraction(3, 2)})
    rel = MemView(policy, m, ledger=ledger, seed=3).release(dinner)
    food, finance = rel.slots
    assert food.view == "food.generic" and food.fallback and food.mechanism == "generic"
    assert food.charged == frozenset() and food.epsilon == 0 and food.affected == {"diabetes", "debt"}
    assert finance.mechanism == "em" and finance.charged == {"debt"}
    assert rel.spent == {"diabetes": Fraction(3, 2), "debt": TWO_THIRDS}  # debt NOT charged for food
    assert [r.admitted for r in ledger.log] == [False, True]


def test_release_exposes_only_public_things(running, dinner):
    policy, m, _, _ = running
    mv = MemView(policy, m, seed=0)
    h = []
    for q in (dinner, Query("m", "meal_plan"), Query("c", "checkup_prep"), dinner):
        h.append(mv.release(q, h))
    text = json.dumps([r.public_dict() for r in h])
    for content in m.contents.values():
        assert content not in text
        for word in ("metformin", "collector", "A1C", "maxed"):
            assert word not in text
    for r in h:
        assert set(r.public_dict()) == {"query", "slots", "ledger"}
        for s in r.slots:
            assert s.extras == ()  # no internal score leaves (C3/C6)
            assert set(r.public_dict()["slots"][0]) == {"slot", "view", "read_set", "affected", "charged",
                                                        "epsilon", "mechanism", "fallback"}
    assert not any(isinstance(v, MemoryStore) for v in vars(h[0]).values())
    assert [g for g in h[0].guidance(policy)] == [policy.view(s.view).text for s in h[0].slots]


@pytest.mark.parametrize("exact", [True, False])
def test_seeded_runs_reproduce(running, dinner, exact):
    policy, m, _, _ = running

    def run(seed):
        mv = MemView(policy, m, seed=seed, exact=exact, budget=OnlineBudget(20))
        h = []
        for _ in range(10):
            h.append(mv.release(dinner, h))
        return [tuple(r.views.values()) for r in h]
    assert run(1) == run(1)
    assert len({tuple(run(s)) for s in range(6)}) > 1  # the draw is random across seeds


def test_empty_read_releases_generic_without_charge(policy_dict, running, dinner):
    policy_dict["reads"] = [{"intent": "affordable_dinner", "slot": "food", "positions": []}]
    policy = Policy.from_dict(policy_dict)
    m = MemoryStore.from_policy(policy, running[1].contents)
    rel = MemView(policy, m, seed=0).release(dinner)
    food = rel.slots[0]
    assert food.read_set == () and food.view == "food.generic" and not food.fallback
    assert food.charged == frozenset() and food.epsilon == 0
    assert rel.spent["diabetes"] == 0


def test_unplanned_preallocated_selection_falls_back(running, dinner):
    policy, m, _, _ = running
    mv = MemView(policy, m, budget=PreallocatedBudget({"diabetes": 1, "debt": 0}), seed=0)
    rel = mv.release(dinner)
    assert all(s.mechanism == "generic" for s in rel.slots)
    assert rel.spent == {"diabetes": 0, "debt": 0}


def test_bad_queries(running):
    policy, m, _, _ = running
    mv = MemView(policy, m, seed=0)
    with pytest.raises(QueryError, match="needs a Query"):
        mv.release("dinner?")
    with pytest.raises(QueryError, match="unknown query intent 'smalltalk'"):
        mv.release(Query("hi", "smalltalk"))
    assert mv.ledger.spent() == {"diabetes": 0, "debt": 0}


def test_fork_has_independent_ledger(running, dinner):
    policy, m, _, _ = running
    mv = MemView(policy, m, seed=0)
    twin = mv.fork()
    twin.release(dinner)
    assert mv.ledger.spent() == {"diabetes": 0, "debt": 0}
    assert twin.ledger.spent() != mv.ledger.spent()


# ---- the contract-violating variants are marked and break exactly their condition ----------
def test_variants_are_marked():
    assert MemView.violates is None
    assert {name: cls.violates for name, cls in VARIANTS.items() if cls is not MemView} == {
        "IncompleteCharge": "C2", "CappedArgmax": "C3", "NoCap": "C5", "ScoreChannel": "C6",
        "StoreDependentVocabulary": "C1"}


def test_incomplete_charge_drops_an_attribute(running, dinner):
    policy, m, _, _ = running
    rel = IncompleteCharge(policy, m, seed=0).release(dinner)
    assert rel.slots[0].affected == {"diabetes", "debt"} and rel.slots[0].charged == {"diabetes"}
    rel2 = IncompleteCharge(policy, m, seed=0, keep="debt").release(dinner)
    assert rel2.slots[0].charged == {"debt"}


def test_capped_argmax_is_deterministic(running, dinner):
    policy, m, _, _ = running
    views = {tuple(CappedArgmax(policy, m, seed=s).release(dinner).views.values()) for s in range(5)}
    assert views == {("food.low_sugar", "finance.strict_budget")}


def test_no_cap_exceeds_the_cap(running):
    policy, m, _, _ = running
    mv = NoCap(policy, m, seed=0)
    q = Query("c", "checkup_prep")
    h = []
    for _ in range(5):
        h.append(mv.release(q, h))
    assert h[-1].spent["diabetes"] == 5 * TWO_THIRDS > policy.caps["diabetes"]
    assert all(r.slots[0].mechanism == "em" for r in h)


def test_score_channel_and_store_vocabulary(running, dinner):
    policy, m, m_d, _ = running
    rel = ScoreChannel(policy, m, seed=0).release(dinner)
    assert dict(rel.slots[0].extras)["top_score"] == pytest.approx(1.0)
    assert dict(ScoreChannel(policy, m_d, seed=0).release(dinner).slots[0].extras)["top_score"] == pytest.approx(0.8)
    sdv_m, sdv_md = StoreDependentVocabulary(policy, m, seed=0), StoreDependentVocabulary(policy, m_d, seed=0)
    assert "food.low_sugar" in [v.id for v in sdv_m.vocabulary("food")]
    assert "food.low_sugar" not in [v.id for v in sdv_md.vocabulary("food")]
    assert [v.id for v in MemView(policy, m_d).vocabulary("food")] == list(policy.slot("food").view_ids)


def test_epsilon_follows_the_current_budget_rule_and_policy(running, dinner):
    """eps is computed once per charge set for OnlineBudget, but a replaced rule or policy is used
    at once, and any other rule is asked on every plan."""
    policy, m, _, _ = running
    mv = MemView(policy, m, budget=OnlineBudget(3), seed=0)
    assert mv.plan(dinner, "food").epsilon == Fraction(2, 3)
    mv.budget = OnlineBudget(4)
    assert mv.plan(dinner, "food").epsilon == Fraction(1, 2)
    mv.policy = policy.with_caps("1")
    assert mv.plan(dinner, "food").epsilon == Fraction(1, 4)

    class Counting:
        calls = 0

        def epsilon(self, charge_set, caps):
            Counting.calls += 1
            return Fraction(1, 10)

    mv.budget = Counting()
    assert [mv.plan(dinner, "food").epsilon for _ in range(3)] == [Fraction(1, 10)] * 3
    assert Counting.calls == 3


def test_shared_plans_and_generic_releases_change_nothing(running, policy_dict, tmp_path):
    """With OnlineBudget and MemView's own charge set, a plan is built once per (slot, R) and a
    blocked slot's generic release is shared between turns: the transcript, the ledger and the
    random draws are exactly those of a MemView that builds everything anew (here: one whose
    overridden _epsilon turns the sharing off). The meal plan reads less of the food slot than
    the dinner query (two plans for one slot). With a durable ledger (one transaction per
    release: ``_admit_batch``) a blocked slot's shared release is taken without ``prepare``."""
    from dpmv_lib.ledgers.sqlite import SqliteLedger

    m = running[1]
    policy_dict["reads"] = [{"intent": "meal_plan", "slot": "food", "positions": [2]}]
    policy = Policy.from_dict(policy_dict)

    class Unshared(MemView):
        def _epsilon(self, charged):
            return super()._epsilon(charged)

    queries = [Query("Any ideas for an affordable dinner?", "affordable_dinner"),
               Query("Plan my meals this week", "meal_plan"), Query("How is my budget?", "budget_check")]
    for exact, durable in ((True, False), (False, False), (True, True)):
        def ledger(name):
            return {"ledger": SqliteLedger.for_policy(tmp_path / f"{name}.db", "u", policy)} if durable else {}  # noqa: B023 - called within the iteration
        a = MemView(policy, m, budget=OnlineBudget(3), seed=5, exact=exact, **ledger("a"))
        b = Unshared(policy, m, budget=OnlineBudget(3), seed=5, exact=exact, **ledger("b"))
        ha, hb = [], []
        for t in range(12):
            q = queries[t % 3]
            ra, rb = a.release(q, ha), b.release(q, hb)
            assert ra == rb and json.dumps(ra.public_dict()) == json.dumps(rb.public_dict())
            ha.append(ra)
            hb.append(rb)
        assert a.ledger.spent() == b.ledger.spent()
        assert [(r.attributes, r.epsilon, r.admitted) for r in a.ledger.log] == \
            [(r.attributes, r.epsilon, r.admitted) for r in b.ledger.log]
        assert a._memos().plain and not b._memos().pure
        blocked = [s for r in ha for s in r.slots if s.mechanism == "generic"]
        assert len(blocked) > len({id(s) for s in blocked})  # shared between turns ...
        blocked_b = [s for r in hb for s in r.slots if s.mechanism == "generic"]
        assert len(blocked_b) == len({id(s) for s in blocked_b})  # ... and not without sharing
        if durable:  # a fresh ledger (same caps): the slots blocked before are admitted again
            for mv, name in ((a, "a2"), (b, "b2")):
                mv.ledger.close()
                mv.ledger = SqliteLedger.for_policy(tmp_path / f"{name}.db", "u", policy)
            ra, rb = a.release(queries[0]), b.release(queries[0])
            assert ra == rb and [s.mechanism for s in ra.slots] == ["em", "em"]
            a.ledger.close()
            b.ledger.close()
    # a replaced budget rule or policy starts a new memo (see also the eps test above)
    a.budget = OnlineBudget(4)
    assert a.plan(queries[0], "food").epsilon == Fraction(1, 2)


def test_the_public_steps_are_release(running, dinner):
    """route -> plan -> prepare (admit, score) -> select -> make_release, called one by one,
    give exactly what release() gives: the same views, ledger and random draws."""
    policy, m, _, _ = running
    queries = [dinner, Query("Plan my meals this week", "meal_plan"), Query("How is my budget?", "budget_check")]
    for exact in (True, False):
        for selector in ("em", "pf"):
            a = MemView(policy, m, budget=OnlineBudget(3), seed=7, exact=exact, selector=selector)
            b = MemView(policy, m, budget=OnlineBudget(3), seed=7, exact=exact, selector=selector)
            ha, hb = [], []
            for t in range(8):
                q = queries[t % 3]
                plans = [b.plan(q, g, hb) for g in b.route(q, hb)]
                slots = [b.select(b.prepare(q, p.slot, hb, p)) for p in plans]
                ra, rb = a.release(q, ha), b.make_release(q, slots)
                assert ra == rb
                ha.append(ra)
                hb.append(rb)
            assert a.ledger.spent() == b.ledger.spent()
    prep = MemView(policy, m, seed=0).prepare(dinner, "food")
    assert isinstance(prep, PreparedSlot) and prep.admitted and len(prep.views) == len(prep.utilities)
    with pytest.raises(AttributeError):
        prep.admitted = False  # frozen


def test_wrong_types_raise_typed_errors(running, dinner):
    """A wrong type raises the domain's TypeError subclass (also its old domain error and a
    TypeError); a wrong value keeps the ValueError-based error."""
    policy, m, _, _ = running
    mv = MemView(policy, m, seed=0)
    plan = mv.plan(dinner, "food")
    cases = [
        (lambda: MemView("policy", m), PolicyTypeError, PolicyError),
        (lambda: MemView(policy, {"1": "x"}), StoreTypeError, StoreError),
        (lambda: MemView(policy, m, budget=3), BudgetTypeError, BudgetError),
        (lambda: MemView(policy, m, ledger=object()), BudgetTypeError, BudgetError),
        (lambda: MemView(policy, m, scorer=lambda q, v, c: 0.5), BudgetTypeError, BudgetError),
        (lambda: MemView(policy, m, seed="1"), ParameterTypeError, ParameterError),
        (lambda: MemView(policy, m, seed=1.0), ParameterTypeError, ParameterError),
        (lambda: MemView(policy, m, selector=3), ParameterTypeError, ParameterError),
        (lambda: mv.release("dinner"), QueryTypeError, QueryError),
        (lambda: mv.release(dinner, "h"), QueryTypeError, QueryError),
        (lambda: mv.release(dinner, [dinner]), QueryTypeError, QueryError),
        (lambda: mv.plan(dinner, 3), QueryTypeError, QueryError),
        (lambda: mv.route("dinner"), QueryTypeError, QueryError),
        (lambda: mv.prepare(dinner, "food", (), plan="p"), ParameterTypeError, ParameterError),
        (lambda: mv.make_release("dinner", []), QueryTypeError, QueryError),
    ]
    for fn, typed, domain in cases:
        with pytest.raises(typed) as info:
            fn()
        assert isinstance(info.value, domain) and isinstance(info.value, TypeError)
    for fn, error in [(lambda: MemView(policy, m, seed=-1), ParameterError),
                      (lambda: MemView(policy, m, selector="argmax"), ParameterError),
                      (lambda: mv.release(Query("hi", "smalltalk")), QueryError)]:
        with pytest.raises(error) as info:
            fn()
        assert not isinstance(info.value, TypeError)
    assert mv.ledger.spent() == {"diabetes": 0, "debt": 0} and isinstance(plan, SlotPlan)


def test_a_private_hook_name_is_refused():
    """A subclass overriding a private hook name that MemView never calls (``_sample`` for the
    public ``select``) would silently not take effect: it is refused."""
    with pytest.raises(TypeError, match="override select instead"):
        class PrivateHook(MemView):  # noqa: F841
            def _sample(self, prep):
                return None
