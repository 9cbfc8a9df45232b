"""The offline rubric judge (paper C.5, default backend): semantic similarity with a frozen encoder
between a response's sentences and each behaviour description, mapped to 0-4 by fixed,
encoder-family thresholds (:data:`THRESHOLDS`, calibrated on general-purpose sentences), plus the
holistic scores: with a sentence-transformer encoder, a model fitted on half of the independent
labels (:mod:`dpmv_lib.evaluate.holistic`, id ``rubric-v5``); otherwise documented rules
(id ``rubric-v4``; :class:`RubricJudge`).

Contrasts never hold another attribute's description of the same view
(:func:`dpmv_lib.evaluate.rubric.contrast_set`), sentences are compared without their lead-in
(:func:`advice_units`), and bullet / numbered lists split into items (:func:`split_sentences`).
Checked by :mod:`dpmv_lib.experiments.judge_restatement` (verbatim view restatements).
"""
from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..common.parallel import check_workers, parallel_map
from ..core.errors import ParameterError
from .encoders import Encoder, auto_precision
from . import holistic
from .rubric import DIMENSIONS, Judgement, Rubric


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
TURN_CHUNK = 2048   # distinct turns per parallel task of judge_many
CROSS_BLOCK = 4096  # (query, response) pairs per cross-encoder call of judge_many (one cache shard each)
# Specificity margin m = cos(s, description) - max cos(s, contrast): measured on CALIBRATION_CONTRAST
# (restating / generic same-slot / unrelated): MiniLM 0.17-0.36 / -0.39--0.11 / -0.19--0.05;
# hashing -0.02-0.18 / -0.21-0.00 / -0.07-0.00.
# The "st" item thresholds were then fitted on half of the independent labels (data/judge_labels,
# :func:`dpmv_lib.evaluate.judge_agreement.fit_item_thresholds`, seed 0: mean kappa of "shown" over
# tRec and Unsup items): the similarity floor 0.30 stays (0.30 and 0.35 tie; the nearer wins) and the
# margin step goes from 0.05 to 0.025 (fitting half 0.889 -> 0.925; held-out half 0.923 both; notebook 03).
MARGINS: Mapping[str, tuple[float, float, float, float]] = {
    "st": (0.00, 0.025, 0.05, 0.075),
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
     ("Suggests a quick and easy dinner", "Suggests meals that are safe during pregnancy",
      "Suggests very low-cost meals"),
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
     ("Suggests how to prepare for a job interview", "Suggests how to ask for a raise",
      "Suggests ways to pay down debt"),
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
CARE = re.compile(r"\b(?:doctor|clinician|provider|pharmacist|physician|midwife|care team|readings|"
                  r"check (?:your )?(?:blood sugar|levels))\b", re.I)   # a pointer to a clinician or a check
FIRST_PERSON = re.compile(r"^(?:i'?m|i am|i have|i'?ve|i was|my)\b", re.I)   # the model speaking as the user
# the model narrating about someone ("They're going to wake up at 6am"), as SmolLM2 does when its view
# is written about the user in the third person
THIRD_PERSON = re.compile(r"^\W*(?:they|their|them|he|she|his|her)\b", re.I)
ECHO = 0.85   # a sentence this close to the query restates it
ARTIFACT = re.compile(r"\[[^\[\]]{1,60}\]|\bwithheld\b|\{[^{}]{0,40}\}|<[^<>]{1,40}>", re.I)
_SENT = re.compile(r"(?<=[.!?])\s+")
LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\(?\d{1,3}[.)])\s+")   # "- ", "* ", "\u2022 ", "1. ", "1) ", "(1) "
# a lead-in before the advice: a short clause ended by ": " or ", " ("The key point:", "Since you
# mentioned X,") or an advice cue ("I'd", "you could"); see :func:`advice_units`. At most 8 words:
# "Given your note about lost their job," is 7. The restatement and degradation checks give the
# same results for any limit from 6 to 10 (MiniLM, default profile).
FRAME_WORDS = 8
_FRAME = re.compile(r"^([^:,;]{1,80}?)[:,]\s+(?=\S)")
_CUE_LEAD = re.compile(r"^(?:i'?d|i would|i (?:suggest|recommend)(?: that)?|you (?:could|can|should|might)|"
                       r"it helps to|make sure to|my suggestion is to)\s+(?=\S)", re.I)


def split_sentences(text: str) -> list[str]:
    """Sentences of a response: split after . ! ? followed by whitespace, and at line breaks
    that start a list item ("- ", "* ", "\u2022 ", "1.", "1)"), follow a line ending in ":" or
    are blank lines; list markers are dropped, so a bullet or numbered list without full stops
    gives one sentence per item. A line break inside a hard-wrapped sentence does not
    split. Empty text -> []."""
    out: list[str] = []
    for block in _line_blocks(text):
        out.extend(s.strip() for s in _SENT.split(block) if s.strip())
    return out


def _line_blocks(text: str) -> list[str]:
    """Lines of ``text`` joined back into blocks, split where :func:`split_sentences` says, list markers removed."""
    blocks: list[str] = []
    prev_open = True                       # the first line starts a block
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            prev_open = True
            continue
        item = LIST_MARKER.match(line)
        body = line[item.end():].strip() if item else line
        if prev_open or item or not blocks or blocks[-1].endswith(":"):
            blocks.append(body)
        else:
            blocks[-1] = f"{blocks[-1]} {body}"
        prev_open = False
    return [b for b in blocks if b]


def advice_units(sentence: str) -> list[str]:
    """The texts of one sentence that are compared with behaviour descriptions: the sentence and,
    when it opens with a lead-in, its advice without it. A lead-in is a clause of at most
    :data:`FRAME_WORDS` words ended by ": " or ", " ("The key point:", "Since you mentioned X,",
    "With that in mind,") and/or an advice cue ("I'd", "you could", "I suggest"). The frame words
    are no part of any behaviour; left in, they pull the sentence towards generic advice that
    shares them and lower a faithful restatement."""
    units, rest = [sentence], sentence
    m = _FRAME.match(rest)
    if m and len(m.group(1).split()) <= FRAME_WORDS:
        rest = rest[m.end():]
    c = _CUE_LEAD.match(rest)
    if c:
        rest = rest[c.end():]
    if rest != sentence and len(rest.split()) >= 2:
        units.append(rest[:1].upper() + rest[1:])
    return units


def grade(sim: float, thresholds: Sequence[float]) -> int:
    """0-4: how many of the four thresholds the similarity reaches."""
    return int(sum(sim >= t for t in thresholds))


def _family(encoder: Encoder) -> str:
    return "hashing" if str(getattr(encoder, "id", "")).startswith("hashing") else "st"


class RubricJudge:
    """Offline rubric judge (default). Item scores (tRec, Unsup) as below. The holistic scores
    come from ``holistic`` (default "auto": the committed :class:`~.holistic.HolisticModel` for a
    sentence-transformer encoder; id ``rubric-v5``): item-independent features of the turn
    (:meth:`holistic_features`) through the fitted model, except the dimensions the model
    cross-encodes, which a cross-encoder reading the query and the response together scores alone
    (actionability) or blended with the fitted model's score (relevance; :meth:`cross_scores`,
    :class:`~.holistic.CrossEncoded`; its precision, ``cross_precision``, is in the id).
    With ``holistic=None`` (and for the hashing encoder) they come from the rules below (id
    ``rubric-v4``).

    Per turn t with response sentences S_t, query q_t and
    the turn's rubric items, with cos = cosine similarity of frozen-encoder embeddings,
    grade(.) = number of :data:`THRESHOLDS` reached (0-4) and soft(.) = :func:`soft_grade` (the
    same scale, piecewise linear, so weak answers are ranked by how close they come):

    * item score(i) = grade(max_{s in S_t} cos(s, description_i)), where S_t holds every sentence
      and, for a sentence with a lead-in ("The key point:", "Since you mentioned X,", "I'd"), the
      same sentence without it (:func:`advice_units`: frame words belong to no behaviour);
      for a target-specific item with a contrast set C_i, the best-matching unit s* must also be
      specific: score = min(that grade, margin grade of cos(s*, d_i) - max_{c in C_i} cos(s*, c)
      by :data:`MARGINS`), so generic same-slot advice does not count as target personalisation.
      C_i (:func:`dpmv_lib.evaluate.rubric.contrast_set`) holds the slot's generic behaviours
      and other attributes' behaviours of *other* views, never another attribute's description
      of the item's own view (where two attributes link to one view, that wording
      would take the credit from the other attribute's item; the rule keeps each attribute's own
      gold description and grades a response alike whichever attributes share the view).
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
      such as "try", "you could", "I'd suggest"), +1 if at least two are, +1 if a sentence has a
      concrete detail (a number, quantity, time or day; list markers do not count), -2 if it stops
      mid-sentence (:func:`is_truncated`; the unfinished sentence is not counted) and -2 if it holds a
      placeholder (sentences with one are not counted); 0-4;
    * personalisation = mean soft score of the turn's "apply" items (same specificity cap; 0 for a
      contradicted item; turns without one are skipped).

    Sentences come from :func:`split_sentences` (a bullet or numbered list gives one per item).
    Checked on a labelled degradation set (:mod:`dpmv_lib.experiments.judge_degradation`) and on
    verbatim restatements of every view (:mod:`dpmv_lib.experiments.judge_restatement`). The
    similarity thresholds come from the calibration sentences and were confirmed on labelled data;
    the "st" specificity margins were fitted on half of ``data/judge_labels`` (:data:`MARGINS`).
    Transcript scores are means over its turns; an empty response scores 0 everywhere."""

    def __init__(self, encoder: Encoder, thresholds: Sequence[float] | None = None,
                 on_topic: float | None = None, margins: Sequence[float] | None = None, *,
                 holistic: "holistic.HolisticModel | None | str" = "auto", workers: int | None = None,
                 cross_precision: str = "fp32") -> None:
        # processes that score the distinct turns (the same scores for any count)
        self.workers = check_workers(workers)
        fam = _family(encoder)
        self.encoder = encoder
        self.thresholds = tuple(thresholds) if thresholds is not None else THRESHOLDS[fam]
        self.margins = tuple(margins) if margins is not None else MARGINS[fam]
        for name, th in (("thresholds", self.thresholds), ("margins", self.margins)):
            if len(th) != 4 or list(th) != sorted(th):
                raise ParameterError(f"{name} must be 4 increasing values, got {th}")
        self.on_topic = on_topic if on_topic is not None else ON_TOPIC[fam]
        if isinstance(holistic, str):
            if holistic != "auto":
                raise ParameterError(f"holistic must be a HolisticModel, None or 'auto', got {holistic!r}")
            # the committed model was fitted on sentence-transformer features: the rules elsewhere
            holistic = _committed_model() if fam == "st" else None
        if holistic is not None and holistic.reads_content and holistic.content is None:
            raise ParameterError("the holistic model reads content features but holds no content projection")
        self.holistic = holistic
        if cross_precision not in ("auto", "fp32", "bf16"):
            raise ParameterError(f"cross_precision must be 'auto', 'fp32' or 'bf16', got {cross_precision!r}")
        # a cross-encoded dimension runs its cross-encoder on the CPU, by default in float32, as it was
        # trained: bf16 ("auto" picks it where the CPU has native bf16 dot products) is faster but
        # moved actionability's held-out kappa from 0.654 to 0.637 when measured on 1,807 labelled units
        # (data/judge_labels/README.md); the scores differ with it, so the id names it
        self.cross_precision = auto_precision("cpu") if cross_precision == "auto" else cross_precision
        thr = f"{','.join(map(str, self.thresholds))};{','.join(map(str, self.margins))}"
        cross = f";ce={self.cross_precision}" if holistic is not None and holistic.cross_encoded else ""
        self.id = (f"rubric-v5[{encoder.id};{thr};holistic={holistic.sha}{cross}]" if holistic is not None
                   else f"rubric-v4[{encoder.id};{thr}]")
        self._turn_cache: dict[tuple, tuple] = {}
        self._cross: dict[str, Any] = {}

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
        if self.holistic is not None:
            for anchor in (*self.holistic.anchors["specific"], *self.holistic.anchors["generic"]):
                idx(anchor)
        for r, resp in jobs:
            for t, (q, a) in enumerate(zip(r.queries, resp)):
                items = tuple((i.item_id, i.description, i.role, i.contrast) for i in r.items_at(t))
                k = (q, a, items)
                if k in self._turn_cache or k in turn_jobs:
                    continue
                turn_jobs[k] = None
                idx(q)
                for s in split_sentences(a):
                    for u in advice_units(s):
                        idx(u)
                for _, d, _, cs in items:
                    idx(d)
                    for c in cs:
                        idx(c)
        if turn_jobs:
            emb = self.encoder.encode(list(texts))
            # 2. per distinct (query, response, items) turn, in chunks over forked workers (each
            # turn is scored alone from the same embeddings, so the count changes nothing)
            keys = list(turn_jobs)
            starts = range(0, len(keys), TURN_CHUNK)

            anchors = _anchor_rows(emb, texts, self.holistic.anchors) if self.holistic is not None else None
            # the cross-encoded dimensions first, once per distinct (query, response), in this process
            # (torch uses every core), then the turns in forked workers
            cross = self.cross_scores(list(dict.fromkeys((k[0], k[1]) for k in keys)), progress=progress)

            def score(start: int) -> list[tuple]:
                chunk = keys[start:start + TURN_CHUNK]
                return self._holistic_scores([self._score_turn(k, emb, texts, anchors) for k in chunk],
                                             [cross.get((k[0], k[1]), {}) for k in chunk])
            scored = parallel_map(score, starts, workers=self.workers, progress=progress,
                                  desc=f"judge {len(keys)} turns", unit="chunk")
            for start, chunk in zip(starts, scored):
                self._turn_cache.update(zip(keys[start:start + TURN_CHUNK], chunk))
        out = []
        for r, resp in jobs:
            per_turn = [self._turn_cache[(q, a, tuple((i.item_id, i.description, i.role, i.contrast)
                                                      for i in r.items_at(t)))]
                        for t, (q, a) in enumerate(zip(r.queries, resp))]
            scores = {}
            for j, d in enumerate(DIMENSIONS):
                vals = [pt[0][j] for pt in per_turn if not math.isnan(pt[0][j])]
                scores[d] = float(np.mean(vals)) if vals else 0.0
            item_scores: dict[str, float] = {}
            for t, pt in enumerate(per_turn):
                for item_id, sc in pt[1]:
                    item_scores[f"{t}:{item_id}"] = float(sc)
            out.append(Judgement(scores, item_scores))
        return out

    # -- one turn -------------------------------------------------------------------------------
    def _holistic_scores(self, turns: list[tuple], cross: Sequence[Mapping[int, float]] = ()) -> list[tuple]:
        """(holistic, items) per turn of :meth:`_score_turn`'s (rules, items, features, bag scores):
        the holistic scores from the model, scored for the whole chunk at once, where there is one and
        the turn has features (an empty response keeps its zeros); a cross-encoded dimension takes
        the turn's score in ``cross`` (dimension index -> score, :meth:`cross_scores`) and a
        sentence-bagged one its bag score, each blended with the boundaries' with its
        ``feature_weight`` (:func:`~.holistic.blend_scores`)."""
        out = [(h, i) for h, i, *_ in turns]
        rows = [j for j, t in enumerate(turns) if t[2] is not None]
        if self.holistic is not None and rows:
            scores = self.holistic.score(np.stack([turns[j][2] for j in rows]))
            for j, sc in zip(rows, scores):
                vals = [float(x) for x in sc]
                for d, v in {**(cross[j] if j < len(cross) else {}), **turns[j][3]}.items():
                    vals[d] = float(holistic.blend_scores(v, vals[d], self.holistic.feature_weight(DIMENSIONS[d])))
                out[j] = (tuple(vals), turns[j][1])
        return out

    def cross_scores(self, pairs: Sequence[tuple[str, str]], *, progress: bool = False
                     ) -> dict[tuple[str, str], dict[int, float]]:
        """Per (query, response), the scores of the holistic model's cross-encoded dimensions
        (:meth:`~.holistic.HolisticModel.cross_encoder`; index in :data:`~.rubric.DIMENSIONS` ->
        score), kept on disk beside the judge's embeddings where
        its encoder has a cache (:class:`~.encoders.CachedEncoder`). Empty without such dimensions."""
        model = self.holistic
        if model is None or not model.cross_encoded or not pairs:
            return {}
        from tqdm.auto import tqdm

        from .cross_encoder import PairScores, pair_text
        from .encoders import CachedEncoder

        out: dict[tuple[str, str], dict[int, float]] = {p: {} for p in pairs}
        texts = [pair_text(q, a) for q, a in pairs]
        for d in sorted(model.cross_encoded, key=DIMENSIONS.index):
            if d not in self._cross:
                scorer = PairScores(model.cross_encoder(d, self.cross_precision), model.cross_encoded[d].sha256[:12],
                                    self.cross_precision)
                root = getattr(self.encoder, "dir", None)
                self._cross[d] = CachedEncoder(scorer, Path(root).parent) if root is not None else scorer
            # in blocks, each kept on disk as it is done (an interrupted run keeps what it scored)
            blocks = range(0, len(texts), CROSS_BLOCK)
            scores = np.concatenate([self._cross[d].encode(texts[s:s + CROSS_BLOCK])[:, 0] for s in tqdm(
                blocks, desc=f"cross-encode {d}: {len(texts)} pairs", unit="block",
                disable=not progress or len(blocks) < 2)])
            for p, v in zip(pairs, scores):
                out[p][DIMENSIONS.index(d)] = float(v)
        return out

    def _score_turn(self, k: tuple, emb: np.ndarray, texts: Mapping[str, int],
                    anchors: tuple[np.ndarray, np.ndarray] | None = None) -> tuple:
        """(rule holistic scores, item scores, holistic features or None, sentence-bag scores) of one
        turn; the features (against the model's ``anchors`` embeddings) and the scores of the model's
        sentence-bagged dimensions (:meth:`~.holistic.HolisticModel.bag_scores`; empty otherwise)
        only where the judge has a model."""
        q, a, items = k
        sents = split_sentences(a)
        if not sents:
            return ((0.0, 0.0, 0.0, 0.0 if any(it[2] == "apply" for it in items) else math.nan),
                    tuple((it[0], 0) for it in items), None, {})
        S = emb[[texts[s] for s in sents]]
        units = [(i, u) for i, s in enumerate(sents) for u in advice_units(s)]
        owner = np.array([i for i, _ in units])
        U = emb[[texts[u] for _, u in units]]
        qv = emb[texts[q]]
        sim_q = S @ qv
        neg = [leads_with_negation(x) for x in sents]
        item_scores, soft_scores = [], []
        topical = sim_q.copy()
        contradicted = False
        desc_sims: dict[str, np.ndarray] = {}
        for item_id, desc, role, contrast in items:
            sims = U @ emb[texts[desc]]
            best = int(np.argmax(sims))
            sim = float(sims[best])
            per_sent = np.full(len(sents), -1.0)
            np.maximum.at(per_sent, owner, sims)
            desc_sims[desc] = per_sent
            sc, soft = grade(sim, self.thresholds), soft_grade(sim, self.thresholds)
            if contrast:
                margin = float(sims[best] - max(float(U[best] @ emb[texts[c]]) for c in contrast))
                sc, soft = min(sc, grade(margin, self.margins)), min(soft, soft_grade(margin, self.margins))
            if role == "apply":
                topical = np.maximum(topical, per_sent)
                # the best-matching sentence negates the behaviour ("avoid X" for "Recommends X")
                if sim >= self.on_topic and neg[owner[best]] and not NEGATED_DESC.search(desc):
                    contradicted, sc, soft = True, 0, 0.0
            item_scores.append((item_id, sc, role))
            soft_scores.append((soft, role))
        # relevance: half the best match to the query (or an apply item), half the mean over sentences
        per_sent = np.array([soft_grade(float(x), self.thresholds) for x in topical])
        relevance = 0.5 * float(per_sent.max()) + 0.5 * float(per_sent.mean())
        unsup = [x for x, r in soft_scores if r == "unsupported"]
        # advice against the request: the share of on-topic sentences that negate (1-4 points)
        on = [i for i in range(len(sents)) if topical[i] >= self.on_topic]
        against = sum(neg[i] for i in on) / len(on) if on else 0.0
        penalty = max(2.0 if contradicted else 0.0, 4.0 * against if against >= 0.5 else 0.0)
        # a personal claim ("Since you mentioned X, ...") on a behaviour the user's information does not support
        claim = any(CLAIM.search(sents[i]) and max(float(desc_sims[d][i]) for _, d, r, _ in items
                                                  if r == "unsupported") >= self.on_topic
                    for i in range(len(sents))) if unsup else False
        n_art = len(ARTIFACT.findall(a))
        correctness = (4.0 - (max(unsup) if unsup else 0.0) - (2.0 if claim else 0.0)
                       - (min(4.0, 1.0 + n_art) if n_art else 0.0) - penalty)
        actionability = action_rule(a, sents)
        apply_scores = [x for x, r in soft_scores if r == "apply"]
        personalisation = float(np.mean(apply_scores)) if apply_scores else math.nan
        hol = (float(min(4, max(0, relevance))), float(min(4, max(0, correctness))),
               float(min(4, max(0, actionability))), personalisation)
        f, bagged = None, {}
        if anchors is not None:
            f = self._features(a, sents, S, sim_q, actionability, anchors)
            if self.holistic is not None:
                if self.holistic.content is not None:
                    f = self.holistic.content.complete(f[None], holistic.content_vector(qv, S)[None])[0]
                bagged = self.holistic.bag_scores(qv, S)
        return hol, tuple((i, s) for i, s, _ in item_scores), f, bagged

    # -- holistic features ----------------------------------------------------------------------
    def holistic_features(self, pairs: Sequence[tuple[str, str]],
                          anchors: Mapping[str, Sequence[str]] | None = None) -> np.ndarray:
        """(n, len(FEATURES)) item-independent features of (query, response) pairs
        (:data:`dpmv_lib.evaluate.holistic.FEATURES`), against ``anchors`` (default: the model's),
        the :data:`~dpmv_lib.evaluate.holistic.CONTENT` columns projected by the model's
        ``content`` (NaN where it has none)."""
        F, V = self.holistic_features_and_vectors(pairs, anchors)
        content = self.holistic.content if self.holistic is not None else None
        return content.complete(F, V) if content is not None else F

    def holistic_features_and_vectors(self, pairs: Sequence[tuple[str, str]],
                                      anchors: Mapping[str, Sequence[str]] | None = None
                                      ) -> tuple[np.ndarray, np.ndarray]:
        """(features, content vectors) of (query, response) pairs: :meth:`holistic_features` with
        NaN in the :data:`~dpmv_lib.evaluate.holistic.CONTENT` columns, and each pair's
        :func:`~dpmv_lib.evaluate.holistic.content_vector` (what a content projection is fitted on)."""
        F, V, _ = self.holistic_features_vectors_and_bags(pairs, anchors)
        return F, V

    def holistic_features_vectors_and_bags(self, pairs: Sequence[tuple[str, str]],
                                           anchors: Mapping[str, Sequence[str]] | None = None
                                           ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """:meth:`holistic_features_and_vectors` and each pair's sentence bag
        (:func:`~.sentence_bag.bag_rows` of its query's and its sentences' embeddings: what a
        sentence-bagged dimension reads, :class:`~.holistic.SentenceBagged`), from one embedding of
        every distinct text."""
        from .sentence_bag import bag_rows

        anchors = anchors if anchors is not None else (self.holistic.anchors if self.holistic else None)
        if anchors is None:
            raise ParameterError("holistic features need anchors (catalogue descriptions) or a holistic model")
        texts: dict[str, int] = {}
        for t in (*anchors["specific"], *anchors["generic"]):
            texts.setdefault(t, len(texts))
        for q, a in pairs:
            texts.setdefault(q, len(texts))
            for s in split_sentences(a):
                texts.setdefault(s, len(texts))
        emb = np.asarray(self.encoder.encode(list(texts)))
        mats = _anchor_rows(emb, texts, anchors)
        rows, vectors, bags = [], [], []
        for q, a in pairs:
            sents = split_sentences(a)
            S = emb[[texts[s] for s in sents]]
            qv = emb[texts[q]]
            rows.append(self._features(a, sents, S, S @ qv, action_rule(a, sents), mats))
            vectors.append(holistic.content_vector(qv, S))
            bags.append(bag_rows(qv, S))
        return (np.array(rows, float).reshape(len(rows), len(holistic.FEATURES)),
                np.array(vectors, float).reshape(len(rows), 2 * emb.shape[1]), bags)

    def _features(self, a: str, sents: Sequence[str], S: np.ndarray, sq: np.ndarray, act: float,
                  anchors: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """:data:`dpmv_lib.evaluate.holistic.FEATURES` of one turn with response ``a`` split into
        ``sents``, their embeddings ``S``, their cosines to the query ``sq`` and the rule
        actionability ``act`` (``anchors``: the embeddings of the "specific" and "generic"
        catalogue descriptions); the :data:`~dpmv_lib.evaluate.holistic.CONTENT` columns are NaN
        until projected (:meth:`~dpmv_lib.evaluate.holistic.ContentProjection.complete`)."""
        f = dict.fromkeys(holistic.FEATURES, 0.0)
        f.update(dict.fromkeys(holistic.CONTENT, math.nan))
        f["sentences"], f["log_words"] = float(len(sents)), math.log1p(len(a.split()))
        if sents:
            soft = np.interp(sq, (0.0,) + tuple(self.thresholds), (0.0, 1.0, 2.0, 3.0, 4.0))   # soft_grade
            sp = (S @ anchors[0].T).max(1)    # each sentence's best cosine to a specific description
            gn = (S @ anchors[1].T).max(1)    # ... and to a generic one
            margin = sp - gn
            lines = [s.lower() for s in sents]
            f.update(query_max=float(sq.max()), query_mean=float(sq.mean()),
                     query_soft=0.5 * float(soft.max()) + 0.5 * float(soft.mean()),
                     specific_max=float(sp.max()), generic_max=float(gn.max()),
                     specific_margin=float(margin.max()), specific_mean=float(sp.mean()),
                     query_specific=float((sq * sp).max()), query_specific_margin=float((sq * margin).max()),
                     echo=float((sq >= ECHO).any()), repeated=1.0 - len(set(lines)) / len(lines))
        truncated = is_truncated(a)
        usable = sents[:-1] if truncated else sents
        f.update(truncated=float(truncated), advice=float(sum(_is_advice(x) for x in usable)),
                 concrete=float(any(CONCRETE.search(x) for x in sents)),
                 concrete_sentences=float(sum(bool(CONCRETE.search(x)) for x in sents)),
                 placeholders=float(len(ARTIFACT.findall(a))), claim=float(bool(CLAIM.search(a))),
                 care=float(bool(CARE.search(a))), negations=float(sum(leads_with_negation(x) for x in sents)),
                 first_person=float(sum(bool(FIRST_PERSON.match(x)) for x in sents)),
                 third_person=float(sum(bool(THIRD_PERSON.match(x)) for x in sents)),
                 questions=float(sum(x.rstrip().endswith("?") for x in sents)), action_rule=float(act))
        return np.array([f[k] for k in holistic.FEATURES], float)


def _anchor_rows(emb: np.ndarray, texts: Mapping[str, int],
                 anchors: Mapping[str, Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """The embeddings of the "specific" and the "generic" catalogue descriptions."""
    return emb[[texts[t] for t in anchors["specific"]]], emb[[texts[t] for t in anchors["generic"]]]


@functools.cache
def _committed_model() -> "holistic.HolisticModel | None":
    """The committed holistic model (``data/judge_labels``), loaded once per process."""
    return holistic.load()


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
    """The response stops mid-sentence: its last character is not closing punctuation, unless
    it ends a list written without full stops (the last line and at least one earlier line are
    list items, and no earlier item ends in closing punctuation)."""
    t = text.rstrip()
    if not t or TERMINAL.search(t):
        return False
    items = [x.strip() for x in t.splitlines() if LIST_MARKER.match(x)]
    return not (LIST_MARKER.match(t.splitlines()[-1]) and len(items) >= 2
                and not any(TERMINAL.search(x) for x in items[:-1]))


def action_rule(text: str, sents: Sequence[str]) -> int:
    """The rule score of actionability (see :class:`RubricJudge`), unclipped: 2 for one advice
    sentence, +1 for two, +1 for a concrete detail, -2 if truncated, -2 for a placeholder."""
    truncated = is_truncated(text)
    usable = sents[:-1] if truncated else sents       # an unfinished last sentence is no usable step
    n_adv = sum(1 for x in usable if _is_advice(x) and not ARTIFACT.search(x))
    concrete = any(CONCRETE.search(x) for x in sents)   # sentences: a list's "1." is no detail
    return ((2 if n_adv >= 1 else 0) + (1 if n_adv >= 2 else 0) + (1 if concrete else 0)
            - (2 if truncated else 0) - (2 if ARTIFACT.search(text) else 0))


def _is_advice(sentence: str) -> bool:
    """Advice: starts with an imperative verb (also after a frame such as "The key point:" or
    "Since you mentioned X,"), or has an advice cue ("try", "you could", "I'd suggest")."""
    for part in (sentence, *[x for x in re.split(r"[:;,]\s+", sentence)[1:]]):
        words = re.findall(r"[a-z']+", part.lower())
        if words and words[0] in IMPERATIVE:
            return True
    return bool(ADVICE_CUES.search(sentence))
