"""Attacks on the rollback witness itself, each followed by a rollback of the database.

The setup of every row: a SQLite ledger with a lifetime cap of 4 EM releases (eps = 1 each on
"debt") and 4 spent; the attacker can write the database and the witness directory but does not
hold the ledger's key. Each attack below went undetected, or was misreported, by a witness of
plain SHA-256 slots that followed symbolic links; now each is refused with an error that names
the witness file (or directory). Deleting the witness together with the rollback, or restoring
both from one old copy, stays the documented limit of a local witness
(tests/test_rollback_witness.py::test_a_missing_witness_is_adopted_from_the_verified_chain).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest

from dpmv_lib.core.errors import LedgerIntegrityError, LedgerRollbackError
from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.ledgers.witness import FileWitness

CAPS = {"debt": Fraction(4), "diabetes": Fraction(4)}
FP = "fp-witness-tamper"
ONE = Fraction(1)
KEY = bytes(range(32))
KEYS = {"unkeyed": None, "keyed": KEY}


def _ledger(path, key=None, **kw):
    return SqliteLedger(path, "alice", CAPS, FP, key=key, **kw)


def _spent_four(db, key):
    """4 releases acknowledged, with a copy of the database taken after 2 (the rollback) and
    the chain head there: (old database bytes, head #2)."""
    with _ledger(db, key) as led:
        assert led.try_charge(frozenset({"debt"}), ONE) and led.try_charge(frozenset({"debt"}), ONE)
        head2 = led.chain_head()
    old = _db_bytes(db)
    with _ledger(db, key) as led:
        assert led.try_charge(frozenset({"debt"}), ONE) and led.try_charge(frozenset({"debt"}), ONE)
        assert not led.try_charge(frozenset({"debt"}), ONE)   # the cap binds: 4 of 4 spent
    return old, head2


def _db_bytes(db):
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return Path(db).read_bytes()


def _roll_back(db, old):
    Path(db).write_bytes(old)
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)


def _witness_file(db) -> Path:
    return FileWitness(f"{db}.witness")._file("alice")


def _releases_after(db, key) -> int:
    """How many releases the rolled-back ledger still grants (0 when it is refused)."""
    try:
        led = _ledger(db, key)
    except LedgerIntegrityError:
        return 0
    with led:
        return 2 + sum(bool(led.try_charge(frozenset({"debt"}), ONE)) for _ in range(4))


def _refused(db, key, *words, where=None, **kw) -> str:
    with pytest.raises(LedgerIntegrityError) as exc:
        _ledger(db, key, **kw)
    msg = str(exc.value)
    where = str(where or _witness_file(db))
    assert where in msg and "nothing was changed" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def _forged_slots(tmp_path, seq, h) -> bytes:
    """Witness slots for (seq, h) written by someone without the key (a FileWitness of their own)."""
    forge = FileWitness(tmp_path / "forge")
    forge.advance("alice", seq, h)
    forge.close()
    raw = forge._file("alice").read_bytes()
    return raw[:160] * 2


# ---- row 1: a slot rewritten to the old head (no key needed for a checksum) --------------------
def test_slots_rewritten_to_the_old_head_are_refused_when_keyed(tmp_path):
    db = tmp_path / "l.db"
    old, head2 = _spent_four(db, KEY)
    slots = _forged_slots(tmp_path, head2.seq, head2.hash)
    with open(_witness_file(db), "r+b") as f:
        f.write(slots)
    _roll_back(db, old)
    _refused(db, KEY, "its MAC fails")
    assert _releases_after(db, KEY) == 0   # (was 6: the rollback went through)


def test_an_unkeyed_witness_is_only_a_checksum(tmp_path):
    """The documented limit of an unkeyed ledger: whoever can write the witness can rewrite its
    checksummed slots (with the ledger's public genesis too); a keyed ledger refuses this."""
    db = tmp_path / "l.db"
    old, head2 = _spent_four(db, None)
    w = FileWitness(tmp_path / "forge")
    w.advance("alice", head2.seq, head2.hash, genesis=_genesis(db))
    _witness_file(db).write_bytes(w._file("alice").read_bytes())
    _roll_back(db, old)
    assert _releases_after(db, None) == 4   # 2 + 2 more than the cap: not detected (documented)


def _genesis(db) -> str:
    return sqlite3.connect(db).execute("SELECT genesis FROM ledger_user").fetchone()[0]


# ---- row 2: the witness file replaced by a symbolic link to /dev/null -------------------------
@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_witness_file_replaced_by_a_symlink_is_refused(tmp_path, mode):
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEYS[mode])
    f = _witness_file(db)
    f.unlink()
    f.symlink_to(os.devnull)
    _roll_back(db, old)
    _refused(db, KEYS[mode], "symbolic link")
    assert _releases_after(db, KEYS[mode]) == 0
    assert f.is_symlink() and Path(os.devnull).stat().st_size == 0   # nothing was written through it


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_witness_file_replaced_while_open_is_refused_at_the_next_charge(tmp_path, mode):
    db = tmp_path / "l.db"
    with _ledger(db, KEYS[mode]) as led:
        assert led.try_charge(frozenset({"debt"}), ONE)
        f = _witness_file(db)
        f.unlink()
        f.symlink_to(os.devnull)
        with pytest.raises(LedgerIntegrityError, match="replaced|removed"):
            led.try_charge(frozenset({"debt"}), ONE)
        assert led.spent()["debt"] == 1


# ---- row 3: <db>.witness pre-planted as a symlink to a world-writable directory ----------------
@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_preplanted_witness_symlink_to_a_public_directory_is_refused(tmp_path, mode):
    db, public = tmp_path / "l.db", tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    Path(f"{db}.witness").symlink_to(public)
    _refused(db, KEYS[mode], "symbolic link or not a directory", where=f"{db}.witness")
    assert not any(public.iterdir())   # nothing was written into it


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_witness_directory_others_may_write_is_refused(tmp_path, mode):
    """A real directory (not a link) with group/other access, e.g. emptied later by anyone."""
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEYS[mode])
    os.chmod(f"{db}.witness", 0o777)
    for p in Path(f"{db}.witness").iterdir():   # (what the world-writable directory allows)
        p.unlink()
    _roll_back(db, old)
    _refused(db, KEYS[mode], "mode 0o777", where=f"{db}.witness")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_witness_directory_of_another_user_is_refused(tmp_path):
    db = tmp_path / "l.db"
    _spent_four(db, KEY)
    os.chown(f"{db}.witness", 12345, 12345)
    _refused(db, KEY, "owned by uid 12345", where=f"{db}.witness")


# ---- row 4: the witness file truncated to 0 bytes (or torn) ------------------------------------
@pytest.mark.parametrize("size", [0, 100])
@pytest.mark.parametrize("mode", sorted(KEYS))
def test_an_emptied_or_truncated_witness_file_is_tampering_not_missing(tmp_path, mode, size):
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEYS[mode])
    with open(_witness_file(db), "r+b") as f:
        f.truncate(size)
    _roll_back(db, old)
    _refused(db, KEYS[mode], f"has {size} bytes", "tampering, not a missing witness")
    assert _releases_after(db, KEYS[mode]) == 0


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_witness_file_with_both_slots_torn_is_refused(tmp_path, mode):
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEYS[mode])
    f = _witness_file(db)
    raw = bytearray(f.read_bytes())
    raw[20] ^= 0xFF
    raw[180] ^= 0xFF
    f.write_bytes(bytes(raw))
    _roll_back(db, old)
    _refused(db, KEYS[mode], "no slot verifies")


# ---- row 5: a forged slot with a valid checksum and a future seq -------------------------------
def test_a_forged_future_mark_is_reported_as_forged_and_the_ledger_recovers(tmp_path):
    """Keyed: the forged slot fails its MAC, and the error says so (not "rolled back"); after
    checking the database the operator removes the witness file and the honest ledger opens."""
    db = tmp_path / "l.db"
    _spent_four(db, KEY)
    with open(_witness_file(db), "r+b") as f:
        f.write(_forged_slots(tmp_path, 9, "ab" * 32))
    msg = _refused(db, KEY, "forged, or written with another key")
    assert "ends at record" not in msg
    _witness_file(db).unlink()
    with _ledger(db, KEY) as led:   # the honest ledger opens again (trust on first use)
        assert led.spent()["debt"] == 4


def test_an_unkeyed_forged_future_mark_is_reported_as_rollback_or_foreign(tmp_path):
    """Unkeyed: a forged checksum cannot be told from a real mark; the error says what a mark
    ahead of the chain means (rolled back, or another ledger's witness) and names the file."""
    db = tmp_path / "l.db"
    _spent_four(db, None)
    with open(_witness_file(db), "r+b") as f:
        f.write(_forged_slots(tmp_path, 9, "ab" * 32))
    _refused(db, None, "ends at record #5 but record #9", "rolled back", "belongs to another ledger")


def test_a_genuine_mark_ahead_of_the_chain_says_the_database_was_rolled_back(tmp_path):
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEY)
    _roll_back(db, old)
    msg = _refused(db, KEY, "ends at record #2 but record #5", "the database was rolled back")
    assert "another ledger" not in msg   # (bound to this ledger's genesis: its own mark)


# ---- row 6: another ledger's witness directory -------------------------------------------------
@pytest.mark.parametrize("mode", sorted(KEYS))
def test_a_new_ledger_on_another_ledgers_witness_is_told_so(tmp_path, mode):
    """A new ledger cannot be told from a truncated one, so it is refused; the error says that
    the witness may belong to another ledger (naming that ledger's genesis) and names the file."""
    a, b, w = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "shared.witness"
    with _ledger(a, KEYS[mode], witness=w) as led:
        for _ in range(4):
            assert led.try_charge(frozenset({"debt"}), ONE)
    msg = _refused(b, KEYS[mode], "belongs to another ledger", _genesis(a)[:16], witness=w,
                   where=FileWitness(w)._file("alice"))
    assert "user is missing" in msg


@pytest.mark.parametrize("mode", sorted(KEYS))
def test_an_existing_ledger_on_another_ledgers_witness_is_not_judged_by_its_marks(tmp_path, mode):
    """Ledger B (2 charges) opened with ledger A's witness (4 charges): A's mark is not read as
    B's history ("B was rolled back from #4"); the error says the mark is another ledger's."""
    a, b, w = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "shared.witness"
    with _ledger(a, KEYS[mode], witness=w) as led:
        for _ in range(4):
            assert led.try_charge(frozenset({"debt"}), ONE)
    with _ledger(b, KEYS[mode], witness=False) as led:
        assert led.try_charge(frozenset({"debt"}), ONE) and led.try_charge(frozenset({"debt"}), ONE)
    msg = _refused(b, KEYS[mode], "belongs to another ledger", f"not to this one (genesis {_genesis(b)[:16]}",
                   witness=w, where=FileWitness(w)._file("alice"))
    assert "ends at record" not in msg
    with _ledger(a, KEYS[mode], witness=w) as led:   # A's own witness still judges A
        assert led.spent()["debt"] == 4


def test_a_ledger_with_another_key_reads_the_witness_as_foreign(tmp_path):
    a, b, w = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "shared.witness"
    with _ledger(a, KEY, witness=w) as led:
        assert led.try_charge(frozenset({"debt"}), ONE)
    _refused(b, bytes(range(1, 33)), "written with another key", witness=w, where=FileWitness(w)._file("alice"))


def test_a_database_replaced_by_another_ledger_of_the_user_is_refused(tmp_path):
    """The other side of binding: the database swapped for a fresh ledger of the same user
    with as many records is refused as another ledger (its genesis is not the mark's)."""
    db, other = tmp_path / "l.db", tmp_path / "other.db"
    _spent_four(db, KEY)
    with _ledger(other, KEY, witness=False) as led:
        for _ in range(4):
            assert led.try_charge(frozenset({"diabetes"}), ONE)
    _roll_back(db, _db_bytes(other))
    _refused(db, KEY, "belongs to another ledger")


def test_an_unkeyed_file_witness_given_to_a_keyed_ledger_takes_its_key(tmp_path):
    db = tmp_path / "l.db"
    with _ledger(db, KEY, witness=FileWitness(tmp_path / "w")) as led:
        assert led.try_charge(frozenset({"debt"}), ONE)
        assert led._witness.key == KEY
    with pytest.raises(LedgerIntegrityError, match="its checksum fails"):
        FileWitness(tmp_path / "w").read("alice")   # (without the key its slots do not verify)
    assert FileWitness(tmp_path / "w", key=KEY).read("alice").seq == 1


def test_tampering_errors_are_integrity_errors_and_rollbacks_stay_rollbacks(tmp_path):
    db = tmp_path / "l.db"
    old, _ = _spent_four(db, KEY)
    _roll_back(db, old)
    with pytest.raises(LedgerRollbackError):
        _ledger(db, KEY)
    shutil.rmtree(f"{db}.witness")
    with _ledger(db, KEY) as led:   # deletion together with the rollback: the documented limit
        assert led.spent()["debt"] == 2
