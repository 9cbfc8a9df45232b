"""Durable ledger records (C5 audit): the audit record, replay of an audit log into exact totals
(:func:`replay`, :func:`replay_ledger`) and the versioned ledger-state export/import.
The backends are in :mod:`dpmv_lib.ledgers.sqlite`.
"""
from __future__ import annotations

from collections.abc import Mapping as _MappingABC
from dataclasses import dataclass
import time
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from ..core._exact import Number, to_fraction
from ..core.errors import BudgetError, UnknownAttributeError
from ..core.ledger import ChargeRecord, InMemoryLedger


STATE_FORMAT = "dpmv-ledger-state"
STATE_VERSION = 1
_SCHEMA_VERSION = "3"  # 3: + audit_log.origin (group commit); 2: hash-chained (migrated on open); 1: refused


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


_SECOND: tuple[int, str] = (-1, "")  # (a UTC second, its "YYYY-MM-DDTHH:MM:SS")


def _now() -> str:
    """The current UTC time as ``datetime.now(timezone.utc).isoformat(timespec="microseconds")``
    writes it ("2026-01-01T12:00:00.123456+00:00"); the date and time of day are formatted once
    per second (every charge stamps its audit record)."""
    global _SECOND
    ns = time.time_ns()
    sec, us = ns // 1_000_000_000, ns // 1000 % 1_000_000
    cached = _SECOND
    if cached[0] != sec:
        cached = _SECOND = (sec, datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{us:06d}+00:00"
