"""OutputFilter: post-generation deletion of explicit protected labels and sensitive-state
phrases (paper Table 8: "Generates from the RawReadSet input and then deletes explicit protected
labels and sensitive-state phrases").

The filter is a generic post-generation control: it sees only the response text, never the
memory or the store label. It deletes every listed phrase (case-insensitive, whole words,
longest phrase first) and tidies the whitespace and punctuation the deletions leave behind.
``mode="sentence"`` instead drops each sentence that contains a listed phrase.

The deletion lexicon is fixed and public: per attribute, the explicit labels (the attribute's
name and direct synonyms) and sensitive-state phrases (statements or markers of the state, such
as medications or collection calls). Where the data package ships ``dpmv_lib.lexicon`` with
attribute names and synonyms, those phrases are added to this list.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from .errors import ParameterError

# Explicit protected labels: the attribute named directly or by a direct synonym.
PROTECTED_LABELS: dict[str, tuple[str, ...]] = {
    "diabetes": ("type 2 diabetes", "type-2 diabetes", "type ii diabetes", "t2d", "diabetes",
                 "diabetic", "prediabetes", "pre-diabetes", "prediabetic"),
    "pregnancy": ("pregnancy", "pregnant", "expecting a baby", "expecting", "with child",
                  "mom-to-be", "mother-to-be", "parent-to-be"),
    "debt": ("severe unsecured debt", "unsecured debt", "debt", "debts", "indebted",
             "in the red", "over my head in debt"),
    "job_loss": ("job loss", "lost your job", "lost my job", "laid off", "layoff", "lay-off",
                 "unemployed", "unemployment", "jobless", "out of work", "let go", "fired",
                 "redundancy", "made redundant"),
}

# Sensitive-state phrases: markers that state or strongly imply the protected state.
SENSITIVE_STATE_PHRASES: dict[str, tuple[str, ...]] = {
    "diabetes": ("blood sugar", "blood-sugar", "blood glucose", "glucose", "a1c", "hba1c",
                 "metformin", "insulin", "glucose monitor", "glucometer", "sugar levels",
                 "carb counting", "endocrinologist"),
    "pregnancy": ("prenatal", "pre-natal", "trimester", "due date", "ob-gyn", "obgyn", "midwife",
                  "morning sickness", "baby bump", "maternity", "prenatal vitamins", "ultrasound",
                  "the baby"),
    "debt": ("maxed out", "maxed", "minimum payments", "minimum payment", "collector",
             "collectors", "collection agency", "collections", "overdue balance", "past due",
             "payday loan", "payday loans", "debt payoff", "debt-payoff", "credit card balance",
             "bankruptcy"),
    "job_loss": ("severance", "unemployment benefits", "job hunt", "job search", "job-search",
                 "between jobs", "income gap", "income-gap", "lost income", "no paycheck",
                 "final paycheck", "jobseeker", "job seeker"),
}


def _lexicon_extras() -> dict[str, tuple[str, ...]]:
    """Attribute names/synonyms from ``dpmv_lib.lexicon`` if the data package provides them."""
    try:
        from . import lexicon  # type: ignore[attr-defined]
    except Exception:  # the data module is optional; the built-in lexicon stands alone
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for name in ("ATTRIBUTE_SYNONYMS", "SYNONYMS", "ATTRIBUTE_TERMS", "FORBIDDEN_TERMS"):
        table = getattr(lexicon, name, None)
        if isinstance(table, Mapping):
            for attr, words in table.items():
                if isinstance(words, str):
                    words = (words,)
                try:
                    out[str(attr)] = tuple(out.get(str(attr), ())) + tuple(str(w) for w in words)
                except TypeError:
                    continue
    return out


def default_phrases(attributes: Iterable[str] | None = None) -> tuple[str, ...]:
    """The fixed deletion list (labels + sensitive-state phrases), for all or some attributes."""
    extras = _lexicon_extras()
    attrs = list(attributes) if attributes is not None else sorted(
        set(PROTECTED_LABELS) | set(SENSITIVE_STATE_PHRASES) | set(extras))
    phrases: set[str] = set()
    for a in attrs:
        phrases.update(PROTECTED_LABELS.get(a, ()))
        phrases.update(SENSITIVE_STATE_PHRASES.get(a, ()))
        phrases.update(extras.get(a, ()))
    phrases = {p.strip().lower() for p in phrases if p and p.strip()}
    return tuple(sorted(phrases, key=lambda p: (-len(p), p)))


_SENT_RE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class DeletionFilter:
    """Deletes listed phrases from a response (OutputFilter's post-generation step)."""

    phrases: tuple[str, ...] = field(default_factory=default_phrases)
    mode: str = "phrase"   # "phrase" deletes the phrase; "sentence" drops the whole sentence

    def __post_init__(self) -> None:
        if self.mode not in ("phrase", "sentence"):
            raise ParameterError(f"DeletionFilter mode must be 'phrase' or 'sentence', got {self.mode!r}")
        if not self.phrases or not all(isinstance(p, str) and p.strip() for p in self.phrases):
            raise ParameterError("DeletionFilter needs a non-empty list of non-empty phrases")

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        ordered = sorted({p.lower() for p in self.phrases}, key=lambda p: (-len(p), p))
        alts = "|".join(re.escape(p) for p in ordered)
        # whole words: no letter/digit directly before or after a listed phrase
        return re.compile(r"(?<![\w])(?:" + alts + r")(?![\w])", re.IGNORECASE)

    def matches(self, text: str) -> list[str]:
        """The listed phrases found in ``text`` (lower-cased, in order of occurrence)."""
        return [m.group(0).lower() for m in self.pattern.finditer(text)]

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self.mode == "sentence":
            kept = [s for s in _SENT_RE.split(text) if not self.pattern.search(s)]
            return " ".join(kept).strip()
        out = self.pattern.sub("", text)
        return _tidy(out)


def _tidy(text: str) -> str:
    """Clean up what deletions leave: doubled spaces, space before punctuation, empty brackets."""
    text = re.sub(r"\(\s*\)|\[\s*\]|\"\s*\"", "", text)
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = re.sub(r" +([,.;:!?])", r"\1", text)
    text = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", text)
    text = re.sub(r"(^|[.!?]\s+)[,;:]\s*", r"\1", text)
    text = re.sub(r"(^|\s)-(?=\w)", r"\1", text)  # dangling hyphen: "blood-sugar-conscious" -> "conscious"
    text = re.sub(r"(?<=\w)-(?=\s|$)", "", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()
