"""CPU cost of the rollback witness per write transaction: one ``read`` and one ``advance``.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_witness.py --baseline DIR [--n 20000] [--chunks 40]

What a SQLite ledger's charge asks of its witness (``FileWitness``): the mark read as the write
transaction begins, then the advance after the commit (not synced: the default). Measured for
this tree and a ``--baseline`` checkout (e.g. ``git archive`` of an earlier commit), unkeyed and
with a 32-byte key where the tree's witness takes one, in fresh worker processes that alternate
chunk by chunk (``--chunks`` chunks of ``--n / chunks`` transactions each), so that both trees
see the same machine; each worker times its chunk with ``time.perf_counter_ns`` and the table
gives the median per transaction over chunks. Writes benchmarks/results/witness_cost.json and .md
(with the CPU model: timings are not comparable across machines).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
KEY = bytes(range(32))


def worker(spec: dict) -> None:
    """Time ``spec['n']`` read + advance pairs on the witness of ``spec['tree']``; print ns each."""
    sys.path.insert(0, spec["tree"])
    from dpmv_lib.ledgers import witness as wmod
    if not Path(wmod.__file__).resolve().is_relative_to(Path(spec["tree"]).resolve()):
        raise RuntimeError(f"{wmod.__file__} is not in {spec['tree']}")
    kw = {"key": KEY} if spec["keyed"] else {}
    w = wmod.FileWitness(spec["dir"], **kw)
    h = "ab" * 32
    start = spec["seq"]
    advance = (lambda s: w.advance("alice", s, h, genesis="cd" * 32)) if getattr(w, "binds_ledger", False) \
        else (lambda s: w.advance("alice", s, h))
    advance(start)   # (the file exists, as after a ledger's first charge)
    clock = time.perf_counter_ns
    t0 = clock()
    for s in range(start + 1, start + 1 + spec["n"]):
        w.read("alice")
        advance(s)
    print(json.dumps({"ns": (clock() - t0) / spec["n"]}))
    w.close()


def run(tree: str, keyed: bool, d: str, n: int, seq: int) -> float:
    spec = {"tree": tree, "keyed": keyed, "dir": d, "n": n, "seq": seq}
    env = dict(os.environ, PYTHONPATH=tree)   # (the measured tree's dpmv_lib, not this checkout's)
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                       env=env)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return float(json.loads(p.stdout.strip().splitlines()[-1])["ns"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--baseline", required=False, default="")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--out", default="witness_cost")
    a = ap.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return 0
    from machine_info import describe, loadavg, machine   # (imports this checkout's dpmv_lib: not in a worker)
    trees = ({"before": str(Path(a.baseline).resolve())} if a.baseline else {}) | {"after": str(ROOT)}
    per = max(1, a.n // a.chunks)
    info, t_start = machine(), time.time()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for c in range(a.chunks):
            for keyed in (False, True):
                for lab, tree in (trees.items() if c % 2 == 0 else reversed(trees.items())):
                    has_key = "key: bytes | None" in (Path(tree) / "dpmv_lib/ledgers/witness.py").read_text()
                    if keyed and not has_key:
                        continue
                    d = f"{tmp}/{lab}_{int(keyed)}"
                    times.setdefault(f"{lab} {'keyed' if keyed else 'unkeyed'}", []).append(
                        run(tree, keyed, d, per, c * per + 1))
    rows = {k: {"median_us": statistics.median(v) / 1000, "min_us": min(v) / 1000, "chunks": len(v)}
            for k, v in times.items()}
    res = {"what": "rollback witness CPU cost per write transaction (read + advance, unsynced)",
           "command": "PYTHONPATH=. .venv/bin/python benchmarks/bench_witness.py " + " ".join(sys.argv[1:]),
           "trees": trees, "transactions_per_chunk": per, "machine": info, "loadavg_at_end": loadavg(),
           "wall_s": round(time.time() - t_start, 1), "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{a.out}.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Rollback witness: CPU cost per write transaction", "",
             f"Machine: {describe(info)}; load average before/after: {info['loadavg_at_start']} / "
             f"{res['loadavg_at_end']} (a loaded machine: other jobs shared the 2 cores).",
             f"Command: `{res['command']}` ({res['wall_s']} s). Trees: "
             + ", ".join(f"{k} = {v}" for k, v in trees.items()) + ".", "",
             f"One `read` and one `advance` of `FileWitness` (unsynced, the default) per transaction, "
             f"{per} transactions per chunk in a fresh process, {a.chunks} chunks per row, the trees "
             "alternating chunk by chunk; median and minimum over chunks.", "",
             "| witness | median us / transaction | min us | chunks |", "|---|---|---|---|"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['median_us']:.1f} | {r['min_us']:.1f} | {r['chunks']} |")
    (OUT / f"{a.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
