"""How far the durable ledger's 1-process ratio to the raw floor moves, and why.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_ledger_blocks.py [--releases 4000] [--repeat 4]

One process, the README release (``OnlineBudget(K=3)``, steady state: two blocked charges), three
things measured in alternating blocks: the SQLite ledger's release (synchronous=FULL), the raw
floor of ``bench_ledger.py`` (the same SQL through sqlite3) and an in-memory release followed
by the floor. Blocks of 500 and of 50 (as in ``bench_ledger.py``); for blocks of 50 also the
median by position in the block. Then the WAL frames per commit of ledger and floor (the same
I/O?) and, with ``synchronous=NORMAL`` on tmpfs (no fsync), the CPU time of a ledger release, an
in-memory release and the floor's SQL back to back. Writes benchmarks/results/ledger_blocks.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ledger as B  # noqa: E402  (RawFloor, QUERY)
from machine_info import describe, loadavg, machine  # noqa: E402
from dpmv_lib.ledgers.sqlite import SqliteLedger  # noqa: E402
from dpmv_lib.checks.examples import running_example  # noqa: E402
from dpmv_lib.core.ledger import OnlineBudget  # noqa: E402
from dpmv_lib.core.memview import MemView  # noqa: E402
from dpmv_lib.core.policy import Query  # noqa: E402

QUERY = Query(*B.QUERY)


class Subjects:
    """A ledger-backed MemView, an in-memory one and a raw floor, in ``directory``."""

    def __init__(self, directory: str, synchronous: str = "FULL") -> None:
        policy, store, _, _ = running_example()
        self.ledger = SqliteLedger.for_policy(os.path.join(directory, "ledger.db"), "alice", policy,
                                              synchronous=synchronous)
        self.durable = MemView(policy, store, budget=OnlineBudget(3), ledger=self.ledger, seed=0)
        self.memory = MemView(policy, store, budget=OnlineBudget(3), seed=0)
        self.floor = B.RawFloor(os.path.join(directory, "floor.db"))
        self.floor.conn.execute(f"PRAGMA synchronous={synchronous}")

    def calls(self) -> dict:
        def mem_then_floor() -> None:
            self.memory.release(QUERY)
            self.floor.one()
        return {"ledger release": lambda: self.durable.release(QUERY), "floor": self.floor.one,
                "in-memory release, then floor": mem_then_floor,
                "in-memory release": lambda: self.memory.release(QUERY)}


def timed(f, n: int) -> list[int]:
    out = []
    for _ in range(n):
        s = time.perf_counter_ns()
        f()
        out.append(time.perf_counter_ns() - s)
    return out


def blocks(subj: Subjects, names: list[str], block: int, total: int) -> dict[str, list[int]]:
    calls = subj.calls()
    got: dict[str, list[int]] = {k: [] for k in names}
    for _ in range(total // block):
        for k in names:
            got[k] += timed(calls[k], block)
    return got


def med_us(xs: list[int]) -> float:
    return statistics.median(xs) / 1000


def wal_frames(conn, call, n: int = 200) -> float:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for _ in range(n):
        call()
    return conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1] / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", type=int, default=4000, help="per subject and block size")
    ap.add_argument("--repeat", type=int, default=4, help="runs of both block sizes (fresh files each)")
    a = ap.parse_args(argv)
    if a.releases < 500:
        ap.error("--releases must be >= 500")
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    names = ["floor", "ledger release", "in-memory release, then floor"]
    lines = ["# Durable ledger, 1 process: the ratio to the raw floor, by run and interleaving block", "",
             f"Machine: {describe(machine())}; load average at start {loadavg()}. "
             f"{a.releases} of each per block size and run, in alternating blocks (floor, ledger, "
             "in-memory + floor).", "",
             "| run | block | floor median | ledger median | in-memory + floor median | ledger / floor "
             "| (in-memory + floor) / floor |",
             "|---|---|---|---|---|---|---|"]
    pos_line = ""
    with tempfile.TemporaryDirectory() as tmp:
        for run, block in [(r, b) for r in range(1, a.repeat + 1) for b in (500, 50)]:
            d = tempfile.mkdtemp(dir=tmp)
            subj = Subjects(d)
            blocks(subj, names, 50, 300)  # warm-up: every file and path once
            got = blocks(subj, names, block, a.releases)
            f, led, mf = (med_us(got[k]) for k in names)
            lines.append(f"| {run} | {block} | {f:.1f} us | {led:.1f} us | {mf:.1f} us | {led / f:.2f}x "
                         f"| {mf / f:.2f}x |")
            if block == 50:
                cols = []
                for k in names:
                    xs = got[k]
                    by = [[x for i, x in enumerate(xs) if lo <= i % 50 < hi]
                          for lo, hi in ((0, 1), (1, 5), (5, 30), (30, 50))]
                    cols.append(f"{k}: " + ", ".join(f"{med_us(b):.1f}" for b in by))
                pos_line = (f"Run {run}, blocks of 50, median by position in the block (0 / 1-4 / 5-29 / 30-49, us): "
                            + "; ".join(cols) + ".")
            if run == a.repeat and block == 50:  # the last run's files (reported once)
                frames = (wal_frames(subj.ledger._conn, lambda: subj.durable.release(QUERY)),  # noqa: B023 - called within the iteration
                          wal_frames(subj.floor.conn, subj.floor.one))
            subj.ledger.close()
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        with tempfile.TemporaryDirectory(dir=shm) as d2:
            cpu = Subjects(d2, synchronous="NORMAL")
            calls = cpu.calls()
            for k in ("ledger release", "in-memory release", "floor"):
                timed(calls[k], 300)
            cpu_med = {k: med_us(timed(calls[k], a.releases)) for k in ("ledger release", "in-memory release", "floor")}
            cpu.ledger.close()
    lines += ["", pos_line, "",
              f"WAL frames per commit (the same I/O?), last run: ledger {frames[0]:.2f}, floor {frames[1]:.2f}.", "",
              f"CPU only (synchronous=NORMAL{' on tmpfs' if shm else ''}, no fsync, back to back): ledger release "
              f"{cpu_med['ledger release']:.1f} us, in-memory release {cpu_med['in-memory release']:.1f} us, "
              f"floor SQL {cpu_med['floor']:.1f} us.",
              "", f"Load average at end {loadavg()}."]
    out = ROOT / "benchmarks" / "results" / "ledger_blocks.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
