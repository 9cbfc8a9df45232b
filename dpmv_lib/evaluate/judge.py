"""Blinded utility judge (paper C.5 "Utility judging").

At T = 16 the judge receives the query-response transcript and a rubric built from the fixed gold
constraints of that pair and store side. The rubric is built (and its id fixed) before any response
is judged and is shared by every compared method for the same pair and side; the judge never
receives the method name or the M/M' label: :meth:`~dpmv_lib.evaluate.rubric.Judge.judge` takes only
``(rubric, responses)`` and :class:`~dpmv_lib.evaluate.rubric.Rubric` has no method or side field.

Scores, all on 0-4 and normalised by 4:

* holistic: relevance, correctness, actionability, personalisation; U = their mean / 4;
* per applicable gold behaviour and turn: tRec = mean over target-required behaviours on M; Unsup =
  mean over unsupported target-specific behaviours on M'.

Rubric items carry a neutral ``role``: ``"apply"`` (the response should show this behaviour:
target-required on M, generic on both sides) or ``"unsupported"`` (a target-specific behaviour the
user's information does not support: the unsupported behaviours on M'). Aggregation maps items back
to their kind through the behaviour catalogue, outside the judge.

Backends:

* :class:`~dpmv_lib.evaluate.rubric_judge.RubricJudge` (default, offline): semantic similarity with
  a frozen encoder between the response's sentences and each behaviour description, mapped to 0-4 by
  fixed thresholds (:data:`~dpmv_lib.evaluate.rubric_judge.THRESHOLDS`), plus documented rules for
  the holistic scores (see the class docstring).
* :class:`~dpmv_lib.evaluate.llm_judge.LLMJudge`: a frozen prompt
  (:data:`~dpmv_lib.evaluate.llm_judge.LLM_PROMPT`) sent to a local transformers model (through
  :mod:`dpmv_lib.generate.responders`) or an OpenAI-compatible endpoint; strict JSON parsing with
  retries; an unparseable answer is recorded as a failure (``failed=True``, scores NaN, the raw
  outputs and the error kept), never replaced by a default score.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..bench.benchmark import Benchmark
from .encoders import Encoder
from ..core.errors import ParameterError
from .rubric import DIMENSIONS, Judge, build_rubrics
from .rubric_judge import RubricJudge
from .llm_judge import LLMJudge, openai_generate, responder_generate


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


def score_transcripts(transcripts: pd.DataFrame, benchmarks: Mapping[str, Benchmark], judge: Judge,
                      horizon: int = 16, *, progress: bool = False) -> pd.DataFrame:
    """One row per transcript (track, response_model, method, pair, side, seed): the four holistic
    scores (0-4), U, tRec (M: mean normalised score of target-required items), Unsup (M': of
    unsupported items), ``items`` (item key "turn:behaviour" -> grade 0-4, what tRec and Unsup
    average; :mod:`dpmv_lib.experiments.utility_decomposition` splits them) and the failure
    record. The judge gets only (rubric, responses)."""
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
               "U": j.U, "items": dict(j.items),
               "failed": j.failed, "error": j.error, "attempts": j.attempts, "rubric_id": rub.rubric_id}
        trec = [j.items[i.key] / 4 for i in rub.items if kind.get(i.item_id) == "target_required" and i.key in j.items]
        uns = [j.items[i.key] / 4 for i in rub.items if kind.get(i.item_id) == "unsupported" and i.key in j.items]
        rec["tRec"] = float(np.mean(trec)) if (side == "M" and trec) else math.nan
        rec["Unsup"] = float(np.mean(uns)) if (side == "M'" and uns) else math.nan
        recs.append(rec)
    return pd.DataFrame.from_records(recs)


def summarise_utility(per_transcript: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (track, response_model, method): U (both sides), tRec (M), Unsup (M') with pair-bootstrap
    95% CIs. Seeds are averaged within each (pair, side) first (C.5); failed judgements are
    excluded and counted. A ``U_dims`` column (the dimensions U holds) is carried over."""
    rng = np.random.default_rng(seed)
    recs = []
    ok = per_transcript[~per_transcript["failed"]]
    for (track, model, method), g in per_transcript.groupby(["track", "response_model", "method"], sort=True):
        gg = ok[(ok["track"] == track) & (ok["response_model"] == model) & (ok["method"] == method)]
        by_pair = gg.groupby(["pair_id", "side"])[["U", "tRec", "Unsup"]].mean()
        per_pair = pd.DataFrame({
            "U": by_pair["U"].groupby(level="pair_id").mean(),
            "tRec": (by_pair["tRec"].xs("M", level="side")
                     if "M" in by_pair.index.get_level_values("side") else np.nan),
            "Unsup": (by_pair["Unsup"].xs("M'", level="side")
                      if "M'" in by_pair.index.get_level_values("side") else np.nan),
        })
        rec = {"track": track, "response_model": model, "method": method, "n_pairs": int(len(per_pair)),
               "n_transcripts": int(len(g)), "n_failed": int(g["failed"].sum())}
        if "U_dims" in g.columns:  # the dimensions U holds (dpmv_lib.evaluate.u_validity.UDefinition.apply)
            rec["U_dims"] = "; ".join(sorted(set(g["U_dims"].astype(str))))
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
