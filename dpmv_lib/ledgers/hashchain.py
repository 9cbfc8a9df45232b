"""Hash chain over a durable ledger's audit log (C5 audit trail that cannot be edited silently).

Per user, record ``i`` commits to the previous record's hash, to all its stored columns and to
the running totals L_a after it; the chain starts at a genesis hash that commits to the ledger
header (user, policy fingerprint, creation time, chain kind, caps)::

    h_0 = MAC("genesis", user, fingerprint, created, chain, caps)
    h_i = MAC("record", user, i, h_{i-1}, ts, attributes, eps, admitted, checked, remaining,
              blocked, totals_i[, origin])

MAC is HMAC-SHA256 under the operator's secret key (``chain = "hmac-sha256"``), or plain
SHA-256 without a key (``chain = "sha256"``): that detects edits by anyone who does not
recompute the chain, but whoever can write the file can recompute an unkeyed chain.
A record written for a group-commit request also commits to its ``origin`` (format 3).
Columns enter the MAC exactly as stored (text and integers), so any edit of a stored value,
even one to an equal fraction ("2/3" -> "4/6"), changes the hash.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from fractions import Fraction
from typing import Any, Mapping, Sequence

from ..core.memo import remember
from ..core.errors import BudgetError, BudgetTypeError

CHAIN_KEYED = "hmac-sha256"
CHAIN_UNKEYED = "sha256"
MIN_KEY_BYTES = 16
KEY_ENV = "DPMV_LEDGER_KEY"
_DOMAIN = b"dpmv-ledger-chain-v2\x00"

# stored audit-log columns that enter the MAC, with their SQLite storage types
RECORD_COLUMNS = ("ts", "attributes", "epsilon", "admitted", "checked", "remaining", "blocked", "totals")
COLUMN_TYPES = (str, str, str, int, int, str, str, str)


def check_key(key: Any) -> bytes | None:
    """The operator key as bytes (None: unkeyed chain); at least MIN_KEY_BYTES bytes."""
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray)):
        raise BudgetTypeError(f"the ledger key must be bytes (e.g. bytes.fromhex(secret)), got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise BudgetError(f"the ledger key must have at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    return bytes(key)


def key_from_env(name: str = KEY_ENV) -> bytes:
    """The operator key from the environment variable ``name`` (hex, >= 16 bytes)."""
    raw = os.environ.get(name)
    if raw is None:
        raise BudgetError(f"environment variable {name} (the ledger key, hex) is not set")
    try:
        key = bytes.fromhex(raw.strip())
    except ValueError:
        raise BudgetError(f"environment variable {name} must hold the ledger key as hex digits") from None
    return check_key(key)  # type: ignore[return-value]


def chain_kind(key: bytes | None) -> str:
    return CHAIN_UNKEYED if key is None else CHAIN_KEYED


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode  # = json.dumps(..., same args)


def _mac(key: bytes | None, payload: list[Any]) -> str:
    msg = _DOMAIN + _ENCODE(payload).encode("ascii")
    if key is None:
        return hashlib.sha256(msg).hexdigest()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def genesis_hash(key: bytes | None, user_id: str, fingerprint: str, created: str, chain: str,
                 caps: Mapping[str, Fraction]) -> str:
    """h_0: commits to the ledger header (a different key gives a different genesis)."""
    return _mac(key, ["genesis", user_id, fingerprint, created, chain,
                      [[a, str(caps[a])] for a in sorted(caps)]])


def record_hash(key: bytes | None, user_id: str, seq: int, prev: str, columns: tuple[Any, ...],
                tail: str | None = None, origin: str = "") -> str:
    """h_seq from h_{seq-1} and the record's stored columns (RECORD_COLUMNS order), then its
    ``origin`` when not empty (the group-commit request "<owner>:<number>" that the record
    decides: binds the waiter's answer to the chain; a direct charge has none, and its hash is
    the format-2 hash).

    Hot path (every charge and every verified record): when every value is an exact ``str``
    or ``int`` the JSON text is joined by hand from the encoder's own pieces (C string
    escaping, ``int.__repr__``), byte-identical to ``_ENCODE`` (tests/test_durable_tamper.py
    checks this); anything else goes through the encoder. ``tail``, when given, must be
    ``columns_text(columns[1:])`` (a caller that writes the same columns after the timestamp
    again keeps it)."""
    if tail is not None:
        ts = columns[0]
        body = "," + _esc(ts) + tail if type(ts) is str else None
    else:
        body = columns_text(columns)
    if origin:
        body = body + "," + _esc(origin) if body is not None and type(origin) is str else None
    if body is None or type(user_id) is not str or type(seq) is not int or type(prev) is not str:
        return _mac(key, ["record", user_id, seq, prev, *columns] + ([origin] if origin else []))
    msg = _DOMAIN + f'["record",{_esc(user_id)},{_int_repr(seq)},{_esc(prev)}{body}]'.encode("ascii")
    if key is None:
        return hashlib.sha256(msg).hexdigest()
    h = _hmac_base(key).copy()
    h.update(msg)
    return h.hexdigest()


def columns_text(columns: Sequence[Any]) -> str | None:
    """The JSON text of ``columns`` inside a record's array, each after a comma, when every
    column is an exact ``str`` or ``int``; else None (``record_hash`` then uses the encoder)."""
    out = ""
    for c in columns:
        t = type(c)
        if t is str:
            out += "," + _esc(c)
        elif t is int:
            out += "," + _int_repr(c)
        else:
            return None
    return out


_esc = json.encoder.encode_basestring_ascii  # what _ENCODE uses for str (ensure_ascii=True)
_int_repr = int.__repr__                     # ... and for int


def _hmac_base(key: bytes, _cache: dict[bytes, Any] = {}) -> Any:  # noqa: B006 (a cache)
    """HMAC-SHA256 keyed with ``key``, before any message (copied per record: no re-keying)."""
    h = _cache.get(key)
    if h is None:
        h = remember(_cache, key, hmac.new(key, digestmod=hashlib.sha256), 16)
    return h


def totals_text(spent: Mapping[str, Fraction]) -> str:
    """The running totals L_a as stored in a record (exact rational text, sorted keys)."""
    return json.dumps({a: str(spent[a]) for a in sorted(spent)}, separators=(",", ":"))
