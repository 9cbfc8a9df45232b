"""Transfer track measured quality: the figures computed from the stores
(:func:`quality_report`) that tests assert on the committed data, and the Table 7 rows.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping

from ..core.store import differing_positions
from .transfer_corpora import (ATTRIBUTES, MAX_EVIDENCE_REUSE, MIN_DISTINCT_EVIDENCE, SOURCE_KINDS,
                               pregnancy_persona_fits)
from .transfer_evidence import CONFLICTS, RESIDUAL_SIGNAL, evidence_problems, replacement_problems
from .transfer_support import supported


# =============================================================================================
# measured quality: every figure here is asserted on the committed data
# =============================================================================================
def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between two sentences in words (lower case, punctuation dropped)."""
    x, y = re.findall(r"[\w'’]+", a.lower()), re.findall(r"[\w'’]+", b.lower())
    row = list(range(len(y) + 1))
    for i, wx in enumerate(x, 1):
        prev, row[0] = row[0], i
        for j, wy in enumerate(y, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (wx != wy))
    return row[-1]


EDIT_BINS = ((0.25, "<=0.25"), (0.5, "0.25-0.5"), (0.75, "0.5-0.75"), (1.0, ">0.75"))


def edit_distribution(pairs_mp: list[tuple[str, str]]) -> dict[str, Any]:
    """Word edit distance of (M, M') evidence sentences: min / median / max words changed, the
    median share of changed words (distance / longer length) and counts per share bin."""
    d = sorted(word_edit_distance(m, mp) for m, mp in pairs_mp)
    share = sorted(word_edit_distance(m, mp) / max(len(m.split()), len(mp.split()), 1) for m, mp in pairs_mp)
    if not d:
        return {"n": 0}
    bins = Counter(next(lbl for hi, lbl in EDIT_BINS if r <= hi) for r in share)
    return {"n": len(d), "words_min": d[0], "words_median": d[len(d) // 2], "words_max": d[-1],
            "share_median": round(share[len(share) // 2], 3),
            "share_bins": {lbl: bins.get(lbl, 0) for _, lbl in EDIT_BINS}}


def quality_report(track: Any, personas: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """The transfer-track quality figures, computed from the stores (not from build bookkeeping).

    ``track``: a TransferBuild or a loaded Benchmark (anything with .pairs, .policies and
    .behaviours). ``personas`` (speaker id -> she_refs/he_refs/persona_conflicts) overrides the
    persona counts stored in the pairs' meta (for data written before v2).

    * target_required / unsupported_target_required: gold behaviours on M, and those whose turn
      reads no position with the attribute's signal and a cue of the behaviour's view;
    * pairs_differing_outside_group / pairs_d_not_evidence: T1 (equal outside I_a; D = evidence);
    * rule_violations: distinct M evidence sentences (D positions) that break a T3 rule;
    * m_prime_problems: M' sentences at D positions with a signal, residual-signal word or
      counter-evidence; m_prime_residual_anywhere: M' positions anywhere with a residual word;
    * background_conflicts: M positions outside D whose text matches CONFLICTS[attribute];
    * pregnancy_pairs_persona_misfit: pregnancy pairs whose speaker fails the persona rule;
    * distinct_evidence / max_reuse / max_reuse_within_pair: evidence sentence usage;
    * distinct_evidence_by_kind / evidence_without_source_kind: the source kind recorded in the
      pair meta for each D position (SOURCE_KINDS), and D positions with none;
    * m_prime_edit_distance: :func:`edit_distribution` of the distinct (M, M') evidence sentences."""
    pairs = list(track.pairs)
    policies = track.policies
    total = unsup = 0
    outside = not_ev = 0
    rule_bad: dict[tuple[str, str], list[str]] = {}
    mprime_bad: dict[tuple[str, str], list[str]] = {}
    residual_anywhere = conflicts = misfit = 0
    conflict_examples: list[str] = []
    used: dict[str, Counter] = {a: Counter() for a in ATTRIBUTES}
    kinds: dict[str, dict[str, str]] = {a: {} for a in ATTRIBUTES}
    edits: dict[str, dict[str, str]] = {a: {} for a in ATTRIBUTES}
    no_kind = 0
    within = 0
    for p in pairs:
        pol = policies[p.policy_id]
        t, b = supported(pol, p)
        total, unsup = total + t, unsup + b
        d = differing_positions(p.m, p.m_prime)
        group = pol.attribute(p.attribute).group
        outside += bool(d - group)
        not_ev += d != set(p.meta.get("evidence_positions", ()))
        texts = [p.m.contents[i] for i in sorted(d)]
        within = max(within, max(Counter(texts).values(), default=0))
        kind_at = {e.get("position"): e.get("source_kind", "") for e in p.meta.get("evidence", ())}
        for i in sorted(d):
            m_t, mp_t = p.m.contents[i], p.m_prime.contents[i]
            used[p.attribute][m_t] += 1
            edits[p.attribute][m_t] = mp_t
            if kind_at.get(i) in SOURCE_KINDS:
                kinds[p.attribute][m_t] = kind_at[i]
            else:
                no_kind += 1
            probs = evidence_problems(m_t, p.attribute)
            if probs:
                rule_bad[(p.attribute, m_t)] = probs
            probs = replacement_problems(m_t, mp_t, p.attribute)
            if probs:
                mprime_bad[(p.attribute, mp_t)] = probs
        for text in p.m_prime.contents.values():
            residual_anywhere += bool(re.search(RESIDUAL_SIGNAL[p.attribute], text, re.I))
        for i, text in p.m.contents.items():
            if i not in d and re.search(CONFLICTS[p.attribute], text, re.I):
                conflicts += 1
                if len(conflict_examples) < 5:
                    conflict_examples.append(f"{p.pair_id}@{i}: {text}")
        if p.attribute == "pregnancy":
            per = (personas or {}).get(p.meta.get("speaker", "")) or p.meta.get("persona") or {}
            if not pregnancy_persona_fits(per.get("she_refs", 0), per.get("he_refs", 0),
                                          per.get("persona_conflicts", 0)):
                misfit += 1
    return {
        "pairs": len(pairs),
        "pairs_per_attribute": dict(sorted(Counter(p.attribute for p in pairs).items())),
        "target_required": total,
        "unsupported_target_required": unsup,
        "pairs_differing_outside_group": outside,
        "pairs_d_not_evidence": not_ev,
        "evidence_sentences_checked": sum(len(c) for c in used.values()),
        "rule_violations": len(rule_bad),
        "rule_violation_examples": {f"{a}: {s}": v for (a, s), v in sorted(rule_bad.items())[:8]},
        "m_prime_problems": len(mprime_bad),
        "m_prime_problem_examples": {f"{a}: {s}": v for (a, s), v in sorted(mprime_bad.items())[:8]},
        "m_prime_residual_anywhere": residual_anywhere,
        "background_conflicts": conflicts,
        "background_conflict_examples": conflict_examples,
        "pregnancy_pairs_persona_misfit": misfit,
        "distinct_evidence": {a: len(c) for a, c in used.items()},
        "distinct_evidence_by_kind": {a: dict(sorted(Counter(k.values()).items())) for a, k in kinds.items()},
        "evidence_without_source_kind": no_kind,
        "max_reuse": {a: max(c.values(), default=0) for a, c in used.items()},
        "max_reuse_within_pair": within,
        "m_prime_edit_distance": {a: edit_distribution(sorted(e.items())) for a, e in edits.items()},
    }


def quality_table(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows (figure, measured, goal, met) for notebook 01: each quality figure of the track in
    ``report`` (:func:`quality_report`) against its goal."""
    rows = []

    def add(fig: str, measured: Any, goal: str, met: bool) -> None:
        rows.append({"figure": fig, "measured": measured, "goal": goal, "met": met})

    add("unsupported_target_required", f"{report['unsupported_target_required']} of {report['target_required']}",
        "0", report["unsupported_target_required"] == 0)
    add("pairs_differing_outside_group", report["pairs_differing_outside_group"], "0",
        report["pairs_differing_outside_group"] == 0 and report["pairs_d_not_evidence"] == 0)
    add("rule_violations", f"{report['rule_violations']} of {report['evidence_sentences_checked']}", "0",
        report["rule_violations"] == 0)
    add("m_prime_problems", report["m_prime_problems"], "0", report["m_prime_problems"] == 0)
    add("background_conflicts", report["background_conflicts"], "0", report["background_conflicts"] == 0)
    add("pregnancy_pairs_persona_misfit", report["pregnancy_pairs_persona_misfit"], "0",
        report["pregnancy_pairs_persona_misfit"] == 0)
    add("distinct_evidence", ", ".join(f"{a} {n}" for a, n in report["distinct_evidence"].items()),
        f">= {MIN_DISTINCT_EVIDENCE} per attribute", min(report["distinct_evidence"].values()) >= MIN_DISTINCT_EVIDENCE)
    add("max_reuse", ", ".join(f"{a} {n}" for a, n in report["max_reuse"].items()),
        f"<= {MAX_EVIDENCE_REUSE} slots per sentence, balanced; 1 within a pair",
        max(report["max_reuse"].values()) <= MAX_EVIDENCE_REUSE and report["max_reuse_within_pair"] == 1)
    add("distinct_evidence_by_kind", "; ".join(f"{a}: " + ", ".join(f"{k} {n}" for k, n in c.items())
                                              for a, c in report["distinct_evidence_by_kind"].items()),
        "a source kind for every evidence sentence; real text preferred", report["evidence_without_source_kind"] == 0)
    ed = report["m_prime_edit_distance"]
    add("m_prime_edit_distance", "median words (share): " + ", ".join(
        f"{a} {v.get('words_median')} ({v.get('share_median')})" for a, v in ed.items()),
        "minimal: median share of changed words <= 0.5",
        all(v.get("share_median", 1) <= 0.5 for v in ed.values() if v.get("n")))
    return rows
