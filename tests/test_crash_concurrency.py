"""Crash and concurrency tests of the durable SQLite ledger (C5 across SIGKILL and processes).

Child processes (tests/helpers/ledger_child.py) release running-example views through MemView
with a SqliteLedger and report each release's charges only AFTER ``release`` returned.

* crash: N_KILLS children are SIGKILLed at random points; after every kill the ledger must be
  uncorrupted (PRAGMA integrity_check), never below what the children reported as released,
  never above a cap, and equal to a strict replay of its audit log.
* concurrency: N_PROCS children release for the same user at once until the caps bind; no cap
  is exceeded and the final ledger equals the admitted charges in the audit log and the charges
  the processes report.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from dpmv_lib.durable import SqliteLedger, replay
from dpmv_lib.examples import running_example

ROOT = Path(__file__).resolve().parents[1]
N_KILLS = 40            # SIGKILLs in the crash test
CRASH_CAP, CRASH_K = "30", 1200   # eps = 1/40; debt (2 charges per release) binds after 600 releases
N_PROCS, RELEASES = 4, 40         # concurrency: 4 processes x 40 releases each
CONC_CAP, CONC_K = "2", 30        # eps = 1/15: debt admits exactly 30 charges in total


def _child(db: Path, user: str, cap: str, k: int, max_releases: int = -1, seed: str = "none",
           wait: bool = False) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, "-m", "tests.helpers.ledger_child", str(db), user, cap, str(k),
            str(max_releases), seed] + (["wait"] if wait else [])
    return subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _reports(raw: bytes) -> list[dict]:
    """Complete report lines only (a line cut by the kill is not counted: conservative)."""
    out = []
    for line in raw.split(b"\n"):
        if line.startswith(b"{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def _charges(reports: list[dict]) -> Counter:
    total: Counter = Counter()
    for r in reports:
        for attrs, eps in r["charges"]:
            for a in attrs:
                total[a] += Fraction(eps)
    return total


@pytest.mark.slow  # ~15-20 s: 40 interpreter start-ups
def test_sigkill_never_undercounts_or_overruns(tmp_path):
    policy, _, _, _ = running_example()
    policy = policy.with_caps(CRASH_CAP)
    caps = policy.caps
    db = tmp_path / "crash.db"
    rnd = random.Random(20240601)
    released: Counter = Counter()
    n_released, n_charges, runs_with_progress = 0, 0, 0
    log_len = 0
    for kill in range(N_KILLS):
        proc = _child(db, "alice", CRASH_CAP, CRASH_K, seed=str(kill))
        assert proc.stdout.readline() == b"READY\n", proc.stderr.read().decode()
        time.sleep(rnd.uniform(0.0, 0.12))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        reps = _reports(out)
        released += _charges(reps)
        n_released += len(reps)
        # restart: reopen the durable ledger and check it against what was released
        with SqliteLedger.for_policy(db, "alice", policy) as led:
            assert led.integrity_check() == "ok"
            spent = led.spent()
            log = led.log
            for a in caps:
                assert spent[a] >= released[a], f"kill {kill}: ledger undercounts {a}: {spent[a]} < {released[a]}"
                assert spent[a] <= caps[a], f"kill {kill}: {a} spent {spent[a]} over cap {caps[a]}"
            assert replay(log, caps) == spent  # ledger and audit log were committed together
            n_charges += sum(len(r["charges"]) for r in reps)
            assert sum(1 for r in log if r.admitted) >= n_charges  # every reported charge is logged
            runs_with_progress += len(log) > log_len
            log_len = len(log)
    # the kills landed while the child was really charging (not only during start-up)
    assert runs_with_progress >= N_KILLS // 2, (runs_with_progress, n_released)
    assert n_released > 0


def test_concurrent_processes_share_one_ledger(tmp_path):
    policy, _, _, _ = running_example()
    policy = policy.with_caps(CONC_CAP)
    caps = policy.caps
    db = tmp_path / "conc.db"
    procs = [_child(db, "alice", CONC_CAP, CONC_K, RELEASES, str(i), wait=True) for i in range(N_PROCS)]
    for p in procs:  # they raced to create the file, schema and user row
        assert p.stdout.readline() == b"READY\n", p.stderr.read().decode()
    for p in procs:  # release them together
        p.stdin.write(b"go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()
    reports = [_reports(o) for o, _ in outs]
    assert all(len(r) == RELEASES for r in reports)
    reported = sum((_charges(r) for r in reports), Counter())
    with SqliteLedger.for_policy(db, "alice", policy) as led:
        spent, log = led.spent(), led.log
        assert led.integrity_check() == "ok"
    in_log: Counter = Counter()
    for r in log:
        if r.admitted:
            for a in r.attributes:
                in_log[a] += r.epsilon
    eps = Fraction(CONC_CAP) / CONC_K
    for a in caps:
        assert spent[a] <= caps[a]
        assert spent[a] == in_log[a] == reported[a], (a, spent[a], in_log[a], reported[a])
    assert spent["debt"] == caps["debt"]  # the race really hit the cap: exactly cap/eps admitted
    assert sum(1 for r in log if r.admitted and "debt" in r.attributes) == caps["debt"] / eps
    assert sum(1 for r in log if not r.admitted) > 0
    assert len(log) == N_PROCS * RELEASES * 2  # every prospective charge is logged
    replay(log, caps)  # strict: in commit order no admitted charge ever overran a cap
    # the processes really overlapped in time
    spans = sorted((r[0]["t"], r[-1]["t"]) for r in reports)
    assert any(spans[i + 1][0] < spans[i][1] for i in range(len(spans) - 1))
