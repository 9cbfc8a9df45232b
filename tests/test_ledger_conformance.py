"""One Ledger conformance suite, run against every backend (as dp_accounting's shared accountant test).

The ``backend`` fixture builds the SAME ledger (caps ``CAPS``, Fractions) three ways: ``memory``
(:class:`~dpmv_lib.core.ledger.InMemoryLedger`), ``sqlite``
(:class:`~dpmv_lib.ledgers.sqlite.SqliteLedger`, a file in ``tmp_path``) and ``postgres``
(:class:`~dpmv_lib.ledgers.postgres.PostgresLedger`, a fresh schema on the throw-away server of
``pg_server`` in conftest.py, started once per session; skipped locally without PostgreSQL,
required in CI). Every test below runs on all three and checks what the Ledger protocol
promises MemView:

* the protocol: ``caps``, ``spent()``, ``try_charge``, ``charge_unchecked`` (and
  ``try_charge_many``/``remaining()``/``log`` where a backend offers them: checked with
  ``hasattr``, skipped with the reason otherwise);
* exact C5: L_a + eps <= B_a for EVERY a of the charge set, else a refusal that changes nothing
  (all attributes of a charge set are charged or none); exact rational totals, no float drift;
* bad input: the documented typed error (``BudgetError``, ``UnknownAttributeError``) and no change;
* caps: copied in and out, not assignable, checked at construction, on reopen and by MemView;
* concurrency: N threads (one shared object, and one handle each) and, for the durable backends,
  N forked processes racing on one user: the cap is never exceeded and the final total equals the
  number of admitted charges times eps, exactly.

A test that a backend fails where the others pass is a conformance bug, fixed in the library (the
three found when the suite was written: an empty attribute name, a 5000-digit eps, a lone-surrogate
name) or, while open, marked ``xfail(strict=True)`` for that backend with the reason.
"""
from __future__ import annotations

import os
import random
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.errors import BudgetError, UnknownAttributeError
from dpmv_lib.core.ledger import InMemoryLedger, Ledger
from dpmv_lib.core.memview import MemView

F = Fraction
CAPS: dict[str, Fraction] = {"a": F(1), "b": F(2), "c": F(1, 3)}
FINGERPRINT = "conformance-policy-v1"  # the durable ledgers tie a ledger to a policy fingerprint
BACKENDS = ["memory", "sqlite", "postgres"]
DURABLE = ("sqlite", "postgres")


# ---- the backends -----------------------------------------------------------------------------------
@dataclass
class Backend:
    """How to get ledgers of one backend. ``open()`` returns a handle on THE ledger under test
    (user ``alice``): a new connection each call for the durable backends, the one object for
    ``memory``; ``build(caps)`` a fresh ledger with other caps (a new user: no reopen rules)."""

    name: str
    make: Callable[[Mapping[str, Any], str], Any]
    durable: bool
    handles: list[Any] = field(default_factory=list)
    _memory: dict[str, InMemoryLedger] = field(default_factory=dict)

    def open(self, caps: Mapping[str, Any] = CAPS, user: str = "alice") -> Any:
        if not self.durable:
            if user not in self._memory:
                self._memory[user] = self.make(caps, user)
            return self._memory[user]
        led = self.make(caps, user)
        self.handles.append(led)
        return led

    def build(self, caps: Mapping[str, Any]) -> Any:
        return self.open(caps, "u-" + uuid.uuid4().hex[:12])

    def close(self) -> None:
        for led in self.handles:
            led.close()
        self.handles.clear()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """The same ledger (caps CAPS) on each backend; durable handles are closed at teardown."""
    if request.param == "memory":
        b = Backend("memory", lambda caps, user: InMemoryLedger(caps), durable=False)
    elif request.param == "sqlite":
        from dpmv_lib.ledgers.sqlite import SqliteLedger
        path = tmp_path / "ledger.db"
        b = Backend("sqlite", lambda caps, user: SqliteLedger(path, user, caps, FINGERPRINT), durable=True)
    else:
        dsn = request.getfixturevalue("pg_dsn")  # (skips locally when PostgreSQL is absent)
        from dpmv_lib.ledgers.postgres import PostgresLedger
        b = Backend("postgres", lambda caps, user: PostgresLedger(dsn, user, caps, FINGERPRINT), durable=True)
    yield b
    b.close()


@pytest.fixture
def ledger(backend: Backend) -> Any:
    return backend.open()


def _trail(led: Any) -> list[tuple[Any, ...]]:
    """The operator audit trail in a backend-neutral form: (attributes, eps, admitted, remaining)."""
    return [(tuple(sorted(r.attributes)), r.epsilon, r.admitted, tuple(r.remaining)) for r in led.log]


def _state(led: Any) -> tuple[dict[str, Fraction], int]:
    """What a refused or rejected call must leave unchanged: the totals and the audit-log length."""
    return led.spent(), len(led.log) if hasattr(led, "log") else -1


def _reference(caps: Mapping[str, Fraction], charges: list[tuple[frozenset[str], Fraction]]
               ) -> tuple[list[bool], list[dict[str, Fraction]]]:
    """C5 by the book (paper, C5): each decision and the totals after it."""
    spent = {a: F(0) for a in caps}
    oks, totals = [], []
    for attrs, eps in charges:
        ok = all(spent[a] + eps <= caps[a] for a in attrs)
        if ok:
            for a in attrs:
                spent[a] += eps
        oks.append(ok)
        totals.append(dict(spent))
    return oks, totals


def _random_charges(seed: int, n: int) -> list[tuple[frozenset[str], Fraction]]:
    rng = random.Random(seed)
    names = sorted(CAPS)
    eps = [F(1, 3), F(1, 7), F(2, 9), F(1, 2), F(1, 10**12), F(5, 11), F(0), F(1, 9)]
    return [(frozenset(rng.sample(names, rng.randint(1, 3))), rng.choice(eps)) for _ in range(n)]


# ---- the protocol -----------------------------------------------------------------------------------
def test_protocol_surface_and_zero_start(ledger: Any) -> None:
    assert isinstance(ledger, Ledger)
    assert ledger.caps == CAPS and all(type(v) is Fraction for v in ledger.caps.values())
    spent = ledger.spent()
    assert spent == {a: 0 for a in CAPS} and all(type(v) is Fraction for v in spent.values())
    if hasattr(ledger, "remaining"):
        assert ledger.remaining() == CAPS
    if hasattr(ledger, "log"):
        assert list(ledger.log) == []


def test_caps_and_spent_are_copies_and_caps_cannot_be_assigned(backend: Backend) -> None:
    given = dict(CAPS)
    led = backend.build(given)
    given["c"] = F(100)  # the caller's mapping is copied in ...
    assert led.caps == CAPS
    out = led.caps
    out["c"] = F(100)  # ... and out
    spent = led.spent()
    spent["c"] = F(-5)
    assert led.caps == CAPS and led.spent()["c"] == 0
    with pytest.raises(AttributeError):
        led.caps = {"c": F(100)}
    assert not led.try_charge(frozenset({"c"}), F(1, 2))  # still refused under the real cap 1/3
    assert led.caps == CAPS and led.spent() == {a: 0 for a in CAPS}


def test_string_and_int_caps_are_read_exactly(backend: Backend) -> None:
    led = backend.build({"a": 1, "b": "2", "c": "1/3"})
    assert led.caps == CAPS and all(type(v) is Fraction for v in led.caps.values())


@pytest.mark.parametrize("caps", [{}, None, [("a", 1)], {"a": 0}, {"a": -1}, {"a": F(-1, 3)},
                                  {"a": float("nan")}, {"a": float("inf")}, {"a": True}, {"a": "x"},
                                  {"a": None}, {1: 1}, {("a",): 1}],
                         ids=["empty", "none", "pairs", "zero", "negative", "negative_fraction", "nan", "inf",
                              "bool", "text", "cap_none", "int_name", "tuple_name"])
def test_bad_caps_are_refused_at_construction(backend: Backend, caps: Any) -> None:
    with pytest.raises(BudgetError):
        backend.build(caps)


def test_empty_attribute_name_is_refused_at_construction(backend: Backend) -> None:
    """Policy refuses an attribute named "" (policy.py), and so do the durable ledgers (records._check_caps)."""
    with pytest.raises(BudgetError, match="attribute names"):
        backend.build({"": 1, "a": 1})


def test_reopen_sees_the_same_totals_and_refuses_other_caps(backend: Backend) -> None:
    if not backend.durable:
        pytest.skip("an InMemoryLedger lives in one object: there is no reopen to check caps on")
    led = backend.open()
    assert led.try_charge(frozenset({"a", "c"}), F(1, 3))
    again = backend.open()
    assert again.spent() == led.spent() == {"a": F(1, 3), "b": 0, "c": F(1, 3)}
    assert again.caps == CAPS
    for other in ({**CAPS, "c": F(1, 2)}, {"a": 1, "b": 2}):
        with pytest.raises(BudgetError, match="has caps .* but is opened with caps"):
            backend.open(other)
    # an added attribute reads as a deleted totals row: refused as tampering (a BudgetError too)
    with pytest.raises(BudgetError, match="totals row .* of \\['d'\\] is missing"):
        backend.open({**CAPS, "d": 1})
    assert backend.open().spent() == led.spent()  # the refused opens changed nothing


def test_memview_refuses_a_ledger_whose_caps_differ_from_the_policy(backend: Backend) -> None:
    policy, m, _, _ = running_example()
    MemView(policy, m, ledger=backend.build(policy.caps), seed=0)  # the matching caps are accepted
    for caps in ({**policy.caps, "debt": policy.caps["debt"] + F(1, 10**9)}, CAPS):
        with pytest.raises(BudgetError, match="do not match the policy caps"):
            MemView(policy, m, ledger=backend.build(caps), seed=0)


# ---- exact C5 -----------------------------------------------------------------------------------------
def test_a_charge_that_reaches_the_cap_exactly_is_admitted(ledger: Any) -> None:
    assert ledger.try_charge(frozenset({"c"}), F(1, 3)) is True
    assert ledger.spent()["c"] == F(1, 3) == ledger.caps["c"]
    if hasattr(ledger, "remaining"):
        assert ledger.remaining()["c"] == 0
    spent = ledger.spent()
    assert ledger.try_charge(frozenset({"c"}), F(1, 10**30)) is False  # the least bit more is refused
    assert ledger.spent() == spent


def test_a_refused_charge_changes_nothing(ledger: Any) -> None:
    assert ledger.try_charge(frozenset({"b"}), F(3, 2))
    spent = ledger.spent()
    for eps in (F(1, 2) + F(1, 10**20), F(1), F(2), F(10**6)):
        assert ledger.try_charge(frozenset({"b"}), eps) is False
        assert ledger.spent() == spent
    assert ledger.try_charge(frozenset({"b"}), F(1, 2))  # the exact rest still fits
    assert ledger.spent()["b"] == 2


@pytest.mark.parametrize("binding", sorted(CAPS))
def test_multi_attribute_charge_is_all_or_nothing(ledger: Any, binding: str) -> None:
    """C5 checks EVERY attribute of the charge set: one that cannot afford eps blocks the whole
    charge, and none of the others moves."""
    everything = frozenset(CAPS)
    rest = {a: CAPS[a] - F(1, 10**9) for a in CAPS}
    # fill the binding attribute up to its cap, the others to just below theirs
    assert ledger.try_charge(frozenset({binding}), CAPS[binding])
    for a in everything - {binding}:
        assert ledger.try_charge(frozenset({a}), rest[a])
    before = _state(ledger)
    assert ledger.try_charge(everything, F(1, 10**10)) is False
    assert ledger.try_charge(frozenset({binding, sorted(everything - {binding})[0]}), F(1, 10**10)) is False
    assert ledger.spent() == before[0]
    if before[1] >= 0:
        assert len(ledger.log) == before[1] + 2 and [r.admitted for r in ledger.log[-2:]] == [False, False]
    others = everything - {binding}
    assert ledger.try_charge(others, F(1, 10**9))  # without the binding attribute it fits exactly
    assert ledger.spent() == CAPS


def test_audit_trail_records_every_decision_alike(ledger: Any) -> None:
    if not hasattr(ledger, "log"):
        pytest.skip(f"{type(ledger).__name__} has no audit log")
    assert ledger.try_charge(frozenset({"a", "c"}), F(1, 3))
    assert not ledger.try_charge(frozenset({"b", "c"}), F(1, 6))
    assert ledger.try_charge(frozenset({"b"}), F(2))
    assert ledger.try_charge(frozenset(), F(7))
    assert _trail(ledger) == [
        (("a", "c"), F(1, 3), True, (("a", F(2, 3)), ("c", F(0)))),
        (("b", "c"), F(1, 6), False, (("b", F(2)), ("c", F(0)))),
        (("b",), F(2), True, (("b", F(0)),)),
        ((), F(7), True, ()),
    ]


def test_empty_charge_set_is_free(ledger: Any) -> None:
    """A selection that touches no protected attribute costs nothing, whatever its eps."""
    assert ledger.try_charge(frozenset(), F(10**6)) is True
    assert ledger.spent() == {a: 0 for a in CAPS}


def test_zero_epsilon_is_admitted_at_no_cost_even_at_a_full_cap(ledger: Any) -> None:
    """eps = 0 is accepted (check_charge_args: nonnegative) and L_a + 0 <= B_a holds at the cap."""
    assert ledger.try_charge(frozenset({"c"}), F(1, 3))
    for zero in (0, F(0), "0", 0.0):
        assert ledger.try_charge(frozenset({"a", "c"}), zero) is True
    assert ledger.spent() == {"a": 0, "b": 0, "c": F(1, 3)}


def test_decisions_and_totals_equal_the_reference_c5(ledger: Any) -> None:
    """60 random charges: every decision and every running total equal C5 computed by the book."""
    charges = _random_charges(32, 60)
    oks, totals = _reference(CAPS, charges)
    assert 10 < sum(oks) < 50  # the caps really bind along the way
    for (attrs, eps), ok, total in zip(charges, oks, totals):
        assert ledger.try_charge(attrs, eps) is ok
        assert ledger.spent() == total
    if hasattr(ledger, "log"):
        assert [r.admitted for r in ledger.log] == oks


# ---- exact rational totals ----------------------------------------------------------------------------
def test_thirds_fill_a_cap_of_one_exactly(ledger: Any) -> None:
    for _ in range(3):
        assert ledger.try_charge(frozenset({"a"}), F(1, 3))
    assert ledger.spent()["a"] == 1 and ledger.spent()["a"] == ledger.caps["a"]
    assert not ledger.try_charge(frozenset({"a"}), F(1, 10**40))


def test_mixed_denominators_and_readable_forms_sum_exactly(ledger: Any) -> None:
    for eps in (F(1, 2), "1/3", F(1, 6)):  # 1/2 + 1/3 + 1/6 == 1
        assert ledger.try_charge(frozenset({"a"}), eps)
    assert ledger.spent()["a"] == 1
    for _ in range(20):  # a float is read through its shortest repr: 0.1 -> 1/10, 20 x 0.1 == 2
        assert ledger.try_charge(frozenset({"b"}), 0.1)
    assert sum([0.1] * 20) != 2.0  # (float arithmetic would have drifted)
    assert ledger.spent()["b"] == 2 and not ledger.try_charge(frozenset({"b"}), 0.1)


def test_many_tiny_charges_sum_exactly(ledger: Any) -> None:
    eps = F(1, 3 * 97)
    for _ in range(97):
        assert ledger.try_charge(frozenset({"b", "c"}), eps)
    assert ledger.spent() == {"a": 0, "b": F(1, 3), "c": F(1, 3)}
    assert not ledger.try_charge(frozenset({"b", "c"}), eps)
    assert ledger.try_charge(frozenset({"c"}), 0) and ledger.spent()["c"] == F(1, 3)


def test_extreme_denominators_stay_exact(ledger: Any) -> None:
    tiny = F(1, 10**40)
    assert ledger.try_charge(frozenset({"c"}), F(1, 3) - tiny)
    assert ledger.try_charge(frozenset({"c"}), tiny)
    assert ledger.spent()["c"] == F(1, 3)
    assert not ledger.try_charge(frozenset({"c"}), tiny)
    odd = F(10**30 + 1, 7 * 10**30)  # just over 1/7: seven of them would pass the cap of 1 by 1/10**30
    for _ in range(6):
        assert ledger.try_charge(frozenset({"a"}), odd)
    assert not ledger.try_charge(frozenset({"a"}), odd)
    assert ledger.spent()["a"] == 6 * odd


def test_epsilon_beyond_the_int_string_limit_gets_a_typed_answer(backend: Backend) -> None:
    """An exact Fraction eps whose denominator has more than 4300 digits (CPython's int->str
    limit): admitted exactly, or refused with a BudgetError; either way nothing else moves."""
    led = backend.open()
    eps = F(1, 10**5000)
    before = _state(led)
    try:
        ok = led.try_charge(frozenset({"a"}), eps)
    except Exception as exc:
        assert _state(led) == before, "a failed charge moved the ledger"
        if not isinstance(exc, BudgetError):
            raise
    else:
        assert ok is True and led.spent() == {"a": eps, "b": 0, "c": 0}


# ---- bad input ------------------------------------------------------------------------------------------
_BAD_EPS = [(-1, ">= 0"), (F(-1, 3), ">= 0"), ("-1/3", ">= 0"), (float("nan"), "finite"), (float("inf"), "finite"),
            (float("-inf"), "finite"), ("abc", "not a valid number"), ("1/0", "not a valid number"),
            ("nan", "not a valid number"), (None, "must be an int, float"), (True, "got bool"),
            (1j, "must be an int, float"), (Decimal("0.1"), "must be an int, float"), ([F(1, 3)], "must be an int")]
_BAD_ATTRS = [(frozenset({"z"}), UnknownAttributeError, "'z'"), ({"a", "z"}, UnknownAttributeError, "'z'"),
              ({"a", 3}, UnknownAttributeError, "3"), ("a", BudgetError, "collection"),
              (b"a", BudgetError, "collection"), (5, BudgetError, "collection"), (None, BudgetError, "collection"),
              ([["a"]], BudgetError, "hashable")]
BAD_CALLS = ([(({"a"}, eps), BudgetError, f"epsilon.*{word}") for eps, word in _BAD_EPS]
             + [((attrs, F(1, 3)), cls, word) for attrs, cls, word in _BAD_ATTRS])


def _stable_repr(x) -> str:
    """repr with a set's elements sorted: test ids must not follow the hash seed (pytest-xdist
    workers collect separately and must agree on every id)."""
    if isinstance(x, (set, frozenset)):
        inner = ", ".join(sorted(map(repr, x)))
        return f"{{{inner}}}" if isinstance(x, set) else f"frozenset({{{inner}}})"
    return repr(x)


BAD_IDS = ([f"eps={e!r}" for e, _ in _BAD_EPS] + [f"attrs={_stable_repr(a)}" for a, _, _ in _BAD_ATTRS])


@pytest.mark.parametrize("args,error,match", BAD_CALLS, ids=BAD_IDS)
def test_bad_input_raises_the_documented_error_and_changes_nothing(ledger: Any, args: tuple[Any, Any],
                                                                   error: type[Exception], match: str) -> None:
    assert ledger.try_charge(frozenset({"a", "c"}), F(1, 6))  # a non-trivial state to keep
    before = _state(ledger)
    for method in ("try_charge", "charge_unchecked"):
        with pytest.raises(error, match=match):
            getattr(ledger, method)(*args)
        assert _state(ledger) == before, method
    if hasattr(ledger, "try_charge_many"):  # a bad item anywhere: nothing of the batch is charged
        with pytest.raises(error, match=match):
            ledger.try_charge_many([(frozenset({"b"}), F(1, 2)), args])
        assert _state(ledger) == before


@pytest.mark.parametrize("name", ["ä", 'q"uote', "new\nline", "\x00nul", "\ud800"],
                         ids=["unicode", "quote", "newline", "nul", "lone_surrogate"])
def test_unusual_attribute_names_work_or_are_refused_with_budget_error(backend: Backend, name: str) -> None:
    """Any str is a valid attribute name for InMemoryLedger; a durable backend must either store
    it exactly or refuse it at construction with a BudgetError (PostgreSQL refuses NUL: its text
    cannot hold one)."""
    caps = {name: F(1), "b": F(2)}
    try:
        led = backend.build(caps)
    except BudgetError:
        return
    assert led.caps == caps
    assert led.try_charge(frozenset({name, "b"}), F(1, 3)) and not led.try_charge(frozenset({name}), F(1))
    assert led.spent() == {name: F(1, 3), "b": F(1, 3)}


# ---- charge_unchecked and try_charge_many -------------------------------------------------------------
def test_charge_unchecked_overruns_and_then_every_check_refuses(ledger: Any) -> None:
    """Only the NoCap ablation (violates C5) calls it: it charges past the cap, exactly."""
    ledger.charge_unchecked(frozenset({"a", "c"}), F(1, 2))
    assert ledger.spent() == {"a": F(1, 2), "b": 0, "c": F(1, 2)}  # c is over its cap of 1/3
    assert not ledger.try_charge(frozenset({"c"}), 0) and not ledger.try_charge(frozenset({"a", "c"}), F(1, 9))
    assert ledger.try_charge(frozenset({"a"}), F(1, 2)) and ledger.spent()["a"] == 1
    if hasattr(ledger, "remaining"):
        assert ledger.remaining()["c"] == F(-1, 6)


def test_try_charge_many_decides_like_successive_try_charge(ledger: Any) -> None:
    if not hasattr(ledger, "try_charge_many"):
        pytest.skip(f"{type(ledger).__name__} offers no try_charge_many (MemView then charges slot by slot)")
    charges = _random_charges(7, 40)
    oks, totals = _reference(CAPS, charges)
    for i in range(0, len(charges), 8):
        got, spent = ledger.try_charge_many(charges[i:i + 8])
        assert got == tuple(oks[i:i + 8]) and spent == totals[i + 7] == ledger.spent()
    assert ledger.try_charge_many([]) == ((), ledger.spent())
    assert [r.admitted for r in ledger.log] == oks


@pytest.mark.parametrize("charges", ["abc", 5, None, [("a",)], [["a", F(1)]], [(frozenset({"a"}), F(1), 1)]],
                         ids=["str", "int", "none", "one_tuple", "list_pair", "triple"])
def test_try_charge_many_rejects_malformed_batches(ledger: Any, charges: Any) -> None:
    if not hasattr(ledger, "try_charge_many"):
        pytest.skip(f"{type(ledger).__name__} offers no try_charge_many")
    before = _state(ledger)
    with pytest.raises(BudgetError):
        ledger.try_charge_many(charges)
    assert _state(ledger) == before


# ---- concurrency ----------------------------------------------------------------------------------------
N_WORKERS, PER_WORKER = 4, 12
# (charge set, eps, the binding attribute): eps divides its cap (exactly cap/eps admitted) or does not
RACES = {"divides": (frozenset({"b", "c"}), F(1, 45), "c"), "remainder": (frozenset({"b"}), F(3, 20), "b")}


def _check_race(led: Any, attrs: frozenset[str], eps: Fraction, binding: str, admitted: int) -> None:
    """No cap exceeded; exactly floor(B/eps) admitted; every total == admitted * eps exactly."""
    spent = led.spent()
    assert admitted == CAPS[binding] // eps, (admitted, CAPS[binding] // eps)
    assert all(spent[a] == (admitted * eps if a in attrs else 0) for a in CAPS), spent
    assert all(spent[a] <= CAPS[a] for a in CAPS)
    if hasattr(led, "log"):
        log = led.log
        assert len(log) == N_WORKERS * PER_WORKER and sum(r.admitted for r in log) == admitted


@pytest.mark.parametrize("handles", ["shared", "one_per_thread"])
@pytest.mark.parametrize("race", sorted(RACES))
def test_threads_never_exceed_the_cap(backend: Backend, race: str, handles: str) -> None:
    """(``one_per_thread`` is one connection per thread for the durable backends; an
    InMemoryLedger has no second handle, so there it is the shared object again.)"""
    attrs, eps, binding = RACES[race]
    leds = [backend.open() for _ in range(N_WORKERS if handles == "one_per_thread" else 1)]
    results: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    go = threading.Barrier(N_WORKERS)

    def work(led: Any) -> None:
        try:
            go.wait(timeout=30)
            for _ in range(PER_WORKER):
                ok = led.try_charge(attrs, eps)
                with lock:
                    results.append(ok)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(leds[i % len(leds)],)) for i in range(N_WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a charging thread hung"
    assert not errors, errors
    assert len(results) == N_WORKERS * PER_WORKER
    _check_race(leds[0], attrs, eps, binding, sum(results))


def _fork_worker(backend: Backend, attrs: frozenset[str], eps: Fraction, go_r: int, go_w: int) -> tuple[int, int]:
    """Fork a child that opens its own handle, waits for the go byte, makes PER_WORKER charges
    and writes how many were admitted to a pipe (exit status 1 and a traceback on failure)."""
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.close(out_r)
            os.close(go_w)
            led = backend.make(CAPS, "alice")
            os.read(go_r, 1)
            n = sum(bool(led.try_charge(attrs, eps)) for _ in range(PER_WORKER))
            led.close()  # (also removes its group-commit request file: os._exit runs no finalizer)
            os.write(out_w, str(n).encode())
            code = 0
        except BaseException:  # noqa: BLE001  (reported through the status and the pipe)
            os.write(out_w, traceback.format_exc().encode()[-4000:])
        finally:
            os._exit(code)
    os.close(out_w)
    return pid, out_r


@pytest.mark.parametrize("race", sorted(RACES))
def test_processes_never_exceed_the_cap(backend: Backend, race: str) -> None:
    if not backend.durable:
        pytest.skip("an InMemoryLedger is one process's object: a forked child would charge its own copy")
    attrs, eps, binding = RACES[race]
    led = backend.open()  # creates the user's ledger before the children race on it
    go_r, go_w = os.pipe()
    children = [_fork_worker(backend, attrs, eps, go_r, go_w) for _ in range(N_WORKERS)]
    os.close(go_r)
    os.write(go_w, b"g" * N_WORKERS)  # all start charging together
    os.close(go_w)
    admitted = 0
    for pid, out_r in children:
        with os.fdopen(out_r, "rb") as f:
            text = f.read().decode(errors="replace")
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        assert status == 0, f"child {pid} failed:\n{text}"
        admitted += int(text)
    _check_race(led, attrs, eps, binding, admitted)
