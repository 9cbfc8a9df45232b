"""Memory stores M = (m_1, ..., m_n) on the policy's fixed layout, and adjacency M ~_a M'.

Adjacency (paper, "Protected attributes and adjacency"): same layout and slot metadata, equal
at every position outside I_a; positions inside I_a may differ. D = {i : m_i != m'_i}.
"""
from __future__ import annotations

from collections.abc import Iterable as IterableABC, Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Mapping

from .errors import StoreError
from .policy import Policy
from .policy_format import short_repr as _r


@dataclass(frozen=True)
class MemoryStore:
    """Contents per position on a fixed layout ((position, slot) pairs, shared by adjacent stores)."""

    layout: tuple[tuple[int, str], ...]
    contents: Mapping[int, str] = field(hash=False)
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.layout, (str, bytes)) or not isinstance(self.layout, IterableABC):
            raise StoreError(f"store layout must be a sequence of (position id, slot) pairs, got {_r(self.layout)}")
        layout = tuple(tuple(p) if isinstance(p, list) else p for p in self.layout)  # JSON pairs ok
        if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
                   and isinstance(p[1], str) for p in layout):
            raise StoreError(f"store layout must be a sequence of (int position id, str slot) pairs, got {_r(layout)}")
        object.__setattr__(self, "layout", layout)
        if not isinstance(self.name, str):
            raise StoreError(f"store name must be a string, got {type(self.name).__name__}")
        empty = [i for i, s in layout if not s.strip()]
        if empty:
            raise StoreError(f"store {self.name!r}: layout gives position {empty[0]} an empty slot name")
        if not isinstance(self.contents, MappingABC):
            raise StoreError(f"store contents must be a mapping position id -> text, got {type(self.contents).__name__}")
        bad = [k for k in self.contents if type(k) is not int]
        if bad:
            raise StoreError(f"store {self.name!r}: position ids must be integers, got {_r(bad[0])}")
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
                raise StoreError(f"store {self.name!r}: content at position {i} must be a string, "
                                 f"got {type(text).__name__}")
        object.__setattr__(self, "contents", dict(sorted(self.contents.items())))

    @classmethod
    def from_policy(cls, policy: Policy, contents: Mapping[int, str], name: str = "") -> "MemoryStore":
        """A store on the policy's layout; contents must cover exactly the policy's positions."""
        if not isinstance(contents, MappingABC):
            raise StoreError(f"store contents must be a mapping position id -> text, got {type(contents).__name__}")
        return cls(layout=policy.layout, contents=dict(contents), name=name)

    def check_layout(self, policy: Policy) -> None:
        if tuple(self.layout) != policy.layout:
            raise StoreError(f"store {self.name!r} layout does not match policy {policy.name!r}")

    def read(self, positions: tuple[int, ...]) -> tuple[str, ...]:
        """M_R: contents at the read positions, in read order (trusted side only)."""
        try:
            return tuple(self.contents[i] for i in positions)
        except KeyError as exc:
            raise StoreError(f"read of unknown position {exc.args[0]!r}") from None
        except TypeError:
            raise StoreError(f"read positions must be a sequence of position ids, got {_r(positions)}") from None

    def replace(self, updates: Mapping[int, str], name: str | None = None) -> "MemoryStore":
        if not isinstance(updates, MappingABC):
            raise StoreError(f"updates must be a mapping position id -> text, got {type(updates).__name__}")
        new = dict(self.contents)
        for i, t in updates.items():
            if i not in new:
                raise StoreError(f"cannot replace unknown position {_r(i)}")
            new[i] = t
        return MemoryStore(self.layout, new, self.name if name is None else name)


def differing_positions(m: MemoryStore, m_prime: MemoryStore) -> frozenset[int]:
    """D = {i : m_i != m'_i} for two same-layout stores."""
    if tuple(m.layout) != tuple(m_prime.layout):
        raise StoreError("stores have different layouts; D is only defined for same-scaffold stores")
    return frozenset(i for i in m.contents if m.contents[i] != m_prime.contents[i])


def adjacency_problem(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> str | None:
    """Why M ~_a M' fails (or None if adjacent): layouts must match the policy and D subset of I_a."""
    group = policy.attribute(attribute).group
    if tuple(m.layout) != policy.layout or tuple(m_prime.layout) != policy.layout:
        return "the stores do not share the policy's layout"
    outside = sorted(differing_positions(m, m_prime) - group)
    if outside:
        return f"the stores differ at positions {outside} outside I_{attribute}"
    return None


def is_adjacent(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> bool:
    """M ~_a M'."""
    return adjacency_problem(m, m_prime, policy, attribute) is None


def check_adjacent(m: MemoryStore, m_prime: MemoryStore, policy: Policy, attribute: str) -> None:
    """Raise StoreError naming the problem unless M ~_a M'."""
    problem = adjacency_problem(m, m_prime, policy, attribute)
    if problem:
        raise StoreError(f"not adjacent w.r.t. {attribute!r}: {problem}")
