"""Transfer track T1/T3 support (paper C.3): the I_a positions every target-relevant turn reads
(:func:`support_positions`), so each target-required behaviour is supported by what the turn
reads on M, and the pair validation :func:`pair_problems`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from . import lexicon
from .benchmark import Behaviour, Pair
from ..core.policy import Policy, View
from ..core.scorer import cue_hits
from ..core.store import differing_positions
from .transfer_corpora import HOME_SLOT
from .transfer_evidence import replacement_problems


def linked_view(policy: Policy, behaviour_id: str) -> View | None:
    """The view a target-required behaviour ``req:<attribute>:<view id>`` stands for (None if the
    id does not name a view of this policy: then support needs only the attribute's signal)."""
    parts = behaviour_id.split(":", 2)
    if len(parts) == 3:
        try:
            return policy.view(parts[2])
        except Exception:  # noqa: BLE001 - an unknown view id: fall back to the signal alone
            return None
    return None


@dataclass(frozen=True)
class Need:
    """One target-required behaviour of one turn: the I_a positions the turn reads, and its view."""

    turn: int
    behaviour: str
    reads: frozenset[int]
    view_id: str


def support_needs(policy: Policy, pair: Pair) -> list[Need]:
    """Every (turn, target-required behaviour) of the trajectory with R_t intersected with I_a."""
    group = policy.attribute(pair.attribute).group
    out = []
    for t in pair.turns:
        reads = frozenset(policy.read(t.query, t.slot)) & group
        for b in t.gold.target_required:
            v = linked_view(policy, b)
            out.append(Need(t.index, b, reads, v.id if v else ""))
    return out


def support_positions(policy: Policy, pair: Pair, prefer: Sequence[int] = ()) -> tuple[int, ...] | None:
    """A small set S of I_a positions such that every target-required behaviour's turn reads one
    (greedy hitting set: most uncovered needs first; ties: ``prefer`` order, then the attribute's
    home slot, then position id). None if some target-relevant turn reads no I_a position."""
    needs = support_needs(policy, pair)
    if any(not n.reads for n in needs):
        return None
    slot_of = dict(policy.layout)
    rank = {i: k for k, i in enumerate(prefer)}
    home = HOME_SLOT.get(pair.attribute, "")
    chosen: list[int] = []
    while True:
        open_ = [n for n in needs if not n.reads & set(chosen)]
        if not open_:
            return tuple(sorted(chosen))
        c = Counter(i for n in open_ for i in n.reads)
        chosen.append(min(c, key=lambda i: (-c[i], rank.get(i, len(rank)), slot_of[i] != home, i)))


def views_at(policy: Policy, pair: Pair, position: int) -> list[View]:
    """The views of the target-required behaviours whose turns read ``position``."""
    ids = sorted({n.view_id for n in support_needs(policy, pair) if position in n.reads and n.view_id})
    return [policy.view(v) for v in ids]


def supported(policy: Policy, pair: Pair) -> tuple[int, int]:
    """(target-required behaviours, of them unsupported on M): a behaviour of turn t is supported
    iff some position the turn reads holds M text with the attribute's signal and a cue of the
    behaviour's view (the scorer can use it there)."""
    total = bad = 0
    for t in pair.turns:
        reads = policy.read(t.query, t.slot)
        for b in t.gold.target_required:
            total += 1
            v = linked_view(policy, b)
            if not any(lexicon.has_signal(pair.m.contents[i], pair.attribute)
                       and (v is None or cue_hits(v.cues, pair.m.contents[i])) for i in reads):
                bad += 1
    return total, bad


def pair_problems(policy: Policy, pair: Pair, behaviours: Mapping[str, Behaviour] | None = None) -> list[str]:
    """T3 code checks of one transfer pair (empty list = passes): shared scaffold; M and M' differ
    exactly at the evidence positions, all inside I_a (T1: equal outside I_a); target signal in M
    at each of them; no signal of any attribute, residual-signal word or counter-evidence in M';
    no other attribute's signal in M; every target-required behaviour supported on M; every cited
    behaviour in the catalogue."""
    a = pair.attribute
    if tuple(pair.m.layout) != policy.layout or tuple(pair.m_prime.layout) != policy.layout:
        return ["the stores do not share the policy's scaffold"]
    group = policy.attribute(a).group
    ev = set(pair.meta.get("evidence_positions", ()))
    d = differing_positions(pair.m, pair.m_prime)
    out = []
    if d - group:
        out.append(f"stores differ outside I_a at {sorted(d - group)}")
    if d != ev:
        out.append(f"differing positions {sorted(d)} != evidence positions {sorted(ev)}")
    for i in sorted(ev):
        if not lexicon.has_signal(pair.m.contents[i], a):
            out.append(f"M lacks target evidence at position {i}")
        bad = replacement_problems(pair.m.contents[i], pair.m_prime.contents[i], a)
        if bad:
            out.append(f"M' at position {i}: {bad}")
    for side, store in (("M", pair.m), ("M'", pair.m_prime)):
        for i, text in store.contents.items():
            extra = set(lexicon.signalled_attributes(text)) - ({a} if side == "M" else set())
            if extra:
                out.append(f"{side} carries evidence of {sorted(extra)} at position {i}")
    total, bad_n = supported(policy, pair)
    if bad_n:
        out.append(f"{bad_n} of {total} target-required behaviours unsupported on M")
    if behaviours is not None:
        for t in pair.turns:
            for b in (*t.gold.target_required, *t.gold.unsupported, *t.gold.generic):
                if b not in behaviours:
                    out.append(f"turn {t.index} cites unknown behaviour {b!r}")
    return out
