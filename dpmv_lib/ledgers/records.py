"""Durable ledger records (C5 audit): the audit record (:class:`AuditRecord`) and the stored texts
of its columns (:class:`RecordTexts`), replay of an audit log into exact totals (:func:`replay`,
:func:`replay_ledger`), the checks of storable caps and amounts, and the versioned ledger-state
document: :func:`parse_state` validates a ``dpmv-ledger-state`` document and :func:`import_state`
restores it into an :class:`~dpmv_lib.core.ledger.InMemoryLedger`. A durable ledger exports and
imports its own state (:class:`~dpmv_lib.ledgers.chain.ChainLedger`), any ledger through
:func:`~dpmv_lib.ledgers.chain.export_state`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping as _MappingABC
from dataclasses import dataclass
import time
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from . import hashchain
from ..core.memo import remember
from ..core.rationals import Number, to_fraction
from ..core.errors import BudgetError, BudgetTypeError, UnknownAttributeError
from ..core.ledger import ChargeRecord, InMemoryLedger


STATE_FORMAT = "dpmv-ledger-state"
STATE_VERSION = 1


# ---- audit records ----------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditRecord:
    """One prospective charge as the operator sees it (C5 audit trail).

    ``remaining`` is B_a - L_a after the decision for every requested attribute; ``blocked``
    lists the attributes whose check L_a + eps <= B_a failed (empty when admitted);
    ``checked`` is False only for ``charge_unchecked`` (the NoCap ablation).

    Parameters
    ----------
    seq : int
        Sequence number in the user's chain (1, 2, ...).
    user_id : str
        The user.
    timestamp : str
        UTC time of the decision (ISO 8601; "" for records lifted from an InMemoryLedger).
    attributes : tuple of str
        The charge set Gamma, sorted.
    epsilon : Fraction
        The requested eps.
    admitted : bool
        Whether the charge was admitted.
    checked : bool, optional
        False only for unchecked charges (NoCap ablation, violates C5).
    remaining : tuple of (str, Fraction), optional
        B_a - L_a after the decision, per requested attribute.
    blocked : tuple of str, optional
        The attributes whose cap check failed.
    """

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
        """The JSON form (exact rationals as strings), as in an exported state's ``log``."""
        return {"seq": self.seq, "user_id": self.user_id, "timestamp": self.timestamp,
                "attributes": list(self.attributes), "epsilon": str(self.epsilon),
                "admitted": self.admitted, "checked": self.checked,
                "remaining": {a: str(v) for a, v in self.remaining}, "blocked": list(self.blocked)}

    @classmethod
    def from_dict(cls, d: Any) -> "AuditRecord":
        """An audit record from its JSON form (:meth:`to_dict`).

        Parameters
        ----------
        d : Mapping
            The record's JSON object.

        Raises
        ------
        BudgetTypeError
            If ``d`` is not a mapping or a field has the wrong type (attributes not a list of
            names, ``admitted`` not a boolean, ``seq`` not an integer, eps not a number, ...).
        BudgetError
            If a required key is missing or eps is negative or not finite.
        """
        if not isinstance(d, _MappingABC):
            raise BudgetTypeError(f"an audit record must be a JSON object, got {type(d).__name__}")
        try:
            attrs = d["attributes"]
            rem = d.get("remaining", {})
            blocked = d.get("blocked", [])
            if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
                raise BudgetTypeError(f"audit record attributes must be a list of names, got {attrs!r}")
            if not isinstance(rem, _MappingABC) or not isinstance(blocked, list):
                raise BudgetTypeError("audit record 'remaining' must be an object and 'blocked' a list")
            for key in ("admitted", "checked"):
                if not isinstance(d.get(key, True), bool):
                    raise BudgetTypeError(f"audit record {key!r} must be true/false, got {d.get(key)!r}")
            seq = d.get("seq", 0)
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise BudgetTypeError(f"audit record seq must be an integer, got {seq!r}")
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
        """Lift an :class:`~dpmv_lib.core.ledger.InMemoryLedger` log entry (no timestamp; ``blocked``
        recomputed from its ``remaining``).

        Parameters
        ----------
        rec : ChargeRecord
            The in-memory log entry.
        seq : int
            Its sequence number.
        user_id : str, optional
            The user.
        """
        blocked = () if rec.admitted else tuple(a for a, v in rec.remaining if v < rec.epsilon)
        return cls(seq, user_id, "", tuple(sorted(rec.attributes)), rec.epsilon, rec.admitted, True,
                   tuple(rec.remaining), blocked)


# ---- the stored texts of a record -------------------------------------------------------------
#: attribute names whose JSON text is just '"' + name + '"' (the texts are then built by hand)
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\- ]+")


class RecordTexts:
    """The stored texts of the audit-record columns of one ledger (C5 audit): the chain hashes
    them as stored, so the ledger that writes a record and the verifier that re-decides it use
    the same instance and get byte-identical texts. The hand-built forms for plain attribute
    names equal the ``json.dumps`` texts, without the encoder (every charge writes them).

    Parameters
    ----------
    caps : Mapping of str to Fraction
        The ledger's caps B_a (their names; checked by :func:`check_caps`).
    """

    def __init__(self, caps: Mapping[str, Fraction]) -> None:
        self._plain = all(PLAIN_NAME.fullmatch(a) for a in caps)
        self._sorted_caps = sorted(caps)
        self._fracs: dict[str, Fraction] = {}      # parsed rational text (hot path: no re-parsing)
        self._attr_json: dict[frozenset[str], str] = {}

    def fraction(self, text: str) -> Fraction:
        """The exact rational of a stored text (parsed once per text).

        Parameters
        ----------
        text : str
            Rational text such as ``"2/3"``; ``Fraction`` raises ValueError or
            ZeroDivisionError for anything else.
        """
        f = self._fracs.get(text)
        if f is None:
            f = remember(self._fracs, text, Fraction(text), 4096)
        return f

    def attributes(self, attrs: frozenset[str]) -> str:
        """The ``attributes`` column: the sorted names as a JSON list.

        Parameters
        ----------
        attrs : frozenset of str
            The charge set Gamma.
        """
        s = self._attr_json.get(attrs)
        if s is None:
            s = remember(self._attr_json, attrs, json.dumps(sorted(attrs)), 1024)
        return s

    def remaining(self, remaining: Mapping[str, Fraction]) -> str:
        """The ``remaining`` column: B_a - L_a per requested attribute, in the given order.

        Parameters
        ----------
        remaining : Mapping of str to Fraction
            attribute -> B_a - L_a after the decision.
        """
        if self._plain:
            return "{" + ", ".join(f'"{a}": "{x}"' for a, x in remaining.items()) + "}"
        return json.dumps({a: str(x) for a, x in remaining.items()})

    def blocked(self, blocked: Sequence[str]) -> str:
        """The ``blocked`` column: the attributes whose cap check failed.

        Parameters
        ----------
        blocked : sequence of str
            Those attributes (empty when admitted).
        """
        if not blocked:
            return "[]"
        if self._plain:
            return "[" + ", ".join(f'"{a}"' for a in blocked) + "]"
        return json.dumps(list(blocked))

    def totals(self, spent: Mapping[str, Fraction]) -> str:
        """The ``totals`` column: the running totals L_a of every capped attribute, canonical.

        Parameters
        ----------
        spent : Mapping of str to Fraction
            L_a after the record.
        """
        if self._plain:
            return "{" + ",".join(f'"{a}":"{spent[a]}"' for a in self._sorted_caps) + "}"
        return hashchain.totals_text(spent)


def as_record(r: Any, i: int) -> AuditRecord:
    """One audit-log entry as an :class:`AuditRecord` (C5 audit): kept, lifted or parsed.

    Parameters
    ----------
    r : AuditRecord, ChargeRecord or Mapping
        The entry, or its JSON object (parsed by :meth:`AuditRecord.from_dict`, which names its errors).
    i : int
        Its sequence number (given to a lifted ChargeRecord).
    """
    if isinstance(r, AuditRecord):
        return r
    if isinstance(r, ChargeRecord):
        return AuditRecord.from_charge_record(r, i)
    return AuditRecord.from_dict(r)


#: the most bits a stored exact number (eps, a cap, a total) may have: its decimal text must stay
#: under CPython's int-to-string limit (4300 digits by default), or it could not be written
MAX_STORED_BITS = 14_000


def check_storable(value: Fraction, what: str) -> Fraction:
    """A storable exact number (C5: refuse before anything is written, never store a rounded one).

    Parameters
    ----------
    value : Fraction
        Returned as is when its numerator and denominator have at most ``MAX_STORED_BITS`` bits.
    what : str
        What it is, for the message.

    Raises
    ------
    BudgetError
        If it has more bits (its exact decimal text could not be written).
    """
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_STORED_BITS:
        raise BudgetError(f"{what} has more than {MAX_STORED_BITS} bits in its numerator or denominator; "
                          f"a durable ledger stores exact decimal text and refuses it")
    return value


def check_caps(caps: Any) -> dict[str, Fraction]:
    """The caps B_a of a durable ledger (C5) as exact, storable rationals > 0.

    Parameters
    ----------
    caps : Mapping of str to number
        attribute -> B_a.

    Raises
    ------
    BudgetTypeError, BudgetError
        If ``caps`` is not a non-empty mapping, a name is not a non-empty valid Unicode string, or a cap
        is not a finite number > 0 that can be stored (BudgetTypeError for a wrong type).
    """
    if not isinstance(caps, _MappingABC) or not caps:
        raise (BudgetError if isinstance(caps, _MappingABC) else BudgetTypeError)(
            f"caps must be a non-empty mapping attribute -> cap, got {caps!r}")
    out = {}
    for a, b in caps.items():
        if not isinstance(a, str) or not a:
            raise (BudgetError if isinstance(a, str) else BudgetTypeError)(
                f"attribute names must be non-empty strings, got {a!r}")
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            raise BudgetError(f"attribute names must be valid Unicode text (no lone surrogates), got {a!r}") from None
        out[a] = check_storable(to_fraction(b, f"cap of {a!r}", positive=True, error=BudgetError), f"the cap of {a!r}")
    return out


def replay(log: Sequence[AuditRecord | ChargeRecord | Mapping[str, Any]], caps: Mapping[str, Number],
           *, strict: bool = True) -> dict[str, Fraction]:
    """Recompute every L_a from an audit log, starting at zero (C5 audit).

    With ``strict`` every recorded decision is re-checked: an admitted checked charge must fit
    under every cap, a blocked one must not, and the recorded ``remaining`` must equal
    B_a - L_a at that point. Any disagreement raises BudgetError naming the entry.

    Parameters
    ----------
    log : sequence of AuditRecord, ChargeRecord or Mapping
        The audit log in order (records, in-memory log entries or their JSON objects).
    caps : Mapping of str to number
        The caps B_a.
    strict : bool, optional
        Re-check every recorded decision (default True).

    Returns
    -------
    dict of str to Fraction
        L_a after the whole log.

    Raises
    ------
    BudgetTypeError
        If ``caps`` or ``log`` has the wrong type, or a record does (see :meth:`AuditRecord.from_dict`).
    UnknownAttributeError
        If a record names an attribute without a cap.
    BudgetError
        If a cap is not a positive number, a record is malformed, or (``strict``) a recorded
        decision or remaining budget disagrees with the replay (C5).

    Examples
    --------
    >>> from fractions import Fraction
    >>> from dpmv_lib.core.ledger import InMemoryLedger
    >>> led = InMemoryLedger({"debt": 1})
    >>> [led.try_charge(frozenset({"debt"}), Fraction(2, 3)) for _ in range(2)]
    [True, False]
    >>> replay(led.log, {"debt": 1})
    {'debt': Fraction(2, 3)}
    """
    caps_f = check_caps(caps)
    if isinstance(log, (str, bytes)) or not isinstance(log, Iterable):
        raise BudgetTypeError(f"an audit log must be a list of records, got {type(log).__name__}")
    spent = {a: Fraction(0) for a in caps_f}
    for i, raw in enumerate(log, 1):
        replay_step(spent, as_record(raw, i), caps_f, strict)
    return spent


def replay_step(spent: dict[str, Fraction], r: AuditRecord, caps_f: Mapping[str, Fraction],
                 strict: bool = True) -> None:
    """One step of the replay (C5 audit): apply audit record ``r`` to the totals ``spent`` in place.

    Parameters
    ----------
    spent : dict of str to Fraction
        L_a before ``r``; updated in place.
    r : AuditRecord
        The record.
    caps_f : Mapping of str to Fraction
        The caps B_a.
    strict : bool, optional
        Re-check the recorded decision and ``remaining`` against the replay (default True).

    Raises
    ------
    UnknownAttributeError, BudgetError
        If ``r`` names an attribute without a cap; (``strict``) if its decision or a remaining budget disagrees.
    """
    for a in r.attributes:
        if a not in caps_f:
            raise UnknownAttributeError(f"audit record #{r.seq} names attribute {a!r}; the caps "
                                        f"cover {sorted(caps_f)}")
    fits = all(spent[a] + r.epsilon <= caps_f[a] for a in r.attributes)
    if strict and r.admitted and r.checked and not fits:
        raise BudgetError(f"audit record #{r.seq} admits eps={r.epsilon} on {list(r.attributes)} "
                          f"but that overruns a cap (spent {format_totals(spent)}, caps {format_totals(caps_f)})")
    if strict and not r.admitted and fits:
        raise BudgetError(f"audit record #{r.seq} blocks eps={r.epsilon} on {list(r.attributes)} "
                          f"although it fits (spent {format_totals(spent)}, caps {format_totals(caps_f)})")
    if r.admitted:
        for a in r.attributes:
            spent[a] += r.epsilon
    if strict:
        for a, v in r.remaining:
            if a not in caps_f or caps_f[a] - spent[a] != v:
                raise BudgetError(f"audit record #{r.seq} says {a!r} has {v} remaining; replay "
                                  f"gives {caps_f.get(a, Fraction(0)) - spent.get(a, Fraction(0))}")


def replay_ledger(log: Sequence[Any], caps: Mapping[str, Number], *, strict: bool = True) -> InMemoryLedger:
    """An InMemoryLedger in the state the log leads to (its ``log`` holds the replayed records).

    Parameters
    ----------
    log : sequence of AuditRecord, ChargeRecord or Mapping
        The audit log in order.
    caps : Mapping of str to number
        The caps B_a.
    strict : bool, optional
        Re-check every recorded decision (default True).

    Raises
    ------
    BudgetTypeError, UnknownAttributeError, BudgetError
        As :func:`replay`.
    """
    spent = replay(log, caps, strict=strict)
    out = InMemoryLedger(caps, spent)
    out.log = [ChargeRecord(frozenset(r.attributes), r.epsilon, r.admitted, r.remaining)
               for r in (as_record(x, i) for i, x in enumerate(log, 1))]
    return out


def format_totals(d: Mapping[str, Fraction]) -> str:
    """Exact totals or caps as message text, sorted by attribute: ``{debt: 2/3, diet: 0}``.

    Parameters
    ----------
    d : Mapping of str to Fraction
        attribute -> L_a (or B_a).
    """
    return "{" + ", ".join(f"{a}: {v}" for a, v in sorted(d.items())) + "}"


_SECOND: tuple[int, str] = (-1, "")  # (a UTC second, its "YYYY-MM-DDTHH:MM:SS")


def utc_now() -> str:
    """The current UTC time as ``datetime.now(timezone.utc).isoformat(timespec="microseconds")``
    writes it ("2026-01-01T12:00:00.123456+00:00"); the date and time of day are formatted once
    per second (every charge stamps its audit record)."""
    global _SECOND
    ns = time.time_ns()
    sec, us = ns // 1_000_000_000, ns // 1000 % 1_000_000
    cached = _SECOND
    if cached[0] != sec:
        cached = _SECOND = (sec, datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{us:06d}+00:00"


# ---- ledger states (export / import) -----------------------------------------------------------
@dataclass(frozen=True)
class LedgerState:
    """A validated exported budget state (caps, spent, fingerprint and audit log).

    Parameters
    ----------
    user_id : str
        The user ("" when the state names none).
    policy_fingerprint : str
        The policy the ledger was created for.
    caps, spent : dict of str to Fraction
        B_a and L_a.
    log : tuple of AuditRecord
        The audit log (replays to ``spent``).
    """

    user_id: str
    policy_fingerprint: str
    caps: dict[str, Fraction]
    spent: dict[str, Fraction]
    log: tuple[AuditRecord, ...]


def parse_state(state: Mapping[str, Any] | str, policy_fingerprint: str | None = None) -> LedgerState:
    """Validate an exported state: format, fingerprint (if given), exact values and that a
    strict :func:`replay` of its log reproduces its ``spent`` exactly.

    Parameters
    ----------
    state : Mapping or str
        The state document, or its JSON text.
    policy_fingerprint : str, optional
        If given, the state must belong to this policy.

    Returns
    -------
    LedgerState

    Raises
    ------
    BudgetTypeError
        If ``state`` (or its parsed JSON) is not an object, or a field has the wrong type (``policy_fingerprint`` not a
        string, ``caps``/``spent`` not objects, ``log`` not a list, a value that is not a number, ...).
    UnknownAttributeError
        If a log record names an attribute without a cap.
    BudgetError
        If the JSON is invalid, the format or version is unknown, a key is missing, the
        fingerprint differs, ``spent`` does not cover exactly the capped attributes or exceeds a
        cap, or the log does not replay (strictly, C5) to ``spent``.
    """
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except json.JSONDecodeError as exc:
            raise BudgetError(f"ledger state is not valid JSON: {exc}") from None
    if not isinstance(state, _MappingABC):
        raise BudgetTypeError(f"ledger state must be a JSON object, got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
        raise BudgetError(f"not a {STATE_FORMAT} v{STATE_VERSION} document "
                          f"(format={state.get('format')!r}, version={state.get('version')!r})")
    for key in ("policy_fingerprint", "caps", "spent", "log"):
        if key not in state:
            raise BudgetError(f"ledger state is missing the key {key!r}")
    fp = state["policy_fingerprint"]
    if not isinstance(fp, str):
        raise BudgetTypeError(f"policy_fingerprint must be a string, got {fp!r}")
    if policy_fingerprint is not None and fp != policy_fingerprint:
        raise BudgetError(f"ledger state belongs to policy {fp} but this ledger uses policy "
                          f"{policy_fingerprint}; refusing to import")
    caps = check_caps(state["caps"])
    spent_raw = state["spent"]
    if not isinstance(spent_raw, _MappingABC) or set(spent_raw) != set(caps):
        raise (BudgetError if isinstance(spent_raw, _MappingABC) else BudgetTypeError)(
            f"ledger state 'spent' must cover exactly the capped attributes {sorted(caps)}")
    spent = {a: to_fraction(v, f"spent budget of {a!r}", nonnegative=True, error=BudgetError)
             for a, v in spent_raw.items()}
    for a in caps:
        if spent[a] > caps[a]:
            raise BudgetError(f"ledger state has {a!r} spent {spent[a]} above its cap {caps[a]}")
    if not isinstance(state["log"], list):
        raise BudgetTypeError("ledger state 'log' must be a list")
    log = tuple(as_record(r, i) for i, r in enumerate(state["log"], 1))
    replayed = replay(log, caps)
    if replayed != spent:
        raise BudgetError(f"ledger state is inconsistent: its log replays to {format_totals(replayed)} but it "
                          f"says spent {format_totals(spent)}")
    return LedgerState(str(state.get("user_id", "")), fp, caps, spent, log)


def import_state(state: Mapping[str, Any] | str, policy_fingerprint: str) -> InMemoryLedger:
    """An InMemoryLedger restored from an exported state (fingerprint and replay checked).

    Parameters
    ----------
    state : Mapping or str
        The state document, or its JSON text.
    policy_fingerprint : str
        The policy the state must belong to.

    Returns
    -------
    InMemoryLedger
        With the state's caps, spent budgets and log.

    Raises
    ------
    BudgetTypeError, UnknownAttributeError, BudgetError
        If the state does not validate (see :func:`parse_state`).
    """
    st = parse_state(state, policy_fingerprint)
    out = InMemoryLedger(st.caps, st.spent)
    out.log = [ChargeRecord(frozenset(r.attributes), r.epsilon, r.admitted, r.remaining) for r in st.log]
    return out
