#!/usr/bin/env bash
# `make test`: the pytest suite, with pytest's exit code 5 ("no tests collected") counted as success.
# It first prints `python -m dpmv_lib.run --status` (which committed results are stale; never fails).
#
# The llama.cpp backend is tested for real, so the suite needs llama-cpp-python (extra `llamacpp`),
# which PyPI ships as source only. The first time (no install stamp, or one recording other
# CMAKE_ARGS: tools/install_llamacpp.sh), it is compiled in the background while the rest of the
# suite runs (sharing the cores with it), and the backend's tests run once it is
# installed. When pytest arguments name paths, the build runs first and pytest runs once.
#
# The suite runs over the usable cores (pytest-xdist, `-n`; issue 30): PYTEST_WORKERS sets the
# count (default: nproc; 1 runs in one process); a `-n` in the pytest arguments wins.
#
# usage: tools/run_tests.sh PYTHON LLAMA_STAMP [pytest args...]
set -uo pipefail
PY=$1
STAMP=$2
shift 2
workers=${PYTEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
case "$workers" in
    ''|*[!0-9]*|0) echo "PYTEST_WORKERS must be a whole number >= 1, got '$workers'" >&2; exit 2 ;;
esac
XDIST=()
if [ "$workers" -gt 1 ]; then XDIST=(-n "$workers"); fi
LLAMA_TESTS=tests/test_llamacpp_backend.py
# other tests that load llama-cpp-python: they run after the build too (during it the package can
# be half installed, so whether they pass or skip would depend on the build's timing)
AFTER_BUILD=(tests/test_build_flags.py::test_installed_library_was_built_with_these_flags
             tests/test_playground.py::test_smollm2_responds_when_installed)
LOG=${LLAMA_BUILD_LOG:-.venv/llamacpp-build.log}

finish() {  # exit with the combined status: 0 when every pytest run passed or collected nothing
    local rc
    for rc in "$@"; do
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
    done
    exit 0
}

# which committed result sets are current or stale against this checkout (information only:
# stale results never fail the tests; README "Where results go")
"$PY" -m dpmv_lib.run --status || echo "== (could not list the result status)"
echo

if bash tools/install_llamacpp.sh --check "$PY" "$STAMP"; then
    "$PY" -m pytest -q "${XDIST[@]}" "$@"
    finish $?
fi

pin=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llamacpp"][0])') || exit 1
build() {   # the log ends with the build's wall time
    local t0=$SECONDS rc
    bash tools/install_llamacpp.sh "$PY" "$STAMP" >"$LOG" 2>&1
    rc=$?
    echo "== built in $((SECONDS - t0)) s (exit $rc)" >>"$LOG"
    return "$rc"
}
build_failed() {
    echo "== could not install $pin (it compiles llama.cpp: needs a C/C++ compiler and CMake); end of $LOG:"
    tail -n 30 "$LOG"
    exit 1
}

for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then   # explicit test paths: build first, then one pytest run
        echo "== compiling $pin (3-4 minutes on 2 idle cores; log: $LOG)"
        build || build_failed
        "$PY" -m pytest -q "${XDIST[@]}" "$@"
        finish $?
    fi
done

echo "== compiling $pin in the background (3-4 minutes on 2 idle cores, longer beside the suite; log: $LOG)"
build &
bpid=$!
"$PY" -m pytest -q "${XDIST[@]}" --ignore="$LLAMA_TESTS" "${AFTER_BUILD[@]/#/--deselect=}" "$@"
rc1=$?
echo "== waiting for the llama-cpp-python build to finish"
wait "$bpid" || build_failed
tail -n 1 "$LOG"
"$PY" -m pytest -q "$@" "$LLAMA_TESTS" "${AFTER_BUILD[@]}"
finish "$rc1" $?
