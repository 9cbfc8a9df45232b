"""What every benchmark records about the machine it ran on (shared by benchmarks/bench_*.py)."""
from __future__ import annotations

import os
import platform
from importlib import metadata

STACK = ("numpy", "pandas", "scikit-learn", "torch", "transformers", "sentence-transformers",
         "pyarrow", "papermill")


def loadavg() -> list[float] | None:
    """1/5/15-minute load averages (the cores may be shared with other jobs)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict:
    """CPU count, Python, platform, versions of the stack and the load at the call."""
    vers = {}
    for p in STACK:
        try:
            vers[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            vers[p] = None
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "packages": vers, "loadavg_at_start": loadavg()}
