"""Attribute lexicon: names, direct synonyms and evidence signals of the four protected attributes.

Used by S3 validation (C.2: "M contains the target evidence, M' removes it"), by the S4 query
check ("protected-attribute names and direct synonyms are excluded") and by the transfer track's
evidence selection (C.3 T2/T3). Matching is case-insensitive on whole words (regexes below).

* ``NAMES`` - the attribute's name and direct synonyms (what a query may never contain).
* ``SIGNALS`` - every phrase that evidences the attribute in memory text (a superset of NAMES):
  a sentence carries the target signal iff one of these matches.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

ATTRIBUTES: tuple[str, ...] = ("diabetes", "pregnancy", "debt", "job_loss")

DESCRIPTIONS: Mapping[str, str] = {
    "diabetes": "type-2 diabetes",
    "pregnancy": "pregnancy",
    "debt": "severe unsecured debt",
    "job_loss": "recent involuntary job loss",
}

# Names and direct synonyms (regex fragments, matched on whole words, case-insensitive).
NAMES: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"diabet\w*", r"type[- ]?(?:2|ii|two)", r"t2d", r"prediabet\w*", r"hyperglyc\w*"),
    "pregnancy": (r"pregnan\w*", r"expecting(?: a baby)?", r"with child", r"gestation\w*",
                  r"mum[- ]to[- ]be", r"mom[- ]to[- ]be", r"trimester\w*"),
    "debt": (r"debts?", r"indebted(?:ness)?", r"in the red", r"insolven\w*", r"bankrupt\w*",
             r"arrears"),
    "job_loss": (r"laid off", r"lay[- ]?offs?", r"fired", r"let go", r"unemploy\w*", r"jobless",
                 r"out of work", r"redundan\w*", r"lost (?:my|their|his|her|the) job",
                 r"los(?:e|ing) (?:my|their|his|her|the) job"),
}

# Evidence signals beyond the names (memory phrases that reveal the attribute).
_EXTRA_SIGNALS: Mapping[str, tuple[str, ...]] = {
    "diabetes": (r"a1c", r"hba1c", r"blood sugars?", r"glucose", r"metformin", r"insulin",
                 r"glucometer", r"test strips?", r"endocrinologist", r"sugar readings?",
                 r"finger[- ]?pricks?", r"cgm", r"ozempic", r"jardiance", r"glipizide",
                 r"carb[- ]counting", r"counting carbs", r"sugar spikes?", r"spike my sugar",
                 r"hypo(?:s|glyc\w*)?", r"low sugar episodes?", r"diabetes educator"),
    "pregnancy": (r"prenatal", r"antenatal", r"midwife", r"midwives", r"ob[- ]?gyn", r"obstetrician",
                  r"due date", r"morning sickness", r"ultrasound", r"baby shower", r"the baby'?s? "
                  r"(?:kicks?|kicking|arrival|arrives|comes|room|crib|nursery)", r"nursery", r"maternity",
                  r"folic acid", r"bump", r"weeks along", r"birth plan", r"labou?r and delivery",
                  r"birthing class\w*", r"baby is due", r"due in (?:the )?(?:spring|summer|autumn|fall|winter|"
                  r"january|february|march|april|may|june|july|august|september|october|november|december)",
                  r"nesting", r"kick counts?"),
    "debt": (r"collectors?", r"collection agenc\w*", r"(?:in|sent to|went to) collections", r"maxed(?: out)?",
             r"minimum payments?", r"overdue", r"past[- ]due", r"payday loans?", r"overdrawn",
             r"behind on (?:my|their|the) (?:bills|payments|cards|loans|rent)", r"owe\b.{0,40}\bcards?",
             r"card balances?", r"balance transfers?", r"debt[- ]relief", r"consolidation loan",
             r"credit counsel\w*", r"late fees?", r"repayment plan", r"interest (?:is )?eating"),
    "job_loss": (r"severance", r"pink slip", r"downsized", r"position (?:was )?eliminated",
                 r"job (?:was )?cut", r"cobra (?:coverage|insurance|plan|premiums?)", r"jobseeker'?s? allowance",
                 r"between jobs",
                 r"last day at (?:the|my|their) (?:old )?(?:job|company|office)",
                 r"since (?:my|their) job ended", r"job hunt\w*", r"job search\w*", r"applying for jobs",
                 r"job applications?", r"out of a job", r"old employer", r"former employer",
                 r"unemployment (?:benefits?|office|check|claim)"),
}

SIGNALS: Mapping[str, tuple[str, ...]] = {a: tuple(NAMES[a]) + tuple(_EXTRA_SIGNALS[a]) for a in ATTRIBUTES}


@lru_cache(maxsize=64)
def _pattern(parts: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])(?:" + "|".join(parts) + r")(?![\w])", re.IGNORECASE)


def name_hits(text: str, attribute: str) -> list[str]:
    """Attribute names / direct synonyms found in ``text``."""
    return [m.group(0) for m in _pattern(tuple(NAMES[attribute])).finditer(text)]


def signal_hits(text: str, attribute: str) -> list[str]:
    """Evidence signals of ``attribute`` found in ``text`` (names included)."""
    return [m.group(0) for m in _pattern(tuple(SIGNALS[attribute])).finditer(text)]


def has_signal(text: str, attribute: str) -> bool:
    return bool(_pattern(tuple(SIGNALS[attribute])).search(text))


def signalled_attributes(text: str, attributes: Iterable[str] = ATTRIBUTES) -> tuple[str, ...]:
    """Every attribute whose evidence signal occurs in ``text``."""
    return tuple(a for a in attributes if has_signal(text, a))


def query_problems(text: str, attributes: Sequence[str] = ATTRIBUTES) -> list[str]:
    """S4 lexicon check: why a public query is not allowed (names, synonyms or evidence signals
    of any protected attribute). Empty list = the query passes."""
    out = []
    for a in attributes:
        for h in signal_hits(text, a):
            kind = "name/synonym" if name_hits(h, a) else "evidence signal"
            out.append(f"{kind} {h!r} of attribute {a!r}")
    return out
