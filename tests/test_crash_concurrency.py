"""Crash and concurrency tests of the durable ledgers (C5 across SIGKILL and processes).

Every test runs on both backends: a SQLite file and a PostgreSQL database (a throw-away server
on loopback, the ``pg_server`` fixture in conftest.py; skipped locally without PostgreSQL,
required in CI).

Child processes (tests/helpers/ledger_child.py) release running-example views through MemView
with a SqliteLedger and report each release's charges only AFTER ``release`` returned.

* crash: N_KILLS children are SIGKILLed at random points; after every kill the ledger must be
  uncorrupted (PRAGMA integrity_check), never below what the children reported as released,
  never above a cap, and equal to a strict replay of its audit log.
* concurrency: N_PROCS children release for the same user at once until the caps bind; no cap
  is exceeded and the final ledger equals the admitted charges in the audit log and the charges
  the processes report. The test holds the user's writer lock until the children wait for it,
  so they race from their first release on (without that hold, whether they overlap depends on
  the scheduler: a CI run with a compiler busy on the other core once had no SQLite transaction
  with two processes' releases). On SQLite the releases are group-committed
  (dpmv_lib.ledgers.group_commit): the first transaction must hold several processes' releases.
* group commit, SQLite: a leader (tests/helpers/gc_leader.py) collects the posted releases of
  3 waiting processes and is SIGKILLed just before COMMIT: nothing of its batch is in the
  ledger and every waiter re-commits its own release (0 lost, 0 partial). Or a waiter is
  SIGKILLed while its release sits in the leader's batch: the batch commits whole, the other
  waiters get their answers, and the ledger counts the killed waiter's release (never less).
"""
from __future__ import annotations

import fcntl
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

from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.ledgers.records import replay
from dpmv_lib.checks.examples import running_example
from tests.helpers.gc_leader import holds_request

ROOT = Path(__file__).resolve().parents[1]
N_KILLS = 40            # SIGKILLs in the crash test
CRASH_CAP, CRASH_K = "30", 1200   # eps = 1/40; debt (2 charges per release) binds after 600 releases
N_PROCS, RELEASES = 4, 40         # concurrency: 4 processes x 40 releases each
CONC_CAP, CONC_K = "2", 30        # eps = 1/15: debt admits exactly 30 charges in total


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_db(request, tmp_path):
    """Where the children's shared ledger lives: a SQLite file or a PostgreSQL DSN."""
    if request.param == "sqlite":
        return tmp_path / "ledger.db"
    return request.getfixturevalue("pg_dsn")


def _open(db, policy):
    if isinstance(db, str):
        from dpmv_lib.ledgers.postgres import PostgresLedger
        return PostgresLedger.for_policy(db, "alice", policy)
    return SqliteLedger.for_policy(db, "alice", policy)


def _read_lines(proc: subprocess.Popen, n: int) -> bytes:
    """The child's stdout up to its ``n``-th line (or its end), read from the pipe unbuffered so that
    a later ``communicate`` loses nothing; blocks until then (the child's lines are the events)."""
    buf = b""
    fd = proc.stdout.fileno()
    while buf.count(b"\n") < n:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    return buf


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
def test_sigkill_never_undercounts_or_overruns(ledger_db):
    policy, _, _, _ = running_example()
    policy = policy.with_caps(CRASH_CAP)
    caps = policy.caps
    db = ledger_db
    rnd = random.Random(20240601)
    released: Counter = Counter()
    n_released, n_charges, runs_with_progress = 0, 0, 0
    log_len = 0
    for kill in range(N_KILLS):
        proc = _child(db, "alice", CRASH_CAP, CRASH_K, seed=str(kill))
        # kill at a random point once the child is charging (its first report is the event: a fixed
        # sleep after READY would land in start-up on a loaded machine)
        head = _read_lines(proc, 2)
        assert head.startswith(b"READY\n"), head + proc.stderr.read()
        time.sleep(rnd.uniform(0.0, 0.12))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        out = head[len(b"READY\n"):] + out
        assert proc.returncode == -signal.SIGKILL
        reps = _reports(out)
        released += _charges(reps)
        n_released += len(reps)
        # restart: reopen the durable ledger and check it against what was released
        with _open(db, policy) as led:
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


@pytest.mark.parametrize("n_procs,releases,cap,k", [(N_PROCS, RELEASES, CONC_CAP, CONC_K),
                                                    (N_PROCS, 150, "2", 300),   # the benchmark's 4-process load
                                                    (8, 60, "2", 300)],        # many processes, one user
                         ids=["4x40", "4x150", "8x60"])
def test_concurrent_processes_share_one_ledger(ledger_db, n_procs, releases, cap, k):
    """0 undercounts (ledger == audit log == what the processes report) and 0 cap overruns."""
    policy, _, _, _ = running_example()
    policy = policy.with_caps(cap)
    caps = policy.caps
    db = ledger_db
    procs = [_child(db, "alice", cap, k, releases, str(i), wait=True) for i in range(n_procs)]
    for p in procs:  # they raced to create the file, schema and user row
        assert p.stdout.readline() == b"READY\n", p.stderr.read().decode()
    _go_together(db, policy, procs)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()
    reports = [_reports(o) for o, _ in outs]
    assert all(len(r) == releases for r in reports)
    reported = sum((_charges(r) for r in reports), Counter())
    with _open(db, policy) as led:
        spent, log = led.spent(), led.log
        assert led.integrity_check() == "ok"
    in_log: Counter = Counter()
    for r in log:
        if r.admitted:
            for a in r.attributes:
                in_log[a] += r.epsilon
    eps = Fraction(cap) / k
    for a in caps:
        assert spent[a] <= caps[a]
        assert spent[a] == in_log[a] == reported[a], (a, spent[a], in_log[a], reported[a])
    assert spent["debt"] == caps["debt"]  # the race really hit the cap: exactly cap/eps admitted
    assert sum(1 for r in log if r.admitted and "debt" in r.attributes) == caps["debt"] / eps
    assert sum(1 for r in log if not r.admitted) > 0
    assert len(log) == n_procs * releases * 2  # every prospective charge is logged
    replay(log, caps)  # strict: in commit order no admitted charge ever overran a cap
    # the processes really overlapped in time
    spans = sorted((r[0]["t"], r[-1]["t"]) for r in reports)
    assert any(spans[i + 1][0] < spans[i][1] for i in range(len(spans) - 1))
    # releases per real write transaction, as counted by the ledgers (not inferred from the log)
    stats = [_stats(o) for o, _ in outs]
    requests, commits, batched = (sum(s[i] for s in stats) for i in range(3))
    assert requests == n_procs * releases == commits + batched  # every release exactly once
    if not isinstance(db, str):  # SQLite: group commit put several releases in one transaction
        # the first transaction took the releases the children posted while the test held the lock
        assert _batch_sizes(log)[0] > 2, "the first transaction did not hold the releases of two processes"
        assert commits < requests and batched > 0, (requests, commits, batched)
    else:  # PostgreSQL does not group-commit: one transaction per release
        assert commits == requests and batched == 0


def _go_together(db, policy, procs: list[subprocess.Popen], timeout: float = 120.0) -> None:
    """Send every child "go" while the test holds the user's writer lock, and let go of it only
    once they wait for it, so that they really race from their first release whatever the
    scheduler does: on PostgreSQL until every child waits for the user's advisory lock; on SQLite
    until two children have posted their first release to the group-commit queue (a child that
    finds the lock held posts once another child's request file exists), so the first
    transaction must hold the releases of at least two processes."""
    with _open(db, policy) as holder:
        if isinstance(db, str):
            holder._conn.execute("SELECT pg_advisory_lock(%s)", (holder._lock_key,))
            sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"

            def ready() -> bool:
                return holder._conn.execute(sql).fetchone()[0] >= len(procs)
        else:
            fcntl.flock(holder._lockfd, fcntl.LOCK_EX)
            qdir = holder._gc.dir

            def ready() -> bool:
                try:
                    return sum(holds_request(os.path.join(qdir, f)) for f in os.listdir(qdir)) >= 2
                except FileNotFoundError:  # (created by the first child's first charge)
                    return False
        try:
            for p in procs:
                p.stdin.write(b"go\n")
                p.stdin.flush()
            deadline = time.monotonic() + timeout
            while not ready():
                dead = [p.returncode for p in procs if p.poll() is not None]
                assert not dead, f"a child exited before its first release: {dead}"
                assert time.monotonic() < deadline, \
                    f"the children did not wait for the writer lock within {timeout:.0f} s"
                time.sleep(0.005)
        finally:
            if isinstance(db, str):
                holder._conn.execute("SELECT pg_advisory_unlock(%s)", (holder._lock_key,))
            else:
                fcntl.flock(holder._lockfd, fcntl.LOCK_UN)


def _stats(raw: bytes) -> list[int]:
    """The child's last line: STATS [requests, commits, batched] (its ledger's commit_stats())."""
    line = raw.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert line.startswith(b"STATS "), line
    return json.loads(line[6:])


def _batch_sizes(log) -> list[int]:
    """Records per write transaction (a transaction stamps all its records with one timestamp)."""
    return list(Counter(r.timestamp for r in log).values())


@pytest.mark.slow  # ~10-20 s
def test_sigkill_of_concurrent_writers(ledger_db):
    """4 processes charge one user at once and are all SIGKILLed at a random moment, 8 times:
    after every round the ledger never undercounts what was released, never exceeds a cap and
    equals a strict replay of its audit log."""
    policy, _, _, _ = running_example()
    policy = policy.with_caps(CRASH_CAP)
    caps = policy.caps
    db = ledger_db
    rnd = random.Random(20261203)
    released: Counter = Counter()
    n_charges = 0
    for rnd_i in range(8):
        procs = [_child(db, "alice", CRASH_CAP, CRASH_K, seed=f"{rnd_i}{i}", wait=True) for i in range(N_PROCS)]
        for p in procs:
            assert p.stdout.readline() == b"READY\n", p.stderr.read().decode()
        for p in procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()
        time.sleep(rnd.uniform(0.05, 0.3))
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
        for p in procs:
            out, _ = p.communicate(timeout=30)
            reps = _reports(out)
            released += _charges(reps)
            n_charges += sum(len(r["charges"]) for r in reps)
        with _open(db, policy) as led:
            spent, log = led.spent(), led.log
            assert led.integrity_check() == "ok"
        for a in caps:
            assert spent[a] >= released[a], f"round {rnd_i}: undercount {a}: {spent[a]} < {released[a]}"
            assert spent[a] <= caps[a], f"round {rnd_i}: {a} spent {spent[a]} over cap {caps[a]}"
        assert replay(log, caps) == spent
        assert sum(1 for r in log if r.admitted) >= n_charges
    assert n_charges > 0


# ---- group commit (SQLite): SIGKILL of the leader or of a waiter in the middle of a batch ----------
N_WAITERS, WAITER_RELEASES = 3, 4


def _stalled_batch(db: Path):
    """Waiters ready, a leader holding their posted releases in its batch just before COMMIT."""
    waiters = [_child(db, "alice", CRASH_CAP, CRASH_K, WAITER_RELEASES, str(i), wait=True)
               for i in range(N_WAITERS)]
    for w in waiters:
        assert w.stdout.readline() == b"READY\n", w.stderr.read().decode()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    leader = subprocess.Popen([sys.executable, "-m", "tests.helpers.gc_leader", str(db), "alice", CRASH_CAP,
                               str(CRASH_K), str(N_WAITERS)], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert leader.stdout.readline() == b"LEADING\n", leader.stderr.read().decode()
    for w in waiters:  # each posts its first release and waits for the leader
        w.stdin.write(b"go\n")
        w.stdin.flush()
    line = leader.stdout.readline()
    assert line.startswith(b"STALLED "), (line, leader.stderr.read().decode())
    # the batch holds every waiter's first release and the leader's own (2 charged slots each)
    assert int(line.split()[1]) == 2 * (N_WAITERS + 1)
    return leader, waiters


def _check_ledger(db: Path, policy) -> tuple[dict, list]:
    caps = policy.caps
    with SqliteLedger.for_policy(db, "alice", policy) as led:
        assert led.integrity_check() == "ok"
        led.verify()  # the whole hash chain and every decision
        spent, log = led.spent(), led.log
    assert replay(log, caps) == spent
    in_log: Counter = Counter()
    for r in log:
        if r.admitted:
            for a in r.attributes:
                in_log[a] += r.epsilon
    for a in caps:
        assert spent[a] == in_log[a] and spent[a] <= caps[a]
    return spent, log


def test_sigkill_of_group_commit_leader_mid_batch(tmp_path):
    policy = running_example()[0].with_caps(CRASH_CAP)
    db = tmp_path / "ledger.db"
    leader, waiters = _stalled_batch(db)
    os.kill(leader.pid, signal.SIGKILL)  # after writing the whole batch, before COMMIT
    out, _ = leader.communicate(timeout=30)
    assert leader.returncode == -signal.SIGKILL and _reports(out) == []
    outs = [w.communicate(timeout=120) for w in waiters]
    for w, (_, err) in zip(waiters, outs):
        assert w.returncode == 0, err.decode()
    reports = [r for o, _ in outs for r in _reports(o)]
    assert len(reports) == N_WAITERS * WAITER_RELEASES  # every waiter re-committed its own release
    spent, log = _check_ledger(db, policy)
    reported = _charges(reports)
    assert all(spent[a] == reported[a] for a in policy.caps)  # 0 lost, and the dead batch left nothing
    assert len(log) == 2 * N_WAITERS * WAITER_RELEASES  # no record of the killed batch (no partial batch)


def test_sigkill_of_group_commit_waiter_mid_batch(tmp_path):
    policy = running_example()[0].with_caps(CRASH_CAP)
    db = tmp_path / "ledger.db"
    leader, waiters = _stalled_batch(db)
    victim, rest = waiters[0], waiters[1:]
    os.kill(victim.pid, signal.SIGKILL)  # its release is in the leader's batch, not acknowledged
    v_out, _ = victim.communicate(timeout=30)
    assert _reports(v_out) == []
    leader.stdin.write(b"commit\n")
    leader.stdin.flush()
    l_out, l_err = leader.communicate(timeout=60)
    assert leader.returncode == 0, l_err.decode()
    outs = [w.communicate(timeout=120) for w in rest]
    for w, (_, err) in zip(rest, outs):
        assert w.returncode == 0, err.decode()
    reports = _reports(l_out) + [r for o, _ in outs for r in _reports(o)]
    assert len(reports) == 1 + (N_WAITERS - 1) * WAITER_RELEASES
    spent, log = _check_ledger(db, policy)
    reported = _charges(reports)
    assert all(spent[a] >= reported[a] for a in policy.caps)  # never undercounts
    # the batch committed whole: the killed waiter's release is charged (conservative), once
    assert len(log) == 2 * (len(reports) + 1)
    assert sum(1 for r in log if r.admitted) == sum(len(r["charges"]) for r in reports) + 2
