"""Writing files so that a reader never sees half of one: :func:`write_atomic` (temporary sibling +
rename; the result tables of :func:`dpmv_lib.experiments.tables.write_table`) and the one JSON Lines
writer and reader (:func:`write_jsonl`, :func:`read_jsonl`: the frozen benchmark data, the judge's
degradation set)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (str: UTF-8, newlines untranslated) to ``path`` through a temporary file in
    the same directory, then rename it over ``path``: the file is either the old one or the new one,
    never partly written. Parent directories are created.

    Parameters
    ----------
    path : str or Path
        The file to write.
    data : bytes or str
        Its whole content.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(raw)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write ``rows`` as JSON Lines (one ``json.dumps(row, ensure_ascii=False, sort_keys=True)`` per
    line, ``\\n`` line ends, UTF-8), atomically (:func:`write_atomic`).

    Parameters
    ----------
    path : str or Path
        The file to write (parent directories are created).
    rows : iterable of mappings
        The records, in order; consumed once.

    Returns
    -------
    int
        The number of rows written.
    """
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows]
    write_atomic(path, "".join(lines))
    return len(lines)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file, in order (blank lines skipped).

    Raises
    ------
    OSError
        The file cannot be read.
    json.JSONDecodeError
        A line is not JSON.
    """
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
