"""The machine a result came from: CPU model, instruction-set flags and cores.

Recorded in the run manifest (:mod:`dpmv_lib.run`) and in every benchmark's machine info:
timings and native-backend outputs from machines with different instruction sets are not
comparable (a native kernel may be chosen, and crash, only on some instruction sets).
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

# The flags that select kernels in numpy/torch/llama.cpp, in the order they are reported (names
# as Linux's /proc/cpuinfo spells them; x86 first, then arm64).
RELEVANT_ISA = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f", "avx512dq",
                "avx512cd", "avx512bw", "avx512vl", "avx512vbmi", "avx512_vbmi2", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
                "asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")


def _proc_cpuinfo(path: Path) -> tuple[str | None, set[str] | None]:
    """(model name, flag set) from the first processor block of a Linux cpuinfo file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, None
    model, flags = None, None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if model is not None and flags is not None:
                break
            continue
        key, value = key.strip().lower(), value.strip()
        if model is None and key in ("model name", "cpu model", "hardware"):
            model = value
        elif flags is None and key in ("flags", "features"):
            flags = set(value.split())
    return model, flags


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """``{"model", "arch", "isa", "isa_checked", "cores", "cores_usable"}``.

    ``isa``: the flags of :data:`RELEVANT_ISA` the CPU reports (every other one of that list is
    absent), or None where there is no Linux ``/proc/cpuinfo`` (then ``isa_checked`` is empty)."""
    model, flags = _proc_cpuinfo(cpuinfo)
    if model is None and platform.system() == "Darwin":
        model = _sysctl("machdep.cpu.brand_string")   # macOS: the model only (isa stays None)
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"model": model or platform.processor() or None, "arch": platform.machine() or None,
            "isa": None if flags is None else [f for f in RELEVANT_ISA if f in flags],
            "isa_checked": [] if flags is None else list(RELEVANT_ISA),
            "cores": os.cpu_count(), "cores_usable": usable}


def cpu_summary(info: dict[str, Any] | None = None) -> str:
    """One line for messages: ``AMD EPYC (x86_64, 2 cores); ISA: sse4_2 avx ... amx_int8``."""
    info = info or cpu_info()
    isa = "unknown" if info["isa"] is None else (" ".join(info["isa"]) or "none of " + " ".join(RELEVANT_ISA))
    return f"{info['model'] or 'unknown CPU'} ({info['arch']}, {info['cores']} cores); ISA: {isa}"


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
