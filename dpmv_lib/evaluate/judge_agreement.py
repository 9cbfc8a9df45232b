"""The judge against independent labels (paper C.5 "Utility judging").

``data/judge_labels/`` holds units (one response at one turn x one rubric item of that turn, from
surrogate and SmolLM2 transcripts, all methods, both tracks and sides) labelled by reading, by
annotators who neither ran the judge nor read its rules (``GUIDE.md``, ``README.md``). This
module

* re-judges every unit in its context: the pair's real rubric (:func:`~.rubric.build_rubric`,
  contrasts included) restricted to the unit's turn, with the unit's response (:func:`judge_units`);
* compares the judge with the labels (:func:`agreement`): accuracy, Cohen's kappa
  (``sklearn.metrics.cohen_kappa_score``) and precision / recall of "behaviour shown" (grade >= 2)
  for tRec items (target-required, side M), Unsup items (unsupported, side M') and generic items,
  and for each holistic dimension (relevance, correctness, actionability, personalisation:
  grade >= 2 as the positive class, plus the quadratic-weighted kappa on the 0-4 grades);
* measures the labels' own reliability: the same statistics between two annotators on the
  doubly-labelled subset (:func:`inter_annotator`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from ..bench.benchmark import Benchmark
from ..common.paths import project_root
from ..core.errors import ParameterError
from .rubric import DIMENSIONS, Judge, Rubric, build_rubric

SHOWN = 2  # a grade >= 2 means "the behaviour is shown" (GUIDE.md)
KINDS = {"target_required": "tRec items", "unsupported": "Unsup items", "generic": "generic items"}
LABEL_COLUMNS = ("shown",) + DIMENSIONS


def labels_dir(label_dir: str | Path | None = None) -> Path:
    """``label_dir``, or the committed ``data/judge_labels`` of the project (not of the cwd)."""
    return Path(label_dir) if label_dir is not None else project_root() / "data" / "judge_labels"


def annotator_name(label_file: str) -> str:
    """The annotator name :func:`load_units` takes for a label file ``labels_<name>.jsonl``."""
    return label_file.removeprefix("labels_").removesuffix(".jsonl")


def load_units(label_dir: str | Path | None = None, annotator: str = "a",
               sample: str = "sample.jsonl") -> pd.DataFrame:
    """``sample`` (default ``sample.jsonl``) joined with ``labels_<annotator>.jsonl`` (only the
    labelled units); e.g. ``load_units(d, "extra_a", "sample_extra.jsonl")`` for the extension.

    Raises
    ------
    ParameterError
        A missing file, a label for an unknown unit, a duplicate, or a grade outside 0-4.
    """
    d = labels_dir(label_dir)
    for f in (sample, f"labels_{annotator}.jsonl"):
        if not (d / f).exists():
            raise ParameterError(f"judge labels: {d / f} not found")
    units = pd.read_json(d / sample, lines=True)
    labels = pd.read_json(d / f"labels_{annotator}.jsonl", lines=True)
    if labels["unit_id"].duplicated().any():
        dup = labels.loc[labels["unit_id"].duplicated(), "unit_id"].tolist()[:5]
        raise ParameterError(f"labels_{annotator}: duplicate unit ids {dup}")
    unknown = set(labels["unit_id"]) - set(units["unit_id"])
    if unknown:
        raise ParameterError(f"labels_{annotator}: units not in the sample: {sorted(unknown)[:5]}")
    for c in LABEL_COLUMNS:
        if c not in labels.columns or not labels[c].between(0, 4).all():
            raise ParameterError(f"labels_{annotator}: column {c!r} missing or outside 0-4")
    return units.merge(labels[["unit_id", *LABEL_COLUMNS]], on="unit_id", how="inner")


def _unit_rubric(full: Rubric, turn: int, item_id: str, query: str) -> Rubric:
    one = full.at_turn(turn)
    items = tuple(i for i in one.items if i.item_id == item_id)
    if not items:
        raise ParameterError(f"rubric {full.rubric_id}: no item {item_id!r} at turn {turn}")
    if one.queries[0] != query:
        raise ParameterError(f"rubric {full.rubric_id}: turn {turn} query differs from the labelled unit's")
    return Rubric(one.rubric_id, one.queries, items)


def judge_units(units: pd.DataFrame, benchmarks: Mapping[str, Benchmark], judge: Judge, *,
                progress: bool = False) -> pd.DataFrame:
    """The judge's grades for every unit: the item grade (``judge_shown``, 0-4) and the four
    holistic grades (``judge_<dimension>``) of the unit's response, judged with the pair's real
    rubric (contrasts included) restricted to the unit's turn."""
    jobs, cache = [], {}
    for u in units.itertuples(index=False):
        bench = benchmarks.get(u.track)
        if bench is None:
            raise ParameterError(f"unit {u.unit_id}: no benchmark for track {u.track!r}")
        key = (u.track, u.pair_id, u.side)
        if key not in cache:
            pair = next((p for p in bench.pairs if p.pair_id == u.pair_id), None)
            if pair is None:
                raise ParameterError(f"unit {u.unit_id}: pair {u.pair_id!r} not in the {u.track} track")
            cache[key] = build_rubric(pair, u.side, bench.behaviours, len(pair.turns))
        jobs.append((_unit_rubric(cache[key], int(u.turn), u.item_id, u.query), (str(u.response),)))
    results = judge.judge_many(jobs, progress=progress)
    out = units.copy()
    out["judge_shown"] = [j.items.get(f"0:{uid}", np.nan) for j, uid in zip(results, units["item_id"])]
    for d in DIMENSIONS:
        out[f"judge_{d}"] = [j.scores.get(d, np.nan) for j in results]
    out["judge_failed"] = [j.failed for j in results]
    return out


def _stats(a: np.ndarray, b: np.ndarray, what: str, n_label: str) -> dict:
    """Agreement of grades ``b`` (judge or annotator B) with reference grades ``a`` (0-4)."""
    from sklearn.metrics import cohen_kappa_score, precision_score, recall_score

    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    ya, yb = a >= SHOWN, b >= SHOWN
    rec = {"what": what, n_label: int(len(a)), "positives (reference)": int(ya.sum()),
           "positives (compared)": int(yb.sum())}
    if len(a) == 0:
        return rec
    rec["accuracy"] = float((ya == yb).mean())
    single = len(set(ya) | set(yb)) < 2
    rec["kappa"] = float("nan") if single else float(cohen_kappa_score(ya, yb))
    ga, gb = np.rint(a).astype(int), np.rint(b).astype(int)
    rec["weighted_kappa"] = float("nan") if len(set(ga) | set(gb)) < 2 else \
        float(cohen_kappa_score(ga, gb, weights="quadratic", labels=list(range(5))))
    rec["precision"] = float(precision_score(ya, yb, zero_division=np.nan))
    rec["recall"] = float(recall_score(ya, yb, zero_division=np.nan))
    return rec


def _table(ref: pd.DataFrame, cmp: pd.DataFrame, prefix: str, n_label: str) -> pd.DataFrame:
    recs = []
    for kind, name in KINDS.items():
        m = ref["item_kind"] == kind
        recs.append(_stats(ref.loc[m, "shown"], cmp.loc[m, f"{prefix}shown"], f"shown: {name}", n_label))
    for d in DIMENSIONS:
        recs.append(_stats(ref[d], cmp[f"{prefix}{d}"], f"U: {d}", n_label))
    return pd.DataFrame.from_records(recs)


def agreement(judged: pd.DataFrame, by_model: bool = True) -> pd.DataFrame:
    """Judge vs labels (see the module docstring), overall and per response model."""
    parts = [_table(judged, judged, "judge_", "units").assign(response_model="all")]
    if by_model:
        for model, g in judged.groupby("response_model", sort=True):
            parts.append(_table(g, g, "judge_", "units").assign(response_model=model))
    return pd.concat(parts, ignore_index=True)


def inter_annotator(label_dir: str | Path | None = None, first: str = "a", second: str = "b",
                    sample: str = "sample.jsonl") -> pd.DataFrame:
    """Annotator ``first`` vs annotator ``second`` (label files ``labels_<name>.jsonl`` of units of
    ``sample``) on the units both labelled (the labels' reliability)."""
    a = load_units(label_dir, first, sample).set_index("unit_id")
    b = load_units(label_dir, second, sample).set_index("unit_id")
    common = a.index.intersection(b.index)
    if len(common) == 0:
        raise ParameterError(f"annotators {first} and {second} share no unit")
    ref = a.loc[common].reset_index()
    cmp = b.loc[common, list(LABEL_COLUMNS)].add_prefix("b_").reset_index(drop=True)
    return _table(ref, cmp, "b_", "units")


def fit_item_thresholds(units: pd.DataFrame, benchmarks: Mapping[str, Benchmark], encoder, *,
                        floors: tuple[float, ...] = (0.20, 0.25, 0.30, 0.35, 0.40),
                        margin_steps: tuple[float, ...] = (0.0, 0.025, 0.05, 0.075, 0.10),
                        current: tuple[float, float] | None = None, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """The rubric judge's item thresholds fitted on half of the labels.

    Candidates: similarity thresholds (f, f + .1, f + .2, f + .3) and specificity margins
    (0, m, 2m, 3m) over ``floors`` x ``margin_steps``. The pairs are split in two halves (seeded;
    a pair's units stay together); the candidate with the highest mean Cohen's kappa of "shown"
    over tRec and Unsup items on the fitting half wins (ties: nearest to ``current``, the
    (floor, margin step) in use), and every candidate is reported on the held-out half too.

    Returns
    -------
    (grid, chosen)
        One row per candidate (kappas on both halves); the chosen candidate as a dict.
    """
    from sklearn.metrics import cohen_kappa_score

    from .rubric_judge import RubricJudge

    pairs = sorted(units["pair_id"].unique())
    fit_pairs = set(np.random.default_rng(seed).choice(pairs, len(pairs) // 2, replace=False))
    halves = {"fit": units["pair_id"].isin(fit_pairs), "held_out": ~units["pair_id"].isin(fit_pairs)}
    recs = []
    for f in floors:
        for m in margin_steps:
            judge = RubricJudge(encoder, thresholds=(f, f + 0.1, f + 0.2, f + 0.3), margins=(0.0, m, 2 * m, 3 * m))
            jd = judge_units(units, benchmarks, judge)
            rec = {"floor": f, "margin_step": m}
            for half, mask in halves.items():
                ks = []
                for kind in ("target_required", "unsupported"):
                    sel = mask & (units["item_kind"] == kind)
                    ks.append(float(cohen_kappa_score(units.loc[sel, "shown"] >= SHOWN,
                                                      jd.loc[sel, "judge_shown"] >= SHOWN)))
                rec[f"kappa_{half}"], rec[f"kappa_{half}_tRec"], rec[f"kappa_{half}_Unsup"] = float(np.mean(ks)), *ks
            recs.append(rec)
    grid = pd.DataFrame.from_records(recs)
    cur = current or (floors[len(floors) // 2], margin_steps[len(margin_steps) // 2])
    dist = (grid["floor"] - cur[0]).abs() + (grid["margin_step"] - cur[1]).abs()
    best = grid.assign(_d=dist).sort_values(["kappa_fit", "_d"], ascending=[False, True], kind="stable").iloc[0]
    grid["chosen"] = (grid["floor"] == best["floor"]) & (grid["margin_step"] == best["margin_step"])
    grid["current"] = (grid["floor"] == cur[0]) & (grid["margin_step"] == cur[1])
    return grid, {k: float(best[k]) for k in ("floor", "margin_step", "kappa_fit", "kappa_held_out")}
