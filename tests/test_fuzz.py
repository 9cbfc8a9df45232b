"""Hostile input (hypothesis): every bad policy, store, query or API call gets a typed dpmv error
(a DPMVError subclass) with a message, never a bare KeyError/TypeError/AttributeError, and no
ledger changes on a rejected call."""
from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.ledgers.records import import_state, parse_state
from dpmv_lib.ledgers.records import replay
from dpmv_lib.core.errors import DPMVError
from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY, running_example
from dpmv_lib.core.ledger import InMemoryLedger, OnlineBudget, PreallocatedBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Policy, Query
from dpmv_lib.core.store import MemoryStore

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FEW = settings(FUZZ, max_examples=60)

POLICY, M, M_D, _ = running_example()
DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")


class Weird:
    """An arbitrary non-data object."""

    def __repr__(self) -> str:
        return "<Weird>"


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["2", "2/3", "0", "-1", "1/0", "nan", "inf", "food",
                                                          "diabetes", "debt", "health.generic"]),
                    st.fractions(), st.just(Weird()), st.binary(max_size=4))
json_like = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 9)),
                                                                      c, max_size=4),
                                                      st.sets(st.integers(0, 6), max_size=3)),
                         max_leaves=12)


def expect_typed(fn, *args, **kwargs) -> Any:
    """Run fn; it may succeed or raise a DPMVError with a non-empty message - nothing else."""
    try:
        return fn(*args, **kwargs)
    except DPMVError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return exc
    except Exception as exc:  # pragma: no cover - the failure we hunt
        pytest.fail(f"{fn.__name__} raised untyped {type(exc).__name__}: {exc!r}")


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


PATHS = _paths(RUNNING_EXAMPLE_POLICY)[1:]


@st.composite
def mutated_policies(draw) -> Any:
    """The running-example policy with 1-3 nodes replaced by junk or deleted."""
    d = copy.deepcopy(RUNNING_EXAMPLE_POLICY)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent = d
        try:
            for k in path[:-1]:
                parent = parent[k]
            if draw(st.booleans()):
                parent[path[-1]] = draw(json_like)
            elif isinstance(parent, dict):
                del parent[path[-1]]
            elif isinstance(parent, list):
                parent.pop(path[-1])
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    return d


@FUZZ
@given(mutated_policies())
def test_policy_from_dict_mutations(data):
    out = expect_typed(Policy.from_dict, data)
    if isinstance(out, Policy):  # accepted: it must be usable and serialisable
        assert len(out.fingerprint()) == 64
        assert Policy.from_dict(out.to_dict()).fingerprint() == out.fingerprint()


@FEW
@given(json_like)
def test_policy_from_dict_junk(data):
    expect_typed(Policy.from_dict, data)


@FEW
@given(st.text(max_size=200))
def test_policy_file_junk(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("pol") / "p.json"
    path.write_text(text)
    expect_typed(Policy.load, path)


@FUZZ
@given(json_like, json_like)
def test_store_junk(layout, contents):
    expect_typed(MemoryStore, layout, contents)
    expect_typed(MemoryStore.from_policy, POLICY, contents)
    expect_typed(M.replace, contents)
    expect_typed(M.read, layout)


@FUZZ
@given(json_like, json_like, json_like)
def test_query_and_release_junk(text, intent, history):
    mv = MemView(POLICY, M, seed=0)
    before, n = mv.ledger.spent(), len(mv.ledger.log)
    q = expect_typed(Query, text, intent)
    for query in ([q] if isinstance(q, Query) else []) + [text, intent, DINNER]:
        out = expect_typed(mv.release, query, history)
        if isinstance(out, DPMVError):
            assert mv.ledger.spent() == before and len(mv.ledger.log) == n  # rejected: unchanged
        else:
            before, n = mv.ledger.spent(), len(mv.ledger.log)
    expect_typed(mv.plan, text, intent, history)
    expect_typed(mv.plan, DINNER, intent, history)
    expect_typed(mv.plan, DINNER, intent)


def test_release_rejects_wrong_history_before_charging():
    mv = MemView(POLICY, M, seed=0)
    rel = mv.release(DINNER)
    spent, n = mv.ledger.spent(), len(mv.ledger.log)
    for bad in (5, None, "abc", [rel, "x"], [{"query": "x"}], {"a": 1}, [1.5]):
        with pytest.raises(DPMVError, match="history"):
            mv.release(DINNER, bad)
    for bad in (None, "dinner", {"intent": "affordable_dinner"}, Query("x", "no_such_intent")):
        with pytest.raises(DPMVError):
            mv.release(bad)
    with pytest.raises(DPMVError, match="slot"):
        mv.plan(DINNER, "no_such_slot")
    assert mv.ledger.spent() == spent and len(mv.ledger.log) == n


def test_rejected_release_is_atomic_for_a_bad_read_policy():
    """A read policy that fails on the second active slot must not leave the first one charged."""

    class BadReader:
        def read(self, query, slot, history=()):
            return (2, 3) if slot == "food" else (99,)

    policy = Policy(POLICY.name, POLICY.slots, POLICY.positions, POLICY.attributes, POLICY.router, BadReader(),
                    POLICY.sensitivity, POLICY.intents)
    mv = MemView(policy, M, seed=0)
    with pytest.raises(DPMVError, match="outside slot"):
        mv.release(DINNER)
    assert all(v == 0 for v in mv.ledger.spent().values()) and mv.ledger.log == []


@FUZZ
@given(json_like, json_like, json_like, json_like, json_like)
def test_memview_constructor_junk(store, budget, ledger, seed, scorer):
    for kwargs in ({"budget": budget}, {"ledger": ledger}, {"seed": seed}, {"scorer": scorer}):
        expect_typed(MemView, POLICY, M, **kwargs)
    expect_typed(MemView, POLICY, store)
    expect_typed(MemView, store, M)


@FUZZ
@given(json_like, json_like)
def test_in_memory_ledger_junk(attributes, epsilon):
    led = InMemoryLedger(POLICY.caps)
    led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    before, n = led.spent(), len(led.log)
    for call in (led.try_charge, led.charge_unchecked):
        out = expect_typed(call, attributes, epsilon)
        if isinstance(out, DPMVError):
            assert led.spent() == before and len(led.log) == n
        before, n = led.spent(), len(led.log)
    expect_typed(InMemoryLedger, attributes)
    expect_typed(InMemoryLedger, {"debt": epsilon})
    expect_typed(InMemoryLedger, POLICY.caps, attributes)


@pytest.fixture(scope="module")
def sqlite_ledger(tmp_path_factory):
    led = SqliteLedger.for_policy(tmp_path_factory.mktemp("fuzz") / "l.db", "fuzz", POLICY)
    yield led
    led.close()


@FEW
@given(json_like, json_like)
def test_sqlite_ledger_junk(sqlite_ledger, attributes, epsilon):
    led = sqlite_ledger
    before, n = led.spent(), len(led.log)
    out = expect_typed(led.try_charge, attributes, epsilon)
    if isinstance(out, DPMVError):
        assert led.spent() == before and len(led.log) == n
    for a in led.caps:
        assert led.spent()[a] <= led.caps[a]
    expect_typed(led.import_state, attributes)


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1, -1e-300, "x", None, [1], {"a": 1}, True,
                                 Fraction(-1, 3), "1/0", object(), complex(1, 1)])
@pytest.mark.parametrize("attrs", [frozenset({"debt"}), {"salary"}, "debt", 5, None, [["debt"]], {"debt", 3}])
def test_every_bad_charge_is_typed_and_changes_nothing(attrs, eps):
    led = InMemoryLedger(POLICY.caps)
    with pytest.raises(DPMVError) as exc:
        led.try_charge(attrs, eps)
    assert str(exc.value)
    assert led.spent() == {a: 0 for a in POLICY.caps} and led.log == []


@FUZZ
@given(json_like)
def test_budget_rules_junk(x):
    expect_typed(OnlineBudget, x)
    expect_typed(PreallocatedBudget, x)
    expect_typed(PreallocatedBudget, {"debt": x})


@FUZZ
@given(json_like)
def test_ledger_state_junk(state):
    expect_typed(parse_state, state)
    expect_typed(import_state, state, POLICY.fingerprint())
    expect_typed(replay, state, POLICY.caps)
    expect_typed(replay, [state], POLICY.caps)


@FEW
@given(st.data())
def test_mutated_ledger_state(data):
    """A valid exported state with one field replaced by junk: accepted only if still consistent."""
    mv = MemView(POLICY, M, seed=1)
    for _ in range(2):
        mv.release(DINNER)
    from dpmv_lib.ledgers.chain import export_state
    state = json.loads(json.dumps(export_state(mv.ledger, POLICY.fingerprint(), "u")))
    path = data.draw(st.sampled_from(_paths(state)[1:]))
    parent = state
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = data.draw(json_like)
    out = expect_typed(import_state, state, POLICY.fingerprint())
    if isinstance(out, InMemoryLedger):
        assert replay(out.log, out.caps) == out.spent()
        assert all(out.spent()[a] <= out.caps[a] for a in out.caps)


def test_nan_and_inf_never_enter_a_policy():
    for cap in (float("nan"), float("inf"), -1.0, 0, "abc", None, [2]):
        d = copy.deepcopy(RUNNING_EXAMPLE_POLICY)
        d["attributes"][0]["cap"] = cap
        with pytest.raises(DPMVError, match="cap"):
            Policy.from_dict(d)
    d = copy.deepcopy(RUNNING_EXAMPLE_POLICY)
    d["sensitivity"] = math.nan
    with pytest.raises(DPMVError, match="sensitivity"):
        Policy.from_dict(d)
