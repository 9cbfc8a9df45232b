"""PairedMem S1 (paper C.2): candidate pair specifications from a seed - split, template, the
per-position plan (topic phrase, change verb, attribute and length-matched neutral reasons,
background, co-present evidence) and the memory style (:func:`design_specs`). Overview in
:mod:`dpmv_lib.bench.pairedmem`.
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from . import lexicon
from ..core.errors import ParameterError
from .benchmark import SPLITS
from .phrasebank import OVERLAP_TEMPLATES, TEMPLATES, template_policy_dict
from .phrasebank.compose import (CHANGE_VERBS, CONNECTORS, NEUTRAL_REASONS, POSITION_PARTS, REASONS,
                                 split_part)
from .phrases import FRAMES, STYLES, expand, n_alternatives, third_person
from ..core.policy import Policy


ATTRIBUTES: tuple[str, ...] = lexicon.ATTRIBUTES
FORMAT_VERSION = 2
TRACK = "pairedmem"
DEFAULT_DEFECT_RATE = 0.01
BLOCK_COMPOSITION: tuple[tuple[str, int], ...] = (("target", 8), ("neutral", 4), ("distractor", 4))
DEFECT_KINDS: tuple[str, ...] = ("leak", "drift", "drop", "miss")


def policy_id(template: str) -> str:
    return f"pairedmem-{template}"


def template_policies(cap: str = "2") -> dict[str, Policy]:
    """policy_id -> Policy for every scaffold template (the fixed public policy, C.1)."""
    return {policy_id(t): Policy.from_dict(template_policy_dict(t, cap)) for t in TEMPLATES}


def overlap_partners(template: str, attribute: str) -> dict[int, str]:
    """Positions of I_a that also belong to another attribute's group in ``template``."""
    groups = TEMPLATES[template]
    out = {}
    for b, g in groups.items():
        if b != attribute:
            for p in set(groups[attribute]) & set(g):
                out[p] = b
    return dict(sorted(out.items()))


# =============================================================================================
# S1: pair design
# =============================================================================================
@dataclass(frozen=True)
class PositionPlan:
    """What one position of a candidate pair holds (S1) and its wording choices (S2 inputs).

    role: "background" (the same position fact in M and M'), "other" (evidence of a co-present
    non-target attribute, same in M and M'), "target" (target evidence in M, an a-neutral reason
    of matched length in M'), "target+other" (overlapping position: target + non-target evidence
    in M, neutral reason + the same non-target evidence in M').

    Indices point into :mod:`dpmv_lib.bench.phrasebank.compose`: ``part`` into
    ``POSITION_PARTS[position]``, ``reason`` into ``REASONS[attribute]``, ``neutral`` into
    ``NEUTRAL_REASONS``, ``other_reason`` into ``REASONS[other]``; each ``*_choices`` tuple picks
    the ``{a|b}`` fields of its part (drawn independently per part and side)."""

    position: int
    slot: str
    role: str
    part: int
    part_choices: tuple[int, ...] = ()
    verb: int = 0
    connector: int = 0
    order: int = 0
    reason: int = -1
    reason_choices: tuple[int, ...] = ()
    neutral: int = -1
    neutral_choices: tuple[int, ...] = ()
    other: str = ""
    other_reason: int = -1
    other_choices: tuple[int, ...] = ()
    frame: int = 0


@dataclass(frozen=True)
class PairSpec:
    """One candidate pair specification (S1); ``split`` is fixed here (C.2 S1: code creates the
    specifications and the pair-level split), so S2 draws on that split's phrase parts only."""

    spec_id: str
    index: int
    attribute: str
    template: str
    policy_id: str
    overlap: bool
    co_present: tuple[str, ...]
    style: str
    split: str
    plan: tuple[PositionPlan, ...]

    @property
    def group(self) -> tuple[int, ...]:
        return tuple(sorted(TEMPLATES[self.template][self.attribute]))

    @property
    def evidence_positions(self) -> tuple[int, ...]:
        return tuple(p.position for p in self.plan if p.role in ("target", "target+other"))

    def nontarget_positions(self) -> dict[int, str]:
        """position -> co-present attribute whose evidence must stay in both stores."""
        return {p.position: p.other for p in self.plan if p.role in ("other", "target+other")}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["plan"] = [asdict(p) for p in self.plan]
        return d


def _split_quota(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def template_quotas(n: int) -> dict[str, int]:
    """Per-template counts for ``n`` items of one attribute: 25% on overlap templates (C.2 S1)."""
    n_ov = n // 4
    plain = [t for t in TEMPLATES if t not in OVERLAP_TEMPLATES]
    out = dict(zip(plain, _split_quota(n - n_ov, len(plain))))
    out.update(zip(OVERLAP_TEMPLATES, _split_quota(n_ov, len(OVERLAP_TEMPLATES))))
    return out


def split_quotas(q: int) -> dict[str, int]:
    """Selected pairs of one (attribute, template) cell per split: 60/20/20 (train/validation/test)."""
    r = round(0.2 * q)
    return {"train": q - 2 * r, "validation": r, "test": r}


def candidate_splits(n_candidates: int, n_selected: int, template_index: int) -> list[str]:
    """Splits of the ``n_candidates`` candidates of one (attribute, template) cell: the selected
    quota per split (:func:`split_quotas`) plus the spare candidates, one to train, then
    alternately validation / test (starting by template parity), round robin."""
    q = split_quotas(min(n_selected, n_candidates))
    order = ["train", "validation", "test"] if template_index % 2 == 0 else ["train", "test", "validation"]
    spare = n_candidates - sum(q.values())
    for k in range(spare):
        q[order[k % 3]] += 1
    return [s for s in SPLITS for _ in range(q[s])]


def _fields(rng: random.Random, template: str) -> tuple[int, ...]:
    return tuple(rng.randrange(12) for _ in range(max(1, n_alternatives(template))))


def design_specs(seed: int = 0, n_per_attribute: int = 96, co_present_rate: float = 1 / 3,
                 n_selected_per_attribute: int | None = None) -> list[PairSpec]:
    """S1: candidate specifications, ``n_per_attribute`` per attribute, deterministic in ``seed``.

    Templates follow :func:`template_quotas` (25% overlap). Overlap specs make the partner
    attribute co-present (its evidence sits in both stores, also at the shared position);
    a non-overlap spec makes one random other attribute co-present with ``co_present_rate``.
    Each spec gets its split here (:func:`candidate_splits`, seeded order within the cell)."""
    if n_per_attribute < 1:
        raise ParameterError(f"n_per_attribute must be >= 1, got {n_per_attribute}")
    n_sel = n_per_attribute * 5 // 6 if n_selected_per_attribute is None else n_selected_per_attribute
    specs: list[PairSpec] = []
    index = 0
    for attribute in ATTRIBUTES:
        quotas = template_quotas(n_per_attribute)
        sel_quotas = template_quotas(min(n_sel, n_per_attribute))
        splits: dict[str, list[str]] = {}
        for ti, (t, q) in enumerate(quotas.items()):
            lst = candidate_splits(q, sel_quotas[t], ti)
            random.Random(f"pairedmem:{seed}:s1split:{attribute}:{t}").shuffle(lst)
            splits[t] = lst
        order = [t for t, q in quotas.items() for _ in range(q)]
        for k, template in enumerate(order):
            rng = random.Random(f"pairedmem:{seed}:s1:{attribute}:{k}")
            split = splits[template].pop()
            groups = TEMPLATES[template]
            shared = overlap_partners(template, attribute)
            if shared:
                co = tuple(sorted(set(shared.values())))
            elif rng.random() < co_present_rate:
                co = (rng.choice([b for b in ATTRIBUTES if b != attribute]),)
            else:
                co = ()
            style = rng.choice(STYLES)
            plan = _plan_positions(rng, attribute, co, groups, split, style)
            specs.append(PairSpec(spec_id=f"pm-{attribute}-{k:03d}", index=index, attribute=attribute,
                                  template=template, policy_id=policy_id(template), overlap=bool(shared),
                                  co_present=co, style=style, split=split, plan=plan))
            index += 1
    return specs


def _pool(items: Sequence[Any], split: str) -> list[int]:
    """Global indices of the ``split`` part of a phrase list (compose.split_part)."""
    part = set(split_part(list(range(len(items))), split, key=lambda i: str(items[i])))
    return sorted(part)


def _plan_positions(rng: random.Random, attribute: str, co: tuple[str, ...],
                    groups: Mapping[str, tuple[int, ...]], split: str, style: str = "first"
                    ) -> tuple[PositionPlan, ...]:
    target = set(groups[attribute])
    other_at: dict[int, str] = {}
    for b in co:
        for p in groups[b]:
            other_at[p] = b
    # distinct reasons per attribute and distinct neutral reasons inside one store
    bags: dict[str, list[int]] = {}

    def draw(key: str, items: Sequence[str]) -> int:
        if not bags.get(key):
            bags[key] = _pool(items, split)
            rng.shuffle(bags[key])
        return bags[key].pop()

    used_neutral: set[int] = set()
    balance = 0     # characters M' has gained over M so far (evidence positions)
    longer = rng.random() < 0.5     # the pair's coin: may M' end up longer (else shorter) than M
    last_target = max(target)
    plan = []
    for pos, slot, _label in template_positions():
        parts = POSITION_PARTS[pos]
        part = rng.choice(_pool(parts, split))
        role = ("target+other" if pos in other_at else "target") if pos in target else \
            ("other" if pos in other_at else "background")
        common = dict(position=pos, slot=slot, role=role, part=part, frame=rng.randrange(len(FRAMES["first"])))
        if role == "background":
            plan.append(PositionPlan(**common, part_choices=_fields(rng, parts[part][1])))
            continue
        common.update(verb=rng.randrange(len(CHANGE_VERBS)), connector=rng.randrange(len(CONNECTORS)),
                      order=int(rng.random() < 0.3), part_choices=_fields(rng, parts[part][0]))
        if role in ("other", "target+other"):
            b = other_at[pos]
            ob = draw(b, REASONS[b])
            common.update(other=b, other_reason=ob, other_choices=_fields(rng, REASONS[b][ob]))
        if role in ("target", "target+other"):
            it = draw(attribute, REASONS[attribute])
            options = [_fields(rng, REASONS[attribute][it])]
            if pos == last_target:      # the last one may also pick M's field choice to close the gap
                extra = _all_fields(REASONS[attribute][it])
                rng.shuffle(extra)
                options += extra
            best: tuple[Any, ...] | None = None
            for ch in options:
                target_len = _styled_len(expand(REASONS[attribute][it], ch), style) - balance
                n, nch = _matched_neutral(rng, target_len, split, used_neutral, style, longer)
                gap = _styled_len(expand(NEUTRAL_REASONS[n], nch), style) - target_len
                if best is None or abs(gap) < abs(best[0]):
                    best = (gap, ch, n, nch)
                if gap == 0:
                    break
            assert best is not None  # options is never empty
            gap, ch, n, nch = best
            used_neutral.add(n)
            balance = gap
            common.update(reason=it, reason_choices=ch, neutral=n, neutral_choices=nch)
        plan.append(PositionPlan(**common))
    return tuple(plan)


def _styled_len(clause: str, style: str) -> int:
    """Characters of a clause as the store shows it (third-person style rewrites pronouns)."""
    return len(third_person(clause) if style == "third" else clause)


def _matched_neutral(rng: random.Random, length: int, split: str, used: set[int], style: str = "first",
                     longer: bool = True) -> tuple[int, tuple[int, ...]]:
    """An a-neutral reason for M' of about the same length as the M reason (goal 4, length
    artefact), from the split's part of ``NEUTRAL_REASONS`` with its own field choices (no number
    of M' is a function of M's). Among every (reason, field choice) of the part, the closest in
    length on the side a seeded coin of the pair picks (M' at least as long, or at most as long)
    is taken (unless the other side has one more than 2 characters closer), ties broken by the
    seeded draw. :func:`_plan_positions` asks for the M reason's length minus
    the M'-over-M surplus so far, so the two stores' total lengths agree."""
    cands = []
    for i in _pool(NEUTRAL_REASONS, split):
        if i in used:
            continue
        for ch in _all_fields(NEUTRAL_REASONS[i]):
            cands.append((_styled_len(expand(NEUTRAL_REASONS[i], ch), style) - length, rng.random(), i, ch))
    key = lambda c: (abs(c[0]), c[1])  # noqa: E731
    side = [c for c in cands if (c[0] >= 0 if longer else c[0] <= 0)]
    best = min(cands, key=key)
    d, _tie, i, ch = min(side, key=key) if side and abs(min(side, key=key)[0]) <= abs(best[0]) + 2 else best
    return i, ch


def _all_fields(template: str) -> list[tuple[int, ...]]:
    """Every field-choice tuple of a clause template (one option index per ``{a|b}`` group)."""
    sizes = [len(g.split("|")) for g in re.findall(r"\{([^{}]*)\}", template)]
    return [tuple(c) for c in itertools.product(*[range(n) for n in sizes])] if sizes else [(0,)]


def template_positions():
    from .phrasebank import POSITIONS
    return POSITIONS
