"""Verbatim restatements of the policy views, graded by the rubric judge (paper C.5
"Utility judging": each applicable gold behaviour is scored 0-4).

A target-specific gold behaviour ``req:<attribute>:<view>`` / ``unsup:<attribute>:<view>``
describes what a response shows when it follows the public policy view ``<view>``. A response
that repeats that view's text word for word therefore shows the behaviour, whichever attribute
the item belongs to and whether or not another attribute links to the same view. This module
builds such responses from the public catalogue alone (no responder, no judge in the loop):

* phrasings: the view text in each of the surrogate responder's view templates and cue-echo
  templates (:mod:`dpmv_lib.generate.responders.surrogate`, rules R2/R3), so "I'd <text>",
  "Since you mentioned <cue>, <text>", ...;
* frames (:data:`FRAMES`): the phrasing alone, inside a short neutral reply (an opening and a
  closing line of the surrogate's banks), with a generic advice sentence as well, and as the
  first line of a bullet or numbered list without full stops;

grades every target-specific rubric item of a benchmark (:func:`dpmv_lib.evaluate.rubric.build_rubric`)
on the restatements of its own view, and reports per (view, attribute) the share graded
>= :data:`PASS_GRADE` (:meth:`RestatementReport.summary`). With ``controls=True`` each item is
also graded on restatements of the *other* views of its slot (generic ones included): a judge
that passes every restatement should still grade these low. Deterministic given the benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pandas as pd

from ..bench.benchmark import Benchmark
from ..core.errors import ParameterError
from ..evaluate.rubric import Judge, Rubric, RubricItem, behaviour_view, build_rubric
from ..generate.responders.surrogate import CLOSINGS, ECHO_TEMPLATES, GENERIC_BODY, OPENINGS, VIEW_TEMPLATES

PASS_GRADE = 2
# frame -> template over {open} (an opening line), {s} (the phrasing), {body} (a generic advice
# sentence), {close} (a closing line); list frames drop the full stops of their lines.
FRAMES: Mapping[str, str] = {
    "alone": "{s}",
    "reply": "{open} {s} {close}",
    "reply_body": "{open} {s} {body} {close}",
    "bullets": "A few ideas:\n- {s}\n- {body}",
    "numbered": "A few ideas:\n1. {s}\n2) {body}",
}
_LIST_FRAMES = frozenset({"bullets", "numbered"})


@dataclass(frozen=True)
class RestatementReport:
    """Grades of restatement responses. ``grades``: one row per (item, response) with columns
    view, attribute, n_attributes (attributes linking to the view), role, item_id, restated (the
    view whose text the response repeats), own (restated == view; False for control rows),
    phrasing, frame, response and grade (the judge's 0-4 item score); ``judge_id``: the judge used."""

    grades: pd.DataFrame
    judge_id: str

    def summary(self) -> pd.DataFrame:
        """Per (view, attribute) over restatements of the item's own view: n, share_ge2 (share
        graded >= :data:`PASS_GRADE`), mean_grade, n_attributes and shared (another attribute
        links to the same view); with control rows also control_n and control_share_ge2."""
        g = self.grades.assign(ok=self.grades["grade"] >= PASS_GRADE)
        key = ["view", "attribute"]
        out = (g[g["own"]].groupby(key, sort=True)
               .agg(n=("grade", "size"), share_ge2=("ok", "mean"), mean_grade=("grade", "mean"),
                    n_attributes=("n_attributes", "first"))
               .reset_index())
        out["shared"] = out["n_attributes"] > 1
        if not g["own"].all():
            ctl = g[~g["own"]].groupby(key).agg(control_n=("ok", "size"), control_share_ge2=("ok", "mean"))
            out = out.merge(ctl.reset_index(), on=key, how="left")
        return out

    def by_sharing(self) -> pd.DataFrame:
        """Pooled over items: n, share_ge2 and mean_grade for views used by one attribute and by several."""
        own = self.grades[self.grades["own"]]
        g = own.assign(ok=own["grade"] >= PASS_GRADE, shared=own["n_attributes"] > 1)
        return (g.groupby("shared").agg(n=("grade", "size"), share_ge2=("ok", "mean"),
                                        mean_grade=("grade", "mean")).reset_index())


def view_texts(bench: Benchmark) -> dict[str, tuple[str, tuple[str, ...]]]:
    """view id -> (text, cue phrases) over every policy of the benchmark; a view id with two
    different texts is an error (a restatement would be ambiguous)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for pol in bench.policies.values():
        for slot in pol.slots:
            for v in slot.views:
                if v.id in out and out[v.id][0] != v.text:
                    raise ParameterError(f"view {v.id!r} has two texts: {out[v.id][0]!r} and {v.text!r}")
                out.setdefault(v.id, (v.text, tuple(v.cues)))
    return out


def phrasings(text: str, cues: tuple[str, ...]) -> dict[str, str]:
    """name -> one sentence that repeats ``text`` word for word: every surrogate view template
    and, when the view has cue phrases, every cue-echo template with its first cue."""
    t = text.strip()
    lc = t[:1].lower() + t[1:]
    out = {f"view:{i}": tpl.format(T=t, t=lc) for i, tpl in enumerate(VIEW_TEMPLATES)}
    if cues:
        out.update({f"echo:{i}": tpl.format(cue=cues[0], t=lc) for i, tpl in enumerate(ECHO_TEMPLATES)})
    return {k: s if s[-1:] in ".!?" else s + "." for k, s in out.items()}


def restatements(text: str, cues: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(phrasing, frame, response) for every phrasing of a view text in every :data:`FRAMES` frame;
    the neutral lines rotate through the surrogate's banks."""
    if not text.strip():
        raise ParameterError("a view text to restate must not be empty")
    out = []
    for k, (name, s) in enumerate(phrasings(text, cues).items()):
        body = GENERIC_BODY[k % len(GENERIC_BODY)]
        fill = dict(open=OPENINGS[k % len(OPENINGS)], close=CLOSINGS[k % len(CLOSINGS)])
        for frame, tpl in FRAMES.items():
            if frame in _LIST_FRAMES:
                out.append((name, frame, tpl.format(s=s.rstrip("."), body=body.rstrip("."), **fill)))
            else:
                out.append((name, frame, tpl.format(s=s, body=body, **fill)))
    return out


def view_attributes(bench: Benchmark) -> dict[str, set[str]]:
    """view id -> the attributes whose target-specific behaviours describe it (the catalogue's links)."""
    out: dict[str, set[str]] = {}
    for b in bench.behaviours.values():
        if b.kind != "generic" and behaviour_view(b):
            out.setdefault(behaviour_view(b), set()).add(b.attribute)
    return out


def target_items(bench: Benchmark, horizon: int = 16) -> list[tuple[RubricItem, str]]:
    """Every distinct target-specific rubric item (role "apply" on M, "unsupported" on M') of the
    benchmark's rubrics over ``horizon`` turns, with the query of its first turn."""
    seen: dict[tuple, tuple[RubricItem, str]] = {}
    for pair in bench.pairs:
        for side in ("M", "M'"):
            r = build_rubric(pair, side, bench.behaviours, min(horizon, len(pair.turns)))
            for it in r.items:
                b = bench.behaviours[it.item_id]
                key = (it.item_id, it.role, it.description, it.contrast)
                if b.kind != "generic" and key not in seen:
                    seen[key] = (it, r.queries[it.turn])
    return list(seen.values())


def restatement_report(bench: Benchmark, judge: Judge, horizon: int = 16, *,
                       controls: bool = False) -> RestatementReport:
    """Grade every target-specific item of ``bench`` on the :func:`restatements` of its own view.

    Parameters
    ----------
    bench : Benchmark
        A loaded track (e.g. the profile's PairedMem subset); its policies give the view texts.
    judge : Judge
        Anything with ``judge_many(jobs)`` and ``id`` (e.g. :class:`dpmv_lib.evaluate.rubric_judge.RubricJudge`).
    horizon : int
        Turns of each pair whose rubric items are collected (C.5: T = 16).
    controls : bool
        Also grade each item on restatements of the other views of its slot (rows with
        ``own=False``; about five times as many judgements).

    Returns
    -------
    RestatementReport
        One graded row per (item, restatement); see :meth:`RestatementReport.summary`.

    Raises
    ------
    ParameterError
        If ``horizon`` < 1, the benchmark has no target-specific item, or an item's view is not
        a view of the benchmark's policies.
    """
    if horizon < 1:
        raise ParameterError(f"horizon must be >= 1, got {horizon}")
    texts = view_texts(bench)
    slot_of = {v.id: sl.name for pol in bench.policies.values() for sl in pol.slots for v in sl.views}
    links = view_attributes(bench)
    rows, jobs = [], []
    for it, query in target_items(bench, horizon):
        b = bench.behaviours[it.item_id]
        view = behaviour_view(b)
        if view not in texts:
            raise ParameterError(f"item {it.item_id!r} names no view of the benchmark's policies "
                                 f"(ids are req:<attribute>:<view> / unsup:<attribute>:<view>)")
        rubric = Rubric(f"restate:{it.item_id}:{it.role}", (query,),
                        (RubricItem(0, it.item_id, it.description, it.role, it.contrast),))
        shown = [v for v in texts if v == view or (controls and slot_of[v] == slot_of[view])]
        for restated in shown:
            for name, frame, resp in restatements(*texts[restated]):
                rows.append(dict(view=view, attribute=b.attribute, n_attributes=len(links[view]), role=it.role,
                                 item_id=it.item_id, restated=restated, own=restated == view, phrasing=name,
                                 frame=frame, response=resp))
                jobs.append((rubric, (resp,)))
    if not jobs:
        raise ParameterError(f"benchmark {bench.track!r} has no target-specific rubric item in {horizon} turns")
    grades = pd.DataFrame(rows)
    grades["grade"] = [j.items[f"0:{r['item_id']}"] for j, r in zip(judge.judge_many(jobs), rows)]
    return RestatementReport(grades, str(judge.id))


def restatement(session: Any, goal: float = 0.95) -> Any:
    """Notebook step: :func:`restatement_report` of the run's rubric judge on the run's PairedMem
    pairs; every (view, attribute) row is written to ``tables/<notebook>_judge_restatement``, the
    notebook shows the pooled rows and the rows below ``goal``."""
    from ..bench.datasets import load_benchmark
    from .result import Result
    from .rq1 import run_judge, select_pairs

    judge = run_judge(session)
    if judge is None:
        return Result("Verbatim restatements", "This run's judge is not the rubric judge: the judge checks run for "
                                               "the rubric judge only.")
    pm = select_pairs(load_benchmark("pairedmem", session.cfg.data_dir), session.profile.pairs, session.cfg.seed)
    rep = restatement_report(pm, judge)
    summ = rep.summary()
    session.write_table(f"{session.notebook}_judge_restatement", summ)
    below = summ[summ["share_ge2"] < goal]
    low = summ.loc[summ["share_ge2"].idxmin()]
    finding = (f"{len(summ) - len(below)} of {len(summ)} (view, attribute) rows are graded >= {PASS_GRADE} on at "
               f"least {goal:.0%} of their restatements (goal: every row); the lowest share is {low['share_ge2']:.2f} "
               f"({low['view']}, {low['attribute']}).")
    out = Result(f"Verbatim restatements of every view ({rep.judge_id})", finding,
                 tables={"pooled, by whether another attribute links to the view": rep.by_sharing()})
    if len(below):
        out.show_table(f"rows below {goal:.0%} (all {len(summ)} rows: tables/{session.notebook}_judge_restatement.csv)",
                       below.sort_values("share_ge2").head(12))
    return out
