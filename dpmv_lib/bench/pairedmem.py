"""PairedMem: the controlled synthetic track (paper C.2, Table 6, steps S1-S4).

* S1 :func:`design_specs` - 384 candidate pair specifications (96 per attribute) from a seed; each
  fixes its split (train/validation/test, :func:`candidate_splits`), the template (positions,
  slots, groups I_a), the per-position plan (topic phrase, change verb, the attribute reason on M
  and a length-matched a-neutral reason on M', background facts, co-present evidence of other
  attributes) and the memory style; 25% use templates whose groups overlap. Every part is drawn
  from the spec's split part of the phrase lists (:mod:`dpmv_lib.phrasebank.compose`), so the
  splits share no evidence or background material.
* S2 :func:`realise` - the offline compositional realiser turns a spec into the two stores M and M',
  deterministic per seed. It simulates the writer errors an LLM writer makes (a leaked target
  clause, a drifted background sentence, a dropped non-target clause, a missing evidence clause) at
  a small seeded rate ``defect_rate`` so that S3 is a real filter. Optional LLM wording:
  ``build_pairedmem(realiser="responder:<spec>")`` rewrites through any responder backend
  (:func:`make_writer`, :func:`llm_rewrite`) and code-validates every rewritten position
  (:func:`validated_rewrite`).
* S3 :func:`validate_pair` - code validation (same scaffold, D subset of I_a, target evidence in M
  and absent from M', non-target evidence preserved, slot compatibility, no new evidence, unique
  stores; ``strict``: no counter-evidence in M', labels fit); :func:`select` picks the benchmark by
  fixed attribute x template quotas (which fixes the overlap share) and 60/20/20 split quotas, and
  keeps the other passing candidates as reserves.
* S4 :func:`build_trajectory` - one 32-query trajectory per pair (two disjoint 16-query blocks of
  8 target-relevant, 4 same-domain neutral, 4 distractor queries; neutral queries read no position
  of I_a, so only the 8 target queries of a block charge the target) with composed query strings,
  and deterministic gold behaviours per turn from the policy (:func:`gold_for_turn`).

:func:`build_pairedmem` runs S1-S4, :func:`write_pairedmem` freezes the track under ``data/``
(JSON Lines + ``manifest.json`` with sha256 per file), ``python -m dpmv_lib.pairedmem --build``
does both. :mod:`dpmv_lib.benchmark_quality` audits the result (``data/README.md``).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import lexicon
from .benchmark import Behaviour, GoldTurn, Pair, Turn, pair_to_json
from .datafiles import dump_json, dump_jsonl, file_entries, replace_dir_atomically
from .errors import ParameterError, StoreError
from .benchmark import SPLITS
from .phrasebank import (ATTRIBUTE_CUES, BEHAVIOURS, GENERIC_BEHAVIOURS, INTENTS, OVERLAP_TEMPLATES, SLOTS,
                         TEMPLATES, gold_rules_dict, template_policy_dict, view_links)
from .phrasebank.compose import (CHANGE_VERBS, CONNECTORS, NEUTRAL_REASONS, POSITION_PARTS, REASONS,
                                 split_part)
from .phrasebank.queries import query_variants
from .phrases import FRAMES, STYLES, expand, n_alternatives, render, third_person
from .policy import Policy, Query
from .scorer import cue_hits
from .store import MemoryStore, differing_positions

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

    Indices point into :mod:`dpmv_lib.phrasebank.compose`: ``part`` into
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
    for pos, slot, _label in _positions():
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
            best = None
            for ch in options:
                target_len = _styled_len(expand(REASONS[attribute][it], ch), style) - balance
                n, nch = _matched_neutral(rng, target_len, split, used_neutral, style, longer)
                gap = _styled_len(expand(NEUTRAL_REASONS[n], nch), style) - target_len
                if best is None or abs(gap) < abs(best[0]):
                    best = (gap, ch, n, nch)
                if gap == 0:
                    break
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


def _positions():
    from .phrasebank import POSITIONS
    return POSITIONS


# =============================================================================================
# S2: text realisation
# =============================================================================================
@dataclass(frozen=True)
class Realisation:
    """The two stores' texts for one spec, and the simulated writer error if one was injected."""

    spec_id: str
    m: Mapping[int, str]
    m_prime: Mapping[int, str]
    defect: str = ""
    defect_position: int = -1


def _compose(p: PositionPlan, reason: str) -> str:
    """<change verb> <topic noun phrase> <connector> <reason>, or <reason>, so <verb> <phrase>."""
    lead = f"{CHANGE_VERBS[p.verb % len(CHANGE_VERBS)]} {expand(POSITION_PARTS[p.position][p.part][0], p.part_choices)}"
    if p.order:
        return f"{reason}, so {lead}"
    return f"{lead} {CONNECTORS[p.connector % len(CONNECTORS)]} {reason}"


def _clauses(spec: PairSpec, p: PositionPlan) -> tuple[str, str]:
    """(M clause, M' clause) of one position, before framing."""
    if p.role == "background":
        c = expand(POSITION_PARTS[p.position][p.part][1], p.part_choices)
        return c, c
    other = expand(REASONS[p.other][p.other_reason], p.other_choices) if p.other else ""
    if p.role == "other":
        c = _compose(p, other)
        return c, c
    ev = expand(REASONS[spec.attribute][p.reason], p.reason_choices)
    neutral = expand(NEUTRAL_REASONS[p.neutral], p.neutral_choices)
    if p.role == "target+other":
        return _compose(p, f"{ev} and {other}"), _compose(p, f"{neutral} and {other}")
    return _compose(p, ev), _compose(p, neutral)


def _other_frame(style: str, frame: int) -> int:
    """The next frame index whose wording differs from ``frame``'s (for the drift defect)."""
    frames = FRAMES[style]
    for k in range(1, len(frames)):
        if frames[(frame + k) % len(frames)] != frames[frame % len(frames)]:
            return frame + k
    return frame + 1


def realise(spec: PairSpec, seed: int = 0, defect_rate: float = DEFAULT_DEFECT_RATE) -> Realisation:
    """S2: the template realiser (deterministic in ``seed``), with seeded simulated writer errors."""
    if not 0 <= defect_rate <= 1:
        raise ParameterError(f"defect_rate must lie in [0, 1], got {defect_rate}")
    m, mp = {}, {}
    for p in spec.plan:
        a, b = _clauses(spec, p)
        m[p.position] = render(a, spec.style, p.frame)
        mp[p.position] = render(b, spec.style, p.frame)
    rng = random.Random(f"pairedmem:{seed}:s2:{spec.spec_id}")
    if rng.random() >= defect_rate:
        return Realisation(spec.spec_id, m, mp)
    kind = rng.choice(DEFECT_KINDS)
    ev = list(spec.evidence_positions)
    shared = [p for p in spec.plan if p.role == "target+other"]
    if kind == "drop" and not shared:
        kind = "leak"
    if kind == "leak":          # the writer keeps the target clause in M'
        pos = rng.choice(ev)
        mp[pos] = m[pos]
    elif kind == "miss":        # the writer forgets the target clause in M
        pos = rng.choice(ev)
        m[pos] = mp[pos]
    elif kind == "drift":       # the writer rewords a sentence outside I_a on one side
        pos = rng.choice([p.position for p in spec.plan if p.position not in ev])
        plan = next(p for p in spec.plan if p.position == pos)
        mp[pos] = render(_clauses(spec, plan)[1], spec.style, _other_frame(spec.style, plan.frame))
    else:                       # "drop": the writer drops the non-target clause at a shared position
        p = rng.choice(shared)
        pos = p.position
        mp[pos] = render(_compose(p, expand(NEUTRAL_REASONS[p.neutral], p.neutral_choices)), spec.style, p.frame)
    return Realisation(spec.spec_id, m, mp, kind, pos)


def llm_rewrite(realisation: Realisation, generate: Callable[[list[str]], list[str]],
                positions: Iterable[int] | None = None) -> Realisation:
    """Optional S2 hook: rewrite sentences with an LLM writer.

    ``generate`` maps a list of prompts to a list of rewrites (e.g. a responder backend's batch
    call; no network is used here). Positions where M and M' agree are rewritten once and the
    same text is used on both sides; differing positions are rewritten per side. The result must
    go through :func:`validate_pair` like the template output (C.2 S3)."""
    pos = sorted(realisation.m) if positions is None else sorted(positions)
    prompts, keys = [], []
    for i in pos:
        same = realisation.m[i] == realisation.m_prime[i]
        for side, text in (("M", realisation.m[i]), ("M'", realisation.m_prime[i])):
            if same and side == "M'":
                continue
            prompts.append(f"{REWRITE_INSTRUCTION}\n{text}")
            keys.append((i, side, same))
    outs = list(generate(prompts))
    if len(outs) != len(prompts):
        raise ParameterError(f"generate returned {len(outs)} texts for {len(prompts)} prompts")
    m, mp = dict(realisation.m), dict(realisation.m_prime)
    for (i, side, same), text in zip(keys, outs):
        text = str(text).strip()
        if side == "M":
            m[i] = text
            if same:
                mp[i] = text
        else:
            mp[i] = text
    return Realisation(realisation.spec_id, m, mp, realisation.defect, realisation.defect_position)


REWRITE_INSTRUCTION = ("Rewrite this memory note in natural wording. Keep every fact, add none, "
                       "answer with the sentence only:")


def responder_writer(responder: Any, tag: str = "pairedmem-s2") -> Callable[[list[str]], list[str]]:
    """Wrap a responder (:func:`dpmv_lib.responders.make_responder`: a local model, llama.cpp or an
    OpenAI-compatible server) as the ``generate`` callable of :func:`llm_rewrite`: each rewrite
    prompt is sent as one request with no conditioning, keyed (tag, k, 0) for seeded backends."""
    from .responders.base import Prompt

    def generate(prompts: list[str]) -> list[str]:
        return list(responder.respond([Prompt(query=p, key=(tag, k, 0)) for k, p in enumerate(prompts)]))

    return generate


def make_writer(realiser: str, policies: Mapping[str, Policy] | None = None) -> Callable[[list[str]], list[str]] | None:
    """``"template"`` -> None (the offline deterministic realiser alone); ``"responder:<spec>"`` ->
    an LLM writer over any responder spec (e.g. ``responder:openai:http://localhost:8000/v1|mistral``,
    ``responder:hf:/models/Mistral-7B-Instruct``)."""
    if realiser == "template":
        return None
    if realiser.startswith("responder:"):
        from .responders import make_responder
        return responder_writer(make_responder(realiser[len("responder:"):],
                                               list(policies.values()) if policies else None))
    raise ParameterError(f"unknown realiser {realiser!r}; use 'template' or 'responder:<spec>'")


def rewrite_problems(spec: PairSpec, position: int, m_text: str, mp_text: str, before_m: str,
                     before_mp: str) -> list[str]:
    """Code validation of one rewritten position (S2 option, checked before S3): the target
    signal and a target cue survive on M where the template had them; M' carries no target signal,
    cue or counter-evidence; co-present evidence survives on both sides; no attribute's signal is
    added; the rewrite keeps the position label's topic."""
    from .benchmark_quality import counter_evidence_hits, label_fits
    a = spec.attribute
    label = next(lab for i, _s, lab in _positions() if i == position)
    problems = []
    if lexicon.has_signal(before_m, a) and not (lexicon.has_signal(m_text, a) and cue_hits(ATTRIBUTE_CUES[a], m_text)):
        problems.append("target cue lost on M")
    if lexicon.has_signal(mp_text, a) or cue_hits(ATTRIBUTE_CUES[a], mp_text) or counter_evidence_hits(mp_text, a):
        problems.append("target cue or counter-evidence on M'")
    for side, new, old in (("M", m_text, before_m), ("M'", mp_text, before_mp)):
        if set(lexicon.signalled_attributes(new)) != set(lexicon.signalled_attributes(old)):
            problems.append(f"attribute signals changed on {side}")
        if not label_fits(new, label):
            problems.append(f"{side} no longer fits the label {label!r}")
    return problems


def validated_rewrite(spec: PairSpec, realisation: Realisation, generate: Callable[[list[str]], list[str]]
                      ) -> tuple[Realisation, dict[int, list[str]]]:
    """The optional LLM realiser (C.2 S2: an LLM writes the wording) with code validation per
    position (:func:`rewrite_problems`): a rejected position keeps the template wording on both
    sides. Returns the realisation and the rejected positions with their reasons; the pair then
    goes through S3 (:func:`validate_pair`) like any other."""
    r = llm_rewrite(realisation, generate)
    m, mp = dict(r.m), dict(r.m_prime)
    rejected: dict[int, list[str]] = {}
    for i in sorted(m):
        probs = rewrite_problems(spec, i, m[i], mp[i], realisation.m[i], realisation.m_prime[i])
        if (realisation.m[i] == realisation.m_prime[i]) != (m[i] == mp[i]):
            probs.append("equality of M and M' changed")
        if probs:
            rejected[i] = probs
            m[i], mp[i] = realisation.m[i], realisation.m_prime[i]
    return Realisation(r.spec_id, m, mp, r.defect, r.defect_position), rejected


# =============================================================================================
# S3: validation and selection
# =============================================================================================
def validate_pair(policy: Policy, attribute: str, m: MemoryStore, m_prime: MemoryStore, *,
                  evidence_positions: Sequence[int], co_present: Sequence[str] = (),
                  nontarget_positions: Mapping[int, str] | None = None, strict: bool = False) -> list[str]:
    """S3 / T3: every reason the pair fails the code checks (empty list = passes).

    1. same scaffold: both stores on the policy layout;
    2. D = {i : m_i != m'_i} lies in I_a, and the evidence positions lie in I_a;
    3. target evidence present in M at every evidence position (lexicon signal);
    4. target evidence absent from M' everywhere (lexicon signal and the attribute's view cues);
    5. no new evidence: M and M' carry no signal of attributes outside {a} and the co-present ones;
    6. non-target evidence preserved: every co-present attribute's evidence is present in both
       stores at its positions (in particular at overlapping positions);
    7. slot compatibility: each evidence position's M text hits a cue of a view linked to a in
       that position's slot (so the scorer can use it there);
    8. with ``strict`` (PairedMem v2): no M' sentence asserts or negates a
       (``benchmark_quality.COUNTER_EVIDENCE``) and every sentence of both stores fits its
       position label (``benchmark_quality.POSITION_TOPICS``)."""
    problems: list[str] = []
    group = policy.attribute(attribute).group
    if tuple(m.layout) != policy.layout or tuple(m_prime.layout) != policy.layout:
        return ["the stores do not share the policy's 28-position scaffold"]
    d = differing_positions(m, m_prime)
    if d - group:
        problems.append(f"stores differ outside I_a at positions {sorted(d - group)}")
    if set(evidence_positions) - group:
        problems.append(f"evidence positions {sorted(set(evidence_positions) - group)} lie outside I_a")
    if not evidence_positions:
        problems.append("no target evidence position")
    for i in evidence_positions:
        if not lexicon.has_signal(m.contents[i], attribute):
            problems.append(f"M lacks target evidence at position {i}")
    for i, text in m_prime.contents.items():
        hits = lexicon.signal_hits(text, attribute)
        if hits:
            problems.append(f"M' keeps target evidence {hits} at position {i}")
        elif cue_hits(ATTRIBUTE_CUES[attribute], text):
            problems.append(f"M' keeps a target cue at position {i}")
    allowed = {attribute, *co_present}
    for side, store in (("M", m), ("M'", m_prime)):
        for i, text in store.contents.items():
            extra = set(lexicon.signalled_attributes(text)) - allowed
            if extra:
                problems.append(f"{side} carries evidence of {sorted(extra)} at position {i}")
    for i, b in (nontarget_positions or {}).items():
        for side, store in (("M", m), ("M'", m_prime)):
            if not lexicon.has_signal(store.contents[i], b):
                problems.append(f"non-target evidence of {b!r} missing from {side} at position {i}")
    links = view_links()
    slot_of = dict(policy.layout)
    for i in evidence_positions:
        views = [v for v in policy.slot(slot_of[i]).views if attribute in links.get(v.id, ())]
        if not any(cue_hits(v.cues, m.contents[i]) for v in views):
            problems.append(f"evidence at position {i} matches no {attribute} view of slot {slot_of[i]!r}")
    if strict:
        from .benchmark_quality import counter_evidence_hits, label_fits
        labels = {p.id: p.label for p in policy.positions}
        for i, text in m_prime.contents.items():
            hits = counter_evidence_hits(text, attribute)
            if hits:
                problems.append(f"M' asserts or negates {attribute} at position {i}: {hits}")
        for side, store in (("M", m), ("M'", m_prime)):
            for i, text in store.contents.items():
                if not label_fits(text, labels[i]):
                    problems.append(f"{side} position {i} does not fit its label {labels[i]!r}")
    return problems


@dataclass(frozen=True)
class Candidate:
    spec: PairSpec
    realisation: Realisation
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def validate_candidates(specs: Sequence[PairSpec], realisations: Sequence[Realisation],
                        policies: Mapping[str, Policy]) -> list[Candidate]:
    """S3 over all candidates, plus the cross-pair check that no two pairs have identical stores."""
    seen: dict[str, str] = {}
    out = []
    for spec, r in zip(specs, realisations):
        pol = policies[spec.policy_id]
        m = MemoryStore.from_policy(pol, r.m, name=f"{spec.spec_id}/M")
        mp = MemoryStore.from_policy(pol, r.m_prime, name=f"{spec.spec_id}/M'")
        problems = validate_pair(pol, spec.attribute, m, mp, evidence_positions=spec.evidence_positions,
                                 co_present=spec.co_present, nontarget_positions=spec.nontarget_positions(),
                                 strict=True)
        key = hashlib.sha256(json.dumps([sorted(r.m.items()), sorted(r.m_prime.items())]).encode()).hexdigest()
        if key in seen:
            problems.append(f"identical stores to candidate {seen[key]}")
        else:
            seen[key] = spec.spec_id
        out.append(Candidate(spec, r, tuple(problems)))
    return out


def select(candidates: Sequence[Candidate], n_per_attribute: int = 80, seed: int = 0
           ) -> tuple[list[Candidate], list[Candidate], dict[str, str]]:
    """S3 selection by fixed attribute x template quotas (:func:`template_quotas`, so 25% overlap;
    C.2 S3) and, inside each template, split quotas (:func:`split_quotas`, 60/20/20), in a seeded
    order within each cell. A (template, split) cell short of passing candidates first borrows from
    the same template's other splits (template quotas stay exact), then from templates of the same
    attribute, split and overlap class (both reported in the notes). Returns (selected, reserves,
    notes); reserves = passing candidates not selected (each keeps the split of its spec)."""
    notes: dict[str, str] = {}
    cells: dict[tuple[str, str, str], list[Candidate]] = defaultdict(list)
    for c in candidates:
        if c.passed:
            cells[(c.spec.attribute, c.spec.template, c.spec.split)].append(c)
    for key, lst in cells.items():
        random.Random(f"pairedmem:{seed}:select:{key[0]}:{key[1]}:{key[2]}").shuffle(lst)
    selected: list[Candidate] = []
    for attribute in ATTRIBUTES:
        quotas = template_quotas(n_per_attribute)
        shorts: dict[tuple[str, bool], int] = defaultdict(int)
        for t in quotas:
            sq = split_quotas(quotas[t])
            missing = {}
            for split in SPLITS:
                lst = cells[(attribute, t, split)]
                take = min(sq[split], len(lst))
                selected.extend(lst[:take])
                del lst[:take]
                missing[split] = sq[split] - take
            for split, k in missing.items():
                for donor in SPLITS:
                    while k and donor != split and cells[(attribute, t, donor)]:
                        selected.append(cells[(attribute, t, donor)].pop(0))
                        k -= 1
                        notes[f"{attribute}/{t}/{split}"] = f"short cell filled from the {donor} candidates"
                shorts[(split, t in OVERLAP_TEMPLATES)] += k
        for (split, ov), short in shorts.items():
            for t in [t for t in quotas if (t in OVERLAP_TEMPLATES) == ov]:
                while short and cells[(attribute, t, split)]:
                    selected.append(cells[(attribute, t, split)].pop(0))
                    short -= 1
                    notes[f"{attribute}/{t}/{split}"] = "borrowed to fill a short cell of another template"
            if short:
                raise StoreError(f"not enough passing {attribute} candidates for the "
                                 f"{'overlap' if ov else 'non-overlap'} quota ({short} missing); "
                                 "raise n_per_attribute or lower defect_rate")
    chosen = {c.spec.spec_id for c in selected}
    reserves = [c for c in candidates if c.passed and c.spec.spec_id not in chosen]
    key = lambda c: c.spec.index  # noqa: E731
    return sorted(selected, key=key), sorted(reserves, key=key), notes


# =============================================================================================
# S4: queries and deterministic gold
# =============================================================================================
def behaviour_catalogue() -> dict[str, Behaviour]:
    """All gold behaviours (ids -> records): per (attribute, linked view) a target-required and an
    unsupported record with the same observable description; per intent a generic one."""
    out: dict[str, Behaviour] = {}
    for (a, v), desc in BEHAVIOURS.items():
        slot = v.split(".")[0]
        out[f"req:{a}:{v}"] = Behaviour(f"req:{a}:{v}", "target_required", desc, a, slot)
        out[f"unsup:{a}:{v}"] = Behaviour(f"unsup:{a}:{v}", "unsupported", desc, a, slot)
    for intent, desc in GENERIC_BEHAVIOURS.items():
        out[f"generic:{intent}"] = Behaviour(f"generic:{intent}", "generic", desc, "", intent.split(".")[0])
    return dict(sorted(out.items()))


def linked_views(policy: Policy, attribute: str, slot: str, intent: str) -> list[str]:
    """Views of ``slot`` linked to ``attribute`` that serve ``intent`` (the gold rule's basis)."""
    links = view_links()
    return [v.id for v in policy.slot(slot).views if attribute in links.get(v.id, ()) and intent in v.intents]


def gold_for_turn(policy: Policy, attribute: str, co_present: Sequence[str], query: Query, slot: str,
                  nontarget_positions: Mapping[int, str] | None = None) -> GoldTurn:
    """Deterministic gold (S4). On a target-relevant turn the behaviours of every view linked to the
    target attribute that serves the query's intent are target-required on M. On M' the same
    behaviours are unsupported, except for a view that a co-present attribute b also links to AND
    whose turn reads b's evidence: then M' supports the view through b and the entry is removed.
    ``nontarget_positions`` (position -> co-present attribute, in both stores) says where b's
    evidence is; ``None`` falls back to "every co-present attribute counts" (the v1 rule, which
    also removed entries whose read set holds no evidence of b). Every turn carries the intent's
    generic behaviour."""
    links = view_links()
    generic = (f"generic:{query.intent}",)
    if query.qtype != "target":
        return GoldTurn((), (), generic)
    views = linked_views(policy, attribute, slot, query.intent)
    req = tuple(f"req:{attribute}:{v}" for v in views)
    if nontarget_positions is None:
        present = set(co_present)
    else:
        read = set(policy.read(query, slot))
        present = {b for i, b in nontarget_positions.items() if int(i) in read and b in co_present}
    unsup = tuple(f"unsup:{attribute}:{v}" for v in views if not set(links[v]) & present)
    return GoldTurn(req, unsup, generic)


def intent_families(policy: Policy, attribute: str) -> dict[str, list[str]]:
    """Public intents by query type for ``attribute`` under this template: target-relevant (an
    attribute-linked view of a slot holding I_a serves it and its read set touches I_a),
    same-domain neutral (intents of those slots whose read set avoids I_a, so they charge nothing
    to the target: Table 4's 8 x 2/3 at T = 16), distractor (slots without I_a). Intents of a
    domain slot that read I_a without a linked view are not used."""
    group = policy.attribute(attribute).group
    slot_of = dict(policy.layout)
    domain = [s for s in SLOTS if any(slot_of[i] == s for i in group)]
    fam: dict[str, list[str]] = {"target": [], "neutral": [], "distractor": []}
    for s in SLOTS:
        for i in INTENTS[s]:
            intent = f"{s}.{i}"
            reads_group = bool(set(policy.read(Query("", intent), s)) & group)
            if s not in domain:
                fam["distractor"].append(intent)
            elif reads_group and linked_views(policy, attribute, s, intent):
                fam["target"].append(intent)
            elif not reads_group:
                fam["neutral"].append(intent)
    return fam


def _pick_intents(rng: random.Random, intents: list[str], n: int, usage: Counter) -> list[str]:
    """``n`` intents spread over slots, least-used first (ties seeded)."""
    out = []
    for _ in range(n):
        slot_use = Counter(i.split(".")[0] for i in out)
        ranked = sorted(intents, key=lambda i: (usage[i], slot_use[i.split(".")[0]], rng.random()))
        pick = ranked[0]
        usage[pick] += 1
        out.append(pick)
    return out


def build_trajectory(policy: Policy, attribute: str, co_present: Sequence[str], rng: random.Random,
                     n_blocks: int = 2, nontarget_positions: Mapping[int, str] | None = None) -> tuple[Turn, ...]:
    """S4: the fixed query trajectory of one pair (two disjoint 16-query blocks); each query string
    is drawn from the intent's composed phrasings (:func:`~dpmv_lib.phrasebank.queries.query_variants`)."""
    fam = intent_families(policy, attribute)
    usage: Counter = Counter()
    used_text: set[str] = set()
    turns: list[Turn] = []
    for block in range(n_blocks):
        items: list[tuple[str, str]] = []
        for qtype, n in BLOCK_COMPOSITION:
            for intent in _pick_intents(rng, fam[qtype], n, usage):
                items.append((qtype, intent))
        rng.shuffle(items)
        for qtype, intent in items:
            options = [q for q in query_variants(intent) if q not in used_text]
            if not options:
                raise ParameterError(f"intent {intent!r} ran out of distinct phrasings")
            text = rng.choice(options)
            used_text.add(text)
            q = Query(text, intent, qtype)
            slot = policy.route(q)[0]
            turns.append(Turn(len(turns), block, q, slot,
                              gold_for_turn(policy, attribute, co_present, q, slot, nontarget_positions)))
    return tuple(turns)


def trajectory_problems(policy: Policy, pair: Pair, behaviours: Mapping[str, Behaviour]) -> list[str]:
    """S4 checks: block composition, disjoint blocks, lexicon check, routing, reads and gold."""
    problems = []
    group = policy.attribute(pair.attribute).group
    texts = [t.query.text for t in pair.turns]
    if len(set(texts)) != len(texts):
        problems.append("a query text repeats within the trajectory")
    for b in sorted({t.block for t in pair.turns}):
        c = Counter(t.query.qtype for t in pair.turns if t.block == b)
        if dict(c) != dict(BLOCK_COMPOSITION):
            problems.append(f"block {b} composition {dict(c)}")
    for t in pair.turns:
        bad = lexicon.query_problems(t.query.text)
        if bad:
            problems.append(f"turn {t.index} query names {bad}")
        if policy.route(t.query) != (t.slot,):
            problems.append(f"turn {t.index} routes elsewhere than its slot {t.slot}")
        touches = bool(set(policy.read(t.query, t.slot)) & group)
        if t.query.qtype == "target" and not touches:
            problems.append(f"target turn {t.index} does not read I_a")
        if t.query.qtype in ("distractor", "neutral") and touches:
            problems.append(f"{t.query.qtype} turn {t.index} reads I_a")
        if t.query.qtype == "target" and not t.gold.target_required:
            problems.append(f"target turn {t.index} has no target-required behaviour")
        for bid in (*t.gold.target_required, *t.gold.unsupported, *t.gold.generic):
            if bid not in behaviours:
                problems.append(f"turn {t.index} cites unknown behaviour {bid!r}")
    return problems


# =============================================================================================
# the whole build
# =============================================================================================
@dataclass(frozen=True)
class PairedMemBuild:
    seed: int
    params: Mapping[str, Any]
    policies: Mapping[str, Policy]
    specs: tuple[PairSpec, ...]
    candidates: tuple[Candidate, ...]
    pairs: tuple[Pair, ...]
    reserves: tuple[Pair, ...]
    behaviours: Mapping[str, Behaviour]
    notes: Mapping[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        return pairedmem_counts(self)


def _to_pair(c: Candidate, policies: Mapping[str, Policy], seed: int) -> Pair:
    spec, r = c.spec, c.realisation
    pol = policies[spec.policy_id]
    m = MemoryStore.from_policy(pol, r.m, name=f"{spec.spec_id}/M")
    mp = MemoryStore.from_policy(pol, r.m_prime, name=f"{spec.spec_id}/M'")
    rng = random.Random(f"pairedmem:{seed}:s4:{spec.spec_id}")
    turns = build_trajectory(pol, spec.attribute, spec.co_present, rng,
                             nontarget_positions=spec.nontarget_positions())
    meta = {"spec_id": spec.spec_id, "co_present": list(spec.co_present), "style": spec.style,
            "group": list(spec.group), "evidence_positions": list(spec.evidence_positions),
            "overlap_positions": sorted(overlap_partners(spec.template, spec.attribute)),
            "nontarget_positions": {str(k): v for k, v in sorted(spec.nontarget_positions().items())},
            "differing_positions": sorted(differing_positions(m, mp)), "seed": seed}
    return Pair(spec.spec_id, TRACK, spec.attribute, spec.template, spec.policy_id, spec.overlap, spec.split,
                m, mp, turns, meta)


def build_pairedmem(seed: int = 0, n_candidates_per_attribute: int = 96, n_selected_per_attribute: int = 80,
                    defect_rate: float = DEFAULT_DEFECT_RATE, cap: str = "2",
                    progress: bool = False, realiser: str = "template",
                    writer: Callable[[list[str]], list[str]] | None = None) -> PairedMemBuild:
    """Run S1-S4 (C.2). Paper scale: 384 candidates, 320 selected; smaller numbers give a reduced
    build with the same rules (tests, smoke profile). ``realiser``: ``"template"`` (default, offline
    and deterministic) or ``"responder:<spec>"`` (an LLM rewrites the template wording, validated
    per position by :func:`validated_rewrite`); ``writer`` passes such a generate callable directly."""
    if n_selected_per_attribute > n_candidates_per_attribute:
        raise ParameterError("cannot select more pairs than there are candidates per attribute")
    policies = template_policies(cap)
    specs = design_specs(seed, n_candidates_per_attribute, n_selected_per_attribute=n_selected_per_attribute)
    it: Iterable[PairSpec] = specs
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(specs, desc="S2 realise", leave=False)
    realisations = [realise(s, seed, defect_rate) for s in it]
    writer = writer if writer is not None else make_writer(realiser, policies)
    rejected_total = 0
    if writer is not None:
        out = []
        for s, r in zip(specs, realisations):
            r2, rejected = validated_rewrite(s, r, writer)
            rejected_total += len(rejected)
            out.append(r2)
        realisations = out
    candidates = validate_candidates(specs, realisations, policies)
    selected, reserves, notes = select(candidates, n_selected_per_attribute, seed)
    behaviours = behaviour_catalogue()
    pairs = tuple(_to_pair(c, policies, seed) for c in selected)
    res = tuple(_to_pair(c, policies, seed) for c in reserves)
    for p in (*pairs, *res):
        problems = trajectory_problems(policies[p.policy_id], p, behaviours)
        if problems:
            raise StoreError(f"S4 trajectory of {p.pair_id} fails: {problems[:3]}")
    params = {"seed": seed, "n_candidates_per_attribute": n_candidates_per_attribute,
              "n_selected_per_attribute": n_selected_per_attribute, "defect_rate": defect_rate, "cap": cap,
              "realiser": realiser if writer is None or realiser != "template" else "custom writer"}
    if writer is not None:
        notes = {**notes, "llm_rewrite_rejected_positions": str(rejected_total)}
    return PairedMemBuild(seed, params, policies, tuple(specs), tuple(candidates), pairs, res, behaviours, notes)


def pairedmem_counts(build: PairedMemBuild) -> dict[str, Any]:
    """Table 5/6 counts of a build (measured, never typed in)."""
    cands = build.candidates
    passed = [c for c in cands if c.passed]
    pairs = build.pairs
    sizes = Counter(len(TEMPLATES[p.template][p.attribute]) for p in pairs)
    qtypes = Counter(t.query.qtype for p in pairs for t in p.turns)
    all_sentences = {s for p in (*pairs, *build.reserves) for st in (p.m, p.m_prime) for s in st.contents.values()}
    ev_sentences = {p.m.contents[i] for p in pairs for i in p.meta["evidence_positions"]}
    return {
        "candidate_specs": len(cands),
        "candidates_per_attribute": dict(sorted(Counter(c.spec.attribute for c in cands).items())),
        "passed_validation": len(passed),
        "failed_validation": len(cands) - len(passed),
        "injected_writer_errors": sum(1 for c in cands if c.realisation.defect),
        "failures_by_kind": dict(sorted(Counter(c.realisation.defect or "genuine" for c in cands
                                                if not c.passed).items())),
        "selected_pairs": len(pairs),
        "reserves": len(build.reserves),
        "positions_per_store": len(next(iter(build.policies.values())).positions),
        "slots": len(SLOTS),
        "templates": len(TEMPLATES),
        "overlap_share": round(sum(p.overlap for p in pairs) / max(1, len(pairs)), 4),
        "candidate_overlap_share": round(sum(c.spec.overlap for c in cands) / max(1, len(cands)), 4),
        "group_size_min": min(sizes) if sizes else 0,
        "group_size_max": max(sizes) if sizes else 0,
        "group_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "pairs_per_attribute": dict(sorted(Counter(p.attribute for p in pairs).items())),
        "pairs_per_split": dict(sorted(Counter(p.split for p in pairs).items())),
        "pairs_with_co_present": sum(1 for p in pairs if p.meta["co_present"]),
        "queries_per_pair": len(pairs[0].turns) if pairs else 0,
        "paired_query_turns": sum(len(p.turns) for p in pairs),
        "queries_by_type": dict(sorted(qtypes.items())),
        "distinct_query_texts": len({t.query.text for p in pairs for t in p.turns}),
        "behaviours": len(build.behaviours),
        "behaviours_by_kind": dict(sorted(Counter(b.kind for b in build.behaviours.values()).items())),
        "distinct_memory_sentences": len(all_sentences),
        "distinct_evidence_sentences": len(ev_sentences),
        "distinct_stores_M": len({json.dumps(sorted(p.m.contents.items())) for p in pairs}),
    }


# =============================================================================================
# writing (atomic) and manifests
# =============================================================================================
def write_policies(policies: Mapping[str, Policy], data_dir: str | Path) -> Path:
    """data/policy/: one Policy JSON per template, the gold rules, and a checksum manifest."""
    target = Path(data_dir) / "policy"

    def fill(d: Path) -> None:
        names = []
        for pid in sorted(policies):
            dump_json(d / f"{pid}.json", policies[pid].to_dict())
            names.append(f"{pid}.json")
        dump_json(d / "gold_rules.json", gold_rules_dict())
        names.append("gold_rules.json")
        dump_json(d / "manifest.json", {"format_version": FORMAT_VERSION, "policies": sorted(policies),
                                         "files": file_entries(d, names, {})})

    replace_dir_atomically(target, fill)
    return target


def behaviour_rows(behaviours: Mapping[str, Behaviour]) -> list[dict[str, Any]]:
    return [asdict(b) for b in behaviours.values()]


def write_pairedmem(build: PairedMemBuild, data_dir: str | Path = "data") -> Path:
    """Freeze a build under ``data_dir``: policy/ and pairedmem/ (pairs, reserves, specs with their
    validation results, behaviours, manifest with counts and sha256 per file)."""
    data_dir = Path(data_dir)
    write_policies(build.policies, data_dir)
    target = data_dir / TRACK

    def fill(d: Path) -> None:
        rows = {
            "pairs.jsonl": dump_jsonl(d / "pairs.jsonl", (pair_to_json(p) for p in build.pairs)),
            "reserves.jsonl": dump_jsonl(d / "reserves.jsonl", (pair_to_json(p) for p in build.reserves)),
            "specs.jsonl": dump_jsonl(d / "specs.jsonl", (
                {**c.spec.to_json(), "passed": c.passed, "problems": list(c.problems),
                 "injected_defect": c.realisation.defect,
                 "status": ("selected" if c.spec.spec_id in {p.pair_id for p in build.pairs} else
                            "reserve" if c.passed else "failed")} for c in build.candidates)),
            "behaviours.jsonl": dump_jsonl(d / "behaviours.jsonl", behaviour_rows(build.behaviours)),
        }
        manifest = {"format_version": FORMAT_VERSION, "track": TRACK, "generator": "dpmv_lib.pairedmem",
                    "params": dict(build.params), "counts": pairedmem_counts(build),
                    "selection_notes": dict(build.notes), "policies": sorted(build.policies),
                    "files": file_entries(d, sorted(rows), rows)}
        dump_json(d / "manifest.json", manifest)

    replace_dir_atomically(target, fill)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.pairedmem", description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="store_true", help="build and write the PairedMem track")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--candidates", type=int, default=96, help="candidate specs per attribute")
    ap.add_argument("--selected", type=int, default=80, help="selected pairs per attribute")
    ap.add_argument("--defect-rate", type=float, default=DEFAULT_DEFECT_RATE)
    ap.add_argument("--realiser", default="template",
                    help="template (offline, deterministic) or responder:<responder spec> (LLM wording, validated)")
    args = ap.parse_args(argv)
    if not args.build:
        ap.print_help()
        return 0
    from .paths import resolve
    t0 = time.perf_counter()
    build = build_pairedmem(args.seed, args.candidates, args.selected, args.defect_rate, progress=True,
                            realiser=args.realiser)
    out = write_pairedmem(build, resolve(args.data_dir))
    c = build.counts()
    print(f"PairedMem: {c['candidate_specs']} candidates, {c['passed_validation']} passed, "
          f"{c['selected_pairs']} selected, {c['reserves']} reserves -> {out} "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
