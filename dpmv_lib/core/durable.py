"""Durable, concurrent per-attribute ledgers (C5 across crashes and processes).

The :class:`~dpmv_lib.core.ledger.Ledger` protocol is what MemView needs: ``caps``, ``spent()``,
``try_charge(attributes, eps)`` (the atomic C5 step: check L_a + eps <= B_a for every a, then
charge all of them) and ``charge_unchecked`` (ablations only). This module adds

* :class:`SqliteLedger` - one user's ledger in a SQLite file (WAL journal). Each ``try_charge``
  runs in one ``BEGIN IMMEDIATE`` transaction (check every attribute, update all, append the
  audit record, COMMIT), so a charge is durable before MemView samples or returns the view and
  concurrent processes can never jointly overrun a cap. Values are stored exactly as rational
  text ("2/3"), never as floats.
* an operator-visible audit log (:class:`AuditRecord`): every prospective charge with its
  attributes, eps, admitted or blocked (and by which attributes), what remains, a timestamp and
  a sequence number. A blocked selection falls back to the generic view silently for the
  application (paper, C5) but is visible here. The log is hash-chained per user (each record
  commits to the previous hash and to the running totals; HMAC-SHA256 with an operator ``key``,
  see :mod:`dpmv_lib.core._chain`) and the stored totals must equal its replay: on open and before
  every charge, else :class:`~dpmv_lib.core.errors.LedgerIntegrityError` and nothing is written.
* :func:`export_state` / :func:`import_state` (JSON with caps, spent, policy fingerprint, log;
  fingerprint checked) and :func:`replay`, which recomputes the ledger from the log exactly and
  checks every recorded decision.
* :class:`LedgerStore` - per-user ledgers (:class:`InMemoryLedgerStore`, :class:`SqliteLedgerStore`).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import threading
from collections.abc import Mapping as _MappingABC
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

from ._exact import Number, to_fraction
from . import _chain, group_commit
from ._chain import key_from_env  # noqa: F401  (re-exported: the documented way to read the key)
from .errors import BudgetError, LedgerFormatError, LedgerIntegrityError, UnknownAttributeError
from .ledger import ChargeRecord, InMemoryLedger, Ledger, check_charge_args
from .policy import Policy

STATE_FORMAT = "dpmv-ledger-state"
STATE_VERSION = 1
_SCHEMA_VERSION = "2"  # 2: hash-chained audit log (1: unchained, refused)


# ---- audit records ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditRecord:
    """One prospective charge as the operator sees it (C5 audit trail).

    ``remaining`` is B_a - L_a after the decision for every requested attribute; ``blocked``
    lists the attributes whose check L_a + eps <= B_a failed (empty when admitted);
    ``checked`` is False only for ``charge_unchecked`` (the NoCap ablation)."""

    seq: int
    user_id: str
    timestamp: str
    attributes: tuple[str, ...]
    epsilon: Fraction
    admitted: bool
    checked: bool = True
    remaining: tuple[tuple[str, Fraction], ...] = ()
    blocked: tuple[str, ...] = ()

    def message(self) -> str:
        """A one-line operator message: what was requested and what remains."""
        rem = ", ".join(f"{a}={v}" for a, v in self.remaining) or "-"
        attrs = ", ".join(self.attributes) or "(none)"
        if self.admitted:
            how = "charged" if self.checked else "charged WITHOUT cap check"
            return f"#{self.seq} {how} eps={self.epsilon} to {{{attrs}}}; remaining {rem}"
        return (f"#{self.seq} BLOCKED (generic fallback): requested eps={self.epsilon} on {{{attrs}}}; "
                f"cap would be exceeded for {{{', '.join(self.blocked)}}}; remaining {rem}")

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "user_id": self.user_id, "timestamp": self.timestamp,
                "attributes": list(self.attributes), "epsilon": str(self.epsilon),
                "admitted": self.admitted, "checked": self.checked,
                "remaining": {a: str(v) for a, v in self.remaining}, "blocked": list(self.blocked)}

    @classmethod
    def from_dict(cls, d: Any) -> "AuditRecord":
        if not isinstance(d, _MappingABC):
            raise BudgetError(f"an audit record must be a JSON object, got {type(d).__name__}")
        try:
            attrs = d["attributes"]
            rem = d.get("remaining", {})
            blocked = d.get("blocked", [])
            if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
                raise BudgetError(f"audit record attributes must be a list of names, got {attrs!r}")
            if not isinstance(rem, _MappingABC) or not isinstance(blocked, list):
                raise BudgetError("audit record 'remaining' must be an object and 'blocked' a list")
            for key in ("admitted", "checked"):
                if not isinstance(d.get(key, True), bool):
                    raise BudgetError(f"audit record {key!r} must be true/false, got {d.get(key)!r}")
            seq = d.get("seq", 0)
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise BudgetError(f"audit record seq must be an integer, got {seq!r}")
            return cls(seq=seq, user_id=str(d.get("user_id", "")), timestamp=str(d.get("timestamp", "")),
                       attributes=tuple(sorted(attrs)),
                       epsilon=to_fraction(d["epsilon"], "audit record epsilon", nonnegative=True,
                                           error=BudgetError),
                       admitted=d["admitted"], checked=d.get("checked", True),
                       remaining=tuple(sorted((str(a), to_fraction(v, f"remaining budget of {a!r}",
                                                                   error=BudgetError))
                                              for a, v in rem.items())),
                       blocked=tuple(sorted(str(b) for b in blocked)))
        except KeyError as exc:
            raise BudgetError(f"audit record is missing the key {exc.args[0]!r}") from None

    @classmethod
    def from_charge_record(cls, rec: ChargeRecord, seq: int, user_id: str = "") -> "AuditRecord":
        """Lift an :class:`~dpmv_lib.core.ledger.InMemoryLedger` log entry (no timestamp, no ``blocked``)."""
        blocked = () if rec.admitted else tuple(a for a, v in rec.remaining if v < rec.epsilon)
        return cls(seq, user_id, "", tuple(sorted(rec.attributes)), rec.epsilon, rec.admitted, True,
                   tuple(rec.remaining), blocked)


def _as_record(r: Any, i: int) -> AuditRecord:
    if isinstance(r, AuditRecord):
        return r
    if isinstance(r, ChargeRecord):
        return AuditRecord.from_charge_record(r, i)
    return AuditRecord.from_dict(r)


def _check_caps(caps: Any) -> dict[str, Fraction]:
    if not isinstance(caps, _MappingABC) or not caps:
        raise BudgetError(f"caps must be a non-empty mapping attribute -> cap, got {caps!r}")
    out = {}
    for a, b in caps.items():
        if not isinstance(a, str) or not a:
            raise BudgetError(f"attribute names must be non-empty strings, got {a!r}")
        out[a] = to_fraction(b, f"cap of {a!r}", positive=True, error=BudgetError)
    return out



def replay(log: Sequence[AuditRecord | ChargeRecord | Mapping[str, Any]], caps: Mapping[str, Number],
           *, strict: bool = True) -> dict[str, Fraction]:
    """Recompute every L_a from an audit log, starting at zero (C5 audit).

    With ``strict`` every recorded decision is re-checked: an admitted checked charge must fit
    under every cap, a blocked one must not, and the recorded ``remaining`` must equal
    B_a - L_a at that point. Any disagreement raises BudgetError naming the entry."""
    caps_f = _check_caps(caps)
    if isinstance(log, (str, bytes)) or not isinstance(log, Iterable):
        raise BudgetError(f"an audit log must be a list of records, got {type(log).__name__}")
    spent = {a: Fraction(0) for a in caps_f}
    for i, raw in enumerate(log, 1):
        _replay_step(spent, _as_record(raw, i), caps_f, strict)
    return spent


def _replay_step(spent: dict[str, Fraction], r: AuditRecord, caps_f: Mapping[str, Fraction],
                 strict: bool = True) -> None:
    """Apply one audit record to ``spent`` in place (C5 re-check of its decision when strict)."""
    for a in r.attributes:
        if a not in caps_f:
            raise UnknownAttributeError(f"audit record #{r.seq} names attribute {a!r}; the caps "
                                        f"cover {sorted(caps_f)}")
    fits = all(spent[a] + r.epsilon <= caps_f[a] for a in r.attributes)
    if strict and r.admitted and r.checked and not fits:
        raise BudgetError(f"audit record #{r.seq} admits eps={r.epsilon} on {list(r.attributes)} "
                          f"but that overruns a cap (spent {_fmt(spent)}, caps {_fmt(caps_f)})")
    if strict and not r.admitted and fits:
        raise BudgetError(f"audit record #{r.seq} blocks eps={r.epsilon} on {list(r.attributes)} "
                          f"although it fits (spent {_fmt(spent)}, caps {_fmt(caps_f)})")
    if r.admitted:
        for a in r.attributes:
            spent[a] += r.epsilon
    if strict:
        for a, v in r.remaining:
            if a not in caps_f or caps_f[a] - spent[a] != v:
                raise BudgetError(f"audit record #{r.seq} says {a!r} has {v} remaining; replay "
                                  f"gives {caps_f.get(a, Fraction(0)) - spent.get(a, Fraction(0))}")


def replay_ledger(log: Sequence[Any], caps: Mapping[str, Number], *, strict: bool = True) -> InMemoryLedger:
    """An InMemoryLedger in the state the log leads to (its ``log`` holds the replayed records)."""
    spent = replay(log, caps, strict=strict)
    out = InMemoryLedger(caps, spent)
    out.log = [ChargeRecord(frozenset(r.attributes), r.epsilon, r.admitted, r.remaining)
               for r in (_as_record(x, i) for i, x in enumerate(log, 1))]
    return out


def _fmt(d: Mapping[str, Fraction]) -> str:
    return "{" + ", ".join(f"{a}: {v}" for a, v in sorted(d.items())) + "}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# ---- export / import ---------------------------------------------------------------------------
def export_state(ledger: Ledger, policy_fingerprint: str, user_id: str = "") -> dict[str, Any]:
    """JSON-able budget state of any ledger with ``caps``, ``spent()`` and a ``log``."""
    if isinstance(ledger, _ChainLedger):
        return ledger.export_state()
    log = getattr(ledger, "log", None)
    if log is None:
        raise BudgetError(f"{type(ledger).__name__} has no audit log to export")
    records = [_as_record(r, i) for i, r in enumerate(log, 1)]
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "user_id": user_id,
            "policy_fingerprint": policy_fingerprint,
            "caps": {a: str(b) for a, b in sorted(ledger.caps.items())},
            "spent": {a: str(v) for a, v in sorted(ledger.spent().items())},
            "log": [r.to_dict() for r in records]}


@dataclass(frozen=True)
class LedgerState:
    """A validated exported budget state (caps, spent, fingerprint and audit log)."""

    user_id: str
    policy_fingerprint: str
    caps: dict[str, Fraction]
    spent: dict[str, Fraction]
    log: tuple[AuditRecord, ...]


def parse_state(state: Mapping[str, Any] | str, policy_fingerprint: str | None = None) -> LedgerState:
    """Validate an exported state: format, fingerprint (if given), exact values and that a
    strict :func:`replay` of its log reproduces its ``spent`` exactly."""
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except json.JSONDecodeError as exc:
            raise BudgetError(f"ledger state is not valid JSON: {exc}") from None
    if not isinstance(state, _MappingABC):
        raise BudgetError(f"ledger state must be a JSON object, got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
        raise BudgetError(f"not a {STATE_FORMAT} v{STATE_VERSION} document "
                          f"(format={state.get('format')!r}, version={state.get('version')!r})")
    for key in ("policy_fingerprint", "caps", "spent", "log"):
        if key not in state:
            raise BudgetError(f"ledger state is missing the key {key!r}")
    fp = state["policy_fingerprint"]
    if not isinstance(fp, str):
        raise BudgetError(f"policy_fingerprint must be a string, got {fp!r}")
    if policy_fingerprint is not None and fp != policy_fingerprint:
        raise BudgetError(f"ledger state belongs to policy {fp} but this ledger uses policy "
                          f"{policy_fingerprint}; refusing to import")
    caps = _check_caps(state["caps"])
    spent_raw = state["spent"]
    if not isinstance(spent_raw, _MappingABC) or set(spent_raw) != set(caps):
        raise BudgetError(f"ledger state 'spent' must cover exactly the capped attributes {sorted(caps)}")
    spent = {a: to_fraction(v, f"spent budget of {a!r}", nonnegative=True, error=BudgetError)
             for a, v in spent_raw.items()}
    for a in caps:
        if spent[a] > caps[a]:
            raise BudgetError(f"ledger state has {a!r} spent {spent[a]} above its cap {caps[a]}")
    if not isinstance(state["log"], list):
        raise BudgetError("ledger state 'log' must be a list")
    log = tuple(_as_record(r, i) for i, r in enumerate(state["log"], 1))
    replayed = replay(log, caps)
    if replayed != spent:
        raise BudgetError(f"ledger state is inconsistent: its log replays to {_fmt(replayed)} but it "
                          f"says spent {_fmt(spent)}")
    return LedgerState(str(state.get("user_id", "")), fp, caps, spent, log)


def import_state(state: Mapping[str, Any] | str, policy_fingerprint: str) -> InMemoryLedger:
    """An InMemoryLedger restored from an exported state (fingerprint and replay checked)."""
    st = parse_state(state, policy_fingerprint)
    out = InMemoryLedger(st.caps, st.spent)
    out.log = [ChargeRecord(frozenset(r.attributes), r.epsilon, r.admitted, r.remaining) for r in st.log]
    return out


# ---- SQLite backend ----------------------------------------------------------------------------
_TABLES = ("dpmv_meta", "ledger_user", "ledger_entry", "audit_log")
_SCHEMA = """
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
    PRIMARY KEY (user_id, seq));
"""
_LOG_COLUMNS = "seq, " + ", ".join(_chain.RECORD_COLUMNS) + ", hash"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\- ]+")


def _frac(text: Any, what: str) -> Fraction:
    try:
        return Fraction(str(text))
    except (ValueError, ZeroDivisionError):
        raise BudgetError(f"corrupt ledger value for {what}: {text!r}") from None


@dataclass(frozen=True)
class ChainHead:
    """The verified head of a user's audit chain: record ``seq`` (0 = genesis) has ``hash``.

    Store it outside the database (C5 audit anchor) and pass it to ``SqliteLedger.verify`` later:
    a file rolled back to before that record, or replaced, no longer verifies."""

    user_id: str
    seq: int
    hash: str


@dataclass(frozen=True)
class _Verified:
    seq: int                      # highest verified record (0: only the genesis)
    hash: str                     # its hash
    prev: str                     # hash of record seq-1 ("" at the genesis)
    totals: dict[str, Fraction]   # running L_a after it


class _ChainLedger:
    """Backend-independent core of a durable, hash-chained ledger (C5 across crashes and processes).

    Subclasses provide the connection, the transaction (``_begin``/``_commit``/``_rollback``,
    where a write transaction holds the user's ledger exclusively), the schema check and
    ``_exec``; SQL is written with ``?`` placeholders. Everything that decides, chains and
    verifies lives here, so every backend has the same integrity semantics."""

    _db_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, location: str, user_id: str, caps: Mapping[str, Number],
                 policy_fingerprint: str, key: bytes | None) -> None:
        if not isinstance(user_id, str) or not user_id:
            raise BudgetError(f"user_id must be a non-empty string, got {user_id!r}")
        if not isinstance(policy_fingerprint, str) or not policy_fingerprint:
            raise BudgetError(f"policy_fingerprint must be a non-empty string, got {policy_fingerprint!r}")
        self._caps = _check_caps(caps)
        self._key = _chain.check_key(key)
        self._chain = _chain.chain_kind(self._key)
        self.path = location
        self.user_id = user_id
        self.policy_fingerprint = policy_fingerprint
        self._lock = threading.RLock()
        self._genesis = ""
        self._v = _Verified(0, "", "", {a: Fraction(0) for a in self._caps})
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
        self._blocked_memo: dict[tuple[Any, ...], tuple[str, str, str]] = {}
        self._totals_rows: tuple[list[Any], dict[str, Fraction]] | None = None  # last ledger_entry read
        # attribute names whose JSON text is just '"' + name + '"' (hand-built JSON on the hot path)
        self._plain = all(_PLAIN_NAME.fullmatch(a) for a in self._caps)
        self._sorted_caps = sorted(self._caps)

    def _start(self) -> None:
        self._open()
        try:
            self._register()
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_policy(cls, path: Any, user_id: str, policy: Policy, **kwargs: Any) -> Any:
        """The user's ledger for ``policy`` (its caps and fingerprint)."""
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
        if self._pid != os.getpid():
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

    def _ensure_schema(self, db: "_Tx") -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _tx(self, write: bool = True) -> "_Tx":
        return _Tx(self, write)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _frac_cached(self, text: str) -> Fraction:
        f = self._fracs.get(text)
        if f is None:
            f = Fraction(text)
            if len(self._fracs) > 4096:
                self._fracs.clear()
            self._fracs[text] = f
        return f

    # ---- opening and verification ----------------------------------------------------------
    def _refuse(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(f"ledger {self.path} (user {self.user_id!r}) does not verify: {what}; "
                                    "refusing it (nothing was changed)")

    def _check_tables(self, db: "_Tx", names: set[str], create: str) -> None:
        """Shared schema check: create the current format in an empty database, refuse others."""
        ours = sorted(names & set(_TABLES))
        if not ours:  # a new (or foreign) database: create the current format
            db.executescript_safe(create)
            db.execute("INSERT INTO dpmv_meta (key, value) VALUES ('schema_version', ?)", (_SCHEMA_VERSION,))
            return
        version = None
        if "dpmv_meta" in names:
            row = db.execute("SELECT value FROM dpmv_meta WHERE key = 'schema_version'").fetchone()
            version = row[0] if row else None
        if version != _SCHEMA_VERSION:
            old = " (the old format without a hash-chained audit log)" if version == "1" else ""
            raise LedgerFormatError(
                f"ledger database {self.path} has format version {version!r}{old}; this dpmv reads only "
                f"version {_SCHEMA_VERSION!r}. Export each user with the dpmv that wrote it "
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
                n_e = db.execute("SELECT COUNT(*) FROM ledger_entry WHERE user_id = ?", (self.user_id,)).fetchone()[0]
                n_l = db.execute("SELECT COUNT(*) FROM audit_log WHERE user_id = ?", (self.user_id,)).fetchone()[0]
                if n_e or n_l:
                    raise self._refuse(f"its ledger_user row (header and chain head) is missing but "
                                       f"{n_e} totals rows and {n_l} audit records exist")
                created = _now()
                genesis = _chain.genesis_hash(self._key, self.user_id, self.policy_fingerprint, created,
                                              self._chain, self._caps)
                db.execute("INSERT INTO ledger_user (user_id, fingerprint, created, chain, genesis, head_seq, "
                           "head_hash) VALUES (?, ?, ?, ?, ?, 0, ?)",
                           (self.user_id, self.policy_fingerprint, created, self._chain, genesis, genesis))
                db.executemany("INSERT INTO ledger_entry (user_id, attribute, cap, spent) VALUES (?, ?, ?, '0')",
                               [(self.user_id, a, str(b)) for a, b in sorted(self._caps.items())])
                self._genesis = genesis
                self._v = _Verified(0, genesis, "", {a: Fraction(0) for a in self._caps})
                return
            fingerprint, created, chain, genesis = row
            if fingerprint != self.policy_fingerprint:
                raise BudgetError(f"ledger of user {self.user_id!r} in {self.path} was created for policy "
                                  f"{fingerprint} but is opened with policy {self.policy_fingerprint}")
            if chain != self._chain:
                if chain == _chain.CHAIN_KEYED:
                    raise self._refuse("its audit chain is HMAC-keyed but no key was given")
                if chain == _chain.CHAIN_UNKEYED:
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
                raise BudgetError(f"ledger of user {self.user_id!r} has caps {_fmt(stored)} but is opened "
                                  f"with caps {_fmt(self._caps)}")
            expect = _chain.genesis_hash(self._key, self.user_id, fingerprint, str(created), chain, self._caps)
            if genesis != expect:
                raise self._refuse("its genesis hash does not match its header "
                                   + ("(wrong key, or user/fingerprint/created/caps edited)" if self._key
                                      else "(user/fingerprint/created/caps edited)"))
            self._genesis = genesis
            self._full_verify(db)

    def _full_verify(self, db: "_Tx", collect: list[AuditRecord] | None = None) -> None:
        """Replay and check the whole chain from the genesis (on open, ``log``, ``export_state``)."""
        self._v = _Verified(0, self._genesis, "", {a: Fraction(0) for a in self._caps})
        self._last_row = None
        self._sync(db, collect)

    def _read_totals(self, db: "_Tx") -> dict[str, Fraction]:
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
        seq, ts, attrs, eps, adm, chk, rem, blk, tot, _h = row
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
                if len(self._parsed) > 4096:
                    self._parsed.clear()
                self._parsed[key] = parsed
            if adm not in (0, 1) or chk not in (0, 1):
                raise ValueError
        except (ValueError, TypeError, ZeroDivisionError, RecursionError):
            raise self._refuse(f"audit record #{seq} has a malformed column") from None
        a_t, e, remaining, b_t, totals = parsed
        totals = dict(totals)
        if e < 0:
            raise self._refuse(f"audit record #{seq} has a negative eps {eps}")
        return (AuditRecord(seq, self.user_id, ts, a_t, e, bool(adm), bool(chk), remaining, b_t), totals)

    def _sync(self, db: "_Tx", collect: list[AuditRecord] | None = None) -> None:
        """Verify what was appended since the last verified record, then head and totals (C5).

        Re-hashes the last verified record (an edit of it is detected), verifies each newer
        record (contiguous seq, hash chained from the last verified one, strict replay of its
        decision, running totals) and requires the stored chain head to be the tail and the
        stored spent budgets to equal the tail's running totals. Three statements: the header,
        the totals rows, and the log from the last verified record on."""
        v, uid, key = self._v, self.user_id, self._key
        head = db.execute("SELECT head_seq, head_hash, genesis FROM ledger_user WHERE user_id = ?",
                          (uid,)).fetchone()
        if head is None:
            raise self._refuse("its ledger_user row (header and chain head) was deleted")
        head_seq, head_hash, genesis = head
        if genesis != self._genesis:
            raise self._refuse("its genesis hash changed since it was verified")
        stored = self._read_totals(db)
        rows = db.execute(f"SELECT {_LOG_COLUMNS} FROM audit_log WHERE user_id = ? AND seq >= ? ORDER BY seq",
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
                _replay_step(spent, rec, self._caps)
            except (BudgetError, UnknownAttributeError) as exc:
                raise self._refuse(f"replay fails: {exc}") from None
            if totals != spent:
                raise self._refuse(f"audit record #{seq} stores running totals {_fmt(totals)} but replay "
                                   f"gives {_fmt(spent)}")
            if collect is not None:
                collect.append(rec)
            prev, h = h, computed
        if seq == 0 and head_seq != 0:
            raise self._refuse(f"the audit log is empty but the chain head says #{head_seq} (log deleted)")
        if head_seq != seq or head_hash != h:
            raise self._refuse(f"the stored chain head is #{head_seq} {str(head_hash)[:16]} but the audit log "
                               f"ends at #{seq} {h[:16]} (records deleted from or added to its end)")
        if stored != spent:
            diff = [f"{a}: stored {stored[a]}, log replays to {spent[a]}" for a in sorted(spent)
                    if stored[a] != spent[a]]
            raise self._refuse("the stored spent budgets do not equal the replay of the audit log ("
                               + "; ".join(diff) + f"; tail record #{seq})")
        if rows:
            self._v = _Verified(seq, h, prev, spent)
            self._last_row = tuple(rows[-1])
            if fast is not None:
                self._rem_cache = (h, fast[0])
                self._tot_text = (h, fast[1])

    def _fast_step(self, row: Sequence[Any], spent: dict[str, Fraction], fast: list[Any]) -> bool:
        """Verify one (hash-checked) record by re-deciding it: True iff its stored columns are
        byte-identical to what ``_decide_write`` writes for that charge from ``spent`` (then its
        decision, remaining and totals are exactly right; ``spent`` and ``fast`` = [B_a - L_a,
        totals text] are advanced). False changes nothing; the caller then runs the general
        replay, which names the error."""
        _seq, _ts, attrs_t, eps_t, adm, chk, rem_t, blk_t, tot_t, _h = row
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
            if len(self._attrs_of) > 1024:
                self._attrs_of.clear()
            self._attrs_of[attrs_t] = attrs
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
        seq, cols = row[0], tuple(row[1:-1])
        for name, typ, val in zip(_chain.RECORD_COLUMNS, _chain.COLUMN_TYPES, cols):
            if type(val) is not typ:
                raise self._refuse(f"column {name} of audit record #{seq} is {type(val).__name__}, "
                                   f"expected {typ.__name__}")
        return _chain.record_hash(self._key, self.user_id, seq, prev, cols)

    def verify(self, anchor: ChainHead | tuple[int, str] | None = None) -> ChainHead:
        """Verify the whole chain now and return its head (C5 audit).

        With ``anchor`` (a head saved earlier, outside the database) also require that record
        ``anchor.seq`` still has that hash: a file rolled back to before it, or replaced by
        another consistent ledger, is refused."""
        if isinstance(anchor, ChainHead) and anchor.user_id != self.user_id:
            raise BudgetError(f"anchor belongs to user {anchor.user_id!r}, not {self.user_id!r}")
        pair = (anchor.seq, anchor.hash) if isinstance(anchor, ChainHead) else (0, "") if anchor is None else anchor
        if not isinstance(pair, tuple) or len(pair) != 2 or isinstance(pair[0], bool) \
                or not isinstance(pair[0], int) or pair[0] < 0 or not isinstance(pair[1], str):
            raise BudgetError(f"anchor must be a ChainHead or (seq, hash), got {anchor!r}")
        a_seq, a_hash = pair
        with self._tx(write=False) as db:
            self._full_verify(db)
            head = ChainHead(self.user_id, self._v.seq, self._v.hash)
            if anchor is not None:
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
        """The current (verified) chain head; export it to anchor the ledger externally."""
        with self._tx(write=False) as db:
            self._sync(db)
            return ChainHead(self.user_id, self._v.seq, self._v.hash)

    # ---- the Ledger protocol ------------------------------------------------------------------
    @property
    def caps(self) -> dict[str, Fraction]:
        return dict(self._caps)

    def spent(self) -> dict[str, Fraction]:
        """Current L_a for every attribute (one consistent, verified snapshot)."""
        with self._tx(write=False) as db:
            self._sync(db)
            return dict(self._v.totals)

    def remaining(self) -> dict[str, Fraction]:
        s = self.spent()
        return {a: self._caps[a] - s[a] for a in self._caps}

    def try_charge(self, attributes: frozenset[str], epsilon: Fraction) -> bool:
        """C5: in one write transaction verify the ledger, admit iff L_a + eps <= B_a for every
        requested a, then charge all of them; the decision is appended to the audit chain and
        committed before return."""
        attrs, eps = check_charge_args(self._caps, attributes, epsilon)
        return self._charge([(attrs, eps)], checked=True)[0][0]

    def try_charge_many(self, charges: Sequence[tuple[frozenset[str], Fraction]]
                        ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        """C5 for several selections (e.g. all slots of one release) in ONE write transaction:
        each is decided in order exactly as by successive ``try_charge`` calls (each sees the
        charges admitted before it) and gets its own audit record; all are committed together.
        Returns the decisions and L_a right after the commit. Arguments are all validated first:
        a bad one raises and nothing is charged."""
        if isinstance(charges, (str, bytes)) or not isinstance(charges, Iterable):
            raise BudgetError(f"charges must be a list of (attributes, epsilon) pairs, got {charges!r}")
        items = []
        caps = self._caps
        for c in charges:
            if not isinstance(c, tuple) or len(c) != 2:
                raise BudgetError(f"each charge must be an (attributes, epsilon) pair, got {c!r}")
            items.append(check_charge_args(caps, *c))
        if not items:
            return (), self.spent()
        return self._charge(items, checked=True)

    def charge_unchecked(self, attributes: frozenset[str], epsilon: Fraction) -> None:
        """Charge without the prospective check. Only the NoCap ablation (violates C5) uses this."""
        attrs, eps = check_charge_args(self._caps, attributes, epsilon)
        self._charge([(attrs, eps)], checked=False)

    def _json_list(self, attrs: frozenset[str]) -> str:
        s = self._attr_json.get(attrs)
        if s is None:
            s = json.dumps(sorted(attrs))
            if len(self._attr_json) > 1024:
                self._attr_json.clear()
            self._attr_json[attrs] = s
        return s

    def _record(self, v: _Verified, ts: str, attrs: Sequence[str] | frozenset[str], eps: Fraction, ok: bool,
                checked: bool, remaining: Mapping[str, Fraction], blocked: Sequence[str],
                spent: Mapping[str, Fraction]) -> tuple[_Verified, tuple[Any, ...]]:
        """The next chained audit record after ``v`` (its insert parameters and the new head)."""
        seq = v.seq + 1
        rem, blk, tot = self._texts(remaining, blocked, spent)
        cols = (ts, self._json_list(frozenset(attrs)) if isinstance(attrs, frozenset) else json.dumps(list(attrs)),
                str(eps), int(ok), int(checked), rem, blk, tot)
        h = _chain.record_hash(self._key, self.user_id, seq, v.hash, cols)
        return _Verified(seq, h, v.hash, dict(spent)), (self.user_id, seq, *cols, h)

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
        return _chain.totals_text(spent)

    def _write(self, db: "_Tx", rows: list[tuple[Any, ...]], new: _Verified, changed: Iterable[str]) -> None:
        """Append the records, update the changed totals and the chain head (same transaction)."""
        db.executemany(f"INSERT INTO audit_log (user_id, {_LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       rows)
        upd = [(str(new.totals[a]), self.user_id, a) for a in sorted(changed)]
        if upd:
            db.executemany("UPDATE ledger_entry SET spent = ? WHERE user_id = ? AND attribute = ?", upd)
        db.execute("UPDATE ledger_user SET head_seq = ?, head_hash = ? WHERE user_id = ?",
                   (new.seq, new.hash, self.user_id))

    def _charge(self, items: Sequence[tuple[frozenset[str], Fraction]], checked: bool
                ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        with self._tx() as db:
            self._sync(db)
            (oks,), new, left = self._decide_write(db, [items], checked)
        self._committed(new, left)
        return oks, dict(new.totals)

    def _decide_write(self, db: "_Tx", batches: Sequence[Sequence[tuple[frozenset[str], Fraction]]],
                      checked: bool) -> tuple[list[tuple[bool, ...]], _Verified, dict[str, Fraction]]:
        """Decide every charge of every batch in order, each exactly as a separate ``try_charge``
        (C5: admit iff eps <= B_a - L_a for every requested a, seeing all charges admitted
        before it), chain one audit record per charge and write them all (inside ``db``, after
        ``_sync``). Returns each batch's decisions, the new verified head and B_a - L_a."""
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
        ts = _now()
        key, uid = self._key, self.user_id
        seq, h, prev = new.seq, new.hash, new.prev
        tt = self._tot_text
        tot = tt[1] if tt is not None and tt[0] == h else self._totals_text(spent)
        memo = self._blocked_memo  # (attrs, eps, totals text) -> texts of that blocked record
        rows, out, changed = [], [], set()
        for items in batches:
            oks = []
            for attrs, eps in items:
                mkey = (attrs, eps.numerator, eps.denominator, tot)  # ints: no Fraction __eq__/__hash__
                hit = memo.get(mkey) if checked else None
                if hit is not None:  # blocked before from these very totals: same decision and texts
                    ok = False
                    rem, blk, eps_t = hit
                else:
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
                    if not ok and checked:
                        if len(memo) > 256:
                            memo.clear()
                        memo[mkey] = (rem, blk, eps_t)
                seq += 1
                cols = (ts, self._json_list(attrs), eps_t, int(ok), int(checked), rem, blk, tot)
                prev, h = h, _chain.record_hash(key, uid, seq, h, cols)
                rows.append((uid, seq, *cols, h))
                oks.append(ok)
            out.append(tuple(oks))
        if rows:
            new = _Verified(seq, h, prev, spent)
            self._write(db, rows, new, changed)
            self._pending_tail = rows[-1][1:]
            self._pending_tot = tot
        return out, new, left

    def _committed(self, new: _Verified, left: dict[str, Fraction]) -> None:
        """Adopt the head written by ``_decide_write`` (call only after COMMIT)."""
        if new is not self._v:
            self._v, self._last_row = new, self._pending_tail
            self._tot_text = (new.hash, self._pending_tot)
        self._rem_cache = (new.hash, left)

    # ---- audit log, export / import -----------------------------------------------------------
    @property
    def log(self) -> list[AuditRecord]:
        """The operator-visible audit log of this user, in sequence order (fully verified)."""
        return self.audit_log()

    def audit_log(self, since_seq: int = 0) -> list[AuditRecord]:
        """Audit records with ``seq > since_seq`` in sequence order (the whole chain is verified)."""
        with self._tx(write=False) as db:
            out: list[AuditRecord] = []
            self._full_verify(db, out)
        return [r for r in out if r.seq > since_seq]

    def export_state(self) -> dict[str, Any]:
        """JSON-able state: caps, spent, policy fingerprint, the full audit log (one verified
        snapshot) and ``chain_head`` (seq and hash of this ledger's chain, for anchoring)."""
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
        already has charges or log entries: importing must never lower a spent budget."""
        st = parse_state(state, self.policy_fingerprint)
        if st.caps != self._caps:
            raise BudgetError(f"imported caps {_fmt(st.caps)} differ from this ledger's caps {_fmt(self._caps)}")
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
                _replay_step(spent, r, self._caps)
                new, row = self._record(new, r.timestamp, r.attributes, r.epsilon, r.admitted, r.checked,
                                        dict(r.remaining), r.blocked, spent)
                rows.append(row)
            if new.totals != st.spent:  # parse_state replayed the same log: cannot differ
                raise BudgetError(f"imported log replays to {_fmt(new.totals)}, not {_fmt(st.spent)}")
            self._write(db, rows, new, self._caps)
        self._v, self._last_row = new, (rows[-1][1:] if rows else self._last_row)


class SqliteLedger(_ChainLedger):
    """One user's durable ledger in a SQLite file (WAL). Implements the Ledger protocol.

    ``SqliteLedger(path, user_id, caps, policy_fingerprint, key=None)`` creates the user's
    ledger at zero or reopens it. Reopening checks the stored fingerprint and caps against the
    given ones and verifies the whole hash-chained audit log (see ``dpmv_lib.core._chain``): every
    record's hash, contiguous sequence numbers, every decision (strict replay), the running
    totals in each record, the chain head and that the stored spent budgets equal the replay.
    Before every charge (inside its ``BEGIN IMMEDIATE`` transaction) and every read of
    ``spent()`` it re-verifies the last verified record, verifies every record appended since
    (by other processes) and checks the head and stored totals against the tail. Any mismatch
    raises :class:`~dpmv_lib.core.errors.LedgerIntegrityError` naming the ledger and the mismatch,
    and nothing is written. With ``key`` (>= 16 bytes) the chain is HMAC-SHA256 keyed, so edits
    cannot be re-signed without the key. Each ``try_charge`` (or ``try_charge_many``: all slots
    of one release) is committed (``synchronous=FULL``) before it returns, i.e. before MemView
    samples the view (C5).

    Writers are serialised by an exclusive ``flock`` on the side file ``<path>.lock`` taken
    before ``BEGIN IMMEDIATE``: a waiting process blocks in the kernel and wakes as soon as the
    holder commits, instead of sleeping in SQLite's busy handler (``timeout`` remains only as
    the fallback against writers that do not take the side lock). Checked charges are
    group-committed (:mod:`dpmv_lib.core.group_commit`): the lock holder commits the posted releases
    of all waiting processes with its own in one transaction and one fsync, each decided
    exactly as a separate ``try_charge_many``; a release is acknowledged only from an answer row
    committed in that same transaction."""

    _db_errors = (sqlite3.Error,)

    def __init__(self, path: str | Path, user_id: str, caps: Mapping[str, Number],
                 policy_fingerprint: str, *, key: bytes | None = None, timeout: float = 60.0,
                 synchronous: str = "FULL") -> None:
        if synchronous not in ("FULL", "EXTRA", "NORMAL"):
            raise BudgetError(f"synchronous must be FULL, EXTRA or NORMAL, got {synchronous!r}")
        if not isinstance(path, (str, Path)):
            raise BudgetError(f"path must be a file path, got {type(path).__name__}")
        super().__init__(str(path), user_id, caps, policy_fingerprint, key)
        self._timeout = float(timeout)
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._lockfd = -1
        self._locked = False
        self._preheld = False  # group commit: the writer lock is already held by this transaction
        self._gc: Any = None
        self._pid = -1
        self._start()

    # ---- connection ------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None,
                                   check_same_thread=False, cached_statements=64)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() not in ("wal", "memory"):
                raise BudgetError(f"could not put ledger {self.path} into WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise BudgetError(f"cannot open ledger database {self.path}: {exc}") from None
        fd = -1
        if self.path != ":memory:" and not self.path.startswith("file:"):
            try:
                fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            except OSError as exc:
                conn.close()
                raise BudgetError(f"cannot open the writer lock file {self.path}.lock: {exc}") from None
        self._conn, self._lockfd, self._pid = conn, fd, os.getpid()
        if fd >= 0 and self._gc is None:
            self._gc = group_commit.GroupCommit(self.path, self.user_id, self._key)

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
        try:
            self._conn.execute("COMMIT")  # type: ignore[union-attr]
        finally:
            self._unlock()

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
        with self._lock:
            if self._pid == os.getpid():
                if self._conn is not None:
                    self._conn.close()
                if self._lockfd >= 0:
                    os.close(self._lockfd)
                if self._gc is not None:
                    self._gc.close()
            self._conn, self._lockfd = None, -1

    def _ensure_schema(self, db: "_Tx") -> None:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        self._check_tables(db, names, _SCHEMA)
        if self._gc is not None and "dpmv_gc" not in names:
            db.execute(group_commit.ANSWER_TABLE)

    def _charge(self, items: Sequence[tuple[frozenset[str], Fraction]], checked: bool
                ) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
        if checked and self._gc is not None:  # group commit (dpmv_lib.core.group_commit)
            return group_commit.charge(self, items)
        return super()._charge(items, checked)

    def integrity_check(self) -> str:
        """SQLite's PRAGMA integrity_check ("ok" when the file is sound)."""
        with self._lock:
            return "; ".join(r[0] for r in self._db().execute("PRAGMA integrity_check").fetchall())

    @staticmethod
    def users(path: str | Path) -> list[str]:
        """The user ids that have a ledger in the file."""
        conn = sqlite3.connect(str(path))
        try:
            return [r[0] for r in conn.execute("SELECT user_id FROM ledger_user ORDER BY user_id")]
        except sqlite3.Error as exc:
            raise BudgetError(f"{path} is not a dpmv ledger database: {exc}") from None
        finally:
            conn.close()

    def __repr__(self) -> str:
        return f"SqliteLedger({self.path!r}, user={self.user_id!r}, keyed={self.keyed})"


class _Tx:
    """``with ledger._tx() as db``: a write transaction that holds the user's ledger exclusively
    (``write``) or a read snapshot; COMMIT on success, ROLLBACK on any error."""

    def __init__(self, ledger: _ChainLedger, write: bool = True) -> None:
        self.ledger = ledger
        self.write = write

    def __enter__(self) -> "_Tx":
        self.ledger._lock.acquire()
        try:
            self.ledger._begin(self.write)
        except self.ledger._db_errors as exc:
            self.ledger._lock.release()
            raise BudgetError(f"cannot lock ledger {self.ledger.path}: {exc}") from None
        except BaseException:
            self.ledger._lock.release()
            raise
        return self

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.ledger._exec(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        return self.ledger._executemany(sql, rows)

    def executescript_safe(self, script: str) -> None:
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



# ---- per-user ledger stores ----------------------------------------------------------------------
class LedgerStore(Protocol):
    """Hands out one ledger per user for a policy (the per-user deployment unit)."""

    def ledger(self, user_id: str, policy: Policy) -> Ledger: ...


class InMemoryLedgerStore:
    """Per-user InMemoryLedgers (tests, experiments); the policy fingerprint is checked per user."""

    def __init__(self) -> None:
        self._ledgers: dict[str, tuple[str, InMemoryLedger]] = {}
        self._lock = threading.Lock()

    def ledger(self, user_id: str, policy: Policy) -> InMemoryLedger:
        if not isinstance(user_id, str) or not user_id:
            raise BudgetError(f"user_id must be a non-empty string, got {user_id!r}")
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
        return sorted(self._ledgers)


class SqliteLedgerStore:
    """Per-user SqliteLedgers in one database file (rows keyed by user id)."""

    def __init__(self, path: str | Path, **kwargs: Any) -> None:
        self.path = Path(path)
        self._kwargs = kwargs

    def ledger(self, user_id: str, policy: Policy) -> SqliteLedger:
        return SqliteLedger.for_policy(self.path, user_id, policy, **self._kwargs)

    def users(self) -> list[str]:
        return SqliteLedger.users(self.path) if self.path.exists() else []

    def __iter__(self) -> Iterator[str]:
        return iter(self.users())
