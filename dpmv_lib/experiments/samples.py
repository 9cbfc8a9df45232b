"""What the response model wrote: a stratified sample of responses with the
conditioning each got and the judge's grades, and M / M' pairs side by side.

:func:`response_sample` draws, per (track, method), ``cells`` (pair, seed, turn) cells and keeps
both sides of each, so every response has its counterpart from the adjacent store; each response
is graded on its own turn's rubric items (the pair's real rubric, C.5) with the holistic
dimensions of that turn. Notebook 03 writes the sample of its run to
``{results_dir}/tables/03_response_sample.csv`` (the llm profile's under ``results/llm/``).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..bench.benchmark import Benchmark
from ..core.errors import ParameterError
from ..evaluate.rubric import DIMENSIONS, Judge, build_rubric

KEEP = ("track", "response_model", "method", "pair_id", "attribute", "seed", "turn", "side", "query",
        "conditioning", "response")


def response_sample(transcripts: pd.DataFrame, benchmarks: Mapping[str, Benchmark], judge: Judge, *,
                    cells: int = 15, seed: int = 0) -> pd.DataFrame:
    """``cells`` (pair, seed, turn) cells per (track, method), both sides of each, with the judge's
    per-turn grades.

    Parameters
    ----------
    transcripts : DataFrame
        The transcript table (docs/architecture.md), one response model.
    benchmarks : mapping of str to Benchmark
        The tracks, for the rubrics.
    judge : Judge
        The run's judge; it sees one (rubric, response) per row, as in C.5.
    cells : int
        Cells per (track, method): 15 gives 30 responses (15 M, 15 M').
    seed : int
        Seed of the draw.

    Returns
    -------
    DataFrame
        :data:`KEEP` columns, ``items`` (JSON: item id -> grade 0-4, with ``kind``), the four
        holistic grades and ``U`` of that turn.

    Raises
    ------
    ParameterError
        Missing columns, several response models, or a track without a benchmark.
    """
    missing = set(KEEP) - set(transcripts.columns)
    if missing:
        raise ParameterError(f"transcript table lacks columns {sorted(missing)}")
    if transcripts["response_model"].nunique() != 1:
        raise ParameterError("response_sample takes one response model at a time")
    rng = np.random.default_rng(seed)
    picked = []
    cols = ["track", "method", "pair_id", "seed", "turn"]
    for _, g in transcripts.groupby(["track", "method"], sort=True):
        cell = g[cols].drop_duplicates().sort_values(cols).reset_index(drop=True)
        take = cell.iloc[np.sort(rng.choice(len(cell), size=min(cells, len(cell)), replace=False))]
        picked.append(g.merge(take, on=cols))
    sample = pd.concat(picked, ignore_index=True)[list(KEEP)].sort_values(
        ["track", "method", "pair_id", "seed", "turn", "side"], kind="stable").reset_index(drop=True)
    rubrics, jobs, kinds = {}, [], {}
    for track in sample["track"].unique():
        if track not in benchmarks:
            raise ParameterError(f"no benchmark for track {track!r}")
        kinds.update({b.id: b.kind for b in benchmarks[track].behaviours.values()})
    for r in sample.itertuples(index=False):
        key = (r.track, r.pair_id, r.side)
        if key not in rubrics:
            bench = benchmarks[r.track]
            pair = next(p for p in bench.pairs if p.pair_id == r.pair_id)
            rubrics[key] = build_rubric(pair, r.side, bench.behaviours, len(pair.turns))
        jobs.append((rubrics[key].at_turn(int(r.turn)), (str(r.response),)))
    res = judge.judge_many(jobs)
    sample["items"] = [json.dumps({k.split(":", 1)[1]: {"grade": v, "kind": kinds.get(k.split(":", 1)[1], "")}
                                   for k, v in j.items.items()}, sort_keys=True) for j in res]
    for d in DIMENSIONS:
        sample[d] = [j.scores.get(d, np.nan) for j in res]
    sample["U"] = [j.U for j in res]
    return sample


def side_by_side(sample: pd.DataFrame, n: int = 4, methods: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The first ``n`` cells (per method in ``methods``, default all) with M and M' in one row:
    query, each side's conditioning and response, and the target items' grades."""
    s = sample if methods is None else sample[sample["method"].isin(methods)]
    key = ["track", "method", "pair_id", "attribute", "seed", "turn", "query"]
    m = s[s["side"] == "M"].set_index(key)
    mp = s[s["side"] == "M'"].set_index(key)
    cols = ["conditioning", "response", "items"]
    both = m[cols].add_suffix(" (M)").join(mp[cols].add_suffix(" (M')"), how="inner")
    return both.reset_index().groupby("method", sort=False).head(n).reset_index(drop=True)


def responses(session: Any, rq1: Any, methods: tuple[str, ...] = ("RawReadSet", "TypedMask", "DP-MemView (on)")) -> Any:
    """Notebook step: :func:`response_sample` of an RQ1 run (``rq1``: the result of
    :func:`dpmv_lib.experiments.rq1.run`) graded by the run's rubric judge, written to
    ``tables/<notebook>_response_sample.csv``; shown: the sample's mean U and personalisation per
    method and track, and one PairedMem cell of each of ``methods`` with M and M' side by side."""
    from ..bench.datasets import load_benchmark
    from .result import Result
    from .rq1 import result_of, run_judge, select_pairs

    judge = run_judge(session)
    if judge is None:
        return Result("What the response model wrote", "This run's judge is not the rubric judge: the sample is "
                                                       "graded by the rubric judge only.")
    res = result_of(rq1)
    prof, cfg = session.profile, session.cfg
    benches = {t: select_pairs(load_benchmark(t, cfg.data_dir), prof.pairs if t == "pairedmem" else prof.transfer_pairs,
                               cfg.seed) for t in sorted(set(res.transcripts["track"]))}
    sample = response_sample(res.transcripts, benches, judge, seed=cfg.seed)
    session.tables_dir.mkdir(parents=True, exist_ok=True)
    sample.to_csv(session.tables_dir / f"{session.notebook}_response_sample.csv", index=False)
    means = sample.groupby(["method", "track"], sort=False)[["U", "personalisation"]].mean().unstack("track")
    means.columns = [f"{d} ({t})" for d, t in means.columns]
    pm = sample[sample["track"] == "pairedmem"].groupby("method")["U"].mean()
    finding = (f"{len(sample)} responses sampled ({sample['method'].nunique()} methods, both sides of each cell); on "
               f"PairedMem the sample's mean U runs from {pm.min():.3f} ({pm.idxmin()}) to {pm.max():.3f} "
               f"({pm.idxmax()}).") if len(pm) else f"{len(sample)} responses sampled."
    return Result("What the response model wrote", finding,
                  tables={"mean of the sample's grades": means.reset_index(),
                          "M and M' side by side (PairedMem; grades in the CSV)": side_by_side(
                              sample[sample["track"] == "pairedmem"], n=1, methods=methods)[
                              ["method", "pair_id", "turn", "query", "conditioning (M)", "response (M)",
                               "conditioning (M')", "response (M')"]]},
                  data={"sample": sample})
