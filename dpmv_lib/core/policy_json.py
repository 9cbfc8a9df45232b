"""The strict file form of a policy: JSON load and dump, the size limits (:class:`PolicyLimits`)
and the reading of the JSON form field by field (:func:`policy_fields`: keys, types, names,
counts, position ids, caps) and of its read entries (:func:`check_read_entries`).

Every hostile input gets :class:`~dpmv_lib.core.errors.PolicyError` (or the error class passed in)
naming the file or field and the problem. Limits are module constants, overridable per call
through :class:`PolicyLimits` (``Policy.load(path, limits=PolicyLimits(max_positions=10**6))``).
Validation is linear in the size of the input (sets and dicts, no pairwise scans). The policy's
objects, built from :class:`PolicyFields`, and their cross-checks are in :mod:`dpmv_lib.core.policy`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import ParameterError, ParameterTypeError, PolicyError, PolicyTypeError, short_repr
from .rationals import parse_rational

MAX_POLICY_BYTES = 16 * 2**20
"""Largest policy file :meth:`Policy.load` reads (16 MiB; the shipped policies are ~30 KB)."""
MAX_POSITIONS = 100_000
"""Most memory positions a policy may declare."""
MAX_SLOTS = 1_000
"""Most slots a policy may declare."""
MAX_VIEWS = 10_000
"""Most views over all slots together."""
MAX_ATTRIBUTES = 1_000
"""Most protected attributes."""
MAX_INTENTS = 10_000
"""Most intents in ``routes`` (and most entries in ``reads``)."""
MAX_NESTING_DEPTH = 32
"""Deepest JSON nesting :meth:`Policy.load` parses (the format itself needs 6 levels)."""
MAX_POSITION_ID = 2**63 - 1
"""Position ids are integers in [-2**63, 2**63 - 1] (fit a signed 64-bit column)."""


@dataclass(frozen=True)
class PolicyLimits:
    """Explicit size limits for :meth:`Policy.load` / :meth:`Policy.from_dict` (defaults: the
    module constants). Exceeding one raises :class:`PolicyError` naming the limit; raise a limit
    deliberately, e.g. ``PolicyLimits(max_bytes=64 * 2**20, max_positions=10**6)``.

    Parameters
    ----------
    max_bytes, max_positions, max_slots, max_views, max_attributes, max_intents, max_depth : int
        The limits (each >= 1); see the module constants.

    Raises
    ------
    ParameterTypeError
        If a limit is not an integer (bool included).
    ParameterError
        If a limit is < 1.
    """

    max_bytes: int = MAX_POLICY_BYTES
    max_positions: int = MAX_POSITIONS
    max_slots: int = MAX_SLOTS
    max_views: int = MAX_VIEWS
    max_attributes: int = MAX_ATTRIBUTES
    max_intents: int = MAX_INTENTS
    max_depth: int = MAX_NESTING_DEPTH

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ParameterTypeError(f"PolicyLimits.{f.name} must be an integer >= 1, got {v!r}")
            if v < 1:
                raise ParameterError(f"PolicyLimits.{f.name} must be an integer >= 1, got {v!r}")


def as_limits(limits: Any) -> PolicyLimits:
    """The size limits of one load: ``limits`` itself, or the defaults when it is None.

    Parameters
    ----------
    limits : PolicyLimits or None
        The caller's limits (None: the module constants).

    Returns
    -------
    PolicyLimits

    Raises
    ------
    ParameterTypeError
        If ``limits`` is neither None nor a :class:`PolicyLimits`.
    """
    if limits is None:
        return PolicyLimits()
    if not isinstance(limits, PolicyLimits):
        raise ParameterTypeError(f"limits must be a PolicyLimits, got {type(limits).__name__}")
    return limits


def check_limit(n: int, most: int, what: str, name: str) -> None:
    """A size limit check: ``n`` items of a policy may not exceed the limit ``most``.

    Parameters
    ----------
    n : int
        How many the policy has.
    most : int
        The limit.
    what : str
        What is counted, for the message (e.g. "slots").
    name : str
        The :class:`PolicyLimits` field that sets the limit (e.g. "max_slots").

    Raises
    ------
    PolicyError
        If ``n > most``.
    """
    if n > most:
        raise PolicyError(f"policy has {n} {what}, over the limit {name}={most} (see PolicyLimits)")


def read_bounded(path: Path, max_bytes: int, what: str, error: type[Exception]) -> bytes:
    """A bounded file read: the bytes of a regular file of at most ``max_bytes`` bytes.

    Parameters
    ----------
    path : Path
        The file.
    max_bytes : int
        The most bytes it may have (checked before and while reading).
    what : str
        What the file is, for the message (e.g. "policy file").
    error : type
        The domain error class raised for every failure (:meth:`Policy.load`: :class:`PolicyError`).

    Returns
    -------
    bytes
        The file's contents.

    Raises
    ------
    PolicyError
        (``error``) If the path contains a NUL byte or is otherwise invalid, the file does not
        exist, is a directory or not a regular file, is over ``max_bytes`` or cannot be read
        (an ``OSError``).
    """
    if "\x00" in str(path):
        raise error(f"{what} path {short_repr(str(path))} is invalid: it contains a NUL byte")
    try:
        if not path.exists():
            raise error(f"{what} not found: {path}")
        if path.is_dir():
            raise error(f"{what} {path} is a directory, not a file")
        if not path.is_file():
            raise error(f"{what} {path} is not a regular file")
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{what} {path} is {size} bytes, over the limit max_bytes={max_bytes}")
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except error:
        raise
    except OSError as exc:
        raise error(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise error(f"{what} path {short_repr(str(path))} is invalid: {exc}") from None
    if len(raw) > max_bytes:
        raise error(f"{what} {path} is over the limit max_bytes={max_bytes}")
    return raw


def json_depth(raw: bytes) -> int:
    """Deepest bracket nesting of JSON text, brackets inside strings skipped, without parsing it
    (linear time, vectorised). Exact for valid JSON; for invalid JSON some number (the parser
    rejects that text anyway).

    Parameters
    ----------
    raw : bytes
        JSON text.

    Returns
    -------
    int
        The nesting depth (0 for a scalar).
    """
    import numpy as np
    a = np.frombuffer(raw, dtype=np.uint8)
    quotes = np.flatnonzero(a == 34)
    if quotes.size and b"\\" in raw:  # a quote after an odd run of backslashes is escaped
        bs = np.flatnonzero(a == 92)
        brk = np.diff(bs) != 1
        starts, ends = bs[np.r_[True, brk]], bs[np.r_[brk, True]]
        escaped = ends[(ends - starts) % 2 == 0] + 1
        quotes = quotes[~np.isin(quotes, escaped)]
    brackets = np.flatnonzero((a == 91) | (a == 123) | (a == 93) | (a == 125))
    brackets = brackets[np.searchsorted(quotes, brackets) % 2 == 0]  # an even number of quotes before
    if not brackets.size:
        return 0
    opens = (a[brackets] == 91) | (a[brackets] == 123)
    return int(np.cumsum(np.where(opens, 1, -1)).max())


def _reject_constant(name: str) -> Any:
    raise ValueError(f"the non-standard JSON constant {name} is not allowed")


def parse_json_bytes(raw: bytes, path: Path, max_depth: int, what: str, error: type[Exception]) -> Any:
    """Strict JSON parsing: UTF-8 JSON text -> data, nested at most ``max_depth`` levels.

    Parameters
    ----------
    raw : bytes
        The file's bytes (from :func:`read_bounded`).
    path : Path
        The file, for the message.
    max_depth : int
        The deepest nesting allowed (checked by :func:`json_depth` before parsing).
    what : str
        What the file is, for the message.
    error : type
        The domain error class raised for every failure.

    Returns
    -------
    object
        The parsed JSON value.

    Raises
    ------
    PolicyError
        (``error``) If the text is empty or only whitespace, not UTF-8, nested over
        ``max_depth``, not valid JSON, or uses NaN/Infinity or an integer over Python's digit limit.
    """
    if not raw.strip():
        raise error(f"{what} {path} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (bad byte at offset {exc.start})") from None
    depth = json_depth(raw)
    if depth > max_depth:
        raise error(f"{what} {path} nests JSON {depth} levels deep, over the limit max_depth={max_depth}")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{what} {path} nests JSON too deeply to parse") from None
    except ValueError as exc:  # NaN/Infinity, integers over Python's digit limit
        raise error(f"{what} {path} is not valid JSON: {short_repr(str(exc))}") from None


POLICY_REQUIRED = frozenset({"name", "slots", "positions", "attributes", "routes"})
POLICY_KEYS = POLICY_REQUIRED | {"reads", "sensitivity", "description", "version"}
SLOT_KEYS = frozenset({"name", "views"})
VIEW_KEYS = frozenset({"id", "text", "cues", "intents", "generic"})
POSITION_KEYS = frozenset({"id", "slot", "label"})
ATTRIBUTE_KEYS = frozenset({"name", "group", "cap", "description"})
READ_KEYS = frozenset({"intent", "slot", "positions"})


def check_keys(d: Mapping[str, Any], what: str, allowed: frozenset[str], required: frozenset[str]) -> None:
    """The key check of one JSON object of the format: every required key, no unknown key.

    Parameters
    ----------
    d : Mapping
        The JSON object.
    what : str
        What it is, for the message (e.g. "slot 'food'").
    allowed : frozenset of str
        The keys it may have.
    required : frozenset of str
        The keys it must have.

    Raises
    ------
    PolicyError
        If a required key is missing or a key is not allowed.
    """
    if not required <= d.keys():
        raise PolicyError(f"{what} is missing the required key {sorted(required - d.keys())[0]!r}")
    if not d.keys() <= allowed:
        unknown = sorted(str(k)[:40] for k in d.keys() - allowed)
        raise PolicyError(f"{what} has unknown keys {unknown[:10]}; allowed: {sorted(allowed)}")


def as_list(x: Any, what: str) -> list[Any]:
    """A JSON array field of the policy.

    Parameters
    ----------
    x : object
        The field's value.
    what : str
        The field, for the message (e.g. "slots").

    Returns
    -------
    list
        ``x`` itself.

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a list.
    """
    if not isinstance(x, list):
        raise PolicyTypeError(f"policy {what!r} must be a list, got {type(x).__name__}")
    return x


def as_name(x: Any, what: str) -> str:
    """A name or id of the policy: a non-empty string that is not only whitespace.

    Parameters
    ----------
    x : object
        The value.
    what : str
        What it names, for the message.

    Returns
    -------
    str
        ``x`` itself.

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a string.
    PolicyError
        If ``x`` is empty or only whitespace.
    """
    if not isinstance(x, str):
        raise PolicyTypeError(f"{what} must be a string, got {type(x).__name__} {short_repr(x)}")
    if not x.strip():
        raise PolicyError(f"{what} must be a non-empty name, got {x!r}")
    return x


def as_text(x: Any, what: str) -> str:
    """A free-text field of the policy (a description, label or view text; may be empty).

    Parameters
    ----------
    x : object
        The value.
    what : str
        The field, for the message.

    Returns
    -------
    str
        ``x`` itself.

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a string.
    """
    if not isinstance(x, str):
        raise PolicyTypeError(f"{what} must be a string, got {type(x).__name__} {short_repr(x)}")
    return x


def as_int_tuple(x: Any, what: str) -> tuple[int, ...]:
    """A list of distinct integer position ids (a group I_a or a read set R_{t,g}).

    Parameters
    ----------
    x : object
        The value (a JSON array).
    what : str
        What it is, for the message.

    Returns
    -------
    tuple of int
        The ids, in the given order.

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a list of integers (bool excluded).
    PolicyError
        If an id is repeated.
    """
    if not isinstance(x, list) or not all(type(i) is int for i in x):
        raise PolicyTypeError(f"{what} must be a list of integers, got {short_repr(x)}")
    out = tuple(x)
    if len(set(out)) != len(out):
        raise PolicyError(f"{what} repeats positions {sorted(duplicates(out))[:20]}")
    return out


def as_str_tuple(x: Any, what: str) -> tuple[str, ...]:
    """A list of non-empty strings (a view's cues or intents).

    Parameters
    ----------
    x : object
        The value (a JSON array).
    what : str
        What it is, for the message.

    Returns
    -------
    tuple of str
        The strings, in the given order.

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a list of strings.
    PolicyError
        If a string is empty or only whitespace.
    """
    if not isinstance(x, list) or not all(isinstance(i, str) for i in x):
        raise PolicyTypeError(f"{what} must be a list of non-empty strings, got {short_repr(x)}")
    if not all(i.strip() for i in x):
        raise PolicyError(f"{what} must be a list of non-empty strings, got {short_repr(x)}")
    return tuple(x)


def duplicates(items: Iterable[Any]) -> list[Any]:
    """The duplicates of a sequence: the items that occur more than once (linear time).

    Parameters
    ----------
    items : iterable
        Hashable items (names or ids).

    Returns
    -------
    list
        Each repeated item once, sorted by ``repr``.
    """
    seen: set[Any] = set()
    dup: set[Any] = set()
    for x in items:
        if x in seen:
            dup.add(x)
        else:
            seen.add(x)
    return sorted(dup, key=repr)


# ---- load and dump ----------------------------------------------------------------------------------
def policy_path(path: Any) -> Path:
    """A policy file path as a :class:`~pathlib.Path`.

    Parameters
    ----------
    path : str or os.PathLike
        The policy file.

    Returns
    -------
    Path

    Raises
    ------
    PolicyTypeError
        If ``path`` is not a str or path-like object.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise PolicyTypeError(f"a policy file path must be a str or path-like object, got {type(path).__name__}")
    return Path(path)


def read_policy_file(path: Path, limits: PolicyLimits) -> Any:
    """The JSON value of a policy file, read within ``limits`` (bytes and nesting depth).

    Parameters
    ----------
    path : Path
        The policy file (UTF-8 JSON).
    limits : PolicyLimits
        The size limits.

    Returns
    -------
    object
        The parsed JSON value (not yet checked as a policy).

    Raises
    ------
    PolicyError
        If the file is missing, a directory, unreadable, over ``limits.max_bytes``, empty, not
        UTF-8, nested over ``limits.max_depth`` or not valid JSON (see :func:`read_bounded` and
        :func:`parse_json_bytes`).
    """
    raw = read_bounded(path, limits.max_bytes, "policy file", PolicyError)
    return parse_json_bytes(raw, path, limits.max_depth, "policy file", PolicyError)


def plain_policy_data(data: Any) -> Any:
    """A private copy of a policy's JSON form given in code, as plain JSON data.

    Parameters
    ----------
    data : Mapping
        The JSON form (dicts, lists, strings, numbers, booleans).

    Returns
    -------
    dict
        A fresh copy, made by a JSON round trip.

    Raises
    ------
    PolicyTypeError
        If ``data`` is not a mapping, its ``routes`` keys (intents) are not strings, or it holds
        something that is not JSON data (a set, an arbitrary object).
    PolicyError
        If it cannot be serialised for another reason (a reference cycle, or nesting too deep for
        the JSON encoder).
    """
    if not isinstance(data, Mapping):
        raise PolicyTypeError(f"a policy must be a JSON object, got {type(data).__name__}")
    routes_raw = data.get("routes")
    if isinstance(routes_raw, Mapping):
        bad = [k for k in routes_raw if not isinstance(k, str)]
        if bad:
            raise PolicyTypeError(f"policy 'routes' keys (intents) must be strings, got {short_repr(bad[0])}")
    try:
        return json.loads(json.dumps(data))
    except (TypeError, ValueError, RecursionError) as exc:
        raise (PolicyTypeError if isinstance(exc, TypeError) else PolicyError)(
            f"a policy must be plain JSON data (objects, lists, strings, numbers): "
            f"{short_repr(str(exc))}") from None


def copy_json(plain: Any) -> Any:
    """A deep copy of plain JSON data (by a JSON round trip).

    Parameters
    ----------
    plain : object
        Plain JSON data.

    Returns
    -------
    object
    """
    return json.loads(json.dumps(plain))


def canonical_json(body: Any) -> str:
    """The canonical text of JSON data (sorted keys, no spaces): what a policy fingerprint hashes.

    Parameters
    ----------
    body : object
        Plain JSON data.

    Returns
    -------
    str
    """
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def write_policy_file(path: Path, plain: Any) -> None:
    """Write a policy's JSON form to ``path`` (through a temporary file, then an atomic rename).

    Parameters
    ----------
    path : Path
        The policy file.
    plain : object
        The JSON form (plain JSON data).

    Raises
    ------
    OSError
        If the file cannot be written.
    """
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(plain, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


# ---- the JSON form's fields (Policy.from_dict / Policy.load) ----------------------------------------
ViewFields = tuple[str, str, str, tuple[str, ...], tuple[str, ...], bool]
"""A view's fields in :class:`~dpmv_lib.core.policy.View`'s order: id, slot, text, cues, intents, generic."""
SlotFields = tuple[str, tuple[ViewFields, ...]]
"""A slot's name and its views' fields."""


@dataclass(frozen=True)
class PolicyFields:
    """A policy's JSON form read field by field (every key, type, name, count and number checked;
    not yet cross-checked): the arguments of the policy's parts, in their field order.

    Parameters
    ----------
    name : str
        The policy name.
    slots : tuple of SlotFields
        (slot name, ((view id, slot, text, cues, intents, generic), ...)) per slot.
    positions : tuple of (int, str, str)
        (id, slot, label) per position.
    attributes : tuple of (str, frozenset of int, Fraction, str)
        (name, group I_a, cap B_a, description) per protected attribute.
    routes : dict of str to tuple of str
        intent -> ordered active slots.
    slot_positions : dict of str to tuple of int
        slot -> its positions in layout order (the default read).
    overrides : dict of (str, str) to tuple of int
        (intent, slot) -> the positions read instead (``reads``).
    sensitivity : Fraction
        The sensitivity bound Du (default 3/5).
    """

    name: str
    slots: tuple[SlotFields, ...]
    positions: tuple[tuple[int, str, str], ...]
    attributes: tuple[tuple[str, frozenset[int], Fraction, str], ...]
    routes: dict[str, tuple[str, ...]]
    slot_positions: dict[str, tuple[int, ...]]
    overrides: dict[tuple[str, str], tuple[int, ...]]
    sensitivity: Fraction


def policy_fields(data: Any, lim: PolicyLimits) -> PolicyFields:
    """A policy's parsed JSON form read field by field, within ``lim`` (strict: see
    :meth:`~dpmv_lib.core.policy.Policy.from_dict`).

    Parameters
    ----------
    data : object
        Freshly parsed JSON.
    lim : PolicyLimits
        The size limits, checked before any part is read.

    Returns
    -------
    PolicyFields

    Raises
    ------
    PolicyTypeError
        If ``data`` or a field of it has the wrong JSON type.
    PolicyError
        If a key is missing or unknown, a size limit is exceeded, a name is empty, ``routes`` is
        empty, a position id is outside the signed 64-bit range, a position list repeats an id, a
        read entry is repeated, or a cap or the sensitivity is not a valid positive rational.
    """
    if not isinstance(data, dict):
        raise PolicyTypeError(f"a policy must be a JSON object, got {type(data).__name__}")
    check_keys(data, "policy", POLICY_KEYS, POLICY_REQUIRED)
    name = as_name(data["name"], "policy 'name'")
    if "description" in data:
        as_text(data["description"], "policy 'description'")
    if "version" in data and (isinstance(data["version"], bool)
                              or not isinstance(data["version"], (str, int))):
        raise PolicyTypeError(f"policy 'version' must be a string or an integer, got {short_repr(data['version'])}")
    slots_raw = as_list(data["slots"], "slots")
    check_limit(len(slots_raw), lim.max_slots, "slots", "max_slots")
    n_views = sum(len(d["views"]) for d in slots_raw
                  if isinstance(d, dict) and isinstance(d.get("views"), list))
    check_limit(n_views, lim.max_views, "views (all slots together)", "max_views")
    positions_raw = as_list(data["positions"], "positions")
    check_limit(len(positions_raw), lim.max_positions, "positions", "max_positions")
    attributes_raw = as_list(data["attributes"], "attributes")
    check_limit(len(attributes_raw), lim.max_attributes, "attributes", "max_attributes")
    slots = tuple(_slot_fields(d, i) for i, d in enumerate(slots_raw))
    positions = tuple(_position_fields(d, i) for i, d in enumerate(positions_raw))
    attributes = tuple(_attribute_fields(d, i) for i, d in enumerate(attributes_raw))
    routes_raw = data["routes"]
    if not isinstance(routes_raw, dict):
        raise PolicyTypeError("policy 'routes' must be a non-empty object intent -> [slots]")
    if not routes_raw:
        raise PolicyError("policy 'routes' must be a non-empty object intent -> [slots]")
    check_limit(len(routes_raw), lim.max_intents, "intents in 'routes'", "max_intents")
    routes = {}
    for intent, slots_for in routes_raw.items():
        as_name(intent, "an intent in 'routes'")
        if not isinstance(slots_for, list):
            raise PolicyTypeError(f"route for intent {intent!r} must be a list of slot names, got "
                                  f"{type(slots_for).__name__}")
        routes[intent] = tuple(as_name(s, f"a slot in the route for intent {intent!r}") for s in slots_for)
    slot_positions: dict[str, list[int]] = {s[0]: [] for s in slots}
    for pid, slot, _ in positions:
        slot_positions.setdefault(slot, []).append(pid)
    reads_raw = as_list(data.get("reads", []), "reads")
    check_limit(len(reads_raw), lim.max_intents, "read entries", "max_intents")
    overrides: dict[tuple[str, str], tuple[int, ...]] = {}
    for k, d in enumerate(reads_raw):
        if not isinstance(d, dict):
            raise PolicyTypeError(f"each read entry needs intent, slot and positions, got {short_repr(d)}")
        if not {"intent", "slot", "positions"} <= set(d):
            raise PolicyError(f"each read entry needs intent, slot and positions, got {short_repr(d)}")
        check_keys(d, f"read entry {k}", READ_KEYS, READ_KEYS)
        key = (as_name(d["intent"], f"'intent' of read entry {k}"), as_name(d["slot"], f"'slot' of read entry {k}"))
        if key in overrides:
            raise PolicyError(f"read entry {key!r} is given twice")
        overrides[key] = as_int_tuple(d["positions"], f"read positions of entry {key!r}")
    return PolicyFields(name, slots, positions, attributes, routes, {k: tuple(v) for k, v in slot_positions.items()},
                        overrides, parse_rational(data.get("sensitivity", "0.6"), "sensitivity"))


def check_read_entries(fields: PolicyFields) -> None:
    """The cross-checks of the ``reads`` entries against ``routes`` and the layout (C4).

    Parameters
    ----------
    fields : PolicyFields
        The policy's fields.

    Raises
    ------
    PolicyError
        If a read entry names an unknown intent, a slot its intent's route never activates, or
        positions outside that slot.
    """
    routes, slot_positions = fields.routes, fields.slot_positions
    for (intent, slot), pos in fields.overrides.items():
        if intent not in routes:
            raise PolicyError(f"read entry names unknown intent {intent!r}")
        if slot not in routes[intent]:
            raise PolicyError(f"read entry for intent {intent!r} names slot {slot!r} the route never activates")
        own = set(slot_positions.get(slot, ()))
        bad = [i for i in pos if i not in own]
        if bad:
            raise PolicyError(f"read entry ({intent!r}, {slot!r}) names positions {bad[:20]} outside that slot")


def parse_cap(x: Any, name: str) -> Fraction:
    """A cap B_a (C5) of attribute ``name`` as an exact, finite, positive rational.

    Parameters
    ----------
    x : int, Fraction, float or str
        The cap as written (see :func:`~dpmv_lib.core.rationals.parse_rational`).
    name : str
        The attribute, for the message.

    Returns
    -------
    Fraction
        In (0, ``MAX_RATIONAL``].

    Raises
    ------
    PolicyTypeError
        If ``x`` is not a number.
    PolicyError
        If ``x`` is not finite, not a valid number, <= 0, over ``MAX_RATIONAL`` or too fine.
    """
    return parse_rational(x, f"cap B_a of attribute {name!r}")


def _slot_fields(d: Any, k: int) -> SlotFields:
    if not isinstance(d, dict):
        raise PolicyTypeError(f"each slot needs 'name' and 'views', got {short_repr(d)}")
    if "name" not in d or "views" not in d:
        raise PolicyError(f"each slot needs 'name' and 'views', got {short_repr(d)}")
    name = as_name(d["name"], f"name of slot {k}")
    check_keys(d, f"slot {name!r}", SLOT_KEYS, SLOT_KEYS)
    views = []
    for j, v in enumerate(as_list(d["views"], f"views of slot {name}")):
        if not isinstance(v, dict):
            raise PolicyTypeError(f"each view of slot {name!r} needs 'id' and 'text', got {short_repr(v)}")
        if "id" not in v or "text" not in v:
            raise PolicyError(f"each view of slot {name!r} needs 'id' and 'text', got {short_repr(v)}")
        vid = as_name(v["id"], f"id of view {j} of slot {name!r}")
        check_keys(v, f"view {vid!r}", VIEW_KEYS, frozenset({"id", "text"}))
        generic = v.get("generic", False)
        if not isinstance(generic, bool):
            raise PolicyTypeError(f"'generic' of view {vid!r} must be a JSON boolean (true/false), got "
                                  f"{type(generic).__name__} {short_repr(generic)}")
        views.append((vid, name, as_text(v["text"], f"text of view {vid!r}"),
                      as_str_tuple(v.get("cues", []), f"cues of view {vid!r}"),
                      as_str_tuple(v.get("intents", []), f"intents of view {vid!r}"), generic))
    return name, tuple(views)


def _position_fields(d: Any, k: int) -> tuple[int, str, str]:
    if not isinstance(d, dict):
        raise PolicyTypeError(f"each position needs 'id' and 'slot', got {short_repr(d)}")
    if "id" not in d or "slot" not in d:
        raise PolicyError(f"each position needs 'id' and 'slot', got {short_repr(d)}")
    pid = d["id"]
    if type(pid) is not int:
        raise PolicyTypeError(f"position id must be an integer, got {type(pid).__name__} {short_repr(pid)} "
                              f"(position {k})")
    if not -MAX_POSITION_ID - 1 <= pid <= MAX_POSITION_ID:
        raise PolicyError(f"position id {short_repr(pid)} is outside the signed 64-bit range (position {k})")
    if len(d) > 2:
        check_keys(d, f"position {pid}", POSITION_KEYS, frozenset({"id", "slot"}))
    return pid, as_name(d["slot"], f"slot of position {pid}"), as_text(d.get("label", ""), f"label of position {pid}")


def _attribute_fields(d: Any, k: int) -> tuple[str, frozenset[int], Fraction, str]:
    if not isinstance(d, dict):
        raise PolicyTypeError(f"each attribute needs 'name', 'group' and 'cap', got {short_repr(d)}")
    if not {"name", "group", "cap"} <= set(d):
        raise PolicyError(f"each attribute needs 'name', 'group' and 'cap', got {short_repr(d)}")
    name = as_name(d["name"], f"name of attribute {k}")
    check_keys(d, f"attribute {name!r}", ATTRIBUTE_KEYS, frozenset({"name", "group", "cap"}))
    return (name, frozenset(as_int_tuple(d["group"], f"group of attribute {name!r}")), parse_cap(d["cap"], name),
            as_text(d.get("description", ""), f"description of attribute {name!r}"))
