"""Transfer track inputs (paper C.3): the public corpora it reads (LoCoMo speaker histories,
EmpatheticDialogues prompts, LiveQA and GenMedGPT-5k patient messages), with a
:class:`~dpmv_lib.core.errors.CorpusError` naming every missing file and where to get it.
Overview in :mod:`dpmv_lib.bench.transfer`.
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
