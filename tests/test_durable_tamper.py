"""Tampering with a durable SQLite ledger is refused (C5: the B_a guarantee needs honest totals).

Each case edits the database file directly (as an attacker who can write it), then reopens the
ledger: the open must raise LedgerIntegrityError naming the ledger and the problem, and leave
the file byte-for-byte and row-for-row unchanged. Every case runs unkeyed and HMAC-keyed.
"""
from __future__ import annotations

import json
import sqlite3
from fractions import Fraction
from pathlib import Path

import pytest

from dpmv_lib.ledgers import hashchain
from dpmv_lib.ledgers.hashchain import key_from_env
from dpmv_lib.ledgers.chain_verify import ChainHead
from dpmv_lib.ledgers.sqlite import SqliteLedger, SqliteLedgerStore
from dpmv_lib.core.errors import BudgetError, LedgerFormatError, LedgerIntegrityError, LedgerRollbackError
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
F = Fraction
# (attributes, eps) charged to alice in order; caps are 2 (running example). Decisions:
# 1 ok, 2 ok, 3 ok (debt = 2), 4 blocked, 5 ok (diabetes = 5/3), 6 blocked
CHARGES = [({"debt", "diabetes"}, F(2, 3)), ({"debt"}, F(2, 3)), ({"debt", "diabetes"}, F(2, 3)),
           ({"debt"}, F(2, 3)), ({"diabetes"}, F(1, 3)), ({"debt"}, F(1, 3))]
FINAL = {"debt": F(2), "diabetes": F(5, 3)}


@pytest.fixture()
def policy():
    return running_example()[0]


def _build(db: Path, policy, key) -> None:
    with SqliteLedger.for_policy(db, "alice", policy, key=key) as alice, \
            SqliteLedger.for_policy(db, "bob", policy, key=key) as bob:
        for i, (attrs, eps) in enumerate(CHARGES):
            alice.try_charge(frozenset(attrs), eps)
            if i == 2:
                bob.try_charge(frozenset({"debt"}), F(1, 2))  # interleaved rows of another user
        assert alice.spent() == FINAL
        assert [r.admitted for r in alice.log] == [True, True, True, False, True, False]


def _sql(db: Path, *stmts: str) -> None:
    conn = sqlite3.connect(db)
    for s in stmts:
        conn.execute(s)
    conn.commit()
    conn.close()


def _snapshot(db: Path) -> tuple[bytes, list[str]]:
    data = db.read_bytes()
    conn = sqlite3.connect(db)
    rows = list(conn.iterdump())
    conn.close()
    assert db.read_bytes() == data
    return data, rows


A = "user_id = 'alice'"
# case -> (SQL that tampers with alice's ledger, words the refusal must contain)
CASES = {
    "spent_reset_to_0": ([f"UPDATE ledger_entry SET spent = '0' WHERE {A}"],
                         ["do not equal the replay", "debt: stored 0, log replays to 2"]),
    "spent_negative": ([f"UPDATE ledger_entry SET spent = '-5' WHERE {A} AND attribute = 'debt'"],
                       ["spent of 'debt' is -5: negative"]),
    "spent_lowered": ([f"UPDATE ledger_entry SET spent = '4/3' WHERE {A} AND attribute = 'debt'"],
                      ["debt: stored 4/3, log replays to 2"]),
    "spent_not_a_number": ([f"UPDATE ledger_entry SET spent = 'x' WHERE {A} AND attribute = 'debt'"],
                           ["spent of 'debt' is not an exact rational"]),
    "log_edit_amount": ([f"UPDATE audit_log SET epsilon = '1/3' WHERE {A} AND seq = 2"],
                        ["audit record #2 does not match its hash chain"]),
    "log_edit_equal_fraction": ([f"UPDATE audit_log SET epsilon = '4/6' WHERE {A} AND seq = 2"],
                                ["audit record #2 does not match its hash chain"]),
    "log_edit_totals": ([f"UPDATE audit_log SET totals = '{{\"debt\":\"0\",\"diabetes\":\"0\"}}' "
                         f"WHERE {A} AND seq = 3"], ["audit record #3 does not match its hash chain"]),
    "log_edit_decision": ([f"UPDATE audit_log SET admitted = 1 WHERE {A} AND seq = 4"],
                          ["audit record #4 does not match its hash chain"]),
    "log_edit_type": ([f"UPDATE audit_log SET admitted = 'yes' WHERE {A} AND seq = 4"],
                      ["column admitted of audit record #4 is str, expected int"]),
    "log_row_deleted_middle": ([f"DELETE FROM audit_log WHERE {A} AND seq = 3"],
                               ["no record #3 (the next one is #4)"]),
    "log_reordered_swap_seq": ([f"UPDATE audit_log SET seq = -1 WHERE {A} AND seq = 2",
                                f"UPDATE audit_log SET seq = 2 WHERE {A} AND seq = 3",
                                f"UPDATE audit_log SET seq = 3 WHERE {A} AND seq = -1"],
                               ["audit record #2 does not match its hash chain"]),
    "log_truncated": ([f"DELETE FROM audit_log WHERE {A} AND seq >= 5"],
                      ["chain head is #6", "ends at #4"]),
    "log_truncated_blocked_tail": ([f"DELETE FROM audit_log WHERE {A} AND seq = 6"],  # totals unchanged
                                   ["chain head is #6", "ends at #5"]),
    "log_deleted_whole": ([f"DELETE FROM audit_log WHERE {A}"],
                          ["audit log is empty but the chain head says #6"]),
    "log_deleted_and_head_reset": ([f"DELETE FROM audit_log WHERE {A}",
                                    f"UPDATE ledger_user SET head_seq = 0, head_hash = genesis WHERE {A}"],
                                   ["debt: stored 2, log replays to 0"]),
    "totals_row_deleted": ([f"DELETE FROM ledger_entry WHERE {A} AND attribute = 'debt'"],
                           ["totals row (cap and spent) of ['debt'] is missing"]),
    "totals_rows_all_deleted": ([f"DELETE FROM ledger_entry WHERE {A}"],
                                ["totals row (cap and spent) of ['debt', 'diabetes'] is missing"]),
    "header_row_deleted": ([f"DELETE FROM ledger_user WHERE {A}"],
                           ["ledger_user row (header and chain head) is missing", "2 totals rows and 6 audit"]),
    "head_edited": ([f"UPDATE ledger_user SET head_seq = 5 WHERE {A}"], ["chain head is #5"]),
    "header_created_edited": ([f"UPDATE ledger_user SET created = '2020-01-01' WHERE {A}"],
                              ["genesis hash does not match its header"]),
    "record_moved_to_other_user": (["UPDATE audit_log SET user_id = 'alice', seq = 7 WHERE user_id = 'bob'",
                                    f"UPDATE ledger_user SET head_seq = 7, head_hash = (SELECT hash FROM "
                                    f"audit_log WHERE {A} AND seq = 7) WHERE {A}"],
                                   ["audit record #7 does not match its hash chain"]),
}


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tampered_ledger_is_refused_and_left_unchanged(tmp_path, policy, case, keyed):
    key = KEY if keyed else None
    db = tmp_path / "l.db"
    _build(db, policy, key)
    stmts, words = CASES[case]
    _sql(db, *stmts)
    before = _snapshot(db)
    with pytest.raises(LedgerIntegrityError) as exc:  # the chain's own checks (no rollback witness)
        SqliteLedger.for_policy(db, "alice", policy, key=key, witness=False)
    msg = str(exc.value)
    assert str(db) in msg and "'alice'" in msg and "nothing was changed" in msg
    for w in words:
        assert w in msg, (w, msg)
    with pytest.raises(LedgerIntegrityError):  # with the witness (the default): refused as well
        SqliteLedger.for_policy(db, "alice", policy, key=key)
    assert _snapshot(db) == before  # no repair, no write
    # the other user in the same file is untouched and still verifies
    if case != "record_moved_to_other_user":
        with SqliteLedger.for_policy(db, "bob", policy, key=key) as bob:
            assert bob.spent()["debt"] == F(1, 2)


def test_untampered_ledger_reopens_and_verifies(tmp_path, policy):
    for key in (None, KEY):
        db = tmp_path / f"ok{key is not None}.db"
        _build(db, policy, key)
        with SqliteLedger.for_policy(db, "alice", policy, key=key) as led:
            assert led.spent() == FINAL and led.keyed == (key is not None)
            head = led.verify()
            assert head == led.chain_head() and head.seq == 6 and len(head.hash) == 64
            assert led.export_state()["chain_head"] == {"seq": 6, "hash": head.hash}


def _old_format(db: Path) -> None:
    """A database as the previous dpmv (format version 1, no hash chain) wrote it."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript("""
CREATE TABLE dpmv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ledger_user (user_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE ledger_entry (user_id TEXT NOT NULL, attribute TEXT NOT NULL, cap TEXT NOT NULL,
    spent TEXT NOT NULL, PRIMARY KEY (user_id, attribute));
CREATE TABLE audit_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL, ts TEXT NOT NULL,
    attributes TEXT NOT NULL, epsilon TEXT NOT NULL, admitted INTEGER NOT NULL, checked INTEGER NOT NULL,
    remaining TEXT NOT NULL, blocked TEXT NOT NULL);
INSERT INTO dpmv_meta VALUES ('schema_version', '1');
""")
    conn.commit()
    conn.close()


def test_old_format_is_refused_unchanged(tmp_path, policy):
    db = tmp_path / "old.db"
    _old_format(db)
    before = _snapshot(db)
    for key in (None, KEY):
        with pytest.raises(LedgerFormatError, match=r"format version '1' \(the old format") as exc:
            SqliteLedger.for_policy(db, "alice", policy, key=key)
        assert str(db) in str(exc.value) and "export_state" in str(exc.value)
    assert _snapshot(db) == before
    _sql(db, "DELETE FROM dpmv_meta")  # ledger tables without a version: refused too
    with pytest.raises(LedgerFormatError, match="format version None"):
        SqliteLedger.for_policy(db, "alice", policy)
    assert isinstance(LedgerFormatError("x"), LedgerIntegrityError) and issubclass(LedgerIntegrityError, BudgetError)


def test_dropped_table_is_refused(tmp_path, policy):
    db = tmp_path / "l.db"
    _build(db, policy, None)
    _sql(db, "DROP TABLE audit_log")
    with pytest.raises(LedgerIntegrityError, match=r"tables \['audit_log'\] are missing"):
        SqliteLedger.for_policy(db, "alice", policy)


# ---- keys ----------------------------------------------------------------------------------------
def test_wrong_missing_and_unexpected_key_refused(tmp_path, policy):
    db = tmp_path / "k.db"
    _build(db, policy, KEY)
    before = _snapshot(db)
    with pytest.raises(LedgerIntegrityError, match=r"genesis hash does not match its header \(wrong key"):
        SqliteLedger.for_policy(db, "alice", policy, key=OTHER_KEY)
    with pytest.raises(LedgerIntegrityError, match="HMAC-keyed but no key was given"):
        SqliteLedger.for_policy(db, "alice", policy)
    assert _snapshot(db) == before
    plain = tmp_path / "p.db"
    _build(plain, policy, None)
    with pytest.raises(LedgerIntegrityError, match="a key was given but its audit chain is unkeyed"):
        SqliteLedger.for_policy(plain, "alice", policy, key=KEY)
    for bad in ("secret-as-str", b"short", 123):
        with pytest.raises(BudgetError, match="key"):
            SqliteLedger.for_policy(tmp_path / "b.db", "alice", policy, key=bad)


def test_key_from_env(monkeypatch):
    monkeypatch.setenv("DPMV_LEDGER_KEY", KEY.hex())
    assert key_from_env() == KEY
    for bad in ("zz", "00" * 4):
        monkeypatch.setenv("DPMV_LEDGER_KEY", bad)
        with pytest.raises(BudgetError, match="DPMV_LEDGER_KEY|16 bytes"):
            key_from_env()
    monkeypatch.delenv("DPMV_LEDGER_KEY")
    with pytest.raises(BudgetError, match="not set"):
        key_from_env()


def _forge(db: Path, policy, drop_seq: int, *, downgrade: bool = False) -> None:
    """An attacker who knows the (public) chain algorithm but not the key rewrites alice's log
    without record ``drop_seq`` and re-signs it unkeyed: every decision, remaining budget, running
    total, hash, the head and the stored totals are recomputed consistently."""
    caps = policy.caps
    conn = sqlite3.connect(db)
    fp, created, genesis = conn.execute(
        "SELECT fingerprint, created, genesis FROM ledger_user WHERE user_id = 'alice'").fetchone()
    if downgrade:  # claim the ledger was never keyed
        genesis = hashchain.genesis_hash(None, "alice", fp, created, hashchain.CHAIN_UNKEYED, caps)
        conn.execute("UPDATE ledger_user SET chain = ?, genesis = ? WHERE user_id = 'alice'",
                     (hashchain.CHAIN_UNKEYED, genesis))
    rows = conn.execute("SELECT seq, ts, attributes, epsilon, checked FROM audit_log WHERE user_id = 'alice' "
                        "ORDER BY seq").fetchall()
    conn.execute("DELETE FROM audit_log WHERE user_id = 'alice'")
    spent, h, seq = {a: F(0) for a in caps}, genesis, 0
    for old_seq, ts, attrs_j, eps_t, checked in rows:
        if old_seq == drop_seq:
            continue
        attrs, eps = json.loads(attrs_j), F(eps_t)
        blocked = [a for a in attrs if spent[a] + eps > caps[a]] if checked else []
        if not blocked:
            for a in attrs:
                spent[a] += eps
        seq += 1
        cols = (ts, attrs_j, eps_t, int(not blocked), checked,
                json.dumps({a: str(caps[a] - spent[a]) for a in attrs}), json.dumps(blocked),
                hashchain.totals_text(spent))
        h = hashchain.record_hash(None, "alice", seq, h, cols)
        conn.execute("INSERT INTO audit_log (user_id, seq, ts, attributes, epsilon, admitted, checked, "
                     "remaining, blocked, totals, hash) VALUES ('alice', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (seq, *cols, h))
    for a, v in spent.items():
        conn.execute("UPDATE ledger_entry SET spent = ? WHERE user_id = 'alice' AND attribute = ?", (str(v), a))
    conn.execute("UPDATE ledger_user SET head_seq = ?, head_hash = ? WHERE user_id = 'alice'", (seq, h))
    conn.commit()
    conn.close()


def test_recomputed_unkeyed_chain_is_accepted_documented_limitation(tmp_path, policy):
    """Without a key, whoever can write the file can rewrite a consistent chain (docs/deployment.md):
    the chain alone accepts it; the rollback witness (the default) refuses the shorter history,
    unless the attacker rewrites the witness too."""
    db = tmp_path / "u.db"
    _build(db, policy, None)
    _forge(db, policy, drop_seq=1)
    with pytest.raises(LedgerRollbackError, match="ends at record #5 but record #6 was committed"):
        SqliteLedger.for_policy(db, "alice", policy)
    with SqliteLedger.for_policy(db, "alice", policy, witness=False) as led:  # the chain alone accepts it
        # record #1 ({debt, diabetes} 2/3) is gone: the old #4 is now admitted, diabetes regained 2/3
        assert led.spent() == {"debt": F(2), "diabetes": F(1)} != FINAL
        assert len(led.log) == 5


@pytest.mark.parametrize("downgrade", [False, True], ids=["resigned", "downgraded_to_unkeyed"])
def test_recomputed_chain_is_refused_with_key(tmp_path, policy, downgrade):
    db = tmp_path / "k.db"
    _build(db, policy, KEY)
    _forge(db, policy, drop_seq=1, downgrade=downgrade)
    before = _snapshot(db)
    with pytest.raises(LedgerIntegrityError) as exc:
        SqliteLedger.for_policy(db, "alice", policy, key=KEY)
    msg = str(exc.value)
    assert str(db) in msg
    assert ("a key was given but its audit chain is unkeyed" in msg if downgrade else
            "audit record #1 does not match its hash chain: it was edited or reordered, or the key is wrong" in msg)
    assert _snapshot(db) == before


# ---- tampering while a ledger is open (checked before every charge) -------------------------------
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("case", ["spent_reset_to_0", "spent_negative", "log_truncated", "log_deleted_whole",
                                  "totals_row_deleted", "head_edited", "log_edit_tail"])
def test_tampering_after_open_refused_before_charge(tmp_path, policy, case, keyed):
    key = KEY if keyed else None
    db = tmp_path / "l.db"
    _build(db, policy, key)
    led = SqliteLedger.for_policy(db, "alice", policy, key=key)
    stmts = ([f"UPDATE audit_log SET epsilon = '1/6' WHERE {A} AND seq = 6"] if case == "log_edit_tail"
             else CASES[case][0])
    _sql(db, *stmts)
    before = _snapshot(db)[1]
    with pytest.raises(LedgerIntegrityError) as exc:
        led.try_charge(frozenset({"diabetes"}), F(1, 3))
    assert str(db) in str(exc.value)
    with pytest.raises(LedgerIntegrityError):
        led.spent()
    led.close()
    assert _snapshot(db)[1] == before  # the refused charge wrote nothing


def test_middle_edit_after_open_caught_by_verify_not_by_charge(tmp_path, policy):
    """The documented per-charge guarantee: totals, head and the last verified record are checked
    (so the charge decision is right); older records are re-checked by open, log, export, verify."""
    db = tmp_path / "l.db"
    _build(db, policy, None)
    led = SqliteLedger.for_policy(db, "alice", policy)
    _sql(db, f"UPDATE audit_log SET ts = 'x' WHERE {A} AND seq = 2")
    assert led.try_charge(frozenset({"diabetes"}), F(1, 3))  # decision from verified totals: 5/3 + 1/3 <= 2
    for check in (led.verify, lambda: led.log, led.export_state):
        with pytest.raises(LedgerIntegrityError, match="#2 does not match"):
            check()
    led.close()
    with pytest.raises(LedgerIntegrityError, match="#2 does not match"):
        SqliteLedger.for_policy(db, "alice", policy)


def test_other_process_appends_verified_incrementally(tmp_path, policy):
    db = tmp_path / "l.db"
    a = SqliteLedger.for_policy(db, "alice", policy, key=KEY)
    b = SqliteLedger.for_policy(db, "alice", policy, key=KEY)
    assert a.try_charge(frozenset({"debt"}), F(1, 2))
    assert b.try_charge(frozenset({"debt"}), F(1, 2))  # b verifies a's record #1, appends #2
    assert a.try_charge(frozenset({"debt"}), F(1))      # a verifies #2, appends #3: debt = 2
    assert not b.try_charge(frozenset({"debt"}), F(1, 10**9))
    assert a.spent() == b.spent() == {"debt": 2, "diabetes": 0}
    assert [r.seq for r in a.log] == [1, 2, 3, 4] and a.chain_head() == b.chain_head()
    a.close(), b.close()


def test_anchor_detects_rollback_of_whole_file(tmp_path, policy):
    db = tmp_path / "l.db"
    with SqliteLedger.for_policy(db, "alice", policy, key=KEY) as led:
        genesis = led.chain_head()
        assert genesis.seq == 0
        led.try_charge(frozenset({"debt"}), F(1))
    old = db.read_bytes()  # an older, fully consistent copy
    with SqliteLedger.for_policy(db, "alice", policy, key=KEY) as led:
        led.try_charge(frozenset({"debt"}), F(1))
        anchor = led.chain_head()  # exported to the operator's external store
        assert led.verify(anchor) == anchor and led.verify(genesis) == anchor
    db.write_bytes(old)  # roll the whole file back
    with pytest.raises(LedgerRollbackError, match="ends at record #1 but record #2"):  # the witness
        SqliteLedger.for_policy(db, "alice", policy, key=KEY)
    with SqliteLedger.for_policy(db, "alice", policy, key=KEY, witness=False) as led:  # the chain alone accepts it
        assert led.spent()["debt"] == 1
        with pytest.raises(LedgerIntegrityError, match="anchored head #2"):
            led.verify(anchor)
        with pytest.raises(LedgerIntegrityError, match="rolled back"):
            led.verify((anchor.seq, anchor.hash))
        assert led.verify(genesis).seq == 1  # an anchor older than the copy still verifies


# ---- the auditor's regression: spent = -5 with cap 1 admitted 7 charged releases --------------
MEAL = Query("Plan my meals this week", "meal_plan")


def _charged_releases(mv, n=20):
    out = 0
    for _ in range(n):
        out += any(s.charged for s in mv.release(MEAL).slots)
    return out


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_negative_spent_regression(tmp_path, keyed):
    key = KEY if keyed else None
    policy, m, _, _ = running_example()
    policy = policy.with_caps(1)
    honest = SqliteLedgerStore(tmp_path / "honest.db", key=key).ledger("alice", policy)
    assert _charged_releases(MemView(policy, m, budget=OnlineBudget(1), ledger=honest, seed=0)) == 1
    db = tmp_path / "l.db"
    SqliteLedger.for_policy(db, "alice", policy, key=key).close()
    _sql(db, "UPDATE ledger_entry SET spent = '-5'")
    with pytest.raises(LedgerIntegrityError, match="negative"):  # before: opened, then 6-7 charged releases
        SqliteLedger.for_policy(db, "alice", policy, key=key)
    # the same edit while the ledger is open: the next charge is refused, nothing more is admitted
    db2 = tmp_path / "l2.db"
    led = SqliteLedger.for_policy(db2, "alice", policy, key=key)
    mv = MemView(policy, m, budget=OnlineBudget(1), ledger=led, seed=0)
    assert _charged_releases(mv, 1) == 1
    _sql(db2, "UPDATE ledger_entry SET spent = '-5'")
    with pytest.raises(LedgerIntegrityError, match="negative"):
        mv.release(MEAL)
    led.close()


def test_bad_anchor_is_a_typed_error(tmp_path, policy):
    with SqliteLedger.for_policy(tmp_path / "l.db", "alice", policy) as led:
        for bad in ("abc", (1,), ("1", "h"), (-1, "h"), (True, "h"), ChainHead("bob", 0, "h")):
            with pytest.raises(BudgetError, match="anchor"):
                led.verify(bad)


def test_consistent_rollback_of_user_rows_needs_anchor(tmp_path, policy):
    """Documented limitation: resetting log, head and totals together to the genesis is a
    consistent (older) state; only an external anchor catches it."""
    db = tmp_path / "l.db"
    _build(db, policy, KEY)
    with SqliteLedger.for_policy(db, "alice", policy, key=KEY) as led:
        anchor = led.chain_head()
    _sql(db, f"DELETE FROM audit_log WHERE {A}", f"UPDATE ledger_entry SET spent = '0' WHERE {A}",
         f"UPDATE ledger_user SET head_seq = 0, head_hash = genesis WHERE {A}")
    with pytest.raises(LedgerRollbackError, match="ends at record #0 but record #6"):  # the witness
        SqliteLedger.for_policy(db, "alice", policy, key=KEY)
    with SqliteLedger.for_policy(db, "alice", policy, key=KEY, witness=False) as led:
        assert led.spent() == {"debt": 0, "diabetes": 0}  # accepted by the chain alone
        with pytest.raises(LedgerIntegrityError, match="anchored head #6"):
            led.verify(anchor)


@pytest.mark.parametrize("key", [None, KEY, OTHER_KEY], ids=["sha256", "hmac", "hmac-other"])
def test_record_hash_fast_path_is_the_documented_mac(key):
    """record_hash joins the JSON by hand on the hot path: it must equal the MAC over the
    encoder's text, h_i = MAC(domain || json(["record", user, i, h_{i-1}, columns...])),
    for any stored text (quotes, backslashes, control and non-ASCII characters, big ints) and
    fall back to the encoder for other types (bool, float, None: the verifier refuses those
    columns, but a hash must never be computed differently)."""
    import hashlib
    import hmac
    import random

    def reference(user, seq, prev, cols):
        msg = hashchain._DOMAIN + json.dumps(["record", user, seq, prev, *cols], separators=(",", ":"),
                                          ensure_ascii=True).encode("ascii")
        if key is None:
            return hashlib.sha256(msg).hexdigest()
        return hmac.new(key, msg, hashlib.sha256).hexdigest()

    rnd = random.Random(7)
    alphabet = ['"', "\\", "\n", "\x00", "\x1f", "\u00e9", "\u2028", "\U0001f600", "/", " ", "a", "{", "]"]
    texts = ["", '{"debt":"2/3"}', '["a\\"b"]'] + ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(12)))
                                                  for _ in range(60)]
    for i, t in enumerate(texts):
        cols = (t, texts[-i], "2/3", i % 2, 1 - i % 2, t[::-1], "[]", '{"x":"0"}')
        for user, seq, prev in (("alice", i + 1, "ab" * 32), (t or "u", 10**30 + i, t)):
            assert hashchain.record_hash(key, user, seq, prev, cols) == reference(user, seq, prev, cols)
            tail = hashchain.columns_text(cols[1:])  # (kept by a caller that writes them again)
            assert hashchain.record_hash(key, user, seq, prev, cols, tail) == reference(user, seq, prev, cols)
    for odd in (True, 1.5, None, Fraction(1, 3)):
        cols = ("ts", "[]", "0", odd, 1, "{}", "[]", "{}")
        assert hashchain.columns_text(cols[1:]) is None
        if isinstance(odd, Fraction):
            with pytest.raises(TypeError):
                hashchain.record_hash(key, "alice", 1, "x", cols)
        else:
            assert hashchain.record_hash(key, "alice", 1, "x", cols) == reference("alice", 1, "x", cols)
