"""Writing benchmark data: JSON dumps (JSON Lines: :func:`dpmv_lib.common.io.write_jsonl`), checksums,
manifests' file entries, and the atomic directory swap that leaves nothing half-written (used by
``pairedmem`` and ``transfer``)."""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dump_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def replace_dir_atomically(final: Path, fill: Callable[[Path], None]) -> None:
    """Write a directory's files into a temporary sibling, then swap it in (nothing half-written)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{time.time_ns()}"
    old = final.parent / f".{final.name}.old-{time.time_ns()}"
    tmp.mkdir()
    try:
        fill(tmp)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not final.exists():
            old.rename(final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def file_entries(directory: Path, names: Sequence[str], rows: Mapping[str, int]) -> dict[str, Any]:
    return {n: {"sha256": sha256_file(directory / n), "bytes": (directory / n).stat().st_size,
                **({"rows": rows[n]} if n in rows else {})} for n in names}
