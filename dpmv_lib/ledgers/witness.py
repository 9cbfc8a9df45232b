"""Rollback witness of a durable ledger: the newest chain position outside the database (C5).

The hash chain proves that a ledger file is internally consistent, not that it is the newest
one: deleting the records after #k and copying record k's head and totals back, truncating the
file or its write-ahead log, or restoring an old copy each leave a consistent chain that has
forgotten acknowledged charges (so more releases than the cap allows). A witness keeps, per
user, the highest (seq, hash) of the chain that was ever acknowledged, and the ledger's
identity (its genesis hash), somewhere else; the ledger refuses a chain that is behind it, that
holds another record at that position, or whose genesis is not the mark's, on open and before
every charge (:class:`~dpmv_lib.core.errors.LedgerRollbackError`).

* :class:`FileWitness` (the SQLite default, ``<db>.witness/``): one file per user with two
  authenticated slots, written alternately (``pwrite`` under ``flock``): a torn write leaves the
  other slot, which never names a position the database may not have. A keyed ledger's slots
  carry an HMAC-SHA256 with a key derived from the ledger's key, so they cannot be rewritten (to
  an older head, a future seq or another ledger) without it; an unkeyed ledger's witness is only
  a checksum (SHA-256), which anyone who can write the file can recompute. Every file is opened
  without following symbolic links and must be a regular file of this user; the directory must
  be a real directory of this user with mode 0700 (no group or other access). A file that is
  empty, of the wrong size or without one valid slot is tampering (an error naming the file),
  never "missing": the file is created whole (written, synced and linked into place), so no
  crash leaves it empty. The witness advances only after the ledger's commit is on disk and
  before the charge is acknowledged, so it is never ahead of the database, and every process
  (and every later open) sees it at once.
  Durability of the witness itself: with ``sync=False`` (the default) its write reaches the disk
  with the page cache (seconds); only a power cut in that window lets it lag the database (never
  lead it), so an attacker would have to roll the file back across such a cut. ``sync=True``
  adds an ``fdatasync`` per write transaction (``benchmarks/bench_witness.py`` measures the cost).
* Any object with ``read(user_id)`` and ``advance(user_id, seq, hash)`` (:class:`Witness`) can
  be passed instead: the anchor hook for an external witness (another host, an append-only log).

What remains: an attacker who rolls back both the database and the witness (restores both from
one old copy, or deletes the witness file: a missing file is adopted from the verified chain,
trust on first use) is not detected, nor one who holds the ledger's key (or, unkeyed, anyone who
can write the file); a torn newest slot falls back to the older one (one write transaction).
Keep the witness where the database's attacker cannot write, or add an external one.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..core.errors import BudgetError, BudgetTypeError, LedgerIntegrityError

_MAGIC = "dpmv-witness-2"
_SLOT = 160  # bytes per slot: "<magic> <seq> <hash> <genesis> <mac>\n", space padded
_SIZE = 2 * _SLOT
_GENESIS = 16  # hex characters of the ledger's genesis hash a mark is bound to
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


@dataclass(frozen=True)
class WitnessMark:
    """The newest acknowledged chain position of one user: record ``seq`` has hash ``hash``;
    ``genesis``: the first characters of the ledger's genesis hash the mark belongs to ("": not
    bound, e.g. an external witness). Marks compare by position (seq, hash)."""

    seq: int
    hash: str
    genesis: str = field(default="", compare=False)


class Witness(Protocol):
    """The rollback witness interface (also the hook for an external anchor)."""

    def read(self, user_id: str) -> WitnessMark | None: ...

    def advance(self, user_id: str, seq: int, hash: str) -> None: ...


class WitnessTamperError(LedgerIntegrityError):
    """A rollback witness file or directory was tampered with (forged or foreign slots, a file
    emptied or truncated, a symbolic link, another owner, group or other access)."""


def mark_key(key: bytes | None) -> bytes | None:
    """The witness MAC key derived from a ledger's HMAC key (None: unkeyed, a checksum only)."""
    return None if key is None else hmac.new(key, b"dpmv rollback witness v2", hashlib.sha256).digest()


def _digest(key: bytes | None, user_id: str, seq: int, h: str, genesis: str) -> str:
    msg = f"{_MAGIC}\x00{user_id}\x00{seq}\x00{h}\x00{genesis}".encode()
    if key is None:
        return hashlib.sha256(msg).hexdigest()[:32]
    return hmac.new(key, msg, hashlib.sha256).hexdigest()[:32]


def _slot(key: bytes | None, user_id: str, seq: int, h: str, genesis: str) -> bytes:
    line = f"{_MAGIC} {seq} {h} {genesis or '-'} {_digest(key, user_id, seq, h, genesis)}\n".encode("ascii")
    if len(line) > _SLOT:
        raise BudgetError(f"witness entry too long for a slot ({len(line)} bytes)")
    return line.ljust(_SLOT, b" ")


def _parse(key: bytes | None, user_id: str, raw: bytes) -> WitnessMark | None:
    try:
        magic, seq_s, h, g, dig = raw.decode("ascii").split()
        seq = int(seq_s)
    except (UnicodeDecodeError, ValueError):
        return None
    g = "" if g == "-" else g
    if magic != _MAGIC or seq < 0 or not hmac.compare_digest(dig, _digest(key, user_id, seq, h, g)):
        return None  # torn, forged or foreign: the other slot holds the previous mark
    return WitnessMark(seq, h, g)


class FileWitness:
    """A witness in a local directory (created 0700), one file per user.

    Parameters
    ----------
    path : str or Path
        The directory, e.g. ``<ledger file>.witness`` (the SQLite ledger's default).
    sync : bool, default False
        ``fdatasync`` every advance before the charge is acknowledged (see the module docstring).
    key : bytes, optional
        The ledger's HMAC key: slots are authenticated with a key derived from it (a keyed
        ledger gives its key to the witness it opens). None: a SHA-256 checksum only.

    Raises
    ------
    BudgetTypeError
        ``path`` is not a str or path-like object, or ``key`` not bytes or None.
    BudgetError
        The directory cannot be created or a witness file cannot be read or written
        (:class:`WitnessTamperError` when the directory or a file was tampered with).
    """

    binds_ledger = True  # advance() takes the ledger's genesis (the ledgers pass it)

    def __init__(self, path: str | Path, sync: bool = False, key: bytes | None = None) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise BudgetTypeError(f"a witness directory must be a path, got {type(path).__name__}")
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise BudgetTypeError(f"a witness key must be bytes or None, got {type(key).__name__}")
        self.path = Path(path)
        self.sync = bool(sync)
        self.key = None if key is None else bytes(key)
        self._mac = mark_key(self.key)
        self._fds: dict[str, tuple[int, int, int]] = {}  # user -> (fd, st_dev, st_ino)
        self._seen: dict[str, tuple[bytes, WitnessMark, int]] = {}  # user -> verified (bytes, mark, next slot)
        self._dfd = -1
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"FileWitness({str(self.path)!r}{', sync=True' if self.sync else ''}{', keyed' if self.key else ''})"

    def _name(self, user_id: str) -> str:
        return hashlib.sha256(user_id.encode()).hexdigest()[:32]

    def _file(self, user_id: str) -> Path:
        return self.path / self._name(user_id)

    def where(self, user_id: str) -> str:
        """The witness file of ``user_id`` (named in errors)."""
        return str(self._file(user_id))

    def _tampered(self, what: str, user_id: str | None = None) -> WitnessTamperError:
        where = f"rollback witness file {self._file(user_id)}" if user_id is not None \
            else f"rollback witness directory {self.path}"
        return WitnessTamperError(f"{where}: {what}; refusing it (nothing was changed): restore the witness or, "
                                  "after checking the database, remove the file to adopt the chain again")

    def _dir(self, create: bool) -> int:
        """The directory's descriptor (opened once per process, no symbolic link followed, owner
        and mode checked); -1 when it does not exist and ``create`` is False."""
        if self._pid != os.getpid():  # a forked child opens its own descriptors
            self._fds, self._seen, self._dfd, self._pid = {}, {}, -1, os.getpid()
        if self._dfd >= 0:
            return self._dfd
        try:
            if create:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                try:
                    os.mkdir(self.path, 0o700)
                except FileExistsError:
                    pass
            dfd = os.open(self.path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except FileNotFoundError:
            if create:
                raise BudgetError(f"rollback witness directory {self.path}: cannot be created") from None
            return -1
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) or os.path.islink(self.path):
                raise self._tampered("is a symbolic link or not a directory (never followed)") from None
            raise BudgetError(f"rollback witness directory {self.path}: {exc}") from None
        st = os.fstat(dfd)
        bad = ("is not a directory" if not stat.S_ISDIR(st.st_mode)
               else f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})" if st.st_uid != os.geteuid()
               else f"has mode {oct(st.st_mode & 0o777)}: group or others may write or read it (must be 0700)"
               if st.st_mode & 0o077 else "")
        if bad:
            os.close(dfd)
            raise self._tampered(bad)
        self._dfd = dfd
        return dfd

    def _create(self, dfd: int, user_id: str, seq: int, h: str, genesis: str) -> None:
        """A new witness file holding the first mark in both slots, whole before its name exists:
        written and synced under a temporary name, then hard-linked into place (never over an
        existing file), so no crash leaves an empty or partial file."""
        name = self._name(user_id)
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=dfd)
        try:
            os.write(fd, _slot(self._mac, user_id, seq, h, genesis) * 2)
            (getattr(os, "fdatasync", os.fsync) if self.sync else os.fsync)(fd)  # (sync=True: as every advance)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            pass  # another process created it first: advance() goes on with that file
        finally:
            os.unlink(tmp, dir_fd=dfd)
        os.fsync(dfd)  # the name on disk before anything relies on it

    def _fd(self, user_id: str) -> int:
        """The user's file (no symbolic link followed, a regular file of this user), checked to
        be still the file at its name; -1 when there is none."""
        dfd = self._dir(create=False)
        if dfd < 0:
            return -1
        name = self._name(user_id)
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            if user_id in self._fds:
                raise self._tampered("was removed while the ledger had it open", user_id) from None
            return -1
        except OSError as exc:
            raise BudgetError(f"rollback witness file {self._file(user_id)}: {exc}") from None
        known = self._fds.get(user_id)
        if known is not None:
            if (st.st_dev, st.st_ino) == known[1:]:
                return known[0]
            raise self._tampered("was replaced while the ledger had it open", user_id)
        if stat.S_ISLNK(st.st_mode):
            raise self._tampered("is a symbolic link (never followed)", user_id)
        if not stat.S_ISREG(st.st_mode):
            raise self._tampered("is not a regular file", user_id)
        try:
            fd = os.open(name, os.O_RDWR | _NOFOLLOW | _CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._tampered("is a symbolic link (never followed)", user_id) from None
            raise BudgetError(f"rollback witness file {self._file(user_id)}: {exc}") from None
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(fst.st_mode) \
                or fst.st_uid != os.geteuid():
            os.close(fd)
            raise self._tampered("is not a regular file of this user (or was swapped while opened)", user_id)
        self._fds[user_id] = (fd, fst.st_dev, fst.st_ino)
        return fd

    def _mark(self, user_id: str, fd: int) -> tuple[WitnessMark, int]:
        """The newest valid mark and the slot to overwrite next (the other one: the older or a
        torn one); the bytes are verified once and remembered."""
        raw = os.pread(fd, _SIZE + 1, 0)
        seen = self._seen.get(user_id)
        if seen is not None and seen[0] == raw:
            return seen[1], seen[2]
        if len(raw) != _SIZE:
            raise self._tampered(f"has {len(raw)} bytes, not {_SIZE} (emptied or truncated: tampering, not a "
                                 "missing witness)", user_id)
        slots = [_parse(self._mac, user_id, raw[i * _SLOT:(i + 1) * _SLOT]) for i in (0, 1)]
        if slots[0] is None and slots[1] is None:
            why = ("forged, or written with another key: its MAC fails" if self._mac
                   else "corrupted, or written with a key: its checksum fails")
            raise self._tampered(f"no slot verifies ({why})", user_id)
        newest = 0 if slots[1] is None or (slots[0] is not None and slots[0].seq >= slots[1].seq) else 1
        mark = slots[newest]
        assert mark is not None
        self._seen[user_id] = (raw, mark, 1 - newest)
        return mark, 1 - newest

    def read(self, user_id: str) -> WitnessMark | None:
        """The newest mark of ``user_id`` (None: the witness has never seen the user).

        Raises
        ------
        WitnessTamperError
            The directory or the user's file was tampered with (see the module docstring)."""
        fd = self._fd(user_id)
        if fd < 0:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            return self._mark(user_id, fd)[0]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def advance(self, user_id: str, seq: int, hash: str, genesis: str = "") -> None:
        """Make the mark at least (seq, hash) of the ledger with genesis hash ``genesis``,
        durably (a no-op when it is already as new).

        Raises
        ------
        WitnessTamperError
            The directory or the user's file was tampered with."""
        g = genesis[:_GENESIS]
        dfd = self._dir(create=True)
        try:
            fd = self._fd(user_id)
            if fd < 0:
                self._create(dfd, user_id, seq, hash, g)
                fd = self._fd(user_id)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise BudgetError(f"rollback witness file {self._file(user_id)}: cannot write: {exc}") from None
        try:
            mark, older = self._mark(user_id, fd)
            if mark.seq >= seq:
                return  # (written and synced by whoever wrote it, under this lock)
            line = _slot(self._mac, user_id, seq, hash, g)
            os.pwrite(fd, line, older * _SLOT)
            raw = self._seen[user_id][0]   # (what _mark verified, under this lock): now with the new slot
            self._seen[user_id] = (raw[:older * _SLOT] + line + raw[(older + 1) * _SLOT:],
                                   WitnessMark(seq, hash, g), 1 - older)
            if self.sync:
                getattr(os, "fdatasync", os.fsync)(fd)  # (fsync where there is no fdatasync)
        except OSError as exc:
            raise BudgetError(f"rollback witness file {self._file(user_id)}: cannot write: {exc}") from None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in [v[0] for v in self._fds.values()] + ([self._dfd] if self._dfd >= 0 else []):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds, self._seen, self._dfd = {}, {}, -1
