"""The parts of a public policy (queries, views, slots, positions, attributes, the router and the
read policy) and how a policy's JSON form is parsed into them and cross-checked.

:class:`~dpmv_lib.core.policy.Policy` (in :mod:`dpmv_lib.core.policy`, which re-exports every
name here) holds these parts; nothing here ever looks at memory contents (C4).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from fractions import Fraction
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from .errors import PolicyError, PolicyTypeError, QueryError, QueryTypeError
from .policy_format import (MAX_POSITION_ID, PolicyLimits, ATTRIBUTE_KEYS, POLICY_KEYS, POLICY_REQUIRED,
                            POSITION_KEYS, READ_KEYS, SLOT_KEYS, VIEW_KEYS, duplicates, as_int_tuple, check_keys,
                            check_limit, as_list, as_name, short_repr, as_str_tuple, as_text, parse_rational)


@dataclass(frozen=True)
class Query:
    """A public query: its text and public intent label (the router's only input besides history).

    Parameters
    ----------
    text : str
        The query text (public).
    intent : str
        Its public intent label (non-empty): what a :class:`TableRouter` routes on (C4).
    qtype : str, optional
        A public query-type tag (benchmark bookkeeping; not used by the policy), default "".

    Raises
    ------
    QueryTypeError
        If ``text`` or ``intent`` is not a string.
    QueryError
        If ``intent`` is empty.

    Examples
    --------
    >>> Query("Any ideas for an affordable dinner?", "affordable_dinner").intent
    'affordable_dinner'
    """

    text: str
    intent: str
    qtype: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not isinstance(self.intent, str):
            raise QueryTypeError(f"a query needs a text string and a non-empty intent string, got {self!r}")
        if not self.intent:
            raise QueryError(f"a query needs a text string and a non-empty intent string, got {self!r}")


@dataclass(frozen=True)
class View:
    """A public response-conditioning view: says how to answer, never a user fact.

    Views are parts of a slot's fixed public vocabulary V_g (C1); :class:`~dpmv_lib.core.policy.Policy` validates them.

    Parameters
    ----------
    id : str
        Unique view id, e.g. ``"food.low_sugar"``.
    slot : str
        The slot whose vocabulary holds the view.
    text : str
        The guidance handed to the response model.
    cues : tuple of str, optional
        Memory phrases that support the view (read by the trusted scorer only).
    intents : tuple of str, optional
        The public query intents the view is relevant to.
    generic : bool, optional
        True for the slot's fixed generic view (the zero-cost fallback of C5).
    """

    id: str
    slot: str
    text: str
    cues: tuple[str, ...] = ()
    intents: tuple[str, ...] = ()
    generic: bool = False


@dataclass(frozen=True)
class Slot:
    """A slot g with its shared public view vocabulary V_g (C1: the same on M and M').

    Parameters
    ----------
    name : str
        The slot name.
    views : tuple of View
        V_g, exactly one of them generic (checked by :class:`~dpmv_lib.core.policy.Policy`).
    """

    name: str
    views: tuple[View, ...]

    @cached_property
    def generic(self) -> View:
        """The fixed generic view of V_g (released at zero cost when a cap blocks, C5)."""
        return next(v for v in self.views if v.generic)

    @property
    def view_ids(self) -> tuple[str, ...]:
        """The ids of V_g, in vocabulary order."""
        return tuple(v.id for v in self.views)


@dataclass(frozen=True)
class Position:
    """One memory position of the fixed layout.

    Parameters
    ----------
    id : int
        Position id (a signed 64-bit integer).
    slot : str
        The slot the position belongs to.
    label : str, optional
        A public description of what the position holds.
    """

    id: int
    slot: str
    label: str = ""


@dataclass(frozen=True)
class Attribute:
    """A protected attribute a with its memory group I_a and precommitted cap B_a.

    Parameters
    ----------
    name : str
        Attribute name.
    group : frozenset of int
        I_a: the positions whose contents may differ between adjacent stores M ~_a M'.
    cap : Fraction
        B_a > 0, the total eps ever charged to a (C5: L_a <= B_a).
    description : str, optional
        A public description.
    """

    name: str
    group: frozenset[int]
    cap: Fraction
    description: str = ""


@runtime_checkable
class Router(Protocol):
    """(q_t, released history) -> ordered active slots G_t (C4). Must not read memory."""

    def route(self, query: Query, history: Sequence[Any]) -> tuple[str, ...]:
        """The active slots for a query.

        Parameters
        ----------
        query : Query
            The public query q_t.
        history : sequence
            The releases made so far (public).

        Returns
        -------
        tuple of str
            G_t, ordered; :meth:`~dpmv_lib.core.policy.Policy.route` checks them against the policy (C4).
        """
        ...


@runtime_checkable
class ReadPolicy(Protocol):
    """(q_t, slot, released history) -> read positions R_{t,g} (C4). Must not read memory."""

    def read(self, query: Query, slot: str, history: Sequence[Any]) -> tuple[int, ...]:
        """The positions read for one active slot.

        Parameters
        ----------
        query : Query
            The public query q_t.
        slot : str
            An active slot g.
        history : sequence
            The releases made so far (public).

        Returns
        -------
        tuple of int
            R_{t,g}; :meth:`~dpmv_lib.core.policy.Policy.read` checks that they lie in the slot (C4).
        """
        ...


@dataclass(frozen=True)
class TableRouter:
    """Routes by the query's public intent through a fixed table intent -> ordered slots.

    Parameters
    ----------
    routes : Mapping of str to tuple of str
        intent -> the ordered active slots.
    """

    routes: Mapping[str, tuple[str, ...]]

    def route(self, query: Query, history: Sequence[Any] = ()) -> tuple[str, ...]:
        """G_t = routes[q_t.intent] (the history is not used).

        Parameters
        ----------
        query : Query
            The public query.
        history : sequence, optional
            Ignored.

        Returns
        -------
        tuple of str
            The active slots of the query's intent.

        Raises
        ------
        QueryTypeError
            If ``query`` has no ``intent`` (is not a :class:`Query`).
        QueryError
            If the table has no route for the intent.
        """
        try:
            return tuple(self.routes[query.intent])
        except KeyError:
            raise QueryError(f"unknown query intent {query.intent!r}; the router knows "
                             f"{sorted(self.routes)}") from None
        except AttributeError:
            raise QueryTypeError(f"a router needs a Query, got {type(query).__name__}") from None


@dataclass(frozen=True)
class TableReadPolicy:
    """Reads a fixed position list per (intent, slot); by default every position of the slot.

    Parameters
    ----------
    slot_positions : Mapping of str to tuple of int
        slot -> all its positions (the default read).
    overrides : Mapping of (str, str) to tuple of int, optional
        (intent, slot) -> the positions read instead.
    """

    slot_positions: Mapping[str, tuple[int, ...]]
    overrides: Mapping[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)

    def read(self, query: Query, slot: str, history: Sequence[Any] = ()) -> tuple[int, ...]:
        """R_{t,g}: the override for (q_t.intent, slot), else every position of the slot.

        Parameters
        ----------
        query : Query
            The public query.
        slot : str
            An active slot.
        history : sequence, optional
            Ignored.

        Returns
        -------
        tuple of int
            The read positions.

        Raises
        ------
        QueryTypeError
            If ``query`` has no ``intent`` (is not a :class:`Query`).
        KeyError
            If ``slot`` is not in ``slot_positions`` (:meth:`~dpmv_lib.core.policy.Policy.read` checks the slot first).
        """
        try:
            key = (query.intent, slot)
        except AttributeError:
            raise QueryTypeError(f"a read policy needs a Query, got {type(query).__name__}") from None
        if key in self.overrides:
            return tuple(self.overrides[key])
        return tuple(self.slot_positions[slot])


# ---- parsing the JSON form (Policy.from_dict / Policy.load) ----------------------------------------
def policy_from_plain(cls: Any, data: Any, lim: PolicyLimits) -> Any:
    """A policy from its parsed JSON form: the parts, the C4 router and read policy, the C5 caps.

    Parameters
    ----------
    cls : type
        The policy class (:class:`~dpmv_lib.core.policy.Policy`), called with the parsed parts.
    data : object
        Freshly parsed JSON owned by this call: it becomes the policy's ``source``, uncopied.
    lim : PolicyLimits
        The size limits, checked before any part is built.

    Returns
    -------
    Policy
        ``cls(...)``, validated by its constructor (:func:`validate_policy`).

    Raises
    ------
    PolicyTypeError
        If ``data`` or a field of it has the wrong JSON type.
    PolicyError
        If a key is missing or unknown, a size limit is exceeded, a name is empty, ``routes`` is
        empty, a position id is outside the signed 64-bit range, a position list repeats an id, a cap
        or the sensitivity is not a valid positive rational, a read entry is repeated or names an
        unknown intent, a slot its intent's route never activates or positions outside that slot, or
        the parts do not cross-check (:func:`validate_policy`).
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
    slots = tuple(_slot_from(d, i) for i, d in enumerate(slots_raw))
    positions = tuple(_position_from(d, i) for i, d in enumerate(positions_raw))
    attributes = tuple(_attribute_from(d, i) for i, d in enumerate(attributes_raw))
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
    slot_positions: dict[str, list[int]] = {s.name: [] for s in slots}
    for p in positions:
        slot_positions.setdefault(p.slot, []).append(p.id)
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


def parse_cap(x: Any, name: str) -> Fraction:
    """A cap B_a (C5) of attribute ``name`` as an exact, finite, positive rational.

    Parameters
    ----------
    x : int, Fraction, float or str
        The cap as written (see :func:`~dpmv_lib.core.policy_format.parse_rational`).
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


def _slot_from(d: Any, k: int) -> Slot:
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
        views.append(View(id=vid, slot=name, text=as_text(v["text"], f"text of view {vid!r}"),
                          cues=as_str_tuple(v.get("cues", []), f"cues of view {vid!r}"),
                          intents=as_str_tuple(v.get("intents", []), f"intents of view {vid!r}"),
                          generic=generic))
    return Slot(name=name, views=tuple(views))


def _position_from(d: Any, k: int) -> Position:
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
    return Position(id=pid, slot=as_name(d["slot"], f"slot of position {pid}"),
                    label=as_text(d.get("label", ""), f"label of position {pid}"))


def _attribute_from(d: Any, k: int) -> Attribute:
    if not isinstance(d, dict):
        raise PolicyTypeError(f"each attribute needs 'name', 'group' and 'cap', got {short_repr(d)}")
    if not {"name", "group", "cap"} <= set(d):
        raise PolicyError(f"each attribute needs 'name', 'group' and 'cap', got {short_repr(d)}")
    name = as_name(d["name"], f"name of attribute {k}")
    check_keys(d, f"attribute {name!r}", ATTRIBUTE_KEYS, frozenset({"name", "group", "cap"}))
    return Attribute(name=name, group=frozenset(as_int_tuple(d["group"], f"group of attribute {name!r}")),
                     cap=parse_cap(d["cap"], name), description=as_text(d.get("description", ""),
                                                                 f"description of attribute {name!r}"))


def validate_policy(p: Any) -> None:
    """The cross-checks of a policy (C1 vocabularies, C4 routes, C5 caps), in linear time.

    Run by every :class:`~dpmv_lib.core.policy.Policy` constructor, also for policies built in code.

    Parameters
    ----------
    p : Policy
        The policy to check.

    Raises
    ------
    PolicyTypeError
        If a field has the wrong type (a name or view id not a string, a view's text not a string or
        ``generic`` not a bool, a position id not an integer, a group I_a not a frozenset, a cap or
        the sensitivity not a Fraction).
    PolicyError
        If the policy has no slots or no positions; a name or id is empty or repeated; a slot has no
        views or not exactly one generic view, or a view names another slot; a position names an
        unknown slot; a group I_a is empty or names unknown positions; a cap or the sensitivity is not
        a valid positive rational; or a :class:`TableRouter` route names an unknown slot or repeats one.
    """
    if not isinstance(p.name, str):
        raise PolicyTypeError(f"policy name must be a string, got {type(p.name).__name__}")
    if not p.slots:
        raise PolicyError("policy has no slots")
    names = [s.name for s in p.slots]
    for n in names:
        if not isinstance(n, str) or not n.strip():
            raise (PolicyError if isinstance(n, str) else PolicyTypeError)(
                f"slot names must be non-empty strings, got {short_repr(n)}")
    dup = duplicates(names)
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
                raise (PolicyError if isinstance(v.id, str) else PolicyTypeError)(
                    f"view ids must be non-empty strings, got {short_repr(v.id)} in slot {s.name!r}")
            if not isinstance(v.text, str):
                raise PolicyTypeError(f"text of view {v.id!r} must be a string, got {type(v.text).__name__}")
            if not isinstance(v.generic, bool):
                raise PolicyTypeError(f"'generic' of view {v.id!r} must be a bool, got {short_repr(v.generic)}")
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
            raise PolicyTypeError(f"position id must be an integer, got {short_repr(q.id)}")
        if q.slot not in name_set:
            raise PolicyError(f"position {q.id} names unknown slot {short_repr(q.slot)}")
    dup_ids = duplicates(ids)
    if dup_ids:
        raise PolicyError(f"duplicate position ids {dup_ids[:20]}")
    anames = [a.name for a in p.attributes]
    for n in anames:
        if not isinstance(n, str) or not n.strip():
            raise (PolicyError if isinstance(n, str) else PolicyTypeError)(
                f"attribute names must be non-empty strings, got {short_repr(n)}")
    dup_a = duplicates(anames)
    if dup_a:
        raise PolicyError(f"duplicate attribute names {dup_a[:20]}")
    idset = set(ids)
    for a in p.attributes:
        if not isinstance(a.group, frozenset):
            raise PolicyTypeError(f"group I_a of attribute {a.name!r} must be a frozenset of position ids")
        if not a.group:
            raise PolicyError(f"attribute {a.name!r} has an empty group I_a")
        unknown = sorted(a.group - idset, key=repr)
        if unknown:
            raise PolicyError(f"group I_a of attribute {a.name!r} names unknown positions {unknown[:20]}")
        if not isinstance(a.cap, Fraction) or a.cap <= 0:
            raise (PolicyError if isinstance(a.cap, Fraction) else PolicyTypeError)(
                f"cap of attribute {a.name!r} must be a positive exact number, got {a.cap!r}")
        parse_rational(a.cap, f"cap B_a of attribute {a.name!r}")
    if not isinstance(p.sensitivity, Fraction) or p.sensitivity <= 0:
        raise (PolicyError if isinstance(p.sensitivity, Fraction) else PolicyTypeError)(
            f"sensitivity must be a positive exact number, got {p.sensitivity!r}")
    parse_rational(p.sensitivity, "sensitivity")
    if isinstance(p.router, TableRouter):
        for intent, slots in p.router.routes.items():
            for s in slots:
                if s not in name_set:
                    raise PolicyError(f"route for intent {intent!r} names unknown slot {s!r}")
            if len(set(slots)) != len(slots):
                raise PolicyError(f"route for intent {intent!r} repeats a slot: {list(slots)}")
