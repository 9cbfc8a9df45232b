"""The public API is documented like the anchors (numpydoc sections, as IBM diffprivlib does) and
wrong types raise TypeErrors.

(a) Every public class, function and method of the modules an agent builder uses has a docstring;
    it has a Parameters section when it takes arguments and a Raises section naming (itself or
    through a base class) every exception class its body raises; the Examples run (doctest).
(b) An argument of the wrong type raises the domain's ``*TypeError`` class: a ``TypeError`` that
    is also the domain error (``PolicyTypeError`` is a ``PolicyError``), while a bad value keeps
    its ``ValueError``-based class.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import doctest
import importlib
import inspect
import re
import textwrap
from fractions import Fraction
from functools import cached_property
from typing import Any, Callable

import pytest

from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY, running_example
from dpmv_lib.core import errors
from dpmv_lib.core.errors import (BudgetError, BudgetTypeError, DPMVError, DPMVTypeError, ParameterError,
                                  ParameterTypeError, PolicyError, PolicyTypeError, QueryError, QueryTypeError,
                                  StoreError, StoreTypeError, type_error_for)
from dpmv_lib.core.ledger import InMemoryLedger, OnlineBudget, PreallocatedBudget, planned_charges
from dpmv_lib.core.policy import Policy, Query
from dpmv_lib.core.policy_json import PolicyLimits
from dpmv_lib.core.scorer import LexiconScorer
from dpmv_lib.core.selection import get_selector, permute_and_flip
from dpmv_lib.core.store import MemoryStore, is_adjacent
from dpmv_lib.generate.responders import make_responder
from dpmv_lib.ledgers.records import parse_state, replay
from dpmv_lib.ledgers.sqlite import SqliteLedger, SqliteLedgerStore

# the modules of the public API an agent builder uses
MODULES = (
    "dpmv_lib.core.policy", "dpmv_lib.core.policy_json", "dpmv_lib.core.store",
    "dpmv_lib.core.ledger", "dpmv_lib.core.selection", "dpmv_lib.ledgers.sqlite", "dpmv_lib.ledgers.postgres",
    "dpmv_lib.ledgers.records", "dpmv_lib.ledgers.chain", "dpmv_lib.ledgers.chain_verify",
    "dpmv_lib.generate.responders",
)
# raised for states the code cannot reach or for abstract hooks: not part of any contract
NOT_DOCUMENTED = {"AssertionError", "NotImplementedError"}
SECTION = re.compile(r"^([A-Z][A-Za-z ]*)\n-{3,}[ \t]*$", re.M)


# ---- numpydoc parsing ---------------------------------------------------------------------------
def sections(doc: str | None) -> dict[str, str]:
    """numpydoc section title -> its text (up to the next section)."""
    text = inspect.cleandoc(doc or "")
    found = list(SECTION.finditer(text))
    return {m.group(1).strip(): text[m.end():found[k + 1].start() if k + 1 < len(found) else len(text)]
            for k, m in enumerate(found)}


def documented_raises(doc: str | None) -> list[str]:
    """The exception names of a Raises section (unindented entry lines, comma separated)."""
    body = sections(doc).get("Raises", "")
    names = []
    for line in body.splitlines():
        if line.strip() and not line[0].isspace():
            names += [n.strip().strip("`").split(".")[-1].lstrip("~") for n in line.split(",") if n.strip()]
    return names


def _raised_names(node: ast.expr | None) -> list[str] | None:
    """Class names a ``raise`` statement may raise: [] for a bare re-raise, None when unknown."""
    if node is None:
        return []
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Name) and isinstance(node.orelse, ast.Name):
        return [node.body.id, node.orelse.id]
    return None  # e.g. ``raise self._refuse(...)``, ``raise error(...)``: raises, class unknown here


def body_raises(func: Callable[..., Any]) -> tuple[bool, set[str]]:
    """(does the body raise?, the exception class names it raises by name), nested defs excluded."""
    try:
        src = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return False, set()
    tree = ast.parse(src)
    fn = tree.body[0]
    raises, names = False, set()
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Raise):
            got = _raised_names(node.exc)
            if got is None:
                raises = True
            elif got and not set(got) <= NOT_DOCUMENTED:
                raises = True
                names |= set(got) - NOT_DOCUMENTED
        stack.extend(ast.iter_child_nodes(node))
    return raises, names


def _resolve(name: str, namespace: dict[str, Any]) -> Any:
    for space in (namespace, vars(errors), vars(builtins)):
        if name in space:
            return space[name]
    return None


# ---- the public members -------------------------------------------------------------------------
def _function_of(raw: Any) -> tuple[Callable[..., Any] | None, bool]:
    """(the function behind a class attribute, whether its first parameter is bound)."""
    if isinstance(raw, staticmethod):
        return raw.__func__, False
    if isinstance(raw, classmethod):
        return raw.__func__, True
    if isinstance(raw, property):
        return raw.fget, True
    if isinstance(raw, cached_property):
        return raw.func, True
    if inspect.isfunction(raw):
        return raw, True
    return None, False


def public_members() -> list[tuple[str, Any, Callable[..., Any] | None, bool]]:
    """(qualified name, object, function or None for a class, bound first parameter?)."""
    out = []
    for modname in MODULES:
        mod = importlib.import_module(modname)
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != modname:
                continue
            if inspect.isfunction(obj):
                out.append((f"{modname}.{name}", obj, obj, False))
            elif inspect.isclass(obj):
                out.append((f"{modname}.{name}", obj, None, False))
                for attr in sorted(dir(obj)):
                    if attr.startswith("_"):
                        continue
                    owner = next((k for k in obj.__mro__ if attr in vars(k)), None)
                    if owner is None or owner.__module__ not in MODULES:
                        continue
                    fn, bound = _function_of(vars(owner)[attr])
                    if fn is not None:
                        out.append((f"{modname}.{name}.{attr}", fn, fn, bound))
    return out


MEMBERS = public_members()


def _takes_arguments(obj: Any, fn: Callable[..., Any] | None, bound: bool) -> bool:
    if fn is None:  # a class: its constructor (protocols have none)
        if getattr(obj, "_is_protocol", False):
            return False
        if dataclasses.is_dataclass(obj):
            return any(f.init for f in dataclasses.fields(obj))
        return bool(inspect.signature(obj).parameters)
    params = list(inspect.signature(fn).parameters)
    return bool(params[1:] if bound else params)


def _constructor(cls: type) -> Callable[..., Any] | None:
    """The ``__post_init__`` or ``__init__`` that a class documents (defined in the checked modules)."""
    for klass in cls.__mro__:
        if klass.__module__ not in MODULES:
            continue
        for hook in ("__post_init__", "__init__"):
            fn = vars(klass).get(hook)
            if inspect.isfunction(fn) and fn.__module__ in MODULES:  # (not typing's Protocol.__init__)
                return fn
    return None


def problems(qualname: str, obj: Any, fn: Callable[..., Any] | None, bound: bool) -> list[str]:
    """What the docstring of one public member lacks (empty: documented as required)."""
    doc = obj.__doc__ if fn is None else fn.__doc__
    if fn is None and dataclasses.is_dataclass(obj) and doc and doc.startswith(f"{obj.__name__}("):
        doc = None  # the signature dataclasses write when there is no docstring
    if not (doc or "").strip():
        return [f"{qualname}: no docstring"]
    out = []
    secs = sections(doc)
    if _takes_arguments(obj, fn, bound) and "Parameters" not in secs:
        out.append(f"{qualname}: takes arguments but has no Parameters section")
    target = fn if fn is not None else _constructor(obj)
    if target is None:
        return out
    raises, names = body_raises(target)
    if not raises:
        return out
    listed = documented_raises(doc)
    if not listed:
        return out + [f"{qualname}: raises {sorted(names) or 'exceptions'} but has no Raises section"]
    namespace = target.__globals__
    classes = [_resolve(n, namespace) for n in listed]
    for n, c in zip(listed, classes):
        if not (inspect.isclass(c) and issubclass(c, BaseException)):
            out.append(f"{qualname}: Raises names {n!r}, which is not an exception class here")
    for n in sorted(names):
        c = _resolve(n, namespace)
        if inspect.isclass(c) and not any(inspect.isclass(d) and issubclass(c, d) for d in classes):
            out.append(f"{qualname}: raises {n} but its Raises section does not name it (or a base)")
    return out


def test_the_api_has_members_to_check():
    names = {q for q, *_ in MEMBERS}
    for expected in ("dpmv_lib.core.policy.Policy.route", "dpmv_lib.core.policy.Policy.charge_set",
                     "dpmv_lib.core.policy.Query", "dpmv_lib.core.store.MemoryStore.read",
                     "dpmv_lib.core.ledger.InMemoryLedger.try_charge", "dpmv_lib.core.ledger.planned_charges",
                     "dpmv_lib.core.selection.permute_and_flip", "dpmv_lib.ledgers.sqlite.SqliteLedger.try_charge",
                     "dpmv_lib.ledgers.sqlite.SqliteLedgerStore.ledger", "dpmv_lib.ledgers.records.parse_state",
                     "dpmv_lib.ledgers.chain.export_state", "dpmv_lib.ledgers.postgres.PostgresLedger",
                     "dpmv_lib.generate.responders.make_responder"):
        assert expected in names, expected
    assert len(MEMBERS) > 120


@pytest.mark.parametrize("qualname, obj, fn, bound", MEMBERS, ids=[m[0] for m in MEMBERS])
def test_public_member_is_documented(qualname, obj, fn, bound):
    found = problems(qualname, obj, fn, bound)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("modname", MODULES)
def test_examples_run(modname):
    mod = importlib.import_module(modname)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_the_checker_finds_missing_sections():
    def undocumented(x):
        return x

    def no_raises(x):
        """Something.

        Parameters
        ----------
        x : int
            A number.
        """
        if x:
            raise PolicyError("x")

    def wrong_raises(x):
        """Something.

        Parameters
        ----------
        x : int
            A number.

        Raises
        ------
        StoreError
            Never.
        """
        raise (PolicyError if x else PolicyTypeError)("x")

    def base_documented(x):
        """Something.

        Parameters
        ----------
        x : int
            A number.

        Raises
        ------
        PolicyError
            If x.
        """
        if x:
            raise PolicyTypeError("x")
        raise

    assert problems("u", undocumented, undocumented, False) == ["u: no docstring"]
    assert problems("n", no_raises, no_raises, False) == ["n: raises ['PolicyError'] but has no Raises section"]
    assert len(problems("w", wrong_raises, wrong_raises, False)) == 2
    assert problems("b", base_documented, base_documented, False) == []
    assert documented_raises("x\n\nRaises\n------\nA, B\n    why\nC\n    why") == ["A", "B", "C"]


# ---- (b) wrong types raise TypeErrors that are also the domain error ----------------------------
POLICY, M, M_D, _ = running_example()


def _led() -> InMemoryLedger:
    return InMemoryLedger(POLICY.caps)


def _sqlite(tmp, **kw) -> Any:
    args = {"path": tmp / "l.db", "user_id": "alice", "caps": POLICY.caps,
            "policy_fingerprint": POLICY.fingerprint(), **kw}
    led = SqliteLedger(**args)
    led.close()  # (reached only if nothing raised: the test then fails)
    return led


WRONG_TYPES: list[tuple[str, Callable[[Any], Any], type[Exception]]] = [
    ("Policy.from_dict(int)", lambda tmp: Policy.from_dict(5), PolicyTypeError),
    ("Policy.from_dict slots int", lambda tmp: Policy.from_dict({**RUNNING_EXAMPLE_POLICY, "slots": 5}),
     PolicyTypeError),
    ("Policy.from_dict cap None", lambda tmp: Policy.from_dict({**RUNNING_EXAMPLE_POLICY, "attributes": [
        {**RUNNING_EXAMPLE_POLICY["attributes"][0], "cap": None}]}), PolicyTypeError),
    ("Policy.from_dict set inside", lambda tmp: Policy.from_dict({**RUNNING_EXAMPLE_POLICY, "x": {1}}),
     PolicyTypeError),
    ("Policy.from_dict limits str", lambda tmp: Policy.from_dict(RUNNING_EXAMPLE_POLICY, limits="big"),
     ParameterTypeError),
    ("Policy.load(int)", lambda tmp: Policy.load(5), PolicyTypeError),
    ("Policy.load limits int", lambda tmp: Policy.load(tmp / "p.json", limits=3), ParameterTypeError),
    ("Policy.load file slots int", lambda tmp: (tmp / "p.json").write_text(
        '{"name": "p", "slots": 5, "positions": [], "attributes": [], "routes": {}}') and Policy.load(tmp / "p.json"),
     PolicyTypeError),
    ("Policy.save(int)", lambda tmp: POLICY.save(5), PolicyTypeError),
    ("Policy name int", lambda tmp: dataclasses.replace(POLICY, name=5), PolicyTypeError),
    ("Policy sensitivity float", lambda tmp: dataclasses.replace(POLICY, sensitivity=0.6), PolicyTypeError),
    ("Policy.with_caps(None)", lambda tmp: POLICY.with_caps(None), PolicyTypeError),
    ("Policy.with_caps bool", lambda tmp: POLICY.with_caps({"debt": True}), PolicyTypeError),
    ("Policy.charge_set(int)", lambda tmp: POLICY.charge_set(5), PolicyTypeError),
    ("PolicyLimits str", lambda tmp: PolicyLimits(max_positions="10"), ParameterTypeError),
    ("Query text int", lambda tmp: Query(5, "meal_plan"), QueryTypeError),
    ("Policy.route(str)", lambda tmp: POLICY.route("dinner"), QueryTypeError),
    ("MemoryStore layout int", lambda tmp: MemoryStore(5, {}), StoreTypeError),
    ("MemoryStore layout pairs", lambda tmp: MemoryStore([(1, 2)], {1: ""}), StoreTypeError),
    ("MemoryStore contents list", lambda tmp: MemoryStore(POLICY.layout, []), StoreTypeError),
    ("MemoryStore content int", lambda tmp: MemoryStore(POLICY.layout, {i: 5 for i in POLICY.position_ids}),
     StoreTypeError),
    ("MemoryStore name int", lambda tmp: MemoryStore(M.layout, M.contents, 5), StoreTypeError),
    ("MemoryStore.from_policy(int)", lambda tmp: MemoryStore.from_policy(5, M.contents), PolicyTypeError),
    ("MemoryStore.from_policy contents", lambda tmp: MemoryStore.from_policy(POLICY, [1]), StoreTypeError),
    ("MemoryStore.read(int)", lambda tmp: M.read(5), StoreTypeError),
    ("MemoryStore.replace(list)", lambda tmp: M.replace([1]), StoreTypeError),
    ("MemoryStore.check_layout(int)", lambda tmp: M.check_layout(5), PolicyTypeError),
    ("is_adjacent(store, int)", lambda tmp: is_adjacent(M, 5, POLICY, "debt"), StoreTypeError),
    ("is_adjacent policy int", lambda tmp: is_adjacent(M, M_D, 5, "debt"), PolicyTypeError),
    ("OnlineBudget(str)", lambda tmp: OnlineBudget("3"), BudgetTypeError),
    ("OnlineBudget(bool)", lambda tmp: OnlineBudget(True), BudgetTypeError),
    ("PreallocatedBudget(list)", lambda tmp: PreallocatedBudget([1]), BudgetTypeError),
    ("PreallocatedBudget count float", lambda tmp: PreallocatedBudget({"debt": 1.5}), BudgetTypeError),
    ("PreallocatedBudget key int", lambda tmp: PreallocatedBudget({1: 1}), BudgetTypeError),
    ("InMemoryLedger(int)", lambda tmp: InMemoryLedger(5), BudgetTypeError),
    ("InMemoryLedger cap None", lambda tmp: InMemoryLedger({"debt": None}), BudgetTypeError),
    ("InMemoryLedger name int", lambda tmp: InMemoryLedger({1: 2}), BudgetTypeError),
    ("InMemoryLedger spent list", lambda tmp: InMemoryLedger(POLICY.caps, [1]), BudgetTypeError),
    ("InMemoryLedger.for_policy(int)", lambda tmp: InMemoryLedger.for_policy(5), PolicyTypeError),
    ("try_charge attributes str", lambda tmp: _led().try_charge("debt", Fraction(1)), BudgetTypeError),
    ("try_charge epsilon None", lambda tmp: _led().try_charge(frozenset({"debt"}), None), BudgetTypeError),
    ("charge_unchecked epsilon list", lambda tmp: _led().charge_unchecked(frozenset({"debt"}), [1]),
     BudgetTypeError),
    ("planned_charges(int)", lambda tmp: planned_charges(5, []), PolicyTypeError),
    ("planned_charges queries str", lambda tmp: planned_charges(POLICY, ["dinner"]), QueryTypeError),
    ("SqliteLedger path int", lambda tmp: _sqlite(tmp, path=5), BudgetTypeError),
    ("SqliteLedger user int", lambda tmp: _sqlite(tmp, user_id=5), BudgetTypeError),
    ("SqliteLedger fingerprint None", lambda tmp: _sqlite(tmp, policy_fingerprint=None), BudgetTypeError),
    ("SqliteLedger caps list", lambda tmp: _sqlite(tmp, caps=[1]), BudgetTypeError),
    ("SqliteLedger cap None", lambda tmp: _sqlite(tmp, caps={"debt": None}), BudgetTypeError),
    ("SqliteLedger key str", lambda tmp: _sqlite(tmp, key="secret-secret-secret"), BudgetTypeError),
    ("SqliteLedger timeout None", lambda tmp: _sqlite(tmp, timeout=None), BudgetTypeError),
    ("SqliteLedger synchronous int", lambda tmp: _sqlite(tmp, synchronous=2), BudgetTypeError),
    ("SqliteLedger witness int", lambda tmp: _sqlite(tmp, witness=5), BudgetTypeError),
    ("SqliteLedger.for_policy(int)", lambda tmp: SqliteLedger.for_policy(tmp / "l.db", "alice", 5),
     PolicyTypeError),
    ("SqliteLedgerStore path int", lambda tmp: SqliteLedgerStore(5), BudgetTypeError),
    ("parse_state(int)", lambda tmp: parse_state(5), BudgetTypeError),
    ("replay(int)", lambda tmp: replay(5, POLICY.caps), BudgetTypeError),
    ("replay caps list", lambda tmp: replay([], [1]), BudgetTypeError),
    ("get_selector(int)", lambda tmp: get_selector(5), ParameterTypeError),
    ("permute_and_flip(int)", lambda tmp: permute_and_flip(5), ParameterTypeError),
    ("LexiconScorer saturation float", lambda tmp: LexiconScorer(saturation=2.0), ParameterTypeError),
    ("LexiconScorer weight None", lambda tmp: LexiconScorer(w_r=None), ParameterTypeError),
    ("make_responder(int)", lambda tmp: make_responder(5), ParameterTypeError),
    ("make_responder decoding str", lambda tmp: make_responder("surrogate", POLICY, decoding="greedy"),
     ParameterTypeError),
]


def _domain(cls: type[Exception]) -> type[Exception]:
    """The domain error of a ``*TypeError`` class (PolicyTypeError -> PolicyError)."""
    return next(b for b in cls.__mro__[1:] if issubclass(b, DPMVError) and not issubclass(b, TypeError))


@pytest.mark.parametrize("name, call, expected", WRONG_TYPES, ids=[w[0] for w in WRONG_TYPES])
def test_wrong_type_raises_a_type_error_that_is_the_domain_error(tmp_path, name, call, expected):
    with pytest.raises(expected) as exc:
        call(tmp_path)
    err = exc.value
    assert isinstance(err, TypeError) and isinstance(err, DPMVTypeError)
    assert isinstance(err, _domain(expected)) and isinstance(err, ValueError)  # old handlers still catch it
    assert str(err).strip()


WRONG_VALUES: list[tuple[str, Callable[[Any], Any], type[Exception]]] = [
    ("Query empty intent", lambda tmp: Query("hi", ""), QueryError),
    ("Policy.from_dict empty routes", lambda tmp: Policy.from_dict({**RUNNING_EXAMPLE_POLICY, "routes": {}}),
     PolicyError),
    ("Policy.with_caps(0)", lambda tmp: POLICY.with_caps(0), PolicyError),
    ("Policy.load missing file", lambda tmp: Policy.load(tmp / "missing.json"), PolicyError),
    ("PolicyLimits(0)", lambda tmp: PolicyLimits(max_slots=0), ParameterError),
    ("MemoryStore missing position", lambda tmp: MemoryStore(M.layout, {1: "x"}), StoreError),
    ("MemoryStore.read unknown", lambda tmp: M.read((99,)), StoreError),
    ("OnlineBudget(0)", lambda tmp: OnlineBudget(0), BudgetError),
    ("PreallocatedBudget(-1)", lambda tmp: PreallocatedBudget({"debt": -1}), BudgetError),
    ("InMemoryLedger({})", lambda tmp: InMemoryLedger({}), BudgetError),
    ("InMemoryLedger cap -1", lambda tmp: InMemoryLedger({"debt": -1}), BudgetError),
    ("try_charge negative", lambda tmp: _led().try_charge(frozenset({"debt"}), -1), BudgetError),
    ("SqliteLedger user empty", lambda tmp: _sqlite(tmp, user_id=""), BudgetError),
    ("SqliteLedger synchronous OFF", lambda tmp: _sqlite(tmp, synchronous="OFF"), BudgetError),
    ("get_selector unknown", lambda tmp: get_selector("gumbel"), ParameterError),
    ("make_responder unknown", lambda tmp: make_responder("gpt"), ParameterError),
]


@pytest.mark.parametrize("name, call, expected", WRONG_VALUES, ids=[w[0] for w in WRONG_VALUES])
def test_wrong_value_keeps_its_value_error(tmp_path, name, call, expected):
    with pytest.raises(expected) as exc:
        call(tmp_path)
    assert isinstance(exc.value, ValueError) and not isinstance(exc.value, TypeError)


def test_every_domain_error_has_its_type_error_twin():
    for domain, twin in ((DPMVError, DPMVTypeError), (PolicyError, PolicyTypeError), (StoreError, StoreTypeError),
                         (QueryError, QueryTypeError), (BudgetError, BudgetTypeError),
                         (ParameterError, ParameterTypeError)):
        assert type_error_for(domain) is twin and issubclass(twin, domain) and issubclass(twin, TypeError)
    assert type_error_for(errors.LedgerIntegrityError) is errors.LedgerIntegrityError
    import dpmv_lib
    for name in ("DPMVTypeError", "PolicyTypeError", "StoreTypeError", "QueryTypeError", "BudgetTypeError",
                 "ParameterTypeError"):
        assert getattr(dpmv_lib, name) is getattr(errors, name) and name in dpmv_lib.__all__
