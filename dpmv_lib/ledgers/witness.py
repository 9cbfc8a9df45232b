"""Rollback witness of a durable ledger: the newest chain position outside the database (C5).

The hash chain proves that a ledger file is internally consistent, not that it is the newest
one: deleting the records after #k and copying record k's head and totals back, truncating the
file or its write-ahead log, or restoring an old copy each leave a consistent chain that has
forgotten acknowledged charges (so more releases than the cap allows). A witness keeps, per
user, the highest (seq, hash) of the chain that was ever acknowledged, somewhere else; the
ledger refuses a chain that is behind it or that holds another record at that position, on
open and before every charge (:class:`~dpmv_lib.core.errors.LedgerRollbackError`).

* :class:`FileWitness` (the SQLite default, ``<db>.witness/``): one small file per user with
  two checksummed slots, written alternately (``pwrite`` under ``flock``): a torn write leaves
  the other slot, which never names a position the database may not have. It advances only
  after the ledger's commit is on disk and before the charge is acknowledged, so it is never
  ahead of the database, and every process (and every later open) sees it at once: a
  rollback, truncation or restore of the database file leaves the database behind it.
  Durability of the witness itself: with ``sync=False`` (the default) its write reaches the disk
  with the page cache (seconds); only a power cut in that window lets it lag the database (never
  lead it), so an attacker would have to roll the file back across such a cut. ``sync=True``
  adds an ``fdatasync`` per write transaction (benchmarks/results/ledger_issue29.md: the cost).
* Any object with ``read(user_id)`` and ``advance(user_id, seq, hash)`` (:class:`Witness`) can
  be passed instead: the anchor hook for an external witness (another host, an append-only log).

What remains: an attacker who rolls back both the database and the witness (or deletes the
witness: a missing entry is adopted from the verified chain, trust on first use) is not
detected; keep the witness where the database's attacker cannot write, or add an external one.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core.errors import BudgetError, BudgetTypeError

_MAGIC = "dpmv-witness-1"
_SLOT = 160  # bytes per slot: "<magic> <seq> <hash> <digest>\n", space padded


@dataclass(frozen=True)
class WitnessMark:
    """The newest acknowledged chain position of one user: record ``seq`` has hash ``hash``."""

    seq: int
    hash: str


class Witness(Protocol):
    """The rollback witness interface (also the hook for an external anchor)."""

    def read(self, user_id: str) -> WitnessMark | None: ...

    def advance(self, user_id: str, seq: int, hash: str) -> None: ...


def _digest(user_id: str, seq: int, h: str) -> str:
    return hashlib.sha256(f"{_MAGIC}\x00{user_id}\x00{seq}\x00{h}".encode()).hexdigest()[:16]


def _slot(user_id: str, seq: int, h: str) -> bytes:
    line = f"{_MAGIC} {seq} {h} {_digest(user_id, seq, h)}\n".encode("ascii")
    if len(line) > _SLOT:
        raise BudgetError(f"witness entry too long for a slot ({len(line)} bytes)")
    return line.ljust(_SLOT, b" ")


def _parse(user_id: str, raw: bytes) -> WitnessMark | None:
    try:
        magic, seq_s, h, dig = raw.decode("ascii").split()
        seq = int(seq_s)
    except (UnicodeDecodeError, ValueError):
        return None
    if magic != _MAGIC or seq < 0 or dig != _digest(user_id, seq, h):
        return None  # empty, torn or foreign: the other slot holds the previous mark
    return WitnessMark(seq, h)


class FileWitness:
    """A witness in a local directory (created 0700), one file per user.

    Parameters
    ----------
    path : str or Path
        The directory, e.g. ``<ledger file>.witness`` (the SQLite ledger's default).
    sync : bool, default False
        ``fdatasync`` every advance before the charge is acknowledged (see the module docstring).

    Raises
    ------
    BudgetTypeError
        ``path`` is not a str or path-like object.
    BudgetError
        The directory cannot be created or a witness file cannot be read or written.
    """

    def __init__(self, path: str | Path, sync: bool = False) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise BudgetTypeError(f"a witness directory must be a path, got {type(path).__name__}")
        self.path = Path(path)
        self.sync = bool(sync)
        self._fds: dict[str, int] = {}
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"FileWitness({str(self.path)!r}{', sync=True' if self.sync else ''})"

    def _file(self, user_id: str) -> Path:
        return self.path / hashlib.sha256(user_id.encode()).hexdigest()[:32]

    def _fd(self, user_id: str, create: bool) -> int:
        if self._pid != os.getpid():  # a forked child opens its own descriptors
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(user_id)
        if fd is None:
            f = self._file(user_id)
            try:
                if create:
                    self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
                    new = not f.exists()
                    fd = os.open(f, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
                    if new:  # the new name on disk before anything relies on it
                        dfd = os.open(self.path, os.O_RDONLY)
                        try:
                            os.fsync(dfd)
                        finally:
                            os.close(dfd)
                else:
                    fd = os.open(f, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                return -1
            except OSError as exc:
                raise BudgetError(f"rollback witness {f}: {exc}") from None
            self._fds[user_id] = fd
        return fd

    def _slots(self, user_id: str, fd: int) -> list[WitnessMark | None]:
        raw = os.pread(fd, 2 * _SLOT, 0)
        return [_parse(user_id, raw[i * _SLOT:(i + 1) * _SLOT]) for i in (0, 1)]

    def read(self, user_id: str) -> WitnessMark | None:
        """The newest mark of ``user_id`` (None: the witness has never seen the user)."""
        fd = self._fd(user_id, create=False)
        if fd < 0:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            marks = [m for m in self._slots(user_id, fd) if m is not None]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return max(marks, key=lambda m: m.seq) if marks else None

    def advance(self, user_id: str, seq: int, hash: str) -> None:
        """Make the mark at least (seq, hash), durably (a no-op when it is already as new)."""
        fd = self._fd(user_id, create=True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            seqs = [m.seq if m is not None else -1 for m in self._slots(user_id, fd)]
            if max(seqs) >= seq:
                return  # (written and synced by whoever wrote it, under this lock)
            older = 0 if seqs[0] <= seqs[1] else 1  # keep the newest mark: a torn write leaves it
            os.pwrite(fd, _slot(user_id, seq, hash), older * _SLOT)
            if self.sync:
                getattr(os, "fdatasync", os.fsync)(fd)  # (fsync where there is no fdatasync)
        except OSError as exc:
            raise BudgetError(f"rollback witness {self._file(user_id)}: cannot write: {exc}") from None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}
