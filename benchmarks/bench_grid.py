"""The exact budget grid of notebook 05 (default profile), timed, and checked byte for byte.

Computes ``sensitivity.compute_grid`` as notebook 05 does at the default profile (test pairs,
B_a 1/2/4/8, K 2/3/4, every mode, T up to 32, 3 EM seeds) with the ``dpmv_lib`` of ``--tree``
(default: this checkout) and ``--workers`` (``old``: a tree whose compute_grid has no such
argument), writes the grid CSV and says whether it is byte-identical to the committed
``results/grids/05_budget_grid.csv``. One JSON line per run, appended to ``--log``.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_grid.py --tree /tmp/before --workers old
    PYTHONPATH=. .venv/bin/python benchmarks/bench_grid.py --workers 2
"""
from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=str(ROOT))
    ap.add_argument("--workers", default="2", help="an int, or 'old'")
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--log", default=str(ROOT / "benchmarks" / "results" / "grid.jsonl"))
    a = ap.parse_args(argv)
    sys.path.insert(0, a.tree)
    from dpmv_lib.bench.datasets import load_benchmark, load_gold_rules
    from dpmv_lib.common.machine import cpu_summary
    from dpmv_lib.experiments import sensitivity as S

    data = ROOT / "data"
    bench = load_benchmark("pairedmem", data)
    spec = S.GridSpec(b_as=(1, 2, 4, 8), ks=(2, 3, 4), horizon=a.horizon, plan_horizon=16, modes=S.MODES)
    pairs = [p for p in bench.pairs if p.split == "test"] or list(bench.pairs)
    kw = {} if a.workers == "old" else {"workers": int(a.workers)}
    t = time.perf_counter()
    grid = S.compute_grid(bench, pairs, spec, view_links=load_gold_rules(data)["view_links"], n_seeds=3, **kw)
    seconds = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        out = S.save_grid(grid, Path(d) / "grid.csv")
        same = filecmp.cmp(out, ROOT / "results" / "grids" / "05_budget_grid.csv", shallow=False)
    rec = {"tree": a.tree, "workers": a.workers, "horizon": a.horizon, "seconds": round(seconds, 1),
           "identical_to_committed": same, "machine": cpu_summary()}
    print(json.dumps(rec))
    with open(a.log, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
