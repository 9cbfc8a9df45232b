"""The backend-independent, hash-chained durable ledger (:class:`ChainLedger`): it decides,
chains and writes every charge in one transaction, with the verification of
:mod:`dpmv_lib.ledgers.chain_verify`; backends (:mod:`dpmv_lib.ledgers.sqlite`,
:mod:`dpmv_lib.ledgers.postgres`) provide the connection and the locking.

Its audit log and state export/import (``log``, ``audit_log``, ``export_state``, ``import_state``)
come from :class:`~dpmv_lib.ledgers.records.LedgerStateIO`; :func:`export_state` here works for
any ledger, and :func:`parse_state`, :func:`import_state` and :class:`LedgerState` are
re-exported from :mod:`dpmv_lib.ledgers.records`.
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
from .records import STATE_FORMAT, STATE_VERSION, as_record, check_caps, LedgerStateIO, utc_now, check_storable
# the state export/import shared by every ledger lives in records (re-exported: import it from either)
from .records import LedgerState, import_state, parse_state  # noqa: F401
from .chain_verify import ChainVerify, LOG_COLUMNS, PLAIN_NAME, Tx, Verified
from .witness import FileWitness, Witness, WitnessMark


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


class ChainLedger(ChainVerify, LedgerStateIO):
    """Backend-independent core of a durable, hash-chained ledger (C5 across crashes and processes).

    Subclasses provide the connection, the transaction (``_begin``/``_commit``/``_rollback``,
    where a write transaction holds the user's ledger exclusively), the schema check and
    ``_exec``; SQL is written with ``?`` placeholders. Everything that decides, chains and
    verifies lives here, so every backend has the same integrity semantics.

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
        self._chain = hashchain.chain_kind(self._key)
        self.path = location
        self.user_id = user_id
        self.policy_fingerprint = policy_fingerprint
        self._lock = threading.RLock()
        self._genesis = ""
        self._v = Verified(0, "", "", {a: Fraction(0) for a in self._caps})
        self._fracs: dict[str, Fraction] = {}      # parsed rational text (hot path: no re-parsing)
        self._attr_json: dict[frozenset[str], str] = {}
        self._attrs_of: dict[str, tuple[str, ...]] = {}  # canonical attributes text -> sorted names
        self._blocked_seen: set[tuple[Any, ...]] = set()  # blocked records verified by _fast_step
        self._parsed: dict[tuple[str, ...], tuple[Any, ...]] = {}   # audit-record texts -> parsed values
        self._last_row: tuple[Any, ...] | None = None  # the verified tail record exactly as hashed
        self._rem_cache: tuple[str, dict[str, Fraction]] | None = None  # (head hash, B_a - L_a there)
        self._pending_tail: tuple[Any, ...] | None = None  # last record written, adopted after COMMIT
        self._pending_tot = ""
        self._tot_text: tuple[str, str] | None = None  # (head hash, canonical totals text there)
        self._blocked_memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _decide_write
        self._tails: dict[tuple[Any, ...], str] = {}  # record columns after the time -> their JSON text
        self._totals_rows: tuple[list[Any], dict[str, Fraction]] | None = None  # last ledger_entry read
        # attribute names whose JSON text is just '"' + name + '"' (hand-built JSON on the hot path)
        self._plain = all(PLAIN_NAME.fullmatch(a) for a in self._caps)
        self._sorted_caps = sorted(self._caps)
        self._n_requests = self._n_commits = self._n_batched = 0  # commit_stats()
        self._witness: Witness | None = None  # rollback witness (set by a backend before _start)
        self._w_ok: WitnessMark | None = None  # the last witness mark the chain was found to hold
        self._w_mark: WitnessMark | None = None  # the mark read as the current transaction began
        self._w_err: Exception | None = None  # the witness's tampering error, raised where it is consulted
        self._w_binds = False  # the witness binds its marks to the ledger's genesis

    def _start(self) -> None:
        self._open()
        try:
            self._register()
            if self._witness is not None and self._w_ok is None and self._v.seq:
                self._durable()  # no mark yet (a new witness, or one deleted): adopt the chain
                self._advance_witness()
        except BaseException:
            self.close()
            raise

    def _set_witness(self, witness: Any, default: str | None) -> None:
        """``witness``: True (a FileWitness at ``default``, none when that is None), a path, an
        object with ``read``/``advance`` (an external anchor), or None/False (no witness)."""
        if witness is True:
            witness = default
        if witness is None or witness is False:
            self._witness = None
        elif isinstance(witness, (str, Path)):
            self._witness = FileWitness(witness, key=self._key)  # (keyed: its slots carry the ledger's MAC)
        elif isinstance(witness, FileWitness) and witness.key is None and self._key is not None:
            self._witness = FileWitness(witness.path, sync=witness.sync, key=self._key)
        elif callable(getattr(witness, "read", None)) and callable(getattr(witness, "advance", None)):
            self._witness = witness
        else:
            raise BudgetTypeError(f"witness must be True, False, None, a directory path or an object with "
                                  f"read(user_id) and advance(user_id, seq, hash); got {witness!r}")
        self._w_binds = bool(getattr(self._witness, "binds_ledger", False))

    def _close_witness(self) -> None:
        close = getattr(self._witness, "close", None)
        if callable(close):
            close()

    def _durable(self) -> None:
        """Make every commit this connection has seen durable (a backend whose COMMIT is not yet
        on disk overrides it)."""

    def _advance_witness(self) -> None:
        """After a durable commit, before it is acknowledged: the witness learns the head."""
        if self._witness is not None:
            v = self._v
            if self._w_binds:  # (a FileWitness: the mark is bound to this ledger's genesis)
                self._witness.advance(self.user_id, v.seq, v.hash, genesis=self._genesis)  # type: ignore[call-arg]
            else:
                self._witness.advance(self.user_id, v.seq, v.hash)
            self._w_ok = WitnessMark(v.seq, v.hash)

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

    def _ensure_schema(self, db: "Tx") -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection and the witness (each backend's; idempotent, also via ``with``)."""
        raise NotImplementedError

    def _tx(self, write: bool = True, witness: bool | None = None) -> "Tx":
        return Tx(self, write, witness)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _frac_cached(self, text: str) -> Fraction:
        f = self._fracs.get(text)
        if f is None:
            f = remember(self._fracs, text, Fraction(text), 4096)
        return f

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

    def _json_list(self, attrs: frozenset[str]) -> str:
        s = self._attr_json.get(attrs)
        if s is None:
            s = remember(self._attr_json, attrs, json.dumps(sorted(attrs)), 1024)
        return s

    def _record(self, v: Verified, ts: str, attrs: Sequence[str] | frozenset[str], eps: Fraction, ok: bool,
                checked: bool, remaining: Mapping[str, Fraction], blocked: Sequence[str],
                spent: Mapping[str, Fraction]) -> tuple[Verified, tuple[Any, ...]]:
        """The next chained audit record after ``v`` (its insert parameters and the new head)."""
        seq = v.seq + 1
        rem, blk, tot = self._texts(remaining, blocked, spent)
        cols = (ts, self._json_list(frozenset(attrs)) if isinstance(attrs, frozenset) else json.dumps(list(attrs)),
                str(eps), int(ok), int(checked), rem, blk, tot)
        h = hashchain.record_hash(self._key, self.user_id, seq, v.hash, cols)
        return Verified(seq, h, v.hash, dict(spent)), (self.user_id, seq, *cols, "", h)

    def _texts(self, remaining: Mapping[str, Fraction], blocked: Sequence[str],
               spent: Mapping[str, Fraction]) -> tuple[str, str, str]:
        """The stored texts of a record's remaining, blocked and running totals."""
        return self._remaining_text(remaining), self._blocked_text(blocked), self._totals_text(spent)

    # the _plain forms are byte-identical to the json.dumps texts, without the encoder
    def _remaining_text(self, remaining: Mapping[str, Fraction]) -> str:
        if self._plain:
            return "{" + ", ".join(f'"{a}": "{x}"' for a, x in remaining.items()) + "}"
        return json.dumps({a: str(x) for a, x in remaining.items()})

    def _blocked_text(self, blocked: Sequence[str]) -> str:
        if not blocked:
            return "[]"
        if self._plain:
            return "[" + ", ".join(f'"{a}"' for a in blocked) + "]"
        return json.dumps(list(blocked))

    def _totals_text(self, spent: Mapping[str, Fraction]) -> str:
        if self._plain:
            return "{" + ",".join(f'"{a}":"{spent[a]}"' for a in self._sorted_caps) + "}"
        return hashchain.totals_text(spent)

    def _write(self, db: "Tx", rows: list[tuple[Any, ...]], new: Verified, changed: Iterable[str]) -> None:
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
            self._advance_witness()
            self._n_requests += 1
            self._n_commits += 1
        return oks, dict(new.totals)

    def _decide_write(self, db: "Tx", batches: Sequence[Sequence[tuple[frozenset[str], Fraction]]],
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
        cached = self._rem_cache
        if cached is not None and cached[0] == new.hash:
            left = dict(cached[1])
        else:
            left = {a: caps[a] - spent[a] for a in caps}
        ts = utc_now()
        key, uid = self._key, self.user_id
        seq, h, prev = new.seq, new.hash, new.prev
        tt = self._tot_text
        tot = tt[1] if tt is not None and tt[0] == h else self._totals_text(spent)
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
                    hit, tail, attrs_t = None, None, self._json_list(attrs)
                    blocked = sorted(a for a in attrs if eps > left[a]) if checked else []
                    ok = not blocked
                    if ok:
                        for a in attrs:
                            spent[a] += eps
                            left[a] -= eps
                        changed |= attrs
                        tot = self._totals_text(spent)
                    rem = self._remaining_text({a: left[a] for a in sorted(attrs)})
                    blk, eps_t = self._blocked_text(blocked), str(eps)
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
        if new is not self._v:
            self._v, self._last_row = new, self._pending_tail
            self._tot_text = (new.hash, self._pending_tot)
        self._rem_cache = (new.hash, left)


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
