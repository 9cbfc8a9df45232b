"""Group commit for the SQLite ledger: concurrent releases on one file share one fsync (C5).

Several processes that charge the same user's :class:`~dpmv_lib.core.durable.SqliteLedger` used to
run one ``BEGIN IMMEDIATE ... COMMIT`` (one fsync) each, one after the other. Here whichever
process holds the writer lock (``flock`` on ``<db>.lock``) commits the pending requests of all
processes waiting for it in ONE transaction (leader election by the lock; no extra daemon):

1. A process that gets the lock at once (``LOCK_NB``) is the leader.
2. Otherwise it *posts* its request - the charges of one release, exact rational text - as the
   file ``<queue>/<user hash>/<owner>`` (written to a temporary name, then renamed: readers see
   a whole request or none; ``<queue>`` see :func:`queue_root`) and waits for a SHARED lock in
   the kernel: at the leader's unlock all waiters wake together.
3. The leader, inside its write transaction and after verifying the chain (``_sync``), reads
   the posted requests of its user (same HMAC key id), decides them one after the other and
   then its own, each exactly as a separate ``try_charge_many`` (the prospective check
   eps <= B_a - L_a with Fractions sees every charge admitted before it), appends their audit
   records to the hash chain and stores each requester's answer (decisions and L_a) in the
   table ``dpmv_gc`` of the ledger file - in the same transaction - then COMMITs
   (``synchronous=FULL``: one fsync for the whole batch) and releases the lock.
4. A waiter that then gets the lock reads its answer row. If it holds its request number, the
   release was committed: it returns that answer. If not (it posted after the leader read the
   queue, or the leader died before COMMIT), it takes the lock exclusively, reads its answer
   once more (another waiter may have led meanwhile) and else becomes the leader (step 3).

Why this keeps the guarantees:

* Durability: a request is acknowledged only from an answer row, and the answer row, the
  request's audit records and the totals are committed in one SQLite transaction that is
  fsynced before any other connection can see it (WAL, ``synchronous=FULL``: sqlite3WalFrames
  syncs the log before walIndexWriteHdr publishes the commit), and waiters read it only after
  the leader's COMMIT returned and it dropped the lock. A leader killed mid-batch leaves nothing (ROLLBACK by WAL
  recovery; the kernel drops its lock) and every waiter of that batch, finding no answer, leads
  itself: nothing acknowledged is lost and no batch is half-written.
* Exactly once: the answer row records the owner's request number, and a leader skips a posted
  request whose number is already answered, so a request is charged at most once (also after a
  power loss that resurrects a request file: the file is not synced, the answer row is).
* Exact accounting: every request is decided by the same code as a direct charge, in one
  total order (the chain order), on the leader's verified state; caps and policy are those
  stored with the user (every process checked them on open).
* Privacy: a request that was posted but never acknowledged (its process died or was
  interrupted while waiting) may still be charged by a leader: the ledger can only count
  MORE than was released, never less (C5 is conservative). Requests of dead processes (pid
  gone) and requests older than ``STALE_S`` are deleted unread.
* Integrity: the leader verifies the user's chain before deciding, as for its own charge; a
  request names its user and a key id (HMAC of a fixed label, or "none"), and only a leader
  with the same key commits it. The answer table is a delivery channel, not part of the audit
  chain: the decisions it carries are in the chain, verified by every later transaction.
"""
from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from fractions import Fraction
from typing import Any, Sequence

from .errors import BudgetError
from .ledger import check_charge_args

STALE_S = 60.0             # posted requests older than this are dropped unread
PRUNE_S = 3600.0           # answer rows of owners idle this long are deleted
ANSWER_TABLE = ("CREATE TABLE IF NOT EXISTS dpmv_gc (owner TEXT PRIMARY KEY, req INTEGER NOT NULL, "
                "user_id TEXT NOT NULL, answer TEXT NOT NULL, t REAL NOT NULL)")

Charges = Sequence[tuple[frozenset[str], Fraction]]


def key_id(key: bytes | None) -> str:
    """Which chain key a request needs (never the key itself)."""
    if key is None:
        return "none"
    return hmac.new(key, b"dpmv-ledger-group-commit-key-id", hashlib.sha256).hexdigest()[:32]


def queue_root(path: str) -> str:
    """Where requests for the ledger file ``path`` are posted: a directory in ``/dev/shm``
    (tmpfs: posting a request costs no journal commit of the file system that the ledger's
    fsync would wait for) named after the file's device and inode; else ``<path>.gc`` next to
    the file. Processes that see different roots only miss batching. The directories are
    created by the first request posted (a lone process never posts) and removed when empty."""
    st = os.stat(path)
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        d = os.path.join(shm, f"dpmv-gc-{os.getuid()}-{st.st_dev:x}-{st.st_ino:x}")
        if not os.path.lexists(d) or _private_dir(d):
            return d
    return path + ".gc"


def _private_dir(d: str) -> bool:
    """``d`` is a real directory of this user that nobody else can write."""
    try:
        own = os.stat(d, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(own.st_mode) and own.st_uid == os.getuid() and (own.st_mode & 0o077) == 0


class GroupCommit:
    """The group-commit side of one SqliteLedger (one per ledger object and process)."""

    def __init__(self, path: str, user_id: str, key: bytes | None) -> None:
        self.dir = os.path.join(queue_root(path), hashlib.sha256(user_id.encode()).hexdigest()[:24])
        self.key_id = key_id(key)
        self.user_id = user_id
        self._owner = ""
        self._pid = -1
        self._req = 0
        self._batches = 0
        self._items_text: dict[tuple[Any, ...], str] = {}
        self._items_of: dict[str, list[tuple[frozenset[str], Fraction]]] = {}
        self._answers: dict[str, tuple[tuple[bool, ...], dict[str, Fraction]]] = {}
        self._empty_mark: tuple[int, int, int] | None = None

    @property
    def owner(self) -> str:
        pid = os.getpid()
        if pid != self._pid:  # a forked child is a different requester
            self._pid, self._owner = pid, f"{pid}-{secrets.token_hex(8)}"
        return self._owner

    def close(self) -> None:
        """Remove this owner's request and the queue directories once empty."""
        self.withdraw()
        for d in (self.dir, os.path.dirname(self.dir)):
            try:
                os.rmdir(d)
            except OSError:  # not empty (other users or processes) or gone
                break

    # ---- requester side --------------------------------------------------------------------
    def post(self, items: Charges) -> int:
        """Write this owner's next request (atomically: temporary file, then rename) and return
        its number; 0 when the queue directory cannot be used (then this process leads)."""
        self._req += 1
        key = tuple(items)
        text = self._items_text.get(key)
        if text is None:
            text = json.dumps([[sorted(a), str(e)] for a, e in items], separators=(",", ":"))
            if len(self._items_text) > 256:
                self._items_text.clear()
            self._items_text[key] = text
        # line 1: request number, time, key id; line 2: the charges (the user is the directory)
        body = f"{self._req} {time.time()!r} {self.key_id}\n{text}"
        final = os.path.join(self.dir, self.owner)
        tmp = final + ".tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:  # the first request, or a close() removed the empty directory
            try:
                for d in (os.path.dirname(self.dir), self.dir):  # (makedirs: parents get 0o777)
                    try:
                        os.mkdir(d, 0o700)
                    except FileExistsError:
                        pass
                    if not _private_dir(d):
                        return 0
                fd = os.open(tmp, flags, 0o600)
            except OSError:
                return 0
        try:
            os.write(fd, body.encode())
        finally:
            os.close(fd)
        os.replace(tmp, final)
        return self._req

    def withdraw(self) -> None:
        """Remove this owner's request file (after its answer, or when giving up)."""
        try:
            os.unlink(os.path.join(self.dir, self.owner))
        except FileNotFoundError:
            pass

    def answer(self, conn: Any, req: int) -> tuple[tuple[bool, ...], dict[str, Fraction]] | None:
        """This owner's committed answer to request ``req``, or None (call holding the lock)."""
        try:
            row = conn.execute("SELECT req, answer FROM dpmv_gc WHERE owner = ?", (self.owner,)).fetchone()
        except Exception as exc:  # the table appears with the first batch
            if "no such table" in str(exc):
                return None
            raise
        if row is None or row[0] != req:
            return None
        got = self._answers.get(row[1])
        if got is None:
            d = json.loads(row[1])
            got = tuple(bool(x) for x in d["ok"]), {a: Fraction(v) for a, v in d["spent"].items()}
            if len(self._answers) > 256:
                self._answers.clear()
            self._answers[row[1]] = got
        return got[0], dict(got[1])

    # ---- leader side -------------------------------------------------------------------------
    def _posted(self, me: str) -> list[str]:
        return [n for n in os.listdir(self.dir) if n != me and not n.startswith(".") and not n.endswith(".tmp")]

    def posted(self) -> list[str]:
        """The names of the posted requests (the leader does not wait for more: a commit delay
        measured on the shared 2-core machine only lowered throughput, see benchmarks/README).

        One ``stat`` instead of a listing while the directory is unchanged since it was last
        listed empty (every post and removal changes its mtime, and its size on tmpfs); a post
        this misses within one clock tick only costs batching: its owner commits it itself."""
        if not os.access(self.dir, os.F_OK):  # (no exception object: the lone-process case)
            return []
        try:
            st = os.stat(self.dir)
            mark = (st.st_ino, st.st_mtime_ns, st.st_size)
            if mark == self._empty_mark:
                return []
            names = self._posted(self.owner)
        except FileNotFoundError:  # the queue directory was removed: nobody is waiting
            return []
        self._empty_mark = None if names else mark
        return names

    def collect(self, db: Any, caps: dict[str, Fraction]) -> list[tuple[str, int, list]]:
        """The posted, unanswered requests of this user and key (inside the leader's transaction)."""
        names = self.posted()
        me = self.owner
        now = time.time()
        found = []
        for name in names:
            if name == me:
                continue
            path = os.path.join(self.dir, name)
            try:
                with open(path, "rb") as f:
                    head, text = f.read().decode().split("\n", 1)
                req_s, t_s, kid = head.split(" ")
                req, t = int(req_s), float(t_s)
                if now - t > STALE_S or not _alive(int(name.split("-", 1)[0])):
                    _unlink(path)
                    continue
                if kid != self.key_id:
                    continue  # another key: its owner commits it itself
                items = self._items_of.get(text)
                if items is None:
                    items = [check_charge_args(caps, frozenset(a), Fraction(e)) for a, e in json.loads(text)]
                    if len(self._items_of) > 256:
                        self._items_of.clear()
                    self._items_of[text] = items
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError, BudgetError):
                _unlink(path)  # unreadable or invalid: its owner (if any) commits it itself
                continue
            if items:
                found.append((name, req, items))
        if not found:
            return []
        marks = ",".join("?" * len(found))
        done = dict(db.execute(f"SELECT owner, req FROM dpmv_gc WHERE owner IN ({marks})",
                               [n for n, _, _ in found]).fetchall())
        for name, _, _ in found:
            # taken (or answered before): its owner waits on the lock and reads its answer row, or
            # - if this transaction never commits - commits its release itself; so the next
            # leader counts only requests that really wait
            _unlink(os.path.join(self.dir, name))
        return [f for f in found if done.get(f[0], 0) < f[1]]

    def answers(self, db: Any, answered: list[tuple[str, int, tuple[bool, ...]]],
                spent: dict[str, Fraction]) -> None:
        """Store the answers of a batch (same transaction as its audit records)."""
        now = time.time()
        sp = {a: str(v) for a, v in sorted(spent.items())}
        db.executemany("INSERT OR REPLACE INTO dpmv_gc (owner, req, user_id, answer, t) VALUES (?, ?, ?, ?, ?)",
                       [(o, r, self.user_id, json.dumps({"ok": [int(x) for x in oks], "spent": sp},
                                                        separators=(",", ":")), now)
                        for o, r, oks in answered])
        self._batches += 1
        if self._batches % 512 == 1:
            db.execute("DELETE FROM dpmv_gc WHERE t < ?", (now - PRUNE_S,))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def charge(ledger: Any, items: Charges) -> tuple[tuple[bool, ...], dict[str, Fraction]]:
    """``ledger._charge(items, checked=True)`` with group commit (see the module docstring)."""
    gc: GroupCommit = ledger._gc
    with ledger._lock:
        ledger._db()  # (re)open after fork before touching the lock
        fd = ledger._lockfd
        req = 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            req = gc.post(items)
            if not req:  # no usable queue: wait for the lock and lead
                fcntl.flock(fd, fcntl.LOCK_EX)
        if req:  # posted: wait for the leader's answer
            try:
                # shared: every waiter wakes at the leader's unlock and reads its answer at once
                fcntl.flock(fd, fcntl.LOCK_SH)
                ans = gc.answer(ledger._conn, req)
                if ans is None:  # not in the last batch: lead (the conversion may wait for others)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    ans = gc.answer(ledger._conn, req)
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                gc.withdraw()
                raise
            if ans is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                gc.withdraw()
                ledger._n_requests += 1
                return ans
        # leader: the lock is held; the transaction below releases it at COMMIT/ROLLBACK
        ledger._preheld = True
        try:
            with ledger._tx() as db:
                ledger._sync(db)
                others = gc.collect(db, ledger._caps)
                batches = [it for _, _, it in others] + [items]
                oks, new, left = ledger._decide_write(db, batches, True)
                answered = [(o, r, ok) for (o, r, _), ok in zip(others, oks)]
                if req:
                    answered.append((gc.owner, req, oks[-1]))
                if answered:
                    gc.answers(db, answered, new.totals)
        finally:
            ledger._preheld = False
            if req:
                gc.withdraw()
        ledger._committed(new, left)
        ledger._n_requests += 1
        ledger._n_commits += 1
        ledger._n_batched += len(others)
        return oks[-1], dict(new.totals)
