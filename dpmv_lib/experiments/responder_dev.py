"""Choosing a response model's decoding and system prompt on development pairs.

The development subset is PairedMem *train*-split pairs (the auditor is fitted on them; no table
reports them: Tables 2-4 evaluate test pairs), one per attribute in turn. Each setting
(decoding, system prompt) generates RawReadSet and GenericOnly over the first ``turns`` turns on
both stores, and is summarised by:

* ``looping``: the share of distinct responses with two or more repeated lines
  (:mod:`dpmv_lib.evaluate.repetition`);
* ``identical_rawreadset``: the share of (pair, turn) whose RawReadSet answers under M and M'
  are the same text although the notes differ;
* ``notes_auc``: a paired proxy for RawReadSet's audit AUC (an auditor cannot be fitted on a
  handful of pairs): per (pair, turn) and side, the score cos(response, notes of M) -
  cos(response, notes of M') (the rendered conditionings, MiniLM), and the AUC of that score
  separating M from M' responses (0.5: the answer does not follow the notes);
* ``trec_rawreadset`` / ``trec_genericonly``: tRec of the rubric judge at horizon ``turns``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.errors import ParameterError

DEV_METHODS = ("RawReadSet", "GenericOnly")


@dataclass(frozen=True)
class ResponderSetting:
    """One candidate: a name, the decoding (a DecodingConfig) and the system prompt."""

    name: str
    decoding: Any
    system: str = field(default="")


def dev_pairs(data_dir: str = "data", n: int = 8) -> Any:
    """``n`` PairedMem train-split pairs, one per attribute in turn (sorted ids): never reported."""
    from ..bench.datasets import load_benchmark

    bench = load_benchmark("pairedmem", data_dir)
    by_attr: dict[str, list[str]] = {}
    for p in bench.pairs:
        if p.split == "train":
            by_attr.setdefault(p.attribute, []).append(p.pair_id)
    if not by_attr:
        raise ParameterError("the PairedMem track has no train-split pairs")
    keep: list[str] = []
    queues = [sorted(v) for _, v in sorted(by_attr.items())]
    while len(keep) < n and any(queues):
        for q in queues:
            if q and len(keep) < n:
                keep.append(q.pop(0))
    return bench.subset(keep)


def notes_auc(transcripts: pd.DataFrame, encoder: Any, method: str = "RawReadSet") -> float:
    """AUC of cos(response, notes_M) - cos(response, notes_M') separating M from M' responses."""
    from sklearn.metrics import roc_auc_score

    df = transcripts[transcripts["method"] == method]
    wide = df.pivot_table(index=["pair_id", "seed", "turn"], columns="side",
                          values=["response", "conditioning"], aggfunc="first").dropna()
    if wide.empty:
        return float("nan")
    notes_m, notes_mp = list(wide[("conditioning", "M")]), list(wide[("conditioning", "M'")])
    resp_m, resp_mp = list(wide[("response", "M")]), list(wide[("response", "M'")])
    e = {k: encoder.encode(v) for k, v in (("nm", notes_m), ("nmp", notes_mp), ("rm", resp_m), ("rmp", resp_mp))}
    score_m = (e["rm"] * e["nm"]).sum(1) - (e["rm"] * e["nmp"]).sum(1)
    score_mp = (e["rmp"] * e["nm"]).sum(1) - (e["rmp"] * e["nmp"]).sum(1)
    y = np.r_[np.ones(len(score_m)), np.zeros(len(score_mp))]
    return float(roc_auc_score(y, np.r_[score_m, score_mp]))


def summarise(transcripts: pd.DataFrame, bench: Any, encoder: Any, judge: Any, turns: int) -> dict[str, float]:
    """The measures of the module docstring for one setting's transcripts."""
    from ..evaluate.judge import score_transcripts
    from ..evaluate.repetition import looping_share

    distinct = transcripts.drop_duplicates("request")
    raw = transcripts[transcripts["method"] == "RawReadSet"]
    wide = raw.pivot_table(index=["pair_id", "seed", "turn"], columns="side", values="response", aggfunc="first")
    scored = score_transcripts(transcripts, {"pairedmem": bench}, judge, turns)
    trec = scored[scored["side"] == "M"].groupby("method")["tRec"].mean()
    return {"responses": len(distinct), "looping": looping_share(distinct["response"]),
            "identical_rawreadset": float((wide["M"] == wide["M'"]).mean()),
            "notes_auc": notes_auc(transcripts, encoder),
            "trec_rawreadset": float(trec.get("RawReadSet", np.nan)),
            "trec_genericonly": float(trec.get("GenericOnly", np.nan)),
            "mean_chars": float(distinct["response"].str.len().mean())}


def dev_comparison(settings: Sequence[ResponderSetting], *, spec: str = "openvino:smollm2@f32",
                   data_dir: str = "data", n_pairs: int = 8, turns: int = 8, encoder: str = "minilm",
                   results_dir: str = "results", progress: bool = False,
                   log: Any = print) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """One row of measures per setting, and each setting's transcripts (generated without the
    generation cache or store: development runs are not results)."""
    from ..evaluate.judge import make_judge
    from ..generate.generation import generate_transcripts
    from ..generate.responders import SYSTEM_PROMPT, make_responder
    from .common import run_encoder

    bench = dev_pairs(data_dir, n_pairs)
    enc = run_encoder(encoder, results_dir)
    judge = make_judge("rubric", enc)
    rows, frames = [], {}
    responder = None
    for s in settings:
        if responder is None:
            responder = make_responder(spec, decoding=s.decoding)
        responder.decoding = s.decoding
        responder.system = s.system or SYSTEM_PROMPT
        tr = generate_transcripts(bench, responder, DEV_METHODS, seeds=(0,), turns=turns, cache=None,
                                  progress=progress)
        frames[s.name] = tr
        row = {"setting": s.name, **summarise(tr, bench, enc, judge, turns)}
        log(f"[dev] {row}")
        rows.append(row)
    if responder is not None:
        responder.close()
    return pd.DataFrame(rows), frames
