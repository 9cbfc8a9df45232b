"""Run a native backend's calls in a child process: a crash fails ONE test, never the suite.

    run = run_native("import llama_cpp\\nemit(llama_cpp.llama_print_system_info().decode())",
                     backend="llamacpp", weights="none (loading the library)")
    run.value        # what the child passed to emit() (JSON)

The child runs ``python -X faulthandler -c CODE`` from the project root with this checkout and
tests/ first on its path; ``emit(obj)`` hands one JSON value back. When the child is killed by a
signal (a segfault in llama.cpp, say), exits with an error or runs past ``timeout``, the calling
test fails (``pytest.fail``) with a message naming the backend, the weights, the CPU model and
ISA flags, and the end of the child's stderr (faulthandler's traceback shows the Python line of
the native call).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest

from dpmv_lib.common.machine import cpu_summary

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
MARK = "@@dpmv-native-result@@"
_PRELUDE = ("import json as _json, sys as _sys\n"
            "def emit(obj):\n"
            f"    _sys.stdout.write({MARK!r} + _json.dumps(obj) + '\\n')\n"
            "    _sys.stdout.flush()\n")


@dataclass(frozen=True)
class NativeRun:
    """What a child run gave: exit code (negative: killed by that signal; None: timed out),
    its output, and the value it emitted (None when it emitted nothing)."""

    returncode: int | None
    stdout: str
    stderr: str
    value: Any = None
    timeout_s: float | None = None

    @property
    def signal_name(self) -> str | None:
        """"SIGSEGV" etc. when the child was killed by a signal."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def failure_message(run: NativeRun, backend: str, weights: str,
                    extra: Mapping[str, str] | None = None, tail: int = 25) -> str | None:
    """The message a failed child run fails its test with (None when the run succeeded)."""
    if run.ok:
        return None
    if run.returncode is None:
        what = f"did not finish within {run.timeout_s:g} s (killed)"
    elif run.signal_name:
        what = f"CRASHED natively: killed by {run.signal_name} (exit code {run.returncode})"
    else:
        what = f"failed: the child process exited with code {run.returncode}"
    lines = [f"{backend} backend {what}", f"  weights: {weights}", f"  CPU: {cpu_summary()}"]
    lines += [f"  {k}: {v}" for k, v in (extra or {}).items()]
    err = run.stderr.strip().splitlines()[-tail:]
    lines += ["  end of the child's stderr:"] + [f"    {x}" for x in err or ["(empty)"]]
    return "\n".join(lines)


def run_native(code: str, *, backend: str, weights: str, timeout: float = 600.0,
               extra: Mapping[str, str] | None = None, check: bool = True,
               env: Mapping[str, str] | None = None) -> NativeRun:
    """Run ``code`` in a fresh Python process (see the module docstring); with ``check`` (the
    default) a crash, error or timeout fails the calling test via :func:`failure_message`."""
    child_env = dict(os.environ, **(env or {}))
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(TESTS)] + [p for p in [child_env.get("PYTHONPATH")] if p])
    child_env.setdefault("HF_HUB_OFFLINE", "1")
    child_env.setdefault("TRANSFORMERS_OFFLINE", "1")
    cmd = [sys.executable, "-X", "faulthandler", "-c", _PRELUDE + textwrap.dedent(code)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=child_env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        def text(b: bytes | str | None) -> str:
            return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
        run = NativeRun(None, text(exc.stdout), text(exc.stderr), None, timeout)
    else:
        values = [line[len(MARK):] for line in proc.stdout.splitlines() if line.startswith(MARK)]
        run = NativeRun(proc.returncode, proc.stdout, proc.stderr,
                        json.loads(values[-1]) if values else None, timeout)
    if check and not run.ok:
        pytest.fail(failure_message(run, backend, weights, extra), pytrace=False)
    return run
