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
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ._exact import Number, fraction_str, to_fraction
from .errors import PolicyError, QueryError, UnknownAttributeError


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

    @property
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

    # ---- lookups -------------------------------------------------------------------------
    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

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
        for s in self.slots:
            if s.name == name:
                return s
        raise PolicyError(f"unknown slot {name!r}; the policy has {list(self.slot_names)}")

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise UnknownAttributeError(f"unknown protected attribute {name!r}; the policy has "
                                    f"{list(self.attribute_names)}")

    def view(self, view_id: str) -> View:
        for s in self.slots:
            for v in s.views:
                if v.id == view_id:
                    return v
        raise PolicyError(f"unknown view {view_id!r}")

    def positions_of(self, slot: str) -> tuple[int, ...]:
        self.slot(slot)
        return tuple(p.id for p in self.positions if p.slot == slot)

    # ---- the policy maps of the paper ----------------------------------------------------
    def charge_set(self, read_set: Iterable[int]) -> frozenset[str]:
        """Gamma*(R) = {a : R intersects I_a} (Eq. 5): every attribute a read touches."""
        r = set(read_set)
        return frozenset(a.name for a in self.attributes if r & a.group)

    def route(self, query: Query, history: Sequence[Any] = ()) -> tuple[str, ...]:
        """G_t = Slot(q_t, released history), validated against the policy's slots (C4)."""
        slots = tuple(self.router.route(query, history))
        for s in slots:
            if s not in self.slot_names:
                raise PolicyError(f"router returned unknown slot {s!r} for intent {query.intent!r}")
        if len(set(slots)) != len(slots):
            raise PolicyError(f"router returned a slot twice for intent {query.intent!r}: {slots}")
        return slots

    def read(self, query: Query, slot: str, history: Sequence[Any] = ()) -> tuple[int, ...]:
        """R_{t,g}: positions read for one active slot; must lie in that slot (C4)."""
        own = set(self.positions_of(slot))  # unknown slot -> PolicyError before the reader runs
        read = tuple(self.reader.read(query, slot, history))
        bad = [i for i in read if i not in own]
        if bad:
            raise PolicyError(f"read policy returned positions {bad} outside slot {slot!r}")
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
    def load(cls, path: str | Path) -> "Policy":
        path = Path(path)
        if not path.exists():
            raise PolicyError(f"policy file not found: {path}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise PolicyError(f"policy file {path} is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Policy":
        """Build and validate a policy from its JSON form (see ``data/policy/`` for an example)::

            {"name": ..., "sensitivity": "0.6",
             "slots": [{"name": "food", "views": [{"id": "food.generic", "text": ..., "generic": true},
                                                  {"id": "food.low_sugar", "text": ..., "cues": [...],
                                                   "intents": [...]}]}],
             "positions": [{"id": 1, "slot": "food", "label": ...}],
             "attributes": [{"name": "diabetes", "group": [1, 2, 3], "cap": "2"}],
             "routes": {"intent": ["food", "finance"]},
             "reads": [{"intent": ..., "slot": ..., "positions": [...]}]}   # optional
        """
        if not isinstance(data, Mapping):
            raise PolicyError(f"a policy must be a JSON object, got {type(data).__name__}")
        try:  # parse the plain-JSON form (also what the fingerprint and to_dict() use)
            data = json.loads(json.dumps(data))
        except (TypeError, ValueError, RecursionError) as exc:
            raise PolicyError(f"a policy must be plain JSON data (objects, lists, strings, numbers): {exc}") from None
        for key in ("name", "slots", "positions", "attributes", "routes"):
            if key not in data:
                raise PolicyError(f"policy is missing the required key {key!r}")
        unknown = set(data) - {"name", "slots", "positions", "attributes", "routes", "reads",
                               "sensitivity", "description", "version"}
        if unknown:
            raise PolicyError(f"policy has unknown keys {sorted(unknown)}")
        slots = tuple(_slot_from(d) for d in _list(data["slots"], "slots"))
        positions = tuple(_position_from(d) for d in _list(data["positions"], "positions"))
        attributes = tuple(_attribute_from(d) for d in _list(data["attributes"], "attributes"))
        routes_raw = data["routes"]
        if not isinstance(routes_raw, Mapping) or not routes_raw:
            raise PolicyError("policy 'routes' must be a non-empty object intent -> [slots]")
        routes = {}
        for intent, slots_for in routes_raw.items():
            if not isinstance(slots_for, list) or not all(isinstance(s, str) for s in slots_for):
                raise PolicyError(f"route for intent {intent!r} must be a list of slot names")
            routes[str(intent)] = tuple(slots_for)
        slot_positions: dict[str, list[int]] = {s.name: [] for s in slots}
        for p in positions:
            slot_positions.setdefault(p.slot, []).append(p.id)
        overrides = {}
        for d in _list(data.get("reads", []), "reads"):
            if not isinstance(d, Mapping) or not {"intent", "slot", "positions"} <= set(d):
                raise PolicyError(f"each read entry needs intent, slot and positions, got {d!r}")
            overrides[(str(d["intent"]), str(d["slot"]))] = tuple(_int_list(d["positions"], "read positions"))
        policy = cls(
            name=str(data["name"]), slots=slots, positions=positions, attributes=attributes,
            router=TableRouter(routes),
            reader=TableReadPolicy({k: tuple(v) for k, v in slot_positions.items()}, overrides),
            sensitivity=to_fraction(data.get("sensitivity", "0.6"), "sensitivity", positive=True,
                                    error=PolicyError),
            intents=tuple(routes), source=json.loads(json.dumps(data)))
        for (intent, slot), pos in overrides.items():
            if intent not in routes:
                raise PolicyError(f"read entry names unknown intent {intent!r}")
            if slot not in routes[intent]:
                raise PolicyError(f"read entry for intent {intent!r} names slot {slot!r} the route never activates")
            own = set(slot_positions.get(slot, ()))
            bad = [i for i in pos if i not in own]
            if bad:
                raise PolicyError(f"read entry ({intent!r}, {slot!r}) names positions {bad} outside that slot")
        return policy


def _list(x: Any, what: str) -> list:
    if not isinstance(x, list):
        raise PolicyError(f"policy {what!r} must be a list, got {type(x).__name__}")
    return x


def _int_list(x: Any, what: str) -> list[int]:
    if not isinstance(x, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in x):
        raise PolicyError(f"{what} must be a list of integers, got {x!r}")
    return x


def _str_tuple(x: Any, what: str) -> tuple[str, ...]:
    if not isinstance(x, (list, tuple)) or not all(isinstance(i, str) for i in x):
        raise PolicyError(f"{what} must be a list of strings, got {x!r}")
    return tuple(x)


def _cap(x: Any, name: str) -> Fraction:
    return to_fraction(x, f"cap B_a of attribute {name!r}", positive=True, error=PolicyError)


def _slot_from(d: Any) -> Slot:
    if not isinstance(d, Mapping) or "name" not in d or "views" not in d:
        raise PolicyError(f"each slot needs 'name' and 'views', got {d!r}")
    name = str(d["name"])
    views = []
    for v in _list(d["views"], f"views of slot {name}"):
        if not isinstance(v, Mapping) or "id" not in v or "text" not in v:
            raise PolicyError(f"each view of slot {name!r} needs 'id' and 'text', got {v!r}")
        views.append(View(id=str(v["id"]), slot=name, text=str(v["text"]),
                          cues=_str_tuple(v.get("cues", []), f"cues of view {v['id']}"),
                          intents=_str_tuple(v.get("intents", []), f"intents of view {v['id']}"),
                          generic=bool(v.get("generic", False))))
    return Slot(name=name, views=tuple(views))


def _position_from(d: Any) -> Position:
    if not isinstance(d, Mapping) or "id" not in d or "slot" not in d:
        raise PolicyError(f"each position needs 'id' and 'slot', got {d!r}")
    if not isinstance(d["id"], int) or isinstance(d["id"], bool):
        raise PolicyError(f"position id must be an integer, got {d['id']!r}")
    return Position(id=d["id"], slot=str(d["slot"]), label=str(d.get("label", "")))


def _attribute_from(d: Any) -> Attribute:
    if not isinstance(d, Mapping) or not {"name", "group", "cap"} <= set(d):
        raise PolicyError(f"each attribute needs 'name', 'group' and 'cap', got {d!r}")
    name = str(d["name"])
    return Attribute(name=name, group=frozenset(_int_list(d["group"], f"group of attribute {name!r}")),
                     cap=_cap(d["cap"], name), description=str(d.get("description", "")))


def _validate(p: Policy) -> None:
    if not p.slots:
        raise PolicyError("policy has no slots")
    names = [s.name for s in p.slots]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise PolicyError(f"duplicate slot names {sorted(dup)}")
    seen_views: set[str] = set()
    for s in p.slots:
        if not s.views:
            raise PolicyError(f"slot {s.name!r} has an empty view vocabulary")
        generics = [v.id for v in s.views if v.generic]
        if len(generics) != 1:
            raise PolicyError(f"slot {s.name!r} must have exactly one fixed generic view, has {len(generics)}")
        for v in s.views:
            if v.slot != s.name:
                raise PolicyError(f"view {v.id!r} is listed under slot {s.name!r} but says slot {v.slot!r}")
            if v.id in seen_views:
                raise PolicyError(f"duplicate view id {v.id!r}")
            seen_views.add(v.id)
    if not p.positions:
        raise PolicyError("policy has no memory positions")
    ids = [q.id for q in p.positions]
    dup_ids = {i for i in ids if ids.count(i) > 1}
    if dup_ids:
        raise PolicyError(f"duplicate position ids {sorted(dup_ids)}")
    for q in p.positions:
        if q.slot not in names:
            raise PolicyError(f"position {q.id} names unknown slot {q.slot!r}")
    anames = [a.name for a in p.attributes]
    dup_a = {n for n in anames if anames.count(n) > 1}
    if dup_a:
        raise PolicyError(f"duplicate attribute names {sorted(dup_a)}")
    idset = set(ids)
    for a in p.attributes:
        if not a.group:
            raise PolicyError(f"attribute {a.name!r} has an empty group I_a")
        unknown = sorted(a.group - idset)
        if unknown:
            raise PolicyError(f"group I_a of attribute {a.name!r} names unknown positions {unknown}")
        if not isinstance(a.cap, Fraction) or a.cap <= 0:
            raise PolicyError(f"cap of attribute {a.name!r} must be a positive exact number, got {a.cap!r}")
    if not isinstance(p.sensitivity, Fraction) or p.sensitivity <= 0:
        raise PolicyError(f"sensitivity must be a positive exact number, got {p.sensitivity!r}")
    if isinstance(p.router, TableRouter):
        for intent, slots in p.router.routes.items():
            for s in slots:
                if s not in names:
                    raise PolicyError(f"route for intent {intent!r} names unknown slot {s!r}")
            if len(set(slots)) != len(slots):
                raise PolicyError(f"route for intent {intent!r} repeats a slot: {list(slots)}")
