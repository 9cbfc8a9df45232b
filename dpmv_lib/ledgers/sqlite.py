"""Durable, concurrent per-attribute ledgers (C5 across crashes and processes).

The :class:`~dpmv_lib.core.ledger.Ledger` protocol is what MemView needs: ``caps``, ``spent()``,
``try_charge(attributes, eps)`` (the atomic C5 step: check L_a + eps <= B_a for every a, then charge
all of them) and ``charge_unchecked`` (ablations only). This module adds

* :class:`SqliteLedger` - one user's ledger in a SQLite file (WAL journal). Each ``try_charge`` runs
  in one ``BEGIN IMMEDIATE`` transaction (check every attribute, update all, append the audit
  record, COMMIT), so a charge is durable before MemView samples or returns the view and concurrent
  processes can never jointly overrun a cap. Values are stored exactly as rational text ("2/3"),
  never as floats.
* an operator-visible audit log (:class:`~dpmv_lib.ledgers.records.AuditRecord`): every
  prospective charge with its attributes, eps, admitted or blocked (and by which attributes), what
  remains, a timestamp and a sequence number. A blocked selection falls back to the generic view
  silently for the application (paper, C5) but is visible here. The log is hash-chained per user
  (each record commits to the previous hash and to the running totals; HMAC-SHA256 with an operator
  ``key``, see :mod:`dpmv_lib.ledgers.hashchain`) and the stored totals must equal its replay: on open and
  before every charge, else :class:`~dpmv_lib.core.errors.LedgerIntegrityError` and nothing is
  written.
* :func:`~dpmv_lib.ledgers.chain.export_state` /
  :func:`~dpmv_lib.ledgers.records.import_state` (JSON with caps, spent, policy fingerprint, log;
  fingerprint checked) and :func:`~dpmv_lib.ledgers.records.replay`, which recomputes the ledger
  from the log exactly and checks every recorded decision.
* :class:`LedgerStore` - per-user ledgers (:class:`InMemoryLedgerStore`,
  :class:`SqliteLedgerStore`).

What every backend shares - deciding, chaining and writing a charge, verifying the chain - is
:class:`~dpmv_lib.ledgers.chain.ChainLedger` (with its :class:`~dpmv_lib.ledgers.chain_verify.ChainVerifier`); this
module holds the SQLite backend, its group commit (:mod:`~dpmv_lib.ledgers.group_commit`) and the
stores.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import weakref
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

from ..core.rationals import Number
from . import _proc, group_commit
from ..core.errors import BudgetError, BudgetTypeError, PolicyTypeError
from ..core.ledger import InMemoryLedger, Ledger
from ..core.policy import Policy
from .chain_verify import SCHEMA
from .chain import ChainLedger, Tx


class SqliteLedger(ChainLedger):
    """One user's durable ledger in a SQLite file (WAL). Implements the Ledger protocol.

    ``SqliteLedger(path, user_id, caps, policy_fingerprint, key=None)`` creates the user's
    ledger at zero or reopens it. Reopening checks the stored fingerprint and caps against the
    given ones and verifies the whole hash-chained audit log (see ``dpmv_lib.ledgers.hashchain``): every
    record's hash, contiguous sequence numbers, every decision (strict replay), the running
    totals in each record, the chain head and that the stored spent budgets equal the replay.
    Before every charge (inside its ``BEGIN IMMEDIATE`` transaction) and every read of
    ``spent()`` it re-verifies the last verified record, verifies every record appended since
    (by other processes) and checks the head and stored totals against the tail, unless no other
    connection has committed to the file since this one last verified or committed (``PRAGMA
    data_version`` unchanged: the file holds exactly this connection's verified chain). Any mismatch
    raises :class:`~dpmv_lib.core.errors.LedgerIntegrityError` naming the ledger and the mismatch,
    and nothing is written. With ``key`` (>= 16 bytes) the chain is HMAC-SHA256 keyed, so edits
    cannot be re-signed without the key. Each ``try_charge`` (or ``try_charge_many``: all slots
    of one release) is committed and on disk before it returns, i.e. before MemView samples the
    view (C5). With ``synchronous="FULL"`` (the default) the ledger syncs the write-ahead log
    itself where the platform has ``fdatasync`` (Linux): SQLite commits without syncing
    (``PRAGMA synchronous=NORMAL``), the writer lock is released, and then ``fdatasync`` of the
    ``-wal`` file puts that commit and every earlier one on disk before anything is
    acknowledged (see ``_wal_sync``), so the next writer's transaction overlaps this fsync.
    Elsewhere SQLite syncs at COMMIT itself (``PRAGMA synchronous=FULL``). ``"EXTRA"`` always
    leaves syncing to SQLite; ``"NORMAL"`` does not sync commits at all (survives a process
    crash, not a power loss).

    Writers are serialised by an exclusive ``flock`` on the side file ``<path>.lock`` taken
    before ``BEGIN IMMEDIATE``: a waiting process blocks in the kernel and wakes as soon as the
    holder commits, instead of sleeping in SQLite's busy handler (``timeout`` remains only as
    the fallback against writers that do not take the side lock). Checked charges are
    group-committed (:mod:`dpmv_lib.ledgers.group_commit`): the lock holder commits the posted releases
    of all waiting processes with its own in one transaction and one fsync, each decided
    exactly as a separate ``try_charge_many``; a release is acknowledged only from an answer row
    committed in that same transaction.

    Parameters
    ----------
    path : str or os.PathLike
        The database file (``":memory:"`` or a ``file:`` URI: no side lock, group commit, witness).
    user_id : str
        The user whose ledger this is (one file holds many users).
    caps : Mapping of str to number
        attribute -> cap B_a > 0; must equal the stored caps when the ledger exists.
    policy_fingerprint : str
        :meth:`~dpmv_lib.core.policy.Policy.fingerprint` of the policy; must equal the stored one.
    key : bytes, optional
        The operator's HMAC key (>= 16 bytes, :func:`~dpmv_lib.ledgers.hashchain.key_from_env`); None: an unkeyed chain.
    timeout : float, optional
        SQLite's busy timeout in seconds (default 60).
    synchronous : {"FULL", "EXTRA", "NORMAL"}, optional
        Durability of each commit (default "FULL", see above).
    witness : bool, str, os.PathLike or Witness, optional
        The rollback witness: True (default) a :class:`~dpmv_lib.ledgers.witness.FileWitness`
        at ``<path>.witness``, a directory path, an object with ``read``/``advance``, or
        None/False for none.

    Raises
    ------
    BudgetTypeError
        If an argument has the wrong type (``path``, ``user_id``, ``policy_fingerprint``,
        ``key``, ``timeout``, ``synchronous``, ``witness``, the caps).
    BudgetError
        If an argument has a bad value (an empty ``user_id``, a cap <= 0, a short key, an
        unknown ``synchronous``), the database cannot be opened, or the stored ledger was
        created for another policy or other caps.
    LedgerIntegrityError
        If the stored chain, totals or key do not verify
        (:class:`~dpmv_lib.core.errors.LedgerRollbackError`: behind its witness;
        :class:`~dpmv_lib.core.errors.LedgerFormatError`: an older on-disk format).

    Examples
    --------
    >>> from fractions import Fraction
    >>> led = SqliteLedger(":memory:", "alice", {"debt": 2}, "fp")
    >>> led.try_charge(frozenset({"debt"}), Fraction(2, 3)), led.spent()
    (True, {'debt': Fraction(2, 3)})
    >>> led.close()
    """

    _db_errors = (sqlite3.Error,)

    def __init__(self, path: str | Path, user_id: str, caps: Mapping[str, Number],
                 policy_fingerprint: str, *, key: bytes | None = None, timeout: float = 60.0,
                 synchronous: str = "FULL", witness: Any = True) -> None:
        if synchronous not in ("FULL", "EXTRA", "NORMAL"):
            raise (BudgetError if isinstance(synchronous, str) else BudgetTypeError)(
                f"synchronous must be FULL, EXTRA or NORMAL, got {synchronous!r}")
        if not isinstance(path, (str, Path)):
            raise BudgetTypeError(f"path must be a file path, got {type(path).__name__}")
        try:
            timeout_s = float(timeout)
        except (TypeError, ValueError) as exc:
            raise (BudgetTypeError if isinstance(exc, TypeError) else BudgetError)(
                f"timeout must be a number of seconds, got {timeout!r}") from None
        super().__init__(str(path), user_id, caps, policy_fingerprint, key)
        self._timeout = timeout_s
        self._synchronous = synchronous
        # FULL by fdatasync of the WAL after the writer lock is released (see _wal_sync); decided
        # per connection in _open (also False for in-memory and URI databases)
        self._own_sync = False
        self._wal = ""
        self._walfd = -1  # opened by the first _wal_sync of this connection
        self._conn: sqlite3.Connection | None = None
        self._lockfd = -1
        self._locked = False
        self._preheld = False  # group commit: the writer lock is already held by this transaction
        self._gc: Any = None
        self._pid = -1
        self._fresh: tuple[int, Any] | None = None  # (data_version, the head verified at it)
        file_db = self.path != ":memory:" and not self.path.startswith("file:")
        self._set_witness(witness, self.path + ".witness" if file_db else None)
        self._start()

    # ---- connection ------------------------------------------------------------------------
    def _open(self) -> None:
        fd = -1
        if self.path != ":memory:" and not self.path.startswith("file:"):
            try:
                fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            except OSError as exc:
                raise BudgetError(f"cannot open the writer lock file {self.path}.lock: {exc}") from None
        conn = None
        try:
            if fd >= 0:
                # opened under the writer lock: switching a new file to WAL needs it to itself, and
                # SQLite answers a concurrent first open "database is locked" at once, without
                # waiting in its busy handler (4 processes opening new files together: 7 of 160
                # opens failed)
                fcntl.flock(fd, fcntl.LOCK_EX)
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None,
                                   check_same_thread=False, cached_statements=64)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() not in ("wal", "memory"):
                raise BudgetError(f"could not put ledger {self.path} into WAL mode (got {mode!r})")
            wal = os.path.realpath(self.path) + "-wal" if fd >= 0 else ""  # (SQLite resolves symlinks too)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # (a read opens the WAL file)
            own = self._synchronous == "FULL" and hasattr(os, "fdatasync") and os.path.isfile(wal)
            conn.execute(f"PRAGMA synchronous={'NORMAL' if own else self._synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if fd >= 0:
                os.close(fd)  # (drops the lock)
            if isinstance(exc, sqlite3.Error):
                raise BudgetError(f"cannot open ledger database {self.path}: {exc}") from None
            raise
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._conn, self._lockfd, self._pid = conn, fd, _proc.pid()
        if self._walfd >= 0:  # (a forked child's copy of its parent's descriptor)
            os.close(self._walfd)
        self._own_sync, self._wal, self._walfd = own, wal, -1
        self._fresh = None  # data_version is per connection
        if fd >= 0 and self._gc is None:
            self._gc = group_commit.GroupCommit(self.path, self.user_id, self._key)
            # also when the ledger is garbage-collected or the interpreter exits without close():
            # its request file and empty queue directories do not outlive the process
            self._gc_close = weakref.finalize(self, self._gc.close)

    def _begin(self, write: bool) -> None:
        conn = self._db()
        if write and self._lockfd >= 0:
            if not self._preheld:
                fcntl.flock(self._lockfd, fcntl.LOCK_EX)  # blocks in the kernel; woken at the holder's unlock
            try:
                conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                fcntl.flock(self._lockfd, fcntl.LOCK_UN)
                raise
            self._locked = True
        else:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def _unlock(self) -> None:
        if getattr(self, "_locked", False):
            self._locked = False
            fcntl.flock(self._lockfd, fcntl.LOCK_UN)

    def _commit(self) -> None:
        wrote = self._locked  # (a write transaction on a file: the only kind _wal_sync syncs for)
        try:
            self._conn.execute("COMMIT")  # type: ignore[union-attr]
            if wrote and self._gc is not None:
                self._gc.committed()  # (before the unlock: the next writer's hint comes after it)
        finally:
            self._unlock()
        if wrote:
            self._wal_sync()  # after the unlock: the next writer need not wait for this fsync

    def _wal_sync(self) -> None:
        """Put every transaction committed to this file so far on disk (C5: durable before
        acknowledged); a no-op unless this connection commits with ``synchronous=NORMAL`` on
        behalf of ``FULL`` (see the class docstring).

        Call only after the commit to be made durable (this process's own, or a group-commit
        answer it has read) has returned. Why this equals SQLite's FULL: with NORMAL a COMMIT
        writes the same WAL frames as with FULL, without the fdatasync that FULL issues after
        them; ``fdatasync`` of the ``-wal`` file (through a descriptor of this process: the
        sync covers the file's data whoever wrote it, and the file is never replaced while a
        connection is open) puts those frames and all earlier ones on disk, and the directory
        is synced once per connection (as SQLite does for a new WAL). Commits are
        appended to the WAL in commit order, so a commit that was seen by other connections
        but lost in a power cut takes every later commit with it, and none of them was
        acknowledged: whatever was decided on top of it is lost with it. Checkpoints sync the
        WAL before copying it into the database (SQLite, also with NORMAL)."""
        if not self._own_sync:
            return
        try:
            if self._walfd < 0:  # (reset by _open: a forked child opens its own)
                d = os.open(os.path.dirname(self._wal), os.O_RDONLY)
                try:
                    os.fsync(d)
                finally:
                    os.close(d)
                self._walfd = os.open(self._wal, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            os.fdatasync(self._walfd)
        except OSError as exc:
            self._fresh = None  # (the head this connection wrote was not adopted: verify it next time)
            raise BudgetError(f"ledger {self.path}: cannot sync its write-ahead log {self._wal}: {exc}; the "
                              "last charge is committed (counted) but was not acknowledged") from None

    def _durable(self) -> None:
        self._wal_sync()

    def _settled(self, read: Any, *args: Any) -> Any:
        """``read(*args)``, then on disk: a head or state handed out for anchoring or backup is
        never one that a power cut could still take back (see ``_wal_sync``)."""
        with self._lock:
            out = read(*args)
            self._wal_sync()
        return out

    def chain_head(self) -> Any:
        """The current (verified) chain head, on disk before it is returned; store it outside the
        database to anchor the ledger (:meth:`verify`).

        Returns
        -------
        ChainHead

        Raises
        ------
        LedgerIntegrityError
            If the chain does not verify (a LedgerRollbackError when it is behind its witness).
        BudgetError
            If the ledger is closed, the database fails or the write-ahead log cannot be synced.
        """
        return self._settled(super().chain_head)

    def verify(self, anchor: Any = None) -> Any:
        """Verify the whole chain now (and that it contains ``anchor``); the head returned is on
        disk.

        Parameters
        ----------
        anchor : ChainHead or (int, str), optional
            A head saved earlier.

        Returns
        -------
        ChainHead

        Raises
        ------
        BudgetTypeError
            If ``anchor`` has the wrong type.
        LedgerIntegrityError, BudgetError
            As :meth:`chain_head`.
        """
        return self._settled(super().verify, anchor)

    def export_state(self) -> dict[str, Any]:
        """The ledger's state (caps, spent, fingerprint, verified audit log, chain head), on disk
        before it is returned (see :func:`~dpmv_lib.ledgers.chain.export_state`).

        Returns
        -------
        dict

        Raises
        ------
        LedgerIntegrityError, BudgetError
            As :meth:`chain_head`.
        """
        return self._settled(super().export_state)

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")  # type: ignore[union-attr]
        finally:
            self._unlock()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, params)  # type: ignore[union-attr]

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        return self._conn.executemany(sql, rows)  # type: ignore[union-attr]

    def close(self) -> None:
        """Close the connection, the lock file and the witness (idempotent; also via ``with``)."""
        with self._lock:
            if self._pid == _proc.pid():
                if self._conn is not None:
                    self._conn.close()
                if self._lockfd >= 0:
                    os.close(self._lockfd)
                if self._walfd >= 0:
                    os.close(self._walfd)
                if self._gc is not None:
                    self._gc_close()  # (runs GroupCommit.close once; a no-op after that)
                self._close_witness()
            self._conn, self._lockfd, self._walfd = None, -1, -1

    def _ensure_schema(self, db: "Tx") -> None:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        self._verifier.check_tables(db, names, SCHEMA)
        if self._gc is not None and "dpmv_gc" not in names:
            db.execute(group_commit.ANSWER_TABLE)

    def _sync(self, db: "Tx", collect: list[Any] | None = None) -> None:
        """The verification before a charge or read (see ``ChainVerifier.sync``), skipped when no
        other connection has committed to the file since this one last verified or committed:
        ``PRAGMA data_version`` is unchanged exactly then (SQLite: it changes when another
        connection commits), so the file holds this connection's verified chain and nothing
        else. Any edit by another connection or process changes it, so it is still found before
        the next charge; an edit of the file's bytes behind SQLite's back is not (nor was it
        before: SQLite serves its cached pages while the WAL index is unchanged); the next open
        verifies the whole file."""
        if collect is not None:
            super()._sync(db, collect)
            return
        dv = db.execute("PRAGMA data_version").fetchone()[0]
        fresh, v = self._fresh, self._v
        if fresh is not None and fresh[0] == dv and fresh[1] is v:
            self._verifier.check_witness(db, v.seq, v.hash)  # (as verified: hold it to the witness)
            return
        self._fresh = None
        super()._sync(db)
        self._fresh = (dv, self._v)

    def _committed(self, new: Any, left: dict[str, Fraction]) -> None:
        fresh, before = self._fresh, self._v
        super()._committed(new, left)
        # this connection's own COMMIT leaves data_version as it was: when the transaction
        # started from the fresh state, the file now holds exactly the new verified head
        self._fresh = (fresh[0], self._v) if fresh is not None and fresh[1] is before else None

    def _charge(self, items: Sequence[tuple[frozenset[str], Fraction]], checked: bool
                ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        if checked and self._gc is not None:  # group commit (dpmv_lib.ledgers.group_commit)
            return group_commit.charge(self, items)
        return super()._charge(items, checked)

    def _records_of(self, origin: str, items: Sequence[tuple[frozenset[str], Fraction]], first: int
                    ) -> tuple[tuple[bool, ...], dict[str, Fraction]] | None:
        """The decisions of a group-committed request and the totals right after it, read from
        the verified chain: records ``first``.. (one per charge of ``items``, same attributes and
        eps, checked, origin ``origin``), verified in the same read snapshot. None when the
        chain does not hold exactly that (then the request was not committed)."""
        n = len(items)
        with self._tx(write=False) as db:
            self._sync(db)
            if first < 1 or first + n - 1 > self._v.seq:
                return None
            rows = db.execute("SELECT seq, attributes, epsilon, admitted, checked, origin, totals FROM audit_log "
                              "WHERE user_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                              (self.user_id, first, first + n)).fetchall()
        texts = self._texts
        if len(rows) != n or not all(r[5] == origin and r[4] == 1 and r[1] == texts.attributes(a) and r[2] == str(e)
                                     for r, (a, e) in zip(rows, items)):
            return None
        totals = json.loads(rows[-1][6])  # (verified: the running totals equal the replay)
        return tuple(bool(r[3]) for r in rows), {a: texts.fraction(v) for a, v in totals.items()}

    def integrity_check(self) -> str:
        """SQLite's PRAGMA integrity_check ("ok" when the file is sound; BudgetError when the ledger
        is closed)."""
        with self._lock:
            return "; ".join(r[0] for r in self._db().execute("PRAGMA integrity_check").fetchall())

    @staticmethod
    def users(path: str | Path) -> list[str]:
        """The user ids that have a ledger in the file.

        Parameters
        ----------
        path : str or os.PathLike
            The database file.

        Returns
        -------
        list of str

        Raises
        ------
        BudgetError
            If the file is not a dpmv ledger database.
        """
        conn = sqlite3.connect(str(path))
        try:
            return [r[0] for r in conn.execute("SELECT user_id FROM ledger_user ORDER BY user_id")]
        except sqlite3.Error as exc:
            raise BudgetError(f"{path} is not a dpmv ledger database: {exc}") from None
        finally:
            conn.close()

    def __repr__(self) -> str:
        return f"SqliteLedger({self.path!r}, user={self.user_id!r}, keyed={self.keyed})"


# ---- per-user ledger stores ----------------------------------------------------------------------
class LedgerStore(Protocol):
    """Hands out one ledger per user for a policy (the per-user deployment unit)."""

    def ledger(self, user_id: str, policy: Policy) -> Ledger:
        """The user's ledger for ``policy`` (created at zero on first use).

        Parameters
        ----------
        user_id : str
            The user.
        policy : Policy
            The public policy (caps and fingerprint).

        Returns
        -------
        Ledger
        """
        ...


class InMemoryLedgerStore:
    """Per-user InMemoryLedgers (tests, experiments); the policy fingerprint is checked per user."""

    def __init__(self) -> None:
        self._ledgers: dict[str, tuple[str, InMemoryLedger]] = {}
        self._lock = threading.Lock()

    def ledger(self, user_id: str, policy: Policy) -> InMemoryLedger:
        """The user's ledger for ``policy`` (created at zero on first use).

        Parameters
        ----------
        user_id : str
            The user (non-empty).
        policy : Policy
            The public policy.

        Returns
        -------
        InMemoryLedger

        Raises
        ------
        BudgetTypeError
            If ``user_id`` is not a string.
        PolicyTypeError
            If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
        BudgetError
            If ``user_id`` is empty or the user's ledger was created for another policy.
        """
        if not isinstance(user_id, str) or not user_id:
            raise (BudgetError if isinstance(user_id, str) else BudgetTypeError)(
                f"user_id must be a non-empty string, got {user_id!r}")
        if not isinstance(policy, Policy):
            raise PolicyTypeError(f"a ledger store needs a Policy, got {type(policy).__name__}")
        fp = policy.fingerprint()
        with self._lock:
            if user_id not in self._ledgers:
                self._ledgers[user_id] = (fp, InMemoryLedger.for_policy(policy))
            old_fp, led = self._ledgers[user_id]
            if old_fp != fp:
                raise BudgetError(f"ledger of user {user_id!r} was created for policy {old_fp} but is "
                                  f"requested with policy {fp}")
            return led

    def users(self) -> list[str]:
        """The users that have a ledger, sorted."""
        return sorted(self._ledgers)


class SqliteLedgerStore:
    """Per-user SqliteLedgers in one database file (rows keyed by user id).

    Parameters
    ----------
    path : str or os.PathLike
        The database file.
    **kwargs
        Passed to every :class:`SqliteLedger` (``key``, ``synchronous``, ``witness``, ...).

    Raises
    ------
    BudgetTypeError
        If ``path`` is not a str or path-like object.
    """

    def __init__(self, path: str | Path, **kwargs: Any) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise BudgetTypeError(f"path must be a file path, got {type(path).__name__}")
        self.path = Path(path)
        self._kwargs = kwargs

    def ledger(self, user_id: str, policy: Policy) -> SqliteLedger:
        """The user's :class:`SqliteLedger` for ``policy`` (see :meth:`SqliteLedger.for_policy`).

        Parameters
        ----------
        user_id : str
            The user.
        policy : Policy
            The public policy.

        Returns
        -------
        SqliteLedger

        Raises
        ------
        PolicyTypeError, BudgetTypeError, BudgetError, LedgerIntegrityError
            As :class:`SqliteLedger` and its ``for_policy``.
        """
        return SqliteLedger.for_policy(self.path, user_id, policy, **self._kwargs)

    def users(self) -> list[str]:
        """The users that have a ledger in the file ([] when there is no file; BudgetError when it
        is not a dpmv ledger database)."""
        return SqliteLedger.users(self.path) if self.path.exists() else []

    def __iter__(self) -> Iterator[str]:
        return iter(self.users())
