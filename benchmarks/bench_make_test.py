"""`make test` on a fresh clone, timed, before and after, in one run; idle or beside a CPU load.

For each git revision in ``--refs`` (default: ``HEAD``) this checkout is cloned into
``--work/<i>-<sha>/main`` (beside a link to this checkout's ``../shared``) and ``make test`` runs
there as on a fresh machine: it creates ``.venv``, installs, compiles llama-cpp-python and runs the
suite (``CI=true``, as ``.ci/run`` runs it, so a missing browser or PostgreSQL fails instead of
skipping). Recorded per revision: the wall time, the CPU time of the process tree (user + system of
the processes waited for), the steps ``tools/run_tests.sh`` reports (``== [N s] ...``, where the revision prints
them), every pytest summary line, the compile time from the build log and the slowest tests.

    .venv/bin/python benchmarks/bench_make_test.py --refs 5d9ad81 HEAD

Writes ``benchmarks/results/make_test.json`` and ``make_test.md`` (``--out``). Runs one revision
after the other (about 10 minutes each on 2 cores): keep the machine otherwise idle. ``--load N``
runs N CPU-bound processes (busy loops at normal priority) beside each run, as a busy CI machine
would: the suite must pass under it, only slower.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

from machine_info import describe, machine  # noqa: E402  (also puts this checkout on sys.path)

ROOT = Path(__file__).resolve().parent.parent
STEP = re.compile(r"^== \[(\d+) s\] (.+)$", re.M)
SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s", re.M)
COMPILED = re.compile(r"^== (?:built|compiled) in (\d+) s \(exit (\d+)\)", re.M)
# getrusage(RUSAGE_CHILDREN): the processes waited for; a daemon (pg_ctl's PostgreSQL server) is not
CPU_LABEL = "CPU time (user + system of the waited-for process tree; daemons not counted)"
SLOW = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)$", re.M)


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def clone(ref: str, work: Path, i: int) -> tuple[str, Path]:
    """A fresh clone of this checkout at ``ref`` under ``work/<i>-<sha>/main``, ``../shared`` linked."""
    sha = _git("rev-parse", ref)
    base = work / f"{i}-{sha[:12]}"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    tree = base / "main"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tree)], check=True)
    _git("checkout", "-q", "--detach", sha, cwd=tree)
    (base / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return sha, tree


def parse(log: str, build_log: str) -> dict:
    """Steps, pytest summaries, the compile time and the slowest tests from a ``make test`` log."""
    comp = COMPILED.search(build_log)
    return {"steps": [{"at_s": int(s), "step": m} for s, m in STEP.findall(log)],
            "pytest": [{"summary": s, "seconds": float(t)} for s, t in SUMMARY.findall(log)],
            "compile_s": int(comp.group(1)) if comp else None,
            "slowest": [{"seconds": float(s), "when": w, "test": t} for s, w, t in SLOW.findall(log)][:10]}


def busy(n: int) -> list[subprocess.Popen]:
    """``n`` CPU-bound processes (a Python busy loop each), to be killed by the caller."""
    import sys

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run_one(i: int, ref: str, work: Path, pytest_args: str, load_procs: int = 0) -> dict:
    sha, tree = clone(ref, work, i)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTEST_WORKERS", "CMAKE_ARGS")}
    env.update(CI="true", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    print(f"[{ref} = {sha[:10]}] make test in {tree}", flush=True)
    load = [round(x, 2) for x in os.getloadavg()]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    loaders = busy(load_procs)
    t = time.perf_counter()
    try:
        with open(tree.parent / "make_test.log", "w") as log:
            rc = subprocess.run(["make", "test", f"PYTEST_ARGS={pytest_args}"], cwd=tree, env=env, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # before the busy processes are reaped
    finally:
        for p in loaders:
            p.kill()
            p.wait()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    build_log = tree / ".venv" / "llamacpp-build.log"
    rec = {"ref": ref, "commit": sha, "rc": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
           "busy_processes": load_procs,
           "loadavg_at_start": load, "log": str(tree.parent / "make_test.log"),
           **parse((tree.parent / "make_test.log").read_text(errors="replace"),
                   build_log.read_text(errors="replace") if build_log.exists() else "")}
    print(f"[{ref}] rc {rc}, {rec['wall_s']} s wall, {rec['cpu_s']} s CPU", flush=True)
    return rec


def report(runs: list[dict], mach: dict) -> str:
    head = [f"{r['ref']} ({r['commit'][:8]})" for r in runs]
    lines = ["# `make test` on a fresh clone", "",
             f"Machine: {describe(mach)}.", "",
             "Each revision was cloned afresh and ran `make test` (`CI=true`): venv, install, the llama.cpp "
             "compile, the suite; one revision after the other.", "",
             "| | " + " | ".join(head) + " |", "| --- | " + " | ".join("---" for _ in runs) + " |"]
    def row(name: str, vals: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(vals) + " |")
    row("**wall time**", [f"**{r['wall_s']:.0f} s** ({r['wall_s'] / 60:.1f} min)" for r in runs])
    row(CPU_LABEL, [f"{r['cpu_s']:.0f} s" for r in runs])
    row("llama-cpp-python compile (its own wall time)",
        [f"{r['compile_s']} s" if r["compile_s"] else "-" for r in runs])
    for k in range(max(len(r["pytest"]) for r in runs)):
        row(f"pytest run {k + 1}", [f"{r['pytest'][k]['summary']} in {r['pytest'][k]['seconds']:.0f} s"
                                    if k < len(r["pytest"]) else "-" for r in runs])
    row("exit code", [str(r["rc"]) for r in runs])
    row("CPU-bound processes beside it", [str(r.get("busy_processes", 0)) for r in runs])
    row("load average at start", [str(r["loadavg_at_start"]) for r in runs])
    for r in runs:
        if r["steps"]:
            lines += ["", f"## Steps of {r['ref']} (`tools/run_tests.sh`, seconds since its start)", ""]
            lines += [f"- {s['at_s']} s: {s['step']}" for s in r["steps"]]
        lines += ["", f"## Slowest tests of {r['ref']}", ""]
        lines += [f"- {s['seconds']:.1f} s {s['when']} `{s['test']}`" for s in r["slowest"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refs", nargs="+", default=["HEAD"])
    ap.add_argument("--work", default="/tmp/dpmv_bench_make_test", help="where the clones go (removed first)")
    ap.add_argument("--pytest-args", default="--durations=10")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "make_test"))
    ap.add_argument("--load", type=int, default=0, metavar="N", help="CPU-bound processes beside each run")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    mach = machine()
    runs = [run_one(i, ref, work, a.pytest_args, a.load) for i, ref in enumerate(a.refs)]
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps({"machine": mach, "runs": runs}, indent=1) + "\n")
    out.with_suffix(".md").write_text(report(runs, mach))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
