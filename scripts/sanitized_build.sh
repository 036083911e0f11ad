#!/usr/bin/env bash
# The one instrumented build that scripts/fuzz.sh, scripts/sanitize.sh and the CI slice of
# scripts/test.sh share: clang, AddressSanitizer + UBSan (-fno-sanitize-recover) and libFuzzer's
# coverage (-fsanitize=fuzzer-no-link) on every target, with line tables, in build/sanitize.
# Builds only the targets named (onnxtrain_tests, _C, onnxtrain_cli, fuzz_model,
# fuzz_checkpoint, fuzz_function_text); ccache keeps rebuilds from fresh clones cheap.
# ONNXTRAIN_SANITIZE_OPT picks the optimization: -O1 (the default: fuzzing runs faster) or -O0
# (the CI slice: a third of the compile time, measured on src/ops/cpu/cast.cc, 5.7 s against
# 16.7 s of CPU).
#
#   scripts/sanitized_build.sh onnxtrain_tests fuzz_model
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build/sanitize
flags="${ONNXTRAIN_SANITIZE_OPT:--O1} -gline-tables-only"
if [ ! -f "$build/build.ninja" ] || ! grep -q "^CMAKE_CXX_FLAGS_RELWITHDEBINFO:STRING=$flags\$" "$build/CMakeCache.txt"; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DONNXTRAIN_SANITIZE=address,undefined \
    -DONNXTRAIN_FUZZ=ON -DONNXTRAIN_NATIVE=OFF -DONNXTRAIN_BUILD_TESTS=ON -DONNXTRAIN_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$root/.venv/bin/python" > /dev/null
fi
# Fresh clones sit in other folders: ccache may match their objects when paths are relative
# to the root and the build folder is not part of the hash.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake --build "$build" --target "$@" -- -j"${ONNXTRAIN_BUILD_JOBS:-2}"
