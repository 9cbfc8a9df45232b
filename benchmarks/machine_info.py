"""What every benchmark records about the machine it ran on (shared by benchmarks/bench_*.py)."""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # this checkout's dpmv_lib
from dpmv_lib.common.machine import cpu_info, cpu_summary  # noqa: E402

STACK = ("numpy", "pandas", "scikit-learn", "torch", "transformers", "sentence-transformers",
         "pyarrow", "papermill")


def loadavg() -> list[float] | None:
    """1/5/15-minute load averages (the cores may be shared with other jobs)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict:
    """CPU (model, ISA flags, cores), Python, platform, versions of the stack and the load at the
    call: timings from CPUs with different instruction sets are not comparable."""
    vers = {}
    for p in STACK:
        try:
            vers[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            vers[p] = None
    return {"cpus": os.cpu_count(), "cpu": cpu_info(), "python": platform.python_version(),
            "platform": platform.platform(),
            "packages": vers, "loadavg_at_start": loadavg()}


def describe(m: dict) -> str:
    """The machine line of a results table: CPU model, arch, cores and ISA flags."""
    return cpu_summary(m["cpu"]) if m.get("cpu") else f"{m['cpus']} CPUs (ISA not recorded)"
