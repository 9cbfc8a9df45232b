"""Property tests (hypothesis) of the pathwise invariants behind Theorem 1:

* L_a <= B_a after every turn on every path (C5);
* every admitted read is charged to all of Gamma*(R) at the plan's eps (C2);
* the fallback costs nothing and leaves every ledger unchanged (C5);
* same released prefix + adjacent stores -> same read set, charge set, eps and budget branch
  (routing and the cap check do not depend on memory, C4).
"""
from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmv_lib.checks.instances import random_case
from dpmv_lib.core.ledger import InMemoryLedger
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.releases import Release
from dpmv_lib.core.policy import Query

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def runs(draw):
    seed = draw(st.integers(0, 10_000))
    case = random_case(seed, adaptive=draw(st.booleans()), levels=draw(st.sampled_from([1, 4])))
    intents = case.policy.intents
    queries = [Query(f"q{t}", intents[i]) for t, i in
               enumerate(draw(st.lists(st.integers(0, len(intents) - 1), min_size=3, max_size=10)))]
    mode = draw(st.sampled_from(["online", "pre"]))
    budget = case.budget("online", K=draw(st.integers(1, 4))) if mode == "online" else case.budget("pre")
    return case, queries, budget, draw(st.integers(0, 2**31)), draw(st.booleans())


def _run(iface: MemView, queries) -> list[Release]:
    history: list[Release] = []
    for q in queries:
        history.append(iface.release(q, history))
    return history


def _check_path(policy, history: list[Release]) -> None:
    caps = policy.caps
    before = {a: Fraction(0) for a in caps}
    for rel in history:
        delta = {a: Fraction(0) for a in caps}
        for s in rel.slots:
            gamma_star = policy.charge_set(s.read_set)
            assert s.affected == gamma_star
            if s.mechanism == "em":
                assert s.charged >= gamma_star, "C2: a read was not charged to every affected attribute"
                assert s.charged == gamma_star
                assert s.epsilon > 0
                for a in s.charged:
                    delta[a] += s.epsilon
            else:  # fixed generic view: zero cost
                assert s.mechanism == "generic"
                assert s.view == policy.slot(s.slot).generic.id
                assert s.charged == frozenset() and s.epsilon == 0
                assert s.fallback == bool(s.read_set)
        after = rel.spent
        for a in caps:
            assert after[a] == before[a] + delta[a], "the ledger moved by something other than admitted charges"
            assert after[a] <= caps[a], f"C5: L_{a} = {after[a]} > B_{a} = {caps[a]}"
        before = after


@SETTINGS
@given(runs())
def test_pathwise_invariants(run):
    case, queries, budget, seed, exact = run
    iface = MemView(case.policy, case.m, budget=budget, scorer=case.scorer, seed=seed, exact=exact)
    history = _run(iface, queries)
    _check_path(case.policy, history)
    # the audit log agrees: refused charges changed nothing
    spent = {a: Fraction(0) for a in case.policy.caps}
    for rec in iface.ledger.log:
        if rec.admitted:
            for a in rec.attributes:
                spent[a] += rec.epsilon
        assert dict(rec.remaining) == {a: case.policy.caps[a] - spent[a] for a in rec.attributes}
    assert spent == iface.ledger.spent()


@SETTINGS
@given(runs())
def test_same_prefix_same_plan_under_adjacent_stores(run):
    """Feed the history released under M to an interface on M': every slot-level operation has
    the same read set, charge set, eps and budget branch, and the ledgers stay equal (C4)."""
    case, queries, budget, seed, exact = run
    on_m = MemView(case.policy, case.m, budget=budget, scorer=case.scorer, seed=seed, exact=exact)
    on_mp = MemView(case.policy, case.m_prime, budget=budget, scorer=case.scorer, seed=seed + 1, exact=exact)
    history: list[Release] = []
    for q in queries:
        for slot in case.policy.route(q, history):
            assert on_m.plan(q, slot, history) == on_mp.plan(q, slot, history)
        rel = on_m.release(q, history)
        rel_p = on_mp.release(q, history)
        assert [s.slot for s in rel.slots] == [s.slot for s in rel_p.slots]
        for s, sp in zip(rel.slots, rel_p.slots):
            assert (s.read_set, s.affected, s.charged, s.epsilon, s.mechanism, s.fallback) == \
                   (sp.read_set, sp.affected, sp.charged, sp.epsilon, sp.mechanism, sp.fallback)
        assert rel.ledger == rel_p.ledger
        history.append(rel)


@settings(max_examples=60, deadline=None)
@given(caps=st.dictionaries(st.sampled_from("abcd"), st.fractions(Fraction(1, 4), 3), min_size=1),
       ops=st.lists(st.tuples(st.sets(st.sampled_from("abcd")), st.fractions(0, 2)), max_size=25))
def test_ledger_matches_reference_model(caps, ops):
    """InMemoryLedger vs a one-line model of C5 on random charge sequences."""
    led = InMemoryLedger(caps)
    model = {a: Fraction(0) for a in caps}
    for attrs, eps in ops:
        attrs = frozenset(a for a in attrs if a in caps)
        expect = all(model[a] + eps <= caps[a] for a in attrs)
        assert led.try_charge(attrs, eps) is expect
        if expect:
            for a in attrs:
                model[a] += eps
        assert led.spent() == model
        assert all(model[a] <= caps[a] for a in caps)
