"""A group-commit leader that stops just before COMMIT (crash tests of dpmv_lib.ledgers.group_commit).

    python -m tests.helpers.gc_leader DB USER CAP K N_WAITERS

Opens the user's SqliteLedger (running-example policy, all caps = CAP, OnlineBudget(K)) and
releases ONE affordable-dinner view through MemView. It takes the writer lock at once (no other
process is charging yet) and prints "LEADING"; inside its write transaction it waits until
N_WAITERS other processes have posted their requests, decides and writes the whole batch, prints
"STALLED <records written>" and then waits for a line on stdin before it COMMITs - the test
SIGKILLs it there (leader killed mid-batch), or lets it commit. After ``release`` returned it
prints the report line of tests/helpers/ledger_child.py.
"""
from __future__ import annotations

import json
import os
import sys
import time

from dpmv_lib.ledgers import group_commit
from dpmv_lib.ledgers.sqlite import SqliteLedger
from dpmv_lib.checks.examples import running_example
from dpmv_lib.core.ledger import OnlineBudget
from dpmv_lib.core.memview import MemView
from dpmv_lib.core.policy import Query


def holds_request(path: str) -> bool:
    """The request file holds a whole posted request (files exist from a requester's first charge)."""
    try:
        with open(path, "rb") as f:
            return group_commit.parse_request(f.read()) is not None
    except (OSError, ValueError):
        return False


def main(argv: list[str]) -> int:
    db, user, cap, k, n_wait = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    policy, m, _, _ = running_example()
    policy = policy.with_caps(cap)
    ledger = SqliteLedger.for_policy(db, user, policy)
    mv = MemView(policy, m, budget=OnlineBudget(k), ledger=ledger, seed=1)
    state = {"rows": 0, "charging": False}

    collect = group_commit.GroupCommit.collect

    def waiting_collect(self, db_, caps):
        os.write(1, b"LEADING\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:  # the first posted request creates the queue directory
                if sum(holds_request(os.path.join(self.dir, n)) for n in os.listdir(self.dir)
                       if n != self.owner and not n.startswith(".")) >= n_wait:
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.005)
        return collect(self, db_, caps)

    write = SqliteLedger._write

    def counting_write(self, db_, rows, new, changed):
        state["rows"] += len(rows)
        return write(self, db_, rows, new, changed)

    commit = SqliteLedger._commit

    def stalling_commit(self):
        if state["charging"]:
            os.write(1, f"STALLED {state['rows']}\n".encode())
            sys.stdin.readline()
        return commit(self)

    group_commit.GroupCommit.collect = waiting_collect
    SqliteLedger._write = counting_write
    SqliteLedger._commit = stalling_commit
    state["charging"] = True
    rel = mv.release(Query("Any ideas for an affordable dinner?", "affordable_dinner"))
    state["charging"] = False
    charges = [[sorted(s.charged), str(s.epsilon)] for s in rel.slots if s.charged]
    os.write(1, (json.dumps({"i": 0, "t": time.time(), "charges": charges}) + "\n").encode())
    ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
