"""The committed store of generations: checksummed, gzip-compressed JSON Lines shards.

A profile's real-model responses live under ``results/<profile>/generations/`` as files
``shard-<UTC time>-<pid>-<n>.jsonl.gz`` (``zcat``/``zgrep`` read them). Each line is one entry::

    {"address": ..., "backend": ..., "model": ..., "revision": ..., "decoding": {...},
     "messages_sha256": ..., "text": ..., "checksum": ...}

``address`` is the generation's content address (:func:`~.cache.content_address`: sha256 of the
backend identity and the request); ``messages_sha256`` hashes the rendered chat messages;
``checksum`` is sha256 of the canonical JSON of every other field. A writer appends one gzip
member per flush (one batch) and syncs it, so a killed run loses at most the batch in flight;
a torn last member is reported and the entries before it are kept. On read, an entry whose
checksum fails, or whose model, revision, decoding or messages differ from the request that
maps to its address, is reported and treated as missing (regenerated, never used).
"""
from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import logging
import os
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..common.paths import GENERATION_STORE_ENV as ENV
from ..core.errors import GenerationError

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.jsonl.gz"
META_FIELDS = ("backend", "model", "revision", "decoding", "messages_sha256")
ENTRY_FIELDS = ("address",) + META_FIELDS + ("text",)
ROTATE_BYTES = 8 * 2 ** 20      # a writer starts a new shard past this size (git-friendly files)


def messages_sha256(messages: Any) -> str:
    """sha256 of the canonical JSON of rendered chat messages."""
    return hashlib.sha256(_canonical(messages).encode("utf-8")).hexdigest()


def entry_checksum(entry: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an entry's fields (all but ``checksum``)."""
    return hashlib.sha256(_canonical({k: entry.get(k) for k in ENTRY_FIELDS}).encode("utf-8")).hexdigest()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def make_entry(address: str, text: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """A store entry (with its checksum) for ``text`` at ``address``; ``meta`` holds
    :data:`META_FIELDS`."""
    missing = [k for k in META_FIELDS if k not in meta]
    if missing:
        raise GenerationError(f"store entry for {address[:12]} lacks {missing}")
    if not isinstance(text, str):
        raise GenerationError(f"store entries must hold text, got {type(text).__name__} for {address[:12]}")
    e = {"address": address, **{k: meta[k] for k in META_FIELDS}, "text": text}
    e["checksum"] = entry_checksum(e)
    return e


@dataclass
class ReadReport:
    """What a scan of the shards found: entries kept, and the problems met (each also logged)."""

    shards: int = 0
    entries: int = 0
    bad_lines: list[str] = field(default_factory=list)      # "<shard>:<line>: <why>"
    torn: list[str] = field(default_factory=list)           # shards whose last gzip member is torn


def _read_lines(path: Path, report: ReadReport) -> Iterator[tuple[int, bytes]]:
    """Complete lines of a shard; a torn or corrupt gzip tail stops the shard with a report."""
    n = 0
    try:
        with gzip.open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                yield n, line
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        msg = f"{path.name}: unreadable after line {n} ({type(exc).__name__}: {exc}); the entries before it are kept"
        log.warning("generation store %s", msg)
        report.torn.append(msg)


class GenerationStore:
    """The shards of one directory: an index address -> entry, and a writer for new shards.

    Parameters
    ----------
    directory : str or Path
        The store directory (e.g. ``results/llm/generations``); created on the first write.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._index: dict[str, dict[str, Any]] | None = None
        self.report = ReadReport()
        self._shard: Path | None = None
        self._count = 0
        self.stats = {"hits": 0, "rejected": 0, "writes": 0}

    # ---- reading ---------------------------------------------------------------------------
    def shards(self) -> list[Path]:
        return sorted(self.directory.glob(SHARD_GLOB)) if self.directory.is_dir() else []

    def _bad(self, where: str, why: str) -> None:
        self.report.bad_lines.append(f"{where}: {why}")
        log.warning("generation store %s: %s (ignored; will regenerate)", where, why)

    def load(self) -> dict[str, dict[str, Any]]:
        """Scan every shard (once): verified entries by address; bad lines are reported and left out."""
        with self._lock:
            if self._index is not None:
                return self._index
            index: dict[str, dict[str, Any]] = {}
            self.report = ReadReport()
            for path in self.shards():
                self.report.shards += 1
                for n, raw in _read_lines(path, self.report):
                    where = f"{path.name}:{n}"
                    try:
                        e = json.loads(raw)
                    except ValueError:
                        self._bad(where, "not a JSON line")
                        continue
                    if not isinstance(e, dict) or not isinstance(e.get("address"), str) \
                            or not isinstance(e.get("text"), str):
                        self._bad(where, "not a store entry")
                        continue
                    if e.get("checksum") != entry_checksum(e):
                        self._bad(where, f"checksum mismatch for {e['address'][:12]}")
                        continue
                    index[e["address"]] = e
            self.report.entries = len(index)
            self._index = index
            return index

    def get_many(self, addresses: Iterable[str],
                 expect: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
        """Verified texts for the addresses present. With ``expect`` (address -> the
        :data:`META_FIELDS` of the request that maps to it), an entry whose fields differ is
        reported and left out."""
        index = self.load()
        found: dict[str, str] = {}
        for a in addresses:
            e = index.get(a)
            if e is None:
                continue
            want = expect.get(a) if expect is not None else None
            if want is not None:
                diff = [k for k in META_FIELDS if k in want and e.get(k) != want[k]]
                if diff:
                    self._bad(a[:12], f"entry does not match its request ({', '.join(diff)} differ)")
                    self.stats["rejected"] += 1
                    continue
            found[a] = e["text"]
        self.stats["hits"] += len(found)
        return found

    def __contains__(self, address: str) -> bool:
        return address in self.load()

    def __len__(self) -> int:
        return len(self.load())

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.shards())

    # ---- writing ---------------------------------------------------------------------------
    def _new_shard(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        while True:
            self._count += 1
            p = self.directory / f"shard-{stamp}-{os.getpid()}-{self._count:03d}.jsonl.gz"
            if not p.exists():
                return p

    def append(self, entries: Iterable[Mapping[str, Any]]) -> Path | None:
        """Append entries (from :func:`make_entry`) as one gzip member to this writer's shard and
        sync it to disk; a new shard is started past :data:`ROTATE_BYTES`."""
        items = list(entries)
        if not items:
            return None
        for e in items:
            if e.get("checksum") != entry_checksum(e):
                raise GenerationError(f"refusing to store an entry with a wrong checksum ({e.get('address')!r})")
        body = "".join(_canonical(e) + "\n" for e in items).encode("utf-8")
        with self._lock:
            if self._shard is None or (self._shard.exists() and self._shard.stat().st_size > ROTATE_BYTES):
                self._shard = self._new_shard()
            with open(self._shard, "ab") as f:
                f.write(gzip.compress(body, mtime=0))
                f.flush()
                os.fsync(f.fileno())
            if self._index is not None:
                for e in items:
                    self._index[e["address"]] = dict(e)
            self.stats["writes"] += len(items)
            return self._shard


def default_store() -> GenerationStore | None:
    """The store named by the environment (:data:`ENV`, set by the notebook runner), else None."""
    d = os.environ.get(ENV, "").strip()
    return GenerationStore(d) if d else None
