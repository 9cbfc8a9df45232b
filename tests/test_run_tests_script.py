"""tools/run_tests.sh runs the suite over the usable cores (pytest-xdist).

A stand-in Python records what the script asks pytest for; the llama.cpp stamp is made current,
so the script takes its one-pytest-run branch, or removed, so it "builds" in the background."""
from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import ast
import re
from pathlib import Path

import pytest

from dpmv_lib.common.paths import project_root

ROOT = project_root()


def usable_cores() -> int:
    """GNU nproc, without the OpenMP variables it would answer instead (run_tests.sh sets one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
    return int(subprocess.run(["nproc"], capture_output=True, text=True, check=True, env=env).stdout)


@pytest.fixture
def fake(tmp_path: Path):
    log = tmp_path / "calls.txt"
    py = tmp_path / "python"
    # "pip wheel ... -w DIR" leaves a wheel in DIR, as the compile would
    py.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\necho "${{OMP_NUM_THREADS:-unset}}" >> {log}.omp\n'
                  'if [ "$2 $3" = "pip wheel" ]; then echo $$ > ' f'{log}.compile_pid\n'
                  'sleep "${FAKE_COMPILE_S:-0}"\n'
                  'while [ $# -gt 0 ]; do\n'
                  '  if [ "$1" = -w ]; then touch "$2/llama_cpp_python-0-py3-none-any.whl"; fi; shift\n'
                  'done; exit "${FAKE_COMPILE_RC:-0}"; fi\nexit 0\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    stamp = tmp_path / "stamp"
    args = subprocess.run(["bash", str(ROOT / "tools" / "llamacpp_cmake_args.sh")], capture_output=True, text=True,
                          check=True, env={k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}).stdout
    stamp.write_text(args)

    def run(*pytest_args: str, workers: str | None = None, built: bool = True, install: str | None = None,
            pytest_only: bool = True, omp: str | None = None,
            compile_s: float = 0, compile_rc: int = 0) -> tuple[subprocess.CompletedProcess, list[str]]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("CMAKE_ARGS", "PYTEST_WORKERS", "INSTALL_CMD", "OMP_NUM_THREADS")}
        if omp is not None:
            env["OMP_NUM_THREADS"] = omp
        env["FAKE_COMPILE_S"], env["FAKE_COMPILE_RC"] = str(compile_s), str(compile_rc)
        env["LLAMA_BUILD_LOG"] = str(tmp_path / "build.log")
        env["LLAMA_WHEEL_DIR"] = str(tmp_path / "wheel")
        if install is not None:
            env["INSTALL_CMD"] = install.format(log=log)
        if workers is not None:
            env["PYTEST_WORKERS"] = workers
        if not built:
            stamp.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        Path(f"{log}.omp").unlink(missing_ok=True)
        r = subprocess.run(["bash", "tools/run_tests.sh", str(py), str(stamp), *pytest_args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
        calls = log.read_text().splitlines() if log.exists() else []
        return r, [c for c in calls if c.startswith("-m pytest") or not pytest_only]

    return run


def test_the_suite_runs_over_the_given_workers(fake):
    r, calls = fake("-x", workers="3")
    assert r.returncode == 0, r.stderr
    assert calls == ["-m pytest -q -n 3 -x"]


def test_each_worker_gets_its_share_of_the_cores_for_openmp(fake, tmp_path):
    """Two workers with an OpenMP pool of every core each would spin against each other."""
    omp = tmp_path / "calls.txt.omp"
    n = usable_cores()
    fake(workers="2")
    assert set(omp.read_text().split()) == {str(max(1, n // 2))}
    fake(workers="1")
    assert set(omp.read_text().split()) == {"unset"}
    fake(workers="2", omp="3")                                        # the user's setting wins
    assert set(omp.read_text().split()) == {"3"}


def test_one_worker_runs_in_one_process_and_a_given_n_wins(fake):
    r, calls = fake(workers="1")
    assert r.returncode == 0 and calls == ["-m pytest -q"]
    r, calls = fake("-n", "0", workers="2")
    assert r.returncode == 0 and calls == ["-m pytest -q -n 2 -n 0"]   # the last -n counts for pytest


def test_the_default_is_the_usable_cores(fake):
    r, calls = fake()
    n = usable_cores()
    assert r.returncode == 0
    assert calls == (["-m pytest -q"] if n == 1 else [f"-m pytest -q -n {n}"])


@pytest.mark.parametrize("bad", ["0", "two", "-1", "2.5"])
def test_a_bad_worker_count_is_refused_before_pytest(fake, bad):
    r, calls = fake(workers=bad)
    assert r.returncode == 2 and calls == []
    assert "PYTEST_WORKERS must be a whole number >= 1" in r.stderr


def test_test_ids_do_not_depend_on_the_hash_seed():
    """pytest-xdist workers collect separately and must agree on every test id: an id built from a
    set's repr follows the hash seed and breaks the run at random (seen with the Ledger
    conformance suite). Two collections under different seeds must list the same ids."""
    def ids(seed: str) -> list[str]:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "tests"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return [ln for ln in r.stdout.splitlines() if "::" in ln]
    a, b = ids("1"), ids("2")
    assert len(a) > 1000
    assert a == b, sorted(set(a) ^ set(b))[:10]


def after_build() -> list[str]:
    text = (ROOT / "tools" / "run_tests.sh").read_text()
    return re.search(r"AFTER_BUILD=\(([^)]*)\)", text).group(1).split()


def test_without_the_build_its_tests_wait_for_it(fake):
    """No stamp, and the compile still running after the install: it runs beside the suite, which
    leaves out every test that loads llama-cpp-python; those run in a second pytest once the
    wheel is built and installed."""
    r, calls = fake(workers="2", built=False, compile_s=3)
    assert r.returncode == 0, r.stdout + r.stderr
    later = after_build()
    assert calls == ["-m pytest -q -n 2 --ignore=tests/test_openai_server.py "
                     + " ".join(f"--deselect={t}" for t in later),
                     "-m pytest -q tests/test_openai_server.py " + " ".join(later)]


def test_every_test_that_loads_llama_cpp_runs_after_the_build():
    """A test elsewhere that imports llama_cpp would meet a half-installed package during the
    background build (CI failed once on such a race): each must be listed in AFTER_BUILD."""
    loads = re.compile(r"import llama_cpp|importorskip\(\s*[\"']llama_cpp[\"']")
    found = set()
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name in ("test_openai_server.py", Path(__file__).name):     # this file: the pattern
            continue
        src = path.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") \
                    and loads.search(ast.get_source_segment(src, node)):
                found.add(f"tests/{path.name}::{node.name}")
    assert found and found == set(after_build())


def test_the_compile_starts_before_the_install(fake, tmp_path):
    """No stamp: the wheel compiles in the background while INSTALL_CMD (the project's install)
    runs; still compiling after it, the wheel is installed after the first pytest run, and its
    folder is removed."""
    # the install waits until the compile has begun (it would time out if the compile came later)
    r, calls = fake(workers="2", built=False, install="until grep -q 'pip wheel' {log}; do sleep 0.05; done; "
                                                      "echo INSTALL >> {log}", pytest_only=False, compile_s=3)
    assert r.returncode == 0, r.stdout + r.stderr
    compile_at = next(i for i, c in enumerate(calls) if c.startswith("-m pip wheel"))
    install_at, first_pytest = calls.index("INSTALL"), next(i for i, c in enumerate(calls) if c.startswith("-m pytest"))
    assert compile_at < install_at < first_pytest
    wheel_install = next(i for i, c in enumerate(calls) if c.startswith("-m pip install -q ")
                         and c.endswith("llama_cpp_python-0-py3-none-any.whl"))
    assert first_pytest < wheel_install < len(calls) - 1
    assert calls[-1].startswith("-m pytest -q tests/test_openai_server")
    assert not (tmp_path / "wheel").exists()
    assert "== compiled in" in (tmp_path / "build.log").read_text()


def test_a_failed_install_stops_the_compile_and_runs_no_test(fake, tmp_path):
    """The install fails once the compile is under way (it waits for pip's stand-in to start, never
    for a fixed time); the script stops the compile, whose stand-in would otherwise sleep 600 s."""
    r, calls = fake(workers="2", built=False, install="until [ -s {log}.compile_pid ]; do sleep 0.05; done; exit 3",
                    pytest_only=False, compile_s=600)
    assert r.returncode == 1 and not [c for c in calls if c.startswith("-m pytest")]
    log = tmp_path / "build.log"                                   # the compile never came to its end
    assert not log.exists() or "== compiled in" not in log.read_text()
    pid = int((tmp_path / "calls.txt.compile_pid").read_text())   # and pip's stand-in is gone
    if not exited_within(pid, 120):
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the compile outlived a failed install")


def exited_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` (not a child of this one) ends within ``seconds``: waits on a pidfd,
    which is readable once the process has exited (a zombie counts as exited)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def test_with_the_build_current_the_install_still_runs(fake):
    r, calls = fake(workers="2", install="echo INSTALL >> {log}", pytest_only=False)
    assert r.returncode == 0 and "INSTALL" in calls and not [c for c in calls if "pip wheel" in c]
    assert calls.index("INSTALL") < next(i for i, c in enumerate(calls) if c.startswith("-m pytest"))


def test_a_failed_compile_still_runs_the_suite_then_fails(fake, tmp_path):
    r, calls = fake(workers="2", built=False, compile_rc=1,
                    install=f"until grep -q 'compiled in' {tmp_path / 'build.log'}; do sleep 0.05; done")
    assert r.returncode == 1 and "could not compile" in r.stdout
    assert len(calls) == 1 and calls[0].startswith("-m pytest -q -n 2 --ignore=tests/test_openai_server.py")
