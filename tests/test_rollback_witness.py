"""Rollback detected without user action: the ledger's rollback witness.

Each case leaves a chain that verifies on its own (the chain alone accepts it: checked with
``witness=False``) but has forgotten acknowledged charges; with the witness (the default for a
SQLite file, ``<db>.witness/``) open or the next charge raises LedgerRollbackError naming the
ledger file and the witness, and nothing is written.
"""
from __future__ import annotations

import json
import os
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest

from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.core.errors import BudgetError, LedgerRollbackError
from dpmv_lib.ledgers.witness import FileWitness, WitnessMark

CAPS = {"debt": Fraction(4), "diabetes": Fraction(4)}
FP = "fp-witness-test"
ONE = Fraction(1)
KEYS = {"unkeyed": None, "keyed": bytes(range(32))}


def _ledger(path, key=None, **kw):
    return SqliteLedger(path, "alice", CAPS, FP, key=key, **kw)


def _charged(path, n, key=None):
    with _ledger(path, key) as led:
        for _ in range(n):
            assert led.try_charge(frozenset({"debt"}), ONE)
        return led.chain_head()


def _refused(path, key, *words, unchanged=True):
    before = _files(path)
    with pytest.raises(LedgerRollbackError) as exc:
        _ledger(path, key)
    msg = str(exc.value)
    assert str(path) in msg and f"{path}.witness" in msg and "nothing was changed" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    if unchanged:
        assert _files(path) == before  # refused: nothing written
    return msg


def _files(path):
    return {p.name: p.read_bytes() for p in Path(path).parent.iterdir() if p.is_file() and p.name.startswith("l.db")
            and not p.name.endswith(("-shm", ".lock"))}


def _cut_tail(conn, k, ph="?"):
    """Delete the records after #k and copy record k's hash and running totals back (``ph``:
    the driver's placeholder)."""
    def q(sql, args):
        return conn.execute(sql.replace("?", ph), args)
    h, tot = q("SELECT hash, totals FROM audit_log WHERE user_id = 'alice' AND seq = ?", (k,)).fetchone()
    q("DELETE FROM audit_log WHERE user_id = 'alice' AND seq > ?", (k,))
    q("UPDATE ledger_user SET head_seq = ?, head_hash = ? WHERE user_id = 'alice'", (k, h))
    for a, v in json.loads(tot).items():
        q("UPDATE ledger_entry SET spent = ? WHERE user_id = 'alice' AND attribute = ?", (v, a))
    conn.commit()


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_tail_deleted_with_its_head_copied_is_refused_on_open(tmp_path, mode):
    db = tmp_path / "l.db"
    _charged(db, 4, KEYS[mode])
    conn = sqlite3.connect(db)
    _cut_tail(conn, 2)
    conn.close()
    with _ledger(db, KEYS[mode], witness=False) as led:  # the chain alone accepts it (2 charges forgotten)
        assert led.spent()["debt"] == 2
    _refused(db, KEYS[mode], "ends at record #2 but record #4 was committed and acknowledged")


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_tail_deleted_while_open_is_refused_before_the_next_charge(tmp_path, mode):
    """A process that verified the chain before the others charged: its incremental check
    accepts the shorter chain (it never saw the deleted records); the witness does not."""
    db = tmp_path / "l.db"
    early = _ledger(db, KEYS[mode])
    _charged(db, 4, KEYS[mode])  # other processes' charges, acknowledged
    conn = sqlite3.connect(db)
    _cut_tail(conn, 2)
    conn.close()
    with pytest.raises(LedgerRollbackError, match="ends at record #2 but record #4"):
        early.try_charge(frozenset({"debt"}), ONE)
    assert sqlite3.connect(db).execute("SELECT max(seq) FROM audit_log").fetchone() == (2,)  # nothing written
    early.close()


def test_a_file_truncated_to_zero_bytes_is_refused(tmp_path):
    db = tmp_path / "l.db"
    _charged(db, 3)
    with open(db, "r+b") as f:
        f.truncate(0)
    for extra in ("-wal", "-shm"):
        Path(str(db) + extra).unlink(missing_ok=True)
    _refused(db, None, "the user is missing from the database but its record #3", unchanged=False)
    # (opening an empty file puts it into WAL mode; no table was created)
    assert sqlite3.connect(db).execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_a_truncated_write_ahead_log_that_lost_an_acknowledged_charge_is_refused(tmp_path):
    """The audit's case: the last commit's frames cut from the WAL (as a crash of a disk that
    lied about fsync would) lose an acknowledged charge; the recovered file is consistent."""
    db, wal = tmp_path / "l.db", Path(str(tmp_path / "l.db") + "-wal")
    led = _ledger(db)
    for _ in range(3):
        assert led.try_charge(frozenset({"debt"}), ONE)
    main, log = db.read_bytes(), wal.read_bytes()  # (no checkpoint yet: the commits are in the WAL)
    led.close()  # (checkpoints and removes the WAL)
    page = int.from_bytes(log[8:12], "big")
    db.write_bytes(main)
    wal.write_bytes(log[:len(log) - (24 + page)])  # the last frame (the last commit's) is gone
    Path(str(db) + "-shm").unlink(missing_ok=True)
    with _ledger(db, witness=False) as chain_only:  # SQLite recovers the first two charges only
        assert chain_only.spent()["debt"] == 2 and chain_only.verify().seq == 2
    _refused(db, None, "ends at record #2 but record #3 was committed")


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_an_old_copy_restored_is_refused(tmp_path, mode):
    db = tmp_path / "l.db"
    _charged(db, 2, KEYS[mode])
    old = db.read_bytes()
    _charged(db, 2, KEYS[mode])
    db.write_bytes(old)
    _refused(db, KEYS[mode], "ends at record #2 but record #4")


def test_another_history_of_the_same_length_is_refused(tmp_path):
    """Same length, other records (another file's valid chain, as a recomputed unkeyed chain
    would be): the acknowledged record is not there."""
    db, other = tmp_path / "l.db", tmp_path / "other.db"
    _charged(db, 2)
    with _ledger(other, witness=False) as led:
        assert led.try_charge(frozenset({"diabetes"}), ONE) and led.try_charge(frozenset({"diabetes"}), ONE)
    db.write_bytes(other.read_bytes())
    _refused(db, None, "its record #2 is not the one that was acknowledged")


def test_the_witness_advances_only_and_survives_a_torn_slot(tmp_path):
    w = FileWitness(tmp_path / "w")
    assert w.read("u") is None
    w.advance("u", 3, "h3")
    w.advance("u", 2, "h2")  # never back
    assert w.read("u") == WitnessMark(3, "h3")
    w.advance("u", 5, "h5")  # into the other slot
    f = w._file("u")
    raw = bytearray(f.read_bytes())
    slot = 0 if b" 5 h5 " in raw[:160] else 1
    raw[slot * 160 + 20] ^= 0xFF  # a torn write of the newest slot: the older mark stays
    f.write_bytes(bytes(raw))
    assert FileWitness(tmp_path / "w").read("u") == WitnessMark(3, "h3")
    assert oct(os.stat(tmp_path / "w").st_mode & 0o777) == "0o700"


def test_a_missing_witness_is_adopted_from_the_verified_chain(tmp_path):
    """Trust on first use (documented): a ledger opened without a witness entry writes one."""
    db = tmp_path / "l.db"
    head = _charged(db, 2, None)
    for p in Path(f"{db}.witness").iterdir():
        p.unlink()
    with _ledger(db) as led:
        assert led.spent()["debt"] == 2
    assert FileWitness(f"{db}.witness").read("alice") == WitnessMark(head.seq, head.hash)


def test_an_external_witness_object_is_the_anchor_hook(tmp_path):
    class Remote:  # e.g. another host or an append-only log
        def __init__(self):
            self.marks: dict[str, WitnessMark] = {}
            self.calls = 0

        def read(self, user_id):
            return self.marks.get(user_id)

        def advance(self, user_id, seq, hash):
            self.calls += 1
            if seq > getattr(self.marks.get(user_id), "seq", -1):
                self.marks[user_id] = WitnessMark(seq, hash)

    remote = Remote()
    db = tmp_path / "l.db"
    with _ledger(db, witness=remote) as led:
        for _ in range(3):
            assert led.try_charge(frozenset({"debt"}), ONE)
        assert remote.marks["alice"] == WitnessMark(3, led.chain_head().hash) and remote.calls == 3
    assert not Path(f"{db}.witness").exists()  # the given witness replaces the file witness
    conn = sqlite3.connect(db)
    _cut_tail(conn, 1)
    conn.close()
    with pytest.raises(LedgerRollbackError, match="ends at record #1 but record #3"):
        _ledger(db, witness=remote)


@pytest.mark.parametrize("bad", [42, object(), b"path"], ids=["int", "object", "bytes"])
def test_a_bad_witness_argument_is_a_typed_error(tmp_path, bad):
    with pytest.raises(BudgetError, match="witness must be"):
        _ledger(tmp_path / "l.db", witness=bad)


def test_an_in_memory_ledger_has_no_witness():
    led = SqliteLedger(":memory:", "alice", CAPS, FP)
    assert led._witness is None and led.try_charge(frozenset({"debt"}), ONE)


def test_postgres_ledger_with_a_file_witness_refuses_a_rolled_back_user(pg_dsn, tmp_path):
    """PostgreSQL keeps its own durability; a witness on the application host (opt-in:
    ``witness=<dir>``) catches rows rolled back on the server."""
    import psycopg

    from dpmv_lib.ledgers.postgres import PostgresLedger

    w = tmp_path / "pg.witness"
    with PostgresLedger(pg_dsn, "alice", CAPS, FP, witness=w) as led:
        for _ in range(3):
            assert led.try_charge(frozenset({"debt"}), ONE)
    assert FileWitness(w).read("alice").seq == 3
    with psycopg.connect(pg_dsn) as conn:
        _cut_tail(conn, 1, "%s")
    with pytest.raises(LedgerRollbackError, match="ends at record #1 but record #3"):
        PostgresLedger(pg_dsn, "alice", CAPS, FP, witness=w)
    with PostgresLedger(pg_dsn, "alice", CAPS, FP) as chain_only:  # without one (the default) accepted
        assert chain_only.spent()["debt"] == 1


def test_a_synced_witness_is_written_after_the_wal_is_on_disk(tmp_path, monkeypatch):
    """FileWitness(sync=True): per write transaction the WAL's fdatasync, then the witness's
    (never ahead of the database on disk); the default witness adds no sync (the WAL-only
    counts of tests/test_durable_ledger.py hold unchanged)."""
    db = tmp_path / "l.db"
    synced: list[int] = []
    real = os.fdatasync

    def spy(fd):
        real(fd)
        synced.append(os.fstat(fd).st_ino)
    monkeypatch.setattr(os, "fdatasync", spy)
    with _ledger(db, witness=FileWitness(tmp_path / "w", sync=True)) as led:
        for i in range(3):
            assert led.try_charge(frozenset({"debt"}), ONE)
            wal, w = os.stat(f"{db}-wal").st_ino, os.stat(led._witness._file("alice")).st_ino
            assert synced[-2:] == [wal, w] and synced.count(w) == i + 1
