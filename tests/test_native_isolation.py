"""Native-crash isolation (tests/helpers/native.py) and the machine record (dpmv_lib.common.machine).

A segfault in a native backend must fail one test with a message naming the backend, the
weights and the CPU, never take the suite down: here a child really crashes (SIGSEGV from a
NULL read, and an abort), and the helper turns that into pytest's failure with that message."""
from __future__ import annotations

import os

import pytest
from helpers.native import NativeRun, failure_message, run_native

from dpmv_lib.common.machine import RELEVANT_ISA, cpu_info, cpu_summary


def test_child_value_comes_back():
    run = run_native("import os\nemit({'pid': os.getpid(), 'x': [1, 2.5, 'a']})",
                     backend="test", weights="none")
    assert run.ok and run.signal_name is None and run.value["x"] == [1, 2.5, "a"]
    assert run.value["pid"] != os.getpid()                   # it ran in another process
    assert failure_message(run, "test", "none") is None


def test_forced_segfault_fails_one_test_with_a_clear_message():
    """A NULL-pointer read in the child (a real SIGSEGV): the test calling the helper fails with
    the backend, the weights, the signal, the CPU model and ISA flags, and faulthandler's trace."""
    code = "import ctypes\nprint('before the crash', flush=True)\nctypes.string_at(0)\nemit('unreachable')"
    with pytest.raises(pytest.fail.Exception) as info:
        run_native(code, backend="llamacpp", weights="q4_1 (packaged SmolLM2 GGUF)",
                   extra={"llama.cpp build": "CPU : AVX2 = 1"}, timeout=60)
    msg = str(info.value)
    print(msg)      # shown with -s: what a crash report looks like
    cpu = cpu_info()
    assert msg.startswith("llamacpp backend CRASHED natively: killed by SIGSEGV (exit code -11)")
    assert "weights: q4_1 (packaged SmolLM2 GGUF)" in msg and "llama.cpp build: CPU : AVX2 = 1" in msg
    assert f"CPU: {cpu_summary(cpu)}" in msg and (cpu["model"] or "unknown CPU") in msg
    assert all(f in msg for f in cpu["isa"] or [])
    assert "Fatal Python error: Segmentation fault" in msg and "string_at" in msg   # faulthandler
    # the same run, not raising: the result object says what happened
    run = run_native(code, backend="llamacpp", weights="q4_1", check=False, timeout=60)
    assert run.returncode == -11 and run.signal_name == "SIGSEGV" and not run.ok
    assert run.value is None and "before the crash" in run.stdout


def test_abort_error_and_timeout_are_told_apart():
    abort = run_native("import os\nos.abort()", backend="b", weights="w", check=False, timeout=60)
    assert abort.signal_name == "SIGABRT" and "killed by SIGABRT" in failure_message(abort, "b", "w")
    err = run_native("raise ValueError('bad weights file')", backend="b", weights="w", check=False)
    msg = failure_message(err, "b", "w")
    assert err.returncode == 1 and err.signal_name is None
    assert "exited with code 1" in msg and "ValueError: bad weights file" in msg and "CRASHED" not in msg
    slow = run_native("import time\ntime.sleep(30)", backend="b", weights="w", check=False, timeout=1)
    assert slow.returncode is None and "did not finish within 1 s" in failure_message(slow, "b", "w")
    with pytest.raises(pytest.fail.Exception, match="exited with code 1"):
        run_native("raise SystemExit(1)", backend="b", weights="w")


def test_signal_names_of_the_result_object():
    assert NativeRun(-6, "", "").signal_name == "SIGABRT"
    assert NativeRun(0, "", "").ok and NativeRun(2, "", "").signal_name is None
    assert NativeRun(None, "", "", timeout_s=5).signal_name is None


# ---- dpmv_lib.common.machine ----------------------------------------------------------------------------
def test_cpu_info_reads_model_and_isa_flags(tmp_path):
    xeon = tmp_path / "cpuinfo"
    xeon.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "flags\t\t: fpu sse4_2 avx avx2 fma f16c bmi2 avx512f avx512bw avx512vl avx512_bf16 "
                    "avx512_vnni amx_bf16 amx_tile amx_int8\n\nprocessor\t: 1\nmodel name\t: other\n")
    info = cpu_info(xeon)
    assert info["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["isa"] == ["sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw",
                           "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]
    assert info["isa_checked"] == list(RELEVANT_ISA) and info["cores"] == os.cpu_count()
    assert "ISA: sse4_2 avx avx2" in cpu_summary(info) and cpu_summary(info).endswith("amx_int8")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp sve i8mm\nCPU part\t: 0xd40\n")
    assert cpu_info(arm)["isa"] == ["asimd", "asimddp", "i8mm", "sve"]
    missing = cpu_info(tmp_path / "none")
    assert missing["isa"] is None and missing["isa_checked"] == [] and "ISA: unknown" in cpu_summary(missing)


def test_cpu_info_of_this_machine():
    info = cpu_info()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith(("flags", "Features"))).split(":")[1].split()
        assert info["isa"] == [f for f in RELEVANT_ISA if f in flags]
    assert info["cores"] >= info["cores_usable"] >= 1
