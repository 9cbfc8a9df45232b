"""Memory stores M = (m_1, ..., m_n) on the policy's fixed layout, and adjacency M ~_a M'.

Adjacency (paper, "Protected attributes and adjacency"): same layout and slot metadata, equal
at every position outside I_a; positions inside I_a may differ. D = {i : m_i != m'_i}.
"""
from __future__ import annotations

from collections.abc import Iterable as IterableABC, Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Mapping

from .errors import PolicyTypeError, StoreError, StoreTypeError, short_repr
from .policy import Policy


def _need_policy(policy: object) -> None:
    if not isinstance(policy, Policy):
        raise PolicyTypeError(f"needs a Policy, got {type(policy).__name__}")


def _need_stores(*stores: object) -> None:
    for m in stores:
        if not isinstance(m, MemoryStore):
            raise StoreTypeError(f"needs a MemoryStore, got {type(m).__name__}")


@dataclass(frozen=True)
class MemoryStore:
    """Contents per position on a fixed layout ((position, slot) pairs, shared by adjacent stores).

    The store is private: only the trusted interface reads it (:meth:`read`), and adjacent
    stores M ~_a M' share the layout and differ only inside I_a.

    Parameters
    ----------
    layout : sequence of (int, str)
        (position id, slot) pairs; JSON ``[id, slot]`` lists are accepted. Usually
        ``policy.layout`` (see :meth:`from_policy`).
    contents : Mapping of int to str
        Text at every position of the layout (an empty string for an empty position).
    name : str, optional
        A label for messages and reports.

    Raises
    ------
    StoreTypeError
        If ``layout`` is not a sequence of (int, str) pairs, ``contents`` not a mapping with
        integer keys and string values, or ``name`` not a string.
    StoreError
        If the layout repeats a position id or has an empty slot name, or ``contents`` misses a
        position of the layout or has one outside it.

    Examples
    --------
    >>> m = MemoryStore(((1, "food"), (2, "food")), {1: "I skip sugar.", 2: ""}, name="M")
    >>> m.read((1,))
    ('I skip sugar.',)
    """

    layout: tuple[tuple[int, str], ...]
    contents: Mapping[int, str] = field(hash=False)
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.layout, (str, bytes)) or not isinstance(self.layout, IterableABC):
            raise StoreTypeError(f"store layout must be a sequence of (position id, slot) pairs, "
                                 f"got {short_repr(self.layout)}")
        layout = tuple(tuple(p) if isinstance(p, list) else p for p in self.layout)  # JSON pairs ok
        if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
                   and isinstance(p[1], str) for p in layout):
            raise StoreTypeError(f"store layout must be a sequence of (int position id, str slot) pairs, "
                                 f"got {short_repr(layout)}")
        object.__setattr__(self, "layout", layout)
        if not isinstance(self.name, str):
            raise StoreTypeError(f"store name must be a string, got {type(self.name).__name__}")
        empty = [i for i, s in layout if not s.strip()]
        if empty:
            raise StoreError(f"store {self.name!r}: layout gives position {empty[0]} an empty slot name")
        if not isinstance(self.contents, MappingABC):
            raise StoreTypeError(f"store contents must be a mapping position id -> text, got "
                                 f"{type(self.contents).__name__}")
        bad = [k for k in self.contents if type(k) is not int]
        if bad:
            raise StoreTypeError(f"store {self.name!r}: position ids must be integers, got {short_repr(bad[0])}")
        ids = [i for i, _ in self.layout]
        if len(set(ids)) != len(ids):
            raise StoreError("store layout repeats a position id")
        extra = sorted(set(self.contents) - set(ids))
        if extra:
            raise StoreError(f"store {self.name!r} has contents at positions {extra} outside its layout")
        missing = sorted(set(ids) - set(self.contents))
        if missing:
            raise StoreError(f"store {self.name!r} has no content for positions {missing} "
                             "(use an empty string for an empty position)")
        for i, text in self.contents.items():
            if not isinstance(text, str):
                raise StoreTypeError(f"store {self.name!r}: content at position {i} must be a string, "
                                     f"got {type(text).__name__}")
        object.__setattr__(self, "contents", dict(sorted(self.contents.items())))

    @classmethod
    def from_policy(cls, policy: Policy, contents: Mapping[int, str], name: str = "") -> "MemoryStore":
        """A store on the policy's layout; contents must cover exactly the policy's positions.

        Parameters
        ----------
        policy : Policy
            The public policy whose layout the store uses.
        contents : Mapping of int to str
            Text at every position of the policy.
        name : str, optional
            A label for messages and reports.

        Returns
        -------
        MemoryStore

        Raises
        ------
        PolicyTypeError
            If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
        StoreTypeError
            If ``contents`` is not a mapping position id -> text (or see the class).
        StoreError
            If ``contents`` does not cover exactly the policy's positions (see the class).
        """
        _need_policy(policy)
        if not isinstance(contents, MappingABC):
            raise StoreTypeError(f"store contents must be a mapping position id -> text, got {type(contents).__name__}")
        return cls(layout=policy.layout, contents=dict(contents), name=name)

    def check_layout(self, policy: Policy) -> None:
        """Check that the store uses the policy's layout (as MemView does before any release).

        Parameters
        ----------
        policy : Policy
            The public policy.

        Raises
        ------
        PolicyTypeError
            If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
        StoreError
            If the layouts differ.
        """
        _need_policy(policy)
        if tuple(self.layout) != policy.layout:
            raise StoreError(f"store {self.name!r} layout does not match policy {policy.name!r}")

    def read(self, positions: tuple[int, ...]) -> tuple[str, ...]:
        """M_R: contents at the read positions, in read order (trusted side only).

        Parameters
        ----------
        positions : sequence of int
            The read set R_{t,g} (from :meth:`~dpmv_lib.core.policy.Policy.read`).

        Returns
        -------
        tuple of str

        Raises
        ------
        StoreTypeError
            If ``positions`` is not a sequence of position ids.
        StoreError
            If a position is not in the store.
        """
        try:
            return tuple(self.contents[i] for i in positions)
        except KeyError as exc:
            raise StoreError(f"read of unknown position {exc.args[0]!r}") from None
        except TypeError:
            raise StoreTypeError(f"read positions must be a sequence of position ids, "
                                 f"got {short_repr(positions)}") from None

    def replace(self, updates: Mapping[int, str], name: str | None = None) -> "MemoryStore":
        """A copy with some positions' contents replaced (e.g. an adjacent M' inside I_a).

        Parameters
        ----------
        updates : Mapping of int to str
            position id -> new text; every id must be a position of the store.
        name : str, optional
            The new store's name (default: this store's name).

        Returns
        -------
        MemoryStore

        Raises
        ------
        StoreTypeError
            If ``updates`` is not a mapping, or a new text or ``name`` is not a string.
        StoreError
            If ``updates`` names a position the store does not have.
        """
        if not isinstance(updates, MappingABC):
            raise StoreTypeError(f"updates must be a mapping position id -> text, got {type(updates).__name__}")
        new = dict(self.contents)
        for i, t in updates.items():
            if i not in new:
                raise StoreError(f"cannot replace unknown position {short_repr(i)}")
            new[i] = t
        return MemoryStore(self.layout, new, self.name if name is None else name)


def differing_positions(m: MemoryStore, m_prime: MemoryStore) -> frozenset[int]:
    """D = {i : m_i != m'_i} for two same-layout stores.

    Parameters
    ----------
    m, m_prime : MemoryStore
        Two stores on the same layout.

    Returns
    -------
    frozenset of int
        The positions whose contents differ.

    Raises
    ------
    StoreTypeError
        If ``m`` or ``m_prime`` is not a :class:`MemoryStore`.
    StoreError
        If the layouts differ.
    """
    _need_stores(m, m_prime)
    if tuple(m.layout) != tuple(m_prime.layout):
        raise StoreError("stores have different layouts; D is only defined for same-scaffold stores")
    return frozenset(i for i in m.contents if m.contents[i] != m_prime.contents[i])


def adjacency_problem(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> str | None:
    """Why M ~_a M' fails (or None if adjacent): layouts must match the policy and D subset of I_a.

    Parameters
    ----------
    m, m_prime : MemoryStore
        The two stores.
    policy : Policy
        The public policy (layout and groups I_a).
    attribute : str
        The protected attribute a.

    Returns
    -------
    str or None
        None when M ~_a M', else the reason.

    Raises
    ------
    StoreTypeError
        If ``m`` or ``m_prime`` is not a :class:`MemoryStore`.
    PolicyTypeError
        If ``policy`` is not a :class:`~dpmv_lib.core.policy.Policy`.
    UnknownAttributeError
        If the policy has no attribute ``attribute``.
    """
    _need_stores(m, m_prime)
    _need_policy(policy)
    group = policy.attribute(attribute).group
    if tuple(m.layout) != policy.layout or tuple(m_prime.layout) != policy.layout:
        return "the stores do not share the policy's layout"
    outside = sorted(differing_positions(m, m_prime) - group)
    if outside:
        return f"the stores differ at positions {outside} outside I_{attribute}"
    return None


def is_adjacent(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> bool:
    """M ~_a M': same layout as the policy and D = {i : m_i != m'_i} inside I_a.

    Parameters
    ----------
    m, m_prime : MemoryStore
        The two stores.
    policy : Policy
        The public policy (layout and groups I_a).
    attribute : str
        The protected attribute a.

    Returns
    -------
    bool

    Raises
    ------
    StoreTypeError, PolicyTypeError, UnknownAttributeError
        As :func:`adjacency_problem`.

    Examples
    --------
    >>> from dpmv_lib.checks.examples import running_example
    >>> policy, m, m_no_diabetes, _ = running_example()
    >>> is_adjacent(m, m_no_diabetes, policy, "diabetes"), is_adjacent(m, m_no_diabetes, policy, "debt")
    (True, False)
    """
    return adjacency_problem(m, m_prime, policy, attribute) is None


def check_adjacent(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> None:
    """Raise StoreError naming the problem unless M ~_a M'.

    Parameters
    ----------
    m, m_prime : MemoryStore
        The two stores.
    policy : Policy
        The public policy (layout and groups I_a).
    attribute : str
        The protected attribute a.

    Raises
    ------
    StoreError
        If the stores are not adjacent w.r.t. ``attribute``.
    StoreTypeError, PolicyTypeError, UnknownAttributeError
        As :func:`adjacency_problem`.
    """
    problem = adjacency_problem(m, m_prime, policy, attribute)
    if problem:
        raise StoreError(f"not adjacent w.r.t. {attribute!r}: {problem}")
