"""Benchmark record types shared by data construction, interfaces, generation and evaluation.

A :class:`Pair` is one adjacent-store pair M ~_a M' (PairedMem or transfer track) with its
fixed 32-turn query trajectory and deterministic gold behaviours per turn. On disk a track is a
directory of JSON Lines files plus ``manifest.json`` (see :mod:`dpmv_lib.bench.pairedmem`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ..core.errors import StoreError
from ..core.policy import Policy, Query
from ..core.store import MemoryStore

QTYPES = ("target", "neutral", "distractor")
BEHAVIOUR_KINDS = ("target_required", "unsupported", "generic")
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Behaviour:
    """A gold response behaviour, described independently of any generator's phrasing.

    kind: "target_required" (scored for tRec on M), "unsupported" (target-specific behaviour that
    M' does not support: scored for Unsup on M'), or "generic"."""

    id: str
    kind: str
    description: str
    attribute: str = ""
    slot: str = ""


@dataclass(frozen=True)
class GoldTurn:
    """Behaviour ids that apply to one turn, per store side.

    ``target_required`` applies on M; ``unsupported`` on M'; ``generic`` on both."""

    target_required: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()
    generic: tuple[str, ...] = ()


@dataclass(frozen=True)
class Turn:
    index: int          # 0..31
    block: int          # 0 or 1 (two 16-turn blocks)
    query: Query        # public text + intent (query.qtype in QTYPES)
    slot: str           # the slot the query's public intent routes to
    gold: GoldTurn


@dataclass(frozen=True)
class Pair:
    """One adjacent pair M ~_attribute M' with its trajectory. ``policy_id`` names the scaffold
    template policy (positions, groups) both stores use."""

    pair_id: str
    track: str                 # "pairedmem" | "transfer"
    attribute: str             # the target attribute a (M has evidence, M' is a-neutral)
    template: str
    policy_id: str
    overlap: bool              # does I_a overlap another attribute's group in this template
    split: str                 # "train" | "validation" | "test" (pair-level, for the auditor)
    m: MemoryStore
    m_prime: MemoryStore
    turns: tuple[Turn, ...]
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def store(self, side: str) -> MemoryStore:
        if side == "M":
            return self.m
        if side in ("M'", "Mp", "M_prime"):
            return self.m_prime
        raise StoreError(f"unknown store side {side!r}; use 'M' or \"M'\"")

    @property
    def queries(self) -> tuple[Query, ...]:
        return tuple(t.query for t in self.turns)


@dataclass(frozen=True)
class Benchmark:
    """A loaded track: template policies, pairs and the behaviour catalogue."""

    track: str
    policies: Mapping[str, Policy]
    pairs: tuple[Pair, ...]
    behaviours: Mapping[str, Behaviour]
    manifest: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def policy(self, pair: Pair) -> Policy:
        return self.policies[pair.policy_id]

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def subset(self, pair_ids) -> "Benchmark":
        keep = set(pair_ids)
        return Benchmark(self.track, self.policies, tuple(p for p in self.pairs if p.pair_id in keep),
                         self.behaviours, self.manifest)


def pair_to_json(pair: Pair) -> dict[str, Any]:
    return {
        "pair_id": pair.pair_id, "track": pair.track, "attribute": pair.attribute,
        "template": pair.template, "policy_id": pair.policy_id, "overlap": pair.overlap,
        "split": pair.split,
        "M": {str(k): v for k, v in pair.m.contents.items()},
        "M_prime": {str(k): v for k, v in pair.m_prime.contents.items()},
        "turns": [{"index": t.index, "block": t.block, "text": t.query.text, "intent": t.query.intent,
                   "qtype": t.query.qtype, "slot": t.slot,
                   "gold": {"target_required": list(t.gold.target_required),
                            "unsupported": list(t.gold.unsupported), "generic": list(t.gold.generic)}}
                  for t in pair.turns],
        "meta": dict(pair.meta),
    }


def pair_from_json(d: Mapping[str, Any], policies: Mapping[str, Policy]) -> Pair:
    policy = policies[d["policy_id"]]
    m = MemoryStore.from_policy(policy, {int(k): v for k, v in d["M"].items()}, name=f"{d['pair_id']}/M")
    mp = MemoryStore.from_policy(policy, {int(k): v for k, v in d["M_prime"].items()},
                                 name=f"{d['pair_id']}/M'")
    turns = tuple(Turn(t["index"], t["block"], Query(t["text"], t["intent"], t["qtype"]), t["slot"],
                       GoldTurn(tuple(t["gold"]["target_required"]), tuple(t["gold"]["unsupported"]),
                                tuple(t["gold"]["generic"]))) for t in d["turns"])
    return Pair(d["pair_id"], d["track"], d["attribute"], d["template"], d["policy_id"], bool(d["overlap"]),
                d["split"], m, mp, turns, d.get("meta", {}))
