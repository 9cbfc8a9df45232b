"""Policy loading time vs size, and what happens to a 45 MB policy with 700,000 positions.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_policy_load.py [--baseline-commit COMMIT]

Generates policies with n positions (10 slots of 3 views, 5 attributes of 1,000 positions each,
10 intents), writes them to a temporary directory and times ``Policy.load`` in a fresh
subprocess per measurement (best of ``--repeat``):

* with the default limits (``dpmv_lib.core.policy_json.PolicyLimits()``): the 700k-position file is
  refused by ``max_bytes`` before it is parsed (the time to refuse is recorded);
* with the limits raised explicitly (``PolicyLimits(max_bytes=64 MiB, max_positions=10**6)``):
  the time to load and validate it fully (linear validation);
* optionally the same files with the package as of ``--baseline-commit`` (extracted with
  ``git archive``), each run capped at ``--baseline-timeout`` seconds.

Writes benchmarks/results/policy_load.json and policy_load.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from machine_info import machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results"
N_SLOTS, N_ATTRIBUTES, GROUP = 10, 5, 1_000


def policy_dict(n: int) -> dict:
    """A valid policy with ``n`` positions (ids 1..n, round-robin over the slots)."""
    slots = [f"s{k}" for k in range(N_SLOTS)]
    return {
        "name": f"bench-{n}", "sensitivity": "0.6", "version": "1",
        "slots": [{"name": s, "views": [{"id": f"{s}.generic", "text": "generic", "generic": True}] +
                   [{"id": f"{s}.v{j}", "text": f"view {j}", "cues": [f"cue{j}"], "intents": ["q0"]}
                    for j in (1, 2)]} for s in slots],
        "positions": [{"id": i, "slot": slots[i % N_SLOTS], "label": f"memory position {i}"} for i in range(1, n + 1)],
        "attributes": [{"name": f"a{k}", "group": list(range(1 + k * GROUP, 1 + (k + 1) * GROUP)), "cap": "2"}
                       for k in range(N_ATTRIBUTES) if (k + 1) * GROUP <= n] or
                      [{"name": "a0", "group": [1], "cap": "2"}],
        "routes": {f"q{k}": [slots[k], slots[(k + 1) % N_SLOTS]] for k in range(N_SLOTS)},
    }


RAISED = "PolicyLimits(max_bytes=64 * 2**20, max_positions=10**6)"
SNIPPET = """
import json, sys, time
try:
    import dpmv_lib.core.policy as polmod   # layered layout
except ImportError:
    import dpmv_lib.core.policy as polmod        # flat layout of older baseline commits
Policy = polmod.Policy
print(polmod.__file__)
limits = sys.argv[2]
kw = {}
if limits == "raised":
    try:
        from dpmv_lib.core.policy_json import PolicyLimits
    except ImportError:
        PolicyLimits = polmod.PolicyLimits
    kw = {"limits": %s}
t = time.perf_counter()
try:
    p = Policy.load(sys.argv[1], **kw)
    out = {"outcome": "loaded", "positions": len(p.positions)}
except Exception as exc:
    out = {"outcome": "refused", "error": type(exc).__name__, "message": str(exc)[:200]}
out["seconds"] = time.perf_counter() - t
print(json.dumps(out))
""" % RAISED  # noqa: UP031 - the snippet holds literal braces


def measure(tree: Path, path: Path, limits: str, timeout: float, repeat: int) -> dict:
    """Best of ``repeat`` fresh-process runs of Policy.load (the import is not timed)."""
    best = None
    for _ in range(repeat):
        try:
            proc = subprocess.run([sys.executable, "-c", SNIPPET, str(path), limits], capture_output=True,
                                  text=True, timeout=timeout, cwd=str(tree),  # `-c` puts the cwd first on sys.path
                                  env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
        except subprocess.TimeoutExpired:
            return {"outcome": f"not finished within {timeout:g} s (killed)", "seconds": None}
        if proc.returncode != 0:
            return {"outcome": "crashed", "stderr": proc.stderr[-300:], "seconds": None}
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["module"] = proc.stdout.strip().splitlines()[0]
        if best is None or res["seconds"] < best["seconds"]:
            best = res
    best["seconds"] = round(best["seconds"], 4)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8_000, 32_000, 100_000, 700_000])
    ap.add_argument("--baseline-commit", help="also time the package as of this commit (git archive)")
    ap.add_argument("--baseline-sizes", type=int, nargs="+", default=[8_000, 16_000, 32_000, 700_000])
    ap.add_argument("--baseline-timeout", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from dpmv_lib.core import policy_json as pol
    res = {"benchmark": "Policy.load time vs number of positions", "machine": machine(),
           "default_limits": {f: getattr(pol.PolicyLimits(), f) for f in pol.PolicyLimits.__dataclass_fields__},
           "raised_limits": RAISED, "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench_policy_") as tmp:
        files = {}
        for n in sorted(set(args.sizes) | (set(args.baseline_sizes) if args.baseline_commit else set())):
            path = Path(tmp) / f"policy-{n}.json"
            path.write_text(json.dumps(policy_dict(n)))
            files[n] = path
        for n in args.sizes:
            size = files[n].stat().st_size
            for limits in ("default", "raised"):
                r = measure(ROOT, files[n], limits, 300, args.repeat)
                res["runs"].append({"code": "this tree", "positions": n, "bytes": size, "limits": limits, **r})
                print(res["runs"][-1], flush=True)
        if args.baseline_commit:
            base = Path(tmp) / "baseline"
            base.mkdir()
            arch = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_commit, "dpmv_lib"],
                                  capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=arch, check=True)
            res["baseline_commit"] = args.baseline_commit
            for n in args.baseline_sizes:
                r = measure(base, files[n], "default", args.baseline_timeout, 1)
                res["runs"].append({"code": f"baseline {args.baseline_commit}", "positions": n,
                                    "bytes": files[n].stat().st_size, "limits": "none (baseline has none)", **r})
                print(res["runs"][-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "policy_load.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Policy.load time vs size", "",
             "Generated by `benchmarks/bench_policy_load.py`; each figure is the best of "
             f"{args.repeat} fresh-process runs (baseline: one run, capped at {args.baseline_timeout:g} s).", "",
             f"Machine: {res['machine'].get('cpus')} CPUs, Python {res['machine'].get('python')}, "
             f"load average at start {res['machine'].get('loadavg_at_start')}.", "",
             f"Default limits: {res['default_limits']}; raised: `{RAISED}`.", "",
             "| code | positions | file MB | limits | outcome | seconds |", "|---|---:|---:|---|---|---:|"]
    for r in res["runs"]:
        outcome = r["outcome"] + (f" ({r['error']}: {r['message'][:90]})" if r.get("error") else "")
        secs = "-" if r["seconds"] is None else f"{r['seconds']:.4f}"
        lines.append(f"| {r['code']} | {r['positions']:,} | {r['bytes'] / 1e6:.1f} | {r['limits']} | "
                     f"{outcome.replace('|', '/')} | {secs} |")
    (OUT / "policy_load.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'policy_load.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
