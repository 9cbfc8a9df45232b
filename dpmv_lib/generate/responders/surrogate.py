"""The surrogate response model: a seeded, stochastic text generator used as an instrument.

It is NOT a claim about how LLMs behave; it is a transparent stand-in that lets every table run
on a laptop CPU, and every table says which responder produced it. It sees only what an
interface passes (the query and the conditioning text, as rendered by the prompt builder) and
the public policy's view vocabulary (view texts and cue lexicons, which are public). It never
sees a method name, a store label or any memory that was not passed.

Rules (all decisions are Bernoulli/choice draws; each draw is a hash of the prompt key
(pair id, turn, seed) and a decision tag, so the randomness does NOT depend on the store: the
same conditioning gives the same response under M and M', and a line that appears on both
sides gets the same treatment on both sides):

R1 Opening: one opening sentence from a fixed bank.
R2 View guidance (lines under "Response guidance:"): each line that equals a policy view text is
   followed with probability ``p_follow_view``, in one of several phrasings of that view
   (templates around the view text, plus ``phrasings`` listed for the view in the policy file
   if any). Unknown guidance lines are followed the same way as free text.
R3 Memory notes (lines under "Notes from the user's memory:"): the surrogate personalises from
   cues it finds, as an LLM would. A *strong* cue is a full cue phrase of a non-generic view
   (whole words); a *weak* cue is a content word of a cue phrase, or a word sharing its first
   five letters (e.g. "budgeting" for "budget"). A view with strong cues is followed with
   probability ``p_follow_strong``, and the cue is echoed back ("Since you mentioned X, ...")
   with probability ``p_echo``; a view with only weak cues is followed with probability
   ``p_follow_weak`` (over-reach). When a view is followed from memory, each *related* view
   (same slot, sharing a public intent) is also followed with probability ``p_related``
   (over-reach on related non-target cues: the source of unsupported personalisation). Like an
   LLM it focuses on the query's topic: the slots whose topic words (``TOPIC_WORDS`` for common
   slot names, plus the words of the policy's public intent names routed to each slot) occur
   most in the query; views of other slots are followed with probability multiplied by
   ``p_offtopic``. At most ``max_personalised`` views are followed per response, on-topic first.
R4 Placeholders: a memory line holding a bracketed placeholder (e.g. "[withheld food detail]")
   yields, with probability ``p_awkward``, an awkward sentence that repeats the placeholder
   (at most two per response); placeholders give nothing to personalise from.
R5 Body and closing: one generic advice sentence when nothing was personalised or followed
   (else with probability 0.5), and a closing sentence with probability 0.5.
R6 Output limit: the response is cut to ``decoding.max_new_tokens`` whitespace tokens.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from ...core.errors import ParameterError
from ...core.policy import Policy, View
from .base import DecodingConfig, Prompt, Responder

SURROGATE_VERSION = "surrogate-v1"

OPENINGS = (
    "Happy to help with that.",
    "Good question - here is what I would suggest.",
    "Here is a practical way to approach it.",
    "Sure, let's keep this practical.",
    "Here is a simple plan.",
    "Glad you asked; a few ideas follow.",
)
VIEW_TEMPLATES = (
    "{T}",
    "My suggestion: {t}",
    "I'd {t}",
    "A good approach here: {t}",
    "With that in mind, {t}",
    "The key point: {t}",
)
ECHO_TEMPLATES = (
    "Since you mentioned {cue}, {t}",
    "Given your note about {cue}, {t}",
    "Because you noted \"{cue}\", {t}",
)
AWKWARD_TEMPLATES = (
    "I see a note marked {ph}; I'll leave that aside.",
    "Some details ({ph}) were withheld, so I'll keep this general.",
    "Not knowing what {ph} refers to, I can't tailor this much.",
    "Regarding {ph}, I don't have enough to go on.",
)
GENERIC_BODY = (
    "Start with one small, concrete step and build from there.",
    "Keep it simple so it is easy to stick with.",
    "Plan a little ahead so the choice is easy in the moment.",
    "Check what you already have before adding anything new.",
    "Pick the option that fits your week and adjust as you go.",
    "Write down the plan so you can see what works.",
)
CLOSINGS = (
    "Let me know if you want more detail.",
    "Happy to adjust this if your plans change.",
    "Tell me how it goes and we can refine it.",
    "I can break any of this down further.",
)
STOPWORDS = frozenset("""a an and are as at be by for from has have i in is it its my of on or that the
this to was were with you your me our we they them he she his her their not no can only up out
about into over just very so than then there here what when how all any each more most some such
""".split())
# Topic words per common slot name: how the surrogate, like an LLM, tells what a query is about.
# Slots of any policy also get the words of their routed intents' names and their view texts.
TOPIC_WORDS: dict[str, tuple[str, ...]] = {
    "food": ("food", "meal", "meals", "dinner", "lunch", "breakfast", "breakfasts", "snack", "cook", "cooking",
             "recipe", "kitchen", "grocery", "groceries", "restaurant", "eat", "eating", "herbs", "staples",
             "menu", "pan", "cooker", "freezing", "bread", "vegetables", "takeaway", "leftovers",
             "supermarket", "fridge"),
    "finance": ("money", "budget", "spend", "spending", "overspending", "save", "savings", "saving", "bill",
                "bills", "payment", "payments", "bank", "banking", "tax", "taxes", "purchase", "buy", "gift",
                "gifts", "afford", "aside", "expenses", "car", "price", "cost"),
    "fitness": ("fitness", "workout", "workouts", "exercise", "run", "runs", "running", "stretch", "gym",
                "sport", "sports", "strength", "training", "active", "activity", "yoga", "movement", "move"),
    "health": ("health", "doctor", "sleep", "stress", "tired", "energy", "supplement", "supplements", "vitamin",
               "multivitamin", "eye", "eyes", "aid", "checkup", "appointment", "wellness", "medical",
               "physical", "calming", "drained", "slump", "tense", "unwind", "overwhelmed", "waking",
               "bedtime", "screen", "relax"),
    "work": ("work", "inbox", "email", "emails", "messages", "meeting", "meetings", "agenda", "career", "desk",
             "commute", "network", "networking", "contacts", "colleague", "colleagues", "boss", "job",
             "office", "priorities", "productive", "workday", "professional", "professionally", "skills",
             "team", "presenting", "linkedin", "goals"),
    "schedule": ("schedule", "routine", "morning", "mornings", "weekend", "holiday", "travel", "trip",
                 "journey", "chores", "laundry", "reading", "books", "sunday", "saturday", "evening",
                 "calendar", "weekdays", "leave", "break", "winter", "summer"),
}
# Words of intent names too generic to say which slot a query is about.
GENERIC_INTENT_WORDS = frozenset("tips plan plans planning ideas idea advice prep list routine weekly time "
                                 "levels out big home good".split())
_PLACEHOLDER_RE = re.compile(r"\[[^\[\]]{1,60}\]")
_WORD_RE = re.compile(r"[a-z0-9']+")


@dataclass(frozen=True)
class _ViewCues:
    view: View
    strong: tuple[re.Pattern[str], ...]
    strong_text: tuple[str, ...]
    weak_words: frozenset[str]
    weak_prefixes: tuple[str, ...]


def _stem(word: str) -> str:
    return word[:5] if len(word) >= 5 else word


def _lc_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text else text


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?" else text + "."


class SurrogateResponder(Responder):
    """Seeded stochastic surrogate (see the module docstring for its rules R1-R6)."""

    backend = "surrogate"

    def __init__(self, policies: Policy | Iterable[Policy], decoding: DecodingConfig | None = None, *,
                 name: str = "surrogate", p_follow_view: float = 0.95, p_follow_strong: float = 0.85,
                 p_follow_weak: float = 0.3, p_echo: float = 0.5, p_related: float = 0.15,
                 p_awkward: float = 0.7, p_offtopic: float = 0.2, max_personalised: int = 3, salt: int = 0) -> None:
        pols = [policies] if isinstance(policies, Policy) else list(policies)
        if not pols:
            raise ParameterError("the surrogate needs at least one public policy (its view vocabulary)")
        for pname, p in dict(p_follow_view=p_follow_view, p_follow_strong=p_follow_strong,
                             p_follow_weak=p_follow_weak, p_echo=p_echo, p_related=p_related,
                             p_awkward=p_awkward, p_offtopic=p_offtopic).items():
            if not (isinstance(p, (int, float)) and 0 <= p <= 1):
                raise ParameterError(f"{pname} must be a probability in [0, 1], got {p!r}")
        if isinstance(max_personalised, bool) or not isinstance(max_personalised, int) or max_personalised < 0:
            raise ParameterError(f"max_personalised must be an int >= 0, got {max_personalised!r}")
        if isinstance(salt, bool) or not isinstance(salt, int):
            raise ParameterError(f"salt must be an int (the run seed), got {salt!r}")
        self.salt = salt  # the run's seed: 0 keeps the historical stream, another value moves every draw
        self.decoding = decoding or DecodingConfig()
        self.name = name
        self.params = dict(p_follow_view=p_follow_view, p_follow_strong=p_follow_strong,
                           p_follow_weak=p_follow_weak, p_echo=p_echo, p_related=p_related,
                           p_awkward=p_awkward, p_offtopic=p_offtopic, max_personalised=max_personalised)
        views: dict[str, View] = {}
        phrasings: dict[str, tuple[str, ...]] = {}
        for pol in pols:
            for s in pol.slots:
                for v in s.views:
                    views.setdefault(v.id, v)
            for s in (pol.source or {}).get("slots", []):
                for v in s.get("views", []):
                    extra = v.get("phrasings") or v.get("advice") or ()
                    if isinstance(extra, list) and all(isinstance(x, str) for x in extra) and extra:
                        phrasings.setdefault(str(v["id"]), tuple(extra))
        self.views = views
        self.phrasings = phrasings
        self.by_text = {v.text.strip(): v for v in views.values()}
        self.cues = tuple(self._cues(v) for v in views.values() if not v.generic and v.cues)
        self.related = {v.id: tuple(w.id for w in views.values()
                                    if w.id != v.id and not w.generic and w.slot == v.slot
                                    and set(w.intents) & set(v.intents))
                        for v in views.values()}
        self._topic: dict[str, set[str]] = {}
        for pol in pols:
            for g in pol.slot_names:
                for w in TOPIC_WORDS.get(g, ()) + (g,):
                    self._topic.setdefault(_stem(w), set()).add(g)
            routes = getattr(pol.router, "routes", None) or (pol.source or {}).get("routes", {})
            for intent, slots in dict(routes).items():
                for w in re.split(r"[._\s-]+", str(intent).lower()):
                    if len(w) >= 3 and w not in STOPWORDS and w not in GENERIC_INTENT_WORDS:
                        for g in slots:
                            self._topic.setdefault(_stem(w), set()).add(g)
        self.query_slots = lru_cache(maxsize=50_000)(self._query_slots)
        self._cue_rank = {(vc.view.id, c): i for vc in self.cues for i, c in enumerate(vc.strong_text)}
        self._build_index()
        self._analyse = lru_cache(maxsize=200_000)(self._analyse_line)
        # identity for the cache: everything that determines the output besides the prompt
        body = json.dumps({"version": SURROGATE_VERSION, "params": self.params, **({"salt": salt} if salt else {}),
                           "views": sorted([v.id, v.slot, v.text, list(v.cues), list(v.intents), v.generic]
                                           for v in views.values()),
                           "phrasings": sorted(phrasings.items()),
                           "topic": sorted((k, sorted(v)) for k, v in self._topic.items()),
                           "banks": [OPENINGS, VIEW_TEMPLATES, ECHO_TEMPLATES, AWKWARD_TEMPLATES, GENERIC_BODY,
                                     CLOSINGS]}, sort_keys=True)
        self.model_id = SURROGATE_VERSION
        self.revision = hashlib.sha256(body.encode()).hexdigest()[:16]

    @classmethod
    def from_benchmark(cls, benchmark, **kwargs) -> "SurrogateResponder":
        return cls(list(benchmark.policies.values()), **kwargs)

    @property
    def seeded(self) -> bool:  # the surrogate is stochastic: its key always matters
        return True

    # ---- cue lexicon (public) ----------------------------------------------------------------
    @staticmethod
    def _cues(v: View) -> _ViewCues:
        strong = tuple(re.compile(r"\b" + re.escape(c.lower()) + r"\b") for c in v.cues)
        words = {w for c in v.cues for w in _WORD_RE.findall(c.lower()) if w not in STOPWORDS and len(w) >= 4}
        prefixes = tuple(sorted({w[:5] for w in words if len(w) >= 5}))
        return _ViewCues(v, strong, tuple(c.lower() for c in v.cues), frozenset(words), prefixes)

    def _build_index(self) -> None:
        """Token -> candidate strong cues / weak views, so a line is checked only against cues
        that can occur in it (a whole-word cue match implies its first token is in the line)."""
        self._first: dict[str, list[tuple[str, str, re.Pattern[str]]]] = {}
        self._weak_word: dict[str, list[str]] = {}
        self._weak_prefix: dict[str, list[str]] = {}
        for vc in self.cues:
            for cue, pat in zip(vc.strong_text, vc.strong):
                toks = _WORD_RE.findall(cue)
                if toks:
                    self._first.setdefault(toks[0], []).append((vc.view.id, cue, pat))
            for w in vc.weak_words:
                self._weak_word.setdefault(w, []).append(vc.view.id)
            for pre in vc.weak_prefixes:
                self._weak_prefix.setdefault(pre, []).append(vc.view.id)

    def _analyse_line(self, line: str) -> tuple[tuple[str, int, str], ...]:
        """(view id, strength 2=strong/1=weak, cue) for every view with cues in one memory line,
        in policy order; for each view the first matching cue in its lexicon order."""
        low = line.lower()
        toks = set(_WORD_RE.findall(low))
        strong: dict[str, tuple[int, str]] = {}
        for t in toks:
            for vid, cue, pat in self._first.get(t, ()):
                if pat.search(low):
                    rank = self._cue_rank[(vid, cue)]
                    if vid not in strong or rank < strong[vid][0]:
                        strong[vid] = (rank, cue)
        weak: dict[str, str] = {}
        for t in sorted(toks):
            for vid in self._weak_word.get(t, ()):
                weak.setdefault(vid, t)
        for t in sorted(toks):
            if len(t) >= 5:
                for vid in self._weak_prefix.get(t[:5], ()):
                    if vid not in weak:
                        weak[vid] = t
        out = []
        for vc in self.cues:
            vid = vc.view.id
            if vid in strong:
                out.append((vid, 2, strong[vid][1]))
            elif vid in weak:
                out.append((vid, 1, weak[vid]))
        return tuple(out)

    def _query_slots(self, query: str) -> frozenset[str]:
        """The slots a query is about (most topic-word hits; empty if none): R3's topic focus."""
        score: dict[str, int] = {}
        for t in set(_WORD_RE.findall(query.lower())):
            for g in self._topic.get(_stem(t), ()):
                score[g] = score.get(g, 0) + 1
        if not score:
            return frozenset()
        top = max(score.values())
        return frozenset(g for g, v in score.items() if v == top)

    # ---- randomness keyed by (pair, turn, seed) and a decision tag -----------------------------
    @staticmethod
    def _u(key: str, tag: str) -> float:
        h = hashlib.blake2b(f"{key}#{tag}".encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") / 2.0**64

    def _pick(self, key: str, tag: str, options: Sequence[str]) -> str:
        return options[int(self._u(key, tag) * len(options))]

    def _follow(self, key: str, view_id: str | None, text: str) -> str:
        bank = self.phrasings.get(view_id or "", ())
        templates = VIEW_TEMPLATES + tuple(f"{{P{i}}}" for i in range(len(bank)))
        tpl = self._pick(key, f"phr:{view_id or text}", templates)
        if tpl.startswith("{P"):
            return _sentence(bank[int(tpl[2:-1])])
        return _sentence(tpl.format(T=text.strip(), t=_lc_first(text.strip())))

    # ---- generation ----------------------------------------------------------------------------
    @staticmethod
    def split_conditioning(conditioning: str) -> tuple[list[str], list[str]]:
        """(guidance lines, memory lines) from a rendered conditioning text."""
        guidance: list[str] = []
        memory: list[str] = []
        mode: str | None = None
        for raw in conditioning.splitlines():
            line = raw.strip()
            if not line:
                continue
            low = line.lower()
            if low.startswith("response guidance"):
                mode = "g"
                continue
            if low.startswith("notes from") or low.startswith("memory"):
                mode = "m"
                continue
            item = line[2:].strip() if line.startswith("- ") else line
            (guidance if mode == "g" else memory).append(item)
        return guidance, memory

    def respond_one(self, prompt: Prompt) -> str:
        key = json.dumps(list(prompt.key)) if not self.salt else json.dumps([self.salt, *prompt.key])
        p = self.params
        guidance, memory = self.split_conditioning(prompt.conditioning)
        out = [self._pick(key, "open", OPENINGS)]
        followed = 0
        for line in guidance:                                                    # R2
            v = self.by_text.get(line)
            vid = v.id if v is not None else None
            if self._u(key, f"gv:{vid or line}") < p["p_follow_view"]:
                out.append(self._follow(key, vid, line))
                followed += 1
        strong: dict[str, str] = {}
        weak: dict[str, str] = {}
        placeholders: list[str] = []
        for line in memory:                                                      # R3/R4
            placeholders.extend(_PLACEHOLDER_RE.findall(line))
            for vid, strength, cue in self._analyse(line):
                if strength == 2:
                    strong.setdefault(vid, cue)
                elif vid not in strong:
                    weak.setdefault(vid, cue)
        topic = self.query_slots(prompt.query)

        def on_topic(vid: str) -> bool:
            return not topic or self.views[vid].slot in topic

        chosen: list[tuple[str, str | None]] = []
        for rank in (0, 1):  # on-topic views first, then off-topic ones (followed less often)
            f = 1.0 if rank == 0 else p["p_offtopic"]
            for vid, cue in strong.items():
                if on_topic(vid) == (rank == 0) and self._u(key, f"ms:{vid}") < p["p_follow_strong"] * f:
                    chosen.append((vid, cue if self._u(key, f"echo:{vid}") < p["p_echo"] else None))
            for vid in weak:
                if vid not in strong and on_topic(vid) == (rank == 0) and \
                        self._u(key, f"mw:{vid}") < p["p_follow_weak"] * f:
                    chosen.append((vid, None))
        extra: list[tuple[str, str | None]] = []
        for vid, _ in chosen:
            for rid in self.related.get(vid, ()):
                if self._u(key, f"rel:{vid}>{rid}") < p["p_related"]:
                    extra.append((rid, None))
        seen: set[str] = set()
        for vid, echo in (chosen + extra):
            if vid in seen or len(seen) >= p["max_personalised"]:
                continue
            seen.add(vid)
            text = self.views[vid].text
            if echo:
                tpl = self._pick(key, f"echo-t:{vid}", ECHO_TEMPLATES)
                out.append(_sentence(tpl.format(cue=echo, t=_lc_first(text.strip()))))
            else:
                out.append(self._follow(key, vid, text))
            followed += 1
        awk = 0
        for i, ph in enumerate(placeholders):
            if awk < 2 and self._u(key, f"ph:{ph}:{i}") < p["p_awkward"]:
                out.append(self._pick(key, f"ph-t:{ph}:{i}", AWKWARD_TEMPLATES).format(ph=ph))
                awk += 1
        if followed == 0 or self._u(key, "body") < 0.5:                          # R5
            out.append(self._pick(key, "body-t", GENERIC_BODY))
        if self._u(key, "close") < 0.5:
            out.append(self._pick(key, "close-t", CLOSINGS))
        words = " ".join(out).split()
        return " ".join(words[: self.decoding.max_new_tokens])                   # R6

    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        return [self.respond_one(p) for p in prompts]
