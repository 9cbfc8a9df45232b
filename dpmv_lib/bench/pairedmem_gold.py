"""PairedMem S4 (paper C.2): the gold behaviour catalogue, deterministic gold per turn from the
policy (:func:`gold_for_turn`) and the 32-query trajectories (:func:`build_trajectory`).
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Mapping, Sequence

from . import lexicon
from .benchmark import Behaviour, GoldTurn, Pair, Turn
from ..core.errors import ParameterError
from .phrasebank import BEHAVIOURS, GENERIC_BEHAVIOURS, INTENTS, SLOTS, view_links
from .phrasebank.queries import query_variants
from ..core.policy import Policy, Query
from .pairedmem_specs import BLOCK_COMPOSITION


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
    evidence is; ``None`` falls back to "every co-present attribute counts" (a coarser rule,
    which also removes entries whose read set holds no evidence of b). Every turn carries the intent's
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
    out: list[str] = []
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
    is drawn from the intent's composed phrasings (:func:`~dpmv_lib.bench.phrasebank.queries.query_variants`)."""
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
