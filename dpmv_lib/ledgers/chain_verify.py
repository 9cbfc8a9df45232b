"""The hash-chained ledger's schema, chain head and verification (C5 across crashes and processes): the
:class:`ChainVerify` half of :class:`~dpmv_lib.ledgers.chain.ChainLedger` and the transaction wrapper :class:`Tx`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from . import hashchain
from ..core.memo import remember
from ..core.errors import (BudgetError, BudgetTypeError, LedgerFormatError, LedgerIntegrityError,
                           LedgerRollbackError, UnknownAttributeError)
from .records import AuditRecord, SCHEMA_VERSION, format_totals, utc_now, replay_step
from .witness import WitnessTamperError

if TYPE_CHECKING:
    import threading

    from .witness import Witness, WitnessMark


# ---- SQLite backend ----------------------------------------------------------------------------
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
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\- ]+")


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


class ChainVerify:
    """The opening and verification half of :class:`~dpmv_lib.ledgers.chain.ChainLedger` (a mixin:
    the attributes it reads are set there): schema and registration checks, full and incremental
    verification of the hash chain and of the running totals, the verified chain head."""

    # ---- what the mixin reads: set in ChainLedger.__init__ and by the backends (types only) ----
    path: str
    user_id: str
    policy_fingerprint: str
    _caps: dict[str, Fraction]
    _key: bytes | None
    _chain: str
    _lock: threading.RLock
    _db_errors: tuple[type[BaseException], ...]
    _genesis: str
    _v: Verified
    _attrs_of: dict[str, tuple[str, ...]]
    _blocked_seen: set[tuple[Any, ...]]
    _parsed: dict[tuple[str, ...], tuple[Any, ...]]
    _tails: dict[tuple[Any, ...], str]
    _last_row: tuple[Any, ...] | None
    _rem_cache: tuple[str, dict[str, Fraction]] | None
    _tot_text: tuple[str, str] | None
    _totals_rows: tuple[list[Any], dict[str, Fraction]] | None
    _witness: Witness | None
    _w_ok: WitnessMark | None
    _w_mark: WitnessMark | None
    _w_err: Exception | None

    if TYPE_CHECKING:  # defined by ChainLedger and the backends
        def _begin(self, write: bool) -> None: ...
        def _commit(self) -> None: ...
        def _rollback(self) -> None: ...
        def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any: ...
        def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any: ...
        def _ensure_schema(self, db: Tx) -> None: ...
        def _tx(self, write: bool = True, witness: bool | None = None) -> Tx: ...
        def _frac_cached(self, text: str) -> Fraction: ...
        def _json_list(self, attrs: frozenset[str]) -> str: ...
        def _remaining_text(self, remaining: Mapping[str, Fraction]) -> str: ...
        def _blocked_text(self, blocked: Sequence[str]) -> str: ...
        def _totals_text(self, spent: Mapping[str, Fraction]) -> str: ...

    # ---- opening and verification ----------------------------------------------------------
    def _refuse(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(f"ledger {self.path} (user {self.user_id!r}) does not verify: {what}; "
                                    "refusing it (nothing was changed)")

    def _check_tables(self, db: "Tx", names: set[str], create: str) -> None:
        """Shared schema check: create the current format in an empty database, refuse others."""
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

    def _register(self) -> None:
        with self._tx() as db:
            self._ensure_schema(db)
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
                return
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
            self._full_verify(db)

    def _full_verify(self, db: "Tx", collect: list[AuditRecord] | None = None) -> None:
        """Replay and check the whole chain from the genesis (on open, ``log``, ``export_state``)."""
        self._v = Verified(0, self._genesis, "", {a: Fraction(0) for a in self._caps})
        self._last_row = None
        self._sync(db, collect)

    def _read_totals(self, db: "Tx") -> dict[str, Fraction]:
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
                out[a] = self._frac_cached(v)
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

    def _sync(self, db: "Tx", collect: list[AuditRecord] | None = None) -> None:
        """Verify what was appended since the last verified record, then head and totals (C5).

        Re-hashes the last verified record (an edit of it is detected), verifies each newer record (contiguous seq, hash
        chained from the last verified one, strict replay of its decision, running totals) and requires the stored chain
        head to be the tail and the stored spent budgets to equal the tail's running totals. Three statements: the
        header, the totals rows, and the log from the last verified record on."""
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
                    else {a: c - spent[a] for a, c in self._caps.items()}, self._totals_text(spent)]
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
            self._check_witness(db, seq, h)
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

    def _check_witness(self, db: "Tx", seq: int, h: str) -> None:
        """The chain (verified up to record ``seq`` with hash ``h``) holds the witness's mark:
        it is not behind it and has the acknowledged record at that position (else
        LedgerRollbackError naming the ledger and the witness; nothing is written)."""
        if self._w_err is not None:
            raise self._w_err
        mark = self._w_mark  # (read before the transaction began: see Tx; None in a plain read)
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
        """Verify one (hash-checked) record by re-deciding it: True iff its stored columns are byte-identical to what
        ``_decide_write`` writes for that charge from ``spent`` (then its decision, remaining and totals are exactly
        right; ``spent`` and ``fast`` = [B_a - L_a, totals text] are advanced). False changes nothing; the caller then
        runs the general replay, which names the error."""
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
                    or self._json_list(frozenset(attrs)) != attrs_t:
                return False
            remember(self._attrs_of, attrs_t, attrs, 1024)
        try:
            eps = self._frac_cached(eps_t)
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
            tot = self._totals_text(after)
        if tot != tot_t or blk_t != self._blocked_text(blocked) \
                or rem_t != self._remaining_text({a: left_after[a] for a in attrs}):
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

    def verify(self, anchor: ChainHead | tuple[int, str] | None = None) -> ChainHead:
        """Verify the whole chain now and return its head (C5 audit).

        With ``anchor`` (a head saved earlier, outside the database) also require that record ``anchor.seq`` still has
        that hash: a file rolled back to before it, or replaced by another consistent ledger, is refused.

        Parameters
        ----------
        anchor : ChainHead or (int, str), optional
            A head saved earlier (from :meth:`chain_head` or ``export_state()["chain_head"]``).

        Raises
        ------
        BudgetTypeError
            If ``anchor`` is not a ChainHead, None or an (int, str) pair.
        BudgetError
            If ``anchor`` belongs to another user or has a negative seq, the ledger is closed or the database fails.
        LedgerIntegrityError
            If the chain does not verify or does not contain the anchored head (a
            :class:`~dpmv_lib.core.errors.LedgerRollbackError` when it is behind its witness).
        """
        if isinstance(anchor, ChainHead) and anchor.user_id != self.user_id:
            raise BudgetError(f"anchor belongs to user {anchor.user_id!r}, not {self.user_id!r}")
        pair = (anchor.seq, anchor.hash) if isinstance(anchor, ChainHead) else (0, "") if anchor is None else anchor
        if not isinstance(pair, tuple) or len(pair) != 2 or isinstance(pair[0], bool) \
                or not isinstance(pair[0], int) or pair[0] < 0 or not isinstance(pair[1], str):
            typed = not isinstance(pair, tuple) or len(pair) == 2 and (
                isinstance(pair[0], bool) or not isinstance(pair[0], int) or not isinstance(pair[1], str))
            raise (BudgetTypeError if typed else BudgetError)(
                f"anchor must be a ChainHead or (seq, hash), got {anchor!r}")
        a_seq, a_hash = pair
        with self._tx(write=False, witness=True) as db:
            self._full_verify(db)
            head = ChainHead(self.user_id, self._v.seq, self._v.hash)
            if anchor is not None:
                got: str | None
                if a_seq == 0:
                    got = self._genesis
                else:
                    row = db.execute("SELECT hash FROM audit_log WHERE user_id = ? AND seq = ?",
                                     (self.user_id, a_seq)).fetchone()
                    got = row[0] if row else None
                if got != a_hash:
                    raise self._refuse(f"the chain does not contain the anchored head #{a_seq} "
                                       f"{str(a_hash)[:16]} (it ends at #{head.seq}): the file was rolled "
                                       "back or replaced")
        return head

    def chain_head(self) -> ChainHead:
        """The current (verified) chain head; export it to anchor the ledger externally.

        Raises
        ------
        LedgerIntegrityError
            If the records appended since the last verification do not verify.
        BudgetError
            If the ledger is closed or the database fails.
        """
        with self._tx(write=False) as db:
            self._sync(db)
            return ChainHead(self.user_id, self._v.seq, self._v.hash)

class Tx:
    """A ledger transaction, ``with ledger._tx() as db``: COMMIT on success, ROLLBACK on any error.

    Parameters
    ----------
    ledger : ChainVerify
        The ledger (a ChainLedger: its backend connection and lock).
    write : bool, optional
        A write transaction that holds the user's ledger exclusively (default), else a read snapshot.
    witness : bool, optional
        Check the rollback witness as it begins (C5; default: ``write``).
    """

    def __init__(self, ledger: ChainVerify, write: bool = True, witness: bool | None = None) -> None:
        self.ledger = ledger
        self.write = write
        self.witness = write if witness is None else witness  # check the rollback witness (C5 writes, verify)

    def __enter__(self) -> "Tx":
        led = self.ledger
        led._lock.acquire()
        try:
            # the rollback witness before the snapshot: it advances only after a commit, so the
            # mark read now is never newer than what this transaction sees. Checked by every
            # write transaction (each charge, open) and verify(); plain reads (spent(), a
            # group-commit waiter's catch-up and answer) skip it: a waiter acknowledges only
            # records it finds, and the next charge checks
            w = led._witness if self.witness else None
            led._w_err = None
            try:
                led._w_mark = w.read(led.user_id) if w is not None else None
            except WitnessTamperError as exc:   # raised where the witness is consulted: after the chain's
                led._w_mark, led._w_err = None, exc   # own checks, which name a wrong key or an edit first
            led._begin(self.write)
        except self.ledger._db_errors as exc:
            self.ledger._lock.release()
            raise BudgetError(f"cannot lock ledger {self.ledger.path}: {exc}") from None
        except BaseException:
            self.ledger._lock.release()
            raise
        return self

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one SQL statement (``?`` placeholders) in this transaction; returns the backend's cursor.

        Parameters
        ----------
        sql : str
        params : sequence, optional
            Its parameters.
        """
        return self.ledger._exec(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        """Run one SQL statement (``?`` placeholders) once per row of parameters in this transaction.

        Parameters
        ----------
        sql : str
        rows : iterable of sequence
            The parameters of each run.
        """
        return self.ledger._executemany(sql, rows)

    def executescript_safe(self, script: str) -> None:
        """Run a schema script statement by statement inside this transaction (no implicit COMMIT).

        Parameters
        ----------
        script : str
            Statements separated by ``;`` (none inside a statement).
        """
        for stmt in script.split(";"):
            if stmt.strip():
                self.ledger._exec(stmt)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        errors = self.ledger._db_errors
        try:
            if exc_type is None:
                try:
                    self.ledger._commit()
                except errors as e:
                    try:
                        self.ledger._rollback()
                    except errors:
                        pass
                    raise BudgetError(f"cannot commit to ledger {self.ledger.path}: {e}") from None
            else:
                try:
                    self.ledger._rollback()
                except errors:
                    pass
                if isinstance(exc, errors):
                    raise BudgetError(f"ledger {self.ledger.path} failed: {exc}") from None
        finally:
            self.ledger._lock.release()
