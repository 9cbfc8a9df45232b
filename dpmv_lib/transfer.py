"""The public-corpus transfer track (paper C.3, Table 7, steps T1-T4).

* T1 skeleton: 80 pairs = 20 LoCoMo speaker histories x 4 attributes; each copies the scaffold
  (template policy, I_a), the 32-query trajectory and the gold of a matching PairedMem pair
  (a selected non-overlap pair with no co-present attribute and at least two I_a positions in
  the attribute's home slot).
* T2 memory sourcing: background = the speaker's own first-person LoCoMo sentences, assigned to
  slots by keyword rules (:data:`SLOT_KEYWORDS`); target evidence = first-person sentences from
  EmpatheticDialogues prompts (debt, job loss, pregnancy) and the medical questions (LiveQA
  messages, GenMedGPT-5k patient descriptions: diabetes, pregnancy), selected by the explicit
  rules of :func:`select_evidence`. M' replaces each evidence sentence with a rule-based minimal
  edit (:data:`EDIT_RULES`) that removes only the target signal.
* T3 validation: :func:`dpmv_lib.pairedmem.validate_pair` and the S4 trajectory checks.
* T4: the frozen protocol (queries, router, reads, scorer, vocabularies, gold) is reused as is.

Corpora are read from ``corpora_dir`` (default :func:`dpmv_lib.paths.default_corpora_dir`);
missing files raise :class:`~dpmv_lib.errors.CorpusError` naming what is needed and where to get
it. Corpus files are never copied; only the selected sentences enter the generated pairs.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import lexicon
from .benchmark import Behaviour, Pair
from .errors import CorpusError, StoreError
from .pairedmem import (TEMPLATES, _dump_json, _dump_jsonl, behaviour_catalogue, behaviour_rows, file_entries,
                        replace_dir_atomically, trajectory_problems, validate_pair)
from .paths import default_corpora_dir
from .phrasebank import ATTRIBUTE_CUES, SLOTS
from .policy import Policy
from .scorer import cue_hits
from .store import MemoryStore

TRACK = "transfer"
FORMAT_VERSION = 1
ATTRIBUTES = lexicon.ATTRIBUTES
HOME_SLOT: Mapping[str, str] = {"diabetes": "health", "pregnancy": "health", "debt": "finance", "job_loss": "work"}
EVIDENCE_PER_PAIR = 2

LOCOMO_FILES = tuple(f"locomo/{n}.json" for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50))
ED_FILES = ("empathetic_dialogues/prompts_valid.csv", "empathetic_dialogues/prompts_test.csv",
            "empathetic_dialogues/prompts_train_lowercased.csv")
LIVEQA_FILES = ("medical_questions/liveqa/TREC-2017-LiveQA-Medical-Train-1.xml",
                "medical_questions/liveqa/TREC-2017-LiveQA-Medical-Train-2.xml",
                "medical_questions/liveqa/TREC-2017-LiveQA-Medical-Test.xml")
GENMED_FILE = "medical_questions/genmedgpt5k/chatdoctor5k.json"
REQUIRED_FILES: tuple[str, ...] = (*LOCOMO_FILES, *ED_FILES, *LIVEQA_FILES, GENMED_FILE)
WHERE = {
    "locomo": "LoCoMo (snap-research/locomo, data/locomo10.zip, one JSON per conversation)",
    "empathetic_dialogues": "EmpatheticDialogues situation prompts (HenryPengZou/JointMatch data/empatheticdialogues "
                            "dev/test -> prompts_valid.csv/prompts_test.csv; dinobby/HypEmo data/ED/train.csv -> "
                            "prompts_train_lowercased.csv)",
    "medical_questions/liveqa": "TREC 2017 LiveQA medical task XML (abachaa/LiveQA_MedicalTask_TREC2017)",
    "medical_questions/genmedgpt5k": "GenMedGPT-5k (Kent0n-Li/ChatDoctor, chatdoctor5k.json)",
}


# =============================================================================================
# corpus readers
# =============================================================================================
def check_corpora(corpora_dir: str | Path | None = None) -> Path:
    """The corpora directory, or CorpusError naming every missing file and where to get it."""
    root = Path(corpora_dir) if corpora_dir is not None else default_corpora_dir()
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        sources = sorted({WHERE[k] for f in missing for k in WHERE if f.startswith(k)})
        raise CorpusError(
            f"the transfer track needs public corpus files under {root} (set corpora_dir or DPMV_CORPORA); "
            f"missing: {', '.join(missing)}. Get them from: " + "; ".join(sources)
            + ". See ../shared/corpora/README.md for the exact snapshots.")
    return root


@dataclass(frozen=True)
class Speaker:
    speaker_id: str
    name: str
    conversation: str
    utterances: tuple[tuple[str, str], ...]   # (dia_id, text)


def read_locomo(corpora_dir: str | Path | None = None) -> list[Speaker]:
    """The 20 LoCoMo speaker histories (each speaker's own turns, in dialogue order)."""
    root = check_corpora(corpora_dir)
    out = []
    for f in LOCOMO_FILES:
        try:
            d = json.loads((root / f).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CorpusError(f"cannot read LoCoMo file {root / f}: {exc}") from None
        conv = Path(f).stem
        sessions = sorted((k for k in d if re.fullmatch(r"session_\d+", k) and isinstance(d[k], list)),
                          key=lambda k: int(k.split("_")[1]))
        for who in ("speaker_a", "speaker_b"):
            name = d[who]
            utts = tuple((t.get("dia_id", ""), t["text"]) for k in sessions for t in d[k]
                         if t.get("speaker") == name and t.get("text"))
            out.append(Speaker(f"locomo{conv}-{name.lower()}", name, conv, utts))
    return out


@dataclass(frozen=True)
class SourceText:
    source: str   # "ed-valid", "ed-test", "ed-train", "liveqa", "genmed"
    ref: str      # row / question id inside the source
    text: str


def _restore_case(t: str) -> str:
    """The lower-cased ED training prompts: restore 'I' and the first letter (case only)."""
    t = re.sub(r"\bi\b", "I", t)
    t = re.sub(r"\bi'(m|ve|d|ll)\b", r"I'\1", t)
    return t[:1].upper() + t[1:]


def read_empathetic(corpora_dir: str | Path | None = None) -> list[SourceText]:
    root = check_corpora(corpora_dir)
    out = []
    for f, tag in zip(ED_FILES[:2], ("ed-valid", "ed-test")):
        with (root / f).open(encoding="utf-8", newline="") as fh:
            for k, r in enumerate(csv.DictReader(fh)):
                out.append(SourceText(tag, f"{tag}:{k}", r["content"].replace("_comma_", ",").strip()))
    with (root / ED_FILES[2]).open(encoding="utf-8", newline="") as fh:
        for k, r in enumerate(csv.DictReader(fh)):
            out.append(SourceText("ed-train", f"ed-train:{k}", _restore_case(r["text"].replace("_comma_", ",").strip())))
    return out


def read_medical(corpora_dir: str | Path | None = None) -> list[SourceText]:
    root = check_corpora(corpora_dir)
    out, seen = [], set()
    for f in LIVEQA_FILES:
        try:
            tree = ET.parse(root / f)
        except (OSError, ET.ParseError) as exc:
            raise CorpusError(f"cannot parse LiveQA file {root / f}: {exc}") from None
        for q in tree.getroot().iter("NLM-QUESTION"):
            qid = q.get("questionid") or q.get("qid") or ""
            for m in q.iter("MESSAGE"):
                t = " ".join((m.text or "").split())
                if t and t not in seen:
                    seen.add(t)
                    out.append(SourceText("liveqa", f"liveqa:{Path(f).stem}:{qid}", t))
    try:
        data = json.loads((root / GENMED_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read {root / GENMED_FILE}: {exc}") from None
    for k, d in enumerate(data):
        t = " ".join(str(d.get("input", "")).split())
        if t:
            out.append(SourceText("genmed", f"genmed:{k}", t))
    return out


# =============================================================================================
# T2: evidence selection rules and minimal edits
# =============================================================================================
_SENT = re.compile(r"(?<=[.!?])\s+")
_GREETING = re.compile(r"^(?:(?:hi|hello|hey|dear)\s+)?(?:doctor|doc|sir)\s*[,.!:]\s*|^(?:hi|hello|hey)\s*[,.!]\s*", re.I)

# positive target patterns (stricter than the lexicon: they must state the attribute itself)
TARGET_PATTERNS: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"\bdiabet(?:es|ic)\b", r"\btype (?:2|ii|two) diabetes\b", r"\bmetformin\b", r"\binsulin\b",
                 r"\ba1c\b", r"\bblood sugar(?: levels?)? (?:is|are) (?:\w+ )?high\b"),
    "pregnancy": (r"\bpregnant\b", r"\bpregnancy\b", r"\bweeks pregnant\b", r"\btrimester\b",
                  r"\bexpecting (?:a baby|my first (?:baby|child)|our first (?:baby|child)|a (?:baby )?(?:boy|girl)|twins)\b",
                  r"\bmaternity leave\b"),
    "debt": (r"\bdebts?\b", r"\bbehind on (?:my )?(?:bills|payments|mortgage|rent)\b", r"\bbills that are overdue\b",
             r"\boverdue bills\b", r"\bmaxed out\b", r"\bowe\b.{0,40}\b(?:cards?|bank|loans?|irs|taxes|hospital)\b",
             r"\bpayday loans?\b", r"\bbankrupt\w*\b"),
    # job loss: the speaker must be the one who lost the job (first-person subject)
    "job_loss": (r"\bI(?:'ve| have| had)? (?:just |recently )?(?:been )?laid off\b",
                 r"\bI(?:'ve| have| had)? (?:just |recently )?(?:got|was|been|had been|get) (?:just )?(?:laid off|fired|let go)\b",
                 r"\b(?:I|I've|I have|I just|I recently)\s+(?:just |recently )?lost my job\b", r"\bfired me\b",
                 r"\bI(?:'m| am) (?:still |now )?(?:unemployed|out of work|jobless)\b",
                 r"\bI(?:'ve| have)? been (?:unemployed|out of work)\b"),
}
# the mention is not the target attribute (other diabetes types, tests, wishes, resolved debt...)
NOT_TARGET: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"insipidus", r"gestational", r"type (?:1|i|one)\b", r"juvenile", r"in children", r"pre-?diabet",
                 r"newborn", r"(?:do not|don't) have"),
    "pregnancy": (r"pregnancy test", r"get(?:ting)? pregnant", r"trying to (?:conceive|get pregnant)",
                  r"(?:not|wasn't|isn't) pregnant", r"without being pregnant", r"in vitro", r"ectopic",
                  r"pregnant pause", r"teen pregnancy", r"terminated", r"abortion"),
    "debt": (r"paid off", r"able to pay off", r"debt[- ]free", r"out of debt", r"no debt", r"debt nonexistent", r"(?:doesn't|don't) have (?:any |the )?debt",
             r"cleared", r"completed all debt", r"garbage collector", r"long overdue"),
    "job_loss": (r"new job", r"found a (?:\w+ )?job", r"got a (?:\w+ )?job", r"another job", r"hired", r"fired up",
                 r"let go of", r"got out of work"),
}
FIRST_PERSON = r"\b(?:I|I'm|I've|I'd|me|my)\b"
# statements about other people (the attribute might be theirs)
THIRD_PARTY = (r"\bmy (?:wife|husband|partner|girlfriend|boyfriend|son|daughter|mom|mother|dad|father|sisters?|"
               r"brothers?|friends?|cousin|aunt|uncle|grandma|grandmother|grandpa|grandfather|boss|co-?worker|"
               r"neighbou?r|kids?|child|children|dog|cat|cows?|niece|nephew|roommate|fiance\w*|in-?laws?|relative|"
               r"colleague|team)\b|\b(?:he|she|his|her|him|hers|they|their|them|someone|somebody|co-?worker|"
               r"uncle|relative|patient|supervisor|manager|management|employees?|guys|anyone|husband|wife|"
               r"boyfriend|girlfriend|person who|people|the dog|the cat)\b")
HYPOTHETICAL = (r"\?|\b(?:if|would|might|may|could|maybe|perhaps|suspect\w*|worr(?:ied|y)|afraid|frightened|scared|"
                r"in case|think|thought|wonder\w*|possib\w*|chance|risk|hope|hoping|hopefully|going to|gonna|will|"
                r"expecting to|want to|wish|plan(?:ning)? to|soon|someday|what if)\b")
RESOLVED = (r"\b(?:used to|years? ago|when I was|back in|last year|once|finally|no longer|recovered|cured|was born|"
            r"gave birth|miscarr\w*|lost the baby|in the past|ended up|ran out|after being|after a long period|"
            r"several years|for years|born|previous|in the end|both times|each subsequent|history of|"
            r"last (?:\w+ )?season|(?:19|20)\d\d|the day I|remember\w*|when I got)\b")
METAPHOR = r"\b(?:pregnant pause|fired up|on fire|killing me|dying to)\b"
# sentence-level failures that a clause holding the target mention may still pass
FALLBACK_TO_CLAUSE = ("hypothetical", "not_current", "length", "other_attribute", "not_first_person")
_CLAUSE = re.compile(r"\s*(?:,|;|\s-\s|\s+(?:and|but|so|because|since|although|though)\s+)\s*")

# minimal edits that remove only the target signal (ordered; first applicable rules win per span)
EDIT_RULES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "diabetes": (
        (r"\btype (?:2|ii|two) diabetes\b", "high blood pressure"), (r"\bdiabetes type (?:2|ii|two)\b", "high blood pressure"),
        (r"\ba diabetic\b", "a patient"), (r"\bdiabetic (?=\w)", ""), (r"\bdiabetic\b", "asthmatic"),
        (r"\bdiabetes\b", "high blood pressure"), (r"\bblood sugar\b", "blood pressure"), (r"\bglucose\b", "cholesterol"),
        (r"\binsulin\b", "vitamin D"), (r"\bmetformin\b", "a multivitamin"), (r"\ba1c\b", "cholesterol"),
        (r"\bhypoglyc\w*\b", "dizziness"), (r"\bendocrinologist\b", "specialist"),
        (r"\bketoacidosis\b", "dehydration"), (r"\bHypoKit\b", "kit"), (r"\bGlucaGen\b", "first-aid")),
    "pregnancy": (
        (r"\bpregnant with (my|our) (first|second|third|\w+) (child|baby|kid)\b", r"about to move into \1 \2 home"),
        (r"\bpregnant with (?:twins|a (?:baby )?(?:boy|girl))\b", "about to move house"),
        (r"\b(\w+) weeks pregnant\b", r"\1 weeks into a new job"), (r"\b(\w+) months pregnant\b", r"\1 months into a new job"),
        (r"\bexpecting (?:a baby|my first (?:baby|child)|our first (?:baby|child)|a (?:baby )?(?:boy|girl)|twins)\b",
         "planning a move"),
        (r"\bhigh risk pregnancy\b", "busy year"), (r"\bfatty liver of pregnancy\b", "fatty liver"), (r"\bpregnancy\b", "recovery"), (r"\bpregnant\b", "exhausted"),
        (r"\b(first|second|third) trimester\b", r"\1 semester"), (r"\btrimester\b", "semester"),
        (r"\bmaternity leave\b", "annual leave"), (r"\bmaternity\b", "annual"), (r"\bprenatal\b", "routine"),
        (r"\bmorning sickness\b", "a bad cold"), (r"\bultrasound\b", "check-up"), (r"\bdue date\b", "deadline"),
        (r"\bmidwi(?:fe|ves)\b", "doctors"), (r"\bob[- ]?gyn\b", "doctor"), (r"\bbaby shower\b", "housewarming party"),
        (r"\bnursery\b", "spare room"), (r"\bmy baby\b", "my new flat"), (r"\bthe baby\b", "the move")),
    "debt": (
        (r"\bdebt collectors?\b", "sales callers"), (r"\bbill collectors?\b", "sales callers"),
        (r"\bcredit card debt\b", "credit card spending"), (r"\bstudent loan debt\b", "student loan paperwork"),
        (r"\bin debt\b", "on a budget"), (r"\bthe debt\b", "the bill"), (r"\bdebts\b", "bills"),
        (r"\bdebt\b", "spending"), (r"\boverdue\b", "due"),
        (r"\bmaxed out\b", "paid off"), (r"\bowe\b", "spend"), (r"\bbehind on\b", "on top of"),
        (r"\bminimum payments?\b", "regular payments"), (r"\bpayday loans?\b", "gift cards"),
        (r"\bbankrupt\w*\b", "busy"), (r"\bcollectors?\b", "callers"), (r"\bcan'?t afford to\b", "plan to")),
    "job_loss": (
        (r"\blaid off\b", "transferred"), (r"\blost my job\b", "changed my job"), (r"\blosing my job\b", "changing my job"),
        (r"\bfired me\b", "promoted me"), (r"\bfired\b", "promoted"), (r"\blet go\b", "reassigned"),
        (r"\bunemployed\b", "self-employed"), (r"\bunemployment\b", "employment"), (r"\bout of work\b", "out of town"),
        (r"\bjobless\b", "busy"), (r"\bdownsized\b", "reorganised"), (r"\bseverance\b", "bonus"),
        (r"\blast day at my job\b", "last day at my desk"), (r"\blayoffs?\b", "reviews")),
}


def sentences(text: str) -> list[str]:
    """Sentence split on final punctuation, greetings to a doctor stripped."""
    out = []
    for s in _SENT.split(text):
        s = _GREETING.sub("", s.strip()).strip()
        if s:
            out.append(s[:1].upper() + s[1:])
    return out


def _has(patterns: Sequence[str] | str, text: str) -> bool:
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    return any(re.search(p, text, re.I) for p in pats)


def minimal_edit(text: str, attribute: str) -> str:
    """M' counterpart of an evidence sentence: apply the attribute's edit rules (case-insensitive)."""
    out = text
    for pat, rep in EDIT_RULES[attribute]:
        out = re.sub(pat, rep, out, flags=re.I)
    return re.sub(r"\s{2,}", " ", out).strip()


def edit_ratio(a: str, b: str) -> float:
    """Share of word tokens changed (1 - matched / max length), for the 'minimal' check."""
    import difflib
    x, y = a.split(), b.split()
    m = sum(bl.size for bl in difflib.SequenceMatcher(a=x, b=y, autojunk=False).get_matching_blocks())
    return 1 - m / max(len(x), len(y), 1)


@dataclass(frozen=True)
class Evidence:
    attribute: str
    source: str
    ref: str
    text: str         # the sentence placed in M
    edited: str       # its minimal edit, placed in M'
    unit: str         # "sentence" or "clause"


def _judge(unit: str, attribute: str) -> str:
    """'' if a sentence/clause passes every rule, else the first failed rule's name."""
    n = len(unit.split())
    if not _has(TARGET_PATTERNS[attribute], unit):
        return "no_target_pattern"
    if _has(NOT_TARGET[attribute], unit):
        return "not_the_attribute"
    if not re.search(FIRST_PERSON, unit, re.I):
        return "not_first_person"
    if re.search(THIRD_PARTY, unit, re.I):
        return "about_someone_else"
    if re.search(HYPOTHETICAL, unit, re.I):
        return "hypothetical"
    if re.search(RESOLVED, unit, re.I):
        return "not_current"
    if re.search(METAPHOR, unit, re.I):
        return "metaphor"
    if not 4 <= n <= 45 or "http" in unit.lower():
        return "length"
    if set(lexicon.signalled_attributes(unit)) - {attribute}:
        return "other_attribute"
    if not cue_hits(ATTRIBUTE_CUES[attribute], unit):
        return "no_scorer_cue"
    edited = minimal_edit(unit, attribute)
    if edited == unit or lexicon.signalled_attributes(edited) or cue_hits(ATTRIBUTE_CUES[attribute], edited):
        return "edit_failed"
    if edit_ratio(unit, edited) > 0.5:
        return "edit_not_minimal"
    return ""


def _dedupe_key(text: str) -> str:
    """Near-duplicate key: lower case without auxiliaries, pronoun forms and punctuation."""
    t = re.sub(r"\b(?:i've|i'm|i have|i was|i|been|have|has|had|am|was|is|are|just|recently|also)\b", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "", t)


def select_evidence(texts: Sequence[SourceText], attribute: str) -> tuple[list[Evidence], Counter]:
    """T2/T3 evidence rules for one attribute. A sentence (or, failing that, the clause holding the
    target mention) is kept iff: it states the attribute itself (TARGET_PATTERNS, not NOT_TARGET);
    it is first person; it is not about someone else; not hypothetical or a question; about a
    current state (not resolved/past); not a metaphor; 4-45 words; carries no other attribute's
    signal; hits a scorer cue of the attribute; and its rule-based minimal edit removes every
    signal and cue while changing at most half of the words. Returns (kept, rejection counts by
    first failed rule, counted once per sentence that carries a lexicon signal of the attribute)."""
    kept: list[Evidence] = []
    reasons: Counter = Counter()
    seen: set[str] = set()
    for st in texts:
        for s in sentences(st.text):
            if not (lexicon.has_signal(s, attribute) or _has(TARGET_PATTERNS[attribute], s)):
                continue
            why = "about_someone_else" if re.search(THIRD_PARTY, s, re.I) else _judge(s, attribute)
            unit, kind = s, "sentence"
            if why in FALLBACK_TO_CLAUSE:
                clauses = [c for c in _CLAUSE.split(s) if c and _has(TARGET_PATTERNS[attribute], c)]
                for c in clauses:
                    body = c.strip().rstrip(".!")
                    prefix = s[:max(0, s.find(body))]
                    cand = body[:1].upper() + body[1:] + "."
                    if (re.match(r"(?:I|I'm|I've|I'd|My)\b", cand) and not _judge(cand, attribute)
                            and not re.search(f"{HYPOTHETICAL}|{RESOLVED}", prefix, re.I)):
                        unit, kind, why = cand, "clause", ""
                        break
            if why:
                reasons[why] += 1
                continue
            key = _dedupe_key(unit)
            if key in seen:
                reasons["duplicate"] += 1
                continue
            seen.add(key)
            reasons["kept"] += 1
            kept.append(Evidence(attribute, st.source, st.ref, unit, minimal_edit(unit, attribute), kind))
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


def background_sentences(speaker: Speaker, other_names: Sequence[str] = ()) -> tuple[dict[str, list[str]], Counter]:
    """A speaker's usable background sentences by slot (first keyword rule that matches, in
    SLOTS order), and counts of why others were dropped. Kept: first person, 6-30 words, not a
    question, not addressed to the partner, no protected-attribute signal or cue."""
    by_slot: dict[str, list[str]] = defaultdict(list)
    why: Counter = Counter()
    seen: set[str] = set()
    all_cues = [c for cs in ATTRIBUTE_CUES.values() for c in cs]
    for _dia, text in speaker.utterances:
        for s in sentences(text):
            s = re.sub(r"^(?:hey|hi|wow|thanks|thank you|yeah|yes|no|oh|ah|haha|lol|aw+|omg|ok(?:ay)?|sure|"
                       r"hmm|cool|great)\b[^A-Za-z]*", "", s, flags=re.I).strip()
            if not s:
                continue
            s = s[:1].upper() + s[1:]
            n = len(s.split())
            if not re.search(FIRST_PERSON, s):
                why["not_first_person"] += 1
            elif "?" in s:
                why["question"] += 1
            elif not 6 <= n <= 30:
                why["length"] += 1
            elif _ADDRESS.search(s) or any(re.search(rf"\b{re.escape(o)}\b", s) for o in other_names):
                why["addressed_to_partner"] += 1
            elif lexicon.signalled_attributes(s) or cue_hits(all_cues, s):
                why["protected_signal"] += 1
            elif s.lower() in seen:
                why["duplicate"] += 1
            else:
                seen.add(s.lower())
                slot = next((g for g in SLOT_PRIORITY if re.search(SLOT_KEYWORDS[g], s, re.I)), "")
                by_slot[slot or "unassigned"].append(s)
                why["kept"] += 1
    return dict(by_slot), why


# =============================================================================================
# T1-T4: build
# =============================================================================================
@dataclass(frozen=True)
class TransferBuild:
    seed: int
    policies: Mapping[str, Policy]
    pairs: tuple[Pair, ...]
    behaviours: Mapping[str, Behaviour]
    evidence: Mapping[str, tuple[Evidence, ...]]
    evidence_reasons: Mapping[str, Mapping[str, int]]
    background: Mapping[str, Mapping[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        return transfer_counts(self)


def _interleave(kept: list[Evidence], rng: random.Random) -> list[Evidence]:
    """Use order of the evidence pool: whole sentences before clauses, sources (ED, LiveQA,
    GenMedGPT) taken in turn so that no single corpus dominates, seeded order within a source."""
    fam = lambda e: e.source.split("-")[0]  # noqa: E731
    groups: dict[tuple[int, str], list[Evidence]] = defaultdict(list)
    for e in kept:
        groups[(0 if e.unit == "sentence" else 1, fam(e))].append(e)
    out: list[Evidence] = []
    for unit in (0, 1):
        lists = [groups[k] for k in sorted(groups) if k[0] == unit]
        for lst in lists:
            rng.shuffle(lst)
        for row in itertools.zip_longest(*lists):
            out.extend(e for e in row if e is not None)
    return out


def _eligible(pairs: Sequence[Pair], attribute: str, policies: Mapping[str, Policy]) -> list[Pair]:
    home = HOME_SLOT[attribute]
    out = []
    for p in pairs:
        if p.attribute != attribute or p.overlap or p.meta.get("co_present"):
            continue
        slot_of = dict(policies[p.policy_id].layout)
        if sum(1 for i in TEMPLATES[p.template][attribute] if slot_of[i] == home) >= EVIDENCE_PER_PAIR:
            out.append(p)
    return out


def build_transfer(pairedmem_pairs: Sequence[Pair], policies: Mapping[str, Policy],
                   corpora_dir: str | Path | None = None, seed: int = 0, n_speakers: int | None = None,
                   progress: bool = False) -> TransferBuild:
    """T1-T4 (C.3): 20 speakers x 4 attributes, each copying a matching PairedMem pair."""
    root = check_corpora(corpora_dir)
    speakers = read_locomo(root)
    if n_speakers is not None:
        speakers = speakers[:n_speakers]
    ed, med = read_empathetic(root), read_medical(root)
    sources = {"diabetes": med + ed, "pregnancy": med + ed, "debt": ed + med, "job_loss": ed + med}
    evidence: dict[str, tuple[Evidence, ...]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for a in ATTRIBUTES:
        kept, why = select_evidence(sources[a], a)
        kept = _interleave(kept, random.Random(f"transfer:{seed}:evidence:{a}"))
        if len(kept) < EVIDENCE_PER_PAIR:
            raise CorpusError(f"only {len(kept)} usable {a} evidence sentences in the corpora under {root}; "
                              f"need at least {EVIDENCE_PER_PAIR}")
        evidence[a], reasons[a] = tuple(kept), dict(sorted(why.items()))
    names = [s.name for s in speakers]
    bg_info: dict[str, dict[str, Any]] = {}
    bg_stores: dict[str, dict[int, str]] = {}
    layout = next(iter(policies.values())).layout
    for sp in speakers:
        by_slot, why = background_sentences(sp, [n for n in names if n != sp.name])
        rng = random.Random(f"transfer:{seed}:background:{sp.speaker_id}")
        pools = {g: list(v) for g, v in by_slot.items()}
        for v in pools.values():
            rng.shuffle(v)
        contents, fallback = {}, 0
        for pos, slot in layout:
            if pools.get(slot):
                contents[pos] = pools[slot].pop()
            else:
                spare = pools.get("unassigned") or max((v for v in pools.values() if v), key=len, default=None)
                if not spare:
                    raise CorpusError(f"speaker {sp.speaker_id} has too few usable background sentences")
                contents[pos] = spare.pop()
                fallback += 1
        bg_stores[sp.speaker_id] = contents
        bg_info[sp.speaker_id] = {"name": sp.name, "conversation": sp.conversation,
                                  "utterances": len(sp.utterances),
                                  "sentences_by_slot": {g: len(by_slot.get(g, [])) for g in (*SLOTS, "unassigned")},
                                  "dropped": dict(sorted((k, v) for k, v in why.items() if k != "kept")),
                                  "kept": why.get("kept", 0), "slot_fallback_positions": fallback}
    behaviours = behaviour_catalogue()
    pairs: list[Pair] = []
    for a in ATTRIBUTES:
        elig = _eligible(pairedmem_pairs, a, policies)
        if not elig:
            raise StoreError(f"no PairedMem pair can serve as a transfer skeleton for {a!r}")
        rng = random.Random(f"transfer:{seed}:skeleton:{a}")
        rng.shuffle(elig)
        elig.sort(key=lambda p: {"test": 0, "validation": 1, "train": 2}[p.split])
        pool = evidence[a]
        for j, sp in enumerate(speakers):
            base = elig[j % len(elig)]
            pol = policies[base.policy_id]
            slot_of = dict(pol.layout)
            home = [i for i in sorted(TEMPLATES[base.template][a]) if slot_of[i] == HOME_SLOT[a]]
            chosen = [pool[(EVIDENCE_PER_PAIR * j + k) % len(pool)] for k in range(EVIDENCE_PER_PAIR)]
            positions = home[:EVIDENCE_PER_PAIR]
            m_c = dict(bg_stores[sp.speaker_id])
            mp_c = dict(m_c)
            for pos, ev in zip(positions, chosen):
                m_c[pos], mp_c[pos] = ev.text, ev.edited
            pid = f"tr-{sp.speaker_id}-{a}"
            m = MemoryStore.from_policy(pol, m_c, name=f"{pid}/M")
            mp = MemoryStore.from_policy(pol, mp_c, name=f"{pid}/M'")
            meta = {"matched_pair": base.pair_id, "speaker": sp.speaker_id, "speaker_name": sp.name,
                    "co_present": [], "group": sorted(TEMPLATES[base.template][a]),
                    "evidence_positions": positions, "overlap_positions": [], "nontarget_positions": {},
                    "evidence": [{"position": pos, "source": ev.source, "ref": ev.ref, "unit": ev.unit,
                                  "M": ev.text, "M_prime": ev.edited} for pos, ev in zip(positions, chosen)],
                    "seed": seed}
            pair = Pair(pid, TRACK, a, base.template, base.policy_id, base.overlap, "test", m, mp, base.turns, meta)
            problems = validate_pair(pol, a, m, mp, evidence_positions=positions)
            problems += trajectory_problems(pol, pair, behaviours)
            if problems:
                raise StoreError(f"T3 validation of {pid} fails: {problems[:3]}")
            pairs.append(pair)
    params = {"seed": seed, "n_speakers": len(speakers), "evidence_per_pair": EVIDENCE_PER_PAIR}
    return TransferBuild(seed, policies, tuple(pairs), behaviours, evidence, reasons, bg_info, params)


def transfer_counts(build: TransferBuild) -> dict[str, Any]:
    """Counts for the T-steps table (measured)."""
    used = Counter((e["ref"], e["M"]) for p in build.pairs for e in p.meta["evidence"])
    by_src: dict[str, dict[str, int]] = {}
    for a, evs in build.evidence.items():
        by_src[a] = dict(sorted(Counter(e.source for e in evs).items()))
    return {
        "pairs": len(build.pairs),
        "speakers": len({p.meta["speaker"] for p in build.pairs}),
        "pairs_per_attribute": dict(sorted(Counter(p.attribute for p in build.pairs).items())),
        "paired_query_turns": sum(len(p.turns) for p in build.pairs),
        "matched_pairedmem_pairs": len({p.meta["matched_pair"] for p in build.pairs}),
        "evidence_candidates_kept": {a: len(v) for a, v in build.evidence.items()},
        "evidence_kept_by_source": by_src,
        "evidence_rejections": {a: {k: v for k, v in r.items() if k != "kept"} for a, r in build.evidence_reasons.items()},
        "evidence_sentences_used": {a: len({k for k in used if any(e["ref"] == k[0] for p in build.pairs
                                                                   if p.attribute == a for e in p.meta["evidence"])})
                                    for a in ATTRIBUTES},
        "max_reuse_of_one_evidence_sentence": max(used.values()) if used else 0,
        "background_sentences_kept": sum(v["kept"] for v in build.background.values()),
        "background_by_slot": {g: sum(v["sentences_by_slot"][g] for v in build.background.values())
                               for g in (*SLOTS, "unassigned")},
        "background_slot_fallback_positions": sum(v["slot_fallback_positions"] for v in build.background.values()),
    }


def write_transfer(build: TransferBuild, data_dir: str | Path = "data") -> Path:
    """Freeze the transfer track under ``data_dir/transfer`` (JSON Lines + manifest with sha256).
    The policies are the PairedMem ones (``data_dir/policy``, written by the PairedMem build)."""
    from .benchmark import pair_to_json
    target = Path(data_dir) / TRACK

    def fill(d: Path) -> None:
        rows = {
            "pairs.jsonl": _dump_jsonl(d / "pairs.jsonl", (pair_to_json(p) for p in build.pairs)),
            "evidence.jsonl": _dump_jsonl(d / "evidence.jsonl", (asdict(e) for a in ATTRIBUTES for e in build.evidence[a])),
            "background.jsonl": _dump_jsonl(d / "background.jsonl", ({"speaker": k, **v} for k, v in build.background.items())),
            "behaviours.jsonl": _dump_jsonl(d / "behaviours.jsonl", behaviour_rows(build.behaviours)),
        }
        manifest = {"format_version": FORMAT_VERSION, "track": TRACK, "generator": "dpmv_lib.transfer",
                    "params": dict(build.params), "counts": transfer_counts(build),
                    "policies": sorted({p.policy_id for p in build.pairs}),
                    "corpora": {k: v for k, v in WHERE.items()},
                    "files": file_entries(d, sorted(rows), rows)}
        _dump_json(d / "manifest.json", manifest)

    replace_dir_atomically(target, fill)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.transfer", description="Build the transfer track (C.3).")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--corpora-dir", default=None)
    args = ap.parse_args(argv)
    if not args.build:
        ap.print_help()
        return 0
    from .datasets import load_benchmark
    from .paths import resolve
    t0 = time.perf_counter()
    bench = load_benchmark("pairedmem", resolve(args.data_dir))
    try:
        build = build_transfer(bench.pairs, bench.policies, args.corpora_dir, args.seed)
    except CorpusError as exc:
        print(f"transfer track skipped: {exc}", file=sys.stderr)
        return 2
    out = write_transfer(build, resolve(args.data_dir))
    print(f"transfer: {len(build.pairs)} pairs -> {out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
