#!/usr/bin/env bash
# Compile and install llama-cpp-python (the pin of the extra `llamacpp` in pyproject.toml) with
# the CMAKE_ARGS of tools/llamacpp_cmake_args.sh. The stamp file records those arguments: a
# missing stamp, a stamp with other arguments (an older build, e.g. -march=native) or a missing
# package means "build again". pip's wheel cache is bypassed, so a wheel built earlier with other
# flags is never reused. Used by the Makefile ($(LLAMA_STAMP)) and tools/run_tests.sh.
#
# The compile and the install are two steps: `--wheel` compiles a wheel into a folder without
# touching the environment's packages (pip's isolated build), so tools/run_tests.sh runs it beside
# the project's own install and the test suite, and installs it afterwards.
#
# usage: tools/install_llamacpp.sh PYTHON STAMP [WHEEL_DIR]  build unless the stamp is current;
#                                                            install WHEEL_DIR's wheel when it was
#                                                            compiled with the current flags
#        tools/install_llamacpp.sh --check PYTHON STAMP      exit 0 iff the stamp is current
#        tools/install_llamacpp.sh --wheel PYTHON WHEEL_DIR  compile only: the wheel and, in
#                                                            WHEEL_DIR/ARGS, the flags it was built with
#        tools/install_llamacpp.sh --pin PYTHON              print the pin (e.g. llama-cpp-python==0.3.36)
set -uo pipefail
mode=install
case "${1:-}" in --check) mode=check; shift ;; --wheel) mode=wheel; shift ;; --pin) mode=pin; shift ;; esac
PY=$1
here=$(cd "$(dirname "$0")" && pwd)
args=$(bash "$here/llamacpp_cmake_args.sh")
pin() {
    "$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llamacpp"][0])'
}
compile_wheel() {   # DIR: a fresh folder with one wheel and ARGS
    local dir=$1 p
    p=$(pin) || return 1
    rm -rf "$dir" && mkdir -p "$dir" || return 1
    echo "== compiling $p with CMAKE_ARGS=$args"
    CMAKE_ARGS="$args" "$PY" -m pip wheel -q --no-deps --no-cache-dir -w "$dir" "$p" || return 1
    printf '%s\n' "$args" >"$dir/ARGS"
}
if [ "$mode" = pin ]; then
    pin
    exit $?
fi
if [ "$mode" = wheel ]; then
    compile_wheel "$2"
    exit $?
fi
STAMP=$2
WHEELS=${3:-}

current() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$args" ] &&
        "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llama_cpp") is None)'
}
# the pure-Python rest of the extra: the packages of llama_cpp.server (the llm judge's server test)
server_deps_ok() {
    "$PY" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in
        ("fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings", "yaml")))'
}
install_server_deps() {
    "$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llamacpp"][1:]))' |
        xargs -r -d '\n' "$PY" -m pip install -q
}
if current && server_deps_ok; then exit 0; fi
if [ "$mode" = check ]; then exit 1; fi
if current; then install_server_deps; exit $?; fi

rm -f "$STAMP"
if [ -z "$WHEELS" ] || [ ! -f "$WHEELS/ARGS" ] || [ "$(cat "$WHEELS/ARGS")" != "$args" ]; then
    WHEELS=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-wheel.XXXXXX") || exit 1
    trap 'rm -rf "$WHEELS"' EXIT
    compile_wheel "$WHEELS" || exit 1
fi
wheel=$(ls "$WHEELS"/llama_cpp_python-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "no llama-cpp-python wheel in $WHEELS" >&2; exit 1; }
"$PY" -m pip uninstall -y -q llama-cpp-python >/dev/null 2>&1
"$PY" -m pip install -q "$wheel" || exit 1
install_server_deps || exit 1
printf '%s\n' "$args" >"$STAMP"
