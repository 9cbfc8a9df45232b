"""Benchmark-quality audit of a PairedMem build (paper C.2, Tables 4 and 6).

Every figure is computed from the pairs themselves (committed data or a fresh build), never typed
in. The functions take a sequence of :class:`~dpmv_lib.bench.benchmark.Pair` and a ``policy_of`` callable
(``Benchmark.policy`` or ``lambda p: build.policies[p.policy_id]``).

* :func:`charge_structure` - goal 1: per pair, the reconstructed DP bound of the target attribute at
  horizon T under NoCap (C5 violated, Table 4) and IncompleteCharge (C2 violated), the ledger's own
  value, and the preallocated C_a (:func:`~dpmv_lib.core.ledger.planned_charges`); same-domain neutral
  turns that read I_a.
* :func:`split_leakage` - goal 2: evidence cores / background cores of the test (and validation)
  split that also occur in train. A *core* is a sentence modulo its opening frame and pronouns
  (:func:`sentence_core`).
* :func:`templating` - goal 3: distinct query strings and their maximum use, distinct evidence
  cores per attribute, the most frequent word 5-gram and its share of memory sentences.
* :func:`artefacts` - goal 4: length-only classifier AUC per attribute, counter-evidence in M'
  (:data:`COUNTER_EVIDENCE`), deterministic number transforms between sides, position-label
  mismatches (:data:`POSITION_TOPICS`), and gold entries removed by the co-present rule.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

from ..checks.accounting import reconstructed_bound, reported_ledger
from .benchmark import Pair
from ..core.ledger import OnlineBudget, planned_charges
from .phrasebank import view_links
from ..core.policy import Policy

PolicyOf = Callable[[Pair], Policy]

# ---------------------------------------------------------------------------------------------
# sentence cores (goal 2 / 3)
# ---------------------------------------------------------------------------------------------
# Opening frames of the memory sentences: the v1 realiser's and the v2 realiser's (phrases.FRAMES).
_FRAME_PREFIXES: tuple[str, ...] = (
    "note to self", "worth remembering", "just so you know", "for context", "fyi",
    "something to keep in mind", "user says", "the user mentioned that", "memory note",
    "from an earlier chat", "noted", "user shared that", "they told me", "saved from a past conversation",
    "note", "reminder", "context", "update", "btw", "heads-up", "memory", "saved", "from chat",
    "user note", "earlier", "recalled",
)
_BARE_FRAMES: tuple[str, ...] = ("user says", "the user mentioned that", "user shared that", "they told me")
_FRAME_RE = re.compile(r"^(?:(?:" + "|".join(re.escape(f) for f in sorted(_FRAME_PREFIXES, key=len, reverse=True))
                       + r")\s*[:,]\s*|(?:" + "|".join(re.escape(f) for f in _BARE_FRAMES) + r")\s+)", re.IGNORECASE)
# pronoun normalisation: third person (they) -> first person (I)
_PRONOUNS: tuple[tuple[str, str], ...] = (
    (r"\bthey're\b", "i'm"), (r"\bthey've\b", "i've"), (r"\bthey'd\b", "i'd"), (r"\bthey'll\b", "i'll"),
    (r"\bthey are\b", "i am"), (r"\bthey were\b", "i was"), (r"\bthey\b", "i"), (r"\btheir\b", "my"),
    (r"\btheirs\b", "mine"), (r"\bthemselves\b", "myself"), (r"\bthem\b", "me"),
    (r"\bwe're\b", "i'm"), (r"\bwe've\b", "i've"), (r"\bwe\b", "i"), (r"\bour\b", "my"), (r"\bus\b", "me"),
)
_PRONOUN_RE = [(re.compile(p), r) for p, r in _PRONOUNS]
_WORD = re.compile(r"[a-z0-9$][a-z0-9$,.'-]*[a-z0-9]|[a-z0-9$]")


def sentence_core(sentence: str) -> str:
    """A memory sentence modulo its opening frame and pronouns: frame stripped (repeatedly),
    lower-cased, they/their/we/our -> I/my, punctuation dropped, whitespace collapsed."""
    s = sentence.strip()
    while True:
        t = _FRAME_RE.sub("", s, count=1)
        if t == s:
            break
        s = t
    s = s.lower().rstrip(".!")
    for pat, rep in _PRONOUN_RE:
        s = pat.sub(rep, s)
    return " ".join(words(s))


def words(text: str) -> list[str]:
    """Lower-case word tokens (numbers with , and . kept whole; final punctuation dropped)."""
    return [w.rstrip(".,") for w in _WORD.findall(text.lower())]


def ngrams(tokens: Sequence[str], n: int = 5) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def _evidence_positions(p: Pair) -> list[int]:
    return [int(i) for i in p.meta.get("evidence_positions", [])]


def _background_positions(p: Pair) -> list[int]:
    ev = set(_evidence_positions(p)) | {int(k) for k in p.meta.get("nontarget_positions", {})}
    return [i for i in p.m.contents if i not in ev]


# ---------------------------------------------------------------------------------------------
# goal 1: charge structure
# ---------------------------------------------------------------------------------------------
def _run_variant(cls_name: str, policy: Policy, p: Pair, horizon: int, K: int) -> tuple[Fraction | float, Fraction]:
    from ..checks.variants import IncompleteCharge, NoCap
    from ..core.releases import Release
    cls = {"NoCap": NoCap, "IncompleteCharge": IncompleteCharge}[cls_name]
    kwargs: dict[str, Any] = {}
    if cls is IncompleteCharge:      # as in interfaces.MemViewInterface: keep any attribute but the target
        kwargs["keep"] = tuple(a for a in policy.attribute_names if a != p.attribute)
    mv = cls(policy, p.m, budget=OnlineBudget(K), exact=False, seed=0, **kwargs)
    history: list[Release] = []
    for t in p.turns[:horizon]:
        history.append(mv.release(t.query, tuple(history)))
    return reconstructed_bound(history, p.attribute), reported_ledger(history, p.attribute)


def charge_structure(pairs: Sequence[Pair], policy_of: PolicyOf, horizon: int = 16, K: int = 3,
                     variants: Sequence[str] = ("NoCap", "IncompleteCharge")) -> list[dict[str, Any]]:
    """Goal 1, per pair: reconstructed target bound and ledger at ``horizon`` for each RQ2 variant
    (run with the real variant classes, online budget eps = B_a / K, as in RQ2), the preallocated
    C_a over the first ``horizon`` queries, and how many neutral / distractor turns of those
    queries read a position of I_a (0 by construction in v2)."""
    rows = []
    for p in pairs:
        pol = policy_of(p)
        group = pol.attribute(p.attribute).group
        turns = p.turns[:horizon]
        reads = {t.index: set(pol.read(t.query, t.slot)) & group for t in turns}
        row: dict[str, Any] = {
            "pair_id": p.pair_id, "attribute": p.attribute, "template": p.template,
            "C_a": planned_charges(pol, [t.query for t in turns])[p.attribute],
            "target_turns": sum(1 for t in turns if t.query.qtype == "target"),
            "neutral_reading_I_a": sum(1 for t in turns if t.query.qtype == "neutral" and reads[t.index]),
            "distractor_reading_I_a": sum(1 for t in turns if t.query.qtype == "distractor" and reads[t.index]),
        }
        for v in variants:
            bound, ledger = _run_variant(v, pol, p, horizon, K)
            row[f"{v}_bound"] = bound
            row[f"{v}_ledger"] = ledger
        rows.append(row)
    return rows


def charge_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """max / min / mean of the per-pair figures of :func:`charge_structure` (bounds as floats)."""
    out: dict[str, Any] = {"pairs": len(rows)}
    for k in rows[0] if rows else ():
        if k in ("pair_id", "attribute", "template"):
            continue
        vals = [float(r[k]) for r in rows]
        out[k] = {"min": min(vals), "max": max(vals), "mean": round(sum(vals) / len(vals), 4)}
    return out


# ---------------------------------------------------------------------------------------------
# goal 2: split leakage
# ---------------------------------------------------------------------------------------------
def split_leakage(pairs: Sequence[Pair]) -> dict[str, Any]:
    """Goal 2: distinct evidence cores (M at the evidence positions) and background cores (positions
    outside I_a and outside co-present evidence) per split, and how many of the validation / test
    ones also occur among the train cores (evidence vs all train memory cores)."""
    ev: dict[str, set[str]] = defaultdict(set)
    bg: dict[str, set[str]] = defaultdict(set)
    allc: dict[str, set[str]] = defaultdict(set)
    occ: dict[str, list[str]] = defaultdict(list)
    for p in pairs:
        for i in _evidence_positions(p):
            c = sentence_core(p.m.contents[i])
            ev[p.split].add(c)
            occ[p.split].append(c)
        for i in _background_positions(p):
            bg[p.split].add(sentence_core(p.m.contents[i]))
        for st in (p.m, p.m_prime):
            allc[p.split].update(sentence_core(s) for s in st.contents.values())
    out: dict[str, Any] = {}
    for s in ("validation", "test"):
        shared = ev[s] & allc["train"]
        out[s] = {
            "evidence_cores": len(ev[s]),
            "evidence_cores_in_train": len(shared),
            "evidence_core_share_in_train": round(len(shared) / max(1, len(ev[s])), 4),
            "evidence_occurrences_in_train": round(sum(1 for c in occ[s] if c in allc["train"])
                                                   / max(1, len(occ[s])), 4),
            "background_cores": len(bg[s]),
            "background_cores_in_train": len(bg[s] & allc["train"]),
        }
    out["validation_test_evidence_shared"] = len(ev["validation"] & allc["test"]) + len(ev["test"] & allc["validation"])
    return out


# ---------------------------------------------------------------------------------------------
# goal 3: templating volume
# ---------------------------------------------------------------------------------------------
def _gram_counts(pairs: Sequence[Pair], n: int) -> tuple[Counter, int]:
    """Word ``n``-gram counts over every memory sentence of M and M' (each sentence counts an
    n-gram once), and the number of sentences."""
    grams: Counter = Counter()
    n_sent = 0
    for p in pairs:
        for st in (p.m, p.m_prime):
            for s in st.contents.values():
                n_sent += 1
                grams.update(ngrams(words(s), n))
    return grams, n_sent


def templating(pairs: Sequence[Pair], n: int = 5) -> dict[str, Any]:
    """Goal 3: query strings (distinct, min/max use), distinct evidence cores per attribute, and
    the most frequent word ``n``-gram over all memory-sentence occurrences of M and M' (share of
    sentences containing it; each sentence counts a given n-gram once)."""
    qs = Counter(t.query.text for p in pairs for t in p.turns)
    cores: dict[str, set[str]] = defaultdict(set)
    for p in pairs:
        for i in _evidence_positions(p):
            cores[p.attribute].add(sentence_core(p.m.contents[i]))
    grams, n_sent = _gram_counts(pairs, n)
    top, top_n = grams.most_common(1)[0] if grams else ((), 0)
    return {
        "query_turns": sum(qs.values()),
        "distinct_query_strings": len(qs),
        "query_max_use": max(qs.values()) if qs else 0,
        "query_min_use": min(qs.values()) if qs else 0,
        "evidence_cores_per_attribute": {a: len(c) for a, c in sorted(cores.items())},
        "memory_sentences": n_sent,
        "distinct_memory_cores": len({sentence_core(s) for p in pairs for st in (p.m, p.m_prime)
                                      for s in st.contents.values()}),
        "top_5gram": " ".join(top),
        "top_5gram_share": round(top_n / max(1, n_sent), 4),
    }


def ngram_shares(pairs: Sequence[Pair], n: int = 5, k: int = 10) -> list[tuple[str, float]]:
    """The ``k`` most frequent word n-grams and their share of memory-sentence occurrences."""
    grams, n_sent = _gram_counts(pairs, n)
    return [(" ".join(g), round(c / max(1, n_sent), 4)) for g, c in grams.most_common(k)]


# ---------------------------------------------------------------------------------------------
# goal 4: artefacts
# ---------------------------------------------------------------------------------------------
def auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    """Mann-Whitney AUC: P(score of a positive > score of a negative) + 1/2 P(tie)."""
    if not pos or not neg:
        return float("nan")
    wins = 0.0
    neg_sorted = sorted(neg)
    for x in pos:
        lo = bisect.bisect_left(neg_sorted, x)
        hi = bisect.bisect_right(neg_sorted, x)
        wins += lo + 0.5 * (hi - lo)
    return wins / (len(pos) * len(neg))


def length_auc(pairs: Sequence[Pair]) -> dict[str, dict[str, float]]:
    """Length-only classifier per attribute: AUC of "the store with more characters is M" with the
    total store length as the score (M stores positive, M' negative), and the paired rate at
    which M is the longer store of its pair (ties count 1/2)."""
    by: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by[p.attribute].append(p)
    out = {}
    for a, ps in sorted(by.items()):
        lm = [sum(len(s) for s in p.m.contents.values()) for p in ps]
        lmp = [sum(len(s) for s in p.m_prime.contents.values()) for p in ps]
        paired = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(lm, lmp)) / len(ps)
        out[a] = {"auc": round(auc(lm, lmp), 4), "m_longer_rate": round(paired, 4),
                  "mean_char_diff": round(sum(x - y for x, y in zip(lm, lmp)) / len(ps), 2)}
    return out


# Counter-evidence: statements that assert the attribute's absence or its opposite (goal 4).
COUNTER_EVIDENCE: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"(?:normal|healthy|fine|good) (?:blood sugar|glucose|a1c|sugar levels?)",
                 r"(?:blood sugar|glucose|a1c|sugar levels?) (?:is|are|came back|came out) (?:normal|fine|healthy)",
                 r"no (?:sign of )?diabet\w*", r"not diabetic", r"non-diabetic", r"cholesterol .{0,20}normal",
                 r"in the normal range"),
    "pregnancy": (r"not pregnant", r"negative (?:pregnancy )?test", r"(?:my|their) period", r"on the pill",
                  r"no (?:kids|children|baby)", r"childfree", r"child-free"),
    "debt": (r"paid off", r"debt[- ]free", r"no (?:debts?|loans?|balances?|credit card debt)",
             r"(?:good|excellent|great) credit", r"pay (?:it|them|the balance) in full", r"owe nothing",
             r"savings (?:are|keep) (?:growing|healthy)", r"automatic payments", r"never (?:borrow|owe)\w*"),
    "job_loss": (r"(?:my|their) current (?:employer|job|role|company|manager)", r"(?:still|currently|fully) employed",
                 r"got (?:a )?promot\w*", r"pay rise", r"got a raise", r"small raise", r"started a new job",
                 r"new job", r"full[- ]time job", r"job is (?:secure|safe|stable)", r"my manager",
                 r"their manager", r"at work today", r"my colleagues?", r"their colleagues?",
                 r"promotion", r"team lead role", r"annual leave"),
}
_COUNTER_RE = {a: re.compile(r"(?<![\w-])(?:" + "|".join(ps) + r")(?![\w])", re.IGNORECASE)
               for a, ps in COUNTER_EVIDENCE.items()}


def counter_evidence_hits(text: str, attribute: str) -> list[str]:
    """Phrases of ``text`` that assert or negate ``attribute`` (:data:`COUNTER_EVIDENCE`)."""
    return [m.group(0) for m in _COUNTER_RE[attribute].finditer(text)]


def counter_evidence(pairs: Sequence[Pair]) -> dict[str, Any]:
    """M' sentences (anywhere in the store) that assert or negate the target attribute, and the
    share of the M' sentences at the evidence positions that do (the audit's figure)."""
    total = 0
    at_ev: Counter[str] = Counter()
    n_ev: Counter[str] = Counter()
    examples: list[str] = []
    for p in pairs:
        evs = set(_evidence_positions(p))
        for i, s in p.m_prime.contents.items():
            hits = counter_evidence_hits(s, p.attribute)
            if i in evs:
                n_ev[p.attribute] += 1
            if hits:
                total += 1
                if i in evs:
                    at_ev[p.attribute] += 1
                if len(examples) < 5:
                    examples.append(f"{p.pair_id}@{i}: {s}")
    return {"mprime_sentences_with_counter_evidence": total,
            "evidence_position_share": {a: round(at_ev[a] / max(1, n_ev[a]), 4) for a in sorted(n_ev)},
            "examples": examples}


_NUM = re.compile(r"\$?\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> list[float]:
    out = []
    for m in _NUM.findall(text):
        try:
            out.append(float(m.replace("$", "").replace(",", "")))
        except ValueError:
            pass
    return [x for x in out if x > 0]


def number_transforms(pairs: Sequence[Pair]) -> dict[str, Any]:
    """Deterministic number transforms between the sides (goal 4): over differing positions where
    both M and M' carry numbers, how many have every M' number equal to an M number times a power
    of ten (10^-3..10^3, equality excluded), and the number of attributes where that holds at
    every such position (a deterministic transform)."""
    n_both: Counter[str] = Counter()
    n_scaled: Counter[str] = Counter()
    for p in pairs:
        for i in _evidence_positions(p):
            a, b = _numbers(p.m.contents[i]), _numbers(p.m_prime.contents[i])
            if not a or not b:
                continue
            n_both[p.attribute] += 1
            if all(any(y != x and any(abs(y - x * 10.0 ** k) < 1e-9 for k in range(-3, 4)) for x in a) for y in b):
                n_scaled[p.attribute] += 1
    return {"positions_with_numbers": dict(sorted(n_both.items())),
            "scaled_positions": dict(sorted(n_scaled.items())),
            "scaled_positions_total": sum(n_scaled.values()),
            "deterministic_attributes": sorted(a for a in n_both if n_both[a] >= 5 and n_scaled[a] == n_both[a])}


# Position label -> topic words a sentence under that label must contain (slot -> topic map).
POSITION_TOPICS: Mapping[str, tuple[str, ...]] = {
    "medical history": ("medical", "history", "records", "record", "diagnosed", "diagnosis", "as a child",
                        "as a teenager", "years ago", "vaccination", "childhood"),
    "recent appointment": ("appointment", "check-up", "checkup", "doctor", "clinic", "visit", "gp", "nurse",
                           "midwife", "scan", "ultrasound", "endocrinologist", "ob-gyn", "obstetrician", "physio",
                           "dentist", "optician"),
    "medication and supplements": ("medication", "medicine", "medicines", "pills", "tablets", "vitamin", "vitamins",
                                   "supplement", "supplements", "prescription", "prescriptions", "metformin",
                                   "insulin", "folic acid", "inhaler", "drops"),
    "symptoms and energy": ("energy", "tired", "tiredness", "symptom", "symptoms", "sleep", "exhausted",
                            "headache", "headaches", "nausea", "sickness", "fatigue", "afternoon slump", "dizzy"),
    "health goals": ("goal", "goals", "target", "aim", "healthier", "health plan", "wellbeing", "habit", "habits"),
    "eating pattern": ("meal", "meals", "eat", "eating", "breakfast", "lunch", "mealtimes", "portions"),
    "dinner routine": ("dinner", "dinners", "evening meal", "cook", "cooking", "supper"),
    "grocery habits": ("grocery", "groceries", "shop", "shopping", "supermarket", "market", "store"),
    "food preferences": ("prefer", "preference", "preferences", "favourite", "like", "love", "taste", "tastes",
                         "cravings", "craving", "dishes", "food"),
    "snacks and drinks": ("snack", "snacks", "drink", "drinks", "coffee", "tea", "juice", "water", "fizzy"),
    "exercise routine": ("exercise", "workout", "workouts", "routine", "walk", "walks", "gym", "training", "run",
                         "runs"),
    "activity limits": ("limit", "limits", "avoid", "careful", "cleared", "injury", "impact", "restrictions",
                        "take it easy", "easier", "gentle"),
    "fitness goals": ("goal", "goals", "target", "aim", "personal best", "fitter", "fitness", "race"),
    "sports and hobbies": ("sport", "sports", "hobby", "hobbies", "club", "team", "yoga", "swim", "swimming",
                           "cycling", "tennis", "football", "climbing", "dance"),
    "income and pay": ("income", "pay", "paid", "payday", "wages", "salary", "earnings", "payslip", "benefits",
                       "severance", "money coming in"),
    "credit and loans": ("credit", "loan", "loans", "card", "cards", "borrow", "borrowing", "overdraft",
                         "repayment", "repayments", "owe", "lender"),
    "monthly budget": ("budget", "budgeting", "spending", "bills", "expenses", "costs", "month", "monthly"),
    "savings": ("savings", "save", "saving", "emergency fund", "nest egg", "rainy-day", "savings pot"),
    "big expenses": ("expense", "expenses", "cost", "costs", "purchase", "buy", "bill", "bills", "price",
                     "expensive", "spend", "spending"),
    "job and role": ("job", "role", "work", "career", "profession", "trade", "field", "background", "position"),
    "employment status": ("employment", "employed", "job", "work", "laid off", "unemploy", "out of work",
                          "between jobs", "contract", "hours", "let go", "severance", "fired", "status"),
    "workplace": ("workplace", "office", "desk", "site", "shop floor", "warehouse", "team", "company", "colleagues",
                  "coworking", "workspace"),
    "career plans": ("career", "plans", "plan", "future", "course", "qualification", "skills", "next step",
                     "training", "certificate"),
    "work hours": ("hours", "shift", "shifts", "schedule", "week", "days", "part-time", "full-time", "overtime",
                   "mornings", "evenings"),
    "weekday routine": ("weekday", "weekdays", "routine", "morning", "mornings", "evening", "evenings", "daily",
                        "every day", "day"),
    "weekend plans": ("weekend", "weekends", "saturday", "saturdays", "sunday", "sundays"),
    "appointments": ("appointment", "appointments", "booked", "check-up", "visit", "session", "calendar"),
    "upcoming events": ("upcoming", "event", "events", "wedding", "party", "trip", "concert", "next month",
                        "coming up", "visit", "festival", "reunion"),
}
_TOPIC_RE = {lab: re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in ws) + r")", re.IGNORECASE)
             for lab, ws in POSITION_TOPICS.items()}


def label_fits(text: str, label: str) -> bool:
    """Does the sentence mention its position label's topic (:data:`POSITION_TOPICS`)?"""
    return bool(_TOPIC_RE[label].search(text))


def label_mismatches(pairs: Sequence[Pair], policy_of: PolicyOf) -> dict[str, Any]:
    """Sentences whose content does not fit their position label: at the evidence positions (M and
    M') and at all other positions (background and co-present evidence)."""
    ev_bad, other_bad, ev_n, other_n = 0, 0, 0, 0
    examples: list[str] = []
    for p in pairs:
        labels = {pos.id: pos.label for pos in policy_of(p).positions}
        evs = set(_evidence_positions(p))
        for side in (p.m, p.m_prime):
            for i, s in side.contents.items():
                ok = label_fits(s, labels[i])
                if i in evs:
                    ev_n += 1
                    ev_bad += not ok
                    if not ok and len(examples) < 5:
                        examples.append(f"{p.pair_id}@{i} [{labels[i]}]: {s}")
                else:
                    other_n += 1
                    other_bad += not ok
    return {"evidence_sentences": ev_n, "evidence_label_mismatches": ev_bad,
            "other_sentences": other_n, "other_label_mismatches": other_bad, "examples": examples}


def gold_removals(pairs: Sequence[Pair], policy_of: PolicyOf) -> dict[str, Any]:
    """Gold audit (goal 4): on target turns, the target-required entries without an unsupported
    counterpart on M' (removed because a co-present attribute links to the same view), and how
    many of those have no evidence of that co-present attribute where the turn reads (wrong
    removals under the explicit rule of data/README.md)."""
    links = view_links()
    removed, wrong, pairs_hit = 0, 0, set()
    for p in pairs:
        pol = policy_of(p)
        nt = {int(k): v for k, v in p.meta.get("nontarget_positions", {}).items()}
        for t in p.turns:
            unsup = {u.split(":", 2)[2] for u in t.gold.unsupported}
            for r in t.gold.target_required:
                view = r.split(":", 2)[2]
                if view in unsup:
                    continue
                removed += 1
                pairs_hit.add(p.pair_id)
                read = set(pol.read(t.query, t.slot))
                if not any(nt.get(i) in links.get(view, ()) for i in read if i in nt):
                    wrong += 1
    return {"removed_entries": removed, "pairs": len(pairs_hit), "removed_without_evidence_in_read": wrong}


def audit(pairs: Sequence[Pair], policy_of: PolicyOf, horizon: int = 16, with_charges: bool = True) -> dict[str, Any]:
    """All four goals' figures in one dict (the data card and notebook 01 show them)."""
    out: dict[str, Any] = {
        "split_leakage": split_leakage(pairs),
        "templating": templating(pairs),
        "length": length_auc(pairs),
        "counter_evidence": counter_evidence(pairs),
        "numbers": number_transforms(pairs),
        "labels": label_mismatches(pairs, policy_of),
        "gold": gold_removals(pairs, policy_of),
    }
    if with_charges:
        out["charges"] = charge_summary(charge_structure(pairs, policy_of, horizon))
    return out
