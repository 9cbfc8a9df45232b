"""Content-addressed on-disk cache of generations.

The address of a generation is sha256 of the canonical JSON of everything that determines it:
the backend, model id and revision, decoding parameters, the rendered chat messages and (for
seeded backends) the prompt key. Entries live in one SQLite file (default
``results/cache/generations.sqlite``, git-ignored) as (address, text, checksum) with
checksum = sha256(address + NUL + text). On read, every entry's checksum is verified: a corrupt
or partial entry is reported, deleted and treated as missing, so it is regenerated and never
silently used. A cache file that is not a readable SQLite database is moved aside
(``*.corrupt-<time>``) and a fresh one is started.

In front of the SQLite file sits the run's committed shard store (:mod:`.store`,
``results/<profile>/generations/``): lookups read the store first, then SQLite; new generations
(and SQLite hits the store lacks) are written to both, so the store alone reproduces a run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.errors import GenerationError
from ..common.paths import project_root
from .store import GenerationStore, default_store, make_entry

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("results") / "cache" / "generations.sqlite"
_SCHEMA = "CREATE TABLE IF NOT EXISTS generations (address TEXT PRIMARY KEY, text TEXT, checksum TEXT)"


def content_address(identity: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of (backend identity, request content)."""
    body = json.dumps({"identity": identity, "request": request}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def checksum(address: str, text: str) -> str:
    return hashlib.sha256(f"{address}\0{text}".encode()).hexdigest()


class GenerationCache:
    """SQLite-backed, checksum-verified generation cache (safe across threads and processes),
    behind the shard store ``store``: "env" (default) the run's store named by
    ``DPMV_GENERATION_STORE`` (none when unset), a :class:`~.store.GenerationStore`, a directory,
    or None."""

    def __init__(self, path: str | Path | None = None, store: Any = "env") -> None:
        self.path = Path(path) if path is not None else project_root() / DEFAULT_CACHE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "corrupt": 0, "writes": 0, "store_hits": 0}
        if store == "env":
            store = default_store()
        elif isinstance(store, (str, Path)):
            store = GenerationStore(store)
        elif store is not None and not isinstance(store, GenerationStore):
            raise GenerationError(f"store must be 'env', a directory, a GenerationStore or None, got {store!r}")
        self.store: GenerationStore | None = store
        self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
            conn.execute("SELECT count(*) FROM generations LIMIT 1").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            log.warning("generation cache %s is unreadable (%s); moved aside to %s and starting fresh",
                        self.path, exc, aside)
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            self.path.replace(aside)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    side.replace(aside.with_name(aside.name + suffix))
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
            return conn

    def get_many(self, addresses: Iterable[str],
                 meta: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
        """Verified texts for the addresses present: the store's first (checked against ``meta``,
        address -> the request's store fields), then SQLite's; corrupt SQLite entries are deleted
        and left out. SQLite hits with ``meta`` are copied into the store."""
        addrs = list(dict.fromkeys(addresses))
        found: dict[str, str] = {}
        if self.store is not None:
            found = self.store.get_many(addrs, meta)
            self.stats["store_hits"] += len(found)
            rest = [a for a in addrs if a not in found]
            more = self._sqlite_get(rest)
            if more and meta is not None:
                self.store.append(make_entry(a, t, meta[a]) for a, t in more.items() if a in meta)
            self.stats["hits"] += len(found)     # SQLite's hits and misses are counted by _sqlite_get
            found.update(more)
            return found
        return self._sqlite_get(addrs)

    def _sqlite_get(self, addrs: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        bad: list[str] = []
        with self._lock:
            for i in range(0, len(addrs), 500):
                chunk = addrs[i:i + 500]
                q = f"SELECT address, text, checksum FROM generations WHERE address IN ({','.join('?' * len(chunk))})"
                try:
                    rows = self._conn.execute(q, chunk).fetchall()
                except sqlite3.DatabaseError as exc:
                    raise GenerationError(f"generation cache {self.path} failed to read: {exc}") from None
                for addr, text, chk in rows:
                    if isinstance(text, str) and isinstance(chk, str) and chk == checksum(addr, text):
                        found[addr] = text
                    else:
                        bad.append(addr)
            if bad:
                log.warning("generation cache %s: %d corrupt or partial entries dropped (will regenerate)",
                            self.path, len(bad))
                self._conn.executemany("DELETE FROM generations WHERE address = ?", [(a,) for a in bad])
                self._conn.commit()
            self.stats["hits"] += len(found)
            self.stats["misses"] += len(addrs) - len(found)
            self.stats["corrupt"] += len(bad)
        return found

    def get(self, address: str) -> str | None:
        return self.get_many([address]).get(address)

    def put_many(self, items: Mapping[str, str] | Iterable[tuple[str, str]],
                 meta: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Write texts to SQLite and, with a store, to one new gzip member of the store (``meta``:
        address -> the request's store fields, required then)."""
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        for a, t in pairs:
            if not isinstance(t, str):
                raise GenerationError(f"cache entries must be strings, got {type(t).__name__} for {a[:12]}")
        if self.store is not None:
            if meta is None or any(a not in meta for a, _ in pairs):
                raise GenerationError("writing to a generation store needs each entry's model, decoding and "
                                      "messages hash (meta)")
            self.store.append(make_entry(a, t, meta[a]) for a, t in pairs)
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO generations VALUES (?, ?, ?)",
                                   [(a, t, checksum(a, t)) for a, t in pairs])
            self._conn.commit()
            self.stats["writes"] += len(pairs)

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM generations").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
