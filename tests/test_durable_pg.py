"""PostgresLedger: the durable-ledger and tamper tests of the SQLite backend, on a real PostgreSQL.

The server is a throw-away one on loopback (``pg_server`` in conftest.py; skipped locally when
PostgreSQL is absent, required in CI); every test gets a fresh schema. The tamper cases are the
SQLite ones (tests/test_durable_tamper.py: the same SQL edits as an attacker with write access
to the database would make), each unkeyed and HMAC-keyed; the refusal must name the ledger and
the problem and leave every row unchanged. Many-process and SIGKILL tests on PostgreSQL are in
tests/test_crash_concurrency.py.
"""
from __future__ import annotations

import json
import threading
from fractions import Fraction

import pytest

from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.ledgers.chain import export_state
from dpmv_lib.ledgers.records import replay
from dpmv_lib.core.errors import BudgetError, DPMVError, LedgerFormatError, LedgerIntegrityError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import Ledger, OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query
from dpmv_lib.checks.variants import NoCap

F = Fraction
KEY = bytes(range(32))
DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")
CHARGES = [({"debt", "diabetes"}, F(2, 3)), ({"debt"}, F(2, 3)), ({"debt", "diabetes"}, F(2, 3)),
           ({"debt"}, F(2, 3)), ({"diabetes"}, F(1, 3)), ({"debt"}, F(1, 3))]
FINAL = {"debt": F(2), "diabetes": F(5, 3)}


def _pg():
    from dpmv_lib.ledgers.postgres import PostgresLedger, PostgresLedgerStore
    return PostgresLedger, PostgresLedgerStore


def _tamper_cases():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("_tamper_cases", Path(__file__).with_name("test_durable_tamper.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CASES


CASES = _tamper_cases()
A = "user_id = 'alice'"


@pytest.fixture()
def policy():
    return running_example()[0]


def _build(dsn, policy, key):
    PostgresLedger, _ = _pg()
    with PostgresLedger.for_policy(dsn, "alice", policy, key=key) as alice, \
            PostgresLedger.for_policy(dsn, "bob", policy, key=key) as bob:
        for i, (attrs, eps) in enumerate(CHARGES):
            alice.try_charge(frozenset(attrs), eps)
            if i == 2:
                bob.try_charge(frozenset({"debt"}), F(1, 2))
        assert alice.spent() == FINAL
        assert [r.admitted for r in alice.log] == [True, True, True, False, True, False]


def _sql(dsn, *stmts):
    import psycopg
    with psycopg.connect(dsn) as c:  # one transaction, committed on exit
        for s in stmts:
            c.execute(s)


def _snapshot(dsn):
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        return {t: c.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("dpmv_meta", "ledger_user", "ledger_entry", "audit_log")}


# ---- the Ledger protocol, MemView, exactness -------------------------------------------------
def test_pg_protocol_memview_and_reopen(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    _, m, _, _ = running_example()
    led = PostgresLedger.for_policy(pg_dsn, "alice", policy)
    assert isinstance(led, Ledger) and "postgresql://127.0.0.1" in repr(led)
    rel = MemView(policy, m, ledger=led, seed=1).release(DINNER)
    assert rel.spent == {"debt": F(4, 3), "diabetes": F(2, 3)} == led.spent()
    led.close()
    with PostgresLedger.for_policy(pg_dsn, "alice", policy) as again:  # full verification on open
        assert again.spent() == {"debt": F(4, 3), "diabetes": F(2, 3)}
        assert again.integrity_check() == "ok" and again.verify().seq == 2
    with pytest.raises(BudgetError, match="policy"):
        PostgresLedger.for_policy(pg_dsn, "alice", policy.with_caps(7))


def test_pg_exact_rational_fill_and_blocked_audit(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    led = PostgresLedger.for_policy(pg_dsn, "alice", policy.with_caps("1/3"))
    for _ in range(3):
        assert led.try_charge(frozenset({"debt"}), F(1, 9))
    assert led.spent()["debt"] == F(1, 3)
    assert not led.try_charge(frozenset({"debt"}), F(1, 10**30))
    assert "BLOCKED" in led.log[-1].message() and led.log[-1].blocked == ("debt",)
    assert ("alice", "debt", "1/3", "1/3") in _snapshot(pg_dsn)["ledger_entry"]  # exact rational text


def test_pg_try_charge_many_is_one_sequential_decision_list(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    led = PostgresLedger.for_policy(pg_dsn, "alice", policy)
    oks, spent = led.try_charge_many([(frozenset({"debt"}), F(3, 2)), (frozenset({"debt", "diabetes"}), F(1, 2)),
                                      (frozenset({"debt"}), F(1, 2)), (frozenset({"diabetes"}), F(1, 2))])
    assert oks == (True, True, False, True) and spent == {"debt": F(2), "diabetes": F(1)} == led.spent()
    assert [r.seq for r in led.log] == [1, 2, 3, 4]
    with pytest.raises(DPMVError):  # a bad item: nothing of the batch is charged
        led.try_charge_many([(frozenset({"diabetes"}), F(1, 2)), (frozenset({"salary"}), F(1))])
    assert led.spent() == spent and len(led.log) == 4


def test_pg_nocap_and_rejected_calls(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    _, m, _, _ = running_example()
    led = PostgresLedger.for_policy(pg_dsn, "alice", policy)
    for _ in range(3):
        NoCap(policy, m, ledger=led, seed=0).release(DINNER)
    assert led.spent()["debt"] == 4 and all(not r.checked for r in led.log)
    before, n = led.spent(), len(led.log)
    for attrs, eps in [({"salary"}, F(1)), ({"debt"}, -1), ("debt", F(1)), ({"debt"}, float("nan"))]:
        with pytest.raises(DPMVError):
            led.try_charge(attrs, eps)
    assert led.spent() == before and len(led.log) == n


def test_pg_export_import_across_backends(pg_dsn, policy, tmp_path):
    """SQLite -> PostgreSQL -> SQLite: the state round-trips and is re-chained under each key."""
    PostgresLedger, store_cls = _pg()
    _, m, _, _ = running_example()
    src = SqliteLedger.for_policy(tmp_path / "a.db", "alice", policy)
    mv = MemView(policy, m, budget=OnlineBudget(4), ledger=src, seed=3)
    for _ in range(6):
        mv.release(DINNER)
    state = json.loads(json.dumps(export_state(src, policy.fingerprint())))
    dst = PostgresLedger.for_policy(pg_dsn, "alice", policy, key=KEY)
    dst.import_state(state)
    assert dst.spent() == src.spent() and replay(dst.log, dst.caps) == dst.spent()
    with pytest.raises(BudgetError, match="fresh ledger"):
        dst.import_state(state)
    back = SqliteLedger.for_policy(tmp_path / "b.db", "alice", policy)
    back.import_state(dst.export_state())
    assert back.spent() == src.spent()
    store = store_cls(pg_dsn, key=KEY)
    assert store.ledger("bob", policy).spent() == {"debt": 0, "diabetes": 0}
    assert store.users() == ["alice", "bob"]


def test_pg_other_connection_appends_verified_incrementally(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    a = PostgresLedger.for_policy(pg_dsn, "alice", policy, key=KEY)
    b = PostgresLedger.for_policy(pg_dsn, "alice", policy, key=KEY)
    assert a.try_charge(frozenset({"debt"}), F(1, 2))
    assert b.try_charge(frozenset({"debt"}), F(1, 2))
    assert a.try_charge(frozenset({"debt"}), F(1))
    assert not b.try_charge(frozenset({"debt"}), F(1, 10**9))
    assert a.spent() == b.spent() == {"debt": 2, "diabetes": 0}
    assert a.chain_head() == b.chain_head() and a.chain_head().seq == 4
    a.close(), b.close()


def test_pg_threads_share_one_user_exactly(pg_dsn, policy):
    """8 connections (threads) race on one user's ledger: exactly cap/eps charges admitted."""
    PostgresLedger, _ = _pg()
    leds = [PostgresLedger.for_policy(pg_dsn, "alice", policy) for _ in range(8)]
    results: list[bool] = []
    lock = threading.Lock()

    def work(led):
        for _ in range(10):
            ok = led.try_charge(frozenset({"debt"}), F(1, 25))
            with lock:
                results.append(ok)

    ts = [threading.Thread(target=work, args=(x,)) for x in leds]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert sum(results) == 50 and leds[0].spent()["debt"] == 2
    assert replay(leds[0].log, policy.caps) == leds[0].spent()
    [x.close() for x in leds]


def test_pg_bad_arguments_are_typed(pg_server, policy):
    PostgresLedger, _ = _pg()
    fp = policy.fingerprint()
    for bad in ("", None, 5):
        with pytest.raises(BudgetError):
            PostgresLedger(bad, "u", {"a": 1}, fp)
    with pytest.raises(BudgetError, match="cannot connect"):
        PostgresLedger("host=127.0.0.1 port=1 user=x dbname=x connect_timeout=2", "u", {"a": 1}, fp)
    with pytest.raises(BudgetError, match="user_id"):
        PostgresLedger(pg_server.dsn, "", {"a": 1}, fp)


# ---- tampering (the SQLite cases, on PostgreSQL) ------------------------------------------------
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("case", sorted(c for c in CASES if c != "log_edit_type"))
def test_pg_tampered_ledger_is_refused_and_left_unchanged(pg_dsn, policy, case, keyed):
    PostgresLedger, _ = _pg()
    key = KEY if keyed else None
    _build(pg_dsn, policy, key)
    stmts, words = CASES[case]
    _sql(pg_dsn, *stmts)
    before = _snapshot(pg_dsn)
    with pytest.raises(LedgerIntegrityError) as exc:
        PostgresLedger.for_policy(pg_dsn, "alice", policy, key=key)
    msg = str(exc.value)
    assert "postgresql://127.0.0.1" in msg and "'alice'" in msg and "nothing was changed" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert _snapshot(pg_dsn) == before
    if case != "record_moved_to_other_user":
        with PostgresLedger.for_policy(pg_dsn, "bob", policy, key=key) as bob:
            assert bob.spent()["debt"] == F(1, 2)


def test_pg_column_types_are_enforced_by_the_server(pg_dsn, policy):
    """The SQLite case 'admitted = yes' cannot even be written into PostgreSQL's typed columns."""
    import psycopg
    _build(pg_dsn, policy, None)
    with pytest.raises(psycopg.Error):
        _sql(pg_dsn, f"UPDATE audit_log SET admitted = 'yes' WHERE {A} AND seq = 4")


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("case", ["spent_reset_to_0", "spent_negative", "log_truncated", "log_deleted_whole",
                                  "totals_row_deleted", "head_edited", "log_edit_tail"])
def test_pg_tampering_after_open_refused_before_charge(pg_dsn, policy, case, keyed):
    PostgresLedger, _ = _pg()
    key = KEY if keyed else None
    _build(pg_dsn, policy, key)
    led = PostgresLedger.for_policy(pg_dsn, "alice", policy, key=key)
    stmts = ([f"UPDATE audit_log SET epsilon = '1/6' WHERE {A} AND seq = 6"] if case == "log_edit_tail"
             else CASES[case][0])
    _sql(pg_dsn, *stmts)
    before = _snapshot(pg_dsn)
    with pytest.raises(LedgerIntegrityError):
        led.try_charge(frozenset({"diabetes"}), F(1, 3))
    with pytest.raises(LedgerIntegrityError):
        led.spent()
    led.close()
    assert _snapshot(pg_dsn) == before


def test_pg_key_checks_and_anchor(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    _build(pg_dsn, policy, KEY)
    with pytest.raises(LedgerIntegrityError, match="HMAC-keyed but no key was given"):
        PostgresLedger.for_policy(pg_dsn, "alice", policy)
    with pytest.raises(LedgerIntegrityError, match="genesis hash does not match"):
        PostgresLedger.for_policy(pg_dsn, "alice", policy, key=bytes(range(1, 33)))
    with PostgresLedger.for_policy(pg_dsn, "alice", policy, key=KEY) as led:
        anchor = led.chain_head()
    _sql(pg_dsn, f"DELETE FROM audit_log WHERE {A}", f"UPDATE ledger_entry SET spent = '0' WHERE {A}",
         f"UPDATE ledger_user SET head_seq = 0, head_hash = genesis WHERE {A}")
    with PostgresLedger.for_policy(pg_dsn, "alice", policy, key=KEY) as led:
        with pytest.raises(LedgerIntegrityError, match="anchored head #6"):
            led.verify(anchor)


def test_pg_old_format_refused(pg_dsn, policy):
    PostgresLedger, _ = _pg()
    _sql(pg_dsn, "CREATE TABLE dpmv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
         "INSERT INTO dpmv_meta VALUES ('schema_version', '1')")
    with pytest.raises(LedgerFormatError, match=r"format version '1'"):
        PostgresLedger.for_policy(pg_dsn, "alice", policy)


# ---- one write transaction per release (both backends) -------------------------------------------
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_one_write_transaction_per_release_same_decisions(request, tmp_path, backend):
    """MemView charges all slots of a release in one ledger transaction, with exactly the
    decisions, views and ledger states of the per-slot path (in-memory ledger, same seed)."""
    from dpmv_lib.core.ledger import InMemoryLedger
    policy, m, _, _ = running_example()
    policy = policy.with_caps({"diabetes": "2", "debt": "5/2"})
    if backend == "sqlite":
        led = SqliteLedger.for_policy(tmp_path / "l.db", "alice", policy)
    else:
        led = _pg()[0].for_policy(request.getfixturevalue("pg_dsn"), "alice", policy)
    writes = []
    inner = led._charge
    led._charge = lambda items, checked: writes.append(len(items)) or inner(items, checked)
    durable = MemView(policy, m, budget=OnlineBudget(4), ledger=led, seed=7)
    memory = MemView(policy, m, budget=OnlineBudget(4), ledger=InMemoryLedger.for_policy(policy), seed=7)
    for _ in range(8):
        a, b = durable.release(DINNER), memory.release(DINNER)
        assert a.views == b.views and a.spent == b.spent
        assert [(s.charged, s.epsilon, s.fallback) for s in a.slots] == \
               [(s.charged, s.epsilon, s.fallback) for s in b.slots]
    assert writes == [2] * 8  # one transaction per release, both slots in it
    assert replay(led.log, policy.caps) == led.spent() == memory.ledger.spent()
    assert any(not r.admitted for r in led.log)  # the caps bound along the way
    led.close()
