"""Policy: the public maps of the paper (Gamma*, routing, reads) and validation of malformed policies."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction

import pytest

from dpmv_lib.core.errors import PolicyError, QueryError, UnknownAttributeError
from dpmv_lib.core.policy import Policy, Query


# ---- the running example's public maps -----------------------------------------------------
def test_running_example_groups_overlap_at_position_3(running):
    policy = running[0]
    assert policy.attribute("diabetes").group == frozenset({1, 2, 3})
    assert policy.attribute("debt").group == frozenset({3, 4, 5})
    assert policy.attribute("diabetes").group & policy.attribute("debt").group == {3}
    assert policy.caps == {"diabetes": Fraction(2), "debt": Fraction(2)}
    assert policy.sensitivity == Fraction(3, 5)


@pytest.mark.parametrize("read,expected", [
    ((2, 3), {"diabetes", "debt"}),  # Eq. (5): position 3 touches both groups
    ((2,), {"diabetes"}),
    ((4, 5), {"debt"}),
    ((3,), {"diabetes", "debt"}),
    ((6,), set()),
    ((), set()),
])
def test_charge_set_is_every_touched_attribute(running, read, expected):
    assert running[0].charge_set(read) == frozenset(expected)


def test_route_and_read_are_public_maps(running, dinner):
    policy = running[0]
    assert policy.route(dinner) == ("food", "finance")
    assert policy.read(dinner, "food") == (2, 3)
    assert policy.read(dinner, "finance") == (4, 5)
    assert policy.positions_of("health") == (1,)


def test_read_override_from_json(policy_dict, dinner):
    policy_dict["reads"] = [{"intent": "affordable_dinner", "slot": "food", "positions": [3]}]
    policy = Policy.from_dict(policy_dict)
    assert policy.read(dinner, "food") == (3,)
    assert policy.read(Query("x", "meal_plan"), "food") == (2, 3)


def test_roundtrip_save_load_and_fingerprint(running, tmp_path):
    policy = running[0]
    path = tmp_path / "policy.json"
    policy.save(path)
    again = Policy.load(path)
    assert again.to_dict() == policy.to_dict()
    assert again.fingerprint() == policy.fingerprint()
    assert policy.with_caps(1).fingerprint() != policy.fingerprint()


def test_with_caps_is_exact_and_validated(running):
    policy = running[0]
    p2 = policy.with_caps({"debt": "2/3"})
    assert p2.caps == {"diabetes": Fraction(2), "debt": Fraction(2, 3)}
    assert policy.caps["debt"] == 2  # the original is unchanged (frozen)
    assert Policy.from_dict(p2.to_dict()).caps == p2.caps
    with pytest.raises(UnknownAttributeError, match="cancer"):
        policy.with_caps({"cancer": 1})
    with pytest.raises(PolicyError, match="debt"):
        policy.with_caps({"debt": 0})


def test_unknown_attribute_is_typed_and_named(running):
    with pytest.raises(UnknownAttributeError) as exc:
        running[0].attribute("cancer")
    assert "cancer" in str(exc.value) and "diabetes" in str(exc.value)
    assert isinstance(exc.value, PolicyError) and isinstance(exc.value, KeyError)


def test_unknown_slot_view_and_intent(running):
    policy = running[0]
    with pytest.raises(PolicyError, match="unknown slot 'travel'"):
        policy.slot("travel")
    with pytest.raises(PolicyError, match="unknown view 'food.nope'"):
        policy.view("food.nope")
    with pytest.raises(QueryError, match="unknown query intent 'smalltalk'"):
        policy.route(Query("hi", "smalltalk"))
    with pytest.raises(QueryError, match="intent"):
        Query("hi", "")


# ---- malformed policies --------------------------------------------------------------------
def _attr(d, name):
    return next(a for a in d["attributes"] if a["name"] == name)


def _slot(d, name):
    return next(s for s in d["slots"] if s["name"] == name)


def _set(path_fn, value):
    def mutate(d):
        path_fn(d, value)
    return mutate


MALFORMED = {
    "group names unknown position": (lambda d: _attr(d, "diabetes").update(group=[1, 2, 99]),
                                     r"group I_a of attribute 'diabetes' names unknown positions \[99\]"),
    "empty group": (lambda d: _attr(d, "debt").update(group=[]), r"'debt' has an empty group"),
    "group not integers": (lambda d: _attr(d, "debt").update(group=["3"]), r"group of attribute 'debt'"),
    "slot without generic view": (lambda d: _slot(d, "food")["views"][0].update(generic=False),
                                  r"slot 'food' must have exactly one fixed generic view, has 0"),
    "slot with two generic views": (lambda d: _slot(d, "food")["views"][1].update(generic=True),
                                    r"slot 'food' must have exactly one fixed generic view, has 2"),
    "duplicate view id in a slot": (lambda d: _slot(d, "food")["views"][2].update(id="food.low_sugar"),
                                    r"duplicate view id 'food.low_sugar'"),
    "duplicate view id across slots": (lambda d: _slot(d, "work")["views"][1].update(id="food.cheap"),
                                       r"duplicate view id 'food.cheap'"),
    "empty vocabulary": (lambda d: _slot(d, "work").update(views=[]), r"slot 'work' has an empty view vocabulary"),
    "view without text": (lambda d: _slot(d, "work")["views"][1].pop("text"),
                          r"view of slot 'work' needs 'id' and 'text'"),
    "zero cap": (lambda d: _attr(d, "debt").update(cap="0"), r"cap B_a of attribute 'debt' must be > 0"),
    "negative cap": (lambda d: _attr(d, "debt").update(cap=-1), r"cap B_a of attribute 'debt' must be > 0"),
    "NaN cap (float)": (lambda d: _attr(d, "debt").update(cap=math.nan), r"cap B_a of attribute 'debt' must be finite"),
    "inf cap (float)": (lambda d: _attr(d, "debt").update(cap=math.inf), r"cap B_a of attribute 'debt' must be finite"),
    "NaN cap (string)": (lambda d: _attr(d, "debt").update(cap="nan"),
                         r"cap B_a of attribute 'debt' is not a valid number"),
    "inf cap (string)": (lambda d: _attr(d, "debt").update(cap="inf"),
                         r"cap B_a of attribute 'debt' is not a valid number"),
    "bool cap": (lambda d: _attr(d, "debt").update(cap=True), r"cap B_a of attribute 'debt' must be a number"),
    "list cap": (lambda d: _attr(d, "debt").update(cap=[2]), r"cap B_a of attribute 'debt'"),
    "attribute without cap": (lambda d: _attr(d, "debt").pop("cap"), r"each attribute needs 'name', 'group' and 'cap'"),
    "duplicate attribute": (lambda d: d["attributes"].append(dict(_attr(d, "debt"))),
                            r"duplicate attribute names \['debt'\]"),
    "route to unknown slot": (lambda d: d["routes"].update(travel=["food", "travel"]),
                              r"route for intent 'travel' names unknown slot 'travel'"),
    "route repeats a slot": (lambda d: d["routes"].update(meal_plan=["food", "food"]),
                             r"route for intent 'meal_plan' repeats a slot"),
    "route not a list": (lambda d: d["routes"].update(meal_plan="food"),
                         r"route for intent 'meal_plan' must be a list"),
    "empty routes": (lambda d: d.update(routes={}), r"'routes' must be a non-empty object"),
    "read outside slot": (lambda d: d.update(reads=[{"intent": "meal_plan", "slot": "food", "positions": [2, 4]}]),
                          r"read entry \('meal_plan', 'food'\) names positions \[4\] outside that slot"),
    "read for inactive slot": (lambda d: d.update(reads=[{"intent": "meal_plan", "slot": "finance", "positions": [4]}]),
                               r"slot 'finance' the route never activates"),
    "read for unknown intent": (lambda d: d.update(reads=[{"intent": "nope", "slot": "food", "positions": [2]}]),
                                r"read entry names unknown intent 'nope'"),
    "read entry incomplete": (lambda d: d.update(reads=[{"intent": "meal_plan", "slot": "food"}]),
                              r"each read entry needs intent, slot and positions"),
    "duplicate position id": (lambda d: d["positions"].append({"id": 2, "slot": "food"}),
                              r"duplicate position ids \[2\]"),
    "position in unknown slot": (lambda d: d["positions"].append({"id": 7, "slot": "travel"}),
                                 r"position 7 names unknown slot 'travel'"),
    "position id not int": (lambda d: d["positions"].append({"id": "7", "slot": "food"}),
                            r"position id must be an integer"),
    "no positions": (lambda d: d.update(positions=[]), r"(policy has no memory positions|unknown positions)"),
    "no slots": (lambda d: d.update(slots=[]), r"(policy has no slots|unknown slot)"),
    "duplicate slot": (lambda d: d["slots"].append(dict(_slot(d, "work"))),
                       r"duplicate (slot names \['work'\]|view id)"),
    "zero sensitivity": (lambda d: d.update(sensitivity="0"), r"sensitivity must be > 0"),
    "NaN sensitivity": (lambda d: d.update(sensitivity=math.nan), r"sensitivity must be finite"),
    "unknown key": (lambda d: d.update(colour="blue"), r"unknown keys \['colour'\]"),
    "slots not a list": (lambda d: d.update(slots={"food": []}), r"policy 'slots' must be a list"),
}
for _key in ("name", "slots", "positions", "attributes", "routes"):
    MALFORMED[f"missing key {_key}"] = ((lambda k: (lambda d: d.pop(k)))(_key),
                                        rf"policy is missing the required key '{_key}'")


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_policy_raises_policy_error_naming_problem(policy_dict, case):
    mutate, pattern = MALFORMED[case]
    mutate(policy_dict)
    with pytest.raises(PolicyError, match=pattern):
        Policy.from_dict(policy_dict)


def test_malformed_policy_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "slots": [')
    with pytest.raises(PolicyError, match=r"is not valid JSON"):
        Policy.load(bad)
    with pytest.raises(PolicyError, match=r"policy file not found"):
        Policy.load(tmp_path / "missing.json")
    arr = tmp_path / "array.json"
    arr.write_text(json.dumps([1, 2]))
    with pytest.raises(PolicyError, match=r"must be a JSON object, got list"):
        Policy.load(arr)


@dataclass(frozen=True)
class _BadRouter:
    slots: tuple[str, ...]

    def route(self, query, history=()):
        return self.slots


@dataclass(frozen=True)
class _BadReader:
    def read(self, query, slot, history=()):
        return (1, 2, 3)  # position 1 lies in the health slot


def test_runtime_router_and_reader_are_checked(running, dinner):
    from dataclasses import replace
    policy = running[0]
    p_unknown = replace(policy, router=_BadRouter(("food", "travel")), source={})
    with pytest.raises(PolicyError, match=r"router returned unknown slot 'travel'"):
        p_unknown.route(dinner)
    p_twice = replace(policy, router=_BadRouter(("food", "food")), source={})
    with pytest.raises(PolicyError, match=r"router returned a slot twice"):
        p_twice.route(dinner)
    p_read = replace(policy, reader=_BadReader(), source={})
    with pytest.raises(PolicyError, match=r"positions \[1\] outside slot 'food'"):
        p_read.read(dinner, "food")
    with pytest.raises(PolicyError, match=r"only policies built by Policy.from_dict"):
        p_read.to_dict()
    assert len(p_read.fingerprint()) == 64


class _Scripted:
    """A router and reader that answer from a script, one answer per call (history-dependent
    in effect): every answer must still be checked, however often an earlier one passed."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def route(self, query, history=()):
        self.calls += 1
        return self.answers.pop(0)

    def read(self, query, slot, history=()):
        return self.route(query, history)


def test_checked_outputs_are_remembered_but_every_output_is_checked(running, dinner):
    """Policy.route/read remember outputs that passed their checks (and charge_set its results),
    but still ask the router and reader every time, and an output not seen before is checked."""
    from dataclasses import replace
    policy = running[0]
    router = _Scripted([("food", "finance"), ("food", "finance"), ("food", "travel"), ["food"]])
    p = replace(policy, router=router, source={})
    assert p.route(dinner) == p.route(dinner) == ("food", "finance")
    with pytest.raises(PolicyError, match=r"unknown slot 'travel'"):
        p.route(dinner)
    assert p.route(dinner) == ("food",) and router.calls == 4
    reader = _Scripted([(2, 3), (2, 3), (1, 2), ([2],), (2,)])
    p = replace(policy, reader=reader, source={})
    assert p.read(dinner, "food") == p.read(dinner, "food") == (2, 3)
    with pytest.raises(PolicyError, match=r"positions \[1\] outside slot 'food'"):
        p.read(dinner, "food")
    with pytest.raises(PolicyError, match=r"positions \[\[2\]\] outside slot 'food'"):
        p.read(dinner, "food")  # (unhashable: checked, not remembered)
    assert p.read(dinner, "food") == (2,) and reader.calls == 5
    # Gamma*(R) (Eq. 5) from the memo equals the definition, for tuples and other iterables
    for r in [(2, 3), (4,), (), (0, 5), (2, 3)]:
        want = frozenset(a.name for a in policy.attributes if set(r) & a.group)
        assert policy.charge_set(r) == policy.charge_set(list(r)) == want
    assert policy.with_caps("1")._memo is not policy._memo  # a new policy starts afresh
