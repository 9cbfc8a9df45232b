"""Benchmark notebooks 04 (RQ2, Table 4) and 05 (budget sensitivity, Table 3) end to end under
papermill, with the per-step timings the notebooks record.

    .venv/bin/python benchmarks/bench_rq2.py [--profiles smoke default] [--no-warm]

Writes benchmarks/results/rq2.json and rq2.md. Targets: smoke well under a minute per notebook;
default about 10 minutes per notebook on 2 cores. Per profile both notebooks run in order into
one fresh results directory (cold caches: 05 reuses 04's main-setting transcripts, as in
``make reproduce``), then once more into the same directory (warm caches).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from machine_info import describe, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {"04": ROOT / "notebooks" / "04_rq2_safeguards.ipynb",
             "05": ROOT / "notebooks" / "05_budget_sensitivity.ipynb"}
OUT = ROOT / "benchmarks" / "results"




def run_notebook(key: str, profile: str, results_dir: Path, out_nb: Path, seed: int) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0",
               TOKENIZERS_PARALLELISM="false")
    cmd = [str(ROOT / ".venv" / "bin" / "papermill"), str(NOTEBOOKS[key]), str(out_nb), "-k", "python3", "--cwd",
           str(ROOT), "-p", "profile", profile, "-p", "seed", str(seed), "-p", "results_dir", str(results_dir)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"notebook {key} failed under profile {profile}:\n{proc.stderr[-3000:]}")
    run = json.loads((results_dir / "tables" / f"{key}_run.json").read_text())
    return {"wall_s": round(wall, 1), "steps_s": {k: round(v, 1) for k, v in run["timings_s"].items()},
            "compute_s": round(run["total_s"], 1), "loadavg_1min_at_start": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", nargs="+", default=["smoke", "default"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warm", action="store_true", help="skip the second (warm-cache) run")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR (kept: executed notebooks, tables, figures) "
                    "instead of a temporary directory; DIR/<profile> must not exist")
    args = ap.parse_args(argv)
    res = {"benchmark": "notebooks 04 and 05 end to end (papermill)", "machine": machine(), "seed": args.seed,
           "targets": {"smoke": "< 60 s per notebook", "default": "about 600 s per notebook on 2 cores"}, "runs": {}}
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="bench_rq2_")) as tmp:
        for prof in args.profiles:
            rd = Path(tmp) / prof
            if rd.exists():
                raise SystemExit(f"{rd} exists; the cold run needs a fresh results directory")
            rd.mkdir(parents=True)
            r: dict = {}
            for kind in ("cold",) + (() if args.no_warm else ("warm",)):
                for key in NOTEBOOKS:
                    x = run_notebook(key, prof, rd, Path(tmp) / f"{key}_{prof}_{kind}.ipynb", args.seed)
                    r.setdefault(kind, {})[key] = x
                    print(f"{prof} {kind} {key}: {x['wall_s']} s {x['steps_s']}")
            res["runs"][prof] = r
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "rq2.json").write_text(json.dumps(res, indent=1))
    lines = ["# Notebooks 04 and 05 benchmark (papermill)", "",
             f"Machine: {describe(res['machine'])}, Python {res['machine']['python']}, load average at start "
             f"{res['machine']['loadavg_at_start']} (other processes shared the cores).", "",
             "| profile | run | notebook | wall (s) | load (1 min) | steps (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for prof, r in res["runs"].items():
        for kind, nbs in r.items():
            for key, x in nbs.items():
                steps = ", ".join(f"{k} {v}" for k, v in x["steps_s"].items())
                load = x["loadavg_1min_at_start"]
                lines.append(f"| {prof} | {kind} | {key} | {x['wall_s']} | {load:.1f} | {steps} |" if load is not None
                             else f"| {prof} | {kind} | {key} | {x['wall_s']} | - | {steps} |")
    (OUT / "rq2.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'rq2.json'} and {OUT / 'rq2.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
