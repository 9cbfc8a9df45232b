"""The public, fixed protection policy (paper: "Slot-Level View Selection and Attribute Accounting").

A policy fixes the memory layout (positions -> slot), the protected attributes with their
groups I_a (which may overlap) and caps B_a, one shared view vocabulary V_g per slot with a
fixed generic view (C1), a router (query, released history) -> ordered active slots and a read
policy (query, slot, history) -> positions (C4). Nothing here ever looks at memory contents.
Policies are validated when built or loaded; errors name the problem.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ._exact import Number, fraction_str
from ._memo import remember
from .errors import PolicyError, QueryError, UnknownAttributeError
from .policy_format import (MAX_POSITION_ID, MAX_RATIONAL, PolicyLimits, _ATTRIBUTE_KEYS,  # noqa: F401
                            _POLICY_KEYS, _POLICY_REQUIRED, _POSITION_KEYS, _READ_KEYS, _SLOT_KEYS,
                            _VIEW_KEYS, _duplicates, _int_tuple, _keys, _limit, _limits, _list, _name,
                            _parse_json_bytes, _r, _read_bounded, _str_tuple, _text, json_depth,
                            parse_rational)


@dataclass(frozen=True)
class Query:
    """A public query: its text and public intent label (the router's only input besides history)."""

    text: str
    intent: str
    qtype: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not isinstance(self.intent, str) or not self.intent:
            raise QueryError(f"a query needs a text string and a non-empty intent string, got {self!r}")


@dataclass(frozen=True)
class View:
    """A public response-conditioning view: says how to answer, never a user fact.

    ``cues`` are memory phrases that support the view (used by the trusted scorer only);
    ``intents`` are the public query intents the view is relevant to."""

    id: str
    slot: str
    text: str
    cues: tuple[str, ...] = ()
    intents: tuple[str, ...] = ()
    generic: bool = False


@dataclass(frozen=True)
class Slot:
    name: str
    views: tuple[View, ...]

    @cached_property
    def generic(self) -> View:
        return next(v for v in self.views if v.generic)

    @property
    def view_ids(self) -> tuple[str, ...]:
        return tuple(v.id for v in self.views)


@dataclass(frozen=True)
class Position:
    id: int
    slot: str
    label: str = ""


@dataclass(frozen=True)
class Attribute:
    """A protected attribute a with its memory group I_a and precommitted cap B_a."""

    name: str
    group: frozenset[int]
    cap: Fraction
    description: str = ""


@runtime_checkable
class Router(Protocol):
    """(q_t, released history) -> ordered active slots G_t (C4). Must not read memory."""

    def route(self, query: Query, history: Sequence[Any]) -> tuple[str, ...]: ...


@runtime_checkable
class ReadPolicy(Protocol):
    """(q_t, slot, released history) -> read positions R_{t,g} (C4). Must not read memory."""

    def read(self, query: Query, slot: str, history: Sequence[Any]) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class TableRouter:
    """Routes by the query's public intent through a fixed table intent -> ordered slots."""

    routes: Mapping[str, tuple[str, ...]]

    def route(self, query: Query, history: Sequence[Any] = ()) -> tuple[str, ...]:
        try:
            return tuple(self.routes[query.intent])
        except KeyError:
            raise QueryError(f"unknown query intent {query.intent!r}; the router knows "
                             f"{sorted(self.routes)}") from None


@dataclass(frozen=True)
class TableReadPolicy:
    """Reads a fixed position list per (intent, slot); by default every position of the slot."""

    slot_positions: Mapping[str, tuple[int, ...]]
    overrides: Mapping[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)

    def read(self, query: Query, slot: str, history: Sequence[Any] = ()) -> tuple[int, ...]:
        key = (query.intent, slot)
        if key in self.overrides:
            return tuple(self.overrides[key])
        return tuple(self.slot_positions[slot])


@dataclass(frozen=True)
class Policy:
    """The public policy. Build with :meth:`from_dict` / :meth:`load` (validated)."""

    name: str
    slots: tuple[Slot, ...]
    positions: tuple[Position, ...]
    attributes: tuple[Attribute, ...]
    router: Router
    reader: ReadPolicy
    sensitivity: Fraction = Fraction(3, 5)
    intents: tuple[str, ...] = ()
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        _validate(self)

    # ---- lookups (the policy is immutable: derived lookups are computed once) ------------
    @cached_property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots)

    @cached_property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @cached_property
    def _slot_by_name(self) -> dict[str, Slot]:
        return {s.name: s for s in self.slots}

    @cached_property
    def _positions_by_slot(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {s.name: [] for s in self.slots}
        for p in self.positions:  # (one pass: _validate checked that every position's slot exists)
            out[p.slot].append(p.id)
        return {name: tuple(ids) for name, ids in out.items()}

    @cached_property
    def _position_sets(self) -> dict[str, frozenset[int]]:
        """slot -> its position ids as a set, filled per slot on its first read (so that the C4
        check of a read set is linear in the read, not in the slot)."""
        return {}

    @cached_property
    def _view_by_id(self) -> dict[str, View]:
        return {v.id: v for s in self.slots for v in s.views}

    @property
    def position_ids(self) -> tuple[int, ...]:
        return tuple(p.id for p in self.positions)

    @property
    def layout(self) -> tuple[tuple[int, str], ...]:
        """The memory layout (position id, slot) shared by adjacent stores."""
        return tuple((p.id, p.slot) for p in self.positions)

    @property
    def caps(self) -> dict[str, Fraction]:
        return {a.name: a.cap for a in self.attributes}

    def slot(self, name: str) -> Slot:
        s = self._slot_by_name.get(name) if isinstance(name, str) else None
        if s is not None:
            return s
        raise PolicyError(f"unknown slot {name!r}; the policy has {list(self.slot_names)}")

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise UnknownAttributeError(f"unknown protected attribute {name!r}; the policy has "
                                    f"{list(self.attribute_names)}")

    def view(self, view_id: str) -> View:
        v = self._view_by_id.get(view_id) if isinstance(view_id, str) else None
        if v is not None:
            return v
        raise PolicyError(f"unknown view {view_id!r}")

    def positions_of(self, slot: str) -> tuple[int, ...]:
        self.slot(slot)  # unknown slot -> PolicyError
        return self._positions_by_slot[slot]

    # ---- the policy maps of the paper ----------------------------------------------------
    # The checks below are pure functions of the router's and reader's outputs and of this
    # immutable policy, so each distinct output is checked (or mapped) once; the router and the
    # reader themselves are still asked every time (they may depend on the history). The checks
    # compare by equality, so an output equal to a checked one passes them too.
    @cached_property
    def _memo(self) -> tuple[dict[tuple[str, ...], bool], dict[tuple[str, tuple[int, ...]], bool],
                             dict[tuple[int, ...], frozenset[str]]]:
        """Routes and (slot, read set) pairs that passed their checks, and read set -> Gamma*."""
        return {}, {}, {}

    def charge_set(self, read_set: Iterable[int]) -> frozenset[str]:
        """Gamma*(R) = {a : R intersects I_a} (Eq. 5): every attribute a read touches."""
        memo = self._memo[2]
        got = memo.get(read_set) if type(read_set) is tuple else None  # (unhashable: set() raises too)
        if got is not None:
            return got
        r = set(read_set)
        out = frozenset(a.name for a in self.attributes if r & a.group)
        if type(read_set) is tuple:
            remember(memo, read_set, out, 4096)
        return out

    def route(self, query: Query, history: Sequence[Any] = ()) -> tuple[str, ...]:
        """G_t = Slot(q_t, released history), validated against the policy's slots (C4)."""
        slots = tuple(self.router.route(query, history))
        try:
            if slots in self._memo[0]:
                return slots
        except TypeError:  # (unhashable: reported as an unknown slot below)
            pass
        for s in slots:
            if s not in self.slot_names:
                raise PolicyError(f"router returned unknown slot {s!r} for intent {query.intent!r}")
        if len(set(slots)) != len(slots):
            raise PolicyError(f"router returned a slot twice for intent {query.intent!r}: {slots}")
        remember(self._memo[0], slots, True, 4096)
        return slots

    def read(self, query: Query, slot: str, history: Sequence[Any] = ()) -> tuple[int, ...]:
        """R_{t,g}: positions read for one active slot; must lie in that slot (C4)."""
        own = self.positions_of(slot)  # unknown slot -> PolicyError before the reader runs
        read = tuple(self.reader.read(query, slot, history))
        try:
            if (slot, read) in self._memo[1]:
                return read
            ok = True
        except TypeError:  # (unhashable positions: checked, not remembered)
            ok = False
        if ok:  # (hashable: checked against the slot's position set)
            members = self._position_sets.get(slot)
            if members is None:
                members = self._position_sets[slot] = frozenset(own)
            bad = [i for i in read if i not in members]
        else:
            bad = [i for i in read if i not in own]
        if bad:
            raise PolicyError(f"read policy returned positions {bad} outside slot {slot!r}")
        if ok:
            remember(self._memo[1], (slot, read), True, 4096)
        return read

    def with_caps(self, caps: Mapping[str, Number] | Number) -> "Policy":
        """A copy with new caps B_a (one number for all attributes, or a mapping)."""
        if not isinstance(caps, Mapping):
            caps = {a.name: caps for a in self.attributes}
        for name in caps:
            self.attribute(name)
        attrs = tuple(replace(a, cap=_cap(caps[a.name], a.name)) if a.name in caps else a
                      for a in self.attributes)
        src = dict(self.source)
        if src:
            src["attributes"] = [dict(d, cap=fraction_str(_cap(caps[d["name"]], d["name"])))
                                 if d["name"] in caps else d for d in src["attributes"]]
        return replace(self, attributes=attrs, source=src)

    # ---- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        if not self.source:
            raise PolicyError("this policy was built from code objects (custom router); only policies "
                              "built by Policy.from_dict/load can be serialised")
        return json.loads(json.dumps(self.source))

    def fingerprint(self) -> str:
        """sha256 of the canonical public policy (caps included): ties ledgers to a policy."""
        body = self.to_dict() if self.source else {
            "name": self.name, "layout": self.layout, "sensitivity": fraction_str(self.sensitivity),
            "attributes": [[a.name, sorted(a.group), fraction_str(a.cap)] for a in self.attributes],
            "views": [[s.name, list(s.view_ids)] for s in self.slots]}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path, *, limits: PolicyLimits | None = None) -> "Policy":
        """Read and validate a policy file. Every failure (missing file, directory, unreadable,
        too large, not UTF-8, empty, not JSON, nested too deeply, malformed policy) raises
        :class:`PolicyError` naming the file and the problem; see :class:`PolicyLimits`."""
        lim = _limits(limits)
        path = Path(path)
        raw = _read_bounded(path, lim.max_bytes, "policy file", PolicyError)
        data = _parse_json_bytes(raw, path, lim.max_depth, "policy file", PolicyError)
        try:
            return cls._from_plain(data, lim)
        except PolicyError as exc:
            raise type(exc)(f"policy file {path}: {exc}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, limits: PolicyLimits | None = None) -> "Policy":
        """Build and validate a policy from its JSON form (see ``data/policy/`` for an example)::

            {"name": ..., "sensitivity": "0.6",
             "slots": [{"name": "food", "views": [{"id": "food.generic", "text": ..., "generic": true},
                                                  {"id": "food.low_sugar", "text": ..., "cues": [...],
                                                   "intents": [...]}]}],
             "positions": [{"id": 1, "slot": "food", "label": ...}],
             "attributes": [{"name": "diabetes", "group": [1, 2, 3], "cap": "2"}],
             "routes": {"intent": ["food", "finance"]},
             "reads": [{"intent": ..., "slot": ..., "positions": [...]}]}   # optional

        The format is strict: names and ids are non-empty strings, ``generic`` is a JSON
        boolean, unknown keys are refused at every level, caps and the sensitivity are bounded
        positive rationals (:func:`parse_rational`), and the counts obey ``limits``.
        """
        lim = _limits(limits)
        if not isinstance(data, Mapping):
            raise PolicyError(f"a policy must be a JSON object, got {type(data).__name__}")
        routes_raw = data.get("routes")
        if isinstance(routes_raw, Mapping):
            bad = [k for k in routes_raw if not isinstance(k, str)]
            if bad:
                raise PolicyError(f"policy 'routes' keys (intents) must be strings, got {_r(bad[0])}")
        try:  # parse the plain-JSON form (also what the fingerprint and to_dict() use)
            data = json.loads(json.dumps(data))
        except (TypeError, ValueError, RecursionError) as exc:
            raise PolicyError(f"a policy must be plain JSON data (objects, lists, strings, numbers): "
                              f"{_r(str(exc))}") from None
        return cls._from_plain(data, lim)

    @classmethod
    def _from_plain(cls, data: Any, lim: PolicyLimits) -> "Policy":
        """from_dict on freshly parsed JSON (owned by this call, so it becomes ``source``)."""
        if not isinstance(data, dict):
            raise PolicyError(f"a policy must be a JSON object, got {type(data).__name__}")
        _keys(data, "policy", _POLICY_KEYS, _POLICY_REQUIRED)
        name = _name(data["name"], "policy 'name'")
        if "description" in data:
            _text(data["description"], "policy 'description'")
        if "version" in data and (isinstance(data["version"], bool)
                                  or not isinstance(data["version"], (str, int))):
            raise PolicyError(f"policy 'version' must be a string or an integer, got {_r(data['version'])}")
        slots_raw = _list(data["slots"], "slots")
        _limit(len(slots_raw), lim.max_slots, "slots", "max_slots")
        n_views = sum(len(d["views"]) for d in slots_raw
                      if isinstance(d, dict) and isinstance(d.get("views"), list))
        _limit(n_views, lim.max_views, "views (all slots together)", "max_views")
        positions_raw = _list(data["positions"], "positions")
        _limit(len(positions_raw), lim.max_positions, "positions", "max_positions")
        attributes_raw = _list(data["attributes"], "attributes")
        _limit(len(attributes_raw), lim.max_attributes, "attributes", "max_attributes")
        slots = tuple(_slot_from(d, i) for i, d in enumerate(slots_raw))
        positions = tuple(_position_from(d, i) for i, d in enumerate(positions_raw))
        attributes = tuple(_attribute_from(d, i) for i, d in enumerate(attributes_raw))
        routes_raw = data["routes"]
        if not isinstance(routes_raw, dict) or not routes_raw:
            raise PolicyError("policy 'routes' must be a non-empty object intent -> [slots]")
        _limit(len(routes_raw), lim.max_intents, "intents in 'routes'", "max_intents")
        routes = {}
        for intent, slots_for in routes_raw.items():
            _name(intent, "an intent in 'routes'")
            if not isinstance(slots_for, list):
                raise PolicyError(f"route for intent {intent!r} must be a list of slot names, got "
                                  f"{type(slots_for).__name__}")
            routes[intent] = tuple(_name(s, f"a slot in the route for intent {intent!r}") for s in slots_for)
        slot_positions: dict[str, list[int]] = {s.name: [] for s in slots}
        for p in positions:
            slot_positions.setdefault(p.slot, []).append(p.id)
        reads_raw = _list(data.get("reads", []), "reads")
        _limit(len(reads_raw), lim.max_intents, "read entries", "max_intents")
        overrides: dict[tuple[str, str], tuple[int, ...]] = {}
        for k, d in enumerate(reads_raw):
            if not isinstance(d, dict):
                raise PolicyError(f"each read entry needs intent, slot and positions, got {_r(d)}")
            if not {"intent", "slot", "positions"} <= set(d):
                raise PolicyError(f"each read entry needs intent, slot and positions, got {_r(d)}")
            _keys(d, f"read entry {k}", _READ_KEYS, _READ_KEYS)
            key = (_name(d["intent"], f"'intent' of read entry {k}"), _name(d["slot"], f"'slot' of read entry {k}"))
            if key in overrides:
                raise PolicyError(f"read entry {key!r} is given twice")
            overrides[key] = _int_tuple(d["positions"], f"read positions of entry {key!r}")
        policy = cls(
            name=name, slots=slots, positions=positions, attributes=attributes,
            router=TableRouter(routes),
            reader=TableReadPolicy({k: tuple(v) for k, v in slot_positions.items()}, overrides),
            sensitivity=parse_rational(data.get("sensitivity", "0.6"), "sensitivity"),
            intents=tuple(routes), source=data)
        for (intent, slot), pos in overrides.items():
            if intent not in routes:
                raise PolicyError(f"read entry names unknown intent {intent!r}")
            if slot not in routes[intent]:
                raise PolicyError(f"read entry for intent {intent!r} names slot {slot!r} the route never activates")
            own = set(slot_positions.get(slot, ()))
            bad = [i for i in pos if i not in own]
            if bad:
                raise PolicyError(f"read entry ({intent!r}, {slot!r}) names positions {bad[:20]} outside that slot")
        return policy


def _cap(x: Any, name: str) -> Fraction:
    return parse_rational(x, f"cap B_a of attribute {name!r}")


def _slot_from(d: Any, k: int) -> Slot:
    if not isinstance(d, dict) or "name" not in d or "views" not in d:
        raise PolicyError(f"each slot needs 'name' and 'views', got {_r(d)}")
    name = _name(d["name"], f"name of slot {k}")
    _keys(d, f"slot {name!r}", _SLOT_KEYS, _SLOT_KEYS)
    views = []
    for j, v in enumerate(_list(d["views"], f"views of slot {name}")):
        if not isinstance(v, dict) or "id" not in v or "text" not in v:
            raise PolicyError(f"each view of slot {name!r} needs 'id' and 'text', got {_r(v)}")
        vid = _name(v["id"], f"id of view {j} of slot {name!r}")
        _keys(v, f"view {vid!r}", _VIEW_KEYS, frozenset({"id", "text"}))
        generic = v.get("generic", False)
        if not isinstance(generic, bool):
            raise PolicyError(f"'generic' of view {vid!r} must be a JSON boolean (true/false), got "
                              f"{type(generic).__name__} {_r(generic)}")
        views.append(View(id=vid, slot=name, text=_text(v["text"], f"text of view {vid!r}"),
                          cues=_str_tuple(v.get("cues", []), f"cues of view {vid!r}"),
                          intents=_str_tuple(v.get("intents", []), f"intents of view {vid!r}"),
                          generic=generic))
    return Slot(name=name, views=tuple(views))


def _position_from(d: Any, k: int) -> Position:
    if not isinstance(d, dict) or "id" not in d or "slot" not in d:
        raise PolicyError(f"each position needs 'id' and 'slot', got {_r(d)}")
    pid = d["id"]
    if type(pid) is not int:
        raise PolicyError(f"position id must be an integer, got {type(pid).__name__} {_r(pid)} (position {k})")
    if not -MAX_POSITION_ID - 1 <= pid <= MAX_POSITION_ID:
        raise PolicyError(f"position id {_r(pid)} is outside the signed 64-bit range (position {k})")
    if len(d) > 2:
        _keys(d, f"position {pid}", _POSITION_KEYS, frozenset({"id", "slot"}))
    return Position(id=pid, slot=_name(d["slot"], f"slot of position {pid}"),
                    label=_text(d.get("label", ""), f"label of position {pid}"))


def _attribute_from(d: Any, k: int) -> Attribute:
    if not isinstance(d, dict) or not {"name", "group", "cap"} <= set(d):
        raise PolicyError(f"each attribute needs 'name', 'group' and 'cap', got {_r(d)}")
    name = _name(d["name"], f"name of attribute {k}")
    _keys(d, f"attribute {name!r}", _ATTRIBUTE_KEYS, frozenset({"name", "group", "cap"}))
    return Attribute(name=name, group=frozenset(_int_tuple(d["group"], f"group of attribute {name!r}")),
                     cap=_cap(d["cap"], name), description=_text(d.get("description", ""),
                                                                 f"description of attribute {name!r}"))


def _validate(p: Policy) -> None:
    """Cross-reference checks (linear time: sets and dicts), also for policies built in code."""
    if not isinstance(p.name, str):
        raise PolicyError(f"policy name must be a string, got {type(p.name).__name__}")
    if not p.slots:
        raise PolicyError("policy has no slots")
    names = [s.name for s in p.slots]
    for n in names:
        if not isinstance(n, str) or not n.strip():
            raise PolicyError(f"slot names must be non-empty strings, got {_r(n)}")
    dup = _duplicates(names)
    if dup:
        raise PolicyError(f"duplicate slot names {dup[:20]}")
    name_set = set(names)
    seen_views: set[str] = set()
    for s in p.slots:
        if not s.views:
            raise PolicyError(f"slot {s.name!r} has an empty view vocabulary")
        generics = [v.id for v in s.views if v.generic]
        if len(generics) != 1:
            raise PolicyError(f"slot {s.name!r} must have exactly one fixed generic view, has {len(generics)}")
        for v in s.views:
            if not isinstance(v.id, str) or not v.id.strip():
                raise PolicyError(f"view ids must be non-empty strings, got {_r(v.id)} in slot {s.name!r}")
            if not isinstance(v.text, str):
                raise PolicyError(f"text of view {v.id!r} must be a string, got {type(v.text).__name__}")
            if not isinstance(v.generic, bool):
                raise PolicyError(f"'generic' of view {v.id!r} must be a bool, got {_r(v.generic)}")
            if v.slot != s.name:
                raise PolicyError(f"view {v.id!r} is listed under slot {s.name!r} but says slot {v.slot!r}")
            if v.id in seen_views:
                raise PolicyError(f"duplicate view id {v.id!r}")
            seen_views.add(v.id)
    if not p.positions:
        raise PolicyError("policy has no memory positions")
    ids = [q.id for q in p.positions]
    for q in p.positions:
        if type(q.id) is not int:
            raise PolicyError(f"position id must be an integer, got {_r(q.id)}")
        if q.slot not in name_set:
            raise PolicyError(f"position {q.id} names unknown slot {_r(q.slot)}")
    dup_ids = _duplicates(ids)
    if dup_ids:
        raise PolicyError(f"duplicate position ids {dup_ids[:20]}")
    anames = [a.name for a in p.attributes]
    for n in anames:
        if not isinstance(n, str) or not n.strip():
            raise PolicyError(f"attribute names must be non-empty strings, got {_r(n)}")
    dup_a = _duplicates(anames)
    if dup_a:
        raise PolicyError(f"duplicate attribute names {dup_a[:20]}")
    idset = set(ids)
    for a in p.attributes:
        if not isinstance(a.group, frozenset):
            raise PolicyError(f"group I_a of attribute {a.name!r} must be a frozenset of position ids")
        if not a.group:
            raise PolicyError(f"attribute {a.name!r} has an empty group I_a")
        unknown = sorted(a.group - idset, key=repr)
        if unknown:
            raise PolicyError(f"group I_a of attribute {a.name!r} names unknown positions {unknown[:20]}")
        if not isinstance(a.cap, Fraction) or a.cap <= 0:
            raise PolicyError(f"cap of attribute {a.name!r} must be a positive exact number, got {a.cap!r}")
        parse_rational(a.cap, f"cap B_a of attribute {a.name!r}")
    if not isinstance(p.sensitivity, Fraction) or p.sensitivity <= 0:
        raise PolicyError(f"sensitivity must be a positive exact number, got {p.sensitivity!r}")
    parse_rational(p.sensitivity, "sensitivity")
    if isinstance(p.router, TableRouter):
        for intent, slots in p.router.routes.items():
            for s in slots:
                if s not in name_set:
                    raise PolicyError(f"route for intent {intent!r} names unknown slot {s!r}")
            if len(set(slots)) != len(slots):
                raise PolicyError(f"route for intent {intent!r} repeats a slot: {list(slots)}")
