"""The public-corpus transfer track, v2 (paper C.3, Table 7, steps T1-T4).

* T1 skeleton: one pair per (LoCoMo speaker history, attribute); each copies the scaffold
  (template policy, I_a), the 32-query trajectory and the gold of a matching PairedMem pair.
  Pregnancy pairs only for speakers whose persona fits (:func:`pregnancy_persona_fits`).
* T2 memory sourcing: background = the speaker's own first-person LoCoMo sentences, assigned to
  slots by keyword rules (:data:`SLOT_KEYWORDS`), minus sentences that contradict an attribute the
  speaker has a pair for (:data:`CONFLICTS`). Target evidence = first-person corpus sentences
  (EmpatheticDialogues prompts; LiveQA and GenMedGPT-5k patient messages) that pass the T3 rules
  (:func:`evidence_problems`) and are on the reviewed allow-list (``transfer_review.json``), which
  also holds each sentence's hand-written a-neutral M' replacement. Evidence is placed at a set of
  I_a positions that every target-relevant turn reads (:func:`support_positions`), so each
  target-required behaviour is supported by what the turn reads on M; M and M' differ exactly there.
* T3 validation: :func:`pair_problems` (scaffold, D = evidence positions within I_a, target
  signal on M, no signal/residual/counter-evidence on M', support of every gold behaviour) and
  :func:`quality_report` (the measured figures tests assert on the committed data).
* T4: the frozen protocol (queries, router, reads, scorer, vocabularies, gold) is reused as is.

This module depends only on the Pair / Policy / Query / GoldTurn / MemoryStore interfaces (and the
attribute lexicon): any PairedMem build can serve as the skeleton source. Corpora are read from
``corpora_dir`` (default :func:`dpmv_lib.paths.default_corpora_dir`); missing files raise
:class:`~dpmv_lib.errors.CorpusError` naming what is needed and where to get it. Corpus files are
never copied; only the selected sentences enter the generated pairs.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
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
from .benchmark import Behaviour, Pair, pair_to_json
from .datafiles import dump_json, dump_jsonl, file_entries, replace_dir_atomically
from .errors import CorpusError, StoreError
from .paths import default_corpora_dir
from .policy import Policy, View
from .scorer import cue_hits
from .store import MemoryStore, differing_positions

TRACK = "transfer"
FORMAT_VERSION = 2
ATTRIBUTES = lexicon.ATTRIBUTES
HOME_SLOT: Mapping[str, str] = {"diabetes": "health", "pregnancy": "health", "debt": "finance", "job_loss": "work"}
MIN_DISTINCT_EVIDENCE = 20    # goal: distinct evidence sentences per attribute (issue 10)
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
    she_refs: int = 0          # she/her in the LoCoMo observations and event summaries about the speaker
    he_refs: int = 0           # he/his/him in the same annotations
    persona_conflicts: int = 0  # PREGNANCY_PERSONA_CONFLICT matches in those annotations

    @property
    def pregnancy_fits(self) -> bool:
        return pregnancy_persona_fits(self.she_refs, self.he_refs, self.persona_conflicts)


def _annotations(d: Mapping[str, Any], name: str) -> list[str]:
    """LoCoMo's own sentences about one speaker: session observations and event summaries."""
    out: list[str] = []
    for k, v in d.items():
        if k.startswith("events_session") and isinstance(v, Mapping):
            out += [s for s in v.get(name, []) if isinstance(s, str)]
        elif k.endswith("_observation") and isinstance(v, Mapping):
            out += [s[0] for s in v.get(name, []) if isinstance(s, (list, tuple)) and s and isinstance(s[0], str)]
    return out


def read_locomo(corpora_dir: str | Path | None = None) -> list[Speaker]:
    """The 20 LoCoMo speaker histories (each speaker's own turns, in dialogue order), with the
    pronoun counts of the dataset's annotations about them (the pregnancy persona rule)."""
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
            notes = " ".join(_annotations(d, name))
            out.append(Speaker(f"locomo{conv}-{name.lower()}", name, conv, utts,
                               len(re.findall(PERSONA_FEMALE, notes, re.I)), len(re.findall(PERSONA_MALE, notes, re.I)),
                               len(re.findall(PREGNANCY_PERSONA_CONFLICT, notes, re.I))))
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
# T2/T3: evidence rules, the reviewed allow-list, M' checks
# =============================================================================================
_SENT = re.compile(r"(?<=[.!?])\s+")
_GREETING = re.compile(r"^(?:(?:hi|hello|hey|dear)\s+)?(?:doctor|doc|sir)\s*[,.!:]\s*|^(?:hi|hello|hey)\s*[,.!]\s*", re.I)

# ---- T3 evidence rules (paper: first person, the speaker's current state; no resolved past states,
# hypotheticals, metaphors or other people). Every rule is a named regex family; a sentence (or the
# clause holding the target mention) is used only if no rule fires AND it is on the reviewed
# allow-list (REVIEW_FILE). quality_report() re-applies the same rules to the built pairs.
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
                 r"\bI(?:'ve| have)? been (?:unemployed|out of work|jobless)\b", r"\bafter getting (?:fired|laid off)\b",
                 r"\b(?:was|got|been) let go from my job\b"),
}
# the mention is not the target attribute (diabetes: type-2 or compatible only, so no type-1,
# gestational, juvenile, insulin-dependent or DKA cues; tests, wishes, resolved debt...)
NOT_TARGET: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"insipidus", r"gestational", r"type[- ]?(?:1|i|one)\b", r"\bt1d\b", r"juvenile", r"in children",
                 r"pre-?diabet", r"newborn", r"(?:do not|don't) have", r"insulin[- ]dependent", r"ketoacidosis",
                 r"\bdka\b", r"overdos\w*", r"too much insulin"),
    "pregnancy": (r"pregnancy test", r"get(?:ting)? pregnant", r"trying to (?:conceive|get pregnant)",
                  r"(?:not|wasn't|isn't) pregnant", r"without being pregnant", r"in vitro", r"ectopic",
                  r"pregnant pause", r"teen pregnancy", r"terminated", r"abortion", r"miscarr\w*"),
    "debt": (r"paid off", r"able to pay off", r"debt[- ]free", r"out of debt", r"no debt", r"debt nonexistent",
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
               r"colleague|team)\b|\b(?:he|she|his|her|him|hers|they|their|someone|somebody|co-?worker|"
               r"uncle|relative|patient|supervisor|manager|management|employees?|guys|anyone|husband|wife|"
               r"boyfriend|girlfriend|person who|people|the dog|the cat)\b")
QUESTION = r"\?|^(?:what|how|why|when|where|which|who|is|are|can|could|should|do|does|did|will)\b"
HYPOTHETICAL = (r"\b(?:if|would|might|may|could|maybe|perhaps|suspect\w*|worr(?:ied|y)|afraid|frightened|scared|"
                r"in case|think|thought|wonder\w*|possib\w*|chance|risk|hope|hoping|hopefully|going to|gonna|will|"
                r"expecting to|want to|wish|plan(?:ning)? to|soon|someday|what if)\b")
RESOLVED = (r"\b(?:used to|years? ago|when I was|back in|last year|once|finally|no longer|recovered|cured|was born|"
            r"gave birth|miscarr\w*|lost the baby|in the past|ended up|ran out|after being|after a long period|"
            r"several years|for years|born|previous|in the end|both times|each subsequent|history of|"
            r"last (?:\w+ )?season|(?:19|20)\d\d|the day I|remember\w*|when I got)\b")
# attribute-specific resolved states (after the birth; re-employed; debt cleared; remission)
RESOLVED_BY_ATTRIBUTE: Mapping[str, str] = {
    "diabetes": r"\b(?:in remission|reversed|went away)\b",
    "pregnancy": (r"\b(?:delivered|delivery|deliver|postpartum|post-partum|after (?:the |my )?(?:birth|pregnancy)|"
                  r"c-section|ca?esarean|breast-?feed\w*|nursing|newborn|had (?:my|a|the|our) baby|"
                  r"since (?:the )?birth|during (?:my|the) pregnancy|my pregnancy was|last pregnancy|"
                  r"induced|labou?r|recent pregnancy|had a pregnancy|was pregnant|was expecting|first pregnancy|"
                  r"maternity leave)\b"),
    "job_loss": r"\b(?:back to work|rehired|started working|employed again|full[- ]time job|new position)\b",
    "debt": r"\b(?:paid (?:it |them )?(?:all )?off|settled)\b",
}
METAPHOR = r"\b(?:pregnant pause|fired up|on fire|killing me|dying to)\b"
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
# ---- pregnancy persona rule: pregnancy pairs only for speakers the LoCoMo annotations refer to as
# "she"/"her" (observations and event summaries about that speaker) and whose history is not
# about becoming a parent by adoption.
PERSONA_FEMALE = r"\b(?:she|her|hers|herself)\b"
PERSONA_MALE = r"\b(?:he|his|him|himself)\b"
PREGNANCY_PERSONA_CONFLICT = r"\badoption (?:agenc\w*|process|council|interviews?)\b|\bbecoming a mom by\b"


def pregnancy_persona_fits(she: int, he: int, conflicts: int = 0) -> bool:
    """Pregnancy only where the persona fits: >= 10 female references in LoCoMo's annotations
    about the speaker, at least twice as many as male ones, and no adoption-to-parenthood history."""
    return she >= 10 and she >= 2 * he and conflicts == 0


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


@dataclass(frozen=True)
class Evidence:
    attribute: str
    source: str
    ref: str
    text: str         # the sentence placed in M
    edited: str       # its reviewed a-neutral replacement, placed in M' ("" if not allow-listed)
    unit: str         # "sentence" or "clause"


def evidence_problems(text: str, attribute: str) -> list[str]:
    """T3: every evidence rule ``text`` breaks for ``attribute`` (names in RULE_NAMES; [] = passes)."""
    n = len(text.split())
    checks = (
        ("no_target_pattern", not _has(TARGET_PATTERNS[attribute], text)),
        ("not_the_attribute", _has(NOT_TARGET[attribute], text)),
        ("question", bool(re.search(QUESTION, text.strip(), re.I))),
        ("not_first_person", not re.search(FIRST_PERSON, text, re.I)),
        ("about_someone_else", bool(re.search(THIRD_PARTY, text, re.I))),
        ("hypothetical", bool(re.search(HYPOTHETICAL, text, re.I))),
        ("not_current", bool(re.search(RESOLVED, text, re.I) or re.search(RESOLVED_BY_ATTRIBUTE[attribute], text, re.I))),
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


@dataclass(frozen=True)
class Review:
    """One hand-checked evidence sentence: accepted as the speaker's current state (``reason``),
    with its hand-written a-neutral M' replacement."""

    attribute: str
    text: str
    m_prime: str
    reason: str
    ref: str = ""


def load_review(path: str | Path | None = None) -> dict[str, dict[str, Review]]:
    """The reviewed allow-list: attribute -> M sentence -> Review. CorpusError names any problem
    (unknown attribute, missing field, a replacement that fails :func:`replacement_problems`)."""
    path = Path(path) if path is not None else REVIEW_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read the transfer review allow-list {path}: {exc}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("evidence"), Mapping):
        raise CorpusError(f"{path}: expected an object with an 'evidence' object attribute -> [entries]")
    out: dict[str, dict[str, Review]] = {a: {} for a in ATTRIBUTES}
    for a, rows in data["evidence"].items():
        if a not in ATTRIBUTES:
            raise CorpusError(f"{path}: unknown attribute {a!r}; valid: {list(ATTRIBUTES)}")
        for r in rows:
            if not isinstance(r, Mapping) or not all(isinstance(r.get(k), str) and r.get(k) for k in ("text", "m_prime", "reason")):
                raise CorpusError(f"{path}: each {a} entry needs non-empty text, m_prime and reason strings, got {r!r}")
            bad = replacement_problems(r["text"], r["m_prime"], a)
            if bad:
                raise CorpusError(f"{path}: the M' replacement of {r['text']!r} fails: {bad}")
            if r["text"] in out[a]:
                raise CorpusError(f"{path}: {a} sentence listed twice: {r['text']!r}")
            out[a][r["text"]] = Review(a, r["text"], r["m_prime"], r["reason"], str(r.get("ref", "")))
    return out


def _dedupe_key(text: str) -> str:
    """Near-duplicate key: lower case without auxiliaries, pronoun forms and punctuation."""
    t = re.sub(r"\b(?:i've|i'm|i have|i was|i|been|have|has|had|am|was|is|are|just|recently|also)\b", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "", t)


def select_evidence(texts: Sequence[SourceText], attribute: str,
                    review: Mapping[str, Review] | None = None) -> tuple[list[Evidence], Counter]:
    """T2/T3 evidence selection for one attribute. A sentence (or, failing that, the clause holding
    the target mention) passes iff :func:`evidence_problems` is empty. With ``review`` (the
    allow-list for this attribute) a passing unit is kept only if it is allow-listed, and its M'
    text is the reviewed replacement; without it every passing unit is returned with edited="".
    Returns (kept, counts by first failed rule / 'not_reviewed' / 'duplicate' / 'kept')."""
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
            if review is not None and unit not in review:
                reasons["not_reviewed"] += 1
                continue
            key = _dedupe_key(unit)
            if key in seen:
                reasons["duplicate"] += 1
                continue
            seen.add(key)
            reasons["kept"] += 1
            kept.append(Evidence(attribute, st.source, st.ref, unit, review[unit].m_prime if review is not None else "", kind))
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
def linked_view(policy: Policy, behaviour_id: str) -> View | None:
    """The view a target-required behaviour ``req:<attribute>:<view id>`` stands for (None if the
    id does not name a view of this policy: then support needs only the attribute's signal)."""
    parts = behaviour_id.split(":", 2)
    if len(parts) == 3:
        try:
            return policy.view(parts[2])
        except Exception:  # noqa: BLE001 - an unknown view id: fall back to the signal alone
            return None
    return None


@dataclass(frozen=True)
class Need:
    """One target-required behaviour of one turn: the I_a positions the turn reads, and its view."""

    turn: int
    behaviour: str
    reads: frozenset[int]
    view_id: str


def support_needs(policy: Policy, pair: Pair) -> list[Need]:
    """Every (turn, target-required behaviour) of the trajectory with R_t intersected with I_a."""
    group = policy.attribute(pair.attribute).group
    out = []
    for t in pair.turns:
        reads = frozenset(policy.read(t.query, t.slot)) & group
        for b in t.gold.target_required:
            v = linked_view(policy, b)
            out.append(Need(t.index, b, reads, v.id if v else ""))
    return out


def support_positions(policy: Policy, pair: Pair, prefer: Sequence[int] = ()) -> tuple[int, ...] | None:
    """A small set S of I_a positions such that every target-required behaviour's turn reads one
    (greedy hitting set: most uncovered needs first; ties: ``prefer`` order, then the attribute's
    home slot, then position id). None if some target-relevant turn reads no I_a position."""
    needs = support_needs(policy, pair)
    if any(not n.reads for n in needs):
        return None
    slot_of = dict(policy.layout)
    rank = {i: k for k, i in enumerate(prefer)}
    home = HOME_SLOT.get(pair.attribute, "")
    chosen: list[int] = []
    while True:
        open_ = [n for n in needs if not n.reads & set(chosen)]
        if not open_:
            return tuple(sorted(chosen))
        c = Counter(i for n in open_ for i in n.reads)
        chosen.append(min(c, key=lambda i: (-c[i], rank.get(i, len(rank)), slot_of[i] != home, i)))


def _views_at(policy: Policy, pair: Pair, position: int) -> list[View]:
    """The views of the target-required behaviours whose turns read ``position``."""
    ids = sorted({n.view_id for n in support_needs(policy, pair) if position in n.reads and n.view_id})
    return [policy.view(v) for v in ids]


def supported(policy: Policy, pair: Pair) -> tuple[int, int]:
    """(target-required behaviours, of them unsupported on M): a behaviour of turn t is supported
    iff some position the turn reads holds M text with the attribute's signal and a cue of the
    behaviour's view (the scorer can use it there)."""
    total = bad = 0
    for t in pair.turns:
        reads = policy.read(t.query, t.slot)
        for b in t.gold.target_required:
            total += 1
            v = linked_view(policy, b)
            if not any(lexicon.has_signal(pair.m.contents[i], pair.attribute)
                       and (v is None or cue_hits(v.cues, pair.m.contents[i])) for i in reads):
                bad += 1
    return total, bad


def pair_problems(policy: Policy, pair: Pair, behaviours: Mapping[str, Behaviour] | None = None) -> list[str]:
    """T3 code checks of one transfer pair (empty list = passes): shared scaffold; M and M' differ
    exactly at the evidence positions, all inside I_a (T1: equal outside I_a); target signal in M
    at each of them; no signal of any attribute, residual-signal word or counter-evidence in M';
    no other attribute's signal in M; every target-required behaviour supported on M; every cited
    behaviour in the catalogue."""
    a = pair.attribute
    if tuple(pair.m.layout) != policy.layout or tuple(pair.m_prime.layout) != policy.layout:
        return ["the stores do not share the policy's scaffold"]
    group = policy.attribute(a).group
    ev = set(pair.meta.get("evidence_positions", ()))
    d = differing_positions(pair.m, pair.m_prime)
    out = []
    if d - group:
        out.append(f"stores differ outside I_a at {sorted(d - group)}")
    if d != ev:
        out.append(f"differing positions {sorted(d)} != evidence positions {sorted(ev)}")
    for i in sorted(ev):
        if not lexicon.has_signal(pair.m.contents[i], a):
            out.append(f"M lacks target evidence at position {i}")
        bad = replacement_problems(pair.m.contents[i], pair.m_prime.contents[i], a)
        if bad:
            out.append(f"M' at position {i}: {bad}")
    for side, store in (("M", pair.m), ("M'", pair.m_prime)):
        for i, text in store.contents.items():
            extra = set(lexicon.signalled_attributes(text)) - ({a} if side == "M" else set())
            if extra:
                out.append(f"{side} carries evidence of {sorted(extra)} at position {i}")
    total, bad_n = supported(policy, pair)
    if bad_n:
        out.append(f"{bad_n} of {total} target-required behaviours unsupported on M")
    if behaviours is not None:
        for t in pair.turns:
            for b in (*t.gold.target_required, *t.gold.unsupported, *t.gold.generic):
                if b not in behaviours:
                    out.append(f"turn {t.index} cites unknown behaviour {b!r}")
    return out


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


_SPLIT_ORDER = {"test": 0, "validation": 1, "train": 2}


def skeletons(pairedmem_pairs: Sequence[Pair], attribute: str, policies: Mapping[str, Policy],
              rng: random.Random) -> list[tuple[Pair, tuple[int, ...]]]:
    """T1: PairedMem pairs of ``attribute`` usable as skeletons, with their support positions:
    every target-relevant turn reads I_a. Order: no overlap / co-present attribute first, fewest
    evidence positions, test split first, then seeded."""
    out = []
    for p in pairedmem_pairs:
        if p.attribute != attribute:
            continue
        pos = support_positions(policies[p.policy_id], p, prefer=p.meta.get("evidence_positions", ()))
        if pos:
            out.append((p, pos))
    rng.shuffle(out)
    out.sort(key=lambda x: (bool(x[0].overlap) or bool(x[0].meta.get("co_present")), len(x[1]),
                            _SPLIT_ORDER.get(x[0].split, 3)))
    return out


def _attribute_cues(policies: Mapping[str, Policy], behaviours: Mapping[str, Behaviour]) -> tuple[str, ...]:
    """Cues of every view a target-required behaviour stands for (kept out of the background)."""
    out: dict[str, None] = {}
    for pol in policies.values():
        for b in behaviours.values():
            if b.kind == "target_required":
                v = linked_view(pol, b.id)
                if v is not None:
                    out.update(dict.fromkeys(v.cues))
    return tuple(out)


def _place(pool: Sequence[Evidence], usage: Counter, policy: Policy, base: Pair,
           positions: Sequence[int]) -> list[tuple[int, int]] | None:
    """Pool index per support position: distinct within the pair, its M text hits a cue of every
    view required at that position and its M' text none; least used first (then pool order).
    None if some position has no fitting sentence."""
    placed: list[tuple[int, int]] = []
    for pos in positions:
        views = _views_at(policy, base, pos)
        taken = {k for k, _ in placed}
        fit = [k for k, e in enumerate(pool) if k not in taken
               and all(cue_hits(v.cues, e.text) for v in views) and not any(cue_hits(v.cues, e.edited) for v in views)]
        if not fit:
            return None
        placed.append((min(fit, key=lambda k: (usage[k], k)), pos))
    return placed


def build_transfer(pairedmem_pairs: Sequence[Pair], policies: Mapping[str, Policy],
                   corpora_dir: str | Path | None = None, seed: int = 0, n_speakers: int | None = None,
                   progress: bool = False, behaviours: Mapping[str, Behaviour] | None = None,
                   review: Mapping[str, Mapping[str, Review]] | None = None) -> TransferBuild:
    """T1-T4 (C.3): one pair per (speaker, attribute); pregnancy only for fitting personas.

    ``behaviours`` defaults to the PairedMem catalogue; ``review`` to :func:`load_review`."""
    root = check_corpora(corpora_dir)
    if behaviours is None:
        from .pairedmem import behaviour_catalogue   # the frozen gold catalogue (T4)
        behaviours = behaviour_catalogue()
    review = load_review() if review is None else review
    speakers = read_locomo(root)
    if n_speakers is not None:
        speakers = speakers[:n_speakers]
    ed, med = read_empathetic(root), read_medical(root)
    sources = {"diabetes": med + ed, "pregnancy": med + ed, "debt": ed + med, "job_loss": ed + med}
    evidence: dict[str, tuple[Evidence, ...]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for a in ATTRIBUTES:
        kept, why = select_evidence(sources[a], a, review.get(a, {}))
        kept = _interleave(kept, random.Random(f"transfer:{seed}:evidence:{a}"))
        evidence[a], reasons[a] = tuple(kept), dict(sorted(why.items()))
    speaker_attrs = {sp.speaker_id: [a for a in ATTRIBUTES if a != "pregnancy" or sp.pregnancy_fits]
                     for sp in speakers}
    cues = _attribute_cues(policies, behaviours)
    names = [s.name for s in speakers]
    bg_info: dict[str, dict[str, Any]] = {}
    bg_stores: dict[str, dict[int, str]] = {}
    layout = next(iter(policies.values())).layout
    for sp in speakers:
        by_slot, why = background_sentences(sp, [n for n in names if n != sp.name], speaker_attrs[sp.speaker_id], cues)
        rng = random.Random(f"transfer:{seed}:background:{sp.speaker_id}")
        pools = {g: list(v) for g, v in sorted(by_slot.items())}
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
                                  "persona": {"she_refs": sp.she_refs, "he_refs": sp.he_refs,
                                              "persona_conflicts": sp.persona_conflicts,
                                              "pregnancy_fits": sp.pregnancy_fits},
                                  "attributes": speaker_attrs[sp.speaker_id],
                                  "sentences_by_slot": {g: len(by_slot.get(g, [])) for g in (*SLOT_PRIORITY, "unassigned")},
                                  "dropped": dict(sorted((k, v) for k, v in why.items() if k != "kept")),
                                  "kept": why.get("kept", 0), "slot_fallback_positions": fallback}
    pairs: list[Pair] = []
    for a in ATTRIBUTES:
        cands = skeletons(pairedmem_pairs, a, policies, random.Random(f"transfer:{seed}:skeleton:{a}"))
        if not cands:
            raise StoreError(f"no PairedMem pair can serve as a transfer skeleton for {a!r} "
                             "(every target-relevant turn must read a position of I_a)")
        pool = evidence[a]
        usage: Counter = Counter()
        cursor = 0
        for sp in (s for s in speakers if a in speaker_attrs[s.speaker_id]):
            for _ in range(len(cands)):   # the next skeleton whose positions the reviewed pool can fill
                base, positions = cands[cursor % len(cands)]
                cursor += 1
                placed = _place(pool, usage, policies[base.policy_id], base, positions)
                if placed is not None:
                    break
            else:
                raise CorpusError(f"no reviewed {a} evidence fits the support positions of any skeleton (views' cues); "
                                  f"the allow-list holds {len(pool)} usable {a} sentences")
            pol = policies[base.policy_id]
            usage.update(k for k, _ in placed)
            m_c = dict(bg_stores[sp.speaker_id])
            mp_c = dict(m_c)
            for k, pos in placed:
                m_c[pos], mp_c[pos] = pool[k].text, pool[k].edited
            pid = f"tr-{sp.speaker_id}-{a}"
            m = MemoryStore.from_policy(pol, m_c, name=f"{pid}/M")
            mp = MemoryStore.from_policy(pol, mp_c, name=f"{pid}/M'")
            meta = {"matched_pair": base.pair_id, "speaker": sp.speaker_id, "speaker_name": sp.name,
                    "persona": dict(bg_info[sp.speaker_id]["persona"]),
                    "co_present": [], "group": sorted(pol.attribute(a).group),
                    "evidence_positions": list(positions), "overlap_positions": [], "nontarget_positions": {},
                    "evidence": [{"position": pos, "source": pool[k].source, "ref": pool[k].ref, "unit": pool[k].unit,
                                  "M": pool[k].text, "M_prime": pool[k].edited,
                                  "review": review[a][pool[k].text].reason} for k, pos in placed],
                    "seed": seed}
            pair = Pair(pid, TRACK, a, base.template, base.policy_id, base.overlap, "test", m, mp, base.turns, meta)
            problems = pair_problems(pol, pair, behaviours)
            if problems:
                raise StoreError(f"T3 validation of {pid} fails: {problems[:3]}")
            pairs.append(pair)
    params = {"seed": seed, "n_speakers": len(speakers), "min_distinct_evidence": MIN_DISTINCT_EVIDENCE,
              "review_sha256": hashlib.sha256(json.dumps(
                  {a: sorted((r.text, r.m_prime) for r in v.values()) for a, v in sorted(review.items())},
                  sort_keys=True).encode()).hexdigest()}
    return TransferBuild(seed, policies, tuple(pairs), dict(behaviours), evidence, reasons, bg_info, params)


# =============================================================================================
# measured quality (issue 10, item 5): every figure here is asserted on the committed data
# =============================================================================================
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
    * distinct_evidence / max_reuse / max_reuse_within_pair: evidence sentence usage."""
    pairs = list(track.pairs)
    policies = track.policies
    total = unsup = 0
    outside = not_ev = 0
    rule_bad: dict[tuple[str, str], list[str]] = {}
    mprime_bad: dict[tuple[str, str], list[str]] = {}
    residual_anywhere = conflicts = misfit = 0
    conflict_examples: list[str] = []
    used: dict[str, Counter] = {a: Counter() for a in ATTRIBUTES}
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
        for i in sorted(d):
            m_t, mp_t = p.m.contents[i], p.m_prime.contents[i]
            used[p.attribute][m_t] += 1
            probs = evidence_problems(m_t, p.attribute)
            if probs:
                rule_bad[(p.attribute, m_t)] = probs
            probs = replacement_problems(m_t, mp_t, p.attribute)
            if probs:
                mprime_bad[(p.attribute, mp_t)] = probs
        for i, text in p.m_prime.contents.items():
            residual_anywhere += bool(re.search(RESIDUAL_SIGNAL[p.attribute], text, re.I))
        for i, text in p.m.contents.items():
            if i not in d and re.search(CONFLICTS[p.attribute], text, re.I):
                conflicts += 1
                if len(conflict_examples) < 5:
                    conflict_examples.append(f"{p.pair_id}@{i}: {text}")
        if p.attribute == "pregnancy":
            per = (personas or {}).get(p.meta.get("speaker", "")) or p.meta.get("persona") or {}
            if not pregnancy_persona_fits(per.get("she_refs", 0), per.get("he_refs", 0), per.get("persona_conflicts", 0)):
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
        "max_reuse": {a: max(c.values(), default=0) for a, c in used.items()},
        "max_reuse_within_pair": within,
    }


# A record (not recomputed here) of the v1 track's figures (80 pairs, data at commit cb0b4b7): the
# issue-10 audit's counts, and quality_report run once on that data (data/README.md, "Transfer track v2").
# quality_table() shows them beside the figures measured on the track it is given.
V1_FIGURES: Mapping[str, str] = {
    "unsupported_target_required": "982 of 1,385 (audit); 993 of 1,385 by quality_report",
    "rule_violations": "9 clear + 4 probable of 78 (audit); 17 by quality_report",
    "m_prime_problems": "~20 nonsense + ~13 residual of 78 (audit); 27 by quality_report",
    "pairs_differing_outside_group": "0 by quality_report",
    "background_conflicts": "8 by quality_report",
    "pregnancy_pairs_persona_misfit": "12 of 20 male-named (audit); 13 by quality_report (+ Caroline)",
    "distinct_evidence": "diabetes 6, pregnancy 40, debt 9, job_loss 23",
    "max_reuse": "diabetes 7, debt 5, job_loss 2, pregnancy 1",
}


def quality_table(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows (figure, v1, now, goal, met) for notebook 01 / data/README: the issue-10.5 goals."""
    rows = []

    def add(fig: str, now: Any, goal: str, met: bool) -> None:
        rows.append({"figure": fig, "v1": V1_FIGURES.get(fig, ""), "now": now, "goal": goal, "met": met})

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
        "balanced: <= ceil(placements / distinct); 1 within a pair", report["max_reuse_within_pair"] == 1)
    return rows


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
        "evidence_positions_per_pair": dict(sorted(Counter(len(p.meta["evidence_positions"]) for p in build.pairs).items())),
        "evidence_candidates_kept": {a: len(v) for a, v in build.evidence.items()},
        "evidence_kept_by_source": by_src,
        "evidence_rejections": {a: {k: v for k, v in r.items() if k != "kept"} for a, r in build.evidence_reasons.items()},
        "evidence_sentences_used": {a: len({e["M"] for p in build.pairs if p.attribute == a for e in p.meta["evidence"]})
                                    for a in ATTRIBUTES},
        "max_reuse_of_one_evidence_sentence": max(used.values()) if used else 0,
        "pregnancy_speakers": sorted(k for k, v in build.background.items() if v["persona"]["pregnancy_fits"]),
        "background_sentences_kept": sum(v["kept"] for v in build.background.values()),
        "background_by_slot": {g: sum(v["sentences_by_slot"][g] for v in build.background.values())
                               for g in (*SLOT_PRIORITY, "unassigned")},
        "background_dropped_for_conflicts": {a: sum(v["dropped"].get(f"conflicts_{a}", 0) for v in build.background.values())
                                             for a in ATTRIBUTES},
        "background_slot_fallback_positions": sum(v["slot_fallback_positions"] for v in build.background.values()),
    }


# ---- writing (atomic) ----------------------------------------------------------------------------
def write_transfer(build: TransferBuild, data_dir: str | Path = "data") -> Path:
    """Freeze the transfer track under ``data_dir/transfer`` (JSON Lines + manifest with sha256,
    counts and the quality report). The policies are the PairedMem ones (``data_dir/policy``)."""
    target = Path(data_dir) / TRACK

    def fill(d: Path) -> None:
        rows = {
            "pairs.jsonl": dump_jsonl(d / "pairs.jsonl", (pair_to_json(p) for p in build.pairs)),
            "evidence.jsonl": dump_jsonl(d / "evidence.jsonl", (asdict(e) for a in ATTRIBUTES for e in build.evidence[a])),
            "background.jsonl": dump_jsonl(d / "background.jsonl", ({"speaker": k, **v} for k, v in build.background.items())),
            "behaviours.jsonl": dump_jsonl(d / "behaviours.jsonl", (asdict(b) for b in build.behaviours.values())),
        }
        manifest = {"format_version": FORMAT_VERSION, "track": TRACK, "generator": "dpmv_lib.transfer",
                    "params": dict(build.params), "counts": transfer_counts(build),
                    "quality": quality_report(build),
                    "policies": sorted({p.policy_id for p in build.pairs}),
                    "corpora": {k: v for k, v in WHERE.items()},
                    "files": file_entries(d, sorted(rows), rows)}
        dump_json(d / "manifest.json", manifest)

    replace_dir_atomically(target, fill)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpmv_lib.transfer", description="Build the transfer track (C.3).")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--report", action="store_true", help="print the quality report of the committed track")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--corpora-dir", default=None)
    args = ap.parse_args(argv)
    from .datasets import load_benchmark
    from .paths import resolve
    if args.report:
        print(json.dumps(quality_report(load_benchmark("transfer", resolve(args.data_dir))), indent=1))
        return 0
    if not args.build:
        ap.print_help()
        return 0
    t0 = time.perf_counter()
    bench = load_benchmark("pairedmem", resolve(args.data_dir))
    try:
        build = build_transfer(bench.pairs, bench.policies, args.corpora_dir, args.seed, behaviours=bench.behaviours)
    except CorpusError as exc:
        print(f"transfer track skipped: {exc}", file=sys.stderr)
        return 2
    out = write_transfer(build, resolve(args.data_dir))
    print(f"transfer: {len(build.pairs)} pairs -> {out} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
