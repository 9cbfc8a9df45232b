"""Transfer track T2/T3 sentence rules (paper C.3): first-person, current, unhedged target
evidence (:func:`evidence_problems`), M' replacement checks, the reviewed allow-list
(``transfer_review.json``), evidence selection and the speaker's background sentences. A
candidate is also rejected when its source record says the attribute has ended
(:func:`ended_in_record`).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from . import lexicon
from ..core.errors import CorpusError
from ..core.scorer import cue_hits
from .transfer_corpora import ATTRIBUTES, KIND_OF_SOURCE, SourceText, Speaker


_SENT = re.compile(r"(?<=[.!?])\s+")
_GREETING = re.compile(r"^(?:(?:hi|hello|hey|dear)\s+)?(?:doctor|doc|sir)\s*[,.!:]\s*"
                       r"|^(?:hi|hello|hey)\s*[,.!]\s*", re.I)

# ---- T3 evidence rules (paper: first person, the speaker's current state; no resolved past states,
# hypotheticals, metaphors or other people). Every rule is a named regex family; a sentence (or the
# clause holding the target mention) is used only if no rule fires AND it is on the reviewed
# allow-list (REVIEW_FILE). quality_report() re-applies the same rules to the built pairs.
TARGET_PATTERNS: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"\bdiabet(?:es|ic)\b", r"\btype (?:2|ii|two) diabetes\b", r"\bmetformin\b", r"\binsulin\b",
                 r"\ba1c\b", r"\bblood sugar(?: levels?)? (?:is|are) (?:\w+ )?high\b"),
    "pregnancy": (r"\bpregnant\b", r"\bpregnancy\b", r"\bweeks pregnant\b", r"\btrimester\b",
                  r"\bexpecting (?:a baby|my first (?:baby|child)|our first (?:baby|child)"
                  r"|a (?:baby )?(?:boy|girl)|twins)\b",
                  r"\bmaternity leave\b"),
    "debt": (r"\bdebts?\b", r"\bbehind on (?:my )?(?:bills|payments|mortgage|rent)\b", r"\bbills that are overdue\b",
             r"\boverdue bills\b", r"\bmaxed out\b", r"\bowe\b.{0,40}\b(?:cards?|bank|loans?|irs|taxes|hospital)\b",
             r"\bpayday loans?\b", r"\bbankrupt\w*\b"),
    # job loss: the speaker must be the one who lost the job (first-person subject)
    "job_loss": (r"\bI(?:'ve| have| had)? (?:just |recently )?(?:been )?laid off\b",
                 r"\bI(?:'ve| have| had)? (?:just |recently )?(?:got|was|been|had been|get) "
                 r"(?:just )?(?:laid off|fired|let go)\b",
                 r"\b(?:I|I've|I have|I just|I recently)\s+(?:just |recently )?lost my job\b", r"\bfired me\b",
                 r"\bI(?:'m| am) (?:still |now |currently )?(?:unemployed|out of work|jobless)\b",
                 r"\bI(?:'ve| have)? (?:only |now )?been (?:unemployed|out of work|jobless)\b",
                 r"\bafter getting (?:fired|laid off)\b",
                 r"\b(?:was|got|been) let go from my job\b"),
}
# a negation shortly before the target word (format with the word's regex)
NEGATED = r"(?:\b(?:not|no|never|nor|without)\b|n't)(?:\W+\w+){{0,4}}?\W+{}"
# the mention is not the target attribute (diabetes: type-2 or compatible only, so no type-1,
# gestational, juvenile, insulin-dependent or DKA cues; tests, wishes, resolved debt...)
NOT_TARGET: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"insipidus", r"gestational", r"type[- ]?(?:1|i|one)\b", r"\bt1d\b", r"juvenile", r"in children",
                 r"pre-?diabet", r"newborn", r"(?:do not|don't) have", r"insulin[- ]dependent", r"ketoacidosis",
                 r"\bdka\b", r"overdos\w*", r"too much insulin", r"\bpumps?\b", r"insulin resistan\w*",
                 r"pre-?eclamp\w*", r"\bpco[ds]\b|polycystic", r"hormon\w*", r"ovulat\w*", r"gyn(?:a)?ecolog\w*",
                 NEGATED.format(r"(?:diabet\w*|metformin|insulin)")),
    "pregnancy": (r"pregnancy test", r"get(?:ting)? pregnant", r"trying to (?:conceive|get pregnant)",
                  r"(?:not|wasn't|isn't) pregnant", r"without being pregnant", r"in vitro", r"ectopic",
                  r"pregnant pause", r"teen pregnancy", r"terminated", r"abort\w*", r"miscarr\w*", r"negative",
                  r"pregnancy (?:strips?|kits?|symptoms?)",
                  r"(?:check\w*|test\w*|confirm\w*) (?:for |the |my )?pregnancy",
                  r"planning (?:for )?(?:a )?pregnancy", r"next pregnancy", r"not sure (?:whether|if)",
                  r"decide to (?:get )?pregnant", r"pregnant (?:\w+ )?(?:times|twice)", r"successful pregnancy",
                  NEGATED.format(r"pregnan\w*")),
    "debt": (r"paid off", r"able to pay off", r"debt[- ]free", r"out of debt", r"no debt", r"debt nonexistent",
             r"debt is paid",
             NEGATED.format(r"(?:in|into) debt"),
             r"(?:doesn't|don't) have (?:any |the )?debt", r"cleared", r"completed all debt", r"garbage collector",
             r"long overdue"),
    "job_loss": (r"new job", r"found a (?:\w+ )?job", r"got a (?:\w+ )?job", r"another job", r"hired", r"fired up",
                 r"let go of", r"got out of work"),
}
FIRST_PERSON = r"\b(?:I|I'm|I've|I'd|me|my)\b"
# statements about other people (the attribute might be theirs)
THIRD_PARTY = (r"\bmy (?:wife|husband|partner|girlfriend|boyfriend|son|daughter|mom|mother|dad|father|sisters?|"
               r"brothers?|friends?|cousin|aunt|uncle|grandma|grandmother|grandpa|grandfather|boss|co-?worker|"
               r"neighbou?r|kids?|child|children|dog|cat|cows?|niece|nephew|roommate|fiance\w*|in-?laws?|relative|"
               r"colleague|team|parents?|step-?(?:dad|mom|mum|father|mother)|grand-?parents)\b|"
               r"\b(?:he|she|his|her|him|hers|they|their|someone|somebody|co-?worker|your|family|families|parents|"
               r"relatives|fetus|hereditary|"
               r"uncle|relative|patient|supervisor|manager|management|employees?|guys|anyone|husband|wife|"
               r"boyfriend|girlfriend|person who|people|the dog|the cat)\b")
QUESTION = r"\?|^(?:what|how|why|when|where|which|who|is|are|can|could|should|do|does|did|will)\b"
HYPOTHETICAL = (r"\b(?:if|would|might|may|could|maybe|perhaps|suspect\w*|worr(?:ied|y)|afraid|frightened|scared|"
                r"in case|think|thought|wonder\w*|possib\w*|chance|risk|hope|hoping|hopefully|going to|gonna|will|"
                r"expecting to|want to|wish|plan(?:ning)? to|soon|someday|what if|'ll|appears?|seems?|doubt)\b")
RESOLVED = (r"\b(?:used to|years? ago|when I was|back in|last year|once|finally|no longer|recovered|cured|was born|"
            r"gave birth|miscarr\w*|lost the baby|in the past|ended up|ran out|after being|after a long period|"
            r"several years|for years|born|previous|in the end|both times|each subsequent|history of|"
            r"last (?:\w+ )?season|(?:19|20)\d\d|the day I|remember\w*|when I got|last time)\b")
# attribute-specific resolved states (after the birth; re-employed; debt cleared; remission)
RESOLVED_BY_ATTRIBUTE: Mapping[str, str] = {
    "diabetes": r"\b(?:in remission|reversed|went away|years back|was taking|was into|I had diabetes)\b",
    "pregnancy": (r"\b(?:delivered|delivery|deliver|postpartum|post-partum|after (?:the |my )?(?:birth|pregnancy)|"
                  r"c-section|ca?esarean|breast-?feed\w*|nursing|newborn|had (?:my|a|the|our) baby|"
                  r"since (?:the )?birth|during (?:my|the) pregnancy|my pregnancy was|last pregnancy|"
                  r"induced|labou?r|recent pregnancy|had a pregnancy|was pregnant|was expecting|first pregnancy|"
                  r"maternity leave)\b"),
    "job_loss": r"\b(?:back to work|rehired|started working|employed again|full[- ]time job|new position)\b",
    "debt": r"\b(?:paid (?:it |them )?(?:all )?off|settled)\b",
}
METAPHOR = r"\b(?:pregnant pause|fired up|on fire|killing me|dying to)\b"
# ---- the source record says the attribute has ended (re-employed, gave birth, debt paid off,
# diabetes in remission): the candidate is not the speaker's current state even if the sentence
# alone reads as current. Read in every sentence of the record that is not a question; a match is
# skipped when the words before it negate, hedge or wish (ENDED_GUARD) or name someone else
# (THIRD_PARTY), e.g. "I need to find a job", "my husband got a new job".
ENDED_IN_RECORD: Mapping[str, str] = {
    "diabetes": (r"\b(?:in remission|reversed (?:my )?(?:type 2 )?diabetes|(?:diabetes|it) (?:is|was|has been) "
                 r"(?:cured|reversed|gone)|cured (?:my |of )?diabetes|no longer (?:diabetic|have diabetes|"
                 r"need (?:insulin|metformin))|(?:don't|do not) have diabetes (?:any ?more|now))\b"),
    "pregnancy": (r"\b(?:gave birth|given birth|had (?:my|the|our) (?:baby|son|daughter)|(?:baby|son|daughter) "
                  r"was born|delivered (?:my|the|a|our) (?:baby|son|daughter)|postpartum|post-partum|"
                  r"(?:after|since) (?:my|the) delivery|miscarried|had a miscarriage|lost the baby)\b"),
    "debt": (r"\b(?:paid off (?:all |the )?(?:of )?(?:my |the )?(?:debts?|loans?|(?:credit )?cards?|balance)|"
             r"paid (?:it|them|everything) (?:all )?(?:off|back)|debt[- ]free|out of debt|"
             r"cleared (?:all )?(?:of )?my debts?|debts? (?:is|are|was|were) (?:now )?(?:paid|gone|cleared))\b"),
    "job_loss": (r"\b(?:(?:got|found|landed|accepted|started|start|starting|began|begin|getting)\s+"
                 r"(?:a |my |the |this |that )?(?:new |full[- ]time |part[- ]time |better |another )?(?:job|position)|"
                 r"(?:got|was|been|get|getting|I'm|am) (?:re)?hired|rehired|(?:back|returned|returning|return) to work|"
                 r"back at work|employed again)\b"),
}
ENDED_GUARD = (r"\b(?:not|no|never|can|cant|cannot|unable|wont|dont|if|hope|hoping|wish|want|wanted|trying|try|"
               r"tried|need|needs|looking|look|apply|applying|applied|search\w*|hard|harder|trouble|struggl\w*|until|"
               r"unless|whether|before|chance|help|would|could|should|might|may|you|your)\b|n't\b")
_QUESTION_START = r"^(?:what|how|why|when|where|which|who|is|are|can|could|should|do|does|did|will|have|has)\b"
# sentence-level failures that a clause holding the target mention may still pass
FALLBACK_TO_CLAUSE = ("question", "hypothetical", "not_current", "length", "other_attribute", "not_first_person")
_CLAUSE = re.compile(r"\s*(?:,|;|\s-\s|\s+(?:and|but|so|because|since|although|though)\s+)\s*")
RULE_NAMES: tuple[str, ...] = ("no_target_pattern", "not_the_attribute", "question", "not_first_person",
                               "about_someone_else", "hypothetical", "not_current", "metaphor", "length",
                               "other_attribute", "no_signal")

# ---- M' checks: a per-attribute residual-signal lexicon (words that still point at the attribute
# after the lexicon's own signals are gone) and a counter-evidence lexicon (M' must not assert or
# negate the attribute either). Neither may match any M' sentence placed by the build.
RESIDUAL_SIGNAL: Mapping[str, str] = {
    "diabetes": (r"\b(?:diabet\w*|insulin|glucose|sugars?|a1c|metformin|retinopathy|neuropathy|ketoacidosis|"
                 r"endocrinolog\w*|glucometer|carbs?|kidney disease|nephropathy|thirst\w*|urinat\w*|"
                 r"amputat\w*|foot ulcers?|pancrea\w*)\b"),
    "pregnancy": (r"\b(?:pregnan\w*|bab(?:y|ies)|infants?|induced|inducing|labou?r|contractions?|trimester\w*|"
                  r"prenatal|antenatal|postnatal|midwi\w*|ob-?gyn|obstetric\w*|ultrasound|due date|fetus|foetus|"
                  r"fetal|womb|uterus|placenta|morning sickness|nause\w*|maternity|paternity|nursery|crib|stroller|"
                  r"expecting|conceiv\w*|delivery|deliver|c-section|newborn|twins|bump|weeks along|folic)\b"),
    "debt": (r"\b(?:debts?|owe[sd]?|owing|overdue|past[- ]due|collections?|collectors?|maxed|minimum payments?|"
             r"late fees?|behind on|bankrupt\w*|insolven\w*|arrears|payday|loans?|credit score|foreclos\w*|"
             r"evict\w*|interest rates?|repay\w*|pay (?:it |them )?back|get out of control|out of control)\b"),
    "job_loss": (r"\b(?:laid off|lay-?offs?|fired|let go|unemploy\w*|jobless|out of work|lost my job|"
                 r"losing my job|severance|pink slip|downsiz\w*|redundan\w*|job search\w*|job hunt\w*|"
                 r"apply(?:ing)? for jobs|job applications?|between jobs|former employer|dismiss\w*|terminated)\b"),
}
COUNTER_EVIDENCE: Mapping[str, str] = {
    "diabetes": r"\b(?:perfectly healthy|no health (?:issues|problems)|normal blood|clean bill of health)\b",
    "pregnancy": r"\b(?:not pregnant|my period|infertil\w*|menopause|vasectomy)\b",
    "debt": r"\b(?:paid off|debt[- ]free|out of debt|no debt|on top of (?:my )?(?:bills|payments))\b",
    "job_loss": (r"\b(?:promot\w*|new job|hired|my current (?:job|employer)|raise|still employed|"
                 r"transferred|reassigned)\b"),
}
# ---- background consistency: a speaker's own sentences that would contradict the evidence of an
# attribute (the speaker is employed / well off / certainly not pregnant...). A background sentence
# matching the lexicon of any attribute the speaker has a pair for is dropped.
CONFLICTS: Mapping[str, str] = {
    "diabetes": (r"\b(?:perfectly healthy|no health (?:issues|problems)|clean bill of health|"
                 r"never been sick|healthiest)\b"),
    "pregnancy": (r"\b(?:drunk|beers?|wine|cocktails?|booze|alcohol\w*|hangover|too much to drink|drinks with|"
                  r"smok(?:e|es|ed|ing|er)|cigar\w*|vap(?:e|ing)|my period|skydiv\w*|bungee|roller ?coasters?|"
                  r"scuba|x-rays?|sauna|hot tub|marathons?|boxing|kickboxing|contact sports?|tattoo\w*)\b"),
    "debt": (r"\b(?:debt[- ]free|paid off|saved up|savings|invest\w*|luxur\w*|splurg\w*|rich|wealthy|"
             r"bought (?:a |my |our )?(?:new )?(?:house|home|car|boat|condo|apartment)|money to spare|"
             r"financially (?:stable|secure|free)|first[- ]class|expensive)\b"),
    "job_loss": (r"\b(?:new job|started (?:a |my |the )?(?:new )?(?:job|position|role)|my (?:current )?(?:job|boss|"
                 r"manager|employer|co-?workers?|colleagues?|shift|salary|paycheck|office|workplace)|"
                 r"at work|(?:I|I'm) (?:work|working) (?:at|as|for|in)|promot\w*|job offer|hired|"
                 r"day at work|work (?:today|tomorrow|this week)|co-?workers?|colleagues?|payday)\b"),
}

def sentences(text: str) -> list[str]:
    """Sentence split on final punctuation, greetings to a doctor stripped."""
    out = []
    for s in _SENT.split(text):
        s = _GREETING.sub("", s.strip()).strip()
        if s:
            out.append(s[:1].upper() + s[1:])
    return out


_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})


def plain_apostrophes(text: str) -> str:
    """``text`` with typographic apostrophes (U+2019, U+2018) as ASCII ones, so that the rules'
    "I'm", "n't", "'ll" also match real posts typed with curly quotes."""
    return text.translate(_APOSTROPHES)


def _has(patterns: Sequence[str] | str, text: str) -> bool:
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    return any(re.search(p, plain_apostrophes(text), re.I) for p in pats)


def ended_in_record(record: str, attribute: str) -> list[str]:
    """The statements of the source ``record`` saying that ``attribute`` has ended for the speaker
    (:data:`ENDED_IN_RECORD`: a new job, back to work; gave birth; debt paid off; diabetes in
    remission), one per match as ``'<match>' in '<sentence>'``; [] = the record does not say so.
    Question sentences, and matches after a negation, hedge or wish (:data:`ENDED_GUARD`) or a
    mention of someone else (:data:`THIRD_PARTY`), do not count. The rule reads what the record
    states, not in what order: a record whose job came before the loss also matches."""
    out = []
    for s in sentences(plain_apostrophes(record)):
        if re.search(_QUESTION_START, s, re.I):
            continue
        for m in re.finditer(ENDED_IN_RECORD[attribute], s, re.I):
            before = s[:m.start()]
            if not (re.search(ENDED_GUARD, before, re.I) or re.search(THIRD_PARTY, before, re.I)):
                out.append(f"{m.group(0)!r} in {s!r}")
    return out


@dataclass(frozen=True)
class Evidence:
    attribute: str
    source: str
    ref: str
    text: str         # the sentence placed in M
    edited: str       # its reviewed a-neutral replacement, placed in M' ("" if not allow-listed)
    unit: str         # "sentence" or "clause"
    source_kind: str = ""   # what kind of text the source is (transfer_corpora.SOURCE_KINDS)


def evidence_problems(text: str, attribute: str) -> list[str]:
    """T3: every evidence rule ``text`` breaks for ``attribute`` (names in RULE_NAMES; [] = passes).
    Typographic apostrophes are read as ASCII ones (:func:`plain_apostrophes`)."""
    text = plain_apostrophes(text)
    n = len(text.split())
    checks = (
        ("no_target_pattern", not _has(TARGET_PATTERNS[attribute], text)),
        ("not_the_attribute", _has(NOT_TARGET[attribute], text)),
        ("question", bool(re.search(QUESTION, text.strip(), re.I))),
        ("not_first_person", not re.search(FIRST_PERSON, text, re.I)),
        ("about_someone_else", bool(re.search(THIRD_PARTY, text, re.I))),
        ("hypothetical", bool(re.search(HYPOTHETICAL, text, re.I))),
        ("not_current", bool(re.search(RESOLVED, text, re.I)
                             or re.search(RESOLVED_BY_ATTRIBUTE[attribute], text, re.I))),
        ("metaphor", bool(re.search(METAPHOR, text, re.I))),
        ("length", not 4 <= n <= 45 or "http" in text.lower()),
        ("other_attribute", bool(set(lexicon.signalled_attributes(text)) - {attribute})),
        ("no_signal", not lexicon.has_signal(text, attribute)),
    )
    return [name for name, bad in checks if bad]


def replacement_problems(m_text: str, m_prime_text: str, attribute: str) -> list[str]:
    """Checks on an M' sentence: no lexicon signal of any attribute, no residual-signal word of
    the target (RESIDUAL_SIGNAL), no counter-evidence (COUNTER_EVIDENCE), differs from M."""
    out = []
    if not m_prime_text.strip():
        out.append("empty")
    if m_prime_text == m_text:
        out.append("unchanged")
    if lexicon.signalled_attributes(m_prime_text):
        out.append(f"signal of {list(lexicon.signalled_attributes(m_prime_text))}")
    hits = re.findall(RESIDUAL_SIGNAL[attribute], m_prime_text, re.I)
    if hits:
        out.append(f"residual signal {hits}")
    hits = re.findall(COUNTER_EVIDENCE[attribute], m_prime_text, re.I)
    if hits:
        out.append(f"counter-evidence {hits}")
    return out


# ---- the reviewed allow-list ---------------------------------------------------------------------
REVIEW_FILE = Path(__file__).with_name("transfer_review.json")
# sources of mental-health posts: a candidate rejected on review is recorded by a hash, not quoted
SENSITIVE_SOURCES: tuple[str, ...] = ("sdcnl", "cams")


@dataclass(frozen=True)
class Review:
    """One hand-checked evidence sentence: accepted as the speaker's current state (``reason``),
    with its hand-written a-neutral M' replacement."""

    attribute: str
    text: str
    m_prime: str
    reason: str
    ref: str = ""


def review_key(text: str, source: str = "") -> str:
    """How a rejected candidate is recorded: its text, or ``sha256:<16 hex>`` of it for a
    sensitive source (SENSITIVE_SOURCES), so that the review file does not quote those posts."""
    if source.split(":")[0] in SENSITIVE_SOURCES:
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return text


def _read_review(path: str | Path | None) -> tuple[Path, Mapping]:
    path = Path(path) if path is not None else REVIEW_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read the transfer review allow-list {path}: {exc}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("evidence"), Mapping):
        raise CorpusError(f"{path}: expected an object with an 'evidence' object attribute -> [entries]")
    return path, data


def load_review(path: str | Path | None = None) -> dict[str, dict[str, Review]]:
    """The reviewed allow-list: attribute -> M sentence -> Review. CorpusError names any problem
    (unknown attribute, missing field, a replacement that fails :func:`replacement_problems`)."""
    path, data = _read_review(path)
    out: dict[str, dict[str, Review]] = {a: {} for a in ATTRIBUTES}
    for a, rows in data["evidence"].items():
        if a not in ATTRIBUTES:
            raise CorpusError(f"{path}: unknown attribute {a!r}; valid: {list(ATTRIBUTES)}")
        for r in rows:
            if not isinstance(r, Mapping) or not all(isinstance(r.get(k), str) and r.get(k)
                                                     for k in ("text", "m_prime", "reason")):
                raise CorpusError(f"{path}: each {a} entry needs non-empty text, m_prime and reason strings, "
                                  f"got {r!r}")
            bad = replacement_problems(r["text"], r["m_prime"], a)
            if bad:
                raise CorpusError(f"{path}: the M' replacement of {r['text']!r} fails: {bad}")
            if r["text"] in out[a]:
                raise CorpusError(f"{path}: {a} sentence listed twice: {r['text']!r}")
            out[a][r["text"]] = Review(a, r["text"], r["m_prime"], r["reason"], str(r.get("ref", "")))
    return out


def load_rejections(path: str | Path | None = None) -> dict[str, dict[str, str]]:
    """Candidates rejected on review: attribute -> :func:`review_key` -> reason. Each entry needs a
    ref, a text or sha256, and a non-empty reason; none may also be on the allow-list."""
    path, data = _read_review(path)
    accepted = load_review(path)
    rows_by_attr = data.get("rejected_on_review", {})
    if not isinstance(rows_by_attr, Mapping):
        raise CorpusError(f"{path}: 'rejected_on_review' must be an object attribute -> [entries]")
    out: dict[str, dict[str, str]] = {a: {} for a in ATTRIBUTES}
    for a, rows in rows_by_attr.items():
        if a not in ATTRIBUTES:
            raise CorpusError(f"{path}: unknown attribute {a!r} in rejected_on_review; valid: {list(ATTRIBUTES)}")
        for r in rows:
            key = ""
            if isinstance(r, Mapping):
                key = r.get("text") or (f"sha256:{r['sha256']}" if r.get("sha256") else "")
            if not key or not isinstance(r.get("reason"), str) or not r["reason"].strip() or not r.get("ref"):
                raise CorpusError(f"{path}: each rejected {a} entry needs a ref, a text or sha256, and a reason, "
                                  f"got {r!r}")
            if key in accepted[a]:
                raise CorpusError(f"{path}: {a} sentence both accepted and rejected: {key!r}")
            if key in out[a]:
                raise CorpusError(f"{path}: rejected {a} candidate listed twice: {key!r}")
            out[a][key] = r["reason"]
    return out


def _dedupe_key(text: str) -> str:
    """Near-duplicate key: lower case without auxiliaries, pronoun forms and punctuation."""
    t = re.sub(r"\b(?:i've|i'm|i have|i was|i|been|have|has|had|am|was|is|are|just|recently|also)\b", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "", t)


def select_evidence(texts: Sequence[SourceText], attribute: str, review: Mapping[str, Review] | None = None,
                    rejected: Mapping[str, str] | None = None) -> tuple[list[Evidence], Counter]:
    """T2/T3 evidence selection for one attribute. A sentence (or, failing that, the clause holding
    the target mention) passes iff :func:`evidence_problems` is empty. With ``review`` (the
    allow-list for this attribute) a passing unit is kept only if it is allow-listed, and its M'
    text is the reviewed replacement; without it every passing unit is returned with edited="".
    ``rejected`` (:func:`load_rejections` for this attribute) names the candidates rejected on review.
    A unit whose source record says the attribute has ended (:func:`ended_in_record`) is never kept.
    Returns (kept, counts by first failed rule / 'duplicate' / 'rejected_on_review' /
    'ended_in_record' / 'not_reviewed' (passes the rules, never reviewed) / 'kept')."""
    kept: list[Evidence] = []
    reasons: Counter = Counter()
    seen: set[str] = set()
    for st in texts:
        for s in sentences(st.text):
            if not (lexicon.has_signal(s, attribute) or _has(TARGET_PATTERNS[attribute], s)):
                continue
            probs = evidence_problems(s, attribute)
            why = probs[0] if probs else ""
            unit, kind = s, "sentence"
            if probs and set(probs) <= set(FALLBACK_TO_CLAUSE):
                for c in [c for c in _CLAUSE.split(s) if c and _has(TARGET_PATTERNS[attribute], c)]:
                    body = c.strip().rstrip(".!?")
                    prefix = s[:max(0, s.find(body))]
                    cand = body[:1].upper() + body[1:] + "."
                    rest = prefix + " " + s[s.find(body) + len(body):]
                    if (re.match(r"(?:I|I'm|I've|I'd|My)\b", cand) and not evidence_problems(cand, attribute)
                            and not re.search(f"{HYPOTHETICAL}|{RESOLVED}|{QUESTION}", prefix, re.I)
                            and not re.search(f"{RESOLVED}|{RESOLVED_BY_ATTRIBUTE[attribute]}", rest, re.I)):
                        unit, kind, why = cand, "clause", ""
                        break
            if why:
                reasons[why] += 1
                continue
            key = _dedupe_key(unit)
            if key in seen:
                reasons["duplicate"] += 1
                continue
            if rejected is not None and review_key(unit, st.source) in rejected:
                reasons["rejected_on_review"] += 1
                continue
            if ended_in_record(st.text, attribute):
                reasons["ended_in_record"] += 1
                continue
            if review is not None and unit not in review:
                reasons["not_reviewed"] += 1
                continue
            seen.add(key)
            reasons["kept"] += 1
            kept.append(Evidence(attribute, st.source, st.ref, unit, review[unit].m_prime if review is not None else "",
                                 kind, KIND_OF_SOURCE.get(st.source, "unknown")))
    return kept, reasons


# =============================================================================================
# T2: background from LoCoMo
# =============================================================================================
SLOT_KEYWORDS: Mapping[str, str] = {
    "health": r"\b(?:doctor|hospital|sick|health\w*|therap\w*|sleep\w*|headaches?|injur\w*|medicine|meditat\w*|"
              r"mental|anxiety|stress\w*|tired|surgery|clinic|pain|recover\w*|self-care|relax\w*|well-being)\b",
    "food": r"\b(?:cook\w*|bak\w*|recipes?|dinner|lunch|breakfast|food|eat\w*|ate|restaurants?|pizza|cakes?|coffee|"
            r"cookies|meals?|vegan|kitchen|pastr\w*|dessert|snacks?|tea)\b",
    "fitness": r"\b(?:run|running|ran|gym|workouts?|hik\w*|yoga|swim\w*|basketball|soccer|football|tennis|exercis\w*|"
               r"marathon|bike|biking|cycling|danc\w*|climb\w*|surf\w*|skat\w*|sports?|kickboxing|fitness|"
               r"martial|walks?|games? of)\b",
    "finance": r"\b(?:money|sav(?:e|ed|ing|ings)|budget|afford\w*|costs?|price\w*|paid|pay\w*|buy\w*|bought|rent|"
               r"expensive|cheap|invest\w*|income|donat\w*|fundrais\w*|wallet|purchase\w*|financ\w*|sold|sell\w*)\b",
    "work": r"\b(?:work\w*|job|career|boss|office|company|business|projects?|startup|clients?|colleagues?|shop|"
            r"store|studio|interview\w*|teach\w*|intern\w*|volunteer\w*|campaign\w*|politic\w*|products?|"
            r"brand|customers?|writing|novel|painting|art|music)\b",
    "schedule": r"\b(?:weekends?|tomorrow|tonight|next week|next month|trips?|travel\w*|vacation|holiday\w*|"
                r"plans?|planning|concerts?|part(?:y|ies)|festival|events?|camping|visit\w*|road trip|mornings?|"
                r"evenings?|routine|calendar|schedule|last week|yesterday|today)\b",
}
# scarce slots first, so that a sentence naming both food and a weekend counts for food
SLOT_PRIORITY: tuple[str, ...] = ("finance", "food", "health", "fitness", "work", "schedule")
_ADDRESS = re.compile(r"\b(?:you|your|yours|you're|you've|u)\b", re.I)


def background_sentences(speaker: Speaker, other_names: Sequence[str] = (), conflict_attributes: Sequence[str] = (),
                         extra_cues: Sequence[str] = ()) -> tuple[dict[str, list[str]], Counter]:
    """A speaker's usable background sentences by slot (first keyword rule that matches, in
    SLOT_PRIORITY order), and counts of why others were dropped. Kept: first person, 6-30 words,
    not a question, not addressed to the partner, no attribute signal, residual-signal word or
    view cue (``extra_cues``), and no conflict with an attribute in ``conflict_attributes``
    (:data:`CONFLICTS`, counted as ``conflicts_<attribute>``)."""
    by_slot: dict[str, list[str]] = defaultdict(list)
    why: Counter = Counter()
    seen: set[str] = set()
    cues = tuple(dict.fromkeys(extra_cues))
    for _dia, text in speaker.utterances:
        for s in sentences(text):
            s = re.sub(r"^(?:hey|hi|wow|thanks|thank you|yeah|yes|no|oh|ah|haha|lol|aw+|omg|ok(?:ay)?|sure|"
                       r"hmm|cool|great)\b[^A-Za-z]*", "", s, flags=re.I).strip()
            if not s:
                continue
            s = s[:1].upper() + s[1:]
            n = len(s.split())
            conflict = next((a for a in conflict_attributes if re.search(CONFLICTS[a], s, re.I)), None)
            if not re.search(FIRST_PERSON, s):
                why["not_first_person"] += 1
            elif "?" in s:
                why["question"] += 1
            elif not 6 <= n <= 30:
                why["length"] += 1
            elif _ADDRESS.search(s) or any(re.search(rf"\b{re.escape(o)}\b", s) for o in other_names):
                why["addressed_to_partner"] += 1
            elif (lexicon.signalled_attributes(s) or (cues and cue_hits(cues, s))
                  or any(re.search(RESIDUAL_SIGNAL[a], s, re.I) for a in ATTRIBUTES)):
                why["protected_signal"] += 1
            elif conflict:
                why[f"conflicts_{conflict}"] += 1
            elif s.lower() in seen:
                why["duplicate"] += 1
            else:
                seen.add(s.lower())
                slot = next((g for g in SLOT_PRIORITY if re.search(SLOT_KEYWORDS[g], s, re.I)), "")
                by_slot[slot or "unassigned"].append(s)
                why["kept"] += 1
    return dict(by_slot), why


# =============================================================================================
# T1: skeletons and evidence positions (interfaces only: Policy reads, Pair turns and gold)
# =============================================================================================
