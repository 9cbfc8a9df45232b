"""Blinded utility judge (paper C.5 "Utility judging").

At T = 16 the judge receives the query-response transcript and a rubric built from the fixed
gold constraints of that pair and store side. The rubric is built (and its id fixed) before any
response is judged and is shared by every compared method for the same pair and side; the judge
never receives the method name or the M/M' label: :meth:`Judge.judge` takes only
``(rubric, responses)`` and :class:`Rubric` has no method or side field.

Scores, all on 0-4 and normalised by 4:

* holistic: relevance, correctness, actionability, personalisation; U = their mean / 4;
* per applicable gold behaviour and turn: tRec = mean over target-required behaviours on M;
  Unsup = mean over unsupported target-specific behaviours on M'.

Rubric items carry a neutral ``role``: ``"apply"`` (the response should show this behaviour:
target-required on M, generic on both sides) or ``"unsupported"`` (a target-specific behaviour the
user's information does not support: the unsupported behaviours on M'). Aggregation maps items
back to their kind through the behaviour catalogue, outside the judge.

Backends:

* :class:`RubricJudge` (default, offline): semantic similarity with a frozen encoder between the
  response's sentences and each behaviour description, mapped to 0-4 by fixed thresholds
  (:data:`THRESHOLDS`), plus documented rules for the holistic scores (see the class docstring).
* :class:`LLMJudge`: a frozen prompt (:data:`LLM_PROMPT`) sent to a local transformers model
  (through :mod:`dpmv_lib.responders`) or an OpenAI-compatible endpoint; strict JSON parsing with
  retries; an unparseable answer is recorded as a failure (``failed=True``, scores NaN, the raw
  outputs and the error kept), never replaced by a default score.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from .benchmark import Behaviour, Benchmark, Pair
from .encoders import Encoder
from .errors import ParameterError

DIMENSIONS = ("relevance", "correctness", "actionability", "personalisation")
ROLES = ("apply", "unsupported")


# ---- rubric ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RubricItem:
    """One gold behaviour to score at one turn (0-4: how clearly the response shows it).

    ``contrast``: for target-specific behaviours, the descriptions of the other behaviours of the
    same slot in the catalogue (generic ones and other attributes' target-specific ones); a
    response shows this behaviour only if it matches it better than these (see RubricJudge)."""

    turn: int
    item_id: str
    description: str
    role: str
    contrast: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.turn}:{self.item_id}"


@dataclass(frozen=True)
class Rubric:
    """The frozen, side-specific checklist of one pair (no method, no store label)."""

    rubric_id: str
    queries: tuple[str, ...]
    items: tuple[RubricItem, ...]

    def items_at(self, turn: int) -> tuple[RubricItem, ...]:
        return tuple(i for i in self.items if i.turn == turn)


def build_rubric(pair: Pair, side: str, behaviours: Mapping[str, Behaviour], horizon: int = 16) -> Rubric:
    """The rubric of ``pair`` on ``side`` over its first ``horizon`` turns, from the gold only:
    on M target-required + generic behaviours ("apply"); on M' generic ("apply") + unsupported
    target-specific behaviours ("unsupported")."""
    if side not in ("M", "M'"):
        raise ParameterError(f"unknown store side {side!r}; use 'M' or \"M'\"")
    if horizon < 1 or horizon > len(pair.turns):
        raise ParameterError(f"horizon must be in 1..{len(pair.turns)}, got {horizon}")
    items = []
    for t in pair.turns[:horizon]:
        groups = ((t.gold.target_required, "apply"), (t.gold.generic, "apply")) if side == "M" else \
                 ((t.gold.generic, "apply"), (t.gold.unsupported, "unsupported"))
        for ids, role in groups:
            for bid in ids:
                b = behaviours.get(bid)
                if b is None:
                    raise ParameterError(f"pair {pair.pair_id}: gold behaviour {bid!r} is not in the catalogue")
                items.append(RubricItem(t.index, bid, b.description, role, contrast_set(b, behaviours)))
    queries = tuple(t.query.text for t in pair.turns[:horizon])
    body = json.dumps([queries, [(i.turn, i.item_id, i.description, i.role, list(i.contrast)) for i in items]],
                      sort_keys=True)
    return Rubric(hashlib.sha256(body.encode()).hexdigest()[:20], queries, tuple(items))


def contrast_set(b: Behaviour, behaviours: Mapping[str, Behaviour]) -> tuple[str, ...]:
    """Contrast descriptions of a target-specific behaviour: every other behaviour of its slot that
    is generic or belongs to another attribute (none for generic behaviours)."""
    if b.kind == "generic" or not b.slot:
        return ()
    return tuple(sorted({o.description for o in behaviours.values()
                         if o.slot == b.slot and o.description != b.description
                         and (o.kind == "generic" or o.attribute != b.attribute)}))


@dataclass(frozen=True)
class Judgement:
    """Scores of one transcript. ``items``: item key "turn:behaviour" -> 0-4. A failed judgement
    has ``failed=True``, NaN scores, an ``error`` and the ``raw`` outputs of every attempt."""

    scores: Mapping[str, float]
    items: Mapping[str, float]
    failed: bool = False
    error: str = ""
    attempts: int = 1
    raw: tuple[str, ...] = ()

    @property
    def U(self) -> float:
        return float(np.mean([self.scores[d] for d in DIMENSIONS]) / 4.0) if not self.failed else float("nan")


class Judge(Protocol):
    """A blinded judge: sees a rubric and the responses, nothing else."""

    id: str

    def judge(self, rubric: Rubric, responses: Sequence[str]) -> Judgement: ...

    def judge_many(self, jobs: Sequence[tuple[Rubric, Sequence[str]]], *, progress: bool = False
                   ) -> list[Judgement]: ...


# ---- offline rubric judge ---------------------------------------------------------------------------
# Similarity -> 0-4 grade: the number of thresholds the cosine similarity reaches. Fixed per encoder
# family from general-purpose calibration sentences (CALIBRATION below, not from benchmark data).
# Measured cosines (restating / same-domain other / unrelated): MiniLM 0.59-0.82 / 0.23-0.49 /
# 0.09-0.12; hashing 0.16-0.27 / -0.05-0.07 / 0.00-0.05. So a restatement grades 3-4 (hashing 2-4),
# a same-domain sentence about something else 0-2 (hashing 0), an unrelated sentence 0.
THRESHOLDS: Mapping[str, tuple[float, float, float, float]] = {
    "st": (0.30, 0.40, 0.50, 0.60),       # sentence-transformers (MiniLM, mpnet)
    "hashing": (0.08, 0.14, 0.20, 0.26),  # lexical hashing encoder (smoke profile)
}
ON_TOPIC = {"st": 0.30, "hashing": 0.08}  # a sentence "addresses" a query or behaviour at grade >= 1
# Specificity margin m = cos(s, description) - max cos(s, contrast): measured on CALIBRATION_CONTRAST
# (restating / generic same-slot / unrelated): MiniLM 0.17-0.36 / -0.39--0.11 / -0.19--0.05;
# hashing -0.02-0.18 / -0.21-0.00 / -0.07-0.00.
MARGINS: Mapping[str, tuple[float, float, float, float]] = {
    "st": (0.00, 0.05, 0.10, 0.15),
    "hashing": (0.00, 0.03, 0.06, 0.09),
}

# (behaviour description, restating sentence, same-domain other sentence, unrelated sentence)
CALIBRATION = (
    ("Suggests meals that keep blood sugar steady, such as high-fibre, low-sugar options.",
     "Pick high-fibre dishes with little added sugar so your blood sugar stays steady.",
     "Try a quick pasta dinner with a side salad.",
     "Your phone bill can be lowered by switching plans."),
    ("Recommends paying down the most expensive balance first and avoiding new borrowing.",
     "Put extra money toward the highest-interest balance first and don't take on new loans.",
     "Set aside a little each month for savings.",
     "A short walk after lunch helps you feel fresh."),
    ("Proposes low-cost activities that fit a tight budget.",
     "Choose free or cheap activities so the weekend fits your tight budget.",
     "Visit a museum on Saturday afternoon.",
     "Drink water before your morning run."),
)

# (description, contrast descriptions, restating sentence, generic same-slot sentence, unrelated sentence)
CALIBRATION_CONTRAST = (
    ("Suggests meals that keep blood sugar steady",
     ("Suggests a quick and easy dinner", "Suggests meals that are safe during pregnancy", "Suggests very low-cost meals"),
     "Choose high-fibre dishes with little added sugar so your blood sugar stays steady.",
     "Try a balanced, simple meal you enjoy.", "Your phone bill can be lowered by switching plans."),
    ("Recommends paying down the most expensive balance first",
     ("Recommends a monthly budget with categories", "Recommends building an emergency fund",
      "Recommends planning for a period without income"),
     "Put any extra money toward the highest-interest balance before anything else.",
     "Keep track of what you spend each month.", "A short walk after lunch helps you feel fresh."),
    ("Proposes gentle exercise that is safe while expecting a baby",
     ("Proposes a running plan to build endurance", "Proposes a short home workout",
      "Proposes exercise that helps steady blood sugar"),
     "Stick to low-impact activity such as prenatal yoga or swimming, and avoid lying flat on your back.",
     "Do a quick twenty-minute workout at home.", "Book the museum tickets online to save time."),
    ("Suggests ways to bridge the income gap while looking for a new job",
     ("Suggests how to prepare for a job interview", "Suggests how to ask for a raise", "Suggests ways to pay down debt"),
     "Look into unemployment benefits and short-term gig work to cover bills until your next role starts.",
     "Update your CV and practise common interview questions.", "Water your plants twice a week in summer."),
)

IMPERATIVE = frozenset("""try pick choose plan keep add swap aim set start make use avoid cook prepare
prefer pace leave recommend suggest emphasise emphasize protect stay bridge apply reserve give tell
prep batch buy check write track review list schedule book ask call walk stretch go take limit cut
skip reduce eat drink bring consider focus put save budget compare split cap switch build rest sleep
include opt stick look note follow talk reach lean pair portion""".split())
ADVICE_CUES = re.compile(r"\b(you (?:could|can|should|might)|i'?d (?:suggest|recommend)?|i suggest|i recommend|"
                         r"my suggestion|a good approach|consider|try|aim (?:for|to)|make sure|it helps to)\b", re.I)
CONCRETE = re.compile(r"(\d|\$|%|\b(?:one|two|three|four|five|ten|twenty|thirty|half|minutes?|hours?|days?|"
                      r"weeks?|months?|morning|evening|tonight|tomorrow|monday|tuesday|wednesday|thursday|"
                      r"friday|saturday|sunday|cups?|grams?|servings?|portions?|dollars?|budget of)\b)", re.I)
NEGATION = re.compile(r"\b(?:don'?t|do not|never|avoid|skip(?:ping)?|ignore|stop|leave out|leave no|rush|"
                      r"exclude|give up|no need to|not)\b", re.I)
CLAIM = re.compile(r"\b(?:since you(?:'ve| have)? (?:mentioned|said|told)|given your|as you (?:mentioned|said)|"
                   r"your note about|you (?:noted|told me)|because you(?:'re| are| have| noted)|with your)\b", re.I)
NEGATED_DESC = re.compile(NEGATION.pattern[:-3] + r"|against|instead|without|avoids|limits|no)\b", re.I)
TERMINAL = re.compile(r"[.!?)\"'\u201d]\Z")
ARTIFACT = re.compile(r"\[[^\[\]]{1,60}\]|\bwithheld\b|\{[^{}]{0,40}\}|<[^<>]{1,40}>", re.I)
_SENT = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a response (split after . ! ? followed by whitespace); empty text -> []."""
    return [s.strip() for s in _SENT.split(text.strip()) if s.strip()]


def grade(sim: float, thresholds: Sequence[float]) -> int:
    """0-4: how many of the four thresholds the similarity reaches."""
    return int(sum(sim >= t for t in thresholds))


def _family(encoder: Encoder) -> str:
    return "hashing" if str(getattr(encoder, "id", "")).startswith("hashing") else "st"


class RubricJudge:
    """Offline rubric judge (default, v3). Per turn t with response sentences S_t, query q_t and
    the turn's rubric items, with cos = cosine similarity of frozen-encoder embeddings,
    grade(.) = number of :data:`THRESHOLDS` reached (0-4) and soft(.) = :func:`soft_grade` (the
    same scale, piecewise linear, so weak answers are ranked by how close they come):

    * item score(i) = grade(max_{s in S_t} cos(s, description_i)); for a target-specific item with a
      contrast set C_i (other behaviours of its slot), the best-matching sentence s* must also be
      specific: score = min(that grade, margin grade of cos(s*, d_i) - max_{c in C_i} cos(s*, c)
      by :data:`MARGINS`), so generic same-slot advice does not count as target personalisation.
      An "apply" item whose best sentence (cos >= :data:`ON_TOPIC`) *leads with a negation*
      (:func:`leads_with_negation`: "Avoid X", "The key point: do not X") while its description
      does not is *contradicted*: score 0. Item scores (tRec, Unsup) are these integer grades;
    * relevance = soft(max_s r_s) / 2 + mean_s soft(r_s) / 2 with r_s = max(cos(s, q_t), cos(s, d_i)
      over "apply" items): half the best match, half the focus of the whole answer;
    * correctness = 4 - soft score of the best-matching "unsupported" item (asserting what the
      user's information does not support) - 2 for an unsupported personal claim (a sentence with
      a claim cue such as "since you mentioned", "given your" that matches an unsupported item at
      cos >= ON_TOPIC) - (1 + number) of unresolved placeholders or template artefacts (``[...]``,
      ``{...}``, ``<...>``, "withheld"; so 2 for one, at most 4) - advice against the request
      (2 if an "apply" item is contradicted, or 4 x the share of on-topic sentences that lead with
      a negation when that share is >= 1/2); clipped to 0-4. The judge cannot check facts: "wrong"
      here means advice reversed against what the query and rubric ask for;
    * actionability = 2 if at least one sentence is advice (starts with an imperative verb, also
      after a frame such as "The key point:" or "Since you mentioned X,", or has an advice cue
      such as "try", "you could", "I'd suggest"), +1 if at least two are, +1 if the response has a
      concrete detail (a number, quantity, time or day), -2 if it stops mid-sentence
      (:func:`is_truncated`; the unfinished sentence is not counted) and -2 if it holds a
      placeholder (sentences with one are not counted); 0-4;
    * personalisation = mean soft score of the turn's "apply" items (same specificity cap; 0 for a
      contradicted item; turns without one are skipped).

    Checked on a labelled degradation set (:mod:`dpmv_lib.judge_degradation`). Transcript scores
    are means over its turns; an empty response scores 0 everywhere."""

    def __init__(self, encoder: Encoder, thresholds: Sequence[float] | None = None,
                 on_topic: float | None = None, margins: Sequence[float] | None = None) -> None:
        fam = _family(encoder)
        self.encoder = encoder
        self.thresholds = tuple(thresholds) if thresholds is not None else THRESHOLDS[fam]
        self.margins = tuple(margins) if margins is not None else MARGINS[fam]
        for name, th in (("thresholds", self.thresholds), ("margins", self.margins)):
            if len(th) != 4 or list(th) != sorted(th):
                raise ParameterError(f"{name} must be 4 increasing values, got {th}")
        self.on_topic = on_topic if on_topic is not None else ON_TOPIC[fam]
        self.id = (f"rubric-v3[{encoder.id};{','.join(map(str, self.thresholds))};"
                   f"{','.join(map(str, self.margins))}]")
        self._turn_cache: dict[tuple, tuple] = {}

    # -- API ------------------------------------------------------------------------------------
    def judge(self, rubric: Rubric, responses: Sequence[str]) -> Judgement:
        return self.judge_many([(rubric, responses)])[0]

    def judge_many(self, jobs: Sequence[tuple[Rubric, Sequence[str]]], *, progress: bool = False) -> list[Judgement]:
        jobs = [(r, tuple(resp)) for r, resp in jobs]
        for r, resp in jobs:
            if len(resp) != len(r.queries):
                raise ParameterError(f"rubric {r.rubric_id} covers {len(r.queries)} turns, got {len(resp)} responses")
        # 1. every distinct text is embedded once
        texts: dict[str, int] = {}

        def idx(t: str) -> int:
            j = texts.get(t)
            if j is None:
                j = texts[t] = len(texts)
            return j

        turn_jobs: dict[tuple, None] = {}
        for r, resp in jobs:
            for t, (q, a) in enumerate(zip(r.queries, resp)):
                items = tuple((i.item_id, i.description, i.role, i.contrast) for i in r.items_at(t))
                k = (q, a, items)
                if k in self._turn_cache or k in turn_jobs:
                    continue
                turn_jobs[k] = None
                idx(q)
                for s in split_sentences(a):
                    idx(s)
                for _, d, _, cs in items:
                    idx(d)
                    for c in cs:
                        idx(c)
        if texts:
            emb = self.encoder.encode(list(texts))
            # 2. per distinct (query, response, items) turn
            it: Iterable = turn_jobs
            if progress:
                from tqdm.auto import tqdm
                it = tqdm(turn_jobs, desc="judge turns", unit="turn")
            for k in it:
                self._turn_cache[k] = self._score_turn(k, emb, texts)
        out = []
        for r, resp in jobs:
            per_turn = [self._turn_cache[(q, a, tuple((i.item_id, i.description, i.role, i.contrast)
                                                      for i in r.items_at(t)))]
                        for t, (q, a) in enumerate(zip(r.queries, resp))]
            scores = {}
            for j, d in enumerate(DIMENSIONS):
                vals = [pt[0][j] for pt in per_turn if not math.isnan(pt[0][j])]
                scores[d] = float(np.mean(vals)) if vals else 0.0
            items = {}
            for t, pt in enumerate(per_turn):
                for item_id, sc in pt[1]:
                    items[f"{t}:{item_id}"] = float(sc)
            out.append(Judgement(scores, items))
        return out

    # -- one turn -------------------------------------------------------------------------------
    def _score_turn(self, k: tuple, emb: np.ndarray, texts: Mapping[str, int]) -> tuple:
        q, a, items = k
        sents = split_sentences(a)
        if not sents:
            return ((0.0, 0.0, 0.0, 0.0 if any(it[2] == "apply" for it in items) else math.nan),
                    tuple((it[0], 0) for it in items))
        S = emb[[texts[s] for s in sents]]
        qv = emb[texts[q]]
        sim_q = S @ qv
        neg = [leads_with_negation(x) for x in sents]
        item_scores, soft_scores = [], []
        topical = sim_q.copy()
        contradicted = False
        for item_id, desc, role, contrast in items:
            sims = S @ emb[texts[desc]]
            best = int(np.argmax(sims))
            sim = float(sims[best])
            sc, soft = grade(sim, self.thresholds), soft_grade(sim, self.thresholds)
            if contrast:
                margin = float(sims[best] - max(float(S[best] @ emb[texts[c]]) for c in contrast))
                sc, soft = min(sc, grade(margin, self.margins)), min(soft, soft_grade(margin, self.margins))
            if role == "apply":
                topical = np.maximum(topical, sims)
                # the best-matching sentence negates the behaviour ("avoid X" for "Recommends X")
                if sim >= self.on_topic and neg[best] and not NEGATED_DESC.search(desc):
                    contradicted, sc, soft = True, 0, 0.0
            item_scores.append((item_id, sc, role))
            soft_scores.append((soft, role))
        # relevance: half the best match to the query (or an apply item), half the mean over sentences
        per_sent = np.array([soft_grade(float(x), self.thresholds) for x in topical])
        relevance = 0.5 * float(per_sent.max()) + 0.5 * float(per_sent.mean())
        artifact = bool(ARTIFACT.search(a))
        truncated = is_truncated(a)
        unsup = [x for x, r in soft_scores if r == "unsupported"]
        # advice against the request: the share of on-topic sentences that negate (1-4 points)
        on = [i for i in range(len(sents)) if topical[i] >= self.on_topic]
        against = sum(neg[i] for i in on) / len(on) if on else 0.0
        penalty = max(2.0 if contradicted else 0.0, 4.0 * against if against >= 0.5 else 0.0)
        # a personal claim ("Since you mentioned X, ...") on a behaviour the user's information does not support
        claim = any(CLAIM.search(sents[i]) and max(float(S[i] @ emb[texts[d]]) for _, d, r, _ in items
                                                  if r == "unsupported") >= self.on_topic
                    for i in range(len(sents))) if unsup else False
        n_art = len(ARTIFACT.findall(a))
        correctness = (4.0 - (max(unsup) if unsup else 0.0) - (2.0 if claim else 0.0)
                       - (min(4.0, 1.0 + n_art) if n_art else 0.0) - penalty)
        usable = sents[:-1] if truncated else sents       # an unfinished last sentence is no usable step
        n_adv = sum(1 for x in usable if _is_advice(x) and not ARTIFACT.search(x))
        actionability = ((2 if n_adv >= 1 else 0) + (1 if n_adv >= 2 else 0) + (1 if CONCRETE.search(a) else 0)
                         - (2 if truncated else 0) - (2 if artifact else 0))
        apply_scores = [x for x, r in soft_scores if r == "apply"]
        personalisation = float(np.mean(apply_scores)) if apply_scores else math.nan
        hol = (float(min(4, max(0, relevance))), float(min(4, max(0, correctness))),
               float(min(4, max(0, actionability))), personalisation)
        return hol, tuple((i, s) for i, s, _ in item_scores)


def soft_grade(sim: float, thresholds: Sequence[float]) -> float:
    """Continuous 0-4 grade: piecewise linear through (0, 0) and (threshold_k, k), flat at 4 above
    the last threshold; equals :func:`grade` at the thresholds (ties between weak answers break by
    how close they come)."""
    return float(np.interp(sim, (0.0,) + tuple(thresholds), (0.0, 1.0, 2.0, 3.0, 4.0)))


def leads_with_negation(sentence: str) -> bool:
    """The sentence's advice starts with a negation ("Avoid X.", "The key point: do not X",
    "Since you mentioned Y, stop X"): checked at the start and after the first ':' or ','."""
    parts = [sentence] + re.split(r"[:,]\s+", sentence, maxsplit=1)[1:]
    return any(NEGATION.match(p.strip()) for p in parts)


def is_truncated(text: str) -> bool:
    """The response stops mid-sentence: its last character is not closing punctuation."""
    t = text.rstrip()
    return bool(t) and not TERMINAL.search(t)


def _is_advice(sentence: str) -> bool:
    """Advice: starts with an imperative verb (also after a frame such as "The key point:" or
    "Since you mentioned X,"), or has an advice cue ("try", "you could", "I'd suggest")."""
    for part in (sentence, *[x for x in re.split(r"[:;,]\s+", sentence)[1:]]):
        words = re.findall(r"[a-z']+", part.lower())
        if words and words[0] in IMPERATIVE:
            return True
    return bool(ADVICE_CUES.search(sentence))


# ---- LLM judge --------------------------------------------------------------------------------------
LLM_PROMPT_VERSION = "llm-judge-v1"
LLM_PROMPT = """You are a strict evaluator of an assistant's answers. You see a numbered transcript of user \
requests and assistant responses, and a checklist of behaviours per turn. You do not know which system \
produced the answers.

Score each item from 0 (absent or very poor) to 4 (clearly present or excellent):
- "relevance": do the responses address the requests?
- "correctness": are they sound, and free of assumptions about the user that the checklist marks as unsupported?
- "actionability": do they give concrete, usable steps?
- "personalisation": do they use the behaviours marked APPLY?
- "behaviours": for every checklist key, how clearly the response at that turn shows the behaviour.

Transcript:
{transcript}

Checklist (key: [role] description):
{checklist}

Answer with ONLY one JSON object, no other text, exactly of this form:
{{"relevance": <0-4>, "correctness": <0-4>, "actionability": <0-4>, "personalisation": <0-4>, "behaviours": {{{keys}}}}}"""
REPAIR = "\n\nYour previous answer was not valid ({error}). Reply again with ONLY the JSON object."


def render_llm_prompt(rubric: Rubric, responses: Sequence[str]) -> str:
    """The frozen judge prompt for one transcript (what an LLM judge sees, and nothing else)."""
    transcript = "\n".join(f"[turn {t}] User: {q}\n[turn {t}] Assistant: {a}"
                           for t, (q, a) in enumerate(zip(rubric.queries, responses)))
    checklist = "\n".join(f"{i.key}: [{'APPLY' if i.role == 'apply' else 'UNSUPPORTED'}] {i.description}"
                          for i in rubric.items) or "(no items)"
    keys = ", ".join(f'"{i.key}": <0-4>' for i in rubric.items)
    return LLM_PROMPT.format(transcript=transcript, checklist=checklist, keys=keys)


_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.S)


def parse_llm_output(text: str, rubric: Rubric) -> tuple[dict[str, float], dict[str, float]]:
    """Strict parse: the whole output (optionally inside one ```json fence) must be one JSON object
    with the four integer scores 0-4 and exactly the rubric's behaviour keys. Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError("output is not text")
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1)
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON object: {exc.msg} at char {exc.pos}") from None
    if not isinstance(obj, dict):
        raise ValueError("the JSON value is not an object")
    scores = {}
    for d in DIMENSIONS:
        v = obj.get(d, obj.get("personalization") if d == "personalisation" else None)
        scores[d] = _score(v, d)
    beh = obj.get("behaviours", obj.get("behaviors", {}))
    if not isinstance(beh, dict):
        raise ValueError("'behaviours' is not an object")
    want = {i.key for i in rubric.items}
    if set(beh) != want:
        missing, extra = sorted(want - set(beh)), sorted(set(beh) - want)
        raise ValueError(f"behaviour keys differ from the checklist (missing {missing[:5]}, extra {extra[:5]})")
    return scores, {k: _score(v, k) for k, v in beh.items()}


def _score(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not 0 <= v <= 4:
        raise ValueError(f"{name!r} must be an integer 0-4, got {v!r}")
    return float(v)


class LLMJudge:
    """An LLM behind ``generate(prompts) -> texts`` with the frozen prompt, strict parsing and up to
    ``retries`` repair attempts per transcript. Failures are recorded, never scored by default."""

    def __init__(self, generate: Callable[[list[str]], list[str]], *, name: str = "llm", retries: int = 2) -> None:
        if retries < 0:
            raise ParameterError("retries must be >= 0")
        self.generate = generate
        self.retries = int(retries)
        self.id = f"{LLM_PROMPT_VERSION}[{name}]"

    def judge(self, rubric: Rubric, responses: Sequence[str]) -> Judgement:
        return self.judge_many([(rubric, responses)])[0]

    def judge_many(self, jobs: Sequence[tuple[Rubric, Sequence[str]]], *, progress: bool = False) -> list[Judgement]:
        prompts = [render_llm_prompt(r, resp) for r, resp in jobs]
        raws: list[list[str]] = [[] for _ in jobs]
        errors: list[str] = ["" for _ in jobs]
        done: list[Judgement | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))
        for attempt in range(self.retries + 1):
            if not pending:
                break
            batch = [prompts[i] + (REPAIR.format(error=errors[i]) if attempt else "") for i in pending]
            try:
                outs = self.generate(batch)
            except Exception as exc:  # noqa: BLE001 - a backend failure is a recorded failure
                outs = [None] * len(batch)
                for i in pending:
                    errors[i] = f"backend error: {type(exc).__name__}: {exc}"
            if len(outs) != len(batch):
                raise ParameterError(f"judge backend returned {len(outs)} outputs for {len(batch)} prompts")
            still = []
            for i, out in zip(pending, outs):
                if out is None:
                    still.append(i)
                    continue
                raws[i].append(out)
                try:
                    scores, items = parse_llm_output(out, jobs[i][0])
                except ValueError as exc:
                    errors[i] = str(exc)
                    still.append(i)
                    continue
                done[i] = Judgement(scores, items, attempts=attempt + 1, raw=tuple(raws[i]))
            pending = still
        for i in pending:
            done[i] = Judgement({d: math.nan for d in DIMENSIONS}, {}, failed=True, error=errors[i],
                                attempts=self.retries + 1, raw=tuple(raws[i]))
        return done  # type: ignore[return-value]


def openai_generate(base_url: str, model: str, *, timeout: float = 120.0, max_tokens: int = 1024,
                    system: str = "You are a careful evaluator. Reply with JSON only.") -> Callable[[list[str]], list[str]]:
    """A ``generate`` for an OpenAI-compatible chat endpoint (temperature 0), stdlib HTTP only."""
    import urllib.error
    import urllib.request

    url = base_url.rstrip("/") + ("/chat/completions" if base_url.rstrip("/").endswith("/v1") else "/v1/chat/completions")

    def gen(prompts: list[str]) -> list[str]:
        outs = []
        for p in prompts:
            body = json.dumps({"model": model, "temperature": 0, "max_tokens": max_tokens,
                               "messages": [{"role": "system", "content": system}, {"role": "user", "content": p}]})
            req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    outs.append(json.loads(r.read())["choices"][0]["message"]["content"])
            except (urllib.error.URLError, KeyError, ValueError, TimeoutError) as exc:
                raise ParameterError(f"judge endpoint {url} failed: {exc}") from exc
        return outs

    return gen


def responder_generate(spec: str, *, max_new_tokens: int = 768, **kwargs: Any) -> Callable[[list[str]], list[str]]:
    """A ``generate`` backed by :func:`dpmv_lib.responders.make_responder` (e.g. "smollm2" or
    "hf:<path>"; greedy decoding). The judge prompt is sent as the user turn with no conditioning."""
    from .responders import DecodingConfig, Prompt, make_responder

    resp = make_responder(spec, decoding=DecodingConfig(max_new_tokens=max_new_tokens, temperature=0.0), **kwargs)
    return lambda prompts: resp.respond([Prompt(p, "", ("judge", i, -1)) for i, p in enumerate(prompts)])


def make_judge(spec: str, encoder: Encoder | None = None, **kwargs: Any) -> Judge:
    """``"rubric"`` (needs ``encoder``), ``"llm:smollm2"``, ``"llm:hf:<path>"``,
    ``"llm:openai:<base_url>|<model>"``; plain ``"llm"`` reads DPMV_JUDGE (one of the llm specs)."""
    import os

    if spec == "rubric":
        if encoder is None:
            raise ParameterError("the rubric judge needs an encoder")
        return RubricJudge(encoder, **kwargs)
    if spec == "llm":
        env = os.environ.get("DPMV_JUDGE", "")
        if not env.startswith("llm:"):
            raise ParameterError("judge 'llm' needs DPMV_JUDGE set to 'llm:smollm2', 'llm:hf:<path>' or "
                                 "'llm:openai:<base_url>|<model>'")
        spec = env
    if spec.startswith("llm:openai:"):
        url, sep, model = spec[len("llm:openai:"):].partition("|")
        if not sep or not model:
            raise ParameterError(f"bad judge spec {spec!r}; use 'llm:openai:<base_url>|<model>'")
        return LLMJudge(openai_generate(url, model), name=model, **kwargs)
    if spec.startswith("llm:"):
        inner = spec[4:]
        return LLMJudge(responder_generate(inner), name=inner, **kwargs)
    raise ParameterError(f"unknown judge spec {spec!r}; use 'rubric' or 'llm:<backend>'")


# ---- judging transcript tables ---------------------------------------------------------------------
def build_rubrics(benchmarks: Mapping[str, Benchmark], horizon: int = 16,
                  pair_ids: Iterable[tuple[str, str]] | None = None) -> dict[tuple[str, str, str], Rubric]:
    """All rubrics, keyed (track, pair_id, side), built from the gold before anything is judged."""
    want = set(pair_ids) if pair_ids is not None else None
    out = {}
    for track, bench in benchmarks.items():
        for pair in bench.pairs:
            if want is not None and (track, pair.pair_id) not in want:
                continue
            for side in ("M", "M'"):
                out[(track, pair.pair_id, side)] = build_rubric(pair, side, bench.behaviours, horizon)
    return out


def judge_transcripts(transcripts: pd.DataFrame, benchmarks: Mapping[str, Benchmark], judge: Judge,
                      horizon: int = 16, *, progress: bool = False) -> pd.DataFrame:
    """One row per transcript (track, response_model, method, pair, side, seed): the four holistic
    scores (0-4), U, tRec (M: mean normalised score of target-required items), Unsup (M': of
    unsupported items), and the failure record. The judge gets only (rubric, responses)."""
    need = {"track", "response_model", "method", "pair_id", "attribute", "side", "seed", "turn", "response"}
    if need - set(transcripts.columns):
        raise ParameterError(f"transcript table lacks columns {sorted(need - set(transcripts.columns))}")
    df = transcripts[transcripts["turn"] < horizon].sort_values(
        ["track", "response_model", "method", "pair_id", "side", "seed", "turn"], kind="stable")
    pairs = set(zip(df["track"], df["pair_id"]))
    rubrics = build_rubrics(benchmarks, horizon, pairs)  # fixed before any response is judged
    missing = {(t, p) for t, p in pairs if (t, p, "M") not in rubrics}
    if missing:
        raise ParameterError(f"no gold for pairs {sorted(missing)[:5]} (benchmark tracks: {sorted(benchmarks)})")
    keys, jobs = [], []
    for k, g in df.groupby(["track", "response_model", "method", "pair_id", "side", "seed"], sort=False):
        if list(g["turn"]) != list(range(horizon)):
            raise ParameterError(f"transcript {k} must hold turns 0..{horizon - 1}")
        keys.append(k + (g["attribute"].iloc[0],))
        jobs.append((rubrics[(k[0], k[3], k[4])], tuple(g["response"].astype(str))))
    kind = {}
    for bench in benchmarks.values():
        kind.update({bid: b.kind for bid, b in bench.behaviours.items()})
    results = judge.judge_many(jobs, progress=progress)
    recs = []
    for k, (rub, _), j in zip(keys, jobs, results):
        track, model, method, pair_id, side, seed, attr = k
        rec = {"track": track, "response_model": model, "method": method, "pair_id": pair_id, "attribute": attr,
               "side": side, "seed": seed, **{d: j.scores.get(d, math.nan) for d in DIMENSIONS},
               "U": j.U, "failed": j.failed, "error": j.error, "attempts": j.attempts, "rubric_id": rub.rubric_id}
        trec = [j.items[i.key] / 4 for i in rub.items if kind.get(i.item_id) == "target_required" and i.key in j.items]
        uns = [j.items[i.key] / 4 for i in rub.items if kind.get(i.item_id) == "unsupported" and i.key in j.items]
        rec["tRec"] = float(np.mean(trec)) if (side == "M" and trec) else math.nan
        rec["Unsup"] = float(np.mean(uns)) if (side == "M'" and uns) else math.nan
        recs.append(rec)
    return pd.DataFrame.from_records(recs)


def summarise_utility(per_transcript: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (track, response_model, method): U (both sides), tRec (M), Unsup (M') with pair-bootstrap
    95% CIs. Seeds are averaged within each (pair, side) first (C.5); failed judgements are
    excluded and counted."""
    rng = np.random.default_rng(seed)
    recs = []
    ok = per_transcript[~per_transcript["failed"]]
    for (track, model, method), g in per_transcript.groupby(["track", "response_model", "method"], sort=True):
        gg = ok[(ok["track"] == track) & (ok["response_model"] == model) & (ok["method"] == method)]
        by_pair = gg.groupby(["pair_id", "side"])[["U", "tRec", "Unsup"]].mean()
        per_pair = pd.DataFrame({
            "U": by_pair["U"].groupby(level="pair_id").mean(),
            "tRec": by_pair["tRec"].xs("M", level="side") if "M" in by_pair.index.get_level_values("side") else np.nan,
            "Unsup": by_pair["Unsup"].xs("M'", level="side") if "M'" in by_pair.index.get_level_values("side") else np.nan,
        })
        rec = {"track": track, "response_model": model, "method": method, "n_pairs": int(len(per_pair)),
               "n_transcripts": int(len(g)), "n_failed": int(g["failed"].sum())}
        for c in ("U", "tRec", "Unsup"):
            v = per_pair[c].dropna().to_numpy() if len(per_pair) else np.array([])
            rec[c] = float(v.mean()) if len(v) else math.nan
            if n_boot and len(v):
                b = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
                rec[f"{c}_lo"], rec[f"{c}_hi"] = float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))
        for d in DIMENSIONS:
            rec[d] = float(gg[d].mean()) if len(gg) else math.nan
        recs.append(rec)
    return pd.DataFrame.from_records(recs)
