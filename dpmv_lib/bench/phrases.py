"""Text realisation helpers for PairedMem S2 (template realiser) and the phrase-bank statistics.

Clauses in :mod:`dpmv_lib.bench.phrasebank` are first person with ``{a|b}`` alternatives. The realiser
picks alternatives with seeded choice indices (the same indices for M and M' at one position, so
paired sentences keep their structure), converts to a third-person memory note when the spec's
style says so, and wraps the clause in a seeded frame. Deterministic given its inputs.
"""
from __future__ import annotations

import itertools
import re
from typing import Sequence

_ALT = re.compile(r"\{([^{}]*)\}")

STYLES: tuple[str, ...] = ("first", "third")

# Frames per style; ``{c}`` is the clause (capitalised where it starts the sentence). Two words
# at most, so no frame forms a frequent 5-gram with the clause start.
FRAMES: dict[str, tuple[str, ...]] = {
    "first": ("{C}.", "{C}.", "{C}.", "Note: {c}.", "FYI, {c}.", "Reminder: {c}.", "Context: {c}.",
              "Update: {c}.", "Btw, {c}.", "Heads-up: {c}."),
    "third": ("{C}.", "{C}.", "Noted: {c}.", "Memory: {c}.", "Saved: {c}.", "From chat: {c}.",
              "User note: {c}.", "Earlier: {c}.", "Context: {c}.", "Recalled: {c}."),
}
_THIRD = [
    (r"\bI'm\b", "they're"), (r"\bI've\b", "they've"), (r"\bI'd\b", "they'd"), (r"\bI'll\b", "they'll"),
    (r"\bI am\b", "they are"), (r"\bI was\b", "they were"), (r"\bI\b", "they"),
    (r"\bwe're\b", "they're"), (r"\bwe've\b", "they've"), (r"\bwe\b", "they"),
    (r"\bmy\b", "their"), (r"\bMy\b", "Their"), (r"\bmine\b", "theirs"), (r"\bmyself\b", "themselves"),
    (r"\bme\b", "them"), (r"\bour\b", "their"), (r"\bus\b", "them"),
]
_THIRD_RE = [(re.compile(p), r) for p, r in _THIRD]


def n_alternatives(template: str) -> int:
    """Number of ``{a|b}`` groups in a clause template."""
    return len(_ALT.findall(template))


def expand(template: str, choices: Sequence[int]) -> str:
    """Pick one option per ``{a|b}`` group: group j takes option ``choices[j] % len(options)``."""
    j = 0

    def pick(m: re.Match[str]) -> str:
        nonlocal j
        opts = m.group(1).split("|")
        c = choices[j % len(choices)] if choices else 0
        j += 1
        return opts[c % len(opts)]

    return _ALT.sub(pick, template)


def all_expansions(template: str) -> list[str]:
    """Every realisation of a clause template (for bank checks and statistics)."""
    parts = _ALT.split(template)
    opts = [[x] if i % 2 == 0 else x.split("|") for i, x in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*opts)]


def third_person(clause: str) -> str:
    """First-person clause -> third-person memory-note clause (they/their)."""
    out = clause
    for pat, rep in _THIRD_RE:
        out = pat.sub(rep, out)
    return out


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def render(clause: str, style: str, frame: int) -> str:
    """Wrap a (possibly joined) first-person clause into a memory sentence of ``style``."""
    if style not in FRAMES:
        raise ValueError(f"unknown memory style {style!r}; use one of {STYLES}")
    c = third_person(clause) if style == "third" else clause
    f = FRAMES[style][frame % len(FRAMES[style])]
    return f.format(c=c, C=_cap(c))
