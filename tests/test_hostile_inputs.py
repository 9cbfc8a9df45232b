"""Hostile-input corpus: every malformed policy, policy file, store, budget
rule or parameter gets the package's specific typed error, and its message names the offending
field (and, for files, the file). ``tally()`` counts "tried / clear typed errors" for the report:

    PYTHONPATH=. .venv/bin/python tests/test_hostile_inputs.py

Beyond the hand-written corpus, hypothesis generates malformed policies, policy files, stores and
budget rules; the property is: loading either returns a valid object or raises the package's
error class for that input, never any other exception.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmv_lib.core import policy_json
from dpmv_lib.core.errors import (BudgetError, ParameterError, PolicyError, QueryError, StoreError,
                             UnknownAttributeError)
from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY, running_example
from dpmv_lib.core.ledger import OnlineBudget, PreallocatedBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Policy, Query
from dpmv_lib.core.rationals import MAX_RATIONAL
from dpmv_lib.core.store import MemoryStore, check_adjacent, differing_positions

POLICY, M, M_D, _ = running_example()
DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")


@dataclass(frozen=True)
class Case:
    """One hostile input: ``run(tmp)`` must raise ``error`` with every ``needles`` substring in
    its message ("{path}" in a needle stands for the file the case wrote)."""

    name: str
    run: Callable[[Path], Any]
    error: type[Exception]
    needles: tuple[str, ...]


CASES: list[Case] = []


def case(name: str, error: type[Exception], *needles: str) -> Callable:
    def deco(fn: Callable[[Path], Any]) -> Callable:
        CASES.append(Case(name, fn, error, needles))
        return fn
    return deco


# ---- malformed policy dicts (Policy.from_dict) -------------------------------------------------
def _d() -> dict:
    return copy.deepcopy(RUNNING_EXAMPLE_POLICY)


def _slot(d: dict, name: str) -> dict:
    return next(s for s in d["slots"] if s["name"] == name)


def _attr(d: dict, name: str) -> dict:
    return next(a for a in d["attributes"] if a["name"] == name)


def policy_case(name: str, mutate: Callable[[dict], Any], *needles: str, error: type[Exception] = PolicyError) -> None:
    def run(tmp: Path) -> Any:
        d = _d()
        mutate(d)
        return Policy.from_dict(d)
    CASES.append(Case(f"policy: {name}", run, error, needles))


def _set(fn: Callable[[dict], dict], key: str, value: Any) -> Callable[[dict], None]:
    return lambda d: fn(d).__setitem__(key, value)


def _pop(fn: Callable[[dict], dict], key: str) -> Callable[[dict], None]:
    return lambda d: fn(d).pop(key)


def food_view(i: int) -> Callable[[dict], dict]:
    return lambda d: _slot(d, "food")["views"][i]


def food(d: dict) -> dict:
    return _slot(d, "food")


def debt(d: dict) -> dict:
    return _attr(d, "debt")


def pos0(d: dict) -> dict:
    return d["positions"][0]


def top(d: dict) -> dict:
    return d


def _read(**kw: Any) -> Callable[[dict], None]:
    entry = {"intent": "meal_plan", "slot": "food", "positions": [2]}
    entry.update(kw)
    return lambda d: d.__setitem__("reads", [{k: v for k, v in entry.items() if v is not ...}])


# the auditor's classes: booleans, non-string text and ids, empty names
for _v in ("false", "true", 1, 0, None, [], {}):
    policy_case(f"generic {_v!r}", _set(food_view(0), "generic", _v), "'generic' of view 'food.generic'")
for _v in (5, None, ["a"], 1.5):
    policy_case(f"view text {_v!r}", _set(food_view(1), "text", _v), "text of view 'food.low_sugar'")
for _v in (7, None, "", "   ", ["x"]):
    policy_case(f"view id {_v!r}", _set(food_view(1), "id", _v), "id of view 1 of slot 'food'")
for _v in ("", "  ", 3, None):
    policy_case(f"slot name {_v!r}", _set(food, "name", _v), "name of slot 1")
for _v in ("", " \t", 5, None):
    policy_case(f"attribute name {_v!r}", _set(debt, "name", _v), "name of attribute 1")
for _v in ("", 3, None):
    policy_case(f"position slot {_v!r}", _set(pos0, "slot", _v), "slot of position 1")
for _v in ("1", 1.0, True, None, 2**70, -2**70):
    policy_case(f"position id {_v!r}", _set(pos0, "id", _v), "position id", "position 0")
for _v in (5, "", None):
    policy_case(f"policy name {_v!r}", _set(top, "name", _v), "policy 'name'")

# caps: finite positive bounded rationals only
for _v, _why in [("1e5000", "out of range"), (math.inf, "finite"), (-math.inf, "finite"), (math.nan, "finite"),
                 ("Infinity", "not a valid number"), ("NaN", "not a valid number"), ("inf", "not a valid number"),
                 (-1, "must be > 0"), (0, "must be > 0"), ("0/1", "must be > 0"), ("-0.0", "must be > 0"),
                 ("1/0", "zero denominator"), ("abc", "not a valid number"), ("", "not a valid number"),
                 ("2/3/4", "not a valid number"), ("1" * 200, "not a valid number"),
                 ("1e999999999", "out of range"), ("1e-5000", "out of range"), (10**7, "out of range"),
                 (1e-300, "too fine"), ("0x10", "not a valid number"), (True, "must be a number"),
                 (None, "must be an int, float"), ({"v": 1}, "must be an int, float"), ([2], "must be an int, float")]:
    policy_case(f"cap {_v!r}"[:40], _set(debt, "cap", _v), "cap B_a of attribute 'debt'", _why)
for _v, _why in [("abc", "not a valid number"), (-0.6, "must be > 0"), (True, "must be a number"),
                 ("1e5000", "out of range"), (math.nan, "finite"), (None, "must be an int, float")]:
    policy_case(f"sensitivity {_v!r}", _set(top, "sensitivity", _v), "sensitivity", _why)

# structure: missing and unknown keys, wrong container types
for _k in ("name", "slots", "positions", "attributes", "routes"):
    policy_case(f"missing key {_k}", _pop(top, _k), f"missing the required key '{_k}'")
policy_case("unknown top-level key", _set(top, "colour", "blue"), "unknown keys", "colour")
policy_case("unknown slot key", _set(food, "colour", 1), "slot 'food'", "unknown keys", "colour")
policy_case("unknown view key", _set(food_view(1), "colour", 1), "view 'food.low_sugar'", "unknown keys")
policy_case("unknown position key", _set(pos0, "colour", 1), "position 1", "unknown keys", "colour")
policy_case("unknown attribute key", _set(debt, "colour", 1), "attribute 'debt'", "unknown keys", "colour")
policy_case("unknown read key", _read(colour=1), "read entry 0", "unknown keys", "colour")
policy_case("slots is an object", _set(top, "slots", {"food": []}), "'slots' must be a list")
policy_case("positions is a string", _set(top, "positions", "1,2,3"), "'positions' must be a list")
policy_case("attributes is null", _set(top, "attributes", None), "'attributes' must be a list")
policy_case("reads is an object", _set(top, "reads", {"meal_plan": [2]}), "'reads' must be a list")
policy_case("views is a string", _set(food, "views", "food.generic"), "views of slot food")
policy_case("slot entry is a string", lambda d: d["slots"].append("travel"), "each slot needs 'name' and 'views'")
policy_case("view entry is a number", lambda d: food(d)["views"].append(3), "view of slot 'food' needs 'id' and 'text'")
policy_case("position entry is a number", lambda d: d["positions"].append(7), "each position needs 'id' and 'slot'")
policy_case("attribute entry is a list", lambda d: d["attributes"].append(["x"]), "each attribute needs")
policy_case("read entry is a string", lambda d: d.__setitem__("reads", ["meal_plan"]), "each read entry needs")
policy_case("cues is a string", _set(food_view(1), "cues", "sugar"), "cues of view 'food.low_sugar'")
policy_case("cue is a number", _set(food_view(1), "cues", ["sugar", 3]), "cues of view 'food.low_sugar'")
policy_case("cue is empty", _set(food_view(1), "cues", ["sugar", ""]), "cues of view 'food.low_sugar'")
policy_case("view intent is null", _set(food_view(1), "intents", [None]), "intents of view 'food.low_sugar'")
policy_case("description is a number", _set(top, "description", 5), "policy 'description'")
policy_case("version is a bool", _set(top, "version", True), "policy 'version'")
policy_case("version is a list", _set(top, "version", [1]), "policy 'version'")
policy_case("label is a number", _set(pos0, "label", 5), "label of position 1")
policy_case("attribute description is a list", _set(debt, "description", ["x"]), "description of attribute 'debt'")
policy_case("policy is an empty object", lambda d: d.clear(), "missing the required key")

# groups, references, duplicates
for _v, _why in [(["3"], "group of attribute 'debt'"), ([True, 4], "group of attribute 'debt'"),
                 ([3, 3, 4], "repeats positions [3]"), ([], "'debt' has an empty group"),
                 ([3, 99], "names unknown positions [99]"), (None, "group of attribute 'debt'"),
                 ([3.0], "group of attribute 'debt'")]:
    policy_case(f"group {_v!r}", _set(debt, "group", _v), _why)
policy_case("duplicate slot", lambda d: d["slots"].append(copy.deepcopy(_slot(d, "work"))),
            "duplicate slot names ['work']")
policy_case("duplicate view id in a slot", _set(food_view(2), "id", "food.low_sugar"),
            "duplicate view id 'food.low_sugar'")
policy_case("duplicate view id across slots", lambda d: _slot(d, "work")["views"][1].__setitem__("id", "food.cheap"),
            "duplicate view id 'food.cheap'")
policy_case("duplicate position id", lambda d: d["positions"].append({"id": 2, "slot": "food"}),
            "duplicate position ids [2]")
policy_case("duplicate attribute", lambda d: d["attributes"].append(dict(debt(d))),
            "duplicate attribute names ['debt']")
policy_case("duplicate read entry", lambda d: d.__setitem__("reads", [
    {"intent": "meal_plan", "slot": "food", "positions": [2]},
    {"intent": "meal_plan", "slot": "food", "positions": [3]}]),
    "read entry ('meal_plan', 'food') is given twice")
policy_case("read repeats a position", _read(positions=[2, 2]), "read positions of entry ('meal_plan', 'food')",
            "repeats")
policy_case("read outside its slot", _read(positions=[2, 4]), "names positions [4] outside that slot")
policy_case("read of unknown position", _read(positions=[999]), "names positions [999] outside that slot")
policy_case("read of negative position", _read(positions=[-1]), "names positions [-1] outside that slot")
policy_case("read for unknown intent", _read(intent="nope"), "unknown intent 'nope'")
policy_case("read for unknown slot", _read(slot="travel"), "slot 'travel' the route never activates")
policy_case("read for inactive slot", _read(slot="finance", positions=[4]), "slot 'finance' the route never activates")
policy_case("read intent is a number", _read(intent=3), "'intent' of read entry 0")
policy_case("read slot is empty", _read(slot=""), "'slot' of read entry 0")
policy_case("read positions is a string", _read(positions="2"), "read positions of entry")
policy_case("read entry incomplete", _read(positions=...), "each read entry needs intent, slot and positions")
policy_case("route to unknown slot", lambda d: d["routes"].update(travel=["travel"]),
            "route for intent 'travel' names unknown slot 'travel'")
policy_case("route repeats a slot", lambda d: d["routes"].update(meal_plan=["food", "food"]), "repeats a slot")
policy_case("route is a string", lambda d: d["routes"].update(meal_plan="food"),
            "route for intent 'meal_plan' must be a list")
policy_case("route slot is a number", lambda d: d["routes"].update(meal_plan=[1]),
            "slot in the route for intent 'meal_plan'")
policy_case("route slot is empty", lambda d: d["routes"].update(meal_plan=[""]),
            "slot in the route for intent 'meal_plan'")
policy_case("route intent is empty", lambda d: d["routes"].update({"": ["food"]}), "intent in 'routes'")
policy_case("route intent is an int key", lambda d: d["routes"].update({1: ["food"]}),
            "'routes' keys (intents) must be strings")
policy_case("routes empty", _set(top, "routes", {}), "'routes' must be a non-empty object")
policy_case("routes is a list", _set(top, "routes", [["food"]]), "'routes' must be a non-empty object")
policy_case("position in unknown slot", lambda d: d["positions"].append({"id": 7, "slot": "travel"}),
            "position 7 names unknown slot 'travel'")
policy_case("no generic view", _set(food_view(0), "generic", False),
            "slot 'food' must have exactly one fixed generic view, has 0")
policy_case("two generic views", _set(food_view(1), "generic", True),
            "slot 'food' must have exactly one fixed generic view, has 2")
policy_case("empty vocabulary", _set(food, "views", []), "slot 'food' has an empty view vocabulary")
policy_case("no positions", lambda d: (d.__setitem__("positions", []), d.__setitem__("attributes", [])),
            "policy has no memory positions")
policy_case("no slots", lambda d: d.update(slots=[], positions=[], attributes=[], routes={"x": []}),
            "policy has no slots")
policy_case("a set inside the policy", _set(debt, "group", {3, 4}), "plain JSON data")
policy_case("an object inside the policy", _set(debt, "description", object()), "plain JSON data")


def _deep_list(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


policy_case("label nested 100k levels deep (in code)", _set(pos0, "label", _deep_list(100_000)), "plain JSON data")
policy_case("label nested 20 levels deep", _set(pos0, "label", _deep_list(20)), "label of position 1")


@case("policy: not a mapping", PolicyError, "must be a JSON object, got list")
def _(tmp: Path) -> Any:
    return Policy.from_dict([1, 2])  # type: ignore[arg-type]


@case("policy: limits not a PolicyLimits", ParameterError, "limits must be a PolicyLimits")
def _(tmp: Path) -> Any:
    return Policy.from_dict(_d(), limits="big")  # type: ignore[arg-type]


# ---- policy files (Policy.load): every failure names the file and the problem -------------------
def file_case(name: str, content: bytes | None, *needles: str, limits: dict | None = None,
              error: type[Exception] = PolicyError) -> None:
    """``content`` None: no file is written (the path is missing)."""
    def run(tmp: Path) -> Any:
        path = tmp / "policy.json"
        if content is not None:
            path.write_bytes(content)
        return Policy.load(path, limits=policy_json.PolicyLimits(**limits)) if limits else Policy.load(path)
    CASES.append(Case(f"file: {name}", run, error, ("{path}",) + needles))


GOOD = json.dumps(RUNNING_EXAMPLE_POLICY).encode()


def _with(mutate: Callable[[dict], Any]) -> bytes:
    d = _d()
    mutate(d)
    return json.dumps(d).encode()


file_case("missing", None, "not found")
file_case("empty", b"", "is empty")
file_case("whitespace only", b"  \n\t ", "is empty")
file_case("not UTF-8 (random bytes)", b"\xff\xfe\xfa\x00{", "not UTF-8")
file_case("Latin-1 encoded", json.dumps(dict(_d(), description="caf\u00e9"), ensure_ascii=False).encode("latin-1"),
          "not UTF-8")
file_case("UTF-16 encoded", json.dumps(RUNNING_EXAMPLE_POLICY).encode("utf-16"), "not UTF-8")
file_case("UTF-8 with a BOM", b"\xef\xbb\xbf" + GOOD, "not valid JSON")
file_case("truncated JSON", GOOD[: len(GOOD) // 2], "not valid JSON")
file_case("trailing garbage", GOOD + b" }", "not valid JSON")
file_case("nested 200k levels deep", b"[" * 200_000 + b"]" * 200_000, "levels deep", "max_depth")
file_case("object nested 100 levels deep", b'{"a":' * 100 + b"1" + b"}" * 100, "levels deep", "max_depth")
file_case("deep nesting hidden in a label", _with(_set(pos0, "label", _deep_list(50))), "levels deep")
file_case("NaN literal", GOOD.replace(b'"cap": "2"', b'"cap": NaN', 1), "NaN")
file_case("Infinity literal", GOOD.replace(b'"cap": "2"', b'"cap": Infinity', 1), "Infinity")
file_case("cap 1e5000 (a JSON number)", GOOD.replace(b'"cap": "2"', b'"cap": 1e5000', 1),
          "cap B_a of attribute 'diabetes'")
file_case("integer of 5000 digits", GOOD.replace(b'"id": 6', b'"id": ' + b"9" * 5000, 1), "not valid JSON")
file_case("top level is an array", b"[1, 2]", "must be a JSON object, got list")
file_case("top level is a string", b'"policy"', "must be a JSON object, got str")
file_case("top level is null", b"null", "must be a JSON object, got NoneType")
file_case("generic is a string", _with(_set(food_view(0), "generic", "false")), "'generic' of view 'food.generic'")
file_case("view text is a number", _with(_set(food_view(1), "text", 5)), "text of view 'food.low_sugar'")
file_case("over max_bytes", GOOD, "max_bytes=100", limits={"max_bytes": 100})
file_case("over max_positions", GOOD, "6 positions", "max_positions=5", limits={"max_positions": 5})
file_case("over max_slots", GOOD, "4 slots", "max_slots=3", limits={"max_slots": 3})
file_case("over max_views", GOOD, "max_views=10", limits={"max_views": 10})
file_case("over max_attributes", GOOD, "max_attributes=1", limits={"max_attributes": 1})
file_case("over max_intents", GOOD, "max_intents=4", limits={"max_intents": 4})


@case("file: a directory", PolicyError, "{path}", "is a directory")
def _(tmp: Path) -> Any:
    (tmp / "policy.json").mkdir()
    return Policy.load(tmp / "policy.json")


@case("file: a character device", PolicyError, "/dev/null", "not a regular file")
def _(tmp: Path) -> Any:
    if not Path("/dev/null").exists():  # pragma: no cover - non-POSIX
        raise PolicyError("/dev/null not a regular file (skipped)")
    return Policy.load("/dev/null")


@case("file: a NUL byte in the path", PolicyError, "path", "invalid")
def _(tmp: Path) -> Any:
    return Policy.load(str(tmp / "pol\x00icy.json"))


@case("file: bad PolicyLimits value", ParameterError, "PolicyLimits.max_bytes")
def _(tmp: Path) -> Any:
    return policy_json.PolicyLimits(max_bytes=0)


@case("file: PolicyLimits value is a string", ParameterError, "PolicyLimits.max_positions")
def _(tmp: Path) -> Any:
    return policy_json.PolicyLimits(max_positions="10")  # type: ignore[arg-type]


# ---- stores -----------------------------------------------------------------------------------
def store_case(name: str, fn: Callable[[], Any], *needles: str, error: type[Exception] = StoreError) -> None:
    CASES.append(Case(f"store: {name}", lambda tmp: fn(), error, needles))


LAYOUT = POLICY.layout
CONTENTS = dict(M.contents)
store_case("layout is an int", lambda: MemoryStore(5, {}), "store layout must be a sequence")  # type: ignore[arg-type]
store_case("layout is a string", lambda: MemoryStore("1:food", {}), "store layout must be a sequence")  # type: ignore[arg-type]
store_case("layout id is a string", lambda: MemoryStore((("1", "food"),), {1: ""}), "(int position id, str slot)")
store_case("layout id is a bool", lambda: MemoryStore(((True, "food"),), {1: ""}), "(int position id, str slot)")
store_case("layout slot is an int", lambda: MemoryStore(((1, 3),), {1: ""}), "(int position id, str slot)")
store_case("layout slot is empty", lambda: MemoryStore(((1, " "),), {1: ""}), "position 1", "empty slot name")
store_case("layout triple", lambda: MemoryStore(((1, "food", "x"),), {1: ""}), "(int position id, str slot)")
store_case("layout repeats a position", lambda: MemoryStore(((1, "food"), (1, "food")), {1: ""}),
           "repeats a position id")
store_case("contents is a list", lambda: MemoryStore(LAYOUT, [""] * 6), "contents must be a mapping")  # type: ignore[arg-type]
store_case("content key is a string", lambda: MemoryStore(LAYOUT, {str(k): v for k, v in CONTENTS.items()}),
           "position ids must be integers", "'1'")
store_case("content is a number", lambda: MemoryStore(LAYOUT, dict(CONTENTS, **{}) | {3: 42}), "content at position 3")
store_case("content is None", lambda: MemoryStore(LAYOUT, CONTENTS | {4: None}), "content at position 4")
store_case("content missing a position", lambda: MemoryStore(LAYOUT, {k: v for k, v in CONTENTS.items() if k != 5}),
           "no content for positions [5]")
store_case("content outside the layout", lambda: MemoryStore(LAYOUT, CONTENTS | {99: "x"}), "positions [99] outside")
store_case("name is a number", lambda: MemoryStore(LAYOUT, CONTENTS, 7), "store name must be a string")  # type: ignore[arg-type]
store_case("from_policy contents is a list",
           lambda: MemoryStore.from_policy(POLICY, ["x"] * 6),  # type: ignore[arg-type]
           "contents must be a mapping")
store_case("read out of range", lambda: M.read((1, 99)), "unknown position 99")
store_case("read positions is an int", lambda: M.read(3), "read positions must be a sequence")  # type: ignore[arg-type]
store_case("replace unknown position", lambda: M.replace({99: "x"}), "unknown position 99")
store_case("replace with a list", lambda: M.replace(["x"]), "updates must be a mapping")  # type: ignore[arg-type]
store_case("replace with a non-string text", lambda: M.replace({1: 5}), "content at position 1")
store_case("layout does not match the policy", lambda: MemView(POLICY, MemoryStore(((1, "food"),), {1: ""})),
           "layout does not match policy 'running-example'")
store_case("D across different layouts", lambda: differing_positions(M, MemoryStore(((1, "food"),), {1: ""})),
           "different layouts")
store_case("not adjacent", lambda: check_adjacent(M, M.replace({6: "changed"}), POLICY, "diabetes"),
           "not adjacent w.r.t. 'diabetes'", "[6]")
store_case("adjacency for an unknown attribute", lambda: check_adjacent(M, M_D, POLICY, "cancer"), "'cancer'",
           error=UnknownAttributeError)


# ---- budget rules -----------------------------------------------------------------------------
def budget_case(name: str, fn: Callable[[], Any], *needles: str, error: type[Exception] = BudgetError) -> None:
    CASES.append(Case(f"budget: {name}", lambda tmp: fn(), error, needles))


budget_case("preallocated names an unknown attribute (epsilon)",
            lambda: PreallocatedBudget({"diabetes": 2, "cancer": 1}).epsilon(frozenset({"diabetes"}), POLICY.caps),
            "unknown attributes ['cancer']", error=UnknownAttributeError)
budget_case("preallocated names an unknown attribute (release)",
            lambda: MemView(POLICY, M, budget=PreallocatedBudget({"diabetez": 2}), seed=0).release(DINNER),
            "unknown attributes ['diabetez']", error=UnknownAttributeError)
budget_case("preallocated key is an int", lambda: PreallocatedBudget({1: 2}), "attribute names", "1")  # type: ignore[dict-item]
budget_case("preallocated key is empty", lambda: PreallocatedBudget({"": 2}), "attribute names", "''")
budget_case("preallocated count negative", lambda: PreallocatedBudget({"debt": -1}), "C_debt", "-1")
budget_case("preallocated count float", lambda: PreallocatedBudget({"debt": 1.5}), "C_debt", "1.5")
budget_case("preallocated count bool", lambda: PreallocatedBudget({"debt": True}), "C_debt", "True")
budget_case("preallocated not a mapping", lambda: PreallocatedBudget([("debt", 1)]), "must be a mapping")  # type: ignore[arg-type]
budget_case("online K zero", lambda: OnlineBudget(0), "K must be an integer in [1, ", "0")
budget_case("online K string", lambda: OnlineBudget("3"), "K must be an integer in [1, ", "'3'")  # type: ignore[arg-type]
budget_case("online K bool", lambda: OnlineBudget(True), "K must be an integer in [1, ", "True")
budget_case("online K 10**5000 (eps would not print)", lambda: OnlineBudget(10**5000), "K must be an integer in [1, ")
budget_case("preallocated count 10**5000", lambda: PreallocatedBudget({"debt": 10**5000}), "C_debt", "[0, ")


# ---- parameters -------------------------------------------------------------------------------
def param_case(name: str, fn: Callable[[], Any], error: type[Exception], *needles: str) -> None:
    CASES.append(Case(f"parameter: {name}", lambda tmp: fn(), error, needles))


param_case("with_caps inf", lambda: POLICY.with_caps(math.inf), PolicyError, "cap B_a", "finite")
param_case("with_caps 1e5000", lambda: POLICY.with_caps("1e5000"), PolicyError, "cap B_a", "out of range")
param_case("with_caps 10**100", lambda: POLICY.with_caps(10**100), PolicyError, "cap B_a", "out of range")
param_case("with_caps bool", lambda: POLICY.with_caps(True), PolicyError, "cap B_a", "must be a number")
param_case("with_caps non-numeric", lambda: POLICY.with_caps({"debt": "two"}), PolicyError, "'debt'",
           "not a valid number")
param_case("with_caps unknown attribute", lambda: POLICY.with_caps({"cancer": 1}), UnknownAttributeError, "'cancer'")
param_case("query text is a number", lambda: Query(5, "meal_plan"), QueryError, "text string")  # type: ignore[arg-type]
param_case("query intent is empty", lambda: Query("hi", ""), QueryError, "non-empty intent")
param_case("query intent unknown", lambda: POLICY.route(Query("hi", "smalltalk")), QueryError, "'smalltalk'")
param_case("memview seed negative", lambda: MemView(POLICY, M, seed=-1), ParameterError, "seed", "-1")
param_case("release of a string", lambda: MemView(POLICY, M, seed=0).release("dinner"), QueryError, "needs a Query")  # type: ignore[arg-type]
param_case("history is a string", lambda: MemView(POLICY, M, seed=0).release(DINNER, "h"), QueryError, "history")  # type: ignore[arg-type]
param_case("unknown slot lookup", lambda: POLICY.slot(""), PolicyError, "unknown slot ''")
param_case("unknown attribute lookup", lambda: POLICY.attribute(5), UnknownAttributeError, "5")  # type: ignore[arg-type]
param_case("unknown view lookup", lambda: POLICY.view("food.nope"), PolicyError, "'food.nope'")


# ---- the tally ----------------------------------------------------------------------------------
def outcome(c: Case, tmp: Path) -> tuple[bool, str]:
    """(clear?, what happened): clear = the specific error class with every needle in its message."""
    try:
        c.run(tmp)
    except Exception as exc:  # noqa: BLE001 - classifying is the point
        msg = str(exc)
        needles = [n.replace("{path}", str(tmp / "policy.json")) for n in c.needles]
        missing = [n for n in needles if n not in msg]
        if isinstance(exc, c.error) and not missing:
            return True, f"{type(exc).__name__}: {msg[:160]}"
        why = f"not a {c.error.__name__}" if not isinstance(exc, c.error) else f"message lacks {missing}"
        return False, f"{why}: {type(exc).__name__}: {msg[:160]}"
    return False, "accepted (no error)"


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def tally(tmp_root: Path, timeout_s: float | None = None) -> tuple[int, int, list[tuple[str, str]]]:
    """(tried, clear typed errors, [(case, what happened) for the unclear ones]); with
    ``timeout_s`` (POSIX main thread only) a case running longer counts as unclear (a hang)."""
    import signal
    bad = []
    for k, c in enumerate(CASES):
        tmp = tmp_root / f"case{k}"
        tmp.mkdir(parents=True, exist_ok=True)
        if timeout_s:
            old = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            ok, what = outcome(c, tmp)
        except _Timeout:
            ok, what = False, f"no answer within {timeout_s} s"
        finally:
            if timeout_s:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        if not ok:
            bad.append((c.name, what))
    return len(CASES), len(CASES) - len(bad), bad


def test_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 120
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_hostile_input_gets_a_clear_typed_error(c, tmp_path):
    ok, what = outcome(c, tmp_path)
    assert ok, f"{c.name}: {what}"


def test_tally(tmp_path, capsys):
    tried, clear, bad = tally(tmp_path)
    with capsys.disabled():
        print(f"\nhostile inputs: {tried} tried / {clear} clear typed errors")
    assert (tried, clear) == (len(CASES), len(CASES)), bad


# ---- accepted edge cases (the validation must not over-reject) --------------------------------
@pytest.mark.parametrize("cap,expected", [(2, Fraction(2)), ("2/3", Fraction(2, 3)), ("0.6", Fraction(3, 5)),
                                          (0.1, Fraction(1, 10)), ("1e-3", Fraction(1, 1000)),
                                          (" 3 / 2 ", Fraction(3, 2)),
                                          (10**6, Fraction(10**6)), ("1e-18", Fraction(1, 10**18))])
def test_valid_caps_are_read_exactly(cap, expected):
    d = _d()
    _attr(d, "debt")["cap"] = cap
    assert Policy.from_dict(d).caps["debt"] == expected
    assert POLICY.with_caps({"debt": cap}).caps["debt"] == expected


def test_with_caps_takes_a_fraction():
    assert POLICY.with_caps(Fraction(7, 3)).caps == {"diabetes": Fraction(7, 3), "debt": Fraction(7, 3)}


def test_limits_can_be_raised_explicitly(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(GOOD)
    with pytest.raises(PolicyError, match="max_positions=5"):
        Policy.load(path, limits=policy_json.PolicyLimits(max_positions=5))
    assert Policy.load(path, limits=policy_json.PolicyLimits(max_positions=6)).position_ids == (1, 2, 3, 4, 5, 6)


def test_preallocated_budget_accepts_exactly_the_policy_attributes():
    rule = PreallocatedBudget({"diabetes": 2, "debt": 0})
    assert rule.epsilon(frozenset({"diabetes"}), POLICY.caps) == 1
    rule.check_attributes(POLICY.caps)


def test_json_depth_counts_brackets_outside_strings():
    assert policy_json.json_depth(b'{"a": [1, "[[[[", {"b": []}]}') == 4
    assert policy_json.json_depth(b'"[[[\\"[["') == 0
    assert policy_json.json_depth(b"[" * 1000) == 1000
    assert policy_json.json_depth(b'["\\\\", [[]], "\\"]]]"]') == 3  # an escaped backslash, then an escaped quote
    assert policy_json.json_depth(b"") == policy_json.json_depth(b"1") == 0


# ---- hypothesis: generated malformed policies, files, stores, budgets --------------------------
PROPS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

junk = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=6), st.sampled_from(["", " ", "false", "true", "1e5000", "-1", "2/3", "1/0",
                                                       "food", "debt", "food.generic", "Infinity"]),
                 st.lists(st.integers(-3, 9), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


valid_caps = st.sampled_from([1, 2, "2", "2/3", "0.5", 0.25, "1e-3", 10**6])


def _tree_paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _tree_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _tree_paths(v, prefix + (i,))
    return out


@st.composite
def generated_policies(draw) -> tuple[dict, int]:
    """A random valid policy (1-3 slots, 1-6 positions, overlapping groups, routes, reads), then
    0-3 hostile edits anywhere in its tree: a node replaced by junk, deleted, or a list entry
    duplicated. Returns (policy dict, number of edits)."""
    slot_names = [f"s{i}" for i in range(draw(st.integers(1, 3)))]
    slots = [{"name": s, "views": [{"id": f"{s}.g", "text": "generic", "generic": True}] +
              [{"id": f"{s}.v{j}", "text": f"view {j}", "cues": ["c"], "intents": ["q1"]}
               for j in range(draw(st.integers(0, 2)))]} for s in slot_names]
    positions = [{"id": i, "slot": draw(st.sampled_from(slot_names)), "label": "l"}
                 for i in range(1, draw(st.integers(1, 6)) + 1)]
    ids = [p["id"] for p in positions]
    attributes = [{"name": f"a{k}", "group": draw(st.lists(st.sampled_from(ids), min_size=1, unique=True)),
                   "cap": draw(valid_caps)} for k in range(draw(st.integers(0, 2)))]
    routes = {f"q{k}": draw(st.lists(st.sampled_from(slot_names), unique=True, max_size=len(slot_names)))
              for k in range(1, draw(st.integers(1, 2)) + 1)}
    d: dict = {"name": "generated", "sensitivity": draw(valid_caps), "slots": slots, "positions": positions,
               "attributes": attributes, "routes": routes}
    if routes["q1"] and draw(st.booleans()):
        slot = routes["q1"][0]
        own = [p["id"] for p in positions if p["slot"] == slot]
        d["reads"] = [{"intent": "q1", "slot": slot, "positions": draw(st.lists(st.sampled_from(own), unique=True))
                       if own else []}]
    edits = draw(st.integers(0, 3))
    for _ in range(edits):
        path = draw(st.sampled_from(_tree_paths(d)[1:]))
        parent = d
        for k in path[:-1]:
            parent = parent[k]
        how = draw(st.sampled_from(["junk", "junk", "delete", "duplicate"]))
        if how == "junk":
            parent[path[-1]] = draw(junk)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[path[-1] + "_copy"] = copy.deepcopy(parent[path[-1]])
    return d, edits


def _valid(p: Policy) -> None:
    """An accepted policy satisfies every documented invariant and serialises."""
    for s in p.slots:
        assert isinstance(s.name, str) and s.name.strip()
        assert sum(v.generic is True for v in s.views) == 1
        assert all(isinstance(v.id, str) and v.id.strip() and isinstance(v.text, str) for v in s.views)
    for a in p.attributes:
        assert isinstance(a.name, str) and a.name.strip() and a.group <= set(p.position_ids)
        assert 0 < a.cap <= MAX_RATIONAL and len(str(a.cap / 3)) < 100
    assert 0 < p.sensitivity <= MAX_RATIONAL
    assert Policy.from_dict(p.to_dict()).fingerprint() == p.fingerprint()


def _typed(fn: Callable[[], Any], error: type[Exception]) -> Any:
    try:
        return fn()
    except error as exc:
        assert str(exc).strip()
        return exc
    except Exception as exc:  # pragma: no cover - what we hunt
        pytest.fail(f"untyped {type(exc).__name__}: {exc!r}")


@PROPS
@given(generated_policies())
def test_generated_policies_are_valid_or_policy_errors(case):
    d, edits = case
    out = _typed(lambda: Policy.from_dict(d), PolicyError)
    if isinstance(out, Policy):
        _valid(out)
    elif edits == 0:  # the unedited generated policy is valid: no over-rejection
        pytest.fail(f"a valid generated policy was refused: {out}")


@PROPS
@given(st.data())
def test_corrupted_policy_files_load_or_raise_policy_error(tmp_path_factory, data):
    """The running example's JSON text with bytes inserted, deleted or replaced."""
    raw = bytearray(GOOD)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        b = data.draw(st.binary(min_size=1, max_size=3) | st.sampled_from([b"[", b"{", b"\"", b"\\", b"NaN", b"1e5000",
                                                                           b"false", b"\"\"", b"\xff"]))
        if op == "insert":
            raw[i:i] = b
        elif op == "delete":
            del raw[i:i + len(b)]
        else:
            raw[i:i + len(b)] = b
    path = tmp_path_factory.mktemp("pol") / "p.json"
    path.write_bytes(bytes(raw))
    out = _typed(lambda: Policy.load(path), PolicyError)
    if isinstance(out, Policy):
        _valid(out)
    else:
        assert str(path) in str(out)


layouts = st.lists(st.tuples(st.one_of(st.integers(0, 6), junk), st.one_of(st.sampled_from(["food", ""]), junk)),
                   max_size=4)
contents = st.dictionaries(st.one_of(st.integers(0, 6), junk.filter(lambda x: x.__hash__ is not None)),
                           st.one_of(st.text(max_size=5), junk), max_size=4)


@PROPS
@given(layouts, contents, st.one_of(st.just("M"), junk))
def test_generated_stores_are_valid_or_store_errors(layout, cont, name):
    out = _typed(lambda: MemoryStore(layout, cont, name), StoreError)
    if isinstance(out, MemoryStore):
        assert all(type(i) is int and isinstance(s, str) and s.strip() for i, s in out.layout)
        assert set(out.contents) == {i for i, _ in out.layout}
        assert all(isinstance(t, str) for t in out.contents.values())


@PROPS
@given(st.dictionaries(st.one_of(st.sampled_from(["diabetes", "debt", "cancer", ""]), junk.filter(
    lambda x: x.__hash__ is not None)), st.one_of(st.integers(-2, 4), junk), max_size=3))
def test_generated_budget_rules_are_valid_or_typed_errors(planned):
    rule = _typed(lambda: PreallocatedBudget(planned), BudgetError)
    if isinstance(rule, PreallocatedBudget):
        out = _typed(lambda: rule.epsilon(frozenset({"diabetes"}), POLICY.caps), UnknownAttributeError)
        assert isinstance(out, (Fraction, type(None), UnknownAttributeError))
        assert isinstance(out, UnknownAttributeError) == bool(set(planned) - set(POLICY.caps))


if __name__ == "__main__":  # the tally for the report
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as _tmp:
        _tried, _clear, _bad = tally(Path(_tmp), timeout_s=5.0)
    print(f"hostile inputs: {_tried} tried / {_clear} clear typed errors")
    for _name, _what in _bad:
        print(f"  UNCLEAR {_name}: {_what}")
    sys.exit(0 if _clear == _tried else 1)
