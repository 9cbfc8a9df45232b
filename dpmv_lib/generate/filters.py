"""OutputFilter: post-generation deletion of explicit protected labels and sensitive-state
phrases (paper Table 8: "Generates from the RawReadSet input and then deletes explicit protected
labels and sensitive-state phrases").

The filter is a generic post-generation control: it sees only the response text, never the
memory or the store label. It deletes every listed phrase (case-insensitive, whole words,
longest phrase first) and tidies the whitespace and punctuation the deletions leave behind.
``mode="sentence"`` instead drops each sentence that contains a listed phrase.

The deletion lexicon is fixed and public: per attribute, the explicit labels (the attribute's
name and direct synonyms: ``dpmv_lib.bench.lexicon.NAMES``) and sensitive-state phrases (markers of
the state such as medications or collection calls: ``dpmv_lib.bench.lexicon.SIGNALS``, the same
lexicon the data validation uses), plus response-side phrasings listed here ("lost your job",
"blood-sugar", "prenatal", ...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable

from ..core.errors import ParameterError

# Response-side phrases (literal, whole words): how a response states or echoes the protected
# state, beyond the memory-side lexicon of ``dpmv_lib.bench.lexicon``.
PROTECTED_LABELS: dict[str, tuple[str, ...]] = {
    "diabetes": ("type 2 diabetes", "type-2 diabetes", "diabetes", "diabetic", "prediabetes",
                 "pre-diabetes"),
    "pregnancy": ("pregnancy", "pregnant", "expecting a baby", "mom-to-be", "mother-to-be",
                  "parent-to-be"),
    "debt": ("severe unsecured debt", "unsecured debt", "debt", "debts", "indebted"),
    "job_loss": ("job loss", "lost your job", "lost my job", "laid off", "layoff", "unemployed",
                 "unemployment", "jobless", "out of work"),
}
SENSITIVE_STATE_PHRASES: dict[str, tuple[str, ...]] = {
    "diabetes": ("blood sugar", "blood-sugar", "blood glucose", "glucose", "a1c", "insulin",
                 "metformin", "sugar levels", "carb counting"),
    "pregnancy": ("prenatal", "pre-natal", "trimester", "due date", "ob-gyn", "midwife",
                  "morning sickness", "the baby", "pregnancy-safe"),
    "debt": ("maxed out", "minimum payments", "collector", "collectors", "collections",
             "past due", "payday loan", "debt payoff", "debt-payoff", "credit card balance"),
    "job_loss": ("severance", "unemployment benefits", "job hunt", "job search", "job-search",
                 "between jobs", "income gap", "income-gap", "lost income", "no paycheck"),
}


def default_patterns(attributes: Iterable[str] | None = None) -> tuple[str, ...]:
    """The fixed deletion list as regex fragments: the shared lexicon's names/synonyms
    (``lexicon.NAMES``) and evidence signals (``lexicon.SIGNALS``), plus the response-side
    labels and sensitive-state phrases above (escaped literals)."""
    try:
        from ..bench import lexicon
        names, signals = dict(lexicon.NAMES), dict(lexicon.SIGNALS)
    except ImportError:  # the data package's lexicon is optional here
        names, signals = {}, {}
    attrs = list(attributes) if attributes is not None else sorted(
        set(PROTECTED_LABELS) | set(SENSITIVE_STATE_PHRASES) | set(names) | set(signals))
    out: set[str] = set()
    for a in attrs:
        out.update(names.get(a, ()))
        out.update(signals.get(a, ()))
        out.update(re.escape(p.lower()) for p in PROTECTED_LABELS.get(a, ()))
        out.update(re.escape(p.lower()) for p in SENSITIVE_STATE_PHRASES.get(a, ()))
    return tuple(sorted(out, key=lambda p: (-len(p), p)))


_SPLIT_KEEP_RE = re.compile(r"(?<=[.!?])(\s+)")


@dataclass(frozen=True)
class DeletionFilter:
    """Deletes listed phrases (regex fragments, whole words) from a response: OutputFilter's
    post-generation step."""

    patterns: tuple[str, ...] = field(default_factory=default_patterns)
    mode: str = "phrase"   # "phrase" deletes the phrase; "sentence" drops the whole sentence
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("phrase", "sentence"):
            raise ParameterError(f"DeletionFilter mode must be 'phrase' or 'sentence', got {self.mode!r}")
        if not self.patterns or not all(isinstance(p, str) and p.strip() for p in self.patterns):
            raise ParameterError("DeletionFilter needs a non-empty list of non-empty phrases")
        try:
            self.pattern  # noqa: B018 - compiles the (cached) pattern to validate it
        except re.error as exc:
            raise ParameterError(f"DeletionFilter phrase list is not a valid regex: {exc}") from None

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        # longest alternatives first; no letter/digit directly before or after a listed phrase
        alts = "|".join(sorted(set(self.patterns), key=lambda p: (-len(p), p)))
        return re.compile(r"(?<![\w])(?:" + alts + r")(?![\w])", re.IGNORECASE)

    def __call__(self, text: str) -> str:
        """Filter ``text`` sentence by sentence (phrases never span sentences); filtered
        sentences are memoised, since responses reuse sentences."""
        if not text:
            return text
        parts = _SPLIT_KEEP_RE.split(text)  # [sentence, separator, sentence, ...]
        memo = self._memo
        out = []
        for k, part in enumerate(parts):
            if k % 2:
                out.append(part)
                continue
            got = memo.get(part)
            if got is None:
                if len(memo) > 200_000:
                    memo.clear()
                got = memo[part] = self._filter_sentence(part)
            out.append(got)
        if self.mode == "sentence":
            return " ".join(x for x in out[::2] if x).strip()
        return _tidy_joined("".join(out))

    def _filter_sentence(self, sentence: str) -> str:
        if self.mode == "sentence":
            return "" if self.pattern.search(sentence) else sentence
        return _tidy(self.pattern.sub("", sentence))


def _tidy_joined(text: str) -> str:
    """After joining filtered sentences: drop the gaps that emptied sentences leave."""
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


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
