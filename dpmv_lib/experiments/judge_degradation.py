"""A labelled degradation set for the utility judge (issue 12, section 3) and its evaluation.

Originals are real responses of this package's instrument: the surrogate responder's answers to
PairedMem target-turn queries under the ``RawReadSet`` method, on both store sides, each with the
gold rubric of its (pair, side, turn) (:func:`dpmv_lib.evaluate.rubric.build_rubric`). Each original gets
controlled variants, built by fixed rules from the original alone (no judge in the loop):

* ``off_topic``  - the same-side original of another item (another attribute, a query routed to
  another slot domain);
* ``wrong``      - every sentence between the opener and the closing line reversed ("prefer X" -> "avoid X",
  "keep X" -> "stop keeping X", otherwise "do not X"): advice that is wrong for the query;
* ``truncated``  - cut mid-sentence at about 45% of its characters (no closing punctuation);
* ``placeholder`` - after the opener, each sentence keeps its first words and ends in template
  slots (``[insert specific details]``, ``{user_preference}``);
* ``over_personal`` (M' side only) - the M' original with one inserted personal claim, "Since
  you mentioned <cue>, <advice>", where the advice is the policy view of the turn's unsupported
  target-specific behaviour and the cue one of its public cue phrases: what the user's
  information on M' does not support (the rubric's "unsupported" items);
* ``generic``    - a stock answer that fits any query.

:data:`INTENDED` maps each variant to the judge dimensions it must lower. :func:`evaluate_judge`
scores originals and variants with one judge and reports, per (variant, dimension), the share of
items where the variant scores strictly lower than its original (ties count as failures) and the
mean score gap (original - variant, on 0-4).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError

VARIANTS = ("off_topic", "wrong", "truncated", "placeholder", "over_personal", "generic")
# variant -> the judge dimensions (dpmv_lib.evaluate.rubric.DIMENSIONS) it must lower
INTENDED: dict[str, tuple[str, ...]] = {
    "off_topic": ("relevance", "personalisation"),
    "wrong": ("correctness",),
    "truncated": ("actionability",),
    "placeholder": ("correctness", "actionability"),
    "over_personal": ("correctness",),
    "generic": ("personalisation",),
}
GENERIC_ANSWERS = (
    "Here is a practical way to approach it. Start with one small, concrete step and build from there. "
    "Happy to adjust this if your plans change.",
    "Good question. Everyone's situation is different, so go with what feels right for you and keep it simple.",
    "Sure, let's keep this practical. Plan a little ahead so the choice is easy in the moment.",
    "That depends on a lot of things. Take it one step at a time and see what works for you.",
)
REVERSE = (("leave room for", "leave no room for"), ("focus on", "ignore"), ("stick to", "ignore"),
           ("prefer", "avoid"), ("keep", "stop keeping"), ("build", "leave out"), ("pace", "rush"),
           ("plan", "skip planning"), ("suggest", "never suggest"), ("choose", "avoid"), ("pick", "avoid"),
           ("start", "never start"), ("batch", "spread out"), ("add", "drop"), ("include", "exclude"),
           ("try", "avoid"), ("use", "never use"), ("protect", "give up"), ("set", "never set"),
           ("limit", "stop limiting"), ("reduce", "increase"), ("cut", "increase"), ("avoid", "go for"))
_FRAME = re.compile(r"^(.*?(?::|,)\s+)(?=[a-z])")


def _sentences(text: str) -> list[str]:
    from ..evaluate.rubric_judge import split_sentences
    return split_sentences(text)


def reverse_advice(sentence: str) -> str:
    """The sentence with its advice reversed: the clause after a frame ("The key point: ",
    "Since you mentioned X, ") starts with the opposite verb, or with "do not"."""
    m = _FRAME.match(sentence)
    head, body = (m.group(1), sentence[m.end():]) if m else ("", sentence[0].lower() + sentence[1:])
    low = body.lower()
    for verb, opp in REVERSE:
        if low.startswith(verb + " "):
            body = opp + body[len(verb):]
            break
    else:
        body = "do not " + body
    out = head + body
    return out[0].upper() + out[1:]


def make_variants(original: str, other: str, claim: str | None, k: int) -> dict[str, str]:
    """The variants of one original (see the module docstring). ``other``: the off-topic
    replacement; ``claim``: an unsupported personal claim (M' items: only over_personal)."""
    sents = _sentences(original)
    if len(sents) < 2:
        raise ParameterError(f"an original needs >= 2 sentences: {original!r}")
    words = original.split()
    last = len(sents) - 1 if len(sents) >= 3 else len(sents)   # the closing courtesy stays as it is
    cut = " ".join(words[:max(3, int(round(len(words) * 0.45)))]).rstrip(".!?,;:")
    out = {
        "off_topic": other,
        "wrong": " ".join([sents[0]] + [reverse_advice(s) for s in sents[1:last]] + sents[last:]),
        "truncated": cut,
        "placeholder": " ".join([sents[0]] + [" ".join(s.split()[:3]) + " [insert specific details]."
                                              for s in sents[1:]] + ["Adjust for {user_preference}."]),
        "generic": GENERIC_ANSWERS[k % len(GENERIC_ANSWERS)],
    }
    if claim is not None:   # M' item: only the over-personalised variant (see build_degradation_set)
        return {"over_personal": " ".join([sents[0], claim] + sents[1:])}
    return out


def unsupported_claim(policy: Any, behaviour_id: str, k: int) -> str:
    """"Since you mentioned <cue>, <view text>": the policy view of an unsupported behaviour
    (``unsup:<attribute>:<view id>``) asserted from one of its public cue phrases, as the
    surrogate's over-reach does (R3 in :mod:`dpmv_lib.generate.responders.surrogate`)."""
    vid = behaviour_id.split(":")[-1]
    for slot in policy.slots:
        for v in slot.views:
            if v.id == vid and v.cues:
                return f"Since you mentioned {v.cues[k % len(v.cues)]}, {v.text[0].lower()}{v.text[1:]}"
    raise ParameterError(f"no policy view with cues for behaviour {behaviour_id!r}")


def build_degradation_set(data_dir: str | Path = "data", n_pairs: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    """Records {item, pair_id, attribute, side, turn, slot, query, rubric, original, variants}: one
    per (pair, side) of ``n_pairs`` stratified PairedMem pairs at the pair's first target turn whose
    two responses have >= 2 sentences. M items (the full-information answer, which addresses the
    query and the user's target need) carry every variant but ``over_personal``; M' items carry
    only ``over_personal`` (their originals are often stock answers, the surrogate's behaviour
    without the target evidence, so they are no fair originals for the other variants).
    Deterministic given the data and ``seed``."""
    from .rq1 import select_pairs
    from ..bench.datasets import load_benchmark
    from ..generate.generation import InterfaceParams, generate_transcripts
    from ..evaluate.rubric import build_rubric
    from ..generate.responders import make_responder

    bench = select_pairs(load_benchmark("pairedmem", str(data_dir)), n_pairs, seed)
    resp = make_responder("surrogate", list(bench.policies.values()))
    tr = generate_transcripts(bench, resp, ("RawReadSet",), seeds=(0,), turns=16,
                              params=InterfaceParams(plan_horizon=16), progress=False)
    text = {(r.pair_id, r.side, int(r.turn)): r.response for r in tr.itertuples()}
    base = []
    for pair in bench.pairs:
        for t in pair.turns[:16]:
            if t.query.qtype != "target" or not t.gold.unsupported:
                continue
            m, mp = text[(pair.pair_id, "M", t.index)], text[(pair.pair_id, "M'", t.index)]
            if len(_sentences(m)) >= 2 and len(_sentences(mp)) >= 2 and m != mp:
                base.append((pair, t))
                break
    recs = []
    for k, (pair, t) in enumerate(base):
        other_pair, other_t = next(base[(k + j) % len(base)] for j in range(1, len(base) + 1)
                                   if base[(k + j) % len(base)][0].attribute != pair.attribute
                                   and base[(k + j) % len(base)][1].slot.split(".")[0] != t.slot.split(".")[0])
        for side in ("M", "M'"):
            rub = build_rubric(pair, side, bench.behaviours, horizon=t.index + 1)
            items = [{"item_id": i.item_id, "description": i.description, "role": i.role,
                      "contrast": list(i.contrast)} for i in rub.items_at(t.index)]
            orig = text[(pair.pair_id, side, t.index)]
            other = text[(other_pair.pair_id, side, other_t.index)]
            claim = unsupported_claim(bench.policies[pair.policy_id], t.gold.unsupported[0], k) if side == "M'" else None
            recs.append({"item": f"{pair.pair_id}:{side}:{t.index}", "pair_id": pair.pair_id,
                         "attribute": pair.attribute, "side": side, "turn": t.index, "slot": t.slot,
                         "query": t.query.text, "rubric": items, "original": orig,
                         "variants": make_variants(orig, other, claim, k)})
    return recs


def write_jsonl(records: Sequence[dict[str, Any]], path: str | Path) -> None:
    """One JSON record per line, written atomically (tmp + rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


DEFAULT_SET = Path(__file__).resolve().parents[2] / "tests" / "data" / "judge_degradation.jsonl"


@dataclass(frozen=True)
class DegradationReport:
    """``summary``: per (variant, dimension) n, accuracy (variant strictly lower), mean gap
    (original - variant) and whether the dimension is intended; ``scores``: every judged text."""

    judge_id: str
    summary: pd.DataFrame
    scores: pd.DataFrame

    def intended(self) -> pd.DataFrame:
        return self.summary[self.summary["intended"]].reset_index(drop=True)


def evaluate_judge(judge: Any, records: Sequence[dict[str, Any]] | None = None) -> DegradationReport:
    """Score every original and variant with ``judge`` (one single-turn rubric per item) and
    compare each variant with its original on every dimension."""
    from ..evaluate.rubric import DIMENSIONS, Rubric, RubricItem

    records = load_jsonl(DEFAULT_SET) if records is None else list(records)
    if not records:
        raise ParameterError("the degradation set is empty")
    jobs, keys = [], []
    for r in records:
        items = tuple(RubricItem(0, i["item_id"], i["description"], i["role"], tuple(i["contrast"]))
                      for i in r["rubric"])
        rub = Rubric(f"degradation:{r['item']}", (r["query"],), items)
        for name, text in [("original", r["original"])] + sorted(r["variants"].items()):
            jobs.append((rub, (text,)))
            keys.append((r["item"], r["side"], name))
    res = judge.judge_many(jobs)
    rows = [{"item": i, "side": s, "variant": v, "failed": j.failed, **{d: j.scores.get(d, np.nan) for d in DIMENSIONS}}
            for (i, s, v), j in zip(keys, res)]
    scores = pd.DataFrame(rows)
    orig = scores[scores["variant"] == "original"].set_index("item")
    recs = []
    for v in VARIANTS:
        sub = scores[scores["variant"] == v].set_index("item")
        if sub.empty:
            continue
        for d in DIMENSIONS:
            o, x = orig.loc[sub.index, d].to_numpy(float), sub[d].to_numpy(float)
            ok = ~(np.isnan(o) | np.isnan(x))
            recs.append({"variant": v, "dimension": d, "intended": d in INTENDED[v], "n": int(ok.sum()),
                         "accuracy": float(np.mean(x[ok] < o[ok])) if ok.any() else np.nan,
                         "mean_gap": float(np.mean(o[ok] - x[ok])) if ok.any() else np.nan})
    return DegradationReport(str(getattr(judge, "id", "judge")), pd.DataFrame(recs), scores)
