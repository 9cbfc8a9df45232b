"""The backend-independent, hash-chained durable ledger (:class:`ChainLedger`): it decides, chains
and writes every charge in one transaction (:class:`Tx`), verifies through its
:class:`~dpmv_lib.ledgers.chain_verify.ChainVerifier`, and exports and imports its state;
backends (:mod:`dpmv_lib.ledgers.sqlite`, :mod:`dpmv_lib.ledgers.postgres`) provide the
connection and the locking. :func:`export_state` exports the state of any ledger.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core.rationals import Number
from . import hashchain, _proc
from ..core.memo import remember
from ..core.errors import BudgetError, BudgetTypeError, PolicyTypeError
from ..core.ledger import Ledger, check_charge_args
from ..core.policy import Policy
from .records import (STATE_FORMAT, STATE_VERSION, AuditRecord, RecordTexts, as_record, check_caps,
                      check_storable, format_totals, parse_state, replay_step, utc_now)
from .chain_verify import LOG_COLUMNS, ChainHead, ChainVerifier, Verified, anchor_position
from .witness import FileWitness


def _charge_args(caps: Mapping[str, Fraction], attributes: Any, epsilon: Any) -> tuple[frozenset[str], Fraction]:
    """:func:`~dpmv_lib.core.ledger.check_charge_args`, and an eps whose exact text can be stored."""
    attrs, eps = check_charge_args(caps, attributes, epsilon)
    return attrs, check_storable(eps, "epsilon")


@dataclass(frozen=True)
class CommitStats:
    """How this ledger object (in this process) got its charges committed (C5 is per release).

    ``requests``: charge requests acknowledged (one per ``try_charge``/``try_charge_many``,
    i.e. one per release from MemView); ``commits``: write transactions that this object
    committed with charges in them (as a group-commit leader: the whole batch counts once);
    ``batched``: requests of OTHER processes that those commits carried. Summed over all
    processes of one ledger file, ``requests == commits + batched`` and
    ``requests / commits`` is the number of releases per real transaction (one fsync each).

    Parameters
    ----------
    requests, commits, batched : int
        The three counts above.
    """

    requests: int
    commits: int
    batched: int

    @property
    def per_commit(self) -> float | None:
        """Releases acknowledged per write transaction of this object (None before any commit)."""
        return self.requests / self.commits if self.commits else None


class ChainLedger:
    """Backend-independent core of a durable, hash-chained ledger (C5 across crashes and processes).

    Subclasses provide the connection, the transaction (``_begin``/``_commit``/``_rollback``,
    where a write transaction holds the user's ledger exclusively), the schema check and
    ``_exec``; SQL is written with ``?`` placeholders. Deciding, chaining and writing live here
    and verification in the composed :class:`~dpmv_lib.ledgers.chain_verify.ChainVerifier`, so
    every backend has the same integrity semantics.

    Parameters
    ----------
    location : str
        Where the ledger lives (a SQLite file, a PostgreSQL connection string); kept as ``path``.
    user_id, policy_fingerprint : str
        The user, and the fingerprint of the policy the ledger belongs to (both non-empty).
    caps : Mapping of str to number
        The caps B_a (see :func:`~dpmv_lib.ledgers.records.check_caps`).
    key : bytes or None
        The operator's HMAC key (at least 16 bytes), or None for an unkeyed (sha256) chain.

    Raises
    ------
    BudgetTypeError, BudgetError
        If ``user_id`` or ``policy_fingerprint`` is not a non-empty string, the caps are invalid or the
        key is not bytes of at least 16 bytes (BudgetTypeError for a wrong type).
    """

    _db_errors: tuple[type[BaseException], ...] = ()
    _conn: Any   # the backend's open connection (None when closed); set by the backend
    _pid: int    # the process that opened it

    def __init__(self, location: str, user_id: str, caps: Mapping[str, Number],
                 policy_fingerprint: str, key: bytes | None) -> None:
        if not isinstance(user_id, str) or not user_id:
            raise (BudgetError if isinstance(user_id, str) else BudgetTypeError)(
                f"user_id must be a non-empty string, got {user_id!r}")
        if not isinstance(policy_fingerprint, str) or not policy_fingerprint:
            raise (BudgetError if isinstance(policy_fingerprint, str) else BudgetTypeError)(
                f"policy_fingerprint must be a non-empty string, got {policy_fingerprint!r}")
        self._caps = check_caps(caps)
        self._key = hashchain.check_key(key)
        self.path = location
        self.user_id = user_id
        self.policy_fingerprint = policy_fingerprint
        self._lock = threading.RLock()
        self._texts = RecordTexts(self._caps)
        self._verifier = ChainVerifier(location, user_id, policy_fingerprint, self._caps, self._key, self._texts)
        self._pending_tail: tuple[Any, ...] | None = None  # last record written, adopted after COMMIT
        self._pending_tot = ""
        self._blocked_memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _decide_write
        self._n_requests = self._n_commits = self._n_batched = 0  # commit_stats()

    @property
    def _v(self) -> Verified:
        """The verified head (the verifier's)."""
        return self._verifier.head

    @property
    def _witness(self) -> Any:
        """The rollback witness (the verifier's; None: none)."""
        return self._verifier.witness

    def _start(self) -> None:
        self._open()
        try:
            self._register()
            if self._verifier.unmarked():
                self._durable()  # no mark yet (a new witness, or one deleted): adopt the chain
                self._verifier.advance_witness()
        except BaseException:
            self.close()
            raise

    def _register(self) -> None:
        """Open the user's ledger: the schema, then its header is created or checked and its whole
        chain verified."""
        with self._tx() as db:
            self._ensure_schema(db)
            if not self._verifier.register(db):
                self._full_verify(db)

    def _full_verify(self, db: Tx, collect: list[AuditRecord] | None = None) -> None:
        """Replay and check the whole chain from the genesis (on open, ``verify``, ``log``, ``export_state``)."""
        self._verifier.restart()
        self._sync(db, collect)

    def _sync(self, db: Tx, collect: list[AuditRecord] | None = None) -> None:
        """Verify what was appended since the last verification (see
        :meth:`~dpmv_lib.ledgers.chain_verify.ChainVerifier.sync`; a backend may skip it when
        nothing changed)."""
        self._verifier.sync(db, collect)

    def _set_witness(self, witness: Any, default: str | None) -> None:
        """``witness``: True (a FileWitness at ``default``, none when that is None), a path, an
        object with ``read``/``advance`` (an external anchor), or None/False (no witness)."""
        if witness is True:
            witness = default
        if witness is None or witness is False:
            w = None
        elif isinstance(witness, (str, Path)):
            w = FileWitness(witness, key=self._key)  # (keyed: its slots carry the ledger's MAC)
        elif isinstance(witness, FileWitness) and witness.key is None and self._key is not None:
            w = FileWitness(witness.path, sync=witness.sync, key=self._key)
        elif callable(getattr(witness, "read", None)) and callable(getattr(witness, "advance", None)):
            w = witness
        else:
            raise BudgetTypeError(f"witness must be True, False, None, a directory path or an object with "
                                  f"read(user_id) and advance(user_id, seq, hash); got {witness!r}")
        self._verifier.set_witness(w)

    def _close_witness(self) -> None:
        close = getattr(self._verifier.witness, "close", None)
        if callable(close):
            close()

    def _durable(self) -> None:
        """Make every commit this connection has seen durable (a backend whose COMMIT is not yet
        on disk overrides it)."""

    @classmethod
    def for_policy(cls, path: Any, user_id: str, policy: Policy, **kwargs: Any) -> Any:
        """The user's ledger for ``policy`` (its caps and fingerprint).

        Parameters
        ----------
        path : str or Path
            Where the ledger lives (a file for SQLite, a connection string for PostgreSQL).
        user_id : str
            The user.
        policy : Policy
            The public policy (caps B_a and fingerprint).
        **kwargs
            Passed to the constructor (``key``, ``witness``, ...).

        Returns
        -------
        SqliteLedger or PostgresLedger

        Raises
        ------
        PolicyTypeError
            If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
        BudgetTypeError, BudgetError, LedgerIntegrityError
            As the constructor.
        """
        if not isinstance(policy, Policy):
            raise PolicyTypeError(f"{cls.__name__}.for_policy needs a Policy, got {type(policy).__name__}")
        return cls(path, user_id, policy.caps, policy.fingerprint(), **kwargs)

    @property
    def keyed(self) -> bool:
        """True when the audit chain is HMAC-keyed with an operator secret."""
        return self._key is not None

    def _db(self) -> Any:
        """The open connection; reopened in a forked child (never reuse a connection or lock
        across fork())."""
        if self._conn is None:
            raise BudgetError(f"ledger {self.path} for user {self.user_id!r} is closed")
        if self._pid != _proc.pid():
            self._open()
        return self._conn

    # ---- backend hooks -------------------------------------------------------------------------
    def _open(self) -> None:
        raise NotImplementedError

    def _begin(self, write: bool) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _rollback(self) -> None:
        raise NotImplementedError

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        raise NotImplementedError

    def _ensure_schema(self, db: Tx) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection and the witness (each backend's; idempotent, also via ``with``)."""
        raise NotImplementedError

    def _tx(self, write: bool = True, witness: bool | None = None) -> Tx:
        return Tx(self, write, witness)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the Ledger protocol ------------------------------------------------------------------
    @property
    def caps(self) -> dict[str, Fraction]:
        """attribute -> cap B_a (a copy)."""
        return dict(self._caps)

    def spent(self) -> dict[str, Fraction]:
        """Current L_a for every attribute (one consistent, verified snapshot).

        Returns
        -------
        dict of str to Fraction

        Raises
        ------
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        with self._tx(write=False) as db:
            self._sync(db)
            return dict(self._v.totals)

    def remaining(self) -> dict[str, Fraction]:
        """B_a - L_a for every attribute (from :meth:`spent`).

        Returns
        -------
        dict of str to Fraction

        Raises
        ------
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        s = self.spent()
        return {a: self._caps[a] - s[a] for a in self._caps}

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool:
        """C5: in one write transaction verify the ledger, admit iff L_a + eps <= B_a for every
        requested a, then charge all of them; the decision is appended to the audit chain and
        committed before return.

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma.
        epsilon : Fraction or number
            The selection's eps >= 0.

        Returns
        -------
        bool
            True when admitted (charged and durable); False when blocked (nothing charged).

        Raises
        ------
        BudgetTypeError, UnknownAttributeError
            For a bad charge (see :func:`~dpmv_lib.core.ledger.check_charge_args`); nothing
            is charged.
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        attrs, eps = _charge_args(self._caps, attributes, epsilon)
        return self._charge([(attrs, eps)], checked=True)[0][0]

    def try_charge_many(self, charges: Sequence[tuple[frozenset[str], Fraction]]
                        ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        """C5 for several selections (e.g. all slots of one release) in ONE write transaction:
        each is decided in order exactly as by successive ``try_charge`` calls (each sees the
        charges admitted before it) and gets its own audit record; all are committed together.
        Returns the decisions and L_a right after the commit. Arguments are all validated first:
        a bad one raises and nothing is charged.

        Parameters
        ----------
        charges : sequence of (frozenset of str, Fraction)
            (charge set, eps) per selection, in order.

        Returns
        -------
        (tuple of bool, dict of str to Fraction)
            Each selection's decision and L_a after the commit.

        Raises
        ------
        BudgetTypeError
            If ``charges`` is not a sequence of tuples.
        BudgetError
            If a charge is not a pair.
        BudgetTypeError, UnknownAttributeError
            For a bad charge (see :func:`~dpmv_lib.core.ledger.check_charge_args`); nothing
            is charged.
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        if type(charges) is not list and (isinstance(charges, (str, bytes)) or not isinstance(charges, Iterable)):
            raise BudgetTypeError(f"charges must be a list of (attributes, epsilon) pairs, got {charges!r}")
        items = []
        caps = self._caps
        for c in charges:
            if not isinstance(c, tuple) or len(c) != 2:
                raise (BudgetError if isinstance(c, tuple) else BudgetTypeError)(
                    f"each charge must be an (attributes, epsilon) pair, got {c!r}")
            items.append(_charge_args(caps, *c))
        if not items:
            return (), self.spent()
        return self._charge(items, checked=True)

    def commit_stats(self) -> CommitStats:
        """Counts of the charge requests and write transactions of this object.

        Returns
        -------
        CommitStats
        """
        return CommitStats(self._n_requests, self._n_commits, self._n_batched)

    def charge_unchecked(self, attributes: frozenset[str], epsilon: Fraction) -> None:
        """Charge without the prospective check. Only the NoCap ablation (violates C5) uses this.

        Parameters
        ----------
        attributes : frozenset of str
            The charge set Gamma.
        epsilon : Fraction or number
            The selection's eps >= 0.

        Raises
        ------
        BudgetTypeError, UnknownAttributeError
            For a bad charge (see :func:`~dpmv_lib.core.ledger.check_charge_args`); nothing
            is charged.
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        attrs, eps = _charge_args(self._caps, attributes, epsilon)
        self._charge([(attrs, eps)], checked=False)

    # ---- verification and the chain head ------------------------------------------------------
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
        a_seq, a_hash = anchor_position(anchor, self.user_id)
        with self._tx(write=False, witness=True) as db:
            self._full_verify(db)
            head = ChainHead(self.user_id, self._v.seq, self._v.hash)
            if anchor is not None:
                self._verifier.check_anchor(db, a_seq, a_hash)
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

    # ---- the audit log and the state -------------------------------------------------------------
    @property
    def log(self) -> list[AuditRecord]:
        """The operator-visible audit log of this user, in sequence order (fully verified).

        Raises :class:`~dpmv_lib.core.errors.LedgerIntegrityError` if the chain does not verify."""
        return self.audit_log()

    def audit_log(self, since_seq: int = 0) -> list[AuditRecord]:
        """Audit records with ``seq > since_seq`` in sequence order (the whole chain is verified).

        Parameters
        ----------
        since_seq : int, optional
            Return only records after this sequence number (default: all).

        Raises
        ------
        LedgerIntegrityError
            If the chain or the stored totals do not verify (a LedgerRollbackError when the
            chain is behind its witness); nothing is written.
        BudgetError
            If the ledger is closed or the database fails.
        """
        with self._tx(write=False) as db:
            out: list[AuditRecord] = []
            self._full_verify(db, out)
        return [r for r in out if r.seq > since_seq]

    def export_state(self) -> dict[str, Any]:
        """JSON-able state: caps, spent, policy fingerprint, the full audit log (one verified
        snapshot) and ``chain_head`` (seq and hash of this ledger's chain, for anchoring).

        Returns
        -------
        dict
            A ``dpmv-ledger-state`` v1 document (see :func:`parse_state`).

        Raises
        ------
        LedgerIntegrityError, BudgetError
            As :meth:`audit_log`.
        """
        with self._tx(write=False) as db:
            log: list[AuditRecord] = []
            self._full_verify(db, log)
            v = self._v
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "user_id": self.user_id,
                "policy_fingerprint": self.policy_fingerprint,
                "caps": {a: str(b) for a, b in sorted(self._caps.items())},
                "spent": {a: str(x) for a, x in sorted(v.totals.items())},
                "log": [r.to_dict() for r in log],
                "chain_head": {"seq": v.seq, "hash": v.hash}}

    def import_state(self, state: Mapping[str, Any] | str) -> None:
        """Restore an exported state into this (fresh) ledger.

        Checks the policy fingerprint, the caps, the user and that the log replays to the stated
        spent budget, then re-chains the records under this ledger's key. Refuses a ledger that
        already has charges or log entries: importing must never lower a spent budget.

        Parameters
        ----------
        state : Mapping or str
            An exported state (from :meth:`export_state` or
            :func:`export_state`), or its JSON text.

        Raises
        ------
        BudgetTypeError, UnknownAttributeError, BudgetError
            If the state does not validate (see :func:`parse_state`).
        BudgetError
            If its caps or user differ from this ledger's, or this ledger already has charges.
        LedgerIntegrityError
            If this ledger's chain does not verify; nothing is written.
        """
        st = parse_state(state, self.policy_fingerprint)
        if st.caps != self._caps:
            raise BudgetError(f"imported caps {format_totals(st.caps)} differ from this ledger's caps "
                              f"{format_totals(self._caps)}")
        if st.user_id and st.user_id != self.user_id:
            raise BudgetError(f"state belongs to user {st.user_id!r}, not {self.user_id!r}")
        with self._tx() as db:
            self._sync(db)
            n = self._v.seq
            if n or any(x != 0 for x in self._v.totals.values()):
                raise BudgetError(f"ledger of user {self.user_id!r} already has {n} audit records or a "
                                  "non-zero spent budget; import only into a fresh ledger")
            new, spent = self._v, dict(self._v.totals)
            rows = []
            for r in st.log:
                replay_step(spent, r, self._caps)
                new, row = self._record(new, r.timestamp, r.attributes, r.epsilon, r.admitted, r.checked,
                                        dict(r.remaining), r.blocked, spent)
                rows.append(row)
            if new.totals != st.spent:  # parse_state replayed the same log: cannot differ
                raise BudgetError(f"imported log replays to {format_totals(new.totals)}, not {format_totals(st.spent)}")
            self._write(db, rows, new, self._caps)
        self._verifier.adopt(new, rows[-1][1:] if rows else None)
        self._verifier.advance_witness()

    # ---- deciding, chaining and writing ------------------------------------------------------
    def _record(self, v: Verified, ts: str, attrs: Sequence[str] | frozenset[str], eps: Fraction, ok: bool,
                checked: bool, remaining: Mapping[str, Fraction], blocked: Sequence[str],
                spent: Mapping[str, Fraction]) -> tuple[Verified, tuple[Any, ...]]:
        """The next chained audit record after ``v`` (its insert parameters and the new head)."""
        seq = v.seq + 1
        texts = self._texts
        cols = (ts, texts.attributes(frozenset(attrs)) if isinstance(attrs, frozenset) else json.dumps(list(attrs)),
                str(eps), int(ok), int(checked), texts.remaining(remaining), texts.blocked(blocked),
                texts.totals(spent))
        h = hashchain.record_hash(self._key, self.user_id, seq, v.hash, cols)
        return Verified(seq, h, v.hash, dict(spent)), (self.user_id, seq, *cols, "", h)

    def _write(self, db: Tx, rows: list[tuple[Any, ...]], new: Verified, changed: Iterable[str]) -> None:
        """Append the records, update the changed totals and the chain head (same transaction)."""
        db.executemany(f"INSERT INTO audit_log (user_id, {LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       rows)
        upd = [(str(new.totals[a]), self.user_id, a) for a in sorted(changed)]
        if upd:
            db.executemany("UPDATE ledger_entry SET spent = ? WHERE user_id = ? AND attribute = ?", upd)
        db.execute("UPDATE ledger_user SET head_seq = ?, head_hash = ? WHERE user_id = ?",
                   (new.seq, new.hash, self.user_id))

    def _charge(self, items: Sequence[tuple[frozenset[str], Fraction]], checked: bool
                ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        with self._lock:  # (re-entrant: _tx takes it too) adopt the head before another thread charges
            with self._tx() as db:
                self._sync(db)
                (oks,), new, left = self._decide_write(db, [items], checked)
            self._committed(new, left)
            self._verifier.advance_witness()
            self._n_requests += 1
            self._n_commits += 1
        return oks, dict(new.totals)

    def _decide_write(self, db: Tx, batches: Sequence[Sequence[tuple[frozenset[str], Fraction]]],
                      checked: bool, origins: Sequence[str] | None = None
                      ) -> tuple[list[tuple[bool, ...]], Verified, dict[str, Fraction]]:
        """Decide every charge of every batch in order, each exactly as a separate ``try_charge``
        (C5: admit iff eps <= B_a - L_a for every requested a, seeing all charges admitted
        before it), chain one audit record per charge and write them all (inside ``db``, after
        ``_sync``). ``origins[i]`` (group commit) names the request of batch i in its records.
        Returns each batch's decisions, the new verified head and B_a - L_a."""
        caps = self._caps
        new = self._v
        spent = dict(new.totals)
        # B_a - L_a of the verified state (reused while nobody else appended); the C5 check
        # L_a + eps <= B_a is then the single exact comparison eps <= B_a - L_a
        left = self._verifier.known_left()
        if left is None:
            left = {a: caps[a] - spent[a] for a in caps}
        ts = utc_now()
        key, uid = self._key, self.user_id
        seq, h, prev = new.seq, new.hash, new.prev
        texts = self._texts
        tot = self._verifier.known_totals_text()
        if tot is None:
            tot = texts.totals(spent)
        # (attrs, id(eps), totals text) -> that blocked record's eps and texts: keyed by the eps
        # object (MemView passes the same one for a slot) without Fraction.__eq__/__hash__
        memo = self._blocked_memo
        rows, out = [], []
        changed: set[str] = set()
        for b, items in enumerate(batches):
            origin = origins[b] if origins is not None else ""
            oks = []
            for attrs, eps in items:
                mkey = (attrs, id(eps), tot)
                hit = memo.get(mkey) if checked else None
                if hit is not None and hit[0] is eps:  # blocked before from these very totals:
                    ok = False                         # the same decision and texts
                    _, attrs_t, rem, blk, eps_t, tail = hit
                else:
                    hit, tail, attrs_t = None, None, texts.attributes(attrs)
                    blocked = sorted(a for a in attrs if eps > left[a]) if checked else []
                    ok = not blocked
                    if ok:
                        for a in attrs:
                            spent[a] += eps
                            left[a] -= eps
                        changed |= attrs
                        tot = texts.totals(spent)
                    rem = texts.remaining({a: left[a] for a in sorted(attrs)})
                    blk, eps_t = texts.blocked(blocked), str(eps)
                seq += 1
                cols = (ts, attrs_t, eps_t, int(ok), int(checked), rem, blk, tot)
                if hit is None and not ok and checked:
                    tail = hashchain.columns_text(cols[1:])  # (all but the time: the same next time)
                    remember(memo, mkey, (eps, attrs_t, rem, blk, eps_t, tail), 256)
                prev, h = h, hashchain.record_hash(key, uid, seq, h, cols, tail, origin)
                rows.append((uid, seq, *cols, origin, h))
                oks.append(ok)
            out.append(tuple(oks))
        if rows:
            new = Verified(seq, h, prev, spent)
            self._write(db, rows, new, changed)
            self._pending_tail = rows[-1][1:]
            self._pending_tot = tot
        return out, new, left

    def _committed(self, new: Verified, left: dict[str, Fraction]) -> None:
        """Adopt the head written by ``_decide_write`` (call only after COMMIT)."""
        self._verifier.adopt(new, self._pending_tail, self._pending_tot, left)


class Tx:
    """A ledger transaction, ``with ledger._tx() as db``: COMMIT on success, ROLLBACK on any error.

    Parameters
    ----------
    ledger : ChainLedger
        The ledger (its backend connection, lock and verifier).
    write : bool, optional
        A write transaction that holds the user's ledger exclusively (default), else a read snapshot.
    witness : bool, optional
        Check the rollback witness as it begins (C5; default: ``write``).
    """

    def __init__(self, ledger: ChainLedger, write: bool = True, witness: bool | None = None) -> None:
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
            led._verifier.read_mark(self.witness)
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


# ---- export / import ---------------------------------------------------------------------------
def export_state(ledger: Ledger, policy_fingerprint: str, user_id: str = "") -> dict[str, Any]:
    """JSON-able budget state of any ledger with ``caps``, ``spent()`` and a ``log``.

    Parameters
    ----------
    ledger : Ledger
        An :class:`~dpmv_lib.core.ledger.InMemoryLedger` or a durable ledger (whose own
        ``export_state`` is used; it carries its own fingerprint and user).
    policy_fingerprint : str
        The fingerprint of the ledger's policy (:meth:`~dpmv_lib.core.policy.Policy.fingerprint`).
    user_id : str, optional
        The user, recorded in the state.

    Returns
    -------
    dict
        A ``dpmv-ledger-state`` v1 document: format, version, user_id, policy_fingerprint,
        caps, spent (exact rational strings) and the audit log.

    Raises
    ------
    BudgetTypeError
        If ``ledger`` has no audit log (``log``).
    LedgerIntegrityError
        If a durable ledger's chain does not verify.

    Examples
    --------
    >>> from fractions import Fraction
    >>> from dpmv_lib.core.ledger import InMemoryLedger
    >>> led = InMemoryLedger({"debt": 2})
    >>> led.try_charge(frozenset({"debt"}), Fraction(2, 3))
    True
    >>> export_state(led, "fp")["spent"]
    {'debt': '2/3'}
    """
    if isinstance(ledger, ChainLedger):
        return ledger.export_state()
    log = getattr(ledger, "log", None)
    if log is None:
        raise BudgetTypeError(f"{type(ledger).__name__} has no audit log to export")
    records = [as_record(r, i) for i, r in enumerate(log, 1)]
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "user_id": user_id,
            "policy_fingerprint": policy_fingerprint,
            "caps": {a: str(b) for a, b in sorted(ledger.caps.items())},
            "spent": {a: str(v) for a, v in sorted(ledger.spent().items())},
            "log": [r.to_dict() for r in records]}
