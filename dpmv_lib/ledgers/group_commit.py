"""Group commit for the SQLite ledger: concurrent releases on one file share one fsync (C5).

Without it, several processes that charge the same user's :class:`~dpmv_lib.ledgers.sqlite.SqliteLedger`
run one ``BEGIN IMMEDIATE ... COMMIT`` (one fsync) each, one after the other. Here whichever
process holds the writer lock (``flock`` on ``<db>.lock``) commits the pending requests of all
processes waiting for it in ONE transaction (leader election by the lock; no extra daemon):

1. A process that gets the lock at once (``LOCK_NB``) is the leader.
2. Otherwise, when another process charges the same user (its request file is in the queue),
   it *posts* its request - the charges of one release, exact rational text - into its own
   request file ``<queue>/<user hash>/<owner>`` (created at the requester's first charge and
   rewritten in place; a digest over the request lets readers skip a torn read; ``<queue>``
   see :func:`queue_root`) and waits for a SHARED lock in the kernel: at the leader's unlock
   all waiters wake together (and let go at once). With nobody to batch with it waits for the
   exclusive lock and leads. Before it tries the lock, and again while it waits, it verifies
   what other processes committed since it last verified or committed, under a read snapshot
   (WAL: the writer is not blocked; exactly the checks of ``spent()``), so that should it lead,
   its write transaction re-verifies only what was committed after the snapshot. Whether
   anybody committed is read from a commit hint in memory shared by all processes (the
   ledger's lock file, mapped: :meth:`GroupCommit.catch_up`); the hint only saves work: the
   write transaction's own check (``PRAGMA data_version``) still sees every commit.
3. The leader, inside its write transaction and after verifying the chain (``_sync``), reads
   the posted requests of its user (same HMAC key id), decides them one after the other and
   then its own, each exactly as a separate ``try_charge_many`` (the prospective check
   eps <= B_a - L_a with Fractions sees every charge admitted before it), appends their audit
   records to the hash chain (each names its request: ``origin`` "<owner>:<number>", part of
   the record hash) and stores each requester's answer (the seq of its first record) in the
   table ``dpmv_gc`` of the ledger file - in the same transaction - then COMMITs, releases the
   lock and syncs the write-ahead log (one fsync for the whole batch, outside the lock: see
   ``SqliteLedger._wal_sync``; where SQLite syncs at COMMIT itself, inside it).
4. A waiter that then gets the lock reads its answer row. If it holds its request number and the
   verified chain holds its records there (``GroupCommit.answer``: read in the snapshot that
   verifies the chain, one per charge, same attributes and eps, its origin), the release was
   committed: it returns their decisions and totals. If not (it posted after the leader read the
   queue, or the leader died before COMMIT), it takes the lock exclusively, reads its answer
   once more (another waiter may have led meanwhile) and else becomes the leader (step 3).

Why this keeps the guarantees:

* Durability: a request is acknowledged only from an answer row, and the answer row, the
  request's audit records and the totals are committed in one SQLite transaction; a waiter
  reads it only after the leader's COMMIT returned and it dropped the lock, and then syncs the
  write-ahead log itself before it returns (``SqliteLedger._wal_sync``: the commit and every
  earlier one are on disk; the leader's own sync may still be running). Where SQLite syncs at
  COMMIT (``PRAGMA synchronous=FULL``: sqlite3WalFrames syncs the log before walIndexWriteHdr
  publishes the commit) that sync is a no-op. A leader killed mid-batch leaves nothing (ROLLBACK by WAL
  recovery; the kernel drops its lock) and every waiter of that batch, finding no answer, leads
  itself: nothing acknowledged is lost and no batch is half-written.
* Exactly once: the answer row records the owner's request number, and a leader skips a posted
  request whose number is already answered, so a request is charged at most once (also after a
  power loss that resurrects a request file: the file is not synced, the answer row is).
  After its answer the owner marks its request file withdrawn; a leader that reads it before
  that finds its number answered.
* Exact accounting: every request is decided by the same code as a direct charge, in one
  total order (the chain order), on the leader's verified state; caps and policy are those
  stored with the user (every process checked them on open).
* Privacy: a request that was posted but never acknowledged (its process died or was
  interrupted while waiting) may still be charged by a leader: the ledger can only count
  MORE than was released, never less (C5 is conservative). Request files of dead processes
  (pid gone) and requests older than ``STALE_S`` are deleted uncharged; a request that does
  not parse or whose digest does not match is never charged (its owner, if alive, commits its
  release itself).
* Integrity: the leader verifies the user's chain before deciding, as for its own charge; a
  request names its user and a key id (HMAC of a fixed label, or "none"), and only a leader
  with the same key commits it. The answer table carries no decision: a waiter takes them from
  its own records in the verified chain, so a forged, replayed or altered answer row only makes
  it commit its release itself (tests/test_group_commit_forgery.py).
"""
from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import mmap
import os
import secrets
import stat
import time
from fractions import Fraction
from typing import Any, Sequence

from . import _proc
from ..core.memo import remember
from ..core.errors import BudgetError
from ..core.ledger import check_charge_args

STALE_S = 60.0             # posted requests older than this are dropped unread
HINT_SLOTS = 64            # commit hints in the shared map (users hash to one of them)
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


def _shared_map(lock_path: str) -> mmap.mmap | None:
    """The ledger's lock file, mapped shared by every process (``flock`` on the file does not
    depend on its content): bytes 0-7 the queue token (``GroupCommit.posted``), then
    ``HINT_SLOTS`` commit hints of 8 bytes (``GroupCommit.catch_up``). Mapped through a
    descriptor of its own, closed at once, so that the map never holds the lock's open file
    description. None when the file cannot be mapped: ``posted()`` then stats the queue
    directory every time and ``catch_up()`` always verifies."""
    size = 8 + 8 * HINT_SLOTS
    try:
        fd = os.open(lock_path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)  # (racing processes all extend it to this size: same result)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _private_dir(d: str) -> bool:
    """``d`` is a real directory of this user that nobody else can write."""
    try:
        own = os.stat(d, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(own.st_mode) and own.st_uid == os.getuid() and (own.st_mode & 0o077) == 0


class GroupCommit:
    """The group-commit side of one SqliteLedger (one per ledger object and process).

    Each requester keeps ONE request file ``<dir>/<owner>`` for its lifetime and rewrites it in
    place (one ``pwrite``, no directory operation per release: creating, renaming and unlinking
    files in one shared directory made 4 processes on 2 cores spend more CPU in the kernel
    than on their releases). A request is ``"<req> <time> <key id> <length> <digest>\\n<charges>"``;
    the digest (SHA-256 of everything else) lets a leader skip a request it read while it was
    being rewritten (a torn read is never charged: its owner then commits it itself). After
    its answer the owner overwrites the head with ``"0\\n"`` (withdrawn). The leader keeps the
    directory listing (re-listed only when the directory changes) and a descriptor per file."""

    def __init__(self, path: str, user_id: str, key: bytes | None) -> None:
        digest = hashlib.sha256(user_id.encode()).hexdigest()
        self.dir = os.path.join(queue_root(path), digest[:24])
        self._shm = _shared_map(path + ".lock")  # None: no queue token, no commit hints
        slot = 8 + 8 * (int(digest[:8], 16) % HINT_SLOTS)
        self._hint = slice(slot, slot + 8)     # this user's commit hint in the map
        self._caught: bytes | None = None      # the hint when this process last verified or committed
        self._commits = 0                      # hints written by this owner
        self.key_id = key_id(key)
        self.user_id = user_id
        self._owner = ""
        self._pid = -1
        self._req = 0
        self._batches = 0
        self._fd = -1          # this owner's request file (open while it lives)
        self._posted = False   # this owner's file holds a request not yet withdrawn
        self._registered = False  # register() ran for this owner
        self._items_text: dict[tuple[Any, ...], str] = {}
        self._items_of: dict[str, list[tuple[frozenset[str], Fraction]]] = {}
        self._mark: tuple[int, int, int] | None = None   # the directory when last listed
        self._names: list[str] = []                      # ... and the other owners' files in it
        self._seen = b""                                 # ... and the queue token before that listing
        self._fds: dict[str, int] = {}                   # leader: open descriptors of those files
        self._fds_pid = -1

    @property
    def owner(self) -> str:
        pid = _proc.pid()
        if pid != self._pid:  # a forked child is a different requester (the parent's files stay its own)
            self._pid, self._owner = pid, f"{pid}-{secrets.token_hex(8)}"
            self._fd, self._posted, self._fds, self._fds_pid, self._mark = -1, False, {}, pid, None
            self._registered = False
        return self._owner

    def close(self) -> None:
        """Remove this owner's request file, the files of owners that died without ``close``
        (killed, or a forked child that left through ``os._exit``) and the queue directories once
        empty: nothing is left in ``/dev/shm`` after the last process closes."""
        me = self.owner
        for fd in self._fds.values():
            _close(fd)
        self._fds, self._mark, self._names = {}, None, []
        if self._fd >= 0:
            _close(self._fd)
            self._fd = -1
            self._remove(me)
        try:
            self._live([n for n in os.listdir(self.dir) if _is_request(n)])
        except OSError:
            pass
        for d in (self.dir, os.path.dirname(self.dir)):
            try:
                os.rmdir(d)
            except OSError:  # not empty (other users or processes) or gone
                break
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    # ---- requester side --------------------------------------------------------------------
    def post(self, items: Charges) -> int:
        """Write this owner's next request into its request file (one ``pwrite``) and return its
        number; 0 when the queue directory cannot be used (then this process leads)."""
        me = self.owner
        self._req += 1
        key = tuple(items)
        text = self._items_text.get(key)
        if text is None:
            text = remember(self._items_text, key,
                            json.dumps([[sorted(a), str(e)] for a, e in items], separators=(",", ":")), 256)
        body = request_body(self._req, time.time(), self.key_id, text)
        if self._fd < 0:
            self._fd = self._create(os.path.join(self.dir, me))
            if self._fd < 0:
                return 0
        os.pwrite(self._fd, body, 0)
        self._posted = True
        return self._req

    def _create(self, path: str) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # the first request, or a close() removed the empty directory
            try:
                for d in (os.path.dirname(self.dir), self.dir):  # (makedirs: parents get 0o777)
                    try:
                        os.mkdir(d, 0o700)
                    except FileExistsError:
                        pass
                    if not _private_dir(d):
                        return -1
                fd = os.open(path, flags, 0o600)
            except OSError:
                return -1
        except OSError:
            return -1
        self._changed()
        return fd

    def _changed(self) -> None:
        """Tell every process's ``posted()`` that the queue's files changed: a new random queue
        token, written after the change."""
        if self._shm is not None:
            self._shm[:8] = secrets.token_bytes(8)

    def _remove(self, name: str) -> None:
        """Delete a request file of the queue (then a new queue token)."""
        _unlink(os.path.join(self.dir, name))
        self._changed()

    # ---- commit hints: verify off the lock what others committed -------------------------------
    def committed(self) -> None:
        """Call after a COMMIT of this user's ledger, before the writer lock is released: a new
        commit hint (4 random bytes of this owner's name and a counter) in this user's slot of
        the shared map. Users whose ids hash to the same slot share it: they verify more often than
        needed, never less."""
        if self._shm is not None:
            self._commits += 1  # the owner's random suffix and a counter: no random bytes per commit
            h = bytes.fromhex(self.owner[-8:]) + (self._commits & 0xFFFFFFFF).to_bytes(4, "little")
            self._shm[self._hint] = h
            self._caught = h

    def catch_up(self, ledger: Any) -> None:
        """Verify under a read snapshot (``ledger.spent()``: exactly its checks, nothing trusted)
        what was committed since this process last verified or committed, when the commit hint
        says that another process committed since; a write transaction that starts from the
        verified state then skips its own verification (``PRAGMA data_version``) unless a commit
        came in between. Only a shortcut: a commit by a process that writes no hint is still
        verified by the next transaction."""
        h = self._shm[self._hint] if self._shm is not None else None
        if h is None or h != self._caught:
            ledger.spent()
            self._caught = h

    def register(self) -> None:
        """Create this requester's (empty) request file, so that other processes charging the
        same user see that posting can pay off (see ``charge``)."""
        me = self.owner
        if not self._registered:
            self._registered = True
            self._fd = self._create(os.path.join(self.dir, me))
            self._mark = None

    def withdraw(self) -> None:
        """Mark this owner's request as withdrawn (after its answer, or when giving up)."""
        if self._posted and self._fd >= 0 and self._pid == _proc.pid():
            try:
                os.pwrite(self._fd, b"0\n", 0)
            except OSError:
                pass
        self._posted = False

    def origin(self, req: int, owner: str | None = None) -> str:
        """The ``origin`` of the audit records that decide request ``req`` of ``owner`` (default:
        this owner): what binds an answer to the chain."""
        return f"{owner or self.owner}:{req}"

    def answer(self, ledger: Any, req: int, items: Charges
               ) -> tuple[tuple[bool, ...], dict[str, Fraction]] | None:
        """This owner's committed answer to request ``req`` as the verified chain holds it, or None.

        The answer row only says where to look (the first record's seq); the decisions and the
        totals come from the records themselves, read in the same snapshot that verifies the
        chain (``ledger._records_of``): one per charge of ``items``, in order, with this request's
        origin. Anything else (no row, a forged, replayed or altered row, records of another
        request or user) is no answer: the owner then commits its release itself."""
        try:
            row = ledger._conn.execute("SELECT req, answer FROM dpmv_gc WHERE owner = ?", (self.owner,)).fetchone()
        except Exception as exc:  # the table appears with the first batch
            if "no such table" in str(exc):
                return None
            raise
        if row is None or row[0] != req:
            return None
        try:
            first = json.loads(row[1])["seq"]
        except (ValueError, TypeError, KeyError, RecursionError):
            return None
        if type(first) is not int:
            return None
        return ledger._records_of(self.origin(req), items, first)

    # ---- leader side -------------------------------------------------------------------------
    def posted(self) -> list[str]:
        """The names of the other owners' request files (the leader does not wait for more: a
        commit delay measured on the shared 2-core machine only lowered throughput, see
        benchmarks/README).

        No system call while the queue token is unchanged since the last listing: every process
        that creates or removes a file of the queue writes a new random token afterwards
        (``_changed``) into the first 8 bytes of the ledger's lock file, which every
        process maps shared (``_shared_map``); the token is read before listing, so a change
        after the read is seen next time. Else one ``stat`` instead of a listing while the
        directory is unchanged since it was last listed (creating or removing a file changes its
        mtime and, on tmpfs, its size; request files are rewritten in place, which does not).
        A file this misses (one created by a process that writes no token, within one clock
        tick) only costs batching: its owner commits its request itself."""
        me = self.owner
        tok = self._shm[:8] if self._shm is not None else None
        if tok is not None and tok == self._seen and self._mark is not None:
            return self._names
        try:
            st = os.stat(self.dir)
            mark = (st.st_ino, st.st_mtime_ns, st.st_size)
            if mark == self._mark:
                self._seen = tok or b""
                return self._names
            names = [n for n in os.listdir(self.dir) if n != me and _is_request(n)]
        except FileNotFoundError:  # the queue directory was removed: nobody is waiting
            return []
        for gone in set(self._fds) - set(names):
            _close(self._fds.pop(gone))
        alive = self._live(names)
        try:  # the mark after the removals (they changed the directory)
            st = os.stat(self.dir)
        except FileNotFoundError:
            return []
        self._mark, self._names = (st.st_ino, st.st_mtime_ns, st.st_size), alive
        self._seen = tok or b""
        return alive

    def _live(self, names: list[str]) -> list[str]:
        """The request files of live owners among ``names``; those of dead owners (killed, or
        exited without close) are removed (each with a new token: listed again next time, so
        nothing created meanwhile is missed)."""
        alive = [n for n in names if _alive(_pid_of(n))]
        for n in set(names) - set(alive):
            self._remove(n)
        return alive

    def _read(self, name: str) -> bytes | None:
        fd = self._fds.get(name)
        if fd is None:
            try:
                fd = self._fds[name] = os.open(os.path.join(self.dir, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                self._mark = None  # gone: list again next time
                return None
        try:
            return os.pread(fd, 65536, 0)
        except OSError:
            return None

    def collect(self, db: Any, caps: dict[str, Fraction]) -> list[tuple[str, int, list]]:
        """The posted, unanswered requests of this user and key (inside the leader's transaction)."""
        names = self.posted()
        if not names:
            return []
        now = time.time()
        found = []
        for name in names:
            raw = self._read(name)
            if not raw or raw.startswith(b"0\n"):
                continue  # withdrawn (answered) or never written
            try:
                parsed = parse_request(raw)
                if parsed is None:
                    continue  # read while its owner rewrote it: its owner commits it itself
                req, t, kid, text = parsed
                if now - t > STALE_S or not _alive(_pid_of(name)):
                    self._drop(name)
                    continue
                if kid != self.key_id:
                    continue  # another key: its owner commits it itself
                items = self._items_of.get(text)
                if items is None:
                    items = remember(self._items_of, text, [check_charge_args(caps, frozenset(a), Fraction(e))
                                                            for a, e in json.loads(text)], 256)
            except (ValueError, KeyError, TypeError, ZeroDivisionError, BudgetError, RecursionError):
                continue  # invalid: never charged (its owner, if any, commits its release itself)
            if items:
                found.append((name, req, items))
        if not found:
            return []
        marks = ",".join("?" * len(found))
        done = dict(db.execute(f"SELECT owner, req FROM dpmv_gc WHERE owner IN ({marks})",
                               [n for n, _, _ in found]).fetchall())
        # taken (or answered before): its owner waits on the lock, reads its answer row and
        # withdraws the request, or - if this transaction never commits - commits it itself; a
        # leader that reads it again before the withdrawal finds it answered here
        return [f for f in found if done.get(f[0], 0) < f[1]]

    def _drop(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            _close(fd)
        self._remove(name)
        self._mark = None

    def answers(self, db: Any, answered: list[tuple[str, int, int]]) -> None:
        """Store the answers of a batch (same transaction as its audit records): per request,
        the seq of its first record (the records carry its origin; see ``answer``)."""
        now = time.time()
        db.executemany("INSERT OR REPLACE INTO dpmv_gc (owner, req, user_id, answer, t) VALUES (?, ?, ?, ?, ?)",
                       [(o, r, self.user_id, f'{{"seq":{first}}}', now) for o, r, first in answered])
        self._batches += 1
        if self._batches % 512 == 1:
            db.execute("DELETE FROM dpmv_gc WHERE t < ?", (now - PRUNE_S,))


def request_body(req: int, t: float, kid: str, text: str) -> bytes:
    """A request file's content: head line (request number, time, key id, length and digest of
    the charges text) and the charges (JSON: [[attributes, "eps"], ...])."""
    head = f"{req} {t!r} {kid} {len(text.encode())}"
    digest = hashlib.sha256(f"{head}\n{text}".encode()).hexdigest()[:32]
    return f"{head} {digest}\n{text}".encode()


def parse_request(raw: bytes) -> tuple[int, float, str, str] | None:
    """(request number, time, key id, charges text) of a request file's content; None when the
    digest does not match (read while being rewritten: a longer old request may also trail
    the new one, hence the length); ValueError when malformed."""
    head_b, _, rest = raw.partition(b"\n")
    head = head_b.decode("ascii")
    req_s, t_s, kid, n_s, digest = head.split(" ")
    n = int(n_s)
    if n < 0 or n > len(rest):
        return None
    text = rest[:n].decode()
    base = head[:-len(digest) - 1]
    if hashlib.sha256(f"{base}\n{text}".encode()).hexdigest()[:32] != digest:
        return None
    req = int(req_s)
    if req < 1:
        raise ValueError(f"request number {req}")
    return req, float(t_s), kid, text


def _is_request(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(".tmp")


def _pid_of(name: str) -> int:
    try:
        return int(name.split("-", 1)[0])
    except ValueError:
        return -1


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
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
        gc.register()  # (once per process: a forked child registers its own file)
        # what others committed since this process last verified: verified now, under a read
        # snapshot (WAL readers do not block the writer; spent() runs exactly the checks of a
        # write transaction: nothing is trusted, they move off the lock), not inside the lock
        # should this process lead
        gc.catch_up(ledger)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # post only when another process charges this user (its request file is in the
            # queue): a lock held for other users of the file would never collect the request
            req = gc.post(items) if gc.posted() else 0
            if not req:  # nobody to batch with, or no usable queue: wait for the lock and lead
                fcntl.flock(fd, fcntl.LOCK_EX)
        if req:  # posted: wait for the leader's answer
            try:
                # while the leader works: verify what was committed since the check above
                gc.catch_up(ledger)
                # shared: every waiter wakes at the leader's unlock; it lets go at once (a new
                # leader's exclusive lock must not wait for the other waiters to be scheduled)
                # and reads its answer: the batch that took its request has committed by now
                fcntl.flock(fd, fcntl.LOCK_SH)
                fcntl.flock(fd, fcntl.LOCK_UN)
                ans = gc.answer(ledger, req, items)
                if ans is None:  # not in the last batch: lead (or find it answered meanwhile)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    ans = gc.answer(ledger, req, items)
                    if ans is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                gc.withdraw()
                raise
            if ans is not None:
                gc.withdraw()
                ledger._wal_sync()  # (the leader's own sync may still run: acknowledge only after one)
                ledger._verifier.advance_witness()  # (the verified head it read, now on disk)
                ledger._n_requests += 1
                return ans
        # leader: the lock is held; the transaction below releases it at COMMIT/ROLLBACK
        ledger._preheld = True
        try:
            with ledger._tx() as db:
                ledger._sync(db)
                others = gc.collect(db, ledger._caps)
                batches = [it for _, _, it in others] + [items]
                origins = [gc.origin(r, o) for o, r, _ in others] + [gc.origin(req) if req else ""]
                first = ledger._v.seq + 1  # (verified head: the batch's records follow it)
                oks, new, left = ledger._decide_write(db, batches, True, origins)
                answered = []
                for (o, r, _), it in zip(others + [(gc.owner, req, None)], batches):
                    if r:
                        answered.append((o, r, first))
                    first += len(it)
                if answered:
                    gc.answers(db, answered)
        finally:
            ledger._preheld = False
            if req:
                gc.withdraw()
        ledger._committed(new, left)
        ledger._verifier.advance_witness()
        ledger._n_requests += 1
        ledger._n_commits += 1
        ledger._n_batched += len(others)
        return oks[-1], dict(new.totals)
