#!/usr/bin/env bash
# The one instrumented build that scripts/fuzz.sh, scripts/sanitize.sh and the CI slice of
# scripts/test.sh share: clang, AddressSanitizer + UBSan (-fno-sanitize-recover) and libFuzzer's
# coverage (-fsanitize=fuzzer-no-link) on every target, -O1 with line tables, in build/sanitize.
# Builds only the targets named (onnxtrain_tests, _C, fuzz_model, fuzz_checkpoint,
# fuzz_function_text, ...); ccache keeps rebuilds from fresh clones cheap.
#
#   scripts/sanitized_build.sh onnxtrain_tests fuzz_model
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build/sanitize
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DONNXTRAIN_SANITIZE=address,undefined \
    -DONNXTRAIN_FUZZ=ON -DONNXTRAIN_NATIVE=OFF -DONNXTRAIN_BUILD_TESTS=ON -DONNXTRAIN_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$root/.venv/bin/python" > /dev/null
fi
# Fresh clones sit in other folders: ccache may match their objects when paths are relative
# to the root and the build folder is not part of the hash.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake --build "$build" --target "$@" -- -j"${ONNXTRAIN_BUILD_JOBS:-2}"
