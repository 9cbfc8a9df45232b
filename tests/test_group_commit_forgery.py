"""Forged group-commit answers: no decision outside the chain.

The attacker can write the ledger file (sqlite3 alone) but holds no key. A waiting worker
used to trust its answer row in ``dpmv_gc``: a forged ``{"ok": [1], ...}`` for its next request
number made a keyed ledger hand out 11 EM releases where the cap allows 4. Now an answer row only
points at records; the waiter acknowledges the decisions of records it finds in the verified
chain with its own request's origin, else it commits its release itself. Every variant below
(forged, replayed, another user's, another owner's, altered totals) must give exactly the cap's
number of releases, with the chain verifying and spent equal to what was released.

The waiter is driven deterministically: this thread holds the writer lock (as a leader would),
the ledger's ``try_charge`` runs in a second thread and posts its request (another owner's
request file makes posting worthwhile), the attack writes the answer row, then the lock is
released and the waiter reads its answer.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from fractions import Fraction

import pytest

from dpmv_lib.ledgers import group_commit
from dpmv_lib.ledgers.sqlite import SqliteLedger

CAPS = {"debt": Fraction(4), "diabetes": Fraction(4)}
FP = "fp-forgery-test"
ONE = Fraction(1)
KEYS = {"unkeyed": None, "keyed": bytes(range(32))}


def _ledger(path, user="alice", key=None):
    return SqliteLedger(path, user, CAPS, FP, key=key)


def _other_owner(led) -> str:
    """A live other owner's (empty) request file: the waiter then posts instead of leading."""
    os.makedirs(led._gc.dir, mode=0o700, exist_ok=True)
    name = f"{os.getpid()}-0ther0wner"
    open(os.path.join(led._gc.dir, name), "wb").close()
    return name


def _posted_req(led, timeout=60.0) -> int:
    path = os.path.join(led._gc.dir, led._gc.owner)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            raw = open(path, "rb").read()
        except FileNotFoundError:
            raw = b""
        if raw and not raw.startswith(b"0\n"):
            parsed = group_commit.parse_request(raw)
            if parsed is not None:
                return parsed[0]
        time.sleep(0.002)
    raise AssertionError("the waiter never posted its request")


def waiting_charge(led, attrs, eps, forge) -> bool:
    """``led.try_charge(attrs, eps)`` as a waiter whose answer row ``forge(conn, owner, req)`` writes."""
    fd = os.open(led.path + ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    out: dict[str, object] = {}

    def run():
        try:
            out["ok"] = led.try_charge(frozenset(attrs), eps)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            out["error"] = exc

    t = threading.Thread(target=run)
    try:
        t.start()
        req = _posted_req(led)
        conn = sqlite3.connect(led.path)
        conn.execute(group_commit.ANSWER_TABLE)
        forge(conn, led._gc.owner, req)
        conn.commit()
        conn.close()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        t.join(30)
    assert not t.is_alive(), "the waiter hangs"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return bool(out["ok"])


def _row(conn, owner, req, answer, user="alice"):
    conn.execute("INSERT OR REPLACE INTO dpmv_gc (owner, req, user_id, answer, t) VALUES (?, ?, ?, ?, ?)",
                 (owner, req, user, answer, time.time()))


def _attack(led, forge, n=11) -> list[bool]:
    _other_owner(led)
    return [waiting_charge(led, {"debt"}, ONE, forge) for _ in range(n)]


def _check_no_bypass(led, oks):
    """Releases never exceed the cap, and every release is charged in the verified chain."""
    assert sum(oks) == 4 and oks[:4] == [True] * 4, oks
    assert led.spent()["debt"] == 4 and led.verify().seq >= 4
    admitted = [r for r in led.log if r.admitted and r.attributes == ("debt",)]
    assert len(admitted) == sum(oks)


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_forged_ok_answer_releases_nothing_past_the_cap(tmp_path, mode):
    led = _ledger(tmp_path / "l.db", key=KEYS[mode])
    oks = _attack(led, lambda conn, owner, req: _row(
        conn, owner, req, json.dumps({"ok": [1], "spent": {"debt": "0", "diabetes": "0"}, "seq": 1})))
    _check_no_bypass(led, oks)


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_replayed_old_answer_is_not_acknowledged(tmp_path, mode):
    """The waiter's own earlier answer (its records name the earlier request number)."""
    led = _ledger(tmp_path / "l.db", key=KEYS[mode])
    seen: list[int] = []

    def forge(conn, owner, req):
        head = conn.execute("SELECT head_seq FROM ledger_user WHERE user_id = 'alice'").fetchone()[0]
        if seen:  # point at the first request's record, under the new request number
            _row(conn, owner, req, json.dumps({"seq": seen[0]}))
        seen.append(head + 1)

    oks = _attack(led, forge)
    _check_no_bypass(led, oks)


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_an_answer_pointing_at_another_users_or_owners_records_is_refused(tmp_path, mode):
    path = tmp_path / "l.db"
    bob = _ledger(path, "bob", key=KEYS[mode])
    assert bob.try_charge(frozenset({"debt"}), ONE)  # bob's record #1: admitted debt 1
    led = _ledger(path, key=KEYS[mode])
    # another owner's request for alice, committed by alice's ledger as leader: record #1 of
    # alice's chain, admitted debt 1, origin "<pid>-feedbeef:1"
    os.makedirs(led._gc.dir, mode=0o700, exist_ok=True)
    with open(os.path.join(led._gc.dir, f"{os.getpid()}-feedbeef"), "wb") as f:
        f.write(group_commit.request_body(1, time.time(), led._gc.key_id, json.dumps([[["debt"], "1"]])))
    assert led.try_charge(frozenset({"diabetes"}), ONE)
    assert [(r.attributes, r.admitted) for r in led.log] == [(("debt",), True), (("diabetes",), True)]
    os.unlink(os.path.join(led._gc.dir, f"{os.getpid()}-feedbeef"))
    oks = _attack(led, lambda conn, owner, req: (_row(conn, owner, req, json.dumps({"seq": 1}), user="bob")))
    # the other owner's charge took 1 of debt's 4: three releases are left, all charged
    assert sum(oks) == 3 and oks[:3] == [True] * 3, oks
    assert led.spent()["debt"] == 4 and bob.spent()["debt"] == 1
    assert sum(r.admitted for r in led.log if r.attributes == ("debt",)) == 4


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_an_answer_with_altered_totals_or_garbage_is_not_trusted(tmp_path, mode):
    led = _ledger(tmp_path / "l.db", key=KEYS[mode])
    answers = iter([json.dumps({"seq": 1, "spent": {"debt": "0"}}), "not json", '{"seq": "1"}', '{"seq": true}',
                    '{"seq": -5}', '{"seq": 999}', "[]", '{"seq": 1e400}'] + ['{"seq": 0}'] * 3)
    oks = _attack(led, lambda conn, owner, req: _row(conn, owner, req, next(answers)))
    _check_no_bypass(led, oks)


def test_a_genuine_answer_is_still_used_without_a_second_charge(tmp_path):
    """Control: the waiter whose request a leader committed acknowledges it from the chain
    (exactly once: one record), so the test harness can see a real answer."""
    led = _ledger(tmp_path / "l.db")
    leader = _ledger(tmp_path / "l.db")
    _other_owner(led)

    def lead(conn, owner, req):  # the leader takes the posted request in its own transaction
        leader._preheld = True  # (this thread holds the writer lock for it)
        try:
            with leader._tx() as db:
                leader._sync(db)
                others = [o for o in leader._gc.collect(db, leader._caps) if o[0] == owner]
                assert [(o[1], o[2]) for o in others] == [(req, [(frozenset({"debt"}), ONE)])]
                first = leader._v.seq + 1
                leader._decide_write(db, [others[0][2]], True, [leader._gc.origin(req, owner)])
                leader._gc.answers(db, [(owner, req, first)])
        finally:
            leader._preheld = False

    assert waiting_charge(led, {"debt"}, ONE, lead)
    assert led.spent()["debt"] == 1 and len(led.log) == 1
    assert sqlite3.connect(led.path).execute("SELECT origin FROM audit_log").fetchall() == [(f"{led._gc.owner}:1",)]


def test_a_format_2_file_is_migrated_and_still_verifies(tmp_path):
    """Format 2 had no origin column: open adds it; the old records' hashes are unchanged."""
    path = tmp_path / "old.db"
    led = _ledger(path)
    assert led.try_charge(frozenset({"debt"}), ONE)
    head = led.chain_head()
    led.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE audit_log DROP COLUMN origin")  # (SQLite >= 3.35) as format 2 wrote it
    conn.execute("UPDATE dpmv_meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    led = _ledger(path)
    assert led.verify(head) == head and led.spent()["debt"] == 1
    assert sqlite3.connect(path).execute("SELECT value FROM dpmv_meta").fetchall() == [("3",)]
    assert led.try_charge(frozenset({"debt"}), ONE) and led.spent()["debt"] == 2
