"""The verifier of a hash-chained durable ledger (C5 across crashes and processes):
:class:`ChainVerifier` checks the schema and the user's header on open, verifies the chain of
audit records and the stored running totals (all of it, or what was appended since the last
verification), holds the verified head (:class:`Verified`) and holds the chain to its rollback
witness. Also the tables (:data:`SCHEMA`) and the exported head (:class:`ChainHead`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Protocol, Sequence

from . import hashchain
from ..core.memo import remember
from ..core.errors import (BudgetError, BudgetTypeError, LedgerFormatError, LedgerIntegrityError,
                           LedgerRollbackError, UnknownAttributeError)
from .records import AuditRecord, RecordTexts, format_totals, utc_now, replay_step
from .witness import Witness, WitnessMark, WitnessTamperError


SCHEMA_VERSION = "3"  # 3: + audit_log.origin (group commit); 2: hash-chained (migrated on open); 1: refused
_TABLES = ("dpmv_meta", "ledger_user", "ledger_entry", "audit_log")
SCHEMA = """
CREATE TABLE dpmv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ledger_user (
    user_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, created TEXT NOT NULL, chain TEXT NOT NULL,
    genesis TEXT NOT NULL, head_seq INTEGER NOT NULL, head_hash TEXT NOT NULL);
CREATE TABLE ledger_entry (
    user_id TEXT NOT NULL, attribute TEXT NOT NULL, cap TEXT NOT NULL, spent TEXT NOT NULL,
    PRIMARY KEY (user_id, attribute));
CREATE TABLE audit_log (
    user_id TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL, attributes TEXT NOT NULL,
    epsilon TEXT NOT NULL, admitted INTEGER NOT NULL, checked INTEGER NOT NULL,
    remaining TEXT NOT NULL, blocked TEXT NOT NULL, totals TEXT NOT NULL, hash TEXT NOT NULL,
    origin TEXT NOT NULL DEFAULT '', PRIMARY KEY (user_id, seq));
"""
# format 2 -> 3: the origin column (empty for every format-2 record, whose hash is unchanged)
_MIGRATE_2_3 = "ALTER TABLE audit_log ADD COLUMN origin TEXT NOT NULL DEFAULT ''"
# the order rows are read and written in: seq, the MAC'd columns, origin, hash
LOG_COLUMNS = "seq, " + ", ".join(hashchain.RECORD_COLUMNS) + ", origin, hash"


class Transaction(Protocol):
    """What the verifier needs of the ledger's open transaction
    (:class:`~dpmv_lib.ledgers.chain.Tx`): statements with ``?`` placeholders."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; returns the backend's cursor.

        Parameters
        ----------
        sql : str
        params : sequence, optional
            Its parameters.
        """
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        """Run one statement once per row of parameters.

        Parameters
        ----------
        sql : str
        rows : iterable of sequence
            The parameters of each run.
        """
        ...

    def executescript_safe(self, script: str) -> None:
        """Run a schema script statement by statement inside the transaction.

        Parameters
        ----------
        script : str
            Statements separated by ``;``.
        """
        ...


def _frac(text: Any, what: str) -> Fraction:
    try:
        return Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        raise BudgetError(f"corrupt ledger value for {what}: {text!r}") from None


@dataclass(frozen=True)
class ChainHead:
    """The verified head of a user's audit chain: record ``seq`` (0 = genesis) has ``hash``.

    Store it outside the database (C5 audit anchor) and pass it to ``SqliteLedger.verify`` later:
    a file rolled back to before that record, or replaced, no longer verifies.

    Parameters
    ----------
    user_id : str
        The ledger's user.
    seq : int
        The sequence number of the head record (0: the genesis).
    hash : str
        Its chain hash (hex).
    """

    user_id: str
    seq: int
    hash: str


@dataclass(frozen=True)
class Verified:
    """A verified chain head (C5 audit): the last record checked, its hash, and L_a after it.

    Parameters
    ----------
    seq : int
        The highest verified record (0: only the genesis).
    hash, prev : str
        Its hash, and the hash of record ``seq - 1`` ("" at the genesis).
    totals : dict of str to Fraction
        The running totals L_a after it.
    """

    seq: int                      # highest verified record (0: only the genesis)
    hash: str                     # its hash
    prev: str                     # hash of record seq-1 ("" at the genesis)
    totals: dict[str, Fraction]   # running L_a after it


def anchor_position(anchor: ChainHead | tuple[int, str] | None, user_id: str) -> tuple[int, str]:
    """The position (seq, hash) an anchor names ((0, "") for None), checked.

    Parameters
    ----------
    anchor : ChainHead or (int, str) or None
        A head saved earlier (:meth:`~dpmv_lib.ledgers.chain.ChainLedger.chain_head`).
    user_id : str
        The ledger's user (a ChainHead must belong to it).

    Raises
    ------
    BudgetTypeError
        If ``anchor`` is not a ChainHead, None or an (int, str) pair.
    BudgetError
        If ``anchor`` belongs to another user or has a negative seq.
    """
    if isinstance(anchor, ChainHead) and anchor.user_id != user_id:
        raise BudgetError(f"anchor belongs to user {anchor.user_id!r}, not {user_id!r}")
    pair = (anchor.seq, anchor.hash) if isinstance(anchor, ChainHead) else (0, "") if anchor is None else anchor
    if not isinstance(pair, tuple) or len(pair) != 2 or isinstance(pair[0], bool) \
            or not isinstance(pair[0], int) or pair[0] < 0 or not isinstance(pair[1], str):
        typed = not isinstance(pair, tuple) or len(pair) == 2 and (
            isinstance(pair[0], bool) or not isinstance(pair[0], int) or not isinstance(pair[1], str))
        raise (BudgetTypeError if typed else BudgetError)(
            f"anchor must be a ChainHead or (seq, hash), got {anchor!r}")
    return pair


class ChainVerifier:
    """Verifies one user's hash-chained ledger and holds its verified head (C5 audit).

    The ledger (:class:`~dpmv_lib.ledgers.chain.ChainLedger`) owns the connection and the
    transactions and passes each one in; the verifier reads through it and never writes, except
    the user's header and the schema on open (:meth:`check_tables`, :meth:`register`). The
    stored texts are compared with those the ledger writes through the same ``texts``.

    Parameters
    ----------
    path : str
        Where the ledger lives (for messages).
    user_id, policy_fingerprint : str
        The user and the fingerprint of the ledger's policy.
    caps : dict of str to Fraction
        The caps B_a (checked, :func:`~dpmv_lib.ledgers.records.check_caps`).
    key : bytes or None
        The operator's HMAC key (checked), or None for an unkeyed chain.
    texts : RecordTexts
        The stored texts of records for these caps (shared with the ledger that writes them).
    """

    def __init__(self, path: str, user_id: str, policy_fingerprint: str, caps: dict[str, Fraction],
                 key: bytes | None, texts: RecordTexts) -> None:
        self.path = path
        self.user_id = user_id
        self.policy_fingerprint = policy_fingerprint
        self._caps = caps
        self._key = key
        self._chain = hashchain.chain_kind(key)
        self._texts = texts
        self._genesis = ""
        self._v = Verified(0, "", "", {a: Fraction(0) for a in caps})
        self._last_row: tuple[Any, ...] | None = None  # the verified tail record exactly as hashed
        self._rem_cache: tuple[str, dict[str, Fraction]] | None = None  # (head hash, B_a - L_a there)
        self._tot_text: tuple[str, str] | None = None  # (head hash, canonical totals text there)
        self._attrs_of: dict[str, tuple[str, ...]] = {}  # canonical attributes text -> sorted names
        self._blocked_seen: set[tuple[Any, ...]] = set()  # blocked records verified by _fast_step
        self._parsed: dict[tuple[str, ...], tuple[Any, ...]] = {}   # audit-record texts -> parsed values
        self._tails: dict[tuple[Any, ...], str] = {}  # record columns after the time -> their JSON text
        self._totals_rows: tuple[list[Any], dict[str, Fraction]] | None = None  # last ledger_entry read
        self._witness: Witness | None = None  # the rollback witness (set_witness)
        self._w_binds = False  # the witness binds its marks to the ledger's genesis
        self._w_ok: WitnessMark | None = None  # the last witness mark the chain was found to hold
        self._w_mark: WitnessMark | None = None  # the mark read as the current transaction began
        self._w_err: Exception | None = None  # the witness's tampering error, raised where it is consulted

    # ---- the verified head -------------------------------------------------------------------
    @property
    def head(self) -> Verified:
        """The verified head: the last record checked, its hash and L_a after it."""
        return self._v

    @property
    def genesis(self) -> str:
        """The user's genesis hash ("" before :meth:`register`)."""
        return self._genesis

    def restart(self) -> None:
        """Forget everything verified after the genesis: the next :meth:`sync` replays and checks
        the whole chain (on open, ``verify``, ``log`` and ``export_state``)."""
        self._v = Verified(0, self._genesis, "", {a: Fraction(0) for a in self._caps})
        self._last_row = None

    def adopt(self, new: Verified, last_row: tuple[Any, ...] | None, totals_text: str | None = None,
              left: dict[str, Fraction] | None = None) -> None:
        """Take the head that the ledger itself wrote and committed as verified.

        Parameters
        ----------
        new : Verified
            The new head (nothing changes when it is the current one).
        last_row : tuple or None
            Its record exactly as written (the columns after the user id).
        totals_text : str, optional
            The stored text of its running totals.
        left : dict of str to Fraction, optional
            B_a - L_a at it (kept by reference: not changed later by the caller).
        """
        if new is not self._v:
            self._v, self._last_row = new, last_row
            if totals_text is not None:
                self._tot_text = (new.hash, totals_text)
        if left is not None:
            self._rem_cache = (new.hash, left)

    def known_left(self) -> dict[str, Fraction] | None:
        """B_a - L_a at the head (a copy) when it is known from the last verification or commit,
        else None."""
        cached = self._rem_cache
        return dict(cached[1]) if cached is not None and cached[0] == self._v.hash else None

    def known_totals_text(self) -> str | None:
        """The stored text of the running totals at the head when it is known, else None."""
        tt = self._tot_text
        return tt[1] if tt is not None and tt[0] == self._v.hash else None

    # ---- the rollback witness ----------------------------------------------------------------
    @property
    def witness(self) -> Witness | None:
        """The rollback witness the chain is held to (None: none)."""
        return self._witness

    def set_witness(self, witness: Witness | None) -> None:
        """Hold the chain to ``witness`` from the next transaction on.

        Parameters
        ----------
        witness : Witness or None
            An object with ``read``/``advance`` (a FileWitness binds its marks to the genesis), or
            None for none.
        """
        self._witness = witness
        self._w_binds = bool(getattr(witness, "binds_ledger", False))

    def unmarked(self) -> bool:
        """True when a witness is set, holds no mark the chain was found to hold, and the chain has
        records (a new witness, or one deleted: the ledger adopts the chain)."""
        return self._witness is not None and self._w_ok is None and self._v.seq > 0

    def read_mark(self, check: bool) -> None:
        """As a transaction begins (before its snapshot): read the witness's mark for the checks
        of :meth:`check_witness`. A tampering error is kept and raised where the mark is
        consulted, after the chain's own checks (which name a wrong key or an edit first).

        Parameters
        ----------
        check : bool
            Whether this transaction is held to the witness (writes and ``verify``; plain reads
            are not).
        """
        w = self._witness if check else None
        self._w_err = None
        try:
            self._w_mark = w.read(self.user_id) if w is not None else None
        except WitnessTamperError as exc:
            self._w_mark, self._w_err = None, exc

    def advance_witness(self) -> None:
        """After a durable commit, before it is acknowledged: the witness learns the head."""
        if self._witness is not None:
            v = self._v
            if self._w_binds:  # (a FileWitness: the mark is bound to this ledger's genesis)
                self._witness.advance(self.user_id, v.seq, v.hash, genesis=self._genesis)  # type: ignore[call-arg]
            else:
                self._witness.advance(self.user_id, v.seq, v.hash)
            self._w_ok = WitnessMark(v.seq, v.hash)

    # ---- opening and verification ----------------------------------------------------------
    def _refuse(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(f"ledger {self.path} (user {self.user_id!r}) does not verify: {what}; "
                                    "refusing it (nothing was changed)")

    def check_tables(self, db: Transaction, names: set[str], create: str) -> None:
        """Check the schema (every backend's): create the current format in a database without our
        tables, migrate format 2, refuse any other format or a missing table.

        Parameters
        ----------
        db : Transaction
            The ledger's open write transaction.
        names : set of str
            The names of the tables the database has.
        create : str
            The backend's schema script (:data:`SCHEMA` or its dialect).

        Raises
        ------
        LedgerFormatError
            If the database has another format version.
        LedgerIntegrityError
            If one of our tables is missing.
        """
        ours = sorted(names & set(_TABLES))
        if not ours:  # a new (or foreign) database: create the current format
            db.executescript_safe(create)
            db.execute("INSERT INTO dpmv_meta (key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            return
        version = None
        if "dpmv_meta" in names:
            row = db.execute("SELECT value FROM dpmv_meta WHERE key = 'schema_version'").fetchone()
            version = row[0] if row else None
        if version == "2" and "audit_log" in names:  # add the origin column (records verify as before)
            db.execute(_MIGRATE_2_3)
            db.execute("UPDATE dpmv_meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))
            version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            old = " (the old format without a hash-chained audit log)" if version == "1" else ""
            raise LedgerFormatError(
                f"ledger database {self.path} has format version {version!r}{old}; this dpmv reads only "
                f"version {SCHEMA_VERSION!r}. Export each user with the dpmv that wrote it "
                "(export_state) and import into a new database (import_state); nothing was changed")
        missing = sorted(set(_TABLES) - names)
        if missing:
            raise self._refuse(f"tables {missing} are missing")

    def register(self, db: Transaction) -> bool:
        """Create the user's header, totals rows and genesis, or check an existing header against
        this ledger (policy fingerprint, chain kind, caps, genesis hash).

        Parameters
        ----------
        db : Transaction
            The ledger's open write transaction (its schema checked).

        Returns
        -------
        bool
            True when the user was created (the head is its genesis); False when the existing
            header checked out: its chain is then verified from :meth:`restart`.

        Raises
        ------
        BudgetError
            If the stored ledger was created for another policy or other caps, or a cap is corrupt.
        LedgerIntegrityError
            If the header, the chain kind or the genesis does not verify, or the user is missing but
            its witness holds an acknowledged record (a LedgerRollbackError).
        """
        row = db.execute("SELECT fingerprint, created, chain, genesis FROM ledger_user WHERE user_id = ?",
                         (self.user_id,)).fetchone()
        if row is None:
            if self._w_err is not None:
                raise self._w_err
            mark = self._w_mark
            if mark is not None and mark.seq:
                raise self._rolled_back(f"the user is missing from the database but its record #{mark.seq} "
                                        "was committed and acknowledged (the user's rows deleted, or the "
                                        "file truncated or replaced" + (
                                            f"; or the witness belongs to another ledger, genesis "
                                            f"{mark.genesis}..." if mark.genesis else "") + ")")
            n_e = db.execute("SELECT COUNT(*) FROM ledger_entry WHERE user_id = ?", (self.user_id,)).fetchone()[0]
            n_l = db.execute("SELECT COUNT(*) FROM audit_log WHERE user_id = ?", (self.user_id,)).fetchone()[0]
            if n_e or n_l:
                raise self._refuse(f"its ledger_user row (header and chain head) is missing but "
                                   f"{n_e} totals rows and {n_l} audit records exist")
            created = utc_now()
            genesis = hashchain.genesis_hash(self._key, self.user_id, self.policy_fingerprint, created,
                                          self._chain, self._caps)
            db.execute("INSERT INTO ledger_user (user_id, fingerprint, created, chain, genesis, head_seq, "
                       "head_hash) VALUES (?, ?, ?, ?, ?, 0, ?)",
                       (self.user_id, self.policy_fingerprint, created, self._chain, genesis, genesis))
            db.executemany("INSERT INTO ledger_entry (user_id, attribute, cap, spent) VALUES (?, ?, ?, '0')",
                           [(self.user_id, a, str(b)) for a, b in sorted(self._caps.items())])
            self._genesis = genesis
            self._v = Verified(0, genesis, "", {a: Fraction(0) for a in self._caps})
            return True
        fingerprint, created, chain, genesis = row
        if fingerprint != self.policy_fingerprint:
            raise BudgetError(f"ledger of user {self.user_id!r} in {self.path} was created for policy "
                              f"{fingerprint} but is opened with policy {self.policy_fingerprint}")
        if chain != self._chain:
            if chain == hashchain.CHAIN_KEYED:
                raise self._refuse("its audit chain is HMAC-keyed but no key was given")
            if chain == hashchain.CHAIN_UNKEYED:
                raise self._refuse("a key was given but its audit chain is unkeyed (sha256): it was "
                                   "created without a key, or a keyed chain was rewritten without it")
            raise self._refuse(f"unknown chain kind {chain!r}")
        stored = {}
        for a, c in db.execute("SELECT attribute, cap FROM ledger_entry WHERE user_id = ?",
                               (self.user_id,)).fetchall():
            stored[a] = _frac(c, f"cap of {a!r}")
        lost = sorted(set(self._caps) - set(stored))
        if lost and set(stored) <= set(self._caps):
            raise self._refuse(f"the totals row (cap and spent) of {lost} is missing from ledger_entry")
        if stored != self._caps:
            raise BudgetError(f"ledger of user {self.user_id!r} has caps {format_totals(stored)} but is opened "
                              f"with caps {format_totals(self._caps)}")
        expect = hashchain.genesis_hash(self._key, self.user_id, fingerprint, str(created), chain, self._caps)
        if genesis != expect:
            raise self._refuse("its genesis hash does not match its header "
                               + ("(wrong key, or user/fingerprint/created/caps edited)" if self._key
                                  else "(user/fingerprint/created/caps edited)"))
        self._genesis = genesis
        return False

    def _read_totals(self, db: Transaction) -> dict[str, Fraction]:
        fetched = db.execute("SELECT attribute, spent FROM ledger_entry WHERE user_id = ?",
                             (self.user_id,)).fetchall()
        last = self._totals_rows
        if last is not None and last[0] == fetched and all(type(v) is str for _, v in fetched):
            return dict(last[1])  # the same rows (values and text) as the last checked read
        out: dict[str, Fraction] = {}
        for a, v in fetched:
            if a not in self._caps:
                raise self._refuse(f"ledger_entry has a row for attribute {a!r} outside the caps {sorted(self._caps)}")
            try:
                if not isinstance(v, str):
                    raise ValueError
                out[a] = self._texts.fraction(v)
            except (ValueError, ZeroDivisionError):
                raise self._refuse(f"the stored spent of {a!r} is not an exact rational: {v!r}") from None
            if out[a] < 0:
                raise self._refuse(f"the stored spent of {a!r} is {v}: negative")
        lost = sorted(set(self._caps) - set(out))
        if lost:
            raise self._refuse(f"the totals row (cap and spent) of {lost} is missing from ledger_entry")
        self._totals_rows = (fetched, dict(out))
        return out

    def _parse_row(self, row: Sequence[Any]) -> tuple[AuditRecord, dict[str, Fraction]]:
        seq, ts, attrs, eps, adm, chk, rem, blk, tot, _o, _h = row
        key = (attrs, eps, rem, blk, tot)
        parsed = self._parsed.get(key)  # records of other processes repeat these texts: parse once
        try:
            if parsed is None:
                a = json.loads(attrs)
                r = json.loads(rem)
                b = json.loads(blk)
                t = json.loads(tot)
                if (not isinstance(a, list) or not all(isinstance(x, str) for x in a) or not isinstance(r, dict)
                        or not isinstance(b, list) or not all(isinstance(x, str) for x in b)
                        or not isinstance(t, dict)):
                    raise ValueError
                parsed = (tuple(a), Fraction(eps), tuple(sorted((k, Fraction(v)) for k, v in r.items())),
                          tuple(b), {k: Fraction(v) for k, v in t.items()})
                remember(self._parsed, key, parsed, 4096)
            if adm not in (0, 1) or chk not in (0, 1):
                raise ValueError
        except (ValueError, TypeError, ZeroDivisionError, RecursionError):
            raise self._refuse(f"audit record #{seq} has a malformed column") from None
        a_t, e, remaining, b_t, totals = parsed
        totals = dict(totals)
        if e < 0:
            raise self._refuse(f"audit record #{seq} has a negative eps {eps}")
        return (AuditRecord(seq, self.user_id, ts, a_t, e, bool(adm), bool(chk), remaining, b_t), totals)

    def sync(self, db: Transaction, collect: list[AuditRecord] | None = None) -> None:
        """Verify what was appended since the last verified record, then head and totals (C5).

        Re-hashes the last verified record (an edit of it is detected), verifies each newer record (contiguous seq, hash
        chained from the last verified one, strict replay of its decision, running totals) and requires the stored chain
        head to be the tail and the stored spent budgets to equal the tail's running totals. Three statements: the
        header, the totals rows, and the log from the last verified record on. The verified head
        advances only when everything checks out.

        Parameters
        ----------
        db : Transaction
            The ledger's open transaction.
        collect : list of AuditRecord, optional
            Each verified record is appended here (the general replay is used for every record).

        Raises
        ------
        LedgerIntegrityError
            If a record, the chain head or the stored totals do not verify (a
            :class:`~dpmv_lib.core.errors.LedgerRollbackError` when the chain is behind its witness).
        """
        v, uid, key = self._v, self.user_id, self._key
        head = db.execute("SELECT head_seq, head_hash, genesis FROM ledger_user WHERE user_id = ?",
                          (uid,)).fetchone()
        if head is None:
            raise self._refuse("its ledger_user row (header and chain head) was deleted")
        head_seq, head_hash, genesis = head
        if genesis != self._genesis:
            raise self._refuse("its genesis hash changed since it was verified")
        stored = self._read_totals(db)
        rows = db.execute(f"SELECT {LOG_COLUMNS} FROM audit_log WHERE user_id = ? AND seq >= ? ORDER BY seq",
                          (uid, v.seq if v.seq else 1)).fetchall()
        if v.seq:
            row = rows[0] if rows else None
            if row is None or row[0] != v.seq:
                raise self._refuse(f"the audit log no longer has record #{v.seq}, verified earlier (records "
                                   "deleted from the end)")
            cached = self._last_row
            same = (cached is not None and row == cached  # same values and types:
                    and tuple(map(type, row)) == tuple(map(type, cached)))
            if not same and (self._row_hash(row, v.prev) != v.hash or row[-1] != v.hash):  # same hash
                raise self._refuse(f"audit record #{v.seq} was deleted or edited after it was verified")
            rows = rows[1:]
        seq, h, prev = v.seq, v.hash, v.prev
        spent = dict(v.totals) if rows else v.totals
        fast: list[Any] | None = None
        if collect is None and rows:  # [B_a - L_a, totals text or None] for _fast_step
            cached = self._rem_cache
            fast = [dict(cached[1]) if cached is not None and cached[0] == v.hash
                    else {a: c - spent[a] for a, c in self._caps.items()}, self._texts.totals(spent)]
        for row in rows:
            if row[0] != seq + 1:
                raise self._refuse(f"the audit log has no record #{seq + 1} (the next one is #{row[0]}): a "
                                   "record was deleted or renumbered")
            seq = row[0]
            computed = self._row_hash(row, h)
            if row[-1] != computed:
                raise self._refuse(f"audit record #{seq} does not match its hash chain: it was edited or "
                                   "reordered" + (", or the key is wrong" if key else ""))
            if fast is not None:
                if self._fast_step(row, spent, fast):
                    prev, h = h, computed
                    continue
                fast = None  # the general replay from here on
            rec, totals = self._parse_row(row)
            try:
                replay_step(spent, rec, self._caps)
            except (BudgetError, UnknownAttributeError) as exc:
                raise self._refuse(f"replay fails: {exc}") from None
            if totals != spent:
                raise self._refuse(f"audit record #{seq} stores running totals {format_totals(totals)} but replay "
                                   f"gives {format_totals(spent)}")
            if collect is not None:
                collect.append(rec)
            prev, h = h, computed
        if seq == 0 and head_seq != 0:
            raise self._refuse(f"the audit log is empty but the chain head says #{head_seq} (log deleted)")
        if head_seq != seq or head_hash != h:
            raise self._refuse(f"the stored chain head is #{head_seq} {str(head_hash)[:16]} but the audit log "
                               f"ends at #{seq} {h[:16]} (records deleted from or added to its end)")
        if self._witness is not None:
            self.check_witness(db, seq, h)
        if stored != spent:
            diff = [f"{a}: stored {stored[a]}, log replays to {spent[a]}" for a in sorted(spent)
                    if stored[a] != spent[a]]
            raise self._refuse("the stored spent budgets do not equal the replay of the audit log ("
                               + "; ".join(diff) + f"; tail record #{seq})")
        if rows:
            self._v = Verified(seq, h, prev, spent)
            self._last_row = tuple(rows[-1])
            if fast is not None:
                self._rem_cache = (h, fast[0])
                self._tot_text = (h, fast[1])

    def check_witness(self, db: Transaction, seq: int, h: str) -> None:
        """The chain (verified up to record ``seq`` with hash ``h``) holds the witness's mark read by
        :meth:`read_mark`: it is not behind it and has the acknowledged record at that position.

        Parameters
        ----------
        db : Transaction
            The transaction the mark was read for.
        seq : int
            The last verified record.
        h : str
            Its hash.

        Raises
        ------
        LedgerRollbackError
            If the chain is behind the mark or holds another record there (naming the ledger and the
            witness; nothing is written).
        WitnessTamperError
            If the witness was found tampered with as the transaction began.
        """
        if self._w_err is not None:
            raise self._w_err
        mark = self._w_mark  # (read as the transaction began: see read_mark; None in a plain read)
        if mark is None:
            return
        if mark.genesis and not self._genesis.startswith(mark.genesis):
            raise self._rolled_back(f"its record #{mark.seq} is not the one that was acknowledged: the witness's "
                                    f"mark belongs to another ledger of this user (genesis "
                                    f"{mark.genesis}...), not to this one (genesis {self._genesis[:16]}...): the "
                                    "database was replaced by another ledger, or the witness belongs to another "
                                    "ledger")
        if seq < mark.seq:
            raise self._rolled_back(f"its audit chain ends at record #{seq} but record #{mark.seq} was "
                                    "committed and acknowledged (the database was rolled back: records deleted "
                                    "from the end, the file or its write-ahead log truncated, or an old copy "
                                    "restored" + ("" if mark.genesis else "; or the witness belongs to another "
                                                  "ledger") + ")")
        if mark == self._w_ok:
            return  # (this record was found there before)
        at = h if seq == mark.seq else (db.execute("SELECT hash FROM audit_log WHERE user_id = ? AND seq = ?",
                                                   (self.user_id, mark.seq)).fetchone() or [None])[0]
        if at != mark.hash:
            raise self._rolled_back(f"its record #{mark.seq} is not the one that was acknowledged (the chain "
                                    "was replaced by another history)")
        self._w_ok = mark

    def _rolled_back(self, what: str) -> LedgerRollbackError:
        w = self._witness
        where = getattr(w, "where", None)
        name = f"{w} (file {where(self.user_id)})" if callable(where) else f"{w}"
        return LedgerRollbackError(f"ledger {self.path} (user {self.user_id!r}) is behind its rollback witness "
                                   f"{name}: {what}; refusing it (nothing was changed)")

    def _fast_step(self, row: Sequence[Any], spent: dict[str, Fraction], fast: list[Any]) -> bool:
        """Verify one (hash-checked) record by re-deciding it: True iff its stored columns are
        byte-identical to what ``ChainLedger._decide_write`` writes for that charge from ``spent``
        (then its decision, remaining and totals are exactly right; ``spent`` and ``fast`` =
        [B_a - L_a, totals text] are advanced). False changes nothing; the caller then runs the
        general replay, which names the error."""
        _seq, _ts, attrs_t, eps_t, adm, chk, rem_t, blk_t, tot_t, _o, _h = row
        left, tot = fast
        if adm == 0 and tot_t == tot and (attrs_t, eps_t, chk, rem_t, blk_t, tot_t) in self._blocked_seen:
            return True  # this blocked charge was verified before from the same totals: same result
        attrs = self._attrs_of.get(attrs_t)
        if attrs is None:
            try:
                attrs = tuple(sorted(set(json.loads(attrs_t))))
            except (ValueError, TypeError, RecursionError):
                return False
            if not all(isinstance(a, str) and a in self._caps for a in attrs) \
                    or self._texts.attributes(frozenset(attrs)) != attrs_t:
                return False
            remember(self._attrs_of, attrs_t, attrs, 1024)
        try:
            eps = self._texts.fraction(eps_t)
        except (ValueError, ZeroDivisionError):
            return False
        if eps < 0 or str(eps) != eps_t or chk not in (0, 1):
            return False
        blocked = [a for a in attrs if eps > left[a]] if chk else []
        if adm != (0 if blocked else 1):
            return False
        if blocked:
            after, left_after = spent, left
        else:
            after, left_after = dict(spent), dict(left)
            for a in attrs:
                after[a] += eps
                left_after[a] -= eps
            tot = self._texts.totals(after)
        if tot != tot_t or blk_t != self._texts.blocked(blocked) \
                or rem_t != self._texts.remaining({a: left_after[a] for a in attrs}):
            return False
        if after is not spent:
            spent.update(after)
        elif len(self._blocked_seen) < 256:
            self._blocked_seen.add((attrs_t, eps_t, chk, rem_t, blk_t, tot_t))
        fast[0], fast[1] = left_after, tot
        return True

    def _row_hash(self, row: Sequence[Any], prev: str) -> str:
        seq, cols, origin = row[0], tuple(row[1:-2]), row[-2]
        if tuple(map(type, cols)) == hashchain.COLUMN_TYPES and type(origin) is str:  # the usual case
            rest = cols[1:]  # (exact str and int values: equal columns have the same JSON text)
            tail = self._tails.get(rest)
            if tail is None:
                tail = remember(self._tails, rest, hashchain.columns_text(rest), 256)
            return hashchain.record_hash(self._key, self.user_id, seq, prev, cols, tail, origin)
        for name, typ, val in zip(hashchain.RECORD_COLUMNS + ("origin",), hashchain.COLUMN_TYPES + (str,),
                                  cols + (origin,)):
            if type(val) is not typ:
                raise self._refuse(f"column {name} of audit record #{seq} is {type(val).__name__}, "
                                   f"expected {typ.__name__}")
        return hashchain.record_hash(self._key, self.user_id, seq, prev, cols, origin=origin)

    def check_anchor(self, db: Transaction, seq: int, h: str) -> None:
        """The verified chain holds record ``seq`` with hash ``h`` (0: the genesis).

        Parameters
        ----------
        db : Transaction
            The transaction the chain was verified in.
        seq : int
            The anchored record (from :func:`anchor_position`).
        h : str
            Its hash.

        Raises
        ------
        LedgerIntegrityError
            If the chain does not hold that record (rolled back or replaced).
        """
        got: str | None
        if seq == 0:
            got = self._genesis
        else:
            row = db.execute("SELECT hash FROM audit_log WHERE user_id = ? AND seq = ?",
                             (self.user_id, seq)).fetchone()
            got = row[0] if row else None
        if got != h:
            raise self._refuse(f"the chain does not contain the anchored head #{seq} "
                               f"{str(h)[:16]} (it ends at #{self._v.seq}): the file was rolled "
                               "back or replaced")
