#!/usr/bin/env bash
# The CMAKE_ARGS for compiling llama-cpp-python: the one place the Makefile and
# tools/run_tests.sh take them from. A CMAKE_ARGS already set in the environment wins.
#
# On x86-64 (not macOS): a portable AVX2 build (Haswell / Zen 1 or newer), never -march=native.
# With GGML_NATIVE=ON (llama.cpp's default) a build on a CPU with AMX-INT8 + AVX512-VNNI
# compiles ggml's AMX extra buffer type, which repacks Q4_0/Q4_1/Q8_0/K-quant weights and runs
# their matrix products in ggml_backend_amx_mul_mat; with the packaged Q4_1 SmolLM2 this
# segfaulted on the first decode (upstream: ggml-org/llama.cpp#20824). The same ISA
# everywhere also keeps the kernels, and so the numbers, comparable between machines.
# Elsewhere (arm64, macOS) llama.cpp's defaults are kept.
#
# Everywhere: llama.cpp's common library, which llama-cpp-python builds but never loads, is left
# out (tools/llamacpp_no_common.cmake; it halves the compile). The hook is named by its
# absolute path, so the install stamp of a venv records where its checkout was; scikit-build-core
# splits CMAKE_ARGS at spaces, so a checkout whose path has one builds the common library as before.
if [ -n "${CMAKE_ARGS:-}" ]; then
    printf '%s\n' "$CMAKE_ARGS"
    exit 0
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
args="-DLLAVA_BUILD=OFF"
case "$here" in
    *[[:space:]]*) ;;
    *) args="$args -DCMAKE_PROJECT_llama.cpp_INCLUDE=$here/llamacpp_no_common.cmake" ;;
esac
case "$(uname -s)/$(uname -m)" in
    Darwin/*) ;;
    */x86_64|*/amd64)
        args="$args -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON"
        args="$args -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF"
        args="$args -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF"
        args="$args -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
esac
printf '%s\n' "$args"
