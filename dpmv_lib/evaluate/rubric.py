"""The judge's rubric (paper C.5 "Utility judging"): items with a neutral role built from the
fixed gold of a pair and store side before any response is judged (:func:`build_rubric`,
:func:`build_rubrics`), the :class:`Judgement` record and the :class:`Judge` protocol. A rubric
has no method or side field: the judge is blinded by construction.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np

from ..bench.benchmark import Behaviour, Benchmark, Pair
from ..core.errors import ParameterError


DIMENSIONS = ("relevance", "correctness", "actionability", "personalisation")
ROLES = ("apply", "unsupported")


# ---- rubric ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RubricItem:
    """One gold behaviour to score at one turn (0-4: how clearly the response shows it).

    ``contrast``: for target-specific behaviours, the descriptions of the other behaviours of the
    same slot in the catalogue (generic ones and other attributes' target-specific ones of other
    views, :func:`contrast_set`); a response shows this behaviour only if it matches it better
    than these (see RubricJudge)."""

    turn: int
    item_id: str
    description: str
    role: str
    contrast: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.turn}:{self.item_id}"


@dataclass(frozen=True)
class Rubric:
    """The frozen, side-specific checklist of one pair (no method, no store label)."""

    rubric_id: str
    queries: tuple[str, ...]
    items: tuple[RubricItem, ...]

    def items_at(self, turn: int) -> tuple[RubricItem, ...]:
        return tuple(i for i in self.items if i.turn == turn)

    def at_turn(self, turn: int) -> "Rubric":
        """This rubric restricted to one turn, renumbered 0: what one response is graded on."""
        if not 0 <= turn < len(self.queries):
            raise ParameterError(f"rubric {self.rubric_id}: no turn {turn}")
        items = tuple(RubricItem(0, i.item_id, i.description, i.role, i.contrast) for i in self.items_at(turn))
        return Rubric(f"{self.rubric_id}@{turn}", (self.queries[turn],), items)


def build_rubric(pair: Pair, side: str, behaviours: Mapping[str, Behaviour], horizon: int = 16) -> Rubric:
    """The rubric of ``pair`` on ``side`` over its first ``horizon`` turns, from the gold only:
    on M target-required + generic behaviours ("apply"); on M' generic ("apply") + unsupported
    target-specific behaviours ("unsupported"). Every item keeps its own attribute's gold
    description; a target-specific item's contrasts (:func:`contrast_set`) leave out other
    attributes' descriptions of the same view, so an item of a view that two attributes share
    (e.g. debt and job loss on ``finance.strict_budget``) is graded as if it were not shared
    (C.5 "Utility judging": the rubric comes from the fixed gold, per store side)."""
    if side not in ("M", "M'"):
        raise ParameterError(f"unknown store side {side!r}; use 'M' or \"M'\"")
    if horizon < 1 or horizon > len(pair.turns):
        raise ParameterError(f"horizon must be in 1..{len(pair.turns)}, got {horizon}")
    items = []
    for t in pair.turns[:horizon]:
        groups = ((t.gold.target_required, "apply"), (t.gold.generic, "apply")) if side == "M" else \
                 ((t.gold.generic, "apply"), (t.gold.unsupported, "unsupported"))
        for ids, role in groups:
            for bid in ids:
                b = behaviours.get(bid)
                if b is None:
                    raise ParameterError(f"pair {pair.pair_id}: gold behaviour {bid!r} is not in the catalogue")
                items.append(RubricItem(t.index, bid, b.description, role, contrast_set(b, behaviours)))
    queries = tuple(t.query.text for t in pair.turns[:horizon])
    body = json.dumps([queries, [(i.turn, i.item_id, i.description, i.role, list(i.contrast)) for i in items]],
                      sort_keys=True)
    return Rubric(hashlib.sha256(body.encode()).hexdigest()[:20], queries, tuple(items))


def behaviour_view(b: Behaviour) -> str:
    """The policy view a target-specific behaviour describes: the last field of its id
    ``req:<attribute>:<view>`` or ``unsup:<attribute>:<view>`` (the catalogue's convention,
    :func:`dpmv_lib.bench.pairedmem_gold.behaviour_catalogue`); "" for generic behaviours and ids
    that do not follow the convention."""
    parts = b.id.split(":")
    return parts[2] if b.kind != "generic" and len(parts) == 3 and parts[1] == b.attribute else ""


def contrast_set(b: Behaviour, behaviours: Mapping[str, Behaviour]) -> tuple[str, ...]:
    """Contrast descriptions of a target-specific behaviour: every other behaviour of its slot that
    is generic or belongs to another attribute, *except* other attributes' descriptions of the
    same policy view (:func:`behaviour_view`); none for generic behaviours.

    Why the exception: where two attributes link to one view (e.g. debt and job loss
    to ``food.strict_budget``), both items describe the one behaviour that view releases, in two
    wordings. With the other wording as a contrast, a response that follows the view is credited
    to whichever wording is closer and the other attribute's item gets ~0 however well the
    response shows it. Dropping it keeps every item's own description (so tRec / Unsup stay per
    attribute, C.5) and grades a response the same whichever attributes share the item's view;
    the contrast still separates generic advice and other views of the slot."""
    if b.kind == "generic" or not b.slot:
        return ()
    view = behaviour_view(b)
    return tuple(sorted({o.description for o in behaviours.values()
                         if o.slot == b.slot and o.description != b.description
                         and (o.kind == "generic" or o.attribute != b.attribute)
                         and not (view and behaviour_view(o) == view)}))


@dataclass(frozen=True)
class Judgement:
    """Scores of one transcript. ``items``: item key "turn:behaviour" -> 0-4. A failed judgement
    has ``failed=True``, NaN scores, an ``error`` and the ``raw`` outputs of every attempt."""

    scores: Mapping[str, float]
    items: Mapping[str, float]
    failed: bool = False
    error: str = ""
    attempts: int = 1
    raw: tuple[str, ...] = ()

    @property
    def U(self) -> float:
        return float(np.mean([self.scores[d] for d in DIMENSIONS]) / 4.0) if not self.failed else float("nan")


class Judge(Protocol):
    """A blinded judge: sees a rubric and the responses, nothing else."""

    id: str

    def judge(self, rubric: Rubric, responses: Sequence[str]) -> Judgement: ...

    def judge_many(self, jobs: Sequence[tuple[Rubric, Sequence[str]]], *, progress: bool = False
                   ) -> list[Judgement]: ...


# ---- judging transcript tables ---------------------------------------------------------------------
def build_rubrics(benchmarks: Mapping[str, Benchmark], horizon: int = 16,
                  pair_ids: Iterable[tuple[str, str]] | None = None) -> dict[tuple[str, str, str], Rubric]:
    """All rubrics, keyed (track, pair_id, side), built from the gold before anything is judged."""
    want = set(pair_ids) if pair_ids is not None else None
    out = {}
    for track, bench in benchmarks.items():
        for pair in bench.pairs:
            if want is not None and (track, pair.pair_id) not in want:
                continue
            for side in ("M", "M'"):
                out[(track, pair.pair_id, side)] = build_rubric(pair, side, bench.behaviours, horizon)
    return out
