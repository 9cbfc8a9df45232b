"""How llama-cpp-python is compiled: one place for the flags, a portable x86-64 build
without AMX, and a rebuild whenever the install stamp records other flags."""
from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.native import run_native

from dpmv_lib.common.paths import project_root

ROOT = project_root()
ARGS_SH = ROOT / "tools" / "llamacpp_cmake_args.sh"
INSTALL_SH = ROOT / "tools" / "install_llamacpp.sh"
X86_LINUX = platform.system() == "Linux" and platform.machine() in ("x86_64", "amd64")


def cmake_args(**env: str) -> str:
    e = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"} | env
    return subprocess.run(["bash", str(ARGS_SH)], env=e, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not X86_LINUX, reason="the portable flag set is for x86-64 Linux")
def test_x86_build_is_portable_avx2_without_amx():
    args = cmake_args().split()
    assert "-DLLAVA_BUILD=OFF" in args and "-DGGML_NATIVE=OFF" in args
    for on in ("SSE42", "AVX", "AVX2", "FMA", "F16C", "BMI2"):
        assert f"-DGGML_{on}=ON" in args
    for off in ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX512_VBMI", "AVX_VNNI",
                "AMX_TILE", "AMX_INT8", "AMX_BF16"):
        assert f"-DGGML_{off}=OFF" in args
    assert not any(a.endswith("NATIVE=ON") or "march=native" in a for a in args)


def test_the_common_library_is_left_out():
    """llama-cpp-python forces LLAMA_BUILD_COMMON ON and never loads that library; a hook run at the
    end of llama.cpp's project() call turns it off again (half the compile)."""
    args = cmake_args().split()
    hook = [a.partition("=")[2] for a in args if a.startswith("-DCMAKE_PROJECT_llama.cpp_INCLUDE=")]
    cmake = ROOT / "tools" / "llamacpp_no_common.cmake"
    assert hook == ([] if any(c.isspace() for c in str(ROOT)) else [str(cmake)])   # see the next test
    assert 'set(LLAMA_BUILD_COMMON OFF CACHE BOOL' in cmake.read_text() and "FORCE)" in cmake.read_text()


def test_a_checkout_path_with_a_space_keeps_the_common_library(tmp_path):
    """scikit-build-core splits CMAKE_ARGS at spaces: no hook path that would be cut in two."""
    tools = tmp_path / "a checkout" / "tools"
    tools.mkdir(parents=True)
    (tools / ARGS_SH.name).write_text(ARGS_SH.read_text())
    e = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
    out = subprocess.run(["bash", str(tools / ARGS_SH.name)], env=e, capture_output=True, text=True, check=True).stdout
    assert "-DLLAVA_BUILD=OFF" in out and "CMAKE_PROJECT" not in out


def test_cmake_args_from_the_environment_win():
    assert cmake_args(CMAKE_ARGS="-DGGML_CUDA=on") == "-DGGML_CUDA=on"


def test_one_place_for_the_flags():
    """The Makefile and tools/run_tests.sh install through tools/install_llamacpp.sh, which takes
    its flags from tools/llamacpp_cmake_args.sh; neither spells a flag of its own."""
    make, run = (ROOT / "Makefile").read_text(), (ROOT / "tools" / "run_tests.sh").read_text()
    for text in (make, run):
        assert "tools/install_llamacpp.sh" in text and "-DGGML" not in text and "-DLLAVA" not in text
    assert "llamacpp_cmake_args.sh" in INSTALL_SH.read_text()


def stand_in_python(root: Path, modules: tuple[str, ...]) -> str:
    """An interpreter that sees only the standard library and empty stand-ins for ``modules``
    (``-S``: no site-packages), so the check does not depend on what this venv has installed,
    or on a llama-cpp-python build that tools/run_tests.sh runs beside the suite."""
    site = root / "site"
    for m in modules:
        (site / m).mkdir(parents=True)
        (site / m / "__init__.py").write_text("")
    py = root / "python"
    py.write_text(f'#!/usr/bin/env bash\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    py.chmod(0o755)
    return str(py)


SERVER_DEPS = ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "yaml")


def test_stamp_with_other_flags_means_rebuild(tmp_path):
    def check(stamp: Path, py: str) -> int:
        return subprocess.run(["bash", str(INSTALL_SH), "--check", py, str(stamp)], cwd=ROOT,
                              capture_output=True).returncode
    missing, old, current = tmp_path / "missing", tmp_path / "old", tmp_path / "current"
    old.write_text("-DLLAVA_BUILD=OFF\n")                 # an older build's flags: -march=native
    current.write_text(cmake_args() + "\n")
    full = stand_in_python(tmp_path / "full", ("llama_cpp",) + SERVER_DEPS)
    no_llama = stand_in_python(tmp_path / "no_llama", SERVER_DEPS)
    no_server = stand_in_python(tmp_path / "no_server", ("llama_cpp",) + SERVER_DEPS[:-1])
    assert check(missing, full) == 1 and check(old, full) == 1
    assert check(current, full) == 0                      # current flags AND the packages installed
    assert check(current, no_llama) == 1 and check(current, no_server) == 1


def test_installed_library_was_built_with_these_flags():
    """Where this environment's llama-cpp-python was installed by tools/install_llamacpp.sh with
    the current flags (its stamp says so), the library itself reports AVX2 and no AVX-512/AMX."""
    stamp = Path(sys.prefix) / ".installed-llamacpp"
    if not X86_LINUX or not stamp.exists() or stamp.read_text().strip() != cmake_args():
        pytest.skip("llama-cpp-python here was not built by tools/install_llamacpp.sh with the x86 flags")
    if os.environ.get("CMAKE_ARGS"):
        pytest.skip("CMAKE_ARGS is set: the build flags are the user's")
    run = run_native("import llama_cpp\nemit(llama_cpp.llama_print_system_info().decode())",
                     backend="llamacpp", weights="none (loading the library)", timeout=300)
    feats = {k.split(":")[-1].strip(): v.strip() for k, _, v in
             (p.partition("=") for p in run.value.split("|")) if v}
    assert feats.get("AVX2") == "1" and feats.get("FMA") == "1" and feats.get("F16C") == "1"
    assert "AVX512" not in feats and "AMX_INT8" not in feats and "AVX512_VNNI" not in feats
    libs = {p.name.split(".so")[0] for p in
            (Path(importlib.util.find_spec("llama_cpp").submodule_search_locations[0]) / "lib").glob("*.so*")}
    assert {"libllama", "libggml", "libggml-cpu"} <= libs and "libllama-common" not in libs, libs
