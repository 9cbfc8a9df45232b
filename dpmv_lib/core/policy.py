"""The public, fixed protection policy (paper: "Slot-Level View Selection and Attribute Accounting").

A policy fixes the memory layout (positions -> slot), the protected attributes with their
groups I_a (which may overlap) and caps B_a, one shared view vocabulary V_g per slot with a
fixed generic view (C1), a router (query, released history) -> ordered active slots and a read
policy (query, slot, history) -> positions (C4), and the charge set Gamma*(R) of a read (Eq. 5).
Nothing here ever looks at memory contents. This module holds the policy's objects
(:class:`Query`, :class:`View`, :class:`Slot`, :class:`Position`, :class:`Attribute`, the
router and read policy, :class:`Policy`) and their cross-checks (:func:`validate_policy`); the
file form (JSON load and dump, its fields, size limits) is :mod:`dpmv_lib.core.policy_json`.
Policies are validated when built or loaded; errors name the problem (a wrong type raises a
``*TypeError`` class, which is also the domain error).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import cached_property
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from .errors import PolicyError, PolicyTypeError, QueryError, QueryTypeError, UnknownAttributeError, short_repr
from .memo import remember
from .policy_json import (PolicyLimits, as_limits, canonical_json, check_read_entries, copy_json, duplicates,
                          parse_cap, plain_policy_data, policy_fields, policy_path, read_policy_file, write_policy_file)
from .rationals import Number, fraction_str, parse_rational

__all__ = ["Policy", "Query", "View", "Slot", "Position", "Attribute", "Router", "ReadPolicy", "TableRouter",
           "TableReadPolicy", "validate_policy"]


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

    Views are parts of a slot's fixed public vocabulary V_g (C1); :class:`Policy` validates them.

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
        V_g, exactly one of them generic (checked by :class:`Policy`).
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
            G_t, ordered; :meth:`Policy.route` checks them against the policy (C4).
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
            R_{t,g}; :meth:`Policy.read` checks that they lie in the slot (C4).
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
            If ``slot`` is not in ``slot_positions`` (:meth:`Policy.read` checks the slot first).
        """
        try:
            key = (query.intent, slot)
        except AttributeError:
            raise QueryTypeError(f"a read policy needs a Query, got {type(query).__name__}") from None
        if key in self.overrides:
            return tuple(self.overrides[key])
        return tuple(self.slot_positions[slot])


@dataclass(frozen=True)
class Policy:
    """The public policy: layout, protected attributes, view vocabularies, router and reads.

    Fixed and public before any memory is seen: one shared vocabulary V_g per slot with a fixed
    generic view (C1), the groups I_a and caps B_a (C5), and a router and read policy that
    depend on the query and the released history only (C4). Build it with :meth:`from_dict` or
    :meth:`load` (validated and serialisable); the constructor is for policies with a custom
    router or read policy and runs the same cross-reference checks.

    Parameters
    ----------
    name : str
        Policy name.
    slots : tuple of Slot
        The slots with their vocabularies V_g, each with exactly one generic view (C1).
    positions : tuple of Position
        The memory layout: every position id and its slot.
    attributes : tuple of Attribute
        Protected attributes a with groups I_a (which may overlap) and caps B_a (C5).
    router : Router
        (query, released history) -> ordered active slots G_t; must not read memory (C4).
    reader : ReadPolicy
        (query, slot, released history) -> read positions R_{t,g}; must not read memory (C4).
    sensitivity : Fraction, optional
        The scorer's sensitivity bound Du in Eq. (7), default 3/5.
    intents : tuple of str, optional
        The public intents the router knows (informational).
    source : Mapping, optional
        The plain-JSON form the policy was built from (set by :meth:`from_dict`; needed by
        :meth:`to_dict` and :meth:`save`).

    Raises
    ------
    PolicyTypeError
        If a field has the wrong type (a name or view id that is not a string, a group I_a that
        is not a frozenset, a cap or the sensitivity not a ``Fraction``, ...).
    PolicyError
        If a cross-reference fails: no slots or positions, a slot without exactly one generic
        view, a duplicate name or id, a position in an unknown slot, an empty group I_a or one
        naming unknown positions, a cap or sensitivity <= 0 or out of range, a route
        (:class:`TableRouter`) to an unknown or repeated slot.

    Examples
    --------
    >>> from dpmv_lib.checks.examples import running_example
    >>> policy = running_example()[0]
    >>> policy.route(Query("Any ideas for an affordable dinner?", "affordable_dinner"))
    ('food', 'finance')
    >>> policy.caps
    {'diabetes': Fraction(2, 1), 'debt': Fraction(2, 1)}
    """

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
        validate_policy(self)

    # ---- lookups (the policy is immutable: derived lookups are computed once) ------------
    @cached_property
    def slot_names(self) -> tuple[str, ...]:
        """The slot names, in policy order."""
        return tuple(s.name for s in self.slots)

    @cached_property
    def attribute_names(self) -> tuple[str, ...]:
        """The protected attribute names, in policy order."""
        return tuple(a.name for a in self.attributes)

    @cached_property
    def _slot_by_name(self) -> dict[str, Slot]:
        return {s.name: s for s in self.slots}

    @cached_property
    def _positions_by_slot(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {s.name: [] for s in self.slots}
        for p in self.positions:  # (one pass: validate_policy checked that every position's slot exists)
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
        """All position ids, in layout order."""
        return tuple(p.id for p in self.positions)

    @property
    def layout(self) -> tuple[tuple[int, str], ...]:
        """The memory layout (position id, slot) shared by adjacent stores."""
        return tuple((p.id, p.slot) for p in self.positions)

    @property
    def caps(self) -> dict[str, Fraction]:
        """attribute -> its cap B_a (a new dict each time)."""
        return {a.name: a.cap for a in self.attributes}

    def slot(self, name: str) -> Slot:
        """The slot named ``name``.

        Parameters
        ----------
        name : str
            A slot name.

        Returns
        -------
        Slot

        Raises
        ------
        PolicyError
            If the policy has no such slot (also for a name that is not a string).
        """
        s = self._slot_by_name.get(name) if isinstance(name, str) else None
        if s is not None:
            return s
        raise PolicyError(f"unknown slot {name!r}; the policy has {list(self.slot_names)}")

    def attribute(self, name: str) -> Attribute:
        """The protected attribute named ``name``.

        Parameters
        ----------
        name : str
            An attribute name.

        Returns
        -------
        Attribute

        Raises
        ------
        UnknownAttributeError
            If the policy has no such attribute (a PolicyError and a KeyError).
        """
        for a in self.attributes:
            if a.name == name:
                return a
        raise UnknownAttributeError(f"unknown protected attribute {name!r}; the policy has "
                                    f"{list(self.attribute_names)}")

    def view(self, view_id: str) -> View:
        """The view with id ``view_id`` (of any slot).

        Parameters
        ----------
        view_id : str
            A view id, e.g. ``"food.low_sugar"``.

        Returns
        -------
        View

        Raises
        ------
        PolicyError
            If no slot has such a view (also for an id that is not a string).
        """
        v = self._view_by_id.get(view_id) if isinstance(view_id, str) else None
        if v is not None:
            return v
        raise PolicyError(f"unknown view {view_id!r}")

    def positions_of(self, slot: str) -> tuple[int, ...]:
        """Every position of a slot, in layout order.

        Parameters
        ----------
        slot : str
            A slot name.

        Returns
        -------
        tuple of int

        Raises
        ------
        PolicyError
            If the policy has no such slot.
        """
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
        """Gamma*(R) = {a : R intersects I_a} (Eq. 5): every attribute a read touches.

        A charged selection on R is charged to every attribute of Gamma*(R) (C5), also where
        groups overlap.

        Parameters
        ----------
        read_set : iterable of int
            The read positions R_{t,g}.

        Returns
        -------
        frozenset of str
            The attribute names whose group I_a meets R (empty: the selection is free).

        Raises
        ------
        PolicyTypeError
            If ``read_set`` is not an iterable of hashable position ids.

        Examples
        --------
        >>> from dpmv_lib.checks.examples import running_example
        >>> sorted(running_example()[0].charge_set((3,)))   # position 3 is in I_diabetes and I_debt
        ['debt', 'diabetes']
        """
        memo = self._memo[2]
        got = memo.get(read_set) if type(read_set) is tuple else None  # (unhashable: set() raises too)
        if got is not None:
            return got
        try:
            r = set(read_set)
        except TypeError:
            raise PolicyTypeError(f"a read set must be an iterable of position ids, "
                                  f"got {short_repr(read_set)}") from None
        out = frozenset(a.name for a in self.attributes if r & a.group)
        if type(read_set) is tuple:
            remember(memo, read_set, out, 4096)
        return out

    def route(self, query: Query, history: Sequence[Any] = ()) -> tuple[str, ...]:
        """G_t = Slot(q_t, released history), validated against the policy's slots (C4).

        Parameters
        ----------
        query : Query
            The public query q_t.
        history : sequence, optional
            The releases made so far (public); passed to the router.

        Returns
        -------
        tuple of str
            The ordered active slots, each a slot of the policy, none twice.

        Raises
        ------
        QueryError
            If the router has no route for the query's intent (:class:`TableRouter`), or
            :class:`QueryTypeError` if ``query`` is not a query; a custom router's own errors
            propagate.
        PolicyError
            If the router returns an unknown slot or a slot twice.
        """
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
        """R_{t,g}: positions read for one active slot; must lie in that slot (C4).

        Parameters
        ----------
        query : Query
            The public query q_t.
        slot : str
            An active slot g.
        history : sequence, optional
            The releases made so far (public); passed to the read policy.

        Returns
        -------
        tuple of int
            The read positions, all in ``slot``.

        Raises
        ------
        PolicyError
            If ``slot`` is unknown (before the read policy runs) or the read policy returns a
            position outside the slot.
        QueryTypeError
            If ``query`` is not a query (:class:`TableReadPolicy`); a custom read policy's own
            errors propagate.
        """
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
        """A copy with new caps B_a (one number for all attributes, or a mapping).

        Parameters
        ----------
        caps : Mapping of str to number, or number
            New caps (int, ``Fraction``, finite float read through its shortest repr, or a
            string "2", "2/3", "0.6"); attributes not in a mapping keep theirs.

        Returns
        -------
        Policy
            The new policy (its fingerprint changes with the caps).

        Raises
        ------
        UnknownAttributeError
            If the mapping names an attribute the policy does not define.
        PolicyTypeError
            If a cap is not a number (bool, None, a list, ...).
        PolicyError
            If a cap is not finite, <= 0, over ``MAX_RATIONAL`` or too fine (see
            :func:`parse_rational`).
        """
        if not isinstance(caps, Mapping):
            caps = {a.name: caps for a in self.attributes}
        for name in caps:
            self.attribute(name)
        attrs = tuple(replace(a, cap=parse_cap(caps[a.name], a.name)) if a.name in caps else a
                      for a in self.attributes)
        src = dict(self.source)
        if src:
            src["attributes"] = [dict(d, cap=fraction_str(parse_cap(caps[d["name"]], d["name"])))
                                 if d["name"] in caps else d for d in src["attributes"]]
        return replace(self, attributes=attrs, source=src)

    # ---- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The policy's JSON form (a fresh copy of what :meth:`from_dict` was given, caps updated).

        Returns
        -------
        dict

        Raises
        ------
        PolicyError
            If the policy was built in code (no JSON source, e.g. a custom router).
        """
        if not self.source:
            raise PolicyError("this policy was built from code objects (custom router); only policies "
                              "built by Policy.from_dict/load can be serialised")
        plain: dict[str, Any] = copy_json(self.source)
        return plain

    def fingerprint(self) -> str:
        """sha256 of the canonical public policy (caps included): ties ledgers to a policy.

        Returns
        -------
        str
            64 hex digits; policies built in code are hashed from their layout, sensitivity,
            attributes and vocabularies.
        """
        body = self.to_dict() if self.source else {
            "name": self.name, "layout": self.layout, "sensitivity": fraction_str(self.sensitivity),
            "attributes": [[a.name, sorted(a.group), fraction_str(a.cap)] for a in self.attributes],
            "views": [[s.name, list(s.view_ids)] for s in self.slots]}
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the JSON form to ``path`` (through a temporary file, then an atomic rename).

        Parameters
        ----------
        path : str or os.PathLike
            The policy file to write.

        Raises
        ------
        PolicyTypeError
            If ``path`` is not a str or path-like object.
        PolicyError
            If the policy cannot be serialised (see :meth:`to_dict`).
        OSError
            If the file cannot be written.
        """
        file = policy_path(path)
        write_policy_file(file, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, *, limits: PolicyLimits | None = None) -> "Policy":
        """Read and validate a policy file. Every failure (missing file, directory, unreadable,
        too large, not UTF-8, empty, not JSON, nested too deeply, malformed policy) raises
        :class:`PolicyError` naming the file and the problem; see :class:`PolicyLimits`.

        Parameters
        ----------
        path : str or os.PathLike
            The policy file (UTF-8 JSON, the format of :meth:`from_dict`).
        limits : PolicyLimits, optional
            Size limits (default: the module constants, e.g. 16 MiB).

        Returns
        -------
        Policy

        Raises
        ------
        PolicyTypeError
            If ``path`` is not a str or path-like object, or a field of the file has the wrong
            JSON type (e.g. ``"slots": 5``).
        ParameterTypeError
            If ``limits`` is not a :class:`PolicyLimits`.
        PolicyError
            For every other failure, naming the file and the problem.
        """
        lim = as_limits(limits)
        file = policy_path(path)
        data = read_policy_file(file, lim)
        try:
            return cls._from_plain(data, lim)
        except PolicyError as exc:
            raise type(exc)(f"policy file {file}: {exc}") from None

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

        Parameters
        ----------
        data : Mapping
            The JSON form above (plain JSON data: dicts, lists, strings, numbers, booleans).
        limits : PolicyLimits, optional
            Size limits (default: the module constants).

        Returns
        -------
        Policy
            The validated policy; its ``source`` is a private copy of ``data``.

        Raises
        ------
        PolicyTypeError
            If ``data`` is not a mapping, holds something that is not plain JSON data (a set, an
            arbitrary object, a non-string intent in ``routes``), or a field has the wrong type (``"slots": 5``, a name
            that is not a string, ``"generic": "yes"``, a position id that is not an integer...).
        ParameterTypeError
            If ``limits`` is not a :class:`PolicyLimits`.
        PolicyError
            If a required key is missing or an unknown one present, a count is over ``limits``,
            a value is bad (an empty name, a repeated id, a cap <= 0), or a cross-reference
            fails (see the class).

        Examples
        --------
        >>> from dpmv_lib.checks.examples import RUNNING_EXAMPLE_POLICY
        >>> Policy.from_dict(RUNNING_EXAMPLE_POLICY).slot_names
        ('health', 'food', 'finance', 'work')
        """
        lim = as_limits(limits)
        # the plain-JSON form (also what the fingerprint and to_dict() use)
        return cls._from_plain(plain_policy_data(data), lim)

    @classmethod
    def _from_plain(cls, data: Any, lim: PolicyLimits) -> "Policy":
        """from_dict on freshly parsed JSON (owned by this call, so it becomes ``source``): the parts
        from :func:`~dpmv_lib.core.policy_json.policy_fields`, the constructor's cross-checks
        (:func:`validate_policy`), then those of the read entries."""
        f = policy_fields(data, lim)
        policy = cls(
            name=f.name, slots=tuple(Slot(name, tuple(View(*v) for v in views)) for name, views in f.slots),
            positions=tuple(Position(*p) for p in f.positions),
            attributes=tuple(Attribute(*a) for a in f.attributes), router=TableRouter(f.routes),
            reader=TableReadPolicy(f.slot_positions, f.overrides), sensitivity=f.sensitivity,
            intents=tuple(f.routes), source=data)
        check_read_entries(f)
        return policy


def _check_names(names: list[Any], kind: str) -> None:
    """C1: ``kind`` names ("slot", "attribute") are non-empty strings, none repeated."""
    for n in names:
        if not isinstance(n, str) or not n.strip():
            raise (PolicyError if isinstance(n, str) else PolicyTypeError)(
                f"{kind} names must be non-empty strings, got {short_repr(n)}")
    dup = duplicates(names)
    if dup:
        raise PolicyError(f"duplicate {kind} names {dup[:20]}")


def validate_policy(p: Any) -> None:
    """The cross-checks of a policy (C1 vocabularies, C4 routes, C5 caps), in linear time.

    Run by every :class:`Policy` constructor, also for policies built in code.

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
    _check_names(names, "slot")
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
    _check_names([a.name for a in p.attributes], "attribute")
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
