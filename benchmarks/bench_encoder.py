"""Benchmark the auditor's encoder: all-MiniLM-L6-v2 responses/s in fp32 and in bf16 on this CPU,
and how close bf16 embeddings are to fp32 (cosine per response).

    .venv/bin/python benchmarks/bench_encoder.py [--n 500] [--repeats 3] [--pairs 24] [--seed 0]

The texts are ``n`` distinct surrogate responses to PairedMem queries (the default profile's
responder on ``pairs`` stratified pairs), encoded one whole response per text (the C.5 unit),
batched sorted by length (sentence-transformers' ``encode``), batch size 64, no embedding cache.
Writes benchmarks/results/encoder.json and encoder.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from machine_info import describe, loadavg, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"


def sample_responses(n: int, pairs: int, seed: int) -> list[str]:
    """``n`` distinct surrogate responses (stratified PairedMem pairs, all RQ1 methods' generator)."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from dpmv_lib.experiments.rq1 import load_tracks
    from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.generate.responders import make_responder

    prof = get_profile("default", pairs=pairs, transfer_pairs=None)
    bench = load_tracks(str(ROOT / "data"), prof, seed)["pairedmem"]
    resp = make_responder("surrogate", list(bench.policies.values()))
    tr = generate_transcripts(bench, resp, seeds=(0,), turns=16, params=InterfaceParams(plan_horizon=16),
                              progress=False)
    texts = sorted(set(tr["response"]))
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.choice(len(texts), size=min(n, len(texts)), replace=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import numpy as np
    from dpmv_lib.evaluate.encoders import auto_precision, get_encoder

    m = machine()
    texts = sample_responses(args.n, args.pairs, args.seed)
    chars = [len(t) for t in texts]
    res: dict = {"n_texts": len(texts), "chars_median": statistics.median(chars), "chars_max": max(chars),
                 "repeats": args.repeats, "batch_size": 64, "auto_precision": auto_precision("cpu"), "runs": {}}
    emb = {}
    for prec in ("fp32", "bf16"):
        enc = get_encoder(f"minilm@{prec}", device="cpu")
        enc.encode(texts[:64])   # warm-up (first-call allocations, kernel selection)
        walls = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            emb[prec] = enc.encode(texts)
            walls.append(time.perf_counter() - t)
        res["runs"][prec] = {"encoder_id": enc.id, "wall_s": [round(w, 3) for w in walls],
                             "responses_per_s_median": round(len(texts) / statistics.median(walls), 1),
                             "responses_per_s_best": round(len(texts) / min(walls), 1),
                             "loadavg_after": loadavg()}
        print(f"{prec}: {res['runs'][prec]['responses_per_s_median']} responses/s (median of {args.repeats})")
    cos = np.sum(emb["fp32"].astype(np.float64) * emb["bf16"].astype(np.float64), axis=1)
    res["cosine_bf16_vs_fp32"] = {"min": float(cos.min()), "p01": float(np.quantile(cos, 0.01)),
                                  "median": float(np.median(cos))}
    res["speedup_bf16"] = round(res["runs"]["bf16"]["responses_per_s_median"]
                                / res["runs"]["fp32"]["responses_per_s_median"], 2)
    print(f"cosine bf16 vs fp32: min {cos.min():.6f}, median {np.median(cos):.6f}; speed-up {res['speedup_bf16']}x")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "encoder.json").write_text(json.dumps({"machine": m, "results": res}, indent=2) + "\n")
    lines = ["# Auditor encoder: all-MiniLM-L6-v2, fp32 vs bf16", "",
             f"Machine: {describe(m)}; load average at start {m['loadavg_at_start']} (shared cores).", "",
             f"{len(texts)} distinct surrogate responses (median {res['chars_median']} chars, max {res['chars_max']}), "
             f"one text per response (C.5), batch 64 sorted by length, median of {args.repeats} timed passes "
             f"after a warm-up. `auto` precision on this CPU: **{res['auto_precision']}**.", "",
             "| precision | encoder id | responses/s (median) | responses/s (best) |", "| --- | --- | --- | --- |"]
    for prec, r in res["runs"].items():
        lines.append(f"| {prec} | `{r['encoder_id']}` | {r['responses_per_s_median']} | {r['responses_per_s_best']} |")
    c = res["cosine_bf16_vs_fp32"]
    lines += ["", f"Cosine of each response's bf16 embedding to its fp32 embedding: min {c['min']:.6f}, "
              f"1st percentile {c['p01']:.6f}, median {c['median']:.6f}. bf16 speed-up: {res['speedup_bf16']}x.", ""]
    (OUT / "encoder.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
