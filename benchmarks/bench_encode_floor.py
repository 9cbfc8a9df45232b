"""The floor that encoding sets under `make reproduce` from empty caches (goal: 6.5 minutes).

Notebook 03's auditor embeds every distinct response of its transcripts once (C.5: one text per
response, all-MiniLM-L6-v2, the default profile's encoder and precision). This script builds those
transcripts as notebook 03 does (``run_rq1`` with the default profile and seed; the hashing
encoder and no bootstrap, since only the transcripts are used), counts the distinct responses and
their word pieces, and times the encoder on ``--n`` of them (a fresh encoder, no embedding cache)
at several batch sizes, with each batch size's largest cosine distance to batch 64's vectors.
The floor: notebook 03's distinct responses / the best responses/s, beside the committed default
run's notebook time (``results/manifest.json``: warm embedding cache, so it holds no encoding).

    .venv/bin/python benchmarks/bench_encode_floor.py [--n 4096] [--batch-sizes 16 32 64 128]

Writes ``benchmarks/results/encode_floor.json`` and ``encode_floor.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from machine_info import describe, machine  # noqa: E402  (also puts this checkout on sys.path)

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 390   # at most 6.5 minutes of notebook time


def rq1_responses(work: Path) -> tuple[list[str], int]:
    """Notebook 03's distinct responses (turns < T, as the auditor reads them) and its T."""
    import numpy as np
    from dpmv_lib.experiments.rq1 import RQ1Config, run_rq1

    cfg = RQ1Config(profile="default", seed=0, results_dir=str(work), encoder="hashing", n_boot=0,
                    progress=False, write=False)
    res = run_rq1(cfg, log=lambda s: None)
    tr = res.transcripts
    return list(np.unique(tr.loc[tr["turn"] < cfg.T, "response"].astype(str).to_numpy())), cfg.T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096, help="responses timed (the first n in sorted order)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--work", default="/tmp/dpmv_bench_encode_floor")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "encode_floor"))
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    from dpmv_lib.evaluate.encoders import get_encoder

    mach = machine()
    t = time.perf_counter()
    texts, T = rq1_responses(Path(a.work))
    build_s = time.perf_counter() - t   # the whole RQ1 run that made the transcripts
    enc = get_encoder("minilm")
    sample = texts[:a.n]
    pieces = np.array([len(enc.model.tokenizer(x)["input_ids"]) for x in sample])
    enc.encode(sample[:64])   # warm-up
    runs, ref = {}, None
    for bs in sorted(set(a.batch_sizes), key=lambda b: (b != 64, b)):   # batch 64 (the default) first
        enc.batch_size = bs
        t = time.perf_counter()
        x = enc.encode(sample)
        wall = time.perf_counter() - t
        runs[bs] = {"wall_s": round(wall, 2), "responses_per_s": round(len(sample) / wall, 1),
                    "max_cosine_distance_to_batch_64": None if ref is None   # batch 64: the reference
                    else float(1 - (x.astype(np.float64) * ref).sum(1).min())}
        ref = x if ref is None else ref
        print(f"batch {bs}: {runs[bs]['responses_per_s']} responses/s", flush=True)
    best = max(r["responses_per_s"] for r in runs.values())
    manifest = json.loads((ROOT / "results" / "manifest.json").read_text())
    warm = {n["name"]: n["wall_s"] for n in manifest["notebooks"]}
    rec = {"machine": mach, "encoder": enc.id, "T": T, "distinct_responses": len(texts), "timed": len(sample),
           "word_pieces_mean": round(float(pieces.mean()), 1), "word_pieces_max": int(pieces.max()),
           "rq1_hashing_run_s": round(build_s, 1), "runs": runs, "best_responses_per_s": best,
           "notebook03_encode_floor_s": round(len(texts) / best, 1),
           "warm_run": {"commit": manifest["git"]["commit"], "notebooks_s": round(sum(warm.values()), 1),
                        "by_notebook": warm}}
    rec["floor_s"] = round(rec["notebook03_encode_floor_s"] + rec["warm_run"]["notebooks_s"], 1)
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=1) + "\n")
    lines = ["# The encoding floor under `make reproduce` from empty caches", "",
             f"Machine: {describe(mach)}.", "",
             f"Notebook 03's transcripts (default profile, seed 0, turns < T = {T}) hold **{len(texts):,} distinct "
             f"responses**; the first {len(sample):,} in sorted order average {rec['word_pieces_mean']} word pieces "
             f"(at most {rec['word_pieces_max']}). Encoder `{enc.id}` (the default profile's; no embedding cache), "
             "one timed pass per batch size after a warm-up:", "",
             "| batch size | responses/s | largest cosine distance to batch 64 |", "| ---: | ---: | ---: |"]
    lines += [f"| {bs} | {r['responses_per_s']} | " + ("(reference)" if r["max_cosine_distance_to_batch_64"] is None
              else f"{r['max_cosine_distance_to_batch_64']:.1e}") + " |" for bs, r in runs.items()]
    floor03 = rec["notebook03_encode_floor_s"]
    lines += ["", f"- Encoding notebook 03's responses once takes at least **{floor03:.0f} s** "
              f"at the best rate ({best} responses/s).",
              f"- The committed default run ({rec['warm_run']['commit'][:8]}, warm embedding cache: no encoding) took "
              f"**{rec['warm_run']['notebooks_s']:.0f} s** of notebook time.",
              f"- Together: **{rec['floor_s']:.0f} s**, against the goal of {GOAL_S} s from empty caches "
              "(notebooks 04 and 05 encode their own new responses on top)."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
