"""A labelled degradation set for the utility judge and its evaluation.

Originals are real responses of this package's instrument: the surrogate responder's answers to
PairedMem target-turn queries under the ``RawReadSet`` method, on both store sides, each with the
gold rubric of its (pair, side, turn) (:func:`dpmv_lib.evaluate.rubric.build_rubric`). Each original gets
controlled variants, built without the judge in the loop and **without mirroring any of its rules**
(negated, truncated, placeholder or "Since you mentioned" variants would each be caught by a
matching rule of the judge, and so measure the rules, not the judge):

* ``off_topic``   - the same-side original of another item (another attribute, a query routed to
  another slot domain);
* ``other_query`` - the same user's answer to another query of the same conversation (a turn routed
  to another slot domain): a good answer, written for a different question;
* ``other_user``  - the surrogate's answer to *this* query with another user's memory (the
  RawReadSet conditioning of a pair whose attribute shares no view of the slot with this one, at a
  target turn routed to the same slot, the first whose memory changes the answer): fluent, on-topic
  personalisation from facts this user never gave;
* ``wrong_advice`` - the original's advice sentences replaced by a plain, naturally worded
  suggestion that is wrong for the item's attribute (:data:`WRONG_ADVICE`, hand-written: no
  negation, no template slot, no truncation);
* ``generic``     - a stock answer that fits any query.

:data:`INTENDED` maps each variant to the judge dimensions it must lower. :func:`evaluate_judge`
scores originals and variants with one judge and reports, per (variant, dimension), the share of
items where the variant scores strictly lower than its original (ties count as failures) and the
mean score gap (original - variant, on 0-4).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..common.io import read_jsonl
from ..core.errors import ParameterError

VARIANTS = ("off_topic", "other_query", "other_user", "wrong_advice", "generic")
# variant -> the judge dimensions (dpmv_lib.evaluate.rubric.DIMENSIONS) it must lower
INTENDED: dict[str, tuple[str, ...]] = {
    "off_topic": ("relevance", "personalisation"),
    "other_query": ("relevance",),
    "other_user": ("correctness", "personalisation"),
    "wrong_advice": ("correctness",),
    "generic": ("personalisation",),
}
#: naturally worded suggestions that are wrong for a user with the attribute (hand-written; the
#: judge never sees this list)
WRONG_ADVICE: dict[str, tuple[str, ...]] = {
    "diabetes": ("Treat yourself to a big bowl of sweetened cereal and a large fruit juice to get going.",
                 "Have a couple of pastries and a sugary coffee in place of a proper meal."),
    "pregnancy": ("A plate of sushi with raw fish and a glass of wine would be a nice way to relax tonight.",
                  "Go for an intense contact sport session and a long hot-tub soak afterwards."),
    "debt": ("Open another credit card and put the whole thing on it; the payments can wait a few months.",
             "Take out a payday loan for the extras and treat yourself to the premium option."),
    "job_loss": ("Book the expensive trip now and pay for it with your next salary as usual.",
                 "Upgrade to the priciest plan; your regular paycheck will easily cover it."),
}
GENERIC_ANSWERS = (
    "Here is a practical way to approach it. Start with one small, concrete step and build from there. "
    "Happy to adjust this if your plans change.",
    "Good question. Everyone's situation is different, so go with what feels right for you and keep it simple.",
    "Sure, let's keep this practical. Plan a little ahead so the choice is easy in the moment.",
    "That depends on a lot of things. Take it one step at a time and see what works for you.",
)


def _sentences(text: str) -> list[str]:
    from ..evaluate.rubric_judge import split_sentences
    return split_sentences(text)


def make_variants(original: str, *, off_topic: str, other_query: str, other_user: str, attribute: str,
                  k: int) -> dict[str, str]:
    """The variants of one M-side original (see the module docstring)."""
    sents = _sentences(original)
    if len(sents) < 2:
        raise ParameterError(f"an original needs >= 2 sentences: {original!r}")
    if attribute not in WRONG_ADVICE:
        raise ParameterError(f"no wrong advice written for attribute {attribute!r}")
    last = len(sents) - 1 if len(sents) >= 3 else len(sents)   # the closing courtesy stays as it is
    wrong = WRONG_ADVICE[attribute][k % len(WRONG_ADVICE[attribute])]
    return {"off_topic": off_topic, "other_query": other_query, "other_user": other_user,
            "wrong_advice": " ".join([sents[0], wrong] + sents[last:]),
            "generic": GENERIC_ANSWERS[k % len(GENERIC_ANSWERS)]}


def build_degradation_set(data_dir: str | Path = "data", n_pairs: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    """Records {item, pair_id, attribute, side, turn, slot, query, rubric, original, variants}: one
    per (pair, side) of ``n_pairs`` stratified PairedMem pairs at the pair's first target turn whose
    two responses have >= 2 sentences. M items (the full-information answer, which addresses the
    query and the user's target need) carry every variant; M' items carry only ``other_user``
    (their originals are often stock answers, the surrogate's behaviour without the target
    evidence: another user's personalisation is what their rubric's unsupported items describe).
    Deterministic given the data and ``seed``."""
    from .rq1 import select_pairs
    from ..bench.datasets import load_benchmark
    from ..evaluate.rubric import behaviour_view, build_rubric
    from ..generate.generation import InterfaceParams, generate_transcripts
    from ..generate.responders import Prompt, make_responder

    bench = select_pairs(load_benchmark("pairedmem", str(data_dir)), n_pairs, seed)
    resp = make_responder("surrogate", list(bench.policies.values()))
    tr = generate_transcripts(bench, resp, ("RawReadSet",), seeds=(0,), turns=16,
                              params=InterfaceParams(plan_horizon=16), progress=False)
    text = {(r.pair_id, r.side, int(r.turn)): r.response for r in tr.itertuples()}
    cond = {(r.pair_id, r.side, int(r.turn)): r.conditioning for r in tr.itertuples()}
    domain = lambda slot: slot.split(".")[0]  # noqa: E731
    base = []
    for pair in bench.pairs:
        for t in pair.turns[:16]:
            if t.query.qtype != "target" or not t.gold.unsupported:
                continue
            m, mp = text[(pair.pair_id, "M", t.index)], text[(pair.pair_id, "M'", t.index)]
            if len(_sentences(m)) >= 2 and len(_sentences(mp)) >= 2 and m != mp:
                base.append((pair, t))
                break
    views: dict[str, set[str]] = {}
    for b in bench.behaviours.values():
        if behaviour_view(b):
            views.setdefault(b.attribute, set()).add(behaviour_view(b))
    other_user = []
    for k, (pair, t) in enumerate(base):
        # another user whose attribute shares no view of this slot with this one (a shared view's
        # advice would be right for this user too: e.g. debt and job loss on finance.strict_budget)
        mine = {v for v in views.get(pair.attribute, set()) if domain(v) == domain(t.slot)}
        cands = [(q, u) for q in bench.pairs if q.attribute != pair.attribute
                 and not mine & {v for v in views.get(q.attribute, set()) if domain(v) == domain(t.slot)}
                 for u in q.turns[:16] if u.slot == t.slot and u.query.qtype == "target"]
        cands = cands[k % len(cands):] + cands[:k % len(cands)] if cands else []
        plain = resp.respond([Prompt(t.query.text, "", (pair.pair_id, t.index, 0))])[0]
        for q, u in cands:  # the first memory that changes the answer (the surrogate used it)
            ans = resp.respond([Prompt(t.query.text, cond[(q.pair_id, "M", u.index)], (pair.pair_id, t.index, 0))])[0]
            if ans != plain:
                other_user.append(ans)
                break
        else:
            raise ParameterError(f"no other user's memory on slot {t.slot} changes the answer to {t.query.text!r}")
    recs = []
    for k, (pair, t) in enumerate(base):
        other_pair, other_t = next(base[(k + j) % len(base)] for j in range(1, len(base) + 1)
                                   if base[(k + j) % len(base)][0].attribute != pair.attribute
                                   and domain(base[(k + j) % len(base)][1].slot) != domain(t.slot))
        later = next(u for u in pair.turns[:16] if domain(u.slot) != domain(t.slot))
        for side in ("M", "M'"):
            rub = build_rubric(pair, side, bench.behaviours, horizon=t.index + 1)
            items = [{"item_id": i.item_id, "description": i.description, "role": i.role,
                      "contrast": list(i.contrast)} for i in rub.items_at(t.index)]
            orig = text[(pair.pair_id, side, t.index)]
            variants = {"other_user": other_user[k]} if side == "M'" else make_variants(
                orig, off_topic=text[(other_pair.pair_id, side, other_t.index)],
                other_query=text[(pair.pair_id, side, later.index)], other_user=other_user[k],
                attribute=pair.attribute, k=k)
            recs.append({"item": f"{pair.pair_id}:{side}:{t.index}", "pair_id": pair.pair_id,
                         "attribute": pair.attribute, "side": side, "turn": t.index, "slot": t.slot,
                         "query": t.query.text, "rubric": items, "original": orig, "variants": variants})
    return recs


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

    records = read_jsonl(DEFAULT_SET) if records is None else list(records)
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


def degradation(session: Any) -> Any:
    """Notebook step: :func:`evaluate_judge` of the run's rubric judge
    (:func:`dpmv_lib.experiments.rq1.run_judge`) on the degradation set; the intended
    (variant, dimension) rows are written to ``tables/<notebook>_judge_degradation``."""
    from .result import Result
    from .rq1 import run_judge

    judge = run_judge(session)
    if judge is None:
        return Result("The judge on the degradation set", "This run's judge is not the rubric judge: the judge checks "
                                                          "run for the rubric judge only.")
    deg = evaluate_judge(judge)
    intended = deg.intended()
    session.write_table(f"{session.notebook}_judge_degradation", intended)
    weak = intended.loc[intended["accuracy"].idxmin()]
    finding = (f"Over the {len(intended)} intended (variant, dimension) checks the judge scores the variant strictly "
               f"lower than its original on {intended['accuracy'].min():.2f} to {intended['accuracy'].max():.2f} of "
               f"the items; the weakest check is {weak['variant']} on {weak['dimension']} "
               f"(share {weak['accuracy']:.2f}, mean gap {weak['mean_gap']:.2f} on the 0-4 scale).")
    gaps = deg.summary.pivot(index="variant", columns="dimension", values="mean_gap").reset_index()
    return Result(f"The judge on the degradation set ({deg.judge_id})", finding,
                  tables={"intended checks": intended, "mean gap (original - variant) per dimension": gaps})
