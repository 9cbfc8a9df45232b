"""Benchmark the auditor's encoder: all-MiniLM-L6-v2 responses/s in fp32 and in bf16, with the
PyTorch and the OpenVINO runtime (and OpenVINO int8, quantized by NNCF), on this CPU, and how
close each is to PyTorch fp32 and bf16 (cosine per response).

    .venv/bin/python benchmarks/bench_encoder.py [--n 500] [--repeats 3] [--pairs 24] [--seed 0]

The texts are ``n`` distinct surrogate responses to PairedMem queries (the default profile's
responder on ``pairs`` stratified pairs), encoded one whole response per text (the C.5 unit),
batched sorted by length, batch size 64, no embedding cache.
The encoders are timed interleaved (every encoder once per round, ``repeats`` rounds), so load
from other jobs on a shared machine falls on all of them alike.
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
BATCH_PADDED = "minilm@bf16, batch-padded"


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
    specs = ["minilm@fp32", "minilm@bf16"]
    try:
        import openvino  # noqa: F401
        specs += ["minilm-ov@fp32", "minilm-ov@bf16"]
        import nncf  # noqa: F401
        specs += ["minilm-ov@int8"]
    except ImportError:
        print("openvino or nncf not installed: not every runtime is timed")
    encoders = {spec: get_encoder(spec, **({"device": "cpu"} if "-ov" not in spec else {})) for spec in specs}
    runners = {spec: enc.encode for spec, enc in encoders.items()}
    # sentence-transformers' own encode (each batch padded to its longest text): the speed of the
    # batch-dependent path the fixed-width padding replaced
    st = encoders["minilm@bf16"].model
    runners[BATCH_PADDED] = lambda texts: st.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                                    convert_to_numpy=True)
    for run in runners.values():
        run(texts[:64])   # warm-up (first-call allocations, kernel selection)
    walls: dict[str, list[float]] = {spec: [] for spec in runners}
    for _ in range(args.repeats):   # interleaved: A, B, C, ..., A, B, C, ... (a shared machine's load hits all)
        for spec, run in runners.items():
            t = time.perf_counter()
            emb[spec] = np.asarray(run(texts), dtype=np.float32)
            walls[spec].append(time.perf_counter() - t)
    for spec, w in walls.items():
        res["runs"][spec] = {"encoder_id": encoders[spec].id if spec in encoders else "(not cached: batch-dependent)",
                             "wall_s": [round(x, 3) for x in w],
                             "responses_per_s_median": round(len(texts) / statistics.median(w), 1),
                             "responses_per_s_best": round(len(texts) / min(w), 1)}
        print(f"{spec}: {res['runs'][spec]['responses_per_s_median']} responses/s (median of {args.repeats})")
    res["loadavg_after"] = loadavg()
    specs = list(runners)
    res["cosine"] = {}
    for spec in specs:
        for ref in ("minilm@fp32", "minilm@bf16"):
            if spec != ref and spec != BATCH_PADDED:   # that row is timed only
                cos = np.sum(emb[spec].astype(np.float64) * emb[ref].astype(np.float64), axis=1)
                res["cosine"][f"{spec} vs {ref}"] = {"min": float(cos.min()), "p01": float(np.quantile(cos, 0.01)),
                                                     "median": float(np.median(cos))}
    base = res["runs"]["minilm@fp32"]["responses_per_s_median"]
    for spec in specs:
        res["runs"][spec]["speedup_vs_torch_fp32"] = round(res["runs"][spec]["responses_per_s_median"] / base, 2)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "encoder.json").write_text(json.dumps({"machine": m, "results": res}, indent=2) + "\n")
    lines = ["# Auditor encoder: all-MiniLM-L6-v2, PyTorch and OpenVINO runtimes, fp32, bf16 and int8", "",
             f"Machine: {describe(m)}; load average at start {m['loadavg_at_start']} (shared cores).", "",
             f"{len(texts)} distinct surrogate responses (median {res['chars_median']} chars, max {res['chars_max']}), "
             f"one text per response (C.5), batch 64, each text padded to a width set by its own length (the "
             f"batch-padded row: sentence-transformers' encode, batches padded to their longest text), median of "
             f"{args.repeats} interleaved timed passes after a warm-up; load average after "
             f"{res['loadavg_after']}. `auto` precision on this CPU: **{res['auto_precision']}**. `minilm` is "
             f"PyTorch (the sentence-transformers model), `minilm-ov` OpenVINO, `@int8` its NNCF post-training "
             f"quantization (benchmarks/results/encoder_decision.md and encoder_decision_int8.md: the default "
             f"profile's deltas between them).", "",
             "| spec | encoder id | responses/s (median) | responses/s (best) | vs PyTorch fp32 |",
             "| --- | --- | --- | --- | --- |"]
    for spec, r in res["runs"].items():
        lines.append(f"| `{spec}` | `{r['encoder_id']}` | {r['responses_per_s_median']} | {r['responses_per_s_best']} "
                     f"| {r['speedup_vs_torch_fp32']}x |")
    lines += ["", "Cosine of each response's embedding to the reference's (PyTorch fp32 is exact; PyTorch bf16 is "
              "the default profile's precision on CPUs with native bf16):", "",
              "| embedding | vs | min | 1st percentile | median |", "| --- | --- | --- | --- | --- |"]
    for key, c in res["cosine"].items():
        a, b = key.split(" vs ")
        lines.append(f"| `{a}` | `{b}` | {c['min']:.6f} | {c['p01']:.6f} | {c['median']:.6f} |")
    (OUT / "encoder.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
