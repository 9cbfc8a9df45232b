#!/usr/bin/env bash
# Compile and install llama-cpp-python (the pin of the extra `llamacpp` in pyproject.toml) with
# the CMAKE_ARGS of tools/llamacpp_cmake_args.sh. The stamp file records those arguments: a
# missing stamp, a stamp with other arguments (an older build, e.g. -march=native) or a missing
# package means "build again". pip's wheel cache is bypassed, so a wheel built earlier with other
# flags is never reused. Used by the Makefile ($(LLAMA_STAMP)) and tools/run_tests.sh.
#
# usage: tools/install_llamacpp.sh PYTHON STAMP            build unless the stamp is current
#        tools/install_llamacpp.sh --check PYTHON STAMP    exit 0 iff the stamp is current
set -uo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
PY=$1
STAMP=$2
here=$(cd "$(dirname "$0")" && pwd)
args=$(bash "$here/llamacpp_cmake_args.sh")

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
if [ "$check" = 1 ]; then exit 1; fi
if current; then install_server_deps; exit $?; fi

pin=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llamacpp"][0])') || exit 1
rm -f "$STAMP"
echo "== compiling $pin with CMAKE_ARGS=$args"
"$PY" -m pip uninstall -y -q llama-cpp-python >/dev/null 2>&1
CMAKE_ARGS="$args" "$PY" -m pip install -q --no-cache-dir "$pin" || exit 1
install_server_deps || exit 1
printf '%s\n' "$args" >"$STAMP"
