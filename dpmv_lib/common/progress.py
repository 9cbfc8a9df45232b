"""A progress log for long runs: lines with done/total, rate and ETA appended to the file named by
``DPMV_PROGRESS_LOG`` (the notebook runner sets it to ``<results_dir>/progress.log``), so a
background run can be followed with ``tail -f`` while papermill keeps notebooks free of bars."""
from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

ENV = "DPMV_PROGRESS_LOG"


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ProgressLog:
    """``update(n)`` after each unit of work; a line is written at most every ``every`` seconds
    (and on ``close``). Without a path (argument or ``DPMV_PROGRESS_LOG``) it does nothing."""

    def __init__(self, desc: str, total: int, *, path: str | Path | None = None, every: float = 30.0,
                 clock=time.monotonic) -> None:
        self.path = _log_path(path)
        self.desc, self.total, self.every, self.clock = desc, int(total), float(every), clock
        self.done = 0
        self.t0 = self.last = clock()
        if self.path is not None:
            self._write(f"start, {self.total} to do")

    def _write(self, text: str) -> None:
        _append(self.path, self.desc, text)  # type: ignore[arg-type]

    def line(self) -> str:
        """``done/total (pct), rate/s, elapsed, ETA``: the rate is the mean since the start."""
        el = self.clock() - self.t0
        rate = self.done / el if el > 0 else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = _hms((self.total - self.done) / rate) if rate > 0 else "?"
        return f"{self.done}/{self.total} ({pct:.1f}%), {rate:.2f}/s, elapsed {_hms(el)}, ETA {eta}"

    def update(self, n: int = 1) -> None:
        self.done += int(n)
        if self.path is not None and self.clock() - self.last >= self.every:
            self.last = self.clock()
            self._write(self.line())

    def close(self) -> None:
        if self.path is not None:
            self._write("done " + self.line())
            self.path = None


def note(desc: str, text: str, *, path: str | Path | None = None) -> None:
    """One line ``<time> <desc>: <text>`` in the progress log (nothing without one), e.g. how many
    cores a long generation run got."""
    target = _log_path(path)
    if target is not None:
        _append(target, desc, text)


def _log_path(path: str | Path | None) -> Path | None:
    """``path``, else ``$DPMV_PROGRESS_LOG``, with its directory created; None without either."""
    target = path if path is not None else os.environ.get(ENV)
    if not target:
        return None
    out = Path(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _append(path: Path, desc: str, text: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{stamp} {desc}: {text}\n")
