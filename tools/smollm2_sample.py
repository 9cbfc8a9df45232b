"""A sample of SmolLM2 responses with their conditioning and the judge's grades.

Until the full `llm` profile is rerun (hours on 2 cores; its notebook 03 then writes
results/llm/tables/03_response_sample.csv itself), this generates the llm profile's responses
(SmolLM2-135M-Instruct, OpenVINO f32, greedy; the same prompts, so the generation cache serves the
full run later) for a seeded subset of pairs, every paper method, both sides, EM seed 0, T = 16, and
writes results/llm/samples/: the sample (15 cells x 2 sides per track and method), M / M' side by
side, and a manifest with the commit and settings.

    make export-openvino && .venv/bin/python tools/smollm2_sample.py [--pairs 8 --transfer-pairs 4]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpmv_lib.bench.datasets import load_benchmark  # noqa: E402
from dpmv_lib.evaluate.encoders import get_encoder  # noqa: E402
from dpmv_lib.evaluate.judge import make_judge  # noqa: E402
from dpmv_lib.experiments import samples as SA  # noqa: E402
from dpmv_lib.experiments.profiles import get_profile  # noqa: E402
from dpmv_lib.experiments.rq1 import PAPER_METHODS, select_pairs  # noqa: E402
from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts  # noqa: E402
from dpmv_lib.generate.responders import make_responder  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--transfer-pairs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/llm/samples")
    args = ap.parse_args()
    prof = get_profile("llm")
    t0 = time.time()
    benches = {"pairedmem": select_pairs(load_benchmark("pairedmem", "data"), args.pairs, args.seed),
               "transfer": select_pairs(load_benchmark("transfer", "data"), args.transfer_pairs, args.seed)}
    resp = make_responder(prof.responder)
    try:
        frames = [generate_transcripts(b, resp, PAPER_METHODS, seeds=(0,), turns=16,
                                       params=InterfaceParams(B_a=2, K=3, plan_horizon=16), progress=True)
                  for b in benches.values()]
    finally:
        resp.close()
    import pandas as pd

    tr = pd.concat(frames, ignore_index=True)
    gen_s = time.time() - t0
    judge = make_judge(prof.judge, get_encoder(prof.encoder))
    sample = SA.response_sample(tr, benches, judge, seed=args.seed)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    sample.to_csv(out / "03_response_sample.csv", index=False)
    SA.side_by_side(sample, n=2).to_csv(out / "03_side_by_side.csv", index=False)
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    (out / "manifest.json").write_text(json.dumps({
        "what": "SmolLM2 response sample, not the full llm run",
        "command": " ".join(["python", "tools/smollm2_sample.py", *sys.argv[1:]]),
        "git": {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))},
        "responder": prof.responder, "judge": judge.id, "methods": list(PAPER_METHODS), "em_seed": 0, "T": 16,
        "pairs": {k: [p.pair_id for p in b.pairs] for k, b in benches.items()},
        "responses_generated": int(len(tr)), "distinct_responses": int(tr["response"].nunique()),
        "sampled": int(len(sample)), "generation_s": round(gen_s, 1), "total_s": round(time.time() - t0, 1)},
        indent=1))
    print(f"wrote {out}: {len(sample)} sampled responses of {len(tr)} ({gen_s:.0f} s generation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
