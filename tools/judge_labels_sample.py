"""Draw the human-style labelling sample for checking the rubric judge (data/judge_labels/).

A unit is one assistant response at one turn x one rubric item of that turn (rubric items from
:func:`dpmv_lib.evaluate.rubric.build_rubric`, i.e. the fixed gold of the pair and store side).
Transcripts are generated offline with the package (B_a=2, K=3, T=16, EM seed 0):

* ``surrogate`` responder: the RQ1 paper methods + the RQ2 ablations on a seeded subset of pairs
  of both tracks (all 16 turns);
* ``smollm2`` (SmolLM2-135M-Instruct through transformers + GGUF, greedy, 128 new tokens): the 7
  paper methods on a few pairs whose first two turns are target queries (turns 0-1). SmolLM2
  generation is slow on CPU, so its transcripts are cached in
  ``data/judge_labels/transcripts_smollm2.parquet`` and reused (``--regen-smollm2`` regenerates;
  ``--no-smollm2`` leaves SmolLM2 out).

Units are stratified by (response model, item kind, method, track, side) with fixed quotas and
deduplicated on (query, response, item description), then shuffled, so labelling order does not
follow method or side. The judge modules (rubric_judge, llm_judge, score_transcripts) are not used.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py
    .venv/bin/python tools/judge_labels_sample.py --show 0 20   # blind view for labelling

``--show START END`` prints units START..END-1 of sample.jsonl (``--file sample_extra.jsonl`` for
the extension) with only unit_id, query, response and item description (no method, side, attribute
or item kind), as the annotators saw them.

``--extra N`` (or ``--extra auto``) draws an extension instead: N further units, surrogate only,
into ``sample_extra.jsonl`` (unit ids e0001...; seed 20261, deterministic). They come from pairs
that sample.jsonl does not use, and each is a (query, response) that sample.jsonl and the rest of
the extension do not hold, since the holistic labels depend on the query and the response alone.
Item kinds keep the surrogate proportions of sample.jsonl (135 : 135 : 80). ``auto`` sizes N to
close the shortfall of labelled surrogate positives (grade >= 2) to 200 per U dimension
(:func:`dpmv_lib.evaluate.u_validity.extra_units_needed`: the shortfall over the lower 95% Wilson
bound of each dimension's positive rate, largest over dimensions). SmolLM2 is left out: its
generation takes minutes per few dozen responses on this CPU (387 s for 196 rows).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py --extra auto
    .venv/bin/python tools/judge_labels_sample.py --show 0 20 --file sample_extra.jsonl

``--more-surrogate N`` draws a second surrogate extension the same way into ``sample_extra_b.jsonl``
(unit ids f0001...; seed 20266; 12 pairs per attribute on PairedMem and up to 4 on transfer, none
that sample.jsonl or sample_extra.jsonl uses; no (query, response) that any sample file holds). The
committed part has 600 units: relevance's kappa inside the fitting half still rose with the share of
the labels it was fitted on (``python -m dpmv_lib.experiments.judge_features --learning-curve``).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py --more-surrogate 600

``--reliability-surrogate 60`` draws the units of that part a second annotator labels again (seed
20267, uniformly) into ``subset_extra_b_b.txt``; ``--show START END --file sample_extra_b.jsonl
--subset subset_extra_b_b.txt`` is their blind view.

``--extra-smollm2 N`` draws N SmolLM2 units into ``sample_extra_smollm2.jsonl`` (unit ids
s0001...; seed 20262, deterministic given the store): the llm profile's own responses (OpenVINO
f32, greedy with its frequency penalty), read from the committed store ``results/llm/generations``
without generating, for the notebook 03 methods (B_a=2, K=3, T=16, EM seed 0) on non-test pairs of
the llm profile that no other sample file uses (6 per attribute on PairedMem, 3 on transfer).
Quotas and strata as the SmolLM2 part of sample.jsonl (50 : 50 : 30), each unit a new (query, response).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py --extra-smollm2 400

``--more-smollm2 N`` draws a second SmolLM2 extension the same way into
``sample_extra_smollm2_b.jsonl`` (unit ids t0001...; seed 20263; 2 pairs per attribute on PairedMem,
1 on transfer, none that an earlier sample file uses; no (query, response) an earlier file holds).
The committed part has 120 units: ``extra_units_needed`` put SmolLM2's actionability shortfall at 78.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py --more-smollm2 120

``--enriched-smollm2 HIGH LOW`` draws the enriched SmolLM2 part into ``sample_extra_smollm2_c.jsonl``
(unit ids v0001...; seed 20264, deterministic given the store) with
:mod:`dpmv_lib.evaluate.enriched_draw`: from every non-test PairedMem pair of the llm profile that
no earlier sample file uses, the store's responses of the notebook 03 methods (B_a=2, K=3, T=16, EM
seed 0) as distinct (query, response) units that no earlier file holds, HIGH of them uniformly from
the units whose response echoes a released view and LOW uniformly from the others, each with one
of its rubric items at random and with its stratum and inclusion probability.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python tools/judge_labels_sample.py --enriched-smollm2 300 100

``--reliability-subset 60`` draws the units a second annotator labels again (seed 20265, in
proportion to the strata) into ``subset_smollm2_c_b.txt``; ``--show START END --file
sample_extra_smollm2_c.jsonl --subset subset_smollm2_c_b.txt`` is their blind view.

``--stratum-check`` prints the stratum against the labels: per stratum, units and positives of each
dimension on the SmolLM2 store units labelled before the enriched part (the s and t parts) and on
the enriched part.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpmv_lib.bench.datasets import load_benchmark  # noqa: E402
from dpmv_lib.evaluate.rubric import build_rubric  # noqa: E402
from dpmv_lib.evaluate.u_validity import (EXTENSIONS, EXTRA_SAMPLE, SMOL_SAMPLE, SMOL_SAMPLE_B,  # noqa: E402
                                          SMOL_SAMPLE_C, SURR_SAMPLE_B)
from dpmv_lib.experiments.rq1 import PAPER_METHODS  # noqa: E402
from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts  # noqa: E402
from dpmv_lib.generate.responders import make_responder  # noqa: E402

OUT = ROOT / "data" / "judge_labels"
SEED = 20260
SEED_EXTRA = 20261
SEED_SMOL = 20262
SEED_SURR_B = 20266
# SmolLM2 extensions: part -> (seed, file, unit id prefix, pairs per attribute and track: non-test
# pairs of the llm profile's notebook 03 that no earlier sample file uses)
SMOL_PARTS = {"": (SEED_SMOL, SMOL_SAMPLE, "s", {"pairedmem": 6, "transfer": 3}),
              "b": (SEED_SMOL + 1, SMOL_SAMPLE_B, "t", {"pairedmem": 2, "transfer": 1})}
# the enriched SmolLM2 part: seed, unit id prefix (every remaining non-test PairedMem pair of the llm profile)
SEED_SMOL_C, PREFIX_C = SEED_SMOL + 2, "v"
SMOL_SUBSET_C = "subset_smollm2_c_b.txt"
SURR_SUBSET_B = "subset_extra_b_b.txt"
ABLATIONS = ("CappedArgmax", "NoCap", "IncompleteCharge")
SURROGATE_METHODS = tuple(PAPER_METHODS) + ABLATIONS
PARAMS = InterfaceParams(B_a=2, K=3, plan_horizon=16)
T = 16
EM_SEEDS = (0,)
# surrogate pairs per attribute and track
SURR_PAIRS = {"pairedmem": 6, "transfer": 4}
# surrogate extensions: part -> (seed, file, unit id prefix, pairs per attribute and track: pairs that
# no earlier surrogate sample file uses)
SURR_PARTS = {"": (SEED_EXTRA, EXTRA_SAMPLE, "e", SURR_PAIRS),
              "b": (SEED_SURR_B, SURR_SAMPLE_B, "f", {"pairedmem": 12, "transfer": 4})}
# every sample file (no unit of a new part repeats a (query, response) of one of them)
ALL_SAMPLES = ("sample.jsonl", *(f for f, _ in EXTENSIONS.values()))
# SmolLM2 pairs (first two turns are target queries) per track: one per attribute in that order
SMOL_ATTRS = {"pairedmem": ("diabetes", "pregnancy", "debt", "job_loss"),
              "transfer": ("diabetes", "debt", "job_loss")}
SMOL_TURNS = 2
# unit quotas per (response model, item kind)
QUOTA = {("surrogate", "target_required"): 135, ("surrogate", "unsupported"): 135,
         ("surrogate", "generic"): 80,
         ("smollm2", "target_required"): 50, ("smollm2", "unsupported"): 50, ("smollm2", "generic"): 30}
MEMORY_TEXT = ("RawReadSet", "TaskMin", "OutputFilter")


def pick_pairs(bench, per_attr: int, rng: np.random.Generator) -> list[str]:
    by = defaultdict(list)
    for p in bench.pairs:
        by[p.attribute].append(p.pair_id)
    out = []
    for a in sorted(by):
        ids = sorted(by[a])
        out += rng.choice(ids, size=min(per_attr, len(ids)), replace=False).tolist()
    return out


def pick_smol_pairs(bench, attrs, exclude, rng: np.random.Generator) -> list[str]:
    out = []
    for a in attrs:
        ids = sorted(p.pair_id for p in bench.pairs if p.attribute == a and p.pair_id not in exclude
                     and all(t.query.qtype == "target" for t in p.turns[:SMOL_TURNS]))
        if ids:
            out.append(str(rng.choice(ids)))
    return out


def smollm2_transcripts(benches, smol_ids, path: Path, regen: bool) -> pd.DataFrame | None:
    if path.exists() and not regen:
        return pd.read_parquet(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    frames = []
    t0 = time.perf_counter()
    resp = make_responder("smollm2")
    try:
        for track, bench in benches.items():
            sub = bench.subset(smol_ids[track])
            frames.append(generate_transcripts(sub, resp, PAPER_METHODS, seeds=EM_SEEDS, turns=SMOL_TURNS,
                                               params=PARAMS, cache=None, progress=False))
            print(f"[smollm2] {track}: {len(frames[-1])} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        resp.close()
    df = pd.concat(frames, ignore_index=True)
    keep = [c for c in ("track", "pair_id", "attribute", "response_model", "method", "side", "seed", "turn",
                        "qtype", "query", "response") if c in df.columns]
    df = df[keep]
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
    print(f"[smollm2] {len(df)} rows, {df['response'].nunique()} distinct responses, "
          f"{time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    return df


def candidates(df: pd.DataFrame, benches, model: str) -> pd.DataFrame:
    rubrics = {}
    recs = []
    for r in df.itertuples(index=False):
        bench = benches[r.track]
        key = (r.track, r.pair_id, r.side)
        if key not in rubrics:
            pair = next(p for p in bench.pairs if p.pair_id == r.pair_id)
            rubrics[key] = build_rubric(pair, r.side, bench.behaviours, T)
        for it in rubrics[key].items_at(int(r.turn)):
            recs.append({"track": r.track, "response_model": model, "method": r.method, "side": r.side,
                         "pair_id": r.pair_id, "attribute": r.attribute, "seed": int(r.seed), "turn": int(r.turn),
                         "query": r.query, "response": r.response, "item_id": it.item_id,
                         "item_description": it.description, "item_kind": bench.behaviours[it.item_id].kind,
                         "item_role": it.role})
    return pd.DataFrame.from_records(recs)


def stratified(cand: pd.DataFrame, quota: int, rng: np.random.Generator, seen: set,
               key: tuple[str, ...] = ("query", "response", "item_description")) -> list[dict]:
    """Round-robin over (method, track, side) strata, each shuffled; memory-text methods get a
    double turn (they are the ones most likely to show target behaviours), duplicates (same
    ``key`` fields) skipped."""
    strata = {}
    for k, g in cand.groupby(["method", "track", "side"], sort=True):
        strata[k] = g.iloc[rng.permutation(len(g))].to_dict("records")
    order = []
    for k in sorted(strata):
        order += [k] * (2 if k[0] in MEMORY_TEXT else 1)
    pos = {k: 0 for k in strata}
    out = []
    while len(out) < quota and any(pos[k] < len(strata[k]) for k in strata):
        for k in order:
            if len(out) >= quota:
                break
            rows = strata[k]
            while pos[k] < len(rows):
                r = rows[pos[k]]
                pos[k] += 1
                d = tuple(r[k] for k in key)
                if d not in seen:
                    seen.add(d)
                    out.append(r)
                    break
    return out


def show(start: int, end: int, file: str = "sample.jsonl", subset: str | None = None) -> None:
    """The blind labelling view: unit id, query, response and item description only (of the units
    listed in ``subset``, in its order, where given)."""
    with (OUT / file).open(encoding="utf-8") as f:
        units = [json.loads(line) for line in f if line.strip()]
    if subset:
        by_id = {u["unit_id"]: u for u in units}
        units = [by_id[i] for i in (OUT / subset).read_text().split()]
    for u in units[start:end]:
        print(f"### {u['unit_id']}\nQ: {u['query']}\nR: {u['response']}\nITEM: {u['item_description']}\n")


def extra_size(spec: str) -> int:
    """N from ``--extra``: an integer, or ``auto`` (the surrogate shortfall, see the module docstring)."""
    if spec != "auto":
        n = int(spec)
        if n < 1:
            raise SystemExit(f"--extra needs a positive count or 'auto', got {spec!r}")
        return n
    from dpmv_lib.evaluate.u_validity import extra_units_needed, label_pool

    need = extra_units_needed(label_pool(OUT), "surrogate")
    print(need.to_string(index=False))
    return int(need["units_needed"].max())


def write_extension(cand: pd.DataFrame, model: str, n: int, rng: np.random.Generator, seen: set, prefix: str,
                    file: str, ids) -> None:
    """Draw ``n`` units of ``model`` from ``cand`` in the item-kind proportions of its part of
    sample.jsonl (generic items half per side), each a (query, response) not in ``seen``; shuffle,
    number them ``<prefix>0001``... and write ``file``."""
    key = ("query", "response")
    share = {k: QUOTA[(model, k)] for k in ("target_required", "unsupported", "generic")}
    total = sum(share.values())
    quota = {k: round(n * v / total) for k, v in share.items() if k != "generic"}
    quota["generic"] = n - sum(quota.values())
    units = []
    for kind in ("target_required", "unsupported", "generic"):
        c = cand[cand["item_kind"] == kind]
        if kind == "generic":
            half = quota[kind] // 2
            for side, q in (("M", half), ("M'", quota[kind] - half)):
                units += stratified(c[c["side"] == side], q, rng, seen, key)
        else:
            units += stratified(c, quota[kind], rng, seen, key)
    if len(units) < n:
        print(f"only {len(units)} distinct (query, response) units available for {n} requested")
    units = [units[i] for i in rng.permutation(len(units))]
    for i, u in enumerate(units):
        u["unit_id"] = f"{prefix}{i + 1:04d}"
    cols = ["unit_id", "track", "response_model", "method", "side", "pair_id", "attribute", "seed", "turn",
            "query", "response", "item_id", "item_description", "item_kind", "item_role"]
    with (OUT / file).open("w", encoding="utf-8") as f:
        for u in units:
            f.write(json.dumps({c: u[c] for c in cols}, ensure_ascii=False) + "\n")
    df = pd.DataFrame(units)
    print(f"{len(df)} units -> {OUT / file}; pairs {ids}")
    for c in ("item_kind", "track", "side", "method"):
        print(c, dict(Counter(df[c])))


def extra(spec: str, data: str, part: str = "") -> None:
    """Draw a surrogate extension (see the module docstring) into its file of :data:`SURR_PARTS`."""
    n = extra_size(spec)
    seed, file, prefix, per_attr = SURR_PARTS[part]
    rng = np.random.default_rng(seed)
    later = {f for q, (_, f, _, _) in SURR_PARTS.items() if q >= part}
    # every sample file but this part and later surrogate parts: no (query, response) of theirs is drawn
    held = {f: pd.read_json(OUT / f, lines=True) for f in ALL_SAMPLES if (OUT / f).exists() and f not in later}
    # pairs that sample.jsonl or an earlier surrogate part uses are not drawn
    earlier = [held[f] for f in ["sample.jsonl"] + [f for q, (_, f, _, _) in SURR_PARTS.items() if q < part]]
    benches = {t: load_benchmark(t, data) for t in ("pairedmem", "transfer")}
    used = {t: set().union(*(set(e.loc[e["track"] == t, "pair_id"]) for e in earlier)) for t in benches}
    ids = {}
    for t, b in benches.items():
        ids[t] = pick_pairs(b.subset(sorted(p.pair_id for p in b.pairs if p.pair_id not in used[t])),
                            per_attr[t], rng)
    policies = [p for b in benches.values() for p in b.policies.values()]
    resp = make_responder("surrogate", policies)
    try:
        surr = pd.concat([generate_transcripts(b.subset(ids[t]), resp, SURROGATE_METHODS, seeds=EM_SEEDS, turns=T,
                                               params=PARAMS, progress=False) for t, b in benches.items()],
                         ignore_index=True)
    finally:
        resp.close()
    cand = candidates(surr, benches, "surrogate")
    seen = set().union(*(set(zip(e["query"], e["response"])) for e in held.values()))
    write_extension(cand, "surrogate", n, rng, seen, prefix, file, ids)


def smollm2_store_transcripts(benches, ids) -> pd.DataFrame:
    """The llm profile's SmolLM2 transcripts of the notebook 03 methods on ``ids`` (B_a=2, K=3,
    T=16, EM seed 0), read from the committed store ``results/llm/generations``: conditioning
    only, nothing is generated; rows whose request is not in the store yet are left out."""
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.experiments.rq1 import RQ1Config, responder_specs
    from dpmv_lib.generate.generation import ROW_FIELDS, conditioning_table, request_addresses, row_prompts
    from dpmv_lib.generate.store import GenerationStore

    resp = make_responder(responder_specs(get_profile("llm"))[0])
    store = GenerationStore(ROOT / "results" / "llm" / "generations")
    ci = {f: i for i, f in enumerate(ROW_FIELDS)}
    frames = []
    try:
        for t, b in benches.items():
            rows = conditioning_table(b.subset(ids[t]), RQ1Config().methods, seeds=EM_SEEDS, turns=T, params=PARAMS,
                                      workers=1, progress=False)
            reps, index, addresses, meta = request_addresses(row_prompts(rows), resp)
            found = store.get_many(addresses, meta)
            recs = []
            for r, j in zip(rows, index):
                text = found.get(addresses[j])
                if text is None:
                    continue
                recs.append({"track": t, "pair_id": r[ci["pair_id"]], "attribute": r[ci["attribute"]],
                             "response_model": "smollm2", "method": r[ci["method"]], "side": r[ci["side"]],
                             "seed": int(r[ci["seed"]]), "turn": int(r[ci["turn"]]), "query": r[ci["query"]],
                             "response": text, "conditioning": r[ci["conditioning"]]})
            print(f"[smollm2] {t}: {len(recs)} of {len(rows)} rows in the store", flush=True)
            frames.append(pd.DataFrame.from_records(recs))
    finally:
        resp.close()
    return pd.concat(frames, ignore_index=True)


def extra_smollm2(n: int, data: str, part: str = "") -> None:
    """Draw a SmolLM2 extension (see the module docstring): ``part`` "" into
    ``sample_extra_smollm2.jsonl``, "b" into ``sample_extra_smollm2_b.jsonl``."""
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.experiments.rq1 import select_pairs

    seed, file, prefix, per_attr = SMOL_PARTS[part]
    rng = np.random.default_rng(seed)
    benches = {t: load_benchmark(t, data) for t in ("pairedmem", "transfer")}
    prof = get_profile("llm")
    earlier = ["sample.jsonl", EXTRA_SAMPLE] + [f for q, (_, f, _, _) in SMOL_PARTS.items() if q < part]
    olds = [pd.read_json(OUT / f, lines=True) for f in earlier]
    used = set().union(*(set(o["pair_id"]) for o in olds))
    ids = {}
    for t, b in benches.items():
        chosen = select_pairs(b, prof.pairs if t == "pairedmem" else prof.transfer_pairs, 0)
        pool = sorted(p.pair_id for p in chosen.pairs if p.split != "test" and p.pair_id not in used)
        ids[t] = pick_pairs(b.subset(pool), per_attr[t], rng)
    smol = smollm2_store_transcripts(benches, ids)
    cand = candidates(smol, benches, "smollm2")
    seen = set().union(*(set(zip(o["query"], o["response"])) for o in olds))
    write_extension(cand, "smollm2", n, rng, seen, prefix, file, ids)


def enriched_smollm2(n_high: int, n_low: int, data: str) -> None:
    """Draw the enriched SmolLM2 part (see the module docstring) into ``sample_extra_smollm2_c.jsonl``."""
    from dpmv_lib.evaluate.enriched_draw import two_stratum_draw, view_echo
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.experiments.rq1 import select_pairs

    rng = np.random.default_rng(SEED_SMOL_C)
    benches = {"pairedmem": load_benchmark("pairedmem", data)}
    olds = [pd.read_json(OUT / f, lines=True)
            for f in ("sample.jsonl", EXTRA_SAMPLE, *(f for _, f, _, _ in SMOL_PARTS.values()))]
    used = set().union(*(set(o["pair_id"]) for o in olds))
    chosen = select_pairs(benches["pairedmem"], get_profile("llm").pairs, 0)
    ids = {"pairedmem": sorted(p.pair_id for p in chosen.pairs if p.split != "test" and p.pair_id not in used)}
    rows = smollm2_store_transcripts(benches, ids)
    rows["high"] = [view_echo(r.method, r.query, r.response, r.conditioning) for r in rows.itertuples(index=False)]
    seen = set().union(*(set(zip(o["query"], o["response"])) for o in olds))
    rows = rows[[k not in seen for k in zip(rows["query"], rows["response"])]]
    # one unit per distinct (query, response), high where any of its rows is; its row: a seeded pick
    # among its rows of that stratum
    rows = rows.iloc[rng.permutation(len(rows))].copy()
    rows["unit_high"] = rows.groupby(["query", "response"])["high"].transform("max")
    units = rows[rows["high"] == rows["unit_high"]].drop_duplicates(["query", "response"]).reset_index(drop=True)
    drawn = two_stratum_draw(units, units["unit_high"].to_numpy(), n_high, n_low, rng)
    cand = candidates(drawn, benches, "smollm2")
    picks = []
    for _, g in cand.groupby(["query", "response"], sort=False):
        picks.append(g.iloc[int(rng.integers(len(g)))])
    items = pd.DataFrame(picks).set_index(["query", "response"])
    cols = ["unit_id", "track", "response_model", "method", "side", "pair_id", "attribute", "seed", "turn",
            "query", "response", "item_id", "item_description", "item_kind", "item_role", "stratum",
            "stratum_size", "inclusion_probability"]
    with (OUT / SMOL_SAMPLE_C).open("w", encoding="utf-8") as f:
        for i, r in enumerate(drawn.itertuples(index=False)):
            it = items.loc[(r.query, r.response)]
            u = {**r._asdict(), **{c: it[c] for c in ("item_id", "item_description", "item_kind", "item_role")},
                 "unit_id": f"{PREFIX_C}{i + 1:04d}"}
            u["seed"], u["turn"], u["stratum_size"] = int(u["seed"]), int(u["turn"]), int(u["stratum_size"])
            f.write(json.dumps({c: u[c] for c in cols}, ensure_ascii=False) + "\n")
    print(f"{len(drawn)} units -> {OUT / SMOL_SAMPLE_C} from {len(ids['pairedmem'])} pairs; strata "
          f"{drawn.groupby('stratum')['stratum_size'].first().to_dict()} distinct units, drawn "
          f"{drawn['stratum'].value_counts().to_dict()}")
    for c in ("side", "method"):
        print(c, dict(Counter(drawn[c])))
    print("item_kind", dict(Counter(items["item_kind"])))


def reliability_subset(n: int) -> None:
    """A seeded draw of ``n`` units of the enriched part for a second annotator, in proportion to
    its strata, written to ``subset_smollm2_c_b.txt`` in a shuffled order."""
    rng = np.random.default_rng(SEED_SMOL_C + 1)
    e = pd.read_json(OUT / SMOL_SAMPLE_C, lines=True)
    ids = []
    for _, g in e.groupby("stratum", sort=True):
        k = round(n * len(g) / len(e))
        ids += rng.choice(sorted(g["unit_id"]), size=k, replace=False).tolist()
    ids = [ids[i] for i in rng.permutation(len(ids))]
    (OUT / SMOL_SUBSET_C).write_text("\n".join(ids) + "\n")
    print(f"{len(ids)} units -> {OUT / SMOL_SUBSET_C}")


def reliability_surrogate(n: int) -> None:
    """A seeded uniform draw of ``n`` units of the second surrogate extension for a second
    annotator, written to ``subset_extra_b_b.txt`` in a shuffled order."""
    rng = np.random.default_rng(SEED_SURR_B + 1)
    ids = rng.choice(sorted(pd.read_json(OUT / SURR_SAMPLE_B, lines=True)["unit_id"]), size=n, replace=False)
    (OUT / SURR_SUBSET_B).write_text("\n".join(ids.tolist()) + "\n")
    print(f"{len(ids)} units -> {OUT / SURR_SUBSET_B}")


def stratum_check(data: str) -> None:
    """The enriched draw's stratum against the labels, per stratum: units and positives (grade >= 2)
    of each dimension, on the SmolLM2 store units labelled before the draw (the s and t parts; their
    stratum from the conditioning of their rows in the store) and on the enriched part itself."""
    from dpmv_lib.evaluate.enriched_draw import HIGH, LOW, view_echo
    from dpmv_lib.evaluate.judge_agreement import SHOWN
    from dpmv_lib.evaluate.rubric import DIMENSIONS
    from dpmv_lib.evaluate.u_validity import label_pool

    units = label_pool(OUT)
    before = units[units["pool"].isin(["extra_smollm2", "extra_smollm2_b"])]
    tracks = sorted(set(before["track"]))
    rows = smollm2_store_transcripts({t: load_benchmark(t, data) for t in tracks},
                                     {t: sorted(set(before.loc[before["track"] == t, "pair_id"])) for t in tracks})
    cond = rows.set_index(["pair_id", "method", "side", "turn"])["conditioning"]
    before = before.assign(stratum=[
        HIGH if view_echo(u.method, u.query, u.response, cond[(u.pair_id, u.method, u.side, int(u.turn))]) else LOW
        for u in before.itertuples(index=False)])
    enriched = units[units["pool"] == "extra_smollm2_c"]
    for name, part in (("labelled before the draw", before), ("the enriched part", enriched)):
        g = part.groupby("stratum")
        table = pd.DataFrame({"units": g.size(),
                              **{f"{d} positives": g[d].apply(lambda x: int((x >= SHOWN).sum())) for d in DIMENSIONS}})
        print(f"{name}:\n{table.to_markdown()}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--show", nargs=2, type=int, metavar=("START", "END"),
                    help="print units START..END-1 of sample.jsonl blind (no sampling)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--no-smollm2", action="store_true")
    ap.add_argument("--regen-smollm2", action="store_true")
    ap.add_argument("--file", default="sample.jsonl", help="the sample file --show reads")
    ap.add_argument("--extra", metavar="N|auto", help="draw N further surrogate units into sample_extra.jsonl")
    ap.add_argument("--more-surrogate", type=int, metavar="N",
                    help="draw N further surrogate units into sample_extra_b.jsonl")
    ap.add_argument("--extra-smollm2", type=int, metavar="N",
                    help="draw N SmolLM2 units from the llm store into sample_extra_smollm2.jsonl")
    ap.add_argument("--more-smollm2", type=int, metavar="N",
                    help="draw N further SmolLM2 units from the llm store into sample_extra_smollm2_b.jsonl")
    ap.add_argument("--enriched-smollm2", type=int, nargs=2, metavar=("HIGH", "LOW"),
                    help="draw HIGH view-echo and LOW other SmolLM2 units into sample_extra_smollm2_c.jsonl")
    ap.add_argument("--subset", help="with --show: the units listed in this file of data/judge_labels, in order")
    ap.add_argument("--reliability-subset", type=int, metavar="N",
                    help="draw N units of the enriched part for a second annotator into subset_smollm2_c_b.txt")
    ap.add_argument("--reliability-surrogate", type=int, metavar="N",
                    help="draw N units of the second surrogate extension for a second annotator into "
                         "subset_extra_b_b.txt")
    ap.add_argument("--stratum-check", action="store_true",
                    help="the enriched draw's stratum on the SmolLM2 units labelled before it")
    args = ap.parse_args()
    if args.reliability_subset:
        reliability_subset(args.reliability_subset)
        return
    if args.reliability_surrogate:
        reliability_surrogate(args.reliability_surrogate)
        return
    if args.stratum_check:
        stratum_check(args.data)
        return
    if args.enriched_smollm2:
        enriched_smollm2(*args.enriched_smollm2, args.data)
        return
    if args.show:
        show(*args.show, file=args.file, subset=args.subset)
        return
    if args.extra_smollm2:
        extra_smollm2(args.extra_smollm2, args.data)
        return
    if args.more_smollm2:
        extra_smollm2(args.more_smollm2, args.data, "b")
        return
    if args.extra:
        extra(args.extra, args.data)
        return
    if args.more_surrogate:
        extra(str(args.more_surrogate), args.data, "b")
        return
    rng = np.random.default_rng(args.seed)

    benches = {t: load_benchmark(t, args.data) for t in ("pairedmem", "transfer")}
    surr_ids = {t: pick_pairs(b, SURR_PAIRS[t], rng) for t, b in benches.items()}
    smol_ids = {t: pick_smol_pairs(b, SMOL_ATTRS[t], set(surr_ids[t]), rng) for t, b in benches.items()}

    # surrogate transcripts (fast: regenerated every run)
    policies = [p for b in benches.values() for p in b.policies.values()]
    resp = make_responder("surrogate", policies)
    frames = []
    try:
        for t, b in benches.items():
            frames.append(generate_transcripts(b.subset(surr_ids[t]), resp, SURROGATE_METHODS, seeds=EM_SEEDS,
                                               turns=T, params=PARAMS, progress=False))
    finally:
        resp.close()
    surr = pd.concat(frames, ignore_index=True)
    cands = [candidates(surr, benches, "surrogate")]

    smol = None
    if not args.no_smollm2:
        try:
            smol = smollm2_transcripts(benches, smol_ids, OUT / "transcripts_smollm2.parquet", args.regen_smollm2)
        except Exception as exc:  # noqa: BLE001 - report and continue with the surrogate only
            print(f"[smollm2] failed: {type(exc).__name__}: {exc}", flush=True)
    if smol is not None:
        cands.append(candidates(smol, benches, "smollm2"))
    cand = pd.concat(cands, ignore_index=True)

    units = []
    for model in ("surrogate", "smollm2"):
        for kind in ("target_required", "unsupported", "generic"):
            c = cand[(cand["response_model"] == model) & (cand["item_kind"] == kind)]
            if c.empty:
                continue
            if kind == "generic":  # generic items: half on each side
                seen_k: set = set()
                for side in ("M", "M'"):
                    units += stratified(c[c["side"] == side], QUOTA[(model, kind)] // 2, rng, seen_k)
            else:
                units += stratified(c, QUOTA[(model, kind)], rng, set())
    units = [units[i] for i in rng.permutation(len(units))]
    for i, u in enumerate(units):
        u["unit_id"] = f"u{i + 1:04d}"
    cols = ["unit_id", "track", "response_model", "method", "side", "pair_id", "attribute", "seed", "turn",
            "query", "response", "item_id", "item_description", "item_kind", "item_role"]
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "sample.jsonl").open("w", encoding="utf-8") as f:
        for u in units:
            f.write(json.dumps({c: u[c] for c in cols}, ensure_ascii=False) + "\n")
    df = pd.DataFrame(units)
    print(f"{len(df)} units -> {OUT / 'sample.jsonl'}")
    print("pairs:", {t: len(v) for t, v in surr_ids.items()}, "smollm2 pairs:", smol_ids)
    for c in ("response_model", "item_kind", "track", "side", "method"):
        print(c, dict(Counter(df[c])))
    print(pd.crosstab([df["response_model"], df["item_kind"]], df["side"]))


if __name__ == "__main__":
    main()
