"""PairedMem S2-S3 (paper C.2): the offline compositional realiser with seeded simulated writer
errors (:func:`realise`), the optional LLM rewrite with per-position code validation
(:func:`validated_rewrite`; the writer itself: :mod:`dpmv_lib.generate.writer`), the pair
validation (:func:`validate_pair`) and the quota selection (:func:`select`).
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from . import lexicon
from ..core.errors import ParameterError, StoreError
from .benchmark import SPLITS
from .phrasebank import ATTRIBUTE_CUES, OVERLAP_TEMPLATES, view_links
from .phrasebank.compose import CHANGE_VERBS, CONNECTORS, NEUTRAL_REASONS, POSITION_PARTS, REASONS
from .phrases import FRAMES, expand, render
from ..core.policy import Policy
from ..core.scorer import cue_hits
from ..core.store import MemoryStore, differing_positions
from .pairedmem_specs import (ATTRIBUTES, DEFAULT_DEFECT_RATE, DEFECT_KINDS, PairSpec, PositionPlan,
                              template_positions, split_quotas, template_quotas)


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


def rewrite_problems(spec: PairSpec, position: int, m_text: str, mp_text: str, before_m: str,
                     before_mp: str) -> list[str]:
    """Code validation of one rewritten position (S2 option, checked before S3): the target
    signal and a target cue survive on M where the template had them; M' carries no target signal,
    cue or counter-evidence; co-present evidence survives on both sides; no attribute's signal is
    added; the rewrite keeps the position label's topic."""
    from .benchmark_quality import counter_evidence_hits, label_fits
    a = spec.attribute
    label = next(lab for i, _s, lab in template_positions() if i == position)
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
    by_index = lambda c: c.spec.index  # noqa: E731
    return sorted(selected, key=by_index), sorted(reserves, key=by_index), notes
