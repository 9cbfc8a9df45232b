"""Durable SQLite ledger: exact storage, fingerprint checks, audit log, export/import, replay (C5)."""
from __future__ import annotations

import json
import sqlite3
from fractions import Fraction

import pytest

from dpmv_lib.ledgers import group_commit
from dpmv_lib.ledgers.records import AuditRecord, import_state, replay, replay_ledger
from dpmv_lib.ledgers.sqlite import InMemoryLedgerStore, SqliteLedger, SqliteLedgerStore
from dpmv_lib.ledgers.chain import CommitStats, export_state
from dpmv_lib.core.errors import BudgetError, DPMVError, UnknownAttributeError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import Ledger, OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query
from dpmv_lib.checks.variants import NoCap

DINNER = Query("Any ideas for an affordable dinner?", "affordable_dinner")
MEAL = Query("Plan my meals this week", "meal_plan")
BUDGET = Query("How is my budget?", "budget_check")


@pytest.fixture()
def example():
    return running_example()


@pytest.fixture()
def db(tmp_path):
    return tmp_path / "ledger.db"


def test_protocol_and_memview_unchanged(example, db):
    policy, m, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    assert isinstance(led, Ledger)
    mv = MemView(policy, m, ledger=led, seed=1)
    rel = mv.release(DINNER)
    # turn 1: food charges {diabetes, debt}, finance charges {debt}; eps = 2/3 each (K=3)
    assert rel.spent == {"debt": Fraction(4, 3), "diabetes": Fraction(2, 3)}
    assert led.spent() == rel.spent
    led.close()
    again = SqliteLedger.for_policy(db, "alice", policy)  # durable across reopen
    assert again.spent() == {"debt": Fraction(4, 3), "diabetes": Fraction(2, 3)}
    assert again.integrity_check() == "ok"


def test_wal_and_values_stored_as_exact_rational_text(example, db):
    policy, m, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy.with_caps("1/3"))
    for _ in range(3):
        led.try_charge(frozenset({"debt"}), Fraction(1, 9))
    assert led.spent()["debt"] == Fraction(1, 3)  # exactly the cap, no float drift
    assert not led.try_charge(frozenset({"debt"}), Fraction(1, 10**30))
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = conn.execute("SELECT typeof(cap), typeof(spent), spent FROM ledger_entry").fetchall()
    assert {r[0] for r in rows} == {"text"} and {r[1] for r in rows} == {"text"}
    assert ("text", "text", "1/3") in rows
    assert {r[0] for r in conn.execute("SELECT typeof(epsilon) FROM audit_log")} == {"text"}
    conn.close()


def test_three_charges_of_two_thirds_fill_cap_exactly(example, db):
    policy, _, _, _ = example
    led = SqliteLedger.for_policy(db, "u", policy)
    assert all(led.try_charge(frozenset({"diabetes"}), Fraction(2, 3)) for _ in range(3))
    assert led.spent()["diabetes"] == 2
    assert not led.try_charge(frozenset({"diabetes"}), Fraction(2, 3))
    assert led.spent()["diabetes"] == 2


def test_fingerprint_and_caps_checked_on_open(example, db):
    policy, m, _, _ = example
    SqliteLedger.for_policy(db, "alice", policy).close()
    other = policy.with_caps(3)
    with pytest.raises(BudgetError) as exc:
        SqliteLedger.for_policy(db, "alice", other)
    assert policy.fingerprint() in str(exc.value) and other.fingerprint() in str(exc.value)
    with pytest.raises(BudgetError, match="caps"):
        SqliteLedger(db, "alice", {"diabetes": 2, "debt": 3}, policy.fingerprint())
    # another user in the same file is independent
    bob = SqliteLedger.for_policy(db, "bob", other)
    with pytest.raises(BudgetError, match="do not match the policy caps"):
        MemView(policy, m, ledger=bob)  # MemView checks ledger.caps == policy caps


def test_blocked_selection_silent_to_app_visible_in_audit_log(example, db):
    policy, m, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    mv = MemView(policy, m, ledger=led, seed=3)
    rels = [mv.release(DINNER) for _ in range(3)]  # no exception when the cap binds
    last = rels[-1]
    assert all(s.view.endswith(".generic") and s.fallback and s.mechanism == "generic" for s in last.slots)
    assert all(s.charged == frozenset() and s.epsilon == 0 for s in last.slots)
    log = led.log
    assert [r.seq for r in log] == sorted(r.seq for r in log) and len({r.seq for r in log}) == len(log)
    assert all(r.timestamp for r in log)
    blocked = [r for r in log if not r.admitted]
    assert blocked, "fallbacks must appear in the audit log"
    b = blocked[-1]
    assert b.attributes == ("debt",) and b.epsilon == Fraction(2, 3) and b.blocked == ("debt",)
    assert dict(b.remaining) == {"debt": Fraction(0)}
    msg = b.message()
    assert "BLOCKED" in msg and "eps=2/3" in msg and "debt=0" in msg
    food_block = [r for r in blocked if r.attributes == ("debt", "diabetes")][-1]
    assert dict(food_block.remaining) == {"debt": Fraction(0), "diabetes": Fraction(2, 3)}
    assert food_block.blocked == ("debt",)  # only debt failed; diabetes still had room


def test_in_memory_log_shows_fallback_too(example):
    policy, m, _, _ = example
    mv = MemView(policy, m, seed=3)
    for _ in range(3):
        mv.release(DINNER)
    rec = AuditRecord.from_charge_record(mv.ledger.log[-1], seq=len(mv.ledger.log))
    assert not rec.admitted and rec.blocked == ("debt",) and "requested eps=2/3" in rec.message()


def _drive(mv, n, queries=(DINNER, MEAL, BUDGET)):
    history = []
    for i in range(n):
        history.append(mv.release(queries[i % len(queries)], history))
    return history


def test_export_import_roundtrip_and_replay(example, tmp_path):
    policy, m, _, _ = example
    policy = policy.with_caps({"diabetes": "3", "debt": "5/2"})
    src = SqliteLedger.for_policy(tmp_path / "a.db", "alice", policy)
    _drive(MemView(policy, m, budget=OnlineBudget(4), ledger=src, seed=11), 9)
    state = json.loads(json.dumps(src.export_state()))  # really JSON
    assert state["caps"] == {"debt": "5/2", "diabetes": "3"}
    assert replay(state["log"], policy.caps) == src.spent()
    assert replay(src.log, src.caps) == src.spent()
    dst = SqliteLedger.for_policy(tmp_path / "b.db", "alice", policy)
    dst.import_state(state)
    assert dst.spent() == src.spent()
    def strip(log):
        return [{k: v for k, v in r.to_dict().items() if k != "seq"} for r in log]
    assert strip(dst.log) == strip(src.log)
    # the imported ledger keeps enforcing the same caps
    assert dst.remaining() == src.remaining()
    mem = import_state(state, policy.fingerprint())
    assert mem.spent() == src.spent() and len(mem.log) == len(src.log)


def test_import_checks(example, tmp_path):
    policy, m, _, _ = example
    src = SqliteLedger.for_policy(tmp_path / "a.db", "alice", policy)
    _drive(MemView(policy, m, ledger=src, seed=2), 3)
    state = src.export_state()
    other = policy.with_caps(4)
    with pytest.raises(BudgetError) as exc:
        SqliteLedger.for_policy(tmp_path / "b.db", "alice", other).import_state(state)
    assert policy.fingerprint() in str(exc.value) and other.fingerprint() in str(exc.value)
    with pytest.raises(BudgetError, match="fresh ledger"):
        src.import_state(state)  # never lower (or overwrite) a spent budget
    with pytest.raises(BudgetError, match="user"):
        SqliteLedger.for_policy(tmp_path / "c.db", "bob", policy).import_state(state)
    lowered = dict(state, spent={a: "0" for a in state["spent"]})
    with pytest.raises(BudgetError, match="inconsistent"):
        SqliteLedger.for_policy(tmp_path / "d.db", "alice", policy).import_state(lowered)
    forged = json.loads(json.dumps(state))
    first_blocked = next(r for r in forged["log"] if not r["admitted"])
    first_blocked["admitted"] = True
    with pytest.raises(BudgetError, match="overruns a cap"):
        SqliteLedger.for_policy(tmp_path / "e.db", "alice", policy).import_state(forged)
    with pytest.raises(BudgetError):
        import_state("{not json", policy.fingerprint())
    with pytest.raises(BudgetError, match="format"):
        import_state({"caps": {}}, policy.fingerprint())
    fresh = SqliteLedger.for_policy(tmp_path / "f.db", "alice", policy)
    for bad in (lowered, forged, "{not json"):
        with pytest.raises(DPMVError):
            fresh.import_state(bad)
    assert fresh.spent() == {"diabetes": 0, "debt": 0} and fresh.log == []  # rejected = unchanged


def test_replay_in_memory_ledger_and_detects_tampering(example):
    policy, m, _, _ = example
    mv = MemView(policy, m, seed=5)
    _drive(mv, 8)
    led = mv.ledger
    assert replay(led.log, led.caps) == led.spent()
    copy = replay_ledger(led.log, led.caps)
    assert copy.spent() == led.spent() and len(copy.log) == len(led.log)
    state = export_state(led, policy.fingerprint(), "alice")
    assert import_state(state, policy.fingerprint()).spent() == led.spent()
    recs = [AuditRecord.from_charge_record(r, i) for i, r in enumerate(led.log, 1)]
    bad = recs[:1] + [AuditRecord(99, "", "", recs[1].attributes, recs[1].epsilon, recs[1].admitted,
                                  True, tuple((a, v + 1) for a, v in recs[1].remaining), ())] + recs[2:]
    with pytest.raises(BudgetError, match="remaining"):
        replay(bad, led.caps)
    with pytest.raises(UnknownAttributeError):
        replay([{"attributes": ["salary"], "epsilon": "1", "admitted": True}], led.caps)


def test_nocap_on_durable_ledger_is_logged_as_unchecked(example, db):
    policy, m, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    _drive(NoCap(policy, m, ledger=led, seed=0), 3, (DINNER,))
    assert led.spent()["debt"] == 4  # over the cap of 2: the ablation violates C5
    assert all(not r.checked and r.admitted for r in led.log)
    assert replay(led.log, led.caps) == led.spent()


def test_rejected_calls_leave_sqlite_ledger_unchanged(example, db):
    policy, _, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    led.try_charge(frozenset({"debt"}), Fraction(1, 2))
    before, n = led.spent(), len(led.log)
    for attrs, eps in [({"salary"}, Fraction(1)), ({"debt"}, float("nan")), ({"debt"}, -1),
                       ({"debt"}, "abc"), ("debt", Fraction(1)), (5, Fraction(1)), ({"debt"}, None),
                       ({"debt", 3}, Fraction(1)), ({"debt"}, float("inf")), ({"debt"}, True)]:
        with pytest.raises(DPMVError):
            led.try_charge(attrs, eps)
        with pytest.raises(DPMVError):
            led.charge_unchecked(attrs, eps)
    assert led.spent() == before and len(led.log) == n


def test_per_user_ledger_stores(example, tmp_path):
    policy, m, _, _ = example
    for store in (SqliteLedgerStore(tmp_path / "users.db"), InMemoryLedgerStore()):
        a, b = store.ledger("alice", policy), store.ledger("bob", policy)
        MemView(policy, m, ledger=a, seed=0).release(DINNER)
        assert b.spent() == {"diabetes": 0, "debt": 0}
        assert store.ledger("alice", policy).spent() == a.spent()
        assert store.users() == ["alice", "bob"]
        with pytest.raises(BudgetError, match="policy"):
            store.ledger("alice", policy.with_caps(7))
    with pytest.raises(BudgetError, match="user_id"):
        SqliteLedger.for_policy(tmp_path / "x.db", "", policy)


def test_bad_constructor_arguments(example, tmp_path):
    policy, _, _, _ = example
    fp = policy.fingerprint()
    for caps in ({}, None, {"a": -1}, {"a": float("nan")}, {1: 2}, [("a", 1)]):
        with pytest.raises(BudgetError):
            SqliteLedger(tmp_path / "z.db", "u", caps, fp)
    with pytest.raises(BudgetError):
        SqliteLedger(tmp_path / "z.db", "u", {"a": 1}, "")
    with pytest.raises(BudgetError):
        SqliteLedger(tmp_path / "nodir" / "z.db", "u", {"a": 1}, fp)


def test_deployment_doc_example_runs(tmp_path, monkeypatch, capsys):
    """docs/deployment.md's example runs as written and prints an audit log with a fallback."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "deployment.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exec(compile(code, "docs/deployment.md", "exec"), {"__name__": "deployment_example"})
    out = capsys.readouterr().out
    assert "#1 charged eps=2/3 to {debt, diabetes}" in out and "BLOCKED (generic fallback)" in out


def test_group_commit_leader_takes_posted_requests_exactly_once(example, db):
    """The writer-lock holder commits a posted request of another requester (same user, same
    key) with its own charge in one transaction and stores its answer there; an answered request
    posted again is not charged twice; garbage, requests of dead processes and requests under
    another key id, torn reads (digest mismatch) and withdrawn requests are never charged
    (dpmv_lib.ledgers.group_commit)."""
    import os
    import subprocess
    import sys
    import time

    policy = example[0]
    led = SqliteLedger.for_policy(db, "alice", policy)
    qdir = led._gc.dir
    assert not os.path.exists(qdir)  # a lone process never posts, so the queue is not created
    os.makedirs(qdir, mode=0o700)  # as the first posting process does
    me = os.getpid()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()

    def post(name, req, key, items):
        with open(os.path.join(qdir, name), "wb") as f:
            f.write(group_commit.request_body(req, time.time(), key, json.dumps(items)))

    third = Fraction(1, 3)
    post(f"{me}-feedbeef", 1, led._gc.key_id, [[["debt"], "1/3"]])
    post(f"{dead}-0dead", 1, led._gc.key_id, [[["debt"], "1/3"]])
    post(f"{me}-otherkey", 1, "0" * 32, [[["debt"], "1/3"]])
    with open(os.path.join(qdir, f"{me}-garbage"), "w") as f:
        f.write("not a request")
    torn = group_commit.request_body(1, time.time(), led._gc.key_id, json.dumps([[["debt"], "1/3"]]))
    with open(os.path.join(qdir, f"{me}-torn"), "wb") as f:  # read while rewritten: digest mismatch
        f.write(torn.replace(b'"1/3"', b'"2/3"'))
    assert led.try_charge(frozenset({"diabetes"}), third)
    assert led.spent() == {"debt": third, "diabetes": third}  # the posted request, then our own
    log = led.log
    assert [(r.attributes, r.admitted) for r in log] == [(("debt",), True), (("diabetes",), True)]
    assert log[0].timestamp == log[1].timestamp  # one transaction
    conn = sqlite3.connect(db)
    (req, answer), = conn.execute("SELECT req, answer FROM dpmv_gc WHERE owner = ?", (f"{me}-feedbeef",))
    origins = [r for r, in conn.execute("SELECT origin FROM audit_log ORDER BY seq")]
    conn.close()
    # the answer points at the request's records, which name it (origin) in the chain
    assert req == 1 and json.loads(answer) == {"seq": 1} and origins == [f"{me}-feedbeef:1", ""]
    # the dead owner's file is removed; the others stay (the taken one until its owner
    # withdraws it; garbage, torn and other-key requests are never charged)
    assert sorted(os.listdir(qdir)) == sorted([f"{me}-{n}" for n in ("feedbeef", "garbage", "otherkey", "torn")]
                                              + [led._gc.owner])  # (+ the ledger's own, empty)
    st = led.commit_stats()  # one request of ours, one commit, carrying one request of another
    assert (st.requests, st.commits, st.batched) == (1, 1, 1)
    post(f"{me}-feedbeef", 1, led._gc.key_id, [[["debt"], "1/3"]])  # answered already: not again
    assert led.try_charge(frozenset({"diabetes"}), third)
    assert led.spent() == {"debt": third, "diabetes": 2 * third}
    with open(os.path.join(qdir, f"{me}-feedbeef"), "r+b") as f:  # withdrawn by its owner
        f.write(b"0\n")
    post(f"{me}-otherkey", 2, "0" * 32, [[["debt"], "1/3"]])
    assert led.try_charge(frozenset({"diabetes"}), third)  # withdrawn, other key: not charged
    assert led.spent() == {"debt": third, "diabetes": 3 * third}
    for n in ("feedbeef", "garbage", "otherkey", "torn"):
        os.unlink(os.path.join(qdir, f"{me}-{n}"))
    led.close()
    assert not os.path.exists(qdir)  # the queue directory goes with the last ledger


def test_commit_stats_one_process_one_transaction_per_release(example, db):
    """A lone process commits every release in its own write transaction: exactly one
    transaction per release (releases/commit = 1.0), counted by the ledger, not inferred."""
    policy, m, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    assert led.commit_stats().per_commit is None
    mv = MemView(policy, m, budget=OnlineBudget(3), ledger=led, seed=3)
    for _ in range(25):
        mv.release(DINNER)
    led.spent()  # reads are not write transactions
    st = led.commit_stats()
    assert (st.requests, st.commits, st.batched) == (25, 25, 0) and st.per_commit == 1.0
    led.charge_unchecked(frozenset({"debt"}), Fraction(0))
    assert led.commit_stats().commits == 26
    with pytest.raises(BudgetError):
        led.try_charge_many([(frozenset({"debt"}), Fraction(-1))])  # rejected: nothing counted
    assert led.commit_stats().requests == 26
    led.close()


def test_audit_timestamp_format_unchanged():
    """utc_now() (formatted once per second) writes what datetime.isoformat wrote before: UTC,
    microseconds, "+00:00", and the current time."""
    import re
    from datetime import UTC, datetime
    from dpmv_lib.ledgers.records import utc_now
    for _ in range(3):
        before = datetime.now(UTC)
        ts = utc_now()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", ts), ts
        parsed = datetime.fromisoformat(ts)
        assert before.replace(microsecond=0) <= parsed <= after, (before, ts, after)
        assert parsed.isoformat(timespec="microseconds") == ts


def test_verification_skipped_only_while_no_other_connection_committed(example, db):
    """The per-charge verification (head, totals, log tail) runs again whenever another connection
    committed to the file (PRAGMA data_version changed), and only then."""
    policy, _, _, _ = example
    led = SqliteLedger.for_policy(db, "alice", policy)
    seen: list[str] = []
    led._db().set_trace_callback(seen.append)

    def verification_reads() -> int:
        return sum(1 for s in seen if s.startswith("SELECT") and "audit_log" in s)

    assert led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    assert verification_reads() == 1  # the new user's first charge verifies
    seen.clear()
    assert led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    assert led.spent()["debt"] == Fraction(2, 3)
    assert verification_reads() == 0  # nobody else wrote since
    other = SqliteLedger.for_policy(db, "alice", policy)  # another connection: verifies, charges
    assert other.try_charge(frozenset({"debt"}), Fraction(1))
    other.close()
    seen.clear()
    assert not led.try_charge(frozenset({"debt"}), Fraction(1, 2))  # sees the other's charge: 5/3 + 1/2 > 2
    assert verification_reads() == 1 and led.spent()["debt"] == Fraction(5, 3)
    seen.clear()
    assert led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    assert verification_reads() == 0 and led.spent()["debt"] == Fraction(2)
    # an edit by another connection after this one's last commit is refused before the next charge
    conn = sqlite3.connect(db)
    conn.execute("UPDATE ledger_entry SET spent = '0' WHERE attribute = 'debt'")
    conn.commit(), conn.close()
    with pytest.raises(DPMVError, match="stored spent budgets do not equal"):
        led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    led.close()


def test_waiting_requester_verifies_under_a_read_snapshot_off_the_lock(example, db):
    """A requester that posted and waits for the lock holder verifies what other processes
    appended under a read snapshot, without the writer lock (group_commit.charge): a sound chain
    is then not re-verified in its own write transaction when nobody committed since; an edited
    record makes it raise while another process still holds the lock, its request withdrawn."""
    import fcntl
    import os
    import threading
    import time

    from dpmv_lib.core.errors import LedgerIntegrityError

    policy = example[0]
    third = Fraction(1, 3)

    def wait_while_locked(led):
        """Charge from a thread while this test holds the writer lock and another requester is
        registered (so the charge posts and waits); returns (thread, outcome, SQL trace)."""
        seen: list[tuple[bool, str]] = []
        held = [True]
        led._db().set_trace_callback(lambda s: seen.append((held[0], s)))
        out: dict = {}

        def run():
            try:
                out["ok"] = led.try_charge(frozenset({"diabetes"}), third)
            except BaseException as exc:  # noqa: BLE001  (reported to the test)
                out["error"] = exc
        t = threading.Thread(target=run)
        t.start()
        return t, out, seen, held

    led = SqliteLedger.for_policy(db, "alice", policy)
    other = SqliteLedger.for_policy(db, "alice", policy)  # another requester of the same user
    assert other.try_charge(frozenset({"debt"}), third)   # appended by "another process"
    other._gc.register()
    lock = os.open(str(db) + ".lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)                       # the lock holder (a leader at work)
    t, out, seen, held = wait_while_locked(led)
    deadline = time.monotonic() + 60       # a bound for a stuck requester, not a speed expectation
    while not any(s.startswith("SELECT") and "audit_log" in s for _, s in seen):
        assert time.monotonic() < deadline, "the waiting requester did not verify while the lock was held"
        t.join(0.05)
    assert t.is_alive()                                    # ... and it still waits for the lock
    held[0] = False
    fcntl.flock(lock, fcntl.LOCK_UN)                       # nobody took its request: it leads
    t.join(10)
    assert out == {"ok": True} and led.spent() == {"debt": third, "diabetes": third}
    write_tx = [s for h, s in seen if not h]
    assert write_tx and not any(s.startswith("SELECT") and "audit_log" in s for s in write_tx), write_tx

    # an edited record of another process is refused by the waiting requester itself
    assert other.try_charge(frozenset({"debt"}), third)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE audit_log SET epsilon = '1/9' WHERE seq = (SELECT MAX(seq) FROM audit_log)")
    conn.commit()
    conn.close()
    fcntl.flock(lock, fcntl.LOCK_EX)
    t, out, seen, held = wait_while_locked(led)
    t.join(10)
    assert not t.is_alive(), "the requester waited instead of refusing the edited chain"
    assert isinstance(out.get("error"), LedgerIntegrityError), out
    with open(os.path.join(led._gc.dir, led._gc.owner), "rb") as f:
        assert f.read(2) == b"0\n"                         # its request is withdrawn
    fcntl.flock(lock, fcntl.LOCK_UN)
    os.close(lock)
    other.close()
    led.close()


def _fork(fn) -> int:
    """Run ``fn()`` in a forked child (exit status 0: it returned, 1: it raised); the child's pid."""
    import os
    import traceback
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001  (reported through the status)
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _status(pid: int) -> int:
    import os
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_processes_opening_a_new_file_together_all_succeed(example, tmp_path):
    """Four processes that open the same new ledger file at the same moment all succeed (the
    switch to WAL runs under the writer lock; before, 7 of 40 such tries had an open fail at
    once with "database is locked", without SQLite's busy handler)."""
    import os
    import time

    policy = example[0]
    for trial in range(30):
        path = tmp_path / f"new{trial}.db"
        go_r, go_w = os.pipe()

        def open_it(go_r=go_r, go_w=go_w, path=path):
            os.close(go_w)
            os.read(go_r, 1)
            SqliteLedger.for_policy(path, "alice", policy).close()
        pids = [_fork(open_it) for _ in range(4)]
        os.close(go_r)
        time.sleep(0.02)
        os.write(go_w, b"go!!")  # all four start together
        os.close(go_w)
        codes = [_status(p) for p in pids]
        assert codes == [0, 0, 0, 0], f"try {trial}: exit codes {codes}"
        led = SqliteLedger.for_policy(path, "alice", policy)
        assert led.spent() == {"debt": 0, "diabetes": 0} and led.integrity_check() == "ok"
        led.close()


def test_forked_child_reopens_and_charges_through_the_inherited_ledger(example, db):
    """A ledger object used in a forked child reopens its connection and lock there (the pid is
    refreshed by an at-fork hook, not asked of the kernel per charge) and charges the same file;
    the parent's connection goes on working and sees the child's charge."""
    import os

    from dpmv_lib.ledgers import _proc

    policy = example[0]
    third = Fraction(1, 3)
    led = SqliteLedger.for_policy(db, "alice", policy)
    assert led.try_charge(frozenset({"debt"}), third)
    parent_conn, parent_owner = led._conn, led._gc.owner

    def child():
        assert _proc.pid() == os.getpid() != led._pid
        assert led.try_charge(frozenset({"diabetes"}), third)
        assert led._conn is not parent_conn and led._pid == os.getpid()
        assert led._gc.owner != parent_owner
        assert led.spent() == {"debt": third, "diabetes": third}
    assert _status(_fork(child)) == 0
    assert _proc.pid() == os.getpid() and led._conn is parent_conn
    assert led.try_charge(frozenset({"debt"}), third)
    assert led.spent() == {"debt": 2 * third, "diabetes": third}
    assert [r.attributes for r in led.log] == [("debt",), ("diabetes",), ("debt",)]
    led.close()


def test_queue_listing_follows_the_shared_token_without_a_stat(example, db, monkeypatch):
    """posted() makes no system call while the queue token in the shared map is unchanged, and
    sees another requester's new file, and its removal, through the token."""
    import os

    policy = example[0]
    a = SqliteLedger.for_policy(db, "alice", policy)
    b = SqliteLedger.for_policy(db, "alice", policy)  # another requester of the same user
    a._gc.register()
    assert a._gc.posted() == []

    def no_stat(*args, **kwargs):
        raise AssertionError("stat while the queue token is unchanged")
    monkeypatch.setattr(group_commit.os, "stat", no_stat)
    assert a._gc.posted() == []            # token unchanged: the cached listing
    monkeypatch.undo()
    b._gc.register()                        # a new file in the queue: a new token
    assert a._gc.posted() == [b._gc.owner]
    monkeypatch.setattr(group_commit.os, "stat", no_stat)
    assert a._gc.posted() == [b._gc.owner]
    monkeypatch.undo()
    b.close()                               # its file is removed: a new token
    assert a._gc.posted() == []
    assert os.path.getsize(str(db) + ".lock") == 8 + 8 * group_commit.HINT_SLOTS
    a.close()


def test_commit_hint_verifies_off_the_lock_only_after_another_commit(example, db):
    """catch_up() verifies (spent(): every check, nothing trusted) exactly when another requester
    committed since this one last verified or committed; a commit that writes no hint (another
    program) is still refused by the next write transaction's own verification."""
    from dpmv_lib.core.errors import LedgerIntegrityError

    policy = example[0]
    third = Fraction(1, 3)
    a = SqliteLedger.for_policy(db, "alice", policy)
    b = SqliteLedger.for_policy(db, "alice", policy)
    calls = []
    real = b.spent
    b.spent = lambda: calls.append(1) or real()  # type: ignore[method-assign]
    b._gc.catch_up(b)
    assert len(calls) == 0                  # b's open committed last (its user row): up to date
    assert a.try_charge(frozenset({"debt"}), third)
    b._gc.catch_up(b)
    assert len(calls) == 1                  # another requester committed: verify now
    b._gc.catch_up(b)
    assert len(calls) == 1                  # nobody committed since
    assert b.try_charge(frozenset({"debt"}), third)
    b._gc.catch_up(b)
    assert len(calls) == 1                  # its own commit: nothing to verify
    conn = sqlite3.connect(db)              # an edit that writes no hint ...
    conn.execute("UPDATE ledger_entry SET spent = '0' WHERE attribute = 'debt'")
    conn.commit(), conn.close()
    b._gc.catch_up(b)
    assert len(calls) == 1                  # ... is not seen off the lock ...
    with pytest.raises(LedgerIntegrityError, match="stored spent budgets do not equal"):
        b.try_charge(frozenset({"debt"}), third)  # ... but by the write transaction
    a.close()
    b.close()


def _record_syncs(monkeypatch) -> list[tuple[int, int, int, int]]:
    """Spy on os.fdatasync: (thread, device, inode, size after the sync) of every call."""
    import os
    import threading

    calls: list[tuple[int, int, int, int]] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        real(fd)
        st = os.fstat(fd)
        calls.append((threading.get_ident(), st.st_dev, st.st_ino, st.st_size))
    monkeypatch.setattr(os, "fdatasync", spy)
    return calls


def test_full_ledger_syncs_its_write_ahead_log_before_acknowledging(example, db, monkeypatch):
    """synchronous=FULL (the default) on Linux: SQLite commits without syncing and the ledger
    fdatasyncs the -wal file itself after every write transaction, before returning (C5: the
    charge is on disk before the view exists): the sync is of the WAL and comes after this
    commit's frames were written to it. Reads do not sync; a chain head handed out does."""
    import os

    calls = _record_syncs(monkeypatch)
    led = SqliteLedger.for_policy(db, "alice", example[0])
    assert led._db().execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: SQLite does not sync
    assert len(calls) == 1                                              # the registration's transaction
    for i, admitted in enumerate((True, True, True, False)):            # the last one blocked: logged
        assert led.try_charge(frozenset({"debt"}), Fraction(2, 3)) is admitted
        st = os.stat(str(db) + "-wal")
        assert len(calls) == 2 + i
        assert calls[-1][1:] == (st.st_dev, st.st_ino, st.st_size)      # the WAL, with this commit in it
    led.spent()
    assert len(led.log) == 4 and len(calls) == 5                        # reads: no sync
    led.chain_head()
    assert len(calls) == 6                                              # an anchor: on disk first
    led.close()


def test_waiting_requester_syncs_after_its_answer_before_returning(example, db, monkeypatch):
    """Group commit with the sync outside the writer lock: a requester answered by another
    process's batch syncs the write-ahead log itself after reading its answer and before
    returning (the leader's own sync may still be running)."""
    import fcntl
    import os
    import threading

    calls = _record_syncs(monkeypatch)
    policy, third = example[0], Fraction(1, 3)
    leader = SqliteLedger.for_policy(db, "alice", policy)
    waiter = SqliteLedger.for_policy(db, "alice", policy)
    leader._gc.register()
    fcntl.flock(leader._lockfd, fcntl.LOCK_EX)        # the leader holds the writer lock
    returned: list[tuple[int, bool]] = []

    def run() -> None:
        ok = waiter.try_charge(frozenset({"debt"}), third)
        returned.append((len([c for c in calls if c[0] == threading.get_ident()]), ok))
    t = threading.Thread(target=run)
    t.start()
    request = os.path.join(waiter._gc.dir, waiter._gc.owner)
    for _ in range(200):                             # until the waiter has posted its request
        try:
            with open(request, "rb") as f:
                if f.read(2) == b"1 ":
                    break
        except FileNotFoundError:                    # (not registered yet: the thread is just starting)
            pass
        t.join(0.05)
    else:
        raise AssertionError("the waiter did not post its request")
    assert leader.try_charge(frozenset({"diabetes"}), third)  # leads: takes the request in its batch
    t.join(10)
    assert returned == [(1, True)]                   # one sync by the waiter, before it returned
    assert waiter.commit_stats() == CommitStats(1, 0, 0)  # answered, not committed by itself
    assert leader.commit_stats().batched == 1
    assert waiter.spent() == {"debt": third, "diabetes": third}
    waiter.close()
    leader.close()


def test_wal_sync_modes_and_a_failed_sync(example, tmp_path, monkeypatch):
    """EXTRA leaves syncing to SQLite, NORMAL syncs nothing, and FULL without os.fdatasync
    (not Linux) has SQLite sync at COMMIT. A failed sync raises a BudgetError naming the WAL;
    the charge stays committed (counted, never lost) and the ledger goes on from the file."""
    import errno
    import os

    policy, third = example[0], Fraction(1, 3)
    real = os.fdatasync
    calls = _record_syncs(monkeypatch)
    for mode, pragma in (("NORMAL", 1), ("EXTRA", 3)):
        led = SqliteLedger.for_policy(tmp_path / f"{mode}.db", "alice", policy, synchronous=mode)
        assert led._db().execute("PRAGMA synchronous").fetchone()[0] == pragma
        assert led.try_charge(frozenset({"debt"}), third)
        led.close()
    assert calls == []
    led = SqliteLedger.for_policy(tmp_path / "eio.db", "alice", policy)

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(BudgetError, match="cannot sync its write-ahead log") as err:
        led.try_charge(frozenset({"debt"}), third)
    assert "eio.db-wal" in str(err.value)
    monkeypatch.setattr(os, "fdatasync", real)
    assert led.spent()["debt"] == third                # committed before the sync failed
    assert led.try_charge(frozenset({"debt"}), third)
    assert led.spent()["debt"] == 2 * third and len(led.log) == 2
    led.close()
    monkeypatch.delattr(os, "fdatasync")
    led = SqliteLedger.for_policy(tmp_path / "other.db", "alice", policy)
    assert led._db().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: SQLite syncs
    assert led.try_charge(frozenset({"debt"}), third)
    led.close()


def test_request_files_and_queue_directories_do_not_outlive_their_processes(example, db):
    """Group commit keeps a request file per process in /dev/shm (group_commit.queue_root). A
    process that exits without close() removes its own (a finalizer); the file of a forked
    child that left through os._exit is removed by the next close(), with the directories."""
    import os
    import subprocess
    import sys

    policy = example[0]
    led = SqliteLedger.for_policy(db, "alice", policy)
    assert led.try_charge(frozenset({"debt"}), Fraction(1, 3))
    root = group_commit.queue_root(str(db))
    qdir = led._gc.dir
    assert os.listdir(qdir) == [led._gc.owner]  # registered at its first charge

    script = ("import sys; from fractions import Fraction; from dpmv_lib.ledgers.sqlite import SqliteLedger; "
              "from dpmv_lib.checks.examples import running_example; "
              "led = SqliteLedger.for_policy(sys.argv[1], 'alice', running_example()[0]); "
              "assert led.try_charge(frozenset({'debt'}), Fraction(1, 3)); "
              "import os; print(led._gc.owner); assert led._gc.owner in os.listdir(led._gc.dir)")
    out = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert os.listdir(qdir) == [led._gc.owner]  # the exiting process removed its own file

    def child():
        assert led.try_charge(frozenset({"diabetes"}), Fraction(1, 3))
        assert len(os.listdir(qdir)) == 2
    assert _status(_fork(child)) == 0
    assert len(os.listdir(qdir)) == 2  # the child left through os._exit: its file stays ...
    assert led.spent() == {"debt": Fraction(2, 3), "diabetes": Fraction(1, 3)}
    led.close()
    assert not os.path.exists(qdir) and not os.path.exists(root)  # ... until the last close()
    led.close()  # (closing twice is harmless)
