"""Child process for the crash and concurrency tests of the durable ledger.

    python -m tests.helpers.ledger_child DB USER CAP K [MAX_RELEASES] [SEED] [wait]

Opens the user's SqliteLedger (PostgresLedger when DB is a DSN starting with host= or
postgresql://) for the running-example policy (all caps = CAP, OnlineBudget(K)),
prints "READY" (with ``wait``: then waits for a line on stdin), then releases affordable-dinner
views through MemView in a loop. Only AFTER
``release`` returns does it write one line (a single atomic os.write) with the charges that
release made: {"i": n, "t": time, "charges": [[[attributes...], "eps"], ...], "views": {...}}.
With MAX_RELEASES, a last line "STATS [requests, commits, batched]" gives the ledger's
``commit_stats()``.
"""
from __future__ import annotations

import json
import os
import sys
import time

from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query


def main(argv: list[str]) -> int:
    db, user, cap, k = argv[0], argv[1], argv[2], int(argv[3])
    max_releases = int(argv[4]) if len(argv) > 4 else -1
    seed = int(argv[5]) if len(argv) > 5 and argv[5] != "none" else None
    wait = len(argv) > 6 and argv[6] == "wait"
    policy, m, _, _ = running_example()
    policy = policy.with_caps(cap)
    if db.startswith(("host=", "postgresql://")):  # a PostgreSQL DSN: the PostgresLedger backend
        from dpmv_lib.ledgers.postgres import PostgresLedger
        ledger = PostgresLedger.for_policy(db, user, policy)
    else:
        ledger = SqliteLedger.for_policy(db, user, policy)
    mv = MemView(policy, m, budget=OnlineBudget(k), ledger=ledger, seed=seed)
    q = Query("Any ideas for an affordable dinner?", "affordable_dinner")
    os.write(1, b"READY\n")
    if wait:
        sys.stdin.readline()
    i = 0
    while max_releases < 0 or i < max_releases:
        rel = mv.release(q)
        charges = [[sorted(s.charged), str(s.epsilon)] for s in rel.slots if s.charged]
        line = json.dumps({"i": i, "t": time.time(), "charges": charges, "views": rel.views}) + "\n"
        os.write(1, line.encode())  # < PIPE_BUF: atomic; written only after release() returned
        i += 1
    st = ledger.commit_stats()  # a last line the reports skip: not JSON-first
    os.write(1, f"STATS {json.dumps([st.requests, st.commits, st.batched])}\n".encode())
    ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
