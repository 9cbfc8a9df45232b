"""Benchmark RQ1: notebook 03 end to end under papermill (smoke and default profiles), with the
per-stage timings the pipeline records, and (optionally) how close the fast "sentence" embedding
unit is to the exact per-response unit of C.5.

    .venv/bin/python benchmarks/bench_rq1.py [--profiles smoke default] [--compare-units N]

Writes benchmarks/results/rq1.json and rq1.md. The default-profile target: notebook 03 alone, data
already built, under 10 minutes on 2 cores. Each profile runs into a fresh results directory
(a cold embedding cache) and then once more into the same directory (warm cache).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from machine_info import describe, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "notebooks" / "03_rq1_privacy_utility.ipynb"
OUT = ROOT / "benchmarks" / "results"




def run_notebook(profile: str, results_dir: Path, out_nb: Path, seed: int) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0",
               TOKENIZERS_PARALLELISM="false")
    cmd = [str(ROOT / ".venv" / "bin" / "papermill"), str(NB), str(out_nb), "-k", "python3", "--cwd", str(ROOT),
           "-p", "profile", profile, "-p", "seed", str(seed), "-p", "results_dir", str(results_dir)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"notebook 03 failed under profile {profile}:\n{proc.stderr[-3000:]}")
    run = json.loads((results_dir / "tables" / "rq1_run.json").read_text())
    return {"wall_s": round(wall, 1), "stages_s": {k: round(v, 1) for k, v in run["timings_s"].items()},
            "embedding_unit": run.get("embedding_unit"), "encoder": run.get("encoder"), "judge": run.get("judge"),
            "notes": run.get("notes", [])}


def compare_units(n_pairs: int, seed: int) -> dict:
    """Exact (per-response) vs sentence-mean embedding on a stratified subset with MiniLM: cosine
    agreement of the response embeddings and the Table 2 auditor AUC of each method under both."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from dpmv_lib.evaluate.audit import AuditConfig, embed_responses, run_audit
    from dpmv_lib.evaluate.encoders import get_encoder
    from dpmv_lib.experiments.rq1 import load_tracks
    from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.generate.responders import make_responder

    prof = get_profile("default", pairs=n_pairs, transfer_pairs=None)
    bench = load_tracks("data", prof, seed)["pairedmem"]
    resp = make_responder("surrogate", list(bench.policies.values()))
    tr = generate_transcripts(bench, resp, seeds=prof.em_seeds, turns=16, params=InterfaceParams(plan_horizon=16),
                              progress=False)
    enc = get_encoder("minilm", cache_dir=ROOT / "results" / "cache" / "embeddings")
    texts = sorted(set(tr["response"]))
    rng = np.random.default_rng(seed)
    sample = [texts[i] for i in rng.choice(len(texts), size=min(500, len(texts)), replace=False)]
    a, _ = embed_responses(sample, enc, "response")
    b, _ = embed_responses(sample, enc, "sentence")
    cos = (a * b).sum(axis=1)
    out = {"pairs": len(bench), "distinct_responses": len(texts),
           "cosine_response_vs_sentence": {"median": float(np.median(cos)), "p05": float(np.quantile(cos, 0.05)),
                                           "min": float(cos.min())}}
    aucs = {}
    for unit in ("response", "sentence"):
        t = time.perf_counter()
        s, _ = run_audit(tr, enc, AuditConfig(horizons=(16,), n_boot=0, unit=unit))
        aucs[unit] = {"seconds": round(time.perf_counter() - t, 1),
                      "auc": {r.method: round(r.auc, 4) for r in s.itertuples()}}
    out["audit"] = aucs
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", nargs="+", default=["smoke", "default"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warm", action="store_true", help="skip the second (warm-cache) run")
    ap.add_argument("--compare-units", type=int, default=0, metavar="N",
                    help="also compare embedding units on N PairedMem pairs (0 = skip)")
    args = ap.parse_args(argv)
    res = {"benchmark": "rq1 notebook 03 end to end (papermill)", "machine": machine(), "seed": args.seed,
           "target": "default profile < 600 s on 2 cores (notebook 03 alone, data built)", "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench_rq1_") as tmp:
        for prof in args.profiles:
            rd = Path(tmp) / prof
            r = {"cold": run_notebook(prof, rd, Path(tmp) / f"03_{prof}_cold.ipynb", args.seed)}
            print(f"{prof} cold: {r['cold']['wall_s']} s {r['cold']['stages_s']}")
            if not args.no_warm:
                r["warm"] = run_notebook(prof, rd, Path(tmp) / f"03_{prof}_warm.ipynb", args.seed)
                print(f"{prof} warm: {r['warm']['wall_s']} s")
            res["runs"][prof] = r
    if args.compare_units:
        res["embedding_units"] = compare_units(args.compare_units, args.seed)
        print(json.dumps(res["embedding_units"], indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "rq1.json").write_text(json.dumps(res, indent=1))
    lines = ["# RQ1 benchmark (notebook 03 under papermill)", "",
             f"Machine: {describe(res['machine'])}, Python {res['machine']['python']}, load average at start "
             f"{res['machine']['loadavg_at_start']} (other processes shared the cores).", "",
             "| profile | run | wall (s) | generation | audit | oracle | judge | tables | embedding unit |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for prof, r in res["runs"].items():
        for kind, x in r.items():
            st = x["stages_s"]
            lines.append(f"| {prof} | {kind} | {x['wall_s']} | {st.get('generation')} | {st.get('audit')} | "
                         f"{st.get('oracle')} | {st.get('judge')} | {st.get('tables')} | {x['embedding_unit']} |")
    if "embedding_units" in res:
        eu = res["embedding_units"]
        lines += ["", f"Embedding units on {eu['pairs']} PairedMem pairs "
                  f"({eu['distinct_responses']} distinct responses): "
                  f"cosine(response, sentence-mean) median {eu['cosine_response_vs_sentence']['median']:.3f}, "
                  f"5th percentile {eu['cosine_response_vs_sentence']['p05']:.3f}.", "",
                  "| method | AUC (response, exact C.5) | AUC (sentence mean) |", "| --- | --- | --- |"]
        for m, v in eu["audit"]["response"]["auc"].items():
            lines.append(f"| {m} | {v:.3f} | {eu['audit']['sentence']['auc'].get(m, float('nan')):.3f} |")
        lines.append(f"\nAudit time: response {eu['audit']['response']['seconds']} s, sentence "
                     f"{eu['audit']['sentence']['seconds']} s (with the embedding cache as found; cold "
                     f"encoder throughput, fp32 vs bf16, is measured by bench_encoder.py: encoder.md).")
    (OUT / "rq1.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'rq1.json'} and {OUT / 'rq1.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
