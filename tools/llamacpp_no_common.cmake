# Run by CMake at the end of llama.cpp's own project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, set in
# tools/llamacpp_cmake_args.sh), that is after llama-cpp-python's CMakeLists.txt has forced
# LLAMA_BUILD_COMMON ON and before llama.cpp reads it. llama-cpp-python loads only libllama and
# libggml*; llama.cpp's common library (argument parsing, chat templates, downloads, an HTTP
# client) is for its command-line tools. Leaving it out halves the compile (380 -> 183 s
# of CPU time, 196 -> 98 s on 2 idle cores, measured with 0.3.36).
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
