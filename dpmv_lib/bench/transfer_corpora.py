"""Transfer track inputs (paper C.3): the public corpora it reads (LoCoMo speaker histories,
EmpatheticDialogues prompts, LiveQA and GenMedGPT-5k patient messages, the patient text of
first_person_health/ and the money posts of first_person_finance/), the kind of text each
source is (:data:`KIND_OF_SOURCE`), and a :class:`~dpmv_lib.core.errors.CorpusError` naming every
missing folder and file and where to get it. Overview in :mod:`dpmv_lib.bench.transfer`.
"""
from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from . import lexicon
from ..core.errors import CorpusError
from ..common.paths import default_corpora_dir


TRACK = "transfer"
FORMAT_VERSION = 3
ATTRIBUTES = lexicon.ATTRIBUTES
HOME_SLOT: Mapping[str, str] = {"diabetes": "health", "pregnancy": "health", "debt": "finance", "job_loss": "work"}
MIN_DISTINCT_EVIDENCE = 25    # goal: distinct evidence sentences per attribute
MAX_EVIDENCE_REUSE = 4        # no evidence sentence in more than this many evidence slots
LOCOMO_FILES = tuple(f"locomo/{n}.json" for n in (26, 30, 41, 42, 43, 44, 47, 48, 49, 50))
ED_FILES = ("empathetic_dialogues/prompts_valid.csv", "empathetic_dialogues/prompts_test.csv",
            "empathetic_dialogues/prompts_train_lowercased.csv")
LIVEQA_FILES = ("medical_questions/liveqa/TREC-2017-LiveQA-Medical-Train-1.xml",
                "medical_questions/liveqa/TREC-2017-LiveQA-Medical-Train-2.xml",
                "medical_questions/liveqa/TREC-2017-LiveQA-Medical-Test.xml")
GENMED_FILE = "medical_questions/genmedgpt5k/chatdoctor5k.json"
ICLINIQ_FILE = "first_person_health/icliniq_2k/train_2kchat.jsonl"
MEQSUM_FILE = "first_person_health/meqsum/MeQSum_ACL2019.csv"
ACI_FILES = tuple(f"first_person_health/aci_bench/{n}.csv" for n in (
    "train", "valid", "clinicalnlp_taskB_test1", "clinicalnlp_taskC_test2", "clef_taskC_test3"))
MTS_FILES = tuple(f"first_person_health/mts_dialog/MTS-Dialog-{n}.csv" for n in (
    "TrainingSet", "ValidationSet", "TestSet-1-MEDIQA-Chat-2023", "TestSet-2-MEDIQA-Sum-2023"))
DREADDIT_FILES = ("first_person_finance/dreaddit/dreaddit-train.csv", "first_person_finance/dreaddit/dreaddit-test.csv")
SDCNL_FILES = ("first_person_finance/sdcnl/training-set.csv", "first_person_finance/sdcnl/testing-set.csv")
CAMS_FILE = "first_person_finance/cams/added_CAMS_data.csv"
SAD_FILE = "first_person_finance/sad/SAD_v1.csv"
HEALTH_FILES: tuple[str, ...] = (ICLINIQ_FILE, MEQSUM_FILE, *ACI_FILES, *MTS_FILES)
FINANCE_FILES: tuple[str, ...] = (*DREADDIT_FILES, *SDCNL_FILES, CAMS_FILE, SAD_FILE)
REQUIRED_FILES: tuple[str, ...] = (*LOCOMO_FILES, *ED_FILES, *LIVEQA_FILES, GENMED_FILE, *HEALTH_FILES, *FINANCE_FILES)
WHERE = {
    "locomo": "LoCoMo (snap-research/locomo, data/locomo10.zip, one JSON per conversation)",
    "empathetic_dialogues": "EmpatheticDialogues situation prompts (HenryPengZou/JointMatch data/empatheticdialogues "
                            "dev/test -> prompts_valid.csv/prompts_test.csv; dinobby/HypEmo data/ED/train.csv -> "
                            "prompts_train_lowercased.csv)",
    "medical_questions/liveqa": "TREC 2017 LiveQA medical task XML (abachaa/LiveQA_MedicalTask_TREC2017)",
    "medical_questions/genmedgpt5k": "GenMedGPT-5k (Kent0n-Li/ChatDoctor, chatdoctor5k.json)",
    "first_person_health/icliniq_2k": ("iCliniq-style patient questions "
                                       "(Om-Tiwari/GraphRAG-chatDoctor, train_2kchat.jsonl)"),
    "first_person_health/meqsum": "MeQSum consumer health questions (abachaa/MeQSum, xlsx -> MeQSum_ACL2019.csv)",
    "first_person_health/aci_bench": "ACI-Bench visit transcripts (wyim/aci-bench, data/challenge_data/*.csv)",
    "first_person_health/mts_dialog": "MTS-Dialog conversations (abachaa/MTS-Dialog, Main-Dataset/*.csv)",
    "first_person_finance/dreaddit": "Dreaddit post segments, debt-trimmed (rradulov/dreaddit, raw_data/*.csv)",
    "first_person_finance/sdcnl": "SDCNL posts, debt-trimmed (ayaanzhaque/SDCNL, data/*-set.csv)",
    "first_person_finance/cams": "CAMS posts, debt-trimmed (drmuskangarg/CAMS, CAMS/data/added_CAMS_data.csv)",
    "first_person_finance/sad": ("SAD stress sentences "
                                 "(PervasiveWellbeingTech/Stress-Annotated-Dataset-SAD, SAD_v1.zip -> SAD_v1.csv)"),
}
# ---- source kinds: what kind of text each source tag is; real text is preferred
SOURCE_KINDS: tuple[str, ...] = ("real patient question", "real forum post", "role-played dialogue",
                                 "annotator-written dialogue", "crowd-written", "machine-generated")
KIND_OF_SOURCE: Mapping[str, str] = {
    "liveqa": "real patient question", "meqsum": "real patient question", "icliniq": "real patient question",
    "dreaddit": "real forum post", "sdcnl": "real forum post", "cams": "real forum post",
    "sad-livejournal": "real forum post",
    "aci-bench": "role-played dialogue", "mts-dialog": "annotator-written dialogue",
    "ed-valid": "crowd-written", "ed-test": "crowd-written", "ed-train": "crowd-written", "sad-mturk": "crowd-written",
    "genmed": "machine-generated",
}


def source_kind(source: str) -> str:
    """The kind of text a source tag holds (one of SOURCE_KINDS); CorpusError for an unknown tag."""
    try:
        return KIND_OF_SOURCE[source]
    except KeyError:
        raise CorpusError(f"unknown evidence source {source!r}; known: {sorted(KIND_OF_SOURCE)}") from None


# =============================================================================================
# corpus readers
# =============================================================================================
def check_corpora(corpora_dir: str | Path | None = None) -> Path:
    """The corpora directory, or CorpusError naming every missing file and where to get it."""
    root = Path(corpora_dir) if corpora_dir is not None else default_corpora_dir()
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        sources = sorted({WHERE[k] for f in missing for k in WHERE if f.startswith(k)})
        folders = sorted({k.split("/")[0] if not (root / k.split("/")[0]).is_dir() else k
                          for k in WHERE if not (root / k).is_dir()})
        absent = f"absent folders: {', '.join(f + '/' for f in folders)}; " if folders else ""
        raise CorpusError(
            f"the transfer track needs public corpus files under {root} (set corpora_dir or DPMV_CORPORA); "
            f"{absent}missing: {', '.join(missing)}. Get them from: " + "; ".join(sources)
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
    source: str   # a tag of KIND_OF_SOURCE: "ed-valid", "liveqa", "genmed", "icliniq", "dreaddit", ...
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
            out.append(SourceText("ed-train", f"ed-train:{k}",
                                  _restore_case(r["text"].replace("_comma_", ",").strip())))
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


def _tidy(text: str) -> str:
    """Whitespace-normalised text with lines as sentence breaks (a line without final punctuation
    gets a full stop), a space after sentence punctuation glued to the next word, and the pronoun
    'I' restored where a writer typed 'i' (case and spacing only: the words are the writer's)."""
    lines = [" ".join(ln.split()) for ln in str(text).splitlines()]
    t = " ".join(ln if ln[-1] in ".!?:;," else ln + "." for ln in lines if ln)
    t = re.sub(r"\bi\b", "I", t)
    return re.sub(r"(?<=[a-z][.!?,])(?=[A-Z])", " ", t)


def _csv_rows(root: Path, f: str) -> list[dict[str, str]]:
    try:
        with (root / f).open(encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CorpusError(f"cannot read {root / f}: {exc}") from None


def _turns(dialogue: str, speaker: str) -> list[str]:
    """The turns of one speaker in a transcript whose lines start with a speaker tag."""
    out, cur = [], None
    for ln in dialogue.splitlines():
        m = re.match(r"\s*(\[\w+\]|\w[\w_ ]{0,20}:)\s*(.*)", ln)
        if m:
            cur = m.group(2) if m.group(1).strip("[]:").lower() == speaker else None
            if cur is not None:
                out.append(cur)
        elif cur is not None and ln.strip() and out:
            out[-1] += " " + ln.strip()
    return out


def read_health(corpora_dir: str | Path | None = None) -> list[SourceText]:
    """First-person patient text (first_person_health/): iCliniq-style and MeQSum questions (real),
    ACI-Bench patient turns (role-played), MTS-Dialog patient turns (annotator-written)."""
    root = check_corpora(corpora_dir)
    out = []
    try:
        lines = (root / ICLINIQ_FILE).read_text(encoding="utf-8").splitlines()
        for k, ln in enumerate(lines):
            if ln.strip():
                msgs = [m["content"] for c in json.loads(ln)["chat"] for m in c["input"] if m.get("role") == "user"]
                out.append(SourceText("icliniq", f"icliniq:{k}", _tidy(" ".join(msgs))))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CorpusError(f"cannot read {root / ICLINIQ_FILE}: {exc}") from None
    for r in _csv_rows(root, MEQSUM_FILE):
        chq = re.sub(r"^\s*SUBJECT:.*?(?:\n|$)", "", r["CHQ"], count=1) if "MESSAGE:" in r["CHQ"] else r["CHQ"]
        out.append(SourceText("meqsum", f"meqsum:{r['File']}", _tidy(chq.replace("MESSAGE:", ""))))
    for f in ACI_FILES:
        for r in _csv_rows(root, f):
            for j, t in enumerate(_turns(r["dialogue"], "patient")):
                t = re.sub(r"\s+([,.?!;:])", r"\1", re.sub(r"\s+(?='|n't\b)", "", t))
                out.append(SourceText("aci-bench", f"aci-bench:{Path(f).stem}:{r['encounter_id']}:{j}",
                                      _restore_case(_tidy(t))))
    for f in MTS_FILES:
        for r in _csv_rows(root, f):
            for j, t in enumerate(_turns(r["dialogue"], "patient")):
                out.append(SourceText("mts-dialog", f"mts-dialog:{Path(f).stem.split('-', 2)[-1]}:{r['ID']}:{j}",
                                      _tidy(t)))
    return out


def read_finance(corpora_dir: str | Path | None = None) -> list[SourceText]:
    """First-person money text (first_person_finance/): Dreaddit, SDCNL and CAMS Reddit posts (real;
    SDCNL/CAMS are mental-health posts: only single sentences are ever used), SAD sentences
    (LiveJournal: real; mTurk: crowd-written; chatbot logs are not read)."""
    root = check_corpora(corpora_dir)
    out = []
    for f in DREADDIT_FILES:
        split = Path(f).stem.split("-")[-1]
        for r in _csv_rows(root, f):
            out.append(SourceText("dreaddit", f"dreaddit:{split}:{r['id']}", _tidy(r["text"])))
    for f in SDCNL_FILES:
        split = Path(f).stem.split("-")[0]
        for k, r in enumerate(_csv_rows(root, f)):
            for col in ("title", "selftext"):
                if r.get(col, "").strip():
                    out.append(SourceText("sdcnl", f"sdcnl:{split}:{k}:{col}", _tidy(r[col])))
    for k, r in enumerate(_csv_rows(root, CAMS_FILE)):
        out.append(SourceText("cams", f"cams:{k}", _tidy(r["selftext"])))
    for r in _csv_rows(root, SAD_FILE):
        src = r["Source"]
        tag = "sad-livejournal" if src.startswith("Inquire") else "sad-mturk" if src.startswith("mTurk") else ""
        if tag:
            out.append(SourceText(tag, f"{tag}:{r['sID']}", _tidy(r["sentence"])))
    return out


# =============================================================================================
# T2/T3: evidence rules, the reviewed allow-list, M' checks
# =============================================================================================
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
