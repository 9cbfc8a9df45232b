#!/usr/bin/env bash
# `make test`: the pytest suite, with pytest's exit code 5 ("no tests collected") counted as success.
# It first prints `python -m dpmv_lib.run --status` (which committed results are stale; never fails).
#
# The `openai:` path is tested against a real OpenAI-compatible server, llama-cpp-python's own
# (extra `llamacpp`), which PyPI ships as source only. The first time (no install stamp, or one
# recording other CMAKE_ARGS: tools/install_llamacpp.sh), a wheel is compiled in the background
# from the start, beside the project's own install (INSTALL_CMD, set by the Makefile: `make
# install`, which keeps one core busy; on 2 cores the compile is usually over before the install),
# then beside the suite, which leaves out the server's tests. The wheel is installed after that
# pytest run, and the server's tests then run in a second one. When pytest arguments name paths,
# pytest runs once, after the wheel is installed.
#
# The suite runs over the usable cores (pytest-xdist, `-n`): PYTEST_WORKERS sets the count
# (default: nproc; 1 runs in one process); a `-n` in the pytest arguments wins.
#
# usage: [INSTALL_CMD='make install'] tools/run_tests.sh PYTHON LLAMA_STAMP [pytest args...]
set -uo pipefail
PY=$1
STAMP=$2
shift 2
# the usable cores (GNU nproc would otherwise answer OMP_NUM_THREADS, which is set below)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
workers=${PYTEST_WORKERS:-$cores}
case "$workers" in
    ''|*[!0-9]*|0) echo "PYTEST_WORKERS must be a whole number >= 1, got '$workers'" >&2; exit 2 ;;
esac
XDIST=()
if [ "$workers" -gt 1 ]; then
    XDIST=(-n "$workers")
    # one OpenMP pool per worker over its share of the cores (torch, OpenBLAS): two workers with a
    # pool of every core each spin against each other (the suite 379 -> 347 s on 2 cores)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / workers > 1 ? cores / workers : 1 ))}
fi
phase() {   # a step of the run, with the seconds since the start
    echo "== [${SECONDS} s] $*"
}
LLAMA_TESTS=tests/test_openai_server.py
# other tests that load llama-cpp-python: they run after the install too (before it the package is
# missing or an older build, so whether they pass or skip would depend on what was there)
AFTER_BUILD=(tests/test_build_flags.py::test_installed_library_was_built_with_these_flags)
LOG=${LLAMA_BUILD_LOG:-.venv/llamacpp-build.log}
WHEELS=${LLAMA_WHEEL_DIR:-.venv/llamacpp-wheel}     # the compiled wheel, until it is installed

finish() {  # exit with the combined status: 0 when every pytest run passed or collected nothing
    local rc
    phase "done"
    for rc in "$@"; do
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
    done
    exit 0
}

descendants() {  # every process under PID, each parent before its children
    local p
    for p in $(pgrep -P "$1" 2>/dev/null); do echo "$p"; descendants "$p"; done
}
stop_build() {   # the background compile and the pip and compiler processes under it
    # parents first: a child stopped before its parent would let the parent run on (the compile's
    # subshell would log "compiled in" for a compile that was stopped)
    # shellcheck disable=SC2046
    kill "$1" $(descendants "$1") 2>/dev/null
}
building=0
if ! bash tools/install_llamacpp.sh --check "$PY" "$STAMP"; then
    building=1
    pin=$(bash tools/install_llamacpp.sh --pin "$PY") || exit 1
    echo "== compiling $pin in the background (2 minutes on 2 idle cores, longer beside the install and the suite; log: $LOG)"
    (   # the log ends with the compile's wall time
        t0=$SECONDS
        bash tools/install_llamacpp.sh --wheel "$PY" "$WHEELS" >"$LOG" 2>&1
        rc=$?
        echo "== compiled in $((SECONDS - t0)) s (exit $rc)" >>"$LOG"
        exit "$rc"
    ) &
    bpid=$!
fi
if [ -n "${INSTALL_CMD:-}" ]; then
    bash -c "$INSTALL_CMD" || { [ "$building" = 1 ] && stop_build "$bpid"; exit 1; }
    phase "installed"
fi

# which committed result sets are current or stale against this checkout (information only:
# stale results never fail the tests; README "Where results go")
"$PY" -m dpmv_lib.run --status || echo "== (could not list the result status)"
echo

install_built() {
    phase "waiting for the llama-cpp-python compile to finish"
    if ! wait "$bpid"; then
        echo "== could not compile $pin (it needs a C/C++ compiler and CMake); end of $LOG:"
        tail -n 30 "$LOG"
        exit 1
    fi
    tail -n 1 "$LOG"
    bash tools/install_llamacpp.sh "$PY" "$STAMP" "$WHEELS" || { echo "== could not install $pin"; exit 1; }
    rm -rf "$WHEELS"
    phase "installed $pin"
}

if [ "$building" = 0 ]; then
    "$PY" -m pytest -q "${XDIST[@]}" "$@"
    finish $?
fi
for arg in "$@"; do
    if [ -e "${arg%%::*}" ]; then   # explicit test paths: the wheel first, then one pytest run
        install_built
        "$PY" -m pytest -q "${XDIST[@]}" "$@"
        finish $?
    fi
done

"$PY" -m pytest -q "${XDIST[@]}" --ignore="$LLAMA_TESTS" "${AFTER_BUILD[@]/#/--deselect=}" "$@"
rc1=$?
install_built
"$PY" -m pytest -q "$@" "$LLAMA_TESTS" "${AFTER_BUILD[@]}"
finish "$rc1" $?
